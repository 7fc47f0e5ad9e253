/* SinkMessageV1 (see message.h). A hand-written JSON writer: the message is built once per
 * attempt on the dispatcher's hot path, its shape is fixed, and the only text in it that
 * comes from outside (ids, tenant, source, content type, keys, header names and values)
 * is escaped here byte by byte. */
#include <stdio.h>
#include <string.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include "core/envelope.h"
#include "core/ids.h"
#include "sinks/forward.h"
#include "sinks/message.h"

static const char hexd[] = "0123456789abcdef";

/* Length of the valid UTF-8 sequence at p (n bytes left), or 0 when it is not one. */
static size_t utf8_len(const unsigned char *p, size_t n) {
  unsigned char c = p[0];
  size_t len;
  uint32_t cp;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) len = 2, cp = c & 0x1f;
  else if (c >= 0xe0 && c <= 0xef) len = 3, cp = c & 0x0f;
  else if (c >= 0xf0 && c <= 0xf4) len = 4, cp = c & 0x07;
  else return 0;
  if (n < len) return 0;
  for (size_t i = 1; i < len; i++) {
    if ((p[i] & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (p[i] & 0x3f);
  }
  if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
    return 0;
  return len;
}

/* A JSON string of (s, n): quotes, escapes, U+FFFD for a byte that is not UTF-8; names
 * lowercased when lower. */
static void put_str(ak_buf_t *b, const char *s, size_t n, bool lower) {
  if (ak_buf_reserve(b, n * 6 + 2) < 0) return;
  char *o = b->p + b->len;
  *o++ = '"';
  const unsigned char *p = (const unsigned char *)s;
  for (size_t i = 0; i < n;) {
    unsigned char c = p[i];
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
      *o++ = (char)(lower && c >= 'A' && c <= 'Z' ? c + 32 : c);
      i++;
    } else if (c == '"' || c == '\\') {
      *o++ = '\\';
      *o++ = (char)c;
      i++;
    } else if (c < 0x20) {
      o += sprintf(o, "\\u%04x", c);
      i++;
    } else {
      size_t l = utf8_len(p + i, n - i);
      if (l) {
        memcpy(o, p + i, l);
        o += l;
        i += l;
      } else {
        memcpy(o, "\\ufffd", 6);
        o += 6;
        i++;
      }
    }
  }
  *o++ = '"';
  b->len = (size_t)(o - b->p);
  b->p[b->len] = '\0';
}

static void put_str_or_null(ak_buf_t *b, const char *s, size_t n) {
  if (s && n) put_str(b, s, n, false);
  else ak_buf_append(b, "null", 4);
}

static void put_key(ak_buf_t *b, const char *k) {
  ak_buf_puts(b, k);
}

void ak_sink_body_sha256(const ak_sink_attempt_t *att, char hex[65]) {
  if (att->body_sha256 && strlen(att->body_sha256) == 64) {
    memcpy(hex, att->body_sha256, 65);
    return;
  }
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(att->env->body, att->env->body_len, md);
  for (int i = 0; i < SHA256_DIGEST_LENGTH; i++) {
    hex[2 * i] = hexd[md[i] >> 4];
    hex[2 * i + 1] = hexd[md[i] & 15];
  }
  hex[64] = '\0';
}

static bool name_eq(const ak_header_t *a, const ak_header_t *b) {
  if (a->name_len != b->name_len) return false;
  for (size_t i = 0; i < a->name_len; i++) {
    unsigned char x = (unsigned char)a->name[i], y = (unsigned char)b->name[i];
    if (x >= 'A' && x <= 'Z') x += 32;
    if (y >= 'A' && y <= 'Z') y += 32;
    if (x != y) return false;
  }
  return true;
}

/* "headers": the forwarded ones, one key per name (first appearance order), repeats
 * joined with ", ". */
