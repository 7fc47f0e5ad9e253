/* The `rabbitmq` sink: publishes SinkMessageV1 to an exchange with publisher confirms
 * (librabbitmq, rabbitmq-c 0.11). Owns its option rows and their config rules, the shared
 * connections (one per url + exchange + egress policy, refcounted by the instances that use
 * it), the I/O thread of each connection, the confirm bookkeeping (delivery tags, returns,
 * acks, nacks, timeouts) and, for a guarded sink, the egress check of every address it
 * connects to. Never declares a queue or a binding (only the exchange, durable), never
 * retries on its own (dispatch owns retries), never puts the URL or its credentials into a
 * log line or an outcome reason, and never touches the store.
 *
 * Threads: rabbitmq-c is blocking and not thread-safe, so each connection has one I/O
 * thread that alone touches its amqp state and socket. deliver() (the dispatcher's thread)
 * encodes the message, appends it to the connection's job list under its mutex and wakes
 * the thread through an eventfd; it never waits on the network. A connection holds at most
 * max_inflight unanswered publishes (queued + unconfirmed): beyond that deliver answers
 * "busy" at once and sends nothing. A connection that failed answers "not_connected" (or,
 * for an egress refusal, the refusal) at once until retry_ms has passed; the next delivery
 * after that triggers a new attempt. Connections open at the first delivery and close
 * after idle_timeout_ms without one.
 *
 * Confirm rule: ok = the broker's basic.ack AND the message was not returned. Every
 * publish is mandatory, so an unroutable message comes back as basic.return (with its
 * content) before its ack; the return is matched to the oldest unconfirmed publish with
 * the same message_id and routing key (a channel returns in publish order) and its ack
 * then answers "unroutable". All failures are transient (AK_SINK_RETRY) except an egress
 * refusal (permanent: retrying cannot change the guard's answer).
 *
 * Egress: a guarded sink resolves the host itself, checks every address with the guard
 * and connects to the checked address (amqp://: our own socket handed to rabbitmq-c;
 * amqps://: rabbitmq-c opens the literal, the certificate is verified against the URL's
 * host name and SNI carries that name). A trusted sink does the same without the check. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <amqp.h>
#include <amqp_ssl_socket.h>
#include <amqp_tcp_socket.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include "core/buf.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/envelope.h"
#include "core/ids.h"
#include "core/log.h"
#include "sinks/egress.h"
#include "sinks/message.h"
#include "sinks/sink.h"

#define RMQ_CHANNEL 1
#define RMQ_FRAME_MAX 131072
#define RMQ_STOP_BATCH 64

/* ---- options ---------------------------------------------------------------------- */

typedef struct rmq_opts {
  const char *url;
  const char *exchange;
  int exchange_type; /* index in "topic|direct|fanout|headers" */
  const char *routing_key;
  int64_t inline_max;
  int64_t max_inflight;
  int64_t confirm_timeout_ms;
  int64_t retry_ms;
  int64_t idle_timeout_ms;
} rmq_opts_t;

static const char *const exchange_types[] = {"topic", "direct", "fanout", "headers"};

static const ak_opt_t rmq_opts[] = {
  {.key = "url", .type = AK_OPT_STRING, .def = "amqp://guest:guest@localhost:5672", .flags = AK_OPTF_SECRET,
   .doc = "broker URL amqp://user:pass@host:port/vhost; amqps:// = TLS (system CAs, SSL_CERT_FILE)",
   AK_AT(rmq_opts_t, url)},
  {.key = "exchange", .type = AK_OPT_STRING, .flags = AK_OPTF_REQUIRED | AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX,
   .min = 1, .max = 255,
   .doc = "exchange to publish to; declared durable on connect (queues are never declared)",
   AK_AT(rmq_opts_t, exchange)},
  {.key = "exchange_type", .type = AK_OPT_ENUM, .def = "topic", .enum_vals = "topic|direct|fanout|headers",
   .doc = "type the exchange is declared with", AK_AT(rmq_opts_t, exchange_type)},
  {.key = "routing_key", .type = AK_OPT_STRING, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MAX, .max = 255,
   .doc = "routing key of every publish; absent: ankusa.<source_id>", AK_AT(rmq_opts_t, routing_key)},
  AK_SINK_INLINE_MAX_ROW(rmq_opts_t, inline_max),
  {.key = "max_inflight", .type = AK_OPT_INT, .def = "256", .min = 1, .max = 65536,
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX,
   .doc = "unconfirmed publishes per connection at most; beyond: the attempt fails busy, nothing sent",
   AK_AT(rmq_opts_t, max_inflight)},
  {.key = "confirm_timeout_ms", .type = AK_OPT_INT, .def = "5000", .min = 1, .max = 3600000,
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX, .doc = "wait for the broker's confirm of one publish",
   AK_AT(rmq_opts_t, confirm_timeout_ms)},
  {.key = "retry_ms", .type = AK_OPT_INT, .def = "5000", .min = 0, .max = 3600000,
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX, .doc = "delay before reconnecting after a failed connection",
   AK_AT(rmq_opts_t, retry_ms)},
  AK_SINK_IDLE_TIMEOUT_ROW(rmq_opts_t, idle_timeout_ms),
  {0},
};

/* ---- types ------------------------------------------------------------------------ */

typedef struct rmq_conn rmq_conn_t;

typedef struct rmq_sink {
  rmq_conn_t *conn;
  char *routing_key; /* NULL: ankusa.<the hook's source> */
  int64_t inline_max;
  int64_t confirm_timeout_ms;
  unsigned busy; /* answers the I/O thread is giving right now (conn->mu) */
} rmq_sink_t;

