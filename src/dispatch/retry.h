/* Retry policy (`dispatch.retry.*`): owns the backoff arithmetic and the give-up decision
 * for one failed delivery attempt. Pure functions over a policy value: no globals, no
 * clock, no randomness of its own (the caller passes 64 random bits), no I/O, no store.
 * It must never touch a delivery row; the scheduler applies what it decides.
 *
 * Scheduler usage, after attempt number `n` of a row (n = attempts made, 1-based) ended:
 *   int64_t delay; const char *why;
 *   switch (ak_retry_decide(&pol, n, outcome.result, outcome.retry_after_ms, rnd, &delay, &why)) {
 *     case AK_RETRY_DONE:  clear the row
 *     case AK_RETRY_AGAIN: row due at now + delay, attempts = n
 *     case AK_RETRY_DEAD:  dead row with reason `why` ("permanent" / "max_attempts")
 *   }
 *
 * With the defaults (100 ms doubling, capped at 300 000 ms from the 13th delay, 84 attempts)
 * the 83 waits add up to 21 709 500 ms unjittered (6 h 1 min 49.5 s); jitter makes the
 * horizon 3–6 h. */
#ifndef AK_DISPATCH_RETRY_H
#define AK_DISPATCH_RETRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "sinks/sink.h"

/* Retry-After from a sink is honoured up to one hour. */
#define AK_RETRY_AFTER_CAP_MS 3600000LL

typedef struct {
  int64_t base_ms;    /* delay after the first failure */
  int64_t max_ms;     /* cap on the delay, applied before jitter */
  int max_attempts;   /* attempts in all; the one numbered max_attempts dead-letters */
  bool jitter;        /* multiply by a factor in [0.5, 1.0] */
} ak_retry_policy_t;

typedef enum {
  AK_RETRY_DONE = 0,  /* the attempt succeeded: clear the row */
  AK_RETRY_AGAIN,     /* reschedule after *delay_ms */
  AK_RETRY_DEAD,      /* give up: dead-letter with *reason */
} ak_retry_verdict_t;

/* 100 / 300000 / 84 / true */
ak_retry_policy_t ak_retry_policy_default(void);

/* 0, or -1 with a message naming the dotted key (dispatch.retry.*) in err. */
int ak_retry_policy_check(const ak_retry_policy_t *p, char *err, size_t errlen);

/* Delay before the next attempt after failed attempt `attempt` (1 = after the first
 * failure; values below 1 count as 1): min(max_ms, base_ms * 2^(attempt-1)), then, with
 * jitter, scaled into [ceil(nominal / 2), nominal] uniformly from `rnd`. Never overflows,
 * whatever the attempt number. */
int64_t ak_retry_delay_ms(const ak_retry_policy_t *p, int attempt, uint64_t rnd);

/* Decide what follows attempt number `attempts_done` (1-based, the one that just ended).
 * permanent -> DEAD "permanent"; attempts_done >= max_attempts -> DEAD "max_attempts";
 * else AGAIN with *delay_ms = max(policy delay, min(retry_after_ms, 1 h)) and *reason
 * "retry_after" when the sink's delay won, "backoff" otherwise. ok -> DONE ("ok").
 * retry_after_ms <= 0 means the sink gave none. delay_ms / reason may be NULL. */
ak_retry_verdict_t ak_retry_decide(const ak_retry_policy_t *p, int attempts_done,
                                   ak_sink_result_t outcome, int64_t retry_after_ms,
                                   uint64_t rnd, int64_t *delay_ms, const char **reason);

/* Sum of the unjittered delays a row can wait (attempts 1 .. max_attempts-1), saturating
 * at INT64_MAX: the retry horizon, not counting attempt durations or breaker parking. */
int64_t ak_retry_total_ms(const ak_retry_policy_t *p);

#endif
