/* Unit tests: the http sink against a receiver in this process (our http/server.h on
 * 127.0.0.1, port 0): request shape, Standard Webhooks signatures checked with an HMAC
 * computed here, status mapping, timeouts, response cap, the egress guard, the per-attempt
 * x-ankusa-* headers and forwarded provider headers with their precedence, and whsec_
 * signatures checked by our own standard_webhooks verifier. */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "core/config.h"
#include "core/envelope.h"
#include "sinks/egress.h"
#include "sinks/forward.h"
#include "core/sources.h"
#include "http/server.h"
#include "sinks/sink.h"
#include "verify/verifier.h"

extern const ak_sink_vtable_t ak_sink_http;

/* ---- receiver --------------------------------------------------------------------- */

#define MAX_HDRS 64

/* A request held by /sleep/<ms>: the sleeper thread resumes it when due. */
typedef struct nap {
  struct nap *next;
  struct timespec due;
  ak_hreq_t *r;
} nap_t;

typedef struct {
  ak_hserver_t *srv;
  unsigned short port;
  pthread_mutex_t mu;
  int count;
  char method[16];
  char url[256];
  int nhdrs;
  char *hname[MAX_HDRS], *hval[MAX_HDRS];
  unsigned char *body;
  size_t body_len;
  int completed_ok, completed_err; /* requests whose answer went out whole, or that ended first */
  const char *script[8];           /* /script: the n-th request is answered as script[n % nscript] */
  int nscript;
  /* the sleeper */
  pthread_t sleeper;
  pthread_cond_t nap_cv;
  nap_t *naps;
  bool quit;
} recv_t;

/* One request's state (ak_hreq_data). */
typedef struct {
  unsigned char *buf;
  size_t len;
  const char *url; /* what to answer: the path, or the script's entry for /script */
  char path[256];
} conn_t;

static void clear_request(recv_t *rv) {
  for (int i = 0; i < rv->nhdrs; i++) {
    free(rv->hname[i]);
    free(rv->hval[i]);
  }
  rv->nhdrs = 0;
  free(rv->body);
  rv->body = NULL;
  rv->body_len = 0;
}

static void rv_head(void *cls, ak_hreq_t *r) {
  (void)cls;
  conn_t *c = calloc(1, sizeof *c);
  size_t n;
  const char *p = ak_hreq_path(r, &n);
  snprintf(c->path, sizeof c->path, "%.*s", (int)n, p);
  ak_hreq_set_data(r, c);
}

static void rv_body(void *cls, ak_hreq_t *r, const uint8_t *p, size_t n) {
  (void)cls;
  conn_t *c = ak_hreq_data(r);
  c->buf = realloc(c->buf, c->len + n);
  memcpy(c->buf + c->len, p, n);
  c->len += n;
}

/* Paths: /status/<code>[/<retry-after>], /big/<bytes>, /redirect, /sleep/<ms> (answered
 * 200 that much later) and /script (one of those, chosen by the request's number: one sink
 * URL, many answers). */
static void rv_answer(recv_t *rv, ak_hreq_t *r) {
  (void)rv;
  conn_t *c = ak_hreq_data(r);
  const char *url = c->url;
  unsigned code = 200;
  char retry_after[64] = "";
  size_t big = 0;
  const char *loc = NULL;
  if (strncmp(url, "/status/", 8) == 0) {
    code = (unsigned)atoi(url + 8);
    const char *ra = strchr(url + 8, '/');
    if (ra) {
      snprintf(retry_after, sizeof retry_after, "%s", ra + 1);
      for (char *p = retry_after; *p; p++)
        if (*p == '_') *p = ' ';
    }
  } else if (strncmp(url, "/big/", 5) == 0) {
    big = (size_t)atol(url + 5);
  } else if (strcmp(url, "/redirect") == 0) {
    code = 302;
    loc = "/status/200";
  }
  if (*retry_after) ak_hreq_add_header(r, "Retry-After", retry_after);
  if (loc) ak_hreq_add_header(r, "Location", loc);
  if (big) {
    char *b = malloc(big);
    memset(b, 'x', big);
    ak_hreq_reply(r, code, NULL, b, big);
    free(b);
  } else {
    ak_hreq_reply(r, code, NULL, "ok", 2);
  }
}

static void rv_end(void *cls, ak_hreq_t *r) {
  recv_t *rv = cls;
  conn_t *c = ak_hreq_data(r);
  pthread_mutex_lock(&rv->mu);
  clear_request(rv);
  rv->count++;
  snprintf(rv->method, sizeof rv->method, "%s", ak_hreq_method(r));
  snprintf(rv->url, sizeof rv->url, "%s", c->path);
  const ak_header_t *hs;
  size_t nh = ak_hreq_headers(r, &hs);
  for (size_t i = 0; i < nh && rv->nhdrs < MAX_HDRS; i++) {
    rv->hname[rv->nhdrs] = strndup(hs[i].name, hs[i].name_len);
    rv->hval[rv->nhdrs] = strndup(hs[i].value, hs[i].value_len);
    rv->nhdrs++;
  }
  rv->body = c->buf;
  rv->body_len = c->len;
  c->buf = NULL;
  c->url = c->path;
  if (strcmp(c->path, "/script") == 0 && rv->nscript) c->url = rv->script[(rv->count - 1) % rv->nscript];
  if (strncmp(c->url, "/sleep/", 7) == 0) {
    /* held without a thread; the sleeper resumes it */
    nap_t *n = calloc(1, sizeof *n);
    n->r = r;
    clock_gettime(CLOCK_MONOTONIC, &n->due);
    long ms = atol(c->url + 7);
    n->due.tv_sec += ms / 1000;
    n->due.tv_nsec += (ms % 1000) * 1000000;
    if (n->due.tv_nsec >= 1000000000) n->due.tv_sec++, n->due.tv_nsec -= 1000000000;
    n->next = rv->naps;
    rv->naps = n;
    ak_hreq_suspend(r);
    pthread_cond_broadcast(&rv->nap_cv);
    pthread_mutex_unlock(&rv->mu);
    return;
  }
  pthread_mutex_unlock(&rv->mu);
  rv_answer(rv, r);
}

static void rv_resume(void *cls, ak_hreq_t *r) {
  (void)cls;
  ak_hreq_reply(r, 200, NULL, "ok", 2);
}

static void rv_done(void *cls, ak_hreq_t *r, bool answered) {
  recv_t *rv = cls;
  pthread_mutex_lock(&rv->mu);
  if (answered) rv->completed_ok++;
  else rv->completed_err++;
  pthread_mutex_unlock(&rv->mu);
  conn_t *c = ak_hreq_data(r);
  if (c) {
    free(c->buf);
    free(c);
  }
}

static const ak_hhandler_t rv_handler = {rv_head, rv_body, rv_end, rv_resume, rv_done, NULL};

static bool due(const struct timespec *t, const struct timespec *now) {
  return now->tv_sec > t->tv_sec || (now->tv_sec == t->tv_sec && now->tv_nsec >= t->tv_nsec);
}

static void *sleeper_main(void *arg) {
  recv_t *rv = arg;
  pthread_mutex_lock(&rv->mu);
  while (!rv->quit || rv->naps) {
    struct timespec now, next = {0, 0};
    clock_gettime(CLOCK_MONOTONIC, &now);
    bool any = false;
    for (nap_t **pp = &rv->naps; *pp;) {
      nap_t *n = *pp;
      if (due(&n->due, &now)) {
        *pp = n->next;
        ak_hreq_resume(n->r);
        free(n);
        continue;
      }
      if (!any || !due(&n->due, &next)) next = n->due;
      any = true;
      pp = &n->next;
    }
    if (any) pthread_cond_timedwait(&rv->nap_cv, &rv->mu, &next);
    else if (!rv->quit) pthread_cond_wait(&rv->nap_cv, &rv->mu);
  }
  pthread_mutex_unlock(&rv->mu);
  return NULL;
}

/* idle_s > 0: the receiver closes a keep-alive connection idle that long. */
static recv_t *recv_start_idle(unsigned idle_s) {
  recv_t *rv = calloc(1, sizeof *rv);
  pthread_mutex_init(&rv->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&rv->nap_cv, &ca);
  pthread_condattr_destroy(&ca);
  cr_assert_eq(pthread_create(&rv->sleeper, NULL, sleeper_main, rv), 0);
  ak_hserver_cfg_t cfg = {.name = "receiver", .ip = "127.0.0.1", .port = 0, .loops = 2,
                          .limits = {.idle_timeout_ms = idle_s * 1000}, .handler = &rv_handler, .ctx = rv};
  char *err = NULL;
  rv->srv = ak_hserver_new(&cfg, &err);
  cr_assert_not_null(rv->srv, "receiver did not start: %s", err ? err : "");
  cr_assert_eq(ak_hserver_start(rv->srv, &err), 0, "receiver did not start: %s", err ? err : "");
  rv->port = (unsigned short)ak_hserver_port(rv->srv);
  cr_assert_neq(rv->port, 0);
  return rv;
}

