/* The option reference, generated from the rows: every section of a schema and every
 * plug-in type, one table row per key (type, default, bounds, environment override,
 * doc). `ankusa options --markdown` prints it; docs/configuration.md holds it between
 * markers and a test fails when the two differ. Owns the text format only; never reads a
 * config or a value. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/config.h"

typedef struct {
  char *s;
  size_t n, cap;
  bool oom;
} out_t;

static void put(out_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out_t *o, const char *fmt, ...) {
  if (o->oom) return;
  va_list ap;
  va_start(ap, fmt);
  int need = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (need < 0) return;
  if (o->n + (size_t)need + 1 > o->cap) {
    size_t cap = o->cap ? o->cap : 4096;
    while (cap < o->n + (size_t)need + 1) cap *= 2;
    char *ns = realloc(o->s, cap);
    if (!ns) {
      o->oom = true;
      return;
    }
    o->s = ns;
    o->cap = cap;
  }
  va_start(ap, fmt);
  vsnprintf(o->s + o->n, o->cap - o->n, fmt, ap);
  va_end(ap);
  o->n += (size_t)need;
}

/* "a|b" -> "`a`, `b`" */
static void put_words(out_t *o, const char *list) {
  for (const char *p = list; *p;) {
    const char *bar = strchr(p, '|');
    size_t len = bar ? (size_t)(bar - p) : strlen(p);
    put(o, "%s`%.*s`", p == list ? "" : ", ", (int)len, p);
    p = bar ? bar + 1 : p + len;
  }
}

static const char *type_name(const ak_opt_t *r) {
  switch (r->type) {
  case AK_OPT_STRING: return (r->flags & AK_OPTF_ID) ? "id" : "string";
  case AK_OPT_INT: return "integer";
  case AK_OPT_BOOL: return "boolean";
  case AK_OPT_NUMBER: return "number";
  case AK_OPT_ENUM: return "enum";
  case AK_OPT_STRLIST: return "list of strings";
  case AK_OPT_MAP: return "mapping";
  case AK_OPT_MAP_OR_NAME: return "name or mapping";
  case AK_OPT_ANY_MAP: return "mapping of strings";
  case AK_OPT_SECRETS: return "secret(s)";
  case AK_OPT_IP: return "IP address";
  case AK_OPT_URL_PREFIX: return "URL path prefix";
  case AK_OPT_MAP_OF: return "mapping of id -> mapping";
  case AK_OPT_PLUGIN: return "plug-in mapping";
  case AK_OPT_PLUGIN_LIST: return "list of plug-in mappings";
  case AK_OPT_LIST_OF: return "list of mappings";
  }
  return "?";
}

/* The rule column: values, bounds, flags. */
static void put_rule(out_t *o, const ak_opt_t *r) {
  size_t before = o->n;
#define SEP() put(o, "%s", o->n > before ? "; " : "")
  if (r->enum_vals) {
    put(o, "one of ");
    put_words(o, r->enum_vals);
  }
  if (r->enum_unsupported) {
    SEP();
    put_words(o, r->enum_unsupported);
    put(o, " not supported yet");
  }
  bool lo = r->flags & AK_OPTF_HAS_MIN, hi = r->flags & AK_OPTF_HAS_MAX;
  bool count = r->type == AK_OPT_STRING || r->type == AK_OPT_STRLIST || r->type == AK_OPT_SECRETS;
  if (lo || hi) {
    SEP();
    if (count && lo && !hi && r->min == 1) put(o, "not empty");
    else if (lo && hi) put(o, "%s%lld..%lld", count ? "length " : "", (long long)r->min, (long long)r->max);
    else if (lo) put(o, "%s>= %lld", count ? "length " : "", (long long)r->min);
    else put(o, "%s<= %lld", count ? "length " : "", (long long)r->max);
  }
  if (r->flags & AK_OPTF_ID) {
    SEP();
    put(o, "`" AK_ID_PATTERN "`");
  }
  if (r->flags & AK_OPTF_NULLABLE) {
    SEP();
    put(o, "may be null");
  }
  if (r->flags & AK_OPTF_SECRET) {
    SEP();
    put(o, "secret: never printed");
  }
  if (r->kind) {
    SEP();
    put(o, "`type` and that %s type's keys (below)", r->kind);
  }
#undef SEP
}

