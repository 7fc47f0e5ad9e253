/* The group-commit writer: the only seq assigner and the only thread that writes hooks.
 * Takes everything queued, writes it as ONE synced WriteBatch (the hook records, the
 * group's marker (store/marker.h), id index keys of unsealed ids, seq marker, hook count,
 * the dedupe keys it took as a few records), then answers
 * each caller. Owns the queue bounds, record deadlines, store close/reopen after a
 * failed write, and readiness. Never answers "committed" before the write returned. */
#ifndef AK_QUEUE_WRITER_H
#define AK_QUEUE_WRITER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/config.h"
#include "core/instance.h"
#include "core/module.h"
#include "core/sources.h"
#include "store/batch.h"

typedef enum { AK_WAL_DISK = 0, AK_WAL_NONE = 1, AK_WAL_DUAL = 2 } ak_wal_type_t;

/* The `batcher` section (group commit). */
typedef struct ak_batcher_cfg {
  int64_t partitions;
  int64_t max_batch;
  int64_t max_delay_ms;
  int64_t max_queue;
  int64_t max_queue_bytes;
  int64_t tenant_max_queue;       /* one tenant's share of max_queue (429 tenant_overload); resolved */
  int64_t tenant_max_queue_bytes; /* and of max_queue_bytes */
} ak_batcher_cfg_t;

/* The `wal` section. */
typedef struct ak_wal_cfg {
  ak_wal_type_t type;
  int64_t publish_timeout_ms;
} ak_wal_cfg_t;

/* The writer's lifecycle and the batcher section; the wal section. */
extern const ak_module_t ak_mod_batcher;
extern const ak_module_t ak_mod_wal;
const ak_batcher_cfg_t *ak_batcher_cfg(const ak_config_t *cfg);
const ak_wal_cfg_t *ak_wal_cfg(const ak_config_t *cfg);
const char *ak_wal_type_text(ak_wal_type_t t);

typedef enum {
  AK_WR_QUEUED = 0,           /* accepted into the queue; done() will be called */
  AK_WR_COMMITTED,            /* durable; seq set */
  AK_WR_DUPLICATE,            /* its dedupe key belongs to a committed hook, whose id is in
                                 req->dedupe->first_id; nothing stored */
  AK_WR_DEDUPE_QUOTA,         /* a new key would pass dedupe.max_entries(_per_tenant); nothing stored */
  AK_WR_OVERLOAD,             /* queue full (records or bytes) */
  AK_WR_STORE_UNAVAILABLE,    /* store closed or the write failed */
  AK_WR_DEADLINE,             /* did not start committing within the record deadline */
  AK_WR_DRAINING,             /* node is stopping */
  AK_WR_TENANT_OVERLOAD,      /* the tenant's share of the queue is full (records or bytes) */
  AK_WR_INTAKE_UNAVAILABLE,   /* wal.type dual: the intake log cannot take the group (its breaker
                                 is open: nothing written) or did not confirm it (the store half
                                 is kept: the reconciler completes it) */
  AK_WR_INTAKE_PENDING,       /* wal.type dual: its dedupe key belongs to a hook whose halves are
                                 not both confirmed yet; nothing stored */
} ak_wr_status_t;

typedef enum {
  AK_WRITE_HOOK = 0,          /* a hook: hooks CF, its group's marker, id index */
  AK_WRITE_QUARANTINE = 1,    /* a pen entry: quarantine CF 's'/'b' keys + pen byte total */
} ak_write_kind_t;

typedef struct ak_write_req {
  struct ak_write_req *next;
  uint8_t kind;               /* ak_write_kind_t; 0 = AK_WRITE_HOOK */
  uint8_t reason;             /* AK_WRITE_QUARANTINE: the ak_verify_reason_t */
  bool unpen;                 /* AK_WRITE_HOOK released from the pen: in the same batch delete
                                 its 's'/'b' quarantine keys (received_at_ms + id) and take
                                 unpen_bytes off the pen's byte total */
  int64_t unpen_bytes;
  uint8_t *rec;               /* encoded envelope, owned by the caller; seq stamped in place */
  size_t rec_len;
  size_t body_len;
  uint8_t id[16];
  int64_t received_at_ms;
  const ak_source_cfg_t *source;
  const char *tenant;         /* AK_WRITE_HOOK: the hook's tenant (groups its due keys); must
                                 stay valid until done() */
  size_t tenant_len;
  int64_t deadline_ns;        /* set by submit */
  ak_wr_status_t status;      /* final status, valid when done() runs */
  uint64_t seq;
  bool id_sealed;             /* set by the writer: id (and the record's copy) now carries seq
                                 sealed (core/ids.h), so the commit writes no 'i' index key */
  bool fixed;                 /* ak_writer_commit_fixed: seq (and the record's id) are given */
  bool stored;                /* set by the writer: the hook is in the store (under wal.type dual
                                 the answer can still be a failure: the other half failed) */
  struct ak_dedupe_claim *dedupe; /* AK_WRITE_HOOK with a provider event key (queue/dedupe.h), else NULL */
  void (*done)(struct ak_write_req *req, void *ctx);
  void *ctx;
} ak_write_req_t;

typedef struct ak_writer ak_writer_t;

/* Called on the writer thread after a batch with hooks committed, before anyone is
 * answered: the dispatcher gets the group's marker as stored (first_seq and the value of
 * its 'g' key, valid during the call) and safe_below: every seq below it is committed,
 * its notice given (this one included), or void. Must not block on I/O. */
