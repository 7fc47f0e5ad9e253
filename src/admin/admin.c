/* Admin API: the listener, the router and its one route table ({method, path pattern,
 * scope, handler}: docs/admin-api.md is the same table), authentication and the scope and
 * tenant checks that run before any handler, X-Request-Id, and the handlers of the
 * node's own endpoints: /health, /ready, /metrics, /v1/config, /v1/wal, /v1/hooks/{id};
 * the quarantine pen (GET and DELETE /v1/quarantine, release by POST /v1/replays kind
 * quarantine); the dead-letter set (GET /v1/dlq) and dlq replay jobs (POST/GET
 * /v1/replays, GET/PATCH /v1/replays/{id}), which dispatch/replay.c runs; tenant rate
 * limits (GET /v1/rate-limits, GET/PUT/DELETE /v1/tenants/{t}/rate-limit, edge/quota.c
 * keeps them); sources under /v1/tenants/{t}/sources (admin/sources_api.c); the audit trail (GET /v1/audit) and the log level (GET/PUT
 * /v1/log-level). Request bodies are read up to AK_ADMIN_MAX_BODY, and only once the
 * caller passed the checks; never a body from an unbounded read. Never answers a
 * request that failed a check with anything but 401/403, and never echoes a token. */
#include <arpa/inet.h>
#include <errno.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "admin/admin.h"
#include "admin/api.h"
#include "admin/ops.h"
#include "core/clock.h"
#include "admin/sources_api.h"
#include "core/envelope.h"
#include "core/log.h"
#include "core/sources.h"
#include "dispatch/replay.h"
#include "edge/httpx.h"
#include "edge/quota.h"
#include "edge/route.h"
#include "queue/quarantine.h"
#include "queue/writer.h"
#include "store/store.h"
#include "verify/verifier.h"

#define AK_ADMIN_MAX_BODY 65536

struct ak_admin {
  ak_instance_t *inst;
  ak_auth_t *auth;
  struct MHD_Daemon *d;
  int port;
  pthread_mutex_t log_mu; /* PUT /v1/log-level: one change (and its row) at a time */
};

/* One admin request, from its first (headers-only) call to its completion. */
typedef struct admin_req {
  char *body;
  size_t len;
  bool too_big;
  bool refused; /* answered on the first call (401/403/404/400): the body is dropped */
  const ak_admin_route_t *route;
  const ak_principal_t *principal;
  char tenant[AK_ADMIN_CAPTURE_MAX], id[AK_ADMIN_CAPTURE_MAX], name[AK_ADMIN_CAPTURE_MAX];
  char request_id[AK_UUID_STR_LEN];
  char client[64];
  ak_audit_who_t who;
} admin_req_t;

/* ------------------------------------------------------------------- replies ---- */

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

static enum MHD_Result forbidden(ak_admin_call_t *call, ak_scope_t scope, const char *tenant) {
  json_t *j = json_pack("{s:s,s:s}", "error", "forbidden", "scope", ak_auth_scope_name(scope));
  if (tenant) json_object_set_new(j, "tenant", json_string(tenant));
  return ak_admin_json(call, 403, j);
}

enum MHD_Result ak_admin_forbidden_tenant(ak_admin_call_t *call, const char *tenant) {
  return forbidden(call, call->route ? call->route->scope : AK_SCOPE_OPEN, tenant ? tenant : "*");
}

const char *ak_admin_arg(ak_admin_call_t *call, const char *key) {
  return MHD_lookup_connection_value(call->conn, MHD_GET_ARGUMENT_KIND, key);
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

static enum MHD_Result role_not_enabled(ak_admin_call_t *call, const char *role) {
  return ak_admin_json(call, 409, json_pack("{s:s,s:s}", "error", "role_not_enabled", "role", role));
}

static enum MHD_Result invalid_filter(ak_admin_call_t *call, const char *field) {
  return ak_admin_json(call, 400, json_pack("{s:s,s:s}", "error", "invalid_filter", "field", field));
}

static bool parse_i64(const char *s, int64_t *out) {
  if (!s || !*s) return false;
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || *end || (s[0] != '-' && (s[0] < '0' || s[0] > '9'))) return false;
  *out = v;
  return true;
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ------------------------------------------------------------------- probes ---- */

static enum MHD_Result get_health(ak_admin_call_t *call) { return ak_http_health(call->inst, call->conn); }

static enum MHD_Result get_ready(ak_admin_call_t *call) {
  unsigned st;
  return ak_http_ready(call->inst, call->conn, &st);
}

static enum MHD_Result get_metrics(ak_admin_call_t *call) {
  ak_instance_t *inst = call->inst;
  if (inst->writer) ak_writer_sample(inst->writer);
  ak_pen_sample(inst->pen);
  size_t len;
  char *text = ak_metrics_render(inst->metrics, &len);
  enum MHD_Result r = ak_admin_reply(call, 200, "text/plain; version=0.0.4", text, len);
  free(text);
  return r;
}

static enum MHD_Result get_config(ak_admin_call_t *call) {
  return ak_admin_json(call, 200, ak_admin_config_view(call->inst));
}

static enum MHD_Result get_wal(ak_admin_call_t *call) { return ak_admin_json(call, 200, ak_admin_wal_view(call->inst)); }

/* -------------------------------------------------------------------- hooks ---- */

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

/* GET /v1/hooks/{id}: read by id (its sealed seq, else the 'i' index; ak_store_find_hook).
 * Another tenant's hook is "not found" to a scoped caller: an id names no tenant, so
 * nothing is forbidden, and existence is not told. */
static enum MHD_Result get_hook(ak_admin_call_t *call) {
  ak_store_t *st = call->inst->store;
  uint8_t id[16];
  if (!ak_uuid_parse(call->id, id)) return ak_admin_error(call, 404, "hook_not_found");
  char *v = NULL;
  size_t vl = 0;
  uint64_t seq = 0;
  int rc = ak_store_find_hook(st, id, &seq, &v, &vl);
  if (rc < 0) return ak_admin_error(call, 503, "store_unavailable");
  if (rc == 1) return ak_admin_error(call, 404, "hook_not_found");
  ak_envelope_t env;
  if (ak_envelope_decode((const uint8_t *)v, vl, &env) != 0) {
    free(v);
    ak_log(AK_LOG_ERROR, "admin", "stored hook record is damaged", "id=%s", call->id);
    return ak_admin_error(call, 500, "hook_damaged");
  }
  json_t *j = ak_tenant_scope_has(call->scope, env.tenant, env.tenant_len) ? ak_admin_hook_json(&env, 1) : NULL;
  ak_envelope_clear(&env);
  free(v);
  if (!j) return ak_admin_error(call, 404, "hook_not_found");
  return ak_admin_json(call, 200, j);
}

/* ------------------------------------------------------------ quarantine pen ---- */

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
  if (v && (!parse_i64(v, &f->since_ms) || f->since_ms < 0)) return "since";
  v = ak_admin_arg(call, "until");
  if (v && (!parse_i64(v, &f->until_ms) || f->until_ms < 0 || f->until_ms < f->since_ms)) return "until";
  return NULL;
}

