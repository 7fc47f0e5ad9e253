/* Unit tests: secrets at rest (core/sealed.h). The key text, the envelope of one value
 * (round trip, a wrong or unknown key, a tampered nonce, ciphertext or tag, additional
 * data of another row or position, fresh nonces), and the walks over a stored source
 * spec: every secret the redaction knows is sealed (each element of a secret list on its
 * own), nothing else changes, the spec opens back equal, and fingerprints are stable. */
#include <criterion/criterion.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/config.h"
#include "core/sealed.h"
#include "core/sources.h"
#include "modules.h"

#define KEY_A "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=" /* bytes 0..31 */
#define KEY_B "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=" /* bytes 32..63 */

static ak_sealed_key_t key(const char *text) {
  ak_sealed_key_t k;
  cr_assert_eq(ak_sealed_key_parse(text, &k), 0, "%s", text);
  return k;
}

static ak_sealed_keyring_t ring_of(const ak_sealed_key_t *keys, size_t n) {
  ak_sealed_keyring_t r = {calloc(n, sizeof *r.v), n};
  memcpy(r.v, keys, n * sizeof *keys);
  return r;
}

static char *open_one(const ak_sealed_keyring_t *r, const char *env, const char *aad, ak_sealed_rc_t *rc) {
  char *pt = NULL;
  size_t n = 0;
  *rc = ak_sealed_open(r, env, aad, strlen(aad), &pt, &n, NULL);
  return pt;
}

/* ------------------------------------------------------------------ keys ---- */

Test(sealed, key_text) {
  ak_sealed_key_t k = key(KEY_A);
  for (int i = 0; i < 32; i++) cr_expect_eq(k.k[i], i);
  /* the id is the first 8 hex digits of SHA-256(key) */
  unsigned char md[32];
  unsigned int ml;
  EVP_Digest(k.k, 32, md, &ml, EVP_sha256(), NULL);
  char want[9];
  for (int i = 0; i < 4; i++) snprintf(want + 2 * i, 3, "%02x", md[i]);
  cr_expect_str_eq(k.id, want);
  cr_expect_eq(ak_sealed_key_parse("  " KEY_A "\n", &k), 0, "a file's newline is fine");
  const char *bad[] = {"", "abc", "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwd" /* 30 bytes */,
                       "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gIQ==" /* 34 bytes */,
                       "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh*=" /* not base64 */,
                       "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8" /* no padding */,
                       "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f" /* hex */, NULL};
  for (int i = 0; bad[i]; i++) cr_expect_eq(ak_sealed_key_parse(bad[i], &k), -1, "accepted %s", bad[i]);
  cr_expect_eq(ak_sealed_key_parse(NULL, &k), -1);
}

/* ------------------------------------------------------------------ one value ---- */

Test(sealed, round_trip) {
  ak_sealed_key_t ka = key(KEY_A);
  ak_sealed_keyring_t r = ring_of(&ka, 1);
  const char *aad = "source:acme/stripe\0/verify/secret";
  char *env = ak_sealed_seal(&ka, aad, 33, "whsec_hello", 11);
  cr_assert_not_null(env);
  char prefix[64];
  snprintf(prefix, sizeof prefix, "enc:v1:%s:", ka.id);
  cr_expect(!strncmp(env, prefix, strlen(prefix)), "%s", env);
  cr_expect_null(strstr(env, "hello"));
  char *pt = NULL;
  size_t n = 0;
  char kid[9];
  cr_assert_eq(ak_sealed_open(&r, env, aad, 33, &pt, &n, kid), AK_SEALED_OK);
  cr_expect_eq(n, 11);
  cr_expect_str_eq(pt, "whsec_hello");
  cr_expect_str_eq(kid, ka.id);
  free(pt);
  /* the empty value too */
  char *e2 = ak_sealed_seal(&ka, "x", 1, "", 0);
  cr_assert_eq(ak_sealed_open(&r, e2, "x", 1, &pt, &n, NULL), AK_SEALED_OK);
  cr_expect_eq(n, 0);
  free(pt);
  free(e2);
  free(env);
  ak_sealed_keyring_clear(&r);
}

