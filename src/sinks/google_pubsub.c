/* The `google_pubsub` sink: one topics.publish (REST, JSON) per delivery, the SinkMessageV1
 * as the message's base64 data and the common metadata set as its attributes. Owns its
 * option rows and config rules, the request body, the size rule, the confirm rule (HTTP 200
 * whose messageIds holds exactly one id), the mapping of Google's error statuses to
 * outcomes, and the bearer token: configured (auth token), none (an emulator), or fetched
 * from the GCE metadata server (auth metadata, GCE_METADATA_HOST when set) and cached
 * until 60 s before it expires, dropped at a 401. Requests go through the node's shared
 * HTTP client (net/httpc.h).
 *
 * Stateless: no connection of its own (httpc keeps and reuses connections). Fetching a
 * token waits on the network, so deliver() never does it: it encodes the request and
 * queues it for the pubsub sinks' one worker thread (sinks/worker.h: started with the
 * first delivery, stopped with the last instance), which adds the token and submits; the
 * answer arrives on a client thread. The queue is bounded: beyond it a delivery is
 * answered "busy". Never puts a token, the URL or a response body into a reason or a log
 * line, never creates a topic, never retries on its own (dispatch owns retries). destroy
 * answers every delivery of the instance still under way once, "sink stopped", and
 * returns after the last of those answers.
 *
 * Egress: a guarded sink (ak_sink_ctx_t.trusted false) publishes only to https:// (http://
 * with egress.allow_http), every address checked by the client against the guard, as the
 * http sink does (a refusal is permanent); and it may use the node's own metadata token
 * only toward Google's endpoint, so a tenant cannot point the node's identity elsewhere.
 * The metadata server itself is the node's, never checked by the guard. */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <jansson.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include "core/buf.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/envelope.h"
#include "net/httpc.h"
#include "sinks/egress.h"
#include "sinks/message.h"
#include "sinks/sink.h"
#include "sinks/worker.h"

#define PS_DEFAULT_ENDPOINT "https://pubsub.googleapis.com"
#define PS_QUEUE_MAX 1024        /* deliveries waiting for the worker, all instances */
#define PS_RESP_MAX 65536        /* a publish answer or an error document */
#define PS_TOKEN_MAX 4096
#define PS_TOKEN_MARGIN_S 60
#define PS_METADATA_TIMEOUT_MS 2000

enum { AUTH_METADATA, AUTH_TOKEN, AUTH_NONE };

typedef struct ps_opts {
  const char *project;
  const char *topic;
  const char *endpoint;
  int auth;
  const char *token;
  const char *ordering_key;
  int64_t inline_max_bytes;
  int64_t max_message_bytes;
  int64_t timeout_ms;
} ps_opts_t;

static const ak_opt_t ps_rows[] = {
  {.key = "project", .type = AK_OPT_STRING, .flags = AK_OPTF_REQUIRED | AK_OPTF_HAS_MIN, .min = 1,
   .doc = "the Google Cloud project id of the topic", AK_AT(ps_opts_t, project)},
  {.key = "topic", .type = AK_OPT_STRING, .flags = AK_OPTF_REQUIRED | AK_OPTF_HAS_MIN, .min = 1,
   .doc = "the topic's short id (not projects/.../topics/...); it must exist", AK_AT(ps_opts_t, topic)},
  {.key = "endpoint", .type = AK_OPT_STRING, .def = PS_DEFAULT_ENDPOINT, .flags = AK_OPTF_HAS_MIN, .min = 1,
   .doc = "the Pub/Sub API's origin (an emulator's, a regional one)", AK_AT(ps_opts_t, endpoint)},
  {.key = "auth", .type = AK_OPT_ENUM, .def = "metadata", .enum_vals = "metadata|token|none",
   .doc = "bearer token: from the GCE metadata server, the configured token, or none (emulator)",
   AK_AT(ps_opts_t, auth)},
  {.key = "token", .type = AK_OPT_STRING, .flags = AK_OPTF_NULLABLE | AK_OPTF_SECRET | AK_OPTF_HAS_MIN, .min = 1,
   .doc = "the OAuth access token; required iff auth is token", AK_AT(ps_opts_t, token)},
  {.key = "ordering_key", .type = AK_OPT_STRING, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX,
   .min = 1, .max = 1024, .doc = "orderingKey of every message; absent: none", AK_AT(ps_opts_t, ordering_key)},
  AK_SINK_INLINE_MAX_ROW(ps_opts_t, inline_max_bytes),
  {.key = "max_message_bytes", .type = AK_OPT_INT, .def = "10000000", .min = 1, .max = 10000000,
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX,
   .doc = "data + attribute names and values + ordering key above this: dead-lettered before sending",
   AK_AT(ps_opts_t, max_message_bytes)},
  {.key = "timeout_ms", .type = AK_OPT_INT, .def = "5000", .min = 1, .max = 3600000,
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX, .doc = "connect + response timeout of one publish",
   AK_AT(ps_opts_t, timeout_ms)},
  {0},
};

