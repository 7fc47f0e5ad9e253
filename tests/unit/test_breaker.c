/* Unit tests: the per-sink-key circuit breaker. Opens after exactly N consecutive
 * transient failures, a success or permanent answer in between resets the run, denies
 * while open, exactly one probe among racing threads, the probe's outcome closes or
 * re-opens with a doubled period up to the max, failures = 0 never opens, permanent
 * outcomes never open it, the transitions counter and the config check. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <string.h>
#include "dispatch/breaker.h"

static ak_breaker_t *mk(int failures, int64_t open_ms, int64_t max_open_ms) {
  ak_breaker_t *b = ak_breaker_new(&(ak_breaker_config_t){failures, open_ms, max_open_ms});
  cr_assert_not_null(b);
  return b;
}

static void fail_n(ak_breaker_t *b, int64_t now, int n) {
  for (int i = 0; i < n; i++) {
    cr_assert_eq(ak_breaker_allow(b, now), AK_BREAKER_ALLOW, "failure %d of %d", i + 1, n);
    ak_breaker_record(b, now, AK_SINK_RETRY);
  }
}

Test(breaker, defaults) {
  ak_breaker_config_t c = ak_breaker_config_default();
  cr_assert_eq(c.failures, 5);
  cr_assert_eq(c.open_ms, 30000);
  cr_assert_eq(c.max_open_ms, 300000);
  cr_assert_eq(ak_breaker_config_check(&c, NULL, 0), 0);
}

Test(breaker, opens_after_exactly_n) {
  ak_breaker_t *b = mk(5, 30000, 300000);
  fail_n(b, 1000, 4);
  cr_assert_eq(ak_breaker_state(b), AK_BREAKER_CLOSED);
  cr_assert_eq(ak_breaker_transitions(b), 0);
  cr_assert_eq(ak_breaker_open_until(b), 0);
  fail_n(b, 1000, 1);
  cr_assert_eq(ak_breaker_state(b), AK_BREAKER_OPEN);
  cr_assert_eq(ak_breaker_open_until(b), 31000);
  cr_assert_eq(ak_breaker_transitions(b), 1);
  ak_breaker_free(b);
}

Test(breaker, success_in_between_resets) {
  ak_breaker_t *b = mk(3, 30000, 300000);
  fail_n(b, 0, 2);
  ak_breaker_record(b, 0, AK_SINK_OK);
  fail_n(b, 0, 2);
  cr_assert_eq(ak_breaker_state(b), AK_BREAKER_CLOSED, "2 + ok + 2 is not 3 in a row");
  /* a permanent answer also breaks the run: the sink answered */
  ak_breaker_record(b, 0, AK_SINK_PERMANENT);
  fail_n(b, 0, 2);
  cr_assert_eq(ak_breaker_state(b), AK_BREAKER_CLOSED);
  fail_n(b, 0, 1);
  cr_assert_eq(ak_breaker_state(b), AK_BREAKER_OPEN);
  ak_breaker_free(b);
}

Test(breaker, denies_while_open) {
  ak_breaker_t *b = mk(2, 30000, 300000);
  fail_n(b, 1000, 2);
  for (int64_t t = 1000; t < 31000; t += 997) {
    cr_assert_eq(ak_breaker_allow(b, t), AK_BREAKER_DENY, "t=%lld", (long long)t);
    cr_assert_eq(ak_breaker_retry_at(b, t), 31000);
  }
  cr_assert_eq(ak_breaker_allow(b, 30999), AK_BREAKER_DENY);
  /* outcomes of attempts that were in flight when it opened change nothing */
  ak_breaker_record(b, 5000, AK_SINK_OK);
  ak_breaker_record(b, 5000, AK_SINK_RETRY);
  cr_assert_eq(ak_breaker_state(b), AK_BREAKER_OPEN);
  cr_assert_eq(ak_breaker_open_until(b), 31000);
  cr_assert_eq(ak_breaker_transitions(b), 1);
  /* the period has passed: one probe, then denials parked for open_ms */
  cr_assert_eq(ak_breaker_allow(b, 31000), AK_BREAKER_PROBE);
  cr_assert_eq(ak_breaker_state(b), AK_BREAKER_HALF_OPEN);
  cr_assert_eq(ak_breaker_allow(b, 31000), AK_BREAKER_DENY);
  cr_assert_eq(ak_breaker_allow(b, 40000), AK_BREAKER_DENY);
  cr_assert_eq(ak_breaker_retry_at(b, 40000), 70000);
  cr_assert_eq(ak_breaker_transitions(b), 2);
  ak_breaker_free(b);
}

