/* Backup manifests and LATEST: the text, its signature and its checks (manifest.h). */
#include "backup/manifest.h"
#include <jansson.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/buf.h"

static const char crockford[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
#define SIG_PREFIX ",\"signature\":\"hmac-sha256:"

static void why_set(char *why, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void why_set(char *why, size_t n, const char *fmt, ...) {
  if (!why || !n) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, n, fmt, ap);
  va_end(ap);
}

bool ak_backup_id_ok(const char *s, size_t n) {
  if (n != AK_BACKUP_ID_LEN || s[0] > '7') return false; /* 48 bits of time: the first char is 0-7 */
  for (size_t i = 0; i < n; i++)
    if (!strchr(crockford, s[i]) || !s[i]) return false;
  return true;
}

void ak_backup_new_id(int64_t ms, char out[AK_BACKUP_ID_LEN + 1]) {
  uint8_t b[16];
  uint64_t t = (uint64_t)ms;
  for (int i = 0; i < 6; i++) b[i] = (uint8_t)(t >> (40 - 8 * i));
  if (RAND_bytes(b + 6, 10) != 1)
    for (int i = 6; i < 16; i++) b[i] = (uint8_t)rand();
  /* 128 bits as 26 base32 digits, the first holding the top 3 bits */
  for (int i = 0; i < AK_BACKUP_ID_LEN; i++) {
    int bit = 128 - 5 * (AK_BACKUP_ID_LEN - i); /* may be negative for i == 0 */
    unsigned v = 0;
    for (int k = 0; k < 5; k++) {
      int pos = bit + k;
      if (pos < 0) continue;
      v |= (unsigned)((b[pos / 8] >> (7 - pos % 8)) & 1) << (4 - k);
    }
    out[i] = crockford[v];
  }
  out[AK_BACKUP_ID_LEN] = '\0';
}

bool ak_backup_name_ok(const char *name) {
  size_t n = strlen(name);
  if (!n || n >= AK_BACKUP_NAME_MAX || name[0] == '.') return false;
  for (size_t i = 0; i < n; i++) {
    char c = name[i];
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
          c == '-'))
      return false;
  }
  return true;
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && !strcmp(s + n - m, suffix);
}

bool ak_backup_name_shared(const char *name) { return ends_with(name, ".sst") || ends_with(name, ".blob"); }

void ak_backup_file_key(const char *id, const char *name, bool shared, const char *sha256, char out[AK_BACKUP_KEY_MAX]) {
  if (shared) snprintf(out, AK_BACKUP_KEY_MAX, "sst/%.16s-%s", sha256, name);
  else snprintf(out, AK_BACKUP_KEY_MAX, "%s/%s", id, name);
}

static bool hex_ok(const char *s, size_t want) {
  if (strlen(s) != want) return false;
  for (size_t i = 0; i < want; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
  return true;
}

int ak_backup_manifest_add(ak_backup_manifest_t *m, const char *name, uint64_t size, const char *sha256) {
  if (!ak_backup_name_ok(name) || !hex_ok(sha256, 64)) return -1;
  if (ak_buf_grow(&m->files, &m->capfiles, m->nfiles + 1, sizeof *m->files) != 0) return -1;
  ak_backup_file_t *f = &m->files[m->nfiles++];
  memset(f, 0, sizeof *f);
  snprintf(f->name, sizeof f->name, "%s", name);
  f->shared = ak_backup_name_shared(name);
  f->size = size;
  memcpy(f->sha256, sha256, 65);
  ak_backup_file_key(m->id, name, f->shared, sha256, f->key);
  return 0;
}

void ak_backup_manifest_clear(ak_backup_manifest_t *m) {
  free(m->files);
  memset(m, 0, sizeof *m);
}

/* HMAC-SHA256 under key over a then "}" (the signed bytes: the text before the signature
 * member, then the closing brace), as hex. 0, or -1 when it cannot be computed (then
 * nothing is signed and nothing verifies). */
static int hmac_hex(const uint8_t *key, size_t keylen, const char *a, size_t alen, char out[65]) {
  static const char hexd[] = "0123456789abcdef";
  unsigned char md[EVP_MAX_MD_SIZE];
  static const uint8_t empty[1] = {0};
  EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
  EVP_MAC_CTX *ctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string("digest", (char *)"SHA256", 0), OSSL_PARAM_construct_end()};
  size_t outl = 0;
  int rc = ctx && EVP_MAC_init(ctx, key ? key : empty, keylen, params) == 1 &&
                   EVP_MAC_update(ctx, (const uint8_t *)a, alen) == 1 &&
                   EVP_MAC_update(ctx, (const uint8_t *)"}", 1) == 1 && EVP_MAC_final(ctx, md, &outl, sizeof md) == 1 &&
                   outl == 32
             ? 0
             : -1;
  EVP_MAC_CTX_free(ctx);
  EVP_MAC_free(mac);
  if (rc != 0) return -1;
  for (int i = 0; i < 32; i++) {
    out[2 * i] = hexd[md[i] >> 4];
    out[2 * i + 1] = hexd[md[i] & 15];
  }
  out[64] = '\0';
  return 0;
}

