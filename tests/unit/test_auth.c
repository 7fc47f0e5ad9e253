/* Unit tests: admin principals and scopes. Token hashing (SHA-256 vectors), the bearer
 * check (constant-time compare against every principal, header forms, no principals =
 * anonymous with everything), tenant lists, the scope names against the config's list,
 * the route table: every endpoint's scope, node-wide flag and captures, and the query
 * arguments handlers read (ak_admin_arg). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include "admin/api.h"
#include "admin/auth.h"
#include "admin/router.h"
#include "core/config.h"
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

#define HASH_TEST "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" /* sha256("test") */

static void hex(const uint8_t *b, size_t n, char *out) {
  for (size_t i = 0; i < n; i++) snprintf(out + 2 * i, 3, "%02x", b[i]);
}

Test(auth, token_hash_is_sha256) {
  uint8_t h[32];
  char t[65];
  ak_auth_token_hash("test", 4, h);
  hex(h, 32, t);
  cr_expect_str_eq(t, HASH_TEST);
  ak_auth_token_hash("", 0, h);
  hex(h, 32, t);
  cr_expect_str_eq(t, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

static ak_auth_t *auth_from(const char *principals_json) {
  json_t *j = json_loads(principals_json, 0, NULL);
  cr_assert_not_null(j);
  char *err = NULL;
  ak_auth_t *a = ak_auth_new(j, &err);
  json_decref(j);
  cr_assert_not_null(a, "%s", err ? err : "");
  return a;
}

/* "ops" has the token "test", "bot" the token "bot-token" (hash computed here). */
static ak_auth_t *two_principals(void) {
  uint8_t h[32];
  char bh[65], json[1024];
  ak_auth_token_hash("bot-token", 9, h);
  hex(h, 32, bh);
  snprintf(json, sizeof json,
           "[{\"name\":\"ops\",\"token_sha256\":\"" HASH_TEST "\",\"scopes\":[\"audit:read\",\"log_level:write\"],"
           "\"tenants\":[\"*\"]},"
           "{\"name\":\"bot\",\"token_sha256\":\"%s\",\"scopes\":[\"rate_limits:write\"],\"tenants\":[\"acme\",\"beta\"]}]",
           bh);
  return auth_from(json);
}

Test(auth, bearer_token_finds_its_principal) {
  ak_auth_t *a = two_principals();
  cr_expect_eq(ak_auth_count(a), 2);
  const ak_principal_t *p = ak_auth_check(a, "Bearer test");
  cr_assert_not_null(p);
  cr_expect_str_eq(p->name, "ops");
  cr_expect(ak_principal_has(p, AK_SCOPE_AUDIT_READ));
  cr_expect(ak_principal_has(p, AK_SCOPE_LOG_LEVEL_WRITE));
  cr_expect_not(ak_principal_has(p, AK_SCOPE_RATE_LIMITS_WRITE));
  cr_expect(ak_principal_all_tenants(p));
  cr_expect(ak_principal_tenant(p, "anything", 8));
  /* the later principal is found too: every hash is compared */
  p = ak_auth_check(a, "bearer   bot-token  ");
  cr_assert_not_null(p, "scheme in any case, spaces around the token");
  cr_expect_str_eq(p->name, "bot");
  cr_expect_not(ak_principal_all_tenants(p));
  cr_expect(ak_principal_tenant(p, "acme", 4));
  cr_expect(ak_principal_tenant(p, "beta", 4));
  cr_expect_not(ak_principal_tenant(p, "acm", 3), "a prefix of a tenant is another tenant");
  cr_expect_not(ak_principal_tenant(p, "acme2", 5));
  cr_expect_not(ak_principal_has(p, AK_SCOPE_AUDIT_READ));
  ak_auth_free(a);
}

Test(auth, anything_else_is_unauthorized) {
  ak_auth_t *a = two_principals();
  const char *bad[] = {NULL, "", "Bearer", "Bearer ", "Bearer  \t ", "Basic dGVzdDp0ZXN0", "Token test",
                       "Bearertest", "Bearer tesT", "Bearer test2", "Bearer tes", "Bearer xest", "Bearer " HASH_TEST,
                       "test"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    cr_expect_null(ak_auth_check(a, bad[i]), "refused: %s", bad[i] ? bad[i] : "(no header)");
  ak_auth_free(a);
}

Test(auth, no_principals_is_anonymous_with_everything) {
  ak_auth_t *a = auth_from("[]");
  cr_expect_eq(ak_auth_count(a), 0);
  const ak_principal_t *p = ak_auth_check(a, NULL);
  cr_assert_not_null(p);
  cr_expect_str_eq(p->name, "anonymous");
  for (int s = 0; s < AK_SCOPE_COUNT; s++) cr_expect(ak_principal_has(p, (ak_scope_t)s));
  cr_expect(ak_principal_all_tenants(p));
  cr_expect_not_null(ak_auth_check(a, "Bearer whatever"), "a token is not needed, nor checked");
  ak_auth_free(a);
  cr_expect_not_null(ak_auth_check(NULL, NULL));
}

Test(auth, scope_names_match_the_config_list) {
  const char *list = AK_AUTH_SCOPE_NAMES;
  for (int s = 0; s < AK_SCOPE_COUNT; s++) {
    const char *name = ak_auth_scope_name((ak_scope_t)s);
    size_t n = strcspn(list, "|");
    cr_expect_eq(strlen(name), n, "scope %d", s);
    cr_expect_eq(strncmp(list, name, n), 0, "scope %d is %s in the config list", s, name);
    cr_expect_eq(ak_auth_scope_parse(name), (ak_scope_t)s);
    list += n + (list[n] == '|');
  }
  cr_expect_str_eq(list, "", "no name left over");
  cr_expect_eq(ak_auth_scope_parse("admin"), AK_SCOPE_OPEN);
  cr_expect_eq(ak_auth_scope_parse(NULL), AK_SCOPE_OPEN);
}

Test(auth, principals_from_a_loaded_config) {
  const char *yaml = "admin:\n  principals:\n    - {name: ops, token_sha256: " HASH_TEST
                     ", scopes: \"audit:read, config:read\", tenants: \"*\"}\n";
  ak_config_t *cfg = NULL;
  char *err = NULL;
  const char *const env[] = {NULL};
  cr_assert_eq(ak_config_load_string(ak_modules(), yaml, strlen(yaml), env, &cfg, &err), 0, "%s", err ? err : "");
  ak_auth_t *a = ak_auth_new(ak_admin_cfg(cfg)->principals, &err);
  cr_assert_not_null(a);
  const ak_principal_t *p = ak_auth_check(a, "Bearer test");
  cr_assert_not_null(p);
  cr_expect(ak_principal_has(p, AK_SCOPE_CONFIG_READ));
  cr_expect(ak_principal_all_tenants(p));
  ak_auth_free(a);
  ak_config_free(cfg);
}

/* ---------------------------------------------------------------- route table ---- */

typedef struct {
  const char *method, *url;
  ak_scope_t scope;
  bool node;
  const char *tenant, *id, *name;
} want_t;

static const want_t table[] = {
    {"GET", "/health", AK_SCOPE_OPEN, false, NULL, NULL, NULL},
    {"HEAD", "/ready", AK_SCOPE_OPEN, false, NULL, NULL, NULL},
    {"GET", "/metrics", AK_SCOPE_METRICS_READ, true, NULL, NULL, NULL},
    {"GET", "/v1/config", AK_SCOPE_CONFIG_READ, true, NULL, NULL, NULL},
    {"GET", "/v1/wal", AK_SCOPE_CONFIG_READ, true, NULL, NULL, NULL},
    {"GET", "/v1/fleet", AK_SCOPE_CONFIG_READ, true, NULL, NULL, NULL},
    {"GET", "/asyncapi.json", AK_SCOPE_CONFIG_READ, true, NULL, NULL, NULL},
    {"GET", "/v1/log-level", AK_SCOPE_CONFIG_READ, true, NULL, NULL, NULL},
    {"PUT", "/v1/log-level", AK_SCOPE_LOG_LEVEL_WRITE, true, NULL, NULL, NULL},
    {"GET", "/v1/hooks/0190e0b2-0000-7000-8000-000000000001", AK_SCOPE_HOOKS_READ, false, NULL,
     "0190e0b2-0000-7000-8000-000000000001", NULL},
    {"GET", "/v1/quarantine", AK_SCOPE_QUARANTINE_READ, false, NULL, NULL, NULL},
    {"DELETE", "/v1/quarantine", AK_SCOPE_QUARANTINE_WRITE, false, NULL, NULL, NULL},
    {"GET", "/v1/dlq", AK_SCOPE_DLQ_READ, false, NULL, NULL, NULL},
    {"POST", "/v1/replays", AK_SCOPE_REPLAYS_WRITE, false, NULL, NULL, NULL},
    {"GET", "/v1/replays", AK_SCOPE_REPLAYS_READ, false, NULL, NULL, NULL},
    {"GET", "/v1/replays/abc", AK_SCOPE_REPLAYS_READ, false, NULL, "abc", NULL},
    {"PATCH", "/v1/replays/abc", AK_SCOPE_REPLAYS_WRITE, false, NULL, "abc", NULL},
    {"GET", "/v1/rate-limits", AK_SCOPE_RATE_LIMITS_READ, false, NULL, NULL, NULL},
    {"GET", "/v1/tenants/acme/rate-limit", AK_SCOPE_RATE_LIMITS_READ, false, "acme", NULL, NULL},
    {"PUT", "/v1/tenants/acme/rate-limit", AK_SCOPE_RATE_LIMITS_WRITE, false, "acme", NULL, NULL},
    {"DELETE", "/v1/tenants/t-2/rate-limit", AK_SCOPE_RATE_LIMITS_WRITE, false, "t-2", NULL, NULL},
    {"GET", "/v1/audit", AK_SCOPE_AUDIT_READ, false, NULL, NULL, NULL},
    {"GET", "/v1/tenants/acme/sources", AK_SCOPE_SOURCES_READ, false, "acme", NULL, NULL},
    {"POST", "/v1/tenants/acme/sources", AK_SCOPE_SOURCES_WRITE, false, "acme", NULL, NULL},
    {"GET", "/v1/tenants/acme/sources/github", AK_SCOPE_SOURCES_READ, false, "acme", NULL, "github"},
    {"PUT", "/v1/tenants/acme/sources/github", AK_SCOPE_SOURCES_WRITE, false, "acme", NULL, "github"},
    {"DELETE", "/v1/tenants/t-2/sources/github", AK_SCOPE_SOURCES_WRITE, false, "t-2", NULL, "github"},
    {"DELETE", "/v1/tenants/acme", AK_SCOPE_TENANTS_WRITE, true, "acme", NULL, NULL},
    {"GET", "/v1/tenants/acme/erase", AK_SCOPE_TENANTS_WRITE, false, "acme", NULL, NULL},
};

Test(routes, every_endpoint_names_its_scope) {
  for (size_t i = 0; i < sizeof table / sizeof *table; i++) {
    const want_t *w = &table[i];
    ak_admin_path_t path;
    bool known = false;
    const ak_admin_route_t *r = ak_admin_route_match(w->method, w->url, &path, &known);
    cr_assert_not_null(r, "%s %s routed", w->method, w->url);
    cr_expect(known);
    cr_expect_eq(r->scope, w->scope, "%s %s needs %s, table says %s", w->method, w->url,
                 ak_auth_scope_name(w->scope), ak_auth_scope_name(r->scope));
    cr_expect_eq(!!(r->flags & AK_ROUTE_NODE), w->node, "%s %s node-wide", w->method, w->url);
    cr_expect_str_eq(path.tenant, w->tenant ? w->tenant : "", "%s %s tenant", w->method, w->url);
    cr_expect_str_eq(path.id, w->id ? w->id : "", "%s %s id", w->method, w->url);
    cr_expect_str_eq(path.name, w->name ? w->name : "", "%s %s name", w->method, w->url);
    cr_expect_not_null(r->fn);
  }
}

Test(routes, the_table_is_complete_and_unambiguous) {
  size_t n;
  const ak_admin_route_t *rs = ak_admin_routes(&n);
  size_t open = 0;
  for (size_t i = 0; i < n; i++) {
    cr_expect(rs[i].scope == AK_SCOPE_OPEN || (rs[i].scope >= 0 && rs[i].scope < AK_SCOPE_COUNT));
    open += rs[i].scope == AK_SCOPE_OPEN;
    for (size_t j = 0; j < i; j++)
      cr_expect(strcmp(rs[i].method, rs[j].method) || strcmp(rs[i].pattern, rs[j].pattern), "%s %s twice",
                rs[i].method, rs[i].pattern);
    /* every row is in the expectations above (a new endpoint must name its scope there) */
    bool listed = false;
    for (size_t k = 0; k < sizeof table / sizeof *table && !listed; k++) {
      ak_admin_path_t path;
      bool known;
      listed = ak_admin_route_match(table[k].method, table[k].url, &path, &known) == &rs[i];
    }
    cr_expect(listed, "%s %s has no expectation in the test table", rs[i].method, rs[i].pattern);
  }
  cr_expect_eq(open, 2, "only the probes are open");
}

Test(routes, unmatched_paths_and_methods) {
  ak_admin_path_t path;
  bool known = true;
  cr_expect_null(ak_admin_route_match("GET", "/v1/nope", &path, &known));
  cr_expect_not(known);
  cr_expect_null(ak_admin_route_match("POST", "/v1/audit", &path, &known));
  cr_expect(known, "the path exists under GET");
  cr_expect_null(ak_admin_route_match("GET", "/v1/tenants//rate-limit", &path, &known), "empty capture");
  cr_expect_null(ak_admin_route_match("GET", "/v1/tenants/a/b/rate-limit", &path, &known), "one segment");
  cr_expect_null(ak_admin_route_match("GET", "/v1/replays/", &path, &known));
  cr_expect_null(ak_admin_route_match("GET", "/health/", &path, &known));
  cr_expect_null(ak_admin_route_match("GET", "/v1/auditx", &path, &known));
  cr_expect_null(ak_admin_route_match("GET", "", &path, &known));
  char longseg[300];
  memset(longseg, 'a', sizeof longseg);
  memcpy(longseg, "/v1/replays/", 12);
  longseg[sizeof longseg - 1] = 0;
  cr_expect_null(ak_admin_route_match("GET", longseg, &path, &known), "a capture longer than the buffer");
}

/* ---------------------------------------------------------- query arguments ---- */

/* arg(q, key): ak_admin_arg on a call whose query string is q, copied out. */
static char *arg_of(const char *q, const char *key, bool *present) {
  ak_admin_call_t c;
  memset(&c, 0, sizeof c);
  cr_assert_eq(ak_admin_call_query(&c, q, q ? strlen(q) : 0), 0);
  const char *v = ak_admin_arg(&c, key);
  *present = v != NULL;
  char *out = v ? strdup(v) : NULL;
  ak_admin_call_release(&c);
  cr_expect_null(c.query);
  return out;
}

static void expect_arg(const char *q, const char *key, const char *want) {
  bool present;
  char *got = arg_of(q, key, &present);
  if (!want) cr_expect_not(present, "?%s: %s should be absent, got \"%s\"", q, key, got ? got : "");
  else cr_expect(present && !strcmp(got, want), "?%s: %s = \"%s\", want \"%s\"", q, key, got ? got : "(null)", want);
  free(got);
}

/* The decoding libmicrohttpd 0.9.75 applied on this listener, kept by the port. */
Test(admin_api, query_arguments_decode_as_the_listener_always_has) {
  expect_arg("limit=5", "limit", "5");
  expect_arg("LIMIT=5", "limit", "5");               /* names: ASCII case-insensitive */
  expect_arg("li%6dit=5", "limit", "5");             /* names are decoded too */
  expect_arg("limit=5&limit=6", "limit", "5");       /* the first wins */
  expect_arg("limit&limit=6", "limit", NULL);        /* a name without '=' has no value, and it is the first */
  expect_arg("limit=", "limit", "");
  expect_arg("x=a+b%2Bc%20d", "x", "a b+c d");       /* '+' is a space, %2B a '+' */
  expect_arg("x=%zz%4", "x", "%zz%4");               /* a malformed escape stays as sent */
  expect_arg("x=%41%00B", "x", "A");                 /* a decoded NUL ends the value */
  expect_arg("lim%00it=1&limit=2", "limit", "2");    /* ... and a name is compared whole */
  expect_arg("&&x=1&", "x", "1");
  expect_arg("x=a=b", "x", "a=b");
  expect_arg("", "x", NULL);
  expect_arg(NULL, "x", NULL);
}

Test(admin_api, unescape_keeps_plus_in_a_path) {
  char p[] = "/v1/log%2Dlevel+x%2";
  size_t n = ak_admin_unescape(p, strlen(p), false);
  cr_expect_str_eq(p, "/v1/log-level+x%2");
  cr_expect_eq(n, strlen(p));
}
