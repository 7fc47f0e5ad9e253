/* GCRA arithmetic in doubles of nanoseconds: the monotonic clock stays below 2^53 ns
 * for a century of uptime, and a fractional interval (rates above 1e9/s, bytes) must not
 * be rounded to a whole nanosecond per unit. */
#include <math.h>
#include "core/gcra.h"

void ak_gcra_init(ak_gcra_t *g, double rate, double burst) {
  if (!(rate > 0)) rate = 1e-9;
  if (!(burst >= 1)) burst = 1;
  g->interval_ns = 1e9 / rate;
  g->burst = burst;
  g->limit_ns = burst * g->interval_ns;
}

static double capped(const ak_gcra_t *g, double cost) {
  if (cost < 0) return 0;
  return cost > g->burst ? g->burst : cost;
}

bool ak_gcra_check(const ak_gcra_t *g, double tat, double cost, int64_t now_ns, double *new_tat,
                   int64_t *retry_ns) {
  double now = (double)now_ns;
  double base = tat > now ? tat : now;
  double nt = base + capped(g, cost) * g->interval_ns;
  double ahead = nt - now;
  if (ahead <= g->limit_ns) {
    if (new_tat) *new_tat = nt;
    if (retry_ns) *retry_ns = 0;
    return true;
  }
  if (retry_ns) {
    double w = ceil(ahead - g->limit_ns);
    *retry_ns = w > 9e18 ? (int64_t)9e18 : (int64_t)w;
  }
  return false;
}

double ak_gcra_refund(const ak_gcra_t *g, double tat, double cost) {
  double t = tat - capped(g, cost) * g->interval_ns;
  return t > 0 ? t : 0;
}

int ak_gcra_retry_after_s(int64_t retry_ns) {
  if (retry_ns <= 0) return 1;
  int64_t s = (retry_ns + 999999999) / 1000000000;
  if (s < 1) s = 1;
  if (s > 86400 * 365) s = 86400 * 365;
  return (int)s;
}
