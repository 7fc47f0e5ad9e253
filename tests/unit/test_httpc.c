/* Unit tests: the shared HTTP client (net/httpc.h) against a tiny HTTP/1.1 server in this
 * process (one thread, poll, keep-alive, 127.0.0.1 port 0) that counts the TCP
 * connections it accepts: what a completion carries (status, wanted headers, body,
 * truncation at max_response_bytes), methods on a reused handle, timeouts, the address
 * callback refusing a new connection (no TCP connection is made) and a kept one (the
 * request never goes out), the outstanding bound, cancellation by owner, free, and that
 * sinks built on one client share its threads instead of starting their own. */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <jansson.h>
#include "core/envelope.h"
#include "net/httpc.h"
#include "sinks/egress.h"
#include "sinks/sink.h"

extern const ak_sink_vtable_t ak_sink_http;

/* ---- the server ------------------------------------------------------------------- */

#define MAX_CONNS 64

typedef struct {
  int fd;
  char in[1 << 16];
  size_t inlen;
  char *out;
  size_t outlen, outoff;
  int64_t due_ms; /* > 0: a /sleep answer waits until then */
} sconn_t;

typedef struct {
  int lfd, wake[2];
  unsigned short port;
  pthread_t th;
  pthread_mutex_t mu;
  int accepts, requests;
  char method[16], path[256], head[8192];
  size_t body_len;
  bool has_length;
  char body[256];
  sconn_t *conns[MAX_CONNS];
} srv_t;

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void conn_close(srv_t *s, int i) {
  close(s->conns[i]->fd);
  free(s->conns[i]->out);
  free(s->conns[i]);
  s->conns[i] = NULL;
}

/* A header's value in a request head ("" terminated), or NULL. */
static const char *head_value(const char *head, const char *name, char *out, size_t len) {
  size_t nl = strlen(name);
  for (const char *p = strstr(head, "\r\n"); p && p[2]; p = strstr(p + 2, "\r\n")) {
    const char *l = p + 2;
    if (strncasecmp(l, name, nl) == 0 && l[nl] == ':') {
      l += nl + 1;
      while (*l == ' ') l++;
      const char *e = strstr(l, "\r\n");
      size_t vl = e ? (size_t)(e - l) : strlen(l);
      if (vl >= len) vl = len - 1;
      memcpy(out, l, vl);
      out[vl] = '\0';
      return out;
    }
  }
  return NULL;
}

/* Paths: /status/<code>, /hdr (202 with repeated and spaced headers), /big/<bytes>,
 * /sleep/<ms>, /echo (the request body back). */
static void respond(srv_t *s, sconn_t *c, const char *path, const char *body, size_t blen) {
  int code = 200;
  const char *extra = "";
  size_t big = 0;
  const char *rb = "ok";
  size_t rbl = 2;
  if (strncmp(path, "/status/", 8) == 0) {
    code = atoi(path + 8);
  } else if (strcmp(path, "/hdr") == 0) {
    code = 202;
    extra = "X-One: first\r\nRetry-After:   5  \r\nx-one: second\r\n";
  } else if (strncmp(path, "/big/", 5) == 0) {
    big = (size_t)atol(path + 5);
  } else if (strncmp(path, "/sleep/", 7) == 0) {
    c->due_ms = mono_ms() + atoi(path + 7);
  } else if (strcmp(path, "/echo") == 0) {
    rb = body;
    rbl = blen;
  }
  (void)s;
  size_t n = big ? big : rbl;
  char head[512];
  int hl = snprintf(head, sizeof head, "HTTP/1.1 %d X\r\nContent-Length: %zu\r\n%s\r\n", code, n, extra);
  c->out = malloc((size_t)hl + n);
  memcpy(c->out, head, (size_t)hl);
  if (big) memset(c->out + hl, 'x', big);
  else if (rbl) memcpy(c->out + hl, rb, rbl);
  c->outlen = (size_t)hl + n;
  c->outoff = 0;
}

/* A whole request in c->in: note it, queue its answer, drop it from the buffer. */
static void take_request(srv_t *s, sconn_t *c) {
  char *end = memmem(c->in, c->inlen, "\r\n\r\n", 4);
  if (!end) return;
  size_t hl = (size_t)(end - c->in) + 4;
  char head[8192];
  size_t cl = hl < sizeof head ? hl : sizeof head - 1;
  memcpy(head, c->in, cl);
  head[cl] = '\0';
  char v[64];
  bool has_length = head_value(head, "content-length", v, sizeof v) != NULL;
  size_t blen = has_length ? (size_t)atol(v) : 0;
  if (c->inlen < hl + blen) return;
  char method[16] = "", path[256] = "";
  sscanf(head, "%15s %255s", method, path);
  pthread_mutex_lock(&s->mu);
  s->requests++;
  snprintf(s->method, sizeof s->method, "%s", method);
  snprintf(s->path, sizeof s->path, "%s", path);
  snprintf(s->head, sizeof s->head, "%s", head);
  s->has_length = has_length;
  s->body_len = blen;
  memcpy(s->body, c->in + hl, blen < sizeof s->body ? blen : sizeof s->body);
  pthread_mutex_unlock(&s->mu);
  respond(s, c, path, c->in + hl, blen);
  memmove(c->in, c->in + hl + blen, c->inlen - hl - blen);
  c->inlen -= hl + blen;
}

