/* What one broker delivery costs in CPU: ankusa's broker sink (the file under src/sinks/,
 * as a node runs it) next to a raw client of the same library publishing the same bytes
 * to the same broker with the same confirm rule. Each keeps C publishes outstanding until
 * N are confirmed; the figure is the process's user + system CPU per confirmed message
 * (getrusage: every thread the sink or the library runs). bench/brokers.sh starts the
 * brokers and runs the modes in alternation.
 *
 *   brokers sink TYPE C N SIZE OPTS_JSON   ankusa's sink TYPE built from OPTS_JSON (its
 *                                          config rows), driven as the dispatcher drives it
 *   brokers raw  TYPE C N SIZE OPTS_JSON   the raw client: the same message bytes (one
 *                                          SinkMessageV1, encoded once), the same headers,
 *                                          the same confirm rule:
 *     kafka     librdkafka, idempotent, acks=all, C messages outstanding, delivery reports
 *     rabbitmq  rabbitmq-c, confirm mode, mandatory + persistent, C unconfirmed at most
 *     nats      cnats, JetStream async publish, C pending, every ack awaited
 *     redis     hiredis, C PUBLISH pipelined per round trip
 *     sqs       libcurl multi, C requests outstanding: SigV4 (CURLOPT_AWS_SIGV4) JSON 1.0
 *               SendMessage with the metadata attributes; 200 and MD5OfMessageBody checked
 *     google_pubsub  libcurl multi: the publish request; 200 and one message id checked
 *
 *   brokers setup TYPE OPTS_JSON           what the sink never creates: the NATS stream of
 *                                          the subject (bounded), the RabbitMQ queue bound to
 *                                          the exchange (bounded, so a publish is routable)
 *   brokers mock kafka TOPIC               librdkafka's mock cluster (3 brokers) with TOPIC;
 *                                          prints its bootstrap servers, runs until stdin closes
 *
 * Prints one JSON line: {mode, type, n, c, size, cpu_us_per, rate, failed}. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <curl/curl.h>
#include <openssl/evp.h>
#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <hiredis.h>
#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <nats/nats.h>
#include "core/buf.h"
#include "core/clock.h"
#include "core/envelope.h"
#include "core/ids.h"
#include "sinks/message.h"
#include "sinks/sink.h"

static double cpu_us(void) {
  struct rusage r;
  getrusage(RUSAGE_SELF, &r);
  return (double)(r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1e6 + (double)(r.ru_utime.tv_usec + r.ru_stime.tv_usec);
}

static double wall_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void report(const char *mode, const char *type, long n, long c, size_t size, double cpu, double wall,
                   long failed) {
  printf("{\"mode\":\"%s\",\"type\":\"%s\",\"n\":%ld,\"c\":%ld,\"size\":%zu,\"cpu_us_per\":%.2f,\"rate\":%.0f,"
         "\"failed\":%ld}\n",
         mode, type, n, c, size, cpu / (double)n, (double)n / wall, failed);
}

/* ---- the hook every mode sends ---- */

static ak_envelope_t env;
static uint8_t *body;
static char idem[AK_UUID_STR_LEN];

static void make_hook(size_t size) {
  body = malloc(size ? size : 1);
  for (size_t i = 0; i < size; i++) body[i] = (uint8_t)('a' + i % 26);
  static ak_idgen_t g;
  ak_uuid7_new(&g, ak_now_ms(), env.id);
  env.received_at_ms = ak_now_ms();
  env.tenant = "acme";
  env.tenant_len = 4;
  env.source = "bench";
  env.source_len = 5;
  env.content_type = "application/json";
  env.content_type_len = 16;
  env.body = body;
  env.body_len = size;
  ak_uuid_format(env.id, idem);
}

static ak_sink_attempt_t attempt(void) {
  return (ak_sink_attempt_t){.env = &env, .attempt = 1, .idempotency_key = idem};
}

/* ---- ankusa's sink, driven as the dispatcher drives it ---- */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static long outstanding, answered, failed, unseen;

static void on_done(void *ctx, const ak_sink_outcome_t *o) {
  (void)ctx;
  pthread_mutex_lock(&mu);
  outstanding--;
  answered++;
  if (o->result != AK_SINK_OK) {
    if (failed++ == 0) fprintf(stderr, "brokers: first failure: %s\n", o->reason);
  }
  if (unseen++ == 0) pthread_cond_signal(&cv);
  pthread_mutex_unlock(&mu);
}

