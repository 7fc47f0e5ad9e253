/* The backup manifest and LATEST formats (backup/manifest.h): encode / decode round trips,
 * the signature (checked here with OpenSSL's one-shot HMAC(), independently of
 * manifest.c), every field check of decode on hand-built, validly signed texts, backup
 * ids (ULIDs: decoded here with the harness's own Crockford table), and the file name
 * rules (backup/backup.h's ak_backup_is_store_file included). No store, no blob store. */
#include <criterion/criterion.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backup/backup.h"
#include "backup/manifest.h"

/* 2026-12-02T07:55:26.123Z */
#define MS 1796198126123ll
#define KEY "0123456789abcdef0123456789abcdef-backup"
#define KEYLEN (sizeof KEY - 1)
#define STORE_ID "00112233445566778899aabbccddeeff"
#define WRITER "ffeeddccbbaa99887766554433221100"
#define SIG_MEMBER ",\"signature\":\"hmac-sha256:"
#define ID "01KBG0Z1ABCDEFGHJKMNPQRSTV" /* a fixed backup id (ULID form) */

/* sha256 hex of a string, lowercase */
static void sha_of(const char *s, char out[65]) {
  unsigned char d[32];
  unsigned int dl = 0;
  cr_assert_eq(EVP_Digest(s, strlen(s), d, &dl, EVP_sha256(), NULL), 1);
  for (int i = 0; i < 32; i++) sprintf(out + 2 * i, "%02x", d[i]);
}

/* HMAC-SHA256 hex of p[0..n), computed here (not by manifest.c) */
static void ref_hmac(const void *key, size_t keylen, const void *p, size_t n, char out[65]) {
  unsigned char md[32];
  unsigned int ml = 0;
  static const unsigned char nokey = 0;
  cr_assert_not_null(HMAC(EVP_sha256(), keylen ? key : &nokey, (int)keylen, p, n, md, &ml));
  cr_assert_eq(ml, 32);
  for (int i = 0; i < 32; i++) sprintf(out + 2 * i, "%02x", md[i]);
}

/* The signed text of body (a JSON object, ending in '}'): the body without its '}', the
 * signature member, then '"}'; the HMAC is over the body without '}' then '}', i.e. body. */
static char *sign_body(const char *body, const void *key, size_t keylen, size_t *len) {
  size_t bl = strlen(body);
  cr_assert(bl >= 2 && body[bl - 1] == '}');
  char sig[65];
  ref_hmac(key, keylen, body, bl, sig);
  char *out = NULL;
  int n = asprintf(&out, "%.*s%s%s\"}", (int)(bl - 1), body, SIG_MEMBER, sig);
  cr_assert(n > 0);
  *len = (size_t)n;
  return out;
}

/* ---- hand-built manifests ------------------------------------------------------------ */

/* A file entry: each member as raw JSON (NULL: the member is left out). */
typedef struct hfile {
  char name[256], kind[64], key[512], size[64], sha[512];
  bool no_name, no_kind, no_key, no_size, no_sha;
} hfile_t;

typedef struct hman {
  char version[32], id[64], created[64], store_id[64], writer[64];
  hfile_t files[8];
  size_t nfiles;
} hman_t;

static const char *const std_names[] = {"000012.sst", "000013.blob", "MANIFEST-000005", "CURRENT", "OPTIONS-000007",
                                        "000014.log"};
#define NSTD (sizeof std_names / sizeof *std_names)

/* file i of a valid manifest of backup id: its members, the key derived as documented */
static void hfile_std(hfile_t *f, const char *id, const char *name, uint64_t size) {
  memset(f, 0, sizeof *f);
  char sha[65];
  sha_of(name, sha);
  bool shared = strstr(name, ".sst") || strstr(name, ".blob");
  snprintf(f->name, sizeof f->name, "\"%s\"", name);
  snprintf(f->kind, sizeof f->kind, "\"%s\"", shared ? "shared" : "private");
  if (shared) snprintf(f->key, sizeof f->key, "\"sst/%.16s-%s\"", sha, name);
  else snprintf(f->key, sizeof f->key, "\"%s/%s\"", id, name);
  snprintf(f->size, sizeof f->size, "%llu", (unsigned long long)size);
  snprintf(f->sha, sizeof f->sha, "\"%s\"", sha);
}

static void hman_std(hman_t *h) {
  memset(h, 0, sizeof *h);
  snprintf(h->version, sizeof h->version, "1");
  snprintf(h->id, sizeof h->id, "\"%s\"", ID);
  snprintf(h->created, sizeof h->created, "%lld", MS);
  snprintf(h->store_id, sizeof h->store_id, "\"%s\"", STORE_ID);
  snprintf(h->writer, sizeof h->writer, "\"%s\"", WRITER);
  for (size_t i = 0; i < NSTD; i++) hfile_std(&h->files[i], ID, std_names[i], 1000 * (i + 1));
  h->nfiles = NSTD;
}

