/* Unit tests: the quarantine pen. Bucket math (burst, refill at rate, retry_after), the
 * byte cap and refunds, the waiting cap; with a real store in a temp dir, pen entries
 * written by the writer in the hooks' group commit, the byte total across a reopen,
 * list / purge / release, and the quarantine config keys. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/envelope.h"
#include "core/sources.h"
#include "fixture.h"
#include "modules.h"
#include "queue/quarantine.h"
#include "queue/writer.h"
#include "store/store.h"
#include "verify/verifier.h"
#include "writer_waiter.h"

#define MS 1000000LL /* ns */

/* ------------------------------------------------------------------ bucket math ---- */

Test(pen, burst_then_refill_at_rate) {
  ak_pen_t *pen = ak_pen_new_raw(3, 2.0, 1 << 20, 0);
  ak_pen_bucket_t *b0 = ak_pen_bucket_new(pen), *b1 = ak_pen_bucket_new(pen);
  int64_t t0 = 1000 * MS, ra = -1;
  for (int i = 0; i < 3; i++) {
    cr_assert_eq(ak_pen_admit_at(pen, b0, 10, t0, &ra), AK_PEN_OK, "token %d of the burst", i);
    ak_pen_settle(pen, b0, 10, true);
  }
  cr_assert_eq(ak_pen_admit_at(pen, b0, 10, t0, &ra), AK_PEN_RATE_LIMITED);
  cr_expect_eq(ra, 500, "one token at 2/s is 500 ms away, got %lld", (long long)ra);
  cr_assert_eq(ak_pen_admit_at(pen, b0, 10, t0 + 250 * MS, &ra), AK_PEN_RATE_LIMITED);
  cr_expect_eq(ra, 250, "half a token refilled: 250 ms left, got %lld", (long long)ra);
  /* another source has its own bucket */
  cr_assert_eq(ak_pen_admit_at(pen, b1, 10, t0 + 250 * MS, &ra), AK_PEN_OK);
  ak_pen_settle(pen, b1, 10, true);
  cr_assert_eq(ak_pen_admit_at(pen, b0, 10, t0 + 500 * MS, &ra), AK_PEN_OK, "refilled at rate");
  ak_pen_settle(pen, b0, 10, true);
  cr_assert_eq(ak_pen_admit_at(pen, b0, 10, t0 + 500 * MS, &ra), AK_PEN_RATE_LIMITED);
  /* a long pause refills up to burst, never beyond */
  int64_t t1 = t0 + 60000 * MS;
  for (int i = 0; i < 3; i++) {
    cr_assert_eq(ak_pen_admit_at(pen, b0, 10, t1, &ra), AK_PEN_OK);
    ak_pen_settle(pen, b0, 10, true);
  }
  cr_assert_eq(ak_pen_admit_at(pen, b0, 10, t1, &ra), AK_PEN_RATE_LIMITED, "capped at burst");
  cr_expect_eq(ak_pen_bytes(pen), 80);
  cr_expect_eq(ak_pen_waiting(pen), 0);
  ak_pen_bucket_free(b0);
  ak_pen_bucket_free(b1);
  ak_pen_free(pen);
}

Test(pen, slow_rate_retry_after_and_unknown_source) {
  ak_pen_t *pen = ak_pen_new_raw(1, 0.001, 1 << 20, 0);
  ak_pen_bucket_t *b0 = ak_pen_bucket_new(pen), *b1 = ak_pen_bucket_new(pen);
  int64_t ra = 0;
  cr_assert_eq(ak_pen_admit_at(pen, b0, 1, 0, &ra), AK_PEN_OK);
  ak_pen_settle(pen, b0, 1, true);
  cr_assert_eq(ak_pen_admit_at(pen, b0, 1, 0, &ra), AK_PEN_RATE_LIMITED);
  cr_expect_eq(ra, 1000000, "0.001/s: 1000 s for one token, got %lld", (long long)ra);
  cr_assert_eq(ak_pen_admit_at(pen, NULL, 1, 0, &ra), AK_PEN_RATE_LIMITED, "no bucket, no admission");
  cr_expect_eq(ak_pen_bytes(pen), 1);
  ak_pen_bucket_free(b0);
  ak_pen_bucket_free(b1);
  ak_pen_free(pen);
}

