/* The sources API (sources_api.h). A change is, in order: checked (the config loader's
 * ak_config_source_check), built into a complete version (verifier, the edge's buckets,
 * the dispatcher's sinks: a sink that can never work refuses it here), stored with its
 * audit row in ONE synced batch, and only then published to the table, so the edge
 * serves it from the next request on and a crash after the 201 cannot lose it. Changes
 * are serialized by the table's write lock; readers never wait on it.
 *
 * A stored row is {"v":1, "tenant", "name", "spec" (as sent, tenant filled in),
 * "created_at", "updated_at", "revision"} and is checked again at every boot, so the
 * defaults and rules of the running version apply. Names are unique on the node, across
 * tenants and the config file's sources, whatever http.routing is: hooks, delivery rows,
 * the dead-letter set, the pen and dedupe keys all name their source by name. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "admin/sources_api.h"
#include "admin/api.h"
#include "core/clock.h"
#include "core/envelope.h"
#include "core/httpx.h"
#include "core/log.h"
#include "core/sources.h"
#include "edge/route.h"
#include "store/batch.h"
#include "store/store.h"

#define RECORD_VERSION 1

/* ------------------------------------------------------------------ store rows ---- */

/* s:<tenant>\0<name>; tenants and names are at most 64 characters */
static size_t source_key(char out[160], const char *tenant, const char *name) {
  size_t tl = strlen(tenant), nl = strlen(name), pl = strlen(AK_KEY_SOURCE);
  memcpy(out, AK_KEY_SOURCE, pl);
  memcpy(out + pl, tenant, tl);
  out[pl + tl] = '\0';
  memcpy(out + pl + tl + 1, name, nl);
  return pl + tl + 1 + nl;
}

static json_t *record(const char *tenant, const char *name, const json_t *spec, int64_t created, int64_t updated,
                      uint64_t revision) {
  return json_pack("{s:i,s:s,s:s,s:O,s:I,s:I,s:I}", "v", RECORD_VERSION, "tenant", tenant, "name", name, "spec",
                   spec, "created_at", (json_int_t)created, "updated_at", (json_int_t)updated, "revision",
                   (json_int_t)revision);
}

/* The audit row of a change goes into wb, the batch that stores the change: the caller,
 * the action, the subject "source:<tenant>/<name>", the stored rows before and after
 * (NULL: none; the trail keeps only their keyed hash) and the revision after the change.
 * -1: no row could be added, so the change is not made (503). */
static int audit_source_change(ak_instance_t *inst, ak_batch_t *wb, const ak_audit_who_t *who,
                               const char *action, const char *tenant, const char *name, const char *before,
                               size_t before_len, const char *after, size_t after_len, uint64_t revision) {
  char subject[200];
  snprintf(subject, sizeof subject, "source:%s/%s", tenant, name);
  ak_audit_entry_t e = {.who = who, .action = action, .tenant = tenant, .subject = subject, .before = before,
                        .before_len = before_len, .after = after, .after_len = after_len,
                        .revision = (int64_t)revision};
  return ak_audit_put(inst->audit, wb, &e);
}

static void scrub_free(char *p, size_t n) {
  if (!p) return;
  explicit_bzero(p, n); /* a row holds the spec's secrets */
  free(p);
}

/* One synced batch: the row (put, or delete when rec is NULL) and its audit row. Under
 * the table's write lock, so the row read as "before" is the one being replaced. */
