/* What one HTTP delivery costs in CPU: ankusa's HTTP sink (on the shared HTTP client,
 * net/httpc.c, libcurl multi, as a node runs it) next to the floor, a minimal HTTP/1.1 keep-alive client on epoll sending the same
 * request bytes to the same receiver. Both keep C requests outstanding until N have been
 * answered; the figure is the process's user + system CPU per answered request
 * (getrusage), so it counts every thread the sink runs. bench/http_sink.sh starts the
 * receiver (nginx answering 204) and runs both modes in alternation.
 *
 *   http_sink sink PORT C N     ankusa's sink (src/sinks/http.c on src/net/httpc.c)
 *   http_sink raw PORT C N      the floor: writev of head + body, recv, parse the head
 *
 * The raw client is a yardstick, not a sink: no TLS, no timeouts, no redirect or
 * chunked handling, no egress guard. It shows what the kernel's loopback TCP costs per
 * request, and so how much of the sink's cost is user space on top of it. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include <jansson.h>
#include "core/clock.h"
#include "core/envelope.h"
#include "core/ids.h"
#include "net/httpc.h"
#include "sinks/egress.h"
#include "sinks/sink.h"

#define BODY_LEN 1024

extern const ak_sink_vtable_t ak_sink_http;

static uint8_t body[BODY_LEN];

static void new_id(uint8_t out[16]) {
  static ak_idgen_t g;
  ak_uuid7_new(&g, ak_now_ms(), out);
}

static double cpu_us(void) {
  struct rusage r;
  getrusage(RUSAGE_SELF, &r);
  return (double)(r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1e6 + (double)(r.ru_utime.tv_usec + r.ru_stime.tv_usec);
}

/* ---- ankusa's sink ---- */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static long outstanding, answered, failed;

static void on_done(void *ctx, const ak_sink_outcome_t *o) {
  (void)ctx;
  pthread_mutex_lock(&mu);
  outstanding--;
  answered++;
  if (o->result != AK_SINK_OK) failed++;
  pthread_cond_signal(&cv);
  pthread_mutex_unlock(&mu);
}

static int run_sink(int port, long c, long n) {
  char err[256] = "";
  const char *cidrs[] = {"127.0.0.0/8"};
  ak_egress_t *eg = ak_egress_new(cidrs, 1, true, err, sizeof err);
  if (!eg) {
    fprintf(stderr, "egress: %s\n", err);
    return 1;
  }
  char js[128];
  snprintf(js, sizeof js, "{\"url\":\"http://127.0.0.1:%d/hook\",\"timeout_ms\":30000}", port);
  json_t *opts = json_loads(js, 0, NULL);
  /* a client of its own, as the node's (ak_mod_httpc) is to every sink */
  ak_httpc_t *hc = ak_httpc_new(NULL, err, sizeof err);
  void *s = hc ? ak_sink_http.create(opts, &(ak_sink_ctx_t){.source_id = "bench", .egress = eg, .httpc = hc}, err,
                                     sizeof err)
               : NULL;
  json_decref(opts);
  if (!s) {
    fprintf(stderr, "sink: %s\n", err);
    ak_httpc_free(hc);
    return 1;
  }
  ak_envelope_t env = {.received_at_ms = 1, .tenant = "default", .tenant_len = 7, .source = "bench",
                       .source_len = 5, .method = "POST", .method_len = 4, .content_type = "application/json",
                       .content_type_len = 16, .body = body, .body_len = BODY_LEN};
  new_id(env.id);
  char id[AK_UUID_STR_LEN];
  ak_uuid_format(env.id, id);
  ak_sink_attempt_t att = {.env = &env, .attempt = 1, .idempotency_key = id};
  double t0 = cpu_us();
  for (long sent = 0; sent < n; sent++) {
    pthread_mutex_lock(&mu);
    while (outstanding >= c) pthread_cond_wait(&cv, &mu);
    outstanding++;
    pthread_mutex_unlock(&mu);
    ak_sink_http.deliver(s, &att, NULL, on_done);
  }
  pthread_mutex_lock(&mu);
  while (answered < n) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  double used = cpu_us() - t0;
  ak_sink_http.destroy(s);
  ak_httpc_free(hc);
  ak_egress_free(eg);
  if (failed) {
    fprintf(stderr, "%ld of %ld deliveries failed\n", failed, n);
    return 1;
  }
  printf("sink %.2f\n", used / (double)n);
  return 0;
}

