/* libFuzzer harness for the request verifiers (src/verify): the signature header parsers
 * (whole / csv_pairs / space_versions, sig_prefix, hex / base64), the timestamp rule, the
 * signed-content template, the token locations and the client certificate pins, all
 * through the public interface (ak_verifier_new from a JSON spec, ak_verifier_check).
 *
 * Input:
 *   byte 0      which verifier (index into `defs`, modulo their count); 0xFF instead makes
 *               the rest a JSON `verify` spec (see spec_mode)
 *   byte 1      flags: bits 0-1 client certificate (0 none, 1 the first pin, 2 the first pin
 *               with its last byte flipped, 3 the 32 bytes that follow the fixed prefix);
 *               bits 2-4 base of now_s (`now_base`); bit 5 query absent (NULL) rather than
 *               the query line; bit 6 body NULL when empty
 *   bytes 2-3   signed 16-bit offset added to the base of now_s (little endian)
 *   [32 bytes]  the certificate hash, with certificate mode 3
 *   then '\n'-separated lines, up to an empty line: headers, at most 16. A line starting
 *   with a byte below 0x20 takes its name from `hnames` (byte 0x00-0x09 -> that index,
 *   0x0B-0x1F -> index byte-1, modulo the table) and the rest of the line is the value;
 *   any other line is "name:value" split at the first ':' (no ':' -> empty value).
 *   After the empty line: one line of query string, then the body (the rest, any bytes).
 *
 * Every field is a heap copy of its exact size, so an over-read is an ASan report. Each
 * answer must be a valid reason, equal to the reference model's (verify_ref.h: the rules
 * of docs/verification.md restated), the same on a second call, the same with header
 * names in another case, never ok when the signature / credential header is absent, and
 * the input must be left unchanged. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "verify/verifier.h"

#define FUZZ_NAME "fuzz_verify"
#include "verify_ref.h"

#define CHECK REF_CHECK
#define MAX_HEADERS 16

/* A 2048-bit RSA public key made once with `openssl genpkey` for this harness (its
 * private half was thrown away after signing the seed corpus/verify/rsa-pss-ok). */
#define RSA_PEM(NL)                                                     \
  "-----BEGIN PUBLIC KEY-----" NL                                       \
  "MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAul+YBHLyqLDaBOkvqjUz" NL \
  "CtbLCtk1uBGyviBQd4OBaKp4QHc6yg3HEtlwB9y8Yz12eLb7fNJoBo3g8wu42S3g" NL \
  "MoQYQzPSsBXqXgTCNb2aa772o5jtv2spIbZC7vw2kO4/286JFjKldEG+Plvwqk3r" NL \
  "Ymcca5qCqfOkbyn7v2Sh0jzC6r3sLzNk31cJSG5DI/vBYBmMihp8+c6USONL2n8W" NL \
  "9vLsxBW1aikEKKJfSwQlHz7OvG3joxT6fiiD9SvOZi0drld5EId9LoeeZ/bh3oTW" NL \
  "cL0EoA4r0tgBVcUoRb1WvhBQg3iIa286huyk9yGpdn0OBQZoXgR52yVCniQgCBlZ" NL \
  "CQIDAQAB" NL                                                         \
  "-----END PUBLIC KEY-----" NL

/* The Standard Webhooks v1a vector's key (../shared/vectors/signatures.json), and an
 * Ed25519 key made for this harness. */
#define V1A_PK "whpk_ZlN4eg7dSSqi0moX9hQUk3orrOouK3QVQSlJa248c/g="
#define ED_PK "whpk_Ih0CU3ZkfclSqUxWeeQGMe5zkwU0yy1tmfjdw1dl8Z4="

#define PIN_A "721c71004ba2a6a8d4315b95d2d78d6943ba0246ebc108c184e1466f95b0a451"
#define PIN_B "f6b6b58ecd03dbbb7bd9848d93d21833a552366e14f9b82e08335c8bf1ad03f8"

#define SW_TMPL "{header:webhook-id}.{header:webhook-timestamp}.{body}"

