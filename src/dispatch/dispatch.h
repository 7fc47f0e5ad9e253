/* The dispatcher: one thread that turns the hook log (the commits' group markers) and the
 * store's exception rows into sink attempts. Owns the tenant-fair scheduler (deficit
 * round-robin over the tenants with work due, per-tenant windows, slots round-robin across
 * tenants and then their sink keys), the hook log in memory and its per-tenant cursors,
 * ordered lanes, the sink instances, breakers, retry decisions, the batched outcome
 * writes, dead-lettering, hook reclaim and the dispatch/queue metrics. Never blocks on a
 * sink (sinks are async) and never writes a hook; the writer hands it each commit's marker.
 *
 * Claims live in memory: a claimed delivery has no row of its own (or keeps its due key),
 * so a delivery claimed when the process died is owed again at the next start. */
#ifndef AK_DISPATCH_DISPATCH_H
#define AK_DISPATCH_DISPATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/instance.h"
#include "core/module.h"

/* The buckets of ankusa_delivery_latency_seconds{instance,sink,result}: one family for the
 * dispatcher's settled deliveries and the direct publisher's sink answers (edge/publish.h). */
extern const double ak_delivery_latency_bounds[];
extern const size_t ak_delivery_latency_nbounds;

/* The `dispatch` section. */
typedef struct ak_dispatch_retry_cfg {
  int64_t base_ms, max_ms, max_attempts;
  bool jitter;
} ak_dispatch_retry_cfg_t;

/* dispatch.tenants: the window every tenant is held to (nulls resolved at load to a
 * share of the node's: max_inflight / 4, max_inflight_bytes / 4, max(1, concurrency / 2)) */
typedef struct ak_dispatch_tenant_cfg {
  int64_t max_inflight, max_inflight_bytes, concurrency;
} ak_dispatch_tenant_cfg_t;

typedef struct ak_dispatch_cfg {
  int64_t batch;              /* rows claimed per scan */
  int64_t concurrency;        /* attempts in flight */
  int64_t max_inflight;       /* claimed, unfinished rows */
  int64_t max_inflight_bytes; /* stored bytes of those rows */
  int64_t attempt_timeout_ms;
  int64_t sink_concurrency;   /* per sink key; 0 when null (no cap beyond the others) */
  int64_t breaker_failures;   /* 0 = no breaker */
  int64_t breaker_open_ms;
  int64_t breaker_max_open_ms;
  ak_dispatch_retry_cfg_t retry;
  ak_dispatch_tenant_cfg_t tenants;
} ak_dispatch_cfg_t;

/* The `dispatch` section and the dispatcher's lifecycle (inst->dispatch; dispatch role). */
extern const ak_module_t ak_mod_dispatch;
const ak_dispatch_cfg_t *ak_dispatch_cfg(const ak_config_t *cfg);

typedef struct ak_dispatch ak_dispatch_t;

/* Build the sink instances of every configured source (a sink that can never work, e.g.
 * refused by the egress guard, fails here with err naming sources.<id>.sinks[i]) and the
 * metrics. Does not start the thread. */
ak_dispatch_t *ak_dispatch_new(ak_instance_t *inst, char *err, size_t errlen);
/* Load the hook log (cursors, then the group markers from m:dlow), the ordered lanes and
 * the reclaim candidates, scan the due index once (per-tenant counters and cursors), hook
 * into the writer, start the thread. 0, or -1 with err (a damaged marker refuses it). */
int ak_dispatch_start(ak_dispatch_t *d, char *err, size_t errlen);
/* Stop claiming, wait up to wait_ms for running attempts, write the outcomes, join.
 * Rows still claimed stay due in the store. */
void ak_dispatch_stop(ak_dispatch_t *d, int64_t wait_ms);

/* For benchmarks and tests, on a dispatcher that is not started: ak_dispatch_load does
 * start's due-index scan without the thread; ak_dispatch_debug_scan runs one scheduling
 * pass at now_ms and returns the rows it claimed (they stay claimed). */
int ak_dispatch_load(ak_dispatch_t *d, char *err, size_t errlen);
size_t ak_dispatch_debug_scan(ak_dispatch_t *d, int64_t now_ms);
/* Rows of `tenant` claimed now; -1 for a tenant never seen. */
int64_t ak_dispatch_debug_tenant_claimed(ak_dispatch_t *d, const char *tenant);
/* Tests: tenants a scan would serve now (0 when the node's window wants no claims). */
size_t ak_dispatch_debug_ready(ak_dispatch_t *d);
void ak_dispatch_free(ak_dispatch_t *d);

/* Rows became due outside a hook commit (a replay moved them back from the dead-letter
 * set): `rows` rows of `tenant`, the earliest due at at_ms; `from_dead` of them left the
 * dead set. Thread-safe; wakes the dispatcher. */
void ak_dispatch_note_due(ak_dispatch_t *d, const char *tenant, size_t tlen, int64_t at_ms, uint64_t rows,
                          uint64_t from_dead);

/* An archive replay puts reclaimed hooks back into the store (dispatch thread only, in a
 * batch the caller writes; the reclaim that deletes them again counts them off). The
 * store's hook count must say so in the same batch: count_restored puts m:hook_count:r
 * less n reclaimed into wb (the caller holds a store pin); once wb is written, restored
 * makes it the dispatcher's and the writer's count. */
