/* Fleet-scoped admission (seed 000): the tenant quota (rate_limits.scope: fleet) and the
 * provider event claim (dedupe.scope: fleet) counted in one Redis (fleet.store), so N
 * edge nodes enforce one limit and one dedupe window instead of N.
 *
 * One call per hook: a Lua script, loaded once per connection and called by its SHA,
 * charges the tenant's hooks and bytes (GCRA, the node limiter's arithmetic) and claims
 * the event key as pending, atomically. The call runs on the fleet thread, which
 * pipelines the calls of concurrent requests; the edge suspends the request meanwhile.
 * Every call has the hard budget fleet.timeout_ms: a call that fails or times out is
 * answered node-local (the caller's own buckets, its writer's dedupe index) and counted,
 * and a breaker on atomics (fleet/breaker.h) stops calling a store that keeps failing.
 *
 * After the commit the claim is settled off the answer's path: promoted to committed
 * under the hook's id, or released (with the quota charge given back). Settles queue
 * (bounded: one more is dropped and counted) and go out in pipelined batches every few
 * milliseconds. A dropped promote is a pending key that expires (fleet.pending_ttl_ms);
 * a dropped release keeps the key pending until then. Neither loses a hook.
 *
 * Owns the fleet section, the Redis connection (net/redis.h), the fleet thread, the
 * breaker, the settle queue and the fleet metrics. Never decides a node-local answer
 * (the edge does, with its own quota and the writer's index), never blocks a caller,
 * never puts the store's password into a log, a metric or the admin API. */
#ifndef AK_FLEET_FLEET_H
#define AK_FLEET_FLEET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include "core/instance.h"
#include "core/module.h"
#include "core/ratelimit.h"

typedef struct ak_fleet ak_fleet_t;

typedef enum {
  AK_FLEET_ADMITTED = 0,  /* charged and (if asked) claimed: store the hook, then settle */
  AK_FLEET_DUPLICATE,     /* another node stored the event: dup_id is its hook */
  AK_FLEET_RATE_LIMITED,  /* the tenant's fleet quota is spent: retry_ms */
  AK_FLEET_PENDING,       /* another node's copy is not durable yet: retry_ms */
  AK_FLEET_LOCAL,         /* no answer from the store (failed, timed out, breaker open):
                             answer node-local */
} ak_fleet_verdict_t;

typedef struct ak_fleet_call ak_fleet_call_t;
typedef void (*ak_fleet_done_fn)(ak_fleet_call_t *call, void *ctx);

/* One hook's admission. The caller fills the inputs, ak_fleet_begin and the fleet thread answer; the call
 * then stays the caller's until it hands it to ak_fleet_settle (which always takes it). */
struct ak_fleet_call {
  /* ---- inputs ---- */
  bool charge;                 /* charge lim to the tenant's fleet quota */
  ak_ratelimit_t lim;          /* the tenant's limits as this node has them */
  uint64_t bytes;              /* the body's size (the bytes lane's cost) */
  bool claim;                  /* claim the event key */
  uint8_t digest[16];          /* the event key's scope digest (queue/dedupe.h) */
  int64_t ttl_ms;              /* the source's dedupe TTL (for the committed key) */
  char tenant[65];
  ak_fleet_done_fn done;       /* on the fleet thread, once, when the verdict is in */
  void *ctx;
  /* ---- outputs ---- */
  ak_fleet_verdict_t verdict;
  int64_t retry_ms;            /* RATE_LIMITED, PENDING */
  uint8_t dup_id[16];          /* DUPLICATE */
  /* ---- private (fleet.c) ---- */
  bool sent;                   /* the script was written to the store: a settle follows */
  bool probe;                  /* the breaker's probe */
  int64_t t0_ns, deadline_ns;
  char token[24];
  struct ak_fleet_call *next;
};

/* The module (section fleet; roles edge). inst->fleet is NULL unless a scope is fleet. */
extern const ak_module_t ak_mod_fleet;

bool ak_fleet_rate_scope(const ak_fleet_t *f);
bool ak_fleet_dedupe_scope(const ak_fleet_t *f);

/* Start the admission of one hook: asks the breaker. true: a call is to be made; the
 * caller gets ready for the verdict (suspends the request) and then hands the call to
 * ak_fleet_send, after which call->done(call, ctx) runs once, on the fleet thread (maybe
 * before send returns). false: answer node-local now (call->verdict is AK_FLEET_LOCAL,
 * counted as a fallback; the breaker is open). Either way the caller hands the call to
 * ak_fleet_settle in the end. Two steps, so the caller's "get ready" never races the
 * verdict and a node-local answer needs no round trip through another thread. */
bool ak_fleet_begin(ak_fleet_t *f, ak_fleet_call_t *call);
void ak_fleet_send(ak_fleet_t *f, ak_fleet_call_t *call);

/* The outcome of the commit that followed: id is the hook that holds the event (the one
 * stored, or the first one when this node's own index knew it) or NULL when nothing was
 * stored. Queues the promote or release (and gives back the quota charge) when the store
 * may hold a claim of this call; frees the call. Never blocks. NULL call: nothing. */
void ak_fleet_settle(ak_fleet_t *f, ak_fleet_call_t *call, const uint8_t *id);

/* Forget the tenant's fleet buckets (its limit changed). Best effort, queued like a
 * settle. */
void ak_fleet_forget(ak_fleet_t *f, const char *tenant, size_t tenant_len);

/* GET /v1/fleet: scopes, store address (no secret), connection, breaker, degraded kinds,
 * settle queue depth and bound. Works on a NULL fleet (both scopes node). */
json_t *ak_fleet_json(const ak_fleet_t *f, const ak_config_t *cfg);

#endif
