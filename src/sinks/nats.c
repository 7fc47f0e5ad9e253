/* The `nats` sink: publishes SinkMessageV1 to a JetStream subject and answers ok only on
 * the stream's ack. Owns its option rows and their cross-key rules, the destination
 * registry (one NATS connection per destination, shared by every instance that names the
 * same connection, servers, TLS switch, credentials and guard), the per-connection
 * publisher thread, the reply -> outcome mapping and, when guarded, the egress policy of
 * every address it connects to. Never creates a stream, never blocks the dispatcher on
 * the network (deliver() only queues), never puts a credential, a server URL or a
 * header value into an outcome reason or a log line, and never touches the store.
 *
 * A publish is a request: the message carries a reply subject under the connection's own
 * inbox (<inbox>.<token>), one wildcard subscription per connection collects the acks, and
 * the publisher thread times out the ones that do not come back. ok iff the reply is JSON
 * without `error`, with a string `stream` and an integer `seq` > 0 (`duplicate: true` is
 * still ok: the stream already holds that Nats-Msg-Id). A no-responders status (nothing
 * listens on the subject: no stream covers it) is "no_stream"; every outcome but the
 * guard's refusal and an over-size message is transient.
 *
 * Connections: opened by the publisher thread at the first delivery, closed after the
 * idle timeout without a delivery, reopened on demand with a backoff (100 ms doubling to
 * 5 s; deliveries arriving meanwhile are answered "not_connected" at once). The library's
 * own reconnect is off: a lost connection fails its in-flight publishes ("connection_lost",
 * transient: JetStream's duplicate window collapses the ones that did land) and the next
 * delivery reconnects. At most NATS_MAX_PENDING deliveries are queued or in flight per
 * connection; beyond that deliver() answers "busy".
 *
 * Egress: every server host is resolved here (getaddrinfo, on the publisher thread), each
 * address of a guarded sink is checked with ak_egress_addr_allowed, and the library is
 * handed the checked address literal, never the name: what is checked is what is
 * connected to. With TLS the certificate is still verified against the configured host
 * name (natsOptions_SetExpectedHostname). Servers a cluster advertises are ignored. */
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <nats/nats.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include "core/buf.h"
#include "core/config.h"
#include "core/envelope.h"
#include "core/ids.h"
#include "sinks/egress.h"
#include "sinks/message.h"
#include "sinks/sink.h"

#define NATS_MAX_PENDING 1024          /* queued + in flight per connection */
#define NATS_DEFAULT_PORT 4222
#define NATS_CONNECT_TIMEOUT_MS 2000   /* per address */
#define NATS_BACKOFF_MIN_MS 100
#define NATS_BACKOFF_MAX_MS 5000
#define NATS_POLL_MS 200               /* how often a busy connection's health is looked at */
#define NATS_MAX_SERVERS 32

/* ---- options ------------------------------------------------------------------------ */

typedef struct nats_auth_opts {
  const char *username;
  const char *password;
  const char *token;
  const char *nkey_seed;
  const char *jwt;
} nats_auth_opts_t;

typedef struct nats_opts {
  ak_strlist_t servers;
  const char *subject;
  int64_t inline_max;
  int64_t publish_timeout_ms;
  bool tls;
  nats_auth_opts_t auth;
  const char *connection;
  int64_t idle_timeout_ms;
} nats_opts_t;

static const ak_opt_t nats_auth_rows[] = {
  {.key = "username", .type = AK_OPT_STRING, .flags = AK_OPTF_NULLABLE, .doc = "user name (with password)",
   AK_AT(nats_auth_opts_t, username)},
  {.key = "password", .type = AK_OPT_STRING, .flags = AK_OPTF_NULLABLE | AK_OPTF_SECRET,
   .doc = "password (with username)", AK_AT(nats_auth_opts_t, password)},
  {.key = "token", .type = AK_OPT_STRING, .flags = AK_OPTF_NULLABLE | AK_OPTF_SECRET,
   .doc = "authentication token", AK_AT(nats_auth_opts_t, token)},
  {.key = "nkey_seed", .type = AK_OPT_STRING, .flags = AK_OPTF_NULLABLE | AK_OPTF_SECRET,
   .doc = "NKey seed (SU...) that signs the server's nonce; alone: NKey auth, with jwt: JWT auth",
   AK_AT(nats_auth_opts_t, nkey_seed)},
  {.key = "jwt", .type = AK_OPT_STRING, .flags = AK_OPTF_NULLABLE | AK_OPTF_SECRET,
   .doc = "user JWT (needs nkey_seed)", AK_AT(nats_auth_opts_t, jwt)},
  {0},
};

static const ak_opt_t nats_rows[] = {
  {.key = "servers", .type = AK_OPT_STRLIST, .flags = AK_OPTF_REQUIRED | AK_OPTF_HAS_MIN, .min = 1,
   .doc = "NATS servers: nats://host:port, tls://host:port or host:port (a list or a comma string); "
          "failover, one at a time, starting at a random one",
   AK_AT(nats_opts_t, servers)},
  {.key = "subject", .type = AK_OPT_STRING, .flags = AK_OPTF_REQUIRED | AK_OPTF_HAS_MIN, .min = 1,
   .doc = "subject published to; a JetStream stream must cover it (the sink never creates one)",
   AK_AT(nats_opts_t, subject)},
  AK_SINK_INLINE_MAX_ROW(nats_opts_t, inline_max),
  {.key = "publish_timeout_ms", .type = AK_OPT_INT, .def = "5000", .min = 1, .max = 3600000,
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX, .doc = "how long a publish waits for the stream's ack",
   AK_AT(nats_opts_t, publish_timeout_ms)},
  {.key = "tls", .type = AK_OPT_BOOL, .def = "false",
   .doc = "TLS to every server (a tls:// server needs it anyway); the certificate is checked against the "
          "configured host name and the system's CAs",
   AK_AT(nats_opts_t, tls)},
  {.key = "auth", .type = AK_OPT_MAP, .flags = AK_OPTF_NULLABLE, .children = nats_auth_rows,
   .doc = "credentials, one scheme: username+password, token, or nkey_seed (+ jwt); absent: none",
   AK_AT(nats_opts_t, auth)},
  {.key = "connection", .type = AK_OPT_STRING, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN, .min = 1,
   .doc = "connection name (sent to the server); sinks with the same name, servers and credentials share "
          "one connection",
   AK_AT(nats_opts_t, connection)},
  AK_SINK_IDLE_TIMEOUT_ROW(nats_opts_t, idle_timeout_ms),
  {0},
};

