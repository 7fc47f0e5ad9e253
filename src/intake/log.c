/* The Kafka intake log (intake/log.h): the producer, its delivery-report thread, the
 * partition, the open-time checks and the replay consumer.
 *
 * A batch is one cell that every record of it points at (the message opaque); the
 * delivery reports count it down and the last one answers done, on our thread. publish
 * queues a whole batch under mu, and the reports take mu, so a batch is never answered
 * while it is still being queued. Our own bound of records and bytes in flight sits below
 * librdkafka's queue limits, so a batch that passes it is queued whole.
 *
 * Confirm rule: ok only when every record's report is without error, which with acks=all
 * and idempotence means every in-sync replica has it, once, in order. A producer that hits
 * a fatal idempotence error is replaced by the thread (what it held is answered "producer
 * reset"), so the next publish goes to a fresh producer id. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <librdkafka/rdkafka.h>
#include <openssl/crypto.h>
#include "core/clock.h"
#include "core/list.h"
#include "core/log.h"
#include "intake/log.h"
#include "net/kafka.h"

#define LOG_COMPONENT "intake.log"
/* in flight at most (ours); librdkafka's queue is sized above both */
#define INTAKE_MAX_RECORDS 100000
#define INTAKE_MAX_BYTES ((int64_t)512 << 20)
#define INTAKE_POLL_MS 100
#define INTAKE_PURGE_WAIT_MS 2000

typedef struct ibatch {
  ak_list_t node;   /* in the log's batches until its last report */
  ak_intake_done_fn done;
  void *ctx;
  size_t left;      /* records without a delivery report */
  int64_t bytes;    /* counted in the log's bytes in flight */
  int64_t last_offset;
  bool failed;
  bool answered;    /* done was called: later reports only count down */
  char why[64];
} ibatch_t;

struct ak_intake_log {
  char *brokers, *topic, *node_id, *client_id, *sasl_user, *sasl_pass;
  size_t node_len;
  int sasl;
  bool ssl;
  int64_t produce_timeout_ms, max_record_bytes, min_isr, linger_ms;

  pthread_mutex_t mu;
  pthread_cond_t cv;
  rd_kafka_t *rk;          /* NULL only while a fatal producer is replaced */
  rd_kafka_topic_t *rkt;
  int32_t partition;       /* -1 until open */
  int32_t leader;          /* the partition's leader at open */
  pthread_t thread;
  bool thread_started, closing, stopping, fatal;
  int users;               /* opens using rk outside mu: a replacement waits for them */
  ak_list_t batches;       /* every batch with a record not yet reported */
  size_t nbatches;
  int64_t records, bytes;  /* in flight */
};

static int64_t now_ms(void) {
  return ak_mono_ns() / 1000000;
}

/* a wait in ms as librdkafka takes it: 1 .. INT_MAX */
static int ms_int(int64_t ms) {
  return ms < 1 ? 1 : ms > 2147483647 ? 2147483647 : (int)ms;
}

/* ---- librdkafka callbacks (our thread: rd_kafka_poll and flush run there) ------------ */

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
  (void)rk;
  ak_intake_log_t *l = opaque;
  ibatch_t *b = m->_private;
  pthread_mutex_lock(&l->mu);
  l->records--;
  if (m->err) {
    if (!b->failed) {
      b->failed = true;
      if (l->stopping) snprintf(b->why, sizeof b->why, "stopped");
      else ak_kafka_reason(m->err, b->why, sizeof b->why);
    }
  } else if (m->offset > b->last_offset) {
    b->last_offset = m->offset;
  }
  bool last = --b->left == 0;
  bool answer = last && !b->answered;
  if (last) {
    l->bytes -= b->bytes;
    ak_list_remove(&b->node);
    l->nbatches--;
  }
  pthread_mutex_unlock(&l->mu);
  if (answer) b->done(b->ctx, !b->failed, b->failed ? -1 : b->last_offset, b->failed ? b->why : "");
  if (last) {
    free(b);
    pthread_mutex_lock(&l->mu);
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
  }
}

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque) {
  (void)reason; /* librdkafka's text is not copied anywhere: the error's name says enough */
  ak_intake_log_t *l = opaque;
  if (err != RD_KAFKA_RESP_ERR__FATAL) return;
  char why[128] = "";
  rd_kafka_resp_err_t orig = rd_kafka_fatal_error(rk, why, sizeof why);
  ak_log(AK_LOG_ERROR, LOG_COMPONENT, "producer fatal error; it is replaced, what it held fails", "topic=%s error=%s",
         l->topic, rd_kafka_err2name(orig));
  pthread_mutex_lock(&l->mu);
  l->fatal = true;
  pthread_mutex_unlock(&l->mu);
}

