/* The config engine: the YAML tree, ${VAR} interpolation, ANKUSA_* overrides, validation
 * of every value against the option rows of the schema's modules and plug-ins, with
 * dotted-key messages, the module check hooks, the binding of every bound row into its
 * module's typed struct, the effective tree and its redacted copy, and the lookup of the
 * file, and the names of ANKUSA_* variables that match no row. Owns no section: each
 * belongs to the module that declares it (core/module.h). Must never exit or keep state
 * between calls, and writes nothing except ak_config_load's warnings (one stderr line per
 * unknown ANKUSA_* variable: every command loads through it): every result and every
 * error goes back to the caller, and no secret value is ever copied into an error message. */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include "core/buf.h"
#include "core/config.h"
#include "core/yamltree.h"

#define REDACTED "[REDACTED]"
#define MAX_SECRETS 8
#define MAX_CONFIG_BYTES (16u << 20)
#define NOT_YET_HINT "remove it or leave it empty"

/* ----------------------------------------------------------------- small helpers ---- */

static const ak_opt_t *row_find(const ak_opt_t *rows, const char *key, size_t *idx) {
  for (size_t i = 0; rows && rows[i].key; i++)
    if (!strcmp(rows[i].key, key)) {
      if (idx) *idx = i;
      return &rows[i];
    }
  return NULL;
}

static size_t row_count(const ak_opt_t *rows) {
  size_t n = 0;
  while (rows && rows[n].key) n++;
  return n;
}

/* Position of word in "a|b|c", or -1. */
static int list_index(const char *list, const char *word) {
  if (!list) return -1;
  size_t wl = strlen(word);
  int i = 0;
  for (const char *p = list;; i++) {
    const char *bar = strchr(p, '|');
    size_t len = bar ? (size_t)(bar - p) : strlen(p);
    if (len == wl && !memcmp(p, word, wl)) return i;
    if (!bar) return -1;
    p = bar + 1;
  }
}

static bool is_id(const char *s) {
  size_t n = strlen(s);
  if (n < 1 || n > 64) return false;
  for (size_t i = 0; i < n; i++) {
    char ch = s[i];
    bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '-';
    if (!ok) return false;
  }
  return true;
}

static char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *xasprintf(const char *fmt, ...) {
  char *s = NULL;
  va_list ap;
  va_start(ap, fmt);
  int rc = vasprintf(&s, fmt, ap);
  va_end(ap);
  return rc < 0 ? NULL : s;
}

static char *path_key(const char *parent, const char *key) {
  return *parent ? xasprintf("%s.%s", parent, key) : strdup(key);
}

static char *path_idx(const char *parent, size_t i) { return xasprintf("%s[%zu]", parent, i); }

static const char *env_lookup(const char *const *env, const char *name) {
  if (!env) return getenv(name);
  size_t n = strlen(name);
  for (size_t i = 0; env[i]; i++)
    if (!strncmp(env[i], name, n) && env[i][n] == '=') return env[i] + n + 1;
  return NULL;
}

/* The value of the first of "A|B" that is set and non-empty; *which names it. An empty
 * override is treated as unset so that `PORT=` in a unit file does not break a boot. */
static const char *env_override(const char *const *env, const char *names, char *which,
                                size_t whichlen) {
  for (const char *p = names; p && *p;) {
    const char *bar = strchr(p, '|');
    size_t len = bar ? (size_t)(bar - p) : strlen(p);
    if (len < whichlen) {
      memcpy(which, p, len);
      which[len] = '\0';
      const char *v = env_lookup(env, which);
      if (v && *v) return v;
    }
    p = bar ? bar + 1 : p + len;
  }
  return NULL;
}

/* A value as it appears in an error: strings quoted (and cut when long), collections
 * elided; a secret scalar never appears at all. */
static char *render(const json_t *v, bool secret) {
  if (json_is_array(v)) return strdup("[...]");
  if (json_is_object(v)) return strdup("{...}");
  if (secret && !json_is_null(v)) return strdup(REDACTED);
  if (json_is_string(v)) {
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    bool cut = n > 64;
    if (cut) {
      n = 60;
      while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) n--;
    }
    json_t *tmp = json_stringn(s, n);
    char *q = tmp ? json_dumps(tmp, JSON_ENCODE_ANY) : NULL;
    json_decref(tmp);
    if (!q || !cut) return q;
    size_t ql = strlen(q);
    char *out = xasprintf("%.*s...\"", (int)(ql - 1), q);
    free(q);
    return out;
  }
  return json_dumps(v, JSON_ENCODE_ANY | JSON_REAL_PRECISION(15));
}

/* ------------------------------------------------------------ validation context ---- */

struct ak_check {
  char **lines;
  size_t n, cap;
  const char *const *env;
  const ak_schema_t *schema;
  /* A spec that came over the admin API: its strings are taken as written. ${VAR} reads
   * the node's environment, which is the operator's, not the API caller's. */
  bool literal;
};
typedef ak_check_t vctx_t;

