/* Admin API. Reads only: GET /health, /ready, /metrics, /v1/hooks/{id}. Hooks are read
 * from the store by id (index 'i' -> seq -> hooks). */
#include <arpa/inet.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "admin/admin.h"
#include "core/envelope.h"
#include "core/httpx.h"
#include "core/log.h"
#include "queue/writer.h"
#include "store/store.h"

struct ak_admin {
  ak_instance_t *inst;
  struct MHD_Daemon *d;
  int port;
};

static json_t *strn(const char *s, size_t n) { return json_stringn_nocheck(s ? s : "", s ? n : 0); }

void *ak_admin_hook_json(const ak_envelope_t *env, int with_body) {
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

static enum MHD_Result get_hook(ak_admin_t *a, struct MHD_Connection *c, const char *idtext) {
  uint8_t id[16];
  if (!ak_uuid_parse(idtext, id)) return ak_http_error(c, 404, "hook_not_found", 0);
  uint8_t ik[AK_ID_KEY_LEN];
  ak_key_id(ik, id);
  char *v = NULL;
  size_t vl = 0;
  int rc = ak_store_get(a->inst->store, AK_CF_INDEX, ik, sizeof ik, &v, &vl);
  if (rc < 0) return ak_http_error(c, 503, "store_unavailable", 1);
  if (rc == 1 || vl != 8) {
    free(v);
    return ak_http_error(c, 404, "hook_not_found", 0);
  }
  uint8_t hk[AK_HOOK_KEY_LEN];
  ak_key_hook(hk, ak_get_u64((const uint8_t *)v));
  free(v);
  rc = ak_store_get(a->inst->store, AK_CF_HOOKS, hk, sizeof hk, &v, &vl);
  if (rc < 0) return ak_http_error(c, 503, "store_unavailable", 1);
  if (rc == 1) return ak_http_error(c, 404, "hook_not_found", 0);
  ak_envelope_t env;
  if (ak_envelope_decode((const uint8_t *)v, vl, &env) != 0) {
    free(v);
    ak_log(AK_LOG_ERROR, "admin", "stored hook record is damaged", "id=%s", idtext);
    return ak_http_error(c, 500, "hook_damaged", 0);
  }
  json_t *j = ak_admin_hook_json(&env, 1);
  ak_envelope_clear(&env);
  free(v);
  return ak_http_json(c, 200, j, 0);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload_data, size_t *upload_data_size,
                               void **con_cls) {
  (void)version;
  (void)upload_data;
  ak_admin_t *a = cls;
  /* admin requests carry no body we read; swallow any and answer at the end */
  if (*con_cls == NULL) {
    *con_cls = (void *)1;
    if (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0) goto route;
    return MHD_YES;
  }
  if (*upload_data_size) {
    *upload_data_size = 0;
    return MHD_YES;
  }
  if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) return ak_http_error(c, 404, "not_found", 0);
route:
  if (strcmp(url, "/health") == 0) return ak_http_health(a->inst, c);
  if (strcmp(url, "/ready") == 0) {
    unsigned st;
    return ak_http_ready(a->inst, c, &st);
  }
  if (strcmp(url, "/metrics") == 0) {
    if (a->inst->writer) ak_writer_sample(a->inst->writer);
    size_t len;
    char *text = ak_metrics_render(a->inst->metrics, &len);
    enum MHD_Result r = ak_http_reply(c, 200, "text/plain; version=0.0.4", text, len, 0);
    free(text);
    return r;
  }
  if (strncmp(url, "/v1/hooks/", 10) == 0) return get_hook(a, c, url + 10);
  return ak_http_error(c, 404, "not_found", 0);
}

ak_admin_t *ak_admin_new(ak_instance_t *inst) {
  ak_admin_t *a = calloc(1, sizeof *a);
  if (a) a->inst = inst;
  return a;
}

int ak_admin_start(ak_admin_t *a, char **err) {
  const ak_config_t *cfg = a->inst->cfg;
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL;
  if (strchr(cfg->admin_ip, ':')) {
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons((uint16_t)cfg->admin_port);
    inet_pton(AF_INET6, cfg->admin_ip, &s6->sin6_addr);
    flags |= MHD_USE_IPv6;
  } else {
    struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
    s4->sin_family = AF_INET;
    s4->sin_port = htons((uint16_t)cfg->admin_port);
    inet_pton(AF_INET, cfg->admin_ip, &s4->sin_addr);
  }
  a->d = MHD_start_daemon(flags, (uint16_t)cfg->admin_port, NULL, NULL, handler, a,
                          MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                          MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)30,
                          MHD_OPTION_CONNECTION_LIMIT, (unsigned)256,
                          MHD_OPTION_END);
  if (!a->d) {
    char b[200];
    snprintf(b, sizeof b, "cannot listen on admin.ip %s admin.port %d (in use, or no permission)", cfg->admin_ip,
             cfg->admin_port);
    *err = strdup(b);
    return -1;
  }
  const union MHD_DaemonInfo *di = MHD_get_daemon_info(a->d, MHD_DAEMON_INFO_BIND_PORT);
  a->port = di ? di->port : cfg->admin_port;
  return 0;
}

int ak_admin_port(const ak_admin_t *a) { return a->port; }

void ak_admin_stop(ak_admin_t *a) {
  if (a->d) MHD_stop_daemon(a->d);
  a->d = NULL;
}

void ak_admin_free(ak_admin_t *a) {
  if (!a) return;
  ak_admin_stop(a);
  free(a);
}
