/* Unit tests: the RocksDB store (open, refusal of orphaned data files, read-only open)
 * and the group-commit writer (dense seqs, one batch, bounds, closed store). */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <rocksdb/c.h> /* only its perf context: the memtable-hint test counts key comparisons */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/envelope.h"
#include "core/ids.h"
#include "core/sources.h"
#include "fixture.h"
#include "queue/writer.h"
#include "store/batch.h"
#include "store/crc32c.h"
#include "store/keys.h"
#include "store/marker.h"
#include "store/store.h"
#include "writer_waiter.h"

/* The suite's temp dir (fx.dir). The store's own tests (open, refusals, ids, batches,
 * cursors, insert hints) use the store API on paths under it: the object under test is
 * the store itself. The writer's tests open a node in it (its store where the store
 * module opens it, <dir>/default/store). */
static ak_fx_t fx;

static void setup(void) { ak_fx_tmp(&fx, "store-test"); }

static void teardown(void) {
  ak_fx_close(&fx);
  ak_fx_rm(&fx);
}

TestSuite(store, .init = setup, .fini = teardown);

Test(store, open_creates_and_reopens_with_meta) {
  char p[300];
  snprintf(p, sizeof p, "%s/default/store", fx.dir);
  ak_store_t *st = ak_store_new(p, false);
  char *err = NULL;
  cr_assert_eq(ak_store_open(st, &err), 0, "%s", err ? err : "");
  cr_assert_eq(ak_store_next_seq(st), 1, "a new store starts at seq 1");
  ak_batch_t *wb = ak_batch_new(st);
  uint8_t v[8];
  ak_put_u64(v, 42);
  ak_batch_put(wb, AK_CF_DEFAULT, AK_KEY_NEXT_SEQ, strlen(AK_KEY_NEXT_SEQ), v, 8);
  ak_wf_class_t cls;
  cr_assert_eq(ak_store_write(st, wb, true, &cls, &err), 0);
  ak_batch_free(wb);
  ak_store_close(st);
  cr_assert_not(ak_store_is_open(st));
  wb = ak_batch_new(st);
  cr_assert_neq(ak_store_write(st, wb, true, &cls, NULL), 0, "closed store refuses");
  ak_batch_free(wb);
  cr_assert_eq(ak_store_open(st, &err), 0);
  cr_assert_eq(ak_store_next_seq(st), 42);
  ak_store_free(st);
}

Test(store, refuses_data_files_without_current) {
  char p[300], f[400];
  snprintf(p, sizeof p, "%s/store", fx.dir);
  mkdir(p, 0700);
  snprintf(f, sizeof f, "%s/000012.sst", p);
  int fd = open(f, O_CREAT | O_WRONLY, 0600);
  cr_assert_geq(fd, 0);
  cr_assert_eq(write(fd, "x", 1), 1);
  close(fd);
  ak_store_t *st = ak_store_new(p, false);
  char *err = NULL;
  cr_assert_neq(ak_store_open(st, &err), 0, "must not start empty over data files");
  cr_assert_not_null(strstr(err, "CURRENT"), "message names the missing file: %s", err);
  cr_assert_not_null(strstr(err, p), "message names the path: %s", err);
  free(err);
  struct stat sb;
  cr_assert_eq(stat(f, &sb), 0, "the data file is left alone");
  ak_store_free(st);
}

Test(store, read_only_open_of_missing_store_fails) {
  char p[300];
  snprintf(p, sizeof p, "%s/nothing", fx.dir);
  ak_store_t *st = ak_store_new(p, true);
  char *err = NULL;
  cr_assert_neq(ak_store_open(st, &err), 0);
  free(err);
  struct stat sb;
  cr_assert_neq(stat(p, &sb), 0, "read-only open creates nothing");
  ak_store_free(st);
}

Test(store, classify) {
  cr_assert_eq(ak_store_classify("IO error: No space left on device: While appending to file"), AK_WF_NO_SPACE);
  cr_assert_eq(ak_store_classify("Corruption: block checksum mismatch"), AK_WF_CORRUPTION);
  cr_assert_eq(ak_store_classify("IO error: Input/output error"), AK_WF_IO_ERROR);
  cr_assert_eq(ak_store_classify("Busy: "), AK_WF_BUSY);
  cr_assert_eq(ak_store_classify("something else"), AK_WF_OTHER);
}

/* ---- writer ---- */


/* Opens the suite's node with extra before its sources (one source, two log sinks) and
 * the modules of only. */
static void node_open(const char *extra, const char *const *only) {
  char yaml[512];
  snprintf(yaml, sizeof yaml, "%ssources:\n  demo: {sinks: [{type: log}, {type: log}]}\n", extra);
  ak_fx_open(&fx, yaml, only);
}

static uint8_t *make_rec(ak_idgen_t *ids, uint8_t id[16], size_t *len, const char *body) {
  ak_envelope_t e = {0};
  ak_uuid7_new(ids, 1000, e.id);
  memcpy(id, e.id, 16);
  e.tenant = "default";
  e.tenant_len = 7;
  e.source = "demo";
  e.source_len = 4;
  e.body = (const uint8_t *)body;
  e.body_len = strlen(body);
  return ak_envelope_encode(&e, len);
}

typedef struct {
  int n;
  uint64_t min_seq, max_seq;
} scan_t;

static int count_hook(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  (void)v;
  (void)vl;
  scan_t *s = ctx;
  uint64_t seq = ak_get_u64((const uint8_t *)k);
  cr_assert_eq(kl, 8);
  if (!s->n || seq < s->min_seq) s->min_seq = seq;
  if (seq > s->max_seq) s->max_seq = seq;
  s->n++;
  return 0;
}

