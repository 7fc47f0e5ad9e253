/* The provider event key of one request (sources.<id>.dedupe), read after verification
 * from the raw request: a header (any case) or a JSON dot path of the body. Owns the key
 * rules: which values count, the 200-byte limit and the sha256: form beyond it. Never
 * stores, compares or scopes keys (queue/dedupe.c does). */
#ifndef AK_EDGE_DEDUPE_KEY_H
#define AK_EDGE_DEDUPE_KEY_H

#include <stddef.h>
#include <stdint.h>
#include "core/config.h"
#include "core/sources.h"
#include "core/envelope.h"

/* Keys longer than this are kept as "sha256:" + 64 lowercase hex digits of the key. */
#define AK_DEDUPE_KEY_MAX 200

/* The key of a request to src, malloc'd and NUL-terminated (*len = its length), or NULL
 * when the source does not dedupe or the request carries no usable key: the header is
 * absent or empty; the body is not JSON, the path is missing, or its value is not a
 * non-empty string or an integer. */
char *ak_dedupe_key_extract(const ak_source_cfg_t *src, const ak_header_t *headers, size_t nheaders,
                            const uint8_t *body, size_t body_len, size_t *len);

#endif
