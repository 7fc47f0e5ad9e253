/* AWS credentials: the chain, its cache, and the synchronous exchange (blob/awscreds.h).
 * Never lets a secret, a session token or a web identity token reach an error string:
 * errors name the source and the status only. */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include "blob/awscreds.h"

#define REFRESH_MARGIN_S 300   /* cached until 5 minutes before they expire */
#define IMDS_TIMEOUT_MS 2000   /* the metadata service is local or absent: do not wait long */
#define STS_TIMEOUT_MS 10000
#define WEB_TOKEN_MAX 65536

struct ak_awscreds {
  ak_httpc_t *hc;
  char *region;
  ak_awscreds_val_t fixed; /* the config block's, when it has key id and secret */
  bool have_fixed;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool refreshing;          /* one caller looks them up; the others wait for its answer */
  ak_awscreds_val_t cached;
  bool have_cached;
};

void ak_awscreds_wipe(ak_awscreds_val_t *v) { explicit_bzero(v, sizeof *v); }

static bool copy_field(char *dst, size_t cap, const char *src) {
  if (!src) return false;
  size_t n = strlen(src);
  if (n == 0 || n >= cap) return false;
  memcpy(dst, src, n + 1);
  return true;
}

ak_awscreds_t *ak_awscreds_new(const char *key_id, const char *secret, const char *token, const char *region,
                               ak_httpc_t *httpc, char *err, size_t errlen) {
  ak_awscreds_t *c = calloc(1, sizeof *c);
  if (!c || !(c->region = strdup(region ? region : ""))) {
    free(c);
    snprintf(err, errlen, "aws credentials: out of memory");
    return NULL;
  }
  c->hc = httpc;
  if (key_id && *key_id && secret && *secret) {
    if (!copy_field(c->fixed.key_id, sizeof c->fixed.key_id, key_id) ||
        !copy_field(c->fixed.secret, sizeof c->fixed.secret, secret) ||
        (token && *token && !copy_field(c->fixed.token, sizeof c->fixed.token, token))) {
      snprintf(err, errlen, "aws credentials: access_key_id, secret_access_key or session_token too long");
      ak_awscreds_wipe(&c->fixed);
      free(c->region);
      free(c);
      return NULL;
    }
    c->have_fixed = true;
  }
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  return c;
}

void ak_awscreds_free(ak_awscreds_t *c) {
  if (!c) return;
  ak_awscreds_wipe(&c->fixed);
  ak_awscreds_wipe(&c->cached);
  pthread_cond_destroy(&c->cv);
  pthread_mutex_destroy(&c->mu);
  free(c->region);
  free(c);
}

/* ---- the synchronous exchange ---------------------------------------------------------- */

typedef struct waiter {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done;
  ak_httpc_result_t result;
  char why[128];
  ak_awscreds_resp_t *resp;
  size_t nwant;
  bool nomem;
} waiter_t;

