/* RocksDB wrapper. A rwlock guards the handle's lifetime only: reads and writes share
 * it, close/reopen takes it exclusively. Opening refuses damaged stores and a directory
 * that holds data files without CURRENT (never "starts empty" over lost data). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/clock.h"
#include "core/envelope.h"
#include "core/fsutil.h"
#include "core/ids.h"
#include "core/instance.h"
#include "core/log.h"
#include "core/node.h"
#include "store/crc32c.h"
#include "store/internal.h"

const char *const ak_wf_class_names[AK_WF_COUNT] = {"no_space", "io_error", "read_only",
                                                     "corruption", "busy", "other"};

struct ak_store {
  char *path;
  bool read_only;
  pthread_rwlock_t lock;
  rocksdb_t *db;
  rocksdb_options_t *opts;
  rocksdb_options_t *cf_opts[AK_CF_COUNT];
  rocksdb_block_based_table_options_t *table_opts; /* shared by every column family */
  rocksdb_cache_t *block_cache;
  rocksdb_column_family_handle_t *cf[AK_CF_COUNT];
  rocksdb_writeoptions_t *wsync, *wnosync;
  rocksdb_readoptions_t *ropts;
  rocksdb_readoptions_t *ropts_nofill; /* cursors of one-pass scans */
  uint64_t next_seq, hook_count;
  double open_seconds;
  uint8_t id_key[AK_ID_KEY_LEN_BYTES]; /* seals hook ids (core/ids.h); fixed once read */
  bool has_id_key;
};

ak_store_t *ak_store_new(const char *path, bool read_only) {
  ak_store_t *st = calloc(1, sizeof *st);
  if (!st) return NULL;
  st->path = strdup(path);
  st->read_only = read_only;
  pthread_rwlock_init(&st->lock, NULL);
  st->wsync = rocksdb_writeoptions_create();
  rocksdb_writeoptions_set_sync(st->wsync, 1);
  st->wnosync = rocksdb_writeoptions_create();
  st->ropts = rocksdb_readoptions_create();
  rocksdb_readoptions_set_verify_checksums(st->ropts, 1);
  st->ropts_nofill = rocksdb_readoptions_create();
  rocksdb_readoptions_set_verify_checksums(st->ropts_nofill, 1);
  rocksdb_readoptions_set_fill_cache(st->ropts_nofill, 0);
  return st;
}

static void destroy_options(ak_store_t *st) {
  for (int i = 0; i < AK_CF_COUNT; i++)
    if (st->cf_opts[i]) {
      rocksdb_options_destroy(st->cf_opts[i]);
      st->cf_opts[i] = NULL;
    }
  if (st->opts) {
    rocksdb_options_destroy(st->opts);
    st->opts = NULL;
  }
  if (st->table_opts) {
    rocksdb_block_based_options_destroy(st->table_opts);
    st->table_opts = NULL;
  }
  if (st->block_cache) {
    rocksdb_cache_destroy(st->block_cache);
    st->block_cache = NULL;
  }
}

static void close_locked(ak_store_t *st) {
  if (!st->db) return;
  for (int i = 0; i < AK_CF_COUNT; i++)
    if (st->cf[i]) {
      rocksdb_column_family_handle_destroy(st->cf[i]);
      st->cf[i] = NULL;
    }
  rocksdb_close(st->db);
  st->db = NULL;
  destroy_options(st);
}

void ak_store_free(ak_store_t *st) {
  if (!st) return;
  pthread_rwlock_wrlock(&st->lock);
  close_locked(st);
  pthread_rwlock_unlock(&st->lock);
  rocksdb_writeoptions_destroy(st->wsync);
  rocksdb_writeoptions_destroy(st->wnosync);
  rocksdb_readoptions_destroy(st->ropts);
  rocksdb_readoptions_destroy(st->ropts_nofill);
  pthread_rwlock_destroy(&st->lock);
  free(st->path);
  free(st);
}

static char *fmt_err(const char *fmt, const char *a, const char *b) {
  size_t n = strlen(fmt) + strlen(a) + (b ? strlen(b) : 0) + 1;
  char *e = malloc(n);
  snprintf(e, n, fmt, a, b ? b : "");
  return e;
}

/* Data files with no CURRENT means a store whose pointer file was lost: opening would
 * create an empty database on top of it. */
static int check_orphan_files(const char *path, char **err) {
  DIR *d = opendir(path);
  if (!d) return 0;
  bool has_current = false, has_data = false;
  char first[256] = "";
  struct dirent *de;
  while ((de = readdir(d))) {
    const char *n = de->d_name;
    size_t l = strlen(n);
    if (strcmp(n, "CURRENT") == 0) has_current = true;
    else if (strncmp(n, "MANIFEST-", 9) == 0 || (l > 4 && strcmp(n + l - 4, ".sst") == 0) ||
             (l > 4 && strcmp(n + l - 4, ".log") == 0) || (l > 5 && strcmp(n + l - 5, ".blob") == 0)) {
      if (!has_data) snprintf(first, sizeof first, "%s", n);
      has_data = true;
    }
  }
  closedir(d);
  if (has_data && !has_current) {
    *err = fmt_err("store at %s holds data files (%s) but no CURRENT file; refusing to start "
                   "empty over them (restore CURRENT or move the directory away)",
                   path, first);
    return -1;
  }
  return 0;
}

