/* Unit tests: the archive replay reader (archive/replay_reader.h) over a real store's
 * catalogue and LocalFS segments: the window on received_at within and across segments,
 * the batch size and where it says it looked to, rows outside the window passed over, the
 * end, a segment whose object is gone, and the fetch handshake with its thread (queued,
 * then ready for exactly that request, then read ahead). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "archive/catalogue.h"
#include "archive/replay_reader.h"
#include "archive/segment.h"
#include "core/clock.h"
#include "core/envelope.h"
#include "core/log.h"
#include "core/node.h"
#include "store/batch.h"
#include "store/store.h"

static const ak_module_t *const areader_modules[] = {&ak_mod_node, &ak_mod_log, &ak_mod_store};
static const ak_schema_t areader_schema = {.modules = areader_modules,
                                           .nmodules = sizeof areader_modules / sizeof areader_modules[0]};
#define AK_FX_SCHEMA (&areader_schema)
#include "fixture.h"

static ak_fx_t fx;
static ak_blob_t *blob;
static char err[256];

static void setup(void) {
  ak_fx_tmp(&fx, "areader-test");
  static const char *const only[] = {"node", "store", NULL};
  ak_fx_open(&fx, "", only);
  char root[400];
  snprintf(root, sizeof root, "%s/default/segments", fx.dir);
  blob = ak_blob_local_new(root, err, sizeof err);
  cr_assert_not_null(blob, "%s", err);
}

static void teardown(void) {
  ak_blob_free(blob);
  ak_fx_close(&fx);
  ak_fx_rm(&fx);
}

TestSuite(areader, .init = setup, .fini = teardown);

/* One segment of the hooks first..last, hook seq received at base + (seq - first),
 * written and catalogued as the compactor would. */
static void segment(const char *name, uint64_t first, uint64_t last, int64_t base) {
  ak_seg_writer_t *w = ak_seg_writer_new();
  cr_assert_not_null(w);
  for (uint64_t seq = first; seq <= last; seq++) {
    ak_envelope_t env = {.seq = seq, .received_at_ms = base + (int64_t)(seq - first), .source = "s",
                         .source_len = 1, .tenant = "t", .tenant_len = 1, .body = (const uint8_t *)"{}",
                         .body_len = 2};
    memset(env.id, 0x11, 16);
    env.id[15] = (uint8_t)seq;
    size_t rl = 0;
    uint8_t *rec = ak_envelope_encode(&env, &rl);
    cr_assert_eq(ak_seg_writer_add(w, rec, rl), AK_SEG_OK);
    free(rec);
  }
  const uint8_t *seg, *idx;
  size_t sl, il;
  cr_assert_eq(ak_seg_writer_finish(w, &seg, &sl, &idx, &il), AK_SEG_OK);
  ak_cat_row_t r;
  memset(&r, 0, sizeof r);
  r.first_seq = first;
  r.last_seq = last;
  r.count = (uint32_t)(last - first + 1);
  r.seg_bytes = sl;
  r.idx_bytes = il;
  r.min_received_ms = ak_seg_writer_min_received(w);
  r.max_received_ms = ak_seg_writer_max_received(w);
  ak_seg_writer_id_range(w, r.min_id, r.max_id);
  snprintf(r.seg_key, sizeof r.seg_key, "%s.seg", name);
  snprintf(r.idx_key, sizeof r.idx_key, "%s.idx", name);
  cr_assert_eq(ak_blob_put(blob, r.seg_key, seg, sl, err, sizeof err), AK_BLOB_OK, "%s", err);
  cr_assert_eq(ak_blob_put(blob, r.idx_key, idx, il, err, sizeof err), AK_BLOB_OK, "%s", err);
  ak_seg_writer_free(w);
  ak_store_t *st = fx.inst->store;
  cr_assert_eq(ak_store_pin(st), 0);
  ak_batch_t *b = ak_batch_new(st);
  ak_cat_put(b, &r);
  ak_wf_class_t cls;
  char *e = NULL;
  cr_assert_eq(ak_store_write_pinned(st, b, true, &cls, &e), 0);
  ak_store_unpin(st);
  ak_batch_free(b);
}

/* a: 1..5 at 1000.., b: 6..10 at 2000.., c: 11..15 at 3000.. */
static void three(void) {
  segment("a", 1, 5, 1000);
  segment("b", 6, 10, 2000);
  segment("c", 11, 15, 3000);
}

static void expect_seqs(const ak_replay_abatch_t *b, uint64_t first, size_t n) {
  cr_assert_eq(b->n, n, "%zu hooks, want %zu", b->n, n);
  for (size_t i = 0; i < n; i++) {
    cr_expect_eq(b->v[i].seq, first + i);
    ak_envelope_t env;
    cr_assert_eq(ak_envelope_decode(b->v[i].rec, b->v[i].len, &env), 0, "the record byte for byte");
    cr_expect_eq(env.seq, first + i);
    ak_envelope_clear(&env);
  }
}

