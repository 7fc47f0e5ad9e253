/* Archive segment codec (archive/segment.h): the .seg and .idx bytes and their keys. Owns
 * the byte format only: never touches the store or a blob store, never keeps state between
 * calls outside the writer it is handed. Every decoder checks a length against what is left
 * of the buffer before using it, in size_t arithmetic that cannot wrap (remaining space is
 * compared, never off + len), and refuses a damaged object whole instead of half-reading it. */
#include "archive/segment.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "core/envelope.h"
#include "store/crc32c.h"

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
static uint32_t get32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) << 32 | get32(p + 4); }

static uint32_t crc32c(const uint8_t *p, size_t n) { return ak_crc32c_extend(0, (const char *)p, n); }

/* ------------------------------------------------------------------ encoding ---- */

struct ak_seg_writer {
  uint8_t *seg; /* the magic, then the frames so far */
  size_t seg_len, seg_cap;
  ak_seg_entry_t *ents; /* one per hook, in seq order until finish sorts them by id */
  size_t n, ents_cap;
  uint8_t *idx; /* built by finish */
  size_t idx_len, idx_cap;
  uint64_t first_seq, last_seq;
  int64_t min_recv, max_recv;
  uint8_t min_id[16], max_id[16];
};

/* Grows *buf to hold need bytes: doubling, so adding n hooks costs O(n) copies. */
static int grow(void **buf, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : 64;
  while (c < need) {
    if (c > SIZE_MAX / 2) return AK_SEG_NOMEM;
    c *= 2;
  }
  if (c > SIZE_MAX / elem) return AK_SEG_NOMEM;
  void *p = realloc(*buf, c * elem);
  if (!p) return AK_SEG_NOMEM;
  *buf = p;
  *cap = c;
  return 0;
}

ak_seg_writer_t *ak_seg_writer_new(void) {
  ak_seg_writer_t *w = calloc(1, sizeof *w);
  if (!w) return NULL;
  if (grow((void **)&w->seg, &w->seg_cap, AK_SEG_MAGIC_LEN, 1) != 0) {
    free(w);
    return NULL;
  }
  ak_seg_writer_reset(w);
  return w;
}

int ak_seg_writer_add(ak_seg_writer_t *w, const uint8_t *rec, size_t len) {
  /* the whole record must decode: an archive keeps only what the node could read back */
  ak_envelope_t env;
  if (ak_envelope_decode(rec, len, &env) != 0) return AK_SEG_MALFORMED;
  ak_envelope_clear(&env);
  if (w->n > 0 && env.seq <= w->last_seq) return AK_SEG_MALFORMED;
  /* the index holds a frame's length in a u32 and the count in a u32 */
  if (len > UINT32_MAX - AK_SEG_FRAME_HDR || w->n >= UINT32_MAX) return AK_SEG_MALFORMED;
  if (w->seg_len > SIZE_MAX - AK_SEG_FRAME_HDR - len) return AK_SEG_NOMEM;
  size_t need = w->seg_len + AK_SEG_FRAME_HDR + len;
  if (grow((void **)&w->seg, &w->seg_cap, need, 1) != 0 ||
      grow((void **)&w->ents, &w->ents_cap, w->n + 1, sizeof *w->ents) != 0)
    return AK_SEG_NOMEM;
  uint8_t *f = w->seg + w->seg_len;
  put32(f, (uint32_t)len);
  put32(f + 4, crc32c(rec, len));
  memcpy(f + AK_SEG_FRAME_HDR, rec, len);
  ak_seg_entry_t *e = &w->ents[w->n];
  memcpy(e->id, env.id, 16);
  e->seq = env.seq;
  e->offset = w->seg_len;
  e->length = (uint32_t)(AK_SEG_FRAME_HDR + len);
  e->received_at_ms = env.received_at_ms;
  w->seg_len = need;
  if (w->n == 0) {
    w->first_seq = env.seq;
    w->min_recv = w->max_recv = env.received_at_ms;
    memcpy(w->min_id, env.id, 16);
    memcpy(w->max_id, env.id, 16);
  } else {
    if (env.received_at_ms < w->min_recv) w->min_recv = env.received_at_ms;
    if (env.received_at_ms > w->max_recv) w->max_recv = env.received_at_ms;
    if (memcmp(env.id, w->min_id, 16) < 0) memcpy(w->min_id, env.id, 16);
    if (memcmp(env.id, w->max_id, 16) > 0) memcpy(w->max_id, env.id, 16);
  }
  w->last_seq = env.seq;
  w->n++;
  return AK_SEG_OK;
}

