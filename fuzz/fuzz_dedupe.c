/* libFuzzer harness for the dedupe CF's record codec (queue/dedupe_record.c): what the
 * node reads at open and the sweeper reads every pass, where a damaged record must be
 * refused whole, never half-read. Two properties:
 *  1. decode of arbitrary (key, value) bytes either fails or hands out keys that lie
 *     inside the record, whose scopes parse, whose expiries are positive and not past
 *     the record's, and that re-encode to the very same key and value bytes (one spelling
 *     per record); no key is handed out when decode fails;
 *  2. a v2 record built from the input survives encode -> decode key for key, and a
 *     strict prefix of its value never decodes to as many keys.
 * Every buffer handed to the decoder is an exact-size heap copy, so ASan sees any
 * overread. Input: byte 0 is the key's length (mod the rest); then the key, then the
 * value. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "queue/dedupe_record.h"
#include "store/keys.h"

#define CHECK(cond)                                                                         \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      fprintf(stderr, "fuzz_dedupe: invariant failed at line %d: %s\n", __LINE__, #cond);   \
      abort();                                                                              \
    }                                                                                       \
  } while (0)

#define MAX_KEYS 4096

typedef struct {
  const uint8_t *k, *v;
  size_t kl, vl;
  size_t n;
  ak_dedupe_entry_t e[MAX_KEYS];
} seen_t;

static int inside(const void *p, size_t n, const uint8_t *base, size_t len) {
  const uint8_t *q = p;
  return q >= base && q <= base + len && n <= (size_t)(base + len - q);
}

static int collect(const ak_dedupe_entry_t *e, void *ctx) {
  seen_t *s = ctx;
  CHECK(s->n < MAX_KEYS);
  s->e[s->n++] = *e;
  return 0;
}

static uint8_t *copy(const uint8_t *p, size_t n) {
  uint8_t *c = malloc(n ? n : 1);
  CHECK(c);
  if (n) memcpy(c, p, n);
  return c;
}

/* Property 1 on (k, v). Returns the decoded count. */
static long check_decode(const uint8_t *k0, size_t kl, const uint8_t *v0, size_t vl) {
  uint8_t *k = copy(k0, kl), *v = copy(v0, vl);
  static seen_t s;
  memset(&s, 0, sizeof s);
  int64_t at = 0;
  long n = ak_dedupe_record_each(k, kl, v, vl, &at, collect, &s);
  if (n < 0) {
    CHECK(s.n == 0);
  } else {
    CHECK(n >= 1 && (size_t)n == s.n);
    int v1 = vl == AK_DEDUPE_VALUE_V1_LEN && v[0] == AK_DEDUPE_VALUE_V1;
    for (size_t i = 0; i < s.n; i++) {
      const ak_dedupe_entry_t *e = &s.e[i];
      const uint8_t *t;
      size_t tl;
      CHECK(ak_dedupe_scope_parse(e->scope, e->scope_len, &t, &tl) == 0);
      CHECK(inside(t, tl, e->scope, e->scope_len));
      CHECK(inside(e->id, 16, v, vl));
      CHECK(inside(e->scope, e->scope_len, v1 ? k : v, v1 ? kl : vl));
      CHECK(e->at <= at);
      if (!v1) CHECK(e->at > 0);
    }
    if (v1) {
      CHECK(s.n == 1);
      uint8_t re[AK_DEDUPE_EKEY_MAX];
      CHECK(s.e[0].scope_len <= AK_DEDUPE_SCOPE_MAX);
      size_t rl = ak_dedupe_ekey(re, s.e[0].at, s.e[0].scope, s.e[0].scope_len);
      CHECK(rl == kl && memcmp(re, k, kl) == 0);
      CHECK(s.e[0].at == at);
    } else {
      uint8_t rk[AK_DEDUPE_GROUP_KEY_LEN];
      ak_dedupe_group_key(rk, at, ak_get_u64(k + 9));
      CHECK(kl == sizeof rk && memcmp(rk, k, kl) == 0);
      uint8_t *rv = malloc(vl);
      CHECK(rv);
      size_t o = 0;
      rv[o++] = AK_DEDUPE_VALUE_V2;
      for (size_t i = 0; i < s.n; i++) {
        CHECK(o + AK_DEDUPE_ENTRY_FIXED + s.e[i].scope_len <= vl);
        o += ak_dedupe_entry_put(rv + o, s.e[i].at, s.e[i].id, s.e[i].scope, s.e[i].scope_len);
      }
      CHECK(o == vl && memcmp(rv, v, vl) == 0);
      free(rv);
    }
  }
  free(k);
  free(v);
  return n;
}

/* Property 2: scopes cut from data, one key each, expiries from the bytes. */
static void check_round_trip(const uint8_t *data, size_t size) {
  static uint8_t v[65536];
  static uint8_t scopes[MAX_KEYS][16];
  static size_t slen[MAX_KEYS];
  static int64_t ats[MAX_KEYS];
  static uint8_t ids[MAX_KEYS][16];
  size_t n = 0, vl = 0, i = 0;
  int64_t last = 1;
  v[vl++] = AK_DEDUPE_VALUE_V2;
  while (i + 4 <= size && n < MAX_KEYS) {
    /* scope: tenant of 0-3 bytes, source of 1 byte, key of 1-4 bytes */
    size_t tl = data[i] & 3, kl2 = 1 + ((data[i] >> 2) & 3);
    uint8_t *s = scopes[n];
    size_t o = 0;
    s[o++] = (uint8_t)tl;
    for (size_t j = 0; j < tl; j++) s[o++] = (uint8_t)('a' + j);
    s[o++] = 1;
    s[o++] = data[i + 1];
    s[o++] = (uint8_t)kl2;
    for (size_t j = 0; j < kl2; j++) s[o++] = data[i + 2];
    slen[n] = o;
    ats[n] = 1 + (int64_t)data[i + 3] * 1000;
    if (ats[n] > last) last = ats[n];
    memset(ids[n], data[i + 1] ^ (uint8_t)n, 16);
    vl += ak_dedupe_entry_put(v + vl, ats[n], ids[n], scopes[n], slen[n]);
    n++;
    i += 4;
  }
  if (!n) return;
  uint8_t k[AK_DEDUPE_GROUP_KEY_LEN];
  ak_dedupe_group_key(k, last, 7);
  static seen_t s;
  memset(&s, 0, sizeof s);
  int64_t at = 0;
  uint8_t *vc = copy(v, vl);
  CHECK(ak_dedupe_record_each(k, sizeof k, vc, vl, &at, collect, &s) == (long)n);
  CHECK(at == last);
  for (size_t j = 0; j < n; j++) {
    CHECK(s.e[j].at == ats[j]);
    CHECK(memcmp(s.e[j].id, ids[j], 16) == 0);
    CHECK(s.e[j].scope_len == slen[j] && memcmp(s.e[j].scope, scopes[j], slen[j]) == 0);
  }
  free(vc);
  /* strict prefixes: never as many keys (a cut at a key boundary is a shorter record) */
  for (size_t cut = 0; cut < vl; cut += 1 + cut / 8) {
    long m = check_decode(k, sizeof k, v, cut);
    CHECK(m < (long)n);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  size_t rest = size - 1;
  size_t kl = rest ? data[0] % (rest + 1) : 0;
  check_decode(data + 1, kl, data + 1 + kl, rest - kl);
  check_round_trip(data + 1, rest);
  return 0;
}
