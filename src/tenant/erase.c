/* Tenant erase (erase.h, docs/erase.md): the closing set, the job thread and its stages,
 * the progress rows (m:erase:<tenant>) and the tombstones (m:erased:<tenant>).
 *
 * Locks: `mu` guards the closing list (tenants whose erase has not finished, in the order
 * their jobs run: the first is the one running) and `stop`; `nclosing` mirrors the list's
 * length so the edge and the dispatcher pay nothing while no erase runs. Progress rows are
 * written by the job thread only (ak_erase_start writes the first under `mu`, before the
 * tenant joins the list). Stages that touch the dispatcher's state (drain, hooks) run on
 * the dispatch thread through ak_dispatch_call, so they never race its claims, outcome
 * writes or reclaim passes. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "tenant/erase.h"
#include "blob/blob.h"
#include "core/clock.h"
#include "core/envelope.h"
#include "core/ids.h"
#include "core/log.h"
#include "core/sources.h"
#include "dispatch/dispatch.h"
#include "edge/quota.h"
#include "fleet/fleet.h"
#include "queue/dedupe.h"
#include "queue/dedupe_record.h"
#include "queue/quarantine.h"
#include "queue/writer.h"
#include "routes/routes.h"
#include "routes/table.h"
#include "sinks/claimpack.h"
#include "store/batch.h"
#include "store/keys.h"
#include "store/store.h"

#define HOOK_CHUNK 1024   /* hooks one step of the hooks stage reads, at most */
#define ROW_CHUNK 1024    /* deletes one batch of exception rows holds, at most */

const char *const ak_erase_stage_names[AK_ERASE_STAGES] = {
    "close", "drain", "sources", "rate_limit", "hooks", "quarantine", "dedupe",
    "claims", "fleet", "routes", "lifecycle", "compact", "tombstone"};

struct ak_erase {
  ak_instance_t *inst;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  char **closing; /* under mu */
  size_t n, cap;
  _Atomic size_t nclosing;
  bool stop; /* under mu */
  bool started;
  pthread_t thread;
  const char *pause_at; /* test builds: ANKUSA_TEST_ERASE_PAUSE_AT */
};

static ak_erase_t *erase_of(ak_instance_t *inst) { return inst ? inst->erase : NULL; }

/* ------------------------------------------------------------ the closing set ---- */

static bool closing_has_locked(const ak_erase_t *e, const char *t, size_t len) {
  for (size_t i = 0; i < e->n; i++)
    if (strlen(e->closing[i]) == len && memcmp(e->closing[i], t, len) == 0) return true;
  return false;
}

static bool closing_has(ak_erase_t *e, const char *t, size_t len) {
  if (!e || atomic_load(&e->nclosing) == 0) return false;
  pthread_mutex_lock(&e->mu);
  bool r = closing_has_locked(e, t, len);
  pthread_mutex_unlock(&e->mu);
  return r;
}

/* Under mu. 0, or -1 out of memory. */
static int closing_add_locked(ak_erase_t *e, const char *t) {
  if (closing_has_locked(e, t, strlen(t))) return 0;
  if (e->n == e->cap) {
    size_t nc = e->cap ? e->cap * 2 : 4;
    char **v = realloc(e->closing, nc * sizeof *v);
    if (!v) return -1;
    e->closing = v;
    e->cap = nc;
  }
  if (!(e->closing[e->n] = strdup(t))) return -1;
  e->n++;
  atomic_store(&e->nclosing, e->n);
  return 0;
}

static void closing_remove(ak_erase_t *e, const char *t) {
  pthread_mutex_lock(&e->mu);
  for (size_t i = 0; i < e->n; i++) {
    if (strcmp(e->closing[i], t) != 0) continue;
    free(e->closing[i]);
    memmove(e->closing + i, e->closing + i + 1, (e->n - i - 1) * sizeof *e->closing);
    e->n--;
    break;
  }
  atomic_store(&e->nclosing, e->n);
  pthread_mutex_unlock(&e->mu);
}

bool ak_tenant_erasing(ak_instance_t *inst, const char *tenant, size_t len) {
  return closing_has(erase_of(inst), tenant, len);
}

static bool closed_cb(void *ctx, const char *tenant, size_t len) { return closing_has(ctx, tenant, len); }

/* ------------------------------------------------------------ progress rows ---- */

