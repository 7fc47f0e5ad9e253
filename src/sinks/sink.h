/* Sink plug-in interface: one file per sink, registered in sinks/registry.c.
 * Owns the vtable shape and the lookup table. A sink never touches the store:
 * dispatch hands it an envelope and takes back an outcome. */
#ifndef AK_SINKS_SINK_H
#define AK_SINKS_SINK_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>
#include "core/options.h"

struct ak_envelope;

typedef enum {
  AK_SINK_OK = 0,
  AK_SINK_RETRY = 1,      /* transient: try again later */
  AK_SINK_PERMANENT = 2,  /* never going to work: dead-letter */
} ak_sink_result_t;

typedef struct ak_sink_outcome {
  ak_sink_result_t result;
  int64_t retry_after_ms;  /* >0 when the sink asked for a delay */
  char reason[128];        /* short, secret-free */
} ak_sink_outcome_t;

typedef void (*ak_sink_done_fn)(void *ctx, const ak_sink_outcome_t *outcome);

typedef struct ak_sink_vtable {
  const char *type;          /* YAML `type` */
  bool durable;              /* an ok means the destination keeps it (wal.type none) */
  bool supported;            /* false: known to Ankusa, not built here yet */
  const ak_opt_t *options;   /* keys besides `type`; terminated by key == NULL */
  /* Build an instance from validated opts. Returns NULL and fills err on failure. */
  void *(*create)(const json_t *opts, const char *source_id, char *err, size_t errlen);
  /* Deliver asynchronously; `done` is called exactly once, possibly from another thread. */
  void (*deliver)(void *self, const struct ak_envelope *env, void *ctx, ak_sink_done_fn done);
  void (*destroy)(void *self);
} ak_sink_vtable_t;

/* The registry: every sink type Ankusa knows, supported or not. */
const ak_sink_vtable_t *ak_sinks_find(const char *type);
/* "log, http, kafka, ..." for error messages; static string. */
const char *ak_sinks_type_list(void);

#endif
