/* The `redis` sink: `PUBLISH <channel> <SinkMessageV1>` on Redis pub/sub. Owns its option
 * rows and config rules, the table of connections (one per destination, shared by every
 * instance with the same url and egress guard), the one loop thread every connection of
 * the sink type runs on, and the reply -> outcome mapping: an integer reply above 0 (that
 * many subscribers got it) is ok, 0 is "no_subscribers" (transient: a retry, then the DLQ,
 * replayable), anything else is transient with a short reason. Pub/sub keeps nothing for
 * a subscriber that is not there, so the sink is not durable.
 *
 * The client is net/redis.h (one connection on one libuv loop: handshake, pipelining,
 * stall timeout, reconnect backoff). deliver() runs on the dispatcher thread and never
 * blocks: it encodes the message, counts it against its connection's in-flight bound
 * ("busy" beyond it) and pushes it on a lock-free stack the loop thread takes all at once
 * (one uv_async wake-up that libuv coalesces), as fleet/fleet.c does. Everything else --
 * the connection, its queue of deliveries waiting for the handshake, the deadlines, the
 * idle close -- belongs to the loop thread.
 *
 * A connection opens at its first delivery and closes after idle_timeout_ms without one
 * (the largest of its sharers'; 0 = never), to reopen on demand. A guarded sink (one of an
 * API-managed source, or of the config file's with egress.guard_static_sources) has the
 * client ask the egress guard about every address right before connecting to it; a
 * refusal is permanent (the guard's answer does not change by retrying).
 *
 * Never builds its own JSON (sinks/message.h), never puts the url (it may carry a password)
 * into a reason or a log line (the redacted form only), never blocks the dispatcher, never
 * touches an instance after its destroy returned: destroy answers every delivery still
 * under way "sink stopped" and waits for the loop thread to let go of the instance. */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <uv.h>
#include "core/buf.h"
#include "core/config.h"
#include "core/envelope.h"
#include "core/log.h"
#include "net/redis.h"
#include "sinks/egress.h"
#include "sinks/message.h"
#include "sinks/sink.h"

/* Deliveries of one connection not yet answered (queued, waiting, or on the wire). */
#define RS_MAX_INFLIGHT 1024
/* How often the loop looks at deadlines (while a delivery is under way) and idle
 * connections. */
#define RS_TICK_MS 50
#define RS_CONNECT_TIMEOUT_MS 2000
#define RS_BACKOFF_MIN_MS 100
#define RS_BACKOFF_MAX_MS 2000

typedef struct rs_opts {
  const char *url;
  const char *channel;
  int64_t inline_max;       /* bound for the row; the value is read by ak_sink_inline_max_opt */
  int64_t publish_timeout_ms;
  int64_t idle_timeout_ms;
} rs_opts_t;

static const ak_opt_t rs_rows[] = {
  {.key = "url", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_REQUIRED | AK_OPTF_HAS_MIN | AK_OPTF_SECRET,
   .doc = "redis://[[user]:password@]host[:port][/db] (rediss:// is not supported by this build: its hiredis has "
          "no TLS)",
   AK_AT(rs_opts_t, url)},
  {.key = "channel", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_REQUIRED | AK_OPTF_HAS_MIN,
   .doc = "the pub/sub channel every message is PUBLISHed to", AK_AT(rs_opts_t, channel)},
  AK_SINK_INLINE_MAX_ROW(rs_opts_t, inline_max),
  {.key = "publish_timeout_ms", .type = AK_OPT_INT, .def = "5000", .min = 1, .max = 3600000,
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX,
   .doc = "a delivery without PUBLISH's reply this long after deliver is answered publish_timeout",
   AK_AT(rs_opts_t, publish_timeout_ms)},
  AK_SINK_IDLE_TIMEOUT_ROW(rs_opts_t, idle_timeout_ms),
  {0},
};

/* ---- types ------------------------------------------------------------------------ */

typedef struct rs_conn rs_conn_t;
typedef struct rs_inst rs_inst_t;

