/* Key codecs for the store layout described in docs/storage.md. */
#include <string.h>
#include "store/keys.h"

const char *const ak_cf_names[AK_CF_COUNT] = {"default", "hooks", "deliveries", "index", "quarantine", "audit", "dedupe", "archive"};

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

size_t ak_key_due_prefix(uint8_t out[AK_DUE_KEY_MAX], const char *tenant, size_t tlen) {
  if (tlen > 255) tlen = 255;
  out[0] = AK_IDX_DUE;
  out[1] = (uint8_t)tlen;
  if (tlen) memcpy(out + 2, tenant, tlen);
  return 2 + tlen;
}

size_t ak_key_due(uint8_t out[AK_DUE_KEY_MAX], const char *tenant, size_t tlen, int64_t at_ms, uint64_t seq,
                  uint16_t sink) {
  size_t n = ak_key_due_prefix(out, tenant, tlen);
  ak_put_u64(out + n, (uint64_t)at_ms);
  ak_put_u64(out + n + 8, seq);
  ak_put_u16(out + n + 16, sink);
  return n + 18;
}

int ak_key_due_parse(const uint8_t *k, size_t klen, const char **tenant, size_t *tlen, int64_t *at_ms,
                     uint64_t *seq, uint16_t *sink) {
  if (klen < 20 || k[0] != AK_IDX_DUE || klen != 20 + (size_t)k[1]) return -1;
  size_t n = k[1];
  if (tenant) *tenant = (const char *)k + 2;
  if (tlen) *tlen = n;
  if (at_ms) *at_ms = (int64_t)ak_get_u64(k + 2 + n);
  if (seq) *seq = ak_get_u64(k + 10 + n);
  if (sink) *sink = ak_get_u16(k + 18 + n);
  return 0;
}

void ak_key_dead(uint8_t out[AK_DEAD_KEY_LEN], int64_t dead_at_ms, uint64_t seq, uint16_t sink) {
  out[0] = AK_IDX_DEAD;
  ak_put_u64(out + 1, (uint64_t)dead_at_ms);
  ak_put_u64(out + 9, seq);
  ak_put_u16(out + 17, sink);
}

void ak_key_archive(uint8_t out[AK_ARCHIVE_KEY_LEN], uint64_t seq) {
  out[0] = AK_IDX_ARCHIVE;
  ak_put_u64(out + 1, seq);
}

void ak_key_group(uint8_t out[AK_GROUP_KEY_LEN], uint64_t first_seq) {
  out[0] = AK_IDX_GROUP;
  ak_put_u64(out + 1, first_seq);
}

size_t ak_key_lane_prefix(uint8_t *out, const char *tenant, size_t tlen, const char *source, size_t slen,
                          uint16_t sink) {
  if (tlen > 255) tlen = 255;
  if (slen > 255) slen = 255;
  size_t n = 0;
  out[n++] = AK_IDX_LANE;
  out[n++] = (uint8_t)tlen;
  memcpy(out + n, tenant, tlen);
  n += tlen;
  out[n++] = (uint8_t)slen;
  memcpy(out + n, source, slen);
  n += slen;
  ak_put_u16(out + n, sink);
  return n + 2;
}