static recv_t *recv_start(void) { return recv_start_idle(0); }

static void recv_stop(recv_t *rv) {
  ak_hserver_stop(rv->srv); /* returns once the sleeper resumed every held request */
  ak_hserver_free(rv->srv);
  pthread_mutex_lock(&rv->mu);
  rv->quit = true;
  pthread_cond_broadcast(&rv->nap_cv);
  pthread_mutex_unlock(&rv->mu);
  pthread_join(rv->sleeper, NULL);
  clear_request(rv);
  pthread_cond_destroy(&rv->nap_cv);
  pthread_mutex_destroy(&rv->mu);
  free(rv);
}

static const char *recv_header(recv_t *rv, const char *name) {
  for (int i = 0; i < rv->nhdrs; i++)
    if (strcasecmp(rv->hname[i], name) == 0) return rv->hval[i];
  return NULL;
}

static int recv_header_count(recv_t *rv, const char *name) {
  int n = 0;
  for (int i = 0; i < rv->nhdrs; i++)
    if (strcasecmp(rv->hname[i], name) == 0) n++;
  return n;
}

static int recv_count(recv_t *rv) {
  pthread_mutex_lock(&rv->mu);
  int n = rv->count;
  pthread_mutex_unlock(&rv->mu);
  return n;
}

/* ---- sink helpers ----------------------------------------------------------------- */

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int calls;
  ak_sink_outcome_t out;
  char thread[16]; /* the name of the thread that answered */
} waiter_t;

