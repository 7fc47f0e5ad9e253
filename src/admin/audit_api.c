/* The audit trail over the admin API (audit_api.h): GET /v1/audit, answered by
 * store/audit.c's query. Reads only; never shows a row naming a tenant outside the
 * caller's scope. */
#include <string.h>
#include "admin/audit_api.h"
#include "edge/route.h"

/* GET /v1/audit?after_seq=|before_seq=&action=&tenant=&since=&limit= */
void ak_audit_api_get(ak_admin_call_t *call, const ak_admin_path_t *path) {
  (void)path;
  if (!call->inst->audit) {
    ak_admin_error(call, 503, "store_unavailable");
    return;
  }
  ak_audit_query_t q = {.since_ms = INT64_MIN, .limit = 100, .scope = call->scope};
  int64_t x;
  const char *v = ak_admin_arg(call, "after_seq");
  if (v) {
    if (!ak_admin_parse_i64(v, &x) || x < 0) {
      ak_admin_invalid_filter(call, "after_seq");
      return;
    }
    q.has_after = true;
    q.after_seq = (uint64_t)x;
  }
  v = ak_admin_arg(call, "before_seq");
  if (v) {
    if (q.has_after || !ak_admin_parse_i64(v, &x) || x < 0) {
      ak_admin_invalid_filter(call, "before_seq");
      return;
    }
    q.has_before = true;
    q.before_seq = (uint64_t)x;
  }
  v = ak_admin_arg(call, "since");
  if (v && (!ak_admin_parse_i64(v, &q.since_ms) || q.since_ms < 0)) {
    ak_admin_invalid_filter(call, "since");
    return;
  }
  v = ak_admin_arg(call, "limit");
  if (v && !ak_admin_parse_i64(v, &q.limit)) {
    ak_admin_invalid_filter(call, "limit");
    return;
  }
  q.limit = ak_admin_clamp64(q.limit, 1, 1000);
  q.action = ak_admin_arg(call, "action");
  if (q.action && !*q.action) {
    ak_admin_invalid_filter(call, "action");
    return;
  }
  q.tenant = ak_admin_arg(call, "tenant");
  if (q.tenant && !ak_tenant_valid(q.tenant, strlen(q.tenant))) {
    ak_admin_invalid_filter(call, "tenant");
    return;
  }
  if (q.tenant && !ak_tenant_scope_has(call->scope, q.tenant, strlen(q.tenant))) {
    ak_admin_forbidden_tenant(call, q.tenant);
    return;
  }
  json_t *out = NULL;
  if (ak_audit_query(call->inst->audit, &q, &out) != 0) {
    ak_admin_error(call, 503, "store_unavailable");
    return;
  }
  ak_admin_json(call, 200, out);
}
