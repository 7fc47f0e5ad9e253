/* The GCS blob store (blob/blob.h) over Google's JSON API: media uploads (the body from
 * memory, or streamed from a file by the HTTP client), ranged media reads, object
 * metadata for head, deletes, and listings continued by key (startOffset). Owns the URLs
 * (percent-encoding of bucket and names), the bearer token (configured, or fetched from
 * the instance metadata server and cached until 60 s before it expires),
 * the retries (2, after 200 ms then 1 s, on transport failures, timeouts and
 * 408/429/500/502/503/504; a fresh token each attempt) and the mapping of statuses to
 * blob results. Every call is synchronous for its caller: it submits to the node's shared
 * HTTP client and waits on a condition variable for the one completion.
 *
 * Never puts a token into an error string or a URL, never sends a header value it did
 * not check for CR/LF, never follows a redirect (the client does not), and never keeps
 * state outside its own handle: two stores in one process share nothing but the client. */
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <jansson.h>
#include <openssl/crypto.h>
#include "core/buf.h"
#include "core/clock.h"
#include "net/httpc.h"
#include "blob/blob.h"

#define GCS_TIMEOUT_MS 10000           /* per attempt (the remote adapters' timeout_ms) */
#define GCS_TOKEN_MARGIN_S 60          /* a metadata token is renewed this long before expiry */
#define GCS_TOKEN_MAX 4096             /* longer than any access token Google issues */
#define GCS_SMALL_BODY (64u << 10)     /* metadata JSON, error JSON, the token answer */
#define GCS_LIST_BODY (8u << 20)       /* a page of 1,000 names of up to 1,024 bytes, escaped */
#define GCS_PAGE_MAX 1000              /* the JSON API's cap on maxResults */
#define GCS_MSG_MAX 200                /* bytes of Google's error message kept in err */

/* Waits before the 2nd and later attempts: the same schedule as every remote adapter
 * (storage-ops §4), 200 ms then 1 s (each later one 1 s too); `retries` (2) says how many
 * there are, so a flapping endpoint costs a caller 1.2 s plus timeouts by default. */
static const long retry_wait_ms[] = {200, 1000};
#define GCS_RETRIES 2

typedef enum { AUTH_METADATA, AUTH_TOKEN, AUTH_NONE } gcs_auth_t;

typedef struct {
  ak_httpc_t *httpc;   /* the node's: outlives the store */
  char *endpoint;      /* scheme://host[:port], no trailing '/' */
  char *bucket;        /* percent-encoded once, at open */
  gcs_auth_t auth;
  char *token_url;     /* metadata: where tokens come from */
  pthread_mutex_t mu;  /* token and token_until: callers may share a store across threads */
  char *token;         /* auth token: the configured one; metadata: the cached one or NULL */
  int64_t token_until; /* metadata: monotonic ns after which the cached token is not used */
  long timeout_ms;     /* per attempt (gcs.timeout_ms) */
  int attempts;        /* 1 + gcs.retries */
} gcs_t;

/* ---- one exchange, waited for ------------------------------------------------------ */

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done;
  ak_httpc_result_t result;
  long status;
  ak_buf_t body;
  char why[128];
} waiter_t;

/* Runs on one of the client's threads; the waiter lives on the caller's stack until
 * `done` is seen under mu, so nothing here may touch it after the unlock. */
