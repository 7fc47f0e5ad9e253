/* Unit tests: the archive segment codec (archive/segment.h): real stored records through
 * the writer and back (walk, index lookup, one frame by its offset, a ranged read of one
 * frame), checksums, truncation at every length, indexes a writer would never produce,
 * and the key layout (build, parse, refusals, the UTC day boundary). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "archive/segment.h"
#include "core/envelope.h"
#include "store/crc32c.h"

#define NREC 5

typedef struct {
  uint8_t *rec[NREC];
  size_t len[NREC];
} recs_t;

/* Five records of different shapes (headers or none, empty body, a binary body, a v2 record
 * with a dedupe key), ids deliberately out of bytewise order, seqs 10, 11, 13, 17, 18. */
static void make_recs(recs_t *r) {
  static const uint64_t seqs[NREC] = {10, 11, 13, 17, 18};
  static const uint8_t first_byte[NREC] = {0x90, 0x10, 0xF0, 0x11, 0x50};
  static const uint8_t bin[] = {0, 1, 2, 0xFF, 0xFE, 0, '\n'};
  ak_header_t hs[2] = {{"X-Sig", 5, "abc", 3}, {"Content-Type", 12, "application/json", 16}};
  for (int i = 0; i < NREC; i++) {
    ak_envelope_t e = {0};
    e.id[0] = first_byte[i];
    for (int k = 1; k < 16; k++) e.id[k] = (uint8_t)(i * 7 + k);
    e.received_at_ms = 1796169600000LL + (int64_t)(i == 2 ? -5000 : i * 1000); /* 2026-12-02 */
    e.tenant = "acme";
    e.tenant_len = 4;
    e.source = "github";
    e.source_len = 6;
    e.method = "POST";
    e.method_len = 4;
    e.path = "/hooks/github";
    e.path_len = 13;
    e.content_type = "application/json";
    e.content_type_len = 16;
    if (i % 2 == 0) {
      e.headers = hs;
      e.nheaders = 2;
    }
    char body[64];
    int bl = snprintf(body, sizeof body, "{\"n\":%d}", i);
    if (i == 1) {
      e.body = NULL;
      e.body_len = 0;
    } else if (i == 3) {
      e.body = bin;
      e.body_len = sizeof bin;
    } else {
      e.body = (const uint8_t *)body;
      e.body_len = (size_t)bl;
    }
    if (i == 4) {
      e.dedupe_key = "evt_123";
      e.dedupe_key_len = 7;
    }
    r->rec[i] = ak_envelope_encode(&e, &r->len[i]);
    cr_assert_not_null(r->rec[i]);
    ak_envelope_set_seq(r->rec[i], seqs[i]);
  }
}

static void free_recs(recs_t *r) {
  for (int i = 0; i < NREC; i++) free(r->rec[i]);
}

static ak_seg_writer_t *write_all(const recs_t *r) {
  ak_seg_writer_t *w = ak_seg_writer_new();
  cr_assert_not_null(w);
  for (int i = 0; i < NREC; i++) cr_assert_eq(ak_seg_writer_add(w, r->rec[i], r->len[i]), AK_SEG_OK, "record %d", i);
  return w;
}

typedef struct {
  const recs_t *r;
  int seen;
  uint64_t off[NREC];
  int stop_after;
} walk_t;

static int on_frame(void *ctx, const uint8_t *payload, size_t plen, uint64_t off) {
  walk_t *wk = ctx;
  cr_assert_lt(wk->seen, NREC, "more frames than records");
  cr_assert_eq(plen, wk->r->len[wk->seen], "frame %d length", wk->seen);
  cr_assert(memcmp(payload, wk->r->rec[wk->seen], plen) == 0, "frame %d bytes", wk->seen);
  wk->off[wk->seen] = off;
  wk->seen++;
  return wk->stop_after && wk->seen == wk->stop_after;
}

static int count_frame(void *ctx, const uint8_t *payload, size_t plen, uint64_t off) {
  (void)payload, (void)plen, (void)off;
  (*(int *)ctx)++;
  return 0;
}

/* an exact-size heap copy, so a sanitizer build catches any read past n */
static uint8_t *dup(const uint8_t *p, size_t n) {
  uint8_t *q = malloc(n ? n : 1);
  cr_assert_not_null(q);
  if (n) memcpy(q, p, n);
  return q;
}

static void put32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}
static void put64(uint8_t *p, uint64_t v) {
  put32(p, (uint32_t)(v >> 32));
  put32(p + 4, (uint32_t)v);
}