static int count_any(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  (void)k; (void)kl; (void)v; (void)vl;
  (*(int *)ctx)++;
  return 0;
}

typedef struct {
  uint64_t next, hooks;
  int markers;
  bool bad;
  char why[128];
} markers_t;

/* Each group marker: decodes, starts where the last one ended, one set (the fixture's
 * first source, tenant "default", its two sinks), every hook in it. */
static int check_marker(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  markers_t *m = ctx;
  ak_marker_t mk;
  if (!m->next) m->next = 1;
  if (kl != AK_GROUP_KEY_LEN || ak_marker_decode((const uint8_t *)v, vl, &mk) != 0) {
    snprintf(m->why, sizeof m->why, "marker %d does not decode", m->markers);
    m->bad = true;
    return 1;
  }
  uint64_t first = ak_get_u64((const uint8_t *)k + 1);
  const uint8_t *pos = NULL;
  ak_marker_set_t set;
  if (first != m->next || mk.nsets != 1 || ak_marker_next_set(&mk, &pos, &set) != 0 || set.nsinks != 2 ||
      set.tenant_len != 7 || memcmp(set.tenant, "default", 7) != 0) {
    snprintf(m->why, sizeof m->why, "marker at %llu (expected %llu) has the wrong shape", (unsigned long long)first,
             (unsigned long long)m->next);
    m->bad = true;
    return 1;
  }
  for (uint32_t i = 0; i < mk.count; i++)
    if (ak_marker_hook_set(&mk, i) != 0) m->bad = true;
  m->next = first + mk.count;
  m->hooks += mk.count;
  m->markers++;
  return 0;
}

/* The store and the writer by their modules; the writer started by hand. */
static void writer_roundtrip(const char *batcher_yaml) {
  static const char *const only[] = {"node", "store", "batcher", NULL};
  node_open(batcher_yaml, only);
  ak_writer_t *w = fx.inst->writer;
  cr_assert_not_null(w);
  cr_assert_eq(ak_writer_start(w), 0);
  enum { N = 300 };
  static ak_write_req_t reqs[N];
  static uint8_t minted[N][16];
  waiter_t wt = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
  for (int i = 0; i < N; i++) {
    memset(&reqs[i], 0, sizeof reqs[i]);
    reqs[i].rec = make_rec(&fx.inst->ids, reqs[i].id, &reqs[i].rec_len, "hello");
    memcpy(minted[i], reqs[i].id, 16);
    reqs[i].body_len = 5;
    reqs[i].source = &ak_sources_cfg(fx.cfg)->v[0];
    reqs[i].tenant = "default";
    reqs[i].tenant_len = 7;
    reqs[i].done = on_done;
    reqs[i].ctx = &wt;
    cr_assert_eq(ak_writer_submit(w, &reqs[i]), AK_WR_QUEUED);
  }
  wait_for(&wt, N);
  for (int i = 0; i < N; i++) {
    cr_assert_eq(reqs[i].status, AK_WR_COMMITTED);
    cr_assert_eq(reqs[i].seq, (uint64_t)i + 1, "seqs are dense in submission order");
    ak_envelope_t d;
    cr_assert_eq(ak_envelope_decode(reqs[i].rec, reqs[i].rec_len, &d), 0);
    cr_assert_eq(d.seq, reqs[i].seq, "the stored record carries its seq");
    /* the id was sealed: same version, variant, ms and counter; rand_b carries the seq */
    cr_assert(reqs[i].id_sealed);
    cr_assert_eq(memcmp(d.id, reqs[i].id, 16), 0, "the record carries the sealed id");
    cr_assert_eq(memcmp(reqs[i].id, minted[i], 8), 0, "ms, version and counter are kept");
    cr_assert_neq(memcmp(reqs[i].id + 8, minted[i] + 8, 8), 0);
    cr_assert_eq(reqs[i].id[8] >> 6, 2, "RFC 9562 variant");
    cr_assert_eq(ak_uuid7_unseal(ak_store_id_key(fx.inst->store), reqs[i].id), reqs[i].seq);
    ak_envelope_clear(&d);
    free(reqs[i].rec);
  }
  scan_t s = {0};
  cr_assert_eq(ak_store_scan(fx.inst->store, AK_CF_HOOKS, NULL, 0, count_hook, &s), 0);
  cr_assert_eq(s.n, N);
  cr_assert_eq(s.min_seq, 1);
  cr_assert_eq(s.max_seq, N);
  int deliveries = 0, due = 0, arch = 0, ids = 0;
  ak_store_scan(fx.inst->store, AK_CF_DELIVERIES, NULL, 0, count_any, &deliveries);
  ak_store_scan(fx.inst->store, AK_CF_INDEX, "d", 1, count_any, &due);
  ak_store_scan(fx.inst->store, AK_CF_INDEX, "a", 1, count_any, &arch);
  ak_store_scan(fx.inst->store, AK_CF_INDEX, "i", 1, count_any, &ids);
  cr_assert_eq(deliveries, 0, "no row per delivery: the hook log is the markers");
  cr_assert_eq(due, 0, "no due key per delivery");
  cr_assert_eq(arch, 0, "no archive obligation");
  cr_assert_eq(ids, 0, "sealed ids need no index key");
  /* the group markers cover every seq exactly once, each hook in the source's set with
   * its two sinks */
  markers_t mk = {0};
  cr_assert_eq(ak_store_scan(fx.inst->store, AK_CF_INDEX, "g", 1, check_marker, &mk), 0);
  cr_assert_not(mk.bad, "%s", mk.why);
  cr_assert_eq(mk.hooks, N);
  cr_assert_eq(mk.next, N + 1, "markers are contiguous from seq 1");
  cr_assert_geq(mk.markers, 1);
  for (int i = 0; i < N; i += 7) {
    char *v = NULL;
    size_t vl = 0;
    uint64_t seq = 0;
    cr_assert_eq(ak_store_find_hook(fx.inst->store, reqs[i].id, &seq, &v, &vl), 0);
    cr_assert_eq(seq, reqs[i].seq);
    cr_assert_eq(memcmp(v + AK_ENV_ID_OFFSET, reqs[i].id, 16), 0);
    free(v);
    cr_assert_eq(ak_store_find_hook(fx.inst->store, minted[i], &seq, &v, &vl), 1, "the unsealed id names nothing");
  }
  /* reopen (a restart: the writer stops, the store closes and opens again; the open is
   * asserted): the seq marker and hook count were committed with the hooks */
  ak_fx_reopen(&fx);
  cr_assert_eq(ak_store_next_seq(fx.inst->store), N + 1);
  cr_assert_eq(ak_store_hook_count(fx.inst->store), N);
  ak_fx_close(&fx);
}

