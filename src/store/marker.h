/* The group marker (docs/storage.md, "The hook log"): one per commit, beside the commit's
 * hook records, saying whose hooks they are and which sinks each was acked for, so the
 * dispatcher learns its pending deliveries from a few bytes per hook instead of a row per
 * delivery, and rebuilds them at start without reading a record. Owns the encoding only.
 *
 * index CF 'g' first_seq:u64 ->
 *   u8 version=1 | u64 committed_at_ms | u32 count | u16 nsets
 *   nsets x (str8 tenant | str8 source | u8 nsinks | nsinks x str8 sink type)
 *   count x u16 set          (hook first_seq + i belongs to set `set`)
 * The commit's hooks have the seqs first_seq .. first_seq + count - 1. */
#ifndef AK_STORE_MARKER_H
#define AK_STORE_MARKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AK_MARKER_MAX_SINKS 32 /* sinks of one source, at most (a bit each in the dispatcher) */
#define AK_MARKER_MAX_SETS 65535

/* What the encoder is given per set. */
typedef struct ak_marker_set_in {
  const char *tenant;
  size_t tenant_len;
  const char *source;
  size_t source_len;
  size_t nsinks;
  const char *const *types; /* nsinks NUL-terminated sink types */
} ak_marker_set_in_t;

/* Bytes the encoding takes. */
size_t ak_marker_size(uint32_t count, const ak_marker_set_in_t *sets, size_t nsets);
/* Encode into out (at least ak_marker_size bytes); returns the length, 0 when a field does
 * not fit its width (more sets or sinks than allowed, a name over 255 bytes). */
size_t ak_marker_encode(uint8_t *out, size_t cap, int64_t committed_at_ms, uint32_t count,
                        const ak_marker_set_in_t *sets, size_t nsets, const uint16_t *hook_sets);

/* A decoded set: points into the value. */
typedef struct ak_marker_set {
  const char *tenant;
  size_t tenant_len;
  const char *source;
  size_t source_len;
  unsigned nsinks;
  const uint8_t *types; /* nsinks x (u8 len, bytes) */
} ak_marker_set_t;

typedef struct ak_marker {
  int64_t committed_at_ms;
  uint32_t count;
  unsigned nsets;
  const uint8_t *sets_at; /* the first set's bytes */
  const uint8_t *hooks;   /* count x u16 */
} ak_marker_t;

/* Check the whole value (every length against the value, every hook's set in range) and
 * point m into it. 0, or -1 when it is damaged. */
int ak_marker_decode(const uint8_t *v, size_t len, ak_marker_t *m);
/* The sets in order: call with *pos = 0, then again while it returns 0 (after a
 * successful decode it cannot fail before nsets sets). */
int ak_marker_next_set(const ak_marker_t *m, const uint8_t **pos, ak_marker_set_t *s);
/* Hook i's set index (i < count). */
unsigned ak_marker_hook_set(const ak_marker_t *m, uint32_t i);
/* The type of sink i of a set (i < nsinks). */
void ak_marker_set_type(const ak_marker_set_t *s, unsigned i, const char **type, size_t *len);

#endif