static int run_sink(const char *type, long c, long n, size_t size, json_t *opts) {
  const ak_sink_vtable_t *vt = ak_sinks_find(type);
  if (!vt || vt->plugin.unsupported) {
    fprintf(stderr, "brokers: no sink %s\n", type);
    return 2;
  }
  char err[256] = "";
  ak_sink_ctx_t sctx = {.source_id = "bench", .trusted = true};
  void *self = vt->create(opts, &sctx, err, sizeof err);
  if (!self) {
    fprintf(stderr, "brokers: %s: %s\n", type, err);
    return 2;
  }
  /* one warm-up delivery opens the connection outside the measurement */
  ak_sink_attempt_t att = attempt();
  outstanding = 1;
  vt->deliver(self, &att, NULL, on_done);
  pthread_mutex_lock(&mu);
  while (outstanding) pthread_cond_wait(&cv, &mu);
  answered = failed = unseen = 0;
  pthread_mutex_unlock(&mu);
  double t0 = cpu_us(), w0 = wall_s();
  long sent = 0;
  pthread_mutex_lock(&mu);
  while (answered < n) {
    unseen = 0;
    while (sent < n && outstanding < c) {
      outstanding++;
      sent++;
      pthread_mutex_unlock(&mu);
      vt->deliver(self, &att, NULL, on_done);
      pthread_mutex_lock(&mu);
    }
    if (answered < n && unseen == 0) pthread_cond_wait(&cv, &mu);
  }
  pthread_mutex_unlock(&mu);
  double used = cpu_us() - t0, wall = wall_s() - w0;
  report("sink", type, n, c, size, used, wall, failed);
  vt->destroy(self);
  return failed ? 1 : 0;
}

/* ---- raw clients ---- */

static const char *opt_s(json_t *o, const char *k, const char *dflt) {
  const char *v = json_string_value(json_object_get(o, k));
  return v ? v : dflt;
}

static char *msg;
static size_t msg_len;
static ak_sink_meta_t meta[AK_SINK_META_MAX];
static size_t nmeta;
static ak_sink_meta_scratch_t scratch;

static void make_message(void) {
  ak_sink_attempt_t att = attempt();
  ak_buf_t b = AK_BUF_INIT;
  if (ak_sink_message_encode(&att, false, &b) != 0) abort();
  msg = ak_buf_take(&b, &msg_len);
  nmeta = ak_sink_metadata(&att, true, &scratch, meta);
}

static long k_done, k_failed;
static void k_dr(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
  (void)rk;
  (void)opaque;
  k_done++;
  if (m->err) k_failed++;
}

static int raw_kafka(long c, long n, size_t size, json_t *o) {
  char err[512];
  rd_kafka_conf_t *conf = rd_kafka_conf_new();
  json_t *b = json_object_get(o, "brokers");
  const char *brokers = json_is_array(b) ? json_string_value(json_array_get(b, 0)) : json_string_value(b);
  if (rd_kafka_conf_set(conf, "bootstrap.servers", brokers ? brokers : "", err, sizeof err) ||
      rd_kafka_conf_set(conf, "enable.idempotence", "true", err, sizeof err) ||
      rd_kafka_conf_set(conf, "acks", "all", err, sizeof err) ||
      rd_kafka_conf_set(conf, "linger.ms", "0", err, sizeof err)) {
    fprintf(stderr, "brokers: kafka: %s\n", err);
    return 2;
  }
  rd_kafka_conf_set_dr_msg_cb(conf, k_dr);
  rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
  if (!rk) return 2;
  const char *topic = opt_s(o, "topic", "bench");
  char key[64];
  int kl = snprintf(key, sizeof key, "acme/bench");
  long sent = 0;
  double t0 = 0, w0 = 0;
  for (int round = 0; round < 2; round++) {
    long want = round == 0 ? 1 : n;
    k_done = k_failed = 0;
    sent = 0;
    if (round == 1) t0 = cpu_us(), w0 = wall_s();
    while (k_done < want) {
      while (sent < want && sent - k_done < c) {
        rd_kafka_headers_t *h = rd_kafka_headers_new(nmeta);
        for (size_t i = 0; i < nmeta; i++)
          rd_kafka_header_add(h, meta[i].name, -1, meta[i].value, (ssize_t)meta[i].value_len);
        rd_kafka_resp_err_t e = rd_kafka_producev(
            rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, (size_t)kl), RD_KAFKA_V_VALUE(msg, msg_len),
            RD_KAFKA_V_MSGFLAGS(0), RD_KAFKA_V_TIMESTAMP(env.received_at_ms), RD_KAFKA_V_HEADERS(h), RD_KAFKA_V_END);
        if (e) {
          rd_kafka_headers_destroy(h);
          break;
        }
        sent++;
      }
      rd_kafka_poll(rk, 100);
    }
  }
  double used = cpu_us() - t0, wall = wall_s() - w0;
  report("raw", "kafka", n, c, size, used, wall, k_failed);
  rd_kafka_flush(rk, 5000);
  rd_kafka_destroy(rk);
  return k_failed ? 1 : 0;
}

