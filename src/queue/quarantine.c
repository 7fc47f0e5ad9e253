/* The quarantine pen. Admission is three reservations made in the request's own thread
 * with no I/O: a token of the source's bucket (a tiny mutex per bucket), body bytes
 * against quarantine.max_bytes and a waiting slot (both atomics). The writer stores what
 * was admitted; settle gives back what a failed write did not use. The byte total in the
 * store is a set of per-writer running totals plus one for admin purges, summed at open.
 * Admin operations (list, purge, release) are serialized by one mutex so the purge's
 * read-modify-write of m:quarantine_bytes:admin and a release never race each other.
 * The number of entries held (ankusa_quarantine_entries) is counted from the store at open
 * and kept in memory after. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/buf.h"
#include "core/clock.h"
#include "core/envelope.h"
#include "core/gauges.h"
#include "core/instance.h"
#include "core/log.h"
#include "core/metrics.h"
#include "core/tmap.h"
#include "core/sources.h"
#include "queue/quarantine.h"
#include "queue/writer.h"
#include "store/audit.h"
#include "store/batch.h"
#include "store/store.h"

struct ak_pen_bucket {
  pthread_mutex_t mu;
  double burst, rate;       /* copied from the pen: the bucket may outlive it */
  double tokens;
  int64_t last_ns;
};

enum { RES_HELD, RES_RATE_LIMITED, RES_FULL, RES_OVERLOAD, RES_RELEASED, RES_PURGED, RES_COUNT };
static const char *const res_names[RES_COUNT] = {"held", "rate_limited", "full", "overload", "released", "purged"};

struct ak_pen {
  double burst;
  double rate;              /* tokens per second */
  int64_t max_bytes;
  _Atomic int64_t bytes;    /* held + reserved */
  _Atomic int64_t waiting;  /* admitted, not yet settled */
  _Atomic int64_t entries;  /* hooks held (committed, not purged or released) */
  pthread_mutex_t admin_mu;
  ak_audit_t *audit;        /* rows of purges and releases (NULL: none) */
  ak_series_t *m_bytes, *m_pending, *m_entries, *m_total[RES_COUNT];
};

static void count(ak_pen_t *pen, int res, uint64_t n) {
  if (pen->m_total[res] && n) ak_counter_add(pen->m_total[res], n);
}

void ak_pen_sample(ak_pen_t *pen) {
  if (!pen || !pen->m_bytes) return;
  ak_gauge_set(pen->m_bytes, (double)atomic_load(&pen->bytes));
  ak_gauge_set(pen->m_pending, (double)atomic_load(&pen->waiting));
  if (pen->m_entries) ak_gauge_set(pen->m_entries, (double)atomic_load(&pen->entries));
}

static int count_cb(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  (void)k;
  (void)kl;
  (void)v;
  (void)vl;
  (*(int64_t *)ctx)++;
  return 0;
}

ak_pen_t *ak_pen_new_raw(int64_t burst, double rate, int64_t max_bytes, int64_t bytes_now) {
  ak_pen_t *pen = calloc(1, sizeof *pen);
  if (!pen) return NULL;
  pen->burst = (double)(burst > 0 ? burst : 1);
  pen->rate = rate > 0 ? rate : 1e-9;
  pen->max_bytes = max_bytes;
  atomic_store(&pen->bytes, bytes_now);
  pthread_mutex_init(&pen->admin_mu, NULL);
  return pen;
}

ak_pen_bucket_t *ak_pen_bucket_new(const ak_pen_t *pen) {
  ak_pen_bucket_t *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  pthread_mutex_init(&b->mu, NULL);
  b->burst = pen->burst;
  b->rate = pen->rate;
  b->tokens = pen->burst; /* full at creation */
  b->last_ns = 0;         /* full already: refilling from 0 only caps at burst */
  return b;
}

void ak_pen_bucket_free(ak_pen_bucket_t *b) {
  if (!b) return;
  pthread_mutex_destroy(&b->mu);
  free(b);
}