typedef struct ps_sink {
  char *url;                /* <endpoint>/v1/projects/<p>/topics/<t>:publish */
  char *endpoint;
  int auth;
  char *token;              /* auth token */
  char *ordering_key;
  int64_t inline_max;
  size_t max_bytes;
  long timeout_ms;
  const ak_egress_t *egress; /* NULL: trusted */
  ak_egress_t *owned_egress;
  ak_httpc_t *httpc;
  ak_httpc_t *owned_httpc;
} ps_sink_t;

/* What the completion needs, carried by the request. */
typedef struct {
  ak_sink_done_fn done;
  void *ctx;
  bool metadata; /* the token came from the metadata server: a 401 drops it */
} ps_cell_t;
_Static_assert(sizeof(ps_cell_t) <= AK_HTTPC_USER_MAX, "the cell rides in the request");

typedef struct ps_job {
  ak_sink_job_t base; /* base.owner: the ps_sink_t */
  ps_cell_t cell;
  char *body;
  size_t body_len;
} ps_job_t;

/* ---- the metadata token (the worker fetches; a completion may drop it) -------------------- */

static struct {
  pthread_mutex_t mu;
  char *token;
  int64_t until; /* monotonic ns */
} T = {.mu = PTHREAD_MUTEX_INITIALIZER};

static bool token_ok(const char *t) {
  if (!t || !*t || strlen(t) > PS_TOKEN_MAX) return false;
  for (const char *p = t; *p; p++)
    if (*p < 0x21 || *p > 0x7e) return false;
  return true;
}

static void token_drop(void) {
  pthread_mutex_lock(&T.mu);
  T.until = 0;
  pthread_mutex_unlock(&T.mu);
}

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done;
  ak_httpc_result_t result;
  long status;
  ak_buf_t body;
} waiter_t;

static void on_token(void *ctx, const ak_httpc_resp_t *r) {
  waiter_t *w = ctx;
  pthread_mutex_lock(&w->mu);
  w->result = r->result;
  w->status = r->status;
  if (r->body && r->body_bytes) ak_buf_append(&w->body, r->body, r->body_bytes);
  w->done = true;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

/* GCE_METADATA_HOST (host or host:port) as Google's client libraries read it; a value
 * that would change what the URL means is refused. */
static bool host_ok(const char *h) {
  if (!h || !*h || strlen(h) > 255) return false;
  for (const char *p = h; *p; p++)
    if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || strchr(".-:[]", *p)))
      return false;
  return true;
}

