/* Unit tests: the rabbitmq sink without a broker. Its option rules at create, inline_max,
 * the answers it gives without the network (claim_missing, busy, the backoff window's
 * not_connected), the egress refusal, and destroy answering a delivery still under way
 * ("sink stopped") before it returns. A "broker" here is a loopback listener that accepts
 * and never speaks, or a port nobody listens on. The broker-facing behaviour (confirms,
 * returns, reconnects) is proven end to end in tests/e2e/test_sink_rabbitmq.py. */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "core/envelope.h"
#include "sinks/sink.h"

extern const ak_sink_vtable_t ak_sink_rabbitmq;

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int calls;
  ak_sink_outcome_t last;
} answer_t;

static void on_done(void *ctx, const ak_sink_outcome_t *o) {
  answer_t *a = ctx;
  pthread_mutex_lock(&a->mu);
  a->calls++;
  a->last = *o;
  pthread_cond_broadcast(&a->cv);
  pthread_mutex_unlock(&a->mu);
}

static void answer_init(answer_t *a) {
  memset(a, 0, sizeof *a);
  pthread_mutex_init(&a->mu, NULL);
  pthread_cond_init(&a->cv, NULL);
}

/* Wait up to ms for n answers; the count seen. */
static int wait_calls(answer_t *a, int n, int ms) {
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  dl.tv_sec += ms / 1000;
  dl.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (dl.tv_nsec >= 1000000000L) dl.tv_sec++, dl.tv_nsec -= 1000000000L;
  pthread_mutex_lock(&a->mu);
  while (a->calls < n)
    if (pthread_cond_timedwait(&a->cv, &a->mu, &dl) != 0) break;
  int c = a->calls;
  pthread_mutex_unlock(&a->mu);
  return c;
}

static const uint8_t body[] = "hello rabbit";

static ak_envelope_t env(void) {
  ak_envelope_t e = {0};
  for (int i = 0; i < 16; i++) e.id[i] = (uint8_t)(i * 7 + 1);
  e.id[6] = 0x70;
  e.source = "src";
  e.source_len = 3;
  e.body = body;
  e.body_len = sizeof body - 1;
  e.received_at_ms = 1767225600000;
  return e;
}

static void *make(const char *json, bool trusted, char *err, size_t errlen) {
  json_error_t je;
  json_t *o = json_loads(json, 0, &je);
  cr_assert(o, "bad test json: %s", je.text);
  ak_sink_ctx_t ctx = {.source_id = "src", .trusted = trusted};
  void *s = ak_sink_rabbitmq.create(o, &ctx, err, errlen);
  json_decref(o);
  return s;
}

/* A loopback port: listening (accepts, never answers) when listen_too, else closed. */
static int port_of(bool listen_too, int *fd_out) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  cr_assert(bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
  socklen_t sl = sizeof sa;
  getsockname(fd, (struct sockaddr *)&sa, &sl);
  if (listen_too) {
    cr_assert(listen(fd, 8) == 0);
    *fd_out = fd;
  } else {
    close(fd);
    *fd_out = -1;
  }
  return ntohs(sa.sin_port);
}

Test(rabbitmq_sink, create_applies_the_rows_and_the_rules) {
  char err[256] = "";
  cr_assert_null(make("{}", true, err, sizeof err));
  cr_assert(strstr(err, "exchange"), "%s", err);
  cr_assert_null(make("{\"exchange\":\"e\",\"url\":\"http://u:hunter2@h/\"}", true, err, sizeof err));
  cr_assert(strstr(err, "url") && !strstr(err, "hunter2"), "%s", err);
  cr_assert_null(make("{\"exchange\":\"e\",\"idle_timeout_ms\":5999}", true, err, sizeof err));
  cr_assert(strstr(err, "idle_timeout_ms"), "%s", err);
  cr_assert_null(make("{\"exchange\":\"e\",\"exchange_type\":\"x-delayed\"}", true, err, sizeof err));
  cr_assert(strstr(err, "exchange_type"), "%s", err);
  cr_assert_null(make("{\"exchange\":\"e\",\"max_inflight\":0}", true, err, sizeof err));
  cr_assert(strstr(err, "max_inflight"), "%s", err);

  void *a = make("{\"exchange\":\"e\",\"idle_timeout_ms\":0}", true, err, sizeof err);
  cr_assert(a, "%s", err);
  cr_assert_eq(ak_sink_rabbitmq.inline_max(a), 65536);
  void *b = make("{\"exchange\":\"e\",\"inline_max_bytes\":null}", true, err, sizeof err);
  cr_assert(b, "%s", err);
  cr_assert_eq(ak_sink_rabbitmq.inline_max(b), -1);
  void *c = make("{\"exchange\":\"e\",\"inline_max_bytes\":10}", true, err, sizeof err);
  cr_assert(c, "%s", err);
  cr_assert_eq(ak_sink_rabbitmq.inline_max(c), 10);
  cr_assert(ak_sink_rabbitmq.durable);
  ak_sink_rabbitmq.destroy(a);
  ak_sink_rabbitmq.destroy(b);
  ak_sink_rabbitmq.destroy(c);
}