static int raw_rabbitmq(long c, long n, size_t size, json_t *o) {
  struct amqp_connection_info ci;
  char *url = strdup(opt_s(o, "url", "amqp://guest:guest@localhost:5672"));
  amqp_default_connection_info(&ci);
  if (amqp_parse_url(url, &ci) != AMQP_STATUS_OK) return 2;
  amqp_connection_state_t conn = amqp_new_connection();
  amqp_socket_t *sock = amqp_tcp_socket_new(conn);
  if (!sock || amqp_socket_open(sock, ci.host, ci.port) != AMQP_STATUS_OK) {
    fprintf(stderr, "brokers: rabbitmq: cannot connect\n");
    return 2;
  }
  amqp_rpc_reply_t r = amqp_login(conn, ci.vhost, 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, ci.user, ci.password);
  if (r.reply_type != AMQP_RESPONSE_NORMAL) return 2;
  amqp_channel_open(conn, 1);
  amqp_confirm_select(conn, 1);
  if (amqp_get_rpc_reply(conn).reply_type != AMQP_RESPONSE_NORMAL) return 2;
  const char *exchange = opt_s(o, "exchange", "bench");
  const char *rk = opt_s(o, "routing_key", "ankusa.bench");
  amqp_table_entry_t ent[AK_SINK_META_MAX];
  for (size_t i = 0; i < nmeta; i++) {
    ent[i].key = amqp_cstring_bytes(meta[i].name);
    ent[i].value.kind = AMQP_FIELD_KIND_UTF8;
    ent[i].value.value.bytes = (amqp_bytes_t){meta[i].value_len, (void *)meta[i].value};
  }
  amqp_basic_properties_t props = {0};
  props._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG |
                 AMQP_BASIC_HEADERS_FLAG;
  props.content_type = amqp_cstring_bytes("application/json");
  props.delivery_mode = 2;
  props.message_id = amqp_cstring_bytes(idem);
  props.headers = (amqp_table_t){(int)nmeta, ent};
  amqp_bytes_t body_b = {msg_len, msg};
  long failed_n = 0;
  double t0 = 0, w0 = 0;
  for (int round = 0; round < 2; round++) {
    long want = round == 0 ? 1 : n, sent = 0;
    uint64_t confirmed = 0, base = 0;
    if (round == 1) t0 = cpu_us(), w0 = wall_s();
    static uint64_t tag;
    base = tag;
    while ((long)(confirmed - base) < want) {
      while (sent < want && (long)(tag - confirmed) < c) {
        if (amqp_basic_publish(conn, 1, amqp_cstring_bytes(exchange), amqp_cstring_bytes(rk), 1, 0, &props,
                               body_b) != AMQP_STATUS_OK)
          return 2;
        tag++;
        sent++;
      }
      amqp_frame_t f;
      if (amqp_simple_wait_frame(conn, &f) != AMQP_STATUS_OK) return 2;
      if (f.frame_type != AMQP_FRAME_METHOD) continue;
      if (f.payload.method.id == AMQP_BASIC_ACK_METHOD) {
        amqp_basic_ack_t *a = f.payload.method.decoded;
        confirmed = a->multiple ? a->delivery_tag : confirmed + 1;
        if (!a->multiple && a->delivery_tag > confirmed) confirmed = a->delivery_tag;
      } else if (f.payload.method.id == AMQP_BASIC_NACK_METHOD) {
        amqp_basic_nack_t *a = f.payload.method.decoded;
        failed_n++;
        confirmed = a->delivery_tag;
      } else if (f.payload.method.id == AMQP_BASIC_RETURN_METHOD) {
        failed_n++;
        amqp_message_t m;
        amqp_read_message(conn, 1, &m, 0);
        amqp_destroy_message(&m);
      }
    }
  }
  double used = cpu_us() - t0, wall = wall_s() - w0;
  report("raw", "rabbitmq", n, c, size, used, wall, failed_n);
  amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
  amqp_destroy_connection(conn);
  free(url);
  return failed_n ? 1 : 0;
}