static void cat(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void cat(char *out, size_t n, const char *fmt, ...) {
  size_t l = strlen(out);
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(out + l, n - l, fmt, ap);
  va_end(ap);
  cr_assert(k >= 0 && (size_t)k < n - l, "body too long");
}

static void member(char *out, size_t n, bool *first, const char *name, const char *val, bool absent) {
  if (absent) return;
  cat(out, n, "%s\"%s\":%s", *first ? "" : ",", name, val);
  *first = false;
}

/* the body (unsigned JSON object) of h, members in the order encode writes them */
static void hman_body(const hman_t *h, char *out, size_t n) {
  out[0] = '\0';
  cat(out, n, "{\"version\":%s,\"id\":%s,\"created_at_ms\":%s,\"store_id\":%s,\"writer\":%s,\"files\":[", h->version,
      h->id, h->created, h->store_id, h->writer);
  for (size_t i = 0; i < h->nfiles; i++) {
    const hfile_t *f = &h->files[i];
    bool first = true;
    cat(out, n, "%s{", i ? "," : "");
    member(out, n, &first, "name", f->name, f->no_name);
    member(out, n, &first, "kind", f->kind, f->no_kind);
    member(out, n, &first, "key", f->key, f->no_key);
    member(out, n, &first, "size", f->size, f->no_size);
    member(out, n, &first, "sha256", f->sha, f->no_sha);
    cat(out, n, "}");
  }
  cat(out, n, "]}");
}

/* decode h signed with KEY: its rc; why filled */
static int hman_decode(const hman_t *h, ak_backup_manifest_t *m, char *why, size_t whylen) {
  static char body[8192];
  hman_body(h, body, sizeof body);
  size_t len;
  char *text = sign_body(body, KEY, KEYLEN, &len);
  why[0] = '\0';
  int rc = ak_backup_manifest_decode(text, len, (const uint8_t *)KEY, KEYLEN, m, why, whylen);
  free(text);
  return rc;
}

static void assert_cleared(const ak_backup_manifest_t *m) {
  cr_assert_null(m->files);
  cr_assert_eq(m->nfiles, 0);
  cr_assert_eq(m->capfiles, 0);
  cr_assert_eq(m->id[0], '\0');
  cr_assert_eq(m->version, 0);
}

/* h must be refused with a why containing want */
static void refused(const hman_t *h, const char *want) {
  ak_backup_manifest_t m;
  memset(&m, 0x5a, sizeof m);
  char why[256];
  cr_assert_eq(hman_decode(h, &m, why, sizeof why), -1, "accepted; expected refusal: %s", want);
  cr_assert(strstr(why, want) != NULL, "why '%s' lacks '%s'", why, want);
  cr_assert(strstr(why, "signature") == NULL, "refused for its signature, not its field: %s", why);
  assert_cleared(&m);
}

/* A valid manifest made with the API: the six kinds of file a checkpoint holds. */
static void api_manifest(ak_backup_manifest_t *m, const char *id) {
  memset(m, 0, sizeof *m);
  m->version = 1;
  snprintf(m->id, sizeof m->id, "%s", id);
  m->created_at_ms = MS;
  snprintf(m->store_id, sizeof m->store_id, STORE_ID);
  snprintf(m->writer, sizeof m->writer, WRITER);
  for (size_t i = 0; i < NSTD; i++) {
    char sha[65];
    sha_of(std_names[i], sha);
    cr_assert_eq(ak_backup_manifest_add(m, std_names[i], 1000 * (i + 1), sha), 0);
  }
  /* a large size (above 32 bits) survives too */
  m->files[0].size = 5ull << 40;
}

static void assert_same(const ak_backup_manifest_t *a, const ak_backup_manifest_t *b) {
  cr_assert_eq(a->version, b->version);
  cr_assert_str_eq(a->id, b->id);
  cr_assert_eq(a->created_at_ms, b->created_at_ms);
  cr_assert_str_eq(a->store_id, b->store_id);
  cr_assert_str_eq(a->writer, b->writer);
  cr_assert_eq(a->nfiles, b->nfiles);
  for (size_t i = 0; i < a->nfiles; i++) {
    cr_assert_str_eq(a->files[i].name, b->files[i].name);
    cr_assert_eq(a->files[i].shared, b->files[i].shared, "%s", a->files[i].name);
    cr_assert_str_eq(a->files[i].key, b->files[i].key);
    cr_assert_eq(a->files[i].size, b->files[i].size, "%s", a->files[i].name);
    cr_assert_str_eq(a->files[i].sha256, b->files[i].sha256);
  }
}

/* ---- round trip ---------------------------------------------------------------------- */

Test(backup_manifest, add_derives_kind_and_key) {
  ak_backup_manifest_t m;
  api_manifest(&m, ID);
  cr_assert_eq(m.nfiles, NSTD);
  for (size_t i = 0; i < NSTD; i++) {
    char sha[65], key[AK_BACKUP_KEY_MAX];
    sha_of(std_names[i], sha);
    bool shared = i < 2; /* .sst, .blob */
    cr_assert_eq(m.files[i].shared, shared, "%s", std_names[i]);
    if (shared) snprintf(key, sizeof key, "sst/%.16s-%s", sha, std_names[i]);
    else snprintf(key, sizeof key, "%s/%s", ID, std_names[i]);
    cr_assert_str_eq(m.files[i].key, key);
    cr_assert_str_eq(m.files[i].sha256, sha);
  }
  cr_assert_str_eq(m.files[3].key, ID "/CURRENT");
  /* the helper gives the same keys */
  char k[AK_BACKUP_KEY_MAX];
  ak_backup_file_key(ID, "000012.sst", true, m.files[0].sha256, k);
  cr_assert_str_eq(k, m.files[0].key);
  ak_backup_file_key(ID, "MANIFEST-000005", false, m.files[2].sha256, k);
  cr_assert_str_eq(k, ID "/MANIFEST-000005");
  /* add refuses a bad name or sha256, and leaves the list as it was */
  cr_assert_eq(ak_backup_manifest_add(&m, "a/b", 1, m.files[0].sha256), -1);
  cr_assert_eq(ak_backup_manifest_add(&m, ".hidden", 1, m.files[0].sha256), -1);
  cr_assert_eq(ak_backup_manifest_add(&m, "x.sst", 1, "ABCDEF"), -1);
  char upper[65];
  snprintf(upper, sizeof upper, "%s", m.files[0].sha256);
  for (char *p = upper; *p; p++)
    if (*p >= 'a' && *p <= 'f') *p = (char)(*p - 32);
  cr_assert_eq(ak_backup_manifest_add(&m, "x.sst", 1, upper), -1, "sha256 is lowercase hex");
  cr_assert_eq(m.nfiles, NSTD);
  ak_backup_manifest_clear(&m);
  cr_assert_null(m.files);
  cr_assert_eq(m.nfiles, 0);
}

Test(backup_manifest, encode_decode_round_trips_every_field) {
  ak_backup_manifest_t m, back;
  char id[AK_BACKUP_ID_LEN + 1];
  ak_backup_new_id(MS, id);
  api_manifest(&m, id);
  size_t len = 0;
  char *text = ak_backup_manifest_encode(&m, (const uint8_t *)KEY, KEYLEN, &len);
  cr_assert_not_null(text);
  cr_assert_eq(strlen(text), len);
  char why[256] = "";
  cr_assert_eq(ak_backup_manifest_decode(text, len, (const uint8_t *)KEY, KEYLEN, &back, why, sizeof why), 0, "%s",
               why);
  assert_same(&m, &back);
  cr_assert_eq(back.files[0].size, 5ull << 40);
  /* encode(decode(text)) is text: one spelling */
  size_t len2 = 0;
  char *again = ak_backup_manifest_encode(&back, (const uint8_t *)KEY, KEYLEN, &len2);
  cr_assert_eq(len2, len);
  cr_assert_eq(memcmp(again, text, len), 0);
  free(again);
  free(text);
  ak_backup_manifest_clear(&back);
  ak_backup_manifest_clear(&m);
}

Test(backup_manifest, encode_writes_the_documented_text_and_signature) {
  /* the text encode writes is the hand-built one, signed as the format says */
  ak_backup_manifest_t m;
  api_manifest(&m, ID);
  m.files[0].size = 1000; /* as hman_std */
  size_t len = 0;
  char *text = ak_backup_manifest_encode(&m, (const uint8_t *)KEY, KEYLEN, &len);
  cr_assert_not_null(text);
  hman_t h;
  hman_std(&h);
  static char body[8192];
  hman_body(&h, body, sizeof body);
  size_t wl = 0;
  char *want = sign_body(body, KEY, KEYLEN, &wl);
  cr_assert_eq(len, wl, "\n got %s\nwant %s", text, want);
  cr_assert_str_eq(text, want);
  /* the signature is the HMAC of the text before the member, then "}" */
  const char *sig = strstr(text, SIG_MEMBER);
  cr_assert_not_null(sig);
  cr_assert_eq((size_t)(sig - text) + strlen(SIG_MEMBER) + 64 + 2, len, "the signature member ends the text");
  char *covered = NULL;
  cr_assert(asprintf(&covered, "%.*s}", (int)(sig - text), text) > 0);
  char mac[65];
  ref_hmac(KEY, KEYLEN, covered, strlen(covered), mac);
  cr_assert_eq(memcmp(sig + strlen(SIG_MEMBER), mac, 64), 0);
  free(covered);
  free(want);
  free(text);
  /* version 0 in the struct is written as 1 */
  m.version = 0;
  text = ak_backup_manifest_encode(&m, (const uint8_t *)KEY, KEYLEN, &len);
  cr_assert(!strncmp(text, "{\"version\":1,", 13));
  free(text);
  ak_backup_manifest_clear(&m);
}

Test(backup_manifest, hand_built_text_decodes) {
  /* the control of the refusals below: the same builder, nothing changed */
  hman_t h;
  hman_std(&h);
  ak_backup_manifest_t m;
  char why[256];
  cr_assert_eq(hman_decode(&h, &m, why, sizeof why), 0, "%s", why);
  cr_assert_eq(m.version, 1);
  cr_assert_str_eq(m.id, ID);
  cr_assert_eq(m.created_at_ms, MS);
  cr_assert_str_eq(m.store_id, STORE_ID);
  cr_assert_str_eq(m.writer, WRITER);
  cr_assert_eq(m.nfiles, NSTD);
  for (size_t i = 0; i < NSTD; i++) {
    cr_assert_str_eq(m.files[i].name, std_names[i]);
    cr_assert_eq(m.files[i].size, 1000 * (i + 1));
  }
  ak_backup_manifest_clear(&m);
  /* only CURRENT is required; one file is enough */
  hman_std(&h);
  h.files[0] = h.files[3];
  h.nfiles = 1;
  cr_assert_eq(hman_decode(&h, &m, why, sizeof why), 0, "%s", why);
  cr_assert_eq(m.nfiles, 1);
  ak_backup_manifest_clear(&m);
  /* size 0 and the largest JSON integer are sizes */
  hman_std(&h);
  snprintf(h.files[4].size, sizeof h.files[4].size, "0");
  snprintf(h.files[5].size, sizeof h.files[5].size, "9223372036854775807");
  cr_assert_eq(hman_decode(&h, &m, why, sizeof why), 0, "%s", why);
  cr_assert_eq(m.files[4].size, 0);
  cr_assert_eq(m.files[5].size, 9223372036854775807ull);
  ak_backup_manifest_clear(&m);
}

/* ---- the signature ------------------------------------------------------------------- */

static int decode_copy(const char *text, size_t len, const void *key, size_t keylen, char *why, size_t whylen) {
  /* an exact-size copy: a read past len is a heap overflow under ASan */
  char *p = malloc(len ? len : 1);
  cr_assert_not_null(p);
  memcpy(p, text, len);
  ak_backup_manifest_t m;
  why[0] = '\0';
  int rc = ak_backup_manifest_decode(p, len, key, keylen, &m, why, whylen);
  if (rc == 0) ak_backup_manifest_clear(&m);
  else assert_cleared(&m);
  free(p);
  return rc;
}

Test(backup_manifest, every_bit_flip_is_refused) {
  ak_backup_manifest_t m;
  api_manifest(&m, ID);
  size_t len = 0;
  char *text = ak_backup_manifest_encode(&m, (const uint8_t *)KEY, KEYLEN, &len);
  ak_backup_manifest_clear(&m);
  char why[256];
  cr_assert_eq(decode_copy(text, len, KEY, KEYLEN, why, sizeof why), 0, "%s", why);
  size_t sig_at = (size_t)(strstr(text, SIG_MEMBER) - text);
  for (size_t i = 0; i < len; i++)
    for (int b = 0; b < 8; b++) {
      text[i] ^= (char)(1 << b);
      cr_assert_eq(decode_copy(text, len, KEY, KEYLEN, why, sizeof why), -1, "flip of bit %d at %zu accepted", b, i);
      /* a change of what the signature covers, or of the signature's hex, fails the signature */
      if ((i > 0 && i < sig_at) || (i >= sig_at + strlen(SIG_MEMBER) && i < len - 2))
        cr_assert(strstr(why, "signature does not match"), "at %zu bit %d: %s", i, b, why);
      else cr_assert(strstr(why, "not a signed manifest"), "at %zu bit %d: %s", i, b, why);
      text[i] ^= (char)(1 << b);
    }
  /* the signature's hex in upper case is not the signature */
  for (size_t i = sig_at + strlen(SIG_MEMBER); i < len - 2; i++)
    if (text[i] >= 'a' && text[i] <= 'f') text[i] = (char)(text[i] - 32);
  cr_assert_eq(decode_copy(text, len, KEY, KEYLEN, why, sizeof why), -1);
  free(text);
}

Test(backup_manifest, wrong_key_is_refused) {
  ak_backup_manifest_t m;
  api_manifest(&m, ID);
  size_t len = 0;
  char *text = ak_backup_manifest_encode(&m, (const uint8_t *)KEY, KEYLEN, &len);
  ak_backup_manifest_clear(&m);
  char why[256];
  static const char other[] = "0123456789abcdef0123456789abcdef-backuq";
  cr_assert_eq(decode_copy(text, len, other, KEYLEN, why, sizeof why), -1);
  cr_assert(strstr(why, "signature does not match"), "%s", why);
  /* a prefix of the key, and the key with a byte more, are other keys */
  cr_assert_eq(decode_copy(text, len, KEY, KEYLEN - 1, why, sizeof why), -1);
  cr_assert(strstr(why, "signature does not match"), "%s", why);
  static const char longer[] = KEY "x";
  cr_assert_eq(decode_copy(text, len, longer, KEYLEN + 1, why, sizeof why), -1);
  cr_assert(strstr(why, "signature does not match"), "%s", why);
  cr_assert_eq(decode_copy(text, len, KEY, KEYLEN, why, sizeof why), 0, "%s", why);
  free(text);
}

Test(backup_manifest, truncation_at_every_length_is_refused) {
  ak_backup_manifest_t m;
  api_manifest(&m, ID);
  size_t len = 0;
  char *text = ak_backup_manifest_encode(&m, (const uint8_t *)KEY, KEYLEN, &len);
  ak_backup_manifest_clear(&m);
  char why[256];
  for (size_t l = 0; l < len; l++)
    cr_assert_eq(decode_copy(text, l, KEY, KEYLEN, why, sizeof why), -1, "a text cut to %zu bytes was accepted", l);
  /* nor with bytes after its end */
  char *more = NULL;
  cr_assert(asprintf(&more, "%s\n", text) > 0);
  cr_assert_eq(decode_copy(more, len + 1, KEY, KEYLEN, why, sizeof why), -1);
  free(more);
  cr_assert_eq(decode_copy(text, len, KEY, KEYLEN, why, sizeof why), 0, "%s", why);
  free(text);
}

Test(backup_manifest, empty_key_works_only_with_itself) {
  ak_backup_manifest_t m;
  api_manifest(&m, ID);
  char why[256];
  size_t len = 0, klen = 0;
  /* signed with the empty key: the HMAC of the empty key, decodable with it only */
  char *text = ak_backup_manifest_encode(&m, (const uint8_t *)"", 0, &len);
  cr_assert_not_null(text);
  const char *sig = strstr(text, SIG_MEMBER);
  char *covered = NULL, mac[65];
  cr_assert(asprintf(&covered, "%.*s}", (int)(sig - text), text) > 0);
  ref_hmac("", 0, covered, strlen(covered), mac);
  cr_assert_eq(memcmp(sig + strlen(SIG_MEMBER), mac, 64), 0, "the empty key's HMAC");
  cr_assert_neq(strspn(sig + strlen(SIG_MEMBER), "0"), 64);
  free(covered);
  cr_assert_eq(decode_copy(text, len, "", 0, why, sizeof why), 0, "%s", why);
  cr_assert_eq(decode_copy(text, len, KEY, KEYLEN, why, sizeof why), -1);
  cr_assert(strstr(why, "signature does not match"), "%s", why);
  cr_assert_eq(decode_copy(text, len, "x", 1, why, sizeof why), -1, "a one-byte key is not the empty key");
  /* (HMAC pads a key with zero bytes to its block: "\0" signs as "" does. The key is
   * backup.signing_key, a string of 32 or more characters, so it never holds a NUL.) */
  /* a text signed with a key is refused by the empty key */
  char *keyed = ak_backup_manifest_encode(&m, (const uint8_t *)KEY, KEYLEN, &klen);
  cr_assert_eq(decode_copy(keyed, klen, "", 0, why, sizeof why), -1);
  cr_assert(strstr(why, "signature does not match"), "%s", why);
  /* an all-zero signature is no signature, whatever the key */
  char *zero = strdup(keyed);
  memset(strstr(zero, SIG_MEMBER) + strlen(SIG_MEMBER), '0', 64);
  cr_assert_eq(decode_copy(zero, klen, "", 0, why, sizeof why), -1);
  cr_assert_eq(decode_copy(zero, klen, KEY, KEYLEN, why, sizeof why), -1);
  free(zero);
  free(keyed);
  free(text);
  ak_backup_manifest_clear(&m);
}

/* An all-zero signature never passes: with a NULL key (an empty one) the HMAC is still
 * computed and refuses it, and where it cannot be computed at all (EVP_MAC_fetch or
 * EVP_MAC_CTX_new failing) hmac_hex answers an error and decode refuses ("cannot compute
 * the signature") instead of comparing with zeros. */
Test(backup_manifest, no_signature_when_the_hmac_cannot_be_computed) {
  ak_backup_manifest_t m;
  api_manifest(&m, ID);
  size_t len = 0;
  char *text = ak_backup_manifest_encode(&m, (const uint8_t *)KEY, KEYLEN, &len);
  ak_backup_manifest_clear(&m);
  memset(strstr(text, SIG_MEMBER) + strlen(SIG_MEMBER), '0', 64);
  char why[256];
  cr_assert_eq(decode_copy(text, len, NULL, 0, why, sizeof why), -1, "an all-zero signature was accepted");
  free(text);
}

/* ---- field checks on validly signed texts --------------------------------------------- */

Test(backup_manifest, refuses_version_id_and_header_fields) {
  hman_t h;
  hman_std(&h);
  snprintf(h.version, sizeof h.version, "2");
  refused(&h, "version 2 is not one this build reads");
  hman_std(&h);
  snprintf(h.version, sizeof h.version, "0");
  refused(&h, "version 0 is not one this build reads");
  hman_std(&h);
  snprintf(h.version, sizeof h.version, "\"1\"");
  refused(&h, "is not one this build reads");

  static const char *const bad_ids[] = {
      "\"01KBG0Z1ABCDEFGHJKMNPQRST\"",   /* 25 chars */
      "\"01KBG0Z1ABCDEFGHJKMNPQRSTVW\"", /* 27 */
      "\"01KBG0Z1ABCDEFGHJKMNPQRSTU\"",  /* U is not Crockford */
      "\"01KBG0Z1ABCDEFGHJKMNPQRSTI\"",  /* nor I */
      "\"01kbg0z1abcdefghjkmnpqrstv\"",  /* lower case */
      "\"81KBG0Z1ABCDEFGHJKMNPQRSTV\"",  /* first char above 7: more than 128 bits */
      "\"01KBG0Z1ABCDEF/HJKMNPQRSTV\"",  /* a slash: a key escape */
      "\"\"", "1", "null"};
  for (size_t i = 0; i < sizeof bad_ids / sizeof *bad_ids; i++) {
    hman_std(&h);
    snprintf(h.id, sizeof h.id, "%s", bad_ids[i]);
    refused(&h, "id is not a backup id");
  }

  hman_std(&h);
  snprintf(h.created, sizeof h.created, "0");
  refused(&h, "created_at_ms is not a time");
  hman_std(&h);
  snprintf(h.created, sizeof h.created, "-5");
  refused(&h, "created_at_ms is not a time");
  hman_std(&h);
  snprintf(h.created, sizeof h.created, "\"%lld\"", MS);
  refused(&h, "created_at_ms is not a time");

  static const char *const bad_hex[] = {"\"00112233445566778899aabbccddeefg\"", /* g */
                                        "\"00112233445566778899AABBCCDDEEFF\"", /* upper case */
                                        "\"00112233445566778899aabbccddeef\"",  /* 31 */
                                        "\"00112233445566778899aabbccddeeff0\"", "\"\"", "7"};
  for (size_t i = 0; i < sizeof bad_hex / sizeof *bad_hex; i++) {
    hman_std(&h);
    snprintf(h.store_id, sizeof h.store_id, "%s", bad_hex[i]);
    refused(&h, "store_id is not 32 hex digits");
    hman_std(&h);
    snprintf(h.writer, sizeof h.writer, "%s", bad_hex[i]);
    refused(&h, "writer is not 32 hex digits");
  }
}

Test(backup_manifest, refuses_bad_names_kinds_and_keys) {
  hman_t h;
  static const char *const bad_names[] = {"sub/CURRENT", "..", ".", ".hidden", "../CURRENT", "a b", "a\\\\b", "",
                                          "caf\\u00e9"};
  for (size_t i = 0; i < sizeof bad_names / sizeof *bad_names; i++) {
    hman_std(&h);
    snprintf(h.files[4].name, sizeof h.files[4].name, "\"%s\"", bad_names[i]);
    snprintf(h.files[4].key, sizeof h.files[4].key, "\"%s/%s\"", ID, bad_names[i]);
    refused(&h, "files[4].name is not a bare file name");
  }
  /* 127 characters is a name, 128 is not */
  char longname[130];
  memset(longname, 'a', 128);
  longname[128] = '\0';
  hman_std(&h);
  snprintf(h.files[4].name, sizeof h.files[4].name, "\"%s\"", longname);
  snprintf(h.files[4].key, sizeof h.files[4].key, "\"%s/%s\"", ID, longname);
  refused(&h, "files[4].name is not a bare file name");
  longname[127] = '\0';
  hman_std(&h);
  snprintf(h.files[4].name, sizeof h.files[4].name, "\"%s\"", longname);
  snprintf(h.files[4].key, sizeof h.files[4].key, "\"%s/%s\"", ID, longname);
  ak_backup_manifest_t m;
  char why[256];
  cr_assert_eq(hman_decode(&h, &m, why, sizeof why), 0, "%s", why);
  cr_assert_str_eq(m.files[4].name, longname);
  ak_backup_manifest_clear(&m);
  /* a name that is no string, or absent */
  hman_std(&h);
  snprintf(h.files[1].name, sizeof h.files[1].name, "7");
  refused(&h, "files[1].name is not a bare file name");
  hman_std(&h);
  h.files[1].no_name = true;
  refused(&h, "files[1].name is not a bare file name");

  /* kind: shared for .sst/.blob, private else */
  hman_std(&h);
  snprintf(h.files[0].kind, sizeof h.files[0].kind, "\"private\"");
  refused(&h, "files[0].kind does not fit 000012.sst");
  hman_std(&h);
  snprintf(h.files[1].kind, sizeof h.files[1].kind, "\"private\"");
  refused(&h, "files[1].kind does not fit 000013.blob");
  hman_std(&h);
  snprintf(h.files[3].kind, sizeof h.files[3].kind, "\"shared\"");
  refused(&h, "files[3].kind does not fit CURRENT");
  hman_std(&h);
  snprintf(h.files[5].kind, sizeof h.files[5].kind, "\"shared\"");
  refused(&h, "files[5].kind does not fit 000014.log");
  hman_std(&h);
  snprintf(h.files[0].kind, sizeof h.files[0].kind, "\"Shared\"");
  refused(&h, "files[0].kind does not fit");
  hman_std(&h);
  h.files[2].no_kind = true;
  refused(&h, "files[2].kind does not fit");

  /* key: derived from name and sha256 (shared), or id and name (private) */
  char sha[65];
  sha_of("000012.sst", sha);
  struct {
    size_t i;
    char key[256];
  } keys[] = {
      {0, ""}, /* the four shared ones are filled below */
      {0, ""},
      {0, ""},
      {0, ""},
      {3, "01KBG0Z1ABCDEFGHJKMNPQRSTW/CURRENT"},  /* another backup's */
      {3, "01KBG0Z1ABCDEFGHJKMNPQRSTV/CURRENT/"}, /* a byte more */
      {3, "01KBG0Z1ABCDEFGHJKMNPQRSTV/MANIFEST-000005"},
      {3, "CURRENT"},
      {3, "sst/0000000000000000-CURRENT"},
  };
  snprintf(keys[0].key, sizeof keys[0].key, "sst/%.15s-000012.sst", sha); /* 15 digits of the sha */
  snprintf(keys[1].key, sizeof keys[1].key, "sst/%.16s-000013.sst", sha); /* another name */
  snprintf(keys[2].key, sizeof keys[2].key, "%s/000012.sst", ID);         /* a private key */
  snprintf(keys[3].key, sizeof keys[3].key, "sst/%.16s-000012.sst", "ffffffffffffffff"); /* another sha */
  for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
    hman_std(&h);
    snprintf(h.files[keys[k].i].key, sizeof h.files[0].key, "\"%s\"", keys[k].key);
    char want[64];
    snprintf(want, sizeof want, "files[%zu].key is not", keys[k].i);
    refused(&h, want);
  }
  hman_std(&h);
  h.files[5].no_key = true;
  refused(&h, "files[5].key is not 000014.log's key");
}

