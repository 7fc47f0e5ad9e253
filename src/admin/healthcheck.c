/* The healthcheck probe (healthcheck.h): one HTTP/1.1 GET /ready per listener, with
 * Connection: close, read to the end of the answer or the deadline. Owns the socket client
 * and the wording of the verdict. Never sends a token, a body or more than one request per
 * listener, and never reads more than a small bounded answer. */
#include <errno.h>
#include <jansson.h>
#include <netdb.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "admin/admin.h"
#include "admin/healthcheck.h"
#include "edge/edge.h"

#define HC_MAX_ANSWER 8192

typedef struct {
  const char *what;   /* "ingest" or "admin" */
  char host[64];      /* the address connected to */
  int port;
  char why[256];      /* the failure, when the probe fails */
} probe_t;

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The address to reach a listener bound to ip: loopback for "any" (unset, 0.0.0.0, ::). */
static void probe_host(const char *ip, char *out, size_t cap) {
  if (!ip || !*ip || strcmp(ip, "0.0.0.0") == 0) snprintf(out, cap, "127.0.0.1");
  else if (strcmp(ip, "::") == 0 || strcmp(ip, "[::]") == 0) snprintf(out, cap, "::1");
  else snprintf(out, cap, "%s", ip);
}

/* Wait for ev on fd until the deadline: 1 ready, 0 timed out, -1 error (errno). */
static int wait_fd(int fd, short ev, int64_t deadline) {
  for (;;) {
    int64_t left = deadline - now_ms();
    if (left <= 0) return 0;
    struct pollfd p = {.fd = fd, .events = ev};
    int n = poll(&p, 1, (int)left);
    if (n > 0) return 1;
    if (n == 0) return 0;
    if (errno != EINTR) return -1;
  }
}

static bool fail(probe_t *p, const char *fmt, const char *arg) {
  snprintf(p->why, sizeof p->why, fmt, arg);
  return false;
}

static int connect_to(probe_t *p, int64_t deadline, int timeout_ms) {
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV};
  struct addrinfo *ai = NULL;
  char port[16];
  snprintf(port, sizeof port, "%d", p->port);
  int gr = getaddrinfo(p->host, port, &hints, &ai);
  if (gr != 0 || !ai) {
    fail(p, "bad address (%s)", gai_strerror(gr));
    return -1;
  }
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    freeaddrinfo(ai);
    fail(p, "socket: %s", strerror(errno));
    return -1;
  }
  int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
  freeaddrinfo(ai);
  if (rc != 0 && errno != EINPROGRESS) {
    int e = errno;
    close(fd);
    fail(p, "%s", e == ECONNREFUSED ? "connection refused" : strerror(e));
    return -1;
  }
  if (rc != 0) {
    int w = wait_fd(fd, POLLOUT, deadline);
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    if (w == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0) soerr = errno;
    if (w != 1 || soerr != 0) {
      if (w < 0) soerr = errno;
      close(fd);
      if (w == 0) snprintf(p->why, sizeof p->why, "timeout after %d ms (connecting)", timeout_ms);
      else fail(p, "%s", soerr == ECONNREFUSED ? "connection refused" : strerror(soerr));
      return -1;
    }
  }
  return fd;
}

/* "503 draining", "503 not_ready (store: no_space)": the status and what the body says. */
static void describe_status(probe_t *p, int status, const char *body, size_t blen) {
  json_t *j = body ? json_loadb(body, blen, 0, NULL) : NULL;
  const char *st = j ? json_string_value(json_object_get(j, "status")) : NULL;
  const char *reason = j ? json_string_value(json_object_get(json_object_get(j, "reasons"), "store")) : NULL;
  if (st && reason) snprintf(p->why, sizeof p->why, "status %d %s (store: %s)", status, st, reason);
  else if (st) snprintf(p->why, sizeof p->why, "status %d %s", status, st);
  else snprintf(p->why, sizeof p->why, "status %d", status);
  json_decref(j);
}