static void verr(vctx_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void verr(vctx_t *c, const char *fmt, ...) {
  char *s = NULL;
  va_list ap;
  va_start(ap, fmt);
  int rc = vasprintf(&s, fmt, ap);
  va_end(ap);
  if (rc < 0) s = NULL;
  if (c->n == c->cap) {
    size_t cap = c->cap ? c->cap * 2 : 8;
    char **nl = realloc(c->lines, cap * sizeof *nl);
    if (!nl) {
      free(s);
      return;
    }
    c->lines = nl;
    c->cap = cap;
  }
  c->lines[c->n++] = s ? s : strdup("out of memory");
}

static char *vctx_join(vctx_t *c) {
  size_t len = 1;
  for (size_t i = 0; i < c->n; i++) len += (c->lines[i] ? strlen(c->lines[i]) : 0) + 1;
  char *out = malloc(len);
  if (!out) return NULL;
  char *p = out;
  for (size_t i = 0; i < c->n; i++) {
    if (i) *p++ = '\n';
    size_t l = c->lines[i] ? strlen(c->lines[i]) : 0;
    memcpy(p, c->lines[i], l);
    p += l;
  }
  *p = '\0';
  return out;
}

static void vctx_free(vctx_t *c) {
  for (size_t i = 0; i < c->n; i++) free(c->lines[i]);
  free(c->lines);
}

static void type_error(vctx_t *c, const char *label, const char *want, const json_t *v, bool secret) {
  char *r = render(v, secret);
  verr(c, "%s: expected %s, got %s", label, want, r ? r : "?");
  free(r);
}

/* ------------------------------------------------------------------ interpolation ---- */

static bool is_name_char(char ch) {
  return (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
}

/* ${NAME} / ${NAME:-default} in one string value. What gets substituted is never scanned
 * again, so a variable may hold "${" literally. New reference, or NULL after reporting. */
static json_t *interpolate(vctx_t *c, json_t *v, const char *label, bool secret) {
  const char *s = json_string_value(v);
  if (c->literal || !strstr(s, "${")) return json_incref(v);
  size_t n = strlen(s), errs = c->n;
  ak_buf_t b = AK_BUF_INIT;
  for (size_t i = 0; i < n;) {
    if (s[i] != '$' || s[i + 1] != '{') {
      ak_buf_append(&b, s + i, 1);
      i++;
      continue;
    }
    size_t j = i + 2;
    while (j < n && is_name_char(s[j])) j++;
    bool named = j > i + 2;
    if (named && j < n && s[j] == '}') {
      char *name = strndup(s + i + 2, j - i - 2);
      const char *val = name ? env_lookup(c->env, name) : NULL;
      if (val) ak_buf_append(&b, val, strlen(val));
      else verr(c, "%s: ${%s} is not set", label, name ? name : "?");
      free(name);
      i = j + 1;
      continue;
    }
    if (named && j + 1 < n && s[j] == ':' && s[j + 1] == '-') {
      const char *close = strchr(s + j + 2, '}');
      if (close) {
        char *name = strndup(s + i + 2, j - i - 2);
        const char *val = name ? env_lookup(c->env, name) : NULL;
        if (val) ak_buf_append(&b, val, strlen(val));
        else ak_buf_append(&b, s + j + 2, (size_t)(close - (s + j + 2)));
        free(name);
        i = (size_t)(close - s) + 1;
        continue;
      }
    }
    /* Not a reference we understand: say which text, unless it belongs to a secret. */
    const char *close = strchr(s + i, '}');
    size_t frag = close ? (size_t)(close - (s + i)) + 1 : n - i;
    if (secret) verr(c, "%s: unresolved ${...}", label);
    else if (frag > 40) verr(c, "%s: unresolved %.36s...", label, s + i);
    else verr(c, "%s: unresolved %.*s", label, (int)frag, s + i);
    i += frag;
  }
  json_t *out = NULL;
  if (c->n == errs) {
    char *text = ak_buf_take(&b, NULL);
    out = text ? json_string(text) : NULL;
    free(text);
    if (!out) verr(c, "%s: the interpolated value is not valid UTF-8", label);
  }
  ak_buf_free(&b);
  return out;
}

/* ---------------------------------------------------------------------- checking ---- */

static json_t *check_value(vctx_t *c, const ak_opt_t *row, json_t *v, const char *path,
                           const char *label, bool interp);
static json_t *check_map(vctx_t *c, const ak_opt_t *rows, json_t *obj, const char *path);

/* A string, or a plain integer taken as its text ("tenant: 2024"). Malloc'd or NULL. */
static char *as_text(const json_t *v) {
  if (json_is_string(v)) return strdup(json_string_value(v));
  if (json_is_integer(v)) return xasprintf("%lld", (long long)json_integer_value(v));
  return NULL;
}

static bool parse_int_text(const char *s, int64_t *out) {
  const char *p = s;
  if (*p == '-') p++;
  if (!*p) return false;
  for (const char *q = p; *q; q++)
    if (*q < '0' || *q > '9') return false;
  errno = 0;
  long long v = strtoll(s, NULL, 10);
  if (errno == ERANGE) return false;
  *out = v;
  return true;
}

static bool is_empty_value(const json_t *v) {
  return !v || json_is_null(v) || (json_is_object(v) && json_object_size(v) == 0) ||
         (json_is_array(v) && json_array_size(v) == 0) ||
         (json_is_string(v) && json_string_length(v) == 0);
}

static void bounds_text(const ak_opt_t *row, char *buf, size_t len) {
  bool lo = row->flags & AK_OPTF_HAS_MIN, hi = row->flags & AK_OPTF_HAS_MAX;
  if (lo && hi)
    snprintf(buf, len, "between %lld and %lld", (long long)row->min, (long long)row->max);
  else if (lo && row->min == 1) snprintf(buf, len, "positive");
  else if (lo && row->min == 0) snprintf(buf, len, "non-negative");
  else if (lo) snprintf(buf, len, "at least %lld", (long long)row->min);
  else snprintf(buf, len, "at most %lld", (long long)row->max);
}

static bool in_bounds(const ak_opt_t *row, double x) {
  if ((row->flags & AK_OPTF_HAS_MIN) && x < (double)row->min) return false;
  if ((row->flags & AK_OPTF_HAS_MAX) && x > (double)row->max) return false;
  return true;
}

static void range_error(vctx_t *c, const ak_opt_t *row, const char *label, const json_t *v) {
  char want[96];
  bounds_text(row, want, sizeof want);
  char *r = render(v, row->flags & AK_OPTF_SECRET);
  verr(c, "%s must be %s, got %s", label, want, r ? r : "?");
  free(r);
}

/* Length / count bounds of strings and lists; "must not be empty" for the common case. */
static bool check_count(vctx_t *c, const ak_opt_t *row, const char *label, size_t n, const char *unit) {
  if ((row->flags & AK_OPTF_HAS_MIN) && (int64_t)n < row->min) {
    if (row->min == 1) verr(c, "%s: must not be empty", label);
    else verr(c, "%s: must have at least %lld %s", label, (long long)row->min, unit);
    return false;
  }
  if ((row->flags & AK_OPTF_HAS_MAX) && (int64_t)n > row->max) {
    verr(c, "%s: must have at most %lld %s", label, (long long)row->max, unit);
    return false;
  }
  return true;
}

static void enum_expected(const char *vals, char *buf, size_t len) {
  size_t o = 0;
  for (const char *p = vals; *p && o + 3 < len; p++) {
    if (*p == '|') {
      buf[o++] = ',';
      buf[o++] = ' ';
    } else {
      buf[o++] = *p;
    }
  }
  buf[o] = '\0';
}

/* Checks a word against enum_vals / enum_unsupported; reports and returns false. */
static bool check_enum_word(vctx_t *c, const ak_opt_t *row, const char *label, const char *w) {
  if (list_index(row->enum_vals, w) < 0) {
    char exp[512];
    enum_expected(row->enum_vals, exp, sizeof exp);
    json_t *tmp = json_string(w);
    char *r = render(tmp, false);
    verr(c, "%s: unknown value %s; expected one of %s", label, r ? r : "?", exp);
    free(r);
    json_decref(tmp);
    return false;
  }
  if (list_index(row->enum_unsupported, w) >= 0) {
    verr(c, "%s: \"%s\" is not supported yet", label, w);
    return false;
  }
  return true;
}

/* A word named twice means the same as once (roles: [edge, edge]). */
static void strlist_add(json_t *list, const char *w) {
  size_t k;
  json_t *prev;
  json_array_foreach(list, k, prev)
    if (!strcmp(json_string_value(prev), w)) return;
  json_array_append_new(list, json_string(w));
}

static json_t *check_strlist(vctx_t *c, const ak_opt_t *row, json_t *v, const char *path,
                             const char *label, bool interp) {
  json_t *out = json_array();
  size_t errs = c->n;
  if (json_is_array(v)) {
    size_t i;
    json_t *item;
    json_array_foreach(v, i, item) {
      char *ip = path_idx(path, i);
      json_t *iv = (interp && json_is_string(item)) ? interpolate(c, item, ip, false) : json_incref(item);
      char *t = iv ? as_text(iv) : NULL;
      if (iv && !t) type_error(c, ip, "a string", iv, false);
      if (t && row->enum_vals && !check_enum_word(c, row, ip, t)) {
        free(t);
        t = NULL;
      }
      if (t) strlist_add(out, t);
      free(t);
      json_decref(iv);
      free(ip);
    }
  } else {
    json_t *sv = (interp && json_is_string(v)) ? interpolate(c, v, label, false) : json_incref(v);
    if (sv && !json_is_string(sv)) type_error(c, label, "a list", sv, false);
    if (sv && json_is_string(sv)) {
      /* "edge, dispatch" is the env form: split on commas, trim, drop empty parts */
      const char *s = json_string_value(sv);
      while (*s) {
        const char *comma = strchr(s, ',');
        const char *e = comma ? comma : s + strlen(s);
        const char *b = s;
        while (b < e && (*b == ' ' || *b == '\t')) b++;
        const char *t = e;
        while (t > b && (t[-1] == ' ' || t[-1] == '\t')) t--;
        if (t > b) {
          char *w = strndup(b, (size_t)(t - b));
          if (w && (!row->enum_vals || check_enum_word(c, row, label, w))) strlist_add(out, w);
          free(w);
        }
        s = comma ? comma + 1 : e;
      }
    }
    json_decref(sv);
  }
  if (c->n == errs) check_count(c, row, label, json_array_size(out), "items");
  if (c->n != errs) {
    json_decref(out);
    return NULL;
  }
  return out;
}

static json_t *check_secrets(vctx_t *c, json_t *v, const char *path, const char *label, bool interp) {
  size_t errs = c->n;
  if (json_is_string(v)) {
    json_t *sv = interp ? interpolate(c, v, label, true) : json_incref(v);
    if (sv && json_string_length(sv) == 0) verr(c, "%s: must not be empty", label);
    if (c->n == errs) return sv;
    json_decref(sv);
    return NULL;
  }
  if (!json_is_array(v)) {
    type_error(c, label, "a string or a list of strings", v, true);
    return NULL;
  }
  if (json_array_size(v) == 0) {
    verr(c, "%s: must not be empty", label);
    return NULL;
  }
  if (json_array_size(v) > MAX_SECRETS) {
    verr(c, "%s: at most %d secrets", label, MAX_SECRETS);
    return NULL;
  }
  json_t *out = json_array();
  size_t i;
  json_t *item;
  json_array_foreach(v, i, item) {
    char *ip = path_idx(path, i);
    if (!json_is_string(item)) {
      type_error(c, ip, "a string", item, true);
    } else {
      json_t *sv = interp ? interpolate(c, item, ip, true) : json_incref(item);
      if (sv && json_string_length(sv) == 0) verr(c, "%s: must not be empty", ip);
      else if (sv) json_array_append(out, sv);
      json_decref(sv);
    }
    free(ip);
  }
  if (c->n == errs) return out;
  json_decref(out);
  return NULL;
}

static json_t *check_prefix(vctx_t *c, const char *label, const char *s) {
  ak_buf_t b = AK_BUF_INIT;
  bool ok = true;
  while (*s) {
    const char *slash = strchr(s, '/');
    size_t len = slash ? (size_t)(slash - s) : strlen(s);
    if (len) {
      bool good = !(len == 1 && s[0] == '.') && !(len == 2 && s[0] == '.' && s[1] == '.');
      for (size_t i = 0; i < len && good; i++) {
        char ch = s[i];
        good = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
               ch == '.' || ch == '_' || ch == '~' || ch == '-';
      }
      if (!good) {
        char *seg = strndup(s, len);
        json_t *tmp = seg ? json_string(seg) : NULL;
        char *r = tmp ? render(tmp, false) : NULL;
        verr(c, "%s: invalid path segment %s; expected [A-Za-z0-9._~-]+ (and not . or ..)", label,
             r ? r : "?");
        free(r);
        json_decref(tmp);
        free(seg);
        ok = false;
        break;
      }
      ak_buf_append(&b, "/", 1);
      ak_buf_append(&b, s, len);
    }
    s += len + (slash ? 1 : 0);
  }
  char *text = ak_buf_take(&b, NULL);
  json_t *out = ok && text ? json_string(text) : NULL;
  free(text);
  return out;
}

/* A plug-in mapping whose `type` decides what else is allowed: check the type alone
 * first, so a refused type does not also produce a pile of unknown-key errors; then the
 * other keys against that type's option rows. The type's own rules run later, with the
 * whole tree (ak_check_plugin). */
static json_t *check_plugin(vctx_t *c, const ak_opt_t *row, json_t *obj, const char *path) {
  const ak_plugin_kind_t *kind = ak_schema_kind(c->schema, row->kind);
  if (!kind) {
    verr(c, "%s: no plug-in kind \"%s\" in this build", path, row->kind ? row->kind : "?");
    return NULL;
  }
  if (kind->none_type && is_empty_value(obj)) return json_pack("{s:s}", "type", kind->none_type);
  if (!json_is_object(obj)) {
    type_error(c, path, "a mapping", obj, false);
    return NULL;
  }
  json_t *t = json_object_get(obj, "type");
  if (!t) {
    verr(c, "%s: missing required key \"type\"", path);
    return NULL;
  }
  char *tp = path_key(path, "type");
  json_t *tv = json_is_string(t) ? interpolate(c, t, tp, false) : json_incref(t);
  char *type = tv ? as_text(tv) : NULL;
  const ak_plugin_t *p = NULL;
  json_t *out = NULL;
  if (tv && !type) {
    type_error(c, tp, "a string", tv, false);
  } else if (type && !(p = ak_plugin_find(kind, type))) {
    json_t *tmp = json_string(type);
    char *r = tmp ? render(tmp, false) : NULL;
    char *list = ak_plugin_type_list(kind);
    json_decref(tmp);
    verr(c, "%s: unknown value %s; expected one of %s", tp, r ? r : "?", list ? list : "?");
    free(list);
    free(r);
  } else if (p && p->unsupported) {
    verr(c, "%s: %s type \"%s\" is not supported yet", tp, kind->name, type);
  } else if (p) {
    json_t *rest = json_copy(obj);
    json_object_del(rest, "type");
    /* the kind's common keys are checked apart, then join the type's */
    json_t *com = json_object();
    for (const ak_opt_t *r = kind->common; r && r->key; r++) {
      json_t *cv = json_object_get(rest, r->key);
      if (cv) {
        json_object_set(com, r->key, cv);
        json_object_del(rest, r->key);
      }
    }
    json_t *copts = kind->common ? check_map(c, kind->common, com, path) : json_object();
    json_decref(com);
    json_t *opts = check_map(c, p->options, rest, path);
    json_decref(rest);
    if (opts && copts) {
      out = json_pack("{s:s}", "type", type);
      json_object_update(out, opts);
      json_object_update(out, copts);
    }
    json_decref(opts);
    json_decref(copts);
  }
  free(type);
  json_decref(tv);
  free(tp);
  return out;
}

static json_t *check_plugin_list(vctx_t *c, const ak_opt_t *row, json_t *v, const char *path, const char *label) {
  if (!json_is_null(v) && !json_is_array(v)) {
    type_error(c, label, "a list", v, false);
    return NULL;
  }
  if (json_array_size(v) == 0) {
    verr(c, "%s: must not be empty", label);
    return NULL;
  }
  size_t errs = c->n;
  json_t *out = json_array();
  size_t i;
  json_t *item;
  json_array_foreach(v, i, item) {
    char *ip = path_idx(path, i);
    json_t *sv = check_plugin(c, row, item, ip);
    if (sv) json_array_append_new(out, sv);
    free(ip);
  }
  if (c->n == errs) return out;
  json_decref(out);
  return NULL;
}

/* A list of mappings (admin.principals); null = []. */
static json_t *check_list_of(vctx_t *c, const ak_opt_t *row, json_t *v, const char *path, const char *label) {
  if (json_is_null(v)) return json_array();
  if (!json_is_array(v)) {
    type_error(c, label, "a list", v, false);
    return NULL;
  }
  size_t errs = c->n;
  json_t *out = json_array();
  size_t i;
  json_t *item;
  json_array_foreach(v, i, item) {
    char *ip = path_idx(path, i);
    if (!json_is_object(item)) {
      type_error(c, ip, "a mapping", item, false);
    } else {
      json_t *m = check_map(c, row->children, item, ip);
      if (m) json_array_append_new(out, m);
    }
    free(ip);
  }
  if (c->n == errs) return out;
  json_decref(out);
  return NULL;
}

static int cmp_key(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A mapping of id -> mapping (sources). Checked in file order, emitted sorted by id. */
static json_t *check_map_of(vctx_t *c, const ak_opt_t *row, json_t *obj, const char *path) {
  if (json_is_null(obj)) return json_object();
  if (!json_is_object(obj)) {
    type_error(c, path, "a mapping", obj, false);
    return NULL;
  }
  size_t n = json_object_size(obj), k = 0;
  const char **keys = calloc(n + 1, sizeof *keys);
  json_t *checked = json_object();
  const char *id;
  json_t *val;
  size_t noun_len = strlen(row->key);
  if (noun_len > 1 && row->key[noun_len - 1] == 's') noun_len--; /* "sources" -> "source" */
  json_object_foreach(obj, id, val) {
    if (!is_id(id)) {
      json_t *tmp = json_string(id);
      char *r = render(tmp, false);
      verr(c, "%s: invalid %.*s id %s; expected " AK_ID_PATTERN, path, (int)noun_len, row->key,
           r ? r : "?");
      free(r);
      json_decref(tmp);
      continue;
    }
    char *ip = path_key(path, id);
    json_t *cv = NULL;
    size_t before = c->n;
    if (!json_is_null(val) && !json_is_object(val)) type_error(c, ip, "a mapping", val, false);
    else cv = check_map(c, row->children, val, ip);
    if (cv && c->n == before) json_object_set_new(checked, id, cv); /* a bad entry is left out */
    else json_decref(cv);
    free(ip);
  }
  json_t *out = NULL;
  if (keys) {
    json_object_foreach(checked, id, val) keys[k++] = id;
    qsort(keys, k, sizeof *keys, cmp_key);
    out = json_object();
    for (size_t i = 0; i < k; i++) json_object_set(out, keys[i], json_object_get(checked, keys[i]));
  }
  free(keys);
  json_decref(checked);
  return out;
}

static json_t *check_value(vctx_t *c, const ak_opt_t *row, json_t *v, const char *path,
                           const char *label, bool interp) {
  bool secret = row->flags & AK_OPTF_SECRET;
  if (row->flags & AK_OPTF_UNSUPPORTED) {
    if (!is_empty_value(v)) verr(c, "%s: not supported yet; " NOT_YET_HINT, label);
    return NULL;
  }
  /* before the list types take over: null is "unset" for a nullable list too */
  if (json_is_null(v) && (row->flags & AK_OPTF_NULLABLE)) return json_null();
  if (row->type == AK_OPT_SECRETS) return check_secrets(c, v, path, label, interp);
  if (row->type == AK_OPT_STRLIST) return check_strlist(c, row, v, path, label, interp);
  json_t *own = (interp && json_is_string(v)) ? interpolate(c, v, label, secret) : json_incref(v);
  if (!own) return NULL;
  v = own;
  json_t *out = NULL;
  char *text = NULL;
  if (json_is_null(v) && (row->flags & AK_OPTF_NULLABLE)) {
    out = json_null();
    goto done;
  }
  switch (row->type) {
  case AK_OPT_STRING:
    if (!(text = as_text(v))) {
      type_error(c, label, "a string", v, secret);
    } else if ((row->flags & AK_OPTF_ID) && !is_id(text)) {
      char *r = render(v, secret);
      verr(c, "%s: invalid %s %s; expected " AK_ID_PATTERN, label, row->key, r ? r : "?");
      free(r);
    } else if (check_count(c, row, label, strlen(text), "characters")) {
      out = json_string(text);
    }
    break;
  case AK_OPT_INT: {
    int64_t x = 0;
    bool ok = json_is_integer(v) ? (x = json_integer_value(v), true)
                                 : json_is_string(v) && parse_int_text(json_string_value(v), &x);
    if (!ok) {
      type_error(c, label, "an integer", v, secret);
    } else {
      json_t *iv = json_integer(x);
      if (in_bounds(row, (double)x)) out = iv;
      else {
        range_error(c, row, label, iv);
        json_decref(iv);
      }
    }
    break;
  }
  case AK_OPT_NUMBER: {
    json_t *nv = NULL;
    int64_t x;
    if (json_is_number(v)) {
      nv = json_incref(v);
    } else if (json_is_string(v)) {
      const char *s = json_string_value(v);
      char *end = NULL;
      if (parse_int_text(s, &x)) {
        nv = json_integer(x);
      } else if (*s) {
        double d = strtod(s, &end);
        if (end && !*end && d == d && d - d == 0) nv = json_real(d);
      }
    }
    if (!nv) type_error(c, label, "a number", v, secret);
    else if (!in_bounds(row, json_number_value(nv))) range_error(c, row, label, nv);
    else out = json_incref(nv);
    json_decref(nv);
    break;
  }
  case AK_OPT_BOOL:
    if (json_is_boolean(v)) out = json_incref(v);
    else if (json_is_string(v) && !strcasecmp(json_string_value(v), "true")) out = json_true();
    else if (json_is_string(v) && !strcasecmp(json_string_value(v), "false")) out = json_false();
    else type_error(c, label, "a boolean", v, secret);
    /* a switch whose "true" is known to Ankusa but not built (routes.enabled) */
    if (out && json_is_true(out) && list_index(row->enum_unsupported, "true") >= 0) {
      verr(c, "%s: true is not supported yet; set it to false or remove it", label);
      json_decref(out);
      out = NULL;
    }
    break;
  case AK_OPT_ENUM:
    if (!(text = as_text(v))) type_error(c, label, "a string", v, secret);
    else if (check_enum_word(c, row, label, text)) out = json_string(text);
    break;
  case AK_OPT_IP: {
    unsigned char buf[sizeof(struct in6_addr)];
    text = json_is_string(v) ? strdup(json_string_value(v)) : NULL;
    if (text && (inet_pton(AF_INET, text, buf) == 1 || inet_pton(AF_INET6, text, buf) == 1))
      out = json_string(text);
    else type_error(c, label, "an IP address literal", v, secret);
    break;
  }
  case AK_OPT_URL_PREFIX:
    if (!json_is_string(v)) type_error(c, label, "a string", v, secret);
    else out = check_prefix(c, label, json_string_value(v));
    break;
  case AK_OPT_MAP:
    if (!json_is_null(v) && !json_is_object(v)) type_error(c, label, "a mapping", v, secret);
    else out = check_map(c, row->children, json_is_null(v) ? NULL : v, path);
    break;
  case AK_OPT_ANY_MAP: {
    if (!json_is_null(v) && !json_is_object(v)) {
      type_error(c, label, "a mapping", v, secret);
      break;
    }
    size_t errs = c->n;
    json_t *m = json_object();
    const char *k;
    json_t *item;
    json_object_foreach(v, k, item) {
      char *ip = path_key(path, k);
      json_t *iv = (interp && json_is_string(item)) ? interpolate(c, item, ip, secret) : json_incref(item);
      char *t = iv ? as_text(iv) : NULL;
      if (iv && !t) type_error(c, ip, "a string", iv, secret);
      if (t) json_object_set_new(m, k, json_string(t));
      free(t);
      json_decref(iv);
      free(ip);
    }
    if (c->n == errs) out = m;
    else json_decref(m);
    break;
  }
  case AK_OPT_MAP_OF:
    out = check_map_of(c, row, v, path);
    break;
  case AK_OPT_MAP_OR_NAME:
    if (json_is_string(v)) {
      /* checked under the key the user wrote, not under the child it stands for */
      if (check_enum_word(c, &row->children[0], label, json_string_value(v))) {
        json_t *m = json_pack("{s:O}", row->children[0].key, v);
        out = check_map(c, row->children, m, path);
        json_decref(m);
      }
    } else if (json_is_object(v)) {
      out = check_map(c, row->children, v, path);
    } else if (!json_is_null(v)) { /* null: as if absent */
      type_error(c, label, "a name or a mapping", v, secret);
    }
    break;
  case AK_OPT_PLUGIN:
    if (!json_is_null(v) && !json_is_object(v)) type_error(c, label, "a mapping", v, secret);
    else out = check_plugin(c, row, v, path);
    break;
  case AK_OPT_PLUGIN_LIST:
    out = check_plugin_list(c, row, v, path, label);
    break;
  case AK_OPT_LIST_OF:
    out = check_list_of(c, row, v, path, label);
    break;
  case AK_OPT_STRLIST:
  case AK_OPT_SECRETS:
    break; /* handled above, before interpolation of the whole value */
  }
done:
  free(text);
  json_decref(own);
  return out;
}

/* The value of a key the file does not set (nor the environment). */
static json_t *default_value(vctx_t *c, const ak_opt_t *row, const char *path, const char *parent) {
  if (row->flags & AK_OPTF_REQUIRED) {
    if (*parent) verr(c, "%s: missing required key \"%s\"", parent, row->key);
    else verr(c, "missing required key \"%s\"", row->key);
    return NULL;
  }
  if (row->flags & AK_OPTF_UNSUPPORTED) return NULL;
  switch (row->type) {
  case AK_OPT_MAP: /* a nullable section (http.tls) is off, and left out, unless written */
    return (row->flags & AK_OPTF_NULLABLE) ? NULL : check_map(c, row->children, NULL, path);
  case AK_OPT_MAP_OF: return json_object();
  case AK_OPT_LIST_OF: return json_array();
  case AK_OPT_PLUGIN: {
    const ak_plugin_kind_t *kind = ak_schema_kind(c->schema, row->kind);
    return kind && kind->none_type ? json_pack("{s:s}", "type", kind->none_type) : NULL;
  }
  case AK_OPT_ANY_MAP: return row->def ? NULL : json_object();
  default: break;
  }
  if (!row->def) return (row->flags & AK_OPTF_NULLABLE) ? json_null() : NULL;
  const char *d = row->def;
  size_t dl = strlen(d);
  json_t *dv = (row->type == AK_OPT_STRLIST && dl >= 2 && d[0] == '[' && d[dl - 1] == ']')
                 ? json_stringn(d + 1, dl - 2)
                 : json_string(d);
  json_t *out = dv ? check_value(c, row, dv, path, path, false) : NULL;
  json_decref(dv);
  return out;
}

/* A mapping checked against rows: file keys in file order (so errors come in document
 * order), then environment overrides, then defaults; emitted in row order. */
static json_t *check_map(vctx_t *c, const ak_opt_t *rows, json_t *obj, const char *path) {
  size_t n = row_count(rows);
  json_t **vals = calloc(n + 1, sizeof *vals);
  bool *seen = calloc(n + 1, sizeof *seen);
  const char **ovr = calloc(n + 1, sizeof *ovr);
  char (*ovr_name)[64] = calloc(n + 1, sizeof *ovr_name);
  if (!vals || !seen || !ovr || !ovr_name) {
    verr(c, "%s: out of memory", path);
    free(vals);
    free(seen);
    free(ovr);
    free(ovr_name);
    return NULL;
  }
  for (size_t i = 0; i < n; i++)
    if (rows[i].env) ovr[i] = env_override(c->env, rows[i].env, ovr_name[i], sizeof ovr_name[i]);
  if (obj) {
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v) {
      size_t i;
      if (!row_find(rows, k, &i)) {
        json_t *tmp = json_string(k);
        char *r = render(tmp, false);
        if (*path) verr(c, "%s: unknown key %s", path, r ? r : "?");
        else verr(c, "unknown key %s", r ? r : "?");
        free(r);
        json_decref(tmp);
        continue;
      }
      seen[i] = true;
      if (ovr[i]) continue; /* the environment beats the file */
      char *cp = path_key(path, k);
      vals[i] = check_value(c, &rows[i], v, cp, cp, true);
      free(cp);
    }
  }
  for (size_t i = 0; i < n; i++) {
    char *cp = path_key(path, rows[i].key);
    if (ovr[i]) {
      char *label = xasprintf("%s (from %s)", cp, ovr_name[i]);
      json_t *ev = json_string(ovr[i]);
      if (!ev) verr(c, "%s: not valid UTF-8", label);
      else vals[i] = check_value(c, &rows[i], ev, cp, label, false);
      json_decref(ev);
      free(label);
    } else if (!seen[i]) {
      vals[i] = default_value(c, &rows[i], cp, path);
    }
    free(cp);
  }
  json_t *out = json_object();
  for (size_t i = 0; i < n; i++)
    if (vals[i]) json_object_set_new(out, rows[i].key, vals[i]);
  free(vals);
  free(seen);
  free(ovr);
  free(ovr_name);
  /* Partial on error: the load fails anyway, but the cross-key rules can still look at
   * the keys that were fine (http.routing next to a bad http.port). */
  return out;
}

/* ------------------------------------------------------------------ the schema ---- */

const ak_plugin_kind_t *ak_schema_kind(const ak_schema_t *s, const char *name) {
  for (size_t i = 0; s && name && i < s->nkinds; i++)
    if (!strcmp(s->kinds[i]->name, name)) return s->kinds[i];
  return NULL;
}

const ak_plugin_t *ak_plugin_find(const ak_plugin_kind_t *k, const char *type) {
  for (size_t i = 0; k && type && i < k->count; i++)
    if (!strcmp(k->all[i]->type, type)) return k->all[i];
  return NULL;
}

char *ak_plugin_type_list(const ak_plugin_kind_t *k) {
  ak_buf_t b = AK_BUF_INIT;
  for (size_t i = 0; k && i < k->count; i++) {
    if (i) ak_buf_append(&b, ", ", 2);
    ak_buf_append(&b, k->all[i]->type, strlen(k->all[i]->type));
  }
  return ak_buf_take(&b, NULL);
}

/* One MAP row per module section, in schema order (terminated by a zero row). */
static ak_opt_t *root_rows_of(const ak_schema_t *s) {
  ak_opt_t *rows = calloc(s->nmodules + 1, sizeof *rows);
  if (!rows) return NULL;
  size_t n = 0;
  for (size_t i = 0; i < s->nmodules; i++) {
    const ak_module_t *m = s->modules[i];
    if (!m->section) continue;
    rows[n++] = (ak_opt_t){.key = m->section, .type = m->section_map_of ? AK_OPT_MAP_OF : AK_OPT_MAP,
                           .children = m->options, .flags = m->section_flags, .doc = m->doc};
  }
  return rows;
}

/* ------------------------------------------------------------------- binding ---- */

static int bind_rows(const ak_opt_t *rows, const json_t *obj, char *base) {
  for (size_t i = 0; rows && rows[i].key; i++) {
    const ak_opt_t *row = &rows[i];
    if (!row->bound) continue;
    const json_t *v = json_object_get(obj, row->key);
    char *p = base + row->off;
    switch (row->type) {
    case AK_OPT_STRING:
    case AK_OPT_IP:
    case AK_OPT_URL_PREFIX: *(const char **)p = json_string_value(v); break;
    case AK_OPT_INT: *(int64_t *)p = json_integer_value(v); break;
    case AK_OPT_NUMBER: *(double *)p = json_number_value(v); break;
    case AK_OPT_BOOL: *(bool *)p = json_is_true(v); break;
    case AK_OPT_ENUM: {
      int x = json_is_string(v) ? list_index(row->enum_vals, json_string_value(v)) : 0;
      if (x < 0) x = 0;
      memcpy(p, &x, sizeof x);
      break;
    }
    case AK_OPT_STRLIST: {
      ak_strlist_t *l = (ak_strlist_t *)p;
      size_t n = json_array_size(v);
      l->v = calloc(n + 1, sizeof *l->v);
      l->n = 0;
      if (!l->v) return -1;
      for (size_t k = 0; k < n; k++) {
        const char *w = json_string_value(json_array_get(v, k));
        if (w) l->v[l->n++] = w;
      }
      break;
    }
    case AK_OPT_MAP:
      if (bind_rows(row->children, json_is_object(v) ? v : NULL, p) < 0) return -1;
      break;
    default: *(const json_t **)p = v; break;
    }
  }
  return 0;
}

static void unbind_rows(const ak_opt_t *rows, char *base) {
  for (size_t i = 0; rows && rows[i].key; i++) {
    if (!rows[i].bound) continue;
    char *p = base + rows[i].off;
    if (rows[i].type == AK_OPT_STRLIST) {
      ak_strlist_t *l = (ak_strlist_t *)p;
      free(l->v);
      l->v = NULL;
      l->n = 0;
    } else if (rows[i].type == AK_OPT_MAP) {
      unbind_rows(rows[i].children, p);
    }
  }
}

const void *ak_config_of(const ak_config_t *cfg, const ak_module_t *m) {
  for (size_t i = 0; cfg && cfg->typed && i < cfg->schema->nmodules; i++)
    if (cfg->schema->modules[i] == m) return cfg->typed[i];
  return NULL;
}

/* Every module's struct filled from its section, then its finish hook. */
static int bind_all(ak_config_t *cfg, char **err) {
  const ak_schema_t *s = cfg->schema;
  if (!(cfg->typed = calloc(s->nmodules + 1, sizeof *cfg->typed))) goto oom;
  for (size_t i = 0; i < s->nmodules; i++) {
    const ak_module_t *m = s->modules[i];
    if (!m->cfg_size) continue;
    if (!(cfg->typed[i] = calloc(1, m->cfg_size))) goto oom;
    const json_t *section = m->section ? json_object_get(cfg->effective, m->section) : NULL;
    if (!m->section_map_of && bind_rows(m->options, section, cfg->typed[i]) < 0) goto oom;
    if (m->finish && m->finish(cfg->typed[i], section, cfg->effective, err) < 0) {
      if (!m->section_map_of) unbind_rows(m->options, cfg->typed[i]);
      free(cfg->typed[i]);
      cfg->typed[i] = NULL;
      if (!*err) *err = strdup("out of memory");
      return -1;
    }
  }
  return 0;
oom:
  *err = strdup("out of memory");
  return -1;
}

void ak_config_free(ak_config_t *cfg) {
  if (!cfg) return;
  for (size_t i = 0; cfg->typed && i < cfg->schema->nmodules; i++) {
    const ak_module_t *m = cfg->schema->modules[i];
    if (!cfg->typed[i]) continue;
    if (m->release) m->release(cfg->typed[i]);
    if (!m->section_map_of) unbind_rows(m->options, cfg->typed[i]);
    free(cfg->typed[i]);
  }
  free(cfg->typed);
  free(cfg->root_rows);
  free(cfg->path);
  json_decref(cfg->effective);
  free(cfg);
}

/* ----------------------------------------------------------------------- loading ---- */

static int load_text(const ak_schema_t *s, const char *yaml, size_t len, const char *path,
                     const char *const *env, ak_config_t **out, char **err) {
  *out = NULL;
  *err = NULL;
  json_t *doc = NULL;
  char *perr = NULL;
  if (ak_config_yaml_parse(yaml ? yaml : "", yaml ? len : 0, &doc, &perr) < 0) {
    *err = path ? xasprintf("%s: %s", path, perr ? perr : "invalid YAML") : perr;
    if (path) free(perr);
    if (!*err) *err = strdup("invalid YAML");
    return -1;
  }
  ak_config_t *cfg = calloc(1, sizeof *cfg);
  if (!cfg || !(cfg->root_rows = root_rows_of(s))) {
    free(cfg);
    json_decref(doc);
    *err = strdup("out of memory");
    return -1;
  }
  cfg->schema = s;
  vctx_t c = {.env = env, .schema = s};
  json_t *eff = check_map(&c, cfg->root_rows, doc, "");
  json_decref(doc);
  /* the rules across keys, module by module, on the (possibly partial) tree */
  for (size_t i = 0; eff && i < s->nmodules; i++) {
    const ak_module_t *m = s->modules[i];
    if (!m->check) continue;
    json_t *section = m->section ? json_object_get(eff, m->section) : NULL;
    if (!m->section || json_is_object(section)) m->check(&c, section, eff);
  }
  if (c.n || !eff) {
    *err = c.n ? vctx_join(&c) : strdup("out of memory");
    vctx_free(&c);
    json_decref(eff);
    ak_config_free(cfg);
    return -1;
  }
  vctx_free(&c);
  cfg->effective = eff;
  if (path && !(cfg->path = strdup(path))) {
    ak_config_free(cfg);
    *err = strdup("out of memory");
    return -1;
  }
  if (bind_all(cfg, err) < 0) {
    ak_config_free(cfg);
    return -1;
  }
  *out = cfg;
  return 0;
}

int ak_config_load_string(const ak_schema_t *s, const char *yaml, size_t len, const char *const *env,
                          ak_config_t **out, char **err) {
  return load_text(s, yaml, len, NULL, env, out, err);
}

int ak_config_load_file(const ak_schema_t *s, const char *path, const char *const *env, ak_config_t **out,
                        char **err) {
  *out = NULL;
  *err = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) {
    *err = xasprintf("config file %s: %s", path, strerror(errno));
    return -1;
  }
  char *buf = NULL;
  size_t len = 0, cap = 0;
  int rc = 0;
  for (;;) {
    if (len + 4096 > cap) {
      cap = cap ? cap * 2 : 8192;
      char *nb = realloc(buf, cap);
      if (!nb) {
        *err = strdup("out of memory");
        rc = -1;
        break;
      }
      buf = nb;
    }
    size_t got = fread(buf + len, 1, cap - len, f);
    len += got;
    if (len > MAX_CONFIG_BYTES) {
      *err = xasprintf("config file %s: larger than %u bytes", path, MAX_CONFIG_BYTES);
      rc = -1;
      break;
    }
    if (got == 0) {
      if (ferror(f)) {
        *err = xasprintf("config file %s: %s", path, strerror(errno ? errno : EIO));
        rc = -1;
      }
      break;
    }
  }
  fclose(f);
  if (rc == 0) rc = load_text(s, buf ? buf : "", len, path, env, out, err);
  free(buf);
  return rc;
}

static bool file_exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}

