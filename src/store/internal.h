/* The store's RocksDB side, shared by the files of src/store/ and included nowhere else:
 * the one header with <rocksdb/c.h> (DESIGN §5), so no other folder depends on RocksDB's
 * API. Never hands a RocksDB handle out of src/store. */
#ifndef AK_STORE_INTERNAL_H
#define AK_STORE_INTERNAL_H

#include <rocksdb/c.h>
#include <stdbool.h>
#include "store/batch.h"
#include "store/store.h"

struct ak_batch {
  rocksdb_writebatch_t *wb;
  /* the store's handles, indexed by AK_CF_*: the array lives as long as the store, its
   * entries are NULL while it is closed and change at a reopen (a batch keeps only the
   * family's id, which a reopen keeps) */
  rocksdb_column_family_handle_t *const *cf;
  bool dropped; /* an op met a closed family: the batch is incomplete, never written */
};

/* The handle array above. */
rocksdb_column_family_handle_t *const *ak_store_cf_handles(ak_store_t *st);

#endif
