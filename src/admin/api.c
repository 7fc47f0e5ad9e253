/* The handler contract's helpers (api.h): the replies every admin answer goes through,
 * query arguments, and the source-to-tenant checks. Owns no state and no routes; never
 * includes a handler's or the router's header, and never puts a token or a secret in a
 * reply. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "admin/api.h"
#include "core/sources.h"

enum MHD_Result ak_admin_reply(ak_admin_call_t *call, unsigned status, const char *ctype, const char *body,
                               size_t len) {
  struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
  if (!r) return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
  if (call->request_id) MHD_add_response_header(r, "X-Request-Id", call->request_id);
  if (status == 503) MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
  if (status == 401) MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"ankusa-admin\"");
  enum MHD_Result ret = MHD_queue_response(call->conn, status, r);
  MHD_destroy_response(r);
  return ret;
}

enum MHD_Result ak_admin_json(ak_admin_call_t *call, unsigned status, json_t *j) {
  char *s = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  json_decref(j);
  if (!s) return MHD_NO;
  enum MHD_Result r = ak_admin_reply(call, status, "application/json", s, strlen(s));
  free(s);
  return r;
}

enum MHD_Result ak_admin_error(ak_admin_call_t *call, unsigned status, const char *code) {
  return ak_admin_json(call, status, json_pack("{s:s}", "error", code));
}

enum MHD_Result ak_admin_forbidden(ak_admin_call_t *call, ak_scope_t scope, const char *tenant) {
  json_t *j = json_pack("{s:s,s:s}", "error", "forbidden", "scope", ak_auth_scope_name(scope));
  if (tenant) json_object_set_new(j, "tenant", json_string(tenant));
  return ak_admin_json(call, 403, j);
}

enum MHD_Result ak_admin_forbidden_tenant(ak_admin_call_t *call, const char *tenant) {
  return ak_admin_forbidden(call, call->route ? call->route->scope : AK_SCOPE_OPEN, tenant ? tenant : "*");
}

enum MHD_Result ak_admin_invalid_filter(ak_admin_call_t *call, const char *field) {
  return ak_admin_json(call, 400, json_pack("{s:s,s:s}", "error", "invalid_filter", "field", field));
}

enum MHD_Result ak_admin_role_not_enabled(ak_admin_call_t *call, const char *role) {
  return ak_admin_json(call, 409, json_pack("{s:s,s:s}", "error", "role_not_enabled", "role", role));
}

const char *ak_admin_arg(ak_admin_call_t *call, const char *key) {
  return MHD_lookup_connection_value(call->conn, MHD_GET_ARGUMENT_KIND, key);
}

bool ak_admin_parse_i64(const char *s, int64_t *out) {
  if (!s || !*s) return false;
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || *end || (s[0] != '-' && (s[0] < '0' || s[0] > '9'))) return false;
  *out = v;
  return true;
}

/* API-managed sources come and go: the tenant is copied out of the version looked up
 * (ids are at most 64 characters) into this thread's buffer, valid until its next call. */
const char *ak_admin_source_tenant(ak_instance_t *inst, const char *source_id) {
  static __thread char tenant[80];
  ak_source_t *s = source_id && inst->sources ? ak_sources_get(inst->sources, source_id, strlen(source_id)) : NULL;
  if (!s) return NULL;
  snprintf(tenant, sizeof tenant, "%s", s->cfg.tenant);
  ak_source_release(s);
  return tenant;
}

bool ak_admin_may_source(ak_admin_call_t *call, const char *source_id, const char **tenant) {
  const char *t = ak_admin_source_tenant(call->inst, source_id);
  if (tenant) *tenant = t;
  return !t || ak_tenant_scope_has(call->scope, t, strlen(t));
}