static void on_done(void *ctx, const ak_httpc_resp_t *r) {
  waiter_t *w = ctx;
  pthread_mutex_lock(&w->mu);
  w->result = r->result;
  w->status = r->status;
  if (r->body && r->body_bytes) ak_buf_append(&w->body, r->body, r->body_bytes);
  snprintf(w->why, sizeof w->why, "%s", r->why ? r->why : "");
  w->done = true;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

typedef struct {
  long status;
  char *body; /* NUL-terminated (malloc'd) */
  size_t len;
} resp_t;

static void resp_free(resp_t *r) {
  free(r->body);
  r->body = NULL;
  r->len = 0;
}

static bool retryable_status(long s) {
  return s == 408 || s == 429 || s == 500 || s == 502 || s == 503 || s == 504;
}

static void sleep_ms(long ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* An access token goes into a header line: visible ASCII only, so a metadata server (or
 * a config) cannot smuggle in a second header. */
static bool token_ok(const char *t) {
  if (!t || !*t || strlen(t) > GCS_TOKEN_MAX) return false;
  for (const char *p = t; *p; p++)
    if (*p < 0x21 || *p > 0x7e) return false;
  return true;
}

static int bearer(gcs_t *g, char *line, size_t cap, char *err, size_t errlen);

/* One request, attempted up to g->attempts times. 0: a response arrived (out filled; a
 * retryable status too, after the last attempt, so the caller names it with Google's
 * message). -1: no response (err says why: the client's secret-free reason, never a URL).
 * op names the operation for err ("put KEY"). with_auth adds the store's bearer header,
 * re-obtained for each attempt so a token expiring between attempts is renewed. */
static int exchange_fd(gcs_t *g, const char *op, const char *method, const char *url, const char *const *hdrs,
                       size_t nh, const void *body, size_t blen, int body_fd, long timeout_ms, size_t max_resp,
                       bool with_auth, resp_t *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  const char *lines[8];
  if (nh > sizeof lines / sizeof lines[0] - 1) {
    snprintf(err, errlen, "gcs %s: too many headers", op);
    return -1;
  }
  char why[160] = "";
  for (int attempt = 0; attempt < g->attempts; attempt++) {
    if (attempt > 0) sleep_ms(retry_wait_ms[attempt == 1 ? 0 : 1]);
    char auth[GCS_TOKEN_MAX + 32];
    auth[0] = '\0';
    if (with_auth) {
      char why_token[256];
      if (bearer(g, auth, sizeof auth, why_token, sizeof why_token) != 0) {
        snprintf(err, errlen, "%s (for %s)", why_token, op);
        return -1;
      }
    }
    size_t n = 0;
    for (; n < nh; n++) lines[n] = hdrs[n];
    if (auth[0]) lines[n++] = auth;
    waiter_t w = {.done = false, .body = AK_BUF_INIT};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    ak_httpc_req_t rq = {
      .method = method,
      .url = url,
      .headers = lines,
      .nheaders = n,
      .body = body_fd >= 0 ? NULL : body,
      .body_len = blen,
      .body_from_fd = body_fd >= 0, /* every attempt reads the file from its first byte */
      .body_fd = body_fd,
      .timeout_ms = timeout_ms,
      .max_response_bytes = max_resp,
      .keep_body = true,
    };
    int rc = ak_httpc_submit(g->httpc, &rq, on_done, &w);
    OPENSSL_cleanse(auth, sizeof auth); /* submit copied it */
    if (rc == 0) {
      pthread_mutex_lock(&w.mu);
      while (!w.done) pthread_cond_wait(&w.cv, &w.mu);
      pthread_mutex_unlock(&w.mu);
    }
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
    if (rc != 0) {
      ak_buf_free(&w.body);
      snprintf(why, sizeof why, "http client: %s", ak_httpc_strerror(rc));
      if (rc == AK_HTTPC_BUSY) continue; /* the client is full for now: worth a wait */
      break;
    }
    if (w.result == AK_HTTPC_OK) {
      size_t len = 0;
      char *b = ak_buf_take(&w.body, &len);
      if (!b) {
        snprintf(err, errlen, "gcs %s: out of memory", op);
        return -1;
      }
      if (retryable_status(w.status) && attempt + 1 < g->attempts) {
        free(b);
        continue;
      }
      *out = (resp_t){.status = w.status, .body = b, .len = len};
      return 0;
    }
    ak_buf_free(&w.body);
    snprintf(why, sizeof why, "%s", w.why[0] ? w.why : "transport failure");
    /* a refused address or a cancelled request will not get better by waiting */
    if (w.result != AK_HTTPC_TIMEOUT && w.result != AK_HTTPC_FAILED) break;
  }
  snprintf(err, errlen, "gcs %s: %s", op, why);
  return -1;
}

/* exchange_fd with the body (if any) in memory and the store's timeout. */
static int exchange(gcs_t *g, const char *op, const char *method, const char *url, const char *const *hdrs,
                    size_t nh, const void *body, size_t blen, size_t max_resp, bool with_auth, resp_t *out,
                    char *err, size_t errlen) {
  return exchange_fd(g, op, method, url, hdrs, nh, body, blen, -1, g->timeout_ms, max_resp, with_auth, out, err,
                     errlen);
}

/* Google's error body is {"error": {"code", "message", "errors": [{"reason"}]}}: its
 * message and reason say what is wrong (no such bucket, permission denied on what). Only
 * printable ASCII is kept, and at most GCS_MSG_MAX bytes of it. */
static void append_clean(char *dst, size_t cap, const char *s) {
  size_t n = strlen(dst);
  for (size_t i = 0; s && s[i] && n + 1 < cap && i < GCS_MSG_MAX; i++)
    dst[n++] = s[i] >= 0x20 && s[i] <= 0x7e ? s[i] : '?';
  dst[n] = '\0';
}

static int http_fail(const char *op, const resp_t *r, char *err, size_t errlen) {
  char msg[2 * GCS_MSG_MAX + 8] = "";
  json_t *j = r->body && r->len ? json_loadb(r->body, r->len, 0, NULL) : NULL;
  json_t *e = json_object_get(j, "error");
  const char *m = json_string_value(json_object_get(e, "message"));
  if (!m) m = json_string_value(e); /* the metadata server and OAuth answer {"error": "..."} */
  const char *reason = json_string_value(json_object_get(json_array_get(json_object_get(e, "errors"), 0), "reason"));
  if (m) {
    strcpy(msg, ": ");
    append_clean(msg, sizeof msg, m);
  }
  if (reason) {
    strncat(msg, " (", sizeof msg - strlen(msg) - 1);
    append_clean(msg, sizeof msg, reason);
    strncat(msg, ")", sizeof msg - strlen(msg) - 1);
  }
  json_decref(j);
  snprintf(err, errlen, "gcs %s: HTTP %ld%s", op, r->status, msg);
  return AK_BLOB_ERROR;
}

/* ---- auth -------------------------------------------------------------------------- */

/* A token from the metadata server, into g->token (mu held). */
static int fetch_token(gcs_t *g, char *err, size_t errlen) {
  static const char *const hdrs[] = {"Metadata-Flavor: Google"};
  resp_t r;
  if (exchange(g, "metadata token", "GET", g->token_url, hdrs, 1, NULL, 0, GCS_SMALL_BODY, false, &r, err, errlen) !=
      0)
    return -1;
  int rc = -1;
  json_t *j = NULL;
  if (r.status != 200) {
    http_fail("metadata token", &r, err, errlen);
    goto out;
  }
  j = json_loadb(r.body, r.len, 0, NULL);
  const char *tok = json_string_value(json_object_get(j, "access_token"));
  json_t *exp = json_object_get(j, "expires_in");
  if (!token_ok(tok) || !json_is_integer(exp)) {
    snprintf(err, errlen, "gcs metadata token: answer without a usable access_token and expires_in");
    goto out;
  }
  char *t = strdup(tok);
  if (!t) {
    snprintf(err, errlen, "gcs metadata token: out of memory");
    goto out;
  }
  if (g->token) {
    OPENSSL_cleanse(g->token, strlen(g->token));
    free(g->token);
  }
  g->token = t;
  /* a token with no more than the margin left is used for this request only */
  json_int_t left = json_integer_value(exp) - GCS_TOKEN_MARGIN_S;
  if (left < 0) left = 0;
  if (left > 86400) left = 86400;
  g->token_until = ak_mono_ns() + (int64_t)left * 1000000000;
  rc = 0;
out:;
  /* the answer holds the token: wipe it before it goes back to the allocator */
  json_t *at = json_object_get(j, "access_token");
  if (json_is_string(at)) OPENSSL_cleanse((char *)json_string_value(at), json_string_length(at));
  json_decref(j);
  if (r.body) OPENSSL_cleanse(r.body, r.len);
  resp_free(&r);
  return rc;
}

/* The Authorization line for a request ("" for auth none). */
static int bearer(gcs_t *g, char *line, size_t cap, char *err, size_t errlen) {
  line[0] = '\0';
  if (g->auth == AUTH_NONE) return 0;
  pthread_mutex_lock(&g->mu);
  int rc = 0;
  /* mu is held across the fetch on purpose: threads needing a token at once wait for one
   * fetch instead of each asking the metadata server */
  if (g->auth == AUTH_METADATA && (!g->token || ak_mono_ns() >= g->token_until)) rc = fetch_token(g, err, errlen);
  if (rc == 0) snprintf(line, cap, "Authorization: Bearer %s", g->token);
  pthread_mutex_unlock(&g->mu);
  return rc;
}

/* A 401 means the cached token is no good (revoked, or a clock skew): the next request
 * asks the metadata server again instead of failing until the cache runs out. */
static void token_rejected(gcs_t *g) {
  if (g->auth != AUTH_METADATA) return;
  pthread_mutex_lock(&g->mu);
  g->token_until = 0;
  pthread_mutex_unlock(&g->mu);
}

/* ---- URLs -------------------------------------------------------------------------- */

/* RFC 3986: everything but the unreserved characters is percent-encoded, '/' included:
 * the JSON API names an object by one path segment, and a query value must not split. */
static void enc(ak_buf_t *b, const char *s) {
  static const char hex[] = "0123456789ABCDEF";
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    unsigned char c = *p;
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
        c == '_' || c == '~') {
      ak_buf_append(b, p, 1);
    } else {
      char e[3] = {'%', hex[c >> 4], hex[c & 15]};
      ak_buf_append(b, e, 3);
    }
  }
}