/* Memtable insert hints, one per first key byte (the key family: 'a', 'd', 'i'... in the
 * index family; the seq's top byte elsewhere). An insert without a hint searches the
 * skiplist from its top level whenever the key is not right after the previous insert,
 * which is every outcome tombstone the dispatcher writes: the tombstone of a row sorts
 * just before the row's own entry, so the next row's is never "right after". With a hint
 * RocksDB fixes only the levels that stopped bracketing the key: about half the key
 * comparisons and instructions per tombstone, commits' own inserts unchanged
 * (docs/storage.md, "Memtable insert hints"). The option has no C setter; the
 * options-string form is RocksDB's own. */
#define AK_MEMTABLE_HINT_OPTION "memtable_insert_with_hint_prefix_extractor=fixed:1"

/* The bounds of the store's memory outside its memtables (see build_options). */
#define AK_STORE_BLOCK_CACHE_BYTES (64ull << 20)
#define AK_STORE_MAX_OPEN_FILES 512

static rocksdb_options_t *base_options(void) {
  rocksdb_options_t *o = rocksdb_options_create();
  rocksdb_options_t *h = rocksdb_options_create();
  char *e = NULL;
  rocksdb_get_options_from_string(o, AK_MEMTABLE_HINT_OPTION, h, &e);
  if (e) {
    /* not expected from any RocksDB that has the option; without it only speed changes */
    ak_log(AK_LOG_WARNING, "store", "memtable insert hints unavailable", "error=%s", e);
    free(e);
    rocksdb_options_destroy(h);
    return o;
  }
  rocksdb_options_destroy(o);
  return h;
}

static void build_options(ak_store_t *st) {
  st->opts = base_options();
  rocksdb_options_set_create_if_missing(st->opts, !st->read_only);
  rocksdb_options_set_create_missing_column_families(st->opts, !st->read_only);
  rocksdb_options_set_paranoid_checks(st->opts, 1);
  /* 0 = kTolerateCorruptedTailRecords: a torn last write (never acked) is dropped;
   * damage anywhere before it fails the open. */
  rocksdb_options_set_wal_recovery_mode(st->opts, 0);
  /* the WAL a crash (or a stop: close does not flush) replays at the next open: past it, the
   * column families holding the oldest WAL file are flushed. The small ones (meta, index)
   * barely fill a memtable, so without a bound every WAL file would stay until this many
   * bytes (a 512 MiB bound took 0.76 s to replay here). */
  rocksdb_options_set_max_total_wal_size(st->opts, 128ull << 20);
  rocksdb_options_set_db_write_buffer_size(st->opts, 256ull << 20);
  rocksdb_options_set_keep_log_file_num(st->opts, 3);
  rocksdb_options_set_info_log_level(st->opts, 2); /* warn */
  rocksdb_options_increase_parallelism(st->opts, 2);
  /* writer threads overlap: one group's memtable inserts run while the next group's WAL
   * write and fsync proceed (measured 1.4x synced hooks/s with two writers here) */
  rocksdb_options_set_enable_pipelined_write(st->opts, 1);
  /* the dedupe CF's vector memtable takes one inserter at a time (RocksDB refuses to open
   * otherwise); with one writer thread (the default) nothing runs concurrently anyway */
  rocksdb_options_set_allow_concurrent_memtable_write(st->opts, 0);
  /* Memory and open files that do not grow with the store. By default every table file
   * stays open and keeps its index block in the reader's own memory, and each column
   * family gets its own block cache: RSS and descriptors then grow with the number of
   * files, which until the archive compactor lands grows without bound. Index (and
   * filter) blocks go into one shared LRU cache instead, L0's pinned (they are read on
   * every lookup), and at most AK_STORE_MAX_OPEN_FILES table files stay open. */
  st->block_cache = rocksdb_cache_create_lru(AK_STORE_BLOCK_CACHE_BYTES);
  st->table_opts = rocksdb_block_based_options_create();
  rocksdb_block_based_options_set_block_cache(st->table_opts, st->block_cache);
  rocksdb_block_based_options_set_cache_index_and_filter_blocks(st->table_opts, 1);
  rocksdb_block_based_options_set_pin_l0_filter_and_index_blocks_in_cache(st->table_opts, 1);
  rocksdb_options_set_block_based_table_factory(st->opts, st->table_opts);
  rocksdb_options_set_max_open_files(st->opts, AK_STORE_MAX_OPEN_FILES);
  for (int i = 0; i < AK_CF_COUNT; i++) {
    rocksdb_options_t *o = rocksdb_options_create_copy(st->opts);
    if (i == AK_CF_HOOKS) {
      rocksdb_options_set_write_buffer_size(o, 64ull << 20);
      rocksdb_options_set_compression(o, rocksdb_lz4_compression);
      rocksdb_options_set_enable_blob_files(o, 1);
      rocksdb_options_set_min_blob_size(o, 4096);
    } else if (i == AK_CF_DELIVERIES || i == AK_CF_INDEX) {
      rocksdb_options_set_write_buffer_size(o, 16ull << 20);
    } else if (i == AK_CF_DEDUPE) {
      /* dedupe keys are only appended in the commit and read back by scans (the index
       * lives in memory): an unsorted vector memtable makes the insert an append instead
       * of a skiplist search, and sorts once per flush or sweep */
      rocksdb_options_set_memtable_vector_rep(o);
      rocksdb_options_set_write_buffer_size(o, 16ull << 20);
    } else {
      rocksdb_options_set_write_buffer_size(o, 4ull << 20);
    }
    st->cf_opts[i] = o;
  }
}

