/* Unit tests: lifecycle events. The CloudEvent of a flagged row (its keys, time, sequence,
 * the entity as stored); the publisher driven by hand over a real store and the test_echo
 * sink: every flagged row delivered once in seq order with the row's id, the cursor past
 * the plain rows too, a restart that sends nothing again, a replay that sends the same ids
 * and ends, one replay at a time; and a sink whose retries run out: dropped (counted), the
 * cursor moves on. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/ids.h"
#include "fixture.h"
#include "lifecycle/cloudevent.h"
#include "lifecycle/publisher.h"
#include "store/audit.h"
#include "store/batch.h"
#include "store/store.h"

static ak_fx_t fx;
static char echo_path[300];

static void setup(void) {
  ak_fx_tmp(&fx, "lifecycle-test");
  snprintf(echo_path, sizeof echo_path, "%s/echo", fx.dir);
}

static void teardown(void) {
  ak_fx_close(&fx);
  ak_fx_rm(&fx);
}

TestSuite(lifecycle, .init = setup, .fini = teardown);

static const char *const only[] = {"node", "store", "audit", "lifecycle", NULL};
static const ak_audit_who_t who = {.actor = "ops", .client = "127.0.0.1", .request_id = "req-1"};

static void open_with(const char *sinks) {
  char yaml[1024];
  snprintf(yaml, sizeof yaml,
           "dispatch: {retry: {base_ms: 1, max_ms: 2, max_attempts: 2, jitter: false}}\n"
           "lifecycle:\n  sinks: %s\n", sinks);
  ak_fx_open(&fx, yaml, only);
  cr_assert_not_null(fx.inst->lifecycle);
}

static void open_echo(void) {
  char sinks[400];
  snprintf(sinks, sizeof sinks, "[{type: test_echo, path: \"%s\"}]", echo_path);
  open_with(sinks);
}

static int change(const char *subject, const char *event) {
  ak_store_t *st = fx.inst->store;
  cr_assert_eq(ak_store_pin(st), 0);
  ak_batch_t *wb = ak_batch_new(st);
  json_t *entity = json_pack("{s:s}", "name", subject);
  ak_audit_entry_t e = {.who = &who, .action = "source.update", .tenant = "acme", .subject = subject,
                        .after = subject, .after_len = strlen(subject), .event = event, .entity = entity};
  int rc = ak_audit_put(fx.inst->audit, wb, &e);
  if (rc == 0) rc = ak_audit_commit(fx.inst->audit, st, wb, NULL, NULL);
  json_decref(entity);
  ak_store_unpin(st);
  ak_batch_free(wb);
  return rc;
}

/* The ids the echo sink saw, in order ("echo <id> <source> <attempt>" lines). */
static size_t echo_ids(char ids[][AK_UUID_STR_LEN], size_t max) {
  FILE *f = fopen(echo_path, "r");
  if (!f) return 0;
  size_t n = 0;
  char line[256], id[64], src[64];
  unsigned att;
  while (n < max && fgets(line, sizeof line, f))
    if (sscanf(line, "echo %63s %63s %u", id, src, &att) == 3) {
      cr_expect_str_eq(src, AK_LIFECYCLE_SOURCE_ID);
      snprintf(ids[n++], AK_UUID_STR_LEN, "%.36s", id);
    }
  fclose(f);
  return n;
}

static void id_of(uint64_t seq, char out[AK_UUID_STR_LEN]) {
  uint8_t id[16];
  ak_audit_event_id(fx.inst->audit, seq, id);
  ak_uuid_format(id, out);
}