Test(pen, byte_cap_refuses_without_spending_a_token) {
  ak_pen_t *pen = ak_pen_new_raw(2, 0.001, 1000, 0);
  ak_pen_bucket_t *b0 = ak_pen_bucket_new(pen), *b1 = ak_pen_bucket_new(pen);
  int64_t ra = 0;
  cr_assert_eq(ak_pen_admit_at(pen, b0, 600, 0, &ra), AK_PEN_OK);
  ak_pen_settle(pen, b0, 600, true);
  cr_assert_eq(ak_pen_admit_at(pen, b0, 600, 0, &ra), AK_PEN_FULL);
  cr_expect_eq(ra, AK_PEN_FULL_RETRY_MS);
  cr_expect_eq(ak_pen_bytes(pen), 600, "a refusal reserves nothing");
  /* the token the full pen refused was refunded: exactly 400 more bytes fit */
  cr_assert_eq(ak_pen_admit_at(pen, b0, 400, 0, &ra), AK_PEN_OK);
  ak_pen_settle(pen, b0, 400, true);
  cr_expect_eq(ak_pen_bytes(pen), 1000);
  cr_assert_eq(ak_pen_admit_at(pen, b0, 0, 0, &ra), AK_PEN_RATE_LIMITED, "both tokens spent");
  /* a purge frees bytes: admission resumes (bucket permitting) */
  ak_pen_release_bytes(pen, 1000);
  cr_expect_eq(ak_pen_bytes(pen), 0);
  ak_pen_bucket_free(b0);
  ak_pen_bucket_free(b1);
  ak_pen_free(pen);
}

Test(pen, failed_write_refunds_token_and_bytes) {
  ak_pen_t *pen = ak_pen_new_raw(1, 0.001, 1000, 0);
  ak_pen_bucket_t *b0 = ak_pen_bucket_new(pen), *b1 = ak_pen_bucket_new(pen);
  int64_t ra = 0;
  cr_assert_eq(ak_pen_admit_at(pen, b0, 700, 0, &ra), AK_PEN_OK);
  cr_expect_eq(ak_pen_bytes(pen), 700, "bytes reserved before the write");
  cr_expect_eq(ak_pen_waiting(pen), 1);
  ak_pen_settle(pen, b0, 700, false);
  cr_expect_eq(ak_pen_bytes(pen), 0);
  cr_expect_eq(ak_pen_waiting(pen), 0);
  cr_assert_eq(ak_pen_admit_at(pen, b0, 700, 0, &ra), AK_PEN_OK, "the token came back");
  ak_pen_settle(pen, b0, 700, true);
  cr_expect_eq(ak_pen_bytes(pen), 700);
  ak_pen_bucket_free(b0);
  ak_pen_bucket_free(b1);
  ak_pen_free(pen);
}

Test(pen, waiting_cap) {
  ak_pen_t *pen = ak_pen_new_raw(5000, 1.0, 1 << 30, 0);
  ak_pen_bucket_t *b0 = ak_pen_bucket_new(pen), *b1 = ak_pen_bucket_new(pen);
  int64_t ra = 0;
  for (int i = 0; i < AK_PEN_MAX_WAITING; i++) cr_assert_eq(ak_pen_admit_at(pen, b0, 10, 0, &ra), AK_PEN_OK);
  cr_assert_eq(ak_pen_admit_at(pen, b0, 10, 0, &ra), AK_PEN_OVERLOAD);
  cr_expect_eq(ak_pen_waiting(pen), AK_PEN_MAX_WAITING);
  cr_expect_eq(ak_pen_bytes(pen), 10 * AK_PEN_MAX_WAITING, "an overload reserves no bytes");
  ak_pen_settle(pen, b0, 10, true);
  cr_assert_eq(ak_pen_admit_at(pen, b0, 10, 0, &ra), AK_PEN_OK, "a settled write frees its slot");
  for (int i = 0; i < AK_PEN_MAX_WAITING; i++) ak_pen_settle(pen, b0, 10, true);
  cr_expect_eq(ak_pen_waiting(pen), 0);
  /* tokens: 1000 + 1 + 1 admitted, the overload's token refunded */
  int ok = 0;
  while (ak_pen_admit_at(pen, b0, 0, 0, &ra) == AK_PEN_OK) {
    ak_pen_settle(pen, b0, 0, true);
    ok++;
  }
  cr_expect_eq(ok, 5000 - AK_PEN_MAX_WAITING - 1);
  ak_pen_bucket_free(b0);
  ak_pen_bucket_free(b1);
  ak_pen_free(pen);
}

