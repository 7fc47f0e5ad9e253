/* The pieces of wal.type none that need no node (edge/publish.h, sinks/registry.c): which
 * sink lists hold a durable sink, and the keys every sink of one hook is handed (the
 * dispatcher's and the direct publisher's attempts share them). */
#include <criterion/criterion.h>
#include <string.h>
#include <jansson.h>
#include "core/envelope.h"
#include "core/ids.h"
#include "edge/publish.h"
#include "sinks/sink.h"

static bool durable(const char *json) {
  char why[256] = "";
  json_t *sinks = json_loads(json, 0, NULL);
  cr_assert_not_null(sinks, "%s", json);
  bool d = ak_publish_sinks_durable(sinks, why, sizeof why);
  cr_expect(d || strstr(why, "wal.type none needs a durable sink") != NULL, "%s", why);
  json_decref(sinks);
  return d;
}

Test(publish, durable_sinks) {
  cr_expect_not(durable("[{\"type\":\"log\"}]"));
  cr_expect_not(durable("[{\"type\":\"log\"},{\"type\":\"redis\"}]"));
  cr_expect_not(durable("[]"));
  cr_expect(durable("[{\"type\":\"log\"},{\"type\":\"http\"}]"));
  for (const char *const *t = (const char *const[]){"http", "kafka", "rabbitmq", "nats", "sqs", "google_pubsub", NULL};
       *t; t++) {
    char j[64];
    snprintf(j, sizeof j, "[{\"type\":\"%s\"}]", *t);
    cr_expect(durable(j), "%s", *t);
  }
}

Test(publish, attempt_keys) {
  ak_envelope_t env = {0};
  for (int i = 0; i < 16; i++) env.id[i] = (uint8_t)i;
  env.tenant = "acme";
  env.tenant_len = 4;
  env.source = "gh";
  env.source_len = 2;
  char id[AK_UUID_STR_LEN], want[AK_UUID_STR_LEN];
  ak_uuid_format(env.id, want);
  ak_sink_attempt_t att = {.attempt = 1};
  ak_sink_attempt_keys(&att, &env, id);
  cr_expect_eq(att.env, &env);
  cr_expect_str_eq(att.idempotency_key, want); /* no provider key: the hook id */
  cr_expect_null(att.dedupe_key);
  ak_sink_attempt_keys_free(&att, id);
  env.dedupe_key = "evt-1xyz";
  env.dedupe_key_len = 5; /* not NUL-terminated at its length */
  ak_sink_attempt_keys(&att, &env, id);
  cr_expect_str_eq(att.idempotency_key, "acme:gh:evt-1");
  cr_expect_str_eq(att.dedupe_key, "evt-1");
  ak_sink_attempt_keys_free(&att, id);
  cr_expect_null(att.idempotency_key);
}