static void on_done(void *ctx, const ak_sink_outcome_t *out) {
  waiter_t *w = ctx;
  char name[16] = "";
  pthread_getname_np(pthread_self(), name, sizeof name);
  pthread_mutex_lock(&w->mu);
  w->calls++;
  w->out = *out;
  memcpy(w->thread, name, sizeof name);
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

static const uint8_t hook_id[16] = {0x01, 0x8f, 0x2a, 0x3b, 0x4c, 0x5d, 0x7e, 0x6f,
                                    0x80, 0x91, 0xa2, 0xb3, 0xc4, 0xd5, 0xe6, 0xf7};

static ak_envelope_t envelope(const uint8_t *body, size_t len, const char *ctype) {
  ak_envelope_t env;
  memset(&env, 0, sizeof env);
  memcpy(env.id, hook_id, 16);
  env.seq = 42;
  env.tenant = "acme";
  env.tenant_len = 4;
  env.source = "github";
  env.source_len = 6;
  env.content_type = ctype;
  env.content_type_len = ctype ? strlen(ctype) : 0;
  env.body = body;
  env.body_len = len;
  return env;
}

/* Deliver one attempt and wait for the single outcome. */
static ak_sink_outcome_t deliver_att(void *sink, const ak_sink_attempt_t *att) {
  waiter_t w = {.calls = 0};
  pthread_mutex_init(&w.mu, NULL);
  pthread_cond_init(&w.cv, NULL);
  ak_sink_http.deliver(sink, att, &w, on_done);
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 15;
  pthread_mutex_lock(&w.mu);
  while (w.calls == 0)
    if (pthread_cond_timedwait(&w.cv, &w.mu, &until) != 0) break;
  pthread_mutex_unlock(&w.mu);
  cr_assert_eq(w.calls, 1, "done called %d times", w.calls);
  usleep(20 * 1000); /* a second done call would show up here */
  cr_assert_eq(w.calls, 1, "done called %d times", w.calls);
  ak_sink_outcome_t out = w.out;
  pthread_cond_destroy(&w.cv);
  pthread_mutex_destroy(&w.mu);
  return out;
}

static ak_sink_outcome_t deliver(void *sink, const ak_envelope_t *env) {
  return deliver_att(sink, &(ak_sink_attempt_t){.env = env, .attempt = 1});
}

static ak_egress_t *loopback_egress(void) {
  const char *cidrs[] = {"127.0.0.0/8"};
  char err[160];
  ak_egress_t *e = ak_egress_new(cidrs, 1, true, err, sizeof err);
  cr_assert_not_null(e, "%s", err);
  return e;
}

/* opts JSON with %d = the receiver port (printf-style). */
static void *sink_new(const ak_egress_t *egress, const char *fmt, unsigned short port) {
  char buf[2048];
  snprintf(buf, sizeof buf, fmt, port);
  json_error_t je;
  json_t *opts = json_loads(buf, 0, &je);
  cr_assert_not_null(opts, "bad test json: %s", je.text);
  char err[256] = "";
  void *s = ak_sink_http.create(opts, &(ak_sink_ctx_t){.source_id = "github", .egress = egress}, err, sizeof err);
  json_decref(opts);
  cr_assert_not_null(s, "create: %s", err);
  return s;
}

static ak_sink_outcome_t post_to(recv_t *rv, const ak_egress_t *eg, const char *path) {
  char fmt[256];
  snprintf(fmt, sizeof fmt, "{\"url\":\"http://127.0.0.1:%%d%s\",\"timeout_ms\":3000}", path);
  void *s = sink_new(eg, fmt, rv->port);
  ak_envelope_t env = envelope((const uint8_t *)"{}", 2, "application/json");
  ak_sink_outcome_t out = deliver(s, &env);
  ak_sink_http.destroy(s);
  return out;
}

/* ---- tests ------------------------------------------------------------------------ */

Test(http_sink, delivers_method_body_and_headers) {
  recv_t *rv = recv_start();
  ak_egress_t *eg = loopback_egress();
  const char *methods[][2] = {{"post", "POST"}, {"put", "PUT"}, {"patch", "PATCH"}};
  uint8_t body[70000];
  for (size_t i = 0; i < sizeof body; i++) body[i] = (uint8_t)((i * 131u) ^ (i >> 8));
  body[5] = 0;
  for (size_t m = 0; m < 3; m++) {
    char fmt[512];
    snprintf(fmt, sizeof fmt,
             "{\"url\":\"http://127.0.0.1:%%d/hooks\",\"method\":\"%s\","
             "\"headers\":{\"Authorization\":\"Bearer t0k\",\"x-team\":\"blue\",\"X-Ankusa-Id\":\"forged\"}}",
             methods[m][0]);
    void *s = sink_new(eg, fmt, rv->port);
    ak_envelope_t env = envelope(body, sizeof body, "application/vnd.test+json");
    ak_sink_outcome_t out = deliver(s, &env);
    cr_expect_eq(out.result, AK_SINK_OK, "%s: %s", methods[m][0], out.reason);
    pthread_mutex_lock(&rv->mu);
    cr_expect_str_eq(rv->method, methods[m][1]);
    cr_expect_str_eq(rv->url, "/hooks");
    cr_expect_eq(rv->body_len, sizeof body);
    cr_expect(rv->body_len == sizeof body && memcmp(rv->body, body, sizeof body) == 0, "body byte-for-byte");
    cr_expect_str_eq(recv_header(rv, "content-type"), "application/vnd.test+json");
    cr_expect_str_eq(recv_header(rv, "x-ankusa-id"), "018f2a3b-4c5d-7e6f-8091-a2b3c4d5e6f7");
    cr_expect_eq(recv_header_count(rv, "x-ankusa-id"), 1, "an operator header cannot forge the id");
    cr_expect_str_eq(recv_header(rv, "x-ankusa-source"), "github");
    cr_expect_str_eq(recv_header(rv, "x-ankusa-tenant"), "acme");
    cr_expect_str_eq(recv_header(rv, "x-ankusa-idempotency-key"), "018f2a3b-4c5d-7e6f-8091-a2b3c4d5e6f7");
    cr_expect_str_eq(recv_header(rv, "authorization"), "Bearer t0k");
    cr_expect_str_eq(recv_header(rv, "x-team"), "blue");
    cr_expect_null(recv_header(rv, "webhook-signature"), "no secret, no signature");
    cr_expect_null(recv_header(rv, "expect"));
    pthread_mutex_unlock(&rv->mu);
    ak_sink_http.destroy(s);
  }
  cr_expect_eq(recv_count(rv), 3);
  ak_egress_free(eg);
  recv_stop(rv);
}

Test(http_sink, default_content_type_and_empty_body) {
  recv_t *rv = recv_start();
  ak_egress_t *eg = loopback_egress();
  void *s = sink_new(eg, "{\"url\":\"http://127.0.0.1:%d/x\"}", rv->port);
  ak_envelope_t env = envelope(NULL, 0, NULL);
  env.tenant = NULL;
  env.tenant_len = 0;
  ak_sink_outcome_t out = deliver(s, &env);
  cr_expect_eq(out.result, AK_SINK_OK, "%s", out.reason);
  cr_expect_str_eq(recv_header(rv, "content-type"), "application/octet-stream");
  cr_expect_null(recv_header(rv, "x-ankusa-tenant"), "no tenant, no header");
  cr_expect_eq(rv->body_len, 0);
  ak_sink_http.destroy(s);
  ak_egress_free(eg);
  recv_stop(rv);
}

static void b64(const unsigned char *in, size_t n, char *out) { EVP_EncodeBlock((unsigned char *)out, in, (int)n); }

Test(http_sink, standard_webhooks_signature_per_secret) {
  recv_t *rv = recv_start();
  ak_egress_t *eg = loopback_egress();
  const char *raw_key1 = "sixteen-byte-key\x01\x02\xff";
  char whsec[128] = "whsec_";
  b64((const unsigned char *)raw_key1, strlen(raw_key1), whsec + 6);
  const char *key2 = "plain secret two";
  char fmt[512];
  snprintf(fmt, sizeof fmt, "{\"url\":\"http://127.0.0.1:%%d/signed\",\"secret\":[\"%s\",\"%s\"]}", whsec, key2);
  void *s = sink_new(eg, fmt, rv->port);
  const char *body = "{\"event\":\"push\",\"n\":1}";
  ak_envelope_t env = envelope((const uint8_t *)body, strlen(body), "application/json");
  time_t before = time(NULL);
  ak_sink_outcome_t out = deliver(s, &env);
  time_t after = time(NULL);
  cr_assert_eq(out.result, AK_SINK_OK, "%s", out.reason);

  const char *id = recv_header(rv, "webhook-id");
  const char *ts = recv_header(rv, "webhook-timestamp");
  const char *sig = recv_header(rv, "webhook-signature");
  cr_assert(id && ts && sig);
  cr_expect_str_eq(id, "018f2a3b-4c5d-7e6f-8091-a2b3c4d5e6f7");
  long long t = atoll(ts);
  cr_expect(t >= before && t <= after, "timestamp %lld in [%lld, %lld]", t, (long long)before, (long long)after);

  char signed_content[256];
  int n = snprintf(signed_content, sizeof signed_content, "%s.%s.%s", id, ts, body);
  const struct { const void *key; size_t len; } keys[] = {{raw_key1, strlen(raw_key1)}, {key2, strlen(key2)}};
  char want[256] = "";
  for (size_t i = 0; i < 2; i++) {
    unsigned char mac[32];
    unsigned int maclen = 0;
    HMAC(EVP_sha256(), keys[i].key, (int)keys[i].len, (const unsigned char *)signed_content, (size_t)n, mac,
         &maclen);
    cr_assert_eq(maclen, 32);
    char enc[64];
    b64(mac, maclen, enc);
    strcat(want, i ? " v1," : "v1,");
    strcat(want, enc);
  }
  cr_expect_str_eq(sig, want);
  ak_sink_http.destroy(s);
  ak_egress_free(eg);
  recv_stop(rv);
}

/* ---- the sink's signatures against our own verifier -------------------------------- */

/* "whsec_" + the base64 of n key bytes made from seed; unpadded: the '=' padding cut. */
static void make_whsec(char *out, size_t n, unsigned seed, bool unpadded) {
  unsigned char key[300];
  cr_assert_leq(n, sizeof key);
  for (size_t i = 0; i < n; i++) key[i] = (unsigned char)(seed * 131u + i * 7u + (i >> 3));
  strcpy(out, "whsec_");
  b64(key, n, out + 6);
  size_t l = strlen(out);
  while (unpadded && out[l - 1] == '=') out[--l] = 0;
}

/* One hook through an http sink signing with sink_secret (JSON: a string or a list), and
 * the request the receiver got through a standard_webhooks verifier holding
 * verify_secret: what our own ingest would answer for it. */
static ak_verify_reason_t sink_then_verify(recv_t *rv, const ak_egress_t *eg, const char *sink_secret,
                                           const char *verify_secret) {
  char fmt[1024];
  snprintf(fmt, sizeof fmt, "{\"url\":\"http://127.0.0.1:%%d/signed\",\"secret\":%s}", sink_secret);
  void *s = sink_new(eg, fmt, rv->port);
  const char *body = "{\"type\":\"invoice.paid\",\"n\":7}";
  ak_envelope_t env = envelope((const uint8_t *)body, strlen(body), "application/json");
  ak_sink_outcome_t out = deliver(s, &env);
  ak_sink_http.destroy(s);
  cr_assert_eq(out.result, AK_SINK_OK, "%s", out.reason);

  char spec_text[1024], err[256] = "";
  snprintf(spec_text, sizeof spec_text, "{\"type\":\"standard_webhooks\",\"secret\":%s}", verify_secret);
  json_t *spec = json_loads(spec_text, 0, NULL);
  cr_assert_not_null(spec, "%s", spec_text);
  ak_verifier_t *v = ak_verifier_new(spec, err, sizeof err);
  cr_assert_not_null(v, "verifier refused %s: %s", verify_secret, err);
  pthread_mutex_lock(&rv->mu);
  ak_header_t hs[MAX_HDRS];
  for (int i = 0; i < rv->nhdrs; i++)
    hs[i] = (ak_header_t){rv->hname[i], strlen(rv->hname[i]), rv->hval[i], strlen(rv->hval[i])};
  cr_assert_not_null(recv_header(rv, "webhook-signature"), "signed");
  ak_verify_input_t in = {.headers = hs, .nheaders = (size_t)rv->nhdrs, .body = rv->body,
                          .body_len = rv->body_len, .now_s = time(NULL)};
  ak_verify_reason_t r = ak_verifier_check(v, &in);
  pthread_mutex_unlock(&rv->mu);
  ak_verifier_free(v);
  json_decref(spec);
  return r;
}

/* The sink and the verifier decode a whsec_ secret with one decoder (verify/whsec.h): a
 * delivery signed with a secret passes the verifier configured with the same string,
 * whatever its key length and padding. */
Test(http_sink, whsec_signatures_pass_our_own_verifier) {
  recv_t *rv = recv_start();
  ak_egress_t *eg = loopback_egress();
  const struct {
    size_t n;
    bool unpadded;
    const char *what;
  } keys[] = {
    {80, false, "an 80-byte key (longer than an HMAC-SHA256 block: hashed first), '=' padding"},
    {16, false, "'==' padding"},
    {32, false, "'=' padding"},
    {33, false, "no padding"},
    {200, false, "a 200-byte key"},
    {65, true, "'=' padding left out"},
    {64, true, "'==' padding left out"},
  };
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    char sec[420], q[440];
    make_whsec(sec, keys[i].n, (unsigned)i + 1, keys[i].unpadded);
    snprintf(q, sizeof q, "\"%s\"", sec);
    cr_expect_eq(sink_then_verify(rv, eg, q, q), AK_VR_OK, "%s: %s", keys[i].what, sec);
    /* the verifier takes the key without its prefix as well: still the same key */
    snprintf(q, sizeof q, "\"%s\"", sec + 6);
    char qs[440];
    snprintf(qs, sizeof qs, "\"%s\"", sec);
    cr_expect_eq(sink_then_verify(rv, eg, qs, q), AK_VR_OK, "%s, prefix left out: %s", keys[i].what, sec);
  }
  /* controls: another key does not pass; rotation: any one of the sink's secrets does */
  char a[420], b[420], qa[440], qb[440], both[900];
  make_whsec(a, 80, 101, false);
  make_whsec(b, 80, 102, false);
  snprintf(qa, sizeof qa, "\"%s\"", a);
  snprintf(qb, sizeof qb, "\"%s\"", b);
  snprintf(both, sizeof both, "[%s,%s]", qa, qb);
  cr_expect_eq(sink_then_verify(rv, eg, qa, qb), AK_VR_NO_MATCH, "a different key must not pass");
  cr_expect_eq(sink_then_verify(rv, eg, both, qb), AK_VR_OK, "signed with both, checked with the second");
  ak_egress_free(eg);
  recv_stop(rv);
}

/* A string that is not a Standard Webhooks secret is refused by both sides, at create:
 * never a sink signing with a key our verifier would derive differently (or not at all). */
Test(http_sink, whsec_strings_refused_by_both) {
  const char *bad[] = {"whsec_",          "whsec_====",       "whsec_QUJD!",      "whsec_QQ==QUJD",
                       "whsec_QUJDR",     "whsec_ QUJDRA==",  "whsec_QUJD RA==",  "whsec_QUJDRA=\n",
                       "whsec_QUJDRA===", "whsec_Q",          "whsec_QUJD\tQQ==", "whsec_QUJD-_==",
                       "whsec_=QUJD"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char err[256] = "";
    json_t *opts = json_pack("{s:s,s:s}", "url", "https://example.com", "secret", bad[i]);
    void *s = ak_sink_http.create(opts, &(ak_sink_ctx_t){.source_id = "src"}, err, sizeof err);
    cr_expect_null(s, "the sink took %s", bad[i]);
    if (s) ak_sink_http.destroy(s);
    json_decref(opts);
    json_t *spec = json_pack("{s:s,s:s}", "type", "standard_webhooks", "secret", bad[i]);
    err[0] = 0;
    ak_verifier_t *v = ak_verifier_new(spec, err, sizeof err);
    cr_expect_null(v, "the verifier took %s", bad[i]);
    ak_verifier_free(v);
    json_decref(spec);
  }
}

