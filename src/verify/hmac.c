/* The HMAC engine and its presets (stripe, github, shopify, slack, standard_webhooks and
 * the custom `hmac` descriptor), plus the signature layout machinery the asymmetric
 * verifier shares (sig_internal.h): header lookup, candidate parsing, the timestamp rule
 * and the signed-content template. Keys live only as keyed digest states built once per
 * source (below); a check copies them, streams the signed content through the copy and
 * compares raw MAC bytes in constant time. Never logs, stores or returns a secret and
 * never copies the body. */
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "core/config.h"
#include "verify/sig_internal.h"
#include "verify/whsec.h"

/* ------------------------------------------------------------------ small helpers ---- */

static void trim(const char **s, size_t *n) {
  while (*n && ((*s)[0] == ' ' || (*s)[0] == '\t')) {
    (*s)++;
    (*n)--;
  }
  while (*n && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\t')) (*n)--;
}

const ak_header_t *ak_verify_find_header(const ak_verify_input_t *in, const char *name, size_t len) {
  for (size_t i = 0; i < in->nheaders; i++) {
    const ak_header_t *h = &in->headers[i];
    if (h->name_len == len && strncasecmp(h->name, name, len) == 0) return h;
  }
  return NULL;
}


int64_t ak_verify_spec_int(const json_t *spec, const char *key, int64_t def) {
  json_t *v = json_object_get(spec, key);
  return json_is_integer(v) ? json_integer_value(v) : def;
}

const char *ak_verify_spec_str(const json_t *spec, const char *key, const char *def) {
  json_t *v = json_object_get(spec, key);
  if (!v) return def;
  return json_string_value(v); /* null -> NULL: "not used" */
}

/* Unix seconds: digits only (no sign, no junk), at most 18 of them. */
static bool parse_ts(const char *s, size_t n, int64_t *out) {
  if (n == 0 || n > 18) return false;
  int64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + (s[i] - '0');
  }
  *out = v;
  return true;
}

/* --------------------------------------------------------------- layout (shared) ---- */

void ak_verify_sig_desc_from_spec(ak_sig_desc_t *d, const json_t *spec, const ak_sig_desc_t *def) {
  d->signature_header = ak_verify_spec_str(spec, "signature_header", def->signature_header);
  d->signed_tmpl = ak_verify_spec_str(spec, "signed", def->signed_tmpl);
  d->parse = ak_verify_spec_str(spec, "parse", def->parse);
  d->sig_key = ak_verify_spec_str(spec, "sig_key", def->sig_key);
  d->version = ak_verify_spec_str(spec, "version", def->version);
  d->sig_prefix = ak_verify_spec_str(spec, "sig_prefix", def->sig_prefix);
  d->encoding = ak_verify_spec_str(spec, "encoding", def->encoding);
  d->timestamp_header = ak_verify_spec_str(spec, "timestamp_header", def->timestamp_header);
  d->timestamp_pair = def->timestamp_pair; /* never from YAML */
  d->tolerance_seconds = ak_verify_spec_int(spec, "tolerance_seconds", def->tolerance_seconds);
}

static char *dup_opt(const char *s, size_t *len) {
  if (!s || !*s) {
    if (len) *len = 0;
    return NULL;
  }
  if (len) *len = strlen(s);
  return strdup(s);
}

static int add_part(ak_sig_layout_t *l, ak_sig_part_kind_t kind, const char *text, size_t len) {
  if (kind == AK_SIG_PART_LITERAL && l->nparts && l->parts[l->nparts - 1].kind == AK_SIG_PART_LITERAL) {
    ak_sig_part_t *p = &l->parts[l->nparts - 1];
    char *t = realloc(p->text, p->len + len + 1);
    if (!t) return -1;
    memcpy(t + p->len, text, len);
    p->len += len;
    t[p->len] = '\0';
    p->text = t;
    return 0;
  }
  ak_sig_part_t *np = realloc(l->parts, (l->nparts + 1) * sizeof *np);
  if (!np) return -1;
  l->parts = np;
  ak_sig_part_t *p = &l->parts[l->nparts];
  memset(p, 0, sizeof *p);
  p->kind = kind;
  if (text) {
    if (!(p->text = strndup(text, len))) return -1;
    p->len = len;
  }
  if (kind == AK_SIG_PART_HEADER) p->hidx = l->nheaders++;
  l->nparts++;
  return 0;
}