static const ref_def_t defs[] = {
  {.label = "none", .spec = "{\"type\": \"none\"}", .kind = RK_NONE},
  {.label = "stripe", .kind = RK_HMAC,
   .spec = "{\"type\": \"stripe\", \"secret\": \"whsec_fz_stripe_7Qx\"}",
   .sig_header = "Stripe-Signature", .parse = RP_CSV, .sig_key = "v1", .ts_pair = "t",
   .tolerance = 300, .signed_tmpl = "{ts}.{body}", .hash = "SHA256", .keys = {"whsec_fz_stripe_7Qx"}},
  {.label = "github", .kind = RK_HMAC,
   .spec = "{\"type\": \"github\", \"secret\": [\"gh-fuzz-secret\", \"gh-old-secret\"]}",
   .sig_header = "X-Hub-Signature-256", .sig_prefix = "sha256=", .parse = RP_WHOLE,
   .tolerance = 300, .signed_tmpl = "{body}", .hash = "SHA256", .keys = {"gh-fuzz-secret", "gh-old-secret"}},
  {.label = "shopify", .kind = RK_HMAC,
   .spec = "{\"type\": \"shopify\", \"secret\": \"shp-fuzz\"}",
   .sig_header = "X-Shopify-Hmac-SHA256", .parse = RP_WHOLE, .base64 = true,
   .tolerance = 300, .signed_tmpl = "{body}", .hash = "SHA256", .keys = {"shp-fuzz"}},
  {.label = "slack", .kind = RK_HMAC,
   .spec = "{\"type\": \"slack\", \"secret\": \"slack-fuzz\", \"tolerance_seconds\": 60}",
   .sig_header = "X-Slack-Signature", .sig_prefix = "v0=", .parse = RP_WHOLE,
   .ts_header = "X-Slack-Request-Timestamp", .tolerance = 60, .signed_tmpl = "v0:{ts}:{body}",
   .hash = "SHA256", .keys = {"slack-fuzz"}},
  {.label = "standard_webhooks", .kind = RK_HMAC,
   .spec = "{\"type\": \"standard_webhooks\", \"secret\": \"whsec_ZnV6ei1zdGFuZGFyZC13ZWJob29rcy1rZXktMDAwMSE=\"}",
   .sig_header = "webhook-signature", .parse = RP_SPACE, .version = "v1", .base64 = true,
   .ts_header = "webhook-timestamp", .tolerance = 300, .signed_tmpl = SW_TMPL, .hash = "SHA256",
   .whsec = true, .keys = {"whsec_ZnV6ei1zdGFuZGFyZC13ZWJob29rcy1rZXktMDAwMSE="}},
  {.label = "standard_webhooks_v1a", .kind = RK_ASYM,
   .spec = "{\"type\": \"standard_webhooks_v1a\", \"public_key\": \"" V1A_PK "\"}",
   .sig_header = "webhook-signature", .parse = RP_SPACE, .version = "v1a", .base64 = true,
   .ts_header = "webhook-timestamp", .tolerance = 300, .signed_tmpl = SW_TMPL, .keys = {V1A_PK}},
  {.label = "hmac csv_pairs", .kind = RK_HMAC,
   .spec = "{\"type\": \"hmac\", \"secret\": [\"cust-new\", \"cust-old\"], \"signature_header\": "
           "\"X-Custom-Signature\", \"parse\": \"csv_pairs\", \"sig_key\": \"sig\", \"timestamp_header\": "
           "\"X-Custom-Timestamp\", \"signed\": \"{ts}.{header:X-Custom-Id}.{body}\", \"hash\": \"sha512\", "
           "\"encoding\": \"base64\", \"tolerance_seconds\": 120}",
   .sig_header = "X-Custom-Signature", .parse = RP_CSV, .sig_key = "sig", .base64 = true,
   .ts_header = "X-Custom-Timestamp", .tolerance = 120, .signed_tmpl = "{ts}.{header:X-Custom-Id}.{body}",
   .hash = "SHA512", .keys = {"cust-new", "cust-old"}},
  {.label = "hmac space_versions v2", .kind = RK_HMAC,
   .spec = "{\"type\": \"hmac\", \"secret\": \"ver-secret\", \"signature_header\": \"X-Ver-Signature\", "
           "\"parse\": \"space_versions\", \"version\": \"v2\", \"signed\": \"{body}|{header:X-Request-Id}\"}",
   .sig_header = "X-Ver-Signature", .parse = RP_SPACE, .version = "v2", .tolerance = 300,
   .signed_tmpl = "{body}|{header:X-Request-Id}", .hash = "SHA256", .keys = {"ver-secret"}},
  {.label = "hmac space_versions any", .kind = RK_HMAC,
   .spec = "{\"type\": \"hmac\", \"secret\": \"Zm9vYmFyYmF6\", \"secret_decode\": \"whsec_base64\", "
           "\"signature_header\": \"X-Any-Signature\", \"parse\": \"space_versions\", \"encoding\": "
           "\"base64\", \"hash\": \"sha512\", \"signed\": \"[{body}]\"}",
   .sig_header = "X-Any-Signature", .parse = RP_SPACE, .base64 = true, .tolerance = 300,
   .signed_tmpl = "[{body}]", .hash = "SHA512", .whsec = true, .keys = {"Zm9vYmFyYmF6"}},
  {.label = "hmac whole sha1", .kind = RK_HMAC,
   .spec = "{\"type\": \"hmac\", \"secret\": \"legacy-sha1\", \"signature_header\": \"X-Hub-Signature\", "
           "\"sig_prefix\": \"sha1=\", \"hash\": \"sha1\"}",
   .sig_header = "X-Hub-Signature", .sig_prefix = "sha1=", .parse = RP_WHOLE, .tolerance = 300,
   .signed_tmpl = "{body}", .hash = "SHA1", .keys = {"legacy-sha1"}},
  {.label = "asymmetric rsa_pss", .kind = RK_ASYM,
   .spec = "{\"type\": \"asymmetric\", \"algorithm\": \"rsa_pss_sha256\", \"public_key\": \"" RSA_PEM("\\n")
           "\", \"signature_header\": \"X-Signature\", \"parse\": \"whole\", \"encoding\": \"base64\", "
           "\"signed\": \"{header:X-Request-Id}.{body}\", \"timestamp_header\": null}",
   .sig_header = "X-Signature", .parse = RP_WHOLE, .base64 = true, .tolerance = 300,
   .signed_tmpl = "{header:X-Request-Id}.{body}", .rsa_pss = true, .keys = {RSA_PEM("\n")}},
  {.label = "asymmetric ed25519 csv_pairs", .kind = RK_ASYM,
   .spec = "{\"type\": \"asymmetric\", \"public_key\": [\"" ED_PK "\", \"" V1A_PK "\"], \"signature_header\": "
           "\"X-Ed-Signature\", \"parse\": \"csv_pairs\", \"sig_key\": \"s\", \"encoding\": \"hex\", "
           "\"signed\": \"{ts}:{body}\", \"timestamp_header\": \"X-Ed-Timestamp\"}",
   .sig_header = "X-Ed-Signature", .parse = RP_CSV, .sig_key = "s", .ts_header = "X-Ed-Timestamp",
   .tolerance = 300, .signed_tmpl = "{ts}:{body}", .keys = {ED_PK, V1A_PK}},
  {.label = "token bearer", .kind = RK_TOKEN, .loc = RL_BEARER,
   .spec = "{\"type\": \"token\", \"secret\": [\"tok-new\", \"tok-old\"]}", .keys = {"tok-new", "tok-old"}},
  {.label = "token basic", .kind = RK_TOKEN, .loc = RL_BASIC,
   .spec = "{\"type\": \"token\", \"location\": \"basic\", \"secret\": \"hooks:pa:ss\"}", .keys = {"hooks:pa:ss"}},
  {.label = "token header", .kind = RK_TOKEN, .loc = RL_HEADER, .header = "X-Api-Key",
   .spec = "{\"type\": \"token\", \"location\": \"header\", \"header\": \"X-Api-Key\", \"secret\": \"key-123\"}",
   .keys = {"key-123"}},
  {.label = "token query", .kind = RK_TOKEN, .loc = RL_QUERY, .param = "token",
   .spec = "{\"type\": \"token\", \"location\": \"query\", \"param\": \"token\", \"secret\": \"q tok&=1\"}",
   .keys = {"q tok&=1"}},
  {.label = "client_cert", .kind = RK_CERT,
   .spec = "{\"type\": \"client_cert\", \"pins\": [\"sha256:721C71004BA2A6A8D4315B95D2D78D6943BA0246EBC108C18"
           "4E1466F95B0A451\", \"F6:B6:B5:8E:CD:03:DB:BB:7B:D9:84:8D:93:D2:18:33:A5:52:36:6E:14:F9:B8:2E:08:"
           "33:5C:8B:F1:AD:03:F8\"]}",
   .keys = {PIN_A, PIN_B}},
};
#define NDEFS (sizeof defs / sizeof defs[0])

