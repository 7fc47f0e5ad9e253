/* Unit tests: the route guard (src/routes/). Every pattern form and the refused ones, the
 * request-path rule, IP rules (first match wins, the default, IPv4 and IPv6, the mapped
 * range refused, a mapped client matched as IPv4), X-Forwarded-For believed only from a
 * trusted proxy, the decision order, the cache (negative entries expire, a change drops
 * every entry), max_routes, seeds (created when absent, never over a stored route), a
 * change that changes nothing, and a store that cannot write (nothing changes). The
 * route store here is a memory one behind the same interface (routes/store.h). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "admin/router.h"
#include "core/netaddr.h"
#include "routes/cache.h"
#include "routes/iprules.h"
#include "routes/pattern.h"
#include "routes/routes.h"
#include "routes/table.h"

/* ---------------------------------------------------------------- patterns ---- */

static bool m(const char *pat, const char *path) {
  const char *why = NULL;
  ak_rpattern_t *p = ak_rpattern_compile(pat, &why);
  cr_assert_not_null(p, "%s: %s", pat, why);
  bool ok = ak_rpath_valid(path, strlen(path)) && ak_rpattern_match(p, path, strlen(path));
  ak_rpattern_free(p);
  return ok;
}

static void refused(const char *pat, const char *want) {
  const char *why = NULL;
  ak_rpattern_t *p = ak_rpattern_compile(pat, &why);
  cr_expect_null(p, "%s compiled", pat);
  if (p) ak_rpattern_free(p);
  else cr_expect_str_eq(why, want, "%s", pat);
}

Test(routes_pattern, literal) {
  cr_expect(m("/webhooks/github", "/webhooks/github"));
  cr_expect(!m("/webhooks/github", "/webhooks/githu"));
  cr_expect(!m("/webhooks/github", "/webhooks/github/x"));
  cr_expect(!m("/webhooks/github", "/webhooks"));
  cr_expect(!m("/webhooks/github", "/Webhooks/github"));
  cr_expect(m("/", "/"));
  cr_expect(!m("/", "/a"));
  cr_expect(!m("/a", "/"));
}

Test(routes_pattern, param_is_one_nonempty_segment) {
  cr_expect(m("/webhooks/:source", "/webhooks/stripe"));
  cr_expect(m("/webhooks/:t/:s", "/webhooks/acme/stripe"));
  cr_expect(!m("/webhooks/:source", "/webhooks/a/b"));
  cr_expect(!m("/webhooks/:source", "/webhooks/"));
  cr_expect(!m("/webhooks/:source", "/webhooks"));
  cr_expect(m("/a/:x/c", "/a/b/c"));
  cr_expect(!m("/a/:x/c", "/a/b/d"));
}

Test(routes_pattern, trailing_star_is_one_or_more_segments) {
  cr_expect(m("/hooks/*", "/hooks/a"));
  cr_expect(m("/hooks/*", "/hooks/a/b/c"));
  cr_expect(!m("/hooks/*", "/hooks"));
  cr_expect(!m("/hooks/*", "/hooks/"));
  cr_expect(!m("/hooks/*", "/hookz/a"));
  cr_expect(m("/*", "/anything/at/all"));
}

Test(routes_pattern, refused_patterns) {
  refused("/x/%2F/y", "must not contain %2F");
  refused("/x/a%2fb", "must not contain %2F");
  refused("/x/./y", "must not contain a . or .. segment");
  refused("/x/..", "must not contain a . or .. segment");
  refused("/x//y", "must not contain an empty segment");
  refused("/x/", "must not contain an empty segment");
  refused("x", "must start with /");
  refused("", "must start with /");
  refused("/a/*/b", "may have * only as its last segment");
  refused("/a/b*", "may have * only as a whole last segment");
  refused("/a/:", "has a : parameter without a name");
  refused("/a/:x-y", "has a : parameter name outside [A-Za-z0-9_]");
  refused("/a b", "must be printable ASCII without spaces, ? or #");
  refused("/a?b", "must be printable ASCII without spaces, ? or #");
}