Test(breaker, probe_success_closes_and_resets) {
  ak_breaker_t *b = mk(2, 1000, 8000);
  fail_n(b, 0, 2);
  cr_assert_eq(ak_breaker_allow(b, 1000), AK_BREAKER_PROBE);
  ak_breaker_record(b, 1200, AK_SINK_RETRY);  /* re-open: 2000 */
  cr_assert_eq(ak_breaker_open_until(b), 3200);
  cr_assert_eq(ak_breaker_allow(b, 3200), AK_BREAKER_PROBE);
  ak_breaker_record(b, 3300, AK_SINK_OK);
  cr_assert_eq(ak_breaker_state(b), AK_BREAKER_CLOSED);
  cr_assert_eq(ak_breaker_open_until(b), 0);
  cr_assert_eq(ak_breaker_allow(b, 3300), AK_BREAKER_ALLOW);
  cr_assert_eq(ak_breaker_retry_at(b, 3300), 3300);
  cr_assert_eq(ak_breaker_transitions(b), 5); /* open, half, open, half, closed */
  uint64_t by_state[3];
  ak_breaker_take_transitions(b, by_state); /* by the state entered, then reset */
  cr_assert_eq(by_state[AK_BREAKER_OPEN], 2);
  cr_assert_eq(by_state[AK_BREAKER_HALF_OPEN], 2);
  cr_assert_eq(by_state[AK_BREAKER_CLOSED], 1);
  ak_breaker_take_transitions(b, by_state);
  cr_assert_eq(by_state[0] + by_state[1] + by_state[2], 0);
  cr_assert_eq(ak_breaker_transitions(b), 5, "the running total is not reset by a take");
  /* counts reset: one failure does not re-open, and the next open is back to open_ms */
  fail_n(b, 4000, 1);
  cr_assert_eq(ak_breaker_state(b), AK_BREAKER_CLOSED);
  fail_n(b, 4000, 1);
  cr_assert_eq(ak_breaker_state(b), AK_BREAKER_OPEN);
  cr_assert_eq(ak_breaker_open_until(b), 5000);
  ak_breaker_free(b);
}

Test(breaker, permanent_probe_closes) {
  ak_breaker_t *b = mk(1, 1000, 8000);
  fail_n(b, 0, 1);
  cr_assert_eq(ak_breaker_allow(b, 1000), AK_BREAKER_PROBE);
  ak_breaker_record(b, 1000, AK_SINK_PERMANENT);
  cr_assert_eq(ak_breaker_state(b), AK_BREAKER_CLOSED);
  ak_breaker_free(b);
}

Test(breaker, probe_failure_doubles_up_to_max) {
  ak_breaker_t *b = mk(3, 30000, 300000);
  int64_t now = 1000000;
  fail_n(b, now, 3);
  int64_t want[] = {30000, 60000, 120000, 240000, 300000, 300000, 300000};
  for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
    int64_t until = ak_breaker_open_until(b);
    cr_assert_eq(until - now, want[i], "open %zu: %lld", i + 1, (long long)(until - now));
    cr_assert_eq(ak_breaker_allow(b, until - 1), AK_BREAKER_DENY);
    now = until;
    cr_assert_eq(ak_breaker_allow(b, now), AK_BREAKER_PROBE);
    ak_breaker_record(b, now, AK_SINK_RETRY);
    cr_assert_eq(ak_breaker_state(b), AK_BREAKER_OPEN);
  }
  /* many more re-opens: still the max, no overflow */
  for (int i = 0; i < 200; i++) {
    now = ak_breaker_open_until(b);
    cr_assert_eq(ak_breaker_allow(b, now), AK_BREAKER_PROBE);
    ak_breaker_record(b, now, AK_SINK_RETRY);
    cr_assert_eq(ak_breaker_open_until(b) - now, 300000);
  }
  ak_breaker_free(b);
}

Test(breaker, zero_failures_never_opens) {
  ak_breaker_t *b = mk(0, 30000, 300000);
  for (int i = 0; i < 10000; i++) {
    cr_assert_eq(ak_breaker_allow(b, i), AK_BREAKER_ALLOW);
    ak_breaker_record(b, i, AK_SINK_RETRY);
  }
  cr_assert_eq(ak_breaker_state(b), AK_BREAKER_CLOSED);
  cr_assert_eq(ak_breaker_transitions(b), 0);
  ak_breaker_free(b);
}