/* A fresh token from the metadata server into T (worker thread). 0 or -1. */
static int token_fetch(ak_httpc_t *hc) {
  const char *host = getenv("GCE_METADATA_HOST");
  if (!host || !*host) host = "metadata.google.internal";
  if (!host_ok(host)) return -1;
  char url[320];
  snprintf(url, sizeof url, "http://%s/computeMetadata/v1/instance/service-accounts/default/token", host);
  static const char *const hdrs[] = {"Metadata-Flavor: Google"};
  waiter_t w = {.body = AK_BUF_INIT};
  pthread_mutex_init(&w.mu, NULL);
  pthread_cond_init(&w.cv, NULL);
  ak_httpc_req_t rq = {.method = "GET", .url = url, .headers = hdrs, .nheaders = 1,
                       .timeout_ms = PS_METADATA_TIMEOUT_MS, .max_response_bytes = PS_RESP_MAX, .keep_body = true};
  int rc = ak_httpc_submit(hc, &rq, on_token, &w);
  if (rc == 0) {
    pthread_mutex_lock(&w.mu);
    while (!w.done) pthread_cond_wait(&w.cv, &w.mu);
    pthread_mutex_unlock(&w.mu);
  }
  pthread_cond_destroy(&w.cv);
  pthread_mutex_destroy(&w.mu);
  int out = -1;
  json_t *j = NULL;
  if (rc == 0 && w.result == AK_HTTPC_OK && w.status == 200 && w.body.p)
    j = json_loadb(w.body.p, w.body.len, 0, NULL);
  const char *tok = json_string_value(json_object_get(j, "access_token"));
  json_t *exp = json_object_get(j, "expires_in");
  if (token_ok(tok) && json_is_integer(exp)) {
    char *t = strdup(tok);
    if (t) {
      json_int_t left = json_integer_value(exp) - PS_TOKEN_MARGIN_S;
      if (left < 0) left = 0;
      if (left > 86400) left = 86400;
      pthread_mutex_lock(&T.mu);
      if (T.token) {
        OPENSSL_cleanse(T.token, strlen(T.token));
        free(T.token);
      }
      T.token = t;
      T.until = ak_mono_ns() + (int64_t)left * 1000000000;
      pthread_mutex_unlock(&T.mu);
      out = 0;
    }
  }
  json_t *at = json_object_get(j, "access_token");
  if (json_is_string(at)) OPENSSL_cleanse((char *)json_string_value(at), json_string_length(at));
  json_decref(j);
  if (w.body.p) OPENSSL_cleanse(w.body.p, w.body.len);
  ak_buf_free(&w.body);
  return out;
}

/* "Authorization: Bearer <token>" for s into line ("" for auth none). 0, or -1 when no
 * token can be had. Worker thread. */
static int bearer(const ps_sink_t *s, char *line, size_t cap) {
  line[0] = '\0';
  if (s->auth == AUTH_NONE) return 0;
  if (s->auth == AUTH_TOKEN) {
    snprintf(line, cap, "Authorization: Bearer %s", s->token);
    return 0;
  }
  pthread_mutex_lock(&T.mu);
  bool fresh = T.token && ak_mono_ns() < T.until;
  pthread_mutex_unlock(&T.mu);
  /* a token with no more than the margin left is used for the request that fetched it */
  if (!fresh && token_fetch(s->httpc) != 0) return -1;
  pthread_mutex_lock(&T.mu);
  int rc = T.token ? 0 : -1;
  if (T.token) snprintf(line, cap, "Authorization: Bearer %s", T.token);
  pthread_mutex_unlock(&T.mu);
  return rc;
}

/* ---- the worker --------------------------------------------------------------------------- */

static void answer(ak_sink_done_fn done, void *ctx, ak_sink_result_t r, const char *reason) {
  ak_sink_outcome_t out = {.result = r};
  snprintf(out.reason, sizeof out.reason, "%s", reason ? reason : "");
  done(ctx, &out);
}

static void job_free(ak_sink_job_t *base) {
  ps_job_t *j = (ps_job_t *)base;
  free(j->body);
  free(j);
}

static void job_fail(ak_sink_job_t *base, const char *why) {
  ps_job_t *j = (ps_job_t *)base;
  answer(j->cell.done, j->cell.ctx, AK_SINK_RETRY, why);
}