/* ---- servers ------------------------------------------------------------------------ */

typedef struct nats_server {
  char host[256];  /* a name or an address literal, without brackets */
  int port;
  bool tls;        /* tls:// */
} nats_server_t;

/* One servers entry -> s. NULL, or what is wrong with it (never echoing the entry: a
 * userinfo part would be a credential). */
static const char *parse_server(const char *in, nats_server_t *s) {
  memset(s, 0, sizeof *s);
  s->port = NATS_DEFAULT_PORT;
  const char *p = in;
  while (*p == ' ' || *p == '\t') p++;
  const char *sep = strstr(p, "://");
  if (sep) {
    size_t sl = (size_t)(sep - p);
    if (sl == 4 && !strncasecmp(p, "nats", 4)) s->tls = false;
    else if (sl == 3 && !strncasecmp(p, "tls", 3)) s->tls = true;
    else return "only nats:// and tls:// servers (or host:port)";
    p = sep + 3;
  }
  size_t n = strlen(p);
  while (n && (p[n - 1] == ' ' || p[n - 1] == '\t' || p[n - 1] == '/')) n--;
  if (!n) return "empty server";
  if (memchr(p, '@', n)) return "credentials go in auth, not in the server URL";
  if (memchr(p, '/', n) || memchr(p, '?', n) || memchr(p, '#', n)) return "a server is host:port, no path";
  const char *host = p, *port = NULL;
  size_t hl;
  if (*p == '[') {
    const char *rb = memchr(p, ']', n);
    if (!rb) return "unclosed [ in an IPv6 server";
    host = p + 1;
    hl = (size_t)(rb - host);
    if (rb + 1 < p + n) {
      if (rb[1] != ':') return "junk after ]";
      port = rb + 2;
    }
  } else {
    const char *colon = memchr(p, ':', n);
    if (colon && memchr(colon + 1, ':', (size_t)(p + n - colon - 1))) return "an IPv6 server goes in [ ]";
    hl = colon ? (size_t)(colon - p) : n;
    if (colon) port = colon + 1;
  }
  if (!hl || hl >= sizeof s->host) return "bad host";
  for (size_t i = 0; i < hl; i++) {
    unsigned char c = (unsigned char)host[i];
    if (c <= ' ' || c >= 0x7f) return "bad host";
  }
  memcpy(s->host, host, hl);
  s->host[hl] = '\0';
  if (port) {
    size_t pl = (size_t)(p + n - port);
    long v = 0;
    if (!pl || pl > 5) return "bad port";
    for (size_t i = 0; i < pl; i++) {
      if (port[i] < '0' || port[i] > '9') return "bad port";
      v = v * 10 + (port[i] - '0');
    }
    if (v < 1 || v > 65535) return "bad port";
    s->port = (int)v;
  }
  return NULL;
}

/* Every server of the option, comma strings inside list items split too (the reference's
 * `servers: ["${NATS_SERVERS}"]` with "a:4222,b:4222"). Returns the count, or -1 with
 * err naming the entry's index. */
static int parse_servers(const char *const *v, size_t n, nats_server_t *out, size_t max, char *err,
                         size_t errlen) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    char *dup = strdup(v[i] ? v[i] : "");
    if (!dup) {
      snprintf(err, errlen, "servers: out of memory");
      return -1;
    }
    char *save = NULL;
    bool any = false;
    for (char *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
      const char *t = tok;
      while (*t == ' ' || *t == '\t') t++;
      if (!*t) continue;
      if (k >= max) {
        free(dup);
        snprintf(err, errlen, "servers: at most %zu servers", max);
        return -1;
      }
      const char *why = parse_server(t, &out[k]);
      if (why) {
        free(dup);
        snprintf(err, errlen, "servers[%zu]: %s", i, why);
        return -1;
      }
      k++;
      any = true;
    }
    free(dup);
    if (!any) {
      snprintf(err, errlen, "servers[%zu]: empty server", i);
      return -1;
    }
  }
  if (!k) {
    snprintf(err, errlen, "servers: at least one server");
    return -1;
  }
  return (int)k;
}

/* A subject published to: dot-separated non-empty tokens of visible ASCII, no wildcard. */
static const char *subject_problem(const char *s) {
  if (!*s) return "empty";
  bool tok_empty = true;
  for (const char *p = s; *p; p++) {
    unsigned char c = (unsigned char)*p;
    if (c <= ' ' || c >= 0x7f) return "a subject has no spaces or control characters";
    if (c == '*' || c == '>') return "a subject published to cannot hold a wildcard (* or >)";
    if (c == '.') {
      if (tok_empty) return "a subject has no empty token";
      tok_empty = true;
    } else {
      tok_empty = false;
    }
  }
  return tok_empty ? "a subject has no empty token" : NULL;
}

/* ---- NKeys: the public key of a seed (for NKey auth without a JWT) ------------------- */