static void put_env(out_t *o, const char *env) {
  if (!env) return;
  for (const char *p = env; *p;) {
    const char *bar = strchr(p, '|');
    size_t len = bar ? (size_t)(bar - p) : strlen(p);
    put(o, "%s`%.*s`", p == env ? "" : ", ", (int)len, p);
    p = bar ? bar + 1 : p + len;
  }
}

static void put_rows(out_t *o, const ak_opt_t *rows, const char *prefix) {
  for (size_t i = 0; rows && rows[i].key; i++) {
    const ak_opt_t *r = &rows[i];
    put(o, "| `%s%s` | %s | ", prefix, r->key, type_name(r));
    if (r->flags & AK_OPTF_REQUIRED) put(o, "**required**");
    else if (r->def) put(o, "`%s`", r->def);
    put(o, " | ");
    put_rule(o, r);
    put(o, " | ");
    put_env(o, r->env);
    put(o, " | %s |\n", r->doc ? r->doc : "");
    char sub[256];
    if (r->type == AK_OPT_MAP || r->type == AK_OPT_MAP_OR_NAME) {
      snprintf(sub, sizeof sub, "%s%s.", prefix, r->key);
      put_rows(o, r->children, sub);
    } else if (r->type == AK_OPT_MAP_OF) {
      snprintf(sub, sizeof sub, "%s%s.<id>.", prefix, r->key);
      put_rows(o, r->children, sub);
    } else if (r->type == AK_OPT_LIST_OF) {
      snprintf(sub, sizeof sub, "%s%s[].", prefix, r->key);
      put_rows(o, r->children, sub);
    }
  }
}

static void put_head(out_t *o) {
  put(o, "| key | type | default | rule | env | what it does |\n|---|---|---|---|---|---|\n");
}

char *ak_config_options_markdown(const ak_schema_t *s) {
  out_t o = {0};
  put(&o, "<!-- generated by `ankusa options --markdown` from the option rows; do not edit by hand -->\n\n");
  for (size_t i = 0; i < s->nmodules; i++) {
    const ak_module_t *m = s->modules[i];
    if (!m->section) continue;
    const char *doc = m->doc ? m->doc : "";
    put(&o, "### `%s`\n\n%c%s%s.\n\n", m->section, doc[0] >= 'a' && doc[0] <= 'z' ? doc[0] - 32 : doc[0] ? doc[0] : ' ',
        doc[0] ? doc + 1 : "", (m->section_flags & AK_OPTF_UNSUPPORTED) ? ": not supported yet (accepted when empty)" : "");
    if (m->section_flags & AK_OPTF_UNSUPPORTED) continue;
    put_head(&o);
    char prefix[128];
    snprintf(prefix, sizeof prefix, m->section_map_of ? "<id>." : "");
    put_rows(&o, m->options, prefix);
    put(&o, "\n");
  }
  for (size_t k = 0; k < s->nkinds; k++) {
    const ak_plugin_kind_t *kind = s->kinds[k];
    put(&o, "### `%s` types\n\n", kind->name);
    if (kind->common && kind->common[0].key) {
      put(&o, "Keys every %s type takes besides its own:\n\n", kind->name);
      put_head(&o);
      put_rows(&o, kind->common, "");
      put(&o, "\n");
    }
    for (size_t i = 0; i < kind->count; i++) {
      const ak_plugin_t *p = kind->all[i];
      put(&o, "#### `type: %s`\n\n", p->type);
      if (p->doc) put(&o, "%c%s.\n\n", p->doc[0] >= 'a' && p->doc[0] <= 'z' ? p->doc[0] - 32 : p->doc[0], p->doc + 1);
      if (p->unsupported) {
        put(&o, "Not supported yet.\n\n");
        continue;
      }
      if (!p->options || !p->options[0].key) {
        put(&o, "No other keys.\n\n");
        continue;
      }
      put_head(&o);
      put_rows(&o, p->options, "");
      put(&o, "\n");
    }
  }
  if (o.oom) {
    free(o.s);
    return NULL;
  }
  while (o.n > 1 && o.s[o.n - 1] == '\n' && o.s[o.n - 2] == '\n') o.s[--o.n] = '\0'; /* one final newline */
  return o.s;
}

