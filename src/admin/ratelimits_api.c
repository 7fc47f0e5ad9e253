/* Tenant rate limits over the admin API (ratelimits_api.h): GET /v1/rate-limits and
 * GET|PUT|DELETE /v1/tenants/{tenant}/rate-limit. edge/quota.c keeps the overrides and
 * writes their audit rows; this file only parses and answers. Never lists a tenant
 * outside the caller's scope. */
#include <stdio.h>
#include <string.h>
#include "admin/ratelimits_api.h"
#include "core/log.h"
#include "core/ratelimit.h"
#include "edge/quota.h"
#include "fleet/fleet.h"

static void rate_limit_gate(ak_admin_call_t *call) {
  if (!(call->inst->roles & AK_ROLE_EDGE)) {
    ak_admin_role_not_enabled(call, "edge");
    return;
  }
  ak_admin_error(call, 503, "store_unavailable");
}

void ak_ratelimits_api_get(ak_admin_call_t *call, const ak_admin_path_t *path) {
  ak_instance_t *inst = call->inst;
  if (!(inst->roles & AK_ROLE_EDGE) || !inst->quota) {
    rate_limit_gate(call);
    return;
  }
  ak_admin_json(call, 200, ak_quota_tenant_json(inst->quota, path->tenant));
}

void ak_ratelimits_api_delete(ak_admin_call_t *call, const ak_admin_path_t *path) {
  ak_instance_t *inst = call->inst;
  if (!(inst->roles & AK_ROLE_EDGE) || !inst->quota) {
    rate_limit_gate(call);
    return;
  }
  int rc = ak_quota_delete(inst->quota, path->tenant, call->who);
  if (rc == 1) {
    ak_admin_error(call, 404, "rate_limit_not_found");
    return;
  }
  if (rc != 0) {
    ak_admin_error(call, 503, "store_unavailable");
    return;
  }
  ak_fleet_forget(inst->fleet, path->tenant, strlen(path->tenant)); /* spent under the old limit */
  ak_log(AK_LOG_INFO, "rate_limit", "override removed", "tenant=%s actor=%s request_id=%s", path->tenant,
         call->who->actor, call->request_id);
  ak_admin_reply(call, 204, "application/json", "", 0);
}

void ak_ratelimits_api_put(ak_admin_call_t *call, const ak_admin_path_t *path) {
  ak_instance_t *inst = call->inst;
  if (!(inst->roles & AK_ROLE_EDGE) || !inst->quota) {
    rate_limit_gate(call);
    return;
  }
  json_t *b = call->body_len ? json_loadb(call->body, call->body_len, JSON_REJECT_DUPLICATES, NULL) : NULL;
  ak_ratelimit_t l;
  char field[96] = "", msg[96] = "";
  int bad = !b ? (snprintf(field, sizeof field, "body"), snprintf(msg, sizeof msg, "must be a JSON object"), 1)
               : ak_ratelimit_parse(b, &l, field, sizeof field, msg, sizeof msg) != 0;
  json_decref(b);
  if (bad) {
    ak_admin_json(call, 400, json_pack("{s:s,s:s,s:s}", "error", "invalid_rate_limit", "field",
                                       *field ? field : "body", "message", msg));
    return;
  }
  int rc = ak_quota_put(inst->quota, path->tenant, &l, call->who);
  if (rc < 0) {
    ak_admin_error(call, 503, "store_unavailable");
    return;
  }
  if (rc == 0) ak_fleet_forget(inst->fleet, path->tenant, strlen(path->tenant));
  if (rc == 0)
    ak_log(AK_LOG_INFO, "rate_limit", "override set",
           "tenant=%s rate=%g burst=%lld bytes_rate=%g bytes_burst=%lld max_body_bytes=%lld actor=%s request_id=%s",
           path->tenant, l.hooks.rate, (long long)l.hooks.burst, l.bytes.rate, (long long)l.bytes.burst,
           (long long)l.max_body_bytes, call->who->actor, call->request_id);
  ak_admin_json(call, 200, ak_quota_tenant_json(inst->quota, path->tenant));
}

void ak_ratelimits_api_list(ak_admin_call_t *call, const ak_admin_path_t *path) {
  (void)path;
  if (!(call->inst->roles & AK_ROLE_EDGE) || !call->inst->quota) {
    rate_limit_gate(call);
    return;
  }
  json_t *all = ak_quota_list_json(call->inst->quota);
  if (call->scope) {
    json_t *keep = json_array();
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(all, "tenants"), i, e) {
      const char *t = json_string_value(json_object_get(e, "tenant"));
      if (t && ak_tenant_scope_has(call->scope, t, strlen(t))) json_array_append(keep, e);
    }
    json_object_set_new(all, "tenants", keep);
  }
  ak_admin_json(call, 200, all);
}