size_t ak_seg_writer_count(const ak_seg_writer_t *w) { return w->n; }
size_t ak_seg_writer_bytes(const ak_seg_writer_t *w) { return w->seg_len; }
uint64_t ak_seg_writer_first_seq(const ak_seg_writer_t *w) { return w->first_seq; }
uint64_t ak_seg_writer_last_seq(const ak_seg_writer_t *w) { return w->last_seq; }
int64_t ak_seg_writer_min_received(const ak_seg_writer_t *w) { return w->min_recv; }
int64_t ak_seg_writer_max_received(const ak_seg_writer_t *w) { return w->max_recv; }

void ak_seg_writer_id_range(const ak_seg_writer_t *w, uint8_t min_id[16], uint8_t max_id[16]) {
  memcpy(min_id, w->min_id, 16);
  memcpy(max_id, w->max_id, 16);
}

static int by_id(const void *a, const void *b) {
  return memcmp(((const ak_seg_entry_t *)a)->id, ((const ak_seg_entry_t *)b)->id, 16);
}

int ak_seg_writer_finish(ak_seg_writer_t *w, const uint8_t **seg, size_t *seg_len, const uint8_t **idx,
                         size_t *idx_len) {
  if (w->n == 0) return AK_SEG_MALFORMED;
  /* the order of frames in the segment stays seq order; only the index is by id */
  qsort(w->ents, w->n, sizeof *w->ents, by_id);
  /* two hooks with one id would give an index its own parser refuses (and a lookup that
   * finds one of them at random): refuse it here, where the caller can still see why */
  for (size_t i = 1; i < w->n; i++)
    if (memcmp(w->ents[i - 1].id, w->ents[i].id, 16) == 0) return AK_SEG_MALFORMED;
  /* n < UINT32_MAX (add refuses more), so this cannot wrap */
  size_t need = AK_SEG_IDX_HDR + w->n * (size_t)AK_SEG_ENTRY_LEN + 4;
  if (grow((void **)&w->idx, &w->idx_cap, need, 1) != 0) return AK_SEG_NOMEM;
  uint8_t *p = w->idx;
  memcpy(p, AK_SEG_IDX_MAGIC, AK_SEG_MAGIC_LEN);
  p += AK_SEG_MAGIC_LEN;
  put64(p, w->first_seq);
  put64(p + 8, w->last_seq);
  put32(p + 16, (uint32_t)w->n);
  put64(p + 20, (uint64_t)w->seg_len);
  p += 28;
  for (size_t i = 0; i < w->n; i++) {
    const ak_seg_entry_t *e = &w->ents[i];
    memcpy(p, e->id, 16);
    put64(p + 16, e->seq);
    put64(p + 24, e->offset);
    put32(p + 32, e->length);
    put64(p + 36, (uint64_t)e->received_at_ms);
    p += AK_SEG_ENTRY_LEN;
  }
  put32(p, crc32c(w->idx, (size_t)(p - w->idx)));
  w->idx_len = need;
  *seg = w->seg;
  *seg_len = w->seg_len;
  *idx = w->idx;
  *idx_len = w->idx_len;
  return AK_SEG_OK;
}

void ak_seg_writer_reset(ak_seg_writer_t *w) {
  memcpy(w->seg, AK_SEG_MAGIC, AK_SEG_MAGIC_LEN);
  w->seg_len = AK_SEG_MAGIC_LEN;
  w->n = 0;
  w->idx_len = 0;
  w->first_seq = w->last_seq = 0;
  w->min_recv = w->max_recv = 0;
  memset(w->min_id, 0, 16);
  memset(w->max_id, 0, 16);
}

void ak_seg_writer_free(ak_seg_writer_t *w) {
  if (!w) return;
  free(w->seg);
  free(w->ents);
  free(w->idx);
  free(w);
}

/* ------------------------------------------------------------------ decoding ---- */

int ak_seg_frame(const uint8_t *buf, size_t len, size_t off, const uint8_t **payload, size_t *plen,
                 size_t *frame_len) {
  if (off > len || len - off < AK_SEG_FRAME_HDR) return AK_SEG_MALFORMED;
  const uint8_t *f = buf + off;
  uint32_t n = get32(f);
  if ((size_t)n > len - off - AK_SEG_FRAME_HDR) return AK_SEG_MALFORMED;
  if (crc32c(f + AK_SEG_FRAME_HDR, n) != get32(f + 4)) return AK_SEG_CRC;
  *payload = f + AK_SEG_FRAME_HDR;
  *plen = n;
  *frame_len = AK_SEG_FRAME_HDR + (size_t)n;
  return AK_SEG_OK;
}

