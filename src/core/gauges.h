/* The gauge sampler: one thread that every admin.gauge_interval_ms runs the samplers
 * other modules register (writer queue and disk, quarantine pen) and samples the
 * process's own memory and the configured sources. Owns that thread and the gauges it
 * sets itself. Never runs a sampler whose cost grows with the backlog: samplers read
 * counters and atomics, they never scan the store. */
#ifndef AK_CORE_GAUGES_H
#define AK_CORE_GAUGES_H

#include <stdint.h>
#include "core/instance.h"
#include "core/module.h"

typedef struct ak_gauges ak_gauges_t;
typedef void (*ak_gauges_fn)(void *ctx);

/* The sampler's lifecycle (inst->gauges): it also owns the metrics section (metrics.detail,
 * set on the registry at open, before any module makes a per-id series). Opened early so other modules' opens can add
 * their samplers, started after them; it stops (joins) before any sampled module is freed. */
extern const ak_module_t ak_mod_gauges;

/* interval_ms <= 0 means admin.gauge_interval_ms of inst->cfg. */
ak_gauges_t *ak_gauges_new(ak_instance_t *inst, int64_t interval_ms);
/* Before start. 0, or -1 when the sampler table is full. g NULL (no sampler): 0. */
int ak_gauges_add(ak_gauges_t *g, ak_gauges_fn fn, void *ctx);
/* Samples once at once (so the first scrape has values), then starts the thread. */
int ak_gauges_start(ak_gauges_t *g);
/* One round of every sampler, on the caller's thread. */
void ak_gauges_sample(ak_gauges_t *g);
uint64_t ak_gauges_rounds(const ak_gauges_t *g);
/* Stops and joins the thread; the samplers' owners may be freed after this. */
void ak_gauges_stop(ak_gauges_t *g);
void ak_gauges_free(ak_gauges_t *g);

/* The process's resident set (/proc/self/statm) in bytes; 0 when unreadable. */
uint64_t ak_gauges_rss_bytes(void);
/* Bytes the C allocator holds from the kernel (every malloc arena plus mmap'd chunks). */
uint64_t ak_gauges_heap_bytes(void);

#endif
