/* The dead-letter set over the admin API (dlq_api.h): GET /v1/dlq, read through
 * dispatch/replay.c. Reads only; never lists a row of a tenant outside the caller's
 * scope. */
#include <string.h>
#include "admin/dlq_api.h"
#include "dispatch/replay.h"

/* GET /v1/dlq?source_id=&since=&limit= */
void ak_dlq_api_list(ak_admin_call_t *call, const ak_admin_path_t *path) {
  (void)path;
  int64_t since = -1, limit = 100;
  const char *v = ak_admin_arg(call, "since");
  if (v && (!ak_admin_parse_i64(v, &since) || since < 0)) {
    ak_admin_invalid_filter(call, "since");
    return;
  }
  v = ak_admin_arg(call, "limit");
  if (v && !ak_admin_parse_i64(v, &limit)) {
    ak_admin_invalid_filter(call, "limit");
    return;
  }
  limit = ak_admin_clamp64(limit, 0, 1000);
  const char *source = ak_admin_arg(call, "source_id");
  if (source && !*source) {
    ak_admin_invalid_filter(call, "source_id");
    return;
  }
  const char *t;
  if (!ak_admin_may_source(call, source, &t)) {
    ak_admin_forbidden_tenant(call, t);
    return;
  }
  if (!(call->inst->roles & AK_ROLE_DISPATCH)) {
    ak_admin_role_not_enabled(call, "dispatch");
    return;
  }
  json_t *out = NULL;
  if (ak_replays_dlq_list(call->inst->store, source, call->scope, since, limit, &out) != 0) {
    ak_admin_error(call, 503, "store_unavailable");
    return;
  }
  ak_admin_json(call, 200, out);
}
