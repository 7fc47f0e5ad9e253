/* The audit trail: one row per change an operator makes (rate-limit overrides, the
 * quarantine pen, replay jobs, the log level, API-managed sources), kept in the store's
 * `audit` column family. Owns the rows, their seq (dense, persisted, handed out in commit
 * order), the per-store HMAC key of the before/after hashes, the subjects' revisions,
 * GET /v1/audit's query, and the retention prune (its own small thread). Never holds a
 * secret in a row: a subject is named, and its state appears only as a keyed hash. A
 * store-level service (edge, queue, dispatch and admin write rows): never includes a
 * header above store/.
 *
 * A change that lives in this node's store goes in the SAME synced batch as its row:
 *
 *   if (ak_store_pin(st) != 0) -> 503;
 *   ak_batch_t *wb = ak_batch_new(st);   (NULL -> 503)
 *   ... the change's puts and deletes ...
 *   if (ak_audit_put(inst->audit, wb, &entry) != 0) -> nothing written: 503 store_unavailable
 *   rc = ak_audit_commit(inst->audit, st, wb, &cls, &err);   (synced; ends the put)
 *   ak_store_unpin(st); ... only when rc == 0: apply the change in memory, answer 2xx
 *
 * A successful ak_audit_put holds the trail's order until ak_audit_commit or
 * ak_audit_cancel (exactly one of them, on the same thread, soon: nothing slow between),
 * so a row with a higher seq is never visible before a lower one and a reader that
 * remembers a seq never misses a later row. A request that changes nothing writes no row:
 * the caller decides that before calling put. A NULL trail (unit tests, tools) writes no
 * row and commits the batch alone.
 *
 * A change that is not one batch (a quarantine release, committed by the writer in its
 * own batches) is a dual write: a row with outcome "pending" first (ak_audit_record),
 * then the change, then ak_audit_finish with the outcome; a node killed in between finds
 * the row pending at the next open and marks it "interrupted" (unless its subject's owner
 * settles it: ak_audit_pending_each).
 *
 * The lifecycle outbox (lifecycle.sinks set: src/lifecycle/ calls ak_audit_outbox_enable
 * at open): an entry with an event type is flagged for publication: the row carries
 * "event" and the redacted entity goes beside it ('e' seq) in the same batch, so a change
 * and its event land together or not at all. The publisher reads flagged rows in seq
 * order from m:lifecycle_cursor (ak_audit_outbox_next) and moves the cursor with a synced
 * write; retention never deletes a row (or its entity) at or above the cursor. */
#ifndef AK_STORE_AUDIT_H
#define AK_STORE_AUDIT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/instance.h"
#include "core/module.h"
#include "core/tenants.h"
#include "store/batch.h"
#include "store/store.h"

typedef struct ak_audit ak_audit_t;

/* Who made a request: set by the admin router for every request. */
typedef struct ak_audit_who {
  const char *actor;      /* the principal's name; "anonymous" when admin.principals is empty */
  const char *client;     /* the client's address */
  const char *request_id; /* the X-Request-Id answered with the request */
} ak_audit_who_t;

typedef struct ak_audit_entry {
  const ak_audit_who_t *who;   /* NULL: actor "internal" */
  const char *action;          /* "rate_limit.put", "source.create", ... */
  const char *tenant;          /* the tenant the change is about, or NULL */
  const char *const *tenants;  /* more tenants (a purge across tenants); merged with tenant */
  size_t ntenants;
  const char *subject;         /* "rate_limit:acme", "replay:<id>", "source:acme/github", "log_level" */
  /* the subject's canonical bytes before and after the change; NULL = did not / does not
   * exist. Only their HMAC goes in the row. */
  const void *before;
  size_t before_len;
  const void *after;
  size_t after_len;
  int64_t revision;            /* the subject's revision after the change; 0 = the trail counts
                                  them per subject (1 for the first audited change) */
  const char *outcome;         /* NULL = "ok"; "pending" for the first half of a dual write */
  json_t *detail;              /* borrowed; counts and ids only, never a spec; NULL = none */
  uint64_t *seq_out;           /* optional: the row's seq */
  /* lifecycle: the event type ("io.ankusa.source.created", "io.ankusa.route.deleted",
   * "io.ankusa.tenant.deleted"; NULL = not an event) and the subject's REDACTED entity
   * (borrowed; secrets replaced as the admin API's views do; NULL = null). Written only
   * while the outbox is on; a caller may always set them. */
  const char *event;
  const json_t *entity;
} ak_audit_entry_t;

