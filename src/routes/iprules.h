/* IP rules: an ordered list of {action, cidr} and a default, the first matching rule
 * deciding (routes.ip_rules, a route's own ip_rules, PUT /admin/ip-rules). IPv4 and IPv6
 * CIDRs; an IPv4 rule matches only IPv4 clients and an IPv6 rule only IPv6 ones, and an
 * IPv4-mapped client (::ffff:a.b.c.d) is an IPv4 client, so a CIDR written inside
 * ::ffff:0:0/96 (which would match IPv4 clients through their IPv6 spelling) is refused.
 * Pure: parsing and matching only. */
#ifndef AK_ROUTES_IPRULES_H
#define AK_ROUTES_IPRULES_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include "core/netaddr.h"

#define AK_IPRULES_MAX 1000

typedef struct ak_iprule {
  bool allow;
  bool v6;       /* written as an IPv6 CIDR */
  ak_cidr_t cidr;
  char *text;    /* the CIDR as given */
} ak_iprule_t;

typedef struct ak_iprules {
  bool def_allow;
  ak_iprule_t *v;
  size_t n;
} ak_iprules_t;

/* One CIDR for a rule or a trusted proxy. False with *why for a bad one (also one inside
 * ::ffff:0:0/96). *v6: written as IPv6. */
bool ak_iprules_parse_cidr(const char *s, ak_cidr_t *out, bool *v6, const char **why);
/* {default, rules:[{action, cidr}]} (default absent: allow; rules absent: none). require_both:
 * both keys must be present (PUT /admin/ip-rules). NULL with err ("rules[2].cidr: ...")
 * when the value is not one. */
ak_iprules_t *ak_iprules_from_json(const json_t *j, bool require_both, char *err, size_t errlen);
ak_iprules_t *ak_iprules_copy(const ak_iprules_t *r);
void ak_iprules_free(ak_iprules_t *r);
json_t *ak_iprules_to_json(const ak_iprules_t *r);
/* Whether a (peer form: IPv4 mapped) matches the rule. */
bool ak_iprule_matches(const ak_iprule_t *rule, const ak_netaddr_t *a);
/* The decision for a: *allow; returns the index of the rule that decided, -1 for the default. */
int ak_iprules_eval(const ak_iprules_t *r, const ak_netaddr_t *a, bool *allow);

#endif
