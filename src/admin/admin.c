/* Admin API: GET /health, /ready, /metrics, /v1/hooks/{id}; the quarantine pen (GET and
 * DELETE /v1/quarantine, release by POST /v1/replays kind quarantine); the dead-letter
 * set (GET /v1/dlq) and dlq replay jobs (POST/GET /v1/replays, GET/PATCH
 * /v1/replays/{id}), which dispatch/replay.c runs; tenant rate limits (GET /v1/rate-limits,
 * GET/PUT/DELETE /v1/tenants/{t}/rate-limit, edge/quota.c keeps them); sources under
 * /v1/tenants/{t}/sources (admin/sources_api.c). Hooks are read from the store by id
 * (index 'i' -> seq -> hooks). Request bodies are read up to AK_ADMIN_MAX_BODY; never a
 * body from an unbounded read. */
#include <arpa/inet.h>
#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "admin/admin.h"
#include "admin/ops.h"
#include "admin/sources_api.h"
#include "core/envelope.h"
#include "core/httpx.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/sources.h"
#include "dispatch/replay.h"
#include "edge/quota.h"
#include "edge/route.h"
#include "queue/quarantine.h"
#include "queue/writer.h"
#include "store/store.h"
#include "verify/verifier.h"

#define AK_ADMIN_MAX_BODY 65536

/* One admin request: the body read so far. */
typedef struct admin_req {
  char *body;
  size_t len;
  bool too_big;
} admin_req_t;

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

/* ------------------------------------------------------------ quarantine pen ---- */

static enum MHD_Result invalid_filter(struct MHD_Connection *c, const char *field) {
  return ak_http_json(c, 400, json_pack("{s:s,s:s}", "error", "invalid_filter", "field", field), 0);
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

/* source_id, id, since, until from the query string into f; NULL, or the bad field. */
static const char *query_filter(struct MHD_Connection *c, ak_pen_filter_t *f, bool window) {
  const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "source_id");
  if (v) {
    if (!*v) return "source_id";
    f->source_id = v;
  }
  if (!window) return NULL;
  v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "id");
  if (v) {
    if (!ak_uuid_parse(v, f->id)) return "id";
    f->has_id = true;
  }
  v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "since");
  if (v && (!parse_i64(v, &f->since_ms) || f->since_ms < 0)) return "since";
  v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "until");
  if (v && (!parse_i64(v, &f->until_ms) || f->until_ms < 0 || f->until_ms < f->since_ms)) return "until";
  return NULL;
}

static enum MHD_Result pen_list(ak_admin_t *a, struct MHD_Connection *c) {
  ak_pen_filter_t f;
  ak_pen_filter_init(&f, 100);
  const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "limit");
  if (v && !parse_i64(v, &f.limit)) return invalid_filter(c, "limit");
  f.limit = clamp64(f.limit, 1, 1000);
  const char *bad = query_filter(c, &f, false);
  if (bad) return invalid_filter(c, bad);
  ak_pen_entry_t *es = NULL;
  size_t n = 0;
  if (ak_pen_list(a->inst->store, &f, false, &es, &n) != 0) return ak_http_error(c, 503, "store_unavailable", 1);
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
  return ak_http_json(c, 200, json_pack("{s:o}", "entries", arr), 0);
}

static enum MHD_Result pen_purge(ak_admin_t *a, struct MHD_Connection *c) {
  ak_pen_filter_t f;
  ak_pen_filter_init(&f, 1000);
  const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "limit");
  if (v && !parse_i64(v, &f.limit)) return invalid_filter(c, "limit");
  f.limit = clamp64(f.limit, 1, 10000);
  const char *bad = query_filter(c, &f, true);
  if (bad) return invalid_filter(c, bad);
  if (!a->inst->pen) return ak_http_error(c, 503, "store_unavailable", 1);
  int64_t deleted = 0, bytes = 0;
  if (ak_pen_purge(a->inst->pen, a->inst->store, &f, &deleted, &bytes) != 0)
    return ak_http_error(c, 503, "store_unavailable", 1);
  return ak_http_json(c, 200, json_pack("{s:I,s:I}", "deleted", (json_int_t)deleted, "bytes", (json_int_t)bytes), 0);
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

static enum MHD_Result role_not_enabled(struct MHD_Connection *c, const char *role) {
  return ak_http_json(c, 409, json_pack("{s:s,s:s}", "error", "role_not_enabled", "role", role), 0);
}