/* The last instance is gone and the worker joined: the cached token goes with it. */
static void token_forget(void) {
  pthread_mutex_lock(&T.mu);
  if (T.token) {
    OPENSSL_cleanse(T.token, strlen(T.token));
    free(T.token);
    T.token = NULL;
  }
  T.until = 0;
  pthread_mutex_unlock(&T.mu);
}

static void on_response(void *ctx, const ak_httpc_resp_t *rs);

static bool egress_allows(void *ctx, const struct sockaddr *sa, char *why, size_t whylen) {
  if (ak_egress_addr_allowed(ctx, sa)) return true;
  ak_egress_refusal(sa, why, whylen);
  return false;
}

static void submit(ak_sink_job_t *base) {
  ps_job_t *j = (ps_job_t *)base;
  ps_sink_t *s = j->base.owner;
  char auth[PS_TOKEN_MAX + 32];
  if (bearer(s, auth, sizeof auth) != 0) {
    answer(j->cell.done, j->cell.ctx, AK_SINK_RETRY, "token unavailable");
    return;
  }
  const char *lines[2] = {"Content-Type: application/json"};
  size_t n = 1;
  if (auth[0]) lines[n++] = auth;
  j->cell.metadata = s->auth == AUTH_METADATA;
  ak_httpc_req_t rq = {
    .method = "POST",
    .url = s->url,
    .headers = lines,
    .nheaders = n,
    .body = j->body,
    .body_len = j->body_len,
    .timeout_ms = s->timeout_ms,
    .max_response_bytes = PS_RESP_MAX,
    .keep_body = true,
    .addr_ok = s->egress ? egress_allows : NULL,
    .addr_ctx = (void *)s->egress,
    .owner = s,
    .user = &j->cell,
    .user_len = sizeof j->cell,
  };
  int rc = ak_httpc_submit(s->httpc, &rq, on_response, NULL);
  OPENSSL_cleanse(auth, sizeof auth);
  if (rc != 0)
    answer(j->cell.done, j->cell.ctx, AK_SINK_RETRY,
           rc == AK_HTTPC_BUSY ? "busy" : rc == AK_HTTPC_STOPPED ? "sink stopped" : ak_httpc_strerror(rc));
}

/* This file's one worker thread and its bounded queue (sinks/worker.h). */
static ak_sink_worker_t W = AK_SINK_WORKER_INIT(submit, job_fail, job_free, token_forget, PS_QUEUE_MAX);

/* ---- outcome ------------------------------------------------------------------------------ */

static void outcome_for(const ak_httpc_resp_t *rs, ak_sink_outcome_t *out) {
  json_t *j = rs->body && rs->body_bytes && !rs->truncated ? json_loadb((const char *)rs->body, rs->body_bytes, 0, NULL)
                                                           : NULL;
  out->result = AK_SINK_RETRY;
  if (rs->status == 200) {
    json_t *ids = json_object_get(j, "messageIds");
    if (json_is_array(ids) && json_array_size(ids) == 1 && json_string_length(json_array_get(ids, 0)) > 0)
      out->result = AK_SINK_OK;
    else
      snprintf(out->reason, sizeof out->reason, "bad reply");
  } else {
    const char *st = json_string_value(json_object_get(json_object_get(j, "error"), "status"));
    char code[48];
    size_t k = 0;
    for (; st && st[k] && k + 1 < sizeof code; k++)
      code[k] = (st[k] >= 'A' && st[k] <= 'Z') || st[k] == '_' ? st[k] : '?';
    code[k] = '\0';
    if (!code[0]) {
      snprintf(out->reason, sizeof out->reason, "http %ld", rs->status);
    } else {
      snprintf(out->reason, sizeof out->reason, "pubsub %s", code);
      if (!strcmp(code, "INVALID_ARGUMENT")) out->result = AK_SINK_PERMANENT;
    }
  }
  json_decref(j);
}

