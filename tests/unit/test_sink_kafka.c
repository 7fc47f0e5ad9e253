/* Unit tests: the kafka sink without a cluster. Its option rules at create, the answers
 * it gives before producing (record_too_large, claim_missing), inline_max, destroy
 * answering every record under way exactly once ("sink stopped") before it returns, and a
 * guarded sink whose every broker address the egress guard refuses answered permanent
 * with the guard's reason. Records are sent to 127.0.0.1:1 (nothing listens there). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <jansson.h>
#include "core/envelope.h"
#include "sinks/message.h"
#include "sinks/sink.h"

extern const ak_sink_vtable_t ak_sink_kafka;

typedef struct {
  pthread_mutex_t mu;
  int calls;
  ak_sink_outcome_t last;
} answers_t;

static answers_t answers = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void on_done(void *ctx, const ak_sink_outcome_t *o) {
  answers_t *a = ctx;
  pthread_mutex_lock(&a->mu);
  a->calls++;
  a->last = *o;
  pthread_mutex_unlock(&a->mu);
}

static int calls(void) {
  pthread_mutex_lock(&answers.mu);
  int n = answers.calls;
  pthread_mutex_unlock(&answers.mu);
  return n;
}

static void reset(void) {
  pthread_mutex_lock(&answers.mu);
  answers.calls = 0;
  memset(&answers.last, 0, sizeof answers.last);
  pthread_mutex_unlock(&answers.mu);
}

static void *make(const char *json, bool trusted, char *err, size_t errlen) {
  json_error_t je;
  json_t *o = json_loads(json, 0, &je);
  cr_assert_not_null(o, "%s", je.text);
  void *s = ak_sink_kafka.create(o, &(ak_sink_ctx_t){.source_id = "src", .trusted = trusted}, err, errlen);
  json_decref(o);
  return s;
}

static const uint8_t hook_id[16] = {0x01, 0x8f, 0x2a, 0x3b, 0x4c, 0x5d, 0x7e, 0x6f,
                                    0x80, 0x91, 0xa2, 0xb3, 0xc4, 0xd5, 0xe6, 0xf7};

static ak_envelope_t envelope(const uint8_t *body, size_t len) {
  ak_envelope_t env;
  memset(&env, 0, sizeof env);
  memcpy(env.id, hook_id, 16);
  env.received_at_ms = 1700000000123;
  env.tenant = "acme";
  env.tenant_len = 4;
  env.source = "src";
  env.source_len = 3;
  env.body = body;
  env.body_len = len;
  return env;
}

static ak_sink_attempt_t attempt(const ak_envelope_t *env) {
  return (ak_sink_attempt_t){.env = env, .attempt = 1, .idempotency_key = "018f2a3b-4c5d-7e6f-8091-a2b3c4d5e6f7"};
}

Test(kafka_sink, options_at_create) {
  char err[256] = "";
  cr_expect_null(make("{\"brokers\":\"127.0.0.1:1\",\"topic\":\"t\",\"idle_timeout_ms\":3000}", true, err, sizeof err));
  cr_expect(strstr(err, "idle_timeout_ms: must be 0 or at least produce_timeout_ms + 1000 (6000)") != NULL, "%s", err);
  err[0] = '\0';
  cr_expect_null(make("{\"topic\":\"t\"}", true, err, sizeof err));
  cr_expect(strstr(err, "brokers") != NULL, "%s", err);
  err[0] = '\0';
  cr_expect_null(make("{\"brokers\":\" , \",\"topic\":\"t\"}", true, err, sizeof err));
  cr_expect(strstr(err, "brokers") != NULL, "%s", err);
  err[0] = '\0';
  cr_expect_null(make("{\"brokers\":\"k:1\",\"topic\":\"t\",\"sasl\":{\"mechanism\":\"plain\",\"username\":\"u\"}}",
                      true, err, sizeof err));
  cr_expect(strstr(err, "password") != NULL, "%s", err);

  void *s = make("{\"brokers\":\"127.0.0.1:1\",\"topic\":\"t\",\"idle_timeout_ms\":0}", true, err, sizeof err);
  cr_assert_not_null(s, "%s", err);
  cr_expect_eq(ak_sink_kafka.inline_max(s), AK_SINK_INLINE_MAX_DEFAULT);
  ak_sink_kafka.destroy(s);
  s = make("{\"brokers\":[\"127.0.0.1:1\"],\"topic\":\"t\",\"inline_max_bytes\":null}", true, err, sizeof err);
  cr_assert_not_null(s, "%s", err);
  cr_expect_eq(ak_sink_kafka.inline_max(s), -1);
  ak_sink_kafka.destroy(s);
  s = make("{\"brokers\":\"127.0.0.1:1\",\"topic\":\"t\",\"inline_max_bytes\":10}", true, err, sizeof err);
  cr_assert_not_null(s, "%s", err);
  cr_expect_eq(ak_sink_kafka.inline_max(s), 10);
  ak_sink_kafka.destroy(s);
  cr_expect(ak_sink_kafka.durable);
  cr_expect(!ak_sink_kafka.plugin.unsupported);
}

Test(kafka_sink, answers_before_producing) {
  char err[256] = "";
  void *s = make("{\"brokers\":\"127.0.0.1:1\",\"topic\":\"t\",\"max_record_bytes\":100,\"inline_max_bytes\":50}", true,
                 err, sizeof err);
  cr_assert_not_null(s, "%s", err);
  uint8_t body[40];
  memset(body, 'x', sizeof body);
  ak_envelope_t env = envelope(body, sizeof body);
  ak_sink_attempt_t att = attempt(&env);
  reset();
  ak_sink_kafka.deliver(s, &att, &answers, on_done);
  cr_expect_eq(calls(), 1, "answered before deliver returned");
  cr_expect_eq(answers.last.result, AK_SINK_PERMANENT);
  cr_expect(strncmp(answers.last.reason, "record_too_large: ", 18) == 0, "%s", answers.last.reason);

  uint8_t big[60];
  memset(big, 'y', sizeof big);
  ak_envelope_t env2 = envelope(big, sizeof big); /* above inline_max: by claim, and no ref */
  ak_sink_attempt_t att2 = attempt(&env2);
  reset();
  ak_sink_kafka.deliver(s, &att2, &answers, on_done);
  cr_expect_eq(calls(), 1);
  cr_expect_eq(answers.last.result, AK_SINK_RETRY);
  cr_expect_str_eq(answers.last.reason, "claim_missing");
  ak_sink_kafka.destroy(s);
}