Test(routes_pattern, request_paths_refused_at_match_time) {
  const char *bad[] = {"/webhooks/a%2Fb", "/webhooks/a%2fb", "/webhooks/./a", "/webhooks/../a", "/webhooks//a",
                       "/webhooks/a/", "webhooks/a", ""};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) cr_expect(!ak_rpath_valid(bad[i], strlen(bad[i])), "%s", bad[i]);
  cr_expect(!m("/webhooks/*", "/webhooks/a%2Fb"));
  cr_expect(!m("/webhooks/*", "/webhooks/../admin"));
  cr_expect(m("/webhooks/*", "/webhooks/a%20b")); /* other escapes are bytes like any other */
}

Test(routes_pattern, specificity_order) {
  const char *why;
  ak_rpattern_t *lit = ak_rpattern_compile("/w/a", &why), *par = ak_rpattern_compile("/w/:x", &why),
                *star = ak_rpattern_compile("/w/*", &why), *longer = ak_rpattern_compile("/w/a/b", &why);
  cr_expect_lt(ak_rpattern_cmp(lit, par), 0);
  cr_expect_lt(ak_rpattern_cmp(par, star), 0);
  cr_expect_lt(ak_rpattern_cmp(longer, lit), 0);
  cr_expect_eq(ak_rpattern_cmp(lit, lit), 0);
  ak_rpattern_free(lit);
  ak_rpattern_free(par);
  ak_rpattern_free(star);
  ak_rpattern_free(longer);
}

/* ---------------------------------------------------------------- IP rules ---- */

static ak_netaddr_t addr(const char *s) {
  ak_netaddr_t a;
  cr_assert(ak_netaddr_parse(s, strlen(s), &a), "%s", s);
  return a;
}

static ak_iprules_t *rules(const char *js) {
  json_error_t je;
  json_t *j = json_loads(js, 0, &je);
  cr_assert_not_null(j, "%s", js);
  char err[200];
  ak_iprules_t *r = ak_iprules_from_json(j, false, err, sizeof err);
  json_decref(j);
  cr_assert_not_null(r, "%s: %s", js, err);
  return r;
}

static int eval(const ak_iprules_t *r, const char *ip, bool *allow) {
  ak_netaddr_t a = addr(ip);
  return ak_iprules_eval(r, &a, allow);
}

Test(routes_ip, first_match_wins_then_default) {
  ak_iprules_t *r = rules("{\"default\":\"deny\",\"rules\":[{\"action\":\"deny\",\"cidr\":\"10.1.0.0/16\"},"
                          "{\"action\":\"allow\",\"cidr\":\"10.0.0.0/8\"},{\"action\":\"deny\",\"cidr\":\"10.2.3.4\"}]}");
  bool allow;
  cr_expect_eq(eval(r, "10.1.2.3", &allow), 0);
  cr_expect(!allow);
  cr_expect_eq(eval(r, "10.2.3.4", &allow), 1); /* the allow above the deny wins */
  cr_expect(allow);
  cr_expect_eq(eval(r, "192.0.2.1", &allow), -1);
  cr_expect(!allow);
  ak_iprules_free(r);
  r = rules("{\"rules\":[]}");
  cr_expect_eq(eval(r, "192.0.2.1", &allow), -1);
  cr_expect(allow); /* default allow */
  ak_iprules_free(r);
}

Test(routes_ip, v6_cidrs_and_families_apart) {
  ak_iprules_t *r = rules("{\"default\":\"allow\",\"rules\":[{\"action\":\"deny\",\"cidr\":\"2001:db8::/32\"},"
                          "{\"action\":\"deny\",\"cidr\":\"::/0\"}]}");
  bool allow;
  cr_expect_eq(eval(r, "2001:db8::1", &allow), 0);
  cr_expect(!allow);
  cr_expect_eq(eval(r, "2001:db9::1", &allow), 1);
  cr_expect(!allow);
  /* ::/0 is every IPv6 client, never an IPv4 one (nor its mapped form) */
  cr_expect_eq(eval(r, "198.51.100.7", &allow), -1);
  cr_expect(allow);
  cr_expect_eq(eval(r, "::ffff:198.51.100.7", &allow), -1);
  cr_expect(allow);
  ak_iprules_free(r);
}

