/* Sink plug-in interface: one file per sink, registered by one row in sinks/registry.c
 * (the only list of sink type names). Owns the vtable shape and the lookup. A sink never
 * touches the store: dispatch hands it an envelope and takes back an outcome. */
#ifndef AK_SINKS_SINK_H
#define AK_SINKS_SINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include "core/module.h"
#include "core/options.h"

struct ak_envelope;
struct ak_egress;
struct ak_httpc;
struct ak_source_cfg;

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

/* What a sink instance is built with besides its options. */
typedef struct ak_sink_ctx {
  const char *source_id;
  const struct ak_egress *egress;  /* the node's egress guard (egress.*), borrowed; it outlives
                                      every sink. NULL = the default guard. */
  struct ak_httpc *httpc;          /* the node's HTTP client (net/httpc.h), borrowed; it outlives
                                      every sink. NULL = a sink that needs one makes its own. */
  bool trusted;                    /* the operator wrote this sink (a config-file source without
                                      egress.guard_static_sources): no egress guard. false (the
                                      default of a sink made by hand) = guarded. */
} ak_sink_ctx_t;

/* One delivery attempt. Everything pointed to stays valid until deliver() returns only:
 * a sink that works asynchronously copies what it needs. */
typedef struct ak_sink_attempt {
  const struct ak_envelope *env;       /* the stored hook (raw body, headers, ids) */
  uint32_t attempt;                    /* 1-based */
  const char *replay_id;               /* UUID text when a replay job moved the row, else NULL */
  const char *idempotency_key;         /* <tenant>:<source>:<dedupe_key>, or the hook id */
  const char *dedupe_key;              /* NULL unless the hook carries one */
  const struct ak_source_cfg *source;  /* current config of the hook's source: forward_headers */
  const char *claim_ref;               /* urn:ankusa:claim:v1:<tenant>:<claim_id> when the hook was
                                          checked in (its body is above a threshold of one of its
                                          source's sinks), else NULL */
  const char *body_sha256;             /* lowercase hex SHA-256 of the body when known, else NULL */
} ak_sink_attempt_t;

typedef struct ak_sink_vtable {
  /* YAML `type`, its rows (keys besides `type`), its config rules (check: what create
   * would refuse, reported by check-config), and unsupported: known to Ankusa, not built
   * here yet */
  ak_plugin_t plugin;
  bool durable;              /* an ok means the destination keeps it (wal.type none) */
  /* Build an instance from validated opts. Returns NULL and fills err on failure. */
  void *(*create)(const json_t *opts, const ak_sink_ctx_t *sctx, char *err, size_t errlen);
  /* Deliver asynchronously; `done` is called exactly once, possibly from another thread,
   * possibly before deliver() returns. */
  void (*deliver)(void *self, const ak_sink_attempt_t *att, void *ctx, ak_sink_done_fn done);
  void (*destroy)(void *self);
  /* The body size above which this instance sends a claim ref (its inline_max_bytes), or
   * -1 for never. NULL = never (http, log). The dispatcher checks a hook in before any of
   * its sinks runs when its body is above the threshold of at least one of them. */
  int64_t (*inline_max)(const void *self);
} ak_sink_vtable_t;

/* The registry: every sink type Ankusa knows, supported or not (kind name "sink"). */
extern const ak_plugin_kind_t ak_sink_kind;
const ak_sink_vtable_t *ak_sinks_find(const char *type);

struct ak_instance;
struct ak_source;

/* The instance of entry j of a source version's sinks, as every caller of sinks builds
 * it (the dispatcher, the direct publisher of wal.type none): its type's vtable into *vt,
 * made from the entry's own keys (the kind's common keys are the caller's) with the
 * node's HTTP client, and the egress guard unless the operator wrote it (sinks/egress.h).
 * NULL with err naming sources.<id>.sinks[j]. */
void *ak_sink_instance_new(const struct ak_instance *inst, const struct ak_source *src, size_t j,
                           const ak_sink_vtable_t **vt, char *err, size_t errlen);

/* The keys an attempt at env carries, the same to every sink and on every attempt:
 * dedupe_key (a copy) and idempotency_key <tenant>:<source>:<dedupe_key>, else the hook
 * id (formatted into id, which must outlive att). Frees nothing it did not make. */
void ak_sink_attempt_keys(ak_sink_attempt_t *att, const struct ak_envelope *env, char id[37]);
void ak_sink_attempt_keys_free(ak_sink_attempt_t *att, const char *id);

#endif