static void *serve(void *arg) {
  srv_t *s = arg;
  for (;;) {
    struct pollfd pf[MAX_CONNS + 2];
    int idx[MAX_CONNS + 2];
    int n = 0;
    int64_t now = mono_ms(), next = -1;
    pf[n] = (struct pollfd){.fd = s->wake[0], .events = POLLIN};
    idx[n++] = -2;
    pf[n] = (struct pollfd){.fd = s->lfd, .events = POLLIN};
    idx[n++] = -1;
    for (int i = 0; i < MAX_CONNS; i++) {
      sconn_t *c = s->conns[i];
      if (!c) continue;
      short ev = POLLIN;
      if (c->out && c->due_ms <= now) ev = POLLOUT;
      else if (c->out && (next < 0 || c->due_ms < next)) next = c->due_ms;
      pf[n] = (struct pollfd){.fd = c->fd, .events = ev};
      idx[n++] = i;
    }
    int wait = next < 0 ? -1 : (int)(next - now > 0 ? next - now : 0);
    if (poll(pf, (nfds_t)n, wait) < 0 && errno != EINTR) break;
    if (pf[0].revents) break;
    for (int k = 1; k < n; k++) {
      if (!pf[k].revents) continue;
      if (idx[k] == -1) {
        int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) continue;
        int i = 0;
        while (i < MAX_CONNS && s->conns[i]) i++;
        if (i == MAX_CONNS) {
          close(fd);
          continue;
        }
        s->conns[i] = calloc(1, sizeof(sconn_t));
        s->conns[i]->fd = fd;
        pthread_mutex_lock(&s->mu);
        s->accepts++;
        pthread_mutex_unlock(&s->mu);
        continue;
      }
      int i = idx[k];
      sconn_t *c = s->conns[i];
      if (c->out && (pf[k].revents & POLLOUT)) {
        ssize_t w = send(c->fd, c->out + c->outoff, c->outlen - c->outoff, MSG_NOSIGNAL);
        if (w < 0 && errno != EAGAIN) {
          conn_close(s, i);
          continue;
        }
        if (w > 0) c->outoff += (size_t)w;
        if (c->outoff == c->outlen) {
          free(c->out);
          c->out = NULL;
          c->due_ms = 0;
          take_request(s, c); /* one sent behind it already */
        }
        continue;
      }
      if (pf[k].revents & (POLLIN | POLLHUP | POLLERR)) {
        ssize_t r = recv(c->fd, c->in + c->inlen, sizeof c->in - c->inlen, 0);
        if (r <= 0) {
          if (r < 0 && errno == EAGAIN) continue;
          conn_close(s, i);
          continue;
        }
        c->inlen += (size_t)r;
        if (!c->out) take_request(s, c);
      }
    }
  }
  for (int i = 0; i < MAX_CONNS; i++)
    if (s->conns[i]) conn_close(s, i);
  return NULL;
}

static srv_t *srv_start(void) {
  srv_t *s = calloc(1, sizeof *s);
  pthread_mutex_init(&s->mu, NULL);
  cr_assert_eq(pipe(s->wake), 0);
  s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET};
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  cr_assert_eq(bind(s->lfd, (struct sockaddr *)&sa, sizeof sa), 0);
  cr_assert_eq(listen(s->lfd, 128), 0);
  socklen_t sl = sizeof sa;
  getsockname(s->lfd, (struct sockaddr *)&sa, &sl);
  s->port = ntohs(sa.sin_port);
  cr_assert_eq(pthread_create(&s->th, NULL, serve, s), 0);
  return s;
}

static void srv_stop(srv_t *s) {
  cr_assert_eq(write(s->wake[1], "x", 1), 1);
  pthread_join(s->th, NULL);
  close(s->lfd);
  close(s->wake[0]);
  close(s->wake[1]);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

static int srv_accepts(srv_t *s) {
  pthread_mutex_lock(&s->mu);
  int n = s->accepts;
  pthread_mutex_unlock(&s->mu);
  return n;
}

static int srv_requests(srv_t *s) {
  pthread_mutex_lock(&s->mu);
  int n = s->requests;
  pthread_mutex_unlock(&s->mu);
  return n;
}

/* ---- completions ------------------------------------------------------------------ */

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int calls;
  ak_httpc_result_t result;
  long status;
  char why[160];
  char hdr[AK_HTTPC_MAX_WANT][AK_HTTPC_VALUE_MAX];
  bool has_hdr[AK_HTTPC_MAX_WANT];
  size_t nwant;
  size_t body_bytes;
  bool truncated, has_body;
  char user[AK_HTTPC_USER_MAX];
  unsigned char body[200000];
} waiter_t;

static void waiter_init(waiter_t *w) {
  memset(w, 0, sizeof *w);
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
}

static void on_done(void *ctx, const ak_httpc_resp_t *rs) {
  waiter_t *w = ctx;
  pthread_mutex_lock(&w->mu);
  w->calls++;
  w->result = rs->result;
  w->status = rs->status;
  snprintf(w->why, sizeof w->why, "%s", rs->why ? rs->why : "(null)");
  for (size_t i = 0; i < w->nwant; i++) {
    w->has_hdr[i] = rs->headers && rs->headers[i];
    if (w->has_hdr[i]) snprintf(w->hdr[i], sizeof w->hdr[i], "%s", rs->headers[i]);
  }
  w->body_bytes = rs->body_bytes;
  w->truncated = rs->truncated;
  w->has_body = rs->body != NULL;
  if (rs->body && rs->body_bytes <= sizeof w->body) memcpy(w->body, rs->body, rs->body_bytes);
  if (rs->user) memcpy(w->user, rs->user, sizeof w->user);
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

static int calls_of(waiter_t *w) {
  pthread_mutex_lock(&w->mu);
  int n = w->calls;
  pthread_mutex_unlock(&w->mu);
  return n;
}

static void wait_for(waiter_t *w, int secs) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += secs;
  pthread_mutex_lock(&w->mu);
  while (w->calls == 0)
    if (pthread_cond_timedwait(&w->cv, &w->mu, &until) != 0) break;
  pthread_mutex_unlock(&w->mu);
}

/* Submit and wait for the one completion (and a little longer, for a second one). */
static void run(ak_httpc_t *c, const ak_httpc_req_t *rq, waiter_t *w) {
  waiter_init(w);
  w->nwant = rq->nwant;
  cr_assert_eq(ak_httpc_submit(c, rq, on_done, w), 0);
  wait_for(w, 15);
  usleep(20 * 1000);
  cr_assert_eq(calls_of(w), 1, "done called %d times", calls_of(w));
}

static char *url(srv_t *s, const char *path) {
  static char buf[4][256];
  static int k;
  char *u = buf[k++ % 4];
  snprintf(u, 256, "http://127.0.0.1:%u%s", s->port, path);
  return u;
}

