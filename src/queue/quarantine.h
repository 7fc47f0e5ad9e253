/* The quarantine pen: admission control for hooks that failed verification on a source
 * with `on_verify_failure: quarantine`. Owns one token bucket per source (burst/rate from
 * `quarantine.*`), the pen's byte total (a cap that never evicts) and the count of pen
 * writes waiting on the writer; plus the admin operations on held entries (list, purge,
 * release by re-verification). The writer stores the entries (AK_WRITE_QUARANTINE);
 * this module never writes a hook itself. No I/O under a bucket lock.
 *
 * Edge usage (each source version holds its bucket, made by ak_pen_bucket_new):
 *   int64_t retry_ms;
 *   ak_pen_admit_t a = ak_pen_admit(pen, bucket, body_len, &retry_ms);
 *     AK_PEN_RATE_LIMITED -> 429 quarantine_rate_limited, Retry-After ceil(retry_ms/1000)
 *     AK_PEN_FULL         -> 503 quarantine_full, Retry-After 60 (retry_ms = 60000)
 *     AK_PEN_OVERLOAD     -> 503 overload (AK_PEN_MAX_WAITING writes already waiting)
 *   on AK_PEN_OK: submit req.kind = AK_WRITE_QUARANTINE, req.reason = <ak_verify_reason_t>
 *   through ak_writer_submit; once it is answered (or refused by submit):
 *   ak_pen_settle(pen, bucket, body_len, status == AK_WR_COMMITTED);
 *   committed -> 202 {"status":"quarantined","reason":...}; else the writer's status. */
#ifndef AK_QUEUE_QUARANTINE_H
#define AK_QUEUE_QUARANTINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "core/module.h"
#include "core/tenants.h"

struct ak_instance;
struct ak_store;
struct ak_audit_who;

typedef enum {
  AK_PEN_OK = 0,          /* token, bytes and a waiting slot reserved: settle exactly once */
  AK_PEN_RATE_LIMITED,    /* the source's bucket is empty; *retry_after_ms until a token */
  AK_PEN_FULL,            /* the pen would exceed quarantine.max_bytes; *retry_after_ms 60000 */
  AK_PEN_OVERLOAD,        /* AK_PEN_MAX_WAITING pen writes already waiting */
} ak_pen_admit_t;

#define AK_PEN_MAX_WAITING 1000
#define AK_PEN_FULL_RETRY_MS 60000

typedef struct ak_pen ak_pen_t;
typedef struct ak_pen_bucket ak_pen_bucket_t;

/* Build from inst->cfg (quarantine.burst/rate/max_bytes) with the byte total read from
 * the open store (sum of the per-writer m:quarantine_bytes:* keys) and register the
 * metrics. NULL on failure (store unreadable). Does not set inst->pen. */
ak_pen_t *ak_pen_new(struct ak_instance *inst);

/* The `quarantine` section and the pen's lifecycle (inst->pen). */
typedef struct ak_quarantine_cfg {
  int64_t burst;      /* tokens per source bucket */
  double rate;        /* tokens per second (> 0) */
  int64_t max_bytes;  /* body bytes the pen may hold */
} ak_quarantine_cfg_t;
extern const ak_module_t ak_mod_quarantine;
/* Bare pen (tests, tools): no metrics, no store. rate in tokens per second. */
ak_pen_t *ak_pen_new_raw(int64_t burst, double rate, int64_t max_bytes, int64_t bytes_now);
void ak_pen_free(ak_pen_t *pen);

/* One source's token bucket, full at creation. It does not point at the pen: it may
 * outlive it (a source version freed at shutdown). */
ak_pen_bucket_t *ak_pen_bucket_new(const ak_pen_t *pen);
void ak_pen_bucket_free(ak_pen_bucket_t *b);

/* Admission (thread-safe). retry_after_ms may be NULL. A NULL bucket counts as rate
 * limited with retry 1000. */
ak_pen_admit_t ak_pen_admit(ak_pen_t *pen, ak_pen_bucket_t *b, size_t body_len, int64_t *retry_after_ms);
/* Same, with an explicit monotonic clock (nanoseconds) for tests. */
ak_pen_admit_t ak_pen_admit_at(ak_pen_t *pen, ak_pen_bucket_t *b, size_t body_len, int64_t now_ns,
                               int64_t *retry_after_ms);
