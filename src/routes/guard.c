/* The route guard's state and decisions, and the route set's one change path (routes.h).
 * Never reads a request body and never logs a query string or a header value: a refusal's
 * log line names the method, the path, the client, the reason and the route. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "core/clock.h"
#include "core/log.h"
#include "routes/cache.h"
#include "routes/routes.h"

const char *const ak_guard_names[AK_GUARD_COUNT] = {"allow", "route_not_found", "method_not_allowed",
                                                     "route_disabled", "ip_denied"};

struct ak_routes {
  const ak_routes_cfg_t *cfg;
  ak_rtable_t table;
  ak_rcache_t *cache;
  ak_rstore_t *store;
  ak_cidr_t *proxies;
  size_t nproxies;
  pthread_mutex_t write_mu; /* one change at a time: build, store write, swap */
  uint64_t gen;             /* the newest snapshot's generation (under write_mu) */
  atomic_uint_fast64_t refusals; /* for log_sample */
  const json_t *global_cfg; /* routes.ip_rules: the global rules while the store has none */
  _Atomic bool ready;       /* the store was read once (a shared store down at boot: not yet) */
  bool seeds_pending;       /* under write_mu: the seeds wait for the first read */
};

/* ------------------------------------------------------------ decisions ---- */

static void ip_step(const ak_iprules_t *rules, const char *scope, const ak_netaddr_t *client, ak_guard_result_t *out,
                    bool *allow) {
  int i = ak_iprules_eval(rules, client, allow);
  out->ip_scope = scope;
  out->ip_rule = i;
  snprintf(out->ip_cidr, sizeof out->ip_cidr, "%s", i >= 0 ? rules->v[i].text : "");
}

void ak_routes_decide(ak_routes_t *rs, const char *method, const char *path, size_t len, const ak_netaddr_t *client,
                      int64_t now_ms, ak_guard_result_t *out) {
  memset(out, 0, sizeof *out);
  out->ip_rule = -1;
  ak_rsnap_t *s = ak_rtable_get(&rs->table);
  bool allow = true;
  ip_step(s->global, "global", client, out, &allow);
  if (!allow) {
    out->decision = AK_GUARD_IP_DENIED;
    goto done;
  }
  if (!ak_rpath_valid(path, len)) {
    out->decision = AK_GUARD_ROUTE_NOT_FOUND;
    goto done;
  }
  int kind;
  size_t idx = 0;
  if (!ak_rcache_get(rs->cache, s->gen, method, path, len, now_ms, &kind, &idx)) {
    kind = ak_rsnap_find(s, method, path, len, &idx);
    ak_rcache_put(rs->cache, s->gen, method, path, len, now_ms, kind, kind == AK_RFIND_NONE, idx);
  }
  if (kind == AK_RFIND_NONE || idx >= s->n) {
    out->decision = AK_GUARD_ROUTE_NOT_FOUND;
    goto done;
  }
  const ak_rroute_t *r = s->v[idx];
  snprintf(out->route_id, sizeof out->route_id, "%s", r->id);
  if (kind == AK_RFIND_DISABLED) {
    out->decision = AK_GUARD_ROUTE_DISABLED;
    goto done;
  }
  if (r->ip) {
    ip_step(r->ip, "route", client, out, &allow);
    if (!allow) {
      out->decision = AK_GUARD_IP_DENIED;
      goto done;
    }
  }
  out->decision = kind == AK_RFIND_METHOD ? AK_GUARD_METHOD_NOT_ALLOWED : AK_GUARD_ALLOW;
done:
  ak_rsnap_unref(s);
}

void ak_routes_client(ak_routes_t *rs, ak_hreq_t *r, ak_netaddr_t *out) {
  ak_hreq_client(r, rs->proxies, rs->nproxies, out);
}

static void addr_text(const ak_netaddr_t *a, char *out, size_t n) {
  static const uint8_t mapped[12] = {[10] = 0xff, [11] = 0xff};
  if (!memcmp(a->a, mapped, 12)) inet_ntop(AF_INET, a->a + 12, out, (socklen_t)n);
  else inet_ntop(AF_INET6, a->a, out, (socklen_t)n);
}