Test(store, writer_commits_dense_seqs_and_all_rows) { writer_roundtrip(""); }

/* three writer threads with small batches: seqs still dense in submission order, and the
 * per-writer seq markers and hook counters add up after a reopen */
Test(store, writer_threads_share_the_queue) { writer_roundtrip("batcher: {partitions: 3, max_batch: 7}\n"); }

/* The store by its module, the writers made by hand (one on an open store, one on a
 * closed one), never started. */
Test(store, writer_bounds_and_closed_store) {
  static const char *const only[] = {"node", "store", NULL};
  node_open("batcher: {max_queue: 2, max_queue_bytes: 100}\n", only);
  ak_writer_t *w = ak_writer_new(fx.inst); /* not started: records stay queued */
  ak_write_req_t a = {0}, b = {0}, c = {0}, big = {0};
  a.body_len = b.body_len = c.body_len = 10;
  big.body_len = 101;
  cr_assert_eq(ak_writer_submit(w, &big), AK_WR_OVERLOAD, "bytes bound");
  cr_assert_eq(ak_writer_submit(w, &a), AK_WR_QUEUED);
  cr_assert_eq(ak_writer_submit(w, &b), AK_WR_QUEUED);
  cr_assert_eq(ak_writer_submit(w, &c), AK_WR_OVERLOAD, "records bound");
  ak_writer_free(w); /* never started: nothing to answer */
  ak_store_close(fx.inst->store);
  w = ak_writer_new(fx.inst);
  cr_assert_eq(ak_writer_submit(w, &c), AK_WR_STORE_UNAVAILABLE, "a closed store refuses at once");
  const char *reason;
  cr_assert_not(ak_writer_ready(w, &reason));
  ak_writer_free(w);
  ak_fx_close(&fx);
}

/* ---- hook ids: sealed seqs, the id key, the 'i' index for the rest ---- */

/* a store at dir/name, opened (asserted) */
static ak_store_t *open_at(const char *name, bool read_only) {
  char p[300];
  snprintf(p, sizeof p, "%s/%s", fx.dir, name);
  ak_store_t *st = ak_store_new(p, read_only);
  char *err = NULL;
  cr_assert_eq(ak_store_open(st, &err), 0, "%s", err ? err : "");
  return st;
}

static void put_raw(ak_store_t *st, int cf, const void *k, size_t kl, const void *v, size_t vl) {
  ak_batch_t *wb = ak_batch_new(st);
  ak_batch_put(wb, cf, k, kl, v, vl);
  ak_wf_class_t cls;
  char *err = NULL;
  cr_assert_eq(ak_store_write(st, wb, true, &cls, &err), 0, "%s", err ? err : "");
  ak_batch_free(wb);
}

static void put_hook(ak_store_t *st, ak_idgen_t *ids, uint64_t seq, uint8_t id[16], bool index_key) {
  size_t rl = 0;
  uint8_t *rec = make_rec(ids, id, &rl, "legacy");
  ak_envelope_set_seq(rec, seq);
  uint8_t hk[AK_HOOK_KEY_LEN];
  ak_key_hook(hk, seq);
  put_raw(st, AK_CF_HOOKS, hk, sizeof hk, rec, rl);
  free(rec);
  if (index_key) {
    uint8_t ik[AK_ID_KEY_LEN], sv[8];
    ak_key_id(ik, id);
    ak_put_u64(sv, seq);
    put_raw(st, AK_CF_INDEX, ik, sizeof ik, sv, sizeof sv);
  }
}

static void expect_found(ak_store_t *st, const uint8_t id[16], uint64_t want_seq) {
  char *v = NULL;
  size_t vl = 0;
  uint64_t seq = 0;
  cr_assert_eq(ak_store_find_hook(st, id, &seq, &v, &vl), 0);
  cr_assert_eq(seq, want_seq);
  cr_assert_eq(memcmp(v + AK_ENV_ID_OFFSET, id, 16), 0);
  free(v);
}

static int find_rc(ak_store_t *st, const uint8_t id[16]) {
  char *v = NULL;
  size_t vl = 0;
  uint64_t seq = 0;
  int rc = ak_store_find_hook(st, id, &seq, &v, &vl);
  free(v);
  return rc;
}

/* A store keeps one id key for life: made at the first writable open, the same after a
 * reopen and in a read-only open. */
