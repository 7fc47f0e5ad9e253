/* Unit tests: dlq replay jobs and the dead-letter listing, against a real store in a temp
 * dir. Mostly without a dispatcher (inst->dispatch NULL: no lag, always room); one test
 * puts a fake in its place through the three calls replay.c makes (defined below, so the
 * real dispatch.o is never linked into this test). Dead rows are written with the keys.h
 * codecs the way the dispatcher writes them: the delivery row DEAD (next_at = dead-letter
 * time) and the 'x' index entry, no due key. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/clock.h"
#include "core/envelope.h"
#include "core/log.h"
#include "core/node.h"
#include "dispatch/dispatch.h"
#include "dispatch/replay.h"
#include "store/batch.h"
#include "store/keys.h"
#include "store/store.h"

/* The node's module table up to the store, in its order: the whole table (src/modules.c)
 * would link the real dispatcher beside the fake below. */
static const ak_module_t *const replay_modules[] = {&ak_mod_node, &ak_mod_log, &ak_mod_store};
static const ak_schema_t replay_schema = {.modules = replay_modules,
                                          .nmodules = sizeof replay_modules / sizeof replay_modules[0]};
#define AK_FX_SCHEMA (&replay_schema)
#include "fixture.h"

static ak_fx_t fx;

static void setup(void) { ak_fx_tmp(&fx, "replay-test"); }

static void teardown(void) {
  ak_fx_close(&fx);
  ak_fx_rm(&fx);
}

TestSuite(replay, .init = setup, .fini = teardown);

/* the fake dispatcher */
static struct {
  int64_t lag;
  bool room;
  int notes;
  char tenant[8][16];
  int64_t at[8];
  uint64_t rows[8], from_dead[8];
} fake;

/* replay.c's module row hooks the jobs into the dispatcher; this suite drives them by
 * hand and never opens the module */
void ak_dispatch_on_tick(ak_dispatch_t *d, ak_dispatch_tick_fn fn, void *ctx) {
  (void)d, (void)fn, (void)ctx;
  cr_assert_fail("not used by this suite");
}

void ak_dispatch_on_replay_settled(ak_dispatch_t *d, ak_dispatch_settled_fn fn, void *ctx) {
  (void)d, (void)fn, (void)ctx;
  cr_assert_fail("not used by this suite");
}

int64_t ak_dispatch_oldest_due_age_ms(ak_dispatch_t *d) {
  cr_assert_eq((void *)d, (void *)&fake);
  return fake.lag;
}

bool ak_dispatch_has_room(ak_dispatch_t *d) {
  cr_assert_eq((void *)d, (void *)&fake);
  return fake.room;
}

void ak_dispatch_note_due(ak_dispatch_t *d, const char *tenant, size_t tlen, int64_t at_ms, uint64_t rows,
                          uint64_t from_dead) {
  cr_assert_eq((void *)d, (void *)&fake);
  cr_assert_lt(fake.notes, 8);
  snprintf(fake.tenant[fake.notes], sizeof fake.tenant[0], "%.*s", (int)tlen, tenant);
  fake.at[fake.notes] = at_ms;
  fake.rows[fake.notes] = rows;
  fake.from_dead[fake.notes] = from_dead;
  fake.notes++;
}

void ak_dispatch_count_restored(ak_dispatch_t *d, struct ak_batch *wb, uint64_t n) {
  (void)d, (void)wb, (void)n;
  cr_assert_fail("archive jobs are not moved by this suite");
}

void ak_dispatch_restored(ak_dispatch_t *d, uint64_t n) {
  (void)d, (void)n;
  cr_assert_fail("archive jobs are not moved by this suite");
}

/* A test's handle on the suite's node: the store opened by its module; the replay jobs
 * made and loaded by hand (the replay module's open would hook them into a dispatcher),
 * with no dispatcher unless a test puts the fake in its place. */
typedef struct node {
  ak_instance_t *inst;
} node_t;

static void node_open(node_t *n) {
  static const char *const only[] = {"node", "store", NULL};
  ak_fx_open(&fx, "", only);
  n->inst = fx.inst;
  n->inst->replays = ak_replays_new(n->inst);
  char *err = NULL;
  cr_assert_eq(ak_replays_load(n->inst->replays, &err), 0, "%s", err ? err : "");
}

static void node_close(node_t *n) {
  ak_replays_free(n->inst->replays);
  n->inst->replays = NULL;
  n->inst->dispatch = NULL; /* the fake, when a test set it: not the node's to close */
  ak_fx_close(&fx);
  n->inst = NULL;
}

/* A restart of the replay module over the same store. */
static void replays_restart(node_t *n) {
  ak_replays_free(n->inst->replays);
  n->inst->replays = ak_replays_new(n->inst);
  char *err = NULL;
  cr_assert_eq(ak_replays_load(n->inst->replays, &err), 0, "%s", err ? err : "");
}

static void hook_id(uint64_t seq, uint8_t id[16]) {
  memset(id, 0xab, 16);
  id[15] = (uint8_t)seq;
  id[14] = (uint8_t)(seq >> 8);
}

static void put_dead(node_t *n, int64_t dead_at, uint64_t seq, uint16_t sink, const char *source,
                     const char *tenant) {
  ak_store_t *st = n->inst->store;
  cr_assert_eq(ak_store_pin(st), 0);
  ak_batch_t *wb = ak_batch_new(st);
  uint8_t k[AK_DEAD_KEY_LEN], v[512];
  ak_key_delivery(k, seq, sink);
  size_t vl = ak_delivery_row_ex(v, sizeof v, AK_DELIVERY_DEAD, 84, dead_at, "http", 4, NULL);
  ak_batch_put(wb, AK_CF_DELIVERIES, k, AK_DELIVERY_KEY_LEN, v, vl);
  ak_dead_entry_t e = {.received_at_ms = dead_at - 5000,
                       .attempts = 84,
                       .sink_type = "http",
                       .sink_type_len = 4,
                       .source = source,
                       .source_len = strlen(source),
                       .tenant = tenant,
                       .tenant_len = strlen(tenant),
                       .reason = "{sink, http, status 500}",
                       .reason_len = strlen("{sink, http, status 500}")};
  hook_id(seq, e.id);
  vl = ak_dead_entry_encode(v, sizeof v, &e);
  cr_assert_gt(vl, 0);
  ak_key_dead(k, dead_at, seq, sink);
  ak_batch_put(wb, AK_CF_INDEX, k, sizeof k, v, vl);
  cr_assert_eq(ak_store_write_pinned(st, wb, false, NULL, NULL), 0);
  ak_store_unpin(st);
  ak_batch_free(wb);
}

static void put_raw(node_t *n, int cf, const void *k, size_t kl, const void *v, size_t vl) {
  ak_store_t *st = n->inst->store;
  cr_assert_eq(ak_store_pin(st), 0);
  ak_batch_t *wb = ak_batch_new(st);
  ak_batch_put(wb, cf, k, kl, v, vl);
  cr_assert_eq(ak_store_write_pinned(st, wb, false, NULL, NULL), 0);
  ak_store_unpin(st);
  ak_batch_free(wb);
}

