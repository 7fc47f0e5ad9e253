/* Replays over the admin API (replays_api.h): POST /v1/replays of kind dlq or archive (a
 * job the dispatch thread runs, dispatch/replay.c), kind quarantine (a release of held hooks,
 * run to completion in the request through queue/quarantine.c, each hook verified
 * again) or kind lifecycle (lifecycle events delivered again by the lifecycle publisher,
 * lifecycle/publisher.h), GET /v1/replays, GET and PATCH /v1/replays/{id}. Never shows or moves a job or
 * a held hook of a tenant outside the caller's scope. */
#include <stdio.h>
#include <string.h>
#include "admin/replays_api.h"
#include "core/clock.h"
#include "core/envelope.h"
#include "core/log.h"
#include "core/sources.h"
#include "dispatch/replay.h"
#include "edge/publish.h"
#include "lifecycle/publisher.h"
#include "queue/quarantine.h"
#include "verify/verifier.h"

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

/* POST /v1/replays kind dlq: a job the dispatch thread runs (dispatch/replay.c). A job
 * moves rows of any tenant its filter matches, so a scoped caller must name a source of
 * one of its tenants. */
static void post_dlq_replay(ak_admin_call_t *call, const ak_pen_filter_t *f, int64_t rate, int64_t max_lag) {
  ak_instance_t *inst = call->inst;
  const char *tenant = NULL;
  if (!ak_admin_may_source(call, f->source_id, &tenant) || (call->scope && !tenant)) {
    ak_admin_forbidden_tenant(call, tenant);
    return;
  }
  if (!(inst->roles & AK_ROLE_DISPATCH)) {
    ak_admin_role_not_enabled(call, "dispatch");
    return;
  }
  if (!inst->replays) {
    ak_admin_error(call, 503, "store_unavailable");
    return;
  }
  ak_replay_filter_t rf = {.source_id = f->source_id, .has_id = f->has_id, .who = call->who, .tenant = tenant};
  memcpy(rf.id, f->id, 16);
  rf.has_since = f->since_ms != INT64_MIN;
  rf.since_ms = f->since_ms;
  rf.has_until = f->until_ms != INT64_MAX;
  rf.until_ms = f->until_ms;
  json_t *out = NULL;
  switch (ak_replays_create(inst->replays, &rf, rate, max_lag, &out)) {
  case AK_REPLAY_OK:
    ak_admin_json(call, 202, out);
    return;
  case AK_REPLAY_EXISTS:
    ak_admin_json(call, 200, out);
    return;
  case AK_REPLAY_TOO_MANY:
    ak_admin_json(call, 409, json_pack("{s:s,s:i}", "error", "too_many_replays", "limit", AK_REPLAY_MAX_ACTIVE));
    return;
  default:
    ak_admin_error(call, 503, "store_unavailable");
    return;
  }
}

/* The parts of an archive job's request past the common filter keys. */
typedef struct archive_req {
  bool has_from, has_to;
  int64_t from, to;
  const char *tenant_id;
  uint16_t sinks[AK_SOURCE_MAX_SINKS];
  size_t nsinks;
  bool has_sinks;
} archive_req_t;

/* sinks: a non-empty list of distinct sink indexes (0..31). */
static bool parse_sinks(json_t *val, archive_req_t *a) {
  size_t n = json_array_size(val);
  if (!json_is_array(val) || n == 0 || n > AK_SOURCE_MAX_SINKS) return false;
  uint32_t seen = 0;
  for (size_t i = 0; i < n; i++) {
    json_t *x = json_array_get(val, i);
    if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= AK_SOURCE_MAX_SINKS) return false;
    uint32_t bit = 1u << json_integer_value(x);
    if (seen & bit) return false;
    seen |= bit;
    a->sinks[a->nsinks++] = (uint16_t)json_integer_value(x);
  }
  a->has_sinks = true;
  return true;
}

/* POST /v1/replays kind archive: a job that re-delivers archived hooks received in
 * [from, to] (dispatch/replay.c moves them; archive/replay_reader.c reads them). Needs the
 * dispatch role and the storage role (the archive). A scoped caller must name a source
 * or a tenant_id of one of its tenants. */
