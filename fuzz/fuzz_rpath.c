/* libFuzzer harness for the route guard's path rule and pattern matching (routes/pattern.c),
 * which see every untrusted request path first when routes.enabled is on.
 *
 * Input: split at the first '\n': the pattern text, then the request path (each cut at a
 * NUL). The answers of ak_rpath_valid and ak_rpattern_match are compared with a plain
 * re-statement of the rules written here (split on '/', compare segment lists), so a
 * wrong answer is caught, not only a crash. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "routes/pattern.h"

#define CHECK(cond)                                                                      \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      fprintf(stderr, "fuzz_rpath: invariant failed at line %d: %s\n", __LINE__, #cond); \
      abort();                                                                           \
    }                                                                                    \
  } while (0)

#define MAXSEG 4096

/* Splits s (after its leading '/') into segments; -1 when it is not a valid path. */
static int split(const char *s, size_t n, const char **seg, size_t *len) {
  if (n == 0 || s[0] != '/') return -1;
  for (size_t i = 0; i + 2 < n; i++)
    if (s[i] == '%' && s[i + 1] == '2' && (s[i + 2] == 'F' || s[i + 2] == 'f')) return -1;
  if (n == 1) return 0;
  int k = 0;
  size_t st = 1;
  for (size_t i = 1; i <= n; i++) {
    if (i < n && s[i] != '/') {
      unsigned char c = (unsigned char)s[i];
      if (c <= 0x20 || c >= 0x7f || c == '?' || c == '#') return -1;
      continue;
    }
    size_t l = i - st;
    if (l == 0) return -1;
    if ((l == 1 && s[st] == '.') || (l == 2 && s[st] == '.' && s[st + 1] == '.')) return -1;
    if (k == MAXSEG) return -1;
    seg[k] = s + st;
    len[k++] = l;
    st = i + 1;
  }
  return k;
}

static const char *pseg[MAXSEG], *qseg[MAXSEG];
static size_t plen[MAXSEG], qlen[MAXSEG];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *buf = malloc(size + 1);
  if (!buf) return 0;
  memcpy(buf, data, size);
  buf[size] = 0;
  char *nl = memchr(buf, '\n', size);
  char *pat = buf, *path = nl ? nl + 1 : buf + size;
  if (nl) *nl = 0;
  size_t pathlen = strlen(path);

  int qn = split(path, pathlen, qseg, qlen);
  CHECK(ak_rpath_valid(path, pathlen) == (qn >= 0));

  const char *why = NULL;
  ak_rpattern_t *p = ak_rpattern_compile(pat, &why);
  int pn = split(pat, strlen(pat), pseg, plen);
  if (!p) {
    CHECK(why != NULL);
  } else {
    CHECK(pn >= 0 && (size_t)pn == p->nseg && strlen(pat) <= AK_RPATTERN_MAX_LEN);
    if (qn >= 0) {
      bool want = false;
      bool star = pn > 0 && plen[pn - 1] == 1 && pseg[pn - 1][0] == '*';
      if (star ? qn >= pn : qn == pn) {
        want = true;
        for (int i = 0; i < (star ? pn - 1 : pn) && want; i++) {
          if (pseg[i][0] == ':') continue; /* one non-empty segment: every split segment is */
          want = plen[i] == qlen[i] && !memcmp(pseg[i], qseg[i], plen[i]);
        }
      }
      CHECK(ak_rpattern_match(p, path, pathlen) == want);
    }
    ak_rpattern_free(p);
  }
  free(buf);
  return 0;
}
