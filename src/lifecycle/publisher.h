/* The lifecycle publisher: the one thread that delivers the audit trail's outbox (flagged
 * rows, store/audit.h) to every sink of lifecycle.sinks, in seq order, one event at a time,
 * and moves m:lifecycle_cursor past it with a synced write once every sink has settled
 * it (delivered, or given up on: permanent, or retries exhausted). It also runs the one
 * lifecycle replay (POST /v1/replays {"kind":"lifecycle"}), persisted in
 * m:lifecycle_replay so a restart resumes it. Never writes an audit row; never blocks a
 * caller of the trail (a commit only signals it). */
#ifndef AK_LIFECYCLE_PUBLISHER_H
#define AK_LIFECYCLE_PUBLISHER_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include "core/instance.h"
#include "dispatch/retry.h"
#include "sinks/sink.h"
#include "store/audit.h"

/* The reserved source id of lifecycle events (a source with this id is refused). */
#define AK_LIFECYCLE_SOURCE_ID "ankusa:lifecycle"

typedef struct ak_lifecycle ak_lifecycle_t;

/* Build the sinks of a checked lifecycle.sinks list (operator-written: trusted by the
 * egress guard unless egress.guard_static_sources) and bind to inst->audit, turning its
 * outbox on. NULL with *err (malloc'd, naming lifecycle.sinks[i]). */
ak_lifecycle_t *ak_lifecycle_new(ak_instance_t *inst, const json_t *sinks, const ak_retry_policy_t *pol, char **err);
/* Start the thread. 0 or -1. */
int ak_lifecycle_start(ak_lifecycle_t *lc);
/* Stop the thread: an event in flight waits for its sinks' answers (each bounded by its
 * sink's timeout) and is NOT marked published, so it is delivered again, with the same
 * id, at the next start. The outbox stays on. */
void ak_lifecycle_stop(ak_lifecycle_t *lc);
/* Stops if needed, destroys the sinks, frees. NULL is fine. */
void ak_lifecycle_free(ak_lifecycle_t *lc);

/* A lifecycle replay: the flagged rows with from_seq <= seq <= to_seq still in the trail
 * are delivered again to every sink, same ids, after the outbox has caught up. */
typedef enum {
  AK_LC_REPLAY_OK = 0,   /* *out: {id, kind, from_seq, to_seq, state "running"} */
  AK_LC_REPLAY_BUSY,     /* one is running: *out is it */
  AK_LC_REPLAY_FAILED,   /* the store could not be written */
} ak_lc_replay_rc_t;
/* who: the caller (its audit row, "replay.create" with subject "replay:<id>", goes in the
 * replay's own synced batch). */
ak_lc_replay_rc_t ak_lifecycle_replay(ak_lifecycle_t *lc, uint64_t from_seq, uint64_t to_seq,
                                      const ak_audit_who_t *who, json_t **out);

/* GET /v1/replays/{id}: the running or the last finished lifecycle replay of this run
 * (state "running" / "done") when id is its id, else NULL. */
json_t *ak_lifecycle_replay_get(ak_lifecycle_t *lc, const char *id);

/* The next seq the publisher waits to publish (tests). */
uint64_t ak_lifecycle_cursor(ak_lifecycle_t *lc);

/* The test builds' and the unit tests' direct drive: run the loop until the outbox and any
 * replay are empty (no thread). 0, or -1 when the store failed or stop was asked. */
int ak_lifecycle_drain_once(ak_lifecycle_t *lc);

#endif
