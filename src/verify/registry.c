/* The verifier table: every `verify.type` the config knows, in one place, and the
 * instance wrapper the edge holds per source. Owns lookup and dispatch only; it never
 * sees a request's secrets beyond handing the input to the verifier. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/config.h"
#include "verify/verifier.h"

/* X(name): a vtable `ak_verifier_<name>` whose .type is "<name>". Order = the order of
 * the "expected one of" list in config errors.
 * CLIENT CERT SLOT: when src/verify/clientcert.c defines ak_verifier_client_cert, add
 * `X(client_cert)` at the end of this list (nothing else to change). */
#define AK_VERIFIER_TYPES(X) \
  X(none)                    \
  X(stripe)                  \
  X(github)                  \
  X(standard_webhooks)       \
  X(shopify)                 \
  X(slack)                   \
  X(hmac)                    \
  X(standard_webhooks_v1a)   \
  X(asymmetric)              \
  X(token)                   \
  X(client_cert)

#define DECLARE(name) extern const ak_verifier_vtable_t ak_verifier_##name;
AK_VERIFIER_TYPES(DECLARE)
#undef DECLARE

#define ENTRY(name) &ak_verifier_##name.plugin,
static const ak_plugin_t *const verifiers[] = {AK_VERIFIER_TYPES(ENTRY)};
#undef ENTRY

const ak_verifier_vtable_t *ak_verifiers_find(const char *type) {
  const ak_plugin_t *p = ak_plugin_find(&ak_verify_kind, type);
  return p ? (const ak_verifier_vtable_t *)p : NULL; /* the plugin is the vtable's first member */
}

static const char *const reason_names[AK_VR_COUNT] = {
  [AK_VR_OK] = "ok",
  [AK_VR_MISSING_SIGNATURE] = "missing_signature",
  [AK_VR_MALFORMED_SIGNATURE] = "malformed_signature",
  [AK_VR_NO_MATCH] = "no_match",
  [AK_VR_TIMESTAMP_OUT_OF_TOLERANCE] = "timestamp_out_of_tolerance",
};

const char *ak_verify_reason_name(ak_verify_reason_t r) {
  return (unsigned)r < AK_VR_COUNT ? reason_names[r] : "unknown";
}

/* The original writes its reason term as Elixir prints an atom: the name after a colon. */
static const char *const reason_texts[AK_VR_COUNT] = {
  [AK_VR_OK] = ":ok",
  [AK_VR_MISSING_SIGNATURE] = ":missing_signature",
  [AK_VR_MALFORMED_SIGNATURE] = ":malformed_signature",
  [AK_VR_NO_MATCH] = ":no_match",
  [AK_VR_TIMESTAMP_OUT_OF_TOLERANCE] = ":timestamp_out_of_tolerance",
};

const char *ak_verify_reason_text(ak_verify_reason_t r) {
  return (unsigned)r < AK_VR_COUNT ? reason_texts[r] : ":unknown";
}

struct ak_verifier {
  const ak_verifier_vtable_t *vt;
  void *self;
};

ak_verifier_t *ak_verifier_new(const json_t *spec, char *err, size_t errlen) {
  char scratch[8];
  if (!err || !errlen) {
    err = scratch;
    errlen = sizeof scratch;
  }
  err[0] = '\0';
  const char *type = "none";
  if (spec && !(json_is_object(spec) && json_object_size(spec) == 0)) {
    type = json_string_value(json_object_get(spec, "type"));
    if (!type) {
      snprintf(err, errlen, "type: missing");
      return NULL;
    }
  }
  const ak_verifier_vtable_t *vt = ak_verifiers_find(type);
  if (!vt) {
    char *list = ak_plugin_type_list(&ak_verify_kind);
    snprintf(err, errlen, "type: unknown value \"%s\"; expected one of %s", type, list ? list : "?");
    free(list);
    return NULL;
  }
  ak_verifier_t *v = calloc(1, sizeof *v);
  if (!v) {
    snprintf(err, errlen, "type: out of memory");
    return NULL;
  }
  v->vt = vt;
  v->self = vt->create(spec, err, errlen);
  if (!v->self) {
    free(v);
    return NULL;
  }
  return v;
}

void ak_verifier_free(ak_verifier_t *v) {
  if (!v) return;
  v->vt->destroy(v->self);
  free(v);
}

ak_verify_reason_t ak_verifier_check(const ak_verifier_t *v, const ak_verify_input_t *in) {
  return v ? v->vt->check(v->self, in) : AK_VR_OK;
}

bool ak_verifier_is_none(const ak_verifier_t *v) { return !v || !strcmp(v->vt->plugin.type, "none"); }

const char *ak_verifier_type(const ak_verifier_t *v) { return v ? v->vt->plugin.type : "none"; }

const char *ak_verifier_scheme(const ak_verifier_t *v) {
  const char *t = ak_verifier_type(v);
  static const char *const hmac_types[] = {"stripe", "github", "standard_webhooks", "shopify", "slack", "hmac"};
  for (size_t i = 0; i < sizeof hmac_types / sizeof hmac_types[0]; i++)
    if (strcmp(t, hmac_types[i]) == 0) return "hmac";
  if (strcmp(t, "standard_webhooks_v1a") == 0) return "asymmetric";
  return t; /* asymmetric, token, client_cert, none */
}

bool ak_verifier_weak_hash(const ak_verifier_t *v) {
  return v && v->vt->weak_hash && v->vt->weak_hash(v->self);
}

bool ak_verifier_needs_client_cert(const ak_verifier_t *v) { return v && v->vt->needs_client_cert; }

const char *ak_verifier_credential_header(const ak_verifier_t *v) {
  return v && v->vt->credential_header ? v->vt->credential_header(v->self) : NULL;
}

const char *ak_verifier_credential_param(const ak_verifier_t *v) {
  return v && v->vt->credential_param ? v->vt->credential_param(v->self) : NULL;
}

/* ------------------------------------------------------------------- the kind ---- */

/* Every verifier is built once at load: a secret or key that cannot be decoded fails it
 * (the error names the key, never the value: "secret[1]: cannot be decoded: ..."). */
static void verify_kind_check(ak_check_t *c, const char *path, json_t *spec, const json_t *root) {
  (void)root;
  char why[512];
  ak_verifier_t *v = ak_verifier_new(spec, why, sizeof why);
  if (!v) ak_check_error(c, "%s.%s", path, why[0] ? why : "type: cannot be created");
  ak_verifier_free(v);
}

static void *verify_kind_create(const json_t *spec, char *err, size_t errlen) {
  return ak_verifier_new(spec, err, errlen);
}

static void verify_kind_destroy(void *self) { ak_verifier_free(self); }

const ak_plugin_kind_t ak_verify_kind = {
  .name = "verify",
  .all = verifiers,
  .count = sizeof verifiers / sizeof verifiers[0],
  .none_type = "none",
  .check = verify_kind_check,
  .create = verify_kind_create,
  .destroy = verify_kind_destroy,
};
