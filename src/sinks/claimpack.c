/* The claim check's formats (sinks/claimpack.h, docs/claim-check.md): claim ids (ULIDs
 * whose low 16 bits are the claim's position in its pack) and their canonical Crockford
 * base32 text, refs, object keys, the pack (a ZIP of stored entries) and the lookup of a
 * claim in a pack's head, and the put of a pack to the first claim store that takes it.
 * Never reads a pack whole, never compresses, never writes ZIP64, never prefixes a key
 * with storage.key_prefix, never logs (the callers do, secret-free). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <jansson.h>
#include <openssl/rand.h>
#include "blob/blob.h"
#include "core/ids.h"
#include "sinks/claimpack.h"

static const char crockford[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/* ------------------------------------------------------------------- claim ids ---- */

static void put_be(uint8_t *p, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; i--, v >>= 8) p[i] = (uint8_t)v;
}

static uint64_t get_be(const uint8_t *p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; i++) v = (v << 8) | p[i];
  return v;
}

void ak_claim_pack_id(int64_t ms, ak_claim_id_t *out) {
  memset(out, 0, sizeof *out);
  put_be(out->b, (uint64_t)ms & 0xffffffffffffull, 6);
  if (RAND_bytes(out->b + 6, 8) != 1) {
    /* the OS RNG directly when OpenSSL's cannot answer; a short read retries */
    size_t got = 0;
    while (got < 8) {
      ssize_t r = getrandom(out->b + 6 + got, 8 - got, 0);
      if (r > 0) got += (size_t)r;
    }
  }
}

void ak_claim_id_at(const ak_claim_id_t *pack, uint16_t pos, ak_claim_id_t *out) {
  *out = *pack;
  put_be(out->b + 14, pos, 2);
}

uint16_t ak_claim_id_pos(const ak_claim_id_t *id) { return (uint16_t)get_be(id->b + 14, 2); }

int64_t ak_claim_id_ms(const ak_claim_id_t *id) { return (int64_t)get_be(id->b, 6); }

void ak_claim_id_pack(const ak_claim_id_t *id, ak_claim_id_t *pack) { ak_claim_id_at(id, 0, pack); }

/* Bit i (0 = the most significant) of the 128 bits. */
static unsigned bit_at(const ak_claim_id_t *id, int i) { return (id->b[i / 8] >> (7 - i % 8)) & 1u; }

/* 26 characters of 5 bits are 130 bits: the text's first two bits are zero, so its first
 * character is 0-7. */
void ak_claim_id_format(const ak_claim_id_t *id, char out[AK_CLAIM_ID_LEN + 1]) {
  for (int c = 0; c < AK_CLAIM_ID_LEN; c++) {
    unsigned v = 0;
    for (int k = 0; k < 5; k++) {
      int i = c * 5 + k - 2;
      v = (v << 1) | (i >= 0 ? bit_at(id, i) : 0u);
    }
    out[c] = crockford[v];
  }
  out[AK_CLAIM_ID_LEN] = '\0';
}

/* The canonical alphabet only: uppercase, without I L O U. */
static int crockford_value(char ch) {
  const char *p = ch ? strchr(crockford, ch) : NULL;
  return p ? (int)(p - crockford) : -1;
}

int ak_claim_id_parse(const char *s, size_t n, ak_claim_id_t *out) {
  if (!s || n != AK_CLAIM_ID_LEN || s[0] < '0' || s[0] > '7') return -1;
  ak_claim_id_t id;
  memset(&id, 0, sizeof id);
  for (int c = 0; c < AK_CLAIM_ID_LEN; c++) {
    int v = crockford_value(s[c]);
    if (v < 0) return -1;
    for (int k = 0; k < 5; k++) {
      int i = c * 5 + k - 2;
      if (i >= 0 && ((v >> (4 - k)) & 1)) id.b[i / 8] |= (uint8_t)(0x80u >> (i % 8));
    }
  }
  *out = id;
  return 0;
}

