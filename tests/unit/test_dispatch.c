/* Unit tests: the dispatcher's claim pass over a real store, without its thread. Deficit
 * round-robin shares of a page, leftovers to the others, unreached tenants first on the
 * next pass, per-tenant and global windows (a lone tenant past its own, up to the node's
 * less a reserve, and held to it once another tenant waits), future rows left alone,
 * claims in memory only (a new dispatcher over the same store claims them again), a row
 * due before a tenant's cursor found again without claiming anything twice, and the boot
 * refusal of a sink that cannot be built. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/envelope.h"
#include "core/sources.h"
#include "dispatch/dispatch.h"
#include "fixture.h"
#include "store/batch.h"
#include "store/store.h"

#define FAR_FUTURE 4000000000000LL

/* A test's node, in a temp dir of its own: the store and the sources, opened by their
 * modules. The dispatcher is not opened: the tests make it (fx_dispatch) and run its
 * passes by hand, without its thread. */
typedef struct {
  ak_fx_t fx;
  ak_instance_t *inst;
  uint64_t seq;
} fx_t;

static void fx_open(fx_t *f, const char *dispatch_yaml) {
  static const char *const only[] = {"node", "store", "sources", NULL};
  memset(f, 0, sizeof *f);
  ak_fx_tmp(&f->fx, "dispatch");
  char yaml[1024];
  snprintf(yaml, sizeof yaml, "%s\nsources:\n  s: {sinks: [{type: log}]}\n", dispatch_yaml ? dispatch_yaml : "");
  ak_fx_open(&f->fx, yaml, only);
  f->inst = f->fx.inst;
  f->seq = 1;
}

static void fx_close(fx_t *f) {
  ak_fx_close(&f->fx);
  f->inst = NULL;
  ak_fx_rm(&f->fx);
}

/* n hooks of `tenant` for source s, each with one due row at `at`. */
static void add_rows(fx_t *f, const char *tenant, int n, int64_t at) {
  ak_batch_t *wb = ak_batch_new(f->inst->store);
  cr_assert_eq(ak_store_pin(f->inst->store), 0);
  for (int i = 0; i < n; i++) {
    uint64_t seq = f->seq++;
    ak_envelope_t env = {.seq = seq, .received_at_ms = at, .tenant = tenant, .tenant_len = strlen(tenant),
                         .source = "s", .source_len = 1, .method = "POST", .method_len = 4, .body = (const uint8_t *)"{}",
                         .body_len = 2};
    env.id[0] = (uint8_t)(seq >> 8);
    env.id[1] = (uint8_t)seq;
    env.id[6] = 0x70;
    size_t rl;
    uint8_t *rec = ak_envelope_encode(&env, &rl);
    uint8_t hk[AK_HOOK_KEY_LEN], dk[AK_DELIVERY_KEY_LEN], row[64], due[AK_DUE_KEY_MAX], dv[AK_DUE_VALUE_MAX];
    ak_key_hook(hk, seq);
    ak_batch_put(wb, AK_CF_HOOKS, hk, sizeof hk, rec, rl);
    free(rec);
    ak_key_delivery(dk, seq, 0);
    size_t rowl = ak_delivery_row(row, sizeof row, AK_DELIVERY_PENDING, 0, at, "log");
    ak_batch_put(wb, AK_CF_DELIVERIES, dk, sizeof dk, row, rowl);
    size_t kl = ak_key_due(due, tenant, strlen(tenant), at, seq, 0);
    size_t vl = ak_due_value(dv, sizeof dv, 0, "log", 3, NULL);
    ak_batch_put(wb, AK_CF_INDEX, due, kl, dv, vl);
  }
  ak_wf_class_t cls;
  char *err = NULL;
  cr_assert_eq(ak_store_write_pinned(f->inst->store, wb, false, &cls, &err), 0);
  ak_store_unpin(f->inst->store);
  ak_batch_free(wb);
}

static ak_dispatch_t *fx_dispatch(fx_t *f) {
  char err[256] = "";
  ak_dispatch_t *d = ak_dispatch_new(f->inst, err, sizeof err);
  cr_assert_not_null(d, "%s", err);
  cr_assert_eq(ak_dispatch_load(d, err, sizeof err), 0, "%s", err);
  return d;
}

