/* Unit tests: pending audit rows settled by their subject's owner (store/audit.h,
 * ak_audit_pending_each): a pending row with detail {"settle":"subject"} survives the next
 * open as pending (a plain pending row is marked interrupted), pending_each hands it out
 * with its hashes (filtered by subject prefix), ak_audit_hash hashes state as the row's
 * hashes do, and a finished row is no longer handed out. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include "fixture.h"
#include "store/audit.h"

static ak_fx_t fx;

static void setup(void) {
  ak_fx_tmp(&fx, "audit-settle-test");
  unsetenv("ANKUSA_TEST_AUDIT_FAIL");
}

static void teardown(void) {
  ak_fx_close(&fx);
  ak_fx_rm(&fx);
}

TestSuite(audit_settle, .init = setup, .fini = teardown);

static const char *const only[] = {"node", "store", "audit", NULL};

typedef struct {
  uint64_t seq[8];
  char subject[8][64], before[8][65], after[8][65];
  size_t n;
} seen_t;

static void collect(void *ctx, uint64_t seq, const char *subject, const char *before_hash, const char *after_hash) {
  seen_t *s = ctx;
  if (s->n == 8) return;
  s->seq[s->n] = seq;
  snprintf(s->subject[s->n], 64, "%s", subject);
  snprintf(s->before[s->n], 65, "%s", before_hash ? before_hash : "");
  snprintf(s->after[s->n], 65, "%s", after_hash ? after_hash : "");
  s->n++;
}

static const char *outcome_of(uint64_t seq) {
  json_t *out = NULL;
  static char buf[32];
  ak_audit_query_t q = {.has_after = true, .after_seq = seq - 1, .since_ms = INT64_MIN, .limit = 1};
  cr_assert_eq(ak_audit_query(fx.inst->audit, &q, &out), 0);
  snprintf(buf, sizeof buf, "%s",
           json_string_value(json_object_get(json_array_get(json_object_get(out, "entries"), 0), "outcome")));
  json_decref(out);
  return buf;
}

Test(audit_settle, the_owner_settles_its_pending_rows) {
  ak_fx_open(&fx, "", only);
  ak_audit_t *a = fx.inst->audit;
  json_t *owner = json_pack("{s:s}", "settle", "subject");
  uint64_t s1 = 0, s2 = 0, s3 = 0;
  ak_audit_entry_t e = {.action = "source.update", .tenant = "acme", .subject = "source:acme/gh", .before = "v1",
                        .before_len = 2, .after = "v2", .after_len = 2, .outcome = "pending", .detail = owner,
                        .seq_out = &s1};
  cr_assert_eq(ak_audit_record(a, &e), 0);
  ak_audit_entry_t other = {.action = "route.put", .subject = "route:x", .after = "r", .after_len = 1,
                            .outcome = "pending", .detail = owner, .seq_out = &s2};
  cr_assert_eq(ak_audit_record(a, &other), 0);
  ak_audit_entry_t plain = {.action = "quarantine.release", .subject = "quarantine", .outcome = "pending",
                            .seq_out = &s3};
  cr_assert_eq(ak_audit_record(a, &plain), 0);
  json_decref(owner);

  /* a kill: the plain row is interrupted at open, the owners' rows wait */
  ak_fx_reopen(&fx);
  a = fx.inst->audit;
  cr_expect_str_eq(outcome_of(s3), "interrupted");
  cr_expect_str_eq(outcome_of(s1), "pending");
  cr_expect_str_eq(outcome_of(s2), "pending");

  seen_t s = {0};
  cr_assert_eq(ak_audit_pending_each(a, "source:", collect, &s), 1);
  cr_assert_eq(s.n, 1);
  cr_expect_eq(s.seq[0], s1);
  cr_expect_str_eq(s.subject[0], "source:acme/gh");
  char h1[65], h2[65];
  ak_audit_hash(a, "v1", 2, h1);
  ak_audit_hash(a, "v2", 2, h2);
  cr_expect_str_eq(s.before[0], h1, "ak_audit_hash is the row's hash");
  cr_expect_str_eq(s.after[0], h2);
  cr_expect_str_neq(h1, h2);

  /* settled: not handed out again, and the state hashes as the change's after */
  cr_assert_eq(ak_audit_finish(a, s1, "ok", "v2", 2, NULL), 0);
  cr_expect_str_eq(outcome_of(s1), "ok");
  memset(&s, 0, sizeof s);
  cr_expect_eq(ak_audit_pending_each(a, "source:", collect, &s), 0);
  cr_expect_eq(ak_audit_pending_each(a, "route:", collect, &s), 1);
  cr_expect_eq(s.seq[0], s2);
  cr_expect_str_eq(s.before[0], "", "no state before: NULL");
}
