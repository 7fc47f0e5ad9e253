/* The quarantine pen: admission control for hooks that failed verification on a source
 * with `on_verify_failure: quarantine`. Owns one token bucket per source (burst/rate from
 * `quarantine.*`), the pen's byte total (a cap that never evicts) and the count of pen
 * writes waiting on the writer; plus the admin operations on held entries (list, purge,
 * release by re-verification). The writer stores the entries (AK_WRITE_QUARANTINE);
 * this module never writes a hook itself. No I/O under a bucket lock.
 *
 * Edge usage:
 *   int64_t retry_ms;
 *   ak_pen_admit_t a = ak_pen_admit(pen, source_index, body_len, &retry_ms);
 *     AK_PEN_RATE_LIMITED -> 429 quarantine_rate_limited, Retry-After ceil(retry_ms/1000)
 *     AK_PEN_FULL         -> 503 quarantine_full, Retry-After 60 (retry_ms = 60000)
 *     AK_PEN_OVERLOAD     -> 503 overload (AK_PEN_MAX_WAITING writes already waiting)
 *   on AK_PEN_OK: submit req.kind = AK_WRITE_QUARANTINE, req.reason = <ak_verify_reason_t>
 *   through ak_writer_submit; once it is answered (or refused by submit):
 *   ak_pen_settle(pen, source_index, body_len, status == AK_WR_COMMITTED);
 *   committed -> 202 {"status":"quarantined","reason":...}; else the writer's status. */
#ifndef AK_QUEUE_QUARANTINE_H
#define AK_QUEUE_QUARANTINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ak_instance;
struct ak_store;

typedef enum {
  AK_PEN_OK = 0,          /* token, bytes and a waiting slot reserved: settle exactly once */
  AK_PEN_RATE_LIMITED,    /* the source's bucket is empty; *retry_after_ms until a token */
  AK_PEN_FULL,            /* the pen would exceed quarantine.max_bytes; *retry_after_ms 60000 */
  AK_PEN_OVERLOAD,        /* AK_PEN_MAX_WAITING pen writes already waiting */
} ak_pen_admit_t;

#define AK_PEN_MAX_WAITING 1000
#define AK_PEN_FULL_RETRY_MS 60000

typedef struct ak_pen ak_pen_t;

/* Build from inst->cfg (quarantine.burst/rate/max_bytes, nsources buckets, full at
 * creation) with the byte total read from the open store (sum of the per-writer
 * m:quarantine_bytes:* keys) and register the metrics. NULL on failure (store
 * unreadable). Does not set inst->pen. */
ak_pen_t *ak_pen_new(struct ak_instance *inst);
/* Bare pen (tests, tools): no metrics, no store. rate in tokens per second. */
ak_pen_t *ak_pen_new_raw(size_t nsources, int64_t burst, double rate, int64_t max_bytes,
                         int64_t bytes_now);
void ak_pen_free(ak_pen_t *pen);

/* Admission (thread-safe). retry_after_ms may be NULL. Unknown source_index counts as
 * rate limited with retry 1000. */
ak_pen_admit_t ak_pen_admit(ak_pen_t *pen, size_t source_index, size_t body_len,
                            int64_t *retry_after_ms);
/* Same, with an explicit monotonic clock (nanoseconds) for tests. */
ak_pen_admit_t ak_pen_admit_at(ak_pen_t *pen, size_t source_index, size_t body_len,
                               int64_t now_ns, int64_t *retry_after_ms);
/* After the writer answered an admitted request: frees the waiting slot; when not
 * committed, refunds the token and the bytes. */
void ak_pen_settle(ak_pen_t *pen, size_t source_index, size_t body_len, bool committed);

/* Current totals. */
int64_t ak_pen_bytes(const ak_pen_t *pen);
int64_t ak_pen_waiting(const ak_pen_t *pen);
/* Bytes left the pen (purge, release): the store's byte total was already decremented. */
void ak_pen_release_bytes(ak_pen_t *pen, int64_t bytes);

/* Sum of the m:quarantine_bytes:* keys of an open store. 0, or -1 when unreadable. */
int ak_pen_load_bytes(struct ak_store *st, int64_t *out);

#endif
