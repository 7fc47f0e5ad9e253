/* The dispatcher (dispatch.h). One thread owns every scheduler structure below; other
 * threads only touch the inboxes (commit markers, replay notices) under `mu`, the outcome
 * stack (sink callbacks, lock-free), and a few atomics read by gauges, replay jobs and
 * the sources API.
 *
 * Store contract (docs/storage.md, "The hook log"): a commit writes its hooks and one group
 * marker, no row per delivery. The dispatcher keeps each tenant's hooks with deliveries
 * owed in memory (the log), claims from it in seq order, and writes a cursor per tenant
 * (batched, unsynced) below which everything is settled. Only exceptions get rows: a
 * delivery waiting for a retry or a breaker, or spilled (settled ones waited behind it),
 * has a delivery row and a due key 'd' <tenant> <at> <seq> <sink>; a dead one a dead row
 * and an 'x' entry; a delivery of an ordered sink a lane row. An exception row's outcome
 * deletes or moves its due key in the batched outcome write, so a crash redelivers rather
 * than loses; every outcome batch is written before the next scan, so a scan never sees a
 * due key whose outcome is already decided.
 *
 * Per tenant the exception scan keeps a cursor (the last due key it claimed) and starts
 * there; a row that becomes due before the cursor (a retry, a replay) moves the cursor
 * back, and the set of claimed rows keeps the rescan from claiming a row twice. A scan
 * therefore costs the tenants it serves and the rows it claims, not the backlog or the
 * number of tenants. */
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>
#include <openssl/rand.h>
#include "dispatch/dispatch.h"
#include "core/buf.h"
#include "core/assert.h"
#include "core/clock.h"
#include "core/envelope.h"
#include "core/ids.h"
#include "core/list.h"
#include "core/log.h"
#include "core/node.h"
#include "core/sources.h"
#include "core/tmap.h"
#include "dispatch/breaker.h"
#include "dispatch/checkin.h"
#include "dispatch/retry.h"
#include "queue/writer.h"
#include "sinks/egress.h"
#include "sinks/sink.h"
#include "store/batch.h"
#include "store/marker.h"
#include "store/store.h"

#define TICK_MS 100
#define MAX_SLEEP_MS 1000
#define FLUSH_OPS 256
#define FLUSH_MS 10
#define TOP_TENANTS 100
#define CLAIM_CHUNK 256 /* due rows one claim_tenant call reads before their hooks */
/* The hook log (docs/storage.md): what a tenant keeps in memory of its pending hooks, and
 * how cursors follow deliveries. */
#define LOG_TENANT_MAX (1u << 20) /* log entries one tenant keeps in memory; the rest wait in the store */
#define LOG_MAX (2u << 20)        /* log entries all tenants keep (32 bytes each) */
#define CURSOR_MS 10              /* moved cursors are written this often, at most */
#define SPILL_MS 50               /* an unsettled delivery holding back settled ones longer is spilled */
#define SPILL_COUNT 5000          /* ... or once this many settled deliveries wait behind them */
#define RECLAIM_CHUNK 4096        /* hooks one reclaim pass deletes, at most */

typedef struct tenant tenant_t;
typedef struct skey skey_t;
typedef struct lane lane_t;
typedef struct dsinks dsinks_t;

/* A claimed row: from claim until its outcome is written. */
typedef struct row {
  struct row *qnext;             /* the sink key's queue */
  struct row *onext;             /* the outcome stack (ak_dispatch.ostack) */
  struct ak_dispatch *d;         /* set when its attempt starts: the sink's callback finds it */
  ak_list_t run_link;            /* the running list, in start order */
  tenant_t *t;
  skey_t *key;
  uint64_t seq;
  uint16_t sink;
  int64_t due_at;
  uint32_t attempts;             /* made before this claim */
  bool has_replay;
  uint8_t replay_id[16];
  char type[64];                 /* the sink type the row was bound to at ack */
  size_t type_len;
  ak_source_t *src;              /* the source version it runs with, held until released */
  dsinks_t *ds;                  /* src's sink instances */
  uint8_t *rec;
  size_t rec_len;
  ak_envelope_t env;
  int64_t start_ns;
  int64_t deadline_ms;
  bool running;
  bool zombie;                   /* timed out: settled, waiting for the sink's late callback */
  bool from_log;                 /* claimed from the hook log: no row of its own in the store */
  lane_t *lane;                  /* the head of this ordered lane, else NULL */
  ak_sink_outcome_t out;
  struct row *cnext;             /* rows waiting for the same hook's check-in (d->cwait) */
  char claim_ref[AK_CLAIM_REF_MAX]; /* "" until the hook's claim is known */
  char claim_sha[65];
} row_t;

struct skey {
  ak_list_t ring_link;           /* in the tenant's ring of keys with queued rows */
  tenant_t *t;
  uint64_t src;                  /* the source's identity (ak_source_t.uid): kept by updates */
  size_t sink;                   /* sink index */
  row_t *qhead, *qtail;
  size_t queued, running;
  ak_breaker_t *breaker;
  bool was_open;
  char label[32];                /* its sink type: the sink label of the breaker metrics */
};

/* Lives in d->tenants (its key is the name), never freed before the dispatcher. */
struct tenant {
  const char *name;
  size_t nlen;
  uint8_t cursor[AK_DUE_KEY_MAX];
  size_t cursor_len;             /* 0: from the start of the tenant's due keys */
  int64_t next_due;              /* earliest unclaimed due time known; INT64_MAX: none */
  size_t heap_idx;               /* in the timer heap, or SIZE_MAX */
  ak_list_t ready_link;          /* in the ready ring: due now, window has room */
  ak_list_t slot_link;           /* in the slot ring: has queued rows */
  ak_list_t keys;                /* ring of its keys with queued rows; the first is served next */
  int64_t pending, scheduled;    /* unclaimed due rows: first attempts / retries */
  int64_t inflight, inflight_bytes, running;
  int64_t need_bytes;            /* the next row did not fit the bytes window: its size (0: none) */
  size_t queued;
  int64_t exc_due;               /* earliest unclaimed exception row's due time; INT64_MAX: none */
  /* the hook log: this tenant's hooks with unsettled deliveries, in seq order (a ring) */
  struct lentry *lq;
  size_t lq_head, lq_n, lq_cap;
  size_t lq_scan;                /* entries before it have nothing left to claim */
  uint64_t overflow_from;        /* 0, or: its hooks from this seq on wait in the store (memory bound) */
  uint64_t boot_cursor;          /* dc:<tenant> as read at start */
  uint64_t cursor_written;       /* dc:<tenant> as last written */
  int64_t behind;                /* settled deliveries of entries past the first */
  int64_t held_since;            /* behind > 0 since (ms); 0: not held */
  bool dirty;                    /* its cursor may have moved since it was written */
  ak_list_t lactive_link;        /* in d->lactive while it has log entries or overflow */
  ak_list_t lanes;               /* its ordered lanes with rows */
  bool due_now;                  /* placed with rows due now (ready, or blocked by its window) */
  bool waiting;                  /* due_now or queued rows: counted in d->nwaiting */
};

struct lane {
  ak_list_t link;                /* in its tenant's lanes while it has rows */
  tenant_t *t;
  uint16_t sink;
  uint8_t pfx[AK_LANE_PFX_MAX];
  size_t pl;
  int64_t rows;                  /* rows in the store (as far as this process knows) */
  bool head_known, busy;
  uint64_t head_seq;
  int64_t head_at;
  uint8_t head_v[AK_DUE_VALUE_MAX];
  size_t head_vl;
};

/* An open-addressing map owned by the dispatch thread. */
typedef struct {
  uint64_t *keys; /* 0 = empty; stored as key + 1 */
  void **vals;
  size_t cap, n;
} umap_t;

/* Inbox entries: tenant notices from other threads, swapped out whole each loop. */
typedef struct {
  char *name;
  size_t nlen;
  int64_t min_at;
  uint64_t rows, from_dead;
} notice_t;

typedef struct {
  notice_t *v;
  size_t n, cap;
} inbox_t;

typedef struct reclaim {
  uint64_t seq;
  uint8_t id[16];
} reclaim_t;

typedef struct {
  const ak_sink_vtable_t *vt;
  void *self;
  int64_t inline_max;            /* a body above it goes by claim; -1: never */
  char label[32];                /* sink type: the metrics label */
  ak_series_t *att_ok, *att_err, *att_timeout, *del_ok, *del_dlq, *parked;
  ak_series_t *dur_ok, *dur_err, *dur_timeout, *lat_ok, *lat_dlq;
  ak_series_t *odel_ok, *odel_dlq, *dead_lettered; /* the original's names (source_id at metrics.detail) */
} sink_inst_t;

/* The sink instances of one source version (its AK_SOURCE_EXT_DISPATCH state), built
 * when the version is made (boot or an admin request) and destroyed with it. The
 * dispatcher keeps every set it built in a list, so that it can destroy every sink
 * (and collect their late callbacks) before its rows are freed at shutdown. */
struct dsinks {
  ak_list_t link;                /* in the dispatcher's list, under its smu */
  ak_dispatch_t *d;              /* NULL once the dispatcher is gone */
  bool destroyed;
  size_t n;
  sink_inst_t v[];
};

struct ak_dispatch {
  uint64_t jitter_state; /* splitmix64 state for retry jitter (dispatch thread only) */
  ak_instance_t *inst;
  const ak_dispatch_cfg_t *cfg;
  ak_retry_policy_t retry;
  ak_breaker_config_t bcfg;
  pthread_mutex_t smu;           /* sets: sink sets are built and freed on other threads */
  ak_list_t sets;

  pthread_t thread;
  bool started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  inbox_t inbox;                 /* under mu */
  _Atomic(row_t *) ostack;       /* finished attempts, pushed lock-free by the sinks' threads (LIFO) */
  _Atomic(ak_checkin_req_t *) cstack; /* answered check-ins, pushed by the checkin thread (LIFO) */
  ak_checkin_t *checkin;         /* NULL without claim stores (inst->claims) */
  bool stop;                     /* under mu */
  int64_t stop_deadline_ms;      /* under mu */

  ak_dispatch_settled_fn settled;
  void *settled_ctx;
  ak_dispatch_tick_fn tick;
  void *tick_ctx;
  ak_dispatch_closed_fn closed;  /* set before start: tenants being erased (tenant/erase.h) */
  void *closed_ctx;
  /* ak_dispatch_call: one call at a time (callmu), run on the thread under mu's handshake */
  pthread_mutex_t callmu;
  pthread_cond_t calldone;       /* with mu */
  ak_dispatch_call_fn call_fn;   /* under mu: the call waiting to run; NULL once it ran */
  void *call_ctx;
  int call_rc;                   /* under mu: 0 ran, -1 the thread stopped first */

  /* dispatch thread only (owner: the thread run() claims it for; boot's scan runs before) */
  ak_owner_t owner;
  ak_tmap_t tenants;             /* name -> tenant_t */
  umap_t claimed;                /* seq<<16|sink -> row */
  umap_t cwait;                  /* seq -> the rows (cnext chain) waiting for its check-in */
  umap_t keys;                   /* tenant# <<32 | src <<16 | sink -> skey */
  tenant_t **heap;
  size_t nheap, capheap;
  ak_list_t ready;               /* ring: the first is served next */
  size_t nready;
  ak_list_t slots;               /* ring: the first is served next */
  size_t nslots;
  ak_list_t run;                 /* rows running, in start (so deadline) order */
  int64_t inflight, inflight_bytes, running;
  int64_t need_bytes;            /* the next row did not fit the node's bytes window: its size */
  size_t nwaiting;               /* tenants waiting (tenant_t.waiting), for the work-conserving windows */
  int64_t pending, scheduled, dead;
  ak_batch_t *wb;
  size_t wb_ops;
  int64_t wb_first_ms;
  struct cand *cand;             /* claim_tenant's due rows, reused across scans */
  size_t capcand;
  struct reclaim *reclaim;       /* hooks whose last row settled, to delete after the flush */
  size_t nreclaim, capreclaim;
  int64_t last_tick_ms;
  bool store_down_logged;
  bool ops_lost;                 /* an outcome never reached the store: rescan everything */

  /* the hook log (dispatch thread, but lsets under lsmu for readers) */
  pthread_mutex_t lsmu;
  struct lset **lsets;           /* interned {tenant, source, sink types} */
  size_t nlsets, caplsets;
  ak_tmap_t lset_ix;             /* source -> uint32_t index of its first lset (chained) */
  ak_tmap_t lanes;               /* lane prefix -> lane_t */
  size_t log_entries;
  uint64_t safe;                 /* seqs below: committed and their notices applied */
  uint64_t dlow_written, dlow_batch; /* m:dlow as written, and as put in the open batch (0: none) */
  uint64_t reclaimed_to;
  uint64_t reclaimed_hooks;      /* minus m:hook_count:r */
  _Atomic uint64_t archived_below; /* the compactor's cursor as it wrote it (storage role) */
  tenant_t **dirty;
  size_t ndirty, capdirty;
  ak_list_t lactive;             /* tenants with log entries or overflow */
  size_t nheld;
  int64_t last_persist_ms;
  int64_t settled_since_persist;
  int64_t behind_total;          /* the tenants' behind: settled deliveries a crash would repeat */
  bool low_stuck;                /* the last persist found m:dlow held where it was written */
  bool cursors_frozen;           /* an outcome batch was lost: cursors stay until the next start */
  struct mnotice *minbox;        /* marker notices, under mu */
  size_t nminbox, capminbox;
  uint64_t notice_lost_from;     /* under mu: a notice could not be queued (memory): rescan from here */
  uint32_t *settle_after;        /* lsets whose pending count drops once the open batch is written */
  size_t nsettle_after, capsettle_after;

  /* published for other threads */
  _Atomic int64_t pub_oldest_due_ms; /* 0 = none */
  _Atomic int pub_has_room;

  ak_series_t *g_pending, *g_scheduled, *g_inflight, *g_dead, *g_oldest, *g_running, *g_claimed, *g_runnable,
      *g_active, *g_breakers, *c_transitions, *c_write_fail, *c_reclaim_fail, *g_claimed_bytes, *c_spills, *g_log_entries;
  ak_family_t *f_tenant_pending, *f_tenant_inflight, *f_transitions;
  ak_series_t *g_tenants;
  uint64_t transitions_seen;
};

/* ------------------------------------------------------------------ small maps ---- */

static uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}

static void *umap_get(umap_t *m, uint64_t k) {
  if (!m->cap) return NULL;
  for (size_t i = mix64(k) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
    if (!m->keys[i]) return NULL;
    if (m->keys[i] == k + 1) return m->vals[i];
  }
}

static int umap_put(umap_t *m, uint64_t k, void *v) {
  if ((m->n + 1) * 2 > m->cap) {
    size_t nc = m->cap ? m->cap * 2 : 256;
    uint64_t *nk = calloc(nc, sizeof *nk);
    void **nv = calloc(nc, sizeof *nv);
    if (!nk || !nv) {
      free(nk);
      free(nv);
      return -1;
    }
    for (size_t i = 0; i < m->cap; i++)
      if (m->keys[i]) {
        size_t j = mix64(m->keys[i] - 1) & (nc - 1);
        while (nk[j]) j = (j + 1) & (nc - 1);
        nk[j] = m->keys[i];
        nv[j] = m->vals[i];
      }
    free(m->keys);
    free(m->vals);
    m->keys = nk;
    m->vals = nv;
    m->cap = nc;
  }
  size_t j = mix64(k) & (m->cap - 1);
  while (m->keys[j] && m->keys[j] != k + 1) j = (j + 1) & (m->cap - 1);
  if (!m->keys[j]) m->n++;
  m->keys[j] = k + 1;
  m->vals[j] = v;
  return 0;
}

/* Backward-shift deletion keeps probe chains intact without tombstones. */
static void umap_del(umap_t *m, uint64_t k) {
  if (!m->cap) return;
  size_t i = mix64(k) & (m->cap - 1);
  while (m->keys[i] && m->keys[i] != k + 1) i = (i + 1) & (m->cap - 1);
  if (!m->keys[i]) return;
  m->keys[i] = 0;
  m->vals[i] = NULL;
  m->n--;
  for (size_t j = (i + 1) & (m->cap - 1); m->keys[j]; j = (j + 1) & (m->cap - 1)) {
    size_t home = mix64(m->keys[j] - 1) & (m->cap - 1);
    /* move j back to i when i lies cyclically within [home, j) */
    bool move = (j > i) ? (home <= i || home > j) : (home <= i && home > j);
    if (move) {
      m->keys[i] = m->keys[j];
      m->vals[i] = m->vals[j];
      m->keys[j] = 0;
      m->vals[j] = NULL;
      i = j;
    }
  }
}

static uint64_t row_id(uint64_t seq, uint16_t sink) { return seq << 16 | sink; }

/* The key of a hook's claim ref ('c' seq, docs/storage.md). */
static void claim_key(uint8_t k[AK_GROUP_KEY_LEN], uint64_t seq) {
  k[0] = AK_IDX_CLAIM;
  ak_put_u64(k + 1, seq);
}


/* ------------------------------------------------------------------ tenant places ---- */

/* Tenant windows are work-conserving (DESIGN.md §9). A tenant is *waiting* while it has
 * rows due now that it has not claimed (tenant_place found next_due <= now: it is in the
 * ready ring, or its window kept it out) or claimed rows queued for a slot (it is in the
 * slot ring). A tenant's window (dispatch.tenants.*) bounds it only while another tenant
 * is waiting; while no other tenant is, it may claim and run past its window up to the
 * node's window (dispatch.max_inflight, max_inflight_bytes, concurrency) less one tenant
 * window, counted over every tenant's rows, so that a tenant that arrives always finds its
 * own window free. Once another tenant waits, each is held to its window again: one past
 * it claims nothing and starts nothing until it is back within it (attempts in flight
 * run to their end). Rows in flight alone do not make a tenant waiting. */
static void tenant_mark(ak_dispatch_t *d, tenant_t *t) {
  bool w = t->due_now || t->queued > 0;
  if (w == t->waiting) return;
  t->waiting = w;
  if (w) d->nwaiting++;
  else d->nwaiting--;
}

static bool tenant_alone(const ak_dispatch_t *d, const tenant_t *t) {
  return d->nwaiting <= (t->waiting ? 1u : 0u);
}

/* The rows t may hold now: its window, or, alone, what the node has outside the reserve. */
static int64_t tenant_cap_inflight(const ak_dispatch_t *d, const tenant_t *t) {
  int64_t cap = d->cfg->tenants.max_inflight;
  if (!tenant_alone(d, t)) return cap;
  int64_t lone = t->inflight + (d->cfg->max_inflight - cap - d->inflight);
  return lone > cap ? lone : cap;
}

/* The same for attempts in flight. */
static int64_t tenant_cap_running(const ak_dispatch_t *d, const tenant_t *t) {
  int64_t cap = d->cfg->tenants.concurrency;
  if (!tenant_alone(d, t)) return cap;
  int64_t lone = t->running + (d->cfg->concurrency - cap - d->running);
  return lone > cap ? lone : cap;
}

/* May t add `bytes` more (its next row, 0 = unknown) past its bytes window: only alone,
 * and only while the node's claimed bytes stay outside the reserve. */
static bool tenant_lone_bytes(const ak_dispatch_t *d, const tenant_t *t, int64_t bytes) {
  if (!tenant_alone(d, t)) return false;
  int64_t cap = d->cfg->max_inflight_bytes - d->cfg->tenants.max_inflight_bytes;
  return bytes ? d->inflight_bytes + bytes <= cap : d->inflight_bytes < cap;
}

/* A window whose next row did not fit its bytes has room again only once that row fits:
 * judged on bytes alone it would look open after every settle, and the dispatcher would
 * scan it without pause, claiming nothing, until enough rows settled (a busy loop while a
 * slow sink holds large hooks). A window holding no row always has room for one. */
static bool tenant_has_room(const ak_dispatch_t *d, const tenant_t *t) {
  if (t->inflight >= tenant_cap_inflight(d, t)) return false;
  int64_t cap = d->cfg->tenants.max_inflight_bytes;
  if (t->need_bytes && t->inflight > 0)
    return t->inflight_bytes + t->need_bytes <= cap || tenant_lone_bytes(d, t, t->need_bytes);
  return t->inflight_bytes < cap || tenant_lone_bytes(d, t, 0);
}

static bool global_has_room(const ak_dispatch_t *d) {
  if (d->inflight >= d->cfg->max_inflight) return false;
  int64_t cap = d->cfg->max_inflight_bytes;
  if (d->need_bytes && d->inflight > 0) return d->inflight_bytes + d->need_bytes <= cap;
  return d->inflight_bytes < cap;
}

/* A scan costs an iterator seek, and the outcome flush before it, whatever it claims.
 * Settling one row frees one row of a full window; scanning then would claim rows one at
 * a time (measured: a seek and a flush per delivery, a third of this thread's CPU). So a
 * window is worth a scan once a page of it is free, or once the rows it holds waiting
 * for a slot run short of its slots (its attempts would otherwise idle). */
static int64_t scan_page(const ak_dispatch_t *d, int64_t cap) {
  int64_t p = d->cfg->batch / 4;
  if (p > cap / 4) p = cap / 4;
  return p < 1 ? 1 : p;
}

static bool tenant_wants_claims(const ak_dispatch_t *d, const tenant_t *t) {
  if (!tenant_has_room(d, t)) return false;
  int64_t cap = tenant_cap_inflight(d, t);
  return cap - t->inflight >= scan_page(d, cap) || t->inflight - t->running < tenant_cap_running(d, t);
}

