/* The Redis client of net/redis.h on one libuv loop. Owns one TCP connection at a time
 * (a conn: its socket, its reply reader, the bytes of its write in flight, freed by its
 * close callback so that every late callback of a closed connection finds it alive and
 * detached), the queue of commands waiting for replies, the handshake and the reconnect
 * timer. hiredis only formats commands and parses replies: its connection and async
 * code never run here. Never blocks, never calls back from inside ak_redis_command,
 * never writes a password or a server's echo of one into a `why`, and never frees the
 * client while a handle of it may still call back (ak_redis_free waits for the closes).
 *
 * ak_redis_pending counts the caller's commands only: the handshake's are internal. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "net/redis.h"

#define DEF_CONNECT_MS 2000
#define DEF_BACKOFF_MIN_MS 100
#define DEF_BACKOFF_MAX_MS 2000
#define STALL_TICK_MAX_MS 250
#define READ_CHUNK 65536
#define WHY_MAX 160

/* ---- URL -------------------------------------------------------------------------- */

static void say(char *why, size_t whylen, const char *msg) {
  if (why && whylen) snprintf(why, whylen, "%s", msg);
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Percent-decodes s[0..n) into out (cap bytes with the NUL). A %00 is refused: the
 * credentials travel as C strings. */
static int pct_decode(const char *s, size_t n, char *out, size_t cap) {
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (c == '%') {
      if (i + 2 >= n) return -1;
      int h = hexval(s[i + 1]), l = hexval(s[i + 2]);
      if (h < 0 || l < 0 || (h == 0 && l == 0)) return -1;
      c = (char)(h * 16 + l);
      i += 2;
    }
    if (o + 1 >= cap) return -2;
    out[o++] = c;
  }
  out[o] = '\0';
  return 0;
}

static bool host_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
         c == '_';
}

int ak_redis_url_parse(const char *url, ak_redis_url_t *out, char *why, size_t whylen) {
  memset(out, 0, sizeof *out);
  out->port = 6379;
  if (!url) {
    say(why, whylen, "must be a redis:// URL");
    return -1;
  }
  if (strncasecmp(url, "rediss://", 9) == 0) {
    say(why, whylen, "rediss:// (TLS) is not supported by this build (its hiredis has no TLS): use redis://");
    return -1;
  }
  if (strncasecmp(url, "redis://", 8) != 0) {
    say(why, whylen, "must be a redis:// URL");
    return -1;
  }
  const char *p = url + 8;
  /* The last '@' ends the credentials: a password may hold an unescaped '@' or '/', and
   * nothing after the host may hold one. */
  const char *at = strrchr(p, '@');
  if (at) {
    const char *colon = memchr(p, ':', (size_t)(at - p));
    if (!colon) {
      say(why, whylen, "credentials must be [user]:password@");
      return -1;
    }
    int rc = pct_decode(p, (size_t)(colon - p), out->user, sizeof out->user);
    if (rc == 0) rc = pct_decode(colon + 1, (size_t)(at - colon - 1), out->password, sizeof out->password);
    if (rc != 0) {
      memset(out->user, 0, sizeof out->user);
      memset(out->password, 0, sizeof out->password);
      say(why, whylen, rc == -2 ? "user or password too long" : "bad %-escape in the credentials");
      return -1;
    }
    p = at + 1;
  }
  const char *h0, *h1;
  if (*p == '[') {
    h0 = p + 1;
    h1 = strchr(h0, ']');
    if (!h1) {
      say(why, whylen, "unclosed [ in the host");
      goto fail;
    }
    p = h1 + 1;
  } else {
    h0 = p;
    while (*p && *p != ':' && *p != '/' && *p != '?' && *p != '#') p++;
    h1 = p;
  }
  size_t hl = (size_t)(h1 - h0);
  if (hl == 0) {
    say(why, whylen, "empty host");
    goto fail;
  }
  if (hl >= sizeof out->host) {
    say(why, whylen, "host too long");
    goto fail;
  }
  memcpy(out->host, h0, hl);
  out->host[hl] = '\0';
  if (h0 != url + 8 && h0[-1] == '[') {
    unsigned char a6[16];
    if (uv_inet_pton(AF_INET6, out->host, a6) != 0) {
      say(why, whylen, "bad IPv6 address in [ ]");
      goto fail;
    }
  } else {
    for (size_t i = 0; i < hl; i++)
      if (!host_char(out->host[i])) {
        say(why, whylen, "bad host");
        goto fail;
      }
  }
  if (*p == ':') {
    p++;
    long port = 0;
    int nd = 0;
    while (*p >= '0' && *p <= '9' && nd < 6) port = port * 10 + (*p++ - '0'), nd++;
    if (nd == 0 || nd > 5 || port < 1 || port > 65535 || (*p && *p != '/' && *p != '?' && *p != '#')) {
      say(why, whylen, "bad port (1..65535)");
      goto fail;
    }
    out->port = (int)port;
  }
  if (*p == '/') {
    p++;
    long db = 0;
    int nd = 0;
    while (*p >= '0' && *p <= '9' && nd < 10) db = db * 10 + (*p++ - '0'), nd++;
    if (nd > 9 || db > INT_MAX || (*p && *p != '?' && *p != '#')) {
      say(why, whylen, "bad db (a non-negative integer)");
      goto fail;
    }
    out->db = (int)db;
  }
  if (*p) {
    say(why, whylen, "trailing garbage after the URL (no query or fragment is read)");
    goto fail;
  }
  return 0;
fail:
  memset(out->password, 0, sizeof out->password);
  return -1;
}