/* Each writer thread keeps its own seq marker and hook counter (m:next_seq:<w>,
 * m:hook_count:<w>) so concurrent commits never overwrite each other's values: the next
 * seq is the largest marker, the hook count the sum of the counters. */
static int read_meta(ak_store_t *st, char **err) {
  st->next_seq = 0;
  st->hook_count = 0;
  rocksdb_iterator_t *it = rocksdb_create_iterator_cf(st->db, st->ropts, st->cf[AK_CF_DEFAULT]);
  int rc = 0;
  for (rocksdb_iter_seek(it, "m:", 2); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
    size_t kl, vl;
    const char *k = rocksdb_iter_key(it, &kl);
    if (kl < 2 || memcmp(k, "m:", 2) != 0) break;
    bool is_seq = kl >= strlen(AK_KEY_NEXT_SEQ) && memcmp(k, AK_KEY_NEXT_SEQ, strlen(AK_KEY_NEXT_SEQ)) == 0;
    bool is_count = kl >= strlen(AK_KEY_HOOK_COUNT) && memcmp(k, AK_KEY_HOOK_COUNT, strlen(AK_KEY_HOOK_COUNT)) == 0;
    if (!is_seq && !is_count) continue;
    const char *v = rocksdb_iter_value(it, &vl);
    if (vl != 8) {
      *err = fmt_err("store at %s: meta key %s is damaged (wrong length)", st->path, is_seq ? "next_seq" : "hook_count");
      rc = -1;
      break;
    }
    uint64_t x = ak_get_u64((const uint8_t *)v);
    if (is_seq && x > st->next_seq) st->next_seq = x;
    if (is_count) st->hook_count += x;
  }
  char *e = NULL;
  rocksdb_iter_get_error(it, &e);
  if (e && rc == 0) {
    *err = fmt_err("store at %s: reading meta keys failed: %s", st->path, e);
    rc = -1;
  }
  free(e);
  rocksdb_iter_destroy(it);
  return rc;
}

/* The key that seals hook ids (m:id_key, 16 random bytes): made, synced, the first time
 * a store opens writable without one (new, or written before ids were sealed). It never
 * changes: a reopen that reads another one refuses the store. A read-only open of a
 * store without one has none (lookups then use the 'i' index alone). */
static int read_id_key(ak_store_t *st, char **err) {
  char *e = NULL;
  size_t vl = 0;
  char *v = rocksdb_get_cf(st->db, st->ropts, st->cf[AK_CF_DEFAULT], AK_KEY_ID_SEAL, strlen(AK_KEY_ID_SEAL), &vl, &e);
  if (e) {
    *err = fmt_err("store at %s: reading meta key id_key failed: %s", st->path, e);
    free(e);
    return -1;
  }
  uint8_t key[AK_ID_KEY_LEN_BYTES];
  if (v) {
    bool ok = vl == sizeof key;
    if (ok) memcpy(key, v, sizeof key);
    free(v);
    if (!ok) {
      *err = fmt_err("store at %s: meta key %s is damaged (wrong length)", st->path, "id_key");
      return -1;
    }
  } else {
    if (st->read_only) return 0;
    if (RAND_bytes(key, sizeof key) != 1) {
      *err = fmt_err("store at %s: no random bytes for the id key%s", st->path, NULL);
      return -1;
    }
    rocksdb_put_cf(st->db, st->wsync, st->cf[AK_CF_DEFAULT], AK_KEY_ID_SEAL, strlen(AK_KEY_ID_SEAL),
                   (const char *)key, sizeof key, &e);
    if (e) {
      *err = fmt_err("store at %s: writing meta key id_key failed: %s", st->path, e);
      free(e);
      return -1;
    }
  }
  if (st->has_id_key && memcmp(st->id_key, key, sizeof key) != 0) {
    *err = fmt_err("store at %s: meta key id_key changed while the node ran; refusing the store%s", st->path, NULL);
    return -1;
  }
  if (!st->has_id_key) memcpy(st->id_key, key, sizeof key);
  st->has_id_key = true;
  return 0;
}