static bool global_wants_claims(const ak_dispatch_t *d) {
  if (!global_has_room(d)) return false;
  int64_t cap = d->cfg->max_inflight;
  return cap - d->inflight >= scan_page(d, cap) || d->inflight - d->running < d->cfg->concurrency;
}

static void heap_swap(ak_dispatch_t *d, size_t a, size_t b) {
  tenant_t *x = d->heap[a];
  d->heap[a] = d->heap[b];
  d->heap[b] = x;
  d->heap[a]->heap_idx = a;
  d->heap[b]->heap_idx = b;
}

static void heap_fix(ak_dispatch_t *d, size_t i) {
  while (i > 0 && d->heap[(i - 1) / 2]->next_due > d->heap[i]->next_due) {
    heap_swap(d, i, (i - 1) / 2);
    i = (i - 1) / 2;
  }
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < d->nheap && d->heap[l]->next_due < d->heap[m]->next_due) m = l;
    if (r < d->nheap && d->heap[r]->next_due < d->heap[m]->next_due) m = r;
    if (m == i) break;
    heap_swap(d, i, m);
    i = m;
  }
}

static void heap_remove(ak_dispatch_t *d, tenant_t *t) {
  if (t->heap_idx == SIZE_MAX) return;
  size_t i = t->heap_idx;
  t->heap_idx = SIZE_MAX;
  d->nheap--;
  if (i == d->nheap) return;
  d->heap[i] = d->heap[d->nheap];
  d->heap[i]->heap_idx = i;
  heap_fix(d, i);
}

static void heap_upsert(ak_dispatch_t *d, tenant_t *t) {
  AK_ASSERT_OWNER(&d->owner);
  if (t->heap_idx != SIZE_MAX) {
    heap_fix(d, t->heap_idx);
    return;
  }
  if (d->nheap == d->capheap && ak_buf_grow(&d->heap, &d->capheap, d->nheap + 1, sizeof *d->heap) != 0)
    return; /* the tenant is found again by its next notice */
  t->heap_idx = d->nheap;
  d->heap[d->nheap++] = t;
  heap_fix(d, t->heap_idx);
}

static void ready_remove(ak_dispatch_t *d, tenant_t *t) {
  if (!ak_list_linked(&t->ready_link)) return;
  d->nready--;
  ak_list_remove(&t->ready_link);
}

/* New ready tenants join at the tail: the head is whoever the last page did not reach. */
static void ready_add(ak_dispatch_t *d, tenant_t *t) {
  AK_ASSERT_OWNER(&d->owner);
  if (ak_list_linked(&t->ready_link)) return;
  d->nready++;
  ak_list_insert_tail(&d->ready, &t->ready_link);
}

/* Put a tenant where its due state says: idle, waiting on the timer heap, ready, or
 * blocked by its own window (found again when one of its rows settles). */
static void tenant_place(ak_dispatch_t *d, tenant_t *t, int64_t now) {
  t->due_now = t->next_due <= now;
  tenant_mark(d, t);
  if (t->next_due == INT64_MAX) {
    heap_remove(d, t);
    ready_remove(d, t);
  } else if (t->next_due > now) {
    ready_remove(d, t);
    heap_upsert(d, t);
  } else {
    heap_remove(d, t);
    if (tenant_wants_claims(d, t)) ready_add(d, t);
    else ready_remove(d, t);
  }
}

static tenant_t *tenant_get(ak_dispatch_t *d, const char *name, size_t n) {
  AK_ASSERT_OWNER(&d->owner);
  bool created;
  tenant_t *t = ak_tmap_get(&d->tenants, name, n, &created);
  if (!t || !created) return t;
  t->name = ak_tmap_key(t, &t->nlen);
  t->next_due = INT64_MAX;
  t->exc_due = INT64_MAX;
  t->heap_idx = SIZE_MAX;
  ak_list_init(&t->keys);
  ak_list_init(&t->lanes);
  return t;
}

/* A row became due at `at` for tenant t: make sure the next scan sees it. A cursor past
 * `at` moves back to the first possible key at `at` (not to the tenant's first key: the
 * keys of rows already delivered leave tombstones there until compaction); the claimed
 * rows it passes again are skipped. */
static void tenant_note_due(tenant_t *t, int64_t at) {
  if (at < t->exc_due) t->exc_due = at;
  if (at < t->next_due) t->next_due = at;
  if (t->cursor_len) {
    int64_t cat = (int64_t)ak_get_u64(t->cursor + t->cursor_len - 18);
    if (at <= cat) t->cursor_len = ak_key_due(t->cursor, t->name, t->nlen, at, 0, 0);
  }
}

/* ------------------------------------------------------------------ slots ---- */

static void slots_add(ak_dispatch_t *d, tenant_t *t) {
  AK_ASSERT_OWNER(&d->owner);
  if (ak_list_linked(&t->slot_link)) return;
  d->nslots++;
  ak_list_insert_tail(&d->slots, &t->slot_link);
  tenant_mark(d, t);
}

static void slots_remove(ak_dispatch_t *d, tenant_t *t) {
  if (!ak_list_linked(&t->slot_link)) return;
  d->nslots--;
  ak_list_remove(&t->slot_link);
  tenant_mark(d, t);
}

static void key_ring_add(tenant_t *t, skey_t *k) {
  if (!ak_list_linked(&k->ring_link)) ak_list_insert_tail(&t->keys, &k->ring_link);
}

static void key_ring_remove(skey_t *k) {
  if (ak_list_linked(&k->ring_link)) ak_list_remove(&k->ring_link);
}

static void key_push(ak_dispatch_t *d, skey_t *k, row_t *r) {
  AK_ASSERT_OWNER(&d->owner);
  r->qnext = NULL;
  if (k->qtail) k->qtail->qnext = r;
  else k->qhead = r;
  k->qtail = r;
  k->queued++;
  k->t->queued++;
  key_ring_add(k->t, k);
  slots_add(d, k->t);
}

static row_t *key_pop(ak_dispatch_t *d, skey_t *k) {
  row_t *r = k->qhead;
  if (!r) return NULL;
  k->qhead = r->qnext;
  if (!k->qhead) k->qtail = NULL;
  k->queued--;
  k->t->queued--;
  if (!k->queued) key_ring_remove(k);
  if (!k->t->queued) slots_remove(d, k->t);
  return r;
}

/* ------------------------------------------------------------------ the hook log ---- */

/* A hook with unsettled deliveries (docs/storage.md, "The hook log"): a bit per sink of
 * its set, in unclaimed_bits (not claimed yet) or open (claimed, not settled); settled is neither. */
typedef struct lentry {
  uint64_t seq;
  int64_t at_ms;                 /* its commit time: due since then */
  uint32_t set;                  /* d->lsets index */
  uint32_t unclaimed_bits, open;
  uint32_t pad;
} lentry_t;

/* {tenant, source, the sink types the hooks were acked for}: interned, never freed
 * before the dispatcher. */
typedef struct lset {
  tenant_t *t;
  char *source;
  size_t source_len;
  unsigned nsinks;
  char *types[AK_MARKER_MAX_SINKS];
  size_t tlens[AK_MARKER_MAX_SINKS];
  uint32_t next_same;            /* the next lset of the same source, UINT32_MAX: none */
  uint32_t ordered;              /* sinks whose entry says ordered: true (refreshed every tick) */
  _Atomic int64_t pending;       /* log deliveries not settled (claimed or not) */
} lset_t;

typedef struct mnotice {
  uint64_t first_seq, safe;
  size_t len;
  uint8_t *marker;
} mnotice_t;

static void count_unclaimed(ak_dispatch_t *d, tenant_t *t, uint32_t attempts, int64_t delta);
static bool lane_push(ak_dispatch_t *d, tenant_t *t, const struct lset *ls, uint64_t seq, uint16_t sink, int64_t at);
static void lset_ordered(ak_dispatch_t *d, struct lset *ls);

static lentry_t *lq_at(const tenant_t *t, size_t i) { return &t->lq[(t->lq_head + i) & (t->lq_cap - 1)]; }

static uint32_t full_mask(unsigned n) { return n >= 32 ? 0xffffffffu : (1u << n) - 1; }

static unsigned settled_bits(const ak_dispatch_t *d, const lentry_t *e) {
  return d->lsets[e->set]->nsinks - (unsigned)__builtin_popcount(e->unclaimed_bits | e->open);
}

static int lq_grow(tenant_t *t) {
  size_t nc = t->lq_cap ? t->lq_cap * 2 : 64;
  lentry_t *n = malloc(nc * sizeof *n);
  if (!n) return -1;
  for (size_t i = 0; i < t->lq_n; i++) n[i] = *lq_at(t, i);
  free(t->lq);
  t->lq = n;
  t->lq_cap = nc;
  t->lq_head = 0;
  return 0;
}

/* The position of seq, or where it would go. */
static size_t lq_find(const tenant_t *t, uint64_t seq, bool *found) {
  size_t lo = 0, hi = t->lq_n;
  if (hi && lq_at(t, 0)->seq == seq) lo = hi = 0; /* settles mostly hit the front */
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (lq_at(t, mid)->seq < seq) lo = mid + 1;
    else hi = mid;
  }
  *found = lo < t->lq_n && lq_at(t, lo)->seq == seq;
  return lo;
}

static void tenant_dirty(ak_dispatch_t *d, tenant_t *t) {
  if (t->dirty) return;
  if (d->ndirty == d->capdirty && ak_buf_grow(&d->dirty, &d->capdirty, d->ndirty + 1, sizeof *d->dirty) != 0)
    return; /* written with the next change that finds room */
  t->dirty = true;
  d->dirty[d->ndirty++] = t;
}

static void tenant_lactive(ak_dispatch_t *d, tenant_t *t) {
  bool a = t->lq_n || t->overflow_from;
  if (a == ak_list_linked(&t->lactive_link)) return;
  if (a) ak_list_insert_tail(&d->lactive, &t->lactive_link);
  else ak_list_remove(&t->lactive_link);
}

static void held_update(ak_dispatch_t *d, tenant_t *t, int64_t now) {
  bool h = t->behind > 0;
  if (h == (t->held_since != 0)) return;
  t->held_since = h ? (now > 0 ? now : 1) : 0;
  if (h) d->nheld++;
  else d->nheld--;
}

/* Entries whose every delivery settled leave from the front; the cursor moves. */
static void lq_pop_settled(ak_dispatch_t *d, tenant_t *t, int64_t now) {
  bool popped = false;
  while (t->lq_n) {
    lentry_t *h = lq_at(t, 0);
    if (h->unclaimed_bits | h->open) break;
    t->lq_head = (t->lq_head + 1) & (t->lq_cap - 1);
    t->lq_n--;
    d->log_entries--;
    if (t->lq_scan) t->lq_scan--;
    popped = true;
    if (t->lq_n) {
      int64_t b = settled_bits(d, lq_at(t, 0));
      t->behind -= b;
      d->behind_total -= b;
    }
  }
  if (popped) {
    tenant_dirty(d, t);
    tenant_lactive(d, t);
  }
  held_update(d, t, now);
}

/* The due time of t's first delivery not claimed yet (INT64_MAX: none); skips the
 * entries with nothing left to claim for good. */
static int64_t log_due(tenant_t *t) {
  while (t->lq_scan < t->lq_n && !lq_at(t, t->lq_scan)->unclaimed_bits) t->lq_scan++;
  for (size_t i = t->lq_scan; i < t->lq_n; i++) {
    const lentry_t *e = lq_at(t, i);
    if (e->unclaimed_bits) return e->at_ms;
  }
  return INT64_MAX;
}

static void tenant_due_update(tenant_t *t) {
  int64_t l = log_due(t);
  t->next_due = t->exc_due < l ? t->exc_due : l;
}

/* A committed hook joins its tenant's log (in seq order; a seq already there is skipped),
 * or, past the memory bound, waits in the store for a refill. */
static void log_add(ak_dispatch_t *d, tenant_t *t, uint64_t seq, int64_t at, uint32_t set, uint32_t owned) {
  lset_t *ls = d->lsets[set];
  uint32_t unclaimed_bits = full_mask(ls->nsinks) & ~owned;
  if (!unclaimed_bits) return;
  if (t->overflow_from || t->lq_n >= LOG_TENANT_MAX || d->log_entries >= LOG_MAX) goto add; /* waits in the store */
  /* an ordered sink's delivery goes to its lane */
  for (uint32_t m = unclaimed_bits & ls->ordered; m; m &= m - 1) {
    uint16_t b = (uint16_t)__builtin_ctz(m);
    if (lane_push(d, t, ls, seq, b, at)) unclaimed_bits &= ~(1u << b);
  }
  if (!unclaimed_bits) return;
add:
  if (t->overflow_from) {
    if (seq < t->overflow_from) {
      t->overflow_from = seq;
      tenant_dirty(d, t);
    }
    return;
  }
  if (t->lq_n >= LOG_TENANT_MAX || d->log_entries >= LOG_MAX || (t->lq_n == t->lq_cap && lq_grow(t) != 0)) {
    t->overflow_from = seq;
    tenant_dirty(d, t);
    tenant_lactive(d, t);
    return;
  }
  lentry_t e = {.seq = seq, .at_ms = at, .set = set, .unclaimed_bits = unclaimed_bits};
  if (!t->lq_n || lq_at(t, t->lq_n - 1)->seq < seq) {
    *lq_at(t, t->lq_n) = e;
    t->lq_n++;
  } else { /* a later commit landed first (batcher.partitions > 1), or a refill met a notice */
    bool found;
    size_t p = lq_find(t, seq, &found);
    if (found) return;
    for (size_t i = t->lq_n; i > p; i--) *lq_at(t, i) = *lq_at(t, i - 1);
    *lq_at(t, p) = e;
    t->lq_n++;
    if (p < t->lq_scan) t->lq_scan = p;
    if (p == 0) {
      int64_t b = settled_bits(d, lq_at(t, 1));
      t->behind += b;
      d->behind_total += b;
    }
  }
  if (t->lq_n == 1 || lq_at(t, 0)->seq == seq) tenant_dirty(d, t);
  d->log_entries++;
  int owed = __builtin_popcount(unclaimed_bits);
  atomic_fetch_add(&ls->pending, owed);
  count_unclaimed(d, t, 0, owed);
  if (at < t->next_due) t->next_due = at;
  tenant_lactive(d, t);
}

static lentry_t *log_find(tenant_t *t, uint64_t seq, size_t *pos) {
  bool found;
  size_t p = lq_find(t, seq, &found);
  if (pos) *pos = p;
  return found ? lq_at(t, p) : NULL;
}

static void log_claimed(tenant_t *t, uint64_t seq, uint16_t sink) {
  lentry_t *e = log_find(t, seq, NULL);
  if (!e) return;
  e->unclaimed_bits &= ~(1u << sink);
  e->open |= 1u << sink;
}

/* A claimed log delivery goes back unclaimed (its outcome could not be stored). */
static void log_unclaim(ak_dispatch_t *d, tenant_t *t, uint64_t seq, uint16_t sink) {
  size_t p;
  lentry_t *e = log_find(t, seq, &p);
  if (!e || !(e->open & (1u << sink))) return;
  e->open &= ~(1u << sink);
  e->unclaimed_bits |= 1u << sink;
  if (p < t->lq_scan) t->lq_scan = p;
  count_unclaimed(d, t, 0, +1);
  if (e->at_ms < t->next_due) t->next_due = e->at_ms;
}

/* A log delivery settled: delivered, or (via_row) moved into an exception row in the open
 * batch; the source's count of log deliveries drops only once that row is written, so a
 * count (DELETE of a source) never misses a delivery between the two. */
static void log_settle(ak_dispatch_t *d, tenant_t *t, uint64_t seq, uint16_t sink, bool via_row, int64_t now) {
  size_t p;
  lentry_t *e = log_find(t, seq, &p);
  uint32_t bit = 1u << sink;
  if (!e || !((e->open | e->unclaimed_bits) & bit)) return;
  e->open &= ~bit;
  e->unclaimed_bits &= ~bit;
  if (!via_row || ak_buf_grow(&d->settle_after, &d->capsettle_after, d->nsettle_after + 1,
                              sizeof *d->settle_after) != 0)
    atomic_fetch_sub(&d->lsets[e->set]->pending, 1);
  else
    d->settle_after[d->nsettle_after++] = e->set;
  d->settled_since_persist++;
  if (p > 0) {
    t->behind++;
    d->behind_total++;
  }
  else if (!(e->unclaimed_bits | e->open)) lq_pop_settled(d, t, now);
  held_update(d, t, now);
}

/* Interns a marker's set: its index, or UINT32_MAX when memory ran out. */
static uint32_t lset_intern(ak_dispatch_t *d, const ak_marker_set_t *ms) {
  bool created;
  uint32_t *head = ak_tmap_get(&d->lset_ix, ms->source, ms->source_len, &created);
  if (!head) return UINT32_MAX;
  if (created) *head = UINT32_MAX;
  for (uint32_t i = *head; i != UINT32_MAX; i = d->lsets[i]->next_same) {
    lset_t *l = d->lsets[i];
    if (l->t->nlen != ms->tenant_len || memcmp(l->t->name, ms->tenant, ms->tenant_len) || l->nsinks != ms->nsinks)
      continue;
    bool same = true;
    for (unsigned j = 0; same && j < ms->nsinks; j++) {
      const char *ty;
      size_t tl;
      ak_marker_set_type(ms, j, &ty, &tl);
      same = l->tlens[j] == tl && !memcmp(l->types[j], ty, tl);
    }
    if (same) return i;
  }
  tenant_t *t = tenant_get(d, ms->tenant, ms->tenant_len);
  lset_t *l = t ? calloc(1, sizeof *l) : NULL;
  if (!l) return UINT32_MAX;
  l->t = t;
  l->source = strndup(ms->source, ms->source_len);
  l->source_len = ms->source_len;
  l->nsinks = ms->nsinks;
  bool ok = l->source != NULL;
  for (unsigned j = 0; ok && j < ms->nsinks; j++) {
    const char *ty;
    ak_marker_set_type(ms, j, &ty, &l->tlens[j]);
    ok = (l->types[j] = strndup(ty, l->tlens[j])) != NULL;
  }
  pthread_mutex_lock(&d->lsmu);
  if (ok && d->nlsets == d->caplsets)
    ok = ak_buf_grow(&d->lsets, &d->caplsets, d->nlsets + 1, sizeof *d->lsets) == 0;
  if (ok) d->lsets[d->nlsets++] = l;
  pthread_mutex_unlock(&d->lsmu);
  if (!ok) {
    for (unsigned j = 0; j < l->nsinks; j++) free(l->types[j]);
    free(l->source);
    free(l);
    return UINT32_MAX;
  }
  l->next_same = *head;
  *head = (uint32_t)(d->nlsets - 1);
  lset_ordered(d, l);
  return *head;
}

/* A marker's hooks join the log: every one from `from` on (boot: above its tenant's
 * cursor; only: that tenant's alone). -1 when a set could not be interned. */
/* Deliveries that have a row of their own (the deliveries CF) from some seq on, as
 * seq << 6 | sink in key order: a delivery with a row is not on the log. After a crash a
 * row can be newer than its tenant's cursor (the cursor had not passed it yet). */
typedef struct {
  uint64_t *v;
  size_t n, cap, pos;
} owned_t;

static int owned_cb(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  (void)v;
  (void)vl;
  owned_t *o = ctx;
  if (kl != AK_DELIVERY_KEY_LEN) return 0;
  uint16_t sink = ak_get_u16((const uint8_t *)k + 8);
  if (sink >= AK_MARKER_MAX_SINKS) return 0;
  if (ak_buf_grow(&o->v, &o->cap, o->n + 1, sizeof *o->v) != 0) return 1;
  o->v[o->n++] = ak_get_u64((const uint8_t *)k) << 6 | sink;
  return 0;
}

/* The sinks of seq that have rows (o walks forward: seqs are asked in order). */
static uint32_t owned_of(owned_t *o, uint64_t seq) {
  if (!o) return 0;
  while (o->pos < o->n && (o->v[o->pos] >> 6) < seq) o->pos++;
  uint32_t m = 0;
  for (size_t i = o->pos; i < o->n && (o->v[i] >> 6) == seq; i++) m |= 1u << (o->v[i] & 63);
  return m;
}

static int log_add_marker(ak_dispatch_t *d, uint64_t first, const ak_marker_t *m, uint64_t from, tenant_t *only,
                          bool boot, owned_t *owned, int64_t now) {
  uint32_t local[64], *map = m->nsets <= 64 ? local : malloc(m->nsets * sizeof *map);
  if (!map) return -1;
  const uint8_t *pos = NULL;
  int rc = 0;
  for (unsigned i = 0; i < m->nsets; i++) {
    ak_marker_set_t ms;
    if (ak_marker_next_set(m, &pos, &ms) != 0 || (map[i] = lset_intern(d, &ms)) == UINT32_MAX) {
      rc = -1;
      goto out;
    }
  }
  tenant_t *last = NULL;
  for (uint32_t i = 0; i < m->count; i++) {
    uint64_t seq = first + i;
    if (seq < from) continue;
    uint32_t set = map[ak_marker_hook_set(m, i)];
    tenant_t *t = d->lsets[set]->t;
    if (only && t != only) continue;
    if (boot && seq < t->boot_cursor) continue;
    if (last && last != t) tenant_place(d, last, now);
    last = t;
    log_add(d, t, seq, m->committed_at_ms, set, owned_of(owned, seq));
  }
  if (last) tenant_place(d, last, now);
out:
  if (map != local) free(map);
  return rc;
}

