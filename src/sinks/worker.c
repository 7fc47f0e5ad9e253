/* The sink worker (see worker.h): one thread per sink type that submits queued jobs off
 * the dispatcher thread. Owns the queue, the thread's start and stop, the instance count
 * and the removal of a leaving instance's jobs. Never looks inside a job beyond its
 * header, never answers a delivery but through the sink's fail, never logs, and never
 * calls a sink function while holding mu. */
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include "sinks/worker.h"

static void *worker_main(void *arg) {
  ak_sink_worker_t *w = arg;
  pthread_mutex_lock(&w->mu);
  for (;;) {
    while (!w->head && !w->stopping) pthread_cond_wait(&w->cv, &w->mu);
    if (!w->head) break; /* stopping, and nothing left: the last instance is gone */
    ak_sink_job_t *j = w->head;
    w->head = j->next;
    if (!w->head) w->tail = NULL;
    w->queued--;
    w->busy = j->owner;
    pthread_mutex_unlock(&w->mu);
    w->submit(j);
    w->free_job(j);
    pthread_mutex_lock(&w->mu);
    w->busy = NULL;
    pthread_cond_broadcast(&w->cv);
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

void ak_sink_worker_ref(ak_sink_worker_t *w) {
  pthread_mutex_lock(&w->life);
  pthread_mutex_lock(&w->mu);
  w->refs++;
  pthread_mutex_unlock(&w->mu);
  pthread_mutex_unlock(&w->life);
}

void ak_sink_worker_enqueue(ak_sink_worker_t *w, ak_sink_job_t *j) {
  pthread_mutex_lock(&w->mu);
  const char *why = NULL;
  if (w->queued >= w->max_queued) {
    why = "busy";
  } else if (!w->running) {
    if (pthread_create(&w->thread, NULL, worker_main, w) != 0) why = "no worker thread";
    else w->running = true;
  }
  if (!why) {
    j->next = NULL;
    if (w->tail) w->tail->next = j;
    else w->head = j;
    w->tail = j;
    w->queued++;
    pthread_cond_broadcast(&w->cv);
  }
  pthread_mutex_unlock(&w->mu);
  if (why) {
    w->fail(j, why);
    w->free_job(j);
  }
}

void ak_sink_worker_unref(ak_sink_worker_t *w, const void *owner) {
  pthread_mutex_lock(&w->life);
  /* this instance's queued jobs leave the queue; the one being submitted finishes first */
  ak_sink_job_t *mine = NULL, **tail = &mine;
  pthread_mutex_lock(&w->mu);
  for (ak_sink_job_t **pp = &w->head; *pp;) {
    ak_sink_job_t *j = *pp;
    if (j->owner == owner) {
      *pp = j->next;
      w->queued--;
      j->next = NULL;
      *tail = j;
      tail = &j->next;
    } else {
      pp = &j->next;
    }
  }
  w->tail = NULL;
  for (ak_sink_job_t *j = w->head; j; j = j->next) w->tail = j;
  while (w->busy == owner) pthread_cond_wait(&w->cv, &w->mu);
  bool stop = --w->refs == 0 && w->running;
  if (stop) {
    w->stopping = true;
    pthread_cond_broadcast(&w->cv);
  }
  pthread_mutex_unlock(&w->mu);
  if (stop) {
    pthread_join(w->thread, NULL);
    pthread_mutex_lock(&w->mu);
    w->running = w->stopping = false;
    pthread_mutex_unlock(&w->mu);
    if (w->stopped) w->stopped();
  }
  pthread_mutex_unlock(&w->life);
  while (mine) {
    ak_sink_job_t *j = mine;
    mine = j->next;
    w->fail(j, "sink stopped");
    w->free_job(j);
  }
}
