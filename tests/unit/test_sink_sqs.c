/* The sqs and google_pubsub sinks without a network: their option rules at create, the
 * size rule and the claim rule answered before any request, the egress scheme rule of a
 * guarded sink, and inline_max. (Their exchanges are proven against stand-ins in
 * tests/e2e/test_sink_sqs.py and test_sink_pubsub.py.) */
#include <criterion/criterion.h>
#include <string.h>
#include <jansson.h>
#include "core/envelope.h"
#include "sinks/message.h"
#include "sinks/sink.h"

typedef struct {
  int calls;
  ak_sink_outcome_t out;
} capture_t;

static void on_done(void *ctx, const ak_sink_outcome_t *o) {
  capture_t *c = ctx;
  c->calls++;
  c->out = *o;
}

static ak_envelope_t env_of(const char *body) {
  ak_envelope_t e = {0};
  for (int i = 0; i < 16; i++) e.id[i] = (uint8_t)(i + 1);
  e.tenant = "acme";
  e.tenant_len = 4;
  e.source = "gh";
  e.source_len = 2;
  e.body = (const uint8_t *)body;
  e.body_len = strlen(body);
  return e;
}

static void *make(const char *type, const char *json, bool trusted, char *err, size_t errlen) {
  json_t *o = json_loads(json, 0, NULL);
  cr_assert(o, "%s", json);
  ak_sink_ctx_t ctx = {.source_id = "gh", .trusted = trusted};
  void *s = ak_sinks_find(type)->create(o, &ctx, err, errlen);
  json_decref(o);
  return s;
}

static capture_t deliver(const char *type, void *s, const char *body, const char *claim_ref) {
  ak_envelope_t e = env_of(body);
  ak_sink_attempt_t att = {.env = &e, .attempt = 1, .idempotency_key = "acme:gh:k", .claim_ref = claim_ref};
  capture_t c = {0};
  ak_sinks_find(type)->deliver(s, &att, &c, on_done);
  cr_assert_eq(c.calls, 1, "answered at once, before any request");
  return c;
}