void ak_routes_check(ak_routes_t *rs, ak_hreq_t *r, ak_guard_result_t *out) {
  ak_netaddr_t client;
  ak_routes_client(rs, r, &client);
  size_t len = 0;
  const char *path = ak_hreq_path(r, &len);
  const char *method = ak_hreq_method(r);
  ak_routes_decide(rs, method, path, len, &client, ak_now_ms(), out);
  if (out->decision == AK_GUARD_ALLOW || rs->cfg->log_sample <= 0) return;
  uint64_t n = atomic_fetch_add(&rs->refusals, 1);
  if (n % (uint64_t)rs->cfg->log_sample) return;
  char ip[INET6_ADDRSTRLEN], p[160];
  addr_text(&client, ip, sizeof ip);
  size_t pl = len < 120 ? len : 120; /* the path only, cut: never the query */
  size_t k = 0;
  for (size_t i = 0; i < pl && k + 1 < sizeof p; i++) p[k++] = (path[i] == '"' || path[i] == '\\') ? '_' : path[i];
  p[k] = 0;
  ak_log(AK_LOG_INFO, "routes", "request refused by the route guard",
         "reason=%s method=%s path=\"%s\" client=%s route_id=%s sample=%lld", ak_guard_names[out->decision], method, p,
         ip, out->route_id[0] ? out->route_id : "-", (long long)rs->cfg->log_sample);
}

unsigned ak_routes_refusal(const ak_routes_t *rs, ak_guard_t d, const char **code) {
  switch (d) {
    case AK_GUARD_METHOD_NOT_ALLOWED:
      *code = "method_not_allowed";
      return 405;
    case AK_GUARD_IP_DENIED:
      if (rs->cfg->ip_denied_status == 404) break;
      *code = "forbidden";
      return 403;
    default:
      break;
  }
  *code = "not_found";
  return 404;
}

json_t *ak_guard_result_json(const ak_guard_result_t *g) {
  json_t *ip = json_null();
  if (g->ip_scope)
    ip = json_pack("{s:s,s:i,s:o}", "scope", g->ip_scope, "index", g->ip_rule, "cidr",
                   g->ip_rule >= 0 ? json_string(g->ip_cidr) : json_null());
  const char *reason = g->decision == AK_GUARD_ALLOW ? "route_matched" : ak_guard_names[g->decision];
  if (g->decision == AK_GUARD_IP_DENIED && g->ip_rule < 0) reason = "ip_default_deny";
  return json_pack("{s:s,s:s,s:o,s:o}", "decision", g->decision == AK_GUARD_ALLOW ? "allow" : "deny", "reason", reason,
                   "route_id", g->route_id[0] ? json_string(g->route_id) : json_null(), "ip_rule", ip);
}

/* ------------------------------------------------------------ changes ---- */

ak_rsnap_t *ak_routes_snapshot(ak_routes_t *rs) { return ak_rtable_get(&rs->table); }

static char *canon(const json_t *j, size_t *len) {
  char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
  *len = s ? strlen(s) : 0;
  return s;
}

/* The next snapshot: s with route `put` in place of the route of id `drop` (either NULL)
 * and global rules g (taken; NULL = s's). */
static ak_rsnap_t *next_snap(ak_routes_t *rs, const ak_rsnap_t *s, const char *drop, ak_rroute_t *put,
                             ak_iprules_t *g) {
  if (!g && !(g = ak_iprules_copy(s->global))) return NULL;
  ak_rroute_t **v = malloc((s->n + 1) * sizeof *v);
  if (!v) {
    ak_iprules_free(g);
    return NULL;
  }
  size_t n = 0;
  for (size_t i = 0; i < s->n; i++)
    if (!drop || strcmp(s->v[i]->id, drop)) v[n++] = s->v[i];
  if (put) v[n++] = put;
  ak_rsnap_t *ns = ak_rsnap_new(v, n, g, rs->gen + 1);
  free(v);
  return ns;
}

static bool may(const ak_routes_change_t *ch, const ak_rroute_t *r) {
  return !ch->may || !r || ch->may(r->tenant, ch->may_ctx);
}