static int sum_cb(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  (void)k;
  (void)kl;
  int64_t *acc = ctx;
  if (vl != 8) {
    acc[1] = 1; /* damaged */
    return 1;
  }
  acc[0] += (int64_t)ak_get_u64((const uint8_t *)v);
  return 0;
}

int ak_pen_load_bytes(ak_store_t *st, int64_t *out) {
  int64_t acc[2] = {0, 0};
  const char *prefix = AK_KEY_QUARANTINE_BYTES ":";
  if (ak_store_scan(st, AK_CF_DEFAULT, prefix, strlen(prefix), sum_cb, acc) != 0 || acc[1]) return -1;
  *out = acc[0];
  return 0;
}

ak_pen_t *ak_pen_new(ak_instance_t *inst) {
  static const ak_quarantine_cfg_t defaults = {.burst = 100, .rate = 20, .max_bytes = 1073741824};
  const ak_quarantine_cfg_t *c = ak_config_of(inst->cfg, &ak_mod_quarantine);
  if (!c) c = &defaults;
  int64_t bytes = 0;
  if (ak_pen_load_bytes(inst->store, &bytes) != 0) {
    ak_log(AK_LOG_ERROR, "quarantine", "cannot read the pen's byte total from the store", "path=%s",
           ak_store_path(inst->store));
    return NULL;
  }
  ak_pen_t *pen = ak_pen_new_raw(c->burst, c->rate, c->max_bytes, bytes);
  if (!pen) return NULL;
  pen->audit = inst->audit;
  int64_t entries = 0;
  const char summary = AK_PEN_SUMMARY; /* one summary key per entry (and one body key) */
  if (ak_store_scan(inst->store, AK_CF_QUARANTINE, &summary, 1, count_cb, &entries) != 0)
    ak_log(AK_LOG_WARNING, "quarantine", "cannot count the pen's entries: ankusa_quarantine_entries starts at 0",
           "path=%s", ak_store_path(inst->store));
  atomic_store(&pen->entries, entries);
  ak_metrics_t *m = inst->metrics;
  pen->m_bytes = ak_metrics_instance_series(m, inst->name, "ankusa_quarantine_bytes",
                                            "Body bytes held in the quarantine pen (with reserved).", AK_METRIC_GAUGE);
  pen->m_pending = ak_metrics_instance_series(m, inst->name, "ankusa_quarantine_pending",
                                              "Quarantine writes waiting for their commit.", AK_METRIC_GAUGE);
  pen->m_entries = ak_metrics_instance_series(m, inst->name, "ankusa_quarantine_entries",
                                              "Hooks held in the quarantine pen.", AK_METRIC_GAUGE);
  const char *const res_l[] = {"instance", "result", NULL};
  ak_family_t *f = ak_metrics_family(m, "ankusa_quarantine_total", "Quarantine pen outcomes.", AK_METRIC_COUNTER,
                                     res_l, NULL, 0);
  for (int i = 0; i < RES_COUNT; i++) {
    const char *v[] = {inst->name, res_names[i]};
    pen->m_total[i] = ak_metrics_series(f, v);
  }
  ak_pen_sample(pen);
  return pen;
}

void ak_pen_free(ak_pen_t *pen) {
  if (!pen) return;
  pthread_mutex_destroy(&pen->admin_mu);
  free(pen);
}

/* ------------------------------------------------------------------- admission ---- */

static void refill(ak_pen_bucket_t *b, int64_t now_ns) {
  if (now_ns > b->last_ns) {
    b->tokens += (double)(now_ns - b->last_ns) * b->rate / 1e9;
    if (b->tokens > b->burst) b->tokens = b->burst;
    b->last_ns = now_ns;
  }
}

static void refund_token(ak_pen_bucket_t *b) {
  if (!b) return;
  pthread_mutex_lock(&b->mu);
  b->tokens += 1.0;
  if (b->tokens > b->burst) b->tokens = b->burst;
  pthread_mutex_unlock(&b->mu);
}