/* The layout version (m:format, keys.h). A store without one was written with a delivery
 * row and a due key per delivery (format 1): those rows stay valid as the exception rows
 * of format 2, so the migration only drops the archive obligations ('a' keys, replaced by
 * the compactor's cursor) in unsynced chunks, then writes, synced, the hook log's low mark
 * and reclaim mark past every hook stored before (their deliveries are all in rows) and
 * the format. A kill during it leaves no format: the next open does it again from where
 * it was. A new store just gets the format. A format from a later ankusa is refused. */
static int check_format(ak_store_t *st, char **err) {
  char *e = NULL;
  size_t vl = 0;
  char *v = rocksdb_get_cf(st->db, st->ropts, st->cf[AK_CF_DEFAULT], AK_KEY_FORMAT, strlen(AK_KEY_FORMAT), &vl, &e);
  if (e) {
    *err = fmt_err("store at %s: reading meta key format failed: %s", st->path, e);
    free(e);
    return -1;
  }
  if (v) {
    bool ok = vl == 4;
    uint32_t f = ok ? ak_get_u32((const uint8_t *)v) : 0;
    free(v);
    if (!ok) {
      *err = fmt_err("store at %s: meta key %s is damaged (wrong length)", st->path, "format");
      return -1;
    }
    if (f > AK_STORE_FORMAT) {
      *err = fmt_err("store at %s: written by a later ankusa (layout %s); refusing it", st->path,
                     f == 3 ? "3" : "newer than 2");
      return -1;
    }
    if (f == AK_STORE_FORMAT) return 0;
  }
  if (st->read_only) return 0;
  uint64_t moved = 0;
  if (st->next_seq > 0) { /* hooks were stored under format 1 */
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(st->db, st->ropts, st->cf[AK_CF_INDEX]);
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    const char a = AK_IDX_ARCHIVE;
    for (rocksdb_iter_seek(it, &a, 1); rocksdb_iter_valid(it) && !e; rocksdb_iter_next(it)) {
      size_t kl;
      const char *k = rocksdb_iter_key(it, &kl);
      if (!kl || k[0] != AK_IDX_ARCHIVE) break;
      rocksdb_writebatch_delete_cf(wb, st->cf[AK_CF_INDEX], k, kl);
      if (++moved % 10000 == 0) {
        rocksdb_write(st->db, st->wnosync, wb, &e);
        rocksdb_writebatch_clear(wb);
      }
    }
    if (!e) rocksdb_iter_get_error(it, &e);
    if (!e) rocksdb_write(st->db, st->wnosync, wb, &e);
    rocksdb_writebatch_destroy(wb);
    rocksdb_iter_destroy(it);
    if (e) {
      *err = fmt_err("store at %s: migrating to layout 2 failed: %s", st->path, e);
      free(e);
      return -1;
    }
  }
  rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
  uint8_t f[4], low[8];
  ak_put_u32(f, AK_STORE_FORMAT);
  ak_put_u64(low, st->next_seq);
  if (st->next_seq > 0) {
    rocksdb_writebatch_put_cf(wb, st->cf[AK_CF_DEFAULT], AK_KEY_DISPATCH_LOW, strlen(AK_KEY_DISPATCH_LOW),
                              (const char *)low, 8);
    rocksdb_writebatch_put_cf(wb, st->cf[AK_CF_DEFAULT], AK_KEY_RECLAIMED, strlen(AK_KEY_RECLAIMED),
                              (const char *)low, 8);
  }
  rocksdb_writebatch_put_cf(wb, st->cf[AK_CF_DEFAULT], AK_KEY_FORMAT, strlen(AK_KEY_FORMAT), (const char *)f, 4);
  rocksdb_write(st->db, st->wsync, wb, &e);
  rocksdb_writebatch_destroy(wb);
  if (e) {
    *err = fmt_err("store at %s: writing the layout version failed: %s", st->path, e);
    free(e);
    return -1;
  }
  if (st->next_seq > 0) {
    char n[32];
    snprintf(n, sizeof n, "%llu", (unsigned long long)moved);
    ak_log(AK_LOG_INFO, "store", "store migrated to layout 2", "path=%s archive_obligations_dropped=%s", st->path, n);
  }
  return 0;
}

void ak_store_thread_init(void) { rocksdb_set_perf_level(rocksdb_disable); }

