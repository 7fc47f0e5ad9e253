# ankusa's container image: Debian 12 (bookworm), the binary built in a first stage, a
# runtime stage with only the shared libraries it loads, run as the non-root user ankusa.
#
#   docker build -t ankusa .
#   docker run -d --name ankusa -p 4000:4000 -v ankusa-data:/var/lib/ankusa \
#     -v $PWD/ankusa.yml:/etc/ankusa/ankusa.yml:ro ankusa
#   docker stop -t 40 ankusa
#
# Stopping: SIGTERM drains (docs/deployment.md): /ready turns 503 at once, the ingest
# listener serves on for listener.drain_delay_ms (5 s) so a balancer notices, then stops
# accepting and answers what is in flight (up to 20 s more), the writer commits what is
# queued and deliveries in flight settle. Docker's default 10 s before SIGKILL is too
# short: use `docker stop -t 40` (compose: `stop_grace_period: 40s`). A SIGKILL loses
# nothing acknowledged, only answers still in flight.

# ---- build: the toolchain and -dev packages of scripts/deps.sh (the test-only ones left out)
FROM debian:bookworm-slim AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential pkg-config meson ninja-build \
      libuv1-dev libhttp-parser-dev librocksdb-dev libssl-dev libjansson-dev libyaml-dev \
      libcurl4-openssl-dev libhiredis-dev librdkafka-dev librabbitmq-dev libnats-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN make && strip build/ankusa

# ---- runtime: the libraries build/ankusa links, CA certificates for https sinks
FROM debian:bookworm-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libuv1 libhttp-parser2.9 librocksdb7.8 libjansson4 libyaml-0-2 libssl3 libcurl4 libhiredis0.14 librdkafka1 librabbitmq4 libnats3.4 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --home-dir /var/lib/ankusa --shell /usr/sbin/nologin ankusa \
 && install -d -m 0750 -o ankusa -g ankusa /var/lib/ankusa \
 && install -d -m 0755 /etc/ankusa
COPY --from=build /src/build/ankusa /usr/bin/ankusa
COPY deploy/docker/ankusa.yml /etc/ankusa/ankusa.yml

# the store (node.data_dir in the config): keep it on a volume
VOLUME ["/var/lib/ankusa"]
WORKDIR /var/lib/ankusa
USER ankusa

# 4000 ingest, 4001 claim gateway, 4002 admin and /metrics, 4003 route admin (the
# original's ports; 4001 and 4003 serve once those features are built). The admin
# listener binds 127.0.0.1 unless admin.principals are set (docs/deployment.md).
EXPOSE 4000 4001 4002 4003

# GET /ready on the ingest listener, then on the admin one: 503 while the store cannot
# take a synced write (a full disk takes the node out of rotation) and while draining.
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
  CMD ["ankusa", "healthcheck", "--config", "/etc/ankusa/ankusa.yml"]

STOPSIGNAL SIGTERM
ENTRYPOINT ["ankusa"]
CMD ["serve", "--config", "/etc/ankusa/ankusa.yml"]
