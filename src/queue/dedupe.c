/* The dedupe index in memory, and its keys in the store.
 *
 * The store holds the keys a commit took as ONE record of the index CF, put in that
 * commit's own synced batch: 'e' at:64 seq:64 -> u8 version 2, then per key at:64 id:128
 * u16 len scope. The record key's `at` is the latest expiry among its keys (a commit's
 * keys are grouped so that one record spans at most GROUP_SPAN_MS of expiries), and its
 * seq is the first hook seq of the group, so no two commits ever share a record key. A
 * sixth key per hook in every commit cost the writer and the flush thread about what each
 * of the other five costs (~3 us per request); one record per commit costs a key per
 * batch. Stores written before that hold one 'e' at:64 scope -> v1 id key per event key;
 * they are read the same way (a record of one key) and swept like any other.
 *
 * Each key's own expiry is in the record, so a key refreshed after it expired (a new
 * hook, a new expiry) is in a different record: the sweeper deletes exactly the records
 * it read and can never delete the refreshed one, however its read and its delete
 * interleave with the writer. Lookups never touch the store: the table below holds every
 * key (rebuilt from the records at open), so the writer decides under its queue lock
 * without I/O, and expiry is decided on the key's own time, never the record's.
 *
 * Table: open addressing, linear probing, 40 bytes a slot, keyed by the first 16 bytes of
 * the scope's SHA-256 (a collision would take 2^64 work even for a chosen key). Keys that
 * are in flight (taken, not yet settled) live in a small chained map of claims instead,
 * so the table holds only what is committed. Counts are of stored keys (an expired key
 * counts until it is swept; a refresh counts twice until then): what the bounds protect
 * is the store and this table. Must never hold its lock across I/O: the sweeper writes
 * its deletes first and takes the lock only to forget them. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include "core/buf.h"
#include "core/clock.h"
#include "core/instance.h"
#include "core/log.h"
#include "core/sources.h"
#include "core/tmap.h"
#include "queue/dedupe.h"
#include "queue/dedupe_record.h"
#include "queue/writer.h"
#include "store/store.h"

/* A record is swept when its latest key expired: an earlier key in it waits at most this
 * long past its own expiry (it already reads as expired: lookups use the key's own time). */
#define GROUP_SPAN_MS 1000
#define PENDING_BUCKETS 1024

typedef struct {
  uint8_t digest[16];
  int64_t at;          /* expiry in ms; 0 = empty slot */
  uint8_t id[16];
} slot_t;

typedef struct {
  int64_t n;
} tcount_t;

struct ak_dedupe {
  ak_instance_t *inst;
  pthread_mutex_t mu;
  pthread_mutex_t erase_mu;    /* a sweep pass and a tenant erase step never interleave: each
                                  reads records, rewrites or deletes them, then forgets their keys */
  slot_t *slots;
  size_t cap, used;            /* cap: a power of two */
  ak_dedupe_claim_t *pending[PENDING_BUCKETS];
  ak_tmap_t tenants;           /* tenant -> tcount_t: its keys (a claim points at it) */
  int64_t live;                /* stored + pending keys */
  int64_t max_entries, max_per_tenant;
  int64_t sweep_from;          /* every 'e' record before this expiry is swept */
#ifdef AK_TEST_HOOKS
  const char *clock_file;      /* ANKUSA_TEST_DEDUPE_CLOCK_FILE */
#endif
  ak_series_t *m_keys, *m_dups, *m_swept;
};

/* ------------------------------------------------------------------- helpers ---- */

/* Test builds can move the index's clock (a file holding an offset in ms), so a test
 * expires keys of a long TTL without waiting and without racing real time. */
static int64_t now_ms(const ak_dedupe_t *dx) {
  int64_t now = ak_now_ms();
#ifdef AK_TEST_HOOKS
  if (dx->clock_file) {
    FILE *f = fopen(dx->clock_file, "r");
    long long off = 0;
    if (f) {
      if (fscanf(f, "%lld", &off) != 1) off = 0;
      fclose(f);
    }
    now += off;
  }
#else
  (void)dx;
#endif
  return now;
}

static uint64_t hash_of(const uint8_t digest[16]) {
  uint64_t h;
  memcpy(&h, digest, 8);
  return h;
}

