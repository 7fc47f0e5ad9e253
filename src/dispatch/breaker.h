/* Circuit breaker for one sink key {source, sink index, module}
 * (`dispatch.breaker_failures`, `breaker_open_ms`, `breaker_max_open_ms`). Owns the
 * closed -> open -> half-open state, the consecutive-failure count, the open period and a
 * transitions counter, behind one small mutex per breaker. Callback-free: the scheduler
 * asks before each attempt and reports each outcome; it polls the state for gauges. Must
 * never do I/O, read a clock (callers pass now_ms) or park rows itself.
 *
 * Scheduler usage, per attempt on a key:
 *   switch (ak_breaker_allow(b, now)) {
 *     case AK_BREAKER_ALLOW: case AK_BREAKER_PROBE: run the attempt, then
 *       ak_breaker_record(b, now, outcome.result) exactly once;
 *     case AK_BREAKER_DENY: park the row, due at ak_breaker_retry_at(b, now), attempts kept
 *   }
 * The holder of PROBE must record its outcome: until it does (or max_open_ms passes, in
 * case it never does) every other caller is denied. An outcome recorded while half-open
 * decides the probe whichever attempt it came from: it is fresh evidence either way.
 * Outcomes recorded while open (attempts that were already in flight) change nothing.
 * Restart closes every breaker: state is in memory only. */
#ifndef AK_DISPATCH_BREAKER_H
#define AK_DISPATCH_BREAKER_H

#include <stddef.h>
#include <stdint.h>
#include "sinks/sink.h"

typedef struct {
  int failures;         /* consecutive non-permanent failures that open it; 0 = no breaker */
  int64_t open_ms;      /* first open period */
  int64_t max_open_ms;  /* the period doubles on each re-open after a failed probe, up to this */
} ak_breaker_config_t;

typedef enum {
  AK_BREAKER_CLOSED = 0,
  AK_BREAKER_OPEN,       /* denying until open_until */
  AK_BREAKER_HALF_OPEN,  /* one probe granted, its outcome decides */
} ak_breaker_state_t;

typedef enum {
  AK_BREAKER_ALLOW = 0,  /* closed: go ahead */
  AK_BREAKER_PROBE,      /* the single probe of a half-open breaker: go ahead, then record */
  AK_BREAKER_DENY,       /* park the row */
} ak_breaker_verdict_t;

typedef struct ak_breaker ak_breaker_t;

/* 5 / 30000 / 300000 */
ak_breaker_config_t ak_breaker_config_default(void);

/* 0, or -1 with a message naming the dotted key (dispatch.breaker_*) in err. */
int ak_breaker_config_check(const ak_breaker_config_t *c, char *err, size_t errlen);

/* A closed breaker with a copy of the config; NULL when out of memory. */
ak_breaker_t *ak_breaker_new(const ak_breaker_config_t *c);
void ak_breaker_free(ak_breaker_t *b);

/* Closed: ALLOW. Open and now_ms < open_until: DENY. Open and the period has passed:
 * the first caller becomes the probe (state half-open, PROBE), everyone after it is
 * DENIED until the probe's outcome is recorded. */
ak_breaker_verdict_t ak_breaker_allow(ak_breaker_t *b, int64_t now_ms);

/* Report an attempt's outcome. Closed: ok and permanent reset the failure run (the sink
 * answered), a transient failure extends it and the failures-th in a row opens the
 * breaker. Half-open: ok or permanent closes it and resets the period; a transient failure
 * re-opens it with the period doubled (capped at max_open_ms). Open: ignored. */
void ak_breaker_record(ak_breaker_t *b, int64_t now_ms, ak_sink_result_t outcome);

ak_breaker_state_t ak_breaker_state(ak_breaker_t *b);
/* End of the current open period; 0 when the breaker has never opened since it closed. */
int64_t ak_breaker_open_until(ak_breaker_t *b);
/* When a row denied at now_ms should be due again: the end of the open period, or
 * now_ms + open_ms while a probe is out. now_ms when closed. */
int64_t ak_breaker_retry_at(ak_breaker_t *b, int64_t now_ms);
/* State changes since creation (closed->open, open->half-open, half-open->closed/open),
 * for ankusa_dispatch_breaker_changes_total. */
uint64_t ak_breaker_transitions(ak_breaker_t *b);
/* The transitions into each state (indexed by ak_breaker_state_t) since the last take,
 * for ankusa_dispatch_breaker_transitions_total{sink,state}; resets them. */
void ak_breaker_take_transitions(ak_breaker_t *b, uint64_t out[3]);

#endif
