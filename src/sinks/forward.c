/* Forwarded-header rules (see forward.h). Owns the deny set. Must never allocate or keep
 * state: it runs once per header per attempt, on whatever thread delivers. */
#include <string.h>
#include <strings.h>
#include "core/sources.h"
#include "sinks/forward.h"

/* Credentials the provider sent to us, framing the transport sets itself, and our own
 * namespace: forwarding any of them would leak a secret, break the request, or let a
 * provider forge what the sink says about the hook. */
static const char *const denied[] = {
  "authorization", "proxy-authorization", "cookie", "x-api-key", "host", "content-length", "content-type",
  "connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "expect",
};

static bool eq(const char *name, size_t len, const char *word) {
  return strlen(word) == len && strncasecmp(name, word, len) == 0;
}

static bool is_denied(const char *name, size_t len) {
  if (len >= 9 && strncasecmp(name, "x-ankusa-", 9) == 0) return true;
  for (size_t i = 0; i < sizeof denied / sizeof denied[0]; i++)
    if (eq(name, len, denied[i])) return true;
  return false;
}

bool ak_forward_header(const struct ak_source_cfg *src, const char *name, size_t len) {
  if (!name || len == 0 || memchr(name, '\0', len) || is_denied(name, len)) return false;
  if (!src || src->forward_default) return true;
  for (size_t i = 0; i < src->nforward_headers; i++)
    if (eq(name, len, src->forward_headers[i])) return true;
  return false;
}
