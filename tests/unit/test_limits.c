/* Unit tests of the limits: GCRA arithmetic (burst, refill, honest retry, cost capped at
 * the burst, refund), the bounded address/tenant table (all-or-nothing lanes, eviction
 * prefers idle entries, memory never grows), addresses and CIDRs, the client address
 * behind trusted proxies, the rate-limit entry schema, tenant quota precedence and the
 * writer's tenant share. Time is passed in, never read. */
#include <criterion/criterion.h>
#include <string.h>
#include "core/config.h"
#include "core/gcra.h"
#include "core/netaddr.h"
#include "core/ratelimit.h"
#include "core/ratetable.h"
#include "edge/admission.h"
#include "edge/quota.h"
#include "queue/tenantshare.h"
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

#define MS 1000000LL
#define S 1000000000LL

/* ------------------------------------------------------------------------ GCRA ---- */

/* Take one unit at now; returns the retry wait (0 when it passed). */
static int64_t take(const ak_gcra_t *g, double *tat, double cost, int64_t now) {
  double nt;
  int64_t retry = -1;
  if (ak_gcra_check(g, *tat, cost, now, &nt, &retry)) {
    *tat = nt;
    cr_assert_eq(retry, 0);
    return 0;
  }
  cr_assert_gt(retry, 0, "a refusal names a positive wait");
  return retry;
}

Test(gcra, burst_then_rate_and_honest_retry) {
  ak_gcra_t g;
  ak_gcra_init(&g, 2.0, 3); /* 2/s, 3 at once */
  double tat = 0;
  int64_t t0 = 100 * S;
  for (int i = 0; i < 3; i++) cr_assert_eq(take(&g, &tat, 1, t0), 0, "unit %d of the burst", i);
  int64_t w = take(&g, &tat, 1, t0);
  cr_expect_eq(w, 500 * MS, "next unit at 2/s is 500 ms away, got %lld", (long long)w);
  cr_expect_eq(take(&g, &tat, 1, t0 + w - 1), 1, "1 ns early is still refused");
  cr_expect_eq(take(&g, &tat, 1, t0 + w), 0, "exactly after the wait it passes");
  cr_expect_gt(take(&g, &tat, 1, t0 + w), 0);
  /* a long pause refills to the burst, never beyond */
  int64_t later = t0 + 3600 * S;
  for (int i = 0; i < 3; i++) cr_assert_eq(take(&g, &tat, 1, later), 0);
  cr_expect_gt(take(&g, &tat, 1, later), 0);
  cr_expect_eq(ak_gcra_retry_after_s(1), 1, "Retry-After rounds up");
  cr_expect_eq(ak_gcra_retry_after_s(1000 * MS), 1);
  cr_expect_eq(ak_gcra_retry_after_s(1000 * MS + 1), 2);
  cr_expect_eq(ak_gcra_retry_after_s(0), 1, "never below 1");
}

Test(gcra, fractional_rate) {
  ak_gcra_t g;
  ak_gcra_init(&g, 0.25, 1); /* one every 4 s */
  double tat = 0;
  cr_assert_eq(take(&g, &tat, 1, 10 * S), 0);
  int64_t w = take(&g, &tat, 1, 10 * S);
  cr_expect_eq(w, 4 * S);
  cr_expect_eq(ak_gcra_retry_after_s(w), 4);
  cr_expect_eq(take(&g, &tat, 1, 14 * S), 0);
}

Test(gcra, cost_above_burst_needs_a_full_bucket_and_empties_it) {
  ak_gcra_t g;
  ak_gcra_init(&g, 1000, 500); /* bytes: 1000/s, 500 at once */
  double tat = 0;
  int64_t t0 = 10 * S;
  cr_assert_eq(take(&g, &tat, 5000, t0), 0, "a full bucket admits an oversized body");
  int64_t w = take(&g, &tat, 1, t0);
  cr_expect_eq(w, 1 * MS, "the bucket is empty after it (one byte: 1 ms)");
  w = take(&g, &tat, 5000, t0);
  cr_expect_eq(w, 500 * MS, "the next oversized body waits for a full bucket (500 ms)");
  cr_expect_eq(take(&g, &tat, 5000, t0 + w), 0);
}