/* SHA-256 through the low-level interface: a context on the stack, no provider dispatch
 * and no allocation. EVP_Digest cost a context allocation and an implementation lookup
 * per call, most of the digest on a scope of a few dozen bytes, once per request. (The
 * interface is deprecated in OpenSSL 3 but present; the digest is the same.) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static void digest_of(const uint8_t *scope, size_t n, uint8_t out[16]) {
  SHA256_CTX ctx;
  unsigned char dg[SHA256_DIGEST_LENGTH];
  SHA256_Init(&ctx);
  SHA256_Update(&ctx, scope, n);
  SHA256_Final(dg, &ctx);
  memcpy(out, dg, 16);
}
#pragma GCC diagnostic pop

/* A key's table digest and tenant (record_each checked its scope). */
static void entry_scope(const ak_dedupe_entry_t *e, uint8_t dg[16], const uint8_t **tenant, size_t *tl) {
  ak_dedupe_scope_parse(e->scope, e->scope_len, tenant, tl);
  digest_of(e->scope, e->scope_len, dg);
}

/* --------------------------------------------------------------------- table ---- */

static slot_t *tab_find(ak_dedupe_t *dx, const uint8_t digest[16]) {
  if (!dx->cap) return NULL;
  size_t mask = dx->cap - 1;
  for (size_t i = hash_of(digest) & mask; dx->slots[i].at; i = (i + 1) & mask)
    if (memcmp(dx->slots[i].digest, digest, 16) == 0) return &dx->slots[i];
  return NULL;
}

/* Every lookup lands on a random slot: with 4 KiB pages a table of millions of keys misses
 * the TLB on nearly every probe (the page walk's own misses were most of tab_find's cost,
 * ~0.5 us of the dedupe path per request). Large tables come from mmap, 2 MiB-aligned and
 * offered to transparent huge pages (THP "madvise" mode, Debian's default); zero-filled
 * either way, like calloc. */
#define TAB_HUGE (2u << 20)

static size_t tab_bytes(size_t n) { return n * sizeof(slot_t); }

static slot_t *tab_alloc(size_t n) {
  size_t len = tab_bytes(n);
  if (len < TAB_HUGE) return calloc(n, sizeof(slot_t));
  size_t map = len + TAB_HUGE;
  uint8_t *p = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  uint8_t *a = (uint8_t *)(((uintptr_t)p + TAB_HUGE - 1) & ~(uintptr_t)(TAB_HUGE - 1));
  if (a > p) munmap(p, (size_t)(a - p));
  size_t tail = (size_t)(p + map - (a + len));
  if (tail) munmap(a + len, tail);
  (void)madvise(a, len, MADV_HUGEPAGE); /* advice only: 4 KiB pages still work */
  return (slot_t *)a;
}

static void tab_free(slot_t *t, size_t n) {
  if (!t) return;
  if (tab_bytes(n) < TAB_HUGE) free(t);
  else munmap(t, tab_bytes(n));
}

static int tab_grow(ak_dedupe_t *dx) {
  size_t nc = dx->cap ? dx->cap * 2 : 1024;
  slot_t *ns = tab_alloc(nc);
  if (!ns) return -1;
  for (size_t i = 0; i < dx->cap; i++) {
    if (!dx->slots[i].at) continue;
    size_t j = hash_of(dx->slots[i].digest) & (nc - 1);
    while (ns[j].at) j = (j + 1) & (nc - 1);
    ns[j] = dx->slots[i];
  }
  tab_free(dx->slots, dx->cap);
  dx->slots = ns;
  dx->cap = nc;
  return 0;
}

/* Insert or replace (the newer expiry of a refreshed key wins). */
static int tab_put(ak_dedupe_t *dx, const uint8_t digest[16], int64_t at, const uint8_t id[16]) {
  slot_t *s = tab_find(dx, digest);
  if (!s) {
    if ((dx->used + 1) * 4 > dx->cap * 3 && tab_grow(dx) != 0) return -1;
    size_t mask = dx->cap - 1, i = hash_of(digest) & mask;
    while (dx->slots[i].at) i = (i + 1) & mask;
    s = &dx->slots[i];
    memcpy(s->digest, digest, 16);
    dx->used++;
  }
  s->at = at;
  memcpy(s->id, id, 16);
  return 0;
}

/* Backward-shift deletion: no tombstones, so probes stay short after many sweeps. */
static void tab_del(ak_dedupe_t *dx, slot_t *s) {
  size_t mask = dx->cap - 1, i = (size_t)(s - dx->slots), j = i;
  for (;;) {
    j = (j + 1) & mask;
    if (!dx->slots[j].at) break;
    size_t k = hash_of(dx->slots[j].digest) & mask;
    /* the entry at j may move to i unless its home k lies cyclically in (i, j] */
    bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
    if (!stays) {
      dx->slots[i] = dx->slots[j];
      i = j;
    }
  }
  dx->slots[i].at = 0;
  dx->used--;
}

/* ------------------------------------------------------------------ pending ---- */

