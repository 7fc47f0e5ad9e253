/* The token verifier (`token`): a shared secret presented as-is, in an Authorization
 * Bearer or Basic credential, a named header or a query parameter, checked against a list
 * of up to 8 accepted tokens. Only SHA-256 digests of the accepted tokens are kept, and
 * the presented token's digest is compared with every one of them in constant time.
 * Never logs or returns a token; names the header / parameter carrying it so the edge
 * drops it from what is stored. */
#include <ctype.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "core/config.h"
#include "verify/sig_internal.h"

#define DIGEST_LEN 32
#define STACK_BUF 512

/* The location names in the order of loc_t: its row's enum_vals and create's reading. */
#define LOC_NAMES "bearer|basic|header|query"
typedef enum { LOC_BEARER, LOC_BASIC, LOC_HEADER, LOC_QUERY } loc_t;

typedef struct {
  loc_t loc;
  char *header;              /* lowercase; "authorization" for bearer and basic */
  char *param;               /* query parameter name (LOC_QUERY) */
  size_t param_len;
  EVP_MD *sha256;
  uint8_t digests[AK_SIG_MAX_KEYS][DIGEST_LEN];
  size_t n;
} token_t;

static void token_destroy(void *self) {
  token_t *t = self;
  if (!t) return;
  free(t->header);
  free(t->param);
  EVP_MD_free(t->sha256);
  OPENSSL_cleanse(t->digests, sizeof t->digests);
  free(t);
}

static char *lower_dup(const char *s) {
  char *d = strdup(s);
  for (char *p = d; p && *p; p++) *p = (char)tolower((unsigned char)*p);
  return d;
}

static void *token_create(const json_t *spec, char *err, size_t errlen) {
  token_t *t = calloc(1, sizeof *t);
  if (!t) {
    snprintf(err, errlen, "secret: out of memory");
    return NULL;
  }
  const char *loc = ak_verify_spec_str(spec, "location", "bearer");
  const char *header = ak_verify_spec_str(spec, "header", NULL);
  const char *param = ak_verify_spec_str(spec, "param", NULL);
  int li = loc ? ak_opt_enum_index(LOC_NAMES, loc) : -1;
  if (li >= 0) t->loc = (loc_t)li;
  else {
    snprintf(err, errlen, "location: unknown value; expected one of bearer, basic, header, query");
    goto fail;
  }
  if (t->loc == LOC_HEADER && (!header || !*header)) {
    snprintf(err, errlen, "header: required when location is header");
    goto fail;
  }
  if (t->loc != LOC_HEADER && header) {
    snprintf(err, errlen, "header: only valid with location header");
    goto fail;
  }
  if (t->loc == LOC_QUERY && (!param || !*param)) {
    snprintf(err, errlen, "param: required when location is query");
    goto fail;
  }
  if (t->loc != LOC_QUERY && param) {
    snprintf(err, errlen, "param: only valid with location query");
    goto fail;
  }
  if (t->loc == LOC_HEADER) t->header = lower_dup(header);
  else if (t->loc != LOC_QUERY) t->header = strdup("authorization");
  if (t->loc == LOC_QUERY) {
    t->param = strdup(param);
    t->param_len = strlen(param);
  }
  t->sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
  if ((t->loc != LOC_QUERY && !t->header) || (t->loc == LOC_QUERY && !t->param) || !t->sha256) {
    snprintf(err, errlen, "secret: out of memory");
    goto fail;
  }
  ak_verify_secrets_t sec;
  if (ak_verify_secrets_load(spec, "secret", &sec, err, errlen) != 0) goto fail;
  for (size_t i = 0; i < sec.n; i++) {
    if (t->loc == LOC_BASIC && !memchr(sec.s[i], ':', sec.len[i])) {
      snprintf(err, errlen, "%s: expected \"user:password\" for location basic", sec.label[i]);
      goto fail;
    }
    unsigned int dl = 0;
    if (EVP_Digest(sec.s[i], sec.len[i], t->digests[i], &dl, t->sha256, NULL) != 1 || dl != DIGEST_LEN) {
      snprintf(err, errlen, "%s: digest failed", sec.label[i]);
      goto fail;
    }
    t->n++;
  }
  return t;
fail:
  token_destroy(t);
  return NULL;
}

/* The first value of the query parameter named like t->param (names compare byte for
 * byte, undecoded). */
static bool query_value(const token_t *t, const ak_verify_input_t *in, const char **val, size_t *vlen) {
  const char *q = in->query;
  size_t n = in->query ? in->query_len : 0;
  size_t pos = 0;
  while (pos < n) {
    const char *part = q + pos;
    const char *amp = memchr(part, '&', n - pos);
    size_t plen = amp ? (size_t)(amp - part) : n - pos;
    pos += plen + 1;
    const char *eq = memchr(part, '=', plen);
    size_t nlen = eq ? (size_t)(eq - part) : plen;
    if (nlen != t->param_len || memcmp(part, t->param, nlen)) continue;
    *val = eq ? eq + 1 : part + plen;
    *vlen = eq ? plen - nlen - 1 : 0;
    return true;
  }
  return false;
}

