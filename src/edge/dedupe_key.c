/* Provider event keys from headers and JSON bodies. The body is parsed by jansson only
 * for a json source, and only after verification: a forged request never costs a parse.
 * Must never log a key (it is provider data) nor accept a value that is not a string or
 * an integer (a float or an object has no stable text form). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <jansson.h>
#include <openssl/evp.h>
#include "edge/dedupe_key.h"

/* Long keys are hashed so every stored key, and the header that carries it to sinks,
 * stays small whatever a provider sends. */
static char *finish_key(const char *v, size_t n, size_t *len) {
  if (n <= AK_DEDUPE_KEY_MAX) {
    char *k = malloc(n + 1);
    if (!k) return NULL;
    memcpy(k, v, n);
    k[n] = '\0';
    *len = n;
    return k;
  }
  unsigned char dg[32];
  unsigned int dl = 0;
  if (EVP_Digest(v, n, dg, &dl, EVP_sha256(), NULL) != 1) return NULL;
  char *k = malloc(7 + 64 + 1);
  if (!k) return NULL;
  memcpy(k, "sha256:", 7);
  for (int i = 0; i < 32; i++) snprintf(k + 7 + 2 * i, 3, "%02x", dg[i]);
  *len = 7 + 64;
  return k;
}

static char *from_header(const char *name, const ak_header_t *h, size_t n, size_t *len) {
  size_t nl = strlen(name);
  for (size_t i = 0; i < n; i++)
    if (h[i].name_len == nl && strncasecmp(h[i].name, name, nl) == 0)
      return h[i].value_len ? finish_key(h[i].value, h[i].value_len, len) : NULL;
  return NULL;
}

static char *from_json(const char *path, const uint8_t *body, size_t body_len, size_t *len) {
  if (!body_len) return NULL;
  json_t *doc = json_loadb((const char *)body, body_len, 0, NULL);
  if (!doc) return NULL;
  json_t *v = doc;
  for (const char *p = path; v && *p;) {
    const char *dot = strchr(p, '.');
    size_t sl = dot ? (size_t)(dot - p) : strlen(p);
    if (!json_is_object(v)) {
      v = NULL;
      break;
    }
    v = json_object_getn(v, p, sl); /* the segment ends at a dot, not at a NUL */
    p = dot ? dot + 1 : p + sl;
  }
  char *out = NULL;
  if (json_is_string(v) && json_string_length(v) > 0) {
    out = finish_key(json_string_value(v), json_string_length(v), len);
  } else if (json_is_integer(v)) {
    char num[32];
    int n = snprintf(num, sizeof num, "%lld", (long long)json_integer_value(v));
    out = finish_key(num, (size_t)n, len);
  }
  json_decref(doc);
  return out;
}

char *ak_dedupe_key_extract(const ak_source_cfg_t *src, const ak_header_t *headers, size_t nheaders,
                            const uint8_t *body, size_t body_len, size_t *len) {
  *len = 0;
  if (!src || !src->dedupe_field) return NULL;
  if (src->dedupe_from == AK_DEDUPE_HEADER) return from_header(src->dedupe_field, headers, nheaders, len);
  if (src->dedupe_from == AK_DEDUPE_JSON) return from_json(src->dedupe_field, body, body_len, len);
  return NULL;
}
