/* Unit tests of the verifiers: every vector of ../shared/vectors/signatures.json (read at
 * test time, so the file stays the one source), each preset's failure modes, every
 * option of the custom hmac descriptor, Ed25519 and RSA keys made here with libcrypto,
 * the token locations, config errors with their exact text, and redaction. Verifiers are
 * built the way the server builds them: YAML -> ak_config_load_string -> ak_verifier_new
 * on the validated mapping. Expected MACs are computed here with HMAC(), independently
 * of the engine's streaming code. */
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "core/config.h"
#include "verify/sig_internal.h"
#include "verify/verifier.h"
#include "modules.h"
#include "core/node.h"
#include "core/sources.h"
#include "edge/edge.h"
#include "admin/admin.h"
#include "store/audit.h"
#include "queue/writer.h"
#include "queue/dedupe.h"
#include "queue/quarantine.h"
#include "dispatch/dispatch.h"
#include "sinks/egress.h"
#include "edge/headers.h"
#include "admin/sources_api.h"
#include "core/log.h"
#include "verify/whsec.h"

#define VECTORS_PATH "../shared/vectors/signatures.json"

static const char *const NOENV[] = {NULL};

/* --------------------------------------------------------------------- helpers ---- */

static char *yaml_for(const char *verify_flow) {
  char *y = NULL;
  cr_assert(asprintf(&y, "sources:\n  a:\n    sinks: [{type: log}]\n    verify: %s\n", verify_flow) > 0);
  return y;
}

static ak_verifier_t *make(const char *verify_flow) {
  char *y = yaml_for(verify_flow);
  ak_config_t *cfg = NULL;
  char *err = NULL;
  int rc = ak_config_load_string(ak_modules(), y, strlen(y), NOENV, &cfg, &err);
  cr_assert_eq(rc, 0, "config failed: %s\nfor: %s", err ? err : "?", verify_flow);
  const ak_source_cfg_t *s = ak_source_cfg_find(cfg, "a");
  cr_assert_not_null(s);
  char why[256];
  ak_verifier_t *v = ak_verifier_new(s->verify, why, sizeof why);
  cr_assert_not_null(v, "ak_verifier_new: %s", why);
  ak_config_free(cfg);
  free(y);
  return v;
}

static ak_verifier_t *make_json(json_t *spec) {
  char *s = json_dumps(spec, JSON_ENCODE_ANY); /* ", " and ": " separators: valid YAML flow */
  json_decref(spec);
  ak_verifier_t *v = make(s);
  free(s);
  return v;
}

/* The error of a config that must fail (caller frees). */
static char *config_err(const char *verify_flow) {
  char *y = yaml_for(verify_flow);
  ak_config_t *cfg = NULL;
  char *err = NULL;
  int rc = ak_config_load_string(ak_modules(), y, strlen(y), NOENV, &cfg, &err);
  cr_assert_eq(rc, -1, "config unexpectedly loaded: %s", verify_flow);
  cr_assert_null(cfg);
  cr_assert_not_null(err);
  free(y);
  return err;
}

static void expect_config_err(const char *verify_flow, const char *want) {
  char *err = config_err(verify_flow);
  cr_expect_str_eq(err, want, "for: %s", verify_flow);
  free(err);
}

/* hv: name, value, name, value, ..., NULL */
static ak_verify_reason_t run_q(const ak_verifier_t *v, const char *body, int64_t now, const char *query,
                                const char *const *hv) {
  ak_header_t h[32];
  size_t n = 0;
  for (size_t i = 0; hv && hv[i] && n < 32; i += 2, n++) {
    h[n].name = hv[i];
    h[n].name_len = strlen(hv[i]);
    h[n].value = hv[i + 1];
    h[n].value_len = strlen(hv[i + 1]);
  }
  ak_verify_input_t in = {
    .headers = h, .nheaders = n, .body = (const uint8_t *)body, .body_len = body ? strlen(body) : 0,
    .query = query, .query_len = query ? strlen(query) : 0, .now_s = now};
  return ak_verifier_check(v, &in);
}

#define HV(...) ((const char *const[]){__VA_ARGS__, NULL})
#define EXPECT(v, want, body, now, ...) \
  cr_expect_str_eq(ak_verify_reason_name(run_q((v), (body), (now), NULL, HV(__VA_ARGS__))), (want))
#define EXPECT_Q(v, want, query, ...) \
  cr_expect_str_eq(ak_verify_reason_name(run_q((v), "", 0, (query), HV(__VA_ARGS__))), (want))