static int store_change(ak_instance_t *inst, const ak_audit_who_t *who, const char *action, const char *tenant,
                        const char *name, const json_t *rec, uint64_t revision) {
  char key[160];
  size_t kl = source_key(key, tenant, name);
  char *val = rec ? json_dumps(rec, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  if (rec && !val) return -1;
  size_t vl = val ? strlen(val) : 0;
  char *before = NULL;
  size_t bl = 0;
  ak_batch_t *wb = NULL;
  if (ak_store_get(inst->store, AK_CF_DEFAULT, key, kl, &before, &bl) < 0 || !(wb = ak_batch_new(inst->store)) ||
      ak_store_pin(inst->store) != 0) {
    ak_batch_free(wb);
    scrub_free(before, bl);
    scrub_free(val, vl);
    return -1;
  }
  if (val) ak_batch_put(wb, AK_CF_DEFAULT, key, kl, val, vl);
  else ak_batch_delete(wb, AK_CF_DEFAULT, key, kl);
  int rc = audit_source_change(inst, wb, who, action, tenant, name, before, bl, val, vl, revision);
  if (rc == 0) {
    ak_wf_class_t cls = AK_WF_OTHER;
    char *err = NULL;
    rc = ak_audit_commit(inst->audit, inst->store, wb, &cls, &err); /* synced; ends the put */
    if (rc != 0) {
      ak_log(AK_LOG_ERROR, "sources", "source change not stored", "action=%s tenant=%s name=%s class=%s", action,
             tenant, name, ak_wf_class_names[cls]);
      free(err);
    }
  }
  ak_store_unpin(inst->store);
  ak_batch_free(wb);
  scrub_free(before, bl);
  scrub_free(val, vl);
  return rc;
}

/* ------------------------------------------------------------------ boot ---- */

typedef struct {
  ak_instance_t *inst;
  size_t n;
  char *err;
} load_ctx_t;

static int load_one(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  load_ctx_t *lc = ctx;
  ak_instance_t *inst = lc->inst;
  lc->n++;
  if (!inst->cfg->source_store_persistent) return 0;
  size_t pl = strlen(AK_KEY_SOURCE);
  const char *tenant = k + pl, *sep = memchr(tenant, '\0', kl - pl);
  json_t *rec = json_loadb(v, vl, JSON_REJECT_DUPLICATES, NULL);
  const char *name = json_string_value(json_object_get(rec, "name"));
  const char *rtenant = json_string_value(json_object_get(rec, "tenant"));
  const json_t *spec = json_object_get(rec, "spec");
  json_int_t ver = json_integer_value(json_object_get(rec, "v"));
  char label[200];
  snprintf(label, sizeof label, "%.*s/%.*s", sep ? (int)(sep - tenant) : (int)(kl - pl), tenant,
           sep ? (int)(kl - pl - (size_t)(sep - tenant) - 1) : 0, sep ? sep + 1 : "");
  int rc = 1;
  if (!rec || ver != RECORD_VERSION || !name || !rtenant || !json_is_object(spec) || !sep ||
      strlen(rtenant) != (size_t)(sep - tenant) || memcmp(rtenant, tenant, strlen(rtenant)) ||
      strlen(name) != kl - pl - strlen(rtenant) - 1 || memcmp(name, sep + 1, strlen(name))) {
    if (asprintf(&lc->err, "stored source %s is damaged (row %s<tenant>\\0<name> of the default column family)",
                 label, AK_KEY_SOURCE) < 0)
      lc->err = NULL;
    goto out;
  }
  json_t *checked = NULL;
  char *warning = NULL, *why = NULL;
  if (ak_config_source_check(inst->cfg, name, spec, AK_SOURCE_CHECK_STORED, &checked, &warning, &why) != 0) {
    if (asprintf(&lc->err, "stored source %s is not valid under this configuration: %s", label, why) < 0)
      lc->err = NULL;
    free(why);
    goto out;
  }
  if (warning) {
    ak_log(AK_LOG_WARNING, "sources", "stored source breaks the trust rule; served as stored", "source=%s rule=\"%s\"",
           label, warning);
    free(warning);
  }
  ak_source_t *clash = ak_sources_get(inst->sources, name, strlen(name));
  if (clash) {
    if (asprintf(&lc->err, "stored source %s has the name of %s source (tenant %s); names are unique on the node",
                 label, clash->origin == AK_SOURCE_CONFIG ? "the config file's" : "another stored",
                 clash->cfg.tenant) < 0)
      lc->err = NULL;
    ak_source_release(clash);
    json_decref(checked);
    goto out;
  }
  ak_source_meta_t m = {.origin = AK_SOURCE_API,
                        .born_ms = json_integer_value(json_object_get(rec, "created_at")),
                        .updated_ms = json_integer_value(json_object_get(rec, "updated_at")),
                        .revision = (uint64_t)json_integer_value(json_object_get(rec, "revision"))};
  char berr[512] = "";
  ak_source_t *s = ak_sources_make(inst->sources, name, checked, &m, berr, sizeof berr);
  json_decref(checked);
  if (!s || ak_sources_reserve(inst->sources) != 0) {
    if (asprintf(&lc->err, "stored source %s: %s", label, s ? "out of memory" : berr) < 0) lc->err = NULL;
    ak_source_release(s);
    goto out;
  }
  ak_source_release(ak_sources_put(inst->sources, s));
  rc = 0;
out:
  json_decref(rec);
  if (rc && !lc->err) lc->err = strdup("out of memory");
  return rc;
}

int ak_sources_api_load(ak_instance_t *inst, char **err) {
  *err = NULL;
  load_ctx_t lc = {.inst = inst};
  ak_sources_write_lock(inst->sources);
  int rc = ak_store_scan(inst->store, AK_CF_DEFAULT, AK_KEY_SOURCE, strlen(AK_KEY_SOURCE), load_one, &lc);
  ak_sources_write_unlock(inst->sources);
  if (lc.err) {
    *err = lc.err;
    return -1;
  }
  if (rc != 0) {
    *err = strdup("the stored sources cannot be read from the store");
    return -1;
  }
  if (lc.n && !inst->cfg->source_store_persistent)
    ak_log(AK_LOG_WARNING, "sources",
           "the store holds sources created over the admin API, not served: source_store.type is static",
           "stored=%zu", lc.n);
  else if (lc.n)
    ak_log(AK_LOG_INFO, "sources", "stored sources loaded", "sources=%zu", lc.n);
  return 0;
}

/* ------------------------------------------------------------------ views ---- */

static json_t *view(const ak_instance_t *inst, const ak_source_t *s) {
  const ak_config_t *cfg = inst->cfg;
  bool shared = !strcmp(s->cfg.tenant, "default");
  char path[400];
  if (cfg->http_routing == AK_ROUTING_TENANT_PATH)
    snprintf(path, sizeof path, "%s/%s/%s", cfg->http_prefix, shared ? "{tenant}" : s->cfg.tenant, s->cfg.id);
  else
    snprintf(path, sizeof path, "%s/%s", cfg->http_prefix, s->cfg.id);
  json_t *j = json_pack("{s:s,s:s,s:s,s:s,s:s}", "tenant", s->cfg.tenant, "name", s->cfg.id, "source_id",
                        s->cfg.id, "ingest_path", path, "managed_by",
                        s->origin == AK_SOURCE_API ? "api" : "config");
  if (s->origin == AK_SOURCE_API) {
    json_object_set_new(j, "revision", json_integer((json_int_t)s->revision));
    json_object_set_new(j, "created_at", json_integer(s->born_ms));
    json_object_set_new(j, "updated_at", json_integer(s->updated_ms));
  }
  json_t *red = ak_config_redact_tree(s->spec, ak_config_source_options());
  const char *k;
  json_t *v;
  json_object_foreach(red, k, v) if (strcmp(k, "tenant") != 0) json_object_set(j, k, v);
  json_decref(red);
  return j;
}

static enum MHD_Result reply_error(ak_admin_call_t *c, unsigned status, const char *code, const char *msg) {
  return ak_admin_json(c, status, json_pack("{s:s,s:s}", "error", code, "message", msg));
}

static enum MHD_Result invalid_source(ak_admin_call_t *c, const char *msg) {
  return reply_error(c, 400, "invalid_source", msg);
}

static enum MHD_Result read_only(ak_admin_call_t *c, const ak_source_t *s) {
  char msg[200];
  if (s)
    snprintf(msg, sizeof msg, "sources.%s is defined in the config file; change it there", s->cfg.id);
  else
    snprintf(msg, sizeof msg, "source_store.type is static: sources come from the config file only");
  return reply_error(c, 409, "source_store_read_only", msg);
}

static enum MHD_Result exists(ak_admin_call_t *c, const char *name) {
  char msg[160];
  snprintf(msg, sizeof msg, "a source named %s already exists on this node (names are unique across tenants)",
           name);
  return reply_error(c, 409, "source_exists", msg);
}

/* ------------------------------------------------------------------ writes ---- */

/* The body as a spec for tenant/name: "name" (when present) must be name, "tenant" (when
 * present) the URL's tenant, which fills it in. New reference, or NULL with *msg. */
static json_t *spec_of(const char *body, size_t len, const char *tenant, const char **name, bool name_in_body,
                       char *msg, size_t msglen) {
  json_error_t jerr;
  json_t *b = body && len ? json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr) : NULL;
  if (!json_is_object(b)) {
    snprintf(msg, msglen, "body: expected a JSON object (a source spec)");
    json_decref(b);
    return NULL;
  }
  json_t *jn = json_object_get(b, "name");
  if (name_in_body) {
    if (!jn) {
      snprintf(msg, msglen, "sources: missing required key \"name\"");
      json_decref(b);
      return NULL;
    }
    if (!json_is_string(jn)) {
      snprintf(msg, msglen, "name: expected a string");
      json_decref(b);
      return NULL;
    }
    *name = strdup(json_string_value(jn));
  } else if (jn && (!json_is_string(jn) || strcmp(json_string_value(jn), *name) != 0)) {
    snprintf(msg, msglen, "sources.%s.name: must be the name in the URL", *name);
    json_decref(b);
    return NULL;
  }
  json_t *spec = json_copy(b);
  json_decref(b);
  json_object_del(spec, "name");
  json_t *jt = json_object_get(spec, "tenant");
  if (jt && (!json_is_string(jt) || strcmp(json_string_value(jt), tenant) != 0)) {
    snprintf(msg, msglen, "sources.%s.tenant: must be the tenant of the URL (%s)", *name ? *name : "?", tenant);
    json_decref(spec);
    return NULL;
  }
  json_object_set_new(spec, "tenant", json_string(tenant));
  return spec;
}

