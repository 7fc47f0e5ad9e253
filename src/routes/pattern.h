/* Route path patterns: compile a pattern ("/webhooks/:tenant/github", or "/hooks/" plus a
 * star segment) and match a request path against it, and the rule every path must pass
 * (a pattern at config or API time, a request path at match time): starts with '/', no
 * empty segment, no "." or ".." segment, no %2F (an encoded slash would let one segment
 * pose as two). A pattern segment is a literal, ":name" (exactly one non-empty segment)
 * or, last only, "*" (one or more segments). Pure: no state, no I/O; untrusted request
 * bytes only ever meet ak_rpath_valid and ak_rpattern_match. */
#ifndef AK_ROUTES_PATTERN_H
#define AK_ROUTES_PATTERN_H

#include <stdbool.h>
#include <stddef.h>

#define AK_RPATTERN_MAX_LEN 1024
#define AK_RPATTERN_MAX_SEGS 32

typedef enum { AK_RSEG_LIT = 0, AK_RSEG_PARAM, AK_RSEG_STAR } ak_rseg_kind_t;

typedef struct ak_rseg {
  ak_rseg_kind_t kind;
  const char *text; /* LIT: the literal; PARAM: the name (after ':'); into the pattern's copy */
  size_t len;
} ak_rseg_t;

typedef struct ak_rpattern {
  char *src;           /* the pattern as given */
  char *buf;           /* segment texts (NUL-separated) */
  ak_rseg_t seg[AK_RPATTERN_MAX_SEGS];
  size_t nseg;         /* 0: the pattern "/" */
} ak_rpattern_t;

/* NULL with *why (a static phrase) when s is not a valid pattern. */
ak_rpattern_t *ak_rpattern_compile(const char *s, const char **why);
void ak_rpattern_free(ak_rpattern_t *p);
/* Whether a request path (raw, as received, without the query) may be routed at all. */
bool ak_rpath_valid(const char *path, size_t len);
/* The path (already ak_rpath_valid) against the pattern. */
bool ak_rpattern_match(const ak_rpattern_t *p, const char *path, size_t len);
/* Orders patterns most specific first: segment by segment a literal beats a :param beats
 * "*", then the longer pattern first; 0 when they rank the same. */
int ak_rpattern_cmp(const ak_rpattern_t *a, const ak_rpattern_t *b);

#endif
