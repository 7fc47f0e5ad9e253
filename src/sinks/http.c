/* The `http` sink: POST/PUT/PATCH of the raw hook body to one URL. Owns its option rows,
 * Standard Webhooks delivery signing, the headers of a delivery and their precedence, the
 * status -> outcome mapping (Retry-After included) and, when it is guarded, the egress
 * policy of every address it connects to. The transport is the node's shared HTTP client
 * (net/httpc.h: its threads, connection caches and bound are described there). Never
 * follows a redirect, never retries on its own (dispatch owns retries), never reads more
 * than max_response_bytes of a response, never puts a secret, a header value or the URL
 * into an outcome reason, and never touches the store.
 *
 * Registered as ak_sink_http (registry.c). The egress guard and the HTTP client come in
 * ak_sink_ctx_t; both are borrowed and must outlive the sink. A NULL guard means the
 * default guard (no allow list, no http://), a NULL client a client of the sink's own
 * (threads named ak-http-sink...), both owned by the sink: a sink made by hand (a unit
 * test, a bench) works the same. destroy answers every delivery still under way once,
 * "sink stopped", and returns after the last of those answers.
 *
 * Headers, strongest first: the sink's identity (content-type, x-ankusa-*), then the
 * operator's `headers`, then the provider headers forward_headers lets through (sinks/
 * forward.h); a weaker header whose name a stronger one holds is dropped, so a receiver
 * never sees two answers to one question. With a secret, the three webhook-* signature
 * headers replace forwarded ones of those names. A value holding CR, LF or NUL is never
 * sent: that header is dropped. The signature's timestamp is the time deliver() is called.
 *
 * Which sinks are guarded (sinks/egress.h): a trusted sink (ak_sink_ctx_t.trusted: the
 * operator's config file) goes anywhere by http:// or https://, unchecked; every other one
 * is checked below, at config check (scheme, address literals) and at delivery.
 *
 * Egress pinning: the client asks the sink's policy (egress_allows) about each address
 * right before the socket for it is created, and again before a delivery goes out on a
 * kept connection. The address checked is therefore the address connected to, whatever
 * DNS answers next (rebinding); the client never goes through a proxy, which the check
 * would judge instead of the destination. */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <curl/curl.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include "core/config.h"
#include "core/envelope.h"
#include "core/header.h"
#include "net/httpc.h"
#include "sinks/egress.h"
#include "sinks/forward.h"
#include "sinks/sink.h"
#include "verify/whsec.h"

#define HTTP_MAX_SECRETS 8
#define HTTP_RETRY_AFTER_CAP_MS 3600000

/* The sink's options, bound from its rows (create checks the mapping it is given against
 * them, so a hand-made sink gets the same defaults and bounds as a configured one). */
typedef struct http_opts {
  const char *url;
  int method;                /* index in "post|put|patch" */
  const json_t *headers;     /* name -> value */
  int64_t timeout_ms;
  int64_t max_response_bytes;
  const json_t *secret;      /* a string or a list of 1..8, or NULL */
} http_opts_t;

static const char *const methods[] = {NULL /* POST: libcurl's default with a body */, "PUT", "PATCH"};

static const ak_opt_t http_opts[] = {
  {.key = "url", .type = AK_OPT_STRING, .flags = AK_OPTF_REQUIRED | AK_OPTF_HAS_MIN, .min = 1,
   .doc = "destination URL, http(s)://; a guarded sink (egress.*) needs https:// unless egress.allow_http",
   AK_AT(http_opts_t, url)},
  {.key = "method", .type = AK_OPT_ENUM, .def = "post", .enum_vals = "post|put|patch",
   .doc = "HTTP method of the delivery", AK_AT(http_opts_t, method)},
  {.key = "headers", .type = AK_OPT_ANY_MAP, .flags = AK_OPTF_SECRET,
   .doc = "extra request headers (name: value); x-ankusa-* and webhook-* names are the sink's own",
   AK_AT(http_opts_t, headers)},
  {.key = "timeout_ms", .type = AK_OPT_INT, .def = "5000", .min = 1, .max = 3600000,
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX, .doc = "connect + response timeout of one attempt",
   AK_AT(http_opts_t, timeout_ms)},
  {.key = "max_response_bytes", .type = AK_OPT_INT, .def = "65536", .min = 0, .max = 1073741824,
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX,
   .doc = "response body bytes read (and discarded) at most; only the status is used",
   AK_AT(http_opts_t, max_response_bytes)},
  {.key = "secret", .type = AK_OPT_SECRETS, .flags = AK_OPTF_SECRET | AK_OPTF_NULLABLE,
   .doc = "Standard Webhooks signing secret(s), whsec_<base64> or raw; one v1 signature each",
   AK_AT(http_opts_t, secret)},
  {0},
};

