/* The route admin API's handlers and listener (routes_api.h). Parses, checks the caller's
 * tenants, answers; every change goes through ak_routes_change (routes/routes.h), which
 * writes the change and its audit row in one synced batch. Never answers for a route the
 * caller may not see: such a route is 404 like an absent one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "admin/admin.h"
#include "admin/router.h"
#include "admin/routes_api.h"
#include "core/clock.h"
#include "core/log.h"
#include "routes/routes.h"

#define LIST_DEFAULT 100
#define LIST_MAX 1000

/* May the caller act on a route of this tenant (NULL: a route of no tenant)? */
static bool may_tenant(const char *tenant, void *ctx) {
  ak_admin_call_t *call = ctx;
  if (!tenant) return call->scope == NULL;
  return ak_tenant_scope_has(call->scope, tenant, strlen(tenant));
}

static bool guard_on(ak_admin_call_t *call) {
  if (call->inst->routes) return true;
  ak_admin_error(call, 503, "store_unavailable");
  return false;
}

/* The body as a JSON object, or answered 400 invalid_route. */
static json_t *body_object(ak_admin_call_t *call) {
  json_error_t je;
  json_t *b = call->body_len ? json_loadb(call->body, call->body_len, JSON_REJECT_DUPLICATES, &je) : NULL;
  if (!json_is_object(b)) {
    json_decref(b);
    ak_admin_json(call, 400, json_pack("{s:s,s:s}", "error", "invalid_route", "message", "body: expected a JSON object"));
    return NULL;
  }
  return b;
}

static void answer_rc(ak_admin_call_t *call, ak_routes_rc_t rc, const char *err) {
  switch (rc) {
    case AK_ROUTES_INVALID:
      ak_admin_json(call, 400, json_pack("{s:s,s:s}", "error", "invalid_route", "message", err));
      return;
    case AK_ROUTES_DUPLICATE:
      ak_admin_error(call, 409, "duplicate_route");
      return;
    case AK_ROUTES_TOO_MANY:
      ak_admin_json(call, 409, json_pack("{s:s,s:s}", "error", "too_many_routes", "message", err));
      return;
    case AK_ROUTES_NOT_FOUND:
      ak_admin_error(call, 404, "route_not_found");
      return;
    case AK_ROUTES_FORBIDDEN:
      ak_admin_forbidden(call, call->route->scope, NULL);
      return;
    case AK_ROUTES_CONFLICT:
      ak_admin_json(call, 409, json_pack("{s:s,s:s}", "error", "route_conflict", "message", err));
      return;
    default:
      ak_admin_error(call, 503, "store_unavailable");
      return;
  }
}

static void change(ak_admin_call_t *call, ak_rch_op_t op, const char *id, const json_t *body, unsigned ok_status) {
  ak_routes_change_t ch = {.op = op, .id = id, .body = body, .may = may_tenant, .may_ctx = call, .who = call->who};
  char err[300];
  json_t *out = NULL;
  bool created = false;
  ak_routes_rc_t rc = ak_routes_change(call->inst->routes, &ch, err, sizeof err, &out, &created);
  if (rc != AK_ROUTES_OK) {
    answer_rc(call, rc, err);
    return;
  }
  const char *what = op == AK_RCH_IP_RULES ? "ip rules set" : op == AK_RCH_DELETE ? "route deleted"
                     : created ? "route created" : "route updated";
  ak_log(AK_LOG_INFO, "routes", what, "route_id=%s actor=%s request_id=%s", id ? id : "-", call->who->actor,
         call->request_id);
  if (op == AK_RCH_DELETE) {
    ak_admin_reply(call, 204, "application/json", "", 0);
    return;
  }
  ak_admin_json(call, created ? 201 : ok_status, out);
}

void ak_routes_api_health(ak_admin_call_t *call, const ak_admin_path_t *path) {
  (void)path;
  size_t n = 0;
  if (call->inst->routes) {
    ak_rsnap_t *s = ak_routes_snapshot(call->inst->routes);
    n = s->n;
    ak_rsnap_unref(s);
  }
  ak_admin_json(call, 200, json_pack("{s:s,s:I}", "status", "ok", "routes", (json_int_t)n));
}

static int by_id(const void *a, const void *b) {
  return strcmp((*(ak_rroute_t *const *)a)->id, (*(ak_rroute_t *const *)b)->id);
}