Test(sealed, wrong_key_fails) {
  ak_sealed_key_t ka = key(KEY_A), kb = key(KEY_B);
  ak_sealed_keyring_t rb = ring_of(&kb, 1);
  char *env = ak_sealed_seal(&ka, "ctx", 3, "s3cr3t", 6);
  ak_sealed_rc_t rc;
  char *kid = calloc(1, 9);
  char *pt = NULL;
  size_t n;
  cr_expect_eq(ak_sealed_open(&rb, env, "ctx", 3, &pt, &n, kid), AK_SEALED_UNKNOWN_KEY);
  cr_expect_str_eq(kid, ka.id, "the failure names the key id it needs");
  cr_expect_null(pt);
  /* the envelope relabelled with the other key's id: the tag does not verify */
  char *forged = strdup(env);
  memcpy(forged + strlen(AK_SEALED_PREFIX), kb.id, 8);
  cr_expect_null(open_one(&rb, forged, "ctx", &rc));
  cr_expect_eq(rc, AK_SEALED_FAILED);
  /* no key at all */
  ak_sealed_keyring_t none = {NULL, 0};
  cr_expect_null(open_one(&none, env, "ctx", &rc));
  cr_expect_eq(rc, AK_SEALED_UNKNOWN_KEY);
  free(forged);
  free(kid);
  free(env);
  ak_sealed_keyring_clear(&rb);
}

/* Flip one bit of the decoded blob at off (from the end when negative) and re-encode. */
static char *flip(const char *env, long off) {
  const char *b = strrchr(env, ':') + 1;
  size_t bl = strlen(b);
  unsigned char *raw = malloc(bl);
  int n = EVP_DecodeBlock(raw, (const unsigned char *)b, (int)bl);
  n -= (b[bl - 1] == '=') + (b[bl - 2] == '=');
  size_t at = off >= 0 ? (size_t)off : (size_t)(n + off);
  raw[at] ^= 0x01;
  size_t pl = (size_t)(b - env);
  char *out = malloc(pl + bl + 8);
  memcpy(out, env, pl);
  EVP_EncodeBlock((unsigned char *)out + pl, raw, n);
  free(raw);
  return out;
}

Test(sealed, tampering_fails) {
  ak_sealed_key_t ka = key(KEY_A);
  ak_sealed_keyring_t r = ring_of(&ka, 1);
  char *env = ak_sealed_seal(&ka, "ctx", 3, "a secret of some length", 23);
  ak_sealed_rc_t rc;
  long where[] = {0 /* nonce */, 11, 12 /* ciphertext */, 20, -16 /* tag */, -1};
  for (size_t i = 0; i < sizeof where / sizeof where[0]; i++) {
    char *t = flip(env, where[i]);
    cr_expect_null(open_one(&r, t, "ctx", &rc), "a flip at %ld opened", where[i]);
    cr_expect_eq(rc, AK_SEALED_FAILED, "flip at %ld", where[i]);
    free(t);
  }
  /* cut short, not base64, no key id: not an envelope */
  char *cut = strdup(env);
  cut[strlen(AK_SEALED_PREFIX) + 9 + 8] = '\0';
  cr_expect_null(open_one(&r, cut, "ctx", &rc));
  cr_expect_eq(rc, AK_SEALED_MALFORMED);
  cr_expect_null(open_one(&r, "enc:v1:zz:AAAA", "ctx", &rc));
  cr_expect_eq(rc, AK_SEALED_MALFORMED);
  cr_expect_null(open_one(&r, "plain", "ctx", &rc));
  cr_expect_eq(rc, AK_SEALED_MALFORMED);
  free(cut);
  free(env);
  ak_sealed_keyring_clear(&r);
}

