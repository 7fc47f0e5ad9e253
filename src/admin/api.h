/* The admin API's handler contract: what an endpoint handler is given once the router
 * (admin/router.c) has matched its route, authenticated the caller and checked the
 * route's scope and tenant, and the helpers every handler answers with (each reply
 * carries the request's X-Request-Id). The lowest file of admin/: every handler file
 * includes it, and it never includes a handler's or the router's header. Owns no state
 * and no routes: adding an endpoint is a handler in its area's file (hooks_api.c,
 * sources_api.c, ...) plus one row in the router's table.
 *
 * A handler reads its path values from the captures it is handed (ak_admin_path_t),
 * never from the URL. It never checks the route's scope again, and never answers for a
 * tenant outside call->scope: a path tenant ({tenant}) is checked before it runs; a
 * filter naming a source or a tenant, and every listing, it checks itself
 * (ak_admin_may_source / ak_tenant_scope_has). A change passes call->who to the module
 * that makes it, which writes the audit row (store/audit.h) in the change's own batch. */
#ifndef AK_ADMIN_API_H
#define AK_ADMIN_API_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "admin/auth.h"
#include "core/instance.h"
#include "core/tenants.h"
#include "http/server.h"
#include "store/audit.h"

/* A capture is one non-empty path segment shorter than this. */
#define AK_ADMIN_CAPTURE_MAX 128

/* The values a route's pattern captured; "" for a capture the pattern does not have.
 * {tenant} is a valid tenant id within the caller's scope by the time a handler runs. */
typedef struct ak_admin_path {
  char tenant[AK_ADMIN_CAPTURE_MAX]; /* {tenant} */
  char id[AK_ADMIN_CAPTURE_MAX];     /* {id} */
  char name[AK_ADMIN_CAPTURE_MAX];   /* {name} */
} ak_admin_path_t;

struct ak_admin_route;
struct ak_admin_query;

/* One admitted request. */
typedef struct ak_admin_call {
  ak_instance_t *inst;
  ak_hreq_t *req;
  const struct ak_admin_route *route; /* the matched row */
  /* the request body (methods other than GET/HEAD), at most 64 KiB; not NUL-terminated */
  const char *body;
  size_t body_len;
  const ak_principal_t *principal;
  const ak_tenant_scope_t *scope; /* the principal's tenants; NULL = every tenant */
  const ak_audit_who_t *who;      /* actor, client, request id: for the audit rows */
  const char *request_id;
  /* Held across a change of a node-wide setting (the log level) and its audit row, so two
   * changes never interleave: the listener's, not a global. */
  pthread_mutex_t *settings_mu;
  /* The query string's arguments, decoded before the handler runs and freed after it
   * returns (ak_admin_call_query / ak_admin_call_release: the listener's calls). */
  struct ak_admin_query *query;
  bool answered; /* set by the replies below */
} ak_admin_call_t;

/* A handler answers exactly once, through the replies below; one that returns without
 * answering is answered 500 {"error":"internal"} by the listener (a bug, logged). */
typedef void (*ak_admin_handler_fn)(ak_admin_call_t *call, const ak_admin_path_t *path);

enum {
  AK_ROUTE_NODE = 1u << 0, /* node-wide: only a principal with tenants "*" */
};

/* A row of the route table (admin/router.c). */
typedef struct ak_admin_route {
  const char *method;  /* "GET" also answers HEAD */
  const char *pattern; /* "/v1/tenants/{tenant}/sources/{name}": {tenant}, {id}, {name} capture one segment */
  ak_scope_t scope;    /* AK_SCOPE_OPEN: no token */
  unsigned flags;
  ak_admin_handler_fn fn;
} ak_admin_route_t;

/* Replies (once per request; a second is ignored). ak_admin_json takes j; a j that cannot
 * be rendered is answered 500 {"error":"internal"}. A 503 carries Retry-After: 1, a 401
 * WWW-Authenticate. */
void ak_admin_reply(ak_admin_call_t *call, unsigned status, const char *ctype, const char *body, size_t len);
void ak_admin_json(ak_admin_call_t *call, unsigned status, json_t *j);
/* {"error": code} */
void ak_admin_error(ak_admin_call_t *call, unsigned status, const char *code);
/* 403 {"error":"forbidden","scope":<scope>} and "tenant" when tenant is not NULL */
void ak_admin_forbidden(ak_admin_call_t *call, ak_scope_t scope, const char *tenant);
/* 403 {"error":"forbidden","scope":<the route's scope>,"tenant":tenant} ("*" for NULL) */
void ak_admin_forbidden_tenant(ak_admin_call_t *call, const char *tenant);
/* 400 {"error":"invalid_filter","field":field} */
void ak_admin_invalid_filter(ak_admin_call_t *call, const char *field);
/* 409 {"error":"role_not_enabled","role":role} */
void ak_admin_role_not_enabled(ak_admin_call_t *call, const char *role);

/* A query-string argument, decoded as the admin listener always has: '+' is a space and
 * %XX a byte (a malformed escape stays as sent), names match ASCII case-insensitively
 * and the first occurrence of a name wins. NULL when absent, and for a name given
 * without '=' ("?key"); "" for "?key=". NUL-terminated (a decoded %00 ends the value);
 * valid until the handler returns. */
const char *ak_admin_arg(ak_admin_call_t *call, const char *key);
/* The listener's side of the arguments: decodes the query string q (len bytes, NULL
 * for none) into call->query before the handler runs. 0, or -1 out of memory. */
int ak_admin_call_query(ak_admin_call_t *call, const char *q, size_t len);
/* Frees what the call owns (its decoded arguments), after the handler returned. */
void ak_admin_call_release(ak_admin_call_t *call);
/* Decodes s[0..len) in place and NUL-terminates it: %XX (two hex digits) is that byte,
 * and with plus '+' is a space (the query's rule; a path keeps its '+'). The decoded
 * length, which counts a decoded NUL. s must hold len + 1 bytes. */
size_t ak_admin_unescape(char *s, size_t len, bool plus);
/* A decimal integer (optionally negative) that is the whole of s. */
bool ak_admin_parse_i64(const char *s, int64_t *out);
static inline int64_t ak_admin_clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The tenant a source belongs to, or NULL for a source this node does not know. */
const char *ak_admin_source_tenant(ak_instance_t *inst, const char *source_id);
/* May the caller act on the source's entries? False when the source belongs to a tenant
 * outside call->scope; an unknown source is allowed (its entries are filtered by tenant
 * like any others). *tenant: the source's tenant (NULL unknown). */
bool ak_admin_may_source(ak_admin_call_t *call, const char *source_id, const char **tenant);

#endif
