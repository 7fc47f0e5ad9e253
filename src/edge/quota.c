/* Entries (default, config tenants, overrides) are resolved into GCRA parameters once,
 * when they are loaded or set; a charge copies the tenant's entry under a read lock (no
 * lock at all while no override exists) and takes both lanes from the bucket table in
 * one step. Config entries never change after start; overrides change only through
 * put/delete, which write the store before they touch memory. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/gcra.h"
#include "core/log.h"
#include "core/ratetable.h"
#include "core/tmap.h"
#include "edge/quota.h"
#include "store/audit.h"
#include "store/batch.h"
#include "store/store.h"

typedef struct entry {
  ak_ratelimit_t lim;
  ak_gcra_t hooks, bytes;
} entry_t;

struct ak_quota {
  ak_store_t *store;          /* NULL for a bare quota: overrides live in memory only */
  ak_audit_t *audit;          /* rows of override changes (NULL: none) */
  bool has_default;
  entry_t def;
  ak_tmap_t cfg;              /* rate_limits.tenants: tenant -> entry_t */
  pthread_rwlock_t mu;        /* guards ovr */
  ak_tmap_t ovr;              /* overrides: tenant -> entry_t */
  _Atomic size_t novr_hint;   /* overrides, read without the lock to skip it when zero */
  _Atomic int any;            /* some limit exists: default, a config tenant or an override */
  pthread_mutex_t admin_mu;   /* one put/delete at a time: store row and memory change together */
  ak_ratetable_t *table;
};

static void entry_set(entry_t *e, const ak_ratelimit_t *l) {
  e->lim = *l;
  if (l->hooks.rate > 0) ak_gcra_init(&e->hooks, l->hooks.rate, (double)l->hooks.burst);
  if (l->bytes.rate > 0) ak_gcra_init(&e->bytes, l->bytes.rate, (double)l->bytes.burst);
}

static int cmp_tenant(const char *a, size_t al, const char *b, size_t bl) {
  int c = memcmp(a, b, al < bl ? al : bl);
  if (c) return c;
  return al < bl ? -1 : al > bl ? 1 : 0;
}

static void update_any(ak_quota_t *q) {
  atomic_store(&q->any, q->has_default || ak_tmap_count(&q->cfg) > 0 || atomic_load(&q->novr_hint) > 0);
}

static ak_quota_t *build(const json_t *rl) {
  ak_quota_t *q = calloc(1, sizeof *q);
  if (!q) return NULL;
  pthread_rwlock_init(&q->mu, NULL);
  pthread_mutex_init(&q->admin_mu, NULL);
  ak_tmap_init(&q->cfg, sizeof(entry_t));
  ak_tmap_init(&q->ovr, sizeof(entry_t));
  q->table = ak_ratetable_new(AK_QUOTA_TABLE_SLOTS, 0);
  if (!q->table) {
    ak_quota_free(q);
    return NULL;
  }
  ak_ratelimit_t l;
  const json_t *def = json_object_get(rl, "default");
  if (json_is_object(def) && ak_ratelimit_parse(def, &l, NULL, 0, NULL, 0) == 0) {
    q->has_default = true;
    entry_set(&q->def, &l);
  }
  const json_t *tenants = json_object_get(rl, "tenants");
  const char *t;
  json_t *e;
  json_object_foreach((json_t *)tenants, t, e) {
    if (ak_ratelimit_parse(e, &l, NULL, 0, NULL, 0) != 0) continue; /* the loader refused it already */
    entry_t *en = ak_tmap_get(&q->cfg, t, strlen(t), NULL);
    if (!en) {
      ak_quota_free(q);
      return NULL;
    }
    entry_set(en, &l);
  }
  update_any(q);
  return q;
}

ak_quota_t *ak_quota_new_raw(const json_t *rate_limits) { return build(rate_limits); }

