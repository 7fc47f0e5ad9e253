/* GCRA (the generic cell rate algorithm): a token bucket kept as one number, the
 * theoretical arrival time (TAT) of the next unit. Owns the arithmetic only: callers
 * keep the TAT and hold their own lock around a check and its commit. Never reads a
 * clock itself (now is passed in, so tests drive time). */
#ifndef AK_CORE_GCRA_H
#define AK_CORE_GCRA_H

#include <stdbool.h>
#include <stdint.h>

typedef struct ak_gcra {
  double interval_ns;         /* one unit every interval_ns: 1e9 / rate */
  double limit_ns;            /* burst * interval_ns: how far the TAT may run ahead of now */
  double burst;
} ak_gcra_t;

/* rate: units per second (> 0, fractions allowed); burst: units at once (>= 1). */
void ak_gcra_init(ak_gcra_t *g, double rate, double burst);

/* Would `cost` units pass now? A TAT of 0 is a fresh (full) bucket. A cost above the
 * burst is charged as the burst: such a request passes only on a full bucket and empties
 * it, so a body larger than a byte budget's burst is slow, never impossible. On a pass
 * *new_tat is the TAT to store; on a refusal *retry_ns is how long until the same cost
 * would pass (the TAT is left as it was: a refusal spends nothing). */
bool ak_gcra_check(const ak_gcra_t *g, double tat, double cost, int64_t now_ns, double *new_tat,
                   int64_t *retry_ns);

/* The TAT after giving back `cost` units taken earlier (capped the same way). */
double ak_gcra_refund(const ak_gcra_t *g, double tat, double cost);

/* True when a bucket with this TAT is full again (its state carries no information). */
static inline bool ak_gcra_idle(double tat, int64_t now_ns) { return tat <= (double)now_ns; }

/* Retry-After in whole seconds for a wait in ns: rounded up, at least 1. */
int ak_gcra_retry_after_s(int64_t retry_ns);

#endif