static int compile_template(ak_sig_layout_t *l, const char *t, char *err, size_t errlen) {
  bool has_body = false, has_ts = false;
  for (const char *p = t; *p;) {
    if (*p != '{') {
      size_t lit = strcspn(p, "{");
      if (add_part(l, AK_SIG_PART_LITERAL, p, lit) < 0) goto oom;
      p += lit;
      continue;
    }
    const char *close = strchr(p, '}');
    if (!close) {
      snprintf(err, errlen, "signed: unterminated \"{\"; expected {body}, {ts} or {header:NAME}");
      return -1;
    }
    const char *tok = p + 1;
    size_t tl = (size_t)(close - tok);
    int rc = 0;
    if (tl == 4 && !memcmp(tok, "body", 4)) {
      rc = add_part(l, AK_SIG_PART_BODY, NULL, 0);
      has_body = true;
    } else if (tl == 2 && !memcmp(tok, "ts", 2)) {
      rc = add_part(l, AK_SIG_PART_TS, NULL, 0);
      has_ts = true;
    } else if (tl > 7 && !memcmp(tok, "header:", 7) && !memchr(tok, '{', tl)) {
      if (l->nheaders == AK_SIG_MAX_HEADER_TOKENS) {
        snprintf(err, errlen, "signed: at most %d {header:NAME} tokens", AK_SIG_MAX_HEADER_TOKENS);
        return -1;
      }
      rc = add_part(l, AK_SIG_PART_HEADER, tok + 7, tl - 7);
    } else {
      int shown = tl > 40 ? 40 : (int)tl;
      snprintf(err, errlen, "signed: unknown token \"{%.*s%s}\"; expected {body}, {ts} or {header:NAME}",
               shown, tok, tl > 40 ? "..." : "");
      return -1;
    }
    if (rc < 0) goto oom;
    p = close + 1;
  }
  if (!has_body) {
    /* A template without the body would accept any body under a valid signature. */
    snprintf(err, errlen, "signed: must include {body}");
    return -1;
  }
  if (has_ts && !l->ts_header && !l->ts_pair) {
    snprintf(err, errlen, "signed: {ts} needs timestamp_header");
    return -1;
  }
  l->body_only = l->nparts == 1 && l->parts[0].kind == AK_SIG_PART_BODY;
  return 0;
oom:
  snprintf(err, errlen, "signed: out of memory");
  return -1;
}

