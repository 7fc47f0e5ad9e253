/* The sources API (sources_api.h). A change is, in order: checked (the config loader's
 * ak_sources_check_spec), built into a complete version (verifier, the edge's buckets,
 * the dispatcher's sinks: a sink that can never work refuses it here), stored with its
 * audit row in ONE synced batch, and only then published to the table, so the edge
 * serves it from the next request on and a crash after the 201 cannot lose it. Changes
 * are serialized by the table's write lock; readers never wait on it.
 *
 * A stored row is {"v":2, "tenant", "name", "spec" (as sent, tenant filled in, every
 * secret sealed: core/sealed.h), "created_at", "updated_at", "revision"} and is checked
 * again at every boot, so the defaults and rules of the running version apply. A secret
 * is sealed with source_store.secret_key, bound to "source:<tenant>/<name>" and its JSON
 * pointer in the spec; "v":1 rows (written before secrets were sealed) hold them plain
 * and are sealed at the first boot with a key. The audit row of a change hashes the row
 * with each secret replaced by its keyed fingerprint, never the secret.
 *
 * Names are unique on the node, across tenants and the config file's sources, whatever
 * http.routing is: hooks, delivery rows, the dead-letter set, the pen and dedupe keys all
 * name their source by name.
 *
 * With source_store.type redis the same rows live in a Redis the fleet shares
 * (net/sharedkv.h): a change is a dual write in the audit trail (a pending row, the
 * checked write, the verdict) instead of one batch, and the table is the cache every node
 * reloads on a change's broadcast or its tick ("the redis store" below). */
#include <errno.h>
#include <openssl/crypto.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "admin/sources_api.h"
#include "net/sharedkv.h"
#include "dispatch/dispatch.h"
#include "core/clock.h"
#include "core/envelope.h"
#include "core/log.h"
#include "core/sealed.h"
#include "core/sources.h"
#include "edge/edge.h"
#include "edge/publish.h"
#include "store/batch.h"
#include "store/store.h"

#define RECORD_VERSION 2      /* secrets sealed */
#define RECORD_VERSION_PLAIN 1 /* secrets in the clear: read, then sealed (a migration) */

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

static const ak_sealed_keyring_t *keyring(const ak_config_t *cfg);
static bool writable(const ak_config_t *cfg);

/* "source:<tenant>/<name>": the row every sealed value of it is bound to (the audit subject) */
static void row_context(char out[200], const char *tenant, const char *name) {
  snprintf(out, 200, "source:%s/%s", tenant, name);
}

/* rec (a record whose spec is plain) with its spec sealed (seal) or fingerprinted, under
 * the current key. New reference, or NULL. */
static json_t *record_with(const ak_config_t *cfg, const json_t *rec, bool seal, ak_sealed_stats_t *st) {
  const ak_sealed_keyring_t *kr = keyring(cfg);
  const char *tenant = json_string_value(json_object_get(rec, "tenant"));
  const char *name = json_string_value(json_object_get(rec, "name"));
  if (!kr || !kr->n || !tenant || !name) return NULL;
  char ctx[200];
  row_context(ctx, tenant, name);
  ak_sealed_stats_t local;
  const json_t *spec = json_object_get(rec, "spec");
  json_t *t = seal ? ak_sealed_seal_tree(cfg, ak_sources_options(), &kr->v[0], ctx, spec, st ? st : &local)
                   : ak_sealed_fingerprint_tree(cfg, ak_sources_options(), &kr->v[0], ctx, spec);
  json_t *out = t ? json_copy((json_t *)rec) : NULL;
  if (out) {
    json_object_set_new(out, "spec", t);
    json_object_set_new(out, "v", json_integer(RECORD_VERSION));
  } else {
    json_decref(t);
  }
  return out;
}

/* A stored row's spec opened: a new reference to the plain spec, or NULL with *why
 * (malloc'd, naming the source and where in its spec; never a value). */
static json_t *open_spec(const ak_config_t *cfg, const json_t *rec, const char *label, ak_sealed_stats_t *st,
                         char **why) {
  json_int_t ver = json_integer_value(json_object_get(rec, "v"));
  const json_t *spec = json_object_get(rec, "spec");
  memset(st, 0, sizeof *st);
  if (ver == RECORD_VERSION_PLAIN) return json_incref((json_t *)spec);
  const ak_sealed_keyring_t *kr = keyring(cfg);
  char ctx[200];
  row_context(ctx, json_string_value(json_object_get(rec, "tenant")), json_string_value(json_object_get(rec, "name")));
  json_t *plain = ak_sealed_open_tree(kr, ctx, spec, st);
  if (plain) return plain;
  char ids[(AK_SEALED_KEY_ID_LEN + 2) * 9 + 8] = "";
  for (size_t i = 0; kr && i < kr->n && i < 8; i++)
    snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "%s%s", i ? ", " : "", kr->v[i].id);
  int n;
  if (st->rc == AK_SEALED_UNKNOWN_KEY)
    n = asprintf(why,
                 "stored source %s: the secret at %s is sealed with key id %s, which matches no configured key "
                 "(source_store.secret_key and previous_secret_keys have key ids %s); configure the key it was "
                 "sealed with as source_store.previous_secret_keys",
                 label, st->pointer, st->kid, ids[0] ? ids : "none");
  else if (st->rc == AK_SEALED_FAILED)
    n = asprintf(why,
                 "stored source %s: the secret at %s does not open with key id %s: the row is damaged or the value "
                 "was copied from another row",
                 label, st->pointer, st->kid);
  else
    n = asprintf(why, "stored source %s: the secret at %s: %s", label, st->pointer, ak_sealed_rc_text(st->rc));
  if (n < 0) *why = NULL;
  return NULL;
}

/* What the audit trail hashes for a stored row's text: the row with its secrets
 * fingerprinted. Malloc'd, or NULL. */