Test(areader, window_across_segments_and_the_end) {
  three();
  ak_areader_t *a = ak_areader_new(fx.inst->store, blob);
  ak_replay_abatch_t b;
  cr_assert_eq(ak_areader_read(a, 0, 1002, 3001, 100, &b), 0);
  expect_seqs(&b, 3, 3);
  cr_expect_eq(b.looked_to, 5);
  cr_expect(!b.end);
  ak_replay_abatch_clear(&b);
  cr_assert_eq(ak_areader_read(a, 5, 1002, 3001, 100, &b), 0);
  expect_seqs(&b, 6, 5);
  cr_expect_eq(b.looked_to, 10);
  ak_replay_abatch_clear(&b);
  cr_assert_eq(ak_areader_read(a, 10, 1002, 3001, 100, &b), 0);
  expect_seqs(&b, 11, 2);
  cr_expect_eq(b.looked_to, 15);
  cr_expect(!b.end);
  ak_replay_abatch_clear(&b);
  cr_assert_eq(ak_areader_read(a, 15, 1002, 3001, 100, &b), 0);
  expect_seqs(&b, 0, 0);
  cr_expect(b.end);
  ak_replay_abatch_clear(&b);
  /* a window between segments: every row passed over, the end */
  cr_assert_eq(ak_areader_read(a, 0, 2500, 2600, 100, &b), 0);
  expect_seqs(&b, 0, 0);
  cr_expect(b.end);
  cr_expect_eq(b.looked_to, 15);
  ak_replay_abatch_clear(&b);
  /* inclusive bounds */
  cr_assert_eq(ak_areader_read(a, 5, 2004, 2004, 100, &b), 0);
  expect_seqs(&b, 10, 1);
  ak_replay_abatch_clear(&b);
  ak_areader_free(a);
}

Test(areader, batch_size_and_a_cursor_inside_a_segment) {
  three();
  ak_areader_t *a = ak_areader_new(fx.inst->store, blob);
  ak_replay_abatch_t b;
  cr_assert_eq(ak_areader_read(a, 0, 0, 9999, 2, &b), 0);
  expect_seqs(&b, 1, 2);
  cr_expect_eq(b.looked_to, 2, "looked no further than the batch's last hook");
  ak_replay_abatch_clear(&b);
  cr_assert_eq(ak_areader_read(a, 2, 0, 9999, 2, &b), 0);
  expect_seqs(&b, 3, 2);
  ak_replay_abatch_clear(&b);
  cr_assert_eq(ak_areader_read(a, 4, 0, 9999, 2, &b), 0);
  expect_seqs(&b, 5, 1);
  cr_expect_eq(b.looked_to, 5);
  ak_replay_abatch_clear(&b);
  ak_areader_free(a);
}

Test(areader, a_gone_segment_is_passed_over) {
  three();
  cr_assert_eq(ak_blob_delete(blob, "b.seg", err, sizeof err), AK_BLOB_OK);
  ak_areader_t *a = ak_areader_new(fx.inst->store, blob);
  ak_replay_abatch_t b;
  cr_assert_eq(ak_areader_read(a, 5, 0, 9999, 100, &b), 0);
  expect_seqs(&b, 0, 0);
  cr_expect_eq(b.gone, 1);
  cr_expect_eq(b.looked_to, 10);
  cr_expect(!b.end);
  ak_replay_abatch_clear(&b);
  cr_assert_eq(ak_areader_read(a, 10, 0, 9999, 100, &b), 0);
  expect_seqs(&b, 11, 5);
  cr_expect_eq(b.gone, 0);
  ak_replay_abatch_clear(&b);
  ak_areader_free(a);
}

static int fetch_wait(ak_areader_t *a, const uint8_t job[16], uint64_t after, ak_replay_abatch_t *b) {
  for (int i = 0; i < 500; i++) {
    if (ak_areader_fetch(a, job, after, 0, 9999, 3, b) == AK_REPLAY_FETCH_READY) return i;
    usleep(10000);
  }
  cr_assert_fail("no batch within 5 s");
  return -1;
}

Test(areader, fetch_queues_then_answers_and_reads_ahead) {
  three();
  ak_areader_t *a = ak_areader_new(fx.inst->store, blob);
  cr_assert_eq(ak_areader_start(a), 0);
  uint8_t job[16] = {1}, other[16] = {2};
  ak_replay_abatch_t b;
  cr_expect_eq(ak_areader_fetch(a, job, 0, 0, 9999, 3, &b), AK_REPLAY_FETCH_NOT_READY, "queued first");
  fetch_wait(a, job, 0, &b);
  expect_seqs(&b, 1, 3);
  uint64_t next = b.looked_to;
  ak_replay_abatch_clear(&b);
  /* read ahead: the next request is answered soon without a new queueing round trip */
  usleep(100000);
  cr_expect_eq(ak_areader_fetch(a, job, next, 0, 9999, 3, &b), AK_REPLAY_FETCH_READY);
  expect_seqs(&b, 4, 2);
  ak_replay_abatch_clear(&b);
  /* another job, another request: its own slot */
  fetch_wait(a, other, 10, &b);
  expect_seqs(&b, 11, 3);
  ak_replay_abatch_clear(&b);
  /* a request that differs from the prepared one is not answered with it */
  cr_expect_eq(ak_areader_fetch(a, job, 1, 0, 9999, 3, &b), AK_REPLAY_FETCH_NOT_READY);
  fetch_wait(a, job, 1, &b);
  expect_seqs(&b, 2, 3);
  ak_replay_abatch_clear(&b);
  ak_areader_stop(a);
  ak_areader_free(a);
}