int ak_store_open(ak_store_t *st, char **err) {
  pthread_rwlock_wrlock(&st->lock);
  close_locked(st);
  int64_t t0 = ak_mono_ns();
  if (!st->read_only && ak_mkdirs_durable(st->path, 0750) != 0) {
    *err = fmt_err("cannot create store directory %s: %s", st->path, strerror(errno));
    pthread_rwlock_unlock(&st->lock);
    return -1;
  }
  if (check_orphan_files(st->path, err) != 0) {
    pthread_rwlock_unlock(&st->lock);
    return -1;
  }
  build_options(st);
  ak_log(AK_LOG_DEBUG, "store", "opening", "path=%s crc32c=%s", st->path, ak_crc32c_impl());
  char *e = NULL;
  if (st->read_only) {
    /* open only the families that exist; a store that predates one is still readable */
    size_t n = 0;
    char **names = rocksdb_list_column_families(st->opts, st->path, &n, &e);
    if (e) {
      if (names) rocksdb_list_column_families_destroy(names, n);
      *err = fmt_err("cannot open store at %s: %s", st->path, e);
      free(e);
      destroy_options(st);
      pthread_rwlock_unlock(&st->lock);
      return -1;
    }
    const char *want[AK_CF_COUNT];
    const rocksdb_options_t *wopts[AK_CF_COUNT];
    int idx[AK_CF_COUNT], nw = 0;
    for (int i = 0; i < AK_CF_COUNT; i++)
      for (size_t j = 0; j < n; j++)
        if (strcmp(names[j], ak_cf_names[i]) == 0) {
          want[nw] = ak_cf_names[i];
          wopts[nw] = st->cf_opts[i];
          idx[nw++] = i;
        }
    rocksdb_list_column_families_destroy(names, n);
    rocksdb_column_family_handle_t *h[AK_CF_COUNT] = {0};
    st->db = rocksdb_open_for_read_only_column_families(st->opts, st->path, nw, want, wopts, h, 0, &e);
    for (int i = 0; i < nw && st->db; i++) st->cf[idx[i]] = h[i];
  } else {
    st->db = rocksdb_open_column_families(st->opts, st->path, AK_CF_COUNT, (const char *const *)ak_cf_names,
                                          (const rocksdb_options_t *const *)st->cf_opts, st->cf, &e);
  }
  if (e || !st->db) {
    *err = fmt_err("cannot open store at %s: %s", st->path, e ? e : "unknown error");
    free(e);
    st->db = NULL;
    destroy_options(st);
    pthread_rwlock_unlock(&st->lock);
    return -1;
  }
  if (st->cf[AK_CF_DEFAULT] && (read_meta(st, err) != 0 || read_id_key(st, err) != 0 ||
                                (st->cf[AK_CF_INDEX] && check_format(st, err) != 0))) {
    close_locked(st);
    pthread_rwlock_unlock(&st->lock);
    return -1;
  }
  if (st->next_seq == 0) st->next_seq = 1;
  st->open_seconds = (double)(ak_mono_ns() - t0) / 1e9;
  pthread_rwlock_unlock(&st->lock);
  return 0;
}

void ak_store_close(ak_store_t *st) {
  pthread_rwlock_wrlock(&st->lock);
  close_locked(st);
  pthread_rwlock_unlock(&st->lock);
}

bool ak_store_is_open(ak_store_t *st) {
  pthread_rwlock_rdlock(&st->lock);
  bool o = st->db != NULL;
  pthread_rwlock_unlock(&st->lock);
  return o;
}

const char *ak_store_path(const ak_store_t *st) { return st->path; }
double ak_store_last_open_seconds(const ak_store_t *st) { return st->open_seconds; }
uint64_t ak_store_next_seq(const ak_store_t *st) { return st->next_seq; }
void ak_store_raise_next_seq(ak_store_t *st, uint64_t seq) {
  if (seq > st->next_seq) st->next_seq = seq;
}
uint64_t ak_store_hook_count(const ak_store_t *st) { return st->hook_count; }
const uint8_t *ak_store_id_key(const ak_store_t *st) { return st->has_id_key ? st->id_key : NULL; }

/* A sealed id names its seq; the record read there must carry the very id (any UUID
 * unseals to some seq). Else, or without a key: the 'i' index, which holds the ids of
 * hooks stored before ids were sealed and of hooks released from the quarantine pen. */
int ak_store_find_hook(ak_store_t *st, const uint8_t id[16], uint64_t *seq, char **rec, size_t *len) {
  uint8_t hk[AK_HOOK_KEY_LEN];
  *rec = NULL;
  *len = 0;
  const uint8_t *key = ak_store_id_key(st);
  if (key) {
    uint64_t s = ak_uuid7_unseal(key, id);
    ak_key_hook(hk, s);
    int rc = ak_store_get(st, AK_CF_HOOKS, hk, sizeof hk, rec, len);
    if (rc < 0) return -1;
    if (rc == 0 && *len >= AK_ENV_ID_OFFSET + 16 && memcmp(*rec + AK_ENV_ID_OFFSET, id, 16) == 0) {
      *seq = s;
      return 0;
    }
    free(*rec);
    *rec = NULL;
    *len = 0;
  }
  uint8_t ik[AK_ID_KEY_LEN];
  ak_key_id(ik, id);
  char *v = NULL;
  size_t vl = 0;
  int rc = ak_store_get(st, AK_CF_INDEX, ik, sizeof ik, &v, &vl);
  if (rc < 0) return -1;
  if (rc == 1 || vl != 8) {
    free(v);
    return 1;
  }
  uint64_t s = ak_get_u64((const uint8_t *)v);
  free(v);
  ak_key_hook(hk, s);
  rc = ak_store_get(st, AK_CF_HOOKS, hk, sizeof hk, rec, len);
  if (rc != 0) return rc;
  *seq = s;
  return 0;
}
rocksdb_column_family_handle_t *const *ak_store_cf_handles(ak_store_t *st) { return st->cf; }
bool ak_store_has_cf(ak_store_t *st, int cf) { return st->cf[cf] != NULL; }

