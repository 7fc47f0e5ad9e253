/* kafkamock: librdkafka's mock Kafka cluster in a process of its own, driven over stdin
 * (tests/e2e/kafka_mock.py). Owns the cluster's lifetime and the test's view into it; it
 * is a test tool, never part of a release build, and never listens anywhere but the
 * loopback ports the mock brokers pick.
 *
 *   kafkamock [-b BROKERS] TOPIC[:PARTITIONS] ...
 *
 * Prints the bootstrap servers as its first stdout line, then answers one command per
 * stdin line, each answer ending with a line "ok" (or "error <text>"):
 *   consume TOPIC            every record so far, one JSON line each: topic, partition,
 *                            offset, timestamp (ms), key and value (base64, null when
 *                            absent), headers [[name, value]...] (values as text)
 *   err N CODE               the next N produce requests (any broker) fail with CODE
 *   lostack TOPIC RTT_MS     the next produce request to each leader of TOPIC is appended
 *                            but answered only after RTT_MS (longer than the producer's
 *                            request timeout: the answer is lost to it)
 *   down BROKER | up BROKER  a broker (1..N, -1 = all) refuses / accepts connections
 *   create TOPIC PARTITIONS  one more topic
 *   unknown TOPIC | known TOPIC  the brokers' metadata answers UNKNOWN_TOPIC_OR_PART for
 *                            TOPIC (the mock would otherwise create any topic asked for) /
 *                            answers it normally again
 *   quit                     (also on stdin EOF)
 * The cluster lives as long as this process, so it survives the node under test. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <openssl/evp.h>

static rd_kafka_mock_cluster_t *mc;
static const char *bootstraps;

static rd_kafka_t *client(rd_kafka_type_t type) {
  char why[256];
  rd_kafka_conf_t *conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "bootstrap.servers", bootstraps, why, sizeof why);
  rd_kafka_conf_set(conf, "log_level", "3", why, sizeof why);
  if (type == RD_KAFKA_CONSUMER) {
    rd_kafka_conf_set(conf, "group.id", "kafkamock", why, sizeof why);
    rd_kafka_conf_set(conf, "enable.auto.commit", "false", why, sizeof why);
    rd_kafka_conf_set(conf, "enable.partition.eof", "true", why, sizeof why);
  }
  rd_kafka_t *rk = rd_kafka_new(type, conf, why, sizeof why);
  if (!rk) {
    fprintf(stderr, "kafkamock: %s\n", why);
    rd_kafka_conf_destroy(conf);
  }
  return rk;
}

static json_t *b64(const void *p, size_t n) {
  if (!p) return json_null();
  char *out = malloc(4 * ((n + 2) / 3) + 1);
  if (!out) return json_null();
  EVP_EncodeBlock((unsigned char *)out, p, (int)n);
  json_t *s = json_string(out);
  free(out);
  return s;
}

/* The partitions of topic and their leaders, from the cluster's metadata. -1 when the
 * topic is unknown. */
static int topic_leaders(rd_kafka_t *rk, const char *topic, int32_t *leaders, int max) {
  rd_kafka_topic_t *t = rd_kafka_topic_new(rk, topic, NULL);
  const struct rd_kafka_metadata *md = NULL;
  int n = -1;
  if (t && rd_kafka_metadata(rk, 0, t, &md, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR && md->topic_cnt == 1 &&
      md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR) {
    n = 0;
    for (int i = 0; i < md->topics[0].partition_cnt && n < max; i++) leaders[n++] = md->topics[0].partitions[i].leader;
  }
  if (md) rd_kafka_metadata_destroy(md);
  if (t) rd_kafka_topic_destroy(t);
  return n;
}

static void consume(const char *topic) {
  rd_kafka_t *rk = client(RD_KAFKA_CONSUMER);
  if (!rk) {
    puts("error consumer");
    return;
  }
  int32_t leaders[256];
  int np = topic_leaders(rk, topic, leaders, 256);
  if (np < 0) {
    puts("error unknown topic");
    rd_kafka_destroy(rk);
    return;
  }
  rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(np);
  int left = 0;
  for (int p = 0; p < np; p++) {
    int64_t lo = 0, hi = 0;
    rd_kafka_query_watermark_offsets(rk, topic, p, &lo, &hi, 5000);
    if (hi > lo) {
      rd_kafka_topic_partition_list_add(parts, topic, p)->offset = RD_KAFKA_OFFSET_BEGINNING;
      left++;
    }
  }
  if (left) rd_kafka_assign(rk, parts);
  int idle = 0;
  while (left > 0 && idle < 100) {
    rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
    if (!m) {
      idle++;
      continue;
    }
    idle = 0;
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
      left--;
    } else if (m->err) {
      fprintf(stderr, "kafkamock: consume: %s\n", rd_kafka_message_errstr(m));
    } else {
      json_t *hs = json_array();
      rd_kafka_headers_t *h = NULL;
      if (rd_kafka_message_headers(m, &h) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        const char *name;
        const void *val;
        size_t vlen;
        for (size_t i = 0; rd_kafka_header_get_all(h, i, &name, &val, &vlen) == RD_KAFKA_RESP_ERR_NO_ERROR; i++)
          json_array_append_new(hs, json_pack("[s s#]", name, val ? (const char *)val : "", val ? (int)vlen : 0));
      }
      rd_kafka_timestamp_type_t tt;
      json_int_t ts = (json_int_t)rd_kafka_message_timestamp(m, &tt);
      json_t *o = json_pack("{s:s, s:i, s:I, s:I, s:o, s:o, s:o}", "topic", topic, "partition", (int)m->partition,
                            "offset", (json_int_t)m->offset, "timestamp", ts,
                            "key", b64(m->key, m->key_len), "value", b64(m->payload, m->len), "headers", hs);
      char *line = json_dumps(o, JSON_COMPACT);
      if (line) puts(line);
      free(line);
      json_decref(o);
    }
    rd_kafka_message_destroy(m);
  }
  rd_kafka_topic_partition_list_destroy(parts);
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
  puts(left > 0 ? "error incomplete" : "ok");
}