static size_t meta_key(char *out, size_t cap, const char *pfx, const char *tenant) {
  int n = snprintf(out, cap, "%s%s", pfx, tenant);
  return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

static json_t *row_get(ak_store_t *st, const char *pfx, const char *tenant, int *rc) {
  char k[300];
  size_t kl = meta_key(k, sizeof k, pfx, tenant);
  char *v = NULL;
  size_t vl = 0;
  *rc = kl ? ak_store_get(st, AK_CF_DEFAULT, k, kl, &v, &vl) : 1;
  if (*rc != 0) return NULL;
  json_t *j = json_loadb(v, vl, 0, NULL);
  free(v);
  if (!j) *rc = -1;
  return j;
}

/* Synced put of the progress row. 0 or -1. */
static int progress_put(ak_instance_t *inst, const char *tenant, json_t *p) {
  ak_store_t *st = inst->store;
  char k[300];
  size_t kl = meta_key(k, sizeof k, AK_KEY_ERASE, tenant);
  char *s = json_dumps(p, JSON_COMPACT | JSON_SORT_KEYS);
  if (!kl || !s) {
    free(s);
    return -1;
  }
  int rc = -1;
  if (ak_store_pin(st) == 0) {
    ak_batch_t *wb = ak_batch_new(st);
    if (wb) {
      ak_batch_put(wb, AK_CF_DEFAULT, k, kl, s, strlen(s));
      ak_wf_class_t cls;
      char *err = NULL;
      rc = ak_store_write_pinned(st, wb, true, &cls, &err);
      free(err);
      ak_batch_free(wb);
    }
    ak_store_unpin(st);
  }
  free(s);
  return rc;
}

int ak_tenant_erased(ak_instance_t *inst, const char *tenant, size_t len, int64_t *at_ms) {
  if (!inst || !inst->store || len == 0 || len > 255) return 0;
  char t[256];
  memcpy(t, tenant, len);
  t[len] = 0;
  int rc;
  json_t *j = row_get(inst->store, AK_KEY_ERASED, t, &rc);
  if (rc != 0) return rc < 0 ? -1 : 0;
  if (at_ms) *at_ms = json_integer_value(json_object_get(j, "finished_at"));
  json_decref(j);
  return 1;
}

int ak_erase_progress(ak_instance_t *inst, const char *tenant, json_t **out) {
  *out = NULL;
  int rc;
  json_t *j = row_get(inst->store, AK_KEY_ERASE, tenant, &rc);
  if (rc == 1) j = row_get(inst->store, AK_KEY_ERASED, tenant, &rc);
  if (rc != 0) return rc;
  *out = j;
  return 0;
}

static void count_add(json_t *p, const char *name, int64_t n) {
  json_t *c = json_object_get(p, "counts");
  if (!c) return;
  json_object_set_new(c, name, json_integer(json_integer_value(json_object_get(c, name)) + n));
}

/* ------------------------------------------------------------------ stages ---- */

typedef struct job {
  ak_erase_t *e;
  const char *tenant;
  size_t tlen;
  json_t *p; /* the progress row */
} job_t;

/* 0 done, -1 not now (retried), 1 stopped */
typedef int (*stage_fn)(job_t *j);

static bool stopping(ak_erase_t *e) {
  pthread_mutex_lock(&e->mu);
  bool s = e->stop;
  pthread_mutex_unlock(&e->mu);
  return s;
}

/* Sleeps ms unless the module stops. */
static void nap(ak_erase_t *e, int64_t ms) {
  pthread_mutex_lock(&e->mu);
  if (!e->stop) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&e->cv, &e->mu, &ts);
  }
  pthread_mutex_unlock(&e->mu);
}

/* The tenant joined the closing set when the job was started or loaded: new requests are
 * refused. Those that took their queue share before are waited for (committed or failed,
 * within the writer's record deadline), so no hook of the tenant is committed after this. */
static int stage_close(job_t *j) {
  ak_writer_t *w = j->e->inst->writer;
  if (!w) return 0;
  while (ak_writer_share_held(w, j->tenant, j->tlen) > 0) {
    if (stopping(j->e)) return 1;
    nap(j->e, 20);
  }
  return 0;
}

typedef struct {
  const char *tenant;
  size_t tlen;
  int64_t busy;
} busy_call_t;

static void busy_cb(ak_dispatch_t *d, void *ctx) {
  busy_call_t *b = ctx;
  b->busy = ak_dispatch_tenant_busy(d, b->tenant, b->tlen);
}

/* Until the dispatcher holds no row of the tenant: running attempts finish (or time out:
 * dispatch.attempt_timeout_ms bounds the wait) and settle without a row, its deliveries
 * still on the hook log are settled undelivered. */
static int stage_drain(job_t *j) {
  ak_dispatch_t *d = j->e->inst->dispatch;
  if (!d) return 0;
  for (;;) {
    busy_call_t b = {j->tenant, j->tlen, 0};
    if (ak_dispatch_call(d, busy_cb, &b) != 0) return stopping(j->e) ? 1 : -1;
    if (b.busy == 0) return 0;
    if (stopping(j->e)) return 1;
    nap(j->e, 50);
  }
}

typedef struct {
  char **keys;
  size_t *lens;
  size_t n, cap;
  bool oom;
} keys_t;

static int keys_add(keys_t *ks, const char *k, size_t kl) {
  if (ks->n == ks->cap) {
    size_t nc = ks->cap ? ks->cap * 2 : 16;
    char **v = realloc(ks->keys, nc * sizeof *v);
    size_t *l = v ? realloc(ks->lens, nc * sizeof *l) : NULL;
    if (v) ks->keys = v;
    if (!l) {
      ks->oom = true;
      return 1;
    }
    ks->lens = l;
    ks->cap = nc;
  }
  char *c = malloc(kl ? kl : 1);
  if (!c) {
    ks->oom = true;
    return 1;
  }
  memcpy(c, k, kl);
  ks->keys[ks->n] = c;
  ks->lens[ks->n++] = kl;
  return 0;
}

static void keys_free(keys_t *ks) {
  for (size_t i = 0; i < ks->n; i++) free(ks->keys[i]);
  free(ks->keys);
  free(ks->lens);
  memset(ks, 0, sizeof *ks);
}

static int collect_cb(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  (void)v;
  (void)vl;
  keys_t *ks = ctx;
  return ks->n >= ROW_CHUNK ? 1 : keys_add(ks, k, kl);
}