/* POST /v1/replays kind dlq: a job the dispatch thread runs (dispatch/replay.c). */
static enum MHD_Result post_dlq_replay(ak_admin_t *a, struct MHD_Connection *c, const ak_pen_filter_t *f,
                                       int64_t rate, int64_t max_lag) {
  ak_instance_t *inst = a->inst;
  if (!(inst->cfg->roles & AK_ROLE_DISPATCH)) return role_not_enabled(c, "dispatch");
  if (!inst->replays) return ak_http_error(c, 503, "store_unavailable", 1);
  ak_replay_filter_t rf = {.source_id = f->source_id, .has_id = f->has_id};
  memcpy(rf.id, f->id, 16);
  rf.has_since = f->since_ms != INT64_MIN;
  rf.since_ms = f->since_ms;
  rf.has_until = f->until_ms != INT64_MAX;
  rf.until_ms = f->until_ms;
  json_t *out = NULL;
  switch (ak_replays_create(inst->replays, &rf, rate, max_lag, &out)) {
  case AK_REPLAY_OK:
    return ak_http_json(c, 202, out, 0);
  case AK_REPLAY_EXISTS:
    return ak_http_json(c, 200, out, 0);
  case AK_REPLAY_TOO_MANY:
    return ak_http_json(c, 409, json_pack("{s:s,s:i}", "error", "too_many_replays", "limit", AK_REPLAY_MAX_ACTIVE),
                        0);
  default:
    return ak_http_error(c, 503, "store_unavailable", 1);
  }
}

/* POST /v1/replays. Kind quarantine runs to completion in the request; kind dlq creates
 * a job. Both take the same filter keys (on received_at for quarantine, on dead-letter
 * time for dlq). */
static enum MHD_Result post_replay(ak_admin_t *a, struct MHD_Connection *c, const admin_req_t *r) {
  if (!r->len) return invalid_filter(c, "kind");
  json_error_t jerr;
  json_t *b = json_loadb(r->body, r->len, JSON_REJECT_DUPLICATES, &jerr);
  if (!b || !json_is_object(b)) {
    json_decref(b);
    return invalid_filter(c, "body");
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
    enum MHD_Result res = invalid_filter(c, bad);
    json_decref(filter);
    json_decref(b);
    return res;
  }
  if (dlq) {
    enum MHD_Result res = post_dlq_replay(a, c, &f, rate, max_lag);
    json_decref(filter);
    json_decref(b); /* f.source_id pointed into b: the job keeps its own copy */
    return res;
  }
  ak_instance_t *inst = a->inst;
  if (!(inst->cfg->roles & AK_ROLE_EDGE)) {
    json_decref(filter);
    json_decref(b);
    return role_not_enabled(c, "edge");
  }
  int64_t created = ak_now_ms();
  ak_pen_release_result_t res;
  int rc = inst->pen && inst->writer ? ak_pen_release(inst->pen, inst, &f, pen_check, inst, &res) : -1;
  json_decref(b); /* f.source_id pointed into b: not used past here */
  if (rc != 0) {
    json_decref(filter);
    return ak_http_error(c, 503, "store_unavailable", 1);
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
  ak_log(AK_LOG_INFO, "quarantine", "release finished", "replay_id=%s scanned=%lld moved=%lld skipped=%lld", rids,
         (long long)res.scanned, (long long)res.moved, (long long)res.skipped);
  return ak_http_json(c, 202, j, 0);
}

/* GET /v1/replays and GET /v1/replays/{id}: dlq jobs (a quarantine release finishes in
 * its request and is not kept). */
static enum MHD_Result get_replays(ak_admin_t *a, struct MHD_Connection *c, const char *idtext) {
  if (!(a->inst->cfg->roles & AK_ROLE_DISPATCH)) return role_not_enabled(c, "dispatch");
  if (!a->inst->replays) return ak_http_error(c, 503, "store_unavailable", 1);
  if (!idtext) return ak_http_json(c, 200, ak_replays_list(a->inst->replays), 0);
  uint8_t id[16];
  json_t *j = ak_uuid_parse(idtext, id) ? ak_replays_get(a->inst->replays, id) : NULL;
  if (!j) return ak_http_error(c, 404, "replay_not_found", 0);
  return ak_http_json(c, 200, j, 0);
}

/* PATCH /v1/replays/{id} {state?, rate?, max_lag_ms?} */
static enum MHD_Result patch_replay(ak_admin_t *a, struct MHD_Connection *c, const char *idtext,
                                    const admin_req_t *r) {
  json_t *b = r->len ? json_loadb(r->body, r->len, JSON_REJECT_DUPLICATES, NULL) : NULL;
  if (!b || !json_is_object(b)) {
    json_decref(b);
    return invalid_filter(c, "body");
  }
  ak_replay_patch_t p = {.state = -1};
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
    res = invalid_filter(c, bad);
    json_decref(b);
    return res;
  }
  json_decref(b);
  if (!(a->inst->cfg->roles & AK_ROLE_DISPATCH)) return role_not_enabled(c, "dispatch");
  if (!a->inst->replays) return ak_http_error(c, 503, "store_unavailable", 1);
  uint8_t id[16];
  if (!ak_uuid_parse(idtext, id)) return ak_http_error(c, 404, "replay_not_found", 0);
  json_t *out = NULL;
  switch (ak_replays_patch(a->inst->replays, id, &p, &out)) {
  case AK_REPLAY_OK:
    return ak_http_json(c, 200, out, 0);
  case AK_REPLAY_NOT_FOUND:
    return ak_http_error(c, 404, "replay_not_found", 0);
  case AK_REPLAY_FINISHED:
    return ak_http_error(c, 409, "replay_finished", 0);
  default:
    return ak_http_error(c, 503, "store_unavailable", 1);
  }
}

