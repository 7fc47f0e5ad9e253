/* The `kafka` sink: one SinkMessageV1 record per delivery, produced to one topic with
 * librdkafka's idempotent producer (acks=all). Owns its option rows and their rules, the
 * record (key, value, timestamp = received_at, headers = the common metadata set), the
 * broker error -> outcome mapping, the shared producers (one per destination, refcounted,
 * opened at the first delivery, closed after idle_timeout_ms with nothing in flight) and,
 * for a guarded sink, the egress policy of every broker address it connects to. Never
 * creates a topic, never waits on the network in deliver(), never puts a password, a SASL
 * user or a broker's answer text into an outcome reason or a log line, and never touches
 * the store.
 *
 * Registered as ak_sink_kafka (registry.c).
 *
 * A destination is what a producer is configured with: the brokers, client id, ssl and
 * sasl settings, produce_timeout_ms and max_record_bytes (both are producer settings in
 * librdkafka) and the egress guard the sink answers to (none for a trusted sink). Every
 * instance with the same destination shares its producer. Each producer has one thread
 * of ours (ak-kafka) that serves its delivery reports (rd_kafka_poll) and closes it when
 * idle; a delivery report answers the dispatcher's done() from that thread.
 *
 * Confirm rule: ok only on a delivery report without error, which with acks=all and
 * idempotence means every in-sync replica has the record, once: a request whose answer is
 * lost is retried by librdkafka with the same producer id and sequence, and the broker
 * drops the copy. The dispatcher's retry after a failed attempt is a new record (the
 * consumer deduplicates on idempotency_key, as with every sink).
 *
 * Egress pinning: a guarded producer connects through connect_cb, which judges the very
 * sockaddr librdkafka is about to connect to (after its own resolving). When every broker
 * was refused and none accepted, the producer is blocked: what it holds and every later
 * delivery are answered permanent with the guard's reason until the producer closes. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <librdkafka/rdkafka.h>
#include <openssl/crypto.h>
#include "core/buf.h"
#include "core/config.h"
#include "core/envelope.h"
#include "core/log.h"
#include "net/kafka.h"
#include "sinks/egress.h"
#include "sinks/message.h"
#include "sinks/sink.h"

/* Records one producer holds unanswered at most; beyond it a delivery is answered "busy"
 * (transient) before anything is queued. librdkafka's own queue is sized a little above
 * so that our bound is the one that answers. */
#define KAFKA_MAX_INFLIGHT 10000
#define KAFKA_QUEUE_KBYTES 131072 /* 128 MiB of queued records per producer */
#define KAFKA_POLL_MS 100

typedef struct kafka_opts {
  ak_strlist_t brokers;
  const char *topic;
  const char *key;
  int64_t inline_max_bytes; /* read with ak_sink_inline_max_opt: null is -1 there */
  int64_t max_record_bytes;
  int64_t produce_timeout_ms;
  const char *client;
  bool ssl;
  ak_kafka_sasl_opts_t sasl;
  int64_t idle_timeout_ms;
} kafka_opts_t;

static const ak_opt_t kafka_rows[] = {
  {.key = "brokers", .type = AK_OPT_STRLIST, .min = 1, .flags = AK_OPTF_REQUIRED | AK_OPTF_HAS_MIN,
   .doc = "bootstrap brokers, host:port (a list or a comma-separated string)", AK_AT(kafka_opts_t, brokers)},
  {.key = "topic", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_REQUIRED | AK_OPTF_HAS_MIN,
   .doc = "topic the records go to; it must exist (the sink never creates one)", AK_AT(kafka_opts_t, topic)},
  {.key = "key", .type = AK_OPT_STRING, .flags = AK_OPTF_NULLABLE,
   .doc = "record key, a static string; null: <tenant_id>/<source_id> of the hook", AK_AT(kafka_opts_t, key)},
  AK_SINK_INLINE_MAX_ROW(kafka_opts_t, inline_max_bytes),
  {.key = "max_record_bytes", .type = AK_OPT_INT, .def = "1000000", .min = 1, .max = 900000000,
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX,
   .doc = "value + key bytes of one record at most; a larger one is dead-lettered before it is produced",
   AK_AT(kafka_opts_t, max_record_bytes)},
  {.key = "produce_timeout_ms", .type = AK_OPT_INT, .def = "5000", .min = 100, .max = 3600000,
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX,
   .doc = "time a record may take to be acknowledged by the brokers (librdkafka message.timeout.ms)",
   AK_AT(kafka_opts_t, produce_timeout_ms)},
  {.key = "client", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN,
   .doc = "Kafka client id; null: ankusa", AK_AT(kafka_opts_t, client)},
  {.key = "ssl", .type = AK_OPT_BOOL, .def = "false", .doc = "TLS to the brokers (system CA store)",
   AK_AT(kafka_opts_t, ssl)},
  {.key = "sasl", .type = AK_OPT_MAP, .children = ak_kafka_sasl_rows, .flags = AK_OPTF_NULLABLE,
   .doc = "SASL authentication: mechanism, username and password, all three", AK_AT(kafka_opts_t, sasl)},
  AK_SINK_IDLE_TIMEOUT_ROW(kafka_opts_t, idle_timeout_ms),
  {0},
};