Test(store, the_id_key_is_made_once_and_kept) {
  ak_store_t *st = open_at("store", false);
  cr_assert_not_null(ak_store_id_key(st));
  uint8_t k1[16];
  memcpy(k1, ak_store_id_key(st), 16);
  ak_store_close(st);
  char *err = NULL;
  cr_assert_eq(ak_store_open(st, &err), 0);
  cr_assert_eq(memcmp(ak_store_id_key(st), k1, 16), 0, "a reopen reads the same key");
  ak_store_free(st);
  st = open_at("store", false);
  cr_assert_eq(memcmp(ak_store_id_key(st), k1, 16), 0, "a new process reads the same key");
  ak_store_free(st);
  st = open_at("store", true);
  cr_assert_eq(memcmp(ak_store_id_key(st), k1, 16), 0, "so does a read-only open");
  ak_store_free(st);
  st = open_at("store2", false);
  cr_assert_neq(memcmp(ak_store_id_key(st), k1, 16), 0, "another store gets another key");
  ak_store_free(st);
}

/* A damaged id key refuses the store, naming it; it is never silently replaced (that
 * would orphan every id the store gave out). */
Test(store, a_damaged_id_key_refuses_the_open) {
  ak_store_t *st = open_at("store", false);
  char *err = NULL;
  put_raw(st, AK_CF_DEFAULT, AK_KEY_ID_SEAL, strlen(AK_KEY_ID_SEAL), "short", 5);
  ak_store_close(st);
  cr_assert_neq(ak_store_open(st, &err), 0);
  cr_assert_not_null(strstr(err, "id_key"), "%s", err);
  cr_assert_not_null(strstr(err, "damaged"), "%s", err);
  free(err);
  ak_store_free(st);
}

/* Hooks stored before ids were sealed (random rand_b, an 'i' key each), and hooks
 * released from the pen, are found through the index; a sealed id through its seq; an
 * id that merely unseals to a stored seq is not that hook. */
Test(store, find_hook_by_sealed_id_or_the_index) {
  ak_store_t *st = open_at("store", false);
  ak_idgen_t ids;
  ak_idgen_init(&ids);
  const uint8_t *key = ak_store_id_key(st);
  uint8_t legacy[16], sealed[16], unindexed[16];
  put_hook(st, &ids, 1, legacy, true);
  /* a sealed hook: the id is made first, then sealed with its seq, as the writer does */
  {
    size_t rl = 0;
    uint8_t *rec = make_rec(&ids, sealed, &rl, "sealed");
    cr_assert(ak_uuid7_seal(key, sealed, 2));
    ak_envelope_set_id(rec, sealed);
    ak_envelope_set_seq(rec, 2);
    uint8_t hk[AK_HOOK_KEY_LEN];
    ak_key_hook(hk, 2);
    put_raw(st, AK_CF_HOOKS, hk, sizeof hk, rec, rl);
    free(rec);
  }
  put_hook(st, &ids, 3, unindexed, false);
  expect_found(st, legacy, 1);
  expect_found(st, sealed, 2);
  cr_assert_eq(find_rc(st, unindexed), 1, "neither sealed nor indexed: not found");
  /* any id unseals to some seq: one made to unseal to 1 or 3 still names nothing */
  uint8_t forged[16];
  memcpy(forged, legacy, 16);
  cr_assert(ak_uuid7_seal(key, forged, 1));
  cr_assert_eq(find_rc(st, forged), 1, "unseals to seq 1, but seq 1 holds another id");
  memcpy(forged, sealed, 16);
  forged[5] ^= 1; /* another ms: the seal no longer opens to 2 */
  cr_assert_eq(find_rc(st, forged), 1);
  memcpy(forged, sealed, 16);
  forged[15] ^= 1; /* rand_b off by one bit: seq 3, whose id differs */
  cr_assert_eq(ak_uuid7_unseal(key, forged), 3);
  cr_assert_eq(find_rc(st, forged), 1);
  /* a read-only open finds both kinds the same way */
  ak_store_free(st);
  st = open_at("store", true);
  expect_found(st, legacy, 1);
  expect_found(st, sealed, 2);
  ak_store_free(st);
}

/* ---- the write batch (store/batch.h) and the cursor ---- */

/* The value at (cf, key) as a string, or NULL when absent (asserted readable). */
static char *get_str(ak_store_t *st, int cf, const char *k) {
  char *v = NULL;
  size_t vl = 0;
  int rc = ak_store_get(st, cf, k, strlen(k), &v, &vl);
  cr_assert_geq(rc, 0, "read of %s failed", k);
  if (rc == 1) return NULL;
  char *s = malloc(vl + 1);
  memcpy(s, v, vl);
  s[vl] = 0;
  free(v);
  return s;
}

static void expect_val(ak_store_t *st, int cf, const char *k, const char *want) {
  char *got = get_str(st, cf, k);
  if (!want) cr_expect_null(got, "%s: expected absent, found \"%s\"", k, got ? got : "");
  else cr_expect(got && strcmp(got, want) == 0, "%s: expected \"%s\", found \"%s\"", k, want, got ? got : "(absent)");
  free(got);
}

static void write_ok(ak_store_t *st, ak_batch_t *b, bool sync) {
  ak_wf_class_t cls;
  char *err = NULL;
  cr_assert_eq(ak_store_write(st, b, sync, &cls, &err), 0, "%s", err ? err : "");
}