static void on_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
  (void)rk;
  ak_kafka_log(LOG_COMPONENT, level, fac, buf);
}

/* ---- producer ------------------------------------------------------------------------ */

static ak_kafka_client_cfg_t client_cfg(const ak_intake_log_t *l) {
  return (ak_kafka_client_cfg_t){.brokers = l->brokers, .client_id = l->client_id, .ssl = l->ssl, .sasl = l->sasl,
                                 .sasl_user = l->sasl_user, .sasl_pass = l->sasl_pass};
}

static rd_kafka_t *producer_new(ak_intake_log_t *l, char *err, size_t errlen) {
  ak_kafka_producer_cfg_t pc = {
    .client = client_cfg(l),
    .produce_timeout_ms = l->produce_timeout_ms,
    .linger_ms = l->linger_ms,
    .max_record_bytes = l->max_record_bytes,
    .queue_messages = INTAKE_MAX_RECORDS + 1000,
    .queue_kbytes = (INTAKE_MAX_BYTES + l->max_record_bytes) / 1024 + 65536,
    .opaque = l,
    .dr_msg_cb = on_delivery,
    .error_cb = on_error,
    .log_cb = on_log,
  };
  return ak_kafka_producer_new(&pc, err, errlen);
}

/* rk with its topic handle: both or neither. */
static int producer_open(ak_intake_log_t *l, rd_kafka_t **rkp, rd_kafka_topic_t **rktp, char *err, size_t errlen) {
  rd_kafka_t *rk = producer_new(l, err, errlen);
  if (!rk) return -1;
  rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, l->topic, NULL);
  if (!rkt) {
    rd_kafka_destroy(rk);
    snprintf(err, errlen, "cannot create the kafka topic handle for %s", l->topic);
    return -1;
  }
  *rkp = rk;
  *rktp = rkt;
  return 0;
}

