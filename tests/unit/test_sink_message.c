/* SinkMessageV1 (sinks/message.c): the exact bytes for a known hook, escaping, header
 * joining and forwarding, inline vs claim, and the metadata set. */
#include <criterion/criterion.h>
#include <string.h>
#include <jansson.h>
#include "core/envelope.h"
#include "core/sources.h"
#include "sinks/message.h"

static ak_envelope_t env_of(ak_header_t *h, size_t nh, const char *body) {
  ak_envelope_t e = {0};
  for (int i = 0; i < 16; i++) e.id[i] = (uint8_t)(i + 1);
  e.id[6] = 0x70; /* version 7 */
  e.id[8] = 0x80;
  e.received_at_ms = 1767225600123;
  e.tenant = "acme";
  e.tenant_len = 4;
  e.source = "gh";
  e.source_len = 2;
  e.content_type = "application/json";
  e.content_type_len = 16;
  e.headers = h;
  e.nheaders = nh;
  e.body = (const uint8_t *)body;
  e.body_len = strlen(body);
  return e;
}

static char *encode(const ak_sink_attempt_t *att, bool claim) {
  ak_buf_t b = AK_BUF_INIT;
  cr_assert_eq(ak_sink_message_encode(att, claim, &b), 0);
  return ak_buf_take(&b, NULL);
}

Test(sink_message, exact_bytes_of_an_inline_hook) {
  ak_header_t h[] = {
    {"X-GitHub-Event", 14, "push", 4},
    {"Authorization", 13, "secret", 6},
    {"X-Multi", 7, "a", 1},
    {"x-multi", 7, "b", 1},
  };
  ak_envelope_t e = env_of(h, 4, "{\"a\":1}");
  ak_sink_attempt_t att = {.env = &e, .attempt = 1, .idempotency_key = "01020304-0506-7008-8a0b-0c0d0e0f1011"};
  char *m = encode(&att, false);
  cr_assert_str_eq(m,
                   "{\"v\":1,\"id\":\"01020304-0506-7008-800a-0b0c0d0e0f10\",\"source_id\":\"gh\",\"tenant_id\":\"acme\","
                   "\"received_at\":1767225600123,\"content_type\":\"application/json\",\"size\":7,"
                   "\"sha256\":\"015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862\",\"dedupe_key\":null,"
                   "\"replay_id\":null,\"idempotency_key\":\"01020304-0506-7008-8a0b-0c0d0e0f1011\","
                   "\"headers\":{\"x-github-event\":\"push\",\"x-multi\":\"a, b\"},\"body_base64\":\"eyJhIjoxfQ==\"}");
  free(m);
}

Test(sink_message, claim_instead_of_body_and_keys_present) {
  ak_envelope_t e = env_of(NULL, 0, "0123456789");
  ak_sink_attempt_t att = {.env = &e, .attempt = 2, .idempotency_key = "acme:gh:evt-1", .dedupe_key = "evt-1",
                           .replay_id = "0190a0b0-c0d0-7000-8000-000000000001",
                           .claim_ref = "urn:ankusa:claim:v1:acme:01J0000000000000000000000A"};
  cr_assert(ak_sink_by_claim(&att, 9));
  cr_assert_not(ak_sink_by_claim(&att, 10));
  cr_assert_not(ak_sink_by_claim(&att, -1));
  char *m = encode(&att, true);
  json_t *j = json_loads(m, 0, NULL);
  cr_assert(j, "%s", m);
  cr_assert_str_eq(json_string_value(json_object_get(j, "claim")), att.claim_ref);
  cr_assert_null(json_object_get(j, "body_base64"));
  cr_assert_str_eq(json_string_value(json_object_get(j, "dedupe_key")), "evt-1");
  cr_assert_str_eq(json_string_value(json_object_get(j, "replay_id")), att.replay_id);
  cr_assert_eq(json_integer_value(json_object_get(j, "size")), 10);
  json_decref(j);
  free(m);
  /* a claim body without a ref is refused, never sent inline by mistake */
  att.claim_ref = NULL;
  ak_buf_t b = AK_BUF_INIT;
  cr_assert_eq(ak_sink_message_encode(&att, true, &b), -1);
  ak_buf_free(&b);
}