static void post_archive_replay(ak_admin_call_t *call, const ak_pen_filter_t *f, const archive_req_t *a, int64_t rate,
                                int64_t max_lag) {
  ak_instance_t *inst = call->inst;
  const char *tenant = NULL;
  if (!ak_admin_may_source(call, f->source_id, &tenant)) {
    ak_admin_forbidden_tenant(call, tenant);
    return;
  }
  if (!tenant) tenant = a->tenant_id;
  if (call->scope && (!tenant || !ak_tenant_scope_has(call->scope, tenant, strlen(tenant)) ||
                      (a->tenant_id && !ak_tenant_scope_has(call->scope, a->tenant_id, strlen(a->tenant_id))))) {
    ak_admin_forbidden_tenant(call, a->tenant_id ? a->tenant_id : tenant);
    return;
  }
  if (!(inst->roles & AK_ROLE_DISPATCH)) {
    ak_admin_role_not_enabled(call, "dispatch");
    return;
  }
  if (!(inst->roles & AK_ROLE_STORAGE)) {
    ak_admin_role_not_enabled(call, "storage");
    return;
  }
  if (!inst->replays) {
    ak_admin_error(call, 503, "store_unavailable");
    return;
  }
  ak_replay_filter_t rf = {.is_archive = true, .from_ms = a->from, .to_ms = a->to, .tenant_id = a->tenant_id,
                           .sinks = a->has_sinks ? a->sinks : NULL, .nsinks = a->nsinks,
                           .source_id = f->source_id, .who = call->who, .tenant = tenant};
  json_t *out = NULL;
  switch (ak_replays_create(inst->replays, &rf, rate, max_lag, &out)) {
  case AK_REPLAY_OK:
    ak_admin_json(call, 202, out);
    return;
  case AK_REPLAY_EXISTS:
    ak_admin_json(call, 200, out);
    return;
  case AK_REPLAY_TOO_MANY:
    ak_admin_json(call, 409, json_pack("{s:s,s:i}", "error", "too_many_replays", "limit", AK_REPLAY_MAX_ACTIVE));
    return;
  default:
    ak_admin_error(call, 503, "store_unavailable");
    return;
  }
}

/* POST /v1/replays kind lifecycle {from_seq?, to_seq?}: the lifecycle events of the audit
 * rows with from_seq <= seq <= to_seq (default: every one still in the trail) delivered
 * again to every lifecycle sink, with their ids. The events span tenants: an unscoped
 * caller only. One at a time (409 too_many_replays). */
static void post_lifecycle_replay(ak_admin_call_t *call, const json_t *b) {
  ak_instance_t *inst = call->inst;
  uint64_t from = 1, to = UINT64_MAX;
  const char *key;
  json_t *val;
  const char *bad = NULL;
  json_object_foreach((json_t *)b, key, val) {
    if (!strcmp(key, "kind")) continue;
    if (strcmp(key, "from_seq") && strcmp(key, "to_seq")) {
      bad = key;
      break;
    }
    if (!json_is_integer(val) || json_integer_value(val) < 1) {
      bad = key;
      break;
    }
    if (key[0] == 'f') from = (uint64_t)json_integer_value(val);
    else to = (uint64_t)json_integer_value(val);
  }
  if (!bad && to < from) bad = "to_seq";
  if (bad) {
    ak_admin_invalid_filter(call, bad);
    return;
  }
  if (call->scope) {
    ak_admin_forbidden_tenant(call, NULL);
    return;
  }
  if (!inst->lifecycle) {
    ak_admin_json(call, 409, json_pack("{s:s,s:s}", "error", "lifecycle_disabled", "message",
                                       "lifecycle events are off: set lifecycle.sinks"));
    return;
  }
  json_t *out = NULL;
  switch (ak_lifecycle_replay(inst->lifecycle, from, to, call->who, &out)) {
  case AK_LC_REPLAY_OK:
    ak_admin_json(call, 202, out);
    return;
  case AK_LC_REPLAY_BUSY:
    ak_admin_json(call, 409, json_pack("{s:s,s:i,s:o}", "error", "too_many_replays", "limit", 1, "replay", out));
    return;
  default:
    json_decref(out);
    ak_admin_error(call, 503, "store_unavailable");
    return;
  }
}

/* POST /v1/replays. Kind quarantine runs to completion in the request; kind dlq creates
 * a job. Both take the same filter keys (on received_at for quarantine, on dead-letter
 * time for dlq). */
