/* The node lifecycle and the `node` section. Walks the schema's module table: open in
 * order, start in order, stop and close in reverse. Never calls a module directly and
 * never exits: a failure comes back with the module's own message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/node.h"

static const char *const role_names[] = {"edge", "dispatch", "storage", "claim_check"};

static const ak_opt_t node_rows[] = {
  {.key = "roles", .type = AK_OPT_STRLIST, .def = "[edge, dispatch, storage]",
   .enum_vals = "edge|dispatch|storage|claim_check", .min = 1,
   .flags = AK_OPTF_HAS_MIN,
   .env = "ANKUSA_ROLES", .doc = "what this node runs: a list or a comma-separated string",
   AK_AT(ak_node_cfg_t, role_names)},
  {.key = "data_dir", .type = AK_OPT_STRING, .def = "./data", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .env = "ANKUSA_DATA_DIR", .doc = "directory of the node's store", AK_AT(ak_node_cfg_t, data_dir)},
  {.key = "min_free_bytes", .type = AK_OPT_INT, .def = "268435456", .min = 0, .flags = AK_OPTF_HAS_MIN,
   .doc = "free space the data volume must keep: below it commits are refused (503) before RocksDB "
          "could hit ENOSPC",
   AK_AT(ak_node_cfg_t, min_free_bytes)},
  {0},
};

/* wal.type none: the queue's roles have no work (no hook is ever written), so they are
 * not run; "roles" as written stays in the tree, the effective roles are the bits. */
static bool wal_none(const json_t *root) {
  const char *t = json_string_value(json_object_get(json_object_get(root, "wal"), "type"));
  return t && !strcmp(t, "none");
}

static unsigned effective_roles(const json_t *names, bool none) {
  unsigned roles = 0;
  for (size_t i = 0; i < json_array_size(names); i++)
    for (size_t r = 0; r < sizeof role_names / sizeof role_names[0]; r++)
      if (json_is_string(json_array_get(names, i)) &&
          !strcmp(json_string_value(json_array_get(names, i)), role_names[r]))
        roles |= 1u << r;
  return none ? roles & ~(unsigned)(AK_ROLE_DISPATCH | AK_ROLE_STORAGE) : roles;
}

static void node_check(ak_check_t *c, json_t *section, json_t *root) {
  json_t *names = json_object_get(section, "roles");
  if (wal_none(root) && json_array_size(names) && !effective_roles(names, true))
    ak_check_error(c, "node.roles: wal: :none requires the :edge role (dispatch and storage have no work "
                      "without a queue; a claim_check-only node is allowed)");
}

static int node_finish(void *typed, const json_t *section, const json_t *root, char **err) {
  (void)err;
  ak_node_cfg_t *nc = typed;
  nc->roles = effective_roles(json_object_get(section, "roles"), wal_none(root));
  return 0;
}

const ak_module_t ak_mod_node = {
  .name = "node",
  .section = "node",
  .doc = "this node",
  .options = node_rows,
  .cfg_size = sizeof(ak_node_cfg_t),
  .check = node_check,
  .finish = node_finish,
};

const ak_node_cfg_t *ak_node_cfg(const ak_config_t *cfg) { return ak_config_of(cfg, &ak_mod_node); }

const char *ak_node_roles_text(unsigned roles, char *buf, size_t len) {
  if (!buf || !len) return "";
  size_t o = 0;
  buf[0] = '\0';
  for (size_t r = 0; r < sizeof role_names / sizeof role_names[0]; r++) {
    if (!(roles & (1u << r))) continue;
    int w = snprintf(buf + o, len - o, "%s%s", o ? "," : "", role_names[r]);
    if (w < 0 || (size_t)w >= len - o) break;
    o += (size_t)w;
  }
  return buf;
}

/* ------------------------------------------------------------------ lifecycle ---- */

static bool listed(const char *const *names, const char *name) {
  for (size_t i = 0; names && names[i]; i++)
    if (!strcmp(names[i], name)) return true;
  return false;
}

static bool wanted(const ak_module_t *m, unsigned roles, const ak_node_opts_t *o) {
  if (o && listed(o->skip, m->name)) return false;
  if (o && o->only) return listed(o->only, m->name);
  return !m->roles || (m->roles & roles);
}

static char *failure(const ak_module_t *m, const char *phase, char *why) {
  char *out = NULL;
  if (why) return why; /* the module's own words name what failed */
  if (asprintf(&out, "%s: %s failed", m->name, phase) < 0) out = NULL;
  return out;
}