/* Synced delete of the keys (one family). 0 or -1. */
static int delete_keys(ak_store_t *st, int cf, const keys_t *ks) {
  if (!ks->n) return 0;
  if (ak_store_pin(st) != 0) return -1;
  ak_batch_t *wb = ak_batch_new(st);
  int rc = -1;
  if (wb) {
    for (size_t i = 0; i < ks->n; i++) ak_batch_delete(wb, cf, ks->keys[i], ks->lens[i]);
    ak_wf_class_t cls;
    char *err = NULL;
    rc = ak_store_write_pinned(st, wb, true, &cls, &err);
    free(err);
    ak_batch_free(wb);
  }
  ak_store_unpin(st);
  return rc;
}

/* Its API-managed sources: their store rows (s:<tenant>\0<name>) first, then the served
 * table, under the table's writer lock (no admin change interleaves). With the fleet's
 * Redis store each is deleted there (audited, published to every node). */
static int stage_sources(job_t *j) {
  ak_instance_t *inst = j->e->inst;
  char pfx[300];
  size_t pl = meta_key(pfx, sizeof pfx, AK_KEY_SOURCE, j->tenant);
  pfx[pl++] = 0;
  int rc = 0;
  if (inst->sources) ak_sources_write_lock(inst->sources);
  for (;;) {
    keys_t ks = {0};
    if (ak_store_scan(inst->store, AK_CF_DEFAULT, pfx, pl, collect_cb, &ks) != 0 || ks.oom ||
        delete_keys(inst->store, AK_CF_DEFAULT, &ks) != 0) {
      keys_free(&ks);
      rc = -1;
      break;
    }
    size_t n = ks.n;
    count_add(j->p, "sources", (int64_t)n);
    keys_free(&ks);
    if (n < ROW_CHUNK) break;
  }
  if (rc == 0 && inst->sources) {
    ak_source_t **v = NULL;
    size_t n = ak_sources_list(inst->sources, j->tenant, &v);
    for (size_t i = 0; i < n && rc == 0; i++) {
      if (v[i]->origin != AK_SOURCE_API) continue;
      if (inst->erase_shared_source) { /* the fleet's Redis store: deleted there, for every node */
        if (inst->erase_shared_source(inst, j->tenant, v[i]->cfg.id) != 0) rc = -1;
        else count_add(j->p, "sources", 1);
      } else {
        ak_source_release(ak_sources_remove(inst->sources, v[i]->cfg.id));
      }
    }
    ak_sources_list_free(v, n);
  }
  if (inst->sources) ak_sources_write_unlock(inst->sources);
  return rc;
}

static int stage_rate_limit(job_t *j) {
  ak_instance_t *inst = j->e->inst;
  if (!inst->quota) return 0;
  int rc = ak_quota_delete(inst->quota, j->tenant, NULL);
  if (rc == 0) count_add(j->p, "rate_limits", 1);
  return rc < 0 ? -1 : 0;
}

/* ---- hooks and their delivery state ---- */

typedef struct {
  job_t *j;
  uint64_t from;     /* the next hook seq to read */
  bool rows_done;    /* the exception rows (due, dead, lane) are gone */
  bool done;
  int rc;
  uint64_t hooks, rows, dead;
  uint64_t last_seq; /* the last hook deleted, +1 (0: none) */
  bool cursor_gone;
} hooks_step_t;

typedef struct {
  const char *tenant;
  size_t tlen;
  keys_t idx;      /* index keys to delete */
  keys_t dels;     /* delivery keys to delete */
  uint64_t dead;
} xscan_t;

static int dead_cb(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  xscan_t *x = ctx;
  ak_dead_entry_t e;
  if (kl != AK_DEAD_KEY_LEN || ak_dead_entry_decode((const uint8_t *)v, vl, &e) != 0) return 0;
  if (e.tenant_len != x->tlen || memcmp(e.tenant, x->tenant, x->tlen) != 0) return 0;
  uint8_t dk[AK_DELIVERY_KEY_LEN];
  ak_key_delivery(dk, ak_get_u64((const uint8_t *)k + 1 + 8), ak_get_u16((const uint8_t *)k + 1 + 16));
  if (keys_add(&x->idx, k, kl) || keys_add(&x->dels, (const char *)dk, sizeof dk)) return 1;
  x->dead++;
  return x->idx.n >= ROW_CHUNK ? 1 : 0;
}

/* due keys 'd' <tenant> ... and lane rows 'o' <tenant> ...: the key ends in seq:64
 * sink:16 (due) or sink:16 seq:64 (lane) */
static int due_cb(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  (void)v;
  (void)vl;
  xscan_t *x = ctx;
  uint8_t dk[AK_DELIVERY_KEY_LEN];
  if (kl < 10) return 0;
  if (k[0] == AK_IDX_DUE) ak_key_delivery(dk, ak_get_u64((const uint8_t *)k + kl - 10), ak_get_u16((const uint8_t *)k + kl - 2));
  else ak_key_delivery(dk, ak_get_u64((const uint8_t *)k + kl - 8), ak_get_u16((const uint8_t *)k + kl - 10));
  if (keys_add(&x->idx, k, kl) || keys_add(&x->dels, (const char *)dk, sizeof dk)) return 1;
  return x->idx.n >= ROW_CHUNK ? 1 : 0;
}

