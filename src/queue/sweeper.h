/* The dedupe sweeper: one thread that removes expired dedupe keys from the store every
 * dedupe.sweep_interval_ms (queue/dedupe.c does the work). It exists so that expiry never
 * runs inside the writer, whose commits it would slow. Never deletes a key it did not
 * read in the same pass. */
#ifndef AK_QUEUE_SWEEPER_H
#define AK_QUEUE_SWEEPER_H

#include "core/module.h"

struct ak_instance;
struct ak_dedupe;

typedef struct ak_sweeper ak_sweeper_t;

/* Start the thread; NULL when it cannot be started. */
ak_sweeper_t *ak_sweeper_start(struct ak_instance *inst, struct ak_dedupe *dx);
/* Stop the thread (a pass in progress finishes) and free. NULL is fine. */
void ak_sweeper_stop(ak_sweeper_t *s);

/* The sweeper's lifecycle (inst->sweeper): started after the dedupe index is open. */
extern const ak_module_t ak_mod_sweeper;

#endif
