/* The node's RocksDB store at <data_dir>/<instance>/store. Owns the handle, its column
 * families, open/close/reopen and classification of write failures. Never decides what
 * to write (the writer does) and never treats an unreadable store as empty. */
#ifndef AK_STORE_STORE_H
#define AK_STORE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/module.h"
#include "store/keys.h"

typedef enum {
  AK_WF_NO_SPACE = 0,
  AK_WF_IO_ERROR,
  AK_WF_READ_ONLY,
  AK_WF_CORRUPTION,
  AK_WF_BUSY,
  AK_WF_OTHER,
  AK_WF_COUNT
} ak_wf_class_t;
extern const char *const ak_wf_class_names[AK_WF_COUNT];

typedef struct ak_store ak_store_t;
/* A write batch (store/batch.h) and a cursor (below). */
typedef struct ak_batch ak_batch_t;
typedef struct ak_store_cursor ak_store_cursor_t;

/* path: the store directory itself. */
ak_store_t *ak_store_new(const char *path, bool read_only);

/* The store's lifecycle (inst->store): <node.data_dir>/<instance>/store, opened first and
 * closed last. */
extern const ak_module_t ak_mod_store;
/* "<data_dir>/<instance>/store" (malloc'd). */
char *ak_store_path_of(const char *data_dir, const char *instance);
void ak_store_free(ak_store_t *st);

/* Open (or reopen after close). 0, or -1 with *err (malloc'd, names the path). */
int ak_store_open(ak_store_t *st, char **err);

/* Call first in a thread that does most of its work in RocksDB (writer, dispatcher,
 * sweeper): turns off RocksDB's per-thread perf counters, which it keeps by default and
 * ankusa never reads (every key comparison bumps one through a thread-local lookup: 13 %
 * of the instructions of a commit, docs/performance.md). */
void ak_store_thread_init(void);
void ak_store_close(ak_store_t *st);
bool ak_store_is_open(ak_store_t *st);
const char *ak_store_path(const ak_store_t *st);
/* The archive found hooks up to seq - 1 (archive/compactor.c's boot reconcile, which wrote
 * m:next_seq:a synced): the next seq handed out is at least seq. Before the writer opens. */
void ak_store_raise_next_seq(ak_store_t *st, uint64_t seq);
double ak_store_last_open_seconds(const ak_store_t *st);

/* Values read at open. */
uint64_t ak_store_next_seq(const ak_store_t *st);
uint64_t ak_store_hook_count(const ak_store_t *st);
/* The 16-byte key that seals this store's hook ids (core/ids.h), or NULL (a read-only
 * open of a store that has none). Valid while the store object lives. */
const uint8_t *ak_store_id_key(const ak_store_t *st);
/* The stored hook with this id, found through its sealed seq or else the 'i' index:
 * 0 (*rec malloc'd, the encoded envelope; *seq set), 1 not found, -1 store unavailable. */
int ak_store_find_hook(ak_store_t *st, const uint8_t id[16], uint64_t *seq, char **rec, size_t *len);

/* Whether the open store has this column family (a read-only open of an older store may
 * lack one); false when closed. For a caller that holds a pin. */
bool ak_store_has_cf(ak_store_t *st, int cf);

/* Pin the open handle (shared lock) so it cannot be closed while a caller builds a batch
 * and writes it, or reads through a cursor. -1 (nothing held) when the store is closed. */
int ak_store_pin(ak_store_t *st);
void ak_store_unpin(ak_store_t *st);
/* ak_store_write for a caller that holds a pin. */
int ak_store_write_pinned(ak_store_t *st, ak_batch_t *b, bool sync, ak_wf_class_t *cls, char **err);

/* Write a batch, all of it or nothing (synced when sync). 0 on success; -1 unavailable
 * (closed, or an op of the batch met it closed) or failed, with *cls and *err. */
int ak_store_write(ak_store_t *st, ak_batch_t *b, bool sync, ak_wf_class_t *cls, char **err);

