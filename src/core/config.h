/* The config engine: ankusa.yml (Ankusa-compatible schema) parsed into a tree, ${VAR}
 * interpolation, ANKUSA_* overrides, validation of every key against the option rows the
 * modules and plug-ins declare (core/module.h), dotted-key messages, the rules across
 * keys each module checks, the effective tree and its redacted copy, and the binding of
 * every row into its module's typed struct. Owns no section: every section belongs to
 * the module that declares it. Never exits; errors come back as text, and only
 * ak_config_load writes (a warning per unknown ANKUSA_* variable, on stderr). */
#ifndef AK_CORE_CONFIG_H
#define AK_CORE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include "core/module.h"
#include "core/options.h"

#define AK_EXIT_CONFIG 78

typedef struct ak_config {
  char *path;                  /* file that was loaded, NULL when none */
  const ak_schema_t *schema;   /* borrowed; outlives the config */
  json_t *effective;           /* the whole effective tree, defaults applied (unredacted) */
  ak_opt_t *root_rows;         /* one MAP row per module section, in schema order */
  void **typed;                /* per module of the schema: its bound struct, or NULL */
} ak_config_t;

/* env: NULL-terminated "K=V" array; NULL means the process environment. */

/* Pick the file: cli_path, else $ANKUSA_CONFIG (must exist), else /etc/ankusa/ankusa.yml,
 * else ./ankusa.yml, else none (*path_out = NULL, returns 0). -1 with *err on error. */
int ak_config_find(const char *cli_path, const char *const *env, char **path_out, char **err);

/* Parse + interpolate + overrides + validate + bind. 0 on success; -1 with *err
 * (malloc'd, possibly several lines, each naming a dotted key) on failure. */
int ak_config_load_string(const ak_schema_t *s, const char *yaml, size_t len, const char *const *env,
                          ak_config_t **out, char **err);
int ak_config_load_file(const ak_schema_t *s, const char *path, const char *const *env, ak_config_t **out,
                        char **err);
/* find + load; no file at all = defaults, no sources. Writes one "ankusa: warning: ..."
 * line on stderr per ak_config_unknown_env line, loaded or not. */
int ak_config_load(const ak_schema_t *s, const char *cli_path, const char *const *env, ak_config_t **out,
                   char **err);

void ak_config_free(ak_config_t *cfg);

/* The ANKUSA_* variables of env (NULL: the process environment) that no row of s reads
 * (rows' .env, plug-ins' included; ANKUSA_CONFIG too, and in a test build the test hooks'
 * names): one line per variable naming it, joined by "\n" (malloc'd), or NULL when none. */
char *ak_config_unknown_env(const ak_schema_t *s, const char *const *env);

/* The typed struct module m's rows were bound into (NULL when m has none or is not in
 * the config's schema). */
const void *ak_config_of(const ak_config_t *cfg, const ak_module_t *m);

/* The effective config with every secret replaced by "[REDACTED]" (new reference). */
json_t *ak_config_redacted(const ak_config_t *cfg);

/* Redaction of any tree: values of rows flagged AK_OPTF_SECRET (rows NULL = the root
 * rows; plug-ins by their own rows, found in s), any key named like a secret, and the
 * password of scheme://user:pass@ URLs. New reference. */
/* A URL with its userinfo secret and every query value replaced by "[REDACTED]" (the
 * rule print-config applies under url/endpoint/resource keys). New reference. */
json_t *ak_config_view_url(const char *url);

json_t *ak_config_redact_tree(const ak_config_t *cfg, const json_t *tree, const ak_opt_t *rows);

/* The same walk for a caller that must find the same secrets (core/sealed.c seals them
 * at rest): the tree rebuilt with fn's answer for every leaf, a leaf being every scalar
 * and every value the redaction hides whole (a secret list or mapping is one leaf).
 * pointer is the leaf's JSON pointer (RFC 6901, "" for the root); secret is true when the
 * redaction hides the value or part of it (a URL's password or query values). fn answers
 * a new reference, or NULL to fail the walk. NULL when fn failed or out of memory. */