static ak_httpc_t *client(unsigned workers, size_t max_outstanding, unsigned max_active) {
  char err[160] = "";
  ak_httpc_t *c = ak_httpc_new(&(ak_httpc_opts_t){.name = "ak-httpc-test", .workers = workers,
                                                 .max_outstanding = max_outstanding, .max_active = max_active},
                               err, sizeof err);
  cr_assert_not_null(c, "%s", err);
  return c;
}

/* ---- tests ------------------------------------------------------------------------ */

Test(httpc, completion_carries_status_headers_and_body) {
  srv_t *s = srv_start();
  ak_httpc_t *c = client(0, 0, 0);
  static waiter_t w;
  const char *lines[] = {"X-Test: 1", "Expect:"};
  const char *want[] = {"x-one", "Retry-After", "x-missing"};
  char mine[AK_HTTPC_USER_MAX] = "the caller's own";
  run(c, &(ak_httpc_req_t){.url = url(s, "/hdr"), .headers = lines, .nheaders = 2, .body = "hello", .body_len = 5,
                           .timeout_ms = 5000, .max_response_bytes = 1024, .want_headers = want, .nwant = 3,
                           .user = mine, .user_len = sizeof mine},
      &w);
  cr_expect(memcmp(w.user, mine, sizeof mine) == 0, "user bytes handed back");
  cr_expect_eq(w.result, AK_HTTPC_OK, "%s", w.why);
  cr_expect_eq(w.status, 202);
  cr_expect_str_eq(w.why, "");
  cr_expect(w.has_hdr[0] && strcmp(w.hdr[0], "second") == 0, "the last x-one: \"%s\"", w.hdr[0]);
  cr_expect(w.has_hdr[1] && strcmp(w.hdr[1], "5") == 0, "retry-after trimmed: \"%s\"", w.hdr[1]);
  cr_expect(!w.has_hdr[2], "an absent header is NULL");
  cr_expect_eq(w.body_bytes, 2);
  cr_expect(!w.truncated);
  cr_expect(!w.has_body, "no body unless asked for");
  pthread_mutex_lock(&s->mu);
  char v[64];
  cr_expect_str_eq(s->method, "POST");
  cr_expect_str_eq(s->path, "/hdr");
  cr_expect_eq(s->body_len, 5);
  cr_expect(memcmp(s->body, "hello", 5) == 0);
  cr_expect(head_value(s->head, "x-test", v, sizeof v) && strcmp(v, "1") == 0, "header line sent");
  cr_expect_null(head_value(s->head, "expect", v, sizeof v), "\"name:\" removes a header");
  pthread_mutex_unlock(&s->mu);

  /* keep_body: the bytes read come back */
  const char *big = "{\"echo\":true}";
  run(c, &(ak_httpc_req_t){.method = "PUT", .url = url(s, "/echo"), .body = big, .body_len = strlen(big),
                           .timeout_ms = 5000, .max_response_bytes = 1024, .keep_body = true},
      &w);
  cr_expect_eq(w.result, AK_HTTPC_OK, "%s", w.why);
  cr_expect(w.has_body && w.body_bytes == strlen(big) && memcmp(w.body, big, strlen(big)) == 0, "body kept");
  ak_httpc_free(c);
  srv_stop(s);
}

Test(httpc, max_response_bytes_truncates) {
  srv_t *s = srv_start();
  ak_httpc_t *c = client(0, 0, 0);
  static waiter_t w;
  run(c, &(ak_httpc_req_t){.method = "GET", .url = url(s, "/big/150000"), .timeout_ms = 5000,
                           .max_response_bytes = 1000, .keep_body = true},
      &w);
  cr_expect_eq(w.result, AK_HTTPC_OK, "the status counts: %s", w.why);
  cr_expect_eq(w.status, 200);
  cr_expect(w.truncated, "more than the cap was there");
  cr_expect_eq(w.body_bytes, 1000, "read exactly up to the cap: %zu", w.body_bytes);
  bool all_x = true;
  for (size_t i = 0; i < 1000; i++) all_x = all_x && w.body[i] == 'x';
  cr_expect(all_x);
  /* exactly the cap is not a truncation */
  run(c, &(ak_httpc_req_t){.method = "GET", .url = url(s, "/big/1000"), .timeout_ms = 5000,
                           .max_response_bytes = 1000},
      &w);
  cr_expect_eq(w.result, AK_HTTPC_OK, "%s", w.why);
  cr_expect(!w.truncated);
  cr_expect_eq(w.body_bytes, 1000);
  /* a cap of 0: the status alone */
  run(c, &(ak_httpc_req_t){.url = url(s, "/big/10"), .timeout_ms = 5000}, &w);
  cr_expect_eq(w.result, AK_HTTPC_OK, "%s", w.why);
  cr_expect(w.truncated);
  cr_expect_eq(w.body_bytes, 0);
  ak_httpc_free(c);
  srv_stop(s);
}

/* One handle (one worker, one transfer at a time) through every method and back: each
 * request is sent as its own method says, nothing of the previous one carries over. */
Test(httpc, methods_on_a_reused_handle) {
  srv_t *s = srv_start();
  ak_httpc_t *c = client(1, 0, 1);
  static waiter_t w;
  struct {
    const char *method, *sent;
    bool body;
  } cases[] = {{NULL, "POST", true}, {"HEAD", "HEAD", false}, {"POST", "POST", true}, {"GET", "GET", false},
               {"PATCH", "PATCH", true}, {"DELETE", "DELETE", true}, {"GET", "GET", false}, {"PUT", "PUT", true},
               {NULL, "POST", true}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    run(c, &(ak_httpc_req_t){.method = cases[i].method, .url = url(s, "/status/204"), .body = "abc", .body_len = 3,
                             .timeout_ms = 5000},
        &w);
    cr_expect_eq(w.result, AK_HTTPC_OK, "%s: %s", cases[i].sent, w.why);
    cr_expect_eq(w.status, 204);
    pthread_mutex_lock(&s->mu);
    cr_expect_str_eq(s->method, cases[i].sent, "case %zu", i);
    cr_expect_eq(s->body_len, cases[i].body ? 3 : 0, "case %zu (%s)", i, cases[i].sent);
    cr_expect_eq(s->has_length, cases[i].body, "case %zu (%s): content-length", i, cases[i].sent);
    pthread_mutex_unlock(&s->mu);
  }
  cr_expect_eq(srv_accepts(s), 1, "one kept connection for all of them");
  ak_httpc_free(c);
  srv_stop(s);
}

