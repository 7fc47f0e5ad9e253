/* The claim check's formats (docs/claim-check.md): claim ids, refs, object keys, the pack
 * object, and the list of claim stores tried in order. Shared by the check-in (dispatch/
 * checkin.c, which writes packs) and the gateway (admin/claims.c, which reads them).
 *
 * Ref (v1): urn:ankusa:claim:v1:<tenant>:<claim_id>. tenant matches [A-Za-z0-9_-]{1,64};
 * claim_id is a canonical (uppercase) Crockford base32 ULID of 26 characters whose 128 bits
 * are a 48-bit ms timestamp, 64 random bits and the claim's 16-bit position in its pack;
 * the pack id is the same ULID with the position bits zero.
 *
 * Object key: claims/tenant=<tenant>/dt=<YYYY-MM-DD>/<pack_id> (the UTC day of the pack's
 * timestamp; never prefixed by storage.key_prefix).
 *
 * Pack: a ZIP of stored (uncompressed) entries, no ZIP64, DOS date 1980-01-01, no extra
 * fields: index.bin (one 8-byte row per claim: big-endian u32 offset of the claim's bytes
 * in the pack, big-endian u32 length), one entry per claim named by its claim id, then
 * manifest.json {"v":1,"claims":[{claim_id,id,offset,length,sha256,content_type,
 * received_at}]}, then the central directory. A claim is found with one ranged read of
 * the first ak_claim_head_len(pos) bytes and one of its bytes.
 *
 * Pure codecs but for the store list (blob I/O, synchronous: callers run on threads of
 * their own). */
#ifndef AK_SINKS_CLAIMPACK_H
#define AK_SINKS_CLAIMPACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ak_blob;
struct ak_series;

#define AK_CLAIM_ID_LEN 26
#define AK_CLAIM_REF_MAX 128        /* "urn:ankusa:claim:v1:" + tenant + ":" + id, with the NUL */
#define AK_CLAIM_KEY_MAX 160
#define AK_CLAIM_PACK_MAX_CLAIMS 65000

typedef struct ak_claim_id {
  uint8_t b[16];                    /* big-endian: ms(48) | random(64) | position(16) */
} ak_claim_id_t;

/* A fresh pack id at ms (random bits from the OS RNG, position 0). */
void ak_claim_pack_id(int64_t ms, ak_claim_id_t *out);
/* The id of the claim at pos in pack. */
void ak_claim_id_at(const ak_claim_id_t *pack, uint16_t pos, ak_claim_id_t *out);
uint16_t ak_claim_id_pos(const ak_claim_id_t *id);
int64_t ak_claim_id_ms(const ak_claim_id_t *id);
/* The pack id of a claim id (position bits zero). */
void ak_claim_id_pack(const ak_claim_id_t *id, ak_claim_id_t *pack);
/* 26 characters and a NUL. */
void ak_claim_id_format(const ak_claim_id_t *id, char out[AK_CLAIM_ID_LEN + 1]);
/* The canonical form only (uppercase, first char 0-7, no I L O U): 0, or -1. */
int ak_claim_id_parse(const char *s, size_t n, ak_claim_id_t *out);
bool ak_claim_tenant_ok(const char *t, size_t n);

/* "urn:ankusa:claim:v1:<tenant>:<id>" into out (AK_CLAIM_REF_MAX): 0, or -1 for a bad tenant. */
int ak_claim_ref_format(const char *tenant, size_t tenant_len, const ak_claim_id_t *id, char *out, size_t cap);
/* A v1 ref: tenant (NUL-terminated, 65 bytes) and id. 0, or -1. */
int ak_claim_ref_parse(const char *ref, size_t n, char tenant[65], ak_claim_id_t *id);
/* claims/tenant=<t>/dt=<day>/<pack_id> of the pack that holds id. 0, or -1. */
int ak_claim_key(const char *tenant, const ak_claim_id_t *id, char *out, size_t cap);

/* One claim going into a pack. */
typedef struct ak_claim_item {
  const uint8_t *body;
  size_t len;
  uint8_t hook_id[16];
  const char *content_type;         /* may be NULL */
  size_t content_type_len;
  int64_t received_at_ms;
  char sha256[65];                  /* lowercase hex of body */
} ak_claim_item_t;

/* The pack of items[0..n) (n <= AK_CLAIM_PACK_MAX_CLAIMS; item i at position i) under
 * pack_id: a malloc'd buffer and its length, or NULL out of memory / too large for a
 * ZIP without ZIP64. */
uint8_t *ak_claim_pack_build(const ak_claim_id_t *pack_id, const ak_claim_item_t *items, size_t n, size_t *len);
/* Bytes to read from the start of a pack to find position pos: 30 + 9 + (pos + 1) * 8. */
size_t ak_claim_head_len(uint16_t pos);
/* From those bytes (n of them): the claim's offset and length in the pack. 0, or -1 when
 * the head is not a pack's (wrong signature or name, or too short: not found). */
int ak_claim_locate(const uint8_t *head, size_t n, uint16_t pos, uint32_t *off, uint32_t *len);

/* Bytes of a claim entry's local header (30 + its 26-character name): a claim's bytes at
 * off are preceded by them, at off - AK_CLAIM_ENTRY_HEAD. */
#define AK_CLAIM_ENTRY_HEAD 56
/* Is hdr (n bytes, read from off - AK_CLAIM_ENTRY_HEAD) the local header of the entry of
 * id, stored, of len bytes? 0, or -1 (the index pointed somewhere else). */
int ak_claim_entry_check(const uint8_t *hdr, size_t n, const ak_claim_id_t *id, uint32_t len);
/* Bytes to read from the end of a pack to find its manifest: the manifest's central
 * directory record and the end record. */
size_t ak_claim_manifest_tail_len(void);
/* From those last bytes (n of them) of a pack of pack_size bytes: where manifest.json's
 * bytes are. 0, or -1 when the tail is not a pack's. */
int ak_claim_manifest_find(const uint8_t *tail, size_t n, uint64_t pack_size, uint64_t *off, uint32_t *len);

/* The claim stores of a node (claim_check.stores, else claim_check.store, else the
 * storage bucket), tried in order: a check-in writes to the first that takes it; a
 * redeem reads from the first that has it. Built by the claim_check module
 * (admin/claims.c), which owns the handles; read by dispatch/checkin.c. */
typedef struct ak_claim_stores {
  struct ak_blob **v;
  size_t n;
  int64_t pack_max_bytes;            /* claim_check.pack_max_bytes */
  struct ak_series *checkin_failed;  /* ankusa_claim_check_failures_total{op="check_in"}, or NULL */
  struct ak_series *redeem_failed;   /* ...{op="redeem"}, or NULL */
} ak_claim_stores_t;

/* Put one pack: to the first store that answers OK (the caller counts checkin_failed). 0 (which store in *used, may be
 * NULL), or -1 with err (secret-free: every store's failure, shortest first). */
int ak_claim_stores_put(const ak_claim_stores_t *s, const char *key, const void *data, size_t len, size_t *used,
                        char *err, size_t errlen);

#endif