Test(dispatch, equal_shares_of_a_page) {
  fx_t f;
  fx_open(&f, "dispatch: {batch: 128}");
  add_rows(&f, "a", 1000, 1000);
  add_rows(&f, "b", 1000, 1000);
  ak_dispatch_t *d = fx_dispatch(&f);
  cr_assert_eq(ak_dispatch_debug_scan(d, FAR_FUTURE), 128);
  cr_expect_eq(ak_dispatch_debug_tenant_claimed(d, "a"), 64);
  cr_expect_eq(ak_dispatch_debug_tenant_claimed(d, "b"), 64);
  ak_dispatch_free(d);
  fx_close(&f);
}

Test(dispatch, a_light_tenant_leaves_the_rest_to_others) {
  fx_t f;
  fx_open(&f, "dispatch: {batch: 128}");
  add_rows(&f, "heavy", 1000, 1000);
  add_rows(&f, "light", 10, 5000);
  ak_dispatch_t *d = fx_dispatch(&f);
  cr_assert_eq(ak_dispatch_debug_scan(d, FAR_FUTURE), 128, "the page is filled");
  cr_expect_eq(ak_dispatch_debug_tenant_claimed(d, "light"), 10, "the light tenant got all it had");
  cr_expect_eq(ak_dispatch_debug_tenant_claimed(d, "heavy"), 118, "the heavy one the rest");
  ak_dispatch_free(d);
  fx_close(&f);
}

Test(dispatch, tenants_the_page_missed_go_first_next_time) {
  fx_t f;
  fx_open(&f, "dispatch: {batch: 128}");
  char name[16];
  for (int i = 0; i < 200; i++) {
    snprintf(name, sizeof name, "t%03d", i);
    add_rows(&f, name, 5, 1000);
  }
  ak_dispatch_t *d = fx_dispatch(&f);
  cr_assert_eq(ak_dispatch_debug_scan(d, FAR_FUTURE), 128);
  int served = 0;
  for (int i = 0; i < 200; i++) {
    snprintf(name, sizeof name, "t%03d", i);
    int64_t c = ak_dispatch_debug_tenant_claimed(d, name);
    cr_assert(c == 0 || c == 1, "one row each when the page is smaller than the tenants");
    served += (int)c;
  }
  cr_expect_eq(served, 128);
  cr_assert_eq(ak_dispatch_debug_scan(d, FAR_FUTURE), 128);
  for (int i = 0; i < 200; i++) {
    snprintf(name, sizeof name, "t%03d", i);
    int64_t c = ak_dispatch_debug_tenant_claimed(d, name);
    cr_expect(c >= 1 && c <= 2, "after two pages every tenant has been served once before any twice (%s: %lld)", name,
              (long long)c);
  }
  ak_dispatch_free(d);
  fx_close(&f);
}

Test(dispatch, windows_bound_claims) {
  fx_t f;
  fx_open(&f, "dispatch: {batch: 128, max_inflight: 100, tenants: {max_inflight: 30}}");
  add_rows(&f, "a", 500, 1000);
  add_rows(&f, "b", 500, 1000);
  add_rows(&f, "c", 500, 1000);
  add_rows(&f, "d", 500, 1000);
  ak_dispatch_t *d = fx_dispatch(&f);
  size_t total = 0;
  for (int i = 0; i < 5; i++) total += ak_dispatch_debug_scan(d, FAR_FUTURE);
  cr_expect_eq(total, 100, "the global window: %zu", total);
  const char *names[] = {"a", "b", "c", "d"};
  for (int i = 0; i < 4; i++) cr_expect_leq(ak_dispatch_debug_tenant_claimed(d, names[i]), 30, "tenant window");
  ak_dispatch_free(d);
  fx_close(&f);
}

Test(dispatch, future_rows_wait_and_claims_live_in_memory) {
  fx_t f;
  fx_open(&f, "dispatch: {batch: 128}");
  add_rows(&f, "a", 10, 1000);
  add_rows(&f, "a", 10, 50000);
  ak_dispatch_t *d = fx_dispatch(&f);
  cr_assert_eq(ak_dispatch_debug_scan(d, 2000), 10, "only the rows already due");
  cr_assert_eq(ak_dispatch_debug_scan(d, 2000), 0, "nothing is claimed twice");
  cr_assert_eq(ak_dispatch_debug_scan(d, 60000), 10, "the later rows once their time came");
  ak_dispatch_free(d);
  /* a crash with rows claimed: the store still has every due key */
  d = fx_dispatch(&f);
  cr_assert_eq(ak_dispatch_debug_scan(d, 60000), 20, "claimed rows are due again in a new process");
  ak_dispatch_free(d);
  fx_close(&f);
}