/* {endpoint}/storage/v1/b/{bucket}/o/{name} */
static char *object_url(const gcs_t *g, const char *key, const char *query) {
  ak_buf_t b = AK_BUF_INIT;
  ak_buf_printf(&b, "%s/storage/v1/b/%s/o/", g->endpoint, g->bucket);
  enc(&b, key);
  if (query) ak_buf_puts(&b, query);
  return ak_buf_take(&b, NULL);
}

static int oom(const char *op, char *err, size_t errlen) {
  snprintf(err, errlen, "gcs %s: out of memory", op);
  return AK_BLOB_ERROR;
}

/* ---- the operations ---------------------------------------------------------------- */

/* A media upload of len bytes: from data, or (fd >= 0) from the file fd. */
static int upload(gcs_t *g, const char *key, const void *data, size_t len, int fd, char *err, size_t errlen) {
  char op[AK_BLOB_KEY_MAX + 8];
  snprintf(op, sizeof op, "put %s", key);
  ak_buf_t b = AK_BUF_INIT;
  ak_buf_printf(&b, "%s/upload/storage/v1/b/%s/o?uploadType=media&name=", g->endpoint, g->bucket);
  enc(&b, key);
  char *url = ak_buf_take(&b, NULL);
  if (!url) return oom(op, err, errlen);
  /* "Expect:": no 100-continue round trip before a segment's bytes go out */
  static const char *const hdrs[] = {"Content-Type: application/octet-stream", "Expect:"};
  resp_t r;
  /* a body from a file gets 1 ms per KiB on top of the timeout (at least ~1 MB/s): the
   * timeout bounds the whole exchange, and a backup's file may be GBs */
  long timeout_ms = g->timeout_ms + (fd >= 0 ? (long)(len >> 10) : 0);
  int rc = exchange_fd(g, op, "POST", url, hdrs, 2, data, len, fd, timeout_ms, GCS_SMALL_BODY, true, &r, err, errlen);
  free(url);
  if (rc != 0) return AK_BLOB_ERROR;
  /* a media upload is atomic: 200 means the whole object is stored, and readable */
  if (r.status == 200) rc = AK_BLOB_OK;
  else {
    if (r.status == 401) token_rejected(g);
    rc = http_fail(op, &r, err, errlen);
  }
  resp_free(&r);
  return rc;
}