typedef struct http_sink {
  char *url;
  const char *method; /* NULL = POST */
  char **conf_headers; /* "name: value" lines */
  char **conf_names;   /* their names, to drop forwarded headers of the same name */
  size_t nconf_headers;
  long timeout_ms;
  size_t max_resp;
  uint8_t *keys[HTTP_MAX_SECRETS];
  size_t keylen[HTTP_MAX_SECRETS];
  size_t nkeys;
  EVP_MAC *mac;
  const ak_egress_t *egress;  /* NULL: trusted, unguarded */
  ak_egress_t *owned_egress;
  ak_httpc_t *httpc;       /* the node's (borrowed) or owned_httpc */
  ak_httpc_t *owned_httpc;
  char source_id[72];
} http_sink_t;

/* What a delivery's completion needs, carried by the request (ak_httpc_req_t.user): the
 * dispatcher's callback. */
typedef struct {
  ak_sink_done_fn done;
  void *ctx;
} http_cell_t;
_Static_assert(sizeof(http_cell_t) <= AK_HTTPC_USER_MAX, "the cell rides in the request");

/* ---- options ---------------------------------------------------------------------- */

static bool header_value_ok(const char *v) {
  for (const char *p = v; *p; p++)
    if (*p == '\r' || *p == '\n' || *p == '\0') return false;
  return true;
}

/* The header rules both the config check and create apply: a token name, a value without
 * a line break. The first problem into err ("headers.<name>: ..."); 0 when none. */
static int headers_problem(const json_t *h, char *err, size_t errlen) {
  const char *name;
  const json_t *hv;
  json_object_foreach((json_t *)h, name, hv) {
    if (!ak_header_name_ok(name, strlen(name))) {
      json_t *tmp = json_string(name);
      char *r = tmp ? ak_check_render(tmp, false) : NULL;
      snprintf(err, errlen, "headers: %s is not a header name", r ? r : "?");
      free(r);
      json_decref(tmp);
      return -1;
    }
    if (!json_is_string(hv) || !header_value_ok(json_string_value(hv))) {
      snprintf(err, errlen, "headers.%.64s: a header value cannot hold a line break", name);
      return -1;
    }
  }
  return 0;
}

/* Names the sink sets itself: an operator header of the same name is dropped at create
 * (identity beats configuration; a duplicate would let a receiver read the wrong one). */
static bool reserved_header(const char *n) {
  return strncasecmp(n, "x-ankusa-", 9) == 0 || strncasecmp(n, "webhook-", 8) == 0 ||
         strcasecmp(n, "content-type") == 0 || strcasecmp(n, "content-length") == 0 ||
         strcasecmp(n, "transfer-encoding") == 0 || strcasecmp(n, "host") == 0 ||
         strcasecmp(n, "expect") == 0;
}

/* Key bytes of one secret: whsec_<base64> decodes (verify/whsec.h, the decoder our
 * standard_webhooks verifier uses), anything else is used as is. */
static int derive_key(const char *secret, uint8_t **key, size_t *keylen) {
  size_t n = strlen(secret);
  if (n == 0) return -1;
  if (!ak_whsec_prefixed(secret, n)) {
    *key = malloc(n);
    if (!*key) return -1;
    memcpy(*key, secret, n);
    *keylen = n;
    return 0;
  }
  uint8_t *out = malloc(n);
  if (!out) return -1;
  if (!ak_whsec_decode(secret, n, out, n, keylen)) {
    free(out);
    return -1;
  }
  *key = out;
  return 0;
}

/* ---- outcome ---------------------------------------------------------------------- */

