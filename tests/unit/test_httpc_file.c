/* Unit tests: request bodies sent from a file (net/httpc.h body_from_fd) against a small
 * blocking HTTP/1.1 server in this process that hashes each body as it arrives (no cap on
 * its size): the region [body_off, body_off + body_len) goes out whole and in order, a
 * handle used for it then carries bodies from memory again, a file shorter than the region
 * fails the request by name, and a body curl must send a second time (a kept connection
 * that died after the request went out) is read again from its first byte (the seek
 * callback; without it curl cannot rewind and the request fails). */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <openssl/evp.h>
#include "net/httpc.h"

/* ---- the server ------------------------------------------------------------------- */

typedef struct {
  int lfd;
  unsigned short port;
  pthread_t th;
  pthread_mutex_t mu;
  int accepts, requests, short_bodies;
  int drop_request;       /* the request with this number (1-based) is read whole, then its
                             connection closed unanswered; 0 = none */
  char method[16];
  bool expect_seen;
  unsigned long long last_len; /* the last whole body: length and SHA-256 */
  char last_hex[65];
} fsrv_t;

static void hex_of(const unsigned char *d, char out[65]) {
  for (int i = 0; i < 32; i++) sprintf(out + 2 * i, "%02x", d[i]);
}

static bool send_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) return false;
    p += w;
    n -= (size_t)w;
  }
  return true;
}

/* One connection's requests until it closes (or one is dropped). */
static void serve_conn(fsrv_t *s, int fd) {
  static char buf[1 << 16];
  size_t have = 0;
  for (;;) {
    char *end;
    while (!(end = memmem(buf, have, "\r\n\r\n", 4))) {
      if (have == sizeof buf) return;
      ssize_t r = recv(fd, buf + have, sizeof buf - have, 0);
      if (r <= 0) return;
      have += (size_t)r;
    }
    size_t hl = (size_t)(end - buf) + 4;
    char head[8192];
    size_t cl = hl < sizeof head ? hl : sizeof head - 1;
    memcpy(head, buf, cl);
    head[cl] = 0;
    unsigned long long len = 0;
    bool expect = false;
    for (char *l = strstr(head, "\r\n"); l && l[2]; l = strstr(l + 2, "\r\n")) {
      if (!strncasecmp(l + 2, "content-length:", 15)) len = strtoull(l + 17, NULL, 10);
      if (!strncasecmp(l + 2, "expect:", 7) && strstr(l + 9, "100-continue")) expect = true;
    }
    char method[16] = "";
    sscanf(head, "%15s", method);
    pthread_mutex_lock(&s->mu);
    int num = ++s->requests;
    snprintf(s->method, sizeof s->method, "%s", method);
    s->expect_seen |= expect;
    bool drop = num == s->drop_request;
    pthread_mutex_unlock(&s->mu);
    if (expect && !send_all(fd, "HTTP/1.1 100 Continue\r\n\r\n", 25)) return;
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    EVP_DigestInit_ex(md, EVP_sha256(), NULL);
    memmove(buf, buf + hl, have - hl);
    have -= hl;
    unsigned long long got = 0;
    for (;;) {
      size_t take = have < len - got ? have : (size_t)(len - got);
      EVP_DigestUpdate(md, buf, take);
      got += take;
      memmove(buf, buf + take, have - take);
      have -= take;
      if (got == len) break;
      ssize_t r = recv(fd, buf, sizeof buf, 0);
      if (r <= 0) {
        pthread_mutex_lock(&s->mu);
        s->short_bodies++;
        pthread_mutex_unlock(&s->mu);
        EVP_MD_CTX_free(md);
        return;
      }
      have = (size_t)r;
    }
    unsigned char d[32];
    unsigned dl = 0;
    EVP_DigestFinal_ex(md, d, &dl);
    EVP_MD_CTX_free(md);
    char hex[65];
    hex_of(d, hex);
    pthread_mutex_lock(&s->mu);
    s->last_len = len;
    memcpy(s->last_hex, hex, sizeof hex);
    pthread_mutex_unlock(&s->mu);
    if (drop) return; /* read whole, never answered: the kept connection died */
    char out[256];
    char bodytxt[96];
    int bl = snprintf(bodytxt, sizeof bodytxt, "%llu %s", len, hex);
    int ol = snprintf(out, sizeof out, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", bl, bodytxt);
    if (!send_all(fd, out, (size_t)ol)) return;
  }
}

static void *fserve(void *arg) {
  fsrv_t *s = arg;
  for (;;) {
    int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      break; /* shut down */
    }
    pthread_mutex_lock(&s->mu);
    s->accepts++;
    pthread_mutex_unlock(&s->mu);
    serve_conn(s, fd);
    close(fd);
  }
  return NULL;
}

