/* libFuzzer harness for the backup formats (backup/manifest.c): a manifest's text and
 * LATEST, both read back from a blob store (another writer's, or a tampered one's). The
 * input is used three ways:
 *  1. as a whole manifest text, decoded under a fixed key;
 *  2. as the body of one (the text before the signature member): the harness signs it
 *     itself, with OpenSSL's one-shot HMAC() over the body then "}", as the format says,
 *     so the field checks behind the signature are reached. Such a text is never refused
 *     for its signature;
 *  3. as a LATEST text.
 * Properties: no read past the input (exact-size heap copies, so ASan sees an overread);
 * a refused manifest comes back cleared with a why; a decoded one satisfies every rule of
 * manifest.h restated here (version 1, a ULID id, lowercase hex ids, bare names, kinds and
 * keys derived from name / id / sha256, sizes, no name twice, CURRENT present), and
 * encodes to a text that decodes to the same manifest, encodes to the same bytes again,
 * and is refused under another key; a decoded LATEST encodes and decodes to itself. */
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backup/manifest.h"

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "fuzz_backup_manifest: invariant failed at line %d: %s\n", __LINE__, #cond); \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)

static const uint8_t KEY[] = "fuzz-backup-signing-key-0123456789abcdef";
#define KEYLEN (sizeof KEY - 1)
static const uint8_t OTHER[] = "fuzz-backup-signing-key-0123456789abcdeF";
#define SIG_MEMBER ",\"signature\":\"hmac-sha256:"
#define CROCKFORD "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

