/* Retry policy arithmetic (see retry.h). Owns nothing but math over a policy value; must
 * never read a clock, draw random numbers, keep state or touch a delivery row. */
#include "dispatch/retry.h"

#include <stdio.h>

ak_retry_policy_t ak_retry_policy_default(void) {
  return (ak_retry_policy_t){.base_ms = 100, .max_ms = 300000, .max_attempts = 84, .jitter = true};
}

int ak_retry_policy_check(const ak_retry_policy_t *p, char *err, size_t errlen) {
  const char *msg = NULL;
  if (p->base_ms < 1)
    msg = "dispatch.retry.base_ms: must be at least 1";
  else if (p->max_ms < p->base_ms)
    msg = "dispatch.retry.max_ms: must be at least dispatch.retry.base_ms";
  else if (p->max_attempts < 1)
    msg = "dispatch.retry.max_attempts: must be at least 1";
  if (!msg) return 0;
  if (err && errlen) snprintf(err, errlen, "%s", msg);
  return -1;
}

/* min(max, base * 2^(attempt-1)) without ever forming a product that could overflow. */
static int64_t nominal_ms(const ak_retry_policy_t *p, int attempt) {
  int64_t cap = p->max_ms > 0 ? p->max_ms : 0;
  if (p->base_ms <= 0) return 0;
  if (p->base_ms >= cap) return cap;
  int shift = attempt < 1 ? 0 : attempt - 1;
  /* base * 2^shift > cap  <=>  base > floor(cap / 2^shift) */
  if (shift >= 63 || p->base_ms > (cap >> shift)) return cap;
  return p->base_ms << shift;
}

int64_t ak_retry_delay_ms(const ak_retry_policy_t *p, int attempt, uint64_t rnd) {
  int64_t n = nominal_ms(p, attempt);
  if (!p->jitter || n == 0) return n;
  /* Uniform over the integers [ceil(n/2), n]: the top 53 bits of rnd as a fraction in
   * [0, 1) times the span's size. Doubles are exact to 2^53; the clamp covers rounding
   * for spans beyond that (a delay of 285 000 years). */
  int64_t lo = n - n / 2;
  uint64_t span = (uint64_t)(n - lo) + 1;
  double frac = (double)(rnd >> 11) * (1.0 / 9007199254740992.0);
  uint64_t off = (uint64_t)(frac * (double)span);
  if (off > (uint64_t)(n - lo)) off = (uint64_t)(n - lo);
  return lo + (int64_t)off;
}

ak_retry_verdict_t ak_retry_decide(const ak_retry_policy_t *p, int attempts_done,
                                   ak_sink_result_t outcome, int64_t retry_after_ms,
                                   uint64_t rnd, int64_t *delay_ms, const char **reason) {
  int64_t delay = 0;
  const char *why;
  ak_retry_verdict_t v;
  if (outcome == AK_SINK_OK) {
    v = AK_RETRY_DONE, why = "ok";
  } else if (outcome == AK_SINK_PERMANENT) {
    v = AK_RETRY_DEAD, why = "permanent";
  } else if (attempts_done >= p->max_attempts) {
    v = AK_RETRY_DEAD, why = "max_attempts";
  } else {
    v = AK_RETRY_AGAIN, why = "backoff";
    delay = ak_retry_delay_ms(p, attempts_done, rnd);
    int64_t ra = retry_after_ms > AK_RETRY_AFTER_CAP_MS ? AK_RETRY_AFTER_CAP_MS : retry_after_ms;
    if (ra > delay) delay = ra, why = "retry_after";
  }
  if (delay_ms) *delay_ms = delay;
  if (reason) *reason = why;
  return v;
}

int64_t ak_retry_total_ms(const ak_retry_policy_t *p) {
  int64_t total = 0;
  for (int a = 1; a < p->max_attempts; a++) {
    int64_t d = nominal_ms(p, a);
    /* Once capped, every remaining delay is the same: finish in one step. */
    if (d == (p->max_ms > 0 ? p->max_ms : 0)) {
      int64_t left = (int64_t)p->max_attempts - a;
      if (d != 0 && left > (INT64_MAX - total) / d) return INT64_MAX;
      return total + left * d;
    }
    if (d > INT64_MAX - total) return INT64_MAX;
    total += d;
  }
  return total;
}