struct ak_batch;
void ak_dispatch_count_restored(ak_dispatch_t *d, struct ak_batch *wb, uint64_t n);
void ak_dispatch_restored(ak_dispatch_t *d, uint64_t n);

/* For replay jobs: age of the oldest due, unclaimed row (0 when none), and whether the
 * global claim window has room. Thread-safe snapshots. */
int64_t ak_dispatch_oldest_due_age_ms(ak_dispatch_t *d);
bool ak_dispatch_has_room(ak_dispatch_t *d);

/* Deliveries of a source still on the hook log, claimed or not (exception rows are in the
 * due index). Thread-safe. */
int64_t ak_dispatch_log_pending(ak_dispatch_t *d, const char *source);
/* The same read from the store, for a node without the dispatcher: the source's hooks at
 * or above its tenant's cursor (a shared source's hooks may belong to other tenants' cursors:
 * counted from the low mark). 0, or -1 when the store cannot be read. */
struct ak_store;
int ak_dispatch_store_log_pending(struct ak_store *st, const char *source, const char *tenant, int64_t *out);

/* Delivery rows as of the last scheduler pass (every ~100 ms): unclaimed first attempts,
 * unclaimed retries, claimed, dead. Thread-safe. */
typedef struct {
  int64_t pending, scheduled, inflight, dead;
} ak_dispatch_counts_t;
void ak_dispatch_queue_counts(ak_dispatch_t *d, ak_dispatch_counts_t *out);

/* A delivery of a replayed row settled (ok or dead): the replay module counts it. Set
 * before start; called on the dispatch thread. */
typedef void (*ak_dispatch_settled_fn)(void *ctx, const uint8_t replay_id[16], bool delivered);
void ak_dispatch_on_replay_settled(ak_dispatch_t *d, ak_dispatch_settled_fn fn, void *ctx);

/* ankusa_compact_failures_total{stage}: the archive's stages (segment, retention) and the
 * hook reclaim sweep (reclaim), which runs here. */
#define AK_METRIC_COMPACT_FAILURES "ankusa_compact_failures_total"
#define AK_METRIC_COMPACT_FAILURES_HELP \
  "Archive failures by stage: segment (a segment was not written), retention (the retention sweep), reclaim " \
  "(the hook reclaim sweep)."

/* The compactor's cursor (archive/compactor.c), once written: every hook below seq is
 * archived. While the storage role runs, reclaim goes no further (it starts at 0: nothing
 * archived). Any thread; never moves back. */
void ak_dispatch_archived_below(ak_dispatch_t *d, uint64_t seq);

/* Called on the dispatch thread about every 100 ms (replay jobs drip from here). */
typedef void (*ak_dispatch_tick_fn)(void *ctx, int64_t now_ms);
void ak_dispatch_on_tick(ak_dispatch_t *d, ak_dispatch_tick_fn fn, void *ctx);

/* Tenant erase (tenant/erase.h). closed(ctx, tenant) says a tenant is being erased: its
 * claimed rows are then settled without a delivery, and an attempt of it that finishes
 * writes no retry or dead row (its delivery is simply cleared). Set before start; called
 * on the dispatch thread, so it must be cheap and thread-safe. */
typedef bool (*ak_dispatch_closed_fn)(void *ctx, const char *tenant, size_t tlen);
void ak_dispatch_set_closed(ak_dispatch_t *d, ak_dispatch_closed_fn fn, void *ctx);
/* Run fn(d, ctx) on the dispatch thread, after every outcome settled so far is written,
 * and wait for it. One call at a time. 0 once it ran; -1 (not run) when the dispatcher
 * is not running or stops first. */
typedef void (*ak_dispatch_call_fn)(ak_dispatch_t *d, void *ctx);
int ak_dispatch_call(ak_dispatch_t *d, ak_dispatch_call_fn fn, void *ctx);
/* In a call: the tenant's claimed rows plus its deliveries still on the hook log (0: none
 * running, none owed from the log). */
int64_t ak_dispatch_tenant_busy(ak_dispatch_t *d, const char *tenant, size_t tlen);
/* In a call: hooks below this seq are reclaimed unless a row of theirs kept them (m:reclaimed);
 * above it, the reclaim pass counts a deleted hook off the store's hook count itself. */
uint64_t ak_dispatch_reclaimed_to(ak_dispatch_t *d);
/* In a call: n hooks deleted by an erase below the reclaim pass: m:hook_count:r into wb
 * (the caller holds a pin); once wb is written, ak_dispatch_erased with the same n, the
 * dead rows it deleted, and the tenant whose exception rows (due keys, dead and lane rows)
 * are gone from the store. */
void ak_dispatch_count_erased(ak_dispatch_t *d, struct ak_batch *wb, uint64_t n);
void ak_dispatch_erased(ak_dispatch_t *d, const char *tenant, size_t tlen, uint64_t hooks, uint64_t dead);
/* In a call, once the reclaim pass is past every hook of the tenant (no group marker names
 * it any more): its log cursor's delete into wb (the caller holds a pin and writes wb),
 * and the cursor is not written again unless the tenant's log moves. */
void ak_dispatch_forget_cursor(ak_dispatch_t *d, const char *tenant, size_t tlen, struct ak_batch *wb);

#endif
