/* libFuzzer harness for the stored record codec (core/envelope.c). Two properties:
 *  1. decode of arbitrary bytes (v1, or v2 with a dedupe key) either fails or yields
 *     fields that lie inside the record and re-encode to the very same bytes (the format
 *     has one spelling per envelope);
 *  2. an envelope built from the input survives encode -> decode field for field, and no
 *     strict prefix of its encoding (nor the encoding plus a byte) decodes.
 * Every buffer handed to the decoder is an exact-size heap copy, so ASan sees any
 * overread. Never writes files. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/envelope.h"

#define CHECK(cond)                                                                 \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      fprintf(stderr, "fuzz_envelope: invariant failed at line %d: %s\n", __LINE__, \
              #cond);                                                               \
      abort();                                                                      \
    }                                                                               \
  } while (0)

/* (p, n) lies inside [base, base + len) (an empty field may sit at the very end). */
static int inside(const void *p, size_t n, const uint8_t *base, size_t len) {
  const uint8_t *q = p;
  if (!q) return n == 0;
  return q >= base && q <= base + len && n <= (size_t)(base + len - q);
}

static int same_bytes(const void *a, size_t al, const void *b, size_t bl) {
  return al == bl && (al == 0 || memcmp(a, b, al) == 0);
}

static void check_decoded_bounds(const ak_envelope_t *e, const uint8_t *rec, size_t len) {
  CHECK(inside(e->tenant, e->tenant_len, rec, len));
  CHECK(inside(e->source, e->source_len, rec, len));
  CHECK(inside(e->method, e->method_len, rec, len));
  CHECK(inside(e->path, e->path_len, rec, len));
  CHECK(inside(e->content_type, e->content_type_len, rec, len));
  CHECK(inside(e->body, e->body_len, rec, len));
  CHECK(inside(e->dedupe_key, e->dedupe_key_len, rec, len));
  CHECK(e->nheaders == 0 || e->headers != NULL);
  for (size_t i = 0; i < e->nheaders; i++) {
    CHECK(inside(e->headers[i].name, e->headers[i].name_len, rec, len));
    CHECK(inside(e->headers[i].value, e->headers[i].value_len, rec, len));
  }
}

static void check_same_envelope(const ak_envelope_t *a, const ak_envelope_t *b) {
  CHECK(memcmp(a->id, b->id, 16) == 0);
  CHECK(a->seq == b->seq);
  CHECK(a->received_at_ms == b->received_at_ms);
  CHECK(a->flags == b->flags);
  CHECK(same_bytes(a->tenant, a->tenant_len, b->tenant, b->tenant_len));
  CHECK(same_bytes(a->source, a->source_len, b->source, b->source_len));
  CHECK(same_bytes(a->method, a->method_len, b->method, b->method_len));
  CHECK(same_bytes(a->path, a->path_len, b->path, b->path_len));
  CHECK(same_bytes(a->content_type, a->content_type_len, b->content_type, b->content_type_len));
  CHECK(same_bytes(a->body, a->body_len, b->body, b->body_len));
  CHECK(same_bytes(a->dedupe_key, a->dedupe_key_len, b->dedupe_key, b->dedupe_key_len));
  CHECK(a->nheaders == b->nheaders);
  for (size_t i = 0; i < a->nheaders; i++) {
    CHECK(same_bytes(a->headers[i].name, a->headers[i].name_len, b->headers[i].name,
                     b->headers[i].name_len));
    CHECK(same_bytes(a->headers[i].value, a->headers[i].value_len, b->headers[i].value,
                     b->headers[i].value_len));
  }
}

/* Decode an exact-size heap copy of rec[0..len); returns the decoder's result. */
static int decode_copy(const uint8_t *rec, size_t len) {
  uint8_t *cp = malloc(len ? len : 1);
  CHECK(cp != NULL);
  if (len) memcpy(cp, rec, len);
  ak_envelope_t e;
  int rc = ak_envelope_decode(cp, len, &e);
  if (rc == 0) check_decoded_bounds(&e, cp, len);
  else CHECK(e.headers == NULL && e.nheaders == 0);
  ak_envelope_clear(&e);
  free(cp);
  return rc;
}

/* Property 1: arbitrary bytes. */
static void fuzz_decode(const uint8_t *data, size_t size) {
  ak_envelope_t e;
  int rc = ak_envelope_decode(data, size, &e);
  CHECK(rc == 0 || rc == -1);
  if (rc != 0) {
    CHECK(e.headers == NULL && e.nheaders == 0);
    return;
  }
  check_decoded_bounds(&e, data, size);
  size_t n = 0;
  uint8_t *again = ak_envelope_encode(&e, &n);
  CHECK(again != NULL);
  /* byte 1 is reserved: the decoder ignores it and the encoder writes 0 */
  CHECK(n == size);
  CHECK(again[0] == data[0] && again[1] == 0);
  CHECK(memcmp(again + 2, data + 2, size - 2) == 0);
  ak_envelope_t e2;
  CHECK(ak_envelope_decode(again, n, &e2) == 0);
  check_same_envelope(&e, &e2);
  ak_envelope_clear(&e2);
  /* the writer stamps the seq in place: only the seq may change */
  ak_envelope_set_seq(again, e.seq ^ 0x0123456789abcdefull);
  CHECK(ak_envelope_decode(again, n, &e2) == 0);
  CHECK(e2.seq == (e.seq ^ 0x0123456789abcdefull));
  e2.seq = e.seq;
  check_same_envelope(&e, &e2);
  ak_envelope_clear(&e2);
  free(again);
  ak_envelope_clear(&e);
}