Test(lifecycle, cloudevent_of_a_row) {
  json_t *row = json_pack("{s:I,s:I,s:s,s:s,s:s,s:I}", "seq", 7, "at", (json_int_t)1764700394123LL, "actor", "ops",
                          "action", "source.create", "subject", "source:acme/gh", "revision", 1);
  json_object_set_new(row, "tenant", json_string("acme"));
  json_t *ev = json_pack("{s:s,s:{s:s,s:s}}", "event", "io.ankusa.source.created", "entity", "name", "gh", "secret",
                         "[REDACTED]");
  ak_audit_event_t e = {.seq = 7, .row = row, .event = ev};
  uint8_t id[16] = {0x01, 0x02};
  char *text = ak_cloudevent_build("default", id, &e);
  cr_assert_not_null(text);
  json_t *ce = json_loads(text, 0, NULL);
  cr_assert_not_null(ce);
  char uuid[AK_UUID_STR_LEN];
  ak_uuid_format(id, uuid);
  cr_expect_str_eq(json_string_value(json_object_get(ce, "specversion")), "1.0");
  cr_expect_str_eq(json_string_value(json_object_get(ce, "id")), uuid);
  cr_expect_str_eq(json_string_value(json_object_get(ce, "source")), "ankusa://default");
  cr_expect_str_eq(json_string_value(json_object_get(ce, "type")), "io.ankusa.source.created");
  cr_expect_str_eq(json_string_value(json_object_get(ce, "subject")), "source:acme/gh");
  cr_expect_str_eq(json_string_value(json_object_get(ce, "time")), "2025-12-02T18:33:14.123Z");
  cr_expect_str_eq(json_string_value(json_object_get(ce, "datacontenttype")), "application/json");
  cr_expect_str_eq(json_string_value(json_object_get(ce, "sequence")), "00000000000000000007");
  json_t *data = json_object_get(ce, "data");
  cr_expect_str_eq(json_string_value(json_object_get(data, "tenant")), "acme");
  cr_expect_str_eq(json_string_value(json_object_get(data, "action")), "source.create");
  cr_expect_eq(json_integer_value(json_object_get(data, "revision")), 1);
  cr_expect_eq(json_integer_value(json_object_get(data, "seq")), 7);
  cr_expect(json_equal(json_object_get(data, "entity"), json_object_get(ev, "entity")));
  json_decref(ce);
  free(text);
  /* a row without its subject is not an event */
  json_object_del(row, "subject");
  cr_expect_null(ak_cloudevent_build("default", id, &e));
  json_decref(row);
  json_decref(ev);
}

Test(lifecycle, publishes_in_seq_order_once_and_replays_the_same_ids) {
  open_echo();
  cr_assert(ak_audit_outbox_on(fx.inst->audit), "the module's open turns the outbox on");
  cr_assert_eq(change("source:acme/a", "io.ankusa.source.created"), 0); /* seq 1 */
  cr_assert_eq(change("source:acme/b", NULL), 0);                       /* seq 2: not an event */
  cr_assert_eq(change("source:acme/a", "io.ankusa.source.updated"), 0); /* seq 3 */
  cr_assert_eq(change("source:acme/c", NULL), 0);                       /* seq 4 */
  cr_assert_eq(ak_lifecycle_drain_once(fx.inst->lifecycle), 0);
  char ids[16][AK_UUID_STR_LEN], want[AK_UUID_STR_LEN];
  cr_assert_eq(echo_ids(ids, 16), 2);
  id_of(1, want);
  cr_expect_str_eq(ids[0], want);
  id_of(3, want);
  cr_expect_str_eq(ids[1], want);
  cr_expect_eq(ak_lifecycle_cursor(fx.inst->lifecycle), 5, "past the plain rows too");
  uint64_t cur = 0;
  cr_assert_eq(ak_audit_outbox_cursor(fx.inst->audit, &cur), 0);
  cr_expect_eq(cur, 5, "the cursor is stored");
  cr_assert_eq(ak_lifecycle_drain_once(fx.inst->lifecycle), 0);
  cr_expect_eq(echo_ids(ids, 16), 2, "nothing twice");
  /* a restart starts at the stored cursor */
  ak_fx_reopen(&fx);
  cr_expect_eq(ak_lifecycle_cursor(fx.inst->lifecycle), 5);
  cr_assert_eq(ak_lifecycle_drain_once(fx.inst->lifecycle), 0);
  cr_expect_eq(echo_ids(ids, 16), 2);
  /* a replay of seqs 2..3: row 3's event again, same id */
  json_t *out = NULL;
  cr_assert_eq(ak_lifecycle_replay(fx.inst->lifecycle, 2, 3, &who, &out), AK_LC_REPLAY_OK);
  cr_expect_str_eq(json_string_value(json_object_get(out, "kind")), "lifecycle");
  json_decref(out);
  cr_expect_eq(ak_lifecycle_replay(fx.inst->lifecycle, 1, 9, &who, &out), AK_LC_REPLAY_BUSY, "one at a time");
  json_decref(out);
  cr_assert_eq(ak_lifecycle_drain_once(fx.inst->lifecycle), 0);
  cr_assert_eq(echo_ids(ids, 16), 3);
  id_of(3, want);
  cr_expect_str_eq(ids[2], want, "a replay is the same event");
  /* the replay row itself (seq 5) is audited; the replay is over: another may start */
  cr_assert_eq(ak_lifecycle_replay(fx.inst->lifecycle, 1, UINT64_MAX, &who, &out), AK_LC_REPLAY_OK);
  json_decref(out);
  /* a stop before the replay ran: it resumes at the next start */
  ak_fx_reopen(&fx);
  cr_assert_eq(ak_lifecycle_drain_once(fx.inst->lifecycle), 0);
  cr_assert_eq(echo_ids(ids, 16), 5);
  id_of(1, want);
  cr_expect_str_eq(ids[3], want);
  id_of(3, want);
  cr_expect_str_eq(ids[4], want);
}