typedef struct {
  ak_dispatch_t *d;
  uint64_t from;
  tenant_t *only;
  bool boot;
  int64_t now;
  int rc;
  uint64_t hooks, start;
  owned_t owned;
} lscan_t;

static int lscan_prev(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  (void)v;
  (void)vl;
  lscan_t *s = ctx;
  if (kl == AK_GROUP_KEY_LEN) s->start = ak_get_u64((const uint8_t *)k + 1);
  return 1;
}

static int lscan_one(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  lscan_t *s = ctx;
  ak_marker_t m;
  if (kl != AK_GROUP_KEY_LEN || ak_marker_decode((const uint8_t *)v, vl, &m) != 0) {
    ak_log(AK_LOG_ERROR, "dispatch", "a group marker in the store is damaged", "key_len=%zu", kl);
    s->rc = -2;
    return 1;
  }
  uint64_t first = ak_get_u64((const uint8_t *)k + 1);
  if (first + m.count <= s->from) return 0;
  if (log_add_marker(s->d, first, &m, s->from, s->only, s->boot, &s->owned, s->now) != 0) {
    s->rc = -1;
    return 1;
  }
  s->hooks += m.count;
  return 0;
}

/* Reads the group markers from the one holding `from` to the end. 0, -1 (store or
 * memory), -2 (a damaged marker). */
static int log_scan(ak_dispatch_t *d, uint64_t from, tenant_t *only, bool boot, int64_t now, uint64_t *hooks) {
  const char g = AK_IDX_GROUP;
  uint8_t fk[AK_GROUP_KEY_LEN];
  ak_key_group(fk, from);
  lscan_t s = {.d = d, .from = from, .only = only, .boot = boot, .now = now, .start = from};
  uint8_t dk[8];
  ak_put_u64(dk, from);
  int rc = -1;
  if (ak_store_scan_from(d->inst->store, AK_CF_DELIVERIES, NULL, 0, dk, sizeof dk, false, owned_cb, &s.owned) != 0 ||
      ak_store_scan_from(d->inst->store, AK_CF_INDEX, &g, 1, fk, sizeof fk, true, lscan_prev, &s) != 0)
    goto out;
  ak_key_group(fk, s.start);
  if (ak_store_scan_from(d->inst->store, AK_CF_INDEX, &g, 1, fk, sizeof fk, false, lscan_one, &s) != 0) goto out;
  if (hooks) *hooks = s.hooks;
  rc = s.rc;
out:
  free(s.owned.v);
  return rc;
}

/* A tenant over its memory bound gets its waiting hooks back once it has room. */
static void log_refill(ak_dispatch_t *d, int64_t now) {
  ak_list_foreach_safe(n, nx, &d->lactive) {
    tenant_t *t = ak_list_entry(n, tenant_t, lactive_link);
    if (!t->overflow_from || t->lq_n >= LOG_TENANT_MAX / 2 || d->log_entries >= LOG_MAX / 4 * 3) continue;
    uint64_t from = t->overflow_from;
    t->overflow_from = 0;
    if (log_scan(d, from, t, false, now, NULL) != 0 && !t->overflow_from) t->overflow_from = from;
    tenant_dirty(d, t);
    tenant_lactive(d, t);
    tenant_due_update(t);
    tenant_place(d, t, now);
  }
}

/* What t's cursor is now: every delivery of its hooks below it settled. */
static uint64_t tenant_cursor(const ak_dispatch_t *d, const tenant_t *t) {
  uint64_t c = d->safe;
  if (t->lq_n && lq_at(t, 0)->seq < c) c = lq_at(t, 0)->seq;
  if (t->overflow_from && t->overflow_from < c) c = t->overflow_from;
  return c;
}

static bool tenant_closed(const ak_dispatch_t *d, const tenant_t *t) {
  return d->closed && d->closed(d->closed_ctx, t->name, t->nlen);
}

/* ------------------------------------------------------------------ outcome writes ---- */

/* Between op_begin and op_end, which made the batch. */
static ak_batch_t *batch(ak_dispatch_t *d, int64_t now) {
  if (!d->wb_ops) d->wb_first_ms = now;
  d->wb_ops++;
  return d->wb;
}

static bool op_begin(ak_dispatch_t *d);
static void op_end(ak_dispatch_t *d);

/* How far reclaim may go: the log's low mark as written, and while the storage role runs
 * no further than the compactor's cursor, so a hook leaves the store only once it is both
 * delivered and archived. */
static uint64_t reclaim_limit(ak_dispatch_t *d) {
  uint64_t to = d->dlow_written;
  if (d->inst->roles & AK_ROLE_STORAGE) {
    uint64_t a = atomic_load(&d->archived_below);
    if (a < to) to = a;
  }
  return to;
}

void ak_dispatch_archived_below(ak_dispatch_t *d, uint64_t seq) {
  if (!d) return;
  uint64_t cur = atomic_load(&d->archived_below);
  while (seq > cur && !atomic_compare_exchange_weak(&d->archived_below, &cur, seq)) {
  }
}

static void reclaim_note(ak_dispatch_t *d, uint64_t seq, const uint8_t id[16]) {
  /* the candidate is written with the outcome that made it one, so a kill before the
   * hook's delete leaves it to the next start instead of nobody */
  if (op_begin(d)) {
    uint8_t rk[AK_GROUP_KEY_LEN];
    rk[0] = AK_IDX_RECLAIM;
    ak_put_u64(rk + 1, seq);
    ak_batch_put(batch(d, ak_now_ms()), AK_CF_INDEX, rk, sizeof rk, id, 16);
    op_end(d);
  }
  if (ak_buf_grow(&d->reclaim, &d->capreclaim, d->nreclaim + 1, sizeof *d->reclaim) != 0) return;
  d->reclaim[d->nreclaim].seq = seq;
  memcpy(d->reclaim[d->nreclaim].id, id, 16);
  d->nreclaim++;
}

typedef struct {
  bool found;
} any_ctx_t;

static int any_cb(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  (void)k;
  (void)kl;
  (void)v;
  (void)vl;
  ((any_ctx_t *)ctx)->found = true;
  return 1;
}

/* The reclaimed-hook counter rides in the batch that deletes them: m:hook_count:r holds
 * minus the hooks reclaimed (two's complement), so the store's hook count (the sum of
 * m:hook_count:*) is what it holds; the writer's gauge follows. */
static void count_reclaimed(ak_dispatch_t *d, ak_batch_t *wb, uint64_t n) {
  if (!n) return;
  uint8_t v[8];
  ak_put_u64(v, (uint64_t)0 - (d->reclaimed_hooks + n));
  ak_batch_put(wb, AK_CF_DEFAULT, AK_KEY_HOOK_COUNT_RECLAIMED, strlen(AK_KEY_HOOK_COUNT_RECLAIMED), v, 8);
}

static void reclaimed(ak_dispatch_t *d, uint64_t n) {
  d->reclaimed_hooks += n;
  if (n && d->inst->writer) ak_writer_note_reclaimed(d->inst->writer, n);
}

void ak_dispatch_count_restored(ak_dispatch_t *d, ak_batch_t *wb, uint64_t n) {
  AK_ASSERT_OWNER(&d->owner);
  if (!n) return;
  uint8_t v[8];
  ak_put_u64(v, (uint64_t)0 - (d->reclaimed_hooks - n));
  ak_batch_put(wb, AK_CF_DEFAULT, AK_KEY_HOOK_COUNT_RECLAIMED, strlen(AK_KEY_HOOK_COUNT_RECLAIMED), v, 8);
}

void ak_dispatch_restored(ak_dispatch_t *d, uint64_t n) {
  AK_ASSERT_OWNER(&d->owner);
  d->reclaimed_hooks -= n;
  if (n && d->inst->writer) ak_writer_note_restored(d->inst->writer, n);
}

/* Candidates ('r' keys, written with the outcome that cleared an exception row): a hook
 * below the reclaim pass's progress whose delivery rows are all gone is deleted, with its
 * id keys if its id is not sealed. Runs after the outcome batch was written. */
static void reclaim(ak_dispatch_t *d) {
  if (!d->nreclaim) return;
  ak_store_t *st = d->inst->store;
  ak_batch_t *wb = NULL;
  uint64_t n = 0;
  for (size_t i = 0; i < d->nreclaim; i++) {
    uint64_t seq = d->reclaim[i].seq;
    uint8_t pfx[8], rk[AK_GROUP_KEY_LEN];
    ak_put_u64(pfx, seq);
    rk[0] = AK_IDX_RECLAIM;
    ak_put_u64(rk + 1, seq);
    bool del = false;
    /* at or above the reclaim pass's progress that pass decides (its deliveries from the
     * log may not all be settled yet) */
    if (seq < d->reclaimed_to) {
      any_ctx_t a = {false};
      if (ak_store_scan(st, AK_CF_DELIVERIES, pfx, sizeof pfx, any_cb, &a) != 0) continue; /* next start */
      del = !a.found;
    }
    if (!wb && !(wb = ak_batch_new(st))) break;
    if (ak_store_pin(st) != 0) break;
    ak_batch_delete(wb, AK_CF_INDEX, rk, sizeof rk);
    if (del) {
      uint8_t hk[AK_HOOK_KEY_LEN], ik[AK_ID_KEY_LEN];
      ak_key_hook(hk, seq);
      ak_key_id(ik, d->reclaim[i].id);
      ak_batch_delete(wb, AK_CF_HOOKS, hk, sizeof hk);
      uint8_t ck[AK_GROUP_KEY_LEN];
      claim_key(ck, seq);
      ak_batch_delete(wb, AK_CF_INDEX, ck, sizeof ck);
      n++;
      /* a sealed id has no index key (core/ids.h); an unsealed one (stored before ids were
       * sealed, or released from the pen) has */
      const uint8_t *idk = ak_store_id_key(st);
      if (!idk || ak_uuid7_unseal(idk, d->reclaim[i].id) != seq) {
        uint8_t jk[AK_GROUP_KEY_LEN];
        ak_key_unsealed(jk, seq);
        ak_batch_delete(wb, AK_CF_INDEX, ik, sizeof ik);
        ak_batch_delete(wb, AK_CF_INDEX, jk, sizeof jk);
      }
    }
    ak_store_unpin(st);
  }
  d->nreclaim = 0;
  if (wb) {
    ak_wf_class_t cls;
    char *err = NULL;
    if (ak_store_pin(st) == 0) {
      count_reclaimed(d, wb, n);
      ak_store_unpin(st);
    }
    if (ak_store_write(st, wb, false, &cls, &err) != 0) {
      ak_counter_add(d->c_reclaim_fail, 1);
      free(err);
    } else {
      reclaimed(d, n);
    }
    ak_batch_free(wb);
  }
}

static void log_reclaim(ak_dispatch_t *d);

/* Write the outcome batch. On failure the rows' outcomes are lost, which only means
 * they are delivered again (their due keys stay): at-least-once holds. */
static void flush(ak_dispatch_t *d) {
  AK_ASSERT_OWNER(&d->owner);
  if (!d->wb_ops) return;
  ak_wf_class_t cls;
  char *err = NULL;
  if (ak_store_write(d->inst->store, d->wb, false, &cls, &err) != 0) {
    ak_counter_add(d->c_write_fail, 1);
    if (!d->store_down_logged)
      ak_log(AK_LOG_ERROR, "dispatch", "outcome write failed; those rows will be delivered again", "class=%s",
             ak_wf_class_names[cls]);
    d->store_down_logged = true;
    free(err);
    d->nreclaim = 0;
    d->ops_lost = true;
    /* rows that took deliveries off the log may be lost with it: the cursors stay where
     * they are, so that the next start delivers those again from the log */
    if (!d->cursors_frozen)
      ak_log(AK_LOG_ERROR, "dispatch", "hook log cursors frozen until the next start", "class=%s",
             ak_wf_class_names[cls]);
    d->cursors_frozen = true;
    d->dlow_batch = 0;
  } else {
    d->store_down_logged = false;
    if (d->dlow_batch) d->dlow_written = d->dlow_batch;
    d->dlow_batch = 0;
    reclaim(d);
    log_reclaim(d);
  }
  for (size_t i = 0; i < d->nsettle_after; i++) atomic_fetch_sub(&d->lsets[d->settle_after[i]]->pending, 1);
  d->nsettle_after = 0;
  ak_batch_clear(d->wb);
  d->wb_ops = 0;
}

/* Puts/deletes under a pin so a reopen cannot swap the CF handles mid-batch. Returns
 * false when the store is closed or no batch could be made (the op is skipped: the row
 * is simply due again). */
static bool op_begin(ak_dispatch_t *d) {
  if (ak_store_pin(d->inst->store) == 0) {
    if (d->wb || (d->wb = ak_batch_new(d->inst->store))) return true;
    ak_store_unpin(d->inst->store);
  }
  d->ops_lost = true;
  return false;
}
static void op_end(ak_dispatch_t *d) { ak_store_unpin(d->inst->store); }

static void op_delete_due(ak_dispatch_t *d, row_t *r, int64_t now) {
  uint8_t k[AK_DUE_KEY_MAX];
  size_t kl = ak_key_due(k, r->t->name, r->t->nlen, r->due_at, r->seq, r->sink);
  ak_batch_delete(batch(d, now), AK_CF_INDEX, k, kl);
}

static const char *row_type(const row_t *r, size_t *len) {
  *len = r->type_len;
  return r->type;
}

/* Puts r's delivery row as dead (attempts, dead-lettered now) and its 'x' entry into the
 * open batch (between op_begin and op_end). */
static void put_dead(ak_dispatch_t *d, const row_t *r, uint32_t attempts, const char *reason, int64_t now) {
  size_t tl;
  const char *ty = row_type(r, &tl);
  uint8_t dk[AK_DELIVERY_KEY_LEN], row[300], xk[AK_DEAD_KEY_LEN], xv[1024];
  ak_key_delivery(dk, r->seq, r->sink);
  size_t rl = ak_delivery_row_ex(row, sizeof row, AK_DELIVERY_DEAD, attempts, now, ty, tl,
                                 r->has_replay ? r->replay_id : NULL);
  ak_batch_put(batch(d, now), AK_CF_DELIVERIES, dk, sizeof dk, row, rl);
  ak_key_dead(xk, now, r->seq, r->sink);
  ak_dead_entry_t e = {.received_at_ms = r->env.received_at_ms, .attempts = attempts, .sink_type = ty,
                       .sink_type_len = tl, .source = r->env.source, .source_len = r->env.source_len,
                       .tenant = r->t->name, .tenant_len = r->t->nlen, .reason = reason,
                       .reason_len = strlen(reason)};
  memcpy(e.id, r->env.id, 16);
  size_t xl = ak_dead_entry_encode(xv, sizeof xv, &e);
  ak_batch_put(batch(d, now), AK_CF_INDEX, xk, sizeof xk, xv, xl);
}

/* Puts a pending delivery row (attempts, due at) and, unless lane, its due key into the
 * open batch. */
static void put_pending(ak_dispatch_t *d, tenant_t *t, uint64_t seq, uint16_t sink, int64_t at, uint32_t attempts,
                        const char *ty, size_t tl, const uint8_t *replay, bool due_key, int64_t now) {
  uint8_t dk[AK_DELIVERY_KEY_LEN], row[300];
  if (due_key) {
    uint8_t k[AK_DUE_KEY_MAX], v[AK_DUE_VALUE_MAX];
    size_t kl = ak_key_due(k, t->name, t->nlen, at, seq, sink);
    size_t vl = ak_due_value(v, sizeof v, attempts, ty, tl, replay);
    ak_batch_put(batch(d, now), AK_CF_INDEX, k, kl, v, vl);
  }
  ak_key_delivery(dk, seq, sink);
  size_t rl = ak_delivery_row_ex(row, sizeof row, AK_DELIVERY_PENDING, attempts, at, ty, tl, replay);
  ak_batch_put(batch(d, now), AK_CF_DELIVERIES, dk, sizeof dk, row, rl);
}

/* Reschedule: the due key moves to `at`, the row records `attempts` (a row from the log
 * gets its row and due key here). false when nothing could be written: a row from the
 * log is then back on the log, unclaimed. */
static bool op_lane_reschedule(ak_dispatch_t *d, row_t *r, int64_t at, uint32_t attempts, int64_t now);
static void op_lane_clear(ak_dispatch_t *d, row_t *r, const char *dead_reason, uint32_t attempts, int64_t now);

static bool op_reschedule(ak_dispatch_t *d, row_t *r, int64_t at, uint32_t attempts, int64_t now) {
  if (r->lane) return op_lane_reschedule(d, r, at, attempts, now);
  if (!op_begin(d)) {
    if (r->from_log) log_unclaim(d, r->t, r->seq, r->sink);
    return false;
  }
  if (!r->from_log) op_delete_due(d, r, now);
  size_t tl;
  const char *ty = row_type(r, &tl);
  put_pending(d, r->t, r->seq, r->sink, at, attempts, ty, tl, r->has_replay ? r->replay_id : NULL, true, now);
  op_end(d);
  if (r->from_log) {
    r->from_log = false;
    log_settle(d, r->t, r->seq, r->sink, true, now);
  }
  return true;
}

static void op_clear(ak_dispatch_t *d, row_t *r, int64_t now) {
  if (r->lane) {
    op_lane_clear(d, r, NULL, 0, now);
    return;
  }
  if (r->from_log) { /* nothing in the store: the cursor passes it */
    r->from_log = false;
    log_settle(d, r->t, r->seq, r->sink, false, now);
    return;
  }
  if (!op_begin(d)) return;
  op_delete_due(d, r, now);
  uint8_t dk[AK_DELIVERY_KEY_LEN];
  ak_key_delivery(dk, r->seq, r->sink);
  ak_batch_delete(batch(d, now), AK_CF_DELIVERIES, dk, sizeof dk);
  op_end(d);
  reclaim_note(d, r->seq, r->env.id);
}

static bool op_dead(ak_dispatch_t *d, row_t *r, uint32_t attempts, const char *reason, int64_t now) {
  if (r->lane) {
    op_lane_clear(d, r, reason, attempts, now);
    return true;
  }
  if (!op_begin(d)) {
    if (r->from_log) log_unclaim(d, r->t, r->seq, r->sink);
    return false;
  }
  if (!r->from_log) op_delete_due(d, r, now);
  put_dead(d, r, attempts, reason, now);
  op_end(d);
  if (r->from_log) {
    r->from_log = false;
    log_settle(d, r->t, r->seq, r->sink, true, now);
  }
  return true;
}

/* Outcomes that never reached the store leave their rows' old due keys behind the
 * cursors: start every tenant's next scan from its first key (claimed rows are
 * skipped), so those rows are delivered again rather than forgotten. */
static void rescan_all(ak_dispatch_t *d, int64_t now) {
  d->ops_lost = false;
  size_t pos = 0;
  for (tenant_t *t; (t = ak_tmap_next(&d->tenants, &pos));) {
    t->cursor_len = 0;
    t->exc_due = now;
    t->next_due = now;
    ak_list_foreach(ln, &t->lanes) {
      lane_t *l = ak_list_entry(ln, lane_t, link);
      if (!l->busy) l->head_known = false;
    }
    tenant_place(d, t, now);
  }
}

/* ------------------------------------------------------------------ ordered lanes ---- */

/* A lane (docs/delivery.md, "Ordered sinks"): the deliveries of one {tenant, source, sink}
 * whose sink entry says `ordered: true`. Each is a row in the store ('o' prefix seq, with
 * its delivery row), taken off the log when the hook joins it; only the lowest seq, the
 * head, may be claimed, and only while no attempt of the lane runs. A retry rewrites the
 * head's due time, so the lane waits; other lanes do not. */

/* Lane row value v1: u8 version=1 | u64 due_at | due value (attempts, sink type, replay). */
static size_t lane_value(uint8_t *out, size_t cap, int64_t at, uint32_t attempts, const char *type, size_t tl,
                         const uint8_t *replay) {
  if (cap < 9) return 0;
  out[0] = 1;
  ak_put_u64(out + 1, (uint64_t)at);
  size_t n = ak_due_value(out + 9, cap - 9, attempts, type, tl, replay);
  return n ? 9 + n : 0;
}

static lane_t *lane_by_prefix(ak_dispatch_t *d, tenant_t *t, const uint8_t *pfx, size_t pl) {
  if (pl > AK_TMAP_KEY_MAX) return NULL;
  bool created;
  lane_t *l = ak_tmap_get(&d->lanes, (const char *)pfx, pl, &created);
  if (!l || !created) return l;
  l->t = t;
  l->sink = ak_get_u16(pfx + pl - 2);
  memcpy(l->pfx, pfx, pl);
  l->pl = pl;
  return l;
}

static void lane_note_due(tenant_t *t, int64_t at) {
  if (at < t->exc_due) t->exc_due = at;
  if (at < t->next_due) t->next_due = at;
}

static void lane_rows(lane_t *l, int64_t delta) {
  l->rows += delta;
  if (l->rows > 0 && !ak_list_linked(&l->link)) ak_list_insert_tail(&l->t->lanes, &l->link);
  else if (l->rows <= 0 && ak_list_linked(&l->link)) {
    l->rows = 0;
    ak_list_remove(&l->link);
  }
}

/* A log delivery of an ordered sink becomes a row of its lane (the open batch). false when
 * it cannot (no batch, a key too long): it stays on the log, unordered. */
