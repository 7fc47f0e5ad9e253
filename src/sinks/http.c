/* The `http` sink: POST/PUT/PATCH of the raw hook body to one URL, on libcurl multi.
 * Owns its option rows, a few worker threads per instance (each a CURLM driven by
 * curl_multi_socket_action from its own epoll set, plus a bounded queue whose first entry
 * wakes the thread through an eventfd), Standard Webhooks delivery signing, the
 * status -> outcome mapping and the egress check of every address it connects to.
 * Never follows a redirect, never retries on its own (dispatch owns retries), never
 * reads more than max_response_bytes of a response, never puts a secret, a header value
 * or the URL into an outcome reason, and never touches the store.
 *
 * Registered as ak_sink_http (registry.c). The egress guard comes in ak_sink_ctx_t; it is
 * borrowed and must outlive the sink; NULL means the default guard (no allow list, no
 * http://), owned by the sink.
 *
 * Headers, strongest first: the sink's identity (content-type, x-ankusa-*), then the
 * operator's `headers`, then the provider headers forward_headers lets through (sinks/
 * forward.h); a weaker header whose name a stronger one holds is dropped, so a receiver
 * never sees two answers to one question. With a secret, the three webhook-* signature
 * headers replace forwarded ones of those names. A value holding CR, LF or NUL is never
 * sent: that header is dropped.
 *
 * Egress pinning: libcurl resolves the name, and CURLOPT_OPENSOCKETFUNCTION judges each
 * sockaddr right before the socket for it is created. The address checked is therefore
 * the address connected to, whatever DNS answers next (rebinding), and resolving stays
 * off this thread (curl's threaded resolver) instead of a blocking getaddrinfo here.
 * Proxies are disabled (CURLOPT_PROXY ""): through one, the check would judge the proxy. */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <curl/curl.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include "core/config.h"
#include "core/envelope.h"
#include "core/header.h"
#include "sinks/egress.h"
#include "sinks/forward.h"
#include "sinks/sink.h"
#include "verify/whsec.h"

#define HTTP_MAX_SECRETS 8
#define HTTP_MAX_ACTIVE 64        /* transfers in one worker's CURLM at once */
#define HTTP_MAX_OUTSTANDING 4096 /* queued + active, whole sink; beyond it deliver answers retry */
#define HTTP_MAX_WORKERS 4        /* worker threads per sink, at most (one per online CPU) */
#define HTTP_RETRY_AFTER_CAP_MS 3600000

static const ak_opt_t http_opts[] = {
  {.key = "url", .type = AK_OPT_STRING, .flags = AK_OPTF_REQUIRED | AK_OPTF_HAS_MIN, .min = 1,
   .doc = "destination URL; https:// (http:// only with egress.allow_http)"},
  {.key = "method", .type = AK_OPT_ENUM, .def = "post", .enum_vals = "post|put|patch",
   .doc = "HTTP method of the delivery"},
  {.key = "headers", .type = AK_OPT_ANY_MAP, .flags = AK_OPTF_SECRET,
   .doc = "extra request headers (name: value); x-ankusa-* and webhook-* names are the sink's own"},
  {.key = "timeout_ms", .type = AK_OPT_INT, .def = "5000", .min = 1, .max = 3600000,
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX, .doc = "connect + response timeout of one attempt"},
  {.key = "max_response_bytes", .type = AK_OPT_INT, .def = "65536", .min = 0, .max = 1073741824,
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX,
   .doc = "response body bytes read (and discarded) at most; only the status is used"},
  {.key = "secret", .type = AK_OPT_SECRETS, .flags = AK_OPTF_SECRET | AK_OPTF_NULLABLE,
   .doc = "Standard Webhooks signing secret(s), whsec_<base64> or raw; one v1 signature each"},
  {0},
};

typedef struct http_sink http_sink_t;
typedef struct http_worker http_worker_t;

/* http_worker.fds: a socket this worker opened (and curl closes through on_close_socket), what
 * the epoll set holds for it (FD_IN/FD_OUT, none = not in the set), and whether curl
 * currently wants it watched. */
enum { FD_OURS = 1, FD_IN = 2, FD_OUT = 4, FD_WATCHED = 8 };

typedef struct http_req {
  struct http_req *next, *prev;
  http_sink_t *sink;
  http_worker_t *worker; /* the one whose queue (then CURLM) holds it */
  CURL *easy;
  struct curl_slist *hdrs;
  char id[AK_UUID_STR_LEN];
  /* Header lines ("name: value\0" back to back, in `mem` after the body): nident identity
   * lines (content-type .. Expect:), then the operator's (from the sink), then nfwd
   * forwarded ones. Built by deliver() so the request is one allocation. */
  const char *lines;
  size_t nident, nfwd;
  const uint8_t *body;
  size_t body_len;
  void *ctx;
  ak_sink_done_fn done;
  size_t resp_bytes;
  bool truncated;
  int64_t retry_after_ms; /* -1: none */
  bool egress_refused;
  char egress_reason[96];
  char mem[]; /* body, then header lines */
} http_req_t;

struct http_sink {
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
  const ak_egress_t *egress;
  ak_egress_t *owned_egress;
  char source_id[72];

