/* The prefix is cut, the rest goes through the verifiers' strict base64 decoder
 * (ak_verify_b64_decode, codec.c), which also decodes signature candidates. */
#include <string.h>
#include "verify/sig_internal.h"
#include "verify/whsec.h"

bool ak_whsec_prefixed(const char *s, size_t n) {
  size_t pl = sizeof AK_WHSEC_PREFIX - 1;
  return n >= pl && memcmp(s, AK_WHSEC_PREFIX, pl) == 0;
}

bool ak_whsec_decode(const char *s, size_t n, uint8_t *out, size_t cap, size_t *outlen) {
  if (ak_whsec_prefixed(s, n)) {
    s += sizeof AK_WHSEC_PREFIX - 1;
    n -= sizeof AK_WHSEC_PREFIX - 1;
  }
  return ak_verify_b64_decode(s, n, out, cap, outlen, true);
}