/* One batch of exception rows: 0 (none left of this kind when *more is false), -1. */
static int rows_step(ak_store_t *st, const char *tenant, size_t tlen, int kind, uint64_t *rows, uint64_t *dead,
                     bool *more) {
  xscan_t x = {.tenant = tenant, .tlen = tlen};
  int rc;
  if (kind == 0) {
    const char xp = AK_IDX_DEAD;
    rc = ak_store_scan(st, AK_CF_INDEX, &xp, 1, dead_cb, &x);
  } else {
    uint8_t pfx[2 + 255];
    pfx[0] = kind == 1 ? AK_IDX_DUE : AK_IDX_LANE;
    pfx[1] = (uint8_t)tlen;
    memcpy(pfx + 2, tenant, tlen);
    rc = ak_store_scan(st, AK_CF_INDEX, pfx, 2 + tlen, due_cb, &x);
  }
  if (rc == 0 && (x.idx.oom || x.dels.oom)) rc = -1;
  if (rc == 0 && x.idx.n) {
    rc = -1;
    if (ak_store_pin(st) == 0) {
      ak_batch_t *wb = ak_batch_new(st);
      if (wb) {
        for (size_t i = 0; i < x.idx.n; i++) ak_batch_delete(wb, AK_CF_INDEX, x.idx.keys[i], x.idx.lens[i]);
        for (size_t i = 0; i < x.dels.n; i++) ak_batch_delete(wb, AK_CF_DELIVERIES, x.dels.keys[i], x.dels.lens[i]);
        ak_wf_class_t cls;
        char *err = NULL;
        rc = ak_store_write_pinned(st, wb, true, &cls, &err);
        free(err);
        ak_batch_free(wb);
      }
      ak_store_unpin(st);
    }
  }
  if (rc == 0) {
    *rows += x.idx.n;
    *dead += x.dead;
  }
  *more = rc == 0 && x.idx.n >= ROW_CHUNK;
  keys_free(&x.idx);
  keys_free(&x.dels);
  return rc;
}

static int dels_cb(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  (void)v;
  (void)vl;
  return keys_add(ctx, k, kl);
}

/* One step: the exception rows first (once), then up to HOOK_CHUNK hooks from s->from.
 * On the dispatch thread when there is a dispatcher (d), else on the job's. */
static void hooks_step(ak_dispatch_t *d, void *ctx) {
  hooks_step_t *s = ctx;
  job_t *j = s->j;
  ak_instance_t *inst = j->e->inst;
  ak_store_t *st = inst->store;
  s->rc = 0;
  if (!s->rows_done) {
    uint64_t rows = 0, dead = 0;
    for (int kind = 0; kind < 3 && s->rc == 0; kind++) {
      bool more = true;
      while (more && s->rc == 0) s->rc = rows_step(st, j->tenant, j->tlen, kind, &rows, &dead, &more);
    }
    s->rows += rows;
    s->dead += dead;
    if (s->rc != 0) return;
    s->rows_done = true;
    if (d) ak_dispatch_erased(d, j->tenant, j->tlen, 0, dead);
  }
  /* the reclaim pass counts a deleted hook at or above its progress off the hook count
   * itself (its group marker names it); below it, the hook was kept by a row: counted here */
  uint64_t counted_below = 0;
  if (d) {
    counted_below = ak_dispatch_reclaimed_to(d);
  } else {
    char *v = NULL;
    size_t vl = 0;
    if (ak_store_get(st, AK_CF_DEFAULT, AK_KEY_RECLAIMED, strlen(AK_KEY_RECLAIMED), &v, &vl) == 0 && vl == 8)
      counted_below = ak_get_u64((const uint8_t *)v);
    free(v);
  }
  if (ak_store_pin(st) != 0) {
    s->rc = -1;
    return;
  }
  ak_store_cursor_t *c = ak_store_cursor_new_pinned(st, AK_CF_HOOKS, false);
  ak_batch_t *wb = c ? ak_batch_new(st) : NULL;
  if (!c || !wb) {
    ak_store_cursor_free(c);
    ak_batch_free(wb);
    ak_store_unpin(st);
    s->rc = -1;
    return;
  }
  uint8_t k[AK_HOOK_KEY_LEN];
  ak_key_hook(k, s->from);
  size_t seen = 0;
  uint64_t hooks = 0, counted = 0, next = s->from;
  const uint8_t *idk = ak_store_id_key(st);
  bool end = true;
  for (ak_store_cursor_seek(c, k, sizeof k); ak_store_cursor_valid(c); ak_store_cursor_next(c)) {
    if (seen++ >= HOOK_CHUNK) {
      end = false;
      break;
    }
    size_t kl, vl;
    const char *key = ak_store_cursor_key(c, &kl);
    if (kl != AK_HOOK_KEY_LEN) continue;
    uint64_t seq = ak_get_u64((const uint8_t *)key);
    next = seq + 1;
    const char *v = ak_store_cursor_value(c, &vl);
    ak_envelope_t env;
    if (ak_envelope_decode((const uint8_t *)v, vl, &env) != 0) continue;
    bool mine = env.tenant_len == j->tlen && memcmp(env.tenant, j->tenant, j->tlen) == 0;
    uint8_t id[16];
    memcpy(id, env.id, 16);
    ak_envelope_clear(&env);
    if (!mine) continue;
    ak_batch_delete(wb, AK_CF_HOOKS, key, kl);
    uint8_t ik[AK_ID_KEY_LEN], gk[AK_GROUP_KEY_LEN];
    if (!idk || ak_uuid7_unseal(idk, id) != seq) {
      ak_key_id(ik, id);
      ak_batch_delete(wb, AK_CF_INDEX, ik, sizeof ik);
      ak_key_unsealed(gk, seq);
      ak_batch_delete(wb, AK_CF_INDEX, gk, sizeof gk);
    }
    gk[0] = AK_IDX_CLAIM;
    ak_put_u64(gk + 1, seq);
    ak_batch_delete(wb, AK_CF_INDEX, gk, sizeof gk);
    gk[0] = AK_IDX_RECLAIM;
    ak_batch_delete(wb, AK_CF_INDEX, gk, sizeof gk);
    /* delivery rows left (a row whose index entry was gone already) */
    keys_t dk = {0};
    uint8_t sp[8];
    ak_put_u64(sp, seq);
    if (ak_store_scan(st, AK_CF_DELIVERIES, sp, sizeof sp, dels_cb, &dk) != 0 || dk.oom) {
      keys_free(&dk);
      s->rc = -1;
      break;
    }
    for (size_t i = 0; i < dk.n; i++) ak_batch_delete(wb, AK_CF_DELIVERIES, dk.keys[i], dk.lens[i]);
    s->rows += dk.n;
    keys_free(&dk);
    hooks++;
    if (seq + 1 > s->last_seq) s->last_seq = seq + 1;
    if (seq < counted_below) counted++;
  }
  if (s->rc == 0 && ak_store_cursor_status(c) != 0) s->rc = -1;
  ak_store_cursor_free(c);
  if (s->rc == 0 && hooks) {
    if (d) {
      ak_dispatch_count_erased(d, wb, counted);
    } else if (counted) {
      char *v = NULL;
      size_t vl = 0;
      uint64_t was = 0;
      if (ak_store_get_pinned(st, AK_CF_DEFAULT, AK_KEY_HOOK_COUNT_ERASED, strlen(AK_KEY_HOOK_COUNT_ERASED), &v,
                              &vl) == 0 &&
          vl == 8)
        was = ak_get_u64((const uint8_t *)v);
      free(v);
      uint8_t nv[8];
      ak_put_u64(nv, was - counted);
      ak_batch_put(wb, AK_CF_DEFAULT, AK_KEY_HOOK_COUNT_ERASED, strlen(AK_KEY_HOOK_COUNT_ERASED), nv, 8);
    }
    ak_wf_class_t cls;
    char *err = NULL;
    s->rc = ak_store_write_pinned(st, wb, true, &cls, &err);
    free(err);
    if (s->rc == 0) {
      if (d) ak_dispatch_erased(d, j->tenant, j->tlen, counted, 0);
      else if (counted && inst->writer) ak_writer_note_reclaimed(inst->writer, counted);
    }
  }
  ak_batch_free(wb);
  ak_store_unpin(st);
  if (s->rc != 0) return;
  s->hooks += hooks;
  s->from = next;
  s->done = end;
}