Test(sealed, aad_of_another_row_fails) {
  ak_sealed_key_t ka = key(KEY_A);
  ak_sealed_keyring_t r = ring_of(&ka, 1);
  char *env = ak_sealed_seal(&ka, "source:acme/a", 13, "s", 1);
  ak_sealed_rc_t rc;
  char *pt = open_one(&r, env, "source:acme/a", &rc);
  cr_expect_eq(rc, AK_SEALED_OK);
  free(pt);
  cr_expect_null(open_one(&r, env, "source:acme/b", &rc));
  cr_expect_eq(rc, AK_SEALED_FAILED);
  cr_expect_null(open_one(&r, env, "source:other/a", &rc));
  cr_expect_eq(rc, AK_SEALED_FAILED);
  free(env);
  ak_sealed_keyring_clear(&r);
}

Test(sealed, fresh_nonce_per_value) {
  ak_sealed_key_t ka = key(KEY_A);
  enum { N = 2000 };
  char **v = calloc(N, sizeof *v);
  for (int i = 0; i < N; i++) v[i] = ak_sealed_seal(&ka, "ctx", 3, "same", 4);
  size_t pl = strlen(AK_SEALED_PREFIX) + 9;
  /* the nonce is the first 12 bytes: the first 16 characters of base64 */
  for (int i = 0; i < N; i++)
    for (int j = i + 1; j < N; j++) cr_assert(strncmp(v[i] + pl, v[j] + pl, 16) != 0, "nonce reused: %d %d", i, j);
  for (int i = 0; i < N; i++) free(v[i]);
  free(v);
}

/* ------------------------------------------------------------------ a tree ---- */

static ak_config_t *load(void) {
  const char *yaml = "source_store: {type: persistent, secret_key: " KEY_A "}\n";
  const char *const env[] = {NULL};
  ak_config_t *cfg = NULL;
  char *err = NULL;
  cr_assert_eq(ak_config_load_string(ak_modules(), yaml, strlen(yaml), env, &cfg, &err), 0, "%s", err ? err : "");
  return cfg;
}

static const char *SPEC =
  "{\"tenant\":\"acme\",\"verify\":{\"type\":\"github\",\"secret\":[\"gh-new-secret\",\"gh-old-secret\"]},"
  "\"sinks\":[{\"type\":\"http\",\"url\":\"https://user:url-pass@example.com/hook?token=q-token&a=b\","
  "\"headers\":{\"authorization\":\"Bearer hdr-token\",\"x~a/b\":\"odd-key-value\"},\"secret\":\"sink-secret\"},"
  "{\"type\":\"log\"}],\"dedupe\":\"enc:v1:looks-like-one\",\"forward_headers\":[\"x-a\"]}";

static const char *const PLAIN[] = {"gh-new-secret", "gh-old-secret", "url-pass", "q-token", "hdr-token",
                                    "odd-key-value", "sink-secret", "looks-like-one", NULL};

