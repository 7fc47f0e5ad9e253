/* Shared librdkafka settings, error reasons and log lines (net/kafka.h). */
#include <stdio.h>
#include <string.h>
#include "core/buf.h"
#include "core/log.h"
#include "core/options.h"
#include "net/kafka.h"

static const char *const sasl_names[] = {"plain", "scram_sha_256", "scram_sha_512"};
static const char *const sasl_mechanisms[] = {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"};

int ak_kafka_sasl_index(const char *name) {
  for (int i = 0; name && i < (int)(sizeof sasl_names / sizeof *sasl_names); i++)
    if (!strcmp(name, sasl_names[i])) return i;
  return -1;
}

int ak_kafka_conf_set(rd_kafka_conf_t *conf, const char *key, const char *val, char *err, size_t errlen) {
  char why[256];
  if (rd_kafka_conf_set(conf, key, val, why, sizeof why) == RD_KAFKA_CONF_OK) return 0;
  snprintf(err, errlen, "librdkafka refused %s", key); /* why may echo the value: not copied */
  return -1;
}

int ak_kafka_client_conf(rd_kafka_conf_t *conf, const ak_kafka_client_cfg_t *c, char *err, size_t errlen) {
  if (c->sasl >= (int)(sizeof sasl_mechanisms / sizeof *sasl_mechanisms)) {
    snprintf(err, errlen, "unknown SASL mechanism");
    return -1;
  }
  int rc = 0;
  rc |= ak_kafka_conf_set(conf, "bootstrap.servers", c->brokers, err, errlen);
  rc |= ak_kafka_conf_set(conf, "client.id", c->client_id, err, errlen);
  rc |= ak_kafka_conf_set(conf, "reconnect.backoff.ms", "100", err, errlen);
  rc |= ak_kafka_conf_set(conf, "reconnect.backoff.max.ms", "5000", err, errlen);
  const char *proto = c->sasl >= 0 ? (c->ssl ? "sasl_ssl" : "sasl_plaintext") : (c->ssl ? "ssl" : "plaintext");
  rc |= ak_kafka_conf_set(conf, "security.protocol", proto, err, errlen);
  if (c->sasl >= 0) {
    rc |= ak_kafka_conf_set(conf, "sasl.mechanisms", sasl_mechanisms[c->sasl], err, errlen);
    rc |= ak_kafka_conf_set(conf, "sasl.username", c->sasl_user, err, errlen);
    rc |= ak_kafka_conf_set(conf, "sasl.password", c->sasl_pass, err, errlen);
  }
  return rc ? -1 : 0;
}

rd_kafka_t *ak_kafka_producer_new(const ak_kafka_producer_cfg_t *p, char *err, size_t errlen) {
  rd_kafka_conf_t *conf = rd_kafka_conf_new();
  char num[32];
  int rc = ak_kafka_client_conf(conf, &p->client, err, errlen);
  rc |= ak_kafka_conf_set(conf, "enable.idempotence", "true", err, errlen);
  rc |= ak_kafka_conf_set(conf, "acks", "all", err, errlen);
  rc |= ak_kafka_conf_set(conf, "max.in.flight.requests.per.connection", "5", err, errlen);
  /* the sink: no linger, a record goes out at once; records that queue while a request is
   * in flight still travel together in the next one */
  snprintf(num, sizeof num, "%lld", (long long)p->linger_ms);
  rc |= ak_kafka_conf_set(conf, "linger.ms", num, err, errlen);
  rc |= ak_kafka_conf_set(conf, "partitioner", "murmur2_random", err, errlen);
  rc |= ak_kafka_conf_set(conf, "allow.auto.create.topics", "false", err, errlen);
  snprintf(num, sizeof num, "%lld", (long long)p->produce_timeout_ms);
  rc |= ak_kafka_conf_set(conf, "message.timeout.ms", num, err, errlen);
  /* A request whose answer is lost times out (socket.timeout.ms caps librdkafka's wait
   * for one request; request.timeout.ms is the brokers' own wait for acks=all) well inside
   * the record's time, so that the producer's own retry, same producer id and sequence,
   * which a broker drops as a duplicate, can still confirm it. */
  int64_t req = p->produce_timeout_ms / 2;
  snprintf(num, sizeof num, "%lld", (long long)(req < 100 ? 100 : req));
  rc |= ak_kafka_conf_set(conf, "socket.timeout.ms", num, err, errlen);
  rc |= ak_kafka_conf_set(conf, "request.timeout.ms", num, err, errlen);
  snprintf(num, sizeof num, "%lld", (long long)(p->produce_timeout_ms < 1000 ? p->produce_timeout_ms : 1000));
  rc |= ak_kafka_conf_set(conf, "topic.metadata.propagation.max.ms", num, err, errlen);
  snprintf(num, sizeof num, "%lld",
           (long long)(p->max_record_bytes + 65536 > 1000000 ? p->max_record_bytes + 65536 : 1000000));
  rc |= ak_kafka_conf_set(conf, "message.max.bytes", num, err, errlen);
  snprintf(num, sizeof num, "%lld", (long long)p->queue_messages);
  rc |= ak_kafka_conf_set(conf, "queue.buffering.max.messages", num, err, errlen);
  snprintf(num, sizeof num, "%lld", (long long)p->queue_kbytes);
  rc |= ak_kafka_conf_set(conf, "queue.buffering.max.kbytes", num, err, errlen);
  if (rc != 0) {
    rd_kafka_conf_destroy(conf);
    return NULL;
  }
  rd_kafka_conf_set_opaque(conf, p->opaque);
  if (p->dr_msg_cb) rd_kafka_conf_set_dr_msg_cb(conf, p->dr_msg_cb);
  if (p->error_cb) rd_kafka_conf_set_error_cb(conf, p->error_cb);
  if (p->log_cb) rd_kafka_conf_set_log_cb(conf, p->log_cb);
  if (p->connect_cb) rd_kafka_conf_set_connect_cb(conf, p->connect_cb);
  return ak_kafka_new(RD_KAFKA_PRODUCER, conf, err, errlen);
}

rd_kafka_t *ak_kafka_new(rd_kafka_type_t type, rd_kafka_conf_t *conf, char *err, size_t errlen) {
  char why[256];
  rd_kafka_t *rk = rd_kafka_new(type, conf, why, sizeof why);
  if (!rk) {
    rd_kafka_conf_destroy(conf);
    snprintf(err, errlen, "cannot create the kafka %s", type == RD_KAFKA_PRODUCER ? "producer" : "consumer");
  }
  return rk;
}

bool ak_kafka_broker_next(const char **s, const char **p, size_t *len) {
  while (*s && **s) {
    const char *e = strchr(*s, ',');
    size_t n = e ? (size_t)(e - *s) : strlen(*s);
    const char *q = *s;
    *s += n + (e ? 1 : 0);
    while (n && (*q == ' ' || *q == '\t')) q++, n--;
    while (n && (q[n - 1] == ' ' || q[n - 1] == '\t')) n--;
    if (!n) continue;
    *p = q;
    *len = n;
    return true;
  }
  return false;
}

char *ak_kafka_join_brokers(const char *const *v, size_t n) {
  ak_buf_t b = AK_BUF_INIT;
  size_t parts = 0;
  for (size_t i = 0; i < n; i++) {
    const char *s = v[i], *p;
    size_t len;
    while (ak_kafka_broker_next(&s, &p, &len)) {
      if (parts++) ak_buf_append(&b, ",", 1);
      ak_buf_append(&b, p, len);
    }
  }
  if (!parts) {
    ak_buf_free(&b);
    return NULL;
  }
  return ak_buf_take(&b, NULL);
}

bool ak_kafka_err_permanent(rd_kafka_resp_err_t err) {
  switch ((int)err) {
  case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
  case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
  case RD_KAFKA_RESP_ERR_INVALID_MSG: /* CORRUPT_MESSAGE */
  case RD_KAFKA_RESP_ERR_INVALID_RECORD:
    return true;
  default:
    return false;
  }
}

void ak_kafka_reason(rd_kafka_resp_err_t err, char *out, size_t outlen) {
  const char *r;
  switch ((int)err) {
  case RD_KAFKA_RESP_ERR_NO_ERROR:
    r = "";
    break;
  case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
  case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
    r = "message_too_large";
    break;
  case RD_KAFKA_RESP_ERR_INVALID_MSG:
    r = "invalid_message";
    break;
  case RD_KAFKA_RESP_ERR_INVALID_RECORD:
    r = "invalid_record";
    break;
  case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
  case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
  case RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION:
    r = "unknown_topic_or_partition";
    break;
  case RD_KAFKA_RESP_ERR__MSG_TIMED_OUT:
  case RD_KAFKA_RESP_ERR__TIMED_OUT:
  case RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT:
    r = "timeout";
    break;
  case RD_KAFKA_RESP_ERR__TRANSPORT:
  case RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN:
    r = "unreachable";
    break;
  case RD_KAFKA_RESP_ERR__QUEUE_FULL:
    r = "busy";
    break;
  case RD_KAFKA_RESP_ERR__PURGE_QUEUE: /* the producer was replaced (fatal error) */
  case RD_KAFKA_RESP_ERR__PURGE_INFLIGHT:
    r = "producer reset";
    break;
  default:
    snprintf(out, outlen, "kafka %s", rd_kafka_err2name(err));
    return;
  }
  snprintf(out, outlen, "%s", r);
}

/* Warnings and worse, at our warning level. librdkafka's lines name brokers and states,
 * never the SASL password; quotes and newlines are folded so the line stays one event. */
void ak_kafka_log(const char *component, int level, const char *fac, const char *buf) {
  if (level > 4) return; /* syslog levels: 4 = warning */
  char q[160];
  size_t n = 0;
  for (const char *p = buf; *p && n < sizeof q - 1; p++) q[n++] = (*p == '"' || *p == '\n') ? '\'' : *p;
  q[n] = '\0';
  ak_log(AK_LOG_WARNING, component, "librdkafka", "facility=%s detail=\"%s\"", fac, q);
}

const ak_opt_t ak_kafka_sasl_rows[] = {
  {.key = "mechanism", .type = AK_OPT_ENUM, .enum_vals = "plain|scram_sha_256|scram_sha_512",
   .flags = AK_OPTF_REQUIRED, .doc = "SASL mechanism", AK_AT(ak_kafka_sasl_opts_t, mechanism)},
  {.key = "username", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_REQUIRED | AK_OPTF_HAS_MIN,
   .doc = "SASL user name", AK_AT(ak_kafka_sasl_opts_t, username)},
  {.key = "password", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_REQUIRED | AK_OPTF_HAS_MIN | AK_OPTF_SECRET,
   .doc = "SASL password", AK_AT(ak_kafka_sasl_opts_t, password)},
  {0},
};

const char *ak_kafka_sasl_name(int mechanism) {
  return mechanism >= 0 && mechanism < (int)(sizeof sasl_names / sizeof *sasl_names) ? sasl_names[mechanism] : NULL;
}