static void on_done(void *ctx, const ak_httpc_resp_t *r) {
  waiter_t *w = ctx;
  ak_awscreds_resp_t *out = w->resp;
  w->result = r->result;
  snprintf(w->why, sizeof w->why, "%s", r->why ? r->why : "");
  if (r->result == AK_HTTPC_OK) {
    out->status = r->status;
    out->truncated = r->truncated;
    out->body = malloc(r->body_bytes + 1);
    if (out->body) {
      if (r->body_bytes) memcpy(out->body, r->body, r->body_bytes);
      out->body[r->body_bytes] = 0;
      out->body_len = r->body_bytes;
    } else {
      w->nomem = true;
    }
    for (size_t i = 0; i < w->nwant; i++) {
      out->have[i] = r->headers[i] != NULL;
      snprintf(out->headers[i], sizeof out->headers[i], "%s", r->headers[i] ? r->headers[i] : "");
    }
  }
  /* the waiter lives on the caller's stack: nothing of it is touched after the unlock */
  pthread_mutex_lock(&w->mu);
  w->done = true;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

static bool retryable_status(long s) { return s == 408 || s == 429 || s == 500 || s == 502 || s == 503 || s == 504; }

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

void ak_awscreds_resp_clear(ak_awscreds_resp_t *r) {
  free(r->body);
  memset(r, 0, sizeof *r);
}

int ak_awscreds_http(ak_httpc_t *hc, const ak_httpc_req_t *req, unsigned retries, const char *op,
                     ak_awscreds_resp_t *resp, char *err, size_t errlen) {
  static const long backoff_ms[] = {200, 1000};
  ak_httpc_req_t r = *req;
  r.keep_body = true;
  memset(resp, 0, sizeof *resp);
  char why[128] = "";
  for (unsigned attempt = 0;; attempt++) {
    if (attempt > 0) sleep_ms(backoff_ms[attempt - 1 < 1 ? attempt - 1 : 1]);
    ak_awscreds_resp_clear(resp);
    resp->attempts = attempt + 1;
    waiter_t w = {.resp = resp, .nwant = r.nwant};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    int rc = ak_httpc_submit(hc, &r, on_done, &w);
    if (rc == 0) {
      pthread_mutex_lock(&w.mu);
      while (!w.done) pthread_cond_wait(&w.cv, &w.mu);
      pthread_mutex_unlock(&w.mu);
    }
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
    bool last = attempt >= retries;
    if (rc != 0) {
      snprintf(why, sizeof why, "submit: %s", ak_httpc_strerror(rc));
      if (rc != AK_HTTPC_BUSY || last) break;
      continue;
    }
    if (w.result == AK_HTTPC_OK && w.nomem) {
      snprintf(why, sizeof why, "out of memory");
      break;
    }
    if (w.result == AK_HTTPC_OK) {
      if (!retryable_status(resp->status) || last) return 0;
      continue;
    }
    snprintf(why, sizeof why, "%s", w.why);
    /* a refusal (an address policy said no) or a cancel (the client is closing) will answer
     * the same next time */
    if (w.result == AK_HTTPC_REFUSED || w.result == AK_HTTPC_CANCELLED || last) break;
  }
  snprintf(err, errlen, "%s: %s (after %u attempt%s)", op, why, resp->attempts, resp->attempts == 1 ? "" : "s");
  ak_awscreds_resp_clear(resp);
  return -1;
}

/* ---- text ------------------------------------------------------------------------------- */

bool ak_awscreds_uri_encode(const char *s, bool keep_slash, char *out, size_t cap) {
  static const char hex[] = "0123456789ABCDEF";
  size_t n = strlen(out);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    unsigned char ch = *p;
    bool keep = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' ||
                ch == '.' || ch == '_' || ch == '~' || (keep_slash && ch == '/');
    if (n + (keep ? 1 : 3) >= cap) return false;
    if (keep) {
      out[n++] = (char)ch;
    } else {
      out[n++] = '%';
      out[n++] = hex[ch >> 4];
      out[n++] = hex[ch & 15];
    }
  }
  out[n] = 0;
  return true;
}

bool ak_awscreds_xml_decode(const char *s, size_t n, char *out, size_t cap) {
  static const struct {
    const char *name;
    char ch;
  } ents[] = {{"amp;", '&'}, {"lt;", '<'}, {"gt;", '>'}, {"quot;", '"'}, {"apos;", '\''}};
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    char ch = s[i];
    if (ch == '<') return false; /* markup inside text: not the text we look for */
    if (ch == '&') {
      size_t rest = n - i - 1;
      const char *e = s + i + 1;
      bool found = false;
      for (size_t k = 0; k < sizeof ents / sizeof ents[0]; k++) {
        size_t l = strlen(ents[k].name);
        if (rest >= l && !memcmp(e, ents[k].name, l)) {
          ch = ents[k].ch;
          i += 1 + l;
          found = true;
          break;
        }
      }
      if (!found) {
        /* a character reference: our keys are ASCII, so one byte or nothing */
        if (rest < 3 || e[0] != '#') return false;
        bool hexa = e[1] == 'x' || e[1] == 'X';
        size_t j = hexa ? 2 : 1;
        unsigned long v = 0;
        size_t digits = 0;
        while (j < rest && e[j] != ';' && digits < 8) {
          char d = e[j];
          int dv = d >= '0' && d <= '9' ? d - '0'
                   : hexa && d >= 'a' && d <= 'f' ? d - 'a' + 10
                   : hexa && d >= 'A' && d <= 'F' ? d - 'A' + 10
                                                  : -1;
          if (dv < 0) return false;
          v = v * (hexa ? 16 : 10) + (unsigned long)dv;
          j++;
          digits++;
        }
        if (j >= rest || e[j] != ';' || digits == 0 || v == 0 || v > 0x7f) return false;
        ch = (char)v;
        i += 1 + j + 1;
      }
    } else {
      i++;
    }
    if (o + 1 >= cap) return false;
    out[o++] = ch;
  }
  out[o] = 0;
  return true;
}

/* Finds "<tag>" from *pos in [xml, xml+len): the text's start and length, *pos after the
 * closing tag. */