Test(http_sink, bad_secrets_refused_at_create) {
  const char *bad[] = {"{\"url\":\"https://example.com\",\"secret\":\"whsec_!!!!\"}",
                       "{\"url\":\"https://example.com\",\"secret\":\"whsec_\"}",
                       "{\"url\":\"https://example.com\",\"secret\":[\"ok\",\"\"]}",
                       "{\"url\":\"https://example.com\",\"secret\":[]}",
                       "{\"url\":\"https://example.com\",\"secret\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\"]}",
                       "{\"url\":\"https://example.com\",\"method\":\"get\"}",
                       "{\"url\":\"https://example.com\",\"timeout_ms\":0}",
                       "{\"url\":\"https://example.com\",\"headers\":{\"bad name\":\"x\"}}",
                       "{\"url\":\"https://example.com\",\"headers\":{\"x\":\"a\\r\\nb: c\"}}",
                       "{\"method\":\"post\"}"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    json_t *opts = json_loads(bad[i], 0, NULL);
    cr_assert_not_null(opts);
    char err[256] = "";
    void *s = ak_sink_http.create(opts, &(ak_sink_ctx_t){.source_id = "src"}, err, sizeof err);
    cr_expect_null(s, "%s accepted", bad[i]);
    if (s) ak_sink_http.destroy(s);
    cr_expect(*err, "%s: no error", bad[i]);
    cr_expect(strstr(err, "!!!!") == NULL, "no secret in the error: %s", err);
    json_decref(opts);
  }
}

Test(http_sink, status_mapping) {
  recv_t *rv = recv_start();
  ak_egress_t *eg = loopback_egress();
  const unsigned ok[] = {200, 201, 204};
  for (size_t i = 0; i < 3; i++) {
    char p[32];
    snprintf(p, sizeof p, "/status/%u", ok[i]);
    ak_sink_outcome_t out = post_to(rv, eg, p);
    cr_expect_eq(out.result, AK_SINK_OK, "%u: %s", ok[i], out.reason);
    cr_expect_str_eq(out.reason, "", "%u: an ok has no reason", ok[i]);
  }
  const unsigned perm[] = {400, 401, 403, 404, 410, 413, 422};
  for (size_t i = 0; i < sizeof perm / sizeof perm[0]; i++) {
    char p[32], want[16];
    snprintf(p, sizeof p, "/status/%u", perm[i]);
    snprintf(want, sizeof want, "http %u", perm[i]);
    ak_sink_outcome_t out = post_to(rv, eg, p);
    cr_expect_eq(out.result, AK_SINK_PERMANENT, "%u", perm[i]);
    cr_expect_str_eq(out.reason, want);
  }
  ak_sink_outcome_t out = post_to(rv, eg, "/status/429/7");
  cr_expect_eq(out.result, AK_SINK_RETRY);
  cr_expect_eq(out.retry_after_ms, 7000);
  cr_expect_str_eq(out.reason, "http 429");

  out = post_to(rv, eg, "/status/503");
  cr_expect_eq(out.result, AK_SINK_RETRY);
  cr_expect_eq(out.retry_after_ms, 0);
  cr_expect_str_eq(out.reason, "http 503");

  out = post_to(rv, eg, "/status/408/2");
  cr_expect_eq(out.result, AK_SINK_RETRY);
  cr_expect_eq(out.retry_after_ms, 2000);

  /* An HTTP date 60 s ahead (underscores stand for spaces in the test path). */
  char path[128], date[64];
  time_t later = time(NULL) + 60;
  struct tm tm;
  gmtime_r(&later, &tm);
  strftime(date, sizeof date, "%a,_%d_%b_%Y_%H:%M:%S_GMT", &tm);
  snprintf(path, sizeof path, "/status/503/%s", date);
  out = post_to(rv, eg, path);
  cr_expect_eq(out.result, AK_SINK_RETRY);
  cr_expect(out.retry_after_ms >= 55000 && out.retry_after_ms <= 61000, "%lld", (long long)out.retry_after_ms);

  out = post_to(rv, eg, "/status/500/99999");
  cr_expect_eq(out.retry_after_ms, 3600000, "capped at 1 h");

  out = post_to(rv, eg, "/status/418/7");
  cr_expect_eq(out.result, AK_SINK_RETRY, "other 4xx: transient");
  cr_expect_eq(out.retry_after_ms, 0, "Retry-After only counts on 408/429/5xx");

  int before = recv_count(rv);
  out = post_to(rv, eg, "/redirect");
  cr_expect_eq(out.result, AK_SINK_RETRY);
  cr_expect_str_eq(out.reason, "http 302");
  cr_expect_eq(recv_count(rv), before + 1, "redirect not followed");
  ak_egress_free(eg);
  recv_stop(rv);
}

Test(http_sink, timeout_is_transient) {
  recv_t *rv = recv_start();
  ak_egress_t *eg = loopback_egress();
  void *s = sink_new(eg, "{\"url\":\"http://127.0.0.1:%d/sleep/1500\",\"timeout_ms\":200}", rv->port);
  ak_envelope_t env = envelope((const uint8_t *)"x", 1, NULL);
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  ak_sink_outcome_t out = deliver(s, &env);
  clock_gettime(CLOCK_MONOTONIC, &b);
  cr_expect_eq(out.result, AK_SINK_RETRY);
  cr_expect_str_eq(out.reason, "timeout");
  double secs = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
  cr_expect(secs < 1.2, "took %.2fs", secs);
  ak_sink_http.destroy(s);
  ak_egress_free(eg);
  recv_stop(rv);
}

Test(http_sink, connect_refused_is_transient) {
  ak_egress_t *eg = loopback_egress();
  recv_t *rv = recv_start();
  unsigned short port = rv->port;
  recv_stop(rv); /* nothing listens there now */
  void *s = sink_new(eg, "{\"url\":\"http://127.0.0.1:%d/\"}", port);
  ak_envelope_t env = envelope((const uint8_t *)"x", 1, NULL);
  ak_sink_outcome_t out = deliver(s, &env);
  cr_expect_eq(out.result, AK_SINK_RETRY);
  cr_expect(strncmp(out.reason, "connect: ", 9) == 0, "%s", out.reason);
  ak_sink_http.destroy(s);
  ak_egress_free(eg);
}

Test(http_sink, max_response_bytes_caps_the_read) {
  recv_t *rv = recv_start();
  ak_egress_t *eg = loopback_egress();
  void *s = sink_new(eg, "{\"url\":\"http://127.0.0.1:%d/big/64000000\",\"max_response_bytes\":1024}", rv->port);
  ak_envelope_t env = envelope((const uint8_t *)"x", 1, NULL);
  ak_sink_outcome_t out = deliver(s, &env);
  cr_expect_eq(out.result, AK_SINK_OK, "status is what counts: %s", out.reason);
  ak_sink_http.destroy(s);
  /* The sink hung up long before 64 MB: the receiver could not finish sending. */
  for (int i = 0; i < 200; i++) {
    pthread_mutex_lock(&rv->mu);
    int done = rv->completed_ok + rv->completed_err;
    pthread_mutex_unlock(&rv->mu);
    if (done) break;
    usleep(10 * 1000);
  }
  cr_expect_eq(rv->completed_err, 1, "response cut short by the sink");
  cr_expect_eq(rv->completed_ok, 0);
  /* Under the cap the whole body is read and the outcome is the same. */
  s = sink_new(eg, "{\"url\":\"http://127.0.0.1:%d/big/1000\",\"max_response_bytes\":1024}", rv->port);
  out = deliver(s, &env);
  cr_expect_eq(out.result, AK_SINK_OK, "%s", out.reason);
  ak_sink_http.destroy(s);
  for (int i = 0; i < 200 && rv->completed_ok == 0; i++) usleep(10 * 1000);
  pthread_mutex_lock(&rv->mu);
  cr_expect_eq(rv->completed_ok, 1, "a small response is read whole");
  pthread_mutex_unlock(&rv->mu);
  ak_egress_free(eg);
  recv_stop(rv);
}

Test(http_sink, many_concurrent_deliveries) {
  recv_t *rv = recv_start();
  ak_egress_t *eg = loopback_egress();
  void *s = sink_new(eg, "{\"url\":\"http://127.0.0.1:%d/status/204\"}", rv->port);
  enum { N = 200 };
  static waiter_t w[N];
  ak_envelope_t env = envelope((const uint8_t *)"abc", 3, NULL);
  for (int i = 0; i < N; i++) {
    pthread_mutex_init(&w[i].mu, NULL);
    pthread_cond_init(&w[i].cv, NULL);
    ak_sink_http.deliver(s, &(ak_sink_attempt_t){.env = &env, .attempt = 1}, &w[i], on_done);
  }
  for (int i = 0; i < N; i++) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 20;
    pthread_mutex_lock(&w[i].mu);
    while (w[i].calls == 0)
      if (pthread_cond_timedwait(&w[i].cv, &w[i].mu, &until) != 0) break;
    pthread_mutex_unlock(&w[i].mu);
    cr_expect_eq(w[i].calls, 1, "delivery %d", i);
    cr_expect_eq(w[i].out.result, AK_SINK_OK, "delivery %d: %s", i, w[i].out.reason);
  }
  cr_expect_eq(recv_count(rv), N);
  ak_sink_http.destroy(s);
  ak_egress_free(eg);
  recv_stop(rv);
}