int ak_verify_sig_layout_init(ak_sig_layout_t *l, const ak_sig_desc_t *d, char *err, size_t errlen) {
  memset(l, 0, sizeof *l);
  if (!d->signature_header || !*d->signature_header) {
    snprintf(err, errlen, "signature_header: missing");
    return -1;
  }
  int parse = ak_opt_enum_index(AK_SIG_PARSE_NAMES, d->parse ? d->parse : "whole");
  if (parse < 0) {
    snprintf(err, errlen, "parse: unknown value; expected one of whole, csv_pairs, space_versions");
    return -1;
  }
  l->parse = (ak_sig_parse_t)parse;
  int enc = ak_opt_enum_index(AK_SIG_ENC_NAMES, d->encoding ? d->encoding : "hex");
  if (enc < 0) {
    snprintf(err, errlen, "encoding: unknown value; expected one of hex, base64");
    return -1;
  }
  l->encoding = (ak_sig_encoding_t)enc;
  if (l->parse == AK_SIG_PARSE_CSV_PAIRS && (!d->sig_key || !*d->sig_key)) {
    snprintf(err, errlen, "sig_key: required when parse is csv_pairs");
    return -1;
  }
  if (l->parse != AK_SIG_PARSE_CSV_PAIRS && d->sig_key) {
    snprintf(err, errlen, "sig_key: only valid with parse csv_pairs");
    return -1;
  }
  if (l->parse != AK_SIG_PARSE_WHOLE && d->sig_prefix) {
    snprintf(err, errlen, "sig_prefix: only valid with parse whole");
    return -1;
  }
  if (d->tolerance_seconds < 1) {
    snprintf(err, errlen, "tolerance_seconds: must be positive");
    return -1;
  }
  l->tolerance = d->tolerance_seconds;
  l->sig_header = strdup(d->signature_header);
  l->sig_key = dup_opt(d->sig_key, &l->sig_key_len);
  /* version only means something to space_versions; other modes ignore it */
  l->version = l->parse == AK_SIG_PARSE_SPACE_VERSIONS ? dup_opt(d->version, &l->version_len) : NULL;
  l->sig_prefix = dup_opt(d->sig_prefix, &l->sig_prefix_len);
  l->ts_header = dup_opt(d->timestamp_header, NULL);
  l->ts_pair = l->parse == AK_SIG_PARSE_CSV_PAIRS ? dup_opt(d->timestamp_pair, &l->ts_pair_len) : NULL;
  if (!l->sig_header) {
    snprintf(err, errlen, "signature_header: out of memory");
    ak_verify_sig_layout_clear(l);
    return -1;
  }
  if (compile_template(l, d->signed_tmpl ? d->signed_tmpl : "{body}", err, errlen) < 0) {
    ak_verify_sig_layout_clear(l);
    return -1;
  }
  return 0;
}

void ak_verify_sig_layout_clear(ak_sig_layout_t *l) {
  for (size_t i = 0; i < l->nparts; i++) free(l->parts[i].text);
  free(l->parts);
  free(l->sig_header);
  free(l->sig_key);
  free(l->version);
  free(l->sig_prefix);
  free(l->ts_header);
  free(l->ts_pair);
  memset(l, 0, sizeof *l);
}

/* Parts of s separated by sep, trimmed, empty ones skipped. */
static bool next_part(const char *s, size_t n, char sep, size_t *pos, const char **part, size_t *plen) {
  while (*pos < n) {
    const char *start = s + *pos;
    const char *end = memchr(start, sep, n - *pos);
    size_t len = end ? (size_t)(end - start) : n - *pos;
    *pos += len + 1;
    const char *p = start;
    trim(&p, &len);
    if (len) {
      *part = p;
      *plen = len;
      return true;
    }
  }
  return false;
}

/* The value of the next csv pair named key (split at the first '='). */
static bool next_pair(const char *s, size_t n, const char *key, size_t klen, size_t *pos,
                      const char **val, size_t *vlen) {
  const char *part;
  size_t plen;
  while (next_part(s, n, ',', pos, &part, &plen)) {
    const char *eq = memchr(part, '=', plen);
    if (!eq) continue;
    const char *k = part;
    size_t kl = (size_t)(eq - part);
    trim(&k, &kl);
    if (kl != klen || memcmp(k, key, klen)) continue;
    const char *v = eq + 1;
    size_t vl = plen - (size_t)(v - part);
    trim(&v, &vl);
    *val = v;
    *vlen = vl;
    return true;
  }
  return false;
}

/* The next candidate's text, before decoding. */
static bool next_raw(const ak_sig_layout_t *l, const ak_sig_req_t *r, size_t *pos, const char **tok,
                     size_t *toklen) {
  switch (l->parse) {
  case AK_SIG_PARSE_WHOLE:
    if (*pos) return false;
    *pos = r->sig_len + 1;
    *tok = r->sig;
    *toklen = r->sig_len;
    return true;
  case AK_SIG_PARSE_CSV_PAIRS:
    return next_pair(r->sig, r->sig_len, l->sig_key, l->sig_key_len, pos, tok, toklen);
  case AK_SIG_PARSE_SPACE_VERSIONS: {
    const char *t;
    size_t tl;
    while (next_part(r->sig, r->sig_len, ' ', pos, &t, &tl)) {
      if (!l->version) {
        *tok = t;
        *toklen = tl;
        return true;
      }
      if (tl > l->version_len && !memcmp(t, l->version, l->version_len) && t[l->version_len] == ',') {
        *tok = t + l->version_len + 1;
        *toklen = tl - l->version_len - 1;
        return true;
      }
    }
    return false;
  }
  }
  return false;
}