static int raw_nats(long c, long n, size_t size, json_t *o) {
  natsConnection *nc = NULL;
  jsCtx *js = NULL;
  json_t *sv = json_object_get(o, "servers");
  const char *server = json_is_array(sv) ? json_string_value(json_array_get(sv, 0)) : json_string_value(sv);
  if (natsConnection_ConnectTo(&nc, server ? server : "nats://127.0.0.1:4222") != NATS_OK) return 2;
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.PublishAsync.MaxPending = c;
  if (natsConnection_JetStream(&js, nc, &jo) != NATS_OK) return 2;
  const char *subject = opt_s(o, "subject", "bench");
  long failed_n = 0;
  double t0 = 0, w0 = 0;
  for (int round = 0; round < 2; round++) {
    long want = round == 0 ? 1 : n;
    if (round == 1) t0 = cpu_us(), w0 = wall_s();
    for (long i = 0; i < want; i++) {
      natsMsg *m = NULL;
      natsMsg_Create(&m, subject, NULL, msg, (int)msg_len);
      char mid[64];
      snprintf(mid, sizeof mid, "%s-%d-%ld", idem, round, i); /* distinct ids: none collapsed */
      natsMsgHeader_Set(m, "Nats-Msg-Id", mid);
      for (size_t k = 0; k < nmeta; k++) {
        char v[256];
        snprintf(v, sizeof v, "%.*s", (int)meta[k].value_len, meta[k].value);
        natsMsgHeader_Set(m, meta[k].name, v);
      }
      if (js_PublishMsgAsync(js, &m, NULL) != NATS_OK) {
        failed_n++;
        natsMsg_Destroy(m);
      }
    }
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MaxWait = 30000;
    if (js_PublishAsyncComplete(js, &po) != NATS_OK) failed_n++;
    natsMsgList pending = {0};
    if (js_PublishAsyncGetPendingList(&pending, js) == NATS_OK) {
      failed_n += pending.Count;
      natsMsgList_Destroy(&pending);
    }
  }
  double used = cpu_us() - t0, wall = wall_s() - w0;
  report("raw", "nats", n, c, size, used, wall, failed_n);
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
  return failed_n ? 1 : 0;
}

static int raw_redis(long c, long n, size_t size, json_t *o) {
  const char *url = opt_s(o, "url", "redis://127.0.0.1:6379");
  const char *hp = strstr(url, "://");
  hp = hp ? hp + 3 : url;
  char host[128] = "127.0.0.1";
  int port = 6379;
  sscanf(hp, "%127[^:/]:%d", host, &port);
  redisContext *rc = redisConnect(host, port);
  if (!rc || rc->err) return 2;
  const char *channel = opt_s(o, "channel", "bench");
  long failed_n = 0;
  double t0 = 0, w0 = 0;
  for (int round = 0; round < 2; round++) {
    long want = round == 0 ? 1 : n, done = 0;
    if (round == 1) t0 = cpu_us(), w0 = wall_s();
    while (done < want) {
      long burst = want - done < c ? want - done : c;
      for (long i = 0; i < burst; i++)
        redisAppendCommand(rc, "PUBLISH %s %b", channel, msg, msg_len);
      for (long i = 0; i < burst; i++) {
        redisReply *r = NULL;
        if (redisGetReply(rc, (void **)&r) != REDIS_OK) return 2;
        if (r->type != REDIS_REPLY_INTEGER || r->integer == 0) failed_n++;
        freeReplyObject(r);
      }
      done += burst;
    }
  }
  double used = cpu_us() - t0, wall = wall_s() - w0;
  report("raw", "redis", n, c, size, used, wall, failed_n);
  redisFree(rc);
  return failed_n ? 1 : 0;
}