  /* Queued + active over all workers. Raised by deliver only below the bound (a CAS, so
   * the bound holds without a sink-wide lock); lowered as each attempt is answered. */
  atomic_size_t outstanding;
  atomic_uint next_worker; /* deliver's round-robin starting point */
  http_worker_t *workers[HTTP_MAX_WORKERS];
  size_t nworkers;
};

/* One thread with its own CURLM, epoll set and connection cache. A worker needs no other
 * worker's state: one thread (≈20 us of CPU per delivery, mostly libcurl and the kernel's
 * TCP path) was the limit of a whole sink, so the transfers are spread over several. Each
 * is its own allocation (not an array of structs), so that one worker's queue and counters
 * do not sit on the cache line of the next one's. */
struct http_worker {
  http_sink_t *sink;
  unsigned index;
  CURLM *multi;
  int epfd;           /* the sockets curl asks to watch (on_socket), and evfd */
  int evfd;           /* deliver/destroy -> worker: work queued, or stop */
  int64_t deadline_us; /* curl's timer (on_timer), CLOCK_MONOTONIC; -1 = none; worker only */
  uint8_t *fds;        /* FD_* per descriptor number, for sockets on_open_socket made; worker only */
  size_t nfds;
  pthread_t thread;
  bool thread_started;
  pthread_mutex_t mu;
  bool mu_init;
  http_req_t *q_head, *q_tail; /* waiting for a slot; under mu */
  atomic_size_t load;          /* queued + active here: deliver prefers the lighter worker */
  bool stop;                   /* under mu */
  http_req_t *active;          /* in the CURLM; worker thread only */
  CURL *spare[HTTP_MAX_ACTIVE]; /* idle easy handles (easy_new options) for reuse; worker thread only */
  size_t nspare;
};

/* ---- options ---------------------------------------------------------------------- */

static int opt_int(const json_t *opts, const char *key, long def, long min, long max, long *out,
                   char *err, size_t errlen) {
  const json_t *v = opts ? json_object_get(opts, key) : NULL;
  if (!v || json_is_null(v)) {
    *out = def;
    return 0;
  }
  long long x = 0;
  if (json_is_integer(v)) {
    x = json_integer_value(v);
  } else if (json_is_string(v)) {
    const char *s = json_string_value(v);
    char *end = NULL;
    if (!*s) goto bad;
    x = strtoll(s, &end, 10);
    if (*end) goto bad;
  } else {
    goto bad;
  }
  if (x < min || x > max) {
    snprintf(err, errlen, "%s: must be between %ld and %ld", key, min, max);
    return -1;
  }
  *out = (long)x;
  return 0;
bad:
  snprintf(err, errlen, "%s: must be an integer", key);
  return -1;
}

static bool header_value_ok(const char *v) {
  for (const char *p = v; *p; p++)
    if (*p == '\r' || *p == '\n' || *p == '\0') return false;
  return true;
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
  snprintf(out->reason, sizeof out->reason, "http %ld", status);
  if (status >= 200 && status <= 299) {
    out->result = AK_SINK_OK;
    out->reason[0] = '\0';
    return;
  }
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

static void outcome_for_transport(CURLcode rc, ak_sink_outcome_t *out) {
  out->result = AK_SINK_RETRY;
  const char *what = curl_easy_strerror(rc);
  switch (rc) {
  case CURLE_OPERATION_TIMEDOUT:
    snprintf(out->reason, sizeof out->reason, "timeout");
    break;
  case CURLE_COULDNT_RESOLVE_HOST:
    snprintf(out->reason, sizeof out->reason, "resolve: %s", what);
    break;
  case CURLE_COULDNT_CONNECT:
    snprintf(out->reason, sizeof out->reason, "connect: %s", what);
    break;
  case CURLE_SSL_CONNECT_ERROR:
  case CURLE_PEER_FAILED_VERIFICATION:
  case CURLE_SSL_CERTPROBLEM:
  case CURLE_SSL_CIPHER:
  case CURLE_SSL_CACERT_BADFILE:
    snprintf(out->reason, sizeof out->reason, "tls: %s", what);
    break;
  default:
    snprintf(out->reason, sizeof out->reason, "transport: %s", what);
    break;
  }
}

/* ---- requests --------------------------------------------------------------------- */

static void req_free(http_req_t *r) {
  if (!r) return;
  if (r->easy) curl_easy_cleanup(r->easy);
  curl_slist_free_all(r->hdrs);
  free(r);
}

/* Calls done exactly once, then frees the request. Worker thread (or deliver's caller
 * for a request that never reached the queue). */
static void req_finish(http_req_t *r, const ak_sink_outcome_t *out) {
  http_sink_t *s = r->sink;
  http_worker_t *w = r->worker;
  ak_sink_done_fn done = r->done;
  void *ctx = r->ctx;
  req_free(r);
  atomic_fetch_sub(&w->load, 1);
  atomic_fetch_sub(&s->outstanding, 1);
  done(ctx, out);
}

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *ud) {
  http_req_t *r = ud;
  (void)ptr;
  size_t n = size * nmemb;
  if (r->resp_bytes + n > r->sink->max_resp) {
    /* Enough read: abort the transfer (the status is already known). */
    r->truncated = true;
    return 0;
  }
  r->resp_bytes += n;
  return n;
}