typedef void (*ak_writer_commit_fn)(void *ctx, uint64_t first_seq, const uint8_t *marker, size_t marker_len,
                                    uint64_t safe_below);
void ak_writer_on_commit(ak_writer_t *w, ak_writer_commit_fn fn, void *ctx);

/* wal.type dual: the second half of every commit, registered by the intake log (intake/)
 * before the writer starts. A group's hooks are its records with seqs and ids stamped. */
typedef struct ak_writer_mirror {
  /* Before the group's store write, on its writer thread: start publishing the hooks
   * (`next`-linked; records final) and put the mirror's own keys into the group's batch.
   * Never waits on the network. NULL: the half cannot start (breaker open, queue full):
   * the group is answered AK_WR_INTAKE_UNAVAILABLE and nothing is written. */
  void *(*begin)(void *ctx, const ak_write_req_t *hooks, ak_batch_t *wb);
  /* After the store write (stored: it returned OK; each hook's `stored` says so too), on
   * the writer thread: the hooks now belong to the mirror, which answers each with
   * ak_writer_answer once its other half is in. */
  void (*disk_done)(void *ctx, void *group, bool stored, ak_write_req_t *hooks);
  /* True while the hook id is stored but not confirmed in both halves: a repeat of its
   * dedupe key is answered AK_WR_INTAKE_PENDING. Any thread, no I/O. */
  bool (*pending)(void *ctx, const uint8_t id[16]);
  /* The lowest seq of a hook the log confirmed and the store still lacks (its store half
   * failed: the mirror commits it with ak_writer_commit_fixed when the store is back), or
   * UINT64_MAX. The writer reports nothing at or above it committed until then (the
   * dispatcher's low mark, the compactor's read position). Under the writer's lock: quick,
   * no I/O, and the mirror never takes the writer's lock under its own. */
  uint64_t (*hold_below)(void *ctx);
  void *ctx;
} ak_writer_mirror_t;
void ak_writer_set_mirror(ak_writer_t *w, const ak_writer_mirror_t *m);
/* Answers each hook of list (`next`-linked) with st (the mirror's answer); parked repeats
 * of their keys get theirs. Any thread. */
void ak_writer_answer(ak_writer_t *w, ak_write_req_t *list, ak_wr_status_t st);
/* True when the hook id is stored but not yet confirmed in both halves (wal.type dual). */
bool ak_writer_pending(ak_writer_t *w, const uint8_t id[16]);
/* Commits hooks whose seqs and ids are given (recovered from the intake log at boot, or
 * completed by the mirror), on the calling thread, beside the writer threads (one caller
 * at a time; it has a slot of its own): one synced batch per run of dense seqs,
 * each record answered through its done() with AK_WR_COMMITTED, AK_WR_DUPLICATE (its key
 * is live: not written) or a failure. Not published again. next_seq moves past them. */
void ak_writer_commit_fixed(ak_writer_t *w, ak_write_req_t *list);

#define AK_RECORD_DEADLINE_MS 15000

ak_writer_t *ak_writer_new(ak_instance_t *inst);
int ak_writer_start(ak_writer_t *w);
/* AK_WR_QUEUED: done() will be called exactly once from a writer thread. Any other
 * value: refused now, done() will NOT be called. */
/* A tenant's share of the queue (batcher.tenant_max_queue*), taken by the edge's ingest
 * ticket before it submits and given back when the ticket settles: AK_WR_QUEUED (taken),
 * or the refusal submit would give first (store, draining, the node's bound), or
 * AK_WR_TENANT_OVERLOAD. Any thread. */
ak_wr_status_t ak_writer_share_take(ak_writer_t *w, const char *tenant, size_t tlen, size_t bytes);
void ak_writer_share_give(ak_writer_t *w, const char *tenant, size_t tlen, size_t bytes);
ak_wr_status_t ak_writer_submit(ak_writer_t *w, ak_write_req_t *req);
/* The records the tenant's ingest requests hold in the queue (their shares, taken before
 * submit, given back once answered): a tenant erase waits for none (tenant/erase.c). */
int64_t ak_writer_share_held(ak_writer_t *w, const char *tenant, size_t tlen);
/* Commit everything already queued, answer it, refuse new submissions, stop threads. */
void ak_writer_stop(ak_writer_t *w);
void ak_writer_free(ak_writer_t *w);

/* Readiness: true when the store takes a synced write (probe cached for 1 s) and no
 * write failed in the last 5 s. reason gets "ok" or a failure class. */
bool ak_writer_ready(ak_writer_t *w, const char **reason);
/* The seq the next committed hook gets, and the hooks held in the store. */
uint64_t ak_writer_next_seq(ak_writer_t *w);
uint64_t ak_writer_hooks(ak_writer_t *w);
/* Every seq below the answer is committed or void (never will be): the next seq, or the
 * first seq of a batch some writer thread is committing. Any thread. */
uint64_t ak_writer_committed_below(ak_writer_t *w);
/* n hooks were reclaimed (their delete, with m:hook_count:r, is written): the hook count
 * and its gauge drop. Any thread. */
void ak_writer_note_reclaimed(ak_writer_t *w, uint64_t n);
/* n reclaimed hooks were put back (an archive replay; written, with m:hook_count:r): the
 * hook count and its gauge rise. Any thread. */
void ak_writer_note_restored(ak_writer_t *w, uint64_t n);
/* Refresh gauges (queue depth, store unavailable seconds). */
void ak_writer_sample(ak_writer_t *w);

#endif