/* aws_sigv4 + userpwd: libcurl signs the request (the header lines we hand it included),
 * and the handle, reused for an unsigned request next, carries no credentials over. */
Test(httpc, aws_sigv4_signs_and_leaves_nothing_behind) {
  srv_t *s = srv_start();
  ak_httpc_t *c = client(1, 0, 1);
  static waiter_t w;
  const char *lines[] = {"x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"};
  for (int round = 0; round < 2; round++) {
    run(c, &(ak_httpc_req_t){.method = "GET", .url = url(s, "/status/200"), .headers = lines, .nheaders = 1,
                             .timeout_ms = 5000, .max_response_bytes = 64, .aws_sigv4 = "aws:amz:eu-west-3:s3",
                             .userpwd = "AKIDEXAMPLE:the-secret/key"},
        &w);
    cr_expect_eq(w.result, AK_HTTPC_OK, "%s", w.why);
    pthread_mutex_lock(&s->mu);
    char v[512];
    cr_expect(head_value(s->head, "authorization", v, sizeof v) != NULL, "signed");
    cr_expect(strncmp(v, "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/", 40) == 0, "%s", v);
    cr_expect(strstr(v, "/eu-west-3/s3/aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date, "
                        "Signature=") != NULL,
              "our header line is signed: %s", v);
    cr_expect(head_value(s->head, "x-amz-date", v, sizeof v) != NULL);
    cr_expect_null(strstr(s->head, "the-secret"), "the secret is never sent");
    pthread_mutex_unlock(&s->mu);
    /* the same handle, unsigned: no authorization, no date of libcurl's */
    run(c, &(ak_httpc_req_t){.method = "GET", .url = url(s, "/status/200"), .timeout_ms = 5000,
                             .max_response_bytes = 64},
        &w);
    cr_expect_eq(w.result, AK_HTTPC_OK, "%s", w.why);
    pthread_mutex_lock(&s->mu);
    cr_expect_null(head_value(s->head, "authorization", v, sizeof v), "nothing carried over: %s", s->head);
    cr_expect_null(head_value(s->head, "x-amz-date", v, sizeof v));
    pthread_mutex_unlock(&s->mu);
  }
  cr_expect_eq(srv_accepts(s), 1, "one kept connection for all of them");
  ak_httpc_free(c);
  srv_stop(s);
}

Test(httpc, timeout) {
  srv_t *s = srv_start();
  ak_httpc_t *c = client(0, 0, 0);
  static waiter_t w;
  int64_t t0 = mono_ms();
  run(c, &(ak_httpc_req_t){.url = url(s, "/sleep/3000"), .timeout_ms = 200, .max_response_bytes = 100}, &w);
  int64_t took = mono_ms() - t0;
  cr_expect_eq(w.result, AK_HTTPC_TIMEOUT);
  cr_expect_str_eq(w.why, "timeout");
  cr_expect_eq(w.status, 0);
  cr_expect(took < 1500, "took %lld ms", (long long)took);
  ak_httpc_free(c);
  srv_stop(s);
}

Test(httpc, transport_failure_names_it) {
  srv_t *s = srv_start();
  unsigned short port = s->port;
  srv_stop(s); /* nothing listens there now */
  ak_httpc_t *c = client(0, 0, 0);
  static waiter_t w;
  char u[64];
  snprintf(u, sizeof u, "http://127.0.0.1:%u/", port);
  run(c, &(ak_httpc_req_t){.url = u, .timeout_ms = 2000}, &w);
  cr_expect_eq(w.result, AK_HTTPC_FAILED);
  cr_expect(strncmp(w.why, "connect: ", 9) == 0, "%s", w.why);
  ak_httpc_free(c);
}

/* ---- the address callback ---------------------------------------------------------- */

typedef struct {
  bool allow;
  atomic_int calls;
  atomic_int last_port;
} policy_t;

static bool judge(void *ctx, const struct sockaddr *sa, char *why, size_t whylen) {
  policy_t *p = ctx;
  atomic_fetch_add(&p->calls, 1);
  if (sa->sa_family == AF_INET) atomic_store(&p->last_port, ntohs(((const struct sockaddr_in *)sa)->sin_port));
  if (p->allow) return true;
  char a[INET6_ADDRSTRLEN] = "?";
  if (sa->sa_family == AF_INET) inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, a, sizeof a);
  snprintf(why, whylen, "policy: %s is off limits", a);
  return false;
}

Test(httpc, address_callback_refuses_before_connecting) {
  srv_t *s = srv_start();
  ak_httpc_t *c = client(0, 0, 0);
  static waiter_t w;
  policy_t no = {.allow = false};
  run(c, &(ak_httpc_req_t){.url = url(s, "/status/200"), .timeout_ms = 3000, .addr_ok = judge, .addr_ctx = &no},
      &w);
  cr_expect_eq(w.result, AK_HTTPC_REFUSED);
  cr_expect_str_eq(w.why, "policy: 127.0.0.1 is off limits");
  cr_expect_eq(w.status, 0);
  cr_expect(atomic_load(&no.calls) >= 1);
  cr_expect_eq(atomic_load(&no.last_port), s->port, "judged with the destination's port");
  usleep(50 * 1000);
  cr_expect_eq(srv_accepts(s), 0, "no TCP connection was made");
  cr_expect_eq(srv_requests(s), 0);
  /* allowed: the same request goes through */
  policy_t yes = {.allow = true};
  run(c, &(ak_httpc_req_t){.url = url(s, "/status/200"), .timeout_ms = 3000, .addr_ok = judge, .addr_ctx = &yes},
      &w);
  cr_expect_eq(w.result, AK_HTTPC_OK, "%s", w.why);
  cr_expect(atomic_load(&yes.calls) >= 1);
  ak_httpc_free(c);
  srv_stop(s);
}