/* In memory; caller holds the write lock. */
static int ovr_set(ak_quota_t *q, const char *t, size_t tl, const ak_ratelimit_t *l) {
  entry_t *e = ak_tmap_get(&q->ovr, t, tl, NULL);
  if (!e) return -1;
  entry_set(e, l);
  atomic_store(&q->novr_hint, ak_tmap_count(&q->ovr));
  return 0;
}

typedef struct {
  ak_quota_t *q;
  char *err;
} load_ctx_t;

static int load_one(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  load_ctx_t *lc = ctx;
  size_t pl = strlen(AK_KEY_RATE_LIMIT);
  const char *t = k + pl;
  size_t tl = kl - pl;
  json_t *j = json_loadb(v, vl, JSON_REJECT_DUPLICATES, NULL);
  ak_ratelimit_t l;
  char field[64] = "", msg[96] = "";
  if (tl == 0 || tl > 64 || !j || ak_ratelimit_parse(j, &l, field, sizeof field, msg, sizeof msg) != 0 ||
      ovr_set(lc->q, t, tl, &l) != 0) {
    if (asprintf(&lc->err, "rate-limit override %s%.*s in the store cannot be read (%s%s%s)", AK_KEY_RATE_LIMIT,
                 (int)(tl > 64 ? 64 : tl), t, field, *field ? " " : "", *msg ? msg : "damaged") < 0)
      lc->err = NULL;
    json_decref(j);
    return 1;
  }
  json_decref(j);
  return 0;
}

typedef struct {
  const json_t *section;
} rate_limits_cfg_t;

ak_quota_t *ak_quota_new(ak_instance_t *inst, char **err) {
  *err = NULL;
  const rate_limits_cfg_t *rlc = ak_config_of(inst->cfg, &ak_mod_rate_limits);
  ak_quota_t *q = build(rlc ? rlc->section : NULL);
  if (!q) {
    *err = strdup("out of memory");
    return NULL;
  }
  q->store = inst->store;
  q->audit = inst->audit;
  load_ctx_t lc = {q, NULL};
  int rc = ak_store_scan(q->store, AK_CF_DEFAULT, AK_KEY_RATE_LIMIT, strlen(AK_KEY_RATE_LIMIT), load_one, &lc);
  if (rc != 0 || lc.err) {
    *err = lc.err ? lc.err : strdup("the rate-limit overrides cannot be read from the store");
    ak_quota_free(q);
    return NULL;
  }
  update_any(q);
  return q;
}

void ak_quota_free(ak_quota_t *q) {
  if (!q) return;
  ak_tmap_fini(&q->cfg);
  ak_tmap_fini(&q->ovr);
  ak_ratetable_free(q->table);
  pthread_rwlock_destroy(&q->mu);
  pthread_mutex_destroy(&q->admin_mu);
  free(q);
}

/* The entry in force, copied out. */
static ak_quota_source_t resolve(ak_quota_t *q, const char *t, size_t tl, entry_t *out) {
  memset(out, 0, sizeof *out);
  if (!atomic_load(&q->any)) return AK_QUOTA_NONE;
  if (atomic_load(&q->novr_hint) > 0) {
    pthread_rwlock_rdlock(&q->mu);
    const entry_t *o = ak_tmap_find(&q->ovr, t, tl);
    if (o) *out = *o;
    pthread_rwlock_unlock(&q->mu);
    if (o) return AK_QUOTA_OVERRIDE;
  }
  const entry_t *c = ak_tmap_find(&q->cfg, t, tl);
  if (c) {
    *out = *c;
    return AK_QUOTA_CONFIG;
  }
  if (q->has_default) {
    *out = q->def;
    return AK_QUOTA_DEFAULT;
  }
  return AK_QUOTA_NONE;
}

ak_quota_source_t ak_quota_lookup(ak_quota_t *q, const char *tenant, size_t tlen, ak_ratelimit_t *out) {
  entry_t e;
  ak_quota_source_t s = resolve(q, tenant, tlen, &e);
  *out = e.lim;
  return s;
}

