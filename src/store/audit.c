/* The audit trail (audit.h). Rows are JSON values under 'a' seq:64 in the audit column
 * family, so key order is seq order is commit order: one mutex (the "order") is held from
 * the seq's hand-out in ak_audit_put to the end of the synced write in ak_audit_commit.
 * Revisions ('v' subject) and the next-seq marker ('n') ride in the same batch, so they
 * move only when the row lands. The HMAC key ('k') is made once per store from the OS
 * RNG and never leaves the store: a row's hashes let an operator tell whether two states
 * are equal, never what they were; it also keys the lifecycle events' ids.
 *
 * The lifecycle outbox: a flagged row's entity ('e' seq) rides the row's batch; the
 * cursor (m:lifecycle_cursor, default CF) is the publisher's, read here only to hold
 * retention back. outbox and notify live under mu. */
#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "store/audit.h"
#include "core/clock.h"
#include "core/log.h"

#define PRUNE_BATCH 10000
#define PRUNE_EVERY_MS (3600 * 1000)
#define QUERY_SCAN_MAX 100000 /* rows one GET /v1/audit looks at, whatever its filters */

struct ak_audit {
  ak_store_t *store;
  int64_t retention_ms;
  uint8_t key[32];
  pthread_mutex_t order; /* held from put to commit/cancel */
  uint64_t next_seq;     /* under order */
  uint64_t held_seq;     /* the seq of the put in progress (given back on failure) */
  bool held_event;       /* the put in progress flagged a lifecycle event (under order) */
  bool thread_started;
  pthread_t th;
  pthread_mutex_t mu; /* stop flag, outbox, notify */
  pthread_cond_t cv;
  bool stop;
  bool outbox;                 /* lifecycle.sinks is set */
  void (*notify)(void *ctx);   /* a flagged row was committed */
  void *notify_ctx;
  ak_series_t *m_blocked;      /* ankusa_audit_retention_blocked_by_cursor */
  int64_t prune_every_ms;
#ifdef AK_TEST_HOOKS
  const char *fail;       /* ANKUSA_TEST_AUDIT_FAIL */
  const char *clock_file; /* ANKUSA_TEST_AUDIT_CLOCK_FILE */
#endif
};

static void row_key(uint8_t out[AK_AUDIT_ROW_KEY_LEN], char tag, uint64_t seq) {
  out[0] = (uint8_t)tag;
  ak_put_u64(out + 1, seq);
}

static void hmac_hex(const ak_audit_t *a, const void *data, size_t len, char out[65]) {
  unsigned char mac[32];
  size_t ml = 0;
  if (!EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, a->key, sizeof a->key, data, len, mac, sizeof mac, &ml) ||
      ml != 32) {
    out[0] = 0;
    return;
  }
  for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", mac[i]);
}

static json_t *hash_or_null(const ak_audit_t *a, const void *p, size_t n) {
  if (!p) return json_null();
  char hex[65];
  hmac_hex(a, p, n, hex);
  return hex[0] ? json_string(hex) : NULL;
}

/* ----------------------------------------------------------------------- open ---- */

static char *fmt_err(const char *what, const ak_store_t *st) {
  char *e = NULL;
  if (asprintf(&e, "audit trail in the store at %s: %s", ak_store_path(st), what) < 0) e = NULL;
  return e;
}

static int last_row_cb(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  (void)v;
  (void)vl;
  if (kl == AK_AUDIT_ROW_KEY_LEN) *(uint64_t *)ctx = ak_get_u64((const uint8_t *)k + 1);
  return 1;
}

typedef struct {
  uint64_t *v;
  size_t n, cap;
} seqs_t;

#define SETTLE_BY_SUBJECT "s" /* a pending marker's value: its subject's owner settles it */

static int pending_cb(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  seqs_t *s = ctx;
  if (kl != AK_AUDIT_ROW_KEY_LEN) return 0;
  if (vl == 1 && v[0] == SETTLE_BY_SUBJECT[0]) return 0; /* ak_audit_pending_each's */
  if (s->n == s->cap) {
    size_t nc = s->cap ? 2 * s->cap : 16;
    uint64_t *nv = realloc(s->v, nc * sizeof *nv);
    if (!nv) return 1;
    s->v = nv;
    s->cap = nc;
  }
  s->v[s->n++] = ak_get_u64((const uint8_t *)k + 1);
  return 0;
}

static int finish(ak_audit_t *a, uint64_t seq, const char *outcome, bool set_after, const void *after,
                  size_t after_len, json_t *detail);
static bool settled_by_subject(const ak_audit_entry_t *e);

/* A row a kill left pending: the change may or may not have been applied. */
static int settle_interrupted(ak_audit_t *a) {
  seqs_t s = {0};
  uint8_t tag = AK_AUDIT_PENDING;
  if (ak_store_scan(a->store, AK_CF_AUDIT, &tag, 1, pending_cb, &s) != 0) {
    free(s.v);
    return -1;
  }
  int rc = 0;
  for (size_t i = 0; i < s.n && rc == 0; i++) {
    rc = finish(a, s.v[i], "interrupted", false, NULL, 0, NULL);
    if (rc == 0)
      ak_log(AK_LOG_WARNING, "audit", "a change was interrupted by a stop: it may or may not have been applied",
             "seq=%llu", (unsigned long long)s.v[i]);
  }
  free(s.v);
  return rc;
}

