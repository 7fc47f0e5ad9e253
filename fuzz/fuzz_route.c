/* libFuzzer harness for catch-URL resolution and the header checks (edge/route.c, core/header.c),
 * which see untrusted request paths and header bytes before anything else does.
 *
 * Input: byte 0 picks one of four configs (path / tenant_path routing, with and without a
 * prefix); the rest is split on '\n': line 0 is the request path (cut at a NUL, as the
 * listener hands over a C string), each later line is a header "name:value" split at the
 * first ':'. Results are compared with a straightforward re-statement of the rules written
 * here, so a wrong answer is caught, not only a crash. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/config.h"
#include "core/header.h"
#include "edge/route.h"
#include "modules.h"
#include "core/node.h"
#include "core/sources.h"
#include "edge/edge.h"
#include "admin/admin.h"
#include "store/audit.h"
#include "queue/writer.h"
#include "queue/dedupe.h"
#include "queue/quarantine.h"
#include "dispatch/dispatch.h"
#include "sinks/egress.h"
#include "edge/headers.h"
#include "admin/sources_api.h"
#include "core/log.h"

#define CHECK(cond)                                                                  \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      fprintf(stderr, "fuzz_route: invariant failed at line %d: %s\n", __LINE__, #cond); \
      abort();                                                                       \
    }                                                                                \
  } while (0)

static const char *const yaml_cfgs[] = {
  /* path routing under a two-level prefix */
  "http:\n"
  "  routing: path\n"
  "  prefix: /webhooks/in\n"
  "sources:\n"
  "  demo:\n"
  "    sinks: [{type: log}]\n"
  "  stripe-acme:\n"
  "    tenant: acme\n"
  "    sinks: [{type: log}]\n"
  "  gh_1:\n"
  "    tenant: beta\n"
  "    on_verify_failure: quarantine\n"
  "    sinks:\n"
  "      - type: log\n"
  "  A:\n"
  "    sinks: [{type: log}]\n",
  /* tenant_path routing: one shared source, two owned ones */
  "http:\n"
  "  routing: tenant_path\n"
  "  prefix: /hooks/v1/\n"
  "sources:\n"
  "  shared:\n"
  "    trust_url_tenant: true\n"
  "    sinks: [{type: log}]\n"
  "  acme-orders:\n"
  "    tenant: acme\n"
  "    sinks: [{type: log}]\n"
  "  beta_src:\n"
  "    tenant: beta\n"
  "    sinks: [{type: log}]\n",
  /* path routing, no prefix */
  "http:\n"
  "  prefix: /\n"
  "sources:\n"
  "  demo:\n"
  "    sinks: [{type: log}]\n"
  "  webhooks:\n"
  "    tenant: t0\n"
  "    sinks: [{type: log}]\n",
  /* tenant_path routing, no prefix, a 64-character source id */
  "http:\n"
  "  routing: tenant_path\n"
  "  prefix: \"\"\n"
  "sources:\n"
  "  aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa:\n"
  "    trust_url_tenant: true\n"
  "    sinks: [{type: log}]\n"
  "  x:\n"
  "    tenant: Z-9_\n"
  "    sinks: [{type: log}]\n",
};
#define NCFG (sizeof yaml_cfgs / sizeof yaml_cfgs[0])

static ak_config_t *cfgs[NCFG];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  static const char *const no_env[] = {NULL};
  for (size_t i = 0; i < NCFG; i++) {
    char *err = NULL;
    if (ak_config_load_string(ak_modules(), yaml_cfgs[i], strlen(yaml_cfgs[i]), no_env, &cfgs[i], &err) != 0) {
      fprintf(stderr, "fuzz_route: built-in config %zu does not load: %s\n", i, err ? err : "?");
      abort();
    }
  }
  return 0;
}

/* ------------------------------------------------------------- reference rules ---- */

static bool ref_tenant(const char *s, size_t len) {
  static const char alphabet[] =
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-";
  if (len < 1 || len > 64) return false;
  for (size_t i = 0; i < len; i++)
    if (s[i] == '\0' || !strchr(alphabet, s[i])) return false;
  return true;
}

/* RFC 9110 token: letters, digits and !#$%&'*+-.^_`|~ */
static bool ref_name(const uint8_t *s, size_t len) {
  if (!len) return false;
  for (size_t i = 0; i < len; i++)
    if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
          (s[i] && strchr("!#$%&'*+-.^_`|~", s[i]))))
      return false;
  return true;
}

static bool ref_value(const uint8_t *s, size_t len) {
  for (size_t i = 0; i < len; i++)
    if (s[i] != '\t' && (s[i] < ' ' || s[i] >= 0x7F)) return false;
  return true;
}

typedef struct {
  const char *p;
  size_t n;
} seg_t;

/* Non-empty '/'-separated segments of s; returns how many (keeps the first `max`). */
static size_t split(const char *s, seg_t *out, size_t max) {
  size_t count = 0;
  while (*s) {
    size_t len = strcspn(s, "/");
    if (len) {
      if (count < max) out[count] = (seg_t){s, len};
      count++;
    }
    s += len;
    if (*s == '/') s++;
  }
  return count;
}