static const char b32_alpha[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

static int b32_decode(const char *in, uint8_t *out, size_t outmax) {
  uint32_t acc = 0;
  int bits = 0;
  size_t n = 0;
  for (const char *p = in; *p; p++) {
    const char *q = strchr(b32_alpha, *p);
    if (!q || !*p) return -1;
    acc = (acc << 5) | (uint32_t)(q - b32_alpha);
    bits += 5;
    if (bits >= 8) {
      if (n >= outmax) return -1;
      out[n++] = (uint8_t)(acc >> (bits - 8));
      bits -= 8;
    }
  }
  return (int)n;
}

static void b32_encode(const uint8_t *in, size_t len, char *out) {
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < len; i++) {
    acc = (acc << 8) | in[i];
    bits += 8;
    while (bits >= 5) {
      *out++ = b32_alpha[(acc >> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  if (bits) *out++ = b32_alpha[(acc << (5 - bits)) & 31];
  *out = '\0';
}

static uint16_t crc16_xmodem(const uint8_t *p, size_t n) {
  uint16_t crc = 0;
  for (size_t i = 0; i < n; i++) {
    crc ^= (uint16_t)(p[i] << 8);
    for (int b = 0; b < 8; b++) crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
  }
  return crc;
}

/* The public key (57 bytes with the NUL) of a user NKey seed ("SU..."); -1 when the seed
 * is not one. */
static int nkey_public(const char *seed, char pub[60]) {
  uint8_t raw[40];
  int n = b32_decode(seed, raw, sizeof raw);
  int rc = -1;
  if (n != 36) goto out;
  uint16_t crc = (uint16_t)(raw[34] | (raw[35] << 8));
  if (crc16_xmodem(raw, 34) != crc) goto out;
  if ((raw[0] & 0xf8) != (18 << 3)) goto out; /* the seed prefix */
  uint8_t type = (uint8_t)(((raw[0] & 7) << 5) | ((raw[1] & 0xf8) >> 3));
  if (type != (20 << 3)) goto out; /* a user key */
  EVP_PKEY *k = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, raw + 2, 32);
  if (!k) goto out;
  uint8_t enc[35];
  size_t publen = 32;
  enc[0] = type;
  if (EVP_PKEY_get_raw_public_key(k, enc + 1, &publen) == 1 && publen == 32) {
    uint16_t c = crc16_xmodem(enc, 33);
    enc[33] = (uint8_t)(c & 0xff);
    enc[34] = (uint8_t)(c >> 8);
    b32_encode(enc, sizeof enc, pub);
    rc = 0;
  }
  EVP_PKEY_free(k);
out:
  OPENSSL_cleanse(raw, sizeof raw);
  return rc;
}

/* The auth rules both the check and create apply. 0, or -1 with err ("auth...: ..."). */
static int auth_problem(const nats_auth_opts_t *a, char *err, size_t errlen) {
  const char *present[3];
  size_t k = 0;
  if (a->username || a->password) present[k++] = "username/password";
  if (a->token) present[k++] = "token";
  if (a->nkey_seed || a->jwt) present[k++] = "nkey_seed";
  if (k > 1) {
    if (k == 2) snprintf(err, errlen, "auth: %s and %s are mutually exclusive; declare one scheme", present[0],
                         present[1]);
    else snprintf(err, errlen, "auth: %s, %s and %s are mutually exclusive; declare one scheme", present[0],
                  present[1], present[2]);
    return -1;
  }
  if (!a->username != !a->password) {
    snprintf(err, errlen, "auth: username and password go together");
    return -1;
  }
  if (a->jwt && !a->nkey_seed) {
    snprintf(err, errlen, "auth.jwt requires nkey_seed");
    return -1;
  }
  if (a->token && !*a->token) {
    snprintf(err, errlen, "auth.token: must not be empty");
    return -1;
  }
  char pub[60];
  if (a->nkey_seed && nkey_public(a->nkey_seed, pub) != 0) {
    snprintf(err, errlen, "auth.nkey_seed: not a user NKey seed (SU...)");
    return -1;
  }
  return 0;
}

/* ---- connections --------------------------------------------------------------------- */

typedef struct nats_sink nats_sink_t;

enum { SLOT_FREE = 0, SLOT_RESERVED, SLOT_QUEUED, SLOT_INFLIGHT };

typedef struct nats_slot {
  int state;
  uint32_t gen;
  uint64_t token;        /* gen << 16 | index: the reply subject's last token */
  nats_sink_t *inst;
  ak_sink_done_fn done;
  void *ctx;
  natsMsg *msg;          /* QUEUED: the message; moved out by the publisher */
  int64_t deadline_ms;   /* monotonic */
} nats_slot_t;

/* One answer to give once no lock is held. */
typedef struct nats_answer {
  nats_sink_t *inst;
  ak_sink_done_fn done;
  void *ctx;
  ak_sink_outcome_t out;
} nats_answer_t;

typedef struct nats_conn {
  struct nats_conn *next;    /* registry list */
  int refs;                  /* registry lock */
  char *key;                 /* destination key (holds credentials: cleansed at free) */
  size_t keylen;

  /* immutable after creation */
  nats_server_t servers[NATS_MAX_SERVERS];
  size_t nservers;
  bool tls;
  char *name;                /* connection name or NULL */
  char *user, *pass, *token, *seed, *jwt;
  char nkey_pub[60];
  const ak_egress_t *egress; /* NULL: trusted */
  char inbox[64];            /* _INBOX.<nuid>: replies come to <inbox>.<token> */

  pthread_mutex_t mu;
  pthread_cond_t wake;       /* the publisher: work, stop */
  pthread_cond_t idle;       /* destroy: an instance's last answer */
  pthread_cond_t subdone;    /* the reply subscription's handler has returned for good */
  nats_slot_t slots[NATS_MAX_PENDING];
  uint32_t free_list[NATS_MAX_PENDING];
  size_t nfree;
  uint64_t ring[NATS_MAX_PENDING]; /* queued tokens, FIFO */
  size_t ring_head, ring_len;
  size_t inflight;
  int64_t idle_ms;           /* 0: never */
  int64_t last_use_ms;
  bool stop, started, sub_live;
  pthread_t thread;
  natsConnection *nc;        /* publisher thread only (and the reply handler via its args) */
  natsSubscription *sub;
  int64_t next_connect_ms;
  int64_t backoff_ms;
} nats_conn_t;

struct nats_sink {
  nats_conn_t *conn;
  char *subject;
  int64_t inline_max;
  int64_t publish_timeout_ms;
  size_t pending;            /* conn->mu: deliveries not answered yet */
};

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static nats_conn_t *registry;

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void set_reason(ak_sink_outcome_t *o, ak_sink_result_t r, const char *reason) {
  o->result = r;
  o->retry_after_ms = 0;
  snprintf(o->reason, sizeof o->reason, "%s", reason);
}

/* Gives the answers (no lock held), then counts them off their instances. */
static void give_answers(nats_conn_t *c, nats_answer_t *a, size_t n) {
  for (size_t i = 0; i < n; i++) a[i].done(a[i].ctx, &a[i].out);
  if (!n) return;
  pthread_mutex_lock(&c->mu);
  for (size_t i = 0; i < n; i++)
    if (--a[i].inst->pending == 0) pthread_cond_broadcast(&c->idle);
  pthread_mutex_unlock(&c->mu);
}

/* Frees a slot (c->mu held) and fills one answer from it. */
static void slot_release(nats_conn_t *c, nats_slot_t *s, nats_answer_t *a, ak_sink_result_t r, const char *why) {
  if (s->state == SLOT_INFLIGHT) c->inflight--;
  a->inst = s->inst;
  a->done = s->done;
  a->ctx = s->ctx;
  memset(&a->out, 0, sizeof a->out);
  set_reason(&a->out, r, why);
  if (s->msg) natsMsg_Destroy(s->msg);
  s->msg = NULL;
  s->state = SLOT_FREE;
  s->inst = NULL;
  c->free_list[c->nfree++] = (uint32_t)(s - c->slots);
}

static nats_slot_t *slot_by_token(nats_conn_t *c, uint64_t token) {
  nats_slot_t *s = &c->slots[token & 0xffff];
  if ((token & 0xffff) >= NATS_MAX_PENDING || s->state == SLOT_FREE || s->token != token) return NULL;
  return s;
}

/* The ack of one publish -> its outcome. */
static void reply_outcome(natsMsg *msg, ak_sink_outcome_t *o) {
  if (natsMsg_IsNoResponders(msg)) {
    set_reason(o, AK_SINK_RETRY, "no_stream");
    return;
  }
  json_error_t jerr;
  const char *data = natsMsg_GetData(msg);
  int len = natsMsg_GetDataLength(msg);
  json_t *j = (data && len > 0) ? json_loadb(data, (size_t)len, 0, &jerr) : NULL;
  if (!json_is_object(j)) {
    set_reason(o, AK_SINK_RETRY, "bad_reply");
    json_decref(j);
    return;
  }
  json_t *e = json_object_get(j, "error");
  json_t *stream = json_object_get(j, "stream");
  json_t *seq = json_object_get(j, "seq");
  if (e) {
    json_t *code = json_object_get(e, "code"), *ecode = json_object_get(e, "err_code");
    o->result = AK_SINK_RETRY;
    snprintf(o->reason, sizeof o->reason, "jetstream_error %" JSON_INTEGER_FORMAT "/%" JSON_INTEGER_FORMAT,
             json_is_integer(code) ? json_integer_value(code) : (json_int_t)0,
             json_is_integer(ecode) ? json_integer_value(ecode) : (json_int_t)0);
  } else if (json_is_string(stream) && json_is_integer(seq) && json_integer_value(seq) > 0) {
    o->result = AK_SINK_OK;
    o->reason[0] = '\0';
  } else {
    set_reason(o, AK_SINK_RETRY, "bad_reply");
  }
  json_decref(j);
}

/* The reply subscription's handler (the library's delivery thread). */
static void on_reply(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure) {
  (void)nc;
  (void)sub;
  nats_conn_t *c = closure;
  const char *subj = natsMsg_GetSubject(msg);
  const char *dot = subj ? strrchr(subj, '.') : NULL;
  char *end = NULL;
  uint64_t token = dot ? strtoull(dot + 1, &end, 10) : 0;
  nats_answer_t a;
  bool have = false;
  if (dot && end && !*end && end != dot + 1) {
    ak_sink_outcome_t o = {.result = AK_SINK_RETRY};
    reply_outcome(msg, &o);
    pthread_mutex_lock(&c->mu);
    nats_slot_t *s = slot_by_token(c, token);
    if (s && s->state == SLOT_INFLIGHT) {
      slot_release(c, s, &a, o.result, o.reason);
      have = true;
    }
    pthread_mutex_unlock(&c->mu);
  }
  natsMsg_Destroy(msg);
  if (have) give_answers(c, &a, 1);
}

static void on_sub_complete(void *closure) {
  nats_conn_t *c = closure;
  pthread_mutex_lock(&c->mu);
  c->sub_live = false;
  pthread_cond_broadcast(&c->subdone);
  pthread_mutex_unlock(&c->mu);
}

static natsStatus jwt_cb(char **jwt, char **errtxt, void *closure) {
  (void)errtxt;
  nats_conn_t *c = closure;
  *jwt = strdup(c->jwt);
  return *jwt ? NATS_OK : NATS_NO_MEMORY;
}

static natsStatus sig_cb(char **errtxt, unsigned char **sig, int *siglen, const char *nonce, void *closure) {
  (void)errtxt;
  nats_conn_t *c = closure;
  return nats_Sign(c->seed, nonce, sig, siglen);
}

/* Closes the connection (publisher thread, no lock held). In-flight publishes are
 * answered by the caller. */
static void conn_close(nats_conn_t *c) {
  if (c->sub) natsSubscription_Unsubscribe(c->sub);
  if (c->nc) natsConnection_Close(c->nc);
  if (c->sub) {
    /* the handler may still be running: the subscription is freed after it returned */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 10;
    pthread_mutex_lock(&c->mu);
    while (c->sub_live)
      if (pthread_cond_timedwait(&c->subdone, &c->mu, &ts) == ETIMEDOUT) break;
    pthread_mutex_unlock(&c->mu);
    natsSubscription_Destroy(c->sub);
  }
  if (c->nc) natsConnection_Destroy(c->nc);
  c->sub = NULL;
  c->nc = NULL;
}

/* One connection attempt to one address literal (publisher thread). */
static natsStatus connect_addr(nats_conn_t *c, const nats_server_t *srv, const char *lit, bool v6) {
  natsOptions *o = NULL;
  char url[INET6_ADDRSTRLEN + 32];
  snprintf(url, sizeof url, "%s://%s%s%s:%d", (srv->tls || c->tls) ? "tls" : "nats", v6 ? "[" : "", lit,
           v6 ? "]" : "", srv->port);
  natsStatus s = natsOptions_Create(&o);
  if (s == NATS_OK) s = natsOptions_SetURL(o, url);
  if (s == NATS_OK) s = natsOptions_SetTimeout(o, NATS_CONNECT_TIMEOUT_MS);
  if (s == NATS_OK) s = natsOptions_SetAllowReconnect(o, false);
  if (s == NATS_OK) s = natsOptions_SetIgnoreDiscoveredServers(o, true);
  if (s == NATS_OK) s = natsOptions_SetNoRandomize(o, true);
  if (s == NATS_OK && c->name) s = natsOptions_SetName(o, c->name);
  if (s == NATS_OK && (srv->tls || c->tls)) {
    s = natsOptions_SetSecure(o, true);
    struct in6_addr tmp;
    bool literal = inet_pton(AF_INET, srv->host, &tmp) == 1 || inet_pton(AF_INET6, srv->host, &tmp) == 1;
    if (s == NATS_OK && !literal) s = natsOptions_SetExpectedHostname(o, srv->host);
  }
  if (s == NATS_OK && c->user) s = natsOptions_SetUserInfo(o, c->user, c->pass);
  if (s == NATS_OK && c->token) s = natsOptions_SetToken(o, c->token);
  if (s == NATS_OK && c->seed && c->jwt) s = natsOptions_SetUserCredentialsCallbacks(o, jwt_cb, c, sig_cb, c);
  else if (s == NATS_OK && c->seed) s = natsOptions_SetNKey(o, c->nkey_pub, sig_cb, c);
  natsConnection *nc = NULL;
  if (s == NATS_OK) s = natsConnection_Connect(&nc, o);
  natsOptions_Destroy(o);
  if (s != NATS_OK) return s;
  char subj[sizeof c->inbox + 4];
  snprintf(subj, sizeof subj, "%s.*", c->inbox);
  natsSubscription *sub = NULL;
  pthread_mutex_lock(&c->mu);
  c->sub_live = true;
  pthread_mutex_unlock(&c->mu);
  s = natsConnection_Subscribe(&sub, nc, subj, on_reply, c);
  if (s == NATS_OK) s = natsSubscription_SetPendingLimits(sub, -1, -1);
  if (s == NATS_OK && natsSubscription_SetOnCompleteCB(sub, on_sub_complete, c) != NATS_OK) {
    s = NATS_ERR;
    pthread_mutex_lock(&c->mu);
    c->sub_live = false; /* no completion will come */
    pthread_mutex_unlock(&c->mu);
  }
  if (s == NATS_OK) s = natsConnection_Flush(nc); /* the subscription is in place before any publish */
  if (s != NATS_OK) {
    if (!sub) {
      pthread_mutex_lock(&c->mu);
      c->sub_live = false;
      pthread_mutex_unlock(&c->mu);
    }
    c->nc = nc;
    c->sub = sub;
    conn_close(c);
    return s;
  }
  c->nc = nc;
  c->sub = sub;
  return NATS_OK;
}

/* Opens the connection: servers in order from a random one, each host resolved here and
 * each address checked by the guard. 0; -1 transient (why: not_connected); -2 every address
 * refused by the guard (why: the refusal). Publisher thread, no lock held. */
static int conn_open(nats_conn_t *c, char *why, size_t whylen) {
  unsigned r = 0;
  if (RAND_bytes((unsigned char *)&r, sizeof r) != 1) r = 0;
  size_t start = c->nservers ? r % c->nservers : 0;
  bool refused_only = true, any_addr = false;
  snprintf(why, whylen, "not_connected");
  for (size_t k = 0; k < c->nservers; k++) {
    const nats_server_t *srv = &c->servers[(start + k) % c->nservers];
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_ADDRCONFIG};
    struct addrinfo *res = NULL;
    if (getaddrinfo(srv->host, NULL, &hints, &res) != 0 || !res) {
      refused_only = false;
      continue;
    }
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
      if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6) continue;
      any_addr = true;
      if (c->egress && !ak_egress_addr_allowed(c->egress, ai->ai_addr)) {
        if (refused_only) ak_egress_refusal(ai->ai_addr, why, whylen);
        continue;
      }
      refused_only = false;
      char lit[INET6_ADDRSTRLEN];
      const void *a = ai->ai_family == AF_INET ? (const void *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr
                                               : (const void *)&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr;
      if (!inet_ntop(ai->ai_family, a, lit, sizeof lit)) continue;
      if (connect_addr(c, srv, lit, ai->ai_family == AF_INET6) == NATS_OK) {
        freeaddrinfo(res);
        return 0;
      }
    }
    freeaddrinfo(res);
  }
  if (any_addr && refused_only) return -2;
  snprintf(why, whylen, "not_connected");
  return -1;
}

/* Answers every slot in `state` with (r, why) into a; c->mu held. */
static size_t fail_state(nats_conn_t *c, int state, nats_answer_t *a, ak_sink_result_t r, const char *why) {
  size_t n = 0;
  for (size_t i = 0; i < NATS_MAX_PENDING; i++)
    if (c->slots[i].state == state) slot_release(c, &c->slots[i], &a[n++], r, why);
  if (state == SLOT_QUEUED) c->ring_len = 0;
  return n;
}

static void *publisher(void *arg) {
  nats_conn_t *c = arg;
  /* answers collected in one turn: a slot is released at most once per lock hold, and the
   * lock is let go at most twice before they are given (open, close) */
  nats_answer_t *ans = calloc(3 * NATS_MAX_PENDING, sizeof *ans);
  natsMsg **batch = calloc(NATS_MAX_PENDING, sizeof *batch);
  uint64_t *tokens = calloc(NATS_MAX_PENDING, sizeof *tokens);
  pthread_mutex_lock(&c->mu);
  while (!c->stop) {
    size_t na = 0;
    int64_t now = now_ms();
    if (!ans || !batch || !tokens) { /* cannot work: answer everything, never spin */
      for (size_t i = 0; i < NATS_MAX_PENDING; i++) {
        nats_slot_t *s = &c->slots[i];
        if (s->state != SLOT_QUEUED && s->state != SLOT_INFLIGHT) continue;
        nats_answer_t one;
        slot_release(c, s, &one, AK_SINK_RETRY, "out of memory");
        c->ring_len = 0;
        pthread_mutex_unlock(&c->mu);
        give_answers(c, &one, 1);
        pthread_mutex_lock(&c->mu);
      }
      pthread_cond_wait(&c->wake, &c->mu);
      continue;
    }
    /* timeouts */
    for (size_t i = 0; i < NATS_MAX_PENDING; i++) {
      nats_slot_t *s = &c->slots[i];
      if ((s->state == SLOT_QUEUED || s->state == SLOT_INFLIGHT) && s->deadline_ms <= now)
        slot_release(c, s, &ans[na++], AK_SINK_RETRY, "publish_timeout");
    }
    /* a connection that died */
    if (c->nc && natsConnection_IsClosed(c->nc)) {
      na += fail_state(c, SLOT_INFLIGHT, ans + na, AK_SINK_RETRY, "connection_lost");
      pthread_mutex_unlock(&c->mu);
      conn_close(c);
      pthread_mutex_lock(&c->mu);
      c->backoff_ms = NATS_BACKOFF_MIN_MS;
      c->next_connect_ms = now_ms() + c->backoff_ms;
    }
    /* work */
    if (c->ring_len) {
      if (!c->nc && now_ms() >= c->next_connect_ms) {
        pthread_mutex_unlock(&c->mu);
        char why[128];
        int rc = conn_open(c, why, sizeof why);
        pthread_mutex_lock(&c->mu);
        if (rc == 0) {
          c->backoff_ms = 0;
        } else {
          c->backoff_ms = c->backoff_ms ? c->backoff_ms * 2 : NATS_BACKOFF_MIN_MS;
          if (c->backoff_ms > NATS_BACKOFF_MAX_MS) c->backoff_ms = NATS_BACKOFF_MAX_MS;
          c->next_connect_ms = now_ms() + c->backoff_ms;
          na += fail_state(c, SLOT_QUEUED, ans + na, rc == -2 ? AK_SINK_PERMANENT : AK_SINK_RETRY, why);
        }
      } else if (!c->nc) {
        na += fail_state(c, SLOT_QUEUED, ans + na, AK_SINK_RETRY, "not_connected");
      }
      if (c->nc && c->ring_len) {
        size_t nb = 0;
        while (c->ring_len) {
          uint64_t t = c->ring[c->ring_head];
          c->ring_head = (c->ring_head + 1) % NATS_MAX_PENDING;
          c->ring_len--;
          nats_slot_t *s = slot_by_token(c, t);
          if (!s || s->state != SLOT_QUEUED) continue;
          s->state = SLOT_INFLIGHT;
          c->inflight++;
          batch[nb] = s->msg;
          tokens[nb++] = t;
          s->msg = NULL;
        }
        natsConnection *nc = c->nc;
        pthread_mutex_unlock(&c->mu);
        if (na) give_answers(c, ans, na);
        na = 0;
        for (size_t i = 0; i < nb; i++) {
          natsStatus st = natsConnection_PublishMsg(nc, batch[i]);
          natsMsg_Destroy(batch[i]);
          if (st == NATS_OK) continue;
          pthread_mutex_lock(&c->mu);
          nats_slot_t *s = slot_by_token(c, tokens[i]);
          if (s && s->state == SLOT_INFLIGHT) {
            if (st == NATS_MAX_PAYLOAD) slot_release(c, s, &ans[na++], AK_SINK_PERMANENT, "message_too_large");
            else slot_release(c, s, &ans[na++], AK_SINK_RETRY, "not_connected");
          }
          pthread_mutex_unlock(&c->mu);
        }
        pthread_mutex_lock(&c->mu);
      }
    }
    /* idle close */
    if (c->nc && c->idle_ms > 0 && !c->ring_len && !c->inflight && now_ms() - c->last_use_ms >= c->idle_ms) {
      pthread_mutex_unlock(&c->mu);
      conn_close(c);
      pthread_mutex_lock(&c->mu);
    }
    if (na) {
      pthread_mutex_unlock(&c->mu);
      give_answers(c, ans, na);
      pthread_mutex_lock(&c->mu);
      continue; /* an answer may have queued more work */
    }
    if (c->stop) break;
    /* sleep until the next deadline, a health look, the idle close or new work */
    now = now_ms();
    int64_t until = now + 60000;
    for (size_t i = 0; i < NATS_MAX_PENDING; i++) {
      const nats_slot_t *s = &c->slots[i];
      if ((s->state == SLOT_QUEUED || s->state == SLOT_INFLIGHT) && s->deadline_ms < until) until = s->deadline_ms;
    }
    if (c->inflight && now + NATS_POLL_MS < until) until = now + NATS_POLL_MS;
    if (c->ring_len && !c->nc && c->next_connect_ms < until) until = c->next_connect_ms;
    if (c->nc && c->idle_ms > 0 && !c->ring_len && !c->inflight && c->last_use_ms + c->idle_ms < until)
      until = c->last_use_ms + c->idle_ms;
    if (c->ring_len && c->nc) continue;
    if (until <= now) until = now + 1;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t wait = until - now;
    ts.tv_sec += wait / 1000;
    ts.tv_nsec += (wait % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&c->wake, &c->mu, &ts);
  }
  pthread_mutex_unlock(&c->mu);
  conn_close(c);
  free(ans);
  free(batch);
  free(tokens);
  return NULL;
}

static void free_secret(char *s) {
  if (!s) return;
  OPENSSL_cleanse(s, strlen(s));
  free(s);
}

static void conn_free(nats_conn_t *c) {
  if (!c) return;
  if (c->key) OPENSSL_cleanse(c->key, c->keylen);
  free(c->key);
  free(c->name);
  free(c->user);
  free_secret(c->pass);
  free_secret(c->token);
  free_secret(c->seed);
  free_secret(c->jwt);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->wake);
  pthread_cond_destroy(&c->idle);
  pthread_cond_destroy(&c->subdone);
  free(c);
}

