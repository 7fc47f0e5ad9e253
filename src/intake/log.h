/* The Kafka intake log of wal.type: dual: one idempotent acks=all producer publishing this
 * node's group commits to its one partition of a replicated topic, and the replay of that
 * partition. Owns the producer, its delivery-report thread ("ak-intake"), the partition
 * choice (murmur2(node_id) % partitions, Kafka's Java default), the min.insync.replicas
 * check at open and the replay consumer. Never creates a topic, never waits on the network
 * in publish, never puts the SASL password or a broker's text into a reason, error or log
 * line, and never touches the store: the writer and the reconciler (intake/module.c,
 * queue/writer.c) decide what a publish or a replay means.
 *
 * Thread rule: publish may be called from any thread; done runs on the log's thread;
 * open, replay and free run on the caller's thread and never concurrently with free. */
#ifndef AK_INTAKE_LOG_H
#define AK_INTAKE_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AK_INTAKE_BEGINNING (-2) /* replay from the partition's earliest offset */

typedef struct ak_intake_log_cfg {
  const char *const *brokers; size_t nbrokers; /* "host:port" (an item may be a comma list) */
  const char *topic;
  const char *node_id;            /* every record's key; picks the partition */
  const char *client_id;          /* may be NULL: "ankusa" */
  int64_t produce_timeout_ms;     /* librdkafka message.timeout.ms (a publish fails after it) */
  int64_t max_record_bytes;       /* producer message.max.bytes; a larger record is refused */
  int64_t linger_ms;              /* linger.ms of the producer (0: at once) */
  int64_t min_insync_replicas;    /* required at open when the cluster tells (0 = don't check) */
  bool ssl;                       /* security.protocol ssl / sasl_ssl */
  const char *sasl_mechanism;     /* NULL, "plain", "scram_sha_256", "scram_sha_512" */
  const char *sasl_username, *sasl_password;
} ak_intake_log_cfg_t;

typedef struct ak_intake_log ak_intake_log_t;

/* Build the producer (idempotent, acks=all, max.in.flight 5, linger.ms 0) and start its
 * delivery-report thread. Our call waits on no network. NULL + err on a bad config. */
ak_intake_log_t *ak_intake_log_new(const ak_intake_log_cfg_t *cfg, char *err, size_t errlen);

/* Connect: the topic's metadata within timeout_ms (it must exist: never created), this
 * node's partition, and when min_insync_replicas > 0 the topic's min.insync.replicas
 * (DescribeConfigs, asked of the partition's leader): -1 + err naming the topic, its value
 * and the required one when lower. A cluster that does not answer DescribeConfigs (the mock
 * cluster of librdkafka 2.0.2 does not) leaves *checked = false (logged as a warning) and
 * open succeeds. 0 on success. Called again, it refreshes the partition. */
int ak_intake_log_open(ak_intake_log_t *l, int64_t timeout_ms, bool *checked, char *err, size_t errlen);
/* This node's partition; -1 before a successful open. */
int32_t ak_intake_log_partition(const ak_intake_log_t *l);

/* Publish n records as one batch: key = node_id, value = vals[i] (copied), all to this
 * node's partition, in order. Never waits on the network. done is called exactly once, on
 * the log's thread, when every record of the batch has its delivery report: ok with the
 * batch's highest offset when all succeeded, else ok = false and a short secret-free reason
 * ("timeout", "unreachable", "message_too_large", "stopped", "kafka <ERR>", ...). Returns 0,
 * or -1 when the batch cannot be queued at all (not open, closing, a record over
 * max_record_bytes, the local bound of records or bytes in flight reached, n == 0): done
 * is then NOT called. */
typedef void (*ak_intake_done_fn)(void *ctx, bool ok, int64_t last_offset, const char *why);
typedef struct ak_intake_val { const void *p; size_t len; } ak_intake_val_t;
int ak_intake_log_publish(ak_intake_log_t *l, const ak_intake_val_t *vals, size_t n,
                          ak_intake_done_fn done, void *ctx);

/* Read this node's partition from `from` (an offset, or AK_INTAKE_BEGINNING) up to the high
 * watermark observed at the call (a fresh consumer with assign(): no group, no commit),
 * calling fn for every record whose key equals node_id, with its offset and value. Stops
 * early when fn returns non-zero (returns that value). Synchronous; up to timeout_ms waiting
 * for any one fetch. 0 when read to the end (*end = the high watermark read to), -1 + err
 * otherwise. A `from` below the earliest retained offset reads from the earliest (logged);
 * one above the high watermark reads nothing (logged). Needs a successful open. */
typedef int (*ak_intake_record_fn)(void *ctx, int64_t offset, const uint8_t *val, size_t len);
int ak_intake_log_replay(ak_intake_log_t *l, int64_t from, int64_t timeout_ms, ak_intake_record_fn fn, void *ctx,
                         int64_t *end, char *err, size_t errlen);

/* Wait up to timeout_ms for everything queued to be answered (each batch's done called),
 * then stop the thread and free. Batches still unanswered get done(ok=false, "stopped"). */
void ak_intake_log_free(ak_intake_log_t *l, int64_t timeout_ms);

/* The min.insync.replicas rule of open on a value as the cluster gave it: 1 when value >=
 * required, 0 when lower (err names the topic, the value and the required one), -1 when
 * value is not a number (nothing checked). */
int ak_intake_log_isr_ok(const char *topic, const char *value, int64_t required, char *err, size_t errlen);

#endif