static void hex(const uint8_t *b, size_t n, char *out) {
  for (size_t i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", b[i]);
  out[2 * n] = '\0';
}

static void b64(const uint8_t *b, size_t n, char *out) { EVP_EncodeBlock((unsigned char *)out, b, (int)n); }

/* HMAC(key, msg) with `md`, encoded hex or base64, into out (>= 200 bytes). */
static void mac(const EVP_MD *md, const void *key, size_t klen, const char *msg, bool base64, char *out) {
  uint8_t m[EVP_MAX_MD_SIZE];
  unsigned int ml = 0;
  cr_assert_not_null(HMAC(md, key, (int)klen, (const uint8_t *)msg, strlen(msg), m, &ml));
  if (base64) b64(m, ml, out);
  else hex(m, ml, out);
}

static void mac256(const char *key, const char *msg, char *out) { mac(EVP_sha256(), key, strlen(key), msg, false, out); }

/* ------------------------------------------------------------------- vectors ---- */

Test(verify, every_vector_of_the_shared_file) {
  json_error_t jerr;
  json_t *root = json_load_file(VECTORS_PATH, 0, &jerr);
  cr_assert_not_null(root, "cannot read %s (cwd must be the repo root): %s", VECTORS_PATH, jerr.text);
  json_t *vectors = json_object_get(root, "vectors");
  cr_assert(json_array_size(vectors) >= 9, "expected the 9+ vectors of the shared file");
  size_t i, passed = 0;
  json_t *vec;
  json_array_foreach(vectors, i, vec) {
    const char *name = json_string_value(json_object_get(vec, "name"));
    const char *scheme = json_string_value(json_object_get(vec, "scheme"));
    json_t *spec = json_object();
    json_t *headers = json_deep_copy(json_object_get(vec, "headers"));
    if (!headers) headers = json_object();
    if (!strcmp(scheme, "raw_hmac_sha256_hex")) {
      /* RFC 4231 case 2 through the custom descriptor */
      json_object_set_new(spec, "type", json_string("hmac"));
      json_object_set_new(spec, "signature_header", json_string("X-Test-Signature"));
      json_object_set_new(spec, "encoding", json_string("hex"));
      json_object_set(spec, "secret", json_object_get(vec, "secret"));
      json_object_set(headers, "X-Test-Signature", json_object_get(vec, "expected_hex"));
    } else if (!strcmp(scheme, "standard_webhooks_v1a")) {
      json_object_set_new(spec, "type", json_string(scheme));
      json_object_set(spec, "public_key", json_object_get(vec, "public_key"));
    } else {
      cr_assert(!strcmp(scheme, "standard_webhooks") || !strcmp(scheme, "github") || !strcmp(scheme, "slack") ||
                  !strcmp(scheme, "stripe") || !strcmp(scheme, "shopify"),
                "vector %s: unknown scheme %s", name, scheme);
      json_object_set_new(spec, "type", json_string(scheme));
      json_object_set(spec, "secret", json_object_get(vec, "secret"));
    }
    if (json_object_get(vec, "tolerance_seconds"))
      json_object_set(spec, "tolerance_seconds", json_object_get(vec, "tolerance_seconds"));
    ak_verifier_t *v = make_json(spec);
    const char *hv[34];
    size_t n = 0;
    const char *k;
    json_t *val;
    json_object_foreach(headers, k, val) {
      hv[n++] = k;
      hv[n++] = json_string_value(val);
    }
    hv[n] = NULL;
    json_t *now = json_object_get(vec, "now");
    int64_t now_s = now ? json_integer_value(now) : (int64_t)time(NULL);
    const char *body = json_string_value(json_object_get(vec, "body"));
    ak_verify_reason_t r = run_q(v, body, now_s, NULL, hv);
    const char *want = json_is_true(json_object_get(vec, "valid")) ? "ok"
                                                                    : json_string_value(json_object_get(vec, "reason"));
    fprintf(stderr, "vector %-32s %-22s -> %s (want %s)\n", name, scheme, ak_verify_reason_name(r), want);
    cr_expect_str_eq(ak_verify_reason_name(r), want, "vector %s", name);
    if (!strcmp(ak_verify_reason_name(r), want)) passed++;
    ak_verifier_free(v);
    json_decref(headers);
  }
  cr_expect_eq(passed, json_array_size(vectors));
  json_decref(root);
}

/* -------------------------------------------------------------------- presets ---- */

#define GH_SECRET "It's a Secret to Everybody"
#define GH_SIG "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"

Test(verify, github_failures) {
  ak_verifier_t *v = make("{type: github, secret: \"" GH_SECRET "\"}");
  EXPECT(v, "ok", "Hello, World!", 0, "x-hub-signature-256", GH_SIG); /* header names ignore case */
  EXPECT(v, "ok", "Hello, World!", 0, "X-Hub-Signature-256",
         "sha256=757107EA0EB2509FC211221CCE984B8A37570B6D7586C22C46F4379C8B043E17");
  EXPECT(v, "no_match", "Hello, World?", 0, "X-Hub-Signature-256", GH_SIG);
  EXPECT(v, "missing_signature", "Hello, World!", 0, "X-Hub-Signature", GH_SIG);
  EXPECT(v, "missing_signature", "Hello, World!", 0, "X-Hub-Signature-256", "");
  EXPECT(v, "malformed_signature", "Hello, World!", 0, "X-Hub-Signature-256",
         "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17");
  EXPECT(v, "malformed_signature", "Hello, World!", 0, "X-Hub-Signature-256", "sha256=zz");
  EXPECT(v, "malformed_signature", "Hello, World!", 0, "X-Hub-Signature-256", "sha256=abc");
  EXPECT(v, "no_match", "Hello, World!", 0, "X-Hub-Signature-256", "sha256=7571");
  cr_expect(!ak_verifier_weak_hash(v));
  cr_expect_str_eq(ak_verifier_type(v), "github");
  cr_expect_null(ak_verifier_credential_header(v));
  ak_verifier_free(v);

  ak_verifier_t *w = make("{type: github, secret: \"not the secret\"}");
  EXPECT(w, "no_match", "Hello, World!", 0, "X-Hub-Signature-256", GH_SIG);
  ak_verifier_free(w);
}

Test(verify, rotation_old_and_new_secret_pass_a_third_fails) {
  ak_verifier_t *v = make("{type: github, secret: [new-secret, old-secret]}");
  char sig[200], hdr[220];
  const char *body = "{\"n\":1}";
  mac256("new-secret", body, sig);
  snprintf(hdr, sizeof hdr, "sha256=%s", sig);
  EXPECT(v, "ok", body, 0, "X-Hub-Signature-256", hdr);
  mac256("old-secret", body, sig);
  snprintf(hdr, sizeof hdr, "sha256=%s", sig);
  EXPECT(v, "ok", body, 0, "X-Hub-Signature-256", hdr);
  mac256("third-secret", body, sig);
  snprintf(hdr, sizeof hdr, "sha256=%s", sig);
  EXPECT(v, "no_match", body, 0, "X-Hub-Signature-256", hdr);
  ak_verifier_free(v);
}

#define STRIPE_BODY "{\"id\":\"evt_1\",\"object\":\"event\"}"
#define STRIPE_V1 "v1=0c8670ed117751cc551a20e35839447075c42800ea3cf3e8a2fbda99cd1e6edd"

Test(verify, stripe_timestamps_and_candidates) {
  ak_verifier_t *v = make("{type: stripe, secret: whsec_test_secret}");
  const char *ok = "t=1700000000," STRIPE_V1;
  EXPECT(v, "ok", STRIPE_BODY, 1700000000, "Stripe-Signature", ok);
  EXPECT(v, "ok", STRIPE_BODY, 1700000300, "Stripe-Signature", ok);  /* exactly the tolerance */
  EXPECT(v, "timestamp_out_of_tolerance", STRIPE_BODY, 1700000301, "Stripe-Signature", ok); /* stale */
  EXPECT(v, "timestamp_out_of_tolerance", STRIPE_BODY, 1699999699, "Stripe-Signature", ok); /* future */
  EXPECT(v, "no_match", STRIPE_BODY "x", 1700000000, "Stripe-Signature", ok);
  /* several v1 candidates (Stripe's own rotation), the matching one last; v0 is ignored */
  EXPECT(v, "ok", STRIPE_BODY, 1700000000, "Stripe-Signature",
         "t=1700000000, v1=00112233, v0=abcdef, " STRIPE_V1);
  EXPECT(v, "missing_signature", STRIPE_BODY, 1700000000, "Stripe-Signature", STRIPE_V1);
  EXPECT(v, "missing_signature", STRIPE_BODY, 1700000000, "Stripe-Signature", "t=," STRIPE_V1);
  EXPECT(v, "malformed_signature", STRIPE_BODY, 1700000000, "Stripe-Signature", "t=17e8," STRIPE_V1);
  EXPECT(v, "malformed_signature", STRIPE_BODY, 1700000000, "Stripe-Signature", "t=1700000000abc," STRIPE_V1);
  EXPECT(v, "malformed_signature", STRIPE_BODY, 1700000000, "Stripe-Signature", "t=-1700000000," STRIPE_V1);
  EXPECT(v, "malformed_signature", STRIPE_BODY, 1700000000, "Stripe-Signature", "t=1700000000,v0=abcd");
  EXPECT(v, "missing_signature", STRIPE_BODY, 1700000000, "X-Other", ok);
  ak_verifier_free(v);

  /* a tolerance of its own */
  ak_verifier_t *w = make("{type: stripe, secret: whsec_test_secret, tolerance_seconds: 10}");
  EXPECT(w, "ok", STRIPE_BODY, 1700000010, "Stripe-Signature", ok);
  EXPECT(w, "timestamp_out_of_tolerance", STRIPE_BODY, 1700000011, "Stripe-Signature", ok);
  ak_verifier_free(w);
}

Test(verify, slack_timestamp_header) {
  ak_verifier_t *v = make("{type: slack, secret: s3cr3t}");
  char sig[200], hdr[220];
  mac256("s3cr3t", "v0:1531420618:a=b", sig);
  snprintf(hdr, sizeof hdr, "v0=%s", sig);
  EXPECT(v, "ok", "a=b", 1531420618, "X-Slack-Request-Timestamp", "1531420618", "X-Slack-Signature", hdr);
  EXPECT(v, "missing_signature", "a=b", 1531420618, "X-Slack-Signature", hdr);
  EXPECT(v, "missing_signature", "a=b", 1531420618, "X-Slack-Request-Timestamp", "", "X-Slack-Signature", hdr);
  EXPECT(v, "malformed_signature", "a=b", 1531420618, "X-Slack-Request-Timestamp", "15314x0618",
         "X-Slack-Signature", hdr);
  EXPECT(v, "timestamp_out_of_tolerance", "a=b", 1531420618 + 301, "X-Slack-Request-Timestamp", "1531420618",
         "X-Slack-Signature", hdr);
  EXPECT(v, "malformed_signature", "a=b", 1531420618, "X-Slack-Request-Timestamp", "1531420618",
         "X-Slack-Signature", sig); /* no v0= */
  ak_verifier_free(v);
}

#define SW_SECRET "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
#define SW_BODY "{\"test\": 2432232314}"
#define SW_ID "msg_p5jXN8AQM9LWM0D4loKWxJek"
#define SW_TS "1614265330"
#define SW_SIG "g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

Test(verify, standard_webhooks_tokens_and_headers) {
  ak_verifier_t *v = make("{type: standard_webhooks, secret: " SW_SECRET "}");
  EXPECT(v, "ok", SW_BODY, 1614265330, "webhook-id", SW_ID, "webhook-timestamp", SW_TS, "webhook-signature",
         "v1," SW_SIG);
  EXPECT(v, "ok", SW_BODY, 1614265330, "Webhook-Id", SW_ID, "Webhook-Timestamp", SW_TS, "Webhook-Signature",
         "v1a,AAAA v1,bm90IGl0 v1," SW_SIG " v2,xyz");
  EXPECT(v, "malformed_signature", SW_BODY, 1614265330, "webhook-id", SW_ID, "webhook-timestamp", SW_TS,
         "webhook-signature", "v2," SW_SIG);
  EXPECT(v, "malformed_signature", SW_BODY, 1614265330, "webhook-id", SW_ID, "webhook-timestamp", SW_TS,
         "webhook-signature", "v1,!!!notbase64");
  EXPECT(v, "missing_signature", SW_BODY, 1614265330, "webhook-timestamp", SW_TS, "webhook-signature",
         "v1," SW_SIG); /* {header:webhook-id} missing */
  EXPECT(v, "missing_signature", SW_BODY, 1614265330, "webhook-id", SW_ID, "webhook-signature", "v1," SW_SIG);
  EXPECT(v, "timestamp_out_of_tolerance", SW_BODY, 1614265330 - 301, "webhook-id", SW_ID, "webhook-timestamp",
         SW_TS, "webhook-signature", "v1," SW_SIG); /* from the future */
  EXPECT(v, "no_match", SW_BODY, 1614265330, "webhook-id", "msg_other", "webhook-timestamp", SW_TS,
         "webhook-signature", "v1," SW_SIG);
  ak_verifier_free(v);
  /* rotation with a whsec_ list: the right one second */
  ak_verifier_t *w = make("{type: standard_webhooks, secret: [whsec_c2Vjb25k, " SW_SECRET "]}");
  EXPECT(w, "ok", SW_BODY, 1614265330, "webhook-id", SW_ID, "webhook-timestamp", SW_TS, "webhook-signature",
         "v1," SW_SIG);
  ak_verifier_free(w);
}

Test(verify, shopify_base64) {
  ak_verifier_t *v = make("{type: shopify, secret: shpss_test_secret}");
  EXPECT(v, "ok", STRIPE_BODY, 0, "X-Shopify-Hmac-Sha256", "PVLwnu1YHzpGLn2MwNKXb7Ul1ju5gfmLeM65DvA9/S8=");
  EXPECT(v, "malformed_signature", STRIPE_BODY, 0, "X-Shopify-Hmac-Sha256",
         "PVLwnu1YHzpGLn2MwNKXb7Ul1ju5gfmLeM65DvA9/S8"); /* padding is required */
  EXPECT(v, "no_match", STRIPE_BODY " ", 0, "X-Shopify-Hmac-Sha256", "PVLwnu1YHzpGLn2MwNKXb7Ul1ju5gfmLeM65DvA9/S8=");
  ak_verifier_free(v);
}

/* More threads than the engine keeps working contexts for: the pooled and the fallback
 * path both run, concurrently, on one verifier with two secrets. */
typedef struct {
  const ak_verifier_t *v;
  const char *good, *bad;
  int ok, wrong;
} race_t;

static void *race(void *arg) {
  race_t *r = arg;
  for (int i = 0; i < 300; i++) {
    r->ok += run_q(r->v, "race-body", 0, NULL, HV("X-Hub-Signature-256", r->good)) == AK_VR_OK;
    r->wrong += run_q(r->v, "race-body", 0, NULL, HV("X-Hub-Signature-256", r->bad)) == AK_VR_NO_MATCH;
  }
  return NULL;
}

Test(verify, concurrent_checks_share_one_verifier) {
  ak_verifier_t *v = make("{type: github, secret: [other, k]}");
  char sig[200], good[220], bad[220];
  mac256("k", "race-body", sig);
  snprintf(good, sizeof good, "sha256=%s", sig);
  mac256("x", "race-body", sig);
  snprintf(bad, sizeof bad, "sha256=%s", sig);
  enum { N = 16 };
  pthread_t th[N];
  race_t r[N];
  for (int i = 0; i < N; i++) {
    r[i] = (race_t){.v = v, .good = good, .bad = bad};
    cr_assert_eq(pthread_create(&th[i], NULL, race, &r[i]), 0);
  }
  for (int i = 0; i < N; i++) {
    pthread_join(th[i], NULL);
    cr_expect_eq(r[i].ok, 300);
    cr_expect_eq(r[i].wrong, 300);
  }
  ak_verifier_free(v);
}

/* ------------------------------------------------------------ custom descriptor ---- */

Test(verify, custom_whole_with_prefix) {
  ak_verifier_t *v = make("{type: hmac, secret: k, signature_header: X-Sig, sig_prefix: \"sha256=\"}");
  char sig[200], hdr[220];
  mac256("k", "body", sig);
  snprintf(hdr, sizeof hdr, "sha256=%s", sig);
  EXPECT(v, "ok", "body", 0, "X-Sig", hdr);
  EXPECT(v, "malformed_signature", "body", 0, "X-Sig", sig); /* prefix missing */
  EXPECT(v, "missing_signature", "body", 0, "X-Other", hdr);
  ak_verifier_free(v);
}

Test(verify, custom_csv_pairs_with_sig_key) {
  ak_verifier_t *v = make("{type: hmac, secret: k, signature_header: X-Sig, parse: csv_pairs, sig_key: s}");
  char sig[200], hdr[300];
  mac256("k", "body", sig);
  snprintf(hdr, sizeof hdr, "ts=1,s=00,s=%s", sig);
  EXPECT(v, "ok", "body", 0, "X-Sig", hdr);
  snprintf(hdr, sizeof hdr, "ts=1,v1=%s", sig);
  EXPECT(v, "malformed_signature", "body", 0, "X-Sig", hdr);
  snprintf(hdr, sizeof hdr, "s==%s", sig); /* split at the first '=': the value is "=<hex>" */
  EXPECT(v, "malformed_signature", "body", 0, "X-Sig", hdr);
  ak_verifier_free(v);
}

Test(verify, custom_space_versions_with_and_without_version) {
  char sig[200], hdr[300];
  mac(EVP_sha256(), "k", 1, "body", true, sig);
  ak_verifier_t *v = make("{type: hmac, secret: k, signature_header: X-Sig, parse: space_versions, version: v2, "
                          "encoding: base64}");
  snprintf(hdr, sizeof hdr, "v1,%s v2,%s", "AAAA", sig);
  EXPECT(v, "ok", "body", 0, "X-Sig", hdr);
  snprintf(hdr, sizeof hdr, "v1,%s", sig);
  EXPECT(v, "malformed_signature", "body", 0, "X-Sig", hdr);
  ak_verifier_free(v);
  ak_verifier_t *w = make("{type: hmac, secret: k, signature_header: X-Sig, parse: space_versions, encoding: base64}");
  snprintf(hdr, sizeof hdr, "AAAA  %s", sig); /* no version: every token is a candidate */
  EXPECT(w, "ok", "body", 0, "X-Sig", hdr);
  snprintf(hdr, sizeof hdr, "v2,%s", sig);
  EXPECT(w, "malformed_signature", "body", 0, "X-Sig", hdr);
  ak_verifier_free(w);
}

Test(verify, custom_each_hash_and_weak_hash) {
  struct {
    const char *name;
    const EVP_MD *md;
    bool weak;
  } cases[] = {{"sha256", EVP_sha256(), false}, {"sha512", EVP_sha512(), false}, {"sha1", EVP_sha1(), true}};
  for (size_t i = 0; i < 3; i++) {
    char spec[200], sig[200];
    snprintf(spec, sizeof spec, "{type: hmac, secret: k, signature_header: X-Sig, hash: %s}", cases[i].name);
    ak_verifier_t *v = make(spec);
    mac(cases[i].md, "k", 1, "body", false, sig);
    EXPECT(v, "ok", "body", 0, "X-Sig", sig);
    EXPECT(v, "no_match", "bodY", 0, "X-Sig", sig);
    cr_expect_eq(ak_verifier_weak_hash(v), cases[i].weak, "%s", cases[i].name);
    /* another hash's MAC has the wrong length: no match, not malformed */
    mac(i ? EVP_sha256() : EVP_sha512(), "k", 1, "body", false, sig);
    EXPECT(v, "no_match", "body", 0, "X-Sig", sig);
    ak_verifier_free(v);
  }
}

/* The engine keys each secret once (inner and outer digest states) and finishes every
 * check from copies: keys shorter than, equal to and longer than each hash's block (64
 * bytes, 128 for sha512: longer keys are hashed first), bodies of several lengths, each
 * against libcrypto's one-shot HMAC(); and two checks in a row on one verifier, so a
 * check that left its state in the shared key would fail the second. */
Test(verify, custom_each_hash_against_libcrypto_for_key_and_body_lengths) {
  struct {
    const char *name;
    const EVP_MD *md;
  } hashes[] = {{"sha1", EVP_sha1()}, {"sha256", EVP_sha256()}, {"sha512", EVP_sha512()}};
  size_t klens[] = {1, 20, 63, 64, 65, 127, 128, 129, 300};
  size_t blens[] = {1, 55, 56, 64, 111, 112, 128, 1023};
  char key[301], body[1024], sig[300];
  for (size_t i = 0; i < sizeof key - 1; i++) key[i] = (char)('a' + (i * 7) % 26);
  for (size_t i = 0; i < sizeof body - 1; i++) body[i] = (char)('A' + (i * 11) % 26);
  for (size_t h = 0; h < 3; h++)
    for (size_t k = 0; k < sizeof klens / sizeof *klens; k++) {
      char spec[600];
      snprintf(spec, sizeof spec, "{type: hmac, secret: %.*s, signature_header: X-Sig, hash: %s}", (int)klens[k], key,
               hashes[h].name);
      ak_verifier_t *v = make(spec);
      for (size_t b = 0; b < sizeof blens / sizeof *blens; b++) {
        char msg[1024];
        memcpy(msg, body, blens[b]);
        msg[blens[b]] = '\0';
        mac(hashes[h].md, key, klens[k], msg, false, sig);
        for (int twice = 0; twice < 2; twice++)
          cr_expect_str_eq(ak_verify_reason_name(run_q(v, msg, 0, NULL, HV("X-Sig", sig))), "ok",
                           "%s key %zu body %zu", hashes[h].name, klens[k], blens[b]);
        msg[0] ^= 1;
        cr_expect_str_eq(ak_verify_reason_name(run_q(v, msg, 0, NULL, HV("X-Sig", sig))), "no_match",
                         "%s key %zu body %zu (altered)", hashes[h].name, klens[k], blens[b]);
      }
      ak_verifier_free(v);
    }
}

Test(verify, custom_each_encoding_and_whsec_secret) {
  char sig[200];
  ak_verifier_t *v = make("{type: hmac, secret: k, signature_header: X-Sig, encoding: base64}");
  mac(EVP_sha256(), "k", 1, "body", true, sig);
  EXPECT(v, "ok", "body", 0, "X-Sig", sig);
  mac(EVP_sha256(), "k", 1, "body", false, sig);
  EXPECT(v, "no_match", "body", 0, "X-Sig", sig); /* hex text is also base64, of 48 other bytes */
  EXPECT(v, "malformed_signature", "body", 0, "X-Sig", "not-base64!");
  ak_verifier_free(v);
  ak_verifier_t *w = make("{type: hmac, secret: k, signature_header: X-Sig, encoding: hex}");
  mac(EVP_sha256(), "k", 1, "body", false, sig);
  EXPECT(w, "ok", "body", 0, "X-Sig", sig);
  ak_verifier_free(w);
  /* whsec_: the key is the base64-decoded part ("c2VjcmV0LWtleQ==" = "secret-key") */
  ak_verifier_t *x = make("{type: hmac, secret: \"whsec_c2VjcmV0LWtleQ==\", signature_header: X-Sig, "
                          "secret_decode: whsec_base64}");
  mac(EVP_sha256(), "secret-key", 10, "body", false, sig);
  EXPECT(x, "ok", "body", 0, "X-Sig", sig);
  ak_verifier_free(x);
  /* raw: the same string is the key itself */
  ak_verifier_t *y = make("{type: hmac, secret: \"whsec_c2VjcmV0LWtleQ==\", signature_header: X-Sig}");
  EXPECT(y, "no_match", "body", 0, "X-Sig", sig);
  mac256("whsec_c2VjcmV0LWtleQ==", "body", sig);
  EXPECT(y, "ok", "body", 0, "X-Sig", sig);
  ak_verifier_free(y);
}

Test(verify, custom_timestamp_header) {
  ak_verifier_t *v = make("{type: hmac, secret: k, signature_header: X-Sig, timestamp_header: X-Ts, "
                          "signed: \"{ts}.{body}\", tolerance_seconds: 60}");
  char sig[200];
  mac256("k", "1000.body", sig);
  EXPECT(v, "ok", "body", 1000, "X-Ts", "1000", "X-Sig", sig);
  EXPECT(v, "ok", "body", 1060, "X-Ts", "1000", "X-Sig", sig);
  EXPECT(v, "timestamp_out_of_tolerance", "body", 1061, "X-Ts", "1000", "X-Sig", sig);
  EXPECT(v, "timestamp_out_of_tolerance", "body", 939, "X-Ts", "1000", "X-Sig", sig);
  EXPECT(v, "missing_signature", "body", 1000, "X-Sig", sig);
  EXPECT(v, "malformed_signature", "body", 1000, "X-Ts", "soon", "X-Sig", sig);
  EXPECT(v, "malformed_signature", "body", 1000, "X-Ts", "1000.5", "X-Sig", sig);
  EXPECT(v, "no_match", "body", 1001, "X-Ts", "1001", "X-Sig", sig);
  ak_verifier_free(v);
  /* a timestamp header checked but not signed as {ts} */
  ak_verifier_t *w = make("{type: hmac, secret: k, signature_header: X-Sig, timestamp_header: X-Ts}");
  mac256("k", "body", sig);
  EXPECT(w, "ok", "body", 1000, "X-Ts", "1000", "X-Sig", sig);
  EXPECT(w, "missing_signature", "body", 1000, "X-Sig", sig);
  ak_verifier_free(w);
}

Test(verify, custom_header_tokens_and_literals) {
  ak_verifier_t *v = make("{type: hmac, secret: k, signature_header: X-Sig, "
                          "signed: \"id={header:X-Id};{body};end\"}");
  char sig[200];
  mac256("k", "id=42;body;end", sig);
  EXPECT(v, "ok", "body", 0, "x-id", "42", "X-Sig", sig);
  EXPECT(v, "missing_signature", "body", 0, "X-Sig", sig);
  EXPECT(v, "no_match", "body", 0, "X-Id", "43", "X-Sig", sig);
  ak_verifier_free(v);
  /* an empty body is signed as nothing */
  ak_verifier_t *w = make("{type: hmac, secret: k, signature_header: X-Sig}");
  mac256("k", "", sig);
  EXPECT(w, "ok", "", 0, "X-Sig", sig);
  ak_verifier_free(w);
}

/* ------------------------------------------------------------------ asymmetric ---- */

#define V1A_PK "whpk_ZlN4eg7dSSqi0moX9hQUk3orrOouK3QVQSlJa248c/g="
#define V1A_SIG "v1a,tQ9V2XOqn7jL/DQenEFpqIugdBVtiMmER5mhSkXBNwM0mkATuDe6KYYUuxqtaiHeYGb7KaaBRdM5WqyeFiL8Ag=="

static char *pem_public(EVP_PKEY *k) {
  BIO *b = BIO_new(BIO_s_mem());
  cr_assert(PEM_write_bio_PUBKEY(b, k) == 1);
  char *data = NULL;
  long n = BIO_get_mem_data(b, &data);
  char *out = strndup(data, (size_t)n);
  BIO_free(b);
  return out;
}

static char *whpk_of(EVP_PKEY *k) {
  uint8_t raw[32];
  size_t rl = sizeof raw;
  cr_assert(EVP_PKEY_get_raw_public_key(k, raw, &rl) == 1);
  char *out = malloc(80);
  strcpy(out, "whpk_");
  b64(raw, rl, out + 5);
  return out;
}

/* Sign msg with k; padding 0 = the key's default (Ed25519, PKCS#1), else PSS with saltlen. */
static void sign_b64(EVP_PKEY *k, const char *mdname, bool pss, int saltlen, const char *msg, char *out) {
  EVP_MD_CTX *md = EVP_MD_CTX_new();
  EVP_PKEY_CTX *pctx = NULL;
  cr_assert(EVP_DigestSignInit_ex(md, &pctx, mdname, NULL, NULL, k, NULL) == 1);
  if (pss) {
    cr_assert(EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) == 1);
    cr_assert(EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, saltlen) == 1);
  }
  uint8_t sig[1024];
  size_t sl = sizeof sig;
  cr_assert(EVP_DigestSign(md, sig, &sl, (const uint8_t *)msg, strlen(msg)) == 1);
  b64(sig, sl, out);
  EVP_MD_CTX_free(md);
}