Test(dispatch, a_row_due_before_the_cursor_is_found_once) {
  fx_t f;
  fx_open(&f, "dispatch: {batch: 128}");
  add_rows(&f, "a", 50, 2000);
  ak_dispatch_t *d = fx_dispatch(&f);
  cr_assert_eq(ak_dispatch_debug_scan(d, FAR_FUTURE), 50);
  /* a commit that raced the scan: rows due earlier than the tenant's cursor */
  add_rows(&f, "a", 5, 1500);
  ak_dispatch_note_due(d, "a", 1, 1500, 5, 0);
  cr_assert_eq(ak_dispatch_debug_scan(d, FAR_FUTURE), 5, "the 5 new rows, none of the 50 again");
  cr_assert_eq(ak_dispatch_debug_tenant_claimed(d, "a"), 55);
  ak_dispatch_free(d);
  fx_close(&f);
}

Test(dispatch, unbuildable_sink_refused_with_its_key) {
  /* the sources alone, no store: the dispatcher is made by hand, as its module's open does */
  static const char *const only[] = {"node", "sources", NULL};
  fx_t f;
  memset(&f, 0, sizeof f);
  const char *yaml =
      "egress: {allow_http: true}\n"
      "sources:\n  s: {sinks: [{type: log}, {type: http, url: 'https://example.com/x', secret: 'whsec_%%%'}]}\n";
  ak_fx_tmp(&f.fx, "dispatch");
  ak_fx_open(&f.fx, yaml, only); /* the config loads: the sink is refused when built */
  f.inst = f.fx.inst;
  cr_assert_not_null(f.inst->sources);
  char e[256] = "";
  ak_dispatch_t *d = ak_dispatch_new(f.inst, e, sizeof e);
  cr_assert_null(d);
  cr_expect(strstr(e, "sources.s.sinks[1]") != NULL, "%s", e);
  cr_expect(strstr(e, "whsec_%") == NULL, "the secret is not echoed: %s", e);
  fx_close(&f);
}

/* The stored size of one row add_rows writes (every row of one tenant has the same). */
static size_t row_bytes(const char *tenant) {
  ak_envelope_t env = {.seq = 1, .received_at_ms = 1000, .tenant = tenant, .tenant_len = strlen(tenant),
                       .source = "s", .source_len = 1, .method = "POST", .method_len = 4, .body = (const uint8_t *)"{}",
                       .body_len = 2};
  env.id[6] = 0x70;
  size_t rl;
  free(ak_envelope_encode(&env, &rl));
  return rl;
}

/* A tenant whose next row does not fit its bytes window is not ready again until it
 * fits: before, the window looked open on bytes alone (claimed bytes under the cap) and
 * the dispatch thread rescanned it in a busy loop, claiming nothing, until rows settled. */
Test(dispatch, a_row_too_big_for_the_bytes_window_waits_without_rescans) {
  fx_t f;
  size_t rl = row_bytes("a");
  char yaml[256];
  /* alone, the tenant could go past its window up to the node's less one window: the
   * node's is two and a half rows, so that leaves no more than its own */
  snprintf(yaml, sizeof yaml, "dispatch: {max_inflight_bytes: %zu, tenants: {max_inflight_bytes: %zu}}", 3 * rl,
           rl + rl / 2);
  fx_open(&f, yaml);
  add_rows(&f, "a", 10, 1000);
  ak_dispatch_t *d = fx_dispatch(&f);
  cr_expect_eq(ak_dispatch_debug_scan(d, FAR_FUTURE), 1, "one row fits the window, the second does not");
  cr_expect_eq(ak_dispatch_debug_tenant_claimed(d, "a"), 1);
  cr_expect_eq(ak_dispatch_debug_ready(d), 0, "the tenant waits for bytes to settle, not for the next pass");
  cr_expect_eq(ak_dispatch_debug_scan(d, FAR_FUTURE), 0);
  ak_dispatch_free(d);
  fx_close(&f);
}

