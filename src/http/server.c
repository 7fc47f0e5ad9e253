/* The server layer's sockets and threads (http/server.h): libuv loops, one listening
 * socket polled by loop 0, which accepts and hands connections round-robin to the loops
 * (a locked inbox and a uv_async each), the connection cap (the oldest idle keep-alive
 * connection goes first, else a canned 503) and the per-address cap, RLIMIT_NOFILE, the
 * per-loop sweep timer that drives every timeout (no timer per request), the cached Date,
 * writes (uv_try_write first, uv_write for the rest), lingering close, TLS through
 * http/tls.h, resumes from any thread, the listener's close (its backlog served first)
 * and the stop.
 *
 * Never parses or frames a byte and never calls the handler itself: the engine
 * (http/proto.c) does; this file moves bytes between it and the socket and tells it what
 * happened. Never closes a socket with unread bytes it could still read (that makes the
 * kernel reset the connection and can destroy the answer), except on a hard stop, and
 * never frees a connection whose request is suspended. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>
#include "core/list.h"
#include "core/log.h"
#include "http/proto.h"
#include "http/server.h"
#include "http/tls.h"

#define SCRATCH (64u * 1024u)          /* a loop's buffer for ciphertext and discarded bytes */
#define LINGER_MS 2000u                /* how long a closing connection's input is drained */
#define LINGER_BYTES (1024u * 1024u)   /* and how much of it, at most */
#define ACCEPT_BATCH 128               /* accepts per readable event */
#define PC_BUCKETS 1024u
#define TLS_PENDING_MAX (256u * 1024u) /* ciphertext a TLS connection may hold undecrypted */

typedef struct loop loop_t;
typedef struct conn conn_t;
typedef struct ak_hserver srv_t;

/* A socket accepted by loop 0 for another loop. */
typedef struct handoff {
  int fd;
  struct sockaddr_storage peer;
  socklen_t plen;
  bool evict;   /* over the cap: close this loop's oldest idle connection for it, or refuse */
  bool refuse;  /* answer 503 and close (per-address cap) */
  bool counted; /* holds a slot of the connection count */
  bool pc;      /* holds a slot of its address's count */
} handoff_t;

struct loop {
  srv_t *s;
  unsigned idx;
  uv_loop_t uv;
  uv_async_t async;
  uv_timer_t sweep;
  pthread_t th;
  bool th_started;
  ak_hclock_t clk;
  time_t date_sec;
  /* the inbox, under mu: from loop 0 and from any thread that resumes */
  pthread_mutex_t mu;
  handoff_t *inbox;
  size_t ninbox, capinbox;
  ak_list_t resumes;
  bool drain_req, stop_req, close_listener_req;
  /* the loop thread's own */
  ak_list_t conns, idle;
  size_t nconns;
  atomic_uint nidle;
  /* idle_since of the head of idle (UINT64_MAX when none): loop 0 reads it to find the
   * oldest idle connection of the whole listener when the cap is reached */
  _Atomic uint64_t oldest_idle;
  bool draining, stopping, finished;
  uint8_t *scratch;
};

struct conn {
  ak_hconn_t h; /* first: the engine's ops get it back by a cast */
  loop_t *L;
  uv_tcp_t tcp;
  uv_write_t wr;
  uv_shutdown_t sd;
  ak_list_t node, idle_node, resume_node;
  struct sockaddr_storage peer;
  socklen_t plen;
  ak_htls_t *tls;
  uint8_t *wbuf; /* what uv_write is sending (the part uv_try_write could not) */
  size_t wcap;
  uint64_t write_since, linger_until;
  uint64_t idle_since; /* loop clock (ms) when it went idle */
  size_t linger_left;
  bool writing, reading, read_done, closing, lingering, shut_sent, shut_done, counted, pc;
};

typedef struct pc_entry {
  struct pc_entry *next;
  uint8_t key[17];
  unsigned n;
} pc_entry_t;

struct ak_hserver {
  ak_hproto_t proto;
  char *name, *ip;
  int port;
  unsigned nloops;
  loop_t **loops;
  int lfd;
  uv_poll_t lpoll;
  uv_timer_t accept_retry;
  bool lpoll_open, listener_closed, retry_init;
  unsigned rr;
  atomic_uint nconns;
  unsigned max_conns;
  uint64_t sweep_ms;
  pthread_mutex_t tls_mu;
  ak_htls_ctx_t *tls;
  pthread_mutex_t pc_mu;
  pc_entry_t **pc;
  atomic_bool close_requested;
  atomic_bool lclosed; /* loop 0 closed the listening socket: no handoff will come any more */
  bool started, stopped;
};

static void service(conn_t *c);
static void close_now(conn_t *c);
static void maybe_finish(loop_t *L);
static void on_accept_retry(uv_timer_t *t);

/* ---- small helpers -------------------------------------------------------------------- */

static char *xstrdup(const char *s) { return s ? strdup(s) : NULL; }