static ak_verifier_t *make_asym(const char *alg, json_t *keys, const char *extra_json) {
  json_t *spec = json_loads(extra_json ? extra_json : "{}", 0, NULL);
  cr_assert_not_null(spec);
  json_object_set_new(spec, "type", json_string("asymmetric"));
  json_object_set_new(spec, "algorithm", json_string(alg));
  json_object_set_new(spec, "public_key", keys);
  return make_json(spec);
}

Test(verify, v1a_wrong_key_and_key_list) {
  EVP_PKEY *other = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
  cr_assert_not_null(other);
  char *other_pk = whpk_of(other);
  char spec[400];
  snprintf(spec, sizeof spec, "{type: standard_webhooks_v1a, public_key: \"%s\"}", other_pk);
  ak_verifier_t *v = make(spec);
  EXPECT(v, "no_match", SW_BODY, 1614265330, "webhook-id", SW_ID, "webhook-timestamp", SW_TS, "webhook-signature",
         V1A_SIG);
  ak_verifier_free(v);
  snprintf(spec, sizeof spec, "{type: standard_webhooks_v1a, public_key: [\"%s\", \"" V1A_PK "\"]}", other_pk);
  v = make(spec);
  EXPECT(v, "ok", SW_BODY, 1614265330, "webhook-id", SW_ID, "webhook-timestamp", SW_TS, "webhook-signature",
         V1A_SIG);
  EXPECT(v, "no_match", SW_BODY "x", 1614265330, "webhook-id", SW_ID, "webhook-timestamp", SW_TS,
         "webhook-signature", V1A_SIG);
  EXPECT(v, "timestamp_out_of_tolerance", SW_BODY, 1614265330 + 301, "webhook-id", SW_ID, "webhook-timestamp",
         SW_TS, "webhook-signature", V1A_SIG);
  EXPECT(v, "malformed_signature", SW_BODY, 1614265330, "webhook-id", SW_ID, "webhook-timestamp", SW_TS,
         "webhook-signature", "v1,AAAA");
  /* a signature made here with the other key, over the same layout */
  char sig[200], hdr[220];
  sign_b64(other, NULL, false, 0, SW_ID "." SW_TS ".hello", sig);
  snprintf(hdr, sizeof hdr, "v1a,%s", sig);
  EXPECT(v, "ok", "hello", 1614265330, "webhook-id", SW_ID, "webhook-timestamp", SW_TS, "webhook-signature", hdr);
  cr_expect_null(ak_verifier_credential_header(v));
  ak_verifier_free(v);
  free(other_pk);
  EVP_PKEY_free(other);
}

