/* The node: one running ankusa, assembled by walking the module table (src/modules.c)
 * in order. Owns the instance (core/instance.h), the order of the lifecycle (open all,
 * start all, mark draining, stop all in reverse, close all in reverse) and the `node`
 * section (roles, data_dir, min_free_bytes). The one assembly used by main.c, the unit
 * tests and the bench programs. Never knows a module by name: it only walks the table. */
#ifndef AK_CORE_NODE_H
#define AK_CORE_NODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/config.h"
#include "core/instance.h"
#include "core/module.h"

/* The `node` section. */
typedef struct ak_node_cfg {
  ak_strlist_t role_names;     /* node.roles as written */
  const char *data_dir;
  int64_t min_free_bytes;      /* commits are refused below this much free disk */
  unsigned roles;              /* AK_ROLE_* bits of role_names: the effective roles (wal.type none
                                  drops dispatch and storage) */
} ak_node_cfg_t;

extern const ak_module_t ak_mod_node;

/* The node section of a loaded config (never NULL for a config of a schema with it). */
const ak_node_cfg_t *ak_node_cfg(const ak_config_t *cfg);
/* "edge,dispatch,storage" style text of roles, into buf. */
const char *ak_node_roles_text(unsigned roles, char *buf, size_t len);

typedef struct ak_node {
  ak_instance_t inst;
  size_t nopen;                /* modules of the schema opened (a prefix of the table) */
  bool *opened;                /* per module: open ran and succeeded (skipped ones are false) */
  bool *started;
  bool stopped;
} ak_node_t;

typedef struct ak_node_opts {
  /* Open only the modules whose names are listed (NULL-terminated), or, when NULL,
   * every module whose roles match node.roles. Tests open a part of a node this way. */
  const char *const *only;
  /* Open none of these (NULL-terminated), e.g. the listeners in a unit test. */
  const char *const *skip;
} ak_node_opts_t;

/* Builds the instance (metrics, ids) and opens the modules in table order. On failure
 * every module opened so far is closed again and *err says which failed and why:
 * AK_MODULE_FAILED or AK_MODULE_BAD_CONFIG. cfg is borrowed and must outlive the node. */
int ak_node_open(ak_node_t *n, ak_config_t *cfg, const ak_node_opts_t *opts, char **err);
/* Starts the opened modules in table order. On failure the node stays open (stop and
 * close it). */
int ak_node_start(ak_node_t *n, char **err);
/* Marks the node draining (/ready and new requests answer 503), then stops every
 * started module in reverse table order: the writer answers what is queued before the
 * listeners wait for their last answers. Idempotent. */
void ak_node_stop(ak_node_t *n);
/* SIGTERM's first step (before ak_node_stop): marks the node draining and runs every
 * started module's drain hook in reverse table order (the edge serves on for
 * listener.drain_delay_ms, then closes its listeners and waits for its requests). */
void ak_node_drain(ak_node_t *n);
/* SIGHUP: every started module's reload hook, in table order. */
void ak_node_reload(ak_node_t *n);
/* Stops if needed, then closes every opened module in reverse order and frees the
 * instance's own parts. */
void ak_node_close(ak_node_t *n);

/* The module of this name in the node's schema, or NULL. */
const ak_module_t *ak_node_module(const ak_node_t *n, const char *name);

#endif