bool ak_verify_sig_next(const ak_sig_layout_t *l, const ak_sig_req_t *r, size_t *pos, uint8_t *out,
                        size_t *outlen) {
  const char *tok;
  size_t tl;
  while (next_raw(l, r, pos, &tok, &tl)) {
    bool ok = l->encoding == AK_SIG_ENC_HEX
                ? ak_verify_hex_decode(tok, tl, out, AK_SIG_MAX_SIG_BYTES, outlen)
                : ak_verify_b64_decode(tok, tl, out, AK_SIG_MAX_SIG_BYTES, outlen, false);
    if (ok) return true;
  }
  return false;
}

ak_verify_reason_t ak_verify_sig_prepare(const ak_sig_layout_t *l, const ak_verify_input_t *in,
                                         ak_sig_req_t *r) {
  r->ts = NULL;
  r->ts_len = 0;
  const ak_header_t *h = ak_verify_find_header(in, l->sig_header, strlen(l->sig_header));
  if (!h || !h->value) return AK_VR_MISSING_SIGNATURE;
  const char *v = h->value;
  size_t n = h->value_len;
  trim(&v, &n);
  if (!n) return AK_VR_MISSING_SIGNATURE;
  if (l->sig_prefix) {
    if (n < l->sig_prefix_len || memcmp(v, l->sig_prefix, l->sig_prefix_len))
      return AK_VR_MALFORMED_SIGNATURE;
    v += l->sig_prefix_len;
    n -= l->sig_prefix_len;
  }
  r->sig = v;
  r->sig_len = n;
  {
    uint8_t scratch[AK_SIG_MAX_SIG_BYTES];
    size_t pos = 0, sl;
    if (!ak_verify_sig_next(l, r, &pos, scratch, &sl)) return AK_VR_MALFORMED_SIGNATURE;
  }
  if (l->ts_header || l->ts_pair) {
    const char *t = NULL;
    size_t tl = 0;
    if (l->ts_header) {
      const ak_header_t *th = ak_verify_find_header(in, l->ts_header, strlen(l->ts_header));
      if (th && th->value) {
        t = th->value;
        tl = th->value_len;
        trim(&t, &tl);
      }
    } else {
      size_t pos = 0;
      if (!next_pair(r->sig, r->sig_len, l->ts_pair, l->ts_pair_len, &pos, &t, &tl)) t = NULL;
    }
    if (!t || !tl) return AK_VR_MISSING_SIGNATURE;
    int64_t ts;
    if (!parse_ts(t, tl, &ts)) return AK_VR_MALFORMED_SIGNATURE;
    /* ts < 10^18 and now is a real clock: the difference cannot overflow */
    int64_t diff = in->now_s > ts ? in->now_s - ts : ts - in->now_s;
    if (diff > l->tolerance) return AK_VR_TIMESTAMP_OUT_OF_TOLERANCE;
    r->ts = t;
    r->ts_len = tl;
  }
  size_t total = 0;
  for (size_t i = 0; i < l->nparts; i++) {
    const ak_sig_part_t *p = &l->parts[i];
    switch (p->kind) {
    case AK_SIG_PART_LITERAL: total += p->len; break;
    case AK_SIG_PART_BODY: total += in->body_len; break;
    case AK_SIG_PART_TS: total += r->ts_len; break;
    case AK_SIG_PART_HEADER: {
      const ak_header_t *hh = ak_verify_find_header(in, p->text, p->len);
      if (!hh) return AK_VR_MISSING_SIGNATURE;
      const char *hv = hh->value ? hh->value : "";
      size_t hl = hh->value ? hh->value_len : 0;
      trim(&hv, &hl);
      r->hval[p->hidx] = hv;
      r->hlen[p->hidx] = hl;
      total += hl;
      break;
    }
    }
  }
  r->signed_len = total;
  return AK_VR_OK;
}