static enum MHD_Result pen_list(ak_admin_call_t *call) {
  ak_pen_filter_t f;
  ak_pen_filter_init(&f, 100);
  const char *v = ak_admin_arg(call, "limit");
  if (v && !parse_i64(v, &f.limit)) return invalid_filter(call, "limit");
  f.limit = clamp64(f.limit, 1, 1000);
  const char *bad = query_filter(call, &f, false);
  if (bad) return invalid_filter(call, bad);
  const char *t;
  if (!ak_admin_may_source(call, f.source_id, &t)) return ak_admin_forbidden_tenant(call, t);
  f.tenants = call->scope;
  ak_pen_entry_t *es = NULL;
  size_t n = 0;
  if (ak_pen_list(call->inst->store, &f, false, &es, &n) != 0) return ak_admin_error(call, 503, "store_unavailable");
  json_t *arr = json_array();
  for (size_t i = 0; i < n; i++) {
    char id[AK_UUID_STR_LEN];
    ak_uuid_format(es[i].id, id);
    json_array_append_new(arr, json_pack("{s:s,s:s,s:s,s:I,s:s,s:I}", "id", id, "source_id", es[i].source_id,
                                         "tenant_id", es[i].tenant_id, "received_at",
                                         (json_int_t)es[i].received_at_ms, "reason",
                                         ak_verify_reason_name((ak_verify_reason_t)es[i].reason), "size",
                                         (json_int_t)es[i].size));
  }
  free(es);
  return ak_admin_json(call, 200, json_pack("{s:o}", "entries", arr));
}

static enum MHD_Result pen_purge(ak_admin_call_t *call) {
  ak_instance_t *inst = call->inst;
  ak_pen_filter_t f;
  ak_pen_filter_init(&f, 1000);
  const char *v = ak_admin_arg(call, "limit");
  if (v && !parse_i64(v, &f.limit)) return invalid_filter(call, "limit");
  f.limit = clamp64(f.limit, 1, 10000);
  const char *bad = query_filter(call, &f, true);
  if (bad) return invalid_filter(call, bad);
  const char *t;
  if (!ak_admin_may_source(call, f.source_id, &t)) return ak_admin_forbidden_tenant(call, t);
  f.tenants = call->scope;
  f.who = call->who;
  if (!inst->pen) return ak_admin_error(call, 503, "store_unavailable");
  int64_t deleted = 0, bytes = 0;
  if (ak_pen_purge(inst->pen, inst->store, &f, &deleted, &bytes) != 0)
    return ak_admin_error(call, 503, "store_unavailable");
  if (deleted)
    ak_log(AK_LOG_INFO, "quarantine", "purged", "deleted=%lld bytes=%lld actor=%s request_id=%s", (long long)deleted,
           (long long)bytes, call->who->actor, call->request_id);
  return ak_admin_json(call, 200, json_pack("{s:I,s:I}", "deleted", (json_int_t)deleted, "bytes", (json_int_t)bytes));
}

/* The held hook as the verifier saw it at receive time: the stored headers, the query
 * string kept in the stored path, and the raw body. What is never stored (a TLS peer
 * certificate, a verifier's credential header or query parameter, headers the
 * store_headers policy drops) cannot be checked again, so client_cert and token sources
 * do not pass a release. */
static int pen_check(void *ctx, const ak_source_t *src, const ak_envelope_t *env, int64_t now_s) {
  (void)ctx;
  if (!src->verifier) return -1;
  const char *q = env->path ? memchr(env->path, '?', env->path_len) : NULL;
  ak_verify_input_t in = {
      .headers = env->headers,
      .nheaders = env->nheaders,
      .body = env->body,
      .body_len = env->body_len,
      .query = q ? q + 1 : NULL,
      .query_len = q ? env->path_len - (size_t)(q + 1 - env->path) : 0,
      .now_s = now_s,
  };
  return (int)ak_verifier_check(src->verifier, &in);
}

