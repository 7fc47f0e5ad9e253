/* Key codecs for the store layout described in docs/storage.md. */
#include <string.h>
#include "store/keys.h"

const char *const ak_cf_names[AK_CF_COUNT] = {"default", "hooks", "deliveries", "index", "quarantine"};

void ak_put_u16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
void ak_put_u32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}
void ak_put_u64(uint8_t *p, uint64_t v) { ak_put_u32(p, (uint32_t)(v >> 32)); ak_put_u32(p + 4, (uint32_t)v); }
uint16_t ak_get_u16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
uint32_t ak_get_u32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
uint64_t ak_get_u64(const uint8_t *p) { return (uint64_t)ak_get_u32(p) << 32 | ak_get_u32(p + 4); }

void ak_key_hook(uint8_t out[AK_HOOK_KEY_LEN], uint64_t seq) { ak_put_u64(out, seq); }

void ak_key_delivery(uint8_t out[AK_DELIVERY_KEY_LEN], uint64_t seq, uint16_t sink) {
  ak_put_u64(out, seq);
  ak_put_u16(out + 8, sink);
}

void ak_key_due(uint8_t out[AK_DUE_KEY_LEN], int64_t at_ms, uint64_t seq, uint16_t sink) {
  out[0] = AK_IDX_DUE;
  ak_put_u64(out + 1, (uint64_t)at_ms);
  ak_put_u64(out + 9, seq);
  ak_put_u16(out + 17, sink);
}

void ak_key_archive(uint8_t out[AK_ARCHIVE_KEY_LEN], uint64_t seq) {
  out[0] = AK_IDX_ARCHIVE;
  ak_put_u64(out + 1, seq);
}

void ak_key_id(uint8_t out[AK_ID_KEY_LEN], const uint8_t id[16]) {
  out[0] = AK_IDX_ID;
  memcpy(out + 1, id, 16);
}

void ak_key_pen(uint8_t out[AK_PEN_KEY_LEN], char tag, int64_t received_at_ms, const uint8_t id[16]) {
  out[0] = (uint8_t)tag;
  ak_put_u64(out + 1, (uint64_t)received_at_ms);
  memcpy(out + 9, id, 16);
}

size_t ak_pen_summary_encode(uint8_t *out, size_t cap, const ak_pen_summary_t *s) {
  size_t sl = s->source_len > 0xffff ? 0xffff : s->source_len;
  size_t tl = s->tenant_len > 0xffff ? 0xffff : s->tenant_len;
  size_t n = 1 + 1 + 8 + 2 + sl + 2 + tl;
  if (n > cap) return 0;
  out[0] = 1;
  out[1] = s->reason;
  ak_put_u64(out + 2, s->size);
  ak_put_u16(out + 10, (uint16_t)sl);
  if (sl) memcpy(out + 12, s->source, sl);
  ak_put_u16(out + 12 + sl, (uint16_t)tl);
  if (tl) memcpy(out + 14 + sl, s->tenant, tl);
  return n;
}

int ak_pen_summary_decode(const uint8_t *v, size_t len, ak_pen_summary_t *s) {
  if (len < 14 || v[0] != 1) return -1;
  s->reason = v[1];
  s->size = ak_get_u64(v + 2);
  size_t sl = ak_get_u16(v + 10);
  if (12 + sl + 2 > len) return -1;
  size_t tl = ak_get_u16(v + 12 + sl);
  if (14 + sl + tl != len) return -1;
  s->source = (const char *)v + 12;
  s->source_len = sl;
  s->tenant = (const char *)v + 14 + sl;
  s->tenant_len = tl;
  return 0;
}

size_t ak_delivery_row(uint8_t *out, size_t cap, uint8_t state, uint32_t attempts,
                       int64_t next_at_ms, const char *sink_type) {
  size_t tl = strlen(sink_type);
  if (tl > 255) tl = 255;
  size_t n = 1 + 1 + 4 + 8 + 1 + tl;
  if (n > cap) return 0;
  out[0] = 1;
  out[1] = state;
  ak_put_u32(out + 2, attempts);
  ak_put_u64(out + 6, (uint64_t)next_at_ms);
  out[14] = (uint8_t)tl;
  memcpy(out + 15, sink_type, tl);
  return n;
}
