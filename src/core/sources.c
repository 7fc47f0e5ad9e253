/* The source table (sources.h). The map is an array of versions sorted by name behind a
 * read-write lock: a lookup is a binary search under the read lock plus one atomic
 * increment, so ingest pays no more than before for a source; writers (admin requests,
 * boot) take the write lock only to swap a pointer. A version is freed by its last
 * release, on whatever thread that is, and never under the table's lock: freeing runs
 * extension destructors (a sink's destroy joins its thread). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/buf.h"
#include "core/sources.h"
#include "verify/verifier.h"

struct ak_source_ident {
  _Atomic unsigned refs;
  uint64_t uid;
  _Atomic int64_t inflight;
};

typedef struct {
  ak_source_ext_build_fn build;
  ak_source_ext_free_fn free_fn;
  void *ctx;
} hook_t;

struct ak_sources {
  pthread_rwlock_t lock;        /* v, n, cap */
  ak_source_t **v;              /* sorted by name */
  size_t n, cap;
  _Atomic uint64_t next_uid;
  hook_t hooks[AK_SOURCE_EXT_COUNT]; /* boot and shutdown only */
  pthread_mutex_t gauge_mu;     /* counts and gauges follow the changes in order */
  pthread_mutex_t write_mu;     /* ak_sources_write_lock */
  ak_series_t *g_total, *g_api, *g_without_dedupe;
};

/* ------------------------------------------------------------------ versions ---- */

static void ident_release(ak_source_ident_t *id) {
  if (id && atomic_fetch_sub(&id->refs, 1) == 1) free(id);
}

static void destroy(ak_source_t *s) {
  for (int k = 0; k < AK_SOURCE_EXT_COUNT; k++)
    if (s->ext[k] && s->ext_free[k]) s->ext_free[k](s->ext[k]);
  ak_verifier_free(s->verifier);
  ak_config_source_clear(&s->cfg);
  json_decref(s->spec);
  ident_release(s->ident);
  free(s);
}

ak_source_t *ak_source_ref(ak_source_t *s) {
  if (s) atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
  return s;
}

void ak_source_release(ak_source_t *s) {
  /* acq_rel: the freeing thread sees every write the other holders made before releasing */
  if (s && atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) == 1) destroy(s);
}

static bool build_ext(ak_sources_t *t, ak_source_t *s, int k, char *err, size_t errlen) {
  hook_t *h = &t->hooks[k];
  if (!h->build) return true;
  err[0] = '\0';
  void *st = h->build(h->ctx, s, err, errlen);
  if (!st && err[0]) return false;
  s->ext[k] = st;
  s->ext_free[k] = h->free_fn;
  return true;
}

ak_source_t *ak_sources_make(ak_sources_t *t, const char *id, const json_t *checked, const ak_source_meta_t *m,
                             char *err, size_t errlen) {
  ak_source_t *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  atomic_init(&s->refs, 1);
  s->table = t;
  s->origin = m->origin;
  s->updated_ms = m->updated_ms;
  s->revision = m->revision;
  if (m->prev) {
    s->ident = m->prev->ident;
    atomic_fetch_add(&s->ident->refs, 1);
    s->born_ms = m->prev->born_ms;
  } else {
    s->ident = calloc(1, sizeof *s->ident);
    if (!s->ident) {
      free(s);
      snprintf(err, errlen, "out of memory");
      return NULL;
    }
    atomic_init(&s->ident->refs, 1);
    s->ident->uid = atomic_fetch_add(&t->next_uid, 1);
    s->born_ms = m->born_ms;
  }
  s->uid = s->ident->uid;
  s->inflight = &s->ident->inflight;
  s->spec = json_deep_copy(checked);
  if (!s->spec || ak_config_source_build(id, checked, &s->cfg) < 0) {
    snprintf(err, errlen, "out of memory");
    destroy(s);
    return NULL;
  }
  if (s->cfg.verify) {
    char why[256] = "";
    s->verifier = ak_verifier_new(s->cfg.verify, why, sizeof why);
    if (!s->verifier) {
      /* the check built it once already: only memory can fail here */
      snprintf(err, errlen, "sources.%s.verify: %s", id, why[0] ? why : "cannot be created");
      destroy(s);
      return NULL;
    }
  }
  for (int k = 0; k < AK_SOURCE_EXT_COUNT; k++)
    if (!build_ext(t, s, k, err, errlen)) {
      destroy(s);
      return NULL;
    }
  return s;
}