Test(http_sink, destroy_answers_pending_deliveries_once) {
  recv_t *rv = recv_start();
  ak_egress_t *eg = loopback_egress();
  void *s = sink_new(eg, "{\"url\":\"http://127.0.0.1:%d/sleep/300\"}", rv->port);
  static waiter_t w[3];
  ak_envelope_t env = envelope((const uint8_t *)"abc", 3, NULL);
  for (int i = 0; i < 3; i++) {
    pthread_mutex_init(&w[i].mu, NULL);
    pthread_cond_init(&w[i].cv, NULL);
    ak_sink_http.deliver(s, &(ak_sink_attempt_t){.env = &env, .attempt = 1}, &w[i], on_done);
  }
  usleep(50 * 1000);
  ak_sink_http.destroy(s);
  for (int i = 0; i < 3; i++) {
    cr_expect_eq(w[i].calls, 1, "delivery %d answered %d times", i, w[i].calls);
    cr_expect_eq(w[i].out.result, AK_SINK_RETRY);
  }
  ak_egress_free(eg);
  recv_stop(rv);
}

/* ---- several workers ------------------------------------------------------------ */

/* The sink's worker count for a test about several of them: the run's choice when it made
 * one (ANKUSA_TEST_HTTP_WORKERS), else four; without test hooks, what the box has. */
static int several_workers(void) {
  long n;
#ifdef AK_TEST_HOOKS
  const char *t = getenv("ANKUSA_TEST_HTTP_WORKERS");
  if (!t || atoi(t) < 1) {
    setenv("ANKUSA_TEST_HTTP_WORKERS", "4", 1);
    t = "4";
  }
  n = atol(t);
#else
  n = sysconf(_SC_NPROCESSORS_ONLN);
#endif
  return n < 1 ? 1 : n > 4 ? 4 : (int)n;
}

static void waiters_init(waiter_t *w, int n) {
  for (int i = 0; i < n; i++) {
    memset(&w[i], 0, sizeof w[i]);
    pthread_mutex_init(&w[i].mu, NULL);
    pthread_cond_init(&w[i].cv, NULL);
  }
}

static int calls_of(waiter_t *w) {
  pthread_mutex_lock(&w->mu);
  int n = w->calls;
  pthread_mutex_unlock(&w->mu);
  return n;
}

static void wait_answered(waiter_t *w, int secs) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += secs;
  pthread_mutex_lock(&w->mu);
  while (w->calls == 0)
    if (pthread_cond_timedwait(&w->cv, &w->mu, &until) != 0) break;
  pthread_mutex_unlock(&w->mu);
}

/* 500 at once over several workers: each reaches the receiver and is answered exactly
 * once, and every worker took a share, on a thread named for it. */
Test(http_sink, concurrent_deliveries_over_several_workers) {
  int nw = several_workers();
  recv_t *rv = recv_start();
  ak_egress_t *eg = loopback_egress();
  void *s = sink_new(eg, "{\"url\":\"http://127.0.0.1:%d/status/204\"}", rv->port);
  enum { N = 500 };
  static waiter_t w[N];
  waiters_init(w, N);
  ak_envelope_t env = envelope((const uint8_t *)"abc", 3, NULL);
  for (int i = 0; i < N; i++) ak_sink_http.deliver(s, &(ak_sink_attempt_t){.env = &env, .attempt = 1}, &w[i], on_done);
  for (int i = 0; i < N; i++) wait_answered(&w[i], 30);
  usleep(50 * 1000); /* a second answer would show up here */
  bool seen[4] = {false};
  for (int i = 0; i < N; i++) {
    cr_expect_eq(calls_of(&w[i]), 1, "delivery %d answered %d times", i, calls_of(&w[i]));
    cr_expect_eq(w[i].out.result, AK_SINK_OK, "delivery %d: %s", i, w[i].out.reason);
    int k = -1;
    if (strcmp(w[i].thread, "ak-http-sink") == 0) k = 0;
    else if (strncmp(w[i].thread, "ak-http-sink-", 13) == 0 && w[i].thread[13] >= '1' && w[i].thread[13] <= '3' &&
             !w[i].thread[14])
      k = w[i].thread[13] - '0';
    cr_expect(k >= 0 && k < nw, "delivery %d answered on thread \"%s\"", i, w[i].thread);
    if (k >= 0 && k < 4) seen[k] = true;
  }
  for (int k = 0; k < nw; k++) cr_expect(seen[k], "worker %d of %d took none", k, nw);
  cr_expect_eq(recv_count(rv), N);
  ak_sink_http.destroy(s);
  ak_egress_free(eg);
  recv_stop(rv);
}

/* The outstanding bound is the sink's, not a worker's: past HTTP_MAX_OUTSTANDING (4096)
 * attempts over all workers the next are refused at once; destroy then answers each of the
 * rest once, whether it was in a worker's CURLM or still in its queue. */
Test(http_sink, bound_and_destroy_over_several_workers, .timeout = 120) {
  several_workers();
  recv_t *rv = recv_start();
  ak_egress_t *eg = loopback_egress();
  void *s = sink_new(eg, "{\"url\":\"http://127.0.0.1:%d/sleep/2000\"}", rv->port);
  enum { BOUND = 4096, N = BOUND + 10 };
  static waiter_t w[N];
  waiters_init(w, N);
  ak_envelope_t env = envelope((const uint8_t *)"abc", 3, NULL);
  for (int i = 0; i < N; i++) ak_sink_http.deliver(s, &(ak_sink_attempt_t){.env = &env, .attempt = 1}, &w[i], on_done);
  int full = 0;
  for (int i = 0; i < N; i++) {
    if (calls_of(&w[i]) == 0) continue;
    cr_expect_str_eq(w[i].out.reason, "http sink queue full", "delivery %d", i);
    full++;
  }
  cr_expect_eq(full, N - BOUND, "refused at once: %d", full);
  usleep(200 * 1000); /* each worker has its 64 transfers under way; the rest wait */
  ak_sink_http.destroy(s);
  int stopped = 0;
  for (int i = 0; i < N; i++) {
    cr_expect_eq(calls_of(&w[i]), 1, "delivery %d answered %d times", i, calls_of(&w[i]));
    cr_expect_eq(w[i].out.result, AK_SINK_RETRY, "delivery %d", i);
    stopped += strcmp(w[i].out.reason, "sink stopped") == 0;
  }
  cr_expect_eq(stopped, BOUND);
  ak_egress_free(eg);
  recv_stop(rv);
}

/* One sink, one easy handle reused request after request: nothing of one request (headers,
 * Retry-After, a cut-short or timed-out response) shows in the next. */
Test(http_sink, reused_handle_carries_nothing_over) {
  recv_t *rv = recv_start();
  ak_egress_t *eg = loopback_egress();
  static const char *script[] = {"/status/429/7", "/status/503",  "/big/5000",   "/status/204",
                                 "/sleep/1500",   "/status/200"};
  memcpy(rv->script, script, sizeof script);
  rv->nscript = 6;
  void *s = sink_new(eg, "{\"url\":\"http://127.0.0.1:%d/script\",\"timeout_ms\":400,"
                         "\"max_response_bytes\":1024}", rv->port);
  ak_header_t hdrs[] = {{"X-GitHub-Event", 14, "push", 4}, {"X-Team", 6, "red", 3}};
  ak_envelope_t full = envelope((const uint8_t *)"{\"a\":1}", 7, "application/json");
  full.headers = hdrs;
  full.nheaders = 2;
  ak_envelope_t bare = envelope(NULL, 0, NULL);
  bare.tenant = NULL;
  bare.tenant_len = 0;

  ak_sink_outcome_t out = deliver_att(s, &(ak_sink_attempt_t){.env = &full, .attempt = 2,
                                           .idempotency_key = "acme:github:k", .dedupe_key = "k",
                                           .replay_id = "018f0000-0000-7000-8000-000000000001"});
  cr_expect_eq(out.result, AK_SINK_RETRY);
  cr_expect_eq(out.retry_after_ms, 7000);
  pthread_mutex_lock(&rv->mu);
  cr_expect_str_eq(recv_header(rv, "x-ankusa-dedupe-key"), "k");
  cr_expect_str_eq(recv_header(rv, "x-team"), "red");
  cr_expect_eq(rv->body_len, 7);
  pthread_mutex_unlock(&rv->mu);

  out = deliver(s, &bare);
  cr_expect_eq(out.result, AK_SINK_RETRY);
  cr_expect_str_eq(out.reason, "http 503");
  cr_expect_eq(out.retry_after_ms, 0, "the previous Retry-After is not reused");
  pthread_mutex_lock(&rv->mu);
  cr_expect_null(recv_header(rv, "x-ankusa-dedupe-key"));
  cr_expect_null(recv_header(rv, "x-ankusa-replay-id"));
  cr_expect_null(recv_header(rv, "x-ankusa-tenant"));
  cr_expect_null(recv_header(rv, "x-team"));
  cr_expect_null(recv_header(rv, "x-github-event"));
  cr_expect_str_eq(recv_header(rv, "x-ankusa-idempotency-key"), "018f2a3b-4c5d-7e6f-8091-a2b3c4d5e6f7");
  cr_expect_str_eq(recv_header(rv, "content-type"), "application/octet-stream");
  cr_expect_eq(rv->body_len, 0);
  cr_expect_eq(recv_header_count(rv, "x-ankusa-id"), 1);
  pthread_mutex_unlock(&rv->mu);

  out = deliver(s, &full);
  cr_expect_eq(out.result, AK_SINK_OK, "cut short at the cap: %s", out.reason);
  out = deliver(s, &bare);
  cr_expect_eq(out.result, AK_SINK_OK, "after a cut-short response: %s", out.reason);
  out = deliver(s, &full);
  cr_expect_str_eq(out.reason, "timeout");
  out = deliver(s, &full);
  cr_expect_eq(out.result, AK_SINK_OK, "after a timeout: %s", out.reason);
  pthread_mutex_lock(&rv->mu);
  cr_expect_str_eq(recv_header(rv, "content-type"), "application/json");
  cr_expect_str_eq(recv_header(rv, "x-team"), "red");
  cr_expect_eq(rv->body_len, 7);
  cr_expect_str_eq(rv->url, "/script");
  pthread_mutex_unlock(&rv->mu);
  ak_sink_http.destroy(s);
  ak_egress_free(eg);
  recv_stop(rv);
}