typedef struct rmq_job {
  struct rmq_job *next, *prev;
  rmq_sink_t *inst;
  ak_sink_done_fn done; /* NULL once destroy answered it */
  void *ctx;
  bool sent, returned;
  uint64_t tag;
  int64_t sent_ms, deadline_ms, confirm_timeout_ms;
  char msgid[AK_UUID_STR_LEN];
  char *rk;
  ak_buf_t body;
  size_t nmeta;
  amqp_table_entry_t meta[AK_SINK_META_MAX];
  char *meta_store;
  /* the answer, while it travels from the list to done() */
  ak_sink_result_t res;
  const char *reason;
  char reason_buf[128];
} rmq_job_t;

typedef struct { rmq_job_t *head, *tail; } job_list_t;

typedef enum { C_IDLE, C_UP, C_DOWN } conn_state_t;

struct rmq_conn {
  rmq_conn_t *next; /* registry */
  unsigned refs;
  /* identity */
  char *key;
  char *url_buf; /* the parsed URL points into it */
  struct amqp_connection_info info;
  char *exchange;
  const char *exchange_type;
  const ak_egress_t *egress; /* NULL: trusted */
  ak_egress_t *owned_egress;
  int64_t max_inflight, retry_ms, idle_timeout_ms, io_timeout_ms;
  /* shared with deliver/destroy, under mu */
  pthread_mutex_t mu;
  pthread_cond_t cv; /* an instance's busy count dropped */
  job_list_t queued, sent;
  size_t njobs;
  conn_state_t state;
  int64_t next_connect_ms, last_use_ms;
  ak_sink_result_t down_res;
  char down_reason[128];
  int fd; /* the socket while up, for shutdown() at stop */
  bool stopping;
  /* the I/O thread's own */
  pthread_t thread;
  bool thread_started;
  int efd;
  amqp_connection_state_t amqp;
  uint64_t next_tag;
  int64_t last_rx_ms;
  bool ret_pending, ret_have_header;
  uint64_t ret_body_left;
  char ret_rk[256];
};

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static rmq_conn_t *reg_head;

static int64_t now_ms(void) {
  return ak_mono_ns() / 1000000;
}

/* ---- job lists (conn->mu held) -------------------------------------------------------- */

static void list_push(job_list_t *l, rmq_job_t *j) {
  j->next = NULL;
  j->prev = l->tail;
  if (l->tail) l->tail->next = j;
  else l->head = j;
  l->tail = j;
}

static void list_unlink(job_list_t *l, rmq_job_t *j) {
  if (j->prev) j->prev->next = j->next;
  else l->head = j->next;
  if (j->next) j->next->prev = j->prev;
  else l->tail = j->prev;
  j->next = j->prev = NULL;
}

static void job_free(rmq_job_t *j) {
  if (!j) return;
  ak_buf_free(&j->body);
  free(j->rk);
  free(j->meta_store);
  free(j);
}

/* Take j off its list with an answer (mu held): it goes on *fin, and its instance counts
 * it as busy until finish() has called done (destroy waits for that). */
static void detach(rmq_conn_t *c, job_list_t *from, rmq_job_t *j, ak_sink_result_t res, const char *reason,
                   job_list_t *fin) {
  list_unlink(from, j);
  c->njobs--;
  j->res = res;
  j->reason = reason;
  if (j->done) j->inst->busy++;
  list_push(fin, j);
}

/* Answer every job on fin (mu not held) and free them. */
static void finish(rmq_conn_t *c, job_list_t *fin) {
  if (!fin->head) return;
  for (rmq_job_t *j = fin->head; j; j = j->next) {
    if (!j->done) continue;
    ak_sink_outcome_t out = {.result = j->res};
    snprintf(out.reason, sizeof out.reason, "%s", j->reason ? j->reason : "");
    j->done(j->ctx, &out);
  }
  pthread_mutex_lock(&c->mu);
  bool wake = false;
  for (rmq_job_t *j = fin->head; j; j = j->next)
    if (j->done && --j->inst->busy == 0) wake = true;
  if (wake) pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  for (rmq_job_t *j = fin->head, *n; j; j = n) {
    n = j->next;
    job_free(j);
  }
  fin->head = fin->tail = NULL;
}

static void fail_all(rmq_conn_t *c, job_list_t *l, ak_sink_result_t res, const char *reason, job_list_t *fin) {
  while (l->head) detach(c, l, l->head, res, reason, fin);
}

static void wake(rmq_conn_t *c) {
  uint64_t one = 1;
  ssize_t rc = write(c->efd, &one, sizeof one);
  (void)rc; /* EAGAIN: the counter is already non-zero, the thread wakes anyway */
}

/* ---- connecting (I/O thread) ------------------------------------------------------------ */

static bool reply_ok(amqp_rpc_reply_t r) {
  return r.reply_type == AMQP_RESPONSE_NORMAL;
}

/* A broker reply as a short log field (the broker's code and text: no credentials). */
static void describe_reply(amqp_rpc_reply_t r, char *out, size_t outlen) {
  if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION) {
    snprintf(out, outlen, "%s", amqp_error_string2(r.library_error));
  } else if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION && r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
    const amqp_connection_close_t *m = r.reply.decoded;
    snprintf(out, outlen, "connection closed by broker: %u %.*s", m->reply_code, (int)m->reply_text.len,
             (const char *)m->reply_text.bytes);
  } else if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION && r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
    const amqp_channel_close_t *m = r.reply.decoded;
    snprintf(out, outlen, "channel closed by broker: %u %.*s", m->reply_code, (int)m->reply_text.len,
             (const char *)m->reply_text.bytes);
  } else {
    snprintf(out, outlen, "no reply");
  }
}

static void log_failure(rmq_conn_t *c, const char *what, const char *detail) {
  char q[160];
  snprintf(q, sizeof q, "%s", detail);
  for (char *p = q; *p; p++)
    if (*p == '"' || *p == '\n') *p = '\'';
  ak_log(AK_LOG_WARNING, "sink.rabbitmq", what, "exchange=%s detail=\"%s\"", c->exchange, q);
}

