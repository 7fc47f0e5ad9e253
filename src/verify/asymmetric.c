/* The asymmetric verifier (`asymmetric`: Ed25519, RSA PKCS#1 v1.5 or PSS with SHA-256)
 * and its preset `standard_webhooks_v1a`. It holds public keys only (whpk_ or PEM), up
 * to 8 for rotation, and shares the HMAC engine's layout (header, template, parse,
 * timestamp). Verification is EVP_DigestVerify over the assembled signed content.
 * Never accepts a key of the wrong kind for its algorithm, never logs a request. */
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/config.h"
#include "verify/sig_internal.h"

#define MIN_RSA_BITS 2048

/* The algorithm names in the order of alg_t: its row's enum_vals and create's reading. */
#define ALG_NAMES "ed25519|rsa_pkcs1_sha256|rsa_pss_sha256"
typedef enum { ALG_ED25519, ALG_RSA_PKCS1_SHA256, ALG_RSA_PSS_SHA256 } alg_t;

typedef struct {
  ak_sig_layout_t l;
  alg_t alg;
  EVP_PKEY *keys[AK_SIG_MAX_KEYS];
  size_t nkeys;
} asym_t;

static const ak_sig_desc_t v1a_layout = {
  .signature_header = "webhook-signature",
  .signed_tmpl = "{header:webhook-id}.{header:webhook-timestamp}.{body}",
  .parse = "space_versions",
  .version = "v1a",
  .encoding = "base64",
  .timestamp_header = "webhook-timestamp",
  .tolerance_seconds = AK_SIG_DEFAULT_TOLERANCE,
};

static void asym_destroy(void *self) {
  asym_t *a = self;
  if (!a) return;
  for (size_t i = 0; i < a->nkeys; i++) EVP_PKEY_free(a->keys[i]);
  ak_verify_sig_layout_clear(&a->l);
  free(a);
}

/* One public key: whpk_<base64 of 32 bytes> (Ed25519) or a PEM SubjectPublicKeyInfo. */
static EVP_PKEY *parse_key(const char *s, size_t n, alg_t alg, const char *label, char *err, size_t errlen) {
  EVP_PKEY *pk = NULL;
  if (n >= 5 && !memcmp(s, "whpk_", 5)) {
    uint8_t raw[64];
    size_t rl = 0;
    if (!ak_verify_b64_decode(s + 5, n - 5, raw, sizeof raw, &rl, true) || rl != 32) {
      snprintf(err, errlen, "%s: cannot be decoded: expected \"whpk_\" followed by the base64 of a "
                            "32-byte Ed25519 public key", label);
      return NULL;
    }
    pk = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, raw, rl);
  } else {
    BIO *bio = BIO_new_mem_buf(s, (int)n);
    if (bio) pk = PEM_read_bio_PUBKEY(bio, NULL, NULL, NULL);
    BIO_free(bio);
    if (!pk) {
      ERR_clear_error();
      snprintf(err, errlen, "%s: cannot be decoded: expected a PEM public key "
                            "(-----BEGIN PUBLIC KEY-----) or whpk_<base64>", label);
      return NULL;
    }
  }
  if (!pk) {
    ERR_clear_error();
    snprintf(err, errlen, "%s: not a usable Ed25519 public key", label);
    return NULL;
  }
  int id = EVP_PKEY_get_base_id(pk);
  bool fits = alg == ALG_ED25519 ? id == EVP_PKEY_ED25519
                                 : (id == EVP_PKEY_RSA || (alg == ALG_RSA_PSS_SHA256 && id == EVP_PKEY_RSA_PSS));
  if (!fits) {
    snprintf(err, errlen, "%s: the key type does not match algorithm %s", label,
             alg == ALG_ED25519 ? "ed25519" : alg == ALG_RSA_PKCS1_SHA256 ? "rsa_pkcs1_sha256" : "rsa_pss_sha256");
    EVP_PKEY_free(pk);
    return NULL;
  }
  if (alg != ALG_ED25519 && EVP_PKEY_get_bits(pk) < MIN_RSA_BITS) {
    snprintf(err, errlen, "%s: an RSA key of %d bits is too small; at least %d", label,
             EVP_PKEY_get_bits(pk), MIN_RSA_BITS);
    EVP_PKEY_free(pk);
    return NULL;
  }
  return pk;
}

