/* store_headers: names compare case-insensitively; lists are short, so a linear scan of
 * lowercase names per header beats building a hash table. */
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "edge/headers.h"

#define CREDENTIAL_HEADERS(X)                                                                            \
  X("authorization") X("proxy-authorization") X("cookie") X("set-cookie") X("x-api-key") X("api-key")        \
  X("x-auth-token") X("x-access-token") X("x-amz-security-token") X("x-goog-api-key") X("x-csrf-token")

#define AS_NAME(s) s,
const char *const ak_credential_headers[] = {CREDENTIAL_HEADERS(AS_NAME) NULL};

/* A name and its length: a header is compared only with names of its own length (most
 * headers match none, and cost one length check per name). */
typedef struct {
  const char *s;
  size_t len;
} name_t;

#define AS_ENTRY(s) {s, sizeof s - 1},
static const name_t credentials[] = {CREDENTIAL_HEADERS(AS_ENTRY)};
#define N_CREDENTIALS (sizeof credentials / sizeof credentials[0])

typedef struct {
  name_t *v;
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
  if (!out->v) return;
  for (size_t i = 0; i < n; i++) {
    const char *s = json_string_value(json_array_get(list, i));
    if (!s) continue;
    char *l = strdup(s);
    if (!l) continue;
    for (char *c = l; *c; c++)
      if (*c >= 'A' && *c <= 'Z') *c = (char)(*c + 32);
    out->v[out->n].s = l;
    out->v[out->n++].len = strlen(l);
  }
}

static void names_free(names_t *n) {
  for (size_t i = 0; i < n->n; i++) free((char *)n->v[i].s);
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

static int eq(const name_t *lower, const char *name, size_t len) {
  return lower->len == len && strncasecmp(lower->s, name, len) == 0;
}

static int in_names(const name_t *v, size_t n, const char *name, size_t len) {
  for (size_t i = 0; i < n; i++)
    if (eq(&v[i], name, len)) return 1;
  return 0;
}

ak_hdr_action_t ak_header_policy_action(const ak_header_policy_t *p, const char *name, size_t len,
                                        const char *extra_drop) {
  if (extra_drop && strlen(extra_drop) == len && strncasecmp(extra_drop, name, len) == 0) return AK_HDR_DROP;
  if (in_names(p->hash.v, p->hash.n, name, len)) return AK_HDR_HASH;
  if (in_names(p->drop.v, p->drop.n, name, len)) return AK_HDR_DROP;
  if (in_names(credentials, N_CREDENTIALS, name, len))
    return in_names(p->keep.v, p->keep.n, name, len) ? AK_HDR_KEEP : AK_HDR_DROP;
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

/* ------------------------------------------------------------------- the module ---- */

typedef struct {
  const json_t *spec;
} store_headers_cfg_t;

static const ak_opt_t store_headers_rows[] = {
  {.key = "drop", .type = AK_OPT_STRLIST, .def = "[]",
   .doc = "header names never stored, besides the built-in credential headers"},
  {.key = "hash", .type = AK_OPT_STRLIST, .def = "[]",
   .doc = "header names stored as sha256:<hex> of their value instead of the value"},
  {.key = "keep", .type = AK_OPT_STRLIST, .def = "[]",
   .doc = "built-in credential headers to store anyway (a verifier's token header never is)"},
  {0},
};

static int store_headers_finish(void *typed, const json_t *section, const json_t *root, char **err) {
  (void)root;
  (void)err;
  ((store_headers_cfg_t *)typed)->spec = section;
  return 0;
}

const ak_module_t ak_mod_store_headers = {
  .name = "store_headers",
  .roles = AK_ROLES_STORE,
  .section = "store_headers",
  .doc = "which request headers are stored with a hook",
  .options = store_headers_rows,
  .cfg_size = sizeof(store_headers_cfg_t),
  .finish = store_headers_finish,
};

const json_t *ak_store_headers_spec(const ak_config_t *cfg) {
  const store_headers_cfg_t *sc = ak_config_of(cfg, &ak_mod_store_headers);
  return sc ? sc->spec : NULL;
}