static double cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A cached connection the receiver closes while idle: the sink neither spins on it (it
 * stays watched between requests) nor fails the next delivery. */
Test(http_sink, idle_connection_closed_by_peer) {
  recv_t *rv = recv_start_idle(1);
  ak_egress_t *eg = loopback_egress();
  void *s = sink_new(eg, "{\"url\":\"http://127.0.0.1:%d/status/204\"}", rv->port);
  ak_envelope_t env = envelope((const uint8_t *)"x", 1, NULL);
  ak_sink_outcome_t out = deliver(s, &env);
  cr_expect_eq(out.result, AK_SINK_OK, "%s", out.reason);
  double before = cpu_seconds();
  usleep(2500 * 1000); /* the receiver hangs up after 1 s */
  double spent = cpu_seconds() - before;
  cr_expect(spent < 0.5, "%.2f s of CPU while idle", spent);
  for (int i = 0; i < 3; i++) {
    out = deliver(s, &env);
    cr_expect_eq(out.result, AK_SINK_OK, "after the hang-up, %d: %s", i, out.reason);
  }
  cr_expect_eq(recv_count(rv), 4);
  ak_sink_http.destroy(s);
  ak_egress_free(eg);
  recv_stop(rv);
}

/* A host name, not an address: curl resolves it (off this thread) before the egress check. */
Test(http_sink, host_name_is_resolved) {
  recv_t *rv = recv_start();
  ak_egress_t *eg = loopback_egress();
  void *s = sink_new(eg, "{\"url\":\"http://localhost:%d/status/204\"}", rv->port);
  ak_envelope_t env = envelope((const uint8_t *)"x", 1, NULL);
  for (int i = 0; i < 3; i++) {
    ak_sink_outcome_t out = deliver(s, &env);
    cr_expect_eq(out.result, AK_SINK_OK, "%d: %s", i, out.reason);
  }
  cr_expect_eq(recv_count(rv), 3);
  ak_sink_http.destroy(s);
  ak_egress_free(eg);
  recv_stop(rv);
}

/* ---- attempt headers and forwarding -------------------------------------------------- */

static const char HOOK_ID[] = "018f2a3b-4c5d-7e6f-8091-a2b3c4d5e6f7";

Test(http_sink, attempt_identity_headers) {
  recv_t *rv = recv_start();
  ak_egress_t *eg = loopback_egress();
  void *s = sink_new(eg, "{\"url\":\"http://127.0.0.1:%d/x\"}", rv->port);
  ak_envelope_t env = envelope((const uint8_t *)"x", 1, NULL);

  ak_sink_attempt_t att = {.env = &env, .attempt = 3, .idempotency_key = "acme:github:evt_1",
                           .dedupe_key = "evt_1", .replay_id = "018f0000-0000-7000-8000-000000000001"};
  ak_sink_outcome_t out = deliver_att(s, &att);
  cr_expect_eq(out.result, AK_SINK_OK, "%s", out.reason);
  pthread_mutex_lock(&rv->mu);
  cr_expect_str_eq(recv_header(rv, "x-ankusa-idempotency-key"), "acme:github:evt_1");
  cr_expect_str_eq(recv_header(rv, "x-ankusa-dedupe-key"), "evt_1");
  cr_expect_str_eq(recv_header(rv, "x-ankusa-replay-id"), "018f0000-0000-7000-8000-000000000001");
  cr_expect_str_eq(recv_header(rv, "x-ankusa-id"), HOOK_ID);
  pthread_mutex_unlock(&rv->mu);

  /* Neither a dedupe key nor a replay: no header; no key given: the hook id. */
  out = deliver_att(s, &(ak_sink_attempt_t){.env = &env, .attempt = 1});
  cr_expect_eq(out.result, AK_SINK_OK, "%s", out.reason);
  pthread_mutex_lock(&rv->mu);
  cr_expect_str_eq(recv_header(rv, "x-ankusa-idempotency-key"), HOOK_ID);
  cr_expect_null(recv_header(rv, "x-ankusa-dedupe-key"));
  cr_expect_null(recv_header(rv, "x-ankusa-replay-id"));
  pthread_mutex_unlock(&rv->mu);

  /* A value that could split a line is never sent, and nothing stands in for it. */
  att = (ak_sink_attempt_t){.env = &env, .attempt = 1, .idempotency_key = "acme:github:a\r\nx-evil: 1",
                            .dedupe_key = "a\nb"};
  out = deliver_att(s, &att);
  cr_expect_eq(out.result, AK_SINK_OK, "%s", out.reason);
  pthread_mutex_lock(&rv->mu);
  cr_expect_null(recv_header(rv, "x-ankusa-idempotency-key"));
  cr_expect_null(recv_header(rv, "x-ankusa-dedupe-key"));
  cr_expect_null(recv_header(rv, "x-evil"));
  cr_expect_str_eq(recv_header(rv, "x-ankusa-id"), HOOK_ID);
  pthread_mutex_unlock(&rv->mu);
  ak_sink_http.destroy(s);
  ak_egress_free(eg);
  recv_stop(rv);
}

/* The provider headers of the hook the forwarding tests deliver. */
static ak_header_t provider_headers[] = {
  {"X-GitHub-Event", 14, "push", 4},
  {"Authorization", 13, "Bearer provider", 15},
  {"Cookie", 6, "c=1", 3},
  {"X-Api-Key", 9, "k", 1},
  {"X-Ankusa-Id", 11, "forged", 6},
  {"x-ankusa-tenant", 15, "evil", 4},
  {"X-Multi", 7, "a", 1},
  {"Content-Type", 12, "text/plain", 10},
  {"x-multi", 7, "b", 1},
  {"Host", 4, "provider.example", 16},
  {"Connection", 10, "close", 5},
  {"X-Split", 7, "a\r\nx-evil: 1", 13},
  {"X-Team", 6, "red", 3},
  {"Webhook-Id", 10, "msg_forged", 10},
  {"Webhook-Signature", 17, "v1,forged", 9},
  {"X-Empty", 7, "", 0},
};

static ak_envelope_t provider_envelope(void) {
  ak_envelope_t env = envelope((const uint8_t *)"{}", 2, "application/json");
  env.headers = provider_headers;
  env.nheaders = sizeof provider_headers / sizeof provider_headers[0];
  return env;
}

