/* The one reader of a verifier's key list (sig_internal.h): `secret` of the HMAC presets,
 * the custom hmac descriptor and the token verifier, `public_key` of the asymmetric ones.
 * A value is one string or a list of 1..AK_SIG_MAX_KEYS strings; each entry comes back
 * with the label that names it in an error ("secret", "secret[2]"). Borrows the strings
 * from the mapping and never copies, logs or quotes one: an error names the entry only. */
#include <stdio.h>
#include <string.h>
#include "verify/sig_internal.h"

int ak_verify_secrets_load(const json_t *spec, const char *key, ak_verify_secrets_t *out, char *err,
                           size_t errlen) {
  memset(out, 0, sizeof *out);
  const json_t *v = json_object_get(spec, key);
  bool list = json_is_array(v);
  size_t n = list ? json_array_size(v) : json_is_string(v) ? 1 : 0;
  if (n == 0) {
    snprintf(err, errlen, "%s: missing or empty", key);
    return -1;
  }
  if (n > AK_SIG_MAX_KEYS) {
    snprintf(err, errlen, "%s: at most %d entries", key, AK_SIG_MAX_KEYS);
    return -1;
  }
  for (size_t i = 0; i < n; i++) {
    const json_t *item = list ? json_array_get(v, i) : v;
    char *label = out->label[i];
    if (list) snprintf(label, sizeof out->label[i], "%.20s[%zu]", key, i);
    else snprintf(label, sizeof out->label[i], "%.20s", key);
    if (!json_is_string(item)) {
      snprintf(err, errlen, "%s: must be a string", label);
      return -1;
    }
    if (json_string_length(item) == 0) {
      snprintf(err, errlen, "%s: must not be empty", label);
      return -1;
    }
    out->s[i] = json_string_value(item);
    out->len[i] = json_string_length(item);
  }
  out->n = n;
  return 0;
}
