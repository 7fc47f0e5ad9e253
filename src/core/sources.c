/* The source table (sources.h). The map is an array of versions sorted by name behind a
 * read-write lock: a lookup is a binary search under the read lock plus one atomic
 * increment, so ingest pays no more than before for a source; writers (admin requests,
 * boot) take the write lock only to swap a pointer. A version is freed by its last
 * release, on whatever thread that is, and never under the table's lock: freeing runs
 * extension destructors (a sink's destroy waits for its requests' last answers). */
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/buf.h"
#include "core/header.h"
#include "core/instance.h"
#include "core/log.h"
#include "core/ratelimit.h"
#include "core/sources.h"

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
  const ak_plugin_kind_t *verify; /* builds each version's verifier (the schema's "verify" kind) */
  pthread_rwlock_t lock;        /* v, n, cap */
  ak_source_t **v;              /* sorted by name */
  size_t n, cap;
  _Atomic uint64_t next_uid;
  hook_t hooks[AK_SOURCE_EXT_COUNT]; /* boot and shutdown only */
  pthread_mutex_t gauge_mu;     /* counts and gauges follow the changes in order */
  pthread_mutex_t write_mu;     /* ak_sources_write_lock */
  ak_series_t *g_total, *g_api, *g_without_dedupe;
  _Atomic bool incomplete;      /* ak_sources_set_incomplete */
};

/* ------------------------------------------------------------------ versions ---- */

static void ident_release(ak_source_ident_t *id) {
  if (id && atomic_fetch_sub(&id->refs, 1) == 1) free(id);
}