static void producer_close(rd_kafka_t *rk, rd_kafka_topic_t *rkt) {
  rd_kafka_purge(rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
  rd_kafka_flush(rk, INTAKE_PURGE_WAIT_MS); /* serves the purged records' reports here */
  rd_kafka_topic_destroy(rkt);
  rd_kafka_destroy(rk);
}

/* Serves delivery reports; replaces a fatal producer; at stop, fails what is left. */
static void *poll_main(void *arg) {
  ak_intake_log_t *l = arg;
  pthread_mutex_lock(&l->mu);
  while (!l->stopping) {
    if (l->fatal && l->users == 0) {
      l->fatal = false;
      rd_kafka_t *old = l->rk;
      rd_kafka_topic_t *oldt = l->rkt;
      char err[128] = "";
      if (producer_open(l, &l->rk, &l->rkt, err, sizeof err) != 0) {
        l->rk = NULL;
        l->rkt = NULL;
        ak_log(AK_LOG_ERROR, LOG_COMPONENT, "cannot replace the producer; publishes fail", "topic=%s error=\"%s\"",
               l->topic, err);
      }
      pthread_mutex_unlock(&l->mu);
      if (old) producer_close(old, oldt);
      pthread_mutex_lock(&l->mu);
      continue;
    }
    rd_kafka_t *rk = l->rk;
    if (!rk || l->fatal) { /* no producer (tried again each second), or one in use by open */
      l->fatal = true;
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_sec += 1;
      pthread_cond_timedwait(&l->cv, &l->mu, &ts);
      if (rk) {
        pthread_mutex_unlock(&l->mu);
        rd_kafka_poll(rk, 0);
        pthread_mutex_lock(&l->mu);
      }
      continue;
    }
    pthread_mutex_unlock(&l->mu);
    rd_kafka_poll(rk, INTAKE_POLL_MS);
    pthread_mutex_lock(&l->mu);
  }
  /* stopping: what librdkafka still holds is purged and reported ("stopped"), here */
  rd_kafka_t *rk = l->rk;
  pthread_mutex_unlock(&l->mu);
  if (rk) {
    rd_kafka_purge(rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    int64_t deadline = now_ms() + INTAKE_PURGE_WAIT_MS;
    pthread_mutex_lock(&l->mu);
    while (l->nbatches > 0 && now_ms() < deadline) {
      pthread_mutex_unlock(&l->mu);
      rd_kafka_poll(rk, 10);
      pthread_mutex_lock(&l->mu);
    }
    pthread_mutex_unlock(&l->mu);
  }
  /* never reported: answered here; librdkafka may still point at them, so they are freed
   * only after the producer is gone (ak_intake_log_free) */
  for (;;) {
    pthread_mutex_lock(&l->mu);
    ibatch_t *b = NULL;
    ak_list_foreach(n, &l->batches) {
      ibatch_t *x = ak_list_entry(n, ibatch_t, node);
      if (!x->answered) {
        b = x;
        break;
      }
    }
    if (b) b->answered = true;
    pthread_mutex_unlock(&l->mu);
    if (!b) break;
    b->done(b->ctx, false, -1, "stopped");
  }
  return NULL;
}

/* ---- lifecycle ----------------------------------------------------------------------- */

static void cleanse_free(char *s) {
  if (s) OPENSSL_cleanse(s, strlen(s));
  free(s);
}

static void log_release(ak_intake_log_t *l) {
  free(l->brokers);
  free(l->topic);
  free(l->node_id);
  free(l->client_id);
  free(l->sasl_user);
  cleanse_free(l->sasl_pass);
  pthread_mutex_destroy(&l->mu);
  pthread_cond_destroy(&l->cv);
  free(l);
}

ak_intake_log_t *ak_intake_log_new(const ak_intake_log_cfg_t *cfg, char *err, size_t errlen) {
  if (!cfg->topic || !*cfg->topic) {
    snprintf(err, errlen, "topic: must not be empty");
    return NULL;
  }
  if (!cfg->node_id || !*cfg->node_id) {
    snprintf(err, errlen, "node_id: must not be empty (it is every record's key)");
    return NULL;
  }
  if (cfg->produce_timeout_ms < 1 || cfg->produce_timeout_ms > 2147483647) {
    snprintf(err, errlen, "produce_timeout_ms: must be 1..2147483647");
    return NULL;
  }
  if (cfg->max_record_bytes < 1 || cfg->max_record_bytes > 900000000) {
    snprintf(err, errlen, "max_record_bytes: must be 1..900000000");
    return NULL;
  }
  if (cfg->min_insync_replicas < 0) {
    snprintf(err, errlen, "min_insync_replicas: must be 0 (no check) or more");
    return NULL;
  }
  int sasl = -1;
  if (cfg->sasl_mechanism) {
    if ((sasl = ak_kafka_sasl_index(cfg->sasl_mechanism)) < 0) {
      snprintf(err, errlen, "sasl.mechanism: must be plain, scram_sha_256 or scram_sha_512");
      return NULL;
    }
    if (!cfg->sasl_username || !*cfg->sasl_username || !cfg->sasl_password || !*cfg->sasl_password) {
      snprintf(err, errlen, "sasl: username and password are required with a mechanism");
      return NULL;
    }
  }
  ak_intake_log_t *l = calloc(1, sizeof *l);
  if (!l) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->cv, NULL);
  ak_list_init(&l->batches);
  l->partition = l->leader = -1;
  l->sasl = sasl;
  l->ssl = cfg->ssl;
  l->produce_timeout_ms = cfg->produce_timeout_ms;
  l->linger_ms = cfg->linger_ms > 0 ? cfg->linger_ms : 0;
  l->max_record_bytes = cfg->max_record_bytes;
  l->min_isr = cfg->min_insync_replicas;
  l->topic = strdup(cfg->topic);
  l->node_id = strdup(cfg->node_id);
  l->node_len = strlen(cfg->node_id);
  l->client_id = strdup(cfg->client_id ? cfg->client_id : "ankusa");
  if (sasl >= 0) {
    l->sasl_user = strdup(cfg->sasl_username);
    l->sasl_pass = strdup(cfg->sasl_password);
  }
  if (!l->topic || !l->node_id || !l->client_id || (sasl >= 0 && (!l->sasl_user || !l->sasl_pass))) {
    log_release(l);
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  if (!(l->brokers = ak_kafka_join_brokers(cfg->brokers, cfg->nbrokers))) {
    log_release(l);
    snprintf(err, errlen, "brokers: must name a broker (host:port)");
    return NULL;
  }
  if (producer_open(l, &l->rk, &l->rkt, err, errlen) != 0) {
    log_release(l);
    return NULL;
  }
  if (pthread_create(&l->thread, NULL, poll_main, l) != 0) {
    producer_close(l->rk, l->rkt);
    log_release(l);
    snprintf(err, errlen, "cannot start the intake log thread");
    return NULL;
  }
  l->thread_started = true;
  pthread_setname_np(l->thread, "ak-intake");
  return l;
}

void ak_intake_log_free(ak_intake_log_t *l, int64_t timeout_ms) {
  if (!l) return;
  pthread_mutex_lock(&l->mu);
  l->closing = true; /* no new batch from here on */
  if (l->thread_started) {
    int64_t deadline = now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    while (l->nbatches > 0) {
      int64_t left = deadline - now_ms();
      if (left <= 0) break;
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_sec += left / 1000;
      ts.tv_nsec += (long)(left % 1000) * 1000000L;
      if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
      pthread_cond_timedwait(&l->cv, &l->mu, &ts);
    }
    l->stopping = true;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
  } else {
    pthread_mutex_unlock(&l->mu);
  }
  if (l->rk) {
    rd_kafka_topic_destroy(l->rkt);
    rd_kafka_destroy(l->rk);
  }
  ak_list_foreach_safe(n, nx, &l->batches) { /* answered at stop, never reported */
    ak_list_remove(n);
    free(ak_list_entry(n, ibatch_t, node));
  }
  log_release(l);
}

/* ---- open ---------------------------------------------------------------------------- */

int ak_intake_log_isr_ok(const char *topic, const char *value, int64_t required, char *err, size_t errlen) {
  if (!value || !*value) return -1;
  char *e = NULL;
  errno = 0;
  long long v = strtoll(value, &e, 10);
  if (errno || *e) return -1;
  if (v >= required) return 1;
  snprintf(err, errlen, "topic %s: min.insync.replicas is %lld, the intake log requires at least %lld", topic, v,
           (long long)required);
  return 0;
}

/* The topic's min.insync.replicas asked of broker: 1 (ok), 0 (lower: err), -1 (not
 * answered: why). */
static int check_isr(ak_intake_log_t *l, rd_kafka_t *rk, int32_t broker, int64_t timeout_ms, char *why,
                     size_t whylen, char *err, size_t errlen) {
  char ebuf[256];
  int rc = -1;
  rd_kafka_ConfigResource_t *res = rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, l->topic);
  rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
  rd_kafka_AdminOptions_t *o = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS);
  rd_kafka_event_t *ev = NULL;
  if (!res || !q || !o) {
    snprintf(why, whylen, "out of memory");
    goto out;
  }
  rd_kafka_AdminOptions_set_request_timeout(o, ms_int(timeout_ms), ebuf, sizeof ebuf);
  /* a topic's configs are served by any broker; the controller need not be known (the
   * mock cluster names none) */
  if (broker >= 0) rd_kafka_AdminOptions_set_broker(o, broker, ebuf, sizeof ebuf);
  rd_kafka_DescribeConfigs(rk, &res, 1, o, q);
  ev = rd_kafka_queue_poll(q, ms_int(timeout_ms + 1000));
  if (!ev) {
    snprintf(why, whylen, "timeout");
    goto out;
  }
  if (rd_kafka_event_error(ev)) {
    snprintf(why, whylen, "%s", rd_kafka_err2name(rd_kafka_event_error(ev)));
    goto out;
  }
  const rd_kafka_DescribeConfigs_result_t *r = rd_kafka_event_DescribeConfigs_result(ev);
  size_t nres = 0;
  const rd_kafka_ConfigResource_t **rs = r ? rd_kafka_DescribeConfigs_result_resources(r, &nres) : NULL;
  if (nres != 1) {
    snprintf(why, whylen, "no answer for the topic");
    goto out;
  }
  if (rd_kafka_ConfigResource_error(rs[0])) {
    snprintf(why, whylen, "%s", rd_kafka_err2name(rd_kafka_ConfigResource_error(rs[0])));
    goto out;
  }
  size_t nent = 0;
  const rd_kafka_ConfigEntry_t **ents = rd_kafka_ConfigResource_configs(rs[0], &nent);
  snprintf(why, whylen, "min.insync.replicas not in the answer");
  for (size_t i = 0; i < nent; i++) {
    if (strcmp(rd_kafka_ConfigEntry_name(ents[i]), "min.insync.replicas") != 0) continue;
    rc = ak_intake_log_isr_ok(l->topic, rd_kafka_ConfigEntry_value(ents[i]), l->min_isr, err, errlen);
    if (rc < 0) snprintf(why, whylen, "min.insync.replicas is not a number");
    break;
  }
out:
  if (ev) rd_kafka_event_destroy(ev);
  if (o) rd_kafka_AdminOptions_destroy(o);
  if (q) rd_kafka_queue_destroy(q);
  if (res) rd_kafka_ConfigResource_destroy(res);
  return rc;
}