static bool xml_next(const char *xml, size_t len, size_t *pos, const char *tag, const char **text, size_t *tlen) {
  char open[72], close[72];
  int ol = snprintf(open, sizeof open, "<%s>", tag), cl = snprintf(close, sizeof close, "</%s>", tag);
  if (ol <= 0 || (size_t)ol >= sizeof open || cl <= 0 || (size_t)cl >= sizeof close) return false;
  const char *end = xml + len;
  const char *p = xml + *pos;
  const char *a = memmem(p, (size_t)(end - p), open, (size_t)ol);
  if (!a) return false;
  a += ol;
  const char *b = memmem(a, (size_t)(end - a), close, (size_t)cl);
  if (!b) return false;
  *text = a;
  *tlen = (size_t)(b - a);
  *pos = (size_t)(b + cl - xml);
  return true;
}

bool ak_awscreds_xml_text(const char *xml, size_t len, const char *tag, char *out, size_t cap) {
  size_t pos = 0, tl;
  const char *t;
  return xml_next(xml, len, &pos, tag, &t, &tl) && ak_awscreds_xml_decode(t, tl, out, cap);
}

/* "2026-12-02T01:02:03Z" (fractions allowed) into unix seconds; 0 when unreadable. */
static int64_t parse_time(const char *s) {
  struct tm tm;
  memset(&tm, 0, sizeof tm);
  const char *e = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
  if (!e) return 0;
  return (int64_t)timegm(&tm);
}

static bool fresh(const ak_awscreds_val_t *v) {
  return v->expires == 0 || (int64_t)time(NULL) < v->expires - REFRESH_MARGIN_S;
}

/* Temporary credentials that carry no readable expiry are kept for a quarter of an hour. */
static void set_expiry(ak_awscreds_val_t *v, const char *when) {
  int64_t t = when ? parse_time(when) : 0;
  v->expires = t > 0 ? t : (int64_t)time(NULL) + REFRESH_MARGIN_S + 900;
}

/* ---- the sources ----------------------------------------------------------------------- */

/* 1: found, 0: this source has none, -1: it has some and they could not be read. */
static int from_env(ak_awscreds_val_t *v, char *err, size_t errlen) {
  const char *id = getenv("AWS_ACCESS_KEY_ID"), *secret = getenv("AWS_SECRET_ACCESS_KEY");
  const char *token = getenv("AWS_SESSION_TOKEN");
  if (!id || !*id || !secret || !*secret) return 0;
  if (!copy_field(v->key_id, sizeof v->key_id, id) || !copy_field(v->secret, sizeof v->secret, secret) ||
      (token && *token && !copy_field(v->token, sizeof v->token, token))) {
    snprintf(err, errlen, "aws credentials: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY or AWS_SESSION_TOKEN too long");
    return -1;
  }
  v->expires = 0;
  return 1;
}

static char *read_small_file(const char *path, size_t max, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *b = malloc(max + 1);
  size_t n = b ? fread(b, 1, max + 1, f) : 0;
  fclose(f);
  if (!b || n > max) {
    free(b);
    return NULL;
  }
  while (n && (b[n - 1] == '\n' || b[n - 1] == '\r' || b[n - 1] == ' ')) n--;
  b[n] = 0;
  *len = n;
  return b;
}

/* Appends "&name=value" (value percent-encoded) to a form body. */
static bool form_add(char *body, size_t cap, const char *name, const char *value) {
  size_t n = strlen(body);
  int w = snprintf(body + n, cap - n, "%s%s=", n ? "&" : "", name);
  if (w < 0 || (size_t)w >= cap - n) return false;
  return ak_awscreds_uri_encode(value, false, body, cap);
}

