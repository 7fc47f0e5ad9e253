/* GET /v1/hooks/{id} and the stored hook's JSON view (hooks_api.h). Never shows another
 * tenant's hook to a scoped caller and never names the tenant of one it hides. */
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "admin/hooks_api.h"
#include "archive/catalogue.h"
#include "archive/compactor.h"
#include "core/clock.h"
#include "core/envelope.h"
#include "core/log.h"
#include "store/store.h"
#include "tenant/erase.h"

static json_t *strn(const char *s, size_t n) { return json_stringn_nocheck(s ? s : "", s ? n : 0); }

void *ak_hooks_api_json(const ak_envelope_t *env, int with_body) {
  char id[AK_UUID_STR_LEN];
  ak_uuid_format(env->id, id);
  unsigned char dg[32];
  unsigned int dl = 0;
  EVP_Digest(env->body, env->body_len, dg, &dl, EVP_sha256(), NULL);
  char hex[65];
  for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", dg[i]);
  json_t *j = json_object();
  json_object_set_new(j, "id", json_string(id));
  json_object_set_new(j, "seq", json_integer((json_int_t)env->seq));
  json_object_set_new(j, "tenant_id", strn(env->tenant, env->tenant_len));
  json_object_set_new(j, "source_id", strn(env->source, env->source_len));
  json_object_set_new(j, "received_at", json_integer(env->received_at_ms));
  json_object_set_new(j, "size", json_integer((json_int_t)env->body_len));
  json_object_set_new(j, "sha256", json_string(hex));
  if (env->dedupe_key_len) json_object_set_new(j, "dedupe_key", strn(env->dedupe_key, env->dedupe_key_len));
  if (with_body) {
    json_object_set_new(j, "method", strn(env->method, env->method_len));
    json_object_set_new(j, "path", strn(env->path, env->path_len));
    json_object_set_new(j, "content_type", env->content_type_len ? strn(env->content_type, env->content_type_len)
                                                                  : json_null());
    json_object_set_new(j, "verification", json_string(env->flags & AK_ENV_FLAG_VERIFY_FAILED ? "failed" : "ok"));
    json_t *hs = json_array();
    for (size_t i = 0; i < env->nheaders; i++)
      json_array_append_new(hs, json_pack("[o,o]", strn(env->headers[i].name, env->headers[i].name_len),
                                          strn(env->headers[i].value, env->headers[i].value_len)));
    json_object_set_new(j, "headers", hs);
    size_t bl = 4 * ((env->body_len + 2) / 3) + 1;
    char *b64 = malloc(bl);
    int n = EVP_EncodeBlock((unsigned char *)b64, env->body, (int)env->body_len);
    json_object_set_new(j, "body", json_stringn(b64, (size_t)(n > 0 ? n : 0)));
    json_object_set_new(j, "body_encoding", json_string("base64"));
    free(b64);
  }
  return j;
}

/* GET /v1/hooks/{id}: read by id (its sealed seq, else the 'i' index; ak_store_find_hook),
 * and when the store no longer holds it, from the archive (the catalogue, the segment's
 * index, one ranged read): the same answer either way. A hook retention deleted is 404
 * expired; one of an erased tenant received before its erase is 410 gone (the archive keeps
 * it in its multi-tenant segment until retention). The blob read runs on the admin thread: admin calls are rare and bounded by the
 * adapter's timeouts.
 * Another tenant's hook is "not found" to a scoped caller: an id names no tenant, so
 * nothing is forbidden, and existence is not told. */
void ak_hooks_api_get(ak_admin_call_t *call, const ak_admin_path_t *path) {
  ak_store_t *st = call->inst->store;
  uint8_t id[16];
  if (!ak_uuid_parse(path->id, id)) {
    ak_admin_error(call, 404, "hook_not_found");
    return;
  }
  char *v = NULL;
  size_t vl = 0;
  uint64_t seq = 0;
  int rc = ak_store_find_hook(st, id, &seq, &v, &vl);
  if (rc < 0) {
    ak_admin_error(call, 503, "store_unavailable");
    return;
  }
  if (rc == 1 && ak_archive_blob(call->inst)) {
    char err[512] = "";
    uint8_t *rec = NULL;
    size_t len = 0;
    int ar = ak_archive_fetch(st, ak_archive_blob(call->inst), id, ak_archive_retention_ms(call->inst), ak_now_ms(),
                              &rec, &len, &seq, err, sizeof err);
    if (ar == AK_ARCHIVE_ERROR) {
      ak_log(AK_LOG_ERROR, "admin", "archived hook could not be read", "id=%s error=\"%s\"", path->id, err);
      ak_admin_error(call, 503, "archive_unavailable");
      return;
    }
    if (ar == AK_ARCHIVE_EXPIRED) {
      ak_admin_error(call, 404, "expired");
      return;
    }
    if (ar == AK_ARCHIVE_FOUND) {
      v = (char *)rec;
      vl = len;
      rc = 0;
    }
  }
  if (rc == 1) {
    ak_admin_error(call, 404, "hook_not_found");
    return;
  }
  ak_envelope_t env;
  if (ak_envelope_decode((const uint8_t *)v, vl, &env) != 0) {
    free(v);
    ak_log(AK_LOG_ERROR, "admin", "stored hook record is damaged", "id=%s", path->id);
    ak_admin_error(call, 500, "hook_damaged");
    return;
  }
  int64_t erased_at = 0;
  int er = ak_tenant_erased(call->inst, env.tenant, env.tenant_len, &erased_at);
  if (er == 1 && env.received_at_ms <= erased_at && ak_tenant_scope_has(call->scope, env.tenant, env.tenant_len)) {
    ak_envelope_clear(&env);
    free(v);
    ak_admin_error(call, 410, "gone");
    return;
  }
  json_t *j = ak_tenant_scope_has(call->scope, env.tenant, env.tenant_len) ? ak_hooks_api_json(&env, 1) : NULL;
  ak_envelope_clear(&env);
  free(v);
  if (!j) {
    ak_admin_error(call, 404, "hook_not_found");
    return;
  }
  ak_admin_json(call, 200, j);
}