static int64_t parse_retry_after(const char *v) {
  while (*v == ' ' || *v == '\t') v++;
  if (!*v) return -1;
  if (isdigit((unsigned char)*v)) {
    int64_t secs = 0;
    for (; isdigit((unsigned char)*v); v++) {
      secs = secs * 10 + (*v - '0');
      if (secs > HTTP_RETRY_AFTER_CAP_MS / 1000) secs = HTTP_RETRY_AFTER_CAP_MS / 1000;
    }
    while (*v == ' ' || *v == '\t') v++;
    return *v ? -1 : secs * 1000;
  }
  time_t t = curl_getdate(v, NULL);
  if (t == (time_t)-1) return -1;
  int64_t ms = ((int64_t)t - (int64_t)time(NULL)) * 1000;
  if (ms < 0) ms = 0;
  return ms > HTTP_RETRY_AFTER_CAP_MS ? HTTP_RETRY_AFTER_CAP_MS : ms;
}

static void outcome_for_status(long status, int64_t retry_after_ms, ak_sink_outcome_t *out) {
  if (status >= 200 && status <= 299) { /* the common case: no reason to format */
    out->result = AK_SINK_OK;
    out->reason[0] = '\0';
    return;
  }
  snprintf(out->reason, sizeof out->reason, "http %ld", status);
  switch (status) {
  case 400: case 401: case 403: case 404: case 410: case 413: case 422:
    out->result = AK_SINK_PERMANENT;
    return;
  default:
    break;
  }
  out->result = AK_SINK_RETRY;
  if ((status == 408 || status == 429 || (status >= 500 && status <= 599)) && retry_after_ms > 0)
    out->retry_after_ms = retry_after_ms;
}

/* ---- requests --------------------------------------------------------------------- */

/* Bytes put_line writes for a name and value of these lengths, NUL included. */
#define LINE_SIZE(nlen, vlen) ((nlen) + (vlen) + 3)

/* Writes "name: value", or "name;" (curl's way to send an empty value), NUL-terminated,
 * at p; returns the byte after the NUL. */
static char *put_line(char *p, const char *name, size_t nlen, const char *val, size_t vlen) {
  memcpy(p, name, nlen);
  p += nlen;
  if (vlen == 0) {
    *p++ = ';';
  } else {
    *p++ = ':';
    *p++ = ' ';
    memcpy(p, val, vlen);
    p += vlen;
  }
  *p++ = '\0';
  return p;
}

/* ---- vtable ----------------------------------------------------------------------- */

/* A header value from the envelope goes on the wire only when it cannot split a line. */
static bool wire_value(const char *p, size_t n) {
  if (!p || n == 0) return false;
  for (size_t i = 0; i < n; i++)
    if (p[i] == '\r' || p[i] == '\n' || p[i] == '\0') return false;
  return true;
}

static bool name_is(const char *name, size_t len, const char *word) {
  return strlen(word) == len && strncasecmp(name, word, len) == 0;
}

/* A forwarded name that a stronger header already answers (see the top of this file). */
static bool forward_collides(const http_sink_t *s, const char *name, size_t len) {
  if (name_is(name, len, "content-type") || (len >= 9 && strncasecmp(name, "x-ankusa-", 9) == 0)) return true;
  for (size_t i = 0; i < s->nconf_headers; i++)
    if (name_is(name, len, s->conf_names[i])) return true;
  return s->nkeys && (name_is(name, len, "webhook-id") || name_is(name, len, "webhook-timestamp") ||
                      name_is(name, len, "webhook-signature"));
}

static bool value_ok_n(const char *v, size_t len) {
  for (size_t i = 0; i < len; i++)
    if (v[i] == '\r' || v[i] == '\n' || v[i] == '\0') return false;
  return true;
}

/* Room the forwarded lines of an envelope can take at most: a name's line is never longer
 * than the lines of its values apart would be. */
static size_t forwarded_bound(const ak_envelope_t *env) {
  size_t n = 0;
  for (size_t i = 0; i < env->nheaders; i++)
    n += LINE_SIZE(env->headers[i].name_len, env->headers[i].value_len);
  return n;
}

/* The forwarded header lines of one attempt, written at p (forwarded_bound bytes at
 * most): one per name (lowercased), in the order the names first arrived, repeats joined
 * with ", " in received order. A name with any value that could split a line is left out
 * whole (half of a repeated header would mislead). Returns the byte after the last line. */