Test(backup_manifest, refuses_bad_sizes_and_sha256) {
  hman_t h;
  static const char *const bad_sizes[] = {"-1", "-9223372036854775808", "1.5", "\"10\"", "null", "true"};
  for (size_t i = 0; i < sizeof bad_sizes / sizeof *bad_sizes; i++) {
    hman_std(&h);
    snprintf(h.files[2].size, sizeof h.files[2].size, "%s", bad_sizes[i]);
    refused(&h, "files[2].size is not a size");
  }
  hman_std(&h);
  h.files[2].no_size = true;
  refused(&h, "files[2].size is not a size");

  char sha[65];
  sha_of("CURRENT", sha);
  char bad[6][80];
  snprintf(bad[0], sizeof bad[0], "\"%.63s\"", sha);      /* 63 digits */
  snprintf(bad[1], sizeof bad[1], "\"%s0\"", sha);        /* 65 */
  snprintf(bad[2], sizeof bad[2], "\"%.63sg\"", sha);     /* not hex */
  snprintf(bad[3], sizeof bad[3], "\"%s\"", sha);         /* upper case, below */
  for (char *p = bad[3]; *p; p++)
    if (*p >= 'a' && *p <= 'f') *p = (char)(*p - 32);
  snprintf(bad[4], sizeof bad[4], "\"\"");
  snprintf(bad[5], sizeof bad[5], "12");
  for (size_t i = 0; i < 6; i++) {
    hman_std(&h);
    /* a private file: its key does not depend on the sha256, so only the sha256 is wrong */
    snprintf(h.files[3].sha, sizeof h.files[3].sha, "%s", bad[i]);
    refused(&h, "files[3].sha256 is not 64 hex digits");
  }
  hman_std(&h);
  h.files[3].no_sha = true;
  refused(&h, "files[3].sha256 is not 64 hex digits");
}

