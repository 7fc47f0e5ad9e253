/* The egress guard (see egress.h). Owns the table of non-public ranges, the CIDR parser
 * for egress.allow_cidrs and the rule of which sinks are guarded (API-managed sources'
 * always, the config file's with egress.guard_static_sources). Never resolves names,
 * never logs, holds no global state. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "core/instance.h"
#include "sinks/egress.h"

typedef struct {
  int family;        /* AF_INET or AF_INET6 */
  uint8_t addr[16];  /* 4 bytes used for AF_INET */
  unsigned prefix;
} cidr_t;

struct ak_egress {
  bool allow_http;
  size_t nallow;
  cidr_t allow[];
};

static bool prefix_match(const uint8_t *a, const uint8_t *net, unsigned prefix) {
  unsigned full = prefix / 8, rest = prefix % 8;
  if (memcmp(a, net, full) != 0) return false;
  if (rest == 0) return true;
  uint8_t mask = (uint8_t)(0xFFu << (8 - rest));
  return (a[full] & mask) == (net[full] & mask);
}

static bool cidr_contains(const cidr_t *c, int family, const uint8_t *a) {
  return c->family == family && prefix_match(a, c->addr, c->prefix);
}

/* Non-public IPv4 ranges (IANA special-purpose registry, plus multicast and reserved). */
static const struct { uint8_t net[4]; unsigned prefix; } v4_denied[] = {
  {{0, 0, 0, 0}, 8},         /* "this network", incl. unspecified */
  {{10, 0, 0, 0}, 8},        /* RFC 1918 */
  {{100, 64, 0, 0}, 10},     /* CGNAT shared space */
  {{127, 0, 0, 0}, 8},       /* loopback */
  {{169, 254, 0, 0}, 16},    /* link-local (cloud metadata lives here) */
  {{172, 16, 0, 0}, 12},     /* RFC 1918 */
  {{192, 0, 0, 0}, 24},      /* IETF protocol assignments */
  {{192, 0, 2, 0}, 24},      /* TEST-NET-1 */
  {{192, 88, 99, 0}, 24},    /* 6to4 relay anycast (deprecated) */
  {{192, 168, 0, 0}, 16},    /* RFC 1918 */
  {{198, 18, 0, 0}, 15},     /* benchmarking */
  {{198, 51, 100, 0}, 24},   /* TEST-NET-2 */
  {{203, 0, 113, 0}, 24},    /* TEST-NET-3 */
  {{224, 0, 0, 0}, 4},       /* multicast */
  {{240, 0, 0, 0}, 4},       /* reserved, incl. 255.255.255.255 broadcast */
};

/* Non-public IPv6 ranges inside 2000::/3 (everything outside 2000::/3 is refused whole:
 * ::, ::1, fc00::/7, fe80::/10, ff00::/8, 64:ff9b:1::/48, 100::/64 ...). */
static const struct { uint8_t net[16]; unsigned prefix; } v6_denied[] = {
  {{0x20, 0x01, 0x00, 0x00}, 23},  /* IETF protocol assignments (Teredo, ORCHID, ...) */
  {{0x20, 0x01, 0x0d, 0xb8}, 32},  /* documentation */
  {{0x3f, 0xff, 0x00, 0x00}, 20},  /* documentation (RFC 9637) */
};

static bool v4_public(const uint8_t *a) {
  for (size_t i = 0; i < sizeof v4_denied / sizeof v4_denied[0]; i++)
    if (prefix_match(a, v4_denied[i].net, v4_denied[i].prefix)) return false;
  return true;
}

/* The IPv4 address an IPv6 form carries, when it is one of the embeddings we judge by
 * their IPv4 part. Returns a pointer into a6 or NULL. */
