/* DELETE /v1/tenants/{tenant}?confirm={tenant} and GET /v1/tenants/{tenant}/erase
 * (tenants_api.h): parse, refuse what must not start, answer. The job, its progress and
 * its audit row are tenant/erase.c's. Never starts an erase without the confirmation. */
#include <string.h>
#include "admin/tenants_api.h"
#include "core/log.h"
#include "tenant/erase.h"

void ak_tenants_api_delete(ak_admin_call_t *call, const ak_admin_path_t *path) {
  const char *confirm = ak_admin_arg(call, "confirm");
  if (!confirm || strcmp(confirm, path->tenant) != 0) {
    ak_admin_json(call, 400, json_pack("{s:s,s:s,s:s}", "error", "confirmation_required", "field", "confirm", "message",
                                       "repeat the tenant id as ?confirm=<tenant>"));
    return;
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