Test(backup_manifest, refuses_duplicates_no_current_no_files) {
  hman_t h;
  /* a name twice (same entry twice, and the same name with another size) */
  hman_std(&h);
  h.files[h.nfiles++] = h.files[4];
  refused(&h, "files[6]: OPTIONS-000007 is listed twice");
  hman_std(&h);
  hfile_std(&h.files[h.nfiles++], ID, "000012.sst", 7);
  refused(&h, "files[6]: 000012.sst is listed twice");
  /* no CURRENT */
  hman_std(&h);
  h.files[3] = h.files[5];
  h.nfiles = 5;
  refused(&h, "no CURRENT in its files");
  /* "current" is not CURRENT */
  hman_std(&h);
  hfile_std(&h.files[3], ID, "current", 1);
  refused(&h, "no CURRENT in its files");
  /* no files: an empty list, no list, not a list */
  hman_std(&h);
  h.nfiles = 0;
  refused(&h, "files is not a list of files");
  hman_std(&h);
  static char body[8192];
  hman_body(&h, body, sizeof body);
  char *files = strstr(body, ",\"files\":");
  snprintf(files, sizeof body - (size_t)(files - body), "}");
  size_t len;
  char *text = sign_body(body, KEY, KEYLEN, &len);
  char why[256];
  cr_assert_eq(decode_copy(text, len, KEY, KEYLEN, why, sizeof why), -1);
  cr_assert(strstr(why, "files is not a list of files"), "%s", why);
  free(text);
  snprintf(files, sizeof body - (size_t)(files - body), ",\"files\":{\"name\":\"CURRENT\"}}");
  text = sign_body(body, KEY, KEYLEN, &len);
  cr_assert_eq(decode_copy(text, len, KEY, KEYLEN, why, sizeof why), -1);
  cr_assert(strstr(why, "files is not a list of files"), "%s", why);
  free(text);
}