static int gcs_put(void *self, const char *key, const void *data, size_t len, char *err, size_t errlen) {
  return upload(self, key, data, len, -1, err, errlen);
}

/* The same media upload, its body streamed from the file (httpc reads it in chunks). The
 * JSON API's media upload takes no payload hash, so sha256_hex is not sent. */
static int gcs_put_file(void *self, const char *key, int fd, uint64_t size, const char *sha256_hex, char *err,
                        size_t errlen) {
  (void)sha256_hex;
  if (size > SIZE_MAX / 2) {
    snprintf(err, errlen, "gcs put %s: file too large", key);
    return AK_BLOB_ERROR;
  }
  return upload(self, key, NULL, (size_t)size, fd, err, errlen);
}

static int gcs_head(void *self, const char *key, uint64_t *size, char *err, size_t errlen) {
  gcs_t *g = self;
  char op[AK_BLOB_KEY_MAX + 8];
  snprintf(op, sizeof op, "head %s", key);
  char *url = object_url(g, key, NULL);
  if (!url) return oom(op, err, errlen);
  resp_t r;
  int rc = exchange(g, op, "GET", url, NULL, 0, NULL, 0, GCS_SMALL_BODY, true, &r, err, errlen);
  free(url);
  if (rc != 0) return AK_BLOB_ERROR;
  if (r.status == 404) rc = AK_BLOB_NOT_FOUND;
  else if (r.status != 200) {
    if (r.status == 401) token_rejected(g);
    rc = http_fail(op, &r, err, errlen);
  } else {
    /* the JSON API carries sizes as decimal strings (they may exceed 2^53) */
    json_t *j = json_loadb(r.body, r.len, 0, NULL);
    const char *s = json_string_value(json_object_get(j, "size"));
    char *end = NULL;
    unsigned long long v = s && *s >= '0' && *s <= '9' ? strtoull(s, &end, 10) : 0;
    if (!end || *end) {
      snprintf(err, errlen, "gcs %s: metadata without a size", op);
      rc = AK_BLOB_ERROR;
    } else {
      *size = v;
      rc = AK_BLOB_OK;
    }
    json_decref(j);
  }
  resp_free(&r);
  return rc;
}