int ak_config_find(const char *cli_path, const char *const *env, char **path_out, char **err) {
  *path_out = NULL;
  *err = NULL;
  const char *chosen = NULL, *from = NULL;
  if (cli_path) {
    chosen = cli_path;
    from = "";
  } else {
    const char *e = env_lookup(env, "ANKUSA_CONFIG");
    if (e && *e) {
      chosen = e;
      from = " (from ANKUSA_CONFIG)";
    }
  }
  if (chosen) {
    struct stat st;
    if (stat(chosen, &st) != 0) {
      *err = xasprintf("config file %s%s: %s", chosen, from, strerror(errno));
      return -1;
    }
  } else if (file_exists("/etc/ankusa/ankusa.yml")) {
    chosen = "/etc/ankusa/ankusa.yml";
  } else if (file_exists("./ankusa.yml")) {
    chosen = "./ankusa.yml";
  } else {
    return 0;
  }
  if (!(*path_out = strdup(chosen))) {
    *err = strdup("out of memory");
    return -1;
  }
  return 0;
}

int ak_config_load(const ak_schema_t *s, const char *cli_path, const char *const *env, ak_config_t **out,
                   char **err) {
  char *path = NULL;
  *out = NULL;
  char *warn = ak_config_unknown_env(s, env);
  for (char *line = warn, *next; line && *line; line = next) {
    if ((next = strchr(line, '\n'))) *next++ = '\0';
    fprintf(stderr, "ankusa: warning: %s\n", line);
  }
  free(warn);
  if (ak_config_find(cli_path, env, &path, err) < 0) return -1;
  int rc = path ? ak_config_load_file(s, path, env, out, err) : load_text(s, "", 0, NULL, env, out, err);
  free(path);
  return rc;
}