/* The signature / timestamp / template header names of the verifiers above. */
static const char *const hnames[] = {
  "Stripe-Signature", "X-Hub-Signature-256", "X-Shopify-Hmac-SHA256", "X-Slack-Signature",
  "X-Slack-Request-Timestamp", "webhook-signature", "webhook-id", "webhook-timestamp",
  "X-Custom-Signature", "X-Custom-Timestamp", "X-Custom-Id", "X-Ver-Signature", "X-Any-Signature",
  "X-Hub-Signature", "X-Signature", "X-Request-Id", "X-Ed-Signature", "X-Ed-Timestamp",
  "Authorization", "X-Api-Key", "Content-Type",
};
#define NHNAMES (sizeof hnames / sizeof hnames[0])

/* Bases of now_s: the seeds' times, zero, and the far ends of the timestamp range (a
 * timestamp has at most 18 digits; now is a real clock, never negative). */
static const int64_t now_base[8] = {
  1700000000, 1614265330, 0, 999999999, 4102444800, 999999999999999999, 1000000000000000000,
  (int64_t)1 << 62,
};

static ak_verifier_t *verifiers[NDEFS];
static ref_t refs[NDEFS];
static bool trace;          /* AK_FUZZ_TRACE set: print each verdict (replaying seeds) */
static const uint8_t *pin_a; /* the client_cert verifier's first pin (32 bytes) */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  for (size_t i = 0; i < NDEFS; i++) {
    ref_init(&refs[i], &defs[i]);
    verifiers[i] = ref_build(&defs[i]);
    if (defs[i].kind == RK_CERT) pin_a = refs[i].key[0];
  }
  CHECK(pin_a != NULL);
  trace = getenv("AK_FUZZ_TRACE") != NULL;
  return 0;
}