bool ak_claim_tenant_ok(const char *t, size_t n) {
  if (!t || n < 1 || n > 64) return false;
  for (size_t i = 0; i < n; i++) {
    char ch = t[i];
    if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '-'))
      return false;
  }
  return true;
}

/* ------------------------------------------------------------------ refs, keys ---- */

#define REF_V1 "urn:ankusa:claim:v1:"

int ak_claim_ref_format(const char *tenant, size_t tenant_len, const ak_claim_id_t *id, char *out, size_t cap) {
  if (!ak_claim_tenant_ok(tenant, tenant_len)) return -1;
  char ids[AK_CLAIM_ID_LEN + 1];
  ak_claim_id_format(id, ids);
  int w = snprintf(out, cap, REF_V1 "%.*s:%s", (int)tenant_len, tenant, ids);
  return w < 0 || (size_t)w >= cap ? -1 : 0;
}

int ak_claim_ref_parse(const char *ref, size_t n, char tenant[65], ak_claim_id_t *id) {
  size_t pl = sizeof REF_V1 - 1;
  if (!ref || n <= pl + AK_CLAIM_ID_LEN + 1 || memcmp(ref, REF_V1, pl)) return -1;
  const char *t = ref + pl;
  size_t tl = n - pl - AK_CLAIM_ID_LEN - 1;
  if (t[tl] != ':' || !ak_claim_tenant_ok(t, tl)) return -1;
  ak_claim_id_t parsed;
  if (ak_claim_id_parse(t + tl + 1, AK_CLAIM_ID_LEN, &parsed) != 0) return -1;
  memcpy(tenant, t, tl);
  tenant[tl] = '\0';
  *id = parsed;
  return 0;
}

int ak_claim_key(const char *tenant, const ak_claim_id_t *id, char *out, size_t cap) {
  if (!tenant || !ak_claim_tenant_ok(tenant, strlen(tenant))) return -1;
  ak_claim_id_t pack;
  ak_claim_id_pack(id, &pack);
  char ids[AK_CLAIM_ID_LEN + 1];
  ak_claim_id_format(&pack, ids);
  time_t secs = (time_t)(ak_claim_id_ms(id) / 1000);
  struct tm tm;
  if (!gmtime_r(&secs, &tm)) return -1;
  int w = snprintf(out, cap, "claims/tenant=%s/dt=%04d-%02d-%02d/%s", tenant, tm.tm_year + 1900, tm.tm_mon + 1,
                   tm.tm_mday, ids);
  return w < 0 || (size_t)w >= cap ? -1 : 0;
}

/* ------------------------------------------------------------------------ pack ---- */

#define ZIP_LOCAL_SIG 0x04034b50u
#define ZIP_CENTRAL_SIG 0x02014b50u
#define ZIP_END_SIG 0x06054b50u
#define ZIP_LOCAL_LEN 30u
#define ZIP_CENTRAL_LEN 46u
#define ZIP_END_LEN 22u
#define ZIP_VERSION 10u   /* 1.0: stored entries, nothing newer */
#define ZIP_DOS_DATE 0x0021u /* 1980-01-01 */
#define INDEX_NAME "index.bin"
#define MANIFEST_NAME "manifest.json"

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
    crc_table[i] = c;
  }
}