static char *collect_forwarded(const http_sink_t *s, const ak_sink_attempt_t *att, char *p, size_t *nlines) {
  const ak_envelope_t *env = att->env;
  for (size_t i = 0; i < env->nheaders; i++) {
    const ak_header_t *h = &env->headers[i];
    if (!h->name || !ak_header_name_ok(h->name, h->name_len)) continue;
    bool seen = false;
    for (size_t j = 0; j < i && !seen; j++)
      seen = env->headers[j].name_len == h->name_len && env->headers[j].name &&
             strncasecmp(env->headers[j].name, h->name, h->name_len) == 0;
    if (seen || !ak_forward_header(att->source, h->name, h->name_len) ||
        forward_collides(s, h->name, h->name_len))
      continue;
    size_t vlen = 0, nvals = 0;
    bool ok = true;
    for (size_t j = i; j < env->nheaders && ok; j++) {
      const ak_header_t *o = &env->headers[j];
      if (o->name_len != h->name_len || !o->name || strncasecmp(o->name, h->name, h->name_len) != 0) continue;
      ok = !o->value_len || (o->value && value_ok_n(o->value, o->value_len));
      vlen += (nvals++ ? 2 : 0) + o->value_len;
    }
    if (!ok) continue;
    for (size_t k = 0; k < h->name_len; k++) p[k] = (char)tolower((unsigned char)h->name[k]);
    p += h->name_len;
    if (vlen == 0) {
      *p++ = ';';
    } else {
      *p++ = ':';
      *p++ = ' ';
      nvals = 0;
      for (size_t j = i; j < env->nheaders; j++) {
        const ak_header_t *o = &env->headers[j];
        if (o->name_len != h->name_len || !o->name || strncasecmp(o->name, h->name, h->name_len) != 0) continue;
        if (nvals++) {
          memcpy(p, ", ", 2);
          p += 2;
        }
        if (o->value_len) memcpy(p, o->value, o->value_len);
        p += o->value_len;
      }
    }
    *p++ = '\0';
    (*nlines)++;
  }
  return p;
}

#define IDENT_LINE(name, val, vlen) (val ? LINE_SIZE(strlen(name), vlen) : 0)

/* webhook-signature value: "v1,<b64> v1,<b64> ..." over "<id>.<ts>.<body>". */
static int sign(const http_sink_t *s, const char *id, const uint8_t *body, size_t body_len, const char *ts,
                char *out, size_t outlen) {
  size_t used = 0;
  out[0] = '\0';
  for (size_t i = 0; i < s->nkeys; i++) {
    uint8_t mac[EVP_MAX_MD_SIZE];
    size_t maclen = 0;
    EVP_MAC_CTX *c = EVP_MAC_CTX_new(s->mac);
    if (!c) return -1;
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
                           OSSL_PARAM_construct_end()};
    int ok = EVP_MAC_init(c, s->keys[i], s->keylen[i], params) &&
             EVP_MAC_update(c, (const unsigned char *)id, strlen(id)) &&
             EVP_MAC_update(c, (const unsigned char *)".", 1) &&
             EVP_MAC_update(c, (const unsigned char *)ts, strlen(ts)) &&
             EVP_MAC_update(c, (const unsigned char *)".", 1) &&
             (body_len == 0 || EVP_MAC_update(c, body, body_len)) &&
             EVP_MAC_final(c, mac, &maclen, sizeof mac);
    EVP_MAC_CTX_free(c);
    if (!ok) return -1;
    char b64[4 * ((EVP_MAX_MD_SIZE + 2) / 3) + 1];
    EVP_EncodeBlock((unsigned char *)b64, mac, (int)maclen);
    OPENSSL_cleanse(mac, sizeof mac);
    int n = snprintf(out + used, outlen - used, "%sv1,%s", i ? " " : "", b64);
    if (n < 0 || (size_t)n >= outlen - used) return -1;
    used += (size_t)n;
  }
  return 0;
}

/* The client's address check for this sink: the egress guard (addr_ctx). */
static bool egress_allows(void *ctx, const struct sockaddr *sa, char *why, size_t whylen) {
  if (ak_egress_addr_allowed(ctx, sa)) return true;
  ak_egress_refusal(sa, why, whylen);
  return false;
}

