/* Slots are grouped in sets of AK_RATETABLE_WAYS; a key hashes (seeded) to one set and
 * lives in one of its ways. A set is guarded by one of AK_LOCKS striped mutexes: a take
 * is a lookup in 8 slots and a few multiplications under it. An entry whose buckets are
 * all full again is treated as free, so the table cleans itself without a sweeper. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include "core/ratetable.h"

#define AK_LOCKS 64

typedef struct slot {
  uint8_t key[16];
  double tat[AK_RATETABLE_LANES];
  uint8_t used;
} slot_t;

struct ak_ratetable {
  size_t nsets;               /* power of two */
  slot_t *slots;              /* nsets * WAYS */
  uint64_t seed[2];
  _Atomic uint64_t evictions;
  pthread_mutex_t locks[AK_LOCKS];
};

static uint64_t fmix64(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return k;
}

static uint64_t rd64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

static uint64_t random_seed(void) {
  uint64_t s = 0;
  if (getrandom(&s, sizeof s, 0) != (ssize_t)sizeof s) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    s = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)(uintptr_t)&s;
  }
  return s | 1;
}

ak_ratetable_t *ak_ratetable_new(size_t capacity, uint64_t seed) {
  size_t nsets = 1;
  while (nsets * AK_RATETABLE_WAYS < capacity && nsets < ((size_t)1 << 40)) nsets <<= 1;
  ak_ratetable_t *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->slots = calloc(nsets * AK_RATETABLE_WAYS, sizeof *t->slots);
  if (!t->slots) {
    free(t);
    return NULL;
  }
  t->nsets = nsets;
  t->seed[0] = seed ? seed : random_seed();
  t->seed[1] = fmix64(t->seed[0] ^ 0x9e3779b97f4a7c15ULL) | 1;
  for (int i = 0; i < AK_LOCKS; i++) pthread_mutex_init(&t->locks[i], NULL);
  return t;
}

void ak_ratetable_free(ak_ratetable_t *t) {
  if (!t) return;
  for (int i = 0; i < AK_LOCKS; i++) pthread_mutex_destroy(&t->locks[i]);
  free(t->slots);
  free(t);
}

size_t ak_ratetable_capacity(const ak_ratetable_t *t) { return t->nsets * AK_RATETABLE_WAYS; }

uint64_t ak_ratetable_evictions(const ak_ratetable_t *t) { return atomic_load(&t->evictions); }

static size_t set_of(const ak_ratetable_t *t, const uint8_t key[16]) {
  uint64_t h = fmix64(rd64(key) ^ t->seed[0]) ^ fmix64(rd64(key + 8) ^ t->seed[1]);
  return (size_t)(h & (t->nsets - 1));
}

void ak_ratetable_key(const ak_ratetable_t *t, const char *s, size_t len, uint8_t out[16]) {
  uint64_t a = t->seed[1], b = t->seed[0] ^ 0x5bd1e9955bd1e995ULL;
  for (size_t i = 0; i < len; i++) {
    a = (a ^ (uint8_t)s[i]) * 0x100000001b3ULL;
    b = (b ^ (uint8_t)s[i]) * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL;
  }
  a = fmix64(a ^ len);
  b = fmix64(b + len);
  memcpy(out, &a, 8);
  memcpy(out + 8, &b, 8);
}

static bool slot_idle(const slot_t *s, int64_t now_ns) {
  for (int i = 0; i < AK_RATETABLE_LANES; i++)
    if (!ak_gcra_idle(s->tat[i], now_ns)) return false;
  return true;
}

static double slot_debt(const slot_t *s) {
  double m = 0;
  for (int i = 0; i < AK_RATETABLE_LANES; i++)
    if (s->tat[i] > m) m = s->tat[i];
  return m;
}

static slot_t *find(ak_ratetable_t *t, size_t set, const uint8_t key[16]) {
  slot_t *ways = &t->slots[set * AK_RATETABLE_WAYS];
  for (int w = 0; w < AK_RATETABLE_WAYS; w++)
    if (ways[w].used && memcmp(ways[w].key, key, 16) == 0) return &ways[w];
  return NULL;
}