Test(store, a_batch_lands_whole_at_its_write_and_not_before) {
  ak_store_t *st = open_at("s", false);
  put_raw(st, AK_CF_DEFAULT, "old", 3, "1", 1);
  put_raw(st, AK_CF_INDEX, "gone", 4, "2", 1);
  ak_batch_t *b = ak_batch_new(st);
  cr_assert_not_null(b);
  cr_expect_eq(ak_batch_count(b), 0);
  ak_batch_put(b, AK_CF_DEFAULT, "a", 1, "va", 2);
  ak_batch_put(b, AK_CF_HOOKS, "h", 1, "vh", 2);
  ak_batch_put(b, AK_CF_DEFAULT, "old", 3, "new", 3);
  ak_batch_delete(b, AK_CF_INDEX, "gone", 4);
  ak_batch_put(b, AK_CF_DEDUPE, "e", 1, "", 0);
  cr_expect_eq(ak_batch_count(b), 5);
  /* built, not written: the store has none of it */
  expect_val(st, AK_CF_DEFAULT, "a", NULL);
  expect_val(st, AK_CF_HOOKS, "h", NULL);
  expect_val(st, AK_CF_DEFAULT, "old", "1");
  expect_val(st, AK_CF_INDEX, "gone", "2");
  expect_val(st, AK_CF_DEDUPE, "e", NULL);
  write_ok(st, b, true);
  expect_val(st, AK_CF_DEFAULT, "a", "va");
  expect_val(st, AK_CF_HOOKS, "h", "vh");
  expect_val(st, AK_CF_DEFAULT, "old", "new");
  expect_val(st, AK_CF_INDEX, "gone", NULL);
  expect_val(st, AK_CF_DEDUPE, "e", "");
  /* each family got its own key: the same key in another family is not there */
  expect_val(st, AK_CF_DEFAULT, "h", NULL);
  expect_val(st, AK_CF_HOOKS, "a", NULL);
  ak_batch_free(b);
  /* and it was durable: a reopen reads it back */
  ak_store_close(st);
  char *err = NULL;
  cr_assert_eq(ak_store_open(st, &err), 0, "%s", err ? err : "");
  expect_val(st, AK_CF_HOOKS, "h", "vh");
  expect_val(st, AK_CF_INDEX, "gone", NULL);
  ak_store_free(st);
}

Test(store, a_cleared_batch_writes_nothing_and_is_reused) {
  ak_store_t *st = open_at("s", false);
  ak_batch_t *b = ak_batch_new(st);
  ak_batch_put(b, AK_CF_DEFAULT, "x", 1, "1", 1);
  ak_batch_delete(b, AK_CF_DEFAULT, "y", 1);
  cr_expect_eq(ak_batch_count(b), 2);
  ak_batch_clear(b);
  cr_expect_eq(ak_batch_count(b), 0);
  write_ok(st, b, false);
  expect_val(st, AK_CF_DEFAULT, "x", NULL);
  /* reused: only what was added since the clear */
  ak_batch_put(b, AK_CF_DEFAULT, "y", 1, "2", 1);
  cr_expect_eq(ak_batch_count(b), 1);
  write_ok(st, b, false);
  expect_val(st, AK_CF_DEFAULT, "x", NULL);
  expect_val(st, AK_CF_DEFAULT, "y", "2");
  /* a written batch still holds its ops until cleared: writing it again rewrites them */
  put_raw(st, AK_CF_DEFAULT, "y", 1, "3", 1);
  write_ok(st, b, false);
  expect_val(st, AK_CF_DEFAULT, "y", "2");
  ak_batch_free(b);
  ak_batch_free(NULL);
  ak_store_free(st);
}

/* A batch kept across a reopen (the dispatcher's outcome batch) writes to the same
 * families; an op made while the store was closed makes the whole batch refuse, so a
 * change is never written in part. */
Test(store, a_batch_across_a_reopen_and_an_op_on_a_closed_store) {
  ak_store_t *st = open_at("s", false);
  char *err = NULL;
  ak_batch_t *b = ak_batch_new(st);
  ak_batch_put(b, AK_CF_DELIVERIES, "d", 1, "1", 1);
  ak_store_close(st);
  cr_assert_eq(ak_store_open(st, &err), 0, "%s", err ? err : "");
  write_ok(st, b, false);
  expect_val(st, AK_CF_DELIVERIES, "d", "1");
  expect_val(st, AK_CF_DEFAULT, "d", NULL);

  ak_batch_clear(b);
  ak_batch_put(b, AK_CF_DEFAULT, "before", 6, "1", 1);
  ak_store_close(st);
  ak_batch_put(b, AK_CF_DEFAULT, "during", 6, "1", 1);
  ak_batch_delete(b, AK_CF_DEFAULT, "x", 1);
  cr_assert_eq(ak_store_open(st, &err), 0, "%s", err ? err : "");
  ak_wf_class_t cls;
  cr_expect_neq(ak_store_write(st, b, true, &cls, &err), 0, "a batch that lost an op is refused");
  cr_expect_str_eq(err, "store is closed");
  free(err);
  err = NULL;
  cr_expect_eq(ak_store_pin(st), 0);
  cr_expect_neq(ak_store_write_pinned(st, b, true, NULL, NULL), 0, "pinned alike");
  ak_store_unpin(st);
  expect_val(st, AK_CF_DEFAULT, "before", NULL);
  expect_val(st, AK_CF_DEFAULT, "during", NULL);
  /* a clear forgets the lost op */
  ak_batch_clear(b);
  ak_batch_put(b, AK_CF_DEFAULT, "after", 5, "1", 1);
  write_ok(st, b, true);
  expect_val(st, AK_CF_DEFAULT, "after", "1");
  ak_batch_free(b);
  ak_store_free(st);
}

typedef struct {
  char keys[8][8];
  int n;
} seen_t;

