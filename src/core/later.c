/* The config sections of Ankusa features this build does not implement yet: routes.
 * Each has the
 * original's keys, defaults and ANKUSA_* overrides as real option rows, validated like
 * any other section, so a file that restates a default or turns a feature off loads
 * unchanged; only what asks for the feature itself is refused, naming the key:
 * routes.enabled true (by its row's enum_unsupported). These modules
 * have no typed struct and no lifecycle: when a feature is built, its module takes over
 * its section's rows and this file loses a part (the claim check's went to admin/claims.c,
 * backup's to backup/module.c, lifecycle's to lifecycle/module.c). */
#include <stdlib.h>
#include <string.h>
#include "core/config.h"
#include "core/later.h"

#define ANKUSA_PORT(k, d, e, what) \
  {.key = k, .type = AK_OPT_INT, .def = d, .min = 0, .max = 65535, \
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX, .env = e, .doc = what}

static bool has_text(const json_t *obj, const char *key) { return json_is_string(json_object_get(obj, key)); }

/* -------------------------------------------------------------------- routes ---- */

static const ak_opt_t routes_store_rows[] = {
  {.key = "type", .type = AK_OPT_ENUM, .enum_vals = "ets|redis", .flags = AK_OPTF_NULLABLE,
   .doc = "where routes live: ets (this node) or redis (shared); a url without a type means redis. Default ets"},
  {.key = "url", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_SECRET | AK_OPTF_HAS_MIN,
   .env = "ANKUSA_ROUTES_STORE_URL", .doc = "redis only: the shared store"},
  {.key = "namespace", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN,
   .doc = "redis only: key namespace"},
  {.key = "tick_ms", .type = AK_OPT_INT, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN,
   .doc = "redis only: how often the shared store is re-read (30000)"},
  {0},
};

static const ak_opt_t routes_cache_rows[] = {
  {.key = "max_size", .type = AK_OPT_INT, .def = "50000", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "route lookups cached"},
  {.key = "ttl_ms", .type = AK_OPT_INT, .def = "30000", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "life of a cached hit (below gc_interval_ms)"},
  {.key = "negative_ttl_ms", .type = AK_OPT_INT, .def = "5000", .min = 0, .flags = AK_OPTF_HAS_MIN,
   .doc = "life of a cached miss"},
  {.key = "gc_interval_ms", .type = AK_OPT_INT, .def = "60000", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "how often expired entries are dropped"},
  {0},
};

static const ak_opt_t ip_rule_rows[] = {
  {.key = "action", .type = AK_OPT_ENUM, .enum_vals = "allow|deny", .flags = AK_OPTF_REQUIRED, .doc = "allow or deny"},
  {.key = "cidr", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_REQUIRED | AK_OPTF_HAS_MIN,
   .doc = "an address or CIDR"},
  {0},
};

static const ak_opt_t ip_rules_rows[] = {
  {.key = "default", .type = AK_OPT_ENUM, .def = "allow", .enum_vals = "allow|deny",
   .doc = "what no rule matching means"},
  {.key = "rules", .type = AK_OPT_LIST_OF, .children = ip_rule_rows, .doc = "the first match wins"},
  {0},
};

static const ak_opt_t routes_admin_rows[] = {
  ANKUSA_PORT("port", "4003", NULL, "route admin listener port"),
  {.key = "ip", .type = AK_OPT_IP, .def = "127.0.0.1", .doc = "route admin listener address"},
  {0},
};

static const ak_opt_t seed_rows[] = {
  {.key = "id", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_REQUIRED | AK_OPTF_HAS_MIN, .doc = "route id"},
  {.key = "path", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_REQUIRED | AK_OPTF_HAS_MIN,
   .doc = "pattern: literal, :param or a trailing *"},
  {.key = "methods", .type = AK_OPT_STRLIST, .flags = AK_OPTF_NULLABLE, .doc = "methods allowed (all when unset)"},
  {.key = "enabled", .type = AK_OPT_BOOL, .def = "true", .doc = "a disabled route answers as if absent"},
  {.key = "ip_rules", .type = AK_OPT_MAP, .flags = AK_OPTF_NULLABLE, .children = ip_rules_rows,
   .doc = "the route's own IP rules"},
  {.key = "metadata", .type = AK_OPT_ANY_MAP, .doc = "free string keys"},
  {0},
};

static const ak_opt_t routes_rows[] = {
  {.key = "enabled", .type = AK_OPT_BOOL, .def = "false", .enum_unsupported = "true", .env = "ANKUSA_ROUTES_ENABLED",
   .doc = "the route guard (deny by default when on)"},
  {.key = "max_routes", .type = AK_OPT_INT, .def = "10000", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "routes kept (over it: 409)"},
  {.key = "log_sample", .type = AK_OPT_INT, .def = "100", .min = 0, .flags = AK_OPTF_HAS_MIN,
   .doc = "one refusal logged in this many (0: none)"},
  {.key = "ip_denied_status", .type = AK_OPT_INT, .def = "403", .min = 403, .max = 404,
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX, .doc = "status of an IP denial: 403 or 404"},
  {.key = "trusted_proxies", .type = AK_OPT_STRLIST, .def = "[]",
   .doc = "CIDRs whose X-Forwarded-For is believed"},
  {.key = "store", .type = AK_OPT_MAP, .children = routes_store_rows, .doc = "where routes live"},
  {.key = "cache", .type = AK_OPT_MAP, .children = routes_cache_rows, .doc = "route lookup cache"},
  {.key = "ip_rules", .type = AK_OPT_MAP, .children = ip_rules_rows, .doc = "node-wide IP rules"},
  {.key = "admin", .type = AK_OPT_MAP, .children = routes_admin_rows, .doc = "route admin listener"},
  {.key = "seed", .type = AK_OPT_LIST_OF, .children = seed_rows, .doc = "routes created at boot"},
  {0},
};

static void routes_check(ak_check_t *c, json_t *routes, json_t *root) {
  (void)root;
  int64_t ttl, gc;
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
  }
}

const ak_module_t ak_mod_routes = {
  .name = "routes",
  .section = "routes",
  .doc = "route guard: not built yet; the keys are checked, enabled: true is refused",
  .options = routes_rows,
  .check = routes_check,
};
