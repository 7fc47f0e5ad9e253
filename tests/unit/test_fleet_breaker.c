/* The fleet breaker (fleet/breaker.h): when it opens, who probes, what closes it, and
 * that concurrent callers see exactly one opening and exactly one probe. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include "fleet/breaker.h"

static ak_fbreaker_t br;

Test(fleet_breaker, opens_at_min_calls_and_rate) {
  ak_fbreaker_init(&br, 0.5, 20, 10000, 5000);
  int64_t now = 1000000;
  for (int i = 0; i < 10; i++) cr_assert_eq(ak_fbreaker_record(&br, now, true, false), -1);
  for (int i = 0; i < 9; i++) cr_assert_eq(ak_fbreaker_record(&br, now, false, false), -1, "call %d", i);
  cr_assert_eq(ak_fbreaker_state(&br), AK_FB_CLOSED);
  cr_assert_eq(ak_fbreaker_record(&br, now, false, false), AK_FB_OPEN); /* 10 of 20 failed */
  cr_assert_eq(ak_fbreaker_state(&br), AK_FB_OPEN);
  cr_assert_eq(ak_fbreaker_ask(&br, now), AK_FB_SKIP);
  cr_assert_eq(ak_fbreaker_ask(&br, now + 4999), AK_FB_SKIP);
}

Test(fleet_breaker, too_few_calls_or_failures_keep_it_closed) {
  ak_fbreaker_init(&br, 0.5, 20, 10000, 5000);
  int64_t now = 1000000;
  for (int i = 0; i < 19; i++) ak_fbreaker_record(&br, now, false, false);
  cr_assert_eq(ak_fbreaker_state(&br), AK_FB_CLOSED, "19 failures are below min_calls");
  ak_fbreaker_init(&br, 0.5, 20, 10000, 5000);
  for (int i = 0; i < 100; i++) ak_fbreaker_record(&br, now, i % 3 == 0 ? false : true, false);
  cr_assert_eq(ak_fbreaker_state(&br), AK_FB_CLOSED, "a third failing is below 0.5");
  cr_assert_eq(ak_fbreaker_ask(&br, now), AK_FB_CALL);
}

Test(fleet_breaker, a_new_window_starts_from_zero) {
  ak_fbreaker_init(&br, 0.5, 20, 1000, 5000);
  for (int i = 0; i < 19; i++) ak_fbreaker_record(&br, 5000, false, false);
  /* the next window: the 19 old failures no longer count */
  for (int i = 0; i < 19; i++) ak_fbreaker_record(&br, 6000, false, false);
  cr_assert_eq(ak_fbreaker_state(&br), AK_FB_CLOSED);
  cr_assert_eq(ak_fbreaker_record(&br, 6500, false, false), AK_FB_OPEN);
}

Test(fleet_breaker, one_probe_then_closed_or_open_again) {
  ak_fbreaker_init(&br, 1.0, 2, 10000, 100);
  int64_t now = 50000;
  ak_fbreaker_record(&br, now, false, false);
  cr_assert_eq(ak_fbreaker_record(&br, now, false, false), AK_FB_OPEN);
  cr_assert_eq(ak_fbreaker_ask(&br, now + 99), AK_FB_SKIP);
  cr_assert_eq(ak_fbreaker_ask(&br, now + 100), AK_FB_PROBE);
  cr_assert_eq(ak_fbreaker_state(&br), AK_FB_PROBING);
  cr_assert_eq(ak_fbreaker_ask(&br, now + 100), AK_FB_SKIP, "one probe at a time");
  /* a late outcome of a call sent before the opening changes nothing */
  cr_assert_eq(ak_fbreaker_record(&br, now + 101, true, false), -1);
  cr_assert_eq(ak_fbreaker_state(&br), AK_FB_PROBING);
  /* the probe fails: open for another open_ms */
  cr_assert_eq(ak_fbreaker_record(&br, now + 150, false, true), AK_FB_OPEN);
  cr_assert_eq(ak_fbreaker_ask(&br, now + 249), AK_FB_SKIP);
  cr_assert_eq(ak_fbreaker_ask(&br, now + 250), AK_FB_PROBE);
  cr_assert_eq(ak_fbreaker_record(&br, now + 260, true, true), AK_FB_CLOSED);
  cr_assert_eq(ak_fbreaker_ask(&br, now + 260), AK_FB_CALL);
  /* closing cleared the window: one more failure does not reopen it */
  cr_assert_eq(ak_fbreaker_record(&br, now + 270, false, false), -1);
  cr_assert_eq(ak_fbreaker_state(&br), AK_FB_CLOSED);
}