typedef struct {
  ak_pen_t *pen;
  ak_pen_bucket_t *b;
  int n;
} race_arg_t;

static void *race(void *p) {
  race_arg_t *a = p;
  for (int i = 0; i < a->n; i++) {
    int64_t ra;
    if (ak_pen_admit(a->pen, a->b, 3, &ra) == AK_PEN_OK) ak_pen_settle(a->pen, a->b, 3, i % 2 == 0);
  }
  return NULL;
}

/* concurrent admits and settles never lose a byte or a slot */
Test(pen, concurrent_accounting) {
  ak_pen_t *pen = ak_pen_new_raw(1000000, 1.0, 1 << 30, 0);
  ak_pen_bucket_t *b0 = ak_pen_bucket_new(pen), *b1 = ak_pen_bucket_new(pen);
  pthread_t t[4];
  race_arg_t a = {pen, b0, 20000};
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, race, &a);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  cr_expect_eq(ak_pen_waiting(pen), 0);
  cr_expect_eq(ak_pen_bytes(pen), 4 * 10000 * 3, "only committed bytes stay");
  ak_pen_bucket_free(b0);
  ak_pen_bucket_free(b1);
  ak_pen_free(pen);
}

/* ------------------------------------------------------------------- config keys ---- */

static ak_config_t *load(const char *yaml, char **err) {
  const char *const env[] = {NULL};
  ak_config_t *cfg = NULL;
  *err = NULL;
  if (ak_config_load_string(ak_modules(), yaml, strlen(yaml), env, &cfg, err) != 0) return NULL;
  return cfg;
}

