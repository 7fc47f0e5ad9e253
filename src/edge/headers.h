/* The stored-headers policy (store_headers): which request headers a stored hook keeps.
 * Applied after verification (verifiers and dedupe read every header). Owns the
 * built-in list of credential headers. Never stores a dropped header anywhere. */
#ifndef AK_EDGE_HEADERS_H
#define AK_EDGE_HEADERS_H

#include <stddef.h>
#include <jansson.h>
#include "core/config.h"
#include "core/envelope.h"
#include "core/module.h"

typedef enum { AK_HDR_KEEP = 0, AK_HDR_DROP, AK_HDR_HASH } ak_hdr_action_t;

typedef struct ak_header_policy ak_header_policy_t;

/* spec: the validated `store_headers` mapping ({drop, hash, keep}); NULL = defaults. */
ak_header_policy_t *ak_header_policy_new(const json_t *spec);

/* The `store_headers` section (its checked mapping is the policy's spec). */
extern const ak_module_t ak_mod_store_headers;
const json_t *ak_store_headers_spec(const ak_config_t *cfg);
void ak_header_policy_free(ak_header_policy_t *p);

/* extra_drop: a verifier's credential header (lowercase) or NULL; it is dropped even
 * when `keep` or `hash` names it. */
ak_hdr_action_t ak_header_policy_action(const ak_header_policy_t *p, const char *name, size_t len,
                                        const char *extra_drop);

/* Filter `in` into `out` (capacity n_in). A hashed value is written as
 * "sha256:<64 hex>" into hashbuf (71 bytes per hashed header, NUL included; capacity
 * n_in * AK_HDR_HASH_LEN). Returns the number of headers kept. */
#define AK_HDR_HASH_LEN 72
size_t ak_header_policy_apply(const ak_header_policy_t *p, const ak_header_t *in, size_t n_in,
                              const char *extra_drop, ak_header_t *out, char *hashbuf);

/* The built-in credential headers, NULL-terminated (docs and tests). */
extern const char *const ak_credential_headers[];

#endif
