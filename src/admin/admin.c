/* The admin listener (admin.h): its own server on the HTTP layer (http/server.h, one
 * loop), the request's life from its head to its completion, X-Request-Id, and the
 * checks that run before any handler: the caller (401), the route (404,
 * admin/router.c), the route's scope and, for a node-wide route, every tenant (403), the
 * path tenant's form (400) and scope (403). Handlers live in the area files
 * (admin/<area>_api.c); this file never answers for an endpoint itself, only for a
 * request no handler may see (a failed check, a body over AK_ADMIN_MAX_BODY, out of
 * memory) and for a handler that returned without answering (500). Request bodies are
 * read up to AK_ADMIN_MAX_BODY, and only once the caller passed the checks; a declared
 * length over it is refused before a body byte is read; never a body from an unbounded
 * read. Never answers a request that failed a check with anything but 401/403/404/400,
 * and never echoes or keeps a token. Also the admin module: the `admin` section's rows
 * and rules, and the listener's lifecycle. */
#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "admin/admin.h"
#include "admin/api.h"
#include "admin/auth.h"
#include "admin/node_api.h"
#include "core/gauges.h"
#include "admin/router.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/log.h"
#include "edge/route.h"
#include "http/server.h"
#include "store/audit.h"

#define AK_ADMIN_MAX_BODY 65536
/* An Authorization value longer than this holds no token we issued: it is checked as
 * an empty one (401 when principals are configured). */
#define AK_ADMIN_MAX_AUTHORIZATION 4096

struct ak_admin {
  ak_instance_t *inst;
  pthread_mutex_t settings_mu; /* node-wide settings changes, one at a time (api.h) */
  ak_auth_t *auth;
  ak_hserver_t *srv;
  bool stopped;
  int port;
  ak_node_gauges_t *gauges; /* the store gauges (node_api.h) */
  const ak_admin_route_t *table; /* the routes it serves (admin/router.h) */
  size_t ntable;
  const char *key; /* its config section, for messages: "admin", "routes.admin" */
  const char *ip;
  int cfg_port;
};

/* One admin request, from its head to its on_done (the layer's request data). */
typedef struct admin_req {
  char *body;
  size_t len, cap;
  bool answered; /* an answer was handed to the layer: nothing more is read or run */
  const ak_admin_route_t *route;
  const ak_principal_t *principal;
  ak_admin_path_t path; /* the route's captures */
  char request_id[AK_UUID_STR_LEN];
  char client[64];
  ak_audit_who_t who;
} admin_req_t;

static void call_init(ak_admin_t *a, admin_req_t *ar, ak_hreq_t *r, ak_admin_call_t *call) {
  memset(call, 0, sizeof *call);
  call->inst = a->inst;
  call->req = r;
  call->route = ar->route;
  call->body = ar->body;
  call->body_len = ar->len;
  call->principal = ar->principal;
  call->scope = ar->principal ? ar->principal->tenants : NULL;
  call->who = &ar->who;
  call->request_id = ar->request_id;
  call->settings_mu = &a->settings_mu;
}

static void client_text(ak_hreq_t *r, char *out, size_t n) {
  socklen_t len = 0;
  const struct sockaddr *sa = ak_hreq_peer(r, &len);
  snprintf(out, n, "unknown");
  if (!sa) return;
  if (sa->sa_family == AF_INET) inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out, (socklen_t)n);
  else if (sa->sa_family == AF_INET6)
    inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, out, (socklen_t)n);
}

/* The caller named by the Authorization header (ak_auth_check). The layer's value is not
 * NUL-terminated: it is copied, bounded, and wiped after the check. A value with a NUL
 * byte or longer than AK_ADMIN_MAX_AUTHORIZATION is checked as an empty one. */
static const ak_principal_t *caller(ak_admin_t *a, ak_hreq_t *r) {
  size_t len = 0;
  const char *v = ak_hreq_header(r, "Authorization", &len);
  if (!v) return ak_auth_check(a->auth, NULL);
  char buf[AK_ADMIN_MAX_AUTHORIZATION + 1];
  if (len > AK_ADMIN_MAX_AUTHORIZATION || memchr(v, 0, len)) len = 0;
  memcpy(buf, v, len);
  buf[len] = 0;
  const ak_principal_t *p = ak_auth_check(a->auth, buf);
  explicit_bzero(buf, len);
  return p;
}

/* The checks every request passes before its handler (and before its body is read):
 * who the caller is (401), the route (404), the route's scope and, for a node-wide
 * route, every tenant (403), the path tenant's form (400) and scope (403). path: the
 * decoded path, NULL for one no route can match. true when it answered. */