void ak_redis_url_redacted(const ak_redis_url_t *u, char *buf, size_t len) {
  if (!buf || !len) return;
  bool v6 = strchr(u->host, ':') != NULL;
  snprintf(buf, len, "redis://%s%s%s:%d/%d", v6 ? "[" : "", u->host, v6 ? "]" : "", u->port, u->db);
}

/* ---- the client ------------------------------------------------------------------- */

typedef struct bytes {
  char *p;
  size_t len, cap;
} bytes_t;

static int bytes_add(bytes_t *b, const char *p, size_t n) {
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n) cap *= 2;
    char *q = realloc(b->p, cap);
    if (!q) return -1;
    b->p = q;
    b->cap = cap;
  }
  memcpy(b->p + b->len, p, n);
  b->len += n;
  return 0;
}

typedef struct entry {
  ak_redis_reply_fn cb;       /* NULL: a handshake command */
  void *priv;
  uint64_t sent_ms;           /* when its bytes went to the socket; 0 while queued */
} entry_t;

typedef struct conn {
  uv_tcp_t tcp;
  uv_connect_t creq;
  uv_write_t wreq;
  ak_redis_t *r;              /* NULL once detached: its callbacks then do nothing */
  redisReader *reader;
  bytes_t wbuf;               /* the write in flight (owned here: the request points into it) */
  bool writing;
  char rbuf[READ_CHUNK];
} conn_t;

typedef struct gai {
  uv_getaddrinfo_t req;
  ak_redis_t *r;              /* NULL once abandoned: the callback frees and leaves */
} gai_t;

struct ak_redis {
  uv_loop_t *loop;
  ak_redis_url_t url;
  long connect_ms, stall_ms, backoff_min, backoff_max, backoff;
  void (*on_state)(void *ctx, ak_redis_state_t st, const char *why);
  void *ctx;
  bool (*addr_ok)(void *ctx, const struct sockaddr *sa, char *why, size_t whylen);

  char *hs;                   /* the handshake, formatted once (AUTH, SELECT, init, or PING) */
  size_t hs_len, hs_n;

  ak_redis_state_t state;
  bool started, closing;
  uint64_t gen;               /* bumped by every loss: a callback checks it to see one happened */
  int open_handles;

  uv_timer_t timer;           /* connect timeout while CONNECTING, backoff while DOWN */
  uv_timer_t stall;
  uv_prepare_t prep;          /* flushes what was queued before the loop polls */
  bool prep_on;

  gai_t *gai;
  struct sockaddr_storage *addrs;
  size_t naddrs, addr_i;
  char last_err[WHY_MAX];

  conn_t *conn;
  bytes_t qbuf;               /* queued, not yet handed to the socket */
  entry_t *ent;               /* ring, cap a power of two */
  size_t cap, head, n, nq, nhs; /* nq: the newest nq entries are in qbuf; nhs: handshake entries */
};

static uint64_t now_ms(void) { return uv_hrtime() / 1000000u; }