static void *dup_exact(const void *p, size_t n) {
  void *d = malloc(n ? n : 1);
  CHECK(d != NULL);
  if (n) memcpy(d, p, n);
  return d;
}

static const uint8_t *line_end(const uint8_t *p, const uint8_t *end) {
  const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));
  return nl ? nl : end;
}

/* The required headers of a definition: its answer is missing_signature without them. */
static const char *carrier(const ref_def_t *d) {
  if (d->kind == RK_HMAC || d->kind == RK_ASYM) return d->sig_header;
  if (d->kind == RK_TOKEN && d->loc != RL_QUERY) return d->loc == RL_HEADER ? d->header : "Authorization";
  return NULL;
}

static bool required_absent(const ref_def_t *d, const ak_verify_input_t *in) {
  if (d->kind != RK_HMAC && d->kind != RK_ASYM) return false;
  if (d->ts_header && !ref_has_header(in, d->ts_header)) return true;
  const char *t = d->signed_tmpl;
  while ((t = strstr(t, "{header:")) != NULL) {
    char name[128];
    size_t n = strcspn(t + 8, "}");
    CHECK(n < sizeof name);
    memcpy(name, t + 8, n);
    name[n] = '\0';
    if (!ref_has_header(in, name)) return true;
    t += 8 + n;
  }
  return false;
}

/* ------------------------------------------------------------------ spec mode ---- */

/* Strings of a JSON value (recursively, keys included) that contain '#', other than the
 * values of `secret`. */
static bool other_hash_sign(const json_t *j, bool top) {
  if (json_is_string(j)) return memchr(json_string_value(j), '#', json_string_length(j)) != NULL;
  if (json_is_array(j)) {
    size_t i;
    json_t *it;
    json_array_foreach(j, i, it) if (other_hash_sign(it, false)) return true;
    return false;
  }
  if (json_is_object(j)) {
    const char *k;
    json_t *it;
    json_object_foreach((json_t *)j, k, it) {
      if (strchr(k, '#')) return true;
      if (top && !strcmp(k, "secret")) continue;
      if (other_hash_sign(it, false)) return true;
    }
  }
  return false;
}

/* An error never shows a secret: checked when every secret is at least 8 bytes with a
 * '#' in it and nothing else in the spec has a '#' (so no echoed type or template text
 * can look like one). */
