/* A chained hash of tenant -> {records, bytes} with a fixed bucket array; an entry is
 * freed when its tenant's count drops to zero. The hash is seeded at random so tenant
 * names (from URLs, under tenant_path routing) cannot be chosen to pile into one chain. */
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include "queue/tenantshare.h"

#define NBUCKETS 1024

typedef struct entry {
  struct entry *next;
  int64_t records, bytes;
  size_t tlen;
  char tenant[];
} entry_t;

struct ak_tenantshare {
  int64_t max_records, max_bytes;
  uint64_t seed;
  size_t live;
  entry_t *buckets[NBUCKETS];
};

ak_tenantshare_t *ak_tenantshare_new(int64_t max_records, int64_t max_bytes) {
  ak_tenantshare_t *ts = calloc(1, sizeof *ts);
  if (!ts) return NULL;
  ts->max_records = max_records > 0 ? max_records : 1;
  ts->max_bytes = max_bytes > 0 ? max_bytes : 1;
  if (getrandom(&ts->seed, sizeof ts->seed, 0) != (ssize_t)sizeof ts->seed) ts->seed = (uint64_t)(uintptr_t)ts;
  return ts;
}

void ak_tenantshare_free(ak_tenantshare_t *ts) {
  if (!ts) return;
  for (size_t i = 0; i < NBUCKETS; i++)
    for (entry_t *e = ts->buckets[i], *nx; e; e = nx) {
      nx = e->next;
      free(e);
    }
  free(ts);
}

static size_t bucket(const ak_tenantshare_t *ts, const char *t, size_t n) {
  uint64_t h = ts->seed ^ 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)t[i]) * 0x100000001b3ULL;
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 32;
  return (size_t)(h % NBUCKETS);
}

static entry_t **slot(const ak_tenantshare_t *ts, const char *t, size_t n) {
  entry_t **pp = (entry_t **)&ts->buckets[bucket(ts, t, n)];
  while (*pp && !((*pp)->tlen == n && memcmp((*pp)->tenant, t, n) == 0)) pp = &(*pp)->next;
  return pp;
}

bool ak_tenantshare_admit(ak_tenantshare_t *ts, const char *tenant, size_t tlen, size_t bytes) {
  entry_t **pp = slot(ts, tenant, tlen), *e = *pp;
  if (e && (e->records + 1 > ts->max_records || e->bytes + (int64_t)bytes > ts->max_bytes)) return false;
  if (!e) {
    e = malloc(sizeof *e + tlen);
    if (!e) return false;
    e->next = NULL;
    e->records = e->bytes = 0;
    e->tlen = tlen;
    memcpy(e->tenant, tenant, tlen);
    *pp = e;
    ts->live++;
  }
  e->records++;
  e->bytes += (int64_t)bytes;
  return true;
}

void ak_tenantshare_release(ak_tenantshare_t *ts, const char *tenant, size_t tlen, size_t bytes) {
  entry_t **pp = slot(ts, tenant, tlen), *e = *pp;
  if (!e) return;
  e->records--;
  e->bytes -= (int64_t)bytes;
  if (e->records <= 0) {
    *pp = e->next;
    free(e);
    ts->live--;
  }
}

size_t ak_tenantshare_tenants(const ak_tenantshare_t *ts) { return ts->live; }

void ak_tenantshare_held(const ak_tenantshare_t *ts, const char *tenant, size_t tlen, int64_t *records,
                         int64_t *bytes) {
  const entry_t *e = *slot(ts, tenant, tlen);
  if (records) *records = e ? e->records : 0;
  if (bytes) *bytes = e ? e->bytes : 0;
}
