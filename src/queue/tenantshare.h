/* One tenant's share of the writer queue: records and body bytes it has buffered or in
 * flight, bounded by batcher.tenant_max_queue / tenant_max_queue_bytes so one tenant's
 * burst meets 429 tenant_overload before it can fill the queue every tenant shares. The
 * share is work-conserving: a tenant alone in the queue may hold past it, up to the
 * node's bound less one share kept free for a tenant that arrives (so a newcomer never
 * meets a 503 another tenant caused); once another tenant holds records, each is held
 * to its share again.
 * Owns the per-tenant counters only. Not thread-safe: the writer calls it under its queue
 * lock. An entry lives only while its tenant holds records, so the table never holds more
 * entries than the queue holds records. */
#ifndef AK_QUEUE_TENANTSHARE_H
#define AK_QUEUE_TENANTSHARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ak_tenantshare ak_tenantshare_t;

/* Shares of max_records / max_bytes, strict (never past the share). */
ak_tenantshare_t *ak_tenantshare_new(int64_t max_records, int64_t max_bytes);
/* Work-conserving shares on a node bound of node_records / node_bytes (the writer's). */
ak_tenantshare_t *ak_tenantshare_new_shared(int64_t max_records, int64_t max_bytes, int64_t node_records,
                                            int64_t node_bytes);
void ak_tenantshare_free(ak_tenantshare_t *ts);

/* Count one record of `bytes` body bytes for tenant, unless that passes its share (and,
 * for shared bounds, the tenant is not alone or the room outside the reserve is spent). A
 * tenant holding nothing always gets one record in (a body larger than the byte share
 * must not be refused forever). False: refused, nothing counted. */
bool ak_tenantshare_admit(ak_tenantshare_t *ts, const char *tenant, size_t tlen, size_t bytes);
/* The record left the queue (committed, failed or reaped). */
void ak_tenantshare_release(ak_tenantshare_t *ts, const char *tenant, size_t tlen, size_t bytes);

/* True when tenant holds more than its share (it went past it alone): a full node is then
 * its own doing, and the writer answers it 429 tenant_overload rather than 503. */
bool ak_tenantshare_past_share(const ak_tenantshare_t *ts, const char *tenant, size_t tlen);
/* Tenants holding records now; a tenant's records and bytes (0 when none). */
size_t ak_tenantshare_tenants(const ak_tenantshare_t *ts);
void ak_tenantshare_held(const ak_tenantshare_t *ts, const char *tenant, size_t tlen, int64_t *records,
                         int64_t *bytes);

#endif