/* Once the reclaim pass is past the tenant's last hook (its group markers, which name it,
 * are gone), its log cursor dc:<tenant> goes too. */
static void cursor_step(ak_dispatch_t *d, void *ctx) {
  hooks_step_t *s = ctx;
  ak_store_t *st = s->j->e->inst->store;
  s->rc = 0;
  if (ak_dispatch_reclaimed_to(d) < s->last_seq) return;
  if (ak_store_pin(st) != 0) {
    s->rc = -1;
    return;
  }
  ak_batch_t *wb = ak_batch_new(st);
  s->rc = -1;
  if (wb) {
    ak_dispatch_forget_cursor(d, s->j->tenant, s->j->tlen, wb);
    ak_wf_class_t cls;
    char *err = NULL;
    s->rc = ak_store_write_pinned(st, wb, true, &cls, &err);
    free(err);
    ak_batch_free(wb);
  }
  ak_store_unpin(st);
  if (s->rc == 0) s->cursor_gone = true;
}

static int stage_hooks(job_t *j) {
  ak_dispatch_t *d = j->e->inst->dispatch;
  hooks_step_t s = {.j = j};
  while (!s.done) {
    if (stopping(j->e)) return 1;
    if (d) {
      if (ak_dispatch_call(d, hooks_step, &s) != 0) return stopping(j->e) ? 1 : -1;
    } else {
      hooks_step(NULL, &s);
    }
    if (s.rc != 0) return -1;
  }
  while (d && !s.cursor_gone) {
    if (ak_dispatch_call(d, cursor_step, &s) != 0) return stopping(j->e) ? 1 : -1;
    if (s.rc != 0) return -1;
    if (s.cursor_gone) break;
    if (stopping(j->e)) return 1;
    nap(j->e, 100);
  }
  count_add(j->p, "hooks", (int64_t)s.hooks);
  count_add(j->p, "delivery_rows", (int64_t)s.rows);
  count_add(j->p, "dead_letters", (int64_t)s.dead);
  return 0;
}

static int stage_quarantine(job_t *j) {
  ak_instance_t *inst = j->e->inst;
  if (!inst->pen) return 0;
  const char *ids[1] = {j->tenant};
  ak_tenant_scope_t scope = {ids, 1};
  for (;;) {
    ak_pen_filter_t f;
    ak_pen_filter_init(&f, 1000);
    f.tenants = &scope;
    int64_t deleted = 0, bytes = 0;
    if (ak_pen_purge(inst->pen, inst->store, &f, &deleted, &bytes) != 0) return -1;
    count_add(j->p, "quarantined", deleted);
    if (deleted == 0) return 0;
    if (stopping(j->e)) return 1;
  }
}

/* Its dedupe keys, inside records shared with other tenants too (queue/dedupe.h). Its
 * pending claims were settled before (close waited for its queue shares). */
static int stage_dedupe(job_t *j) {
  ak_dedupe_t *dx = j->e->inst->dedupe;
  if (!dx) return 0;
  uint8_t from[AK_DEDUPE_EKEY_MAX + 1];
  size_t from_len = 0;
  do {
    long n = ak_dedupe_erase_tenant(dx, j->tenant, j->tlen, 256, from, &from_len);
    if (n < 0) return -1;
    count_add(j->p, "dedupe_keys", n);
    if (stopping(j->e)) return 1;
  } while (from_len);
  return 0;
}