static void del_raw(node_t *n, int cf, const void *k, size_t kl) {
  ak_store_t *st = n->inst->store;
  cr_assert_eq(ak_store_pin(st), 0);
  ak_batch_t *wb = ak_batch_new(st);
  ak_batch_delete(wb, cf, k, kl);
  cr_assert_eq(ak_store_write_pinned(st, wb, false, NULL, NULL), 0);
  ak_store_unpin(st);
  ak_batch_free(wb);
}

static bool has_dead_key(node_t *n, int64_t dead_at, uint64_t seq, uint16_t sink) {
  uint8_t k[AK_DEAD_KEY_LEN];
  ak_key_dead(k, dead_at, seq, sink);
  char *v = NULL;
  size_t vl = 0;
  int rc = ak_store_get(n->inst->store, AK_CF_INDEX, k, sizeof k, &v, &vl);
  cr_assert_geq(rc, 0);
  free(v);
  return rc == 0;
}

static ak_delivery_row_t get_row(node_t *n, uint64_t seq, uint16_t sink) {
  uint8_t k[AK_DELIVERY_KEY_LEN];
  ak_key_delivery(k, seq, sink);
  char *v = NULL;
  size_t vl = 0;
  cr_assert_eq(ak_store_get(n->inst->store, AK_CF_DELIVERIES, k, sizeof k, &v, &vl), 0, "row %llu missing",
               (unsigned long long)seq);
  ak_delivery_row_t r;
  cr_assert_eq(ak_delivery_row_decode((const uint8_t *)v, vl, &r), 0);
  free(v);
  r.sink_type = NULL; /* pointed into v */
  return r;
}

typedef struct due_scan {
  int count;
  uint64_t seqs[4096];
  int64_t at[4096];
  char tenant[4096][16];
  ak_due_value_t val[4096];
} due_scan_t;

static int due_one(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  due_scan_t *d = ctx;
  const char *t;
  size_t tl;
  uint64_t seq;
  cr_assert_eq(ak_key_due_parse((const uint8_t *)k, kl, &t, &tl, &d->at[d->count], &seq, NULL), 0);
  d->seqs[d->count] = seq;
  snprintf(d->tenant[d->count], sizeof d->tenant[0], "%.*s", (int)tl, t);
  cr_assert_eq(ak_due_value_decode((const uint8_t *)v, vl, &d->val[d->count]), 0);
  d->val[d->count].sink_type = NULL;
  d->count++;
  return 0;
}

static due_scan_t *dues(node_t *n) {
  static due_scan_t d;
  memset(&d, 0, sizeof d);
  const char p = AK_IDX_DUE;
  cr_assert_eq(ak_store_scan(n->inst->store, AK_CF_INDEX, &p, 1, due_one, &d), 0);
  return &d;
}

static int count_one(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  (void)k, (void)kl, (void)v, (void)vl;
  (*(int *)ctx)++;
  return 0;
}

static int dead_count(node_t *n) {
  int c = 0;
  const char p = AK_IDX_DEAD;
  cr_assert_eq(ak_store_scan(n->inst->store, AK_CF_INDEX, &p, 1, count_one, &c), 0);
  return c;
}

static ak_replay_filter_t no_filter(void) {
  ak_replay_filter_t f;
  memset(&f, 0, sizeof f);
  return f;
}

/* Create a job; its id into id (and the object back, caller frees). */
static json_t *create(node_t *n, const ak_replay_filter_t *f, int64_t rate, uint8_t id[16]) {
  json_t *o = NULL;
  cr_assert_eq(ak_replays_create(n->inst->replays, f, rate, AK_REPLAY_LAG_DEFAULT, &o), AK_REPLAY_OK);
  cr_assert(ak_uuid_parse(json_string_value(json_object_get(o, "id")), id));
  return o;
}

static json_t *job(node_t *n, const uint8_t id[16]) {
  json_t *o = ak_replays_get(n->inst->replays, id);
  cr_assert_not_null(o);
  return o;
}

static int64_t jint(json_t *o, const char *k) { return json_integer_value(json_object_get(o, k)); }

static const char *jstate(node_t *n, const uint8_t id[16]) {
  static char b[32];
  json_t *o = job(n, id);
  snprintf(b, sizeof b, "%s", json_string_value(json_object_get(o, "state")));
  json_decref(o);
  return b;
}

static int64_t jfield(node_t *n, const uint8_t id[16], const char *k) {
  json_t *o = job(n, id);
  int64_t v = jint(o, k);
  json_decref(o);
  return v;
}

Test(replay, moves_dead_rows_back_with_the_replay_id) {
  node_t n;
  node_open(&n);
  int64_t base = ak_now_ms() - 60000;
  put_dead(&n, base + 1, 1, 0, "src_a", "acme");
  put_dead(&n, base + 2, 2, 0, "src_a", "acme");
  put_dead(&n, base + 2, 2, 1, "src_a", "acme");
  put_dead(&n, base + 3, 3, 0, "src_b", "beta");
  ak_replay_filter_t f = no_filter();
  uint8_t rid[16];
  json_t *o = create(&n, &f, 1000, rid);
  cr_expect_str_eq(json_string_value(json_object_get(o, "state")), "running");
  cr_expect_str_eq(json_string_value(json_object_get(o, "kind")), "dlq");
  cr_expect_eq(jint(o, "rate"), 1000);
  cr_expect_eq(jint(o, "max_lag_ms"), AK_REPLAY_LAG_DEFAULT);
  cr_expect(json_is_null(json_object_get(o, "finished_at")));
  cr_expect_eq(json_object_size(json_object_get(o, "filter")), 0);
  json_decref(o);

  int64_t t0 = ak_now_ms();
  ak_replays_tick(n.inst->replays, t0);
  cr_expect_eq(dead_count(&n), 4, "the first tick only starts the job's clock");
  ak_replays_tick(n.inst->replays, t0 + 100);
  cr_assert_eq(dead_count(&n), 0, "all four rows left the dead-letter set");
  uint64_t want_seq[4] = {1, 2, 2, 3};
  uint16_t want_sink[4] = {0, 0, 1, 0};
  for (int i = 0; i < 4; i++) {
    ak_delivery_row_t r = get_row(&n, want_seq[i], want_sink[i]);
    cr_expect_eq(r.state, AK_DELIVERY_PENDING);
    cr_expect_eq(r.attempts, 0);
    cr_expect_eq(r.next_at_ms, t0 + 100);
    cr_expect_eq(r.sink_type_len, 4);
    cr_expect(r.has_replay);
    cr_expect_arr_eq(r.replay_id, rid, 16);
  }
  due_scan_t *d = dues(&n);
  cr_assert_eq(d->count, 4);
  int acme = 0;
  for (int i = 0; i < 4; i++) {
    cr_expect_eq(d->at[i], t0 + 100);
    cr_expect_eq(d->val[i].attempts, 0);
    cr_expect(d->val[i].has_replay);
    cr_expect_arr_eq(d->val[i].replay_id, rid, 16);
    if (!strcmp(d->tenant[i], "acme")) acme++;
    else cr_expect_str_eq(d->tenant[i], "beta");
  }
  cr_expect_eq(acme, 3, "the due key carries the dead entry's tenant");
  o = job(&n, rid);
  cr_expect_str_eq(json_string_value(json_object_get(o, "state")), "done");
  cr_expect_eq(jint(o, "moved"), 4);
  cr_expect_eq(jint(o, "scanned"), 4);
  cr_expect_eq(jint(o, "skipped"), 0);
  cr_expect_eq(jint(o, "finished_at"), t0 + 100);
  json_decref(o);
  /* done survives a restart, and a done job moves nothing more */
  replays_restart(&n);
  cr_expect_str_eq(jstate(&n, rid), "done");
  cr_expect_eq(jfield(&n, rid, "moved"), 4);
  node_close(&n);
}