/* open on rk, which the caller keeps from being replaced meanwhile */
static int open_with(ak_intake_log_t *l, rd_kafka_t *rk, rd_kafka_topic_t *rkt, int64_t deadline, int64_t timeout_ms,
                     bool *checked, char *err, size_t errlen) {
  bool chk = false;
  const struct rd_kafka_metadata *md = NULL;
  rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, rkt, &md, ms_int(timeout_ms));
  if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
    snprintf(err, errlen, "intake log topic %s: no metadata from the brokers within %lld ms (%s)", l->topic,
             (long long)timeout_ms, rd_kafka_err2name(e));
    return -1;
  }
  const struct rd_kafka_metadata_topic *t = md->topic_cnt == 1 ? &md->topics[0] : NULL;
  if (!t || t->err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART || (!t->err && t->partition_cnt < 1)) {
    snprintf(err, errlen, "intake log topic %s does not exist (it is never created: create it with its replication)",
             l->topic);
    rd_kafka_metadata_destroy(md);
    return -1;
  }
  if (t->err) {
    snprintf(err, errlen, "intake log topic %s: the brokers answered %s", l->topic, rd_kafka_err2name(t->err));
    rd_kafka_metadata_destroy(md);
    return -1;
  }
  /* Kafka's Java default partitioner for a keyed record: murmur2(key) & 0x7fffffff % n */
  int32_t part = rd_kafka_msg_partitioner_murmur2(rkt, l->node_id, l->node_len, t->partition_cnt, NULL, NULL);
  int32_t leader = -1;
  for (int i = 0; i < t->partition_cnt; i++)
    if (t->partitions[i].id == part) leader = t->partitions[i].leader;
  int partitions = t->partition_cnt;
  rd_kafka_metadata_destroy(md);

  if (l->min_isr > 0) {
    char why[128] = "";
    int64_t left = deadline - now_ms();
    int rc = check_isr(l, rk, leader, left > 100 ? left : 100, why, sizeof why, err, errlen);
    if (rc == 0) return -1;
    if (rc == 1) chk = true;
    else
      ak_log(AK_LOG_WARNING, LOG_COMPONENT, "min.insync.replicas of the intake log topic not checked",
             "topic=%s required=%lld reason=\"%s\"", l->topic, (long long)l->min_isr, why);
  }
  pthread_mutex_lock(&l->mu);
  l->partition = part;
  l->leader = leader;
  pthread_mutex_unlock(&l->mu);
  *checked = chk;
  ak_log(AK_LOG_INFO, LOG_COMPONENT, "intake log open", "topic=%s partitions=%d partition=%d min_isr_checked=%s",
         l->topic, partitions, (int)part, chk ? "true" : "false");
  return 0;
}