static int stage_claims(job_t *j) {
  ak_instance_t *inst = j->e->inst;
  if (!inst->claims) return 0;
  char pfx[300];
  snprintf(pfx, sizeof pfx, "claims/tenant=%s/", j->tenant);
  for (size_t i = 0; i < inst->claims->n; i++) {
    ak_blob_t *b = inst->claims->v[i];
    for (;;) {
      char err[512] = "";
      ak_blob_list_t l = {0};
      if (ak_blob_list(b, pfx, NULL, 500, &l, err, sizeof err) != AK_BLOB_OK) {
        ak_log(AK_LOG_WARNING, "erase", "claim store listing failed; retried", "tenant=%s error=\"%s\"", j->tenant, err);
        return -1;
      }
      size_t n = l.n;
      for (size_t k = 0; k < l.n; k++) {
        if (ak_blob_delete(b, l.keys[k], err, sizeof err) != AK_BLOB_OK) {
          ak_blob_list_clear(&l);
          ak_log(AK_LOG_WARNING, "erase", "claim object delete failed; retried", "tenant=%s error=\"%s\"", j->tenant,
                 err);
          return -1;
        }
      }
      ak_blob_list_clear(&l);
      count_add(j->p, "claims", (int64_t)n);
      if (n == 0) break;
      if (stopping(j->e)) return 1;
    }
    /* LocalFS: the folders named after the tenant go too */
    char err[512] = "";
    pfx[strlen(pfx) - 1] = 0;
    if (ak_blob_prune(b, pfx, err, sizeof err) != AK_BLOB_OK) {
      ak_log(AK_LOG_WARNING, "erase", "claim folders not removed; retried", "tenant=%s error=\"%s\"", j->tenant, err);
      return -1;
    }
    pfx[strlen(pfx)] = '/';
  }
  return 0;
}

static int stage_fleet(job_t *j) {
  ak_instance_t *inst = j->e->inst;
  if (inst->fleet && ak_fleet_rate_scope(inst->fleet)) ak_fleet_forget(inst->fleet, j->tenant, j->tlen);
  return 0;
}

/* rt:<id> rows of the tenant (a route's tenant: routes/table.h's rule), for a node whose
 * guard is off: the rows stay in its store from a time it was on */
typedef struct {
  const char *tenant;
  keys_t ks;
} route_rows_t;

static int route_row_cb(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  route_rows_t *rr = ctx;
  json_t *j = json_loadb(v, vl, 0, NULL);
  char err[160];
  ak_rroute_t *r = j ? ak_rroute_from_json(j, NULL, err, sizeof err) : NULL;
  bool mine = r && r->tenant && !strcmp(r->tenant, rr->tenant);
  ak_rroute_unref(r);
  json_decref(j);
  return mine ? keys_add(&rr->ks, k, kl) : 0;
}

/* Its routes. With the guard on, each is deleted through the route set's one change path
 * (its store, local or shared, and the served set; a route.delete audit row, and its
 * lifecycle event, as any delete); with it off, its rows in this node's store go. */
static int erase_routes(job_t *j) {
  ak_instance_t *inst = j->e->inst;
  if (inst->routes) {
    ak_rsnap_t *snap = ak_routes_snapshot(inst->routes);
    int rc = 0;
    for (size_t i = 0; snap && i < snap->n && rc == 0; i++) {
      const ak_rroute_t *r = snap->v[i];
      if (!r->tenant || strcmp(r->tenant, j->tenant)) continue;
      ak_routes_change_t ch = {.op = AK_RCH_DELETE, .id = r->id};
      char err[256] = "";
      ak_routes_rc_t got = ak_routes_change(inst->routes, &ch, err, sizeof err, NULL, NULL);
      if (got == AK_ROUTES_OK) count_add(j->p, "routes", 1);
      else if (got != AK_ROUTES_NOT_FOUND) { /* gone meanwhile is fine; anything else is retried */
        ak_log(AK_LOG_WARNING, "erase", "a route of the tenant could not be deleted; retried", "tenant=%s route=%s "
               "error=\"%s\"", j->tenant, r->id, err);
        rc = -1;
      }
    }
    if (snap) ak_rsnap_unref(snap);
    return rc;
  }
  route_rows_t rr = {.tenant = j->tenant};
  int rc = ak_store_scan(inst->store, AK_CF_DEFAULT, AK_KEY_ROUTE, strlen(AK_KEY_ROUTE), route_row_cb, &rr) != 0 ||
                   rr.ks.oom || delete_keys(inst->store, AK_CF_DEFAULT, &rr.ks) != 0
               ? -1
               : 0;
  if (rc == 0) count_add(j->p, "routes", (int64_t)rr.ks.n);
  keys_free(&rr.ks);
  return rc;
}

/* Its lifecycle entities: the flagged audit rows naming it keep their events (delivered
 * in order, as before) without the entity they carried. */
static int erase_lifecycle(job_t *j) {
  int64_t n = 0;
  if (ak_audit_erase_entities(j->e->inst->audit, j->tenant, &n) != 0) return -1;
  count_add(j->p, "lifecycle_entities", n);
  return 0;
}

/* Deleted values stay in the store's files (and its write-ahead log) until a compaction
 * rewrites them: every family is flushed (a log file goes only once no family holds
 * unflushed data from it) and rewritten, so the tenant's bodies leave this node's disk. */