static slot_t *claim(ak_ratetable_t *t, size_t set, const uint8_t key[16], int64_t now_ns) {
  slot_t *ways = &t->slots[set * AK_RATETABLE_WAYS], *victim = NULL;
  for (int w = 0; w < AK_RATETABLE_WAYS && !victim; w++)
    if (!ways[w].used || slot_idle(&ways[w], now_ns)) victim = &ways[w];
  if (!victim) {
    victim = &ways[0];
    for (int w = 1; w < AK_RATETABLE_WAYS; w++)
      if (slot_debt(&ways[w]) < slot_debt(victim)) victim = &ways[w];
    atomic_fetch_add(&t->evictions, 1);
  }
  memcpy(victim->key, key, 16);
  for (int i = 0; i < AK_RATETABLE_LANES; i++) victim->tat[i] = 0;
  victim->used = 1;
  return victim;
}

bool ak_ratetable_take(ak_ratetable_t *t, const uint8_t key[16], const ak_gcra_t *const *p, const double *cost,
                       size_t n, int64_t now_ns, int64_t *retry_ns) {
  if (n > AK_RATETABLE_LANES) n = AK_RATETABLE_LANES;
  size_t set = set_of(t, key);
  pthread_mutex_t *mu = &t->locks[set % AK_LOCKS];
  double nt[AK_RATETABLE_LANES];
  int64_t wait = 0;
  bool ok = true;
  pthread_mutex_lock(mu);
  slot_t *s = find(t, set, key);
  for (size_t i = 0; i < n; i++) {
    if (!p[i]) continue;
    int64_t w = 0;
    if (!ak_gcra_check(p[i], s ? s->tat[i] : 0, cost[i], now_ns, &nt[i], &w)) {
      ok = false;
      if (w > wait) wait = w;
    }
  }
  if (ok) {
    if (!s) s = claim(t, set, key, now_ns);
    for (size_t i = 0; i < n; i++)
      if (p[i]) s->tat[i] = nt[i];
  }
  pthread_mutex_unlock(mu);
  if (retry_ns) *retry_ns = ok ? 0 : wait;
  return ok;
}

void ak_ratetable_refund(ak_ratetable_t *t, const uint8_t key[16], const ak_gcra_t *const *p, const double *cost,
                         size_t n) {
  if (n > AK_RATETABLE_LANES) n = AK_RATETABLE_LANES;
  size_t set = set_of(t, key);
  pthread_mutex_t *mu = &t->locks[set % AK_LOCKS];
  pthread_mutex_lock(mu);
  slot_t *s = find(t, set, key);
  for (size_t i = 0; s && i < n; i++)
    if (p[i]) s->tat[i] = ak_gcra_refund(p[i], s->tat[i], cost[i]);
  pthread_mutex_unlock(mu);
}

void ak_ratetable_reset(ak_ratetable_t *t, const uint8_t key[16]) {
  size_t set = set_of(t, key);
  pthread_mutex_t *mu = &t->locks[set % AK_LOCKS];
  pthread_mutex_lock(mu);
  slot_t *s = find(t, set, key);
  if (s) memset(s, 0, sizeof *s);
  pthread_mutex_unlock(mu);
}

size_t ak_ratetable_live(ak_ratetable_t *t, int64_t now_ns) {
  size_t live = 0;
  for (size_t set = 0; set < t->nsets; set++) {
    pthread_mutex_t *mu = &t->locks[set % AK_LOCKS];
    pthread_mutex_lock(mu);
    for (int w = 0; w < AK_RATETABLE_WAYS; w++) {
      const slot_t *s = &t->slots[set * AK_RATETABLE_WAYS + w];
      if (s->used && !slot_idle(s, now_ns)) live++;
    }
    pthread_mutex_unlock(mu);
  }
  return live;
}