int64_t ak_quota_max_body(ak_quota_t *q, const char *tenant, size_t tlen) {
  entry_t e;
  if (!q || resolve(q, tenant, tlen, &e) == AK_QUOTA_NONE) return 0;
  return e.lim.max_body_bytes;
}

static size_t lanes(const entry_t *e, size_t body_len, const ak_gcra_t *p[2], double cost[2]) {
  p[0] = e->lim.hooks.rate > 0 ? &e->hooks : NULL;
  p[1] = e->lim.bytes.rate > 0 ? &e->bytes : NULL;
  cost[0] = 1;
  cost[1] = (double)body_len;
  return (p[0] || p[1]) ? 2 : 0;
}

bool ak_quota_take(ak_quota_t *q, const char *tenant, size_t tlen, size_t body_len, int64_t now_ns,
                   int64_t *retry_ns) {
  if (retry_ns) *retry_ns = 0;
  entry_t e;
  if (!q || resolve(q, tenant, tlen, &e) == AK_QUOTA_NONE) return true;
  const ak_gcra_t *p[2];
  double cost[2];
  if (!lanes(&e, body_len, p, cost)) return true;
  uint8_t key[16];
  ak_ratetable_key(q->table, tenant, tlen, key);
  return ak_ratetable_take(q->table, key, p, cost, 2, now_ns, retry_ns);
}

void ak_quota_refund(ak_quota_t *q, const char *tenant, size_t tlen, size_t body_len) {
  entry_t e;
  if (!q || resolve(q, tenant, tlen, &e) == AK_QUOTA_NONE) return;
  const ak_gcra_t *p[2];
  double cost[2];
  if (!lanes(&e, body_len, p, cost)) return;
  uint8_t key[16];
  ak_ratetable_key(q->table, tenant, tlen, key);
  ak_ratetable_refund(q->table, key, p, cost, 2);
}

/* ---------------------------------------------------------------- admin API ---- */

static const char *const source_names[] = {"none", "default", "config", "override"};

static json_t *view(const char *tenant, size_t tlen, const ak_ratelimit_t *l, ak_quota_source_t src) {
  json_t *o = json_object();
  json_object_set_new(o, "tenant", json_stringn(tenant, tlen));
  json_t *lj = ak_ratelimit_json(l);
  json_object_update(o, lj);
  json_decref(lj);
  json_object_set_new(o, "source", json_string(source_names[src]));
  return o;
}

json_t *ak_quota_tenant_json(ak_quota_t *q, const char *tenant) {
  ak_ratelimit_t l;
  ak_quota_source_t s = ak_quota_lookup(q, tenant, strlen(tenant), &l);
  return view(tenant, strlen(tenant), &l, s);
}

typedef struct {
  const entry_t *e;
  ak_quota_source_t src;
} listed_t;

static int cmp_listed(const void *a, const void *b) {
  size_t al, bl;
  const char *at = ak_tmap_key(((const listed_t *)a)->e, &al), *bt = ak_tmap_key(((const listed_t *)b)->e, &bl);
  return cmp_tenant(at, al, bt, bl);
}

/* Every tenant with an entry, sorted; NULL out of memory. */
json_t *ak_quota_list_json(ak_quota_t *q) {
  json_t *arr = json_array();
  pthread_rwlock_rdlock(&q->mu);
  listed_t *v = calloc(ak_tmap_count(&q->cfg) + ak_tmap_count(&q->ovr) + 1, sizeof *v);
  size_t n = 0, pos = 0;
  for (const entry_t *e; v && (e = ak_tmap_next(&q->ovr, &pos));) v[n++] = (listed_t){e, AK_QUOTA_OVERRIDE};
  pos = 0;
  for (const entry_t *e; v && (e = ak_tmap_next(&q->cfg, &pos));) {
    size_t tl;
    const char *t = ak_tmap_key(e, &tl);
    if (!ak_tmap_find(&q->ovr, t, tl)) v[n++] = (listed_t){e, AK_QUOTA_CONFIG}; /* the override wins over the file */
  }
  if (v) qsort(v, n, sizeof *v, cmp_listed);
  for (size_t i = 0; i < n; i++) {
    size_t tl;
    const char *t = ak_tmap_key(v[i].e, &tl);
    json_array_append_new(arr, view(t, tl, &v[i].e->lim, v[i].src));
  }
  pthread_rwlock_unlock(&q->mu);
  free(v);
  if (!v) {
    json_decref(arr);
    return NULL;
  }
  json_t *def = q->has_default ? ak_ratelimit_json(&q->def.lim) : json_null();
  return json_pack("{s:o,s:o}", "default", def, "tenants", arr);
}

