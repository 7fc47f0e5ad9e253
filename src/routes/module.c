/* The `routes` section (the route guard's keys, the original's names and defaults) and
 * the guard's lifecycle on an edge node (inst->routes): open loads the route store and the
 * seeds; the route admin listener (admin/routes_api.c) and the edge use what it built.
 * routes.store.type redis: the shared store (routes/store_redis.c, docs/shared-stores.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/config.h"
#include "core/log.h"
#include "routes/routes.h"

static const ak_opt_t routes_store_rows[] = {
  {.key = "type", .type = AK_OPT_ENUM, .enum_vals = "ets|redis", .flags = AK_OPTF_NULLABLE,
   .doc = "where routes live: ets (this node's store) or redis (shared by the nodes that name the same url and "
          "namespace); a url without a type means redis. Default ets"},
  {.key = "url", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_SECRET | AK_OPTF_HAS_MIN,
   .env = "ANKUSA_ROUTES_STORE_URL", .doc = "redis only: the shared store"},
  {.key = "namespace", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN,
   .doc = "redis only: key namespace (default ankusa:routes:<instance>)"},
  {.key = "tick_ms", .type = AK_OPT_INT, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN,
   .doc = "redis only: how often the shared store is re-read (30000)"},
  {0},
};

#define CACHE_AT(f) AK_AT(__typeof__(((ak_routes_cfg_t *)0)->cache), f)
static const ak_opt_t routes_cache_rows[] = {
  {.key = "max_size", .type = AK_OPT_INT, .def = "50000", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "route decisions cached", CACHE_AT(max_size)},
  {.key = "ttl_ms", .type = AK_OPT_INT, .def = "30000", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "life of a cached hit (below gc_interval_ms)", CACHE_AT(ttl_ms)},
  {.key = "negative_ttl_ms", .type = AK_OPT_INT, .def = "5000", .min = 0, .flags = AK_OPTF_HAS_MIN,
   .doc = "life of a cached miss (0: misses are not cached); any change of the routes drops every entry",
   CACHE_AT(negative_ttl_ms)},
  {.key = "gc_interval_ms", .type = AK_OPT_INT, .def = "60000", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "how often expired entries are dropped", CACHE_AT(gc_interval_ms)},
  {0},
};

static const ak_opt_t ip_rule_rows[] = {
  {.key = "action", .type = AK_OPT_ENUM, .enum_vals = "allow|deny", .flags = AK_OPTF_REQUIRED, .doc = "allow or deny"},
  {.key = "cidr", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_REQUIRED | AK_OPTF_HAS_MIN,
   .doc = "an address or CIDR, IPv4 or IPv6 (not inside ::ffff:0:0/96)"},
  {0},
};

static const ak_opt_t ip_rules_rows[] = {
  {.key = "default", .type = AK_OPT_ENUM, .def = "allow", .enum_vals = "allow|deny",
   .doc = "what no rule matching means"},
  {.key = "rules", .type = AK_OPT_LIST_OF, .children = ip_rule_rows, .doc = "the first match wins"},
  {0},
};

#define ADMIN_AT(f) AK_AT(__typeof__(((ak_routes_cfg_t *)0)->admin), f)
static const ak_opt_t routes_admin_rows[] = {
  {.key = "port", .type = AK_OPT_INT, .def = "4003", .min = 0, .max = 65535, .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX,
   .doc = "route admin listener port", ADMIN_AT(port)},
  {.key = "ip", .type = AK_OPT_IP, .def = "127.0.0.1", .doc = "route admin listener address (an IP literal)",
   ADMIN_AT(ip)},
  {0},
};

static const ak_opt_t seed_rows[] = {
  {.key = "id", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_REQUIRED | AK_OPTF_HAS_MIN,
   .doc = "route id: [A-Za-z0-9_.-]{1,64}"},
  {.key = "path", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_REQUIRED | AK_OPTF_HAS_MIN,
   .doc = "pattern: literal, :param (one segment) or a trailing * (one or more)"},
  {.key = "methods", .type = AK_OPT_STRLIST, .flags = AK_OPTF_NULLABLE, .doc = "methods allowed (all when unset)"},
  {.key = "enabled", .type = AK_OPT_BOOL, .def = "true", .doc = "a disabled route answers as if absent"},
  {.key = "ip_rules", .type = AK_OPT_MAP, .flags = AK_OPTF_NULLABLE, .children = ip_rules_rows,
   .doc = "the route's own IP rules"},
  {.key = "metadata", .type = AK_OPT_ANY_MAP, .doc = "free string keys"},
  {.key = "tenant", .type = AK_OPT_STRING, .flags = AK_OPTF_NULLABLE | AK_OPTF_ID,
   .doc = "the tenant the route belongs to (default: from a /webhooks/<tenant>/... path, else none)"},
  {0},
};

#define RT_AT(f) AK_AT(ak_routes_cfg_t, f)
static const ak_opt_t routes_rows[] = {
  {.key = "enabled", .type = AK_OPT_BOOL, .def = "false", .env = "ANKUSA_ROUTES_ENABLED",
   .doc = "the route guard (deny by default when on)", RT_AT(enabled)},
  {.key = "max_routes", .type = AK_OPT_INT, .def = "10000", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "routes kept (over it: 409 too_many_routes)", RT_AT(max_routes)},
  {.key = "log_sample", .type = AK_OPT_INT, .def = "100", .min = 0, .flags = AK_OPTF_HAS_MIN,
   .doc = "one refusal logged in this many (0: none)", RT_AT(log_sample)},
  {.key = "ip_denied_status", .type = AK_OPT_INT, .def = "403", .min = 403, .max = 404,
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX, .doc = "status of an IP denial: 403 or 404", RT_AT(ip_denied_status)},
  {.key = "trusted_proxies", .type = AK_OPT_STRLIST, .def = "[]",
   .doc = "CIDRs whose X-Forwarded-For is believed", RT_AT(trusted_proxies)},
  {.key = "store", .type = AK_OPT_MAP, .children = routes_store_rows, .doc = "where routes live"},
  {.key = "cache", .type = AK_OPT_MAP, .children = routes_cache_rows, .doc = "route decision cache", RT_AT(cache)},
  {.key = "ip_rules", .type = AK_OPT_MAP, .children = ip_rules_rows,
   .doc = "node-wide IP rules (until PUT /admin/ip-rules stores others)"},
  {.key = "admin", .type = AK_OPT_MAP, .children = routes_admin_rows, .doc = "route admin listener", RT_AT(admin)},
  {.key = "seed", .type = AK_OPT_LIST_OF, .children = seed_rows,
   .doc = "routes created at boot when the store has none of that id", RT_AT(seed)},
  {0},
};

static bool has_text(const json_t *obj, const char *key) { return json_is_string(json_object_get(obj, key)); }

/* 127.0.0.0/8, ::1 (the admin listener's rule for an API without principals). */
static bool loopback(const char *ip) {
  ak_netaddr_t a, one;
  if (!ip || !ak_netaddr_parse(ip, strlen(ip), &a)) return false;
  static const uint8_t mapped[12] = {[10] = 0xff, [11] = 0xff};
  ak_netaddr_parse("::1", 3, &one);
  return !memcmp(a.a, one.a, 16) || (!memcmp(a.a, mapped, 12) && a.a[12] == 127);
}

