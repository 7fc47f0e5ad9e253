/* libFuzzer harness for the archive segment codec (archive/segment.c): what a restore or
 * a lookup reads back from a blob store, where a damaged or forged object must be refused
 * whole, never half-read. Byte 0 (mod 4) picks the mode; the rest is the input:
 *  0. the bytes as a segment (walk, the frame at 0) and as an index (parse, find);
 *  1. the same after the harness rewrote every checksum it can find (each frame's crc
 *     while the frames chain, the index's trailing crc), so the checks behind the crc
 *     are reached;
 *  2. the bytes as key text (ak_seg_key_parse), and as the parts of a key to build;
 *  3. records built from the bytes through the writer and read back.
 * Properties:
 *  - nothing reads outside the input, an exact-size heap copy (ASan sees any overread);
 *  - a walk's frames chain from the magic to exactly the end, each one inside the buffer
 *    and the same as ak_seg_frame at its offset;
 *  - an index that parses has ids strictly increasing, seqs within [first, last], every
 *    frame inside seg_bytes and after the magic, find answers every entry, and no strict
 *    prefix of it parses;
 *  - a key that parses is rebuilt byte for byte by ak_seg_key from its parts (the day
 *    turned back into a ms of that day), and a key that builds parses to its parts;
 *  - what the writer accepts reads back byte for byte through walk, index and frame, and
 *    finish refuses exactly when nothing was added or two hooks share an id. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "archive/segment.h"
#include "core/envelope.h"
#include "store/crc32c.h"

#define CHECK(cond)                                                                         \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      fprintf(stderr, "fuzz_segment: invariant failed at line %d: %s\n", __LINE__, #cond);  \
      abort();                                                                              \
    }                                                                                       \
  } while (0)

static uint32_t get32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static void put32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}
static uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) << 32 | get32(p + 4); }
static uint32_t crc(const uint8_t *p, size_t n) { return ak_crc32c_extend(0, (const char *)p, n); }

static int inside(const void *p, size_t n, const uint8_t *base, size_t len) {
  const uint8_t *q = p;
  return q >= base && q <= base + len && n <= (size_t)(base + len - q);
}

typedef struct {
  const uint8_t *buf;
  size_t len;
  uint64_t next; /* where the next frame must start */
  int frames;
} walk_t;

static int on_frame(void *ctx, const uint8_t *payload, size_t plen, uint64_t off) {
  walk_t *w = ctx;
  CHECK(off == w->next);
  CHECK(payload == w->buf + off + AK_SEG_FRAME_HDR && inside(payload, plen, w->buf, w->len));
  const uint8_t *p;
  size_t n, fl;
  CHECK(ak_seg_frame(w->buf, w->len, (size_t)off, &p, &n, &fl) == AK_SEG_OK);
  CHECK(p == payload && n == plen && fl == AK_SEG_FRAME_HDR + plen);
  w->next = off + fl;
  w->frames++;
  return 0;
}

static void as_segment(const uint8_t *v, size_t size) {
  walk_t w = {v, size, AK_SEG_MAGIC_LEN, 0};
  if (ak_seg_walk(v, size, on_frame, &w) == AK_SEG_OK) {
    CHECK(w.next == size && w.frames > 0);
    CHECK(memcmp(v, AK_SEG_MAGIC, AK_SEG_MAGIC_LEN) == 0);
  } else {
    CHECK(w.frames == 0); /* refused before any frame was handed out */
  }
  const uint8_t *p;
  size_t n, fl;
  if (ak_seg_frame(v, size, 0, &p, &n, &fl) == AK_SEG_OK) CHECK(inside(p, n, v, size) && fl == n + 8 && fl <= size);
}

static void as_index(const uint8_t *v, size_t size) {
  ak_seg_index_t ix;
  if (ak_seg_index_parse(v, size, &ix) != AK_SEG_OK) return;
  CHECK(ix.count > 0 && ix.first_seq <= ix.last_seq);
  CHECK(size == AK_SEG_IDX_HDR + (size_t)ix.count * AK_SEG_ENTRY_LEN + 4);
  CHECK(inside(ix.entries, (size_t)ix.count * AK_SEG_ENTRY_LEN, v, size));
  ak_seg_entry_t prev, e, f;
  for (uint32_t i = 0; i < ix.count; i++) {
    ak_seg_index_entry(&ix, i, &e);
    if (i > 0) CHECK(memcmp(prev.id, e.id, 16) < 0);
    CHECK(e.seq >= ix.first_seq && e.seq <= ix.last_seq);
    CHECK(e.offset >= AK_SEG_MAGIC_LEN && e.length >= AK_SEG_FRAME_HDR);
    CHECK(e.offset <= ix.seg_bytes && e.length <= ix.seg_bytes - e.offset);
    CHECK(ak_seg_index_find(&ix, e.id, &f) && memcmp(&f, &e, sizeof e) == 0);
    prev = e;
  }
  for (size_t k = 1; k <= size; k++) {
    uint8_t *p = malloc(size - k ? size - k : 1);
    CHECK(p);
    memcpy(p, v, size - k);
    ak_seg_index_t px;
    CHECK(ak_seg_index_parse(p, size - k, &px) != AK_SEG_OK);
    free(p);
  }
}