/* The SNI of a TLS connection opened on a literal address: the URL's host name, set when
 * the handshake starts (rabbitmq-c has just set the literal). */
static void sni_callback(const SSL *ssl, int where, int ret) {
  (void)ret;
  if (!(where & SSL_CB_HANDSHAKE_START)) return;
  const char *host = SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));
  if (host) SSL_set_tlsext_host_name((SSL *)ssl, host);
}

static bool is_literal(const char *host) {
  unsigned char tmp[sizeof(struct in6_addr)];
  return inet_pton(AF_INET, host, tmp) == 1 || inet_pton(AF_INET6, host, tmp) == 1;
}

/* A non-blocking TCP connection to sa within timeout_ms, or -1. */
static int tcp_connect(const struct addrinfo *ai, int64_t timeout_ms) {
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) goto fail;
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    if (poll(&p, 1, (int)timeout_ms) != 1) {
      errno = 0; /* timed out */
      goto fail;
    }
    int err = 0;
    socklen_t el = sizeof err;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0) {
      errno = err;
      goto fail;
    }
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  return fd;
fail: {
  int e = errno;
  close(fd);
  errno = e;
  return -1;
}
}

/* Open the channel in confirm mode and declare the exchange (I/O thread). */
static int channel_setup(rmq_conn_t *c, char *why, size_t whylen) {
  amqp_channel_open(c->amqp, RMQ_CHANNEL);
  amqp_rpc_reply_t r = amqp_get_rpc_reply(c->amqp);
  if (reply_ok(r)) {
    amqp_confirm_select(c->amqp, RMQ_CHANNEL);
    r = amqp_get_rpc_reply(c->amqp);
  }
  if (reply_ok(r)) {
    amqp_exchange_declare(c->amqp, RMQ_CHANNEL, amqp_cstring_bytes(c->exchange), amqp_cstring_bytes(c->exchange_type),
                          0, 1, 0, 0, amqp_empty_table);
    r = amqp_get_rpc_reply(c->amqp);
  }
  if (!reply_ok(r)) {
    describe_reply(r, why, whylen);
    return -1;
  }
  c->next_tag = 0;
  c->ret_pending = false;
  return 0;
}

static void drop_amqp(rmq_conn_t *c, bool graceful) {
  if (!c->amqp) return;
  pthread_mutex_lock(&c->mu);
  c->fd = -1;
  pthread_mutex_unlock(&c->mu);
  if (graceful) {
    amqp_channel_close(c->amqp, RMQ_CHANNEL, AMQP_REPLY_SUCCESS);
    amqp_connection_close(c->amqp, AMQP_REPLY_SUCCESS);
  }
  amqp_destroy_connection(c->amqp);
  c->amqp = NULL;
}

/* Connect, log in, open the confirm channel, declare the exchange. 0, or -1 with the
 * class and reason every waiting delivery gets. */
static int conn_open(rmq_conn_t *c, ak_sink_result_t *res, char *reason, size_t reasonlen) {
  char why[192] = "";
  *res = AK_SINK_RETRY;
  snprintf(reason, reasonlen, "not_connected");
  char port[16];
  snprintf(port, sizeof port, "%d", c->info.port);
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res0 = NULL;
  int gai = getaddrinfo(c->info.host, port, &hints, &res0);
  if (gai != 0) {
    log_failure(c, "resolve failed", gai_strerror(gai));
    return -1;
  }
  bool refused = false, tried = false;
  char refusal[128] = "";
  int fd = -1;
  amqp_socket_t *sock = NULL;
  c->amqp = amqp_new_connection();
  if (!c->amqp) goto fail;
  for (struct addrinfo *ai = res0; ai; ai = ai->ai_next) {
    if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6) continue;
    if (c->egress && !ak_egress_addr_allowed(c->egress, ai->ai_addr)) {
      if (!refused) ak_egress_refusal(ai->ai_addr, refusal, sizeof refusal);
      refused = true;
      continue;
    }
    tried = true;
    if (!c->info.ssl) {
      fd = tcp_connect(ai, c->io_timeout_ms);
      if (fd < 0) {
        snprintf(why, sizeof why, "%s", errno == 0 || errno == EINPROGRESS ? "connect timed out" : strerror(errno));
        continue;
      }
      sock = amqp_tcp_socket_new(c->amqp);
      if (!sock) {
        close(fd);
        fd = -1;
        goto fail;
      }
      amqp_tcp_socket_set_sockfd(sock, fd);
      pthread_mutex_lock(&c->mu); /* from here a stop can cut a hanging login short */
      c->fd = fd;
      pthread_mutex_unlock(&c->mu);
      break;
    }
    /* TLS: rabbitmq-c opens the socket itself; give it the checked literal */
    char lit[INET6_ADDRSTRLEN];
    const void *a = ai->ai_family == AF_INET ? (const void *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr
                                             : (const void *)&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr;
    if (!inet_ntop(ai->ai_family, a, lit, sizeof lit)) continue;
    if (!sock) {
      sock = amqp_ssl_socket_new(c->amqp);
      if (!sock) goto fail;
      SSL_CTX *ctx = amqp_ssl_socket_get_context(sock);
      SSL_CTX_set_default_verify_paths(ctx);
      X509_VERIFY_PARAM *vp = SSL_CTX_get0_param(ctx);
      if (is_literal(c->info.host)) {
        X509_VERIFY_PARAM_set1_ip_asc(vp, c->info.host);
      } else {
        X509_VERIFY_PARAM_set1_host(vp, c->info.host, 0);
        SSL_CTX_set_app_data(ctx, c->info.host);
        SSL_CTX_set_info_callback(ctx, sni_callback);
      }
      amqp_ssl_socket_set_verify_peer(sock, 1);
      amqp_ssl_socket_set_verify_hostname(sock, 0); /* the verify param above checks the name */
    }
    struct timeval tv = {.tv_sec = c->io_timeout_ms / 1000, .tv_usec = (c->io_timeout_ms % 1000) * 1000};
    int rc = amqp_socket_open_noblock(sock, lit, c->info.port, &tv);
    if (rc == AMQP_STATUS_OK) {
      fd = amqp_get_sockfd(c->amqp);
      break;
    }
    snprintf(why, sizeof why, "%s", amqp_error_string2(rc));
  }
  freeaddrinfo(res0);
  res0 = NULL;
  if (fd < 0) {
    if (refused && !tried) {
      *res = AK_SINK_PERMANENT;
      snprintf(reason, reasonlen, "%s", refusal);
      ak_log(AK_LOG_WARNING, "sink.rabbitmq", "egress refused", "exchange=%s", c->exchange);
    } else {
      log_failure(c, "connect failed", why[0] ? why : "no address answered");
    }
    goto fail;
  }
  struct timeval tv = {.tv_sec = c->io_timeout_ms / 1000, .tv_usec = (c->io_timeout_ms % 1000) * 1000};
  amqp_set_handshake_timeout(c->amqp, &tv);
  amqp_set_rpc_timeout(c->amqp, &tv);
  amqp_rpc_reply_t r = amqp_login(c->amqp, c->info.vhost, 0, RMQ_FRAME_MAX, 0, AMQP_SASL_METHOD_PLAIN, c->info.user,
                                  c->info.password);
  if (!reply_ok(r)) {
    describe_reply(r, why, sizeof why);
    log_failure(c, "login failed", why);
    goto fail;
  }
  if (channel_setup(c, why, sizeof why) != 0) {
    log_failure(c, "channel setup failed", why);
    snprintf(reason, reasonlen, "channel_closed");
    goto fail;
  }
  pthread_mutex_lock(&c->mu);
  c->fd = fd;
  pthread_mutex_unlock(&c->mu);
  c->last_rx_ms = now_ms();
  return 0;
fail:
  if (res0) freeaddrinfo(res0);
  drop_amqp(c, false);
  return -1;
}