/* POST (create only) and PUT (create or update) of tenant/name. */
static enum MHD_Result write_source(ak_instance_t *inst, ak_admin_call_t *c, const ak_audit_who_t *who,
                                    const char *tenant, const char *url_name, bool create_only, const char *body,
                                    size_t len) {
  char msg[512];
  const char *name = url_name;
  char *owned_name = NULL;
  json_t *spec = spec_of(body, len, tenant, &name, create_only, msg, sizeof msg);
  if (create_only) owned_name = (char *)name;
  if (!spec) {
    free(owned_name);
    return invalid_source(c, msg);
  }
  enum MHD_Result res;
  json_t *checked = NULL, *rec = NULL;
  char *why = NULL;
  ak_source_t *old = NULL, *s = NULL;
  ak_sources_write_lock(inst->sources);
  if (ak_config_source_check(inst->cfg, name, spec, 0, &checked, NULL, &why) != 0) {
    res = invalid_source(c, why);
    goto out;
  }
  old = ak_sources_get(inst->sources, name, strlen(name));
  if (old && (create_only || strcmp(old->cfg.tenant, tenant) != 0)) {
    res = exists(c, name);
    goto out;
  }
  if (old && old->origin == AK_SOURCE_CONFIG) {
    res = read_only(c, old);
    goto out;
  }
  if (old && json_equal(old->spec, checked)) { /* changes nothing: nothing stored, no audit row */
    res = ak_admin_json(c, 200, view(inst, old));
    goto out;
  }
  int64_t now = ak_now_ms();
  /* a new identity is born strictly after every hook that could still be bound to an
   * older source of this name: the edge reads received_at before its lookup, and a hook
   * bound to this one is never received before born_ms (edge.c) */
  ak_source_meta_t m = {.origin = AK_SOURCE_API, .prev = old, .born_ms = now + 1, .updated_ms = old ? now : now + 1,
                        .revision = old ? old->revision + 1 : 1};
  char berr[512] = "";
  s = ak_sources_make(inst->sources, name, checked, &m, berr, sizeof berr);
  if (!s) {
    res = invalid_source(c, berr);
    goto out;
  }
  if (ak_sources_reserve(inst->sources) != 0) {
    res = ak_admin_error(c, 503, "store_unavailable");
    goto out;
  }
  rec = record(tenant, name, spec, s->born_ms, s->updated_ms, s->revision);
  if (!rec || store_change(inst, who, old ? "source.update" : "source.create", tenant, name, rec, s->revision) != 0) {
    res = ak_admin_error(c, 503, "store_unavailable");
    goto out;
  }
  ak_source_t *replaced = ak_sources_put(inst->sources, ak_source_ref(s));
  ak_source_release(replaced);
  ak_log(AK_LOG_INFO, "sources", old ? "source updated" : "source created", "tenant=%s name=%s revision=%llu",
         tenant, name, (unsigned long long)s->revision);
  if (s->cfg.dedupe_from == AK_DEDUPE_NONE && !old)
    ak_log(AK_LOG_WARNING, "sources",
           "source has no dedupe: a provider's retry of an event already stored is a new hook, stored and "
           "delivered again", "source=%s", name);
  res = ak_admin_json(c, old ? 200 : 201, view(inst, s));
out:
  ak_sources_write_unlock(inst->sources);
  ak_source_release(s);
  ak_source_release(old);
  json_decref(checked);
  json_decref(rec);
  json_decref(spec);
  free(why);
  free(owned_name);
  return res;
}