char *ak_backup_manifest_encode(const ak_backup_manifest_t *m, const uint8_t *key, size_t keylen, size_t *len) {
  json_t *files = json_array();
  for (size_t i = 0; files && i < m->nfiles; i++) {
    const ak_backup_file_t *f = &m->files[i];
    json_array_append_new(files, json_pack("{s:s, s:s, s:s, s:I, s:s}", "name", f->name, "kind",
                                           f->shared ? "shared" : "private", "key", f->key, "size",
                                           (json_int_t)f->size, "sha256", f->sha256));
  }
  json_t *o = json_pack("{s:i, s:s, s:I, s:s, s:s, s:o}", "version", m->version ? m->version : 1, "id", m->id,
                        "created_at_ms", (json_int_t)m->created_at_ms, "store_id", m->store_id, "writer", m->writer,
                        "files", files);
  char *body = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  json_decref(o);
  if (!body) return NULL;
  size_t bl = strlen(body); /* ends with '}' */
  char sig[65];
  if (hmac_hex(key, keylen, body, bl - 1, sig) != 0) {
    free(body);
    return NULL;
  }
  char *out = NULL;
  int n = asprintf(&out, "%.*s%s%s\"}", (int)(bl - 1), body, SIG_PREFIX, sig);
  free(body);
  if (n < 0) return NULL;
  *len = (size_t)n;
  return out;
}

static const char *str_at(json_t *o, const char *k) { return json_string_value(json_object_get(o, k)); }