/* After the writer answered an admitted request: frees the waiting slot; when not
 * committed, refunds the token and the bytes. */
void ak_pen_settle(ak_pen_t *pen, ak_pen_bucket_t *b, size_t body_len, bool committed);

/* Current totals. */
int64_t ak_pen_bytes(const ak_pen_t *pen);
int64_t ak_pen_waiting(const ak_pen_t *pen);
/* Bytes left the pen (purge, release): the store's byte total was already decremented. */
void ak_pen_release_bytes(ak_pen_t *pen, int64_t bytes);

/* Sum of the m:quarantine_bytes:* keys of an open store. 0, or -1 when unreadable. */
int ak_pen_load_bytes(struct ak_store *st, int64_t *out);

/* Refresh the ankusa_quarantine_bytes / _pending gauges (also kept current on change). */
void ak_pen_sample(ak_pen_t *pen);

/* ------------------------------------------------------------ admin operations ---- */

/* Which held entries an operation touches. since/until: unix ms on received_at,
 * inclusive. */
typedef struct ak_pen_filter {
  const char *source_id;      /* NULL: any source */
  bool has_id;
  uint8_t id[16];
  int64_t since_ms;           /* INT64_MIN when absent */
  int64_t until_ms;           /* INT64_MAX when absent */
  int64_t limit;
  const ak_tenant_scope_t *tenants; /* NULL: every tenant; else only entries of these */
  const struct ak_audit_who *who;   /* purge and release: the audit row's actor */
} ak_pen_filter_t;

void ak_pen_filter_init(ak_pen_filter_t *f, int64_t limit);

/* One held entry, as listed. */
typedef struct ak_pen_entry {
  uint8_t id[16];
  int64_t received_at_ms;
  uint8_t reason;             /* ak_verify_reason_t */
  uint64_t size;              /* body bytes counted on the pen */
  char source_id[256];
  char tenant_id[256];
} ak_pen_entry_t;

/* Entries matching f, newest first (oldest first when oldest_first), at most f->limit.
 * *out malloc'd (free it), *n set. 0, or -1 when the store cannot be read. */
int ak_pen_list(struct ak_store *st, const ak_pen_filter_t *f, bool oldest_first, ak_pen_entry_t **out,
                size_t *n);

/* Delete the entries matching f (oldest first, at most f->limit): their 's' and 'b' keys,
 * the byte total (m:quarantine_bytes:admin) and the audit row (quarantine.purge, by
 * f->who) in ONE synced batch; nothing matching writes nothing. 0, or -1 when the store
 * or the audit trail is unavailable (nothing deleted). */
int ak_pen_purge(ak_pen_t *pen, struct ak_store *st, const ak_pen_filter_t *f, int64_t *deleted,
                 int64_t *bytes);

/* Re-verification of a held hook against its source's CURRENT version (its verifier),
 * env the held hook as received, now_s its received_at in seconds (the timestamp window
 * is judged at receive time). 0 (AK_VR_OK) when it passes. */
struct ak_envelope;
struct ak_source;
typedef int (*ak_pen_check_fn)(void *ctx, const struct ak_source *src, const struct ak_envelope *env,
                               int64_t now_s);

typedef struct ak_pen_release_result {
  int64_t scanned;            /* entries matching the filter */
  int64_t moved;              /* committed as hooks under their original id */
  int64_t skipped;            /* source gone, failed re-verification, duplicate id, refused */
} ak_pen_release_result_t;

/* Release (oldest first, at most f->limit): each entry whose source still exists (the
 * same source: not one re-created under its name after the entry was received) and
 * whose check returns 0 (AK_VR_OK) is committed through inst->writer as a hook with its
 * original id and received_at, in the same batch that deletes its pen rows and bytes.
 * Blocks until the writer answered. The writer's batches are not one batch, so the
 * audit row (quarantine.release) is a dual write: once at least one entry passes the
 * checks, a synced "pending" row naming them goes in before anything is submitted, and
 * it is settled "ok" (some moved) or "failed" (none) after; a kill in between leaves it
 * "interrupted". Nothing passing writes no row. 0, or -1 when the store cannot be read or
 * the pending row cannot be written (nothing released). */
int ak_pen_release(ak_pen_t *pen, struct ak_instance *inst, const ak_pen_filter_t *f, ak_pen_check_fn check,
                   void *check_ctx, ak_pen_release_result_t *out);

#endif