static size_t on_header(char *buf, size_t size, size_t nitems, void *ud) {
  http_req_t *r = ud;
  size_t n = size * nitems;
  if (n >= 5 && strncmp(buf, "HTTP/", 5) == 0) {
    r->retry_after_ms = -1; /* a new response (after a 1xx): forget the previous one */
  } else if (n > 12 && strncasecmp(buf, "retry-after:", 12) == 0) {
    char v[128];
    size_t vl = n - 12;
    if (vl >= sizeof v) vl = sizeof v - 1;
    memcpy(v, buf + 12, vl);
    v[vl] = '\0';
    while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' ')) v[--vl] = '\0';
    r->retry_after_ms = parse_retry_after(v);
  }
  return n;
}

static curl_socket_t on_open_socket(void *ud, curlsocktype purpose, struct curl_sockaddr *addr) {
  http_req_t *r = ud;
  (void)purpose;
  if (!ak_egress_addr_allowed(r->sink->egress, &addr->addr)) {
    if (!r->egress_refused)
      ak_egress_refusal(&addr->addr, r->egress_reason, sizeof r->egress_reason);
    r->egress_refused = true;
    return CURL_SOCKET_BAD;
  }
  curl_socket_t fd = socket(addr->family, addr->socktype | SOCK_CLOEXEC, addr->protocol);
  http_worker_t *w = r->worker;
  if (fd >= 0 && (size_t)fd >= w->nfds) {
    size_t n = w->nfds ? w->nfds : 64;
    while (n <= (size_t)fd) n *= 2;
    uint8_t *g = realloc(w->fds, n);
    if (g) { /* without room the socket is simply watched the plain way (on_socket) */
      memset(g + w->nfds, 0, n - w->nfds);
      w->fds = g;
      w->nfds = n;
    }
  }
  /* a new socket is in no epoll set, whatever its number was used for before */
  if (fd >= 0 && (size_t)fd < w->nfds) w->fds[fd] = FD_OURS;
  return fd;
}

/* Closing takes a socket out of every epoll set; only the bookkeeping is left to do. */
static int on_close_socket(void *ud, curl_socket_t fd) {
  http_worker_t *w = ud;
  if (fd >= 0 && (size_t)fd < w->nfds) w->fds[fd] = 0;
  return close(fd);
}

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

static bool add_line(struct curl_slist **l, const char *line) {
  struct curl_slist *nl = curl_slist_append(*l, line);
  if (!nl) return false;
  *l = nl;
  return true;
}