/* ---- sqs, google_pubsub: the request body built once, C easy handles reused ---- */

typedef struct {
  CURL *h;
  char resp[4096];
  size_t rlen;
} hslot_t;

static size_t h_write(char *p, size_t sz, size_t nm, void *ud) {
  hslot_t *s = ud;
  size_t n = sz * nm, room = sizeof s->resp - 1 - s->rlen;
  memcpy(s->resp + s->rlen, p, n < room ? n : room);
  s->rlen += n < room ? n : room;
  s->resp[s->rlen] = '\0';
  return n;
}

static char sqs_md5[33];

static bool h_ok(const char *type, hslot_t *s) {
  long code = 0;
  curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &code);
  if (code != 200) return false;
  json_t *j = json_loads(s->resp, 0, NULL);
  bool ok;
  if (!strcmp(type, "sqs")) {
    const char *md5 = json_string_value(json_object_get(j, "MD5OfMessageBody"));
    ok = md5 && json_string_value(json_object_get(j, "MessageId")) && !strcmp(md5, sqs_md5);
  } else {
    ok = json_array_size(json_object_get(j, "messageIds")) == 1;
  }
  json_decref(j);
  return ok;
}

static int raw_http(const char *type, long c, long n, size_t size, json_t *o) {
  json_t *attrs = json_object();
  bool sqs = !strcmp(type, "sqs");
  char url[512];
  json_t *req;
  if (sqs) {
    const char *q = opt_s(o, "queue_url", "");
    for (size_t i = 0; i < nmeta; i++)
      json_object_set_new(attrs, meta[i].name,
                          json_pack("{s:s,s:s%}", "DataType", "String", "StringValue", meta[i].value, meta[i].value_len));
    req = json_pack("{s:s,s:s%,s:o}", "QueueUrl", q, "MessageBody", msg, msg_len, "MessageAttributes", attrs);
    /* the JSON protocol posts to the endpoint's root: the queue URL's origin */
    const char *h = strstr(q, "://");
    size_t olen = h ? (size_t)(h + 3 - q) + strcspn(h + 3, "/") : strlen(q);
    snprintf(url, sizeof url, "%.*s/", (int)olen, q);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdl = 0;
    EVP_Digest(msg, msg_len, md, &mdl, EVP_md5(), NULL);
    for (unsigned int i = 0; i < mdl && i < 16; i++) sprintf(sqs_md5 + 2 * i, "%02x", md[i]);
  } else {
    for (size_t i = 0; i < nmeta; i++) json_object_set_new(attrs, meta[i].name, json_stringn(meta[i].value, meta[i].value_len));
    char *data = malloc(4 * ((msg_len + 2) / 3) + 1);
    EVP_EncodeBlock((unsigned char *)data, (const unsigned char *)msg, (int)msg_len);
    req = json_pack("{s:[{s:s,s:o}]}", "messages", "data", data, "attributes", attrs);
    free(data);
    snprintf(url, sizeof url, "%s/v1/projects/%s/topics/%s:publish", opt_s(o, "endpoint", ""), opt_s(o, "project", ""),
             opt_s(o, "topic", ""));
  }
  char *reqbody = json_dumps(req, JSON_COMPACT);
  json_decref(req);
  struct curl_slist *hdr = NULL;
  hdr = curl_slist_append(hdr, sqs ? "Content-Type: application/x-amz-json-1.0" : "Content-Type: application/json");
  if (sqs) hdr = curl_slist_append(hdr, "X-Amz-Target: AmazonSQS.SendMessage");
  else if (json_string_value(json_object_get(o, "token"))) {
    char auth[600];
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", json_string_value(json_object_get(o, "token")));
    hdr = curl_slist_append(hdr, auth);
  }
  char userpwd[300], sigv4[128];
  snprintf(userpwd, sizeof userpwd, "%s:%s", opt_s(o, "access_key_id", ""), opt_s(o, "secret_access_key", ""));
  snprintf(sigv4, sizeof sigv4, "aws:amz:%s:sqs", opt_s(o, "region", "us-east-1"));
  CURLM *m = curl_multi_init();
  hslot_t *slots = calloc((size_t)c, sizeof *slots);
  for (long i = 0; i < c; i++) {
    CURL *h = slots[i].h = curl_easy_init();
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, reqbody);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, h_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &slots[i]);
    curl_easy_setopt(h, CURLOPT_PRIVATE, &slots[i]);
    if (sqs) {
      curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4);
      curl_easy_setopt(h, CURLOPT_USERPWD, userpwd);
    }
  }
  long failed_n = 0;
  double t0 = 0, w0 = 0;
  for (int round = 0; round < 2; round++) {
    long want = round == 0 ? 1 : n, sent = 0, done = 0, idle = 0;
    if (round == 1) t0 = cpu_us(), w0 = wall_s();
    hslot_t **free_slots = malloc((size_t)c * sizeof *free_slots);
    for (long i = 0; i < c; i++) free_slots[idle++] = &slots[i];
    while (done < want) {
      while (sent < want && idle > 0) {
        hslot_t *s = free_slots[--idle];
        s->rlen = 0;
        curl_multi_add_handle(m, s->h);
        sent++;
      }
      int running = 0;
      curl_multi_perform(m, &running);
      CURLMsg *cm;
      int left;
      while ((cm = curl_multi_info_read(m, &left))) {
        if (cm->msg != CURLMSG_DONE) continue;
        hslot_t *s = NULL;
        curl_easy_getinfo(cm->easy_handle, CURLINFO_PRIVATE, (char **)&s);
        if (cm->data.result != CURLE_OK || !h_ok(type, s)) {
          if (failed_n++ == 0) fprintf(stderr, "brokers: %s: first failure: %s %.300s\n", type,
                                       curl_easy_strerror(cm->data.result), s->resp);
        }
        curl_multi_remove_handle(m, cm->easy_handle);
        free_slots[idle++] = s;
        done++;
      }
      if (done < want) curl_multi_poll(m, NULL, 0, 100, NULL);
    }
    free(free_slots);
  }
  double used = cpu_us() - t0, wall = wall_s() - w0;
  report("raw", type, n, c, size, used, wall, failed_n);
  for (long i = 0; i < c; i++) curl_easy_cleanup(slots[i].h);
  free(slots);
  curl_multi_cleanup(m);
  curl_slist_free_all(hdr);
  free(reqbody);
  return failed_n ? 1 : 0;
}

