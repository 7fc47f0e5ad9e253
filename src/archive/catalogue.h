/* The archive catalogue (docs/storage.md, "The archive"): one row per segment in the
 * store's archive column family, and the reads that go through it: an archived hook by id,
 * the segments of a seq or time range. Owns the row format and those reads; never writes a
 * blob and never decides what to archive (archive/compactor.c does).
 *
 * Row: 'S' first_seq:64 -> u8 version=1 | u64 last_seq | u32 count | u64 seg_bytes |
 *   u64 idx_bytes | i64 min_received_at_ms | i64 max_received_at_ms | id min[16] |
 *   id max[16] | i64 archived_at_ms | str16 segment key | str16 index key
 * Keys are stored in full (storage.key_prefix included), so changing the prefix strands
 * nothing already catalogued. */
#ifndef AK_ARCHIVE_CATALOGUE_H
#define AK_ARCHIVE_CATALOGUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "archive/segment.h"
#include "blob/blob.h"
#include "store/batch.h"
#include "store/store.h"

#define AK_CAT_KEY_LEN 9

typedef struct ak_cat_row {
  uint64_t first_seq, last_seq;
  uint32_t count;
  uint64_t seg_bytes, idx_bytes;
  int64_t min_received_ms, max_received_ms;
  uint8_t min_id[16], max_id[16];
  int64_t archived_at_ms;
  char seg_key[AK_BLOB_KEY_MAX + 1];
  char idx_key[AK_BLOB_KEY_MAX + 1];
} ak_cat_row_t;

void ak_cat_key(uint8_t out[AK_CAT_KEY_LEN], uint64_t first_seq);
/* Bytes written, or 0 when it does not fit. */
size_t ak_cat_encode(uint8_t *out, size_t cap, const ak_cat_row_t *r);
/* 0, or -1 when the value (with its key) is not a row of this format. */
int ak_cat_decode(const uint8_t *k, size_t kl, const uint8_t *v, size_t vl, ak_cat_row_t *r);
/* Puts the row into b (a caller holding a pin). */
void ak_cat_put(ak_batch_t *b, const ak_cat_row_t *r);

/* Every row, in seq order, from the row holding or following from_seq; fn returning
 * nonzero stops. 0, or -1 when the store cannot be read or a row is damaged. */
typedef int (*ak_cat_fn)(void *ctx, const ak_cat_row_t *r);
int ak_cat_scan(ak_store_t *st, uint64_t from_seq, ak_cat_fn fn, void *ctx);
/* The row whose range holds seq: 0 found, 1 none, -1 error. */
int ak_cat_find_seq(ak_store_t *st, uint64_t seq, ak_cat_row_t *r);
/* The newest row: 0, 1 none, -1 error. */
int ak_cat_last(ak_store_t *st, ak_cat_row_t *r);

enum {
  AK_ARCHIVE_FOUND = 0,
  AK_ARCHIVE_NOT_FOUND = 1,
  AK_ARCHIVE_EXPIRED = 2,  /* retention deleted it (archive.retention_days) */
  AK_ARCHIVE_ERROR = -1,   /* the store or the blob store could not be read, or an object is damaged */
};

/* An archived hook by id: its stored record (malloc'd) and seq. blob is the store's
 * unscoped handle (catalogued keys are full keys). retention_ms 0: retention off. err
 * says what failed (secret-free). */
int ak_archive_fetch(ak_store_t *st, ak_blob_t *blob, const uint8_t id[16], int64_t retention_ms, int64_t now_ms,
                     uint8_t **rec, size_t *len, uint64_t *seq, char *err, size_t errlen);

/* One segment's index, read and parsed (*buf owns the bytes ix points into). */
int ak_archive_read_index(ak_blob_t *blob, const ak_cat_row_t *r, uint8_t **buf, ak_seg_index_t *ix, char *err,
                          size_t errlen);

#endif