void ak_routes_api_list(ak_admin_call_t *call, const ak_admin_path_t *path) {
  (void)path;
  if (!guard_on(call)) return;
  const char *en = ak_admin_arg(call, "enabled"), *lim = ak_admin_arg(call, "limit"),
             *cursor = ak_admin_arg(call, "cursor");
  int want_enabled = -1;
  if (en) {
    if (!strcmp(en, "true")) want_enabled = 1;
    else if (!strcmp(en, "false")) want_enabled = 0;
    else {
      ak_admin_invalid_filter(call, "enabled");
      return;
    }
  }
  int64_t limit = LIST_DEFAULT;
  if (lim && (!ak_admin_parse_i64(lim, &limit) || limit < 1)) {
    ak_admin_invalid_filter(call, "limit");
    return;
  }
  limit = ak_admin_clamp64(limit, 1, LIST_MAX);
  ak_rsnap_t *s = ak_routes_snapshot(call->inst->routes);
  ak_rroute_t **v = malloc((s->n ? s->n : 1) * sizeof *v);
  if (!v) {
    ak_rsnap_unref(s);
    ak_admin_error(call, 500, "internal");
    return;
  }
  size_t n = 0;
  for (size_t i = 0; i < s->n; i++) {
    ak_rroute_t *r = s->v[i];
    if (want_enabled >= 0 && r->enabled != (want_enabled == 1)) continue;
    if (!may_tenant(r->tenant, call)) continue;
    if (cursor && strcmp(r->id, cursor) <= 0) continue;
    v[n++] = r;
  }
  qsort(v, n, sizeof *v, by_id);
  json_t *arr = json_array();
  size_t take = n < (size_t)limit ? n : (size_t)limit;
  for (size_t i = 0; i < take; i++) json_array_append(arr, v[i]->json);
  json_t *next = take < n && take ? json_string(v[take - 1]->id) : json_null();
  free(v);
  ak_rsnap_unref(s);
  ak_admin_json(call, 200, json_pack("{s:o,s:o}", "routes", arr, "next_cursor", next));
}

void ak_routes_api_get(ak_admin_call_t *call, const ak_admin_path_t *path) {
  if (!guard_on(call)) return;
  ak_rsnap_t *s = ak_routes_snapshot(call->inst->routes);
  ak_rroute_t *r = ak_rsnap_get(s, path->id);
  json_t *j = r && may_tenant(r->tenant, call) ? json_incref(r->json) : NULL;
  ak_rsnap_unref(s);
  if (!j) ak_admin_error(call, 404, "route_not_found");
  else ak_admin_json(call, 200, j);
}

void ak_routes_api_create(ak_admin_call_t *call, const ak_admin_path_t *path) {
  (void)path;
  if (!guard_on(call)) return;
  json_t *b = body_object(call);
  if (!b) return;
  change(call, AK_RCH_CREATE, json_string_value(json_object_get(b, "id")), b, 201);
  json_decref(b);
}

void ak_routes_api_put(ak_admin_call_t *call, const ak_admin_path_t *path) {
  if (!guard_on(call)) return;
  json_t *b = body_object(call);
  if (!b) return;
  change(call, AK_RCH_PUT, path->id, b, 200);
  json_decref(b);
}

void ak_routes_api_patch(ak_admin_call_t *call, const ak_admin_path_t *path) {
  if (!guard_on(call)) return;
  json_t *b = body_object(call);
  if (!b) return;
  change(call, AK_RCH_PATCH, path->id, b, 200);
  json_decref(b);
}

void ak_routes_api_delete(ak_admin_call_t *call, const ak_admin_path_t *path) {
  if (!guard_on(call)) return;
  change(call, AK_RCH_DELETE, path->id, NULL, 204);
}

void ak_routes_api_ip_get(ak_admin_call_t *call, const ak_admin_path_t *path) {
  (void)path;
  if (!guard_on(call)) return;
  ak_rsnap_t *s = ak_routes_snapshot(call->inst->routes);
  json_t *j = ak_iprules_to_json(s->global);
  ak_rsnap_unref(s);
  ak_admin_json(call, 200, j);
}