static ak_dedupe_claim_t **pending_slot(ak_dedupe_t *dx, const uint8_t digest[16]) {
  ak_dedupe_claim_t **pp = &dx->pending[hash_of(digest) % PENDING_BUCKETS];
  while (*pp && memcmp((*pp)->digest, digest, 16) != 0) pp = &(*pp)->pnext;
  return pp;
}

/* ------------------------------------------------------------------ tenants ---- */

static tcount_t *tenant_get(ak_dedupe_t *dx, const char *t, size_t tl) {
  return ak_tmap_get(&dx->tenants, t, tl, NULL);
}

static void set_gauge(ak_dedupe_t *dx) { ak_gauge_set(dx->m_keys, (double)dx->live); }

/* -------------------------------------------------------------------- claims ---- */

ak_dedupe_claim_t *ak_dedupe_claim_new(const char *tenant, size_t tenant_len, const char *source, const char *key,
                                       size_t key_len, int64_t ttl_ms) {
  size_t sl = strlen(source);
  if (tenant_len > 255 || sl > 255 || key_len > 255 || key_len == 0) return NULL;
  size_t n = 3 + tenant_len + sl + key_len;
  ak_dedupe_claim_t *c = calloc(1, sizeof *c + n);
  if (!c) return NULL;
  uint8_t *p = c->scope;
  *p++ = (uint8_t)tenant_len;
  memcpy(p, tenant, tenant_len);
  p += tenant_len;
  *p++ = (uint8_t)sl;
  memcpy(p, source, sl);
  p += sl;
  *p++ = (uint8_t)key_len;
  memcpy(p, key, key_len);
  c->scope_len = n;
  c->tenant = (const char *)c->scope + 1;
  c->tenant_len = tenant_len;
  c->ttl_ms = ttl_ms;
  digest_of(c->scope, n, c->digest);
  return c;
}

void ak_dedupe_claim_free(ak_dedupe_claim_t *c) { free(c); }

bool ak_dedupe_seen(ak_dedupe_t *dx, const ak_dedupe_claim_t *c, uint8_t first_id[16]) {
  int64_t now = now_ms(dx);
  pthread_mutex_lock(&dx->mu);
  slot_t *s = tab_find(dx, c->digest);
  bool hit = s && s->at > now;
  if (hit) memcpy(first_id, s->id, 16);
  pthread_mutex_unlock(&dx->mu);
  if (hit) ak_counter_add(dx->m_dups, 1);
  return hit;
}

void ak_dedupe_prefetch(ak_dedupe_t *dx, const ak_write_req_t *list, size_t max) {
  pthread_mutex_lock(&dx->mu);
  if (dx->cap) {
    size_t mask = dx->cap - 1;
    for (size_t i = 0; list && i < max; list = list->next, i++)
      if (list->dedupe) __builtin_prefetch(&dx->slots[hash_of(list->dedupe->digest) & mask]);
  }
  pthread_mutex_unlock(&dx->mu);
}

ak_dedupe_verdict_t ak_dedupe_take(ak_dedupe_t *dx, ak_write_req_t *r) {
  ak_dedupe_claim_t *c = r->dedupe;
  int64_t now = now_ms(dx);
  ak_dedupe_verdict_t v;
  pthread_mutex_lock(&dx->mu);
  ak_dedupe_claim_t **pp = pending_slot(dx, c->digest);
  slot_t *s = NULL;
  tcount_t *tc = NULL;
  if (*pp) {
    /* the first occurrence is in this batch or another writer's commit: its outcome is
     * this record's answer */
    r->next = (*pp)->parked;
    (*pp)->parked = r;
    c->state = AK_DEDUPE_CLAIM_WAITING;
    v = AK_DEDUPE_WAIT;
  } else if ((s = tab_find(dx, c->digest)) && s->at > now) {
    memcpy(c->first_id, s->id, 16);
    c->state = AK_DEDUPE_CLAIM_DONE;
    r->status = AK_WR_DUPLICATE;
    v = AK_DEDUPE_DUP;
  } else if (!(tc = tenant_get(dx, c->tenant, c->tenant_len)) || dx->live >= dx->max_entries ||
             tc->n >= dx->max_per_tenant) {
    c->state = AK_DEDUPE_CLAIM_DONE;
    r->status = AK_WR_DEDUPE_QUOTA;
    v = AK_DEDUPE_QUOTA;
  } else {
    /* an expired key being refreshed keeps a distinct expiry even if the clock stepped
     * back: the sweeper may be about to delete the old one */
    c->expires_at_ms = now + c->ttl_ms;
    if (s && c->expires_at_ms <= s->at) c->expires_at_ms = s->at + 1;
    c->state = AK_DEDUPE_CLAIM_PENDING;
    c->parked = NULL;
    c->pnext = NULL;
    c->swept = false;
    c->tenant_count = tc;
    *pp = c;
    if (c->expires_at_ms < dx->sweep_from) dx->sweep_from = c->expires_at_ms; /* a clock stepped back */
    tc->n++;
    dx->live++;
    v = AK_DEDUPE_NEW;
  }
  pthread_mutex_unlock(&dx->mu);
  if (v == AK_DEDUPE_DUP) ak_counter_add(dx->m_dups, 1);
  return v;
}