enum { JOB_DELIVER = 0, JOB_DETACH };

/* One delivery (JOB_DELIVER), or an instance letting go (JOB_DETACH). Allocated by
 * deliver or destroy; the loop thread owns it once it is on the stack. A delivery on the
 * wire stays allocated until its reply (or the NULL of a lost connection) comes, even
 * after it was answered (inst NULL then): the reply finds it. */
typedef struct rs_job {
  struct rs_job *next;        /* the stack, then the connection's lists */
  struct rs_job *prev;
  int kind;
  rs_inst_t *inst;            /* NULL once answered */
  rs_conn_t *conn;
  ak_sink_done_fn done;
  void *ctx;
  char *payload;              /* freed once written to the client */
  size_t len;
  uint64_t deadline_ms;
  int where;                  /* W_NONE, W_WAITING, W_WIRE */
  bool conn_dead;             /* JOB_DETACH: the instance was its connection's last */
} rs_job_t;

enum { W_NONE = 0, W_WAITING, W_WIRE };

typedef struct rs_list {
  rs_job_t *head, *tail;
  size_t n;
} rs_list_t;

/* One destination: a url and an egress guard (NULL = trusted). The table's fields are
 * under g.life; the loop's fields belong to the loop thread. */
struct rs_conn {
  rs_conn_t *next;            /* the table (g.conns) */
  char *url_text;             /* the key, as configured */
  const ak_egress_t *egress;  /* the key's other half */
  ak_redis_url_t url;
  char addr[300];             /* redacted, for logs */
  int refs;                   /* instances using it (g.life) */
  _Atomic int inflight;       /* deliveries counted, not yet answered */
  _Atomic int64_t idle_ms;    /* the largest idle_timeout_ms of its instances; -1: one is 0 (never) */
  _Atomic int64_t stall_ms;   /* the largest publish_timeout_ms of its instances */

  /* loop thread */
  rs_conn_t *lnext, *lprev;   /* the loop's list of connections it has a client for or knew */
  bool on_loop;
  ak_redis_t *client;         /* NULL: closed (never opened, or idle) */
  ak_redis_state_t state;
  bool refused;               /* the egress guard refused an address of the last attempt */
  bool closing;               /* closing its client on purpose (idle, last user gone) */
  char refusal[128];
  rs_list_t waiting;          /* deliveries waiting for the handshake */
  rs_list_t wire;             /* PUBLISHed, reply not yet come, not yet answered */
  uint64_t last_use_ms;
};

struct rs_inst {
  rs_conn_t *conn;
  char *channel;
  size_t channel_len;
  int64_t inline_max;
  int64_t publish_timeout_ms;
  ak_egress_t *owned_egress;
  rs_job_t *detach;           /* made at create: destroy cannot fail for want of memory */
  /* under g.mu. The loop thread answers every delivery of the instance before it lets go
   * (the stack is taken in order: a delivery pushed before the detach is seen first), so
   * once detached nothing of the instance is under way. */
  bool detached;              /* the loop thread let go of it */
};

/* The sink type's shared state: one table of connections, one loop thread while any
 * instance exists. */