Test(breaker, permanent_never_opens) {
  ak_breaker_t *b = mk(1, 30000, 300000);
  for (int i = 0; i < 1000; i++) {
    cr_assert_eq(ak_breaker_allow(b, i), AK_BREAKER_ALLOW);
    ak_breaker_record(b, i, AK_SINK_PERMANENT);
  }
  cr_assert_eq(ak_breaker_state(b), AK_BREAKER_CLOSED);
  cr_assert_eq(ak_breaker_transitions(b), 0);
  ak_breaker_free(b);
}

Test(breaker, lost_probe_expires_after_max_open) {
  ak_breaker_t *b = mk(1, 1000, 5000);
  fail_n(b, 0, 1);
  cr_assert_eq(ak_breaker_allow(b, 1000), AK_BREAKER_PROBE);
  cr_assert_eq(ak_breaker_allow(b, 5999), AK_BREAKER_DENY);
  cr_assert_eq(ak_breaker_allow(b, 6000), AK_BREAKER_PROBE);
  cr_assert_eq(ak_breaker_allow(b, 6000), AK_BREAKER_DENY);
  ak_breaker_free(b);
}

/* ------------------------------------------------------- one probe among threads ---- */

#define RACERS 8

struct race {
  ak_breaker_t *b;
  pthread_barrier_t *go;
  int64_t now;
  ak_breaker_verdict_t got;
};

static void *racer(void *arg) {
  struct race *r = arg;
  pthread_barrier_wait(r->go);
  r->got = ak_breaker_allow(r->b, r->now);
  return NULL;
}

Test(breaker, exactly_one_probe_among_threads) {
  for (int round = 0; round < 300; round++) {
    ak_breaker_t *b = mk(2, 1000, 60000);
    fail_n(b, 0, 2);
    /* re-open a few times so the race also runs on a doubled period */
    int64_t now = 0;
    for (int k = 0; k < round % 4; k++) {
      now = ak_breaker_open_until(b);
      cr_assert_eq(ak_breaker_allow(b, now), AK_BREAKER_PROBE);
      ak_breaker_record(b, now, AK_SINK_RETRY);
    }
    now = ak_breaker_open_until(b);
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, RACERS);
    pthread_t th[RACERS];
    struct race rs[RACERS];
    for (int i = 0; i < RACERS; i++) {
      rs[i] = (struct race){.b = b, .go = &go, .now = now, .got = -1};
      cr_assert_eq(pthread_create(&th[i], NULL, racer, &rs[i]), 0);
    }
    int probes = 0, denies = 0;
    for (int i = 0; i < RACERS; i++) {
      pthread_join(th[i], NULL);
      probes += rs[i].got == AK_BREAKER_PROBE;
      denies += rs[i].got == AK_BREAKER_DENY;
    }
    pthread_barrier_destroy(&go);
    cr_assert_eq(probes, 1, "round %d: %d probes", round, probes);
    cr_assert_eq(denies, RACERS - 1, "round %d: %d denials", round, denies);
    cr_assert_eq(ak_breaker_state(b), AK_BREAKER_HALF_OPEN);
    ak_breaker_record(b, now, AK_SINK_OK);
    cr_assert_eq(ak_breaker_state(b), AK_BREAKER_CLOSED);
    ak_breaker_free(b);
  }
}

Test(breaker, config_check_names_keys) {
  char err[160];
  ak_breaker_config_t c = {-1, 30000, 300000};
  cr_assert_eq(ak_breaker_config_check(&c, err, sizeof err), -1);
  cr_assert(strstr(err, "dispatch.breaker_failures"), "%s", err);
  c = (ak_breaker_config_t){5, 0, 300000};
  cr_assert_eq(ak_breaker_config_check(&c, err, sizeof err), -1);
  cr_assert(strstr(err, "dispatch.breaker_open_ms"), "%s", err);
  c = (ak_breaker_config_t){5, 30000, 20000};
  cr_assert_eq(ak_breaker_config_check(&c, err, sizeof err), -1);
  cr_assert(strstr(err, "dispatch.breaker_max_open_ms"), "%s", err);
  c = (ak_breaker_config_t){0, 0, 0};
  cr_assert_eq(ak_breaker_config_check(&c, err, sizeof err), 0, "no breaker: periods unused");
}