static bool hex_ok(const char *s, size_t want) {
  if (strlen(s) != want) return false;
  for (size_t i = 0; i < want; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
  return true;
}

static bool id_ok(const char *s) {
  if (strlen(s) != AK_BACKUP_ID_LEN || s[0] < '0' || s[0] > '7') return false;
  for (size_t i = 0; i < AK_BACKUP_ID_LEN; i++)
    if (!strchr(CROCKFORD, s[i])) return false;
  return true;
}

static bool name_ok(const char *s) {
  size_t n = strlen(s);
  if (!n || n >= AK_BACKUP_NAME_MAX || s[0] == '.') return false;
  return strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

static bool ends(const char *s, const char *suf) {
  size_t n = strlen(s), m = strlen(suf);
  return n >= m && !strcmp(s + n - m, suf);
}

/* the rules a decoded manifest must satisfy, restated */
static void check_manifest(const ak_backup_manifest_t *m) {
  CHECK(m->version == 1);
  CHECK(id_ok(m->id));
  CHECK(m->created_at_ms > 0);
  CHECK(hex_ok(m->store_id, 32));
  CHECK(hex_ok(m->writer, 32));
  CHECK(m->nfiles > 0 && m->files);
  bool current = false;
  for (size_t i = 0; i < m->nfiles; i++) {
    const ak_backup_file_t *f = &m->files[i];
    CHECK(name_ok(f->name));
    CHECK(f->shared == (ends(f->name, ".sst") || ends(f->name, ".blob")));
    CHECK(hex_ok(f->sha256, 64));
    CHECK(f->size <= (uint64_t)INT64_MAX);
    char key[AK_BACKUP_KEY_MAX + 64];
    if (f->shared) snprintf(key, sizeof key, "sst/%.16s-%s", f->sha256, f->name);
    else snprintf(key, sizeof key, "%s/%s", m->id, f->name);
    CHECK(strcmp(key, f->key) == 0);
    for (size_t j = 0; j < i; j++) CHECK(strcmp(m->files[j].name, f->name) != 0);
    if (!strcmp(f->name, "CURRENT")) current = true;
  }
  CHECK(current);
}

static void check_cleared(const ak_backup_manifest_t *m, const char *why) {
  CHECK(m->files == NULL && m->nfiles == 0 && m->capfiles == 0 && m->id[0] == '\0');
  CHECK(why[0] != '\0');
}

static bool same(const ak_backup_manifest_t *a, const ak_backup_manifest_t *b) {
  if (a->version != b->version || strcmp(a->id, b->id) || a->created_at_ms != b->created_at_ms ||
      strcmp(a->store_id, b->store_id) || strcmp(a->writer, b->writer) || a->nfiles != b->nfiles)
    return false;
  for (size_t i = 0; i < a->nfiles; i++) {
    const ak_backup_file_t *x = &a->files[i], *y = &b->files[i];
    if (strcmp(x->name, y->name) || x->shared != y->shared || strcmp(x->key, y->key) || x->size != y->size ||
        strcmp(x->sha256, y->sha256))
      return false;
  }
  return true;
}

/* decode an exact-size copy of text[0..len) under key */
static int decode(const char *text, size_t len, const uint8_t *key, size_t keylen, ak_backup_manifest_t *m, char *why,
                  size_t whylen) {
  char *p = malloc(len ? len : 1);
  if (!p) abort();
  memcpy(p, text, len);
  why[0] = '\0';
  int rc = ak_backup_manifest_decode(p, len, key, keylen, m, why, whylen);
  free(p);
  if (rc != 0) check_cleared(m, why);
  return rc;
}

/* m decoded: re-encode, decode again, compare; the same bytes once more; another key refused */
static void round_trip(const ak_backup_manifest_t *m) {
  check_manifest(m);
  size_t len = 0, len2 = 0;
  char *text = ak_backup_manifest_encode(m, KEY, KEYLEN, &len);
  CHECK(text != NULL);
  CHECK(strlen(text) == len);
  ak_backup_manifest_t back;
  char why[256];
  int rc = decode(text, len, KEY, KEYLEN, &back, why, sizeof why);
  if (rc != 0) fprintf(stderr, "re-decode refused: %s\n%s\n", why, text);
  CHECK(rc == 0);
  CHECK(same(m, &back));
  char *again = ak_backup_manifest_encode(&back, KEY, KEYLEN, &len2);
  CHECK(again && len2 == len && memcmp(again, text, len) == 0);
  free(again);
  ak_backup_manifest_clear(&back);
  CHECK(decode(text, len, OTHER, sizeof OTHER - 1, &back, why, sizeof why) == -1);
  CHECK(strstr(why, "signature does not match") != NULL);
  free(text);
}

static void latest(const uint8_t *data, size_t size) {
  char *p = malloc(size ? size : 1);
  if (!p) abort();
  memcpy(p, data, size);
  ak_backup_latest_t l, back;
  char why[256] = "";
  int rc = ak_backup_latest_decode(p, size, &l, why, sizeof why);
  free(p);
  if (rc != 0) {
    CHECK(why[0] != '\0' && l.id[0] == '\0');
    return;
  }
  CHECK(id_ok(l.id) && hex_ok(l.store_id, 32) && hex_ok(l.writer, 32));
  size_t len = 0;
  char *text = ak_backup_latest_encode(&l, &len);
  CHECK(text && strlen(text) == len);
  CHECK(ak_backup_latest_decode(text, len, &back, why, sizeof why) == 0);
  CHECK(!strcmp(l.id, back.id) && !strcmp(l.store_id, back.store_id) && !strcmp(l.writer, back.writer) &&
        l.created_at_ms == back.created_at_ms);
  free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char why[256];
  ak_backup_manifest_t m;
  /* 1. the bytes as a manifest's text */
  if (decode((const char *)data, size, KEY, KEYLEN, &m, why, sizeof why) == 0) {
    round_trip(&m);
    ak_backup_manifest_clear(&m);
  }
  /* 2. the bytes as a body the harness signs: body SIG_MEMBER hex "}, the HMAC over body "}" */
  static const size_t pl = sizeof SIG_MEMBER - 1;
  char *text = malloc(size + pl + 64 + 2 + 1);
  if (!text) abort();
  memcpy(text, data, size);
  text[size] = '}';
  unsigned char md[32];
  unsigned int ml = 0;
  CHECK(HMAC(EVP_sha256(), KEY, (int)KEYLEN, (const unsigned char *)text, size + 1, md, &ml) && ml == 32);
  memcpy(text + size, SIG_MEMBER, pl);
  for (int i = 0; i < 32; i++) snprintf(text + size + pl + 2 * i, 3, "%02x", md[i]);
  memcpy(text + size + pl + 64, "\"}", 2);
  size_t len = size + pl + 64 + 2;
  if (decode(text, len, KEY, KEYLEN, &m, why, sizeof why) == 0) {
    round_trip(&m);
    ak_backup_manifest_clear(&m);
  } else if (size >= 2 && data[0] == '{') {
    /* signed with the key: never refused for its signature (a one-byte body, "{", is
     * below the shortest text decode looks at, and could not be JSON anyway) */
    CHECK(strncmp(why, "signature does not match", 24) != 0 && strncmp(why, "not a signed manifest", 21) != 0);
  }
  free(text);
  /* 3. the bytes as LATEST */
  latest(data, size);
  return 0;
}