/* The pending keys of a commit's records, as records of at most RECORD_MAX bytes: each
 * pass takes the earliest expiry left and every key within GROUP_SPAN_MS after it. The
 * list is a batch (tens to a few thousand records) and its keys span a handful of TTLs,
 * so the passes are few; nothing is allocated. */
#define RECORD_MAX 8192
_Static_assert(1 + AK_DEDUPE_ENTRY_FIXED + AK_DEDUPE_SCOPE_MAX <= RECORD_MAX, "any one key fits a record");

static int64_t claim_at(const ak_write_req_t *r) {
  const ak_dedupe_claim_t *c = r->dedupe;
  return c && c->state == AK_DEDUPE_CLAIM_PENDING ? c->expires_at_ms : 0;
}

static void put_record(ak_batch_t *b, int64_t last, uint64_t seq, const uint8_t *v, size_t vl) {
  uint8_t k[AK_DEDUPE_GROUP_KEY_LEN];
  ak_dedupe_group_key(k, last, seq);
  ak_batch_put(b, AK_CF_DEDUPE, k, sizeof k, v, vl);
}

void ak_dedupe_put(ak_dedupe_t *dx, ak_batch_t *b, const ak_write_req_t *list) {
  (void)dx;
  uint8_t v[RECORD_MAX];
  int64_t lo = INT64_MIN;
  for (;;) {
    int64_t anchor = INT64_MAX;
    for (const ak_write_req_t *r = list; r; r = r->next) {
      int64_t at = claim_at(r);
      if (at && at >= lo && at < anchor) anchor = at;
    }
    if (anchor == INT64_MAX) return;
    int64_t hi = anchor > INT64_MAX - GROUP_SPAN_MS ? INT64_MAX : anchor + GROUP_SPAN_MS;
    size_t vl = 0;
    int64_t last = 0;
    uint64_t seq = 0;
    for (const ak_write_req_t *r = list; r; r = r->next) {
      int64_t at = claim_at(r);
      if (!at || at < anchor || at > hi) continue;
      const ak_dedupe_claim_t *c = r->dedupe;
      size_t el = AK_DEDUPE_ENTRY_FIXED + c->scope_len;
      if (vl && vl + el > sizeof v) {
        put_record(b, last, seq, v, vl);
        vl = 0;
        last = 0;
      }
      if (!vl) {
        v[vl++] = AK_DEDUPE_VALUE_V2;
        seq = r->seq; /* the record's first hook: no other commit has it */
      }
      vl += ak_dedupe_entry_put(v + vl, at, r->id, c->scope, c->scope_len);
      if (at > last) last = at;
    }
    if (vl) put_record(b, last, seq, v, vl);
    if (hi == INT64_MAX) return;
    lo = hi + 1;
  }
}

ak_write_req_t *ak_dedupe_settle(ak_dedupe_t *dx, ak_write_req_t *r) {
  ak_dedupe_claim_t *c = r->dedupe;
  if (!c || c->state != AK_DEDUPE_CLAIM_PENDING) return NULL;
  /* stored: the key is in the store with the hook, whatever the answer (wal.type dual: a
   * hook whose intake half failed is stored, and completed by the reconciler) */
  bool committed = r->status == AK_WR_COMMITTED || r->stored;
  uint64_t dups = 0;
  pthread_mutex_lock(&dx->mu);
  ak_dedupe_claim_t **pp = pending_slot(dx, c->digest);
  if (*pp == c) *pp = c->pnext;
  if (committed && !c->swept) {
    if (tab_put(dx, c->digest, c->expires_at_ms, r->id) != 0)
      ak_log(AK_LOG_ERROR, "dedupe", "out of memory: a committed key is not in the index (a repeat would be "
             "stored again)", NULL);
  } else if (!committed) {
    ((tcount_t *)c->tenant_count)->n--;
    dx->live--;
  }
  ak_write_req_t *parked = c->parked;
  c->parked = NULL;
  c->state = AK_DEDUPE_CLAIM_DONE;
  for (ak_write_req_t *p = parked; p; p = p->next) {
    p->status = r->status == AK_WR_COMMITTED ? AK_WR_DUPLICATE : committed ? AK_WR_INTAKE_PENDING : r->status;
    memcpy(p->dedupe->first_id, r->id, 16);
    p->dedupe->state = AK_DEDUPE_CLAIM_DONE;
    dups += r->status == AK_WR_COMMITTED;
  }
  set_gauge(dx);
  pthread_mutex_unlock(&dx->mu);
  if (dups) ak_counter_add(dx->m_dups, dups);
  return parked;
}