Test(rabbitmq_sink, a_body_above_the_threshold_without_a_ref_is_claim_missing) {
  char err[256] = "";
  void *s = make("{\"exchange\":\"e\",\"inline_max_bytes\":4,\"url\":\"amqp://127.0.0.1:1\"}", true, err, sizeof err);
  cr_assert(s, "%s", err);
  ak_envelope_t e = env();
  ak_sink_attempt_t att = {.env = &e, .attempt = 1, .idempotency_key = "k"};
  answer_t a;
  answer_init(&a);
  ak_sink_rabbitmq.deliver(s, &att, &a, on_done);
  cr_assert_eq(a.calls, 1, "answered before deliver returned");
  cr_assert_eq(a.last.result, AK_SINK_RETRY);
  cr_assert_str_eq(a.last.reason, "claim_missing");
  ak_sink_rabbitmq.destroy(s);
}

Test(rabbitmq_sink, a_refused_connection_is_not_connected_then_answered_at_once_until_retry_ms) {
  int fd;
  int port = port_of(false, &fd);
  char json[256], err[256] = "";
  snprintf(json, sizeof json, "{\"exchange\":\"e1\",\"url\":\"amqp://guest:guest@127.0.0.1:%d\",\"retry_ms\":60000}",
           port);
  void *s = make(json, true, err, sizeof err);
  cr_assert(s, "%s", err);
  ak_envelope_t e = env();
  ak_sink_attempt_t att = {.env = &e, .attempt = 1, .idempotency_key = "k"};
  answer_t a;
  answer_init(&a);
  ak_sink_rabbitmq.deliver(s, &att, &a, on_done);
  cr_assert_eq(wait_calls(&a, 1, 5000), 1);
  cr_assert_eq(a.last.result, AK_SINK_RETRY);
  cr_assert_str_eq(a.last.reason, "not_connected");
  ak_sink_rabbitmq.deliver(s, &att, &a, on_done);
  cr_assert_eq(a.calls, 2, "inside retry_ms: answered before deliver returned");
  cr_assert_str_eq(a.last.reason, "not_connected");
  ak_sink_rabbitmq.destroy(s);
}

Test(rabbitmq_sink, a_guarded_sink_is_refused_a_private_address_permanently) {
  int fd;
  int port = port_of(true, &fd);
  char json[256], err[256] = "";
  snprintf(json, sizeof json, "{\"exchange\":\"e2\",\"url\":\"amqp://guest:guest@127.0.0.1:%d\"}", port);
  void *s = make(json, false, err, sizeof err);
  cr_assert(s, "%s", err);
  ak_envelope_t e = env();
  ak_sink_attempt_t att = {.env = &e, .attempt = 1, .idempotency_key = "k"};
  answer_t a;
  answer_init(&a);
  ak_sink_rabbitmq.deliver(s, &att, &a, on_done);
  cr_assert_eq(wait_calls(&a, 1, 5000), 1);
  cr_assert_eq(a.last.result, AK_SINK_PERMANENT);
  cr_assert_str_eq(a.last.reason, "egress: 127.0.0.1 is not a public address");
  ak_sink_rabbitmq.destroy(s);
  close(fd);
}

Test(rabbitmq_sink, busy_beyond_max_inflight_and_destroy_answers_what_is_under_way) {
  int lfd;
  int port = port_of(true, &lfd); /* accepts (backlog), never speaks: the login hangs */
  char json[256], err[256] = "";
  snprintf(json, sizeof json,
           "{\"exchange\":\"e3\",\"url\":\"amqp://guest:guest@127.0.0.1:%d\",\"max_inflight\":1,"
           "\"confirm_timeout_ms\":30000,\"idle_timeout_ms\":0}",
           port);
  void *s = make(json, true, err, sizeof err);
  cr_assert(s, "%s", err);
  /* a second instance of the same destination shares the connection and its bound */
  void *s2 = make(json, true, err, sizeof err);
  cr_assert(s2, "%s", err);
  ak_envelope_t e = env();
  ak_sink_attempt_t att = {.env = &e, .attempt = 1, .idempotency_key = "k"};
  answer_t a, b;
  answer_init(&a);
  answer_init(&b);
  ak_sink_rabbitmq.deliver(s, &att, &a, on_done);
  cr_assert_eq(a.calls, 0, "queued, not answered");
  ak_sink_rabbitmq.deliver(s2, &att, &b, on_done);
  cr_assert_eq(b.calls, 1, "busy is answered at once");
  cr_assert_eq(b.last.result, AK_SINK_RETRY);
  cr_assert_str_eq(b.last.reason, "busy");
  usleep(200000);
  cr_assert_eq(a.calls, 0, "still waiting for the broker");
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  ak_sink_rabbitmq.destroy(s);
  cr_assert_eq(a.calls, 1, "destroy answered the delivery under way before returning");
  cr_assert_eq(a.last.result, AK_SINK_RETRY);
  cr_assert_str_eq(a.last.reason, "sink stopped");
  ak_sink_rabbitmq.destroy(s2); /* the last user: the connection and its thread go */
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  cr_assert_lt(secs, 5.0, "a hanging login does not hold the stop (%.2fs)", secs);
  cr_assert_eq(a.calls, 1, "answered once");
  close(lfd);
}
