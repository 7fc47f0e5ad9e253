/* YAML -> jansson for the config loader. Owns scalar resolution (plain vs quoted) and the
 * refusal of YAML features the config never needs (anchors, aliases, several documents,
 * duplicate or non-scalar keys). Must never look at the schema or the environment: the
 * tree it returns is exactly what the file says. */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>
#include "core/yamltree.h"

/* Deep enough for any sane config, shallow enough that a hostile file cannot blow the
 * stack of this recursive parser. */
#define YT_MAX_DEPTH 64

typedef struct {
  yaml_parser_t parser;
  char *err;
  int depth;
  const char *text;
  size_t len;
} yt_t;

static void yt_fail(yt_t *y, const yaml_mark_t *mark, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));

static void yt_fail(yt_t *y, const yaml_mark_t *mark, const char *fmt, ...) {
  if (y->err) return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  char *out = NULL;
  int rc = mark ? asprintf(&out, "invalid YAML at line %zu, column %zu: %s", mark->line + 1,
                           mark->column + 1, msg)
                : asprintf(&out, "invalid YAML: %s", msg);
  y->err = rc < 0 ? NULL : out;
  if (!y->err) y->err = strdup("out of memory");
}

static void yt_parser_error(yt_t *y) {
  const yaml_parser_t *p = &y->parser;
  const char *problem = p->problem ? p->problem : "parse error";
  switch (p->error) {
  case YAML_MEMORY_ERROR:
    yt_fail(y, NULL, "out of memory");
    break;
  case YAML_READER_ERROR: {
    /* the reader reports a byte offset only: turn it into a line and column */
    yaml_mark_t m = {.index = p->problem_offset};
    for (size_t i = 0; i < p->problem_offset && i < y->len; i++) {
      if (y->text[i] == '\n') {
        m.line++;
        m.column = 0;
      } else if (((unsigned char)y->text[i] & 0xC0) != 0x80) {
        m.column++;
      }
    }
    if (p->problem_value != -1)
      yt_fail(y, &m, "%s (byte 0x%02x)", problem, (unsigned)p->problem_value & 0xffu);
    else
      yt_fail(y, &m, "%s", problem);
    break;
  }
  default:
    if (p->context)
      yt_fail(y, &p->problem_mark, "%s (%s that started at line %zu, column %zu)", problem,
              p->context, p->context_mark.line + 1, p->context_mark.column + 1);
    else
      yt_fail(y, &p->problem_mark, "%s", problem);
    break;
  }
}

static int yt_next(yt_t *y, yaml_event_t *ev) {
  if (!yaml_parser_parse(&y->parser, ev)) {
    yt_parser_error(y);
    return -1;
  }
  return 0;
}

static bool is_null_word(const char *s, size_t n) {
  return n == 0 || (n == 1 && s[0] == '~') ||
         (n == 4 && (!memcmp(s, "null", 4) || !memcmp(s, "Null", 4) || !memcmp(s, "NULL", 4)));
}

static int bool_word(const char *s, size_t n) {
  if (n == 4 && (!memcmp(s, "true", 4) || !memcmp(s, "True", 4) || !memcmp(s, "TRUE", 4))) return 1;
  if (n == 5 && (!memcmp(s, "false", 5) || !memcmp(s, "False", 5) || !memcmp(s, "FALSE", 5)))
    return 0;
  return -1;
}

/* Canonical decimal only ("007" and "+5" stay strings), so turning the integer back into
 * text for a string-typed key gives exactly what was written. */
static bool canonical_int(const char *s, size_t n, int64_t *out) {
  size_t i = 0;
  if (n && s[0] == '-') i = 1;
  if (i == n) return false;
  if (s[i] == '0' && n - i > 1) return false;
  for (size_t j = i; j < n; j++)
    if (s[j] < '0' || s[j] > '9') return false;
  if (n - i > 19) return false;
  char buf[24];
  memcpy(buf, s, n);
  buf[n] = '\0';
  errno = 0;
  long long v = strtoll(buf, NULL, 10);
  if (errno == ERANGE) return false;
  *out = (int64_t)v;
  return true;
}