/* The destination key: everything that makes two connections different. */
static char *dest_key(const nats_opts_t *o, const nats_server_t *sv, size_t nsv, const ak_egress_t *eg,
                      size_t *len) {
  ak_buf_t b = AK_BUF_INIT;
  const nats_auth_opts_t *a = &o->auth;
  ak_buf_printf(&b, "name=%s%c", o->connection ? o->connection : "", 0);
  for (size_t i = 0; i < nsv; i++)
    ak_buf_printf(&b, "%s|%s|%d%c", sv[i].tls ? "tls" : "nats", sv[i].host, sv[i].port, 0);
  ak_buf_printf(&b, "tls=%d%cguard=%p%c", o->tls, 0, (const void *)eg, 0);
  const char *parts[] = {a->username, a->password, a->token, a->nkey_seed, a->jwt};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) ak_buf_printf(&b, "%s%c", parts[i] ? parts[i] : "-", 0);
  *len = b.len;
  char *k = ak_buf_take(&b, NULL);
  return k;
}

static nats_conn_t *conn_acquire(const nats_opts_t *o, const nats_server_t *sv, size_t nsv, const ak_egress_t *eg,
                                 char *err, size_t errlen) {
  size_t klen = 0;
  char *key = dest_key(o, sv, nsv, eg, &klen);
  if (!key) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  pthread_mutex_lock(&registry_mu);
  nats_conn_t *c = registry;
  while (c && !(c->keylen == klen && !memcmp(c->key, key, klen))) c = c->next;
  if (c) {
    c->refs++;
    pthread_mutex_lock(&c->mu);
    if (c->idle_ms && (o->idle_timeout_ms == 0 || o->idle_timeout_ms > c->idle_ms)) c->idle_ms = o->idle_timeout_ms;
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_unlock(&registry_mu);
    OPENSSL_cleanse(key, klen);
    free(key);
    return c;
  }
  c = calloc(1, sizeof *c);
  if (!c) goto oom;
  c->key = key;
  c->keylen = klen;
  key = NULL;
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->wake, NULL);
  pthread_cond_init(&c->idle, NULL);
  pthread_cond_init(&c->subdone, NULL);
  memcpy(c->servers, sv, nsv * sizeof *sv);
  c->nservers = nsv;
  c->tls = o->tls;
  c->egress = eg;
  c->idle_ms = o->idle_timeout_ms;
  const nats_auth_opts_t *a = &o->auth;
  if ((o->connection && !(c->name = strdup(o->connection))) || (a->username && !(c->user = strdup(a->username))) ||
      (a->password && !(c->pass = strdup(a->password))) || (a->token && !(c->token = strdup(a->token))) ||
      (a->nkey_seed && !(c->seed = strdup(a->nkey_seed))) || (a->jwt && !(c->jwt = strdup(a->jwt))))
    goto oom;
  if (c->seed && nkey_public(c->seed, c->nkey_pub) != 0) {
    snprintf(err, errlen, "auth.nkey_seed: not a user NKey seed (SU...)");
    goto fail;
  }
  natsInbox *inbox = NULL;
  if (natsInbox_Create(&inbox) != NATS_OK) {
    snprintf(err, errlen, "nats: cannot make an inbox");
    goto fail;
  }
  snprintf(c->inbox, sizeof c->inbox, "%s", (const char *)inbox);
  natsInbox_Destroy(inbox);
  for (size_t i = 0; i < NATS_MAX_PENDING; i++) c->free_list[i] = (uint32_t)(NATS_MAX_PENDING - 1 - i);
  c->nfree = NATS_MAX_PENDING;
  c->refs = 1;
  c->next = registry;
  registry = c;
  pthread_mutex_unlock(&registry_mu);
  return c;
