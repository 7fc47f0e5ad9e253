/* Unit tests: the audit trail on a real store in a temp dir. A row per put+commit in the
 * caller's batch (and none without the commit), dense seqs that survive a reopen and a
 * prune, revisions per subject, keyed hashes (equal states hash equal, the key survives
 * a reopen, a missing state is null), the fault seam, pending rows settled as
 * interrupted by the next open, the query (newest first, cursor, filters, tenant
 * scope), retention, and an older store without the audit family. */
#include <criterion/criterion.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <rocksdb/c.h> /* only to make a store as an older ankusa did (no audit family) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "core/clock.h"
#include "fixture.h"
#include "store/audit.h"
#include "store/batch.h"
#include "store/store.h"

static ak_fx_t fx;

static void setup(void) {
  ak_fx_tmp(&fx, "audit-test");
  unsetenv("ANKUSA_TEST_AUDIT_FAIL");
}

static void teardown(void) {
  ak_fx_close(&fx);
  ak_fx_rm(&fx);
}

TestSuite(audit, .init = setup, .fini = teardown);

/* A test's handle on the suite's node: the store and the audit trail, opened by their
 * modules (the audit module starts its prune thread, as a node does). */
typedef struct {
  ak_instance_t *inst;
} node_t;

static void node_open(node_t *n, const char *yaml) {
  static const char *const only[] = {"node", "store", "audit", NULL};
  ak_fx_open(&fx, yaml, only);
  n->inst = fx.inst;
  cr_assert_not_null(n->inst->audit);
}

static void node_close(node_t *n) {
  ak_fx_close(&fx);
  n->inst = NULL;
}

/* A restart over the same store with the same config. */
static void node_reopen(node_t *n) {
  ak_fx_reopen(&fx);
  n->inst = fx.inst;
  cr_assert_not_null(n->inst->audit);
}

static const ak_audit_who_t who = {.actor = "ops", .client = "127.0.0.1", .request_id = "req-1"};

/* One change: a key in the default CF plus its row, committed (or cancelled). */
static int change(node_t *n, const char *action, const char *tenant, const char *subject, const char *before,
                  const char *after, bool commit) {
  ak_store_t *st = n->inst->store;
  cr_assert_eq(ak_store_pin(st), 0);
  ak_batch_t *wb = ak_batch_new(st);
  ak_batch_put(wb, AK_CF_DEFAULT, subject, strlen(subject), after ? after : "", 0);
  ak_audit_entry_t e = {.who = &who, .action = action, .tenant = tenant, .subject = subject, .before = before,
                        .before_len = before ? strlen(before) : 0, .after = after,
                        .after_len = after ? strlen(after) : 0};
  int rc = ak_audit_put(n->inst->audit, wb, &e);
  if (rc == 0) {
    if (commit) rc = ak_audit_commit(n->inst->audit, st, wb, NULL, NULL);
    else ak_audit_cancel(n->inst->audit);
  }
  ak_store_unpin(st);
  ak_batch_free(wb);
  return rc;
}

static json_t *query(node_t *n, ak_audit_query_t q) {
  if (!q.limit) q.limit = 100;
  if (!q.since_ms) q.since_ms = INT64_MIN;
  json_t *out = NULL;
  cr_assert_eq(ak_audit_query(n->inst->audit, &q, &out), 0);
  return out;
}

static json_t *entry(json_t *out, size_t i) { return json_array_get(json_object_get(out, "entries"), i); }
static size_t count(json_t *out) { return json_array_size(json_object_get(out, "entries")); }
static const char *str(json_t *row, const char *k) { return json_string_value(json_object_get(row, k)); }
static int64_t num(json_t *row, const char *k) { return json_integer_value(json_object_get(row, k)); }

static bool key_exists(node_t *n, const char *k) {
  char *v = NULL;
  size_t vl;
  int rc = ak_store_get(n->inst->store, AK_CF_DEFAULT, k, strlen(k), &v, &vl);
  free(v);
  return rc == 0;
}

