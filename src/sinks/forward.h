/* Which provider headers a sink passes on (`sources.<id>.forward_headers`). Owns the deny
 * set and the default / list / [] rule, shared by every sink that forwards headers (http
 * now, the broker sinks' `headers` field later). Pure: never allocates, never logs, and
 * never looks at a header's value. */
#ifndef AK_SINKS_FORWARD_H
#define AK_SINKS_FORWARD_H

#include <stdbool.h>
#include <stddef.h>

struct ak_source_cfg;

/* True when the header `name` (len bytes, any case) may be forwarded for a hook of `src`.
 * Never: authorization, proxy-authorization, cookie, x-api-key, host, content-length,
 * content-type, connection, keep-alive, transfer-encoding, te, trailer, upgrade, expect,
 * x-ankusa-*. Otherwise: src NULL or forward_default -> yes; a list -> only the names it
 * holds; [] -> none. An empty name is never forwarded. */
bool ak_forward_header(const struct ak_source_cfg *src, const char *name, size_t len);

#endif
