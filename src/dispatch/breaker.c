/* Circuit breaker state machine (see breaker.h). Owns one breaker's state behind its own
 * mutex; must never do I/O, read a clock, call back into the scheduler or hold the lock
 * longer than a few comparisons. */
#include "dispatch/breaker.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

struct ak_breaker {
  pthread_mutex_t mu;
  ak_breaker_config_t cfg;
  ak_breaker_state_t state;
  int run;                /* consecutive transient failures while closed */
  int opens;              /* opens since the last close: the period's exponent */
  int64_t open_until;
  int64_t probe_since;    /* when the outstanding probe was granted */
  uint64_t transitions;
  uint64_t untaken[3];    /* transitions into each state not yet taken (ak_breaker_take_transitions) */
};

ak_breaker_config_t ak_breaker_config_default(void) {
  return (ak_breaker_config_t){.failures = 5, .open_ms = 30000, .max_open_ms = 300000};
}

int ak_breaker_config_check(const ak_breaker_config_t *c, char *err, size_t errlen) {
  const char *msg = NULL;
  if (c->failures < 0)
    msg = "dispatch.breaker_failures: must be 0 (no breaker) or more";
  else if (c->failures > 0 && c->open_ms < 1)
    msg = "dispatch.breaker_open_ms: must be at least 1";
  else if (c->failures > 0 && c->max_open_ms < c->open_ms)
    msg = "dispatch.breaker_max_open_ms: must be at least dispatch.breaker_open_ms";
  if (!msg) return 0;
  if (err && errlen) snprintf(err, errlen, "%s", msg);
  return -1;
}

ak_breaker_t *ak_breaker_new(const ak_breaker_config_t *c) {
  ak_breaker_t *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  if (pthread_mutex_init(&b->mu, NULL) != 0) {
    free(b);
    return NULL;
  }
  b->cfg = *c;
  b->state = AK_BREAKER_CLOSED;
  return b;
}

void ak_breaker_free(ak_breaker_t *b) {
  if (!b) return;
  pthread_mutex_destroy(&b->mu);
  free(b);
}

/* min(open_ms * 2^(opens-1), max_open_ms), overflow-free for any number of opens. */
static int64_t period_ms(const ak_breaker_config_t *c, int opens) {
  int64_t cap = c->max_open_ms > c->open_ms ? c->max_open_ms : c->open_ms;
  int shift = opens < 1 ? 0 : opens - 1;
  if (c->open_ms <= 0) return 0;
  if (shift >= 63 || c->open_ms > (cap >> shift)) return cap;
  return c->open_ms << shift;
}

static int64_t add_sat(int64_t a, int64_t b) {
  return b > 0 && a > INT64_MAX - b ? INT64_MAX : a + b;
}

/* Caller holds mu. */
static void open_locked(ak_breaker_t *b, int64_t now_ms) {
  if (b->opens < INT32_MAX) b->opens++;
  b->state = AK_BREAKER_OPEN;
  b->open_until = add_sat(now_ms, period_ms(&b->cfg, b->opens));
  b->run = 0;
  b->transitions++;
  b->untaken[AK_BREAKER_OPEN]++;
}

ak_breaker_verdict_t ak_breaker_allow(ak_breaker_t *b, int64_t now_ms) {
  if (b->cfg.failures <= 0) return AK_BREAKER_ALLOW;  /* config is immutable: no lock */
  ak_breaker_verdict_t v = AK_BREAKER_ALLOW;
  pthread_mutex_lock(&b->mu);
  switch (b->state) {
    case AK_BREAKER_CLOSED:
      break;
    case AK_BREAKER_OPEN:
      if (now_ms < b->open_until) {
        v = AK_BREAKER_DENY;
      } else {
        b->state = AK_BREAKER_HALF_OPEN;
        b->probe_since = now_ms;
        b->transitions++;
        b->untaken[AK_BREAKER_HALF_OPEN]++;
        v = AK_BREAKER_PROBE;
      }
      break;
    case AK_BREAKER_HALF_OPEN:
      /* A probe whose outcome never came back (a scheduler bug, not a slow sink: attempts
       * time out far sooner) must not wedge the key for ever. */
      if (now_ms - b->probe_since >= b->cfg.max_open_ms) {
        b->probe_since = now_ms;
        v = AK_BREAKER_PROBE;
      } else {
        v = AK_BREAKER_DENY;
      }
      break;
  }
  pthread_mutex_unlock(&b->mu);
  return v;
}

void ak_breaker_record(ak_breaker_t *b, int64_t now_ms, ak_sink_result_t outcome) {
  if (b->cfg.failures <= 0) return;
  bool failed = outcome != AK_SINK_OK && outcome != AK_SINK_PERMANENT;
  pthread_mutex_lock(&b->mu);
  switch (b->state) {
    case AK_BREAKER_CLOSED:
      if (!failed) {
        b->run = 0;
      } else if (++b->run >= b->cfg.failures) {
        open_locked(b, now_ms);
      }
      break;
    case AK_BREAKER_HALF_OPEN:
      if (failed) {
        open_locked(b, now_ms);
      } else {
        b->state = AK_BREAKER_CLOSED;
        b->run = 0;
        b->opens = 0;
        b->open_until = 0;
        b->transitions++;
        b->untaken[AK_BREAKER_CLOSED]++;
      }
      break;
    case AK_BREAKER_OPEN:
      break;
  }
  pthread_mutex_unlock(&b->mu);
}

ak_breaker_state_t ak_breaker_state(ak_breaker_t *b) {
  pthread_mutex_lock(&b->mu);
  ak_breaker_state_t s = b->state;
  pthread_mutex_unlock(&b->mu);
  return s;
}

int64_t ak_breaker_open_until(ak_breaker_t *b) {
  pthread_mutex_lock(&b->mu);
  int64_t t = b->open_until;
  pthread_mutex_unlock(&b->mu);
  return t;
}

int64_t ak_breaker_retry_at(ak_breaker_t *b, int64_t now_ms) {
  pthread_mutex_lock(&b->mu);
  int64_t t = now_ms;
  if (b->state == AK_BREAKER_OPEN && b->open_until > now_ms)
    t = b->open_until;
  else if (b->state == AK_BREAKER_HALF_OPEN)
    t = add_sat(now_ms, b->cfg.open_ms);
  pthread_mutex_unlock(&b->mu);
  return t;
}

void ak_breaker_take_transitions(ak_breaker_t *b, uint64_t out[3]) {
  pthread_mutex_lock(&b->mu);
  for (int i = 0; i < 3; i++) {
    out[i] = b->untaken[i];
    b->untaken[i] = 0;
  }
  pthread_mutex_unlock(&b->mu);
}

uint64_t ak_breaker_transitions(ak_breaker_t *b) {
  pthread_mutex_lock(&b->mu);
  uint64_t n = b->transitions;
  pthread_mutex_unlock(&b->mu);
  return n;
}
