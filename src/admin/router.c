/* The route table and its matcher (router.h). Adding an endpoint is its handler in its
 * area's file plus one row here. Never answers a request and never parses a body: what
 * it hands on is the row and the captured path values. */
#include <string.h>
#include "admin/asyncapi_api.h"
#include "admin/audit_api.h"
#include "admin/dlq_api.h"
#include "admin/hooks_api.h"
#include "admin/loglevel_api.h"
#include "admin/node_api.h"
#include "admin/quarantine_api.h"
#include "admin/ratelimits_api.h"
#include "admin/replays_api.h"
#include "admin/router.h"
#include "admin/routes_api.h"
#include "admin/sources_api.h"
#include "admin/tenants_api.h"

/* Every endpoint, its scope and handler; docs/admin-api.md is this table. GET rows also
 * answer HEAD. A row with {tenant} has its tenant checked against the caller's before
 * the handler runs. */
static const ak_admin_route_t routes[] = {
    {"GET", "/health", AK_SCOPE_OPEN, 0, ak_node_api_health},
    {"GET", "/ready", AK_SCOPE_OPEN, 0, ak_node_api_ready},
    {"GET", "/metrics", AK_SCOPE_METRICS_READ, AK_ROUTE_NODE, ak_node_api_metrics},
    {"GET", "/v1/config", AK_SCOPE_CONFIG_READ, AK_ROUTE_NODE, ak_node_api_config},
    {"GET", "/v1/wal", AK_SCOPE_CONFIG_READ, AK_ROUTE_NODE, ak_node_api_wal},
    {"GET", "/v1/fleet", AK_SCOPE_CONFIG_READ, AK_ROUTE_NODE, ak_node_api_fleet},
    {"GET", "/asyncapi.json", AK_SCOPE_CONFIG_READ, AK_ROUTE_NODE, ak_asyncapi_api_get},
    {"GET", "/v1/log-level", AK_SCOPE_CONFIG_READ, AK_ROUTE_NODE, ak_loglevel_api_get},
    {"PUT", "/v1/log-level", AK_SCOPE_LOG_LEVEL_WRITE, AK_ROUTE_NODE, ak_loglevel_api_put},
    {"GET", "/v1/hooks/{id}", AK_SCOPE_HOOKS_READ, 0, ak_hooks_api_get},
    {"GET", "/v1/quarantine", AK_SCOPE_QUARANTINE_READ, 0, ak_quarantine_api_list},
    {"DELETE", "/v1/quarantine", AK_SCOPE_QUARANTINE_WRITE, 0, ak_quarantine_api_purge},
    {"GET", "/v1/dlq", AK_SCOPE_DLQ_READ, 0, ak_dlq_api_list},
    {"POST", "/v1/replays", AK_SCOPE_REPLAYS_WRITE, 0, ak_replays_api_post},
    {"GET", "/v1/replays", AK_SCOPE_REPLAYS_READ, 0, ak_replays_api_list},
    {"GET", "/v1/replays/{id}", AK_SCOPE_REPLAYS_READ, 0, ak_replays_api_get},
    {"PATCH", "/v1/replays/{id}", AK_SCOPE_REPLAYS_WRITE, 0, ak_replays_api_patch},
    {"GET", "/v1/rate-limits", AK_SCOPE_RATE_LIMITS_READ, 0, ak_ratelimits_api_list},
    {"GET", "/v1/tenants/{tenant}/rate-limit", AK_SCOPE_RATE_LIMITS_READ, 0, ak_ratelimits_api_get},
    {"PUT", "/v1/tenants/{tenant}/rate-limit", AK_SCOPE_RATE_LIMITS_WRITE, 0, ak_ratelimits_api_put},
    {"DELETE", "/v1/tenants/{tenant}/rate-limit", AK_SCOPE_RATE_LIMITS_WRITE, 0, ak_ratelimits_api_delete},
    {"GET", "/v1/audit", AK_SCOPE_AUDIT_READ, 0, ak_audit_api_get},
    {"GET", "/v1/tenants/{tenant}/sources", AK_SCOPE_SOURCES_READ, 0, ak_sources_api_list},
    {"POST", "/v1/tenants/{tenant}/sources", AK_SCOPE_SOURCES_WRITE, 0, ak_sources_api_create},
    {"GET", "/v1/tenants/{tenant}/sources/{name}", AK_SCOPE_SOURCES_READ, 0, ak_sources_api_get},
    {"PUT", "/v1/tenants/{tenant}/sources/{name}", AK_SCOPE_SOURCES_WRITE, 0, ak_sources_api_put},
    {"DELETE", "/v1/tenants/{tenant}/sources/{name}", AK_SCOPE_SOURCES_WRITE, 0, ak_sources_api_delete},
    {"DELETE", "/v1/tenants/{tenant}", AK_SCOPE_TENANTS_WRITE, AK_ROUTE_NODE, ak_tenants_api_delete},
    {"GET", "/v1/tenants/{tenant}/erase", AK_SCOPE_TENANTS_WRITE, 0, ak_tenants_api_erase_get},
};