/* what a writer with a bug would produce: a changed index with a valid crc */
static void reseal(uint8_t *idx, size_t n) { put32(idx + n - 4, ak_crc32c_extend(0, (const char *)idx, n - 4)); }

static int64_t utc_ms(int y, int mo, int d, int h, int mi, int s, int ms) {
  struct tm tm = {.tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h, .tm_min = mi, .tm_sec = s};
  return (int64_t)timegm(&tm) * 1000 + ms;
}

Test(segment, round_trip_walk_index_frame) {
  recs_t r;
  make_recs(&r);
  ak_seg_writer_t *w = write_all(&r);
  size_t total = AK_SEG_MAGIC_LEN;
  for (int i = 0; i < NREC; i++) total += AK_SEG_FRAME_HDR + r.len[i];
  cr_assert_eq(ak_seg_writer_count(w), NREC);
  cr_assert_eq(ak_seg_writer_bytes(w), total);
  cr_assert_eq(ak_seg_writer_first_seq(w), 10);
  cr_assert_eq(ak_seg_writer_last_seq(w), 18);
  cr_assert_eq(ak_seg_writer_min_received(w), 1796169600000LL - 5000);
  cr_assert_eq(ak_seg_writer_max_received(w), 1796169600000LL + 4000);
  uint8_t lo[16], hi[16];
  ak_seg_writer_id_range(w, lo, hi);
  cr_assert(lo[0] == 0x10 && lo[1] == 1 * 7 + 1, "smallest id is record 1's");
  cr_assert(hi[0] == 0xF0 && hi[1] == 2 * 7 + 1, "largest id is record 2's");

  const uint8_t *seg, *idx;
  size_t seg_len, idx_len;
  cr_assert_eq(ak_seg_writer_finish(w, &seg, &seg_len, &idx, &idx_len), AK_SEG_OK);
  cr_assert_eq(seg_len, total);
  cr_assert(memcmp(seg, AK_SEG_MAGIC, AK_SEG_MAGIC_LEN) == 0);
  cr_assert_eq(idx_len, AK_SEG_IDX_HDR + NREC * AK_SEG_ENTRY_LEN + 4);

  /* the walk hands back every record byte for byte, in seq order */
  walk_t wk = {.r = &r};
  cr_assert_eq(ak_seg_walk(seg, seg_len, on_frame, &wk), AK_SEG_OK);
  cr_assert_eq(wk.seen, NREC);
  cr_assert_eq(wk.off[0], AK_SEG_MAGIC_LEN);
  /* fn returning nonzero stops it */
  walk_t wk2 = {.r = &r, .stop_after = 2};
  cr_assert_eq(ak_seg_walk(seg, seg_len, on_frame, &wk2), AK_SEG_OK);
  cr_assert_eq(wk2.seen, 2);

  ak_seg_index_t ix;
  cr_assert_eq(ak_seg_index_parse(idx, idx_len, &ix), AK_SEG_OK);
  cr_assert_eq(ix.count, NREC);
  cr_assert_eq(ix.first_seq, 10);
  cr_assert_eq(ix.last_seq, 18);
  cr_assert_eq(ix.seg_bytes, seg_len);
  ak_seg_entry_t prev, e;
  for (uint32_t i = 0; i < ix.count; i++) {
    ak_seg_index_entry(&ix, i, &e);
    if (i > 0) cr_assert_lt(memcmp(prev.id, e.id, 16), 0, "entries sorted by id");
    prev = e;
  }
  for (int i = 0; i < NREC; i++) {
    ak_envelope_t env;
    cr_assert_eq(ak_envelope_decode(r.rec[i], r.len[i], &env), 0);
    cr_assert(ak_seg_index_find(&ix, env.id, &e), "record %d found", i);
    cr_assert(memcmp(e.id, env.id, 16) == 0);
    cr_assert_eq(e.seq, env.seq);
    cr_assert_eq(e.received_at_ms, env.received_at_ms);
    cr_assert_eq(e.offset, wk.off[i], "the index's offset is the frame's");
    cr_assert_eq(e.length, AK_SEG_FRAME_HDR + r.len[i]);
    ak_envelope_clear(&env);
    /* the frame at the index's offset in the whole segment */
    const uint8_t *pl;
    size_t pn, fl;
    cr_assert_eq(ak_seg_frame(seg, seg_len, (size_t)e.offset, &pl, &pn, &fl), AK_SEG_OK);
    cr_assert(pn == r.len[i] && fl == e.length && memcmp(pl, r.rec[i], pn) == 0);
    /* and in a ranged read of exactly that frame */
    uint8_t *one = dup(seg + e.offset, e.length);
    cr_assert_eq(ak_seg_frame(one, e.length, 0, &pl, &pn, &fl), AK_SEG_OK);
    cr_assert(pn == r.len[i] && fl == e.length && memcmp(pl, r.rec[i], pn) == 0);
    cr_assert(pl == one + AK_SEG_FRAME_HDR, "payload points into the buffer");
    free(one);
  }
  uint8_t absent[16] = {0x12};
  cr_assert_not(ak_seg_index_find(&ix, absent, &e));
  memset(absent, 0xFF, 16);
  cr_assert_not(ak_seg_index_find(&ix, absent, &e));
  memset(absent, 0, 16);
  cr_assert_not(ak_seg_index_find(&ix, absent, &e));

  /* reset keeps nothing of the first segment: the same records give the same bytes */
  uint8_t *seg1 = dup(seg, seg_len), *idx1 = dup(idx, idx_len);
  ak_seg_writer_reset(w);
  cr_assert_eq(ak_seg_writer_count(w), 0);
  cr_assert_eq(ak_seg_writer_bytes(w), AK_SEG_MAGIC_LEN);
  for (int i = 0; i < NREC; i++) cr_assert_eq(ak_seg_writer_add(w, r.rec[i], r.len[i]), AK_SEG_OK);
  cr_assert_eq(ak_seg_writer_finish(w, &seg, &seg_len, &idx, &idx_len), AK_SEG_OK);
  cr_assert(seg_len == total && memcmp(seg, seg1, seg_len) == 0);
  cr_assert(memcmp(idx, idx1, idx_len) == 0);
  free(seg1);
  free(idx1);
  ak_seg_writer_free(w);
  free_recs(&r);
}