Test(audit, one_row_per_committed_change) {
  node_t n;
  node_open(&n, "");
  cr_expect_eq(ak_audit_next_seq(n.inst->audit), 1);
  cr_assert_eq(change(&n, "rate_limit.put", "acme", "rate_limit:acme", NULL, "{\"rate\":5}", true), 0);
  cr_assert_eq(change(&n, "rate_limit.put", "acme", "rate_limit:acme", "{\"rate\":5}", "{\"rate\":6}", true), 0);
  cr_assert_eq(change(&n, "rate_limit.delete", "beta", "rate_limit:beta", "{\"rate\":6}", NULL, false), 0);
  cr_expect_not(key_exists(&n, "rate_limit:beta"), "a cancelled put writes nothing");
  cr_assert_eq(change(&n, "rate_limit.delete", "acme", "rate_limit:acme", "{\"rate\":6}", NULL, true), 0);
  json_t *out = query(&n, (ak_audit_query_t){0});
  cr_assert_eq(count(out), 3, "newest first, the cancelled one gave its seq back");
  json_t *r0 = entry(out, 0), *r1 = entry(out, 1), *r2 = entry(out, 2);
  cr_expect_eq(num(r0, "seq"), 3);
  cr_expect_eq(num(r1, "seq"), 2);
  cr_expect_eq(num(r2, "seq"), 1);
  cr_expect_str_eq(str(r0, "action"), "rate_limit.delete");
  cr_expect_str_eq(str(r2, "actor"), "ops");
  cr_expect_str_eq(str(r2, "client"), "127.0.0.1");
  cr_expect_str_eq(str(r2, "request_id"), "req-1");
  cr_expect_str_eq(str(r2, "tenant"), "acme");
  cr_expect_str_eq(str(r2, "subject"), "rate_limit:acme");
  cr_expect_str_eq(str(r2, "outcome"), "ok");
  cr_expect_eq(num(r2, "revision"), 1);
  cr_expect_eq(num(r1, "revision"), 2);
  cr_expect_eq(num(r0, "revision"), 3, "revisions count per subject");
  cr_expect(json_is_null(json_object_get(r2, "before_hash")), "nothing before the first put");
  cr_expect(json_is_null(json_object_get(r0, "after_hash")), "nothing after a delete");
  cr_expect_str_eq(str(r2, "after_hash"), str(r1, "before_hash"), "the same state hashes the same");
  cr_expect_str_eq(str(r1, "after_hash"), str(r0, "before_hash"));
  cr_expect_str_neq(str(r1, "before_hash"), str(r1, "after_hash"));
  cr_expect_eq(strlen(str(r1, "after_hash")), 64);
  int64_t at = num(r0, "at");
  cr_expect(at > 0 && at <= ak_now_ms());
  cr_expect(key_exists(&n, "rate_limit:acme"), "the change went in with its row");
  char *h = strdup(str(r1, "after_hash"));
  json_decref(out);

  /* reopen: the seq continues, the key (so the hashes) stays */
  node_reopen(&n);
  cr_expect_eq(ak_audit_next_seq(n.inst->audit), 4);
  cr_assert_eq(change(&n, "rate_limit.put", "acme", "rate_limit:acme", NULL, "{\"rate\":6}", true), 0);
  out = query(&n, (ak_audit_query_t){.limit = 1});
  cr_expect_eq(num(entry(out, 0), "seq"), 4);
  cr_expect_eq(num(entry(out, 0), "revision"), 4);
  cr_expect_str_eq(str(entry(out, 0), "after_hash"), h);
  json_decref(out);
  free(h);
  node_close(&n);
}

Test(audit, the_hash_is_keyed_per_store) {
  node_t n;
  node_open(&n, "");
  cr_assert_eq(change(&n, "x.put", NULL, "s", NULL, "same state", true), 0);
  json_t *out = query(&n, (ak_audit_query_t){0});
  char *h1 = strdup(str(entry(out, 0), "after_hash"));
  json_decref(out);
  node_close(&n);
  teardown(); /* another store in another dir */
  setup();
  node_open(&n, "");
  cr_assert_eq(change(&n, "x.put", NULL, "s", NULL, "same state", true), 0);
  out = query(&n, (ak_audit_query_t){0});
  cr_expect_str_neq(str(entry(out, 0), "after_hash"), h1, "another store, another key: no dictionary across stores");
  /* and it is not the plain SHA-256 of the state */
  unsigned char dg[32];
  unsigned int dl = 0;
  char plain[65];
  EVP_Digest("same state", 10, dg, &dl, EVP_sha256(), NULL);
  for (int i = 0; i < 32; i++) snprintf(plain + 2 * i, 3, "%02x", dg[i]);
  cr_expect_str_neq(str(entry(out, 0), "after_hash"), plain);
  json_decref(out);
  free(h1);
  node_close(&n);
}

