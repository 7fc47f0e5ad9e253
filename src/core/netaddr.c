/* inet_pton does the parsing; everything is kept in the IPv6 form so one comparison
 * covers both families. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include "core/netaddr.h"

static const uint8_t v4_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

static bool is_v4(const ak_netaddr_t *a) { return memcmp(a->a, v4_prefix, 12) == 0; }

bool ak_netaddr_parse(const char *s, size_t len, ak_netaddr_t *out) {
  char buf[INET6_ADDRSTRLEN + 1];
  if (!s || len == 0 || len >= sizeof buf) return false;
  memcpy(buf, s, len);
  buf[len] = 0;
  struct in_addr v4;
  if (inet_pton(AF_INET, buf, &v4) == 1) {
    memcpy(out->a, v4_prefix, 12);
    memcpy(out->a + 12, &v4, 4);
    return true;
  }
  struct in6_addr v6;
  if (inet_pton(AF_INET6, buf, &v6) == 1) {
    memcpy(out->a, &v6, 16);
    return true;
  }
  return false;
}

bool ak_netaddr_from_sockaddr(const struct sockaddr *sa, ak_netaddr_t *out) {
  if (!sa) return false;
  if (sa->sa_family == AF_INET) {
    const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
    memcpy(out->a, v4_prefix, 12);
    memcpy(out->a + 12, &s4->sin_addr, 4);
    return true;
  }
  if (sa->sa_family == AF_INET6) {
    const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
    memcpy(out->a, &s6->sin6_addr, 16);
    return true;
  }
  return false;
}

bool ak_netaddr_parse_cidr(const char *s, ak_cidr_t *out, const char **why) {
  const char *dummy;
  if (!why) why = &dummy;
  if (!s || !*s) {
    *why = "is not an address or CIDR";
    return false;
  }
  const char *slash = strchr(s, '/');
  size_t alen = slash ? (size_t)(slash - s) : strlen(s);
  if (!ak_netaddr_parse(s, alen, &out->net)) {
    *why = "is not an address or CIDR";
    return false;
  }
  bool v4 = memchr(s, ':', alen) == NULL;
  int max = v4 ? 32 : 128, bits = max;
  if (slash) {
    const char *p = slash + 1;
    if (!*p || strlen(p) > 3) {
      *why = "has a bad prefix length";
      return false;
    }
    bits = 0;
    for (; *p; p++) {
      if (*p < '0' || *p > '9') {
        *why = "has a bad prefix length";
        return false;
      }
      bits = bits * 10 + (*p - '0');
    }
    if (bits > max) {
      *why = "has a bad prefix length";
      return false;
    }
  }
  out->bits = v4 ? 96 + bits : bits;
  for (int i = out->bits; i < 128; i++)
    if (out->net.a[i / 8] & (0x80 >> (i % 8))) {
      *why = "has host bits set beyond its prefix";
      return false;
    }
  return true;
}

bool ak_netaddr_in(const ak_cidr_t *c, const ak_netaddr_t *a) {
  int full = c->bits / 8, rest = c->bits % 8;
  if (memcmp(c->net.a, a->a, (size_t)full) != 0) return false;
  if (rest == 0) return true;
  uint8_t mask = (uint8_t)(0xff << (8 - rest));
  return (c->net.a[full] & mask) == (a->a[full] & mask);
}

bool ak_netaddr_in_any(const ak_cidr_t *list, size_t n, const ak_netaddr_t *a) {
  for (size_t i = 0; i < n; i++)
    if (ak_netaddr_in(&list[i], a)) return true;
  return false;
}

/* One X-Forwarded-For entry: an address, optionally bracketed or with a port. */
static bool parse_entry(const char *s, size_t len, ak_netaddr_t *out) {
  while (len && (*s == ' ' || *s == '\t')) s++, len--;
  while (len && (s[len - 1] == ' ' || s[len - 1] == '\t')) len--;
  if (len && s[0] == '[') {
    const char *close = memchr(s, ']', len);
    if (!close) return false;
    return ak_netaddr_parse(s + 1, (size_t)(close - s - 1), out);
  }
  if (ak_netaddr_parse(s, len, out)) return true;
  const char *colon = memchr(s, ':', len);
  if (colon && !memchr(colon + 1, ':', len - (size_t)(colon + 1 - s))) /* a.b.c.d:port */
    return ak_netaddr_parse(s, (size_t)(colon - s), out);
  return false;
}

void ak_netaddr_client(const ak_netaddr_t *peer, const ak_cidr_t *proxies, size_t nproxies,
                       const char *const *xff, const size_t *xff_len, size_t nxff, ak_netaddr_t *out) {
  *out = *peer;
  if (!ak_netaddr_in_any(proxies, nproxies, peer)) return;
  /* right to left over every entry of every header, the last header first */
  for (size_t h = nxff; h-- > 0;) {
    const char *v = xff[h];
    size_t end = xff_len[h];
    for (;;) {
      size_t start = end;
      while (start > 0 && v[start - 1] != ',') start--;
      const char *e = v + start;
      size_t n = end - start;
      while (n && (*e == ' ' || *e == '\t')) e++, n--;
      if (n) { /* "a,,b" and a trailing comma carry no address: skipped */
        ak_netaddr_t a;
        if (!parse_entry(e, n, &a)) return;
        *out = a;
        if (!ak_netaddr_in_any(proxies, nproxies, &a)) return;
      }
      if (start == 0) break;
      end = start - 1;
    }
  }
}

void ak_netaddr_limit_key(const ak_netaddr_t *a, uint8_t out[16]) {
  memcpy(out, a->a, 16);
  if (!is_v4(a)) memset(out + 8, 0, 8);
}