ak_pen_admit_t ak_pen_admit_at(ak_pen_t *pen, ak_pen_bucket_t *b, size_t body_len, int64_t now_ns,
                               int64_t *retry_after_ms) {
  int64_t dummy;
  if (!retry_after_ms) retry_after_ms = &dummy;
  *retry_after_ms = 0;
  if (!b) {
    *retry_after_ms = 1000;
    count(pen, RES_RATE_LIMITED, 1);
    return AK_PEN_RATE_LIMITED;
  }
  pthread_mutex_lock(&b->mu);
  refill(b, now_ns);
  bool got = b->tokens >= 1.0;
  if (got) b->tokens -= 1.0;
  else {
    double ms = ceil((1.0 - b->tokens) / b->rate * 1000.0);
    *retry_after_ms = ms < 1 ? 1 : ms > 1e12 ? (int64_t)1e12 : (int64_t)ms;
  }
  pthread_mutex_unlock(&b->mu);
  if (!got) {
    count(pen, RES_RATE_LIMITED, 1);
    return AK_PEN_RATE_LIMITED;
  }

  int64_t len = (int64_t)body_len, cur = atomic_load(&pen->bytes);
  do {
    if (cur + len > pen->max_bytes) {
      refund_token(b);
      *retry_after_ms = AK_PEN_FULL_RETRY_MS;
      count(pen, RES_FULL, 1);
      return AK_PEN_FULL;
    }
  } while (!atomic_compare_exchange_weak(&pen->bytes, &cur, cur + len));

  if (atomic_fetch_add(&pen->waiting, 1) >= AK_PEN_MAX_WAITING) {
    atomic_fetch_sub(&pen->waiting, 1);
    atomic_fetch_sub(&pen->bytes, len);
    refund_token(b);
    *retry_after_ms = 1000;
    count(pen, RES_OVERLOAD, 1);
    return AK_PEN_OVERLOAD;
  }
  ak_pen_sample(pen);
  return AK_PEN_OK;
}

ak_pen_admit_t ak_pen_admit(ak_pen_t *pen, ak_pen_bucket_t *b, size_t body_len, int64_t *retry_after_ms) {
  return ak_pen_admit_at(pen, b, body_len, ak_mono_ns(), retry_after_ms);
}

void ak_pen_settle(ak_pen_t *pen, ak_pen_bucket_t *b, size_t body_len, bool committed) {
  atomic_fetch_sub(&pen->waiting, 1);
  if (committed) {
    atomic_fetch_add(&pen->entries, 1);
    count(pen, RES_HELD, 1);
  } else {
    atomic_fetch_sub(&pen->bytes, (int64_t)body_len);
    refund_token(b);
  }
  ak_pen_sample(pen);
}

int64_t ak_pen_bytes(const ak_pen_t *pen) { return atomic_load(&((ak_pen_t *)pen)->bytes); }
int64_t ak_pen_waiting(const ak_pen_t *pen) { return atomic_load(&((ak_pen_t *)pen)->waiting); }

void ak_pen_release_bytes(ak_pen_t *pen, int64_t bytes) {
  if (!pen) return;
  atomic_fetch_sub(&pen->bytes, bytes);
  ak_pen_sample(pen);
}

/* ------------------------------------------------------------------------ admin ---- */

void ak_pen_filter_init(ak_pen_filter_t *f, int64_t limit) {
  memset(f, 0, sizeof *f);
  f->since_ms = INT64_MIN;
  f->until_ms = INT64_MAX;
  f->limit = limit;
}

typedef struct {
  const ak_pen_filter_t *f;
  bool reverse;
  ak_pen_entry_t *v;
  size_t n, cap;
  bool damaged;
} list_ctx_t;

