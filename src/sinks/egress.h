/* The egress guard: decides whether a sink may connect to a destination address or URL.
 * Owns the list of non-public address classes and the operator's allow list
 * (`egress.allow_cidrs`, `egress.allow_http`). Pure: no I/O, no resolving, no globals;
 * callers hand it the sockaddr they are about to connect to. Never resolves a name
 * itself (a check on a name instead of the connected address is what rebinding beats). */
#ifndef AK_SINKS_EGRESS_H
#define AK_SINKS_EGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>
#include <jansson.h>
#include "core/config.h"
#include "core/module.h"

typedef struct ak_egress ak_egress_t;

/* Build a guard. allow_cidrs: "a.b.c.d/n", "v6::/n" or a bare address (= /32, /128);
 * host bits beyond the prefix are an error. n may be 0 (allow_cidrs then ignored).
 * Returns NULL with err naming the bad entry ("egress.allow_cidrs[1]: ...").
 * Immutable once built: safe to share between threads. */
ak_egress_t *ak_egress_new(const char *const *allow_cidrs, size_t n, bool allow_http, char *err,
                           size_t errlen);
void ak_egress_free(ak_egress_t *e);

/* True when `sa` (AF_INET or AF_INET6) is a public unicast address, or inside an allowed
 * CIDR. IPv4-mapped (::ffff:a.b.c.d), NAT64 (64:ff9b::/96) and 6to4 (2002::/16) forms
 * are judged by the IPv4 address they carry. Any other family is refused. */
bool ak_egress_addr_allowed(const ak_egress_t *e, const struct sockaddr *sa);

/* Scheme check: https:// always, http:// only with allow_http, nothing else. On refusal
 * fills reason (secret-free: the URL itself is never copied, it may carry credentials). */
bool ak_egress_url_allowed(const ak_egress_t *e, const char *url, char *reason, size_t reasonlen);

/* "egress: <addr> is not a public address" for a refused sockaddr. */
void ak_egress_refusal(const struct sockaddr *sa, char *reason, size_t reasonlen);

/* The `egress` section (not in Ankusa) and the node's guard (inst->egress), which every
 * sink borrows. */
typedef struct ak_egress_cfg {
  ak_strlist_t allow_cidrs;
  bool allow_http;
} ak_egress_cfg_t;
extern const ak_module_t ak_mod_egress;

/* The guard the egress section of a checked tree describes (for plug-in check hooks);
 * NULL when the section is broken (its own check reports that). Free it. */
ak_egress_t *ak_egress_from_tree(const json_t *root);

#endif