static void lostack(const char *topic, int rtt) {
  rd_kafka_t *rk = client(RD_KAFKA_PRODUCER);
  int32_t leaders[256];
  int np = rk ? topic_leaders(rk, topic, leaders, 256) : -1;
  if (rk) rd_kafka_destroy(rk);
  if (np < 0) {
    puts("error unknown topic");
    return;
  }
  for (int i = 0; i < np; i++) {
    bool seen = false;
    for (int j = 0; j < i; j++) seen |= leaders[j] == leaders[i];
    if (!seen)
      rd_kafka_mock_broker_push_request_error_rtts(mc, leaders[i], 0 /* Produce */, 1, RD_KAFKA_RESP_ERR_NO_ERROR,
                                                   rtt);
  }
  puts("ok");
}

static int create_topic(const char *spec, int def_parts) {
  char name[256];
  int parts = def_parts;
  snprintf(name, sizeof name, "%s", spec);
  char *colon = strchr(name, ':');
  if (colon) {
    *colon = '\0';
    parts = atoi(colon + 1);
  }
  if (parts < 1) parts = 1;
  return rd_kafka_mock_topic_create(mc, name, parts, 1) == RD_KAFKA_RESP_ERR_NO_ERROR ? 0 : -1;
}

int main(int argc, char **argv) {
  int nbrokers = 3;
  int opt;
  while ((opt = getopt(argc, argv, "b:")) != -1) {
    if (opt == 'b') nbrokers = atoi(optarg);
    else {
      fprintf(stderr, "usage: kafkamock [-b BROKERS] TOPIC[:PARTITIONS]...\n");
      return 2;
    }
  }
  char why[256];
  rd_kafka_conf_t *conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "log_level", "3", why, sizeof why);
  rd_kafka_t *owner = rd_kafka_new(RD_KAFKA_PRODUCER, conf, why, sizeof why);
  if (!owner) {
    fprintf(stderr, "kafkamock: %s\n", why);
    return 1;
  }
  mc = rd_kafka_mock_cluster_new(owner, nbrokers < 1 ? 1 : nbrokers);
  if (!mc) {
    fprintf(stderr, "kafkamock: cannot create the mock cluster\n");
    return 1;
  }
  bootstraps = rd_kafka_mock_cluster_bootstraps(mc);
  for (int i = optind; i < argc; i++)
    if (create_topic(argv[i], 3) != 0) fprintf(stderr, "kafkamock: cannot create topic %s\n", argv[i]);
  printf("%s\n", bootstraps);
  fflush(stdout);

  char line[1024];
  while (fgets(line, sizeof line, stdin)) {
    char cmd[32] = "", a[512] = "", b[64] = "";
    int n = sscanf(line, "%31s %511s %63s", cmd, a, b);
    if (n < 1) continue;
    if (!strcmp(cmd, "quit")) {
      puts("ok");
      fflush(stdout);
      break;
    } else if (!strcmp(cmd, "consume") && n >= 2) {
      consume(a);
    } else if (!strcmp(cmd, "err") && n == 3) {
      size_t cnt = (size_t)atoi(a);
      rd_kafka_resp_err_t code = (rd_kafka_resp_err_t)atoi(b);
      for (size_t i = 0; i < cnt; i++) rd_kafka_mock_push_request_errors(mc, 0 /* Produce */, 1, code);
      puts("ok");
    } else if (!strcmp(cmd, "lostack") && n == 3) {
      lostack(a, atoi(b));
    } else if ((!strcmp(cmd, "down") || !strcmp(cmd, "up")) && n == 2) {
      int32_t id = atoi(a);
      rd_kafka_resp_err_t e =
        cmd[0] == 'd' ? rd_kafka_mock_broker_set_down(mc, id) : rd_kafka_mock_broker_set_up(mc, id);
      puts(e ? "error no such broker" : "ok");
    } else if ((!strcmp(cmd, "unknown") || !strcmp(cmd, "known")) && n == 2) {
      rd_kafka_mock_topic_set_error(mc, a, cmd[0] == 'u' ? RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART
                                                          : RD_KAFKA_RESP_ERR_NO_ERROR);
      puts("ok");
    } else if (!strcmp(cmd, "create") && n == 3) {
      char spec[600];
      snprintf(spec, sizeof spec, "%s:%s", a, b);
      puts(create_topic(spec, 3) ? "error cannot create" : "ok");
    } else {
      puts("error unknown command");
    }
    fflush(stdout);
  }
  rd_kafka_mock_cluster_destroy(mc);
  rd_kafka_destroy(owner);
  return 0;
}