void ak_verify_sig_feed(const ak_sig_layout_t *l, const ak_sig_req_t *r, const ak_verify_input_t *in,
                        ak_sig_feed_fn fn, void *ctx) {
  for (size_t i = 0; i < l->nparts; i++) {
    const ak_sig_part_t *p = &l->parts[i];
    switch (p->kind) {
    case AK_SIG_PART_LITERAL: fn(ctx, p->text, p->len); break;
    case AK_SIG_PART_BODY: fn(ctx, in->body, in->body_len); break;
    case AK_SIG_PART_TS: fn(ctx, r->ts, r->ts_len); break;
    case AK_SIG_PART_HEADER: fn(ctx, r->hval[p->hidx], r->hlen[p->hidx]); break;
    }
  }
}

/* -------------------------------------------------------------------- HMAC engine ---- */

typedef struct {
  ak_sig_desc_t desc;
  const char *hash;          /* sha256 | sha512 | sha1 */
  const char *secret_decode; /* raw | whsec_base64 */
} hmac_preset_t;

/* HMAC (RFC 2104) over libcrypto's low-level digests. Each secret is keyed once, at
 * create: the digest states after absorbing key^ipad and key^opad. A check copies the
 * inner state onto its stack, streams the signed content through it, and finishes with a
 * copy of the outer state: no allocation, no lock, no provider dispatch per request.
 * (EVP_MAC re-initialised a pooled context per check, each init and final duplicating a
 * digest context through the provider: about half of a github check on a 1 KiB body,
 * docs/performance.md.) The low-level SHA interfaces are deprecated in OpenSSL 3 but
 * present and give the same digests; test_verify checks every hash against HMAC(). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

/* The names of hash and secret_decode (the rows' enum_vals and create's reading of them). */
#define HASH_NAMES "sha256|sha512|sha1"
#define DECODE_NAMES "raw|whsec_base64"

typedef enum { HM_SHA1, HM_SHA256, HM_SHA512 } hm_alg_t;

typedef union {
  SHA_CTX s1;
  SHA256_CTX s256;
  SHA512_CTX s512;
} hm_state_t;

typedef struct {
  hm_state_t in, out; /* after key^ipad and key^opad: secret-equivalent, cleansed at destroy */
} hm_key_t;

static size_t hm_block(hm_alg_t a) { return a == HM_SHA512 ? 128 : 64; }
static size_t hm_len(hm_alg_t a) { return a == HM_SHA1 ? 20 : a == HM_SHA256 ? 32 : 64; }

static void hm_init(hm_alg_t a, hm_state_t *st) {
  if (a == HM_SHA1) SHA1_Init(&st->s1);
  else if (a == HM_SHA256) SHA256_Init(&st->s256);
  else SHA512_Init(&st->s512);
}

static void hm_update(hm_alg_t a, hm_state_t *st, const void *p, size_t n) {
  if (a == HM_SHA1) SHA1_Update(&st->s1, p, n);
  else if (a == HM_SHA256) SHA256_Update(&st->s256, p, n);
  else SHA512_Update(&st->s512, p, n);
}

static void hm_final(hm_alg_t a, hm_state_t *st, uint8_t *out) {
  if (a == HM_SHA1) SHA1_Final(out, &st->s1);
  else if (a == HM_SHA256) SHA256_Final(out, &st->s256);
  else SHA512_Final(out, &st->s512);
}