Test(verify, asymmetric_ed25519_pem_from_the_vector_seed) {
  /* the vector's private seed gives the same public key, here as PEM */
  uint8_t seed[64];
  int n = EVP_DecodeBlock(seed, (const uint8_t *)"VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk=", 44);
  cr_assert_geq(n, 32);
  EVP_PKEY *k = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, seed, 32);
  cr_assert_not_null(k);
  char *pk = whpk_of(k);
  cr_expect_str_eq(pk, V1A_PK);
  char *pem = pem_public(k);
  ak_verifier_t *v = make_asym("ed25519", json_pack("[s]", pem), NULL);
  free(pem);
  EXPECT(v, "ok", SW_BODY, 1614265330, "webhook-id", SW_ID, "webhook-timestamp", SW_TS, "webhook-signature",
         V1A_SIG);
  ak_verifier_free(v);
  free(pk);
  EVP_PKEY_free(k);
}

Test(verify, asymmetric_rsa_pkcs1_and_pss) {
  EVP_PKEY *k = EVP_RSA_gen(2048);
  cr_assert_not_null(k);
  char *pem = pem_public(k);
  const char *layout = "{\"signature_header\": \"X-Signature\", \"parse\": \"whole\", \"signed\": "
                       "\"{header:X-Id}.{body}\", \"timestamp_header\": null}";
  char sig[800];

  ak_verifier_t *pk1 = make_asym("rsa_pkcs1_sha256", json_string(pem), layout);
  sign_b64(k, "SHA256", false, 0, "7.payload", sig);
  EXPECT(pk1, "ok", "payload", 0, "X-Id", "7", "X-Signature", sig);
  EXPECT(pk1, "no_match", "payload!", 0, "X-Id", "7", "X-Signature", sig);
  EXPECT(pk1, "missing_signature", "payload", 0, "X-Signature", sig);
  char pss_sig[800];
  sign_b64(k, "SHA256", true, RSA_PSS_SALTLEN_DIGEST, "7.payload", pss_sig);
  EXPECT(pk1, "no_match", "payload", 0, "X-Id", "7", "X-Signature", pss_sig); /* PSS under PKCS#1 */
  ak_verifier_free(pk1);

  ak_verifier_t *pss = make_asym("rsa_pss_sha256", json_string(pem), layout);
  EXPECT(pss, "ok", "payload", 0, "X-Id", "7", "X-Signature", pss_sig);
  sign_b64(k, "SHA256", true, RSA_PSS_SALTLEN_MAX, "7.payload", sig);
  EXPECT(pss, "ok", "payload", 0, "X-Id", "7", "X-Signature", sig); /* maximum salt */
  EXPECT(pss, "no_match", "payload", 0, "X-Id", "8", "X-Signature", sig);
  sign_b64(k, "SHA256", false, 0, "7.payload", sig);
  EXPECT(pss, "no_match", "payload", 0, "X-Id", "7", "X-Signature", sig); /* PKCS#1 under PSS */
  ak_verifier_free(pss);

  /* rotation: a second RSA key in the list */
  EVP_PKEY *k2 = EVP_RSA_gen(2048);
  char *pem2 = pem_public(k2);
  ak_verifier_t *rot = make_asym("rsa_pkcs1_sha256", json_pack("[s,s]", pem2, pem), layout);
  sign_b64(k, "SHA256", false, 0, "7.payload", sig);
  EXPECT(rot, "ok", "payload", 0, "X-Id", "7", "X-Signature", sig);
  sign_b64(k2, "SHA256", false, 0, "7.payload", sig);
  EXPECT(rot, "ok", "payload", 0, "X-Id", "7", "X-Signature", sig);
  ak_verifier_free(rot);

  /* an RSA key for ed25519 is a config error */
  json_t *spec = json_pack("{s:s, s:s, s:s}", "type", "asymmetric", "algorithm", "ed25519", "public_key", pem);
  char *flow = json_dumps(spec, JSON_ENCODE_ANY);
  expect_config_err(flow, "sources.a.verify.public_key: the key type does not match algorithm ed25519");
  free(flow);
  json_decref(spec);
  free(pem);
  free(pem2);
  EVP_PKEY_free(k);
  EVP_PKEY_free(k2);
}