/* A connection opened for a request another policy allowed (or none judged) is not a way
 * around this request's policy: it is judged again, and refused before a byte of the
 * request goes out. */
Test(httpc, address_callback_judges_a_kept_connection) {
  srv_t *s = srv_start();
  ak_httpc_t *c = client(1, 0, 0); /* one worker: one connection cache */
  /* (responses are read whole here: a cut-short one would close its connection) */
  static waiter_t w;
  run(c, &(ak_httpc_req_t){.url = url(s, "/status/200"), .timeout_ms = 3000, .max_response_bytes = 64}, &w);
  cr_expect_eq(w.result, AK_HTTPC_OK, "%s", w.why);
  cr_expect_eq(srv_accepts(s), 1);
  /* opened without a policy, judged by this one on its way out */
  policy_t yes = {.allow = true};
  run(c, &(ak_httpc_req_t){.url = url(s, "/status/200"), .timeout_ms = 3000, .max_response_bytes = 64,
                           .addr_ok = judge, .addr_ctx = &yes},
      &w);
  cr_expect_eq(w.result, AK_HTTPC_OK, "%s", w.why);
  cr_expect_eq(srv_accepts(s), 1, "the kept connection");
  cr_expect_eq(atomic_load(&yes.calls), 1, "judged once, on the kept connection");
  cr_expect_eq(atomic_load(&yes.last_port), s->port);
  /* another policy on the same connection: its own answer, not the last one's */
  policy_t no = {.allow = false};
  run(c, &(ak_httpc_req_t){.url = url(s, "/status/200"), .timeout_ms = 3000, .max_response_bytes = 64,
                           .addr_ok = judge, .addr_ctx = &no},
      &w);
  cr_expect_eq(w.result, AK_HTTPC_REFUSED, "%s", w.why);
  cr_expect_str_eq(w.why, "policy: 127.0.0.1 is off limits");
  usleep(50 * 1000);
  cr_expect_eq(srv_requests(s), 2, "the refused request never went out");
  /* the next request without a policy still gets through */
  run(c, &(ak_httpc_req_t){.url = url(s, "/status/201"), .timeout_ms = 3000, .max_response_bytes = 64}, &w);
  cr_expect_eq(w.result, AK_HTTPC_OK, "%s", w.why);
  cr_expect_eq(w.status, 201);
  cr_expect_eq(srv_requests(s), 3);
  ak_httpc_free(c);
  srv_stop(s);
}

/* ---- the bound, cancel, free ------------------------------------------------------- */

Test(httpc, busy_beyond_max_outstanding) {
  srv_t *s = srv_start();
  ak_httpc_t *c = client(0, 3, 0);
  static waiter_t w[4];
  for (int i = 0; i < 3; i++) {
    waiter_init(&w[i]);
    cr_assert_eq(ak_httpc_submit(c, &(ak_httpc_req_t){.url = url(s, "/sleep/400"), .timeout_ms = 5000}, on_done, &w[i]),
                 0);
  }
  waiter_init(&w[3]);
  int rc = ak_httpc_submit(c, &(ak_httpc_req_t){.url = url(s, "/status/200"), .timeout_ms = 5000}, on_done, &w[3]);
  cr_expect_eq(rc, AK_HTTPC_BUSY, "the 4th of 3: %d", rc);
  cr_expect_str_eq(ak_httpc_strerror(rc), "busy");
  for (int i = 0; i < 3; i++) {
    wait_for(&w[i], 10);
    cr_expect_eq(calls_of(&w[i]), 1);
    cr_expect_eq(w[i].result, AK_HTTPC_OK, "%s", w[i].why);
  }
  usleep(50 * 1000);
  cr_expect_eq(calls_of(&w[3]), 0, "a refused submit is never answered");
  /* answered: the places are free again */
  run(c, &(ak_httpc_req_t){.url = url(s, "/status/200"), .timeout_ms = 5000}, &w[3]);
  cr_expect_eq(w[3].result, AK_HTTPC_OK, "%s", w[3].why);
  ak_httpc_free(c);
  srv_stop(s);
}

/* Cancel answers the owner's requests, in flight or still queued (one transfer at a time:
 * the rest wait in the queue), before it returns; another owner's are left alone. */
Test(httpc, cancel_answers_one_owner) {
  srv_t *s = srv_start();
  ak_httpc_t *c = client(1, 0, 1);
  static waiter_t a[5], b;
  int owner_a, owner_b;
  waiter_init(&b);
  cr_assert_eq(ak_httpc_submit(c, &(ak_httpc_req_t){.url = url(s, "/sleep/300"), .timeout_ms = 5000,
                                                   .owner = &owner_b},
                               on_done, &b),
               0);
  for (int i = 0; i < 5; i++) {
    waiter_init(&a[i]);
    cr_assert_eq(ak_httpc_submit(c, &(ak_httpc_req_t){.url = url(s, "/sleep/5000"), .timeout_ms = 10000,
                                                     .owner = &owner_a},
                                 on_done, &a[i]),
                 0);
  }
  usleep(50 * 1000);
  int64_t t0 = mono_ms();
  ak_httpc_cancel(c, &owner_a);
  cr_expect(mono_ms() - t0 < 2000, "cancel did not wait for the transfers");
  for (int i = 0; i < 5; i++) {
    cr_expect_eq(calls_of(&a[i]), 1, "request %d answered %d times by the time cancel returned", i, calls_of(&a[i]));
    cr_expect_eq(a[i].result, AK_HTTPC_CANCELLED);
  }
  wait_for(&b, 10);
  cr_expect_eq(b.result, AK_HTTPC_OK, "the other owner's request: %s", b.why);
  usleep(50 * 1000);
  for (int i = 0; i < 5; i++) cr_expect_eq(calls_of(&a[i]), 1, "request %d answered again", i);
  ak_httpc_cancel(c, &owner_a); /* nothing left: returns */
  ak_httpc_free(c);
  srv_stop(s);
}

