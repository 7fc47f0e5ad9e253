/* Tenant erase, the parts below the job (tenant/erase.c): the dedupe index forgets one
 * tenant's keys, rewriting records it shares with other tenants, a few records a call,
 * across a restart; the closing set of the erase module is rebuilt at open from the
 * progress rows. The whole job is tests/e2e/test_erase.py's. */
#include <criterion/criterion.h>
#include <string.h>
#include "core/clock.h"
#include "fixture.h"
#include "queue/dedupe.h"
#include "queue/dedupe_record.h"
#include "queue/writer.h"
#include "store/batch.h"
#include "store/keys.h"
#include "store/store.h"
#include "tenant/erase.h"

static ak_fx_t fx;

static void setup(void) { ak_fx_tmp(&fx, "erase-test"); }

static void teardown(void) {
  ak_fx_close(&fx);
  ak_fx_rm(&fx);
}

static const char *const store_dedupe[] = {"node", "store", "dedupe", NULL};
static const char *const store_erase[] = {"node", "store", "erase", NULL};
static const char yaml[] =
    "sources:\n"
    "  a: {tenant: t1, sinks: [{type: log}], dedupe: {header: x-id, ttl_seconds: 60}}\n"
    "  b: {tenant: t2, sinks: [{type: log}], dedupe: {header: x-id, ttl_seconds: 60}}\n";

/* Commits of 3 keys each, t1 and t2 mixed in every record: RECS records. */
enum { RECS = 5, PER = 3 };

static void put_records(void) {
  ak_batch_t *wb = ak_batch_new(fx.inst->store);
  int64_t at = ak_now_ms() + 60000;
  ak_write_req_t r[PER];
  for (int rec = 0; rec < RECS; rec++) {
    for (int i = 0; i < PER; i++) {
      char key[32];
      const char *t = i == 1 ? "t2" : "t1"; /* two of t1, one of t2 per record */
      memset(&r[i], 0, sizeof r[i]);
      r[i].seq = (uint64_t)(rec * PER + i + 1);
      memset(r[i].id, rec * PER + i + 1, 16);
      r[i].dedupe = ak_dedupe_claim_new(t, 2, i == 1 ? "b" : "a", key,
                                        (size_t)snprintf(key, sizeof key, "k-%d-%d", rec, i), 60000);
      r[i].dedupe->state = AK_DEDUPE_CLAIM_PENDING;
      r[i].dedupe->expires_at_ms = at;
      r[i].next = i + 1 < PER ? &r[i + 1] : NULL;
    }
    ak_dedupe_put(fx.inst->dedupe, wb, &r[0]);
    for (int i = 0; i < PER; i++) ak_dedupe_claim_free(r[i].dedupe);
  }
  char *err = NULL;
  cr_assert_eq(ak_store_write(fx.inst->store, wb, true, NULL, &err), 0);
  ak_batch_free(wb);
}

static bool seen(const char *t, const char *src, int rec, int i, uint8_t id[16]) {
  char key[32];
  ak_dedupe_claim_t *c = ak_dedupe_claim_new(t, 2, src, key, (size_t)snprintf(key, sizeof key, "k-%d-%d", rec, i), 1);
  bool s = ak_dedupe_seen(fx.inst->dedupe, c, id);
  ak_dedupe_claim_free(c);
  return s;
}

typedef struct {
  int records, t1, t2;
} census_t;

static int census_key(const ak_dedupe_entry_t *e, void *ctx) {
  census_t *c = ctx;
  const uint8_t *t;
  size_t tl;
  cr_assert_eq(ak_dedupe_scope_parse(e->scope, e->scope_len, &t, &tl), 0);
  if (tl == 2 && !memcmp(t, "t1", 2)) c->t1++;
  if (tl == 2 && !memcmp(t, "t2", 2)) c->t2++;
  return 0;
}

static int census_cb(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  census_t *c = ctx;
  int64_t at;
  cr_assert_geq(ak_dedupe_record_each((const uint8_t *)k, kl, (const uint8_t *)v, vl, &at, census_key, c), 0);
  c->records++;
  return 0;
}

static census_t census(void) {
  census_t c = {0};
  cr_assert_eq(ak_store_scan(fx.inst->store, AK_CF_DEDUPE, NULL, 0, census_cb, &c), 0);
  return c;
}