/* Delivery rows of one source still in the due index (claimed or not): its tenant's due
 * keys, or every tenant's for a shared source, each checked against its hook. Rows of an
 * older source of the same name (received before born_ms) are not this source's. */
typedef struct {
  ak_store_t *st;
  const ak_source_t *src;
  uint64_t last_seq;
  bool have_last, last_match;
  int64_t rows;
  bool failed;
} count_ctx_t;

static int count_cb(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  (void)v;
  (void)vl;
  count_ctx_t *cc = ctx;
  uint64_t seq;
  if (ak_key_due_parse((const uint8_t *)k, kl, NULL, NULL, NULL, &seq, NULL) != 0) return 0;
  if (!cc->have_last || seq != cc->last_seq) { /* a hook's rows usually sit side by side */
    uint8_t hk[AK_HOOK_KEY_LEN];
    ak_key_hook(hk, seq);
    char *rec = NULL;
    size_t rl = 0;
    int rc = ak_store_get(cc->st, AK_CF_HOOKS, hk, sizeof hk, &rec, &rl);
    if (rc < 0) {
      cc->failed = true;
      return 1;
    }
    ak_envelope_t env;
    bool match = false;
    if (rc == 0 && ak_envelope_decode((const uint8_t *)rec, rl, &env) == 0) {
      size_t nl = strlen(cc->src->cfg.id);
      match = env.source_len == nl && !memcmp(env.source, cc->src->cfg.id, nl) &&
              env.received_at_ms >= cc->src->born_ms;
      ak_envelope_clear(&env);
    }
    free(rec);
    cc->last_seq = seq;
    cc->have_last = true;
    cc->last_match = match;
  }
  cc->rows += cc->last_match;
  return 0;
}