/* ------------------------------------------------------ unknown ANKUSA_* names ---- */

extern char **environ;

/* name (len bytes) is one of "A|B". */
static bool env_in_list(const char *names, const char *name, size_t len) {
  for (const char *p = names; p && *p;) {
    const char *bar = strchr(p, '|');
    size_t l = bar ? (size_t)(bar - p) : strlen(p);
    if (l == len && !memcmp(p, name, len)) return true;
    p = bar ? bar + 1 : p + l;
  }
  return false;
}

static bool rows_read_env(const ak_opt_t *rows, const char *name, size_t len) {
  for (size_t i = 0; rows && rows[i].key; i++)
    if (env_in_list(rows[i].env, name, len) || rows_read_env(rows[i].children, name, len)) return true;
  return false;
}

/* The names this build reads: every row's .env (modules and plug-ins), ANKUSA_CONFIG, and
 * in a test build the ANKUSA_TEST_* hooks the test suites set (a release build reads none). */
static bool schema_reads_env(const ak_schema_t *s, const char *name, size_t len) {
  if (env_in_list("ANKUSA_CONFIG", name, len)) return true;
#ifdef AK_TEST_HOOKS
  if (len > 12 && !memcmp(name, "ANKUSA_TEST_", 12)) return true;
#endif
  for (size_t i = 0; i < s->nmodules; i++)
    if (rows_read_env(s->modules[i]->options, name, len)) return true;
  for (size_t k = 0; k < s->nkinds; k++)
    for (size_t i = 0; i < s->kinds[k]->count; i++)
      if (rows_read_env(s->kinds[k]->all[i]->options, name, len)) return true;
  return false;
}