/* The client's completion -> the delivery's outcome. Client thread. */
static void on_response(void *ctx, const ak_httpc_resp_t *rs) {
  (void)ctx;
  const http_cell_t *cell = rs->user;
  ak_sink_outcome_t out = {.result = AK_SINK_RETRY};
  switch (rs->result) {
  case AK_HTTPC_OK:
    outcome_for_status(rs->status, rs->headers[0] ? parse_retry_after(rs->headers[0]) : -1, &out);
    break;
  case AK_HTTPC_REFUSED: /* the egress guard: retrying cannot change its answer */
    out.result = AK_SINK_PERMANENT;
    snprintf(out.reason, sizeof out.reason, "%s", rs->why);
    break;
  case AK_HTTPC_CANCELLED:
    snprintf(out.reason, sizeof out.reason, "sink stopped");
    break;
  default: /* timeout, resolve, connect, tls, transport */
    snprintf(out.reason, sizeof out.reason, "%s", rs->why);
    break;
  }
  cell->done(cell->ctx, &out);
}

/* Room for the three signature lines. */
#define SIG_MAX (HTTP_MAX_SECRETS * 52 + 1)
#define SIG_LINES_SIZE(id_len) \
  (LINE_SIZE(strlen("webhook-id"), id_len) + LINE_SIZE(strlen("webhook-timestamp"), 24) + \
   LINE_SIZE(strlen("webhook-signature"), SIG_MAX))

static const char *const want_retry_after[] = {"retry-after"};