static int list_cb(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  list_ctx_t *lc = ctx;
  const ak_pen_filter_t *f = lc->f;
  if (kl != AK_PEN_KEY_LEN) return 0;
  int64_t at = (int64_t)ak_get_u64((const uint8_t *)k + 1);
  /* keys are ordered by received_at: past the window in scan direction ends the scan */
  if (lc->reverse ? at < f->since_ms : at > f->until_ms) return 1;
  if (at < f->since_ms || at > f->until_ms) return 0;
  if (f->has_id && memcmp(k + 9, f->id, 16) != 0) return 0;
  ak_pen_summary_t s;
  if (ak_pen_summary_decode((const uint8_t *)v, vl, &s) != 0) {
    lc->damaged = true;
    return 0; /* a damaged summary is logged and skipped, never read as something else */
  }
  if (f->source_id && (strlen(f->source_id) != s.source_len || memcmp(f->source_id, s.source, s.source_len) != 0))
    return 0;
  if (!ak_tenant_scope_has(f->tenants, s.tenant, s.tenant_len)) return 0;
  if (ak_buf_grow(&lc->v, &lc->cap, lc->n + 1, sizeof *lc->v) != 0) return 1;
  ak_pen_entry_t *e = &lc->v[lc->n++];
  memcpy(e->id, k + 9, 16);
  e->received_at_ms = at;
  e->reason = s.reason;
  e->size = s.size;
  snprintf(e->source_id, sizeof e->source_id, "%.*s", (int)s.source_len, s.source);
  snprintf(e->tenant_id, sizeof e->tenant_id, "%.*s", (int)s.tenant_len, s.tenant);
  return (int64_t)lc->n >= f->limit;
}

int ak_pen_list(ak_store_t *st, const ak_pen_filter_t *f, bool oldest_first, ak_pen_entry_t **out, size_t *n) {
  *out = NULL;
  *n = 0;
  if (f->limit <= 0) return 0;
  list_ctx_t lc = {.f = f, .reverse = !oldest_first};
  uint8_t prefix = AK_PEN_SUMMARY, from[AK_PEN_KEY_LEN];
  const uint8_t *fromp = NULL;
  if (oldest_first && f->since_ms != INT64_MIN) {
    memset(from, 0, sizeof from);
    from[0] = AK_PEN_SUMMARY;
    ak_put_u64(from + 1, (uint64_t)(f->since_ms < 0 ? 0 : f->since_ms));
    fromp = from;
  } else if (!oldest_first && f->until_ms != INT64_MAX && f->until_ms >= 0) {
    memset(from, 0xff, sizeof from);
    from[0] = AK_PEN_SUMMARY;
    ak_put_u64(from + 1, (uint64_t)f->until_ms);
    fromp = from;
  }
  int rc = ak_store_scan_from(st, AK_CF_QUARANTINE, &prefix, 1, fromp, fromp ? sizeof from : 0, !oldest_first,
                              list_cb, &lc);
  if (lc.damaged) ak_log(AK_LOG_WARNING, "quarantine", "skipped a damaged pen summary", NULL);
  if (rc != 0) {
    free(lc.v);
    return -1;
  }
  *out = lc.v;
  *n = lc.n;
  return 0;
}

static int read_admin_bytes(ak_store_t *st, int64_t *out) {
  char *v = NULL;
  size_t vl = 0;
  const char *k = AK_KEY_QUARANTINE_BYTES ":admin";
  int rc = ak_store_get(st, AK_CF_DEFAULT, k, strlen(k), &v, &vl);
  if (rc < 0) return -1;
  *out = (rc == 0 && vl == 8) ? (int64_t)ak_get_u64((const uint8_t *)v) : 0;
  free(v);
  return 0;
}

/* What an audit row says about a set of entries: their canonical listing (one line per
 * entry, in key order: id, received_at, size, source, tenant) and their tenants. */
typedef struct {
  char *text;
  size_t len;
  const char **tenants; /* point into the entries */
  size_t ntenants;
} entry_set_t;