Test(store, a_cursor_seeks_and_steps_in_key_order) {
  ak_store_t *st = open_at("s", false);
  ak_batch_t *b = ak_batch_new(st);
  const char *keys[] = {"b2", "a1", "b1", "c1", "b3"};
  for (int i = 0; i < 5; i++) ak_batch_put(b, AK_CF_INDEX, keys[i], 2, keys[i], 2);
  ak_batch_put(b, AK_CF_DEFAULT, "b0", 2, "x", 1);
  write_ok(st, b, false);
  ak_batch_free(b);
  cr_assert_eq(ak_store_pin(st), 0);
  for (int fill = 0; fill < 2; fill++) {
    ak_store_cursor_t *c = ak_store_cursor_new_pinned(st, AK_CF_INDEX, fill);
    cr_assert_not_null(c);
    ak_store_cursor_seek(c, "b", 1);
    seen_t s = {.n = 0};
    for (; ak_store_cursor_valid(c) && s.n < 8; ak_store_cursor_next(c)) {
      size_t kl, vl;
      const char *k = ak_store_cursor_key(c, &kl), *v = ak_store_cursor_value(c, &vl);
      cr_assert_eq(kl, 2);
      cr_assert_eq(vl, 2);
      cr_expect_eq(memcmp(k, v, 2), 0);
      memcpy(s.keys[s.n], k, 2);
      s.keys[s.n++][2] = 0;
    }
    cr_expect_eq(ak_store_cursor_status(c), 0);
    cr_assert_eq(s.n, 4, "b1 b2 b3 c1, not a1 nor another family's b0");
    cr_expect_str_eq(s.keys[0], "b1");
    cr_expect_str_eq(s.keys[1], "b2");
    cr_expect_str_eq(s.keys[2], "b3");
    cr_expect_str_eq(s.keys[3], "c1");
    /* seek again on the same cursor, past the end */
    ak_store_cursor_seek(c, "z", 1);
    cr_expect_not(ak_store_cursor_valid(c));
    ak_store_cursor_seek(c, "a", 1);
    size_t kl;
    cr_assert(ak_store_cursor_valid(c));
    cr_expect_eq(memcmp(ak_store_cursor_key(c, &kl), "a1", 2), 0);
    ak_store_cursor_free(c);
  }
  ak_store_unpin(st);
  ak_store_cursor_free(NULL);
  ak_store_close(st);
  cr_expect_null(ak_store_cursor_new_pinned(st, AK_CF_INDEX, false), "no cursor on a closed store");
  ak_store_free(st);
}

/* ---- CRC32C: ankusa's definition of rocksdb::crc32c::Extend (store/crc32c.c) ---- */

typedef uint32_t (*extend_fn)(uint32_t, const char *, size_t);

Test(crc32c, gives_the_standard_check_value) {
  /* CRC-32C of "123456789" (RFC 3720's polynomial) */
  cr_assert_eq(ak_crc32c_extend(0, "123456789", 9), 0xE3069283u);
  cr_assert_eq(ak_crc32c_extend(0, "", 0), 0u);
}

Test(crc32c, extends_a_crc_like_one_pass_over_both_parts) {
  const char *s = "the quick brown fox jumps over the lazy dog, twice over";
  size_t n = strlen(s);
  uint32_t whole = ak_crc32c_extend(0, s, n);
  for (size_t cut = 0; cut <= n; cut++)
    cr_assert_eq(ak_crc32c_extend(ak_crc32c_extend(0, s, cut), s + cut, n - cut), whole, "cut at %zu", cut);
}

Test(crc32c, equals_rocksdb_own_on_every_length_and_alignment) {
  /* RTLD_NEXT from this executable is librocksdb: its own Extend, the table-driven one */
  extend_fn lib = (extend_fn)dlsym(RTLD_NEXT, "_ZN7rocksdb6crc32c6ExtendEjPKcm");
  cr_assert_not_null(lib);
  cr_assert_neq((void *)lib, (void *)ak_crc32c_extend, "RTLD_NEXT found ours, not the library's");
  size_t big = 1u << 20;
  unsigned char *buf = malloc(big + 8);
  cr_assert_not_null(buf);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < big + 8; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    buf[i] = (unsigned char)x;
  }
  for (size_t align = 0; align < 8; align++)
    for (size_t len = 0; len <= 1100; len++) {
      uint32_t init = (uint32_t)(len * 2654435761u + align);
      const char *p = (const char *)buf + align;
      cr_assert_eq(ak_crc32c_extend(init, p, len), lib(init, p, len), "align %zu len %zu", align, len);
    }
  cr_assert_eq(ak_crc32c_extend(7, (const char *)buf + 3, big), lib(7, (const char *)buf + 3, big));
  free(buf);
}

Test(crc32c, is_the_definition_rocksdb_calls_bind_to) {
  /* librocksdb calls Extend through its PLT; the dynamic linker resolves that to the first
   * definition in load order, the same one RTLD_DEFAULT finds: the executable's. */
  cr_assert_eq(dlsym(RTLD_DEFAULT, "_ZN7rocksdb6crc32c6ExtendEjPKcm"), (void *)ak_crc32c_extend);
  __builtin_cpu_init();
  cr_assert_str_eq(ak_crc32c_impl(), __builtin_cpu_supports("sse4.2") ? "sse4.2" : "rocksdb");
}

/* ---- memtable insert hints (store.c, base_options) ---- */

/* Commits put rows and due keys at the tail of their families; the dispatcher's outcome
 * tombstones land behind, each just before its row's own entry. Without a hint every
 * such tombstone searched the skiplist from its top level (~124 key comparisons with
 * 150k hooks, ~100 here); with one it fixes only the levels that moved (~58, ~50 here). */