static bool lane_push(ak_dispatch_t *d, tenant_t *t, const lset_t *ls, uint64_t seq, uint16_t sink, int64_t at) {
  uint8_t pfx[AK_LANE_KEY_MAX];
  size_t pl = ak_key_lane_prefix(pfx, t->name, t->nlen, ls->source, ls->source_len, sink);
  lane_t *l = lane_by_prefix(d, t, pfx, pl);
  if (!l || !op_begin(d)) return false;
  ak_put_u64(pfx + pl, seq);
  uint8_t v[9 + AK_DUE_VALUE_MAX];
  size_t vl = lane_value(v, sizeof v, at, 0, ls->types[sink], ls->tlens[sink], NULL);
  ak_batch_put(batch(d, at), AK_CF_INDEX, pfx, pl + 8, v, vl);
  put_pending(d, t, seq, sink, at, 0, ls->types[sink], ls->tlens[sink], NULL, false, at);
  op_end(d);
  lane_rows(l, +1);
  if (l->head_known && !l->busy && seq < l->head_seq) l->head_known = false; /* a commit landed late */
  count_unclaimed(d, t, 0, +1);
  lane_note_due(t, at);
  return true;
}

/* Read the lane's head from the store (the iterator of a scan, which flushed first). */
static void lane_seek(lane_t *l, ak_store_cursor_t *it) {
  ak_store_cursor_seek(it, l->pfx, l->pl);
  size_t kl, vl;
  const uint8_t *k = ak_store_cursor_valid(it) ? (const uint8_t *)ak_store_cursor_key(it, &kl) : NULL;
  const uint8_t *v = k ? (const uint8_t *)ak_store_cursor_value(it, &vl) : NULL;
  if (!k || kl != l->pl + 8 || memcmp(k, l->pfx, l->pl) != 0 || vl < 9 || v[0] != 1 ||
      vl - 9 > sizeof l->head_v) {
    lane_rows(l, -l->rows); /* none left (or damaged: logged by the claim) */
    return;
  }
  l->head_known = true;
  l->head_seq = ak_get_u64(k + l->pl);
  l->head_at = (int64_t)ak_get_u64(v + 1);
  l->head_vl = vl - 9;
  memcpy(l->head_v, v + 9, l->head_vl);
}

/* The head settled (delivered or dead): the next row is read at the next scan. */
static void lane_next(ak_dispatch_t *d, lane_t *l, int64_t now) {
  (void)d;
  l->busy = false;
  l->head_known = false;
  lane_rows(l, -1);
  if (l->rows > 0) lane_note_due(l->t, now);
}

static int lane_load_cb(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  ak_dispatch_t *d = ctx;
  if (kl < 1 + 1 + 1 + 2 + 8) return 0;
  size_t tl = (uint8_t)k[1];
  if (kl < 2 + tl + 1 || kl != 2 + tl + 1 + (uint8_t)k[2 + tl] + 2 + 8) return 0;
  tenant_t *t = tenant_get(d, k + 2, tl);
  lane_t *l = t ? lane_by_prefix(d, t, (const uint8_t *)k, kl - 8) : NULL;
  if (!l) return 1;
  ak_due_value_t dv;
  if (vl < 9 || ak_due_value_decode((const uint8_t *)v + 9, vl - 9, &dv) != 0) dv.attempts = 0;
  count_unclaimed(d, t, dv.attempts, +1);
  lane_rows(l, +1);
  if (l->rows == 1 && vl >= 9) lane_note_due(t, (int64_t)ak_get_u64((const uint8_t *)v + 1));
  return 0;
}

/* Which sinks of a set are ordered, by the source's current config (bound as a delivery
 * row is: same index and type, else the only sink of the type). */
static int bind_sink(const ak_source_cfg_t *s, uint16_t idx, const char *type, size_t tl);
static void lset_ordered(ak_dispatch_t *d, lset_t *ls) {
  ak_source_t *src = d->inst->sources ? ak_sources_get(d->inst->sources, ls->source, ls->source_len) : NULL;
  uint32_t m = 0;
  for (unsigned j = 0; src && j < ls->nsinks; j++) {
    int k = bind_sink(&src->cfg, (uint16_t)j, ls->types[j], ls->tlens[j]);
    if (k >= 0 && json_is_true(json_object_get(src->cfg.sinks[k].opts, "ordered"))) m |= 1u << j;
  }
  ak_source_release(src);
  ls->ordered = m;
}


/* A lane head's retry or park: its row gets the new due time and attempts; the lane waits
 * for it. false when nothing could be written (the row keeps its old time: read again). */
static bool op_lane_reschedule(ak_dispatch_t *d, row_t *r, int64_t at, uint32_t attempts, int64_t now) {
  lane_t *l = r->lane;
  r->lane = NULL;
  l->busy = false;
  if (!op_begin(d)) {
    l->head_known = false;
    lane_note_due(l->t, now);
    return true; /* the row is still in the store, counted there */
  }
  size_t tl;
  const char *ty = row_type(r, &tl);
  uint8_t k[AK_LANE_KEY_MAX], v[9 + AK_DUE_VALUE_MAX];
  memcpy(k, l->pfx, l->pl);
  ak_put_u64(k + l->pl, r->seq);
  size_t vl = lane_value(v, sizeof v, at, attempts, ty, tl, r->has_replay ? r->replay_id : NULL);
  ak_batch_put(batch(d, now), AK_CF_INDEX, k, l->pl + 8, v, vl);
  put_pending(d, l->t, r->seq, r->sink, at, attempts, ty, tl, r->has_replay ? r->replay_id : NULL, false, now);
  op_end(d);
  l->head_known = true;
  l->head_seq = r->seq;
  l->head_at = at;
  l->head_vl = vl - 9;
  memcpy(l->head_v, v + 9, l->head_vl);
  lane_note_due(l->t, at);
  return true;
}

/* A lane head delivered (dead_reason NULL) or dead-lettered: its row leaves the lane (a
 * dead one becomes a dead row and 'x' entry as any other), and the next row may go. */
static void op_lane_clear(ak_dispatch_t *d, row_t *r, const char *dead_reason, uint32_t attempts, int64_t now) {
  lane_t *l = r->lane;
  r->lane = NULL;
  if (!op_begin(d)) { /* the row stays: delivered (or dead-lettered) again later */
    l->busy = false;
    l->head_known = false;
    lane_note_due(l->t, now);
    return;
  }
  uint8_t k[AK_LANE_KEY_MAX], dk[AK_DELIVERY_KEY_LEN];
  memcpy(k, l->pfx, l->pl);
  ak_put_u64(k + l->pl, r->seq);
  ak_batch_delete(batch(d, now), AK_CF_INDEX, k, l->pl + 8);
  ak_key_delivery(dk, r->seq, r->sink);
  if (!dead_reason) {
    ak_batch_delete(batch(d, now), AK_CF_DELIVERIES, dk, sizeof dk);
  } else {
    put_dead(d, r, attempts, dead_reason, now);
  }
  op_end(d);
  lane_next(d, l, now);
  if (!dead_reason) reclaim_note(d, r->seq, r->env.id);
}

/* ------------------------------------------------------------------ cursors ---- */

/* A log delivery gets a row of its own, due now with the attempts it had, in the open
 * batch; the row stays claimed (its attempt, if running, settles it as an exception).
 * false when no batch could be made. */
static bool spill_row(ak_dispatch_t *d, row_t *r, int64_t now) {
  if (!op_begin(d)) return false;
  size_t tl;
  const char *ty = row_type(r, &tl);
  put_pending(d, r->t, r->seq, r->sink, now, r->attempts, ty, tl, r->has_replay ? r->replay_id : NULL, true, now);
  op_end(d);
  r->from_log = false;
  r->due_at = now;
  log_settle(d, r->t, r->seq, r->sink, true, now);
  ak_counter_add(d->c_spills, 1);
  return true;
}

/* The same for a delivery nobody claimed: a pending row due now, attempts 0. */
static bool spill_unclaimed(ak_dispatch_t *d, tenant_t *t, uint64_t seq, uint16_t sink, const lset_t *ls, int64_t now) {
  if (!op_begin(d)) return false;
  put_pending(d, t, seq, sink, now, 0, ls->types[sink], ls->tlens[sink], NULL, true, now);
  op_end(d);
  /* still pending, now as a row: the scan finds it there */
  log_settle(d, t, seq, sink, true, now);
  ak_counter_add(d->c_spills, 1);
  if (now < t->exc_due) t->exc_due = now;
  tenant_note_due(t, now);
  return true;
}

/* Deliveries settled behind an unsettled first entry would be delivered again after a
 * crash: past SPILL_MS (or SPILL_COUNT), the first entry's unsettled deliveries get rows
 * of their own, so that the cursor passes them. */
static void log_spill(ak_dispatch_t *d, tenant_t *t, int64_t now) {
  while (t->behind > 0 && t->lq_n) {
    lentry_t *h = lq_at(t, 0);
    uint64_t seq = h->seq;
    uint32_t open = h->open, unclaimed_bits = h->unclaimed_bits;
    const lset_t *ls = d->lsets[h->set];
    for (; open; open &= open - 1) {
      uint16_t b = (uint16_t)__builtin_ctz(open);
      row_t *r = umap_get(&d->claimed, row_id(seq, b));
      if (!r || !r->from_log || !spill_row(d, r, now)) return;
    }
    for (; unclaimed_bits; unclaimed_bits &= unclaimed_bits - 1)
      if (!spill_unclaimed(d, t, seq, (uint16_t)__builtin_ctz(unclaimed_bits), ls, now)) return;
  }
}

/* Puts the cursors that moved, and the log's low mark, into the open batch and writes
 * it. Every CURSOR_MS at most. */
static void log_persist(ak_dispatch_t *d, int64_t now) {
  bool force = d->behind_total >= SPILL_COUNT;
  if (d->nheld)
    ak_list_foreach_safe(n, nx, &d->lactive) {
      tenant_t *t = ak_list_entry(n, tenant_t, lactive_link);
      if (t->held_since && (force || now - t->held_since >= SPILL_MS)) log_spill(d, t, now);
    }
  d->last_persist_ms = now;
  d->settled_since_persist = 0;
  if (d->cursors_frozen) {
    d->ndirty = 0;
    return;
  }
  uint64_t low = d->safe;
  ak_list_foreach(n, &d->lactive) {
    uint64_t c = tenant_cursor(d, ak_list_entry(n, tenant_t, lactive_link));
    if (c < low) low = c;
  }
  d->low_stuck = low == d->dlow_written; /* a tenant's cursor holds it: no timer until something moves */
  if (!d->ndirty && low == d->dlow_written) return;
  if (!op_begin(d)) return;
  for (size_t i = 0; i < d->ndirty; i++) {
    tenant_t *t = d->dirty[i];
    t->dirty = false;
    uint64_t c = tenant_cursor(d, t);
    if (c == t->cursor_written) continue;
    char key[3 + 256];
    memcpy(key, AK_KEY_TENANT_CURSOR, 3);
    memcpy(key + 3, t->name, t->nlen);
    uint8_t v[8];
    ak_put_u64(v, c);
    ak_batch_put(batch(d, now), AK_CF_DEFAULT, key, 3 + t->nlen, v, 8);
    t->cursor_written = c;
  }
  d->ndirty = 0;
  if (low != d->dlow_written) {
    uint8_t v[8];
    ak_put_u64(v, low);
    ak_batch_put(batch(d, now), AK_CF_DEFAULT, AK_KEY_DISPATCH_LOW, strlen(AK_KEY_DISPATCH_LOW), v, 8);
    d->dlow_batch = low;
  }
  op_end(d);
  flush(d);
}

typedef struct {
  uint64_t to;
  uint64_t *keep;
  size_t nkeep, capkeep;
  uint64_t *claims;              /* seqs with a claim ref ('c') in the range */
  size_t nclaims, capclaims;
  struct { uint64_t seq; uint8_t id[16]; } *ids;
  size_t nids, capids;
  bool oom;
} rscan_t;

static int rscan_rows(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  (void)v;
  (void)vl;
  rscan_t *s = ctx;
  if (kl != AK_DELIVERY_KEY_LEN) return 0;
  uint64_t seq = ak_get_u64((const uint8_t *)k);
  if (seq >= s->to) return 1;
  if (s->nkeep && s->keep[s->nkeep - 1] == seq) return 0;
  if (ak_buf_grow(&s->keep, &s->capkeep, s->nkeep + 1, sizeof *s->keep) != 0) {
    s->oom = true;
    return 1;
  }
  s->keep[s->nkeep++] = seq;
  return 0;
}

static int rscan_ids(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  rscan_t *s = ctx;
  if (kl != AK_GROUP_KEY_LEN || vl != 16) return 0;
  uint64_t seq = ak_get_u64((const uint8_t *)k + 1);
  if (seq >= s->to) return 1;
  if (ak_buf_grow(&s->ids, &s->capids, s->nids + 1, sizeof *s->ids) != 0) {
    s->oom = true;
    return 1;
  }
  s->ids[s->nids].seq = seq;
  memcpy(s->ids[s->nids++].id, v, 16);
  return 0;
}

static int rscan_claims(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  (void)v;
  (void)vl;
  rscan_t *s = ctx;
  if (kl != AK_GROUP_KEY_LEN) return 0;
  uint64_t seq = ak_get_u64((const uint8_t *)k + 1);
  if (seq >= s->to) return 1;
  if (ak_buf_grow(&s->claims, &s->capclaims, s->nclaims + 1, sizeof *s->claims) != 0) {
    s->oom = true;
    return 1;
  }
  s->claims[s->nclaims++] = seq;
  return 0;
}

typedef struct {
  ak_batch_t *wb;
  uint64_t from, to, start, deleted;
  const rscan_t *rows;
  bool bad;
} gscan_t;

static bool has_seq(const uint64_t *v, size_t n, uint64_t seq);

static int rscan_group_start(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  (void)v;
  (void)vl;
  if (kl == AK_GROUP_KEY_LEN) ((gscan_t *)ctx)->start = ak_get_u64((const uint8_t *)k + 1);
  return 1;
}

/* Each marker of the range: its hooks in [from, to) without a row are deleted; a marker
 * wholly below `to` goes with them. Only seqs a marker names are deleted (a failed
 * commit's seqs never were hooks). */
static int rscan_groups(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  gscan_t *g = ctx;
  ak_marker_t m;
  if (kl != AK_GROUP_KEY_LEN || ak_marker_decode((const uint8_t *)v, vl, &m) != 0) {
    g->bad = true;
    return 1;
  }
  uint64_t first = ak_get_u64((const uint8_t *)k + 1);
  if (first >= g->to) return 1;
  uint64_t lo = first > g->from ? first : g->from, hi = first + m.count < g->to ? first + m.count : g->to;
  for (uint64_t seq = lo; seq < hi; seq++) {
    if (has_seq(g->rows->keep, g->rows->nkeep, seq)) continue;
    uint8_t hk[AK_HOOK_KEY_LEN];
    ak_key_hook(hk, seq);
    ak_batch_delete(g->wb, AK_CF_HOOKS, hk, sizeof hk);
    g->deleted++;
  }
  if (first + m.count <= g->to) ak_batch_delete(g->wb, AK_CF_INDEX, k, kl);
  return 0;
}

static bool has_seq(const uint64_t *v, size_t n, uint64_t seq) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (v[mid] < seq) lo = mid + 1;
    else hi = mid;
  }
  return lo < n && v[lo] == seq;
}

/* Hooks below the reclaim limit (the log's low mark, and the compactor's cursor while the
 * storage role runs) whose deliveries all settled without a row of their own are deleted,
 * RECLAIM_CHUNK at a time, with their markers and unsealed id keys. */
static void log_reclaim(ak_dispatch_t *d) {
  uint64_t from = d->reclaimed_to, to = reclaim_limit(d);
  if (to <= from) return;
  if (to - from > RECLAIM_CHUNK) to = from + RECLAIM_CHUNK;
  ak_store_t *st = d->inst->store;
  rscan_t s = {.to = to};
  uint8_t fk[AK_GROUP_KEY_LEN];
  ak_put_u64(fk, from);
  const char j = AK_IDX_UNSEALED;
  int rc = ak_store_scan_from(st, AK_CF_DELIVERIES, NULL, 0, fk, 8, false, rscan_rows, &s);
  ak_key_unsealed(fk, from);
  if (rc == 0) rc = ak_store_scan_from(st, AK_CF_INDEX, &j, 1, fk, sizeof fk, false, rscan_ids, &s);
  const char c = AK_IDX_CLAIM;
  claim_key(fk, from);
  if (rc == 0) rc = ak_store_scan_from(st, AK_CF_INDEX, &c, 1, fk, sizeof fk, false, rscan_claims, &s);
  ak_batch_t *wb = NULL;
  if (rc != 0 || s.oom || ak_store_pin(st) != 0) goto out;
  if (!(wb = ak_batch_new(st))) {
    ak_store_unpin(st);
    goto out;
  }
  for (size_t i = 0; i < s.nids; i++) {
    if (has_seq(s.keep, s.nkeep, s.ids[i].seq)) continue;
    uint8_t ik[AK_ID_KEY_LEN], jk[AK_GROUP_KEY_LEN];
    ak_key_id(ik, s.ids[i].id);
    ak_key_unsealed(jk, s.ids[i].seq);
    ak_batch_delete(wb, AK_CF_INDEX, ik, sizeof ik);
    ak_batch_delete(wb, AK_CF_INDEX, jk, sizeof jk);
  }
  for (size_t i = 0; i < s.nclaims; i++) {
    if (has_seq(s.keep, s.nkeep, s.claims[i])) continue;
    uint8_t ck[AK_GROUP_KEY_LEN];
    claim_key(ck, s.claims[i]);
    ak_batch_delete(wb, AK_CF_INDEX, ck, sizeof ck);
  }
  ak_store_unpin(st);
  gscan_t g = {.wb = wb, .from = from, .to = to, .start = from, .rows = &s};
  const char gp = AK_IDX_GROUP;
  uint8_t gk[AK_GROUP_KEY_LEN];
  ak_key_group(gk, from);
  if (ak_store_scan_from(st, AK_CF_INDEX, &gp, 1, gk, sizeof gk, true, rscan_group_start, &g) != 0) goto out;
  ak_key_group(gk, g.start);
  if (ak_store_scan_from(st, AK_CF_INDEX, &gp, 1, gk, sizeof gk, false, rscan_groups, &g) != 0 || g.bad) goto out;
  uint8_t v[8];
  ak_put_u64(v, to);
  if (ak_store_pin(st) != 0) goto out;
  ak_batch_put(wb, AK_CF_DEFAULT, AK_KEY_RECLAIMED, strlen(AK_KEY_RECLAIMED), v, 8);
  count_reclaimed(d, wb, g.deleted);
  ak_store_unpin(st);
  ak_wf_class_t cls;
  char *err = NULL;
  if (ak_store_write(st, wb, false, &cls, &err) != 0) {
    ak_counter_add(d->c_reclaim_fail, 1);
    free(err);
  } else {
    d->reclaimed_to = to;
    reclaimed(d, g.deleted);
  }
out:
  ak_batch_free(wb);
  free(s.keep);
  free(s.ids);
  free(s.claims);
}

/* ------------------------------------------------------------------ rows ---- */

/* Last: the version may be freed here, with its sinks (a timed-out attempt's request
 * then comes back through on_sink_done as a zombie). */
static void drop_source(row_t *r) {
  if (!r->src) return;
  atomic_fetch_sub(r->src->inflight, 1);
  ak_source_t *s = r->src;
  r->src = NULL;
  r->ds = NULL;
  ak_source_release(s);
}

static void row_release(ak_dispatch_t *d, row_t *r) {
  tenant_t *t = r->t;
  t->inflight--;
  t->inflight_bytes -= (int64_t)r->rec_len;
  d->inflight--;
  d->inflight_bytes -= (int64_t)r->rec_len;
  umap_del(&d->claimed, row_id(r->seq, r->sink));
  ak_envelope_clear(&r->env);
  free(r->rec);
  r->rec = NULL;
  drop_source(r);
}

static void count_unclaimed(ak_dispatch_t *d, tenant_t *t, uint32_t attempts, int64_t delta) {
  if (attempts == 0) {
    t->pending += delta;
    d->pending += delta;
  } else {
    t->scheduled += delta;
    d->scheduled += delta;
  }
}

/* The row goes back to the store's due set at `at` (retry or park). */
static void row_requeue(ak_dispatch_t *d, row_t *r, int64_t at, uint32_t attempts, int64_t now) {
  bool was_log = r->from_log;
  bool ok = op_reschedule(d, r, at, attempts, now);
  tenant_t *t = r->t;
  if (ok || !was_log) count_unclaimed(d, t, attempts, +1); /* else back on the log, counted there */
  row_release(d, r);
  tenant_note_due(t, at);
  tenant_place(d, t, now);
}

static void format_reason(char *out, size_t len, const char *type, const char *why) {
  snprintf(out, len, "{sink, %s, %s}", type, why && *why ? why : "unknown");
}

static void row_dead(ak_dispatch_t *d, row_t *r, uint32_t attempts, const char *why, int64_t now) {
  char reason[256];
  format_reason(reason, sizeof reason, r->type_len ? r->type : "-", why);
  bool was_log = r->from_log;
  if (op_dead(d, r, attempts, reason, now) || !was_log) d->dead++;
  if (r->key && r->ds) {
    sink_inst_t *si = &r->ds->v[r->key->sink];
    ak_counter_add(si->del_dlq, 1);
    ak_counter_add(si->odel_dlq, 1);
    ak_counter_add(si->dead_lettered, 1);
    if (!r->has_replay) ak_histogram_observe(si->lat_dlq, (double)(now - r->env.received_at_ms) / 1000.0);
  }
  if (r->has_replay && d->settled) d->settled(d->settled_ctx, r->replay_id, false);
  char id[AK_UUID_STR_LEN];
  ak_uuid_format(r->env.id, id);
  ak_log(AK_LOG_WARNING, "dispatch", "dead-lettered", "id=%s seq=%" PRIu64 " sink=%u attempts=%u reason=\"%s\"", id,
         r->seq, r->sink, attempts, reason);
  tenant_t *t = r->t;
  row_release(d, r);
  tenant_place(d, t, now);
}

