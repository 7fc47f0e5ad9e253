/* What every librdkafka client of ours sets the same way: the connection settings (brokers,
 * client id, TLS, SASL), the idempotent acks=all producer settings, the broker error ->
 * short reason mapping and librdkafka's own log lines. Used by the kafka sink
 * (sinks/kafka.c) and the intake log of wal.type: dual (intake/log.c). Owns no client and
 * no thread; never copies librdkafka's explanation of a refused setting (it may echo the
 * value, a password among them) and never logs a secret. */
#ifndef AK_NET_KAFKA_H
#define AK_NET_KAFKA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <librdkafka/rdkafka.h>
#include "core/options.h"

/* Where a client connects and how it authenticates. */
typedef struct ak_kafka_client_cfg {
  const char *brokers;   /* comma list, "host:port,host:port" */
  const char *client_id; /* never NULL */
  bool ssl;
  int sasl;              /* -1 none, else an index of ak_kafka_sasl_index() */
  const char *sasl_user, *sasl_pass;
} ak_kafka_client_cfg_t;

/* An idempotent producer (acks=all, max.in.flight 5, no linger, never creating a topic). */
typedef struct ak_kafka_producer_cfg {
  ak_kafka_client_cfg_t client;
  int64_t produce_timeout_ms; /* message.timeout.ms */
  int64_t max_record_bytes;   /* one record's key + value at most (message.max.bytes above it) */
  int64_t queue_messages;     /* librdkafka's local queue: queue.buffering.max.messages */
  int64_t queue_kbytes;       /* and queue.buffering.max.kbytes */
  int64_t linger_ms;          /* linger.ms: 0 sends a record at once */
  /* the callbacks and their opaque; NULL: none (connect: librdkafka's own) */
  void *opaque;
  void (*dr_msg_cb)(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque);
  void (*error_cb)(rd_kafka_t *rk, int err, const char *reason, void *opaque);
  void (*log_cb)(const rd_kafka_t *rk, int level, const char *fac, const char *buf);
  int (*connect_cb)(int fd, const struct sockaddr *sa, int salen, const char *id, void *opaque);
} ak_kafka_producer_cfg_t;

/* "plain" | "scram_sha_256" | "scram_sha_512" (our config's spelling) -> index; -1 otherwise. */
int ak_kafka_sasl_index(const char *name);

/* rd_kafka_conf_set; on a refusal err names the key, never the value. */
int ak_kafka_conf_set(rd_kafka_conf_t *conf, const char *key, const char *val, char *err, size_t errlen);

/* The connection settings (bootstrap.servers, client.id, security.protocol, sasl.*,
 * reconnect backoff) into conf. 0, or -1 + err. */
int ak_kafka_client_conf(rd_kafka_conf_t *conf, const ak_kafka_client_cfg_t *c, char *err, size_t errlen);

/* A producer with the client settings, the producer's and p's callbacks. Our call waits on
 * no network (librdkafka connects in its own threads). NULL + err. */
rd_kafka_t *ak_kafka_producer_new(const ak_kafka_producer_cfg_t *p, char *err, size_t errlen);

/* rd_kafka_new with conf (taken on success, destroyed on failure); NULL + err naming what
 * could not be created (never librdkafka's text). */
rd_kafka_t *ak_kafka_new(rd_kafka_type_t type, rd_kafka_conf_t *conf, char *err, size_t errlen);

/* The next broker of the comma list at *s: *p and *len, trimmed of blanks, empty parts
 * skipped; *s moves past it. false at the end. */
bool ak_kafka_broker_next(const char **s, const char **p, size_t *len);

/* The items of v, each split on commas (one item may hold "host:port,host:port" read from
 * one environment variable), trimmed, empty parts dropped, as one comma list (malloc'd).
 * NULL when nothing is left (or out of memory). */
char *ak_kafka_join_brokers(const char *const *v, size_t n);

/* A short reason for a delivery or produce error, free of secrets and of broker text:
 * "timeout", "unreachable", "busy", "message_too_large", ..., else "kafka <ERR_NAME>". */
void ak_kafka_reason(rd_kafka_resp_err_t err, char *out, size_t outlen);
/* The record itself is refused (retrying it cannot help). */
bool ak_kafka_err_permanent(rd_kafka_resp_err_t err);

/* One librdkafka log line (warnings and worse) as our log event under component. */
void ak_kafka_log(const char *component, int level, const char *fac, const char *buf);

/* A client's `sasl` mapping (the kafka sink's, the intake section's): its rows bind here. */
typedef struct ak_kafka_sasl_opts {
  int mechanism; /* index in "plain|scram_sha_256|scram_sha_512" (ak_kafka_sasl_index) */
  const char *username;
  const char *password;
} ak_kafka_sasl_opts_t;
extern const ak_opt_t ak_kafka_sasl_rows[];
/* The mechanism's name for an index of the rows' enum. */
const char *ak_kafka_sasl_name(int mechanism);

#endif
