/* UUIDv7 generation. The (ms, counter) pair advances with one CAS, so any thread can mint
 * ids without a lock and two ids never compare equal. */
#include <openssl/rand.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include "core/ids.h"

void ak_idgen_init(ak_idgen_t *g) { atomic_init(&g->last, 0); }

/* Random bits come from a per-thread pool refilled 4 KiB at a time: one RAND_bytes call
 * per 512 ids instead of one per id. */
static _Thread_local uint8_t pool[4096];
static _Thread_local size_t pool_left;

static void fill_random(uint8_t *p, size_t n) {
  if (pool_left < n && RAND_bytes(pool, (int)sizeof pool) == 1) pool_left = sizeof pool;
  if (pool_left >= n) {
    memcpy(p, pool + sizeof pool - pool_left, n);
    memset(pool + sizeof pool - pool_left, 0, n);
    pool_left -= n;
    return;
  }
  size_t got = 0;
  while (got < n) {
    ssize_t r = getrandom(p + got, n - got, 0);
    if (r > 0) got += (size_t)r;
  }
}

void ak_uuid7_new(ak_idgen_t *g, int64_t now_ms, uint8_t out[16]) {
  uint64_t floor_v = ((uint64_t)now_ms & 0xFFFFFFFFFFFFull) << 12;
  uint64_t old = atomic_load(&g->last), next;
  do {
    next = old + 1 > floor_v ? old + 1 : floor_v;
  } while (!atomic_compare_exchange_weak(&g->last, &old, next));
  uint64_t ms = next >> 12;
  uint16_t counter = (uint16_t)(next & 0xFFF);
  fill_random(out + 8, 8);
  out[0] = (uint8_t)(ms >> 40);
  out[1] = (uint8_t)(ms >> 32);
  out[2] = (uint8_t)(ms >> 24);
  out[3] = (uint8_t)(ms >> 16);
  out[4] = (uint8_t)(ms >> 8);
  out[5] = (uint8_t)ms;
  out[6] = (uint8_t)(0x70 | ((counter >> 8) & 0x0F));
  out[7] = (uint8_t)(counter & 0xFF);
  out[8] = (uint8_t)(0x80 | (out[8] & 0x3F));
}

void ak_uuid_format(const uint8_t id[16], char out[AK_UUID_STR_LEN]) {
  static const char hex[] = "0123456789abcdef";
  int o = 0;
  for (int i = 0; i < 16; i++) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out[o++] = '-';
    out[o++] = hex[id[i] >> 4];
    out[o++] = hex[id[i] & 15];
  }
  out[o] = 0;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool ak_uuid_parse(const char *s, uint8_t out[16]) {
  if (!s || strlen(s) != 36) return false;
  int b = 0;
  for (int i = 0; i < 36;) {
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (s[i] != '-') return false;
      i++;
      continue;
    }
    int hi = hexval(s[i]), lo = hexval(s[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[b++] = (uint8_t)(hi << 4 | lo);
    i += 2;
  }
  return b == 16;
}

int64_t ak_uuid7_ms(const uint8_t id[16]) {
  int64_t ms = 0;
  for (int i = 0; i < 6; i++) ms = (ms << 8) | id[i];
  return ms;
}

static uint64_t rd64le(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

static inline uint64_t rotl64(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

#define SIP_ROUND(v0, v1, v2, v3)                                                                        \
  do {                                                                                                   \
    v0 += v1; v1 = rotl64(v1, 13); v1 ^= v0; v0 = rotl64(v0, 32);                                        \
    v2 += v3; v3 = rotl64(v3, 16); v3 ^= v2;                                                             \
    v0 += v3; v3 = rotl64(v3, 21); v3 ^= v0;                                                             \
    v2 += v1; v1 = rotl64(v1, 17); v1 ^= v2; v2 = rotl64(v2, 32);                                        \
  } while (0)

/* Two compression rounds per 8-byte little-endian word, the length in the last word's
 * top byte, four finalisation rounds (Aumasson & Bernstein, 2012). */
uint64_t ak_siphash24(const uint8_t key[16], const uint8_t *m, size_t n) {
  uint64_t k0 = rd64le(key), k1 = rd64le(key + 8);
  uint64_t v0 = k0 ^ 0x736f6d6570736575ull, v1 = k1 ^ 0x646f72616e646f6dull, v2 = k0 ^ 0x6c7967656e657261ull,
           v3 = k1 ^ 0x7465646279746573ull;
  size_t full = n & ~(size_t)7;
  for (size_t i = 0; i < full; i += 8) {
    uint64_t w = rd64le(m + i);
    v3 ^= w;
    SIP_ROUND(v0, v1, v2, v3);
    SIP_ROUND(v0, v1, v2, v3);
    v0 ^= w;
  }
  uint64_t last = (uint64_t)(n & 0xFF) << 56;
  for (size_t i = 0; i < (n & 7); i++) last |= (uint64_t)m[full + i] << (8 * i);
  v3 ^= last;
  SIP_ROUND(v0, v1, v2, v3);
  SIP_ROUND(v0, v1, v2, v3);
  v0 ^= last;
  v2 ^= 0xFF;
  for (int r = 0; r < 4; r++) SIP_ROUND(v0, v1, v2, v3);
  return v0 ^ v1 ^ v2 ^ v3;
}

/* rand_b: the 62 bits after the variant (bytes 8..15, less byte 8's top two bits) */
static uint64_t rand_b(const uint8_t id[16]) {
  uint64_t x = id[8] & 0x3F;
  for (int i = 9; i < 16; i++) x = (x << 8) | id[i];
  return x;
}

bool ak_uuid7_seal(const uint8_t key[16], uint8_t id[16], uint64_t seq) {
  if (seq > AK_SEALED_SEQ_MAX) return false;
  uint64_t x = (seq ^ ak_siphash24(key, id, 8)) & AK_SEALED_SEQ_MAX;
  id[8] = (uint8_t)(0x80 | ((x >> 56) & 0x3F));
  for (int i = 15; i >= 9; i--) {
    id[i] = (uint8_t)x;
    x >>= 8;
  }
  return true;
}

uint64_t ak_uuid7_unseal(const uint8_t key[16], const uint8_t id[16]) {
  return (rand_b(id) ^ ak_siphash24(key, id, 8)) & AK_SEALED_SEQ_MAX;
}