/* ------------------------------------------------------------- replay jobs ---- */

/* POST /v1/replays kind dlq: a job the dispatch thread runs (dispatch/replay.c). A job
 * moves rows of any tenant its filter matches, so a scoped caller must name a source of
 * one of its tenants. */
static enum MHD_Result post_dlq_replay(ak_admin_call_t *call, const ak_pen_filter_t *f, int64_t rate,
                                       int64_t max_lag) {
  ak_instance_t *inst = call->inst;
  const char *tenant = NULL;
  if (!ak_admin_may_source(call, f->source_id, &tenant) || (call->scope && !tenant))
    return ak_admin_forbidden_tenant(call, tenant);
  if (!(inst->cfg->roles & AK_ROLE_DISPATCH)) return role_not_enabled(call, "dispatch");
  if (!inst->replays) return ak_admin_error(call, 503, "store_unavailable");
  ak_replay_filter_t rf = {.source_id = f->source_id, .has_id = f->has_id, .who = call->who, .tenant = tenant};
  memcpy(rf.id, f->id, 16);
  rf.has_since = f->since_ms != INT64_MIN;
  rf.since_ms = f->since_ms;
  rf.has_until = f->until_ms != INT64_MAX;
  rf.until_ms = f->until_ms;
  json_t *out = NULL;
  switch (ak_replays_create(inst->replays, &rf, rate, max_lag, &out)) {
  case AK_REPLAY_OK:
    return ak_admin_json(call, 202, out);
  case AK_REPLAY_EXISTS:
    return ak_admin_json(call, 200, out);
  case AK_REPLAY_TOO_MANY:
    return ak_admin_json(call, 409,
                         json_pack("{s:s,s:i}", "error", "too_many_replays", "limit", AK_REPLAY_MAX_ACTIVE));
  default:
    return ak_admin_error(call, 503, "store_unavailable");
  }
}

/* POST /v1/replays. Kind quarantine runs to completion in the request; kind dlq creates
 * a job. Both take the same filter keys (on received_at for quarantine, on dead-letter
 * time for dlq). */
static enum MHD_Result post_replay(ak_admin_call_t *call) {
  if (!call->body_len) return invalid_filter(call, "kind");
  json_error_t jerr;
  json_t *b = json_loadb(call->body, call->body_len, JSON_REJECT_DUPLICATES, &jerr);
  if (!b || !json_is_object(b)) {
    json_decref(b);
    return invalid_filter(call, "body");
  }
  const char *bad = NULL;
  const char *kind = json_string_value(json_object_get(b, "kind"));
  bool dlq = kind && !strcmp(kind, "dlq");
  ak_pen_filter_t f;
  ak_pen_filter_init(&f, 10000);
  int64_t rate = AK_REPLAY_RATE_DEFAULT, max_lag = AK_REPLAY_LAG_DEFAULT;
  json_t *filter = json_object();
  const char *key;
  json_t *val;
  if (!kind || (strcmp(kind, "quarantine") != 0 && !dlq)) bad = "kind";
  json_object_foreach(b, key, val) {
    if (bad) break;
    if (!strcmp(key, "kind")) continue;
    if (!strcmp(key, "source_id")) {
      if (!json_is_string(val) || !json_string_length(val)) bad = key;
      else f.source_id = json_string_value(val);
    } else if (!strcmp(key, "id")) {
      if (!json_is_string(val) || !ak_uuid_parse(json_string_value(val), f.id)) bad = key;
      else f.has_id = true;
    } else if (!strcmp(key, "since") || !strcmp(key, "until")) {
      if (!json_is_integer(val) || json_integer_value(val) < 0) bad = key;
      else if (key[0] == 's') f.since_ms = json_integer_value(val);
      else f.until_ms = json_integer_value(val);
    } else if (!strcmp(key, "rate")) {
      if (!json_is_integer(val) || json_integer_value(val) < 1 || json_integer_value(val) > AK_REPLAY_RATE_MAX)
        bad = key;
      else rate = json_integer_value(val);
      continue;
    } else if (!strcmp(key, "max_lag_ms")) {
      if (!json_is_integer(val) || json_integer_value(val) < AK_REPLAY_LAG_MIN ||
          json_integer_value(val) > AK_REPLAY_LAG_MAX)
        bad = key;
      else max_lag = json_integer_value(val);
      continue;
    } else {
      bad = key;
    }
    if (!bad) json_object_set(filter, key, val);
  }
  if (!bad && f.until_ms < f.since_ms) bad = "until";
  if (bad) {
    enum MHD_Result res = invalid_filter(call, bad);
    json_decref(filter);
    json_decref(b);
    return res;
  }
  if (dlq) {
    enum MHD_Result res = post_dlq_replay(call, &f, rate, max_lag);
    json_decref(filter);
    json_decref(b); /* f.source_id pointed into b: the job keeps its own copy */
    return res;
  }
  ak_instance_t *inst = call->inst;
  const char *t;
  enum MHD_Result refused = MHD_NO;
  bool refuse = true;
  if (!ak_admin_may_source(call, f.source_id, &t)) refused = ak_admin_forbidden_tenant(call, t);
  else if (!(inst->cfg->roles & AK_ROLE_EDGE)) refused = role_not_enabled(call, "edge");
  else refuse = false;
  if (refuse) {
    json_decref(filter);
    json_decref(b);
    return refused;
  }
  f.tenants = call->scope;
  f.who = call->who;
  int64_t created = ak_now_ms();
  ak_pen_release_result_t res;
  int rc = inst->pen && inst->writer ? ak_pen_release(inst->pen, inst, &f, pen_check, inst, &res) : -1;
  json_decref(b); /* f.source_id pointed into b: not used past here */
  if (rc != 0) {
    json_decref(filter);
    return ak_admin_error(call, 503, "store_unavailable");
  }
  int64_t done = ak_now_ms();
  uint8_t rid[16];
  char rids[AK_UUID_STR_LEN];
  ak_uuid7_new(&inst->ids, created, rid);
  ak_uuid_format(rid, rids);
  json_t *j = json_pack("{s:s,s:s,s:s,s:o,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:n}", "id", rids, "kind",
                        "quarantine", "state", "done", "filter", filter, "rate", (json_int_t)rate, "max_lag_ms",
                        (json_int_t)max_lag, "created_at", (json_int_t)created, "updated_at", (json_int_t)done,
                        "finished_at", (json_int_t)done, "moved", (json_int_t)res.moved, "scanned",
                        (json_int_t)res.scanned, "skipped", (json_int_t)res.skipped, "delivered", (json_int_t)0,
                        "dead", (json_int_t)0, "error");
  ak_log(AK_LOG_INFO, "quarantine", "release finished",
         "replay_id=%s scanned=%lld moved=%lld skipped=%lld actor=%s request_id=%s", rids, (long long)res.scanned,
         (long long)res.moved, (long long)res.skipped, call->who->actor, call->request_id);
  return ak_admin_json(call, 202, j);
}