static void reset(ak_quota_t *q, const char *tenant) {
  uint8_t key[16];
  ak_ratetable_key(q->table, tenant, strlen(tenant), key);
  ak_ratetable_reset(q->table, key);
}

/* The stored form of an override (the value of rl:<tenant>), which is also the canonical
 * bytes its audit rows hash. Malloc'd; NULL for none. */
static char *override_text(const ak_ratelimit_t *l) {
  if (!l) return NULL;
  json_t *j = ak_ratelimit_json(l);
  char *text = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(j);
  return text;
}

/* One synced put (after != NULL) or delete of rl:<tenant>, with its audit row. */
static int store_row(ak_quota_t *q, const char *tenant, const char *before, const char *after,
                     const ak_audit_who_t *who) {
  if (!q->store) return 0;
  char key[80], subject[96];
  int kl = snprintf(key, sizeof key, "%s%s", AK_KEY_RATE_LIMIT, tenant);
  snprintf(subject, sizeof subject, "rate_limit:%s", tenant);
  if (kl < 0 || (size_t)kl >= sizeof key) return -1;
  ak_batch_t *wb = ak_batch_new(q->store);
  if (!wb || ak_store_pin(q->store) != 0) {
    ak_batch_free(wb);
    return -1;
  }
  if (after) ak_batch_put(wb, AK_CF_DEFAULT, key, (size_t)kl, after, strlen(after));
  else ak_batch_delete(wb, AK_CF_DEFAULT, key, (size_t)kl);
  ak_audit_entry_t ae = {.who = who, .action = after ? "rate_limit.put" : "rate_limit.delete", .tenant = tenant,
                         .subject = subject, .before = before, .before_len = before ? strlen(before) : 0,
                         .after = after, .after_len = after ? strlen(after) : 0};
  ak_wf_class_t cls = AK_WF_OTHER;
  char *err = NULL;
  int rc = ak_audit_put(q->audit, wb, &ae);
  if (rc == 0) rc = ak_audit_commit(q->audit, q->store, wb, &cls, &err);
  ak_store_unpin(q->store);
  ak_batch_free(wb);
  if (rc != 0)
    ak_log(AK_LOG_ERROR, "rate_limit", "rate-limit override write failed", "tenant=%s class=%s", tenant,
           ak_wf_class_names[cls]);
  free(err);
  return rc;
}

int ak_quota_put(ak_quota_t *q, const char *tenant, const ak_ratelimit_t *l, const ak_audit_who_t *who) {
  char *after = override_text(l);
  if (!after) return -1;
  pthread_mutex_lock(&q->admin_mu);
  char *before = NULL;
  pthread_rwlock_rdlock(&q->mu);
  const entry_t *o = ak_tmap_find(&q->ovr, tenant, strlen(tenant));
  bool found = o != NULL;
  if (found) before = override_text(&o->lim);
  pthread_rwlock_unlock(&q->mu);
  /* the same override again changes nothing: no write, no audit row, buckets kept */
  int rc = (found && !before) ? -1 : (before && !strcmp(before, after)) ? 1 : store_row(q, tenant, before, after, who);
  free(before);
  free(after);
  if (rc == 0) {
    pthread_rwlock_wrlock(&q->mu);
    rc = ovr_set(q, tenant, strlen(tenant), l);
    pthread_rwlock_unlock(&q->mu);
    update_any(q);
    reset(q, tenant);
  }
  pthread_mutex_unlock(&q->admin_mu);
  return rc;
}

