/* The fleet limiter's breaker: whether a hook's admission may call the fleet store now,
 * from the outcomes of recent calls. Closed: every hook calls. When at least min_calls
 * calls of one window (window_ms, aligned to the clock) were made and failure_rate of
 * them failed, it opens: hooks are answered node-local with no call for open_ms; then the
 * first hook to ask becomes the one probe (probing), and its outcome closes it or opens it
 * again. Owns three atomic words and nothing else: the request path takes no lock and
 * sends no message, any number of threads may ask and record at once. Never reads a
 * clock itself (now is passed in, so tests drive time). */
#ifndef AK_FLEET_BREAKER_H
#define AK_FLEET_BREAKER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef enum { AK_FB_CLOSED = 0, AK_FB_OPEN = 1, AK_FB_PROBING = 2 } ak_fb_state_t;

/* What a caller may do now. */
typedef enum {
  AK_FB_CALL = 0,   /* closed: call, then record the outcome */
  AK_FB_PROBE,      /* this caller is the probe: call, then record with probe = true */
  AK_FB_SKIP,       /* open (or another caller probes): answer node-local, record nothing */
} ak_fb_ask_t;

typedef struct ak_fbreaker {
  double failure_rate;        /* (0, 1] */
  uint32_t min_calls;         /* >= 1 */
  int64_t window_ms, open_ms; /* >= 1 */
  _Atomic int state;          /* ak_fb_state_t */
  _Atomic int64_t open_until_ms;
  /* the current window: its number (now / window_ms, low 16 bits), its calls and its
   * failures (24 bits each, saturating), in one word so a window change and a count
   * never tear apart */
  _Atomic uint64_t window;
} ak_fbreaker_t;

void ak_fbreaker_init(ak_fbreaker_t *b, double failure_rate, int64_t min_calls, int64_t window_ms, int64_t open_ms);
ak_fb_ask_t ak_fbreaker_ask(ak_fbreaker_t *b, int64_t now_ms);
/* The outcome of a call made after AK_FB_CALL (probe false) or AK_FB_PROBE (probe true).
 * Returns the state it moved to (AK_FB_OPEN, AK_FB_CLOSED), or -1 when it did not move. A
 * plain call's outcome that lands while the breaker is not closed (it was sent before
 * the breaker opened) changes nothing. */
int ak_fbreaker_record(ak_fbreaker_t *b, int64_t now_ms, bool ok, bool probe);
ak_fb_state_t ak_fbreaker_state(const ak_fbreaker_t *b);
const char *ak_fbreaker_state_name(ak_fb_state_t s);

#endif