Test(kafka_sink, destroy_answers_every_record_once) {
  char err[256] = "";
  void *s = make("{\"brokers\":\"127.0.0.1:1\",\"topic\":\"t\",\"produce_timeout_ms\":60000}", true, err, sizeof err);
  cr_assert_not_null(s, "%s", err);
  /* a second instance of the same destination shares the producer and outlives the first */
  void *s2 = make("{\"brokers\":\"127.0.0.1:1\",\"topic\":\"u\",\"produce_timeout_ms\":60000}", true, err, sizeof err);
  cr_assert_not_null(s2, "%s", err);
  ak_envelope_t env = envelope((const uint8_t *)"{}", 2);
  ak_sink_attempt_t att = attempt(&env);
  reset();
  /* more than destroy takes in one walk (64), and not a multiple of it */
  for (int i = 0; i < 150; i++) ak_sink_kafka.deliver(s, &att, &answers, on_done);
  answers_t other = {.mu = PTHREAD_MUTEX_INITIALIZER};
  ak_sink_kafka.deliver(s2, &att, &other, on_done);
  usleep(200 * 1000);
  cr_expect_eq(calls(), 0, "nothing listens: the records wait");
  ak_sink_kafka.destroy(s);
  cr_expect_eq(calls(), 150, "each answered once, before destroy returned");
  cr_expect_eq(answers.last.result, AK_SINK_RETRY);
  cr_expect_str_eq(answers.last.reason, "sink stopped");
  cr_expect_eq(other.calls, 0, "the other instance's record is still under way");
  ak_sink_kafka.destroy(s2);
  cr_expect_eq(other.calls, 1);
  cr_expect_str_eq(other.last.reason, "sink stopped");
  usleep(100 * 1000);
  cr_expect_eq(calls(), 150, "no answer after destroy");
}

Test(kafka_sink, guarded_sink_refused_by_egress) {
  char err[256] = "";
  void *s = make("{\"brokers\":\"127.0.0.1:1,127.0.0.2:1\",\"topic\":\"t\",\"produce_timeout_ms\":60000}", false, err,
                 sizeof err);
  cr_assert_not_null(s, "%s", err);
  ak_envelope_t env = envelope((const uint8_t *)"{}", 2);
  ak_sink_attempt_t att = attempt(&env);
  reset();
  ak_sink_kafka.deliver(s, &att, &answers, on_done);
  for (int i = 0; i < 100 && calls() == 0; i++) usleep(100 * 1000);
  cr_assert_eq(calls(), 1, "answered without waiting for produce_timeout_ms");
  cr_expect_eq(answers.last.result, AK_SINK_PERMANENT);
  cr_expect(strncmp(answers.last.reason, "egress: 127.0.0.", 16) == 0, "%s", answers.last.reason);
  /* a later delivery on the blocked producer is answered at once */
  ak_sink_kafka.deliver(s, &att, &answers, on_done);
  cr_expect_eq(calls(), 2);
  cr_expect_eq(answers.last.result, AK_SINK_PERMANENT);
  ak_sink_kafka.destroy(s);
}

Test(kafka_sink, bounded_in_flight_answers_busy) {
  char err[256] = "";
  void *s = make("{\"brokers\":\"127.0.0.1:1\",\"topic\":\"t\",\"produce_timeout_ms\":60000}", true, err, sizeof err);
  cr_assert_not_null(s, "%s", err);
  ak_envelope_t env = envelope((const uint8_t *)"{}", 2);
  ak_sink_attempt_t att = attempt(&env);
  reset();
  for (int i = 0; i < 10000; i++) ak_sink_kafka.deliver(s, &att, &answers, on_done);
  cr_expect_eq(calls(), 0, "10,000 records are held");
  ak_sink_kafka.deliver(s, &att, &answers, on_done);
  cr_expect_eq(calls(), 1, "the next one is answered at once");
  cr_expect_eq(answers.last.result, AK_SINK_RETRY);
  cr_expect_str_eq(answers.last.reason, "busy");
  ak_sink_kafka.destroy(s);
  cr_expect_eq(calls(), 10001);
  cr_expect_str_eq(answers.last.reason, "sink stopped");
}