/* A job as the caller may see it: its source's tenant in scope (a job with no source
 * filter touches every tenant). NULL (and j released) when hidden. */
static json_t *visible_job(ak_admin_call_t *call, json_t *j, const char **tenant) {
  const char *src = json_string_value(json_object_get(json_object_get(j, "filter"), "source_id"));
  const char *t = ak_admin_source_tenant(call->inst, src);
  if (tenant) *tenant = t;
  if (call->scope && (!t || !ak_tenant_scope_has(call->scope, t, strlen(t)))) {
    json_decref(j);
    return NULL;
  }
  return j;
}

/* GET /v1/replays: dlq jobs (a quarantine release finishes in its request and is not
 * kept), newest first. */
static enum MHD_Result list_replays(ak_admin_call_t *call) {
  if (!(call->inst->cfg->roles & AK_ROLE_DISPATCH)) return role_not_enabled(call, "dispatch");
  if (!call->inst->replays) return ak_admin_error(call, 503, "store_unavailable");
  json_t *all = ak_replays_list(call->inst->replays);
  if (call->scope) {
    json_t *arr = json_object_get(all, "replays"), *keep = json_array();
    size_t i;
    json_t *j;
    json_array_foreach(arr, i, j) {
      json_t *v = visible_job(call, json_incref(j), NULL);
      if (v) json_array_append_new(keep, v);
    }
    json_object_set_new(all, "replays", keep);
  }
  return ak_admin_json(call, 200, all);
}

static enum MHD_Result get_replay(ak_admin_call_t *call) {
  if (!(call->inst->cfg->roles & AK_ROLE_DISPATCH)) return role_not_enabled(call, "dispatch");
  if (!call->inst->replays) return ak_admin_error(call, 503, "store_unavailable");
  uint8_t id[16];
  json_t *j = ak_uuid_parse(call->id, id) ? ak_replays_get(call->inst->replays, id) : NULL;
  if (j) j = visible_job(call, j, NULL);
  if (!j) return ak_admin_error(call, 404, "replay_not_found");
  return ak_admin_json(call, 200, j);
}

/* PATCH /v1/replays/{id} {state?, rate?, max_lag_ms?} */
static enum MHD_Result patch_replay(ak_admin_call_t *call) {
  json_t *b = call->body_len ? json_loadb(call->body, call->body_len, JSON_REJECT_DUPLICATES, NULL) : NULL;
  if (!b || !json_is_object(b)) {
    json_decref(b);
    return invalid_filter(call, "body");
  }
  ak_replay_patch_t p = {.state = -1, .who = call->who};
  const char *bad = NULL, *key;
  json_t *val;
  json_object_foreach(b, key, val) {
    if (!strcmp(key, "state")) {
      p.state = ak_replays_state_parse(json_string_value(val));
      if (p.state != AK_REPLAY_RUNNING && p.state != AK_REPLAY_PAUSED && p.state != AK_REPLAY_CANCELLED) bad = key;
    } else if (!strcmp(key, "rate")) {
      if (!json_is_integer(val) || json_integer_value(val) < 1 || json_integer_value(val) > AK_REPLAY_RATE_MAX)
        bad = key;
      else p.rate = json_integer_value(val);
    } else if (!strcmp(key, "max_lag_ms")) {
      if (!json_is_integer(val) || json_integer_value(val) < AK_REPLAY_LAG_MIN ||
          json_integer_value(val) > AK_REPLAY_LAG_MAX)
        bad = key;
      else p.max_lag_ms = json_integer_value(val);
    } else {
      bad = key;
    }
    if (bad) break;
  }
  enum MHD_Result res;
  if (bad) {
    res = invalid_filter(call, bad);
    json_decref(b);
    return res;
  }
  json_decref(b);
  ak_instance_t *inst = call->inst;
  if (!(inst->cfg->roles & AK_ROLE_DISPATCH)) return role_not_enabled(call, "dispatch");
  if (!inst->replays) return ak_admin_error(call, 503, "store_unavailable");
  uint8_t id[16];
  json_t *cur = ak_uuid_parse(call->id, id) ? ak_replays_get(inst->replays, id) : NULL;
  if (cur) cur = visible_job(call, cur, &p.tenant);
  if (!cur) return ak_admin_error(call, 404, "replay_not_found");
  json_t *out = NULL;
  ak_replay_result_t rr = ak_replays_patch(inst->replays, id, &p, &out);
  json_decref(cur); /* p.tenant points into the config, not into cur */
  switch (rr) {
  case AK_REPLAY_OK:
    return ak_admin_json(call, 200, out);
  case AK_REPLAY_NOT_FOUND:
    return ak_admin_error(call, 404, "replay_not_found");
  case AK_REPLAY_FINISHED:
    return ak_admin_error(call, 409, "replay_finished");
  default:
    return ak_admin_error(call, 503, "store_unavailable");
  }
}