Test(sink_message, escaping_and_invalid_utf8_stay_valid_json) {
  ak_header_t h[] = {
    {"X-Q", 3, "a\"b\\c\n\x01", 7},
    {"X-Bad", 5, "\xff\xc3(", 3},
    {"X-Utf8", 6, "\xc3\xa9t\xc3\xa9", 5},
  };
  ak_envelope_t e = env_of(h, 3, "");
  e.content_type = NULL;
  e.content_type_len = 0;
  e.tenant = NULL;
  e.tenant_len = 0;
  ak_sink_attempt_t att = {.env = &e, .attempt = 1, .idempotency_key = "k"};
  char *m = encode(&att, false);
  json_t *j = json_loads(m, 0, NULL);
  cr_assert(j, "not JSON: %s", m);
  json_t *hd = json_object_get(j, "headers");
  cr_assert_str_eq(json_string_value(json_object_get(hd, "x-q")), "a\"b\\c\n\x01");
  cr_assert_str_eq(json_string_value(json_object_get(hd, "x-bad")), "\xef\xbf\xbd\xef\xbf\xbd(");
  cr_assert_str_eq(json_string_value(json_object_get(hd, "x-utf8")), "\xc3\xa9t\xc3\xa9");
  cr_assert(json_is_null(json_object_get(j, "tenant_id")));
  cr_assert(json_is_null(json_object_get(j, "content_type")));
  cr_assert_str_eq(json_string_value(json_object_get(j, "body_base64")), "");
  cr_assert_str_eq(json_string_value(json_object_get(j, "sha256")),
                   "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  json_decref(j);
  free(m);
}

Test(sink_message, forward_headers_list_applies) {
  ak_header_t h[] = {{"X-A", 3, "1", 1}, {"X-B", 3, "2", 1}, {"Cookie", 6, "c", 1}};
  ak_envelope_t e = env_of(h, 3, "x");
  const char *names[] = {"x-b", "cookie"};
  ak_source_cfg_t src = {0};
  src.forward_default = false;
  src.forward_headers = (char **)names;
  src.nforward_headers = 2;
  ak_sink_attempt_t att = {.env = &e, .attempt = 1, .idempotency_key = "k", .source = &src};
  char *m = encode(&att, false);
  cr_assert(strstr(m, "\"headers\":{\"x-b\":\"2\"}"), "%s", m);
  free(m);
}

Test(sink_message, same_attempt_same_bytes) {
  ak_header_t h[] = {{"X-A", 3, "1", 1}};
  ak_envelope_t e = env_of(h, 1, "body");
  ak_sink_attempt_t att = {.env = &e, .attempt = 1, .idempotency_key = "k"};
  char *a = encode(&att, false), *b = encode(&att, false);
  cr_assert_str_eq(a, b);
  /* a known sha is used as given */
  att.body_sha256 = "1111111111111111111111111111111111111111111111111111111111111111";
  char *c = encode(&att, false);
  cr_assert(strstr(c, att.body_sha256));
  free(a);
  free(b);
  free(c);
}

Test(sink_message, metadata_set) {
  ak_envelope_t e = env_of(NULL, 0, "x");
  ak_sink_attempt_t att = {.env = &e, .attempt = 1, .idempotency_key = "acme:gh:k", .dedupe_key = "k"};
  ak_sink_meta_scratch_t sc;
  ak_sink_meta_t m[AK_SINK_META_MAX];
  size_t n = ak_sink_metadata(&att, true, &sc, m);
  cr_assert_eq(n, 7);
  cr_assert_str_eq(m[0].name, "ankusa_id");
  cr_assert_str_eq(m[0].value, "01020304-0506-7008-800a-0b0c0d0e0f10");
  cr_assert_str_eq(m[2].name, "ankusa_tenant_id");
  cr_assert_str_eq(m[2].value, "acme");
  cr_assert_str_eq(m[3].value, "1");
  cr_assert_str_eq(m[5].name, "content_type");
  cr_assert_str_eq(m[6].name, "ankusa_dedupe_key");
  /* no tenant: "" for Kafka/NATS, left out for SQS/Pub/Sub */
  e.tenant = NULL;
  e.tenant_len = 0;
  cr_assert_eq(ak_sink_metadata(&att, true, &sc, m), 7);
  cr_assert_str_eq(m[2].value, "");
  cr_assert_eq(ak_sink_metadata(&att, false, &sc, m), 6);
  att.replay_id = "r";
  cr_assert_eq(ak_sink_metadata(&att, false, &sc, m), 7);
  cr_assert_str_eq(m[6].name, "ankusa_replay_id");
}

Test(sink_message, inline_max_opt) {
  json_t *o = json_pack("{s:i}", "inline_max_bytes", 10);
  cr_assert_eq(ak_sink_inline_max_opt(o), 10);
  json_object_set_new(o, "inline_max_bytes", json_null());
  cr_assert_eq(ak_sink_inline_max_opt(o), -1);
  json_object_del(o, "inline_max_bytes");
  cr_assert_eq(ak_sink_inline_max_opt(o), 65536);
  json_decref(o);
}

Test(sink_message, schema_is_the_published_file) {
  json_error_t je;
  json_t *file = json_load_file("docs/sink-message-v1.schema.json", 0, &je);
  cr_assert(file, "docs/sink-message-v1.schema.json: %s", je.text);
  json_t *mine = json_loads(ak_sink_message_schema(), 0, &je);
  cr_assert(mine, "the built-in schema: %s", je.text);
  cr_assert(json_equal(file, mine), "src/sinks/message.c's schema differs from docs/sink-message-v1.schema.json");
  json_decref(file);
  json_decref(mine);
}