/* ---- what the sinks never create ---- */

static int setup_nats(json_t *o) {
  natsConnection *nc = NULL;
  jsCtx *js = NULL;
  json_t *sv = json_object_get(o, "servers");
  const char *server = json_is_array(sv) ? json_string_value(json_array_get(sv, 0)) : json_string_value(sv);
  if (natsConnection_ConnectTo(&nc, server ? server : "nats://127.0.0.1:4222") != NATS_OK) return 2;
  if (natsConnection_JetStream(&js, nc, NULL) != NATS_OK) return 2;
  const char *subject = opt_s(o, "subject", "bench");
  jsStreamConfig sc;
  jsStreamConfig_Init(&sc);
  sc.Name = "BENCH";
  sc.Subjects = &subject;
  sc.SubjectsLen = 1;
  sc.MaxMsgs = 200000;
  sc.Discard = js_DiscardOld;
  sc.Storage = js_FileStorage;
  jsErrCode jerr = 0;
  natsStatus st = js_AddStream(NULL, js, &sc, NULL, &jerr);
  if (st != NATS_OK) fprintf(stderr, "brokers: nats stream: %s (%d)\n", natsStatus_GetText(st), (int)jerr);
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
  return st == NATS_OK ? 0 : 2;
}

static int setup_rabbitmq(json_t *o) {
  struct amqp_connection_info ci;
  char *url = strdup(opt_s(o, "url", "amqp://guest:guest@localhost:5672"));
  amqp_default_connection_info(&ci);
  if (amqp_parse_url(url, &ci) != AMQP_STATUS_OK) return 2;
  amqp_connection_state_t conn = amqp_new_connection();
  amqp_socket_t *sock = amqp_tcp_socket_new(conn);
  if (!sock || amqp_socket_open(sock, ci.host, ci.port) != AMQP_STATUS_OK) return 2;
  if (amqp_login(conn, ci.vhost, 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, ci.user, ci.password).reply_type !=
      AMQP_RESPONSE_NORMAL)
    return 2;
  amqp_channel_open(conn, 1);
  const char *exchange = opt_s(o, "exchange", "bench");
  amqp_exchange_declare(conn, 1, amqp_cstring_bytes(exchange), amqp_cstring_bytes("topic"), 0, 1, 0, 0,
                        amqp_empty_table);
  amqp_table_entry_t args[2] = {
    {.key = amqp_cstring_bytes("x-max-length"), .value = {.kind = AMQP_FIELD_KIND_I64, .value.i64 = 10000}},
    {.key = amqp_cstring_bytes("x-overflow"),
     .value = {.kind = AMQP_FIELD_KIND_UTF8, .value.bytes = amqp_cstring_bytes("drop-head")}},
  };
  amqp_queue_declare(conn, 1, amqp_cstring_bytes("bench"), 0, 1, 0, 0, (amqp_table_t){2, args});
  amqp_queue_bind(conn, 1, amqp_cstring_bytes("bench"), amqp_cstring_bytes(exchange), amqp_cstring_bytes("#"),
                  amqp_empty_table);
  int rc = amqp_get_rpc_reply(conn).reply_type == AMQP_RESPONSE_NORMAL ? 0 : 2;
  if (rc) fprintf(stderr, "brokers: rabbitmq setup failed\n");
  amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
  amqp_destroy_connection(conn);
  free(url);
  return rc;
}