static void close_opened(ak_node_t *n) {
  const ak_schema_t *s = n->inst.cfg->schema;
  for (size_t i = n->nopen; i-- > 0;) {
    const ak_module_t *m = s->modules[i];
    if (n->opened[i] && m->close) m->close(&n->inst);
    n->opened[i] = false;
  }
  n->nopen = 0;
}

int ak_node_open(ak_node_t *n, ak_config_t *cfg, const ak_node_opts_t *opts, char **err) {
  *err = NULL;
  memset(n, 0, sizeof *n);
  const ak_schema_t *s = cfg->schema;
  n->inst.name = "default"; /* Ankusa's YAML has no instance key */
  n->inst.cfg = cfg;
  n->inst.metrics = ak_metrics_new();
  n->opened = calloc(s->nmodules + 1, sizeof *n->opened);
  n->started = calloc(s->nmodules + 1, sizeof *n->started);
  if (!n->inst.metrics || !n->opened || !n->started) {
    ak_metrics_free(n->inst.metrics);
    free(n->opened);
    free(n->started);
    memset(n, 0, sizeof *n);
    *err = strdup("out of memory");
    return AK_MODULE_FAILED;
  }
  ak_idgen_init(&n->inst.ids);
  unsigned roles = ak_node_cfg(cfg) ? ak_node_cfg(cfg)->roles : 0;
  n->inst.roles = roles;
  for (size_t i = 0; i < s->nmodules; i++) {
    const ak_module_t *m = s->modules[i];
    n->nopen = i + 1;
    if (!wanted(m, roles, opts) || !m->open) {
      n->opened[i] = wanted(m, roles, opts); /* a module without open still closes */
      continue;
    }
    char *why = NULL;
    int rc = m->open(&n->inst, &why);
    if (rc != 0) {
      n->nopen = i; /* the failed module cleaned up after itself */
      *err = failure(m, "open", why);
      close_opened(n);
      ak_metrics_free(n->inst.metrics);
      free(n->opened);
      free(n->started);
      memset(n, 0, sizeof *n);
      return rc == AK_MODULE_BAD_CONFIG ? AK_MODULE_BAD_CONFIG : AK_MODULE_FAILED;
    }
    n->opened[i] = true;
  }
  return 0;
}

int ak_node_start(ak_node_t *n, char **err) {
  *err = NULL;
  const ak_schema_t *s = n->inst.cfg->schema;
  for (size_t i = 0; i < n->nopen; i++) {
    const ak_module_t *m = s->modules[i];
    if (!n->opened[i] || !m->start) continue;
    char *why = NULL;
    int rc = m->start(&n->inst, &why);
    if (rc != 0) {
      *err = failure(m, "start", why);
      return rc == AK_MODULE_BAD_CONFIG ? AK_MODULE_BAD_CONFIG : AK_MODULE_FAILED;
    }
    n->started[i] = true;
  }
  return 0;
}

void ak_node_drain(ak_node_t *n) {
  if (!n->opened || n->stopped) return;
  atomic_store(&n->inst.draining, 1);
  const ak_schema_t *s = n->inst.cfg->schema;
  for (size_t i = n->nopen; i-- > 0;) {
    const ak_module_t *m = s->modules[i];
    if (n->started[i] && m->drain) m->drain(&n->inst);
  }
}

void ak_node_reload(ak_node_t *n) {
  if (!n->opened || n->stopped) return;
  const ak_schema_t *s = n->inst.cfg->schema;
  for (size_t i = 0; i < n->nopen; i++) {
    const ak_module_t *m = s->modules[i];
    if (n->started[i] && m->reload) m->reload(&n->inst);
  }
}

void ak_node_stop(ak_node_t *n) {
  if (!n->opened || n->stopped) return;
  n->stopped = true;
  atomic_store(&n->inst.draining, 1);
  const ak_schema_t *s = n->inst.cfg->schema;
  for (size_t i = n->nopen; i-- > 0;) {
    const ak_module_t *m = s->modules[i];
    if (n->started[i] && m->stop) m->stop(&n->inst);
    n->started[i] = false;
  }
}

void ak_node_close(ak_node_t *n) {
  if (!n->opened) return;
  ak_node_stop(n);
  close_opened(n);
  ak_metrics_free(n->inst.metrics);
  free(n->opened);
  free(n->started);
  memset(n, 0, sizeof *n);
}

const ak_module_t *ak_node_module(const ak_node_t *n, const char *name) {
  const ak_schema_t *s = n->inst.cfg ? n->inst.cfg->schema : NULL;
  for (size_t i = 0; s && i < s->nmodules; i++)
    if (!strcmp(s->modules[i]->name, name)) return s->modules[i];
  return NULL;
}