Test(backup_manifest, refuses_signed_text_that_is_not_a_manifest_object) {
  char why[256];
  size_t len;
  /* not JSON behind a good signature */
  char *text = sign_body("{\"version\":1,}", KEY, KEYLEN, &len);
  cr_assert_eq(decode_copy(text, len, KEY, KEYLEN, why, sizeof why), -1);
  cr_assert(strstr(why, "not JSON"), "%s", why);
  free(text);
  /* a member twice: the second "id" would be what a reader that takes the last one sees */
  hman_t h;
  hman_std(&h);
  static char body[8192];
  hman_body(&h, body, sizeof body);
  char *dup = NULL;
  cr_assert(asprintf(&dup, "%.*s,\"id\":\"01KBG0Z1ABCDEFGHJKMNPQRSTW\"}", (int)strlen(body) - 1, body) > 0);
  text = sign_body(dup, KEY, KEYLEN, &len);
  cr_assert_eq(decode_copy(text, len, KEY, KEYLEN, why, sizeof why), -1);
  cr_assert(strstr(why, "not JSON"), "%s", why);
  free(text);
  free(dup);
  /* a second signature member inside the signed part */
  cr_assert(asprintf(&dup, "%.*s,\"signature\":\"x\"}", (int)strlen(body) - 1, body) > 0);
  text = sign_body(dup, KEY, KEYLEN, &len);
  cr_assert_eq(decode_copy(text, len, KEY, KEYLEN, why, sizeof why), -1);
  free(text);
  free(dup);
  /* a text that does not start with '{' */
  text = sign_body("{\"version\":1}", KEY, KEYLEN, &len);
  text[0] = ' ';
  cr_assert_eq(decode_copy(text, len, KEY, KEYLEN, why, sizeof why), -1);
  cr_assert(strstr(why, "not a signed manifest"), "%s", why);
  free(text);
}