Test(httpc, free_answers_everything_once) {
  srv_t *s = srv_start();
  ak_httpc_t *c = client(2, 0, 2);
  static waiter_t w[6];
  for (int i = 0; i < 6; i++) {
    waiter_init(&w[i]);
    cr_assert_eq(ak_httpc_submit(c, &(ak_httpc_req_t){.url = url(s, "/sleep/5000"), .timeout_ms = 10000}, on_done,
                                 &w[i]),
                 0);
  }
  usleep(50 * 1000);
  ak_httpc_free(c);
  for (int i = 0; i < 6; i++) {
    cr_expect_eq(calls_of(&w[i]), 1, "request %d", i);
    cr_expect_eq(w[i].result, AK_HTTPC_CANCELLED);
  }
  srv_stop(s);
}

Test(httpc, bad_requests_refused_at_submit) {
  ak_httpc_t *c = client(1, 0, 0);
  static waiter_t w;
  waiter_init(&w);
  const char *want[5] = {"a", "b", "c", "d", "e"};
  cr_expect_eq(ak_httpc_submit(c, &(ak_httpc_req_t){.url = NULL}, on_done, &w), AK_HTTPC_EINVAL);
  cr_expect_eq(ak_httpc_submit(c, &(ak_httpc_req_t){.url = "http://x/", .want_headers = want, .nwant = 5}, on_done, &w),
               AK_HTTPC_EINVAL);
  cr_expect_eq(ak_httpc_submit(c, &(ak_httpc_req_t){.url = "http://x/", .method = "GET /evil"}, on_done, &w),
               AK_HTTPC_EINVAL);
  cr_expect_eq(calls_of(&w), 0);
  ak_httpc_free(c);
}

/* ---- threads ---------------------------------------------------------------------- */

static int tasks(const char *prefix) {
  DIR *d = opendir("/proc/self/task");
  cr_assert_not_null(d);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    if (!prefix) {
      n++;
      continue;
    }
    char path[300], name[32] = "";
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = fopen(path, "r");
    if (f) {
      if (fgets(name, sizeof name, f)) n += strncmp(name, prefix, strlen(prefix)) == 0;
      fclose(f);
    }
  }
  closedir(d);
  return n;
}

Test(httpc, threads_start_with_the_first_request) {
  srv_t *s = srv_start();
  int before = tasks(NULL);
  ak_httpc_t *c = client(2, 0, 0);
  cr_expect_eq(tasks(NULL), before, "a client nobody used has no threads");
  static waiter_t w;
  run(c, &(ak_httpc_req_t){.url = url(s, "/status/200"), .timeout_ms = 3000}, &w);
  cr_expect_eq(tasks(NULL), before + 2);
  ak_httpc_free(c);
  /* free joins the client's threads; the kernel lets a joined thread's entry go from
   * /proc/self/task (and the test server's connection thread end) a moment later */
  int left = tasks(NULL);
  for (int i = 0; i < 200 && left != before; i++) {
    usleep(10000);
    left = tasks(NULL);
  }
  cr_expect_eq(left, before, "free joins them");
  srv_stop(s);
}

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int calls, ok;
  char reason[128];
} sink_wait_t;