Test(gcra, refund_gives_the_units_back) {
  ak_gcra_t g;
  ak_gcra_init(&g, 1, 2);
  double tat = 0;
  int64_t t0 = 10 * S;
  cr_assert_eq(take(&g, &tat, 1, t0), 0);
  cr_assert_eq(take(&g, &tat, 1, t0), 0);
  cr_assert_gt(take(&g, &tat, 1, t0), 0);
  tat = ak_gcra_refund(&g, tat, 1);
  cr_expect_eq(take(&g, &tat, 1, t0), 0, "the refunded unit is usable at once");
}

/* ------------------------------------------------------------------ ratetable ---- */

static void key_of(uint8_t k[16], uint32_t n) {
  memset(k, 0, 16);
  memcpy(k, &n, sizeof n);
}

static bool take1(ak_ratetable_t *t, uint32_t n, const ak_gcra_t *g, int64_t now, int64_t *retry) {
  uint8_t k[16];
  key_of(k, n);
  const ak_gcra_t *p[1] = {g};
  double cost[1] = {1};
  return ak_ratetable_take(t, k, p, cost, 1, now, retry);
}

Test(ratetable, keys_have_their_own_buckets) {
  ak_ratetable_t *t = ak_ratetable_new(1024, 42);
  ak_gcra_t g;
  ak_gcra_init(&g, 1, 2);
  int64_t now = 50 * S, r = 0;
  cr_assert(take1(t, 1, &g, now, &r));
  cr_assert(take1(t, 1, &g, now, &r));
  cr_assert_not(take1(t, 1, &g, now, &r));
  cr_expect_eq(r, 1 * S);
  cr_assert(take1(t, 2, &g, now, &r), "another key is unaffected");
  cr_expect_eq(ak_ratetable_live(t, now), 2);
  cr_expect_eq(ak_ratetable_live(t, now + 10 * S), 0, "full buckets carry no state");
  ak_ratetable_free(t);
}

Test(ratetable, lanes_are_all_or_nothing) {
  ak_ratetable_t *t = ak_ratetable_new(64, 7);
  ak_gcra_t hooks, bytes;
  ak_gcra_init(&hooks, 10, 10);
  ak_gcra_init(&bytes, 100, 100);
  const ak_gcra_t *p[2] = {&hooks, &bytes};
  uint8_t k[16];
  key_of(k, 9);
  int64_t now = 5 * S, r = 0;
  double big[2] = {1, 100};
  cr_assert(ak_ratetable_take(t, k, p, big, 2, now, &r), "both lanes have room");
  double small[2] = {1, 1};
  cr_assert_not(ak_ratetable_take(t, k, p, small, 2, now, &r), "the byte lane is empty");
  cr_expect_eq(r, 10 * MS, "one byte at 100/s: 10 ms");
  /* the refused take charged no hook: nine more hooks of 0 bytes pass */
  double none[2] = {1, 0};
  for (int i = 0; i < 9; i++) cr_assert(ak_ratetable_take(t, k, p, none, 2, now, &r), "hook %d", i);
  cr_assert_not(ak_ratetable_take(t, k, p, none, 2, now, &r), "the hook lane is empty now");
  /* refund one hook and it passes again; reset forgets the key */
  ak_ratetable_refund(t, k, p, none, 2);
  cr_assert(ak_ratetable_take(t, k, p, none, 2, now, &r));
  ak_ratetable_reset(t, k);
  cr_assert(ak_ratetable_take(t, k, p, big, 2, now, &r), "a reset key starts full");
  ak_ratetable_free(t);
}

