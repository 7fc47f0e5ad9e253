/* Open addressing with linear probing over an array of (hash, entry) slots, at most half
 * full, so a probe run is short and a miss is usually decided by the stored hash without
 * touching an entry. Entries are allocated one by one (value first, the key copy after
 * it), so a value never moves when the slot array grows. Removal shifts the run back
 * (no tombstones): a map whose tenants come and go does not slow down. */
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include "core/tmap.h"

typedef struct entry {
  uint64_t hash;
  size_t len;
  const char *key;              /* in this allocation, after the value */
  max_align_t value[];          /* vsize bytes, aligned for any type */
} entry_t;

struct ak_tmap_slot {
  uint64_t hash;
  entry_t *e;                   /* NULL: empty */
};

#define MIN_CAP 16

static entry_t *entry_of(const void *value) {
  return (entry_t *)(void *)((char *)value - offsetof(entry_t, value));
}

static uint64_t mix(uint64_t h, uint64_t w) {
  h = (h ^ w) * 0xbf58476d1ce4e5b9ULL;
  return h ^ (h >> 31);
}

/* A multiply-xorshift over 8-byte words, keyed by the map's seed. The last word is the
 * key's last 8 bytes (overlapping the one before), a short key is read in two or three
 * overlapping pieces: no byte loop and no memcpy of a variable length (a library call),
 * which were most of a lookup's cost on ids of a dozen bytes. */
static uint64_t hash_key(uint64_t seed, const char *k, size_t n) {
  uint64_t h = seed ^ (n * 0x9e3779b97f4a7c15ULL), w;
  size_t left = n;
  for (const char *p = k; left > 8; p += 8, left -= 8) {
    memcpy(&w, p, 8);
    h = mix(h, w);
  }
  if (n >= 8) {
    memcpy(&w, k + n - 8, 8);
  } else if (n >= 4) {
    uint32_t a, b;
    memcpy(&a, k, 4);
    memcpy(&b, k + n - 4, 4);
    w = (uint64_t)a << 32 | b;
  } else {
    w = n ? (uint64_t)(uint8_t)k[0] << 16 | (uint64_t)(uint8_t)k[n / 2] << 8 | (uint8_t)k[n - 1] : 0;
  }
  h = mix(h, w);
  h ^= h >> 29;
  h *= 0x94d049bb133111ebULL;
  h ^= h >> 32;
  return h;
}

void ak_tmap_init(ak_tmap_t *m, size_t vsize) {
  memset(m, 0, sizeof *m);
  m->vsize = vsize;
  if (getrandom(&m->seed, sizeof m->seed, GRND_NONBLOCK) != (ssize_t)sizeof m->seed)
    m->seed = (uint64_t)(uintptr_t)m ^ 0x2545f4914f6cdd1dULL;
}

void ak_tmap_fini(ak_tmap_t *m) {
  for (size_t i = 0; i < m->cap; i++) free(m->slots[i].e);
  free(m->slots);
  m->slots = NULL;
  m->cap = m->n = 0;
}

static struct ak_tmap_slot *lookup(const ak_tmap_t *m, uint64_t h, const char *key, size_t len) {
  size_t mask = m->cap - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    struct ak_tmap_slot *s = &m->slots[i];
    if (!s->e) return s;
    if (s->hash == h && s->e->len == len && memcmp(s->e->key, key, len) == 0) return s;
  }
}

void *ak_tmap_find(const ak_tmap_t *m, const char *key, size_t len) {
  if (!m->n) return NULL;
  struct ak_tmap_slot *s = lookup(m, hash_key(m->seed, key, len), key, len);
  return s->e ? s->e->value : NULL;
}

static int grow(ak_tmap_t *m) {
  size_t nc = m->cap ? m->cap * 2 : MIN_CAP;
  struct ak_tmap_slot *ns = calloc(nc, sizeof *ns);
  if (!ns) return -1;
  for (size_t i = 0; i < m->cap; i++) {
    if (!m->slots[i].e) continue;
    size_t j = m->slots[i].hash & (nc - 1);
    while (ns[j].e) j = (j + 1) & (nc - 1);
    ns[j] = m->slots[i];
  }
  free(m->slots);
  m->slots = ns;
  m->cap = nc;
  return 0;
}

void *ak_tmap_get(ak_tmap_t *m, const char *key, size_t len, bool *created) {
  if (created) *created = false;
  if (len > AK_TMAP_KEY_MAX) return NULL;
  uint64_t h = hash_key(m->seed, key, len);
  struct ak_tmap_slot *s = m->cap ? lookup(m, h, key, len) : NULL;
  if (s && s->e) return s->e->value;
  if ((m->n + 1) * 2 > m->cap) {
    if (grow(m) != 0) return NULL;
    s = lookup(m, h, key, len); /* the free slot moved with the array */
  }
  /* malloc, not calloc: glibc's calloc bypasses its per-thread cache, and a map whose
   * tenants come and go (the writer's shares) allocates per request */
  entry_t *e = malloc(sizeof *e + m->vsize + len + 1);
  if (!e) return NULL;
  memset(e->value, 0, m->vsize);
  char *k = (char *)e->value + m->vsize;
  if (len) memcpy(k, key, len);
  k[len] = '\0';
  e->hash = h;
  e->len = len;
  e->key = k;
  s->hash = h;
  s->e = e;
  m->n++;
  if (created) *created = true;
  return e->value;
}

void ak_tmap_remove(ak_tmap_t *m, void *value) {
  entry_t *e = entry_of(value);
  size_t mask = m->cap - 1, i = e->hash & mask;
  while (m->slots[i].e != e) i = (i + 1) & mask;
  free(e);
  m->n--;
  /* shift back every later entry of the run that may live at i: one whose home slot is
   * not cyclically within (i, j] */
  for (size_t j = (i + 1) & mask; m->slots[j].e; j = (j + 1) & mask) {
    size_t home = m->slots[j].hash & mask;
    bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
    if (stays) continue;
    m->slots[i] = m->slots[j];
    i = j;
  }
  m->slots[i].e = NULL;
  m->slots[i].hash = 0;
}

const char *ak_tmap_key(const void *value, size_t *len) {
  const entry_t *e = entry_of(value);
  if (len) *len = e->len;
  return e->key;
}

size_t ak_tmap_count(const ak_tmap_t *m) { return m->n; }

void *ak_tmap_next(const ak_tmap_t *m, size_t *pos) {
  for (; *pos < m->cap; (*pos)++)
    if (m->slots[*pos].e) return m->slots[(*pos)++].e->value;
  return NULL;
}