/* ----------------------------------------------------------------------- token ---- */

Test(verify, token_bearer) {
  ak_verifier_t *v = make("{type: token, secret: [tok-new, tok-old]}");
  cr_expect_str_eq(ak_verifier_credential_header(v), "authorization");
  cr_expect_null(ak_verifier_credential_param(v));
  EXPECT(v, "ok", "", 0, "Authorization", "Bearer tok-new");
  EXPECT(v, "ok", "", 0, "authorization", "bearer   tok-old");
  EXPECT(v, "no_match", "", 0, "Authorization", "Bearer tok-other");
  EXPECT(v, "no_match", "", 0, "Authorization", "Bearer tok-ne");
  EXPECT(v, "missing_signature", "", 0, "X-Token", "tok-new");
  EXPECT(v, "malformed_signature", "", 0, "Authorization", "Basic dG9rLW5ldw==");
  EXPECT(v, "malformed_signature", "", 0, "Authorization", "Bearer");
  EXPECT(v, "malformed_signature", "", 0, "Authorization", "Bearertok-new");
  ak_verifier_free(v);
}

Test(verify, token_basic) {
  ak_verifier_t *v = make("{type: token, location: basic, secret: \"alice:pa55\"}");
  cr_expect_str_eq(ak_verifier_credential_header(v), "authorization");
  EXPECT(v, "ok", "", 0, "Authorization", "Basic YWxpY2U6cGE1NQ==");
  EXPECT(v, "ok", "", 0, "Authorization", "BASIC YWxpY2U6cGE1NQ==");
  EXPECT(v, "no_match", "", 0, "Authorization", "Basic YWxpY2U6d3Jvbmc="); /* alice:wrong */
  EXPECT(v, "malformed_signature", "", 0, "Authorization", "Basic ***");
  EXPECT(v, "malformed_signature", "", 0, "Authorization", "Basic YWxpY2U="); /* no ':' */
  EXPECT(v, "malformed_signature", "", 0, "Authorization", "Bearer alice:pa55");
  EXPECT(v, "missing_signature", "", 0, "Authorization", "");
  ak_verifier_free(v);
}

