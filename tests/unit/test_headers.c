/* Unit tests: the stored-headers policy. */
#include <criterion/criterion.h>
#include <string.h>
#include "edge/headers.h"

static ak_header_policy_t *policy(const char *json) {
  json_error_t je;
  json_t *spec = json ? json_loads(json, 0, &je) : NULL;
  ak_header_policy_t *p = ak_header_policy_new(spec);
  json_decref(spec);
  return p;
}

Test(headers, credentials_dropped_by_default) {
  ak_header_policy_t *p = policy(NULL);
  const char *creds[] = {"Authorization", "PROXY-AUTHORIZATION", "Cookie", "set-cookie", "X-Api-Key"};
  for (size_t i = 0; i < sizeof creds / sizeof creds[0]; i++)
    cr_assert_eq(ak_header_policy_action(p, creds[i], strlen(creds[i]), NULL), AK_HDR_DROP, "%s", creds[i]);
  cr_assert_eq(ak_header_policy_action(p, "X-Hub-Signature-256", 19, NULL), AK_HDR_KEEP);
  cr_assert_eq(ak_header_policy_action(p, "Content-Type", 12, NULL), AK_HDR_KEEP);
  cr_assert_eq(ak_header_policy_action(p, "X-Cookie-Jar", 12, NULL), AK_HDR_KEEP, "whole names only");
  ak_header_policy_free(p);
}

Test(headers, drop_hash_keep_and_the_verifier_header) {
  ak_header_policy_t *p = policy("{\"drop\":[\"X-Internal\"],\"hash\":[\"x-customer-email\",\"authorization\"],"
                                 "\"keep\":[\"cookie\",\"x-token\"]}");
  cr_assert_eq(ak_header_policy_action(p, "x-internal", 10, NULL), AK_HDR_DROP);
  cr_assert_eq(ak_header_policy_action(p, "X-Customer-Email", 16, NULL), AK_HDR_HASH);
  cr_assert_eq(ak_header_policy_action(p, "Authorization", 13, NULL), AK_HDR_HASH, "hash beats the built-in drop");
  cr_assert_eq(ak_header_policy_action(p, "Cookie", 6, NULL), AK_HDR_KEEP, "keep opts a credential header back in");
  cr_assert_eq(ak_header_policy_action(p, "X-Token", 7, "x-token"), AK_HDR_DROP,
               "a verifier's token header is dropped whatever the policy");
  cr_assert_eq(ak_header_policy_action(p, "Authorization", 13, "authorization"), AK_HDR_DROP);

  ak_header_t in[] = {{"Host", 4, "h", 1}, {"Authorization", 13, "Bearer t0ps3cret", 16},
                      {"X-Customer-Email", 16, "a@b.c", 5}, {"X-Internal", 10, "1", 1}, {"X-Token", 7, "t", 1}};
  ak_header_t out[5];
  char hb[5 * AK_HDR_HASH_LEN];
  size_t n = ak_header_policy_apply(p, in, 5, "x-token", out, hb);
  cr_assert_eq(n, 3);
  cr_assert_eq(memcmp(out[0].name, "Host", 4), 0, "order kept");
  cr_assert_eq(out[1].value_len, 71);
  cr_assert_eq(memcmp(out[1].value, "sha256:", 7), 0);
  cr_assert_null(memmem(out[1].value, out[1].value_len, "t0ps3cret", 9), "the secret itself is gone");
  /* sha256("a@b.c"), computed independently with Python's hashlib */
  cr_assert_str_eq(out[2].value, "sha256:d648b243a3e817eaa3309e00e183483f2867baadf522099f0c2121770536b25a");
  ak_header_policy_free(p);
}