Test(ratetable, flood_of_keys_is_bounded_and_evicts_idle_first) {
  ak_ratetable_t *t = ak_ratetable_new(AK_RATETABLE_WAYS, 1); /* one set of 8 ways */
  cr_assert_eq(ak_ratetable_capacity(t), AK_RATETABLE_WAYS);
  ak_gcra_t g;
  ak_gcra_init(&g, 1, 1); /* one request empties a key's bucket for 1 s */
  int64_t now = 100 * S, r;
  for (uint32_t i = 0; i < AK_RATETABLE_WAYS; i++) cr_assert(take1(t, i, &g, now, &r));
  cr_expect_eq(ak_ratetable_evictions(t), 0);
  /* 10 000 more addresses: the table never holds more than its slots */
  for (uint32_t i = 1000; i < 11000; i++) cr_assert(take1(t, i, &g, now, &r));
  cr_expect_eq(ak_ratetable_live(t, now), AK_RATETABLE_WAYS);
  cr_expect_eq(ak_ratetable_evictions(t), 10000, "every new key evicted one in debt");
  /* once buckets are full again, new keys replace idle entries: no eviction counted */
  uint64_t ev = ak_ratetable_evictions(t);
  for (uint32_t i = 20000; i < 20008; i++) cr_assert(take1(t, i, &g, now + 5 * S, &r));
  cr_expect_eq(ak_ratetable_evictions(t), ev);
  /* and a key still in the table keeps its state */
  cr_assert_not(take1(t, 20003, &g, now + 5 * S, &r));
  ak_ratetable_free(t);
}

Test(ratetable, eviction_picks_the_entry_least_in_debt) {
  ak_ratetable_t *t = ak_ratetable_new(AK_RATETABLE_WAYS, 3);
  ak_gcra_t g;
  ak_gcra_init(&g, 1, 100);
  int64_t now = 100 * S, r;
  /* key 0 takes 50 units (deep in debt); keys 1..7 take one each */
  for (int i = 0; i < 50; i++) cr_assert(take1(t, 0, &g, now, &r));
  for (uint32_t i = 1; i < AK_RATETABLE_WAYS; i++) cr_assert(take1(t, i, &g, now, &r));
  for (uint32_t i = 100; i < 150; i++) cr_assert(take1(t, i, &g, now, &r));
  /* key 0 survived the churn: 50 more pass, the 51st does not */
  for (int i = 0; i < 50; i++) cr_assert(take1(t, 0, &g, now, &r), "unit %d", i);
  cr_assert_not(take1(t, 0, &g, now, &r));
  ak_ratetable_free(t);
}

Test(ratetable, string_keys_differ) {
  ak_ratetable_t *t = ak_ratetable_new(64, 5);
  uint8_t a[16], b[16], a2[16];
  ak_ratetable_key(t, "acme", 4, a);
  ak_ratetable_key(t, "acmf", 4, b);
  ak_ratetable_key(t, "acme", 4, a2);
  cr_expect_neq(memcmp(a, b, 16), 0);
  cr_expect_eq(memcmp(a, a2, 16), 0);
  ak_ratetable_free(t);
}

/* -------------------------------------------------------------------- netaddr ---- */

static ak_netaddr_t addr(const char *s) {
  ak_netaddr_t a;
  cr_assert(ak_netaddr_parse(s, strlen(s), &a), "%s", s);
  return a;
}

static ak_cidr_t cidr(const char *s) {
  ak_cidr_t c;
  const char *why = NULL;
  cr_assert(ak_netaddr_parse_cidr(s, &c, &why), "%s: %s", s, why ? why : "");
  return c;
}

Test(netaddr, cidrs_and_membership) {
  ak_cidr_t c = cidr("10.0.0.0/8"), one = cidr("127.0.0.1"), v6 = cidr("2001:db8::/32"), all = cidr("0.0.0.0/0");
  ak_netaddr_t a = addr("10.1.2.3"), b = addr("11.0.0.1"), l = addr("127.0.0.1"), d = addr("2001:db8:1::5");
  cr_expect(ak_netaddr_in(&c, &a));
  cr_expect_not(ak_netaddr_in(&c, &b));
  cr_expect(ak_netaddr_in(&one, &l));
  cr_expect_not(ak_netaddr_in(&one, &a));
  cr_expect(ak_netaddr_in(&v6, &d));
  cr_expect_not(ak_netaddr_in(&v6, &a), "an IPv4 address is not in an IPv6 range");
  cr_expect(ak_netaddr_in(&all, &b));
  cr_expect_not(ak_netaddr_in(&all, &d), "0.0.0.0/0 is every IPv4 address, no IPv6 one");
  ak_cidr_t bad;
  const char *why = NULL;
  cr_expect_not(ak_netaddr_parse_cidr("10.0.0.1/8", &bad, &why));
  cr_expect_str_eq(why, "has host bits set beyond its prefix");
  cr_expect_not(ak_netaddr_parse_cidr("1.2.3.4/33", &bad, &why));
  cr_expect_not(ak_netaddr_parse_cidr("example.com", &bad, &why));
  cr_expect_not(ak_netaddr_parse_cidr("", &bad, &why));
  cr_expect_not(ak_netaddr_parse_cidr("::/129", &bad, &why));
}

