/* Key layout of the node's RocksDB store (docs/storage.md). All integers big-endian so
 * byte order is sort order. Owns encoding only; never opens the database. */
#ifndef AK_STORE_KEYS_H
#define AK_STORE_KEYS_H

#include <stddef.h>
#include <stdint.h>

/* column families, in open order */
enum { AK_CF_DEFAULT = 0, AK_CF_HOOKS, AK_CF_DELIVERIES, AK_CF_INDEX, AK_CF_QUARANTINE, AK_CF_COUNT };
extern const char *const ak_cf_names[AK_CF_COUNT];

/* default CF meta keys */
#define AK_KEY_NEXT_SEQ "m:next_seq"
#define AK_KEY_HOOK_COUNT "m:hook_count"
#define AK_KEY_READY_PROBE "m:ready_probe"
#define AK_KEY_STORE_ID "m:store_id"
#define AK_KEY_FORMAT "m:format"
/* m:quarantine_bytes:<w> (writer thread w) and m:quarantine_bytes:admin (purges): int64
 * two's complement running totals of pen body bytes; the pen holds their sum */
#define AK_KEY_QUARANTINE_BYTES "m:quarantine_bytes"

/* index CF tags */
#define AK_IDX_DUE 'd'     /* 'd' at:64 seq:64 sink:16 -> "" */
#define AK_IDX_ARCHIVE 'a' /* 'a' seq:64 -> size:32 */
#define AK_IDX_ID 'i'      /* 'i' id:128 -> seq:64 */

/* quarantine CF tags: both keys 'x' received_at:64 id:128 (oldest first) */
#define AK_PEN_SUMMARY 's' /* -> summary v1 (ak_pen_summary_encode) */
#define AK_PEN_BODY 'b'    /* -> the encoded envelope record, seq 0 */

void ak_put_u16(uint8_t *p, uint16_t v);
void ak_put_u32(uint8_t *p, uint32_t v);
void ak_put_u64(uint8_t *p, uint64_t v);
uint16_t ak_get_u16(const uint8_t *p);
uint32_t ak_get_u32(const uint8_t *p);
uint64_t ak_get_u64(const uint8_t *p);

#define AK_HOOK_KEY_LEN 8
#define AK_DELIVERY_KEY_LEN 10
#define AK_DUE_KEY_LEN 19
#define AK_ARCHIVE_KEY_LEN 9
#define AK_ID_KEY_LEN 17
#define AK_PEN_KEY_LEN 25

void ak_key_hook(uint8_t out[AK_HOOK_KEY_LEN], uint64_t seq);
void ak_key_delivery(uint8_t out[AK_DELIVERY_KEY_LEN], uint64_t seq, uint16_t sink);
void ak_key_due(uint8_t out[AK_DUE_KEY_LEN], int64_t at_ms, uint64_t seq, uint16_t sink);
void ak_key_archive(uint8_t out[AK_ARCHIVE_KEY_LEN], uint64_t seq);
void ak_key_id(uint8_t out[AK_ID_KEY_LEN], const uint8_t id[16]);
void ak_key_pen(uint8_t out[AK_PEN_KEY_LEN], char tag, int64_t received_at_ms, const uint8_t id[16]);

/* delivery row value v1: u8 version, u8 state, u32 attempts, u64 next_at_ms,
 * str8 sink type. */
enum { AK_DELIVERY_PENDING = 0 };
size_t ak_delivery_row(uint8_t *out, size_t cap, uint8_t state, uint32_t attempts,
                       int64_t next_at_ms, const char *sink_type);

/* quarantine summary value v1: u8 version, u8 reason (ak_verify_reason_t), u64 size (body
 * bytes counted on the pen), str16 source_id, str16 tenant_id. The source is kept by id:
 * a source index is not stable across config changes. */
typedef struct ak_pen_summary {
  uint8_t reason;
  uint64_t size;
  const char *source;
  size_t source_len;
  const char *tenant;
  size_t tenant_len;
} ak_pen_summary_t;
/* Bytes written into out (cap >= 14 + lengths), or 0 when it does not fit. */
size_t ak_pen_summary_encode(uint8_t *out, size_t cap, const ak_pen_summary_t *s);
/* Points into v. 0, or -1 when damaged. */
int ak_pen_summary_decode(const uint8_t *v, size_t len, ak_pen_summary_t *s);

#endif
