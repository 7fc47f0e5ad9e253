/* The strict text decoders of the verifiers: base64 (padded, or unpadded where allowed)
 * and hex, for signature candidates, public keys, whsec_ secrets and basic tokens. Each
 * decodes into a caller's bounded buffer with no allocation, and refuses anything that is
 * not exactly the encoding (no whitespace, no stray padding). Never sees what the bytes
 * mean. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "verify/sig_internal.h"

static int b64_value(unsigned char ch) {
  if (ch >= 'A' && ch <= 'Z') return ch - 'A';
  if (ch >= 'a' && ch <= 'z') return ch - 'a' + 26;
  if (ch >= '0' && ch <= '9') return ch - '0' + 52;
  if (ch == '+') return 62;
  if (ch == '/') return 63;
  return -1;
}

/* Hand-written on purpose: libcrypto's EVP_DecodeBlock skips whitespace, counts padding
 * as output and needs a padded copy for unpadded input. Candidates must decode strictly
 * into a bounded stack buffer, with no allocation per request. */
bool ak_verify_b64_decode(const char *s, size_t n, uint8_t *out, size_t cap, size_t *outlen,
                          bool allow_unpadded) {
  size_t pad = 0;
  if (n && s[n - 1] == '=') pad = (n >= 2 && s[n - 2] == '=') ? 2 : 1;
  if (pad ? n % 4 != 0 : (n % 4 != 0 && !allow_unpadded)) return false;
  size_t body = n - pad, full = body / 4, rem = body % 4;
  if (rem == 1) return false;
  size_t olen = full * 3 + (rem ? rem - 1 : 0);
  if (olen == 0 || olen > cap) return false;
  size_t o = 0;
  for (size_t i = 0; i < body; i += 4) {
    size_t take = body - i < 4 ? body - i : 4;
    uint32_t acc = 0;
    for (size_t k = 0; k < 4; k++) {
      int v = k < take ? b64_value((unsigned char)s[i + k]) : 0;
      if (v < 0) return false;
      acc = (acc << 6) | (uint32_t)v;
    }
    out[o++] = (uint8_t)(acc >> 16);
    if (take > 2) out[o++] = (uint8_t)(acc >> 8);
    if (take > 3) out[o++] = (uint8_t)acc;
  }
  *outlen = o;
  return true;
}

/* Inline on purpose: OPENSSL_hexchar2int scans a table per character and showed up as a
 * quarter of a github-preset check in a profile. */
static int hex_value(unsigned char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  ch |= 0x20;
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  return -1;
}

bool ak_verify_hex_decode(const char *s, size_t n, uint8_t *out, size_t cap, size_t *outlen) {
  if (n == 0 || n % 2 || n / 2 > cap) return false;
  for (size_t i = 0; i < n; i += 2) {
    int hi = hex_value((unsigned char)s[i]), lo = hex_value((unsigned char)s[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i / 2] = (uint8_t)(hi << 4 | lo);
  }
  *outlen = n / 2;
  return true;
}