static struct {
  pthread_mutex_t life;       /* create/destroy: the table, the thread's start and stop */
  pthread_mutex_t mu;         /* detached of every instance */
  pthread_cond_t cv;
  rs_conn_t *conns;
  size_t ninst;
  bool running;
  pthread_t th;
  uv_loop_t loop;
  uv_async_t wake;
  uv_timer_t tick;
  bool tick_on;
  _Atomic(rs_job_t *) jobs;   /* inbound, newest first */
  _Atomic int stopping;
  rs_conn_t *lconns;          /* loop thread */
} g = {.life = PTHREAD_MUTEX_INITIALIZER, .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static uint64_t now_ms(void) { return uv_hrtime() / 1000000u; }

/* ---- lists (loop thread) ------------------------------------------------------------ */

static void list_push(rs_list_t *l, rs_job_t *j) {
  j->next = NULL;
  j->prev = l->tail;
  if (l->tail) l->tail->next = j;
  else l->head = j;
  l->tail = j;
  l->n++;
}

static void list_unlink(rs_list_t *l, rs_job_t *j) {
  if (j->prev) j->prev->next = j->next;
  else l->head = j->next;
  if (j->next) j->next->prev = j->prev;
  else l->tail = j->prev;
  j->next = j->prev = NULL;
  l->n--;
}

/* ---- answers ---------------------------------------------------------------------- */

/* The one way a pushed delivery is answered: exactly once, on the loop thread (deliver
 * answers what it never pushed itself). */
static void answer(rs_job_t *j, ak_sink_result_t res, const char *reason) {
  if (!j->inst) return;
  j->inst = NULL;
  ak_sink_outcome_t o = {.result = res};
  size_t n = strlen(reason);
  if (n >= sizeof o.reason) n = sizeof o.reason - 1;
  memcpy(o.reason, reason, n);
  o.reason[n] = '\0';
  atomic_fetch_sub(&j->conn->inflight, 1);
  j->done(j->ctx, &o);
}

static void job_free(rs_job_t *j) {
  free(j->payload);
  free(j);
}

/* ---- the loop thread -------------------------------------------------------------- */

static void tick_cb(uv_timer_t *t);

static void tick_arm(void) {
  if (g.tick_on) return;
  g.tick_on = true;
  uv_timer_start(&g.tick, tick_cb, RS_TICK_MS, RS_TICK_MS);
}

/* A redis error reply's first word ("ERR", "NOAUTH", "READONLY"): an error code, never an
 * echo of an argument. */
static void error_reason(const redisReply *r, char *out, size_t cap) {
  char word[40];
  size_t n = 0;
  for (size_t i = 0; r->str && i < r->len && n + 1 < sizeof word; i++) {
    char c = r->str[i];
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) break;
    word[n++] = c;
  }
  word[n] = '\0';
  if (n) snprintf(out, cap, "redis_error: %s", word);
  else snprintf(out, cap, "redis_error");
}

static void on_reply(void *priv, redisReply *reply) {
  rs_job_t *j = priv;
  if (j->where == W_WIRE) {
    list_unlink(&j->conn->wire, j);
    j->where = W_NONE;
  }
  if (j->inst) {
    if (!reply) {
      answer(j, AK_SINK_RETRY, "connection_lost");
    } else if (reply->type == REDIS_REPLY_INTEGER) {
      if (reply->integer > 0) answer(j, AK_SINK_OK, "");
      else answer(j, AK_SINK_RETRY, "no_subscribers");
    } else if (reply->type == REDIS_REPLY_ERROR) {
      char why[64];
      error_reason(reply, why, sizeof why);
      answer(j, AK_SINK_RETRY, why);
    } else {
      answer(j, AK_SINK_RETRY, "bad_reply");
    }
  }
  job_free(j);
}

/* Writes a delivery to an UP connection. */
static void publish(rs_conn_t *c, rs_job_t *j) {
  const char *argv[3] = {"PUBLISH", j->inst->channel, j->payload};
  size_t lens[3] = {7, j->inst->channel_len, j->len};
  if (ak_redis_command(c->client, 3, argv, lens, on_reply, j) != 0) {
    answer(j, AK_SINK_RETRY, "not_connected");
    job_free(j);
    return;
  }
  free(j->payload); /* the client copied it */
  j->payload = NULL;
  j->where = W_WIRE;
  list_push(&c->wire, j);
}

static void fail_waiting(rs_conn_t *c) {
  while (c->waiting.head) {
    rs_job_t *j = c->waiting.head;
    list_unlink(&c->waiting, j);
    j->where = W_NONE;
    if (c->refused) answer(j, AK_SINK_PERMANENT, c->refusal);
    else answer(j, AK_SINK_RETRY, "not_connected");
    job_free(j);
  }
}