Test(audit, fault_seam_blocks_the_change) {
  node_t n;
  node_open(&n, "");
  char flag[300];
  snprintf(flag, sizeof flag, "%s/fail", fx.dir);
  setenv("ANKUSA_TEST_AUDIT_FAIL", flag, 1);
  node_reopen(&n); /* the trail reads the seam at its open */
  cr_assert_not_null(n.inst->audit);
  FILE *f = fopen(flag, "w");
  fclose(f);
  cr_expect_eq(change(&n, "rate_limit.put", "acme", "rate_limit:acme", NULL, "{}", true), -1);
  cr_expect_not(key_exists(&n, "rate_limit:acme"), "the change is not made without its row");
  unlink(flag);
  cr_expect_eq(change(&n, "rate_limit.put", "acme", "rate_limit:acme", NULL, "{}", true), 0);
  cr_expect(key_exists(&n, "rate_limit:acme"));
  json_t *out = query(&n, (ak_audit_query_t){0});
  cr_expect_eq(count(out), 1);
  cr_expect_eq(num(entry(out, 0), "seq"), 1, "the refused put used no seq");
  json_decref(out);
  unsetenv("ANKUSA_TEST_AUDIT_FAIL");
  node_close(&n);
}

Test(audit, cursor_and_filters) {
  node_t n;
  node_open(&n, "");
  const char *tenants[] = {"acme", "beta", "acme", NULL, "beta", "acme"};
  for (int i = 0; i < 6; i++) {
    char subject[32];
    snprintf(subject, sizeof subject, "s%d", i);
    cr_assert_eq(change(&n, i == 3 ? "log_level.put" : "rate_limit.put", tenants[i], subject, NULL, "x", true), 0);
  }
  /* cursor: ascending from after_seq, next_after_seq passed back */
  json_t *out = query(&n, (ak_audit_query_t){.has_after = true, .after_seq = 0, .limit = 4});
  cr_assert_eq(count(out), 4);
  cr_expect_eq(num(entry(out, 0), "seq"), 1);
  cr_expect_eq(num(out, "next_after_seq"), 4);
  json_decref(out);
  out = query(&n, (ak_audit_query_t){.has_after = true, .after_seq = 4, .limit = 4});
  cr_assert_eq(count(out), 2);
  cr_expect_eq(num(entry(out, 1), "seq"), 6);
  cr_expect_eq(num(out, "next_after_seq"), 6);
  json_decref(out);
  out = query(&n, (ak_audit_query_t){.has_after = true, .after_seq = 6});
  cr_expect_eq(count(out), 0);
  cr_expect_eq(num(out, "next_after_seq"), 6, "nothing new: the cursor stays");
  json_decref(out);
  /* newest first, paged with before_seq */
  out = query(&n, (ak_audit_query_t){.limit = 2});
  cr_expect_eq(num(entry(out, 0), "seq"), 6);
  cr_expect_eq(num(out, "next_before_seq"), 5);
  json_decref(out);
  out = query(&n, (ak_audit_query_t){.has_before = true, .before_seq = 2, .limit = 2});
  cr_expect_eq(count(out), 1);
  cr_expect(json_is_null(json_object_get(out, "next_before_seq")), "the oldest row was reached");
  json_decref(out);
  /* filters */
  out = query(&n, (ak_audit_query_t){.tenant = "acme"});
  cr_expect_eq(count(out), 3);
  json_decref(out);
  out = query(&n, (ak_audit_query_t){.action = "log_level.put"});
  cr_expect_eq(count(out), 1);
  cr_expect(json_is_null(json_object_get(entry(out, 0), "tenant")));
  json_decref(out);
  out = query(&n, (ak_audit_query_t){.since_ms = ak_now_ms() + 60000});
  cr_expect_eq(count(out), 0);
  json_decref(out);
  /* a scoped reader sees its tenants' rows only; node-wide rows need every tenant */
  const char *const acme[] = {"acme"};
  ak_tenant_scope_t sc = {acme, 1};
  out = query(&n, (ak_audit_query_t){.scope = &sc});
  cr_expect_eq(count(out), 3);
  for (size_t i = 0; i < count(out); i++) cr_expect_str_eq(str(entry(out, i), "tenant"), "acme");
  json_decref(out);
  out = query(&n, (ak_audit_query_t){.scope = &sc, .has_after = true, .after_seq = 0, .limit = 1});
  cr_expect_eq(count(out), 1);
  cr_expect_eq(num(out, "next_after_seq"), 1);
  json_decref(out);
  out = query(&n, (ak_audit_query_t){.scope = &sc, .has_after = true, .after_seq = 1, .limit = 1});
  cr_expect_eq(num(entry(out, 0), "seq"), 3);
  cr_expect_eq(num(out, "next_after_seq"), 3, "rows it may not see are passed over by the cursor too");
  json_decref(out);
  node_close(&n);
}