static ak_route_status_t ref_parse(const ak_config_t *cfg, const char *path, seg_t *tenant,
                                   seg_t *source) {
  seg_t pre[32], segs[64];
  size_t np = split(ak_http_cfg(cfg)->prefix, pre, 32);
  CHECK(np <= 32);
  size_t ns = split(path, segs, 64);
  size_t kept = ns < 64 ? ns : 64;
  if (ns < np) return AK_ROUTE_NOT_FOUND;
  for (size_t i = 0; i < np; i++)
    if (i >= kept || segs[i].n != pre[i].n || memcmp(segs[i].p, pre[i].p, pre[i].n))
      return AK_ROUTE_NOT_FOUND;
  size_t rest = ns - np;
  size_t want = ak_http_cfg(cfg)->routing == AK_ROUTING_TENANT_PATH ? 2 : 1;
  if (rest != want) return rest == 0 && np == 0 ? AK_ROUTE_NOT_FOUND : AK_ROUTE_UNKNOWN_SOURCE;
  if (np + want > kept) return AK_ROUTE_UNKNOWN_SOURCE; /* cannot happen: want <= 2 */
  *source = segs[np + want - 1];
  *tenant = want == 2 ? segs[np] : (seg_t){"", 0};
  if (!ref_tenant(source->p, source->n)) return AK_ROUTE_UNKNOWN_SOURCE;
  if (want == 2 && !ref_tenant(tenant->p, tenant->n)) return AK_ROUTE_UNKNOWN_SOURCE;
  return AK_ROUTE_OK;
}

/* --------------------------------------------------------------------- harness ---- */

static void check_route(const ak_config_t *cfg, const char *path) {
  ak_route_t r;
  memset(&r, 0x5A, sizeof r); /* parse must fully initialise it */
  ak_route_status_t st = ak_route_parse(ak_http_cfg(cfg), path, &r);
  seg_t t = {0}, s = {0};
  ak_route_status_t want = ref_parse(cfg, path, &t, &s);
  CHECK(st == want);
  CHECK(memchr(r.source_id, 0, sizeof r.source_id) && memchr(r.url_tenant, 0, sizeof r.url_tenant));
  if (st != AK_ROUTE_OK) return;

  size_t sl = strlen(r.source_id), tl = strlen(r.url_tenant);
  CHECK(sl > 0 && ak_tenant_valid(r.source_id, sl));
  CHECK(sl == s.n && memcmp(r.source_id, s.p, sl) == 0);
  if (ak_http_cfg(cfg)->routing == AK_ROUTING_TENANT_PATH) {
    CHECK(tl > 0 && ak_tenant_valid(r.url_tenant, tl));
    CHECK(tl == t.n && memcmp(r.url_tenant, t.p, tl) == 0);
  } else {
    CHECK(tl == 0);
  }

  const ak_source_cfg_t *src = (const ak_source_cfg_t *)(uintptr_t)1;
  const char *tenant = (const char *)(uintptr_t)1;
  ak_route_status_t bst = ak_route_bind(ak_http_cfg(cfg), cfg, &r, &src, &tenant);

  const ak_source_cfg_t *expect_src = NULL;
  for (size_t i = 0; i < ak_sources_cfg(cfg)->n; i++)
    if (!strcmp(ak_sources_cfg(cfg)->v[i].id, r.source_id)) expect_src = &ak_sources_cfg(cfg)->v[i];
  const char *expect_tenant = NULL;
  if (expect_src) {
    if (ak_http_cfg(cfg)->routing != AK_ROUTING_TENANT_PATH) expect_tenant = expect_src->tenant;
    else if (!strcmp(expect_src->tenant, "default")) expect_tenant = r.url_tenant;
    else if (!strcmp(expect_src->tenant, r.url_tenant)) expect_tenant = expect_src->tenant;
  }
  if (!expect_tenant) {
    CHECK(bst == AK_ROUTE_UNKNOWN_SOURCE);
    return;
  }
  CHECK(bst == AK_ROUTE_OK);
  CHECK(src == expect_src);
  CHECK(tenant && strcmp(tenant, expect_tenant) == 0);
  CHECK(ak_tenant_valid(tenant, strlen(tenant)));
}

static void check_header(const uint8_t *name, size_t nl, const uint8_t *value, size_t vl) {
  CHECK(ak_header_name_ok((const char *)name, nl) == ref_name(name, nl));
  CHECK(ak_header_value_ok((const char *)value, vl) == ref_value(value, vl));
  CHECK(ak_tenant_valid((const char *)name, nl) == ref_tenant((const char *)name, nl));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  const ak_config_t *cfg = cfgs[data[0] % NCFG];
  const uint8_t *p = data + 1, *end = data + size;

  /* line 0: the path, as the NUL-terminated string the listener passes on */
  const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));
  size_t plen = (size_t)((nl ? nl : end) - p);
  char *path = malloc(plen + 1);
  CHECK(path != NULL);
  memcpy(path, p, plen);
  path[plen] = '\0';
  check_route(cfg, path);
  /* the same path under every config: the prefixes differ, the rules must not */
  for (size_t i = 0; i < NCFG; i++) check_route(cfgs[i], path);
  free(path);

  /* later lines: headers; heap copies of exact size so an overread is an ASan report */
  int nh = 0;
  while (nl && nh < 16) {
    p = nl + 1;
    nl = memchr(p, '\n', (size_t)(end - p));
    size_t ll = (size_t)((nl ? nl : end) - p);
    const uint8_t *colon = memchr(p, ':', ll);
    size_t nlen = colon ? (size_t)(colon - p) : ll;
    size_t vlen = colon ? ll - nlen - 1 : 0;
    uint8_t *name = malloc(nlen ? nlen : 1), *value = malloc(vlen ? vlen : 1);
    CHECK(name && value);
    memcpy(name, p, nlen);
    if (vlen) memcpy(value, colon + 1, vlen);
    check_header(name, nlen, value, vlen);
    free(name);
    free(value);
    nh++;
  }
  /* the whole input as one name and one value: every byte value, '\n' included */
  check_header(data, size, data, size);
  return 0;
}
