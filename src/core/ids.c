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
