/* UUIDv7 ids (RFC 9562): 48-bit Unix ms, then a 12-bit counter in rand_a so ids made in
 * one process are strictly increasing, then 62 random bits. A stored hook's id is then
 * sealed by the writer: its 62 rand_b bits become its seq XOR a keyed hash of the id's
 * first 8 bytes, so the id names its hook without an index key, and without a store's
 * key neither the seq nor the hook count can be read from it (docs/storage.md, "Hook
 * ids"). Owns the generator state, which lives in the instance (no global). */
#ifndef AK_CORE_IDS_H
#define AK_CORE_IDS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AK_UUID_STR_LEN 37

typedef struct ak_idgen {
  _Atomic uint64_t last;  /* (ms << 12) | counter of the last id handed out */
} ak_idgen_t;

void ak_idgen_init(ak_idgen_t *g);
/* now_ms: the clock reading to stamp; ids stay increasing even if it goes back. */
void ak_uuid7_new(ak_idgen_t *g, int64_t now_ms, uint8_t out[16]);
void ak_uuid_format(const uint8_t id[16], char out[AK_UUID_STR_LEN]);
/* Accepts the canonical 36-char form, any hex case. */
bool ak_uuid_parse(const char *s, uint8_t out[16]);
int64_t ak_uuid7_ms(const uint8_t id[16]);

/* SipHash-2-4 of m under a 128-bit key (the PRF that seals ids). */
uint64_t ak_siphash24(const uint8_t key[16], const uint8_t *m, size_t n);

#define AK_ID_KEY_LEN_BYTES 16
#define AK_SEALED_SEQ_MAX ((1ull << 62) - 1)
/* Replace id's rand_b with seq sealed under key (version, variant, ms and counter stay).
 * false, id untouched, when seq does not fit 62 bits. */
bool ak_uuid7_seal(const uint8_t key[16], uint8_t id[16], uint64_t seq);
/* The seq a sealed id carries. For an id that was never sealed under key it is some
 * number: a caller must check that the hook at that seq has this very id. */
uint64_t ak_uuid7_unseal(const uint8_t key[16], const uint8_t id[16]);

#endif