Test(erase_dedupe, a_tenants_keys_leave_shared_records_and_the_index, .init = setup, .fini = teardown) {
  ak_fx_open(&fx, yaml, store_dedupe);
  put_records();
  ak_fx_reopen(&fx); /* the index as loaded from the store */
  census_t c = census();
  cr_assert_eq(c.t1, 2 * RECS);
  cr_assert_eq(c.t2, RECS);
  cr_assert_lt(c.records, RECS * PER, "keys share records");
  cr_assert_eq(ak_dedupe_count(fx.inst->dedupe), RECS * PER);

  /* a record a call: the cursor carries the next call on */
  uint8_t from[AK_DEDUPE_EKEY_MAX + 1];
  size_t from_len = 0;
  long total = 0, calls = 0;
  do {
    long n = ak_dedupe_erase_tenant(fx.inst->dedupe, "t1", 2, 1, from, &from_len);
    cr_assert_geq(n, 0);
    total += n;
    calls++;
  } while (from_len && calls < 100);
  cr_expect_eq(total, 2 * RECS);
  cr_expect_geq(calls, 2, "bounded calls");
  c = census();
  cr_expect_eq(c.t1, 0, "no key of t1 in the store");
  cr_expect_eq(c.t2, RECS, "t2's keys kept in the rewritten records");
  cr_expect_eq(ak_dedupe_count(fx.inst->dedupe), RECS);
  uint8_t id[16], want[16];
  for (int rec = 0; rec < RECS; rec++) {
    cr_expect_not(seen("t1", "a", rec, 0, id));
    cr_expect_not(seen("t1", "a", rec, 2, id));
    cr_expect(seen("t2", "b", rec, 1, id));
    memset(want, rec * PER + 2, 16);
    cr_expect_eq(memcmp(id, want, 16), 0, "t2's key still names its hook");
  }
  /* nothing left: a second erase finds none and changes nothing */
  from_len = 0;
  cr_expect_eq(ak_dedupe_erase_tenant(fx.inst->dedupe, "t1", 2, 10, from, &from_len), 0);
  cr_expect_eq(from_len, 0);
  /* after a restart the index is what the store says */
  ak_fx_reopen(&fx);
  cr_expect_eq(ak_dedupe_count(fx.inst->dedupe), RECS);
  cr_expect(seen("t2", "b", 0, 1, id));
  cr_expect_not(seen("t1", "a", 0, 0, id));
}

static void put_meta(const char *k, const char *v) {
  ak_batch_t *wb = ak_batch_new(fx.inst->store);
  ak_batch_put(wb, AK_CF_DEFAULT, k, strlen(k), v, strlen(v));
  char *err = NULL;
  cr_assert_eq(ak_store_write(fx.inst->store, wb, true, NULL, &err), 0);
  ak_batch_free(wb);
}

Test(erase_module, the_closing_set_is_rebuilt_from_progress_rows_and_tombstones_are_read, .init = setup,
     .fini = teardown) {
  ak_fx_open(&fx, yaml, store_erase);
  cr_expect_not(ak_tenant_erasing(fx.inst, "gone", 4));
  put_meta(AK_KEY_ERASE "gone", "{\"tenant\":\"gone\",\"state\":\"running\",\"stage\":\"hooks\",\"counts\":{}}");
  put_meta(AK_KEY_ERASED "old", "{\"tenant\":\"old\",\"state\":\"done\",\"finished_at\":1234}");
  ak_fx_reopen(&fx); /* opened, not started: the job does not run */
  cr_expect(ak_tenant_erasing(fx.inst, "gone", 4));
  cr_expect(fx.inst->tenant_closing && fx.inst->tenant_closing(fx.inst->tenant_closing_ctx, "gone", 4));
  cr_expect_not(ak_tenant_erasing(fx.inst, "gon", 3));
  cr_expect_not(ak_tenant_erasing(fx.inst, "old", 3), "a finished erase does not close the tenant");
  int64_t at = 0;
  cr_expect_eq(ak_tenant_erased(fx.inst, "old", 3, &at), 1);
  cr_expect_eq(at, 1234);
  cr_expect_eq(ak_tenant_erased(fx.inst, "gone", 4, NULL), 0);
  json_t *p = NULL;
  cr_assert_eq(ak_erase_progress(fx.inst, "gone", &p), 0);
  cr_expect_str_eq(json_string_value(json_object_get(p, "stage")), "hooks");
  json_decref(p);
  cr_assert_eq(ak_erase_progress(fx.inst, "old", &p), 0);
  cr_expect_str_eq(json_string_value(json_object_get(p, "state")), "done");
  json_decref(p);
  cr_expect_eq(ak_erase_progress(fx.inst, "never", &p), 1);
}