static ak_netaddr_t client_of(const char *peer, const ak_cidr_t *proxies, size_t np, const char *xff1,
                              const char *xff2) {
  ak_netaddr_t p = addr(peer), out;
  const char *v[2] = {xff1, xff2};
  size_t len[2] = {xff1 ? strlen(xff1) : 0, xff2 ? strlen(xff2) : 0};
  ak_netaddr_client(&p, proxies, np, v, len, xff2 ? 2 : xff1 ? 1 : 0, &out);
  return out;
}

static void expect_addr(ak_netaddr_t got, const char *want) {
  ak_netaddr_t w = addr(want);
  cr_expect_eq(memcmp(got.a, w.a, 16), 0, "expected %s", want);
}

Test(netaddr, client_behind_trusted_proxies) {
  ak_cidr_t px[2] = {cidr("127.0.0.1"), cidr("10.0.0.0/8")};
  /* the peer is not a proxy: its X-Forwarded-For is the client's own claim, ignored */
  expect_addr(client_of("198.51.100.1", px, 2, "203.0.113.9", NULL), "198.51.100.1");
  /* one trusted proxy: the entry it appended */
  expect_addr(client_of("127.0.0.1", px, 2, "203.0.113.9", NULL), "203.0.113.9");
  /* a client's forged entries left of what the proxy appended do not count */
  expect_addr(client_of("127.0.0.1", px, 2, "1.1.1.1, 203.0.113.9", NULL), "203.0.113.9");
  /* a chain of trusted proxies is walked past */
  expect_addr(client_of("127.0.0.1", px, 2, "1.1.1.1, 203.0.113.9, 10.2.3.4", NULL), "203.0.113.9");
  /* several headers are one list, in order */
  expect_addr(client_of("127.0.0.1", px, 2, "1.1.1.1", "203.0.113.9, 10.0.0.7"), "203.0.113.9");
  /* no header: the peer */
  expect_addr(client_of("127.0.0.1", px, 2, NULL, NULL), "127.0.0.1");
  /* garbage stops the walk at the last address that could be vouched for */
  expect_addr(client_of("127.0.0.1", px, 2, "203.0.113.9, nonsense", NULL), "127.0.0.1");
  expect_addr(client_of("127.0.0.1", px, 2, "nonsense, 203.0.113.9", NULL), "203.0.113.9");
  /* ports and brackets, empty entries */
  expect_addr(client_of("127.0.0.1", px, 2, "203.0.113.9:4711", NULL), "203.0.113.9");
  expect_addr(client_of("127.0.0.1", px, 2, "[2001:db8::7]:443", NULL), "2001:db8::7");
  expect_addr(client_of("127.0.0.1", px, 2, "203.0.113.9,, ", NULL), "203.0.113.9");
  /* no proxies configured: always the peer */
  expect_addr(client_of("127.0.0.1", NULL, 0, "203.0.113.9", NULL), "127.0.0.1");
}

Test(netaddr, limit_key_groups_ipv6_by_64) {
  uint8_t k1[16], k2[16], k3[16], k4[16];
  ak_netaddr_t a = addr("2001:db8:1:2::1"), b = addr("2001:db8:1:2:ffff::9"), c = addr("2001:db8:1:3::1");
  ak_netaddr_limit_key(&a, k1);
  ak_netaddr_limit_key(&b, k2);
  ak_netaddr_limit_key(&c, k3);
  cr_expect_eq(memcmp(k1, k2, 16), 0, "one /64, one bucket");
  cr_expect_neq(memcmp(k1, k3, 16), 0);
  ak_netaddr_t d = addr("192.0.2.1"), e = addr("192.0.2.2");
  ak_netaddr_limit_key(&d, k3);
  ak_netaddr_limit_key(&e, k4);
  cr_expect_neq(memcmp(k3, k4, 16), 0, "IPv4 addresses are counted one by one");
}