Test(replay, rate_is_a_budget_per_elapsed_time) {
  node_t n;
  node_open(&n);
  int64_t base = ak_now_ms() - 60000;
  for (uint64_t s = 1; s <= 40; s++) put_dead(&n, base + (int64_t)s, s, 0, "src_a", "acme");
  ak_replay_filter_t f = no_filter();
  uint8_t rid[16];
  json_decref(create(&n, &f, 10, rid));
  int64_t t0 = ak_now_ms();
  ak_replays_tick(n.inst->replays, t0);
  cr_expect_eq(dead_count(&n), 40);
  ak_replays_tick(n.inst->replays, t0 + 100); /* 10/s x 0.1 s = 1 */
  cr_expect_eq(dead_count(&n), 39);
  ak_replays_tick(n.inst->replays, t0 + 150); /* half a row: carried */
  cr_expect_eq(dead_count(&n), 39);
  ak_replays_tick(n.inst->replays, t0 + 200);
  cr_expect_eq(dead_count(&n), 38);
  ak_replays_tick(n.inst->replays, t0 + 5200); /* 5 s idle: at most one second's worth */
  cr_expect_eq(dead_count(&n), 28);
  cr_expect_eq(jfield(&n, rid, "moved"), 12);
  /* oldest first: seqs 1..12 are the ones that moved */
  due_scan_t *d = dues(&n);
  cr_assert_eq(d->count, 12);
  for (int i = 0; i < 12; i++) cr_expect_leq(d->seqs[i], 12);
  node_close(&n);
}

Test(replay, one_tick_moves_at_most_the_tick_cap) {
  node_t n;
  node_open(&n);
  int64_t base = ak_now_ms() - 60000;
  for (uint64_t s = 1; s <= AK_REPLAY_TICK_ROWS + 200; s++) put_dead(&n, base, s, 0, "src_a", "acme");
  ak_replay_filter_t f = no_filter();
  uint8_t rid[16];
  json_decref(create(&n, &f, AK_REPLAY_RATE_MAX, rid));
  int64_t t0 = ak_now_ms();
  ak_replays_tick(n.inst->replays, t0);
  ak_replays_tick(n.inst->replays, t0 + 100);
  cr_expect_eq(dead_count(&n), 200);
  cr_expect_str_eq(jstate(&n, rid), "running");
  ak_replays_tick(n.inst->replays, t0 + 200);
  cr_expect_eq(dead_count(&n), 0);
  cr_expect_str_eq(jstate(&n, rid), "done");
  cr_expect_eq(jfield(&n, rid, "moved"), AK_REPLAY_TICK_ROWS + 200);
  node_close(&n);
}

/* Run a job over the current dead set until it is done; returns the moved count. */
static int64_t run_to_done(node_t *n, const ak_replay_filter_t *f, uint8_t rid[16]) {
  json_decref(create(n, f, 1000, rid));
  int64_t t0 = ak_now_ms();
  for (int i = 0; i < 5 && strcmp(jstate(n, rid), "done"); i++) ak_replays_tick(n->inst->replays, t0 + 1000 * i);
  cr_assert_str_eq(jstate(n, rid), "done");
  return jfield(n, rid, "moved");
}

Test(replay, filters_source_id_window_and_creation_bound) {
  node_t n;
  node_open(&n);
  int64_t base = ak_now_ms() - 60000;
  put_dead(&n, base + 10, 1, 0, "src_a", "acme");
  put_dead(&n, base + 20, 2, 0, "src_b", "acme");
  put_dead(&n, base + 30, 3, 0, "src_a", "acme");
  put_dead(&n, base + 40, 4, 0, "src_a", "acme");
  put_dead(&n, base + 50, 5, 0, "src_a", "acme");
  put_dead(&n, ak_now_ms() + 600000, 6, 0, "src_a", "acme"); /* dead-lettered "after" creation */
  uint8_t rid[16];

  ak_replay_filter_t f = no_filter();
  f.source_id = "src_b";
  cr_expect_eq(run_to_done(&n, &f, rid), 1);
  cr_expect_eq(jfield(&n, rid, "scanned"), 1, "rows of other sources are not counted");
  cr_expect_not(has_dead_key(&n, base + 20, 2, 0));
  cr_expect(has_dead_key(&n, base + 10, 1, 0));

  f = no_filter();
  f.has_since = f.has_until = true;
  f.since_ms = base + 30;
  f.until_ms = base + 40; /* both inclusive */
  cr_expect_eq(run_to_done(&n, &f, rid), 2);
  cr_expect_not(has_dead_key(&n, base + 30, 3, 0));
  cr_expect_not(has_dead_key(&n, base + 40, 4, 0));
  cr_expect(has_dead_key(&n, base + 50, 5, 0));

  f = no_filter();
  f.has_id = true;
  hook_id(5, f.id);
  cr_expect_eq(run_to_done(&n, &f, rid), 1);
  cr_expect_not(has_dead_key(&n, base + 50, 5, 0));
  cr_expect(has_dead_key(&n, base + 10, 1, 0));

  /* no filter: everything dead-lettered up to creation, not the row dead-lettered later */
  f = no_filter();
  json_t *o = create(&n, &f, 1000, rid);
  int64_t created = jint(o, "created_at");
  json_decref(o);
  put_dead(&n, created + 1, 7, 0, "src_a", "acme");
  int64_t t0 = ak_now_ms();
  ak_replays_tick(n.inst->replays, t0);
  ak_replays_tick(n.inst->replays, t0 + 1000);
  cr_expect_str_eq(jstate(&n, rid), "done");
  cr_expect_eq(jfield(&n, rid, "moved"), 1, "only seq 1 was left from before creation");
  cr_expect_not(has_dead_key(&n, base + 10, 1, 0));
  cr_expect(has_dead_key(&n, created + 1, 7, 0));
  cr_expect_eq(dead_count(&n), 2, "seqs 6 and 7 stay dead-lettered");
  cr_expect_eq(get_row(&n, 7, 0).state, AK_DELIVERY_DEAD);
  node_close(&n);
}