void ak_key_unsealed(uint8_t out[AK_GROUP_KEY_LEN], uint64_t seq) {
  out[0] = AK_IDX_UNSEALED;
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

void ak_key_replay(uint8_t out[AK_REPLAY_KEY_LEN], const uint8_t id[16]) {
  memcpy(out, AK_KEY_REPLAY, 2);
  memcpy(out + 2, id, 16);
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

size_t ak_delivery_row_ex(uint8_t *out, size_t cap, uint8_t state, uint32_t attempts, int64_t next_at_ms,
                          const char *sink_type, size_t tl, const uint8_t *replay_id) {
  if (tl > 255) tl = 255;
  size_t n = 1 + 1 + 4 + 8 + 1 + tl + (replay_id ? 16 : 0);
  if (n > cap) return 0;
  out[0] = 1;
  out[1] = state;
  ak_put_u32(out + 2, attempts);
  ak_put_u64(out + 6, (uint64_t)next_at_ms);
  out[14] = (uint8_t)tl;
  if (tl) memcpy(out + 15, sink_type, tl);
  if (replay_id) memcpy(out + 15 + tl, replay_id, 16);
  return n;
}

size_t ak_delivery_row(uint8_t *out, size_t cap, uint8_t state, uint32_t attempts,
                       int64_t next_at_ms, const char *sink_type) {
  return ak_delivery_row_ex(out, cap, state, attempts, next_at_ms, sink_type, strlen(sink_type), NULL);
}

int ak_delivery_row_decode(const uint8_t *v, size_t len, ak_delivery_row_t *r) {
  if (len < 15 || v[0] != 1) return -1;
  size_t tl = v[14];
  if (len != 15 + tl && len != 15 + tl + 16) return -1;
  r->state = v[1];
  r->attempts = ak_get_u32(v + 2);
  r->next_at_ms = (int64_t)ak_get_u64(v + 6);
  r->sink_type = (const char *)v + 15;
  r->sink_type_len = tl;
  r->has_replay = len == 15 + tl + 16;
  if (r->has_replay) memcpy(r->replay_id, v + 15 + tl, 16);
  else memset(r->replay_id, 0, 16);
  return 0;
}

size_t ak_due_value(uint8_t *out, size_t cap, uint32_t attempts, const char *sink_type, size_t tl,
                    const uint8_t *replay_id) {
  if (tl > 255) tl = 255;
  size_t n = 1 + 4 + 1 + tl + (replay_id ? 16 : 0);
  if (n > cap) return 0;
  out[0] = 1;
  ak_put_u32(out + 1, attempts);
  out[5] = (uint8_t)tl;
  if (tl) memcpy(out + 6, sink_type, tl);
  if (replay_id) memcpy(out + 6 + tl, replay_id, 16);
  return n;
}

int ak_due_value_decode(const uint8_t *v, size_t len, ak_due_value_t *d) {
  memset(d, 0, sizeof *d);
  d->sink_type = "";
  if (len == 0) return 0;
  if (len < 6 || v[0] != 1) return -1;
  size_t tl = v[5];
  if (len != 6 + tl && len != 6 + tl + 16) return -1;
  d->attempts = ak_get_u32(v + 1);
  d->sink_type = (const char *)v + 6;
  d->sink_type_len = tl;
  d->has_replay = len == 6 + tl + 16;
  if (d->has_replay) memcpy(d->replay_id, v + 6 + tl, 16);
  return 0;
}

size_t ak_dead_entry_encode(uint8_t *out, size_t cap, const ak_dead_entry_t *e) {
  size_t tl = e->sink_type_len > 255 ? 255 : e->sink_type_len;
  size_t sl = e->source_len > 255 ? 255 : e->source_len;
  size_t nl = e->tenant_len > 255 ? 255 : e->tenant_len;
  size_t rl = e->reason_len > 65535 ? 65535 : e->reason_len;
  size_t n = 1 + 16 + 8 + 4 + 1 + tl + 1 + sl + 1 + nl + 2 + rl;
  if (n > cap) return 0;
  uint8_t *p = out;
  *p++ = 1;
  memcpy(p, e->id, 16);
  p += 16;
  ak_put_u64(p, (uint64_t)e->received_at_ms);
  p += 8;
  ak_put_u32(p, e->attempts);
  p += 4;
  *p++ = (uint8_t)tl;
  if (tl) memcpy(p, e->sink_type, tl);
  p += tl;
  *p++ = (uint8_t)sl;
  if (sl) memcpy(p, e->source, sl);
  p += sl;
  *p++ = (uint8_t)nl;
  if (nl) memcpy(p, e->tenant, nl);
  p += nl;
  ak_put_u16(p, (uint16_t)rl);
  p += 2;
  if (rl) memcpy(p, e->reason, rl);
  return n;
}

int ak_dead_entry_decode(const uint8_t *v, size_t len, ak_dead_entry_t *e) {
  const uint8_t *p = v, *end = v + len;
  if (len < 1 + 16 + 8 + 4 + 1 || v[0] != 1) return -1;
  p++;
  memcpy(e->id, p, 16);
  p += 16;
  e->received_at_ms = (int64_t)ak_get_u64(p);
  p += 8;
  e->attempts = ak_get_u32(p);
  p += 4;
  const char **strs[3] = {&e->sink_type, &e->source, &e->tenant};
  size_t *lens[3] = {&e->sink_type_len, &e->source_len, &e->tenant_len};
  for (int i = 0; i < 3; i++) {
    if (p >= end) return -1;
    size_t l = *p++;
    if ((size_t)(end - p) < l) return -1;
    *strs[i] = (const char *)p;
    *lens[i] = l;
    p += l;
  }
  if (end - p < 2) return -1;
  size_t rl = ak_get_u16(p);
  p += 2;
  if ((size_t)(end - p) != rl) return -1;
  e->reason = (const char *)p;
  e->reason_len = rl;
  return 0;
}
