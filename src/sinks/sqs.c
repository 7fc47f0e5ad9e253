/* The `sqs` sink: one SigV4-signed SendMessage (AWS JSON 1.0 protocol) per delivery, the
 * SinkMessageV1 as MessageBody and the common metadata set as String attributes. Owns its
 * option rows and config rules, the request body (FIFO group and deduplication ids), the
 * size rule, the confirm rule (HTTP 200 with a MessageId and the MD5 of the body sent) and
 * the mapping of SQS errors to outcomes. Credentials come from blob/awscreds.h (config
 * block, AWS_* environment, web identity, IMDSv2; cached there); libcurl signs
 * (CURLOPT_AWS_SIGV4, service sqs) through the node's shared HTTP client (net/httpc.h).
 *
 * Stateless: no connection of its own (httpc keeps and reuses connections). Looking up
 * credentials may wait on the network, so deliver() never does it: it encodes the request
 * and queues it for the sqs sinks' one worker thread (sinks/worker.h: started with the
 * first delivery, stopped with the last instance), which gets the credentials and
 * submits; the answer arrives on a client thread. The queue is bounded: beyond it a
 * delivery is answered "busy". Never hand-signs, never puts a credential, a signature, the queue URL or a
 * response body into a reason or a log line, never creates a queue, never retries on its
 * own (dispatch owns retries). destroy answers every delivery of the instance still under
 * way once, "sink stopped", and returns after the last of those answers.
 *
 * Egress: a guarded sink (ak_sink_ctx_t.trusted false) sends only to https:// (http://
 * with egress.allow_http) and the client checks every address it connects to against the
 * guard, as the http sink does; a refusal is permanent. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <curl/curl.h>
#include <jansson.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include "blob/awscreds.h"
#include "core/buf.h"
#include "core/config.h"
#include "core/envelope.h"
#include "net/httpc.h"
#include "sinks/egress.h"
#include "sinks/message.h"
#include "sinks/sink.h"
#include "sinks/worker.h"

#define SQS_QUEUE_MAX 1024       /* deliveries waiting for the worker, all instances */
#define SQS_RESP_MAX 65536       /* a SendMessage answer or an error document */
#define SQS_ID_MAX 128           /* MessageGroupId, MessageDeduplicationId */

typedef struct sqs_opts {
  const char *queue_url;
  const char *region;
  const char *endpoint;
  const char *message_group_id;
  int64_t inline_max_bytes;
  int64_t max_message_bytes;
  int64_t timeout_ms;
  const char *access_key_id;
  const char *secret_access_key;
  const char *session_token;
} sqs_opts_t;

static const ak_opt_t sqs_rows[] = {
  {.key = "queue_url", .type = AK_OPT_STRING, .flags = AK_OPTF_REQUIRED | AK_OPTF_HAS_MIN, .min = 1,
   .doc = "the queue's URL (https://sqs.REGION.amazonaws.com/ACCOUNT/NAME); a name ending in .fifo is a FIFO queue",
   AK_AT(sqs_opts_t, queue_url)},
  {.key = "region", .type = AK_OPT_STRING, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN, .min = 1,
   .doc = "the signing region; absent: taken from an AWS queue_url host (sqs.REGION.amazonaws.com)",
   AK_AT(sqs_opts_t, region)},
  {.key = "endpoint", .type = AK_OPT_STRING, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN, .min = 1,
   .doc = "where SendMessage is POSTed; absent: the queue URL's origin", AK_AT(sqs_opts_t, endpoint)},
  {.key = "message_group_id", .type = AK_OPT_STRING, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX,
   .min = 1, .max = SQS_ID_MAX,
   .doc = "MessageGroupId; FIFO default <tenant>/<source>; a standard queue gets one only when set",
   AK_AT(sqs_opts_t, message_group_id)},
  AK_SINK_INLINE_MAX_ROW(sqs_opts_t, inline_max_bytes),
  {.key = "max_message_bytes", .type = AK_OPT_INT, .def = "1048576", .min = 1, .max = 1048576,
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX,
   .doc = "body + attribute names, types and values above this: dead-lettered before sending",
   AK_AT(sqs_opts_t, max_message_bytes)},
  {.key = "timeout_ms", .type = AK_OPT_INT, .def = "5000", .min = 1, .max = 3600000,
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX, .doc = "connect + response timeout of one SendMessage",
   AK_AT(sqs_opts_t, timeout_ms)},
  {.key = "access_key_id", .type = AK_OPT_STRING, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN, .min = 1,
   .doc = "static credentials (with secret_access_key); absent: AWS_* env, web identity, IMDSv2",
   AK_AT(sqs_opts_t, access_key_id)},
  {.key = "secret_access_key", .type = AK_OPT_STRING, .flags = AK_OPTF_NULLABLE | AK_OPTF_SECRET | AK_OPTF_HAS_MIN,
   .min = 1, .doc = "static credentials' secret (with access_key_id)", AK_AT(sqs_opts_t, secret_access_key)},
  {.key = "session_token", .type = AK_OPT_STRING, .flags = AK_OPTF_NULLABLE | AK_OPTF_SECRET | AK_OPTF_HAS_MIN,
   .min = 1, .doc = "static credentials' session token", AK_AT(sqs_opts_t, session_token)},
  {0},
};