oom:
  snprintf(err, errlen, "out of memory");
fail:
  pthread_mutex_unlock(&registry_mu);
  if (key) {
    OPENSSL_cleanse(key, klen);
    free(key);
  }
  conn_free(c);
  return NULL;
}

static void conn_release(nats_conn_t *c) {
  pthread_mutex_lock(&registry_mu);
  if (--c->refs > 0) {
    pthread_mutex_unlock(&registry_mu);
    return;
  }
  for (nats_conn_t **pp = &registry; *pp; pp = &(*pp)->next)
    if (*pp == c) {
      *pp = c->next;
      break;
    }
  pthread_mutex_unlock(&registry_mu);
  pthread_mutex_lock(&c->mu);
  c->stop = true;
  pthread_cond_broadcast(&c->wake);
  bool started = c->started;
  pthread_mutex_unlock(&c->mu);
  if (started) pthread_join(c->thread, NULL);
  conn_free(c);
}

/* ---- vtable --------------------------------------------------------------------------- */

static bool header_value_ok(const char *v, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (v[i] == '\r' || v[i] == '\n' || v[i] == '\0') return false;
  return true;
}

static void nats_deliver(void *self, const ak_sink_attempt_t *att, void *ctx, ak_sink_done_fn done) {
  nats_sink_t *s = self;
  nats_conn_t *c = s->conn;
  ak_sink_outcome_t out = {.result = AK_SINK_RETRY};
  bool by_claim = ak_sink_by_claim(att, s->inline_max);
  if (by_claim && !att->claim_ref) {
    set_reason(&out, AK_SINK_RETRY, "claim_missing");
    done(ctx, &out);
    return;
  }
  ak_buf_t body = AK_BUF_INIT;
  if (ak_sink_message_encode(att, by_claim, &body) != 0) {
    ak_buf_free(&body);
    set_reason(&out, AK_SINK_RETRY, "out of memory");
    done(ctx, &out);
    return;
  }

  /* a slot: the bound, and the token of the reply subject */
  pthread_mutex_lock(&c->mu);
  if (!c->nfree) {
    pthread_mutex_unlock(&c->mu);
    ak_buf_free(&body);
    set_reason(&out, AK_SINK_RETRY, "busy");
    done(ctx, &out);
    return;
  }
  uint32_t idx = c->free_list[--c->nfree];
  nats_slot_t *sl = &c->slots[idx];
  sl->gen++;
  sl->token = ((uint64_t)sl->gen << 16) | idx;
  sl->state = SLOT_RESERVED;
  sl->inst = s;
  sl->done = done;
  sl->ctx = ctx;
  sl->msg = NULL;
  uint64_t token = sl->token;
  s->pending++;
  c->last_use_ms = now_ms();
  sl->deadline_ms = c->last_use_ms + s->publish_timeout_ms;
  pthread_mutex_unlock(&c->mu);

  char reply[sizeof c->inbox + 24];
  snprintf(reply, sizeof reply, "%s.%" PRIu64, c->inbox, token);
  natsMsg *m = NULL;
  natsStatus st = natsMsg_Create(&m, s->subject, reply, body.p ? body.p : "", (int)body.len);
  ak_buf_free(&body);
  if (st == NATS_OK) {
    char msgid[AK_UUID_STR_LEN + 16 + 64];
    char id[AK_UUID_STR_LEN];
    ak_uuid_format(att->env->id, id);
    if (att->replay_id && *att->replay_id) snprintf(msgid, sizeof msgid, "%s:replay:%.60s", id, att->replay_id);
    else snprintf(msgid, sizeof msgid, "%s", id);
    st = natsMsgHeader_Set(m, "Nats-Msg-Id", msgid);
    ak_sink_meta_scratch_t scratch;
    ak_sink_meta_t meta[AK_SINK_META_MAX];
    size_t nm = ak_sink_metadata(att, true, &scratch, meta);
    for (size_t i = 0; i < nm && st == NATS_OK; i++) {
      /* a value that could split a header line is left out, never altered */
      if (!header_value_ok(meta[i].value, meta[i].value_len)) continue;
      st = natsMsgHeader_Set(m, meta[i].name, meta[i].value);
    }
  }
  pthread_mutex_lock(&c->mu);
  if (st != NATS_OK) {
    nats_answer_t a;
    if (m) natsMsg_Destroy(m);
    slot_release(c, sl, &a, AK_SINK_RETRY, "out of memory");
    pthread_mutex_unlock(&c->mu);
    give_answers(c, &a, 1);
    return;
  }
  sl->msg = m;
  sl->state = SLOT_QUEUED;
  c->ring[(c->ring_head + c->ring_len) % NATS_MAX_PENDING] = token;
  c->ring_len++;
  if (!c->started) {
    if (pthread_create(&c->thread, NULL, publisher, c) == 0) {
      c->started = true;
    } else {
      nats_answer_t a;
      c->ring_len--;
      slot_release(c, sl, &a, AK_SINK_RETRY, "cannot start the publisher");
      pthread_mutex_unlock(&c->mu);
      give_answers(c, &a, 1);
      return;
    }
  }
  pthread_cond_signal(&c->wake);
  pthread_mutex_unlock(&c->mu);
}

