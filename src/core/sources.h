/* The source table: every source the node serves (the config file's, and with
 * source_store.type persistent the admin API's), each as an immutable, reference-counted
 * version that owns its compiled state: the typed config, the verifier, and the state
 * other modules attach to it (the edge's buckets, the dispatcher's sink instances).
 * Owns the name -> version map, the versions' lifetimes and the source gauges.
 * Never touches the store (admin/sources_api.c persists API sources) and never frees a
 * version someone still holds.
 *
 * Lifetimes: a reader on any thread (edge, writer, dispatcher, admin) takes a reference
 * with ak_sources_get() (a read lock held for one lookup) and releases it when done; a
 * writer builds the new version completely before it is published, swaps it in under the
 * write lock and drops the table's reference to the old one. Whoever releases a version
 * last frees it, with everything attached. Version objects never change after they are
 * published, so a holder reads them without locks. */
#ifndef AK_CORE_SOURCES_H
#define AK_CORE_SOURCES_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include "core/config.h"
#include "core/sources.h"
#include "core/metrics.h"
#include "core/module.h"

struct ak_verifier;

/* ------------------------------------------------------ the `sources` section ---- */

typedef enum { AK_OVF_REJECT = 0, AK_OVF_QUARANTINE = 1, AK_OVF_ACCEPT_FLAG = 2 } ak_on_verify_failure_t;

/* Where a source's provider event key comes from (sources.<id>.dedupe). */
typedef enum { AK_DEDUPE_NONE = 0, AK_DEDUPE_HEADER = 1, AK_DEDUPE_JSON = 2 } ak_dedupe_from_t;

#define AK_SOURCE_MAX_SINKS 32 /* sinks of one source, at most: the store's group marker holds no more */

typedef struct ak_sink_cfg {
  char *type;     /* e.g. "log" */
  json_t *opts;   /* the validated mapping with defaults filled in (owned reference) */
} ak_sink_cfg_t;

typedef struct ak_source_cfg {
  char *id;                    /* map key: the catch-URL segment */
  char *tenant;                /* default "default" */
  ak_on_verify_failure_t on_verify_failure;
  char *verify_type;           /* "none" when verify is absent or {} */
  json_t *verify;              /* validated verify mapping, or NULL */
  bool trust_url_tenant;
  /* dedupe: the key is the header dedupe_field (lowercased) or the JSON dot path
   * dedupe_field of the body; AK_DEDUPE_NONE = every hook is new */
  ak_dedupe_from_t dedupe_from;
  char *dedupe_field;
  int64_t dedupe_ttl_ms;
  /* forward_headers: absent -> forward_default true (every provider header except the
   * deny set); a list -> only these lowercased names (still minus the deny set); [] -> none */
  bool forward_default;
  char **forward_headers;
  size_t nforward_headers;
  ak_sink_cfg_t *sinks;
  size_t nsinks;
} ak_source_cfg_t;

/* The config file's sources, typed, sorted by id. */
typedef struct ak_sources_cfg {
  const json_t *tree;          /* sources: the checked mapping (bound) */
  ak_source_cfg_t *v;
  size_t n;
} ak_sources_cfg_t;

/* The `sources` section and the table's lifecycle (built at open, freed last). */
extern const ak_module_t ak_mod_sources;

const ak_sources_cfg_t *ak_sources_cfg(const ak_config_t *cfg);
/* The config file's source of this id, or NULL. */
const ak_source_cfg_t *ak_source_cfg_find(const ak_config_t *cfg, const char *id);

/* One source spec, checked by the same code as a source of the config file: the schema
 * of sources.<id>, then its rules across keys (forward_headers, dedupe, its sinks' and
 * verifier's own rules, admission_bytes, the trust rule under tenant_path). spec is the
 * mapping as JSON, taken literally (no ${VAR}). 0 with *checked (the effective spec,
 * defaults filled in: new reference); -1 with *err (malloc'd, one line per problem, each
 * naming sources.<id>.<key>). With AK_SOURCE_CHECK_STORED (a source read back from the
 * store) the trust rule is a *warning (malloc'd) instead of an error; warning may be NULL. */
#define AK_SOURCE_CHECK_STORED 1u
int ak_sources_check_spec(const ak_config_t *cfg, const char *id, const json_t *spec, unsigned flags,
                          json_t **checked, char **warning, char **err);
/* The typed source of a checked spec. 0, or -1 (out of memory; *out cleared). */
int ak_source_cfg_build(const char *id, const json_t *checked, ak_source_cfg_t *out);
void ak_source_cfg_clear(ak_source_cfg_t *s);
/* The option rows of one source (redaction: ak_config_redact_tree(cfg, spec, these)). */
const ak_opt_t *ak_sources_options(void);

typedef enum {
  AK_SOURCE_EXT_EDGE = 0,      /* edge/edge.c: pen bucket, admission byte bucket, weak-hash series */
  AK_SOURCE_EXT_DISPATCH = 1,  /* dispatch/dispatch.c: the sink instances */
  AK_SOURCE_EXT_PUBLISH = 2,   /* edge/publish.c: the sink instances of wal.type none */
  AK_SOURCE_EXT_COUNT
} ak_source_ext_t;

typedef enum { AK_SOURCE_CONFIG = 0, AK_SOURCE_API = 1 } ak_source_origin_t;

