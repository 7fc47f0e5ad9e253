/* The archive catalogue and archived-hook reads (archive/catalogue.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "archive/catalogue.h"
#include "core/envelope.h"
#include "core/ids.h"
#include "store/keys.h"

#define CAT_VERSION 1
#define CAT_FIXED (1 + 8 + 4 + 8 + 8 + 8 + 8 + 16 + 16 + 8)

void ak_cat_key(uint8_t out[AK_CAT_KEY_LEN], uint64_t first_seq) {
  out[0] = AK_ARC_SEGMENT;
  ak_put_u64(out + 1, first_seq);
}

size_t ak_cat_encode(uint8_t *out, size_t cap, const ak_cat_row_t *r) {
  size_t sl = strlen(r->seg_key), il = strlen(r->idx_key);
  size_t need = CAT_FIXED + 2 + sl + 2 + il;
  if (need > cap || sl > 0xffff || il > 0xffff) return 0;
  uint8_t *p = out;
  *p++ = CAT_VERSION;
  ak_put_u64(p, r->last_seq), p += 8;
  ak_put_u32(p, r->count), p += 4;
  ak_put_u64(p, r->seg_bytes), p += 8;
  ak_put_u64(p, r->idx_bytes), p += 8;
  ak_put_u64(p, (uint64_t)r->min_received_ms), p += 8;
  ak_put_u64(p, (uint64_t)r->max_received_ms), p += 8;
  memcpy(p, r->min_id, 16), p += 16;
  memcpy(p, r->max_id, 16), p += 16;
  ak_put_u64(p, (uint64_t)r->archived_at_ms), p += 8;
  ak_put_u16(p, (uint16_t)sl), p += 2;
  memcpy(p, r->seg_key, sl), p += sl;
  ak_put_u16(p, (uint16_t)il), p += 2;
  memcpy(p, r->idx_key, il), p += il;
  return (size_t)(p - out);
}

static int get_str(const uint8_t **p, const uint8_t *end, char *out) {
  if (end - *p < 2) return -1;
  size_t n = ak_get_u16(*p);
  *p += 2;
  if ((size_t)(end - *p) < n || n > AK_BLOB_KEY_MAX || n == 0) return -1;
  memcpy(out, *p, n);
  out[n] = 0;
  *p += n;
  return memchr(out, 0, n) ? -1 : 0;
}

int ak_cat_decode(const uint8_t *k, size_t kl, const uint8_t *v, size_t vl, ak_cat_row_t *r) {
  if (kl != AK_CAT_KEY_LEN || k[0] != AK_ARC_SEGMENT || vl < CAT_FIXED || v[0] != CAT_VERSION) return -1;
  const uint8_t *p = v + 1, *end = v + vl;
  r->first_seq = ak_get_u64(k + 1);
  r->last_seq = ak_get_u64(p), p += 8;
  r->count = ak_get_u32(p), p += 4;
  r->seg_bytes = ak_get_u64(p), p += 8;
  r->idx_bytes = ak_get_u64(p), p += 8;
  r->min_received_ms = (int64_t)ak_get_u64(p), p += 8;
  r->max_received_ms = (int64_t)ak_get_u64(p), p += 8;
  memcpy(r->min_id, p, 16), p += 16;
  memcpy(r->max_id, p, 16), p += 16;
  r->archived_at_ms = (int64_t)ak_get_u64(p), p += 8;
  if (get_str(&p, end, r->seg_key) != 0 || get_str(&p, end, r->idx_key) != 0 || p != end) return -1;
  if (r->last_seq < r->first_seq || r->count == 0) return -1;
  return 0;
}

void ak_cat_put(ak_batch_t *b, const ak_cat_row_t *r) {
  uint8_t k[AK_CAT_KEY_LEN], v[CAT_FIXED + 4 + 2 * AK_BLOB_KEY_MAX];
  ak_cat_key(k, r->first_seq);
  size_t n = ak_cat_encode(v, sizeof v, r);
  if (n) ak_batch_put(b, AK_CF_ARCHIVE, k, sizeof k, v, n);
}

typedef struct {
  ak_cat_fn fn;
  void *ctx;
  bool bad;
  int stop_after_one;
  ak_cat_row_t *one;
  bool got;
} scan_t;

static int scan_cb(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  scan_t *s = ctx;
  ak_cat_row_t row, *r = s->one ? s->one : &row;
  if (ak_cat_decode((const uint8_t *)k, kl, (const uint8_t *)v, vl, r) != 0) {
    s->bad = true;
    return 1;
  }
  s->got = true;
  if (s->stop_after_one) return 1;
  return s->fn(s->ctx, r);
}

int ak_cat_scan(ak_store_t *st, uint64_t from_seq, ak_cat_fn fn, void *ctx) {
  uint8_t k[AK_CAT_KEY_LEN];
  const char tag = AK_ARC_SEGMENT;
  scan_t s = {.fn = fn, .ctx = ctx};
  /* the row holding from_seq starts at or before it */
  ak_cat_row_t r;
  if (from_seq > 0 && ak_cat_find_seq(st, from_seq, &r) == 0) from_seq = r.first_seq;
  ak_cat_key(k, from_seq);
  if (ak_store_scan_from(st, AK_CF_ARCHIVE, &tag, 1, k, sizeof k, false, scan_cb, &s) != 0) return -1;
  return s.bad ? -1 : 0;
}