int ak_intake_log_open(ak_intake_log_t *l, int64_t timeout_ms, bool *checked, char *err, size_t errlen) {
  bool chk = false;
  if (checked) *checked = false;
  int64_t deadline = now_ms() + timeout_ms;
  pthread_mutex_lock(&l->mu);
  rd_kafka_t *rk = l->rk;
  rd_kafka_topic_t *rkt = l->rkt;
  if (rk) l->users++;
  pthread_mutex_unlock(&l->mu);
  if (!rk) {
    snprintf(err, errlen, "intake log topic %s: the producer is being replaced", l->topic);
    return -1;
  }
  int rc = open_with(l, rk, rkt, deadline, timeout_ms, &chk, err, errlen);
  pthread_mutex_lock(&l->mu);
  l->users--;
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
  if (rc == 0 && checked) *checked = chk;
  return rc;
}

int32_t ak_intake_log_partition(const ak_intake_log_t *l) {
  pthread_mutex_t *mu = (pthread_mutex_t *)&l->mu;
  pthread_mutex_lock(mu);
  int32_t p = l->partition;
  pthread_mutex_unlock(mu);
  return p;
}

/* ---- publish ------------------------------------------------------------------------- */

int ak_intake_log_publish(ak_intake_log_t *l, const ak_intake_val_t *vals, size_t n, ak_intake_done_fn done,
                          void *ctx) {
  if (n == 0 || !done) return -1;
  int64_t bytes = 0;
  for (size_t i = 0; i < n; i++) {
    if ((int64_t)(vals[i].len + l->node_len) > l->max_record_bytes) return -1;
    bytes += (int64_t)vals[i].len;
  }
  ibatch_t *b = calloc(1, sizeof *b);
  if (!b) return -1;
  b->done = done;
  b->ctx = ctx;
  b->last_offset = -1;
  b->bytes = bytes;
  pthread_mutex_lock(&l->mu);
  if (l->closing || !l->rk || l->partition < 0 || l->records + (int64_t)n > INTAKE_MAX_RECORDS ||
      l->bytes + bytes > INTAKE_MAX_BYTES) {
    pthread_mutex_unlock(&l->mu);
    free(b);
    return -1;
  }
  size_t queued = 0;
  rd_kafka_resp_err_t rc = RD_KAFKA_RESP_ERR_NO_ERROR;
  b->left = n;
  for (; queued < n; queued++) {
    rc = rd_kafka_producev(l->rk, RD_KAFKA_V_RKT(l->rkt), RD_KAFKA_V_PARTITION(l->partition),
                           RD_KAFKA_V_KEY(l->node_id, l->node_len),
                           RD_KAFKA_V_VALUE((void *)vals[queued].p, vals[queued].len),
                           RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_OPAQUE(b), RD_KAFKA_V_END);
    if (rc != RD_KAFKA_RESP_ERR_NO_ERROR) break;
  }
  if (queued == 0) {
    pthread_mutex_unlock(&l->mu);
    free(b);
    return -1;
  }
  if (queued < n) { /* the records queued are reported; the batch fails with them */
    b->left = queued;
    b->failed = true;
    ak_kafka_reason(rc, b->why, sizeof b->why);
  }
  ak_list_insert_tail(&l->batches, &b->node);
  l->nbatches++;
  l->records += (int64_t)queued;
  l->bytes += bytes;
  pthread_mutex_unlock(&l->mu);
  return 0;
}

