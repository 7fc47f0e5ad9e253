/* Verifier plug-in interface: one file per verifier type, registered in verify/registry.c.
 * A verifier reads the raw request (headers, body, query string, client certificate) and
 * answers ok or a failure reason. It never stores, logs or returns a secret, compares
 * in constant time, and never mutates its input. */
#ifndef AK_VERIFY_VERIFIER_H
#define AK_VERIFY_VERIFIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include "core/envelope.h"
#include "core/module.h"
#include "core/options.h"

typedef enum {
  AK_VR_OK = 0,
  AK_VR_MISSING_SIGNATURE,          /* no signature / token / certificate, or a needed header absent */
  AK_VR_MALFORMED_SIGNATURE,        /* present but unparsable (prefix, encoding, timestamp text) */
  AK_VR_NO_MATCH,                   /* well-formed, but no key/secret/token/pin matches */
  AK_VR_TIMESTAMP_OUT_OF_TOLERANCE, /* |now - ts| > tolerance_seconds */
  AK_VR_COUNT
} ak_verify_reason_t;

/* "ok", "missing_signature", "malformed_signature", "no_match", "timestamp_out_of_tolerance" */
const char *ak_verify_reason_name(ak_verify_reason_t r);
/* The same reason as the original writes it in a JSON `reason` (401, 202, quarantine
 * entries): ":no_match" etc. Metric labels keep the bare name. */
const char *ak_verify_reason_text(ak_verify_reason_t r);

/* What a verifier may read. Header names compare case-insensitively. */
typedef struct ak_verify_input {
  const ak_header_t *headers;
  size_t nheaders;
  const uint8_t *body;
  size_t body_len;
  const char *query;              /* raw query string without '?', NULL when none */
  size_t query_len;
  const uint8_t *client_cert_sha256; /* 32 bytes: SHA-256 of the peer certificate (DER), or NULL */
  int64_t now_s;                  /* Unix seconds the timestamp window is judged against */
} ak_verify_input_t;

typedef struct ak_verifier_vtable {
  ak_plugin_t plugin;             /* YAML `verify.type`, its rows (keys besides `type`), its config rules */
  /* Build from the validated `verify` mapping. NULL + err (naming the key, never a secret
   * value) when a secret or key cannot be decoded. */
  void *(*create)(const json_t *spec, char *err, size_t errlen);
  ak_verify_reason_t (*check)(const void *self, const ak_verify_input_t *in);
  void (*destroy)(void *self);
  bool needs_client_cert;         /* the edge reads the TLS peer certificate only for these */
  /* optional (NULL = false / none) */
  bool (*weak_hash)(const void *self);
  const char *(*credential_header)(const void *self);
  const char *(*credential_param)(const void *self);
} ak_verifier_vtable_t;

/* Registry: every type the config knows. The kind (name "verify") builds each type once
 * at load, so a secret or key that cannot be decoded fails the load, naming the key. */
extern const ak_plugin_kind_t ak_verify_kind;
const ak_verifier_vtable_t *ak_verifiers_find(const char *type);

/* An instance bound to a source. */
typedef struct ak_verifier ak_verifier_t;

/* spec: the source's validated `verify` mapping; NULL or {type: none} means none. */
ak_verifier_t *ak_verifier_new(const json_t *spec, char *err, size_t errlen);
void ak_verifier_free(ak_verifier_t *v);
ak_verify_reason_t ak_verifier_check(const ak_verifier_t *v, const ak_verify_input_t *in);
bool ak_verifier_is_none(const ak_verifier_t *v);
const char *ak_verifier_type(const ak_verifier_t *v);
/* The check it runs: "hmac" (the HMAC engine and its presets), "asymmetric", "token",
 * "client_cert" or "none"; the scheme label of ankusa_verify_failures_total. */
const char *ak_verifier_scheme(const ak_verifier_t *v);
/* HMAC with SHA-1: counted on ankusa_verifier_weak_hash_total whatever the outcome. */
bool ak_verifier_weak_hash(const ak_verifier_t *v);
/* Needs the live TLS peer certificate (client_cert sources only). */
bool ak_verifier_needs_client_cert(const ak_verifier_t *v);
/* A request header carrying a credential (token verifier): lowercase name, or NULL. It
 * is dropped from what is stored whatever the store_headers policy. */
const char *ak_verifier_credential_header(const ak_verifier_t *v);
/* A query parameter carrying a credential (token verifier, location query), or NULL. */
const char *ak_verifier_credential_param(const ak_verifier_t *v);

#endif