static int gcs_get_range(void *self, const char *key, uint64_t off, size_t len, uint8_t **data, size_t *got,
                         char *err, size_t errlen) {
  gcs_t *g = self;
  *data = NULL;
  *got = 0;
  if (len == 0) {
    /* no Range can ask for 0 bytes; the answer must still say whether the key exists */
    uint64_t size;
    int rc = gcs_head(g, key, &size, err, errlen);
    if (rc == AK_BLOB_OK && !(*data = malloc(1))) return oom("get", err, errlen);
    return rc;
  }
  char op[AK_BLOB_KEY_MAX + 8];
  snprintf(op, sizeof op, "get %s", key);
  if (off > UINT64_MAX - len) {
    snprintf(err, errlen, "gcs %s: range past 2^64", op);
    return AK_BLOB_ERROR;
  }
  char *url = object_url(g, key, "?alt=media");
  if (!url) return oom(op, err, errlen);
  char range[64];
  snprintf(range, sizeof range, "Range: bytes=%" PRIu64 "-%" PRIu64, off, off + len - 1);
  const char *const hdrs[] = {range};
  resp_t r;
  /* room for Google's error JSON even when the range is a few bytes */
  int rc = exchange(g, op, "GET", url, hdrs, 1, NULL, 0, len > GCS_SMALL_BODY ? len : GCS_SMALL_BODY, true, &r, err,
                    errlen);
  free(url);
  if (rc != 0) return AK_BLOB_ERROR;
  if (r.status == 206 || (r.status == 200 && off == 0) || r.status == 416) {
    /* 416: the range starts at or past the end, which the interface answers with 0
     * bytes; 200 from offset 0: a server that ignores Range (an empty object, an
     * emulator) sent the object from its start, of which the first len bytes are ours */
    size_t n = r.status == 416 ? 0 : r.len < len ? r.len : len;
    if (n == 0) {
      free(r.body);
      r.body = malloc(1);
    }
    if (!r.body) return oom(op, err, errlen);
    *data = (uint8_t *)r.body;
    *got = n;
    return AK_BLOB_OK;
  }
  if (r.status == 404) rc = AK_BLOB_NOT_FOUND;
  else if (r.status == 200) {
    snprintf(err, errlen, "gcs %s: the server ignored the Range header", op);
    rc = AK_BLOB_ERROR;
  } else {
    if (r.status == 401) token_rejected(g);
    rc = http_fail(op, &r, err, errlen);
  }
  resp_free(&r);
  return rc;
}

