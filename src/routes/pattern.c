/* Route patterns (pattern.h): compiling, the path rule and matching. Matching walks the
 * path once, segment by segment; it never allocates and never decodes: a pattern and a
 * path are compared as bytes, and the bytes that could make two different texts mean the
 * same path (an encoded slash, dot segments, empty segments) are refused on both sides. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "routes/pattern.h"

static bool has_encoded_slash(const char *s, size_t n) {
  for (size_t i = 0; i + 2 < n; i++)
    if (s[i] == '%' && s[i + 1] == '2' && (s[i + 2] == 'F' || s[i + 2] == 'f')) return true;
  return false;
}

static bool dot_segment(const char *s, size_t n) { return (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'); }

/* The checks a pattern and a request path share. NULL when fine, else why. */
static const char *path_problem(const char *s, size_t n) {
  if (n == 0 || s[0] != '/') return "must start with /";
  if (has_encoded_slash(s, n)) return "must not contain %2F";
  if (n == 1) return NULL;
  size_t i = 1;
  for (;;) {
    size_t st = i;
    while (i < n && s[i] != '/') i++;
    if (i == st) return "must not contain an empty segment";
    if (dot_segment(s + st, i - st)) return "must not contain a . or .. segment";
    for (size_t k = st; k < i; k++)
      if ((unsigned char)s[k] <= 0x20 || (unsigned char)s[k] >= 0x7f || s[k] == '?' || s[k] == '#')
        return "must be printable ASCII without spaces, ? or #";
    if (i == n) return NULL;
    i++; /* past '/' */
  }
}

bool ak_rpath_valid(const char *path, size_t len) { return path_problem(path, len) == NULL; }

ak_rpattern_t *ak_rpattern_compile(const char *s, const char **why) {
  size_t n = s ? strlen(s) : 0;
  const char *w = NULL;
  if (n > AK_RPATTERN_MAX_LEN) w = "is longer than 1024 bytes";
  else w = path_problem(s ? s : "", n);
  if (w) {
    *why = w;
    return NULL;
  }
  ak_rpattern_t *p = calloc(1, sizeof *p);
  if (!p || !(p->src = strdup(s)) || !(p->buf = strdup(s))) {
    if (p) free(p->src);
    free(p);
    *why = "out of memory";
    return NULL;
  }
  char *b = p->buf;
  size_t i = 1;
  while (n > 1 && i <= n) {
    size_t st = i;
    while (i < n && b[i] != '/') i++;
    b[i] = 0;
    if (p->nseg == AK_RPATTERN_MAX_SEGS) {
      w = "has more than 32 segments";
      break;
    }
    ak_rseg_t *g = &p->seg[p->nseg++];
    g->text = b + st;
    g->len = i - st;
    if (b[st] == ':') {
      g->kind = AK_RSEG_PARAM;
      g->text++;
      g->len--;
      if (!g->len) w = "has a : parameter without a name";
      for (size_t k = 0; k < g->len && !w; k++) {
        char c = g->text[k];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'))
          w = "has a : parameter name outside [A-Za-z0-9_]";
      }
    } else if (g->len == 1 && b[st] == '*') {
      g->kind = AK_RSEG_STAR;
      if (i != n) w = "may have * only as its last segment";
    } else {
      g->kind = AK_RSEG_LIT;
      if (memchr(g->text, '*', g->len)) w = "may have * only as a whole last segment";
      if (memchr(g->text, ':', g->len)) w = "may have : only at the start of a segment";
    }
    if (w) break;
    i++;
  }
  if (w) {
    ak_rpattern_free(p);
    *why = w;
    return NULL;
  }
  return p;
}

void ak_rpattern_free(ak_rpattern_t *p) {
  if (!p) return;
  free(p->src);
  free(p->buf);
  free(p);
}

bool ak_rpattern_match(const ak_rpattern_t *p, const char *path, size_t len) {
  if (len == 1) return p->nseg == 0; /* "/" */
  if (p->nseg == 0) return false;
  size_t i = 1;
  for (size_t k = 0; k < p->nseg; k++) {
    if (i > len) return false; /* the path ran out before the pattern */
    const ak_rseg_t *g = &p->seg[k];
    if (g->kind == AK_RSEG_STAR) return true; /* one or more: at least this one is left */
    size_t st = i;
    while (i < len && path[i] != '/') i++;
    if (g->kind == AK_RSEG_LIT && (i - st != g->len || memcmp(path + st, g->text, g->len) != 0)) return false;
    i++; /* past '/' (or past the end) */
  }
  return i > len; /* every path segment used */
}

static int rank(ak_rseg_kind_t k) { return k == AK_RSEG_LIT ? 0 : k == AK_RSEG_PARAM ? 1 : 2; }

int ak_rpattern_cmp(const ak_rpattern_t *a, const ak_rpattern_t *b) {
  size_t n = a->nseg < b->nseg ? a->nseg : b->nseg;
  for (size_t i = 0; i < n; i++) {
    int d = rank(a->seg[i].kind) - rank(b->seg[i].kind);
    if (d) return d;
  }
  if (a->nseg != b->nseg) return a->nseg > b->nseg ? -1 : 1;
  return 0;
}