static void nats_destroy(void *self) {
  nats_sink_t *s = self;
  if (!s) return;
  if (s->conn) {
    nats_conn_t *c = s->conn;
    nats_answer_t *a = calloc(NATS_MAX_PENDING, sizeof *a);
    pthread_mutex_lock(&c->mu);
    size_t n = 0;
    for (size_t i = 0; i < NATS_MAX_PENDING; i++) {
      nats_slot_t *sl = &c->slots[i];
      if (sl->inst != s || (sl->state != SLOT_QUEUED && sl->state != SLOT_INFLIGHT)) continue;
      if (a) {
        slot_release(c, sl, &a[n++], AK_SINK_RETRY, "sink stopped");
      } else { /* no room to batch: one at a time */
        nats_answer_t one;
        slot_release(c, sl, &one, AK_SINK_RETRY, "sink stopped");
        pthread_mutex_unlock(&c->mu);
        give_answers(c, &one, 1);
        pthread_mutex_lock(&c->mu);
      }
    }
    pthread_mutex_unlock(&c->mu);
    if (a) give_answers(c, a, n);
    free(a);
    /* answers given elsewhere (a reply, a timeout) that are under way */
    pthread_mutex_lock(&c->mu);
    while (s->pending) pthread_cond_wait(&c->idle, &c->mu);
    pthread_mutex_unlock(&c->mu);
    conn_release(c);
  }
  free(s->subject);
  free(s);
}