typedef struct sqs_sink {
  char *queue_url;
  char *post_url;           /* endpoint + "/" */
  char sigv4[96];           /* "aws:amz:REGION:sqs" */
  char *group_id;           /* message_group_id, or NULL */
  bool fifo;
  int64_t inline_max;       /* -1: never by claim */
  size_t max_bytes;
  long timeout_ms;
  ak_awscreds_t *creds;
  const ak_egress_t *egress; /* NULL: trusted */
  ak_egress_t *owned_egress;
  ak_httpc_t *httpc;
  ak_httpc_t *owned_httpc;
} sqs_sink_t;

/* What the completion needs, carried by the request: the dispatcher's callback and the
 * MD5 of the MessageBody sent. */
typedef struct {
  ak_sink_done_fn done;
  void *ctx;
  uint8_t md5[16];
} sqs_cell_t;
_Static_assert(sizeof(sqs_cell_t) <= AK_HTTPC_USER_MAX, "the cell rides in the request");

/* One delivery waiting for the worker. */
typedef struct sqs_job {
  ak_sink_job_t base; /* base.owner: the sqs_sink_t */
  sqs_cell_t cell;
  char *body; /* the SendMessage request */
  size_t body_len;
} sqs_job_t;

/* ---- the worker: credentials (may wait on the network) and submit ------------------------ */

static void answer(ak_sink_done_fn done, void *ctx, ak_sink_result_t r, const char *reason) {
  ak_sink_outcome_t out = {.result = r};
  snprintf(out.reason, sizeof out.reason, "%s", reason ? reason : "");
  done(ctx, &out);
}

static void job_free(ak_sink_job_t *base) {
  sqs_job_t *j = (sqs_job_t *)base;
  free(j->body);
  free(j);
}

static void job_fail(ak_sink_job_t *base, const char *why) {
  sqs_job_t *j = (sqs_job_t *)base;
  answer(j->cell.done, j->cell.ctx, AK_SINK_RETRY, why);
}

static void on_response(void *ctx, const ak_httpc_resp_t *rs);
static bool egress_allows(void *ctx, const struct sockaddr *sa, char *why, size_t whylen);