/* ---- the floor ---- */

typedef struct {
  int fd;
  size_t got;
  char buf[4096];
} conn_t;

static int send_req(int fd, const char *head, size_t hl) {
  struct iovec iov[2] = {{(void *)head, hl}, {body, BODY_LEN}};
  ssize_t w = writev(fd, iov, 2);
  return w == (ssize_t)(hl + BODY_LEN) ? 0 : -1; /* loopback, small: all or an error */
}

static int run_raw(int port, long c, long n) {
  char id[AK_UUID_STR_LEN];
  uint8_t raw[16];
  new_id(raw);
  ak_uuid_format(raw, id);
  /* the header lines ankusa's sink sends for this hook (its User-Agent, identity lines) */
  char head[1024];
  size_t hl = (size_t)snprintf(head, sizeof head,
                               "POST /hook HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUser-Agent: ankusa\r\nAccept: */*\r\n"
                               "content-type: application/json\r\nx-ankusa-id: %s\r\nx-ankusa-source: bench\r\n"
                               "x-ankusa-idempotency-key: %s\r\nx-ankusa-tenant: default\r\n"
                               "Content-Length: %d\r\n\r\n",
                               port, id, id, BODY_LEN);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  conn_t *cs = calloc((size_t)c, sizeof *cs);
  if (ep < 0 || !cs) return 1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  long started = 0, done = 0;
  double t0 = cpu_us();
  for (long i = 0; i < c && started < n; i++) {
    cs[i].fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(cs[i].fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (cs[i].fd < 0 || connect(cs[i].fd, (struct sockaddr *)&a, sizeof a) != 0) {
      perror("connect");
      return 1;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &cs[i]};
    epoll_ctl(ep, EPOLL_CTL_ADD, cs[i].fd, &ev);
    if (send_req(cs[i].fd, head, hl) != 0) return 1;
    started++;
  }
  struct epoll_event evs[256];
  while (done < n) {
    int k = epoll_wait(ep, evs, 256, 5000);
    if (k <= 0) {
      fprintf(stderr, "raw: no answer within 5 s\n");
      return 1;
    }
    for (int i = 0; i < k; i++) {
      conn_t *cn = evs[i].data.ptr;
      ssize_t r = recv(cn->fd, cn->buf + cn->got, sizeof cn->buf - cn->got - 1, 0);
      if (r <= 0) {
        fprintf(stderr, "raw: connection closed (%s)\n", r < 0 ? strerror(errno) : "eof");
        return 1;
      }
      cn->got += (size_t)r;
      cn->buf[cn->got] = 0;
      char *end = strstr(cn->buf, "\r\n\r\n");
      if (!end) continue;
      size_t head_len = (size_t)(end + 4 - cn->buf), len = 0;
      char *cl = strcasestr(cn->buf, "\r\ncontent-length:");
      if (cl && cl < end) len = (size_t)strtoul(cl + 17, NULL, 10);
      if (cn->got < head_len + len) continue;
      if (strncmp(cn->buf, "HTTP/1.1 2", 10) != 0) {
        fprintf(stderr, "raw: %.40s\n", cn->buf);
        return 1;
      }
      cn->got = 0; /* one request outstanding per connection: nothing follows */
      done++;
      if (started < n) {
        if (send_req(cn->fd, head, hl) != 0) return 1;
        started++;
      }
    }
  }
  double used = cpu_us() - t0;
  for (long i = 0; i < c; i++)
    if (cs[i].fd > 0) close(cs[i].fd);
  free(cs);
  close(ep);
  printf("raw %.2f\n", used / (double)n);
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 5 || (strcmp(argv[1], "sink") && strcmp(argv[1], "raw"))) {
    fprintf(stderr, "usage: %s sink|raw PORT CONCURRENCY REQUESTS\n", argv[0]);
    return 2;
  }
  int port = atoi(argv[2]);
  long c = atol(argv[3]), n = atol(argv[4]);
  if (port <= 0 || c <= 0 || n <= 0) return 2;
  for (size_t i = 0; i < BODY_LEN; i++) body[i] = (uint8_t)"{\"a\":[1,2,3],\"b\":\"xyz\"}"[i % 23];
  return strcmp(argv[1], "sink") == 0 ? run_sink(port, c, n) : run_raw(port, c, n);
}