static void seterr(char **err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void seterr(char **err, const char *fmt, ...) {
  if (!err) return;
  va_list ap;
  va_start(ap, fmt);
  char *m = NULL;
  if (vasprintf(&m, fmt, ap) < 0) m = NULL;
  va_end(ap);
  *err = m;
}

static void update_date(loop_t *L) {
  static const char days[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static const char mons[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                   "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  time_t t = time(NULL);
  if (t == L->date_sec) return;
  L->date_sec = t;
  struct tm tm;
  gmtime_r(&t, &tm);
  snprintf(L->clk.date, sizeof L->clk.date, "%s, %02d %s %04d %02d:%02d:%02d GMT", days[tm.tm_wday % 7], tm.tm_mday,
           mons[tm.tm_mon % 12], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

static void clock_tick(loop_t *L) {
  uv_update_time(&L->uv);
  L->clk.now_ms = uv_now(&L->uv);
}

/* ---- the per-address count ------------------------------------------------------------ */

static size_t pc_key(const struct sockaddr_storage *ss, uint8_t key[17]) {
  memset(key, 0, 17);
  if (ss->ss_family == AF_INET6) {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
    /* an IPv4 client on a dual-stack socket counts as its IPv4 address */
    if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) {
      key[0] = 4;
      memcpy(key + 1, a->sin6_addr.s6_addr + 12, 4);
    } else {
      key[0] = 6;
      memcpy(key + 1, a->sin6_addr.s6_addr, 16);
    }
  } else {
    key[0] = 4;
    memcpy(key + 1, &((const struct sockaddr_in *)ss)->sin_addr, 4);
  }
  uint32_t h = 2166136261u;
  for (int i = 0; i < 17; i++) h = (h ^ key[i]) * 16777619u;
  return h % PC_BUCKETS;
}

/* Takes a slot for the address; false when it holds max_per_client already. */
static bool pc_take(srv_t *s, const struct sockaddr_storage *ss) {
  uint8_t key[17];
  size_t b = pc_key(ss, key);
  bool ok = true;
  pthread_mutex_lock(&s->pc_mu);
  pc_entry_t *e = s->pc[b];
  while (e && memcmp(e->key, key, 17) != 0) e = e->next;
  if (!e) {
    e = calloc(1, sizeof *e);
    if (e) {
      memcpy(e->key, key, 17);
      e->next = s->pc[b];
      s->pc[b] = e;
    }
  }
  if (!e || e->n >= s->proto.lim.max_per_client) ok = false;
  else e->n++;
  pthread_mutex_unlock(&s->pc_mu);
  return ok;
}

static void pc_give(srv_t *s, const struct sockaddr_storage *ss) {
  uint8_t key[17];
  size_t b = pc_key(ss, key);
  pthread_mutex_lock(&s->pc_mu);
  for (pc_entry_t **pp = &s->pc[b]; *pp; pp = &(*pp)->next) {
    pc_entry_t *e = *pp;
    if (memcmp(e->key, key, 17) != 0) continue;
    if (e->n) e->n--;
    if (!e->n) {
      *pp = e->next;
      free(e);
    }
    break;
  }
  pthread_mutex_unlock(&s->pc_mu);
}

/* ---- writing -------------------------------------------------------------------------- */

static void on_write(uv_write_t *wr, int status);

/* Sends p: uv_try_write, then uv_write of a copy of what is left. false on an error. */
static bool send_bytes(conn_t *c, const uint8_t *p, size_t n, size_t *taken) {
  *taken = 0;
  uv_buf_t b = uv_buf_init((char *)(uintptr_t)p, (unsigned)n);
  int r = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
  if (r == UV_EAGAIN || r == UV_ENOSYS) r = 0;
  if (r < 0) return false;
  *taken = (size_t)r;
  if ((size_t)r == n) return true;
  size_t rest = n - (size_t)r;
  if (rest > c->wcap) {
    uint8_t *w = realloc(c->wbuf, rest);
    if (!w) return false;
    c->wbuf = w;
    c->wcap = rest;
  }
  memcpy(c->wbuf, p + r, rest);
  b = uv_buf_init((char *)c->wbuf, (unsigned)rest);
  if (uv_write(&c->wr, (uv_stream_t *)&c->tcp, &b, 1, on_write) < 0) return false;
  *taken = n;
  c->writing = true;
  c->write_since = c->L->clk.now_ms;
  return true;
}

/* Hands what the engine has to send (through TLS when there is one) to the socket.
 * false when the socket failed (the engine is told). */
static bool flush(conn_t *c) {
  if (c->writing || c->closing) return true;
  size_t n, taken;
  const uint8_t *p = ak_hconn_out(&c->h, &n);
  if (!c->tls) {
    if (!n) return true;
    if (!send_bytes(c, p, n, &taken)) {
      ak_hconn_abort(&c->h);
      return false;
    }
    ak_hconn_out_done(&c->h, taken);
    return true;
  }
  if (n) {
    if (ak_htls_write(c->tls, p, n) == AK_HTLS_ERROR) {
      ak_hconn_abort(&c->h);
      return false;
    }
    ak_hconn_out_done(&c->h, n);
  }
  for (;;) {
    size_t m = 0;
    const uint8_t *q = ak_htls_peek_out(c->tls, &m);
    if (!m) return true;
    if (!send_bytes(c, q, m, &taken)) {
      ak_hconn_abort(&c->h);
      return false;
    }
    ak_htls_consume_out(c->tls, taken);
    if (c->writing) return true;
  }
}

static void on_write(uv_write_t *wr, int status) {
  conn_t *c = wr->data;
  c->writing = false;
  if (c->closing) return;
  clock_tick(c->L);
  if (status < 0) {
    if (c->lingering) {
      close_now(c);
      return;
    }
    ak_hconn_abort(&c->h);
  }
  service(c);
}

/* ---- closing -------------------------------------------------------------------------- */

static void idle_publish(loop_t *L) {
  ak_list_t *n = ak_list_first(&L->idle);
  atomic_store_explicit(&L->oldest_idle, n ? ak_list_entry(n, conn_t, idle_node)->idle_since : UINT64_MAX,
                        memory_order_relaxed);
}

static void idle_unlink(conn_t *c) {
  if (!ak_list_linked(&c->idle_node)) return;
  ak_list_remove(&c->idle_node);
  atomic_fetch_sub(&c->L->nidle, 1);
  idle_publish(c->L);
}

static void on_closed(uv_handle_t *h) {
  conn_t *c = h->data;
  loop_t *L = c->L;
  srv_t *s = L->s;
  ak_hconn_abort(&c->h); /* a request still in flight ends (not a suspended one: never closed) */
  ak_hconn_free(&c->h);
  if (c->tls) ak_htls_free(c->tls);
  if (c->pc) pc_give(s, &c->peer);
  if (c->counted) atomic_fetch_sub(&s->nconns, 1);
  ak_list_remove(&c->node);
  L->nconns--;
  free(c->wbuf);
  free(c);
  maybe_finish(L);
}

static void close_now(conn_t *c) {
  if (c->closing) return;
  c->closing = true;
  idle_unlink(c);
  uv_close((uv_handle_t *)&c->tcp, on_closed);
}

static void on_shutdown(uv_shutdown_t *sd, int status) {
  conn_t *c = sd->data;
  c->shut_done = true;
  if (c->closing) return;
  if (status < 0 || c->read_done) close_now(c);
}

/* The last answer is on its way: send FIN after it, then read and drop what the client
 * still sends until it closes too (or LINGER_MS / LINGER_BYTES), so the kernel never
 * answers unread bytes with a reset that could destroy the answer. */
static void start_linger(conn_t *c) {
  if (c->lingering || c->closing) return;
  if (c->L->stopping) {
    close_now(c);
    return;
  }
  c->lingering = true;
  idle_unlink(c);
  c->linger_until = c->L->clk.now_ms + LINGER_MS;
  c->linger_left = LINGER_BYTES;
  if (c->tls) {
    ak_htls_shutdown(c->tls);
    flush(c);
  }
  c->sd.data = c;
  if (uv_shutdown(&c->sd, (uv_stream_t *)&c->tcp, on_shutdown) < 0) {
    close_now(c);
    return;
  }
  c->shut_sent = true;
  if (!c->reading && !c->read_done) service(c);
}

/* ---- reading -------------------------------------------------------------------------- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  conn_t *c = h->data;
  if (c->lingering || c->tls) {
    *buf = uv_buf_init((char *)c->L->scratch, SCRATCH);
    return;
  }
  size_t cap = 0;
  uint8_t *p = ak_hconn_rbuf(&c->h, &cap);
  *buf = uv_buf_init((char *)p, (unsigned)(cap > UINT32_MAX ? UINT32_MAX : cap));
}

/* Plaintext out of the TLS session into the engine, while it takes input. */
static void tls_pull(conn_t *c) {
  while (!c->closing && !c->lingering) {
    size_t cap = 0, got = 0;
    uint8_t *p = ak_hconn_rbuf(&c->h, &cap);
    if (!p) return;
    ak_htls_status_t st = ak_htls_read(c->tls, p, cap, &got);
    if (got) ak_hconn_input(&c->h, got);
    if (st == AK_HTLS_CLOSED) {
      ak_hconn_eof(&c->h);
      return;
    }
    if (st == AK_HTLS_ERROR) {
      ak_hconn_abort(&c->h);
      return;
    }
    if (!got) return;
  }
}

static void stop_reading(conn_t *c) {
  if (!c->reading) return;
  uv_read_stop((uv_stream_t *)&c->tcp);
  c->reading = false;
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  conn_t *c = st->data;
  if (c->closing) return;
  clock_tick(c->L);
  if (nread == 0) return;
  if (nread == UV_ENOBUFS) {
    stop_reading(c);
    service(c);
    return;
  }
  if (nread < 0) {
    c->read_done = true;
    stop_reading(c);
    if (c->lingering) {
      if (c->shut_done || !c->shut_sent) close_now(c);
      return;
    }
    if (nread == UV_EOF) ak_hconn_eof(&c->h);
    else ak_hconn_abort(&c->h);
    service(c);
    return;
  }
  if (c->lingering) {
    if ((size_t)nread >= c->linger_left) close_now(c);
    else c->linger_left -= (size_t)nread;
    return;
  }
  if (!c->tls) {
    ak_hconn_input(&c->h, (size_t)nread);
  } else {
    ak_htls_status_t ts = ak_htls_feed(c->tls, (const uint8_t *)buf->base, (size_t)nread);
    if (ts == AK_HTLS_ERROR) {
      flush(c); /* the alert, best effort */
      ak_hconn_abort(&c->h);
    } else {
      tls_pull(c);
      if (ts == AK_HTLS_CLOSED) ak_hconn_eof(&c->h);
    }
  }
  service(c);
}

/* ---- the engine's driver -------------------------------------------------------------- */

static bool wants_input(conn_t *c) {
  if (c->read_done || c->closing) return false;
  if (c->lingering) return true;
  ak_hc_state_t st = ak_hconn_state(&c->h);
  if (st >= AK_HC_CLOSING || c->h.peer_eof) return false;
  /* ciphertext may carry a handshake or an alert, so a TLS connection reads while its
   * plaintext waits in the session, up to a bound (as the plain buffer is bounded) */
  if (c->tls) return ak_htls_pending_in(c->tls) < TLS_PENDING_MAX;
  size_t cap = 0;
  return ak_hconn_rbuf(&c->h, &cap) != NULL;
}

/* After anything happened to c: send, end requests whose answer went out, go on with
 * buffered input, close, linger, start or stop reading, keep the idle list. */
static void service(conn_t *c) {
  if (c->closing) return;
  for (int guard = 0; guard < 4096; guard++) {
    if (ak_hconn_state(&c->h) == AK_HC_DEAD) break;
    if (c->tls && !c->lingering) tls_pull(c);
    flush(c);
    if (c->writing || ak_hconn_state(&c->h) != AK_HC_WRITE) break;
    size_t n;
    ak_hconn_out(&c->h, &n);
    if (n) break;
    ak_hconn_sent(&c->h);
  }
  ak_hc_state_t st = ak_hconn_state(&c->h);
  if (st == AK_HC_DEAD) {
    close_now(c);
    return;
  }
  if (st == AK_HC_CLOSING && !c->writing) {
    size_t n;
    ak_hconn_out(&c->h, &n);
    if (!n && !c->lingering) {
      start_linger(c);
      if (c->closing) return;
    }
  }
  bool want = wants_input(c);
  if (want && !c->reading) {
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0) c->reading = true;
  } else if (!want && c->reading) {
    stop_reading(c);
  }
  bool idle = !c->lingering && ak_hconn_idle(&c->h);
  if (idle && !ak_list_linked(&c->idle_node)) {
    c->idle_since = c->L->clk.now_ms;
    ak_list_insert_tail(&c->L->idle, &c->idle_node);
    atomic_fetch_add(&c->L->nidle, 1);
    if (ak_list_first(&c->L->idle) == &c->idle_node) idle_publish(c->L);
  } else if (!idle) {
    idle_unlink(c);
  }
}

static void op_resume(ak_hconn_t *h) {
  conn_t *c = (conn_t *)(void *)h;
  loop_t *L = c->L;
  /* The wake-up is sent under the lock: the loop cannot take this resume, answer it, and
   * (in a stop) end and be freed while this thread still touches L->async. */
  pthread_mutex_lock(&L->mu);
  if (!ak_list_linked(&c->resume_node)) ak_list_insert_tail(&L->resumes, &c->resume_node);
  uv_async_send(&L->async);
  pthread_mutex_unlock(&L->mu);
}

static bool op_peer_sha256(const ak_hconn_t *h, uint8_t out[32]) {
  const conn_t *c = (const conn_t *)(const void *)h;
  return c->tls && ak_htls_peer_sha256(c->tls, out);
}

static const ak_hconn_ops_t conn_ops = {.resume = op_resume, .peer_sha256 = op_peer_sha256};

/* ---- connections arriving -------------------------------------------------------------- */

static void evict_oldest_idle(loop_t *L) {
  ak_list_t *n = ak_list_first(&L->idle);
  if (!n) return;
  conn_t *old = ak_list_entry(n, conn_t, idle_node);
  idle_unlink(old);
  ak_hconn_drain(&old->h); /* an idle keep-alive connection closes (lingering) */
  service(old);
}

/* A connection for loop L (on L's thread). */
static void conn_open(loop_t *L, const handoff_t *ho) {
  srv_t *s = L->s;
  bool refuse = ho->refuse, counted = ho->counted;
  if (L->stopping) { /* accepted just before loop 0 heard of the stop */
    close(ho->fd);
    if (counted) atomic_fetch_sub(&s->nconns, 1);
    if (ho->pc) pc_give(s, &ho->peer);
    return;
  }
  if (ho->evict && !refuse) {
    if (atomic_load(&L->nidle) > 0) {
      evict_oldest_idle(L);
    } else {
      refuse = true;
    }
  }
  if (refuse && counted) {
    atomic_fetch_sub(&s->nconns, 1);
    counted = false;
  }
  conn_t *c = calloc(1, sizeof *c);
  if (!c) goto fail;
  c->L = L;
  c->counted = counted;
  c->pc = ho->pc;
  memcpy(&c->peer, &ho->peer, sizeof c->peer);
  c->plen = ho->plen;
  ak_hconn_init(&c->h, &s->proto, &L->clk, c);
  c->h.peer = (const struct sockaddr *)&c->peer;
  c->h.peer_len = c->plen;
  c->wr.data = c->sd.data = c;
  if (uv_tcp_init(&L->uv, &c->tcp) < 0) goto fail_free;
  c->tcp.data = c;
  if (uv_tcp_open(&c->tcp, ho->fd) < 0) {
    ak_list_insert_tail(&L->conns, &c->node);
    L->nconns++;
    c->closing = true;
    uv_close((uv_handle_t *)&c->tcp, on_closed); /* on_closed gives the slots back */
    close(ho->fd);
    return;
  }
  ak_list_insert_tail(&L->conns, &c->node);
  L->nconns++;
  uv_tcp_nodelay(&c->tcp, 1);
  if (!refuse) {
    pthread_mutex_lock(&s->tls_mu);
    ak_htls_ctx_t *ctx = s->tls ? ak_htls_ctx_ref(s->tls) : NULL;
    pthread_mutex_unlock(&s->tls_mu);
    if (ctx) {
      c->tls = ak_htls_new(ctx);
      ak_htls_ctx_unref(ctx);
      if (!c->tls) {
        close_now(c);
        return;
      }
    }
  }
  if (refuse) ak_hconn_refuse(&c->h, 503, "overload", 1);
  else if (L->draining) ak_hconn_drain(&c->h);
  service(c);
  return;
fail_free:
  ak_hconn_free(&c->h);
  free(c);
fail:
  close(ho->fd);
  if (counted) atomic_fetch_sub(&s->nconns, 1);
  if (ho->pc) pc_give(s, &ho->peer);
}

static void post(loop_t *L, const handoff_t *ho) {
  pthread_mutex_lock(&L->mu);
  if (L->ninbox == L->capinbox && ak_buf_grow(&L->inbox, &L->capinbox, L->ninbox + 1, sizeof *L->inbox) < 0) {
    pthread_mutex_unlock(&L->mu);
    close(ho->fd);
    if (ho->counted) atomic_fetch_sub(&L->s->nconns, 1);
    if (ho->pc) pc_give(L->s, &ho->peer);
    return;
  }
  L->inbox[L->ninbox++] = *ho;
  pthread_mutex_unlock(&L->mu);
  uv_async_send(&L->async);
}

/* Loop 0: a socket was accepted. Caps first, then the loop that serves it. */
static void admit(srv_t *s, int fd, const struct sockaddr_storage *ss, socklen_t sl) {
  loop_t *L0 = s->loops[0];
  handoff_t ho = {.fd = fd, .plen = sl};
  memcpy(&ho.peer, ss, sizeof ho.peer);
  const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)ss;
  if (ss->ss_family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&a6->sin6_addr)) {
    /* an IPv4 client of the dual-stack socket is handed on as the IPv4 address it is */
    struct sockaddr_in v4 = {.sin_family = AF_INET, .sin_port = a6->sin6_port};
    memcpy(&v4.sin_addr, a6->sin6_addr.s6_addr + 12, 4);
    memset(&ho.peer, 0, sizeof ho.peer);
    memcpy(&ho.peer, &v4, sizeof v4);
    ho.plen = sizeof v4;
  }
  loop_t *to = NULL;
  if (s->proto.lim.max_per_client) {
    if (pc_take(s, &ho.peer)) ho.pc = true;
    else ho.refuse = true;
  }
  if (!ho.refuse) {
    unsigned total = atomic_fetch_add(&s->nconns, 1) + 1;
    ho.counted = true;
    if (total > s->max_conns) {
      /* the oldest idle keep-alive connection of the listener makes room: the new one
       * goes to its loop, which closes it (with none idle, loop 0 refuses the new one) */
      ho.evict = true;
      uint64_t oldest = UINT64_MAX;
      for (unsigned i = 0; i < s->nloops; i++) {
        uint64_t t = atomic_load_explicit(&s->loops[i]->oldest_idle, memory_order_relaxed);
        if (t < oldest && atomic_load(&s->loops[i]->nidle) > 0) {
          oldest = t;
          to = s->loops[i];
        }
      }
    }
  }
  if (!to) {
    if (ho.refuse || ho.evict) to = L0;
    else to = s->loops[s->rr++ % s->nloops];
  }
  if (to == L0) conn_open(L0, &ho);
  else post(to, &ho);
}

static void accept_some(srv_t *s, bool all) {
  for (int i = 0; all || i < ACCEPT_BATCH; i++) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int fd = accept4(s->lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      admit(s, fd, &ss, sl);
      continue;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return;
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
      /* out of descriptors: pause accepting briefly instead of spinning on the event */
      ak_log(AK_LOG_WARNING, "http", "accept failed; pausing the listener", "listener=%s error=\"%s\"", s->name,
             strerror(errno));
      if (s->lpoll_open && !all) {
        uv_poll_stop(&s->lpoll);
        uv_timer_start(&s->accept_retry, on_accept_retry, 100, 0);
      }
      return;
    }
    return;
  }
}