/* GET /v1/dlq?source_id=&since=&limit= */
static enum MHD_Result dlq_list(ak_admin_call_t *call) {
  int64_t since = -1, limit = 100;
  const char *v = ak_admin_arg(call, "since");
  if (v && (!parse_i64(v, &since) || since < 0)) return invalid_filter(call, "since");
  v = ak_admin_arg(call, "limit");
  if (v && !parse_i64(v, &limit)) return invalid_filter(call, "limit");
  limit = clamp64(limit, 0, 1000);
  const char *source = ak_admin_arg(call, "source_id");
  if (source && !*source) return invalid_filter(call, "source_id");
  const char *t;
  if (!ak_admin_may_source(call, source, &t)) return ak_admin_forbidden_tenant(call, t);
  if (!(call->inst->cfg->roles & AK_ROLE_DISPATCH)) return role_not_enabled(call, "dispatch");
  json_t *out = NULL;
  if (ak_replays_dlq_list(call->inst->store, source, call->scope, since, limit, &out) != 0)
    return ak_admin_error(call, 503, "store_unavailable");
  return ak_admin_json(call, 200, out);
}

/* ------------------------------------------------------------ rate limits ---- */

static enum MHD_Result rate_limit_gate(ak_admin_call_t *call) {
  if (!(call->inst->cfg->roles & AK_ROLE_EDGE)) return role_not_enabled(call, "edge");
  return ak_admin_error(call, 503, "store_unavailable");
}

static enum MHD_Result get_rate_limit(ak_admin_call_t *call) {
  ak_instance_t *inst = call->inst;
  if (!(inst->cfg->roles & AK_ROLE_EDGE) || !inst->quota) return rate_limit_gate(call);
  return ak_admin_json(call, 200, ak_quota_tenant_json(inst->quota, call->tenant));
}

static enum MHD_Result delete_rate_limit(ak_admin_call_t *call) {
  ak_instance_t *inst = call->inst;
  if (!(inst->cfg->roles & AK_ROLE_EDGE) || !inst->quota) return rate_limit_gate(call);
  int rc = ak_quota_delete(inst->quota, call->tenant, call->who);
  if (rc == 1) return ak_admin_error(call, 404, "rate_limit_not_found");
  if (rc != 0) return ak_admin_error(call, 503, "store_unavailable");
  ak_log(AK_LOG_INFO, "rate_limit", "override removed", "tenant=%s actor=%s request_id=%s", call->tenant,
         call->who->actor, call->request_id);
  return ak_admin_reply(call, 204, "application/json", "", 0);
}

static enum MHD_Result put_rate_limit(ak_admin_call_t *call) {
  ak_instance_t *inst = call->inst;
  if (!(inst->cfg->roles & AK_ROLE_EDGE) || !inst->quota) return rate_limit_gate(call);
  json_t *b = call->body_len ? json_loadb(call->body, call->body_len, JSON_REJECT_DUPLICATES, NULL) : NULL;
  ak_ratelimit_t l;
  char field[96] = "", msg[96] = "";
  int bad = !b ? (snprintf(field, sizeof field, "body"), snprintf(msg, sizeof msg, "must be a JSON object"), 1)
               : ak_ratelimit_parse(b, &l, field, sizeof field, msg, sizeof msg) != 0;
  json_decref(b);
  if (bad)
    return ak_admin_json(call, 400, json_pack("{s:s,s:s,s:s}", "error", "invalid_rate_limit", "field",
                                              *field ? field : "body", "message", msg));
  int rc = ak_quota_put(inst->quota, call->tenant, &l, call->who);
  if (rc < 0) return ak_admin_error(call, 503, "store_unavailable");
  if (rc == 0)
    ak_log(AK_LOG_INFO, "rate_limit", "override set",
           "tenant=%s rate=%g burst=%lld bytes_rate=%g bytes_burst=%lld max_body_bytes=%lld actor=%s request_id=%s",
           call->tenant, l.hooks.rate, (long long)l.hooks.burst, l.bytes.rate, (long long)l.bytes.burst,
           (long long)l.max_body_bytes, call->who->actor, call->request_id);
  return ak_admin_json(call, 200, ak_quota_tenant_json(inst->quota, call->tenant));
}

static enum MHD_Result list_rate_limits(ak_admin_call_t *call) {
  if (!(call->inst->cfg->roles & AK_ROLE_EDGE) || !call->inst->quota) return rate_limit_gate(call);
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
  return ak_admin_json(call, 200, all);
}