Test(segment, writer_refusals) {
  recs_t r;
  make_recs(&r);
  ak_seg_writer_t *w = ak_seg_writer_new();
  const uint8_t *seg, *idx;
  size_t seg_len, idx_len;
  cr_assert_eq(ak_seg_writer_finish(w, &seg, &seg_len, &idx, &idx_len), AK_SEG_MALFORMED, "nothing added");
  /* a record that does not decode: cut short, or a byte too many */
  cr_assert_eq(ak_seg_writer_add(w, r.rec[0], r.len[0] - 1), AK_SEG_MALFORMED);
  uint8_t *longer = malloc(r.len[0] + 1);
  memcpy(longer, r.rec[0], r.len[0]);
  longer[r.len[0]] = 0;
  cr_assert_eq(ak_seg_writer_add(w, longer, r.len[0] + 1), AK_SEG_MALFORMED);
  free(longer);
  cr_assert_eq(ak_seg_writer_count(w), 0);
  cr_assert_eq(ak_seg_writer_bytes(w), AK_SEG_MAGIC_LEN, "a refused record adds no bytes");
  /* seqs must increase */
  cr_assert_eq(ak_seg_writer_add(w, r.rec[1], r.len[1]), AK_SEG_OK);
  cr_assert_eq(ak_seg_writer_add(w, r.rec[0], r.len[0]), AK_SEG_MALFORMED, "seq 10 after 11");
  cr_assert_eq(ak_seg_writer_add(w, r.rec[1], r.len[1]), AK_SEG_MALFORMED, "seq 11 again");
  cr_assert_eq(ak_seg_writer_count(w), 1);
  /* two hooks with one id: no index its own parser would refuse */
  uint8_t *twin = dup(r.rec[1], r.len[1]);
  ak_envelope_set_seq(twin, 12);
  cr_assert_eq(ak_seg_writer_add(w, twin, r.len[1]), AK_SEG_OK);
  cr_assert_eq(ak_seg_writer_finish(w, &seg, &seg_len, &idx, &idx_len), AK_SEG_MALFORMED);
  free(twin);
  ak_seg_writer_free(w);
  ak_seg_writer_free(NULL);
  free_recs(&r);
}

