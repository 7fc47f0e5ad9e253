/* Tenant quotas (`rate_limits`): per tenant, hooks per second and body bytes per second
 * (GCRA), charged after verification and before the commit, and the tenant's
 * max_body_bytes read before the body. Precedence: a runtime override (admin API, kept
 * in the store as rl:<tenant>), then rate_limits.tenants[t], then rate_limits.default;
 * none = unlimited. Owns the overrides (memory + store rows) and the tenants' bucket
 * table (bounded: core/ratetable.h). Never charges a request that failed verification:
 * the edge calls take() only for a verified hook. Enforcement is per node. */
#ifndef AK_EDGE_QUOTA_H
#define AK_EDGE_QUOTA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include "core/instance.h"
#include "core/module.h"
#include "core/ratelimit.h"

typedef struct ak_quota ak_quota_t;

typedef enum {
  AK_QUOTA_NONE = 0,          /* unlimited */
  AK_QUOTA_DEFAULT,           /* rate_limits.default */
  AK_QUOTA_CONFIG,            /* rate_limits.tenants[t] */
  AK_QUOTA_OVERRIDE,          /* set through the admin API */
} ak_quota_source_t;

/* States of at most this many tenants are kept at once; an idle tenant's state is the
 * first to go (it carries nothing: its buckets are full). */
#define AK_QUOTA_TABLE_SLOTS 16384

/* From inst->cfg (rate_limits) and the overrides stored in inst->store. NULL with *err
 * (malloc'd) when a stored override cannot be read: a limiter that lost its state must
 * not start as if there were none. */
ak_quota_t *ak_quota_new(ak_instance_t *inst, char **err);

/* The `rate_limits` section and the quota's lifecycle (inst->quota). */
extern const ak_module_t ak_mod_rate_limits;
/* Bare (tests): entries from a rate_limits mapping, no store, no overrides at start. */
ak_quota_t *ak_quota_new_raw(const json_t *rate_limits);
void ak_quota_free(ak_quota_t *q);

/* The limits in force for a tenant (*out zeroed for none). */
ak_quota_source_t ak_quota_lookup(ak_quota_t *q, const char *tenant, size_t tlen, ak_ratelimit_t *out);
/* The tenant's max_body_bytes, 0 when it has none (cheap when no limit is configured). */
int64_t ak_quota_max_body(ak_quota_t *q, const char *tenant, size_t tlen);

/* Charge one verified hook of body_len bytes. True: charged (refund it if the hook is
 * then not stored). False: over the limit, nothing charged, *retry_ns until the same
 * request would pass. */
bool ak_quota_take(ak_quota_t *q, const char *tenant, size_t tlen, size_t body_len, int64_t now_ns,
                   int64_t *retry_ns);
void ak_quota_refund(ak_quota_t *q, const char *tenant, size_t tlen, size_t body_len);

/* Admin API views: {tenant, rate, burst, [bytes], [max_body_bytes], source} and
 * {default, tenants: [...]} (config tenants and overrides, sorted by tenant). */
json_t *ak_quota_tenant_json(ak_quota_t *q, const char *tenant);
json_t *ak_quota_list_json(ak_quota_t *q);
/* Set a tenant's override: synced to the store with its audit row (who made it) first,
 * then in force at once, its buckets reset. 0 set; 1 the same override was already in
 * force (nothing written, no row, buckets kept); -1 the store or the audit trail did not
 * take it (nothing changed). */
struct ak_audit_who;
int ak_quota_put(ak_quota_t *q, const char *tenant, const ak_ratelimit_t *l, const struct ak_audit_who *who);
/* Remove it (audited the same way): 0 removed, 1 there was none, -1 store failure
 * (nothing changed). */
int ak_quota_delete(ak_quota_t *q, const char *tenant, const struct ak_audit_who *who);

#endif
