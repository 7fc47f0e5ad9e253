/* Claim check-in (docs/claim-check.md, "Check-in"): the dispatcher's thread that puts
 * bodies too large for a sink's inline_max_bytes on the claim store, packed per tenant
 * (sinks/claimpack.h), and answers each request with its ref and the body's SHA-256.
 *
 * Requests come from the dispatcher thread through a lock-free stack; the thread takes
 * all that are waiting at once (the claims of one scan arrive together), groups them by
 * tenant, splits packs at claim_check.pack_max_bytes and AK_CLAIM_PACK_MAX_CLAIMS (a body
 * larger than the pack size gets a pack of its own), and writes each pack to the first
 * claim store that takes it. A pack that fails is retried claim by claim (one-claim
 * packs), so one bad body cannot fail its neighbours. A ref is answered only after its
 * pack's put returned OK (the object is durable). The request's body must stay valid
 * until it is answered. Never touches the node's store: the dispatcher keeps the refs. */
#ifndef AK_DISPATCH_CHECKIN_H
#define AK_DISPATCH_CHECKIN_H

#include <stddef.h>
#include <stdint.h>
#include "sinks/claimpack.h"

typedef struct ak_checkin ak_checkin_t;

typedef struct ak_checkin_req {
  struct ak_checkin_req *next;       /* the checkin's and the answer's links */
  /* in */
  const char *tenant;
  size_t tenant_len;
  const uint8_t *body;
  size_t len;
  uint8_t hook_id[16];
  const char *content_type;
  size_t content_type_len;
  int64_t received_at_ms;
  uint64_t seq;                      /* the caller's, untouched */
  void *user;                        /* the caller's, untouched */
  /* out */
  int rc;                            /* 0: ref and sha256 are set; -1: err says why */
  char ref[AK_CLAIM_REF_MAX];
  char sha256[65];
  char err[160];
} ak_checkin_req_t;

/* Called on the checkin thread with each answered request (and once per request still
 * waiting when the checkin is freed, rc -1 "stopped"). The callee owns it from then. */
typedef void (*ak_checkin_done_fn)(void *ctx, ak_checkin_req_t *req);

/* stores is borrowed and outlives the checkin. NULL out of memory or without a thread. */
ak_checkin_t *ak_checkin_new(const ak_claim_stores_t *stores, ak_checkin_done_fn done, void *ctx);
/* Any thread. The request is answered exactly once through done. */
void ak_checkin_submit(ak_checkin_t *c, ak_checkin_req_t *req);
/* Answers what waits ("stopped"), joins the thread, frees. */
void ak_checkin_free(ak_checkin_t *c);

#endif