Test(store, outcome_tombstones_reuse_the_insert_position) {
  char p[300];
  snprintf(p, sizeof p, "%s/default/store", fx.dir);
  ak_store_t *st = ak_store_new(p, false);
  char *err = NULL;
  cr_assert_eq(ak_store_open(st, &err), 0, "%s", err ? err : "");
  rocksdb_set_perf_level(rocksdb_enable_count);
  rocksdb_perfcontext_t *pc = rocksdb_perfcontext_create();
  ak_batch_t *wb = ak_batch_new(st);
  ak_wf_class_t cls;
  const int per = 28, batches = 1500, lag = 300;
  uint64_t cmp = 0, tombstones = 0;
  for (int b = 0; b < batches + lag; b++) {
    ak_batch_clear(wb);
    for (int i = 0; b < batches && i < per; i++) { /* a commit */
      uint64_t seq = (uint64_t)b * per + (uint64_t)i + 1;
      uint8_t k[AK_DUE_KEY_MAX], dk[AK_DELIVERY_KEY_LEN];
      size_t kl = ak_key_due(k, "default", 7, 1700000000000 + b / 4, seq, 0);
      ak_batch_put(wb, AK_CF_INDEX, k, kl, "v", 1);
      ak_key_delivery(dk, seq, 0);
      ak_batch_put(wb, AK_CF_DELIVERIES, dk, sizeof dk, "row", 3);
    }
    if (ak_batch_count(wb)) cr_assert_eq(ak_store_write(st, wb, false, &cls, &err), 0);
    if (b < lag) continue;
    ak_batch_clear(wb);
    int ob = b - lag;
    for (int i = 0; i < per; i++) { /* the outcomes of a commit made `lag` commits ago */
      uint64_t seq = (uint64_t)ob * per + (uint64_t)(i ^ 1) + 1; /* finished a little out of order */
      uint8_t k[AK_DUE_KEY_MAX], dk[AK_DELIVERY_KEY_LEN];
      size_t kl = ak_key_due(k, "default", 7, 1700000000000 + ob / 4, seq, 0);
      ak_batch_delete(wb, AK_CF_INDEX, k, kl);
      ak_key_delivery(dk, seq, 0);
      ak_batch_delete(wb, AK_CF_DELIVERIES, dk, sizeof dk);
    }
    rocksdb_perfcontext_reset(pc);
    cr_assert_eq(ak_store_write(st, wb, false, &cls, &err), 0);
    cmp += rocksdb_perfcontext_metric(pc, rocksdb_user_key_comparison_count);
    tombstones += 2 * per;
  }
  double per_tombstone = (double)cmp / (double)tombstones;
  cr_log_info("%.1f key comparisons per outcome tombstone", per_tombstone);
  cr_assert_lt(per_tombstone, 75.0, "%.1f key comparisons per tombstone: the memtable insert hints are not in effect",
               per_tombstone);
  ak_batch_free(wb);
  rocksdb_perfcontext_destroy(pc);
  rocksdb_set_perf_level(rocksdb_disable);
  ak_store_free(st);
}

/* ---- layout 2: the group marker codec and the migration from layout 1 ---- */

Test(store, a_group_marker_round_trips_and_refuses_damage) {
  const char *t1[] = {"log", "http"}, *t2[] = {"http"};
  ak_marker_set_in_t sets[] = {
    {.tenant = "acme", .tenant_len = 4, .source = "gh", .source_len = 2, .nsinks = 2, .types = t1},
    {.tenant = "", .tenant_len = 0, .source = "stripe", .source_len = 6, .nsinks = 1, .types = t2},
  };
  uint16_t hooks[] = {0, 1, 1, 0, 0};
  uint8_t v[256];
  size_t n = ak_marker_encode(v, sizeof v, 1796000000123, 5, sets, 2, hooks);
  cr_assert_eq(n, ak_marker_size(5, sets, 2));
  ak_marker_t m;
  cr_assert_eq(ak_marker_decode(v, n, &m), 0);
  cr_assert_eq(m.committed_at_ms, 1796000000123);
  cr_assert_eq(m.count, 5);
  cr_assert_eq(m.nsets, 2);
  const uint8_t *pos = NULL;
  ak_marker_set_t s;
  cr_assert_eq(ak_marker_next_set(&m, &pos, &s), 0);
  cr_assert(s.tenant_len == 4 && !memcmp(s.tenant, "acme", 4) && s.source_len == 2 && s.nsinks == 2);
  const char *ty;
  size_t tl;
  ak_marker_set_type(&s, 1, &ty, &tl);
  cr_assert(tl == 4 && !memcmp(ty, "http", 4));
  cr_assert_eq(ak_marker_next_set(&m, &pos, &s), 0);
  cr_assert(s.tenant_len == 0 && s.source_len == 6 && s.nsinks == 1);
  cr_assert_neq(ak_marker_next_set(&m, &pos, &s), 0, "two sets, no third");
  for (uint32_t i = 0; i < 5; i++) cr_assert_eq(ak_marker_hook_set(&m, i), hooks[i]);
  /* every strict prefix, a longer value, a wrong version and a set index out of range */
  for (size_t k = 0; k < n; k++) cr_assert_neq(ak_marker_decode(v, k, &m), 0, "prefix of %zu bytes", k);
  v[n] = 0;
  cr_assert_neq(ak_marker_decode(v, n + 1, &m), 0);
  v[0] = 2;
  cr_assert_neq(ak_marker_decode(v, n, &m), 0);
  v[0] = 1;
  v[n - 1] = 2;
  cr_assert_neq(ak_marker_decode(v, n, &m), 0, "hook in set 2 of 2");
  /* more sinks than a source may have, an index past the sets: not encoded */
  const char *many[AK_MARKER_MAX_SINKS + 1];
  for (int i = 0; i <= AK_MARKER_MAX_SINKS; i++) many[i] = "log";
  ak_marker_set_in_t big = {.tenant = "a", .tenant_len = 1, .source = "b", .source_len = 1,
                            .nsinks = AK_MARKER_MAX_SINKS + 1, .types = many};
  uint16_t h0 = 0, h1 = 1;
  uint8_t w[512];
  cr_assert_eq(ak_marker_encode(w, sizeof w, 1, 1, &big, 1, &h0), 0);
  cr_assert_eq(ak_marker_encode(w, sizeof w, 1, 1, sets, 1, &h1), 0);
  cr_assert_eq(ak_marker_encode(w, 8, 1, 1, sets, 1, &h0), 0, "too small a buffer");
}

