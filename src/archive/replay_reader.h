/* Archive replay reads (docs/storage.md, "Replay jobs"): the storage role's reader thread
 * that prepares, off the dispatch thread, the batches of archived hooks archive replay
 * jobs (dispatch/replay.c) move back into the store. Owns one cached segment and the
 * prepared batches; registers its fetch function into the replay jobs at open and takes it
 * back at stop. Never writes the store or a blob, and never decides what is replayed
 * (the job's filters and the move are replay.c's). */
#ifndef AK_ARCHIVE_REPLAY_READER_H
#define AK_ARCHIVE_REPLAY_READER_H

#include <stddef.h>
#include <stdint.h>
#include "blob/blob.h"
#include "core/module.h"
#include "dispatch/replay.h"
#include "store/store.h"

typedef struct ak_areader ak_areader_t;

#define AK_AREADER_BATCH_BYTES (4u << 20) /* record bytes in one prepared batch, at most (one hook more) */
#define AK_AREADER_ROWS_PER_REQUEST 4096  /* catalogue rows passed over per request, at most */

/* A reader over the store's catalogue and the blob handle its keys are read through. */
ak_areader_t *ak_areader_new(ak_store_t *st, ak_blob_t *blob);
int ak_areader_start(ak_areader_t *a);
void ak_areader_stop(ak_areader_t *a);
void ak_areader_free(ak_areader_t *a);
/* ak_replay_fetch_fn (dispatch/replay.h), ctx the reader. Any thread; never blocks on I/O. */
int ak_areader_fetch(void *ctx, const uint8_t job[16], uint64_t after_seq, int64_t from_ms, int64_t to_ms,
                     size_t max, ak_replay_abatch_t *out);
/* One request worked in the calling thread (what the thread does; for tests): 0, or -1
 * when the store or the blob store could not be read (retry later). */
int ak_areader_read(ak_areader_t *a, uint64_t after_seq, int64_t from_ms, int64_t to_ms, size_t max,
                    ak_replay_abatch_t *out);

/* The module row (storage role, after the compactor): the reader and its thread. */
extern const ak_module_t ak_mod_archive_replay;

#endif