/* ------------------------------------------------------- the secret rows ---- */

static const char *const type_words[] = {
  [AK_OPT_STRING] = "string", [AK_OPT_INT] = "int", [AK_OPT_BOOL] = "bool", [AK_OPT_NUMBER] = "number",
  [AK_OPT_ENUM] = "enum", [AK_OPT_STRLIST] = "strlist", [AK_OPT_MAP] = "map", [AK_OPT_MAP_OR_NAME] = "map",
  [AK_OPT_ANY_MAP] = "string_map", [AK_OPT_SECRETS] = "secrets", [AK_OPT_IP] = "ip",
  [AK_OPT_URL_PREFIX] = "url_prefix", [AK_OPT_MAP_OF] = "map_of", [AK_OPT_PLUGIN] = "plugin",
  [AK_OPT_PLUGIN_LIST] = "plugin_list", [AK_OPT_LIST_OF] = "list_of",
};

static void put_secret_rows(out_t *o, const ak_opt_t *rows, const char *where, const char *prefix) {
  for (size_t i = 0; rows && rows[i].key; i++) {
    const ak_opt_t *r = &rows[i];
    if (r->flags & AK_OPTF_SECRET)
      put(o, "%s\t%s%s\t%s\n", where, prefix, r->key,
          (size_t)r->type < sizeof type_words / sizeof type_words[0] && type_words[r->type] ? type_words[r->type] : "?");
    char sub[256];
    if (r->type == AK_OPT_MAP || r->type == AK_OPT_MAP_OR_NAME) snprintf(sub, sizeof sub, "%s%s.", prefix, r->key);
    else if (r->type == AK_OPT_MAP_OF) snprintf(sub, sizeof sub, "%s%s.<id>.", prefix, r->key);
    else if (r->type == AK_OPT_LIST_OF) snprintf(sub, sizeof sub, "%s%s[].", prefix, r->key);
    else continue;
    put_secret_rows(o, r->children, where, sub);
  }
}

char *ak_config_secret_rows(const ak_schema_t *s) {
  out_t o = {0};
  for (size_t i = 0; i < s->nmodules; i++) {
    const ak_module_t *m = s->modules[i];
    if (!m->section || (m->section_flags & AK_OPTF_UNSUPPORTED)) continue;
    char where[160], prefix[160];
    snprintf(where, sizeof where, "section:%s", m->section);
    snprintf(prefix, sizeof prefix, "%s.%s", m->section, m->section_map_of ? "<id>." : "");
    put_secret_rows(&o, m->options, where, prefix);
  }
  for (size_t k = 0; k < s->nkinds; k++) {
    const ak_plugin_kind_t *kind = s->kinds[k];
    for (size_t i = 0; i < kind->count; i++) {
      const ak_plugin_t *p = kind->all[i];
      if (p->unsupported) continue;
      char where[160];
      snprintf(where, sizeof where, "%s:%s", kind->name, p->type);
      put_secret_rows(&o, p->options, where, "");
    }
  }
  if (o.oom) {
    free(o.s);
    return NULL;
  }
  return o.s ? o.s : strdup("");
}