static void on_response(void *ctx, const ak_httpc_resp_t *rs) {
  (void)ctx;
  const ps_cell_t *cell = rs->user;
  ak_sink_outcome_t out = {.result = AK_SINK_RETRY};
  switch (rs->result) {
  case AK_HTTPC_OK:
    if (rs->status == 401 && cell->metadata) token_drop();
    outcome_for(rs, &out);
    break;
  case AK_HTTPC_REFUSED:
    out.result = AK_SINK_PERMANENT;
    snprintf(out.reason, sizeof out.reason, "%s", rs->why);
    break;
  case AK_HTTPC_CANCELLED:
    snprintf(out.reason, sizeof out.reason, "sink stopped");
    break;
  default:
    snprintf(out.reason, sizeof out.reason, "%s", rs->why);
    break;
  }
  cell->done(cell->ctx, &out);
}

/* ---- deliver ------------------------------------------------------------------------------ */

static void ps_deliver(void *self, const ak_sink_attempt_t *att, void *ctx, ak_sink_done_fn done) {
  ps_sink_t *s = self;
  char reason[128];
  if (s->egress && !ak_egress_url_allowed(s->egress, s->url, reason, sizeof reason)) {
    answer(done, ctx, AK_SINK_PERMANENT, reason);
    return;
  }
  bool by_claim = ak_sink_by_claim(att, s->inline_max);
  if (by_claim && !att->claim_ref) {
    answer(done, ctx, AK_SINK_RETRY, "claim_missing");
    return;
  }
  ak_buf_t msg = AK_BUF_INIT;
  json_t *req = NULL;
  char *b64 = NULL, *body = NULL;
  if (ak_sink_message_encode(att, by_claim, &msg) != 0) goto oom;
  ak_sink_meta_scratch_t sc;
  ak_sink_meta_t meta[AK_SINK_META_MAX];
  size_t nmeta = ak_sink_metadata(att, false, &sc, meta);
  size_t size = msg.len + (s->ordering_key ? strlen(s->ordering_key) : 0);
  json_t *attrs = json_object();
  json_t *one = json_object();
  req = json_pack("{s:[o]}", "messages", one);
  if (!attrs || !one || !req) {
    json_decref(attrs);
    goto oom;
  }
  if (json_object_set_new(one, "attributes", attrs) != 0) goto oom;
  for (size_t i = 0; i < nmeta; i++) {
    json_t *v = meta[i].value_len ? json_stringn(meta[i].value, meta[i].value_len) : NULL;
    if (!v) continue; /* empty, or not text JSON can carry: the body has it */
    if (json_object_set_new(attrs, meta[i].name, v) != 0) goto oom;
    size += strlen(meta[i].name) + meta[i].value_len;
  }
  if (size > s->max_bytes) {
    snprintf(reason, sizeof reason, "message too large (%zu > %zu bytes)", size, s->max_bytes);
    json_decref(req);
    ak_buf_free(&msg);
    answer(done, ctx, AK_SINK_PERMANENT, reason);
    return;
  }
  b64 = malloc(4 * ((msg.len + 2) / 3) + 1);
  if (!b64) goto oom;
  int bl = EVP_EncodeBlock((unsigned char *)b64, (const unsigned char *)msg.p, (int)msg.len);
  if (bl < 0 || json_object_set_new(one, "data", json_stringn(b64, (size_t)bl)) != 0) goto oom;
  if (s->ordering_key && json_object_set_new(one, "orderingKey", json_string(s->ordering_key)) != 0) goto oom;
  body = json_dumps(req, JSON_COMPACT);
  if (!body) goto oom;
  ps_job_t *j = calloc(1, sizeof *j);
  if (!j) goto oom;
  j->base.owner = s;
  j->cell.done = done;
  j->cell.ctx = ctx;
  j->body = body;
  j->body_len = strlen(body);
  free(b64);
  json_decref(req);
  ak_buf_free(&msg);
  ak_sink_worker_enqueue(&W, &j->base);
  return;
oom:
  free(b64);
  free(body);
  json_decref(req);
  ak_buf_free(&msg);
  answer(done, ctx, AK_SINK_RETRY, "out of memory");
}