int64_t ak_dedupe_count(ak_dedupe_t *dx) {
  pthread_mutex_lock(&dx->mu);
  int64_t n = dx->live;
  pthread_mutex_unlock(&dx->mu);
  return n;
}

/* -------------------------------------------------------------------- sweep ---- */

typedef struct {
  uint8_t *k, *v;
  size_t kl, vl;
} rec_t;

typedef struct {
  int64_t now;
  size_t max, n, cap;          /* n: records read; max: keys wanted */
  size_t nkeys;                /* keys in them */
  rec_t *recs;
  int64_t last_at;
  int bad;
} sweep_t;

static uint8_t *dup_bytes(const char *p, size_t n) {
  uint8_t *c = malloc(n ? n : 1);
  if (c) memcpy(c, p, n);
  return c;
}

static int collect(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  sweep_t *sw = ctx;
  int64_t at;
  long keys = ak_dedupe_record_each((const uint8_t *)k, kl, (const uint8_t *)v, vl, &at, NULL, NULL);
  if (keys < 0) {
    sw->bad = 1;
    return 1;
  }
  if (at > sw->now || sw->nkeys >= sw->max) return 1; /* whole records: max may be passed by one */
  if (ak_buf_grow(&sw->recs, &sw->cap, sw->n + 1, sizeof *sw->recs) != 0) return 1;
  uint8_t *kc = dup_bytes(k, kl), *vc = dup_bytes(v, vl);
  if (!kc || !vc) {
    free(kc);
    free(vc);
    return 1;
  }
  sw->recs[sw->n++] = (rec_t){kc, vc, kl, vl};
  sw->nkeys += (size_t)keys;
  sw->last_at = at;
  return 0;
}

/* Under dx->mu: drop one swept key from the table (only if the table still holds this
 * very key: a refresh has a later expiry) and from the counts. */
static int forget_one(const ak_dedupe_entry_t *e, void *ctx) {
  ak_dedupe_t *dx = ctx;
  const uint8_t *t;
  size_t tl;
  uint8_t dg[16];
  entry_scope(e, dg, &t, &tl);
  slot_t *s = tab_find(dx, dg);
  if (s && s->at == e->at) tab_del(dx, s);
  ak_dedupe_claim_t *p = *pending_slot(dx, dg);
  if (p && p->expires_at_ms == e->at) p->swept = true;
  tcount_t *tc = tenant_get(dx, (const char *)t, tl);
  if (tc) tc->n--;
  dx->live--;
  return 0;
}

static long sweep_pass(ak_dedupe_t *dx, size_t max, ak_dedupe_gate_fn gate, void *gate_ctx) {
  sweep_t sw = {.now = now_ms(dx), .max = max};
  uint8_t from[9];
  from[0] = AK_IDX_DEDUPE;
  /* records before sweep_from were deleted: seeking past their tombstones keeps a pass cheap */
  pthread_mutex_lock(&dx->mu);
  int64_t from_at = dx->sweep_from;
  pthread_mutex_unlock(&dx->mu);
  ak_put_u64(from + 1, (uint64_t)from_at);
  const char prefix = AK_IDX_DEDUPE;
  int rc = ak_store_scan_from(dx->inst->store, AK_CF_DEDUPE, &prefix, 1, from, sizeof from, false, collect, &sw);
  long out = (long)sw.nkeys;
  if (rc != 0 || sw.bad) {
    if (sw.bad) ak_log(AK_LOG_ERROR, "dedupe", "damaged dedupe record in the store: sweep stopped", NULL);
    out = -1;
    goto done;
  }
  if (!sw.n) goto done;
  if (gate) gate(gate_ctx, sw.nkeys);
  ak_batch_t *wb = ak_batch_new(dx->inst->store);
  if (!wb || ak_store_pin(dx->inst->store) != 0) {
    ak_batch_free(wb);
    out = -1;
    goto done;
  }
  for (size_t i = 0; i < sw.n; i++) ak_batch_delete(wb, AK_CF_DEDUPE, sw.recs[i].k, sw.recs[i].kl);
  ak_wf_class_t cls;
  char *err = NULL;
  rc = ak_store_write_pinned(dx->inst->store, wb, false, &cls, &err);
  ak_store_unpin(dx->inst->store);
  ak_batch_free(wb);
  if (rc != 0) {
    free(err);
    out = -1; /* nothing forgotten: the next pass reads the same records again */
    goto done;
  }
  pthread_mutex_lock(&dx->mu);
  for (size_t i = 0; i < sw.n; i++) {
    int64_t at;
    ak_dedupe_record_each(sw.recs[i].k, sw.recs[i].kl, sw.recs[i].v, sw.recs[i].vl, &at, forget_one, dx);
  }
  if (dx->sweep_from == from_at) dx->sweep_from = sw.last_at; /* unless a new key lowered it meanwhile */
  set_gauge(dx);
  pthread_mutex_unlock(&dx->mu);
  ak_counter_add(dx->m_swept, sw.nkeys);
done:
  for (size_t i = 0; i < sw.n; i++) {
    free(sw.recs[i].k);
    free(sw.recs[i].v);
  }
  free(sw.recs);
  return out;
}