int ak_seg_walk(const uint8_t *seg, size_t len,
                int (*fn)(void *ctx, const uint8_t *payload, size_t plen, uint64_t off), void *ctx) {
  if (len < AK_SEG_MAGIC_LEN || memcmp(seg, AK_SEG_MAGIC, AK_SEG_MAGIC_LEN) != 0) return AK_SEG_MALFORMED;
  /* every frame is checked before fn sees the first: a damaged segment is refused whole,
   * so a reader never acts on the part of one that came before the damage */
  if (len == AK_SEG_MAGIC_LEN) return AK_SEG_MALFORMED; /* a segment holds at least one hook */
  const uint8_t *pl;
  size_t n, fl;
  for (size_t off = AK_SEG_MAGIC_LEN; off < len; off += fl) {
    int rc = ak_seg_frame(seg, len, off, &pl, &n, &fl);
    if (rc != AK_SEG_OK) return rc;
  }
  for (size_t off = AK_SEG_MAGIC_LEN; off < len; off += fl) {
    n = get32(seg + off);
    fl = AK_SEG_FRAME_HDR + n;
    if (fn(ctx, seg + off + AK_SEG_FRAME_HDR, n, (uint64_t)off) != 0) break;
  }
  return AK_SEG_OK;
}

int ak_seg_index_parse(const uint8_t *buf, size_t len, ak_seg_index_t *ix) {
  memset(ix, 0, sizeof *ix);
  if (len < AK_SEG_IDX_HDR + 4 || memcmp(buf, AK_SEG_IDX_MAGIC, AK_SEG_MAGIC_LEN) != 0) return AK_SEG_MALFORMED;
  const uint8_t *h = buf + AK_SEG_MAGIC_LEN;
  uint64_t first = get64(h), last = get64(h + 8), seg_bytes = get64(h + 20);
  uint32_t count = get32(h + 16);
  /* in u64: count * 44 < 2^38, no wrap; the entries must fill the object exactly */
  if ((uint64_t)(len - AK_SEG_IDX_HDR - 4) != (uint64_t)count * AK_SEG_ENTRY_LEN) return AK_SEG_MALFORMED;
  if (crc32c(buf, len - 4) != get32(buf + len - 4)) return AK_SEG_CRC;
  /* the crc matched, so what follows is a writer's mistake, still refused: a segment holds
   * at least one hook, and every entry must point at a whole frame after the magic */
  if (count == 0 || first > last || seg_bytes < AK_SEG_MAGIC_LEN) return AK_SEG_MALFORMED;
  const uint8_t *ents = buf + AK_SEG_IDX_HDR;
  for (uint32_t i = 0; i < count; i++) {
    const uint8_t *e = ents + (size_t)i * AK_SEG_ENTRY_LEN;
    if (i > 0 && memcmp(e - AK_SEG_ENTRY_LEN, e, 16) >= 0) return AK_SEG_MALFORMED;
    uint64_t seq = get64(e + 16), off = get64(e + 24);
    uint32_t fl = get32(e + 32);
    if (seq < first || seq > last) return AK_SEG_MALFORMED;
    if (off < AK_SEG_MAGIC_LEN || fl < AK_SEG_FRAME_HDR || off > seg_bytes || fl > seg_bytes - off)
      return AK_SEG_MALFORMED;
  }
  ix->first_seq = first;
  ix->last_seq = last;
  ix->seg_bytes = seg_bytes;
  ix->count = count;
  ix->entries = ents;
  return AK_SEG_OK;
}

void ak_seg_index_entry(const ak_seg_index_t *ix, uint32_t i, ak_seg_entry_t *e) {
  memset(e, 0, sizeof *e);
  if (i >= ix->count) return;
  const uint8_t *p = ix->entries + (size_t)i * AK_SEG_ENTRY_LEN;
  memcpy(e->id, p, 16);
  e->seq = get64(p + 16);
  e->offset = get64(p + 24);
  e->length = get32(p + 32);
  e->received_at_ms = (int64_t)get64(p + 36);
}

bool ak_seg_index_find(const ak_seg_index_t *ix, const uint8_t id[16], ak_seg_entry_t *e) {
  uint32_t lo = 0, hi = ix->count;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    int c = memcmp(ix->entries + (size_t)mid * AK_SEG_ENTRY_LEN, id, 16);
    if (c == 0) {
      ak_seg_index_entry(ix, mid, e);
      return true;
    }
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return false;
}

/* ---------------------------------------------------------------------- keys ---- */

static bool node_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '-';
}

bool ak_seg_node_ok(const char *node) {
  size_t n = 0;
  for (; node[n]; n++)
    if (n >= AK_SEG_NODE_MAX || !node_char(node[n])) return false;
  return n > 0 && strcmp(node, ".") != 0 && strcmp(node, "..") != 0;
}

/* "yyyy-mm-dd" of the UTC day holding ms; false past year 9999 or before year 0, which
 * have no 4-digit spelling. Floor division: -1 ms is 1969-12-31, not 1970-01-01. */