static void submit(ak_sink_job_t *base) {
  sqs_job_t *j = (sqs_job_t *)base;
  sqs_sink_t *s = j->base.owner;
  ak_awscreds_val_t cv;
  char cerr[256];
  if (ak_awscreds_get(s->creds, &cv, cerr, sizeof cerr) != 0) {
    answer(j->cell.done, j->cell.ctx, AK_SINK_RETRY, "no credentials");
    return;
  }
  char userpwd[400];
  char token_line[sizeof cv.token + 32];
  snprintf(userpwd, sizeof userpwd, "%s:%s", cv.key_id, cv.secret);
  const char *lines[4] = {"Content-Type: application/x-amz-json-1.0", "X-Amz-Target: AmazonSQS.SendMessage"};
  size_t n = 2;
  if (cv.token[0]) {
    snprintf(token_line, sizeof token_line, "X-Amz-Security-Token: %s", cv.token);
    lines[n++] = token_line;
  }
  static const char *const want[] = {"x-amzn-query-error"};
  ak_httpc_req_t rq = {
    .method = "POST",
    .url = s->post_url,
    .headers = lines,
    .nheaders = n,
    .body = j->body,
    .body_len = j->body_len,
    .timeout_ms = s->timeout_ms,
    .max_response_bytes = SQS_RESP_MAX,
    .keep_body = true,
    .want_headers = want,
    .nwant = 1,
    .addr_ok = s->egress ? egress_allows : NULL,
    .addr_ctx = (void *)s->egress,
    .owner = s,
    .user = &j->cell,
    .user_len = sizeof j->cell,
    .aws_sigv4 = s->sigv4,
    .userpwd = userpwd,
  };
  int rc = ak_httpc_submit(s->httpc, &rq, on_response, NULL);
  OPENSSL_cleanse(userpwd, sizeof userpwd);
  if (cv.token[0]) OPENSSL_cleanse(token_line, sizeof token_line);
  ak_awscreds_wipe(&cv);
  if (rc != 0)
    answer(j->cell.done, j->cell.ctx, AK_SINK_RETRY,
           rc == AK_HTTPC_BUSY ? "busy" : rc == AK_HTTPC_STOPPED ? "sink stopped" : ak_httpc_strerror(rc));
}

/* This file's one worker thread and its bounded queue (sinks/worker.h). */
static ak_sink_worker_t W = AK_SINK_WORKER_INIT(submit, job_fail, job_free, NULL, SQS_QUEUE_MAX);

/* ---- outcome ---------------------------------------------------------------------------- */

static bool egress_allows(void *ctx, const struct sockaddr *sa, char *why, size_t whylen) {
  if (ak_egress_addr_allowed(ctx, sa)) return true;
  ak_egress_refusal(sa, why, whylen);
  return false;
}

/* An error code reduced to the characters a code has ("" when it has none). */
static void clean_code(const char *src, size_t n, char *code, size_t cap) {
  size_t k = 0;
  for (size_t i = 0; i < n && k + 1 < cap; i++) {
    char c = src[i];
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_';
    code[k++] = ok ? c : '?';
  }
  code[k] = '\0';
}

/* The SQS error code of an answer: the JSON protocol's __type ("com.amazonaws.sqs#Code"),
 * else the x-amzn-query-error header ("Code;Sender"). "" when it is not an SQS error. */
static void error_code(const json_t *j, const char *query_error, char *code, size_t cap) {
  code[0] = '\0';
  const char *t = json_string_value(json_object_get(j, "__type"));
  if (t && *t) {
    const char *h = strrchr(t, '#');
    h = h ? h + 1 : t;
    clean_code(h, strcspn(h, ":"), code, cap);
  }
  if (!code[0] && query_error && *query_error) clean_code(query_error, strcspn(query_error, ";"), code, cap);
}

static bool hex_equals(const char *hex, const uint8_t md5[16]) {
  static const char digits[] = "0123456789abcdef";
  if (!hex || strlen(hex) != 32) return false;
  for (int i = 0; i < 16; i++) {
    char hi = digits[md5[i] >> 4], lo = digits[md5[i] & 15];
    char a = (char)(hex[2 * i] | 0x20), b = (char)(hex[2 * i + 1] | 0x20);
    if (a != hi || b != lo) return false;
  }
  return true;
}