long ak_dedupe_sweep(ak_dedupe_t *dx, size_t max, ak_dedupe_gate_fn gate, void *gate_ctx) {
  pthread_mutex_lock(&dx->erase_mu);
  long n = sweep_pass(dx, max, gate, gate_ctx);
  pthread_mutex_unlock(&dx->erase_mu);
  return n;
}

/* -------------------------------------------------------------- tenant erase ---- */

typedef struct {
  const uint8_t *tenant;
  size_t tlen;
  size_t max, n, cap;
  rec_t *recs;
  long keys;      /* the tenant's keys in them */
  bool oom, bad;
  uint8_t last[AK_DEDUPE_EKEY_MAX];
  size_t last_len;
} erase_t;

static bool entry_of(const ak_dedupe_entry_t *e, const erase_t *er) {
  const uint8_t *t;
  size_t tl;
  return ak_dedupe_scope_parse(e->scope, e->scope_len, &t, &tl) == 0 && tl == er->tlen &&
         memcmp(t, er->tenant, tl) == 0;
}

static int count_mine(const ak_dedupe_entry_t *e, void *ctx) {
  erase_t *er = ctx;
  er->keys += entry_of(e, er);
  return 0;
}

static int erase_collect(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  erase_t *er = ctx;
  if (er->n >= er->max) return 1;
  int64_t at;
  long before = er->keys;
  if (ak_dedupe_record_each((const uint8_t *)k, kl, (const uint8_t *)v, vl, &at, count_mine, er) < 0) {
    er->bad = true;
    return 1;
  }
  if (kl <= sizeof er->last) {
    memcpy(er->last, k, kl);
    er->last_len = kl;
  }
  if (er->keys == before) return 0;
  uint8_t *kc = dup_bytes(k, kl), *vc = dup_bytes(v, vl);
  if (!kc || !vc || ak_buf_grow(&er->recs, &er->cap, er->n + 1, sizeof *er->recs) != 0) {
    free(kc);
    free(vc);
    er->oom = true;
    return 1;
  }
  er->recs[er->n++] = (rec_t){kc, vc, kl, vl};
  return 0;
}

typedef struct {
  erase_t *er;
  uint8_t *out;
  size_t len;
} rebuild_t;

static int keep_other(const ak_dedupe_entry_t *e, void *ctx) {
  rebuild_t *rb = ctx;
  if (!entry_of(e, rb->er)) rb->len += ak_dedupe_entry_put(rb->out + rb->len, e->at, e->id, e->scope, e->scope_len);
  return 0;
}

typedef struct {
  ak_dedupe_t *dx;
  erase_t *er;
} forget_t;

static int forget_mine(const ak_dedupe_entry_t *e, void *ctx) {
  forget_t *f = ctx;
  if (entry_of(e, f->er)) forget_one(e, f->dx);
  return 0;
}