/* ------------------------------------------------------------------ ratelimit ---- */

static void parse_fails(const char *json, const char *field, const char *msg) {
  json_t *j = json_loads(json, 0, NULL);
  cr_assert_not_null(j, "%s", json);
  ak_ratelimit_t l;
  char f[64], m[96];
  cr_expect_eq(ak_ratelimit_parse(j, &l, f, sizeof f, m, sizeof m), -1, "%s", json);
  cr_expect_str_eq(f, field, "%s", json);
  cr_expect_str_eq(m, msg, "%s", json);
  json_decref(j);
}

Test(ratelimit, entries_parse_and_round_trip) {
  json_t *j = json_loads("{\"rate\": 0.5, \"burst\": 3}", 0, NULL);
  ak_ratelimit_t l;
  cr_assert_eq(ak_ratelimit_parse(j, &l, NULL, 0, NULL, 0), 0, "an Ankusa entry parses");
  cr_expect_eq(l.hooks.rate, 0.5);
  cr_expect_eq(l.hooks.burst, 3);
  cr_expect_eq(l.bytes.rate, 0);
  json_decref(j);
  j = json_loads("{\"rate\": 2, \"burst\": 3, \"bytes\": {\"rate\": 1000, \"burst\": 4000}, \"max_body_bytes\": 99}",
                 0, NULL);
  cr_assert_eq(ak_ratelimit_parse(j, &l, NULL, 0, NULL, 0), 0);
  json_t *back = ak_ratelimit_json(&l);
  cr_expect(json_equal(j, back), "the JSON form reads back the same");
  json_decref(back);
  json_decref(j);
  j = json_loads("{\"bytes\": {\"rate\": 10, \"burst\": 10}}", 0, NULL);
  cr_assert_eq(ak_ratelimit_parse(j, &l, NULL, 0, NULL, 0), 0, "bytes alone is a limit");
  cr_expect_eq(l.hooks.rate, 0);
  json_decref(j);
  j = json_loads("{\"max_body_bytes\": 10, \"rate\": null, \"burst\": null}", 0, NULL);
  cr_assert_eq(ak_ratelimit_parse(j, &l, NULL, 0, NULL, 0), 0, "null is absent");
  json_decref(j);
  parse_fails("{}", "rate", "missing required key");
  parse_fails("{\"rate\": 1}", "burst", "missing required key");
  parse_fails("{\"burst\": 1, \"max_body_bytes\": 5}", "rate", "missing required key");
  parse_fails("{\"rate\": 0, \"burst\": 1}", "rate", "must be a number > 0");
  parse_fails("{\"rate\": \"5\", \"burst\": 1}", "rate", "must be a number > 0");
  parse_fails("{\"rate\": 5, \"burst\": 1.5}", "burst", "must be an integer >= 1");
  parse_fails("{\"rate\": 5, \"burst\": 0}", "burst", "must be an integer >= 1");
  parse_fails("{\"rate\": 5, \"burst\": 1, \"scope\": \"fleet\"}", "scope", "unknown key");
  parse_fails("{\"bytes\": {\"rate\": 5}}", "bytes.burst", "missing required key");
  parse_fails("{\"bytes\": {\"rate\": 5, \"burst\": 5, \"x\": 1}}", "bytes.x", "unknown key");
  parse_fails("{\"bytes\": 5}", "bytes", "must be a mapping {rate, burst}");
  parse_fails("{\"max_body_bytes\": 0}", "max_body_bytes", "must be an integer >= 1");
  parse_fails("[1]", "", "must be a mapping {rate, burst}");
}

/* ---------------------------------------------------------------------- quota ---- */