static int stage_compact(job_t *j) {
  for (int cf = 0; cf < AK_CF_COUNT; cf++) {
    char *err = NULL;
    if (ak_store_compact(j->e->inst->store, cf, &err) != 0) {
      ak_log(AK_LOG_WARNING, "erase", "compaction failed; retried", "tenant=%s error=\"%s\"", j->tenant,
             err ? err : "?");
      free(err);
      return -1;
    }
    if (stopping(j->e)) return 1;
  }
  return 0;
}

/* The tombstone and the audit row in one synced batch, the progress row gone with them. */
static int stage_tombstone(job_t *j) {
  ak_instance_t *inst = j->e->inst;
  ak_store_t *st = inst->store;
  json_object_set_new(j->p, "state", json_string("done"));
  json_object_set_new(j->p, "stage", json_string("done"));
  json_object_set_new(j->p, "finished_at", json_integer(ak_now_ms()));
  char pk[300], tk[300], subject[300];
  size_t pl = meta_key(pk, sizeof pk, AK_KEY_ERASE, j->tenant), tl = meta_key(tk, sizeof tk, AK_KEY_ERASED, j->tenant);
  snprintf(subject, sizeof subject, "tenant:%s", j->tenant);
  char *s = json_dumps(j->p, JSON_COMPACT | JSON_SORT_KEYS);
  if (!s || !pl || !tl || ak_store_pin(st) != 0) {
    free(s);
    return -1;
  }
  int rc = -1;
  ak_batch_t *wb = ak_batch_new(st);
  if (wb) {
    ak_batch_delete(wb, AK_CF_DEFAULT, pk, pl);
    ak_batch_put(wb, AK_CF_DEFAULT, tk, tl, s, strlen(s));
    json_t *detail = json_deep_copy(json_object_get(j->p, "counts"));
    /* the lifecycle event io.ankusa.tenant.deleted: no entity (the row's subject and
     * tenant name it; nothing else of it is left to carry) */
    ak_audit_entry_t ae = {.action = "tenant.delete", .tenant = j->tenant, .subject = subject, .detail = detail,
                           .event = "io.ankusa.tenant.deleted"};
    if (ak_audit_put(inst->audit, wb, &ae) == 0) {
      ak_wf_class_t cls;
      char *err = NULL;
      rc = ak_audit_commit(inst->audit, st, wb, &cls, &err);
      free(err);
    }
    json_decref(detail);
    ak_batch_free(wb);
  }
  ak_store_unpin(st);
  free(s);
  return rc;
}

static const stage_fn stages[AK_ERASE_STAGES] = {
    stage_close, stage_drain,  stage_sources, stage_rate_limit, stage_hooks,     stage_quarantine,
    stage_dedupe, stage_claims, stage_fleet,  erase_routes,     erase_lifecycle, stage_compact, stage_tombstone};

static int stage_of(const char *name) {
  for (int i = 0; i < AK_ERASE_STAGES; i++)
    if (name && strcmp(name, ak_erase_stage_names[i]) == 0) return i;
  return -1;
}

/* ------------------------------------------------------------------ the job ---- */

/* Test builds: ANKUSA_TEST_ERASE_PAUSE_AT=<stage> holds the job before that stage (its
 * progress synced, naming it) until the node stops: a test kills -9 it there. */
static void pause_seam(ak_erase_t *e, int stage) {
  if (!e->pause_at || stage_of(e->pause_at) != stage) return;
  ak_log(AK_LOG_INFO, "erase", "paused (test seam)", "stage=%s", ak_erase_stage_names[stage]);
  while (!stopping(e)) nap(e, 100);
}

static void run_job(ak_erase_t *e, const char *tenant) {
  ak_instance_t *inst = e->inst;
  int rc;
  json_t *p = row_get(inst->store, AK_KEY_ERASE, tenant, &rc);
  if (rc == 1) { /* finished meanwhile (cannot happen: one job thread) */
    closing_remove(e, tenant);
    return;
  }
  if (rc != 0) {
    nap(e, 1000);
    return;
  }
  job_t j = {.e = e, .tenant = tenant, .tlen = strlen(tenant), .p = p};
  if (!json_object_get(p, "counts")) json_object_set_new(p, "counts", json_object());
  int stage = stage_of(json_string_value(json_object_get(p, "stage")));
  if (stage < 0) stage = 0;
  while (stage < AK_ERASE_STAGES) {
    if (stopping(e)) break;
    pause_seam(e, stage);
    if (stopping(e)) break;
    rc = stages[stage](&j);
    if (rc == 1) break;
    if (rc < 0) {
      ak_log(AK_LOG_WARNING, "erase", "stage failed; retried", "tenant=%s stage=%s", tenant,
             ak_erase_stage_names[stage]);
      nap(e, 1000);
      continue;
    }
    if (stage == AK_ERASE_TOMBSTONE) {
      ak_log(AK_LOG_INFO, "erase", "tenant erased", "tenant=%s", tenant);
      closing_remove(e, tenant);
      break;
    }
    stage++;
    json_object_set_new(p, "stage", json_string(ak_erase_stage_names[stage]));
    while (progress_put(inst, tenant, p) != 0 && !stopping(e)) nap(e, 1000);
  }
  json_decref(p);
}

static void *run(void *arg) {
  ak_erase_t *e = arg;
  pthread_setname_np(pthread_self(), "ak-erase");
  ak_store_thread_init();
  for (;;) {
    pthread_mutex_lock(&e->mu);
    while (!e->stop && e->n == 0) pthread_cond_wait(&e->cv, &e->mu);
    if (e->stop) {
      pthread_mutex_unlock(&e->mu);
      break;
    }
    char *t = strdup(e->closing[0]);
    pthread_mutex_unlock(&e->mu);
    if (t) run_job(e, t);
    free(t);
  }
  return NULL;
}