Test(sealed, tree_seals_every_secret_and_opens_back) {
  ak_config_t *cfg = load();
  ak_sealed_key_t ka = key(KEY_A);
  ak_sealed_keyring_t r = ring_of(&ka, 1);
  json_t *spec = json_loads(SPEC, 0, NULL);
  cr_assert_not_null(spec);
  ak_sealed_stats_t st;
  json_t *sealed = ak_sealed_seal_tree(cfg, ak_sources_options(), &ka, "source:acme/a", spec, &st);
  cr_assert_not_null(sealed);
  char *text = json_dumps(sealed, JSON_COMPACT);
  for (int i = 0; PLAIN[i]; i++) cr_expect_null(strstr(text, PLAIN[i]), "%s is in %s", PLAIN[i], text);
  /* 2 list elements + url + 2 headers + sink secret + the look-alike */
  cr_expect_eq(st.values, 7, "%zu values", st.values);
  json_t *list = json_object_get(json_object_get(sealed, "verify"), "secret");
  cr_assert(json_is_array(list) && json_array_size(list) == 2, "a secret list stays a list");
  for (size_t i = 0; i < 2; i++) cr_expect(ak_sealed_is_envelope(json_string_value(json_array_get(list, i))));
  cr_expect_str_eq(json_string_value(json_object_get(json_object_get(sealed, "verify"), "type")), "github");
  cr_expect_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(sealed, "sinks"), 1), "type")),
                   "log");
  cr_expect(json_equal(json_object_get(sealed, "forward_headers"), json_object_get(spec, "forward_headers")));

  json_t *opened = ak_sealed_open_tree(&r, "source:acme/a", sealed, &st);
  cr_assert_not_null(opened, "%s at %s", ak_sealed_rc_text(st.rc), st.pointer);
  cr_expect(json_equal(opened, spec), "opens back equal");
  cr_expect_eq(st.values, 7);
  cr_expect_eq(st.stale, 0);

  /* the whole spec under another row's name */
  cr_expect_null(ak_sealed_open_tree(&r, "source:acme/b", sealed, &st));
  cr_expect_eq(st.rc, AK_SEALED_FAILED);

  /* list elements swapped: each is bound to its position */
  json_t *swapped = json_deep_copy(sealed);
  json_t *sl = json_object_get(json_object_get(swapped, "verify"), "secret");
  json_t *first = json_incref(json_array_get(sl, 0));
  json_array_set(sl, 0, json_array_get(sl, 1));
  json_array_set_new(sl, 1, first);
  cr_expect_null(ak_sealed_open_tree(&r, "source:acme/a", swapped, &st));
  cr_expect_eq(st.rc, AK_SEALED_FAILED);
  cr_expect_str_eq(st.pointer, "/verify/secret/0");

  /* a sealed header moved to another header name */
  json_t *moved = json_deep_copy(sealed);
  json_t *h = json_object_get(json_array_get(json_object_get(moved, "sinks"), 0), "headers");
  json_object_set(h, "x-other", json_object_get(h, "authorization"));
  cr_expect_null(ak_sealed_open_tree(&r, "source:acme/a", moved, &st));
  cr_expect_str_eq(st.pointer, "/sinks/0/headers/x-other");

  json_decref(swapped);
  json_decref(moved);
  json_decref(opened);
  free(text);
  json_decref(sealed);
  json_decref(spec);
  ak_sealed_keyring_clear(&r);
  ak_config_free(cfg);
}

Test(sealed, previous_key_opens_and_counts_stale) {
  ak_config_t *cfg = load();
  ak_sealed_key_t ka = key(KEY_A), kb = key(KEY_B);
  json_t *spec = json_loads(SPEC, 0, NULL);
  ak_sealed_stats_t st;
  json_t *sealed = ak_sealed_seal_tree(cfg, ak_sources_options(), &ka, "c", spec, &st);
  ak_sealed_key_t both[] = {kb, ka};
  ak_sealed_keyring_t r = ring_of(both, 2), only_b = ring_of(&kb, 1);
  json_t *opened = ak_sealed_open_tree(&r, "c", sealed, &st);
  cr_assert_not_null(opened);
  cr_expect_eq(st.stale, 7, "sealed with the previous key");
  cr_expect_null(ak_sealed_open_tree(&only_b, "c", sealed, &st));
  cr_expect_eq(st.rc, AK_SEALED_UNKNOWN_KEY);
  cr_expect_str_eq(st.kid, ka.id);
  cr_expect_str_eq(st.pointer, "/verify/secret/0");
  json_decref(opened);
  json_decref(sealed);
  json_decref(spec);
  ak_sealed_keyring_clear(&r);
  ak_sealed_keyring_clear(&only_b);
  ak_config_free(cfg);
}