Test(routes_ip, mapped_client_matches_ipv4_rules) {
  ak_iprules_t *r = rules("{\"default\":\"allow\",\"rules\":[{\"action\":\"deny\",\"cidr\":\"203.0.113.0/24\"}]}");
  bool allow;
  cr_expect_eq(eval(r, "::ffff:203.0.113.9", &allow), 0);
  cr_expect(!allow);
  ak_iprules_free(r);
}

Test(routes_ip, mapped_cidrs_and_bad_rules_refused) {
  const char *bad[][2] = {
    {"{\"rules\":[{\"action\":\"deny\",\"cidr\":\"::ffff:0:0/96\"}]}", "rules[0].cidr: \"::ffff:0:0/96\" is inside "
                                                                      "::ffff:0:0/96 (IPv4-mapped): write the IPv4 CIDR instead"},
    {"{\"rules\":[{\"action\":\"deny\",\"cidr\":\"::ffff:1.2.3.4\"}]}", "rules[0].cidr: \"::ffff:1.2.3.4\" is inside "
                                                                       "::ffff:0:0/96 (IPv4-mapped): write the IPv4 CIDR instead"},
    {"{\"rules\":[{\"action\":\"drop\",\"cidr\":\"1.2.3.4\"}]}", "rules[0].action: expected allow or deny"},
    {"{\"rules\":[{\"action\":\"deny\",\"cidr\":\"10.0.0.1/8\"}]}", NULL},
    {"{\"default\":\"maybe\"}", "default: expected allow or deny"},
    {"{\"rules\":[], \"x\":1}", "unknown key \"x\""},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    json_t *j = json_loads(bad[i][0], 0, NULL);
    char err[200];
    ak_iprules_t *r = ak_iprules_from_json(j, false, err, sizeof err);
    json_decref(j);
    cr_expect_null(r, "%s", bad[i][0]);
    if (!r && bad[i][1]) cr_expect_str_eq(err, bad[i][1]);
    ak_iprules_free(r);
  }
  json_t *j = json_loads("{\"rules\":[]}", 0, NULL);
  char err[200];
  cr_expect_null(ak_iprules_from_json(j, true, err, sizeof err)); /* PUT needs both */
  cr_expect_str_eq(err, "default: required");
  json_decref(j);
}

Test(routes_ip, xff_believed_only_from_trusted_proxies) {
  ak_cidr_t px;
  bool v6;
  const char *why;
  cr_assert(ak_iprules_parse_cidr("10.0.0.0/8", &px, &v6, &why));
  const char *xff[] = {"198.51.100.1, 10.0.0.2"};
  size_t len[] = {strlen(xff[0])};
  ak_netaddr_t peer = addr("10.0.0.1"), out, want = addr("198.51.100.1");
  ak_netaddr_client(&peer, &px, 1, xff, len, 1, &out);
  cr_expect(!memcmp(&out, &want, sizeof out)); /* right-most untrusted */
  ak_netaddr_t stranger = addr("192.0.2.50");
  ak_netaddr_client(&stranger, &px, 1, xff, len, 1, &out);
  cr_expect(!memcmp(&out, &stranger, sizeof out)); /* not a proxy: its XFF is ignored */
}

/* ------------------------------------------------------------------ cache ---- */