/* ---- shared producers ------------------------------------------------------------- */

struct kafka_sink;

/* One record librdkafka holds for us (its message opaque). Linked in its producer's list
 * under the producer's mutex; owner NULL once the instance answered it itself (destroy). */
typedef struct kcell {
  struct kcell *prev, *next;
  struct kafka_sink *owner;
  ak_sink_done_fn done;
  void *ctx;
} kcell_t;

typedef struct kconn {
  struct kconn *next; /* in the registry */
  char *key;          /* the destination (holds the SASL password: cleansed on free) */
  int refs;
  /* settings of every producer of this destination */
  char *brokers;
  char *client;
  bool ssl;
  int sasl; /* -1 none, else index in sasl_mechanisms */
  char *sasl_user;
  char *sasl_pass;
  int64_t produce_timeout_ms;
  int64_t max_record_bytes;
  int64_t idle_ms; /* 0: never (any sharer asking never wins), else the longest asked */
  const ak_egress_t *egress; /* NULL: trusted */

  pthread_mutex_t mu;
  pthread_cond_t cv;
  rd_kafka_t *rk;     /* NULL while closed */
  bool thread_started;
  bool stopping;
  pthread_t thread;
  kcell_t cells;      /* list head: every record not yet reported */
  int64_t inflight;
  int64_t last_use_ms;
  /* egress, per producer (reset when it closes); refused, allowed and refusal under
   * egress_mu alone: connect_cb runs on librdkafka's broker threads, which must never wait
   * for mu (deliver holds it around rd_kafka_producev) */
  pthread_mutex_t egress_mu;
  int refused, allowed;
  char refusal[128];
  bool blocked, purge;
  bool fatal; /* the idempotent producer hit a fatal error: it is replaced */
} kconn_t;

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static kconn_t *registry;

typedef struct kafka_sink {
  kconn_t *conn;
  char *topic;
  char *key; /* NULL: <tenant>/<source> */
  size_t key_len;
  int64_t inline_max;
  int64_t max_record_bytes;
  int answering; /* delivery reports calling this instance's done() right now (conn->mu) */
  ak_egress_t *owned_egress;
} kafka_sink_t;

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void cell_unlink(kcell_t *c) {
  c->prev->next = c->next;
  c->next->prev = c->prev;
  c->prev = c->next = c;
}

/* ---- outcomes ---------------------------------------------------------------------- */

static void outcome_for(rd_kafka_resp_err_t err, ak_sink_outcome_t *out) {
  out->retry_after_ms = 0;
  out->result = err == RD_KAFKA_RESP_ERR_NO_ERROR ? AK_SINK_OK
                : ak_kafka_err_permanent(err)     ? AK_SINK_PERMANENT
                                                  : AK_SINK_RETRY;
  ak_kafka_reason(err, out->reason, sizeof out->reason);
}