static int entry_set(const ak_pen_entry_t *es, size_t n, const bool *pick, entry_set_t *out) {
  memset(out, 0, sizeof *out);
  FILE *m = open_memstream(&out->text, &out->len);
  out->tenants = calloc(n + 1, sizeof *out->tenants);
  ak_tmap_t seen;               /* the tenants listed so far */
  ak_tmap_init(&seen, 0);
  if (!m || !out->tenants) {
    if (m) fclose(m);
    free(out->text);
    free(out->tenants);
    return -1;
  }
  int rc = 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    if (pick && !pick[i]) continue;
    char id[AK_UUID_STR_LEN];
    ak_uuid_format(es[i].id, id);
    fprintf(m, "%s %lld %llu %s %s\n", id, (long long)es[i].received_at_ms, (unsigned long long)es[i].size,
            es[i].source_id, es[i].tenant_id);
    bool created;
    if (!ak_tmap_get(&seen, es[i].tenant_id, strlen(es[i].tenant_id), &created)) rc = -1;
    else if (created) out->tenants[out->ntenants++] = es[i].tenant_id;
  }
  ak_tmap_fini(&seen);
  fclose(m);
  if (rc != 0) {
    free(out->text);
    free(out->tenants);
    memset(out, 0, sizeof *out);
  }
  return rc;
}

static void entry_set_free(entry_set_t *s) {
  free(s->text);
  free(s->tenants);
}

int ak_pen_purge(ak_pen_t *pen, ak_store_t *st, const ak_pen_filter_t *f, int64_t *deleted, int64_t *bytes) {
  *deleted = 0;
  *bytes = 0;
  pthread_mutex_lock(&pen->admin_mu);
  ak_pen_entry_t *es = NULL;
  size_t n = 0;
  int64_t admin_total = 0;
  int rc = -1;
  if (ak_pen_list(st, f, true, &es, &n) != 0 || read_admin_bytes(st, &admin_total) != 0) goto out;
  if (n == 0) {
    rc = 0;
    goto out;
  }
  /* The batch is built and written under the store's pin: the CF handles stay valid. */
  ak_batch_t *wb = ak_batch_new(st);
  if (!wb) goto out;
  if (ak_store_pin(st) != 0) {
    ak_batch_free(wb);
    goto out;
  }
  int64_t total = 0;
  for (size_t i = 0; i < n; i++) {
    uint8_t k[AK_PEN_KEY_LEN];
    ak_key_pen(k, AK_PEN_SUMMARY, es[i].received_at_ms, es[i].id);
    ak_batch_delete(wb, AK_CF_QUARANTINE, k, sizeof k);
    ak_key_pen(k, AK_PEN_BODY, es[i].received_at_ms, es[i].id);
    ak_batch_delete(wb, AK_CF_QUARANTINE, k, sizeof k);
    total += (int64_t)es[i].size;
  }
  uint8_t v[8];
  ak_put_u64(v, (uint64_t)(admin_total - total));
  const char *mk = AK_KEY_QUARANTINE_BYTES ":admin";
  ak_batch_put(wb, AK_CF_DEFAULT, mk, strlen(mk), v, 8);
  ak_wf_class_t cls = AK_WF_OTHER;
  char *err = NULL;
  entry_set_t set;
  rc = entry_set(es, n, NULL, &set);
  if (rc == 0) {
    json_t *detail = json_pack("{s:I,s:I}", "deleted", (json_int_t)n, "bytes", (json_int_t)total);
    ak_audit_entry_t ae = {.who = f->who, .action = "quarantine.purge", .tenants = set.tenants,
                           .ntenants = set.ntenants, .subject = "quarantine", .before = set.text,
                           .before_len = set.len, .detail = detail};
    rc = ak_audit_put(pen->audit, wb, &ae);
    if (rc == 0) rc = ak_audit_commit(pen->audit, st, wb, &cls, &err);
    json_decref(detail);
    entry_set_free(&set);
  }
  ak_store_unpin(st);
  ak_batch_free(wb);
  if (rc != 0) {
    ak_log(AK_LOG_ERROR, "quarantine", "purge failed", "class=%s entries=%zu", ak_wf_class_names[cls], n);
    free(err);
    goto out;
  }
  *deleted = (int64_t)n;
  *bytes = total;
  atomic_fetch_sub(&pen->entries, (int64_t)n);
  ak_pen_release_bytes(pen, total);
  count(pen, RES_PURGED, n);
out:
  pthread_mutex_unlock(&pen->admin_mu);
  free(es);
  return rc;
}