static int mock_kafka(const char *topic) {
  char err[256];
  rd_kafka_conf_t *conf = rd_kafka_conf_new();
  rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
  if (!rk) return 2;
  rd_kafka_mock_cluster_t *mc = rd_kafka_mock_cluster_new(rk, 3);
  if (!mc || rd_kafka_mock_topic_create(mc, topic, 3, 3)) return 2;
  printf("%s\n", rd_kafka_mock_cluster_bootstraps(mc));
  fflush(stdout);
  char buf[64];
  while (fgets(buf, sizeof buf, stdin)) {
  }
  rd_kafka_mock_cluster_destroy(mc);
  rd_kafka_destroy(rk);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 4 && !strcmp(argv[1], "setup")) {
    json_t *o = json_loads(argv[3], 0, NULL);
    int rc = !o ? 2 : !strcmp(argv[2], "nats") ? setup_nats(o) : !strcmp(argv[2], "rabbitmq") ? setup_rabbitmq(o) : 0;
    json_decref(o);
    return rc;
  }
  if (argc == 4 && !strcmp(argv[1], "mock") && !strcmp(argv[2], "kafka")) return mock_kafka(argv[3]);
  if (argc != 7) {
    fprintf(stderr, "usage: brokers sink|raw TYPE C N SIZE OPTS_JSON\n");
    return 2;
  }
  const char *mode = argv[1], *type = argv[2];
  long c = atol(argv[3]), n = atol(argv[4]);
  size_t size = (size_t)atol(argv[5]);
  json_error_t je;
  json_t *opts = json_loads(argv[6], 0, &je);
  if (!opts || c <= 0 || n <= 0) {
    fprintf(stderr, "brokers: bad arguments (%s)\n", opts ? "C and N must be positive" : je.text);
    return 2;
  }
  make_hook(size);
  curl_global_init(CURL_GLOBAL_DEFAULT);
  int rc;
  if (!strcmp(mode, "sink")) {
    rc = run_sink(type, c, n, size, opts);
  } else {
    make_message();
    if (!strcmp(type, "kafka")) rc = raw_kafka(c, n, size, opts);
    else if (!strcmp(type, "rabbitmq")) rc = raw_rabbitmq(c, n, size, opts);
    else if (!strcmp(type, "nats")) rc = raw_nats(c, n, size, opts);
    else if (!strcmp(type, "redis")) rc = raw_redis(c, n, size, opts);
    else if (!strcmp(type, "sqs") || !strcmp(type, "google_pubsub")) rc = raw_http(type, c, n, size, opts);
    else {
      fprintf(stderr, "brokers: no raw client for %s\n", type);
      rc = 2;
    }
  }
  json_decref(opts);
  free(body);
  free(msg);
  return rc;
}