/* Settle a finished attempt: outcome -> retry decision -> store op. */
static void settle(ak_dispatch_t *d, row_t *r, const ak_sink_outcome_t *o, bool timeout, int64_t now) {
  AK_ASSERT_OWNER(&d->owner);
  skey_t *k = r->key;
  tenant_t *t = r->t;
  sink_inst_t *si = &r->ds->v[k->sink];
  double dur = (double)(ak_mono_ns() - r->start_ns) / 1e9;
  if (timeout) dur = (double)d->cfg->attempt_timeout_ms / 1000.0;
  r->running = false;
  ak_list_remove(&r->run_link);
  k->running--;
  t->running--;
  d->running--;
  if (tenant_closed(d, t)) { /* being erased: whatever the sink said, no retry or dead row comes back */
    op_clear(d, r, now);
    if (r->has_replay && d->settled) d->settled(d->settled_ctx, r->replay_id, false);
    row_release(d, r);
    tenant_place(d, t, now);
    return;
  }
  if (o->result == AK_SINK_OK) {
    ak_counter_add(si->att_ok, 1);
    ak_histogram_observe(si->dur_ok, dur);
  } else if (timeout) {
    ak_counter_add(si->att_timeout, 1);
    ak_histogram_observe(si->dur_timeout, dur);
  } else {
    ak_counter_add(si->att_err, 1);
    ak_histogram_observe(si->dur_err, dur);
  }
  if (k->breaker) ak_breaker_record(k->breaker, now, o->result);
  uint32_t n = r->attempts + 1;
  /* jitter needs spread, not secrecy: a RAND_bytes call per outcome was 8% of this
   * thread's CPU */
  uint64_t rnd = (d->jitter_state += 0x9E3779B97F4A7C15ULL);
  rnd = (rnd ^ (rnd >> 30)) * 0xBF58476D1CE4E5B9ULL;
  rnd = (rnd ^ (rnd >> 27)) * 0x94D049BB133111EBULL;
  rnd ^= rnd >> 31;
  int64_t delay = 0;
  const char *why = NULL;
  switch (ak_retry_decide(&d->retry, (int)n, o->result, o->retry_after_ms, rnd, &delay, &why)) {
    case AK_RETRY_DONE:
      op_clear(d, r, now);
      ak_counter_add(si->del_ok, 1);
      ak_counter_add(si->odel_ok, 1);
      if (!r->has_replay) ak_histogram_observe(si->lat_ok, (double)(now - r->env.received_at_ms) / 1000.0);
      if (r->has_replay && d->settled) d->settled(d->settled_ctx, r->replay_id, true);
      row_release(d, r);
      tenant_place(d, t, now);
      break;
    case AK_RETRY_AGAIN:
      row_requeue(d, r, now + delay, n, now);
      break;
    case AK_RETRY_DEAD: {
      /* the sink's own words first; a give-up after the last attempt says so */
      char why2[200];
      if (strcmp(why, "max_attempts") == 0)
        snprintf(why2, sizeof why2, "{max_attempts, %s}", o->reason[0] ? o->reason : "failed");
      else
        snprintf(why2, sizeof why2, "%s", o->reason[0] ? o->reason : why);
      row_dead(d, r, n, why2, now);
      break;
    }
  }
}

/* ------------------------------------------------------------------ claiming ---- */

/* The sink a row was bound to at ack: same index and type, else the only sink of that
 * type, else none (-1). */
static int bind_sink(const ak_source_cfg_t *s, uint16_t idx, const char *type, size_t tl) {
  if (idx < s->nsinks && strlen(s->sinks[idx].type) == tl && memcmp(s->sinks[idx].type, type, tl) == 0) return idx;
  int found = -1;
  for (size_t i = 0; i < s->nsinks; i++)
    if (strlen(s->sinks[i].type) == tl && memcmp(s->sinks[i].type, type, tl) == 0) {
      if (found >= 0) return -1;
      found = (int)i;
    }
  return found;
}

static skey_t *key_get(ak_dispatch_t *d, tenant_t *t, uint64_t src, size_t sink) {
  /* tenants are never freed, so the pointer identifies one; mix it into the key */
  uint64_t id = mix64((uint64_t)(uintptr_t)t) ^ mix64(src << 16 | sink);
  for (;; id++) {
    skey_t *k = umap_get(&d->keys, id);
    if (!k) break;
    if (k->t == t && k->src == src && k->sink == sink) return k;
  }
  skey_t *k = calloc(1, sizeof *k);
  if (!k) return NULL;
  k->t = t;
  k->src = src;
  k->sink = sink;
  if (d->bcfg.failures > 0) k->breaker = ak_breaker_new(&d->bcfg);
  if (umap_put(&d->keys, id, k) != 0) {
    ak_breaker_free(k->breaker);
    free(k);
    return NULL;
  }
  return k;
}

/* Park a row whose key's breaker is open: due again when it may close, attempts kept. */
static void park(ak_dispatch_t *d, row_t *r, int64_t now) {
  sink_inst_t *si = &r->ds->v[r->key->sink];
  ak_counter_add(si->parked, 1);
  int64_t at = ak_breaker_retry_at(r->key->breaker, now);
  if (at <= now) at = now + 1;
  row_requeue(d, r, at, r->attempts, now);
}

typedef enum { CLAIM_OK, CLAIM_SKIP, CLAIM_STOP } claim_rc_t;

/* Claim one due row the iterator points at. */
/* A due row read by claim_tenant's first pass, and its hook as the second pass read it. */
typedef struct cand {
  uint8_t k[AK_LANE_KEY_MAX];     /* a due key, or a lane row's key (the longer) */
  size_t kl;
  uint8_t v[AK_DUE_VALUE_MAX];
  size_t vl;
  int64_t at;
  uint64_t seq;
  uint16_t sink;
  bool from_log;                 /* a delivery of the hook log (k, v unused) */
  lane_t *lane;                  /* the head of this lane (k: its row key, v: its due value) */
  uint32_t set;                  /* from_log: its lset */
  uint8_t hk[AK_HOOK_KEY_LEN];
} cand_t;

/* Claims one due row whose hook record has been read: grc as ak_store_get's, rec (owned
 * from here on, freed unless the row keeps it) and rl. */
static claim_rc_t claim_row(ak_dispatch_t *d, tenant_t *t, const cand_t *c, int grc, char *rec, size_t rl,
                            int64_t now) {
  /* claim_tenant's first pass left out the rows already claimed */
  const uint8_t *k = c->k;
  size_t kl = c->kl;
  int64_t at = c->at;
  uint64_t seq = c->seq;
  uint16_t sink = c->sink;
  int rc = grc;
  if (rc < 0) {
    free(rec);
    return CLAIM_STOP;
  }
  ak_due_value_t dv;
  if (c->from_log) {
    const lset_t *ls = d->lsets[c->set];
    dv = (ak_due_value_t){.attempts = 0, .sink_type = ls->types[sink], .sink_type_len = ls->tlens[sink]};
  } else if (ak_due_value_decode(c->v, c->vl, &dv) != 0) {
    ak_log(AK_LOG_ERROR, "dispatch", "damaged due entry skipped", "seq=%" PRIu64 " sink=%u", seq, sink);
    free(rec);
    return CLAIM_SKIP;
  }
  /* windows: always let a tenant hold one row, however large, or it could never move; past
   * its bytes window only alone (tenant_has_room) */
  bool t_fits = t->inflight_bytes + (int64_t)rl <= d->cfg->tenants.max_inflight_bytes ||
                tenant_lone_bytes(d, t, (int64_t)rl);
  if (t->inflight > 0 && (!t_fits || d->inflight_bytes + (int64_t)rl > d->cfg->max_inflight_bytes)) {
    if (!t_fits) t->need_bytes = (int64_t)rl;
    else d->need_bytes = (int64_t)rl;
    free(rec);
    return CLAIM_STOP;
  }
  t->need_bytes = 0;
  d->need_bytes = 0;
  row_t *r = calloc(1, sizeof *r);
  if (!r) {
    free(rec);
    return CLAIM_STOP;
  }
  r->t = t;
  r->seq = seq;
  r->sink = sink;
  r->due_at = at;
  r->attempts = dv.attempts;
  r->has_replay = dv.has_replay;
  memcpy(r->replay_id, dv.replay_id, 16);
  r->type_len = dv.sink_type_len < sizeof r->type - 1 ? dv.sink_type_len : sizeof r->type - 1;
  memcpy(r->type, dv.sink_type, r->type_len);
  r->type[r->type_len] = 0;
  r->rec = (uint8_t *)rec;
  r->rec_len = rc == 0 ? rl : 0;
  if (umap_put(&d->claimed, row_id(seq, sink), r) != 0) {
    free(rec);
    free(r);
    return CLAIM_STOP;
  }
  count_unclaimed(d, t, dv.attempts, -1);
  t->inflight++;
  t->inflight_bytes += (int64_t)r->rec_len;
  d->inflight++;
  d->inflight_bytes += (int64_t)r->rec_len;
  if (c->from_log) {
    r->from_log = true;
    log_claimed(t, seq, sink);
  } else if (c->lane) {
    r->lane = c->lane;
    c->lane->busy = true;
  } else {
    memcpy(t->cursor, k, kl);
    t->cursor_len = kl;
  }

  if (tenant_closed(d, t)) { /* being erased: settled undelivered, no row of its own left */
    if (rc == 0 && ak_envelope_decode(r->rec, r->rec_len, &r->env) != 0) memset(&r->env, 0, sizeof r->env);
    op_clear(d, r, now);
    if (r->has_replay && d->settled) d->settled(d->settled_ctx, r->replay_id, false);
    row_release(d, r);
    tenant_place(d, t, now);
    free(r);
    return CLAIM_OK;
  }
  const char *why = NULL;
  int sk = -1;
  ak_source_t *src = NULL;
  if (rc == 1) why = "hook_missing";
  else if (ak_envelope_decode(r->rec, r->rec_len, &r->env) != 0) why = "undecodable hook record";
  /* gone, or re-created under the name after this hook was received: not its source */
  else if (!(src = ak_sources_get(d->inst->sources, r->env.source, r->env.source_len)) ||
           r->env.received_at_ms < src->born_ms || !src->ext[AK_SOURCE_EXT_DISPATCH])
    why = "source_gone";
  else if ((sk = bind_sink(&src->cfg, sink, dv.sink_type, dv.sink_type_len)) < 0) why = "sink_gone";
  if (src && !why) {
    r->src = src;
    r->ds = src->ext[AK_SOURCE_EXT_DISPATCH];
    atomic_fetch_add(src->inflight, 1);
  } else {
    ak_source_release(src);
  }
  if (why) {
    row_dead(d, r, dv.attempts, why, now);
    free(r);
    return CLAIM_OK;
  }
  r->key = key_get(d, t, r->src->uid, (size_t)sk);
  if (r->key && !r->key->label[0]) snprintf(r->key->label, sizeof r->key->label, "%s", r->ds->v[sk].label);
  if (!r->key) {
    row_requeue(d, r, now + 1000, dv.attempts, now);
    free(r);
    return CLAIM_STOP;
  }
  if (r->key->breaker && ak_breaker_state(r->key->breaker) == AK_BREAKER_OPEN &&
      now < ak_breaker_open_until(r->key->breaker)) {
    park(d, r, now);
    free(r);
    return CLAIM_OK;
  }
  key_push(d, r->key, r);
  return CLAIM_OK;
}

/* Claim up to `want` rows of tenant t: its exception rows due now first (the due index),
 * then its deliveries from the hook log. Returns rows claimed; updates t's due times.
 * First the candidates are gathered (key and value copied: the iterator moves on), then
 * their hooks are read in one batched read (neighbouring seqs share SST blocks: half the
 * cost of a read per row), then the rows are claimed in order, each within the windows as
 * they stand after the one before. */
static size_t claim_tenant(ak_dispatch_t *d, ak_store_cursor_t *it, tenant_t *t, size_t want, int64_t now,
                           bool *store_err) {
  uint8_t pfx[AK_DUE_KEY_MAX];
  size_t pl = ak_key_due_prefix(pfx, t->name, t->nlen);
  /* a bigger share is claimed over the scan's further rounds */
  if (want > CLAIM_CHUNK) want = CLAIM_CHUNK;
  if (ak_buf_grow(&d->cand, &d->capcand, want, sizeof *d->cand) != 0) {
    *store_err = true;
    return 0;
  }
  int64_t stop_at = t->exc_due; /* the first exception row not taken by this pass */
  size_t n = 0;
  if (t->exc_due <= now) {
    stop_at = INT64_MAX;
    if (t->cursor_len) ak_store_cursor_seek(it, t->cursor, t->cursor_len);
    else ak_store_cursor_seek(it, pfx, pl);
    for (; ak_store_cursor_valid(it); ak_store_cursor_next(it)) {
      size_t kl, vl;
      const uint8_t *k = (const uint8_t *)ak_store_cursor_key(it, &kl);
      if (kl < pl || memcmp(k, pfx, pl) != 0) break;
      int64_t at;
      uint64_t seq;
      uint16_t sink;
      if (ak_key_due_parse(k, kl, NULL, NULL, &at, &seq, &sink) != 0) continue;
      if (at > now || n >= want || !tenant_has_room(d, t) || !global_has_room(d)) {
        stop_at = at;
        break;
      }
      if (umap_get(&d->claimed, row_id(seq, sink))) continue;
      const char *v = ak_store_cursor_value(it, &vl);
      if (kl > AK_DUE_KEY_MAX || vl > AK_DUE_VALUE_MAX) {
        ak_log(AK_LOG_ERROR, "dispatch", "damaged due entry skipped", "seq=%" PRIu64 " sink=%u", seq, sink);
        continue;
      }
      cand_t *c = &d->cand[n++];
      memcpy(c->k, k, kl);
      c->kl = kl;
      memcpy(c->v, v, vl);
      c->vl = vl;
      c->at = at;
      c->seq = seq;
      c->sink = sink;
      c->from_log = false;
      c->lane = NULL;
      ak_key_hook(c->hk, seq);
    }
  }
  /* the heads of its ordered lanes that are due and not running */
  ak_list_foreach_safe(ln, lnx, &t->lanes) {
    lane_t *l = ak_list_entry(ln, lane_t, link);
    if (l->busy) continue;
    if (!l->head_known) lane_seek(l, it);
    if (!l->head_known) continue;
    if (l->head_at > now || n >= want) {
      if (l->head_at < stop_at) stop_at = l->head_at > now ? l->head_at : now;
      continue;
    }
    cand_t *c = &d->cand[n++];
    c->kl = l->pl + 8;
    memcpy(c->k, l->pfx, l->pl);
    ak_put_u64(c->k + l->pl, l->head_seq);
    memcpy(c->v, l->head_v, l->head_vl);
    c->vl = l->head_vl;
    c->at = l->head_at;
    c->seq = l->head_seq;
    c->sink = l->sink;
    c->from_log = false;
    c->lane = l;
    ak_key_hook(c->hk, l->head_seq);
  }
  /* the log: entries in seq order, each delivery not claimed yet */
  (void)log_due(t);
  for (size_t i = t->lq_scan; i < t->lq_n && n < want; i++) {
    const lentry_t *e = lq_at(t, i);
    for (uint32_t m = e->unclaimed_bits; m && n < want; m &= m - 1) {
      cand_t *c = &d->cand[n++];
      c->kl = c->vl = 0;
      c->at = e->at_ms;
      c->seq = e->seq;
      c->sink = (uint16_t)__builtin_ctz(m);
      c->from_log = true;
      c->lane = NULL;
      c->set = e->set;
      ak_key_hook(c->hk, e->seq);
    }
  }
  t->exc_due = INT64_MAX;
  t->next_due = INT64_MAX;
  if (!n) {
    t->exc_due = stop_at;
    tenant_due_update(t);
    return 0;
  }

  const char *keys[CLAIM_CHUNK];
  size_t klens[CLAIM_CHUNK], rls[CLAIM_CHUNK];
  char *recs[CLAIM_CHUNK];
  int rcs[CLAIM_CHUNK];
  for (size_t i = 0; i < n; i++) {
    keys[i] = (const char *)d->cand[i].hk;
    klens[i] = sizeof d->cand[i].hk;
  }
  /* scan() holds the store pinned */
  ak_store_multi_get_pinned(d->inst->store, AK_CF_HOOKS, n, keys, klens, recs, rls, rcs);

  size_t got = 0, i = 0;
  for (; i < n; i++) {
    const cand_t *c = &d->cand[i];
    if (!tenant_has_room(d, t) || !global_has_room(d)) break;
    claim_rc_t rc = claim_row(d, t, c, rcs[i], recs[i], rls[i], now);
    recs[i] = NULL;
    if (rc == CLAIM_STOP) {
      *store_err = true;
      if (!c->from_log && c->at < stop_at) stop_at = c->at; /* still due; a log row stays unclaimed */
      i++;
      break;
    }
    if (rc == CLAIM_OK) got++;
  }
  /* the exception rows this pass did not take are due again; a row parked meanwhile may
   * already have noted an earlier due time, which stands (tenant_note_due) */
  for (size_t j = i; j < n; j++)
    if (!d->cand[j].from_log && d->cand[j].at < stop_at) stop_at = d->cand[j].at;
  if (stop_at < t->exc_due) t->exc_due = stop_at;
  tenant_due_update(t);
  for (; i < n; i++) free(recs[i]);
  return got;
}

/* One scheduling pass: deficit round-robin over the ready tenants. Each gets an equal
 * share of the page; what a tenant leaves goes to the others; the tenants the page did
 * not reach stay at the head of the ring and go first next time. */
static void scan(ak_dispatch_t *d, int64_t now) {
  AK_ASSERT_OWNER(&d->owner);
  if (ak_list_empty(&d->ready) || !global_has_room(d)) return;
  if (ak_store_pin(d->inst->store) != 0) return;
  ak_store_cursor_t *it = ak_store_cursor_new_pinned(d->inst->store, AK_CF_INDEX, false);
  if (!it) {
    ak_store_unpin(d->inst->store);
    return;
  }
  int64_t room = d->cfg->batch;
  int64_t gl = d->cfg->max_inflight - d->inflight;
  if (gl < room) room = gl;
  bool store_err = false;
  while (room > 0 && !ak_list_empty(&d->ready) && !store_err && global_has_room(d)) {
    size_t n = d->nready;
    size_t quantum = (size_t)((room + (int64_t)n - 1) / (int64_t)n);
    size_t visited = 0, progress = 0;
    while (visited < n && room > 0 && !ak_list_empty(&d->ready) && !store_err) {
      tenant_t *t = ak_list_entry(ak_list_first(&d->ready), tenant_t, ready_link);
      ak_list_rotate_after(&d->ready, &t->ready_link); /* served tenants rotate behind the unserved ones */
      size_t want = quantum < (size_t)room ? quantum : (size_t)room;
      int64_t trow = tenant_cap_inflight(d, t) - t->inflight;
      if ((int64_t)want > trow) want = trow > 0 ? (size_t)trow : 0;
      size_t got = want ? claim_tenant(d, it, t, want, now, &store_err) : 0;
      room -= (int64_t)got;
      progress += got;
      visited++;
      tenant_place(d, t, now);
    }
    if (!progress) break;
  }
  ak_store_cursor_free(it);
  ak_store_unpin(d->inst->store);
}

/* ------------------------------------------------------------------ attempts ---- */



/* The sink's callback (any thread): ctx is the row (alive until its outcome is taken:
 * a timed-out row waits as a zombie). Outcomes are pushed without a lock; only the push
 * that finds the stack empty takes mu to wake the dispatcher, which looks at the stack
 * under mu before it sleeps, so no wake-up is lost. */
static void on_sink_done(void *ctx, const ak_sink_outcome_t *o) {
  row_t *r = ctx;
  ak_dispatch_t *d = r->d;
  r->out = *o;
  row_t *old = atomic_load(&d->ostack);
  do {
    r->onext = old;
  } while (!atomic_compare_exchange_weak(&d->ostack, &old, r));
  if (old) return;
  pthread_mutex_lock(&d->mu);
  pthread_cond_signal(&d->cv);
  pthread_mutex_unlock(&d->mu);
}

/* The attempt's call into its sink (the row is counted running). A hook with a provider
 * event key is the same event to every sink and on every attempt (ak_sink_attempt_keys). */
static void deliver_row(row_t *r) {
  sink_inst_t *si = &r->ds->v[r->key->sink];
  char id[AK_UUID_STR_LEN], rid[AK_UUID_STR_LEN];
  if (r->has_replay) ak_uuid_format(r->replay_id, rid);
  ak_sink_attempt_t att = {
    .attempt = r->attempts + 1,
    .replay_id = r->has_replay ? rid : NULL,
    .source = &r->src->cfg,
    .claim_ref = r->claim_ref[0] ? r->claim_ref : NULL,
    .body_sha256 = r->claim_sha[0] ? r->claim_sha : NULL,
  };
  ak_sink_attempt_keys(&att, &r->env, id);
  si->vt->deliver(si->self, &att, r, on_sink_done);
  ak_sink_attempt_keys_free(&att, id);
}