static void on_listen(uv_poll_t *p, int status, int events) {
  (void)events;
  srv_t *s = p->data;
  clock_tick(s->loops[0]);
  if (status < 0) return;
  accept_some(s, false);
}

static void on_accept_retry(uv_timer_t *t) {
  srv_t *s = t->data;
  if (s->lpoll_open && !s->listener_closed) uv_poll_start(&s->lpoll, UV_READABLE, on_listen);
}

static void on_lpoll_closed(uv_handle_t *h) {
  srv_t *s = h->data;
  if (s->lfd >= 0) close(s->lfd);
  s->lfd = -1;
}

/* Loop 0: the listener closes. graceful: what the backlog holds is accepted first. */
static void listener_close(srv_t *s, bool graceful) {
  if (s->listener_closed) return;
  s->listener_closed = true;
  if (graceful && s->lfd >= 0) accept_some(s, true);
  uv_timer_stop(&s->accept_retry);
  if (s->lpoll_open) {
    s->lpoll_open = false;
    uv_poll_stop(&s->lpoll);
    uv_close((uv_handle_t *)&s->lpoll, on_lpoll_closed);
  }
  /* the other loops may end now (a stopping loop waits for this: a handoff could still
   * come); each looks again */
  atomic_store(&s->lclosed, true);
  for (unsigned i = 1; i < s->nloops; i++) uv_async_send(&s->loops[i]->async);
}

