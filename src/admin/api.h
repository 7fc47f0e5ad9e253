/* The admin API's handler contract: what an endpoint handler is given once the router
 * has matched its route, authenticated the caller and checked the route's scope and
 * tenant, and the reply helpers every handler answers with (each reply carries the
 * request's X-Request-Id). Owns no state and no routes: the one table of {method, path
 * pattern, scope, handler} is in admin.c, and adding an endpoint is one row there plus
 * its handler (in its own file, e.g. sources_api.c).
 *
 * A handler never checks the route's scope again, and never answers for a tenant outside
 * call->scope: a path tenant ({tenant}) is checked before it runs; a filter naming a
 * source or a tenant, and every listing, it checks itself (ak_admin_may_source /
 * ak_tenant_scope_has). A change passes call->who to the module that makes it, which
 * writes the audit row (store/audit.h) in the change's own batch. */
#ifndef AK_ADMIN_API_H
#define AK_ADMIN_API_H

#include <jansson.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include "store/audit.h"
#include "admin/auth.h"
#include "core/instance.h"
#include "core/tenants.h"

typedef struct ak_admin_call {
  ak_instance_t *inst;
  struct MHD_Connection *conn;
  const char *method;
  const char *url;
  const struct ak_admin_route *route;
  /* path captures ({tenant} is a valid tenant id within the caller's scope) */
  const char *tenant;
  const char *id;
  const char *name;
  /* the request body (methods other than GET/HEAD), at most 64 KiB; not NUL-terminated */
  const char *body;
  size_t body_len;
  const ak_principal_t *principal;
  const ak_tenant_scope_t *scope; /* the principal's tenants; NULL = every tenant */
  const ak_audit_who_t *who;      /* actor, client, request id: for the audit rows */
  const char *request_id;
} ak_admin_call_t;

typedef enum MHD_Result (*ak_admin_handler_fn)(ak_admin_call_t *call);

enum {
  AK_ROUTE_NODE = 1u << 0, /* node-wide: only a principal with tenants "*" */
};

typedef struct ak_admin_route {
  const char *method;  /* "GET" also answers HEAD */
  const char *pattern; /* "/v1/tenants/{tenant}/rate-limit": {tenant}, {id}, {name} capture one segment */
  ak_scope_t scope;    /* AK_SCOPE_OPEN: no token */
  unsigned flags;
  ak_admin_handler_fn fn;
} ak_admin_route_t;

/* The route table (admin.c), and the row a request matches: captures go into the
 * buffers (each at least AK_ADMIN_CAPTURE_MAX bytes; NULL when the pattern has none).
 * NULL when no row matches the path; *path_known tells whether some row has the path
 * under another method. */
#define AK_ADMIN_CAPTURE_MAX 128
const ak_admin_route_t *ak_admin_routes(size_t *n);
const ak_admin_route_t *ak_admin_route_match(const char *method, const char *url, char *tenant, char *id, char *name,
                                             bool *path_known);

/* Replies. ak_admin_json takes j. A 503 carries Retry-After: 1. */
enum MHD_Result ak_admin_reply(ak_admin_call_t *call, unsigned status, const char *ctype, const char *body,
                               size_t len);
enum MHD_Result ak_admin_json(ak_admin_call_t *call, unsigned status, json_t *j);
enum MHD_Result ak_admin_error(ak_admin_call_t *call, unsigned status, const char *code);
/* 403 {"error":"forbidden","scope":<the route's scope>,"tenant":tenant} */
enum MHD_Result ak_admin_forbidden_tenant(ak_admin_call_t *call, const char *tenant);

/* A query-string argument, or NULL. */
const char *ak_admin_arg(ak_admin_call_t *call, const char *key);

/* The tenant a source belongs to, or NULL for a source this node does not know. */
const char *ak_admin_source_tenant(ak_instance_t *inst, const char *source_id);
/* May the caller act on the source's entries? False when the source belongs to a tenant
 * outside call->scope; an unknown source is allowed (its entries are filtered by tenant
 * like any others). *tenant: the source's tenant (NULL unknown). */
bool ak_admin_may_source(ak_admin_call_t *call, const char *source_id, const char **tenant);

#endif