Test(replay, rows_that_changed_are_skipped_never_resurrected) {
  node_t n;
  node_open(&n);
  int64_t base = ak_now_ms() - 60000;
  put_dead(&n, base + 1, 1, 0, "src_a", "acme");
  put_dead(&n, base + 2, 2, 0, "src_a", "acme");
  put_dead(&n, base + 3, 3, 0, "src_a", "acme");
  put_dead(&n, base + 4, 4, 0, "src_a", "acme");
  /* seq 1: the delivery row is gone (reclaimed); seq 2: pending again; seq 3: dead at
   * another time (a stale index entry) */
  uint8_t k[AK_DELIVERY_KEY_LEN], v[64];
  ak_key_delivery(k, 1, 0);
  del_raw(&n, AK_CF_DELIVERIES, k, sizeof k);
  ak_key_delivery(k, 2, 0);
  size_t vl = ak_delivery_row(v, sizeof v, AK_DELIVERY_PENDING, 3, base + 99, "http");
  put_raw(&n, AK_CF_DELIVERIES, k, sizeof k, v, vl);
  ak_key_delivery(k, 3, 0);
  vl = ak_delivery_row(v, sizeof v, AK_DELIVERY_DEAD, 3, base + 777, "http");
  put_raw(&n, AK_CF_DELIVERIES, k, sizeof k, v, vl);
  /* an undecodable index entry */
  uint8_t xk[AK_DEAD_KEY_LEN];
  ak_key_dead(xk, base + 5, 5, 0);
  put_raw(&n, AK_CF_INDEX, xk, sizeof xk, "\x09junk", 5);

  ak_replay_filter_t f = no_filter();
  uint8_t rid[16];
  cr_expect_eq(run_to_done(&n, &f, rid), 1);
  cr_expect_eq(jfield(&n, rid, "scanned"), 5);
  cr_expect_eq(jfield(&n, rid, "skipped"), 4);
  cr_expect_eq(dead_count(&n), 4, "skipped entries are left where they are");
  due_scan_t *d = dues(&n);
  cr_assert_eq(d->count, 1);
  cr_expect_eq(d->seqs[0], 4);
  cr_expect_eq(get_row(&n, 2, 0).attempts, 3, "a pending row is not touched");
  uint8_t dk[AK_DELIVERY_KEY_LEN];
  ak_key_delivery(dk, 1, 0);
  char *gv = NULL;
  size_t gl = 0;
  cr_expect_eq(ak_store_get(n.inst->store, AK_CF_DELIVERIES, dk, sizeof dk, &gv, &gl), 1, "not resurrected");
  node_close(&n);
}

Test(replay, restart_resumes_at_the_cursor) {
  node_t n;
  node_open(&n);
  int64_t base = ak_now_ms() - 60000;
  put_dead(&n, base, 100, 0, "src_a", "acme"); /* stale: counted skipped once, not twice */
  uint8_t dk[AK_DELIVERY_KEY_LEN];
  ak_key_delivery(dk, 100, 0);
  del_raw(&n, AK_CF_DELIVERIES, dk, sizeof dk);
  for (uint64_t s = 1; s <= 20; s++) put_dead(&n, base + (int64_t)s, s, 0, "src_a", "acme");
  ak_replay_filter_t f = no_filter();
  uint8_t rid[16];
  json_decref(create(&n, &f, 10, rid));
  int64_t t0 = ak_now_ms();
  ak_replays_tick(n.inst->replays, t0);
  ak_replays_tick(n.inst->replays, t0 + 600); /* 6 rows offered: the stale one and 5 */
  cr_expect_eq(jfield(&n, rid, "moved"), 5);
  cr_expect_eq(jfield(&n, rid, "skipped"), 1);

  replays_restart(&n);
  cr_expect_str_eq(jstate(&n, rid), "running");
  cr_expect_eq(jfield(&n, rid, "moved"), 5);
  cr_expect_eq(jfield(&n, rid, "scanned"), 6);
  int64_t t1 = t0 + 10000;
  ak_replays_tick(n.inst->replays, t1);
  cr_expect_eq(jfield(&n, rid, "moved"), 5, "a loaded job starts its clock first");
  ak_replays_tick(n.inst->replays, t1 + 500);
  cr_expect_eq(jfield(&n, rid, "moved"), 10);
  cr_expect_eq(jfield(&n, rid, "skipped"), 1);
  cr_expect_eq(jfield(&n, rid, "scanned"), 11, "nothing was looked at twice");
  due_scan_t *d = dues(&n);
  cr_assert_eq(d->count, 10);
  for (int i = 0; i < 10; i++) cr_expect_leq(d->seqs[i], 10);
  for (int i = 0; i < 5; i++) cr_expect_eq(d->at[i], t0 + 600, "moved before the restart, not again after");
  for (int i = 5; i < 10; i++) cr_expect_eq(d->at[i], t1 + 500);
  for (int i = 0; i < 5; i++) ak_replays_tick(n.inst->replays, t1 + 1500 + 1000 * i);
  cr_expect_str_eq(jstate(&n, rid), "done");
  cr_expect_eq(jfield(&n, rid, "moved"), 20);
  cr_expect_eq(jfield(&n, rid, "skipped"), 1);
  node_close(&n);
}