/* [-+]?( [0-9]+ ( \. [0-9]* )? | \. [0-9]+ ) ( [eE] [-+]? [0-9]+ )?  with a '.' or an exponent */
static bool decimal_float(const char *s, size_t n, double *out) {
  size_t i = 0, digits = 0;
  bool frac_or_exp = false;
  if (i < n && (s[i] == '-' || s[i] == '+')) i++;
  while (i < n && s[i] >= '0' && s[i] <= '9') i++, digits++;
  if (i < n && s[i] == '.') {
    frac_or_exp = true;
    i++;
    while (i < n && s[i] >= '0' && s[i] <= '9') i++, digits++;
  }
  if (!digits) return false;
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    frac_or_exp = true;
    i++;
    if (i < n && (s[i] == '-' || s[i] == '+')) i++;
    size_t ed = 0;
    while (i < n && s[i] >= '0' && s[i] <= '9') i++, ed++;
    if (!ed) return false;
  }
  if (i != n || !frac_or_exp || n > 64) return false;
  char buf[72];
  memcpy(buf, s, n);
  buf[n] = '\0';
  *out = strtod(buf, NULL);
  return true;
}

static json_t *yt_string(yt_t *y, const yaml_event_t *ev) {
  const char *s = (const char *)ev->data.scalar.value;
  size_t n = ev->data.scalar.length;
  if (memchr(s, '\0', n)) {
    yt_fail(y, &ev->start_mark, "a NUL character is not allowed in a value");
    return NULL;
  }
  json_t *v = json_stringn(s, n);
  if (!v) yt_fail(y, &ev->start_mark, "a value is not valid UTF-8");
  return v;
}

static json_t *yt_scalar(yt_t *y, const yaml_event_t *ev) {
  const char *s = (const char *)ev->data.scalar.value;
  size_t n = ev->data.scalar.length;
  const char *tag = (const char *)ev->data.scalar.tag;
  bool plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
  if (tag && (!strcmp(tag, YAML_STR_TAG) || !strcmp(tag, "!"))) plain = false;
  if (plain) {
    int64_t i;
    double d;
    int b;
    if (is_null_word(s, n)) return json_null();
    if ((b = bool_word(s, n)) >= 0) return json_boolean(b);
    if (canonical_int(s, n, &i)) return json_integer(i);
    if (decimal_float(s, n, &d)) return json_real(d);
  }
  return yt_string(y, ev);
}

static json_t *yt_node(yt_t *y, yaml_event_t *ev);

static json_t *yt_sequence(yt_t *y) {
  json_t *arr = json_array();
  for (;;) {
    yaml_event_t ev;
    if (yt_next(y, &ev) < 0) break;
    if (ev.type == YAML_SEQUENCE_END_EVENT) {
      yaml_event_delete(&ev);
      return arr;
    }
    json_t *item = yt_node(y, &ev);
    if (!item || json_array_append_new(arr, item) < 0) break;
  }
  json_decref(arr);
  return NULL;
}

static json_t *yt_mapping(yt_t *y) {
  json_t *obj = json_object();
  for (;;) {
    yaml_event_t kev;
    if (yt_next(y, &kev) < 0) break;
    if (kev.type == YAML_MAPPING_END_EVENT) {
      yaml_event_delete(&kev);
      return obj;
    }
    if (kev.type != YAML_SCALAR_EVENT) {
      yt_fail(y, &kev.start_mark, "a mapping key must be a plain or quoted scalar");
      yaml_event_delete(&kev);
      break;
    }
    if (kev.data.scalar.anchor) {
      yt_fail(y, &kev.start_mark, "anchors (&%s) are not supported", (char *)kev.data.scalar.anchor);
      yaml_event_delete(&kev);
      break;
    }
    const char *k = (const char *)kev.data.scalar.value;
    size_t kn = kev.data.scalar.length;
    if (memchr(k, '\0', kn)) {
      yt_fail(y, &kev.start_mark, "a NUL character is not allowed in a key");
      yaml_event_delete(&kev);
      break;
    }
    json_t *probe = json_stringn(k, kn);
    if (!probe) {
      yt_fail(y, &kev.start_mark, "a key is not valid UTF-8");
      yaml_event_delete(&kev);
      break;
    }
    json_decref(probe);
    if (json_object_get(obj, k)) {
      yt_fail(y, &kev.start_mark, "duplicate key \"%.*s\"", (int)(kn > 64 ? 64 : kn), k);
      yaml_event_delete(&kev);
      break;
    }
    char *key = strndup(k, kn);
    yaml_event_delete(&kev);
    if (!key) {
      yt_fail(y, NULL, "out of memory");
      break;
    }
    yaml_event_t vev;
    if (yt_next(y, &vev) < 0) {
      free(key);
      break;
    }
    json_t *val = yt_node(y, &vev);
    int rc = val ? json_object_set_new(obj, key, val) : -1;
    free(key);
    if (rc < 0) break;
  }
  json_decref(obj);
  return NULL;
}