Test(quota, precedence_override_then_tenant_then_default) {
  json_t *rl = json_loads("{\"default\": {\"rate\": 1, \"burst\": 1},"
                          " \"tenants\": {\"acme\": {\"rate\": 2, \"burst\": 5, \"max_body_bytes\": 100},"
                          "               \"big\": {\"bytes\": {\"rate\": 10, \"burst\": 10}}}}",
                          0, NULL);
  ak_quota_t *q = ak_quota_new_raw(rl);
  json_decref(rl);
  ak_ratelimit_t l;
  cr_expect_eq(ak_quota_lookup(q, "acme", 4, &l), AK_QUOTA_CONFIG);
  cr_expect_eq(l.hooks.burst, 5);
  cr_expect_eq(ak_quota_lookup(q, "other", 5, &l), AK_QUOTA_DEFAULT);
  cr_expect_eq(ak_quota_max_body(q, "acme", 4), 100);
  cr_expect_eq(ak_quota_max_body(q, "other", 5), 0);
  int64_t now = 10 * S, r = 0;
  for (int i = 0; i < 5; i++) cr_assert(ak_quota_take(q, "acme", 4, 10, now, &r));
  cr_assert_not(ak_quota_take(q, "acme", 4, 10, now, &r));
  cr_expect_eq(r, 500 * MS);
  cr_assert(ak_quota_take(q, "other", 5, 10, now, &r), "tenants do not share a bucket");
  cr_assert_not(ak_quota_take(q, "other", 5, 10, now, &r));
  /* bytes only: hooks are free, bytes are not */
  cr_assert(ak_quota_take(q, "big", 3, 10, now, &r));
  cr_assert_not(ak_quota_take(q, "big", 3, 1, now, &r));
  cr_assert(ak_quota_take(q, "big", 3, 0, now, &r));
  /* an override wins and starts full; removing it restores the file's entry */
  ak_ratelimit_t o = {.hooks = {100, 100}};
  cr_assert_eq(ak_quota_put(q, "acme", &o, NULL), 0);
  cr_expect_eq(ak_quota_lookup(q, "acme", 4, &l), AK_QUOTA_OVERRIDE);
  cr_expect_eq(ak_quota_max_body(q, "acme", 4), 0, "the override is the whole entry");
  for (int i = 0; i < 100; i++) cr_assert(ak_quota_take(q, "acme", 4, 10, now, &r), "%d", i);
  cr_assert_not(ak_quota_take(q, "acme", 4, 10, now, &r));
  ak_quota_refund(q, "acme", 4, 10);
  cr_assert(ak_quota_take(q, "acme", 4, 10, now, &r), "a refunded hook is usable again");
  json_t *list = ak_quota_list_json(q);
  char *text = json_dumps(list, JSON_COMPACT | JSON_PRESERVE_ORDER);
  cr_expect_str_eq(text, "{\"default\":{\"rate\":1,\"burst\":1},\"tenants\":["
                         "{\"tenant\":\"acme\",\"rate\":100,\"burst\":100,\"source\":\"override\"},"
                         "{\"tenant\":\"big\",\"rate\":null,\"burst\":null,\"bytes\":{\"rate\":10,\"burst\":10},"
                         "\"source\":\"config\"}]}");
  free(text);
  json_decref(list);
  cr_expect_eq(ak_quota_delete(q, "acme", NULL), 0);
  cr_expect_eq(ak_quota_delete(q, "acme", NULL), 1, "nothing left to delete");
  cr_expect_eq(ak_quota_lookup(q, "acme", 4, &l), AK_QUOTA_CONFIG);
  ak_quota_free(q);
}

Test(quota, no_limits_is_unlimited) {
  ak_quota_t *q = ak_quota_new_raw(NULL);
  ak_ratelimit_t l;
  cr_expect_eq(ak_quota_lookup(q, "x", 1, &l), AK_QUOTA_NONE);
  for (int i = 0; i < 1000; i++) cr_assert(ak_quota_take(q, "x", 1, 1 << 20, 10 * S, NULL));
  json_t *v = ak_quota_tenant_json(q, "x");
  char *text = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER);
  cr_expect_str_eq(text, "{\"tenant\":\"x\",\"rate\":null,\"burst\":null,\"source\":\"none\"}");
  free(text);
  json_decref(v);
  ak_quota_free(q);
}

/* ------------------------------------------------------------------ admission ---- */