static void on_sink_done(void *ctx, const ak_sink_outcome_t *o) {
  sink_wait_t *w = ctx;
  pthread_mutex_lock(&w->mu);
  w->calls++;
  w->ok += o->result == AK_SINK_OK;
  snprintf(w->reason, sizeof w->reason, "%s", o->reason);
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

/* 20 http sinks on one client, each with a delivery made: the process has the client's
 * threads and no more, whatever the number of sinks. Then destroying one sink with a
 * delivery under way answers that one ("sink stopped") and leaves the others' alone. */
Test(httpc, sinks_share_the_client_threads) {
  srv_t *s = srv_start();
  const char *cidrs[] = {"127.0.0.0/8"};
  char err[256] = "";
  ak_egress_t *eg = ak_egress_new(cidrs, 1, true, err, sizeof err);
  cr_assert_not_null(eg, "%s", err);
  int before = tasks(NULL);
  ak_httpc_t *c = client(2, 0, 0);
  enum { N = 20 };
  void *sinks[N];
  char js[256];
  snprintf(js, sizeof js, "{\"url\":\"http://127.0.0.1:%u/status/204\"}", s->port);
  json_t *opts = json_loads(js, 0, NULL);
  for (int i = 0; i < N; i++) {
    sinks[i] = ak_sink_http.create(opts, &(ak_sink_ctx_t){.source_id = "src", .egress = eg, .httpc = c}, err,
                                   sizeof err);
    cr_assert_not_null(sinks[i], "%s", err);
  }
  json_decref(opts);
  sink_wait_t w = {.calls = 0};
  pthread_mutex_init(&w.mu, NULL);
  pthread_cond_init(&w.cv, NULL);
  static const uint8_t body[] = "{}";
  ak_envelope_t env = {.tenant = "t", .tenant_len = 1, .body = body, .body_len = 2};
  for (int i = 0; i < N; i++) ak_sink_http.deliver(sinks[i], &(ak_sink_attempt_t){.env = &env, .attempt = 1}, &w,
                                                   on_sink_done);
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 15;
  pthread_mutex_lock(&w.mu);
  while (w.calls < N)
    if (pthread_cond_timedwait(&w.cv, &w.mu, &until) != 0) break;
  pthread_mutex_unlock(&w.mu);
  cr_expect_eq(w.calls, N);
  cr_expect_eq(w.ok, N, "every delivery went through");
  int during = tasks(NULL);
  cr_expect_eq(during, before + 2, "%d sinks, %d threads more than before (the client's 2)", N, during - before);
  cr_expect_eq(tasks("ak-http-sink"), 0, "no sink made a client of its own");
  for (int i = 0; i < N; i++) ak_sink_http.destroy(sinks[i]);
  cr_expect_eq(tasks(NULL), before + 2, "the client outlives its sinks");
  ak_httpc_free(c);
  cr_expect_eq(tasks(NULL), before);
  ak_egress_free(eg);
  srv_stop(s);
}

/* A sink on a shared client: destroy answers its own delivery under way, once, and
 * another sink's delivery on the same client finishes normally. */
Test(httpc, sink_destroy_cancels_only_its_own) {
  srv_t *s = srv_start();
  const char *cidrs[] = {"127.0.0.0/8"};
  char err[256] = "";
  ak_egress_t *eg = ak_egress_new(cidrs, 1, true, err, sizeof err);
  ak_httpc_t *c = client(1, 0, 0);
  char js[256];
  snprintf(js, sizeof js, "{\"url\":\"http://127.0.0.1:%u/sleep/4000\",\"timeout_ms\":8000}", s->port);
  json_t *slow = json_loads(js, 0, NULL);
  snprintf(js, sizeof js, "{\"url\":\"http://127.0.0.1:%u/sleep/300\"}", s->port);
  json_t *quick = json_loads(js, 0, NULL);
  ak_sink_ctx_t ctx = {.source_id = "src", .egress = eg, .httpc = c};
  void *a = ak_sink_http.create(slow, &ctx, err, sizeof err);
  void *b = ak_sink_http.create(quick, &ctx, err, sizeof err);
  cr_assert(a && b, "%s", err);
  json_decref(slow);
  json_decref(quick);
  sink_wait_t wa = {.calls = 0}, wb = {.calls = 0};
  pthread_mutex_init(&wa.mu, NULL);
  pthread_cond_init(&wa.cv, NULL);
  pthread_mutex_init(&wb.mu, NULL);
  pthread_cond_init(&wb.cv, NULL);
  ak_envelope_t env = {.tenant = "t", .tenant_len = 1};
  ak_sink_http.deliver(a, &(ak_sink_attempt_t){.env = &env, .attempt = 1}, &wa, on_sink_done);
  ak_sink_http.deliver(b, &(ak_sink_attempt_t){.env = &env, .attempt = 1}, &wb, on_sink_done);
  usleep(100 * 1000);
  ak_sink_http.destroy(a);
  pthread_mutex_lock(&wa.mu);
  cr_expect_eq(wa.calls, 1, "answered before destroy returned");
  cr_expect_str_eq(wa.reason, "sink stopped");
  pthread_mutex_unlock(&wa.mu);
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 10;
  pthread_mutex_lock(&wb.mu);
  while (wb.calls == 0)
    if (pthread_cond_timedwait(&wb.cv, &wb.mu, &until) != 0) break;
  pthread_mutex_unlock(&wb.mu);
  cr_expect_eq(wb.calls, 1);
  cr_expect_eq(wb.ok, 1, "the other sink's delivery was left alone");
  ak_sink_http.destroy(b);
  ak_httpc_free(c);
  ak_egress_free(eg);
  srv_stop(s);
}

/* Requests reuse the memory of answered ones (and their header list nodes live in it):
 * one worker, one transfer at a time, so every request after the first sits where an
 * earlier one did. Each must send its own header lines, body and method and nothing of
 * the one before (more lines, a longer body), and see only its own wanted headers; a
 * request too large to be kept goes and comes back the same. */
Test(httpc, reused_requests_carry_only_their_own) {
  srv_t *s = srv_start();
  ak_httpc_t *c = client(1, 0, 1);
  static waiter_t w;
  static char big[40000]; /* more than a kept request holds, less than the server reads */
  memset(big, 'c', sizeof big);
  char abody[200];
  memset(abody, 'a', sizeof abody);
  const char *alines[] = {"X-A-0: zero", "X-A-1: one", "X-A-2: two", "X-A-3: three", "X-A-4: four", "X-A-5: five"};
  const char *clines[] = {"X-C: c"};
  const char *want[] = {"x-one"};
  for (int round = 0; round < 3; round++) {
    /* A: six lines, 200 bytes, wants x-one (which /hdr answers) */
    run(c, &(ak_httpc_req_t){.url = url(s, "/hdr"), .headers = alines, .nheaders = 6, .body = abody,
                             .body_len = sizeof abody, .timeout_ms = 5000, .want_headers = want, .nwant = 1},
        &w);
    cr_expect_eq(w.result, AK_HTTPC_OK, "round %d A: %s", round, w.why);
    cr_expect(w.has_hdr[0] && strcmp(w.hdr[0], "second") == 0, "round %d A: x-one", round);
    pthread_mutex_lock(&s->mu);
    char v[64];
    for (int i = 0; i < 6; i++) {
      char name[16];
      snprintf(name, sizeof name, "x-a-%d", i);
      cr_expect(head_value(s->head, name, v, sizeof v) && strcmp(v, alines[i] + 7) == 0, "round %d A: %s", round,
                name);
    }
    cr_expect_null(head_value(s->head, "x-c", v, sizeof v));
    cr_expect_eq(s->body_len, sizeof abody);
    cr_expect(memcmp(s->body, abody, sizeof abody) == 0);
    pthread_mutex_unlock(&s->mu);

    /* B: no lines, one byte, PUT; wants x-one, which a 204 does not carry */
    run(c, &(ak_httpc_req_t){.method = "PUT", .url = url(s, "/status/204"), .body = "b", .body_len = 1,
                             .timeout_ms = 5000, .want_headers = want, .nwant = 1},
        &w);
    cr_expect_eq(w.result, AK_HTTPC_OK, "round %d B: %s", round, w.why);
    cr_expect(!w.has_hdr[0], "round %d B: the previous request's x-one is not this one's", round);
    pthread_mutex_lock(&s->mu);
    cr_expect_str_eq(s->method, "PUT");
    for (int i = 0; i < 6; i++) {
      char name[16];
      snprintf(name, sizeof name, "x-a-%d", i);
      cr_expect_null(head_value(s->head, name, v, sizeof v), "round %d B: no %s left over", round, name);
    }
    cr_expect_eq(s->body_len, 1);
    cr_expect_eq(s->body[0], 'b');
    pthread_mutex_unlock(&s->mu);

    /* C: one line, a body larger than a kept request */
    run(c, &(ak_httpc_req_t){.url = url(s, "/status/201"), .headers = clines, .nheaders = 1, .body = big,
                             .body_len = sizeof big, .timeout_ms = 5000},
        &w);
    cr_expect_eq(w.result, AK_HTTPC_OK, "round %d C: %s", round, w.why);
    cr_expect_eq(w.status, 201);
    pthread_mutex_lock(&s->mu);
    cr_expect(head_value(s->head, "x-c", v, sizeof v) && strcmp(v, "c") == 0, "round %d C: x-c", round);
    cr_expect_null(head_value(s->head, "x-a-0", v, sizeof v));
    cr_expect_eq(s->body_len, sizeof big);
    cr_expect(s->body[0] == 'c' && s->body[sizeof s->body - 1] == 'c');
    pthread_mutex_unlock(&s->mu);
  }
  cr_expect_eq(srv_requests(s), 9);
  ak_httpc_free(c);
  srv_stop(s);
}

/* The worker sleeps in epoll_wait with a transfer under way (a slow answer, far from its
 * timeout): a request submitted then must wake it and start at once, not wait for the
 * slow one to move. */
Test(httpc, submit_wakes_a_worker_waiting_on_a_transfer) {
  srv_t *s = srv_start();
  ak_httpc_t *c = client(1, 0, 4);
  static waiter_t slow, fast;
  waiter_init(&slow);
  waiter_init(&fast);
  cr_assert_eq(ak_httpc_submit(c, &(ak_httpc_req_t){.url = url(s, "/sleep/3000"), .timeout_ms = 10000}, on_done,
                               &slow),
               0);
  usleep(200 * 1000); /* the slow one is sent; the worker sleeps on it */
  for (int i = 0; i < 3; i++) {
    waiter_init(&fast);
    int64_t t0 = mono_ms();
    cr_assert_eq(ak_httpc_submit(c, &(ak_httpc_req_t){.url = url(s, "/status/204"), .timeout_ms = 5000}, on_done,
                                 &fast),
                 0);
    wait_for(&fast, 5);
    cr_expect_eq(calls_of(&fast), 1);
    cr_expect_eq(fast.result, AK_HTTPC_OK, "%s", fast.why);
    cr_expect_lt(mono_ms() - t0, 1000, "answered in %lld ms", (long long)(mono_ms() - t0));
    usleep(50 * 1000); /* asleep again before the next one */
  }
  cr_expect_eq(calls_of(&slow), 0, "the slow one is still under way");
  wait_for(&slow, 10);
  cr_expect_eq(slow.result, AK_HTTPC_OK, "%s", slow.why);
  ak_httpc_free(c);
  srv_stop(s);
}

/* Never through a proxy, whatever the environment says (the address check would judge the
 * proxy): a proxy named there that does not exist changes nothing. */
Test(httpc, no_proxy_from_the_environment) {
  setenv("http_proxy", "http://127.0.0.1:9", 1);
  setenv("HTTP_PROXY", "http://127.0.0.1:9", 1);
  setenv("all_proxy", "http://127.0.0.1:9", 1);
  srv_t *s = srv_start();
  ak_httpc_t *c = client(1, 0, 0);
  static waiter_t w;
  run(c, &(ak_httpc_req_t){.url = url(s, "/status/204"), .timeout_ms = 5000}, &w);
  cr_expect_eq(w.result, AK_HTTPC_OK, "%s", w.why);
  cr_expect_eq(srv_requests(s), 1, "sent to the server itself");
  ak_httpc_free(c);
  srv_stop(s);
}

/* Fill first: with little outstanding, one worker carries it all (one thread to wake, one
 * connection kept), here ten requests one after the other over two workers: one TCP
 * connection. */
Test(httpc, few_requests_stay_on_one_worker) {
  srv_t *s = srv_start();
  ak_httpc_t *c = client(2, 0, 0);
  static waiter_t w;
  for (int i = 0; i < 10; i++) {
    run(c, &(ak_httpc_req_t){.url = url(s, "/status/204"), .timeout_ms = 5000}, &w);
    cr_expect_eq(w.result, AK_HTTPC_OK, "%s", w.why);
  }
  cr_expect_eq(srv_accepts(s), 1, "every request on the first worker's connection");
  ak_httpc_free(c);
  srv_stop(s);
}

/* ...and past spread_at the next worker takes what the first cannot start: two slow
 * answers fill the first worker (two transfers at most), a third request goes to the
 * second and is answered at once instead of waiting for a slot. */
Test(httpc, a_full_worker_spills_to_the_next) {
  srv_t *s = srv_start();
  char err[160] = "";
  ak_httpc_t *c = ak_httpc_new(&(ak_httpc_opts_t){.name = "ak-httpc-test", .workers = 2, .max_active = 2,
                                                 .spread_at = 2},
                               err, sizeof err);
  cr_assert_not_null(c, "%s", err);
  static waiter_t slow[2], fast;
  for (int i = 0; i < 2; i++) {
    waiter_init(&slow[i]);
    cr_assert_eq(ak_httpc_submit(c, &(ak_httpc_req_t){.url = url(s, "/sleep/3000"), .timeout_ms = 10000}, on_done,
                                 &slow[i]),
                 0);
  }
  usleep(100 * 1000);
  waiter_init(&fast);
  int64_t t0 = mono_ms();
  cr_assert_eq(ak_httpc_submit(c, &(ak_httpc_req_t){.url = url(s, "/status/204"), .timeout_ms = 5000}, on_done, &fast),
               0);
  wait_for(&fast, 10);
  cr_expect_eq(fast.result, AK_HTTPC_OK, "%s", fast.why);
  cr_expect_lt(mono_ms() - t0, 1000, "answered in %lld ms", (long long)(mono_ms() - t0));
  cr_expect_eq(calls_of(&slow[0]) + calls_of(&slow[1]), 0, "the slow ones still under way");
  ak_httpc_free(c);
  cr_expect_eq(slow[0].result, AK_HTTPC_CANCELLED);
  srv_stop(s);
}