static void on_state(void *ctx, ak_redis_state_t st, const char *why) {
  rs_conn_t *c = ctx;
  ak_redis_state_t was = c->state;
  c->state = st;
  if (st == AK_REDIS_CONNECTING) {
    c->refused = false;
    return;
  }
  if (st == AK_REDIS_UP) {
    if (was != AK_REDIS_UP) ak_log(AK_LOG_INFO, "sink.redis", "connected", "redis=\"%s\"", c->addr);
    while (c->waiting.head) {
      rs_job_t *j = c->waiting.head;
      list_unlink(&c->waiting, j);
      j->where = W_NONE;
      publish(c, j);
    }
    if (c->client) ak_redis_flush(c->client);
    return;
  }
  /* DOWN: what waited for the handshake is answered; what was on the wire gets its NULL
   * reply from the client */
  if (c->closing) {
    /* closed on purpose: nothing to say */
  } else if (c->refused) {
    ak_log(AK_LOG_WARNING, "sink.redis", "the egress guard refused the address", "redis=\"%s\" reason=\"%s\"", c->addr,
           c->refusal);
  } else if (was == AK_REDIS_UP) {
    ak_log(AK_LOG_WARNING, "sink.redis", "connection lost", "redis=\"%s\" reason=\"%s\"", c->addr,
           why ? why : "?");
  } else if (was == AK_REDIS_CONNECTING && c->waiting.n) {
    ak_log(AK_LOG_WARNING, "sink.redis", "cannot connect", "redis=\"%s\" reason=\"%s\"", c->addr, why ? why : "?");
  }
  fail_waiting(c);
}

static bool addr_ok(void *ctx, const struct sockaddr *sa, char *why, size_t whylen) {
  rs_conn_t *c = ctx;
  if (ak_egress_addr_allowed(c->egress, sa)) return true;
  ak_egress_refusal(sa, c->refusal, sizeof c->refusal);
  c->refused = true;
  snprintf(why, whylen, "%s", c->refusal);
  return false;
}

static void conn_close_client(rs_conn_t *c) {
  if (!c->client) return;
  ak_redis_t *r = c->client;
  c->closing = true;
  ak_redis_free(r); /* every PUBLISH on the wire gets its NULL reply from inside */
  c->closing = false;
  c->client = NULL;
  c->state = AK_REDIS_DOWN;
  c->refused = false;
}

static int conn_open(rs_conn_t *c) {
  int64_t stall = atomic_load(&c->stall_ms);
  ak_redis_opts_t ro = {
    .url = &c->url,
    .connect_timeout_ms = RS_CONNECT_TIMEOUT_MS,
    .stall_timeout_ms = stall > 0 ? stall : 5000,
    .backoff_min_ms = RS_BACKOFF_MIN_MS,
    .backoff_max_ms = RS_BACKOFF_MAX_MS,
    .on_state = on_state,
    .ctx = c,
    .addr_ok = c->egress ? addr_ok : NULL,
  };
  c->client = ak_redis_new(&g.loop, &ro);
  if (!c->client) return -1;
  c->state = AK_REDIS_DOWN;
  c->refused = false;
  if (!c->on_loop) {
    c->on_loop = true;
    c->lprev = NULL;
    c->lnext = g.lconns;
    if (g.lconns) g.lconns->lprev = c;
    g.lconns = c;
  }
  ak_redis_start(c->client);
  return 0;
}

static void take_delivery(rs_job_t *j) {
  rs_conn_t *c = j->conn;
  c->last_use_ms = now_ms();
  if (!c->client && conn_open(c) != 0) {
    answer(j, AK_SINK_RETRY, "out of memory");
    job_free(j);
    return;
  }
  if (c->state == AK_REDIS_UP) {
    publish(c, j);
  } else if (c->state == AK_REDIS_CONNECTING) {
    j->where = W_WAITING;
    list_push(&c->waiting, j);
  } else if (c->refused) {
    answer(j, AK_SINK_PERMANENT, c->refusal);
    job_free(j);
  } else {
    answer(j, AK_SINK_RETRY, "not_connected"); /* in the backoff after a failed connect */
    job_free(j);
  }
  tick_arm();
}