/* ---- a loop ----------------------------------------------------------------------------- */

static void loop_drain(loop_t *L) {
  L->draining = true;
  ak_list_foreach_safe(n, nx, &L->conns) {
    conn_t *c = ak_list_entry(n, conn_t, node);
    if (c->closing || c->lingering) continue;
    ak_hconn_drain(&c->h);
    service(c);
  }
}

static void loop_stop(loop_t *L) {
  L->stopping = L->draining = true;
  if (L->idx == 0) listener_close(L->s, false);
  ak_list_foreach_safe(n, nx, &L->conns) {
    conn_t *c = ak_list_entry(n, conn_t, node);
    if (c->closing) continue;
    if (c->lingering) {
      close_now(c);
      continue;
    }
    ak_hconn_stop(&c->h);
    service(c);
  }
  maybe_finish(L);
}

static void maybe_finish(loop_t *L) {
  if (!L->stopping || L->finished || L->nconns) return;
  if (L->idx != 0 && !atomic_load(&L->s->lclosed)) return;
  L->finished = true;
  uv_close((uv_handle_t *)&L->async, NULL);
  uv_close((uv_handle_t *)&L->sweep, NULL);
  if (L->idx == 0) {
    srv_t *s = L->s;
    uv_close((uv_handle_t *)&s->accept_retry, NULL);
    if (s->lpoll_open) listener_close(s, false);
  }
}