/* The guard of a sink made by hand without one (no allow list): immutable, built once, shared
 * (the guard is part of the destination key, so hand-made sinks still share connections). */
static ak_egress_t *default_guard;
static pthread_once_t default_guard_once = PTHREAD_ONCE_INIT;

static void make_default_guard(void) {
  char err[128];
  default_guard = ak_egress_new(NULL, 0, false, err, sizeof err);
}

static int64_t nats_inline_max(const void *self) {
  return ((const nats_sink_t *)self)->inline_max;
}

/* The rules of check and create alike; 0 or -1 with err (relative key first). */
static int opts_problem(const nats_opts_t *o, nats_server_t *sv, size_t *nsv, char *err, size_t errlen) {
  int n = parse_servers(o->servers.v, o->servers.n, sv, NATS_MAX_SERVERS, err, errlen);
  if (n < 0) return -1;
  *nsv = (size_t)n;
  const char *why = subject_problem(o->subject ? o->subject : "");
  if (why) {
    snprintf(err, errlen, "subject: %s", why);
    return -1;
  }
  if (auth_problem(&o->auth, err, errlen) != 0) return -1;
  if (o->idle_timeout_ms != 0 && o->idle_timeout_ms < o->publish_timeout_ms + 1000) {
    snprintf(err, errlen, "idle_timeout_ms: must be 0 (never) or at least publish_timeout_ms + 1000 (%" PRId64 ")",
             o->publish_timeout_ms + 1000);
    return -1;
  }
  return 0;
}