/* ---------------------------------------------------------------------- release ---- */

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  size_t outstanding;
} waiter_t;

typedef struct {
  ak_write_req_t req;
  waiter_t *w;
  char *rec;                  /* the stored record (malloc'd by the store read) */
  size_t idx;                 /* the entry's index in the listing */
  ak_source_t *src;           /* req.source points into it: held until the writer answered */
} release_req_t;

static void release_done(ak_write_req_t *req, void *ctx) {
  (void)req;
  waiter_t *w = ((release_req_t *)ctx)->w;
  pthread_mutex_lock(&w->mu);
  w->outstanding--;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

#define RELEASE_CHUNK 128

/* Wait until the writer answered every submitted request of the chunk; count them. A
 * moved entry leaves `held` (the candidates still in the pen). */
static void drain_chunk(ak_pen_t *pen, waiter_t *w, release_req_t *rs, size_t nr, ak_pen_release_result_t *out,
                        bool *held) {
  pthread_mutex_lock(&w->mu);
  while (w->outstanding) pthread_cond_wait(&w->cv, &w->mu);
  pthread_mutex_unlock(&w->mu);
  for (size_t i = 0; i < nr; i++) {
    if (rs[i].req.status == AK_WR_COMMITTED) {
      held[rs[i].idx] = false;
      out->moved++;
      atomic_fetch_sub(&pen->entries, 1);
      ak_pen_release_bytes(pen, rs[i].req.unpen_bytes);
      count(pen, RES_RELEASED, 1);
    } else {
      out->skipped++;
    }
    free(rs[i].rec);
    rs[i].rec = NULL;
    ak_source_release(rs[i].src);
    rs[i].src = NULL;
  }
}

/* Read, re-verify (unless check is NULL) and prepare one entry. true: r is ready to
 * submit (it holds the source version until drain_chunk); with r NULL: it would be, and
 * nothing is kept. */
static bool prepare(ak_instance_t *inst, const ak_pen_entry_t *e, ak_pen_check_fn check, void *check_ctx,
                    release_req_t *r) {
  ak_source_t *src = ak_sources_get(inst->sources, e->source_id, strlen(e->source_id));
  /* gone, or a source re-created under the name after this hook was received */
  if (!src || e->received_at_ms < src->born_ms) {
    ak_source_release(src);
    return false;
  }
  bool ok = false;
  /* already a hook (a release that committed before): a duplicate, left alone */
  uint8_t ik[AK_ID_KEY_LEN];
  ak_key_id(ik, e->id);
  char *v = NULL;
  size_t vl = 0;
  int rc = ak_store_get(inst->store, AK_CF_INDEX, ik, sizeof ik, &v, &vl);
  free(v);
  v = NULL;
  if (rc != 1) goto out;
  uint8_t bk[AK_PEN_KEY_LEN];
  ak_key_pen(bk, AK_PEN_BODY, e->received_at_ms, e->id);
  if (ak_store_get(inst->store, AK_CF_QUARANTINE, bk, sizeof bk, &v, &vl) != 0) goto out;
  ak_envelope_t env;
  if (ak_envelope_decode((const uint8_t *)v, vl, &env) != 0) {
    char idt[AK_UUID_STR_LEN];
    ak_uuid_format(e->id, idt);
    ak_log(AK_LOG_ERROR, "quarantine", "held record is damaged; not released", "id=%s", idt);
    goto out;
  }
  ok = !check || check(check_ctx, src, &env, e->received_at_ms / 1000) == 0;
  size_t body_len = env.body_len;
  const char *tenant = env.tenant; /* points into v, which the request keeps */
  size_t tenant_len = env.tenant_len;
  ak_envelope_clear(&env);
  if (!ok) goto out;
  if (!r) { /* a dry run: it would go */
    free(v);
    ak_source_release(src);
    return true;
  }
  memset(&r->req, 0, sizeof r->req);
  r->rec = v;
  r->src = src;
  r->req.kind = AK_WRITE_HOOK;
  r->req.rec = (uint8_t *)v;
  r->req.rec_len = vl;
  r->req.body_len = body_len;
  memcpy(r->req.id, e->id, 16);
  r->req.received_at_ms = e->received_at_ms;
  r->req.source = &src->cfg;
  r->req.tenant = tenant;
  r->req.tenant_len = tenant_len;
  r->req.unpen = true;
  r->req.unpen_bytes = (int64_t)e->size;
  r->req.done = release_done;
  r->req.ctx = r;
  return true;
out:
  free(v);
  ak_source_release(src);
  return false;
}

int ak_pen_release(ak_pen_t *pen, ak_instance_t *inst, const ak_pen_filter_t *f, ak_pen_check_fn check,
                   void *check_ctx, ak_pen_release_result_t *out) {
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&pen->admin_mu);
  ak_pen_entry_t *es = NULL;
  size_t n = 0;
  if (ak_pen_list(inst->store, f, true, &es, &n) != 0) {
    pthread_mutex_unlock(&pen->admin_mu);
    return -1;
  }
  out->scanned = (int64_t)n;
  /* First pass, nothing kept: which entries would go. None: no change, no row. */
  bool *pick = calloc(n + 1, sizeof *pick);
  size_t npick = 0;
  for (size_t i = 0; pick && i < n; i++) npick += (pick[i] = prepare(inst, &es[i], check, check_ctx, NULL));
  uint64_t seq = 0;
  entry_set_t set = {0};
  int rc = pick ? 0 : -1;
  if (rc == 0 && npick > 0 && (rc = entry_set(es, n, pick, &set)) == 0) {
    json_t *detail = json_pack("{s:I}", "candidates", (json_int_t)npick);
    ak_audit_entry_t ae = {.who = f->who, .action = "quarantine.release", .tenants = set.tenants,
                           .ntenants = set.ntenants, .subject = "quarantine", .before = set.text,
                           .before_len = set.len, .after = set.text, .after_len = set.len, .outcome = "pending",
                           .detail = detail, .seq_out = &seq};
    rc = ak_audit_record(pen->audit, &ae);
    json_decref(detail);
  }
  if (rc != 0 || npick == 0) {
    entry_set_free(&set);
    free(pick);
    free(es);
    out->skipped = rc == 0 ? (int64_t)n : 0;
    pthread_mutex_unlock(&pen->admin_mu);
    return rc;
  }
  waiter_t w = {.outstanding = 0};
  pthread_mutex_init(&w.mu, NULL);
  pthread_cond_init(&w.cv, NULL);
  release_req_t *rs = calloc(RELEASE_CHUNK, sizeof *rs);
  size_t nr = 0;
  for (size_t i = 0; rs && i < n; i++) {
    release_req_t *r = &rs[nr];
    r->w = &w;
    r->idx = i;
    /* re-verified in the first pass: the held bytes cannot have changed since */
    if (!pick[i] || !prepare(inst, &es[i], NULL, check_ctx, r)) {
      out->skipped++;
      continue;
    }
    pthread_mutex_lock(&w.mu);
    w.outstanding++;
    pthread_mutex_unlock(&w.mu);
    ak_wr_status_t st = ak_writer_submit(inst->writer, &r->req);
    if (st == AK_WR_OVERLOAD && nr > 0) {
      /* the writer's queue is full: let this chunk commit, then try once more */
      pthread_mutex_lock(&w.mu);
      w.outstanding--;
      pthread_mutex_unlock(&w.mu);
      release_req_t keep = *r;
      drain_chunk(pen, &w, rs, nr, out, pick);
      nr = 0;
      rs[0] = keep;
      rs[0].req.ctx = &rs[0];
      r = &rs[0];
      pthread_mutex_lock(&w.mu);
      w.outstanding++;
      pthread_mutex_unlock(&w.mu);
      st = ak_writer_submit(inst->writer, &r->req);
    }
    if (st != AK_WR_QUEUED) {
      pthread_mutex_lock(&w.mu);
      w.outstanding--;
      pthread_mutex_unlock(&w.mu);
      free(r->rec);
      r->rec = NULL;
      ak_source_release(r->src);
      r->src = NULL;
      out->skipped++;
      continue;
    }
    if (++nr == RELEASE_CHUNK) {
      drain_chunk(pen, &w, rs, nr, out, pick);
      nr = 0;
    }
  }
  if (rs) drain_chunk(pen, &w, rs, nr, out, pick);
  else out->skipped = (int64_t)n;
  free(rs);
  pthread_cond_destroy(&w.cv);
  pthread_mutex_destroy(&w.mu);
  /* the row's after: the candidates this release did not move (none left: null) */
  entry_set_t left;
  bool any_left = out->moved < (int64_t)npick;
  json_t *detail = json_pack("{s:I,s:I,s:I}", "scanned", (json_int_t)out->scanned, "moved", (json_int_t)out->moved,
                             "skipped", (json_int_t)out->skipped);
  if (!any_left || entry_set(es, n, pick, &left) != 0) left = (entry_set_t){0};
  /* a failed settle leaves the row pending: the next open marks it interrupted */
  ak_audit_finish(pen->audit, seq, out->moved > 0 ? "ok" : "failed", any_left ? left.text : NULL, left.len, detail);
  json_decref(detail);
  entry_set_free(&left);
  entry_set_free(&set);
  free(pick);
  pthread_mutex_unlock(&pen->admin_mu);
  free(es);
  return 0;
}

