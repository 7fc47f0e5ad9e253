/* Secrets at rest (sealed.h): AES-256-GCM through OpenSSL EVP, a fresh 96-bit nonce from
 * RAND_bytes per value, the row and the value's position bound as additional data. */
#include <ctype.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/buf.h"
#include "core/sealed.h"

#define NONCE_LEN 12
#define TAG_LEN 16

/* ------------------------------------------------------------------ base64 ---- */

static bool b64_char(int c) { return isalnum(c) || c == '+' || c == '/'; }

/* Strict standard base64 (padding required): the decoded bytes into out (room for
 * len / 4 * 3), their count, or -1. */
static long b64_decode(const char *s, size_t len, uint8_t *out) {
  if (len == 0 || len % 4) return -1;
  size_t pad = (s[len - 1] == '=') + (len > 1 && s[len - 2] == '=');
  for (size_t i = 0; i < len - pad; i++)
    if (!b64_char((unsigned char)s[i])) return -1;
  int n = EVP_DecodeBlock(out, (const unsigned char *)s, (int)len);
  if (n < 0 || (size_t)n < pad) return -1;
  return (long)((size_t)n - pad);
}

/* ------------------------------------------------------------------ keys ---- */

void ak_sealed_key_from_bytes(const uint8_t k[AK_SEALED_KEY_LEN], ak_sealed_key_t *out) {
  memcpy(out->k, k, AK_SEALED_KEY_LEN);
  unsigned char md[32];
  unsigned int ml = 0;
  EVP_Digest(k, AK_SEALED_KEY_LEN, md, &ml, EVP_sha256(), NULL);
  for (int i = 0; i < AK_SEALED_KEY_ID_LEN / 2; i++) snprintf(out->id + 2 * i, 3, "%02x", md[i]);
}

int ak_sealed_key_parse(const char *text, ak_sealed_key_t *out) {
  if (!text) return -1;
  while (isspace((unsigned char)*text)) text++;
  size_t len = strlen(text);
  while (len && isspace((unsigned char)text[len - 1])) len--;
  if (len != 44) return -1; /* 32 bytes are 44 characters of base64 */
  uint8_t raw[33];
  long n = b64_decode(text, len, raw);
  int rc = -1;
  if (n == AK_SEALED_KEY_LEN) {
    ak_sealed_key_from_bytes(raw, out);
    rc = 0;
  }
  OPENSSL_cleanse(raw, sizeof raw);
  return rc;
}

void ak_sealed_keyring_clear(ak_sealed_keyring_t *kr) {
  if (kr->v) OPENSSL_cleanse(kr->v, kr->n * sizeof *kr->v);
  free(kr->v);
  kr->v = NULL;
  kr->n = 0;
}

bool ak_sealed_is_envelope(const char *s) {
  return s && !strncmp(s, AK_SEALED_PREFIX, strlen(AK_SEALED_PREFIX));
}

/* ------------------------------------------------------------------ one value ---- */

static int gcm(bool enc, const uint8_t key[32], const uint8_t nonce[NONCE_LEN], const void *aad, size_t aadl,
               const uint8_t *in, size_t inl, uint8_t *out, uint8_t tag[TAG_LEN]) {
  EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
  int ok = c && EVP_CipherInit_ex(c, EVP_aes_256_gcm(), NULL, NULL, NULL, enc) &&
           EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_IVLEN, NONCE_LEN, NULL) &&
           EVP_CipherInit_ex(c, NULL, NULL, key, nonce, enc);
  int l = 0;
  if (ok && aadl) ok = EVP_CipherUpdate(c, NULL, &l, aad, (int)aadl);
  if (ok && inl) ok = EVP_CipherUpdate(c, out, &l, in, (int)inl);
  if (ok && !enc) ok = EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, TAG_LEN, tag);
  if (ok) ok = EVP_CipherFinal_ex(c, out + (inl ? l : 0), &l); /* decrypt: the tag check */
  if (ok && enc) ok = EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, TAG_LEN, tag);
  EVP_CIPHER_CTX_free(c);
  return ok ? 0 : -1;
}