static void routes_check(ak_check_t *c, json_t *routes, json_t *root) {
  int64_t ttl, gc;
  const char *aip = json_string_value(json_object_get(json_object_get(routes, "admin"), "ip"));
  json_t *ps = json_object_get(json_object_get(root, "admin"), "principals");
  if (json_is_true(json_object_get(routes, "enabled")) && json_array_size(ps) == 0 && aip && !loopback(aip))
    ak_check_error(c, "routes.admin.ip: %s is not a loopback address; without admin.principals the route admin API has "
                      "no authentication and listens on loopback only (127.0.0.1, ::1): add admin.principals or bind "
                      "127.0.0.1", aip);
  json_t *cache = json_object_get(routes, "cache");
  if (ak_check_int_at(cache, "ttl_ms", &ttl) && ak_check_int_at(cache, "gc_interval_ms", &gc) && ttl >= gc)
    ak_check_error(c, "routes.cache.ttl_ms must be below routes.cache.gc_interval_ms (%lld), got %lld",
                   (long long)gc, (long long)ttl);
  json_t *store = json_object_get(routes, "store");
  if (json_is_object(store)) {
    json_t *type = json_object_get(store, "type");
    if (json_is_null(type))
      json_object_set_new(store, "type", json_string(has_text(store, "url") ? "redis" : "ets"));
    const char *t = json_string_value(json_object_get(store, "type"));
    static const char *const redis_only[] = {"url", "namespace", "tick_ms"};
    for (size_t i = 0; t && strcmp(t, "redis") && i < sizeof redis_only / sizeof *redis_only; i++) {
      json_t *v = json_object_get(store, redis_only[i]);
      if (v && !json_is_null(v)) ak_check_error(c, "routes.store.%s: only with routes.store.type redis", redis_only[i]);
    }
    if (t && !strcmp(t, "redis") && json_is_true(json_object_get(routes, "enabled"))) {
      const char *url = json_string_value(json_object_get(store, "url"));
      ak_redis_url_t u;
      char why[200];
      if (!url) ak_check_error(c, "routes.store.url: required with routes.store.type redis");
      else if (ak_redis_url_parse(url, &u, why, sizeof why) != 0) ak_check_error(c, "routes.store.url: %s", why);
      explicit_bzero(&u, sizeof u);
    }
  }
  size_t i;
  json_t *v;
  char err[256];
  json_array_foreach(json_object_get(routes, "trusted_proxies"), i, v) {
    ak_cidr_t cidr;
    bool v6;
    const char *why = NULL;
    const char *s = json_string_value(v);
    if (s && !ak_iprules_parse_cidr(s, &cidr, &v6, &why))
      ak_check_error(c, "routes.trusted_proxies[%zu]: \"%.64s\" %s", i, s, why);
  }
  json_t *ipr = json_object_get(routes, "ip_rules");
  if (json_is_object(ipr) && !ak_check_reported_under(c, "routes.ip_rules")) {
    ak_iprules_t *r = ak_iprules_from_json(ipr, false, err, sizeof err);
    if (!r) ak_check_error(c, "routes.ip_rules.%s", err);
    ak_iprules_free(r);
  }
  json_t *seed = json_object_get(routes, "seed");
  if (!ak_check_reported_under(c, "routes.seed")) {
    json_array_foreach(seed, i, v) {
      ak_rroute_t *r = ak_rroute_from_json(v, NULL, err, sizeof err);
      if (!r) {
        ak_check_error(c, "routes.seed[%zu].%s", i, err);
        continue;
      }
      for (size_t j = 0; j < i; j++)
        if (!strcmp(json_string_value(json_object_get(json_array_get(seed, j), "id")), r->id))
          ak_check_error(c, "routes.seed[%zu].id: \"%s\" is already routes.seed[%zu]", i, r->id, j);
      ak_rroute_unref(r);
    }
    int64_t max;
    if (ak_check_int_at(routes, "max_routes", &max) && (int64_t)json_array_size(seed) > max)
      ak_check_error(c, "routes.seed: %zu routes, over routes.max_routes (%lld)", json_array_size(seed), (long long)max);
  }
}

