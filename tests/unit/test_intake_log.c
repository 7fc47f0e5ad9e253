/* Unit tests: the Kafka intake log of wal.type: dual (intake/log.c) against librdkafka's
 * mock cluster, in process (3 brokers, replication 3). Publish and replay byte-exact with
 * offsets, another node's records in the same partition skipped, a replay from the middle
 * and one stopped early; brokers down -> the batch fails within produce_timeout_ms, up ->
 * the next succeeds; an unknown topic refused by name; the partition = Kafka's murmur2 of
 * the node id (checked against the test's own murmur2), the same for two logs; the
 * min.insync.replicas rule (the 2.0.2 mock does not answer DescribeConfigs: checked is
 * false); free with a batch in flight to a down cluster answers it "stopped". */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include "intake/log.h"

static rd_kafka_t *owner;
static rd_kafka_mock_cluster_t *mc;
static const char *bootstraps;

static void cluster_up(void) {
  char why[256];
  rd_kafka_conf_t *conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "log_level", "3", why, sizeof why);
  owner = rd_kafka_new(RD_KAFKA_PRODUCER, conf, why, sizeof why);
  cr_assert_not_null(owner, "%s", why);
  mc = rd_kafka_mock_cluster_new(owner, 3);
  cr_assert_not_null(mc);
  bootstraps = rd_kafka_mock_cluster_bootstraps(mc);
  cr_assert_eq(rd_kafka_mock_topic_create(mc, "intake", 1, 3), RD_KAFKA_RESP_ERR_NO_ERROR);
  cr_assert_eq(rd_kafka_mock_topic_create(mc, "wide", 8, 3), RD_KAFKA_RESP_ERR_NO_ERROR);
}

static void cluster_down(void) {
  rd_kafka_mock_cluster_destroy(mc);
  rd_kafka_destroy(owner);
}

TestSuite(intake_log, .init = cluster_up, .fini = cluster_down, .timeout = 120);

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static ak_intake_log_t *make(const char *topic, const char *node, int64_t produce_timeout_ms) {
  const char *brokers[] = {bootstraps};
  ak_intake_log_cfg_t cfg = {.brokers = brokers, .nbrokers = 1, .topic = topic, .node_id = node,
                             .produce_timeout_ms = produce_timeout_ms, .max_record_bytes = 4 << 20};
  char err[256] = "";
  ak_intake_log_t *l = ak_intake_log_new(&cfg, err, sizeof err);
  cr_assert_not_null(l, "%s", err);
  return l;
}

static void open_ok(ak_intake_log_t *l) {
  char err[256] = "";
  bool checked = true;
  cr_assert_eq(ak_intake_log_open(l, 5000, &checked, err, sizeof err), 0, "%s", err);
}

/* ---- one batch's answer ---- */
typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int calls;
  bool ok;
  int64_t last_offset;
  char why[64];
  bool on_log_thread;
} answer_t;

static void answer_init(answer_t *a) {
  memset(a, 0, sizeof *a);
  pthread_mutex_init(&a->mu, NULL);
  pthread_cond_init(&a->cv, NULL);
}

static void on_done(void *ctx, bool ok, int64_t last_offset, const char *why) {
  answer_t *a = ctx;
  char name[32] = "";
  pthread_getname_np(pthread_self(), name, sizeof name);
  pthread_mutex_lock(&a->mu);
  a->calls++;
  a->ok = ok;
  a->last_offset = last_offset;
  snprintf(a->why, sizeof a->why, "%s", why ? why : "(null)");
  a->on_log_thread = strcmp(name, "ak-intake") == 0;
  pthread_cond_broadcast(&a->cv);
  pthread_mutex_unlock(&a->mu);
}

/* true when answered within ms */
static bool wait_answer(answer_t *a, int64_t ms) {
  int64_t deadline = now_ms() + ms;
  pthread_mutex_lock(&a->mu);
  while (a->calls == 0 && now_ms() < deadline) {
    pthread_mutex_unlock(&a->mu);
    usleep(10 * 1000);
    pthread_mutex_lock(&a->mu);
  }
  bool got = a->calls > 0;
  pthread_mutex_unlock(&a->mu);
  return got;
}

static int64_t publish_ok(ak_intake_log_t *l, const ak_intake_val_t *v, size_t n) {
  answer_t a;
  answer_init(&a);
  cr_assert_eq(ak_intake_log_publish(l, v, n, on_done, &a), 0);
  cr_assert(wait_answer(&a, 10000), "answered");
  usleep(20 * 1000);
  cr_assert_eq(a.calls, 1, "done exactly once");
  cr_assert(a.ok, "ok: %s", a.why);
  cr_assert(a.on_log_thread, "done runs on the ak-intake thread");
  return a.last_offset;
}