/* ---- claims (dispatch/checkin.h): a body above a sink's inline_max_bytes goes by a claim
 * ref, checked in once per hook and kept in the store ('c' seq) for every sink and retry */

/* The stored ref of r's hook into r, if there is one. */
static bool claim_load(ak_dispatch_t *d, row_t *r) {
  uint8_t k[AK_GROUP_KEY_LEN];
  claim_key(k, r->seq);
  char *v = NULL;
  size_t vl = 0;
  bool ok = false;
  if (ak_store_get(d->inst->store, AK_CF_INDEX, k, sizeof k, &v, &vl) == 0 && vl >= 2 && v[0] == 1) {
    size_t rl = (uint8_t)v[1];
    if (rl && rl < sizeof r->claim_ref && vl == 2 + rl + 64) {
      memcpy(r->claim_ref, v + 2, rl);
      r->claim_ref[rl] = '\0';
      memcpy(r->claim_sha, v + 2 + rl, 64);
      r->claim_sha[64] = '\0';
      ok = true;
    }
  }
  free(v);
  return ok;
}

static void on_checkin(void *ctx, ak_checkin_req_t *req) {
  ak_dispatch_t *d = ctx;
  ak_checkin_req_t *old = atomic_load(&d->cstack);
  do {
    req->next = old;
  } while (!atomic_compare_exchange_weak(&d->cstack, &old, req));
  if (old) return;
  pthread_mutex_lock(&d->mu);
  pthread_cond_signal(&d->cv);
  pthread_mutex_unlock(&d->mu);
}

/* r needs a claim: its hook's stored one, or a check-in (rows of the same hook wait for
 * the first one's). False when r waits. */
static bool claim_ready(ak_dispatch_t *d, row_t *r) {
  if (r->claim_ref[0] || claim_load(d, r)) return true;
  row_t *first = umap_get(&d->cwait, r->seq);
  if (first) {
    r->cnext = first->cnext;
    first->cnext = r;
    return false;
  }
  ak_checkin_req_t *req = calloc(1, sizeof *req);
  uint8_t *copy = req ? malloc(r->rec_len ? r->rec_len : 1) : NULL;
  if (!copy || umap_put(&d->cwait, r->seq, r) != 0) {
    free(req);
    free(copy);
    ak_sink_outcome_t o = {.result = AK_SINK_RETRY};
    snprintf(o.reason, sizeof o.reason, "claim_check: out of memory");
    on_sink_done(r, &o);
    return false;
  }
  /* the row may time out (and its record go) before the check-in answers: the request
   * carries its own copy */
  memcpy(copy, r->rec, r->rec_len);
  const uint8_t *base = r->rec;
  req->seq = r->seq;
  req->tenant = r->env.tenant ? (const char *)copy + ((const uint8_t *)r->env.tenant - base) : NULL;
  req->tenant_len = r->env.tenant_len;
  req->body = r->env.body_len ? copy + (r->env.body - base) : copy;
  req->len = r->env.body_len;
  memcpy(req->hook_id, r->env.id, 16);
  req->content_type =
      r->env.content_type ? (const char *)copy + ((const uint8_t *)r->env.content_type - base) : NULL;
  req->content_type_len = r->env.content_type_len;
  req->received_at_ms = r->env.received_at_ms;
  req->user = copy;
  r->cnext = NULL;
  ak_checkin_submit(d->checkin, req);
  return false;
}

/* Answered check-ins: the ref goes into the store with the outcomes, and every row that
 * waited for it goes on to its sink (or fails its attempt, retried as any failure). */
static void apply_checkins(ak_dispatch_t *d, int64_t now) {
  ak_checkin_req_t *list = NULL;
  for (ak_checkin_req_t *q = atomic_exchange(&d->cstack, NULL), *nx; q; q = nx) {
    nx = q->next;
    q->next = list;
    list = q;
  }
  for (ak_checkin_req_t *q = list, *nx; q; q = nx) {
    nx = q->next;
    row_t *r = umap_get(&d->cwait, q->seq);
    umap_del(&d->cwait, q->seq);
    size_t rl = strlen(q->ref);
    if (q->rc == 0 && rl && rl < 256 && op_begin(d)) {
      uint8_t k[AK_GROUP_KEY_LEN], v[2 + 255 + 64];
      claim_key(k, q->seq);
      v[0] = 1;
      v[1] = (uint8_t)rl;
      memcpy(v + 2, q->ref, rl);
      memcpy(v + 2 + rl, q->sha256, 64);
      ak_batch_put(batch(d, now), AK_CF_INDEX, k, sizeof k, v, 2 + rl + 64);
      op_end(d);
    }
    while (r) {
      row_t *rn = r->cnext;
      r->cnext = NULL;
      if (q->rc == 0 && !r->zombie) {
        snprintf(r->claim_ref, sizeof r->claim_ref, "%s", q->ref);
        memcpy(r->claim_sha, q->sha256, 65);
        deliver_row(r);
      } else {
        ak_sink_outcome_t o = {.result = AK_SINK_RETRY};
        snprintf(o.reason, sizeof o.reason, "claim_check: %.100s", q->rc == 0 ? "timed out" : q->err);
        on_sink_done(r, &o);
      }
      r = rn;
    }
    free(q->user);
    free(q);
  }
}

static void start_attempt(ak_dispatch_t *d, row_t *r, int64_t now) {
  skey_t *k = r->key;
  sink_inst_t *si = &r->ds->v[k->sink];
  r->running = true;
  r->start_ns = ak_mono_ns();
  r->deadline_ms = now + d->cfg->attempt_timeout_ms;
  ak_list_insert_tail(&d->run, &r->run_link);
  k->running++;
  k->t->running++;
  d->running++;
  r->d = d;
  if (tenant_closed(d, k->t)) { /* claimed before its erase began: settled undelivered */
    settle(d, r, &(ak_sink_outcome_t){.result = AK_SINK_OK}, false, now);
    free(r);
    return;
  }
  if (si->inline_max >= 0 && (uint64_t)r->env.body_len > (uint64_t)si->inline_max) {
    if (!d->checkin) {
      ak_sink_outcome_t o = {.result = AK_SINK_RETRY};
      snprintf(o.reason, sizeof o.reason, "claim_check: no claim store on this node");
      on_sink_done(r, &o);
      return;
    }
    if (!claim_ready(d, r)) return;
  }
  deliver_row(r);
}

/* Hand free slots round-robin across tenants with queued rows, then across the
 * tenant's sink keys, within every cap (a tenant's is its window's, or more alone: see
 * tenant_mark). */
static void start_attempts(ak_dispatch_t *d, int64_t now) {
  AK_ASSERT_OWNER(&d->owner);
  int64_t kcap = d->cfg->sink_concurrency;
  size_t idle = 0;
  while (d->running < d->cfg->concurrency && !ak_list_empty(&d->slots) && idle < d->nslots) {
    tenant_t *t = ak_list_entry(ak_list_first(&d->slots), tenant_t, slot_link);
    ak_list_rotate_after(&d->slots, &t->slot_link);
    if (t->running >= tenant_cap_running(d, t)) {
      idle++;
      continue;
    }
    /* find a key of t that may run now; the ring turns past it */
    bool started = false;
    ak_list_foreach(kl, &t->keys) {
      skey_t *k = ak_list_entry(kl, skey_t, ring_link);
      if (kcap <= 0 || (int64_t)k->running < kcap) {
        ak_list_rotate_after(&t->keys, kl);
        row_t *r = key_pop(d, k);
        ak_breaker_verdict_t v = k->breaker ? ak_breaker_allow(k->breaker, now) : AK_BREAKER_ALLOW;
        if (v == AK_BREAKER_DENY) {
          park(d, r, now);
          free(r);
          while ((r = key_pop(d, k))) {
            park(d, r, now);
            free(r);
          }
        } else {
          start_attempt(d, r, now);
          started = true;
        }
        break;
      }
    }
    idle = started ? 0 : idle + 1;
    if (ak_list_empty(&d->slots)) break;
  }
}

static row_t *first_running(const ak_dispatch_t *d) {
  ak_list_t *n = ak_list_first(&d->run);
  return n ? ak_list_entry(n, row_t, run_link) : NULL;
}

static void check_timeouts(ak_dispatch_t *d, int64_t now) {
  AK_ASSERT_OWNER(&d->owner);
  row_t *r;
  while ((r = first_running(d)) && r->deadline_ms <= now) {
    ak_sink_outcome_t o = {.result = AK_SINK_RETRY};
    snprintf(o.reason, sizeof o.reason, "{attempt_timeout, %lld}", (long long)d->cfg->attempt_timeout_ms);
    settle(d, r, &o, true, now);
    r->zombie = true; /* freed when the sink's callback finally arrives */
  }
}

/* ------------------------------------------------------------------ inbox ---- */

static void inbox_add(inbox_t *in, const char *name, size_t n, int64_t at, uint64_t rows, uint64_t from_dead) {
  for (size_t i = in->n; i > 0; i--) { /* recent tenants are at the end: usually one probe */
    notice_t *x = &in->v[i - 1];
    if (x->nlen == n && memcmp(x->name, name, n) == 0) {
      if (at < x->min_at) x->min_at = at;
      x->rows += rows;
      x->from_dead += from_dead;
      return;
    }
    if (in->n - i >= 8) break;
  }
  if (in->n == in->cap && ak_buf_grow(&in->v, &in->cap, in->n + 1, sizeof *in->v) != 0) return;
  char *nm = malloc(n + 1);
  if (!nm) return;
  memcpy(nm, name, n);
  nm[n] = 0;
  in->v[in->n++] = (notice_t){.name = nm, .nlen = n, .min_at = at, .rows = rows, .from_dead = from_dead};
}

/* A group committed (writer thread): its marker is queued for the dispatch thread. */
static void on_commit(void *ctx, uint64_t first_seq, const uint8_t *marker, size_t len, uint64_t safe) {
  ak_dispatch_t *d = ctx;
  uint8_t *copy = malloc(len ? len : 1);
  if (copy) memcpy(copy, marker, len);
  pthread_mutex_lock(&d->mu);
  AK_ASSERT_HELD(&d->mu);
  bool was_empty = !d->inbox.n && !d->nminbox;
  if (copy && (d->nminbox < d->capminbox ||
               ak_buf_grow(&d->minbox, &d->capminbox, d->nminbox + 1, sizeof *d->minbox) == 0)) {
    d->minbox[d->nminbox++] = (mnotice_t){.first_seq = first_seq, .safe = safe, .len = len, .marker = copy};
  } else {
    /* out of memory: the dispatch thread reads the markers back from the store */
    free(copy);
    if (!d->notice_lost_from || first_seq < d->notice_lost_from) d->notice_lost_from = first_seq ? first_seq : 1;
  }
  if (was_empty) pthread_cond_signal(&d->cv);
  pthread_mutex_unlock(&d->mu);
}

void ak_dispatch_note_due(ak_dispatch_t *d, const char *tenant, size_t tlen, int64_t at_ms, uint64_t rows,
                          uint64_t from_dead) {
  if (!d) return;
  pthread_mutex_lock(&d->mu);
  inbox_add(&d->inbox, tenant ? tenant : "", tenant ? tlen : 0, at_ms, rows, from_dead);
  pthread_cond_signal(&d->cv);
  pthread_mutex_unlock(&d->mu);
}

static void apply_inbox(ak_dispatch_t *d, inbox_t *in, int64_t now) {
  AK_ASSERT_OWNER(&d->owner);
  for (size_t i = 0; i < in->n; i++) {
    notice_t *x = &in->v[i];
    tenant_t *t = tenant_get(d, x->name, x->nlen);
    free(x->name);
    if (!t) continue;
    t->pending += (int64_t)x->rows;
    d->pending += (int64_t)x->rows;
    d->dead -= (int64_t)x->from_dead;
    tenant_note_due(t, x->min_at);
    tenant_place(d, t, now);
  }
  in->n = 0;
}

static void apply_markers(ak_dispatch_t *d, mnotice_t *v, size_t n, uint64_t lost_from, int64_t now) {
  AK_ASSERT_OWNER(&d->owner);
  for (size_t i = 0; i < n; i++) {
    ak_marker_t m;
    if (ak_marker_decode(v[i].marker, v[i].len, &m) != 0 ||
        log_add_marker(d, v[i].first_seq, &m, 0, NULL, false, NULL, now) != 0) {
      if (!lost_from || v[i].first_seq < lost_from) lost_from = v[i].first_seq ? v[i].first_seq : 1;
    }
    if (v[i].safe > d->safe) d->safe = v[i].safe;
    free(v[i].marker);
  }
  if (lost_from && log_scan(d, lost_from, NULL, false, now, NULL) != 0)
    ak_log(AK_LOG_ERROR, "dispatch", "cannot read committed hooks back from the store; they are delivered after "
           "the next start", "from_seq=%" PRIu64, lost_from);
}

/* ------------------------------------------------------------------ gauges ---- */

static int64_t oldest_due(ak_dispatch_t *d, int64_t now) {
  int64_t m = INT64_MAX;
  size_t pos = 0;
  for (tenant_t *t; (t = ak_tmap_next(&d->tenants, &pos));)
    if (t->next_due < m && t->next_due <= now) m = t->next_due;
  return m == INT64_MAX ? 0 : m;
}

static void publish(ak_dispatch_t *d, int64_t now) {
  AK_ASSERT_OWNER(&d->owner);
  atomic_store(&d->pub_oldest_due_ms, oldest_due(d, now));
  atomic_store(&d->pub_has_room, global_has_room(d) ? 1 : 0);
  ak_gauge_set(d->g_pending, (double)d->pending);
  ak_gauge_set(d->g_scheduled, (double)d->scheduled);
  ak_gauge_set(d->g_inflight, (double)d->inflight);
  ak_gauge_set(d->g_dead, (double)d->dead);
  int64_t od = atomic_load(&d->pub_oldest_due_ms);
  ak_gauge_set(d->g_oldest, od ? (double)(now - od) / 1000.0 : 0);
  ak_gauge_set(d->g_running, (double)d->running);
  ak_gauge_set(d->g_claimed, (double)d->inflight);
  ak_gauge_set(d->g_claimed_bytes, (double)d->inflight_bytes);
  int64_t runnable = d->inflight - d->running;
  ak_gauge_set(d->g_runnable, (double)runnable);
  ak_gauge_set(d->g_tenants, (double)ak_tmap_count(&d->tenants));
  ak_gauge_set(d->g_log_entries, (double)d->log_entries);
}

/* Top tenants by a counter, into a fresh gauge family (the label set changes). */
static void top_tenants(ak_dispatch_t *d, ak_family_t *f, bool by_pending) {
  tenant_t *top[TOP_TENANTS];
  size_t n = 0;
  size_t active = 0, pos = 0;
  for (tenant_t *t; (t = ak_tmap_next(&d->tenants, &pos));) {
    int64_t v = by_pending ? t->pending : t->inflight;
    if (t->inflight || t->pending || t->scheduled) active++;
    if (v <= 0) continue;
    if (n < TOP_TENANTS) {
      top[n++] = t;
    } else {
      size_t mi = 0;
      for (size_t j = 1; j < n; j++)
        if ((by_pending ? top[j]->pending : top[j]->inflight) < (by_pending ? top[mi]->pending : top[mi]->inflight))
          mi = j;
      if ((by_pending ? top[mi]->pending : top[mi]->inflight) < v) top[mi] = t;
    }
  }
  ak_metrics_family_clear(f);
  for (size_t i = 0; i < n; i++) {
    const char *vals[] = {d->inst->name, top[i]->name};
    ak_gauge_set(ak_metrics_series(f, vals), (double)(by_pending ? top[i]->pending : top[i]->inflight));
  }
  if (by_pending) ak_gauge_set(d->g_active, (double)active);
}

static void sample_breakers(ak_dispatch_t *d) {
  size_t open = 0;
  uint64_t trans = 0;
  for (size_t i = 0; i < d->keys.cap; i++) {
    skey_t *k = d->keys.keys[i] ? d->keys.vals[i] : NULL;
    if (!k || !k->breaker) continue;
    if (ak_breaker_state(k->breaker) != AK_BREAKER_CLOSED) open++;
    trans += ak_breaker_transitions(k->breaker);
    uint64_t by_state[3];
    ak_breaker_take_transitions(k->breaker, by_state);
    static const char *const state_names[3] = {"closed", "open", "half_open"};
    for (int st = 0; st < 3; st++)
      if (by_state[st])
        ak_counter_add(ak_metrics_series(d->f_transitions,
                                         (const char *const[]){d->inst->name, k->label, state_names[st]}),
                       by_state[st]);
  }
  ak_gauge_set(d->g_breakers, (double)open);
  if (trans > d->transitions_seen) ak_counter_add(d->c_transitions, trans - d->transitions_seen);
  d->transitions_seen = trans;
}

/* ------------------------------------------------------------------ thread ---- */

static void *run(void *arg) {
  ak_dispatch_t *d = arg;
  pthread_setname_np(pthread_self(), "ak-dispatch");
  AK_OWNER_CLAIM(&d->owner);
  ak_store_thread_init();
  inbox_t spare = {0};
  int64_t last_gauge = 0;
  reclaim(d); /* candidates from before the start */
  for (;;) {
    pthread_mutex_lock(&d->mu);
    inbox_t in = d->inbox;
    d->inbox = spare;
    /* the stack holds the newest first: settle in arrival order */
    row_t *outs = NULL;
    for (row_t *r = atomic_exchange(&d->ostack, NULL), *nx; r; r = nx) {
      nx = r->onext;
      r->onext = outs;
      outs = r;
    }
    mnotice_t *mv = d->minbox;
    size_t mn = d->nminbox;
    uint64_t lost_from = d->notice_lost_from;
    d->minbox = NULL;
    d->nminbox = d->capminbox = 0;
    d->notice_lost_from = 0;
    bool stopping = d->stop;
    int64_t stop_deadline = d->stop_deadline_ms;
    ak_dispatch_call_fn call = d->call_fn;
    void *call_ctx = d->call_ctx;
    pthread_mutex_unlock(&d->mu);
    int64_t now = ak_now_ms();

    apply_inbox(d, &in, now);
    spare = in;
    apply_markers(d, mv, mn, lost_from, now);
    free(mv);
    for (row_t *r = outs, *nx; r; r = nx) {
      nx = r->onext;
      if (r->zombie) {
        free(r);
        continue;
      }
      settle(d, r, &r->out, false, now);
      free(r);
    }
    if (atomic_load(&d->cstack)) apply_checkins(d, now);
    check_timeouts(d, now);
    if (call) { /* with every outcome so far written, so the call sees what they wrote */
      flush(d);
      call(d, call_ctx);
      pthread_mutex_lock(&d->mu);
      d->call_fn = NULL;
      d->call_rc = 0;
      pthread_cond_broadcast(&d->calldone);
      pthread_mutex_unlock(&d->mu);
    }
    while (d->nheap && d->heap[0]->next_due <= now) {
      tenant_t *t = d->heap[0];
      heap_remove(d, t);
      tenant_place(d, t, now);
    }
    if (stopping && (d->running == 0 || now >= stop_deadline)) {
      log_persist(d, now);
      flush(d);
      break;
    }
    if (d->ops_lost && ak_store_is_open(d->inst->store)) rescan_all(d, now);
    if (!stopping) {
      /* outcomes must be in the store before a scan can see their due keys again */
      if (!ak_list_empty(&d->ready) && global_wants_claims(d)) {
        flush(d);
        scan(d, now);
      }
      start_attempts(d, now);
    }
    /* cursors that moved, held deliveries to spill, or a low mark behind the commits (hooks
     * whose deliveries all went to lanes or rows join no tenant's log) */
    if ((d->ndirty || d->nheld || d->safe > d->dlow_written) &&
        (now - d->last_persist_ms >= CURSOR_MS || d->behind_total >= SPILL_COUNT))
      log_persist(d, now);
    if (d->wb_ops && (d->wb_ops >= FLUSH_OPS || now - d->wb_first_ms >= FLUSH_MS)) flush(d);
    if (now - d->last_tick_ms >= TICK_MS) {
      d->last_tick_ms = now;
      log_refill(d, now);
      for (size_t i = 0; i < d->nlsets; i++) lset_ordered(d, d->lsets[i]);
      if (d->reclaimed_to < reclaim_limit(d)) log_reclaim(d);
      publish(d, now);
      if (d->tick && !stopping) d->tick(d->tick_ctx, now);
      if (now - last_gauge >= 1000) {
        last_gauge = now;
        top_tenants(d, d->f_tenant_pending, true);
        top_tenants(d, d->f_tenant_inflight, false);
        sample_breakers(d);
      }
    }

    /* sleep until something can happen */
    int64_t wake = now + MAX_SLEEP_MS;
    if (d->nheap && d->heap[0]->next_due < wake) wake = d->heap[0]->next_due;
    row_t *oldest = first_running(d);
    if (oldest && oldest->deadline_ms < wake) wake = oldest->deadline_ms;
    if (d->wb_ops && d->wb_first_ms + FLUSH_MS < wake) wake = d->wb_first_ms + FLUSH_MS;
    if ((d->ndirty || d->nheld || (d->safe > d->dlow_written && !d->low_stuck)) && d->last_persist_ms + CURSOR_MS < wake)
      wake = d->last_persist_ms + CURSOR_MS;
    if (d->last_tick_ms + TICK_MS < wake) wake = d->last_tick_ms + TICK_MS;
    if (!ak_list_empty(&d->ready) && global_wants_claims(d) && !stopping) wake = now; /* more to claim */
    pthread_mutex_lock(&d->mu);
    if (!d->inbox.n && !d->nminbox && !d->notice_lost_from && !atomic_load(&d->ostack) && !atomic_load(&d->cstack) &&
        !(d->stop && !stopping) && !d->call_fn &&
        wake > now) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      int64_t ms = wake - now;
      ts.tv_sec += ms / 1000;
      ts.tv_nsec += (ms % 1000) * 1000000;
      if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
      }
      pthread_cond_timedwait(&d->cv, &d->mu, &ts);
    }
    pthread_mutex_unlock(&d->mu);
  }
  free(spare.v);
  publish(d, ak_now_ms());
  pthread_mutex_lock(&d->mu);
  d->call_fn = NULL; /* a call that came too late: refused (d->stop is set, no new one comes) */
  d->call_rc = -1;
  pthread_cond_broadcast(&d->calldone);
  pthread_mutex_unlock(&d->mu);
  AK_OWNER_RELEASE(&d->owner); /* ak_dispatch_stop settles what is left, on its own thread */
  return NULL;
}