Test(routes_cache, negative_entries_expire_and_changes_drop_all) {
  ak_rcache_t *c = ak_rcache_new(100, 30000, 5000, 60000);
  int kind;
  size_t idx;
  ak_rcache_put(c, 1, "POST", "/a", 2, 1000, AK_RFIND_NONE, true, 0);
  ak_rcache_put(c, 1, "POST", "/b", 2, 1000, AK_RFIND_ROUTE, false, 3);
  cr_expect(ak_rcache_get(c, 1, "POST", "/a", 2, 5999, &kind, &idx));
  cr_expect_eq(kind, AK_RFIND_NONE);
  cr_expect(!ak_rcache_get(c, 1, "POST", "/a", 2, 6000, &kind, &idx)); /* negative_ttl_ms passed */
  cr_expect(ak_rcache_get(c, 1, "POST", "/b", 2, 30999, &kind, &idx));
  cr_expect_eq(idx, 3);
  cr_expect(!ak_rcache_get(c, 1, "GET", "/b", 2, 1000, &kind, &idx)); /* the method is in the key */
  cr_expect(!ak_rcache_get(c, 2, "POST", "/b", 2, 1001, &kind, &idx)); /* a newer generation: stale */
  cr_expect(!ak_rcache_get(c, 1, "POST", "/b", 2, 31000, &kind, &idx)); /* dropped when seen stale */
  ak_rcache_free(c);
}

Test(routes_cache, bounded_and_collected) {
  ak_rcache_t *c = ak_rcache_new(3, 100, 50, 1000);
  char p[8];
  for (int i = 0; i < 10; i++) {
    snprintf(p, sizeof p, "/%d", i);
    ak_rcache_put(c, 1, "POST", p, strlen(p), 0, AK_RFIND_ROUTE, false, 0);
  }
  cr_expect_eq(ak_rcache_size(c), 3);
  ak_rcache_gc(c, 1, 100);
  cr_expect_eq(ak_rcache_size(c), 0);
  ak_rcache_put(c, 1, "POST", "/z", 2, 0, AK_RFIND_NONE, true, 0);
  ak_rcache_free(c);
  ak_rcache_t *off = ak_rcache_new(3, 100, 0, 1000); /* negative_ttl_ms 0: misses not cached */
  ak_rcache_put(off, 1, "POST", "/z", 2, 0, AK_RFIND_NONE, true, 0);
  cr_expect_eq(ak_rcache_size(off), 0);
  ak_rcache_free(off);
}

/* ----------------------------------------------------------- memory store ---- */

typedef struct mem {
  ak_rstore_t base;
  json_t *rows; /* id -> JSON text; "" key: the IP rules */
  int fail;     /* apply fails */
  int applied;
  char last_action[32];
} mem_t;

static int mem_load(ak_rstore_t *s, ak_rstore_load_fn cb, void *ctx) {
  mem_t *mm = (mem_t *)s;
  const char *k;
  json_t *v;
  json_object_foreach(mm->rows, k, v) {
    ak_rstore_item_t it = {.id = k[0] ? k : NULL, .value = json_string_value(v), .len = json_string_length(v)};
    if (cb(&it, ctx)) return -1;
  }
  return 0;
}

static int mem_apply(ak_rstore_t *s, const ak_rstore_item_t *it, const ak_audit_entry_t *e) {
  mem_t *mm = (mem_t *)s;
  if (mm->fail) return -1;
  const char *k = it->id ? it->id : "";
  if (it->value) json_object_set_new(mm->rows, k, json_stringn(it->value, it->len));
  else json_object_del(mm->rows, k);
  mm->applied++;
  snprintf(mm->last_action, sizeof mm->last_action, "%s", e ? e->action : "");
  return 0;
}

static void mem_free(ak_rstore_t *s) { (void)s; }

static mem_t MEM;

static ak_routes_cfg_t CFG = {.enabled = true, .max_routes = 3, .log_sample = 0, .ip_denied_status = 403,
                              .cache = {1000, 30000, 5000, 60000}};

static ak_routes_t *mk(const char *seed, const char *global) {
  if (!MEM.rows) MEM.rows = json_object();
  MEM.base = (ak_rstore_t){.load = mem_load, .apply = mem_apply, .free = mem_free};
  json_t *sd = seed ? json_loads(seed, 0, NULL) : json_array();
  json_decref((json_t *)CFG.seed); /* the previous node's, freed before this one was made */
  CFG.seed = sd;
  json_t *g = global ? json_loads(global, 0, NULL) : NULL;
  char err[300];
  ak_routes_t *rs = ak_routes_new(&CFG, g, &MEM.base, err, sizeof err);
  json_decref(g);
  cr_assert_not_null(rs, "%s", err);
  return rs;
}