Test(http_sink, forwards_provider_headers_by_default) {
  recv_t *rv = recv_start();
  ak_egress_t *eg = loopback_egress();
  void *s = sink_new(eg, "{\"url\":\"http://127.0.0.1:%d/x\"}", rv->port);
  ak_envelope_t env = provider_envelope();
  ak_source_cfg_t src = {.id = "github", .forward_default = true};
  /* src NULL and a source without forward_headers mean the same default set */
  const ak_source_cfg_t *srcs[] = {&src, NULL};
  for (size_t i = 0; i < 2; i++) {
    ak_sink_outcome_t out = deliver_att(s, &(ak_sink_attempt_t){.env = &env, .attempt = 1, .source = srcs[i]});
    cr_expect_eq(out.result, AK_SINK_OK, "%s", out.reason);
    pthread_mutex_lock(&rv->mu);
    cr_expect_str_eq(recv_header(rv, "x-github-event"), "push");
    cr_expect_str_eq(recv_header(rv, "x-multi"), "a, b", "repeats joined in received order");
    cr_expect_eq(recv_header_count(rv, "x-multi"), 1);
    cr_expect_str_eq(recv_header(rv, "x-team"), "red");
    cr_expect_str_eq(recv_header(rv, "x-empty"), "");
    cr_expect_str_eq(recv_header(rv, "webhook-id"), "msg_forged", "no secret: the provider's own is forwarded");
    cr_expect_null(recv_header(rv, "authorization"));
    cr_expect_null(recv_header(rv, "cookie"));
    cr_expect_null(recv_header(rv, "x-api-key"));
    cr_expect_null(recv_header(rv, "x-split"), "a value with CR/LF is dropped");
    cr_expect_null(recv_header(rv, "x-evil"));
    cr_expect_str_eq(recv_header(rv, "x-ankusa-id"), HOOK_ID);
    cr_expect_eq(recv_header_count(rv, "x-ankusa-id"), 1);
    cr_expect_str_eq(recv_header(rv, "x-ankusa-tenant"), "acme");
    cr_expect_eq(recv_header_count(rv, "x-ankusa-tenant"), 1);
    cr_expect_str_eq(recv_header(rv, "content-type"), "application/json");
    cr_expect_eq(recv_header_count(rv, "content-type"), 1);
    cr_expect(strncmp(recv_header(rv, "host"), "127.0.0.1:", 10) == 0, "%s", recv_header(rv, "host"));
    cr_expect(recv_header(rv, "connection") == NULL || strcasecmp(recv_header(rv, "connection"), "close") != 0);
    pthread_mutex_unlock(&rv->mu);
  }
  ak_sink_http.destroy(s);
  ak_egress_free(eg);
  recv_stop(rv);
}

Test(http_sink, forward_list_and_empty_list) {
  recv_t *rv = recv_start();
  ak_egress_t *eg = loopback_egress();
  void *s = sink_new(eg, "{\"url\":\"http://127.0.0.1:%d/x\"}", rv->port);
  ak_envelope_t env = provider_envelope();
  char *names[] = {"x-github-event", "authorization", "x-multi"};
  ak_source_cfg_t list = {.id = "github", .forward_default = false, .forward_headers = names, .nforward_headers = 3};
  ak_sink_outcome_t out = deliver_att(s, &(ak_sink_attempt_t){.env = &env, .attempt = 1, .source = &list});
  cr_expect_eq(out.result, AK_SINK_OK, "%s", out.reason);
  pthread_mutex_lock(&rv->mu);
  cr_expect_str_eq(recv_header(rv, "x-github-event"), "push");
  cr_expect_str_eq(recv_header(rv, "x-multi"), "a, b");
  cr_expect_null(recv_header(rv, "authorization"), "a list never lifts the deny set");
  cr_expect_null(recv_header(rv, "x-team"), "not in the list");
  cr_expect_null(recv_header(rv, "webhook-id"));
  pthread_mutex_unlock(&rv->mu);

  ak_source_cfg_t none = {.id = "github", .forward_default = false};
  out = deliver_att(s, &(ak_sink_attempt_t){.env = &env, .attempt = 1, .source = &none});
  cr_expect_eq(out.result, AK_SINK_OK, "%s", out.reason);
  pthread_mutex_lock(&rv->mu);
  for (size_t i = 0; i < sizeof provider_headers / sizeof provider_headers[0]; i++) {
    const char *n = provider_headers[i].name;
    if (!strcasecmp(n, "content-type") || !strcasecmp(n, "host") || !strcasecmp(n, "connection") ||
        !strncasecmp(n, "x-ankusa-", 9))
      continue;
    cr_expect_null(recv_header(rv, n), "[] forwards nothing, yet %s arrived", n);
  }
  cr_expect_str_eq(recv_header(rv, "x-ankusa-id"), HOOK_ID);
  pthread_mutex_unlock(&rv->mu);
  ak_sink_http.destroy(s);
  ak_egress_free(eg);
  recv_stop(rv);
}

Test(http_sink, operator_headers_beat_forwarded_ones) {
  recv_t *rv = recv_start();
  ak_egress_t *eg = loopback_egress();
  void *s = sink_new(eg, "{\"url\":\"http://127.0.0.1:%d/x\",\"headers\":{\"X-TEAM\":\"blue\","
                         "\"x-ankusa-source\":\"forged\"}}", rv->port);
  ak_envelope_t env = provider_envelope();
  ak_sink_outcome_t out = deliver_att(s, &(ak_sink_attempt_t){.env = &env, .attempt = 1});
  cr_expect_eq(out.result, AK_SINK_OK, "%s", out.reason);
  pthread_mutex_lock(&rv->mu);
  cr_expect_str_eq(recv_header(rv, "x-team"), "blue");
  cr_expect_eq(recv_header_count(rv, "x-team"), 1, "the forwarded x-team is dropped");
  cr_expect_str_eq(recv_header(rv, "x-ankusa-source"), "github", "identity beats the operator");
  cr_expect_eq(recv_header_count(rv, "x-ankusa-source"), 1);
  cr_expect_str_eq(recv_header(rv, "x-github-event"), "push");
  pthread_mutex_unlock(&rv->mu);
  ak_sink_http.destroy(s);
  ak_egress_free(eg);
  recv_stop(rv);
}

Test(http_sink, signature_headers_replace_forwarded_ones) {
  recv_t *rv = recv_start();
  ak_egress_t *eg = loopback_egress();
  void *s = sink_new(eg, "{\"url\":\"http://127.0.0.1:%d/x\",\"secret\":\"k3y\"}", rv->port);
  ak_envelope_t env = provider_envelope();
  ak_sink_outcome_t out = deliver_att(s, &(ak_sink_attempt_t){.env = &env, .attempt = 1});
  cr_expect_eq(out.result, AK_SINK_OK, "%s", out.reason);
  pthread_mutex_lock(&rv->mu);
  cr_expect_str_eq(recv_header(rv, "webhook-id"), HOOK_ID);
  cr_expect_eq(recv_header_count(rv, "webhook-id"), 1);
  cr_expect_eq(recv_header_count(rv, "webhook-signature"), 1);
  cr_expect(strncmp(recv_header(rv, "webhook-signature"), "v1,", 3) == 0);
  cr_expect(strcmp(recv_header(rv, "webhook-signature"), "v1,forged") != 0);
  cr_expect_eq(recv_header_count(rv, "webhook-timestamp"), 1);
  cr_expect_str_eq(recv_header(rv, "x-github-event"), "push", "other headers still forwarded");
  pthread_mutex_unlock(&rv->mu);
  ak_sink_http.destroy(s);
  ak_egress_free(eg);
  recv_stop(rv);
}

/* ---- forward rules (sinks/forward.c) ------------------------------------------------- */

static bool fwd(const ak_source_cfg_t *src, const char *name) { return ak_forward_header(src, name, strlen(name)); }

Test(forward, deny_set_in_any_case) {
  const char *deny[] = {"authorization", "Proxy-Authorization", "COOKIE", "x-api-key", "Host", "content-length",
                        "Content-Type", "connection", "Keep-Alive", "transfer-encoding", "TE", "trailer",
                        "upgrade", "Expect", "x-ankusa-id", "X-Ankusa-Anything", "x-ankusa-"};
  char *all[] = {"authorization", "cookie", "x-ankusa-id", "te"};
  ak_source_cfg_t listed = {.forward_default = false, .forward_headers = all, .nforward_headers = 4};
  for (size_t i = 0; i < sizeof deny / sizeof deny[0]; i++) {
    cr_expect_not(fwd(NULL, deny[i]), "%s forwarded by default", deny[i]);
    cr_expect_not(fwd(&listed, deny[i]), "%s forwarded by a list", deny[i]);
  }
  const char *pass[] = {"x-github-event", "User-Agent", "x-ankusa", "tex", "hosts", "x-api-key2", "webhook-id"};
  for (size_t i = 0; i < sizeof pass / sizeof pass[0]; i++) cr_expect(fwd(NULL, pass[i]), "%s", pass[i]);
}

Test(forward, default_list_and_none) {
  ak_source_cfg_t def = {.forward_default = true};
  char *names[] = {"x-github-event", "x-hub-signature-256"};
  ak_source_cfg_t list = {.forward_default = false, .forward_headers = names, .nforward_headers = 2};
  ak_source_cfg_t none = {.forward_default = false};
  cr_expect(fwd(&def, "X-Anything"));
  cr_expect(fwd(&list, "X-GitHub-Event"), "a list matches in any case");
  cr_expect(fwd(&list, "x-hub-signature-256"));
  cr_expect_not(fwd(&list, "x-github-delivery"));
  cr_expect_not(fwd(&none, "x-github-event"));
  cr_expect_not(fwd(NULL, ""));
  cr_expect_not(ak_forward_header(NULL, NULL, 3));
  /* the length counts, not a terminator */
  cr_expect(ak_forward_header(&list, "x-github-eventXYZ", 14));
  cr_expect_not(ak_forward_header(NULL, "hostname", 4));
  cr_expect(ak_forward_header(NULL, "hostname", 8));
}

