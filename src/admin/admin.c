/* The admin listener (admin.h): its own libmicrohttpd daemon, the request's life from its
 * first (headers-only) call to its completion, X-Request-Id, and the checks that run
 * before any handler: the caller (401), the route (404, admin/router.c), the route's
 * scope and, for a node-wide route, every tenant (403), the path tenant's form (400) and
 * scope (403). Handlers live in the area files (admin/<area>_api.c); this file never answers
 * for an endpoint itself. Request bodies are read up to AK_ADMIN_MAX_BODY, and only once
 * the caller passed the checks; never a body from an unbounded read. Never answers a
 * request that failed a check with anything but 401/403/404/400, and never echoes a
 * token. Also the admin module: the `admin` section's rows and rules, and the listener's
 * lifecycle. */
#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "admin/admin.h"
#include "admin/api.h"
#include "admin/auth.h"
#include "admin/router.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/log.h"
#include "edge/route.h"
#include "store/audit.h"

#define AK_ADMIN_MAX_BODY 65536

struct ak_admin {
  ak_instance_t *inst;
  pthread_mutex_t settings_mu; /* node-wide settings changes, one at a time (api.h) */
  ak_auth_t *auth;
  struct MHD_Daemon *d;
  int port;
};

/* One admin request, from its first (headers-only) call to its completion. */
typedef struct admin_req {
  char *body;
  size_t len;
  bool too_big;
  bool refused; /* answered on the first call (401/403/404/400): the body is dropped */
  const ak_admin_route_t *route;
  const ak_principal_t *principal;
  ak_admin_path_t path; /* the route's captures */
  char request_id[AK_UUID_STR_LEN];
  char client[64];
  ak_audit_who_t who;
} admin_req_t;

static void request_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                              enum MHD_RequestTerminationCode toe) {
  (void)cls;
  (void)c;
  (void)toe;
  admin_req_t *r = *con_cls;
  if (r) {
    free(r->body);
    free(r);
    *con_cls = NULL;
  }
}

static void call_init(ak_admin_t *a, admin_req_t *ar, struct MHD_Connection *c, ak_admin_call_t *call) {
  memset(call, 0, sizeof *call);
  call->inst = a->inst;
  call->conn = c;
  call->route = ar->route;
  call->body = ar->body;
  call->body_len = ar->len;
  call->principal = ar->principal;
  call->scope = ar->principal ? ar->principal->tenants : NULL;
  call->who = &ar->who;
  call->request_id = ar->request_id;
  call->settings_mu = &a->settings_mu;
}

static void client_text(struct MHD_Connection *c, char *out, size_t n) {
  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  snprintf(out, n, "unknown");
  if (!ci || !ci->client_addr) return;
  const struct sockaddr *sa = ci->client_addr;
  if (sa->sa_family == AF_INET) inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out, (socklen_t)n);
  else if (sa->sa_family == AF_INET6)
    inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, out, (socklen_t)n);
}

/* The checks every request passes before its handler (and before its body is read):
 * who the caller is (401), the route (404), the route's scope and, for a node-wide
 * route, every tenant (403), the path tenant's form (400) and scope (403). MHD_YES with
 * ar->refused set when it answered. */
