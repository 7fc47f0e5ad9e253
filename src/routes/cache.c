/* The decision cache (cache.h): a chained hash table, FNV-1a over method and path. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "routes/cache.h"

#define STRIPES 64

typedef struct entry {
  struct entry *next;
  uint64_t hash, gen;
  int64_t expires_ms;
  int kind;
  size_t idx;
  size_t klen;
  char key[]; /* method '\0' path */
} entry_t;

struct ak_rcache {
  pthread_mutex_t mu[STRIPES]; /* mu[b % STRIPES] guards bucket b's chain */
  entry_t **b;
  size_t nb;                   /* a power of two */
  atomic_size_t size;
  size_t max;
  int64_t ttl, neg_ttl, gc_every;
  atomic_int_fast64_t next_gc;
};

ak_rcache_t *ak_rcache_new(int64_t max_size, int64_t ttl_ms, int64_t negative_ttl_ms, int64_t gc_interval_ms) {
  ak_rcache_t *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->nb = 1024;
  while (c->nb < (size_t)max_size && c->nb < (1u << 20)) c->nb <<= 1;
  c->b = calloc(c->nb, sizeof *c->b);
  if (!c->b) {
    free(c);
    return NULL;
  }
  for (int i = 0; i < STRIPES; i++) pthread_mutex_init(&c->mu[i], NULL);
  c->max = (size_t)max_size;
  c->ttl = ttl_ms;
  c->neg_ttl = negative_ttl_ms;
  c->gc_every = gc_interval_ms;
  atomic_init(&c->size, 0);
  atomic_init(&c->next_gc, 0);
  return c;
}

void ak_rcache_free(ak_rcache_t *c) {
  if (!c) return;
  for (size_t i = 0; i < c->nb; i++)
    for (entry_t *e = c->b[i], *n; e; e = n) {
      n = e->next;
      free(e);
    }
  for (int i = 0; i < STRIPES; i++) pthread_mutex_destroy(&c->mu[i]);
  free(c->b);
  free(c);
}

static uint64_t hash_of(const char *method, const char *path, size_t len) {
  uint64_t h = 1469598103934665603ull;
  for (const char *p = method; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
  h = (h ^ 0) * 1099511628211ull;
  for (size_t i = 0; i < len; i++) h = (h ^ (uint8_t)path[i]) * 1099511628211ull;
  return h;
}

static bool same_key(const entry_t *e, uint64_t h, const char *method, size_t ml, const char *path, size_t len) {
  return e->hash == h && e->klen == ml + 1 + len && !memcmp(e->key, method, ml) && e->key[ml] == 0 &&
         !memcmp(e->key + ml + 1, path, len);
}

static void maybe_gc(ak_rcache_t *c, uint64_t gen, int64_t now_ms) {
  int_fast64_t due = atomic_load(&c->next_gc);
  if (now_ms < due) return;
  if (!atomic_compare_exchange_strong(&c->next_gc, &due, now_ms + c->gc_every)) return; /* another thread runs it */
  ak_rcache_gc(c, gen, now_ms);
}

void ak_rcache_gc(ak_rcache_t *c, uint64_t gen, int64_t now_ms) {
  for (size_t i = 0; i < c->nb; i++) {
    pthread_mutex_t *m = &c->mu[i % STRIPES];
    pthread_mutex_lock(m);
    for (entry_t **pp = &c->b[i]; *pp;) {
      entry_t *e = *pp;
      if (e->expires_ms <= now_ms || e->gen < gen) {
        *pp = e->next;
        free(e);
        atomic_fetch_sub(&c->size, 1);
      } else {
        pp = &e->next;
      }
    }
    pthread_mutex_unlock(m);
  }
}

bool ak_rcache_get(ak_rcache_t *c, uint64_t gen, const char *method, const char *path, size_t len, int64_t now_ms,
                   int *kind, size_t *idx) {
  maybe_gc(c, gen, now_ms);
  if (len > AK_RCACHE_MAX_PATH) return false;
  size_t ml = strlen(method);
  uint64_t h = hash_of(method, path, len);
  size_t bi = h & (c->nb - 1);
  bool hit = false;
  pthread_mutex_t *m = &c->mu[bi % STRIPES];
  pthread_mutex_lock(m);
  for (entry_t **pp = &c->b[bi]; *pp; pp = &(*pp)->next) {
    entry_t *e = *pp;
    if (!same_key(e, h, method, ml, path, len)) continue;
    if (e->gen == gen && e->expires_ms > now_ms) {
      *kind = e->kind;
      *idx = e->idx;
      hit = true;
    } else { /* stale or expired: dropped now */
      *pp = e->next;
      free(e);
      atomic_fetch_sub(&c->size, 1);
    }
    break;
  }
  pthread_mutex_unlock(m);
  return hit;
}

void ak_rcache_put(ak_rcache_t *c, uint64_t gen, const char *method, const char *path, size_t len, int64_t now_ms,
                   int kind, bool negative, size_t idx) {
  int64_t ttl = negative ? c->neg_ttl : c->ttl;
  if (ttl <= 0 || len > AK_RCACHE_MAX_PATH) return;
  if (atomic_load(&c->size) >= c->max) return;
  size_t ml = strlen(method);
  entry_t *e = malloc(sizeof *e + ml + 1 + len);
  if (!e) return;
  e->hash = hash_of(method, path, len);
  e->gen = gen;
  e->expires_ms = now_ms + ttl;
  e->kind = kind;
  e->idx = idx;
  e->klen = ml + 1 + len;
  memcpy(e->key, method, ml + 1);
  memcpy(e->key + ml + 1, path, len);
  size_t bi = e->hash & (c->nb - 1);
  pthread_mutex_t *m = &c->mu[bi % STRIPES];
  pthread_mutex_lock(m);
  for (entry_t **pp = &c->b[bi]; *pp; pp = &(*pp)->next)
    if (same_key(*pp, e->hash, method, ml, path, len)) { /* replace */
      entry_t *old = *pp;
      e->next = old->next;
      *pp = e;
      free(old);
      pthread_mutex_unlock(m);
      return;
    }
  e->next = c->b[bi];
  c->b[bi] = e;
  atomic_fetch_add(&c->size, 1);
  pthread_mutex_unlock(m);
}

size_t ak_rcache_size(ak_rcache_t *c) { return atomic_load(&c->size); }