Test(sealed, fingerprints) {
  ak_config_t *cfg = load();
  ak_sealed_key_t ka = key(KEY_A), kb = key(KEY_B);
  json_t *spec = json_loads(SPEC, 0, NULL);
  json_t *f1 = ak_sealed_fingerprint_tree(cfg, ak_sources_options(), &ka, "c", spec);
  json_t *f2 = ak_sealed_fingerprint_tree(cfg, ak_sources_options(), &ka, "c", spec);
  cr_assert(f1 && f2);
  cr_expect(json_equal(f1, f2), "the same state, the same fingerprint");
  char *text = json_dumps(f1, JSON_COMPACT);
  for (int i = 0; PLAIN[i]; i++)
    if (strcmp(PLAIN[i], "looks-like-one")) cr_expect_null(strstr(text, PLAIN[i]), "%s is in %s", PLAIN[i], text);
  json_t *other = json_deep_copy(spec);
  json_object_set_new(json_object_get(other, "verify"), "secret", json_string("changed"));
  json_t *f3 = ak_sealed_fingerprint_tree(cfg, ak_sources_options(), &ka, "c", other);
  cr_expect(!json_equal(f1, f3), "a changed secret changes the fingerprint");
  json_t *f4 = ak_sealed_fingerprint_tree(cfg, ak_sources_options(), &kb, "c", spec);
  cr_expect(!json_equal(f1, f4), "keyed: another key, another fingerprint");
  free(text);
  json_decref(f1);
  json_decref(f2);
  json_decref(f3);
  json_decref(f4);
  json_decref(other);
  json_decref(spec);
  ak_config_free(cfg);
}

Test(sealed, redaction_unchanged) {
  ak_config_t *cfg = load();
  json_t *spec = json_loads(SPEC, 0, NULL);
  json_t *red = ak_config_redact_tree(cfg, spec, ak_sources_options());
  char *text = json_dumps(red, JSON_COMPACT);
  cr_expect_not_null(strstr(text, "\"secret\":\"[REDACTED]\""), "%s", text);
  cr_expect_not_null(strstr(text, "\"authorization\":\"[REDACTED]\""), "%s", text);
  cr_expect_null(strstr(text, "url-pass"));
  cr_expect_null(strstr(text, "gh-new-secret"));
  free(text);
  json_decref(red);
  json_decref(spec);
  ak_config_free(cfg);
}

Test(sealed, config_key_rules) {
  const char *const env[] = {NULL};
  struct {
    const char *yaml, *want;
  } cases[] = {
    {"source_store: {type: persistent}\n", "source_store.secret_key: required with type persistent"},
    {"source_store: {type: persistent, secret_key: not-a-key}\n", "source_store.secret_key: not a key"},
    {"source_store: {type: persistent, secret_key: " KEY_A ", previous_secret_keys: [nope]}\n",
     "source_store.previous_secret_keys[0]: not a key"},
    {"source_store: {type: persistent, secret_key: " KEY_A ", secret_key_file: /x}\n", "not both"},
    {"source_store: {type: persistent, secret_key_file: /nonexistent/key}\n",
     "source_store.secret_key_file: cannot read /nonexistent/key"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ak_config_t *cfg = NULL;
    char *err = NULL;
    cr_expect_neq(ak_config_load_string(ak_modules(), cases[i].yaml, strlen(cases[i].yaml), env, &cfg, &err), 0);
    cr_expect_not_null(err && strstr(err, cases[i].want), "%s: got %s", cases[i].yaml, err ? err : "(none)");
    cr_expect(!err || !strstr(err, "not-a-key"), "the key text is never echoed");
    free(err);
    ak_config_free(cfg);
  }
  /* a static store needs no key */
  const char *ok = "source_store: {type: static}\n";
  ak_config_t *cfg = NULL;
  char *err = NULL;
  cr_expect_eq(ak_config_load_string(ak_modules(), ok, strlen(ok), env, &cfg, &err), 0, "%s", err ? err : "");
  ak_config_free(cfg);
  /* the env override */
  const char *const env2[] = {"ANKUSA_SOURCE_STORE_SECRET_KEY=" KEY_B, NULL};
  const char *p = "source_store: {type: persistent}\n";
  cr_expect_eq(ak_config_load_string(ak_modules(), p, strlen(p), env2, &cfg, &err), 0, "%s", err ? err : "");
  json_t *red = ak_config_redacted(cfg);
  char *text = json_dumps(red, JSON_COMPACT);
  cr_expect_null(strstr(text, KEY_B), "print-config never shows the key: %s", text);
  free(text);
  json_decref(red);
  ak_config_free(cfg);
}
