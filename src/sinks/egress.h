/* The egress guard: decides whether a sink may connect to a destination address or URL.
 * Owns the list of non-public address classes, the operator's allow list
 * (`egress.allow_cidrs`, `egress.allow_http`) and the rule of which sinks are guarded:
 * the sinks of API-managed sources always (their URLs come from tenant-scoped
 * principals), the config file's only with `egress.guard_static_sources` (the operator
 * wrote those; the original trusts them). Pure: no I/O, no resolving, no globals;
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
 * guarded sink borrows. */
typedef struct ak_egress_cfg {
  ak_strlist_t allow_cidrs;
  bool allow_http;
  bool guard_static_sources;  /* the config file's sinks guarded too (default: trusted) */
} ak_egress_cfg_t;
extern const ak_module_t ak_mod_egress;

/* The guard the egress section of a checked tree describes (for plug-in check hooks);
 * NULL when the section is broken (its own check reports that). Free it. */
ak_egress_t *ak_egress_from_tree(const json_t *root);

/* Whether the sinks a check hook is handed (with this root) are guarded: true when the
 * tree says egress.guard_static_sources. The check of an API-managed source's spec
 * (core/sources.c) hands its sinks a view of the tree in which that key is true. */
bool ak_egress_tree_guards(const json_t *root);

/* Whether a sink of a source of this origin is guarded on a node with this config
 * (api: an API-managed source; the config file's otherwise). cfg NULL = the defaults. */
bool ak_egress_guards(const ak_egress_cfg_t *cfg, bool api);

#endif