static enum MHD_Result delete_source(ak_instance_t *inst, ak_admin_call_t *c, const ak_audit_who_t *who,
                                     const char *tenant, const char *name) {
  const char *dl = MHD_lookup_connection_value(c->conn, MHD_GET_ARGUMENT_KIND, "deliveries");
  if (dl && strcmp(dl, "dead_letter") != 0)
    return ak_admin_json(c, 400, json_pack("{s:s,s:s}", "error", "invalid_filter", "field", "deliveries"));
  enum MHD_Result res;
  ak_sources_write_lock(inst->sources);
  ak_source_t *s = ak_sources_get(inst->sources, name, strlen(name));
  if (!s || strcmp(s->cfg.tenant, tenant) != 0) {
    res = ak_admin_error(c, 404, "source_not_found");
    goto out;
  }
  if (s->origin == AK_SOURCE_CONFIG) {
    res = read_only(c, s);
    goto out;
  }
  if (!dl) {
    /* pending rows would be dead-lettered source_gone: only when asked to */
    count_ctx_t cc = {.st = inst->store, .src = s};
    uint8_t pfx[AK_DUE_KEY_MAX];
    size_t pl = 1;
    pfx[0] = AK_IDX_DUE;
    if (strcmp(s->cfg.tenant, "default") != 0) pl = ak_key_due_prefix(pfx, s->cfg.tenant, strlen(s->cfg.tenant));
    if (ak_store_scan(inst->store, AK_CF_INDEX, pfx, pl, count_cb, &cc) != 0 || cc.failed) {
      res = ak_admin_error(c, 503, "store_unavailable");
      goto out;
    }
    int64_t inflight = atomic_load(s->inflight);
    if (cc.rows > 0 || inflight > 0) {
      int64_t pending = cc.rows > inflight ? cc.rows - inflight : 0;
      res = ak_admin_json(c, 409, json_pack("{s:s,s:I,s:I,s:s}", "error", "source_has_deliveries", "pending",
                                            (json_int_t)pending, "inflight", (json_int_t)inflight, "message",
                                            "the source has deliveries waiting; ?deliveries=dead_letter deletes it "
                                            "and dead-letters them (reason source_gone)"));
      goto out;
    }
  }
  if (store_change(inst, who, "source.delete", tenant, name, NULL, s->revision + 1) != 0) {
    res = ak_admin_error(c, 503, "store_unavailable");
    goto out;
  }
  ak_source_release(ak_sources_remove(inst->sources, name));
  ak_log(AK_LOG_INFO, "sources", "source deleted", "tenant=%s name=%s deliveries=%s", tenant, name,
         dl ? "dead_letter" : "none");
  res = ak_admin_reply(c, 204, "application/json", "", 0);
out:
  ak_sources_write_unlock(inst->sources);
  ak_source_release(s);
  return res;
}