/* ---- claims read their hooks in one batched read (claim_tenant's second pass) ---- */

/* One key of family cf set to v (vl bytes), or deleted when v is NULL. */
static void fx_set(fx_t *f, int cf, const uint8_t *k, size_t kl, const char *v, size_t vl) {
  ak_batch_t *wb = ak_batch_new(f->inst->store);
  cr_assert_eq(ak_store_pin(f->inst->store), 0);
  if (v) ak_batch_put(wb, cf, k, kl, v, vl);
  else ak_batch_delete(wb, cf, k, kl);
  ak_wf_class_t cls;
  char *err = NULL;
  cr_assert_eq(ak_store_write_pinned(f->inst->store, wb, false, &cls, &err), 0);
  ak_store_unpin(f->inst->store);
  ak_batch_free(wb);
}

static void delete_hook(fx_t *f, uint64_t seq) {
  uint8_t hk[AK_HOOK_KEY_LEN];
  ak_key_hook(hk, seq);
  fx_set(f, AK_CF_HOOKS, hk, sizeof hk, NULL, 0);
}

typedef struct {
  int n;
  uint64_t seq;
  char reason[128];
} dead_seen_t;

static int dead_cb(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  dead_seen_t *s = ctx;
  cr_assert_eq(kl, AK_DEAD_KEY_LEN);
  ak_dead_entry_t e;
  cr_assert_eq(ak_dead_entry_decode((const uint8_t *)v, vl, &e), 0);
  s->n++;
  s->seq = ak_get_u64((const uint8_t *)k + 9);
  snprintf(s->reason, sizeof s->reason, "%.*s", (int)e.reason_len, e.reason);
  return 0;
}

Test(dispatch, a_missing_hook_is_dead_lettered_and_the_rows_around_it_claimed) {
  fx_t f;
  fx_open(&f, "dispatch: {batch: 128}");
  add_rows(&f, "a", 20, 1000); /* seqs 1..20: read as one batch */
  add_rows(&f, "b", 3, 1000);  /* seqs 21..23: few enough to be read one at a time */
  delete_hook(&f, 7);
  ak_dispatch_t *d = fx_dispatch(&f);
  ak_dispatch_debug_scan(d, FAR_FUTURE);
  cr_expect_eq(ak_dispatch_debug_tenant_claimed(d, "a"), 19, "every row but the one without its hook");
  cr_expect_eq(ak_dispatch_debug_tenant_claimed(d, "b"), 3);
  ak_dispatch_debug_scan(d, FAR_FUTURE); /* writes the outcome batch */
  dead_seen_t s = {0};
  cr_assert_eq(ak_store_scan(f.inst->store, AK_CF_INDEX, "x", 1, dead_cb, &s), 0);
  cr_expect_eq(s.n, 1, "one dead row");
  cr_expect_eq(s.seq, 7);
  cr_expect(strstr(s.reason, "hook_missing") != NULL, "%s", s.reason);
  ak_dispatch_free(d);
  fx_close(&f);

  fx_open(&f, "dispatch: {batch: 128}");
  add_rows(&f, "b", 3, 1000);
  delete_hook(&f, 2);
  d = fx_dispatch(&f);
  ak_dispatch_debug_scan(d, FAR_FUTURE);
  cr_expect_eq(ak_dispatch_debug_tenant_claimed(d, "b"), 2, "the rows around it, read one at a time");
  ak_dispatch_debug_scan(d, FAR_FUTURE);
  s = (dead_seen_t){0};
  cr_assert_eq(ak_store_scan(f.inst->store, AK_CF_INDEX, "x", 1, dead_cb, &s), 0);
  cr_expect_eq(s.n, 1);
  cr_expect_eq(s.seq, 2);
  cr_expect(strstr(s.reason, "hook_missing") != NULL, "%s", s.reason);
  ak_dispatch_free(d);
  fx_close(&f);
}