static const uint8_t *embedded_v4(const uint8_t *a6) {
  static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  static const uint8_t nat64[12] = {0x00, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
  if (memcmp(a6, mapped, 12) == 0 || memcmp(a6, nat64, 12) == 0) return a6 + 12;
  if (a6[0] == 0x20 && a6[1] == 0x02) return a6 + 2; /* 6to4: 2002:VVVV:VVVV::/48 */
  return NULL;
}

static bool v6_public(const uint8_t *a) {
  if ((a[0] & 0xE0) != 0x20) return false; /* not global unicast 2000::/3 */
  for (size_t i = 0; i < sizeof v6_denied / sizeof v6_denied[0]; i++)
    if (prefix_match(a, v6_denied[i].net, v6_denied[i].prefix)) return false;
  return true;
}

static bool allowed_by_list(const ak_egress_t *e, int family, const uint8_t *a) {
  for (size_t i = 0; i < e->nallow; i++)
    if (cidr_contains(&e->allow[i], family, a)) return true;
  return false;
}

bool ak_egress_addr_allowed(const ak_egress_t *e, const struct sockaddr *sa) {
  if (!e || !sa) return false;
  if (sa->sa_family == AF_INET) {
    const uint8_t *a = (const uint8_t *)&((const struct sockaddr_in *)sa)->sin_addr;
    return allowed_by_list(e, AF_INET, a) || v4_public(a);
  }
  if (sa->sa_family == AF_INET6) {
    const uint8_t *a = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
    if (allowed_by_list(e, AF_INET6, a)) return true;
    const uint8_t *v4 = embedded_v4(a);
    if (v4) return allowed_by_list(e, AF_INET, v4) || v4_public(v4);
    return v6_public(a);
  }
  return false;
}

static int parse_cidr(const char *s, cidr_t *out, const char **why) {
  char buf[INET6_ADDRSTRLEN + 8];
  if (!s || !*s) {
    *why = "is empty";
    return -1;
  }
  if (strlen(s) >= sizeof buf) {
    *why = "is not a CIDR (address/prefix)";
    return -1;
  }
  strcpy(buf, s);
  char *slash = strchr(buf, '/');
  if (slash) *slash = '\0';
  memset(out, 0, sizeof *out);
  unsigned max;
  if (inet_pton(AF_INET, buf, out->addr) == 1) {
    out->family = AF_INET;
    max = 32;
  } else if (inet_pton(AF_INET6, buf, out->addr) == 1) {
    out->family = AF_INET6;
    max = 128;
  } else {
    *why = "is not a CIDR (address/prefix)";
    return -1;
  }
  out->prefix = max;
  if (slash) {
    const char *p = slash + 1;
    if (!*p || strlen(p) > 3) {
      *why = "has a bad prefix length";
      return -1;
    }
    unsigned v = 0;
    for (; *p; p++) {
      if (*p < '0' || *p > '9') {
        *why = "has a bad prefix length";
        return -1;
      }
      v = v * 10 + (unsigned)(*p - '0');
    }
    if (v > max) {
      *why = out->family == AF_INET ? "has a prefix length over 32" : "has a prefix length over 128";
      return -1;
    }
    out->prefix = v;
  }
  /* Host bits set ("10.0.0.1/8") usually means a typo in the prefix: say so. */
  for (unsigned bit = out->prefix; bit < max; bit++)
    if (out->addr[bit / 8] & (0x80u >> (bit % 8))) {
      *why = "has host bits set beyond its prefix";
      return -1;
    }
  return 0;
}

ak_egress_t *ak_egress_new(const char *const *allow_cidrs, size_t n, bool allow_http, char *err,
                           size_t errlen) {
  if (!allow_cidrs) n = 0;
  ak_egress_t *e = calloc(1, sizeof *e + n * sizeof(cidr_t));
  if (!e) {
    if (err && errlen) snprintf(err, errlen, "out of memory");
    return NULL;
  }
  e->allow_http = allow_http;
  for (size_t i = 0; i < n; i++) {
    const char *why = NULL;
    if (parse_cidr(allow_cidrs[i], &e->allow[i], &why) != 0) {
      if (err && errlen)
        snprintf(err, errlen, "egress.allow_cidrs[%zu]: \"%.64s\" %s", i, allow_cidrs[i] ? allow_cidrs[i] : "",
                 why);
      free(e);
      return NULL;
    }
  }
  e->nallow = n;
  return e;
}

void ak_egress_free(ak_egress_t *e) { free(e); }

bool ak_egress_url_allowed(const ak_egress_t *e, const char *url, char *reason, size_t reasonlen) {
  if (!e || !url) {
    if (reason && reasonlen) snprintf(reason, reasonlen, "egress: no url");
    return false;
  }
  if (strncasecmp(url, "https://", 8) == 0) return true;
  if (strncasecmp(url, "http://", 7) == 0) {
    if (e->allow_http) return true;
    if (reason && reasonlen) snprintf(reason, reasonlen, "egress: http:// is refused (egress.allow_http is false)");
    return false;
  }
  if (reason && reasonlen) snprintf(reason, reasonlen, "egress: only http:// and https:// urls");
  return false;
}

void ak_egress_refusal(const struct sockaddr *sa, char *reason, size_t reasonlen) {
  char a[INET6_ADDRSTRLEN] = "?";
  if (sa && sa->sa_family == AF_INET)
    inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, a, sizeof a);
  else if (sa && sa->sa_family == AF_INET6)
    inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, a, sizeof a);
  snprintf(reason, reasonlen, "egress: %s is not a public address", a);
}