/* ---- librdkafka callbacks (its threads, or our poll thread for dr/error) ------------ */

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
  (void)rk;
  kconn_t *c = opaque;
  kcell_t *cell = m->_private;
  ak_sink_outcome_t out = {.result = AK_SINK_RETRY};
  pthread_mutex_lock(&c->mu);
  cell_unlink(cell);
  c->inflight--;
  c->last_use_ms = now_ms();
  kafka_sink_t *owner = cell->owner;
  bool blocked = c->blocked && m->err != RD_KAFKA_RESP_ERR_NO_ERROR;
  if (blocked) {
    pthread_mutex_lock(&c->egress_mu);
    snprintf(out.reason, sizeof out.reason, "%s", c->refusal);
    pthread_mutex_unlock(&c->egress_mu);
  }
  if (owner) owner->answering++;
  pthread_mutex_unlock(&c->mu);
  if (owner) {
    if (blocked) out.result = AK_SINK_PERMANENT;
    else outcome_for(m->err, &out);
    cell->done(cell->ctx, &out);
    pthread_mutex_lock(&c->mu);
    owner->answering--;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
  }
  free(cell);
}

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque) {
  (void)reason; /* librdkafka's text is not copied anywhere: the error's name says enough */
  kconn_t *c = opaque;
  bool all_refused = false;
  if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN && c->egress) {
    pthread_mutex_lock(&c->egress_mu);
    all_refused = c->refused > 0 && c->allowed == 0;
    pthread_mutex_unlock(&c->egress_mu);
  }
  pthread_mutex_lock(&c->mu);
  if (all_refused && !c->blocked) {
    c->blocked = true;
    c->purge = true;
  }
  if (err == RD_KAFKA_RESP_ERR__FATAL) c->fatal = true;
  pthread_mutex_unlock(&c->mu);
  if (err == RD_KAFKA_RESP_ERR__FATAL) {
    char why[128] = "";
    rd_kafka_resp_err_t orig = rd_kafka_fatal_error(rk, why, sizeof why);
    ak_log(AK_LOG_ERROR, "sink.kafka", "producer fatal error; it is replaced, its records retried", "error=%s",
           rd_kafka_err2name(orig));
  }
}

static void on_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
  (void)rk;
  ak_kafka_log("sink.kafka", level, fac, buf);
}

/* Guarded producers only: the address librdkafka resolved and is about to connect to. */
static int on_connect(int fd, const struct sockaddr *sa, int salen, const char *id, void *opaque) {
  (void)id;
  kconn_t *c = opaque;
  if (!ak_egress_addr_allowed(c->egress, sa)) {
    pthread_mutex_lock(&c->egress_mu);
    c->refused++;
    ak_egress_refusal(sa, c->refusal, sizeof c->refusal);
    pthread_mutex_unlock(&c->egress_mu);
    return EACCES;
  }
  pthread_mutex_lock(&c->egress_mu);
  c->allowed++;
  pthread_mutex_unlock(&c->egress_mu);
  if (connect(fd, sa, (socklen_t)salen) == -1 && errno != EINPROGRESS) return errno ? errno : ECONNREFUSED;
  return 0;
}

/* ---- producer lifecycle ------------------------------------------------------------ */

/* A new producer for c (c->mu held). Does not touch the network: librdkafka connects in
 * its own threads. */
static rd_kafka_t *producer_new(kconn_t *c, char *err, size_t errlen) {
  /* the new producer's connects are counted afresh (a producer being destroyed opens no
   * more connections) */
  pthread_mutex_lock(&c->egress_mu);
  c->refused = c->allowed = 0;
  c->refusal[0] = '\0';
  pthread_mutex_unlock(&c->egress_mu);
  ak_kafka_producer_cfg_t pc = {
    .client = {.brokers = c->brokers, .client_id = c->client, .ssl = c->ssl, .sasl = c->sasl,
               .sasl_user = c->sasl_user, .sasl_pass = c->sasl_pass},
    .produce_timeout_ms = c->produce_timeout_ms,
    .max_record_bytes = c->max_record_bytes,
    .queue_messages = KAFKA_MAX_INFLIGHT + 1000,
    .queue_kbytes = KAFKA_QUEUE_KBYTES,
    .opaque = c,
    .dr_msg_cb = on_delivery,
    .error_cb = on_error,
    .log_cb = on_log,
    .connect_cb = c->egress ? on_connect : NULL,
  };
  rd_kafka_t *rk = ak_kafka_producer_new(&pc, err, errlen);
  if (!rk) return NULL;
  c->blocked = c->purge = c->fatal = false;
  c->last_use_ms = now_ms();
  return rk;
}