long ak_dedupe_erase_tenant(ak_dedupe_t *dx, const char *tenant, size_t tlen, size_t max, uint8_t *from,
                            size_t *from_len) {
  erase_t er = {.tenant = (const uint8_t *)tenant, .tlen = tlen, .max = max ? max : 1};
  const char prefix = AK_IDX_DEDUPE;
  pthread_mutex_lock(&dx->erase_mu);
  int rc = ak_store_scan_from(dx->inst->store, AK_CF_DEDUPE, &prefix, 1, *from_len ? from : NULL, *from_len, false,
                              erase_collect, &er);
  long out = er.keys;
  if (rc != 0 || er.oom || er.bad) {
    out = -1;
    goto done;
  }
  if (er.n) {
    ak_batch_t *wb = ak_batch_new(dx->inst->store);
    uint8_t *v = malloc(RECORD_MAX);
    if (!wb || !v || ak_store_pin(dx->inst->store) != 0) {
      ak_batch_free(wb);
      free(v);
      out = -1;
      goto done;
    }
    for (size_t i = 0; i < er.n; i++) {
      rec_t *r = &er.recs[i];
      rebuild_t rb = {&er, v, 1};
      v[0] = AK_DEDUPE_VALUE_V2;
      int64_t at;
      /* a v1 record holds one key (the tenant's): deleted like a v2 left empty */
      if (r->vl && r->v[0] == AK_DEDUPE_VALUE_V2 && r->vl <= RECORD_MAX)
        ak_dedupe_record_each(r->k, r->kl, r->v, r->vl, &at, keep_other, &rb);
      if (rb.len > 1) ak_batch_put(wb, AK_CF_DEDUPE, r->k, r->kl, v, rb.len);
      else ak_batch_delete(wb, AK_CF_DEDUPE, r->k, r->kl);
    }
    ak_wf_class_t cls;
    char *err = NULL;
    rc = ak_store_write_pinned(dx->inst->store, wb, true, &cls, &err);
    ak_store_unpin(dx->inst->store);
    ak_batch_free(wb);
    free(v);
    if (rc != 0) {
      free(err);
      out = -1;
      goto done;
    }
    pthread_mutex_lock(&dx->mu);
    forget_t f = {dx, &er};
    for (size_t i = 0; i < er.n; i++) {
      int64_t at;
      ak_dedupe_record_each(er.recs[i].k, er.recs[i].kl, er.recs[i].v, er.recs[i].vl, &at, forget_mine, &f);
    }
    set_gauge(dx);
    pthread_mutex_unlock(&dx->mu);
  }
  if (er.n >= er.max) { /* more may follow: the next call starts after the last record read */
    memcpy(from, er.last, er.last_len);
    from[er.last_len] = 0; /* the smallest key after it */
    *from_len = er.last_len + 1;
  } else {
    *from_len = 0;
  }
done:
  pthread_mutex_unlock(&dx->erase_mu);
  for (size_t i = 0; i < er.n; i++) {
    free(er.recs[i].k);
    free(er.recs[i].v);
  }
  free(er.recs);
  return out;
}

/* ---------------------------------------------------------------------- open ---- */

typedef struct {
  ak_dedupe_t *dx;
  int64_t n;
  int bad;
} load_t;

static int load_key(const ak_dedupe_entry_t *e, void *ctx) {
  load_t *ld = ctx;
  const uint8_t *t;
  size_t tl;
  uint8_t dg[16];
  entry_scope(e, dg, &t, &tl);
  tcount_t *tc = tenant_get(ld->dx, (const char *)t, tl);
  if (!tc) {
    ld->bad = 2;
    return 1;
  }
  /* records come in the order of their latest expiry, not each key's: of two generations
   * of one key, the later expiry is the live one whichever record is read first */
  slot_t *s = tab_find(ld->dx, dg);
  if ((!s || s->at < e->at) && tab_put(ld->dx, dg, e->at, e->id) != 0) {
    ld->bad = 2;
    return 1;
  }
  tc->n++;
  ld->dx->live++;
  ld->n++;
  return 0;
}

static int load_one(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  load_t *ld = ctx;
  int64_t at;
  if (ak_dedupe_record_each((const uint8_t *)k, kl, (const uint8_t *)v, vl, &at, load_key, ld) < 0) ld->bad = 1;
  return ld->bad ? 1 : 0;
}

