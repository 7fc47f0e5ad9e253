/* Reference model of the verifiers, shared by fuzz_verify.c and fuzz_token.c: the rules of
 * docs/verification.md restated independently of src/verify (own header lookup, own
 * base64 / hex / percent decoding, own template assembly, one-shot HMAC() and
 * EVP_DigestVerify), so a harness can compare the verifier's answer with the answer the
 * documentation gives, not only watch for crashes.
 *
 * Limits that only the code states are restated here too: a candidate decoding to more
 * than 1024 bytes is not a candidate (AK_SIG_MAX_SIG_BYTES), and a timestamp has at most
 * 18 digits. Header names compare in ASCII case only; values are trimmed of spaces and
 * tabs. Not a header of the project: private to the harnesses. */
#ifndef FUZZ_VERIFY_REF_H
#define FUZZ_VERIFY_REF_H

#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "verify/verifier.h"

#define REF_CHECK(cond)                                                                           \
  do {                                                                                            \
    if (!(cond)) {                                                                                \
      fprintf(stderr, "%s: invariant failed at %s:%d: %s\n", FUZZ_NAME, __FILE__, __LINE__, #cond); \
      abort();                                                                                    \
    }                                                                                             \
  } while (0)

#define REF_MAX_CAND 1024   /* decoded candidate bytes */
#define REF_MAX_TS_DIGITS 18
#define REF_MAX_PARTS 24
#define REF_MAX_KEYS 4

typedef enum { RK_NONE, RK_HMAC, RK_ASYM, RK_TOKEN, RK_CERT } ref_kind_t;
typedef enum { RP_WHOLE, RP_CSV, RP_SPACE } ref_parse_t;
typedef enum { RL_BEARER, RL_BASIC, RL_HEADER, RL_QUERY } ref_loc_t;

/* One verifier: the JSON it is built from, and the same layout restated for the model. */
typedef struct {
  const char *label;
  const char *spec;             /* JSON, given to json_loads + ak_verifier_new */
  ref_kind_t kind;
  /* HMAC and asymmetric */
  const char *sig_header, *sig_prefix;
  ref_parse_t parse;
  const char *sig_key, *version;
  bool base64;                  /* else hex */
  const char *ts_header, *ts_pair;
  int64_t tolerance;
  const char *signed_tmpl;
  const char *hash;             /* HMAC digest name for EVP_get_digestbyname */
  bool whsec;                   /* HMAC: key = base64 after an optional "whsec_" */
  bool rsa_pss;                 /* asymmetric: RSA-PSS SHA-256, else Ed25519 */
  /* HMAC secrets, accepted tokens, asymmetric public keys (whpk_ or PEM), client_cert
   * pins (64 hex digits); NULL-terminated */
  const char *keys[REF_MAX_KEYS + 1];
  /* token */
  ref_loc_t loc;
  const char *header;           /* location header */
  const char *param;            /* location query */
} ref_def_t;

typedef enum { PT_LIT, PT_BODY, PT_TS, PT_HEADER } ref_part_kind_t;

typedef struct {
  ref_part_kind_t kind;
  const char *text;             /* into the template */
  size_t len;
} ref_part_t;

typedef struct {
  const ref_def_t *d;
  ref_part_t parts[REF_MAX_PARTS];
  size_t nparts;
  uint8_t key[REF_MAX_KEYS][512];
  size_t keylen[REF_MAX_KEYS];
  EVP_PKEY *pkey[REF_MAX_KEYS];
  size_t nkeys;
} ref_t;

typedef struct {
  const char *p;
  size_t n;
} span_t;

/* ------------------------------------------------------------------ text helpers ---- */

static span_t ref_trim(span_t s) {
  while (s.n && (s.p[0] == ' ' || s.p[0] == '\t')) s.p++, s.n--;
  while (s.n && (s.p[s.n - 1] == ' ' || s.p[s.n - 1] == '\t')) s.n--;
  return s;
}

static int ref_lower(int c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

static bool ref_name_eq(const char *a, size_t an, const char *b) {
  if (an != strlen(b)) return false;
  for (size_t i = 0; i < an; i++)
    if (ref_lower((unsigned char)a[i]) != ref_lower((unsigned char)b[i])) return false;
  return true;
}

/* The first header of that name, or NULL. */
static const ak_header_t *ref_header(const ak_verify_input_t *in, const char *name) {
  for (size_t i = 0; i < in->nheaders; i++)
    if (ref_name_eq(in->headers[i].name, in->headers[i].name_len, name)) return &in->headers[i];
  return NULL;
}

__attribute__((unused)) static bool ref_has_header(const ak_verify_input_t *in, const char *name) {
  return name && ref_header(in, name) != NULL;
}

/* Fields of s between separators, trimmed; empty ones skipped. *pos starts at 0. */
static bool ref_field(span_t s, char sep, size_t *pos, span_t *out) {
  while (*pos <= s.n) {
    size_t start = *pos, end = start;
    while (end < s.n && s.p[end] != sep) end++;
    *pos = end + 1;
    span_t f = ref_trim((span_t){s.p + start, end - start});
    if (f.n) {
      *out = f;
      return true;
    }
  }
  return false;
}

/* The next "key=value" field of a comma list whose trimmed key is key: its trimmed value. */
static bool ref_pair(span_t s, const char *key, size_t *pos, span_t *val) {
  span_t f;
  while (ref_field(s, ',', pos, &f)) {
    const char *eq = memchr(f.p, '=', f.n);
    if (!eq) continue;
    span_t k = ref_trim((span_t){f.p, (size_t)(eq - f.p)});
    if (k.n != strlen(key) || memcmp(k.p, key, k.n)) continue;
    *val = ref_trim((span_t){eq + 1, f.n - (size_t)(eq + 1 - f.p)});
    return true;
  }
  return false;
}

static int ref_hexdigit(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static bool ref_hex(span_t s, uint8_t *out, size_t cap, size_t *outlen) {
  if (s.n == 0 || s.n % 2 != 0 || s.n / 2 > cap) return false;
  for (size_t i = 0; i < s.n / 2; i++) {
    int hi = ref_hexdigit((unsigned char)s.p[2 * i]), lo = ref_hexdigit((unsigned char)s.p[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = (uint8_t)(hi * 16 + lo);
  }
  *outlen = s.n / 2;
  return true;
}

static int ref_b64digit(int c) {
  static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  if (!c) return -1;
  const char *p = strchr(alphabet, c);
  return p ? (int)(p - alphabet) : -1;
}

/* Standard base64: up to two '=' at the end, and then the length is a multiple of 4;
 * without padding, a multiple of 4 unless unpadded input is allowed (never 4k+1).
 * Nothing but the 64 symbols before the padding; at least one byte out. */
static bool ref_b64(span_t s, uint8_t *out, size_t cap, size_t *outlen, bool allow_unpadded) {
  size_t pad = 0;
  while (pad < 2 && pad < s.n && s.p[s.n - 1 - pad] == '=') pad++;
  if (pad && s.n % 4) return false;
  if (!pad && s.n % 4 && !allow_unpadded) return false;
  size_t m = s.n - pad;
  if (m % 4 == 1) return false;
  size_t len = m * 6 / 8;
  if (len == 0 || len > cap) return false;
  uint32_t acc = 0;
  int bits = 0;
  size_t o = 0;
  for (size_t i = 0; i < m; i++) {
    int v = ref_b64digit((unsigned char)s.p[i]);
    if (v < 0) return false;
    acc = (acc << 6) | (uint32_t)v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[o++] = (uint8_t)(acc >> bits);
    }
  }
  REF_CHECK(o == len);
  *outlen = len;
  return true;
}

/* '%' and two hex digits is one byte; any other '%' is an error; '+' stays '+'. */
static bool ref_percent(span_t s, uint8_t *out, size_t *outlen) {
  size_t o = 0;
  for (size_t i = 0; i < s.n;) {
    if (s.p[i] != '%') {
      out[o++] = (uint8_t)s.p[i++];
      continue;
    }
    if (s.n - i < 3) return false;
    int hi = ref_hexdigit((unsigned char)s.p[i + 1]), lo = ref_hexdigit((unsigned char)s.p[i + 2]);
    if (hi < 0 || lo < 0) return false;
    out[o++] = (uint8_t)(hi * 16 + lo);
    i += 3;
  }
  *outlen = o;
  return true;
}

/* ---------------------------------------------------------------------- set-up ---- */

static void ref_parse_template(ref_t *r, const char *t) {
  r->nparts = 0;
  for (const char *p = t; *p;) {
    REF_CHECK(r->nparts < REF_MAX_PARTS);
    ref_part_t *pt = &r->parts[r->nparts++];
    if (*p == '{') {
      const char *close = strchr(p, '}');
      REF_CHECK(close != NULL);
      size_t n = (size_t)(close - p - 1);
      if (n == 4 && !memcmp(p + 1, "body", 4)) *pt = (ref_part_t){PT_BODY, NULL, 0};
      else if (n == 2 && !memcmp(p + 1, "ts", 2)) *pt = (ref_part_t){PT_TS, NULL, 0};
      else {
        REF_CHECK(n > 7 && !memcmp(p + 1, "header:", 7));
        *pt = (ref_part_t){PT_HEADER, p + 8, n - 7};
      }
      p = close + 1;
    } else {
      size_t n = strcspn(p, "{");
      *pt = (ref_part_t){PT_LIT, p, n};
      p += n;
    }
  }
}

static EVP_PKEY *ref_public_key(const char *s) {
  if (!strncmp(s, "whpk_", 5)) {
    uint8_t raw[64];
    size_t rl = 0;
    REF_CHECK(ref_b64((span_t){s + 5, strlen(s + 5)}, raw, sizeof raw, &rl, true) && rl == 32);
    return EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, raw, rl);
  }
  BIO *bio = BIO_new_mem_buf(s, -1);
  EVP_PKEY *pk = bio ? PEM_read_bio_PUBKEY(bio, NULL, NULL, NULL) : NULL;
  BIO_free(bio);
  return pk;
}

static void ref_init(ref_t *r, const ref_def_t *d) {
  memset(r, 0, sizeof *r);
  r->d = d;
  if (d->kind == RK_HMAC || d->kind == RK_ASYM) ref_parse_template(r, d->signed_tmpl);
  for (size_t i = 0; i < REF_MAX_KEYS && d->keys[i]; i++, r->nkeys++) {
    const char *k = d->keys[i];
    size_t kl = strlen(k);
    switch (d->kind) {
    case RK_HMAC:
      if (d->whsec) {
        if (!strncmp(k, "whsec_", 6)) k += 6, kl -= 6;
        REF_CHECK(ref_b64((span_t){k, kl}, r->key[i], sizeof r->key[i], &r->keylen[i], true));
      } else {
        REF_CHECK(kl <= sizeof r->key[i]);
        memcpy(r->key[i], k, kl);
        r->keylen[i] = kl;
      }
      break;
    case RK_ASYM:
      REF_CHECK((r->pkey[i] = ref_public_key(k)) != NULL);
      break;
    case RK_TOKEN:
      REF_CHECK(kl <= sizeof r->key[i]);
      memcpy(r->key[i], k, kl);
      r->keylen[i] = kl;
      break;
    case RK_CERT:
      REF_CHECK(ref_hex((span_t){k, kl}, r->key[i], 32, &r->keylen[i]) && r->keylen[i] == 32);
      break;
    case RK_NONE: break;
    }
  }
}

/* ------------------------------------------------------------------- the model ---- */

static bool ref_decode_cand(const ref_def_t *d, span_t tok, uint8_t *out, size_t *outlen) {
  return d->base64 ? ref_b64(tok, out, REF_MAX_CAND, outlen, false) : ref_hex(tok, out, REF_MAX_CAND, outlen);
}

/* The next candidate text of the signature value (before decoding). */
static bool ref_next_cand(const ref_def_t *d, span_t sig, size_t *pos, span_t *tok) {
  switch (d->parse) {
  case RP_WHOLE:
    if (*pos) return false;
    *pos = 1;
    *tok = sig;
    return true;
  case RP_CSV:
    return ref_pair(sig, d->sig_key, pos, tok);
  case RP_SPACE: {
    span_t f;
    while (ref_field(sig, ' ', pos, &f)) {
      if (!d->version) {
        *tok = f;
        return true;
      }
      size_t vl = strlen(d->version);
      if (f.n > vl && !memcmp(f.p, d->version, vl) && f.p[vl] == ',') {
        *tok = (span_t){f.p + vl + 1, f.n - vl - 1};
        return true;
      }
    }
    return false;
  }
  }
  return false;
}

static bool ref_asym_verify(const ref_t *r, EVP_PKEY *pk, const uint8_t *sig, size_t sl, const uint8_t *msg,
                            size_t ml) {
  EVP_MD_CTX *md = EVP_MD_CTX_new();
  EVP_PKEY_CTX *pctx = NULL;
  bool ok = false;
  REF_CHECK(md != NULL);
  if (EVP_DigestVerifyInit(md, &pctx, r->d->rsa_pss ? EVP_sha256() : NULL, NULL, pk) == 1) {
    bool ready = !r->d->rsa_pss || (EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) == 1 &&
                                    EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, RSA_PSS_SALTLEN_AUTO) == 1);
    ok = ready && EVP_DigestVerify(md, sig, sl, msg, ml) == 1;
  }
  EVP_MD_CTX_free(md);
  ERR_clear_error();
  return ok;
}

/* HMAC and asymmetric: the algorithm of docs/verification.md, steps 1 to 5. */
static ak_verify_reason_t ref_sig(const ref_t *r, const ak_verify_input_t *in) {
  const ref_def_t *d = r->d;
  /* 1. the signature header */
  const ak_header_t *h = ref_header(in, d->sig_header);
  if (!h) return AK_VR_MISSING_SIGNATURE;
  span_t sig = ref_trim((span_t){h->value, h->value_len});
  if (!sig.n) return AK_VR_MISSING_SIGNATURE;
  /* 2. prefix, then at least one candidate that decodes */
  if (d->sig_prefix) {
    size_t pl = strlen(d->sig_prefix);
    if (sig.n < pl || memcmp(sig.p, d->sig_prefix, pl)) return AK_VR_MALFORMED_SIGNATURE;
    sig.p += pl;
    sig.n -= pl;
  }
  static uint8_t cand[REF_MAX_CAND];
  size_t pos = 0, cl;
  span_t tok;
  bool any = false;
  while (!any && ref_next_cand(d, sig, &pos, &tok)) any = ref_decode_cand(d, tok, cand, &cl);
  if (!any) return AK_VR_MALFORMED_SIGNATURE;
  /* 3. the timestamp */
  span_t ts = {NULL, 0};
  if (d->ts_header || d->ts_pair) {
    bool found = false;
    if (d->ts_header) {
      const ak_header_t *th = ref_header(in, d->ts_header);
      if (th) found = true, ts = ref_trim((span_t){th->value, th->value_len});
    } else {
      size_t p = 0;
      found = ref_pair(sig, d->ts_pair, &p, &ts);
    }
    if (!found || !ts.n) return AK_VR_MISSING_SIGNATURE;
    if (ts.n > REF_MAX_TS_DIGITS) return AK_VR_MALFORMED_SIGNATURE;
    __int128 v = 0;
    for (size_t i = 0; i < ts.n; i++) {
      if (ts.p[i] < '0' || ts.p[i] > '9') return AK_VR_MALFORMED_SIGNATURE;
      v = v * 10 + (ts.p[i] - '0');
    }
    __int128 diff = (__int128)in->now_s - v;
    if (diff < 0) diff = -diff;
    if (diff > d->tolerance) return AK_VR_TIMESTAMP_OUT_OF_TOLERANCE;
  }
  /* 4. every {header:NAME}, and the signed content */
  span_t hv[REF_MAX_PARTS];
  size_t total = 0;
  for (size_t i = 0; i < r->nparts; i++) {
    const ref_part_t *p = &r->parts[i];
    switch (p->kind) {
    case PT_LIT: total += p->len; break;
    case PT_BODY: total += in->body_len; break;
    case PT_TS: total += ts.n; break;
    case PT_HEADER: {
      char name[128];
      REF_CHECK(p->len < sizeof name);
      memcpy(name, p->text, p->len);
      name[p->len] = '\0';
      const ak_header_t *th = ref_header(in, name);
      if (!th) return AK_VR_MISSING_SIGNATURE;
      hv[i] = ref_trim((span_t){th->value, th->value_len});
      total += hv[i].n;
      break;
    }
    }
  }
  uint8_t *msg = malloc(total ? total : 1), *w = msg;
  REF_CHECK(msg != NULL);
  for (size_t i = 0; i < r->nparts; i++) {
    const ref_part_t *p = &r->parts[i];
    span_t s = p->kind == PT_LIT ? (span_t){p->text, p->len}
             : p->kind == PT_BODY ? (span_t){(const char *)in->body, in->body_len}
             : p->kind == PT_TS ? ts : hv[i];
    if (s.n) memcpy(w, s.p, s.n);
    w += s.n;
  }
  /* 5. any candidate against any secret / key */
  uint8_t mac[REF_MAX_KEYS][EVP_MAX_MD_SIZE];
  unsigned maclen[REF_MAX_KEYS] = {0};
  if (d->kind == RK_HMAC)
    for (size_t k = 0; k < r->nkeys; k++)
      REF_CHECK(HMAC(EVP_get_digestbyname(d->hash), r->key[k], (int)r->keylen[k], msg, total, mac[k],
                     &maclen[k]) != NULL);
  bool match = false;
  pos = 0;
  while (!match && ref_next_cand(d, sig, &pos, &tok)) {
    if (!ref_decode_cand(d, tok, cand, &cl)) continue;
    for (size_t k = 0; k < r->nkeys && !match; k++)
      match = d->kind == RK_HMAC ? (cl == maclen[k] && !memcmp(cand, mac[k], cl))
                                 : ref_asym_verify(r, r->pkey[k], cand, cl, msg, total);
  }
  free(msg);
  return match ? AK_VR_OK : AK_VR_NO_MATCH;
}

/* The presented token's bytes (decoded), or a failure reason. *buf is malloc'd when set. */
static ak_verify_reason_t ref_token_bytes(const ref_def_t *d, const ak_verify_input_t *in, uint8_t **buf,
                                          size_t *len) {
  *buf = NULL;
  span_t v;
  if (d->loc == RL_QUERY) {
    if (!in->query) return AK_VR_MISSING_SIGNATURE;
    span_t q = {in->query, in->query_len};
    bool found = false;
    size_t start = 0;
    while (!found && start < q.n) {
      size_t end = start;
      while (end < q.n && q.p[end] != '&') end++;
      span_t f = {q.p + start, end - start};
      start = end + 1;
      const char *eq = memchr(f.p, '=', f.n);
      size_t nl = eq ? (size_t)(eq - f.p) : f.n;
      if (nl == strlen(d->param) && !memcmp(f.p, d->param, nl)) {
        found = true;
        v = eq ? (span_t){eq + 1, f.n - nl - 1} : (span_t){f.p + f.n, 0};
      }
    }
    if (!found) return AK_VR_MISSING_SIGNATURE;
  } else {
    const ak_header_t *h = ref_header(in, d->loc == RL_HEADER ? d->header : "Authorization");
    if (!h) return AK_VR_MISSING_SIGNATURE;
    v = (span_t){h->value, h->value_len};
  }
  v = ref_trim(v);
  if (!v.n) return AK_VR_MISSING_SIGNATURE;
  if (d->loc == RL_BEARER || d->loc == RL_BASIC) {
    const char *scheme = d->loc == RL_BEARER ? "bearer" : "basic";
    size_t sl = strlen(scheme);
    if (v.n <= sl || !ref_name_eq(v.p, sl, scheme) || (v.p[sl] != ' ' && v.p[sl] != '\t'))
      return AK_VR_MALFORMED_SIGNATURE;
    v = ref_trim((span_t){v.p + sl, v.n - sl});
    if (!v.n) return AK_VR_MALFORMED_SIGNATURE;
  }
  *buf = malloc(v.n);
  REF_CHECK(*buf != NULL);
  bool ok = true;
  if (d->loc == RL_BASIC) ok = ref_b64(v, *buf, v.n, len, true) && memchr(*buf, ':', *len);
  else if (d->loc == RL_QUERY) ok = ref_percent(v, *buf, len);
  else memcpy(*buf, v.p, v.n), *len = v.n;
  if (!ok) {
    free(*buf);
    *buf = NULL;
    return AK_VR_MALFORMED_SIGNATURE;
  }
  return AK_VR_OK;
}

static ak_verify_reason_t ref_token(const ref_t *r, const ak_verify_input_t *in) {
  uint8_t *tok;
  size_t tl = 0;
  ak_verify_reason_t why = ref_token_bytes(r->d, in, &tok, &tl);
  if (why != AK_VR_OK) return why;
  bool match = false;
  for (size_t k = 0; k < r->nkeys; k++) match |= tl == r->keylen[k] && !memcmp(tok, r->key[k], tl);
  free(tok);
  return match ? AK_VR_OK : AK_VR_NO_MATCH;
}

/* What the verifier must answer for this request. */
static ak_verify_reason_t ref_expect(const ref_t *r, const ak_verify_input_t *in) {
  switch (r->d->kind) {
  case RK_NONE: return AK_VR_OK;
  case RK_HMAC:
  case RK_ASYM: return ref_sig(r, in);
  case RK_TOKEN: return ref_token(r, in);
  case RK_CERT: {
    if (!in->client_cert_sha256) return AK_VR_MISSING_SIGNATURE;
    for (size_t k = 0; k < r->nkeys; k++)
      if (!memcmp(in->client_cert_sha256, r->key[k], 32)) return AK_VR_OK;
    return AK_VR_NO_MATCH;
  }
  }
  return AK_VR_COUNT;
}

/* Builds the verifier from its JSON and checks the accessors against the definition. */
static ak_verifier_t *ref_build(const ref_def_t *d) {
  json_error_t jerr;
  json_t *spec = json_loads(d->spec, 0, &jerr);
  if (!spec) {
    fprintf(stderr, "%s: %s: spec is not JSON: %s\n", FUZZ_NAME, d->label, jerr.text);
    abort();
  }
  char err[256];
  ak_verifier_t *v = ak_verifier_new(spec, err, sizeof err);
  json_decref(spec);
  if (!v) {
    fprintf(stderr, "%s: %s: ak_verifier_new: %s\n", FUZZ_NAME, d->label, err);
    abort();
  }
  REF_CHECK(ak_verifier_is_none(v) == (d->kind == RK_NONE));
  REF_CHECK(ak_verifier_needs_client_cert(v) == (d->kind == RK_CERT));
  REF_CHECK(ak_verifier_weak_hash(v) == (d->kind == RK_HMAC && !strcmp(d->hash, "SHA1")));
  const char *ch = ak_verifier_credential_header(v), *cp = ak_verifier_credential_param(v);
  if (d->kind == RK_TOKEN && d->loc != RL_QUERY) {
    const char *want = d->loc == RL_HEADER ? d->header : "authorization";
    REF_CHECK(ch && ref_name_eq(ch, strlen(ch), want));
    for (const char *c = ch; *c; c++) REF_CHECK(!(*c >= 'A' && *c <= 'Z')); /* lowercase */
  } else {
    REF_CHECK(ch == NULL);
  }
  if (d->kind == RK_TOKEN && d->loc == RL_QUERY) REF_CHECK(cp && !strcmp(cp, d->param));
  else REF_CHECK(cp == NULL);
  return v;
}

static void ref_check_reason(ak_verify_reason_t got) {
  REF_CHECK((unsigned)got < AK_VR_COUNT);
  REF_CHECK(strcmp(ak_verify_reason_name(got), "unknown") != 0);
}

#endif