/* ---- replay -------------------------------------------------------------------------- */

static rd_kafka_t *consumer_new(ak_intake_log_t *l, char *err, size_t errlen) {
  rd_kafka_conf_t *conf = rd_kafka_conf_new();
  char num[32];
  ak_kafka_client_cfg_t cc = client_cfg(l);
  int rc = ak_kafka_client_conf(conf, &cc, err, errlen);
  /* assign() only: the group id is required by librdkafka's assign, never joined;
   * nothing is committed or stored */
  rc |= ak_kafka_conf_set(conf, "group.id", "ankusa-intake-replay", err, errlen);
  rc |= ak_kafka_conf_set(conf, "enable.auto.commit", "false", err, errlen);
  rc |= ak_kafka_conf_set(conf, "enable.auto.offset.store", "false", err, errlen);
  rc |= ak_kafka_conf_set(conf, "enable.partition.eof", "true", err, errlen);
  rc |= ak_kafka_conf_set(conf, "auto.offset.reset", "earliest", err, errlen);
  rc |= ak_kafka_conf_set(conf, "isolation.level", "read_uncommitted", err, errlen);
  /* a record of max_record_bytes fits one fetch */
  int64_t fetch = l->max_record_bytes + 65536 > 52428800 ? l->max_record_bytes + 65536 : 52428800;
  snprintf(num, sizeof num, "%lld", (long long)fetch);
  rc |= ak_kafka_conf_set(conf, "fetch.max.bytes", num, err, errlen);
  rc |= ak_kafka_conf_set(conf, "max.partition.fetch.bytes", num, err, errlen);
  snprintf(num, sizeof num, "%lld", (long long)(fetch + 65536));
  rc |= ak_kafka_conf_set(conf, "receive.message.max.bytes", num, err, errlen);
  if (rc != 0) {
    rd_kafka_conf_destroy(conf);
    return NULL;
  }
  rd_kafka_conf_set_log_cb(conf, on_log);
  return ak_kafka_new(RD_KAFKA_CONSUMER, conf, err, errlen);
}

