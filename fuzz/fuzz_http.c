/* libFuzzer harness for the server layer's request engine (http/proto.c, http/parse.c):
 * no socket, no loop. The input is a byte stream a client sends on one connection, fed
 * twice: once whole, once cut at points derived from the input. Properties:
 *  1. never a crash, a leak, or undefined behaviour;
 *  2. the same bytes out and the same handler calls whatever the cuts;
 *  3. nothing whose framing is invalid reaches the handler: every request it sees passes
 *     a restatement of the rules here (one decimal Content-Length, no Content-Length with
 *     Transfer-Encoding, chunked as the only coding, token names, no control byte in a
 *     value, HTTP/1.0 or 1.1, an origin-form target), its body is as long as declared, and
 *     when the first head of the stream holds a bare CR or LF, a NUL, or an obs-fold line,
 *     the handler sees nothing at all (so no 2xx can come out for it);
 *  4. on_done once for every on_head.
 * Byte 0: flags (bit 0 small limits, bit 1 end of input before the clock runs, bits 2-7
 * seed the cuts); the rest is the stream. The handler: /h... answers 403 at on_head,
 * /b... answers 413 in the middle of a body, /s... suspends at on_end and is resumed,
 * anything else gets 201 at on_end. Never writes files. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "core/buf.h"
#include "http/proto.h"

#define CHECK(cond)                                                                                     \
  do {                                                                                                  \
    if (!(cond)) {                                                                                      \
      fprintf(stderr, "fuzz_http: invariant failed at line %d: %s\n", __LINE__, #cond);                  \
      abort();                                                                                          \
    }                                                                                                   \
  } while (0)

typedef struct run {
  ak_hconn_t c;
  ak_hproto_t p;
  ak_hclock_t clk;
  ak_buf_t out;   /* every byte the engine sent */
  ak_buf_t calls; /* the handler calls, in order (body bytes as totals per request) */
  bool resume_pending;
  unsigned heads, dones;
  uint64_t body;  /* the current request's body bytes so far */
  int64_t clen;
  bool chunked;
} run_t;

static bool tchar(uint8_t ch) {
  if ((ch >= '0' && ch <= '9') || ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'z')) return true;
  return ch && strchr("!#$%&'*+-.^_`|~", ch);
}

/* The framing rules, restated, on what the handler is given. */
static void check_request(ak_hreq_t *r, run_t *R) {
  const ak_header_t *h;
  size_t n = ak_hreq_headers(r, &h);
  unsigned ncl = 0, nte = 0;
  const char *te = NULL;
  size_t tel = 0;
  int64_t cl = -1;
  for (size_t i = 0; i < n; i++) {
    CHECK(h[i].name_len > 0);
    for (size_t k = 0; k < h[i].name_len; k++) CHECK(tchar((uint8_t)h[i].name[k]));
    for (size_t k = 0; k < h[i].value_len; k++) {
      uint8_t ch = (uint8_t)h[i].value[k];
      CHECK(ch >= 0x20 || ch == '\t');
      CHECK(ch != 0x7f);
    }
    if (h[i].value_len) {
      CHECK(h[i].value[0] != ' ' && h[i].value[0] != '\t');
      CHECK(h[i].value[h[i].value_len - 1] != ' ' && h[i].value[h[i].value_len - 1] != '\t');
    }
    if (h[i].name_len == 14 && strncasecmp(h[i].name, "content-length", 14) == 0) {
      ncl++;
      CHECK(h[i].value_len > 0);
      cl = 0;
      for (size_t k = 0; k < h[i].value_len; k++) {
        CHECK(h[i].value[k] >= '0' && h[i].value[k] <= '9');
        CHECK(cl <= (INT64_MAX - (h[i].value[k] - '0')) / 10); /* leading zeros are fine, overflow is not */
        cl = cl * 10 + (h[i].value[k] - '0');
      }
    }
    if (h[i].name_len == 17 && strncasecmp(h[i].name, "transfer-encoding", 17) == 0) {
      nte++;
      te = h[i].value;
      tel = h[i].value_len;
    }
  }
  CHECK(ncl <= 1);
  CHECK(!(ncl && nte));
  if (nte) {
    CHECK(nte == 1 && tel == 7 && strncasecmp(te, "chunked", 7) == 0);
  }
  CHECK(ak_hreq_content_length(r) == (nte ? -1 : cl));
  size_t pl;
  const char *path = ak_hreq_path(r, &pl);
  CHECK(path && strlen(path) == pl);
  CHECK((pl >= 1 && path[0] == '/') || (pl == 1 && path[0] == '*' && strcmp(ak_hreq_method(r), "OPTIONS") == 0));
  for (size_t k = 0; k < pl; k++) CHECK((uint8_t)path[k] > 0x20 && (uint8_t)path[k] < 0x7f);
  R->clen = nte ? -1 : cl;
  R->chunked = nte > 0;
}

