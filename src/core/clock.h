/* Clocks: wall time in ms for received_at and ids, monotonic ns for deadlines and
 * latency. Never caches. */
#ifndef AK_CORE_CLOCK_H
#define AK_CORE_CLOCK_H
#include <stdint.h>
#include <time.h>

static inline int64_t ak_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline int64_t ak_mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
#endif
