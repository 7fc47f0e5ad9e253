/* Reply helpers for libmicrohttpd handlers and the probes (httpx.h). Never keeps state. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "edge/httpx.h"
#include "queue/writer.h"

enum MHD_Result ak_http_reply(struct MHD_Connection *c, unsigned status, const char *ctype,
                              const char *body, size_t len, int retry_after) {
  struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
  if (!r) return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
  if (retry_after > 0) {
    char ra[16];
    snprintf(ra, sizeof ra, "%d", retry_after);
    MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, ra);
  }
  enum MHD_Result ret = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return ret;
}

enum MHD_Result ak_http_json(struct MHD_Connection *c, unsigned status, json_t *j, int retry_after) {
  char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(j);
  if (!s) return MHD_NO;
  enum MHD_Result r = ak_http_reply(c, status, "application/json", s, strlen(s), retry_after);
  free(s);
  return r;
}

enum MHD_Result ak_http_error(struct MHD_Connection *c, unsigned status, const char *code, int retry_after) {
  char b[160];
  int n = snprintf(b, sizeof b, "{\"error\":\"%s\"}", code);
  return ak_http_reply(c, status, "application/json", b, (size_t)n, retry_after);
}

enum MHD_Result ak_http_ready(ak_instance_t *inst, struct MHD_Connection *c, unsigned *status_out) {
  if (atomic_load(&inst->draining)) {
    *status_out = 503;
    json_t *j = json_pack("{s:s,s:s}", "status", "draining", "instance", inst->name);
    return ak_http_json(c, 503, j, 1);
  }
  const char *reason = "ok";
  bool ok = inst->writer && ak_writer_ready(inst->writer, &reason);
  *status_out = ok ? 200 : 503;
  if (ok) {
    json_t *j = json_pack("{s:s,s:s,s:s}", "status", "ready", "instance", inst->name, "store", "ok");
    return ak_http_json(c, 200, j, 0);
  }
  json_t *j = json_pack("{s:s,s:s,s:s,s:{s:s}}", "status", "not_ready", "instance", inst->name, "store",
                        "write_failed", "reasons", "store", reason);
  return ak_http_json(c, 503, j, 1);
}

enum MHD_Result ak_http_health(ak_instance_t *inst, struct MHD_Connection *c) {
  json_t *roles = json_array();
  if (inst->roles & AK_ROLE_EDGE) json_array_append_new(roles, json_string("edge"));
  if (inst->roles & AK_ROLE_DISPATCH) json_array_append_new(roles, json_string("dispatch"));
  if (inst->roles & AK_ROLE_STORAGE) json_array_append_new(roles, json_string("storage"));
  if (inst->roles & AK_ROLE_CLAIM_CHECK) json_array_append_new(roles, json_string("claim_check"));
  json_t *j = json_pack("{s:s,s:s,s:s,s:o}", "status", "ok", "instance", inst->name, "version", AK_VERSION,
                        "roles", roles);
  return ak_http_json(c, 200, j, 0);
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