/* GET /v1/dlq?source_id=&since=&limit= */
static enum MHD_Result dlq_list(ak_admin_t *a, struct MHD_Connection *c) {
  int64_t since = -1, limit = 100;
  const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "since");
  if (v && (!parse_i64(v, &since) || since < 0)) return invalid_filter(c, "since");
  v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "limit");
  if (v && !parse_i64(v, &limit)) return invalid_filter(c, "limit");
  limit = clamp64(limit, 0, 1000);
  const char *source = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "source_id");
  if (source && !*source) return invalid_filter(c, "source_id");
  if (!(a->inst->cfg->roles & AK_ROLE_DISPATCH)) return role_not_enabled(c, "dispatch");
  json_t *out = NULL;
  if (ak_replays_dlq_list(a->inst->store, source, since, limit, &out) != 0)
    return ak_http_error(c, 503, "store_unavailable", 1);
  return ak_http_json(c, 200, out, 0);
}

/* ------------------------------------------------------------ rate limits ---- */

/* "/v1/tenants/{t}/rate-limit" -> t (into buf); NULL for any other path. */
static const char *rate_limit_tenant(const char *url, char *buf, size_t n) {
  static const char pre[] = "/v1/tenants/", post[] = "/rate-limit";
  size_t ul = strlen(url), pl = sizeof pre - 1, sl = sizeof post - 1;
  if (ul <= pl + sl || strncmp(url, pre, pl) || strcmp(url + ul - sl, post)) return NULL;
  size_t tl = ul - pl - sl;
  if (tl >= n) tl = n - 1;
  memcpy(buf, url + pl, tl);
  buf[tl] = 0;
  return buf;
}

static enum MHD_Result rate_limit(ak_admin_t *a, struct MHD_Connection *c, const char *tenant, const char *method,
                                  const admin_req_t *r) {
  ak_instance_t *inst = a->inst;
  if (!(inst->cfg->roles & AK_ROLE_EDGE)) return role_not_enabled(c, "edge");
  if (!inst->quota) return ak_http_error(c, 503, "store_unavailable", 1);
  if (!ak_tenant_valid(tenant, strlen(tenant))) return ak_http_error(c, 400, "invalid_tenant", 0);
  if (!strcmp(method, "GET") || !strcmp(method, "HEAD"))
    return ak_http_json(c, 200, ak_quota_tenant_json(inst->quota, tenant), 0);
  if (!strcmp(method, "DELETE")) {
    int rc = ak_quota_delete(inst->quota, tenant);
    if (rc == 1) return ak_http_error(c, 404, "rate_limit_not_found", 0);
    if (rc != 0) return ak_http_error(c, 503, "store_unavailable", 1);
    ak_log(AK_LOG_INFO, "rate_limit", "override removed", "tenant=%s", tenant);
    return ak_http_reply(c, 204, "application/json", "", 0, 0);
  }
  if (strcmp(method, "PUT") != 0) return ak_http_error(c, 404, "not_found", 0);
  json_t *b = r->len ? json_loadb(r->body, r->len, JSON_REJECT_DUPLICATES, NULL) : NULL;
  ak_ratelimit_t l;
  char field[96] = "", msg[96] = "";
  int bad = !b ? (snprintf(field, sizeof field, "body"), snprintf(msg, sizeof msg, "must be a JSON object"), 1)
               : ak_ratelimit_parse(b, &l, field, sizeof field, msg, sizeof msg) != 0;
  json_decref(b);
  if (bad)
    return ak_http_json(c, 400, json_pack("{s:s,s:s,s:s}", "error", "invalid_rate_limit", "field",
                                          *field ? field : "body", "message", msg), 0);
  if (ak_quota_put(inst->quota, tenant, &l) != 0) return ak_http_error(c, 503, "store_unavailable", 1);
  ak_log(AK_LOG_INFO, "rate_limit", "override set", "tenant=%s rate=%g burst=%lld bytes_rate=%g bytes_burst=%lld "
         "max_body_bytes=%lld", tenant, l.hooks.rate, (long long)l.hooks.burst, l.bytes.rate,
         (long long)l.bytes.burst, (long long)l.max_body_bytes);
  return ak_http_json(c, 200, ak_quota_tenant_json(inst->quota, tenant), 0);
}