char *ak_sealed_seal(const ak_sealed_key_t *k, const void *aad, size_t aadl, const void *pt, size_t ptl) {
  if (ptl > (1u << 24)) return NULL;
  size_t bl = NONCE_LEN + ptl + TAG_LEN;
  uint8_t *blob = malloc(bl);
  size_t pl = strlen(AK_SEALED_PREFIX) + AK_SEALED_KEY_ID_LEN + 1;
  char *out = blob ? malloc(pl + 4 * ((bl + 2) / 3) + 1) : NULL;
  if (!out || RAND_bytes(blob, NONCE_LEN) != 1 ||
      gcm(true, k->k, blob, aad, aadl, pt, ptl, blob + NONCE_LEN, blob + NONCE_LEN + ptl) != 0) {
    free(blob);
    free(out);
    return NULL;
  }
  snprintf(out, pl + 1, "%s%s:", AK_SEALED_PREFIX, k->id);
  EVP_EncodeBlock((unsigned char *)out + pl, blob, (int)bl);
  free(blob);
  return out;
}

ak_sealed_rc_t ak_sealed_open(const ak_sealed_keyring_t *kr, const char *env, const void *aad, size_t aadl,
                              char **pt, size_t *ptl, char kid[AK_SEALED_KEY_ID_LEN + 1]) {
  *pt = NULL;
  *ptl = 0;
  if (kid) kid[0] = '\0';
  if (!ak_sealed_is_envelope(env)) return AK_SEALED_MALFORMED;
  const char *id = env + strlen(AK_SEALED_PREFIX), *colon = strchr(id, ':');
  if (!colon || colon - id != AK_SEALED_KEY_ID_LEN) return AK_SEALED_MALFORMED;
  if (kid) {
    memcpy(kid, id, AK_SEALED_KEY_ID_LEN);
    kid[AK_SEALED_KEY_ID_LEN] = '\0';
  }
  const ak_sealed_key_t *key = NULL;
  for (size_t i = 0; kr && i < kr->n && !key; i++)
    if (!memcmp(kr->v[i].id, id, AK_SEALED_KEY_ID_LEN)) key = &kr->v[i];
  const char *b = colon + 1;
  size_t len = strlen(b);
  uint8_t *blob = malloc(len / 4 * 3 + 3);
  if (!blob) return AK_SEALED_NOMEM;
  long bl = b64_decode(b, len, blob);
  ak_sealed_rc_t rc = AK_SEALED_OK;
  if (bl < NONCE_LEN + TAG_LEN) rc = AK_SEALED_MALFORMED;
  else if (!key) rc = AK_SEALED_UNKNOWN_KEY;
  if (rc != AK_SEALED_OK) {
    free(blob);
    return rc;
  }
  size_t n = (size_t)bl - NONCE_LEN - TAG_LEN;
  char *out = malloc(n + 1);
  if (!out) {
    free(blob);
    return AK_SEALED_NOMEM;
  }
  if (gcm(false, key->k, blob, aad, aadl, blob + NONCE_LEN, n, (uint8_t *)out, blob + NONCE_LEN + n) != 0) {
    OPENSSL_cleanse(out, n);
    free(out);
    free(blob);
    return AK_SEALED_FAILED;
  }
  out[n] = '\0';
  free(blob);
  *pt = out;
  *ptl = n;
  return AK_SEALED_OK;
}

const char *ak_sealed_rc_text(ak_sealed_rc_t rc) {
  switch (rc) {
  case AK_SEALED_OK: return "ok";
  case AK_SEALED_NOMEM: return "out of memory";
  case AK_SEALED_MALFORMED: return "not a sealed value of this format (enc:v1:<key id>:<base64>)";
  case AK_SEALED_UNKNOWN_KEY: return "sealed with a key id that matches no configured key";
  case AK_SEALED_FAILED: return "does not open with the key of its id (damaged, or moved from another row)";
  }
  return "?";
}

/* ------------------------------------------------------------------ a tree ---- */