static void *asym_create_with(const json_t *spec, bool preset, char *err, size_t errlen) {
  asym_t *a = calloc(1, sizeof *a);
  if (!a) {
    snprintf(err, errlen, "public_key: out of memory");
    return NULL;
  }
  ak_sig_desc_t d;
  if (preset) {
    d = v1a_layout;
    d.tolerance_seconds = ak_verify_spec_int(spec, "tolerance_seconds", AK_SIG_DEFAULT_TOLERANCE);
    a->alg = ALG_ED25519;
  } else {
    ak_verify_sig_desc_from_spec(&d, spec, &v1a_layout);
    const char *alg = ak_verify_spec_str(spec, "algorithm", "ed25519");
    int ai = alg ? ak_opt_enum_index(ALG_NAMES, alg) : -1;
    if (ai >= 0) a->alg = (alg_t)ai;
    else {
      snprintf(err, errlen, "algorithm: unknown value; expected one of ed25519, rsa_pkcs1_sha256, rsa_pss_sha256");
      free(a);
      return NULL;
    }
  }
  if (ak_verify_sig_layout_init(&a->l, &d, err, errlen) < 0) {
    free(a);
    return NULL;
  }
  ak_verify_secrets_t keys;
  if (ak_verify_secrets_load(spec, "public_key", &keys, err, errlen) != 0) {
    asym_destroy(a);
    return NULL;
  }
  for (size_t i = 0; i < keys.n; i++) {
    EVP_PKEY *pk = parse_key(keys.s[i], keys.len[i], a->alg, keys.label[i], err, errlen);
    if (!pk) {
      asym_destroy(a);
      return NULL;
    }
    a->keys[a->nkeys++] = pk;
  }
  return a;
}

static void copy_feed(void *ctx, const void *p, size_t n) {
  uint8_t **w = ctx;
  if (n) memcpy(*w, p, n);
  *w += n;
}

static bool verify_one(const asym_t *a, EVP_PKEY *pk, const uint8_t *sig, size_t siglen,
                       const uint8_t *msg, size_t msglen) {
  EVP_MD_CTX *md = EVP_MD_CTX_new();
  EVP_PKEY_CTX *pctx = NULL;
  bool ok = false;
  if (!md) return false;
  if (EVP_DigestVerifyInit_ex(md, &pctx, a->alg == ALG_ED25519 ? NULL : "SHA256", NULL, NULL, pk, NULL) == 1) {
    bool ready = true;
    if (a->alg == ALG_RSA_PSS_SHA256)
      /* AUTO recovers the salt length from the signature: the usual digest-length salt
       * and the maximum salt both verify. MGF1 follows the signature digest (SHA-256). */
      ready = EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) == 1 &&
              EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, RSA_PSS_SALTLEN_AUTO) == 1;
    else if (a->alg == ALG_RSA_PKCS1_SHA256)
      ready = EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PADDING) == 1;
    ok = ready && EVP_DigestVerify(md, sig, siglen, msg, msglen) == 1;
  }
  EVP_MD_CTX_free(md);
  return ok;
}