static void on_async(uv_async_t *a) {
  loop_t *L = a->data;
  srv_t *s = L->s;
  clock_tick(L);
  pthread_mutex_lock(&L->mu);
  handoff_t *in = L->inbox;
  size_t nin = L->ninbox;
  L->inbox = NULL;
  L->ninbox = L->capinbox = 0;
  bool close_listener = L->close_listener_req, drain = L->drain_req, stop = L->stop_req;
  L->close_listener_req = L->drain_req = L->stop_req = false;
  pthread_mutex_unlock(&L->mu);

  for (size_t i = 0; i < nin; i++) conn_open(L, &in[i]);
  free(in);
  /* every resume posted so far, taken under one lock (a request resumes once per suspend,
   * so no thread touches a node while it waits on this local list) */
  ak_list_t taken;
  ak_list_init(&taken);
  pthread_mutex_lock(&L->mu);
  ak_list_move(&L->resumes, &taken);
  pthread_mutex_unlock(&L->mu);
  for (ak_list_t *n; (n = ak_list_first(&taken));) {
    ak_list_remove(n);
    conn_t *c = ak_list_entry(n, conn_t, resume_node);
    ak_hconn_resumed(&c->h);
    service(c);
  }
  if (close_listener) {
    /* the backlog goes to the loops before they hear of the drain (same inbox order) */
    listener_close(s, true);
    for (unsigned i = 0; i < s->nloops; i++) {
      loop_t *o = s->loops[i];
      pthread_mutex_lock(&o->mu);
      o->drain_req = true;
      pthread_mutex_unlock(&o->mu);
      uv_async_send(&o->async);
    }
  }
  if (drain && !L->draining) loop_drain(L);
  if (stop && !L->stopping) loop_stop(L);
  else maybe_finish(L);
}

