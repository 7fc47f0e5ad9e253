/* Unit tests: the HTTP/1.1 server layer (http/server.h) over real sockets on 127.0.0.1
 * (port 0): keep-alive, pipelining in order, chunked bodies, Expect: 100-continue, every
 * framing refusal (status, JSON body, the connection closed, a request pipelined after
 * it never reaching the handler), 414 / 431, the timeouts, the connection caps,
 * suspend / resume from another thread, close_listener and stop, and a client that never
 * reads its answers. The handler answers 201 with the body's length; the path picks
 * other behaviours (/head answers at on_head, /suspend holds the request for the test to
 * resume, /block sleeps on the loop thread). */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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
#include "http/server.h"

/* ---- the test handler -------------------------------------------------------------- */

#define MAXP 512

typedef struct {
  pthread_mutex_t mu;
  int heads, ends, done_ok, done_lost, resumes, refused;
  unsigned refused_status[64];
  char refused_code[64][48];
  char paths[MAXP][64];
  int npaths;
  ak_hreq_t *held[64];
  int nheld;
} th_t;

typedef struct {
  size_t body;
} rq_t;

static th_t T;

static bool path_is(ak_hreq_t *r, const char *p) {
  size_t n;
  const char *x = ak_hreq_path(r, &n);
  return n == strlen(p) && memcmp(x, p, n) == 0;
}

static void h_head(void *ctx, ak_hreq_t *r) {
  (void)ctx;
  size_t n;
  const char *p = ak_hreq_path(r, &n);
  pthread_mutex_lock(&T.mu);
  T.heads++;
  if (T.npaths < MAXP) snprintf(T.paths[T.npaths++], 64, "%.*s", (int)n, p);
  pthread_mutex_unlock(&T.mu);
  rq_t *q = calloc(1, sizeof *q);
  ak_hreq_set_data(r, q);
  if (path_is(r, "/head")) {
    ak_hreq_add_header(r, "X-Where", "head");
    ak_hreq_error(r, 403, "head", 0);
  }
}

static void h_body(void *ctx, ak_hreq_t *r, const uint8_t *p, size_t n) {
  (void)ctx, (void)p;
  rq_t *q = ak_hreq_data(r);
  q->body += n;
  if (path_is(r, "/bodystop") && q->body >= 4) ak_hreq_error(r, 413, "too_big", 0);
}

static void answer(ak_hreq_t *r) {
  rq_t *q = ak_hreq_data(r);
  char b[64];
  int n = snprintf(b, sizeof b, "len=%zu", q->body);
  ak_hreq_add_header(r, "X-Test", "yes");
  ak_hreq_reply(r, 201, "text/plain", b, (size_t)n);
}

static void h_end(void *ctx, ak_hreq_t *r) {
  (void)ctx;
  pthread_mutex_lock(&T.mu);
  T.ends++;
  pthread_mutex_unlock(&T.mu);
  if (path_is(r, "/suspend")) {
    ak_hreq_suspend(r);
    pthread_mutex_lock(&T.mu);
    T.held[T.nheld++] = r;
    pthread_mutex_unlock(&T.mu);
    return;
  }
  if (path_is(r, "/block")) usleep(700 * 1000);
  if (path_is(r, "/big")) {
    size_t n = 8u << 20;
    char *b = malloc(n);
    memset(b, 'b', n);
    ak_hreq_reply(r, 200, "application/octet-stream", b, n);
    free(b);
    return;
  }
  answer(r);
}

static void h_resume(void *ctx, ak_hreq_t *r) {
  (void)ctx;
  pthread_mutex_lock(&T.mu);
  T.resumes++;
  pthread_mutex_unlock(&T.mu);
  answer(r);
}

static void h_done(void *ctx, ak_hreq_t *r, bool answered) {
  (void)ctx;
  free(ak_hreq_data(r));
  pthread_mutex_lock(&T.mu);
  if (answered) T.done_ok++;
  else T.done_lost++;
  pthread_mutex_unlock(&T.mu);
}

static void h_refused(void *ctx, unsigned status, const char *code) {
  (void)ctx;
  pthread_mutex_lock(&T.mu);
  if (T.refused < 64) {
    T.refused_status[T.refused] = status;
    snprintf(T.refused_code[T.refused], 48, "%s", code);
  }
  T.refused++;
  pthread_mutex_unlock(&T.mu);
}

static const ak_hhandler_t handler = {h_head, h_body, h_end, h_resume, h_done, h_refused};

static int get(int *v) {
  pthread_mutex_lock(&T.mu);
  int x = *v;
  pthread_mutex_unlock(&T.mu);
  return x;
}