/* ---- publishing and confirms (I/O thread) ---------------------------------------------- */

static int publish(rmq_conn_t *c, rmq_job_t *j) {
  amqp_basic_properties_t props = {
    ._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG |
              AMQP_BASIC_HEADERS_FLAG,
    .content_type = amqp_cstring_bytes("application/json"),
    .delivery_mode = AMQP_DELIVERY_PERSISTENT,
    .message_id = amqp_cstring_bytes(j->msgid),
    .headers = {.num_entries = (int)j->nmeta, .entries = j->meta},
  };
  amqp_bytes_t body = {.len = j->body.len, .bytes = j->body.p};
  return amqp_basic_publish(c->amqp, RMQ_CHANNEL, amqp_cstring_bytes(c->exchange), amqp_cstring_bytes(j->rk), 1, 0,
                            &props, body);
}

/* The answer of a confirmed publish: ok unless it was returned. */
static void confirm(rmq_conn_t *c, rmq_job_t *j, bool ack, job_list_t *fin) {
  if (!ack) detach(c, &c->sent, j, AK_SINK_RETRY, "nacked", fin);
  else if (j->returned) detach(c, &c->sent, j, AK_SINK_RETRY, "unroutable", fin);
  else detach(c, &c->sent, j, AK_SINK_OK, NULL, fin);
}

static void on_confirm(rmq_conn_t *c, uint64_t tag, bool multiple, bool ack, job_list_t *fin) {
  pthread_mutex_lock(&c->mu);
  for (rmq_job_t *j = c->sent.head, *n; j; j = n) {
    n = j->next;
    if (multiple ? j->tag <= tag : j->tag == tag) confirm(c, j, ack, fin);
    else if (!multiple && j->tag > tag) break;
  }
  pthread_mutex_unlock(&c->mu);
}

/* The header of a returned message: mark the oldest unconfirmed publish it can be. */
static void on_return_header(rmq_conn_t *c, const amqp_basic_properties_t *p) {
  pthread_mutex_lock(&c->mu);
  for (rmq_job_t *j = c->sent.head; j; j = j->next) {
    if (j->returned || !(p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG)) continue;
    if (p->message_id.len == strlen(j->msgid) && memcmp(p->message_id.bytes, j->msgid, p->message_id.len) == 0 &&
        strcmp(j->rk, c->ret_rk) == 0) {
      j->returned = true;
      break;
    }
  }
  pthread_mutex_unlock(&c->mu);
}