static void on_sweep(uv_timer_t *t) {
  loop_t *L = t->data;
  srv_t *s = L->s;
  clock_tick(L);
  update_date(L);
  uint64_t now = L->clk.now_ms;
  ak_list_foreach_safe(n, nx, &L->conns) {
    conn_t *c = ak_list_entry(n, conn_t, node);
    if (c->closing) continue;
    if (c->lingering) {
      if (now >= c->linger_until) close_now(c);
      continue;
    }
    if (c->writing && now - c->write_since >= s->proto.lim.write_timeout_ms) {
      ak_hconn_abort(&c->h);
      if (ak_hconn_state(&c->h) == AK_HC_DEAD) {
        close_now(c);
        continue;
      }
    }
    ak_hc_state_t before = ak_hconn_state(&c->h);
    ak_hconn_tick(&c->h);
    if (ak_hconn_state(&c->h) != before) service(c);
  }
}

static void *loop_main(void *arg) {
  loop_t *L = arg;
  char name[16];
  snprintf(name, sizeof name, "ak-%.8s-%u", L->s->name, L->idx);
  pthread_setname_np(pthread_self(), name);
  uv_run(&L->uv, UV_RUN_DEFAULT);
  return NULL;
}

static loop_t *loop_new(srv_t *s, unsigned idx) {
  loop_t *L = calloc(1, sizeof *L);
  if (!L) return NULL;
  L->scratch = malloc(SCRATCH);
  if (!L->scratch || uv_loop_init(&L->uv) < 0) {
    free(L->scratch);
    free(L);
    return NULL;
  }
  L->s = s;
  L->idx = idx;
  pthread_mutex_init(&L->mu, NULL);
  ak_list_init(&L->resumes);
  ak_list_init(&L->conns);
  ak_list_init(&L->idle);
  atomic_init(&L->oldest_idle, UINT64_MAX);
  uv_async_init(&L->uv, &L->async, on_async);
  L->async.data = L;
  uv_timer_init(&L->uv, &L->sweep);
  L->sweep.data = L;
  clock_tick(L);
  update_date(L);
  return L;
}

static void loop_free(loop_t *L) {
  if (!L) return;
  if (!L->finished) {
    /* never ran: its handles close here */
    uv_close((uv_handle_t *)&L->async, NULL);
    uv_close((uv_handle_t *)&L->sweep, NULL);
    if (L->idx == 0) {
      srv_t *s = L->s;
      if (s->retry_init) uv_close((uv_handle_t *)&s->accept_retry, NULL);
      if (s->lpoll_open) {
        s->lpoll_open = false;
        uv_close((uv_handle_t *)&s->lpoll, NULL);
      }
    }
    uv_run(&L->uv, UV_RUN_DEFAULT);
  }
  uv_loop_close(&L->uv);
  pthread_mutex_destroy(&L->mu);
  free(L->inbox);
  free(L->scratch);
  free(L);
}