/* ------------------------------------------------------------------ lifecycle ---- */

const double ak_delivery_latency_bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
                                             5, 10, 30, 60, 300, 1800, 3600, 21600};
const size_t ak_delivery_latency_nbounds = sizeof ak_delivery_latency_bounds / sizeof ak_delivery_latency_bounds[0];

static void sink_metrics(ak_dispatch_t *d, sink_inst_t *si, const char *source_id) {
  ak_metrics_t *m = d->inst->metrics;
  const char *const olbl[] = {"instance", "result", "sink", NULL};
  ak_family_t *odel = ak_metrics_family(m, "ankusa_dispatch_deliveries_total",
                                        "Deliveries settled by result (ok: the sink confirmed; dlq: dead-lettered).",
                                        AK_METRIC_COUNTER, olbl, NULL, 0);
  si->odel_ok = ak_metrics_series(odel, (const char *const[]){d->inst->name, "ok", si->label});
  si->odel_dlq = ak_metrics_series(odel, (const char *const[]){d->inst->name, "dlq", si->label});
  const char *const dllbl[] = {"instance", "source_id", "sink", NULL};
  ak_family_t *dl = ak_metrics_family(m, "ankusa_dispatch_dead_lettered_total", "Deliveries dead-lettered.",
                                      AK_METRIC_COUNTER, dllbl, NULL, 0);
  si->dead_lettered =
      ak_metrics_series(dl, (const char *const[]){d->inst->name, ak_metrics_id_label(m, source_id), si->label});
  /* served from the start for each sink type (sample_breakers adds to them) */
  ak_family_t *bt = ak_metrics_family(m, "ankusa_dispatch_breaker_transitions_total", "", AK_METRIC_COUNTER,
                                      (const char *const[]){"instance", "sink", "state", NULL}, NULL, 0);
  for (int st = 0; st < 3; st++)
    ak_metrics_series(bt, (const char *const[]){d->inst->name, si->label,
                                                (const char *const[]){"closed", "open", "half_open"}[st]});
  const char *const lbl[] = {"instance", "sink", "result", NULL};
  const char *const lbl2[] = {"instance", "sink", NULL};
  static const double dur_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
  ak_family_t *att = ak_metrics_family(m, "ankusa_dispatch_attempts_total", "Delivery attempts by sink and result.",
                                       AK_METRIC_COUNTER, lbl, NULL, 0);
  ak_family_t *del = ak_metrics_family(m, "ankusa_deliveries_total",
                                       "Deliveries settled: ok (the sink confirmed) or dlq (dead-lettered).",
                                       AK_METRIC_COUNTER, lbl, NULL, 0);
  ak_family_t *par = ak_metrics_family(m, "ankusa_dispatch_parked_total",
                                       "Rows parked because their sink key's breaker was open.", AK_METRIC_COUNTER,
                                       lbl2, NULL, 0);
  ak_family_t *dur = ak_metrics_family(m, "ankusa_dispatch_attempt_duration_seconds",
                                       "Duration of one delivery attempt (result ok, error or timeout).",
                                       AK_METRIC_HISTOGRAM, lbl, dur_bounds, sizeof dur_bounds / sizeof dur_bounds[0]);
  ak_family_t *lat = ak_metrics_family(m, "ankusa_delivery_latency_seconds",
                                       "Age of a hook (from received_at) when its delivery settled; replays excluded.",
                                       AK_METRIC_HISTOGRAM, lbl, ak_delivery_latency_bounds, ak_delivery_latency_nbounds);
#define S(f, r) ak_metrics_series(f, (const char *const[]){d->inst->name, si->label, r})
  si->att_ok = S(att, "ok");
  si->att_err = S(att, "error");
  si->att_timeout = S(att, "timeout");
  si->del_ok = S(del, "ok");
  si->del_dlq = S(del, "dlq");
  si->dur_ok = S(dur, "ok");
  si->dur_err = S(dur, "error");
  si->dur_timeout = S(dur, "timeout");
  si->lat_ok = S(lat, "ok");
  si->lat_dlq = S(lat, "dlq");
#undef S
  si->parked = ak_metrics_series(par, (const char *const[]){d->inst->name, si->label});
}

static void sinks_destroy(dsinks_t *ds) {
  if (ds->destroyed) return;
  ds->destroyed = true;
  for (size_t j = 0; j < ds->n; j++)
    if (ds->v[j].self) ds->v[j].vt->destroy(ds->v[j].self);
}

/* A version's sinks go with it, on whichever thread released it last: unlisted, then
 * destroyed outside the lock (a destroy waits until the HTTP client has answered the
 * sink's own requests, whose callbacks take the dispatcher's mu, never smu). After the dispatcher is gone (d NULL, every
 * sink already destroyed by ak_dispatch_free) only the shell is left to free. */
static void sinks_free(void *state) {
  dsinks_t *ds = state;
  if (!ds) return;
  ak_dispatch_t *d = ds->d;
  if (d) {
    pthread_mutex_lock(&d->smu);
    if (ak_list_linked(&ds->link)) ak_list_remove(&ds->link);
    pthread_mutex_unlock(&d->smu);
  }
  sinks_destroy(ds);
  free(ds);
}

/* The sink instances of a source version (a sink that can never work, e.g. refused by
 * the egress guard, refuses the version with err naming sources.<id>.sinks[i]). The
 * sinks of an API-managed source are guarded; the config file's are trusted unless
 * egress.guard_static_sources (sinks/egress.h). */
static void *sinks_build(void *ctx, const ak_source_t *src, char *err, size_t errlen) {
  ak_dispatch_t *d = ctx;
  const ak_source_cfg_t *s = &src->cfg;
  dsinks_t *ds = calloc(1, sizeof *ds + (s->nsinks ? s->nsinks : 1) * sizeof(sink_inst_t));
  if (!ds) {
    snprintf(err, errlen, "sources.%s: out of memory", s->id);
    return NULL;
  }
  for (size_t j = 0; j < s->nsinks; j++) {
    sink_inst_t *si = &ds->v[j];
    si->self = ak_sink_instance_new(d->inst, src, j, &si->vt, err, errlen);
    ds->n = j + 1;
    if (!si->self) goto fail;
    snprintf(si->label, sizeof si->label, "%s", s->sinks[j].type);
    si->inline_max = si->vt->inline_max ? si->vt->inline_max(si->self) : -1;
    sink_metrics(d, si, s->id);
  }
  ds->n = s->nsinks;
  ds->d = d;
  pthread_mutex_lock(&d->smu);
  ak_list_insert_head(&d->sets, &ds->link);
  pthread_mutex_unlock(&d->smu);
  return ds;
fail:
  sinks_destroy(ds);
  free(ds);
  return NULL;
}

ak_dispatch_t *ak_dispatch_new(ak_instance_t *inst, char *err, size_t errlen) {
  ak_dispatch_t *d = calloc(1, sizeof *d);
  if (!d) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  d->inst = inst;
  d->cfg = ak_dispatch_cfg(inst->cfg);
  ak_list_init(&d->sets);
  ak_list_init(&d->ready);
  ak_list_init(&d->slots);
  ak_list_init(&d->run);
  ak_list_init(&d->lactive);
  ak_tmap_init(&d->tenants, sizeof(tenant_t));
  ak_tmap_init(&d->lset_ix, sizeof(uint32_t));
  ak_tmap_init(&d->lanes, sizeof(lane_t));
  pthread_mutex_init(&d->lsmu, NULL);
  const ak_dispatch_cfg_t *c = d->cfg;
  if (RAND_bytes((unsigned char *)&d->jitter_state, sizeof d->jitter_state) != 1)
    d->jitter_state = (uint64_t)ak_mono_ns() ^ ((uint64_t)getpid() << 32);
  pthread_mutex_init(&d->mu, NULL);
  pthread_mutex_init(&d->callmu, NULL);
  pthread_cond_init(&d->calldone, NULL);
  pthread_mutex_init(&d->smu, NULL);
  pthread_cond_init(&d->cv, NULL);
  d->retry = (ak_retry_policy_t){.base_ms = c->retry.base_ms, .max_ms = c->retry.max_ms,
                                 .max_attempts = (int)c->retry.max_attempts, .jitter = c->retry.jitter};
  d->bcfg = (ak_breaker_config_t){.failures = (int)c->breaker_failures, .open_ms = c->breaker_open_ms,
                                  .max_open_ms = c->breaker_max_open_ms};
  if (ak_retry_policy_check(&d->retry, err, errlen) != 0 ||
      (d->bcfg.failures > 0 && ak_breaker_config_check(&d->bcfg, err, errlen) != 0)) {
    ak_dispatch_free(d);
    return NULL;
  }
  ak_metrics_t *m = inst->metrics;
  const char *in = inst->name;
  d->g_pending = ak_metrics_instance_series(m, in, "ankusa_queue_pending", "First delivery attempts waiting (due or not).", AK_METRIC_GAUGE);
  d->g_scheduled = ak_metrics_instance_series(m, in, "ankusa_queue_scheduled", "Retries waiting for their next attempt.", AK_METRIC_GAUGE);
  d->g_inflight = ak_metrics_instance_series(m, in, "ankusa_queue_inflight", "Delivery rows claimed by the dispatcher and not settled.", AK_METRIC_GAUGE);
  d->g_dead = ak_metrics_instance_series(m, in, "ankusa_queue_dead", "Dead-lettered delivery rows.", AK_METRIC_GAUGE);
  d->g_oldest = ak_metrics_instance_series(m, in, "ankusa_queue_oldest_due_age_seconds", "How long the oldest due, unclaimed row has been due.", AK_METRIC_GAUGE);
  d->g_running = ak_metrics_instance_series(m, in, "ankusa_dispatch_running", "Delivery attempts in flight.", AK_METRIC_GAUGE);
  d->g_claimed = ak_metrics_instance_series(m, in, "ankusa_dispatch_claimed", "Rows claimed (running or queued per sink key).", AK_METRIC_GAUGE);
  d->g_claimed_bytes = ak_metrics_instance_series(m, in, "ankusa_dispatch_claimed_bytes",
                                                  "Body bytes of the claimed rows.", AK_METRIC_GAUGE);
  d->g_runnable = ak_metrics_instance_series(m, in, "ankusa_dispatch_runnable", "Claimed rows waiting for a slot.", AK_METRIC_GAUGE);
  d->g_active = ak_metrics_instance_series(m, in, "ankusa_dispatch_active_tenants", "Tenants with rows waiting or claimed.", AK_METRIC_GAUGE);
  d->g_breakers = ak_metrics_instance_series(m, in, "ankusa_dispatch_breakers_open", "Sink keys whose breaker is open or half-open.", AK_METRIC_GAUGE);
  d->c_transitions = ak_metrics_instance_series(m, in, "ankusa_dispatch_breaker_changes_total",
                                               "Breaker state changes, all sinks and states.", AK_METRIC_COUNTER);
  d->f_transitions = ak_metrics_family(m, "ankusa_dispatch_breaker_transitions_total",
                                       "Breaker state changes by sink type and the state entered (open, half_open, "
                                       "closed).", AK_METRIC_COUNTER,
                                       (const char *const[]){"instance", "sink", "state", NULL}, NULL, 0);
  d->g_tenants = ak_metrics_instance_series(m, in, "ankusa_tenants", "Tenants the scheduler keeps queue counters for (seen with delivery rows since start).", AK_METRIC_GAUGE);
  d->c_write_fail = ak_metrics_instance_series(m, in, "ankusa_dispatch_write_failures_total", "Outcome batches the store refused (those rows are delivered again).", AK_METRIC_COUNTER);
  {
    const char *const sl[] = {"instance", "stage", NULL};
    ak_family_t *ff = ak_metrics_family(m, AK_METRIC_COMPACT_FAILURES, AK_METRIC_COMPACT_FAILURES_HELP,
                                        AK_METRIC_COUNTER, sl, NULL, 0);
    d->c_reclaim_fail = ak_metrics_series(ff, (const char *const[]){in, "reclaim"});
  }
  d->c_spills = ak_metrics_instance_series(m, in, "ankusa_dispatch_log_spills_total", "Deliveries moved off the hook log into rows of their own because settled ones waited behind them (docs/storage.md).", AK_METRIC_COUNTER);
  d->g_log_entries = ak_metrics_instance_series(m, in, "ankusa_dispatch_log_hooks", "Hooks with unsettled deliveries the dispatcher holds in memory (the hook log's window).", AK_METRIC_GAUGE);
  const char *const tl[] = {"instance", "tenant", NULL};
  d->f_tenant_pending = ak_metrics_family(m, "ankusa_tenant_pending", "First attempts waiting, for the 100 tenants with the most.", AK_METRIC_GAUGE, tl, NULL, 0);
  d->f_tenant_inflight = ak_metrics_family(m, "ankusa_dispatch_tenant_inflight", "Claimed rows, for the 100 tenants holding the most.", AK_METRIC_GAUGE, tl, NULL, 0);
  /* last: from here on every source version made gets its sinks from us */
  if (ak_sources_attach(inst->sources, AK_SOURCE_EXT_DISPATCH, sinks_build, sinks_free, d, err, errlen) != 0) {
    ak_dispatch_free(d);
    return NULL;
  }
  return d;
}

typedef struct {
  ak_dispatch_t *d;
  tenant_t *last;
  uint64_t rows;
} start_scan_t;

static int start_cb(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  start_scan_t *s = ctx;
  const char *tn;
  size_t tl;
  int64_t at;
  if (ak_key_due_parse((const uint8_t *)k, kl, &tn, &tl, &at, NULL, NULL) != 0) return 0;
  tenant_t *t = s->last && s->last->nlen == tl && memcmp(s->last->name, tn, tl) == 0 ? s->last
                                                                                     : tenant_get(s->d, tn, tl);
  if (!t) return 1;
  s->last = t;
  ak_due_value_t dv;
  if (ak_due_value_decode((const uint8_t *)v, vl, &dv) != 0) dv.attempts = 0;
  count_unclaimed(s->d, t, dv.attempts, +1);
  if (at < t->exc_due) t->exc_due = at;
  if (at < t->next_due) t->next_due = at;
  /* the tenant's first live key: the first pass seeks straight to it instead of walking
   * the tombstones its delivered rows left in front of it */
  if (!t->cursor_len && kl <= sizeof t->cursor) {
    memcpy(t->cursor, k, kl);
    t->cursor_len = kl;
  }
  s->rows++;
  return 0;
}

static int dead_cb(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  (void)k;
  (void)kl;
  (void)v;
  (void)vl;
  ((ak_dispatch_t *)ctx)->dead++;
  return 0;
}

static int cursor_cb(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  ak_dispatch_t *d = ctx;
  if (kl < 3 || vl != 8) return 0;
  tenant_t *t = tenant_get(d, k + 3, kl - 3);
  if (!t) return 1;
  t->boot_cursor = t->cursor_written = ak_get_u64((const uint8_t *)v);
  return 0;
}

static uint64_t meta_u64(ak_store_t *st, const char *key, int *rc) {
  char *v = NULL;
  size_t vl = 0;
  uint64_t x = 0;
  int r = ak_store_get(st, AK_CF_DEFAULT, key, strlen(key), &v, &vl);
  if (r == 0 && vl == 8) x = ak_get_u64((const uint8_t *)v);
  else if (r == 0 || r < 0) *rc = -1;
  free(v);
  return x;
}

static int reclaim_load_cb(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  ak_dispatch_t *d = ctx;
  if (kl != AK_GROUP_KEY_LEN || vl != 16) return 0;
  if (ak_buf_grow(&d->reclaim, &d->capreclaim, d->nreclaim + 1, sizeof *d->reclaim) != 0) return 1;
  d->reclaim[d->nreclaim].seq = ak_get_u64((const uint8_t *)k + 1);
  memcpy(d->reclaim[d->nreclaim++].id, v, 16);
  return 0;
}

/* The hook log at start: the cursors, then every group marker from the low mark on. */
static int log_load(ak_dispatch_t *d, uint64_t *hooks, char *err, size_t errlen) {
  ak_store_t *st = d->inst->store;
  int rc = 0;
  uint64_t low = meta_u64(st, AK_KEY_DISPATCH_LOW, &rc);
  d->reclaimed_to = meta_u64(st, AK_KEY_RECLAIMED, &rc);
  if (rc != 0) {
    snprintf(err, errlen, "the hook log's marks in the store are damaged (%s, %s)", AK_KEY_DISPATCH_LOW,
             AK_KEY_RECLAIMED);
    return -1;
  }
  d->dlow_written = low;
  d->safe = ak_store_next_seq(st);
  d->reclaimed_hooks = (uint64_t)0 - meta_u64(st, AK_KEY_HOOK_COUNT_RECLAIMED, &rc);
  rc = 0;
  /* reclaim candidates a kill left behind */
  const char rtag = AK_IDX_RECLAIM;
  if (ak_store_scan(st, AK_CF_INDEX, &rtag, 1, reclaim_load_cb, d) != 0) {
    snprintf(err, errlen, "cannot read the reclaim candidates from the store");
    return -1;
  }
  if (ak_store_scan(st, AK_CF_DEFAULT, AK_KEY_TENANT_CURSOR, 3, cursor_cb, d) != 0) {
    snprintf(err, errlen, "cannot read the hook log's cursors from the store");
    return -1;
  }
  int r = log_scan(d, low, NULL, true, ak_now_ms(), hooks);
  if (r != 0) {
    snprintf(err, errlen, r == -2 ? "a group marker in the store is damaged" : "cannot read the hook log from the store");
    return -1;
  }
  const char o = AK_IDX_LANE;
  if (ak_store_scan(st, AK_CF_INDEX, &o, 1, lane_load_cb, d) != 0) {
    snprintf(err, errlen, "cannot read the ordered lanes from the store");
    return -1;
  }
  size_t pos = 0;
  for (tenant_t *t; (t = ak_tmap_next(&d->tenants, &pos));) tenant_dirty(d, t);
  return 0;
}

int ak_dispatch_load(ak_dispatch_t *d, char *err, size_t errlen) {
  int64_t t0 = ak_mono_ns();
  uint64_t log_hooks = 0;
  if (log_load(d, &log_hooks, err, errlen) != 0) return -1;
  int64_t t1 = ak_mono_ns();
  start_scan_t s = {.d = d};
  const char pd = AK_IDX_DUE, px = AK_IDX_DEAD;
  if (ak_store_scan(d->inst->store, AK_CF_INDEX, &pd, 1, start_cb, &s) != 0 ||
      ak_store_scan(d->inst->store, AK_CF_INDEX, &px, 1, dead_cb, d) != 0) {
    snprintf(err, errlen, "cannot read the due index from the store");
    return -1;
  }
  int64_t now = ak_now_ms();
  size_t pos = 0;
  for (tenant_t *t; (t = ak_tmap_next(&d->tenants, &pos));) tenant_place(d, t, now);
  publish(d, now);
  ak_log(AK_LOG_INFO, "dispatch", "hook log loaded", "hooks_read=%" PRIu64 " pending_hooks=%zu low=%" PRIu64
         " seconds=%.3f", log_hooks, d->log_entries, d->dlow_written, (double)(t1 - t0) / 1e9);
  ak_log(AK_LOG_INFO, "dispatch", "due index loaded", "rows=%" PRIu64 " tenants=%zu dead=%lld seconds=%.3f", s.rows,
         ak_tmap_count(&d->tenants), (long long)d->dead, (double)(ak_mono_ns() - t1) / 1e9);
  return 0;
}

size_t ak_dispatch_debug_scan(ak_dispatch_t *d, int64_t now_ms) {
  int64_t before = d->inflight;
  pthread_mutex_lock(&d->mu);
  inbox_t in = d->inbox;
  d->inbox = (inbox_t){0};
  pthread_mutex_unlock(&d->mu);
  apply_inbox(d, &in, now_ms);
  free(in.v);
  while (d->nheap && d->heap[0]->next_due <= now_ms) {
    tenant_t *t = d->heap[0];
    heap_remove(d, t);
    tenant_place(d, t, now_ms);
  }
  flush(d);
  scan(d, now_ms);
  return (size_t)(d->inflight - before);
}

size_t ak_dispatch_debug_ready(ak_dispatch_t *d) { return global_wants_claims(d) ? d->nready : 0; }

int64_t ak_dispatch_debug_tenant_claimed(ak_dispatch_t *d, const char *tenant) {
  tenant_t *t = ak_tmap_find(&d->tenants, tenant, strlen(tenant));
  return t ? t->inflight : -1;
}