/* 0 = go on, 1 = the channel was closed (reopen), -1 = the connection is gone. */
static int on_frame(rmq_conn_t *c, const amqp_frame_t *f, job_list_t *fin) {
  c->last_rx_ms = now_ms();
  if (f->frame_type == AMQP_FRAME_METHOD) {
    switch (f->payload.method.id) {
      case AMQP_BASIC_ACK_METHOD: {
        const amqp_basic_ack_t *m = f->payload.method.decoded;
        on_confirm(c, m->delivery_tag, m->multiple, true, fin);
        return 0;
      }
      case AMQP_BASIC_NACK_METHOD: {
        const amqp_basic_nack_t *m = f->payload.method.decoded;
        on_confirm(c, m->delivery_tag, m->multiple, false, fin);
        return 0;
      }
      case AMQP_BASIC_RETURN_METHOD: {
        const amqp_basic_return_t *m = f->payload.method.decoded;
        snprintf(c->ret_rk, sizeof c->ret_rk, "%.*s", (int)m->routing_key.len, (const char *)m->routing_key.bytes);
        c->ret_pending = true;
        c->ret_have_header = false;
        return 0;
      }
      case AMQP_CHANNEL_CLOSE_METHOD: {
        const amqp_channel_close_t *m = f->payload.method.decoded;
        char why[192];
        snprintf(why, sizeof why, "%u %.*s", m->reply_code, (int)m->reply_text.len, (const char *)m->reply_text.bytes);
        log_failure(c, "channel closed by broker", why);
        amqp_channel_close_ok_t ok = {0};
        if (amqp_send_method(c->amqp, RMQ_CHANNEL, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok) != AMQP_STATUS_OK) return -1;
        return 1;
      }
      case AMQP_CONNECTION_CLOSE_METHOD: {
        const amqp_connection_close_t *m = f->payload.method.decoded;
        char why[192];
        snprintf(why, sizeof why, "%u %.*s", m->reply_code, (int)m->reply_text.len, (const char *)m->reply_text.bytes);
        log_failure(c, "connection closed by broker", why);
        amqp_connection_close_ok_t ok = {0};
        amqp_send_method(c->amqp, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok);
        return -1;
      }
      default:
        return 0;
    }
  }
  if (f->frame_type == AMQP_FRAME_HEADER && c->ret_pending && !c->ret_have_header) {
    c->ret_have_header = true;
    on_return_header(c, f->payload.properties.decoded);
    c->ret_body_left = f->payload.properties.body_size;
    if (c->ret_body_left == 0) c->ret_pending = false;
  } else if (f->frame_type == AMQP_FRAME_BODY && c->ret_pending) {
    size_t n = f->payload.body_fragment.len;
    c->ret_body_left = n >= c->ret_body_left ? 0 : c->ret_body_left - n;
    if (c->ret_body_left == 0) c->ret_pending = false;
  }
  return 0;
}

/* Leave the up state: unconfirmed publishes answer `sent_reason`, waiting ones
 * not_connected; a reconnect waits retry_ms. */
static void conn_lost(rmq_conn_t *c, const char *sent_reason, job_list_t *fin) {
  drop_amqp(c, false);
  pthread_mutex_lock(&c->mu);
  fail_all(c, &c->sent, AK_SINK_RETRY, sent_reason, fin);
  fail_all(c, &c->queued, AK_SINK_RETRY, "not_connected", fin);
  c->state = C_DOWN;
  c->down_res = AK_SINK_RETRY;
  snprintf(c->down_reason, sizeof c->down_reason, "not_connected");
  c->next_connect_ms = now_ms() + c->retry_ms;
  pthread_mutex_unlock(&c->mu);
}

/* Publish what is queued, in order; tags are assigned as the broker will (1, 2, ...). */
static int send_queued(rmq_conn_t *c, job_list_t *fin) {
  for (;;) {
    pthread_mutex_lock(&c->mu);
    rmq_job_t *j = c->queued.head;
    while (j && !j->done) { /* its instance is gone: nobody waits for it */
      detach(c, &c->queued, j, AK_SINK_RETRY, NULL, fin);
      j = c->queued.head;
    }
    if (!j) {
      pthread_mutex_unlock(&c->mu);
      return 0;
    }
    list_unlink(&c->queued, j);
    j->tag = ++c->next_tag;
    j->sent = true;
    j->sent_ms = now_ms();
    j->deadline_ms = j->sent_ms + j->confirm_timeout_ms;
    list_push(&c->sent, j);
    pthread_mutex_unlock(&c->mu);
    /* j stays valid: only this thread frees jobs */
    int rc = publish(c, j);
    if (rc != AMQP_STATUS_OK) {
      log_failure(c, "publish failed", amqp_error_string2(rc));
      return -1;
    }
  }
}

/* Confirm deadlines: each late publish answers confirm_timeout. A connection from which
 * nothing at all came since the late publish went out is taken for dead. Returns -1 then,
 * else 0; *next: the earliest deadline left (INT64_MAX: none). */
static int check_timeouts(rmq_conn_t *c, int64_t now, int64_t *next, job_list_t *fin) {
  bool dead = false;
  *next = INT64_MAX;
  pthread_mutex_lock(&c->mu);
  for (rmq_job_t *j = c->sent.head, *n; j; j = n) {
    n = j->next;
    if (j->deadline_ms <= now) {
      if (c->last_rx_ms < j->sent_ms) dead = true;
      detach(c, &c->sent, j, AK_SINK_RETRY, "confirm_timeout", fin);
    } else if (j->deadline_ms < *next) {
      *next = j->deadline_ms;
    }
  }
  pthread_mutex_unlock(&c->mu);
  return dead ? -1 : 0;
}

/* Read every frame that is already here (never waits). 0, or -1: the connection is gone. */
static int read_frames(rmq_conn_t *c, job_list_t *fin) {
  for (;;) {
    amqp_frame_t f;
    struct timeval zero = {0, 0};
    int rc = amqp_simple_wait_frame_noblock(c->amqp, &f, &zero);
    if (rc == AMQP_STATUS_TIMEOUT) break;
    if (rc != AMQP_STATUS_OK) {
      log_failure(c, "connection lost", amqp_error_string2(rc));
      return -1;
    }
    int fr = on_frame(c, &f, fin);
    if (fr < 0) return -1;
    if (fr > 0) { /* channel closed: its unconfirmed publishes are lost; reopen it */
      pthread_mutex_lock(&c->mu);
      fail_all(c, &c->sent, AK_SINK_RETRY, "channel_closed", fin);
      pthread_mutex_unlock(&c->mu);
      char why[192];
      amqp_maybe_release_buffers(c->amqp);
      if (channel_setup(c, why, sizeof why) != 0) {
        log_failure(c, "channel reopen failed", why);
        return -1;
      }
    }
  }
  amqp_maybe_release_buffers(c->amqp);
  return 0;
}