ak_erase_rc_t ak_erase_start(ak_instance_t *inst, const char *tenant, const ak_audit_who_t *who, json_t **progress,
                             json_t **static_sources) {
  ak_erase_t *e = erase_of(inst);
  *progress = NULL;
  *static_sources = NULL;
  if (!e) return AK_ERASE_UNAVAILABLE;
  if (inst->sources) {
    ak_source_t **v = NULL;
    size_t n = ak_sources_list(inst->sources, tenant, &v);
    json_t *names = json_array();
    for (size_t i = 0; i < n; i++)
      if (v[i]->origin == AK_SOURCE_CONFIG) json_array_append_new(names, json_string(v[i]->cfg.id));
    ak_sources_list_free(v, n);
    if (json_array_size(names)) {
      *static_sources = names;
      return AK_ERASE_STATIC_SOURCES;
    }
    json_decref(names);
  }
  pthread_mutex_lock(&e->mu);
  ak_erase_rc_t rc = AK_ERASE_OK;
  if (!closing_has_locked(e, tenant, strlen(tenant))) {
    json_t *p = json_pack("{s:s,s:s,s:s,s:I,s:n,s:{},s:s,s:s}", "tenant", tenant, "state", "running", "stage",
                          ak_erase_stage_names[AK_ERASE_CLOSE], "started_at", (json_int_t)ak_now_ms(), "finished_at",
                          "counts", "actor", who && who->actor ? who->actor : "internal", "request_id",
                          who && who->request_id ? who->request_id : "");
    if (!p || progress_put(inst, tenant, p) != 0 || closing_add_locked(e, tenant) != 0) rc = AK_ERASE_UNAVAILABLE;
    json_decref(p);
    if (rc == AK_ERASE_OK) {
      ak_log(AK_LOG_INFO, "erase", "tenant erase started", "tenant=%s actor=%s request_id=%s", tenant,
             who && who->actor ? who->actor : "internal", who && who->request_id ? who->request_id : "");
      pthread_cond_broadcast(&e->cv);
    }
  }
  pthread_mutex_unlock(&e->mu);
  if (rc == AK_ERASE_OK && ak_erase_progress(inst, tenant, progress) != 0) *progress = NULL;
  return rc;
}

/* ------------------------------------------------------------------ the module ---- */

static int load_cb(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  (void)v;
  (void)vl;
  ak_erase_t *e = ctx;
  size_t pl = strlen(AK_KEY_ERASE);
  if (kl <= pl || kl - pl > 255) return 0;
  char t[256];
  memcpy(t, k + pl, kl - pl);
  t[kl - pl] = 0;
  return closing_add_locked(e, t) != 0 ? 1 : 0;
}

static int erase_open(ak_instance_t *inst, char **err) {
  ak_erase_t *e = calloc(1, sizeof *e);
  if (!e) {
    *err = strdup("out of memory");
    return AK_MODULE_FAILED;
  }
  e->inst = inst;
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
#ifdef AK_TEST_HOOKS
  e->pause_at = getenv("ANKUSA_TEST_ERASE_PAUSE_AT");
#endif
  /* m:erase:<t> only: a tombstone (m:erased:<t>) differs at its 8th byte */
  pthread_mutex_lock(&e->mu);
  int rc = ak_store_scan(inst->store, AK_CF_DEFAULT, AK_KEY_ERASE, strlen(AK_KEY_ERASE), load_cb, e);
  pthread_mutex_unlock(&e->mu);
  if (rc != 0) {
    *err = strdup("erase: the store's progress rows (m:erase:) cannot be read");
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
    return AK_MODULE_FAILED;
  }
  inst->erase = e;
  if (inst->dispatch) ak_dispatch_set_closed(inst->dispatch, closed_cb, e);
  inst->tenant_closing = closed_cb;
  inst->tenant_closing_ctx = e;
  if (e->n) ak_log(AK_LOG_INFO, "erase", "unfinished tenant erases resume", "count=%zu", e->n);
  return 0;
}

static int erase_start(ak_instance_t *inst, char **err) {
  ak_erase_t *e = inst->erase;
  if (pthread_create(&e->thread, NULL, run, e) != 0) {
    *err = strdup("erase: cannot start its thread");
    return AK_MODULE_FAILED;
  }
  e->started = true;
  return 0;
}

static void erase_stop(ak_instance_t *inst) {
  ak_erase_t *e = inst->erase;
  if (!e || !e->started) return;
  pthread_mutex_lock(&e->mu);
  e->stop = true;
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
  pthread_join(e->thread, NULL);
  e->started = false;
}

static void erase_close(ak_instance_t *inst) {
  ak_erase_t *e = inst->erase;
  if (!e) return;
  if (inst->dispatch) ak_dispatch_set_closed(inst->dispatch, NULL, NULL);
  inst->tenant_closing = NULL;
  inst->tenant_closing_ctx = NULL;
  inst->erase = NULL;
  for (size_t i = 0; i < e->n; i++) free(e->closing[i]);
  free(e->closing);
  pthread_mutex_destroy(&e->mu);
  pthread_cond_destroy(&e->cv);
  free(e);
}

const ak_module_t ak_mod_erase = {
    .name = "erase",
    .roles = AK_ROLES_STORE,
    .open = erase_open,
    .start = erase_start,
    .stop = erase_stop,
    .close = erase_close,
};
