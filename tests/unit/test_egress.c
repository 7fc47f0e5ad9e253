/* Unit tests: the egress guard (address classes, v4 and v6, embedded forms, allow list,
 * CIDR parsing, URL schemes) and which sinks it guards (API sources', static ones on
 * opt-in). */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include "sinks/egress.h"

static bool allowed(const ak_egress_t *e, const char *addr) {
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  if (strchr(addr, ':')) {
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
    s6->sin6_family = AF_INET6;
    cr_assert_eq(inet_pton(AF_INET6, addr, &s6->sin6_addr), 1, "%s", addr);
  } else {
    struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
    s4->sin_family = AF_INET;
    cr_assert_eq(inet_pton(AF_INET, addr, &s4->sin_addr), 1, "%s", addr);
  }
  return ak_egress_addr_allowed(e, (struct sockaddr *)&ss);
}

static const char *refused_by_default[] = {
  /* v4 */
  "0.0.0.0", "0.1.2.3", "127.0.0.1", "127.255.255.254", "10.0.0.1", "10.255.255.255", "172.16.0.1",
  "172.31.255.255", "192.168.1.1", "169.254.169.254", "100.64.0.1", "100.127.255.255", "192.0.0.8",
  "192.0.2.1", "198.51.100.7", "203.0.113.9", "198.18.0.1", "198.19.255.255", "224.0.0.1",
  "239.255.255.250", "240.0.0.1", "255.255.255.255", "192.88.99.1",
  /* v6 */
  "::", "::1", "fe80::1", "febf::1", "fc00::1", "fd12:3456::1", "ff02::1", "ff0e::1", "2001:db8::1",
  "3fff::1", "100::1", "64:ff9b:1::1", "::2", "fec0::1", "2001::1",
  /* IPv4-mapped, NAT64 and 6to4 forms of refused v4 */
  "::ffff:127.0.0.1", "::ffff:10.1.2.3", "::ffff:169.254.169.254", "::ffff:192.168.0.1",
  "::ffff:100.64.0.1", "::ffff:0.0.0.0", "::ffff:224.0.0.1", "::ffff:255.255.255.255",
  "::ffff:203.0.113.1", "64:ff9b::127.0.0.1", "64:ff9b::a00:1", "2002:7f00:1::1", "2002:c0a8:101::",
};

static const char *public_addrs[] = {
  "1.1.1.1", "8.8.8.8", "93.184.216.34", "172.15.255.255", "172.32.0.0", "100.63.255.255",
  "100.128.0.0", "192.169.0.1", "169.253.255.255", "11.0.0.1", "223.255.255.255",
  "2606:4700:4700::1111", "2a00:1450:4001::200e", "2001:4860:4860::8888",
  "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1",
};

Test(egress, default_refuses_every_non_public_class) {
  char err[160];
  ak_egress_t *e = ak_egress_new(NULL, 0, false, err, sizeof err);
  cr_assert_not_null(e, "%s", err);
  for (size_t i = 0; i < sizeof refused_by_default / sizeof refused_by_default[0]; i++)
    cr_expect_not(allowed(e, refused_by_default[i]), "%s should be refused", refused_by_default[i]);
  for (size_t i = 0; i < sizeof public_addrs / sizeof public_addrs[0]; i++)
    cr_expect(allowed(e, public_addrs[i]), "%s should be allowed", public_addrs[i]);
  ak_egress_free(e);
}

Test(egress, allow_cidrs_open_ranges_in_both_forms) {
  const char *cidrs[] = {"127.0.0.0/8", "10.1.0.0/16", "fd00::/8", "::1", "192.168.5.5"};
  char err[160];
  ak_egress_t *e = ak_egress_new(cidrs, 5, false, err, sizeof err);
  cr_assert_not_null(e, "%s", err);
  cr_expect(allowed(e, "127.0.0.1"));
  cr_expect(allowed(e, "::ffff:127.0.0.1"), "a v4 allow covers the mapped form");
  cr_expect(allowed(e, "10.1.200.3"));
  cr_expect_not(allowed(e, "10.2.0.1"), "outside the allowed /16");
  cr_expect(allowed(e, "fd12::1"));
  cr_expect_not(allowed(e, "fc00::1"), "fc00::/8 is not in fd00::/8");
  cr_expect(allowed(e, "::1"), "bare v6 address = /128");
  cr_expect_not(allowed(e, "::2"));
  cr_expect(allowed(e, "192.168.5.5"), "bare v4 address = /32");
  cr_expect_not(allowed(e, "192.168.5.6"));
  cr_expect_not(allowed(e, "169.254.169.254"), "other classes stay refused");
  cr_expect(allowed(e, "8.8.8.8"), "public stays allowed");
  ak_egress_free(e);
}

Test(egress, zero_prefix_allows_everything_of_its_family) {
  const char *cidrs[] = {"0.0.0.0/0"};
  char err[160];
  ak_egress_t *e = ak_egress_new(cidrs, 1, true, err, sizeof err);
  cr_assert_not_null(e, "%s", err);
  cr_expect(allowed(e, "127.0.0.1"));
  cr_expect(allowed(e, "::ffff:10.0.0.1"));
  cr_expect_not(allowed(e, "::1"), "a v4 allow does not open v6 loopback");
  ak_egress_free(e);
}

