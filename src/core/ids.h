/* UUIDv7 ids (RFC 9562): 48-bit Unix ms, then a 12-bit counter in rand_a so ids made in
 * one process are strictly increasing, then 62 random bits. Owns the generator state,
 * which lives in the instance (no global). */
#ifndef AK_CORE_IDS_H
#define AK_CORE_IDS_H

#include <stdatomic.h>
#include <stdbool.h>
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

#endif