static void outcome_for(const ak_httpc_resp_t *rs, const uint8_t md5[16], ak_sink_outcome_t *out) {
  json_t *j = rs->body && rs->body_bytes && !rs->truncated ? json_loadb((const char *)rs->body, rs->body_bytes, 0, NULL)
                                                           : NULL;
  out->result = AK_SINK_RETRY;
  if (rs->status == 200) {
    const char *mid = json_string_value(json_object_get(j, "MessageId"));
    const char *sum = json_string_value(json_object_get(j, "MD5OfMessageBody"));
    if (!mid || !*mid || !sum) snprintf(out->reason, sizeof out->reason, "bad reply");
    else if (!hex_equals(sum, md5)) snprintf(out->reason, sizeof out->reason, "md5_mismatch");
    else out->result = AK_SINK_OK;
  } else {
    char code[64];
    error_code(json_is_object(j) ? j : NULL, rs->headers[0], code, sizeof code);
    if (!code[0]) {
      snprintf(out->reason, sizeof out->reason, "http %ld", rs->status);
    } else {
      snprintf(out->reason, sizeof out->reason, "sqs %s", code);
      if (!strcmp(code, "InvalidMessageContents") || !strcmp(code, "InvalidParameterValue"))
        out->result = AK_SINK_PERMANENT;
    }
  }
  json_decref(j);
}