typedef json_t *(*ak_config_secret_fn)(void *ctx, const char *pointer, const json_t *v, bool secret);
json_t *ak_config_map_secrets(const ak_config_t *cfg, const json_t *tree, const ak_opt_t *rows,
                              ak_config_secret_fn fn, void *ctx);

/* ------------------------------------------------ what check hooks may use ---- */

/* An error list. literal: strings are taken as written (no ${VAR}: a spec sent over the
 * admin API reads nothing of the node's environment). */
ak_check_t *ak_check_new(const ak_schema_t *s, bool literal);
void ak_check_free(ak_check_t *c);
size_t ak_check_count(const ak_check_t *c);
/* The errors, one per line (malloc'd); "out of memory" when there are none to join. */
char *ak_check_join(const ak_check_t *c);
void ak_check_error(ak_check_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* True when an error is already reported under label (label, label.x or label: ...):
 * a rule on a partial entry would only repeat it. */
bool ak_check_reported_under(const ak_check_t *c, const char *label);
/* A value as it appears in an error: strings quoted (cut when long), collections elided,
 * a secret scalar never at all. Malloc'd. */
char *ak_check_render(const json_t *v, bool secret);
/* An integer the schema pass accepted at obj.key; false when that key failed. */
bool ak_check_int_at(const json_t *obj, const char *key, int64_t *out);
/* Nullable sections of rows that are absent (off) are shown as null, in row order, so
 * print-config shows an operator every knob. */
void ak_check_show_off(json_t *obj, const ak_opt_t *rows);
/* [A-Za-z0-9_-]{1,64} */
bool ak_check_is_id(const char *s);
#define AK_ID_PATTERN "[A-Za-z0-9_-]{1,64}"
/* A mapping checked against rows (defaults filled in, env overrides applied unless the
 * check is literal): a new reference, partial when something failed. */
json_t *ak_check_map(ak_check_t *c, const ak_opt_t *rows, const json_t *obj, const char *path);
/* Run a plug-in kind's checks on one checked mapping (its type's check, then the kind's). */
void ak_check_plugin(ak_check_t *c, const char *kind, const char *path, json_t *spec, const json_t *root);

/* ------------------------------------------------------------- option rows ---- */

/* A plug-in's own options, for its create (which may be handed a mapping no load checked:
 * a test, a tool): checked against its rows literally (no ${VAR}, no environment; a
 * `type` key is the plug-in's name, not an option, and is left out),
 * defaults filled in, then bound into the struct at base by the rows' AK_AT. 0, or -1
 * with err ("key: reason", the first problem; never a secret value). On success *checked
 * holds the strings the struct borrows: keep it until done with the struct, then
 * ak_opt_release(rows, base) and json_decref(*checked). */
int ak_opt_bind_checked(const ak_opt_t *rows, const json_t *opts, void *base, json_t **checked, char *err,
                        size_t errlen);
void ak_opt_release(const ak_opt_t *rows, void *base);

/* Position of word in "a|b|c", or -1. */
int ak_opt_enum_index(const char *list, const char *word);
/* The root rows (one per module section) of the config's schema. */
const ak_opt_t *ak_config_root_options(const ak_config_t *cfg);

/* The option reference as Markdown (docs/configuration.md holds it between markers):
 * every section of the schema, every row with type, default, bounds, env and doc, and
 * every plug-in type's rows. Malloc'd. */
char *ak_config_options_markdown(const ak_schema_t *s);
/* Every row flagged AK_OPTF_SECRET, one line each: "section:<name>" or "<kind>:<type>"
 * (a plug-in's), a tab, the dotted key ("<id>." for a mapping's ids, "[]." for a list's
 * items), a tab, the row's type (string, secrets, string_map, ...). What a test that
 * looks for leaks of every secret enumerates (malloc'd). */
char *ak_config_secret_rows(const ak_schema_t *s);

#endif