ak_wf_class_t ak_store_classify(const char *e) {
  if (!e) return AK_WF_OTHER;
  if (strstr(e, "No space left") || strstr(e, "NoSpace") || strstr(e, "ENOSPC")) return AK_WF_NO_SPACE;
  if (strstr(e, "Corruption")) return AK_WF_CORRUPTION;
  if (strstr(e, "read only") || strstr(e, "Read-only") || strstr(e, "read-only"))
    return AK_WF_READ_ONLY;
  if (strstr(e, "Busy") || strstr(e, "TryAgain")) return AK_WF_BUSY;
  if (strstr(e, "IO error")) return AK_WF_IO_ERROR;
  return AK_WF_OTHER;
}

int ak_store_pin(ak_store_t *st) {
  pthread_rwlock_rdlock(&st->lock);
  if (st->db) return 0;
  pthread_rwlock_unlock(&st->lock);
  return -1;
}

void ak_store_unpin(ak_store_t *st) { pthread_rwlock_unlock(&st->lock); }

int ak_store_compact(ak_store_t *st, int cf, char **err) {
  if (cf < 0 || cf >= AK_CF_COUNT || ak_store_pin(st) != 0) {
    *err = strdup("the store is not open");
    return -1;
  }
  if (st->read_only || !st->cf[cf]) {
    ak_store_unpin(st);
    *err = strdup("the store is open read-only");
    return -1;
  }
  rocksdb_compactoptions_t *o = rocksdb_compactoptions_create();
  rocksdb_compactoptions_set_exclusive_manual_compaction(o, 1);
  /* kForce: the last level is rewritten too, or an old version kept there would stay */
  rocksdb_compactoptions_set_bottommost_level_compaction(o, 2);
  rocksdb_compact_range_cf_opt(st->db, st->cf[cf], o, NULL, 0, NULL, 0);
  rocksdb_compactoptions_destroy(o);
  ak_store_unpin(st);
  return 0;
}

int ak_store_checkpoint(ak_store_t *st, const char *dir, uint64_t log_size_for_flush, char **err) {
  if (ak_store_pin(st) != 0) {
    *err = strdup("the store is not open");
    return -1;
  }
  char *e = NULL;
  rocksdb_checkpoint_t *cp = rocksdb_checkpoint_object_create(st->db, &e);
  if (cp && !e) rocksdb_checkpoint_create(cp, dir, log_size_for_flush, &e);
  if (cp) rocksdb_checkpoint_object_destroy(cp);
  ak_store_unpin(st);
  if (!e) return 0;
  if (asprintf(err, "checkpoint into %s: %s", dir, e) < 0) *err = NULL;
  free(e);
  return -1;
}

static int refuse_closed(ak_wf_class_t *cls, char **err) {
  if (cls) *cls = AK_WF_OTHER;
  if (err) *err = strdup("store is closed");
  return -1;
}

int ak_store_write(ak_store_t *st, ak_batch_t *b, bool sync, ak_wf_class_t *cls, char **err) {
  if (ak_store_pin(st) != 0) return refuse_closed(cls, err);
  int rc = ak_store_write_pinned(st, b, sync, cls, err);
  ak_store_unpin(st);
  return rc;
}

int ak_store_write_pinned(ak_store_t *st, ak_batch_t *b, bool sync, ak_wf_class_t *cls, char **err) {
  if (b->dropped) return refuse_closed(cls, err); /* never a part of a change */
  char *e = NULL;
  rocksdb_write(st->db, sync ? st->wsync : st->wnosync, b->wb, &e);
  if (e) {
    if (cls) *cls = ak_store_classify(e);
    if (err) *err = e;
    else free(e);
    return -1;
  }
  return 0;
}

int ak_store_get(ak_store_t *st, int cf, const void *key, size_t klen, char **val, size_t *vlen) {
  pthread_rwlock_rdlock(&st->lock);
  if (!st->db || !st->cf[cf]) {
    pthread_rwlock_unlock(&st->lock);
    return -1;
  }
  char *e = NULL;
  *val = rocksdb_get_cf(st->db, st->ropts, st->cf[cf], key, klen, vlen, &e);
  pthread_rwlock_unlock(&st->lock);
  if (e) {
    free(e);
    return -1;
  }
  return *val ? 0 : 1;
}