int ak_backup_manifest_decode(const char *text, size_t len, const uint8_t *key, size_t keylen,
                              ak_backup_manifest_t *out, char *why, size_t whylen) {
  memset(out, 0, sizeof *out);
  /* the signature: the text ends with SIG_PREFIX HEX64 "}; what it covers is the text up
   * to SIG_PREFIX, then "}" */
  size_t pl = strlen(SIG_PREFIX), tail = pl + 64 + 2;
  if (len < tail + 2 || text[0] != '{' || memcmp(text + len - tail, SIG_PREFIX, pl) != 0 ||
      memcmp(text + len - 2, "\"}", 2) != 0) {
    why_set(why, whylen, "not a signed manifest (truncated, or no signature at its end)");
    return -1;
  }
  char got[65], want[65];
  memcpy(got, text + len - 66, 64);
  got[64] = '\0';
  if (hmac_hex(key, keylen, text, len - tail, want) != 0) {
    why_set(why, whylen, "cannot compute the signature (HMAC-SHA256 unavailable)");
    return -1;
  }
  if (CRYPTO_memcmp(got, want, 64) != 0) {
    why_set(why, whylen, "signature does not match (another backup.signing_key, or the manifest was changed)");
    return -1;
  }
  json_error_t je;
  json_t *o = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  int rc = -1;
  json_t *files = o ? json_object_get(o, "files") : NULL;
  json_int_t version = o ? json_integer_value(json_object_get(o, "version")) : 0;
  const char *id = o ? str_at(o, "id") : NULL, *sid = o ? str_at(o, "store_id") : NULL,
             *wr = o ? str_at(o, "writer") : NULL;
  json_t *ca = o ? json_object_get(o, "created_at_ms") : NULL;
  if (!o) why_set(why, whylen, "not JSON: %s", je.text);
  else if (version != AK_BACKUP_MANIFEST_VERSION)
    why_set(why, whylen, "version %lld is not one this build reads (%d)", (long long)version, AK_BACKUP_MANIFEST_VERSION);
  else if (!id || !ak_backup_id_ok(id, strlen(id))) why_set(why, whylen, "id is not a backup id");
  else if (!json_is_integer(ca) || json_integer_value(ca) <= 0) why_set(why, whylen, "created_at_ms is not a time");
  else if (!sid || !hex_ok(sid, 32)) why_set(why, whylen, "store_id is not 32 hex digits");
  else if (!wr || !hex_ok(wr, 32)) why_set(why, whylen, "writer is not 32 hex digits");
  else if (!json_is_array(files) || !json_array_size(files)) why_set(why, whylen, "files is not a list of files");
  else rc = 0;
  if (rc == 0) {
    out->version = (int)version;
    snprintf(out->id, sizeof out->id, "%s", id);
    out->created_at_ms = json_integer_value(ca);
    snprintf(out->store_id, sizeof out->store_id, "%s", sid);
    snprintf(out->writer, sizeof out->writer, "%s", wr);
    bool current = false;
    size_t i;
    json_t *f;
    json_array_foreach(files, i, f) {
      const char *name = str_at(f, "name"), *kind = str_at(f, "kind"), *k = str_at(f, "key"), *sha = str_at(f, "sha256");
      json_t *sz = json_object_get(f, "size");
      char dk[AK_BACKUP_KEY_MAX];
      if (!name || !ak_backup_name_ok(name)) why_set(why, whylen, "files[%zu].name is not a bare file name", i);
      else if (!kind || strcmp(kind, ak_backup_name_shared(name) ? "shared" : "private"))
        why_set(why, whylen, "files[%zu].kind does not fit %s", i, name);
      else if (!json_is_integer(sz) || json_integer_value(sz) < 0)
        why_set(why, whylen, "files[%zu].size is not a size", i);
      else if (!sha || !hex_ok(sha, 64)) why_set(why, whylen, "files[%zu].sha256 is not 64 hex digits", i);
      else if (ak_backup_file_key(id, name, ak_backup_name_shared(name), sha, dk), !k || strcmp(k, dk))
        why_set(why, whylen, "files[%zu].key is not %s's key", i, name);
      else {
        for (size_t j = 0; j < out->nfiles; j++)
          if (!strcmp(out->files[j].name, name)) {
            why_set(why, whylen, "files[%zu]: %s is listed twice", i, name);
            rc = -1;
          }
        if (rc == 0 && ak_backup_manifest_add(out, name, (uint64_t)json_integer_value(sz), sha) != 0) {
          why_set(why, whylen, "out of memory");
          rc = -1;
        }
        if (rc == 0) {
          if (!strcmp(name, "CURRENT")) current = true;
          continue;
        }
      }
      rc = -1;
      break;
    }
    if (rc == 0 && !current) {
      why_set(why, whylen, "no CURRENT in its files");
      rc = -1;
    }
  }
  json_decref(o);
  if (rc != 0) ak_backup_manifest_clear(out);
  return rc;
}

char *ak_backup_latest_encode(const ak_backup_latest_t *l, size_t *len) {
  json_t *o = json_pack("{s:s, s:s, s:s, s:I}", "id", l->id, "store_id", l->store_id, "writer", l->writer,
                        "created_at_ms", (json_int_t)l->created_at_ms);
  char *t = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  json_decref(o);
  if (t) *len = strlen(t);
  return t;
}

int ak_backup_latest_decode(const char *text, size_t len, ak_backup_latest_t *out, char *why, size_t whylen) {
  memset(out, 0, sizeof *out);
  json_error_t je;
  json_t *o = json_loadb(text, len, 0, &je);
  const char *id = o ? str_at(o, "id") : NULL, *sid = o ? str_at(o, "store_id") : NULL,
             *wr = o ? str_at(o, "writer") : NULL;
  json_t *ca = o ? json_object_get(o, "created_at_ms") : NULL;
  int rc = -1;
  if (!o) why_set(why, whylen, "LATEST is not JSON: %s", je.text);
  else if (!id || !ak_backup_id_ok(id, strlen(id))) why_set(why, whylen, "LATEST names no backup id");
  else if (!sid || !hex_ok(sid, 32) || !wr || !hex_ok(wr, 32) || !json_is_integer(ca))
    why_set(why, whylen, "LATEST lacks its store_id, writer or created_at_ms");
  else {
    snprintf(out->id, sizeof out->id, "%s", id);
    snprintf(out->store_id, sizeof out->store_id, "%s", sid);
    snprintf(out->writer, sizeof out->writer, "%s", wr);
    out->created_at_ms = json_integer_value(ca);
    rc = 0;
  }
  json_decref(o);
  return rc;
}
