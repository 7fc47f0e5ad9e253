/* The shared route store (routes.store.type redis, docs/shared-stores.md): routes and the
 * global IP rules in a versioned hash of net/sharedkv.h, fields "route:<id>" and
 * "ip_rules" (the audit subjects of their changes), values the route's / rules' canonical
 * JSON. Each node's route set is the cache; a change is a dual write in the audit trail (a
 * synced pending row with detail.settle "subject", the check-and-set by value against
 * the item as this node last read it, the row finished); a row left pending by a kill or
 * an unanswered write is settled by the next load, by hashing what Redis holds.
 *
 * Threads: load and apply run under the guard's write_mu (or at boot, before watch), so
 * `seen` (the items as last read or written), `settled` and the version are under it. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <jansson.h>
#include "core/log.h"
#include "net/sharedkv.h"
#include "routes/store.h"

#define F_ROUTE "route:"
#define F_IP_RULES "ip_rules"

typedef struct rredis {
  ak_rstore_t base;
  ak_skv_t *kv;
  ak_audit_t *audit;
  json_t *seen;        /* field -> the value last read or written by this node */
  bool settled;        /* the trail's pending rows settled by a load */
  bool have_version;
  bool down_logged;    /* a failed read logged once until one succeeds */
  uint64_t version;
  int (*reload)(void *ctx);
  void *reload_ctx;
} rredis_t;

/* Test builds: ANKUSA_TEST_ROUTE_STORE_KILL_AT=after_pending|after_write kills the node
 * between the halves of a dual write (tests/e2e/test_routes_redis.py). */
static void kill_at(const char *point) {
#ifdef AK_TEST_HOOKS
  const char *k = getenv("ANKUSA_TEST_ROUTE_STORE_KILL_AT");
  if (k && !strcmp(k, point)) _exit(9);
#else
  (void)point;
#endif
}

static bool same_hash(const char *x, const char *y) { return (!x && !y) || (x && y && !strcmp(x, y)); }

typedef struct {
  rredis_t *r;
  const ak_skv_row_t *rows;
  size_t n;
} settle_ctx_t;

/* A pending row of a change to a shared route (or the IP rules), settled by what Redis
 * holds now. */
static void settle_one(void *ctx, uint64_t seq, const char *subject, const char *before_hash,
                       const char *after_hash) {
  settle_ctx_t *sc = ctx;
  if (strncmp(subject, F_ROUTE, strlen(F_ROUTE)) && strcmp(subject, F_IP_RULES)) return;
  const ak_skv_row_t *row = NULL;
  for (size_t i = 0; i < sc->n && !row; i++)
    if (!strcmp(sc->rows[i].name, subject)) row = &sc->rows[i];
  char h[65] = "";
  if (row) ak_audit_hash(sc->r->audit, row->row, row->len, h);
  const char *cur = row ? h : NULL;
  const char *outcome = same_hash(cur, after_hash) ? "ok" : same_hash(cur, before_hash) ? "failed" : "interrupted";
  json_t *detail = json_pack("{s:s}", "settle", "subject");
  if (detail && !strcmp(outcome, "interrupted")) {
    json_object_set_new(detail, "current", json_string(row ? "changed" : "absent"));
    json_object_set_new(detail, "intended_after_hash", after_hash ? json_string(after_hash) : json_null());
  }
  if (ak_audit_finish(sc->r->audit, seq, outcome, row ? row->row : NULL, row ? row->len : 0, detail) == 0)
    ak_log(strcmp(outcome, "interrupted") ? AK_LOG_INFO : AK_LOG_WARNING, "routes",
           strcmp(outcome, "interrupted") ? "a change to a shared route left pending by a stop is settled"
                                          : "a change to a shared route was interrupted by a stop and the route "
                                            "changed meanwhile: its current state is in the audit row",
           "seq=%llu subject=%s outcome=%s", (unsigned long long)seq, subject, outcome);
  json_decref(detail);
}

static int rr_load(ak_rstore_t *s, ak_rstore_load_fn cb, void *ctx) {
  rredis_t *r = (rredis_t *)s;
  ak_skv_row_t *rows = NULL;
  size_t n = 0;
  uint64_t version = 0;
  char why[400] = "";
  if (ak_skv_fetch(r->kv, &version, &rows, &n, why, sizeof why) != 0) {
    if (!r->down_logged)
      ak_log(AK_LOG_WARNING, "routes", "cannot read the shared route store: the cached routes keep serving",
             "reason=\"%s\"", why);
    r->down_logged = true;
    return -1;
  }
  if (r->down_logged)
    ak_log(AK_LOG_INFO, "routes", "the shared route store is readable again", "store=%s", ak_skv_addr(r->kv));
  r->down_logged = false;
  json_t *seen = json_object();
  int rc = seen ? 0 : -1;
  const ak_skv_row_t *ip = NULL;
  for (size_t i = 0; i < n && rc == 0; i++) {
    if (!strcmp(rows[i].name, F_IP_RULES)) {
      ip = &rows[i];
    } else if (!strncmp(rows[i].name, F_ROUTE, strlen(F_ROUTE))) {
      ak_rstore_item_t it = {.id = rows[i].name + strlen(F_ROUTE), .value = rows[i].row, .len = rows[i].len};
      rc = cb(&it, ctx) ? -1 : 0;
    } else {
      continue; /* never written by us */
    }
    json_t *v = json_stringn(rows[i].row, rows[i].len);
    if (!v || json_object_set_new(seen, rows[i].name, v)) rc = -1;
  }
  if (rc == 0 && ip) {
    ak_rstore_item_t it = {.id = NULL, .value = ip->row, .len = ip->len};
    rc = cb(&it, ctx) ? -1 : 0;
  }
  if (rc == 0) {
    json_decref(r->seen);
    r->seen = seen;
    seen = NULL;
    r->version = version;
    r->have_version = true;
    if (!r->settled && r->audit) {
      settle_ctx_t sc = {.r = r, .rows = rows, .n = n};
      if (ak_audit_pending_each(r->audit, F_ROUTE, settle_one, &sc) >= 0 &&
          ak_audit_pending_each(r->audit, F_IP_RULES, settle_one, &sc) >= 0)
        r->settled = true;
    }
  }
  json_decref(seen);
  ak_skv_rows_free(rows, n);
  return rc;
}

