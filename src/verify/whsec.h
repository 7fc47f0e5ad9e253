/* The Standard Webhooks secret: "whsec_" followed by the base64 of the HMAC key. One
 * decoder for everyone who reads such a string: the standard_webhooks verifier (and the
 * custom hmac's secret_decode: whsec_base64) on the receiving side, the http sink on the
 * signing side, so the key a sink signs with and the key our verifier checks with can
 * never differ for the same string. Owns the rule only: strict standard base64 with
 * optional '=' padding, no whitespace, no '=' inside, at least one key byte (as the
 * reference libraries: the prefix and the padding are optional). Never allocates, logs
 * or returns a secret; libcrypto's EVP_DecodeBlock must not stand in for it (it skips
 * whitespace, takes '=' for zero bits and counts padding as output). */
#ifndef AK_VERIFY_WHSEC_H
#define AK_VERIFY_WHSEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AK_WHSEC_PREFIX "whsec_"

/* Does s (n bytes) start with the prefix? */
bool ak_whsec_prefixed(const char *s, size_t n);

/* The key of a secret (n bytes, the prefix optional) into out (cap bytes; n always
 * suffices). false when it does not decode, decodes to nothing, or does not fit. */
bool ak_whsec_decode(const char *s, size_t n, uint8_t *out, size_t cap, size_t *outlen);

#endif
