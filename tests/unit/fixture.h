/* The unit tests' node: a temporary data dir per test, a config from YAML (node.data_dir
 * forced to that dir through ANKUSA_DATA_DIR), and a node opened through core/node.c with
 * the modules a suite names, in the module table's order. The one assembly the suites
 * share with main.c and the bench programs: no suite builds an instance by hand. A module
 * a suite drives itself (a writer it starts or not, a dispatcher it ticks) is left out of
 * `only` and made with the module's own calls on f->inst, as the module's open would.
 * Header-only: each suite is its own program. */
#ifndef AK_TESTS_FIXTURE_H
#define AK_TESTS_FIXTURE_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/config.h"
#include "core/node.h"

/* The module table configs are loaded with and nodes are assembled from: src/modules.c's,
 * the one main.c uses, unless a suite defines AK_FX_SCHEMA (an expression of type
 * const ak_schema_t *) before including this header. test_replay does: it fakes the calls
 * replay.c makes into the dispatcher, and the node's table would link the real one. */
#ifndef AK_FX_SCHEMA
#include "modules.h"
#define AK_FX_SCHEMA ak_modules()
#endif

typedef struct ak_fx {
  char dir[256];          /* the node's data_dir */
  char store_path[300];   /* <dir>/default/store, where the store module opens it */
  char env_data_dir[300]; /* "ANKUSA_DATA_DIR=<dir>" */
  char yaml[4096];        /* the config text of the last open, for ak_fx_reopen */
  const char *const *only; /* the module list of the last open (static storage) */
  ak_config_t *cfg;
  ak_node_t node;
  ak_instance_t *inst;    /* &node.inst once open */
  bool open;
} ak_fx_t;

/* A fresh directory under /tmp named after the suite. */
static inline void ak_fx_tmp(ak_fx_t *f, const char *suite) {
  memset(f, 0, sizeof *f);
  snprintf(f->dir, sizeof f->dir, "/tmp/ak-%s-XXXXXX", suite);
  cr_assert_not_null(mkdtemp(f->dir));
  snprintf(f->store_path, sizeof f->store_path, "%s/default/store", f->dir);
  snprintf(f->env_data_dir, sizeof f->env_data_dir, "ANKUSA_DATA_DIR=%s", f->dir);
}

static inline void ak_fx_rm(ak_fx_t *f) {
  char cmd[320];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
  cr_assert_eq(system(cmd), 0);
}

/* The config of yaml with the fixture's data_dir (the process environment is not read). */
static inline ak_config_t *ak_fx_config(ak_fx_t *f, const char *yaml) {
  const char *const env[] = {f->env_data_dir, NULL};
  ak_config_t *cfg = NULL;
  char *err = NULL;
  int rc = ak_config_load_string(AK_FX_SCHEMA, yaml, strlen(yaml), env, &cfg, &err);
  cr_assert_eq(rc, 0, "config: %s\n%s", err ? err : "", yaml);
  return cfg;
}

/* Loads yaml and opens the named modules (NULL-terminated, in static storage; NULL = every
 * module of the node's roles, listeners included). Nothing is started: a suite starts
 * what it drives. Opening again over the same dir (after ak_fx_close) is a restart: the
 * store and everything in it stay; another yaml is a restart with another config. */
static inline void ak_fx_open(ak_fx_t *f, const char *yaml, const char *const *only) {
  cr_assert_not(f->open, "ak_fx_open: the node is open (ak_fx_close first)");
  cr_assert_lt(strlen(yaml), sizeof f->yaml, "ak_fx_open: yaml longer than the fixture keeps");
  if (yaml != f->yaml) snprintf(f->yaml, sizeof f->yaml, "%s", yaml);
  f->only = only;
  f->cfg = ak_fx_config(f, yaml);
  char *err = NULL;
  ak_node_opts_t o = {.only = only};
  int rc = ak_node_open(&f->node, f->cfg, &o, &err);
  cr_assert_eq(rc, 0, "node open: %s", err ? err : "?");
  f->inst = &f->node.inst;
  f->open = true;
}

/* Closes the node (stops what was started through it first) and frees the config; the
 * directory stays, so a suite can open the same store again. */
static inline void ak_fx_close(ak_fx_t *f) {
  if (!f->open) return;
  ak_node_close(&f->node);
  ak_config_free(f->cfg);
  f->cfg = NULL;
  f->inst = NULL;
  f->open = false;
}

/* A restart: closes the node if open and opens it again over the same dir with the yaml
 * and the modules of the last ak_fx_open. */
static inline void ak_fx_reopen(ak_fx_t *f) {
  ak_fx_close(f);
  ak_fx_open(f, f->yaml, f->only);
}

#endif