static int count_prefix(ak_store_t *st, int cf, const char *pfx) {
  int n = 0;
  cr_assert_eq(ak_store_scan(st, cf, pfx, pfx ? strlen(pfx) : 0, count_any, &n), 0);
  return n;
}

static uint64_t meta_of(ak_store_t *st, const char *key, bool *found) {
  char *v = NULL;
  size_t vl = 0;
  int rc = ak_store_get(st, AK_CF_DEFAULT, key, strlen(key), &v, &vl);
  uint64_t x = rc == 0 && vl == 8 ? ak_get_u64((const uint8_t *)v) : rc == 0 && vl == 4 ? ak_get_u32((const uint8_t *)v) : 0;
  *found = rc == 0;
  free(v);
  return x;
}

/* A store written by layout 1 (no m:format; per delivery a row and a due key, per hook an
 * archive obligation) opens as layout 2: the obligations go, the rows stay (they are the
 * exception rows of layout 2), the low and reclaim marks pass every hook it held. A second
 * open changes nothing; an interrupted migration (format still absent) is done again. */
Test(store, a_layout_1_store_is_migrated_at_open) {
  ak_store_t *st = open_at("f1", false);
  bool found;
  cr_assert_eq(meta_of(st, AK_KEY_FORMAT, &found), AK_STORE_FORMAT);
  cr_assert(found, "a new store gets the format");
  cr_assert_not((meta_of(st, AK_KEY_DISPATCH_LOW, &found), found), "a new store has no low mark");
  ak_batch_t *wb = ak_batch_new(st);
  ak_batch_delete(wb, AK_CF_DEFAULT, AK_KEY_FORMAT, strlen(AK_KEY_FORMAT));
  uint8_t ns[8];
  ak_put_u64(ns, 25001);
  ak_batch_put(wb, AK_CF_DEFAULT, "m:next_seq:0", 12, ns, 8);
  for (uint64_t seq = 1; seq <= 25000; seq++) {
    uint8_t ak[AK_ARCHIVE_KEY_LEN], sz[4] = {0, 0, 0, 9};
    ak_key_archive(ak, seq);
    ak_batch_put(wb, AK_CF_INDEX, ak, sizeof ak, sz, 4);
    if (seq % 1000 == 0) { /* a few rows still owed */
      uint8_t dk[AK_DELIVERY_KEY_LEN], row[64], due[AK_DUE_KEY_MAX], dv[AK_DUE_VALUE_MAX];
      ak_key_delivery(dk, seq, 0);
      ak_batch_put(wb, AK_CF_DELIVERIES, dk, sizeof dk, row,
                   ak_delivery_row(row, sizeof row, AK_DELIVERY_PENDING, 0, 5, "log"));
      size_t kl = ak_key_due(due, "default", 7, 5, seq, 0);
      ak_batch_put(wb, AK_CF_INDEX, due, kl, dv, ak_due_value(dv, sizeof dv, 0, "log", 3, NULL));
    }
  }
  ak_wf_class_t cls;
  char *err = NULL;
  cr_assert_eq(ak_store_write(st, wb, true, &cls, &err), 0);
  ak_batch_free(wb);
  ak_store_free(st);
  for (int round = 0; round < 2; round++) {
    st = open_at("f1", false);
    cr_assert_eq(meta_of(st, AK_KEY_FORMAT, &found), AK_STORE_FORMAT);
    cr_assert_eq(meta_of(st, AK_KEY_DISPATCH_LOW, &found), 25001, "every layout-1 hook is below the low mark");
    cr_assert_eq(meta_of(st, AK_KEY_RECLAIMED, &found), 25001);
    cr_assert_eq(count_prefix(st, AK_CF_INDEX, "a"), 0, "the archive obligations are gone");
    cr_assert_eq(count_prefix(st, AK_CF_INDEX, "d"), 25, "the owed rows stay, as exception rows");
    cr_assert_eq(count_prefix(st, AK_CF_DELIVERIES, NULL), 25);
    ak_store_free(st);
  }
  /* a later layout is refused, not misread */
  st = open_at("f1", false);
  uint8_t f[4] = {0, 0, 0, AK_STORE_FORMAT + 1};
  put_raw(st, AK_CF_DEFAULT, AK_KEY_FORMAT, strlen(AK_KEY_FORMAT), f, 4);
  ak_store_free(st);
  char p[300];
  snprintf(p, sizeof p, "%s/f1", fx.dir);
  st = ak_store_new(p, false);
  cr_assert_neq(ak_store_open(st, &err), 0);
  cr_assert(strstr(err, "later ankusa"), "%s", err);
  free(err);
  ak_store_free(st);
}