const ak_routes_cfg_t *ak_routes_cfg(const ak_config_t *cfg) { return ak_config_of(cfg, &ak_mod_routes); }

static int routes_open(ak_instance_t *inst, char **err) {
  const ak_routes_cfg_t *cfg = ak_routes_cfg(inst->cfg);
  if (!cfg->enabled || !(inst->roles & AK_ROLE_EDGE)) return 0;
  char e[300];
  const json_t *section = json_object_get(inst->cfg->effective, "routes");
  ak_rstore_t *st = NULL;
  char ns[200] = "";
  const json_t *sj = json_object_get(section, "store");
  const char *type = json_string_value(json_object_get(sj, "type"));
  bool redis = type && !strcmp(type, "redis");
  if (redis) {
    const char *url = json_string_value(json_object_get(sj, "url"));
    const char *nsv = json_string_value(json_object_get(sj, "namespace"));
    json_int_t tick = json_integer_value(json_object_get(sj, "tick_ms"));
    ak_redis_url_t u;
    char why[200];
    if (!url || ak_redis_url_parse(url, &u, why, sizeof why) != 0) { /* the check refused it already */
      *err = strdup("routes.store.url: not a redis url");
      return AK_MODULE_FAILED;
    }
    if (nsv) snprintf(ns, sizeof ns, "%s", nsv);
    else snprintf(ns, sizeof ns, "ankusa:routes:%s", inst->name ? inst->name : "default");
    st = ak_rstore_redis_new(&u, ns, tick > 0 ? tick : 30000, inst->audit);
  } else {
    st = ak_rstore_ets_new(inst->store, inst->audit);
  }
  if (!st || !(inst->routes = ak_routes_new(cfg, json_object_get(section, "ip_rules"), st, e, sizeof e))) {
    if (!st) snprintf(e, sizeof e, "out of memory");
    *err = strdup(e);
    return AK_MODULE_FAILED;
  }
  ak_rsnap_t *s = ak_routes_snapshot(inst->routes);
  if (redis && !ak_routes_ready(inst->routes))
    ak_log(AK_LOG_WARNING, "routes", "the shared route store is unavailable at start: requests answer 503 "
           "store_unavailable until it is read", "store=%s namespace=%s", ak_rstore_redis_addr(st), ns);
  else if (redis)
    ak_log(AK_LOG_INFO, "routes", "route guard on with the shared route store", "store=%s namespace=%s",
           ak_rstore_redis_addr(st), ns);
  ak_log(AK_LOG_INFO, "routes", "route guard on: requests without a route are refused", "routes=%zu", s->n);
  ak_rsnap_unref(s);
  return 0;
}

static void routes_close(ak_instance_t *inst) {
  ak_routes_free(inst->routes);
  inst->routes = NULL;
}

const ak_module_t ak_mod_routes = {
  .name = "routes",
  .section = "routes",
  .doc = "route guard: deny by default when enabled; routes from the seed and the route admin API (4003)",
  .options = routes_rows,
  .cfg_size = sizeof(ak_routes_cfg_t),
  .check = routes_check,
  .roles = AK_ROLE_EDGE,
  .open = routes_open,
  .close = routes_close,
};