static void *io_thread(void *arg) {
  rmq_conn_t *c = arg;
  job_list_t fin = {0};
  for (;;) {
    int64_t now = now_ms();
    pthread_mutex_lock(&c->mu);
    if (c->stopping) {
      pthread_mutex_unlock(&c->mu);
      break;
    }
    bool want = c->queued.head != NULL;
    conn_state_t st = c->state;
    if (st != C_UP && want && st == C_DOWN && now < c->next_connect_ms) {
      /* queued just as the last attempt failed: same answer as deliver gives */
      fail_all(c, &c->queued, c->down_res, c->down_reason, &fin);
      want = false;
    }
    pthread_mutex_unlock(&c->mu);
    finish(c, &fin);

    int timeout = -1;
    if (st != C_UP) {
      if (want) {
        ak_sink_result_t res;
        char reason[128];
        if (conn_open(c, &res, reason, sizeof reason) == 0) {
          pthread_mutex_lock(&c->mu);
          c->state = C_UP;
          pthread_mutex_unlock(&c->mu);
          continue;
        }
        pthread_mutex_lock(&c->mu);
        fail_all(c, &c->queued, res, reason, &fin);
        c->state = C_DOWN;
        c->down_res = res;
        snprintf(c->down_reason, sizeof c->down_reason, "%s", reason);
        c->next_connect_ms = now_ms() + c->retry_ms;
        pthread_mutex_unlock(&c->mu);
        finish(c, &fin);
        continue;
      }
    } else {
      if (send_queued(c, &fin) != 0 || read_frames(c, &fin) != 0) {
        conn_lost(c, "publish_failed", &fin);
        finish(c, &fin);
        continue;
      }
      int64_t next;
      now = now_ms();
      if (check_timeouts(c, now, &next, &fin) != 0) {
        log_failure(c, "connection lost", "no answer from the broker within confirm_timeout_ms");
        conn_lost(c, "publish_failed", &fin);
        finish(c, &fin);
        continue;
      }
      finish(c, &fin);
      pthread_mutex_lock(&c->mu);
      bool empty = c->njobs == 0;
      int64_t idle_at = c->idle_timeout_ms > 0 ? c->last_use_ms + c->idle_timeout_ms : INT64_MAX;
      if (empty && now >= idle_at) {
        c->state = C_IDLE;
        pthread_mutex_unlock(&c->mu);
        drop_amqp(c, true);
        continue;
      }
      pthread_mutex_unlock(&c->mu);
      if (empty && idle_at < next) next = idle_at;
      if (amqp_frames_enqueued(c->amqp) || amqp_data_in_buffer(c->amqp)) next = now;
      if (next != INT64_MAX) timeout = next - now > 60000 ? 60000 : (int)(next > now ? next - now : 0);
    }
    struct pollfd p[2] = {{.fd = c->efd, .events = POLLIN}, {.fd = -1, .events = POLLIN}};
    if (c->amqp) p[1].fd = amqp_get_sockfd(c->amqp);
    if (poll(p, 2, timeout) > 0 && (p[0].revents & POLLIN)) {
      uint64_t v;
      ssize_t rc = read(c->efd, &v, sizeof v);
      (void)rc;
    }
  }
  /* stopping: every instance is gone, nobody waits for an answer */
  pthread_mutex_lock(&c->mu);
  fail_all(c, &c->sent, AK_SINK_RETRY, "sink stopped", &fin);
  fail_all(c, &c->queued, AK_SINK_RETRY, "sink stopped", &fin);
  bool graceful = c->state == C_UP;
  pthread_mutex_unlock(&c->mu);
  finish(c, &fin);
  drop_amqp(c, graceful);
  return NULL;
}

/* ---- the connection registry -------------------------------------------------------------- */

static void conn_free(rmq_conn_t *c) {
  if (!c) return;
  if (c->thread_started) {
    pthread_mutex_lock(&c->mu);
    c->stopping = true;
    if (c->fd >= 0) shutdown(c->fd, SHUT_RDWR); /* a publish blocked on a full socket returns */
    pthread_mutex_unlock(&c->mu);
    wake(c);
    pthread_join(c->thread, NULL);
  }
  if (c->efd >= 0) close(c->efd);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  ak_egress_free(c->owned_egress);
  if (c->url_buf) OPENSSL_cleanse(c->url_buf, strlen(c->url_buf));
  if (c->key) OPENSSL_cleanse(c->key, strlen(c->key));
  free(c->url_buf);
  free(c->key);
  free(c->exchange);
  free(c);
}

/* A URL rabbitmq-c can parse; a copy of it parsed into *info (fields point into *buf). */
static int parse_url(const char *url, char **buf, struct amqp_connection_info *info) {
  *buf = strdup(url);
  if (!*buf) return -1;
  amqp_default_connection_info(info);
  if (amqp_parse_url(*buf, info) != AMQP_STATUS_OK || !info->host || !*info->host) {
    OPENSSL_cleanse(*buf, strlen(*buf));
    free(*buf);
    *buf = NULL;
    return -1;
  }
  return 0;
}