static void hm_key_init(hm_key_t *k, hm_alg_t a, const uint8_t *key, size_t klen) {
  uint8_t kb[128] = {0}, pad[128];
  size_t bl = hm_block(a);
  if (klen > bl) { /* a key longer than a block is hashed first */
    hm_state_t st;
    hm_init(a, &st);
    hm_update(a, &st, key, klen);
    hm_final(a, &st, kb);
    OPENSSL_cleanse(&st, sizeof st);
  } else {
    memcpy(kb, key, klen);
  }
  for (size_t i = 0; i < bl; i++) pad[i] = kb[i] ^ 0x36;
  hm_init(a, &k->in);
  hm_update(a, &k->in, pad, bl);
  for (size_t i = 0; i < bl; i++) pad[i] = kb[i] ^ 0x5c;
  hm_init(a, &k->out);
  hm_update(a, &k->out, pad, bl);
  OPENSSL_cleanse(kb, sizeof kb);
  OPENSSL_cleanse(pad, sizeof pad);
}

typedef struct {
  hm_alg_t alg;
  hm_state_t st;
} hm_run_t;

static void hm_feed(void *ctx, const void *p, size_t n) {
  hm_run_t *r = ctx;
  if (n) hm_update(r->alg, &r->st, p, n);
}

/* out: hm_len(a) bytes */
static void hm_finish(hm_run_t *r, const hm_key_t *k, uint8_t *out) {
  uint8_t inner[64];
  hm_final(r->alg, &r->st, inner);
  r->st = k->out;
  hm_update(r->alg, &r->st, inner, hm_len(r->alg));
  hm_final(r->alg, &r->st, out);
  OPENSSL_cleanse(&r->st, sizeof r->st);
  OPENSSL_cleanse(inner, sizeof inner);
}

#pragma GCC diagnostic pop

typedef struct {
  ak_sig_layout_t l;
  hm_key_t keys[AK_SIG_MAX_KEYS]; /* one per secret */
  size_t nkeys;
  hm_alg_t alg;
  bool weak;
} hmac_t;

static void hmac_destroy(void *self) {
  hmac_t *h = self;
  if (!h) return;
  OPENSSL_cleanse(h->keys, sizeof h->keys);
  ak_verify_sig_layout_clear(&h->l);
  free(h);
}

/* The key bytes of one secret: the string itself, or its Standard Webhooks key
 * (verify/whsec.h: the decoder the http sink signs with). */
static uint8_t *secret_bytes(const char *s, size_t n, bool whsec, size_t *klen) {
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) return NULL;
  if (!whsec) {
    memcpy(buf, s, n);
    *klen = n;
    return buf;
  }
  if (!ak_whsec_decode(s, n, buf, n ? n : 1, klen)) {
    free(buf);
    return NULL;
  }
  return buf;
}

static void *hmac_create_with(const json_t *spec, const hmac_preset_t *preset, char *err, size_t errlen) {
  static const ak_sig_desc_t custom_defaults = {
    .signed_tmpl = "{body}", .parse = "whole", .encoding = "hex",
    .tolerance_seconds = AK_SIG_DEFAULT_TOLERANCE};
  hmac_t *h = calloc(1, sizeof *h);
  if (!h) {
    snprintf(err, errlen, "secret: out of memory");
    return NULL;
  }
  ak_sig_desc_t d;
  const char *hash, *decode;
  if (preset) {
    d = preset->desc;
    d.tolerance_seconds = ak_verify_spec_int(spec, "tolerance_seconds", AK_SIG_DEFAULT_TOLERANCE);
    hash = preset->hash;
    decode = preset->secret_decode;
  } else {
    ak_verify_sig_desc_from_spec(&d, spec, &custom_defaults);
    hash = ak_verify_spec_str(spec, "hash", "sha256");
    decode = ak_verify_spec_str(spec, "secret_decode", "raw");
  }
  if (ak_verify_sig_layout_init(&h->l, &d, err, errlen) < 0) {
    hmac_destroy(h); /* the layout cleared itself */
    return NULL;
  }
  /* the names are the rows' (HASH_NAMES, DECODE_NAMES), in the order of these tables */
  static const hm_alg_t algs[] = {HM_SHA256, HM_SHA512, HM_SHA1};
  int hi = hash ? ak_opt_enum_index(HASH_NAMES, hash) : -1;
  if (hi < 0) {
    snprintf(err, errlen, "hash: unknown value; expected one of sha256, sha512, sha1");
    hmac_destroy(h);
    return NULL;
  }
  h->alg = algs[hi];
  h->weak = h->alg == HM_SHA1;
  int di = decode ? ak_opt_enum_index(DECODE_NAMES, decode) : -1;
  if (di < 0) {
    snprintf(err, errlen, "secret_decode: unknown value; expected one of raw, whsec_base64");
    hmac_destroy(h);
    return NULL;
  }
  bool whsec = di == 1;

  ak_verify_secrets_t sec;
  if (ak_verify_secrets_load(spec, "secret", &sec, err, errlen) != 0) {
    hmac_destroy(h);
    return NULL;
  }
  for (size_t i = 0; i < sec.n; i++) {
    size_t klen = 0;
    uint8_t *key = secret_bytes(sec.s[i], sec.len[i], whsec, &klen);
    if (!key) {
      if (whsec) snprintf(err, errlen, "%s: cannot be decoded: expected \"whsec_\" followed by base64", sec.label[i]);
      else snprintf(err, errlen, "%s: out of memory", sec.label[i]);
      hmac_destroy(h);
      return NULL;
    }
    hm_key_init(&h->keys[h->nkeys++], h->alg, key, klen);
    OPENSSL_cleanse(key, klen);
    free(key);
  }
  return h;
}

