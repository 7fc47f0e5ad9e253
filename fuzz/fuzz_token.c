/* libFuzzer harness for the token verifier's parsers (src/verify/token.c): the
 * Authorization scheme check, the Basic credentials' base64 decoding (padded or not),
 * the query-string parameter lookup and its %XX decoding, through the public interface.
 *
 * Input: byte 0 is flags, the rest is the credential text X (any bytes).
 *   bit 0  the Authorization header is named "AUTHORIZATION" rather than "authorization"
 *   bit 1  an empty Authorization header comes first (the first of a name is the one read)
 *   bit 2  no query string (NULL) rather than X
 *   bit 3  X-Api-Key carries X with a trailing tab and a leading space
 * Every token verifier below sees the same request: Authorization: X, X-Api-Key: X, and
 * X as the query string, so one input reaches the scheme check, the Basic decode and the
 * query parse at once. Each answer must equal the reference model's (verify_ref.h), be the
 * same on a second call, and leave the input unchanged. When a credential was decoded,
 * presenting the same bytes re-encoded canonically (standard padded base64 for Basic,
 * every byte as %XX for a query value) must give the same answer. */
#include <openssl/evp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "verify/verifier.h"

#define FUZZ_NAME "fuzz_token"
#include "verify_ref.h"

#define CHECK REF_CHECK

static const ref_def_t defs[] = {
  {.label = "bearer", .kind = RK_TOKEN, .loc = RL_BEARER,
   .spec = "{\"type\": \"token\", \"secret\": [\"tok_live_4f1d\", \"tok_old_99\"]}",
   .keys = {"tok_live_4f1d", "tok_old_99"}},
  {.label = "basic", .kind = RK_TOKEN, .loc = RL_BASIC,
   .spec = "{\"type\": \"token\", \"location\": \"basic\", \"secret\": [\"hooks:p4ss:word\", \"ab:c\", \"ops:\"]}",
   .keys = {"hooks:p4ss:word", "ab:c", "ops:"}},
  {.label = "header", .kind = RK_TOKEN, .loc = RL_HEADER, .header = "X-Api-Key",
   .spec = "{\"type\": \"token\", \"location\": \"header\", \"header\": \"X-Api-Key\", \"secret\": \"key-123\"}",
   .keys = {"key-123"}},
  {.label = "query token", .kind = RK_TOKEN, .loc = RL_QUERY, .param = "token",
   .spec = "{\"type\": \"token\", \"location\": \"query\", \"param\": \"token\", \"secret\": [\"q tok&=1\", \"plain\"]}",
   .keys = {"q tok&=1", "plain"}},
  {.label = "query x-token", .kind = RK_TOKEN, .loc = RL_QUERY, .param = "x-token",
   .spec = "{\"type\": \"token\", \"location\": \"query\", \"param\": \"x-token\", \"secret\": \"50%off+more\"}",
   .keys = {"50%off+more"}},
};
#define NDEFS (sizeof defs / sizeof defs[0])

static ak_verifier_t *verifiers[NDEFS];
static ref_t refs[NDEFS];
static bool trace; /* AK_FUZZ_TRACE set: print each verdict (replaying seeds) */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  for (size_t i = 0; i < NDEFS; i++) {
    ref_init(&refs[i], &defs[i]);
    verifiers[i] = ref_build(&defs[i]);
  }
  trace = getenv("AK_FUZZ_TRACE") != NULL;
  return 0;
}

static void *dup_exact(const void *p, size_t n) {
  void *d = malloc(n ? n : 1);
  CHECK(d != NULL);
  if (n) memcpy(d, p, n);
  return d;
}

/* The verifier's answer, checked against the model, for determinism and for writes. */
static ak_verify_reason_t check_one(size_t i, const ak_verify_input_t *in) {
  ak_verify_reason_t got = ak_verifier_check(verifiers[i], in);
  ref_check_reason(got);
  ak_verify_reason_t want = ref_expect(&refs[i], in);
  if (got != want) {
    fprintf(stderr, "%s: %s answered %s, the reference %s\n", FUZZ_NAME, defs[i].label,
            ak_verify_reason_name(got), ak_verify_reason_name(want));
    abort();
  }
  CHECK(ak_verifier_check(verifiers[i], in) == got);
  if (trace) fprintf(stderr, "%s: %s -> %s\n", FUZZ_NAME, defs[i].label, ak_verify_reason_name(got));
  return got;
}