static int gcs_del(void *self, const char *key, char *err, size_t errlen) {
  gcs_t *g = self;
  char op[AK_BLOB_KEY_MAX + 8];
  snprintf(op, sizeof op, "delete %s", key);
  char *url = object_url(g, key, NULL);
  if (!url) return oom(op, err, errlen);
  /* the client sends a custom method like a POST: no form Content-Type for an empty body */
  static const char *const hdrs[] = {"Content-Type:"};
  resp_t r;
  int rc = exchange(g, op, "DELETE", url, hdrs, 1, NULL, 0, GCS_SMALL_BODY, true, &r, err, errlen);
  free(url);
  if (rc != 0) return AK_BLOB_ERROR;
  /* 404: already gone, perhaps by an earlier attempt whose answer was lost */
  if (r.status == 204 || r.status == 200 || r.status == 404) rc = AK_BLOB_OK;
  else {
    if (r.status == 401) token_rejected(g);
    rc = http_fail(op, &r, err, errlen);
  }
  resp_free(&r);
  return rc;
}

/* blob.h's continuation is a key (the last one handed out): blob.c strips the scope from
 * it, and a caller may keep it across restarts. A pageToken is neither: it is opaque,
 * bound to the query that produced it, and not a key. So a listing starts at
 * startOffset=after (inclusive, hence `after` itself is dropped) and follows pageToken
 * only within one call, until it has max + 1 keys: the extra one says whether there is a
 * next page without handing out a continuation that leads to an empty one. */