static fsrv_t *fsrv_start(void) {
  fsrv_t *s = calloc(1, sizeof *s);
  pthread_mutex_init(&s->mu, NULL);
  s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET};
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  cr_assert_eq(bind(s->lfd, (struct sockaddr *)&sa, sizeof sa), 0);
  cr_assert_eq(listen(s->lfd, 16), 0);
  socklen_t sl = sizeof sa;
  getsockname(s->lfd, (struct sockaddr *)&sa, &sl);
  s->port = ntohs(sa.sin_port);
  cr_assert_eq(pthread_create(&s->th, NULL, fserve, s), 0);
  return s;
}

/* After the client is freed (its connections closed, so the server is back in accept). */
static void fsrv_stop(fsrv_t *s) {
  shutdown(s->lfd, SHUT_RDWR);
  pthread_join(s->th, NULL);
  close(s->lfd);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

/* ---- the client side ---------------------------------------------------------------- */

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done;
  ak_httpc_result_t result;
  long status;
  char why[160];
  char body[256];
} fwait_t;

static void fon_done(void *ctx, const ak_httpc_resp_t *rs) {
  fwait_t *w = ctx;
  pthread_mutex_lock(&w->mu);
  w->result = rs->result;
  w->status = rs->status;
  snprintf(w->why, sizeof w->why, "%s", rs->why);
  size_t n = rs->body && rs->body_bytes < sizeof w->body ? rs->body_bytes : 0;
  memcpy(w->body, rs->body ? (const char *)rs->body : "", n);
  w->body[n] = 0;
  w->done = true;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

static void frun(ak_httpc_t *c, const ak_httpc_req_t *rq, fwait_t *w) {
  memset(w, 0, sizeof *w);
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  cr_assert_eq(ak_httpc_submit(c, rq, fon_done, w), 0);
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 30;
  pthread_mutex_lock(&w->mu);
  while (!w->done)
    if (pthread_cond_timedwait(&w->cv, &w->mu, &until) != 0) break;
  pthread_mutex_unlock(&w->mu);
  cr_assert(w->done, "no completion");
}

static char dir[64];

static void setup(void) {
  snprintf(dir, sizeof dir, "/tmp/ak-httpc-file-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  cr_assert_eq(system(cmd), 0);
}

TestSuite(httpc_file, .init = setup, .fini = teardown);

/* A file of n pseudo-random bytes, open for reading; *bytes holds them (malloc'd). */
static int data_file(size_t n, uint8_t **bytes) {
  char path[128];
  snprintf(path, sizeof path, "%s/body", dir);
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  cr_assert_geq(fd, 0);
  uint8_t *b = malloc(n);
  uint64_t x = 0x2545f4914f6cdd1dull;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b[i] = (uint8_t)(x >> 11);
  }
  for (size_t done = 0; done < n;) {
    ssize_t w = write(fd, b + done, n - done);
    cr_assert_gt(w, 0);
    done += (size_t)w;
  }
  *bytes = b;
  return fd;
}

static void expect_answer(const fwait_t *w, const uint8_t *p, size_t n) {
  unsigned char d[32];
  unsigned dl = 0;
  EVP_Digest(p, n, d, &dl, EVP_sha256(), NULL);
  char want[128], hex[65];
  hex_of(d, hex);
  snprintf(want, sizeof want, "%zu %s", n, hex);
  cr_assert_eq(w->result, AK_HTTPC_OK, "%s", w->why);
  cr_assert_eq(w->status, 200);
  cr_assert_str_eq(w->body, want, "the server received another body");
}

static ak_httpc_t *one_worker(void) {
  char err[160] = "";
  ak_httpc_t *c = ak_httpc_new(&(ak_httpc_opts_t){.name = "ak-httpc-file", .workers = 1}, err, sizeof err);
  cr_assert_not_null(c, "%s", err);
  return c;
}

/* ---- tests ------------------------------------------------------------------------ */

Test(httpc_file, sends_the_region_and_the_handle_goes_back_to_memory_bodies) {
  fsrv_t *s = fsrv_start();
  ak_httpc_t *c = one_worker();
  size_t n = (5u << 20) + 17;
  uint8_t *bytes;
  int fd = data_file(n, &bytes);
  char u[64];
  snprintf(u, sizeof u, "http://127.0.0.1:%u/obj", s->port);
  fwait_t w;
  /* a region in the middle, larger than curl's upload buffer many times over */
  uint64_t off = 1000;
  size_t len = (4u << 20) + 5;
  frun(c, &(ak_httpc_req_t){.method = "PUT", .url = u, .body_from_fd = true, .body_fd = fd, .body_off = off,
                            .body_len = len, .max_response_bytes = 4096, .keep_body = true},
       &w);
  expect_answer(&w, bytes + off, len);
  cr_assert_str_eq(s->method, "PUT");
  cr_assert(s->expect_seen, "over 1 MiB: curl asks for 100-continue as for any large body");
  /* the same handle, a body from memory next, then an empty one, then a whole file */
  frun(c, &(ak_httpc_req_t){.method = "PUT", .url = u, .body = "from memory", .body_len = 11,
                            .max_response_bytes = 4096, .keep_body = true},
       &w);
  expect_answer(&w, (const uint8_t *)"from memory", 11);
  frun(c, &(ak_httpc_req_t){.method = "POST", .url = u, .body_from_fd = true, .body_fd = fd, .body_len = 0,
                            .max_response_bytes = 4096, .keep_body = true},
       &w);
  expect_answer(&w, (const uint8_t *)"", 0);
  frun(c, &(ak_httpc_req_t){.method = "POST", .url = u, .body_from_fd = true, .body_fd = fd, .body_len = n,
                            .max_response_bytes = 4096, .keep_body = true, .headers = (const char *[]){"Expect:"},
                            .nheaders = 1},
       &w);
  expect_answer(&w, bytes, n);
  cr_assert_eq(s->short_bodies, 0);
  ak_httpc_free(c);
  fsrv_stop(s);
  close(fd);
  free(bytes);
}

Test(httpc_file, a_file_shorter_than_the_region_fails_by_name) {
  fsrv_t *s = fsrv_start();
  ak_httpc_t *c = one_worker();
  size_t n = 300000;
  uint8_t *bytes;
  int fd = data_file(n, &bytes);
  char u[64];
  snprintf(u, sizeof u, "http://127.0.0.1:%u/obj", s->port);
  fwait_t w;
  frun(c, &(ak_httpc_req_t){.method = "PUT", .url = u, .body_from_fd = true, .body_fd = fd, .body_off = 10,
                            .body_len = n, .max_response_bytes = 4096, .keep_body = true},
       &w);
  cr_assert_eq(w.result, AK_HTTPC_FAILED);
  cr_assert_str_eq(w.why, "body file: shorter than the body");
  /* a descriptor that cannot be read: named too */
  int wfd = open("/dev/null", O_WRONLY | O_CLOEXEC);
  frun(c, &(ak_httpc_req_t){.method = "PUT", .url = u, .body_from_fd = true, .body_fd = wfd, .body_len = 10,
                            .max_response_bytes = 4096, .keep_body = true},
       &w);
  cr_assert_eq(w.result, AK_HTTPC_FAILED);
  cr_assert(strstr(w.why, "body file: ") == w.why, "%s", w.why);
  close(wfd);
  /* the client is fine afterwards */
  frun(c, &(ak_httpc_req_t){.method = "PUT", .url = u, .body_from_fd = true, .body_fd = fd, .body_len = n,
                            .max_response_bytes = 4096, .keep_body = true},
       &w);
  expect_answer(&w, bytes, n);
  /* refused at submit: no descriptor, a region past 2^63 */
  cr_assert_eq(ak_httpc_submit(c, &(ak_httpc_req_t){.url = u, .body_from_fd = true, .body_fd = -1, .body_len = 1},
                               fon_done, &w),
               AK_HTTPC_EINVAL);
  cr_assert_eq(ak_httpc_submit(c,
                               &(ak_httpc_req_t){.url = u, .body_from_fd = true, .body_fd = fd, .body_len = 2,
                                                 .body_off = INT64_MAX},
                               fon_done, &w),
               AK_HTTPC_EINVAL);
  ak_httpc_free(c);
  fsrv_stop(s);
  close(fd);
  free(bytes);
}

/* The kept connection dies after the second request's body went out on it: curl retries on
 * a new connection and must send the body again, which it can only do through the seek
 * callback. The server hashes what the retry carried. */
Test(httpc_file, a_resent_body_is_read_again_from_its_start) {
  fsrv_t *s = fsrv_start();
  s->drop_request = 2;
  ak_httpc_t *c = one_worker();
  size_t n = 700000; /* several upload buffers; "Expect:" below keeps curl from waiting */
  uint8_t *bytes;
  int fd = data_file(n, &bytes);
  char u[64];
  snprintf(u, sizeof u, "http://127.0.0.1:%u/obj", s->port);
  fwait_t w;
  frun(c, &(ak_httpc_req_t){.method = "PUT", .url = u, .body = "first", .body_len = 5, .max_response_bytes = 4096,
                            .keep_body = true},
       &w);
  expect_answer(&w, (const uint8_t *)"first", 5);
  frun(c, &(ak_httpc_req_t){.method = "PUT", .url = u, .body_from_fd = true, .body_fd = fd, .body_len = n,
                            .headers = (const char *[]){"Expect:"}, .nheaders = 1, .max_response_bytes = 4096,
                            .keep_body = true},
       &w);
  expect_answer(&w, bytes, n);
  pthread_mutex_lock(&s->mu);
  int accepts = s->accepts, requests = s->requests;
  pthread_mutex_unlock(&s->mu);
  cr_assert_eq(requests, 3, "the first, the dropped one, its retry");
  cr_assert_eq(accepts, 2, "the retry went out on a new connection");
  ak_httpc_free(c);
  fsrv_stop(s);
  close(fd);
  free(bytes);
}
