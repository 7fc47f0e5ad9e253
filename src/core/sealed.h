/* Secrets at rest: the envelope a stored secret is sealed in (AES-256-GCM, OpenSSL EVP)
 * and the keys that seal and open it. Owns the envelope format, the key text and key
 * ids, and the walks over a stored tree (which values are secret is the redaction's
 * knowledge: ak_config_map_secrets). Never logs, never returns a secret in an error, and
 * never touches the store: the callers (admin/sources_api.c) read and write the rows.
 *
 * Envelope: the JSON string "enc:v1:<key id>:<base64(nonce 12 | ciphertext | tag 16)>".
 * The plaintext is the value's JSON text (a string secret is sealed as "\"...\""), so a
 * value of any type comes back as it was. The key id is the first 8 hex digits of the
 * SHA-256 of the key. The additional data bound to every value is "<context>\0<JSON
 * pointer>" (context names the row, e.g. "source:acme/stripe"): a ciphertext copied to
 * another row, or to another key of the same row, does not open. */
#ifndef AK_CORE_SEALED_H
#define AK_CORE_SEALED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include "core/config.h"

#define AK_SEALED_PREFIX "enc:v1:"
#define AK_SEALED_KEY_LEN 32
#define AK_SEALED_KEY_ID_LEN 8

typedef struct ak_sealed_key {
  uint8_t k[AK_SEALED_KEY_LEN];
  char id[AK_SEALED_KEY_ID_LEN + 1];
} ak_sealed_key_t;

/* The current key first (it seals), then the previous ones (they only open). */
typedef struct ak_sealed_keyring {
  ak_sealed_key_t *v;
  size_t n;
} ak_sealed_keyring_t;

/* A key from its text: the base64 of exactly 32 bytes (surrounding whitespace ignored,
 * so a file's trailing newline is fine). 0, or -1 (the text is never echoed). */
int ak_sealed_key_parse(const char *text, ak_sealed_key_t *out);
/* A key from raw bytes (tests). */
void ak_sealed_key_from_bytes(const uint8_t k[AK_SEALED_KEY_LEN], ak_sealed_key_t *out);
void ak_sealed_keyring_clear(ak_sealed_keyring_t *kr);

bool ak_sealed_is_envelope(const char *s);

/* ---------------------------------------------------------------- one value ---- */

typedef enum {
  AK_SEALED_OK = 0,
  AK_SEALED_NOMEM = -1,
  AK_SEALED_MALFORMED = -2,   /* not an envelope of this format */
  AK_SEALED_UNKNOWN_KEY = -3, /* sealed with a key id no key of the ring has */
  AK_SEALED_FAILED = -4,      /* the tag does not verify: another key of the same id (no),
                                 damaged, or moved from another row or position */
} ak_sealed_rc_t;

/* The envelope of pt (malloc'd) under k, bound to aad. */
char *ak_sealed_seal(const ak_sealed_key_t *k, const void *aad, size_t aadl, const void *pt, size_t ptl);
/* Opens an envelope with the key of its id in kr: *pt (malloc'd, NUL-terminated; scrub it),
 * *ptl, and (when kid is not NULL) the key id it names, also on failure. */
ak_sealed_rc_t ak_sealed_open(const ak_sealed_keyring_t *kr, const char *env, const void *aad, size_t aadl,
                              char **pt, size_t *ptl, char kid[AK_SEALED_KEY_ID_LEN + 1]);

/* ---------------------------------------------------------------- a tree ---- */

/* What a walk over a tree did. */
typedef struct ak_sealed_stats {
  size_t values;   /* values sealed, or opened */
  size_t stale;    /* opened values sealed with a key other than the current one */
  ak_sealed_rc_t rc;           /* the first failure */
  char pointer[256];           /* where it was (a JSON pointer; never the value) */
  char kid[AK_SEALED_KEY_ID_LEN + 1]; /* the key id it named */
} ak_sealed_stats_t;

/* tree (rows: the option rows it is checked by, e.g. ak_sources_options()) with every
 * value the redaction treats as secret sealed under k, each element of a secret list on
 * its own. A string of another value that looks like an envelope is sealed too, so that
 * in a sealed tree every envelope is one we made. New reference, or NULL (out of memory). */
json_t *ak_sealed_seal_tree(const ak_config_t *cfg, const ak_opt_t *rows, const ak_sealed_key_t *k,
                            const char *context, const json_t *tree, ak_sealed_stats_t *st);
/* A sealed tree with every envelope opened (needs no rows: every envelope in it is one
 * ak_sealed_seal_tree made). New reference, or NULL with st->rc, st->pointer, st->kid. */
json_t *ak_sealed_open_tree(const ak_sealed_keyring_t *kr, const char *context, const json_t *tree,
                            ak_sealed_stats_t *st);
/* A plain tree with every secret replaced by "hmac:<hex>", a MAC under a key derived from
 * k of context, pointer and value: equal states give equal fingerprints (the audit trail
 * hashes these), and no one without k can test a guess against them. New reference or
 * NULL. */
json_t *ak_sealed_fingerprint_tree(const ak_config_t *cfg, const ak_opt_t *rows, const ak_sealed_key_t *k,
                                   const char *context, const json_t *tree);

const char *ak_sealed_rc_text(ak_sealed_rc_t rc);

#endif