/* Consumes ev. */
static json_t *yt_node(yt_t *y, yaml_event_t *ev) {
  json_t *out = NULL;
  const char *anchor = NULL;
  if (ev->type == YAML_SCALAR_EVENT) anchor = (const char *)ev->data.scalar.anchor;
  if (ev->type == YAML_SEQUENCE_START_EVENT) anchor = (const char *)ev->data.sequence_start.anchor;
  if (ev->type == YAML_MAPPING_START_EVENT) anchor = (const char *)ev->data.mapping_start.anchor;
  if (anchor) {
    yt_fail(y, &ev->start_mark, "anchors (&%s) are not supported", anchor);
  } else if (ev->type == YAML_ALIAS_EVENT) {
    yt_fail(y, &ev->start_mark, "aliases (*%s) are not supported",
            (const char *)ev->data.alias.anchor);
  } else if (ev->type == YAML_SCALAR_EVENT) {
    out = yt_scalar(y, ev);
  } else if (ev->type == YAML_SEQUENCE_START_EVENT || ev->type == YAML_MAPPING_START_EVENT) {
    if (++y->depth > YT_MAX_DEPTH) {
      yt_fail(y, &ev->start_mark, "nested deeper than %d levels", YT_MAX_DEPTH);
    } else {
      out = ev->type == YAML_SEQUENCE_START_EVENT ? yt_sequence(y) : yt_mapping(y);
    }
    y->depth--;
  } else {
    yt_fail(y, &ev->start_mark, "unexpected YAML event");
  }
  yaml_event_delete(ev);
  return out;
}

static const char *kind_of(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_ARRAY: return "a list";
  case JSON_STRING: return "a string";
  case JSON_INTEGER:
  case JSON_REAL: return "a number";
  case JSON_TRUE:
  case JSON_FALSE: return "a boolean";
  default: return "a value";
  }
}

int ak_config_yaml_parse(const char *text, size_t len, json_t **out, char **err) {
  *out = NULL;
  *err = NULL;
  yt_t y = {.err = NULL, .depth = 0, .text = text, .len = len};
  if (!yaml_parser_initialize(&y.parser)) {
    *err = strdup("out of memory");
    return -1;
  }
  yaml_parser_set_input_string(&y.parser, (const unsigned char *)text, len);
  json_t *root = NULL;
  bool have_doc = false;
  for (;;) {
    yaml_event_t ev;
    if (yt_next(&y, &ev) < 0) break;
    yaml_event_type_t t = ev.type;
    if (t == YAML_STREAM_END_EVENT) {
      yaml_event_delete(&ev);
      break;
    }
    if (t == YAML_DOCUMENT_START_EVENT) {
      if (have_doc) {
        yt_fail(&y, &ev.start_mark, "only one YAML document is allowed");
        yaml_event_delete(&ev);
        break;
      }
      have_doc = true;
      yaml_event_delete(&ev);
      yaml_event_t nev;
      if (yt_next(&y, &nev) < 0) break;
      yaml_mark_t mark = nev.start_mark;
      root = yt_node(&y, &nev);
      if (!root) break;
      if (json_is_null(root)) {
        json_decref(root);
        root = json_object();
      } else if (!json_is_object(root)) {
        yt_fail(&y, &mark, "the top level must be a mapping, got %s", kind_of(root));
        break;
      }
      continue;
    }
    yaml_event_delete(&ev); /* stream start, document end */
  }
  yaml_parser_delete(&y.parser);
  if (y.err) {
    json_decref(root);
    *err = y.err;
    return -1;
  }
  *out = root ? root : json_object();
  return 0;
}
