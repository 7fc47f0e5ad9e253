/* One tenant's share of the writer queue: records and body bytes it has buffered or in
 * flight, bounded by batcher.tenant_max_queue / tenant_max_queue_bytes so one tenant's
 * burst meets 429 tenant_overload before it can fill the queue every tenant shares.
 * Owns the per-tenant counters only. Not thread-safe: the writer calls it under its queue
 * lock. An entry lives only while its tenant holds records, so the table never holds more
 * entries than the queue holds records. */
#ifndef AK_QUEUE_TENANTSHARE_H
#define AK_QUEUE_TENANTSHARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ak_tenantshare ak_tenantshare_t;

ak_tenantshare_t *ak_tenantshare_new(int64_t max_records, int64_t max_bytes);
void ak_tenantshare_free(ak_tenantshare_t *ts);

/* Count one record of `bytes` body bytes for tenant, unless that passes its share. A
 * tenant holding nothing always gets one record in (a body larger than the byte share
 * must not be refused forever). False: refused, nothing counted. */
bool ak_tenantshare_admit(ak_tenantshare_t *ts, const char *tenant, size_t tlen, size_t bytes);
/* The record left the queue (committed, failed or reaped). */
void ak_tenantshare_release(ak_tenantshare_t *ts, const char *tenant, size_t tlen, size_t bytes);

/* Tenants holding records now; a tenant's records and bytes (0 when none). */
size_t ak_tenantshare_tenants(const ak_tenantshare_t *ts);
void ak_tenantshare_held(const ak_tenantshare_t *ts, const char *tenant, size_t tlen, int64_t *records,
                         int64_t *bytes);

#endif