static ak_verify_reason_t hmac_check(const void *self, const ak_verify_input_t *in) {
  const hmac_t *h = self;
  ak_sig_req_t r;
  ak_verify_reason_t why = ak_verify_sig_prepare(&h->l, in, &r);
  if (why != AK_VR_OK) return why;
  size_t mlen = hm_len(h->alg);
  uint8_t macs[AK_SIG_MAX_KEYS][64];
  for (size_t i = 0; i < h->nkeys; i++) {
    hm_run_t run = {.alg = h->alg, .st = h->keys[i].in};
    ak_verify_sig_feed(&h->l, &r, in, hm_feed, &run);
    hm_finish(&run, &h->keys[i], macs[i]);
  }
  /* Every candidate against every secret, no early exit. */
  unsigned match = 0;
  uint8_t cand[AK_SIG_MAX_SIG_BYTES];
  size_t pos = 0, clen;
  while (ak_verify_sig_next(&h->l, &r, &pos, cand, &clen)) {
    if (clen != mlen) continue;
    for (size_t i = 0; i < h->nkeys; i++) match |= CRYPTO_memcmp(cand, macs[i], clen) == 0;
  }
  OPENSSL_cleanse(macs, sizeof macs);
  return match ? AK_VR_OK : AK_VR_NO_MATCH;
}

static bool hmac_weak(const void *self) { return ((const hmac_t *)self)->weak; }

/* -------------------------------------------------------------- option tables ---- */

#define SECRET_ROW(doc_) \
  {.key = "secret", .type = AK_OPT_SECRETS, .flags = AK_OPTF_SECRET | AK_OPTF_REQUIRED, .doc = doc_}
#define TOLERANCE_ROW \
  {.key = "tolerance_seconds", .type = AK_OPT_INT, .def = "300", .min = 1, .max = 3600, \
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX, \
   .doc = "how far (seconds, either way) a signed timestamp may be from now"}

static const ak_opt_t preset_opts[] = {
  SECRET_ROW("signing secret, or a list of up to 8 (rotation: any may match)"),
  TOLERANCE_ROW,
  {0},
};