Test(dispatch, a_damaged_due_entry_is_skipped_and_the_rows_around_it_claimed) {
  fx_t f;
  fx_open(&f, "dispatch: {batch: 128}");
  add_rows(&f, "a", 20, 1000);
  uint8_t due[AK_DUE_KEY_MAX];
  size_t kl = ak_key_due(due, "a", 1, 1000, 5, 0);
  fx_set(&f, AK_CF_INDEX, due, kl, "\x09garbage", 8); /* an unknown version byte */
  ak_dispatch_t *d = fx_dispatch(&f);
  ak_dispatch_debug_scan(d, FAR_FUTURE);
  cr_expect_eq(ak_dispatch_debug_tenant_claimed(d, "a"), 19, "every row but the damaged one");
  cr_expect_eq(ak_dispatch_debug_scan(d, FAR_FUTURE), 0, "and none twice");
  ak_dispatch_free(d);
  fx_close(&f);
}

Test(dispatch, a_share_larger_than_one_read_is_claimed_in_one_pass_each_row_once) {
  fx_t f;
  fx_open(&f, "dispatch: {batch: 1000, max_inflight: 4096, tenants: {max_inflight: 1000}}");
  add_rows(&f, "a", 700, 1000);
  add_rows(&f, "a", 5, 50000);
  ak_dispatch_t *d = fx_dispatch(&f);
  cr_expect_eq(ak_dispatch_debug_scan(d, 2000), 700, "all 700 due rows, read 256 at a time");
  cr_expect_eq(ak_dispatch_debug_tenant_claimed(d, "a"), 700);
  cr_expect_eq(ak_dispatch_debug_scan(d, 2000), 0, "none twice, the later ones not yet");
  cr_expect_eq(ak_dispatch_debug_scan(d, 60000), 5, "the later ones once due");
  ak_dispatch_free(d);
  fx_close(&f);
}

/* ---- work-conserving windows: a tenant's window binds only while another waits ---- */

Test(dispatch, a_lone_tenant_claims_past_its_window_up_to_the_node_less_a_reserve) {
  fx_t f;
  fx_open(&f, "dispatch: {batch: 1000, max_inflight: 100, tenants: {max_inflight: 20}}");
  add_rows(&f, "a", 500, 1000);
  ak_dispatch_t *d = fx_dispatch(&f);
  size_t total = 0;
  for (int i = 0; i < 3; i++) total += ak_dispatch_debug_scan(d, FAR_FUTURE);
  cr_expect_eq(total, 80, "the node's window less one tenant window: %zu", total);
  cr_expect_eq(ak_dispatch_debug_tenant_claimed(d, "a"), 80);
  /* a tenant that arrives finds its window free at once; the first one stops there */
  add_rows(&f, "b", 50, 2000);
  ak_dispatch_note_due(d, "b", 1, 2000, 50, 0);
  cr_expect_eq(ak_dispatch_debug_scan(d, FAR_FUTURE), 20, "the newcomer's whole window in one pass");
  cr_expect_eq(ak_dispatch_debug_tenant_claimed(d, "b"), 20);
  cr_expect_eq(ak_dispatch_debug_tenant_claimed(d, "a"), 80, "past its window, the first claims nothing more");
  cr_expect_eq(ak_dispatch_debug_scan(d, FAR_FUTURE), 0, "both held to their windows, the node's is full");
  ak_dispatch_free(d);
  fx_close(&f);
}

Test(dispatch, a_tenant_growing_alone_stops_when_another_has_due_rows) {
  fx_t f;
  fx_open(&f, "dispatch: {batch: 40, max_inflight: 100, tenants: {max_inflight: 20}}");
  add_rows(&f, "a", 500, 1000);
  ak_dispatch_t *d = fx_dispatch(&f);
  cr_expect_eq(ak_dispatch_debug_scan(d, FAR_FUTURE), 40, "a page, twice its window, while alone");
  add_rows(&f, "b", 50, 2000);
  ak_dispatch_note_due(d, "b", 1, 2000, 50, 0);
  for (int i = 0; i < 3; i++) ak_dispatch_debug_scan(d, FAR_FUTURE);
  cr_expect_eq(ak_dispatch_debug_tenant_claimed(d, "a"), 40, "it stops growing");
  cr_expect_eq(ak_dispatch_debug_tenant_claimed(d, "b"), 20, "the second gets its window");
  ak_dispatch_free(d);
  fx_close(&f);
}