static void set_state(ak_redis_t *r, ak_redis_state_t st, const char *why) {
  if (r->state == st) return;
  r->state = st;
  if (r->on_state) r->on_state(r->ctx, st, why);
}

static int ring_push(ak_redis_t *r, ak_redis_reply_fn cb, void *priv) {
  if (r->n == r->cap) {
    size_t cap = r->cap ? r->cap * 2 : 64;
    entry_t *e = malloc(cap * sizeof *e);
    if (!e) return -1;
    for (size_t i = 0; i < r->n; i++) e[i] = r->ent[(r->head + i) & (r->cap - 1)];
    free(r->ent);
    r->ent = e;
    r->cap = cap;
    r->head = 0;
  }
  r->ent[(r->head + r->n) & (r->cap - 1)] = (entry_t){.cb = cb, .priv = priv, .sent_ms = 0};
  r->n++;
  r->nq++;
  if (!cb) r->nhs++;
  return 0;
}

static void conn_closed(uv_handle_t *h) {
  conn_t *c = (conn_t *)h->data;
  if (c->reader) redisReaderFree(c->reader);
  free(c->wbuf.p);
  free(c);
}

static void conn_drop(ak_redis_t *r) {
  conn_t *c = r->conn;
  if (!c) return;
  r->conn = NULL;
  c->r = NULL;
  /* uv_close cancels the connect and write requests: their callbacks run before
   * conn_closed and find c detached. */
  uv_close((uv_handle_t *)&c->tcp, conn_closed);
}

static void reconnect_cb(uv_timer_t *t);

/* Every loss goes through here: the connection, the resolve and the timers are gone and
 * the state is DOWN before anyone is called, and the queue is taken off the client
 * first, so a callback that queues, flushes, resets or frees finds a consistent client. */
static void lose(ak_redis_t *r, const char *why, bool reconnect) {
  char whycopy[WHY_MAX];
  snprintf(whycopy, sizeof whycopy, "%s", why ? why : "closed");
  r->gen++;
  uv_timer_stop(&r->timer);
  uv_timer_stop(&r->stall);
  if (r->prep_on) {
    uv_prepare_stop(&r->prep);
    r->prep_on = false;
  }
  if (r->gai) {
    r->gai->r = NULL;
    uv_cancel((uv_req_t *)&r->gai->req); /* may fail if it already runs: the callback frees */
    r->gai = NULL;
  }
  free(r->addrs);
  r->addrs = NULL;
  r->naddrs = r->addr_i = 0;
  conn_drop(r);
  r->qbuf.len = 0;
  entry_t *ent = r->ent;
  size_t cap = r->cap, head = r->head, n = r->n;
  r->ent = NULL;
  r->cap = r->head = r->n = r->nq = r->nhs = 0;
  if (reconnect && !r->closing) {
    uv_timer_start(&r->timer, reconnect_cb, (uint64_t)r->backoff, 0);
    r->backoff = r->backoff * 2 > r->backoff_max ? r->backoff_max : r->backoff * 2;
  }
  set_state(r, AK_REDIS_DOWN, whycopy);
  for (size_t i = 0; i < n; i++) {
    entry_t e = ent[(head + i) & (cap - 1)];
    if (e.cb) e.cb(e.priv, NULL);
  }
  free(ent);
}

/* ---- writing ---------------------------------------------------------------------- */

static void write_cb(uv_write_t *req, int status);

/* Hands qbuf to the socket: as much as it takes now, the rest in one uv_write. The
 * queued entries are written from here on, for the stall clock. */
static void issue(ak_redis_t *r) {
  conn_t *c = r->conn;
  if (!c || c->writing || r->qbuf.len == 0) return;
  bytes_t t = c->wbuf;
  c->wbuf = r->qbuf;
  r->qbuf = t;
  r->qbuf.len = 0;
  uint64_t now = now_ms();
  if (now == 0) now = 1;
  for (size_t i = r->n - r->nq; i < r->n; i++) r->ent[(r->head + i) & (r->cap - 1)].sent_ms = now;
  r->nq = 0;
  uv_buf_t b = uv_buf_init(c->wbuf.p, (unsigned)c->wbuf.len);
  int w = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
  if (w == UV_EAGAIN || w == UV_ENOSYS) w = 0;
  if (w < 0) {
    lose(r, uv_strerror(w), true);
    return;
  }
  if ((size_t)w == c->wbuf.len) {
    c->wbuf.len = 0;
    return;
  }
  b = uv_buf_init(c->wbuf.p + w, (unsigned)(c->wbuf.len - (size_t)w));
  int rc = uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, write_cb);
  if (rc < 0) {
    lose(r, uv_strerror(rc), true);
    return;
  }
  c->writing = true;
}