/* A tiny reader over the fuzz input, FuzzedDataProvider-style; runs dry into zeros. */
typedef struct {
  const uint8_t *p;
  size_t left;
} src_t;

static uint64_t take_u(src_t *s, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; i++) {
    v <<= 8;
    if (s->left) {
      v |= *s->p++;
      s->left--;
    }
  }
  return v;
}

/* A slice of the input of a length chosen by the input (possibly NULL when empty, which
 * the encoder must treat as ""). */
static const char *take_slice(src_t *s, size_t *len, int allow_null) {
  size_t want = (size_t)take_u(s, 1);
  if (want == 255) want = (size_t)take_u(s, 2); /* now and then a long one */
  if (want > s->left) want = s->left;
  *len = want;
  if (want == 0 && allow_null) return NULL;
  const char *out = (const char *)s->p;
  s->p += want;
  s->left -= want;
  return out;
}

/* Property 2: build, encode, decode. */
static void fuzz_roundtrip(const uint8_t *data, size_t size) {
  src_t s = {data, size};
  ak_envelope_t in;
  memset(&in, 0, sizeof in);
  for (int i = 0; i < 16; i++) in.id[i] = (uint8_t)take_u(&s, 1);
  in.seq = take_u(&s, 8);
  in.received_at_ms = (int64_t)take_u(&s, 8);
  in.flags = (uint32_t)take_u(&s, 4);
  int nullable = (int)(take_u(&s, 1) & 1);
  in.tenant = take_slice(&s, &in.tenant_len, nullable);
  in.source = take_slice(&s, &in.source_len, nullable);
  in.method = take_slice(&s, &in.method_len, nullable);
  in.path = take_slice(&s, &in.path_len, nullable);
  in.content_type = take_slice(&s, &in.content_type_len, nullable);
  ak_header_t hdrs[16];
  in.nheaders = (size_t)(take_u(&s, 1) % 17);
  in.headers = in.nheaders ? hdrs : NULL;
  for (size_t i = 0; i < in.nheaders; i++) {
    hdrs[i].name = take_slice(&s, &hdrs[i].name_len, nullable);
    hdrs[i].value = take_slice(&s, &hdrs[i].value_len, nullable);
  }
  if (take_u(&s, 1) & 1) in.dedupe_key = take_slice(&s, &in.dedupe_key_len, nullable); /* a v2 record */
  /* the body is whatever is left: raw bytes, never interpreted */
  in.body = s.left ? s.p : NULL;
  in.body_len = s.left;

  size_t n = 0;
  uint8_t *enc = ak_envelope_encode(&in, &n);
  CHECK(enc != NULL);
  size_t expect = 38 + 2 + in.tenant_len + 2 + in.source_len + 2 + in.method_len + 4 + in.path_len +
                  2 + in.content_type_len + 4 + 4 + in.body_len;
  for (size_t i = 0; i < in.nheaders; i++) expect += 2 + hdrs[i].name_len + 4 + hdrs[i].value_len;
  if (in.dedupe_key_len) expect += 2 + in.dedupe_key_len;
  CHECK(n == expect);
  CHECK(enc[0] == (in.dedupe_key_len ? AK_ENV_VERSION_DEDUPE : AK_ENV_VERSION));

  /* exact-size copy so an overread past the record is an ASan report */
  uint8_t *rec = malloc(n);
  CHECK(rec != NULL);
  memcpy(rec, enc, n);
  free(enc);
  ak_envelope_t out;
  CHECK(ak_envelope_decode(rec, n, &out) == 0);
  check_decoded_bounds(&out, rec, n);
  check_same_envelope(&in, &out);
  ak_envelope_clear(&out);

  /* damage: every strict prefix is truncated, one extra byte is trailing garbage */
  size_t cuts[4] = {n - 1, n / 2, 38, size ? (size_t)data[0] * n / 256 : 0};
  for (int i = 0; i < 4; i++)
    if (cuts[i] < n) CHECK(decode_copy(rec, cuts[i]) == -1);
  uint8_t *longer = malloc(n + 1);
  CHECK(longer != NULL);
  memcpy(longer, rec, n);
  longer[n] = 0;
  CHECK(ak_envelope_decode(longer, n + 1, &out) == -1);
  CHECK(out.headers == NULL);
  free(longer);
  /* a wrong version is refused */
  rec[0] ^= 0x80;
  CHECK(decode_copy(rec, n) == -1);
  free(rec);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_decode(data, size);
  fuzz_roundtrip(data, size);
  return 0;
}