/* CRC-32 (ISO-HDLC, the ZIP one). */
static uint32_t crc32_of(const uint8_t *p, size_t n) {
  pthread_once(&crc_once, crc_init);
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

static void le16(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}

static void le32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t rd16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t rd32(const uint8_t *p) { return rd16(p) | rd16(p + 2) << 16; }

typedef struct entry {
  const char *name;
  size_t name_len;
  const uint8_t *data;
  size_t len;
  uint32_t crc;
  uint32_t at; /* its local header's offset */
} entry_t;

static uint8_t *local_header(uint8_t *p, const entry_t *e) {
  le32(p, ZIP_LOCAL_SIG);
  le16(p + 4, ZIP_VERSION);
  le16(p + 6, 0);            /* flags */
  le16(p + 8, 0);            /* stored */
  le16(p + 10, 0);           /* time 00:00:00 */
  le16(p + 12, ZIP_DOS_DATE);
  le32(p + 14, e->crc);
  le32(p + 18, (uint32_t)e->len);
  le32(p + 22, (uint32_t)e->len);
  le16(p + 26, (uint32_t)e->name_len);
  le16(p + 28, 0);           /* no extra field */
  memcpy(p + ZIP_LOCAL_LEN, e->name, e->name_len);
  p += ZIP_LOCAL_LEN + e->name_len;
  if (e->len) memcpy(p, e->data, e->len);
  return p + e->len;
}

static uint8_t *central_header(uint8_t *p, const entry_t *e) {
  le32(p, ZIP_CENTRAL_SIG);
  le16(p + 4, ZIP_VERSION);  /* made by: MS-DOS, 1.0 */
  le16(p + 6, ZIP_VERSION);
  le16(p + 8, 0);
  le16(p + 10, 0);
  le16(p + 12, 0);
  le16(p + 14, ZIP_DOS_DATE);
  le32(p + 16, e->crc);
  le32(p + 20, (uint32_t)e->len);
  le32(p + 24, (uint32_t)e->len);
  le16(p + 28, (uint32_t)e->name_len);
  le16(p + 30, 0);           /* extra */
  le16(p + 32, 0);           /* comment */
  le16(p + 34, 0);           /* disk */
  le16(p + 36, 0);           /* internal attributes */
  le32(p + 38, 0);           /* external attributes */
  le32(p + 42, e->at);
  memcpy(p + ZIP_CENTRAL_LEN, e->name, e->name_len);
  return p + ZIP_CENTRAL_LEN + e->name_len;
}

/* The manifest's JSON text (malloc'd), or NULL out of memory. off/len are where each
 * claim's bytes sit in the pack. */
static char *manifest_text(const ak_claim_id_t *pack_id, const ak_claim_item_t *items, size_t n, const entry_t *es) {
  json_t *claims = json_array();
  json_t *root = json_pack("{s:i,s:o}", "v", 1, "claims", claims);
  if (!root) return NULL;
  for (size_t i = 0; i < n; i++) {
    ak_claim_id_t cid;
    ak_claim_id_at(pack_id, (uint16_t)i, &cid);
    char ids[AK_CLAIM_ID_LEN + 1], hook[AK_UUID_STR_LEN];
    ak_claim_id_format(&cid, ids);
    ak_uuid_format(items[i].hook_id, hook);
    const entry_t *e = &es[1 + i];
    json_t *ct = items[i].content_type ? json_stringn(items[i].content_type, items[i].content_type_len) : json_null();
    json_t *row = json_pack("{s:s,s:s,s:I,s:I,s:s,s:o,s:I}", "claim_id", ids, "id", hook, "offset",
                            (json_int_t)(e->at + ZIP_LOCAL_LEN + e->name_len), "length", (json_int_t)e->len, "sha256",
                            items[i].sha256, "content_type", ct ? ct : json_null(), "received_at",
                            (json_int_t)items[i].received_at_ms);
    if (!row || json_array_append_new(claims, row) != 0) {
      json_decref(root);
      return NULL;
    }
  }
  char *s = json_dumps(root, JSON_COMPACT);
  json_decref(root);
  return s;
}

uint8_t *ak_claim_pack_build(const ak_claim_id_t *pack_id, const ak_claim_item_t *items, size_t n, size_t *len) {
  *len = 0;
  if (n > AK_CLAIM_PACK_MAX_CLAIMS) return NULL;
  size_t ne = n + 2;
  entry_t *es = calloc(ne, sizeof *es);
  char(*names)[AK_CLAIM_ID_LEN + 1] = calloc(n ? n : 1, sizeof *names);
  uint8_t *index = malloc(n ? n * 8 : 1);
  uint8_t *out = NULL;
  char *manifest = NULL;
  if (!es || !names || !index) goto done;
  /* offsets first: every header is of a known size, so the index can be filled before
   * anything is written */
  uint64_t at = 0;
  es[0] = (entry_t){.name = INDEX_NAME, .name_len = sizeof INDEX_NAME - 1, .data = index, .len = n * 8};
  es[0].at = 0;
  at = ZIP_LOCAL_LEN + es[0].name_len + es[0].len;
  for (size_t i = 0; i < n; i++) {
    ak_claim_id_t cid;
    ak_claim_id_at(pack_id, (uint16_t)i, &cid);
    ak_claim_id_format(&cid, names[i]);
    entry_t *e = &es[1 + i];
    *e = (entry_t){.name = names[i], .name_len = AK_CLAIM_ID_LEN, .data = items[i].body, .len = items[i].len};
    if (at > UINT32_MAX || items[i].len > UINT32_MAX) goto done;
    e->at = (uint32_t)at;
    uint64_t data_at = at + ZIP_LOCAL_LEN + AK_CLAIM_ID_LEN;
    if (data_at > UINT32_MAX) goto done;
    put_be(index + i * 8, data_at, 4);
    put_be(index + i * 8 + 4, items[i].len, 4);
    e->crc = crc32_of(items[i].body, items[i].len);
    at = data_at + items[i].len;
  }
  es[0].crc = crc32_of(index, n * 8);
  manifest = manifest_text(pack_id, items, n, es);
  if (!manifest || at > UINT32_MAX) goto done;
  entry_t *m = &es[n + 1];
  *m = (entry_t){.name = MANIFEST_NAME, .name_len = sizeof MANIFEST_NAME - 1, .data = (const uint8_t *)manifest,
                 .len = strlen(manifest), .at = (uint32_t)at};
  m->crc = crc32_of(m->data, m->len);
  at += ZIP_LOCAL_LEN + m->name_len + m->len;
  uint64_t cd_at = at, cd_len = 0;
  for (size_t i = 0; i < ne; i++) cd_len += ZIP_CENTRAL_LEN + es[i].name_len;
  uint64_t total = cd_at + cd_len + ZIP_END_LEN;
  if (cd_at > UINT32_MAX || cd_len > UINT32_MAX || total > UINT32_MAX) goto done;
  out = malloc(total);
  if (!out) goto done;
  uint8_t *p = out;
  for (size_t i = 0; i < ne; i++) p = local_header(p, &es[i]);
  for (size_t i = 0; i < ne; i++) p = central_header(p, &es[i]);
  le32(p, ZIP_END_SIG);
  le16(p + 4, 0);
  le16(p + 6, 0);
  le16(p + 8, (uint32_t)ne);
  le16(p + 10, (uint32_t)ne);
  le32(p + 12, (uint32_t)cd_len);
  le32(p + 16, (uint32_t)cd_at);
  le16(p + 20, 0);
  *len = (size_t)total;
done:
  free(manifest);
  free(index);
  free(names);
  free(es);
  return out;
}

size_t ak_claim_head_len(uint16_t pos) { return ZIP_LOCAL_LEN + sizeof INDEX_NAME - 1 + ((size_t)pos + 1) * 8; }

int ak_claim_locate(const uint8_t *head, size_t n, uint16_t pos, uint32_t *off, uint32_t *len) {
  size_t hl = ZIP_LOCAL_LEN + sizeof INDEX_NAME - 1;
  if (!head || n < ak_claim_head_len(pos)) return -1;
  if (rd32(head) != ZIP_LOCAL_SIG || rd16(head + 8) != 0 || rd16(head + 26) != sizeof INDEX_NAME - 1 ||
      rd16(head + 28) != 0 || memcmp(head + ZIP_LOCAL_LEN, INDEX_NAME, sizeof INDEX_NAME - 1))
    return -1;
  uint32_t index_len = rd32(head + 22);
  if (index_len % 8 || ((uint64_t)pos + 1) * 8 > index_len) return -1;
  const uint8_t *row = head + hl + (size_t)pos * 8;
  *off = (uint32_t)get_be(row, 4);
  *len = (uint32_t)get_be(row + 4, 4);
  return 0;
}

int ak_claim_entry_check(const uint8_t *hdr, size_t n, const ak_claim_id_t *id, uint32_t len) {
  if (!hdr || n < AK_CLAIM_ENTRY_HEAD) return -1;
  char ids[AK_CLAIM_ID_LEN + 1];
  ak_claim_id_format(id, ids);
  if (rd32(hdr) != ZIP_LOCAL_SIG || rd16(hdr + 8) != 0 || rd16(hdr + 26) != AK_CLAIM_ID_LEN || rd16(hdr + 28) != 0 ||
      rd32(hdr + 22) != len || memcmp(hdr + ZIP_LOCAL_LEN, ids, AK_CLAIM_ID_LEN))
    return -1;
  return 0;
}

int ak_claim_manifest_find(const uint8_t *tail, size_t n, uint64_t pack_size, uint64_t *off, uint32_t *len) {
  size_t mc = ZIP_CENTRAL_LEN + sizeof MANIFEST_NAME - 1;
  if (!tail || n < mc + ZIP_END_LEN) return -1;
  const uint8_t *end = tail + n - ZIP_END_LEN, *c = end - mc;
  if (rd32(end) != ZIP_END_SIG || rd16(end + 20) != 0) return -1;
  uint64_t cd_at = rd32(end + 16), cd_len = rd32(end + 12);
  if (cd_at + cd_len + ZIP_END_LEN != pack_size || cd_len < mc) return -1;
  if (rd32(c) != ZIP_CENTRAL_SIG || rd16(c + 10) != 0 || rd16(c + 28) != sizeof MANIFEST_NAME - 1 ||
      rd16(c + 30) != 0 || rd16(c + 32) != 0 || memcmp(c + ZIP_CENTRAL_LEN, MANIFEST_NAME, sizeof MANIFEST_NAME - 1))
    return -1;
  uint64_t at = rd32(c + 42), ml = rd32(c + 24);
  uint64_t data_at = at + ZIP_LOCAL_LEN + sizeof MANIFEST_NAME - 1;
  if (data_at + ml != cd_at) return -1;
  *off = data_at;
  *len = (uint32_t)ml;
  return 0;
}

size_t ak_claim_manifest_tail_len(void) { return ZIP_CENTRAL_LEN + sizeof MANIFEST_NAME - 1 + ZIP_END_LEN; }

/* ----------------------------------------------------------------- the stores ---- */

typedef struct failure {
  size_t store;
  char msg[200];
} failure_t;

static int by_length(const void *a, const void *b) {
  size_t la = strlen(((const failure_t *)a)->msg), lb = strlen(((const failure_t *)b)->msg);
  return la < lb ? -1 : la > lb;
}

int ak_claim_stores_put(const ak_claim_stores_t *s, const char *key, const void *data, size_t len, size_t *used,
                        char *err, size_t errlen) {
  if (err && errlen) err[0] = '\0';
  if (!s || !s->n) {
    if (err) snprintf(err, errlen, "no claim store");
    return -1;
  }
  failure_t *fs = calloc(s->n, sizeof *fs);
  for (size_t i = 0; i < s->n; i++) {
    char e[200] = "";
    if (ak_blob_put(s->v[i], key, data, len, e, sizeof e) == AK_BLOB_OK) {
      if (used) *used = i;
      free(fs);
      return 0;
    }
    if (fs) {
      fs[i].store = i;
      snprintf(fs[i].msg, sizeof fs[i].msg, "%s", e[0] ? e : "write failed");
    }
  }
  if (fs && err && errlen) {
    qsort(fs, s->n, sizeof *fs, by_length);
    size_t o = 0;
    for (size_t i = 0; i < s->n && o + 1 < errlen; i++) {
      int w = snprintf(err + o, errlen - o, "%sstore %zu: %s", i ? "; " : "", fs[i].store, fs[i].msg);
      if (w < 0) break;
      o += (size_t)w;
    }
  } else if (err) {
    snprintf(err, errlen, "every claim store failed");
  }
  free(fs);
  return -1;
}