static bool admit(ak_admin_t *a, admin_req_t *ar, const char *method, const char *path, ak_admin_call_t *call) {
  bool path_known = false;
  ar->route = path ? ak_admin_route_match_in(a->table, a->ntable, method, path, &ar->path, &path_known) : NULL;
  call->route = ar->route;
  if (!ar->route || ar->route->scope != AK_SCOPE_OPEN) {
    ar->principal = caller(a, call->req);
    if (!ar->principal) {
      ak_log(AK_LOG_DEBUG, "admin", "unauthorized request", "client=%s request_id=%s", ar->client, ar->request_id);
      ak_admin_error(call, 401, "unauthorized");
      return true;
    }
    ar->who.actor = ar->principal->name;
  }
  if (!ar->route) {
    ak_admin_error(call, 404, "not_found");
    return true;
  }
  const ak_admin_route_t *rt = ar->route;
  if (rt->scope != AK_SCOPE_OPEN) {
    if (!ak_principal_has(ar->principal, rt->scope)) {
      ak_admin_forbidden(call, rt->scope, NULL);
      return true;
    }
    if ((rt->flags & AK_ROUTE_NODE) && !ak_principal_all_tenants(ar->principal)) {
      ak_admin_forbidden(call, rt->scope, "*");
      return true;
    }
    const char *t = ar->path.tenant;
    if (t[0]) {
      if (!ak_tenant_valid(t, strlen(t))) {
        ak_admin_error(call, 400, "invalid_tenant");
        return true;
      }
      if (!ak_principal_tenant(ar->principal, t, strlen(t))) {
        ak_admin_forbidden(call, rt->scope, t);
        return true;
      }
    }
  }
  return false;
}

/* A request this file answers itself (out of memory, a body over the bound), with its
 * X-Request-Id. */
static void answer(ak_admin_t *a, admin_req_t *ar, ak_hreq_t *r, unsigned status, json_t *j) {
  ak_admin_call_t call;
  call_init(a, ar, r, &call);
  ak_admin_json(&call, status, j);
  ar->answered = true;
}

static void too_big(ak_admin_t *a, admin_req_t *ar, ak_hreq_t *r) {
  answer(a, ar, r, 413, json_pack("{s:s,s:i}", "error", "payload_too_large", "limit", AK_ADMIN_MAX_BODY));
}

/* The route's handler, with the query's arguments decoded for it and freed after it. A
 * handler that returns without answering is a bug: 500, logged, so the client is not
 * left waiting. */
static void run(ak_admin_t *a, admin_req_t *ar, ak_hreq_t *r) {
  ak_admin_call_t call;
  call_init(a, ar, r, &call);
  size_t ql = 0;
  const char *q = ak_hreq_query(r, &ql);
  if (ak_admin_call_query(&call, q, ql) != 0) {
    ak_admin_error(&call, 500, "internal");
  } else {
    ar->route->fn(&call, &ar->path);
    if (!call.answered) {
      ak_log(AK_LOG_ERROR, "admin", "handler returned without an answer", "method=%s route=%s request_id=%s",
             ar->route->method, ar->route->pattern, ar->request_id);
      ak_admin_error(&call, 500, "internal");
    }
  }
  ak_admin_call_release(&call);
  ar->answered = true;
}

/* The head: request id, the checks (answered here, so a refused body is never read and
 * no 100 Continue is sent), then GET and HEAD run at once; a request with a body waits
 * for it, unless its declared length is already over the bound. */
static void on_head(void *ctx, ak_hreq_t *r) {
  ak_admin_t *a = ctx;
  admin_req_t *ar = calloc(1, sizeof *ar);
  if (!ar) {
    ak_hreq_error(r, 500, "internal", 0);
    return;
  }
  ak_hreq_set_data(r, ar);
  uint8_t rid[16];
  ak_uuid7_new(&a->inst->ids, ak_now_ms(), rid);
  ak_uuid_format(rid, ar->request_id);
  client_text(r, ar->client, sizeof ar->client);
  ar->who = (ak_audit_who_t){.actor = "anonymous", .client = ar->client, .request_id = ar->request_id};
  const char *method = ak_hreq_method(r);
  /* routed on the %XX-decoded path, as the listener always has; a decoded NUL matches
   * no route */
  size_t plen = 0;
  const char *raw = ak_hreq_path(r, &plen);
  char *path = malloc(plen + 1);
  if (!path) {
    answer(a, ar, r, 500, json_pack("{s:s}", "error", "internal"));
    return;
  }
  memcpy(path, raw, plen);
  bool nul = ak_admin_unescape(path, plen, false) != strlen(path);
  ak_admin_call_t call;
  call_init(a, ar, r, &call);
  bool refused = admit(a, ar, method, nul ? NULL : path, &call);
  free(path);
  if (refused) {
    ar->answered = true;
    return;
  }
  if (!strcmp(method, "GET") || !strcmp(method, "HEAD")) {
    run(a, ar, r);
    return;
  }
  int64_t cl = ak_hreq_content_length(r);
  if (cl > AK_ADMIN_MAX_BODY) {
    too_big(a, ar, r);
    return;
  }
  if (cl > 0) {
    ar->body = malloc((size_t)cl);
    if (!ar->body) {
      answer(a, ar, r, 500, json_pack("{s:s}", "error", "internal"));
      return;
    }
    ar->cap = (size_t)cl;
  }
}

/* Bounded: the byte that passes AK_ADMIN_MAX_BODY is answered 413 at once (a chunked
 * body announces no length), and the layer delivers nothing more. */
