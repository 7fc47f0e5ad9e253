/* Stored record format v1 and v2 (docs/storage.md), all integers big-endian. Decoding checks
 * every length against the buffer: a damaged record is an error, never a short read. */
#include <stdlib.h>
#include <string.h>
#include "core/envelope.h"

/* [0] ver [1] rsv [2..17] id(16) [18..25] seq [26..33] received_at [34..37] flags
 * then str16 tenant, str16 source, str16 method, str32 path, str16 content_type,
 * u32 nheaders { str16 name, str32 value }, str32 body; v2 then str16 dedupe_key */
#define HDR_FIXED 38

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static void put32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}
static void put64(uint8_t *p, uint64_t v) { put32(p, (uint32_t)(v >> 32)); put32(p + 4, (uint32_t)v); }
static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static uint32_t get32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) << 32 | get32(p + 4); }

uint8_t *ak_envelope_encode(const ak_envelope_t *e, size_t *out_len) {
  if (e->tenant_len > 0xFFFF || e->source_len > 0xFFFF || e->method_len > 0xFFFF ||
      e->content_type_len > 0xFFFF || e->path_len > 0xFFFFFFFFu || e->body_len > 0xFFFFFFFFu ||
      e->dedupe_key_len > 0xFFFF)
    return NULL;
  size_t n = HDR_FIXED + 2 + e->tenant_len + 2 + e->source_len + 2 + e->method_len + 4 + e->path_len +
             2 + e->content_type_len + 4 + 4 + e->body_len + (e->dedupe_key_len ? 2 + e->dedupe_key_len : 0);
  for (size_t i = 0; i < e->nheaders; i++) {
    if (e->headers[i].name_len > 0xFFFF || e->headers[i].value_len > 0xFFFFFFFFu) return NULL;
    n += 2 + e->headers[i].name_len + 4 + e->headers[i].value_len;
  }
  uint8_t *b = malloc(n);
  if (!b) return NULL;
  uint8_t *p = b;
  p[0] = e->dedupe_key_len ? AK_ENV_VERSION_DEDUPE : AK_ENV_VERSION;
  p[1] = 0;
  memcpy(p + AK_ENV_ID_OFFSET, e->id, 16);
  put64(p + AK_ENV_SEQ_OFFSET, e->seq);
  put64(p + 26, (uint64_t)e->received_at_ms);
  put32(p + 34, e->flags);
  p += HDR_FIXED;
#define PUTS16(s, l) do { put16(p, (uint16_t)(l)); p += 2; if (l) memcpy(p, s, l); p += (l); } while (0)
#define PUTS32(s, l) do { put32(p, (uint32_t)(l)); p += 4; if (l) memcpy(p, s, l); p += (l); } while (0)
  PUTS16(e->tenant, e->tenant_len);
  PUTS16(e->source, e->source_len);
  PUTS16(e->method, e->method_len);
  PUTS32(e->path, e->path_len);
  PUTS16(e->content_type, e->content_type_len);
  put32(p, (uint32_t)e->nheaders);
  p += 4;
  for (size_t i = 0; i < e->nheaders; i++) {
    PUTS16(e->headers[i].name, e->headers[i].name_len);
    PUTS32(e->headers[i].value, e->headers[i].value_len);
  }
  PUTS32(e->body, e->body_len);
  if (e->dedupe_key_len) PUTS16(e->dedupe_key, e->dedupe_key_len);
#undef PUTS16
#undef PUTS32
  *out_len = (size_t)(p - b);
  return b;
}

void ak_envelope_set_seq(uint8_t *rec, uint64_t seq) { put64(rec + AK_ENV_SEQ_OFFSET, seq); }
void ak_envelope_set_id(uint8_t *rec, const uint8_t id[16]) { memcpy(rec + AK_ENV_ID_OFFSET, id, 16); }

typedef struct {
  const uint8_t *p, *end;
  int bad;
} rd_t;

static const uint8_t *take(rd_t *r, size_t n) {
  if (r->bad || (size_t)(r->end - r->p) < n) {
    r->bad = 1;
    return NULL;
  }
  const uint8_t *q = r->p;
  r->p += n;
  return q;
}

static const char *take_str(rd_t *r, int width, size_t *len) {
  const uint8_t *l = take(r, (size_t)width);
  if (!l) return NULL;
  size_t n = width == 2 ? get16(l) : get32(l);
  const uint8_t *s = take(r, n);
  *len = n;
  return (const char *)s;
}

int ak_envelope_decode(const uint8_t *rec, size_t len, ak_envelope_t *e) {
  memset(e, 0, sizeof *e);
  if (len < HDR_FIXED || (rec[0] != AK_ENV_VERSION && rec[0] != AK_ENV_VERSION_DEDUPE)) return -1;
  memcpy(e->id, rec + 2, 16);
  e->seq = get64(rec + AK_ENV_SEQ_OFFSET);
  e->received_at_ms = (int64_t)get64(rec + 26);
  e->flags = get32(rec + 34);
  rd_t r = {rec + HDR_FIXED, rec + len, 0};
  e->tenant = take_str(&r, 2, &e->tenant_len);
  e->source = take_str(&r, 2, &e->source_len);
  e->method = take_str(&r, 2, &e->method_len);
  e->path = take_str(&r, 4, &e->path_len);
  e->content_type = take_str(&r, 2, &e->content_type_len);
  const uint8_t *nh = take(&r, 4);
  if (r.bad) return -1;
  uint32_t n = get32(nh);
  /* each header takes at least 6 bytes: a count beyond that is damage, not a big alloc */
  if ((size_t)n > (size_t)(r.end - r.p) / 6) return -1;
  if (n) {
    e->headers = calloc(n, sizeof *e->headers);
    if (!e->headers) return -1;
  }
  e->nheaders = n;
  for (uint32_t i = 0; i < n; i++) {
    e->headers[i].name = take_str(&r, 2, &e->headers[i].name_len);
    e->headers[i].value = take_str(&r, 4, &e->headers[i].value_len);
  }
  size_t bl = 0;
  e->body = (const uint8_t *)take_str(&r, 4, &bl);
  e->body_len = bl;
  if (rec[0] == AK_ENV_VERSION_DEDUPE) {
    e->dedupe_key = take_str(&r, 2, &e->dedupe_key_len);
    if (e->dedupe_key_len == 0) r.bad = 1; /* v2 exists only to carry a key */
  }
  if (r.bad || r.p != r.end) {
    ak_envelope_clear(e);
    return -1;
  }
  return 0;
}

void ak_envelope_clear(ak_envelope_t *e) {
  free(e->headers);
  e->headers = NULL;
  e->nheaders = 0;
}
