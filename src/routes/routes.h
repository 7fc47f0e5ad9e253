/* The route guard (routes.enabled): the decision for every ingest request before any
 * body byte is read, the route set's changes (the route admin API, seeds), and the
 * `routes` module. Deny by default: a request is allowed only when the global IP rules
 * allow its client, an enabled route's pattern matches its path, the route's own IP rules
 * (if any) allow the client and the route's methods allow its method.
 *
 * Order of the checks: global IP rules (a denied client learns nothing about routes), the
 * path (ak_rpath_valid: %2F, dot or empty segments are route_not_found), the route
 * (route_not_found / route_disabled), the route's IP rules (ip_denied), its methods
 * (method_not_allowed). The client is the peer, or behind a trusted proxy the right-most
 * X-Forwarded-For address that is not a trusted proxy.
 *
 * A shared store (routes.store.type redis) is read again by its sync thread
 * (ak_routes_reload, under write_mu) when another node changes it.
 *
 * Thread safety: a decision reads a referenced snapshot (table.h) and the cache's stripes;
 * changes are serialised by write_mu (held across building the next snapshot, the store
 * write with its audit row, and the swap), so the store and the served set agree. Every
 * change goes through ak_routes_change. */
#ifndef AK_ROUTES_ROUTES_H
#define AK_ROUTES_ROUTES_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include "core/instance.h"
#include "core/module.h"
#include "core/netaddr.h"
#include "http/server.h"
#include "routes/store.h"
#include "routes/table.h"

typedef struct ak_routes_cfg {
  bool enabled;
  int64_t max_routes, log_sample, ip_denied_status;
  ak_strlist_t trusted_proxies;
  struct {
    int type; /* 0 ets, 1 redis */
  } store;
  struct {
    int64_t max_size, ttl_ms, negative_ttl_ms, gc_interval_ms;
  } cache;
  struct {
    int64_t port;
    const char *ip;
  } admin;
  const json_t *seed;
} ak_routes_cfg_t;

extern const ak_module_t ak_mod_routes;
const ak_routes_cfg_t *ak_routes_cfg(const ak_config_t *cfg);

typedef struct ak_routes ak_routes_t;

typedef enum {
  AK_GUARD_ALLOW = 0,
  AK_GUARD_ROUTE_NOT_FOUND,
  AK_GUARD_METHOD_NOT_ALLOWED,
  AK_GUARD_ROUTE_DISABLED,
  AK_GUARD_IP_DENIED,
  AK_GUARD_COUNT
} ak_guard_t;
/* "allow", "route_not_found", "method_not_allowed", "route_disabled", "ip_denied" */
extern const char *const ak_guard_names[AK_GUARD_COUNT];

typedef struct ak_guard_result {
  ak_guard_t decision;
  char route_id[AK_ROUTE_ID_MAX + 1]; /* the route matched, "" none */
  const char *ip_scope;               /* "global" or "route": the rules that decided; NULL none ran */
  int ip_rule;                        /* the deciding rule's index, -1 the default */
  char ip_cidr[64];                   /* its CIDR, "" for the default */
} ak_guard_result_t;

/* From the checked config: the store's routes and IP rules, then the seed routes that are
 * absent from the store (each written with its audit row; a route the store holds is never
 * overwritten by a seed: an API edit survives a restart). global: the config's ip_rules
 * (routes.ip_rules), used until rules are PUT over the API. NULL with err. */
ak_routes_t *ak_routes_new(const ak_routes_cfg_t *cfg, const json_t *global, ak_rstore_t *store, char *err,
                           size_t errlen);
/* Frees the store too. */
void ak_routes_free(ak_routes_t *rs);
/* A shared store's reload (its sync thread's call): the store read again and served. 0 or
 * -1 (the cached set keeps serving). The first success also creates the absent seeds. */
int ak_routes_reload(void *ctx);
/* False while a shared store down at boot was never read: requests cannot be decided
 * (503 store_unavailable, never a false 404) and changes answer 503. */
bool ak_routes_ready(ak_routes_t *rs);

/* The decision for method + path (raw, no query) from client at now_ms. */
void ak_routes_decide(ak_routes_t *rs, const char *method, const char *path, size_t len, const ak_netaddr_t *client,
                      int64_t now_ms, ak_guard_result_t *out);
/* The client address of an ingest request (peer, X-Forwarded-For from trusted proxies). */
void ak_routes_client(ak_routes_t *rs, ak_hreq_t *r, ak_netaddr_t *out);
/* The edge's call: the decision for r, a refusal logged one in routes.log_sample. */
void ak_routes_check(ak_routes_t *rs, ak_hreq_t *r, ak_guard_result_t *out);
/* The refusal's status and error code: 404 not_found (no route, disabled, and an IP
 * denial under ip_denied_status 404), 405 method_not_allowed, 403 forbidden. */
unsigned ak_routes_refusal(const ak_routes_t *rs, ak_guard_t d, const char **code);
json_t *ak_guard_result_json(const ak_guard_result_t *g);

/* ------------------------------------------------------------ changes ---- */

typedef enum {
  AK_ROUTES_OK = 0,
  AK_ROUTES_INVALID,     /* 400 invalid_route (err says what) */
  AK_ROUTES_DUPLICATE,   /* 409 duplicate_route */
  AK_ROUTES_TOO_MANY,    /* 409 too_many_routes */
  AK_ROUTES_NOT_FOUND,   /* 404 route_not_found */
  AK_ROUTES_FORBIDDEN,   /* the caller may not act on the route's tenant (before or after) */
  AK_ROUTES_UNAVAILABLE, /* 503 store_unavailable: nothing changed */
  AK_ROUTES_CONFLICT,    /* 409 route_conflict: changed meanwhile on another node (shared store) */
} ak_routes_rc_t;

typedef enum { AK_RCH_CREATE = 0, AK_RCH_PUT, AK_RCH_PATCH, AK_RCH_DELETE, AK_RCH_IP_RULES } ak_rch_op_t;

typedef struct ak_routes_change {
  ak_rch_op_t op;
  const char *id;          /* PUT, PATCH, DELETE: the URL's id */
  const json_t *body;      /* CREATE, PUT: the route; PATCH: the keys to change; IP_RULES: {default, rules} */
  /* May the caller act on a route of this tenant (NULL: no tenant)? NULL: anyone. */
  bool (*may)(const char *tenant, void *ctx);
  void *may_ctx;
  const ak_audit_who_t *who; /* NULL: internal */
} ak_routes_change_t;

/* The one way the route set changes (the admin API and the seeds): validates, checks the
 * caller's tenants against the route before and after, writes the change with its audit
 * row in one synced batch, then serves the new set. A change that changes nothing writes
 * nothing (OK). *out (when not NULL, on OK): the route / rules as now stored (NULL after a
 * delete); *created: a new route. */
ak_routes_rc_t ak_routes_change(ak_routes_t *rs, const ak_routes_change_t *ch, char *err, size_t errlen,
                                json_t **out, bool *created);

/* The current snapshot (referenced; ak_rsnap_unref). */
ak_rsnap_t *ak_routes_snapshot(ak_routes_t *rs);

#endif
