/* The blob store handle, key checks and scopes (blob/blob.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "blob/blob.h"
#include "core/clock.h"
#include "core/metrics.h"

enum { OP_PUT, OP_GET, OP_HEAD, OP_LIST, OP_DELETE, OP_COUNT };
static const char *const op_names[OP_COUNT] = {"put", "get", "head", "list", "delete"};

struct ak_blob_metrics {
  ak_series_t *dur[OP_COUNT], *errs[OP_COUNT];
};

void ak_blob_instrument(ak_blob_t *b, ak_metrics_t *m, const char *instance) {
  if (!m || b->metrics) return;
  struct ak_blob_metrics *bm = calloc(1, sizeof *bm);
  if (!bm) return;
  static const double bounds[] = {0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30};
  const char *const labels[] = {"instance", "store", "op", NULL};
  ak_family_t *df = ak_metrics_family(m, "ankusa_blob_request_duration_seconds",
                                      "Blob store requests (archive segments, indexes, manifests), by store and "
                                      "operation, retries included.",
                                      AK_METRIC_HISTOGRAM, labels, bounds, sizeof bounds / sizeof *bounds);
  ak_family_t *ef = ak_metrics_family(m, "ankusa_blob_errors_total",
                                      "Blob store requests that failed (after the adapter's retries), by store and "
                                      "operation; a missing object is not an error.",
                                      AK_METRIC_COUNTER, labels, NULL, 0);
  for (int i = 0; i < OP_COUNT; i++) {
    const char *v[] = {instance, b->vt->type, op_names[i]};
    bm->dur[i] = ak_metrics_series(df, v);
    bm->errs[i] = ak_metrics_series(ef, v);
  }
  b->metrics = bm;
}

static int64_t op_begin(const ak_blob_t *b) { return b->metrics ? ak_mono_ns() : 0; }

static int op_end(const ak_blob_t *b, int op, int64_t t0, int rc) {
  if (b->metrics) {
    ak_histogram_observe(b->metrics->dur[op], (double)(ak_mono_ns() - t0) / 1e9);
    if (rc == AK_BLOB_ERROR) ak_counter_add(b->metrics->errs[op], 1);
  }
  return rc;
}

bool ak_blob_key_ok(const char *key) {
  if (!key || !*key || strlen(key) > AK_BLOB_KEY_MAX || strstr(key, ".ak-tmp-")) return false;
  const char *seg = key;
  for (const char *p = key;; p++) {
    if (*p == '/' || !*p) {
      size_t n = (size_t)(p - seg);
      if (n == 0 || (n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.')) return false;
      if (!*p) return true;
      seg = p + 1;
    } else if (*p < 0x21 || *p > 0x7e || *p == '\\') {
      return false;
    }
  }
}

ak_blob_t *ak_blob_scope(const ak_blob_t *b, const char *key_prefix, const char *scope) {
  ak_blob_t *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->vt = b->vt;
  s->self = b->self;
  s->metrics = b->metrics;
  int n = snprintf(s->prefix, sizeof s->prefix, "%s%s%s/", b->prefix, key_prefix ? key_prefix : "", scope);
  if (n < 0 || (size_t)n >= sizeof s->prefix) {
    free(s);
    return NULL;
  }
  return s;
}

void ak_blob_free(ak_blob_t *b) {
  if (!b) return;
  if (b->owner && b->vt->destroy) b->vt->destroy(b->self);
  if (b->owner) free(b->metrics);
  free(b);
}

/* The full key of a scoped one, checked. */
static bool full_key(const ak_blob_t *b, const char *key, char *out, size_t cap, char *err, size_t errlen) {
  int n = snprintf(out, cap, "%s%s", b->prefix, key ? key : "");
  if (n < 0 || (size_t)n >= cap || !ak_blob_key_ok(out)) {
    snprintf(err, errlen, "invalid blob key");
    return false;
  }
  return true;
}

