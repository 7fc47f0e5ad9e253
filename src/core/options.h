/* Option tables: the one description of a config key (type, default, bounds, doc, and
 * where its value goes in the owning module's typed struct). Owns the declaration format
 * only. The engine (config.c) validates against these rows and binds the values,
 * print-config walks and redacts by them, `ankusa options --markdown` prints them as the
 * reference in docs/configuration.md. Never holds values. */
#ifndef AK_CORE_OPTIONS_H
#define AK_CORE_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
  AK_OPT_STRING,   /* a string */
  AK_OPT_INT,      /* an integer; digit strings accepted */
  AK_OPT_BOOL,     /* a boolean; "true"/"false" strings accepted (any case) */
  AK_OPT_NUMBER,   /* int, float or numeric string */
  AK_OPT_ENUM,     /* a string out of enum_vals ("a|b|c") */
  AK_OPT_STRLIST,  /* a list of strings, or a comma-separated string */
  AK_OPT_MAP,      /* a mapping validated by `children` */
  AK_OPT_MAP_OR_NAME, /* a mapping validated by `children`, or a string: shorthand for
                         {<first child key>: string} (sources.<id>.dedupe: github) */
  AK_OPT_ANY_MAP,  /* a mapping of string -> string (free keys, e.g. http headers) */
  AK_OPT_SECRETS,  /* a non-empty string or a list of 1..8 non-empty strings */
  AK_OPT_IP,       /* an IPv4 or IPv6 address literal (inet_pton), never a host name */
  AK_OPT_URL_PREFIX, /* a URL path prefix: split on "/", empty parts dropped, "" = none */
  AK_OPT_MAP_OF,   /* a mapping of id ([A-Za-z0-9_-]{1,64}) -> mapping validated by `children` */
  AK_OPT_PLUGIN,    /* a mapping whose `type` names a plug-in of .kind; the other keys are
                       that plug-in's rows (absent, null or {} = the kind's none_type) */
  AK_OPT_PLUGIN_LIST, /* a non-empty list of such mappings (sources.<id>.sinks) */
  AK_OPT_LIST_OF,  /* a list of mappings, each validated by `children` (admin.principals);
                      absent or null = [] */
} ak_opt_type_t;

enum {
  AK_OPTF_SECRET = 1u << 0,      /* value never printed: print-config shows "[REDACTED]" */
  AK_OPTF_REQUIRED = 1u << 1,    /* missing -> `missing required key` */
  AK_OPTF_NULLABLE = 1u << 2,    /* null is a legal value (and the default when def is NULL) */
  AK_OPTF_UNSUPPORTED = 1u << 3, /* a known Ankusa key this build does not implement yet */
  AK_OPTF_HAS_MIN = 1u << 4,
  AK_OPTF_HAS_MAX = 1u << 5,
  AK_OPTF_ID = 1u << 6,          /* STRING that must match [A-Za-z0-9_-]{1,64} */
};

/* Bounds: INT and NUMBER compare the value; STRING, STRLIST and SECRETS compare the
 * length / item count (HAS_MIN with min 1 = "must not be empty").
 * env may list fallbacks separated by '|' ("ANKUSA_HTTP_PORT|PORT": the first one set
 * and non-empty wins). */

typedef struct ak_opt {
  const char *key;              /* key inside its mapping */
  ak_opt_type_t type;
  const char *def;              /* default as YAML-ish text, NULL = none */
  int64_t min, max;             /* bounds for INT (with HAS_MIN / HAS_MAX) */
  const char *enum_vals;        /* "a|b|c" for ENUM (also validates STRLIST items when set) */
  unsigned flags;
  const char *env;              /* ANKUSA_* override, or NULL */
  const char *doc;              /* one line for docs and print-config --docs */
  const struct ak_opt *children; /* for MAP: rows, terminated by a row with key == NULL */
  const char *enum_unsupported; /* subset of enum_vals known to Ankusa but refused by this
                                   build with "not supported yet" ("a|b"), or NULL; on a
                                   BOOL, "true" refuses true (a feature switch) */
  const char *kind;             /* PLUGIN, PLUGIN_LIST: the plug-in kind ("sink", "verify") */
  /* Binding (AK_AT): the value is stored at .off in the owning module's typed struct,
   * as the row's type says: STRING, IP, URL_PREFIX -> const char * (NULL when null);
   * INT -> int64_t; NUMBER -> double; BOOL -> bool; ENUM -> an int-sized field holding
   * the index in enum_vals; STRLIST -> ak_strlist_t; MAP -> its children bind at .off
   * (the start of a nested struct); every other type -> const json_t *. Strings and
   * trees are borrowed from the effective tree: they live as long as the config (null
   * reads as 0, NULL or false). */
  size_t off;
  bool bound;
} ak_opt_t;

#define AK_AT(type, field) .off = offsetof(type, field), .bound = true

/* A bound STRLIST: the strings live in the effective tree. */
typedef struct ak_strlist {
  const char **v;
  size_t n;
} ak_strlist_t;

#endif