Test(segment, flipped_payload_byte_is_crc) {
  recs_t r;
  make_recs(&r);
  ak_seg_writer_t *w = write_all(&r);
  const uint8_t *seg, *idx;
  size_t seg_len, idx_len;
  cr_assert_eq(ak_seg_writer_finish(w, &seg, &seg_len, &idx, &idx_len), AK_SEG_OK);
  ak_seg_index_t ix;
  cr_assert_eq(ak_seg_index_parse(idx, idx_len, &ix), AK_SEG_OK);
  ak_envelope_t env;
  ak_seg_entry_t e;
  cr_assert_eq(ak_envelope_decode(r.rec[3], r.len[3], &env), 0);
  cr_assert(ak_seg_index_find(&ix, env.id, &e));
  ak_envelope_clear(&env);
  uint8_t *bad = dup(seg, seg_len);
  bad[e.offset + AK_SEG_FRAME_HDR + 20] ^= 0x01; /* inside record 3's id */
  int n = 0;
  cr_assert_eq(ak_seg_walk(bad, seg_len, count_frame, &n), AK_SEG_CRC);
  cr_assert_eq(n, 0, "a damaged segment is refused before fn sees any frame");
  const uint8_t *pl;
  size_t pn, fl;
  cr_assert_eq(ak_seg_frame(bad, seg_len, (size_t)e.offset, &pl, &pn, &fl), AK_SEG_CRC);
  /* the frames before it are intact */
  ak_seg_index_entry(&ix, 0, &e);
  cr_assert_eq(ak_seg_walk(seg, seg_len, count_frame, &n), AK_SEG_OK);
  cr_assert_eq(n, NREC);
  /* a flipped crc byte is the same answer */
  memcpy(bad, seg, seg_len);
  bad[AK_SEG_MAGIC_LEN + 4] ^= 0x80;
  cr_assert_eq(ak_seg_walk(bad, seg_len, count_frame, &n), AK_SEG_CRC);
  /* a flipped magic is not this format */
  memcpy(bad, seg, seg_len);
  bad[7] ^= 0x03;
  cr_assert_eq(ak_seg_walk(bad, seg_len, count_frame, &n), AK_SEG_MALFORMED);
  free(bad);
  /* any flipped bit of an index past its magic and count: its crc */
  uint8_t *bi = dup(idx, idx_len);
  for (size_t i = AK_SEG_IDX_HDR; i < idx_len; i++) {
    bi[i] ^= 0x04;
    cr_assert_eq(ak_seg_index_parse(bi, idx_len, &ix), AK_SEG_CRC, "byte %zu", i);
    bi[i] ^= 0x04;
  }
  bi[AK_SEG_MAGIC_LEN + 1] ^= 0x04; /* first_seq */
  cr_assert_eq(ak_seg_index_parse(bi, idx_len, &ix), AK_SEG_CRC);
  cr_assert_eq(ix.count, 0, "nothing handed out on a refusal");
  free(bi);
  ak_seg_writer_free(w);
  free_recs(&r);
}

Test(segment, truncation_at_every_length) {
  recs_t r;
  make_recs(&r);
  ak_seg_writer_t *w = ak_seg_writer_new();
  for (int i = 0; i < 2; i++) cr_assert_eq(ak_seg_writer_add(w, r.rec[i], r.len[i]), AK_SEG_OK);
  const uint8_t *seg, *idx;
  size_t seg_len, idx_len;
  cr_assert_eq(ak_seg_writer_finish(w, &seg, &seg_len, &idx, &idx_len), AK_SEG_OK);
  size_t boundary = AK_SEG_MAGIC_LEN + AK_SEG_FRAME_HDR + r.len[0];
  for (size_t k = 0; k < seg_len; k++) {
    uint8_t *p = dup(seg, k);
    int n = 0;
    int rc = ak_seg_walk(p, k, count_frame, &n);
    if (k == boundary) {
      /* no trailer: a cut between frames is a shorter segment, told apart by seg_bytes */
      cr_assert_eq(rc, AK_SEG_OK);
      cr_assert_eq(n, 1);
    } else {
      cr_assert_neq(rc, AK_SEG_OK, "segment cut to %zu of %zu bytes", k, seg_len);
      cr_assert_eq(n, 0);
    }
    free(p);
  }
  /* one frame read by range, cut short */
  size_t fl0 = AK_SEG_FRAME_HDR + r.len[0];
  for (size_t k = 0; k < fl0; k++) {
    uint8_t *p = dup(seg + AK_SEG_MAGIC_LEN, k);
    const uint8_t *pl;
    size_t pn, fl;
    cr_assert_eq(ak_seg_frame(p, k, 0, &pl, &pn, &fl), AK_SEG_MALFORMED, "frame cut to %zu", k);
    free(p);
  }
  /* an offset past the end, or near SIZE_MAX */
  const uint8_t *pl;
  size_t pn, fl;
  cr_assert_eq(ak_seg_frame(seg, seg_len, seg_len + 1, &pl, &pn, &fl), AK_SEG_MALFORMED);
  cr_assert_eq(ak_seg_frame(seg, seg_len, SIZE_MAX, &pl, &pn, &fl), AK_SEG_MALFORMED);
  cr_assert_eq(ak_seg_frame(seg, seg_len, seg_len - 4, &pl, &pn, &fl), AK_SEG_MALFORMED);
  for (size_t k = 0; k < idx_len; k++) {
    uint8_t *p = dup(idx, k);
    ak_seg_index_t ix;
    cr_assert_neq(ak_seg_index_parse(p, k, &ix), AK_SEG_OK, "index cut to %zu of %zu bytes", k, idx_len);
    free(p);
  }
  /* and one byte too many */
  uint8_t *p = malloc(idx_len + 1);
  memcpy(p, idx, idx_len);
  p[idx_len] = 0;
  ak_seg_index_t ix;
  cr_assert_eq(ak_seg_index_parse(p, idx_len + 1, &ix), AK_SEG_MALFORMED);
  free(p);
  ak_seg_writer_free(w);
  free_recs(&r);
}