static enum MHD_Result rate_limits(ak_admin_t *a, struct MHD_Connection *c) {
  if (!(a->inst->cfg->roles & AK_ROLE_EDGE)) return role_not_enabled(c, "edge");
  if (!a->inst->quota) return ak_http_error(c, 503, "store_unavailable", 1);
  return ak_http_json(c, 200, ak_quota_list_json(a->inst->quota), 0);
}

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

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload_data, size_t *upload_data_size,
                               void **con_cls) {
  (void)version;
  ak_admin_t *a = cls;
  admin_req_t *ar = *con_cls;
  char tbuf[128];
  const char *rl_tenant = rate_limit_tenant(url, tbuf, sizeof tbuf);
  if (ar == NULL) {
    ar = calloc(1, sizeof *ar);
    if (!ar) return MHD_NO;
    *con_cls = ar;
    if (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0) goto route;
    return MHD_YES;
  }
  if (*upload_data_size) {
    /* bounded: what passes AK_ADMIN_MAX_BODY is dropped and the request answered 413 */
    size_t n = *upload_data_size;
    if (!ar->too_big && ar->len + n <= AK_ADMIN_MAX_BODY) {
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
  if (ar->too_big)
    return ak_http_json(c, 413, json_pack("{s:s,s:i}", "error", "payload_too_large", "limit", AK_ADMIN_MAX_BODY), 0);
  if (strcmp(url, "/v1/quarantine") == 0 && strcmp(method, "DELETE") == 0) return pen_purge(a, c);
  if (strcmp(url, "/v1/replays") == 0 && strcmp(method, "POST") == 0) return post_replay(a, c, ar);
  if (strncmp(url, "/v1/replays/", 12) == 0 && strcmp(method, "PATCH") == 0) return patch_replay(a, c, url + 12, ar);
  if (rl_tenant) return rate_limit(a, c, rl_tenant, method, ar);
  if (ak_sources_api_match(url)) return ak_sources_api_handle(a->inst, c, url, method, ar->body, ar->len);
  if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) return ak_http_error(c, 404, "not_found", 0);
route:
  if (strcmp(url, "/health") == 0) return ak_http_health(a->inst, c);
  if (strcmp(url, "/ready") == 0) {
    unsigned st;
    return ak_http_ready(a->inst, c, &st);
  }
  if (strcmp(url, "/metrics") == 0) {
    if (a->inst->writer) ak_writer_sample(a->inst->writer);
    ak_pen_sample(a->inst->pen);
    size_t len;
    char *text = ak_metrics_render(a->inst->metrics, &len);
    enum MHD_Result r = ak_http_reply(c, 200, "text/plain; version=0.0.4", text, len, 0);
    free(text);
    return r;
  }
  if (strcmp(url, "/v1/config") == 0) return ak_http_json(c, 200, ak_admin_config_view(a->inst), 0);
  if (strcmp(url, "/v1/wal") == 0) return ak_http_json(c, 200, ak_admin_wal_view(a->inst), 0);
  if (strncmp(url, "/v1/hooks/", 10) == 0) return get_hook(a, c, url + 10);
  if (strcmp(url, "/v1/quarantine") == 0) return pen_list(a, c);
  if (strcmp(url, "/v1/dlq") == 0) return dlq_list(a, c);
  if (strcmp(url, "/v1/rate-limits") == 0) return rate_limits(a, c);
  if (rl_tenant) return rate_limit(a, c, rl_tenant, method, ar);
  if (ak_sources_api_match(url)) return ak_sources_api_handle(a->inst, c, url, method, NULL, 0);
  if (strcmp(url, "/v1/replays") == 0) return get_replays(a, c, NULL);
  if (strncmp(url, "/v1/replays/", 12) == 0) return get_replays(a, c, url + 12);
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