static run_t *run_of(ak_hreq_t *r) { return (run_t *)(void *)r->c; }

static void h_head(void *ctx, ak_hreq_t *r) {
  (void)ctx;
  run_t *R = run_of(r);
  R->heads++;
  R->body = 0;
  check_request(r, R);
  size_t pl;
  const char *p = ak_hreq_path(r, &pl);
  ak_buf_printf(&R->calls, "head %s %.*s\n", ak_hreq_method(r), (int)pl, p);
  if (pl >= 2 && p[1] == 'h') {
    ak_hreq_add_header(r, "X-At", "head");
    ak_hreq_error(r, 403, "head", 0);
  }
}

static void h_body(void *ctx, ak_hreq_t *r, const uint8_t *b, size_t n) {
  (void)ctx, (void)b;
  run_t *R = run_of(r);
  CHECK(n > 0);
  R->body += n;
  if (R->clen >= 0) CHECK(R->body <= (uint64_t)R->clen);
  size_t pl;
  const char *p = ak_hreq_path(r, &pl);
  if (pl >= 2 && p[1] == 'b' && R->body >= 2) {
    ak_buf_printf(&R->calls, "body-answer\n");
    ak_hreq_error(r, 413, "too_large", 0);
  }
}

static void h_end(void *ctx, ak_hreq_t *r) {
  (void)ctx;
  run_t *R = run_of(r);
  if (R->clen >= 0) CHECK(R->body == (uint64_t)R->clen);
  ak_buf_printf(&R->calls, "end %llu\n", (unsigned long long)R->body);
  size_t pl;
  const char *p = ak_hreq_path(r, &pl);
  if (pl >= 2 && p[1] == 's') {
    ak_hreq_suspend(r);
    ak_hreq_resume(r);
    return;
  }
  char b[64];
  int n = snprintf(b, sizeof b, "{\"len\":%llu}", (unsigned long long)R->body);
  ak_hreq_reply(r, 201, "application/json", b, (size_t)n);
}

static void h_resume(void *ctx, ak_hreq_t *r) {
  (void)ctx;
  run_t *R = run_of(r);
  ak_buf_printf(&R->calls, "resume\n");
  ak_hreq_reply(r, 202, "text/plain", "later", 5);
}

static void h_done(void *ctx, ak_hreq_t *r, bool answered) {
  (void)ctx;
  run_t *R = run_of(r);
  R->dones++;
  CHECK(R->dones == R->heads);
  ak_buf_printf(&R->calls, "done %d\n", answered);
}

static void h_refused(void *ctx, unsigned status, const char *code) {
  (void)ctx, (void)status, (void)code;
}

static const ak_hhandler_t handler = {h_head, h_body, h_end, h_resume, h_done, h_refused};

static void op_resume(ak_hconn_t *c) { ((run_t *)(void *)c)->resume_pending = true; }

static const ak_hconn_ops_t ops = {.resume = op_resume};

/* What a driver does after every engine call: take the output, resume, end answers. */
static void settle(run_t *R) {
  for (int guard = 0; guard < 100000; guard++) {
    size_t n;
    const uint8_t *p = ak_hconn_out(&R->c, &n);
    if (n) {
      ak_buf_append(&R->out, p, n);
      ak_hconn_out_done(&R->c, n);
      continue;
    }
    if (R->resume_pending) {
      R->resume_pending = false;
      ak_hconn_resumed(&R->c);
      continue;
    }
    if (ak_hconn_state(&R->c) == AK_HC_WRITE) {
      ak_hconn_sent(&R->c);
      continue;
    }
    return;
  }
  CHECK(!"settle did not settle");
}