char *ak_config_unknown_env(const ak_schema_t *s, const char *const *env) {
  const char *const *e = env ? env : (const char *const *)environ;
  ak_buf_t b = AK_BUF_INIT;
  for (size_t i = 0; e && e[i]; i++) {
    if (strncmp(e[i], "ANKUSA_", 7)) continue;
    const char *eq = strchr(e[i], '=');
    size_t len = eq ? (size_t)(eq - e[i]) : strlen(e[i]);
    if (schema_reads_env(s, e[i], len)) continue;
    if (b.len) ak_buf_append(&b, "\n", 1);
    char *line = xasprintf("%.*s is set but matches no setting of this build; ignored", (int)len, e[i]);
    if (line) ak_buf_append(&b, line, strlen(line));
    free(line);
  }
  if (b.len) return ak_buf_take(&b, NULL);
  ak_buf_free(&b);
  return NULL;
}

/* --------------------------------------------------------------------- redaction ---- */

static bool secret_key_name(const char *k) {
  static const char *const names[] = {"secret", "password", "token", "secret_access_key",
                                      "session_token", "nkey_seed", "jwt", "signing_key"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!strcmp(k, names[i])) return true;
  return false;
}

/* Hide userinfo (user:pass@ keeps the user; a lone token@ goes whole) and every query
 * value (names stay); the rest of the URL as written. */