/* Open the trail on inst->store (open, writable): read or create the HMAC key, find the
 * next seq, mark rows left pending by a kill "interrupted". NULL with *err (malloc'd,
 * names the store) when the store cannot be read or written. */
ak_audit_t *ak_audit_open(ak_instance_t *inst, char **err);
/* Start the prune thread (audit.retention_days, checked hourly). 0 or -1. */
int ak_audit_start(ak_audit_t *a);
/* Stops the thread (if started) and frees. NULL is fine. */
void ak_audit_free(ak_audit_t *a);

/* Add ONE row to the caller's batch (the caller holds a store pin). 0: added, and the
 * order is held until ak_audit_commit / ak_audit_cancel. -1: nothing added, nothing held
 * (also the test builds' fault: ANKUSA_TEST_AUDIT_FAIL=1, or =<path> while that file
 * exists). */
int ak_audit_put(ak_audit_t *a, ak_batch_t *wb, const ak_audit_entry_t *e);
/* Synced write of wb under the caller's pin; ends the put (a failed write gives the seq
 * back). 0, or -1 with *cls / *err (either may be NULL). */
int ak_audit_commit(ak_audit_t *a, ak_store_t *st, ak_batch_t *wb, ak_wf_class_t *cls, char **err);
/* End a put without writing (the caller drops its batch). */
void ak_audit_cancel(ak_audit_t *a);

/* A row alone in its own synced batch (a change that lives in memory, like the log
 * level, or the pending half of a dual write). 0, or -1 (nothing written). */
int ak_audit_record(ak_audit_t *a, const ak_audit_entry_t *e);
/* Settle a pending row: outcome ("ok", "failed"), the subject's state after (NULL: it
 * does not exist any more), detail (replaces the pending row's). */
int ak_audit_finish(ak_audit_t *a, uint64_t seq, const char *outcome, const void *after, size_t after_len,
                    json_t *detail);

/* Pending rows settled by their subject's owner instead of by ak_audit_open (a change to
 * a store outside this node, which the next boot can read: the Redis source store). The
 * pending row of such a change carries detail {"settle":"subject", ...}; ak_audit_open
 * leaves it pending, and the owner, once it can read the subject, calls
 * ak_audit_pending_each and settles each row with ak_audit_finish: the subject's current
 * state hashes (ak_audit_hash) to after_hash "ok", to before_hash "failed", else
 * "interrupted". cb gets the row's seq, subject and hashes (NULL: the state did not
 * exist); it may call ak_audit_finish. Rows whose subject starts with prefix, in seq
 * order. The number of rows, or -1 when the trail cannot be read. */
typedef void (*ak_audit_pending_fn)(void *ctx, uint64_t seq, const char *subject, const char *before_hash,
                                    const char *after_hash);
int ak_audit_pending_each(ak_audit_t *a, const char *prefix, ak_audit_pending_fn cb, void *ctx);
/* The keyed hash the trail keeps for state bytes (64 hex digits and a NUL); "" on failure. */
void ak_audit_hash(ak_audit_t *a, const void *bytes, size_t len, char hex_out[65]);

/* GET /v1/audit. after_seq: rows with a larger seq, oldest first (a cursor: pass back
 * next_after_seq); else newest first, below before_seq when set. Filters: action, tenant
 * (rows naming it), since (at >= since_ms). A scoped reader (scope non-NULL) sees only
 * rows whose tenants are all in its scope; node-wide rows (no tenant) need every tenant. */