/* ------------------------------------------------------------------ routing ---- */

/* "/v1/tenants/{t}/sources[/{name}]": tenant and name (NULL for the collection) into
 * the buffers. false for any other path. */
static bool parse_url(const char *url, char *tenant, size_t tcap, char *name, size_t ncap, bool *has_name) {
  static const char pre[] = "/v1/tenants/", mid[] = "/sources";
  if (strncmp(url, pre, sizeof pre - 1) != 0) return false;
  const char *t = url + sizeof pre - 1, *slash = strchr(t, '/');
  if (!slash || slash == t || strncmp(slash, mid, sizeof mid - 1) != 0) return false;
  const char *rest = slash + sizeof mid - 1;
  if (*rest && *rest != '/') return false;
  size_t tl = (size_t)(slash - t);
  snprintf(tenant, tcap, "%.*s", (int)(tl < tcap ? tl : tcap - 1), t);
  *has_name = *rest == '/';
  if (*has_name) {
    const char *n = rest + 1;
    if (!*n || strchr(n, '/')) return false;
    snprintf(name, ncap, "%s", n);
  }
  return true;
}

bool ak_sources_api_match(const char *url) {
  char t[80], n[80];
  bool hn;
  return parse_url(url, t, sizeof t, n, sizeof n, &hn);
}

enum MHD_Result ak_sources_api_handle(ak_admin_call_t *c) {
  ak_instance_t *inst = c->inst;
  const char *url = c->url, *method = c->method, *body = c->body;
  size_t len = c->body_len;
  const ak_audit_who_t *who = c->who;
  char tenant[80], name[80];
  bool has_name;
  if (!parse_url(url, tenant, sizeof tenant, name, sizeof name, &has_name) || !inst->sources)
    return ak_admin_error(c, 404, "not_found");
  bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
  bool write = !strcmp(method, has_name ? "PUT" : "POST") || (has_name && !strcmp(method, "DELETE"));
  if (!get && !write) return ak_admin_error(c, 404, "not_found");
  if (!ak_tenant_valid(tenant, strlen(tenant))) return ak_admin_error(c, 400, "invalid_tenant");
  if (has_name && get) {
    ak_source_t *s = ak_sources_get(inst->sources, name, strlen(name));
    if (!s || strcmp(s->cfg.tenant, tenant) != 0) {
      ak_source_release(s);
      return ak_admin_error(c, 404, "source_not_found");
    }
    enum MHD_Result r = ak_admin_json(c, 200, view(inst, s));
    ak_source_release(s);
    return r;
  }
  if (get) {
    ak_source_t **v = NULL;
    size_t n = ak_sources_list(inst->sources, tenant, &v);
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(arr, view(inst, v[i]));
    ak_sources_list_free(v, n);
    return ak_admin_json(c, 200, json_pack("{s:s,s:o}", "tenant", tenant, "entries", arr));
  }
  if (!inst->cfg->source_store_persistent) return read_only(c, NULL);
  if (!strcmp(method, "DELETE")) return delete_source(inst, c, who, tenant, name);
  return write_source(inst, c, who, tenant, has_name ? name : NULL, !has_name, body, len);
}