static int from_web_identity(ak_awscreds_t *c, ak_awscreds_val_t *v, char *err, size_t errlen) {
  const char *file = getenv("AWS_WEB_IDENTITY_TOKEN_FILE"), *role = getenv("AWS_ROLE_ARN");
  if (!file || !*file || !role || !*role) return 0;
  const char *session = getenv("AWS_ROLE_SESSION_NAME");
  if (!session || !*session) session = "ankusa";
  size_t tlen = 0;
  char *token = read_small_file(file, WEB_TOKEN_MAX, &tlen);
  if (!token || !tlen) {
    free(token);
    snprintf(err, errlen, "aws credentials: cannot read the web identity token file %s", file);
    return -1;
  }
  /* POST, so the token travels in the body, not in a URL */
  size_t cap = 3 * tlen + 3 * strlen(role) + 3 * strlen(session) + 256;
  char *body = calloc(1, cap);
  const char *ep = getenv("AWS_ENDPOINT_URL_STS");
  char url[512];
  if (ep && *ep) snprintf(url, sizeof url, "%s%s", ep, ep[strlen(ep) - 1] == '/' ? "" : "/");
  else snprintf(url, sizeof url, "https://sts.%s.amazonaws.com/", c->region);
  bool ok = body && form_add(body, cap, "Action", "AssumeRoleWithWebIdentity") &&
            form_add(body, cap, "RoleArn", role) && form_add(body, cap, "RoleSessionName", session) &&
            form_add(body, cap, "Version", "2011-06-15") && form_add(body, cap, "WebIdentityToken", token);
  explicit_bzero(token, tlen);
  free(token);
  if (!ok) {
    if (body) explicit_bzero(body, cap);
    free(body);
    snprintf(err, errlen, "aws credentials: out of memory");
    return -1;
  }
  const char *hdrs[] = {"Content-Type: application/x-www-form-urlencoded", "Accept: application/xml"};
  ak_httpc_req_t req = {.method = "POST", .url = url, .headers = hdrs, .nheaders = 2, .body = body,
                        .body_len = strlen(body), .timeout_ms = STS_TIMEOUT_MS, .max_response_bytes = 1 << 20};
  ak_awscreds_resp_t r;
  int rc = ak_awscreds_http(c->hc, &req, 2, "aws credentials: sts AssumeRoleWithWebIdentity", &r, err, errlen);
  explicit_bzero(body, cap);
  free(body);
  if (rc != 0) return -1;
  const char *x = (const char *)r.body;
  char when[64] = "";
  if (r.status != 200) {
    char code[64] = "";
    ak_awscreds_xml_text(x, r.body_len, "Code", code, sizeof code);
    for (char *p = code; *p; p++)
      if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '.')) *p = '?';
    snprintf(err, errlen, "aws credentials: sts AssumeRoleWithWebIdentity: HTTP %ld%s%s%s", r.status,
             *code ? " (" : "", code, *code ? ")" : "");
    ak_awscreds_resp_clear(&r);
    return -1;
  }
  ok = ak_awscreds_xml_text(x, r.body_len, "AccessKeyId", v->key_id, sizeof v->key_id) &&
       ak_awscreds_xml_text(x, r.body_len, "SecretAccessKey", v->secret, sizeof v->secret) &&
       ak_awscreds_xml_text(x, r.body_len, "SessionToken", v->token, sizeof v->token) && *v->key_id && *v->secret;
  ak_awscreds_xml_text(x, r.body_len, "Expiration", when, sizeof when);
  explicit_bzero(r.body, r.body_len);
  ak_awscreds_resp_clear(&r);
  if (!ok) {
    snprintf(err, errlen, "aws credentials: sts AssumeRoleWithWebIdentity: no credentials in the answer");
    return -1;
  }
  set_expiry(v, when);
  return 1;
}

static int imds_get(ak_awscreds_t *c, const char *url, const char *hdr, const char *what, ak_awscreds_resp_t *r,
                    char *err, size_t errlen) {
  const char *hdrs[] = {hdr};
  ak_httpc_req_t req = {.method = "GET", .url = url, .headers = hdrs, .nheaders = 1, .timeout_ms = IMDS_TIMEOUT_MS,
                        .max_response_bytes = 65536};
  char op[96];
  snprintf(op, sizeof op, "aws credentials: imds %s", what);
  if (ak_awscreds_http(c->hc, &req, 1, op, r, err, errlen) != 0) return -1;
  if (r->status != 200) {
    snprintf(err, errlen, "aws credentials: imds %s: HTTP %ld", what, r->status);
    ak_awscreds_resp_clear(r);
    return -1;
  }
  return 0;
}

