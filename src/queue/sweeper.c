/* Sweeper thread. Passes run back to back while a pass finds a full batch, so a backlog
 * (a node that was down longer than a TTL) drains quickly, in batches small enough that
 * each delete is one modest write.
 *
 * Test builds: ANKUSA_TEST_SWEEP_GATE=<dir> holds every pass that found keys between its
 * read and its delete: it writes <dir>/read.<n> (the number of keys read) and waits for
 * <dir>/go.<n> to exist; after the delete it writes <dir>/done.<n>. That lets a test put a
 * refresh of a key exactly between the sweeper's read and its delete. */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "core/instance.h"
#include "core/log.h"
#include "queue/dedupe.h"
#include "queue/sweeper.h"
#include "store/store.h"

#define SWEEP_BATCH 10000

struct ak_sweeper {
  ak_instance_t *inst;
  struct ak_dedupe *dx;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool stopping;
  int64_t interval_ms;
#ifdef AK_TEST_HOOKS
  const char *gate_dir;     /* ANKUSA_TEST_SWEEP_GATE (see the top of this file) */
  unsigned gate_pass;
#endif
};

static bool stopping(ak_sweeper_t *s) {
  pthread_mutex_lock(&s->mu);
  bool st = s->stopping;
  pthread_mutex_unlock(&s->mu);
  return st;
}

#ifdef AK_TEST_HOOKS
static void gate_write(ak_sweeper_t *s, const char *what, size_t n) {
  char p[4096];
  snprintf(p, sizeof p, "%s/%s.%u", s->gate_dir, what, s->gate_pass);
  FILE *f = fopen(p, "w");
  if (f) {
    fprintf(f, "%zu\n", n);
    fclose(f);
  }
}

static void gate(void *ctx, size_t nread) {
  ak_sweeper_t *s = ctx;
  s->gate_pass++;
  gate_write(s, "read", nread);
  char p[4096];
  snprintf(p, sizeof p, "%s/go.%u", s->gate_dir, s->gate_pass);
  while (access(p, F_OK) != 0 && !stopping(s)) usleep(10000);
}
#endif

static void *sweeper_main(void *arg) {
  ak_sweeper_t *s = arg;
  pthread_setname_np(pthread_self(), "ak-sweeper");
  ak_store_thread_init();
  pthread_mutex_lock(&s->mu);
  while (!s->stopping) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += s->interval_ms / 1000;
    ts.tv_nsec += (s->interval_ms % 1000) * 1000000;
    ts.tv_sec += ts.tv_nsec / 1000000000;
    ts.tv_nsec %= 1000000000;
    pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    if (s->stopping) break;
    pthread_mutex_unlock(&s->mu);
    long n;
    do {
#ifdef AK_TEST_HOOKS
      n = ak_dedupe_sweep(s->dx, SWEEP_BATCH, s->gate_dir ? gate : NULL, s);
      if (n > 0 && s->gate_dir) gate_write(s, "done", (size_t)n);
#else
      n = ak_dedupe_sweep(s->dx, SWEEP_BATCH, NULL, s);
#endif
    } while (n >= SWEEP_BATCH && !stopping(s)); /* a full pass: more may be due */
    pthread_mutex_lock(&s->mu);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

ak_sweeper_t *ak_sweeper_start(ak_instance_t *inst, struct ak_dedupe *dx) {
  ak_sweeper_t *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->inst = inst;
  s->dx = dx;
  const ak_dedupe_cfg_t *dc = ak_dedupe_cfg(inst->cfg);
  s->interval_ms = dc && dc->sweep_interval_ms > 0 ? dc->sweep_interval_ms : 10000;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
#ifdef AK_TEST_HOOKS
  s->gate_dir = getenv("ANKUSA_TEST_SWEEP_GATE");
#endif
  if (pthread_create(&s->thread, NULL, sweeper_main, s) != 0) {
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
    return NULL;
  }
  return s;
}

void ak_sweeper_stop(ak_sweeper_t *s) {
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  s->stopping = true;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
}

/* ------------------------------------------------------------------- the module ---- */

/* After the dedupe index (it sweeps what the index holds); the first of the index's
 * users to stop. */
static int sweeper_start(ak_instance_t *inst, char **err) {
  if (!inst->dedupe) return 0;
  inst->sweeper = ak_sweeper_start(inst, inst->dedupe);
  if (inst->sweeper) return 0;
  ak_log(AK_LOG_ERROR, "dedupe", "cannot start the sweeper thread", NULL);
  *err = strdup("cannot start the dedupe sweeper thread");
  return AK_MODULE_FAILED;
}

static void sweeper_stop(ak_instance_t *inst) {
  ak_sweeper_stop(inst->sweeper);
  inst->sweeper = NULL;
}

const ak_module_t ak_mod_sweeper = {
  .name = "sweeper",
  .roles = AK_ROLES_STORE,
  .start = sweeper_start,
  .stop = sweeper_stop,
};
