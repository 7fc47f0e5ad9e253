/* The sink worker: one thread per sink type (not per instance) that takes the jobs the
 * type's deliver() queued and runs the type's submit function on them, off the dispatcher
 * thread, because getting credentials or a token may wait on the network (the sqs and
 * google_pubsub sinks). Owns the bounded FIFO queue (beyond max_queued a job is answered
 * "busy"), the thread's lazy start (with the first job after the first instance joins)
 * and its stop and join (with the last instance), the instance count, and destroy's part:
 * an instance's queued jobs leave the queue and are answered "sink stopped", and leaving
 * waits while the worker is submitting one of that instance's jobs.
 *
 * Never looks inside a job beyond its header, never answers a delivery itself (the sink's
 * fail function does), never retries, never logs, never names its thread, and never calls
 * a sink function with its own mutex held. Every job it is given is, exactly once, either
 * submitted or failed, and then freed by the sink's free_job. */
#ifndef AK_SINKS_WORKER_H
#define AK_SINKS_WORKER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

/* The header of a queued job: embedded first in each sink's job struct. */
typedef struct ak_sink_job {
  struct ak_sink_job *next; /* the worker's */
  void *owner;              /* the sink instance the job belongs to */
} ak_sink_job_t;

typedef struct ak_sink_worker {
  /* the sink's, set by AK_SINK_WORKER_INIT */
  void (*submit)(ak_sink_job_t *j);               /* worker thread; answers j (now or later), never frees it */
  void (*fail)(ak_sink_job_t *j, const char *why); /* answers j "why" (a retry), never frees it */
  void (*free_job)(ak_sink_job_t *j);
  void (*stopped)(void); /* NULL, or after the last instance's leave joined the thread (create/destroy serialised) */
  size_t max_queued;     /* jobs waiting, all instances */
  /* the worker's */
  pthread_mutex_t mu;
  pthread_cond_t cv;    /* a job arrived, stop was asked, or busy changed */
  pthread_mutex_t life; /* create and destroy: the instance count and the thread's start/stop */
  pthread_t thread;
  bool running, stopping;
  size_t refs;          /* live instances */
  ak_sink_job_t *head, *tail;
  size_t queued;
  const void *busy;     /* the instance whose job the worker is submitting, or NULL */
} ak_sink_worker_t;

/* A static ak_sink_worker_t: static ak_sink_worker_t W = AK_SINK_WORKER_INIT(submit, fail, free_job, NULL, 1024); */
#define AK_SINK_WORKER_INIT(submit_, fail_, free_job_, stopped_, max_queued_)                                  \
  {                                                                                                           \
    .submit = (submit_), .fail = (fail_), .free_job = (free_job_), .stopped = (stopped_),                     \
    .max_queued = (max_queued_), .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER,             \
    .life = PTHREAD_MUTEX_INITIALIZER                                                                         \
  }

/* create: an instance joins (after it is fully built; a failed create never joins). */
void ak_sink_worker_ref(ak_sink_worker_t *w);

/* deliver: queues j (taking it; j->owner set), starting the thread if it is not running;
 * or, when the queue is full ("busy") or the thread cannot start ("no worker thread"),
 * answers it at once through fail and frees it. Any thread. */
void ak_sink_worker_enqueue(ak_sink_worker_t *w, ak_sink_job_t *j);

/* destroy: owner leaves. Its queued jobs leave the queue; waits while the worker submits
 * one of its jobs; the last instance stops and joins the thread (then stopped() runs);
 * then the jobs taken are answered "sink stopped" through fail and freed. On return no
 * job of owner is queued or being submitted (requests already with the HTTP client are
 * the sink's to cancel). */
void ak_sink_worker_unref(ak_sink_worker_t *w, const void *owner);

#endif