Test(replay, pause_resume_cancel) {
  node_t n;
  node_open(&n);
  int64_t base = ak_now_ms() - 60000;
  for (uint64_t s = 1; s <= 30; s++) put_dead(&n, base + (int64_t)s, s, 0, "src_a", "acme");
  ak_replay_filter_t f = no_filter();
  uint8_t rid[16], other[16];
  json_decref(create(&n, &f, 10, rid));
  int64_t t0 = ak_now_ms();
  ak_replays_tick(n.inst->replays, t0);
  ak_replays_tick(n.inst->replays, t0 + 200);
  cr_expect_eq(dead_count(&n), 28);

  json_t *o = NULL;
  ak_replay_patch_t p = {.state = AK_REPLAY_PAUSED, .rate = 20};
  cr_assert_eq(ak_replays_patch(n.inst->replays, rid, &p, &o), AK_REPLAY_OK);
  cr_expect_str_eq(json_string_value(json_object_get(o, "state")), "paused");
  cr_expect_eq(jint(o, "rate"), 20);
  json_decref(o);
  ak_replays_tick(n.inst->replays, t0 + 1200);
  ak_replays_tick(n.inst->replays, t0 + 2200);
  cr_expect_eq(dead_count(&n), 28, "paused: nothing moves");
  replays_restart(&n);
  cr_expect_str_eq(jstate(&n, rid), "paused", "the pause is durable");
  cr_expect_eq(jfield(&n, rid, "rate"), 20);

  p = (ak_replay_patch_t){.state = AK_REPLAY_RUNNING, .max_lag_ms = 5000};
  cr_assert_eq(ak_replays_patch(n.inst->replays, rid, &p, &o), AK_REPLAY_OK);
  cr_expect_eq(jint(o, "max_lag_ms"), 5000);
  json_decref(o);
  ak_replays_tick(n.inst->replays, t0 + 3200);
  cr_expect_eq(dead_count(&n), 28, "no credit for the paused time");
  ak_replays_tick(n.inst->replays, t0 + 3300); /* 20/s x 0.1 s */
  cr_expect_eq(dead_count(&n), 26);

  p = (ak_replay_patch_t){.state = AK_REPLAY_CANCELLED};
  cr_assert_eq(ak_replays_patch(n.inst->replays, rid, &p, &o), AK_REPLAY_OK);
  cr_expect_str_eq(json_string_value(json_object_get(o, "state")), "cancelled");
  cr_expect(json_is_integer(json_object_get(o, "finished_at")));
  json_decref(o);
  ak_replays_tick(n.inst->replays, t0 + 4300);
  cr_expect_eq(dead_count(&n), 26);
  p = (ak_replay_patch_t){.state = AK_REPLAY_RUNNING};
  cr_expect_eq(ak_replays_patch(n.inst->replays, rid, &p, &o), AK_REPLAY_FINISHED);
  p = (ak_replay_patch_t){.state = -1, .rate = 5};
  cr_expect_eq(ak_replays_patch(n.inst->replays, rid, &p, &o), AK_REPLAY_FINISHED);
  memset(other, 0x11, 16);
  cr_expect_eq(ak_replays_patch(n.inst->replays, other, &p, &o), AK_REPLAY_NOT_FOUND);
  cr_expect_null(ak_replays_get(n.inst->replays, other));
  replays_restart(&n);
  cr_expect_str_eq(jstate(&n, rid), "cancelled");
  node_close(&n);
}

Test(replay, settled_counts_and_auto_pause) {
  node_t n;
  node_open(&n);
  int64_t base = ak_now_ms() - 60000;
  for (uint64_t s = 1; s <= 100; s++) put_dead(&n, base + (int64_t)s, s, 0, "src_a", "acme");
  ak_replay_filter_t f = no_filter();
  uint8_t rid[16], stranger[16];
  json_decref(create(&n, &f, 10, rid));
  int64_t t0 = ak_now_ms();
  ak_replays_tick(n.inst->replays, t0);
  ak_replays_tick(n.inst->replays, t0 + 1000);
  memset(stranger, 0x22, 16);
  ak_replays_settled(n.inst->replays, stranger, false); /* not a job of ours: ignored */
  ak_replays_settled(n.inst->replays, rid, true);
  ak_replays_settled(n.inst->replays, rid, true);
  for (int i = 0; i < AK_REPLAY_DEAD_STREAK - 1; i++) ak_replays_settled(n.inst->replays, rid, false);
  ak_replays_settled(n.inst->replays, rid, true); /* breaks the streak */
  for (int i = 0; i < AK_REPLAY_DEAD_STREAK - 1; i++) ak_replays_settled(n.inst->replays, rid, false);
  cr_expect_str_eq(jstate(&n, rid), "running");
  ak_replays_settled(n.inst->replays, rid, false);
  json_t *o = job(&n, rid);
  cr_expect_str_eq(json_string_value(json_object_get(o, "state")), "paused");
  cr_expect_not_null(strstr(json_string_value(json_object_get(o, "error")), "dead-lettered again"));
  cr_expect_eq(jint(o, "delivered"), 3);
  cr_expect_eq(jint(o, "dead"), 2 * AK_REPLAY_DEAD_STREAK - 1);
  json_decref(o);
  /* counts are persisted with the next tick, even for a paused job */
  ak_replays_tick(n.inst->replays, t0 + 2000);
  int left = dead_count(&n);
  replays_restart(&n);
  o = job(&n, rid);
  cr_expect_str_eq(json_string_value(json_object_get(o, "state")), "paused");
  cr_expect_eq(jint(o, "delivered"), 3);
  cr_expect_eq(jint(o, "dead"), 2 * AK_REPLAY_DEAD_STREAK - 1);
  json_decref(o);
  cr_expect_eq(dead_count(&n), left);
  ak_replay_patch_t p = {.state = AK_REPLAY_RUNNING};
  cr_assert_eq(ak_replays_patch(n.inst->replays, rid, &p, &o), AK_REPLAY_OK);
  cr_expect(json_is_null(json_object_get(o, "error")), "resuming clears the error");
  json_decref(o);
  /* and the streak: one more dead is not a pause */
  ak_replays_settled(n.inst->replays, rid, false);
  cr_expect_str_eq(jstate(&n, rid), "running");
  node_close(&n);
}

Test(replay, active_cap_and_idempotent_create) {
  node_t n;
  node_open(&n);
  uint8_t ids[AK_REPLAY_MAX_ACTIVE][16], id[16];
  char src[AK_REPLAY_MAX_ACTIVE][16];
  for (int i = 0; i < AK_REPLAY_MAX_ACTIVE; i++) {
    ak_replay_filter_t f = no_filter();
    snprintf(src[i], sizeof src[i], "src_%d", i);
    f.source_id = src[i];
    json_decref(create(&n, &f, 1000, ids[i]));
  }
  ak_replay_filter_t f = no_filter();
  f.source_id = "src_more";
  json_t *o = NULL;
  cr_expect_eq(ak_replays_create(n.inst->replays, &f, 1000, 2000, &o), AK_REPLAY_TOO_MANY);
  /* the same filter again is the existing job, cap or not, whatever the rate */
  char again[16];
  snprintf(again, sizeof again, "src_%d", 3);
  f.source_id = again;
  cr_assert_eq(ak_replays_create(n.inst->replays, &f, 5, 2000, &o), AK_REPLAY_EXISTS);
  cr_assert(ak_uuid_parse(json_string_value(json_object_get(o, "id")), id));
  cr_expect_arr_eq(id, ids[3], 16);
  cr_expect_eq(jint(o, "rate"), 1000);
  json_decref(o);
  /* a paused job is still active; a cancelled one frees its slot */
  ak_replay_patch_t p = {.state = AK_REPLAY_PAUSED};
  cr_assert_eq(ak_replays_patch(n.inst->replays, ids[0], &p, &o), AK_REPLAY_OK);
  json_decref(o);
  f.source_id = "src_more";
  cr_expect_eq(ak_replays_create(n.inst->replays, &f, 1000, 2000, &o), AK_REPLAY_TOO_MANY);
  p.state = AK_REPLAY_CANCELLED;
  cr_assert_eq(ak_replays_patch(n.inst->replays, ids[1], &p, &o), AK_REPLAY_OK);
  json_decref(o);
  cr_expect_eq(ak_replays_create(n.inst->replays, &f, 1000, 2000, &o), AK_REPLAY_OK);
  cr_assert(ak_uuid_parse(json_string_value(json_object_get(o, "id")), id));
  json_decref(o);
  /* a finished job with the same filter does not count: a new job */
  f.source_id = src[1];
  cr_expect_eq(ak_replays_create(n.inst->replays, &f, 1000, 2000, &o), AK_REPLAY_TOO_MANY);
  /* newest first, across a restart */
  replays_restart(&n);
  o = ak_replays_list(n.inst->replays);
  json_t *arr = json_object_get(o, "replays");
  cr_assert_eq(json_array_size(arr), AK_REPLAY_MAX_ACTIVE + 1);
  uint8_t first[16], last[16];
  cr_assert(ak_uuid_parse(json_string_value(json_object_get(json_array_get(arr, 0), "id")), first));
  cr_assert(ak_uuid_parse(json_string_value(json_object_get(json_array_get(arr, AK_REPLAY_MAX_ACTIVE), "id")), last));
  cr_expect_arr_eq(first, id, 16);
  cr_expect_arr_eq(last, ids[0], 16);
  json_decref(o);
  f.source_id = "src_even_more";
  cr_expect_eq(ak_replays_create(n.inst->replays, &f, 1000, 2000, &o), AK_REPLAY_TOO_MANY, "the cap survives a restart");
  node_close(&n);
}