/* ------------------------------------------------------------------- the module ---- */

static const ak_opt_t quarantine_rows[] = {
  {.key = "burst", .type = AK_OPT_INT, .def = "100", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "tokens in each source's quarantine bucket (hooks held at once before the rate applies)",
   AK_AT(ak_quarantine_cfg_t, burst)},
  {.key = "rate", .type = AK_OPT_NUMBER, .def = "20", .min = 0, .flags = AK_OPTF_HAS_MIN,
   .doc = "tokens per second refilled into each source's bucket (must be > 0)", AK_AT(ak_quarantine_cfg_t, rate)},
  {.key = "max_bytes", .type = AK_OPT_INT, .def = "1073741824", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "body bytes the whole pen may hold; a full pen answers 503 quarantine_full, never evicts",
   AK_AT(ak_quarantine_cfg_t, max_bytes)},
  {0},
};

static void quarantine_check(ak_check_t *c, json_t *q, json_t *root) {
  (void)root;
  json_t *qrate = json_object_get(q, "rate");
  if (qrate && json_is_number(qrate) && !(json_number_value(qrate) > 0))
    ak_check_error(c, "quarantine.rate must be positive, got %g", json_number_value(qrate));
}

static void sample_pen(void *pen) { ak_pen_sample(pen); }

static int quarantine_open(ak_instance_t *inst, char **err) {
  inst->pen = ak_pen_new(inst);
  if (!inst->pen) {
    ak_log(AK_LOG_ERROR, "quarantine", "cannot read the quarantine pen's state from the store", NULL);
    *err = strdup("cannot read the quarantine pen's state from the store");
    return AK_MODULE_FAILED;
  }
  return ak_gauges_add(inst->gauges, sample_pen, inst->pen) == 0 ? 0 : AK_MODULE_FAILED;
}

static void quarantine_close(ak_instance_t *inst) {
  ak_pen_free(inst->pen);
  inst->pen = NULL;
}

const ak_module_t ak_mod_quarantine = {
  .name = "quarantine",
  .roles = AK_ROLES_STORE,
  .section = "quarantine",
  .doc = "the pen for hooks that failed verification (on_verify_failure: quarantine)",
  .options = quarantine_rows,
  .cfg_size = sizeof(ak_quarantine_cfg_t),
  .check = quarantine_check,
  .open = quarantine_open,
  .close = quarantine_close,
};
