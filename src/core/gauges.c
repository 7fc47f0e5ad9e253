/* The gauge sampler and the metrics section (gauges.h). The thread sleeps on a condvar so stop is prompt; a
 * round takes no lock another module holds across I/O. */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <string.h>
#include "core/gauges.h"
#include "core/config.h"
#include "core/log.h"

#define MAX_SAMPLERS 16

struct ak_gauges {
  ak_instance_t *inst;
  int64_t interval_ms;
  struct {
    ak_gauges_fn fn;
    void *ctx;
  } samplers[MAX_SAMPLERS];
  size_t nsamplers;
  pthread_t thread;
  bool started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool stop;
  _Atomic uint64_t rounds;
  ak_series_t *m_rss, *m_heap;
};

uint64_t ak_gauges_rss_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long long size = 0, resident = 0;
  int n = fscanf(f, "%llu %llu", &size, &resident);
  fclose(f);
  long page = sysconf(_SC_PAGESIZE);
  return n == 2 && page > 0 ? (uint64_t)resident * (uint64_t)page : 0;
}

uint64_t ak_gauges_heap_bytes(void) {
  /* mallinfo2 walks every arena under its lock: its cost follows the allocator's free
   * lists, not the number of hooks queued */
  struct mallinfo2 mi = mallinfo2();
  return (uint64_t)mi.arena + (uint64_t)mi.hblkhd;
}

ak_gauges_t *ak_gauges_new(ak_instance_t *inst, int64_t interval_ms) {
  ak_gauges_t *g = calloc(1, sizeof *g);
  if (!g) return NULL;
  g->inst = inst;
  /* admin.gauge_interval_ms: the admin section's key (Ankusa's), read from the tree so
   * that the sampler, which every node runs, does not depend on the admin module */
  json_int_t cfg_ms = inst->cfg ? json_integer_value(json_object_get(json_object_get(inst->cfg->effective, "admin"),
                                                                     "gauge_interval_ms"))
                                : 0;
  g->interval_ms = interval_ms > 0 ? interval_ms : cfg_ms > 0 ? cfg_ms : 15000;
  if (g->interval_ms <= 0) g->interval_ms = 15000;
  pthread_mutex_init(&g->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&g->cv, &ca);
  pthread_condattr_destroy(&ca);
  ak_metrics_t *m = inst->metrics;
  g->m_rss = ak_metrics_instance_series(m, inst->name, "ankusa_process_resident_memory_bytes",
                                        "Resident set size of the process (/proc/self/statm).", AK_METRIC_GAUGE);
  g->m_heap = ak_metrics_instance_series(
      m, inst->name, "ankusa_vm_memory_bytes",
      "Bytes the process's C allocator holds from the kernel (glibc mallinfo2: arena + mmap'd chunks, in use "
      "or free in its pools; RocksDB's memtables and block cache included).",
      AK_METRIC_GAUGE);
  return g;
}

int ak_gauges_add(ak_gauges_t *g, ak_gauges_fn fn, void *ctx) {
  if (!g) return 0; /* a node opened without the sampler (unit tests) */
  if (g->started || g->nsamplers >= MAX_SAMPLERS) return -1;
  g->samplers[g->nsamplers].fn = fn;
  g->samplers[g->nsamplers].ctx = ctx;
  g->nsamplers++;
  return 0;
}

void ak_gauges_sample(ak_gauges_t *g) {
  for (size_t i = 0; i < g->nsamplers; i++) g->samplers[i].fn(g->samplers[i].ctx);
  ak_gauge_set(g->m_rss, (double)ak_gauges_rss_bytes());
  ak_gauge_set(g->m_heap, (double)ak_gauges_heap_bytes());
  atomic_fetch_add(&g->rounds, 1);
}

uint64_t ak_gauges_rounds(const ak_gauges_t *g) { return atomic_load((_Atomic uint64_t *)&g->rounds); }

static void *run(void *arg) {
  ak_gauges_t *g = arg;
  pthread_mutex_lock(&g->mu);
  while (!g->stop) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)(g->interval_ms / 1000);
    ts.tv_nsec += (long)(g->interval_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    while (!g->stop && pthread_cond_timedwait(&g->cv, &g->mu, &ts) != ETIMEDOUT) {
    }
    if (g->stop) break;
    pthread_mutex_unlock(&g->mu);
    ak_gauges_sample(g);
    pthread_mutex_lock(&g->mu);
  }
  pthread_mutex_unlock(&g->mu);
  return NULL;
}

int ak_gauges_start(ak_gauges_t *g) {
  ak_gauges_sample(g);
  if (pthread_create(&g->thread, NULL, run, g) != 0) return -1;
  g->started = true;
  return 0;
}

void ak_gauges_stop(ak_gauges_t *g) {
  if (!g || !g->started) return;
  pthread_mutex_lock(&g->mu);
  g->stop = true;
  pthread_cond_signal(&g->cv);
  pthread_mutex_unlock(&g->mu);
  pthread_join(g->thread, NULL);
  g->started = false;
}

void ak_gauges_free(ak_gauges_t *g) {
  if (!g) return;
  ak_gauges_stop(g);
  pthread_cond_destroy(&g->cv);
  pthread_mutex_destroy(&g->mu);
  free(g);
}

/* ------------------------------------------------------------------- the module ---- */

/* The metrics section: how much per-id detail /metrics carries (the seed's metrics.detail). */
typedef struct {
  int detail; /* index in "tenant|source" */
} metrics_cfg_t;

static const ak_opt_t metrics_rows[] = {
  {.key = "detail", .type = AK_OPT_ENUM, .def = "tenant", .enum_vals = "tenant|source",
   .doc = "source: the source_id and tenant_id labels carry the ids; tenant: they carry \"_all\", so the "
          "series count does not grow with sources and tenants (per-tenant detail stays in the top-100 gauges)",
   AK_AT(metrics_cfg_t, detail)},
  {0},
};

static int gauges_open(ak_instance_t *inst, char **err) {
  (void)err;
  const metrics_cfg_t *mc = inst->cfg ? ak_config_of(inst->cfg, &ak_mod_gauges) : NULL;
  ak_metrics_set_detail(inst->metrics, mc && mc->detail == 1);
  inst->gauges = ak_gauges_new(inst, 0);
  return inst->gauges ? 0 : AK_MODULE_FAILED;
}

/* Samplers were added by the modules' opens; the first round runs here. */
static int gauges_start(ak_instance_t *inst, char **err) {
  if (ak_gauges_start(inst->gauges) == 0) return 0;
  ak_log(AK_LOG_ERROR, "gauges", "cannot start the gauge sampler", NULL);
  *err = strdup("cannot start the gauge sampler");
  return AK_MODULE_FAILED;
}

static void gauges_stop(ak_instance_t *inst) { ak_gauges_stop(inst->gauges); }

static void gauges_close(ak_instance_t *inst) {
  ak_gauges_free(inst->gauges);
  inst->gauges = NULL;
}

const ak_module_t ak_mod_gauges = {
  .name = "gauges",
  .section = "metrics",
  .doc = "what /metrics carries",
  .options = metrics_rows,
  .cfg_size = sizeof(metrics_cfg_t),
  .open = gauges_open,
  .start = gauges_start,
  .stop = gauges_stop,
  .close = gauges_close,
};