/* An instance lets go: its deliveries still under way are answered, the loop forgets it,
 * and its connection goes with it when it was the last user. */
static void take_detach(rs_job_t *d) {
  rs_conn_t *c = d->conn;
  rs_inst_t *in = d->inst;
  for (rs_job_t *j = c->waiting.head, *n; j; j = n) {
    n = j->next;
    if (j->inst != in) continue;
    list_unlink(&c->waiting, j);
    j->where = W_NONE;
    answer(j, AK_SINK_RETRY, "sink stopped");
    job_free(j);
  }
  for (rs_job_t *j = c->wire.head, *n; j; j = n) {
    n = j->next;
    if (j->inst != in) continue;
    list_unlink(&c->wire, j);
    j->where = W_NONE;
    answer(j, AK_SINK_RETRY, "sink stopped"); /* the job stays for its reply */
  }
  if (d->conn_dead) {
    conn_close_client(c);
    if (c->on_loop) {
      if (c->lprev) c->lprev->lnext = c->lnext;
      else g.lconns = c->lnext;
      if (c->lnext) c->lnext->lprev = c->lprev;
    }
    memset(c->url.password, 0, sizeof c->url.password);
    if (c->url_text) memset(c->url_text, 0, strlen(c->url_text));
    free(c->url_text);
    free(c);
  }
  pthread_mutex_lock(&g.mu);
  in->detached = true;
  pthread_cond_broadcast(&g.cv);
  pthread_mutex_unlock(&g.mu);
  free(d);
}

static void take_jobs(void) {
  rs_job_t *j = atomic_exchange(&g.jobs, NULL), *fifo = NULL;
  while (j) { /* newest first: reverse into submission order */
    rs_job_t *n = j->next;
    j->next = fifo;
    fifo = j;
    j = n;
  }
  /* the client writes what was queued in one go before the loop polls again */
  for (j = fifo; j;) {
    rs_job_t *n = j->next;
    j->next = NULL;
    if (j->kind == JOB_DETACH) take_detach(j);
    else take_delivery(j);
    j = n;
  }
}

/* Deadlines and idle connections. Runs while any connection has a client. */
static void tick_cb(uv_timer_t *t) {
  (void)t;
  uint64_t now = now_ms();
  bool any = false;
  for (rs_conn_t *c = g.lconns; c; c = c->lnext) {
    for (rs_job_t *j = c->waiting.head, *n; j; j = n) {
      n = j->next;
      if (j->deadline_ms > now) continue;
      list_unlink(&c->waiting, j);
      j->where = W_NONE;
      answer(j, AK_SINK_RETRY, "not_connected");
      job_free(j);
    }
    for (rs_job_t *j = c->wire.head, *n; j; j = n) {
      n = j->next;
      if (j->deadline_ms > now) continue;
      list_unlink(&c->wire, j);
      j->where = W_NONE;
      answer(j, AK_SINK_RETRY, "publish_timeout"); /* the job stays for its reply */
    }
    if (!c->client) continue;
    if (c->state == AK_REDIS_DOWN && c->refused) {
      /* the guard's answer will not change by reconnecting: the next delivery opens anew
       * (and resolves the name again) */
      conn_close_client(c);
      continue;
    }
    int64_t idle = atomic_load(&c->idle_ms);
    if (idle > 0 && c->waiting.n == 0 && c->wire.n == 0 && ak_redis_pending(c->client) == 0 &&
        now - c->last_use_ms >= (uint64_t)idle) {
      ak_log(AK_LOG_DEBUG, "sink.redis", "idle connection closed", "redis=\"%s\"", c->addr);
      conn_close_client(c);
      continue;
    }
    any = true;
  }
  if (!any) {
    uv_timer_stop(&g.tick);
    g.tick_on = false;
  }
}

static void on_wake(uv_async_t *a) {
  (void)a;
  take_jobs();
  if (atomic_load(&g.stopping)) uv_stop(&g.loop);
}