void ak_replays_api_post(ak_admin_call_t *call, const ak_admin_path_t *path) {
  (void)path;
  if (!call->body_len) {
    ak_admin_invalid_filter(call, "kind");
    return;
  }
  json_error_t jerr;
  json_t *b = json_loadb(call->body, call->body_len, JSON_REJECT_DUPLICATES, &jerr);
  if (!b || !json_is_object(b)) {
    json_decref(b);
    ak_admin_invalid_filter(call, "body");
    return;
  }
  const char *bad = NULL;
  const char *kind = json_string_value(json_object_get(b, "kind"));
  if (kind && !strcmp(kind, "lifecycle")) {
    post_lifecycle_replay(call, b);
    json_decref(b);
    return;
  }
  bool dlq = kind && !strcmp(kind, "dlq");
  bool archive = kind && !strcmp(kind, "archive");
  archive_req_t ar = {0};
  ak_pen_filter_t f;
  ak_pen_filter_init(&f, 10000);
  int64_t rate = AK_REPLAY_RATE_DEFAULT, max_lag = AK_REPLAY_LAG_DEFAULT;
  json_t *filter = json_object();
  const char *key;
  json_t *val;
  if (!kind || (strcmp(kind, "quarantine") != 0 && !dlq && !archive)) bad = "kind";
  json_object_foreach(b, key, val) {
    if (bad) break;
    if (!strcmp(key, "kind")) continue;
    if (!strcmp(key, "source_id")) {
      if (!json_is_string(val) || !json_string_length(val)) bad = key;
      else f.source_id = json_string_value(val);
    } else if (archive && (!strcmp(key, "from") || !strcmp(key, "to"))) {
      if (!json_is_integer(val) || json_integer_value(val) < 0) bad = key;
      else if (key[0] == 'f') ar.has_from = true, ar.from = json_integer_value(val);
      else ar.has_to = true, ar.to = json_integer_value(val);
    } else if (archive && !strcmp(key, "tenant_id")) {
      if (!json_is_string(val) || !json_string_length(val)) bad = key;
      else ar.tenant_id = json_string_value(val);
    } else if (archive && !strcmp(key, "sinks")) {
      if (!parse_sinks(val, &ar)) bad = key;
    } else if (!archive && !strcmp(key, "id")) { /* id, since, until: not an archive job's keys */
      if (!json_is_string(val) || !ak_uuid_parse(json_string_value(val), f.id)) bad = key;
      else f.has_id = true;
    } else if (!archive && (!strcmp(key, "since") || !strcmp(key, "until"))) {
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
  if (!bad && archive && !ar.has_from) bad = "from";
  if (!bad && archive && !ar.has_to) bad = "to";
  if (!bad && archive && ar.from > ar.to) bad = "to";
  if (!bad && archive && ar.has_sinks && f.source_id) {
    /* with a source named, its current sinks say which indexes mean anything */
    ak_source_t *src = call->inst->sources ? ak_sources_get(call->inst->sources, f.source_id, strlen(f.source_id))
                                           : NULL;
    for (size_t i = 0; src && i < ar.nsinks && !bad; i++)
      if (ar.sinks[i] >= src->cfg.nsinks) bad = "sinks";
    if (src) ak_source_release(src);
  }
  if (bad) {
    ak_admin_invalid_filter(call, bad);
    json_decref(filter);
    json_decref(b);
    return;
  }
  if (archive) {
    post_archive_replay(call, &f, &ar, rate, max_lag);
    json_decref(filter);
    json_decref(b); /* f.source_id and ar.tenant_id pointed into b: the job keeps its own copies */
    return;
  }
  if (dlq) {
    post_dlq_replay(call, &f, rate, max_lag);
    json_decref(filter);
    json_decref(b); /* f.source_id pointed into b: the job keeps its own copy */
    return;
  }
  ak_instance_t *inst = call->inst;
  const char *t;
  bool refuse = true;
  if (!ak_admin_may_source(call, f.source_id, &t)) ak_admin_forbidden_tenant(call, t);
  else if (!(inst->roles & AK_ROLE_EDGE)) ak_admin_role_not_enabled(call, "edge");
  else if (ak_publish_direct(inst->cfg)) ak_admin_error(call, 409, "wal_disabled"); /* a release stores hooks */
  else refuse = false;
  if (refuse) {
    json_decref(filter);
    json_decref(b);
    return;
  }
  f.tenants = call->scope;
  f.who = call->who;
  int64_t created = ak_now_ms();
  ak_pen_release_result_t res;
  int rc = inst->pen && inst->writer ? ak_pen_release(inst->pen, inst, &f, pen_check, inst, &res) : -1;
  json_decref(b); /* f.source_id pointed into b: not used past here */
  if (rc != 0) {
    json_decref(filter);
    ak_admin_error(call, 503, "store_unavailable");
    return;
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
  ak_admin_json(call, 202, j);
}

/* A job as the caller may see it: its source's tenant in scope (a job with no source
 * filter touches every tenant). NULL (and j released) when hidden. */
static json_t *visible_job(ak_admin_call_t *call, json_t *j, const char **tenant) {
  const char *src = json_string_value(json_object_get(json_object_get(j, "filter"), "source_id"));
  const char *t = ak_admin_source_tenant(call->inst, src);
  /* an archive job without a source: its tenant_id (the job only touches that tenant's hooks) */
  if (!src && !t) t = json_string_value(json_object_get(json_object_get(j, "filter"), "tenant_id"));
  if (tenant) *tenant = t;
  if (call->scope && (!t || !ak_tenant_scope_has(call->scope, t, strlen(t)))) {
    json_decref(j);
    return NULL;
  }
  return j;
}

/* GET /v1/replays: dlq jobs (a quarantine release finishes in its request and is not
 * kept), newest first. */
void ak_replays_api_list(ak_admin_call_t *call, const ak_admin_path_t *path) {
  (void)path;
  if (!(call->inst->roles & AK_ROLE_DISPATCH)) {
    ak_admin_role_not_enabled(call, "dispatch");
    return;
  }
  if (!call->inst->replays) {
    ak_admin_error(call, 503, "store_unavailable");
    return;
  }
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
  ak_admin_json(call, 200, all);
}

void ak_replays_api_get(ak_admin_call_t *call, const ak_admin_path_t *path) {
  json_t *lj = call->inst->lifecycle && !call->scope ? ak_lifecycle_replay_get(call->inst->lifecycle, path->id) : NULL;
  if (lj) { /* a lifecycle replay (node-wide: unscoped callers only) */
    ak_admin_json(call, 200, lj);
    return;
  }
  if (!(call->inst->roles & AK_ROLE_DISPATCH)) {
    ak_admin_role_not_enabled(call, "dispatch");
    return;
  }
  if (!call->inst->replays) {
    ak_admin_error(call, 503, "store_unavailable");
    return;
  }
  uint8_t id[16];
  json_t *j = ak_uuid_parse(path->id, id) ? ak_replays_get(call->inst->replays, id) : NULL;
  if (j) j = visible_job(call, j, NULL);
  if (!j) {
    ak_admin_error(call, 404, "replay_not_found");
    return;
  }
  ak_admin_json(call, 200, j);
}

/* PATCH /v1/replays/{id} {state?, rate?, max_lag_ms?} */
void ak_replays_api_patch(ak_admin_call_t *call, const ak_admin_path_t *path) {
  json_t *b = call->body_len ? json_loadb(call->body, call->body_len, JSON_REJECT_DUPLICATES, NULL) : NULL;
  if (!b || !json_is_object(b)) {
    json_decref(b);
    ak_admin_invalid_filter(call, "body");
    return;
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
  if (bad) {
    ak_admin_invalid_filter(call, bad);
    json_decref(b);
    return;
  }
  json_decref(b);
  ak_instance_t *inst = call->inst;
  if (!(inst->roles & AK_ROLE_DISPATCH)) {
    ak_admin_role_not_enabled(call, "dispatch");
    return;
  }
  if (!inst->replays) {
    ak_admin_error(call, 503, "store_unavailable");
    return;
  }
  uint8_t id[16];
  json_t *cur = ak_uuid_parse(path->id, id) ? ak_replays_get(inst->replays, id) : NULL;
  if (cur) cur = visible_job(call, cur, &p.tenant);
  if (!cur) {
    ak_admin_error(call, 404, "replay_not_found");
    return;
  }
  json_t *out = NULL;
  ak_replay_result_t rr = ak_replays_patch(inst->replays, id, &p, &out);
  json_decref(cur); /* p.tenant points into the config, not into cur */
  switch (rr) {
  case AK_REPLAY_OK:
    ak_admin_json(call, 200, out);
    return;
  case AK_REPLAY_NOT_FOUND:
    ak_admin_error(call, 404, "replay_not_found");
    return;
  case AK_REPLAY_FINISHED:
    ak_admin_error(call, 409, "replay_finished");
    return;
  default:
    ak_admin_error(call, 503, "store_unavailable");
    return;
  }
}