static bool saw(const char *path) {
  pthread_mutex_lock(&T.mu);
  bool found = false;
  for (int i = 0; i < T.npaths; i++)
    if (strcmp(T.paths[i], path) == 0) found = true;
  pthread_mutex_unlock(&T.mu);
  return found;
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits until *v >= want (up to ms). */
static bool wait_for(int *v, int want, int ms) {
  int64_t end = now_ms() + ms;
  while (now_ms() < end) {
    if (get(v) >= want) return true;
    usleep(2000);
  }
  return get(v) >= want;
}

static ak_hserver_t *srv_start(ak_hlimits_t lim, unsigned loops) {
  memset(&T, 0, sizeof T);
  pthread_mutex_init(&T.mu, NULL);
  ak_hserver_cfg_t cfg = {.name = "test", .ip = "127.0.0.1", .port = 0, .loops = loops, .limits = lim,
                          .handler = &handler};
  char *err = NULL;
  ak_hserver_t *s = ak_hserver_new(&cfg, &err);
  cr_assert_not_null(s, "%s", err ? err : "");
  cr_assert_eq(ak_hserver_start(s, &err), 0, "%s", err ? err : "");
  cr_assert_gt(ak_hserver_port(s), 0);
  return s;
}

static void srv_end(ak_hserver_t *s) {
  ak_hserver_stop(s);
  ak_hserver_free(s);
}

/* ---- a small client ----------------------------------------------------------------- */

typedef struct {
  int fd;
  char buf[1 << 16];
  size_t len;
  bool eof, reset;
} cli_t;

typedef struct {
  int status;
  char head[2048];
  char body[1024];
  size_t body_len;
} resp_t;

static cli_t *cli_from(int port, const char *src) {
  cli_t *c = calloc(1, sizeof *c);
  c->fd = socket(AF_INET, SOCK_STREAM, 0);
  cr_assert(c->fd >= 0);
  if (src) {
    struct sockaddr_in b = {.sin_family = AF_INET};
    inet_pton(AF_INET, src, &b.sin_addr);
    cr_assert_eq(bind(c->fd, (struct sockaddr *)&b, sizeof b), 0, "bind %s: %s", src, strerror(errno));
  }
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  cr_assert_eq(connect(c->fd, (struct sockaddr *)&a, sizeof a), 0, "connect: %s", strerror(errno));
  return c;
}

static cli_t *cli(int port) { return cli_from(port, NULL); }

static void cli_close(cli_t *c) {
  close(c->fd);
  free(c);
}

static void cli_send(cli_t *c, const char *s, size_t n) {
  size_t off = 0;
  while (off < n) {
    ssize_t w = send(c->fd, s + off, n - off, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    cr_assert(w > 0, "send: %s", strerror(errno));
    off += (size_t)w;
  }
}

static void cli_puts(cli_t *c, const char *s) { cli_send(c, s, strlen(s)); }

/* Reads what arrives within ms (stops at EOF). */
static void cli_fill(cli_t *c, int ms) {
  struct pollfd p = {.fd = c->fd, .events = POLLIN};
  if (c->eof || c->len == sizeof c->buf) return;
  if (poll(&p, 1, ms) <= 0) return;
  ssize_t r = recv(c->fd, c->buf + c->len, sizeof c->buf - c->len, 0);
  if (r == 0) c->eof = true;
  else if (r < 0) {
    if (errno == ECONNRESET) c->reset = true;
    c->eof = true;
  } else {
    c->len += (size_t)r;
  }
}

/* One response off the front of the buffer. */
static bool cli_resp(cli_t *c, resp_t *out, int ms) {
  memset(out, 0, sizeof *out);
  int64_t end = now_ms() + ms;
  for (;;) {
    char *e = memmem(c->buf, c->len, "\r\n\r\n", 4);
    if (e) {
      size_t hl = (size_t)(e - c->buf) + 4;
      size_t cl = 0;
      char *h = strndup(c->buf, hl);
      for (char *p = h; (p = strcasestr(p, "\r\ncontent-length:")); p++) cl = strtoul(p + 17, NULL, 10);
      if (c->len >= hl + cl) {
        out->status = atoi(c->buf + 9);
        snprintf(out->head, sizeof out->head, "%s", h);
        out->body_len = cl;
        memcpy(out->body, c->buf + hl, cl < sizeof out->body - 1 ? cl : sizeof out->body - 1);
        memmove(c->buf, c->buf + hl + cl, c->len - hl - cl);
        c->len -= hl + cl;
        free(h);
        return true;
      }
      free(h);
    }
    int64_t left = end - now_ms();
    if (c->eof || left <= 0) return false;
    cli_fill(c, (int)left);
  }
}

/* Waits for the server to close: true at EOF (not a reset) within ms. */
static bool cli_wait_eof(cli_t *c, int ms) {
  int64_t end = now_ms() + ms;
  while (!c->eof && now_ms() < end) cli_fill(c, (int)(end - now_ms()));
  return c->eof && !c->reset;
}

static bool has_header(const resp_t *r, const char *line) { return strcasestr(r->head, line) != NULL; }

static ak_hlimits_t nolim(void) { return (ak_hlimits_t){0}; }

#define REQ(path) "GET " path " HTTP/1.1\r\nHost: t\r\n\r\n"

/* ---- keep-alive, pipelining, bodies ---------------------------------------------------- */

Test(hserver, keep_alive_and_connection_close) {
  ak_hserver_t *s = srv_start(nolim(), 2);
  int port = ak_hserver_port(s);
  cli_t *c = cli(port);
  resp_t r;
  for (int i = 0; i < 3; i++) {
    cli_puts(c, "POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello");
    cr_assert(cli_resp(c, &r, 2000), "answer %d", i);
    cr_expect_eq(r.status, 201);
    cr_expect_str_eq(r.body, "len=5");
    cr_expect(has_header(&r, "\r\nContent-Type: text/plain\r\n"));
    cr_expect(has_header(&r, "\r\nX-Test: yes\r\n"));
    cr_expect(has_header(&r, "\r\nDate: "));
    cr_expect(!has_header(&r, "Connection: close"));
  }
  cli_fill(c, 100);
  cr_expect(!c->eof, "a keep-alive connection stays open");
  cli_puts(c, "GET /b HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
  cr_assert(cli_resp(c, &r, 2000));
  cr_expect(has_header(&r, "\r\nConnection: close\r\n"));
  cr_expect(cli_wait_eof(c, 3000), "closed after Connection: close");
  cli_close(c);

  /* HTTP/1.0: closes unless keep-alive is asked for */
  c = cli(port);
  cli_puts(c, "GET /c HTTP/1.0\r\n\r\n");
  cr_assert(cli_resp(c, &r, 2000));
  cr_expect_eq(r.status, 201);
  cr_expect(cli_wait_eof(c, 3000));
  cli_close(c);
  c = cli(port);
  cli_puts(c, "GET /d HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  cr_assert(cli_resp(c, &r, 2000));
  cr_expect(has_header(&r, "\r\nConnection: keep-alive\r\n"));
  cli_close(c);
  cr_expect(wait_for(&T.done_ok, 6, 2000));
  srv_end(s);
}

Test(hserver, head_method_has_no_body) {
  ak_hserver_t *s = srv_start(nolim(), 1);
  cli_t *c = cli(ak_hserver_port(s));
  cli_puts(c, "HEAD /x HTTP/1.1\r\nHost: t\r\n\r\n" REQ("/y"));
  resp_t r;
  /* the HEAD answer declares Content-Length 5 but carries no bytes: the next answer follows */
  cli_fill(c, 1000);
  cli_fill(c, 200);
  char *second = memmem(c->buf, c->len, "HTTP/1.1 201", 12);
  cr_assert_not_null(second);
  char *third = memmem(second + 12, c->len - (size_t)(second + 12 - c->buf), "HTTP/1.1 201", 12);
  cr_assert_not_null(third, "two answers");
  cr_expect(memcmp(third - 4, "\r\n\r\n", 4) == 0, "no body after HEAD");
  cr_expect(memmem(c->buf, (size_t)(third - c->buf), "Content-Length: 5\r\n", 19) != NULL, "its length declared");
  (void)r;
  cli_close(c);
  srv_end(s);
}

Test(hserver, pipelined_answers_in_order) {
  ak_hserver_t *s = srv_start(nolim(), 2);
  cli_t *c = cli(ak_hserver_port(s));
  cli_puts(c, "POST /p1 HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\r\nA"
              "POST /p2 HTTP/1.1\r\nHost: t\r\nContent-Length: 22\r\n\r\n0123456789012345678901"
              "POST /p3 HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n");
  const char *want[] = {"len=1", "len=22", "len=3"};
  for (int i = 0; i < 3; i++) {
    resp_t r;
    cr_assert(cli_resp(c, &r, 2000), "answer %d", i);
    cr_expect_eq(r.status, 201);
    cr_expect_str_eq(r.body, want[i]);
  }
  pthread_mutex_lock(&T.mu);
  cr_expect_eq(T.npaths, 3);
  cr_expect_str_eq(T.paths[0], "/p1");
  cr_expect_str_eq(T.paths[1], "/p2");
  cr_expect_str_eq(T.paths[2], "/p3");
  pthread_mutex_unlock(&T.mu);
  cli_close(c);
  srv_end(s);
}

Test(hserver, chunked_bodies) {
  ak_hserver_t *s = srv_start(nolim(), 1);
  cli_t *c = cli(ak_hserver_port(s));
  resp_t r;
  cli_puts(c, "POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: Chunked\r\n\r\n"
              "5;ext=1\r\nhello\r\n"
              "A\r\n0123456789\r\n"
              "0\r\nX-Trailer: t\r\n\r\n");
  cr_assert(cli_resp(c, &r, 2000));
  cr_expect_eq(r.status, 201);
  cr_expect_str_eq(r.body, "len=15");
  /* split into single bytes, with a list of one coding over two lines of OWS */
  const char *req = "POST /c2 HTTP/1.1\r\nHost: t\r\nTransfer-Encoding:  chunked \r\n\r\n"
                    "3\r\nabc\r\n1\r\nd\r\n0\r\n\r\n";
  for (size_t i = 0; req[i]; i++) {
    cli_send(c, req + i, 1);
    usleep(500);
  }
  cr_assert(cli_resp(c, &r, 2000));
  cr_expect_eq(r.status, 201);
  cr_expect_str_eq(r.body, "len=4");
  /* OPTIONS * is the one target not in origin form */
  cli_puts(c, "OPTIONS * HTTP/1.1\r\nHost: t\r\n\r\n");
  cr_assert(cli_resp(c, &r, 2000));
  cr_expect_eq(r.status, 201);
  cli_close(c);
  srv_end(s);
}

Test(hserver, expect_100_continue) {
  ak_hserver_t *s = srv_start(nolim(), 1);
  cli_t *c = cli(ak_hserver_port(s));
  resp_t r;
  cli_puts(c, "POST /e HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n");
  cr_assert(cli_resp(c, &r, 2000));
  cr_expect_eq(r.status, 100, "100 Continue before the body is read");
  cr_expect_eq(get(&T.ends), 0);
  cli_puts(c, "abcd");
  cr_assert(cli_resp(c, &r, 2000));
  cr_expect_eq(r.status, 201);
  cr_expect_str_eq(r.body, "len=4");

  /* answered at on_head: no 100, the body is never read, the connection closes */
  cli_puts(c, "POST /head HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n");
  cr_assert(cli_resp(c, &r, 2000));
  cr_expect_eq(r.status, 403);
  cr_expect_str_eq(r.body, "{\"error\":\"head\"}");
  cr_expect(has_header(&r, "\r\nX-Where: head\r\n"));
  cr_expect(has_header(&r, "\r\nConnection: close\r\n"));
  cli_puts(c, "abcd" REQ("/after-head"));
  cr_expect(cli_wait_eof(c, 4000), "closed, lingering (no reset)");
  cr_expect_not(saw("/after-head"));
  cr_expect(!memmem(c->buf, c->len, "100 Continue", 12));
  cli_close(c);

  /* answered at on_head without a body: the connection stays usable */
  c = cli(ak_hserver_port(s));
  cli_puts(c, REQ("/head") REQ("/next"));
  cr_assert(cli_resp(c, &r, 2000));
  cr_expect_eq(r.status, 403);
  cr_assert(cli_resp(c, &r, 2000));
  cr_expect_eq(r.status, 201);
  /* answered in the middle of a body: the rest is not delivered and the connection closes */
  cli_puts(c, "POST /bodystop HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n0123456789");
  cr_assert(cli_resp(c, &r, 2000));
  cr_expect_eq(r.status, 413);
  cr_expect(has_header(&r, "\r\nConnection: close\r\n"));
  cr_expect(cli_wait_eof(c, 4000));
  cli_close(c);
  srv_end(s);
}

/* ---- framing refusals --------------------------------------------------------------- */

typedef struct {
  const char *req;   /* sent, then a request pipelined after it */
  unsigned status;
  const char *body;  /* the exact JSON body */
  bool head_seen;    /* the refused request reached on_head (a body framing error) */
} refusal_t;

#define BAD(d) "{\"error\":\"bad_request\",\"detail\":\"" d "\"}"
#define HDR(n) "{\"error\":\"invalid_header\",\"header\":\"" n "\"}"
#define POSTH "POST /r HTTP/1.1\r\nHost: t\r\n"

static const refusal_t refusals[] = {
  {POSTH "Content-Length: 3\r\nContent-Length: 3\r\n\r\nabc", 400, BAD("duplicate Content-Length"), false},
  {POSTH "Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", 400, BAD("duplicate Content-Length"), false},
  {POSTH "Content-Length: +3\r\n\r\nabc", 400, BAD("bad Content-Length"), false},
  {POSTH "Content-Length: -1\r\n\r\n", 400, BAD("bad Content-Length"), false},
  {POSTH "Content-Length: 1 2\r\n\r\nabcdefghijkl", 400, BAD("bad Content-Length"), false},
  {POSTH "Content-Length: 0x3\r\n\r\nabc", 400, BAD("bad Content-Length"), false},
  {POSTH "Content-Length:\r\n\r\n", 400, BAD("bad Content-Length"), false},
  {POSTH "Content-Length: 3,3\r\n\r\nabc", 400, BAD("bad Content-Length"), false},
  {POSTH "Content-Length: 99999999999999999999\r\n\r\n", 400, BAD("bad Content-Length"), false},
  {POSTH "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 400,
   BAD("Content-Length with Transfer-Encoding"), false},
  {POSTH "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 400,
   BAD("Content-Length with Transfer-Encoding"), false},
  {POSTH "Transfer-Encoding: chunked, gzip\r\n\r\n", 400, BAD("chunked is not the final transfer coding"), false},
  {POSTH "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 400,
   BAD("chunked applied more than once"), false},
  {POSTH "Transfer-Encoding: ,chunked\r\n\r\n", 400, BAD("empty transfer coding"), false},
  {POSTH "Transfer-Encoding: gzip, chunked\r\n\r\n", 501, "{\"error\":\"not_implemented\"}", false},
  {POSTH "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n", 501, "{\"error\":\"not_implemented\"}",
   false},
  {POSTH "Transfer-Encoding: identity\r\n\r\n", 501, "{\"error\":\"not_implemented\"}", false},
  {POSTH "Transfer-Encoding: foo\r\n\r\n", 501, "{\"error\":\"not_implemented\"}", false},
  {"POST /r HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, BAD("Transfer-Encoding in HTTP/1.0"),
   false},
  {POSTH "X-Long: a\r\n b\r\n\r\n", 400, BAD("obs-fold"), false},
  {POSTH "Content-Length : 3\r\n\r\nabc", 400, BAD("whitespace before colon"), false},
  {POSTH "X-A\x01: b\r\n\r\n", 400, HDR("X-A\\u0001"), false},
  {POSTH "X(y): b\r\n\r\n", 400, HDR("X(y)"), false},
  {POSTH "X-A: b\x7f\r\n\r\n", 400, HDR("X-A"), false},
  {"POST /r HTTP/1.1\r\nHost: t\r\nX-N: a\0b\r\n\r\n", 400, HDR("X-N"), false},
  {POSTH "X-A: a\rb\r\n\r\n", 400, BAD("bare CR"), false},
  {POSTH "X-A: a\n\r\n", 400, BAD("bare LF"), false},
  {"GET /r HTTP/1.1\nHost: t\r\n\r\n", 400, BAD("bare LF"), false},
  {POSTH "Host: u\r\n\r\n", 400, BAD("duplicate Host"), false},
  {POSTH "NoColon\r\n\r\n", 400, BAD("header line without a colon"), false},
  {"GET /r HTTP/1.2\r\nHost: t\r\n\r\n", 505, "{\"error\":\"http_version_not_supported\"}", false},
  {"GET /r HTTP/2.0\r\nHost: t\r\n\r\n", 505, "{\"error\":\"http_version_not_supported\"}", false},
  {"GET /r HTTP/1.10\r\nHost: t\r\n\r\n", 400, BAD("bad HTTP version"), false},
  {"GET /r\r\n\r\n", 400, BAD("bad request line"), false},
  {"GET  /r HTTP/1.1\r\nHost: t\r\n\r\n", 400, BAD("bad request line"), false},
  {"GET http://t/r HTTP/1.1\r\nHost: t\r\n\r\n", 400, BAD("request target not in origin form"), false},
  {"GET * HTTP/1.1\r\nHost: t\r\n\r\n", 400, BAD("request target not in origin form"), false},
  {"CONNECT t:443 HTTP/1.1\r\nHost: t\r\n\r\n", 400, BAD("request target not in origin form"), false},
  {"GET /r\x80 HTTP/1.1\r\nHost: t\r\n\r\n", 400, BAD("bad request target"), false},
  {"FOO /r HTTP/1.1\r\nHost: t\r\n\r\n", 501, "{\"error\":\"not_implemented\"}", false},
  {"G(T /r HTTP/1.1\r\nHost: t\r\n\r\n", 400, BAD("bad method"), false},
  /* chunk framing: the head passed, the handler saw it, the body did not */
  {POSTH "Transfer-Encoding: chunked\r\n\r\n5\r\nhelloX\r\n0\r\n\r\n", 400, NULL, true},
  {POSTH "Transfer-Encoding: chunked\r\n\r\n5 \r\nhello\r\n0\r\n\r\n", 400, BAD("bad chunk size"), true},
  {POSTH "Transfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n", 400, NULL, true},
  {POSTH "Transfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n0\r\n\r\n", 400, NULL, true},
  {POSTH "Transfer-Encoding: chunked\r\n\r\nfffffffffffffffffff\r\nhello\r\n0\r\n\r\n", 400, NULL, true},
  {POSTH "Transfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n", 400, NULL, true},
  {POSTH "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\n0\r\n\r\n", 400, NULL, true},
  {POSTH "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nT: a\n\r\n", 400, NULL, true},
  {POSTH "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n T: a\r\n\r\n", 400, NULL, true},
  {POSTH "Transfer-Encoding: chunked\r\n\r\n5;a\x01\r\nhello\r\n0\r\n\r\n", 400, NULL, true},
  {POSTH "Transfer-Encoding: chunked\r\n\r\n\r\n", 400, NULL, true},
};

Test(hserver, framing_refusals) {
  ak_hserver_t *s = srv_start(nolim(), 2);
  int port = ak_hserver_port(s);
  size_t n = sizeof refusals / sizeof refusals[0];
  for (size_t i = 0; i < n; i++) {
    const refusal_t *f = &refusals[i];
    int heads0 = get(&T.heads), refused0 = get(&T.refused), lost0 = get(&T.done_lost);
    cli_t *c = cli(port);
    /* the request's bytes (NULs included: every literal above has its length) */
    size_t len = strlen(f->req);
    if (strstr(f->req, "X-N: a")) len = strlen(f->req) + 1 + strlen(f->req + strlen(f->req) + 1);
    cli_send(c, f->req, len);
    cli_puts(c, REQ("/smuggled"));
    resp_t r;
    cr_assert(cli_resp(c, &r, 3000), "case %zu: an answer", i);
    cr_expect_eq(r.status, (int)f->status, "case %zu: status %d", i, r.status);
    if (f->body) cr_expect_str_eq(r.body, f->body, "case %zu", i);
    else cr_expect(strncmp(r.body, "{\"error\":\"bad_request\",\"detail\":\"", 33) == 0, "case %zu: %s", i, r.body);
    cr_expect(has_header(&r, "\r\nContent-Type: application/json\r\n"), "case %zu", i);
    cr_expect(has_header(&r, "\r\nConnection: close\r\n"), "case %zu", i);
    cr_expect(cli_wait_eof(c, 4000), "case %zu: closed, without a reset", i);
    cr_expect_eq(c->len, 0, "case %zu: nothing after the refusal", i);
    cr_expect(wait_for(&T.refused, refused0 + 1, 1000), "case %zu: on_refused", i);
    pthread_mutex_lock(&T.mu);
    cr_expect_eq(T.refused_status[refused0 < 64 ? refused0 : 63], f->status, "case %zu", i);
    pthread_mutex_unlock(&T.mu);
    cr_expect_eq(get(&T.heads), heads0 + (f->head_seen ? 1 : 0), "case %zu: on_head calls", i);
    if (f->head_seen) cr_expect(wait_for(&T.done_lost, lost0 + 1, 1000), "case %zu: on_done(false)", i);
    cli_close(c);
  }
  cr_expect_not(saw("/smuggled"), "nothing pipelined after a refusal reached the handler");
  cr_expect_eq(get(&T.ends), 0);
  srv_end(s);
}

Test(hserver, limits_414_431) {
  ak_hlimits_t lim = {.max_request_line = 64, .max_header_bytes = 256, .max_headers = 5};
  ak_hserver_t *s = srv_start(lim, 1);
  int port = ak_hserver_port(s);
  char req[1024];
  resp_t r;
  /* exactly at the limits: served */
  cli_t *c = cli(port);
  snprintf(req, sizeof req, "GET /%0*d HTTP/1.1\r\nHost: t\r\n\r\n", 64 - 14, 0);
  cr_assert_eq(strlen(req), 64 + 2 + 9 + 2);
  cli_puts(c, req);
  cr_assert(cli_resp(c, &r, 2000));
  cr_expect_eq(r.status, 201);
  /* one byte over: 414 */
  snprintf(req, sizeof req, "GET /%0*d HTTP/1.1\r\nHost: t\r\n\r\n", 64 - 13, 0);
  cli_puts(c, req);
  cli_puts(c, REQ("/smuggled"));
  cr_assert(cli_resp(c, &r, 2000));
  cr_expect_eq(r.status, 414);
  cr_expect_str_eq(r.body, "{\"error\":\"uri_too_long\"}");
  cr_expect(cli_wait_eof(c, 4000));
  cli_close(c);
  /* a request line that never ends: 414 as soon as it is too long */
  c = cli(port);
  memset(req, 'a', 200);
  memcpy(req, "GET /", 5);
  cli_send(c, req, 200);
  cr_assert(cli_resp(c, &r, 2000));
  cr_expect_eq(r.status, 414);
  cli_close(c);
  /* header bytes */
  c = cli(port);
  snprintf(req, sizeof req, "GET / HTTP/1.1\r\nHost: t\r\nX-Big: %0300d\r\n\r\n", 0);
  cli_puts(c, req);
  cr_assert(cli_resp(c, &r, 2000));
  cr_expect_eq(r.status, 431);
  cr_expect_str_eq(r.body, "{\"error\":\"request_header_fields_too_large\"}");
  cr_expect(cli_wait_eof(c, 4000));
  cli_close(c);
  /* header count: 5 pass, 6 do not */
  c = cli(port);
  cli_puts(c, "GET /five HTTP/1.1\r\nHost: t\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n");
  cr_assert(cli_resp(c, &r, 2000));
  cr_expect_eq(r.status, 201);
  cli_puts(c, "GET /six HTTP/1.1\r\nHost: t\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\n\r\n");
  cr_assert(cli_resp(c, &r, 2000));
  cr_expect_eq(r.status, 431);
  cr_expect(cli_wait_eof(c, 4000));
  cli_close(c);
  cr_expect_not(saw("/smuggled"));
  cr_expect_not(saw("/six"));
  srv_end(s);
}

/* ---- timeouts ------------------------------------------------------------------------ */

Test(hserver, slow_head_408) {
  ak_hlimits_t lim = {.header_timeout_ms = 300};
  ak_hserver_t *s = srv_start(lim, 1);
  cli_t *c = cli(ak_hserver_port(s));
  int64_t t0 = now_ms();
  cli_puts(c, "GET / HTTP/1.1\r\nHost: t\r\n");
  resp_t r;
  cr_assert(cli_resp(c, &r, 3000));
  int64_t took = now_ms() - t0;
  cr_expect_eq(r.status, 408);
  cr_expect_str_eq(r.body, "{\"error\":\"request_timeout\"}");
  cr_expect(took >= 280 && took < 1500, "408 after %lld ms", (long long)took);
  cr_expect(cli_wait_eof(c, 4000));
  cr_expect_eq(get(&T.heads), 0);
  cli_close(c);
  srv_end(s);
}

Test(hserver, slow_body_408) {
  ak_hlimits_t lim = {.body_timeout_ms = 300};
  ak_hserver_t *s = srv_start(lim, 1);
  cli_t *c = cli(ak_hserver_port(s));
  cli_puts(c, "POST /slow HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nabc");
  resp_t r;
  cr_assert(cli_resp(c, &r, 3000));
  cr_expect_eq(r.status, 408);
  cr_expect(cli_wait_eof(c, 4000));
  cr_expect(wait_for(&T.done_lost, 1, 1000), "the handler's request ends with on_done(false)");
  cr_expect_eq(get(&T.done_ok), 0);
  cr_expect_eq(get(&T.ends), 0);
  cli_close(c);

  /* a body that trickles: each gap is short, the rate is too low */
  c = cli(ak_hserver_port(s));
  cli_puts(c, "POST /trickle HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n");
  int64_t t0 = now_ms();
  bool got = false;
  while (now_ms() - t0 < 3000 && !got) {
    send(c->fd, "x", 1, MSG_NOSIGNAL);
    usleep(100 * 1000);
    cli_fill(c, 0);
    got = memmem(c->buf, c->len, "408", 3) != NULL;
  }
  cr_expect(got, "408 for a body under body_min_rate");
  cli_close(c);
  srv_end(s);
}

Test(hserver, idle_keep_alive_closed) {
  ak_hlimits_t lim = {.idle_timeout_ms = 300};
  ak_hserver_t *s = srv_start(lim, 1);
  cli_t *c = cli(ak_hserver_port(s));
  cli_puts(c, REQ("/x"));
  resp_t r;
  cr_assert(cli_resp(c, &r, 2000));
  int64_t t0 = now_ms();
  cr_expect(cli_wait_eof(c, 3000), "closed while idle");
  int64_t took = now_ms() - t0;
  cr_expect(took >= 250 && took < 2000, "after %lld ms", (long long)took);
  cr_expect_eq(c->len, 0, "silently");
  cli_close(c);
  srv_end(s);
}

/* ---- caps ------------------------------------------------------------------------------ */

Test(hserver, cap_closes_oldest_idle) {
  ak_hlimits_t lim = {.max_connections = 2};
  ak_hserver_t *s = srv_start(lim, 2);
  int port = ak_hserver_port(s);
  resp_t r;
  cli_t *a = cli(port);
  cli_puts(a, REQ("/a"));
  cr_assert(cli_resp(a, &r, 2000));
  usleep(20 * 1000);
  cli_t *b = cli(port);
  cli_puts(b, REQ("/b"));
  cr_assert(cli_resp(b, &r, 2000));
  usleep(50 * 1000);
  cli_t *c = cli(port);
  cli_puts(c, REQ("/c"));
  cr_assert(cli_resp(c, &r, 2000));
  cr_expect_eq(r.status, 201, "the new connection is served");
  cr_expect(cli_wait_eof(a, 3000), "the oldest idle one was closed");
  cli_fill(b, 100);
  cr_expect(!b->eof, "the younger one stays");
  cli_puts(b, REQ("/b2"));
  cr_assert(cli_resp(b, &r, 2000));
  cr_expect_eq(r.status, 201);
  cli_close(a);
  cli_close(b);
  cli_close(c);
  srv_end(s);
}

Test(hserver, cap_503_when_none_idle) {
  ak_hlimits_t lim = {.max_connections = 2};
  ak_hserver_t *s = srv_start(lim, 2);
  int port = ak_hserver_port(s);
  cli_t *a = cli(port), *b = cli(port);
  cli_puts(a, "GET /a HTTP/1.1\r\n"); /* both busy: a head in progress */
  cli_puts(b, "GET /b HTTP/1.1\r\n");
  usleep(100 * 1000);
  cli_t *c = cli(port);
  cli_puts(c, REQ("/c"));
  resp_t r;
  cr_assert(cli_resp(c, &r, 2000));
  cr_expect_eq(r.status, 503);
  cr_expect_str_eq(r.body, "{\"error\":\"overload\"}");
  cr_expect(has_header(&r, "\r\nRetry-After: 1\r\n"));
  cr_expect(has_header(&r, "\r\nConnection: close\r\n"));
  cr_expect(cli_wait_eof(c, 4000), "closed without a reset");
  cr_expect_not(saw("/c"));
  /* the busy ones are still served */
  cli_puts(a, "Host: t\r\n\r\n");
  cr_assert(cli_resp(a, &r, 2000));
  cr_expect_eq(r.status, 201);
  cli_close(a);
  cli_close(b);
  cli_close(c);
  srv_end(s);
}

Test(hserver, per_client_cap) {
  ak_hlimits_t lim = {.max_per_client = 1};
  ak_hserver_t *s = srv_start(lim, 2);
  int port = ak_hserver_port(s);
  resp_t r;
  cli_t *a = cli_from(port, "127.0.0.2");
  cli_puts(a, REQ("/a"));
  cr_assert(cli_resp(a, &r, 2000));
  cr_expect_eq(r.status, 201);
  cli_t *a2 = cli_from(port, "127.0.0.2");
  cli_puts(a2, REQ("/a2"));
  cr_assert(cli_resp(a2, &r, 2000));
  cr_expect_eq(r.status, 503);
  cr_expect_str_eq(r.body, "{\"error\":\"overload\"}");
  cr_expect(cli_wait_eof(a2, 4000));
  cli_t *b = cli_from(port, "127.0.0.3");
  cli_puts(b, REQ("/b"));
  cr_assert(cli_resp(b, &r, 2000));
  cr_expect_eq(r.status, 201, "another address has its own count");
  /* the slot comes back when a connection ends */
  cli_close(a);
  usleep(100 * 1000);
  cli_t *a3 = cli_from(port, "127.0.0.2");
  cli_puts(a3, REQ("/a3"));
  cr_assert(cli_resp(a3, &r, 2000));
  cr_expect_eq(r.status, 201);
  cr_expect_not(saw("/a2"));
  cli_close(a2);
  cli_close(a3);
  cli_close(b);
  srv_end(s);
}

/* ---- suspend / resume --------------------------------------------------------------------- */

static void *resume_all(void *arg) {
  int delay_ms = (int)(intptr_t)arg;
  usleep((useconds_t)delay_ms * 1000);
  pthread_mutex_lock(&T.mu);
  int n = T.nheld;
  ak_hreq_t *held[64];
  memcpy(held, T.held, sizeof held);
  T.nheld = 0;
  pthread_mutex_unlock(&T.mu);
  for (int i = 0; i < n; i++) ak_hreq_resume(held[i]);
  return NULL;
}

Test(hserver, suspend_and_resume_from_another_thread) {
  ak_hserver_t *s = srv_start(nolim(), 2);
  cli_t *c = cli(ak_hserver_port(s));
  cli_puts(c, "POST /suspend HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc" REQ("/after"));
  cr_assert(wait_for(&T.nheld, 1, 2000));
  resp_t r;
  cr_expect(!cli_resp(c, &r, 300), "nothing while suspended");
  cr_expect_eq(ak_hserver_inflight(s), 1);
  cr_expect_not(saw("/after"), "the pipelined request waits");
  pthread_t th;
  pthread_create(&th, NULL, resume_all, (void *)(intptr_t)0);
  pthread_join(th, NULL);
  cr_assert(cli_resp(c, &r, 2000));
  cr_expect_eq(r.status, 201);
  cr_expect_str_eq(r.body, "len=3");
  cr_assert(cli_resp(c, &r, 2000));
  cr_expect_eq(r.status, 201, "then the pipelined one");
  cr_expect(ak_hserver_wait_idle(s, 2000));
  cr_expect_eq(get(&T.resumes), 1);
  cr_expect_eq(get(&T.done_ok), 2);
  cli_close(c);
  srv_end(s);
}

Test(hserver, resume_after_client_closed) {
  ak_hserver_t *s = srv_start(nolim(), 1);
  cli_t *c = cli(ak_hserver_port(s));
  cli_puts(c, REQ("/suspend"));
  cr_assert(wait_for(&T.nheld, 1, 2000));
  cli_close(c);
  usleep(100 * 1000);
  cr_expect_eq(ak_hserver_inflight(s), 1, "held: never ended under the handler");
  resume_all((void *)(intptr_t)0);
  cr_expect(wait_for(&T.done_lost, 1, 2000), "on_done(false) after on_resume");
  cr_expect_eq(get(&T.resumes), 1);
  cr_expect_eq(get(&T.done_ok), 0);
  cr_expect(ak_hserver_wait_idle(s, 2000));
  srv_end(s);
}

Test(hserver, stop_waits_for_suspended_requests) {
  ak_hserver_t *s = srv_start(nolim(), 2);
  cli_t *c = cli(ak_hserver_port(s));
  cli_puts(c, REQ("/suspend"));
  cr_assert(wait_for(&T.nheld, 1, 2000));
  cli_t *idle = cli(ak_hserver_port(s));
  cli_puts(idle, REQ("/idle"));
  resp_t r;
  cr_assert(cli_resp(idle, &r, 2000));
  pthread_t th;
  pthread_create(&th, NULL, resume_all, (void *)(intptr_t)400);
  int64_t t0 = now_ms();
  ak_hserver_stop(s);
  int64_t took = now_ms() - t0;
  pthread_join(th, NULL);
  cr_expect(took >= 350, "stop returned after %lld ms, before the resume", (long long)took);
  cr_assert(cli_resp(c, &r, 2000), "the held request is answered");
  cr_expect_eq(r.status, 201);
  cr_expect(cli_wait_eof(c, 2000));
  cr_expect(cli_wait_eof(idle, 2000));
  cr_expect_eq(get(&T.done_ok), 2);
  cli_close(c);
  cli_close(idle);
  ak_hserver_free(s);
}

/* ---- close_listener ------------------------------------------------------------------------ */

Test(hserver, close_listener_serves_backlog_and_closes_idle) {
  ak_hserver_t *s = srv_start(nolim(), 1);
  int port = ak_hserver_port(s);
  resp_t r;
  cli_t *idle = cli(port);
  cli_puts(idle, REQ("/idle"));
  cr_assert(cli_resp(idle, &r, 2000));
  cli_t *held = cli(port);
  cli_puts(held, REQ("/suspend"));
  cr_assert(wait_for(&T.nheld, 1, 2000));
  cli_t *busy = cli(port);
  cli_puts(busy, REQ("/block")); /* holds the only loop for 700 ms */
  cr_assert(wait_for(&T.ends, 3, 2000));
  enum { N = 6 };
  cli_t *q[N];
  for (int i = 0; i < N; i++) {
    q[i] = cli(port); /* completes in the kernel's backlog: nobody accepts now */
    char req[64];
    snprintf(req, sizeof req, "GET /q%d HTTP/1.1\r\nHost: t\r\n\r\n", i);
    cli_puts(q[i], req);
  }
  ak_hserver_close_listener(s);
  cr_assert(cli_resp(busy, &r, 3000));
  cr_expect_eq(r.status, 201);
  usleep(100 * 1000);
  resume_all((void *)(intptr_t)0);
  cr_assert(cli_resp(held, &r, 3000));
  cr_expect_eq(r.status, 201);
  cr_expect(has_header(&r, "\r\nConnection: close\r\n"), "in progress: finishes with Connection: close");
  cr_expect(cli_wait_eof(held, 3000));
  for (int i = 0; i < N; i++) {
    cr_assert(cli_resp(q[i], &r, 3000), "backlog connection %d answered", i);
    cr_expect_eq(r.status, 201);
    cr_expect(has_header(&r, "\r\nConnection: close\r\n"));
    cr_expect(cli_wait_eof(q[i], 3000), "%d closed without a reset", i);
  }
  cr_expect(cli_wait_eof(idle, 3000), "the idle keep-alive connection closed without a reset");
  cr_expect_eq(idle->len, 0);
  cr_expect(cli_wait_eof(busy, 3000));
  /* the listening socket is gone */
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  cr_expect_neq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  close(fd);
  cr_expect(ak_hserver_wait_idle(s, 2000));
  for (int i = 0; i < N; i++) cli_close(q[i]);
  cli_close(idle);
  cli_close(busy);
  cli_close(held);
  srv_end(s);
}

/* ---- a client that never reads -------------------------------------------------------------- */

Test(hserver, client_that_never_reads_is_bounded) {
  ak_hserver_t *s = srv_start(nolim(), 2);
  int port = ak_hserver_port(s);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  int small = 4096;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  fcntl(fd, F_SETFL, O_NONBLOCK);
  static char blob[64 * 1024];
  const char *one = REQ("/flood");
  size_t ol = strlen(one), n = 0;
  while (n + ol <= sizeof blob) memcpy(blob + n, one, ol), n += ol;
  size_t sent = 0;
  int64_t t0 = now_ms();
  /* write until the server stops taking bytes (it stopped reading) */
  while (now_ms() - t0 < 5000) {
    ssize_t w = send(fd, blob + sent % n, n - sent % n, MSG_NOSIGNAL);
    if (w > 0) {
      sent += (size_t)w;
      continue;
    }
    if (errno != EAGAIN) break;
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    if (poll(&p, 1, 500) == 0) break; /* blocked for half a second: the server holds back */
  }
  cr_expect(now_ms() - t0 < 5000, "the server stopped reading");
  int h1 = get(&T.heads);
  usleep(300 * 1000);
  int h2 = get(&T.heads);
  cr_expect_eq(h1, h2, "no more requests are taken while the answers are not read");
  cr_expect_lt((size_t)h2, sent / ol, "requests stay unread (%d of %zu)", h2, sent / ol);
  /* meanwhile another client is served */
  cli_t *c = cli(port);
  cli_puts(c, REQ("/other"));
  resp_t r;
  cr_assert(cli_resp(c, &r, 2000));
  cr_expect_eq(r.status, 201);
  cli_close(c);
  close(fd);
  srv_end(s);
}

Test(hserver, write_timeout_closes) {
  ak_hlimits_t lim = {.write_timeout_ms = 300};
  ak_hserver_t *s = srv_start(lim, 1);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  int small = 4096;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)ak_hserver_port(s))};
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  const char *req = REQ("/big");
  cr_assert_eq(send(fd, req, strlen(req), 0), (ssize_t)strlen(req));
  cr_expect(wait_for(&T.done_lost, 1, 3000), "an answer not read for write_timeout_ms ends the connection");
  cr_expect_eq(get(&T.done_ok), 0);
  /* the socket was closed: reading on finds its end */
  fcntl(fd, F_SETFL, O_NONBLOCK);
  char buf[65536];
  bool ended = false;
  for (int i = 0; i < 2000 && !ended; i++) {
    ssize_t r = recv(fd, buf, sizeof buf, 0);
    if (r == 0 || (r < 0 && errno != EAGAIN)) ended = true;
    else if (r < 0) usleep(1000);
  }
  cr_expect(ended);
  close(fd);
  srv_end(s);
}

/* ---- errors ------------------------------------------------------------------------------- */

Test(hserver, bind_errors_name_the_listener) {
  memset(&T, 0, sizeof T);
  ak_hserver_t *a = srv_start(nolim(), 1);
  ak_hserver_cfg_t cfg = {.name = "ingest", .ip = "127.0.0.1", .port = ak_hserver_port(a), .loops = 1,
                          .handler = &handler};
  char *err = NULL;
  ak_hserver_t *b = ak_hserver_new(&cfg, &err);
  cr_assert_not_null(b);
  cr_expect_eq(ak_hserver_start(b, &err), -1);
  char want[128];
  snprintf(want, sizeof want, "ingest listener 127.0.0.1:%d: Address already in use", ak_hserver_port(a));
  cr_expect_str_eq(err ? err : "", want);
  free(err);
  ak_hserver_free(b);
  cfg.ip = "nope";
  b = ak_hserver_new(&cfg, &err);
  cr_expect_eq(ak_hserver_start(b, &err), -1);
  cr_expect(err && strstr(err, "ingest listener nope:"), "%s", err ? err : "");
  free(err);
  ak_hserver_free(b);
  /* every interface: dual stack (an IPv4 client reaches it) */
  cfg.ip = NULL;
  cfg.port = 0;
  b = ak_hserver_new(&cfg, &err);
  cr_assert_eq(ak_hserver_start(b, &err), 0, "%s", err ? err : "");
  cli_t *c = cli(ak_hserver_port(b));
  cli_puts(c, REQ("/dual"));
  resp_t r;
  cr_assert(cli_resp(c, &r, 2000));
  cr_expect_eq(r.status, 201);
  cli_close(c);
  srv_end(b);
  srv_end(a);
}
