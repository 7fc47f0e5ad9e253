/* Group marker codec (store/marker.h). */
#include <string.h>
#include "store/keys.h"
#include "store/marker.h"

size_t ak_marker_size(uint32_t count, const ak_marker_set_in_t *sets, size_t nsets) {
  size_t n = 1 + 8 + 4 + 2 + 2 * (size_t)count;
  for (size_t i = 0; i < nsets; i++) {
    n += 1 + sets[i].tenant_len + 1 + sets[i].source_len + 1;
    for (size_t j = 0; j < sets[i].nsinks; j++) n += 1 + strlen(sets[i].types[j]);
  }
  return n;
}

size_t ak_marker_encode(uint8_t *out, size_t cap, int64_t committed_at_ms, uint32_t count,
                        const ak_marker_set_in_t *sets, size_t nsets, const uint16_t *hook_sets) {
  if (nsets > AK_MARKER_MAX_SETS || cap < ak_marker_size(count, sets, nsets)) return 0;
  uint8_t *p = out;
  *p++ = 1;
  ak_put_u64(p, (uint64_t)committed_at_ms);
  p += 8;
  ak_put_u32(p, count);
  p += 4;
  ak_put_u16(p, (uint16_t)nsets);
  p += 2;
  for (size_t i = 0; i < nsets; i++) {
    const ak_marker_set_in_t *s = &sets[i];
    if (s->tenant_len > 255 || s->source_len > 255 || s->nsinks > AK_MARKER_MAX_SINKS) return 0;
    *p++ = (uint8_t)s->tenant_len;
    memcpy(p, s->tenant, s->tenant_len);
    p += s->tenant_len;
    *p++ = (uint8_t)s->source_len;
    memcpy(p, s->source, s->source_len);
    p += s->source_len;
    *p++ = (uint8_t)s->nsinks;
    for (size_t j = 0; j < s->nsinks; j++) {
      size_t tl = strlen(s->types[j]);
      if (tl > 255) return 0;
      *p++ = (uint8_t)tl;
      memcpy(p, s->types[j], tl);
      p += tl;
    }
  }
  for (uint32_t i = 0; i < count; i++) {
    if (hook_sets[i] >= nsets) return 0;
    ak_put_u16(p, hook_sets[i]);
    p += 2;
  }
  return (size_t)(p - out);
}

/* Reads one set at *pos, within end. */
static int read_set(const uint8_t **pos, const uint8_t *end, ak_marker_set_t *s) {
  const uint8_t *p = *pos;
  if (end - p < 1) return -1;
  s->tenant_len = *p++;
  if ((size_t)(end - p) < s->tenant_len + 1) return -1;
  s->tenant = (const char *)p;
  p += s->tenant_len;
  s->source_len = *p++;
  if ((size_t)(end - p) < s->source_len + 1) return -1;
  s->source = (const char *)p;
  p += s->source_len;
  s->nsinks = *p++;
  if (s->nsinks > AK_MARKER_MAX_SINKS) return -1;
  s->types = p;
  for (unsigned j = 0; j < s->nsinks; j++) {
    if (end - p < 1) return -1;
    size_t tl = *p++;
    if ((size_t)(end - p) < tl) return -1;
    p += tl;
  }
  *pos = p;
  return 0;
}

int ak_marker_decode(const uint8_t *v, size_t len, ak_marker_t *m) {
  if (len < 15 || v[0] != 1) return -1;
  const uint8_t *end = v + len, *p = v + 1;
  m->committed_at_ms = (int64_t)ak_get_u64(p);
  m->count = ak_get_u32(p + 8);
  m->nsets = ak_get_u16(p + 12);
  p += 14;
  m->sets_at = p;
  for (unsigned i = 0; i < m->nsets; i++) {
    ak_marker_set_t s;
    if (read_set(&p, end, &s) != 0) return -1;
  }
  if ((size_t)(end - p) != 2 * (size_t)m->count) return -1;
  m->hooks = p;
  for (uint32_t i = 0; i < m->count; i++)
    if (ak_get_u16(p + 2 * (size_t)i) >= m->nsets) return -1;
  return 0;
}

int ak_marker_next_set(const ak_marker_t *m, const uint8_t **pos, ak_marker_set_t *s) {
  if (!*pos) *pos = m->sets_at;
  if (*pos >= m->hooks) return -1;
  return read_set(pos, m->hooks, s);
}

unsigned ak_marker_hook_set(const ak_marker_t *m, uint32_t i) { return ak_get_u16(m->hooks + 2 * (size_t)i); }

void ak_marker_set_type(const ak_marker_set_t *s, unsigned i, const char **type, size_t *len) {
  const uint8_t *p = s->types;
  for (unsigned j = 0; j < i; j++) p += 1 + *p;
  *len = *p;
  *type = (const char *)p + 1;
}