/* ---- replay collector ---- */
typedef struct {
  size_t n;
  int64_t offsets[64];
  uint8_t *vals[64];
  size_t lens[64];
  int stop_after; /* 0: never */
} seen_t;

static int on_record(void *ctx, int64_t offset, const uint8_t *val, size_t len) {
  seen_t *s = ctx;
  cr_assert_lt(s->n, 64u);
  s->offsets[s->n] = offset;
  s->vals[s->n] = malloc(len ? len : 1);
  if (len) memcpy(s->vals[s->n], val, len);
  s->lens[s->n] = len;
  s->n++;
  return s->stop_after && (int)s->n == s->stop_after ? 7 : 0;
}

static void seen_free(seen_t *s) {
  for (size_t i = 0; i < s->n; i++) free(s->vals[i]);
  s->n = 0;
}

Test(intake_log, publish_then_replay_byte_exact_skipping_other_nodes) {
  ak_intake_log_t *a = make("intake", "node-a", 5000);
  ak_intake_log_t *b = make("intake", "node-b", 5000);
  open_ok(a);
  open_ok(b);
  cr_assert_eq(ak_intake_log_partition(a), 0);
  cr_assert_eq(ak_intake_log_partition(b), 0, "one partition: both nodes share it");

  /* values: text, binary with NULs and every byte, an empty one, and 2 MiB */
  static uint8_t bin[256];
  for (int i = 0; i < 256; i++) bin[i] = (uint8_t)i;
  size_t big_len = 2u << 20;
  uint8_t *big = malloc(big_len);
  for (size_t i = 0; i < big_len; i++) big[i] = (uint8_t)(i * 31 + 7);
  ak_intake_val_t b1[] = {{"hook-1", 6}, {bin, sizeof bin}};
  ak_intake_val_t b2[] = {{"hook-3", 6}, {"", 0}, {big, big_len}};
  ak_intake_val_t b3[] = {{"hook-6\0tail", 11}};
  ak_intake_val_t other[] = {{"not-mine-1", 10}, {"not-mine-2", 10}};
  const ak_intake_val_t *want[] = {&b1[0], &b1[1], &b2[0], &b2[1], &b2[2], &b3[0]};

  int64_t o1 = publish_ok(a, b1, 2);
  int64_t ob = publish_ok(b, other, 2);
  int64_t o2 = publish_ok(a, b2, 3);
  int64_t o3 = publish_ok(a, b3, 1);
  cr_expect_eq(o1, 1, "batch 1 at offsets 0..1");
  cr_expect_eq(ob, 3, "node-b's batch at 2..3");
  cr_expect_eq(o2, 6, "batch 2 at 4..6");
  cr_expect_eq(o3, 7, "batch 3 at 7");
  cr_assert(o1 < o2 && o2 < o3);

  /* a record over max_record_bytes is refused before anything is queued, done not called */
  answer_t none;
  answer_init(&none);
  size_t huge_len = (4u << 20) + 1;
  uint8_t *huge = calloc(1, huge_len);
  ak_intake_val_t hv[] = {{"ok", 2}, {huge, huge_len}};
  cr_expect_eq(ak_intake_log_publish(a, hv, 2, on_done, &none), -1);
  cr_expect_eq(ak_intake_log_publish(a, hv, 0, on_done, &none), -1, "an empty batch is refused");
  free(huge);

  char err[256] = "";
  seen_t s = {0};
  int64_t end = -1;
  cr_assert_eq(ak_intake_log_replay(a, AK_INTAKE_BEGINNING, 5000, on_record, &s, &end, err, sizeof err), 0, "%s",
               err);
  cr_expect_eq(end, 8, "the high watermark");
  cr_assert_eq(s.n, 6u, "node-a's records only");
  int64_t offs[] = {0, 1, 4, 5, 6, 7};
  for (size_t i = 0; i < 6; i++) {
    cr_expect_eq(s.offsets[i], offs[i], "record %zu offset", i);
    cr_expect_eq(s.lens[i], want[i]->len, "record %zu length", i);
    cr_expect(memcmp(s.vals[i], want[i]->p, want[i]->len) == 0, "record %zu byte-exact", i);
  }
  seen_free(&s);

  /* from the middle: batch 2's first offset on */
  cr_assert_eq(ak_intake_log_replay(a, o1 + 3, 5000, on_record, &s, &end, err, sizeof err), 0, "%s", err);
  cr_assert_eq(s.n, 4u);
  cr_expect_eq(s.offsets[0], 4);
  cr_expect_eq(s.lens[2], big_len);
  cr_expect(memcmp(s.vals[2], big, big_len) == 0);
  cr_expect_eq(s.offsets[3], 7);
  seen_free(&s);

  /* node-b sees only its own two */
  cr_assert_eq(ak_intake_log_replay(b, AK_INTAKE_BEGINNING, 5000, on_record, &s, &end, err, sizeof err), 0, "%s",
               err);
  cr_assert_eq(s.n, 2u);
  cr_expect_eq(s.offsets[0], 2);
  cr_expect(memcmp(s.vals[1], "not-mine-2", 10) == 0);
  seen_free(&s);

  /* at the end: nothing, end = the high watermark; stopped early: fn's value */
  cr_assert_eq(ak_intake_log_replay(a, 8, 5000, on_record, &s, &end, err, sizeof err), 0, "%s", err);
  cr_expect_eq(s.n, 0u);
  cr_expect_eq(end, 8);
  s.stop_after = 2;
  cr_expect_eq(ak_intake_log_replay(a, AK_INTAKE_BEGINNING, 5000, on_record, &s, &end, err, sizeof err), 7);
  cr_expect_eq(s.n, 2u);
  seen_free(&s);

  ak_intake_log_free(b, 5000);
  ak_intake_log_free(a, 5000);
  cr_expect_eq(none.calls, 0, "a refused batch is never answered");
  free(big);
}