/* %XX decoding ('+' is kept as is: tokens are often base64). */
static bool percent_decode(const char *s, size_t n, uint8_t *out, size_t *outlen) {
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] != '%') {
      out[o++] = (uint8_t)s[i];
      continue;
    }
    if (i + 2 >= n) return false;
    int hi = OPENSSL_hexchar2int((unsigned char)s[i + 1]), lo = OPENSSL_hexchar2int((unsigned char)s[i + 2]);
    if (hi < 0 || lo < 0) return false;
    out[o++] = (uint8_t)(hi << 4 | lo);
    i += 2;
  }
  *outlen = o;
  return true;
}

static ak_verify_reason_t token_check(const void *self, const ak_verify_input_t *in) {
  const token_t *t = self;
  const char *v = NULL;
  size_t n = 0;
  if (t->loc == LOC_QUERY) {
    if (!query_value(t, in, &v, &n)) return AK_VR_MISSING_SIGNATURE;
  } else {
    const ak_header_t *h = ak_verify_find_header(in, t->header, strlen(t->header));
    if (!h || !h->value) return AK_VR_MISSING_SIGNATURE;
    v = h->value;
    n = h->value_len;
  }
  while (n && (*v == ' ' || *v == '\t')) v++, n--;
  while (n && (v[n - 1] == ' ' || v[n - 1] == '\t')) n--;
  if (!n) return AK_VR_MISSING_SIGNATURE;

  if (t->loc == LOC_BEARER || t->loc == LOC_BASIC) {
    const char *scheme = t->loc == LOC_BEARER ? "Bearer" : "Basic";
    size_t sl = strlen(scheme);
    if (n <= sl || strncasecmp(v, scheme, sl) || (v[sl] != ' ' && v[sl] != '\t'))
      return AK_VR_MALFORMED_SIGNATURE;
    v += sl;
    n -= sl;
    while (n && (*v == ' ' || *v == '\t')) v++, n--;
    if (!n) return AK_VR_MALFORMED_SIGNATURE;
  }

  uint8_t stack[STACK_BUF], *buf = NULL;
  const uint8_t *tok = (const uint8_t *)v;
  size_t toklen = n;
  if (t->loc == LOC_BASIC || t->loc == LOC_QUERY) {
    buf = n <= sizeof stack ? stack : malloc(n);
    if (!buf) return AK_VR_NO_MATCH; /* fail closed */
    bool ok = t->loc == LOC_BASIC ? ak_verify_b64_decode(v, n, buf, n, &toklen, true) && memchr(buf, ':', toklen)
                                  : percent_decode(v, n, buf, &toklen);
    if (!ok) {
      /* a partial decode may still hold credential bytes: wipe the whole buffer */
      OPENSSL_cleanse(buf, n <= sizeof stack ? sizeof stack : n);
      if (buf != stack) free(buf);
      return AK_VR_MALFORMED_SIGNATURE;
    }
    tok = buf;
  }
  /* Comparing fixed-size digests instead of the tokens keeps the comparison constant in
   * time for any length, so not even a token's length leaks; every accepted token is
   * compared (no early exit), so which one matched does not leak either. */
  uint8_t d[DIGEST_LEN];
  unsigned int dl = 0;
  bool hashed = EVP_Digest(tok, toklen, d, &dl, t->sha256, NULL) == 1 && dl == DIGEST_LEN;
  if (buf) {
    OPENSSL_cleanse(buf, toklen);
    if (buf != stack) free(buf);
  }
  if (!hashed) return AK_VR_NO_MATCH;
  unsigned match = 0;
  for (size_t i = 0; i < t->n; i++) match |= CRYPTO_memcmp(d, t->digests[i], DIGEST_LEN) == 0;
  return match ? AK_VR_OK : AK_VR_NO_MATCH;
}

static const char *token_credential_header(const void *self) { return ((const token_t *)self)->header; }

static const char *token_credential_param(const void *self) { return ((const token_t *)self)->param; }

static const ak_opt_t token_opts[] = {
  {.key = "location", .type = AK_OPT_ENUM, .def = "bearer", .enum_vals = LOC_NAMES,
   .doc = "where the token is: Authorization Bearer / Basic, a named header, or a query parameter"},
  {.key = "header", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "header name (required with location header)"},
  {.key = "param", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "query parameter name (required with location query)"},
  {.key = "secret", .type = AK_OPT_SECRETS, .flags = AK_OPTF_SECRET | AK_OPTF_REQUIRED,
   .doc = "accepted token, or a list of up to 8 (basic: \"user:password\")"},
  {0},
};

const ak_verifier_vtable_t ak_verifier_token = {
  .plugin = {.type = "token", .options = token_opts}, .create = token_create, .check = token_check,
  .destroy = token_destroy, .credential_header = token_credential_header,
  .credential_param = token_credential_param};