/* ------------------------------------------------------------------- the module ---- */

static const ak_opt_t egress_rows[] = {
  {.key = "allow_cidrs", .type = AK_OPT_STRLIST, .def = "[]",
   .doc = "non-public destinations guarded sinks may reach anyway (\"10.1.0.0/16\", \"fd00::/8\", a bare address)",
   AK_AT(ak_egress_cfg_t, allow_cidrs)},
  {.key = "allow_http", .type = AK_OPT_BOOL, .def = "false",
   .doc = "allow http:// URLs (plain text) besides https:// for guarded sinks", AK_AT(ak_egress_cfg_t, allow_http)},
  {.key = "guard_static_sources", .type = AK_OPT_BOOL, .def = "false",
   .doc = "guard the config file's sinks too (API-managed sources' sinks always are); false: trusted, as in Ankusa",
   AK_AT(ak_egress_cfg_t, guard_static_sources)},
  {0},
};

static ak_egress_t *guard_of(const json_t *eg, char *why, size_t whylen) {
  const json_t *list = json_object_get(eg, "allow_cidrs");
  const json_t *http = json_object_get(eg, "allow_http");
  if (!json_is_array(list) || !json_is_boolean(http)) return NULL;
  size_t n = json_array_size(list);
  const char **cidrs = calloc(n + 1, sizeof *cidrs);
  if (!cidrs) {
    snprintf(why, whylen, "egress: out of memory");
    return NULL;
  }
  for (size_t i = 0; i < n; i++) cidrs[i] = json_string_value(json_array_get(list, i));
  ak_egress_t *g = ak_egress_new(cidrs, n, json_is_true(http), why, whylen);
  free(cidrs);
  return g;
}

ak_egress_t *ak_egress_from_tree(const json_t *root) {
  char why[192];
  return guard_of(json_object_get(root, "egress"), why, sizeof why);
}

bool ak_egress_tree_guards(const json_t *root) {
  return json_is_true(json_object_get(json_object_get(root, "egress"), "guard_static_sources"));
}

bool ak_egress_guards(const ak_egress_cfg_t *cfg, bool api) { return api || (cfg && cfg->guard_static_sources); }

static void egress_check(ak_check_t *c, json_t *eg, json_t *root) {
  (void)root;
  char why[192] = "";
  ak_egress_t *g = guard_of(eg, why, sizeof why);
  if (!g && why[0]) ak_check_error(c, "%s", why); /* "egress.allow_cidrs[1]: ..." */
  ak_egress_free(g);
}

static int egress_open(ak_instance_t *inst, char **err) {
  const ak_egress_cfg_t *ec = ak_config_of(inst->cfg, &ak_mod_egress);
  char why[256] = "";
  inst->egress = ec ? ak_egress_new(ec->allow_cidrs.v, ec->allow_cidrs.n, ec->allow_http, why, sizeof why) : NULL;
  if (inst->egress) return 0;
  *err = strdup(why[0] ? why : "egress: out of memory");
  return AK_MODULE_BAD_CONFIG;
}

static void egress_close(ak_instance_t *inst) {
  ak_egress_free(inst->egress);
  inst->egress = NULL;
}

const ak_module_t ak_mod_egress = {
  .name = "egress",
  .section = "egress",
  .doc = "which destinations sinks may connect to",
  .options = egress_rows,
  .cfg_size = sizeof(ak_egress_cfg_t),
  .check = egress_check,
  .open = egress_open,
  .close = egress_close,
};