/* ---- the listener socket -------------------------------------------------------------- */

/* A bound, listening, non-blocking socket for ss; -1 with errno. */
static int listen_on(const struct sockaddr_storage *ss, socklen_t sl, bool dual) {
  int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1, zero = 0;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (dual) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  if (bind(fd, (const struct sockaddr *)ss, sl) < 0 || listen(fd, SOMAXCONN) < 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

static int open_listener(srv_t *s, char **err) {
  bool any = !s->ip || !*s->ip;
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  socklen_t sl;
  const char *shown = s->ip;
  struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
  struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
  if (any) {
    a6->sin6_family = AF_INET6;
    a6->sin6_addr = in6addr_any;
    a6->sin6_port = htons((uint16_t)s->port);
    sl = sizeof *a6;
    shown = "::";
  } else if (inet_pton(AF_INET, s->ip, &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    a4->sin_port = htons((uint16_t)s->port);
    sl = sizeof *a4;
  } else if (inet_pton(AF_INET6, s->ip, &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons((uint16_t)s->port);
    sl = sizeof *a6;
  } else {
    seterr(err, "%s listener %s:%d: not an IP address", s->name, s->ip, s->port);
    return -1;
  }
  int fd = listen_on(&ss, sl, any);
  if (fd < 0 && any && (errno == EAFNOSUPPORT || errno == EPROTONOSUPPORT || errno == EADDRNOTAVAIL)) {
    /* no IPv6 on this host: every IPv4 interface */
    memset(&ss, 0, sizeof ss);
    a4->sin_family = AF_INET;
    a4->sin_addr.s_addr = htonl(INADDR_ANY);
    a4->sin_port = htons((uint16_t)s->port);
    sl = sizeof *a4;
    shown = "0.0.0.0";
    fd = listen_on(&ss, sl, false);
  }
  if (fd < 0) {
    seterr(err, "%s listener %s:%d: %s", s->name, shown, s->port, strerror(errno));
    return -1;
  }
  struct sockaddr_storage got;
  socklen_t gl = sizeof got;
  if (getsockname(fd, (struct sockaddr *)&got, &gl) == 0)
    s->port = ntohs(got.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&got)->sin6_port
                                              : ((struct sockaddr_in *)&got)->sin_port);
  s->lfd = fd;
  return 0;
}

/* RLIMIT_NOFILE toward the cap plus room for everything else; a lower cap when it cannot. */
static void fit_fd_limit(srv_t *s) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) < 0) return;
  rlim_t want = (rlim_t)s->max_conns + 1024;
  if (rl.rlim_cur < want) {
    rlim_t old = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want ? want : rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0) rl.rlim_cur = old;
  }
  if (rl.rlim_cur < want) {
    unsigned cap = rl.rlim_cur > 2048 ? (unsigned)(rl.rlim_cur - 1024) : (unsigned)(rl.rlim_cur / 2);
    ak_log(AK_LOG_WARNING, "http", "open-file limit too low for the connection cap; cap lowered",
           "listener=%s max_connections=%u nofile=%llu cap=%u", s->name, s->max_conns,
           (unsigned long long)rl.rlim_cur, cap);
    s->max_conns = cap ? cap : 1;
  }
}

/* ---- server.h --------------------------------------------------------------------------- */

ak_hserver_t *ak_hserver_new(const ak_hserver_cfg_t *cfg, char **err) {
  if (err) *err = NULL;
  if (!cfg || !cfg->handler) {
    seterr(err, "%s listener: no handler", cfg && cfg->name ? cfg->name : "http");
    return NULL;
  }
  const char *name = cfg->name && *cfg->name ? cfg->name : "http";
  if (cfg->port < 0 || cfg->port > 65535) {
    seterr(err, "%s listener %s:%d: port out of range", name, cfg->ip && *cfg->ip ? cfg->ip : "::", cfg->port);
    return NULL;
  }
  srv_t *s = calloc(1, sizeof *s);
  if (!s) {
    seterr(err, "%s listener: out of memory", name);
    return NULL;
  }
  s->proto.lim = cfg->limits;
  ak_hproto_limits(&s->proto.lim);
  s->proto.h = cfg->handler;
  s->proto.ctx = cfg->ctx;
  s->proto.server = s;
  s->proto.ops = &conn_ops;
  atomic_init(&s->proto.inflight, 0);
  s->name = xstrdup(name);
  s->ip = xstrdup(cfg->ip);
  s->port = cfg->port;
  s->lfd = -1;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  s->nloops = cfg->loops ? cfg->loops : (unsigned)(cores > 0 ? cores : 1);
  if (s->nloops > 256) s->nloops = 256;
  s->max_conns = s->proto.lim.max_connections;
  const ak_hlimits_t *l = &s->proto.lim;
  uint64_t shortest = l->header_timeout_ms;
  uint32_t ts[] = {l->body_timeout_ms, l->idle_timeout_ms, l->write_timeout_ms};
  for (size_t i = 0; i < 3; i++)
    if (ts[i] < shortest) shortest = ts[i];
  s->sweep_ms = shortest / 4 < 10 ? 10 : shortest / 4 > 250 ? 250 : shortest / 4;
  pthread_mutex_init(&s->tls_mu, NULL);
  pthread_mutex_init(&s->pc_mu, NULL);
  s->pc = calloc(PC_BUCKETS, sizeof *s->pc);
  s->tls = cfg->tls ? ak_htls_ctx_ref(cfg->tls) : NULL;
  ak_hparse_allow_head((size_t)l->max_request_line + l->max_header_bytes + 8);
  if (!s->name || !s->pc || (cfg->ip && !s->ip)) {
    seterr(err, "%s listener: out of memory", name);
    ak_hserver_free(s);
    return NULL;
  }
  return s;
}

