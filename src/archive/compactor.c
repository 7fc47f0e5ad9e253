/* The archive compactor (archive/compactor.h).
 *
 * One thread. Every storage.interval_ms it reads the hooks committed since its read
 * position into one segment in memory (at most storage.roll_bytes, plus the hook that
 * crossed it) and cuts the segment once it is full or its oldest hook has waited
 * storage.roll_ms: PUT the segment, PUT its index, rewrite the node-day's manifest, then
 * one synced batch with the catalogue row and the cursor. Only then may reclaim pass the
 * segment's hooks (ak_dispatch_archived_below). A failed PUT keeps the very same segment
 * for the next try (same keys, same bytes: a retried PUT is idempotent), after a jittered
 * backoff that doubles up to 60 s; ingest never waits for any of it.
 *
 * Crash cases (docs/storage.md): a kill before the catalogue batch leaves objects with no
 * row; boot reconcile catalogues a segment whose index is there (and raises the cursor and
 * next_seq past it) and deletes a lone segment object, whose hooks are still in the store
 * and will be archived again. A blob store that cannot be listed at boot does not stop the
 * node: the compactor reconciles before its first segment instead.
 *
 * Test builds: ANKUSA_TEST_ARCHIVE_DAY_MS=<n> makes a retention "day" n ms long (and the
 * retention sweep run every n/4 ms), so a test can watch segments expire. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <jansson.h>
#include "archive/catalogue.h"
#include "archive/compactor.h"
#include "archive/segment.h"
#include "core/blobcfg.h"
#include "core/clock.h"
#include "core/envelope.h"
#include "core/config.h"
#include "core/instance.h"
#include "core/log.h"
#include "core/node.h"
#include "dispatch/dispatch.h"
#include "queue/writer.h"
#include "store/keys.h"
#include "store/store.h"

#define BACKOFF_MAX_MS 60000
#define DAY_MS 86400000LL
#define LIST_PAGE 1000

struct ak_archive {
  ak_instance_t *inst;
  ak_blob_t *blob;       /* unscoped: catalogued keys are full keys */
  ak_blob_t *scope;      /* <key_prefix>archive/ */
  char scope_prefix[256];
  char node[AK_SEG_NODE_MAX + 1];
  int64_t roll_bytes, roll_ms, interval_ms, retention_ms, cat_retention_ms;

  pthread_t thread;
  bool started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool stopping;

  uint64_t cursor;       /* m:acursor as written */
  uint64_t read_pos;     /* the next seq to read into the open segment */
  ak_seg_writer_t *sw;
  bool sealed;           /* the open segment failed to go out: retry it as it is */
  unsigned fails;
  int64_t next_try_ms;
  int64_t last_sweep_ms, sweep_every_ms;
  bool need_reconcile;   /* the boot reconcile could not read the blob store: before any cut */

  ak_series_t *c_records, *c_bytes, *c_segments, *g_pending, *g_lag;
  ak_series_t *c_fail_segment, *c_fail_retention;
};

/* ------------------------------------------------------------------ config ---- */

static const ak_opt_t storage_rows[] = {
  {.key = "type", .type = AK_OPT_ENUM, .def = "local", .enum_vals = "local|s3|gcs",
   .env = "ANKUSA_STORAGE_TYPE", .doc = "where segments are archived: local (<data_dir>/default/segments), s3, gcs",
   AK_AT(ak_storage_cfg_t, type)},
  {.key = "roll_bytes", .type = AK_OPT_INT, .def = "16777216", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "a segment is cut at this size", AK_AT(ak_storage_cfg_t, roll_bytes)},
  {.key = "roll_ms", .type = AK_OPT_INT, .def = "30000", .min = 0, .flags = AK_OPTF_HAS_MIN,
   .doc = "or once its oldest hook has waited this long, whichever comes first", AK_AT(ak_storage_cfg_t, roll_ms)},
  {.key = "interval_ms", .type = AK_OPT_INT, .def = "1000", .min = 0, .flags = AK_OPTF_HAS_MIN,
   .doc = "how often the compactor looks for hooks to archive (0: every 10 ms)",
   AK_AT(ak_storage_cfg_t, interval_ms)},
  {.key = "key_prefix", .type = AK_OPT_STRING, .def = "", .env = "ANKUSA_STORAGE_KEY_PREFIX",
   .doc = "\"\" or one or more name/ parts ([A-Za-z0-9._-]) before every segment key",
   AK_AT(ak_storage_cfg_t, key_prefix)},
  {.key = "catalogue_retention_days", .type = AK_OPT_INT, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN,
   .doc = "catalogue rows (what fetch and replay find) kept this long after their newest hook; null: for ever",
   AK_AT(ak_storage_cfg_t, catalogue_retention_days)},
  {.key = "s3", .type = AK_OPT_MAP, .children = ak_blobcfg_storage_s3_rows, .doc = "type s3 only"},
  {.key = "gcs", .type = AK_OPT_MAP, .children = ak_blobcfg_storage_gcs_rows, .doc = "type gcs only"},
  {0},
};

static void storage_check(ak_check_t *c, json_t *st, json_t *root) {
  (void)root;
  json_t *kp = json_object_get(st, "key_prefix");
  if (json_is_string(kp) && !ak_blobcfg_key_prefix_ok(json_string_value(kp))) {
    char *r = ak_check_render(kp, false);
    ak_check_error(c, "storage.key_prefix: invalid prefix %s; expected \"\" or one or more name/ parts "
                   "(name from [A-Za-z0-9._-])", r ? r : "?");
    free(r);
  }
  ak_blobcfg_check(c, "storage", st);
}