static int gcs_list(void *self, const char *prefix, const char *after, size_t max, ak_blob_list_t *out, char *err,
                    size_t errlen) {
  gcs_t *g = self;
  memset(out, 0, sizeof *out);
  const char *op = "list";
  size_t want = max < SIZE_MAX ? max + 1 : max, cap = 0;
  char *token = NULL;
  int rc = AK_BLOB_OK;
  if (max == 0) return AK_BLOB_OK;
  do {
    size_t ask = want - out->n + (after && !token ? 1 : 0);
    if (ask > GCS_PAGE_MAX) ask = GCS_PAGE_MAX;
    ak_buf_t b = AK_BUF_INIT;
    ak_buf_printf(&b, "%s/storage/v1/b/%s/o?maxResults=%zu&fields=", g->endpoint, g->bucket, ask);
    enc(&b, "items(name),nextPageToken"); /* names only: a tenth of the bytes of full metadata */
    if (prefix && *prefix) {
      ak_buf_puts(&b, "&prefix=");
      enc(&b, prefix);
    }
    if (after) {
      ak_buf_puts(&b, "&startOffset=");
      enc(&b, after);
    }
    if (token) {
      ak_buf_puts(&b, "&pageToken=");
      enc(&b, token);
    }
    free(token);
    token = NULL;
    char *url = ak_buf_take(&b, NULL);
    if (!url) {
      rc = oom(op, err, errlen);
      break;
    }
    resp_t r;
    int xrc = exchange(g, op, "GET", url, NULL, 0, NULL, 0, GCS_LIST_BODY, true, &r, err, errlen);
    free(url);
    if (xrc != 0) {
      rc = AK_BLOB_ERROR;
      break;
    }
    if (r.status != 200) {
      if (r.status == 401) token_rejected(g);
      rc = http_fail(op, &r, err, errlen);
      resp_free(&r);
      break;
    }
    json_t *j = json_loadb(r.body, r.len, 0, NULL);
    bool truncated_page = r.len >= GCS_LIST_BODY;
    resp_free(&r);
    json_t *items = json_object_get(j, "items");
    if (!j || truncated_page || (items && !json_is_array(items))) {
      json_decref(j);
      snprintf(err, errlen, "gcs %s: answer is not a listing", op);
      rc = AK_BLOB_ERROR;
      break;
    }
    size_t i;
    json_t *it;
    json_array_foreach(items, i, it) {
      if (out->n >= want) break;
      const char *name = json_string_value(json_object_get(it, "name"));
      if (!name) continue;
      /* keys come out once each and in byte order, whatever a server does: the compactor
       * and the backups walk them as a sequence */
      const char *last = out->n ? out->keys[out->n - 1] : after;
      if (last && strcmp(name, last) <= 0) continue;
      if (prefix && strncmp(name, prefix, strlen(prefix)) != 0) continue;
      if (ak_buf_grow(&out->keys, &cap, out->n + 1, sizeof *out->keys) != 0 || !(out->keys[out->n] = strdup(name))) {
        rc = oom(op, err, errlen);
        break;
      }
      out->n++;
    }
    const char *next = json_string_value(json_object_get(j, "nextPageToken"));
    if (rc == AK_BLOB_OK && next && *next && out->n < want && !(token = strdup(next))) rc = oom(op, err, errlen);
    json_decref(j);
  } while (rc == AK_BLOB_OK && token);
  free(token);
  if (rc == AK_BLOB_OK && out->n > max) {
    while (out->n > max) free(out->keys[--out->n]);
    if (!(out->next = strdup(out->keys[max - 1]))) rc = oom(op, err, errlen);
  }
  if (rc != AK_BLOB_OK) ak_blob_list_clear(out);
  return rc;
}

static void gcs_destroy(void *self) {
  gcs_t *g = self;
  if (!g) return;
  if (g->token) {
    OPENSSL_cleanse(g->token, strlen(g->token));
    free(g->token);
  }
  pthread_mutex_destroy(&g->mu);
  free(g->endpoint);
  free(g->bucket);
  free(g->token_url);
  free(g);
}

static const ak_blob_vtable_t gcs_vt = {
  .type = "gcs",
  .put = gcs_put,
  .put_file = gcs_put_file,
  .get_range = gcs_get_range,
  .head = gcs_head,
  .list = gcs_list,
  .del = gcs_del,
  .destroy = gcs_destroy,
};

/* GCE_METADATA_HOST is how Google's client libraries point at another metadata server
 * (host or host:port): a test's stand-in, or a proxy on GKE. A '/', '@' or space in it
 * would change what the URL means, so such a value is refused. */
static bool host_ok(const char *h) {
  if (!h || !*h || strlen(h) > 255) return false;
  for (const char *p = h; *p; p++)
    if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || strchr(".-:[]", *p)))
      return false;
  return true;
}

