/* The admin module: the `admin` section (listener address, principals) with its rules,
 * and the admin listener's lifecycle. Owns no request handling (admin.c routes, the
 * *_api.c files answer). Never prints or logs a token or its hash. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "admin/admin.h"
#include "admin/auth.h"
#include "core/config.h"
#include "core/log.h"

/* admin.principals[]: who may call the admin API. The file holds only the SHA-256 of a
 * token, never the token; print-config redacts even that. */
static const ak_opt_t principal_rows[] = {
  {.key = "name", .type = AK_OPT_STRING, .flags = AK_OPTF_REQUIRED | AK_OPTF_ID,
   .doc = "who this is: the actor named in its audit rows"},
  {.key = "token_sha256", .type = AK_OPT_STRING, .flags = AK_OPTF_REQUIRED | AK_OPTF_SECRET,
   .doc = "SHA-256 of the bearer token as 64 lowercase hex digits (printf %s \"$TOKEN\" | sha256sum)"},
  {.key = "scopes", .type = AK_OPT_STRLIST, .enum_vals = AK_AUTH_SCOPE_NAMES, .min = 1,
   .flags = AK_OPTF_REQUIRED | AK_OPTF_HAS_MIN, .doc = "what it may do (docs/admin-api.md lists each endpoint's scope)"},
  {.key = "tenants", .type = AK_OPT_STRLIST, .min = 1, .flags = AK_OPTF_REQUIRED | AK_OPTF_HAS_MIN,
   .doc = "\"*\" (every tenant, and the node-wide endpoints) or a list of tenant ids"},
  {0},
};

static const ak_opt_t admin_rows[] = {
  {.key = "enabled", .type = AK_OPT_BOOL, .def = "true", .doc = "serve the admin API and /metrics",
   AK_AT(ak_admin_cfg_t, enabled)},
  {.key = "ip", .type = AK_OPT_IP, .def = "127.0.0.1", .env = "ANKUSA_ADMIN_IP",
   .doc = "admin listener address (an IP literal; 0.0.0.0 exposes it)", AK_AT(ak_admin_cfg_t, ip)},
  {.key = "port", .type = AK_OPT_INT, .def = "4002", .min = 0, .max = 65535,
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX, .env = "ANKUSA_ADMIN_PORT",
   .doc = "admin listener port", AK_AT(ak_admin_cfg_t, port)},
  {.key = "gauge_interval_ms", .type = AK_OPT_INT, .def = "15000", .min = 1,
   .flags = AK_OPTF_HAS_MIN, .doc = "how often gauges are sampled", AK_AT(ak_admin_cfg_t, gauge_interval_ms)},
  {.key = "principals", .type = AK_OPT_LIST_OF, .children = principal_rows,
   .doc = "bearer-token principals; none = no authentication, and then admin.ip must be a loopback address",
   AK_AT(ak_admin_cfg_t, principals)},
  {0},
};

static bool is_sha256_hex(const char *s) {
  size_t n = 0;
  for (; s[n]; n++)
    if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f'))) return false;
  return n == 64;
}

/* 127.0.0.0/8, ::1 and ::ffff:127.0.0.0/104. */
static bool is_loopback(const char *ip) {
  unsigned char b[16];
  if (inet_pton(AF_INET, ip, b) == 1) return b[0] == 127;
  if (inet_pton(AF_INET6, ip, b) != 1) return false;
  static const unsigned char one[16] = {[15] = 1}, mapped[12] = {[10] = 0xff, [11] = 0xff};
  return !memcmp(b, one, 16) || (!memcmp(b, mapped, 12) && b[12] == 127);
}

/* admin.principals: the hash is a real SHA-256 text (a token pasted by mistake is refused
 * without being echoed), names and tokens are unique (the actor of an audit row must name
 * one principal), tenants are "*" alone or ids. With none, the API is unauthenticated, so
 * it may only be reachable from this host. */