static void write_cb(uv_write_t *req, int status) {
  conn_t *c = (conn_t *)req->data;
  c->writing = false;
  c->wbuf.len = 0;
  ak_redis_t *r = c->r;
  if (!r) return;
  if (status < 0) {
    lose(r, uv_strerror(status), true);
    return;
  }
  issue(r);
}

static void prep_cb(uv_prepare_t *p) {
  ak_redis_t *r = (ak_redis_t *)p->data;
  uv_prepare_stop(p);
  r->prep_on = false;
  issue(r);
}

/* ---- reading ---------------------------------------------------------------------- */

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  conn_t *c = (conn_t *)h->data;
  *buf = uv_buf_init(c->rbuf, sizeof c->rbuf);
}

static void stall_cb(uv_timer_t *t);

static void become_up(ak_redis_t *r) {
  uv_timer_stop(&r->timer);
  r->backoff = r->backoff_min;
  if (r->stall_ms > 0) {
    long tick = r->stall_ms / 4;
    if (tick > STALL_TICK_MAX_MS) tick = STALL_TICK_MAX_MS;
    if (tick < 1) tick = 1;
    uv_timer_start(&r->stall, stall_cb, (uint64_t)tick, (uint64_t)tick);
  }
  set_state(r, AK_REDIS_UP, NULL);
}

/* A server's error text, printable and without the password (an error may echo a
 * command's arguments). */
static void handshake_why(const ak_redis_t *r, const char *s, size_t n, char *out, size_t cap) {
  char text[WHY_MAX - 16];
  size_t o = 0;
  for (size_t i = 0; i < n && o + 1 < sizeof text; i++) text[o++] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
  text[o] = '\0';
  size_t pl = strlen(r->url.password);
  if (pl) {
    char *hit;
    while ((hit = strstr(text, r->url.password)) != NULL) memset(hit, '*', pl);
    /* a password cut by the length limit could still leak its head: drop the tail */
    if (o + 1 == sizeof text && o >= pl) text[o - pl] = '\0';
  }
  snprintf(out, cap, "handshake: %s", text);
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  conn_t *c = (conn_t *)s->data;
  ak_redis_t *r = c->r;
  (void)buf;
  if (!r || nread == 0) return;
  if (nread < 0) {
    lose(r, nread == UV_EOF ? "closed by server" : uv_strerror((int)nread), true);
    return;
  }
  if (redisReaderFeed(c->reader, c->rbuf, (size_t)nread) != REDIS_OK) {
    lose(r, "protocol error", true);
    return;
  }
  for (;;) {
    void *v = NULL;
    if (redisReaderGetReply(c->reader, &v) != REDIS_OK) {
      lose(r, "protocol error", true);
      return;
    }
    if (!v) return;
    redisReply *reply = (redisReply *)v;
    if (r->n == r->nq) { /* nothing written is waiting: the server speaks out of turn */
      freeReplyObject(reply);
      lose(r, "protocol error: a reply to no command", true);
      return;
    }
    entry_t e = r->ent[r->head];
    r->head = (r->head + 1) & (r->cap - 1);
    r->n--;
    if (!e.cb) {
      r->nhs--;
      if (reply->type == REDIS_REPLY_ERROR) {
        char why[WHY_MAX];
        handshake_why(r, reply->str, reply->len, why, sizeof why);
        freeReplyObject(reply);
        lose(r, why, true);
        return;
      }
      freeReplyObject(reply);
      if (r->nhs == 0) {
        become_up(r);
        if (c->r != r) return;
      }
      continue;
    }
    e.cb(e.priv, reply);
    freeReplyObject(reply);
    if (c->r != r) return; /* the callback reset or freed the client: c is detached */
  }
}

/* ---- connecting ------------------------------------------------------------------- */

static void connect_next(ak_redis_t *r);