/* The same credential bytes, canonically encoded, must get the same answer. */
static void check_reencoded(size_t i, const ak_verify_input_t *in, ak_verify_reason_t got) {
  const ref_def_t *d = &defs[i];
  if (d->loc != RL_BASIC && d->loc != RL_QUERY) return;
  uint8_t *tok;
  size_t tl = 0;
  if (ref_token_bytes(d, in, &tok, &tl) != AK_VR_OK) return;
  CHECK(got == AK_VR_OK || got == AK_VR_NO_MATCH);
  ak_verify_input_t in2 = *in;
  char *text;
  size_t n;
  if (d->loc == RL_BASIC) {
    text = malloc(6 + 4 * ((tl + 2) / 3) + 1);
    CHECK(text != NULL);
    memcpy(text, "Basic ", 6);
    n = 6 + (size_t)EVP_EncodeBlock((unsigned char *)text + 6, tok, (int)tl);
    ak_header_t h = {"Authorization", 13, text, n};
    in2.headers = &h;
    in2.nheaders = 1;
    CHECK(ak_verifier_check(verifiers[i], &in2) == got);
  } else {
    size_t pl = strlen(d->param);
    text = malloc(pl + 1 + 3 * tl);
    CHECK(text != NULL);
    memcpy(text, d->param, pl);
    text[pl] = '=';
    n = pl + 1;
    for (size_t k = 0; k < tl; k++) {
      static const char hex[] = "0123456789ABCDEF";
      text[n++] = '%';
      text[n++] = hex[tok[k] >> 4];
      text[n++] = hex[tok[k] & 15];
    }
    in2.query = text;
    in2.query_len = n;
    CHECK(ak_verifier_check(verifiers[i], &in2) == got);
  }
  free(text);
  free(tok);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  uint8_t flags = data[0];
  const uint8_t *x = data + 1;
  size_t xl = size - 1;

  char *auth_name = dup_exact((flags & 1) ? "AUTHORIZATION" : "authorization", 13);
  char *empty_name = dup_exact("Authorization", 13);
  char *auth_val = dup_exact(x, xl);
  char *key_name = dup_exact("x-api-KEY", 9);
  size_t kl = (flags & 8) ? xl + 2 : xl;
  char *key_val = malloc(kl ? kl : 1);
  CHECK(key_val != NULL);
  if (flags & 8) {
    key_val[0] = ' ';
    if (xl) memcpy(key_val + 1, x, xl);
    key_val[xl + 1] = '\t';
  } else if (xl) {
    memcpy(key_val, x, xl);
  }
  char *query = (flags & 4) ? NULL : dup_exact(x, xl);

  ak_header_t headers[3];
  size_t nh = 0;
  if (flags & 2) headers[nh++] = (ak_header_t){empty_name, 13, "", 0};
  headers[nh++] = (ak_header_t){auth_name, 13, auth_val, xl};
  headers[nh++] = (ak_header_t){key_name, 9, key_val, kl};
  ak_verify_input_t in = {
    .headers = headers, .nheaders = nh, .body = (const uint8_t *)"{}", .body_len = 2,
    .query = query, .query_len = query ? xl : 0, .now_s = 1700000000,
  };

  for (size_t i = 0; i < NDEFS; i++) {
    ak_verify_reason_t got = check_one(i, &in);
    check_reencoded(i, &in, got);
    if (defs[i].loc == RL_QUERY && !query) CHECK(got == AK_VR_MISSING_SIGNATURE);
    if (defs[i].loc == RL_BASIC || defs[i].loc == RL_BEARER) {
      if (flags & 2) CHECK(got == AK_VR_MISSING_SIGNATURE); /* the empty one is read */
    }
  }

  CHECK(!xl || memcmp(auth_val, x, xl) == 0);
  CHECK(!query || !xl || memcmp(query, x, xl) == 0);
  CHECK(!xl || memcmp(key_val + ((flags & 8) ? 1 : 0), x, xl) == 0);
  free(auth_name);
  free(empty_name);
  free(auth_val);
  free(key_name);
  free(key_val);
  free(query);
  return 0;
}