/* ---------------------------------------------------------------- audit trail ---- */

/* GET /v1/audit?after_seq=|before_seq=&action=&tenant=&since=&limit= */
static enum MHD_Result get_audit(ak_admin_call_t *call) {
  if (!call->inst->audit) return ak_admin_error(call, 503, "store_unavailable");
  ak_audit_query_t q = {.since_ms = INT64_MIN, .limit = 100, .scope = call->scope};
  int64_t x;
  const char *v = ak_admin_arg(call, "after_seq");
  if (v) {
    if (!parse_i64(v, &x) || x < 0) return invalid_filter(call, "after_seq");
    q.has_after = true;
    q.after_seq = (uint64_t)x;
  }
  v = ak_admin_arg(call, "before_seq");
  if (v) {
    if (q.has_after || !parse_i64(v, &x) || x < 0) return invalid_filter(call, "before_seq");
    q.has_before = true;
    q.before_seq = (uint64_t)x;
  }
  v = ak_admin_arg(call, "since");
  if (v && (!parse_i64(v, &q.since_ms) || q.since_ms < 0)) return invalid_filter(call, "since");
  v = ak_admin_arg(call, "limit");
  if (v && !parse_i64(v, &q.limit)) return invalid_filter(call, "limit");
  q.limit = clamp64(q.limit, 1, 1000);
  q.action = ak_admin_arg(call, "action");
  if (q.action && !*q.action) return invalid_filter(call, "action");
  q.tenant = ak_admin_arg(call, "tenant");
  if (q.tenant && !ak_tenant_valid(q.tenant, strlen(q.tenant))) return invalid_filter(call, "tenant");
  if (q.tenant && !ak_tenant_scope_has(call->scope, q.tenant, strlen(q.tenant)))
    return ak_admin_forbidden_tenant(call, q.tenant);
  json_t *out = NULL;
  if (ak_audit_query(call->inst->audit, &q, &out) != 0) return ak_admin_error(call, 503, "store_unavailable");
  return ak_admin_json(call, 200, out);
}

/* ------------------------------------------------------------------ log level ---- */

static enum MHD_Result get_log_level(ak_admin_call_t *call) {
  return ak_admin_json(call, 200, json_pack("{s:s}", "level", ak_log_level_name(ak_log_get_level())));
}

/* PUT /v1/log-level {"level": "debug|info|warning|error"}: in force at once, for this
 * process (a restart reads log.level again). The level lives in memory, so the change is
 * made only after its audit row is synced; the same level again writes nothing. */
static enum MHD_Result put_log_level(ak_admin_call_t *call) {
  ak_admin_t *a = call->inst->admin;
  json_t *b = call->body_len ? json_loadb(call->body, call->body_len, JSON_REJECT_DUPLICATES, NULL) : NULL;
  const char *want = json_string_value(json_object_get(b, "level"));
  int level = -1;
  for (int i = AK_LOG_DEBUG; want && i <= AK_LOG_ERROR; i++)
    if (!strcmp(want, ak_log_level_name((ak_log_level_t)i))) level = i;
  bool extra = json_is_object(b) && json_object_size(b) != 1;
  json_decref(b);
  if (level < 0 || extra)
    return ak_admin_json(call, 400, json_pack("{s:s,s:s,s:s}", "error", "invalid_log_level", "field",
                                              extra ? "body" : "level", "message",
                                              "expected {\"level\": \"debug|info|warning|error\"}"));
  pthread_mutex_lock(&a->log_mu);
  ak_log_level_t cur = ak_log_get_level();
  const char *before = ak_log_level_name(cur), *after = ak_log_level_name((ak_log_level_t)level);
  int rc = 0;
  if ((int)cur != level) {
    ak_audit_entry_t ae = {.who = call->who, .action = "log_level.put", .subject = "log_level", .before = before,
                           .before_len = strlen(before), .after = after, .after_len = strlen(after)};
    rc = ak_audit_record(call->inst->audit, &ae);
    if (rc == 0) {
      ak_log_set_level((ak_log_level_t)level);
      /* at warning, so the change shows at any level it leaves behind */
      ak_log(AK_LOG_WARNING, "admin", "log level changed", "from=%s to=%s actor=%s request_id=%s", before, after,
             call->who->actor, call->request_id);
    }
  }
  pthread_mutex_unlock(&a->log_mu);
  if (rc != 0) return ak_admin_error(call, 503, "store_unavailable");
  return ak_admin_json(call, 200, json_pack("{s:s,s:s}", "level", after, "previous", before));
}

/* --------------------------------------------------------------- route table ---- */

/* Every endpoint, its scope and handler; docs/admin-api.md is this table. GET rows also
 * answer HEAD. A row with {tenant} has its tenant checked against the caller's before
 * the handler runs. */
/* API-managed sources: the router checked the scope and the path tenant. */
static enum MHD_Result sources_route(ak_admin_call_t *call) {
  return ak_sources_api_handle(call);
}