Test(audit, a_row_of_several_tenants) {
  node_t n;
  node_open(&n, "");
  ak_store_t *st = n.inst->store;
  cr_assert_eq(ak_store_pin(st), 0);
  ak_batch_t *wb = ak_batch_new(st);
  const char *const ts[] = {"beta", "acme", "beta"};
  ak_audit_entry_t e = {.who = &who, .action = "quarantine.purge", .tenants = ts, .ntenants = 3,
                        .subject = "quarantine", .before = "a", .before_len = 1};
  cr_assert_eq(ak_audit_put(n.inst->audit, wb, &e), 0);
  cr_assert_eq(ak_audit_commit(n.inst->audit, st, wb, NULL, NULL), 0);
  ak_store_unpin(st);
  ak_batch_free(wb);
  json_t *out = query(&n, (ak_audit_query_t){0});
  json_t *r = entry(out, 0);
  cr_expect(json_is_null(json_object_get(r, "tenant")));
  char *t = json_dumps(json_object_get(r, "tenants"), JSON_COMPACT);
  cr_expect_str_eq(t, "[\"acme\",\"beta\"]");
  free(t);
  json_decref(out);
  const char *const acme[] = {"acme"}, *const both[] = {"acme", "beta"};
  ak_tenant_scope_t one = {acme, 1}, two = {both, 2};
  out = query(&n, (ak_audit_query_t){.scope = &one});
  cr_expect_eq(count(out), 0, "a row naming another tenant too stays hidden");
  json_decref(out);
  out = query(&n, (ak_audit_query_t){.scope = &two});
  cr_expect_eq(count(out), 1);
  json_decref(out);
  out = query(&n, (ak_audit_query_t){.tenant = "beta"});
  cr_expect_eq(count(out), 1);
  json_decref(out);
  node_close(&n);
}

Test(audit, pending_rows_are_settled) {
  node_t n;
  node_open(&n, "");
  uint64_t s1 = 0, s2 = 0;
  ak_audit_entry_t e = {.who = &who, .action = "quarantine.release", .tenant = "acme", .subject = "quarantine",
                        .before = "held", .before_len = 4, .after = "held", .after_len = 4, .outcome = "pending",
                        .seq_out = &s1};
  cr_assert_eq(ak_audit_record(n.inst->audit, &e), 0);
  e.seq_out = &s2;
  cr_assert_eq(ak_audit_record(n.inst->audit, &e), 0);
  cr_expect_eq(s1, 1);
  cr_expect_eq(s2, 2);
  json_t *detail = json_pack("{s:i}", "moved", 1);
  cr_assert_eq(ak_audit_finish(n.inst->audit, s1, "ok", NULL, 0, detail), 0);
  json_decref(detail);
  json_t *out = query(&n, (ak_audit_query_t){0});
  json_t *r1 = entry(out, 1), *r2 = entry(out, 0);
  cr_expect_str_eq(str(r1, "outcome"), "ok");
  cr_expect(json_is_null(json_object_get(r1, "after_hash")), "everything left the pen");
  cr_expect_eq(json_integer_value(json_object_get(json_object_get(r1, "detail"), "moved")), 1);
  cr_expect_str_eq(str(r2, "outcome"), "pending");
  char *after = strdup(str(r2, "after_hash"));
  json_decref(out);
  /* a "kill" between the two halves: the next open marks the row interrupted */
  node_reopen(&n);
  out = query(&n, (ak_audit_query_t){0});
  cr_expect_str_eq(str(entry(out, 0), "outcome"), "interrupted");
  cr_expect_str_eq(str(entry(out, 0), "after_hash"), after, "what it was about to change is kept");
  cr_expect_str_eq(str(entry(out, 1), "outcome"), "ok");
  json_decref(out);
  free(after);
  node_close(&n);
}

