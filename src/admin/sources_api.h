/* Sources managed over the admin API (source_store.type persistent, or redis: the rows in
 * a Redis the fleet shares, net/sharedkv.h, docs/shared-stores.md): the endpoints
 * GET|POST /v1/tenants/{tenant}/sources and GET|PUT|DELETE
 * /v1/tenants/{tenant}/sources/{name}, their rows in the node's store (default CF,
 * s:<tenant>\0<name>, docs/storage.md) and reading them back at boot. A spec is checked by
 * the config loader's own code (ak_sources_check_spec) and served through
 * core/sources.h. Never answers with a secret (views are redacted) and never makes a
 * change it could not store: the row is written, synced, before the edge sees the new
 * version. The handlers' one caller is the router (admin/router.c). */
#ifndef AK_ADMIN_SOURCES_API_H
#define AK_ADMIN_SOURCES_API_H

#include "admin/api.h"
#include "core/instance.h"
#include "core/module.h"

/* Boot: with source_store.type persistent, every stored source is checked and added to
 * inst->sources (before the modules that attach to sources are built). 0, or -1 with
 * *err (malloc'd) naming the stored source: an unreadable, damaged or no longer valid
 * row refuses the boot rather than silently dropping a source. With a static store,
 * stored sources are left alone (a warning says how many). */
int ak_sources_api_load(ak_instance_t *inst, char **err);

/* `ankusa rotate-secrets` (node stopped, st open for writing): every stored source whose
 * secrets are not all sealed with the current source_store.secret_key (sealed with a
 * previous key, or a row written in the clear) re-sealed with it, in one synced batch
 * with one audit row (source_store.rotate_secrets; audit may be NULL: none): every row or
 * none. 0 with *out, or -1 with *err (malloc'd) naming the source (a key id no configured
 * key has, a damaged row). */
typedef struct ak_sources_rotate {
  size_t rows;       /* stored sources */
  size_t rewritten;  /* rows re-sealed */
  size_t values;     /* secrets in them */
  char key_id[16];   /* the current key's id */
} ak_sources_rotate_t;
int ak_sources_api_rotate(const ak_config_t *cfg, struct ak_store *st, struct ak_audit *audit,
                          ak_sources_rotate_t *out, char **err);

/* The `source_store` section; its open loads the stored sources. */
extern const ak_module_t ak_mod_source_store;
/* source_store.type is persistent: the admin API's sources are served and kept. */
bool ak_source_store_persistent(const ak_config_t *cfg);
/* source_store.type is redis: the admin API's sources are served and kept in a Redis the
 * fleet shares (net/sharedkv.h). */
bool ak_source_store_redis(const ak_config_t *cfg);

/* Handlers (api.h), after the router checked the scope and the path tenant: {tenant} is
 * a valid tenant id in the caller's scope; {name} the source's name. */
void ak_sources_api_list(ak_admin_call_t *call, const ak_admin_path_t *path);
void ak_sources_api_create(ak_admin_call_t *call, const ak_admin_path_t *path);
void ak_sources_api_get(ak_admin_call_t *call, const ak_admin_path_t *path);
void ak_sources_api_put(ak_admin_call_t *call, const ak_admin_path_t *path);
void ak_sources_api_delete(ak_admin_call_t *call, const ak_admin_path_t *path);

#endif
