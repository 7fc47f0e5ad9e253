/* Sources managed over the admin API (source_store.type persistent): the endpoints
 * GET|POST /v1/tenants/{t}/sources and GET|PUT|DELETE /v1/tenants/{t}/sources/{name},
 * their rows in the node's store (default CF, s:<tenant>\0<name>, docs/storage.md) and
 * reading them back at boot. A spec is checked by the config loader's own code
 * (ak_config_source_check) and served through core/sources.h. Never answers with a
 * secret (views are redacted) and never makes a change it could not store: the row is
 * written, synced, before the edge sees the new version. */
#ifndef AK_ADMIN_SOURCES_API_H
#define AK_ADMIN_SOURCES_API_H

#include <stdbool.h>
#include <stddef.h>
#include <microhttpd.h>
#include "store/audit.h"
#include "core/instance.h"

/* Boot: with source_store.type persistent, every stored source is checked and added to
 * inst->sources (before the modules that attach to sources are built). 0, or -1 with
 * *err (malloc'd) naming the stored source: an unreadable, damaged or no longer valid
 * row refuses the boot rather than silently dropping a source. With a static store,
 * stored sources are left alone (a warning says how many). */
int ak_sources_api_load(ak_instance_t *inst, char **err);

/* True for /v1/tenants/{t}/sources and /v1/tenants/{t}/sources/{name}. */
bool ak_sources_api_match(const char *url);
struct ak_admin_call;
/* Serve one request on such a URL, after the router checked its scope and tenant (the
 * call carries the body, the caller for the audit row, and the request id its answers
 * carry). */
enum MHD_Result ak_sources_api_handle(struct ak_admin_call *call);

#endif