/* "<context>\0<pointer>" */
static char *aad_of(const char *context, const char *pointer, size_t *len) {
  size_t cl = strlen(context), pl = strlen(pointer);
  char *a = malloc(cl + 1 + pl + 1);
  if (!a) return NULL;
  memcpy(a, context, cl + 1);
  memcpy(a + cl + 1, pointer, pl + 1);
  *len = cl + 1 + pl;
  return a;
}

typedef struct {
  const ak_sealed_key_t *key;
  const ak_sealed_keyring_t *ring;
  const char *context;
  ak_sealed_stats_t *st;
  bool fingerprint;
  uint8_t fpkey[32];
} walk_ctx_t;

static void note_failure(ak_sealed_stats_t *st, ak_sealed_rc_t rc, const char *pointer, const char *kid) {
  if (st->rc != AK_SEALED_OK) return;
  st->rc = rc;
  snprintf(st->pointer, sizeof st->pointer, "%s", pointer[0] ? pointer : "/");
  snprintf(st->kid, sizeof st->kid, "%s", kid ? kid : "");
}

/* One value sealed (or fingerprinted) as a whole. */
static json_t *seal_one(walk_ctx_t *w, const char *pointer, const json_t *v) {
  char *pt = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
  size_t al = 0;
  char *aad = pt ? aad_of(w->context, pointer, &al) : NULL;
  json_t *r = NULL;
  if (aad && w->fingerprint) {
    /* MAC of aad then the value: the positions are part of the state */
    size_t pl = strlen(pt), ml = 0;
    uint8_t *msg = malloc(al + 1 + pl), mac[32];
    if (msg) {
      memcpy(msg, aad, al + 1);
      memcpy(msg + al + 1, pt, pl);
      if (EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, w->fpkey, sizeof w->fpkey, msg, al + 1 + pl, mac,
                    sizeof mac, &ml) && ml == sizeof mac) {
        char hex[5 + 64 + 1] = "hmac:";
        for (int i = 0; i < 32; i++) snprintf(hex + 5 + 2 * i, 3, "%02x", mac[i]);
        r = json_string(hex);
      }
      OPENSSL_cleanse(msg, al + 1 + pl);
      free(msg);
    }
  } else if (aad) {
    char *env = ak_sealed_seal(w->key, aad, al, pt, strlen(pt));
    r = env ? json_string(env) : NULL;
    free(env);
  }
  if (r) w->st->values++;
  else note_failure(w->st, AK_SEALED_NOMEM, pointer, NULL);
  free(aad);
  if (pt) OPENSSL_cleanse(pt, strlen(pt));
  free(pt);
  return r;
}

static json_t *seal_fn(void *ctx, const char *pointer, const json_t *v, bool secret) {
  walk_ctx_t *w = ctx;
  if (secret && json_is_array(v)) {
    /* a list of secrets (verify.secret: [new, old]): each element on its own */
    json_t *out = json_array();
    size_t i;
    json_t *item;
    json_array_foreach(v, i, item) {
      char *p = NULL;
      if (asprintf(&p, "%s/%zu", pointer, i) < 0 || json_array_append_new(out, seal_one(w, p, item)) != 0) {
        free(p);
        json_decref(out);
        note_failure(w->st, AK_SEALED_NOMEM, pointer, NULL);
        return NULL;
      }
      free(p);
    }
    return out;
  }
  if (secret || (!w->fingerprint && ak_sealed_is_envelope(json_string_value(v)))) return seal_one(w, pointer, v);
  return json_copy((json_t *)v);
}

static bool init_ctx(walk_ctx_t *w, const ak_sealed_key_t *k, const char *context, ak_sealed_stats_t *st,
                     bool fingerprint) {
  memset(st, 0, sizeof *st);
  *w = (walk_ctx_t){.key = k, .context = context, .st = st, .fingerprint = fingerprint};
  if (!fingerprint) return true;
  /* a key of its own for fingerprints: a MAC never uses the sealing key directly */
  static const char label[] = "ankusa secrets at rest: audit fingerprint v1";
  size_t ml = 0;
  return EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, k->k, sizeof k->k, (const uint8_t *)label, sizeof label - 1,
                   w->fpkey, sizeof w->fpkey, &ml) && ml == sizeof w->fpkey;
}