Test(intake_log, brokers_down_fail_the_batch_then_up_succeeds) {
  ak_intake_log_t *l = make("intake", "node-a", 1000);
  open_ok(l);
  ak_intake_val_t v[] = {{"one", 3}, {"two", 3}};
  publish_ok(l, v, 2);

  cr_assert_eq(rd_kafka_mock_broker_set_down(mc, -1), RD_KAFKA_RESP_ERR_NO_ERROR);
  answer_t a;
  answer_init(&a);
  int64_t t0 = now_ms();
  cr_assert_eq(ak_intake_log_publish(l, v, 2, on_done, &a), 0, "queued: publish never waits on the network");
  cr_assert(wait_answer(&a, 1000 + 3000), "answered within produce_timeout_ms + margin");
  int64_t took = now_ms() - t0;
  usleep(50 * 1000);
  cr_expect_eq(a.calls, 1);
  cr_expect(!a.ok);
  cr_expect_eq(a.last_offset, -1);
  cr_expect(a.why[0] != '\0', "a reason");
  cr_expect(a.on_log_thread);
  cr_expect_geq(took, 500, "not before the brokers had their time (%lld ms)", (long long)took);

  char err[256] = "";
  seen_t s = {0};
  int64_t end;
  cr_expect_eq(ak_intake_log_replay(l, AK_INTAKE_BEGINNING, 500, on_record, &s, &end, err, sizeof err), -1,
               "replay with the brokers down fails");
  cr_expect(strstr(err, "intake") != NULL, "%s", err);
  seen_free(&s);

  cr_assert_eq(rd_kafka_mock_broker_set_up(mc, -1), RD_KAFKA_RESP_ERR_NO_ERROR);
  /* the first publishes after the outage may still meet a reconnecting broker */
  bool ok = false;
  for (int i = 0; i < 5 && !ok; i++) {
    answer_t b;
    answer_init(&b);
    cr_assert_eq(ak_intake_log_publish(l, v, 2, on_done, &b), 0);
    cr_assert(wait_answer(&b, 10000));
    ok = b.ok;
    if (ok) cr_expect_gt(b.last_offset, 1);
  }
  cr_expect(ok, "a publish succeeds once the brokers are back");
  ak_intake_log_free(l, 5000);
}

Test(intake_log, unknown_topic_refused_by_name) {
  rd_kafka_mock_topic_set_error(mc, "absent-topic", RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART);
  ak_intake_log_t *l = make("absent-topic", "node-a", 1000);
  answer_t a;
  answer_init(&a);
  ak_intake_val_t v[] = {{"x", 1}};
  cr_expect_eq(ak_intake_log_publish(l, v, 1, on_done, &a), -1, "not open: refused");
  char err[256] = "";
  bool checked = true;
  cr_expect_eq(ak_intake_log_open(l, 3000, &checked, err, sizeof err), -1);
  cr_expect(strstr(err, "absent-topic") != NULL, "%s", err);
  cr_expect(strstr(err, "does not exist") != NULL, "%s", err);
  cr_expect(!checked);
  cr_expect_eq(ak_intake_log_partition(l), -1);
  ak_intake_log_free(l, 1000);
  cr_expect_eq(a.calls, 0);
}