int ak_hserver_start(ak_hserver_t *s, char **err) {
  if (err) *err = NULL;
  if (s->started) return 0;
  if (open_listener(s, err) < 0) return -1;
  fit_fd_limit(s);
  s->loops = calloc(s->nloops, sizeof *s->loops);
  for (unsigned i = 0; s->loops && i < s->nloops; i++) {
    s->loops[i] = loop_new(s, i);
    if (!s->loops[i]) {
      seterr(err, "%s listener %s:%d: cannot create an event loop", s->name, s->ip ? s->ip : "::", s->port);
      goto fail;
    }
  }
  if (!s->loops) goto fail;
  loop_t *L0 = s->loops[0];
  uv_timer_init(&L0->uv, &s->accept_retry);
  s->accept_retry.data = s;
  s->retry_init = true;
  if (uv_poll_init(&L0->uv, &s->lpoll, s->lfd) < 0) {
    seterr(err, "%s listener %s:%d: cannot poll the socket", s->name, s->ip ? s->ip : "::", s->port);
    goto fail;
  }
  s->lpoll.data = s;
  s->lpoll_open = true;
  uv_poll_start(&s->lpoll, UV_READABLE, on_listen);
  for (unsigned i = 0; i < s->nloops; i++) uv_timer_start(&s->loops[i]->sweep, on_sweep, s->sweep_ms, s->sweep_ms);
  s->started = true;
  for (unsigned i = 0; i < s->nloops; i++) {
    if (pthread_create(&s->loops[i]->th, NULL, loop_main, s->loops[i]) != 0) {
      seterr(err, "%s listener %s:%d: cannot start a thread", s->name, s->ip ? s->ip : "::", s->port);
      ak_hserver_stop(s);
      s->started = false;
      return -1;
    }
    s->loops[i]->th_started = true;
  }
  return 0;
fail:
  if (s->loops)
    for (unsigned i = 0; i < s->nloops; i++) {
      loop_free(s->loops[i]);
      s->loops[i] = NULL;
    }
  free(s->loops);
  s->loops = NULL;
  if (s->lfd >= 0) close(s->lfd);
  s->lfd = -1;
  if (err && !*err) seterr(err, "%s listener: out of memory", s->name);
  return -1;
}

int ak_hserver_port(const ak_hserver_t *s) { return s->port; }

void ak_hserver_set_tls(ak_hserver_t *s, struct ak_htls_ctx *tls) {
  if (!tls) return;
  pthread_mutex_lock(&s->tls_mu);
  ak_htls_ctx_t *old = s->tls;
  if (old) s->tls = ak_htls_ctx_ref(tls);
  pthread_mutex_unlock(&s->tls_mu);
  if (old) ak_htls_ctx_unref(old);
}

void ak_hserver_close_listener(ak_hserver_t *s) {
  if (!s->started || s->stopped || atomic_exchange(&s->close_requested, true)) return;
  loop_t *L0 = s->loops[0];
  pthread_mutex_lock(&L0->mu);
  L0->close_listener_req = true;
  pthread_mutex_unlock(&L0->mu);
  uv_async_send(&L0->async);
}

size_t ak_hserver_inflight(const ak_hserver_t *s) { return atomic_load(&s->proto.inflight); }

bool ak_hserver_wait_idle(ak_hserver_t *s, int64_t timeout_ms) {
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    if (atomic_load(&s->proto.inflight) == 0) return true;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    int64_t spent = (int64_t)(t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
    if (spent >= timeout_ms) return false;
    usleep(2000);
  }
}

void ak_hserver_stop(ak_hserver_t *s) {
  if (!s->started || s->stopped) return;
  s->stopped = true;
  for (unsigned i = 0; i < s->nloops; i++) {
    loop_t *L = s->loops[i];
    if (!L->th_started) continue;
    pthread_mutex_lock(&L->mu);
    L->stop_req = true;
    pthread_mutex_unlock(&L->mu);
    uv_async_send(&L->async);
  }
  for (unsigned i = 0; i < s->nloops; i++)
    if (s->loops[i]->th_started) pthread_join(s->loops[i]->th, NULL);
}

void ak_hserver_free(ak_hserver_t *s) {
  if (!s) return;
  if (s->started && !s->stopped) ak_hserver_stop(s);
  if (s->loops) {
    for (unsigned i = s->nloops; i-- > 0;) loop_free(s->loops[i]);
    free(s->loops);
  }
  if (s->lfd >= 0) close(s->lfd);
  if (s->pc) {
    for (size_t i = 0; i < PC_BUCKETS; i++)
      while (s->pc[i]) {
        pc_entry_t *e = s->pc[i];
        s->pc[i] = e->next;
        free(e);
      }
    free(s->pc);
  }
  if (s->tls) ak_htls_ctx_unref(s->tls);
  pthread_mutex_destroy(&s->tls_mu);
  pthread_mutex_destroy(&s->pc_mu);
  free(s->name);
  free(s->ip);
  free(s);
}