Test(lifecycle, retries_run_out_the_event_is_dropped_and_the_cursor_moves) {
  /* nothing listens on port 1: every attempt is transient; max_attempts 2 */
  open_with("[{type: http, url: \"http://127.0.0.1:1/hook\", timeout_ms: 500}]");
  cr_assert_eq(change("source:acme/a", "io.ankusa.source.created"), 0);
  cr_assert_eq(ak_lifecycle_drain_once(fx.inst->lifecycle), 0);
  cr_expect_eq(ak_lifecycle_cursor(fx.inst->lifecycle), 2);
  char *text = ak_metrics_render(fx.inst->metrics, NULL);
  cr_assert_not_null(text);
  cr_expect_not_null(
      strstr(text, "ankusa_lifecycle_dropped_total{instance=\"default\",reason=\"retries_exhausted\"} 1"), "%s",
      text);
  free(text);
}

/* A dual write (a change that lives elsewhere: routes, a shared source store) flags its
 * pending row: nothing at or after it goes before its verdict; "failed" is no event, "ok"
 * is published, in seq order. */
Test(lifecycle, a_pending_row_holds_the_outbox_until_its_verdict) {
  open_echo();
  uint64_t p1 = 0, p2 = 0;
  json_t *entity = json_pack("{s:s}", "name", "r1");
  ak_audit_entry_t e = {.who = &who, .action = "route.create", .tenant = "acme", .subject = "route:acme/r1",
                        .after = "x", .after_len = 1, .outcome = "pending", .seq_out = &p1,
                        .event = "io.ankusa.route.created", .entity = entity};
  cr_assert_eq(ak_audit_record(fx.inst->audit, &e), 0);                 /* seq 1, pending */
  cr_assert_eq(change("source:acme/a", "io.ankusa.source.created"), 0); /* seq 2 */
  e.seq_out = &p2;
  e.subject = "route:acme/r2";
  cr_assert_eq(ak_audit_record(fx.inst->audit, &e), 0); /* seq 3, pending */
  json_decref(entity);
  cr_assert_eq(ak_lifecycle_drain_once(fx.inst->lifecycle), 0);
  char ids[16][AK_UUID_STR_LEN], want[AK_UUID_STR_LEN];
  cr_expect_eq(echo_ids(ids, 16), 0, "the pending row holds every later event");
  cr_expect_eq(ak_lifecycle_cursor(fx.inst->lifecycle), 1);
  cr_assert_eq(ak_audit_finish(fx.inst->audit, p1, "failed", NULL, 0, NULL), 0);
  cr_assert_eq(ak_lifecycle_drain_once(fx.inst->lifecycle), 0);
  cr_assert_eq(echo_ids(ids, 16), 1, "a failed change is no event; the next one goes");
  id_of(2, want);
  cr_expect_str_eq(ids[0], want);
  cr_expect_eq(ak_lifecycle_cursor(fx.inst->lifecycle), 3);
  cr_assert_eq(ak_audit_finish(fx.inst->audit, p2, "ok", "y", 1, NULL), 0);
  cr_assert_eq(ak_lifecycle_drain_once(fx.inst->lifecycle), 0);
  cr_assert_eq(echo_ids(ids, 16), 2);
  id_of(3, want);
  cr_expect_str_eq(ids[1], want);
  cr_expect_eq(ak_lifecycle_cursor(fx.inst->lifecycle), 4);
}

/* A stop between a dual write's two halves: the next open settles the pending row
 * "interrupted" (the change may have been applied), and its event goes out then. */
Test(lifecycle, an_interrupted_row_is_published_after_the_restart) {
  open_echo();
  uint64_t p = 0;
  ak_audit_entry_t e = {.who = &who, .action = "route.delete", .tenant = "acme", .subject = "route:acme/r1",
                        .before = "x", .before_len = 1, .outcome = "pending", .seq_out = &p,
                        .event = "io.ankusa.route.deleted"};
  cr_assert_eq(ak_audit_record(fx.inst->audit, &e), 0);
  cr_assert_eq(ak_lifecycle_drain_once(fx.inst->lifecycle), 0);
  char ids[4][AK_UUID_STR_LEN], want[AK_UUID_STR_LEN];
  cr_expect_eq(echo_ids(ids, 4), 0);
  ak_fx_reopen(&fx);
  cr_assert_eq(ak_lifecycle_drain_once(fx.inst->lifecycle), 0);
  cr_assert_eq(echo_ids(ids, 4), 1);
  id_of(p, want);
  cr_expect_str_eq(ids[0], want);
}