static void http_deliver(void *self, const ak_sink_attempt_t *att, void *ctx, ak_sink_done_fn done) {
  http_sink_t *s = self;
  const ak_envelope_t *env = att->env;
  ak_sink_outcome_t out = {.result = AK_SINK_RETRY};
  if (s->egress && !ak_egress_url_allowed(s->egress, s->url, out.reason, sizeof out.reason)) {
    out.result = AK_SINK_PERMANENT;
    done(ctx, &out);
    return;
  }
  if (!s->egress && strncasecmp(s->url, "https://", 8) != 0 && strncasecmp(s->url, "http://", 7) != 0) {
    out.result = AK_SINK_PERMANENT; /* trusted, but still only http(s) */
    snprintf(out.reason, sizeof out.reason, "only http:// and https:// urls");
    done(ctx, &out);
    return;
  }
  char id[AK_UUID_STR_LEN];
  ak_uuid_format(env->id, id);
  /* The identity values (NULL = header not sent), measured first so that the header lines
   * fit the buffer below (on the stack for all but very large forwarded headers). */
  const char *source = s->source_id;
  size_t source_len = strlen(source);
  if (env->source_len) {
    bool ok = wire_value(env->source, env->source_len);
    source = ok ? env->source : "";
    source_len = ok ? env->source_len : 0;
  }
  const char *tenant = wire_value(env->tenant, env->tenant_len) ? env->tenant : NULL;
  const char *ctype = "application/octet-stream";
  size_t ctype_len = strlen(ctype);
  if (wire_value(env->content_type, env->content_type_len)) {
    ctype = env->content_type;
    ctype_len = env->content_type_len;
  }
  /* A key that cannot go on the wire is left out, never replaced by another value: a
   * receiver deduplicating on it must not see two keys for one hook. */
  const char *idem = att->idempotency_key;
  size_t idem_len = idem ? strlen(idem) : 0;
  if (!idem || !*idem) {
    idem = id;
    idem_len = strlen(id);
  } else if (!wire_value(idem, idem_len)) {
    idem = NULL;
  }
  const char *dedupe = att->dedupe_key;
  size_t dedupe_len = dedupe ? strlen(dedupe) : 0;
  if (!wire_value(dedupe, dedupe_len)) dedupe = NULL;
  const char *replay = att->replay_id;
  size_t replay_len = replay ? strlen(replay) : 0;
  if (!wire_value(replay, replay_len)) replay = NULL;

  size_t id_len = strlen(id);
  size_t room = LINE_SIZE(strlen("content-type"), ctype_len) + LINE_SIZE(strlen("x-ankusa-id"), id_len) +
                LINE_SIZE(strlen("x-ankusa-source"), source_len) +
                IDENT_LINE("x-ankusa-idempotency-key", idem, idem_len) +
                IDENT_LINE("x-ankusa-tenant", tenant, env->tenant_len) +
                IDENT_LINE("x-ankusa-dedupe-key", dedupe, dedupe_len) +
                IDENT_LINE("x-ankusa-replay-id", replay, replay_len) + sizeof "Expect:" +
                forwarded_bound(env) + (s->nkeys ? SIG_LINES_SIZE(id_len) : 0);
  size_t nmax = 8 + s->nconf_headers + env->nheaders + 3;
  char stack_buf[4096];
  const char *stack_lines[64];
  char *buf = room <= sizeof stack_buf ? stack_buf : malloc(room);
  const char **lines = nmax <= sizeof stack_lines / sizeof stack_lines[0] ? stack_lines : malloc(nmax * sizeof *lines);
  if (!buf || !lines) goto oom;

  /* identity lines (content-type .. Expect:), the operator's, the forwarded ones, then
   * the signature */
  char *p = buf;
  size_t n = 0;
#define PUT(name, val, vlen) lines[n++] = p, p = put_line(p, name, strlen(name), val, vlen)
  PUT("content-type", ctype, ctype_len);
  PUT("x-ankusa-id", id, id_len);
  PUT("x-ankusa-source", source, source_len);
  if (idem) PUT("x-ankusa-idempotency-key", idem, idem_len);
  if (tenant) PUT("x-ankusa-tenant", tenant, env->tenant_len);
  if (dedupe) PUT("x-ankusa-dedupe-key", dedupe, dedupe_len);
  if (replay) PUT("x-ankusa-replay-id", replay, replay_len);
  lines[n++] = p;
  memcpy(p, "Expect:", sizeof "Expect:");
  p += sizeof "Expect:";
  for (size_t i = 0; i < s->nconf_headers; i++) lines[n++] = s->conf_headers[i];
  size_t nfwd = 0;
  char *f = p;
  p = collect_forwarded(s, att, p, &nfwd);
  for (size_t i = 0; i < nfwd; i++, f += strlen(f) + 1) lines[n++] = f;
  if (s->nkeys) {
    char ts[24];
    snprintf(ts, sizeof ts, "%lld", (long long)time(NULL));
    char sig[SIG_MAX];
    if (sign(s, id, env->body, env->body_len, ts, sig, sizeof sig) != 0) {
      snprintf(out.reason, sizeof out.reason, "signing failed");
      goto fail;
    }
    PUT("webhook-id", id, id_len);
    PUT("webhook-timestamp", ts, strlen(ts));
    PUT("webhook-signature", sig, strlen(sig));
  }
#undef PUT

  ak_httpc_req_t rq = {
    .method = s->method,
    .url = s->url,
    .headers = lines,
    .nheaders = n,
    .body = env->body,
    .body_len = env->body_len,
    .timeout_ms = s->timeout_ms,
    .max_response_bytes = s->max_resp,
    .want_headers = want_retry_after,
    .nwant = 1,
    .addr_ok = s->egress ? egress_allows : NULL,
    .addr_ctx = (void *)s->egress,
    .owner = s,
    .user = &(http_cell_t){.done = done, .ctx = ctx},
    .user_len = sizeof(http_cell_t),
  };
  int rc = ak_httpc_submit(s->httpc, &rq, on_response, NULL);
  if (rc != 0) {
    snprintf(out.reason, sizeof out.reason, "%s",
             rc == AK_HTTPC_BUSY      ? "http sink queue full"
             : rc == AK_HTTPC_STOPPED ? "sink stopped"
                                      : ak_httpc_strerror(rc));
  }
  if (buf != stack_buf) free(buf);
  if (lines != stack_lines) free(lines);
  if (rc == 0) return;
  done(ctx, &out);
  return;
oom:
  snprintf(out.reason, sizeof out.reason, "out of memory");
fail:
  if (buf != stack_buf) free(buf);
  if (lines != stack_lines) free(lines);
  done(ctx, &out);
}