int ak_dispatch_start(ak_dispatch_t *d, char *err, size_t errlen) {
  if (ak_dispatch_load(d, err, errlen) != 0) return -1;
  if (d->inst->claims && !d->checkin && !(d->checkin = ak_checkin_new(d->inst->claims, on_checkin, d))) {
    snprintf(err, errlen, "cannot start the claim check-in thread");
    return -1;
  }
  if (d->inst->writer) ak_writer_on_commit(d->inst->writer, on_commit, d);
  if (pthread_create(&d->thread, NULL, run, d) != 0) {
    snprintf(err, errlen, "cannot start the dispatch thread");
    return -1;
  }
  d->started = true;
  return 0;
}

void ak_dispatch_stop(ak_dispatch_t *d, int64_t wait_ms) {
  if (!d || !d->started) return;
  pthread_mutex_lock(&d->mu);
  d->stop = true;
  d->stop_deadline_ms = ak_now_ms() + wait_ms;
  pthread_cond_signal(&d->cv);
  pthread_mutex_unlock(&d->mu);
  pthread_join(d->thread, NULL);
  d->started = false;
}

/* At shutdown, after the dispatch thread: the checkin answers what waits, and the rows
 * that waited and timed out meanwhile (no longer in `claimed`) are freed here. */
static void checkins_drop(ak_dispatch_t *d) {
  ak_checkin_free(d->checkin);
  d->checkin = NULL;
  for (ak_checkin_req_t *q = atomic_exchange(&d->cstack, NULL), *nx; q; q = nx) {
    nx = q->next;
    for (row_t *r = umap_get(&d->cwait, q->seq), *rn; r; r = rn) {
      rn = r->cnext;
      if (r->zombie) free(r);
    }
    umap_del(&d->cwait, q->seq);
    free(q->user);
    free(q);
  }
  free(d->cwait.keys);
  free(d->cwait.vals);
  memset(&d->cwait, 0, sizeof d->cwait);
}

void ak_dispatch_free(ak_dispatch_t *d) {
  if (!d) return;
  ak_dispatch_stop(d, 0);
  checkins_drop(d);
  /* Every sink first, whatever version holds it: their late callbacks still find the
   * queue, and none can arrive once the rows below are freed. The sets stay with their
   * versions (freed by the table or a last holder), emptied and unlisted. Only the
   * stopping main thread runs now (listeners and the writer are stopped before). */
  ak_sources_detach(d->inst->sources, AK_SOURCE_EXT_DISPATCH);
  ak_list_t sets;
  ak_list_init(&sets);
  pthread_mutex_lock(&d->smu);
  ak_list_move(&d->sets, &sets);
  pthread_mutex_unlock(&d->smu);
  ak_list_foreach_safe(n, nx, &sets) {
    dsinks_t *ds = ak_list_entry(n, dsinks_t, link);
    ak_list_remove(n);
    ds->d = NULL;
    sinks_destroy(ds);
  }
  /* rows: running ones are referenced by the outcome queue or were abandoned */
  for (row_t *r = atomic_exchange(&d->ostack, NULL), *nx; r; r = nx) {
    nx = r->onext;
    if (!r->zombie) umap_del(&d->claimed, row_id(r->seq, r->sink));
    ak_envelope_clear(&r->env);
    free(r->rec);
    drop_source(r);
    free(r);
  }
  for (size_t i = 0; i < d->claimed.cap; i++)
    if (d->claimed.keys[i]) {
      row_t *r = d->claimed.vals[i];
      ak_envelope_clear(&r->env);
      free(r->rec);
      drop_source(r);
      free(r);
    }
  free(d->claimed.keys);
  free(d->claimed.vals);
  for (size_t i = 0; i < d->keys.cap; i++)
    if (d->keys.keys[i]) {
      skey_t *k = d->keys.vals[i];
      ak_breaker_free(k->breaker);
      free(k);
    }
  free(d->keys.keys);
  free(d->keys.vals);
  size_t tpos = 0;
  for (tenant_t *t; (t = ak_tmap_next(&d->tenants, &tpos));) free(t->lq);
  ak_tmap_fini(&d->tenants);
  for (size_t i = 0; i < d->nlsets; i++) {
    for (unsigned j = 0; j < d->lsets[i]->nsinks; j++) free(d->lsets[i]->types[j]);
    free(d->lsets[i]->source);
    free(d->lsets[i]);
  }
  free(d->lsets);
  ak_tmap_fini(&d->lset_ix);
  ak_tmap_fini(&d->lanes);
  for (size_t i = 0; i < d->nminbox; i++) free(d->minbox[i].marker);
  free(d->minbox);
  free(d->dirty);
  free(d->settle_after);
  pthread_mutex_destroy(&d->lsmu);
  for (size_t i = 0; i < d->inbox.n; i++) free(d->inbox.v[i].name);
  free(d->inbox.v);
  free(d->heap);
  free(d->cand);
  free(d->reclaim);
  ak_batch_free(d->wb);
  pthread_mutex_destroy(&d->smu);
  pthread_mutex_destroy(&d->mu);
  pthread_cond_destroy(&d->cv);
  pthread_mutex_destroy(&d->callmu);
  pthread_cond_destroy(&d->calldone);
  free(d);
}

int64_t ak_dispatch_log_pending(ak_dispatch_t *d, const char *source) {
  int64_t n = 0;
  size_t sl = strlen(source);
  pthread_mutex_lock(&d->lsmu);
  for (size_t i = 0; i < d->nlsets; i++)
    if (d->lsets[i]->source_len == sl && !memcmp(d->lsets[i]->source, source, sl))
      n += atomic_load(&d->lsets[i]->pending);
  pthread_mutex_unlock(&d->lsmu);
  return n;
}

typedef struct {
  const char *source;
  size_t sl;
  uint64_t low, from;
  const char *tenant;
  int64_t n;
  bool bad;
} spend_t;

static int spend_cb(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  spend_t *s = ctx;
  ak_marker_t m;
  if (kl != AK_GROUP_KEY_LEN || ak_marker_decode((const uint8_t *)v, vl, &m) != 0) {
    s->bad = true;
    return 1;
  }
  uint64_t first = ak_get_u64((const uint8_t *)k + 1);
  const uint8_t *pos = NULL;
  ak_marker_set_t ms;
  for (unsigned i = 0; i < m.nsets && ak_marker_next_set(&m, &pos, &ms) == 0; i++) {
    if (ms.source_len != s->sl || memcmp(ms.source, s->source, s->sl)) continue;
    for (uint32_t h = 0; h < m.count; h++)
      if (ak_marker_hook_set(&m, h) == i && first + h >= s->from) s->n += ms.nsinks;
  }
  return 0;
}

int ak_dispatch_store_log_pending(ak_store_t *st, const char *source, const char *tenant, int64_t *out) {
  int rc = 0;
  spend_t s = {.source = source, .sl = strlen(source), .tenant = tenant};
  s.low = meta_u64(st, AK_KEY_DISPATCH_LOW, &rc);
  if (rc != 0) return -1;
  char key[3 + 256];
  size_t tl = strlen(tenant) < 255 ? strlen(tenant) : 255;
  memcpy(key, AK_KEY_TENANT_CURSOR, 3);
  memcpy(key + 3, tenant, tl);
  key[3 + tl] = 0;
  uint64_t c = meta_u64(st, key, &rc);
  s.from = c > s.low ? c : s.low;
  if (rc != 0) s.from = s.low;
  const char g = AK_IDX_GROUP;
  uint8_t fk[AK_GROUP_KEY_LEN];
  ak_key_group(fk, 0);
  if (ak_store_scan_from(st, AK_CF_INDEX, &g, 1, fk, sizeof fk, false, spend_cb, &s) != 0 || s.bad) return -1;
  *out = s.n;
  return 0;
}

int64_t ak_dispatch_oldest_due_age_ms(ak_dispatch_t *d) {
  if (!d) return 0;
  int64_t od = atomic_load(&d->pub_oldest_due_ms);
  int64_t now = ak_now_ms();
  return od && od < now ? now - od : 0;
}

bool ak_dispatch_has_room(ak_dispatch_t *d) { return !d || atomic_load(&d->pub_has_room); }

/* the gauges are what publish() last wrote: atomics, so any thread may read them */
void ak_dispatch_queue_counts(ak_dispatch_t *d, ak_dispatch_counts_t *out) {
  out->pending = (int64_t)ak_gauge_get(d->g_pending);
  out->scheduled = (int64_t)ak_gauge_get(d->g_scheduled);
  out->inflight = (int64_t)ak_gauge_get(d->g_inflight);
  out->dead = (int64_t)ak_gauge_get(d->g_dead);
}

void ak_dispatch_on_replay_settled(ak_dispatch_t *d, ak_dispatch_settled_fn fn, void *ctx) {
  d->settled = fn;
  d->settled_ctx = ctx;
}

void ak_dispatch_on_tick(ak_dispatch_t *d, ak_dispatch_tick_fn fn, void *ctx) {
  d->tick = fn;
  d->tick_ctx = ctx;
}

/* ------------------------------------------------------------- tenant erase ---- */

void ak_dispatch_set_closed(ak_dispatch_t *d, ak_dispatch_closed_fn fn, void *ctx) {
  d->closed = fn;
  d->closed_ctx = ctx;
}

int ak_dispatch_call(ak_dispatch_t *d, ak_dispatch_call_fn fn, void *ctx) {
  pthread_mutex_lock(&d->callmu);
  pthread_mutex_lock(&d->mu);
  int rc = -1;
  if (d->started && !d->stop) {
    d->call_fn = fn;
    d->call_ctx = ctx;
    d->call_rc = -1;
    pthread_cond_signal(&d->cv);
    while (d->call_fn == fn && d->call_ctx == ctx) pthread_cond_wait(&d->calldone, &d->mu);
    rc = d->call_rc;
  }
  pthread_mutex_unlock(&d->mu);
  pthread_mutex_unlock(&d->callmu);
  return rc;
}

int64_t ak_dispatch_tenant_busy(ak_dispatch_t *d, const char *tenant, size_t tlen) {
  AK_ASSERT_OWNER(&d->owner);
  tenant_t *t = ak_tmap_find(&d->tenants, tenant, tlen);
  if (!t) return 0;
  return t->inflight + (int64_t)t->lq_n + (t->overflow_from ? 1 : 0);
}

uint64_t ak_dispatch_reclaimed_to(ak_dispatch_t *d) {
  AK_ASSERT_OWNER(&d->owner);
  return d->reclaimed_to;
}

void ak_dispatch_count_erased(ak_dispatch_t *d, struct ak_batch *wb, uint64_t n) {
  AK_ASSERT_OWNER(&d->owner);
  count_reclaimed(d, wb, n);
}

void ak_dispatch_erased(ak_dispatch_t *d, const char *tenant, size_t tlen, uint64_t hooks, uint64_t dead) {
  AK_ASSERT_OWNER(&d->owner);
  reclaimed(d, hooks);
  d->dead -= (int64_t)dead;
  if (d->dead < 0) d->dead = 0;
  tenant_t *t = ak_tmap_find(&d->tenants, tenant, tlen);
  if (!t) return;
  /* its exception rows are gone: nothing of it is due, its lanes are read again */
  d->pending -= t->pending;
  d->scheduled -= t->scheduled;
  t->pending = t->scheduled = 0;
  t->exc_due = INT64_MAX;
  t->cursor_len = 0;
  ak_list_foreach(it, &t->lanes) {
    lane_t *l = ak_list_entry(it, lane_t, link);
    if (!l->busy) l->head_known = false;
  }
}

void ak_dispatch_forget_cursor(ak_dispatch_t *d, const char *tenant, size_t tlen, struct ak_batch *wb) {
  AK_ASSERT_OWNER(&d->owner);
  uint8_t key[3 + 255];
  if (tlen > 255) return;
  memcpy(key, AK_KEY_TENANT_CURSOR, 3);
  memcpy(key + 3, tenant, tlen);
  ak_batch_delete(wb, AK_CF_DEFAULT, key, 3 + tlen);
  tenant_t *t = ak_tmap_find(&d->tenants, tenant, tlen);
  if (!t) return;
  for (size_t i = 0; i < d->ndirty; i++)
    if (d->dirty[i] == t) {
      d->dirty[i] = d->dirty[--d->ndirty];
      break;
    }
  t->dirty = false;
  t->cursor_written = tenant_cursor(d, t); /* not written again unless it moves */
}

/* ------------------------------------------------------------------- the module ---- */

static const ak_opt_t dispatch_retry_rows[] = {
  {.key = "base_ms", .type = AK_OPT_INT, .def = "100", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "delay after the first failed attempt; it doubles after each further one",
   AK_AT(ak_dispatch_retry_cfg_t, base_ms)},
  {.key = "max_ms", .type = AK_OPT_INT, .def = "300000", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "cap on the delay, applied before jitter; at least base_ms", AK_AT(ak_dispatch_retry_cfg_t, max_ms)},
  {.key = "max_attempts", .type = AK_OPT_INT, .def = "84", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "attempts in all; the last failed one dead-letters the row", AK_AT(ak_dispatch_retry_cfg_t, max_attempts)},
  {.key = "jitter", .type = AK_OPT_BOOL, .def = "true",
   .doc = "scale each delay by a random factor in [0.5, 1.0]", AK_AT(ak_dispatch_retry_cfg_t, jitter)},
  {0},
};

/* Each null resolves at load to a share of the node's window (dispatch_check). */
static const ak_opt_t dispatch_tenant_rows[] = {
  {.key = "max_inflight", .type = AK_OPT_INT, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN,
   .doc = "claimed, unfinished rows of one tenant while another tenant waits; alone, a tenant may use "
          "dispatch.max_inflight less this reserve; null = dispatch.max_inflight / 4",
   AK_AT(ak_dispatch_tenant_cfg_t, max_inflight)},
  {.key = "max_inflight_bytes", .type = AK_OPT_INT, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN,
   .doc = "stored bytes of those rows, the same way (alone: dispatch.max_inflight_bytes less this); "
          "null = dispatch.max_inflight_bytes / 4",
   AK_AT(ak_dispatch_tenant_cfg_t, max_inflight_bytes)},
  {.key = "concurrency", .type = AK_OPT_INT, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN,
   .doc = "attempts in flight for one tenant while another tenant waits; alone, a tenant may use "
          "dispatch.concurrency less this reserve; null = dispatch.concurrency / 2",
   AK_AT(ak_dispatch_tenant_cfg_t, concurrency)},
  {0},
};

static const ak_opt_t dispatch_rows[] = {
  {.key = "batch", .type = AK_OPT_INT, .def = "128", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "delivery rows claimed per scan", AK_AT(ak_dispatch_cfg_t, batch)},
  {.key = "concurrency", .type = AK_OPT_INT, .def = "32", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "attempts in flight on the node", AK_AT(ak_dispatch_cfg_t, concurrency)},
  {.key = "max_inflight", .type = AK_OPT_INT, .def = "4096", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "claimed, unfinished rows; claiming stops when full", AK_AT(ak_dispatch_cfg_t, max_inflight)},
  {.key = "max_inflight_bytes", .type = AK_OPT_INT, .def = "134217728", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "stored hook bytes of those rows; claiming stops when full", AK_AT(ak_dispatch_cfg_t, max_inflight_bytes)},
  {.key = "attempt_timeout_ms", .type = AK_OPT_INT, .def = "30000", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "an attempt running longer counts as a transient failure", AK_AT(ak_dispatch_cfg_t, attempt_timeout_ms)},
  {.key = "sink_concurrency", .type = AK_OPT_INT, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN,
   .doc = "attempts in flight per sink key {source, sink index, type}; null = no cap of its own",
   AK_AT(ak_dispatch_cfg_t, sink_concurrency)},
  {.key = "breaker_failures", .type = AK_OPT_INT, .def = "5", .min = 0, .flags = AK_OPTF_HAS_MIN,
   .doc = "consecutive transient failures that open a sink key's breaker; 0 = no breaker",
   AK_AT(ak_dispatch_cfg_t, breaker_failures)},
  {.key = "breaker_open_ms", .type = AK_OPT_INT, .def = "30000", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "first open period of a breaker", AK_AT(ak_dispatch_cfg_t, breaker_open_ms)},
  {.key = "breaker_max_open_ms", .type = AK_OPT_INT, .def = "300000", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "the open period doubles after each failed probe, up to this; at least breaker_open_ms",
   AK_AT(ak_dispatch_cfg_t, breaker_max_open_ms)},
  {.key = "retry", .type = AK_OPT_MAP, .children = dispatch_retry_rows, .doc = "retry policy (dispatch-wide)",
   AK_AT(ak_dispatch_cfg_t, retry)},
  {.key = "tenants", .type = AK_OPT_MAP, .children = dispatch_tenant_rows,
   .doc = "the share of the dispatch window one tenant may hold", AK_AT(ak_dispatch_cfg_t, tenants)},
  {0},
};

/* The scheduler keeps these in an int. */
static void check_int_range(ak_check_t *c, const json_t *obj, const char *key, const char *label) {
  int64_t v;
  if (ak_check_int_at(obj, key, &v) && v > INT_MAX)
    ak_check_error(c, "%s must be at most %d, got %lld", label, INT_MAX, (long long)v);
}

/* Keys bounded by another key of dispatch, and the tenant window: a null resolves to a
 * share of the node's window, so that one tenant whose sink is slow cannot hold every
 * claim and slot of the node; an explicit value may not exceed the node's own. */
static void dispatch_check(ak_check_t *c, json_t *d, json_t *root) {
  (void)root;
  int64_t conc = 0, v = 0, lo = 0;
  bool have_conc = ak_check_int_at(d, "concurrency", &conc);
  if (have_conc && ak_check_int_at(d, "sink_concurrency", &v) && v > conc)
    ak_check_error(c, "dispatch.sink_concurrency must be between 1 and %lld (dispatch.concurrency), got %lld",
                   (long long)conc, (long long)v);
  check_int_range(c, d, "breaker_failures", "dispatch.breaker_failures");
  if (ak_check_int_at(d, "breaker_open_ms", &lo) && ak_check_int_at(d, "breaker_max_open_ms", &v) && v < lo)
    ak_check_error(c, "dispatch.breaker_max_open_ms must be at least %lld (dispatch.breaker_open_ms), got %lld",
                   (long long)lo, (long long)v);
  json_t *retry = json_object_get(d, "retry");
  if (ak_check_int_at(retry, "base_ms", &lo) && ak_check_int_at(retry, "max_ms", &v) && v < lo)
    ak_check_error(c, "dispatch.retry.max_ms must be at least %lld (dispatch.retry.base_ms), got %lld",
                   (long long)lo, (long long)v);
  check_int_range(c, retry, "max_attempts", "dispatch.retry.max_attempts");

  json_t *tenants = json_object_get(d, "tenants");
  if (!json_is_object(tenants)) return;
  static const struct { const char *key; int64_t div; } share[] = {
    {"max_inflight", 4}, {"max_inflight_bytes", 4}, {"concurrency", 2},
  };
  for (size_t i = 0; i < sizeof share / sizeof share[0]; i++) {
    int64_t global;
    if (!ak_check_int_at(d, share[i].key, &global)) continue;
    json_t *tv = json_object_get(tenants, share[i].key);
    if (json_is_null(tv)) {
      int64_t derived = global / share[i].div;
      json_object_set_new(tenants, share[i].key, json_integer(derived < 1 ? 1 : derived));
    } else if (ak_check_int_at(tenants, share[i].key, &v) && v > global) {
      ak_check_error(c, "dispatch.tenants.%s must be between 1 and %lld (dispatch.%s), got %lld", share[i].key,
                     (long long)global, share[i].key, (long long)v);
    }
  }
}

const ak_dispatch_cfg_t *ak_dispatch_cfg(const ak_config_t *cfg) { return ak_config_of(cfg, &ak_mod_dispatch); }

static int dispatch_open(ak_instance_t *inst, char **err) {
  char derr[512] = "";
  inst->dispatch = ak_dispatch_new(inst, derr, sizeof derr);
  if (inst->dispatch) return 0;
  ak_log(AK_LOG_ERROR, "dispatch", "cannot build the sinks", "reason=\"%s\"", derr);
  *err = strdup(derr);
  return AK_MODULE_BAD_CONFIG;
}

/* Before the writer starts (the writer comes later in the table): the due-index scan and
 * the commit notices must not both count a row. */
static int dispatch_start(ak_instance_t *inst, char **err) {
  char derr[512] = "";
  if (ak_dispatch_start(inst->dispatch, derr, sizeof derr) == 0) return 0;
  ak_log(AK_LOG_ERROR, "dispatch", "cannot start the dispatcher", "reason=\"%s\"", derr);
  *err = strdup(derr);
  return AK_MODULE_FAILED;
}

/* Deliveries in flight get a few seconds to settle; what is still claimed stays due. */
static void dispatch_stop(ak_instance_t *inst) { ak_dispatch_stop(inst->dispatch, 5000); }

static void dispatch_close(ak_instance_t *inst) {
  ak_dispatch_free(inst->dispatch);
  inst->dispatch = NULL;
}

const ak_module_t ak_mod_dispatch = {
  .name = "dispatch",
  .section = "dispatch",
  .doc = "delivery scheduler",
  .options = dispatch_rows,
  .cfg_size = sizeof(ak_dispatch_cfg_t),
  .check = dispatch_check,
  .roles = AK_ROLE_DISPATCH,
  .open = dispatch_open,
  .start = dispatch_start,
  .stop = dispatch_stop,
  .close = dispatch_close,
};
