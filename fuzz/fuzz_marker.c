/* libFuzzer harness for the group marker codec (store/marker.c): what the dispatcher
 * reads at every start (the hook log from m:dlow) and with every commit, where a damaged
 * marker must be refused whole, never half-read. Properties:
 *  1. decode of arbitrary bytes either fails, or every set and every hook's set index it
 *     hands out lies inside the value, and re-encoding what it read gives the same bytes
 *     (one spelling per marker);
 *  2. a strict prefix of a value that decodes never decodes.
 * The value is an exact-size heap copy, so ASan sees any overread. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "store/marker.h"

#define CHECK(cond)                                                                         \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      fprintf(stderr, "fuzz_marker: invariant failed at line %d: %s\n", __LINE__, #cond);   \
      abort();                                                                              \
    }                                                                                       \
  } while (0)

static int inside(const void *p, size_t n, const uint8_t *base, size_t len) {
  const uint8_t *q = p;
  return q >= base && q <= base + len && n <= (size_t)(base + len - q);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *v = malloc(size ? size : 1);
  if (!v) return 0;
  memcpy(v, data, size);
  ak_marker_t m;
  if (ak_marker_decode(v, size, &m) == 0) {
    ak_marker_set_in_t *in = calloc(m.nsets ? m.nsets : 1, sizeof *in);
    char **names = calloc((size_t)m.nsets * (AK_MARKER_MAX_SINKS + 2) + 1, sizeof *names);
    const char **types = calloc((size_t)m.nsets * AK_MARKER_MAX_SINKS + 1, sizeof *types);
    uint16_t *hs = calloc(m.count ? m.count : 1, sizeof *hs);
    CHECK(in && names && types && hs);
    const uint8_t *pos = NULL;
    size_t nn = 0, nt = 0;
    for (unsigned i = 0; i < m.nsets; i++) {
      ak_marker_set_t s;
      CHECK(ak_marker_next_set(&m, &pos, &s) == 0);
      CHECK(inside(s.tenant, s.tenant_len, v, size) && inside(s.source, s.source_len, v, size));
      CHECK(s.nsinks <= AK_MARKER_MAX_SINKS);
      in[i] = (ak_marker_set_in_t){.tenant = s.tenant, .tenant_len = s.tenant_len, .source = s.source,
                                   .source_len = s.source_len, .nsinks = s.nsinks, .types = types + nt};
      for (unsigned j = 0; j < s.nsinks; j++) {
        const char *ty;
        size_t tl;
        ak_marker_set_type(&s, j, &ty, &tl);
        CHECK(inside(ty, tl, v, size));
        names[nn] = strndup(ty, tl);
        CHECK(names[nn]);
        types[nt++] = names[nn++];
      }
    }
    for (uint32_t i = 0; i < m.count; i++) {
      hs[i] = (uint16_t)ak_marker_hook_set(&m, i);
      CHECK(hs[i] < m.nsets);
    }
    /* a type holding a NUL byte cannot be spelled again by strlen: skip the round trip */
    int nul = 0;
    pos = NULL;
    for (unsigned i = 0; i < m.nsets; i++) {
      ak_marker_set_t s;
      ak_marker_next_set(&m, &pos, &s);
      for (unsigned j = 0; j < s.nsinks; j++) {
        const char *ty;
        size_t tl;
        ak_marker_set_type(&s, j, &ty, &tl);
        if (memchr(ty, 0, tl)) nul = 1;
      }
    }
    if (!nul) {
      size_t cap = ak_marker_size(m.count, in, m.nsets);
      uint8_t *out = malloc(cap ? cap : 1);
      CHECK(out);
      size_t n = ak_marker_encode(out, cap, m.committed_at_ms, m.count, in, m.nsets, hs);
      CHECK(n == size && memcmp(out, v, size) == 0);
      free(out);
    }
    for (size_t k = 1; k < size; k++) {
      ak_marker_t p;
      CHECK(ak_marker_decode(v, size - k, &p) != 0);
    }
    for (size_t i = 0; i < nn; i++) free(names[i]);
    free(in);
    free(names);
    free(types);
    free(hs);
  }
  free(v);
  return 0;
}