static void connect_cb(uv_connect_t *req, int status) {
  conn_t *c = (conn_t *)req->data;
  ak_redis_t *r = c->r;
  if (!r) return;
  if (status < 0) {
    snprintf(r->last_err, sizeof r->last_err, "%s", uv_strerror(status));
    conn_drop(r);
    r->addr_i++;
    connect_next(r);
    return;
  }
  uv_tcp_nodelay(&c->tcp, 1);
  c->reader = redisReaderCreate();
  if (!c->reader) {
    lose(r, "out of memory", true);
    return;
  }
  int rc = uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb);
  if (rc < 0) {
    lose(r, uv_strerror(rc), true);
    return;
  }
  free(r->addrs);
  r->addrs = NULL;
  r->naddrs = r->addr_i = 0;
  if (bytes_add(&r->qbuf, r->hs, r->hs_len) != 0) {
    lose(r, "out of memory", true);
    return;
  }
  for (size_t i = 0; i < r->hs_n; i++)
    if (ring_push(r, NULL, NULL) != 0) {
      lose(r, "out of memory", true);
      return;
    }
  issue(r);
}

static void connect_next(ak_redis_t *r) {
  while (r->addr_ok && r->addr_i < r->naddrs &&
         !r->addr_ok(r->ctx, (const struct sockaddr *)&r->addrs[r->addr_i], r->last_err, sizeof r->last_err))
    r->addr_i++;
  if (r->addr_i >= r->naddrs) {
    lose(r, r->last_err[0] ? r->last_err : "no address", true);
    return;
  }
  conn_t *c = calloc(1, sizeof *c);
  if (!c) {
    lose(r, "out of memory", true);
    return;
  }
  c->r = r;
  uv_tcp_init(r->loop, &c->tcp);
  c->tcp.data = c;
  c->creq.data = c;
  c->wreq.data = c;
  r->conn = c;
  uv_tcp_nodelay(&c->tcp, 1);
  int rc = uv_tcp_connect(&c->creq, &c->tcp, (const struct sockaddr *)&r->addrs[r->addr_i], connect_cb);
  if (rc < 0) {
    snprintf(r->last_err, sizeof r->last_err, "%s", uv_strerror(rc));
    conn_drop(r);
    r->addr_i++;
    connect_next(r);
  }
}

static void gai_cb(uv_getaddrinfo_t *req, int status, struct addrinfo *res) {
  gai_t *g = (gai_t *)req->data;
  ak_redis_t *r = g->r;
  if (!r) {
    if (res) uv_freeaddrinfo(res);
    free(g);
    return;
  }
  r->gai = NULL;
  free(g);
  if (status < 0) {
    if (res) uv_freeaddrinfo(res);
    char why[WHY_MAX];
    snprintf(why, sizeof why, "resolve: %s", uv_strerror(status));
    lose(r, why, true);
    return;
  }
  size_t n = 0;
  for (struct addrinfo *a = res; a; a = a->ai_next)
    if (a->ai_family == AF_INET || a->ai_family == AF_INET6) n++;
  r->addrs = n ? calloc(n, sizeof *r->addrs) : NULL;
  r->naddrs = 0;
  r->addr_i = 0;
  if (r->addrs)
    for (struct addrinfo *a = res; a; a = a->ai_next) {
      if (a->ai_family != AF_INET && a->ai_family != AF_INET6) continue;
      struct sockaddr_storage *ss = &r->addrs[r->naddrs++];
      memcpy(ss, a->ai_addr, a->ai_addrlen);
      uint16_t port = htons((uint16_t)r->url.port); /* resolved without a service: port 0 */
      if (a->ai_family == AF_INET) ((struct sockaddr_in *)ss)->sin_port = port;
      else ((struct sockaddr_in6 *)ss)->sin6_port = port;
    }
  uv_freeaddrinfo(res);
  if (!r->naddrs) {
    lose(r, n ? "out of memory" : "resolve: no address", true);
    return;
  }
  r->last_err[0] = '\0';
  connect_next(r);
}

static void connect_timeout_cb(uv_timer_t *t) {
  ak_redis_t *r = (ak_redis_t *)t->data;
  lose(r, "connect timeout", true);
}