Test(audit, retention_prunes_old_rows_and_the_seq_goes_on) {
  node_t n;
  node_open(&n, "audit: {retention_days: 2}\n");
  for (int i = 0; i < 3; i++) cr_assert_eq(change(&n, "x.put", "acme", "s", NULL, "x", true), 0);
  int64_t now = ak_now_ms();
  cr_expect_eq(ak_audit_prune(n.inst->audit, now + 86400000LL, NULL), 0, "a day later: all kept");
  cr_expect_eq(ak_audit_prune(n.inst->audit, now + 3 * 86400000LL, NULL), 3, "three days later: all gone");
  json_t *out = query(&n, (ak_audit_query_t){0});
  cr_expect_eq(count(out), 0);
  json_decref(out);
  node_reopen(&n);
  cr_expect_eq(ak_audit_next_seq(n.inst->audit), 4, "a pruned trail keeps counting: a cursor never goes back");
  cr_assert_eq(change(&n, "x.put", "acme", "s", NULL, "y", true), 0);
  out = query(&n, (ak_audit_query_t){.has_after = true, .after_seq = 3});
  cr_expect_eq(count(out), 1);
  cr_expect_eq(num(entry(out, 0), "revision"), 4);
  json_decref(out);
  node_close(&n);
}

/* Concurrent changes: seqs are dense and a cursor reader polling meanwhile sees them in
 * order, never skipping one that lands later with a lower seq. */
typedef struct {
  node_t *n;
  int id;
} worker_t;

static void *writer_main(void *arg) {
  worker_t *w = arg;
  for (int i = 0; i < 50; i++) {
    char subject[32];
    snprintf(subject, sizeof subject, "w%d", w->id);
    if (change(w->n, "x.put", "acme", subject, NULL, "x", true) != 0) return (void *)1;
  }
  return NULL;
}

Test(audit, concurrent_changes_keep_commit_order) {
  node_t n;
  node_open(&n, "");
  pthread_t th[4];
  worker_t ws[4];
  for (int i = 0; i < 4; i++) {
    ws[i] = (worker_t){&n, i};
    pthread_create(&th[i], NULL, writer_main, &ws[i]);
  }
  uint64_t cursor = 0, seen = 0;
  /* bounded by time, not by rounds: on a loaded machine 200 synced commits can take
   * longer than any fixed number of quick polls */
  struct timespec t0, tn;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    clock_gettime(CLOCK_MONOTONIC, &tn);
    if (seen >= 200 || tn.tv_sec - t0.tv_sec > 60) break;
    json_t *out = query(&n, (ak_audit_query_t){.has_after = true, .after_seq = cursor, .limit = 7});
    for (size_t i = 0; i < count(out); i++) {
      cr_assert_eq((uint64_t)num(entry(out, i), "seq"), cursor + 1 + i, "dense and in order");
      seen++;
    }
    cursor = (uint64_t)num(out, "next_after_seq");
    json_decref(out);
  }
  for (int i = 0; i < 4; i++) {
    void *rv;
    pthread_join(th[i], &rv);
    cr_expect_null(rv);
  }
  cr_expect_eq(seen, 200);
  node_close(&n);
}

Test(audit, a_store_without_the_audit_family_opens) {
  /* a store made before the family existed: open it with the older families only, where
   * the store module opens it */
  char path[300];
  snprintf(path, sizeof path, "%s/default", fx.dir);
  cr_assert_eq(mkdir(path, 0700), 0);
  snprintf(path, sizeof path, "%s", fx.store_path);
  rocksdb_options_t *o = rocksdb_options_create();
  rocksdb_options_set_create_if_missing(o, 1);
  rocksdb_options_set_create_missing_column_families(o, 1);
  const char *names[] = {"default", "hooks", "deliveries", "index", "quarantine"};
  const rocksdb_options_t *opts[] = {o, o, o, o, o};
  rocksdb_column_family_handle_t *h[5];
  char *err = NULL;
  rocksdb_t *db = rocksdb_open_column_families(o, path, 5, names, opts, h, &err);
  cr_assert_null(err, "%s", err);
  rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
  rocksdb_put_cf(db, wo, h[0], "old", 3, "v", 1, &err);
  rocksdb_writeoptions_destroy(wo);
  for (int i = 0; i < 5; i++) rocksdb_column_family_handle_destroy(h[i]);
  rocksdb_close(db);
  rocksdb_options_destroy(o);
  node_t n;
  node_open(&n, "");
  cr_expect(key_exists(&n, "old"));
  cr_expect_eq(change(&n, "x.put", NULL, "s", NULL, "x", true), 0);
  node_close(&n);
}