ak_routes_rc_t ak_routes_change(ak_routes_t *rs, const ak_routes_change_t *ch, char *err, size_t errlen,
                                json_t **out, bool *created) {
  if (out) *out = NULL;
  if (created) *created = false;
  err[0] = 0;
  ak_routes_rc_t rc = AK_ROUTES_OK;
  ak_rroute_t *nr = NULL;
  ak_iprules_t *ng = NULL;
  char *before = NULL, *after = NULL;
  size_t blen = 0, alen = 0;
  pthread_mutex_lock(&rs->write_mu);
  ak_rsnap_t *s = ak_rtable_get(&rs->table);
  if (!atomic_load(&rs->ready)) {
    rc = AK_ROUTES_UNAVAILABLE;
    goto end;
  }
  const char *id = ch->id;
  if (ch->op == AK_RCH_CREATE) id = json_string_value(json_object_get(ch->body, "id"));
  ak_rroute_t *old = (ch->op != AK_RCH_IP_RULES && id) ? ak_rsnap_get(s, id) : NULL;

  if (ch->op == AK_RCH_IP_RULES) {
    if (!(ng = ak_iprules_from_json(ch->body, true, err, errlen))) {
      rc = AK_ROUTES_INVALID;
      goto end;
    }
    json_t *bj = ak_iprules_to_json(s->global), *aj = ak_iprules_to_json(ng);
    before = canon(bj, &blen);
    after = canon(aj, &alen);
    json_decref(bj);
    if (out) *out = aj;
    else json_decref(aj);
  } else if (ch->op == AK_RCH_DELETE) {
    if (!old || !may(ch, old)) {
      rc = AK_ROUTES_NOT_FOUND;
      goto end;
    }
    before = canon(old->json, &blen);
  } else {
    if ((ch->op == AK_RCH_PATCH) && (!old || !may(ch, old))) {
      rc = AK_ROUTES_NOT_FOUND;
      goto end;
    }
    if (ch->op == AK_RCH_CREATE && old) {
      rc = may(ch, old) ? AK_ROUTES_DUPLICATE : AK_ROUTES_FORBIDDEN;
      goto end;
    }
    if (ch->op == AK_RCH_PUT && old && !may(ch, old)) {
      rc = AK_ROUTES_FORBIDDEN;
      goto end;
    }
    json_t *spec = NULL;
    if (ch->op == AK_RCH_PATCH) {
      if (!json_is_object(ch->body)) {
        snprintf(err, errlen, "expected a JSON object");
        rc = AK_ROUTES_INVALID;
        goto end;
      }
      spec = json_deep_copy(old->json);
      if (spec) json_object_update(spec, (json_t *)ch->body);
      /* a path change re-derives the tenant unless the patch names one */
      if (spec && json_object_get(ch->body, "path") && !json_object_get(ch->body, "tenant"))
        json_object_set_new(spec, "tenant", json_null());
    }
    nr = ak_rroute_from_json(spec ? spec : ch->body, ch->op == AK_RCH_CREATE ? NULL : id, err, errlen);
    json_decref(spec);
    if (!nr) {
      rc = AK_ROUTES_INVALID;
      goto end;
    }
    if (!may(ch, nr)) {
      rc = AK_ROUTES_FORBIDDEN;
      goto end;
    }
    if (!old && s->n >= (size_t)rs->cfg->max_routes) {
      snprintf(err, errlen, "at most %lld routes (routes.max_routes)", (long long)rs->cfg->max_routes);
      rc = AK_ROUTES_TOO_MANY;
      goto end;
    }
    if (old) before = canon(old->json, &blen);
    after = canon(nr->json, &alen);
    if (!after) {
      rc = AK_ROUTES_UNAVAILABLE;
      goto end;
    }
    if (out) *out = json_incref(nr->json);
  }
  if (before && after && blen == alen && !memcmp(before, after, alen)) goto end; /* nothing changes: no row */

  const char *tenant = nr ? nr->tenant : old ? old->tenant : NULL;
  const char *other = (nr && old && old->tenant && (!nr->tenant || strcmp(nr->tenant, old->tenant))) ? old->tenant : NULL;
  char subject[96];
  if (ch->op == AK_RCH_IP_RULES) snprintf(subject, sizeof subject, "ip_rules");
  else snprintf(subject, sizeof subject, "route:%s", nr ? nr->id : old->id);
  const char *action = ch->op == AK_RCH_IP_RULES ? "ip_rules.put" : ch->op == AK_RCH_DELETE ? "route.delete"
                       : old ? "route.update" : "route.create";
  /* the lifecycle event of a route change (written only while lifecycle.sinks is set): the
   * route as the API shows it (no secret in a route), its last state for a delete */
  const char *event = ch->op == AK_RCH_IP_RULES ? NULL : ch->op == AK_RCH_DELETE ? "io.ankusa.route.deleted"
                      : old ? "io.ankusa.route.updated" : "io.ankusa.route.created";
  ak_audit_entry_t ae = {.who = ch->who, .action = action, .tenant = tenant, .tenants = other ? &other : NULL,
                         .ntenants = other ? 1 : 0, .subject = subject, .before = before, .before_len = blen,
                         .after = after, .after_len = alen, .event = event,
                         .entity = event ? (nr ? nr->json : old->json) : NULL};
  ak_rstore_item_t item = {.id = ch->op == AK_RCH_IP_RULES ? NULL : (nr ? nr->id : old->id), .value = after,
                           .len = alen};
  ak_rsnap_t *ns = next_snap(rs, s, old ? old->id : NULL, nr, ng);
  ng = NULL; /* taken */
  if (!ns) {
    rc = AK_ROUTES_UNAVAILABLE;
    goto end;
  }
  int ar = rs->store->apply(rs->store, &item, &ae);
  if (ar != 0) {
    ak_rsnap_unref(ns);
    rc = ar > 0 ? AK_ROUTES_CONFLICT : AK_ROUTES_UNAVAILABLE;
    if (ar > 0) snprintf(err, errlen, "%s changed meanwhile on another node: read it again", subject);
    goto end;
  }
  rs->gen++;
  ak_rtable_swap(&rs->table, ns);
  if (created) *created = !old && ch->op != AK_RCH_IP_RULES;
end:
  if (rc != AK_ROUTES_OK && out && *out) {
    json_decref(*out);
    *out = NULL;
  }
  pthread_mutex_unlock(&rs->write_mu);
  ak_rsnap_unref(s);
  ak_rroute_unref(nr);
  ak_iprules_free(ng);
  free(before);
  free(after);
  return rc;
}