static void begin_connect(ak_redis_t *r) {
  if (r->closing || r->state != AK_REDIS_DOWN) return;
  uv_timer_stop(&r->timer);
  uint64_t gen = r->gen;
  set_state(r, AK_REDIS_CONNECTING, NULL);
  if (r->gen != gen || r->closing) return; /* on_state reset or freed us */
  uv_timer_start(&r->timer, connect_timeout_cb, (uint64_t)r->connect_ms, 0);
  r->last_err[0] = '\0';
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  if (uv_ip4_addr(r->url.host, r->url.port, (struct sockaddr_in *)&ss) == 0 ||
      uv_ip6_addr(r->url.host, r->url.port, (struct sockaddr_in6 *)&ss) == 0) {
    r->addrs = malloc(sizeof *r->addrs);
    if (!r->addrs) {
      lose(r, "out of memory", true);
      return;
    }
    r->addrs[0] = ss;
    r->naddrs = 1;
    r->addr_i = 0;
    connect_next(r);
    return;
  }
  gai_t *g = calloc(1, sizeof *g);
  if (!g) {
    lose(r, "out of memory", true);
    return;
  }
  g->r = r;
  g->req.data = g;
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_ADDRCONFIG;
  int rc = uv_getaddrinfo(r->loop, &g->req, gai_cb, r->url.host, NULL, &hints);
  if (rc < 0) {
    free(g);
    char why[WHY_MAX];
    snprintf(why, sizeof why, "resolve: %s", uv_strerror(rc));
    lose(r, why, true);
    return;
  }
  r->gai = g;
}

static void reconnect_cb(uv_timer_t *t) { begin_connect((ak_redis_t *)t->data); }

static void stall_cb(uv_timer_t *t) {
  ak_redis_t *r = (ak_redis_t *)t->data;
  if (r->state != AK_REDIS_UP || r->n == r->nq) return;
  uint64_t sent = r->ent[r->head].sent_ms;
  if (sent && now_ms() - sent > (uint64_t)r->stall_ms) lose(r, "stalled", true);
}

/* ---- the interface ---------------------------------------------------------------- */

/* "<c><decimal>\r\n" at o; its length. */
static size_t resp_head(char *o, char c, uint64_t v) {
  char t[24];
  size_t n = 0, k = 0;
  do t[n++] = (char)('0' + v % 10);
  while ((v /= 10));
  o[k++] = c;
  while (n) o[k++] = t[--n];
  o[k++] = '\r';
  o[k++] = '\n';
  return k;
}

/* A command in RESP's request form, written straight into b: "*<argc>\r\n", then
 * "$<len>\r\n<bytes>\r\n" per argument. hiredis's redisFormatCommandArgv makes the same
 * bytes with a malloc and a sprintf per argument, which measured as the largest part of
 * the fleet thread's own work (bench/fleet.sh); replies are still read by hiredis. */
static int add_formatted(bytes_t *b, int argc, const char **argv, const size_t *lens) {
  size_t need = 24;
  for (int i = 0; i < argc; i++) need += 24 + (lens ? lens[i] : strlen(argv[i])) + 2; /* NULL lens: strings */
  if (b->len + need > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + need) cap *= 2;
    char *q = realloc(b->p, cap);
    if (!q) return -1;
    b->p = q;
    b->cap = cap;
  }
  char *o = b->p + b->len;
  o += resp_head(o, '*', (uint64_t)argc);
  for (int i = 0; i < argc; i++) {
    size_t l = lens ? lens[i] : strlen(argv[i]);
    o += resp_head(o, '$', l);
    memcpy(o, argv[i], l);
    o += l;
    *o++ = '\r';
    *o++ = '\n';
  }
  b->len = (size_t)(o - b->p);
  return 0;
}