static rmq_conn_t *conn_get(const rmq_opts_t *o, const ak_egress_t *egress, bool guarded, char *err, size_t errlen) {
  size_t klen = strlen(o->url) + strlen(o->exchange) + 40;
  char *key = malloc(klen);
  if (!key) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  snprintf(key, klen, "%s\n%s\n%d\n%p", o->url, o->exchange, guarded, (const void *)egress);
  pthread_mutex_lock(&reg_mu);
  for (rmq_conn_t *c = reg_head; c; c = c->next)
    if (strcmp(c->key, key) == 0) {
      c->refs++;
      pthread_mutex_unlock(&reg_mu);
      OPENSSL_cleanse(key, strlen(key));
      free(key);
      return c;
    }
  rmq_conn_t *c = calloc(1, sizeof *c);
  if (!c) goto oom;
  c->key = key;
  key = NULL;
  c->efd = -1;
  c->fd = -1;
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  if (parse_url(o->url, &c->url_buf, &c->info) != 0) {
    snprintf(err, errlen, "url: not an amqp:// or amqps:// URL");
    goto fail;
  }
  if (!(c->exchange = strdup(o->exchange))) goto oom;
  c->exchange_type = exchange_types[o->exchange_type];
  c->max_inflight = o->max_inflight;
  c->retry_ms = o->retry_ms;
  c->idle_timeout_ms = o->idle_timeout_ms;
  c->io_timeout_ms = o->confirm_timeout_ms;
  if (guarded) {
    if (!egress) {
      c->owned_egress = ak_egress_new(NULL, 0, false, err, errlen);
      if (!c->owned_egress) goto fail;
      egress = c->owned_egress;
    }
    c->egress = egress;
  }
  c->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (c->efd < 0) {
    snprintf(err, errlen, "eventfd: %s", strerror(errno));
    goto fail;
  }
  if (pthread_create(&c->thread, NULL, io_thread, c) != 0) {
    snprintf(err, errlen, "cannot start the rabbitmq thread");
    goto fail;
  }
  pthread_setname_np(c->thread, "ak-rabbitmq");
  c->thread_started = true;
  c->refs = 1;
  c->next = reg_head;
  reg_head = c;
  pthread_mutex_unlock(&reg_mu);
  return c;
oom:
  snprintf(err, errlen, "out of memory");
fail:
  pthread_mutex_unlock(&reg_mu);
  free(key);
  conn_free(c);
  return NULL;
}

static void conn_put(rmq_conn_t *c) {
  pthread_mutex_lock(&reg_mu);
  bool last = --c->refs == 0;
  if (last)
    for (rmq_conn_t **pp = &reg_head; *pp; pp = &(*pp)->next)
      if (*pp == c) {
        *pp = c->next;
        break;
      }
  pthread_mutex_unlock(&reg_mu);
  if (last) conn_free(c);
}

/* ---- vtable ----------------------------------------------------------------------------- */

static void answer(ak_sink_done_fn done, void *ctx, ak_sink_result_t res, const char *reason) {
  ak_sink_outcome_t out = {.result = res};
  snprintf(out.reason, sizeof out.reason, "%s", reason);
  done(ctx, &out);
}

/* The job of one attempt: the message, its routing key and its headers, all copied. */
static rmq_job_t *job_new(rmq_sink_t *s, const ak_sink_attempt_t *att, bool by_claim) {
  rmq_job_t *j = calloc(1, sizeof *j);
  if (!j) return NULL;
  j->inst = s;
  j->confirm_timeout_ms = s->confirm_timeout_ms;
  ak_uuid_format(att->env->id, j->msgid);
  if (ak_sink_message_encode(att, by_claim, &j->body) != 0) goto fail;
  if (s->routing_key) {
    j->rk = strdup(s->routing_key);
  } else if (asprintf(&j->rk, "ankusa.%.*s", (int)att->env->source_len, att->env->source ? att->env->source : "") <
             0) {
    j->rk = NULL;
  }
  if (!j->rk) goto fail;
  ak_sink_meta_scratch_t sc;
  ak_sink_meta_t meta[AK_SINK_META_MAX];
  size_t n = ak_sink_metadata(att, false, &sc, meta), total = 0;
  for (size_t i = 0; i < n; i++) total += meta[i].value_len;
  j->meta_store = malloc(total + 1);
  if (!j->meta_store) goto fail;
  char *p = j->meta_store;
  for (size_t i = 0; i < n; i++) {
    memcpy(p, meta[i].value, meta[i].value_len);
    j->meta[i].key = amqp_cstring_bytes(meta[i].name);
    j->meta[i].value.kind = AMQP_FIELD_KIND_UTF8;
    j->meta[i].value.value.bytes = (amqp_bytes_t){.len = meta[i].value_len, .bytes = p};
    p += meta[i].value_len;
  }
  j->nmeta = n;
  return j;
fail:
  job_free(j);
  return NULL;
}

static void rmq_deliver(void *self, const ak_sink_attempt_t *att, void *ctx, ak_sink_done_fn done) {
  rmq_sink_t *s = self;
  rmq_conn_t *c = s->conn;
  bool by_claim = ak_sink_by_claim(att, s->inline_max);
  if (by_claim && (!att->claim_ref || !*att->claim_ref)) {
    answer(done, ctx, AK_SINK_RETRY, "claim_missing");
    return;
  }
  /* the cheap refusals first: no encoding for an attempt that cannot go */
  int64_t now = now_ms();
  pthread_mutex_lock(&c->mu);
  if (c->state == C_DOWN && now < c->next_connect_ms) {
    ak_sink_result_t res = c->down_res;
    char reason[128];
    snprintf(reason, sizeof reason, "%s", c->down_reason);
    pthread_mutex_unlock(&c->mu);
    answer(done, ctx, res, reason);
    return;
  }
  bool full = c->njobs >= (size_t)c->max_inflight;
  pthread_mutex_unlock(&c->mu);
  if (full) {
    answer(done, ctx, AK_SINK_RETRY, "busy");
    return;
  }
  rmq_job_t *j = job_new(s, att, by_claim);
  if (!j) {
    answer(done, ctx, AK_SINK_RETRY, "out of memory");
    return;
  }
  j->done = done;
  j->ctx = ctx;
  pthread_mutex_lock(&c->mu);
  if (c->njobs >= (size_t)c->max_inflight) {
    pthread_mutex_unlock(&c->mu);
    job_free(j);
    answer(done, ctx, AK_SINK_RETRY, "busy");
    return;
  }
  list_push(&c->queued, j);
  c->njobs++;
  c->last_use_ms = now;
  pthread_mutex_unlock(&c->mu);
  wake(c);
}