int ak_store_get_pinned(ak_store_t *st, int cf, const void *key, size_t klen, char **val, size_t *vlen) {
  if (!st->db || !st->cf[cf]) return -1;
  char *e = NULL;
  *val = rocksdb_get_cf(st->db, st->ropts, st->cf[cf], key, klen, vlen, &e);
  if (e) {
    free(e);
    return -1;
  }
  return *val ? 0 : 1;
}

#define MULTI_GET_MIN 4

int ak_store_multi_get_pinned(ak_store_t *st, int cf, size_t n, const char *const *keys, const size_t *klens,
                              char **vals, size_t *vlens, int *rcs) {
  for (size_t i = 0; i < n; i++) {
    vals[i] = NULL;
    vlens[i] = 0;
    rcs[i] = -1;
  }
  if (!n) return 0;
  if (!st->db || !st->cf[cf]) return -1;
  /* a batch has its own set-up cost: a few keys are cheaper one at a time (dispatch_tick:
   * a pass over 10 tenants with one row each took twice as long batched) */
  if (n < MULTI_GET_MIN) {
    for (size_t i = 0; i < n; i++) rcs[i] = ak_store_get_pinned(st, cf, keys[i], klens[i], &vals[i], &vlens[i]);
    return 0;
  }
  rocksdb_pinnableslice_t **ps = calloc(n, sizeof *ps);
  char **errs = calloc(n, sizeof *errs);
  if (!ps || !errs) {
    free(ps);
    free(errs);
    return -1;
  }
  rocksdb_batched_multi_get_cf(st->db, st->ropts, st->cf[cf], n, keys, klens, ps, errs, false);
  for (size_t i = 0; i < n; i++) {
    if (errs[i]) {
      free(errs[i]);
    } else if (!ps[i]) {
      rcs[i] = 1;
    } else {
      size_t vl;
      const char *v = rocksdb_pinnableslice_value(ps[i], &vl);
      /* like rocksdb_get's copy: an empty value is still found */
      char *c = malloc(vl ? vl : 1);
      if (c) {
        if (vl) memcpy(c, v, vl);
        vals[i] = c;
        vlens[i] = vl;
        rcs[i] = 0;
      }
    }
    if (ps[i]) rocksdb_pinnableslice_destroy(ps[i]);
  }
  free(ps);
  free(errs);
  return 0;
}

int ak_store_scan(ak_store_t *st, int cf, const void *prefix, size_t plen, ak_store_scan_fn cb, void *ctx) {
  return ak_store_scan_from(st, cf, prefix, plen, NULL, 0, false, cb, ctx);
}

int ak_store_scan_from(ak_store_t *st, int cf, const void *prefix, size_t plen, const void *from, size_t flen,
                       bool reverse, ak_store_scan_fn cb, void *ctx) {
  pthread_rwlock_rdlock(&st->lock);
  if (!st->db || !st->cf[cf]) {
    pthread_rwlock_unlock(&st->lock);
    return -1;
  }
  rocksdb_iterator_t *it = rocksdb_create_iterator_cf(st->db, st->ropts, st->cf[cf]);
  if (from) {
    if (reverse) rocksdb_iter_seek_for_prev(it, from, flen);
    else rocksdb_iter_seek(it, from, flen);
  } else if (!reverse) {
    if (plen) rocksdb_iter_seek(it, prefix, plen);
    else rocksdb_iter_seek_to_first(it);
  } else {
    /* the last key with the prefix: just before the prefix's successor */
    unsigned char succ[64];
    size_t sl = plen < sizeof succ ? plen : sizeof succ;
    memcpy(succ, prefix, sl);
    while (sl && succ[sl - 1] == 0xff) sl--;
    if (sl == 0) {
      rocksdb_iter_seek_to_last(it);
    } else {
      succ[sl - 1]++;
      rocksdb_iter_seek(it, (const char *)succ, sl);
      if (rocksdb_iter_valid(it)) rocksdb_iter_prev(it);
      else rocksdb_iter_seek_to_last(it);
    }
  }
  int rc = 0;
  for (; rocksdb_iter_valid(it); reverse ? rocksdb_iter_prev(it) : rocksdb_iter_next(it)) {
    size_t kl, vl;
    const char *k = rocksdb_iter_key(it, &kl);
    if (plen && (kl < plen || memcmp(k, prefix, plen) != 0)) break;
    const char *v = rocksdb_iter_value(it, &vl);
    if (cb(k, kl, v, vl, ctx)) break;
  }
  char *e = NULL;
  rocksdb_iter_get_error(it, &e);
  if (e) {
    free(e);
    rc = -1;
  }
  rocksdb_iter_destroy(it);
  pthread_rwlock_unlock(&st->lock);
  return rc;
}

/* A cursor is the iterator itself: nothing to allocate beside it. */
static rocksdb_iterator_t *iter(const ak_store_cursor_t *c) { return (rocksdb_iterator_t *)c; }

ak_store_cursor_t *ak_store_cursor_new_pinned(ak_store_t *st, int cf, bool fill_cache) {
  if (!st->db || !st->cf[cf]) return NULL;
  return (ak_store_cursor_t *)rocksdb_create_iterator_cf(st->db, fill_cache ? st->ropts : st->ropts_nofill,
                                                        st->cf[cf]);
}