static const ak_opt_t custom_opts[] = {
  SECRET_ROW("signing secret, or a list of up to 8 (rotation: any may match)"),
  {.key = "signature_header", .type = AK_OPT_STRING, .min = 1,
   .flags = AK_OPTF_REQUIRED | AK_OPTF_HAS_MIN, .doc = "header carrying the signature (any case)"},
  {.key = "signed", .type = AK_OPT_STRING, .def = "{body}", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "signed content: literal text with {body}, {ts} and {header:NAME}"},
  {.key = "parse", .type = AK_OPT_ENUM, .def = "whole", .enum_vals = AK_SIG_PARSE_NAMES,
   .doc = "how candidates are read from the header"},
  {.key = "sig_key", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "csv_pairs: key of the signature pairs (required with csv_pairs)"},
  {.key = "version", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "space_versions: keep tokens \"<version>,...\" (none: every token)"},
  {.key = "sig_prefix", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "whole: required prefix of the header value (absent: malformed)"},
  {.key = "hash", .type = AK_OPT_ENUM, .def = "sha256", .enum_vals = HASH_NAMES,
   .doc = "HMAC hash; sha1 is counted on ankusa_verifier_weak_hash_total"},
  {.key = "encoding", .type = AK_OPT_ENUM, .def = "hex", .enum_vals = AK_SIG_ENC_NAMES,
   .doc = "encoding of the signature in the header"},
  {.key = "secret_decode", .type = AK_OPT_ENUM, .def = "raw", .enum_vals = DECODE_NAMES,
   .doc = "raw: the secret string is the key; whsec_base64: base64 after \"whsec_\""},
  {.key = "timestamp_header", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "header with the Unix timestamp: signed as {ts} and checked against the tolerance"},
  TOLERANCE_ROW,
  {0},
};

/* ---------------------------------------------------------------------- presets ---- */

static const hmac_preset_t stripe_preset = {
  .desc = {.signature_header = "Stripe-Signature", .signed_tmpl = "{ts}.{body}", .parse = "csv_pairs",
           .sig_key = "v1", .encoding = "hex", .timestamp_pair = "t"},
  .hash = "sha256", .secret_decode = "raw"};
static const hmac_preset_t github_preset = {
  .desc = {.signature_header = "X-Hub-Signature-256", .signed_tmpl = "{body}", .parse = "whole",
           .sig_prefix = "sha256=", .encoding = "hex"},
  .hash = "sha256", .secret_decode = "raw"};
static const hmac_preset_t shopify_preset = {
  .desc = {.signature_header = "X-Shopify-Hmac-SHA256", .signed_tmpl = "{body}", .parse = "whole",
           .encoding = "base64"},
  .hash = "sha256", .secret_decode = "raw"};
static const hmac_preset_t slack_preset = {
  .desc = {.signature_header = "X-Slack-Signature", .signed_tmpl = "v0:{ts}:{body}", .parse = "whole",
           .sig_prefix = "v0=", .encoding = "hex", .timestamp_header = "X-Slack-Request-Timestamp"},
  .hash = "sha256", .secret_decode = "raw"};
static const hmac_preset_t standard_webhooks_preset = {
  .desc = {.signature_header = "webhook-signature",
           .signed_tmpl = "{header:webhook-id}.{header:webhook-timestamp}.{body}",
           .parse = "space_versions", .version = "v1", .encoding = "base64",
           .timestamp_header = "webhook-timestamp"},
  .hash = "sha256", .secret_decode = "whsec_base64"};

static void *custom_create(const json_t *spec, char *err, size_t errlen) {
  return hmac_create_with(spec, NULL, err, errlen);
}

#define AK_HMAC_PRESET(name) \
  static void *name##_create(const json_t *spec, char *err, size_t errlen) { \
    return hmac_create_with(spec, &name##_preset, err, errlen); \
  } \
  const ak_verifier_vtable_t ak_verifier_##name = { \
    .plugin = {.type = #name, .options = preset_opts}, .create = name##_create, .check = hmac_check, \
    .destroy = hmac_destroy, .weak_hash = hmac_weak}

AK_HMAC_PRESET(stripe);
AK_HMAC_PRESET(github);
AK_HMAC_PRESET(shopify);
AK_HMAC_PRESET(slack);
AK_HMAC_PRESET(standard_webhooks);

const ak_verifier_vtable_t ak_verifier_hmac = {
  .plugin = {.type = "hmac", .options = custom_opts}, .create = custom_create, .check = hmac_check,
  .destroy = hmac_destroy, .weak_hash = hmac_weak};