Test(replay, create_fails_cleanly_on_a_closed_store) {
  node_t n;
  node_open(&n);
  ak_store_close(n.inst->store);
  ak_replay_filter_t f = no_filter();
  json_t *o = NULL;
  cr_expect_eq(ak_replays_create(n.inst->replays, &f, 1000, 2000, &o), AK_REPLAY_STORE_ERROR);
  o = ak_replays_list(n.inst->replays);
  cr_expect_eq(json_array_size(json_object_get(o, "replays")), 0, "nothing half-created");
  json_decref(o);
  ak_replays_tick(n.inst->replays, ak_now_ms()); /* a tick on a closed store does nothing */
  char *err = NULL;
  ak_replays_t *r = ak_replays_new(n.inst);
  cr_expect_eq(ak_replays_load(r, &err), -1);
  cr_expect_not_null(err);
  free(err);
  ak_replays_free(r);
  node_close(&n);
}

Test(replay, damaged_job_record_is_left_out) {
  node_t n;
  node_open(&n);
  uint8_t k[AK_REPLAY_KEY_LEN], id[16];
  memset(id, 0x33, 16);
  ak_key_replay(k, id);
  put_raw(&n, AK_CF_DEFAULT, k, sizeof k, "{\"kind\":\"dlq\"", 13);
  replays_restart(&n);
  json_t *o = ak_replays_list(n.inst->replays);
  cr_expect_eq(json_array_size(json_object_get(o, "replays")), 0);
  json_decref(o);
  node_close(&n);
}

Test(replay, spare_capacity_only_and_the_dispatcher_is_told) {
  node_t n;
  node_open(&n);
  n.inst->dispatch = (ak_dispatch_t *)&fake;
  memset(&fake, 0, sizeof fake);
  fake.room = true;
  int64_t base = ak_now_ms() - 60000;
  put_dead(&n, base + 1, 1, 0, "src_a", "acme");
  put_dead(&n, base + 2, 2, 0, "src_b", "beta");
  put_dead(&n, base + 3, 3, 0, "src_a", "acme");
  ak_replay_filter_t f = no_filter();
  uint8_t rid[16];
  json_decref(create(&n, &f, 10, rid));
  int64_t t0 = ak_now_ms();
  ak_replays_tick(n.inst->replays, t0);
  fake.lag = AK_REPLAY_LAG_DEFAULT + 1; /* dispatch is behind */
  ak_replays_tick(n.inst->replays, t0 + 1000);
  cr_expect_eq(dead_count(&n), 3);
  fake.lag = AK_REPLAY_LAG_DEFAULT; /* at the limit is fine... */
  fake.room = false;                /* ...but the window is full */
  ak_replays_tick(n.inst->replays, t0 + 2000);
  cr_expect_eq(dead_count(&n), 3);
  cr_expect_eq(fake.notes, 0);
  fake.room = true;
  ak_replays_tick(n.inst->replays, t0 + 2100); /* credit only since the last held tick */
  cr_expect_eq(dead_count(&n), 2);
  ak_replays_tick(n.inst->replays, t0 + 3100);
  cr_expect_eq(dead_count(&n), 0);
  cr_assert_eq(fake.notes, 3, "one note per tenant per tick");
  cr_expect_str_eq(fake.tenant[0], "acme");
  cr_expect_eq(fake.rows[0], 1);
  cr_expect_eq(fake.at[0], t0 + 2100);
  int acme = fake.tenant[1][0] == 'a' ? 1 : 2, beta = 3 - acme;
  cr_expect_str_eq(fake.tenant[acme], "acme");
  cr_expect_str_eq(fake.tenant[beta], "beta");
  for (int i = 1; i < 3; i++) {
    cr_expect_eq(fake.rows[i], 1);
    cr_expect_eq(fake.from_dead[i], 1);
    cr_expect_eq(fake.at[i], t0 + 3100);
  }
  cr_expect_str_eq(jstate(&n, rid), "done");
  node_close(&n);
}

/* Admin calls from another thread while the tick runs: every row moves exactly once. */
typedef struct race {
  node_t *n;
  uint8_t rid[16];
  _Atomic int stop;
} race_t;

static void *ticker(void *arg) {
  race_t *rc = arg;
  int64_t t = ak_now_ms();
  while (!rc->stop) ak_replays_tick(rc->n->inst->replays, t += 100);
  return NULL;
}

Test(replay, admin_calls_race_the_tick) {
  node_t n;
  node_open(&n);
  int64_t base = ak_now_ms() - 60000;
  for (uint64_t s = 1; s <= 300; s++) put_dead(&n, base + (int64_t)s, s, 0, s % 2 ? "src_a" : "src_b", "acme");
  race_t rc = {.n = &n};
  ak_replay_filter_t f = no_filter();
  f.source_id = "src_a";
  json_decref(create(&n, &f, 200, rc.rid));
  pthread_t th;
  pthread_create(&th, NULL, ticker, &rc);
  uint8_t other[16];
  f.source_id = "src_b";
  json_decref(create(&n, &f, 300, other));
  for (int i = 0; i < 200; i++) {
    json_t *o = NULL;
    ak_replay_patch_t p = {.state = i % 2 ? AK_REPLAY_RUNNING : AK_REPLAY_PAUSED, .rate = 100 + i};
    ak_replay_result_t res = ak_replays_patch(n.inst->replays, rc.rid, &p, &o);
    cr_assert(res == AK_REPLAY_OK || res == AK_REPLAY_FINISHED);
    json_decref(o);
    json_decref(ak_replays_list(n.inst->replays));
    ak_replays_settled(n.inst->replays, other, i % 3 == 0);
  }
  ak_replay_patch_t p = {.state = AK_REPLAY_RUNNING};
  json_t *o = NULL;
  ak_replay_result_t res = ak_replays_patch(n.inst->replays, rc.rid, &p, &o);
  json_decref(o);
  for (int i = 0; i < 400 && (strcmp(jstate(&n, rc.rid), "done") || strcmp(jstate(&n, other), "done")); i++)
    usleep(5000);
  rc.stop = 1;
  pthread_join(th, NULL);
  cr_expect(res == AK_REPLAY_OK || res == AK_REPLAY_FINISHED);
  cr_expect_str_eq(jstate(&n, rc.rid), "done");
  cr_expect_str_eq(jstate(&n, other), "done");
  cr_expect_eq(jfield(&n, rc.rid, "moved") + jfield(&n, other, "moved"), 300);
  cr_expect_eq(dead_count(&n), 0);
  cr_expect_eq(dues(&n)->count, 300);
  replays_restart(&n);
  cr_expect_eq(jfield(&n, rc.rid, "moved"), 150);
  cr_expect_eq(jfield(&n, other, "moved"), 150);
  node_close(&n);
}

