/* DELETE /v1/tenants/{tenant}?confirm={tenant} and GET /v1/tenants/{tenant}/erase
 * (tenants_api.h): parse, refuse what must not start, answer. The job, its progress and
 * its audit row are tenant/erase.c's. Never starts an erase without the confirmation. */
#include <string.h>
#include "admin/sources_api.h"
#include "admin/tenants_api.h"
#include "core/log.h"
#include "core/sources.h"
#include "tenant/erase.h"

void ak_tenants_api_delete(ak_admin_call_t *call, const ak_admin_path_t *path) {
  const char *confirm = ak_admin_arg(call, "confirm");
  if (!confirm || strcmp(confirm, path->tenant) != 0) {
    ak_admin_json(call, 400, json_pack("{s:s,s:s,s:s}", "error", "confirmation_required", "field", "confirm", "message",
                                       "repeat the tenant id as ?confirm=<tenant>"));
    return;
  }
  /* sources in the fleet's Redis store (source_store.type redis) are the fleet's: deleted
   * over the sources API first (audited there), never behind the other nodes' backs */
  if (ak_source_store_redis(call->inst->cfg) && call->inst->sources) {
    ak_source_t **v = NULL;
    size_t n = ak_sources_list(call->inst->sources, path->tenant, &v);
    json_t *names = json_array();
    for (size_t i = 0; i < n; i++)
      if (v[i]->origin == AK_SOURCE_API) json_array_append_new(names, json_string(v[i]->cfg.id));
    ak_sources_list_free(v, n);
    if (json_array_size(names)) {
      ak_admin_json(call, 409, json_pack("{s:s,s:s,s:o,s:s}", "error", "tenant_has_shared_sources", "tenant",
                                         path->tenant, "sources", names, "message",
                                         "source_store.type redis: delete these sources first"));
      return;
    }
    json_decref(names);
  }
  json_t *progress = NULL, *statics = NULL;
  ak_erase_rc_t rc = ak_erase_start(call->inst, path->tenant, call->who, &progress, &statics);
  if (rc == AK_ERASE_STATIC_SOURCES) {
    ak_admin_json(call, 409, json_pack("{s:s,s:s,s:o}", "error", "tenant_has_static_sources", "tenant", path->tenant,
                                       "sources", statics));
    return;
  }
  if (rc != AK_ERASE_OK) {
    json_decref(progress);
    ak_admin_error(call, 503, "store_unavailable");
    return;
  }
  ak_admin_json(call, 202, progress ? progress : json_pack("{s:s,s:s}", "tenant", path->tenant, "state", "running"));
}

void ak_tenants_api_erase_get(ak_admin_call_t *call, const ak_admin_path_t *path) {
  json_t *p = NULL;
  int rc = ak_erase_progress(call->inst, path->tenant, &p);
  if (rc < 0) {
    ak_admin_error(call, 503, "store_unavailable");
    return;
  }
  if (rc == 1) {
    ak_admin_error(call, 404, "erase_not_found");
    return;
  }
  ak_admin_json(call, 200, p);
}