Test(verify, token_header_and_query) {
  ak_verifier_t *h = make("{type: token, location: header, header: X-Api-Key, secret: k3y}");
  cr_expect_str_eq(ak_verifier_credential_header(h), "x-api-key");
  cr_expect_null(ak_verifier_credential_param(h));
  EXPECT(h, "ok", "", 0, "x-api-key", "k3y");
  EXPECT(h, "no_match", "", 0, "X-API-KEY", "k3y!");
  EXPECT(h, "missing_signature", "", 0, "Authorization", "Bearer k3y");
  ak_verifier_free(h);

  ak_verifier_t *q = make("{type: token, location: query, param: token, secret: \"a b/c+d\"}");
  cr_expect_null(ak_verifier_credential_header(q));
  cr_expect_str_eq(ak_verifier_credential_param(q), "token");
  EXPECT_Q(q, "ok", "x=1&token=a%20b%2Fc+d&y=2", "X-A", "b");
  EXPECT_Q(q, "ok", "token=a%20b/c+d", "X-A", "b");
  EXPECT_Q(q, "no_match", "token=a+b%2Fc+d", "X-A", "b"); /* '+' is not a space */
  EXPECT_Q(q, "no_match", "tokens=a%20b%2Fc+d&token=nope", "X-A", "b");
  EXPECT_Q(q, "missing_signature", "x=1&tokens=a", "X-A", "b");
  EXPECT_Q(q, "missing_signature", NULL, "X-A", "b");
  EXPECT_Q(q, "missing_signature", "token=", "X-A", "b");
  EXPECT_Q(q, "malformed_signature", "token=a%2", "X-A", "b");
  EXPECT_Q(q, "malformed_signature", "token=a%zzb", "X-A", "b");
  ak_verifier_free(q);
}

/* ------------------------------------------------------------------------ none ---- */

Test(verify, none_and_registry) {
  char err[256];
  ak_verifier_t *v = ak_verifier_new(NULL, err, sizeof err);
  cr_assert_not_null(v);
  cr_expect(ak_verifier_is_none(v));
  cr_expect_str_eq(ak_verifier_type(v), "none");
  EXPECT(v, "ok", "anything", 0, "X-A", "b");
  cr_expect(!ak_verifier_needs_client_cert(v));
  ak_verifier_free(v);
  ak_verifier_t *w = make("{type: none, secret: ignored, tolerance_seconds: 10}");
  cr_expect(ak_verifier_is_none(w));
  ak_verifier_free(w);
  cr_expect_str_eq(ak_verify_reason_name(AK_VR_OK), "ok");
  cr_expect_str_eq(ak_verify_reason_name(AK_VR_MISSING_SIGNATURE), "missing_signature");
  cr_expect_str_eq(ak_verify_reason_name(AK_VR_MALFORMED_SIGNATURE), "malformed_signature");
  cr_expect_str_eq(ak_verify_reason_name(AK_VR_NO_MATCH), "no_match");
  cr_expect_str_eq(ak_verify_reason_name(AK_VR_TIMESTAMP_OUT_OF_TOLERANCE), "timestamp_out_of_tolerance");
  /* the JSON `reason` as the original writes it: the atom as Elixir prints it */
  cr_expect_str_eq(ak_verify_reason_text(AK_VR_MISSING_SIGNATURE), ":missing_signature");
  cr_expect_str_eq(ak_verify_reason_text(AK_VR_MALFORMED_SIGNATURE), ":malformed_signature");
  cr_expect_str_eq(ak_verify_reason_text(AK_VR_NO_MATCH), ":no_match");
  cr_expect_str_eq(ak_verify_reason_text(AK_VR_TIMESTAMP_OUT_OF_TOLERANCE), ":timestamp_out_of_tolerance");
  for (int r = AK_VR_OK; r < AK_VR_COUNT; r++) {
    const char *t = ak_verify_reason_text((ak_verify_reason_t)r);
    cr_expect(t[0] == ':' && strcmp(t + 1, ak_verify_reason_name((ak_verify_reason_t)r)) == 0, "%s", t);
  }
  const char *types[] = {"none", "stripe", "github", "standard_webhooks", "shopify", "slack", "hmac",
                         "standard_webhooks_v1a", "asymmetric", "token", "client_cert"};
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
    const ak_verifier_vtable_t *vt = ak_verifiers_find(types[i]);
    cr_assert_not_null(vt, "%s", types[i]);
    cr_expect_str_eq(vt->plugin.type, types[i]);
    char *list = ak_plugin_type_list(&ak_verify_kind);
    cr_expect_not_null(strstr(list, types[i]));
    free(list);
  }
  cr_expect_null(ak_verifiers_find("pgp"));
  json_t *pgp = json_pack("{s:s}", "type", "pgp");
  cr_expect_null(ak_verifier_new(pgp, err, sizeof err));
  cr_expect_str_eq(err, "type: unknown value \"pgp\"; expected one of none, stripe, github, standard_webhooks, "
                        "shopify, slack, hmac, standard_webhooks_v1a, asymmetric, token, client_cert");
  json_decref(pgp);
}