static bool utc_day(int64_t ms, char out[11]) {
  int64_t s = ms / 1000 - (ms % 1000 < 0 ? 1 : 0);
  time_t t = (time_t)s;
  struct tm tm;
  if ((int64_t)t != s || !gmtime_r(&t, &tm)) return false;
  long year = (long)tm.tm_year + 1900;
  if (year < 0 || year > 9999) return false;
  int v[3] = {(int)year, tm.tm_mon + 1, tm.tm_mday}, w[3] = {4, 2, 2};
  char *o = out;
  for (int i = 0; i < 3; i++) {
    for (int k = w[i] - 1, x = v[i]; k >= 0; k--, x /= 10) o[k] = (char)('0' + x % 10);
    o += w[i];
    *o++ = i < 2 ? '-' : '\0';
  }
  return true;
}

size_t ak_seg_day_prefix(char *out, size_t cap, int64_t day_ms) {
  char day[11];
  if (!utc_day(day_ms, day)) return 0;
  int n = snprintf(out, cap, "v1/dt=%s/", day);
  return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

size_t ak_seg_key(char *out, size_t cap, int64_t day_ms, const char *node, uint64_t first, uint64_t last,
                  const char *ext) {
  char day[11];
  if (!ak_seg_node_ok(node) || !utc_day(day_ms, day)) return 0;
  int n;
  if (strcmp(ext, "_manifest.json") == 0) {
    if (first != 0 || last != 0) return 0;
    n = snprintf(out, cap, "v1/dt=%s/%s/_manifest.json", day, node);
  } else if (strcmp(ext, ".seg") == 0 || strcmp(ext, ".idx") == 0) {
    /* ak_seg_key_parse refuses first > last: never build a key it would not read back */
    if (first > last) return 0;
    n = snprintf(out, cap, "v1/dt=%s/%s/seg-%020llu-%020llu%s", day, node, (unsigned long long)first,
                 (unsigned long long)last, ext);
  } else {
    return 0;
  }
  return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

/* Exactly 20 decimal digits at p, at most UINT64_MAX. */
static bool digits20(const char *p, uint64_t *v) {
  uint64_t x = 0;
  for (int i = 0; i < 20; i++) {
    if (p[i] < '0' || p[i] > '9') return false;
    unsigned d = (unsigned)(p[i] - '0');
    if (x > (UINT64_MAX - d) / 10) return false;
    x = x * 10 + d;
  }
  *v = x;
  return true;
}

static bool digits(const char *p, int n, int *v) {
  int x = 0;
  for (int i = 0; i < n; i++) {
    if (p[i] < '0' || p[i] > '9') return false;
    x = x * 10 + (p[i] - '0');
  }
  *v = x;
  return true;
}

/* A real Gregorian date, spelled yyyy-mm-dd: the only days ak_seg_key can write. */
static bool date_ok(const char *d) {
  int y, m, dd;
  if (!digits(d, 4, &y) || d[4] != '-' || !digits(d + 5, 2, &m) || d[7] != '-' || !digits(d + 8, 2, &dd))
    return false;
  static const int mdays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (m < 1 || m > 12 || dd < 1) return false;
  bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return dd <= mdays[m - 1] + (m == 2 && leap ? 1 : 0);
}

int ak_seg_key_parse(const char *key, char day[11], char node[AK_SEG_NODE_MAX + 1], uint64_t *first,
                     uint64_t *last, bool *is_index) {
  /* every read below stays before the key's NUL: each comparison stops at the first byte
   * that differs, and a NUL differs from every byte the layout expects */
  if (strncmp(key, "v1/dt=", 6) != 0) return -1;
  const char *p = key + 6;
  if (strnlen(p, 11) < 11 || !date_ok(p) || p[10] != '/') return -1;
  const char *d = p;
  p += 11;
  size_t nl = 0;
  while (nl <= AK_SEG_NODE_MAX && node_char(p[nl])) nl++;
  if (nl == 0 || nl > AK_SEG_NODE_MAX || p[nl] != '/') return -1;
  const char *nd = p;
  p += nl + 1;
  /* "seg-" 20 "-" 20 ".seg": 4 + 20 + 1 + 20 + 4 = 49 bytes, then the end */
  if (strnlen(p, 50) != 49 || strncmp(p, "seg-", 4) != 0 || p[24] != '-') return -1;
  uint64_t f, l;
  if (!digits20(p + 4, &f) || !digits20(p + 25, &l) || f > l) return -1;
  bool idx;
  if (strcmp(p + 45, ".seg") == 0)
    idx = false;
  else if (strcmp(p + 45, ".idx") == 0)
    idx = true;
  else
    return -1;
  char nb[AK_SEG_NODE_MAX + 1];
  memcpy(nb, nd, nl);
  nb[nl] = '\0';
  if (!ak_seg_node_ok(nb)) return -1; /* "." and ".." */
  memcpy(day, d, 10);
  day[10] = '\0';
  memcpy(node, nb, nl + 1);
  *first = f;
  *last = l;
  *is_index = idx;
  return 0;
}