static ak_config_t *load(const char *yaml) {
  static const char *const noenv[] = {NULL};
  ak_config_t *cfg = NULL;
  char *err = NULL;
  cr_assert_eq(ak_config_load_string(ak_modules(), yaml, strlen(yaml), noenv, &cfg, &err), 0, "%s", err ? err : "");
  return cfg;
}

Test(admission, per_address_then_node_then_source_bytes) {
  ak_config_t *cfg = load("admission:\n"
                          "  per_ip: {rate: 1, burst: 2}\n"
                          "  node: {rate: 1, burst: 3}\n"
                          "  source_bytes: {rate: 100, burst: 100}\n"
                          "sources:\n"
                          "  a: {sinks: [{type: log}]}\n"
                          "  b: {sinks: [{type: log}], admission_bytes: {rate: 1000, burst: 1000}}\n");
  ak_admission_t *a = ak_admission_new(cfg);
  cr_assert(ak_admission_enabled(a));
  const json_t *specs = json_object_get(cfg->effective, "sources");
  ak_admission_source_t *sa = ak_admission_source_new(a, json_object_get(specs, "a"));
  ak_admission_source_t *sb = ak_admission_source_new(a, json_object_get(specs, "b"));
  cr_assert(sa && sb);
  ak_netaddr_t x = addr("192.0.2.1"), y = addr("192.0.2.2"), z = addr("192.0.2.3");
  int64_t now = 10 * S, r = 0;
  cr_expect_eq(ak_admission_check_addr(a, &x, sa, 10, now, &r), AK_ADMIT_OK);
  cr_expect_eq(ak_admission_check_addr(a, &x, sa, 10, now, &r), AK_ADMIT_OK);
  cr_expect_eq(ak_admission_check_addr(a, &x, sa, 10, now, &r), AK_ADMIT_IP);
  cr_expect_eq(r, 1 * S);
  cr_expect_eq(ak_admission_check_addr(a, &y, sa, 10, now, &r), AK_ADMIT_OK, "another address");
  cr_expect_eq(ak_admission_check_addr(a, &z, sa, 10, now, &r), AK_ADMIT_NODE, "the node's burst of 3 is spent");
  /* source bytes by Content-Length: a's 100-byte burst; b has its own 1000 */
  cr_expect_eq(ak_admission_check_addr(a, &z, sa, 60, now + 2 * S, &r), AK_ADMIT_OK);
  cr_expect_eq(ak_admission_check_addr(a, &z, sa, 60, now + 2 * S, &r), AK_ADMIT_SOURCE);
  cr_expect_eq(r, 200 * MS);
  cr_expect(ak_admission_meters_source(sb));
  cr_expect(ak_admission_charge_body(sb, 900, now + 2 * S, &r));
  cr_expect_not(ak_admission_charge_body(sb, 200, now + 2 * S, &r));
  cr_expect_eq(r, 100 * MS);
  ak_admission_source_free(sa);
  ak_admission_source_free(sb);
  ak_admission_free(a);
  ak_config_free(cfg);
}

Test(admission, off_by_default) {
  ak_config_t *cfg = load("sources:\n  a: {sinks: [{type: log}]}\n");
  ak_admission_t *a = ak_admission_new(cfg);
  cr_expect_not(ak_admission_enabled(a));
  cr_expect_null(ak_admission_source_new(a, json_object_get(json_object_get(cfg->effective, "sources"), "a")),
                 "no bucket for a source whose bytes are not limited");
  cr_expect_not(ak_admission_meters_source(NULL));
  cr_expect_eq(ak_admission_table_slots(a), 0, "no address table without per_ip");
  ak_admission_free(a);
  ak_config_free(cfg);
}

/* ---------------------------------------------------------------- tenantshare ---- */