ak_dedupe_t *ak_dedupe_new(ak_instance_t *inst, char **err) {
  *err = NULL;
  ak_dedupe_t *dx = calloc(1, sizeof *dx);
  if (!dx) {
    *err = strdup("out of memory");
    return NULL;
  }
  dx->inst = inst;
  pthread_mutex_init(&dx->mu, NULL);
  pthread_mutex_init(&dx->erase_mu, NULL);
  ak_tmap_init(&dx->tenants, sizeof(tcount_t));
  const ak_dedupe_cfg_t *dc = ak_dedupe_cfg(inst->cfg);
  dx->max_entries = dc && dc->max_entries > 0 ? dc->max_entries : INT64_MAX;
  dx->max_per_tenant = dc && dc->max_entries_per_tenant > 0 ? dc->max_entries_per_tenant : INT64_MAX;
#ifdef AK_TEST_HOOKS
  dx->clock_file = getenv("ANKUSA_TEST_DEDUPE_CLOCK_FILE");
#endif
  ak_metrics_t *m = inst->metrics;
  dx->m_keys = ak_metrics_instance_series(m, inst->name, "ankusa_dedupe_keys",
                                          "Dedupe keys stored on the node (expired ones until swept).",
                                          AK_METRIC_GAUGE);
  dx->m_dups = ak_metrics_instance_series(m, inst->name, "ankusa_ingest_duplicates_total",
                                          "Requests answered with the id of the hook already holding their "
                                          "dedupe key (nothing stored).", AK_METRIC_COUNTER);
  dx->m_swept = ak_metrics_instance_series(m, inst->name, "ankusa_dedupe_swept_total",
                                           "Expired dedupe keys removed by the sweeper.", AK_METRIC_COUNTER);
  /* ankusa_sources_without_dedupe is the source table's (core/sources.c): it follows
   * sources the admin API creates and changes */
  const ak_sources_cfg_t *sc = ak_sources_cfg(inst->cfg);
  for (size_t i = 0; sc && i < sc->n; i++) {
    if (sc->v[i].dedupe_from != AK_DEDUPE_NONE) continue;
    ak_log(AK_LOG_WARNING, "config",
           "source has no dedupe: a provider's retry of an event already stored is a new hook, stored and "
           "delivered again", "source=%s", sc->v[i].id);
  }

  int64_t t0 = ak_mono_ns();
  load_t ld = {.dx = dx};
  const char prefix = AK_IDX_DEDUPE;
  int rc = ak_store_scan(inst->store, AK_CF_DEDUPE, &prefix, 1, load_one, &ld);
  if (rc != 0 || ld.bad) {
    *err = strdup(rc != 0 ? "the dedupe keys cannot be read from the store"
                  : ld.bad == 1 ? "a dedupe record in the store is damaged"
                                : "out of memory loading the dedupe keys");
    ak_dedupe_free(dx);
    return NULL;
  }
  set_gauge(dx);
  if (ld.n)
    ak_log(AK_LOG_INFO, "dedupe", "dedupe index loaded", "keys=%lld seconds=%.3f", (long long)ld.n,
           (double)(ak_mono_ns() - t0) / 1e9);
  return dx;
}

void ak_dedupe_free(ak_dedupe_t *dx) {
  if (!dx) return;
  ak_tmap_fini(&dx->tenants);
  tab_free(dx->slots, dx->cap);
  pthread_mutex_destroy(&dx->mu);
  pthread_mutex_destroy(&dx->erase_mu);
  free(dx);
}

/* ------------------------------------------------------------------- the module ---- */

/* Not in Ankusa: the bounds of the dedupe index. The index holds every live key in
 * memory (about 64 bytes each), so max_entries bounds its memory: 10 million keys (about
 * 640 MB) is a 72 h TTL at ~38 new events per second, sustained. One tenant may hold a
 * tenth of that, so a single noisy tenant cannot exhaust it for the others. */
static const ak_opt_t dedupe_rows[] = {
  {.key = "max_entries", .type = AK_OPT_INT, .def = "10000000", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "dedupe keys the node keeps at most (expired ones count until swept); past it a hook "
          "with a key gets 503 dedupe_quota",
   AK_AT(ak_dedupe_cfg_t, max_entries)},
  {.key = "max_entries_per_tenant", .type = AK_OPT_INT, .def = "1000000", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "the same bound for one tenant's keys", AK_AT(ak_dedupe_cfg_t, max_entries_per_tenant)},
  {.key = "sweep_interval_ms", .type = AK_OPT_INT, .def = "10000", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "how often the sweeper removes expired keys", AK_AT(ak_dedupe_cfg_t, sweep_interval_ms)},
  {.key = "scope", .type = AK_OPT_ENUM, .def = "node", .enum_vals = "node|fleet", .env = "ANKUSA_DEDUPE_SCOPE",
   .doc = "node: each node's index alone decides a repeat; fleet: an event stored by any node is a repeat on "
          "every node (claims in fleet.store; this index still runs)"},
  {0},
};

const ak_dedupe_cfg_t *ak_dedupe_cfg(const ak_config_t *cfg) { return ak_config_of(cfg, &ak_mod_dedupe); }

static int dedupe_open(ak_instance_t *inst, char **err) {
  char *why = NULL;
  inst->dedupe = ak_dedupe_new(inst, &why);
  if (inst->dedupe) return 0;
  ak_log(AK_LOG_ERROR, "dedupe", "cannot read the dedupe index from the store", "reason=\"%s\"", why ? why : "?");
  *err = why;
  return AK_MODULE_FAILED;
}

static void dedupe_close(ak_instance_t *inst) {
  ak_dedupe_free(inst->dedupe);
  inst->dedupe = NULL;
}

const ak_module_t ak_mod_dedupe = {
  .name = "dedupe",
  .roles = AK_ROLES_STORE,
  .section = "dedupe",
  .doc = "bounds of the dedupe index",
  .options = dedupe_rows,
  .cfg_size = sizeof(ak_dedupe_cfg_t),
  .open = dedupe_open,
  .close = dedupe_close,
};