/* GET /ready on p: true on a 200, else false with p->why. */
static bool probe(probe_t *p, int timeout_ms) {
  int64_t deadline = now_ms() + timeout_ms;
  int fd = connect_to(p, deadline, timeout_ms);
  if (fd < 0) return false;
  char req[160];
  bool v6 = strchr(p->host, ':') != NULL;
  int rl = snprintf(req, sizeof req, "GET /ready HTTP/1.1\r\nHost: %s%s%s:%d\r\nConnection: close\r\n\r\n",
                    v6 ? "[" : "", p->host, v6 ? "]" : "", p->port);
  size_t sent = 0;
  while (sent < (size_t)rl) {
    ssize_t n = send(fd, req + sent, (size_t)rl - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += (size_t)n;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      int w = wait_fd(fd, POLLOUT, deadline);
      if (w == 1) continue;
      if (w == 0) snprintf(p->why, sizeof p->why, "timeout after %d ms (sending)", timeout_ms);
      else fail(p, "send: %s", strerror(errno));
      close(fd);
      return false;
    }
    fail(p, "send: %s", n < 0 ? strerror(errno) : "closed");
    close(fd);
    return false;
  }
  char *buf = malloc(HC_MAX_ANSWER + 1);
  size_t len = 0;
  bool eof = false, timed_out = false;
  while (buf && len < HC_MAX_ANSWER) {
    ssize_t n = recv(fd, buf + len, HC_MAX_ANSWER - len, 0);
    if (n > 0) {
      len += (size_t)n;
      continue;
    }
    if (n == 0) {
      eof = true;
      break;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN) {
      if (len == 0) fail(p, "%s", errno == ECONNRESET ? "connection reset" : strerror(errno));
      break;
    }
    int w = wait_fd(fd, POLLIN, deadline);
    if (w != 1) {
      timed_out = w == 0;
      if (!timed_out && len == 0) fail(p, "recv: %s", strerror(errno));
      break;
    }
  }
  close(fd);
  if (!buf) return fail(p, "%s", "out of memory");
  buf[len] = 0;
  int status = 0;
  char *hend = strstr(buf, "\r\n\r\n");
  if (len > 0 && (sscanf(buf, "HTTP/1.%*d %d", &status) != 1 || status < 100 || status > 999)) status = 0;
  bool ok = false;
  if (status == 0) {
    if (len == 0 && timed_out) snprintf(p->why, sizeof p->why, "timeout after %d ms (no answer)", timeout_ms);
    else if (len == 0 && eof) fail(p, "%s", "connection closed without an answer");
    else if (len > 0) fail(p, "%s", "not an HTTP answer");
  } else if (status == 200) {
    ok = true;
  } else {
    describe_status(p, status, hend ? hend + 4 : NULL, hend ? len - (size_t)(hend + 4 - buf) : 0);
  }
  free(buf);
  return ok;
}

int ak_healthcheck(const ak_config_t *cfg, int timeout_ms, FILE *out, FILE *err) {
  const ak_http_cfg_t *hc = ak_http_cfg(cfg);
  const ak_admin_cfg_t *ac = ak_admin_cfg(cfg);
  probe_t ps[2];
  size_t n = 0;
  ps[n] = (probe_t){.what = "ingest", .port = (int)hc->port};
  probe_host(hc->ip, ps[n].host, sizeof ps[n].host);
  n++;
  if (ac->enabled) {
    ps[n] = (probe_t){.what = "admin", .port = (int)ac->port};
    probe_host(ac->ip, ps[n].host, sizeof ps[n].host);
    n++;
  }
  for (size_t i = 0; i < n; i++) {
    probe_t *p = &ps[i];
    bool v6 = strchr(p->host, ':') != NULL;
    bool ok = p->port > 0 ? probe(p, timeout_ms)
                          : fail(p, "%s", "port 0 (picked at start): no fixed port to probe");
    if (!ok) {
      fprintf(err, "ankusa healthcheck: %s listener %s%s%s:%d /ready failed: %s\n", p->what, v6 ? "[" : "", p->host,
              v6 ? "]" : "", p->port, p->why);
      return 1;
    }
  }
  char admin[96] = "";
  if (n > 1) snprintf(admin, sizeof admin, ", admin %s:%d ready", ps[1].host, ps[1].port);
  fprintf(out, "ankusa healthcheck: ok (ingest %s:%d ready%s)\n", ps[0].host, ps[0].port, admin);
  return 0;
}