Test(segment, index_a_writer_never_makes_is_refused) {
  recs_t r;
  make_recs(&r);
  ak_seg_writer_t *w = write_all(&r);
  const uint8_t *seg, *idx;
  size_t seg_len, idx_len;
  cr_assert_eq(ak_seg_writer_finish(w, &seg, &seg_len, &idx, &idx_len), AK_SEG_OK);
  uint8_t *b = dup(idx, idx_len);
  uint8_t *e0 = b + AK_SEG_IDX_HDR, *e1 = e0 + AK_SEG_ENTRY_LEN;
  ak_seg_index_t ix;
  /* resealing an unchanged index parses: what follows tests the change, not the reseal */
  reseal(b, idx_len);
  cr_assert_eq(ak_seg_index_parse(b, idx_len, &ix), AK_SEG_OK);

  /* entries 0 and 1 swapped: ids not increasing */
  uint8_t tmp[AK_SEG_ENTRY_LEN];
  memcpy(tmp, e0, AK_SEG_ENTRY_LEN);
  memcpy(e0, e1, AK_SEG_ENTRY_LEN);
  memcpy(e1, tmp, AK_SEG_ENTRY_LEN);
  reseal(b, idx_len);
  cr_assert_eq(ak_seg_index_parse(b, idx_len, &ix), AK_SEG_MALFORMED, "unsorted ids");
  memcpy(b, idx, idx_len);
  /* two equal ids */
  memcpy(e1, e0, 16);
  reseal(b, idx_len);
  cr_assert_eq(ak_seg_index_parse(b, idx_len, &ix), AK_SEG_MALFORMED, "equal ids");
  memcpy(b, idx, idx_len);
  /* a seq outside [first, last] */
  put64(e0 + 16, 9);
  reseal(b, idx_len);
  cr_assert_eq(ak_seg_index_parse(b, idx_len, &ix), AK_SEG_MALFORMED, "seq below first");
  put64(e0 + 16, 19);
  reseal(b, idx_len);
  cr_assert_eq(ak_seg_index_parse(b, idx_len, &ix), AK_SEG_MALFORMED, "seq above last");
  memcpy(b, idx, idx_len);
  /* first > last */
  put64(b + AK_SEG_MAGIC_LEN, 19);
  reseal(b, idx_len);
  cr_assert_eq(ak_seg_index_parse(b, idx_len, &ix), AK_SEG_MALFORMED, "first > last");
  memcpy(b, idx, idx_len);
  /* frames outside the segment: past its end (with an offset that would wrap), inside the
   * magic, shorter than a frame header */
  put64(e0 + 24, seg_len - 4);
  reseal(b, idx_len);
  cr_assert_eq(ak_seg_index_parse(b, idx_len, &ix), AK_SEG_MALFORMED, "frame past the end");
  put64(e0 + 24, UINT64_MAX - 2);
  reseal(b, idx_len);
  cr_assert_eq(ak_seg_index_parse(b, idx_len, &ix), AK_SEG_MALFORMED, "offset + length wraps");
  put64(e0 + 24, 0);
  reseal(b, idx_len);
  cr_assert_eq(ak_seg_index_parse(b, idx_len, &ix), AK_SEG_MALFORMED, "frame over the magic");
  memcpy(b, idx, idx_len);
  put32(e0 + 32, 7);
  reseal(b, idx_len);
  cr_assert_eq(ak_seg_index_parse(b, idx_len, &ix), AK_SEG_MALFORMED, "frame shorter than its header");
  memcpy(b, idx, idx_len);
  put64(b + AK_SEG_MAGIC_LEN + 20, seg_len - 1); /* the segment size, one byte short */
  reseal(b, idx_len);
  cr_assert_eq(ak_seg_index_parse(b, idx_len, &ix), AK_SEG_MALFORMED, "last frame past seg_bytes");
  memcpy(b, idx, idx_len);
  /* a count that does not fit the object: one more, one less, UINT32_MAX */
  put32(b + AK_SEG_MAGIC_LEN + 16, NREC + 1);
  reseal(b, idx_len);
  cr_assert_eq(ak_seg_index_parse(b, idx_len, &ix), AK_SEG_MALFORMED, "count + 1");
  put32(b + AK_SEG_MAGIC_LEN + 16, NREC - 1);
  reseal(b, idx_len);
  cr_assert_eq(ak_seg_index_parse(b, idx_len, &ix), AK_SEG_MALFORMED, "count - 1");
  put32(b + AK_SEG_MAGIC_LEN + 16, UINT32_MAX);
  reseal(b, idx_len);
  cr_assert_eq(ak_seg_index_parse(b, idx_len, &ix), AK_SEG_MALFORMED, "count UINT32_MAX");
  /* an index of no entries */
  uint8_t empty[AK_SEG_IDX_HDR + 4];
  memcpy(empty, idx, AK_SEG_IDX_HDR);
  put32(empty + AK_SEG_MAGIC_LEN + 16, 0);
  reseal(empty, sizeof empty);
  cr_assert_eq(ak_seg_index_parse(empty, sizeof empty, &ix), AK_SEG_MALFORMED, "count 0");
  /* the segment's magic is not an index's */
  memcpy(b, idx, idx_len);
  memcpy(b, AK_SEG_MAGIC, AK_SEG_MAGIC_LEN);
  reseal(b, idx_len);
  cr_assert_eq(ak_seg_index_parse(b, idx_len, &ix), AK_SEG_MALFORMED, "segment magic");
  free(b);
  ak_seg_writer_free(w);
  free_recs(&r);
}