static void check_error_hides_secrets(const json_t *spec, const char *err) {
  const json_t *sv = json_object_get(spec, "secret");
  if (!sv || other_hash_sign(spec, true)) return;
  const json_t *one[1] = {sv};
  size_t n = json_is_array(sv) ? json_array_size(sv) : 1;
  for (size_t i = 0; i < n; i++) {
    const json_t *s = json_is_array(sv) ? json_array_get(sv, i) : one[0];
    if (!json_is_string(s)) return;
    size_t sl = json_string_length(s);
    if (sl < 8 || !memchr(json_string_value(s), '#', sl)) return;
  }
  for (size_t i = 0; i < n; i++) {
    const json_t *s = json_is_array(sv) ? json_array_get(sv, i) : one[0];
    if (memmem(err, strlen(err), json_string_value(s), json_string_length(s))) {
      fprintf(stderr, "%s: an error shows a secret: %s\n", FUZZ_NAME, err);
      abort();
    }
  }
}

/* byte 0 == 0xFF: the rest is a `verify` mapping as JSON, built with ak_verifier_new (the
 * key and secret decoding: whsec_, whpk_, PEM, pins, user:password, templates) and, when
 * it builds, checked against a few fixed requests. The loader validates keys and types
 * before this call; a finding here needs that checked before it counts as reachable. */