Test(pen, config_defaults_and_bounds) {
  char *err;
  ak_config_t *cfg = load("sources:\n  a: {sinks: [{type: log}]}\n", &err);
  cr_assert_not_null(cfg, "%s", err);
  cr_expect_eq(((const ak_quarantine_cfg_t *)ak_config_of(cfg, &ak_mod_quarantine))->burst, 100);
  cr_expect_float_eq(((const ak_quarantine_cfg_t *)ak_config_of(cfg, &ak_mod_quarantine))->rate, 20.0, 1e-9);
  cr_expect_eq(((const ak_quarantine_cfg_t *)ak_config_of(cfg, &ak_mod_quarantine))->max_bytes, 1073741824LL);
  ak_config_free(cfg);
  cfg = load("quarantine: {burst: 2, rate: 0.001, max_bytes: 1000}\n", &err);
  cr_assert_not_null(cfg, "%s", err);
  cr_expect_eq(((const ak_quarantine_cfg_t *)ak_config_of(cfg, &ak_mod_quarantine))->burst, 2);
  cr_expect_float_eq(((const ak_quarantine_cfg_t *)ak_config_of(cfg, &ak_mod_quarantine))->rate, 0.001, 1e-12);
  cr_expect_eq(((const ak_quarantine_cfg_t *)ak_config_of(cfg, &ak_mod_quarantine))->max_bytes, 1000);
  ak_config_free(cfg);
  const char *bad[][2] = {
      {"quarantine: {burst: 0}\n", "quarantine.burst"},
      {"quarantine: {rate: 0}\n", "quarantine.rate"},
      {"quarantine: {rate: -1}\n", "quarantine.rate"},
      {"quarantine: {rate: fast}\n", "quarantine.rate"},
      {"quarantine: {max_bytes: 0}\n", "quarantine.max_bytes"},
      {"quarantine: {evict: true}\n", "evict"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cfg = load(bad[i][0], &err);
    cr_expect_null(cfg, "%s accepted", bad[i][0]);
    cr_expect(err && strstr(err, bad[i][1]), "%s: error names %s: %s", bad[i][0], bad[i][1], err ? err : "");
    ak_config_free(cfg);
    free(err);
  }
}

/* --------------------------------------------------------------- with a store ---- */

static ak_fx_t fx;

static void setup(void) { ak_fx_tmp(&fx, "pen-test"); }

static void teardown(void) {
  ak_fx_close(&fx);
  ak_fx_rm(&fx);
}

TestSuite(penstore, .init = setup, .fini = teardown);


/* A test's handle on the suite's node: the store, the sources, the pen and the writer,
 * opened by their modules; the writer started by hand (nothing else runs). */
typedef struct {
  ak_instance_t *inst;
  ak_pen_bucket_t *b[2]; /* the buckets of sources 0 and 1, as the edge holds them */
} node_t;

static void node_open_yaml(node_t *n, const char *yaml) {
  static const char *const only[] = {"node", "store", "sources", "quarantine", "batcher", NULL};
  ak_fx_open(&fx, yaml, only);
  n->inst = fx.inst;
  cr_assert_not_null(n->inst->pen);
  cr_assert_not_null(n->inst->sources);
  for (int i = 0; i < 2; i++) n->b[i] = ak_pen_bucket_new(n->inst->pen);
  cr_assert_eq(ak_writer_start(n->inst->writer), 0);
}

static void node_open(node_t *n, const char *batcher) {
  char yaml[512];
  snprintf(yaml, sizeof yaml,
           "%s\nquarantine: {burst: 10, rate: 1, max_bytes: 100000}\nsources:\n"
           "  q_src: {tenant: acme, on_verify_failure: quarantine, sinks: [{type: log}]}\n"
           "  z_src: {sinks: [{type: log}]}\n",
           batcher);
  node_open_yaml(n, yaml);
}

static void node_close(node_t *n) {
  for (int i = 0; i < 2; i++) ak_pen_bucket_free(n->b[i]);
  ak_fx_close(&fx);
  memset(n, 0, sizeof *n);
}

static const char *sig_name = "x-hub-signature-256";

static uint8_t *make_rec(ak_instance_t *inst, int64_t at, uint8_t id[16], size_t *len, const char *source,
                         const char *tenant, const char *body) {
  ak_envelope_t e = {0};
  ak_uuid7_new(&inst->ids, at, e.id);
  memcpy(id, e.id, 16);
  e.received_at_ms = at;
  e.tenant = tenant;
  e.tenant_len = strlen(tenant);
  e.source = source;
  e.source_len = strlen(source);
  e.method = "POST";
  e.method_len = 4;
  ak_header_t h = {sig_name, strlen(sig_name), "sha256=00", 9};
  e.headers = &h;
  e.nheaders = 1;
  e.body = (const uint8_t *)body;
  e.body_len = strlen(body);
  return ak_envelope_encode(&e, len);
}

/* Admit, write through the writer as AK_WRITE_QUARANTINE, settle: what the edge does. */
static ak_wr_status_t hold(node_t *n, size_t src, int64_t at, const char *body, uint8_t id[16]) {
  ak_write_req_t r;
  memset(&r, 0, sizeof r);
  waiter_t wt = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
  int64_t ra;
  cr_assert_eq(ak_pen_admit(n->inst->pen, n->b[src], strlen(body), &ra), AK_PEN_OK);
  const ak_source_cfg_t *s = &ak_sources_cfg(n->inst->cfg)->v[src];
  r.rec = make_rec(n->inst, at, r.id, &r.rec_len, s->id, s->tenant, body);
  memcpy(id, r.id, 16);
  r.body_len = strlen(body);
  r.received_at_ms = at;
  r.source = s;
  r.kind = AK_WRITE_QUARANTINE;
  r.reason = AK_VR_NO_MATCH;
  r.done = on_done;
  r.ctx = &wt;
  ak_wr_status_t st = ak_writer_submit(n->inst->writer, &r);
  if (st == AK_WR_QUEUED) {
    wait_for(&wt, 1);
    st = r.status;
  }
  ak_pen_settle(n->inst->pen, n->b[src], r.body_len, st == AK_WR_COMMITTED);
  free(r.rec);
  return st;
}

static int count_any(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  (void)k; (void)kl; (void)v; (void)vl;
  (*(int *)ctx)++;
  return 0;
}

static int count_cf(ak_store_t *st, int cf, const char *prefix) {
  int c = 0;
  cr_assert_eq(ak_store_scan(st, cf, prefix, prefix ? strlen(prefix) : 0, count_any, &c), 0);
  return c;
}

Test(penstore, held_entries_and_byte_total_survive_a_reopen) {
  node_t n;
  node_open(&n, "");
  uint8_t id1[16], id2[16], id3[16];
  cr_assert_eq(hold(&n, 0, 1000, "first forged body", id1), AK_WR_COMMITTED);
  cr_assert_eq(hold(&n, 0, 2000, "second", id2), AK_WR_COMMITTED);
  cr_assert_eq(hold(&n, 1, 3000, "third!", id3), AK_WR_COMMITTED);
  int64_t want = 17 + 6 + 6;
  cr_expect_eq(ak_pen_bytes(n.inst->pen), want);
  cr_expect_eq(count_cf(n.inst->store, AK_CF_QUARANTINE, "s"), 3);
  cr_expect_eq(count_cf(n.inst->store, AK_CF_QUARANTINE, "b"), 3);
  cr_expect_eq(count_cf(n.inst->store, AK_CF_HOOKS, NULL), 0, "a held hook is not a hook");
  cr_expect_eq(count_cf(n.inst->store, AK_CF_DELIVERIES, NULL), 0);
  cr_expect_eq(count_cf(n.inst->store, AK_CF_INDEX, NULL), 0, "no due, archive or id index entry");

  /* newest first, with the summary's fields */
  ak_pen_filter_t f;
  ak_pen_filter_init(&f, 100);
  ak_pen_entry_t *es;
  size_t cnt;
  cr_assert_eq(ak_pen_list(n.inst->store, &f, false, &es, &cnt), 0);
  cr_assert_eq(cnt, 3);
  cr_expect_eq(memcmp(es[0].id, id3, 16), 0);
  cr_expect_eq(memcmp(es[2].id, id1, 16), 0);
  cr_expect_str_eq(es[2].source_id, "q_src");
  cr_expect_str_eq(es[2].tenant_id, "acme");
  cr_expect_str_eq(es[0].tenant_id, "default");
  cr_expect_eq(es[2].reason, AK_VR_NO_MATCH);
  cr_expect_eq(es[2].size, 17);
  cr_expect_eq(es[2].received_at_ms, 1000);
  free(es);
  f.source_id = "q_src";
  f.limit = 1;
  cr_assert_eq(ak_pen_list(n.inst->store, &f, false, &es, &cnt), 0);
  cr_assert_eq(cnt, 1);
  cr_expect_eq(memcmp(es[0].id, id2, 16), 0, "newest of q_src");
  free(es);
  node_close(&n);

  /* reopen: the byte total is read back from the per-writer meta keys */
  node_open(&n, "batcher: {partitions: 2}");
  cr_expect_eq(ak_pen_bytes(n.inst->pen), want);
  uint8_t id4[16];
  cr_assert_eq(hold(&n, 0, 4000, "x", id4), AK_WR_COMMITTED);
  /* purge q_src up to received_at 2000: one synced batch with the admin byte key */
  ak_pen_filter_init(&f, 1000);
  f.source_id = "q_src";
  f.until_ms = 2000;
  int64_t deleted, bytes;
  cr_assert_eq(ak_pen_purge(n.inst->pen, n.inst->store, &f, &deleted, &bytes), 0);
  cr_expect_eq(deleted, 2);
  cr_expect_eq(bytes, 17 + 6);
  cr_expect_eq(ak_pen_bytes(n.inst->pen), 6 + 1);
  cr_expect_eq(count_cf(n.inst->store, AK_CF_QUARANTINE, "s"), 2);
  cr_expect_eq(count_cf(n.inst->store, AK_CF_QUARANTINE, "b"), 2);
  /* by id */
  ak_pen_filter_init(&f, 1000);
  f.has_id = true;
  memcpy(f.id, id4, 16);
  cr_assert_eq(ak_pen_purge(n.inst->pen, n.inst->store, &f, &deleted, &bytes), 0);
  cr_expect_eq(deleted, 1);
  cr_expect_eq(bytes, 1);
  node_close(&n);

  node_open(&n, "");
  cr_expect_eq(ak_pen_bytes(n.inst->pen), 6, "purges survive a reopen");
  int64_t stored = 0;
  cr_assert_eq(ak_pen_load_bytes(n.inst->store, &stored), 0);
  cr_expect_eq(stored, 6);
  node_close(&n);
}

Test(penstore, a_closed_store_refuses_and_refunds) {
  node_t n;
  node_open(&n, "");
  ak_store_close(n.inst->store);
  uint8_t id[16];
  ak_wr_status_t st = hold(&n, 0, 1000, "abc", id);
  cr_expect_neq(st, AK_WR_COMMITTED);
  cr_expect_eq(ak_pen_bytes(n.inst->pen), 0);
  cr_expect_eq(ak_pen_waiting(n.inst->pen), 0);
  ak_pen_filter_t f;
  ak_pen_filter_init(&f, 10);
  int64_t d, b;
  cr_expect_eq(ak_pen_purge(n.inst->pen, n.inst->store, &f, &d, &b), -1);
  ak_pen_entry_t *es;
  size_t cnt;
  cr_expect_eq(ak_pen_list(n.inst->store, &f, false, &es, &cnt), -1, "an unreadable pen is an error, not empty");
  node_close(&n);
}

/* a pen entry in the same group commit as hooks takes no seq */
Test(penstore, pen_entries_share_the_batch_and_take_no_seq) {
  node_t n;
  node_open(&n, "batcher: {max_delay_ms: 200}");
  enum { N = 6 };
  ak_write_req_t r[N];
  waiter_t wt = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
  for (int i = 0; i < N; i++) {
    memset(&r[i], 0, sizeof r[i]);
    const ak_source_cfg_t *s = &ak_sources_cfg(n.inst->cfg)->v[1];
    r[i].rec = make_rec(n.inst, 5000 + i, r[i].id, &r[i].rec_len, s->id, s->tenant, "body");
    r[i].body_len = 4;
    r[i].received_at_ms = 5000 + i;
    r[i].source = s;
    r[i].kind = i % 2 ? AK_WRITE_QUARANTINE : AK_WRITE_HOOK;
    r[i].done = on_done;
    r[i].ctx = &wt;
    if (r[i].kind == AK_WRITE_QUARANTINE) {
      int64_t ra;
      cr_assert_eq(ak_pen_admit(n.inst->pen, n.b[1], 4, &ra), AK_PEN_OK);
    }
    cr_assert_eq(ak_writer_submit(n.inst->writer, &r[i]), AK_WR_QUEUED);
  }
  wait_for(&wt, N);
  uint64_t want = 1;
  for (int i = 0; i < N; i++) {
    cr_assert_eq(r[i].status, AK_WR_COMMITTED);
    if (r[i].kind == AK_WRITE_HOOK) cr_expect_eq(r[i].seq, want++, "hook seqs stay dense");
    else ak_pen_settle(n.inst->pen, n.b[1], 4, true);
    free(r[i].rec);
  }
  cr_expect_eq(count_cf(n.inst->store, AK_CF_HOOKS, NULL), 3);
  cr_expect_eq(count_cf(n.inst->store, AK_CF_QUARANTINE, "s"), 3);
  cr_expect_eq(count_cf(n.inst->store, AK_CF_INDEX, "i"), 0, "their ids are sealed: no index keys");
  for (int i = 0; i < N; i += 2) {
    char *v = NULL;
    size_t vl = 0;
    uint64_t seq = 0;
    cr_expect_eq(ak_store_find_hook(n.inst->store, r[i].id, &seq, &v, &vl), 0);
    cr_expect_eq(seq, r[i].seq);
    free(v);
  }
  node_close(&n);
  node_open(&n, "");
  cr_expect_eq(ak_store_next_seq(n.inst->store), 4);
  cr_expect_eq(ak_store_hook_count(n.inst->store), 3);
  cr_expect_eq(ak_pen_bytes(n.inst->pen), 12);
  node_close(&n);
}

/* release: re-verification decides; passes become hooks under their original id */
static int check_body(void *ctx, const ak_source_t *src, const ak_envelope_t *env, int64_t now_s) {
  int *calls = ctx;
  calls[0]++;
  cr_expect_eq(now_s, 5, "judged at receive time (received_at 5000 ms)");
  cr_expect_eq(env->nheaders, 1);
  cr_expect_str_eq(src->cfg.id, "q_src");
  return env->body_len >= 4 && memcmp(env->body, "good", 4) == 0 ? 0 : AK_VR_NO_MATCH;
}

Test(penstore, release_commits_passes_under_their_original_id) {
  node_t n;
  node_open(&n, "");
  uint8_t good[16], bad[16], gone[16];
  cr_assert_eq(hold(&n, 0, 5000, "good body", good), AK_WR_COMMITTED);
  cr_assert_eq(hold(&n, 0, 5000, "bad body", bad), AK_WR_COMMITTED);
  cr_assert_eq(hold(&n, 1, 5000, "good too", gone), AK_WR_COMMITTED);
  node_close(&n);
  /* a restart with z_src dropped from the config: its held hook's source is gone (the
   * config's load and the sources are asserted by the open) */
  node_open_yaml(&n, "quarantine: {burst: 10, rate: 1, max_bytes: 100000}\nsources:\n"
                     "  q_src: {tenant: acme, on_verify_failure: quarantine, sinks: [{type: log}, {type: log}]}\n");
  int calls[1] = {0};
  ak_pen_filter_t f;
  ak_pen_filter_init(&f, 10000);
  ak_pen_release_result_t res;
  cr_assert_eq(ak_pen_release(n.inst->pen, n.inst, &f, check_body, calls, &res), 0);
  cr_expect_eq(res.scanned, 3);
  cr_expect_eq(res.moved, 1);
  cr_expect_eq(res.skipped, 2);
  cr_expect_eq(calls[0], 2, "a hook whose source is gone is not verified");
  cr_expect_eq(ak_pen_bytes(n.inst->pen), 8 + 8);
  /* the released hook: the original id and received_at, seq 1, delivery rows per current sinks */
  uint8_t ik[AK_ID_KEY_LEN];
  ak_key_id(ik, good);
  char *v = NULL;
  size_t vl = 0;
  cr_assert_eq(ak_store_get(n.inst->store, AK_CF_INDEX, ik, sizeof ik, &v, &vl), 0);
  cr_assert_eq(vl, 8);
  uint64_t seq = ak_get_u64((const uint8_t *)v);
  free(v);
  cr_expect_eq(seq, 1);
  uint8_t hk[AK_HOOK_KEY_LEN];
  ak_key_hook(hk, seq);
  cr_assert_eq(ak_store_get(n.inst->store, AK_CF_HOOKS, hk, sizeof hk, &v, &vl), 0);
  ak_envelope_t env;
  cr_assert_eq(ak_envelope_decode((const uint8_t *)v, vl, &env), 0);
  cr_expect_eq(memcmp(env.id, good, 16), 0);
  cr_expect_eq(env.seq, 1);
  cr_expect_eq(env.received_at_ms, 5000);
  cr_expect_eq(env.body_len, 9);
  ak_envelope_clear(&env);
  free(v);
  /* its id was given out when it was held: not sealed, found through its index key */
  uint64_t fseq = 0;
  cr_assert_eq(ak_store_find_hook(n.inst->store, good, &fseq, &v, &vl), 0);
  cr_expect_eq(fseq, 1);
  free(v);
  /* a hook like any other: its group's marker, no row per delivery; its unsealed id has
   * its reverse key for reclaim */
  cr_expect_eq(count_cf(n.inst->store, AK_CF_DELIVERIES, NULL), 0);
  cr_expect_eq(count_cf(n.inst->store, AK_CF_INDEX, "g"), 1);
  cr_expect_eq(count_cf(n.inst->store, AK_CF_INDEX, "j"), 1);
  cr_expect_eq(count_cf(n.inst->store, AK_CF_QUARANTINE, "s"), 2, "the released entry left the pen");
  cr_expect_eq(count_cf(n.inst->store, AK_CF_QUARANTINE, "b"), 2);
  /* again: nothing left passes */
  cr_assert_eq(ak_pen_release(n.inst->pen, n.inst, &f, check_body, calls, &res), 0);
  cr_expect_eq(res.scanned, 2);
  cr_expect_eq(res.moved, 0);
  node_close(&n);
  node_open(&n, "");
  cr_expect_eq(ak_pen_bytes(n.inst->pen), 16, "the release's decrement was committed with the hook");
  cr_expect_eq(ak_store_hook_count(n.inst->store), 1);
  node_close(&n);
}