/* ------------------------------------------------------------ lifecycle outbox ---- */

/* One flagged change: its row and (while the outbox is on) its entity, in one batch. */
static int flagged(node_t *n, const char *subject, const char *event, const char *entity_name) {
  ak_store_t *st = n->inst->store;
  cr_assert_eq(ak_store_pin(st), 0);
  ak_batch_t *wb = ak_batch_new(st);
  ak_batch_put(wb, AK_CF_DEFAULT, subject, strlen(subject), "x", 1);
  json_t *entity = json_pack("{s:s,s:s}", "name", entity_name, "secret", "[REDACTED]");
  ak_audit_entry_t e = {.who = &who, .action = "source.create", .tenant = "acme", .subject = subject,
                        .after = "x", .after_len = 1, .event = event, .entity = entity};
  int rc = ak_audit_put(n->inst->audit, wb, &e);
  if (rc == 0) rc = ak_audit_commit(n->inst->audit, st, wb, NULL, NULL);
  json_decref(entity);
  ak_store_unpin(st);
  ak_batch_free(wb);
  return rc;
}

static int wakes;
static void count_wake(void *ctx) {
  (void)ctx;
  wakes++;
}

Test(audit, the_outbox_flags_rows_only_while_on) {
  node_t n;
  node_open(&n, "audit: {retention_days: 2}\n");
  ak_audit_event_t ev;
  cr_assert_eq(flagged(&n, "source:acme/a", "io.ankusa.source.created", "a"), 0);
  cr_expect_eq(ak_audit_outbox_next(n.inst->audit, 1, UINT64_MAX, &ev), 0, "off: no entity is written");
  json_t *out = query(&n, (ak_audit_query_t){0});
  cr_expect_null(json_object_get(entry(out, 0), "event"));
  json_decref(out);
  cr_expect_not(ak_audit_outbox_on(n.inst->audit));

  wakes = 0;
  ak_audit_outbox_enable(n.inst->audit, count_wake, NULL);
  cr_assert_eq(flagged(&n, "source:acme/b", "io.ankusa.source.created", "b"), 0);
  cr_assert_eq(change(&n, "rate_limit.put", "acme", "rate_limit:acme", NULL, "r", true), 0); /* not an event */
  cr_assert_eq(flagged(&n, "source:acme/b", "io.ankusa.source.deleted", "b"), 0);
  cr_expect_eq(wakes, 2, "each flagged commit signals the publisher, the others do not");
  cr_assert_eq(ak_audit_outbox_next(n.inst->audit, 1, UINT64_MAX, &ev), 1);
  cr_expect_eq(ev.seq, 2);
  cr_expect_str_eq(str(ev.event, "event"), "io.ankusa.source.created");
  cr_expect_str_eq(str(json_object_get(ev.event, "entity"), "name"), "b");
  cr_expect_str_eq(str(ev.row, "event"), "io.ankusa.source.created", "the row says it is an event");
  cr_expect_eq(num(ev.row, "revision"), 1);
  ak_audit_event_clear(&ev);
  cr_assert_eq(ak_audit_outbox_next(n.inst->audit, 3, UINT64_MAX, &ev), 1, "the plain row is skipped");
  cr_expect_eq(ev.seq, 4);
  cr_expect_eq(num(ev.row, "revision"), 2);
  ak_audit_event_clear(&ev);
  cr_expect_eq(ak_audit_outbox_next(n.inst->audit, 2, 4, &ev), 1);
  ak_audit_event_clear(&ev);
  cr_expect_eq(ak_audit_outbox_next(n.inst->audit, 3, 4, &ev), 0, "below is exclusive");
  cr_expect_eq(ak_audit_outbox_next(n.inst->audit, 5, UINT64_MAX, &ev), 0);

  /* a cancelled flagged put leaves nothing and hands its seq out again */
  ak_store_t *st = n.inst->store;
  cr_assert_eq(ak_store_pin(st), 0);
  ak_batch_t *wb = ak_batch_new(st);
  ak_audit_entry_t e = {.action = "source.create", .subject = "source:acme/c", .event = "io.ankusa.source.created"};
  cr_assert_eq(ak_audit_put(n.inst->audit, wb, &e), 0);
  ak_audit_cancel(n.inst->audit);
  ak_store_unpin(st);
  ak_batch_free(wb);
  cr_expect_eq(ak_audit_next_seq(n.inst->audit), 5);
  cr_expect_eq(ak_audit_outbox_next(n.inst->audit, 5, UINT64_MAX, &ev), 0);

  /* ids: stable per row, distinct across rows and across stores */
  uint8_t id1[16], id1b[16], id2[16];
  ak_audit_event_id(n.inst->audit, 2, id1);
  ak_audit_event_id(n.inst->audit, 4, id2);
  node_reopen(&n);
  ak_audit_event_id(n.inst->audit, 2, id1b);
  cr_expect_eq(memcmp(id1, id1b, 16), 0, "a redelivery after a restart has the same id");
  cr_expect_neq(memcmp(id1, id2, 16), 0);
  cr_expect_eq(id1[6] >> 4, 8, "a version 8 UUID");
  node_close(&n);
  ak_fx_rm(&fx);
  ak_fx_tmp(&fx, "audit-test");
  node_open(&n, "audit: {retention_days: 2}\n");
  uint8_t other[16];
  ak_audit_event_id(n.inst->audit, 2, other);
  cr_expect_neq(memcmp(id1, other, 16), 0, "another store's row 2 is another event");
  node_close(&n);
}