int ak_cat_find_seq(ak_store_t *st, uint64_t seq, ak_cat_row_t *r) {
  uint8_t k[AK_CAT_KEY_LEN];
  const char tag = AK_ARC_SEGMENT;
  ak_cat_key(k, seq);
  scan_t s = {.stop_after_one = 1, .one = r};
  if (ak_store_scan_from(st, AK_CF_ARCHIVE, &tag, 1, k, sizeof k, true, scan_cb, &s) != 0 || s.bad) return -1;
  if (!s.got || seq > r->last_seq) return 1;
  return 0;
}

int ak_cat_last(ak_store_t *st, ak_cat_row_t *r) {
  const char tag = AK_ARC_SEGMENT;
  scan_t s = {.stop_after_one = 1, .one = r};
  if (ak_store_scan_from(st, AK_CF_ARCHIVE, &tag, 1, NULL, 0, true, scan_cb, &s) != 0 || s.bad) return -1;
  return s.got ? 0 : 1;
}

int ak_archive_read_index(ak_blob_t *blob, const ak_cat_row_t *r, uint8_t **buf, ak_seg_index_t *ix, char *err,
                          size_t errlen) {
  size_t len = 0;
  *buf = NULL;
  /* the row knows the index's size: one ranged GET, no HEAD first */
  int rc = r->idx_bytes ? ak_blob_get_range(blob, r->idx_key, 0, (size_t)r->idx_bytes, buf, &len, err, errlen)
                        : ak_blob_get(blob, r->idx_key, buf, &len, err, errlen);
  if (rc != AK_BLOB_OK) return rc == AK_BLOB_NOT_FOUND ? AK_ARCHIVE_NOT_FOUND : AK_ARCHIVE_ERROR;
  if (ak_seg_index_parse(*buf, len, ix) != AK_SEG_OK || ix->first_seq != r->first_seq || ix->last_seq != r->last_seq) {
    snprintf(err, errlen, "archive index %s is damaged", r->idx_key);
    free(*buf);
    *buf = NULL;
    return AK_ARCHIVE_ERROR;
  }
  return AK_ARCHIVE_FOUND;
}

/* The hook of id in the segment of row r: FOUND with the record, NOT_FOUND when the
 * segment does not hold it (or its objects are gone), ERROR. */
