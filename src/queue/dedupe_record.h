/* The dedupe CF's record codec (queue/dedupe.c owns the index; docs/storage.md, "Dedupe").
 * No store, no locks: the bytes in and out, so the decoder can be fuzzed on its own.
 *
 *   v2 (a commit's keys):  'e' at:64 seq:64  ->  u8 2, then per key at:64 id:128 u16 len scope
 *   v1 (one key, before):  'e' at:64 scope   ->  u8 1, id:128
 *
 * scope = u8 len tenant, u8 len source, u8 len key. A v2 record key's `at` is the latest
 * of its keys' expiries; its seq is the record's first hook seq. */
#ifndef AK_QUEUE_DEDUPE_RECORD_H
#define AK_QUEUE_DEDUPE_RECORD_H

#include <stddef.h>
#include <stdint.h>

#define AK_DEDUPE_VALUE_V1 1
#define AK_DEDUPE_VALUE_V1_LEN 17   /* u8 version, 16 id */
#define AK_DEDUPE_VALUE_V2 2
#define AK_DEDUPE_ENTRY_FIXED (8 + 16 + 2)
#define AK_DEDUPE_GROUP_KEY_LEN 17  /* 'e' at:64 seq:64 */
#define AK_DEDUPE_SCOPE_MAX (3 + 255 * 3)
#define AK_DEDUPE_EKEY_MAX (9 + AK_DEDUPE_SCOPE_MAX)

/* One key of a record, pointing into the record. */
typedef struct {
  int64_t at;
  const uint8_t *id;    /* 16 bytes */
  const uint8_t *scope;
  size_t scope_len;
} ak_dedupe_entry_t;

/* A scope's parts: 0 with the tenant's bytes, or -1 unless it is exactly three
 * length-prefixed parts. */
int ak_dedupe_scope_parse(const uint8_t *s, size_t n, const uint8_t **tenant, size_t *tl);

/* The keys of one record (k, v), the whole record checked before the first is handed
 * out: a damaged record yields none. Calls fn(entry, ctx) (fn may be NULL) for each until
 * it returns non-zero. *rec_at gets the record key's expiry (the one it is swept at).
 * Returns the number of keys, or -1 when (k, v) is not a dedupe record. Every key of a
 * v2 record has 0 < at <= the record's at. */
long ak_dedupe_record_each(const uint8_t *k, size_t kl, const uint8_t *v, size_t vl, int64_t *rec_at,
                           int (*fn)(const ak_dedupe_entry_t *, void *), void *ctx);

/* A v2 record key. */
void ak_dedupe_group_key(uint8_t out[AK_DEDUPE_GROUP_KEY_LEN], int64_t last_at, uint64_t seq);
/* One v2 entry at out (AK_DEDUPE_ENTRY_FIXED + scope_len bytes); returns its length. */
size_t ak_dedupe_entry_put(uint8_t *out, int64_t at, const uint8_t id[16], const uint8_t *scope, size_t scope_len);

/* The v1 record key (one key per record, written before v2; still read and swept):
 * 'e' at:64 scope. Returns its length (AK_DEDUPE_EKEY_MAX at most). */
size_t ak_dedupe_ekey(uint8_t *out, int64_t at_ms, const uint8_t *scope, size_t scope_len);
/* Parse a v1 key; scope points into k. 0, or -1 when it is not one. */
int ak_dedupe_ekey_parse(const uint8_t *k, size_t klen, int64_t *at_ms, const uint8_t **scope, size_t *scope_len);

#endif
