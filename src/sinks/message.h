/* SinkMessageV1: the one message every broker sink sends (Kafka, RabbitMQ, NATS, Redis,
 * SQS, Pub/Sub), and the metadata set a transport with headers or attributes carries
 * beside it. One encoder, so the same hook and attempt is the same bytes on every
 * transport (docs/sink-message.md, docs/sink-message-v1.schema.json).
 *
 * The message is one compact UTF-8 JSON object, keys in this order: v, id, source_id,
 * tenant_id, received_at, content_type, size, sha256, dedupe_key, replay_id,
 * idempotency_key, headers, then body_base64 xor claim. headers holds the provider
 * headers the source's forward_headers lets through (sinks/forward.h), names lowercased,
 * repeats joined with ", " in arrival order. A byte that is not valid UTF-8 in a header
 * value becomes U+FFFD (JSON cannot carry it); the body never goes through text.
 *
 * Pure: allocates only into the caller's buffer, never logs, never blocks; safe on any
 * thread. */
#ifndef AK_SINKS_MESSAGE_H
#define AK_SINKS_MESSAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/buf.h"
#include "sinks/sink.h"

#define AK_SINK_MESSAGE_VERSION 1
/* The default body size above which a broker sink sends a claim ref instead of the body. */
#define AK_SINK_INLINE_MAX_DEFAULT 65536
#define AK_SINK_META_MAX 8

/* True when this attempt's body goes by claim for a sink whose threshold is inline_max
 * (-1: never). */
static inline bool ak_sink_by_claim(const ak_sink_attempt_t *att, int64_t inline_max) {
  return inline_max >= 0 && (uint64_t)att->env->body_len > (uint64_t)inline_max;
}

/* Appends the message for att to out. by_claim: the body goes as att->claim_ref (which
 * must then be set), else inline as base64. 0, or -1 when out failed (out of memory) or
 * by_claim has no ref. */
int ak_sink_message_encode(const ak_sink_attempt_t *att, bool by_claim, ak_buf_t *out);

/* One metadata entry: a header (Kafka, NATS, RabbitMQ) or attribute (SQS, Pub/Sub). */
typedef struct ak_sink_meta {
  const char *name;   /* ankusa_id, ankusa_source_id, ... (static) */
  const char *value;  /* points into att or into the caller's scratch */
  size_t value_len;
} ak_sink_meta_t;

/* Scratch a metadata set needs: the id's text, the tenant and source copied out of the
 * envelope with a NUL. */
typedef struct ak_sink_meta_scratch {
  char id[40];
  char tenant[72];
  char source[72];
} ak_sink_meta_scratch_t;

/* The common metadata set of att into out (AK_SINK_META_MAX entries): ankusa_id,
 * ankusa_source_id, ankusa_tenant_id, ankusa_message_version "1", ankusa_idempotency_key,
 * content_type "application/json", then ankusa_dedupe_key and ankusa_replay_id when the
 * hook has them. A hook without a tenant gets ankusa_tenant_id "" when empty_tenant is
 * true (Kafka, NATS) and none otherwise (SQS, Pub/Sub). Returns the count. */
size_t ak_sink_metadata(const ak_sink_attempt_t *att, bool empty_tenant, ak_sink_meta_scratch_t *scratch,
                        ak_sink_meta_t *out);

/* Lowercase hex SHA-256 of att's body (65 bytes with the NUL): att->body_sha256 when the
 * dispatcher passed it, else computed. */
void ak_sink_body_sha256(const ak_sink_attempt_t *att, char hex[65]);

/* inline_max_bytes of a sink's validated opts: its value, or -1 when it is null (never by
 * claim); the default when absent. */
int64_t ak_sink_inline_max_opt(const json_t *opts);

/* The message's JSON Schema (draft 2020-12) as text: the file docs/sink-message-v1.schema.json
 * and the payload of GET /asyncapi.json. */
const char *ak_sink_message_schema(void);

/* Option rows every broker sink shares; put them in the sink's table by value. */
#define AK_SINK_INLINE_MAX_ROW(T, field)                                                                      \
  {.key = "inline_max_bytes", .type = AK_OPT_INT, .def = "65536", .min = 0, .max = 4294967295LL,               \
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX | AK_OPTF_NULLABLE,                                              \
   .doc = "a body larger than this goes as a claim ref (claim_check) instead of inline base64; null: never",  \
   AK_AT(T, field)}
#define AK_SINK_IDLE_TIMEOUT_ROW(T, field)                                                                    \
  {.key = "idle_timeout_ms", .type = AK_OPT_INT, .def = "600000", .min = 0, .max = 86400000,                  \
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX,                                                                 \
   .doc = "the connection closes after this long without a delivery; 0: never", AK_AT(T, field)}

#endif