/* A lifecycle sink that never confirms: the cursor stays, and retention keeps every row
 * (and entity) at or above it, counting the expired ones it holds back. */
Test(audit, retention_never_passes_the_lifecycle_cursor) {
  node_t n;
  node_open(&n, "audit: {retention_days: 2}\n");
  ak_audit_outbox_enable(n.inst->audit, NULL, NULL);
  for (int i = 0; i < 3; i++) cr_assert_eq(flagged(&n, "source:acme/a", "io.ankusa.source.updated", "a"), 0);
  cr_assert_eq(change(&n, "x.put", "acme", "s", NULL, "x", true), 0);
  uint64_t cur = 0;
  cr_assert_eq(ak_audit_outbox_cursor(n.inst->audit, &cur), 0);
  cr_expect_eq(cur, 1, "absent: nothing published yet");
  int64_t now = ak_now_ms(), blocked = -1;
  cr_expect_eq(ak_audit_prune(n.inst->audit, now + 3 * 86400000LL, &blocked), 0, "nothing published: all kept");
  cr_expect_eq(blocked, 4);
  cr_assert_eq(ak_audit_outbox_advance(n.inst->audit, 3), 0); /* rows 1 and 2 published */
  cr_expect_eq(ak_audit_prune(n.inst->audit, now + 3 * 86400000LL, &blocked), 2);
  cr_expect_eq(blocked, 2, "rows 3 and 4: at or above the cursor");
  ak_audit_event_t ev;
  cr_assert_eq(ak_audit_outbox_next(n.inst->audit, 1, UINT64_MAX, &ev), 1);
  cr_expect_eq(ev.seq, 3, "the pruned rows' entities went with them");
  ak_audit_event_clear(&ev);
  json_t *out = query(&n, (ak_audit_query_t){.has_after = true, .after_seq = 0});
  cr_expect_eq(count(out), 2);
  cr_expect_eq(num(entry(out, 0), "seq"), 3);
  json_decref(out);
  /* a restart keeps the cursor: still held */
  node_reopen(&n);
  ak_audit_outbox_enable(n.inst->audit, NULL, NULL);
  cr_expect_eq(ak_audit_prune(n.inst->audit, now + 30 * 86400000LL, &blocked), 0);
  cr_expect_eq(blocked, 2);
  cr_assert_eq(ak_audit_outbox_advance(n.inst->audit, 5), 0);
  cr_expect_eq(ak_audit_prune(n.inst->audit, now + 30 * 86400000LL, &blocked), 2);
  cr_expect_eq(blocked, 0);
  cr_expect_eq(ak_audit_outbox_next(n.inst->audit, 1, UINT64_MAX, &ev), 0);
  node_close(&n);
}
