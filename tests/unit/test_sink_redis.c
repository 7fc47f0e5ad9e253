/* The redis sink (sinks/redis.c) without a Redis: what create refuses, claim_missing,
 * the in-flight bound ("busy"), the deadline of a delivery whose connection never
 * completes its handshake, and destroy answering every delivery still under way exactly
 * once. The server is a listening socket that never accepts: its TCP handshakes complete
 * in the kernel's backlog, the PING of the client's handshake is never answered. The
 * e2e suite (tests/e2e/test_sink_redis.py) covers a real redis-server. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <jansson.h>
#include "core/envelope.h"
#include "sinks/sink.h"

extern const ak_sink_vtable_t ak_sink_redis;

#define MAXD 1200

typedef struct {
  pthread_mutex_t mu;
  int calls[MAXD];
  ak_sink_outcome_t out[MAXD];
  int total;
} tally_t;

static tally_t T;
static int idx[MAXD];

static void on_done(void *ctx, const ak_sink_outcome_t *out) {
  int i = *(int *)ctx;
  pthread_mutex_lock(&T.mu);
  T.calls[i]++;
  T.out[i] = *out;
  T.total++;
  pthread_mutex_unlock(&T.mu);
}

static void tally_reset(void) {
  memset(&T, 0, sizeof T);
  pthread_mutex_init(&T.mu, NULL);
  for (int i = 0; i < MAXD; i++) idx[i] = i;
}

static int total(void) {
  pthread_mutex_lock(&T.mu);
  int n = T.total;
  pthread_mutex_unlock(&T.mu);
  return n;
}

static int count_reason(int n, const char *reason) {
  int k = 0;
  pthread_mutex_lock(&T.mu);
  for (int i = 0; i < n; i++)
    if (T.calls[i] && strcmp(T.out[i].reason, reason) == 0) k++;
  pthread_mutex_unlock(&T.mu);
  return k;
}

/* A listening socket on 127.0.0.1 that never accepts; its port. */
static int blackhole(int *port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  cr_assert(fd >= 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  cr_assert_eq(listen(fd, 4096), 0);
  socklen_t l = sizeof sa;
  getsockname(fd, (struct sockaddr *)&sa, &l);
  *port = ntohs(sa.sin_port);
  return fd;
}

static void *sink_new(const char *json, char *err, size_t errlen) {
  json_error_t je;
  json_t *opts = json_loads(json, 0, &je);
  cr_assert_not_null(opts, "bad test json: %s", je.text);
  void *s = ak_sink_redis.create(opts, &(ak_sink_ctx_t){.source_id = "gh", .trusted = true}, err, errlen);
  json_decref(opts);
  return s;
}

static ak_envelope_t envelope(const char *body) {
  ak_envelope_t e;
  memset(&e, 0, sizeof e);
  for (int i = 0; i < 16; i++) e.id[i] = (uint8_t)(i + 1);
  e.id[6] = 0x70;
  e.id[8] = 0x80;
  e.source = "gh";
  e.source_len = 2;
  e.body = (const uint8_t *)body;
  e.body_len = strlen(body);
  return e;
}

Test(sink_redis, create_refuses_bad_options) {
  char err[256];
  cr_assert_null(sink_new("{\"url\":\"rediss://h:6380\",\"channel\":\"c\"}", err, sizeof err));
  cr_assert(strstr(err, "url: rediss:// (TLS) is not supported by this build"), "%s", err);
  cr_assert_null(sink_new("{\"url\":\"redis://:pw-xyz@h:0\",\"channel\":\"c\"}", err, sizeof err));
  cr_assert(strstr(err, "bad port") && !strstr(err, "pw-xyz"), "%s", err);
  cr_assert_null(sink_new("{\"url\":\"redis://h\"}", err, sizeof err));
  cr_assert(strstr(err, "channel"), "%s", err);
  cr_assert_null(sink_new("{\"url\":\"redis://h\",\"channel\":\"c\",\"publish_timeout_ms\":5000,"
                          "\"idle_timeout_ms\":5500}",
                          err, sizeof err));
  cr_assert(strstr(err, "idle_timeout_ms"), "%s", err);
  void *s = sink_new("{\"url\":\"redis://h\",\"channel\":\"c\",\"idle_timeout_ms\":0,\"inline_max_bytes\":null}", err,
                     sizeof err);
  cr_assert_not_null(s, "%s", err);
  cr_assert_eq(ak_sink_redis.inline_max(s), -1);
  ak_sink_redis.destroy(s);
  s = sink_new("{\"url\":\"redis://h\",\"channel\":\"c\"}", err, sizeof err);
  cr_assert_not_null(s, "%s", err);
  cr_assert_eq(ak_sink_redis.inline_max(s), 65536);
  cr_assert_not(ak_sink_redis.durable);
  ak_sink_redis.destroy(s);
}

Test(sink_redis, claim_missing_without_a_ref) {
  tally_reset();
  char err[256];
  void *s = sink_new("{\"url\":\"redis://127.0.0.1:1\",\"channel\":\"c\",\"inline_max_bytes\":4}", err, sizeof err);
  cr_assert_not_null(s, "%s", err);
  ak_envelope_t env = envelope("0123456789");
  ak_sink_redis.deliver(s, &(ak_sink_attempt_t){.env = &env, .attempt = 1, .idempotency_key = "k"}, &idx[0], on_done);
  cr_assert_eq(T.calls[0], 1, "answered before deliver returned");
  cr_assert_eq(T.out[0].result, AK_SINK_RETRY);
  cr_assert_str_eq(T.out[0].reason, "claim_missing");
  ak_sink_redis.destroy(s);
  cr_assert_eq(total(), 1);
}

Test(sink_redis, busy_beyond_the_bound_and_destroy_answers_the_rest_once) {
  tally_reset();
  int port, fd = blackhole(&port);
  char json[256], err[256];
  snprintf(json, sizeof json, "{\"url\":\"redis://127.0.0.1:%d\",\"channel\":\"c\",\"publish_timeout_ms\":60000}",
           port);
  void *s = sink_new(json, err, sizeof err);
  cr_assert_not_null(s, "%s", err);
  ak_envelope_t env = envelope("abc");
  for (int i = 0; i < MAXD; i++)
    ak_sink_redis.deliver(s, &(ak_sink_attempt_t){.env = &env, .attempt = 1, .idempotency_key = "k"}, &idx[i], on_done);
  cr_assert_eq(count_reason(MAXD, "busy"), MAXD - 1024, "busy: %d", count_reason(MAXD, "busy"));
  usleep(100 * 1000); /* the first ones wait for the handshake that never answers */
  cr_assert_eq(total(), MAXD - 1024, "nothing else is answered yet");
  ak_sink_redis.destroy(s);
  cr_assert_eq(total(), MAXD);
  for (int i = 0; i < MAXD; i++) {
    cr_assert_eq(T.calls[i], 1, "delivery %d answered %d times", i, T.calls[i]);
    cr_assert_eq(T.out[i].result, AK_SINK_RETRY);
  }
  cr_assert_eq(count_reason(MAXD, "sink stopped"), 1024);
  close(fd);
}

Test(sink_redis, a_handshake_that_never_answers_times_out) {
  tally_reset();
  int port, fd = blackhole(&port);
  char json[256], err[256];
  snprintf(json, sizeof json,
           "{\"url\":\"redis://127.0.0.1:%d\",\"channel\":\"c\",\"publish_timeout_ms\":200,\"idle_timeout_ms\":1200}",
           port);
  void *s = sink_new(json, err, sizeof err);
  cr_assert_not_null(s, "%s", err);
  /* two instances, one connection: both wait for the same handshake */
  void *s2 = sink_new(json, err, sizeof err);
  cr_assert_not_null(s2, "%s", err);
  ak_envelope_t env = envelope("abc");
  ak_sink_redis.deliver(s, &(ak_sink_attempt_t){.env = &env, .attempt = 1, .idempotency_key = "k"}, &idx[0], on_done);
  ak_sink_redis.deliver(s2, &(ak_sink_attempt_t){.env = &env, .attempt = 1, .idempotency_key = "k"}, &idx[1], on_done);
  for (int i = 0; i < 100 && total() < 2; i++) usleep(20 * 1000);
  cr_assert_eq(total(), 2);
  cr_assert_str_eq(T.out[0].reason, "not_connected");
  cr_assert_str_eq(T.out[1].reason, "not_connected");
  ak_sink_redis.destroy(s);
  ak_sink_redis.destroy(s2);
  cr_assert_eq(T.calls[0] + T.calls[1], 2);
  close(fd);
}