static void rmq_destroy(void *self) {
  rmq_sink_t *s = self;
  if (!s) return;
  rmq_conn_t *c = s->conn;
  if (c) {
    /* answer this instance's deliveries still under way (a batch at a time, outside the
     * lock: done may take the dispatcher's lock), then wait for the answers the I/O thread
     * is giving right now; its jobs of this instance are freed by the thread, unanswered */
    for (;;) {
      ak_sink_done_fn dones[RMQ_STOP_BATCH];
      void *ctxs[RMQ_STOP_BATCH];
      size_t n = 0;
      pthread_mutex_lock(&c->mu);
      job_list_t *lists[2] = {&c->queued, &c->sent};
      for (int l = 0; l < 2 && n < RMQ_STOP_BATCH; l++)
        for (rmq_job_t *j = lists[l]->head; j && n < RMQ_STOP_BATCH; j = j->next)
          if (j->inst == s && j->done) {
            dones[n] = j->done;
            ctxs[n++] = j->ctx;
            j->done = NULL;
          }
      if (n == 0)
        while (s->busy > 0) pthread_cond_wait(&c->cv, &c->mu);
      pthread_mutex_unlock(&c->mu);
      if (n == 0) break;
      for (size_t i = 0; i < n; i++) answer(dones[i], ctxs[i], AK_SINK_RETRY, "sink stopped");
    }
    conn_put(c);
  }
  free(s->routing_key);
  free(s);
}

static int64_t rmq_inline_max(const void *self) {
  return ((const rmq_sink_t *)self)->inline_max;
}

/* The rule across keys: the connection must outlive a confirm wait. */
static bool idle_ok(int64_t idle, int64_t confirm) {
  return idle == 0 || idle >= confirm + 1000;
}

static void *rmq_create(const json_t *opts, const ak_sink_ctx_t *sctx, char *err, size_t errlen) {
  rmq_sink_t *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  rmq_opts_t o = {0};
  json_t *checked = NULL;
  if (ak_opt_bind_checked(rmq_opts, opts, &o, &checked, err, errlen) != 0) goto fail;
  s->inline_max = ak_sink_inline_max_opt(checked);
  s->confirm_timeout_ms = o.confirm_timeout_ms;
  int rc = 0;
  if (!idle_ok(o.idle_timeout_ms, o.confirm_timeout_ms)) {
    snprintf(err, errlen, "idle_timeout_ms: must be 0 or at least confirm_timeout_ms + 1000");
    rc = -1;
  } else if (o.routing_key && !(s->routing_key = strdup(o.routing_key))) {
    snprintf(err, errlen, "out of memory");
    rc = -1;
  } else if (!o.routing_key && sctx && sctx->source_id && asprintf(&s->routing_key, "ankusa.%s", sctx->source_id) < 0) {
    s->routing_key = NULL;
    snprintf(err, errlen, "out of memory");
    rc = -1;
  } else {
    bool guarded = !(sctx && sctx->trusted);
    s->conn = conn_get(&o, sctx ? sctx->egress : NULL, guarded, err, errlen);
    if (!s->conn) rc = -1;
  }
  ak_opt_release(rmq_opts, &o);
  json_decref(checked);
  if (rc == 0) return s;
fail:
  rmq_destroy(s);
  return NULL;
}

/* ---- config rules (check-config reports them; create refuses the same) --------------------- */

static void rmq_check(ak_check_t *c, const char *path, json_t *sink, const json_t *root) {
  const char *url = json_string_value(json_object_get(sink, "url"));
  if (url) {
    char *buf = NULL;
    struct amqp_connection_info info;
    if (parse_url(url, &buf, &info) != 0) {
      ak_check_error(c, "%s.url: not an amqp:// or amqps:// URL", path);
    } else if (ak_egress_tree_guards(root)) {
      /* a literal address the guard refuses can never work; names are judged at connect */
      ak_egress_t *g = ak_egress_from_tree(root);
      struct sockaddr_in6 sa6 = {.sin6_family = AF_INET6};
      struct sockaddr_in sa4 = {.sin_family = AF_INET};
      const struct sockaddr *sa = NULL;
      if (inet_pton(AF_INET, info.host, &sa4.sin_addr) == 1) sa = (const struct sockaddr *)&sa4;
      else if (inet_pton(AF_INET6, info.host, &sa6.sin6_addr) == 1) sa = (const struct sockaddr *)&sa6;
      if (g && sa && !ak_egress_addr_allowed(g, sa)) {
        char why[128];
        ak_egress_refusal(sa, why, sizeof why);
        ak_check_error(c, "%s.url: %s (egress.allow_cidrs can allow it)", path, why);
      }
      ak_egress_free(g);
    }
    if (buf) {
      OPENSSL_cleanse(buf, strlen(buf));
      free(buf);
    }
  }
  const json_t *it = json_object_get(sink, "idle_timeout_ms"), *ct = json_object_get(sink, "confirm_timeout_ms");
  int64_t idle = json_is_integer(it) ? json_integer_value(it) : 600000;
  int64_t confirm = json_is_integer(ct) ? json_integer_value(ct) : 5000;
  if ((!it || json_is_integer(it)) && (!ct || json_is_integer(ct)) && !idle_ok(idle, confirm))
    ak_check_error(c, "%s.idle_timeout_ms: must be 0 or at least confirm_timeout_ms + 1000 (%lld)", path,
                   (long long)(confirm + 1000));
}

const ak_sink_vtable_t ak_sink_rabbitmq = {
  .plugin = {.type = "rabbitmq", .doc = "SinkMessageV1 to a RabbitMQ exchange, persistent, mandatory, confirmed",
             .options = rmq_opts, .check = rmq_check},
  .durable = true,
  .create = rmq_create,
  .deliver = rmq_deliver,
  .destroy = rmq_destroy,
  .inline_max = rmq_inline_max,
};
