/* IP addresses and CIDR ranges in one 16-byte form (IPv4 as ::ffff:a.b.c.d), and the
 * client address of a request behind trusted proxies (X-Forwarded-For). Pure: parsing and
 * matching only, no resolving, no I/O, no state. */
#ifndef AK_CORE_NETADDR_H
#define AK_CORE_NETADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

typedef struct ak_netaddr {
  uint8_t a[16];              /* IPv6 bytes; IPv4 mapped to ::ffff:0:0/96 */
} ak_netaddr_t;

typedef struct ak_cidr {
  ak_netaddr_t net;
  int bits;                   /* prefix length over the 16-byte form (IPv4 /n is 96 + n) */
} ak_cidr_t;

/* An address literal ("203.0.113.7", "2001:db8::1"). False when it is not one. */
bool ak_netaddr_parse(const char *s, size_t len, ak_netaddr_t *out);
/* From a socket address (AF_INET / AF_INET6); false for any other family. */
bool ak_netaddr_from_sockaddr(const struct sockaddr *sa, ak_netaddr_t *out);
/* "a.b.c.d/n", "v6::/n" or a bare address (/32, /128). Host bits beyond the prefix are an
 * error. On failure *why is a short reason. */
bool ak_netaddr_parse_cidr(const char *s, ak_cidr_t *out, const char **why);
bool ak_netaddr_in(const ak_cidr_t *c, const ak_netaddr_t *a);
bool ak_netaddr_in_any(const ak_cidr_t *list, size_t n, const ak_netaddr_t *a);

/* The client of a request: the peer, unless the peer is a trusted proxy; then the
 * X-Forwarded-For entries (xff: the header values in received order, read as one
 * comma-separated list) are walked from the right, past every trusted proxy, and the
 * first address that is not one is the client. An entry that is not an address stops
 * the walk at the last good one (a proxy never writes garbage; a client might). */
void ak_netaddr_client(const ak_netaddr_t *peer, const ak_cidr_t *proxies, size_t nproxies,
                       const char *const *xff, const size_t *xff_len, size_t nxff, ak_netaddr_t *out);

/* The key a per-address limit uses: IPv4 whole, IPv6 by its /64 (one host owns a /64,
 * so counting its addresses one by one would hand it 2^64 buckets). */
void ak_netaddr_limit_key(const ak_netaddr_t *a, uint8_t out[16]);

#endif