static void http_destroy(void *self) {
  http_sink_t *s = self;
  if (!s) return;
  /* every delivery still under way is answered once ("sink stopped") before this returns:
   * nothing of the sink is touched after */
  if (s->owned_httpc) ak_httpc_free(s->owned_httpc);
  else if (s->httpc) ak_httpc_cancel(s->httpc, s);
  for (size_t i = 0; i < s->nkeys; i++) {
    OPENSSL_cleanse(s->keys[i], s->keylen[i]);
    free(s->keys[i]);
  }
  for (size_t i = 0; i < s->nconf_headers; i++) {
    OPENSSL_cleanse(s->conf_headers[i], strlen(s->conf_headers[i]));
    free(s->conf_headers[i]);
    free(s->conf_names[i]);
  }
  free(s->conf_headers);
  free(s->conf_names);
  EVP_MAC_free(s->mac);
  ak_egress_free(s->owned_egress);
  free(s->url);
  free(s);
}

static int parse_opts(http_sink_t *s, const http_opts_t *o, char *err, size_t errlen) {
  if (!(s->url = strdup(o->url))) goto oom;
  s->method = methods[o->method];
  s->timeout_ms = (long)o->timeout_ms;
  s->max_resp = (size_t)o->max_response_bytes;

  const json_t *h = o->headers;
  if (h && json_object_size(h)) {
    if (headers_problem(h, err, errlen) != 0) return -1;
    s->conf_headers = calloc(json_object_size(h) + 1, sizeof *s->conf_headers);
    s->conf_names = calloc(json_object_size(h) + 1, sizeof *s->conf_names);
    if (!s->conf_headers || !s->conf_names) goto oom;
    const char *name;
    const json_t *hv;
    json_object_foreach((json_t *)h, name, hv) {
      if (reserved_header(name)) continue;
      const char *val = json_string_value(hv);
      size_t len = strlen(name) + strlen(val) + 3;
      char *line = malloc(len);
      char *lname = strdup(name);
      if (!line || !lname) {
        free(line);
        free(lname);
        goto oom;
      }
      if (*val) snprintf(line, len, "%s: %s", name, val);
      else snprintf(line, len, "%s;", name);
      s->conf_names[s->nconf_headers] = lname;
      s->conf_headers[s->nconf_headers++] = line;
    }
  }

  const json_t *sec = o->secret;
  if (sec && !json_is_null(sec)) {
    const json_t *one[1] = {sec};
    size_t n = json_is_array(sec) ? json_array_size(sec) : 1; /* the rows bound it to 1..8 */
    for (size_t i = 0; i < n; i++) {
      const json_t *it = json_is_array(sec) ? json_array_get(sec, i) : one[0];
      if (!json_is_string(it) || derive_key(json_string_value(it), &s->keys[i], &s->keylen[i]) != 0) {
        if (json_is_array(sec))
          snprintf(err, errlen, "secret[%zu]: empty, or a whsec_ value that is not valid base64", i);
        else
          snprintf(err, errlen, "secret: empty, or a whsec_ value that is not valid base64");
        return -1;
      }
      s->nkeys = i + 1;
    }
    s->mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    if (!s->mac) {
      snprintf(err, errlen, "secret: HMAC unavailable in libcrypto");
      return -1;
    }
  }
  return 0;
oom:
  snprintf(err, errlen, "out of memory");
  return -1;
}

static void *http_create(const json_t *opts, const ak_sink_ctx_t *sctx, char *err, size_t errlen) {
  const char *source_id = sctx ? sctx->source_id : NULL;
  const ak_egress_t *egress = sctx ? sctx->egress : NULL;
  http_sink_t *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  snprintf(s->source_id, sizeof s->source_id, "%s", source_id ? source_id : "");
  http_opts_t o = {0};
  json_t *checked = NULL;
  if (ak_opt_bind_checked(http_opts, opts, &o, &checked, err, errlen) != 0) goto fail;
  int prc = parse_opts(s, &o, err, errlen);
  ak_opt_release(http_opts, &o);
  json_decref(checked);
  if (prc != 0) goto fail;
  if (sctx && sctx->trusted) {
    egress = NULL;
  } else if (!egress) {
    s->owned_egress = ak_egress_new(NULL, 0, false, err, errlen);
    if (!s->owned_egress) goto fail;
    egress = s->owned_egress;
  }
  s->egress = egress;
  s->httpc = sctx ? sctx->httpc : NULL;
  if (!s->httpc) {
    /* made by hand, outside a node: a client of its own, sized as a sink's used to be */
    s->owned_httpc = ak_httpc_new(&(ak_httpc_opts_t){.name = "ak-http-sink"}, err, errlen);
    if (!s->owned_httpc) goto fail;
    s->httpc = s->owned_httpc;
  }
  return s;
fail:
  http_destroy(s);
  return NULL;
}