/* ---- create / destroy --------------------------------------------------------------------- */

static void ps_free(ps_sink_t *s) {
  if (s->owned_httpc) ak_httpc_free(s->owned_httpc);
  ak_egress_free(s->owned_egress);
  if (s->token) {
    OPENSSL_cleanse(s->token, strlen(s->token));
    free(s->token);
  }
  free(s->url);
  free(s->endpoint);
  free(s->ordering_key);
  free(s);
}

static void ps_destroy(void *self) {
  ps_sink_t *s = self;
  if (!s) return;
  ak_sink_worker_unref(&W, s);
  if (!s->owned_httpc && s->httpc) ak_httpc_cancel(s->httpc, s);
  ps_free(s);
}

/* Google's rules, loosely: a project id (lowercase letters, digits, '-', and the legacy
 * "domain:" prefix) and a topic id (a letter, then letters, digits and -_.~+%, 3 to 255). */
static bool project_ok(const char *p) {
  size_t n = strlen(p);
  if (n == 0 || n > 100) return false;
  for (; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '.' || *p == ':')) return false;
  return true;
}

static bool topic_ok(const char *t) {
  size_t n = strlen(t);
  if (n < 3 || n > 255 || !((t[0] >= 'a' && t[0] <= 'z') || (t[0] >= 'A' && t[0] <= 'Z')) ||
      !strncasecmp(t, "goog", 4))
    return false;
  for (; *t; t++)
    if (!((*t >= 'a' && *t <= 'z') || (*t >= 'A' && *t <= 'Z') || (*t >= '0' && *t <= '9') || strchr("-_.~+%", *t)))
      return false;
  return true;
}

static bool is_http_url(const char *u) { return !strncmp(u, "https://", 8) || !strncmp(u, "http://", 7); }

static bool default_endpoint(const char *ep) {
  size_t n = strlen(ep);
  while (n && ep[n - 1] == '/') n--;
  return n == strlen(PS_DEFAULT_ENDPOINT) && !strncmp(ep, PS_DEFAULT_ENDPOINT, n);
}

/* The rules create and check share; the first problem into err ("key: ..."). */
static int opts_problem(const char *project, const char *topic, const char *endpoint, int auth, const char *token,
                        bool guarded, char *err, size_t errlen) {
  if (!project_ok(project)) {
    snprintf(err, errlen, "project: not a project id (lowercase letters, digits, '-')");
    return -1;
  }
  if (!topic_ok(topic)) {
    snprintf(err, errlen, "topic: not a topic id (a letter, then letters, digits, -_.~+%%; 3-255; not goog...)");
    return -1;
  }
  if (!is_http_url(endpoint) || strpbrk(endpoint, "?#@ ")) {
    snprintf(err, errlen, "endpoint: not an http(s):// origin");
    return -1;
  }
  if (auth == AUTH_TOKEN && !token_ok(token)) {
    snprintf(err, errlen, "token: required when auth is token (visible ASCII, at most %d bytes)", PS_TOKEN_MAX);
    return -1;
  }
  if (auth != AUTH_TOKEN && token) {
    snprintf(err, errlen, "token: only with auth: token");
    return -1;
  }
  if (guarded && auth == AUTH_METADATA && !default_endpoint(endpoint)) {
    snprintf(err, errlen, "auth: metadata sends the node's own token; a guarded sink may do that only to %s",
             PS_DEFAULT_ENDPOINT);
    return -1;
  }
  return 0;
}