/* Kafka's murmur2 (the Java client's Utils.murmur2), written here from its definition so
 * that the log's choice is checked against something other than librdkafka. */
static int32_t murmur2(const char *key) {
  const uint8_t *d = (const uint8_t *)key;
  size_t len = strlen(key);
  const uint32_t m = 0x5bd1e995;
  uint32_t h = 0x9747b28c ^ (uint32_t)len;
  for (size_t i = 0; i + 4 <= len; i += 4) {
    uint32_t k = d[i] | (uint32_t)d[i + 1] << 8 | (uint32_t)d[i + 2] << 16 | (uint32_t)d[i + 3] << 24;
    k *= m;
    k ^= k >> 24;
    k *= m;
    h *= m;
    h ^= k;
  }
  size_t t = len & ~(size_t)3;
  switch (len % 4) {
  case 3: h ^= (uint32_t)d[t + 2] << 16; /* fall through */
  case 2: h ^= (uint32_t)d[t + 1] << 8;  /* fall through */
  case 1: h ^= d[t]; h *= m;
  }
  h ^= h >> 13;
  h *= m;
  h ^= h >> 15;
  return (int32_t)h;
}

Test(intake_log, partition_is_murmur2_of_the_node_id_and_stable) {
  /* the Java client's own test vectors */
  cr_assert_eq(murmur2("21"), -973932308);
  cr_assert_eq(murmur2("foobar"), -790332482);
  cr_assert_eq(murmur2("a-little-bit-long-string"), -985981536);
  cr_assert_eq(murmur2("a-little-bit-longer-string"), -1486304829);
  cr_assert_eq(murmur2("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8"), -58897971);

  const char *nodes[] = {"node-1", "node-2", "node-3", "node-4", "ankusa-0", "ankusa-1.eu-west"};
  bool used[8] = {false};
  int distinct = 0;
  for (size_t i = 0; i < sizeof nodes / sizeof *nodes; i++) {
    ak_intake_log_t *x = make("wide", nodes[i], 5000);
    ak_intake_log_t *y = make("wide", nodes[i], 5000);
    cr_assert_eq(ak_intake_log_partition(x), -1, "unknown before open");
    open_ok(x);
    open_ok(y);
    int32_t want = (murmur2(nodes[i]) & 0x7fffffff) % 8;
    cr_expect_eq(ak_intake_log_partition(x), want, "%s", nodes[i]);
    cr_expect_eq(ak_intake_log_partition(y), ak_intake_log_partition(x), "%s: the same for two logs", nodes[i]);
    open_ok(x);
    cr_expect_eq(ak_intake_log_partition(x), want, "%s: the same on a second open", nodes[i]);
    if (!used[want]) distinct++;
    used[want] = true;
    if (i == 0) { /* a record lands there */
      ak_intake_val_t v[] = {{"p", 1}};
      publish_ok(x, v, 1);
      char err[256] = "";
      seen_t s = {0};
      int64_t end = -1;
      cr_assert_eq(ak_intake_log_replay(y, AK_INTAKE_BEGINNING, 5000, on_record, &s, &end, err, sizeof err), 0, "%s",
                   err);
      cr_expect_eq(s.n, 1u, "y reads x's record from the same partition");
      cr_expect_eq(end, 1);
      seen_free(&s);
    }
    ak_intake_log_free(x, 1000);
    ak_intake_log_free(y, 1000);
  }
  cr_expect_gt(distinct, 1, "nodes spread over partitions");
}

Test(intake_log, min_insync_replicas) {
  /* librdkafka 2.0.2's mock cluster does not answer DescribeConfigs: not checked, open ok */
  const char *brokers[] = {bootstraps};
  ak_intake_log_cfg_t cfg = {.brokers = brokers, .nbrokers = 1, .topic = "intake", .node_id = "node-a",
                             .produce_timeout_ms = 5000, .max_record_bytes = 1000000, .min_insync_replicas = 2};
  char err[256] = "";
  ak_intake_log_t *l = ak_intake_log_new(&cfg, err, sizeof err);
  cr_assert_not_null(l, "%s", err);
  bool checked = true;
  int64_t t0 = now_ms();
  cr_assert_eq(ak_intake_log_open(l, 5000, &checked, err, sizeof err), 0, "%s", err);
  cr_expect(!checked, "the mock does not tell");
  cr_expect_lt(now_ms() - t0, 2500, "asked of a broker, not of a controller the mock never names");
  ak_intake_log_free(l, 1000);

  /* the rule itself, on the value a cluster would give */
  err[0] = '\0';
  cr_expect_eq(ak_intake_log_isr_ok("intake", "1", 2, err, sizeof err), 0);
  cr_expect(strstr(err, "intake") && strstr(err, "is 1") && strstr(err, "at least 2"), "%s", err);
  cr_expect_eq(ak_intake_log_isr_ok("intake", "2", 2, err, sizeof err), 1);
  cr_expect_eq(ak_intake_log_isr_ok("intake", "3", 2, err, sizeof err), 1);
  cr_expect_eq(ak_intake_log_isr_ok("intake", "two", 2, err, sizeof err), -1);
  cr_expect_eq(ak_intake_log_isr_ok("intake", "", 2, err, sizeof err), -1);
}

