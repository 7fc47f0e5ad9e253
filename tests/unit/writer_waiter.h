/* Test support shared by the unit tests that submit to the writer: a counter of answered
 * requests (ak_write_req_t.done = on_done, .ctx = the waiter) and a wait for n answers.
 * Header-only: every tests/unit/test_*.c is its own executable. */
#ifndef AK_TEST_WRITER_WAITER_H
#define AK_TEST_WRITER_WAITER_H

#include <pthread.h>
#include "queue/writer.h"

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done;
} waiter_t;

static inline void on_done(ak_write_req_t *r, void *ctx) {
  (void)r;
  waiter_t *w = ctx;
  pthread_mutex_lock(&w->mu);
  w->done++;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

static inline void wait_for(waiter_t *w, int n) {
  pthread_mutex_lock(&w->mu);
  while (w->done < n) pthread_cond_wait(&w->cv, &w->mu);
  pthread_mutex_unlock(&w->mu);
}

#endif