/* Serves delivery reports, purges a producer the guard blocked, closes it when idle. */
static void *poll_main(void *arg) {
  kconn_t *c = arg;
  pthread_mutex_lock(&c->mu);
  while (!c->stopping) {
    rd_kafka_t *rk = c->rk;
    if (!rk) {
      pthread_cond_wait(&c->cv, &c->mu);
      continue;
    }
    if (c->idle_ms > 0 && c->inflight == 0 && now_ms() - c->last_use_ms >= c->idle_ms) {
      c->rk = NULL;
      c->blocked = false; /* the next producer asks the guard afresh (names may resolve anew) */
      pthread_mutex_unlock(&c->mu);
      rd_kafka_flush(rk, 1000);
      rd_kafka_destroy(rk);
      pthread_mutex_lock(&c->mu);
      continue;
    }
    if (c->fatal) {
      /* a fatal producer answers every record with an error: answer what it holds (the
       * dispatcher retries them) and let the next delivery open a new one */
      c->rk = NULL;
      c->fatal = false;
      pthread_mutex_unlock(&c->mu);
      rd_kafka_purge(rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
      rd_kafka_flush(rk, 1000);
      rd_kafka_destroy(rk);
      pthread_mutex_lock(&c->mu);
      continue;
    }
    bool purge = c->purge;
    c->purge = false;
    pthread_mutex_unlock(&c->mu);
    if (purge) rd_kafka_purge(rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_NON_BLOCKING);
    rd_kafka_poll(rk, KAFKA_POLL_MS);
    pthread_mutex_lock(&c->mu);
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

static void conn_free(kconn_t *c) {
  if (c->thread_started) {
    pthread_mutex_lock(&c->mu);
    c->stopping = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
  }
  if (c->rk) {
    /* every instance is gone and answered its records; what librdkafka still holds is
     * reported here (purged) so that its cells are freed */
    rd_kafka_purge(c->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    rd_kafka_flush(c->rk, 2000);
    rd_kafka_destroy(c->rk);
  }
  while (c->cells.next != &c->cells) { /* never reported: librdkafka dropped them */
    kcell_t *cell = c->cells.next;
    cell_unlink(cell);
    free(cell);
  }
  if (c->key) OPENSSL_cleanse(c->key, strlen(c->key));
  if (c->sasl_pass) OPENSSL_cleanse(c->sasl_pass, strlen(c->sasl_pass));
  free(c->key);
  free(c->brokers);
  free(c->client);
  free(c->sasl_user);
  free(c->sasl_pass);
  pthread_mutex_destroy(&c->mu);
  pthread_mutex_destroy(&c->egress_mu);
  pthread_cond_destroy(&c->cv);
  free(c);
}

static void conn_release(kconn_t *c) {
  if (!c) return;
  pthread_mutex_lock(&registry_mu);
  bool last = --c->refs == 0;
  if (last)
    for (kconn_t **pp = &registry; *pp; pp = &(*pp)->next)
      if (*pp == c) {
        *pp = c->next;
        break;
      }
  pthread_mutex_unlock(&registry_mu);
  if (last) conn_free(c);
}

/* The shared producer state of this destination: found, or made and registered. */
static kconn_t *conn_attach(const kafka_opts_t *o, const ak_egress_t *egress, char *err, size_t errlen) {
  char *brokers = ak_kafka_join_brokers(o->brokers.v, o->brokers.n);
  if (!brokers) {
    snprintf(err, errlen, "brokers: must not be empty");
    return NULL;
  }
  const char *client = o->client ? o->client : "ankusa";
  int sasl = o->sasl.username ? o->sasl.mechanism : -1;
  ak_buf_t kb = AK_BUF_INIT;
  ak_buf_printf(&kb, "%s\n%s\n%d\n%d\n%s\n%s\n%lld\n%lld\n%p", brokers, client, o->ssl, sasl,
                sasl >= 0 ? o->sasl.username : "", sasl >= 0 ? o->sasl.password : "",
                (long long)o->produce_timeout_ms, (long long)o->max_record_bytes, (const void *)egress);
  char *key = ak_buf_take(&kb, NULL);
  if (!key) {
    free(brokers);
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  pthread_mutex_lock(&registry_mu);
  kconn_t *c = registry;
  while (c && strcmp(c->key, key) != 0) c = c->next;
  if (c) {
    c->refs++;
    pthread_mutex_lock(&c->mu);
    if (o->idle_timeout_ms == 0 || c->idle_ms == 0) c->idle_ms = 0;
    else if (o->idle_timeout_ms > c->idle_ms) c->idle_ms = o->idle_timeout_ms;
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_unlock(&registry_mu);
    OPENSSL_cleanse(key, strlen(key));
    free(key);
    free(brokers);
    return c;
  }
  c = calloc(1, sizeof *c);
  if (!c) goto oom;
  c->key = key;
  c->brokers = brokers;
  key = NULL;
  brokers = NULL;
  c->refs = 1;
  c->client = strdup(client);
  c->ssl = o->ssl;
  c->sasl = sasl;
  if (sasl >= 0) {
    c->sasl_user = strdup(o->sasl.username);
    c->sasl_pass = strdup(o->sasl.password);
  }
  c->produce_timeout_ms = o->produce_timeout_ms;
  c->max_record_bytes = o->max_record_bytes;
  c->idle_ms = o->idle_timeout_ms;
  c->egress = egress;
  c->cells.prev = c->cells.next = &c->cells;
  pthread_mutex_init(&c->mu, NULL);
  pthread_mutex_init(&c->egress_mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  if (!c->client || (sasl >= 0 && (!c->sasl_user || !c->sasl_pass))) {
    pthread_mutex_unlock(&registry_mu);
    conn_free(c);
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  c->next = registry;
  registry = c;
  pthread_mutex_unlock(&registry_mu);
  return c;
oom:
  pthread_mutex_unlock(&registry_mu);
  if (key) OPENSSL_cleanse(key, strlen(key));
  free(key);
  free(brokers);
  snprintf(err, errlen, "out of memory");
  return NULL;
}

/* ---- vtable ------------------------------------------------------------------------ */

static void answer(ak_sink_done_fn done, void *ctx, ak_sink_result_t r, const char *fmt, ...)
  __attribute__((format(printf, 4, 5)));
static void answer(ak_sink_done_fn done, void *ctx, ak_sink_result_t r, const char *fmt, ...) {
  ak_sink_outcome_t out = {.result = r};
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out.reason, sizeof out.reason, fmt, ap);
  va_end(ap);
  done(ctx, &out);
}

static void kafka_deliver(void *self, const ak_sink_attempt_t *att, void *ctx, ak_sink_done_fn done) {
  kafka_sink_t *s = self;
  kconn_t *c = s->conn;
  const ak_envelope_t *env = att->env;
  bool by_claim = ak_sink_by_claim(att, s->inline_max);
  if (by_claim && !att->claim_ref) {
    answer(done, ctx, AK_SINK_RETRY, "claim_missing");
    return;
  }
  ak_buf_t val = AK_BUF_INIT;
  if (ak_sink_message_encode(att, by_claim, &val) != 0) {
    ak_buf_free(&val);
    answer(done, ctx, AK_SINK_RETRY, "out of memory");
    return;
  }
  /* the key: the static one, or <tenant>/<source> */
  char keybuf[160];
  const char *key = s->key;
  size_t key_len = s->key_len;
  if (!key) {
    int n = snprintf(keybuf, sizeof keybuf, "%.*s/%.*s", (int)(env->tenant_len > 64 ? 64 : env->tenant_len),
                     env->tenant ? env->tenant : "", (int)(env->source_len > 64 ? 64 : env->source_len),
                     env->source ? env->source : "");
    key = keybuf;
    key_len = n < 0 ? 0 : (size_t)n;
  }
  size_t vlen = val.len;
  if ((int64_t)(vlen + key_len) > s->max_record_bytes) {
    ak_buf_free(&val);
    answer(done, ctx, AK_SINK_PERMANENT, "record_too_large: %zu bytes, max_record_bytes %lld", vlen + key_len,
           (long long)s->max_record_bytes);
    return;
  }
  ak_sink_meta_scratch_t scratch;
  ak_sink_meta_t meta[AK_SINK_META_MAX];
  size_t nmeta = ak_sink_metadata(att, true, &scratch, meta);
  rd_kafka_headers_t *hdrs = rd_kafka_headers_new(nmeta);
  for (size_t i = 0; i < nmeta; i++)
    rd_kafka_header_add(hdrs, meta[i].name, -1, meta[i].value, (ssize_t)meta[i].value_len);
  kcell_t *cell = calloc(1, sizeof *cell);
  char *payload = ak_buf_take(&val, NULL);
  if (!cell || !payload) {
    free(cell);
    free(payload);
    rd_kafka_headers_destroy(hdrs);
    answer(done, ctx, AK_SINK_RETRY, "out of memory");
    return;
  }
  cell->owner = s;
  cell->done = done;
  cell->ctx = ctx;

  char err[128] = "";
  ak_sink_result_t refuse = AK_SINK_OK;
  pthread_mutex_lock(&c->mu);
  if (c->blocked) {
    refuse = AK_SINK_PERMANENT;
    pthread_mutex_lock(&c->egress_mu);
    snprintf(err, sizeof err, "%s", c->refusal);
    pthread_mutex_unlock(&c->egress_mu);
  } else if (c->inflight >= KAFKA_MAX_INFLIGHT) {
    refuse = AK_SINK_RETRY;
    snprintf(err, sizeof err, "busy");
  } else if (!c->rk && !(c->rk = producer_new(c, err, sizeof err))) {
    refuse = AK_SINK_RETRY;
  } else if (!c->thread_started) {
    if (pthread_create(&c->thread, NULL, poll_main, c) != 0) {
      refuse = AK_SINK_RETRY;
      snprintf(err, sizeof err, "cannot start the kafka poll thread");
    } else {
      c->thread_started = true;
      pthread_setname_np(c->thread, "ak-kafka");
    }
  }
  if (refuse == AK_SINK_OK) {
    cell->next = c->cells.next;
    cell->prev = &c->cells;
    c->cells.next->prev = cell;
    c->cells.next = cell;
    rd_kafka_resp_err_t rc = rd_kafka_producev(
      c->rk, RD_KAFKA_V_TOPIC(s->topic), RD_KAFKA_V_KEY(key, key_len), RD_KAFKA_V_VALUE(payload, vlen),
      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_FREE), RD_KAFKA_V_TIMESTAMP(env->received_at_ms),
      RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_OPAQUE(cell), RD_KAFKA_V_END);
    if (rc == RD_KAFKA_RESP_ERR_NO_ERROR) {
      c->inflight++;
      c->last_use_ms = now_ms();
      pthread_cond_broadcast(&c->cv); /* a closed producer's thread waits for this one */
      pthread_mutex_unlock(&c->mu);
      return;
    }
    cell_unlink(cell);
    ak_sink_outcome_t o;
    outcome_for(rc, &o);
    refuse = o.result == AK_SINK_OK ? AK_SINK_RETRY : o.result;
    snprintf(err, sizeof err, "%s", o.reason);
  }
  pthread_mutex_unlock(&c->mu);
  /* not produced: the payload and headers are still ours */
  free(cell);
  free(payload);
  rd_kafka_headers_destroy(hdrs);
  answer(done, ctx, refuse, "%s", err);
}

static void kafka_destroy(void *self) {
  kafka_sink_t *s = self;
  if (!s) return;
  kconn_t *c = s->conn;
  if (c) {
    /* answer every record of ours still under way, once; a delivery report answering one
     * right now is waited for, so nothing calls done() for us after this returns. The
     * records are taken a handful at a time (no allocation: nothing to fail), each batch
     * answered outside the lock; a taken cell is no longer ours, so the next walk, from
     * the list's head, skips it. */
    enum { BATCH = 64 };
    struct {
      ak_sink_done_fn done;
      void *ctx;
    } owed[BATCH];
    size_t n;
    pthread_mutex_lock(&c->mu);
    do {
      n = 0;
      for (kcell_t *cell = c->cells.next; cell != &c->cells && n < BATCH; cell = cell->next) {
        if (cell->owner != s) continue;
        cell->owner = NULL;
        owed[n].done = cell->done;
        owed[n].ctx = cell->ctx;
        n++;
      }
      if (n) {
        pthread_mutex_unlock(&c->mu);
        for (size_t i = 0; i < n; i++) answer(owed[i].done, owed[i].ctx, AK_SINK_RETRY, "sink stopped");
        pthread_mutex_lock(&c->mu);
      }
    } while (n == BATCH);
    while (s->answering > 0) pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
    conn_release(c);
  }
  ak_egress_free(s->owned_egress);
  free(s->topic);
  free(s->key);
  free(s);
}

static void *kafka_create(const json_t *opts, const ak_sink_ctx_t *sctx, char *err, size_t errlen) {
  kafka_sink_t *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  kafka_opts_t o = {0};
  json_t *checked = NULL;
  if (ak_opt_bind_checked(kafka_rows, opts, &o, &checked, err, errlen) != 0) goto fail;
  s->inline_max = ak_sink_inline_max_opt(checked);
  s->max_record_bytes = o.max_record_bytes;
  const ak_egress_t *egress = NULL;
  int rc = 0;
  if (o.idle_timeout_ms != 0 && o.idle_timeout_ms < o.produce_timeout_ms + 1000) {
    snprintf(err, errlen, "idle_timeout_ms: must be 0 or at least produce_timeout_ms + 1000 (%lld)",
             (long long)(o.produce_timeout_ms + 1000));
    rc = -1;
  } else if (!(s->topic = strdup(o.topic)) || (o.key && !(s->key = strdup(o.key)))) {
    snprintf(err, errlen, "out of memory");
    rc = -1;
  } else {
    s->key_len = s->key ? strlen(s->key) : 0;
    if (!(sctx && sctx->trusted)) {
      egress = sctx ? sctx->egress : NULL;
      if (!egress && !(egress = s->owned_egress = ak_egress_new(NULL, 0, false, err, errlen))) rc = -1;
    }
    if (rc == 0 && !(s->conn = conn_attach(&o, egress, err, errlen))) rc = -1;
  }
  ak_opt_release(kafka_rows, &o);
  json_decref(checked);
  if (rc != 0) goto fail;
  return s;
fail:
  kafka_destroy(s);
  return NULL;
}

static int64_t kafka_inline_max(const void *self) {
  return ((const kafka_sink_t *)self)->inline_max;
}

/* ---- config rules (check-config reports them; create refuses the same) -------------- */

/* host of "host:port", "[v6]:port" or "host" as an address literal, when it is one. */
static bool broker_literal(const char *b, struct sockaddr_storage *ss) {
  char host[INET6_ADDRSTRLEN + 1];
  const char *p = strstr(b, "://");
  if (p) b = p + 3;
  while (*b == ' ') b++;
  size_t n;
  if (*b == '[') {
    const char *e = strchr(b, ']');
    if (!e) return false;
    b++;
    n = (size_t)(e - b);
  } else {
    const char *e = strrchr(b, ':');
    n = e ? (size_t)(e - b) : strlen(b);
  }
  if (n == 0 || n >= sizeof host) return false;
  memcpy(host, b, n);
  host[n] = '\0';
  memset(ss, 0, sizeof *ss);
  struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
  struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
  if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
    s4->sin_family = AF_INET;
    return true;
  }
  if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) {
    s6->sin6_family = AF_INET6;
    return true;
  }
  return false;
}

static void kafka_check(ak_check_t *c, const char *path, json_t *sink, const json_t *root) {
  int64_t idle, produce;
  if (ak_check_int_at(sink, "idle_timeout_ms", &idle) && ak_check_int_at(sink, "produce_timeout_ms", &produce) &&
      idle != 0 && idle < produce + 1000)
    ak_check_error(c, "%s.idle_timeout_ms: must be 0 or at least produce_timeout_ms + 1000 (%lld)", path,
                   (long long)(produce + 1000));
  /* the brokers: a list after the schema pass (a comma string was split) */
  const json_t *brokers = json_object_get(sink, "brokers");
  ak_egress_t *g = ak_egress_tree_guards(root) ? ak_egress_from_tree(root) : NULL;
  size_t i;
  const json_t *b;
  json_array_foreach(brokers, i, b) {
    const char *s = json_string_value(b);
    if (!s) continue;
    bool any = false;
    char part[300];
    const char *q;
    size_t len;
    while (ak_kafka_broker_next(&s, &q, &len)) {
      if (len >= sizeof part) continue;
      any = true;
      memcpy(part, q, len);
      part[len] = '\0';
      struct sockaddr_storage ss;
      if (g && broker_literal(part, &ss) && !ak_egress_addr_allowed(g, (struct sockaddr *)&ss)) {
        char why[128];
        ak_egress_refusal((struct sockaddr *)&ss, why, sizeof why);
        ak_check_error(c, "%s.brokers[%zu]: %s (egress.allow_cidrs can allow it)", path, i, why);
      }
    }
    if (!any) ak_check_error(c, "%s.brokers[%zu]: must name a broker (host:port)", path, i);
  }
  ak_egress_free(g);
}

const ak_sink_vtable_t ak_sink_kafka = {
  .plugin = {.type = "kafka", .doc = "one SinkMessageV1 record per hook to a Kafka topic (idempotent, acks=all)",
             .options = kafka_rows, .check = kafka_check},
  .durable = true,
  .create = kafka_create,
  .deliver = kafka_deliver,
  .destroy = kafka_destroy,
  .inline_max = kafka_inline_max,
};