Test(egress, cidr_errors_name_the_entry) {
  struct { const char *cidr; const char *want; } bad[] = {
    {"10.0.0.0/33", "prefix length over 32"},
    {"fd00::/129", "prefix length over 128"},
    {"10.0.0.1/8", "host bits set"},
    {"not-an-ip", "is not a CIDR"},
    {"10.0.0.0/", "bad prefix length"},
    {"10.0.0.0/x", "bad prefix length"},
    {"10.0.0.0/-1", "bad prefix length"},
    {"", "is empty"},
    {"localhost/32", "is not a CIDR"},
    {"fe80::1/10", "host bits set"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const char *cidrs[] = {"127.0.0.0/8", bad[i].cidr};
    char err[160] = "";
    ak_egress_t *e = ak_egress_new(cidrs, 2, false, err, sizeof err);
    cr_expect_null(e, "%s accepted", bad[i].cidr);
    ak_egress_free(e);
    cr_expect(strstr(err, "egress.allow_cidrs[1]") != NULL, "%s", err);
    cr_expect(strstr(err, bad[i].want) != NULL, "%s: %s", bad[i].cidr, err);
    if (*bad[i].cidr) cr_expect(strstr(err, bad[i].cidr) != NULL, "names the value: %s", err);
  }
}

Test(egress, url_schemes) {
  char err[160], reason[128];
  ak_egress_t *strict = ak_egress_new(NULL, 0, false, err, sizeof err);
  ak_egress_t *lax = ak_egress_new(NULL, 0, true, err, sizeof err);
  cr_assert(strict && lax);
  cr_expect(ak_egress_url_allowed(strict, "https://example.com/x", reason, sizeof reason));
  cr_expect(ak_egress_url_allowed(strict, "HTTPS://example.com/x", reason, sizeof reason));
  cr_expect_not(ak_egress_url_allowed(strict, "http://example.com/x", reason, sizeof reason));
  cr_expect(strstr(reason, "allow_http") != NULL, "%s", reason);
  cr_expect(ak_egress_url_allowed(lax, "http://example.com/x", reason, sizeof reason));
  cr_expect_not(ak_egress_url_allowed(lax, "ftp://example.com/x", reason, sizeof reason));
  cr_expect_not(ak_egress_url_allowed(lax, "file:///etc/passwd", reason, sizeof reason));
  cr_expect_not(ak_egress_url_allowed(lax, "gopher://x", reason, sizeof reason));
  cr_expect_not(ak_egress_url_allowed(lax, NULL, reason, sizeof reason));
  ak_egress_free(strict);
  ak_egress_free(lax);
}

Test(egress, refusal_reason_names_the_address) {
  struct sockaddr_in s4 = {.sin_family = AF_INET};
  inet_pton(AF_INET, "127.0.0.1", &s4.sin_addr);
  char reason[128];
  ak_egress_refusal((struct sockaddr *)&s4, reason, sizeof reason);
  cr_expect_str_eq(reason, "egress: 127.0.0.1 is not a public address");
  struct sockaddr_in6 s6 = {.sin6_family = AF_INET6};
  inet_pton(AF_INET6, "::1", &s6.sin6_addr);
  ak_egress_refusal((struct sockaddr *)&s6, reason, sizeof reason);
  cr_expect_str_eq(reason, "egress: ::1 is not a public address");
}

Test(egress, other_families_refused) {
  char err[160];
  ak_egress_t *e = ak_egress_new(NULL, 0, true, err, sizeof err);
  struct sockaddr sa = {.sa_family = AF_UNIX};
  cr_expect_not(ak_egress_addr_allowed(e, &sa));
  cr_expect_not(ak_egress_addr_allowed(e, NULL));
  ak_egress_free(e);
}

/* Which sinks are guarded: an API-managed source's always, the config file's only with
 * egress.guard_static_sources (default false: the operator's sinks are trusted). */
Test(egress, api_sources_guarded_static_ones_only_on_opt_in) {
  ak_egress_cfg_t def = {0}, opt_in = {.guard_static_sources = true};
  cr_expect(ak_egress_guards(&def, true), "an API source is guarded by default");
  cr_expect_not(ak_egress_guards(&def, false), "a config-file source is trusted by default");
  cr_expect(ak_egress_guards(&opt_in, true));
  cr_expect(ak_egress_guards(&opt_in, false), "the opt-in guards the config file's sources");
  cr_expect(ak_egress_guards(NULL, true));
  cr_expect_not(ak_egress_guards(NULL, false));
}

/* The check hooks' question: does this tree guard the sinks it is handed? */
Test(egress, tree_guards_on_opt_in_only) {
  json_t *root = json_pack("{s:{s:[s],s:b,s:b}}", "egress", "allow_cidrs", "10.0.0.0/8", "allow_http", 1,
                           "guard_static_sources", 0);
  cr_assert_not_null(root);
  cr_expect_not(ak_egress_tree_guards(root));
  json_object_set_new(json_object_get(root, "egress"), "guard_static_sources", json_true());
  cr_expect(ak_egress_tree_guards(root));
  json_decref(root);
  json_t *empty = json_object();
  cr_expect_not(ak_egress_tree_guards(empty), "no egress section: the default, trusted");
  json_decref(empty);
}