int ak_intake_log_replay(ak_intake_log_t *l, int64_t from, int64_t timeout_ms, ak_intake_record_fn fn, void *ctx,
                         int64_t *end, char *err, size_t errlen) {
  int32_t part = ak_intake_log_partition(l);
  if (part < 0) {
    snprintf(err, errlen, "intake log topic %s: replay before open", l->topic);
    return -1;
  }
  int tmo = ms_int(timeout_ms);
  rd_kafka_t *ck = consumer_new(l, err, errlen);
  if (!ck) return -1;
  int ret = -1;
  rd_kafka_topic_partition_list_t *parts = NULL;
  int64_t lo = 0, hi = 0;
  rd_kafka_resp_err_t e = rd_kafka_query_watermark_offsets(ck, l->topic, part, &lo, &hi, tmo);
  if (e) {
    snprintf(err, errlen, "intake log topic %s[%d]: no offsets from the brokers within %d ms (%s)", l->topic,
             (int)part, tmo, rd_kafka_err2name(e));
    goto out;
  }
  int64_t start = from;
  if (from == AK_INTAKE_BEGINNING) {
    start = lo;
  } else if (from < lo) {
    ak_log(AK_LOG_WARNING, LOG_COMPONENT, "replay from below the earliest retained offset: reading from the earliest",
           "topic=%s partition=%d from=%lld earliest=%lld", l->topic, (int)part, (long long)from, (long long)lo);
    start = lo;
  } else if (from > hi) {
    ak_log(AK_LOG_WARNING, LOG_COMPONENT, "replay from above the high watermark: nothing to read",
           "topic=%s partition=%d from=%lld high_watermark=%lld", l->topic, (int)part, (long long)from, (long long)hi);
  }
  if (start >= hi) {
    *end = hi;
    ret = 0;
    goto out;
  }
  parts = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(parts, l->topic, part)->offset = start;
  if ((e = rd_kafka_assign(ck, parts)) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    snprintf(err, errlen, "intake log topic %s[%d]: cannot assign (%s)", l->topic, (int)part, rd_kafka_err2name(e));
    goto out;
  }
  int64_t next = start, progress = now_ms();
  while (next < hi) {
    rd_kafka_message_t *m = rd_kafka_consumer_poll(ck, tmo < INTAKE_POLL_MS ? tmo : INTAKE_POLL_MS);
    if (!m) {
      if (now_ms() - progress >= timeout_ms) {
        snprintf(err, errlen, "intake log topic %s[%d]: no record within %lld ms at offset %lld (high watermark %lld)",
                 l->topic, (int)part, (long long)timeout_ms, (long long)next, (long long)hi);
        goto out;
      }
      continue;
    }
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
      if (m->offset >= hi) next = hi; /* the records left are control records */
      rd_kafka_message_destroy(m);
      continue;
    }
    if (m->err) {
      rd_kafka_resp_err_t me = m->err;
      rd_kafka_message_destroy(m);
      if (me == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC || me == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION ||
          me == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART || me == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED ||
          now_ms() - progress >= timeout_ms) {
        snprintf(err, errlen, "intake log topic %s[%d]: reading at offset %lld failed (%s)", l->topic, (int)part,
                 (long long)next, rd_kafka_err2name(me));
        goto out;
      }
      continue; /* transport errors: librdkafka reconnects; the no-progress clock decides */
    }
    progress = now_ms();
    if (m->partition != part || m->offset < next) {
      rd_kafka_message_destroy(m);
      continue;
    }
    int64_t off = m->offset;
    next = off + 1;
    int rc = 0;
    if (off < hi && m->key_len == l->node_len && m->key && memcmp(m->key, l->node_id, l->node_len) == 0)
      rc = fn(ctx, off, (const uint8_t *)m->payload, m->len);
    rd_kafka_message_destroy(m);
    if (rc != 0) {
      ret = rc;
      goto out;
    }
  }
  *end = hi;
  ret = 0;
out:
  if (parts) rd_kafka_topic_partition_list_destroy(parts);
  rd_kafka_consumer_close(ck);
  rd_kafka_destroy(ck);
  return ret;
}