static void admin_check(ak_check_t *c, json_t *admin, json_t *root) {
  (void)root;
  json_t *ps = json_object_get(admin, "principals");
  size_t i, j;
  json_t *p, *q;
  json_array_foreach(ps, i, p) {
    const char *name = json_string_value(json_object_get(p, "name"));
    const char *h = json_string_value(json_object_get(p, "token_sha256"));
    if (h && !is_sha256_hex(h))
      ak_check_error(c, "admin.principals[%zu].token_sha256: expected 64 lowercase hex digits (the SHA-256 of the token, "
              "never the token itself)", i);
    for (j = 0; j < i && (q = json_array_get(ps, j)); j++) {
      const char *n2 = json_string_value(json_object_get(q, "name"));
      const char *h2 = json_string_value(json_object_get(q, "token_sha256"));
      if (name && n2 && !strcmp(name, n2))
        ak_check_error(c, "admin.principals[%zu].name: \"%s\" is already admin.principals[%zu]", i, name, j);
      if (h && h2 && !strcmp(h, h2))
        ak_check_error(c, "admin.principals[%zu].token_sha256: the same token as admin.principals[%zu]", i, j);
    }
    json_t *ts = json_object_get(p, "tenants");
    size_t k;
    json_t *t;
    json_array_foreach(ts, k, t) {
      const char *tv = json_string_value(t);
      if (!tv) continue;
      if (!strcmp(tv, "*")) {
        if (json_array_size(ts) > 1) ak_check_error(c, "admin.principals[%zu].tenants: \"*\" stands alone (every tenant)", i);
      } else if (!ak_check_is_id(tv)) {
        char *r = ak_check_render(t, false);
        ak_check_error(c, "admin.principals[%zu].tenants[%zu]: invalid tenant id %s; expected \"*\" or " AK_ID_PATTERN, i, k,
             r ? r : "?");
        free(r);
      }
    }
  }
  const char *ip = json_string_value(json_object_get(admin, "ip"));
  if (json_array_size(ps) == 0 && !ak_check_reported_under(c, "admin.principals") &&
      json_is_true(json_object_get(admin, "enabled")) && ip && !is_loopback(ip))
    ak_check_error(c, "admin.ip: %s is not a loopback address; without admin.principals the admin API has no "
            "authentication and listens on loopback only (127.0.0.1, ::1): add admin.principals or bind "
            "127.0.0.1", ip);
}

const ak_admin_cfg_t *ak_admin_cfg(const ak_config_t *cfg) { return ak_config_of(cfg, &ak_mod_admin); }

static int admin_open(ak_instance_t *inst, char **err) {
  if (!ak_admin_cfg(inst->cfg)->enabled) return 0;
  inst->admin = ak_admin_new(inst);
  if (inst->admin) return 0;
  *err = strdup("admin.principals: cannot be built");
  return AK_MODULE_BAD_CONFIG;
}

static int admin_start(ak_instance_t *inst, char **err) {
  if (!inst->admin) return 0;
  char *why = NULL;
  if (ak_admin_start(inst->admin, &why) == 0) return 0;
  ak_log(AK_LOG_ERROR, "admin", "cannot start the admin listener", "reason=\"%s\"", why ? why : "?");
  *err = why;
  return AK_MODULE_FAILED;
}

/* Its requests make source versions the edge and the dispatcher build for: it stops
 * before they close. */
static void admin_stop(ak_instance_t *inst) {
  if (inst->admin) ak_admin_stop(inst->admin);
}

static void admin_close(ak_instance_t *inst) {
  ak_admin_free(inst->admin);
  inst->admin = NULL;
}

const ak_module_t ak_mod_admin = {
  .name = "admin",
  .section = "admin",
  .doc = "admin listener",
  .options = admin_rows,
  .cfg_size = sizeof(ak_admin_cfg_t),
  .check = admin_check,
  .open = admin_open,
  .start = admin_start,
  .stop = admin_stop,
  .close = admin_close,
};