/* ------------------------------------------------------------------ the map ---- */

/* Index of name, or where it would go (*found false). Under either lock. */
static size_t find(const ak_sources_t *t, const char *name, size_t len, bool *found) {
  size_t lo = 0, hi = t->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    const char *s = t->v[mid]->cfg.id;
    size_t sl = strlen(s);
    int c = memcmp(s, name, sl < len ? sl : len);
    if (c == 0) c = sl < len ? -1 : sl > len ? 1 : 0;
    if (c == 0) {
      *found = true;
      return mid;
    }
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  *found = false;
  return lo;
}

ak_source_t *ak_sources_get(ak_sources_t *t, const char *name, size_t len) {
  if (!t || !name) return NULL;
  ak_source_t *s = NULL;
  bool found;
  pthread_rwlock_rdlock(&t->lock);
  size_t i = find(t, name, len, &found);
  if (found) s = ak_source_ref(t->v[i]);
  pthread_rwlock_unlock(&t->lock);
  return s;
}

size_t ak_sources_count(ak_sources_t *t) {
  pthread_rwlock_rdlock(&t->lock);
  size_t n = t->n;
  pthread_rwlock_unlock(&t->lock);
  return n;
}

size_t ak_sources_list(ak_sources_t *t, const char *tenant, ak_source_t ***out) {
  *out = NULL;
  pthread_rwlock_rdlock(&t->lock);
  ak_source_t **v = calloc(t->n + 1, sizeof *v);
  size_t n = 0;
  for (size_t i = 0; v && i < t->n; i++)
    if (!tenant || !strcmp(t->v[i]->cfg.tenant, tenant)) v[n++] = ak_source_ref(t->v[i]);
  pthread_rwlock_unlock(&t->lock);
  *out = v;
  return n;
}

void ak_sources_list_free(ak_source_t **v, size_t n) {
  for (size_t i = 0; v && i < n; i++) ak_source_release(v[i]);
  free(v);
}

static void update_gauges(ak_sources_t *t) {
  if (!t->g_total) return;
  pthread_mutex_lock(&t->gauge_mu);
  size_t total = 0, api = 0, without = 0;
  pthread_rwlock_rdlock(&t->lock);
  for (size_t i = 0; i < t->n; i++) {
    total++;
    api += t->v[i]->origin == AK_SOURCE_API;
    without += t->v[i]->cfg.dedupe_from == AK_DEDUPE_NONE;
  }
  pthread_rwlock_unlock(&t->lock);
  ak_gauge_set(t->g_total, (double)total);
  ak_gauge_set(t->g_api, (double)api);
  ak_gauge_set(t->g_without_dedupe, (double)without);
  pthread_mutex_unlock(&t->gauge_mu);
}

static int reserve_locked(ak_sources_t *t) { return ak_buf_grow(&t->v, &t->cap, t->n + 1, sizeof *t->v); }

int ak_sources_reserve(ak_sources_t *t) {
  pthread_rwlock_wrlock(&t->lock);
  int rc = reserve_locked(t);
  pthread_rwlock_unlock(&t->lock);
  return rc;
}

ak_source_t *ak_sources_put(ak_sources_t *t, ak_source_t *s) {
  ak_source_t *old = NULL;
  bool found;
  pthread_rwlock_wrlock(&t->lock);
  size_t i = find(t, s->cfg.id, strlen(s->cfg.id), &found);
  if (found) {
    old = t->v[i];
    t->v[i] = s;
  } else if (reserve_locked(t) == 0) {
    memmove(&t->v[i + 1], &t->v[i], (t->n - i) * sizeof *t->v);
    t->v[i] = s;
    t->n++;
  } else {
    old = s; /* out of memory without a reservation: the caller's version goes back */
  }
  pthread_rwlock_unlock(&t->lock);
  update_gauges(t);
  return old;
}