static char *audit_text_of_row(const ak_config_t *cfg, const char *row, size_t len) {
  json_t *rec = json_loadb(row, len, JSON_REJECT_DUPLICATES, NULL);
  ak_sealed_stats_t st;
  char *why = NULL;
  json_t *plain = json_is_object(rec) ? open_spec(cfg, rec, "?", &st, &why) : NULL;
  free(why);
  char *text = NULL;
  if (plain) {
    json_object_set_new(rec, "spec", plain);
    json_t *fp = record_with(cfg, rec, false, NULL);
    text = fp ? json_dumps(fp, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(fp);
  }
  json_decref(rec);
  return text;
}

/* The audit row of a change goes into wb, the batch that stores the change: the caller,
 * the action, the subject "source:<tenant>/<name>", the stored rows before and after
 * (NULL: none; the trail keeps only their keyed hash), the revision after the change, and
 * its lifecycle event (type and the redacted view; the trail writes them only while
 * lifecycle.sinks is set). -1: no row could be added, so the change is not made (503). */
static int audit_source_change(ak_instance_t *inst, ak_batch_t *wb, const ak_audit_who_t *who,
                               const char *action, const char *tenant, const char *name, const char *before,
                               size_t before_len, const char *after, size_t after_len, uint64_t revision,
                               const char *event, const json_t *entity) {
  char subject[200];
  snprintf(subject, sizeof subject, "source:%s/%s", tenant, name);
  ak_audit_entry_t e = {.who = who, .action = action, .tenant = tenant, .subject = subject, .before = before,
                        .before_len = before_len, .after = after, .after_len = after_len,
                        .revision = (int64_t)revision, .event = event, .entity = entity};
  return ak_audit_put(inst->audit, wb, &e);
}

/* One synced batch: the row (put, or delete when rec is NULL; rec's spec is plain and is
 * sealed here) and its audit row. Under the table's write lock, so the row read as
 * "before" is the one being replaced. */
static int store_change(ak_instance_t *inst, const ak_audit_who_t *who, const char *action, const char *tenant,
                        const char *name, const json_t *rec, uint64_t revision, const char *event,
                        const json_t *entity) {
  char key[160];
  size_t kl = source_key(key, tenant, name);
  json_t *sealed = rec ? record_with(inst->cfg, rec, true, NULL) : NULL;
#ifdef AK_TEST_HOOKS
  /* the rows this build's predecessor wrote (secrets in the clear), for the migration's tests */
  if (sealed && getenv("ANKUSA_TEST_SOURCE_ROWS_PLAIN")) {
    json_decref(sealed);
    sealed = json_copy((json_t *)rec);
    json_object_set_new(sealed, "v", json_integer(RECORD_VERSION_PLAIN));
  }
#endif
  json_t *fp = rec ? record_with(inst->cfg, rec, false, NULL) : NULL;
  char *val = sealed ? json_dumps(sealed, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  char *after = fp ? json_dumps(fp, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  json_decref(sealed);
  json_decref(fp);
  if (rec && (!val || !after)) {
    free(val);
    free(after);
    return -1;
  }
  size_t vl = val ? strlen(val) : 0;
  char *before = NULL, *before_text = NULL;
  size_t bl = 0;
  ak_batch_t *wb = NULL;
  int got = ak_store_get(inst->store, AK_CF_DEFAULT, key, kl, &before, &bl);
  if (got == 0 && !(before_text = audit_text_of_row(inst->cfg, before, bl))) got = -1;
  if (got < 0 || !(wb = ak_batch_new(inst->store)) || ak_store_pin(inst->store) != 0) {
    ak_batch_free(wb);
    free(before);
    free(before_text);
    free(val);
    free(after);
    return -1;
  }
  if (val) ak_batch_put(wb, AK_CF_DEFAULT, key, kl, val, vl);
  else ak_batch_delete(wb, AK_CF_DEFAULT, key, kl);
  int rc = audit_source_change(inst, wb, who, action, tenant, name, before_text,
                               before_text ? strlen(before_text) : 0, after, after ? strlen(after) : 0, revision,
                               event, entity);
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
  free(before);
  free(before_text);
  free(val);
  free(after);
  return rc;
}

/* ------------------------------------------------------------ the redis store ---- */

/* source_store.type redis (docs/shared-stores.md). The table is the cache of the rows in
 * Redis: a writer changes Redis first (a dual write in the audit trail: a synced pending
 * row, the checked write, the row finished) and then its own table; every other node
 * reloads on the change's broadcast or its next tick. Writers and reloads both hold the
 * table's write lock, so a reload never sees a write half done and a pending row of this
 * run is never settled by this run's reload. */
typedef struct ak_srcstore {
  ak_instance_t *inst;
  ak_skv_t *r;
  _Atomic bool loaded;          /* a load succeeded: the table holds every shared source */
  bool settled;                 /* the sync thread's: the trail's pending rows settled */
  bool down_logged;             /* the sync thread's */
} ak_srcstore_t;

/* Test builds: ANKUSA_TEST_SOURCE_STORE_KILL_AT=after_pending|after_write kills the node
 * between the halves of a dual write (tests/e2e/test_source_store_redis.py). */
static void kill_at(const char *point) {
#ifdef AK_TEST_HOOKS
  const char *k = getenv("ANKUSA_TEST_SOURCE_STORE_KILL_AT");
  if (k && !strcmp(k, point)) _exit(9);
#else
  (void)point;
#endif
}

enum { SR_OK = 0, SR_UNAVAILABLE = -1, SR_CONFLICT = 1, SR_TAKEN = 2 };

/* The change in Redis: rec (plain spec; sealed here) replaces the row of name, or deletes
 * it (NULL), when the stored row is tenant's at revision expect (0: none). Under the
 * table's write lock. SR_OK, SR_CONFLICT (changed meanwhile on another node: nothing
 * written), SR_TAKEN (another tenant's name), SR_UNAVAILABLE (nothing written, or a
 * write whose answer never came: its pending row is settled by the next load). */
static int store_change_redis(ak_instance_t *inst, const ak_audit_who_t *who, const char *action,
                              const char *tenant, const char *name, const json_t *rec, uint64_t expect,
                              uint64_t revision, const char *event, const json_t *entity) {
  ak_srcstore_t *ss = inst->srcstore;
  char why[400] = "";
  json_t *sealed = rec ? record_with(inst->cfg, rec, true, NULL) : NULL;
  char *val = sealed ? json_dumps(sealed, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  json_decref(sealed);
  /* hashed as the next boot will hash what it reads back */
  char *after = val ? audit_text_of_row(inst->cfg, val, strlen(val)) : NULL;
  char *cur = NULL, *before = NULL;
  size_t cl = 0;
  json_t *detail = NULL;
  int rc = SR_UNAVAILABLE;
  if (rec && (!val || !after)) goto out;
  if (ak_skv_get(ss->r, name, &cur, &cl, why, sizeof why) != 0) {
    ak_log(AK_LOG_WARNING, "sources", "the source store is unavailable: change not made",
           "action=%s tenant=%s name=%s reason=\"%s\"", action, tenant, name, why);
    goto out;
  }
  if (cur) {
    json_t *j = json_loadb(cur, cl, 0, NULL);
    const char *t = json_string_value(json_object_get(j, "tenant"));
    uint64_t rv = (uint64_t)json_integer_value(json_object_get(j, "revision"));
    rc = !t || strcmp(t, tenant) ? SR_TAKEN : rv != expect ? SR_CONFLICT : SR_OK;
    json_decref(j);
    if (rc != SR_OK) goto out;
    rc = SR_UNAVAILABLE;
    if (!(before = audit_text_of_row(inst->cfg, cur, cl))) goto out;
  } else if (expect) {
    rc = SR_CONFLICT; /* deleted on another node */
    goto out;
  }
  char subject[200];
  snprintf(subject, sizeof subject, "source:%s/%s", tenant, name);
  uint64_t seq = 0;
  detail = json_pack("{s:s}", "settle", "subject");
  ak_audit_entry_t e = {.who = who, .action = action, .tenant = tenant, .subject = subject, .before = before,
                        .before_len = before ? strlen(before) : 0, .after = after,
                        .after_len = after ? strlen(after) : 0, .revision = (int64_t)revision,
                        .outcome = "pending", .detail = detail, .seq_out = &seq, .event = event,
                        .entity = entity};
  if (!detail || ak_audit_record(inst->audit, &e) != 0) goto out;
  kill_at("after_pending");
  uint64_t version = 0;
  ak_skv_rc_t w = ak_skv_put(ss->r, name, tenant, expect, val, val ? strlen(val) : 0, &version, why,
                                       sizeof why);
  kill_at("after_write");
  if (w == AK_SKV_WRITTEN) {
    ak_audit_finish(inst->audit, seq, "ok", after, after ? strlen(after) : 0, NULL);
    rc = SR_OK;
  } else if (w == AK_SKV_UNKNOWN) {
    ss->settled = false; /* under the write lock, as the sync thread reads it */
    ak_skv_reload_soon(ss->r);
    ak_log(AK_LOG_ERROR, "sources", "a change to the source store got no answer: it may or may not be applied; "
           "the next load settles its audit row", "action=%s tenant=%s name=%s seq=%llu reason=\"%s\"", action,
           tenant, name, (unsigned long long)seq, why);
  } else {
    /* not written: the subject is as it was */
    ak_audit_finish(inst->audit, seq, "failed", before, before ? strlen(before) : 0, NULL);
    rc = w == AK_SKV_TAKEN ? SR_TAKEN : w == AK_SKV_CONFLICT ? SR_CONFLICT : SR_UNAVAILABLE;
    if (rc == SR_UNAVAILABLE)
      ak_log(AK_LOG_WARNING, "sources", "the source store is unavailable: change not made",
             "action=%s tenant=%s name=%s reason=\"%s\"", action, tenant, name, why);
  }
out:
  json_decref(detail);
  free(val);
  free(after);
  free(cur);
  free(before);
  return rc;
}

/* One row of Redis into the table (write lock held); seen collects the names. */
static void apply_row(ak_instance_t *inst, const ak_skv_row_t *row, json_t *seen, size_t *changed) {
  json_object_set_new(seen, row->name, json_true());
  json_t *rec = json_loadb(row->row, row->len, JSON_REJECT_DUPLICATES, NULL);
  const char *name = json_string_value(json_object_get(rec, "name"));
  const char *tenant = json_string_value(json_object_get(rec, "tenant"));
  json_int_t ver = json_integer_value(json_object_get(rec, "v"));
  char label[200];
  snprintf(label, sizeof label, "%s/%s", tenant ? tenant : "?", row->name);
  ak_source_t *existing = NULL;
  json_t *spec = NULL, *checked = NULL;
  char *why = NULL, *warning = NULL;
  if (!rec || ver != RECORD_VERSION || !name || !tenant || strcmp(name, row->name) ||
      !json_is_object(json_object_get(rec, "spec"))) {
    ak_log(AK_LOG_ERROR, "sources", "a shared source's row is damaged: not served", "source=%s", label);
    goto out;
  }
  int64_t created = json_integer_value(json_object_get(rec, "created_at"));
  int64_t updated = json_integer_value(json_object_get(rec, "updated_at"));
  uint64_t revision = (uint64_t)json_integer_value(json_object_get(rec, "revision"));
  existing = ak_sources_get(inst->sources, name, strlen(name));
  if (existing && existing->origin == AK_SOURCE_CONFIG) {
    ak_log(AK_LOG_ERROR, "sources", "a shared source has the name of a source of the config file: refused here, "
           "the config file's is served", "source=%s config_tenant=%s", label, existing->cfg.tenant);
    goto out;
  }
  bool same_identity = existing && !strcmp(existing->cfg.tenant, tenant) && existing->born_ms == created;
  if (same_identity && existing->revision == revision && existing->updated_ms == updated) goto out; /* cached */
  ak_sealed_stats_t st;
  if (!(spec = open_spec(inst->cfg, rec, label, &st, &why))) {
    ak_log(AK_LOG_ERROR, "sources", "a shared source cannot be opened: not served", "reason=\"%s\"",
           why ? why : "?");
    goto out;
  }
  if (ak_sources_check_spec(inst->cfg, name, spec, AK_SOURCE_CHECK_STORED, &checked, &warning, &why) != 0) {
    ak_log(AK_LOG_ERROR, "sources", "a shared source is not valid under this node's configuration: not served",
           "source=%s reason=\"%s\"", label, why ? why : "?");
    goto out;
  }
  if (warning)
    ak_log(AK_LOG_WARNING, "sources", "shared source breaks the trust rule; served as stored", "source=%s rule=\"%s\"",
           label, warning);
  ak_source_meta_t m = {.origin = AK_SOURCE_API, .prev = same_identity ? existing : NULL, .born_ms = created,
                        .updated_ms = updated, .revision = revision};
  char berr[512] = "";
  ak_source_t *s = ak_sources_make(inst->sources, name, checked, &m, berr, sizeof berr);
  if (!s || ak_sources_reserve(inst->sources) != 0) {
    ak_log(AK_LOG_ERROR, "sources", "a shared source cannot be built: not served", "source=%s reason=\"%s\"", label,
           s ? "out of memory" : berr);
    ak_source_release(s);
    goto out;
  }
  ak_source_release(ak_sources_put(inst->sources, s));
  (*changed)++;
out:
  ak_source_release(existing);
  json_decref(checked);
  json_decref(spec);
  json_decref(rec);
  free(why);
  free(warning);
}

/* Every row into the table (write lock held): new and changed rows built, the API sources
 * whose row is gone removed. */
static void redis_apply(ak_instance_t *inst, const ak_skv_row_t *rows, size_t n) {
  json_t *seen = json_object();
  size_t changed = 0, removed = 0;
  for (size_t i = 0; i < n; i++) apply_row(inst, &rows[i], seen, &changed);
  ak_source_t **v = NULL;
  size_t m = ak_sources_list(inst->sources, NULL, &v);
  for (size_t i = 0; i < m && seen; i++)
    if (v[i]->origin == AK_SOURCE_API && !json_object_get(seen, v[i]->cfg.id)) {
      ak_source_release(ak_sources_remove(inst->sources, v[i]->cfg.id));
      removed++;
    }
  ak_sources_list_free(v, m);
  json_decref(seen);
  if (changed || removed)
    ak_log(AK_LOG_INFO, "sources", "shared sources loaded", "rows=%zu changed=%zu removed=%zu", n, changed, removed);
}

typedef struct {
  ak_instance_t *inst;
  const ak_skv_row_t *rows;
  size_t n;
} settle_ctx_t;

static bool same_hash(const char *x, const char *y) { return (!x && !y) || (x && y && !strcmp(x, y)); }

/* A pending row of a change to a shared source, settled by what Redis holds now. */
static void settle_one(void *ctx, uint64_t seq, const char *subject, const char *before_hash,
                       const char *after_hash) {
  settle_ctx_t *sc = ctx;
  const char *tn = subject + strlen("source:"), *slash = strchr(tn, '/');
  if (!slash) return;
  const ak_skv_row_t *row = NULL;
  for (size_t i = 0; i < sc->n && !row; i++)
    if (!strcmp(sc->rows[i].name, slash + 1)) row = &sc->rows[i];
  json_t *rec = row ? json_loadb(row->row, row->len, 0, NULL) : NULL;
  const char *rt = json_string_value(json_object_get(rec, "tenant"));
  if (rec && (!rt || strlen(rt) != (size_t)(slash - tn) || memcmp(rt, tn, strlen(rt)))) row = NULL; /* another tenant's */
  char *text = row ? audit_text_of_row(sc->inst->cfg, row->row, row->len) : NULL;
  char h[65] = "";
  if (text) ak_audit_hash(sc->inst->audit, text, strlen(text), h);
  const char *cur = text && h[0] ? h : NULL;
  bool unreadable = row && !cur;
  const char *outcome = unreadable ? "interrupted" : same_hash(cur, after_hash) ? "ok"
                      : same_hash(cur, before_hash) ? "failed" : "interrupted";
  json_t *detail = json_pack("{s:s}", "settle", "subject");
  char now_txt[64];
  if (!row) snprintf(now_txt, sizeof now_txt, "absent");
  else if (unreadable) snprintf(now_txt, sizeof now_txt, "unreadable");
  else snprintf(now_txt, sizeof now_txt, "revision %lld", (long long)json_integer_value(json_object_get(rec, "revision")));
  if (detail && !strcmp(outcome, "interrupted")) {
    json_object_set_new(detail, "current", json_string(now_txt));
    json_object_set_new(detail, "intended_after_hash", after_hash ? json_string(after_hash) : json_null());
  }
  if (ak_audit_finish(sc->inst->audit, seq, outcome, text, text ? strlen(text) : 0, detail) == 0)
    ak_log(strcmp(outcome, "interrupted") ? AK_LOG_INFO : AK_LOG_WARNING, "sources",
           strcmp(outcome, "interrupted") ? "a change to a shared source left pending by a stop is settled"
                                          : "a change to a shared source was interrupted by a stop and the source "
                                            "changed meanwhile: its current state is in the audit row",
           "seq=%llu subject=%s outcome=%s current=\"%s\"", (unsigned long long)seq, subject, outcome, now_txt);
  json_decref(detail);
  json_decref(rec);
  free(text);
}

/* Read Redis and apply it; the first time on the sync thread, settle the trail's pending
 * rows too. 0 with *version, or -1. Takes the table's write lock. */
static int redis_load(ak_srcstore_t *ss, bool settle, uint64_t *version) {
  ak_instance_t *inst = ss->inst;
  ak_skv_row_t *rows = NULL;
  size_t n = 0;
  char why[400] = "";
  ak_sources_write_lock(inst->sources);
  int rc = ak_skv_fetch(ss->r, version, &rows, &n, why, sizeof why);
  if (rc == 0) {
    redis_apply(inst, rows, n);
    if (settle && !ss->settled) {
      settle_ctx_t sc = {.inst = inst, .rows = rows, .n = n};
      if (ak_audit_pending_each(inst->audit, "source:", settle_one, &sc) >= 0) ss->settled = true;
    }
  }
  ak_sources_write_unlock(inst->sources);
  ak_skv_rows_free(rows, n);
  if (rc != 0) {
    if (!ss->down_logged)
      ak_log(AK_LOG_WARNING, "sources", "cannot read the shared source store: the cached sources keep serving",
             "reason=\"%s\"", why);
    ss->down_logged = true;
    return -1;
  }
  if (ss->down_logged) ak_log(AK_LOG_INFO, "sources", "the shared source store is readable again", "store=%s",
                              ak_skv_addr(ss->r));
  ss->down_logged = false;
  ak_sources_set_incomplete(inst->sources, false);
  if (!atomic_exchange(&ss->loaded, true))
    ak_log(AK_LOG_INFO, "sources", "shared sources loaded from the source store", "store=%s sources=%zu version=%llu",
           ak_skv_addr(ss->r), n, (unsigned long long)*version);
  return 0;
}

static int redis_reload(void *ctx, uint64_t *version) { return redis_load(ctx, true, version); }

/* ------------------------------------------------------------------ boot ---- */

typedef struct {
  ak_instance_t *inst;
  size_t n;
  char *err;
  ak_batch_t *migrate;   /* plain rows sealed, written after the scan */
  size_t migrated_rows, migrated_values, stale_rows;
} load_ctx_t;

/* The rows just re-sealed replaced versions that still sit in the store's files (in the
 * clear, or under a key being retired, and compressed, so a grep would not even find
 * them): the default column family is rewritten so they leave the disk. A failure leaves
 * them there until RocksDB compacts on its own; it is logged, the change stands. */
static void scrub_old_versions(ak_store_t *st) {
  char *err = NULL;
  if (ak_store_compact(st, AK_CF_DEFAULT, &err) != 0)
    ak_log(AK_LOG_WARNING, "sources", "cannot compact the store: replaced rows stay in its files until RocksDB "
           "compacts them", "reason=\"%s\"", err ? err : "?");
  free(err);
}

/* A plain (v1) row sealed into wb. 0, or -1 (out of memory). */
static int migrate_row(const ak_config_t *cfg, ak_batch_t **wb, ak_store_t *st, const char *k, size_t kl,
                       const json_t *rec, size_t *values) {
  ak_sealed_stats_t ss;
  json_t *sealed = record_with(cfg, rec, true, &ss);
  char *val = sealed ? json_dumps(sealed, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  json_decref(sealed);
  if (!val || (!*wb && !(*wb = ak_batch_new(st)))) {
    free(val);
    return -1;
  }
  ak_batch_put(*wb, AK_CF_DEFAULT, k, kl, val, strlen(val));
  free(val);
  *values += ss.values;
  return 0;
}

static int load_one(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  load_ctx_t *lc = ctx;
  ak_instance_t *inst = lc->inst;
  lc->n++;
  if (!ak_source_store_persistent(inst->cfg)) return 0;
  size_t pl = strlen(AK_KEY_SOURCE);
  const char *tenant = k + pl, *sep = memchr(tenant, '\0', kl - pl);
  json_t *rec = json_loadb(v, vl, JSON_REJECT_DUPLICATES, NULL);
  const char *name = json_string_value(json_object_get(rec, "name"));
  const char *rtenant = json_string_value(json_object_get(rec, "tenant"));
  json_t *spec = NULL;
  json_int_t ver = json_integer_value(json_object_get(rec, "v"));
  char label[200];
  snprintf(label, sizeof label, "%.*s/%.*s", sep ? (int)(sep - tenant) : (int)(kl - pl), tenant,
           sep ? (int)(kl - pl - (size_t)(sep - tenant) - 1) : 0, sep ? sep + 1 : "");
  int rc = 1;
  if (!rec || (ver != RECORD_VERSION && ver != RECORD_VERSION_PLAIN) || !name || !rtenant ||
      !json_is_object(json_object_get(rec, "spec")) || !sep ||
      strlen(rtenant) != (size_t)(sep - tenant) || memcmp(rtenant, tenant, strlen(rtenant)) ||
      strlen(name) != kl - pl - strlen(rtenant) - 1 || memcmp(name, sep + 1, strlen(name))) {
    if (asprintf(&lc->err, "stored source %s is damaged (row %s<tenant>\\0<name> of the default column family)",
                 label, AK_KEY_SOURCE) < 0)
      lc->err = NULL;
    goto out;
  }
  ak_sealed_stats_t ss;
  if (!(spec = open_spec(inst->cfg, rec, label, &ss, &lc->err))) goto out;
  if (ss.stale) lc->stale_rows++;
  if (ver == RECORD_VERSION_PLAIN) {
    if (migrate_row(inst->cfg, &lc->migrate, inst->store, k, kl, rec, &lc->migrated_values) != 0) goto out;
    lc->migrated_rows++;
  }
  json_t *checked = NULL;
  char *warning = NULL, *why = NULL;
  if (ak_sources_check_spec(inst->cfg, name, spec, AK_SOURCE_CHECK_STORED, &checked, &warning, &why) != 0) {
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
  json_decref(spec);
  json_decref(rec);
  if (rc && !lc->err) lc->err = strdup("out of memory");
  return rc;
}

int ak_sources_api_load(ak_instance_t *inst, char **err) {
  *err = NULL;
  load_ctx_t lc = {.inst = inst};
  ak_sources_write_lock(inst->sources);
  int rc = ak_store_scan(inst->store, AK_CF_DEFAULT, AK_KEY_SOURCE, strlen(AK_KEY_SOURCE), load_one, &lc);
  if (!lc.err && rc == 0 && lc.migrate) {
    /* rows written before secrets were sealed: sealed now, in one synced batch */
    ak_wf_class_t cls = AK_WF_OTHER;
    char *werr = NULL;
    if (ak_store_write(inst->store, lc.migrate, true, &cls, &werr) != 0) {
      if (asprintf(&lc.err, "cannot seal the secrets of %zu stored sources written in the clear (class %s)",
                   lc.migrated_rows, ak_wf_class_names[cls]) < 0)
        lc.err = NULL;
      if (!lc.err) lc.err = strdup("out of memory");
    } else {
      ak_log(AK_LOG_INFO, "sources", "stored sources written in the clear: their secrets are sealed now",
             "sources=%zu secrets=%zu key_id=%s", lc.migrated_rows, lc.migrated_values, keyring(inst->cfg)->v[0].id);
      scrub_old_versions(inst->store);
    }
    free(werr);
  }
  ak_batch_free(lc.migrate);
  ak_sources_write_unlock(inst->sources);
  if (lc.err) {
    *err = lc.err;
    return -1;
  }
  if (rc != 0) {
    *err = strdup("the stored sources cannot be read from the store");
    return -1;
  }
  if (lc.stale_rows)
    ak_log(AK_LOG_WARNING, "sources",
           "stored sources have secrets sealed with a previous key: run `ankusa rotate-secrets` (node stopped) "
           "before removing it from source_store.previous_secret_keys", "sources=%zu", lc.stale_rows);
  if (lc.n && ak_source_store_redis(inst->cfg))
    ak_log(AK_LOG_WARNING, "sources",
           "the store holds sources created over the admin API, not served: source_store.type is redis (the "
           "shared store's sources are served)", "stored=%zu", lc.n);
  else if (lc.n && !ak_source_store_persistent(inst->cfg))
    ak_log(AK_LOG_WARNING, "sources",
           "the store holds sources created over the admin API, not served: source_store.type is static",
           "stored=%zu", lc.n);
  else if (lc.n)
    ak_log(AK_LOG_INFO, "sources", "stored sources loaded", "sources=%zu", lc.n);
  return 0;
}

/* ------------------------------------------------------------------ rotation ---- */

typedef struct {
  const ak_config_t *cfg;
  ak_store_t *st;
  ak_batch_t *wb;
  ak_sources_rotate_t *out;
  char *err;
} rotate_ctx_t;

static int rotate_one(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  rotate_ctx_t *rc = ctx;
  rc->out->rows++;
  size_t pl = strlen(AK_KEY_SOURCE);
  const char *tenant = k + pl, *sep = memchr(tenant, '\0', kl - pl);
  char label[200];
  snprintf(label, sizeof label, "%.*s/%.*s", sep ? (int)(sep - tenant) : (int)(kl - pl), tenant,
           sep ? (int)(kl - pl - (size_t)(sep - tenant) - 1) : 0, sep ? sep + 1 : "");
  json_t *rec = json_loadb(v, vl, JSON_REJECT_DUPLICATES, NULL);
  json_int_t ver = json_integer_value(json_object_get(rec, "v"));
  const char *name = json_string_value(json_object_get(rec, "name"));
  const char *rtenant = json_string_value(json_object_get(rec, "tenant"));
  char ctxname[200];
  if (name && rtenant) snprintf(ctxname, sizeof ctxname, "%s/%s", rtenant, name);
  if (!json_is_object(rec) || (ver != RECORD_VERSION && ver != RECORD_VERSION_PLAIN) || !name || !rtenant ||
      !json_is_object(json_object_get(rec, "spec")) || strcmp(ctxname, label) != 0) {
    if (asprintf(&rc->err, "stored source %s is damaged (row %s<tenant>\\0<name> of the default column family)",
                 label, AK_KEY_SOURCE) < 0)
      rc->err = NULL;
    json_decref(rec);
    return 1;
  }
  ak_sealed_stats_t ss;
  json_t *plain = open_spec(rc->cfg, rec, label, &ss, &rc->err);
  if (!plain) {
    json_decref(rec);
    return 1;
  }
  int ret = 0;
  if (ver == RECORD_VERSION_PLAIN || ss.stale) {
    json_object_set_new(rec, "spec", plain);
    size_t values = 0;
    if (migrate_row(rc->cfg, &rc->wb, rc->st, k, kl, rec, &values) != 0) {
      rc->err = strdup("out of memory");
      ret = 1;
    } else {
      rc->out->rewritten++;
      rc->out->values += values;
    }
  } else {
    json_decref(plain);
  }
  json_decref(rec);
  return ret;
}

int ak_sources_api_rotate(const ak_config_t *cfg, ak_store_t *st, ak_audit_t *audit, ak_sources_rotate_t *out,
                          char **err) {
  *err = NULL;
  memset(out, 0, sizeof *out);
  const ak_sealed_keyring_t *kr = keyring(cfg);
  if (!kr) {
    *err = strdup("source_store.secret_key is not set: there is no key to seal with (make one with `openssl rand "
                  "-base64 32`)");
    return -1;
  }
  snprintf(out->key_id, sizeof out->key_id, "%s", kr->v[0].id);
  rotate_ctx_t rc = {.cfg = cfg, .st = st, .out = out};
  int scan = ak_store_scan(st, AK_CF_DEFAULT, AK_KEY_SOURCE, strlen(AK_KEY_SOURCE), rotate_one, &rc);
  if (!rc.err && scan != 0) rc.err = strdup("the stored sources cannot be read from the store");
  if (!rc.err && rc.wb) {
    /* every row or none: a rotation that stopped half-way would still need the old key.
     * One audit row in the same batch says what happened (counts and the key id): the
     * rows' fingerprints are keyed by the new key from now on, and this row is why. */
    ak_wf_class_t cls = AK_WF_OTHER;
    char *werr = NULL;
    ak_audit_who_t who = {.actor = "rotate-secrets"};
    json_t *detail = json_pack("{s:I,s:I,s:s}", "sources", (json_int_t)out->rewritten, "secrets",
                               (json_int_t)out->values, "key_id", out->key_id);
    ak_audit_entry_t e = {.who = &who, .action = "source_store.rotate_secrets", .subject = "source_store",
                          .detail = detail};
    int wrc = !detail || ak_store_pin(st) != 0 ? -1 : 0;
    if (wrc == 0) {
      wrc = ak_audit_put(audit, rc.wb, &e);
      if (wrc == 0) wrc = ak_audit_commit(audit, st, rc.wb, &cls, &werr); /* synced; a NULL trail: the batch alone */
      ak_store_unpin(st);
    }
    json_decref(detail);
    if (wrc != 0) {
      if (asprintf(&rc.err, "cannot write the re-sealed rows: %s", werr ? werr : ak_wf_class_names[cls]) < 0)
        rc.err = strdup("cannot write the re-sealed rows");
    } else {
      scrub_old_versions(st);
    }
    free(werr);
  }
  ak_batch_free(rc.wb);
  if (rc.err) {
    *err = rc.err;
    out->rewritten = out->values = 0;
    return -1;
  }
  return 0;
}

/* ------------------------------------------------------------------ views ---- */

static json_t *view(const ak_instance_t *inst, const ak_source_t *s) {
  const ak_http_cfg_t *hc = ak_http_cfg(inst->cfg);
  bool shared = !strcmp(s->cfg.tenant, "default");
  char path[400];
  if (hc->routing == AK_ROUTING_TENANT_PATH)
    snprintf(path, sizeof path, "%s/%s/%s", hc->prefix, shared ? "{tenant}" : s->cfg.tenant, s->cfg.id);
  else
    snprintf(path, sizeof path, "%s/%s", hc->prefix, s->cfg.id);
  json_t *j = json_pack("{s:s,s:s,s:s,s:s,s:s}", "tenant", s->cfg.tenant, "name", s->cfg.id, "source_id",
                        s->cfg.id, "ingest_path", path, "managed_by",
                        s->origin == AK_SOURCE_API ? "api" : "config");
  if (s->origin == AK_SOURCE_API) {
    json_object_set_new(j, "revision", json_integer((json_int_t)s->revision));
    json_object_set_new(j, "created_at", json_integer(s->born_ms));
    json_object_set_new(j, "updated_at", json_integer(s->updated_ms));
  }
  json_t *red = ak_config_redact_tree(inst->cfg, s->spec, ak_sources_options());
  const char *k;
  json_t *v;
  json_object_foreach(red, k, v) if (strcmp(k, "tenant") != 0) json_object_set(j, k, v);
  json_decref(red);
  return j;
}

static void reply_error(ak_admin_call_t *c, unsigned status, const char *code, const char *msg) {
  ak_admin_json(c, status, json_pack("{s:s,s:s}", "error", code, "message", msg));
}

static void invalid_source(ak_admin_call_t *c, const char *msg) {
  reply_error(c, 400, "invalid_source", msg);
}

static void read_only(ak_admin_call_t *c, const ak_source_t *s) {
  char msg[200];
  if (s)
    snprintf(msg, sizeof msg, "sources.%s is defined in the config file; change it there", s->cfg.id);
  else
    snprintf(msg, sizeof msg, "source_store.type is static: sources come from the config file only");
  reply_error(c, 409, "source_store_read_only", msg);
}

static void exists(ak_admin_call_t *c, const char *name) {
  char msg[160];
  snprintf(msg, sizeof msg, "a source named %s already exists on this node (names are unique across tenants)",
           name);
  reply_error(c, 409, "source_exists", msg);
}

/* A change the store did not make: 503, or (redis) 409 when another node changed the
 * source since this node read it, or holds the name for another tenant. */
static void change_refused(ak_admin_call_t *c, int rc, const char *name, bool create_only) {
  char msg[300];
  if (rc == SR_TAKEN || (rc == SR_CONFLICT && create_only)) {
    exists(c, name);
  } else if (rc == SR_CONFLICT) {
    snprintf(msg, sizeof msg, "sources.%s was changed on another node since this node read it: nothing changed; "
             "read it again and retry", name);
    reply_error(c, 409, "source_conflict", msg);
  } else {
    ak_admin_error(c, 503, "store_unavailable");
  }
}

/* redis, before the first load: the table does not hold the shared sources yet */
static bool not_loaded(const ak_instance_t *inst) {
  return inst->srcstore && !atomic_load(&inst->srcstore->loaded);
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
static void write_source(ak_instance_t *inst, ak_admin_call_t *c, const ak_audit_who_t *who, const char *tenant,
                         const char *url_name, bool create_only, const char *body, size_t len) {
  char msg[512];
  const char *name = url_name;
  char *owned_name = NULL;
  json_t *spec = spec_of(body, len, tenant, &name, create_only, msg, sizeof msg);
  if (create_only) owned_name = (char *)name;
  if (!spec) {
    free(owned_name);
    invalid_source(c, msg);
    return;
  }
  json_t *checked = NULL, *rec = NULL;
  char *why = NULL;
  ak_source_t *old = NULL, *s = NULL;
  ak_sources_write_lock(inst->sources);
  if (ak_sources_check_spec(inst->cfg, name, spec, 0, &checked, NULL, &why) != 0) {
    invalid_source(c, why);
    goto out;
  }
  char dwhy[300]; /* wal.type none: a 201 is the sinks' confirm, so one of them must keep the hook */
  if (ak_publish_direct(inst->cfg) && !ak_publish_sinks_durable(json_object_get(checked, "sinks"), dwhy, sizeof dwhy)) {
    snprintf(msg, sizeof msg, "sources.%s: %s", name, dwhy);
    invalid_source(c, msg);
    goto out;
  }
  old = ak_sources_get(inst->sources, name, strlen(name));
  if (old && (create_only || strcmp(old->cfg.tenant, tenant) != 0)) {
    exists(c, name);
    goto out;
  }
  if (old && old->origin == AK_SOURCE_CONFIG) {
    read_only(c, old);
    goto out;
  }
  if (old && json_equal(old->spec, checked)) { /* changes nothing: nothing stored, no audit row */
    ak_admin_json(c, 200, view(inst, old));
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
    invalid_source(c, berr);
    goto out;
  }
  if (ak_sources_reserve(inst->sources) != 0) {
    ak_admin_error(c, 503, "store_unavailable");
    goto out;
  }
  rec = record(tenant, name, spec, s->born_ms, s->updated_ms, s->revision);
  const char *action = old ? "source.update" : "source.create";
  const char *event = old ? "io.ankusa.source.updated" : "io.ankusa.source.created";
  json_t *entity = rec ? view(inst, s) : NULL; /* the lifecycle event's: redacted */
  int src = !entity ? -1
            : inst->srcstore ? store_change_redis(inst, who, action, tenant, name, rec, old ? old->revision : 0,
                                                  s->revision, event, entity)
                             : store_change(inst, who, action, tenant, name, rec, s->revision, event, entity);
  if (src != 0) {
    json_decref(entity);
    change_refused(c, src, name, create_only);
    goto out;
  }
  json_decref(entity);
  ak_source_t *replaced = ak_sources_put(inst->sources, ak_source_ref(s));
  ak_source_release(replaced);
  ak_log(AK_LOG_INFO, "sources", old ? "source updated" : "source created", "tenant=%s name=%s revision=%llu",
         tenant, name, (unsigned long long)s->revision);
  if (s->cfg.dedupe_from == AK_DEDUPE_NONE && !old)
    ak_log(AK_LOG_WARNING, "sources",
           "source has no dedupe: a provider's retry of an event already stored is a new hook, stored and "
           "delivered again", "source=%s", name);
  ak_admin_json(c, old ? 200 : 201, view(inst, s));
out:
  ak_sources_write_unlock(inst->sources);
  ak_source_release(s);
  ak_source_release(old);
  json_decref(checked);
  json_decref(rec);
  json_decref(spec);
  free(why);
  free(owned_name);
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

typedef struct {
  const char *source;
  size_t sl;
  int64_t rows;
} lane_count_t;

static int lane_count_cb(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  (void)v;
  (void)vl;
  lane_count_t *lc = ctx;
  const uint8_t *p = (const uint8_t *)k;
  if (kl < 3 || kl < 3 + (size_t)p[1]) return 0;
  size_t at = 2 + p[1];
  size_t sl = p[at];
  if (kl >= at + 1 + sl && sl == lc->sl && !memcmp(p + at + 1, lc->source, sl)) lc->rows++;
  return 0;
}

static void delete_source(ak_instance_t *inst, ak_admin_call_t *c, const ak_audit_who_t *who, const char *tenant,
                          const char *name) {
  const char *dl = ak_admin_arg(c, "deliveries");
  if (dl && strcmp(dl, "dead_letter") != 0) {
    ak_admin_json(c, 400, json_pack("{s:s,s:s}", "error", "invalid_filter", "field", "deliveries"));
    return;
  }
  ak_sources_write_lock(inst->sources);
  ak_source_t *s = ak_sources_get(inst->sources, name, strlen(name));
  if (!s || strcmp(s->cfg.tenant, tenant) != 0) {
    ak_admin_error(c, 404, "source_not_found");
    goto out;
  }
  if (s->origin == AK_SOURCE_CONFIG) {
    read_only(c, s);
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
      ak_admin_error(c, 503, "store_unavailable");
      goto out;
    }
    /* and its deliveries still on the hook log (docs/storage.md): the dispatcher knows them,
     * or, on a node without one, the store's group markers above the cursors */
    int64_t on_log = 0;
    if (inst->dispatch) on_log = ak_dispatch_log_pending(inst->dispatch, s->cfg.id);
    else if (ak_dispatch_store_log_pending(inst->store, s->cfg.id, s->cfg.tenant, &on_log) != 0) {
      ak_admin_error(c, 503, "store_unavailable");
      goto out;
    }
    cc.rows += on_log;
    /* and its ordered lanes' rows ('o' tlen tenant slen source ...) */
    lane_count_t lc = {.source = s->cfg.id, .sl = strlen(s->cfg.id)};
    const char o = AK_IDX_LANE;
    if (ak_store_scan(inst->store, AK_CF_INDEX, &o, 1, lane_count_cb, &lc) != 0) {
      ak_admin_error(c, 503, "store_unavailable");
      goto out;
    }
    cc.rows += lc.rows;
    int64_t inflight = atomic_load(s->inflight);
    if (cc.rows > 0 || inflight > 0) {
      int64_t pending = cc.rows > inflight ? cc.rows - inflight : 0;
      ak_admin_json(c, 409, json_pack("{s:s,s:I,s:I,s:s}", "error", "source_has_deliveries", "pending",
                                      (json_int_t)pending, "inflight", (json_int_t)inflight, "message",
                                      "the source has deliveries waiting; ?deliveries=dead_letter deletes it "
                                      "and dead-letters them (reason source_gone)"));
      goto out;
    }
  }
  json_t *entity = view(inst, s); /* the lifecycle event's: the last state, redacted */
  int src = !entity ? -1
            : inst->srcstore ? store_change_redis(inst, who, "source.delete", tenant, name, NULL, s->revision,
                                                  s->revision + 1, "io.ankusa.source.deleted", entity)
                             : store_change(inst, who, "source.delete", tenant, name, NULL, s->revision + 1,
                                            "io.ankusa.source.deleted", entity);
  if (src != 0) {
    json_decref(entity);
    change_refused(c, src, name, false);
    goto out;
  }
  json_decref(entity);
  ak_source_release(ak_sources_remove(inst->sources, name));
  ak_log(AK_LOG_INFO, "sources", "source deleted", "tenant=%s name=%s deliveries=%s", tenant, name,
         dl ? "dead_letter" : "none");
  ak_admin_reply(c, 204, "application/json", "", 0);
out:
  ak_sources_write_unlock(inst->sources);
  ak_source_release(s);
}

/* inst->erase_shared_source: a tenant erase's delete of one source of the fleet's Redis
 * store: the checked write with its dual-write audit row (and lifecycle event), then the
 * served table. No delivery check: the erase has drained the tenant's deliveries. */
static int erase_shared_source(ak_instance_t *inst, const char *tenant, const char *name) {
  ak_source_t *s = ak_sources_get(inst->sources, name, strlen(name));
  if (!s || s->origin != AK_SOURCE_API || strcmp(s->cfg.tenant, tenant) != 0) {
    ak_source_release(s);
    return 0; /* gone meanwhile (another node's change, loaded) */
  }
  json_t *entity = view(inst, s);
  int rc = entity ? store_change_redis(inst, NULL, "source.delete", tenant, name, NULL, s->revision, s->revision + 1,
                                       "io.ankusa.source.deleted", entity)
                  : -1;
  json_decref(entity);
  if (rc == 0) ak_source_release(ak_sources_remove(inst->sources, name));
  ak_source_release(s);
  return rc == 0 ? 0 : -1;
}

/* ------------------------------------------------------------------ handlers ---- */

/* GET /v1/tenants/{tenant}/sources */
void ak_sources_api_list(ak_admin_call_t *c, const ak_admin_path_t *path) {
  ak_instance_t *inst = c->inst;
  if (!inst->sources) {
    ak_admin_error(c, 404, "not_found");
    return;
  }
  if (not_loaded(inst)) {
    ak_admin_error(c, 503, "store_unavailable");
    return;
  }
  ak_source_t **v = NULL;
  size_t n = ak_sources_list(inst->sources, path->tenant, &v);
  json_t *arr = json_array();
  for (size_t i = 0; i < n; i++) json_array_append_new(arr, view(inst, v[i]));
  ak_sources_list_free(v, n);
  ak_admin_json(c, 200, json_pack("{s:s,s:o}", "tenant", path->tenant, "entries", arr));
}

/* POST /v1/tenants/{tenant}/sources: create only, the name in the body */
void ak_sources_api_create(ak_admin_call_t *c, const ak_admin_path_t *path) {
  ak_instance_t *inst = c->inst;
  if (!inst->sources) {
    ak_admin_error(c, 404, "not_found");
    return;
  }
  if (!writable(inst->cfg)) {
    read_only(c, NULL);
    return;
  }
  write_source(inst, c, c->who, path->tenant, NULL, true, c->body, c->body_len);
}

/* GET /v1/tenants/{tenant}/sources/{name} */
void ak_sources_api_get(ak_admin_call_t *c, const ak_admin_path_t *path) {
  ak_instance_t *inst = c->inst;
  if (!inst->sources) {
    ak_admin_error(c, 404, "not_found");
    return;
  }
  ak_source_t *s = ak_sources_get(inst->sources, path->name, strlen(path->name));
  if (!s && not_loaded(inst)) {
    ak_admin_error(c, 503, "store_unavailable");
    return;
  }
  if (!s || strcmp(s->cfg.tenant, path->tenant) != 0) {
    ak_source_release(s);
    ak_admin_error(c, 404, "source_not_found");
    return;
  }
  ak_admin_json(c, 200, view(inst, s));
  ak_source_release(s);
}

/* PUT /v1/tenants/{tenant}/sources/{name}: create or update */
void ak_sources_api_put(ak_admin_call_t *c, const ak_admin_path_t *path) {
  ak_instance_t *inst = c->inst;
  if (!inst->sources) {
    ak_admin_error(c, 404, "not_found");
    return;
  }
  if (!writable(inst->cfg)) {
    read_only(c, NULL);
    return;
  }
  write_source(inst, c, c->who, path->tenant, path->name, false, c->body, c->body_len);
}

/* DELETE /v1/tenants/{tenant}/sources/{name}[?deliveries=dead_letter] */
void ak_sources_api_delete(ak_admin_call_t *c, const ak_admin_path_t *path) {
  ak_instance_t *inst = c->inst;
  if (!inst->sources) {
    ak_admin_error(c, 404, "not_found");
    return;
  }
  if (!writable(inst->cfg)) {
    read_only(c, NULL);
    return;
  }
  delete_source(inst, c, c->who, path->tenant, path->name);
}

/* ------------------------------------------------------------------- the module ---- */

typedef struct {
  const char *url;              /* bound (redis) */
  const char *ns;               /* bound (redis) */
  int64_t tick_ms;              /* bound (redis; 0: null) */
  const char *secret_key;       /* bound */
  const char *secret_key_file;  /* bound */
  ak_strlist_t previous;        /* bound */
  bool persistent, redis;
  ak_sealed_keyring_t ring;     /* secret_key (or the file's) first, then previous_secret_keys */
} source_store_cfg_t;

/* Where sources come from besides the config file. redis (shared by a fleet) is Ankusa's
 * third type; url, namespace and tick_ms belong to it alone. A url without a type means
 * redis, so type has no default here: check_source_store() resolves it. */
static const ak_opt_t source_store_rows[] = {
  {.key = "type", .type = AK_OPT_ENUM, .enum_vals = "static|persistent|redis", .flags = AK_OPTF_NULLABLE,
   .doc = "static: the config file's sources only, the API refuses writes; persistent: also sources "
          "created over the admin API, kept in the node's store; redis: also sources created over the admin "
          "API, kept in a Redis every node of a fleet shares (docs/shared-stores.md). "
          "Default static (redis when url is set)"},
  {.key = "url", .type = AK_OPT_STRING, .flags = AK_OPTF_NULLABLE | AK_OPTF_SECRET,
   .env = "ANKUSA_SOURCE_STORE_URL", AK_AT(source_store_cfg_t, url),
   .doc = "redis only: the shared store, redis://[[user]:password@]host[:port][/db] (required with redis)"},
  {.key = "namespace", .type = AK_OPT_STRING, .min = 1, .max = 100,
   .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX, AK_AT(source_store_cfg_t, ns),
   .doc = "redis only: key namespace (ankusa:sources:<instance>); nodes that share sources share it"},
  {.key = "tick_ms", .type = AK_OPT_INT, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN,
   AK_AT(source_store_cfg_t, tick_ms),
   .doc = "redis only: how often the store's version is re-read, in case a change's broadcast was missed "
          "(30000)"},
  /* secrets at rest: the key that seals the secrets of API-managed sources in the store */
  {.key = "secret_key", .type = AK_OPT_STRING, .flags = AK_OPTF_NULLABLE | AK_OPTF_SECRET,
   .env = "ANKUSA_SOURCE_STORE_SECRET_KEY", AK_AT(source_store_cfg_t, secret_key),
   .doc = "persistent: the key (base64 of 32 bytes: `openssl rand -base64 32`) that encrypts every secret of "
          "an API-managed source in the store (AES-256-GCM); required with type persistent unless "
          "secret_key_file is set"},
  {.key = "secret_key_file", .type = AK_OPT_STRING, .flags = AK_OPTF_NULLABLE,
   .env = "ANKUSA_SOURCE_STORE_SECRET_KEY_FILE", AK_AT(source_store_cfg_t, secret_key_file),
   .doc = "persistent: a file holding secret_key (read at start; e.g. a mounted container secret); not with "
          "secret_key"},
  {.key = "previous_secret_keys", .type = AK_OPT_STRLIST, .flags = AK_OPTF_NULLABLE | AK_OPTF_SECRET,
   .env = "ANKUSA_SOURCE_STORE_PREVIOUS_SECRET_KEYS", AK_AT(source_store_cfg_t, previous),
   .doc = "persistent: older keys, only to read secrets sealed before a rotation; `ankusa rotate-secrets` "
          "re-seals them with secret_key, then they can go"},
  {0},
};


/* source_store.type: null resolves to redis when a url is set (Ankusa's rule), else
 * static; the redis-only keys are refused on the other types. */
static void source_store_check(ak_check_t *c, json_t *ss, json_t *root) {
  (void)root;
  json_t *type = json_object_get(ss, "type");
  bool has_url = json_is_string(json_object_get(ss, "url"));
  if (json_is_null(type)) json_object_set_new(ss, "type", json_string(has_url ? "redis" : "static"));
  const char *t = json_string_value(json_object_get(ss, "type"));
  if (!t) return;
  if (!strcmp(t, "redis")) {
    const char *url = json_string_value(json_object_get(ss, "url"));
    ak_redis_url_t u;
    char why[200];
    if (!url || !*url)
      ak_check_error(c, "source_store.url: required with type redis (redis://[[user]:password@]host[:port][/db])");
    else if (ak_redis_url_parse(url, &u, why, sizeof why) != 0)
      ak_check_error(c, "source_store.url: %s", why);
    OPENSSL_cleanse(&u, sizeof u);
  } else {
    static const char *const redis_only[] = {"url", "namespace", "tick_ms"};
    for (size_t i = 0; i < sizeof redis_only / sizeof redis_only[0]; i++)
      if (!json_is_null(json_object_get(ss, redis_only[i])) && json_object_get(ss, redis_only[i]))
        ak_check_error(c, "source_store.%s: only valid with type redis, not %s", redis_only[i], t);
  }

  /* the key text is checked here (never echoed); a key file is read by finish */
  ak_sealed_key_t k;
  const char *key = json_string_value(json_object_get(ss, "secret_key"));
  const char *file = json_string_value(json_object_get(ss, "secret_key_file"));
  if (key && !*key) key = NULL;
  if (file && !*file) file = NULL;
  if (key && ak_sealed_key_parse(key, &k) != 0)
    ak_check_error(c, "source_store.secret_key: not a key: expected the base64 of exactly 32 bytes (make one "
                      "with `openssl rand -base64 32`)");
  if (key && file)
    ak_check_error(c, "source_store.secret_key_file: set secret_key or secret_key_file, not both");
  size_t i;
  json_t *item;
  json_array_foreach(json_object_get(ss, "previous_secret_keys"), i, item)
    if (ak_sealed_key_parse(json_string_value(item), &k) != 0)
      ak_check_error(c, "source_store.previous_secret_keys[%zu]: not a key: expected the base64 of exactly 32 "
                        "bytes", i);
  OPENSSL_cleanse(&k, sizeof k);
  if ((!strcmp(t, "persistent") || !strcmp(t, "redis")) && !key && !file)
    ak_check_error(c, "source_store.secret_key: required with type %s: the secrets of API-managed "
                      "sources are encrypted with it in the store%s. Make a key with `openssl rand -base64 32` and "
                      "set it as source_store.secret_key, in the environment as ANKUSA_SOURCE_STORE_SECRET_KEY, "
                      "or in a file named by source_store.secret_key_file", t,
                   strcmp(t, "redis") ? "" : " (every node of the fleet needs the same key)");
}


/* The key in a file: at most a line of base64 (and a newline). 0, or -1 with *err. */
static int read_key_file(const char *path, ak_sealed_key_t *k, char **err) {
  char buf[256];
  FILE *f = fopen(path, "re");
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  int e = errno;
  bool too_long = f && n == sizeof buf - 1;
  if (f) fclose(f);
  buf[n] = '\0';
  int rc = 0;
  if (!f) {
    if (asprintf(err, "source_store.secret_key_file: cannot read %s: %s", path, strerror(e)) < 0) *err = NULL;
    rc = -1;
  } else if (too_long || ak_sealed_key_parse(buf, k) != 0) {
    if (asprintf(err,
                 "source_store.secret_key_file: %s does not hold a key: expected the base64 of exactly 32 bytes "
                 "(make one with `openssl rand -base64 32 > %s`)", path, path) < 0)
      *err = NULL;
    rc = -1;
  }
  OPENSSL_cleanse(buf, sizeof buf);
  return rc;
}

static void source_store_release(void *typed) {
  ak_sealed_keyring_clear(&((source_store_cfg_t *)typed)->ring);
}

static int source_store_finish(void *typed, const json_t *section, const json_t *root, char **err) {
  (void)root;
  source_store_cfg_t *sc = typed;
  const char *t = json_string_value(json_object_get(section, "type"));
  sc->persistent = t && !strcmp(t, "persistent");
  sc->redis = t && !strcmp(t, "redis");
  bool has_key = sc->secret_key && *sc->secret_key, has_file = sc->secret_key_file && *sc->secret_key_file;
  if (!has_key && !has_file) return 0; /* a static store needs none (the check asks it of persistent) */
  sc->ring.v = calloc(1 + sc->previous.n, sizeof *sc->ring.v);
  if (!sc->ring.v) {
    *err = strdup("source_store: out of memory");
    return -1;
  }
  if (has_file ? read_key_file(sc->secret_key_file, &sc->ring.v[0], err) != 0
               : ak_sealed_key_parse(sc->secret_key, &sc->ring.v[0]) != 0) {
    if (!has_file) *err = strdup("source_store.secret_key: not a key");
    ak_sealed_keyring_clear(&sc->ring);
    return -1;
  }
  sc->ring.n = 1;
  for (size_t i = 0; i < sc->previous.n; i++) {
    ak_sealed_key_t k;
    if (ak_sealed_key_parse(sc->previous.v[i], &k) != 0) continue; /* the check refused it */
    bool dup = false;
    for (size_t j = 0; j < sc->ring.n; j++) dup |= !memcmp(sc->ring.v[j].id, k.id, sizeof k.id);
    if (!dup) sc->ring.v[sc->ring.n++] = k;
    OPENSSL_cleanse(&k, sizeof k);
  }
  return 0;
}

static const ak_sealed_keyring_t *keyring(const ak_config_t *cfg) {
  const source_store_cfg_t *sc = ak_config_of(cfg, &ak_mod_source_store);
  return sc && sc->ring.n ? &sc->ring : NULL;
}

bool ak_source_store_persistent(const ak_config_t *cfg) {
  const source_store_cfg_t *sc = ak_config_of(cfg, &ak_mod_source_store);
  return sc && sc->persistent;
}

bool ak_source_store_redis(const ak_config_t *cfg) {
  const source_store_cfg_t *sc = ak_config_of(cfg, &ak_mod_source_store);
  return sc && sc->redis;
}

static bool writable(const ak_config_t *cfg) {
  return ak_source_store_persistent(cfg) || ak_source_store_redis(cfg);
}

/* redis: the store's client, and a first load. Redis down is not a reason to refuse the
 * boot: the config file's sources serve, the shared ones answer 503 until the sync
 * thread's first load. */
static int redis_open(ak_instance_t *inst, char **err) {
  const source_store_cfg_t *sc = ak_config_of(inst->cfg, &ak_mod_source_store);
  ak_redis_url_t u;
  char why[200], ns[200];
  if (ak_redis_url_parse(sc->url, &u, why, sizeof why) != 0) { /* the check refused it already */
    if (asprintf(err, "source_store.url: %s", why) < 0) *err = NULL;
    return -1;
  }
  if (sc->ns) snprintf(ns, sizeof ns, "%s", sc->ns);
  else snprintf(ns, sizeof ns, "ankusa:sources:%s", inst->name ? inst->name : "default");
  ak_srcstore_t *ss = calloc(1, sizeof *ss);
  if (ss) ss->r = ak_skv_new(&u, "source_store.url", ns, sc->tick_ms ? sc->tick_ms : 30000, redis_reload, ss);
  OPENSSL_cleanse(&u, sizeof u);
  if (!ss || !ss->r) {
    free(ss);
    *err = strdup("source_store: out of memory");
    return -1;
  }
  ss->inst = inst;
  inst->srcstore = ss;
  ak_sources_set_incomplete(inst->sources, true);
  uint64_t version;
  if (redis_load(ss, false, &version) != 0)
    ak_log(AK_LOG_WARNING, "sources", "the shared source store is unavailable at start: the config file's sources "
           "serve, the shared ones answer 503 store_unavailable until it is read", "store=%s namespace=%s",
           ak_skv_addr(ss->r), ns);
  return 0;
}

/* After the config file's sources (the sources module), before every module that
 * attaches per-source state or scans hooks of a source: the stored ones are served too. */
static int source_store_open(ak_instance_t *inst, char **err) {
  char *why = NULL;
  if (ak_sources_api_load(inst, &why) != 0) {
    ak_log(AK_LOG_ERROR, "sources", "cannot load the stored sources: refusing to start", "reason=\"%s\"",
           why ? why : "?");
    if (asprintf(err, "source_store: %s", why ? why : "cannot be read") < 0) *err = NULL;
    free(why);
    return AK_MODULE_FAILED;
  }
  if (ak_source_store_redis(inst->cfg)) {
    if (redis_open(inst, err) != 0) return AK_MODULE_FAILED;
    inst->erase_shared_source = erase_shared_source;
  }
  if (ak_sources_count(inst->sources) == 0 && !writable(inst->cfg))
    ak_log(AK_LOG_WARNING, "config", "no sources configured: every POST will get 404", "config=%s",
           inst->cfg->path ? inst->cfg->path : "(none)");
  return 0;
}

static int source_store_start(ak_instance_t *inst, char **err) {
  ak_srcstore_t *ss = inst->srcstore;
  /* the thread's first load is at once, whatever the boot read: it settles the trail's
   * pending rows (the trail opens after this module) */
  if (ss && ak_skv_start(ss->r, false, 0) != 0) {
    *err = strdup("source_store: cannot start its thread");
    return AK_MODULE_FAILED;
  }
  return 0;
}

static void source_store_stop(ak_instance_t *inst) {
  if (inst->srcstore) ak_skv_stop(inst->srcstore->r);
}

static void source_store_close(ak_instance_t *inst) {
  ak_srcstore_t *ss = inst->srcstore;
  if (!ss) return;
  inst->srcstore = NULL;
  ak_skv_free(ss->r);
  free(ss);
}

const ak_module_t ak_mod_source_store = {
  .name = "source_store",
  .roles = AK_ROLES_STORE,
  .section = "source_store",
  .doc = "where sources come from besides the config file (the admin API's sources)",
  .options = source_store_rows,
  .cfg_size = sizeof(source_store_cfg_t),
  .check = source_store_check,
  .finish = source_store_finish,
  .release = source_store_release,
  .open = source_store_open,
  .start = source_store_start,
  .stop = source_store_stop,
  .close = source_store_close,
};