Test(intake_log, free_answers_a_batch_in_flight_to_a_down_cluster) {
  ak_intake_log_t *l = make("intake", "node-a", 60000);
  open_ok(l);
  cr_assert_eq(rd_kafka_mock_broker_set_down(mc, -1), RD_KAFKA_RESP_ERR_NO_ERROR);
  answer_t a;
  answer_init(&a);
  uint8_t *val = malloc(1000);
  memset(val, 'v', 1000);
  ak_intake_val_t v[] = {{val, 1000}, {val, 10}};
  cr_assert_eq(ak_intake_log_publish(l, v, 2, on_done, &a), 0);
  free(val); /* copied at publish */
  usleep(300 * 1000);
  cr_expect_eq(a.calls, 0, "the cluster is down: the batch waits");
  int64_t t0 = now_ms();
  ak_intake_log_free(l, 300);
  cr_expect_lt(now_ms() - t0, 5000, "free does not wait for produce_timeout_ms");
  cr_expect_eq(a.calls, 1, "answered once, before free returned");
  cr_expect(!a.ok);
  cr_expect_str_eq(a.why, "stopped");
  cr_expect(a.on_log_thread);
  rd_kafka_mock_broker_set_up(mc, -1);
}

Test(intake_log, bad_config_refused_at_new) {
  const char *brokers[] = {bootstraps};
  const char *none[] = {" , "};
  char err[256];
  struct {
    ak_intake_log_cfg_t cfg;
    const char *needle;
  } cases[] = {
    {{.brokers = none, .nbrokers = 1, .topic = "t", .node_id = "n", .produce_timeout_ms = 1000,
      .max_record_bytes = 1000},
     "brokers"},
    {{.brokers = brokers, .nbrokers = 1, .topic = "", .node_id = "n", .produce_timeout_ms = 1000,
      .max_record_bytes = 1000},
     "topic"},
    {{.brokers = brokers, .nbrokers = 1, .topic = "t", .node_id = "", .produce_timeout_ms = 1000,
      .max_record_bytes = 1000},
     "node_id"},
    {{.brokers = brokers, .nbrokers = 1, .topic = "t", .node_id = "n", .produce_timeout_ms = 0,
      .max_record_bytes = 1000},
     "produce_timeout_ms"},
    {{.brokers = brokers, .nbrokers = 1, .topic = "t", .node_id = "n", .produce_timeout_ms = 1000,
      .max_record_bytes = 0},
     "max_record_bytes"},
    {{.brokers = brokers, .nbrokers = 1, .topic = "t", .node_id = "n", .produce_timeout_ms = 1000,
      .max_record_bytes = 1000, .sasl_mechanism = "gssapi", .sasl_username = "u", .sasl_password = "s3cret-pw"},
     "sasl.mechanism"},
    {{.brokers = brokers, .nbrokers = 1, .topic = "t", .node_id = "n", .produce_timeout_ms = 1000,
      .max_record_bytes = 1000, .sasl_mechanism = "plain", .sasl_username = "u"},
     "password"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    err[0] = '\0';
    cr_expect_null(ak_intake_log_new(&cases[i].cfg, err, sizeof err), "case %zu", i);
    cr_expect(strstr(err, cases[i].needle) != NULL, "case %zu: %s", i, err);
    cr_expect(strstr(err, "s3cret-pw") == NULL, "case %zu: no password in %s", i, err);
  }
  /* SASL settings are accepted without touching the network */
  ak_intake_log_cfg_t ok = {.brokers = brokers, .nbrokers = 1, .topic = "t", .node_id = "n",
                            .produce_timeout_ms = 1000, .max_record_bytes = 1000, .sasl_mechanism = "scram_sha_512",
                            .sasl_username = "u", .sasl_password = "s3cret-pw"};
  ak_intake_log_t *l = ak_intake_log_new(&ok, err, sizeof err);
  cr_assert_not_null(l, "%s", err);
  ak_intake_log_free(l, 100);
}