ak_source_t *ak_sources_remove(ak_sources_t *t, const char *name) {
  ak_source_t *old = NULL;
  bool found;
  pthread_rwlock_wrlock(&t->lock);
  size_t i = find(t, name, strlen(name), &found);
  if (found) {
    old = t->v[i];
    memmove(&t->v[i], &t->v[i + 1], (t->n - i - 1) * sizeof *t->v);
    t->n--;
  }
  pthread_rwlock_unlock(&t->lock);
  update_gauges(t);
  return old;
}

/* ------------------------------------------------------------------ the table ---- */

ak_sources_t *ak_sources_new(const ak_config_t *cfg, char *err, size_t errlen) {
  ak_sources_t *t = calloc(1, sizeof *t);
  if (!t) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  pthread_rwlock_init(&t->lock, NULL);
  pthread_mutex_init(&t->gauge_mu, NULL);
  pthread_mutex_init(&t->write_mu, NULL);
  atomic_init(&t->next_uid, 1);
  const char *id;
  json_t *spec;
  json_object_foreach(json_object_get(cfg->effective, "sources"), id, spec) {
    ak_source_meta_t m = {.origin = AK_SOURCE_CONFIG};
    ak_source_t *s = ak_sources_make(t, id, spec, &m, err, errlen);
    if (!s || ak_sources_reserve(t) != 0) {
      if (s) snprintf(err, errlen, "out of memory");
      ak_source_release(s);
      ak_sources_free(t);
      return NULL;
    }
    ak_source_release(ak_sources_put(t, s));
  }
  return t;
}

void ak_sources_free(ak_sources_t *t) {
  if (!t) return;
  for (size_t i = 0; i < t->n; i++) ak_source_release(t->v[i]);
  free(t->v);
  pthread_rwlock_destroy(&t->lock);
  pthread_mutex_destroy(&t->gauge_mu);
  pthread_mutex_destroy(&t->write_mu);
  free(t);
}

void ak_sources_set_metrics(ak_sources_t *t, ak_metrics_t *m, const char *instance) {
  t->g_total = ak_metrics_instance_series(m, instance, "ankusa_sources",
                                          "Sources the node serves (the config file's and the admin API's).",
                                          AK_METRIC_GAUGE);
  t->g_api = ak_metrics_instance_series(m, instance, "ankusa_sources_api",
                                        "Sources created over the admin API (source_store.type persistent).",
                                        AK_METRIC_GAUGE);
  t->g_without_dedupe = ak_metrics_instance_series(m, instance, "ankusa_sources_without_dedupe",
                                                   "Sources with no dedupe: a provider's retry is a new hook.",
                                                   AK_METRIC_GAUGE);
  update_gauges(t);
}

void ak_sources_write_lock(ak_sources_t *t) { pthread_mutex_lock(&t->write_mu); }
void ak_sources_write_unlock(ak_sources_t *t) { pthread_mutex_unlock(&t->write_mu); }

int ak_sources_attach(ak_sources_t *t, ak_source_ext_t kind, ak_source_ext_build_fn build,
                      ak_source_ext_free_fn free_fn, void *ctx, char *err, size_t errlen) {
  t->hooks[kind] = (hook_t){.build = build, .free_fn = free_fn, .ctx = ctx};
  for (size_t i = 0; i < t->n; i++) {
    ak_source_t *s = t->v[i];
    if (s->ext[kind]) continue;
    if (!build_ext(t, s, (int)kind, err, errlen)) {
      /* undo: a refused boot frees the table with no half-attached states */
      for (size_t j = 0; j < i; j++) {
        ak_source_t *b = t->v[j];
        if (b->ext[kind] && b->ext_free[kind]) b->ext_free[kind](b->ext[kind]);
        b->ext[kind] = NULL;
        b->ext_free[kind] = NULL;
      }
      t->hooks[kind] = (hook_t){0};
      return -1;
    }
  }
  return 0;
}

void ak_sources_detach(ak_sources_t *t, ak_source_ext_t kind) {
  if (t) t->hooks[kind] = (hook_t){0};
}