static void *ps_create(const json_t *opts, const ak_sink_ctx_t *sctx, char *err, size_t errlen) {
  ps_sink_t *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  ps_opts_t o = {0};
  json_t *checked = NULL;
  if (ak_opt_bind_checked(ps_rows, opts, &o, &checked, err, errlen) != 0) {
    free(s);
    return NULL;
  }
  bool guarded = !(sctx && sctx->trusted);
  int rc = opts_problem(o.project, o.topic, o.endpoint, o.auth, o.token, guarded, err, errlen);
  if (rc == 0) {
    s->auth = o.auth;
    s->inline_max = ak_sink_inline_max_opt(checked);
    s->max_bytes = (size_t)o.max_message_bytes;
    s->timeout_ms = (long)o.timeout_ms;
    size_t el = strlen(o.endpoint);
    while (el && o.endpoint[el - 1] == '/') el--;
    ak_buf_t u = AK_BUF_INIT;
    ak_buf_printf(&u, "%.*s/v1/projects/%s/topics/%s:publish", (int)el, o.endpoint, o.project, o.topic);
    s->url = ak_buf_take(&u, NULL);
    s->endpoint = strndup(o.endpoint, el);
    s->token = o.token ? strdup(o.token) : NULL;
    s->ordering_key = o.ordering_key ? strdup(o.ordering_key) : NULL;
    if (!s->url || !s->endpoint || (o.token && !s->token) || (o.ordering_key && !s->ordering_key)) {
      snprintf(err, errlen, "out of memory");
      rc = -1;
    }
  }
  ak_opt_release(ps_rows, &o);
  json_decref(checked);
  if (rc == 0) {
    s->httpc = sctx ? sctx->httpc : NULL;
    if (!s->httpc) {
      s->owned_httpc = ak_httpc_new(&(ak_httpc_opts_t){.name = "ak-pubsub-sink"}, err, errlen);
      s->httpc = s->owned_httpc;
      if (!s->httpc) rc = -1;
    }
  }
  if (rc == 0 && guarded) {
    s->egress = sctx ? sctx->egress : NULL;
    if (!s->egress) {
      s->owned_egress = ak_egress_new(NULL, 0, false, err, errlen);
      s->egress = s->owned_egress;
      if (!s->egress) rc = -1;
    }
  }
  if (rc != 0) {
    ps_free(s);
    return NULL;
  }
  ak_sink_worker_ref(&W);
  return s;
}

static int64_t ps_inline_max(const void *self) { return ((const ps_sink_t *)self)->inline_max; }

/* ---- config rules ------------------------------------------------------------------------- */

static void ps_check(ak_check_t *c, const char *path, json_t *sink, const json_t *root) {
  const char *project = json_string_value(json_object_get(sink, "project"));
  const char *topic = json_string_value(json_object_get(sink, "topic"));
  if (!project || !topic) return; /* their rows report it */
  const char *ep = json_string_value(json_object_get(sink, "endpoint"));
  if (!ep) ep = PS_DEFAULT_ENDPOINT;
  const char *a = json_string_value(json_object_get(sink, "auth"));
  int auth = !a || !strcmp(a, "metadata") ? AUTH_METADATA : !strcmp(a, "token") ? AUTH_TOKEN : AUTH_NONE;
  bool guarded = ak_egress_tree_guards(root);
  char why[200];
  if (opts_problem(project, topic, ep, auth, json_string_value(json_object_get(sink, "token")), guarded, why,
                   sizeof why) != 0) {
    ak_check_error(c, "%s.%s", path, why);
    return;
  }
  if (!guarded) return;
  ak_egress_t *g = ak_egress_from_tree(root);
  if (g && !ak_egress_url_allowed(g, ep, why, sizeof why))
    ak_check_error(c, "%s.endpoint: http:// is refused for a guarded sink; use https:// or set egress.allow_http: true",
                   path);
  ak_egress_free(g);
}

const ak_sink_vtable_t ak_sink_google_pubsub = {
  .plugin = {.type = "google_pubsub", .doc = "Google Cloud Pub/Sub topics.publish of the SinkMessageV1",
             .options = ps_rows, .check = ps_check},
  .durable = true,
  .create = ps_create,
  .deliver = ps_deliver,
  .destroy = ps_destroy,
  .inline_max = ps_inline_max,
};