static void put_headers(ak_buf_t *b, const ak_sink_attempt_t *att) {
  const ak_envelope_t *env = att->env;
  ak_buf_append(b, "{", 1);
  bool first = true;
  for (size_t i = 0; i < env->nheaders; i++) {
    const ak_header_t *h = &env->headers[i];
    if (!ak_forward_header(att->source, h->name, h->name_len)) continue;
    bool seen = false;
    for (size_t j = 0; j < i && !seen; j++) seen = name_eq(&env->headers[j], h);
    if (seen) continue;
    if (!first) ak_buf_append(b, ",", 1);
    first = false;
    put_str(b, h->name, h->name_len, true);
    ak_buf_append(b, ":", 1);
    /* the value: this one, then every later one of the same name */
    size_t total = h->value_len, count = 1;
    for (size_t j = i + 1; j < env->nheaders; j++)
      if (name_eq(&env->headers[j], h)) total += 2 + env->headers[j].value_len, count++;
    if (count == 1) {
      put_str(b, h->value, h->value_len, false);
      continue;
    }
    ak_buf_t joined = AK_BUF_INIT;
    if (ak_buf_reserve(&joined, total) < 0) {
      b->failed = true;
      return;
    }
    ak_buf_append(&joined, h->value, h->value_len);
    for (size_t j = i + 1; j < env->nheaders; j++)
      if (name_eq(&env->headers[j], h)) {
        ak_buf_append(&joined, ", ", 2);
        ak_buf_append(&joined, env->headers[j].value, env->headers[j].value_len);
      }
    put_str(b, joined.p, joined.len, false);
    ak_buf_free(&joined);
  }
  ak_buf_append(b, "}", 1);
}

int ak_sink_message_encode(const ak_sink_attempt_t *att, bool by_claim, ak_buf_t *out) {
  const ak_envelope_t *env = att->env;
  if (by_claim && (!att->claim_ref || !*att->claim_ref)) return -1;
  char id[AK_UUID_STR_LEN], sha[65];
  ak_uuid_format(env->id, id);
  ak_sink_body_sha256(att, sha);
  size_t b64 = by_claim ? 0 : 4 * ((env->body_len + 2) / 3);
  if (ak_buf_reserve(out, 512 + b64) < 0) return -1;
  ak_buf_printf(out, "{\"v\":%d,\"id\":\"%s\",\"source_id\":", AK_SINK_MESSAGE_VERSION, id);
  put_str(out, env->source, env->source_len, false);
  put_key(out, ",\"tenant_id\":");
  put_str_or_null(out, env->tenant, env->tenant_len);
  ak_buf_printf(out, ",\"received_at\":%lld,\"content_type\":", (long long)env->received_at_ms);
  put_str_or_null(out, env->content_type, env->content_type_len);
  ak_buf_printf(out, ",\"size\":%zu,\"sha256\":\"%s\",\"dedupe_key\":", env->body_len, sha);
  put_str_or_null(out, att->dedupe_key, att->dedupe_key ? strlen(att->dedupe_key) : 0);
  put_key(out, ",\"replay_id\":");
  put_str_or_null(out, att->replay_id, att->replay_id ? strlen(att->replay_id) : 0);
  put_key(out, ",\"idempotency_key\":");
  put_str(out, att->idempotency_key, strlen(att->idempotency_key), false);
  put_key(out, ",\"headers\":");
  put_headers(out, att);
  if (by_claim) {
    put_key(out, ",\"claim\":");
    put_str(out, att->claim_ref, strlen(att->claim_ref), false);
  } else {
    put_key(out, ",\"body_base64\":\"");
    if (ak_buf_reserve(out, b64 + 1) == 0) {
      int n = env->body_len ? EVP_EncodeBlock((unsigned char *)out->p + out->len, env->body, (int)env->body_len) : 0;
      out->len += (size_t)n;
      out->p[out->len] = '\0';
    }
    ak_buf_append(out, "\"", 1);
  }
  ak_buf_append(out, "}", 1);
  return out->failed ? -1 : 0;
}

size_t ak_sink_metadata(const ak_sink_attempt_t *att, bool empty_tenant, ak_sink_meta_scratch_t *sc,
                        ak_sink_meta_t *out) {
  const ak_envelope_t *env = att->env;
  size_t n = 0;
  ak_uuid_format(env->id, sc->id);
  snprintf(sc->source, sizeof sc->source, "%.*s", (int)env->source_len, env->source ? env->source : "");
  snprintf(sc->tenant, sizeof sc->tenant, "%.*s", (int)env->tenant_len, env->tenant ? env->tenant : "");
  out[n++] = (ak_sink_meta_t){"ankusa_id", sc->id, strlen(sc->id)};
  out[n++] = (ak_sink_meta_t){"ankusa_source_id", sc->source, strlen(sc->source)};
  if (sc->tenant[0] || empty_tenant) out[n++] = (ak_sink_meta_t){"ankusa_tenant_id", sc->tenant, strlen(sc->tenant)};
  out[n++] = (ak_sink_meta_t){"ankusa_message_version", "1", 1};
  out[n++] = (ak_sink_meta_t){"ankusa_idempotency_key", att->idempotency_key, strlen(att->idempotency_key)};
  out[n++] = (ak_sink_meta_t){"content_type", "application/json", 16};
  if (att->dedupe_key) out[n++] = (ak_sink_meta_t){"ankusa_dedupe_key", att->dedupe_key, strlen(att->dedupe_key)};
  if (att->replay_id && n < AK_SINK_META_MAX)
    out[n++] = (ak_sink_meta_t){"ankusa_replay_id", att->replay_id, strlen(att->replay_id)};
  return n;
}

