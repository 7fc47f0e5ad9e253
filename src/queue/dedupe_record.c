/* The dedupe CF's record codec (dedupe_record.h). */
#include <string.h>
#include "queue/dedupe_record.h"
#include "store/keys.h"

size_t ak_dedupe_ekey(uint8_t *out, int64_t at_ms, const uint8_t *scope, size_t scope_len) {
  out[0] = AK_IDX_DEDUPE;
  ak_put_u64(out + 1, (uint64_t)at_ms);
  memcpy(out + 9, scope, scope_len);
  return 9 + scope_len;
}

/* scope: tlen:8 tenant slen:8 source klen:8 key, every length exact */
int ak_dedupe_scope_parse(const uint8_t *s, size_t n, const uint8_t **tenant, size_t *tl) {
  size_t o = 0;
  *tenant = s;
  *tl = 0;
  for (int part = 0; part < 3; part++) {
    if (o >= n) return -1;
    size_t l = s[o];
    if (part == 0) {
      *tenant = s + o + 1;
      *tl = l;
    }
    o += 1 + l;
  }
  return o == n ? 0 : -1;
}

int ak_dedupe_ekey_parse(const uint8_t *k, size_t klen, int64_t *at_ms, const uint8_t **scope, size_t *scope_len) {
  const uint8_t *t;
  size_t tl;
  if (klen < 12 || k[0] != AK_IDX_DEDUPE || ak_dedupe_scope_parse(k + 9, klen - 9, &t, &tl) != 0) return -1;
  *at_ms = (int64_t)ak_get_u64(k + 1);
  *scope = k + 9;
  *scope_len = klen - 9;
  return 0;
}

long ak_dedupe_record_each(const uint8_t *k, size_t kl, const uint8_t *v, size_t vl, int64_t *rec_at,
                           int (*fn)(const ak_dedupe_entry_t *, void *), void *ctx) {
  if (vl == AK_DEDUPE_VALUE_V1_LEN && v[0] == AK_DEDUPE_VALUE_V1) { /* one key per record (stores before v2) */
    ak_dedupe_entry_t e;
    if (ak_dedupe_ekey_parse(k, kl, &e.at, &e.scope, &e.scope_len) != 0) return -1;
    e.id = v + 1;
    *rec_at = e.at;
    if (fn) fn(&e, ctx);
    return 1;
  }
  if (kl != AK_DEDUPE_GROUP_KEY_LEN || k[0] != AK_IDX_DEDUPE || vl < 1 || v[0] != AK_DEDUPE_VALUE_V2) return -1;
  int64_t last = (int64_t)ak_get_u64(k + 1);
  long n = 0;
  for (int pass = 0; pass < 2; pass++) {
    size_t o = 1;
    n = 0;
    while (o < vl) {
      ak_dedupe_entry_t e;
      const uint8_t *t;
      size_t tl;
      if (vl - o < AK_DEDUPE_ENTRY_FIXED) return -1;
      e.at = (int64_t)ak_get_u64(v + o);
      e.id = v + o + 8;
      e.scope_len = ((size_t)v[o + 24] << 8) | v[o + 25];
      e.scope = v + o + AK_DEDUPE_ENTRY_FIXED;
      if (vl - o - AK_DEDUPE_ENTRY_FIXED < e.scope_len || e.at <= 0 || e.at > last ||
          ak_dedupe_scope_parse(e.scope, e.scope_len, &t, &tl) != 0)
        return -1;
      o += AK_DEDUPE_ENTRY_FIXED + e.scope_len;
      n++;
      if (pass == 1 && fn && fn(&e, ctx) != 0) break;
    }
    if (n == 0) return -1;
  }
  *rec_at = last;
  return n;
}

void ak_dedupe_group_key(uint8_t out[AK_DEDUPE_GROUP_KEY_LEN], int64_t last_at, uint64_t seq) {
  out[0] = AK_IDX_DEDUPE;
  ak_put_u64(out + 1, (uint64_t)last_at);
  ak_put_u64(out + 9, seq);
}

size_t ak_dedupe_entry_put(uint8_t *out, int64_t at, const uint8_t id[16], const uint8_t *scope, size_t scope_len) {
  ak_put_u64(out, (uint64_t)at);
  memcpy(out + 8, id, 16);
  out[24] = (uint8_t)(scope_len >> 8);
  out[25] = (uint8_t)scope_len;
  memcpy(out + AK_DEDUPE_ENTRY_FIXED, scope, scope_len);
  return AK_DEDUPE_ENTRY_FIXED + scope_len;
}