Test(segment, keys_round_trip) {
  char k[AK_SEG_KEY_MAX];
  int64_t t = utc_ms(2026, 12, 1, 12, 30, 0, 0);
  size_t n = ak_seg_key(k, sizeof k, t, "node-1.a_b", 1, 18446744073709551615ULL, ".seg");
  cr_assert_str_eq(k, "v1/dt=2026-12-01/node-1.a_b/seg-00000000000000000001-18446744073709551615.seg");
  cr_assert_eq(n, strlen(k));
  char day[11], node[AK_SEG_NODE_MAX + 1];
  uint64_t f = 0, l = 0;
  bool is_idx = true;
  cr_assert_eq(ak_seg_key_parse(k, day, node, &f, &l, &is_idx), 0);
  cr_assert_str_eq(day, "2026-12-01");
  cr_assert_str_eq(node, "node-1.a_b");
  cr_assert(f == 1 && l == UINT64_MAX && !is_idx);

  char node64[65];
  memset(node64, 'n', 64);
  node64[64] = '\0';
  n = ak_seg_key(k, sizeof k, t, node64, 42, 42, ".idx");
  cr_assert_gt(n, 0, "the longest node fits AK_SEG_KEY_MAX");
  cr_assert_eq(ak_seg_key_parse(k, day, node, &f, &l, &is_idx), 0);
  cr_assert(f == 42 && l == 42 && is_idx);
  cr_assert_str_eq(node, node64);
  char again[AK_SEG_KEY_MAX];
  cr_assert_eq(ak_seg_key(again, sizeof again, t, node, f, l, ".idx"), n);
  cr_assert_str_eq(again, k);

  n = ak_seg_key(k, sizeof k, t, "n1", 0, 0, "_manifest.json");
  cr_assert_str_eq(k, "v1/dt=2026-12-01/n1/_manifest.json");
  cr_assert_eq(ak_seg_key_parse(k, day, node, &f, &l, &is_idx), -1, "a manifest is not a segment key");
  n = ak_seg_day_prefix(k, sizeof k, t);
  cr_assert_str_eq(k, "v1/dt=2026-12-01/");
  cr_assert_eq(n, 17);

  /* what does not fit is 0, never a cut key */
  cr_assert_eq(ak_seg_key(k, 30, t, "n1", 1, 2, ".seg"), 0);
  cr_assert_eq(ak_seg_day_prefix(k, 17, t), 0);
  cr_assert_eq(ak_seg_day_prefix(k, 18, t), 17);
  /* what parse would refuse is never built */
  cr_assert_eq(ak_seg_key(k, sizeof k, t, "n1", 3, 2, ".seg"), 0, "first > last");
  cr_assert_eq(ak_seg_key(k, sizeof k, t, "n1", 1, 2, ".SEG"), 0, "unknown ext");
  cr_assert_eq(ak_seg_key(k, sizeof k, t, "n1", 1, 2, "_manifest.json"), 0, "manifest with seqs");
  cr_assert_eq(ak_seg_key(k, sizeof k, t, "..", 1, 2, ".seg"), 0);
  cr_assert_eq(ak_seg_key(k, sizeof k, t, "a/b", 1, 2, ".seg"), 0);
  cr_assert_eq(ak_seg_key(k, sizeof k, utc_ms(9999, 12, 31, 23, 59, 59, 999) + 1, "n1", 1, 2, ".seg"), 0,
               "year 10000 has no 4-digit spelling");
}

