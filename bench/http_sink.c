/* What one HTTP delivery costs in CPU: ankusa's HTTP sink (on the shared HTTP client,
 * net/httpc.c, libcurl multi, as a node runs it) next to a bare libcurl multi loop and the
 * floor, a minimal HTTP/1.1 keep-alive client on epoll, all sending the same request bytes
 * to the same receiver. Each keeps C requests outstanding until N have been answered; the
 * figure is the process's user + system CPU per answered request (getrusage), so it
 * counts every thread the sink runs. bench/http_sink.sh starts the receiver (nginx
 * answering 201) and runs the modes in alternation.
 *
 *   http_sink sink PORT C N     ankusa's sink (src/sinks/http.c on src/net/httpc.c)
 *   http_sink curl PORT C N     bare libcurl: one thread, one CURLM driven by
 *                               curl_multi_socket_action from an epoll set, C easy handles
 *                               reused, one header list built once; no ankusa code
 *   http_sink curlp PORT C N    the same with curl_multi_perform + curl_multi_poll
 *   http_sink raw PORT C N      the floor: writev of head + body, recv, parse the head
 *
 * The sink is driven the way the dispatcher drives it: completions are queued, only the
 * first of a burst wakes the submitting thread, which then refills every free place.
 *
 * Neither yardstick is a sink: no timeouts handled, no egress guard, no per-hook headers
 * (the raw one: no TLS, no redirect or chunked handling either). The bare loop shows what
 * libcurl itself costs per request, the raw one what the kernel's loopback TCP costs. */
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
#include <time.h>
#include <unistd.h>
#include <curl/curl.h>
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
static long outstanding, answered, failed, unseen;

/* as the dispatcher's on_sink_done: queue the outcome, wake the submitter only when the
 * queue was empty (it takes the whole queue on every turn) */