typedef struct ak_source_ident ak_source_ident_t;

typedef struct ak_source {
  ak_source_cfg_t cfg;          /* cfg.id is the name: the catch-URL segment, unique on the node */
  json_t *spec;                 /* the checked spec, defaults filled in (unredacted) */
  struct ak_verifier *verifier; /* NULL for verify type none */
  ak_source_origin_t origin;
  uint64_t uid;                 /* identity: an update keeps it, a re-created name gets a new one */
  /* When this identity was created (unix ms; 0 for the config file's sources). A hook
   * received before it belongs to an older source of the same name (deleted since): the
   * dispatcher and a quarantine release treat that source as gone. */
  int64_t born_ms;
  int64_t updated_ms;
  uint64_t revision;            /* 1 when created, +1 per update; 0 for config sources */
  _Atomic int64_t *inflight;    /* the identity's delivery rows the dispatcher holds claimed */
  void *ext[AK_SOURCE_EXT_COUNT];
  /* private */
  _Atomic unsigned refs;
  struct ak_sources *table;
  ak_source_ident_t *ident;
  void (*ext_free[AK_SOURCE_EXT_COUNT])(void *state);
} ak_source_t;

typedef struct ak_sources ak_sources_t;

/* The table with every source of cfg (origin config), verifiers built (through the
 * schema's "verify" plug-in kind). NULL with err. */
ak_sources_t *ak_sources_new(const ak_config_t *cfg, char *err, size_t errlen);
/* Drops the table's references; versions still held elsewhere are freed by their last
 * holder. Extension free functions may run here, after the modules that built them. */
void ak_sources_free(ak_sources_t *t);
/* The source gauges (ankusa_sources, ankusa_sources_api, ankusa_sources_without_dedupe),
 * kept current by every change. */
void ak_sources_set_metrics(ak_sources_t *t, ak_metrics_t *m, const char *instance);

/* Extensions: build(ctx, s, err) makes a module's state for a version (NULL with err set
 * refuses the version; NULL with err empty attaches nothing); free(state) must work
 * after the module itself is gone. attach builds it for every version in the table and
 * for every version made later; detach stops building it (states already attached are
 * freed with their versions). Both only while no other thread uses the table (boot,
 * shutdown). */
typedef void *(*ak_source_ext_build_fn)(void *ctx, const ak_source_t *s, char *err, size_t errlen);
typedef void (*ak_source_ext_free_fn)(void *state);
int ak_sources_attach(ak_sources_t *t, ak_source_ext_t kind, ak_source_ext_build_fn build,
                      ak_source_ext_free_fn free_fn, void *ctx, char *err, size_t errlen);
void ak_sources_detach(ak_sources_t *t, ak_source_ext_t kind);

/* ------------------------------------------------------------------ readers ---- */

/* The current version of a name, referenced (release it), or NULL. Any thread. */
ak_source_t *ak_sources_get(ak_sources_t *t, const char *name, size_t len);
ak_source_t *ak_source_ref(ak_source_t *s);
void ak_source_release(ak_source_t *s);
/* Every current version (of one tenant when tenant is not NULL), sorted by name,
 * referenced; release with ak_sources_list_free. */
size_t ak_sources_list(ak_sources_t *t, const char *tenant, ak_source_t ***out);
void ak_sources_list_free(ak_source_t **v, size_t n);
size_t ak_sources_count(ak_sources_t *t);
/* A shared source store (source_store.type redis) not read yet: a name the table lacks
 * may exist, so the edge answers 503 store_unavailable for it, not 404, and /ready says so.
 * Set by the store's owner (admin/sources_api.c); any thread reads it. */
void ak_sources_set_incomplete(ak_sources_t *t, bool incomplete);
bool ak_sources_incomplete(ak_sources_t *t);

/* ------------------------------------------------------------------ writers ---- */

/* Writers (the admin API, boot) hold this across check, store and publish, so two
 * changes of one name never interleave. Readers never take it. */
void ak_sources_write_lock(ak_sources_t *t);
void ak_sources_write_unlock(ak_sources_t *t);

typedef struct ak_source_meta {
  ak_source_origin_t origin;
  const ak_source_t *prev;      /* an update: the identity it keeps; NULL: a new identity */
  int64_t born_ms;              /* a new identity's creation time */
  int64_t updated_ms;
  uint64_t revision;
} ak_source_meta_t;

/* A complete, unpublished version from a checked spec (ak_sources_check_spec): typed
 * config, verifier and every attached extension. NULL with err naming sources.<id>. The
 * caller holds its one reference. */
ak_source_t *ak_sources_make(ak_sources_t *t, const char *id, const json_t *checked, const ak_source_meta_t *m,
                             char *err, size_t errlen);
/* Room for one more name, so that ak_sources_put cannot fail after the change is
 * stored. 0, or -1 (out of memory). */
int ak_sources_reserve(ak_sources_t *t);
/* Publish s under its name (taking the caller's reference); the version it replaces is
 * returned (the caller releases it), or NULL for a new name. Needs ak_sources_reserve
 * first for a new name. */
ak_source_t *ak_sources_put(ak_sources_t *t, ak_source_t *s);
/* Unpublish a name; the removed version is returned (the caller releases it) or NULL. */
ak_source_t *ak_sources_remove(ak_sources_t *t, const char *name);

#endif