Test(segment, node_names) {
  char node65[66];
  memset(node65, 'a', 65);
  node65[65] = '\0';
  cr_assert(ak_seg_node_ok("n"));
  cr_assert(ak_seg_node_ok("Node_1.prod-eu"));
  cr_assert(ak_seg_node_ok("..."));
  cr_assert(ak_seg_node_ok(node65 + 1));
  cr_assert_not(ak_seg_node_ok(node65));
  cr_assert_not(ak_seg_node_ok(""));
  cr_assert_not(ak_seg_node_ok("."));
  cr_assert_not(ak_seg_node_ok(".."));
  cr_assert_not(ak_seg_node_ok("a/b"));
  cr_assert_not(ak_seg_node_ok("a b"));
  cr_assert_not(ak_seg_node_ok("n\xc3\xb6"));
  cr_assert_not(ak_seg_node_ok("a:b"));
}

Test(segment, key_parse_refusals) {
  static const char *const bad[] = {
      "",
      "v1/dt=2026-12-01/n1/seg-00000000000000000001-00000000000000000002.se",
      "v1/dt=2026-12-01/n1/seg-00000000000000000001-00000000000000000002.seg/",
      "v1/dt=2026-12-01/n1/seg-00000000000000000001-00000000000000000002.segx",
      "v1/dt=2026-12-01/n1/seg-00000000000000000001-00000000000000000002.seg ",
      "v1/dt=2026-12-01/n1/seg-00000000000000000001-00000000000000000002.SEG",
      "v1/dt=2026-12-01/n1/seg-00000000000000000001-00000000000000000002.json",
      "v1/dt=2026-12-01/n1/seg-0000000000000000001-00000000000000000002.seg",      /* 19 digits */
      "v1/dt=2026-12-01/n1/seg-00000000000000000001-0000000000000000002.seg",      /* 19 digits */
      "v1/dt=2026-12-01/n1/seg-000000000000000000001-00000000000000000002.seg",    /* 21 digits */
      "v1/dt=2026-12-01/n1/seg-00000000000000000003-00000000000000000002.seg",     /* first > last */
      "v1/dt=2026-12-01/n1/seg-18446744073709551616-18446744073709551617.seg",     /* > u64 */
      "v1/dt=2026-12-01/n1/seg-99999999999999999999-99999999999999999999.seg",     /* > u64 */
      "v1/dt=2026-12-01/n1/seg-+0000000000000000001-00000000000000000002.seg",
      "v1/dt=2026-12-01/n1/seg- 0000000000000000001-00000000000000000002.seg",
      "v1/dt=2026-12-01/n1/seg-00000000000000000001_00000000000000000002.seg",
      "v1/dt=2026-12-01/n1/Seg-00000000000000000001-00000000000000000002.seg",
      "v1/dt=2026-12-01/../seg-00000000000000000001-00000000000000000002.seg",     /* ".." */
      "v1/dt=2026-12-01/./seg-00000000000000000001-00000000000000000002.seg",
      "v1/dt=2026-12-01//seg-00000000000000000001-00000000000000000002.seg",       /* empty node */
      "v1/dt=2026-12-01/a b/seg-00000000000000000001-00000000000000000002.seg",
      "v1/dt=2026-12-01/n1/x/seg-00000000000000000001-00000000000000000002.seg",
      "v1/dt=2026-12-01/seg-00000000000000000001-00000000000000000002.seg",         /* no node */
      "v1/dt=2026-02-30/n1/seg-00000000000000000001-00000000000000000002.seg",
      "v1/dt=2025-02-29/n1/seg-00000000000000000001-00000000000000000002.seg",
      "v1/dt=2100-02-29/n1/seg-00000000000000000001-00000000000000000002.seg",
      "v1/dt=2026-13-01/n1/seg-00000000000000000001-00000000000000000002.seg",
      "v1/dt=2026-00-01/n1/seg-00000000000000000001-00000000000000000002.seg",
      "v1/dt=2026-12-00/n1/seg-00000000000000000001-00000000000000000002.seg",
      "v1/dt=2026-12-32/n1/seg-00000000000000000001-00000000000000000002.seg",
      "v1/dt=2026-1-01/n1/seg-00000000000000000001-00000000000000000002.seg",
      "v1/dt=2026-12-1/n1/seg-00000000000000000001-00000000000000000002.seg",
      "v1/dt=2026/12/01/n1/seg-00000000000000000001-00000000000000000002.seg",
      "v1/dt=2026-12-01",
      "v1/dt=2026-12",
      "v2/dt=2026-12-01/n1/seg-00000000000000000001-00000000000000000002.seg",
      "/v1/dt=2026-12-01/n1/seg-00000000000000000001-00000000000000000002.seg",
      "archive/v1/dt=2026-12-01/n1/seg-00000000000000000001-00000000000000000002.seg",
      "v1/dt=2026-12-01/n1/_manifest.json",
  };
  char day[11], node[AK_SEG_NODE_MAX + 1];
  uint64_t f, l;
  bool is_idx;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    cr_assert_eq(ak_seg_key_parse(bad[i], day, node, &f, &l, &is_idx), -1, "accepted: %s", bad[i]);
  char k[200];
  char node65[66];
  memset(node65, 'a', 65);
  node65[65] = '\0';
  snprintf(k, sizeof k, "v1/dt=2026-12-01/%s/seg-00000000000000000001-00000000000000000002.seg", node65);
  cr_assert_eq(ak_seg_key_parse(k, day, node, &f, &l, &is_idx), -1, "65-byte node");
  /* the controls: one byte away from a refusal, each parses */
  cr_assert_eq(ak_seg_key_parse("v1/dt=2024-02-29/n1/seg-00000000000000000002-00000000000000000002.idx", day, node,
                                &f, &l, &is_idx),
               0, "leap day, first == last");
  cr_assert_eq(ak_seg_key_parse("v1/dt=2000-02-29/.../seg-00000000000000000000-18446744073709551615.seg", day, node,
                                &f, &l, &is_idx),
               0);
  cr_assert(f == 0 && l == UINT64_MAX && !is_idx);
  cr_assert_str_eq(node, "...");
}