static int fetch_in(ak_blob_t *blob, const ak_cat_row_t *r, const uint8_t id[16], uint8_t **rec, size_t *len,
                    uint64_t *seq, char *err, size_t errlen) {
  uint8_t *ibuf = NULL;
  ak_seg_index_t ix;
  int rc = ak_archive_read_index(blob, r, &ibuf, &ix, err, errlen);
  if (rc != AK_ARCHIVE_FOUND) return rc;
  ak_seg_entry_t e;
  bool found = ak_seg_index_find(&ix, id, &e);
  free(ibuf);
  if (!found) return AK_ARCHIVE_NOT_FOUND;
  uint8_t *fb = NULL;
  size_t got = 0;
  rc = ak_blob_get_range(blob, r->seg_key, e.offset, e.length, &fb, &got, err, errlen);
  if (rc != AK_BLOB_OK) {
    free(fb);
    return rc == AK_BLOB_NOT_FOUND ? AK_ARCHIVE_NOT_FOUND : AK_ARCHIVE_ERROR;
  }
  const uint8_t *payload;
  size_t plen, flen;
  if (got != e.length || ak_seg_frame(fb, got, 0, &payload, &plen, &flen) != AK_SEG_OK || flen != got ||
      plen < AK_ENV_ID_OFFSET + 16 || memcmp(payload + AK_ENV_ID_OFFSET, id, 16) != 0) {
    snprintf(err, errlen, "archive segment %s is damaged at offset %llu", r->seg_key, (unsigned long long)e.offset);
    free(fb);
    return AK_ARCHIVE_ERROR;
  }
  memmove(fb, payload, plen);
  *rec = fb;
  *len = plen;
  *seq = e.seq;
  return AK_ARCHIVE_FOUND;
}

typedef struct {
  ak_blob_t *blob;
  const uint8_t *id;
  uint64_t skip_first; /* a row already tried (UINT64_MAX: none) */
  uint8_t **rec;
  size_t *len;
  uint64_t *seq;
  char *err;
  size_t errlen;
  int rc;
} by_id_t;

static int by_id(void *ctx, const ak_cat_row_t *r) {
  by_id_t *b = ctx;
  if (r->first_seq == b->skip_first || memcmp(b->id, r->min_id, 16) < 0 || memcmp(b->id, r->max_id, 16) > 0)
    return 0;
  int rc = fetch_in(b->blob, r, b->id, b->rec, b->len, b->seq, b->err, b->errlen);
  if (rc == AK_ARCHIVE_NOT_FOUND) return 0;
  b->rc = rc;
  return 1;
}

static uint64_t meta_u64(ak_store_t *st, const char *key) {
  char *v = NULL;
  size_t vl = 0;
  uint64_t x = 0;
  if (ak_store_get(st, AK_CF_DEFAULT, key, strlen(key), &v, &vl) == 0 && vl == 8) x = ak_get_u64((uint8_t *)v);
  free(v);
  return x;
}

int ak_archive_fetch(ak_store_t *st, ak_blob_t *blob, const uint8_t id[16], int64_t retention_ms, int64_t now_ms,
                     uint8_t **rec, size_t *len, uint64_t *seq, char *err, size_t errlen) {
  *rec = NULL;
  *len = 0;
  by_id_t b = {.blob = blob, .id = id, .skip_first = UINT64_MAX, .rec = rec, .len = len, .seq = seq, .err = err,
               .errlen = errlen, .rc = AK_ARCHIVE_NOT_FOUND};
  /* a sealed id names its seq: one catalogue row to try */
  const uint8_t *key = ak_store_id_key(st);
  uint64_t sealed = key ? ak_uuid7_unseal(key, id) : 0;
  if (key) {
    ak_cat_row_t r;
    int rc = ak_cat_find_seq(st, sealed, &r);
    if (rc < 0) {
      snprintf(err, errlen, "cannot read the archive catalogue");
      return AK_ARCHIVE_ERROR;
    }
    if (rc == 0) {
      b.skip_first = r.first_seq;
      rc = fetch_in(blob, &r, id, rec, len, seq, err, errlen);
      if (rc != AK_ARCHIVE_NOT_FOUND) return rc;
    }
  }
  /* an id that does not carry its seq (stored before ids were sealed, released from the
   * pen): the rows whose id range holds it */
  if (ak_cat_scan(st, 0, by_id, &b) != 0) {
    snprintf(err, errlen, "cannot read the archive catalogue");
    return AK_ARCHIVE_ERROR;
  }
  if (b.rc != AK_ARCHIVE_NOT_FOUND) return b.rc;
  /* gone by retention: below the expiry mark, or received before the retention window */
  if (retention_ms > 0) {
    uint64_t expired = meta_u64(st, AK_KEY_ARCHIVE_EXPIRED);
    if ((key && sealed < expired) || ak_uuid7_ms(id) < now_ms - retention_ms) return AK_ARCHIVE_EXPIRED;
  }
  return AK_ARCHIVE_NOT_FOUND;
}