/* ---- config rules (check-config reports them; create would refuse the same) ----------- */

/* A guarded http sink whose URL the guard can never let through refuses the boot (or the
 * admin API's change), so the mistake shows in check-config instead of as dead letters;
 * a trusted sink (guarded false) only checks that the URL is http(s). The URL is never
 * echoed: it may carry credentials. Names are not resolved here: what a name points at
 * can change, and the sink judges the address it connects to. */
static void check_http_url(ak_check_t *c, const char *label, const char *url, bool guarded, const ak_egress_t *g) {
  CURLU *h = curl_url();
  char *scheme = NULL, *host = NULL;
  if (!h) {
    ak_check_error(c, "%s: out of memory", label);
    return;
  }
  CURLUcode rc = curl_url_set(h, CURLUPART_URL, url, 0);
  if (rc != CURLUE_OK) {
    ak_check_error(c, "%s: not a valid URL (%s)", label, curl_url_strerror(rc));
    goto done;
  }
  curl_url_get(h, CURLUPART_SCHEME, &scheme, 0);
  char why[128];
  if (!scheme || (strcmp(scheme, "https") && strcmp(scheme, "http"))) {
    if (guarded)
      ak_check_error(c, "%s: only https:// (or http:// with egress.allow_http) URLs are allowed", label);
    else
      ak_check_error(c, "%s: only http:// and https:// URLs are allowed", label);
    goto done;
  }
  if (!guarded || !g) goto done; /* trusted; or egress.* is broken: its own error says so */
  if (!ak_egress_url_allowed(g, url, why, sizeof why)) {
    if (!strcmp(scheme, "http"))
      ak_check_error(c, "%s: http:// is refused; use https:// or set egress.allow_http: true", label);
    else
      ak_check_error(c, "%s: %s", label, why);
    goto done;
  }
  if (curl_url_get(h, CURLUPART_HOST, &host, 0) != CURLUE_OK || !host) goto done;
  char lit[INET6_ADDRSTRLEN + 2];
  size_t hl = strlen(host);
  if (host[0] == '[' && hl >= 2 && hl - 2 < sizeof lit) {
    memcpy(lit, host + 1, hl - 2);
    lit[hl - 2] = '\0';
    char *zone = strchr(lit, '%');
    if (zone) *zone = '\0';
  } else if (hl < sizeof lit) {
    memcpy(lit, host, hl + 1);
  } else {
    goto done;
  }
  struct sockaddr_in6 sa6 = {.sin6_family = AF_INET6};
  struct sockaddr_in sa4 = {.sin_family = AF_INET};
  const struct sockaddr *sa = NULL;
  if (inet_pton(AF_INET, lit, &sa4.sin_addr) == 1) sa = (const struct sockaddr *)&sa4;
  else if (inet_pton(AF_INET6, lit, &sa6.sin6_addr) == 1) sa = (const struct sockaddr *)&sa6;
  if (sa && !ak_egress_addr_allowed(g, sa)) {
    ak_egress_refusal(sa, why, sizeof why);
    ak_check_error(c, "%s: %s (egress.allow_cidrs can allow it)", label, why);
  }
done:
  curl_free(scheme);
  curl_free(host);
  curl_url_cleanup(h);
}

static void http_check(ak_check_t *c, const char *path, json_t *sink, const json_t *root) {
  char label[192];
  const char *url = json_string_value(json_object_get(sink, "url"));
  snprintf(label, sizeof label, "%s.url", path);
  ak_egress_t *g = ak_egress_from_tree(root);
  if (url) check_http_url(c, label, url, ak_egress_tree_guards(root), g);
  ak_egress_free(g);
  char why[160];
  if (headers_problem(json_object_get(sink, "headers"), why, sizeof why) != 0) ak_check_error(c, "%s.%s", path, why);
}

const ak_sink_vtable_t ak_sink_http = {
  .plugin = {.type = "http", .doc = "POST (PUT, PATCH) of the raw body to one URL, Standard Webhooks signed",
             .options = http_opts, .check = http_check},
  .durable = true,
  .create = http_create,
  .deliver = http_deliver,
  .destroy = http_destroy,
};