/* ------------------------------------------------------------------ listing ---- */

Test(replay, dlq_list_newest_first_with_total_and_filters) {
  node_t n;
  node_open(&n);
  int64_t base = 1700000000000;
  put_dead(&n, base + 10, 1, 0, "src_a", "acme");
  put_dead(&n, base + 20, 2, 1, "src_b", "beta");
  put_dead(&n, base + 30, 3, 0, "src_a", "acme");
  uint8_t xk[AK_DEAD_KEY_LEN];
  ak_key_dead(xk, base + 40, 4, 0);
  put_raw(&n, AK_CF_INDEX, xk, sizeof xk, "junk", 4);
  /* seq 2's hook is kept (a dead row keeps its hook): its size and content type are listed */
  ak_envelope_t env = {.seq = 2, .received_at_ms = base + 20 - 5000, .source = "src_b", .source_len = 5,
                       .tenant = "beta", .tenant_len = 4, .content_type = "application/json",
                       .content_type_len = 16, .body = (const uint8_t *)"{\"n\":2}", .body_len = 7};
  hook_id(2, env.id);
  size_t rl = 0;
  uint8_t *rec = ak_envelope_encode(&env, &rl);
  cr_assert_not_null(rec);
  uint8_t hk[AK_HOOK_KEY_LEN];
  ak_key_hook(hk, 2);
  put_raw(&n, AK_CF_HOOKS, hk, sizeof hk, rec, rl);
  free(rec);
  json_t *o = NULL;
  cr_assert_eq(ak_replays_dlq_list(n.inst->store, NULL, NULL, -1, 100, &o), 0);
  cr_expect_eq(jint(o, "total"), 4);
  json_t *es = json_object_get(o, "entries");
  cr_assert_eq(json_array_size(es), 4);
  json_t *e = json_array_get(es, 0);
  cr_expect_str_eq(json_string_value(json_object_get(e, "reason")), "undecodable delivery row");
  cr_expect_eq(jint(e, "seq"), 4);
  e = json_array_get(es, 2);
  cr_expect_eq(jint(e, "seq"), 2);
  cr_expect_eq(jint(e, "sink_index"), 1);
  cr_expect_str_eq(json_string_value(json_object_get(e, "source_id")), "src_b");
  cr_expect_str_eq(json_string_value(json_object_get(e, "tenant_id")), "beta");
  cr_expect_str_eq(json_string_value(json_object_get(e, "sink")), "http");
  cr_expect_eq(jint(e, "attempts"), 84);
  cr_expect_eq(jint(e, "dead_lettered_at"), base + 20);
  cr_expect_eq(jint(e, "received_at"), base + 20 - 5000);
  cr_expect_str_eq(json_string_value(json_object_get(e, "reason")), "{sink, http, status 500}");
  cr_expect_eq(jint(e, "size"), 7);
  cr_expect_str_eq(json_string_value(json_object_get(e, "content_type")), "application/json");
  json_t *gone = json_array_get(es, 1); /* seq 3: no hook to read */
  cr_expect(json_is_null(json_object_get(gone, "size")) && json_is_null(json_object_get(gone, "content_type")));
  char idt[AK_UUID_STR_LEN];
  uint8_t hid[16];
  hook_id(2, hid);
  ak_uuid_format(hid, idt);
  cr_expect_str_eq(json_string_value(json_object_get(e, "id")), idt);
  cr_expect_null(json_object_get(e, "body"));
  json_decref(o);

  cr_assert_eq(ak_replays_dlq_list(n.inst->store, "src_a", NULL, -1, 1, &o), 0);
  cr_expect_eq(jint(o, "total"), 2, "total counts past the limit");
  es = json_object_get(o, "entries");
  cr_assert_eq(json_array_size(es), 1);
  cr_expect_eq(jint(json_array_get(es, 0), "seq"), 3);
  json_decref(o);

  cr_assert_eq(ak_replays_dlq_list(n.inst->store, NULL, NULL, base + 20, 0, &o), 0);
  cr_expect_eq(jint(o, "total"), 3, "since is inclusive");
  cr_expect_eq(json_array_size(json_object_get(o, "entries")), 0);
  json_decref(o);

  ak_store_close(n.inst->store);
  cr_expect_eq(ak_replays_dlq_list(n.inst->store, NULL, NULL, -1, 100, &o), -1);
  node_close(&n);
}

/* ------------------------------------------------------------- archive jobs ---- */

/* The archive side's stand-in: hooks seq 1..6 of a source this node does not have,
 * received at 1000 + seq; every request is first answered "not ready" (queued), then
 * with the next two hooks; the first batch also reports one segment gone. */
static struct {
  int calls;
  uint64_t after[32];
} af;

static int fake_fetch(void *ctx, const uint8_t job[16], uint64_t after, int64_t from, int64_t to, size_t max,
                      ak_replay_abatch_t *out) {
  (void)job;
  cr_assert_eq(ctx, (void *)&af);
  cr_assert_eq(from, 1000);
  cr_assert_eq(to, 2000);
  cr_assert_geq(max, 1);
  cr_assert_lt(af.calls, 32);
  af.after[af.calls++] = after;
  if (af.calls % 2 == 1) return AK_REPLAY_FETCH_NOT_READY;
  memset(out, 0, sizeof *out);
  out->v = calloc(2, sizeof *out->v);
  cr_assert_not_null(out->v);
  out->looked_to = after;
  for (uint64_t seq = after + 1; seq <= after + 2 && seq <= 6; seq++) {
    ak_envelope_t env = {.seq = seq, .received_at_ms = 1000 + (int64_t)seq, .source = "gone_src",
                         .source_len = 8, .tenant = "acme", .tenant_len = 4,
                         .body = (const uint8_t *)"{}", .body_len = 2};
    hook_id(seq, env.id);
    size_t rl = 0;
    uint8_t *rec = ak_envelope_encode(&env, &rl);
    cr_assert_not_null(rec);
    out->v[out->n++] = (ak_replay_arec_t){.seq = seq, .rec = rec, .len = rl};
    out->looked_to = seq;
  }
  out->end = out->looked_to >= 6;
  out->gone = after == 0;
  return AK_REPLAY_FETCH_READY;
}

