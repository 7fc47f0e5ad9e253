/* store_headers: names compare case-insensitively; lists are short, so a linear scan of
 * lowercase names per header beats building a hash table. */
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "edge/headers.h"

const char *const ak_credential_headers[] = {
  "authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "api-key",
  "x-auth-token", "x-access-token", "x-amz-security-token", "x-goog-api-key", "x-csrf-token",
  NULL,
};

typedef struct {
  char **v;
  size_t n;
} names_t;

struct ak_header_policy {
  names_t drop, hash, keep;
};

static void names_from(names_t *out, const json_t *list) {
  out->n = 0;
  out->v = NULL;
  size_t n = json_array_size(list);
  if (!n) return;
  out->v = calloc(n, sizeof *out->v);
  for (size_t i = 0; i < n; i++) {
    const char *s = json_string_value(json_array_get(list, i));
    if (!s) continue;
    char *l = strdup(s);
    for (char *c = l; *c; c++)
      if (*c >= 'A' && *c <= 'Z') *c = (char)(*c + 32);
    out->v[out->n++] = l;
  }
}

static void names_free(names_t *n) {
  for (size_t i = 0; i < n->n; i++) free(n->v[i]);
  free(n->v);
}

ak_header_policy_t *ak_header_policy_new(const json_t *spec) {
  ak_header_policy_t *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  names_from(&p->drop, json_object_get(spec, "drop"));
  names_from(&p->hash, json_object_get(spec, "hash"));
  names_from(&p->keep, json_object_get(spec, "keep"));
  return p;
}

void ak_header_policy_free(ak_header_policy_t *p) {
  if (!p) return;
  names_free(&p->drop);
  names_free(&p->hash);
  names_free(&p->keep);
  free(p);
}

static int eq(const char *lower, const char *name, size_t len) {
  return strlen(lower) == len && strncasecmp(lower, name, len) == 0;
}

static int in_names(const names_t *n, const char *name, size_t len) {
  for (size_t i = 0; i < n->n; i++)
    if (eq(n->v[i], name, len)) return 1;
  return 0;
}

ak_hdr_action_t ak_header_policy_action(const ak_header_policy_t *p, const char *name, size_t len,
                                        const char *extra_drop) {
  if (extra_drop && eq(extra_drop, name, len)) return AK_HDR_DROP;
  if (in_names(&p->hash, name, len)) return AK_HDR_HASH;
  if (in_names(&p->drop, name, len)) return AK_HDR_DROP;
  for (size_t i = 0; ak_credential_headers[i]; i++)
    if (eq(ak_credential_headers[i], name, len)) return in_names(&p->keep, name, len) ? AK_HDR_KEEP : AK_HDR_DROP;
  return AK_HDR_KEEP;
}

size_t ak_header_policy_apply(const ak_header_policy_t *p, const ak_header_t *in, size_t n_in,
                              const char *extra_drop, ak_header_t *out, char *hashbuf) {
  static const char hex[] = "0123456789abcdef";
  size_t k = 0, nh = 0;
  for (size_t i = 0; i < n_in; i++) {
    ak_hdr_action_t a = ak_header_policy_action(p, in[i].name, in[i].name_len, extra_drop);
    if (a == AK_HDR_DROP) continue;
    out[k] = in[i];
    if (a == AK_HDR_HASH) {
      unsigned char d[32];
      unsigned int dl = 0;
      EVP_Digest(in[i].value, in[i].value_len, d, &dl, EVP_sha256(), NULL);
      char *h = hashbuf + nh++ * AK_HDR_HASH_LEN;
      memcpy(h, "sha256:", 7);
      for (int j = 0; j < 32; j++) {
        h[7 + 2 * j] = hex[d[j] >> 4];
        h[8 + 2 * j] = hex[d[j] & 15];
      }
      h[71] = 0;
      out[k].value = h;
      out[k].value_len = 71;
    }
    k++;
  }
  return k;
}
