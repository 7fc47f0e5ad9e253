/* Module and plug-in descriptors: how a part of the node declares itself to the config
 * engine (core/config.c) and to the lifecycle (core/node.c). Owns the shapes only; the
 * one list of modules is src/modules.c, the lists of plug-ins are each kind's registry
 * (sinks/registry.c, verify/registry.c). Never holds state.
 *
 * A module declares next to its code: the config section it owns (option rows bound with
 * offsetof into its own typed struct), a check hook for rules across keys, the roles it
 * runs in and open/start/stop/close. A plug-in (a sink type, a verifier type) declares
 * its option rows and a check hook; its kind tells the engine how to find it by `type`. */
#ifndef AK_CORE_MODULE_H
#define AK_CORE_MODULE_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>
#include "core/options.h"

struct ak_instance;
typedef struct ak_check ak_check_t; /* the engine's error list (core/config.h) */

/* Node roles (node.roles). */
enum {
  AK_ROLE_EDGE = 1u << 0,
  AK_ROLE_DISPATCH = 1u << 1,
  AK_ROLE_STORAGE = 1u << 2,
  AK_ROLE_CLAIM_CHECK = 1u << 3,
  /* the roles that keep the node's store: a module with them runs on every node but a
   * claim_check-only one, which never opens the store (docs/claim-check.md) */
  AK_ROLES_STORE = AK_ROLE_EDGE | AK_ROLE_DISPATCH | AK_ROLE_STORAGE,
};

/* What an open or start hook's failure means for the process (main.c: exit code). */
enum { AK_MODULE_FAILED = -1, AK_MODULE_BAD_CONFIG = -2 };

typedef struct ak_module {
  const char *name;             /* for logs and errors */

  /* ---- configuration (all optional) ---- */
  const char *section;          /* the root key it owns, NULL = none */
  const char *doc;              /* one line on the section */
  unsigned section_flags;       /* AK_OPTF_UNSUPPORTED: a known Ankusa section refused unless
                                   empty; AK_OPTF_NULLABLE: absent or null is off (left out) */
  bool section_map_of;          /* the section maps ids to entries of .options (sources); its
                                   rows are not bound: finish builds the typed form */
  const ak_opt_t *options;      /* the section's rows; rows with AK_AT() bind into the typed struct */
  size_t cfg_size;              /* size of the typed struct (0 = none) */
  /* Rules across keys, on the checked section (partial when a key failed: look before
   * you read). May fill derived values into the tree (a null that means "a share of"). */
  void (*check)(ak_check_t *c, json_t *section, json_t *root);
  /* After binding: derived fields of the typed struct, files named by the config. 0, or
   * -1 with *err (malloc'd, naming the dotted key). release frees what finish made. */
  int (*finish)(void *typed, const json_t *section, const json_t *root, char **err);
  void (*release)(void *typed);

  /* ---- lifecycle (all optional) ---- */
  unsigned roles;               /* AK_ROLE_* it runs in; 0 = every node */
  /* open builds (no threads, no listeners); start runs; stop drains and stops, in reverse
   * table order after the node is marked draining; close frees, in reverse. open/start:
   * 0, AK_MODULE_FAILED or AK_MODULE_BAD_CONFIG with *err (malloc'd, one line). A module
   * whose open failed is not closed: open cleans up after itself. */
  int (*open)(struct ak_instance *inst, char **err);
  int (*start)(struct ak_instance *inst, char **err);
  /* SIGTERM, in reverse table order once the node is marked draining and before any stop:
   * take no new work and wait (bounded) for what is in flight; the modules below still run. */
  void (*drain)(struct ak_instance *inst);
  /* SIGHUP: re-read what can change without a restart (a TLS certificate); keep the old on
   * a bad new one (logged). */
  void (*reload)(struct ak_instance *inst);
  void (*stop)(struct ak_instance *inst);
  void (*close)(struct ak_instance *inst);
} ak_module_t;

/* One plug-in type (embedded as the first member of a sink or verifier vtable). */
typedef struct ak_plugin {
  const char *type;             /* the YAML `type` */
  const char *doc;              /* one line */
  bool unsupported;             /* known to Ankusa, refused by this build with "not supported yet" */
  const ak_opt_t *options;      /* keys besides `type` */
  /* Rules across this type's keys, on its checked mapping (`type` included). path names
   * it ("sources.a.sinks[0]"); root is the whole effective tree (read only). */
  void (*check)(ak_check_t *c, const char *path, json_t *spec, const json_t *root);
} ak_plugin_t;

typedef struct ak_plugin_kind {
  const char *name;             /* what rows name in .kind: "sink", "verify" */
  const ak_plugin_t *const *all; /* every type, in the order of "expected one of" */
  size_t count;
  const char *none_type;        /* absent, null or {} means {type: none_type}; NULL = required */
  const ak_opt_t *common;       /* keys every type of the kind takes besides its own (NULL: none) */
  /* Rules for every type of the kind, after the type's own check (a verifier is built
   * once, so an undecodable secret fails the load). Optional. */
  void (*check)(ak_check_t *c, const char *path, json_t *spec, const json_t *root);
  /* An instance of a checked mapping, for the layers below the kind (core/sources.c
   * builds each source's verifier this way). Optional. */
  void *(*create)(const json_t *spec, char *err, size_t errlen);
  void (*destroy)(void *self);
} ak_plugin_kind_t;

/* Everything the config engine and the node need to know: the modules in lifecycle
 * order (their sections appear in this order) and the plug-in kinds. */
typedef struct ak_schema {
  const ak_module_t *const *modules;
  size_t nmodules;
  const ak_plugin_kind_t *const *kinds;
  size_t nkinds;
} ak_schema_t;

const ak_plugin_kind_t *ak_schema_kind(const ak_schema_t *s, const char *name);
const ak_plugin_t *ak_plugin_find(const ak_plugin_kind_t *k, const char *type);
/* "a, b, c": malloc'd. */
char *ak_plugin_type_list(const ak_plugin_kind_t *k);

#endif