static void on_body(void *ctx, ak_hreq_t *r, const uint8_t *p, size_t n) {
  ak_admin_t *a = ctx;
  admin_req_t *ar = ak_hreq_data(r);
  if (!ar || ar->answered) return;
  if (n > AK_ADMIN_MAX_BODY - ar->len) {
    too_big(a, ar, r);
    return;
  }
  if (ar->len + n > ar->cap) {
    size_t cap = ar->cap ? ar->cap * 2 : 4096;
    if (cap < ar->len + n) cap = ar->len + n;
    if (cap > AK_ADMIN_MAX_BODY) cap = AK_ADMIN_MAX_BODY;
    char *nb = realloc(ar->body, cap);
    if (!nb) {
      answer(a, ar, r, 500, json_pack("{s:s}", "error", "internal"));
      return;
    }
    ar->body = nb;
    ar->cap = cap;
  }
  memcpy(ar->body + ar->len, p, n);
  ar->len += n;
}

static void on_end(void *ctx, ak_hreq_t *r) {
  admin_req_t *ar = ak_hreq_data(r);
  if (!ar || ar->answered) return;
  run(ctx, ar, r);
}

/* Admin never suspends a request; the layer calls this only after ak_hreq_resume. */
static void on_resume(void *ctx, ak_hreq_t *r) {
  (void)ctx;
  ak_hreq_error(r, 500, "internal", 0);
}

static void on_done(void *ctx, ak_hreq_t *r, bool answered) {
  (void)ctx;
  (void)answered;
  admin_req_t *ar = ak_hreq_data(r);
  if (!ar) return;
  free(ar->body);
  free(ar);
  ak_hreq_set_data(r, NULL);
}

static const ak_hhandler_t admin_handler = {
  .on_head = on_head,
  .on_body = on_body,
  .on_end = on_end,
  .on_resume = on_resume,
  .on_done = on_done,
};

ak_admin_t *ak_admin_new(ak_instance_t *inst) {
  size_t n;
  const ak_admin_route_t *t = ak_admin_routes(&n);
  const ak_admin_cfg_t *cfg = ak_admin_cfg(inst->cfg);
  return ak_admin_new_listener(inst, "admin", cfg->ip, (int)cfg->port, t, n);
}

ak_admin_t *ak_admin_new_listener(ak_instance_t *inst, const char *key, const char *ip, int port,
                                  const ak_admin_route_t *table, size_t n) {
  ak_admin_t *a = calloc(1, sizeof *a);
  if (!a) return NULL;
  a->inst = inst;
  a->table = table;
  a->ntable = n;
  a->key = key;
  a->ip = ip;
  a->cfg_port = port;
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

/* One loop: handlers make RocksDB calls and block, and operator traffic is light; the
 * ingest listener's loops never serve it. */
int ak_admin_start(ak_admin_t *a, char **err) {
  ak_hserver_cfg_t hc = {
    .name = a->key,
    .ip = a->ip,
    .port = a->cfg_port,
    .loops = 1,
    .limits = {.max_connections = 256},
    .handler = &admin_handler,
    .ctx = a,
  };
  char *why = NULL;
  a->srv = ak_hserver_new(&hc, &why);
  if (!a->srv || ak_hserver_start(a->srv, &why) != 0) {
    if (asprintf(err, "cannot listen on %s.ip %s %s.port %d: %s", a->key, a->ip, a->key, a->cfg_port,
                 why ? why : "in use, or no permission") < 0)
      *err = NULL;
    free(why);
    if (a->srv) ak_hserver_free(a->srv);
    a->srv = NULL;
    return -1;
  }
  a->port = ak_hserver_port(a->srv);
  if (ak_auth_count(a->auth) == 0)
    ak_log(AK_LOG_WARNING, "admin",
           "admin.principals is empty: the admin API answers without authentication, on loopback only",
           "admin_ip=%s admin_port=%d listener=%s", a->ip, a->port, a->key);
  else
    ak_log(AK_LOG_INFO, "admin", "admin API requires a bearer token", "principals=%zu admin_ip=%s admin_port=%d listener=%s",
           ak_auth_count(a->auth), a->ip, a->port, a->key);
  return 0;
}

int ak_admin_port(const ak_admin_t *a) { return a->port; }

void ak_admin_stop(ak_admin_t *a) {
  if (a->srv && !a->stopped) ak_hserver_stop(a->srv);
  a->stopped = true;
}

void ak_admin_free(ak_admin_t *a) {
  if (!a) return;
  ak_admin_stop(a);
  if (a->srv) ak_hserver_free(a->srv);
  ak_auth_free(a->auth);
  ak_node_gauges_free(a->gauges);
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
  if (inst->admin) {
    inst->admin->gauges = ak_node_gauges_new(inst);
    if (inst->admin->gauges && ak_gauges_add(inst->gauges, ak_node_gauges_sample, inst->admin->gauges) == 0) return 0;
    ak_admin_free(inst->admin); /* a failed open cleans up after itself */
    inst->admin = NULL;
    *err = strdup("cannot add the store gauges");
    return AK_MODULE_FAILED;
  }
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
  .roles = AK_ROLES_STORE,
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