static const ak_opt_t archive_rows[] = {
  {.key = "retention_days", .type = AK_OPT_INT, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN,
   .doc = "segments deleted once their newest hook is this old, on every blob store; null: kept",
   AK_AT(ak_archive_cfg_t, retention_days)},
  {0},
};

static void archive_check(ak_check_t *c, json_t *a, json_t *root) {
  int64_t days, cat;
  if (!ak_check_int_at(a, "retention_days", &days)) return;
  json_t *st = json_object_get(root, "storage");
  if (ak_check_int_at(st, "catalogue_retention_days", &cat) && days > cat)
    ak_check_error(c, "archive.retention_days must be at most storage.catalogue_retention_days (%lld), got %lld",
                   (long long)cat, (long long)days);
}

const ak_storage_cfg_t *ak_storage_cfg(const ak_config_t *cfg) { return ak_config_of(cfg, &ak_mod_storage); }
const ak_archive_cfg_t *ak_archive_cfg(const ak_config_t *cfg) { return ak_config_of(cfg, &ak_mod_archive); }

ak_blob_t *ak_archive_open_blob(const ak_config_t *cfg, const char *instance, struct ak_httpc *httpc, char *err,
                                size_t errlen) {
  const ak_node_cfg_t *nc = ak_node_cfg(cfg);
  char root[4096];
  snprintf(root, sizeof root, "%s/%s/segments", nc && nc->data_dir ? nc->data_dir : "./data", instance);
  return ak_blob_open(json_object_get(cfg->effective, "storage"), root, httpc, err, errlen);
}

ak_blob_t *ak_archive_blob(ak_instance_t *inst) { return inst->archive ? inst->archive->blob : NULL; }
int64_t ak_archive_retention_ms(ak_instance_t *inst) { return inst->archive ? inst->archive->retention_ms : 0; }

/* ------------------------------------------------------------------ helpers ---- */

static bool stopping(ak_archive_t *a) {
  pthread_mutex_lock(&a->mu);
  bool s = a->stopping;
  pthread_mutex_unlock(&a->mu);
  return s;
}

static uint64_t meta_u64(ak_store_t *st, const char *key, int *rc) {
  char *v = NULL;
  size_t vl = 0;
  uint64_t x = 0;
  int r = ak_store_get(st, AK_CF_DEFAULT, key, strlen(key), &v, &vl);
  if (r < 0 || (r == 0 && vl != 8)) *rc = -1;
  else if (r == 0) x = ak_get_u64((uint8_t *)v);
  free(v);
  return x;
}

static void put_u64(ak_batch_t *b, const char *key, uint64_t x) {
  uint8_t v[8];
  ak_put_u64(v, x);
  ak_batch_put(b, AK_CF_DEFAULT, key, strlen(key), v, 8);
}

/* A synced write of what fill() built; 0 or -1 (logged by the caller). */
static int write_synced(ak_store_t *st, ak_batch_t *b) {
  ak_wf_class_t cls;
  char *err = NULL;
  int rc = ak_store_write(st, b, true, &cls, &err);
  free(err);
  return rc;
}

/* The node part of segment keys: the store's own id, so nodes sharing a bucket never
 * write the same key, and a node restored from a backup of this store keeps its name
 * (and finds its own segments at boot). Made once, synced. */
static int node_name(ak_archive_t *a, char *err, size_t errlen) {
  ak_store_t *st = a->inst->store;
  char *v = NULL;
  size_t vl = 0;
  int rc = ak_store_get(st, AK_CF_DEFAULT, AK_KEY_STORE_ID, strlen(AK_KEY_STORE_ID), &v, &vl);
  uint8_t id[16];
  if (rc < 0) {
    snprintf(err, errlen, "cannot read %s from the store", AK_KEY_STORE_ID);
    return -1;
  }
  if (rc == 0 && vl >= 6) {
    memcpy(id, v, vl < 16 ? vl : 16);
  } else {
    FILE *f = fopen("/dev/urandom", "rb");
    bool ok = f && fread(id, 1, 16, f) == 16;
    if (f) fclose(f);
    ak_batch_t *b = ok && ak_store_pin(st) == 0 ? ak_batch_new(st) : NULL;
    if (b) {
      ak_batch_put(b, AK_CF_DEFAULT, AK_KEY_STORE_ID, strlen(AK_KEY_STORE_ID), id, 16);
      ak_store_unpin(st);
      ok = write_synced(st, b) == 0;
      ak_batch_free(b);
    } else {
      if (ok) ak_store_unpin(st);
      ok = false;
    }
    if (!ok) {
      free(v);
      snprintf(err, errlen, "cannot write %s to the store", AK_KEY_STORE_ID);
      return -1;
    }
  }
  free(v);
  snprintf(a->node, sizeof a->node, "node-%02x%02x%02x%02x%02x%02x", id[0], id[1], id[2], id[3], id[4], id[5]);
  return 0;
}

static int64_t backoff_ms(ak_archive_t *a) {
  int64_t base = a->interval_ms > 0 ? a->interval_ms : 10;
  unsigned n = a->fails > 16 ? 16 : a->fails;
  int64_t d = base << n;
  if (d > BACKOFF_MAX_MS || d <= 0) d = BACKOFF_MAX_MS;
  /* jitter: half to the whole delay, so nodes sharing a blob store do not retry in step */
  return d / 2 + (int64_t)(random() % (d / 2 + 1));
}