static const ak_admin_route_t routes[] = {
    {"GET", "/health", AK_SCOPE_OPEN, 0, get_health},
    {"GET", "/ready", AK_SCOPE_OPEN, 0, get_ready},
    {"GET", "/metrics", AK_SCOPE_METRICS_READ, AK_ROUTE_NODE, get_metrics},
    {"GET", "/v1/config", AK_SCOPE_CONFIG_READ, AK_ROUTE_NODE, get_config},
    {"GET", "/v1/wal", AK_SCOPE_CONFIG_READ, AK_ROUTE_NODE, get_wal},
    {"GET", "/v1/log-level", AK_SCOPE_CONFIG_READ, AK_ROUTE_NODE, get_log_level},
    {"PUT", "/v1/log-level", AK_SCOPE_LOG_LEVEL_WRITE, AK_ROUTE_NODE, put_log_level},
    {"GET", "/v1/hooks/{id}", AK_SCOPE_HOOKS_READ, 0, get_hook},
    {"GET", "/v1/quarantine", AK_SCOPE_QUARANTINE_READ, 0, pen_list},
    {"DELETE", "/v1/quarantine", AK_SCOPE_QUARANTINE_WRITE, 0, pen_purge},
    {"GET", "/v1/dlq", AK_SCOPE_DLQ_READ, 0, dlq_list},
    {"POST", "/v1/replays", AK_SCOPE_REPLAYS_WRITE, 0, post_replay},
    {"GET", "/v1/replays", AK_SCOPE_REPLAYS_READ, 0, list_replays},
    {"GET", "/v1/replays/{id}", AK_SCOPE_REPLAYS_READ, 0, get_replay},
    {"PATCH", "/v1/replays/{id}", AK_SCOPE_REPLAYS_WRITE, 0, patch_replay},
    {"GET", "/v1/rate-limits", AK_SCOPE_RATE_LIMITS_READ, 0, list_rate_limits},
    {"GET", "/v1/tenants/{tenant}/rate-limit", AK_SCOPE_RATE_LIMITS_READ, 0, get_rate_limit},
    {"PUT", "/v1/tenants/{tenant}/rate-limit", AK_SCOPE_RATE_LIMITS_WRITE, 0, put_rate_limit},
    {"DELETE", "/v1/tenants/{tenant}/rate-limit", AK_SCOPE_RATE_LIMITS_WRITE, 0, delete_rate_limit},
    {"GET", "/v1/audit", AK_SCOPE_AUDIT_READ, 0, get_audit},
    {"GET", "/v1/tenants/{tenant}/sources", AK_SCOPE_SOURCES_READ, 0, sources_route},
    {"POST", "/v1/tenants/{tenant}/sources", AK_SCOPE_SOURCES_WRITE, 0, sources_route},
    {"GET", "/v1/tenants/{tenant}/sources/{name}", AK_SCOPE_SOURCES_READ, 0, sources_route},
    {"PUT", "/v1/tenants/{tenant}/sources/{name}", AK_SCOPE_SOURCES_WRITE, 0, sources_route},
    {"DELETE", "/v1/tenants/{tenant}/sources/{name}", AK_SCOPE_SOURCES_WRITE, 0, sources_route},
};

const ak_admin_route_t *ak_admin_routes(size_t *n) {
  *n = sizeof routes / sizeof routes[0];
  return routes;
}

/* url against pattern, segment by segment; captures into the buffers. */
static bool path_match(const char *pattern, const char *url, char *tenant, char *id, char *name) {
  const char *p = pattern, *u = url;
  while (*p && *u) {
    if (*p != '/' || *u != '/') return false;
    p++;
    u++;
    const char *pe = strchr(p, '/'), *ue = strchr(u, '/');
    size_t pl = pe ? (size_t)(pe - p) : strlen(p), ul = ue ? (size_t)(ue - u) : strlen(u);
    if (pl > 2 && p[0] == '{' && p[pl - 1] == '}') {
      char *dst = !strncmp(p, "{tenant}", pl) ? tenant : !strncmp(p, "{id}", pl) ? id : name;
      if (ul == 0 || ul >= AK_ADMIN_CAPTURE_MAX) return false;
      if (dst) {
        memcpy(dst, u, ul);
        dst[ul] = 0;
      }
    } else if (pl != ul || memcmp(p, u, pl) != 0) {
      return false;
    }
    p += pl;
    u += ul;
  }
  return !*p && !*u;
}

const ak_admin_route_t *ak_admin_route_match(const char *method, const char *url, char *tenant, char *id, char *name,
                                             bool *path_known) {
  *path_known = false;
  const char *m = !strcmp(method, "HEAD") ? "GET" : method;
  for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
    if (!path_match(routes[i].pattern, url, tenant, id, name)) continue;
    *path_known = true;
    if (!strcmp(routes[i].method, m)) return &routes[i];
  }
  return NULL;
}

/* ------------------------------------------------------------------- listener ---- */

static void request_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                              enum MHD_RequestTerminationCode toe) {
  (void)cls;
  (void)c;
  (void)toe;
  admin_req_t *r = *con_cls;
  if (r) {
    free(r->body);
    free(r);
    *con_cls = NULL;
  }
}

static void call_init(ak_admin_t *a, admin_req_t *ar, struct MHD_Connection *c, const char *url, const char *method,
                      ak_admin_call_t *call) {
  memset(call, 0, sizeof *call);
  call->inst = a->inst;
  call->conn = c;
  call->method = method;
  call->url = url;
  call->route = ar->route;
  call->tenant = ar->tenant[0] ? ar->tenant : NULL;
  call->id = ar->id[0] ? ar->id : NULL;
  call->name = ar->name[0] ? ar->name : NULL;
  call->body = ar->body;
  call->body_len = ar->len;
  call->principal = ar->principal;
  call->scope = ar->principal ? ar->principal->tenants : NULL;
  call->who = &ar->who;
  call->request_id = ar->request_id;
}