json_t *ak_config_view_url(const char *s) {
  size_t n = strlen(s);
  char *out = malloc(n * 12 + sizeof REDACTED * 2 + 1);
  if (!out) return json_string(REDACTED);
  size_t o = 0;
  const char *p = s;
  const char *auth = strstr(s, "://");
  if (auth) {
    auth += 3;
    size_t alen = strcspn(auth, "/?#");
    const char *at = NULL;
    for (size_t i = 0; i < alen; i++)
      if (auth[i] == '@') at = auth + i;
    if (at) {
      const char *colon = memchr(auth, ':', (size_t)(at - auth));
      size_t keep = colon ? (size_t)(colon + 1 - s) : (size_t)(auth - s);
      memcpy(out, s, keep);
      o = keep;
      memcpy(out + o, REDACTED, sizeof REDACTED - 1);
      o += sizeof REDACTED - 1;
      p = at;
    }
  }
  const char *q = strchr(p, '?');
  const char *hash = q ? strchr(q, '#') : NULL;
  if (!q || q[1] == '\0' || q + 1 == hash) {
    strcpy(out + o, p);
    json_t *r = json_string(out);
    free(out);
    return r ? r : json_string(REDACTED);
  }
  memcpy(out + o, p, (size_t)(q + 1 - p));
  o += (size_t)(q + 1 - p);
  const char *end = hash ? hash : q + strlen(q);
  for (const char *part = q + 1; part < end;) {
    const char *amp = memchr(part, '&', (size_t)(end - part));
    const char *stop = amp ? amp : end;
    const char *eq = memchr(part, '=', (size_t)(stop - part));
    if (eq) {
      memcpy(out + o, part, (size_t)(eq + 1 - part));
      o += (size_t)(eq + 1 - part);
    }
    memcpy(out + o, REDACTED, sizeof REDACTED - 1);
    o += sizeof REDACTED - 1;
    if (amp) out[o++] = '&';
    part = amp ? amp + 1 : end;
  }
  strcpy(out + o, end);
  json_t *r = json_string(out);
  free(out);
  return r ? r : json_string(REDACTED);
}