static void close_walk(uv_handle_t *h, void *arg) {
  (void)arg;
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

static void *loop_main(void *arg) {
  (void)arg;
  pthread_setname_np(pthread_self(), "ak-redis-sink");
  uv_run(&g.loop, UV_RUN_DEFAULT);
  take_jobs();
  /* every instance was destroyed, so every connection was let go of; a client still open
   * is closed here all the same */
  while (g.lconns) {
    rs_conn_t *c = g.lconns;
    g.lconns = c->lnext;
    conn_close_client(c);
    c->on_loop = false;
  }
  uv_walk(&g.loop, close_walk, NULL);
  uv_run(&g.loop, UV_RUN_DEFAULT);
  return NULL;
}

/* g.life held. */
static int thread_start(char *err, size_t errlen) {
  if (g.running) return 0;
  if (uv_loop_init(&g.loop) != 0) {
    snprintf(err, errlen, "redis sink: cannot make its event loop");
    return -1;
  }
  uv_async_init(&g.loop, &g.wake, on_wake);
  uv_timer_init(&g.loop, &g.tick);
  g.tick_on = false;
  g.lconns = NULL;
  atomic_store(&g.stopping, 0);
  if (pthread_create(&g.th, NULL, loop_main, NULL) != 0) {
    uv_close((uv_handle_t *)&g.wake, NULL);
    uv_close((uv_handle_t *)&g.tick, NULL);
    uv_run(&g.loop, UV_RUN_DEFAULT);
    uv_loop_close(&g.loop);
    snprintf(err, errlen, "redis sink: cannot start its thread");
    return -1;
  }
  g.running = true;
  return 0;
}

/* g.life held; no instance left. */
static void thread_stop(void) {
  if (!g.running) return;
  atomic_store(&g.stopping, 1);
  uv_async_send(&g.wake);
  pthread_join(g.th, NULL);
  uv_loop_close(&g.loop);
  g.running = false;
}

/* ---- the sink --------------------------------------------------------------------- */

static void rs_deliver(void *self, const ak_sink_attempt_t *att, void *ctx, ak_sink_done_fn done) {
  rs_inst_t *in = self;
  rs_conn_t *c = in->conn;
  ak_sink_outcome_t out = {.result = AK_SINK_RETRY};
  bool by_claim = ak_sink_by_claim(att, in->inline_max);
  if (by_claim && !att->claim_ref) {
    snprintf(out.reason, sizeof out.reason, "claim_missing");
    done(ctx, &out);
    return;
  }
  if (atomic_fetch_add(&c->inflight, 1) >= RS_MAX_INFLIGHT) {
    atomic_fetch_sub(&c->inflight, 1);
    snprintf(out.reason, sizeof out.reason, "busy");
    done(ctx, &out);
    return;
  }
  rs_job_t *j = calloc(1, sizeof *j);
  ak_buf_t b = AK_BUF_INIT;
  /* one allocation for the lot: base64 of the body (or the ref), the headers, the rest */
  size_t guess = (by_claim ? 256 : (att->env->body_len + 2) / 3 * 4) + 768;
  for (size_t i = 0; i < att->env->nheaders; i++)
    guess += att->env->headers[i].name_len + att->env->headers[i].value_len + 8;
  if (!j || ak_buf_reserve(&b, guess) != 0 || ak_sink_message_encode(att, by_claim, &b) != 0 ||
      !(j->payload = ak_buf_take(&b, &j->len))) {
    ak_buf_free(&b);
    free(j);
    atomic_fetch_sub(&c->inflight, 1);
    snprintf(out.reason, sizeof out.reason, "out of memory");
    done(ctx, &out);
    return;
  }
  j->kind = JOB_DELIVER;
  j->inst = in;
  j->conn = c;
  j->done = done;
  j->ctx = ctx;
  j->deadline_ms = now_ms() + (uint64_t)in->publish_timeout_ms;
  rs_job_t *head = atomic_load(&g.jobs);
  do j->next = head;
  while (!atomic_compare_exchange_weak(&g.jobs, &head, j));
  /* a stack that was not empty has its wake-up on the way: the loop takes all of it */
  if (!head) uv_async_send(&g.wake);
}

/* g.life held: the connections' shared settings from their instances. */
static void conn_settle(rs_conn_t *c, int64_t idle_ms, int64_t stall_ms) {
  int64_t cur = atomic_load(&c->idle_ms);
  if (c->refs == 1) cur = idle_ms == 0 ? -1 : idle_ms;
  else if (cur != -1) cur = idle_ms == 0 ? -1 : (idle_ms > cur ? idle_ms : cur);
  atomic_store(&c->idle_ms, cur);
  int64_t st = atomic_load(&c->stall_ms);
  if (c->refs == 1 || stall_ms > st) atomic_store(&c->stall_ms, stall_ms);
}

static void rs_free_inst(rs_inst_t *in) {
  if (!in) return;
  ak_egress_free(in->owned_egress);
  free(in->detach);
  free(in->channel);
  free(in);
}

static void rs_destroy(void *self) {
  rs_inst_t *in = self;
  if (!in) return;
  pthread_mutex_lock(&g.life);
  rs_conn_t *c = in->conn;
  bool dead = false;
  if (c && --c->refs == 0) {
    for (rs_conn_t **pp = &g.conns; *pp; pp = &(*pp)->next)
      if (*pp == c) {
        *pp = c->next;
        break;
      }
    dead = true;
  }
  rs_job_t *d = in->detach;
  if (c && d) {
    in->detach = NULL; /* the loop thread frees it */
    d->kind = JOB_DETACH;
    d->inst = in;
    d->conn = c;
    d->conn_dead = dead;
    rs_job_t *head = atomic_load(&g.jobs);
    do d->next = head;
    while (!atomic_compare_exchange_weak(&g.jobs, &head, d));
    uv_async_send(&g.wake);
    pthread_mutex_lock(&g.mu);
    while (!in->detached) pthread_cond_wait(&g.cv, &g.mu);
    pthread_mutex_unlock(&g.mu);
  }
  if (c) {
    g.ninst--;
    if (g.ninst == 0) thread_stop();
  }
  pthread_mutex_unlock(&g.life);
  rs_free_inst(in);
}

static void *rs_create(const json_t *opts, const ak_sink_ctx_t *sctx, char *err, size_t errlen) {
  rs_inst_t *in = calloc(1, sizeof *in);
  if (!in) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  rs_opts_t o = {0};
  json_t *checked = NULL;
  if (ak_opt_bind_checked(rs_rows, opts, &o, &checked, err, errlen) != 0) {
    free(in);
    return NULL;
  }
  ak_redis_url_t u;
  char why[160];
  int rc = -1;
  if (ak_redis_url_parse(o.url, &u, why, sizeof why) != 0) {
    snprintf(err, errlen, "url: %s", why);
    goto out;
  }
  if (o.idle_timeout_ms != 0 && o.idle_timeout_ms < o.publish_timeout_ms + 1000) {
    snprintf(err, errlen, "idle_timeout_ms: must be 0 or at least publish_timeout_ms + 1000");
    goto out;
  }
  in->inline_max = ak_sink_inline_max_opt(checked);
  in->publish_timeout_ms = o.publish_timeout_ms;
  in->channel_len = strlen(o.channel);
  if (!(in->channel = strdup(o.channel)) || !(in->detach = calloc(1, sizeof *in->detach))) goto oom;
  const ak_egress_t *egress = sctx ? sctx->egress : NULL;
  if (sctx && sctx->trusted) {
    egress = NULL;
  } else if (!egress) {
    in->owned_egress = ak_egress_new(NULL, 0, false, err, errlen);
    if (!in->owned_egress) goto out;
    egress = in->owned_egress;
  }

  pthread_mutex_lock(&g.life);
  if (thread_start(err, errlen) != 0) {
    pthread_mutex_unlock(&g.life);
    goto out;
  }
  /* An instance with its own guard (made by hand) never shares: the guard is part of the
   * key, compared by address. */
  rs_conn_t *c = NULL;
  for (rs_conn_t *k = g.conns; k; k = k->next)
    if (k->egress == egress && strcmp(k->url_text, o.url) == 0) {
      c = k;
      break;
    }
  if (!c) {
    c = calloc(1, sizeof *c);
    if (c) c->url_text = strdup(o.url);
    if (!c || !c->url_text) {
      free(c);
      if (g.ninst == 0) thread_stop();
      pthread_mutex_unlock(&g.life);
      goto oom;
    }
    c->egress = egress;
    c->url = u;
    ak_redis_url_redacted(&u, c->addr, sizeof c->addr);
    c->next = g.conns;
    g.conns = c;
  }
  c->refs++;
  conn_settle(c, o.idle_timeout_ms, o.publish_timeout_ms);
  in->conn = c;
  g.ninst++;
  pthread_mutex_unlock(&g.life);
  rc = 0;
  goto out;
oom:
  snprintf(err, errlen, "out of memory");
out:
  memset(u.password, 0, sizeof u.password);
  ak_opt_release(rs_rows, &o);
  json_decref(checked);
  if (rc != 0) {
    rs_free_inst(in);
    return NULL;
  }
  return in;
}

static int64_t rs_inline_max(const void *self) { return ((const rs_inst_t *)self)->inline_max; }

/* ---- config rules (check-config reports them; create would refuse the same) ----------- */

static void rs_check(ak_check_t *c, const char *path, json_t *sink, const json_t *root) {
  const char *url = json_string_value(json_object_get(sink, "url"));
  if (url) {
    ak_redis_url_t u;
    char why[160];
    if (ak_redis_url_parse(url, &u, why, sizeof why) != 0) {
      ak_check_error(c, "%s.url: %s", path, why);
    } else if (ak_egress_tree_guards(root)) {
      /* a guarded sink whose host is an address the guard refuses never delivers: say so
       * now (a name is judged at connect time, where the address is known) */
      ak_egress_t *eg = ak_egress_from_tree(root);
      struct sockaddr_in6 sa6 = {.sin6_family = AF_INET6};
      struct sockaddr_in sa4 = {.sin_family = AF_INET};
      const struct sockaddr *sa = NULL;
      if (inet_pton(AF_INET, u.host, &sa4.sin_addr) == 1) sa = (const struct sockaddr *)&sa4;
      else if (inet_pton(AF_INET6, u.host, &sa6.sin6_addr) == 1) sa = (const struct sockaddr *)&sa6;
      if (eg && sa && !ak_egress_addr_allowed(eg, sa)) {
        ak_egress_refusal(sa, why, sizeof why);
        ak_check_error(c, "%s.url: %s (egress.allow_cidrs can allow it)", path, why);
      }
      ak_egress_free(eg);
    }
    memset(u.password, 0, sizeof u.password);
  }
  const json_t *pt = json_object_get(sink, "publish_timeout_ms");
  const json_t *it = json_object_get(sink, "idle_timeout_ms");
  json_int_t p = json_is_integer(pt) ? json_integer_value(pt) : 5000;
  if (json_is_integer(it) && json_integer_value(it) != 0 && json_integer_value(it) < p + 1000)
    ak_check_error(c, "%s.idle_timeout_ms: must be 0 or at least publish_timeout_ms + 1000 (%" PRId64 ")", path,
                   (int64_t)(p + 1000));
}

const ak_sink_vtable_t ak_sink_redis = {
  .plugin = {.type = "redis", .doc = "PUBLISH of the SinkMessageV1 to a Redis pub/sub channel (not durable)",
             .options = rs_rows, .check = rs_check},
  .durable = false,
  .create = rs_create,
  .deliver = rs_deliver,
  .destroy = rs_destroy,
  .inline_max = rs_inline_max,
};
