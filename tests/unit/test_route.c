/* Unit tests: catch-URL resolution, tenant binding, header byte rules. */
#include <criterion/criterion.h>
#include <string.h>
#include "core/config.h"
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

static ak_config_t *load(const char *yaml) {
  const char *const env[] = {NULL};
  ak_config_t *cfg = NULL;
  char *err = NULL;
  int rc = ak_config_load_string(ak_modules(), yaml, strlen(yaml), env, &cfg, &err);
  cr_assert_eq(rc, 0, "config: %s", err ? err : "");
  return cfg;
}

Test(route, path_routing) {
  ak_config_t *c = load("sources:\n  demo: {sinks: [{type: log}]}\n  acme_src: {tenant: acme, sinks: [{type: log}]}\n");
  ak_route_t r;
  const ak_source_cfg_t *src;
  const char *tenant;
  cr_assert_eq(ak_route_parse(ak_http_cfg(c), "/webhooks/demo", &r), AK_ROUTE_OK);
  cr_assert_str_eq(r.source_id, "demo");
  cr_assert_eq(ak_route_bind(ak_http_cfg(c), c, &r, &src, &tenant), AK_ROUTE_OK);
  cr_assert_str_eq(tenant, "default");
  cr_assert_eq(ak_route_parse(ak_http_cfg(c), "//webhooks//demo/", &r), AK_ROUTE_OK, "empty segments dropped");
  cr_assert_eq(ak_route_parse(ak_http_cfg(c), "/webhooks/acme_src", &r), AK_ROUTE_OK);
  cr_assert_eq(ak_route_bind(ak_http_cfg(c), c, &r, &src, &tenant), AK_ROUTE_OK);
  cr_assert_str_eq(tenant, "acme", "path routing files under the source's tenant");
  cr_assert_eq(ak_route_parse(ak_http_cfg(c), "/webhooks/nope", &r), AK_ROUTE_OK);
  cr_assert_eq(ak_route_bind(ak_http_cfg(c), c, &r, &src, &tenant), AK_ROUTE_UNKNOWN_SOURCE);
  cr_assert_eq(ak_route_parse(ak_http_cfg(c), "/webhooks", &r), AK_ROUTE_UNKNOWN_SOURCE);
  cr_assert_eq(ak_route_parse(ak_http_cfg(c), "/webhooks/a/b", &r), AK_ROUTE_UNKNOWN_SOURCE);
  cr_assert_eq(ak_route_parse(ak_http_cfg(c), "/webhooks/de%6Do", &r), AK_ROUTE_UNKNOWN_SOURCE, "no percent-decoding");
  cr_assert_eq(ak_route_parse(ak_http_cfg(c), "/other/demo", &r), AK_ROUTE_NOT_FOUND);
  cr_assert_eq(ak_route_parse(ak_http_cfg(c), "/webhooksX/demo", &r), AK_ROUTE_NOT_FOUND);
  cr_assert_eq(ak_route_parse(ak_http_cfg(c), "/", &r), AK_ROUTE_NOT_FOUND);
  ak_config_free(c);
}

Test(route, no_prefix) {
  ak_config_t *c = load("http: {prefix: /}\nsources:\n  demo: {sinks: [{type: log}]}\n");
  ak_route_t r;
  cr_assert_eq(ak_route_parse(ak_http_cfg(c), "/demo", &r), AK_ROUTE_OK);
  cr_assert_str_eq(r.source_id, "demo");
  cr_assert_eq(ak_route_parse(ak_http_cfg(c), "/", &r), AK_ROUTE_NOT_FOUND);
  ak_config_free(c);
}

Test(route, tenant_path_binding) {
  ak_config_t *c = load("http: {routing: tenant_path, prefix: /hooks/v1}\n"
                        "sources:\n"
                        "  shared: {trust_url_tenant: true, sinks: [{type: log}]}\n"
                        "  owned: {tenant: acme, sinks: [{type: log}]}\n");
  ak_route_t r;
  const ak_source_cfg_t *src;
  const char *tenant;
  cr_assert_eq(ak_route_parse(ak_http_cfg(c), "/hooks/v1/acme/owned", &r), AK_ROUTE_OK);
  cr_assert_str_eq(r.url_tenant, "acme");
  cr_assert_eq(ak_route_bind(ak_http_cfg(c), c, &r, &src, &tenant), AK_ROUTE_OK);
  cr_assert_str_eq(tenant, "acme");
  cr_assert_eq(ak_route_parse(ak_http_cfg(c), "/hooks/v1/other/owned", &r), AK_ROUTE_OK);
  cr_assert_eq(ak_route_bind(ak_http_cfg(c), c, &r, &src, &tenant), AK_ROUTE_UNKNOWN_SOURCE, "owned source, other tenant");
  cr_assert_eq(ak_route_parse(ak_http_cfg(c), "/hooks/v1/zeta/shared", &r), AK_ROUTE_OK);
  cr_assert_eq(ak_route_bind(ak_http_cfg(c), c, &r, &src, &tenant), AK_ROUTE_OK);
  cr_assert_str_eq(tenant, "zeta", "a shared source files under the URL tenant");
  cr_assert_eq(ak_route_parse(ak_http_cfg(c), "/hooks/v1/bad.tenant/shared", &r), AK_ROUTE_UNKNOWN_SOURCE);
  char longt[100];
  memset(longt, 'a', 65);
  strcpy(longt + 65, "/shared");
  char path[200] = "/hooks/v1/";
  strcat(path, longt);
  cr_assert_eq(ak_route_parse(ak_http_cfg(c), path, &r), AK_ROUTE_UNKNOWN_SOURCE, "65-char tenant");
  cr_assert_eq(ak_route_parse(ak_http_cfg(c), "/hooks/v1/shared", &r), AK_ROUTE_UNKNOWN_SOURCE, "missing tenant segment");
  cr_assert_eq(ak_route_parse(ak_http_cfg(c), "/hooks/acme/shared", &r), AK_ROUTE_NOT_FOUND);
  ak_config_free(c);
}

Test(route, header_bytes) {
  cr_assert(ak_header_value_ok("a b\tc", 5));
  cr_assert(ak_header_value_ok("", 0));
  cr_assert_not(ak_header_value_ok("a\x01", 2));
  cr_assert_not(ak_header_value_ok("caf\xc3\xa9", 5), "non-ASCII bytes are refused");
  cr_assert_not(ak_header_value_ok("a\0b", 3));
}

Test(route, tenant_alphabet) {
  cr_assert(ak_tenant_valid("Acme_1-x", 8));
  cr_assert_not(ak_tenant_valid("", 0));
  cr_assert_not(ak_tenant_valid("a.b", 3));
  cr_assert_not(ak_tenant_valid("a/b", 3));
}