static void *nats_create(const json_t *opts, const ak_sink_ctx_t *sctx, char *err, size_t errlen) {
  nats_sink_t *s = calloc(1, sizeof *s);
  nats_server_t *sv = calloc(NATS_MAX_SERVERS, sizeof *sv);
  nats_opts_t o = {0};
  json_t *checked = NULL;
  if (!s || !sv) {
    snprintf(err, errlen, "out of memory");
    goto fail;
  }
  if (ak_opt_bind_checked(nats_rows, opts, &o, &checked, err, errlen) != 0) goto fail;
  size_t nsv = 0;
  int rc = opts_problem(&o, sv, &nsv, err, errlen);
  if (rc == 0) {
    s->inline_max = ak_sink_inline_max_opt(checked);
    s->publish_timeout_ms = o.publish_timeout_ms;
    if (!(s->subject = strdup(o.subject))) {
      snprintf(err, errlen, "out of memory");
      rc = -1;
    }
  }
  if (rc == 0) {
    const ak_egress_t *eg = NULL;
    if (!(sctx && sctx->trusted)) {
      eg = sctx ? sctx->egress : NULL;
      if (!eg) {
        pthread_once(&default_guard_once, make_default_guard);
        eg = default_guard;
      }
      if (!eg) {
        snprintf(err, errlen, "egress: cannot build the default guard");
        rc = -1;
      }
    }
    if (rc == 0 && !(s->conn = conn_acquire(&o, sv, nsv, eg, err, errlen))) rc = -1;
  }
  ak_opt_release(nats_rows, &o);
  json_decref(checked);
  free(sv);
  if (rc != 0) goto fail_s;
  return s;
fail:
  free(sv);
fail_s:
  nats_destroy(s);
  return NULL;
}

/* ---- config rules ---------------------------------------------------------------------- */

static void nats_check(ak_check_t *c, const char *path, json_t *spec, const json_t *root) {
  nats_opts_t o = {0};
  json_t *checked = NULL;
  char err[256];
  if (ak_opt_bind_checked(nats_rows, spec, &o, &checked, err, sizeof err) != 0) return; /* the rows said why */
  nats_server_t *sv = calloc(NATS_MAX_SERVERS, sizeof *sv);
  size_t nsv = 0;
  if (!sv) {
    ak_check_error(c, "%s: out of memory", path);
  } else if (opts_problem(&o, sv, &nsv, err, sizeof err) != 0) {
    ak_check_error(c, "%s.%s", path, err);
  } else if (ak_egress_tree_guards(root)) {
    /* a literal the guard can never let through is a config error, not dead letters */
    ak_egress_t *g = ak_egress_from_tree(root);
    for (size_t i = 0; g && i < nsv; i++) {
      struct sockaddr_in6 sa6 = {.sin6_family = AF_INET6};
      struct sockaddr_in sa4 = {.sin_family = AF_INET};
      const struct sockaddr *sa = NULL;
      if (inet_pton(AF_INET, sv[i].host, &sa4.sin_addr) == 1) sa = (const struct sockaddr *)&sa4;
      else if (inet_pton(AF_INET6, sv[i].host, &sa6.sin6_addr) == 1) sa = (const struct sockaddr *)&sa6;
      if (sa && !ak_egress_addr_allowed(g, sa)) {
        char why[128];
        ak_egress_refusal(sa, why, sizeof why);
        ak_check_error(c, "%s.servers: %s (egress.allow_cidrs can allow it)", path, why);
        break;
      }
    }
    ak_egress_free(g);
  }
  free(sv);
  ak_opt_release(nats_rows, &o);
  json_decref(checked);
}

const ak_sink_vtable_t ak_sink_nats = {
  .plugin = {.type = "nats", .doc = "publish SinkMessageV1 to a NATS JetStream subject; ok on the stream's ack",
             .options = nats_rows, .check = nats_check},
  .durable = true,
  .create = nats_create,
  .deliver = nats_deliver,
  .destroy = nats_destroy,
  .inline_max = nats_inline_max,
};