typedef struct ak_audit_query {
  bool has_after;
  uint64_t after_seq;
  bool has_before;
  uint64_t before_seq;
  const char *action;
  const char *tenant;
  int64_t since_ms;            /* INT64_MIN: none */
  const ak_tenant_scope_t *scope;
  int64_t limit;               /* 1..1000 */
} ak_audit_query_t;
/* 0 with *out = {entries, next_after_seq} (ascending) or {entries, next_before_seq}
 * (newest first; null when nothing older is left), or -1 when the store cannot be read. */
int ak_audit_query(ak_audit_t *a, const ak_audit_query_t *q, json_t **out);

/* Delete rows older than audit.retention_days at now_ms (oldest first), with their
 * entities; while the outbox is on, none at or above m:lifecycle_cursor (the expired ones
 * held back are the gauge ankusa_audit_retention_blocked_by_cursor and *blocked, which
 * may be NULL). Rows deleted, or -1 on a store error. The prune thread's clock: the test
 * builds' ANKUSA_TEST_AUDIT_CLOCK_FILE (a file holding "now" in ms) and
 * ANKUSA_TEST_AUDIT_PRUNE_MS (how often, instead of hourly). */
int64_t ak_audit_prune(ak_audit_t *a, int64_t now_ms, int64_t *blocked);

/* The next seq the trail will hand out (tests, GET /v1/wal-like views). Every row below
 * it is committed (a put in progress holds the order this takes). */
uint64_t ak_audit_next_seq(ak_audit_t *a);

/* ------------------------------------------------------ the lifecycle outbox ---- */

/* The outbox is on from ak_audit_open when the config has lifecycle.sinks (so even the
 * first prune, at open, stops at the cursor). This turns it on too (tests, tools) and sets
 * what a commit of a flagged row calls (after the write, never under the trail's order;
 * NULL: nothing). Called again with NULL when the publisher stops: the outbox stays on,
 * so a change made while it is down is published at the next start. */
void ak_audit_outbox_enable(ak_audit_t *a, void (*notify)(void *ctx), void *ctx);
bool ak_audit_outbox_on(ak_audit_t *a);
/* m:lifecycle_cursor: the lowest seq not yet published (1 when absent). 0 or -1. */
int ak_audit_outbox_cursor(ak_audit_t *a, uint64_t *cursor);
/* A synced write of m:lifecycle_cursor. 0 or -1. */
int ak_audit_outbox_advance(ak_audit_t *a, uint64_t cursor);

/* One flagged row: its seq, the audit row and {"event", "entity"}; owned (clear it). */
typedef struct ak_audit_event {
  uint64_t seq;
  json_t *row;
  json_t *event;
} ak_audit_event_t;
/* The first flagged row with from <= seq < below. 1 (filled), 0 (none), 2 (the first is
 * a pending row of a dual write: ev->seq and ev->row only; nothing at or after it may go
 * before it settles, and ak_audit_finish signals the publisher), -1 (store error; a
 * damaged entity row is logged and skipped). A row settled "failed" (the change was not
 * made) is no event and is passed over; "ok" and "interrupted" rows are events. */
int ak_audit_outbox_next(ak_audit_t *a, uint64_t from, uint64_t below, ak_audit_event_t *ev);
void ak_audit_event_clear(ak_audit_event_t *ev);
/* A tenant erase: every flagged row naming tenant keeps its event (delivered in order, as
 * before) but loses its entity. Synced. 0 with *erased (rows changed), or -1. */
int ak_audit_erase_entities(ak_audit_t *a, const char *tenant, int64_t *erased);
/* The event id of row seq: 16 bytes (a UUID, version 8) keyed by the store's own audit
 * key, so a redelivery and a replay of a row carry the same id and two stores never
 * share one. */
void ak_audit_event_id(const ak_audit_t *a, uint64_t seq, uint8_t id[16]);

/* The `audit` section and the trail's lifecycle (inst->audit). */
typedef struct ak_audit_cfg {
  int64_t retention_days;
} ak_audit_cfg_t;
extern const ak_module_t ak_mod_audit;

#endif
