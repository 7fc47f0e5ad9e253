/* Replay jobs (POST /v1/replays kind dlq or archive): drip dead-lettered delivery rows
 * (dlq), or archived hooks (archive), back into the due queue at a rate, only while the
 * dispatcher has spare capacity, and count how the replayed deliveries end. Owns the job
 * table, the job records in the store, the move of a row out of the dead-letter set and
 * the put-back of an archived hook; also the dead-letter listing (GET /v1/dlq). Never
 * delivers anything, never reads a blob (the archive side prepares what an archive job
 * moves, see ak_replays_set_archive), and never touches a delivery row that exists unless
 * it is in the dead-letter set.
 *
 * Wiring (main.c, when the dispatch role runs; after ak_dispatch_new, before start):
 *   inst->replays = ak_replays_new(inst);
 *   if (ak_replays_load(inst->replays, &err) != 0) -> refuse to start with err;
 *   ak_dispatch_on_tick(inst->dispatch, ak_replays_tick, inst->replays);
 *   ak_dispatch_on_replay_settled(inst->dispatch, ak_replays_settled, inst->replays);
 * and after ak_dispatch_stop: ak_replays_free(inst->replays) (admin stopped first).
 *
 * Threads: admin handlers create, list and patch; the dispatch thread ticks and reports
 * settled deliveries. One mutex guards the table and every job's fields. It is held across
 * a store write only where the write must be ordered with the state it records (a job
 * record is always written from memory under the mutex, so the store never ends up with
 * an older record than memory): an admin's one synced record put, the tick's unsynced
 * move batch. Scans and point reads are never made under it. */
#ifndef AK_DISPATCH_REPLAY_H
#define AK_DISPATCH_REPLAY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/instance.h"
#include "core/module.h"
#include "core/tenants.h"

struct ak_store;
struct ak_audit_who;
typedef struct ak_replays ak_replays_t;

#define AK_REPLAY_MAX_ACTIVE 16       /* running + paused jobs */
#define AK_REPLAY_RATE_DEFAULT 1000   /* rows per second */
#define AK_REPLAY_RATE_MAX 100000
#define AK_REPLAY_LAG_DEFAULT 2000    /* ms */
#define AK_REPLAY_LAG_MIN 100
#define AK_REPLAY_LAG_MAX 600000
#define AK_REPLAY_TICK_ROWS 1000      /* rows moved per tick, all jobs together */
#define AK_REPLAY_TICK_SCAN 10000     /* dead-letter keys looked at per tick, all jobs */
#define AK_REPLAY_DEAD_STREAK 50      /* consecutive re-dead-lettered, none delivered: pause */
#define AK_REPLAY_KEEP_FINISHED 100   /* finished jobs kept (store and memory), newest */

typedef enum {
  AK_REPLAY_RUNNING = 0,
  AK_REPLAY_PAUSED,
  AK_REPLAY_CANCELLED,
  AK_REPLAY_DONE,
  AK_REPLAY_FAILED,
} ak_replay_state_t;

/* Filter of a job. dlq: times are unix ms on dead-letter time, inclusive. archive
 * (is_archive): from/to on received_at, inclusive, both required; source_id, tenant_id
 * and sinks (indexes into the source's current sink list; nsinks 0: all) narrow it. */
typedef struct ak_replay_filter {
  bool is_archive;
  int64_t from_ms, to_ms;
  const char *tenant_id; /* archive: NULL: any */
  const uint16_t *sinks;
  size_t nsinks;
  const char *source_id; /* NULL: any */
  bool has_id;
  uint8_t id[16];
  bool has_since, has_until;
  int64_t since_ms, until_ms;
  /* not part of the filter: the audit row of the creation */
  const struct ak_audit_who *who;
  const char *tenant; /* the tenant of source_id (NULL: none named) */
} ak_replay_filter_t;

ak_replays_t *ak_replays_new(ak_instance_t *inst);
/* Read the job records (running jobs resume at their cursor). 0, or -1 with *err
 * (malloc'd) when the store cannot be read. A damaged record is logged and left out. */
int ak_replays_load(ak_replays_t *r, char **err);
void ak_replays_free(ak_replays_t *r);

/* ak_dispatch_tick_fn: move what each running job may move now. Dispatch thread only. */
void ak_replays_tick(void *ctx, int64_t now_ms);
/* ak_dispatch_settled_fn: a replayed delivery was delivered or dead-lettered again. Counted
 * in memory, persisted with the next tick. */
void ak_replays_settled(void *ctx, const uint8_t replay_id[16], bool delivered);