int ak_blob_put(ak_blob_t *b, const char *key, const void *data, size_t len, char *err, size_t errlen) {
  char k[AK_BLOB_KEY_MAX + 1];
  if (!full_key(b, key, k, sizeof k, err, errlen)) return AK_BLOB_ERROR;
  int64_t t0 = op_begin(b);
  return op_end(b, OP_PUT, t0, b->vt->put(b->self, k, data, len, err, errlen));
}

/* 64 lowercase hex digits: it goes into a header line as is (S3's payload hash). */
static bool sha256_hex_ok(const char *h) {
  if (!h || strlen(h) != 64) return false;
  for (const char *p = h; *p; p++)
    if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) return false;
  return true;
}

int ak_blob_put_file(ak_blob_t *b, const char *key, int fd, uint64_t size, const char *sha256_hex, char *err,
                     size_t errlen) {
  char k[AK_BLOB_KEY_MAX + 1];
  if (!full_key(b, key, k, sizeof k, err, errlen)) return AK_BLOB_ERROR;
  if (!sha256_hex_ok(sha256_hex)) {
    snprintf(err, errlen, "put file: the sha256 is not 64 lowercase hex digits");
    return AK_BLOB_ERROR;
  }
  /* checked up front so a short file costs no request; the adapters still check what
   * they read (a file may shrink meanwhile) */
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    snprintf(err, errlen, "put file: %s", strerror(fd < 0 ? EBADF : errno));
    return AK_BLOB_ERROR;
  }
  if (!S_ISREG(st.st_mode)) {
    snprintf(err, errlen, "put file: not a regular file");
    return AK_BLOB_ERROR;
  }
  if ((uint64_t)st.st_size < size) {
    snprintf(err, errlen, "put file: the file holds %llu bytes, fewer than %llu", (unsigned long long)st.st_size,
             (unsigned long long)size);
    return AK_BLOB_ERROR;
  }
  if (!b->vt->put_file) {
    snprintf(err, errlen, "put file: not supported by the %s store", b->vt->type);
    return AK_BLOB_ERROR;
  }
  int64_t t0 = op_begin(b);
  return op_end(b, OP_PUT, t0, b->vt->put_file(b->self, k, fd, size, sha256_hex, err, errlen));
}

int ak_blob_get_range(ak_blob_t *b, const char *key, uint64_t off, size_t len, uint8_t **data, size_t *got,
                      char *err, size_t errlen) {
  char k[AK_BLOB_KEY_MAX + 1];
  *data = NULL;
  *got = 0;
  if (!full_key(b, key, k, sizeof k, err, errlen)) return AK_BLOB_ERROR;
  int64_t t0 = op_begin(b);
  return op_end(b, OP_GET, t0, b->vt->get_range(b->self, k, off, len, data, got, err, errlen));
}

int ak_blob_head(ak_blob_t *b, const char *key, uint64_t *size, char *err, size_t errlen) {
  char k[AK_BLOB_KEY_MAX + 1];
  if (!full_key(b, key, k, sizeof k, err, errlen)) return AK_BLOB_ERROR;
  int64_t t0 = op_begin(b);
  return op_end(b, OP_HEAD, t0, b->vt->head(b->self, k, size, err, errlen));
}

int ak_blob_get(ak_blob_t *b, const char *key, uint8_t **data, size_t *len, char *err, size_t errlen) {
  uint64_t size = 0;
  *data = NULL;
  *len = 0;
  int rc = ak_blob_head(b, key, &size, err, errlen);
  if (rc != AK_BLOB_OK) return rc;
  if (size > SIZE_MAX / 2) {
    snprintf(err, errlen, "blob too large to read whole");
    return AK_BLOB_ERROR;
  }
  return ak_blob_get_range(b, key, 0, (size_t)size, data, len, err, errlen);
}