ak_audit_t *ak_audit_open(ak_instance_t *inst, char **err) {
  *err = NULL;
  ak_audit_t *a = calloc(1, sizeof *a);
  if (!a) {
    *err = strdup("out of memory");
    return NULL;
  }
  a->store = inst->store;
  const ak_audit_cfg_t *ac = ak_config_of(inst->cfg, &ak_mod_audit);
  a->retention_ms = (ac && ac->retention_days > 0 ? ac->retention_days : 365) * 86400000LL;
  pthread_mutex_init(&a->order, NULL);
  pthread_mutex_init(&a->mu, NULL);
  pthread_cond_init(&a->cv, NULL);
  a->prune_every_ms = PRUNE_EVERY_MS;
  /* the outbox is on from the first prune (which runs as this thread starts, before the
   * lifecycle module opens): read from the config, not left to the publisher */
  const json_t *lcs = inst->cfg ? json_object_get(json_object_get(inst->cfg->effective, "lifecycle"), "sinks") : NULL;
  a->outbox = json_array_size(lcs) > 0;
#ifdef AK_TEST_HOOKS
  a->fail = getenv("ANKUSA_TEST_AUDIT_FAIL");
  a->clock_file = getenv("ANKUSA_TEST_AUDIT_CLOCK_FILE");
  const char *pe = getenv("ANKUSA_TEST_AUDIT_PRUNE_MS");
  if (pe && atoll(pe) > 0) a->prune_every_ms = atoll(pe);
#endif
  if (inst->metrics)
    a->m_blocked = ak_metrics_instance_series(inst->metrics, inst->name, "ankusa_audit_retention_blocked_by_cursor",
                                              "Audit rows past audit.retention_days that the last prune kept because "
                                              "their lifecycle events are not published yet (at or above "
                                              "m:lifecycle_cursor).", AK_METRIC_GAUGE);
  char *v = NULL;
  size_t vl = 0;
  char kk = AK_AUDIT_KEY;
  int rc = ak_store_get(a->store, AK_CF_AUDIT, &kk, 1, &v, &vl);
  if (rc < 0 || (rc == 0 && vl != sizeof a->key)) {
    *err = fmt_err(rc < 0 ? "cannot be read" : "its key is damaged (wrong length)", a->store);
    free(v);
    ak_audit_free(a);
    return NULL;
  }
  if (rc == 0) {
    memcpy(a->key, v, sizeof a->key);
  } else if (RAND_bytes(a->key, sizeof a->key) != 1 || ak_store_pin(a->store) != 0) {
    *err = fmt_err("cannot make its key", a->store);
    ak_audit_free(a);
    return NULL;
  } else {
    ak_batch_t *wb = ak_batch_new(a->store);
    if (wb) ak_batch_put(wb, AK_CF_AUDIT, &kk, 1, a->key, sizeof a->key);
    rc = wb ? ak_store_write_pinned(a->store, wb, true, NULL, NULL) : -1;
    ak_store_unpin(a->store);
    ak_batch_free(wb);
    if (rc != 0) {
      *err = fmt_err("cannot store its key", a->store);
      ak_audit_free(a);
      return NULL;
    }
  }
  free(v);
  /* the next seq: past the marker and past the last row (a pruned trail keeps counting) */
  uint64_t next = 1, last = 0;
  char nk = AK_AUDIT_NEXT;
  v = NULL;
  rc = ak_store_get(a->store, AK_CF_AUDIT, &nk, 1, &v, &vl);
  if (rc == 0 && vl == 8) next = ak_get_u64((const uint8_t *)v);
  free(v);
  uint8_t rt = AK_AUDIT_ROW;
  if (rc < 0 || ak_store_scan_from(a->store, AK_CF_AUDIT, &rt, 1, NULL, 0, true, last_row_cb, &last) != 0 ||
      settle_interrupted(a) != 0) {
    *err = fmt_err("cannot be read", a->store);
    ak_audit_free(a);
    return NULL;
  }
  a->next_seq = last + 1 > next ? last + 1 : next;
  if (a->next_seq == 0) a->next_seq = 1;
  return a;
}

uint64_t ak_audit_next_seq(ak_audit_t *a) {
  pthread_mutex_lock(&a->order);
  uint64_t n = a->next_seq;
  pthread_mutex_unlock(&a->order);
  return n;
}

/* ------------------------------------------------------------------------ put ---- */

static bool fault(const ak_audit_t *a) {
#ifdef AK_TEST_HOOKS
  if (a->fail && *a->fail) return !strcmp(a->fail, "1") || access(a->fail, F_OK) == 0;
#else
  (void)a;
#endif
  return false;
}

static int cmp_str(const void *x, const void *y) { return strcmp(*(const char *const *)x, *(const char *const *)y); }

/* tenant plus tenants, sorted, each once */
static json_t *tenant_list(const ak_audit_entry_t *e) {
  size_t n = e->ntenants + (e->tenant ? 1 : 0);
  const char **v = calloc(n + 1, sizeof *v);
  if (!v) return NULL;
  size_t k = 0;
  if (e->tenant) v[k++] = e->tenant;
  for (size_t i = 0; i < e->ntenants; i++)
    if (e->tenants[i]) v[k++] = e->tenants[i];
  qsort(v, k, sizeof *v, cmp_str);
  json_t *arr = json_array();
  for (size_t i = 0; i < k; i++)
    if (i == 0 || strcmp(v[i], v[i - 1])) json_array_append_new(arr, json_string(v[i]));
  free(v);
  return arr;
}