typedef enum {
  AK_REPLAY_OK = 0,      /* create: 202, *out is the new job; patch: 200, *out is the job */
  AK_REPLAY_EXISTS,      /* 200: a running/paused job with the same filter; *out is it */
  AK_REPLAY_TOO_MANY,    /* 409 too_many_replays */
  AK_REPLAY_NOT_FOUND,   /* 404 replay_not_found */
  AK_REPLAY_FINISHED,    /* 409 replay_finished */
  AK_REPLAY_STORE_ERROR, /* 503 store_unavailable: nothing changed */
} ak_replay_result_t;

/* ------------------------------------------------------------- archive replay ---- */

/* Archive replay jobs read hooks from the archive, which lives above this layer
 * (archive/replay_reader.c). The archive side registers a fetch function at its open
 * and clears it (fn NULL) at its stop; the tick calls it under the table's mutex, so
 * after ak_replays_set_archive(r, NULL, NULL) returns no call is running or will run.
 *
 * A fetch never blocks on I/O: it answers a batch prepared for exactly this request
 * (job, after_seq, from, to, max), or queues the request for the reader and answers
 * "not ready". */
typedef struct ak_replay_arec {
  uint64_t seq;
  uint8_t *rec; /* the stored hook record (malloc'd) */
  size_t len;
} ak_replay_arec_t;

typedef struct ak_replay_abatch {
  ak_replay_arec_t *v; /* archived hooks with seq > after_seq and received_at in the window, seq order */
  size_t n;
  uint64_t looked_to;   /* every seq in (after_seq, looked_to] was looked at (v holds those in the window) */
  bool end;             /* nothing is archived past looked_to that meets the window */
  uint32_t gone;        /* segments passed over because their objects are gone or damaged */
} ak_replay_abatch_t;

enum { AK_REPLAY_FETCH_NOT_READY = 0, AK_REPLAY_FETCH_READY = 1 };
/* AK_REPLAY_FETCH_READY with *out filled (the caller frees it: ak_replay_abatch_clear),
 * or AK_REPLAY_FETCH_NOT_READY. max: hooks in the batch, at most. */
typedef int (*ak_replay_fetch_fn)(void *ctx, const uint8_t job[16], uint64_t after_seq, int64_t from_ms,
                                  int64_t to_ms, size_t max, ak_replay_abatch_t *out);
void ak_replays_set_archive(ak_replays_t *r, ak_replay_fetch_fn fn, void *ctx);
void ak_replay_abatch_clear(ak_replay_abatch_t *b);

/* Create a job (synced write, with its replay.create audit row, before returning
 * OK). rate / max_lag_ms already validated by the caller. *out: the Replay object
 * (caller owns). */
ak_replay_result_t ak_replays_create(ak_replays_t *r, const ak_replay_filter_t *f, int64_t rate, int64_t max_lag_ms,
                                     json_t **out);

/* {"replays": [...]} newest first. */
json_t *ak_replays_list(ak_replays_t *r);
/* The Replay object, or NULL when no such job. */
json_t *ak_replays_get(ak_replays_t *r, const uint8_t id[16]);

/* PATCH: state < 0, rate 0, max_lag_ms 0 leave that field alone; state is RUNNING,
 * PAUSED or CANCELLED. Resuming clears error and the dead streak. Synced write with its
 * replay.patch audit row; a patch that changes none of state, rate, max_lag_ms and error
 * writes nothing (OK, the job as it is). */
typedef struct ak_replay_patch {
  int state;
  int64_t rate;
  int64_t max_lag_ms;
  const struct ak_audit_who *who; /* the audit row's actor */
  const char *tenant;             /* the tenant of the job's source (NULL: none) */
} ak_replay_patch_t;
ak_replay_result_t ak_replays_patch(ak_replays_t *r, const uint8_t id[16], const ak_replay_patch_t *p,
                                    json_t **out);

const char *ak_replays_state_name(ak_replay_state_t s);
/* "running" etc. -> state, or -1. */
int ak_replays_state_parse(const char *s);

/* GET /v1/dlq: dead-lettered rows with dead_at >= since_ms (since_ms < 0: all), of
 * source_id (NULL: any) and of a tenant in scope (NULL: any), newest first, at most limit
 * entries, each with its hook's size and content_type; total counts every match. 0 with
 * *out = {"total", "entries"}, or -1 when the store cannot be read. */
int ak_replays_dlq_list(struct ak_store *st, const char *source_id, const ak_tenant_scope_t *scope, int64_t since_ms,
                        int64_t limit, json_t **out);

/* The replay jobs' lifecycle (inst->replays; dispatch role), hooked into the dispatcher. */
extern const ak_module_t ak_mod_replay;

#endif