/* scheme://user:pass@host -> scheme://user:[REDACTED]@host; anything else unchanged. */
static json_t *mask_url(const json_t *v) {
  const char *s = json_string_value(v);
  const char *auth = strstr(s, "://");
  if (!auth) return json_copy((json_t *)v);
  auth += 3;
  size_t alen = strcspn(auth, "/?#");
  const char *at = NULL;
  for (size_t i = 0; i < alen; i++)
    if (auth[i] == '@') at = auth + i;
  const char *colon = at ? memchr(auth, ':', (size_t)(at - auth)) : NULL;
  if (!colon) return json_copy((json_t *)v);
  char *m = xasprintf("%.*s" REDACTED "%s", (int)(colon + 1 - s), s, at);
  json_t *out = m ? json_string(m) : NULL;
  free(m);
  return out ? out : json_string(REDACTED);
}

/* One walk of a tree by the redaction's rules, shared by the redaction (fn NULL) and
 * by whoever must find the same secrets (ak_config_map_secrets: sealing at rest), so
 * there is one list of what is secret. path is the JSON pointer of the node walked. */
typedef struct {
  const ak_schema_t *s;
  ak_config_secret_fn fn;
  void *ctx;
  ak_buf_t path;
  bool failed;
} walk_t;

static json_t *walk_obj(walk_t *w, const json_t *obj, const ak_opt_t *rows);

/* A plug-in's rows live in its kind's registry, found by the mapping's own type. */
static const ak_opt_t *plugin_rows(const ak_schema_t *s, const ak_opt_t *row, const json_t *obj) {
  const ak_plugin_t *p = ak_plugin_find(ak_schema_kind(s, row->kind), json_string_value(json_object_get(obj, "type")));
  return p ? p->options : NULL;
}

/* RFC 6901: "~" and "/" inside a key are escaped. Returns the length to pop back to. */
static size_t path_push_key(walk_t *w, const char *k) {
  size_t at = w->path.len;
  ak_buf_puts(&w->path, "/");
  for (; *k; k++) {
    if (*k == '~') ak_buf_puts(&w->path, "~0");
    else if (*k == '/') ak_buf_puts(&w->path, "~1");
    else ak_buf_append(&w->path, k, 1);
  }
  return at;
}

static size_t path_push_idx(walk_t *w, size_t i) {
  size_t at = w->path.len;
  ak_buf_printf(&w->path, "/%zu", i);
  return at;
}

static void path_pop(walk_t *w, size_t at) {
  if (w->path.p && at <= w->path.len) {
    w->path.len = at;
    w->path.p[at] = '\0';
  }
}

/* A leaf: shown is what the redaction prints (new reference); secret when that hides
 * the value or part of it. */
static json_t *walk_leaf(walk_t *w, const json_t *v, json_t *shown, bool secret) {
  if (!w->fn) return shown;
  json_decref(shown);
  if (w->path.failed) {
    w->failed = true;
    return NULL;
  }
  json_t *r = w->fn(w->ctx, w->path.p ? w->path.p : "", v, secret);
  if (!r) w->failed = true;
  return r;
}

