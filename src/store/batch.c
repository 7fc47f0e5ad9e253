/* The write batch (batch.h): a thin skin over RocksDB's WriteBatch. Each op is one call
 * into RocksDB with the caller's own key and value pointers; nothing here allocates per op.
 * Never writes the batch (store.c does). */
#include <stdlib.h>
#include "store/internal.h"

ak_batch_t *ak_batch_new(ak_store_t *st) {
  ak_batch_t *b = malloc(sizeof *b);
  if (!b) return NULL;
  b->wb = rocksdb_writebatch_create();
  b->cf = ak_store_cf_handles(st);
  b->dropped = false;
  return b;
}

void ak_batch_free(ak_batch_t *b) {
  if (!b) return;
  rocksdb_writebatch_destroy(b->wb);
  free(b);
}

void ak_batch_clear(ak_batch_t *b) {
  rocksdb_writebatch_clear(b->wb);
  b->dropped = false;
}

void ak_batch_put(ak_batch_t *b, int cf, const void *k, size_t kl, const void *v, size_t vl) {
  rocksdb_column_family_handle_t *h = b->cf[cf];
  if (!h) {
    b->dropped = true;
    return;
  }
  rocksdb_writebatch_put_cf(b->wb, h, k, kl, v, vl);
}

void ak_batch_delete(ak_batch_t *b, int cf, const void *k, size_t kl) {
  rocksdb_column_family_handle_t *h = b->cf[cf];
  if (!h) {
    b->dropped = true;
    return;
  }
  rocksdb_writebatch_delete_cf(b->wb, h, k, kl);
}

size_t ak_batch_count(const ak_batch_t *b) { return (size_t)rocksdb_writebatch_count(b->wb); }