/* webhook-signature value: "v1,<b64> v1,<b64> ..." over "<id>.<ts>.<body>". */
static int sign(const http_sink_t *s, const http_req_t *r, const char *ts, char *out, size_t outlen) {
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
             EVP_MAC_update(c, (const unsigned char *)r->id, strlen(r->id)) &&
             EVP_MAC_update(c, (const unsigned char *)".", 1) &&
             EVP_MAC_update(c, (const unsigned char *)ts, strlen(ts)) &&
             EVP_MAC_update(c, (const unsigned char *)".", 1) &&
             (r->body_len == 0 || EVP_MAC_update(c, r->body, r->body_len)) &&
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

#define SET(opt, val) \
  if (rc == CURLE_OK) rc = curl_easy_setopt(e, opt, val)

/* A new easy handle with the options every request of this sink shares. They are set
 * once per handle, not per delivery (the handle is reused without curl_easy_reset): the
 * per-request ones below overwrite everything a request leaves behind, and a request's
 * response state lives in its http_req_t, never in the handle. */
static CURL *easy_new(http_worker_t *w, CURLcode *rcp) {
  const http_sink_t *s = w->sink;
  CURL *e = curl_easy_init();
  if (!e) {
    *rcp = CURLE_OUT_OF_MEMORY;
    return NULL;
  }
  CURLcode rc = CURLE_OK;
  SET(CURLOPT_URL, s->url);
  SET(CURLOPT_PROTOCOLS_STR, "http,https");
  SET(CURLOPT_FOLLOWLOCATION, 0L);
  SET(CURLOPT_PROXY, "");
  SET(CURLOPT_NOSIGNAL, 1L);
  SET(CURLOPT_TIMEOUT_MS, s->timeout_ms);
  SET(CURLOPT_CONNECTTIMEOUT_MS, s->timeout_ms);
  SET(CURLOPT_USERAGENT, "ankusa/" AK_VERSION);
  SET(CURLOPT_POST, 1L);
  if (s->method) SET(CURLOPT_CUSTOMREQUEST, s->method);
  SET(CURLOPT_WRITEFUNCTION, on_body);
  SET(CURLOPT_HEADERFUNCTION, on_header);
  SET(CURLOPT_OPENSOCKETFUNCTION, on_open_socket);
  /* per connection (it outlives the request that opened it): the worker whose cache holds
   * it, not the request. A handle never leaves its worker, so this is set once. */
  SET(CURLOPT_CLOSESOCKETFUNCTION, on_close_socket);
  SET(CURLOPT_CLOSESOCKETDATA, (void *)w);
  if (rc != CURLE_OK) {
    curl_easy_cleanup(e);
    *rcp = rc;
    return NULL;
  }
  return e;
}

/* Build the easy handle; returns false (out filled) when the attempt cannot start. */
static bool req_start(http_worker_t *w, http_req_t *r, ak_sink_outcome_t *out) {
  const http_sink_t *s = w->sink;
  out->result = AK_SINK_RETRY;
  snprintf(out->reason, sizeof out->reason, "out of memory");
  r->retry_after_ms = -1;
  CURLcode rc = CURLE_OK;
  /* a reused handle keeps its allocations: creating one per delivery was a fifth of the
   * sink's CPU (bench/deliver.sh profile) */
  r->easy = w->nspare ? w->spare[--w->nspare] : easy_new(w, &rc);
  if (!r->easy) {
    if (rc != CURLE_OUT_OF_MEMORY)
      snprintf(out->reason, sizeof out->reason, "curl setup: %s", curl_easy_strerror(rc));
    return false;
  }
  CURL *e = r->easy;

  bool ok = true;
  const char *line = r->lines;
  for (size_t i = 0; ok && i < r->nident; i++, line += strlen(line) + 1) ok = add_line(&r->hdrs, line);
  for (size_t i = 0; ok && i < s->nconf_headers; i++) ok = add_line(&r->hdrs, s->conf_headers[i]);
  for (size_t i = 0; ok && i < r->nfwd; i++, line += strlen(line) + 1) ok = add_line(&r->hdrs, line);
  if (ok && s->nkeys) {
    char ts[24];
    snprintf(ts, sizeof ts, "%lld", (long long)time(NULL));
    char sig[HTTP_MAX_SECRETS * 52 + 1];
    if (sign(s, r, ts, sig, sizeof sig) != 0) {
      snprintf(out->reason, sizeof out->reason, "signing failed");
      return false;
    }
    char buf[LINE_SIZE(sizeof "webhook-signature", sizeof sig)];
    put_line(buf, "webhook-id", strlen("webhook-id"), r->id, strlen(r->id));
    ok = add_line(&r->hdrs, buf);
    put_line(buf, "webhook-timestamp", strlen("webhook-timestamp"), ts, strlen(ts));
    ok = ok && add_line(&r->hdrs, buf);
    put_line(buf, "webhook-signature", strlen("webhook-signature"), sig, strlen(sig));
    ok = ok && add_line(&r->hdrs, buf);
  }
  if (!ok) return false;

  static const char empty[1] = "";
  SET(CURLOPT_HTTPHEADER, r->hdrs);
  SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
  SET(CURLOPT_POSTFIELDS, r->body_len ? (const char *)r->body : empty);
  SET(CURLOPT_WRITEDATA, r);
  SET(CURLOPT_HEADERDATA, r);
  SET(CURLOPT_OPENSOCKETDATA, r);
  SET(CURLOPT_PRIVATE, r);
  if (rc != CURLE_OK) {
    snprintf(out->reason, sizeof out->reason, "curl setup: %s", curl_easy_strerror(rc));
    return false;
  }
  if (curl_multi_add_handle(w->multi, e) != CURLM_OK) {
    snprintf(out->reason, sizeof out->reason, "curl setup: multi add failed");
    return false;
  }
  return true;
}
#undef SET

static void active_unlink(http_worker_t *w, http_req_t *r) {
  if (r->prev) r->prev->next = r->next;
  else w->active = r->next;
  if (r->next) r->next->prev = r->prev;
  r->next = r->prev = NULL;
}

static void req_complete(http_worker_t *w, http_req_t *r, CURLcode rc) {
  ak_sink_outcome_t out = {.result = AK_SINK_RETRY};
  long status = 0;
  curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
  if (r->egress_refused && rc != CURLE_OK && status == 0) {
    out.result = AK_SINK_PERMANENT;
    snprintf(out.reason, sizeof out.reason, "%s", r->egress_reason);
  } else if (status > 0 && (rc == CURLE_OK || (rc == CURLE_WRITE_ERROR && r->truncated))) {
    outcome_for_status(status, r->retry_after_ms, &out);
  } else {
    outcome_for_transport(rc, &out);
  }
  curl_multi_remove_handle(w->multi, r->easy);
  if (w->nspare < HTTP_MAX_ACTIVE) {
    w->spare[w->nspare++] = r->easy;
    r->easy = NULL;
  }
  req_finish(r, &out);
}

static int64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* curl's socket callback: mirror what it wants watched into the epoll set. Event-driven
 * instead of curl_multi_perform + curl_multi_poll, which walk every transfer on every
 * wake-up: a wake-up here touches only the sockets that have something to say. socketp
 * (curl_multi_assign) marks a socket already in the set, so a change is one MOD. */
static int on_socket(CURL *e, curl_socket_t fd, int what, void *userp, void *socketp) {
  http_worker_t *w = userp;
  (void)e;
  if (fd >= 0 && (size_t)fd < w->nfds && (w->fds[fd] & FD_OURS)) {
    /* A connection goes back to the cache after every request (REMOVE) and out again
     * for the next (IN): it stays in the set meanwhile, so that is no epoll_ctl at all.
     * An idle one that speaks up is taken out by the worker loop. */
    uint8_t *st = &w->fds[fd];
    if (what == CURL_POLL_REMOVE) {
      *st &= (uint8_t)~FD_WATCHED;
      return 0;
    }
    *st |= FD_WATCHED;
    uint8_t want = (uint8_t)(((what & CURL_POLL_IN) ? FD_IN : 0) | ((what & CURL_POLL_OUT) ? FD_OUT : 0));
    uint8_t have = *st & (FD_IN | FD_OUT);
    if (want == have) return 0;
    struct epoll_event ev = {.events = ((want & FD_IN) ? EPOLLIN : 0u) | ((want & FD_OUT) ? EPOLLOUT : 0u),
                             .data.fd = fd};
    if (epoll_ctl(w->epfd, have ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev) == 0)
      *st = (uint8_t)((*st & ~(FD_IN | FD_OUT)) | want);
    return 0;
  }
  if (what == CURL_POLL_REMOVE) {
    /* fails when curl already closed it (closing left the set): nothing to undo */
    epoll_ctl(w->epfd, EPOLL_CTL_DEL, fd, NULL);
    return 0;
  }
  struct epoll_event ev = {.events = ((what & CURL_POLL_IN) ? EPOLLIN : 0u) | ((what & CURL_POLL_OUT) ? EPOLLOUT : 0u),
                           .data.fd = fd};
  if (socketp && epoll_ctl(w->epfd, EPOLL_CTL_MOD, fd, &ev) == 0) return 0;
  /* new to the set, or a reused descriptor number the set dropped on close */
  if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) != 0 && errno == EEXIST)
    epoll_ctl(w->epfd, EPOLL_CTL_MOD, fd, &ev);
  curl_multi_assign(w->multi, fd, w);
  return 0;
}