Test(sink_sqs, create_refuses_bad_options) {
  static const struct {
    const char *json, *want;
  } bad[] = {
    {"{\"queue_url\":\"ftp://h/0/q\",\"region\":\"us-east-1\"}", "queue_url: not an http(s):// URL"},
    {"{\"queue_url\":\"http://127.0.0.1:9/0/q\"}", "region: required"},
    {"{\"queue_url\":\"https://sqs.eu-west-1.amazonaws.com/0/q\",\"access_key_id\":\"a\"}",
     "access_key_id and secret_access_key go together"},
    {"{\"queue_url\":\"https://sqs.eu-west-1.amazonaws.com/0/q\",\"session_token\":\"t\"}",
     "session_token requires"},
    {"{\"queue_url\":\"https://q.example.net/0/q\",\"region\":\"us-east-1\"}", "a guarded sink signs"},
    {"{\"queue_url\":\"https://sqs.eu-west-1.amazonaws.com/0/q\",\"max_message_bytes\":0}", "max_message_bytes"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char err[256] = "";
    void *s = make("sqs", bad[i].json, false, err, sizeof err);
    cr_assert_null(s, "%s", bad[i].json);
    cr_assert(strstr(err, bad[i].want), "%s: %s", bad[i].json, err);
  }
}

Test(sink_sqs, size_claim_and_egress_are_answered_before_sending) {
  char err[256] = "";
  const ak_sink_vtable_t *vt = ak_sinks_find("sqs");
  cr_assert(vt && vt->durable && !vt->plugin.unsupported);
  void *s = make("sqs",
                 "{\"queue_url\":\"https://sqs.eu-west-1.amazonaws.com/1/q.fifo\",\"max_message_bytes\":700,"
                 "\"inline_max_bytes\":300,\"access_key_id\":\"AKID\",\"secret_access_key\":\"s\"}",
                 false, err, sizeof err);
  cr_assert(s, "%s", err);
  cr_assert_eq(vt->inline_max(s), 300);
  char big[301];
  memset(big, 'x', 300);
  big[300] = '\0';
  /* 300 bytes inline: 400 of base64 plus the message's fields and the attributes > 700 */
  capture_t c = deliver("sqs", s, big, NULL);
  cr_assert_eq(c.out.result, AK_SINK_PERMANENT);
  cr_assert(!strncmp(c.out.reason, "message too large (", 19), "%s", c.out.reason);
  char over[302];
  snprintf(over, sizeof over, "%sz", big);
  c = deliver("sqs", s, over, NULL); /* 301 > inline_max: goes by claim, and there is no ref */
  cr_assert_eq(c.out.result, AK_SINK_RETRY);
  cr_assert_str_eq(c.out.reason, "claim_missing");
  vt->destroy(s);

  /* guarded (the default of a hand-made sink): http:// is refused without egress.allow_http */
  s = make("sqs", "{\"queue_url\":\"http://127.0.0.1:9/0/q\",\"region\":\"us-east-1\",\"inline_max_bytes\":null,"
                  "\"access_key_id\":\"AKID\",\"secret_access_key\":\"s\"}", false, err, sizeof err);
  cr_assert(s, "%s", err);
  cr_assert_eq(vt->inline_max(s), -1);
  c = deliver("sqs", s, "{}", NULL);
  cr_assert_eq(c.out.result, AK_SINK_PERMANENT);
  cr_assert_null(strstr(c.out.reason, "127.0.0.1:9"), "the URL is never echoed: %s", c.out.reason);
  vt->destroy(s);
}

Test(sink_google_pubsub, create_rules_size_and_claim) {
  const ak_sink_vtable_t *vt = ak_sinks_find("google_pubsub");
  cr_assert(vt && vt->durable && !vt->plugin.unsupported);
  static const struct {
    const char *json, *want;
  } bad[] = {
    {"{\"project\":\"p-1\",\"topic\":\"hooks\",\"auth\":\"token\"}", "token: required when auth is token"},
    {"{\"project\":\"p-1\",\"topic\":\"goog-x\",\"auth\":\"none\"}", "topic: not a topic id"},
    {"{\"project\":\"P 1\",\"topic\":\"hooks\",\"auth\":\"none\"}", "project: not a project id"},
    {"{\"project\":\"p-1\",\"topic\":\"hooks\",\"endpoint\":\"https://x.example\"}", "auth: metadata sends"},
    {"{\"project\":\"p-1\",\"topic\":\"hooks\",\"auth\":\"none\",\"token\":\"t\"}", "token: only with auth: token"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char err[256] = "";
    cr_assert_null(make("google_pubsub", bad[i].json, false, err, sizeof err), "%s", bad[i].json);
    cr_assert(strstr(err, bad[i].want), "%s: %s", bad[i].json, err);
  }
  char err[256] = "";
  void *s = make("google_pubsub",
                 "{\"project\":\"p-1\",\"topic\":\"hooks\",\"auth\":\"token\",\"token\":\"ya29.x\","
                 "\"max_message_bytes\":500,\"ordering_key\":\"k\"}", false, err, sizeof err);
  cr_assert(s, "%s", err);
  cr_assert_eq(vt->inline_max(s), AK_SINK_INLINE_MAX_DEFAULT);
  char body[201];
  memset(body, 'b', 200);
  body[200] = '\0';
  capture_t c = deliver("google_pubsub", s, body, NULL);
  cr_assert_eq(c.out.result, AK_SINK_PERMANENT);
  cr_assert(!strncmp(c.out.reason, "message too large (", 19), "%s", c.out.reason);
  cr_assert_null(strstr(c.out.reason, "ya29"));
  vt->destroy(s);
  s = make("google_pubsub", "{\"project\":\"p-1\",\"topic\":\"hooks\",\"inline_max_bytes\":1}", false, err, sizeof err);
  cr_assert(s, "%s", err);
  c = deliver("google_pubsub", s, "ab", NULL);
  cr_assert_eq(c.out.result, AK_SINK_RETRY);
  cr_assert_str_eq(c.out.reason, "claim_missing");
  vt->destroy(s);
}