/* Every crc the harness can place: frames while they chain, then the index's trailer. */
static void reseal(uint8_t *v, size_t size) {
  size_t off = AK_SEG_MAGIC_LEN;
  while (size >= off && size - off >= AK_SEG_FRAME_HDR) {
    uint32_t n = get32(v + off);
    if (n > size - off - AK_SEG_FRAME_HDR) break;
    put32(v + off + 4, crc(v + off + AK_SEG_FRAME_HDR, n));
    off += AK_SEG_FRAME_HDR + n;
  }
}

/* days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil),
 * written here, not taken from segment.c, so a wrong day there cannot agree with itself */
static int64_t days_from_civil(int64_t y, int m, int d) {
  y -= m <= 2;
  int64_t era = (y >= 0 ? y : y - 399) / 400;
  int64_t yoe = y - era * 400;
  int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

static void as_key(const uint8_t *data, size_t size) {
  char *key = malloc(size + 1);
  CHECK(key);
  memcpy(key, data, size);
  key[size] = '\0';
  char day[11], node[AK_SEG_NODE_MAX + 1];
  uint64_t first, last;
  bool is_idx;
  if (ak_seg_key_parse(key, day, node, &first, &last, &is_idx) == 0) {
    CHECK(strlen(day) == 10 && ak_seg_node_ok(node) && first <= last);
    int64_t y = (day[0] - '0') * 1000 + (day[1] - '0') * 100 + (day[2] - '0') * 10 + (day[3] - '0');
    int m = (day[5] - '0') * 10 + (day[6] - '0'), d = (day[8] - '0') * 10 + (day[9] - '0');
    /* any ms of the day: the key's length picks one */
    int64_t ms = days_from_civil(y, m, d) * 86400000 + (int64_t)((size * 7919u) % 86400000u);
    char again[AK_SEG_KEY_MAX];
    size_t n = ak_seg_key(again, sizeof again, ms, node, first, last, is_idx ? ".idx" : ".seg");
    size_t kl = strlen(key); /* a C string: the key ends at the first NUL of the input */
    CHECK(n == kl && memcmp(again, key, kl) == 0);
    char pre[32];
    size_t pn = ak_seg_day_prefix(pre, sizeof pre, ms);
    CHECK(pn == 17 && memcmp(pre, key, pn) == 0);
  }
  free(key);
  /* the other way: parts from the bytes, built, parsed back */
  if (size >= 25) {
    int64_t ms = (int64_t)get64(data);
    uint64_t f = get64(data + 8), l = get64(data + 16);
    static const char *const exts[3] = {".seg", ".idx", "_manifest.json"};
    const char *ext = exts[data[24] % 3];
    size_t nl = size - 25 < AK_SEG_NODE_MAX + 1 ? size - 25 : AK_SEG_NODE_MAX + 1;
    char nd[AK_SEG_NODE_MAX + 2];
    memcpy(nd, data + 25, nl);
    nd[nl] = '\0';
    char k[AK_SEG_KEY_MAX];
    size_t n = ak_seg_key(k, sizeof k, ms, nd, f, l, ext);
    if (n > 0) {
      CHECK(n == strlen(k) && ak_seg_node_ok(nd));
      char pre[32];
      size_t pn = ak_seg_day_prefix(pre, sizeof pre, ms);
      CHECK(pn == 17 && memcmp(pre, k, pn) == 0);
      if (data[24] % 3 == 2) {
        CHECK(f == 0 && l == 0 && ak_seg_key_parse(k, day, node, &first, &last, &is_idx) == -1);
      } else {
        CHECK(ak_seg_key_parse(k, day, node, &first, &last, &is_idx) == 0);
        CHECK(first == f && last == l && is_idx == (data[24] % 3 == 1) && strcmp(node, nd) == 0);
        CHECK(memcmp(day, pre + 6, 10) == 0);
      }
    }
  }
}

#define MAXREC 64

/* Records from the bytes: per record, body length, id byte, seq step, then the body. Ids
 * are one byte over a fixed tail, so duplicates come often. */
static void through_writer(const uint8_t *data, size_t size) {
  ak_seg_writer_t *w = ak_seg_writer_new();
  CHECK(w);
  uint8_t *recs[MAXREC];
  size_t lens[MAXREC];
  int nacc = 0;
  uint64_t seq = 0;
  int64_t minr = 0, maxr = 0;
  int dup = 0;
  size_t bytes = AK_SEG_MAGIC_LEN;
  size_t i = 0;
  while (nacc < MAXREC && size - i >= 3) {
    size_t bl = data[i];
    uint8_t idb = data[i + 1], step = data[i + 2];
    i += 3;
    if (bl > size - i) bl = size - i;
    ak_envelope_t e = {0};
    e.id[0] = idb;
    memset(e.id + 1, 0xA5, 15);
    e.seq = seq + step; /* a step of 0 repeats a seq: refused unless it is the first */
    e.received_at_ms = (int64_t)(idb - 128) * 3600000LL + 1796169600000LL;
    e.method = "POST";
    e.method_len = 4;
    e.body = data + i;
    e.body_len = bl;
    i += bl;
    size_t rl;
    uint8_t *rec = ak_envelope_encode(&e, &rl);
    CHECK(rec);
    int rc = ak_seg_writer_add(w, rec, rl);
    if (nacc > 0 && step == 0) {
      CHECK(rc == AK_SEG_MALFORMED);
      free(rec);
      continue;
    }
    CHECK(rc == AK_SEG_OK);
    for (int k = 0; k < nacc; k++)
      if (recs[k][2] == idb) dup = 1;
    if (nacc == 0 || e.received_at_ms < minr) minr = e.received_at_ms;
    if (nacc == 0 || e.received_at_ms > maxr) maxr = e.received_at_ms;
    seq = e.seq;
    bytes += AK_SEG_FRAME_HDR + rl;
    recs[nacc] = rec;
    lens[nacc++] = rl;
  }
  CHECK(ak_seg_writer_count(w) == (size_t)nacc && ak_seg_writer_bytes(w) == bytes);
  const uint8_t *seg, *idx;
  size_t seg_len, idx_len;
  int rc = ak_seg_writer_finish(w, &seg, &seg_len, &idx, &idx_len);
  if (nacc == 0 || dup) {
    CHECK(rc == AK_SEG_MALFORMED);
  } else {
    CHECK(rc == AK_SEG_OK && seg_len == bytes);
    CHECK(ak_seg_writer_min_received(w) == minr && ak_seg_writer_max_received(w) == maxr);
    CHECK(ak_seg_writer_last_seq(w) == seq);
    walk_t wk = {seg, seg_len, AK_SEG_MAGIC_LEN, 0};
    CHECK(ak_seg_walk(seg, seg_len, on_frame, &wk) == AK_SEG_OK && wk.frames == nacc);
    ak_seg_index_t ix;
    CHECK(ak_seg_index_parse(idx, idx_len, &ix) == AK_SEG_OK);
    CHECK(ix.count == (uint32_t)nacc && ix.seg_bytes == seg_len && ix.last_seq == seq);
    CHECK(ix.first_seq == ak_seg_writer_first_seq(w));
    for (int k = 0; k < nacc; k++) {
      ak_seg_entry_t e;
      CHECK(ak_seg_index_find(&ix, recs[k] + AK_ENV_ID_OFFSET, &e));
      const uint8_t *p;
      size_t n, fl;
      CHECK(ak_seg_frame(seg, seg_len, (size_t)e.offset, &p, &n, &fl) == AK_SEG_OK);
      CHECK(n == lens[k] && fl == e.length && memcmp(p, recs[k], n) == 0);
      CHECK(e.seq == get64(recs[k] + AK_ENV_SEQ_OFFSET));
    }
  }
  for (int k = 0; k < nacc; k++) free(recs[k]);
  ak_seg_writer_free(w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  int mode = data[0] % 4;
  data++;
  size--;
  uint8_t *v = malloc(size ? size : 1);
  if (!v) return 0;
  memcpy(v, data, size);
  switch (mode) {
  case 1:
    reseal(v, size);
    as_segment(v, size);
    memcpy(v, data, size);
    if (size >= 4) put32(v + size - 4, crc(v, size - 4));
    as_index(v, size);
    break;
  case 0:
    as_segment(v, size);
    as_index(v, size);
    break;
  case 2:
    as_key(v, size);
    break;
  default:
    through_writer(v, size);
    break;
  }
  free(v);
  return 0;
}