/* curl's timer callback: only noted here; the worker acts on it when it falls due (curl
 * must not be re-entered from its own callback). */
static int on_timer(CURLM *m, long timeout_ms, void *userp) {
  http_worker_t *w = userp;
  (void)m;
  w->deadline_us = timeout_ms < 0 ? -1 : now_us() + (int64_t)timeout_ms * 1000;
  return 0;
}

static void run_timer_if_due(http_worker_t *w) {
  if (w->deadline_us < 0 || w->deadline_us > now_us()) return;
  w->deadline_us = -1;
  int running;
  curl_multi_socket_action(w->multi, CURL_SOCKET_TIMEOUT, 0, &running);
}

/* Answers every finished transfer; returns how many. */
static size_t settle(http_worker_t *w) {
  size_t n = 0;
  CURLMsg *msg;
  int left;
  while ((msg = curl_multi_info_read(w->multi, &left))) {
    if (msg->msg != CURLMSG_DONE) continue;
    http_req_t *r = NULL;
    curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&r);
    CURLcode rc = msg->data.result;
    active_unlink(w, r);
    req_complete(w, r, rc);
    n++;
  }
  return n;
}

static void *worker(void *arg) {
  http_worker_t *w = arg;
  /* worker 0 keeps the name benches and profiles look for; "ak-http-sink-3" still fits
   * the 15 characters a thread name may have */
  _Static_assert(HTTP_MAX_WORKERS <= 10, "one digit in the thread name");
  char name[16] = "ak-http-sink";
  if (w->index) {
    name[12] = '-';
    name[13] = (char)('0' + w->index);
  }
  pthread_setname_np(pthread_self(), name);
  size_t nactive = 0;
  for (;;) {
    http_req_t *take = NULL, **tail = &take;
    pthread_mutex_lock(&w->mu);
    bool stop = w->stop;
    while (!stop && w->q_head && nactive < HTTP_MAX_ACTIVE) {
      http_req_t *r = w->q_head;
      w->q_head = r->next;
      if (!w->q_head) w->q_tail = NULL;
      r->next = NULL;
      *tail = r;
      tail = &r->next;
      nactive++;
    }
    /* Left in the queue (all slots busy): deliver() did not wake us for these (it wakes
     * only on the first entry), so this thread must come back for them by itself. */
    bool backlog = w->q_head != NULL;
    pthread_mutex_unlock(&w->mu);
    if (stop) break;

    while (take) {
      http_req_t *r = take;
      take = r->next;
      r->next = NULL;
      ak_sink_outcome_t out;
      if (!req_start(w, r, &out)) {
        nactive--;
        req_finish(r, &out);
        continue;
      }
      r->next = w->active;
      if (w->active) w->active->prev = r;
      w->active = r;
    }

    /* a handle just added asks for its first run through the timer */
    run_timer_if_due(w);
    nactive -= settle(w);

    int wait_ms = -1;
    if (backlog && nactive < HTTP_MAX_ACTIVE) {
      wait_ms = 0; /* a slot is free for a queued request: only look, do not sleep */
    } else if (w->deadline_us >= 0) {
      int64_t left = w->deadline_us - now_us();
      wait_ms = left <= 0 ? 0 : (int)((left + 999) / 1000);
    }
    struct epoll_event evs[HTTP_MAX_ACTIVE + 1];
    int n = epoll_wait(w->epfd, evs, HTTP_MAX_ACTIVE + 1, wait_ms);
    for (int i = 0; i < n; i++) {
      int fd = evs[i].data.fd;
      if (fd == w->evfd) {
        uint64_t v;
        if (read(w->evfd, &v, sizeof v) < 0) { /* EAGAIN: already drained */ }
        continue;
      }
      if ((size_t)fd < w->nfds && (w->fds[fd] & (FD_OURS | FD_WATCHED)) == FD_OURS) {
        /* an idle cached connection (closed by the peer, most likely): curl looks at it
         * when it reuses it; until then it leaves the set, or it would wake us in a loop */
        epoll_ctl(w->epfd, EPOLL_CTL_DEL, fd, NULL);
        w->fds[fd] = FD_OURS;
        continue;
      }
      uint32_t ev = evs[i].events;
      int mask = ((ev & (EPOLLIN | EPOLLHUP)) ? CURL_CSELECT_IN : 0) | ((ev & EPOLLOUT) ? CURL_CSELECT_OUT : 0) |
                 ((ev & EPOLLERR) ? CURL_CSELECT_ERR : 0);
      int running;
      curl_multi_socket_action(w->multi, fd, mask, &running);
    }
    run_timer_if_due(w);
    nactive -= settle(w);
  }

  /* Stopping: everything still here is answered once, as a retry. */
  ak_sink_outcome_t out = {.result = AK_SINK_RETRY};
  snprintf(out.reason, sizeof out.reason, "sink stopped");
  while (w->active) {
    http_req_t *r = w->active;
    active_unlink(w, r);
    curl_multi_remove_handle(w->multi, r->easy);
    req_finish(r, &out);
  }
  for (;;) {
    pthread_mutex_lock(&w->mu);
    http_req_t *r = w->q_head;
    if (r) {
      w->q_head = r->next;
      if (!w->q_head) w->q_tail = NULL;
    }
    pthread_mutex_unlock(&w->mu);
    if (!r) break;
    req_finish(r, &out);
  }
  return NULL;
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

static void wake_worker(http_worker_t *w) {
  uint64_t one = 1;
  if (write(w->evfd, &one, sizeof one) < 0) { /* EAGAIN: the counter is already nonzero */ }
}

/* The next worker in turn, or its neighbour when that one has less to do: two loads,
 * enough to keep one slow worker (a receiver that stalls its connections) from piling
 * up what the others could take. */
static http_worker_t *pick_worker(http_sink_t *s) {
  if (s->nworkers == 1) return s->workers[0];
  unsigned i = atomic_fetch_add_explicit(&s->next_worker, 1, memory_order_relaxed) % (unsigned)s->nworkers;
  http_worker_t *a = s->workers[i], *b = s->workers[(i + 1) % s->nworkers];
  return atomic_load_explicit(&b->load, memory_order_relaxed) < atomic_load_explicit(&a->load, memory_order_relaxed)
             ? b : a;
}

/* Takes one of the sink's HTTP_MAX_OUTSTANDING places; false when none is left. */
static bool reserve_outstanding(http_sink_t *s) {
  size_t n = atomic_load(&s->outstanding);
  do {
    if (n >= HTTP_MAX_OUTSTANDING) return false;
  } while (!atomic_compare_exchange_weak(&s->outstanding, &n, n + 1));
  return true;
}

static void http_deliver(void *self, const ak_sink_attempt_t *att, void *ctx, ak_sink_done_fn done) {
  http_sink_t *s = self;
  const ak_envelope_t *env = att->env;
  ak_sink_outcome_t out = {.result = AK_SINK_RETRY};
  if (!ak_egress_url_allowed(s->egress, s->url, out.reason, sizeof out.reason)) {
    out.result = AK_SINK_PERMANENT;
    done(ctx, &out);
    return;
  }
  char id[AK_UUID_STR_LEN];
  ak_uuid_format(env->id, id);
  /* The identity values (NULL = header not sent), measured first so that the request, its
   * body and all its header lines are one allocation. */
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
                forwarded_bound(env);
  http_req_t *r = malloc(sizeof *r + env->body_len + room);
  if (!r) goto oom;
  memset(r, 0, sizeof *r);
  r->sink = s;
  r->ctx = ctx;
  r->done = done;
  memcpy(r->id, id, sizeof id);
  r->body = (const uint8_t *)r->mem;
  r->body_len = env->body_len;
  if (env->body_len) memcpy(r->mem, env->body, env->body_len);
  char *p = r->mem + env->body_len;
  r->lines = p;
#define PUT(name, val, vlen) p = put_line(p, name, strlen(name), val, vlen), r->nident++
  PUT("content-type", ctype, ctype_len);
  PUT("x-ankusa-id", id, id_len);
  PUT("x-ankusa-source", source, source_len);
  if (idem) PUT("x-ankusa-idempotency-key", idem, idem_len);
  if (tenant) PUT("x-ankusa-tenant", tenant, env->tenant_len);
  if (dedupe) PUT("x-ankusa-dedupe-key", dedupe, dedupe_len);
  if (replay) PUT("x-ankusa-replay-id", replay, replay_len);
#undef PUT
  memcpy(p, "Expect:", sizeof "Expect:");
  p += sizeof "Expect:";
  r->nident++;
  collect_forwarded(s, att, p, &r->nfwd);

  http_worker_t *w = pick_worker(s);
  r->worker = w;
  pthread_mutex_lock(&w->mu);
  bool stopped = w->stop;
  if (stopped || !reserve_outstanding(s)) {
    pthread_mutex_unlock(&w->mu);
    req_free(r);
    snprintf(out.reason, sizeof out.reason, stopped ? "sink stopped" : "http sink queue full");
    done(ctx, &out);
    return;
  }
  atomic_fetch_add(&w->load, 1);
  if (w->q_tail) w->q_tail->next = r;
  else w->q_head = r;
  w->q_tail = r;
  /* Only the first entry wakes the worker: it takes the whole queue (up to its free
   * slots) on every turn, so later entries ride on this wake-up or, when the slots are
   * full, on the worker's own look at the queue after a transfer finishes. The eventfd
   * stays readable until the worker reads it, so a wake-up sent while it is busy is not
   * lost either. */
  bool wake = r == w->q_head;
  pthread_mutex_unlock(&w->mu);
  if (wake) wake_worker(w);
  return;
oom:
  snprintf(out.reason, sizeof out.reason, "out of memory");
  done(ctx, &out);
}

static void worker_free(http_worker_t *w) {
  if (!w) return;
  for (size_t i = 0; i < w->nspare; i++) curl_easy_cleanup(w->spare[i]);
  /* the multi's callbacks may still touch epfd and fds while it closes its connections */
  if (w->multi) curl_multi_cleanup(w->multi);
  if (w->evfd >= 0) close(w->evfd);
  if (w->epfd >= 0) close(w->epfd);
  free(w->fds);
  if (w->mu_init) pthread_mutex_destroy(&w->mu);
  free(w);
}

static void http_destroy(void *self) {
  http_sink_t *s = self;
  if (!s) return;
  /* all told first, then all joined: they wind down side by side */
  for (size_t i = 0; i < s->nworkers; i++) {
    http_worker_t *w = s->workers[i];
    if (!w || !w->thread_started) continue;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_mutex_unlock(&w->mu);
    wake_worker(w);
  }
  for (size_t i = 0; i < s->nworkers; i++)
    if (s->workers[i] && s->workers[i]->thread_started) pthread_join(s->workers[i]->thread, NULL);
  for (size_t i = 0; i < s->nworkers; i++) worker_free(s->workers[i]);
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

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_FAILED_INIT;
static void curl_init(void) { curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

static int parse_opts(http_sink_t *s, const json_t *opts, char *err, size_t errlen) {
  const json_t *url = opts ? json_object_get(opts, "url") : NULL;
  if (!json_is_string(url) || !*json_string_value(url)) {
    snprintf(err, errlen, "url: missing required key");
    return -1;
  }
  s->url = strdup(json_string_value(url));
  if (!s->url) goto oom;

  const json_t *m = json_object_get(opts, "method");
  if (m && !json_is_null(m)) {
    const char *mv = json_is_string(m) ? json_string_value(m) : "";
    if (strcasecmp(mv, "post") == 0) s->method = NULL;
    else if (strcasecmp(mv, "put") == 0) s->method = "PUT";
    else if (strcasecmp(mv, "patch") == 0) s->method = "PATCH";
    else {
      snprintf(err, errlen, "method: must be one of post, put, patch");
      return -1;
    }
  }

  long v;
  if (opt_int(opts, "timeout_ms", 5000, 1, 3600000, &v, err, errlen) != 0) return -1;
  s->timeout_ms = v;
  if (opt_int(opts, "max_response_bytes", 65536, 0, 1073741824, &v, err, errlen) != 0) return -1;
  s->max_resp = (size_t)v;

  const json_t *h = json_object_get(opts, "headers");
  if (h && !json_is_null(h)) {
    if (!json_is_object(h)) {
      snprintf(err, errlen, "headers: must be a mapping of name: value");
      return -1;
    }
    s->conf_headers = calloc(json_object_size(h) + 1, sizeof *s->conf_headers);
    s->conf_names = calloc(json_object_size(h) + 1, sizeof *s->conf_names);
    if (!s->conf_headers || !s->conf_names) goto oom;
    const char *name;
    const json_t *hv;
    json_object_foreach((json_t *)h, name, hv) {
      if (!ak_header_name_ok(name, strlen(name))) {
        snprintf(err, errlen, "headers.%.64s: not a valid header name", name);
        return -1;
      }
      if (!json_is_string(hv) || !header_value_ok(json_string_value(hv))) {
        snprintf(err, errlen, "headers.%.64s: must be a string without line breaks", name);
        return -1;
      }
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

  const json_t *sec = json_object_get(opts, "secret");
  if (sec && !json_is_null(sec)) {
    const json_t *one[1] = {sec};
    size_t n = json_is_array(sec) ? json_array_size(sec) : 1;
    if ((!json_is_array(sec) && !json_is_string(sec)) || n == 0 || n > HTTP_MAX_SECRETS) {
      snprintf(err, errlen, "secret: must be a non-empty string or a list of 1..%d", HTTP_MAX_SECRETS);
      return -1;
    }
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

/* One per online CPU, up to HTTP_MAX_WORKERS: beyond the cores there is nothing to gain,
 * and every worker holds its own connections to the receiver. */
static size_t worker_count(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
#ifdef AK_TEST_HOOKS
  /* test builds only: the same cases with one worker and with several, on any box */
  const char *t = getenv("ANKUSA_TEST_HTTP_WORKERS");
  if (t && atol(t) > 0) n = atol(t);
#endif
  if (n < 1) n = 1;
  return n > HTTP_MAX_WORKERS ? HTTP_MAX_WORKERS : (size_t)n;
}

static http_worker_t *worker_new(http_sink_t *s, unsigned index, char *err, size_t errlen) {
  http_worker_t *w = calloc(1, sizeof *w);
  if (!w) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  w->sink = s;
  w->index = index;
  w->epfd = w->evfd = -1;
  w->deadline_us = -1;
  pthread_mutex_init(&w->mu, NULL);
  w->mu_init = true;
  w->multi = curl_multi_init();
  if (!w->multi) {
    snprintf(err, errlen, "out of memory");
    goto fail;
  }
  /* keep a connection per transfer slot: the default cache (4 x handles added) shrinks as
   * handles come and go, and a closed connection means a new TCP (and TLS) handshake */
  curl_multi_setopt(w->multi, CURLMOPT_MAXCONNECTS, (long)HTTP_MAX_ACTIVE);
  w->epfd = epoll_create1(EPOLL_CLOEXEC);
  w->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  struct epoll_event ev = {.events = EPOLLIN};
  ev.data.fd = w->evfd;
  if (w->epfd < 0 || w->evfd < 0 || epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->evfd, &ev) != 0) {
    snprintf(err, errlen, "cannot set up the http sink's event loop: %s", strerror(errno));
    goto fail;
  }
  curl_multi_setopt(w->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
  curl_multi_setopt(w->multi, CURLMOPT_SOCKETDATA, w);
  curl_multi_setopt(w->multi, CURLMOPT_TIMERFUNCTION, on_timer);
  curl_multi_setopt(w->multi, CURLMOPT_TIMERDATA, w);
  return w;
fail:
  worker_free(w);
  return NULL;
}

static void *http_create(const json_t *opts, const ak_sink_ctx_t *sctx, char *err, size_t errlen) {
  const char *source_id = sctx ? sctx->source_id : NULL;
  const ak_egress_t *egress = sctx ? sctx->egress : NULL;
  pthread_once(&curl_once, curl_init);
  if (curl_init_rc != CURLE_OK) {
    snprintf(err, errlen, "libcurl init failed: %s", curl_easy_strerror(curl_init_rc));
    return NULL;
  }
  http_sink_t *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  snprintf(s->source_id, sizeof s->source_id, "%s", source_id ? source_id : "");
  if (parse_opts(s, opts, err, errlen) != 0) goto fail;
  if (!egress) {
    s->owned_egress = ak_egress_new(NULL, 0, false, err, errlen);
    if (!s->owned_egress) goto fail;
    egress = s->owned_egress;
  }
  s->egress = egress;
  size_t n = worker_count();
  for (size_t i = 0; i < n; i++) {
    http_worker_t *w = worker_new(s, (unsigned)i, err, errlen);
    if (!w) goto fail;
    s->workers[s->nworkers++] = w;
    if (pthread_create(&w->thread, NULL, worker, w) != 0) {
      snprintf(err, errlen, "cannot start the http sink thread");
      goto fail;
    }
    w->thread_started = true;
  }
  return s;
fail:
  http_destroy(s);
  return NULL;
}


/* ---- config rules (check-config reports them; create would refuse the same) ----------- */

/* A static http sink whose URL the guard can never let through refuses the boot, so
 * the mistake shows in check-config instead of as dead letters. The URL is never
 * echoed: it may carry credentials. Names are not resolved here: what a name points at
 * can change, and the sink judges the address it connects to. */
static void check_http_url(ak_check_t *c, const char *label, const char *url, const ak_egress_t *g) {
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
  if (!g) goto done; /* egress.* is broken: its own error says so */
  curl_url_get(h, CURLUPART_SCHEME, &scheme, 0);
  char why[128];
  if (!scheme || (strcmp(scheme, "https") && strcmp(scheme, "http"))) {
    ak_check_error(c, "%s: only https:// (or http:// with egress.allow_http) URLs are allowed", label);
    goto done;
  }
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
  if (url) check_http_url(c, label, url, g);
  ak_egress_free(g);
  const char *name;
  json_t *v;
  json_object_foreach((json_t *)json_object_get(sink, "headers"), name, v) {
    const char *val = json_string_value(v);
    if (!ak_header_name_ok(name, strlen(name))) {
      json_t *tmp = json_string(name);
      char *r = tmp ? ak_check_render(tmp, false) : NULL;
      ak_check_error(c, "%s.headers: %s is not a header name", path, r ? r : "?");
      free(r);
      json_decref(tmp);
    } else if (val && strpbrk(val, "\r\n")) {
      ak_check_error(c, "%s.headers.%s: a header value cannot hold a line break", path, name);
    }
  }
}

const ak_sink_vtable_t ak_sink_http = {
  .plugin = {.type = "http", .doc = "POST (PUT, PATCH) of the raw body to one URL, Standard Webhooks signed",
             .options = http_opts, .check = http_check},
  .durable = true,
  .create = http_create,
  .deliver = http_deliver,
  .destroy = http_destroy,
};
