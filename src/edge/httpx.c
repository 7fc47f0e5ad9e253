/* Reply helpers for the server layer's handlers and the probes (httpx.h). Never keeps
 * state. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "edge/httpx.h"
#include "intake/module.h"
#include "queue/writer.h"

void ak_http_json(ak_hreq_t *r, unsigned status, json_t *j, int retry_after) {
  char *s = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  json_decref(j);
  if (!s) {
    ak_hreq_error(r, 500, "internal", 0);
    return;
  }
  if (retry_after > 0) {
    char ra[16];
    snprintf(ra, sizeof ra, "%d", retry_after);
    ak_hreq_add_header(r, "Retry-After", ra);
  }
  ak_hreq_reply(r, status, "application/json", s, strlen(s));
  free(s);
}

void ak_http_ready(ak_instance_t *inst, ak_hreq_t *r, unsigned *status_out) {
  if (atomic_load(&inst->draining)) {
    *status_out = 503;
    json_t *j = json_pack("{s:s,s:s}", "status", "draining", "instance", inst->name);
    ak_http_json(r, 503, j, 1);
    return;
  }
  const char *reason = "ok", *ireason = NULL;
  bool ok = inst->writer && ak_writer_ready(inst->writer, &reason);
  /* wal.type dual: a node whose intake breaker is open acks nothing */
  if (ok && inst->intake && !ak_intake_ready(inst->intake, &ireason)) {
    *status_out = 503;
    json_t *j = json_pack("{s:s,s:s,s:s,s:{s:s}}", "status", "not_ready", "instance", inst->name, "store", "ok",
                          "reasons", "intake", ireason);
    ak_http_json(r, 503, j, 1);
    return;
  }
  *status_out = ok ? 200 : 503;
  if (ok) {
    json_t *j = json_pack("{s:s,s:s,s:s}", "status", "ready", "instance", inst->name, "store", "ok");
    /* ready for the config file's sources; the shared ones answer 503 until read */
    if (ak_sources_incomplete(inst->sources))
      json_object_set_new(j, "source_store", json_string("unavailable: the shared sources are not read yet"));
    ak_http_json(r, 200, j, 0);
    return;
  }
  json_t *j = json_pack("{s:s,s:s,s:s,s:{s:s}}", "status", "not_ready", "instance", inst->name, "store",
                        "write_failed", "reasons", "store", reason);
  ak_http_json(r, 503, j, 1);
}

void ak_http_health(ak_instance_t *inst, ak_hreq_t *r) {
  json_t *roles = json_array();
  if (inst->roles & AK_ROLE_EDGE) json_array_append_new(roles, json_string("edge"));
  if (inst->roles & AK_ROLE_DISPATCH) json_array_append_new(roles, json_string("dispatch"));
  if (inst->roles & AK_ROLE_STORAGE) json_array_append_new(roles, json_string("storage"));
  if (inst->roles & AK_ROLE_CLAIM_CHECK) json_array_append_new(roles, json_string("claim_check"));
  json_t *j = json_pack("{s:s,s:s,s:s,s:o}", "status", "ok", "instance", inst->name, "version", AK_VERSION,
                        "roles", roles);
  ak_http_json(r, 200, j, 0);
}

size_t ak_json_quote(char *out, size_t cap, const char *s, size_t len) {
  static const char hex[] = "0123456789abcdef";
  size_t o = 0;
  if (cap < 3) return 0;
  out[o++] = '"';
  for (size_t i = 0; i < len && o + 8 < cap; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (ch == '"' || ch == '\\') {
      out[o++] = '\\';
      out[o++] = (char)ch;
    } else if (ch < 0x20 || ch > 0x7E) {
      out[o++] = '\\';
      out[o++] = 'u';
      out[o++] = '0';
      out[o++] = '0';
      out[o++] = hex[ch >> 4];
      out[o++] = hex[ch & 15];
    } else {
      out[o++] = (char)ch;
    }
  }
  out[o++] = '"';
  out[o] = 0;
  return o;
}
