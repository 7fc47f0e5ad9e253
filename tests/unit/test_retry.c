/* Unit tests: the retry policy. Doubling from base_ms, the max_ms cap, jitter bounds over
 * many random words, Retry-After honoured and capped at one hour, permanent and last
 * attempts dead-letter, no overflow at absurd attempt numbers, the defaults' horizon, and
 * the policy check naming its dotted keys. */
#include <criterion/criterion.h>
#include <string.h>
#include "dispatch/retry.h"

/* splitmix64: a deterministic spread of random words for the jitter tests. */
static uint64_t mix(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

static ak_retry_policy_t nojitter(void) {
  ak_retry_policy_t p = ak_retry_policy_default();
  p.jitter = false;
  return p;
}

Test(retry, defaults) {
  ak_retry_policy_t p = ak_retry_policy_default();
  cr_assert_eq(p.base_ms, 100);
  cr_assert_eq(p.max_ms, 300000);
  cr_assert_eq(p.max_attempts, 84);
  cr_assert(p.jitter);
  cr_assert_eq(ak_retry_policy_check(&p, NULL, 0), 0);
}

Test(retry, doubles_from_base) {
  ak_retry_policy_t p = nojitter();
  int64_t want = 100;
  for (int a = 1; a <= 12; a++, want *= 2)
    cr_expect_eq(ak_retry_delay_ms(&p, a, 0), want, "attempt %d: %lld", a,
                 (long long)ak_retry_delay_ms(&p, a, 0));
  cr_assert_eq(ak_retry_delay_ms(&p, 12, 0), 204800);
  /* attempt numbers below 1 are the first */
  cr_assert_eq(ak_retry_delay_ms(&p, 0, 0), 100);
  cr_assert_eq(ak_retry_delay_ms(&p, -5, 0), 100);
}

Test(retry, capped_at_max_ms) {
  ak_retry_policy_t p = nojitter();
  /* 100 * 2^12 = 409 600 is the first over the cap */
  for (int a = 13; a <= 200; a++)
    cr_expect_eq(ak_retry_delay_ms(&p, a, 0), 300000, "attempt %d", a);
  p.max_ms = 250;
  cr_assert_eq(ak_retry_delay_ms(&p, 2, 0), 200);
  cr_assert_eq(ak_retry_delay_ms(&p, 3, 0), 250);
}

Test(retry, no_overflow_for_any_attempt) {
  ak_retry_policy_t p = nojitter();
  int attempts[] = {62, 63, 64, 65, 100, 1000, 10000, 1 << 20, 2147483647};
  for (size_t i = 0; i < sizeof attempts / sizeof *attempts; i++) {
    cr_expect_eq(ak_retry_delay_ms(&p, attempts[i], 0), 300000, "attempt %d", attempts[i]);
    p.jitter = true;
    int64_t d = ak_retry_delay_ms(&p, attempts[i], ~0ULL);
    cr_expect(d >= 150000 && d <= 300000, "jittered attempt %d: %lld", attempts[i], (long long)d);
    p.jitter = false;
  }
  /* an enormous cap: the exponent, not the cap, is the limit */
  p.base_ms = 1;
  p.max_ms = INT64_MAX;
  cr_assert_eq(ak_retry_delay_ms(&p, 63, 0), (int64_t)1 << 62);
  cr_assert_eq(ak_retry_delay_ms(&p, 64, 0), INT64_MAX);
  cr_assert_eq(ak_retry_delay_ms(&p, 10000, 0), INT64_MAX);
  p.jitter = true;
  int64_t d = ak_retry_delay_ms(&p, 10000, ~0ULL);
  cr_assert(d >= INT64_MAX / 2 && d <= INT64_MAX, "%lld", (long long)d);
  cr_assert(ak_retry_delay_ms(&p, 10000, 0) >= INT64_MAX / 2);
}

Test(retry, jitter_within_half_to_full) {
  ak_retry_policy_t p = ak_retry_policy_default(), flat = nojitter();
  uint64_t s = 42;
  for (int a = 1; a <= 20; a++) {
    int64_t nominal = ak_retry_delay_ms(&flat, a, 0);
    int64_t lo = INT64_MAX, hi = 0;
    double sum = 0;
    const int n = 20000;
    for (int i = 0; i < n; i++) {
      int64_t d = ak_retry_delay_ms(&p, a, mix(&s));
      cr_assert(2 * d >= nominal && d <= nominal, "attempt %d: %lld outside [%lld/2, %lld]", a,
                (long long)d, (long long)nominal, (long long)nominal);
      if (d < lo) lo = d;
      if (d > hi) hi = d;
      sum += (double)d;
    }
    /* the whole range is used and the mean sits at 3/4 of nominal */
    cr_expect(lo <= nominal / 2 + nominal / 100 + 1, "attempt %d: min %lld", a, (long long)lo);
    cr_expect(hi >= nominal - nominal / 100 - 1, "attempt %d: max %lld", a, (long long)hi);
    double mean = sum / n;
    cr_expect(mean > 0.73 * (double)nominal && mean < 0.77 * (double)nominal,
              "attempt %d: mean %.1f of %lld", a, mean, (long long)nominal);
  }
  /* the extremes of rnd hit the ends exactly */
  cr_assert_eq(ak_retry_delay_ms(&p, 13, 0), 150000);
  cr_assert_eq(ak_retry_delay_ms(&p, 13, ~0ULL), 300000);
  cr_assert_eq(ak_retry_delay_ms(&p, 1, 0), 50);
  cr_assert_eq(ak_retry_delay_ms(&p, 1, ~0ULL), 100);
  /* an odd nominal never drops below half of it */
  p.base_ms = 101;
  cr_assert_eq(ak_retry_delay_ms(&p, 1, 0), 51);
}

Test(retry, decide_backoff) {
  ak_retry_policy_t p = nojitter();
  int64_t delay = -1;
  const char *why = NULL;
  cr_assert_eq(ak_retry_decide(&p, 1, AK_SINK_RETRY, 0, 0, &delay, &why), AK_RETRY_AGAIN);
  cr_assert_eq(delay, 100);
  cr_assert_str_eq(why, "backoff");
  cr_assert_eq(ak_retry_decide(&p, 5, AK_SINK_RETRY, 0, 0, &delay, &why), AK_RETRY_AGAIN);
  cr_assert_eq(delay, 1600);
  cr_assert_eq(ak_retry_decide(&p, 1, AK_SINK_OK, 0, 0, &delay, &why), AK_RETRY_DONE);
  cr_assert_eq(delay, 0);
  cr_assert_str_eq(why, "ok");
  /* NULL outputs are allowed */
  cr_assert_eq(ak_retry_decide(&p, 1, AK_SINK_RETRY, 0, 0, NULL, NULL), AK_RETRY_AGAIN);
}

Test(retry, retry_after_honoured_and_capped) {
  ak_retry_policy_t p = nojitter();
  int64_t delay;
  const char *why;
  /* the sink asks for longer than the backoff: its delay wins */
  cr_assert_eq(ak_retry_decide(&p, 1, AK_SINK_RETRY, 5000, 0, &delay, &why), AK_RETRY_AGAIN);
  cr_assert_eq(delay, 5000);
  cr_assert_str_eq(why, "retry_after");
  /* shorter than the backoff: the backoff wins */
  cr_assert_eq(ak_retry_decide(&p, 13, AK_SINK_RETRY, 5000, 0, &delay, &why), AK_RETRY_AGAIN);
  cr_assert_eq(delay, 300000);
  cr_assert_str_eq(why, "backoff");
  /* capped at one hour */
  cr_assert_eq(ak_retry_decide(&p, 1, AK_SINK_RETRY, 86400000, 0, &delay, &why), AK_RETRY_AGAIN);
  cr_assert_eq(delay, 3600000);
  cr_assert_eq(ak_retry_decide(&p, 1, AK_SINK_RETRY, INT64_MAX, 0, &delay, &why), AK_RETRY_AGAIN);
  cr_assert_eq(delay, AK_RETRY_AFTER_CAP_MS);
  /* none or nonsense: ignored */
  cr_assert_eq(ak_retry_decide(&p, 1, AK_SINK_RETRY, -7, 0, &delay, &why), AK_RETRY_AGAIN);
  cr_assert_eq(delay, 100);
  /* with jitter the sink's delay is still the floor */
  p.jitter = true;
  cr_assert_eq(ak_retry_decide(&p, 13, AK_SINK_RETRY, 200000, 0, &delay, &why), AK_RETRY_AGAIN);
  cr_assert_eq(delay, 200000);
  cr_assert_eq(ak_retry_decide(&p, 13, AK_SINK_RETRY, 200000, ~0ULL, &delay, &why), AK_RETRY_AGAIN);
  cr_assert_eq(delay, 300000);
}

Test(retry, permanent_dead_at_once) {
  ak_retry_policy_t p = ak_retry_policy_default();
  int64_t delay = -1;
  const char *why = NULL;
  cr_assert_eq(ak_retry_decide(&p, 1, AK_SINK_PERMANENT, 60000, 7, &delay, &why), AK_RETRY_DEAD);
  cr_assert_str_eq(why, "permanent");
  cr_assert_eq(delay, 0);
}

Test(retry, last_attempt_dead_letters) {
  ak_retry_policy_t p = ak_retry_policy_default();
  int64_t delay;
  const char *why;
  cr_assert_eq(ak_retry_decide(&p, 83, AK_SINK_RETRY, 0, 0, &delay, &why), AK_RETRY_AGAIN);
  cr_assert_eq(ak_retry_decide(&p, 84, AK_SINK_RETRY, 0, 0, &delay, &why), AK_RETRY_DEAD);
  cr_assert_str_eq(why, "max_attempts");
  cr_assert_eq(ak_retry_decide(&p, 85, AK_SINK_RETRY, 9000, 0, &delay, &why), AK_RETRY_DEAD);
  /* a success on the last attempt still clears */
  cr_assert_eq(ak_retry_decide(&p, 84, AK_SINK_OK, 0, 0, &delay, &why), AK_RETRY_DONE);
  /* one attempt only: the first failure dead-letters */
  p.max_attempts = 1;
  cr_assert_eq(ak_retry_decide(&p, 1, AK_SINK_RETRY, 0, 0, &delay, &why), AK_RETRY_DEAD);
  cr_assert_str_eq(why, "max_attempts");
}

Test(retry, total_for_defaults) {
  ak_retry_policy_t p = ak_retry_policy_default();
  /* 100 + 200 + ... + 204 800 (attempts 1..12) = 409 500, then 71 x 300 000 (13..83):
   * 21 709 500 ms, 6 h 1 min 49.5 s. Jitter does not enter the total. */
  cr_assert_eq(ak_retry_total_ms(&p), 21709500);
  ak_retry_policy_t flat = nojitter();
  int64_t sum = 0;
  for (int a = 1; a < p.max_attempts; a++) sum += ak_retry_delay_ms(&flat, a, 0);
  cr_assert_eq(ak_retry_total_ms(&p), sum);
  /* the pre-0.5 defaults: 30 s cap, 12 attempts -> 100 .. 25 600 (1..9), then 2 x 30 000 */
  p.max_ms = 30000;
  p.max_attempts = 12;
  cr_assert_eq(ak_retry_total_ms(&p), 51100 + 2 * 30000);
  p.max_attempts = 1;
  cr_assert_eq(ak_retry_total_ms(&p), 0);
  /* saturates rather than wraps */
  p.base_ms = 1;
  p.max_ms = INT64_MAX;
  p.max_attempts = 2147483647;
  cr_assert_eq(ak_retry_total_ms(&p), INT64_MAX);
}

Test(retry, policy_check_names_keys) {
  char err[160];
  ak_retry_policy_t p = ak_retry_policy_default();
  p.base_ms = 0;
  cr_assert_eq(ak_retry_policy_check(&p, err, sizeof err), -1);
  cr_assert(strstr(err, "dispatch.retry.base_ms"), "%s", err);
  p = ak_retry_policy_default();
  p.max_ms = 50;
  cr_assert_eq(ak_retry_policy_check(&p, err, sizeof err), -1);
  cr_assert(strstr(err, "dispatch.retry.max_ms"), "%s", err);
  p = ak_retry_policy_default();
  p.max_attempts = 0;
  cr_assert_eq(ak_retry_policy_check(&p, err, sizeof err), -1);
  cr_assert(strstr(err, "dispatch.retry.max_attempts"), "%s", err);
}
