/* The envelope: one received webhook exactly as it arrived (raw body byte-for-byte,
 * ordered headers, method, path, content type, received_at, tenant, source) plus the id
 * and seq the node gave it, and the provider event key when its source dedupes. Owns the
 * stored record format (v1, and v2 = v1 plus the dedupe key). Never interprets the body. */
#ifndef AK_CORE_ENVELOPE_H
#define AK_CORE_ENVELOPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/ids.h"

enum {
  AK_ENV_FLAG_VERIFY_FAILED = 1u << 0, /* accepted by accept_flag with a failed verification */
};

typedef struct ak_header {
  const char *name;
  size_t name_len;
  const char *value;
  size_t value_len;
} ak_header_t;

/* A decoded envelope points into the record buffer it was decoded from (no copies). */
typedef struct ak_envelope {
  uint8_t id[16];
  uint64_t seq;
  int64_t received_at_ms;
  uint32_t flags;
  const char *tenant;
  size_t tenant_len;
  const char *source;
  size_t source_len;
  const char *method;
  size_t method_len;
  const char *path;
  size_t path_len;
  const char *content_type;
  size_t content_type_len;
  ak_header_t *headers;
  size_t nheaders;
  const uint8_t *body;
  size_t body_len;
  const char *dedupe_key;      /* the provider event key (sources.<id>.dedupe), or NULL */
  size_t dedupe_key_len;
} ak_envelope_t;

#define AK_ENV_VERSION 1
/* a record with a dedupe key: v1 followed by str16 dedupe_key. Records without one stay v1,
 * byte for byte, so every record written before keys existed decodes unchanged. */
#define AK_ENV_VERSION_DEDUPE 2
/* byte offset of the seq inside an encoded record: the writer stamps it in place */
#define AK_ENV_SEQ_OFFSET 18
/* byte offset of the 16-byte id: the writer stamps the sealed id in place (core/ids.h) */
#define AK_ENV_ID_OFFSET 2

/* Encode into a fresh malloc'd buffer. Strings are (ptr,len); NULL ptr = empty. */
uint8_t *ak_envelope_encode(const ak_envelope_t *env, size_t *out_len);
/* Stamp a seq into an encoded record. */
void ak_envelope_set_seq(uint8_t *rec, uint64_t seq);
/* Stamp an id into an encoded record. */
void ak_envelope_set_id(uint8_t *rec, const uint8_t id[16]);
/* Decode `rec` (which must outlive env). Allocates env->headers; free with
 * ak_envelope_clear. Returns 0, or -1 on a malformed/truncated record. */
int ak_envelope_decode(const uint8_t *rec, size_t len, ak_envelope_t *env);
void ak_envelope_clear(ak_envelope_t *env);

#endif