static ak_verify_reason_t asym_check(const void *self, const ak_verify_input_t *in) {
  const asym_t *a = self;
  ak_sig_req_t r;
  ak_verify_reason_t why = ak_verify_sig_prepare(&a->l, in, &r);
  if (why != AK_VR_OK) return why;
  /* Ed25519 is one-shot (no streaming), so the signed content is assembled once; a bare
   * {body} template verifies the body in place. */
  const uint8_t *msg = in->body ? in->body : (const uint8_t *)"";
  uint8_t *buf = NULL;
  if (!a->l.body_only) {
    buf = malloc(r.signed_len ? r.signed_len : 1);
    if (!buf) return AK_VR_NO_MATCH; /* fail closed */
    uint8_t *w = buf;
    ak_verify_sig_feed(&a->l, &r, in, copy_feed, &w);
    msg = buf;
  }
  bool match = false;
  uint8_t cand[AK_SIG_MAX_SIG_BYTES];
  size_t pos = 0, clen;
  while (!match && ak_verify_sig_next(&a->l, &r, &pos, cand, &clen))
    for (size_t i = 0; i < a->nkeys && !match; i++) match = verify_one(a, a->keys[i], cand, clen, msg, r.signed_len);
  free(buf);
  ERR_clear_error(); /* a failed verification leaves entries on this thread's error queue */
  return match ? AK_VR_OK : AK_VR_NO_MATCH;
}

static void *asym_create(const json_t *spec, char *err, size_t errlen) {
  return asym_create_with(spec, false, err, errlen);
}

static void *v1a_create(const json_t *spec, char *err, size_t errlen) {
  return asym_create_with(spec, true, err, errlen);
}

#define PUBLIC_KEY_ROW \
  {.key = "public_key", .type = AK_OPT_SECRETS, .flags = AK_OPTF_REQUIRED, \
   .doc = "public key (whpk_<base64> for Ed25519, or PEM), or a list of up to 8 for rotation; " \
          "not a secret"}
#define TOLERANCE_ROW \
  {.key = "tolerance_seconds", .type = AK_OPT_INT, .def = "300", .min = 1, .max = 3600, \
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX, \
   .doc = "how far (seconds, either way) a signed timestamp may be from now"}

static const ak_opt_t v1a_opts[] = {
  PUBLIC_KEY_ROW,
  TOLERANCE_ROW,
  {0},
};

static const ak_opt_t asym_opts[] = {
  {.key = "algorithm", .type = AK_OPT_ENUM, .def = "ed25519",
   .enum_vals = ALG_NAMES, .doc = "signature algorithm"},
  PUBLIC_KEY_ROW,
  {.key = "signature_header", .type = AK_OPT_STRING, .def = "webhook-signature", .min = 1,
   .flags = AK_OPTF_HAS_MIN, .doc = "header carrying the signature (any case)"},
  {.key = "signed", .type = AK_OPT_STRING, .def = "{header:webhook-id}.{header:webhook-timestamp}.{body}",
   .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "signed content: literal text with {body}, {ts} and {header:NAME}"},
  {.key = "parse", .type = AK_OPT_ENUM, .def = "space_versions", .enum_vals = AK_SIG_PARSE_NAMES,
   .doc = "how candidates are read from the header"},
  {.key = "sig_key", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "csv_pairs: key of the signature pairs (required with csv_pairs)"},
  {.key = "version", .type = AK_OPT_STRING, .def = "v1a", .min = 1, .flags = AK_OPTF_HAS_MIN | AK_OPTF_NULLABLE,
   .doc = "space_versions: keep tokens \"<version>,...\" (null: every token)"},
  {.key = "sig_prefix", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "whole: required prefix of the header value"},
  {.key = "encoding", .type = AK_OPT_ENUM, .def = "base64", .enum_vals = AK_SIG_ENC_NAMES,
   .doc = "encoding of the signature in the header"},
  {.key = "timestamp_header", .type = AK_OPT_STRING, .def = "webhook-timestamp", .min = 1,
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_NULLABLE,
   .doc = "header with the Unix timestamp, checked against the tolerance (null: no timestamp)"},
  TOLERANCE_ROW,
  {0},
};

const ak_verifier_vtable_t ak_verifier_asymmetric = {
  .plugin = {.type = "asymmetric", .options = asym_opts}, .create = asym_create, .check = asym_check,
  .destroy = asym_destroy};

const ak_verifier_vtable_t ak_verifier_standard_webhooks_v1a = {
  .plugin = {.type = "standard_webhooks_v1a", .options = v1a_opts}, .create = v1a_create, .check = asym_check,
  .destroy = asym_destroy};