Test(tenantshare, each_tenant_bounded_and_released) {
  ak_tenantshare_t *ts = ak_tenantshare_new(3, 1000);
  for (int i = 0; i < 3; i++) cr_assert(ak_tenantshare_admit(ts, "a", 1, 10));
  cr_assert_not(ak_tenantshare_admit(ts, "a", 1, 10), "a's fourth record");
  cr_assert(ak_tenantshare_admit(ts, "b", 1, 10), "b is not held back by a");
  cr_expect_eq(ak_tenantshare_tenants(ts), 2);
  ak_tenantshare_release(ts, "a", 1, 10);
  cr_assert(ak_tenantshare_admit(ts, "a", 1, 10), "released exactly one");
  /* bytes: b may hold 1000 */
  cr_assert_not(ak_tenantshare_admit(ts, "b", 1, 991));
  cr_assert(ak_tenantshare_admit(ts, "b", 1, 990));
  int64_t rec, bytes;
  ak_tenantshare_held(ts, "b", 1, &rec, &bytes);
  cr_expect_eq(rec, 2);
  cr_expect_eq(bytes, 1000);
  /* a tenant holding nothing always gets one record in, even over the byte share */
  cr_assert(ak_tenantshare_admit(ts, "c", 1, 5000));
  cr_assert_not(ak_tenantshare_admit(ts, "c", 1, 1));
  ak_tenantshare_release(ts, "c", 1, 5000);
  cr_expect_eq(ak_tenantshare_tenants(ts), 2, "an entry goes when its tenant holds nothing");
  for (int i = 0; i < 3; i++) ak_tenantshare_release(ts, "a", 1, 10);
  ak_tenantshare_release(ts, "b", 1, 10);
  ak_tenantshare_release(ts, "b", 1, 990);
  cr_expect_eq(ak_tenantshare_tenants(ts), 0);
  ak_tenantshare_free(ts);
}

/* Work-conserving: alone, a tenant holds past its share up to the node's bound less one
 * share (the reserve for a newcomer); with another tenant holding, each keeps to its share. */
Test(tenantshare, a_lone_tenant_uses_the_node_less_the_reserve) {
  ak_tenantshare_t *ts = ak_tenantshare_new_shared(4, 1000, 16, 100000);
  for (int i = 0; i < 12; i++) cr_assert(ak_tenantshare_admit(ts, "a", 1, 10), "a alone, record %d", i);
  cr_assert_not(ak_tenantshare_admit(ts, "a", 1, 10), "the last share stays free");
  for (int i = 0; i < 4; i++) cr_assert(ak_tenantshare_admit(ts, "b", 1, 10), "b gets its share at once");
  cr_assert_not(ak_tenantshare_admit(ts, "b", 1, 10), "b is not alone: its share");
  for (int i = 0; i < 12; i++) ak_tenantshare_release(ts, "a", 1, 10);
  cr_assert(ak_tenantshare_admit(ts, "a", 1, 10), "a within its share");
  cr_assert_not(ak_tenantshare_admit(ts, "b", 1, 10), "a holds records: b keeps to its share");
  ak_tenantshare_release(ts, "a", 1, 10);
  cr_assert(ak_tenantshare_admit(ts, "b", 1, 10), "b alone again goes past its share");
  for (int i = 0; i < 5; i++) ak_tenantshare_release(ts, "b", 1, 10);
  cr_expect_eq(ak_tenantshare_tenants(ts), 0);
  /* bytes: alone up to 100000 - 1000 */
  cr_assert(ak_tenantshare_admit(ts, "c", 1, 98000));
  cr_assert(ak_tenantshare_admit(ts, "c", 1, 1000));
  cr_assert_not(ak_tenantshare_admit(ts, "c", 1, 1), "the reserve's bytes stay free");
  ak_tenantshare_release(ts, "c", 1, 98000);
  ak_tenantshare_release(ts, "c", 1, 1000);
  ak_tenantshare_free(ts);
}

Test(tenantshare, many_tenants) {
  ak_tenantshare_t *ts = ak_tenantshare_new(1, 100);
  char name[16];
  for (int i = 0; i < 5000; i++) {
    int n = snprintf(name, sizeof name, "t%d", i);
    cr_assert(ak_tenantshare_admit(ts, name, (size_t)n, 1));
    cr_assert_not(ak_tenantshare_admit(ts, name, (size_t)n, 1));
  }
  cr_expect_eq(ak_tenantshare_tenants(ts), 5000);
  for (int i = 0; i < 5000; i++) {
    int n = snprintf(name, sizeof name, "t%d", i);
    ak_tenantshare_release(ts, name, (size_t)n, 1);
  }
  cr_expect_eq(ak_tenantshare_tenants(ts), 0);
  ak_tenantshare_free(ts);
}