/* Rewrite every file of one column family (its memtable flushed first), so the versions of
 * its keys that were overwritten or deleted leave the disk (a row that held a secret in the
 * clear before it was sealed). Blocks until done; for boot and offline tools. 0, or -1
 * with *err (malloc'd). */
int ak_store_compact(ak_store_t *st, int cf, char **err);

/* A RocksDB checkpoint of the open store in dir (which must not exist yet): immutable
 * files (.sst, .blob) hard-linked, the rest (MANIFEST, OPTIONS, CURRENT, the live WAL up to
 * log_size_for_flush bytes, else the memtables are flushed first) copied. Writes go on
 * meanwhile. For backups (backup/backup.c). 0, or -1 with *err (malloc'd, names dir). */
int ak_store_checkpoint(ak_store_t *st, const char *dir, uint64_t log_size_for_flush, char **err);

/* Point read: 0 found (*val malloc'd), 1 not found, -1 unavailable or error. */
int ak_store_get(ak_store_t *st, int cf, const void *key, size_t klen, char **val, size_t *vlen);
/* The same for a caller that holds a pin (no second lock taken). */
int ak_store_get_pinned(ak_store_t *st, int cf, const void *key, size_t klen, char **val, size_t *vlen);
/* n point reads in one call, for a caller that holds a pin: rcs[i] as ak_store_get's
 * (vals[i] malloc'd when 0). RocksDB's batched MultiGet looks keys of one block up
 * together: half the cost of n single reads of neighbouring keys from an SST. Returns 0,
 * or -1 (every rcs[i] = -1) when the store is closed or memory ran out. */
int ak_store_multi_get_pinned(ak_store_t *st, int cf, size_t n, const char *const *keys, const size_t *klens,
                              char **vals, size_t *vlens, int *rcs);

/* Scan keys starting with prefix (plen may be 0) in order; cb returns nonzero to stop.
 * Returns 0, or -1 when the store is closed or the iterator reported an error (a scan
 * that fails is an error, never a short list). */
typedef int (*ak_store_scan_fn)(const char *k, size_t kl, const char *v, size_t vl, void *ctx);
int ak_store_scan(ak_store_t *st, int cf, const void *prefix, size_t plen, ak_store_scan_fn cb, void *ctx);
/* The same from a starting key: forward from the first key >= from, or (reverse) backward
 * from the last key <= from, while keys start with prefix. from NULL: the prefix's first
 * (forward) or last (reverse) key; a reverse scan without from takes prefixes of up to 64
 * bytes. */
int ak_store_scan_from(ak_store_t *st, int cf, const void *prefix, size_t plen, const void *from, size_t flen,
                       bool reverse, ak_store_scan_fn cb, void *ctx);

/* A cursor over one column family in key order, for a caller that holds a pin until
 * ak_store_cursor_free: seek, then read while valid. fill_cache false keeps the blocks it
 * reads out of the block cache (a pass over rows read once). Key and value point into the
 * cursor and stay valid until it moves. NULL when the store is closed or lacks the family. */
ak_store_cursor_t *ak_store_cursor_new_pinned(ak_store_t *st, int cf, bool fill_cache);
/* To the first key >= key. */
void ak_store_cursor_seek(ak_store_cursor_t *c, const void *key, size_t kl);
bool ak_store_cursor_valid(const ak_store_cursor_t *c);
void ak_store_cursor_next(ak_store_cursor_t *c);
const char *ak_store_cursor_key(const ak_store_cursor_t *c, size_t *kl);
const char *ak_store_cursor_value(const ak_store_cursor_t *c, size_t *vl);
/* 0, or -1 when the cursor stopped on an error rather than at the end of the family. */
int ak_store_cursor_status(const ak_store_cursor_t *c);
void ak_store_cursor_free(ak_store_cursor_t *c);

/* A synced write of m:ready_probe. */
int ak_store_probe(ak_store_t *st, ak_wf_class_t *cls, char **err);

ak_wf_class_t ak_store_classify(const char *rocksdb_err);

#endif