static void run_init(run_t *R, bool small) {
  memset(R, 0, sizeof *R);
  R->clk.now_ms = 1000;
  snprintf(R->clk.date, sizeof R->clk.date, "Thu, 01 Jan 1970 00:00:01 GMT");
  if (small) R->p.lim = (ak_hlimits_t){.max_request_line = 64, .max_header_bytes = 256, .max_headers = 8};
  ak_hproto_limits(&R->p.lim);
  R->p.h = &handler;
  R->p.ops = &ops;
  R->out = (ak_buf_t)AK_BUF_INIT;
  R->calls = (ak_buf_t)AK_BUF_INIT;
  ak_hconn_init(&R->c, &R->p, &R->clk, R);
}

static void run_finish(run_t *R, bool eof) {
  if (eof) {
    ak_hconn_eof(&R->c);
    settle(R);
  }
  R->clk.now_ms += 3600 * 1000; /* every timeout due */
  ak_hconn_tick(&R->c);
  settle(R);
  if (ak_hconn_state(&R->c) < AK_HC_CLOSING) {
    ak_hconn_abort(&R->c);
    settle(R);
  }
  CHECK(R->heads == R->dones);
  CHECK(atomic_load(&R->p.inflight) == 0);
}

static void run_free(run_t *R) {
  ak_hconn_free(&R->c);
  ak_buf_free(&R->out);
  ak_buf_free(&R->calls);
}

/* The first head of the stream holds a byte sequence no valid head has. */
static bool first_head_malformed(const uint8_t *d, size_t n) {
  size_t i = 0;
  while (i + 1 < n && d[i] == '\r' && d[i + 1] == '\n') i += 2;
  const uint8_t *end = NULL;
  for (size_t k = i; k + 3 < n; k++)
    if (d[k] == '\r' && d[k + 1] == '\n' && d[k + 2] == '\r' && d[k + 3] == '\n') {
      end = d + k;
      break;
    }
  if (!end) return false;
  for (const uint8_t *q = d + i; q < end; q++) {
    if (*q == 0) return true;
    if (*q == '\n' && (q == d + i || q[-1] != '\r')) return true;
    if (*q == '\r' && q[1] != '\n') return true;
    if (*q == '\n' && (q[1] == ' ' || q[1] == '\t')) return true;
  }
  return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  uint8_t flags = data[0];
  const uint8_t *d = data + 1;
  size_t n = size - 1;
  bool small = flags & 1, eof = flags & 2;

  /* an exact-size heap copy, so ASan sees any overread */
  uint8_t *copy = malloc(n ? n : 1);
  memcpy(copy, d, n);

  run_t *A = malloc(sizeof *A), *B = malloc(sizeof *B);
  run_init(A, small);
  ak_hconn_feed(&A->c, copy, n);
  settle(A);
  run_finish(A, eof);

  run_init(B, small);
  uint32_t x = 2166136261u ^ (uint32_t)(flags >> 2) ^ (uint32_t)n;
  size_t off = 0;
  while (off < n) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    size_t step = 1 + x % ((flags >> 2) % 16 + 1) * (x >> 28 ? 1 : 37);
    if (step > n - off) step = n - off;
    uint8_t *piece = malloc(step);
    memcpy(piece, copy + off, step);
    ak_hconn_feed(&B->c, piece, step);
    free(piece);
    settle(B);
    off += step;
  }
  run_finish(B, eof);

  if (getenv("AK_FUZZ_TRACE")) {
    const run_t *rs[2] = {A, B};
    for (int i = 0; i < 2; i++)
      fprintf(stderr, "--- %s: out (%zu bytes)\n%.*s\n--- calls\n%.*s", i ? "cut" : "whole", rs[i]->out.len,
              (int)rs[i]->out.len, rs[i]->out.p ? rs[i]->out.p : "", (int)rs[i]->calls.len,
              rs[i]->calls.p ? rs[i]->calls.p : "");
  }
  CHECK(A->out.len == B->out.len && (A->out.len == 0 || memcmp(A->out.p, B->out.p, A->out.len) == 0));
  CHECK(A->calls.len == B->calls.len && (A->calls.len == 0 || memcmp(A->calls.p, B->calls.p, A->calls.len) == 0));
  if (first_head_malformed(copy, n)) {
    CHECK(A->heads == 0);
    CHECK(A->out.len < 10 || memcmp(A->out.p, "HTTP/1.1 2", 10) != 0);
  }
  run_free(A);
  run_free(B);
  free(A);
  free(B);
  free(copy);
  return 0;
}