static void client_text(struct MHD_Connection *c, char *out, size_t n) {
  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  snprintf(out, n, "unknown");
  if (!ci || !ci->client_addr) return;
  const struct sockaddr *sa = ci->client_addr;
  if (sa->sa_family == AF_INET) inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out, (socklen_t)n);
  else if (sa->sa_family == AF_INET6)
    inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, out, (socklen_t)n);
}

/* The checks every request passes before its handler (and before its body is read):
 * who the caller is (401), the route (404), the route's scope and, for a node-wide
 * route, every tenant (403), the path tenant's form (400) and scope (403). MHD_YES with
 * ar->refused set when it answered. */
static enum MHD_Result admit(ak_admin_t *a, admin_req_t *ar, ak_admin_call_t *call) {
  bool path_known = false;
  ar->route = ak_admin_route_match(call->method, call->url, ar->tenant, ar->id, ar->name, &path_known);
  call->route = ar->route;
  ar->refused = true;
  if (!ar->route || ar->route->scope != AK_SCOPE_OPEN) {
    ar->principal = ak_auth_check(a->auth, MHD_lookup_connection_value(call->conn, MHD_HEADER_KIND, "Authorization"));
    if (!ar->principal) {
      ak_log(AK_LOG_DEBUG, "admin", "unauthorized request", "client=%s request_id=%s", ar->client, ar->request_id);
      return ak_admin_error(call, 401, "unauthorized");
    }
    ar->who.actor = ar->principal->name;
  }
  if (!ar->route) return ak_admin_error(call, 404, "not_found");
  const ak_admin_route_t *rt = ar->route;
  if (rt->scope != AK_SCOPE_OPEN) {
    if (!ak_principal_has(ar->principal, rt->scope)) return forbidden(call, rt->scope, NULL);
    if ((rt->flags & AK_ROUTE_NODE) && !ak_principal_all_tenants(ar->principal)) return forbidden(call, rt->scope, "*");
    if (ar->tenant[0]) {
      if (!ak_tenant_valid(ar->tenant, strlen(ar->tenant))) return ak_admin_error(call, 400, "invalid_tenant");
      if (!ak_principal_tenant(ar->principal, ar->tenant, strlen(ar->tenant)))
        return forbidden(call, rt->scope, ar->tenant);
    }
  }
  ar->refused = false;
  return MHD_YES;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload_data, size_t *upload_data_size,
                               void **con_cls) {
  (void)version;
  ak_admin_t *a = cls;
  admin_req_t *ar = *con_cls;
  ak_admin_call_t call;
  if (ar == NULL) {
    ar = calloc(1, sizeof *ar);
    if (!ar) return MHD_NO;
    *con_cls = ar;
    uint8_t rid[16];
    ak_uuid7_new(&a->inst->ids, ak_now_ms(), rid);
    ak_uuid_format(rid, ar->request_id);
    client_text(c, ar->client, sizeof ar->client);
    ar->who = (ak_audit_who_t){.actor = "anonymous", .client = ar->client, .request_id = ar->request_id};
    call_init(a, ar, c, url, method, &call);
    enum MHD_Result r = admit(a, ar, &call);
    if (ar->refused) return r;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) return MHD_YES; /* read the body first */
    call_init(a, ar, c, url, method, &call);
    return ar->route->fn(&call);
  }
  if (*upload_data_size) {
    /* bounded: what passes AK_ADMIN_MAX_BODY is dropped and the request answered 413 */
    size_t n = *upload_data_size;
    if (!ar->refused && !ar->too_big && ar->len + n <= AK_ADMIN_MAX_BODY) {
      char *nb = realloc(ar->body, ar->len + n);
      if (!nb) return MHD_NO;
      memcpy(nb + ar->len, upload_data, n);
      ar->body = nb;
      ar->len += n;
    } else {
      ar->too_big = true;
    }
    *upload_data_size = 0;
    return MHD_YES;
  }
  if (ar->refused) return MHD_YES; /* answered already */
  call_init(a, ar, c, url, method, &call);
  if (ar->too_big)
    return ak_admin_json(&call, 413,
                         json_pack("{s:s,s:i}", "error", "payload_too_large", "limit", AK_ADMIN_MAX_BODY));
  return ar->route->fn(&call);
}

ak_admin_t *ak_admin_new(ak_instance_t *inst) {
  ak_admin_t *a = calloc(1, sizeof *a);
  if (!a) return NULL;
  a->inst = inst;
  pthread_mutex_init(&a->log_mu, NULL);
  char *err = NULL;
  a->auth = ak_auth_new(inst->cfg->admin_principals, &err);
  if (!a->auth) {
    ak_log(AK_LOG_ERROR, "admin", "cannot build the admin principals", "reason=\"%s\"", err ? err : "out of memory");
    free(err);
    pthread_mutex_destroy(&a->log_mu);
    free(a);
    return NULL;
  }
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
                          MHD_OPTION_NOTIFY_COMPLETED, request_completed, NULL,
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
  if (ak_auth_count(a->auth) == 0)
    ak_log(AK_LOG_WARNING, "admin",
           "admin.principals is empty: the admin API answers without authentication, on loopback only",
           "admin_ip=%s admin_port=%d", cfg->admin_ip, a->port);
  else
    ak_log(AK_LOG_INFO, "admin", "admin API requires a bearer token", "principals=%zu admin_ip=%s admin_port=%d",
           ak_auth_count(a->auth), cfg->admin_ip, a->port);
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
  ak_auth_free(a->auth);
  pthread_mutex_destroy(&a->log_mu);
  free(a);
}
