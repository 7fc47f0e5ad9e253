/* A tenant map (core/tmap.h) of tenant -> {records, bytes}; an entry is removed when its
 * tenant's count drops to zero. The map's hash is seeded at random, so tenant names (from
 * URLs, under tenant_path routing) cannot be chosen to pile into one probe run. */
#include <stdlib.h>
#include "core/tmap.h"
#include "queue/tenantshare.h"

typedef struct {
  int64_t records, bytes;
} share_t;

struct ak_tenantshare {
  int64_t max_records, max_bytes;
  /* what a lone tenant may hold past its share: the node's bound less one share kept free
   * for a tenant that arrives (0 = never past the share) */
  int64_t lone_records, lone_bytes;
  int64_t total_records, total_bytes; /* every tenant's, together */
  ak_tmap_t tenants;          /* -> share_t */
};

ak_tenantshare_t *ak_tenantshare_new_shared(int64_t max_records, int64_t max_bytes, int64_t node_records,
                                            int64_t node_bytes) {
  ak_tenantshare_t *ts = calloc(1, sizeof *ts);
  if (!ts) return NULL;
  ts->max_records = max_records > 0 ? max_records : 1;
  ts->max_bytes = max_bytes > 0 ? max_bytes : 1;
  ts->lone_records = node_records - ts->max_records;
  ts->lone_bytes = node_bytes - ts->max_bytes;
  if (ts->lone_records < 0) ts->lone_records = 0;
  if (ts->lone_bytes < 0) ts->lone_bytes = 0;
  ak_tmap_init(&ts->tenants, sizeof(share_t));
  return ts;
}

ak_tenantshare_t *ak_tenantshare_new(int64_t max_records, int64_t max_bytes) {
  return ak_tenantshare_new_shared(max_records, max_bytes, 0, 0);
}

void ak_tenantshare_free(ak_tenantshare_t *ts) {
  if (!ts) return;
  ak_tmap_fini(&ts->tenants);
  free(ts);
}

bool ak_tenantshare_admit(ak_tenantshare_t *ts, const char *tenant, size_t tlen, size_t bytes) {
  share_t *e = ak_tmap_get(&ts->tenants, tenant, tlen, NULL);
  if (!e) return false;
  /* a new entry holds nothing: it always gets its one record in */
  bool in_share = !e->records || (e->records + 1 <= ts->max_records && e->bytes + (int64_t)bytes <= ts->max_bytes);
  /* past its share only while no other tenant holds records, and never into the reserve */
  bool lone = ak_tmap_count(&ts->tenants) == 1 && ts->total_records + 1 <= ts->lone_records &&
              ts->total_bytes + (int64_t)bytes <= ts->lone_bytes;
  if (!in_share && !lone) return false;
  e->records++;
  e->bytes += (int64_t)bytes;
  ts->total_records++;
  ts->total_bytes += (int64_t)bytes;
  return true;
}

void ak_tenantshare_release(ak_tenantshare_t *ts, const char *tenant, size_t tlen, size_t bytes) {
  share_t *e = ak_tmap_find(&ts->tenants, tenant, tlen);
  if (!e) return;
  e->records--;
  e->bytes -= (int64_t)bytes;
  ts->total_records--;
  ts->total_bytes -= (int64_t)bytes;
  if (e->records <= 0) ak_tmap_remove(&ts->tenants, e);
}

bool ak_tenantshare_past_share(const ak_tenantshare_t *ts, const char *tenant, size_t tlen) {
  const share_t *e = ak_tmap_find(&ts->tenants, tenant, tlen);
  return e && (e->records > ts->max_records || e->bytes > ts->max_bytes);
}

size_t ak_tenantshare_tenants(const ak_tenantshare_t *ts) { return ak_tmap_count(&ts->tenants); }

void ak_tenantshare_held(const ak_tenantshare_t *ts, const char *tenant, size_t tlen, int64_t *records,
                         int64_t *bytes) {
  const share_t *e = ak_tmap_find(&ts->tenants, tenant, tlen);
  if (records) *records = e ? e->records : 0;
  if (bytes) *bytes = e ? e->bytes : 0;
}
