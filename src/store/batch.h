/* A write batch: the puts and deletes one change is made of, written atomically (and,
 * when asked, synced) by ak_store_write. Every op goes straight into the store's own
 * batch representation: nothing is buffered or copied twice, so the writer's commit costs
 * what it did when it built RocksDB's batch itself. Never writes anything by itself and
 * never reads the store. */
#ifndef AK_STORE_BATCH_H
#define AK_STORE_BATCH_H

#include <stddef.h>
#include "store/store.h"

/* An empty batch for st's column families (AK_CF_*). NULL when memory ran out. A batch may
 * be made and kept while the store is closed; its ops need the store open, so build it
 * under a pin (ak_store_pin) or on the thread that opens and closes the store. An op that
 * meets a closed store is dropped, and ak_store_write then refuses the whole batch (never
 * a partial write). One thread at a time. */
ak_batch_t *ak_batch_new(ak_store_t *st);
void ak_batch_free(ak_batch_t *b);
/* Empty it for reuse (and forget a dropped op). */
void ak_batch_clear(ak_batch_t *b);

void ak_batch_put(ak_batch_t *b, int cf, const void *k, size_t kl, const void *v, size_t vl);
void ak_batch_delete(ak_batch_t *b, int cf, const void *k, size_t kl);
/* No range delete: with the store's memtable insert hints (store.c) Debian's RocksDB 7.8.3
 * aborts on a range tombstone (an assertion in the skiplist insert: the hint of a key
 * prefix is shared by the point and the range-deletion memtables). */

/* The ops in the batch. */
size_t ak_batch_count(const ak_batch_t *b);

#endif