static ak_routes_rc_t chg(ak_routes_t *rs, ak_rch_op_t op, const char *id, const char *body, char *err) {
  json_t *b = body ? json_loads(body, 0, NULL) : NULL;
  if (body) cr_assert_not_null(b, "%s", body);
  ak_routes_change_t ch = {.op = op, .id = id, .body = b};
  char e2[300];
  ak_routes_rc_t rc = ak_routes_change(rs, &ch, err ? err : e2, 300, NULL, NULL);
  json_decref(b);
  return rc;
}

static ak_guard_t dec(ak_routes_t *rs, const char *method, const char *path, const char *ip, ak_guard_result_t *g) {
  ak_guard_result_t local;
  if (!g) g = &local;
  ak_netaddr_t a = addr(ip);
  ak_routes_decide(rs, method, path, strlen(path), &a, 1000, g);
  return g->decision;
}

static void reset(void) {
  json_decref(MEM.rows);
  MEM.rows = json_object();
  MEM.fail = 0;
  MEM.applied = 0;
}

Test(routes_guard, deny_by_default_and_decision_order, .init = reset) {
  ak_routes_t *rs = mk("[{\"id\":\"gh\",\"path\":\"/webhooks/github\",\"methods\":[\"POST\"]},"
                       "{\"id\":\"any\",\"path\":\"/webhooks/:s\"},"
                       "{\"id\":\"off\",\"path\":\"/off/*\",\"enabled\":false}]",
                       "{\"default\":\"allow\",\"rules\":[{\"action\":\"deny\",\"cidr\":\"192.0.2.0/24\"}]}");
  ak_guard_result_t g;
  cr_expect_eq(dec(rs, "POST", "/webhooks/github", "198.51.100.1", &g), AK_GUARD_ALLOW);
  cr_expect_str_eq(g.route_id, "gh");
  /* GET on the literal: the :s route (every method) is the next match */
  cr_expect_eq(dec(rs, "GET", "/webhooks/github", "198.51.100.1", &g), AK_GUARD_ALLOW);
  cr_expect_str_eq(g.route_id, "any");
  cr_expect_eq(dec(rs, "POST", "/nope", "198.51.100.1", NULL), AK_GUARD_ROUTE_NOT_FOUND);
  cr_expect_eq(dec(rs, "POST", "/off/x", "198.51.100.1", &g), AK_GUARD_ROUTE_DISABLED);
  cr_expect_str_eq(g.route_id, "off");
  cr_expect_eq(dec(rs, "POST", "/webhooks/a%2Fb", "198.51.100.1", NULL), AK_GUARD_ROUTE_NOT_FOUND);
  /* the global rules first: a denied client learns nothing about routes */
  cr_expect_eq(dec(rs, "POST", "/nope", "192.0.2.9", &g), AK_GUARD_IP_DENIED);
  cr_expect_str_eq(g.ip_scope, "global");
  cr_expect_eq(g.ip_rule, 0);
  cr_expect_str_eq(g.ip_cidr, "192.0.2.0/24");
  ak_routes_free(rs);
}

Test(routes_guard, route_ip_rules_then_methods, .init = reset) {
  ak_routes_t *rs = mk("[{\"id\":\"r\",\"path\":\"/in\",\"methods\":[\"POST\"],\"ip_rules\":{\"default\":\"deny\","
                       "\"rules\":[{\"action\":\"allow\",\"cidr\":\"2001:db8::/32\"}]}}]", NULL);
  ak_guard_result_t g;
  cr_expect_eq(dec(rs, "POST", "/in", "2001:db8::5", &g), AK_GUARD_ALLOW);
  cr_expect_str_eq(g.ip_scope, "route");
  cr_expect_eq(dec(rs, "POST", "/in", "198.51.100.1", &g), AK_GUARD_IP_DENIED);
  cr_expect_eq(g.ip_rule, -1);
  cr_expect_eq(dec(rs, "GET", "/in", "198.51.100.1", NULL), AK_GUARD_IP_DENIED); /* methods stay hidden */
  cr_expect_eq(dec(rs, "GET", "/in", "2001:db8::5", NULL), AK_GUARD_METHOD_NOT_ALLOWED);
  const char *code;
  cr_expect_eq(ak_routes_refusal(rs, AK_GUARD_METHOD_NOT_ALLOWED, &code), 405);
  cr_expect_eq(ak_routes_refusal(rs, AK_GUARD_IP_DENIED, &code), 403);
  cr_expect_str_eq(code, "forbidden");
  cr_expect_eq(ak_routes_refusal(rs, AK_GUARD_ROUTE_NOT_FOUND, &code), 404);
  cr_expect_str_eq(code, "not_found");
  ak_routes_free(rs);
}