static void on_done(void *ctx, const ak_sink_outcome_t *o) {
  (void)ctx;
  pthread_mutex_lock(&mu);
  outstanding--;
  answered++;
  if (o->result != AK_SINK_OK) failed++;
  if (unseen++ == 0) pthread_cond_signal(&cv);
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
  const char *nw = getenv("HTTPC_WORKERS"); /* the client's threads; unset = its default */
  ak_httpc_t *hc = ak_httpc_new(&(ak_httpc_opts_t){.workers = nw ? (unsigned)atoi(nw) : 0}, err, sizeof err);
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
  for (long sent = 0; sent < n;) {
    pthread_mutex_lock(&mu);
    while (outstanding >= c && !unseen) pthread_cond_wait(&cv, &mu);
    unseen = 0;
    long room = c - outstanding;
    if (room > n - sent) room = n - sent;
    outstanding += room;
    pthread_mutex_unlock(&mu);
    for (long i = 0; i < room; i++, sent++) ak_sink_http.deliver(s, &att, NULL, on_done);
  }
  pthread_mutex_lock(&mu);
  while (answered < n) {
    unseen = 0;
    pthread_cond_wait(&cv, &mu);
  }
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

/* ---- bare libcurl multi ---- */

typedef struct {
  int ep;
  int64_t deadline_ms; /* -1 = none */
} bare_t;

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static CURLM *bare_multi;

/* the pattern of libcurl's own hiperfifo example: ADD on first sight, MOD after, DEL on REMOVE */
static int bare_socket(CURL *e, curl_socket_t fd, int what, void *userp, void *socketp) {
  bare_t *b = userp;
  (void)e;
  if (what == CURL_POLL_REMOVE) {
    epoll_ctl(b->ep, EPOLL_CTL_DEL, fd, NULL);
    curl_multi_assign(bare_multi, fd, NULL);
    return 0;
  }
  struct epoll_event ev = {.events = ((what & CURL_POLL_IN) ? EPOLLIN : 0u) | ((what & CURL_POLL_OUT) ? EPOLLOUT : 0u),
                           .data.fd = fd};
  if (socketp) {
    epoll_ctl(b->ep, EPOLL_CTL_MOD, fd, &ev);
  } else {
    epoll_ctl(b->ep, EPOLL_CTL_ADD, fd, &ev);
    curl_multi_assign(bare_multi, fd, b);
  }
  return 0;
}

static int bare_timer(CURLM *m, long timeout_ms, void *userp) {
  bare_t *b = userp;
  (void)m;
  b->deadline_ms = timeout_ms < 0 ? -1 : mono_ms() + timeout_ms;
  return 0;
}

static size_t bare_discard(char *p, size_t sz, size_t nm, void *ud) {
  (void)p;
  (void)ud;
  return sz * nm;
}

static int run_curl(int port, long c, long n, bool perform) {
  char id[AK_UUID_STR_LEN], url[64], line[128];
  uint8_t raw[16];
  new_id(raw);
  ak_uuid_format(raw, id);
  snprintf(url, sizeof url, "http://127.0.0.1:%d/hook", port);
  curl_global_init(CURL_GLOBAL_DEFAULT);
  /* the header lines ankusa's sink sends for this hook, built once */
  struct curl_slist *h = curl_slist_append(NULL, "content-type: application/json");
  snprintf(line, sizeof line, "x-ankusa-id: %s", id);
  h = curl_slist_append(h, line);
  h = curl_slist_append(h, "x-ankusa-source: bench");
  snprintf(line, sizeof line, "x-ankusa-idempotency-key: %s", id);
  h = curl_slist_append(h, line);
  h = curl_slist_append(h, "x-ankusa-tenant: default");
  h = curl_slist_append(h, "Expect:");
  bare_t b = {.ep = epoll_create1(EPOLL_CLOEXEC), .deadline_ms = -1};
  CURLM *m = bare_multi = curl_multi_init();
  curl_multi_setopt(m, CURLMOPT_SOCKETFUNCTION, bare_socket);
  curl_multi_setopt(m, CURLMOPT_SOCKETDATA, &b);
  curl_multi_setopt(m, CURLMOPT_TIMERFUNCTION, bare_timer);
  curl_multi_setopt(m, CURLMOPT_TIMERDATA, &b);
  curl_multi_setopt(m, CURLMOPT_MAXCONNECTS, c);
  long started = 0, done = 0;
  double t0 = cpu_us();
  for (long i = 0; i < c && started < n; i++, started++) {
    CURL *e = curl_easy_init();
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "ankusa/" AK_VERSION);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)BODY_LEN);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, bare_discard);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 30000L);
    curl_multi_add_handle(m, e);
  }
  struct epoll_event evs[256];
  int running;
  while (done < n) {
    if (perform) { /* curl_multi_perform + curl_multi_poll: the plain way, every transfer each turn */
      curl_multi_perform(m, &running);
      goto settle;
    }
    int wait_ms = -1;
    if (b.deadline_ms >= 0) {
      int64_t left = b.deadline_ms - mono_ms();
      wait_ms = left < 0 ? 0 : (int)left;
    }
    int k = epoll_wait(b.ep, evs, 256, wait_ms < 0 || wait_ms > 5000 ? 5000 : wait_ms);
    for (int i = 0; i < k; i++) {
      uint32_t ev = evs[i].events;
      int mask = ((ev & (EPOLLIN | EPOLLHUP)) ? CURL_CSELECT_IN : 0) | ((ev & EPOLLOUT) ? CURL_CSELECT_OUT : 0) |
                 ((ev & EPOLLERR) ? CURL_CSELECT_ERR : 0);
      curl_multi_socket_action(m, evs[i].data.fd, mask, &running);
    }
    if (b.deadline_ms >= 0 && b.deadline_ms <= mono_ms()) {
      b.deadline_ms = -1;
      curl_multi_socket_action(m, CURL_SOCKET_TIMEOUT, 0, &running);
    }
  settle:;
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(m, &left))) {
      if (msg->msg != CURLMSG_DONE) continue;
      CURL *e = msg->easy_handle;
      long status = 0;
      curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
      if (msg->data.result != CURLE_OK || status < 200 || status > 299) {
        fprintf(stderr, "curl: %s, status %ld\n", curl_easy_strerror(msg->data.result), status);
        return 1;
      }
      done++;
      curl_multi_remove_handle(m, e);
      if (started < n) {
        curl_multi_add_handle(m, e);
        started++;
      } else {
        curl_easy_cleanup(e);
      }
    }
    if (perform && done < n) curl_multi_poll(m, NULL, 0, 1000, NULL);
  }
  double used = cpu_us() - t0;
  curl_multi_cleanup(m);
  curl_slist_free_all(h);
  close(b.ep);
  printf("%s %.2f\n", perform ? "curlp" : "curl", used / (double)n);
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
                               "POST /hook HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUser-Agent: ankusa/" AK_VERSION "\r\nAccept: */*\r\n"
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
  if (argc != 5 || (strcmp(argv[1], "sink") && strcmp(argv[1], "curl") && strcmp(argv[1], "curlp") &&
                    strcmp(argv[1], "raw"))) {
    fprintf(stderr, "usage: %s sink|curl|curlp|raw PORT CONCURRENCY REQUESTS\n", argv[0]);
    return 2;
  }
  int port = atoi(argv[2]);
  long c = atol(argv[3]), n = atol(argv[4]);
  if (port <= 0 || c <= 0 || n <= 0) return 2;
  for (size_t i = 0; i < BODY_LEN; i++) body[i] = (uint8_t)"{\"a\":[1,2,3],\"b\":\"xyz\"}"[i % 23];
  if (strcmp(argv[1], "sink") == 0) return run_sink(port, c, n);
  if (strcmp(argv[1], "curl") == 0) return run_curl(port, c, n, false);
  return strcmp(argv[1], "curlp") == 0 ? run_curl(port, c, n, true) : run_raw(port, c, n);
}
