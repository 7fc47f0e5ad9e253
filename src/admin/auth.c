/* Principals are built once at start and never change, so a check takes no lock. The
 * token's hash is compared with every principal's hash (CRYPTO_memcmp, no early exit),
 * so the time a check takes says nothing about how close a guess was. */
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "admin/auth.h"

static const char *const scope_names[AK_SCOPE_COUNT] = {
    "sources:read",    "sources:write",    "dlq:read",         "replays:read",      "replays:write",
    "quarantine:read", "quarantine:write", "rate_limits:read", "rate_limits:write", "audit:read",
    "tenants:write",   "log_level:write",  "config:read",      "hooks:read",        "claims:read",
    "metrics:read", "routes:read", "routes:write",
};

struct ak_auth {
  ak_principal_t *v;
  size_t n;
};

/* The caller when no principal is configured (loopback only, Ankusa's behaviour). */
static const ak_principal_t anonymous = {.name = "anonymous", .scopes = (1u << AK_SCOPE_COUNT) - 1};

const char *ak_auth_scope_name(ak_scope_t s) {
  return s >= 0 && s < AK_SCOPE_COUNT ? scope_names[s] : "none";
}

ak_scope_t ak_auth_scope_parse(const char *s) {
  for (int i = 0; s && i < AK_SCOPE_COUNT; i++)
    if (!strcmp(s, scope_names[i])) return (ak_scope_t)i;
  return AK_SCOPE_OPEN;
}

void ak_auth_token_hash(const char *token, size_t len, uint8_t out[32]) {
  unsigned int dl = 0;
  EVP_Digest(token, len, out, &dl, EVP_sha256(), NULL);
}

static int hexval(char c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static void principal_clear(ak_principal_t *p) {
  free(p->name);
  for (size_t i = 0; p->tenant_ids && i < p->tenant_list.n; i++) free(p->tenant_ids[i]);
  free(p->tenant_ids);
}

static int build(ak_principal_t *p, const json_t *j, size_t idx, char **err) {
  const char *name = json_string_value(json_object_get(j, "name"));
  const char *hex = json_string_value(json_object_get(j, "token_sha256"));
  bool ok = name && hex && strlen(hex) == 64 && (p->name = strdup(name)) != NULL;
  for (int i = 0; ok && i < 32; i++) {
    int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
    ok = hi >= 0 && lo >= 0;
    p->token_sha256[i] = (uint8_t)(hi << 4 | lo);
  }
  size_t k;
  json_t *v;
  json_array_foreach(json_object_get(j, "scopes"), k, v) {
    ak_scope_t s = ak_auth_scope_parse(json_string_value(v));
    if (s == AK_SCOPE_OPEN) ok = false;
    else p->scopes |= 1u << s;
  }
  const json_t *ts = json_object_get(j, "tenants");
  const char *first = json_string_value(json_array_get(ts, 0));
  bool all = json_array_size(ts) == 1 && first && !strcmp(first, "*");
  if (ok && !all) {
    p->tenant_ids = calloc(json_array_size(ts) + 1, sizeof *p->tenant_ids);
    ok = p->tenant_ids != NULL && json_array_size(ts) > 0;
    json_array_foreach(ts, k, v) {
      if (!ok) break;
      const char *t = json_string_value(v);
      ok = t && strcmp(t, "*") && (p->tenant_ids[k] = strdup(t)) != NULL;
      if (ok) p->tenant_list.n = k + 1;
    }
    p->tenant_list.ids = (const char *const *)p->tenant_ids;
    p->tenants = &p->tenant_list;
  }
  if (!ok && asprintf(err, "admin.principals[%zu]: cannot be used", idx) < 0) *err = NULL;
  return ok ? 0 : -1;
}

ak_auth_t *ak_auth_new(const json_t *principals, char **err) {
  *err = NULL;
  ak_auth_t *a = calloc(1, sizeof *a);
  if (!a) return NULL;
  size_t n = json_is_array(principals) ? json_array_size(principals) : 0;
  a->v = calloc(n + 1, sizeof *a->v);
  if (!a->v) {
    free(a);
    return NULL;
  }
  for (size_t i = 0; i < n; i++) {
    a->n = i + 1;
    if (build(&a->v[i], json_array_get(principals, i), i, err) != 0) {
      ak_auth_free(a);
      return NULL;
    }
  }
  return a;
}

void ak_auth_free(ak_auth_t *a) {
  if (!a) return;
  for (size_t i = 0; i < a->n; i++) principal_clear(&a->v[i]);
  free(a->v);
  free(a);
}

size_t ak_auth_count(const ak_auth_t *a) { return a ? a->n : 0; }

const ak_principal_t *ak_auth_check(const ak_auth_t *a, const char *authorization) {
  if (!a || a->n == 0) return &anonymous;
  if (!authorization) return NULL;
  const char *s = authorization;
  while (*s == ' ' || *s == '\t') s++;
  if (strncasecmp(s, "Bearer", 6) != 0 || (s[6] != ' ' && s[6] != '\t')) return NULL;
  s += 6;
  while (*s == ' ' || *s == '\t') s++;
  size_t len = strlen(s);
  while (len && (s[len - 1] == ' ' || s[len - 1] == '\t')) len--;
  if (!len) return NULL;
  uint8_t h[32];
  ak_auth_token_hash(s, len, h);
  const ak_principal_t *found = NULL;
  for (size_t i = 0; i < a->n; i++) {
    /* every principal is compared: no early exit */
    if (CRYPTO_memcmp(h, a->v[i].token_sha256, sizeof h) == 0) found = &a->v[i];
  }
  OPENSSL_cleanse(h, sizeof h);
  return found;
}

bool ak_principal_has(const ak_principal_t *p, ak_scope_t s) {
  return p && s >= 0 && s < AK_SCOPE_COUNT && (p->scopes & (1u << s));
}

bool ak_principal_tenant(const ak_principal_t *p, const char *tenant, size_t len) {
  return p && ak_tenant_scope_has(p->tenants, tenant, len);
}