ak_blob_t *ak_blob_gcs_new(const json_t *cfg, ak_httpc_t *httpc, char *err, size_t errlen) {
  const char *bucket = json_string_value(json_object_get(cfg, "bucket"));
  const char *endpoint = json_string_value(json_object_get(cfg, "endpoint"));
  const char *auth = json_string_value(json_object_get(cfg, "auth"));
  const char *token = json_string_value(json_object_get(cfg, "token"));
  if (!endpoint) endpoint = "https://storage.googleapis.com";
  if (!auth) auth = "metadata";
  if (!httpc) {
    snprintf(err, errlen, "gcs blob store: no HTTP client");
    return NULL;
  }
  if (!bucket || !*bucket) {
    snprintf(err, errlen, "gcs.bucket: required");
    return NULL;
  }
  if (strncmp(endpoint, "http://", 7) != 0 && strncmp(endpoint, "https://", 8) != 0) {
    snprintf(err, errlen, "gcs.endpoint: must start with http:// or https://");
    return NULL;
  }
  gcs_auth_t mode;
  if (!strcmp(auth, "metadata")) mode = AUTH_METADATA;
  else if (!strcmp(auth, "token")) mode = AUTH_TOKEN;
  else if (!strcmp(auth, "none")) mode = AUTH_NONE;
  else {
    snprintf(err, errlen, "gcs.auth: must be metadata, token or none");
    return NULL;
  }
  if (mode == AUTH_TOKEN && !token_ok(token)) {
    snprintf(err, errlen, "gcs.token: required when gcs.auth is token (visible ASCII, at most %d bytes)",
             GCS_TOKEN_MAX);
    return NULL;
  }
  const char *mhost = getenv("GCE_METADATA_HOST");
  if (mode == AUTH_METADATA && mhost && !host_ok(mhost)) {
    snprintf(err, errlen, "GCE_METADATA_HOST: not a host or host:port");
    return NULL;
  }
  if (!mhost) mhost = "metadata.google.internal";

  gcs_t *g = calloc(1, sizeof *g);
  ak_blob_t *b = calloc(1, sizeof *b);
  ak_buf_t bb = AK_BUF_INIT, tb = AK_BUF_INIT;
  if (!g || !b) {
    free(g);
    free(b);
    snprintf(err, errlen, "gcs blob store: out of memory");
    return NULL;
  }
  pthread_mutex_init(&g->mu, NULL);
  json_int_t t = json_integer_value(json_object_get(cfg, "timeout_ms"));
  g->timeout_ms = t > 0 && t <= 600000 ? (long)t : GCS_TIMEOUT_MS;
  json_t *rj = json_object_get(cfg, "retries");
  g->attempts = 1 + (json_is_integer(rj) && json_integer_value(rj) >= 0 && json_integer_value(rj) <= 10
                         ? (int)json_integer_value(rj)
                         : GCS_RETRIES);
  g->httpc = httpc;
  g->auth = mode;
  size_t el = strlen(endpoint);
  while (el > 0 && endpoint[el - 1] == '/') el--;
  g->endpoint = strndup(endpoint, el);
  enc(&bb, bucket);
  g->bucket = ak_buf_take(&bb, NULL);
  ak_buf_printf(&tb, "http://%s/computeMetadata/v1/instance/service-accounts/default/token", mhost);
  g->token_url = ak_buf_take(&tb, NULL);
  if (mode == AUTH_TOKEN) g->token = strdup(token);
  if (!g->endpoint || !g->bucket || !g->token_url || (mode == AUTH_TOKEN && !g->token)) goto oom;
  b->vt = &gcs_vt;
  b->self = g;
  b->owner = true;
  return b;
oom:
  ak_buf_free(&bb);
  ak_buf_free(&tb);
  gcs_destroy(g);
  free(b);
  snprintf(err, errlen, "gcs blob store: out of memory");
  return NULL;
}