/* ---- ids ----------------------------------------------------------------------------- */

static int crock_val(char c) {
  static const char alpha[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
  const char *p = c ? strchr(alpha, c) : NULL;
  return p ? (int)(p - alpha) : -1;
}

static int64_t id_ms(const char *id) {
  int64_t v = 0;
  for (int i = 0; i < 10; i++) v = v * 32 + crock_val(id[i]);
  return v;
}

static void assert_id_form(const char *id) {
  cr_assert_eq(strlen(id), AK_BACKUP_ID_LEN, "%s", id);
  for (int i = 0; i < AK_BACKUP_ID_LEN; i++) cr_assert(crock_val(id[i]) >= 0, "%s: char %d", id, i);
  cr_assert(id[0] >= '0' && id[0] <= '7', "%s", id);
  cr_assert(ak_backup_id_ok(id, strlen(id)), "%s", id);
}

Test(backup_manifest, new_id_is_a_ulid_of_the_ms) {
  char id[AK_BACKUP_ID_LEN + 1], other[AK_BACKUP_ID_LEN + 1];
  const int64_t times[] = {0, 1, MS, 1469918176385ll, (1ll << 48) - 1};
  for (size_t t = 0; t < sizeof times / sizeof *times; t++) {
    ak_backup_new_id(times[t], id);
    assert_id_form(id);
    cr_assert_eq(id_ms(id), times[t], "%s: %lld", id, (long long)times[t]);
  }
  /* the ULID spec's example time */
  ak_backup_new_id(1469918176385ll, id);
  cr_assert_eq(strncmp(id, "01ARYZ6S41", 10), 0, "%s", id);
  ak_backup_new_id(0, id);
  cr_assert_eq(strncmp(id, "0000000000", 10), 0, "%s", id);
  ak_backup_new_id((1ll << 48) - 1, id);
  cr_assert_eq(strncmp(id, "7ZZZZZZZZZ", 10), 0, "%s", id);
  /* two ids of one ms differ (in their random part), and the random part is not constant */
  bool last_varies = false;
  for (int i = 0; i < 64; i++) {
    ak_backup_new_id(MS, id);
    ak_backup_new_id(MS, other);
    assert_id_form(other);
    cr_assert_eq(strncmp(id, other, 10), 0);
    cr_assert_str_neq(id, other);
    if (id[AK_BACKUP_ID_LEN - 1] != other[AK_BACKUP_ID_LEN - 1]) last_varies = true;
  }
  cr_assert(last_varies, "the last character is random too");
  /* ids of increasing ms sort in that order (as text: the keys list in time order) */
  char prev[AK_BACKUP_ID_LEN + 1];
  ak_backup_new_id(MS, prev);
  const int64_t steps[] = {1, 1, 31, 32, 1000, 86400000ll, 1ll << 35, 1ll << 40};
  int64_t ms = MS;
  for (size_t i = 0; i < sizeof steps / sizeof *steps; i++) {
    ms += steps[i];
    ak_backup_new_id(ms, id);
    cr_assert(strcmp(prev, id) < 0, "%s then %s", prev, id);
    memcpy(prev, id, sizeof prev);
  }
  for (int64_t m = 0; m < 2000; m++) {
    char a[AK_BACKUP_ID_LEN + 1], b[AK_BACKUP_ID_LEN + 1];
    ak_backup_new_id(MS + m * 977, a);
    ak_backup_new_id(MS + m * 977 + 1, b);
    cr_assert(strcmp(a, b) < 0, "%s then %s", a, b);
  }
}

Test(backup_manifest, id_ok) {
  cr_assert(ak_backup_id_ok(ID, strlen(ID)));
  cr_assert(ak_backup_id_ok("00000000000000000000000000", 26));
  cr_assert(ak_backup_id_ok("7ZZZZZZZZZZZZZZZZZZZZZZZZZ", 26));
  cr_assert_not(ak_backup_id_ok("8ZZZZZZZZZZZZZZZZZZZZZZZZZ", 26));
  cr_assert_not(ak_backup_id_ok(ID, 25));
  cr_assert_not(ak_backup_id_ok(ID "0", 27));
  cr_assert_not(ak_backup_id_ok("01KBG0Z1ABCDEFGHJKMNPQRSTO", 26));
  cr_assert_not(ak_backup_id_ok("01KBG0Z1ABCDEFGHJKMNPQRSTL", 26));
  cr_assert_not(ak_backup_id_ok("01KBG0Z1ABCDEFGHJKMNPQRSTu", 26));
  cr_assert_not(ak_backup_id_ok("01kbg0z1abcdefghjkmnpqrstv", 26));
  /* a NUL inside the length */
  char nul[27];
  memcpy(nul, ID, 27);
  nul[12] = '\0';
  cr_assert_not(ak_backup_id_ok(nul, 26));
}

/* ---- LATEST -------------------------------------------------------------------------- */

Test(backup_manifest, latest_round_trip) {
  ak_backup_latest_t l, back;
  memset(&l, 0, sizeof l);
  ak_backup_new_id(MS, l.id);
  snprintf(l.store_id, sizeof l.store_id, STORE_ID);
  snprintf(l.writer, sizeof l.writer, WRITER);
  l.created_at_ms = MS;
  size_t len = 0;
  char *text = ak_backup_latest_encode(&l, &len);
  cr_assert_not_null(text);
  cr_assert_eq(strlen(text), len);
  char want[256];
  snprintf(want, sizeof want, "{\"id\":\"%s\",\"store_id\":\"%s\",\"writer\":\"%s\",\"created_at_ms\":%lld}", l.id,
           STORE_ID, WRITER, MS);
  cr_assert_str_eq(text, want);
  char why[256] = "";
  char *copy = malloc(len);
  memcpy(copy, text, len);
  cr_assert_eq(ak_backup_latest_decode(copy, len, &back, why, sizeof why), 0, "%s", why);
  cr_assert_str_eq(back.id, l.id);
  cr_assert_str_eq(back.store_id, l.store_id);
  cr_assert_str_eq(back.writer, l.writer);
  cr_assert_eq(back.created_at_ms, l.created_at_ms);
  free(copy);
  free(text);
  /* members in another order, with spaces and an extra member, read the same */
  snprintf(want, sizeof want,
           "{ \"created_at_ms\": %lld, \"writer\": \"%s\", \"extra\": [1], \"store_id\": \"%s\", \"id\": \"%s\" }\n", MS,
           WRITER, STORE_ID, l.id);
  cr_assert_eq(ak_backup_latest_decode(want, strlen(want), &back, why, sizeof why), 0, "%s", why);
  cr_assert_str_eq(back.id, l.id);
  cr_assert_eq(back.created_at_ms, MS);
}

static void latest_refused(const char *text, const char *want) {
  ak_backup_latest_t l;
  memset(&l, 0x5a, sizeof l);
  char why[256] = "";
  size_t n = strlen(text);
  char *copy = malloc(n ? n : 1);
  memcpy(copy, text, n);
  cr_assert_eq(ak_backup_latest_decode(copy, n, &l, why, sizeof why), -1, "accepted: %s", text);
  free(copy);
  cr_assert(strstr(why, want), "%s: why '%s' lacks '%s'", text, why, want);
  cr_assert_eq(l.id[0], '\0');
  cr_assert_eq(l.created_at_ms, 0);
}

Test(backup_manifest, latest_refusals) {
  char t[512];
  latest_refused("", "LATEST is not JSON");
  latest_refused("{", "LATEST is not JSON");
  latest_refused("{\"id\":\"" ID "\",}", "LATEST is not JSON");
  latest_refused("not json", "LATEST is not JSON");
  latest_refused("[]", "LATEST names no backup id");
  latest_refused("{}", "LATEST names no backup id");
  static const char *const bad_ids[] = {"01KBG0Z1ABCDEFGHJKMNPQRST", "01kbg0z1abcdefghjkmnpqrstv",
                                        "81KBG0Z1ABCDEFGHJKMNPQRSTV", "01KBG0Z1ABCDEFGHJKMNPQRSTU", ""};
  for (size_t i = 0; i < sizeof bad_ids / sizeof *bad_ids; i++) {
    snprintf(t, sizeof t, "{\"id\":\"%s\",\"store_id\":\"%s\",\"writer\":\"%s\",\"created_at_ms\":%lld}", bad_ids[i],
             STORE_ID, WRITER, MS);
    latest_refused(t, "LATEST names no backup id");
  }
  snprintf(t, sizeof t, "{\"id\":7,\"store_id\":\"%s\",\"writer\":\"%s\",\"created_at_ms\":%lld}", STORE_ID, WRITER, MS);
  latest_refused(t, "LATEST names no backup id");
  /* each of store_id, writer, created_at_ms missing or malformed */
  snprintf(t, sizeof t, "{\"id\":\"%s\",\"writer\":\"%s\",\"created_at_ms\":%lld}", ID, WRITER, MS);
  latest_refused(t, "LATEST lacks its store_id, writer or created_at_ms");
  snprintf(t, sizeof t, "{\"id\":\"%s\",\"store_id\":\"%s\",\"created_at_ms\":%lld}", ID, STORE_ID, MS);
  latest_refused(t, "LATEST lacks its store_id, writer or created_at_ms");
  snprintf(t, sizeof t, "{\"id\":\"%s\",\"store_id\":\"%s\",\"writer\":\"%s\"}", ID, STORE_ID, WRITER);
  latest_refused(t, "LATEST lacks its store_id, writer or created_at_ms");
  snprintf(t, sizeof t, "{\"id\":\"%s\",\"store_id\":\"%s\",\"writer\":\"%s\",\"created_at_ms\":\"%lld\"}", ID,
           STORE_ID, WRITER, MS);
  latest_refused(t, "LATEST lacks its store_id, writer or created_at_ms");
  snprintf(t, sizeof t, "{\"id\":\"%s\",\"store_id\":\"%.31s\",\"writer\":\"%s\",\"created_at_ms\":%lld}", ID,
           STORE_ID, WRITER, MS);
  latest_refused(t, "LATEST lacks its store_id, writer or created_at_ms");
  snprintf(t, sizeof t, "{\"id\":\"%s\",\"store_id\":\"%s\",\"writer\":\"%.31sZ\",\"created_at_ms\":%lld}", ID,
           STORE_ID, WRITER, MS);
  latest_refused(t, "LATEST lacks its store_id, writer or created_at_ms");
  /* the control: the same text with every field good */
  snprintf(t, sizeof t, "{\"id\":\"%s\",\"store_id\":\"%s\",\"writer\":\"%s\",\"created_at_ms\":%lld}", ID, STORE_ID,
           WRITER, MS);
  ak_backup_latest_t l;
  char why[256];
  cr_assert_eq(ak_backup_latest_decode(t, strlen(t), &l, why, sizeof why), 0, "%s", why);
  /* and cut short at every length */
  size_t n = strlen(t);
  for (size_t k = 0; k < n; k++) {
    char *copy = malloc(k ? k : 1);
    memcpy(copy, t, k);
    cr_assert_eq(ak_backup_latest_decode(copy, k, &l, why, sizeof why), -1, "cut to %zu accepted", k);
    free(copy);
  }
}

/* ---- names --------------------------------------------------------------------------- */

Test(backup_manifest, name_rules) {
  static const char *const ok[] = {"000012.sst", "000013.blob", "MANIFEST-000005", "CURRENT", "OPTIONS-000007",
                                   "000014.log", "LOG.old.1700000000000000", "a", "A_b-c.d", "x..y", "9"};
  for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) cr_assert(ak_backup_name_ok(ok[i]), "%s", ok[i]);
  static const char *const bad[] = {"", ".", "..", ".hidden", "../x", "a/b", "/abs", "a\\b", "a b", "a:b",
                                    "caf\xc3\xa9", "tab\t", "new\nline", "a*", "%2e%2e"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) cr_assert_not(ak_backup_name_ok(bad[i]), "'%s'", bad[i]);
  char n[AK_BACKUP_NAME_MAX + 1];
  memset(n, 'a', sizeof n);
  n[AK_BACKUP_NAME_MAX - 1] = '\0';
  cr_assert(ak_backup_name_ok(n), "127 characters");
  n[AK_BACKUP_NAME_MAX - 1] = 'a';
  n[AK_BACKUP_NAME_MAX] = '\0';
  cr_assert_not(ak_backup_name_ok(n), "128 characters");

  static const char *const shared[] = {"000012.sst", "000013.blob", "x.y.sst", ".sst"};
  for (size_t i = 0; i < sizeof shared / sizeof *shared; i++)
    cr_assert(ak_backup_name_shared(shared[i]), "%s", shared[i]);
  static const char *const priv[] = {"MANIFEST-000005", "CURRENT", "OPTIONS-000007", "000014.log", "x.sst.tmp",
                                     "x.SST", "sst", "blob", "x.blobs", "x_sst", ""};
  for (size_t i = 0; i < sizeof priv / sizeof *priv; i++)
    cr_assert_not(ak_backup_name_shared(priv[i]), "%s", priv[i]);

  static const char *const store[] = {"MANIFEST-000005", "CURRENT", "000012.sst", "000013.blob", "000014.log",
                                      "a.sst", "a.log", "a.blob"};
  for (size_t i = 0; i < sizeof store / sizeof *store; i++)
    cr_assert(ak_backup_is_store_file(store[i]), "%s", store[i]);
  static const char *const not_store[] = {AK_BACKUP_MARKER, "OPTIONS-000007", "LOG", "LOG.old.1", "LOCK",
                                          "IDENTITY", ".sst", ".log", ".blob", "x.sst.tmp", "manifest-000005",
                                          "CURRENT.tmp", "", ".", ".."};
  for (size_t i = 0; i < sizeof not_store / sizeof *not_store; i++)
    cr_assert_not(ak_backup_is_store_file(not_store[i]), "'%s'", not_store[i]);
}