Test(segment, utc_day_boundary) {
  char k[AK_SEG_KEY_MAX];
  int64_t midnight = utc_ms(2026, 12, 2, 0, 0, 0, 0);
  cr_assert_eq(midnight, 1796169600000LL);
  ak_seg_day_prefix(k, sizeof k, midnight - 1); /* 23:59:59.999 */
  cr_assert_str_eq(k, "v1/dt=2026-12-01/");
  ak_seg_day_prefix(k, sizeof k, midnight);
  cr_assert_str_eq(k, "v1/dt=2026-12-02/");
  ak_seg_key(k, sizeof k, midnight - 1, "n1", 5, 6, ".seg");
  cr_assert_str_eq(k, "v1/dt=2026-12-01/n1/seg-00000000000000000005-00000000000000000006.seg");
  ak_seg_key(k, sizeof k, midnight, "n1", 5, 6, ".seg");
  cr_assert_str_eq(k, "v1/dt=2026-12-02/n1/seg-00000000000000000005-00000000000000000006.seg");
  ak_seg_key(k, sizeof k, utc_ms(2026, 12, 2, 23, 59, 59, 999), "n1", 5, 6, ".seg");
  cr_assert_str_eq(k, "v1/dt=2026-12-02/n1/seg-00000000000000000005-00000000000000000006.seg");
  /* before the epoch the day is floored, not rounded toward zero */
  ak_seg_day_prefix(k, sizeof k, -1);
  cr_assert_str_eq(k, "v1/dt=1969-12-31/");
  ak_seg_day_prefix(k, sizeof k, 0);
  cr_assert_str_eq(k, "v1/dt=1970-01-01/");
  ak_seg_day_prefix(k, sizeof k, utc_ms(2024, 2, 29, 23, 59, 59, 999));
  cr_assert_str_eq(k, "v1/dt=2024-02-29/");
  ak_seg_day_prefix(k, sizeof k, utc_ms(2024, 2, 29, 23, 59, 59, 999) + 1);
  cr_assert_str_eq(k, "v1/dt=2024-03-01/");
}