Test(routes_guard, a_route_added_after_a_miss_is_served_at_once, .init = reset) {
  ak_routes_t *rs = mk(NULL, NULL);
  cr_expect_eq(dec(rs, "POST", "/late", "198.51.100.1", NULL), AK_GUARD_ROUTE_NOT_FOUND); /* cached miss */
  cr_expect_eq(chg(rs, AK_RCH_CREATE, NULL, "{\"id\":\"late\",\"path\":\"/late\"}", NULL), AK_ROUTES_OK);
  cr_expect_eq(dec(rs, "POST", "/late", "198.51.100.1", NULL), AK_GUARD_ALLOW);
  cr_expect_eq(chg(rs, AK_RCH_DELETE, "late", NULL, NULL), AK_ROUTES_OK);
  cr_expect_eq(dec(rs, "POST", "/late", "198.51.100.1", NULL), AK_GUARD_ROUTE_NOT_FOUND);
  ak_routes_free(rs);
}

Test(routes_guard, changes_max_routes_and_errors, .init = reset) {
  ak_routes_t *rs = mk(NULL, NULL);
  char err[300];
  cr_expect_eq(chg(rs, AK_RCH_CREATE, NULL, "{\"id\":\"a\",\"path\":\"/a\"}", NULL), AK_ROUTES_OK);
  cr_expect_str_eq(MEM.last_action, "route.create");
  cr_expect_eq(chg(rs, AK_RCH_CREATE, NULL, "{\"id\":\"a\",\"path\":\"/a2\"}", NULL), AK_ROUTES_DUPLICATE);
  cr_expect_eq(chg(rs, AK_RCH_PUT, "b", "{\"path\":\"/b\"}", NULL), AK_ROUTES_OK);
  cr_expect_eq(chg(rs, AK_RCH_PUT, "c", "{\"path\":\"/c\"}", NULL), AK_ROUTES_OK);
  cr_expect_eq(chg(rs, AK_RCH_CREATE, NULL, "{\"id\":\"d\",\"path\":\"/d\"}", err), AK_ROUTES_TOO_MANY);
  cr_expect_eq(chg(rs, AK_RCH_PUT, "c", "{\"path\":\"/c2\"}", NULL), AK_ROUTES_OK); /* replacing is not adding */
  cr_expect_str_eq(MEM.last_action, "route.update");
  int before = MEM.applied;
  cr_expect_eq(chg(rs, AK_RCH_PUT, "c", "{\"path\":\"/c2\"}", NULL), AK_ROUTES_OK);
  cr_expect_eq(MEM.applied, before); /* nothing changed: nothing written */
  cr_expect_eq(chg(rs, AK_RCH_PATCH, "c", "{\"enabled\":false}", NULL), AK_ROUTES_OK);
  cr_expect_eq(dec(rs, "POST", "/c2", "198.51.100.1", NULL), AK_GUARD_ROUTE_DISABLED);
  cr_expect_eq(chg(rs, AK_RCH_PATCH, "zz", "{\"enabled\":false}", NULL), AK_ROUTES_NOT_FOUND);
  cr_expect_eq(chg(rs, AK_RCH_DELETE, "zz", NULL, NULL), AK_ROUTES_NOT_FOUND);
  cr_expect_eq(chg(rs, AK_RCH_PUT, "c", "{\"path\":\"/x/%2F\"}", err), AK_ROUTES_INVALID);
  cr_expect_str_eq(err, "path: must not contain %2F");
  cr_expect_eq(chg(rs, AK_RCH_PUT, "c", "{\"id\":\"other\",\"path\":\"/x\"}", err), AK_ROUTES_INVALID);
  cr_expect_eq(chg(rs, AK_RCH_PUT, "c", "{\"path\":\"/x\",\"methods\":[\"BREW\"]}", err), AK_ROUTES_INVALID);
  cr_expect_eq(chg(rs, AK_RCH_PUT, "c", "{\"path\":\"/x\",\"bogus\":1}", err), AK_ROUTES_INVALID);
  cr_expect_str_eq(err, "unknown key \"bogus\"");
  /* a store that cannot write: nothing changes */
  MEM.fail = 1;
  cr_expect_eq(chg(rs, AK_RCH_DELETE, "a", NULL, NULL), AK_ROUTES_UNAVAILABLE);
  cr_expect_eq(dec(rs, "POST", "/a", "198.51.100.1", NULL), AK_GUARD_ALLOW);
  cr_expect_eq(chg(rs, AK_RCH_IP_RULES, NULL, "{\"default\":\"deny\",\"rules\":[]}", NULL), AK_ROUTES_UNAVAILABLE);
  cr_expect_eq(dec(rs, "POST", "/a", "198.51.100.1", NULL), AK_GUARD_ALLOW);
  MEM.fail = 0;
  cr_expect_eq(chg(rs, AK_RCH_IP_RULES, NULL, "{\"default\":\"deny\",\"rules\":[]}", NULL), AK_ROUTES_OK);
  cr_expect_str_eq(MEM.last_action, "ip_rules.put");
  cr_expect_eq(dec(rs, "POST", "/a", "198.51.100.1", NULL), AK_GUARD_IP_DENIED);
  ak_routes_free(rs);
}