void ak_store_cursor_seek(ak_store_cursor_t *c, const void *key, size_t kl) { rocksdb_iter_seek(iter(c), key, kl); }
bool ak_store_cursor_valid(const ak_store_cursor_t *c) { return rocksdb_iter_valid(iter(c)); }
void ak_store_cursor_next(ak_store_cursor_t *c) { rocksdb_iter_next(iter(c)); }
const char *ak_store_cursor_key(const ak_store_cursor_t *c, size_t *kl) { return rocksdb_iter_key(iter(c), kl); }
const char *ak_store_cursor_value(const ak_store_cursor_t *c, size_t *vl) { return rocksdb_iter_value(iter(c), vl); }

int ak_store_cursor_status(const ak_store_cursor_t *c) {
  char *e = NULL;
  rocksdb_iter_get_error(iter(c), &e);
  if (!e) return 0;
  free(e);
  return -1;
}

void ak_store_cursor_free(ak_store_cursor_t *c) {
  if (c) rocksdb_iter_destroy(iter(c));
}

int ak_store_probe(ak_store_t *st, ak_wf_class_t *cls, char **err) {
  pthread_rwlock_rdlock(&st->lock);
  if (!st->db) {
    pthread_rwlock_unlock(&st->lock);
    return -1;
  }
  rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
  uint8_t v[8];
  ak_put_u64(v, (uint64_t)ak_now_ms());
  rocksdb_writebatch_put_cf(wb, st->cf[AK_CF_DEFAULT], AK_KEY_READY_PROBE, strlen(AK_KEY_READY_PROBE),
                            (const char *)v, 8);
  char *e = NULL;
  rocksdb_write(st->db, st->wsync, wb, &e);
  pthread_rwlock_unlock(&st->lock);
  rocksdb_writebatch_destroy(wb);
  if (e) {
    if (cls) *cls = ak_store_classify(e);
    if (err) *err = e;
    else free(e);
    return -1;
  }
  return 0;
}

/* ------------------------------------------------------------------- the module ---- */

char *ak_store_path_of(const char *data_dir, const char *instance) {
  char *p = NULL;
  if (asprintf(&p, "%s/%s/store", data_dir, instance) < 0) return NULL;
  return p;
}

static int store_open(ak_instance_t *inst, char **err) {
  const ak_node_cfg_t *nc = ak_node_cfg(inst->cfg);
  char *sp = ak_store_path_of(nc ? nc->data_dir : "./data", inst->name);
  inst->store = sp ? ak_store_new(sp, false) : NULL;
  char *why = NULL;
  if (!inst->store || ak_store_open(inst->store, &why) != 0) {
    ak_log(AK_LOG_ERROR, "store", "store_open_failed: refusing to start", "reason=\"%s\"", why ? why : "out of memory");
    if (asprintf(err, "store_open_failed: %s", why ? why : "out of memory") < 0) *err = NULL;
    free(why);
    ak_store_free(inst->store);
    inst->store = NULL;
    free(sp);
    return AK_MODULE_FAILED;
  }
  ak_log(AK_LOG_INFO, "store", "store opened", "path=%s next_seq=%llu hooks=%llu wal_replay_seconds=%.3f", sp,
         (unsigned long long)ak_store_next_seq(inst->store), (unsigned long long)ak_store_hook_count(inst->store),
         ak_store_last_open_seconds(inst->store));
  /* with backup.enabled the backup module says what a 201 survives (backup/module.c),
   * under dual the intake module does */
  const char *wal = json_string_value(json_object_get(json_object_get(inst->cfg->effective, "wal"), "type"));
  if (wal && !strcmp(wal, "none"))
    ak_log(AK_LOG_INFO, "durability",
           "wal.type=none: a 201 means every sink confirmed; an acked hook is lost only if no sink keeps it (no "
           "hook is written to this store: it keeps the quarantine pen, API sources and rate-limit overrides)",
           "publish_timeout_ms=%lld",
           (long long)json_integer_value(json_object_get(json_object_get(inst->cfg->effective, "wal"),
                                                         "publish_timeout_ms")));
  else if ((!wal || !strcmp(wal, "disk")) &&
           !json_is_true(json_object_get(json_object_get(inst->cfg->effective, "backup"), "enabled")))
    ak_log(AK_LOG_INFO, "durability",
           "wal.type=disk: a 201 means the hook is fsynced in this host's store; it survives a process crash "
           "and power loss on this host, not the loss of this host (no backup configured)",
           "store=%s", sp);
  free(sp);
  return 0;
}

static void store_close(ak_instance_t *inst) {
  ak_store_free(inst->store);
  inst->store = NULL;
}

const ak_module_t ak_mod_store = {
  .name = "store",
  .roles = AK_ROLES_STORE,
  .open = store_open,
  .close = store_close,
};
