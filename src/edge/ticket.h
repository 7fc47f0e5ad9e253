/* The ingest ticket: everything one ingest request holds while it is in flight, taken
 * step by step as the request passes each gate, and given back in one place.
 *   - a reservation in its source's quarantine pen (on_verify_failure quarantine);
 *   - its dedupe claim (the provider event key it asks the writer to take);
 *   - a charge on its tenant's quota (hooks and body bytes per second);
 *   - its tenant's share of the writer queue (batcher.tenant_max_queue*);
 *   - its fleet admission call (fleet/fleet.h): a charge and a claim in the fleet store.
 * ak_ticket_settle() gives back, exactly once, whatever the request did not turn into a
 * stored hook: every refusal and every failed commit ends there. Owns no lock and no
 * thread; one request's ticket is only ever touched by the thread serving it. */
#ifndef AK_EDGE_TICKET_H
#define AK_EDGE_TICKET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/instance.h"
#include "fleet/fleet.h"
#include "queue/dedupe.h"
#include "queue/quarantine.h"
#include "queue/writer.h"

typedef struct ak_ticket {
  ak_instance_t *inst;
  const char *tenant;          /* borrowed: outlives the ticket (the request's) */
  size_t tenant_len;
  size_t bytes;                /* the body's: what each reservation was taken for */
  ak_pen_bucket_t *pen_bucket; /* non-NULL while a pen reservation is held */
  ak_dedupe_claim_t *claim;    /* owned; the writer reads it through the request */
  bool quota;                  /* the tenant quota was charged */
  bool share;                  /* the tenant's queue share was taken */
  ak_fleet_call_t *fleet;      /* owned: the fleet admission call, settled with the rest */
} ak_ticket_t;

void ak_ticket_init(ak_ticket_t *t, ak_instance_t *inst, const char *tenant, size_t tenant_len, size_t bytes);

/* A place in the source's pen (AK_PEN_OK), or why not; *retry_after_ms for rate limits. */
ak_pen_admit_t ak_ticket_take_pen(ak_ticket_t *t, ak_pen_bucket_t *bucket, int64_t *retry_after_ms);
/* The claim of a provider event key (the key is copied). False: out of memory. */
bool ak_ticket_claim(ak_ticket_t *t, const char *source, const char *key, size_t keylen, int64_t ttl_ms);
/* The tenant's quota for one hook of t->bytes. False: refused, *retry_ns until it would pass. */
bool ak_ticket_take_quota(ak_ticket_t *t, int64_t now_ns, int64_t *retry_ns);
/* The tenant's share of the writer queue: AK_WR_QUEUED (taken) or the writer's refusal,
 * in the writer's order (store, draining, the node's bound, then the tenant's share). */
ak_wr_status_t ak_ticket_take_share(ak_ticket_t *t);

/* Gives back what is held: the pen reservation (kept by the pen when stored), the quota
 * charge (unless stored), the queue share, and the claim. stored: the writer committed
 * the hook. Idempotent. A fleet call is released (nothing of it stored). */
void ak_ticket_settle(ak_ticket_t *t, bool stored);
/* The same, and a fleet call's claim is promoted under holder when holder is set: the
 * hook stored, or the first one when the writer's index knew the event. */
void ak_ticket_settle_held(ak_ticket_t *t, bool stored, const uint8_t holder[16]);

#endif