ak_redis_t *ak_redis_new(uv_loop_t *loop, const ak_redis_opts_t *opts) {
  if (!loop || !opts || !opts->url) return NULL;
  ak_redis_t *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->loop = loop;
  r->url = *opts->url;
  r->connect_ms = opts->connect_timeout_ms > 0 ? opts->connect_timeout_ms : DEF_CONNECT_MS;
  r->stall_ms = opts->stall_timeout_ms > 0 ? opts->stall_timeout_ms : 0;
  r->backoff_min = opts->backoff_min_ms > 0 ? opts->backoff_min_ms : DEF_BACKOFF_MIN_MS;
  r->backoff_max = opts->backoff_max_ms > 0 ? opts->backoff_max_ms : DEF_BACKOFF_MAX_MS;
  if (r->backoff_max < r->backoff_min) r->backoff_max = r->backoff_min;
  r->backoff = r->backoff_min;
  r->on_state = opts->on_state;
  r->ctx = opts->ctx;
  r->addr_ok = opts->addr_ok;

  /* The handshake is the same for every connection: format it once. Without AUTH,
   * SELECT or init commands it is a PING, so UP always means the server answered (a
   * stopped server still completes TCP handshakes from its listen backlog). */
  bytes_t hs = {0};
  int rc = 0;
  size_t nhs = 0;
  if (r->url.password[0]) {
    const char *withuser[] = {"AUTH", r->url.user, r->url.password};
    const char *plain[] = {"AUTH", r->url.password};
    rc |= r->url.user[0] ? add_formatted(&hs, 3, withuser, NULL) : add_formatted(&hs, 2, plain, NULL);
    nhs++;
  }
  if (r->url.db != 0) {
    char db[16];
    snprintf(db, sizeof db, "%d", r->url.db);
    const char *sel[] = {"SELECT", db};
    rc |= add_formatted(&hs, 2, sel, NULL);
    nhs++;
  }
  for (size_t i = 0; i < opts->ninit && rc == 0; i++) {
    const char *const *av = opts->init_argv[i];
    int argc = 0;
    while (av && av[argc]) argc++;
    if (argc == 0) continue;
    rc |= add_formatted(&hs, argc, (const char **)av, NULL);
    nhs++;
  }
  if (nhs == 0) {
    const char *ping[] = {"PING"};
    rc |= add_formatted(&hs, 1, ping, NULL);
    nhs++;
  }
  if (rc != 0) {
    free(hs.p);
    free(r);
    return NULL;
  }
  r->hs = hs.p;
  r->hs_len = hs.len;
  r->hs_n = nhs;

  uv_timer_init(loop, &r->timer);
  uv_timer_init(loop, &r->stall);
  uv_prepare_init(loop, &r->prep);
  r->timer.data = r->stall.data = r->prep.data = r;
  r->open_handles = 3;
  return r;
}

void ak_redis_start(ak_redis_t *r) {
  if (!r || r->started || r->closing) return;
  r->started = true;
  begin_connect(r);
}

ak_redis_state_t ak_redis_state(const ak_redis_t *r) { return r->state; }

int ak_redis_command(ak_redis_t *r, int argc, const char **argv, const size_t *lens, ak_redis_reply_fn cb,
                     void *priv) {
  if (!r || r->closing || r->state != AK_REDIS_UP || !r->conn || argc <= 0 || !argv || !cb) return -1;
  size_t before = r->qbuf.len;
  if (add_formatted(&r->qbuf, argc, argv, lens) != 0) {
    r->qbuf.len = before;
    return -1;
  }
  if (ring_push(r, cb, priv) != 0) {
    r->qbuf.len = before;
    return -1;
  }
  if (!r->prep_on) {
    uv_prepare_start(&r->prep, prep_cb);
    r->prep_on = true;
  }
  return 0;
}

void ak_redis_flush(ak_redis_t *r) {
  if (!r || r->closing) return;
  issue(r);
}

size_t ak_redis_pending(const ak_redis_t *r) { return r ? r->n - r->nhs : 0; }

void ak_redis_reset(ak_redis_t *r, const char *why) {
  if (!r || r->closing || !r->started) return;
  if (r->state == AK_REDIS_DOWN) return; /* already lost: its reconnect is scheduled */
  lose(r, why ? why : "reset", true);
}

static void handle_closed(uv_handle_t *h) {
  ak_redis_t *r = (ak_redis_t *)h->data;
  if (--r->open_handles > 0) return;
  if (r->hs) memset(r->hs, 0, r->hs_len); /* it holds the AUTH line */
  free(r->hs);
  free(r->qbuf.p);
  free(r->ent);
  free(r->addrs);
  memset(r->url.password, 0, sizeof r->url.password);
  free(r);
}

void ak_redis_free(ak_redis_t *r) {
  if (!r || r->closing) return;
  r->closing = true;
  lose(r, "closed", false);
  /* lose() may have been re-entered by a callback: whatever it left is gone here */
  conn_drop(r);
  uv_close((uv_handle_t *)&r->timer, handle_closed);
  uv_close((uv_handle_t *)&r->stall, handle_closed);
  uv_close((uv_handle_t *)&r->prep, handle_closed);
}
