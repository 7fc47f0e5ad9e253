/* The ingest ticket (edge/ticket.h): each reservation a request takes (quarantine pen,
 * dedupe claim, tenant quota, queue share) is given back by one settle, exactly once;
 * what a stored hook keeps stays taken. */
#include <criterion/criterion.h>
#include <string.h>
#include "core/clock.h"
#include "edge/ticket.h"
#include "fixture.h"
#include "queue/quarantine.h"
#include "queue/writer.h"

static ak_fx_t fx;
static ak_pen_bucket_t *bucket;

/* 2 hooks of burst per tenant (rate tiny: no refill during a test), a pen of burst 2 and
 * 100 bytes, and a tenant share of 2 records of a queue of 4: shares are work-conserving
 * (queue/tenantshare.h), and a tenant alone may hold the queue less one share, i.e. 2, so
 * the share of 2 is what bounds it here too. */
static const char yaml[] =
  "rate_limits: {default: {rate: 0.001, burst: 2}}\n"
  "quarantine: {burst: 2, rate: 0.001, max_bytes: 100}\n"
  "batcher: {max_queue: 4, tenant_max_queue: 2}\n"
  "sources: {a: {on_verify_failure: quarantine, sinks: [{type: log}]}}\n";

static void setup(void) {
  ak_fx_tmp(&fx, "ticket");
  static const char *const only[] = {"node", "store", "sources", "audit", "rate_limits", "quarantine", "batcher",
                                     NULL};
  ak_fx_open(&fx, yaml, only);
  bucket = ak_pen_bucket_new(fx.inst->pen);
  cr_assert_not_null(bucket);
}

static void teardown(void) {
  ak_pen_bucket_free(bucket);
  ak_fx_close(&fx);
  ak_fx_rm(&fx);
}

TestSuite(ticket, .init = setup, .fini = teardown);

static ak_ticket_t ticket(size_t bytes) {
  ak_ticket_t t;
  ak_ticket_init(&t, fx.inst, "acme", 4, bytes);
  return t;
}

static bool quota_left(void) {
  ak_ticket_t t = ticket(1);
  int64_t retry = 0;
  bool ok = ak_ticket_take_quota(&t, ak_mono_ns(), &retry);
  ak_ticket_settle(&t, true); /* keep it: probing spends */
  return ok;
}

Test(ticket, a_refusal_gives_everything_back) {
  for (int round = 0; round < 3; round++) { /* settled each time: the same room every round */
    ak_ticket_t t = ticket(40);
    int64_t retry_ms = 0, retry_ns = 0;
    cr_assert_eq(ak_ticket_take_pen(&t, bucket, &retry_ms), AK_PEN_OK);
    cr_assert(ak_ticket_claim(&t, "a", "evt-1", 5, 60000));
    cr_assert(ak_ticket_take_quota(&t, ak_mono_ns(), &retry_ns));
    cr_assert_eq(ak_ticket_take_share(&t), AK_WR_QUEUED);
    cr_assert_eq(ak_pen_bytes(fx.inst->pen), 40);
    cr_assert_eq(ak_pen_waiting(fx.inst->pen), 1);
    ak_ticket_settle(&t, false);
    cr_assert_eq(ak_pen_bytes(fx.inst->pen), 0, "the pen's bytes come back");
    cr_assert_eq(ak_pen_waiting(fx.inst->pen), 0);
    cr_assert_null(t.claim, "the claim is freed (ASan: no leak)");
    ak_ticket_settle(&t, false); /* settled already: nothing is given back twice */
    cr_assert_eq(ak_pen_bytes(fx.inst->pen), 0);
  }
  /* the quota came back each round: the burst of 2 is still there, and only 2 */
  cr_assert(quota_left());
  cr_assert(quota_left());
  cr_assert_not(quota_left(), "a settle given twice would have refunded more than was charged");
}

Test(ticket, a_stored_hook_keeps_its_pen_bytes_and_its_quota) {
  ak_ticket_t t = ticket(30);
  int64_t retry_ms = 0, retry_ns = 0;
  cr_assert_eq(ak_ticket_take_pen(&t, bucket, &retry_ms), AK_PEN_OK);
  cr_assert(ak_ticket_take_quota(&t, ak_mono_ns(), &retry_ns));
  cr_assert_eq(ak_ticket_take_share(&t), AK_WR_QUEUED);
  ak_ticket_settle(&t, true);
  cr_assert_eq(ak_pen_bytes(fx.inst->pen), 30, "a committed pen write holds its bytes");
  cr_assert_eq(ak_pen_waiting(fx.inst->pen), 0, "but not its waiting slot");
  cr_assert(quota_left());
  cr_assert_not(quota_left(), "the stored hook spent one of the burst of 2");
}

Test(ticket, the_queue_share_is_held_until_settled) {
  ak_ticket_t a = ticket(1), b = ticket(1), c = ticket(1);
  cr_assert_eq(ak_ticket_take_share(&a), AK_WR_QUEUED);
  cr_assert_eq(ak_ticket_take_share(&b), AK_WR_QUEUED);
  cr_assert_eq(ak_ticket_take_share(&c), AK_WR_TENANT_OVERLOAD, "batcher.tenant_max_queue: 2");
  cr_assert_not(c.share, "a refused share is not held");
  ak_ticket_settle(&c, false);
  ak_ticket_settle(&a, true); /* stored or not, the record left the queue */
  ak_ticket_t d = ticket(1);
  cr_assert_eq(ak_ticket_take_share(&d), AK_WR_QUEUED, "a's place came back");
  ak_ticket_settle(&b, false);
  ak_ticket_settle(&d, false);
  ak_ticket_t other;
  ak_ticket_init(&other, fx.inst, "globex", 6, 1);
  cr_assert_eq(ak_ticket_take_share(&other), AK_WR_QUEUED, "another tenant's share is its own");
  ak_ticket_settle(&other, false);
}

Test(ticket, a_refused_pen_place_holds_nothing) {
  ak_ticket_t t = ticket(101);
  int64_t retry_ms = 0;
  cr_assert_eq(ak_ticket_take_pen(&t, bucket, &retry_ms), AK_PEN_FULL, "quarantine.max_bytes: 100");
  cr_assert_null(t.pen_bucket);
  ak_ticket_settle(&t, false);
  cr_assert_eq(ak_pen_bytes(fx.inst->pen), 0);
  cr_assert_eq(ak_pen_waiting(fx.inst->pen), 0);
}

Test(ticket, a_settle_gives_the_share_back_once) {
  ak_ticket_t a = ticket(1), b = ticket(1);
  cr_assert_eq(ak_ticket_take_share(&a), AK_WR_QUEUED);
  cr_assert_eq(ak_ticket_take_share(&b), AK_WR_QUEUED);
  ak_ticket_settle(&a, false);
  ak_ticket_settle(&a, false); /* a second settle must not free b's place too */
  ak_ticket_t c = ticket(1), d = ticket(1);
  cr_assert_eq(ak_ticket_take_share(&c), AK_WR_QUEUED);
  cr_assert_eq(ak_ticket_take_share(&d), AK_WR_TENANT_OVERLOAD, "b and c hold the share of 2");
  ak_ticket_settle(&b, false);
  ak_ticket_settle(&c, false);
  ak_ticket_settle(&d, false);
}