/* ------------------------------------------------------------ building ---- */

typedef struct {
  ak_rroute_t **v;
  size_t n, cap;
  ak_iprules_t *global;
  char *err;
  size_t errlen;
} load_t;

static int load_item(const ak_rstore_item_t *it, void *ctx) {
  load_t *l = ctx;
  json_error_t je;
  json_t *j = json_loadb(it->value, it->len, 0, &je);
  char e2[200];
  if (!it->id) {
    ak_iprules_t *g = j ? ak_iprules_from_json(j, true, e2, sizeof e2) : NULL;
    json_decref(j);
    if (!g) {
      snprintf(l->err, l->errlen, "the stored routes IP rules are unreadable");
      return -1;
    }
    ak_iprules_free(l->global);
    l->global = g;
    return 0;
  }
  ak_rroute_t *r = j ? ak_rroute_from_json(j, it->id, e2, sizeof e2) : NULL;
  json_decref(j);
  if (!r) {
    snprintf(l->err, l->errlen, "stored route \"%s\" is unreadable", it->id);
    return -1;
  }
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 64;
    ak_rroute_t **nv = realloc(l->v, cap * sizeof *nv);
    if (!nv) {
      ak_rroute_unref(r);
      snprintf(l->err, l->errlen, "out of memory");
      return -1;
    }
    l->v = nv;
    l->cap = cap;
  }
  l->v[l->n++] = r;
  return 0;
}

/* The routes and IP rules the store holds into a snapshot of generation gen. NULL with
 * err (the store unreadable, or out of memory). */
static ak_rsnap_t *build_from_store(ak_routes_t *rs, uint64_t gen, char *err, size_t errlen) {
  load_t l = {.err = err, .errlen = errlen};
  char e2[200];
  json_t *none = json_object();
  l.global = ak_iprules_from_json(rs->global_cfg ? rs->global_cfg : none, false, e2, sizeof e2);
  json_decref(none);
  ak_rsnap_t *snap = NULL;
  err[0] = 0;
  if (!l.global) {
    snprintf(err, errlen, "routes: cannot be built (%s)", e2);
  } else if (rs->store->load(rs->store, load_item, &l) != 0) {
    if (!err[0]) snprintf(err, errlen, "the route store cannot be read");
    ak_iprules_free(l.global);
  } else if (!(snap = ak_rsnap_new(l.v, l.n, l.global, gen))) {
    snprintf(err, errlen, "out of memory");
  }
  for (size_t k = 0; k < l.n; k++) ak_rroute_unref(l.v[k]);
  free(l.v);
  return snap;
}

/* seeds: created when absent; a stored route of the same id (an API edit) wins */
static int run_seeds(ak_routes_t *rs, char *err, size_t errlen) {
  size_t i;
  json_t *sd;
  char e2[200];
  json_array_foreach(rs->cfg->seed, i, sd) {
    const char *id = json_string_value(json_object_get(sd, "id"));
    ak_rsnap_t *s = ak_rtable_get(&rs->table);
    bool have = id && ak_rsnap_get(s, id);
    ak_rsnap_unref(s);
    if (have) continue;
    ak_routes_change_t ch = {.op = AK_RCH_CREATE, .body = sd};
    ak_routes_rc_t rc = ak_routes_change(rs, &ch, e2, sizeof e2, NULL, NULL);
    if (rc == AK_ROUTES_DUPLICATE) continue; /* created meanwhile by another node */
    if (rc != AK_ROUTES_OK) {
      snprintf(err, errlen, "routes.seed[%zu]: %s", i,
               rc == AK_ROUTES_TOO_MANY ? "over routes.max_routes" : rc == AK_ROUTES_INVALID ? e2
               : rc == AK_ROUTES_CONFLICT ? "created meanwhile by another node" : "cannot be stored");
      return -1;
    }
  }
  return 0;
}