void ak_routes_api_ip_put(ak_admin_call_t *call, const ak_admin_path_t *path) {
  (void)path;
  if (!guard_on(call)) return;
  json_t *b = call->body_len ? json_loadb(call->body, call->body_len, JSON_REJECT_DUPLICATES, NULL) : NULL;
  ak_routes_change_t ch = {.op = AK_RCH_IP_RULES, .body = b, .who = call->who};
  char err[300];
  json_t *out = NULL;
  ak_routes_rc_t rc = b ? ak_routes_change(call->inst->routes, &ch, err, sizeof err, &out, NULL) : AK_ROUTES_INVALID;
  if (!b) snprintf(err, sizeof err, "body: expected a JSON object {default, rules}");
  json_decref(b);
  if (rc == AK_ROUTES_INVALID) {
    ak_admin_json(call, 400, json_pack("{s:s,s:s}", "error", "invalid_ip_rules", "message", err));
    return;
  }
  if (rc != AK_ROUTES_OK) {
    answer_rc(call, rc, err);
    return;
  }
  ak_log(AK_LOG_INFO, "routes", "ip rules set", "actor=%s request_id=%s", call->who->actor, call->request_id);
  ak_admin_json(call, 200, out);
}

/* {method (default POST), path, ip}: what such a request would get, and why. */
void ak_routes_api_test(ak_admin_call_t *call, const ak_admin_path_t *path) {
  (void)path;
  if (!guard_on(call)) return;
  json_t *b = body_object(call);
  if (!b) return;
  const char *method = json_string_value(json_object_get(b, "method"));
  const char *p = json_string_value(json_object_get(b, "path"));
  const char *ip = json_string_value(json_object_get(b, "ip"));
  const char *bad = NULL;
  ak_netaddr_t a;
  if (json_object_get(b, "method") && !method) bad = "method: expected a string";
  else if (!p) bad = "path: required (a string)";
  else if (!ip || !ak_netaddr_parse(ip, strlen(ip), &a)) bad = "ip: required (an IP address literal)";
  if (bad) {
    json_decref(b);
    ak_admin_json(call, 400, json_pack("{s:s,s:s}", "error", "invalid_route", "message", bad));
    return;
  }
  size_t len = strcspn(p, "?"); /* a query plays no part */
  ak_guard_result_t g;
  ak_routes_decide(call->inst->routes, method ? method : "POST", p, len, &a, ak_now_ms(), &g);
  json_decref(b);
  json_t *j = ak_guard_result_json(&g);
  if (g.decision != AK_GUARD_ALLOW) {
    const char *code;
    json_object_set_new(j, "status", json_integer(ak_routes_refusal(call->inst->routes, g.decision, &code)));
  } else {
    json_object_set_new(j, "status", json_null());
  }
  ak_admin_json(call, 200, j);
}

/* -------------------------------------------------------------- the listener ---- */

static int rapi_open(ak_instance_t *inst, char **err) {
  if (!inst->routes) return 0;
  const ak_routes_cfg_t *cfg = ak_routes_cfg(inst->cfg);
  size_t n;
  const ak_admin_route_t *t = ak_admin_routes_api(&n);
  ak_admin_t *a = ak_admin_new_listener(inst, "routes.admin", cfg->admin.ip, (int)cfg->admin.port, t, n);
  if (!a) {
    *err = strdup("routes.admin: cannot build the route admin listener (admin.principals)");
    return AK_MODULE_BAD_CONFIG;
  }
  inst->routes_admin = a;
  return 0;
}

static int rapi_start(ak_instance_t *inst, char **err) {
  if (!inst->routes_admin) return 0;
  char *why = NULL;
  if (ak_admin_start(inst->routes_admin, &why) == 0) return 0;
  ak_log(AK_LOG_ERROR, "routes", "cannot start the route admin listener", "reason=\"%s\"", why ? why : "?");
  *err = why;
  return AK_MODULE_FAILED;
}

static void rapi_stop(ak_instance_t *inst) {
  if (inst->routes_admin) ak_admin_stop(inst->routes_admin);
}

static void rapi_close(ak_instance_t *inst) {
  ak_admin_free(inst->routes_admin);
  inst->routes_admin = NULL;
}

const ak_module_t ak_mod_routes_admin = {
  .name = "routes_admin",
  .doc = "route admin listener (routes.admin) while the route guard is on",
  .roles = AK_ROLE_EDGE,
  .open = rapi_open,
  .start = rapi_start,
  .stop = rapi_stop,
  .close = rapi_close,
};