/* ---- concurrent callers ---- */

#define THREADS 8
#define PER 5000
static _Atomic int opened, probes, closed_by;
static pthread_barrier_t bar;

static void *recorder(void *arg) {
  (void)arg;
  pthread_barrier_wait(&bar);
  for (int i = 0; i < PER; i++)
    if (ak_fbreaker_record(&br, 777000, false, false) == AK_FB_OPEN) atomic_fetch_add(&opened, 1);
  return NULL;
}

static void *asker(void *arg) {
  int64_t now = *(int64_t *)arg;
  pthread_barrier_wait(&bar);
  for (int i = 0; i < PER; i++)
    if (ak_fbreaker_ask(&br, now) == AK_FB_PROBE) {
      atomic_fetch_add(&probes, 1);
      if (ak_fbreaker_record(&br, now, true, true) == AK_FB_CLOSED) atomic_fetch_add(&closed_by, 1);
    }
  return NULL;
}

Test(fleet_breaker, concurrent_callers_open_it_once) {
  ak_fbreaker_init(&br, 0.5, 1000, 1000000, 1000);
  atomic_store(&opened, 0);
  pthread_barrier_init(&bar, NULL, THREADS);
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, recorder, NULL);
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&bar);
  cr_assert_eq(atomic_load(&opened), 1, "opened %d times", atomic_load(&opened));
  cr_assert_eq(ak_fbreaker_state(&br), AK_FB_OPEN);
}

Test(fleet_breaker, concurrent_askers_get_one_probe) {
  ak_fbreaker_init(&br, 1.0, 1, 1000000, 10);
  ak_fbreaker_record(&br, 1000, false, false);
  cr_assert_eq(ak_fbreaker_state(&br), AK_FB_OPEN);
  atomic_store(&probes, 0);
  atomic_store(&closed_by, 0);
  /* every thread asks at a time past open_ms: the first CAS probes, the probe closes
   * it, then everyone calls (no second probe while it stays closed) */
  int64_t now = 1010;
  pthread_barrier_init(&bar, NULL, THREADS);
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, asker, &now);
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&bar);
  cr_assert_eq(atomic_load(&probes), 1, "%d probes", atomic_load(&probes));
  cr_assert_eq(atomic_load(&closed_by), 1);
  cr_assert_eq(ak_fbreaker_state(&br), AK_FB_CLOSED);
}

/* Many threads fail calls and probe at once, for a while: the state machine never
 * sees two probes out at the same time. */
static _Atomic int probing_now, max_probing;
static void *chaos(void *arg) {
  (void)arg;
  pthread_barrier_wait(&bar);
  for (int i = 0; i < PER; i++) {
    int64_t now = 2000000 + i; /* time moves: open_ms 1 lets probes come often */
    ak_fb_ask_t a = ak_fbreaker_ask(&br, now);
    if (a == AK_FB_PROBE) {
      int p = atomic_fetch_add(&probing_now, 1) + 1;
      int m = atomic_load(&max_probing);
      while (p > m && !atomic_compare_exchange_weak(&max_probing, &m, p)) {
      }
      atomic_fetch_sub(&probing_now, 1);
      ak_fbreaker_record(&br, now, i % 2 == 0, true);
    } else if (a == AK_FB_CALL) {
      ak_fbreaker_record(&br, now, false, false);
    }
  }
  return NULL;
}

Test(fleet_breaker, never_two_probes_at_once) {
  ak_fbreaker_init(&br, 0.5, 4, 1000000, 1);
  atomic_store(&probing_now, 0);
  atomic_store(&max_probing, 0);
  pthread_barrier_init(&bar, NULL, THREADS);
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, chaos, NULL);
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&bar);
  cr_assert_eq(atomic_load(&max_probing), 1, "max probes at once: %d", atomic_load(&max_probing));
}