static enum MHD_Result admit(ak_admin_t *a, admin_req_t *ar, const char *method, const char *url,
                             ak_admin_call_t *call) {
  bool path_known = false;
  ar->route = ak_admin_route_match(method, url, &ar->path, &path_known);
  call->route = ar->route;
  ar->refused = true;
  if (!ar->route || ar->route->scope != AK_SCOPE_OPEN) {
    ar->principal = ak_auth_check(a->auth, MHD_lookup_connection_value(call->conn, MHD_HEADER_KIND, "Authorization"));
    if (!ar->principal) {
      ak_log(AK_LOG_DEBUG, "admin", "unauthorized request", "client=%s request_id=%s", ar->client, ar->request_id);
      return ak_admin_error(call, 401, "unauthorized");
    }
    ar->who.actor = ar->principal->name;
  }
  if (!ar->route) return ak_admin_error(call, 404, "not_found");
  const ak_admin_route_t *rt = ar->route;
  if (rt->scope != AK_SCOPE_OPEN) {
    if (!ak_principal_has(ar->principal, rt->scope)) return ak_admin_forbidden(call, rt->scope, NULL);
    if ((rt->flags & AK_ROUTE_NODE) && !ak_principal_all_tenants(ar->principal))
      return ak_admin_forbidden(call, rt->scope, "*");
    const char *t = ar->path.tenant;
    if (t[0]) {
      if (!ak_tenant_valid(t, strlen(t))) return ak_admin_error(call, 400, "invalid_tenant");
      if (!ak_principal_tenant(ar->principal, t, strlen(t))) return ak_admin_forbidden(call, rt->scope, t);
    }
  }
  ar->refused = false;
  return MHD_YES;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload_data, size_t *upload_data_size,
                               void **con_cls) {
  (void)version;
  ak_admin_t *a = cls;
  admin_req_t *ar = *con_cls;
  ak_admin_call_t call;
  if (ar == NULL) {
    ar = calloc(1, sizeof *ar);
    if (!ar) return MHD_NO;
    *con_cls = ar;
    uint8_t rid[16];
    ak_uuid7_new(&a->inst->ids, ak_now_ms(), rid);
    ak_uuid_format(rid, ar->request_id);
    client_text(c, ar->client, sizeof ar->client);
    ar->who = (ak_audit_who_t){.actor = "anonymous", .client = ar->client, .request_id = ar->request_id};
    call_init(a, ar, c, &call);
    enum MHD_Result r = admit(a, ar, method, url, &call);
    if (ar->refused) return r;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) return MHD_YES; /* read the body first */
    call_init(a, ar, c, &call);
    return ar->route->fn(&call, &ar->path);
  }
  if (*upload_data_size) {
    /* bounded: what passes AK_ADMIN_MAX_BODY is dropped and the request answered 413 */
    size_t n = *upload_data_size;
    if (!ar->refused && !ar->too_big && ar->len + n <= AK_ADMIN_MAX_BODY) {
      char *nb = realloc(ar->body, ar->len + n);
      if (!nb) return MHD_NO;
      memcpy(nb + ar->len, upload_data, n);
      ar->body = nb;
      ar->len += n;
    } else {
      ar->too_big = true;
    }
    *upload_data_size = 0;
    return MHD_YES;
  }
  if (ar->refused) return MHD_YES; /* answered already */
  call_init(a, ar, c, &call);
  if (ar->too_big)
    return ak_admin_json(&call, 413,
                         json_pack("{s:s,s:i}", "error", "payload_too_large", "limit", AK_ADMIN_MAX_BODY));
  return ar->route->fn(&call, &ar->path);
}

ak_admin_t *ak_admin_new(ak_instance_t *inst) {
  ak_admin_t *a = calloc(1, sizeof *a);
  if (!a) return NULL;
  a->inst = inst;
  pthread_mutex_init(&a->settings_mu, NULL);
  char *err = NULL;
  a->auth = ak_auth_new(ak_admin_cfg(inst->cfg)->principals, &err);
  if (!a->auth) {
    ak_log(AK_LOG_ERROR, "admin", "cannot build the admin principals", "reason=\"%s\"", err ? err : "out of memory");
    free(err);
    pthread_mutex_destroy(&a->settings_mu);
    free(a);
    return NULL;
  }
  return a;
}

int ak_admin_start(ak_admin_t *a, char **err) {
  const ak_admin_cfg_t *cfg = ak_admin_cfg(a->inst->cfg);
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL;
  if (strchr(cfg->ip, ':')) {
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons((uint16_t)cfg->port);
    inet_pton(AF_INET6, cfg->ip, &s6->sin6_addr);
    flags |= MHD_USE_IPv6;
  } else {
    struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
    s4->sin_family = AF_INET;
    s4->sin_port = htons((uint16_t)cfg->port);
    inet_pton(AF_INET, cfg->ip, &s4->sin_addr);
  }
  a->d = MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, handler, a,
                          MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                          MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)30,
                          MHD_OPTION_CONNECTION_LIMIT, (unsigned)256,
                          MHD_OPTION_NOTIFY_COMPLETED, request_completed, NULL,
                          MHD_OPTION_END);
  if (!a->d) {
    char b[200];
    snprintf(b, sizeof b, "cannot listen on admin.ip %s admin.port %d (in use, or no permission)", cfg->ip,
             (int)cfg->port);
    *err = strdup(b);
    return -1;
  }
  const union MHD_DaemonInfo *di = MHD_get_daemon_info(a->d, MHD_DAEMON_INFO_BIND_PORT);
  a->port = di ? di->port : (int)cfg->port;
  if (ak_auth_count(a->auth) == 0)
    ak_log(AK_LOG_WARNING, "admin",
           "admin.principals is empty: the admin API answers without authentication, on loopback only",
           "admin_ip=%s admin_port=%d", cfg->ip, a->port);
  else
    ak_log(AK_LOG_INFO, "admin", "admin API requires a bearer token", "principals=%zu admin_ip=%s admin_port=%d",
           ak_auth_count(a->auth), cfg->ip, a->port);
  return 0;
}

int ak_admin_port(const ak_admin_t *a) { return a->port; }

void ak_admin_stop(ak_admin_t *a) {
  if (a->d) MHD_stop_daemon(a->d);
  a->d = NULL;
}

void ak_admin_free(ak_admin_t *a) {
  if (!a) return;
  ak_admin_stop(a);
  ak_auth_free(a->auth);
  pthread_mutex_destroy(&a->settings_mu);
  free(a);
}

/* -------------------------------------------------------- the admin module ---- */

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