int ak_quota_delete(ak_quota_t *q, const char *tenant, const ak_audit_who_t *who) {
  size_t tl = strlen(tenant);
  pthread_mutex_lock(&q->admin_mu);
  char *before = NULL;
  pthread_rwlock_rdlock(&q->mu);
  const entry_t *o = ak_tmap_find(&q->ovr, tenant, tl);
  bool found = o != NULL;
  if (found) before = override_text(&o->lim);
  pthread_rwlock_unlock(&q->mu);
  int rc = !found ? 1 : !before ? -1 : store_row(q, tenant, before, NULL, who);
  free(before);
  if (rc == 0) {
    pthread_rwlock_wrlock(&q->mu);
    entry_t *e = ak_tmap_find(&q->ovr, tenant, tl);
    if (e) {
      ak_tmap_remove(&q->ovr, e);
      atomic_store(&q->novr_hint, ak_tmap_count(&q->ovr));
    }
    pthread_rwlock_unlock(&q->mu);
    update_any(q);
    reset(q, tenant);
  }
  pthread_mutex_unlock(&q->admin_mu);
  return rc;
}

/* ------------------------------------------------------------------- the module ---- */

static const ak_opt_t rate_limits_rows[] = {
  {.key = "default", .type = AK_OPT_MAP, .children = ak_ratelimit_entry_rows, .flags = AK_OPTF_NULLABLE,
   .doc = "limits of every tenant without an entry or override; null = unlimited"},
  {.key = "tenants", .type = AK_OPT_MAP_OF, .children = ak_ratelimit_entry_rows,
   .doc = "tenant id -> limits (an admin override beats it)"},
  {.key = "scope", .type = AK_OPT_ENUM, .def = "node", .enum_vals = "node|fleet", .env = "ANKUSA_RATE_LIMITS_SCOPE",
   .doc = "node: each node enforces the limits alone (N nodes admit N times them); fleet: the nodes share one "
          "count in fleet.store"},
  {0},
};

/* The pairing rules of each entry (core/ratelimit.c); a default that is off shows as
 * null in print-config. */
static void rate_limits_check(ak_check_t *c, json_t *rl, json_t *root) {
  (void)root;
  ak_check_show_off(rl, rate_limits_rows);
  json_t *def = json_object_get(rl, "default");
  if (json_is_object(def)) ak_ratelimit_report_entry(c, "rate_limits.default", def);
  const char *t;
  json_t *e;
  json_object_foreach(json_object_get(rl, "tenants"), t, e) {
    char label[128];
    snprintf(label, sizeof label, "rate_limits.tenants.%s", t);
    ak_ratelimit_report_entry(c, label, e);
  }
}

static int rate_limits_finish(void *typed, const json_t *section, const json_t *root, char **err) {
  (void)root;
  (void)err;
  ((rate_limits_cfg_t *)typed)->section = section;
  return 0;
}

static int rate_limits_open(ak_instance_t *inst, char **err) {
  char *why = NULL;
  inst->quota = ak_quota_new(inst, &why);
  if (inst->quota) return 0;
  ak_log(AK_LOG_ERROR, "rate_limit", "cannot read the rate-limit overrides from the store", "reason=\"%s\"",
         why ? why : "?");
  *err = why;
  return AK_MODULE_FAILED;
}

static void rate_limits_close(ak_instance_t *inst) {
  ak_quota_free(inst->quota);
  inst->quota = NULL;
}

const ak_module_t ak_mod_rate_limits = {
  .name = "rate_limits",
  .roles = AK_ROLES_STORE,
  .section = "rate_limits",
  .doc = "per-tenant limits: hooks and body bytes per second, max_body_bytes",
  .options = rate_limits_rows,
  .cfg_size = sizeof(rate_limits_cfg_t),
  .check = rate_limits_check,
  .finish = rate_limits_finish,
  .open = rate_limits_open,
  .close = rate_limits_close,
};