Test(replay, archive_job_record_round_trip_and_cursor) {
  node_t n;
  node_open(&n);
  memset(&af, 0, sizeof af);
  uint16_t sinks[2] = {0, 2};
  ak_replay_filter_t f = no_filter();
  f.is_archive = true;
  f.from_ms = 1000;
  f.to_ms = 2000;
  f.tenant_id = "acme";
  f.sinks = sinks;
  f.nsinks = 2;
  uint8_t rid[16];
  json_t *o = create(&n, &f, 1000, rid);
  cr_expect_str_eq(json_string_value(json_object_get(o, "kind")), "archive");
  char *fs = json_dumps(json_object_get(o, "filter"), JSON_COMPACT | JSON_SORT_KEYS);
  cr_expect_str_eq(fs, "{\"from\":1000,\"sinks\":[0,2],\"tenant_id\":\"acme\",\"to\":2000}");
  free(fs);
  json_decref(o);
  /* the same filter while it runs: that job; another window: a new one */
  json_t *o2 = NULL;
  cr_expect_eq(ak_replays_create(n.inst->replays, &f, 1000, AK_REPLAY_LAG_DEFAULT, &o2), AK_REPLAY_EXISTS);
  json_decref(o2);

  /* no archive registered (no storage role): the job waits */
  int64_t t0 = ak_now_ms();
  ak_replays_tick(n.inst->replays, t0);
  ak_replays_tick(n.inst->replays, t0 + 100);
  cr_expect_str_eq(jstate(&n, rid), "running");
  ak_replays_set_archive(n.inst->replays, fake_fetch, &af);
  ak_replays_tick(n.inst->replays, t0 + 200); /* queued */
  cr_expect_eq(af.calls, 1);
  ak_replays_tick(n.inst->replays, t0 + 300); /* seqs 1, 2: no such source, skipped */
  cr_expect_eq(af.calls, 2);
  cr_expect_eq(af.after[1], 0);
  cr_expect_eq(jfield(&n, rid, "scanned"), 2);
  cr_expect_eq(jfield(&n, rid, "skipped"), 3, "the gone segment and the two hooks without a source");
  cr_expect_eq(jfield(&n, rid, "moved"), 0);

  /* a restart: the record brings back the kind, the filter and the cursor (seq 2) */
  replays_restart(&n);
  o = job(&n, rid);
  cr_expect_str_eq(json_string_value(json_object_get(o, "kind")), "archive");
  cr_expect_str_eq(json_string_value(json_object_get(json_object_get(o, "filter"), "tenant_id")), "acme");
  cr_expect_eq(json_array_size(json_object_get(json_object_get(o, "filter"), "sinks")), 2);
  cr_expect_eq(jint(o, "skipped"), 3);
  json_decref(o);
  ak_replays_set_archive(n.inst->replays, fake_fetch, &af);
  int64_t t = t0 + 1000;
  for (int i = 0; i < 20 && !strcmp(jstate(&n, rid), "running"); i++) {
    ak_replays_tick(n.inst->replays, t);
    t += 100;
  }
  cr_expect_eq(af.after[2], 2, "resumed after the cursor's seq");
  cr_expect_str_eq(jstate(&n, rid), "done");
  cr_expect_eq(jfield(&n, rid, "scanned"), 6);
  cr_expect_eq(jfield(&n, rid, "skipped"), 7);
  cr_expect_eq(jfield(&n, rid, "moved"), 0);
  /* taken back: no call after that */
  ak_replays_set_archive(n.inst->replays, NULL, NULL);
  int calls = af.calls;
  ak_replays_tick(n.inst->replays, t + 100);
  cr_expect_eq(af.calls, calls);
  node_close(&n);
}

Test(replay, dlq_record_loads_unchanged_beside_archive_records) {
  node_t n;
  node_open(&n);
  ak_replay_filter_t f = no_filter();
  f.source_id = "src_a";
  uint8_t d[16], a[16];
  json_decref(create(&n, &f, 10, d));
  f = no_filter();
  f.is_archive = true;
  f.from_ms = 1000;
  f.to_ms = 2000;
  json_decref(create(&n, &f, 10, a));
  replays_restart(&n);
  json_t *o = job(&n, d);
  cr_expect_str_eq(json_string_value(json_object_get(o, "kind")), "dlq");
  char *fs = json_dumps(json_object_get(o, "filter"), JSON_COMPACT | JSON_SORT_KEYS);
  cr_expect_str_eq(fs, "{\"source_id\":\"src_a\"}");
  free(fs);
  json_decref(o);
  o = job(&n, a);
  cr_expect_str_eq(json_string_value(json_object_get(o, "kind")), "archive");
  fs = json_dumps(json_object_get(o, "filter"), JSON_COMPACT | JSON_SORT_KEYS);
  cr_expect_str_eq(fs, "{\"from\":1000,\"to\":2000}");
  free(fs);
  json_decref(o);
  node_close(&n);
}

static void put_low(node_t *n, uint64_t low) {
  uint8_t v[8];
  ak_put_u64(v, low);
  put_raw(n, AK_CF_DEFAULT, AK_KEY_DISPATCH_LOW, strlen(AK_KEY_DISPATCH_LOW), v, 8);
}

Test(replay, archive_job_waits_for_the_hook_log) {
  node_t n;
  node_open(&n);
  memset(&af, 0, sizeof af);
  put_low(&n, 2); /* hook 1 settled on the log, hooks 2.. maybe not */
  ak_replay_filter_t f = no_filter();
  f.is_archive = true;
  f.from_ms = 1000;
  f.to_ms = 2000;
  uint8_t rid[16];
  json_decref(create(&n, &f, 1000, rid));
  ak_replays_set_archive(n.inst->replays, fake_fetch, &af);
  int64_t t = ak_now_ms();
  for (int i = 0; i < 10; i++, t += 100) ak_replays_tick(n.inst->replays, t);
  cr_expect_str_eq(jstate(&n, rid), "running");
  cr_expect_eq(jfield(&n, rid, "scanned"), 1, "only the hook below the log's low mark is decided");
  put_low(&n, 100);
  for (int i = 0; i < 20 && !strcmp(jstate(&n, rid), "running"); i++, t += 100) ak_replays_tick(n.inst->replays, t);
  cr_expect_str_eq(jstate(&n, rid), "done");
  cr_expect_eq(jfield(&n, rid, "scanned"), 6);
  ak_replays_set_archive(n.inst->replays, NULL, NULL);
  node_close(&n);
}