static void destroy(ak_source_t *s) {
  for (int k = 0; k < AK_SOURCE_EXT_COUNT; k++)
    if (s->ext[k] && s->ext_free[k]) s->ext_free[k](s->ext[k]);
  if (s->verifier) s->table->verify->destroy(s->verifier);
  ak_source_cfg_clear(&s->cfg);
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
  if (!s->spec || ak_source_cfg_build(id, checked, &s->cfg) < 0) {
    snprintf(err, errlen, "out of memory");
    destroy(s);
    return NULL;
  }
  if (s->cfg.verify) {
    char why[256] = "";
    s->verifier = t->verify && t->verify->create ? t->verify->create(s->cfg.verify, why, sizeof why) : NULL;
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

void ak_sources_set_incomplete(ak_sources_t *t, bool incomplete) { atomic_store(&t->incomplete, incomplete); }

bool ak_sources_incomplete(ak_sources_t *t) { return t && atomic_load(&t->incomplete); }

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
  t->verify = ak_schema_kind(cfg->schema, "verify");
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

/* ------------------------------------------------------ the `sources` section ---- */

/* sources.<id>.dedupe: exactly one of preset, header or json (check_dedupe); a bare
 * preset name is shorthand for {preset: name}. */
static const ak_opt_t dedupe_source_rows[] = {
  {.key = "preset", .type = AK_OPT_ENUM, .enum_vals = "github|standard_webhooks|svix|shopify|stripe",
   .flags = AK_OPTF_NULLABLE,
   .doc = "github: x-github-delivery; standard_webhooks: webhook-id; svix: svix-id; shopify: "
          "x-shopify-webhook-id (headers); stripe: the body's JSON field id"},
  {.key = "header", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN,
   .doc = "the request header holding the provider's event id (any case)"},
  {.key = "json", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN,
   .doc = "dot path of object keys to the event id in a JSON body (a non-empty string or an integer)"},
  {.key = "ttl_seconds", .type = AK_OPT_INT, .def = "259200", .min = 1, .max = 315360000,
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX,
   .doc = "how long a key answers repeats with the first hook's id (72 h)"},
  {0},
};


static const ak_opt_t source_rows[] = {
  {.key = "tenant", .type = AK_OPT_STRING, .def = "default", .flags = AK_OPTF_ID,
   .doc = "owning tenant; \"default\" makes the source shared"},
  {.key = "on_verify_failure", .type = AK_OPT_ENUM, .def = "reject",
   .enum_vals = "reject|quarantine|accept_flag", .doc = "what a failed verification does"},
  {.key = "verify", .type = AK_OPT_PLUGIN, .kind = "verify",
   .doc = "verifier: a mapping with `type` (verify/registry.c) and that type's keys; absent or {} means none"},
  {.key = "sinks", .type = AK_OPT_PLUGIN_LIST, .kind = "sink", .flags = AK_OPTF_REQUIRED,
   .doc = "where every hook is delivered (each sink gets every hook): mappings with `type` and that sink's keys"},
  {.key = "trust_url_tenant", .type = AK_OPT_BOOL, .def = "false",
   .doc = "allow a shared unverified source under tenant_path routing"},
  {.key = "dedupe", .type = AK_OPT_MAP_OR_NAME, .children = dedupe_source_rows,
   .doc = "provider event key: a repeat within the TTL gets the first hook's id and stores nothing"},
  {.key = "forward_headers", .type = AK_OPT_STRLIST, .flags = AK_OPTF_NULLABLE,
   .doc = "provider headers passed to sinks: absent or null = all but the deny set, a list = only "
          "these (lowercased, still minus the deny set), [] = none"},
  {.key = "admission_bytes", .type = AK_OPT_MAP, .children = ak_ratelimit_lane_rows, .flags = AK_OPTF_NULLABLE,
   .doc = "body bytes per second this source takes before reading a body ({rate, burst}); null = "
          "admission.source_bytes"},
  {0},
};

const ak_opt_t *ak_sources_options(void) { return source_rows; }

static void strlist_add(json_t *list, const char *w) {
  size_t k;
  json_t *prev;
  json_array_foreach(list, k, prev)
    if (!strcmp(json_string_value(prev), w)) return;
  json_array_append_new(list, json_string(w));
}

/* forward_headers: names are compared lowercased everywhere, so they are stored that
 * way; a name written twice counts once. */
static void check_forward_headers(ak_check_t *c, const char *id, json_t *src) {
  json_t *list = json_object_get(src, "forward_headers");
  if (!json_is_array(list)) return;
  json_t *out = json_array();
  size_t i;
  json_t *item;
  bool bad = false;
  json_array_foreach(list, i, item) {
    const char *name = json_string_value(item);
    if (!name || !*name) {
      ak_check_error(c, "sources.%s.forward_headers[%zu]: must not be empty", id, i);
      bad = true;
      continue;
    }
    if (!ak_header_name_ok(name, strlen(name))) {
      char *r = ak_check_render(item, false);
      ak_check_error(c, "sources.%s.forward_headers[%zu]: %s is not a header name", id, i, r ? r : "?");
      free(r);
      bad = true;
      continue;
    }
    char *low = strdup(name);
    if (!low) continue;
    for (char *p = low; *p; p++) *p = (char)tolower((unsigned char)*p);
    strlist_add(out, low);
    free(low);
  }
  if (!bad) json_object_set(src, "forward_headers", out);
  json_decref(out);
}

/* sources.<id>.dedupe names exactly one place for the key. A header is stored
 * lowercased (looked up in any case); a json path is object keys joined by dots. */
static void check_dedupe(ak_check_t *c, const char *id, json_t *src) {
  json_t *d = json_object_get(src, "dedupe");
  if (!json_is_object(d)) return;
  static const char *const where[] = {"preset", "header", "json"};
  int n = 0;
  for (size_t i = 0; i < 3; i++) n += json_is_string(json_object_get(d, where[i]));
  if (n != 1) {
    ak_check_error(c, "sources.%s.dedupe: set exactly one of preset, header or json", id);
    return;
  }
  json_t *h = json_object_get(d, "header");
  if (json_is_string(h)) {
    if (!ak_header_name_ok(json_string_value(h), json_string_length(h))) {
      char *r = ak_check_render(h, false);
      ak_check_error(c, "sources.%s.dedupe.header: %s is not a header name", id, r ? r : "?");
      free(r);
      return;
    }
    char *low = strdup(json_string_value(h));
    if (!low) return;
    for (char *p = low; *p; p++) *p = (char)tolower((unsigned char)*p);
    json_object_set_new(d, "header", json_string(low));
    free(low);
  }
  const char *j = json_string_value(json_object_get(d, "json"));
  if (j && (j[0] == '.' || j[strlen(j) - 1] == '.' || strstr(j, ".."))) {
    char *r = ak_check_render(json_object_get(d, "json"), false);
    ak_check_error(c, "sources.%s.dedupe.json: %s has an empty segment; expected object keys joined by dots "
                      "(data.object.id)", id, r ? r : "?");
    free(r);
  }
}

/* The rules of one source across its keys, on its checked mapping (the schema pass
 * already ran): the same for a source of the config file and one sent to the admin API.
 * Its sinks and its verifier bring their own rules (ak_check_plugin). *warning: set
 * instead of the trust error for a stored source (warning not NULL). */
static void check_source(ak_check_t *c, const char *id, json_t *s, const json_t *root, char **warning) {
  check_forward_headers(c, id, s);
  check_dedupe(c, id, s);
  char path[160];
  size_t i;
  json_t *sink;
  /* the dispatcher keeps a hook's deliveries as one bit per sink (store/marker.h) */
  size_t nsinks = json_array_size(json_object_get(s, "sinks"));
  if (nsinks > AK_SOURCE_MAX_SINKS)
    ak_check_error(c, "sources.%s.sinks has %zu sinks; a source has at most %d", id, nsinks, AK_SOURCE_MAX_SINKS);
  json_array_foreach(json_object_get(s, "sinks"), i, sink) {
    snprintf(path, sizeof path, "sources.%s.sinks[%zu]", id, i);
    ak_check_plugin(c, "sink", path, sink, root);
  }
  snprintf(path, sizeof path, "sources.%s.admission_bytes", id);
  ak_ratelimit_report_lane(c, path, json_object_get(s, "admission_bytes"));
  snprintf(path, sizeof path, "sources.%s.verify", id);
  ak_check_plugin(c, "verify", path, json_object_get(s, "verify"), root);
  const char *vt = json_string_value(json_object_get(json_object_get(s, "verify"), "type"));
  const char *tenant = json_string_value(json_object_get(s, "tenant"));
  const char *routing = json_string_value(json_object_get(json_object_get(root, "http"), "routing"));
  bool tenant_path = routing && !strcmp(routing, "tenant_path");
  bool trust = json_is_true(json_object_get(s, "trust_url_tenant"));
  if (tenant_path && tenant && !strcmp(tenant, "default") && vt && !strcmp(vt, "none") && !trust) {
    static const char rule[] = "a shared source (tenant \"default\") with no verifier under tenant_path "
                               "routing lets any URL tenant file hooks; set trust_url_tenant: true to allow it";
    if (warning) {
      free(*warning);
      if (asprintf(warning, "sources.%s: %s", id, rule) < 0) *warning = NULL;
    } else {
      ak_check_error(c, "sources.%s: %s", id, rule);
    }
  }
}

static void sources_check(ak_check_t *c, json_t *section, json_t *root) {
  const char *sid;
  json_t *s;
  json_object_foreach(section, sid, s) check_source(c, sid, s, root, NULL);
}

/* root as the check of an API-managed source's sinks sees it: egress.guard_static_sources
 * true, so that every sink's check guards it as sinks/egress.h says an API source's sinks
 * are (whatever the config file says for its own). New reference (shallow: it shares
 * root's values), or NULL (out of memory). */
static json_t *guarded_view(const json_t *root) {
  json_t *view = json_is_object(root) ? json_copy((json_t *)root) : json_object();
  const json_t *eg = json_object_get(root, "egress");
  json_t *eg2 = json_is_object(eg) ? json_copy((json_t *)eg) : json_object();
  if (!view || !eg2 || json_object_set_new(eg2, "guard_static_sources", json_true()) != 0) {
    json_decref(view);
    json_decref(eg2);
    return NULL;
  }
  if (json_object_set_new(view, "egress", eg2) != 0) { /* eg2 is taken even on failure */
    json_decref(view);
    return NULL;
  }
  return view;
}

int ak_sources_check_spec(const ak_config_t *cfg, const char *id, const json_t *spec, unsigned flags,
                          json_t **checked, char **warning, char **err) {
  *checked = NULL;
  *err = NULL;
  if (warning) *warning = NULL;
  ak_check_t *c = ak_check_new(cfg->schema, true);
  if (!c) {
    *err = strdup("out of memory");
    return -1;
  }
  json_t *out = NULL;
  char *warn = NULL;
  if (!id || !ak_check_is_id(id)) {
    json_t *tmp = json_string(id ? id : "");
    char *r = tmp ? ak_check_render(tmp, false) : NULL;
    ak_check_error(c, "sources: invalid source id %s; expected " AK_ID_PATTERN, r ? r : "?");
    free(r);
    json_decref(tmp);
  } else if (!json_is_null(spec) && !json_is_object(spec)) {
    char *r = ak_check_render(spec, false);
    ak_check_error(c, "sources.%s: expected a mapping, got %s", id, r ? r : "?");
    free(r);
  } else {
    char path[96];
    snprintf(path, sizeof path, "sources.%s", id);
    out = ak_check_map(c, source_rows, json_is_null(spec) ? NULL : spec, path);
    /* an API-managed source: its sinks are guarded whatever egress.guard_static_sources says */
    json_t *guarded = out && !ak_check_count(c) ? guarded_view(cfg->effective) : NULL;
    if (out && !ak_check_count(c) && !guarded) ak_check_error(c, "sources.%s: out of memory", id);
    if (guarded) check_source(c, id, out, guarded, (flags & AK_SOURCE_CHECK_STORED) ? &warn : NULL);
    json_decref(guarded);
  }
  if (ak_check_count(c) || !out) {
    *err = ak_check_join(c);
    ak_check_free(c);
    json_decref(out);
    free(warn);
    return -1;
  }
  ak_check_free(c);
  if (warning) *warning = warn;
  else free(warn);
  *checked = out;
  return 0;
}

/* What each dedupe preset reads. */
static const struct {
  const char *name;
  ak_dedupe_from_t from;
  const char *field;
} dedupe_presets[] = {
  {"github", AK_DEDUPE_HEADER, "x-github-delivery"},
  {"standard_webhooks", AK_DEDUPE_HEADER, "webhook-id"},
  {"svix", AK_DEDUPE_HEADER, "svix-id"},
  {"shopify", AK_DEDUPE_HEADER, "x-shopify-webhook-id"},
  {"stripe", AK_DEDUPE_JSON, "id"},
};

static int build_dedupe(ak_source_cfg_t *s, const json_t *d) {
  if (!json_is_object(d)) return 0;
  const char *preset = json_string_value(json_object_get(d, "preset"));
  const char *header = json_string_value(json_object_get(d, "header"));
  const char *path = json_string_value(json_object_get(d, "json"));
  const char *field = NULL;
  s->dedupe_from = header ? AK_DEDUPE_HEADER : AK_DEDUPE_JSON;
  field = header ? header : path;
  for (size_t i = 0; preset && i < sizeof dedupe_presets / sizeof dedupe_presets[0]; i++)
    if (!strcmp(preset, dedupe_presets[i].name)) {
      s->dedupe_from = dedupe_presets[i].from;
      field = dedupe_presets[i].field;
    }
  if (!field) {
    s->dedupe_from = AK_DEDUPE_NONE;
    return 0;
  }
  s->dedupe_ttl_ms = json_integer_value(json_object_get(d, "ttl_seconds")) * 1000;
  return (s->dedupe_field = strdup(field)) ? 0 : -1;
}

/* A NULL-terminated copy of a list of strings (nothing when list is not an array). */
static int strlist_dup(const json_t *list, char ***out, size_t *n) {
  *out = NULL;
  *n = 0;
  if (!json_is_array(list)) return 0;
  size_t len = json_array_size(list);
  char **v = calloc(len + 1, sizeof *v);
  if (!v) return -1;
  *out = v;
  for (size_t i = 0; i < len; i++) {
    const char *s = json_string_value(json_array_get(list, i));
    if (!(v[i] = strdup(s ? s : ""))) return -1;
    *n = i + 1;
  }
  return 0;
}

static char *str_of(const json_t *section, const char *key) {
  const char *s = json_string_value(json_object_get(section, key));
  return strdup(s ? s : "");
}

int ak_source_cfg_build(const char *id, const json_t *src, ak_source_cfg_t *s) {
  memset(s, 0, sizeof *s);
  size_t i;
  json_t *item;
  json_t *verify = json_object_get(src, "verify");
  json_t *sinks = json_object_get(src, "sinks");
  s->id = strdup(id);
  s->tenant = str_of(src, "tenant");
  const char *ovf = json_string_value(json_object_get(src, "on_verify_failure"));
  int x = ovf ? ak_opt_enum_index(source_rows[1].enum_vals, ovf) : 0;
  s->on_verify_failure = (ak_on_verify_failure_t)(x < 0 ? 0 : x);
  s->verify_type = str_of(verify, "type");
  s->verify = (s->verify_type && strcmp(s->verify_type, "none")) ? json_incref(verify) : NULL;
  s->trust_url_tenant = json_is_true(json_object_get(src, "trust_url_tenant"));
  json_t *fwd = json_object_get(src, "forward_headers");
  s->forward_default = !json_is_array(fwd);
  s->sinks = calloc(json_array_size(sinks) + 1, sizeof *s->sinks);
  if (!s->id || !s->tenant || !s->verify_type || !s->sinks ||
      strlist_dup(fwd, &s->forward_headers, &s->nforward_headers) < 0 ||
      build_dedupe(s, json_object_get(src, "dedupe")) < 0)
    goto oom;
  json_array_foreach(sinks, i, item) {
    ak_sink_cfg_t *k = &s->sinks[s->nsinks++];
    k->type = str_of(item, "type");
    k->opts = json_incref(item);
    if (!k->type) goto oom;
  }
  return 0;
oom:
  ak_source_cfg_clear(s);
  return -1;
}

void ak_source_cfg_clear(ak_source_cfg_t *s) {
  for (size_t k = 0; k < s->nsinks; k++) {
    free(s->sinks[k].type);
    json_decref(s->sinks[k].opts);
  }
  free(s->sinks);
  free(s->id);
  free(s->tenant);
  free(s->verify_type);
  json_decref(s->verify);
  for (size_t k = 0; s->forward_headers && k < s->nforward_headers; k++) free(s->forward_headers[k]);
  free(s->forward_headers);
  free(s->dedupe_field);
  memset(s, 0, sizeof *s);
}

static void sources_release(void *typed) {
  ak_sources_cfg_t *sc = typed;
  for (size_t i = 0; i < sc->n; i++) ak_source_cfg_clear(&sc->v[i]);
  free(sc->v);
  sc->v = NULL;
  sc->n = 0;
}

static int sources_finish(void *typed, const json_t *section, const json_t *root, char **err) {
  (void)root;
  ak_sources_cfg_t *sc = typed;
  sc->tree = section;
  size_t n = json_object_size(sc->tree);
  if (!(sc->v = calloc(n ? n : 1, sizeof *sc->v))) goto oom;
  const char *id;
  json_t *src;
  json_object_foreach((json_t *)sc->tree, id, src) { /* already sorted by id */
    if (ak_source_cfg_build(id, src, &sc->v[sc->n]) < 0) goto oom;
    sc->n++;
  }
  return 0;
oom:
  sources_release(sc);
  *err = strdup("out of memory");
  return -1;
}

const ak_sources_cfg_t *ak_sources_cfg(const ak_config_t *cfg) { return ak_config_of(cfg, &ak_mod_sources); }

static int cmp_source(const void *key, const void *elem) {
  return strcmp((const char *)key, ((const ak_source_cfg_t *)elem)->id);
}

const ak_source_cfg_t *ak_source_cfg_find(const ak_config_t *cfg, const char *id) {
  const ak_sources_cfg_t *sc = ak_sources_cfg(cfg);
  if (!sc || !id || !sc->n) return NULL;
  return bsearch(id, sc->v, sc->n, sizeof *sc->v, cmp_source);
}

/* ------------------------------------------------------------------ lifecycle ---- */

static int sources_open(ak_instance_t *inst, char **err) {
  char serr[512] = "";
  inst->sources = ak_sources_new(inst->cfg, serr, sizeof serr);
  if (!inst->sources) {
    /* the config loader built every verifier once already: this is belt and braces */
    *err = strdup(serr);
    return AK_MODULE_BAD_CONFIG;
  }
  ak_sources_set_metrics(inst->sources, inst->metrics, inst->name);
  return 0;
}

static void sources_close(ak_instance_t *inst) {
  ak_sources_free(inst->sources); /* last of the modules: versions may still hold their states */
  inst->sources = NULL;
}

const ak_module_t ak_mod_sources = {
  .name = "sources",
  .roles = AK_ROLES_STORE,
  .section = "sources",
  .section_map_of = true,
  .doc = "source id -> source",
  .options = source_rows,
  .cfg_size = sizeof(ak_sources_cfg_t),
  .check = sources_check,
  .finish = sources_finish,
  .release = sources_release,
  .open = sources_open,
  .close = sources_close,
};