static json_t *row_json(const ak_audit_t *a, const ak_audit_entry_t *e, uint64_t seq, int64_t rev, bool flagged) {
  const ak_audit_who_t *w = e->who;
  json_t *ts = tenant_list(e);
  json_t *bh = hash_or_null(a, e->before, e->before_len), *ah = hash_or_null(a, e->after, e->after_len);
  if (!ts || !bh || !ah) {
    json_decref(ts);
    json_decref(bh);
    json_decref(ah);
    return NULL;
  }
  json_t *tenant = json_array_size(ts) == 1 ? json_incref(json_array_get(ts, 0)) : json_null();
  json_t *r = json_pack("{s:I,s:I,s:s,s:s?,s:s?,s:s,s:o,s:o,s:s,s:o,s:o,s:I,s:s}", "seq", (json_int_t)seq, "at",
                        (json_int_t)ak_now_ms(), "actor", w && w->actor ? w->actor : "internal", "client",
                        w ? w->client : NULL, "request_id", w ? w->request_id : NULL, "action", e->action, "tenant",
                        tenant, "tenants", ts, "subject", e->subject ? e->subject : "", "before_hash", bh,
                        "after_hash", ah, "revision", (json_int_t)rev, "outcome", e->outcome ? e->outcome : "ok");
  if (r && e->detail) json_object_set(r, "detail", e->detail);
  if (r && flagged) json_object_set_new(r, "event", json_string(e->event));
  return r;
}

/* The subject's current revision ('v' subject), under the caller's pin. -1 on error. */
static int64_t read_rev(ak_audit_t *a, const char *subject) {
  size_t sl = strlen(subject);
  char *k = malloc(sl + 1);
  if (!k) return -1;
  k[0] = AK_AUDIT_REV;
  memcpy(k + 1, subject, sl);
  char *v = NULL;
  size_t vl = 0;
  int rc = ak_store_get_pinned(a->store, AK_CF_AUDIT, k, sl + 1, &v, &vl);
  free(k);
  int64_t rev = rc == 1 ? 0 : (rc == 0 && vl == 8) ? (int64_t)ak_get_u64((const uint8_t *)v) : -1;
  free(v);
  return rev;
}

static bool outbox_on(ak_audit_t *a) {
  pthread_mutex_lock(&a->mu);
  bool on = a->outbox;
  pthread_mutex_unlock(&a->mu);
  return on;
}