static void spec_mode(const uint8_t *data, size_t size) {
  json_t *spec = json_loadb((const char *)data, size, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
  if (!spec) return;
  char err[512];
  memset(err, 'Z', sizeof err);
  ak_verifier_t *v = ak_verifier_new(spec, err, sizeof err);
  CHECK(memchr(err, '\0', sizeof err) != NULL);
  if (!v) {
    CHECK(err[0] != '\0');
    check_error_hides_secrets(spec, err);
    json_decref(spec);
    return;
  }
  const char *type = ak_verifier_type(v);
  CHECK(ak_verifiers_find(type) != NULL);
  const char *ch = ak_verifier_credential_header(v);
  for (const char *c = ch; c && *c; c++) CHECK(!(*c >= 'A' && *c <= 'Z'));
  static const uint8_t cert[32] = {1, 2, 3};
  static const ak_header_t hs[] = {
    {"webhook-id", 10, "msg_1", 5},
    {"webhook-timestamp", 17, "1700000000", 10},
    {"webhook-signature", 17, "v1,AAAA v1a,AAAA", 16},
    {"Authorization", 13, "Bearer abc", 10},
    {"X-Signature", 11, "sha256=00", 9},
  };
  for (size_t k = 0; k < 3; k++) {
    ak_verify_input_t in = {
      .headers = hs, .nheaders = k == 0 ? 0 : sizeof hs / sizeof hs[0],
      .body = (const uint8_t *)"{}", .body_len = 2, .query = k == 2 ? "token=abc" : NULL,
      .query_len = k == 2 ? 9 : 0, .client_cert_sha256 = k == 2 ? cert : NULL, .now_s = 1700000000,
    };
    ak_verify_reason_t got = ak_verifier_check(v, &in);
    ref_check_reason(got);
    CHECK(ak_verifier_check(v, &in) == got);
    if (ak_verifier_is_none(v)) CHECK(got == AK_VR_OK);
    if (k == 0 && !ak_verifier_is_none(v)) CHECK(got == AK_VR_MISSING_SIGNATURE); /* nothing sent */
  }
  ak_verifier_free(v);
  json_decref(spec);
}

/* --------------------------------------------------------------------- harness ---- */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size >= 1 && data[0] == 0xFF) {
    spec_mode(data + 1, size - 1);
    return 0;
  }
  if (size < 4) return 0;
  size_t which = data[0] % NDEFS;
  const ref_def_t *d = &defs[which];
  uint8_t flags = data[1];
  int16_t delta = (int16_t)(uint16_t)(data[2] | data[3] << 8);
  const uint8_t *p = data + 4, *end = data + size;

  uint8_t cert[32];
  bool has_cert = true;
  switch (flags & 3) {
  case 0: has_cert = false; break;
  case 1: memcpy(cert, pin_a, 32); break;
  case 2:
    memcpy(cert, pin_a, 32);
    cert[31] ^= 1;
    break;
  case 3:
    if ((size_t)(end - p) < 32) return 0;
    memcpy(cert, p, 32);
    p += 32;
    break;
  }

  ak_header_t headers[MAX_HEADERS], flipped[MAX_HEADERS];
  char *names[MAX_HEADERS], *values[MAX_HEADERS], *fnames[MAX_HEADERS];
  const uint8_t *src_name[MAX_HEADERS], *src_value[MAX_HEADERS];
  size_t nh = 0;
  while (p < end && nh < MAX_HEADERS) {
    const uint8_t *le = line_end(p, end);
    if (le == p) { /* the empty line */
      p++;
      break;
    }
    const char *name;
    size_t nl;
    const uint8_t *val;
    size_t vl;
    if (*p < 0x20) {
      size_t idx = *p < '\n' ? *p : (size_t)*p - 1;
      name = hnames[idx % NHNAMES];
      nl = strlen(name);
      val = p + 1;
      vl = (size_t)(le - val);
    } else {
      const uint8_t *colon = memchr(p, ':', (size_t)(le - p));
      name = (const char *)p;
      nl = colon ? (size_t)(colon - p) : (size_t)(le - p);
      val = colon ? colon + 1 : le;
      vl = (size_t)(le - val);
    }
    names[nh] = dup_exact(name, nl);
    values[nh] = dup_exact(val, vl);
    fnames[nh] = dup_exact(name, nl);
    for (size_t i = 0; i < nl; i++) {
      char c = fnames[nh][i];
      if (c >= 'a' && c <= 'z') fnames[nh][i] = (char)(c - 32);
      else if (c >= 'A' && c <= 'Z') fnames[nh][i] = (char)(c + 32);
    }
    src_name[nh] = (const uint8_t *)name;
    src_value[nh] = val;
    headers[nh] = (ak_header_t){names[nh], nl, values[nh], vl};
    flipped[nh] = (ak_header_t){fnames[nh], nl, values[nh], vl};
    nh++;
    p = le < end ? le + 1 : end;
  }
  /* the query line, then the body */
  const uint8_t *qe = line_end(p, end);
  size_t ql = (size_t)(qe - p);
  const uint8_t *qsrc = p;
  char *query = (flags & 0x20) ? NULL : dup_exact(p, ql);
  p = qe < end ? qe + 1 : end;
  size_t bl = (size_t)(end - p);
  const uint8_t *bsrc = p;
  uint8_t *body = (bl == 0 && (flags & 0x40)) ? NULL : dup_exact(p, bl);

  ak_verify_input_t in = {
    .headers = headers, .nheaders = nh, .body = body, .body_len = bl,
    .query = query, .query_len = query ? ql : 0,
    .client_cert_sha256 = has_cert ? dup_exact(cert, 32) : NULL,
    .now_s = now_base[(flags >> 2) & 7] + delta,
  };

  const ak_verifier_t *v = verifiers[which];
  ak_verify_reason_t got = ak_verifier_check(v, &in);
  ref_check_reason(got);
  ak_verify_reason_t want = ref_expect(&refs[which], &in);
  if (got != want) {
    fprintf(stderr, "%s: %s answered %s, the reference %s\n", FUZZ_NAME, d->label, ak_verify_reason_name(got),
            ak_verify_reason_name(want));
    abort();
  }
  if (trace) fprintf(stderr, "%s: %s -> %s\n", FUZZ_NAME, d->label, ak_verify_reason_name(got));
  /* the same answer again, and with every header name in the other case */
  CHECK(ak_verifier_check(v, &in) == got);
  ak_verify_input_t in2 = in;
  in2.headers = flipped;
  CHECK(ak_verifier_check(v, &in2) == got);

  /* never ok without what carries the signature or credential */
  const char *c = carrier(d);
  if (c && !ref_has_header(&in, c)) CHECK(got == AK_VR_MISSING_SIGNATURE);
  if (required_absent(d, &in)) CHECK(got != AK_VR_OK);
  if (d->kind == RK_TOKEN && d->loc == RL_QUERY && !in.query) CHECK(got == AK_VR_MISSING_SIGNATURE);
  if (d->kind == RK_CERT && !has_cert) CHECK(got == AK_VR_MISSING_SIGNATURE);

  /* the input is read, never written */
  for (size_t i = 0; i < nh; i++) {
    CHECK(memcmp(headers[i].name, src_name[i], headers[i].name_len) == 0);
    CHECK(!headers[i].value_len || memcmp(headers[i].value, src_value[i], headers[i].value_len) == 0);
  }
  CHECK(!query || !ql || memcmp(query, qsrc, ql) == 0);
  CHECK(!bl || memcmp(body, bsrc, bl) == 0);
  CHECK(!has_cert || memcmp(in.client_cert_sha256, cert, 32) == 0);

  for (size_t i = 0; i < nh; i++) {
    free(names[i]);
    free(values[i]);
    free(fnames[i]);
  }
  free(query);
  free(body);
  free((void *)in.client_cert_sha256);
  return 0;
}