int64_t ak_sink_inline_max_opt(const json_t *opts) {
  const json_t *v = json_object_get(opts, "inline_max_bytes");
  if (!v) return AK_SINK_INLINE_MAX_DEFAULT;
  if (json_is_null(v)) return -1;
  return json_is_integer(v) ? json_integer_value(v) : AK_SINK_INLINE_MAX_DEFAULT;
}

/* The JSON Schema of the message (docs/sink-message-v1.schema.json holds the same
 * document; a unit test keeps the two equal). */
const char *ak_sink_message_schema(void) {
  return
    "{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"$id\":\"https://ankusa.dev/schemas/sink"
    "-message-v1.schema.json\",\"title\":\"SinkMessageV1\",\"description\":\"The message every broker sink of"
    " ankusa sends (Kafka, RabbitMQ, NATS JetStream, Redis pub/sub, SQS, Google Pub/Sub): one UTF-8 J"
    "SON object, byte-identical across transports for the same hook and attempt. Consumers ignore key"
    "s they do not know; v changes only when a field changes meaning or is removed. See docs/sink-mes"
    "sage.md.\",\"type\":\"object\",\"required\":[\"v\",\"id\",\"source_id\",\"tenant_id\",\"received_at\",\"content_ty"
    "pe\",\"size\",\"sha256\",\"dedupe_key\",\"replay_id\",\"idempotency_key\",\"headers\"],\"properties\":{\"v\":{\"co"
    "nst\":1},\"id\":{\"type\":\"string\",\"pattern\":\"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}"
    "-[0-9a-f]{12}$\",\"description\":\"the hook id (UUIDv7); the same on every redelivery and replay\"},\""
    "source_id\":{\"type\":\"string\",\"pattern\":\"^[A-Za-z0-9_-]{1,64}$\"},\"tenant_id\":{\"type\":[\"string\",\"nu"
    "ll\"],\"pattern\":\"^[A-Za-z0-9_-]{1,64}$\"},\"received_at\":{\"type\":\"integer\",\"minimum\":0,\"description"
    "\":\"unix milliseconds\"},\"content_type\":{\"type\":[\"string\",\"null\"],\"description\":\"the provider's Co"
    "ntent-Type\"},\"size\":{\"type\":\"integer\",\"minimum\":0,\"description\":\"raw body length in bytes\"},\"sha"
    "256\":{\"type\":\"string\",\"pattern\":\"^[0-9a-f]{64}$\",\"description\":\"lowercase hex SHA-256 of the raw"
    " body, inline or by claim\"},\"dedupe_key\":{\"type\":[\"string\",\"null\"],\"description\":\"the provider e"
    "vent key when the source dedupes\"},\"replay_id\":{\"type\":[\"string\",\"null\"],\"description\":\"the repl"
    "ay job id when a replay sent it\"},\"idempotency_key\":{\"type\":\"string\",\"minLength\":1,\"description\""
    ":\"<tenant>:<source>:<dedupe_key>, else the hook id; opaque: dedupe on it\"},\"headers\":{\"type\":\"ob"
    "ject\",\"additionalProperties\":{\"type\":\"string\"},\"propertyNames\":{\"pattern\":\"^[!#$%&'*+.^_`|~0-9a-"
    "z-]+$\"},\"description\":\"forwarded provider headers: lowercased names, repeats joined with \\\", \\\"\""
    "},\"body_base64\":{\"type\":\"string\",\"contentEncoding\":\"base64\",\"description\":\"the raw body, standar"
    "d base64 (when size <= the sink's inline_max_bytes)\"},\"claim\":{\"type\":\"string\",\"pattern\":\"^urn:a"
    "nkusa:claim:v1:[A-Za-z0-9_-]{1,64}:[0-7][0-9A-HJKMNP-TV-Z]{25}$\",\"description\":\"claim ref of the"
    " body (when size > the sink's inline_max_bytes): redeem it at the claim gateway and check size a"
    "nd sha256\"}},\"oneOf\":[{\"required\":[\"body_base64\"],\"not\":{\"required\":[\"claim\"]}},{\"required\":[\"cl"
    "aim\"],\"not\":{\"required\":[\"body_base64\"]}}]}";
}