int ak_blob_stream(ak_blob_t *b, const char *key, int (*cb)(void *ctx, const uint8_t *p, size_t n), void *ctx,
                   uint64_t *total, char *err, size_t errlen) {
  if (total) *total = 0;
  /* The size first: no range is ever asked past the end (an empty object needs none,
   * which some servers answer wrongly: s3rver sends a 206 promising a byte it never
   * sends), and an object that shrinks while it is read is noticed. */
  uint64_t size = 0;
  int rc = ak_blob_head(b, key, &size, err, errlen);
  if (rc != AK_BLOB_OK) return rc;
  for (uint64_t off = 0; off < size;) {
    size_t want = size - off < AK_BLOB_STREAM_CHUNK ? (size_t)(size - off) : AK_BLOB_STREAM_CHUNK;
    uint8_t *data = NULL;
    size_t got = 0;
    rc = ak_blob_get_range(b, key, off, want, &data, &got, err, errlen);
    if (rc == AK_BLOB_OK && got < want) {
      snprintf(err, errlen, "stream: the object changed while it was read (%llu of %llu bytes)",
               (unsigned long long)(off + got), (unsigned long long)size);
      rc = AK_BLOB_ERROR;
    } else if (rc == AK_BLOB_NOT_FOUND) {
      /* deleted between two requests: what was handed out is not the object */
      snprintf(err, errlen, "stream: the object went away after %llu bytes", (unsigned long long)off);
      rc = AK_BLOB_ERROR;
    }
    if (rc != AK_BLOB_OK) {
      free(data);
      return rc;
    }
    off += got;
    if (total) *total = off;
    int stop = cb(ctx, data, got);
    free(data);
    if (stop) {
      snprintf(err, errlen, "stopped");
      return AK_BLOB_ERROR;
    }
  }
  return AK_BLOB_OK;
}

int ak_blob_list(ak_blob_t *b, const char *prefix, const char *after, size_t max, ak_blob_list_t *out, char *err,
                 size_t errlen) {
  memset(out, 0, sizeof *out);
  char p[AK_BLOB_KEY_MAX + 1], a[AK_BLOB_KEY_MAX + 1];
  int n = snprintf(p, sizeof p, "%s%s", b->prefix, prefix ? prefix : "");
  if (n < 0 || (size_t)n >= sizeof p) {
    snprintf(err, errlen, "invalid blob prefix");
    return AK_BLOB_ERROR;
  }
  if (after) {
    n = snprintf(a, sizeof a, "%s%s", b->prefix, after);
    if (n < 0 || (size_t)n >= sizeof a) {
      snprintf(err, errlen, "invalid blob continuation");
      return AK_BLOB_ERROR;
    }
  }
  int64_t t0 = op_begin(b);
  int rc = op_end(b, OP_LIST, t0, b->vt->list(b->self, p, after ? a : NULL, max, out, err, errlen));
  if (rc != AK_BLOB_OK) return rc;
  /* back to keys relative to the scope */
  size_t pl = strlen(b->prefix);
  for (size_t i = 0; i < out->n; i++) memmove(out->keys[i], out->keys[i] + pl, strlen(out->keys[i] + pl) + 1);
  if (out->next) memmove(out->next, out->next + pl, strlen(out->next + pl) + 1);
  return AK_BLOB_OK;
}

void ak_blob_list_clear(ak_blob_list_t *l) {
  for (size_t i = 0; i < l->n; i++) free(l->keys[i]);
  free(l->keys);
  free(l->next);
  memset(l, 0, sizeof *l);
}

int ak_blob_delete(ak_blob_t *b, const char *key, char *err, size_t errlen) {
  char k[AK_BLOB_KEY_MAX + 1];
  if (!full_key(b, key, k, sizeof k, err, errlen)) return AK_BLOB_ERROR;
  int64_t t0 = op_begin(b);
  return op_end(b, OP_DELETE, t0, b->vt->del(b->self, k, err, errlen));
}

int ak_blob_prune(ak_blob_t *b, const char *prefix, char *err, size_t errlen) {
  if (!b->vt->prune) return AK_BLOB_OK;
  char k[AK_BLOB_KEY_MAX + 1];
  if (!full_key(b, prefix, k, sizeof k, err, errlen)) return AK_BLOB_ERROR;
  return b->vt->prune(b->self, k, err, errlen);
}

const char *ak_blob_type(const ak_blob_t *b) { return b->vt->type; }