static void fail(ak_archive_t *a, ak_series_t *stage, const char *what, const char *err) {
  ak_counter_add(stage, 1);
  a->fails++;
  int64_t wait = backoff_ms(a);
  a->next_try_ms = ak_now_ms() + wait;
  ak_log(AK_LOG_ERROR, "archive", what, "error=\"%s\" retry_in_ms=%lld failures=%u", err, (long long)wait, a->fails);
}

/* ---------------------------------------------------------------- manifest ---- */

/* The node-day's _manifest.json, with seg added (or, seg NULL, the segment first_seq
 * removed): a listing for people and tools; the catalogue is what the node reads. */
static int manifest_update(ak_archive_t *a, int64_t day_ms, const ak_cat_row_t *seg, uint64_t remove_first,
                           char *err, size_t errlen) {
  char key[AK_SEG_KEY_MAX];
  if (!ak_seg_key(key, sizeof key, day_ms, a->node, 0, 0, "_manifest.json")) {
    snprintf(err, errlen, "manifest key does not fit");
    return -1;
  }
  uint8_t *buf = NULL;
  size_t len = 0;
  int rc = ak_blob_get(a->scope, key, &buf, &len, err, errlen);
  if (rc == AK_BLOB_ERROR) return -1;
  json_t *m = rc == AK_BLOB_OK ? json_loadb((const char *)buf, len, 0, NULL) : NULL;
  free(buf);
  json_t *segs = json_object_get(m, "segments");
  if (!json_is_array(segs)) {
    json_decref(m);
    char day[11];
    time_t t = (time_t)(day_ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(day, sizeof day, "%Y-%m-%d", &tm);
    m = json_pack("{s:i,s:s,s:s,s:[]}", "version", 1, "node", a->node, "day", day, "segments");
    segs = json_object_get(m, "segments");
  }
  uint64_t first = seg ? seg->first_seq : remove_first;
  size_t i;
  json_t *e;
  json_array_foreach(segs, i, e) {
    if ((uint64_t)json_integer_value(json_object_get(e, "first_seq")) == first) {
      json_array_remove(segs, i);
      break;
    }
  }
  if (seg) {
    const char *sk = strrchr(seg->seg_key, '/'), *ik = strrchr(seg->idx_key, '/');
    json_t *n = json_pack("{s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:I}", "segment", sk ? sk + 1 : seg->seg_key, "index",
                          ik ? ik + 1 : seg->idx_key, "first_seq", (json_int_t)seg->first_seq, "last_seq",
                          (json_int_t)seg->last_seq, "count", (json_int_t)seg->count, "bytes",
                          (json_int_t)seg->seg_bytes, "min_received_at", (json_int_t)seg->min_received_ms,
                          "max_received_at", (json_int_t)seg->max_received_ms);
    /* in seq order */
    size_t at = json_array_size(segs);
    json_array_foreach(segs, i, e) {
      if ((uint64_t)json_integer_value(json_object_get(e, "first_seq")) > seg->first_seq) {
        at = i;
        break;
      }
    }
    json_array_insert_new(segs, at, n);
  }
  if (json_array_size(segs) == 0) {
    json_decref(m);
    return ak_blob_delete(a->scope, key, err, errlen) == AK_BLOB_OK ? 0 : -1;
  }
  char *text = json_dumps(m, JSON_INDENT(1));
  json_decref(m);
  if (!text) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  rc = ak_blob_put(a->scope, key, text, strlen(text), err, errlen);
  free(text);
  return rc == AK_BLOB_OK ? 0 : -1;
}

/* ----------------------------------------------------------------- the tick ---- */

/* Reads committed hooks from read_pos into the open segment until it holds roll_bytes or
 * the committed ones run out. */
static void fill(ak_archive_t *a) {
  ak_store_t *st = a->inst->store;
  uint64_t below = a->inst->writer ? ak_writer_committed_below(a->inst->writer) : UINT64_MAX;
  if (a->read_pos >= below || ak_store_pin(st) != 0) return;
  ak_store_cursor_t *c = ak_store_cursor_new_pinned(st, AK_CF_HOOKS, false);
  if (!c) {
    ak_store_unpin(st);
    return;
  }
  uint8_t k[AK_HOOK_KEY_LEN];
  ak_key_hook(k, a->read_pos);
  for (ak_store_cursor_seek(c, k, sizeof k); ak_store_cursor_valid(c); ak_store_cursor_next(c)) {
    size_t kl, vl;
    const char *key = ak_store_cursor_key(c, &kl);
    if (kl != AK_HOOK_KEY_LEN) continue;
    uint64_t seq = ak_get_u64((const uint8_t *)key);
    if (seq >= below) break;
    const char *v = ak_store_cursor_value(c, &vl);
    int rc = ak_seg_writer_add(a->sw, (const uint8_t *)v, vl);
    if (rc == AK_SEG_NOMEM) break;
    if (rc != AK_SEG_OK) {
      /* a damaged record cannot be archived; it stays in the store until reclaimed */
      ak_counter_add(a->c_fail_segment, 1);
      ak_log(AK_LOG_ERROR, "archive", "stored hook does not decode; not archived", "seq=%llu",
             (unsigned long long)seq);
    }
    a->read_pos = seq + 1;
    if ((int64_t)ak_seg_writer_bytes(a->sw) >= a->roll_bytes) break;
  }
  /* seqs below `below` that no hook holds are void: nothing left to read there */
  if (ak_store_cursor_status(c) == 0 && !ak_store_cursor_valid(c) && below != UINT64_MAX && a->read_pos < below &&
      (int64_t)ak_seg_writer_bytes(a->sw) < a->roll_bytes)
    a->read_pos = below;
  ak_store_cursor_free(c);
  ak_store_unpin(st);
}

/* PUTs the open segment, its index and the manifest, then catalogues it and moves the
 * cursor in one synced batch. 0, or -1 (the segment stays sealed for the next try). */
static int cut(ak_archive_t *a) {
  char err[512] = "";
  const uint8_t *seg, *idx;
  size_t seg_len, idx_len;
  int frc = ak_seg_writer_finish(a->sw, &seg, &seg_len, &idx, &idx_len);
  if (frc != AK_SEG_OK) {
    fail(a, a->c_fail_segment, "segment could not be encoded",
         frc == AK_SEG_NOMEM ? "out of memory" : "two stored hooks share an id");
    return -1;
  }
  a->sealed = true;
  ak_cat_row_t r = {0};
  r.first_seq = ak_seg_writer_first_seq(a->sw);
  r.last_seq = ak_seg_writer_last_seq(a->sw);
  r.count = (uint32_t)ak_seg_writer_count(a->sw);
  r.seg_bytes = seg_len;
  r.idx_bytes = idx_len;
  r.min_received_ms = ak_seg_writer_min_received(a->sw);
  r.max_received_ms = ak_seg_writer_max_received(a->sw);
  ak_seg_writer_id_range(a->sw, r.min_id, r.max_id);
  r.archived_at_ms = ak_now_ms();
  char sk[AK_SEG_KEY_MAX], ik[AK_SEG_KEY_MAX];
  if (!ak_seg_key(sk, sizeof sk, r.min_received_ms, a->node, r.first_seq, r.last_seq, ".seg") ||
      !ak_seg_key(ik, sizeof ik, r.min_received_ms, a->node, r.first_seq, r.last_seq, ".idx")) {
    fail(a, a->c_fail_segment, "segment key does not fit", "key");
    return -1;
  }
  snprintf(r.seg_key, sizeof r.seg_key, "%s%s", a->scope_prefix, sk);
  snprintf(r.idx_key, sizeof r.idx_key, "%s%s", a->scope_prefix, ik);
  /* the segment before its index: an index always names a whole segment */
  if (ak_blob_put(a->scope, sk, seg, seg_len, err, sizeof err) != AK_BLOB_OK ||
      ak_blob_put(a->scope, ik, idx, idx_len, err, sizeof err) != AK_BLOB_OK ||
      manifest_update(a, r.min_received_ms, &r, 0, err, sizeof err) != 0) {
    fail(a, a->c_fail_segment, "segment upload failed; the same segment is retried", err);
    return -1;
  }
  ak_store_t *st = a->inst->store;
  ak_batch_t *b = ak_store_pin(st) == 0 ? ak_batch_new(st) : NULL;
  if (!b) {
    fail(a, a->c_fail_segment, "catalogue write failed", "store unavailable");
    return -1;
  }
  ak_cat_put(b, &r);
  put_u64(b, AK_KEY_ARCHIVE_CURSOR, a->read_pos);
  ak_store_unpin(st);
  int rc = write_synced(st, b);
  ak_batch_free(b);
  if (rc != 0) {
    fail(a, a->c_fail_segment, "catalogue write failed", "store write");
    return -1;
  }
  a->cursor = a->read_pos;
  a->sealed = false;
  a->fails = 0;
  ak_counter_add(a->c_records, r.count);
  ak_counter_add(a->c_bytes, seg_len);
  ak_counter_add(a->c_segments, 1);
  ak_seg_writer_reset(a->sw);
  ak_dispatch_archived_below(a->inst->dispatch, a->cursor);
  return 0;
}

/* The gauges: hooks not archived yet (seqs between the cursor and the committed ones,
 * gaps of failed commits included) and the age of the oldest. */
static void sample(ak_archive_t *a, int64_t now) {
  uint64_t below = a->inst->writer ? ak_writer_committed_below(a->inst->writer) : a->read_pos;
  uint64_t pend = below > a->cursor ? below - a->cursor : 0;
  int64_t lag = 0;
  if (ak_seg_writer_count(a->sw)) {
    lag = now - ak_seg_writer_min_received(a->sw);
  } else if (pend) {
    size_t vl = 0;
    uint8_t k[AK_HOOK_KEY_LEN];
    ak_key_hook(k, a->cursor);
    /* the first hook at or after the cursor */
    ak_store_t *st = a->inst->store;
    if (ak_store_pin(st) == 0) {
      ak_store_cursor_t *c = ak_store_cursor_new_pinned(st, AK_CF_HOOKS, false);
      if (c) {
        ak_store_cursor_seek(c, k, sizeof k);
        if (ak_store_cursor_valid(c)) {
          const char *val = ak_store_cursor_value(c, &vl);
          ak_envelope_t env;
          if (ak_envelope_decode((const uint8_t *)val, vl, &env) == 0) {
            lag = now - env.received_at_ms;
            ak_envelope_clear(&env);
          }
        }
        ak_store_cursor_free(c);
      }
      ak_store_unpin(st);
    }
  }
  ak_gauge_set(a->g_pending, (double)pend);
  ak_gauge_set(a->g_lag, (double)(lag > 0 ? lag : 0) / 1000.0);
}

/* Retention: segments whose newest hook is older than archive.retention_days lose their
 * objects and row (oldest first, stopping at the first that is younger); rows older than
 * storage.catalogue_retention_days lose the row only (the objects are left to a bucket's
 * lifecycle rule). */
typedef struct {
  ak_archive_t *a;
  int64_t now;
  ak_cat_row_t *rows;
  size_t n, cap;
} sweep_t;

static int sweep_cb(void *ctx, const ak_cat_row_t *r) {
  sweep_t *s = ctx;
  int64_t age = s->now - r->max_received_ms;
  bool objects = s->a->retention_ms > 0 && age >= s->a->retention_ms;
  bool row = objects || (s->a->cat_retention_ms > 0 && age >= s->a->cat_retention_ms);
  if (!row) return 1;
  if (s->n == s->cap) {
    size_t nc = s->cap ? s->cap * 2 : 64;
    ak_cat_row_t *nr = realloc(s->rows, nc * sizeof *nr);
    if (!nr) return 1;
    s->rows = nr;
    s->cap = nc;
  }
  s->rows[s->n++] = *r;
  return s->n >= 256; /* a pass does a bounded amount of work */
}

static void retention(ak_archive_t *a, int64_t now) {
  if (a->retention_ms <= 0 && a->cat_retention_ms <= 0) return;
  sweep_t s = {.a = a, .now = now};
  if (ak_cat_scan(a->inst->store, 0, sweep_cb, &s) != 0) {
    ak_counter_add(a->c_fail_retention, 1);
    free(s.rows);
    return;
  }
  ak_store_t *st = a->inst->store;
  for (size_t i = 0; i < s.n; i++) {
    ak_cat_row_t *r = &s.rows[i];
    char err[512] = "";
    bool objects = a->retention_ms > 0 && now - r->max_received_ms >= a->retention_ms;
    if (objects) {
      /* the index first: a segment without one is never found nor catalogued again */
      if (ak_blob_delete(a->blob, r->idx_key, err, sizeof err) != AK_BLOB_OK ||
          ak_blob_delete(a->blob, r->seg_key, err, sizeof err) != AK_BLOB_OK) {
        ak_counter_add(a->c_fail_retention, 1);
        ak_log(AK_LOG_WARNING, "archive", "retention could not delete a segment; retried next pass", "error=\"%s\"", err);
        break;
      }
      if (manifest_update(a, r->min_received_ms, NULL, r->first_seq, err, sizeof err) != 0)
        ak_log(AK_LOG_WARNING, "archive", "manifest not updated after a retention delete", "error=\"%s\"", err);
    }
    ak_batch_t *b = ak_store_pin(st) == 0 ? ak_batch_new(st) : NULL;
    if (!b) {
      ak_counter_add(a->c_fail_retention, 1);
      break;
    }
    uint8_t k[AK_CAT_KEY_LEN];
    ak_cat_key(k, r->first_seq);
    ak_batch_delete(b, AK_CF_ARCHIVE, k, sizeof k);
    if (objects) put_u64(b, AK_KEY_ARCHIVE_EXPIRED, r->last_seq + 1);
    ak_store_unpin(st);
    int rc = write_synced(st, b);
    ak_batch_free(b);
    if (rc != 0) {
      ak_counter_add(a->c_fail_retention, 1);
      break;
    }
    ak_log(AK_LOG_INFO, "archive", objects ? "segment expired and deleted" : "catalogue row expired",
           "first_seq=%llu last_seq=%llu", (unsigned long long)r->first_seq, (unsigned long long)r->last_seq);
  }
  free(s.rows);
}

static int reconcile(ak_archive_t *a, bool at_boot, char *err, size_t errlen);

static void tick_work(ak_archive_t *a);

/* A tick: the work, then the gauges (every tick, also one that failed or waits out a
 * backoff, so the pending count and the lag keep rising while the blob store is down). */
static void tick(ak_archive_t *a) {
  tick_work(a);
  sample(a, ak_now_ms());
}

static void tick_work(ak_archive_t *a) {
  int64_t now = ak_now_ms();
  if (now < a->next_try_ms) return;
  if (a->need_reconcile) {
    char err[512];
    if (reconcile(a, false, err, sizeof err) != 0) {
      fail(a, a->c_fail_segment, "archive reconcile failed; nothing is archived until it succeeds", err);
      return;
    }
    a->need_reconcile = false;
    a->read_pos = a->cursor;
    a->fails = 0;
  }
  if (now - a->last_sweep_ms >= a->sweep_every_ms) {
    a->last_sweep_ms = now;
    retention(a, now);
  }
  for (;;) {
    if (!a->sealed) fill(a);
    size_t n = ak_seg_writer_count(a->sw);
    if (!n) {
      /* nothing to archive: every read seq is void or behind the cursor */
      if (a->read_pos > a->cursor && !a->sealed) {
        ak_store_t *st = a->inst->store;
        ak_batch_t *b = ak_store_pin(st) == 0 ? ak_batch_new(st) : NULL;
        if (b) {
          put_u64(b, AK_KEY_ARCHIVE_CURSOR, a->read_pos);
          ak_store_unpin(st);
          if (write_synced(st, b) == 0) {
            a->cursor = a->read_pos;
            ak_dispatch_archived_below(a->inst->dispatch, a->cursor);
          }
          ak_batch_free(b);
        }
      }
      break;
    }
    now = ak_now_ms();
    bool full = (int64_t)ak_seg_writer_bytes(a->sw) >= a->roll_bytes;
    bool aged = now - ak_seg_writer_min_received(a->sw) >= a->roll_ms;
    if (!a->sealed && !full && !aged) break;
    if (cut(a) != 0 || stopping(a)) break;
  }
}

static void *compactor_main(void *arg) {
  ak_archive_t *a = arg;
  pthread_setname_np(pthread_self(), "ak-compactor");
  ak_store_thread_init();
  pthread_mutex_lock(&a->mu);
  while (!a->stopping) {
    int64_t wait = a->interval_ms > 0 ? a->interval_ms : 10;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += wait / 1000;
    ts.tv_nsec += (wait % 1000) * 1000000;
    ts.tv_sec += ts.tv_nsec / 1000000000;
    ts.tv_nsec %= 1000000000;
    pthread_cond_timedwait(&a->cv, &a->mu, &ts);
    if (a->stopping) break;
    pthread_mutex_unlock(&a->mu);
    tick(a);
    pthread_mutex_lock(&a->mu);
  }
  pthread_mutex_unlock(&a->mu);
  return NULL;
}

/* ---------------------------------------------------------------- reconcile ---- */

typedef struct {
  ak_archive_t *a;
  uint64_t high;     /* past the highest seq archived (catalogued or found) */
  unsigned added, dropped;
  char err[512];
  bool failed;
} recon_t;

/* One key of the listing: an index of this node not catalogued is catalogued; a segment
 * of this node at or above the cursor with no index is deleted. */
static void recon_key(recon_t *rc, const char *key, ak_blob_list_t *page, size_t at) {
  ak_archive_t *a = rc->a;
  char day[11], node[AK_SEG_NODE_MAX + 1];
  uint64_t first, last;
  bool is_idx;
  if (ak_seg_key_parse(key, day, node, &first, &last, &is_idx) != 0 || strcmp(node, a->node) != 0) return;
  ak_cat_row_t r;
  int have = ak_cat_find_seq(a->inst->store, first, &r);
  if (have < 0) {
    rc->failed = true;
    snprintf(rc->err, sizeof rc->err, "cannot read the archive catalogue");
    return;
  }
  if (have == 0 && r.first_seq == first) { /* catalogued */
    if (last + 1 > rc->high) rc->high = last + 1;
    return;
  }
  if (!is_idx) {
    /* its index is the next key of the same name, if there is one */
    char want[AK_SEG_KEY_MAX];
    size_t kl = strlen(key);
    if (kl < 4 || kl >= sizeof want) return;
    memcpy(want, key, kl - 4);
    memcpy(want + kl - 4, ".idx", 5);
    /* ".idx" sorts before ".seg": the index, if any, was the key before */
    bool found = at > 0 && !strcmp(page->keys[at - 1], want);
    if (!found) {
      uint64_t size;
      char e[256];
      found = ak_blob_head(a->scope, want, &size, e, sizeof e) != AK_BLOB_NOT_FOUND; /* an error keeps it */
    }
    if (!found && first >= a->cursor) {
      char e[256];
      if (ak_blob_delete(a->scope, key, e, sizeof e) == AK_BLOB_OK) {
        rc->dropped++;
        ak_log(AK_LOG_WARNING, "archive", "segment without an index removed (its hooks are still in the store)",
               "key=%s", key);
      }
    }
    return;
  }
  if (have == 0) {
    /* a row holds this seq in another segment: a second copy never gets a row */
    ak_log(AK_LOG_WARNING, "archive", "uncatalogued segment overlaps a catalogued one; left alone", "key=%s", key);
    return;
  }
  /* an index with no row: catalogue it from the index */
  uint8_t *buf = NULL;
  size_t len = 0;
  char e[512];
  if (ak_blob_get(a->scope, key, &buf, &len, e, sizeof e) != AK_BLOB_OK) {
    rc->failed = true;
    snprintf(rc->err, sizeof rc->err, "%s", e);
    return;
  }
  ak_seg_index_t ix;
  if (ak_seg_index_parse(buf, len, &ix) != AK_SEG_OK || ix.first_seq != first || ix.last_seq != last ||
      ix.count == 0) {
    free(buf);
    ak_log(AK_LOG_WARNING, "archive", "damaged index left uncatalogued", "key=%s", key);
    return;
  }
  char segkey[AK_SEG_KEY_MAX];
  size_t kl = strlen(key);
  memcpy(segkey, key, kl - 4);
  memcpy(segkey + kl - 4, ".seg", 5);
  uint64_t segsize = 0;
  if (ak_blob_head(a->scope, segkey, &segsize, e, sizeof e) != AK_BLOB_OK || segsize != ix.seg_bytes) {
    free(buf);
    ak_log(AK_LOG_WARNING, "archive", "index whose segment is missing or short left uncatalogued", "key=%s", key);
    return;
  }
  memset(&r, 0, sizeof r);
  r.first_seq = first;
  r.last_seq = last;
  r.count = ix.count;
  r.seg_bytes = ix.seg_bytes;
  r.idx_bytes = len;
  r.min_received_ms = INT64_MAX;
  r.max_received_ms = INT64_MIN;
  for (uint32_t i = 0; i < ix.count; i++) {
    ak_seg_entry_t en;
    ak_seg_index_entry(&ix, i, &en);
    if (i == 0) memcpy(r.min_id, en.id, 16);
    if (i == ix.count - 1) memcpy(r.max_id, en.id, 16);
    if (en.received_at_ms < r.min_received_ms) r.min_received_ms = en.received_at_ms;
    if (en.received_at_ms > r.max_received_ms) r.max_received_ms = en.received_at_ms;
  }
  free(buf);
  r.archived_at_ms = ak_now_ms();
  snprintf(r.seg_key, sizeof r.seg_key, "%s%s", a->scope_prefix, segkey);
  snprintf(r.idx_key, sizeof r.idx_key, "%s%s", a->scope_prefix, key);
  ak_store_t *st = a->inst->store;
  ak_batch_t *b = ak_store_pin(st) == 0 ? ak_batch_new(st) : NULL;
  if (!b) {
    rc->failed = true;
    snprintf(rc->err, sizeof rc->err, "store unavailable");
    return;
  }
  ak_cat_put(b, &r);
  ak_store_unpin(st);
  if (write_synced(st, b) != 0) {
    rc->failed = true;
    snprintf(rc->err, sizeof rc->err, "cannot write a catalogue row");
  } else {
    rc->added++;
    if (last + 1 > rc->high) rc->high = last + 1;
    ak_log(AK_LOG_INFO, "archive", "segment catalogued at boot (its row was lost to a stop)", "key=%s", key);
  }
  ak_batch_free(b);
}

/* The listing of one prefix, every page. */
static void recon_prefix(recon_t *rc, const char *prefix) {
  char *after = NULL;
  do {
    ak_blob_list_t l;
    char e[512];
    if (ak_blob_list(rc->a->scope, prefix, after, LIST_PAGE, &l, e, sizeof e) != AK_BLOB_OK) {
      rc->failed = true;
      snprintf(rc->err, sizeof rc->err, "%s", e);
      free(after);
      return;
    }
    free(after);
    after = l.next ? strdup(l.next) : NULL;
    for (size_t i = 0; i < l.n && !rc->failed; i++) recon_key(rc, l.keys[i], &l, i);
    ak_blob_list_clear(&l);
  } while (after && !rc->failed);
  free(after);
}

/* Boot: segments a kill left between their PUT and their catalogue row. Only days from
 * the newest row's (a day back, for a clock that stepped) to tomorrow are listed; with no
 * row at all, the whole archive (a store restored from a backup older than the archive). */
static int reconcile(ak_archive_t *a, bool at_boot, char *err, size_t errlen) {
  recon_t rc = {.a = a, .high = a->cursor};
  ak_cat_row_t last;
  int have = ak_cat_last(a->inst->store, &last);
  if (have < 0) {
    snprintf(err, errlen, "cannot read the archive catalogue");
    return -1;
  }
  if (have == 1) {
    recon_prefix(&rc, "v1/");
  } else {
    if (last.last_seq + 1 > rc.high) rc.high = last.last_seq + 1;
    int64_t now = ak_now_ms();
    for (int64_t d = last.min_received_ms - DAY_MS; d <= now + DAY_MS && !rc.failed; d += DAY_MS) {
      char p[64];
      ak_seg_day_prefix(p, sizeof p, d);
      recon_prefix(&rc, p);
    }
  }
  if (rc.failed) {
    snprintf(err, errlen, "archive reconcile: %.400s", rc.err);
    return -1;
  }
  /* the cursor and next_seq past everything archived: a seq is never handed out twice,
   * and what a row holds is never archived again */
  ak_store_t *st = a->inst->store;
  if (rc.high > a->cursor || rc.high > ak_store_next_seq(st)) {
    ak_batch_t *b = ak_store_pin(st) == 0 ? ak_batch_new(st) : NULL;
    if (!b) {
      snprintf(err, errlen, "store unavailable");
      return -1;
    }
    if (rc.high > a->cursor) put_u64(b, AK_KEY_ARCHIVE_CURSOR, rc.high);
    /* after boot the writer owns next_seq: an archive ahead of the store's seqs means a
     * store older than its archive (a restore), which only a boot can repair */
    if (rc.high > ak_store_next_seq(st) && at_boot) put_u64(b, AK_KEY_NEXT_SEQ ":a", rc.high);
    if (rc.high > ak_store_next_seq(st) && !at_boot)
      ak_log(AK_LOG_ERROR, "archive", "the archive holds seqs the store has not handed out; restart the node",
             "archived_below=%llu", (unsigned long long)rc.high);
    ak_store_unpin(st);
    int w = write_synced(st, b);
    ak_batch_free(b);
    if (w != 0) {
      snprintf(err, errlen, "cannot write the archive cursor");
      return -1;
    }
    if (rc.high > a->cursor) a->cursor = rc.high;
    if (at_boot) ak_store_raise_next_seq(st, rc.high);
  }
  if (rc.added || rc.dropped)
    ak_log(AK_LOG_INFO, "archive", "reconciled", "catalogued=%u removed=%u cursor=%llu", rc.added, rc.dropped,
           (unsigned long long)a->cursor);
  return 0;
}

/* ------------------------------------------------------------------- module ---- */

static void archive_free(ak_archive_t *a) {
  if (!a) return;
  ak_seg_writer_free(a->sw);
  ak_blob_free(a->scope);
  ak_blob_free(a->blob);
  pthread_mutex_destroy(&a->mu);
  pthread_cond_destroy(&a->cv);
  free(a);
}

static int storage_open(ak_instance_t *inst, char **err) {
  const ak_storage_cfg_t *sc = ak_storage_cfg(inst->cfg);
  const ak_archive_cfg_t *ac = ak_archive_cfg(inst->cfg);
  char e[512] = "";
  ak_archive_t *a = calloc(1, sizeof *a);
  if (!a) return AK_MODULE_FAILED;
  a->inst = inst;
  pthread_mutex_init(&a->mu, NULL);
  pthread_cond_init(&a->cv, NULL);
  a->roll_bytes = sc->roll_bytes;
  a->roll_ms = sc->roll_ms;
  a->interval_ms = sc->interval_ms;
  int64_t day = DAY_MS;
  a->sweep_every_ms = 60000;
#ifdef AK_TEST_HOOKS
  const char *dm = getenv("ANKUSA_TEST_ARCHIVE_DAY_MS");
  if (dm && atoll(dm) > 0) {
    day = atoll(dm);
    a->sweep_every_ms = day / 4 > 0 ? day / 4 : 1;
  }
#endif
  a->retention_ms = ac && ac->retention_days > 0 ? ac->retention_days * day : 0;
  a->cat_retention_ms = sc->catalogue_retention_days > 0 ? sc->catalogue_retention_days * day : 0;
  const char *kp = sc->key_prefix ? sc->key_prefix : "";
  snprintf(a->scope_prefix, sizeof a->scope_prefix, "%sarchive/", kp);
  a->sw = ak_seg_writer_new();
  a->blob = ak_archive_open_blob(inst->cfg, inst->name, inst->httpc, e, sizeof e);
  if (a->blob) ak_blob_instrument(a->blob, inst->metrics, inst->name);
  if (!a->sw || !a->blob || !(a->scope = ak_blob_scope(a->blob, kp, "archive"))) {
    if (asprintf(err, "storage: cannot open the blob store: %s", e[0] ? e : "out of memory") < 0) *err = NULL;
    archive_free(a);
    return AK_MODULE_FAILED;
  }
  int rc = 0;
  a->cursor = meta_u64(inst->store, AK_KEY_ARCHIVE_CURSOR, &rc);
  if (rc != 0 || node_name(a, e, sizeof e) != 0) {
    if (asprintf(err, "storage: %s", rc != 0 ? "m:acursor is damaged" : e) < 0) *err = NULL;
    archive_free(a);
    return AK_MODULE_FAILED;
  }
  if (reconcile(a, true, e, sizeof e) != 0) {
    ak_log(AK_LOG_WARNING, "archive", "boot reconcile failed; the compactor retries it before archiving",
           "error=\"%s\"", e);
    a->need_reconcile = true;
  }
  a->read_pos = a->cursor;
  ak_metrics_t *m = inst->metrics;
  a->c_records = ak_metrics_instance_series(m, inst->name, "ankusa_compact_records_total",
                                            "Hooks written into archive segments.", AK_METRIC_COUNTER);
  a->c_bytes = ak_metrics_instance_series(m, inst->name, "ankusa_compact_bytes_total",
                                          "Bytes of archive segments written.", AK_METRIC_COUNTER);
  a->c_segments = ak_metrics_instance_series(m, inst->name, "ankusa_compact_segments_total",
                                             "Archive segments written and catalogued.", AK_METRIC_COUNTER);
  a->g_pending = ak_metrics_instance_series(m, inst->name, "ankusa_queue_archive_pending",
                                            "Committed hooks not archived yet (seqs above the compactor's cursor).",
                                            AK_METRIC_GAUGE);
  a->g_lag = ak_metrics_instance_series(m, inst->name, "ankusa_compact_lag_seconds",
                                        "Age of the oldest hook not archived yet (0: none).", AK_METRIC_GAUGE);
  const char *const sl[] = {"instance", "stage", NULL};
  ak_family_t *ff = ak_metrics_family(m, AK_METRIC_COMPACT_FAILURES, AK_METRIC_COMPACT_FAILURES_HELP,
                                      AK_METRIC_COUNTER, sl, NULL, 0);
  a->c_fail_segment = ak_metrics_series(ff, (const char *const[]){inst->name, "segment"});
  a->c_fail_retention = ak_metrics_series(ff, (const char *const[]){inst->name, "retention"});
  a->last_sweep_ms = 0;
  inst->archive = a;
  ak_dispatch_archived_below(inst->dispatch, a->cursor);
  ak_log(AK_LOG_INFO, "archive", "compactor ready", "store=%s node=%s cursor=%llu", ak_blob_type(a->blob), a->node,
         (unsigned long long)a->cursor);
  return 0;
}

static int storage_start(ak_instance_t *inst, char **err) {
  ak_archive_t *a = inst->archive;
  if (!a) return 0;
  if (pthread_create(&a->thread, NULL, compactor_main, a) != 0) {
    *err = strdup("storage: cannot start the compactor thread");
    return AK_MODULE_FAILED;
  }
  a->started = true;
  return 0;
}

static void storage_stop(ak_instance_t *inst) {
  ak_archive_t *a = inst->archive;
  if (!a || !a->started) return;
  pthread_mutex_lock(&a->mu);
  a->stopping = true;
  pthread_cond_broadcast(&a->cv);
  pthread_mutex_unlock(&a->mu);
  pthread_join(a->thread, NULL);
  a->started = false;
}

static void storage_close(ak_instance_t *inst) {
  archive_free(inst->archive);
  inst->archive = NULL;
}

const ak_module_t ak_mod_storage = {
  .name = "storage",
  .section = "storage",
  .doc = "the archive: the compactor's blob store and segment sizes (storage role)",
  .options = storage_rows,
  .cfg_size = sizeof(ak_storage_cfg_t),
  .check = storage_check,
  .roles = AK_ROLE_STORAGE,
  .open = storage_open,
  .start = storage_start,
  .stop = storage_stop,
  .close = storage_close,
};

const ak_module_t ak_mod_archive = {
  .name = "archive",
  .section = "archive",
  .doc = "archive retention (the seed's; off by default)",
  .options = archive_rows,
  .cfg_size = sizeof(ak_archive_cfg_t),
  .check = archive_check,
};