/* ---------------------------------------------------------------- config errors ---- */

Test(verify, config_errors_exact_text) {
  expect_config_err("{type: pgp}",
                    "sources.a.verify.type: unknown value \"pgp\"; expected one of none, stripe, github, "
                    "standard_webhooks, shopify, slack, hmac, standard_webhooks_v1a, asymmetric, token, client_cert");
  expect_config_err("{type: github, secret: s, signed: \"{body}\"}", "sources.a.verify: unknown key \"signed\"");
  expect_config_err("{type: github}", "sources.a.verify: missing required key \"secret\"");
  expect_config_err("{type: slack, secret: s, tolerance_seconds: 7200}",
                    "sources.a.verify.tolerance_seconds must be between 1 and 3600, got 7200");
  expect_config_err("{type: slack, secret: s, tolerance_seconds: 0}",
                    "sources.a.verify.tolerance_seconds must be between 1 and 3600, got 0");
  expect_config_err("{type: stripe, secret: [a, b, c, d, e, f, g, h, i]}", "sources.a.verify.secret: at most 8 secrets");
  expect_config_err("{type: stripe, secret: [a, \"\"]}", "sources.a.verify.secret[1]: must not be empty");
  expect_config_err("{type: standard_webhooks, secret: \"whsec_not*base64\"}",
                    "sources.a.verify.secret: cannot be decoded: expected \"whsec_\" followed by base64");
  expect_config_err("{type: standard_webhooks, secret: [" SW_SECRET ", whsec_]}",
                    "sources.a.verify.secret[1]: cannot be decoded: expected \"whsec_\" followed by base64");
  expect_config_err("{type: standard_webhooks_v1a, public_key: whpk_AAAA}",
                    "sources.a.verify.public_key: cannot be decoded: expected \"whpk_\" followed by the base64 of a "
                    "32-byte Ed25519 public key");
  expect_config_err("{type: asymmetric, public_key: [" V1A_PK ", \"-----BEGIN PUBLIC KEY-----\\nAAAA\\n-----END "
                    "PUBLIC KEY-----\\n\"]}",
                    "sources.a.verify.public_key[1]: cannot be decoded: expected a PEM public key "
                    "(-----BEGIN PUBLIC KEY-----) or whpk_<base64>");
  expect_config_err("{type: hmac, secret: s, signature_header: X-Sig, signed: \"{ts}.{body}\"}",
                    "sources.a.verify.signed: {ts} needs timestamp_header");
  expect_config_err("{type: hmac, secret: s, signature_header: X-Sig, signed: \"{nonce}.{body}\"}",
                    "sources.a.verify.signed: unknown token \"{nonce}\"; expected {body}, {ts} or {header:NAME}");
  expect_config_err("{type: hmac, secret: s, signature_header: X-Sig, signed: \"{body\"}",
                    "sources.a.verify.signed: unterminated \"{\"; expected {body}, {ts} or {header:NAME}");
  expect_config_err("{type: hmac, secret: s, signature_header: X-Sig, signed: \"{header:X-Id}\"}",
                    "sources.a.verify.signed: must include {body}");
  expect_config_err("{type: hmac, secret: s}", "sources.a.verify: missing required key \"signature_header\"");
  expect_config_err("{type: hmac, secret: s, signature_header: X-Sig, parse: csv_pairs}",
                    "sources.a.verify.sig_key: required when parse is csv_pairs");
  expect_config_err("{type: hmac, secret: s, signature_header: X-Sig, parse: space_versions, sig_prefix: \"v=\"}",
                    "sources.a.verify.sig_prefix: only valid with parse whole");
  expect_config_err("{type: hmac, secret: s, signature_header: X-Sig, hash: md5}",
                    "sources.a.verify.hash: unknown value \"md5\"; expected one of sha256, sha512, sha1");
  expect_config_err("{type: token, location: header, secret: s}",
                    "sources.a.verify.header: required when location is header");
  expect_config_err("{type: token, location: query, secret: s}",
                    "sources.a.verify.param: required when location is query");
  expect_config_err("{type: token, param: t, secret: s}", "sources.a.verify.param: only valid with location query");
  expect_config_err("{type: token, location: basic, secret: [\"a:b\", nocolon]}",
                    "sources.a.verify.secret[1]: expected \"user:password\" for location basic");
  expect_config_err("{type: token, location: cookie, secret: s}",
                    "sources.a.verify.location: unknown value \"cookie\"; expected one of bearer, basic, header, query");
  expect_config_err("{type: asymmetric, public_key: " V1A_PK ", algorithm: rsa_pss_sha256}",
                    "sources.a.verify.public_key: the key type does not match algorithm rsa_pss_sha256");
  /* a secret value never appears in an error */
  char *err = config_err("{type: standard_webhooks, secret: \"whsec_TOPSECRETVALUE*\"}");
  cr_expect_null(strstr(err, "TOPSECRETVALUE"), "%s", err);
  free(err);
  err = config_err("{type: github, secret: {nested: TOPSECRETVALUE}}");
  cr_expect_null(strstr(err, "TOPSECRETVALUE"), "%s", err);
  free(err);
}

Test(verify, print_config_redacts_secrets) {
  const char *yaml = "sources:\n"
                     "  a:\n    sinks: [{type: log}]\n    verify: {type: github, secret: [SECRET-ONE, SECRET-TWO]}\n"
                     "  b:\n    sinks: [{type: log}]\n    verify: {type: token, location: query, param: t, secret: "
                     "SECRET-THREE}\n"
                     "  c:\n    sinks: [{type: log}]\n    verify: {type: standard_webhooks_v1a, public_key: " V1A_PK "}\n";
  ak_config_t *cfg = NULL;
  char *err = NULL;
  cr_assert_eq(ak_config_load_string(ak_modules(), yaml, strlen(yaml), NOENV, &cfg, &err), 0, "%s", err ? err : "");
  json_t *red = ak_config_redacted(cfg);
  char *text = json_dumps(red, JSON_COMPACT);
  cr_expect_null(strstr(text, "SECRET-"), "%s", text);
  json_t *sources = json_object_get(red, "sources");
  cr_expect_str_eq(json_string_value(json_object_get(json_object_get(json_object_get(sources, "a"), "verify"), "secret")),
                   "[REDACTED]");
  json_t *bv = json_object_get(json_object_get(sources, "b"), "verify");
  cr_expect_str_eq(json_string_value(json_object_get(bv, "secret")), "[REDACTED]");
  cr_expect_str_eq(json_string_value(json_object_get(bv, "param")), "t");
  /* public keys are not secrets; defaults are filled in */
  json_t *cv = json_object_get(json_object_get(sources, "c"), "verify");
  cr_expect_str_eq(json_string_value(json_object_get(cv, "public_key")), V1A_PK);
  cr_expect_eq(json_integer_value(json_object_get(cv, "tolerance_seconds")), 300);
  /* the unredacted tree still has them for the server */
  const ak_source_cfg_t *a = ak_source_cfg_find(cfg, "a");
  cr_expect_str_eq(json_string_value(json_array_get(json_object_get(a->verify, "secret"), 1)), "SECRET-TWO");
  cr_expect_str_eq(a->verify_type, "github");
  free(text);
  json_decref(red);
  ak_config_free(cfg);
}