/* ---- egress ----------------------------------------------------------------------- */

Test(http_sink, default_egress_refuses_loopback_and_http) {
  recv_t *rv = recv_start();
  /* Default guard (vtable create): plain http:// is refused before anything else. */
  void *s = sink_new(NULL, "{\"url\":\"http://127.0.0.1:%d/x\"}", rv->port);
  ak_envelope_t env = envelope((const uint8_t *)"x", 1, NULL);
  ak_sink_outcome_t out = deliver(s, &env);
  cr_expect_eq(out.result, AK_SINK_PERMANENT);
  cr_expect(strstr(out.reason, "http://") && strstr(out.reason, "allow_http"), "%s", out.reason);
  ak_sink_http.destroy(s);

  /* https:// to loopback: refused at the address, before any byte is sent. */
  s = sink_new(NULL, "{\"url\":\"https://127.0.0.1:%d/x\"}", rv->port);
  out = deliver(s, &env);
  cr_expect_eq(out.result, AK_SINK_PERMANENT);
  cr_expect_str_eq(out.reason, "egress: 127.0.0.1 is not a public address");
  ak_sink_http.destroy(s);

  /* http allowed but no allow list: the address check alone refuses it. */
  char err[160];
  ak_egress_t *http_only = ak_egress_new(NULL, 0, true, err, sizeof err);
  s = sink_new(http_only, "{\"url\":\"http://127.0.0.1:%d/x\"}", rv->port);
  out = deliver(s, &env);
  cr_expect_eq(out.result, AK_SINK_PERMANENT);
  cr_expect_str_eq(out.reason, "egress: 127.0.0.1 is not a public address");
  ak_sink_http.destroy(s);

  /* A name that resolves to loopback is judged by the address it resolves to. */
  s = sink_new(http_only, "{\"url\":\"http://localhost:%d/x\"}", rv->port);
  out = deliver(s, &env);
  cr_expect_eq(out.result, AK_SINK_PERMANENT);
  cr_expect(strncmp(out.reason, "egress: ", 8) == 0 && strstr(out.reason, "is not a public address"), "%s",
            out.reason);
  ak_sink_http.destroy(s);

  /* A mapped-IPv6 literal for loopback is refused too. */
  s = sink_new(http_only, "{\"url\":\"http://[::ffff:127.0.0.1]:%d/x\"}", rv->port);
  out = deliver(s, &env);
  cr_expect_eq(out.result, AK_SINK_PERMANENT, "%s", out.reason);
  cr_expect(strncmp(out.reason, "egress: ", 8) == 0, "%s", out.reason);
  ak_sink_http.destroy(s);

  cr_expect_eq(recv_count(rv), 0, "the receiver saw nothing");
  ak_egress_free(http_only);
  recv_stop(rv);
}

/* A trusted sink (a config-file source, egress.guard_static_sources false) is not
 * guarded: http:// to loopback is delivered, whatever the node's guard says; the same
 * sink untrusted (an API-managed source's) is refused at the address. */
static void *sink_trusted(const ak_egress_t *egress, bool trusted, const char *fmt, unsigned short port) {
  char buf[512];
  snprintf(buf, sizeof buf, fmt, port);
  json_t *opts = json_loads(buf, 0, NULL);
  cr_assert_not_null(opts);
  char err[256] = "";
  void *s = ak_sink_http.create(opts, &(ak_sink_ctx_t){.source_id = "demo", .egress = egress, .trusted = trusted},
                                err, sizeof err);
  json_decref(opts);
  cr_assert_not_null(s, "create: %s", err);
  return s;
}

Test(http_sink, trusted_sink_delivers_http_to_loopback_guarded_one_is_refused) {
  recv_t *rv = recv_start();
  char err[160];
  ak_egress_t *def = ak_egress_new(NULL, 0, false, err, sizeof err); /* the default egress.* */
  cr_assert_not_null(def, "%s", err);
  ak_envelope_t env = envelope((const uint8_t *)"{}", 2, "application/json");

  void *s = sink_trusted(def, true, "{\"url\":\"http://127.0.0.1:%d/hooks\"}", rv->port);
  ak_sink_outcome_t out = deliver(s, &env);
  ak_sink_http.destroy(s);
  cr_expect_eq(out.result, AK_SINK_OK, "%s", out.reason);
  cr_expect_eq(recv_count(rv), 1, "the receiver got it");

  s = sink_trusted(NULL, true, "{\"url\":\"http://localhost:%d/hooks\"}", rv->port); /* a name, no guard */
  out = deliver(s, &env);
  ak_sink_http.destroy(s);
  cr_expect_eq(out.result, AK_SINK_OK, "%s", out.reason);
  cr_expect_eq(recv_count(rv), 2);

  s = sink_trusted(def, false, "{\"url\":\"http://127.0.0.1:%d/hooks\"}", rv->port);
  out = deliver(s, &env);
  ak_sink_http.destroy(s);
  cr_expect_eq(out.result, AK_SINK_PERMANENT);
  cr_expect_str_eq(out.reason, "egress: http:// is refused (egress.allow_http is false)");

  ak_egress_t *http_only = ak_egress_new(NULL, 0, true, err, sizeof err);
  s = sink_trusted(http_only, false, "{\"url\":\"http://localhost:%d/hooks\"}", rv->port);
  out = deliver(s, &env);
  ak_sink_http.destroy(s);
  cr_expect_eq(out.result, AK_SINK_PERMANENT);
  cr_expect(strncmp(out.reason, "egress: ", 8) == 0 && strstr(out.reason, "is not a public address"), "%s",
            out.reason);
  s = sink_trusted(NULL, true, "{\"url\":\"file:///etc/passwd%d\"}", 0); /* trusted is still http(s) only */
  out = deliver(s, &env);
  ak_sink_http.destroy(s);
  cr_expect_eq(out.result, AK_SINK_PERMANENT);
  cr_expect_str_eq(out.reason, "only http:// and https:// urls");
  cr_expect_eq(recv_count(rv), 2, "the guarded sinks sent nothing");
  ak_egress_free(http_only);
  ak_egress_free(def);
  recv_stop(rv);
}

Test(http_sink, other_schemes_refused) {
  ak_egress_t *eg = loopback_egress();
  void *s = sink_new(eg, "{\"url\":\"file:///etc/passwd%d\"}", 0);
  ak_envelope_t env = envelope((const uint8_t *)"x", 1, NULL);
  ak_sink_outcome_t out = deliver(s, &env);
  cr_expect_eq(out.result, AK_SINK_PERMANENT);
  cr_expect(strncmp(out.reason, "egress: ", 8) == 0, "%s", out.reason);
  ak_sink_http.destroy(s);
  ak_egress_free(eg);
}

Test(http_sink, option_rows_declared) {
  const char *want[] = {"url", "method", "headers", "timeout_ms", "max_response_bytes", "secret"};
  size_t n = 0;
  for (const ak_opt_t *o = ak_sink_http.plugin.options; o->key; o++, n++) cr_expect_str_eq(o->key, want[n]);
  cr_expect_eq(n, 6);
  cr_expect_str_eq(ak_sink_http.plugin.type, "http");
  cr_expect(ak_sink_http.durable);
  cr_expect_eq(ak_sinks_find("http"), &ak_sink_http, "the registry lists the real sink");
  cr_expect(!ak_sink_http.plugin.unsupported);
}

/* Every http_sink case again with one worker and with four, whatever this box has (a
 * plain run gets one per CPU): the binary runs itself once per count. */
Test(http_sink_workers, every_case_with_1_and_4_workers, .timeout = 280) {
#ifndef AK_TEST_HOOKS
  cr_skip_test("the worker count can be chosen in test-hooks builds only");
#else
  if (getenv("ANKUSA_TEST_HTTP_WORKERS")) cr_skip_test("this run chose its worker count");
  char exe[4096];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  cr_assert(len > 0);
  exe[len] = '\0';
  extern char **environ;
  size_t nenv = 0;
  while (environ[nenv]) nenv++;
  char **envp = calloc(nenv + 2, sizeof *envp);
  cr_assert_not_null(envp);
  const char *counts[] = {"1", "4"};
  for (size_t c = 0; c < 2; c++) {
    /* BoxFort's own variables would make the copy take itself for a sandboxed test */
    size_t k = 0;
    for (size_t i = 0; i < nenv; i++)
      if (strncmp(environ[i], "BXFI_", 5) != 0) envp[k++] = environ[i];
    char var[64];
    snprintf(var, sizeof var, "ANKUSA_TEST_HTTP_WORKERS=%s", counts[c]);
    envp[k++] = var;
    envp[k] = NULL;
    char *argv[] = {exe, "--filter=http_sink/*", NULL};
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
      execve(exe, argv, envp);
      _exit(127);
    }
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the http_sink cases with %s worker(s) failed (status %#x)",
              counts[c], st);
  }
  free(envp);
#endif
}
