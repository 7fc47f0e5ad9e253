/* The quarantine pen over the admin API (quarantine_api.h): GET /v1/quarantine lists held
 * hooks, DELETE /v1/quarantine purges them (queue/quarantine.c keeps the pen and writes
 * the purge's audit row). A release is a replay (replays_api.c). Never lists or purges an
 * entry of a tenant outside the caller's scope. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "admin/quarantine_api.h"
#include "core/log.h"
#include "queue/quarantine.h"
#include "verify/verifier.h"

/* source_id, id, since, until from the query string into f; NULL, or the bad field. */
static const char *query_filter(ak_admin_call_t *call, ak_pen_filter_t *f, bool window) {
  const char *v = ak_admin_arg(call, "source_id");
  if (v) {
    if (!*v) return "source_id";
    f->source_id = v;
  }
  if (!window) return NULL;
  v = ak_admin_arg(call, "id");
  if (v) {
    if (!ak_uuid_parse(v, f->id)) return "id";
    f->has_id = true;
  }
  v = ak_admin_arg(call, "since");
  if (v && (!ak_admin_parse_i64(v, &f->since_ms) || f->since_ms < 0)) return "since";
  v = ak_admin_arg(call, "until");
  if (v && (!ak_admin_parse_i64(v, &f->until_ms) || f->until_ms < 0 || f->until_ms < f->since_ms)) return "until";
  return NULL;
}

void ak_quarantine_api_list(ak_admin_call_t *call, const ak_admin_path_t *path) {
  (void)path;
  ak_pen_filter_t f;
  ak_pen_filter_init(&f, 100);
  const char *v = ak_admin_arg(call, "limit");
  if (v && !ak_admin_parse_i64(v, &f.limit)) {
    ak_admin_invalid_filter(call, "limit");
    return;
  }
  f.limit = ak_admin_clamp64(f.limit, 1, 1000);
  const char *bad = query_filter(call, &f, false);
  if (bad) {
    ak_admin_invalid_filter(call, bad);
    return;
  }
  const char *t;
  if (!ak_admin_may_source(call, f.source_id, &t)) {
    ak_admin_forbidden_tenant(call, t);
    return;
  }
  f.tenants = call->scope;
  ak_pen_entry_t *es = NULL;
  size_t n = 0;
  if (ak_pen_list(call->inst->store, &f, false, &es, &n) != 0) {
    ak_admin_error(call, 503, "store_unavailable");
    return;
  }
  json_t *arr = json_array();
  for (size_t i = 0; i < n; i++) {
    char id[AK_UUID_STR_LEN];
    ak_uuid_format(es[i].id, id);
    json_array_append_new(arr, json_pack("{s:s,s:s,s:s,s:I,s:s,s:I}", "id", id, "source_id", es[i].source_id,
                                         "tenant_id", es[i].tenant_id, "received_at",
                                         (json_int_t)es[i].received_at_ms, "reason",
                                         ak_verify_reason_text((ak_verify_reason_t)es[i].reason), "size",
                                         (json_int_t)es[i].size));
  }
  free(es);
  ak_admin_json(call, 200, json_pack("{s:o}", "entries", arr));
}

void ak_quarantine_api_purge(ak_admin_call_t *call, const ak_admin_path_t *path) {
  (void)path;
  ak_instance_t *inst = call->inst;
  ak_pen_filter_t f;
  ak_pen_filter_init(&f, 1000);
  const char *v = ak_admin_arg(call, "limit");
  if (v && !ak_admin_parse_i64(v, &f.limit)) {
    ak_admin_invalid_filter(call, "limit");
    return;
  }
  f.limit = ak_admin_clamp64(f.limit, 1, 10000);
  const char *bad = query_filter(call, &f, true);
  if (bad) {
    ak_admin_invalid_filter(call, bad);
    return;
  }
  const char *t;
  if (!ak_admin_may_source(call, f.source_id, &t)) {
    ak_admin_forbidden_tenant(call, t);
    return;
  }
  f.tenants = call->scope;
  f.who = call->who;
  if (!inst->pen) {
    ak_admin_error(call, 503, "store_unavailable");
    return;
  }
  int64_t deleted = 0, bytes = 0;
  if (ak_pen_purge(inst->pen, inst->store, &f, &deleted, &bytes) != 0) {
    ak_admin_error(call, 503, "store_unavailable");
    return;
  }
  if (deleted)
    ak_log(AK_LOG_INFO, "quarantine", "purged", "deleted=%lld bytes=%lld actor=%s request_id=%s", (long long)deleted,
           (long long)bytes, call->who->actor, call->request_id);
  ak_admin_json(call, 200, json_pack("{s:I,s:I}", "deleted", (json_int_t)deleted, "bytes", (json_int_t)bytes));
}