static int rr_apply(ak_rstore_t *s, const ak_rstore_item_t *item, const ak_audit_entry_t *ae) {
  rredis_t *r = (rredis_t *)s;
  char field[96];
  if (item->id) snprintf(field, sizeof field, F_ROUTE "%s", item->id);
  else snprintf(field, sizeof field, F_IP_RULES);
  json_t *exp = json_object_get(r->seen, field);
  const char *expect = exp ? json_string_value(exp) : NULL;
  size_t elen = exp ? json_string_length(exp) : 0;
  uint64_t seq = 0;
  bool rowed = ae && r->audit;
  if (rowed) {
    json_t *detail = json_pack("{s:s}", "settle", "subject");
    ak_audit_entry_t e = *ae;
    e.outcome = "pending";
    e.detail = detail;
    e.seq_out = &seq;
    int rc = detail ? ak_audit_record(r->audit, &e) : -1;
    json_decref(detail);
    if (rc != 0) return -1;
  }
  kill_at("after_pending");
  char why[400] = "";
  uint64_t version = 0;
  ak_skv_rc_t w = ak_skv_put_if(r->kv, field, expect, elen, item->value, item->len, &version, why, sizeof why);
  kill_at("after_write");
  if (w == AK_SKV_WRITTEN) {
    if (rowed) ak_audit_finish(r->audit, seq, "ok", item->value, item->value ? item->len : 0, NULL);
    if (item->value) json_object_set_new(r->seen, field, json_stringn(item->value, item->len));
    else json_object_del(r->seen, field);
    return 0;
  }
  if (w == AK_SKV_UNKNOWN) {
    r->settled = false;
    ak_skv_reload_soon(r->kv);
    ak_log(AK_LOG_ERROR, "routes", "a change to the shared route store got no answer: it may or may not be applied; "
           "the next load settles its audit row", "item=%s seq=%llu reason=\"%s\"", field, (unsigned long long)seq, why);
    return -1;
  }
  /* not written: the item is as it was */
  if (rowed) ak_audit_finish(r->audit, seq, "failed", ae->before, ae->before ? ae->before_len : 0, NULL);
  if (w == AK_SKV_CONFLICT) {
    ak_skv_reload_soon(r->kv);
    ak_log(AK_LOG_INFO, "routes", "a route change refused: the item changed meanwhile on another node", "item=%s",
           field);
    return 1;
  }
  ak_log(AK_LOG_WARNING, "routes", "the shared route store is unavailable: change not made", "item=%s reason=\"%s\"",
         field, why);
  return -1;
}

static int rr_sync_reload(void *ctx, uint64_t *version) {
  rredis_t *r = ctx;
  if (r->reload(r->reload_ctx) != 0) return -1;
  *version = r->version; /* set by the load the reload made, under the guard's write_mu */
  return 0;
}

static int rr_watch(ak_rstore_t *s, int (*reload)(void *ctx), void *ctx) {
  rredis_t *r = (rredis_t *)s;
  r->reload = reload;
  r->reload_ctx = ctx;
  return ak_skv_start(r->kv, r->have_version, r->version);
}

static void rr_free(ak_rstore_t *s) {
  rredis_t *r = (rredis_t *)s;
  ak_skv_free(r->kv);
  json_decref(r->seen);
  free(r);
}

ak_rstore_t *ak_rstore_redis_new(ak_redis_url_t *url, const char *ns, int64_t tick_ms, ak_audit_t *audit) {
  rredis_t *r = calloc(1, sizeof *r);
  if (r) {
    r->base = (ak_rstore_t){.load = rr_load, .apply = rr_apply, .watch = rr_watch, .free = rr_free};
    r->audit = audit;
    r->seen = json_object();
    r->kv = ak_skv_new(url, "routes.store.url", ns, tick_ms, rr_sync_reload, r);
  }
  explicit_bzero(url, sizeof *url);
  if (r && (!r->kv || !r->seen)) {
    rr_free(&r->base);
    return NULL;
  }
  return r ? &r->base : NULL;
}

const char *ak_rstore_redis_addr(const ak_rstore_t *s) { return ak_skv_addr(((const rredis_t *)s)->kv); }
