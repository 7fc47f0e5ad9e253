/* Shared machinery of the signature verifiers (the HMAC engine in hmac.c and the
 * asymmetric verifier): where the signature sits in the request, how candidates are
 * parsed out of its header, the timestamp rule, and the compiled signed-content template.
 * Private to src/verify. Holds no key material; per request it never allocates (the
 * caller streams the signed bytes through a callback). Implemented in hmac.c, but for the
 * key-list reader (secrets.c). */
#ifndef AK_VERIFY_SIG_INTERNAL_H
#define AK_VERIFY_SIG_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include "verify/verifier.h"

#define AK_SIG_MAX_KEYS 8            /* secrets / public keys per source (rotation) */
#define AK_SIG_MAX_SIG_BYTES 1024    /* a decoded candidate: RSA-8192 at most */
#define AK_SIG_MAX_HEADER_TOKENS 8   /* {header:NAME} tokens in one template */
#define AK_SIG_DEFAULT_TOLERANCE 300

/* The names of these enums, in their order: the option rows' enum_vals and the layout's
 * reading of a spec both use them, so the two can never disagree. */
#define AK_SIG_PARSE_NAMES "whole|csv_pairs|space_versions"
#define AK_SIG_ENC_NAMES "hex|base64"
typedef enum { AK_SIG_PARSE_WHOLE, AK_SIG_PARSE_CSV_PAIRS, AK_SIG_PARSE_SPACE_VERSIONS } ak_sig_parse_t;
typedef enum { AK_SIG_ENC_HEX, AK_SIG_ENC_BASE64 } ak_sig_encoding_t;
typedef enum { AK_SIG_PART_LITERAL, AK_SIG_PART_BODY, AK_SIG_PART_TS, AK_SIG_PART_HEADER } ak_sig_part_kind_t;

/* What a preset or a `verify` mapping says about the layout. Strings are borrowed;
 * NULL means "not used". */
typedef struct {
  const char *signature_header;
  const char *signed_tmpl;
  const char *parse;            /* whole | csv_pairs | space_versions */
  const char *sig_key;          /* csv_pairs: key of the signature pairs */
  const char *version;          /* space_versions: token prefix before "," */
  const char *sig_prefix;       /* whole: required prefix of the value */
  const char *encoding;         /* hex | base64 */
  const char *timestamp_header; /* header carrying the Unix timestamp */
  const char *timestamp_pair;   /* csv_pairs key carrying it (presets only: stripe's `t`) */
  int64_t tolerance_seconds;
} ak_sig_desc_t;

typedef struct {
  ak_sig_part_kind_t kind;
  char *text;                   /* literal bytes or header name (owned) */
  size_t len;
  unsigned hidx;                /* HEADER: slot in ak_sig_req_t.hval */
} ak_sig_part_t;

/* The compiled layout. Immutable after init, so checks on many threads share it. */
typedef struct {
  char *sig_header;
  ak_sig_parse_t parse;
  char *sig_key, *version, *sig_prefix, *ts_header, *ts_pair;
  size_t sig_key_len, version_len, sig_prefix_len, ts_pair_len;
  ak_sig_encoding_t encoding;
  int64_t tolerance;
  ak_sig_part_t *parts;
  size_t nparts;
  unsigned nheaders;            /* {header:NAME} tokens */
  bool body_only;               /* the template is exactly {body}: sign the body in place */
} ak_sig_layout_t;

/* One request's view, filled by ak_verify_sig_prepare; points into the input. */
typedef struct {
  const char *sig;              /* signature header value, trimmed, sig_prefix removed */
  size_t sig_len;
  const char *ts;               /* timestamp digits, or NULL */
  size_t ts_len;
  const char *hval[AK_SIG_MAX_HEADER_TOKENS];
  size_t hlen[AK_SIG_MAX_HEADER_TOKENS];
  size_t signed_len;            /* total bytes of the signed content */
} ak_sig_req_t;

/* Desc from a validated mapping. Absent keys take the value of `defaults`; an explicit
 * null means "not used". tolerance_seconds absent -> defaults->tolerance_seconds. */
void ak_verify_sig_desc_from_spec(ak_sig_desc_t *d, const json_t *spec, const ak_sig_desc_t *defaults);
/* Compile. -1 with err "<key>: <why>" (a key of the verify mapping, never a secret). */
int ak_verify_sig_layout_init(ak_sig_layout_t *l, const ak_sig_desc_t *d, char *err, size_t errlen);
void ak_verify_sig_layout_clear(ak_sig_layout_t *l);

/* Signature header present, at least one decodable candidate, timestamp present, numeric
 * and inside the tolerance, every {header:NAME} present — in that order. */
ak_verify_reason_t ak_verify_sig_prepare(const ak_sig_layout_t *l, const ak_verify_input_t *in,
                                         ak_sig_req_t *r);
/* The next candidate that decodes (skipping those that do not), into out
 * (AK_SIG_MAX_SIG_BYTES). *pos starts at 0. false when there are no more. */
bool ak_verify_sig_next(const ak_sig_layout_t *l, const ak_sig_req_t *r, size_t *pos, uint8_t *out,
                        size_t *outlen);

typedef void (*ak_sig_feed_fn)(void *ctx, const void *p, size_t n);
/* Stream the signed content, piece by piece, in template order. */
void ak_verify_sig_feed(const ak_sig_layout_t *l, const ak_sig_req_t *r, const ak_verify_input_t *in,
                        ak_sig_feed_fn fn, void *ctx);

/* Small helpers shared by the verifiers. */
const ak_header_t *ak_verify_find_header(const ak_verify_input_t *in, const char *name, size_t len);
/* Strict standard base64 ('=' padding required unless allow_unpadded). */
bool ak_verify_b64_decode(const char *s, size_t n, uint8_t *out, size_t cap, size_t *outlen,
                          bool allow_unpadded);
bool ak_verify_hex_decode(const char *s, size_t n, uint8_t *out, size_t cap, size_t *outlen);
int64_t ak_verify_spec_int(const json_t *spec, const char *key, int64_t def);
const char *ak_verify_spec_str(const json_t *spec, const char *key, const char *def);

/* The entries of a key list (secret, public_key: a string or 1..AK_SIG_MAX_KEYS strings),
 * borrowed from the mapping, each with the label that names it in an error ("secret",
 * "secret[2]"). Implemented in secrets.c. */
typedef struct {
  size_t n;
  const char *s[AK_SIG_MAX_KEYS];
  size_t len[AK_SIG_MAX_KEYS];
  char label[AK_SIG_MAX_KEYS][32];
} ak_verify_secrets_t;

/* 0, or -1 with err naming the key or the entry: missing or empty, too many, an entry
 * that is not a string or is empty. Never quotes a value. */
int ak_verify_secrets_load(const json_t *spec, const char *key, ak_verify_secrets_t *out, char *err,
                           size_t errlen);

#endif