Test(routes_guard, tenants_of_routes, .init = reset) {
  const char *cases[][2] = {
    {"{\"id\":\"a\",\"path\":\"/webhooks/acme/github\"}", "acme"},
    {"{\"id\":\"a\",\"path\":\"/webhooks/acme/*\"}", "acme"},
    {"{\"id\":\"a\",\"path\":\"/webhooks/:t/github\"}", NULL},
    {"{\"id\":\"a\",\"path\":\"/webhooks/github\"}", NULL},
    {"{\"id\":\"a\",\"path\":\"/in\",\"tenant\":\"beta\"}", "beta"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    json_t *j = json_loads(cases[i][0], 0, NULL);
    char err[200];
    ak_rroute_t *r = ak_rroute_from_json(j, NULL, err, sizeof err);
    json_decref(j);
    cr_assert_not_null(r, "%s", err);
    if (cases[i][1]) cr_expect_str_eq(r->tenant, cases[i][1]);
    else cr_expect_null(r->tenant, "%s", cases[i][0]);
    ak_rroute_unref(r);
  }
  json_t *j = json_loads("{\"id\":\"a\",\"path\":\"/webhooks/acme/x\",\"tenant\":\"beta\"}", 0, NULL);
  char err[200];
  cr_expect_null(ak_rroute_from_json(j, NULL, err, sizeof err));
  cr_expect_str_eq(err, "tenant: \"beta\" contradicts the path's tenant");
  json_decref(j);
}

Test(routes_guard, seeds_created_when_absent_never_over_a_stored_route, .init = reset) {
  ak_routes_t *rs = mk("[{\"id\":\"s\",\"path\":\"/seeded\"}]", NULL);
  cr_expect_eq(MEM.applied, 1);
  cr_expect_eq(chg(rs, AK_RCH_PATCH, "s", "{\"path\":\"/edited\"}", NULL), AK_ROUTES_OK);
  ak_routes_free(rs);
  rs = mk("[{\"id\":\"s\",\"path\":\"/seeded\"},{\"id\":\"t\",\"path\":\"/t\"}]", NULL); /* a restart */
  cr_expect_eq(dec(rs, "POST", "/edited", "198.51.100.1", NULL), AK_GUARD_ALLOW);
  cr_expect_eq(dec(rs, "POST", "/seeded", "198.51.100.1", NULL), AK_GUARD_ROUTE_NOT_FOUND);
  cr_expect_eq(dec(rs, "POST", "/t", "198.51.100.1", NULL), AK_GUARD_ALLOW); /* a new seed is created */
  ak_routes_free(rs);
}

Test(routes_guard, stored_ip_rules_beat_the_config, .init = reset) {
  ak_routes_t *rs = mk("[{\"id\":\"a\",\"path\":\"/a\"}]", "{\"default\":\"allow\",\"rules\":[]}");
  cr_expect_eq(chg(rs, AK_RCH_IP_RULES, NULL, "{\"default\":\"deny\",\"rules\":[{\"action\":\"allow\",\"cidr\":\"10.0.0.0/8\"}]}",
                   NULL), AK_ROUTES_OK);
  ak_routes_free(rs);
  rs = mk("[{\"id\":\"a\",\"path\":\"/a\"}]", "{\"default\":\"allow\",\"rules\":[]}");
  cr_expect_eq(dec(rs, "POST", "/a", "198.51.100.1", NULL), AK_GUARD_IP_DENIED);
  cr_expect_eq(dec(rs, "POST", "/a", "10.1.1.1", NULL), AK_GUARD_ALLOW);
  ak_routes_free(rs);
}

/* ------------------------------------------------------- the 4003 table ---- */

Test(routes_api_table, every_endpoint_names_its_scope) {
  struct {
    const char *method, *url;
    ak_scope_t scope;
    bool node;
    const char *id;
  } want[] = {
    {"GET", "/health", AK_SCOPE_OPEN, false, ""},
    {"GET", "/admin/routes", AK_SCOPE_ROUTES_READ, false, ""},
    {"POST", "/admin/routes", AK_SCOPE_ROUTES_WRITE, false, ""},
    {"POST", "/admin/routes/test", AK_SCOPE_ROUTES_READ, true, ""},
    {"GET", "/admin/routes/test", AK_SCOPE_ROUTES_READ, false, "test"}, /* a route named test */
    {"GET", "/admin/routes/r.1", AK_SCOPE_ROUTES_READ, false, "r.1"},
    {"PUT", "/admin/routes/r1", AK_SCOPE_ROUTES_WRITE, false, "r1"},
    {"PATCH", "/admin/routes/r1", AK_SCOPE_ROUTES_WRITE, false, "r1"},
    {"DELETE", "/admin/routes/r1", AK_SCOPE_ROUTES_WRITE, false, "r1"},
    {"GET", "/admin/ip-rules", AK_SCOPE_ROUTES_READ, true, ""},
    {"PUT", "/admin/ip-rules", AK_SCOPE_ROUTES_WRITE, true, ""},
  };
  size_t n;
  const ak_admin_route_t *t = ak_admin_routes_api(&n);
  cr_expect_eq(n, sizeof want / sizeof *want - 1, "a new row needs its expectation here");
  for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
    ak_admin_path_t path;
    bool known;
    const ak_admin_route_t *r = ak_admin_route_match_in(t, n, want[i].method, want[i].url, &path, &known);
    cr_assert_not_null(r, "%s %s", want[i].method, want[i].url);
    cr_expect_eq(r->scope, want[i].scope, "%s %s", want[i].method, want[i].url);
    cr_expect_eq(!!(r->flags & AK_ROUTE_NODE), want[i].node, "%s %s", want[i].method, want[i].url);
    cr_expect_str_eq(path.id, want[i].id);
  }
  ak_admin_path_t path;
  bool known;
  cr_expect_null(ak_admin_route_match_in(t, n, "GET", "/v1/audit", &path, &known), "the 4002 table is not served");
  cr_expect_null(ak_admin_route_match_in(t, n, "POST", "/admin/ip-rules", &path, &known));
  cr_expect(known);
}