static int from_imds(ak_awscreds_t *c, ak_awscreds_val_t *v, char *err, size_t errlen) {
  const char *ep = getenv("AWS_EC2_METADATA_SERVICE_ENDPOINT");
  char base[256], url[512];
  snprintf(base, sizeof base, "%s", ep && *ep ? ep : "http://169.254.169.254");
  size_t bl = strlen(base);
  if (bl && base[bl - 1] == '/') base[bl - 1] = 0;
  snprintf(url, sizeof url, "%s/latest/api/token", base);
  const char *ttl[] = {"X-aws-ec2-metadata-token-ttl-seconds: 21600"};
  ak_httpc_req_t req = {.method = "PUT", .url = url, .headers = ttl, .nheaders = 1, .timeout_ms = IMDS_TIMEOUT_MS,
                        .max_response_bytes = 4096};
  ak_awscreds_resp_t r;
  if (ak_awscreds_http(c->hc, &req, 1, "aws credentials: imds token", &r, err, errlen) != 0) return -1;
  if (r.status != 200 || !r.body_len || r.body_len > 2048 || memchr(r.body, '\n', r.body_len) ||
      memchr(r.body, '\r', r.body_len)) {
    snprintf(err, errlen, "aws credentials: imds token: HTTP %ld%s", r.status, r.status == 200 ? ", unusable token" : "");
    ak_awscreds_resp_clear(&r);
    return -1;
  }
  char hdr[2100];
  snprintf(hdr, sizeof hdr, "X-aws-ec2-metadata-token: %s", (const char *)r.body);
  explicit_bzero(r.body, r.body_len);
  ak_awscreds_resp_clear(&r);
  snprintf(url, sizeof url, "%s/latest/meta-data/iam/security-credentials/", base);
  int rc = imds_get(c, url, hdr, "role", &r, err, errlen);
  char role[256] = "";
  if (rc == 0) {
    size_t n = strcspn((const char *)r.body, "\r\n");
    if (n == 0 || n >= sizeof role) {
      snprintf(err, errlen, "aws credentials: imds role: no role attached to the instance");
      rc = -1;
    } else {
      memcpy(role, r.body, n);
      role[n] = 0;
    }
    ak_awscreds_resp_clear(&r);
  }
  if (rc == 0) {
    snprintf(url, sizeof url, "%s/latest/meta-data/iam/security-credentials/", base);
    if (!ak_awscreds_uri_encode(role, false, url, sizeof url)) {
      snprintf(err, errlen, "aws credentials: imds role name too long");
      rc = -1;
    }
  }
  if (rc == 0) rc = imds_get(c, url, hdr, "credentials", &r, err, errlen);
  explicit_bzero(hdr, sizeof hdr);
  if (rc != 0) return -1;
  json_error_t je;
  json_t *j = json_loadb((const char *)r.body, r.body_len, 0, &je);
  explicit_bzero(r.body, r.body_len);
  ak_awscreds_resp_clear(&r);
  const char *code = json_string_value(json_object_get(j, "Code"));
  bool ok = j && (!code || !strcmp(code, "Success")) &&
            copy_field(v->key_id, sizeof v->key_id, json_string_value(json_object_get(j, "AccessKeyId"))) &&
            copy_field(v->secret, sizeof v->secret, json_string_value(json_object_get(j, "SecretAccessKey")));
  const char *tok = json_string_value(json_object_get(j, "Token"));
  if (ok && tok && *tok) ok = copy_field(v->token, sizeof v->token, tok);
  if (ok) set_expiry(v, json_string_value(json_object_get(j, "Expiration")));
  if (j) {
    /* the parsed tree held the secret too: wipe its strings before they go back to malloc */
    const char *k;
    json_t *val;
    json_object_foreach(j, k, val) {
      if (json_is_string(val)) {
        size_t l = json_string_length(val);
        explicit_bzero((void *)json_string_value(val), l);
      }
    }
    json_decref(j);
  }
  if (!ok) {
    snprintf(err, errlen, "aws credentials: imds credentials: unreadable answer");
    return -1;
  }
  return 1;
}

/* The chain, in order; the first source that has credentials answers. */
static int lookup(ak_awscreds_t *c, ak_awscreds_val_t *v, char *err, size_t errlen) {
  memset(v, 0, sizeof *v);
  int rc = from_env(v, err, errlen);
  if (rc == 0) rc = from_web_identity(c, v, err, errlen);
  if (rc == 0) rc = from_imds(c, v, err, errlen);
  if (rc < 0) ak_awscreds_wipe(v);
  return rc > 0 ? 0 : -1;
}

int ak_awscreds_get(ak_awscreds_t *c, ak_awscreds_val_t *out, char *err, size_t errlen) {
  if (c->have_fixed) {
    *out = c->fixed;
    return 0;
  }
  pthread_mutex_lock(&c->mu);
  while (c->refreshing) pthread_cond_wait(&c->cv, &c->mu);
  if (c->have_cached && fresh(&c->cached)) {
    *out = c->cached;
    pthread_mutex_unlock(&c->mu);
    return 0;
  }
  /* the lookup is I/O: done without the lock, by one caller at a time */
  c->refreshing = true;
  pthread_mutex_unlock(&c->mu);
  ak_awscreds_val_t v;
  int rc = lookup(c, &v, err, errlen);
  pthread_mutex_lock(&c->mu);
  c->refreshing = false;
  if (rc == 0) {
    c->cached = v;
    c->have_cached = true;
    *out = v;
  } else if (c->have_cached && (int64_t)time(NULL) < c->cached.expires) {
    /* the refresh failed, but the old ones still work for a while: keep going with them */
    *out = c->cached;
    rc = 0;
  }
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  ak_awscreds_wipe(&v);
  return rc;
}
