/* The unit tests' node: a temporary data dir per test, a config from YAML (node.data_dir
 * forced to that dir through ANKUSA_DATA_DIR), and a node opened through core/node.c with
 * the modules a suite names, in the module table's order. The one assembly the suites
 * share with main.c and the bench programs. Header-only: each suite is its own program. */
#ifndef AK_TESTS_FIXTURE_H
#define AK_TESTS_FIXTURE_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/config.h"
#include "core/node.h"
#include "modules.h"

typedef struct ak_fx {
  char dir[256];          /* the node's data_dir */
  char store_path[300];   /* <dir>/default/store, where the store module opens it */
  char env_data_dir[300]; /* "ANKUSA_DATA_DIR=<dir>" */
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
  int rc = ak_config_load_string(ak_modules(), yaml, strlen(yaml), env, &cfg, &err);
  cr_assert_eq(rc, 0, "config: %s\n%s", err ? err : "", yaml);
  return cfg;
}

/* Loads yaml and opens the named modules (NULL-terminated; NULL = every module of the
 * node's roles, listeners included). Nothing is started: a suite starts what it drives. */
static inline void ak_fx_open(ak_fx_t *f, const char *yaml, const char *const *only) {
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

#endif