json_t *ak_sealed_seal_tree(const ak_config_t *cfg, const ak_opt_t *rows, const ak_sealed_key_t *k,
                            const char *context, const json_t *tree, ak_sealed_stats_t *st) {
  walk_ctx_t w;
  init_ctx(&w, k, context, st, false);
  json_t *out = ak_config_map_secrets(cfg, tree, rows, seal_fn, &w);
  if (!out && st->rc == AK_SEALED_OK) st->rc = AK_SEALED_NOMEM;
  return out;
}

json_t *ak_sealed_fingerprint_tree(const ak_config_t *cfg, const ak_opt_t *rows, const ak_sealed_key_t *k,
                                   const char *context, const json_t *tree) {
  walk_ctx_t w;
  ak_sealed_stats_t st;
  json_t *out = init_ctx(&w, k, context, &st, true) ? ak_config_map_secrets(cfg, tree, rows, seal_fn, &w) : NULL;
  OPENSSL_cleanse(w.fpkey, sizeof w.fpkey);
  return out;
}

/* The same pointers as the config walk: RFC 6901, "~" and "/" escaped in keys. */
static json_t *open_node(walk_ctx_t *w, const json_t *v, ak_buf_t *path) {
  if (json_is_object(v)) {
    json_t *out = json_object();
    const char *k;
    json_t *item;
    json_object_foreach((json_t *)v, k, item) {
      size_t at = path->len;
      ak_buf_puts(path, "/");
      for (const char *c = k; *c; c++) {
        if (*c == '~') ak_buf_puts(path, "~0");
        else if (*c == '/') ak_buf_puts(path, "~1");
        else ak_buf_append(path, c, 1);
      }
      json_t *r = open_node(w, item, path);
      if (path->p) path->p[path->len = at] = '\0';
      if (!r || json_object_set_new(out, k, r) != 0) {
        json_decref(out);
        return NULL;
      }
    }
    return out;
  }
  if (json_is_array(v)) {
    json_t *out = json_array();
    size_t i;
    json_t *item;
    json_array_foreach(v, i, item) {
      size_t at = path->len;
      ak_buf_printf(path, "/%zu", i);
      json_t *r = open_node(w, item, path);
      if (path->p) path->p[path->len = at] = '\0';
      if (!r || json_array_append_new(out, r) != 0) {
        json_decref(out);
        return NULL;
      }
    }
    return out;
  }
  const char *s = json_string_value(v);
  if (!ak_sealed_is_envelope(s)) return json_copy((json_t *)v);
  const char *pointer = path->failed ? "?" : path->p ? path->p : "";
  size_t al = 0, ptl = 0;
  char *aad = aad_of(w->context, pointer, &al), *pt = NULL, kid[AK_SEALED_KEY_ID_LEN + 1];
  ak_sealed_rc_t rc = aad ? ak_sealed_open(w->ring, s, aad, al, &pt, &ptl, kid) : AK_SEALED_NOMEM;
  free(aad);
  json_t *r = NULL;
  if (rc == AK_SEALED_OK) {
    r = json_loadb(pt, ptl, JSON_DECODE_ANY, NULL);
    OPENSSL_cleanse(pt, ptl);
    free(pt);
    if (!r) rc = AK_SEALED_MALFORMED;
  }
  if (rc != AK_SEALED_OK) {
    note_failure(w->st, rc, pointer, kid);
    return NULL;
  }
  w->st->values++;
  if (w->ring && w->ring->n && memcmp(kid, w->ring->v[0].id, AK_SEALED_KEY_ID_LEN) != 0) w->st->stale++;
  return r;
}

json_t *ak_sealed_open_tree(const ak_sealed_keyring_t *kr, const char *context, const json_t *tree,
                            ak_sealed_stats_t *st) {
  walk_ctx_t w;
  init_ctx(&w, NULL, context, st, false);
  w.ring = kr;
  ak_buf_t path = AK_BUF_INIT;
  json_t *out = open_node(&w, tree, &path);
  ak_buf_free(&path);
  if (!out && st->rc == AK_SEALED_OK) st->rc = AK_SEALED_NOMEM;
  return out;
}