int ak_routes_reload(void *ctx) {
  ak_routes_t *rs = ctx;
  char err[300];
  pthread_mutex_lock(&rs->write_mu);
  ak_rsnap_t *snap = build_from_store(rs, rs->gen + 1, err, sizeof err);
  bool seeds = false;
  if (snap) {
    rs->gen++;
    ak_rtable_swap(&rs->table, snap);
    if (!atomic_exchange(&rs->ready, true))
      ak_log(AK_LOG_INFO, "routes", "routes loaded from the shared route store", "routes=%zu", snap->n);
    seeds = rs->seeds_pending;
    rs->seeds_pending = false;
  }
  pthread_mutex_unlock(&rs->write_mu);
  if (seeds && run_seeds(rs, err, sizeof err) != 0)
    ak_log(AK_LOG_ERROR, "routes", "a seed route cannot be created in the shared route store", "reason=\"%s\"", err);
  return snap ? 0 : -1;
}

bool ak_routes_ready(ak_routes_t *rs) { return atomic_load(&rs->ready); }

ak_routes_t *ak_routes_new(const ak_routes_cfg_t *cfg, const json_t *global, ak_rstore_t *store, char *err,
                           size_t errlen) {
  ak_routes_t *rs = calloc(1, sizeof *rs);
  if (!rs) {
    snprintf(err, errlen, "out of memory");
    store->free(store);
    return NULL;
  }
  rs->cfg = cfg;
  rs->store = store;
  rs->global_cfg = global;
  pthread_mutex_init(&rs->write_mu, NULL);
  atomic_init(&rs->refusals, 0);
  atomic_init(&rs->ready, false);
  rs->proxies = calloc(cfg->trusted_proxies.n + 1, sizeof *rs->proxies);
  rs->cache = ak_rcache_new(cfg->cache.max_size, cfg->cache.ttl_ms, cfg->cache.negative_ttl_ms,
                            cfg->cache.gc_interval_ms);
  if (!rs->proxies || !rs->cache) {
    snprintf(err, errlen, "routes: cannot be built (out of memory)");
    goto bad;
  }
  for (size_t i = 0; i < cfg->trusted_proxies.n; i++) {
    bool v6;
    const char *why;
    if (ak_iprules_parse_cidr(cfg->trusted_proxies.v[i], &rs->proxies[rs->nproxies], &v6, &why)) rs->nproxies++;
  }
  ak_rsnap_t *first = build_from_store(rs, 1, err, errlen);
  bool loaded = first != NULL;
  if (!first && store->watch) {
    /* a shared store down at boot: nothing served (503) until the sync thread reads it */
    char e2[200];
    json_t *none = json_object();
    ak_iprules_t *g = ak_iprules_from_json(none, false, e2, sizeof e2);
    json_decref(none);
    first = g ? ak_rsnap_new(NULL, 0, g, 1) : NULL;
    if (!first) snprintf(err, errlen, "out of memory");
    rs->seeds_pending = true;
  }
  if (!first) goto bad;
  rs->gen = 1;
  ak_rtable_init(&rs->table, first);
  atomic_store(&rs->ready, loaded);
  if (loaded && run_seeds(rs, err, errlen) != 0) {
    ak_rtable_destroy(&rs->table);
    goto bad;
  }
  if (store->watch && store->watch(store, ak_routes_reload, rs) != 0) {
    snprintf(err, errlen, "routes: the shared route store's sync thread cannot start");
    ak_rtable_destroy(&rs->table);
    goto bad;
  }
  return rs;
bad:
  ak_rcache_free(rs->cache);
  free(rs->proxies);
  pthread_mutex_destroy(&rs->write_mu);
  store->free(store);
  free(rs);
  return NULL;
}

void ak_routes_free(ak_routes_t *rs) {
  if (!rs) return;
  rs->store->free(rs->store); /* first: a shared store's sync thread reloads into the table */
  ak_rtable_destroy(&rs->table);
  ak_rcache_free(rs->cache);
  free(rs->proxies);
  pthread_mutex_destroy(&rs->write_mu);
  free(rs);
}