/* The route admin listener (routes.admin, 4003): docs/openapi/routes.v1.yaml is this
 * table. /admin/routes/test comes before /admin/routes/{id} (a POST there is the dry run). */
static const ak_admin_route_t routes_api[] = {
    {"GET", "/health", AK_SCOPE_OPEN, 0, ak_routes_api_health},
    {"GET", "/admin/routes", AK_SCOPE_ROUTES_READ, 0, ak_routes_api_list},
    {"POST", "/admin/routes", AK_SCOPE_ROUTES_WRITE, 0, ak_routes_api_create},
    {"POST", "/admin/routes/test", AK_SCOPE_ROUTES_READ, AK_ROUTE_NODE, ak_routes_api_test},
    {"GET", "/admin/routes/{id}", AK_SCOPE_ROUTES_READ, 0, ak_routes_api_get},
    {"PUT", "/admin/routes/{id}", AK_SCOPE_ROUTES_WRITE, 0, ak_routes_api_put},
    {"PATCH", "/admin/routes/{id}", AK_SCOPE_ROUTES_WRITE, 0, ak_routes_api_patch},
    {"DELETE", "/admin/routes/{id}", AK_SCOPE_ROUTES_WRITE, 0, ak_routes_api_delete},
    {"GET", "/admin/ip-rules", AK_SCOPE_ROUTES_READ, AK_ROUTE_NODE, ak_routes_api_ip_get},
    {"PUT", "/admin/ip-rules", AK_SCOPE_ROUTES_WRITE, AK_ROUTE_NODE, ak_routes_api_ip_put},
};

const ak_admin_route_t *ak_admin_routes_api(size_t *n) {
  *n = sizeof routes_api / sizeof routes_api[0];
  return routes_api;
}

const ak_admin_route_t *ak_admin_routes(size_t *n) {
  *n = sizeof routes / sizeof routes[0];
  return routes;
}

/* The buffer a pattern segment "{...}" captures into; NULL for a name the path struct
 * does not have (such a row never matches). */
static char *capture_slot(ak_admin_path_t *path, const char *seg, size_t len) {
  if (len == 8 && !memcmp(seg, "{tenant}", 8)) return path->tenant;
  if (len == 4 && !memcmp(seg, "{id}", 4)) return path->id;
  if (len == 6 && !memcmp(seg, "{name}", 6)) return path->name;
  return NULL;
}

/* url against pattern, segment by segment; captures into *path. */
static bool path_match(const char *pattern, const char *url, ak_admin_path_t *path) {
  const char *p = pattern, *u = url;
  while (*p && *u) {
    if (*p != '/' || *u != '/') return false;
    p++;
    u++;
    const char *pe = strchr(p, '/'), *ue = strchr(u, '/');
    size_t pl = pe ? (size_t)(pe - p) : strlen(p), ul = ue ? (size_t)(ue - u) : strlen(u);
    if (pl > 2 && p[0] == '{' && p[pl - 1] == '}') {
      char *dst = capture_slot(path, p, pl);
      if (!dst || ul == 0 || ul >= AK_ADMIN_CAPTURE_MAX) return false;
      memcpy(dst, u, ul);
      dst[ul] = 0;
    } else if (pl != ul || memcmp(p, u, pl) != 0) {
      return false;
    }
    p += pl;
    u += ul;
  }
  return !*p && !*u;
}

const ak_admin_route_t *ak_admin_route_match_in(const ak_admin_route_t *table, size_t n, const char *method,
                                                const char *url, ak_admin_path_t *path, bool *path_known) {
  *path_known = false;
  memset(path, 0, sizeof *path);
  const char *m = !strcmp(method, "HEAD") ? "GET" : method;
  for (size_t i = 0; i < n; i++) {
    ak_admin_path_t got;
    memset(&got, 0, sizeof got);
    if (!path_match(table[i].pattern, url, &got)) continue;
    *path_known = true;
    if (!strcmp(table[i].method, m)) {
      *path = got;
      return &table[i];
    }
  }
  return NULL;
}

const ak_admin_route_t *ak_admin_route_match(const char *method, const char *url, ak_admin_path_t *path,
                                             bool *path_known) {
  return ak_admin_route_match_in(routes, sizeof routes / sizeof routes[0], method, url, path, path_known);
}