/* The client's completion -> the delivery's outcome. Client thread. */
static void on_response(void *ctx, const ak_httpc_resp_t *rs) {
  (void)ctx;
  const sqs_cell_t *cell = rs->user;
  ak_sink_outcome_t out = {.result = AK_SINK_RETRY};
  switch (rs->result) {
  case AK_HTTPC_OK:
    outcome_for(rs, cell->md5, &out);
    break;
  case AK_HTTPC_REFUSED: /* the egress guard: retrying cannot change its answer */
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

/* ---- deliver ---------------------------------------------------------------------------- */

static int put_str(json_t *o, const char *key, const char *v, size_t n) {
  json_t *sv = json_stringn(v, n);
  return sv && json_object_set_new(o, key, sv) == 0 ? 0 : -1;
}

static void sqs_deliver(void *self, const ak_sink_attempt_t *att, void *ctx, ak_sink_done_fn done) {
  sqs_sink_t *s = self;
  char reason[128];
  if (s->egress && !ak_egress_url_allowed(s->egress, s->post_url, reason, sizeof reason)) {
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
  char *body = NULL;
  sqs_job_t *j = NULL;
  if (ak_sink_message_encode(att, by_claim, &msg) != 0) goto oom;

  ak_sink_meta_scratch_t sc;
  ak_sink_meta_t meta[AK_SINK_META_MAX];
  size_t nmeta = ak_sink_metadata(att, false, &sc, meta);
  size_t size = msg.len;
  req = json_object();
  json_t *attrs = json_object();
  if (!req || !attrs) {
    json_decref(attrs);
    goto oom;
  }
  if (json_object_set_new(req, "MessageAttributes", attrs) != 0) goto oom;
  if (put_str(req, "QueueUrl", s->queue_url, strlen(s->queue_url)) != 0 ||
      put_str(req, "MessageBody", msg.p, msg.len) != 0)
    goto oom;
  for (size_t i = 0; i < nmeta; i++) {
    /* SQS refuses an empty attribute value; a value JSON cannot carry stays in the body */
    json_t *v = meta[i].value_len ? json_stringn(meta[i].value, meta[i].value_len) : NULL;
    if (!v) continue;
    json_t *a = json_pack("{s:s,s:o}", "DataType", "String", "StringValue", v);
    if (!a || json_object_set_new(attrs, meta[i].name, a) != 0) goto oom;
    size += strlen(meta[i].name) + strlen("String") + meta[i].value_len;
  }
  if (size > s->max_bytes) {
    snprintf(reason, sizeof reason, "message too large (%zu > %zu bytes)", size, s->max_bytes);
    json_decref(req);
    ak_buf_free(&msg);
    answer(done, ctx, AK_SINK_PERMANENT, reason);
    return;
  }
  if (s->group_id) {
    if (put_str(req, "MessageGroupId", s->group_id, strlen(s->group_id)) != 0) goto oom;
  } else if (s->fifo) {
    char g[160];
    int gn = snprintf(g, sizeof g, "%s/%s", sc.tenant, sc.source);
    if (put_str(req, "MessageGroupId", g, (size_t)gn < sizeof g ? (size_t)gn : sizeof g - 1) != 0) goto oom;
  }
  if (s->fifo) {
    char d[SQS_ID_MAX + 1];
    if (att->replay_id) snprintf(d, sizeof d, "%s:replay:%s", sc.id, att->replay_id);
    else snprintf(d, sizeof d, "%s", sc.id);
    if (put_str(req, "MessageDeduplicationId", d, strlen(d)) != 0) goto oom;
  }
  size_t blen = 0;
  body = json_dumps(req, JSON_COMPACT);
  if (!body) goto oom;
  blen = strlen(body);
  j = calloc(1, sizeof *j);
  if (!j) goto oom;
  unsigned int mdlen = 0;
  if (!EVP_Digest(msg.p, msg.len, j->cell.md5, &mdlen, EVP_md5(), NULL) || mdlen != 16) {
    free(j);
    j = NULL;
    snprintf(reason, sizeof reason, "md5 unavailable in libcrypto");
    goto fail;
  }
  j->base.owner = s;
  j->cell.done = done;
  j->cell.ctx = ctx;
  j->body = body;
  j->body_len = blen;
  json_decref(req);
  ak_buf_free(&msg);
  ak_sink_worker_enqueue(&W, &j->base);
  return;
oom:
  snprintf(reason, sizeof reason, "out of memory");
fail:
  free(body);
  json_decref(req);
  ak_buf_free(&msg);
  answer(done, ctx, AK_SINK_RETRY, reason);
}

/* ---- create / destroy ------------------------------------------------------------------- */

static void sqs_free(sqs_sink_t *s) {
  ak_awscreds_free(s->creds);
  if (s->owned_httpc) ak_httpc_free(s->owned_httpc);
  ak_egress_free(s->owned_egress);
  free(s->queue_url);
  free(s->post_url);
  free(s->group_id);
  free(s);
}

static void sqs_destroy(void *self) {
  sqs_sink_t *s = self;
  if (!s) return;
  ak_sink_worker_unref(&W, s);
  /* requests already with the client: answered "sink stopped" by their completion */
  if (!s->owned_httpc && s->httpc) ak_httpc_cancel(s->httpc, s);
  sqs_free(s);
}

/* scheme://host[:port] of url into a malloc'd string; NULL when url is not http(s). */
static char *url_origin(const char *url, char **host_out) {
  CURLU *h = curl_url();
  char *scheme = NULL, *host = NULL, *port = NULL, *out = NULL;
  if (!h || curl_url_set(h, CURLUPART_URL, url, 0) != CURLUE_OK) goto done;
  if (curl_url_get(h, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK || !scheme ||
      (strcmp(scheme, "https") && strcmp(scheme, "http")))
    goto done;
  if (curl_url_get(h, CURLUPART_HOST, &host, 0) != CURLUE_OK || !host || !*host) goto done;
  curl_url_get(h, CURLUPART_PORT, &port, 0);
  size_t cap = strlen(scheme) + strlen(host) + (port ? strlen(port) : 0) + 8;
  if ((out = malloc(cap))) snprintf(out, cap, "%s://%s%s%s", scheme, host, port ? ":" : "", port ? port : "");
  if (host_out) *host_out = strdup(host);
done:
  curl_free(scheme);
  curl_free(host);
  curl_free(port);
  curl_url_cleanup(h);
  return out;
}

/* The region of an AWS queue host: sqs.REGION.amazonaws.com[.cn] or REGION.queue.amazonaws.com. */
static bool region_from_host(const char *host, char *out, size_t cap) {
  const char *a = NULL, *b = NULL;
  if (!host) return false;
  if (!strncasecmp(host, "sqs.", 4) && (b = strstr(host + 4, ".amazonaws.com"))) a = host + 4;
  else if ((b = strstr(host, ".queue.amazonaws.com"))) a = host;
  if (!a || b <= a || (size_t)(b - a) >= cap || memchr(a, '.', (size_t)(b - a))) return false;
  memcpy(out, a, (size_t)(b - a));
  out[b - a] = '\0';
  return true;
}

static bool ends_fifo(const char *url) {
  size_t n = strlen(url);
  while (n && url[n - 1] == '/') n--;
  return n >= 5 && !strncmp(url + n - 5, ".fifo", 5);
}

/* https:// to an AWS host: where a guarded sink may sign with the node's own credentials
 * (a tenant's endpoint must not receive requests signed as the node). */
static bool aws_https(const char *url) {
  char *host = NULL;
  char *o = url_origin(url, &host);
  bool ok = false;
  if (o && host && !strncmp(o, "https://", 8)) {
    size_t n = strlen(host);
    ok = (n > 14 && !strcasecmp(host + n - 14, ".amazonaws.com")) ||
         (n > 17 && !strcasecmp(host + n - 17, ".amazonaws.com.cn"));
  }
  free(o);
  free(host);
  return ok;
}

/* The rules create and check share; the first problem into err ("key: ..."). */
static int opts_problem(const char *queue_url, const char *region, const char *endpoint, const char *key_id,
                        const char *secret, const char *token, bool guarded, char *region_out, size_t rcap,
                        char *err, size_t errlen) {
  char *host = NULL;
  char *origin = url_origin(queue_url, &host);
  int rc = -1;
  if (!origin) {
    snprintf(err, errlen, "queue_url: not an http(s):// URL");
    goto done;
  }
  if (endpoint) {
    char *eo = url_origin(endpoint, NULL);
    free(eo);
    if (!eo) {
      snprintf(err, errlen, "endpoint: not an http(s):// URL");
      goto done;
    }
  }
  if (region) {
    snprintf(region_out, rcap, "%s", region);
    for (const char *p = region; *p; p++)
      if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-')) {
        snprintf(err, errlen, "region: letters, digits and '-' only");
        goto done;
      }
  } else if (!region_from_host(host, region_out, rcap)) {
    snprintf(err, errlen, "region: required (queue_url is not an AWS queue URL it could be read from)");
    goto done;
  }
  if (!key_id != !secret) {
    snprintf(err, errlen, "access_key_id and secret_access_key go together");
    goto done;
  }
  if (token && !key_id) {
    snprintf(err, errlen, "session_token requires access_key_id and secret_access_key");
    goto done;
  }
  if (guarded && !key_id && !aws_https(endpoint ? endpoint : queue_url)) {
    snprintf(err, errlen, "access_key_id: a guarded sink signs with the node's own credentials only toward "
                          "https://*.amazonaws.com; configure static credentials for another endpoint");
    goto done;
  }
  rc = 0;
done:
  free(origin);
  free(host);
  return rc;
}

static void *sqs_create(const json_t *opts, const ak_sink_ctx_t *sctx, char *err, size_t errlen) {
  sqs_sink_t *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  sqs_opts_t o = {0};
  json_t *checked = NULL;
  if (ak_opt_bind_checked(sqs_rows, opts, &o, &checked, err, errlen) != 0) {
    free(s);
    return NULL;
  }
  char region[64];
  bool guarded = !(sctx && sctx->trusted);
  int rc = opts_problem(o.queue_url, o.region, o.endpoint, o.access_key_id, o.secret_access_key, o.session_token,
                        guarded, region, sizeof region, err, errlen);
  if (rc == 0) {
    s->inline_max = ak_sink_inline_max_opt(checked);
    s->max_bytes = (size_t)o.max_message_bytes;
    s->timeout_ms = (long)o.timeout_ms;
    s->fifo = ends_fifo(o.queue_url);
    snprintf(s->sigv4, sizeof s->sigv4, "aws:amz:%s:sqs", region);
    char *origin = o.endpoint ? NULL : url_origin(o.queue_url, NULL);
    const char *ep = o.endpoint ? o.endpoint : origin;
    size_t el = ep ? strlen(ep) : 0;
    while (el && ep[el - 1] == '/') el--;
    s->post_url = ep ? malloc(el + 2) : NULL;
    if (s->post_url) snprintf(s->post_url, el + 2, "%.*s/", (int)el, ep);
    free(origin);
    s->queue_url = strdup(o.queue_url);
    s->group_id = o.message_group_id ? strdup(o.message_group_id) : NULL;
    s->httpc = sctx ? sctx->httpc : NULL;
    if (!s->httpc) {
      s->owned_httpc = ak_httpc_new(&(ak_httpc_opts_t){.name = "ak-sqs-sink"}, err, errlen);
      s->httpc = s->owned_httpc;
    }
    if (s->httpc)
      s->creds = ak_awscreds_new(o.access_key_id, o.secret_access_key, o.session_token, region, s->httpc, err, errlen);
    if (!s->post_url || !s->queue_url || (o.message_group_id && !s->group_id)) {
      snprintf(err, errlen, "out of memory");
      rc = -1;
    } else if (!s->httpc || !s->creds) {
      rc = -1;
    }
  }
  ak_opt_release(sqs_rows, &o);
  json_decref(checked);
  if (rc == 0 && guarded) {
    s->egress = sctx ? sctx->egress : NULL;
    if (!s->egress) {
      s->owned_egress = ak_egress_new(NULL, 0, false, err, errlen);
      s->egress = s->owned_egress;
      if (!s->egress) rc = -1;
    }
  }
  if (rc != 0) {
    sqs_free(s);
    return NULL;
  }
  ak_sink_worker_ref(&W);
  return s;
}

static int64_t sqs_inline_max(const void *self) { return ((const sqs_sink_t *)self)->inline_max; }

/* ---- config rules ----------------------------------------------------------------------- */

static void check_scheme(ak_check_t *c, const char *path, const char *key, const char *url, const ak_egress_t *g) {
  char why[128];
  if (url && g && !ak_egress_url_allowed(g, url, why, sizeof why))
    ak_check_error(c, "%s.%s: http:// is refused for a guarded sink; use https:// or set egress.allow_http: true",
                   path, key);
}

static void sqs_check(ak_check_t *c, const char *path, json_t *sink, const json_t *root) {
  const char *q = json_string_value(json_object_get(sink, "queue_url"));
  if (!q) return; /* its own row reports it */
  const char *ep = json_string_value(json_object_get(sink, "endpoint"));
  char region[64], why[160];
  if (opts_problem(q, json_string_value(json_object_get(sink, "region")), ep,
                   json_string_value(json_object_get(sink, "access_key_id")),
                   json_string_value(json_object_get(sink, "secret_access_key")),
                   json_string_value(json_object_get(sink, "session_token")), ak_egress_tree_guards(root), region,
                   sizeof region, why, sizeof why) != 0) {
    ak_check_error(c, "%s.%s", path, why);
    return;
  }
  if (!ak_egress_tree_guards(root)) return;
  ak_egress_t *g = ak_egress_from_tree(root);
  if (ep) check_scheme(c, path, "endpoint", ep, g);
  else check_scheme(c, path, "queue_url", q, g);
  ak_egress_free(g);
}

const ak_sink_vtable_t ak_sink_sqs = {
  .plugin = {.type = "sqs", .doc = "Amazon SQS SendMessage (SigV4, JSON 1.0) of the SinkMessageV1",
             .options = sqs_rows, .check = sqs_check},
  .durable = true,
  .create = sqs_create,
  .deliver = sqs_deliver,
  .destroy = sqs_destroy,
  .inline_max = sqs_inline_max,
};
