/* The breaker's window is one word, updated by compare-and-swap: the window number, the
 * calls and the failures change together, so a caller that crosses into a new window
 * starts its counts from zero without a lock and without losing a concurrent count. The
 * state moves by compare-and-swap too, so exactly one caller opens it, exactly one
 * probes, and the probe's outcome alone closes it. */
#include "fleet/breaker.h"

#define CNT_BITS 24
#define CNT_MAX ((1u << CNT_BITS) - 1)

static inline uint64_t w_pack(uint64_t epoch, uint64_t calls, uint64_t fails) {
  return (epoch & 0xffff) << (2 * CNT_BITS) | calls << CNT_BITS | fails;
}
static inline uint64_t w_epoch(uint64_t w) { return w >> (2 * CNT_BITS); }
static inline uint64_t w_calls(uint64_t w) { return (w >> CNT_BITS) & CNT_MAX; }
static inline uint64_t w_fails(uint64_t w) { return w & CNT_MAX; }

void ak_fbreaker_init(ak_fbreaker_t *b, double failure_rate, int64_t min_calls, int64_t window_ms, int64_t open_ms) {
  b->failure_rate = failure_rate > 0 && failure_rate <= 1 ? failure_rate : 1;
  b->min_calls = min_calls < 1 ? 1 : min_calls > CNT_MAX ? CNT_MAX : (uint32_t)min_calls;
  b->window_ms = window_ms < 1 ? 1 : window_ms;
  b->open_ms = open_ms < 1 ? 1 : open_ms;
  atomic_init(&b->state, AK_FB_CLOSED);
  atomic_init(&b->open_until_ms, 0);
  atomic_init(&b->window, 0);
}

ak_fb_ask_t ak_fbreaker_ask(ak_fbreaker_t *b, int64_t now_ms) {
  int s = atomic_load_explicit(&b->state, memory_order_acquire);
  if (s == AK_FB_CLOSED) return AK_FB_CALL;
  if (s == AK_FB_PROBING || now_ms < atomic_load_explicit(&b->open_until_ms, memory_order_acquire))
    return AK_FB_SKIP;
  int expect = AK_FB_OPEN;
  return atomic_compare_exchange_strong(&b->state, &expect, AK_FB_PROBING) ? AK_FB_PROBE : AK_FB_SKIP;
}

static int open_now(ak_fbreaker_t *b, int64_t now_ms, int from) {
  /* open_until first: a caller that sees OPEN must see its end */
  atomic_store_explicit(&b->open_until_ms, now_ms + b->open_ms, memory_order_release);
  int expect = from;
  return atomic_compare_exchange_strong(&b->state, &expect, AK_FB_OPEN) ? AK_FB_OPEN : -1;
}

int ak_fbreaker_record(ak_fbreaker_t *b, int64_t now_ms, bool ok, bool probe) {
  if (probe) {
    if (!ok) return open_now(b, now_ms, AK_FB_PROBING);
    atomic_store(&b->window, w_pack((uint64_t)(now_ms / b->window_ms), 0, 0));
    int expect = AK_FB_PROBING;
    return atomic_compare_exchange_strong(&b->state, &expect, AK_FB_CLOSED) ? AK_FB_CLOSED : -1;
  }
  if (atomic_load_explicit(&b->state, memory_order_acquire) != AK_FB_CLOSED) return -1;
  uint64_t epoch = (uint64_t)(now_ms / b->window_ms) & 0xffff;
  uint64_t w = atomic_load(&b->window), nw;
  do {
    uint64_t calls = w_epoch(w) == epoch ? w_calls(w) : 0, fails = w_epoch(w) == epoch ? w_fails(w) : 0;
    if (calls < CNT_MAX) calls++;
    if (!ok && fails < CNT_MAX) fails++;
    nw = w_pack(epoch, calls, fails);
  } while (!atomic_compare_exchange_weak(&b->window, &w, nw));
  if (ok) return -1;
  uint64_t calls = w_calls(nw), fails = w_fails(nw);
  if (calls < b->min_calls || (double)fails < b->failure_rate * (double)calls) return -1;
  return open_now(b, now_ms, AK_FB_CLOSED);
}

ak_fb_state_t ak_fbreaker_state(const ak_fbreaker_t *b) {
  return (ak_fb_state_t)atomic_load_explicit(&((ak_fbreaker_t *)b)->state, memory_order_acquire);
}

const char *ak_fbreaker_state_name(ak_fb_state_t s) {
  return s == AK_FB_OPEN ? "open" : s == AK_FB_PROBING ? "probing" : "closed";
}