static json_t *walk_node(walk_t *w, const json_t *v, const ak_opt_t *row, const char *key) {
  /* Header names stay (an operator sees a sink sends `authorization`), values go. */
  if (key && !strcmp(key, "headers") && json_is_object(v)) {
    json_t *out = json_object();
    const char *k;
    json_t *item;
    json_object_foreach((json_t *)v, k, item) {
      size_t at = path_push_key(w, k);
      json_object_set_new(out, k, walk_leaf(w, item, json_string(REDACTED), true));
      path_pop(w, at);
    }
    return out;
  }
  if (!json_is_null(v) && ((row && (row->flags & AK_OPTF_SECRET)) || (key && secret_key_name(key))))
    return walk_leaf(w, v, json_string(REDACTED), true);
  if (json_is_string(v)) {
    /* a URL shown with its password or query values hidden holds a secret in part */
    json_t *shown = key && (!strcmp(key, "url") || !strcmp(key, "endpoint") || !strcmp(key, "resource"))
                      ? ak_config_view_url(json_string_value(v)) : mask_url(v);
    return walk_leaf(w, v, shown, !json_equal(shown, (json_t *)v));
  }
  if (json_is_array(v)) {
    json_t *out = json_array();
    size_t i;
    json_t *item;
    json_array_foreach(v, i, item) {
      json_t *r = NULL;
      size_t at = path_push_idx(w, i);
      if (row && row->type == AK_OPT_PLUGIN_LIST && json_is_object(item)) r = walk_obj(w, item, plugin_rows(w->s, row, item));
      else if (row && row->type == AK_OPT_LIST_OF && json_is_object(item)) r = walk_obj(w, item, row->children);
      else r = walk_node(w, item, NULL, row && row->type == AK_OPT_PLUGIN_LIST ? NULL : key);
      path_pop(w, at);
      json_array_append_new(out, r);
    }
    return out;
  }
  if (json_is_object(v)) {
    if (row && row->type == AK_OPT_MAP_OF) {
      json_t *out = json_object();
      const char *k;
      json_t *item;
      json_object_foreach((json_t *)v, k, item) {
        size_t at = path_push_key(w, k);
        json_t *r = json_is_object(item) ? walk_obj(w, item, row->children) : walk_node(w, item, NULL, k);
        path_pop(w, at);
        json_object_set_new(out, k, r);
      }
      return out;
    }
    if (row && row->type == AK_OPT_PLUGIN) return walk_obj(w, v, plugin_rows(w->s, row, v));
    bool typed = row && row->type == AK_OPT_MAP;
    return walk_obj(w, v, typed ? row->children : NULL);
  }
  return walk_leaf(w, v, json_copy((json_t *)v), false);
}

static json_t *walk_obj(walk_t *w, const json_t *obj, const ak_opt_t *rows) {
  json_t *out = json_object();
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)obj, k, v) {
    size_t at = path_push_key(w, k);
    json_object_set_new(out, k, walk_node(w, v, row_find(rows, k, NULL), k));
    path_pop(w, at);
  }
  return out;
}

static json_t *walk_tree(walk_t *w, const ak_config_t *cfg, const json_t *tree, const ak_opt_t *rows) {
  if (!tree) return NULL;
  w->s = cfg ? cfg->schema : NULL;
  json_t *out = !json_is_object(tree) ? walk_node(w, tree, NULL, NULL)
                                      : walk_obj(w, tree, rows ? rows : cfg ? cfg->root_rows : NULL);
  ak_buf_free(&w->path);
  if (w->failed) {
    json_decref(out);
    return NULL;
  }
  return out;
}

json_t *ak_config_redact_tree(const ak_config_t *cfg, const json_t *tree, const ak_opt_t *rows) {
  walk_t w = {.path = AK_BUF_INIT};
  return walk_tree(&w, cfg, tree, rows);
}

json_t *ak_config_map_secrets(const ak_config_t *cfg, const json_t *tree, const ak_opt_t *rows,
                              ak_config_secret_fn fn, void *ctx) {
  walk_t w = {.fn = fn, .ctx = ctx, .path = AK_BUF_INIT};
  return walk_tree(&w, cfg, tree, rows);
}

json_t *ak_config_redacted(const ak_config_t *cfg) {
  return cfg ? ak_config_redact_tree(cfg, cfg->effective, cfg->root_rows) : NULL;
}

const ak_opt_t *ak_config_root_options(const ak_config_t *cfg) { return cfg ? cfg->root_rows : NULL; }

int ak_opt_enum_index(const char *list, const char *word) { return list_index(list, word); }

int ak_opt_bind_checked(const ak_opt_t *rows, const json_t *opts, void *base, json_t **checked, char *err,
                        size_t errlen) {
  *checked = NULL;
  vctx_t c = {.literal = true};
  if (opts && !json_is_object(opts)) {
    snprintf(err, errlen, "expected a mapping");
    return -1;
  }
  /* a plug-in's mapping as configured names its type too: not one of its options */
  json_t *rest = opts && json_object_get(opts, "type") ? json_copy((json_t *)opts) : NULL;
  if (rest) json_object_del(rest, "type");
  json_t *out = check_map(&c, rows, rest ? rest : (json_t *)opts, "");
  json_decref(rest);
  if (c.n || !out) {
    snprintf(err, errlen, "%s", c.n && c.lines[0] ? c.lines[0] : "out of memory");
    vctx_free(&c);
    json_decref(out);
    return -1;
  }
  vctx_free(&c);
  if (bind_rows(rows, out, base) < 0) {
    unbind_rows(rows, base);
    json_decref(out);
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  *checked = out;
  return 0;
}

void ak_opt_release(const ak_opt_t *rows, void *base) { unbind_rows(rows, base); }

/* ------------------------------------------------------ what check hooks may use ---- */

ak_check_t *ak_check_new(const ak_schema_t *s, bool literal) {
  ak_check_t *c = calloc(1, sizeof *c);
  if (c) {
    c->schema = s;
    c->literal = literal;
  }
  return c;
}

void ak_check_free(ak_check_t *c) {
  if (!c) return;
  vctx_free(c);
  free(c);
}

size_t ak_check_count(const ak_check_t *c) { return c ? c->n : 0; }

char *ak_check_join(const ak_check_t *c) {
  char *s = c && c->n ? vctx_join((ak_check_t *)c) : NULL;
  return s ? s : strdup("out of memory");
}

void ak_check_error(ak_check_t *c, const char *fmt, ...) {
  char *s = NULL;
  va_list ap;
  va_start(ap, fmt);
  int rc = vasprintf(&s, fmt, ap);
  va_end(ap);
  verr(c, "%s", rc < 0 || !s ? "out of memory" : s);
  free(s);
}

bool ak_check_reported_under(const ak_check_t *c, const char *label) {
  size_t n = strlen(label);
  for (size_t i = 0; i < c->n; i++)
    if (c->lines[i] && !strncmp(c->lines[i], label, n) && strchr(".: ", c->lines[i][n])) return true;
  return false;
}

char *ak_check_render(const json_t *v, bool secret) { return render(v, secret); }

bool ak_check_int_at(const json_t *obj, const char *key, int64_t *out) {
  const json_t *v = json_object_get(obj, key);
  if (!json_is_integer(v)) return false;
  *out = json_integer_value(v);
  return true;
}

bool ak_check_is_id(const char *s) { return s && is_id(s); }

void ak_check_show_off(json_t *obj, const ak_opt_t *rows) {
  if (!json_is_object(obj)) return;
  json_t *out = json_object();
  for (size_t i = 0; rows[i].key; i++) {
    json_t *v = json_object_get(obj, rows[i].key);
    if (!v && rows[i].type == AK_OPT_MAP && (rows[i].flags & AK_OPTF_NULLABLE)) v = json_null();
    if (v) json_object_set(out, rows[i].key, v);
  }
  json_object_clear(obj);
  json_object_update(obj, out);
  json_decref(out);
}

json_t *ak_check_map(ak_check_t *c, const ak_opt_t *rows, const json_t *obj, const char *path) {
  return check_map(c, rows, (json_t *)obj, path);
}

void ak_check_plugin(ak_check_t *c, const char *kind_name, const char *path, json_t *spec, const json_t *root) {
  const ak_plugin_kind_t *kind = ak_schema_kind(c->schema, kind_name);
  const ak_plugin_t *p = ak_plugin_find(kind, json_string_value(json_object_get(spec, "type")));
  if (!p) return; /* the schema pass reported it */
  size_t errs = c->n;
  if (p->check) p->check(c, path, spec, root);
  if (kind->check && c->n == errs) kind->check(c, path, spec, root);
}