/* ----------------------------------------------------------------- key lists ---- */

/* The entries borrow from the mapping: it is kept until the next call. */
static const char *load_err(const char *spec_json, const char *key, ak_verify_secrets_t *out) {
  static char err[160];
  static json_t *spec;
  json_decref(spec);
  spec = NULL;
  err[0] = 0;
  if (!spec_json) return err;
  spec = json_loads(spec_json, 0, NULL);
  cr_assert_not_null(spec, "bad test json %s", spec_json);
  int rc = ak_verify_secrets_load(spec, key, out, err, sizeof err);
  cr_assert_eq(rc == 0, err[0] == 0, "%s: rc %d with err \"%s\"", spec_json, rc, err);
  return err;
}

Test(verify, key_list_reader) {
  ak_verify_secrets_t s;
  cr_expect_str_eq(load_err("{\"secret\":\"one\"}", "secret", &s), "");
  cr_expect_eq(s.n, 1);
  cr_expect_eq(s.len[0], 3);
  cr_expect_str_eq(s.label[0], "secret", "a scalar is named by its key");
  cr_expect_str_eq(load_err("{\"public_key\":[\"a\",\"bc\",\"d\"]}", "public_key", &s), "");
  cr_expect_eq(s.n, 3);
  cr_expect(s.len[1] == 2 && memcmp(s.s[1], "bc", 2) == 0);
  cr_expect_str_eq(s.label[2], "public_key[2]", "a list item by its index");
  cr_expect_str_eq(load_err("{\"secret\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\"]}", "secret", &s), "");
  cr_expect_eq(s.n, 8, "eight is the most");
  cr_expect_str_eq(load_err("{\"secret\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\"]}", "secret", &s),
                   "secret: at most 8 entries", "a ninth is refused, not dropped");
  cr_expect_str_eq(load_err("{}", "secret", &s), "secret: missing or empty");
  cr_expect_str_eq(load_err("{\"secret\":[]}", "secret", &s), "secret: missing or empty");
  cr_expect_str_eq(load_err("{\"secret\":7}", "secret", &s), "secret: missing or empty");
  cr_expect_str_eq(load_err("{\"secret\":[\"a\",7]}", "secret", &s), "secret[1]: must be a string",
                   "not skipped (which would shift every later label)");
  cr_expect_str_eq(load_err("{\"secret\":\"\"}", "secret", &s), "secret: must not be empty");
  cr_expect_str_eq(load_err("{\"secret\":[\"TOPSECRET\",\"\"]}", "secret", &s), "secret[1]: must not be empty");
  load_err(NULL, NULL, &s);
}

/* Every verifier with a key list reads it through the one reader: the same refusals, in
 * the same words, whatever the type (specs given straight to ak_verifier_new, as a
 * caller that skipped the config's checks would). */
Test(verify, every_verifier_reads_its_keys_the_same_way) {
  const char *types[][2] = {{"stripe", "secret"},           {"github", "secret"},
                            {"standard_webhooks", "secret"}, {"shopify", "secret"},
                            {"slack", "secret"},             {"token", "secret"},
                            {"standard_webhooks_v1a", "public_key"}, {"asymmetric", "public_key"}};
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
    const char *type = types[i][0], *key = types[i][1];
    struct {
      const char *value; /* JSON */
      const char *want;  /* after "<key>" */
    } cases[] = {
      {NULL, ": missing or empty"},
      {"[]", ": missing or empty"},
      {"[\"" V1A_PK "\",\"\"]", "[1]: must not be empty"},
      {"[\"" V1A_PK "\",3]", "[1]: must be a string"},
      {"[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\"]", ": at most 8 entries"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
      char spec_text[512];
      if (cases[c].value)
        snprintf(spec_text, sizeof spec_text, "{\"type\":\"%s\",\"%s\":%s}", type, key, cases[c].value);
      else
        snprintf(spec_text, sizeof spec_text, "{\"type\":\"%s\"}", type);
      json_t *spec = json_loads(spec_text, 0, NULL);
      cr_assert_not_null(spec, "%s", spec_text);
      char err[256] = "", want[96];
      snprintf(want, sizeof want, "%s%s", key, cases[c].want);
      ak_verifier_t *v = ak_verifier_new(spec, err, sizeof err);
      cr_expect_null(v, "%s accepted", spec_text);
      ak_verifier_free(v);
      cr_expect_str_eq(err, want, "%s", spec_text);
      json_decref(spec);
    }
  }
  /* the custom hmac descriptor too (its other required key given) */
  json_t *spec = json_pack("{s:s,s:s,s:[s,s]}", "type", "hmac", "signature_header", "X-Sig", "secret", "k", "");
  char err[256] = "";
  cr_expect_null(ak_verifier_new(spec, err, sizeof err));
  cr_expect_str_eq(err, "secret[1]: must not be empty");
  json_decref(spec);
}

/* ------------------------------------------------------ Standard Webhooks secrets ---- */

Test(verify, whsec_decoder) {
  uint8_t out[64];
  size_t n = 0;
  struct {
    const char *s;
    const char *key; /* NULL: refused */
  } cases[] = {
    {"whsec_QUJD", "ABC"},      {"QUJD", "ABC"},          /* the prefix is optional */
    {"whsec_QUJDRA==", "ABCD"}, {"whsec_QUJDRA", "ABCD"}, /* and so is the padding */
    {"whsec_QUJDREU=", "ABCDE"}, {"whsec_QUJDREU", "ABCDE"},
    {"whsec_", NULL},           {"", NULL},                {"whsec_====", NULL},
    {"whsec_QQ==QUJD", NULL},   {"whsec_QUJDR", NULL},     {"whsec_ QUJD", NULL},
    {"whsec_QUJD\n", NULL},     {"whsec_QUJDRA===", NULL}, {"whsec_QUJD-_==", NULL},
    {"WHSEC_QUJD", NULL},       {"whsec_whsec_QUJD", NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    bool ok = ak_whsec_decode(cases[i].s, strlen(cases[i].s), out, sizeof out, &n);
    cr_expect_eq(ok, cases[i].key != NULL, "%s", cases[i].s);
    if (ok && cases[i].key)
      cr_expect(n == strlen(cases[i].key) && memcmp(out, cases[i].key, n) == 0, "%s: %zu bytes", cases[i].s, n);
  }
  cr_expect(ak_whsec_prefixed("whsec_x", 7));
  cr_expect_not(ak_whsec_prefixed("whsec", 5));
  cr_expect_not(ak_whsec_prefixed("whsec_x", 5), "only n bytes are read");
  cr_expect_not(ak_whsec_decode("whsec_QUJDRA==", 14, out, 3, &n), "four bytes do not fit in three");
}
