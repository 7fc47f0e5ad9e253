#!/usr/bin/env bash
# Installs every Debian package that building, testing and benchmarking ankusa needs.
# Idempotent: when everything is present it only runs dpkg-query and exits.
set -euo pipefail

PKGS=(
  build-essential pkg-config meson ninja-build
  libuv1-dev libhttp-parser-dev librocksdb-dev libssl-dev libjansson-dev libyaml-dev
  libcurl4-openssl-dev libhiredis-dev
  libcriterion-dev
  python3 python3-pytest python3-pytest-xdist python3-yaml curl openssl
  clang libclang-rt-14-dev
  wrk nginx-light
  e2fsprogs util-linux
  libfuse3-dev fuse3
  prometheus
  redis-server
  librdkafka-dev librabbitmq-dev libnats-dev
  nats-server rabbitmq-server
  python3-confluent-kafka python3-pika python3-redis python3-jsonschema python3-botocore
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -ne 0 ]; then
  echo "deps: installing ${missing[*]}" >&2
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# npm tools the e2e tests run (not in Debian): into .deps/npm (git-ignored), only when
# missing. s3rver stands in for S3 behind tests/e2e/s3proxy.py (DESIGN.md §8).
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NPM_PREFIX="$ROOT/.deps/npm"
S3RVER_VERSION=3.7.1
if [ "$(node -p "require('$NPM_PREFIX/node_modules/s3rver/package.json').version" 2>/dev/null)" != "$S3RVER_VERSION" ]; then
  if ! command -v npm >/dev/null; then
    echo "deps: npm is missing: cannot install s3rver@$S3RVER_VERSION (the S3 e2e tests will fail)" >&2
  else
    echo "deps: installing s3rver@$S3RVER_VERSION into $NPM_PREFIX" >&2
    mkdir -p "$NPM_PREFIX"
    npm install --prefix "$NPM_PREFIX" --no-audit --no-fund --loglevel=error "s3rver@$S3RVER_VERSION" >/dev/null
  fi
fi
