/* Admin principals and scopes (admin.principals): who is calling the admin API and what
 * it may do. Owns the principals built from the config, the scope names, the bearer
 * token check (SHA-256, then a constant-time compare against every principal). Never
 * keeps, logs or returns a token: only its hash is ever held, and only for comparing. */
#ifndef AK_ADMIN_AUTH_H
#define AK_ADMIN_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include "core/tenants.h"

/* The scope names, in ak_scope_t order; config.c validates admin.principals[].scopes
 * against this list. */
#define AK_AUTH_SCOPE_NAMES                                                                              \
  "sources:read|sources:write|dlq:read|replays:read|replays:write|quarantine:read|quarantine:write|"   \
  "rate_limits:read|rate_limits:write|audit:read|tenants:write|log_level:write|config:read|hooks:read|" \
  "claims:read|metrics:read|routes:read|routes:write"

typedef enum {
  AK_SCOPE_OPEN = -1, /* no token needed (/health, /ready) */
  AK_SCOPE_SOURCES_READ = 0,
  AK_SCOPE_SOURCES_WRITE,
  AK_SCOPE_DLQ_READ,
  AK_SCOPE_REPLAYS_READ,
  AK_SCOPE_REPLAYS_WRITE,
  AK_SCOPE_QUARANTINE_READ,
  AK_SCOPE_QUARANTINE_WRITE,
  AK_SCOPE_RATE_LIMITS_READ,
  AK_SCOPE_RATE_LIMITS_WRITE,
  AK_SCOPE_AUDIT_READ,
  AK_SCOPE_TENANTS_WRITE,
  AK_SCOPE_LOG_LEVEL_WRITE,
  AK_SCOPE_CONFIG_READ,
  AK_SCOPE_HOOKS_READ,
  AK_SCOPE_CLAIMS_READ,
  AK_SCOPE_METRICS_READ,
  AK_SCOPE_ROUTES_READ,  /* the route admin API (4003) */
  AK_SCOPE_ROUTES_WRITE,
  AK_SCOPE_COUNT
} ak_scope_t;

const char *ak_auth_scope_name(ak_scope_t s);
/* The scope named s, or AK_SCOPE_OPEN when there is none of that name. */
ak_scope_t ak_auth_scope_parse(const char *s);

typedef struct ak_principal {
  char *name;
  uint8_t token_sha256[32];
  uint32_t scopes;              /* 1u << ak_scope_t */
  ak_tenant_scope_t *tenants;   /* NULL: every tenant ("*") */
  ak_tenant_scope_t tenant_list;
  char **tenant_ids;
} ak_principal_t;

typedef struct ak_auth ak_auth_t;

/* From admin.principals (the checked config list; NULL or [] = none). NULL with *err
 * (malloc'd) when an entry cannot be used (the loader refuses those first). */
ak_auth_t *ak_auth_new(const json_t *principals, char **err);
void ak_auth_free(ak_auth_t *a);
/* Configured principals; 0 means the API is open (and bound to loopback only). */
size_t ak_auth_count(const ak_auth_t *a);

/* The caller of a request from its Authorization header value (NULL when absent). With
 * no principals configured: the anonymous principal (every scope, every tenant). NULL:
 * 401 (no token, not a Bearer token, or a token no principal has). */
const ak_principal_t *ak_auth_check(const ak_auth_t *a, const char *authorization);

/* SHA-256 of a token. */
void ak_auth_token_hash(const char *token, size_t len, uint8_t out[32]);

bool ak_principal_has(const ak_principal_t *p, ak_scope_t s);
bool ak_principal_tenant(const ak_principal_t *p, const char *tenant, size_t len);
static inline bool ak_principal_all_tenants(const ak_principal_t *p) { return p->tenants == NULL; }

#endif