/* {"event", "entity"} of a flagged entry, compact; NULL when it is not one (or no memory) */
static char *event_text(const ak_audit_entry_t *e) {
  json_t *ev = json_pack("{s:s,s:O?}", "event", e->event, "entity", (json_t *)e->entity);
  char *text = ev ? json_dumps(ev, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  json_decref(ev);
  return text;
}

int ak_audit_put(ak_audit_t *a, ak_batch_t *wb, const ak_audit_entry_t *e) {
  if (!a) return 0;
  if (!e->action || !e->subject || fault(a)) return -1;
  if (!ak_store_has_cf(a->store, AK_CF_AUDIT)) return -1;
  bool flagged = e->event && outbox_on(a);
  char *etext = flagged ? event_text(e) : NULL;
  if (flagged && !etext) return -1;
  pthread_mutex_lock(&a->order);
  uint64_t seq = a->next_seq;
  int64_t rev = e->revision;
  if (rev <= 0) {
    rev = read_rev(a, e->subject);
    if (rev >= 0) rev++;
  }
  json_t *row = rev > 0 ? row_json(a, e, seq, rev, flagged) : NULL;
  char *text = row ? json_dumps(row, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  json_decref(row);
  size_t sl = strlen(e->subject);
  char *rk = text ? malloc(sl + 1) : NULL;
  if (!rk) {
    free(text);
    free(etext);
    pthread_mutex_unlock(&a->order);
    ak_log(AK_LOG_ERROR, "audit", "cannot build an audit row", "action=%s", e->action);
    return -1;
  }
  uint8_t k[AK_AUDIT_ROW_KEY_LEN], v8[8];
  row_key(k, AK_AUDIT_ROW, seq);
  ak_batch_put(wb, AK_CF_AUDIT, k, sizeof k, text, strlen(text));
  if (e->outcome && !strcmp(e->outcome, "pending")) {
    row_key(k, AK_AUDIT_PENDING, seq);
    ak_batch_put(wb, AK_CF_AUDIT, k, sizeof k, settled_by_subject(e) ? SETTLE_BY_SUBJECT : "",
                 settled_by_subject(e) ? 1 : 0);
  }
  if (etext) {
    row_key(k, AK_AUDIT_EVENT, seq);
    ak_batch_put(wb, AK_CF_AUDIT, k, sizeof k, etext, strlen(etext));
    free(etext);
  }
  rk[0] = AK_AUDIT_REV;
  memcpy(rk + 1, e->subject, sl);
  ak_put_u64(v8, (uint64_t)rev);
  ak_batch_put(wb, AK_CF_AUDIT, rk, sl + 1, v8, 8);
  char nk = AK_AUDIT_NEXT;
  ak_put_u64(v8, seq + 1);
  ak_batch_put(wb, AK_CF_AUDIT, &nk, 1, v8, 8);
  free(rk);
  free(text);
  a->held_seq = seq;
  a->held_event = flagged;
  a->next_seq = seq + 1;
  if (e->seq_out) *e->seq_out = seq;
  return 0; /* the order stays held: commit or cancel */
}

int ak_audit_commit(ak_audit_t *a, ak_store_t *st, ak_batch_t *wb, ak_wf_class_t *cls, char **err) {
  ak_wf_class_t c = AK_WF_OTHER;
  int rc = ak_store_write_pinned(st, wb, true, &c, err);
  if (cls) *cls = c;
  if (a) {
    if (rc != 0) {
      a->next_seq = a->held_seq; /* the row never landed: its seq is handed out again */
      ak_log(AK_LOG_ERROR, "audit", "an audited change could not be written: not made", "seq=%llu class=%s",
             (unsigned long long)a->held_seq, ak_wf_class_names[c]);
    }
    bool wake = rc == 0 && a->held_event;
    a->held_event = false;
    pthread_mutex_unlock(&a->order);
    if (wake) {
      pthread_mutex_lock(&a->mu);
      if (a->notify) a->notify(a->notify_ctx);
      pthread_mutex_unlock(&a->mu);
    }
  }
  return rc;
}

void ak_audit_cancel(ak_audit_t *a) {
  if (!a) return;
  a->next_seq = a->held_seq;
  a->held_event = false;
  pthread_mutex_unlock(&a->order);
}

int ak_audit_record(ak_audit_t *a, const ak_audit_entry_t *e) {
  if (!a) return 0;
  ak_batch_t *wb = ak_batch_new(a->store);
  if (!wb || ak_store_pin(a->store) != 0) {
    ak_batch_free(wb);
    return -1;
  }
  int rc = ak_audit_put(a, wb, e);
  if (rc == 0) {
    char *err = NULL;
    rc = ak_audit_commit(a, a->store, wb, NULL, &err);
    free(err);
  }
  ak_store_unpin(a->store);
  ak_batch_free(wb);
  return rc;
}

static int finish(ak_audit_t *a, uint64_t seq, const char *outcome, bool set_after, const void *after,
                  size_t after_len, json_t *detail) {
  /* the same lock order as put: the store's pin, then the trail's order */
  if (ak_store_pin(a->store) != 0) return -1;
  pthread_mutex_lock(&a->order);
  uint8_t k[AK_AUDIT_ROW_KEY_LEN];
  row_key(k, AK_AUDIT_ROW, seq);
  char *v = NULL;
  size_t vl = 0;
  int rc = ak_store_get_pinned(a->store, AK_CF_AUDIT, k, sizeof k, &v, &vl);
  json_t *row = rc == 0 ? json_loadb(v, vl, 0, NULL) : NULL;
  free(v);
  ak_batch_t *wb = ak_batch_new(a->store);
  if (!wb) rc = -1;
  if (row && wb) {
    json_object_set_new(row, "outcome", json_string(outcome));
    json_t *ah = set_after ? hash_or_null(a, after, after_len) : NULL;
    if (ah) json_object_set_new(row, "after_hash", ah);
    if (detail) json_object_set(row, "detail", detail);
    char *text = json_dumps(row, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (text) ak_batch_put(wb, AK_CF_AUDIT, k, sizeof k, text, strlen(text));
    free(text);
  }
  json_decref(row);
  /* a pending marker whose row is gone (pruned) is dropped all the same */
  uint8_t pk[AK_AUDIT_ROW_KEY_LEN];
  row_key(pk, AK_AUDIT_PENDING, seq);
  if (wb) ak_batch_delete(wb, AK_CF_AUDIT, pk, sizeof pk);
  rc = rc < 0 ? -1 : ak_store_write_pinned(a->store, wb, true, NULL, NULL);
  ak_batch_free(wb);
  pthread_mutex_unlock(&a->order);
  ak_store_unpin(a->store);
  if (rc != 0)
    ak_log(AK_LOG_ERROR, "audit", "cannot settle a pending audit row", "seq=%llu outcome=%s",
           (unsigned long long)seq, outcome);
  else {
    /* a settled row may be an event the publisher waits on */
    pthread_mutex_lock(&a->mu);
    if (a->notify) a->notify(a->notify_ctx);
    pthread_mutex_unlock(&a->mu);
  }
  return rc;
}

int ak_audit_finish(ak_audit_t *a, uint64_t seq, const char *outcome, const void *after, size_t after_len,
                    json_t *detail) {
  return a ? finish(a, seq, outcome, true, after, after_len, detail) : 0;
}

/* ------------------------------------------------- settled by the subject's owner ---- */

static bool settled_by_subject(const ak_audit_entry_t *e) {
  const char *s = json_string_value(json_object_get(e->detail, "settle"));
  return e->outcome && !strcmp(e->outcome, "pending") && s && !strcmp(s, "subject");
}

typedef struct {
  uint64_t *v;
  size_t n, cap;
} owner_seqs_t;

static int owner_pending_cb(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  owner_seqs_t *s = ctx;
  if (kl != AK_AUDIT_ROW_KEY_LEN || vl != 1 || v[0] != SETTLE_BY_SUBJECT[0]) return 0;
  if (s->n == s->cap) {
    size_t nc = s->cap ? 2 * s->cap : 16;
    uint64_t *nv = realloc(s->v, nc * sizeof *nv);
    if (!nv) return 1;
    s->v = nv;
    s->cap = nc;
  }
  s->v[s->n++] = ak_get_u64((const uint8_t *)k + 1);
  return 0;
}

int ak_audit_pending_each(ak_audit_t *a, const char *prefix, ak_audit_pending_fn cb, void *ctx) {
  if (!a) return 0;
  owner_seqs_t s = {0};
  uint8_t tag = AK_AUDIT_PENDING;
  if (ak_store_scan(a->store, AK_CF_AUDIT, &tag, 1, owner_pending_cb, &s) != 0) {
    free(s.v);
    return -1;
  }
  int n = 0;
  size_t pl = strlen(prefix);
  for (size_t i = 0; i < s.n; i++) { /* no scan open: cb may finish the row */
    uint8_t k[AK_AUDIT_ROW_KEY_LEN];
    row_key(k, AK_AUDIT_ROW, s.v[i]);
    char *v = NULL;
    size_t vl = 0;
    if (ak_store_get(a->store, AK_CF_AUDIT, k, sizeof k, &v, &vl) != 0) {
      free(v);
      continue;
    }
    json_t *row = json_loadb(v, vl, 0, NULL);
    free(v);
    const char *subject = json_string_value(json_object_get(row, "subject"));
    if (subject && !strncmp(subject, prefix, pl)) {
      cb(ctx, s.v[i], subject, json_string_value(json_object_get(row, "before_hash")),
         json_string_value(json_object_get(row, "after_hash")));
      n++;
    }
    json_decref(row);
  }
  free(s.v);
  return n;
}

void ak_audit_hash(ak_audit_t *a, const void *bytes, size_t len, char hex_out[65]) {
  hex_out[0] = 0;
  if (a) hmac_hex(a, bytes, len, hex_out);
}

/* ---------------------------------------------------------------------- query ---- */

typedef struct {
  const ak_audit_query_t *q;
  bool ascending;
  json_t *entries;
  int64_t scanned;
  uint64_t last_seq;     /* the last row looked at */
  bool stopped_early;    /* by the limit or the scan cap: more rows may follow */
} query_ctx_t;

static bool visible(const json_t *row, const ak_audit_query_t *q) {
  const json_t *ts = json_object_get(row, "tenants");
  size_t i;
  const json_t *t;
  if (q->scope) {
    if (!json_array_size(ts)) return false; /* node-wide: every tenant's business */
    json_array_foreach(ts, i, t) {
      const char *s = json_string_value(t);
      if (!s || !ak_tenant_scope_has(q->scope, s, strlen(s))) return false;
    }
  }
  if (q->tenant) {
    bool found = false;
    json_array_foreach(ts, i, t) found = found || (json_string_value(t) && !strcmp(json_string_value(t), q->tenant));
    if (!found) return false;
  }
  if (q->action) {
    const char *act = json_string_value(json_object_get(row, "action"));
    if (!act || strcmp(act, q->action)) return false;
  }
  return true;
}

static int query_cb(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  query_ctx_t *qc = ctx;
  if (kl != AK_AUDIT_ROW_KEY_LEN) return 0;
  if ((int64_t)json_array_size(qc->entries) >= qc->q->limit || qc->scanned >= QUERY_SCAN_MAX) {
    qc->stopped_early = true;
    return 1;
  }
  qc->scanned++;
  uint64_t seq = ak_get_u64((const uint8_t *)k + 1);
  json_t *row = json_loadb(v, vl, 0, NULL);
  if (row && qc->q->since_ms != INT64_MIN) {
    json_int_t at = json_integer_value(json_object_get(row, "at"));
    if (at < qc->q->since_ms) {
      json_decref(row);
      if (qc->ascending) {
        qc->last_seq = seq;
        return 0;
      }
      return 1; /* newest first: everything further is older (rows are in commit order) */
    }
  }
  qc->last_seq = seq;
  if (!row) {
    ak_log(AK_LOG_WARNING, "audit", "skipped a damaged audit row", "seq=%llu", (unsigned long long)seq);
    return 0;
  }
  if (visible(row, qc->q)) json_array_append(qc->entries, row);
  json_decref(row);
  return 0;
}

int ak_audit_query(ak_audit_t *a, const ak_audit_query_t *q, json_t **out) {
  *out = NULL;
  query_ctx_t qc = {.q = q, .ascending = q->has_after, .entries = json_array()};
  uint8_t prefix = AK_AUDIT_ROW, from[AK_AUDIT_ROW_KEY_LEN];
  const uint8_t *fromp = NULL;
  if (q->has_after) {
    if (q->after_seq == UINT64_MAX) {
      *out = json_pack("{s:o,s:I}", "entries", qc.entries, "next_after_seq", (json_int_t)q->after_seq);
      return 0;
    }
    row_key(from, AK_AUDIT_ROW, q->after_seq + 1);
    fromp = from;
  } else if (q->has_before) {
    if (q->before_seq == 0) {
      *out = json_pack("{s:o,s:n}", "entries", qc.entries, "next_before_seq");
      return 0;
    }
    row_key(from, AK_AUDIT_ROW, q->before_seq - 1);
    fromp = from;
  }
  int rc = ak_store_scan_from(a->store, AK_CF_AUDIT, &prefix, 1, fromp, fromp ? sizeof from : 0, !qc.ascending,
                              query_cb, &qc);
  if (rc != 0) {
    json_decref(qc.entries);
    return -1;
  }
  if (qc.ascending) {
    uint64_t next = qc.scanned ? qc.last_seq : q->after_seq;
    *out = json_pack("{s:o,s:I}", "entries", qc.entries, "next_after_seq", (json_int_t)next);
  } else {
    json_t *nb = qc.stopped_early && qc.scanned ? json_integer((json_int_t)qc.last_seq) : json_null();
    *out = json_pack("{s:o,s:o}", "entries", qc.entries, "next_before_seq", nb);
  }
  return *out ? 0 : -1;
}

/* ------------------------------------------------------------ lifecycle outbox ---- */

void ak_audit_outbox_enable(ak_audit_t *a, void (*notify)(void *ctx), void *ctx) {
  pthread_mutex_lock(&a->mu);
  a->outbox = true;
  a->notify = notify;
  a->notify_ctx = ctx;
  pthread_mutex_unlock(&a->mu);
}

bool ak_audit_outbox_on(ak_audit_t *a) { return a && outbox_on(a); }

int ak_audit_outbox_cursor(ak_audit_t *a, uint64_t *cursor) {
  char *v = NULL;
  size_t vl = 0;
  int rc = ak_store_get(a->store, AK_CF_DEFAULT, AK_KEY_LIFECYCLE_CURSOR, strlen(AK_KEY_LIFECYCLE_CURSOR), &v, &vl);
  *cursor = rc == 0 && vl == 8 ? ak_get_u64((const uint8_t *)v) : 1;
  free(v);
  if (rc == 0 && vl != 8) {
    ak_log(AK_LOG_ERROR, "audit", "m:lifecycle_cursor is damaged (wrong length)", "store=%s", ak_store_path(a->store));
    return -1;
  }
  return rc < 0 ? -1 : 0;
}

int ak_audit_outbox_advance(ak_audit_t *a, uint64_t cursor) {
  if (ak_store_pin(a->store) != 0) return -1;
  ak_batch_t *wb = ak_batch_new(a->store);
  uint8_t v8[8];
  ak_put_u64(v8, cursor);
  if (wb) ak_batch_put(wb, AK_CF_DEFAULT, AK_KEY_LIFECYCLE_CURSOR, strlen(AK_KEY_LIFECYCLE_CURSOR), v8, 8);
  int rc = wb ? ak_store_write_pinned(a->store, wb, true, NULL, NULL) : -1;
  ak_store_unpin(a->store);
  ak_batch_free(wb);
  return rc;
}

typedef struct {
  uint64_t below;
  uint64_t seq;
  json_t *event;
  bool found;
} next_ctx_t;

static int next_cb(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  next_ctx_t *nc = ctx;
  if (kl != AK_AUDIT_ROW_KEY_LEN) return 0;
  uint64_t seq = ak_get_u64((const uint8_t *)k + 1);
  if (seq >= nc->below) return 1;
  json_t *ev = json_loadb(v, vl, 0, NULL);
  if (!json_is_object(ev) || !json_is_string(json_object_get(ev, "event"))) {
    json_decref(ev);
    ak_log(AK_LOG_WARNING, "audit", "skipped a damaged lifecycle event row", "seq=%llu", (unsigned long long)seq);
    return 0;
  }
  nc->seq = seq;
  nc->event = ev;
  nc->found = true;
  return 1;
}

int ak_audit_outbox_next(ak_audit_t *a, uint64_t from, uint64_t below, ak_audit_event_t *ev) {
  memset(ev, 0, sizeof *ev);
  for (;;) {
    if (from >= below) return 0;
    next_ctx_t nc = {.below = below};
    uint8_t prefix = AK_AUDIT_EVENT, fk[AK_AUDIT_ROW_KEY_LEN];
    row_key(fk, AK_AUDIT_EVENT, from);
    if (ak_store_scan_from(a->store, AK_CF_AUDIT, &prefix, 1, fk, sizeof fk, false, next_cb, &nc) != 0) {
      json_decref(nc.event);
      return -1;
    }
    if (!nc.found) return 0;
    uint8_t rk[AK_AUDIT_ROW_KEY_LEN];
    row_key(rk, AK_AUDIT_ROW, nc.seq);
    char *v = NULL;
    size_t vl = 0;
    int rc = ak_store_get(a->store, AK_CF_AUDIT, rk, sizeof rk, &v, &vl);
    json_t *row = rc == 0 ? json_loadb(v, vl, 0, NULL) : NULL;
    free(v);
    if (rc < 0 || !row) {
      /* the row's batch wrote both: a missing row is a store that cannot be read */
      json_decref(nc.event);
      ak_log(AK_LOG_ERROR, "audit", "a lifecycle event's audit row cannot be read", "seq=%llu",
             (unsigned long long)nc.seq);
      return -1;
    }
    const char *outcome = json_string_value(json_object_get(row, "outcome"));
    if (outcome && !strcmp(outcome, "failed")) { /* the change did not happen: no event */
      json_decref(row);
      json_decref(nc.event);
      from = nc.seq + 1;
      continue;
    }
    ev->seq = nc.seq;
    ev->row = row;
    if (outcome && !strcmp(outcome, "pending")) { /* not settled yet: nothing at or after it goes */
      json_decref(nc.event);
      return 2;
    }
    ev->event = nc.event;
    return 1;
  }
}

/* ak_audit_erase_entities: the flagged rows naming the tenant, found by a scan of the
 * event rows (each checked against its audit row's tenants) */
typedef struct {
  ak_audit_t *a;
  const char *tenant;
  uint64_t *seqs;
  size_t n, cap;
  bool failed;
} erase_ctx_t;

static bool row_names(const json_t *row, const char *tenant) {
  size_t i;
  json_t *t;
  json_array_foreach(json_object_get(row, "tenants"), i, t) if (!strcmp(json_string_value(t) ?: "", tenant)) return true;
  return false;
}

static int erase_cb(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  erase_ctx_t *ec = ctx;
  if (kl != AK_AUDIT_ROW_KEY_LEN) return 0;
  json_t *ev = json_loadb(v, vl, 0, NULL);
  bool has_entity = json_is_object(ev) && !json_is_null(json_object_get(ev, "entity")) &&
                    json_object_get(ev, "entity");
  json_decref(ev);
  if (!has_entity) return 0;
  uint64_t seq = ak_get_u64((const uint8_t *)k + 1);
  uint8_t rk[AK_AUDIT_ROW_KEY_LEN];
  row_key(rk, AK_AUDIT_ROW, seq);
  char *rv = NULL;
  size_t rl = 0;
  int rc = ak_store_get(ec->a->store, AK_CF_AUDIT, rk, sizeof rk, &rv, &rl);
  json_t *row = rc == 0 ? json_loadb(rv, rl, 0, NULL) : NULL;
  free(rv);
  if (rc < 0) {
    ec->failed = true;
    return 1;
  }
  bool mine = row && row_names(row, ec->tenant);
  json_decref(row);
  if (!mine) return 0;
  if (ec->n == ec->cap) {
    size_t nc = ec->cap ? ec->cap * 2 : 64;
    uint64_t *ns = realloc(ec->seqs, nc * sizeof *ns);
    if (!ns) {
      ec->failed = true;
      return 1;
    }
    ec->seqs = ns;
    ec->cap = nc;
  }
  ec->seqs[ec->n++] = seq;
  return 0;
}

int ak_audit_erase_entities(ak_audit_t *a, const char *tenant, int64_t *erased) {
  *erased = 0;
  if (!a) return 0;
  erase_ctx_t ec = {.a = a, .tenant = tenant};
  uint8_t prefix = AK_AUDIT_EVENT;
  if (ak_store_scan(a->store, AK_CF_AUDIT, &prefix, 1, erase_cb, &ec) != 0 || ec.failed) {
    free(ec.seqs);
    return -1;
  }
  int rc = 0;
  for (size_t i = 0; i < ec.n && rc == 0; i += 256) {
    if (ak_store_pin(a->store) != 0) {
      rc = -1;
      break;
    }
    ak_batch_t *wb = ak_batch_new(a->store);
    size_t end = i + 256 < ec.n ? i + 256 : ec.n;
    for (size_t j = i; wb && j < end; j++) {
      uint8_t k[AK_AUDIT_ROW_KEY_LEN];
      row_key(k, AK_AUDIT_EVENT, ec.seqs[j]);
      char *v = NULL;
      size_t vl = 0;
      /* re-read under the pin: the event keeps its type (still delivered, in order), its
       * entity goes */
      json_t *ev = ak_store_get_pinned(a->store, AK_CF_AUDIT, k, sizeof k, &v, &vl) == 0 ? json_loadb(v, vl, 0, NULL)
                                                                                      : NULL;
      free(v);
      if (!json_is_object(ev)) {
        json_decref(ev);
        continue;
      }
      json_object_set_new(ev, "entity", json_null());
      char *text = json_dumps(ev, JSON_COMPACT | JSON_PRESERVE_ORDER);
      json_decref(ev);
      if (!text) {
        rc = -1;
        break;
      }
      ak_batch_put(wb, AK_CF_AUDIT, k, sizeof k, text, strlen(text));
      free(text);
      (*erased)++;
    }
    if (!wb || (rc == 0 && ak_store_write_pinned(a->store, wb, true, NULL, NULL) != 0)) rc = -1;
    ak_batch_free(wb);
    ak_store_unpin(a->store);
  }
  free(ec.seqs);
  return rc;
}

void ak_audit_event_clear(ak_audit_event_t *ev) {
  json_decref(ev->row);
  json_decref(ev->event);
  memset(ev, 0, sizeof *ev);
}

void ak_audit_event_id(const ak_audit_t *a, uint64_t seq, uint8_t id[16]) {
  uint8_t msg[24] = "ankusa-lifecycle";
  ak_put_u64(msg + 16, seq);
  unsigned char mac[32];
  size_t ml = 0;
  if (!EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, a->key, sizeof a->key, msg, sizeof msg, mac, sizeof mac, &ml) ||
      ml != 32) {
    /* never expected (a fixed, available MAC); the seq alone still keeps ids apart */
    memset(mac, 0, sizeof mac);
    ak_put_u64(mac + 8, seq);
  }
  memcpy(id, mac, 16);
  id[6] = (uint8_t)((id[6] & 0x0f) | 0x80); /* version 8: custom */
  id[8] = (uint8_t)((id[8] & 0x3f) | 0x80); /* RFC 9562 variant */
}

/* ---------------------------------------------------------------------- prune ---- */

typedef struct {
  int64_t cutoff;
  uint64_t keep_from;   /* rows at or above this seq stay (the lifecycle cursor) */
  int64_t blocked;      /* expired rows kept for it */
  uint8_t (*keys)[AK_AUDIT_ROW_KEY_LEN];
  size_t n;
} prune_ctx_t;

static int prune_cb(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  prune_ctx_t *pc = ctx;
  if (kl != AK_AUDIT_ROW_KEY_LEN) return 0;
  json_t *row = json_loadb(v, vl, 0, NULL);
  int64_t at = row ? json_integer_value(json_object_get(row, "at")) : 0;
  json_decref(row);
  if (at >= pc->cutoff) return 1; /* rows are in commit order: the rest are newer */
  if (ak_get_u64((const uint8_t *)k + 1) >= pc->keep_from) {
    pc->blocked++; /* and so is every later row: only counted */
    return 0;
  }
  memcpy(pc->keys[pc->n++], k, AK_AUDIT_ROW_KEY_LEN);
  return pc->n == PRUNE_BATCH;
}

int64_t ak_audit_prune(ak_audit_t *a, int64_t now_ms, int64_t *blocked) {
  int64_t total = 0;
  prune_ctx_t pc = {.cutoff = now_ms - a->retention_ms, .keep_from = UINT64_MAX};
  if (blocked) *blocked = 0;
  if (outbox_on(a) && ak_audit_outbox_cursor(a, &pc.keep_from) != 0) return -1;
  pc.keys = malloc(PRUNE_BATCH * sizeof *pc.keys);
  if (!pc.keys) return -1;
  for (;;) {
    pc.n = 0;
    pc.blocked = 0; /* the last pass counts them */
    uint8_t prefix = AK_AUDIT_ROW;
    if (ak_store_scan(a->store, AK_CF_AUDIT, &prefix, 1, prune_cb, &pc) != 0 || ak_store_pin(a->store) != 0) {
      total = -1;
      break;
    }
    if (pc.n == 0) {
      ak_store_unpin(a->store);
      break;
    }
    ak_batch_t *wb = ak_batch_new(a->store);
    for (size_t i = 0; wb && i < pc.n; i++) {
      ak_batch_delete(wb, AK_CF_AUDIT, pc.keys[i], AK_AUDIT_ROW_KEY_LEN);
      pc.keys[i][0] = AK_AUDIT_EVENT; /* its entity, if it had one */
      ak_batch_delete(wb, AK_CF_AUDIT, pc.keys[i], AK_AUDIT_ROW_KEY_LEN);
    }
    int rc = wb ? ak_store_write_pinned(a->store, wb, false, NULL, NULL) : -1;
    ak_store_unpin(a->store);
    ak_batch_free(wb);
    if (rc != 0) {
      total = -1;
      break;
    }
    total += (int64_t)pc.n;
    if (pc.n < PRUNE_BATCH) break;
  }
  free(pc.keys);
  if (total > 0) ak_log(AK_LOG_INFO, "audit", "pruned audit rows past audit.retention_days", "rows=%lld",
                        (long long)total);
  if (total >= 0) {
    if (a->m_blocked) ak_gauge_set(a->m_blocked, (double)pc.blocked);
    if (blocked) *blocked = pc.blocked;
    if (pc.blocked > 0)
      ak_log(AK_LOG_WARNING, "audit", "expired audit rows kept: their lifecycle events are not published yet",
             "rows=%lld cursor=%llu", (long long)pc.blocked, (unsigned long long)pc.keep_from);
  }
  return total;
}

/* The prune's clock: the wall clock, or the test builds' clock file. */
static int64_t prune_now(const ak_audit_t *a) {
#ifdef AK_TEST_HOOKS
  if (a->clock_file) {
    FILE *f = fopen(a->clock_file, "r");
    long long v = 0;
    bool got = f && fscanf(f, "%lld", &v) == 1;
    if (f) fclose(f);
    if (got && v > 0) return (int64_t)v;
  }
#else
  (void)a;
#endif
  return ak_now_ms();
}

static void *prune_main(void *arg) {
  ak_audit_t *a = arg;
  pthread_mutex_lock(&a->mu);
  while (!a->stop) {
    pthread_mutex_unlock(&a->mu);
    if (ak_audit_prune(a, prune_now(a), NULL) < 0)
      ak_log(AK_LOG_WARNING, "audit", "audit prune failed; retried at the next check", NULL);
    pthread_mutex_lock(&a->mu);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t ns = (int64_t)ts.tv_nsec + (a->prune_every_ms % 1000) * 1000000LL;
    ts.tv_sec += a->prune_every_ms / 1000 + ns / 1000000000LL;
    ts.tv_nsec = ns % 1000000000LL;
    while (!a->stop && pthread_cond_timedwait(&a->cv, &a->mu, &ts) != ETIMEDOUT) {
    }
  }
  pthread_mutex_unlock(&a->mu);
  return NULL;
}

int ak_audit_start(ak_audit_t *a) {
  if (pthread_create(&a->th, NULL, prune_main, a) != 0) return -1;
  a->thread_started = true;
  return 0;
}

void ak_audit_free(ak_audit_t *a) {
  if (!a) return;
  if (a->thread_started) {
    pthread_mutex_lock(&a->mu);
    a->stop = true;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->th, NULL);
  }
  OPENSSL_cleanse(a->key, sizeof a->key);
  pthread_mutex_destroy(&a->order);
  pthread_mutex_destroy(&a->mu);
  pthread_cond_destroy(&a->cv);
  free(a);
}

/* ------------------------------------------------------------------- the module ---- */

static const ak_opt_t audit_rows[] = {
  {.key = "retention_days", .type = AK_OPT_INT, .def = "365", .min = 1, .max = 36500,
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX, .doc = "audit rows older than this are pruned (checked hourly)",
   AK_AT(ak_audit_cfg_t, retention_days)},
  {0},
};

/* Opened before everything an operator can change: each change writes its row. */
static int audit_open(ak_instance_t *inst, char **err) {
  char *why = NULL;
  inst->audit = ak_audit_open(inst, &why);
  if (!inst->audit || ak_audit_start(inst->audit) != 0) {
    ak_log(AK_LOG_ERROR, "audit", "cannot open the audit trail", "reason=\"%s\"", why ? why : "no thread");
    ak_audit_free(inst->audit);
    inst->audit = NULL;
    *err = why ? why : strdup("cannot start the audit thread");
    return AK_MODULE_FAILED;
  }
  return 0;
}

static void audit_close(ak_instance_t *inst) {
  ak_audit_free(inst->audit);
  inst->audit = NULL;
}

const ak_module_t ak_mod_audit = {
  .name = "audit",
  .roles = AK_ROLES_STORE,
  .section = "audit",
  .doc = "the trail of operator changes",
  .options = audit_rows,
  .cfg_size = sizeof(ak_audit_cfg_t),
  .open = audit_open,
  .close = audit_close,
};
