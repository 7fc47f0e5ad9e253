/* Group commit. Edge threads append to one FIFO under a mutex (no I/O under it). Writer
 * threads (batcher.partitions of them) each take what is queued, give it seqs under the
 * same mutex (so seqs are dense in queue order), and write it as one synced batch; with
 * RocksDB's pipelined writes, one group's memtable inserts overlap the next group's WAL
 * write and fsync. Each caller is answered only when its own write returned. A reaper
 * thread answers records whose deadline passed while still queued, so a stalled fsync
 * cannot hold callers forever. Dedupe keys are re-checked as records are taken, before
 * any seq is given: a record whose key is already held gets no seq at all, so seqs stay
 * dense even when two occurrences of a key meet in one batch. A failed write closes the
 * store; writer 0 reopens it with backoff and declares it usable only after a synced
 * probe write succeeds. */
#include <pthread.h>
#include <sys/statvfs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/assert.h"
#include "core/clock.h"
#include "core/envelope.h"
#include "core/gauges.h"
#include "core/ids.h"
#include "core/log.h"
#include "core/node.h"
#include "queue/dedupe.h"
#include "queue/tenantshare.h"
#include "queue/writer.h"
#include "store/batch.h"
#include "store/marker.h"
#include "store/store.h"

struct ak_writer {
  ak_instance_t *inst;
  ak_writer_commit_fn on_commit; /* set before start; read by writer threads */
  void *on_commit_ctx;
  ak_store_t *store;
  pthread_mutex_t mu;
  pthread_cond_t cv;        /* writer waits for work */
  pthread_cond_t reaper_cv; /* reaper sleeps on it so stop is prompt */
  ak_write_req_t *head, *tail;
  size_t queued;            /* records buffered (not yet taken) */
  size_t held_records;      /* buffered + in flight */
  size_t held_bytes;
  ak_tenantshare_t *tshare; /* each tenant's part of held_records / held_bytes */
  bool stopping;
  int running;              /* writer threads not yet exited */
  int nthreads;
  pthread_t *threads, reaper;
  bool started;

  int64_t max_queue, max_queue_bytes, max_batch, max_delay_ms;

  /* store health, read by submit and ready without the queue lock */
  _Atomic int store_ok;
  _Atomic int need_reopen;
  _Atomic int64_t last_failure_ns;
  _Atomic int64_t unavailable_since_ns; /* 0 when open */
  _Atomic int last_failure_class;
  int64_t reopen_at_ns;
  int reopen_attempt;

  /* ready probe cache */
  pthread_mutex_t probe_mu;
  int64_t probe_at_ns;
  bool probe_ok;

  uint64_t next_seq;        /* guarded by mu */
  uint64_t *inflight_first; /* per writer thread: the first seq of its batch being committed, 0 = none
                               (guarded by mu) */
  uint64_t *hook_count;     /* per writer thread: its own m:hook_count:<i> */
  int64_t *pen_bytes;       /* per writer thread: its own m:quarantine_bytes:<i> (may go negative) */
  _Atomic uint64_t hooks_total;
#ifdef AK_TEST_HOOKS
  int64_t test_commit_delay_ms;
  int test_commit_mode;     /* 0 synced, 1 unsynced, 2 no store write */
  _Atomic int64_t test_fail_commits; /* the next n writes of ingested hooks fail (io_error) */
#endif
  pthread_mutex_t fixed_mu; /* one ak_writer_commit_fixed at a time: it uses the last slot */
  int64_t deadline_ms;
  uint64_t min_free_bytes;
  int64_t last_space_log_ns;

  ak_writer_mirror_t mirror; /* wal.type dual: the intake half (set before start) */
  bool has_mirror;

  ak_series_t *m_batch, *m_commit, *m_hooks, *m_fail[AK_WF_COUNT], *m_reopen_ok, *m_reopen_err,
      *m_unavail, *m_replay, *m_queue_records, *m_queue_bytes, *m_disk_free, *m_wal_commit, *m_wal_batch,
      *m_disk_total;
};

static void set_unavailable(ak_writer_t *w, ak_wf_class_t cls) {
  atomic_store(&w->store_ok, 0);
  atomic_store(&w->need_reopen, 1);
  atomic_store(&w->last_failure_ns, ak_mono_ns());
  atomic_store(&w->last_failure_class, (int)cls);
  int64_t zero = 0;
  atomic_compare_exchange_strong(&w->unavailable_since_ns, &zero, ak_mono_ns());
}

/* Debian's RocksDB 7.8.3 is built with assertions: a WAL append that fails with ENOSPC
 * aborts the process inside RocksDB's write (WritableFileWriter asserts on the errored
 * file). So RocksDB must never meet a full disk: every write is preceded by a statvfs
 * and refused while less than node.min_free_bytes (plus what the write needs) is free. */
static bool disk_has_room_total(ak_writer_t *w, uint64_t need, uint64_t *free_out, uint64_t *total_out) {
  struct statvfs sv;
  if (statvfs(ak_store_path(w->store), &sv) != 0) return true; /* cannot tell: let the store answer */
  uint64_t avail = (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize;
  if (free_out) *free_out = avail;
  if (total_out) *total_out = (uint64_t)sv.f_blocks * (uint64_t)sv.f_frsize;
  return avail >= w->min_free_bytes + need;
}

static bool disk_has_room(ak_writer_t *w, uint64_t need, uint64_t *free_out) {
  return disk_has_room_total(w, need, free_out, NULL);
}

static void note_no_space(ak_writer_t *w, size_t hooks) {
  ak_counter_add(w->m_fail[AK_WF_NO_SPACE], 1);
  atomic_store(&w->last_failure_ns, ak_mono_ns());
  atomic_store(&w->last_failure_class, (int)AK_WF_NO_SPACE);
  int64_t now = ak_mono_ns();
  if (now - w->last_space_log_ns > 10000000000LL || w->last_space_log_ns == 0) {
    w->last_space_log_ns = now;
    ak_log(AK_LOG_ERROR, "store", "data volume below node.min_free_bytes: refusing commits (503)",
           "path=%s min_free_bytes=%llu hooks=%zu", ak_store_path(w->store), (unsigned long long)w->min_free_bytes,
           hooks);
  }
}

static void meta_key(char *out, size_t n, const char *base, int i) { snprintf(out, n, "%s:%d", base, i); }

/* Seq and per-writer hook counters as the store has them (at start and after a reopen). */
static void load_counts(ak_writer_t *w) {
  /* never back: after a failed commit and a reopen, its seqs stay void (under wal.type dual
   * the intake log may hold them) */
  uint64_t ns = ak_store_next_seq(w->store);
  if (ns > w->next_seq) w->next_seq = ns;
  for (int i = 0; i <= w->nthreads; i++) {
    char k[48];
    meta_key(k, sizeof k, AK_KEY_HOOK_COUNT, i);
    char *v = NULL;
    size_t vl = 0;
    w->hook_count[i] = 0;
    if (ak_store_get(w->store, AK_CF_DEFAULT, k, strlen(k), &v, &vl) == 0 && vl == 8)
      w->hook_count[i] = ak_get_u64((const uint8_t *)v);
    free(v);
    meta_key(k, sizeof k, AK_KEY_QUARANTINE_BYTES, i);
    v = NULL;
    w->pen_bytes[i] = 0;
    if (ak_store_get(w->store, AK_CF_DEFAULT, k, strlen(k), &v, &vl) == 0 && vl == 8)
      w->pen_bytes[i] = (int64_t)ak_get_u64((const uint8_t *)v);
    free(v);
  }
  atomic_store(&w->hooks_total, ak_store_hook_count(w->store));
}

ak_writer_t *ak_writer_new(ak_instance_t *inst) {
  ak_writer_t *w = calloc(1, sizeof *w);
  if (!w) return NULL;
  w->inst = inst;
  w->store = inst->store;
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  pthread_cond_init(&w->reaper_cv, NULL);
  pthread_mutex_init(&w->probe_mu, NULL);
  const ak_batcher_cfg_t *c = ak_batcher_cfg(inst->cfg);
  const ak_node_cfg_t *nc = ak_node_cfg(inst->cfg);
  w->max_queue = c->max_queue;
  w->max_queue_bytes = c->max_queue_bytes;
  w->max_batch = c->max_batch;
  w->max_delay_ms = c->max_delay_ms;
  w->tshare = ak_tenantshare_new_shared(c->tenant_max_queue, c->tenant_max_queue_bytes, c->max_queue,
                                        c->max_queue_bytes);
  w->nthreads = c->partitions > 0 ? (int)c->partitions : 1;
  if (w->nthreads > 16) w->nthreads = 16;
  w->threads = calloc((size_t)w->nthreads, sizeof *w->threads);
  /* one slot per writer thread, and one more for ak_writer_commit_fixed */
  w->hook_count = calloc((size_t)w->nthreads + 1, sizeof *w->hook_count);
  w->inflight_first = calloc((size_t)w->nthreads + 1, sizeof *w->inflight_first);
  w->pen_bytes = calloc((size_t)w->nthreads + 1, sizeof *w->pen_bytes);
  pthread_mutex_init(&w->fixed_mu, NULL);
  atomic_store(&w->store_ok, ak_store_is_open(w->store) ? 1 : 0);
  load_counts(w);
  w->deadline_ms = AK_RECORD_DEADLINE_MS;
  w->min_free_bytes = (uint64_t)nc->min_free_bytes;
#ifdef AK_TEST_HOOKS
  /* test builds only: stall every commit, shorten the record deadline */
  const char *d = getenv("ANKUSA_TEST_COMMIT_DELAY_MS");
  if (d) w->test_commit_delay_ms = atoll(d);
  /* bench/ingest_ceiling.sh: what the edge and the writer could do if the fsync, or the
   * whole store write, were free. Such a node acknowledges what it has not stored. */
  const char *cm = getenv("ANKUSA_TEST_COMMIT_MODE");
  if (cm && strcmp(cm, "nosync") == 0) w->test_commit_mode = 1;
  else if (cm && strcmp(cm, "nostore") == 0) w->test_commit_mode = 2;
  if (w->test_commit_mode)
    ak_log(AK_LOG_WARNING, "store", "test build: commits are NOT durable", "mode=%s", cm);
  const char *fc = getenv("ANKUSA_TEST_FAIL_COMMITS");
  if (fc) atomic_store(&w->test_fail_commits, atoll(fc));
  const char *dl = getenv("ANKUSA_TEST_RECORD_DEADLINE_MS");
  if (dl && atoll(dl) > 0) w->deadline_ms = atoll(dl);
#endif

  ak_metrics_t *m = inst->metrics;
  const char *const inst_l[] = {"instance", NULL};
  const char *const iv[] = {inst->name};
  w->m_batch = ak_metrics_series(ak_metrics_family(m, "ankusa_commit_batch_size", "Hooks per group commit.",
                                                   AK_METRIC_HISTOGRAM, inst_l, ak_batch_bounds, ak_batch_nbounds), iv);
  w->m_commit = ak_metrics_series(ak_metrics_family(m, "ankusa_commit_duration_seconds",
                                                    "Duration of one synced group-commit write.",
                                                    AK_METRIC_HISTOGRAM, inst_l, ak_latency_bounds,
                                                    ak_latency_nbounds), iv);
  /* the original's names for the same two observations (ours above stay for existing dashboards) */
  w->m_wal_commit = ak_metrics_series(ak_metrics_family(m, "ankusa_wal_commit_duration_seconds",
                                                        "Duration of one synced group-commit write (the original's name).",
                                                        AK_METRIC_HISTOGRAM, inst_l, ak_latency_bounds,
                                                        ak_latency_nbounds), iv);
  w->m_wal_batch = ak_metrics_series(ak_metrics_family(m, "ankusa_wal_commit_batch_size",
                                                       "Hooks per group commit (the original's name; sum and count).",
                                                       AK_METRIC_SUMMARY, inst_l, NULL, 0), iv);
  w->m_hooks = ak_metrics_instance_series(m, inst->name, "ankusa_store_hooks", "Hooks held in the store.", AK_METRIC_GAUGE);
  const char *const cls_l[] = {"instance", "class", NULL};
  ak_family_t *ff = ak_metrics_family(m, "ankusa_store_write_failures_total",
                                      "Failed store writes by class.", AK_METRIC_COUNTER, cls_l, NULL, 0);
  for (int i = 0; i < AK_WF_COUNT; i++) {
    const char *v[] = {inst->name, ak_wf_class_names[i]};
    w->m_fail[i] = ak_metrics_series(ff, v);
  }
  const char *const res_l[] = {"instance", "result", NULL};
  ak_family_t *rf = ak_metrics_family(m, "ankusa_store_reopen_total", "Store reopen attempts by result.",
                                      AK_METRIC_COUNTER, res_l, NULL, 0);
  const char *ok[] = {inst->name, "ok"}, *er[] = {inst->name, "error"};
  w->m_reopen_ok = ak_metrics_series(rf, ok);
  w->m_reopen_err = ak_metrics_series(rf, er);
  w->m_unavail = ak_metrics_instance_series(m, inst->name, "ankusa_store_unavailable_seconds", "How long the store has been closed (0 when open).", AK_METRIC_GAUGE);
  w->m_replay = ak_metrics_instance_series(m, inst->name, "ankusa_store_wal_replay_seconds", "Duration of the last store open (WAL replay).", AK_METRIC_GAUGE);
  w->m_queue_records = ak_metrics_instance_series(m, inst->name, "ankusa_batcher_queue_records", "Records buffered or in flight in the writer.", AK_METRIC_GAUGE);
  w->m_queue_bytes = ak_metrics_instance_series(m, inst->name, "ankusa_batcher_queue_bytes", "Body bytes buffered or in flight in the writer.", AK_METRIC_GAUGE);
  w->m_disk_free = ak_metrics_instance_series(m, inst->name, "ankusa_disk_free_bytes", "Free bytes on the data volume (for unprivileged use).", AK_METRIC_GAUGE);
  w->m_disk_total = ak_metrics_instance_series(m, inst->name, "ankusa_disk_total_bytes", "Size of the data volume.",
                                               AK_METRIC_GAUGE);
  ak_gauge_set(w->m_hooks, (double)atomic_load(&w->hooks_total));
  ak_gauge_set(w->m_replay, ak_store_last_open_seconds(w->store));
  return w;
}

static void finish(ak_writer_t *w, ak_write_req_t *r, ak_wr_status_t st) {
  r->status = st;
  /* repeats parked on r's key get r's outcome; taken before done() may free r */
  ak_write_req_t *parked = r->dedupe && w->inst->dedupe ? ak_dedupe_settle(w->inst->dedupe, r) : NULL;
  for (ak_write_req_t *p = parked, *nx; p; p = nx) {
    nx = p->next;
    finish(w, p, p->status);
  }
  pthread_mutex_lock(&w->mu);
  w->held_records--;
  w->held_bytes -= r->body_len;
  pthread_mutex_unlock(&w->mu);
  /* last touch of r: done() may resume the connection, after which r can be freed */
  r->done(r, r->ctx);
}

/* A tenant's share counts the hooks its ingest requests queue (the edge's ticket takes it
 * before submit and gives it back when it settles); pen writes (bounded by the pen) and
 * hooks an operator releases from the pen are not charged to it. The share is
 * work-conserving (queue/tenantshare.h): a lone tenant may go past it, never into the
 * reserve kept for a newcomer. On a full node, a tenant holding more than its share is told
 * its share is spent (429 tenant_overload: it went past it alone); one within its share
 * meets the node's bound (503 overload), as submit would answer. */
ak_wr_status_t ak_writer_share_take(ak_writer_t *w, const char *tenant, size_t tlen, size_t bytes) {
  if (!atomic_load(&w->store_ok)) return AK_WR_STORE_UNAVAILABLE;
  ak_wr_status_t st = AK_WR_QUEUED;
  pthread_mutex_lock(&w->mu);
  if (w->stopping) st = AK_WR_DRAINING;
  else if ((int64_t)w->held_records + 1 > w->max_queue || (int64_t)(w->held_bytes + bytes) > w->max_queue_bytes)
    /* a full node: a tenant holding more than its share (it went past it alone) is told its
     * share is spent; one within its share meets the node's bound */
    st = ak_tenantshare_past_share(w->tshare, tenant, tlen) ? AK_WR_TENANT_OVERLOAD : AK_WR_OVERLOAD;
  /* room on the node, but not in this tenant's share: its burst stays its own problem */
  else if (!ak_tenantshare_admit(w->tshare, tenant, tlen, bytes)) st = AK_WR_TENANT_OVERLOAD;
  pthread_mutex_unlock(&w->mu);
  return st;
}

int64_t ak_writer_share_held(ak_writer_t *w, const char *tenant, size_t tlen) {
  int64_t records = 0, bytes = 0;
  pthread_mutex_lock(&w->mu);
  ak_tenantshare_held(w->tshare, tenant, tlen, &records, &bytes);
  pthread_mutex_unlock(&w->mu);
  return records;
}

void ak_writer_share_give(ak_writer_t *w, const char *tenant, size_t tlen, size_t bytes) {
  pthread_mutex_lock(&w->mu);
  ak_tenantshare_release(w->tshare, tenant, tlen, bytes);
  pthread_mutex_unlock(&w->mu);
}

ak_wr_status_t ak_writer_submit(ak_writer_t *w, ak_write_req_t *req) {
  if (!atomic_load(&w->store_ok)) return AK_WR_STORE_UNAVAILABLE;
  req->next = NULL;
  req->status = AK_WR_QUEUED;
  req->deadline_ns = ak_mono_ns() + w->deadline_ms * 1000000;
  pthread_mutex_lock(&w->mu);
  if (w->stopping) {
    pthread_mutex_unlock(&w->mu);
    return AK_WR_DRAINING;
  }
  if ((int64_t)w->held_records + 1 > w->max_queue ||
      (int64_t)(w->held_bytes + req->body_len) > w->max_queue_bytes) {
    pthread_mutex_unlock(&w->mu);
    return AK_WR_OVERLOAD;
  }
  w->held_records++;
  w->held_bytes += req->body_len;
  bool was_empty = !w->head;
  if (w->tail) w->tail->next = req;
  else w->head = req;
  w->tail = req;
  w->queued++;
  /* a writer waits on an empty queue, or lingers (max_delay_ms) for a full batch: the first
   * record and a full batch wake it, the rest ride along */
  if (was_empty || (w->max_delay_ms > 0 && (int64_t)w->queued >= w->max_batch)) pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
  return AK_WR_QUEUED;
}

/* Take up to max_batch records off the queue and give the live ones their seqs, all
 * under mu, so seqs follow queue order whichever writer thread takes the batch. Records
 * past their deadline, and those the dedupe index answers (duplicate, dedupe_quota), go
 * to *expired with their status set (answered by the caller, outside the lock); a repeat
 * of a key still in flight is parked on the record that holds it. */
static ak_write_req_t *take_locked(ak_writer_t *w, size_t *n, ak_write_req_t **expired) {
  AK_ASSERT_HELD(&w->mu);
  int64_t now = ak_mono_ns();
  if (w->inst->dedupe) ak_dedupe_prefetch(w->inst->dedupe, w->head, (size_t)w->max_batch);
  ak_write_req_t *keep = NULL, **kt = &keep, **et = expired;
  size_t k = 0, taken = 0;
  *expired = NULL;
  while (w->head && (int64_t)taken < w->max_batch) {
    ak_write_req_t *r = w->head;
    w->head = r->next;
    r->next = NULL;
    taken++;
    if (r->deadline_ns < now) {
      r->status = AK_WR_DEADLINE;
      *et = r;
      et = &r->next;
      continue;
    }
    if (r->kind == AK_WRITE_HOOK && r->dedupe && w->inst->dedupe) {
      ak_dedupe_verdict_t v = ak_dedupe_take(w->inst->dedupe, r);
      if (v == AK_DEDUPE_WAIT) continue;
      if (v == AK_DEDUPE_DUP && w->has_mirror && w->mirror.pending(w->mirror.ctx, r->dedupe->first_id))
        r->status = AK_WR_INTAKE_PENDING;
      if (v != AK_DEDUPE_NEW) {
        *et = r;
        et = &r->next;
        continue;
      }
    }
    r->seq = r->kind == AK_WRITE_HOOK ? w->next_seq++ : 0; /* pen entries are not hooks: no seq */
    *kt = r;
    kt = &r->next;
    k++;
  }
  if (!w->head) w->tail = NULL;
  w->queued -= taken;
  *n = k;
  return keep;
}

static int64_t backoff_ms(int attempt) {
  static const int64_t steps[] = {1000, 2000, 4000, 8000, 10000};
  int64_t b = steps[attempt < 4 ? attempt : 4];
  return b - (int64_t)(rand() % (int)(b / 5 + 1)); /* up to 20% earlier: nodes don't sync up */
}

static void close_for_reopen(ak_writer_t *w) {
  ak_store_close(w->store);
  w->reopen_at_ns = ak_mono_ns() + backoff_ms(w->reopen_attempt) * 1000000;
  atomic_store(&w->need_reopen, 0);
}

static void try_reopen(ak_writer_t *w) {
  char *err = NULL;
  w->reopen_attempt++;
  if (ak_store_open(w->store, &err) != 0) {
    ak_counter_add(w->m_reopen_err, 1);
    ak_log(AK_LOG_ERROR, "store", "reopen failed", "path=%s attempt=%d", ak_store_path(w->store), w->reopen_attempt);
    free(err);
    w->reopen_at_ns = ak_mono_ns() + backoff_ms(w->reopen_attempt) * 1000000;
    return;
  }
  ak_wf_class_t cls = AK_WF_NO_SPACE;
  if (!disk_has_room(w, 64 * 1024, NULL) || ak_store_probe(w->store, &cls, &err) != 0) {
    ak_counter_add(w->m_reopen_err, 1);
    ak_counter_add(w->m_fail[cls], 1);
    ak_log(AK_LOG_ERROR, "store", "reopened store refuses writes", "class=%s attempt=%d",
           ak_wf_class_names[cls], w->reopen_attempt);
    free(err);
    close_for_reopen(w);
    return;
  }
  pthread_mutex_lock(&w->mu);
  load_counts(w);
  uint64_t ns = w->next_seq;
  pthread_mutex_unlock(&w->mu);
  ak_gauge_set(w->m_hooks, (double)atomic_load(&w->hooks_total));
  ak_gauge_set(w->m_replay, ak_store_last_open_seconds(w->store));
  ak_counter_add(w->m_reopen_ok, 1);
  ak_log(AK_LOG_INFO, "store", "store reopened", "path=%s next_seq=%llu", ak_store_path(w->store),
         (unsigned long long)ns);
  w->reopen_attempt = 0;
  atomic_store(&w->unavailable_since_ns, 0);
  atomic_store(&w->store_ok, 1);
}

static void finish_all(ak_writer_t *w, ak_write_req_t *list, ak_wr_status_t st) {
  for (ak_write_req_t *r = list, *nx; r; r = nx) {
    nx = r->next;
    finish(w, r, st);
  }
}

/* Records answered without a commit, each with the status take_locked gave it. */
static void finish_taken(ak_writer_t *w, ak_write_req_t *list) {
  for (ak_write_req_t *r = list, *nx; r; r = nx) {
    nx = r->next;
    finish(w, r, r->status);
  }
}

/* Seqs below the answer are committed (their commit notices given) or void: this
 * thread's batch is done, so only the other threads' batches in flight and the next seq
 * bound it. */
static uint64_t safe_below(ak_writer_t *w, int wi) {
  pthread_mutex_lock(&w->mu);
  uint64_t s = w->next_seq;
  for (int i = 0; i <= w->nthreads; i++)
    if (i != wi && w->inflight_first[i] && w->inflight_first[i] < s) s = w->inflight_first[i];
  /* wal.type dual: a hook the log has and the store still lacks will be committed under
   * its own seq: nothing at or above it is reported committed until then */
  if (w->has_mirror) {
    uint64_t h = w->mirror.hold_below(w->mirror.ctx);
    if (h < s) s = h;
  }
  pthread_mutex_unlock(&w->mu);
  return s;
}

/* The group marker of a batch's hooks (store/marker.h): a set per {tenant, source} met,
 * a set index per hook. 0, or -1 when out of memory or a field does not fit. */
static int build_marker(ak_writer_t *w, const ak_write_req_t *keep, size_t nh, int64_t now_ms, uint64_t *first,
                        uint8_t **out, size_t *outlen) {
  (void)w;
  ak_marker_set_in_t *sets = calloc(nh, sizeof *sets);
  const ak_source_cfg_t **srcs = calloc(nh, sizeof *srcs);
  uint16_t *hs = calloc(nh, sizeof *hs);
  const char **types = NULL;
  size_t ntypes = 0, nsets = 0, k = 0, last = 0;
  int rc = -1;
  if (!sets || !srcs || !hs) goto out;
  for (const ak_write_req_t *r = keep; r; r = r->next)
    if (r->kind == AK_WRITE_HOOK) ntypes += r->source->nsinks;
  types = calloc(ntypes ? ntypes : 1, sizeof *types);
  if (!types) goto out;
  ntypes = 0;
  for (const ak_write_req_t *r = keep; r; r = r->next) {
    if (r->kind != AK_WRITE_HOOK) continue;
    if (!k) *first = r->seq;
    const char *tn = r->tenant ? r->tenant : "";
    size_t tl = r->tenant ? r->tenant_len : 0;
    size_t si = SIZE_MAX;
    if (nsets && srcs[last] == r->source && sets[last].tenant_len == tl && !memcmp(sets[last].tenant, tn, tl))
      si = last;
    for (size_t j = 0; si == SIZE_MAX && j < nsets; j++)
      if (srcs[j] == r->source && sets[j].tenant_len == tl && !memcmp(sets[j].tenant, tn, tl)) si = j;
    if (si == SIZE_MAX) {
      if (nsets == AK_MARKER_MAX_SETS) goto out;
      si = nsets++;
      srcs[si] = r->source;
      sets[si] = (ak_marker_set_in_t){.tenant = tn, .tenant_len = tl, .source = r->source->id,
                                      .source_len = strlen(r->source->id), .nsinks = r->source->nsinks,
                                      .types = types + ntypes};
      for (size_t i = 0; i < r->source->nsinks; i++) types[ntypes++] = r->source->sinks[i].type;
    }
    last = si;
    hs[k++] = (uint16_t)si;
  }
  size_t cap = ak_marker_size((uint32_t)nh, sets, nsets);
  if (!(*out = malloc(cap))) goto out;
  *outlen = ak_marker_encode(*out, cap, now_ms, (uint32_t)nh, sets, nsets, hs);
  if (!*outlen) {
    free(*out);
    *out = NULL;
    goto out;
  }
  rc = 0;
out:
  free(sets);
  free(srcs);
  free(hs);
  free(types);
  return rc;
}

/* A group of hooks recovered from the intake log (ak_writer_commit_fixed): never mixed
 * with others, so the first record says. */
static bool keep_fixed(const ak_write_req_t *keep) { return keep && keep->fixed; }

/* Takes the hooks out of *list (order kept); the pen entries stay. */
static ak_write_req_t *split_hooks(ak_write_req_t **list) {
  ak_write_req_t *hooks = NULL, **ht = &hooks, **lp = list;
  while (*lp) {
    ak_write_req_t *r = *lp;
    if (r->kind == AK_WRITE_HOOK) {
      *lp = r->next;
      r->next = NULL;
      *ht = r;
      ht = &r->next;
    } else {
      lp = &r->next;
    }
  }
  return hooks;
}

/* One group (seqs already assigned by take_locked): write one synced batch, answer. */
static void commit_batch(ak_writer_t *w, int wi, ak_write_req_t *keep, size_t nk) {
  if (!keep) return;
  if (!atomic_load(&w->store_ok)) {
    finish_all(w, keep, AK_WR_STORE_UNAVAILABLE);
    return;
  }
  uint64_t need = 64 * 1024;
  for (ak_write_req_t *r = keep; r; r = r->next) need += 2 * (uint64_t)r->rec_len + 256;
  if (!disk_has_room(w, need, NULL)) {
    note_no_space(w, nk);
    finish_all(w, keep, AK_WR_STORE_UNAVAILABLE);
    return;
  }
  /* pinned: a failing sibling cannot close the store while this batch holds its handles */
  if (ak_store_pin(w->store) != 0) {
    finish_all(w, keep, AK_WR_STORE_UNAVAILABLE);
    return;
  }
  ak_batch_t *wb = ak_batch_new(w->store);
  if (!wb) {
    ak_store_unpin(w->store);
    finish_all(w, keep, AK_WR_STORE_UNAVAILABLE);
    return;
  }
  uint64_t seq = 0;
  size_t nh = 0;              /* hooks in the batch (pen entries have no seq) */
  int64_t pen_delta = 0;
  bool pen_touched = false;
  int64_t now_ms = ak_now_ms();
  const uint8_t *id_key = ak_store_id_key(w->store);
  size_t nidx = 0;            /* hooks that still need an 'i' index key */
  /* Puts are grouped by column family and key family: consecutive ascending keys let
   * each memtable's skiplist reuse its insert position instead of searching. */
  for (ak_write_req_t *r = keep; r; r = r->next) {
    if (r->kind != AK_WRITE_HOOK) continue;
    nh++;
    seq = r->seq + 1;
    ak_envelope_set_seq(r->rec, r->seq);
    /* The id now names its seq, so no index key is needed to find it. Not for a hook
     * released from the pen: its id was given out when it was held, and stays. */
    if (r->fixed) /* its id was given out: kept as is, indexed unless this store sealed it */
      r->id_sealed = id_key && ak_uuid7_unseal(id_key, r->id) == r->seq;
    else
      r->id_sealed = id_key && !r->unpen && ak_uuid7_seal(id_key, r->id, r->seq);
    if (r->id_sealed && !r->fixed) ak_envelope_set_id(r->rec, r->id);
    else nidx++;
    uint8_t hk[AK_HOOK_KEY_LEN];
    ak_key_hook(hk, r->seq);
    ak_batch_put(wb, AK_CF_HOOKS, hk, sizeof hk, r->rec, r->rec_len);
  }
  /* The group marker: whose hooks these are and which sinks each was acked for. It is
   * the only thing besides the records the dispatcher needs: no row per delivery. */
  uint8_t *marker = NULL;
  size_t mlen = 0;
  uint64_t first_seq = 0;
  if (nh && build_marker(w, keep, nh, now_ms, &first_seq, &marker, &mlen) != 0) {
    ak_batch_free(wb);
    ak_store_unpin(w->store);
    finish_all(w, keep, AK_WR_STORE_UNAVAILABLE);
    return;
  }
  if (nh) {
    uint8_t gk[AK_GROUP_KEY_LEN];
    ak_key_group(gk, first_seq);
    ak_batch_put(wb, AK_CF_INDEX, gk, sizeof gk, marker, mlen);
  }
  for (ak_write_req_t *r = keep; nidx && r; r = r->next) {
    if (r->kind != AK_WRITE_HOOK || r->id_sealed) continue;
    uint8_t ik[AK_ID_KEY_LEN], sv[8], jk[AK_GROUP_KEY_LEN];
    ak_key_id(ik, r->id);
    ak_put_u64(sv, r->seq);
    ak_batch_put(wb, AK_CF_INDEX, ik, sizeof ik, sv, 8);
    /* its reverse, so that reclaim finds the id key from the seq */
    ak_key_unsealed(jk, r->seq);
    ak_batch_put(wb, AK_CF_INDEX, jk, sizeof jk, r->id, 16);
  }
  if (w->inst->dedupe) ak_dedupe_put(w->inst->dedupe, wb, keep);
  /* The quarantine pen: entries held ('s' summary + 'b' record), and the pen rows of
   * hooks released from it, deleted in the same batch that commits them as hooks. */
  for (ak_write_req_t *r = keep; r; r = r->next) {
    if (r->kind == AK_WRITE_QUARANTINE) {
      uint8_t sk[AK_PEN_KEY_LEN], sv[14 + 2 * 255];
      ak_envelope_t env;
      ak_pen_summary_t ps = {.reason = r->reason, .size = r->body_len, .source = r->source->id,
                             .source_len = strlen(r->source->id)};
      bool decoded = ak_envelope_decode(r->rec, r->rec_len, &env) == 0;
      if (decoded) {
        ps.tenant = env.tenant;
        ps.tenant_len = env.tenant_len;
      } else {
        ps.tenant = r->source->tenant;
        ps.tenant_len = strlen(r->source->tenant);
      }
      if (ps.tenant_len > 255) ps.tenant_len = 255; /* ids are at most 64 characters */
      if (ps.source_len > 255) ps.source_len = 255;
      size_t svl = ak_pen_summary_encode(sv, sizeof sv, &ps);
      if (decoded) ak_envelope_clear(&env);
      ak_key_pen(sk, AK_PEN_SUMMARY, r->received_at_ms, r->id);
      ak_batch_put(wb, AK_CF_QUARANTINE, sk, sizeof sk, sv, svl);
      ak_key_pen(sk, AK_PEN_BODY, r->received_at_ms, r->id);
      ak_batch_put(wb, AK_CF_QUARANTINE, sk, sizeof sk, r->rec, r->rec_len);
      pen_delta += (int64_t)r->body_len;
      pen_touched = true;
    } else if (r->unpen) {
      uint8_t sk[AK_PEN_KEY_LEN];
      ak_key_pen(sk, AK_PEN_SUMMARY, r->received_at_ms, r->id);
      ak_batch_delete(wb, AK_CF_QUARANTINE, sk, sizeof sk);
      ak_key_pen(sk, AK_PEN_BODY, r->received_at_ms, r->id);
      ak_batch_delete(wb, AK_CF_QUARANTINE, sk, sizeof sk);
      pen_delta -= r->unpen_bytes;
      pen_touched = true;
    }
  }
  if (nh) {
    char nk_key[48], hc_key[48];
    uint8_t ns[8], hc[8];
    meta_key(nk_key, sizeof nk_key, AK_KEY_NEXT_SEQ, wi);
    meta_key(hc_key, sizeof hc_key, AK_KEY_HOOK_COUNT, wi);
    ak_put_u64(ns, seq);
    ak_put_u64(hc, w->hook_count[wi] + nh);
    ak_batch_put(wb, AK_CF_DEFAULT, nk_key, strlen(nk_key), ns, 8);
    ak_batch_put(wb, AK_CF_DEFAULT, hc_key, strlen(hc_key), hc, 8);
  }
  if (pen_touched) {
    char qb_key[48];
    uint8_t qb[8];
    meta_key(qb_key, sizeof qb_key, AK_KEY_QUARANTINE_BYTES, wi);
    ak_put_u64(qb, (uint64_t)(w->pen_bytes[wi] + pen_delta));
    ak_batch_put(wb, AK_CF_DEFAULT, qb_key, strlen(qb_key), qb, 8);
  }

  /* wal.type dual: the intake half starts now and runs beside the store write */
  void *mgroup = NULL;
  bool mirrored = w->has_mirror && nh && !keep_fixed(keep);
  if (mirrored && !(mgroup = w->mirror.begin(w->mirror.ctx, keep, wb))) {
    free(marker);
    ak_batch_free(wb);
    ak_store_unpin(w->store);
    finish_all(w, keep, AK_WR_INTAKE_UNAVAILABLE);
    return;
  }
  if (nh && keep_fixed(keep)) {
    /* recovered hooks may sit below seqs already handed out: m:next_seq never goes back */
    char nk_key[48];
    uint8_t ns[8];
    meta_key(nk_key, sizeof nk_key, AK_KEY_NEXT_SEQ, wi);
    ak_put_u64(ns, w->next_seq > seq ? w->next_seq : seq);
    ak_batch_put(wb, AK_CF_DEFAULT, nk_key, strlen(nk_key), ns, 8);
  }

#ifdef AK_TEST_HOOKS
  if (w->test_commit_delay_ms > 0) usleep((useconds_t)(w->test_commit_delay_ms * 1000));
#endif
  int64_t t0 = ak_mono_ns();
  ak_wf_class_t cls = AK_WF_OTHER;
  char *err = NULL;
#ifdef AK_TEST_HOOKS
  int rc = w->test_commit_mode == 2 ? 0 : 1;
  if (nh && !keep_fixed(keep) && atomic_load(&w->test_fail_commits) > 0 &&
      atomic_fetch_sub(&w->test_fail_commits, 1) > 0) {
    rc = -1; /* ANKUSA_TEST_FAIL_COMMITS: as if the store's write failed */
    cls = AK_WF_IO_ERROR;
  }
  if (rc == 1) rc = ak_store_write_pinned(w->store, wb, w->test_commit_mode == 0, &cls, &err);
#else
  int rc = ak_store_write_pinned(w->store, wb, true, &cls, &err);
#endif
  ak_store_unpin(w->store);
  double dur = (double)(ak_mono_ns() - t0) / 1e9;
  ak_batch_free(wb);
  ak_histogram_observe(w->m_commit, dur);
  ak_histogram_observe(w->m_batch, (double)nk);
  ak_histogram_observe(w->m_wal_commit, dur);
  ak_histogram_observe(w->m_wal_batch, (double)nk);
  if (rc == 0) {
    w->hook_count[wi] += nh;
    w->pen_bytes[wi] += pen_delta;
    ak_gauge_set(w->m_hooks, (double)(atomic_fetch_add(&w->hooks_total, nh) + nh));
    for (ak_write_req_t *r = keep; r; r = r->next) r->stored = r->kind == AK_WRITE_HOOK;
    if (nh && w->on_commit) w->on_commit(w->on_commit_ctx, first_seq, marker, mlen, safe_below(w, wi));
    free(marker);
    if (mirrored) {
      ak_write_req_t *hooks = split_hooks(&keep);
      finish_all(w, keep, AK_WR_COMMITTED);
      w->mirror.disk_done(w->mirror.ctx, mgroup, true, hooks);
      return;
    }
    finish_all(w, keep, AK_WR_COMMITTED);
    return;
  }
  free(marker);
  if (mirrored) {
    ak_write_req_t *hooks = split_hooks(&keep);
    w->mirror.disk_done(w->mirror.ctx, mgroup, false, hooks);
  }
  ak_counter_add(w->m_fail[cls], 1);
  if (atomic_load(&w->store_ok))
    ak_log(AK_LOG_ERROR, "store", "commit failed; closing store to reopen", "class=%s hooks=%zu",
           ak_wf_class_names[cls], nk);
  free(err);
  set_unavailable(w, cls);
  finish_all(w, keep, AK_WR_STORE_UNAVAILABLE);
  pthread_mutex_lock(&w->mu);
  pthread_cond_broadcast(&w->cv); /* wake writer 0 to close and schedule the reopen */
  pthread_mutex_unlock(&w->mu);
}

static void timed_wait(ak_writer_t *w, pthread_cond_t *cv, int64_t wait_ns) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_nsec += wait_ns % 1000000000;
  ts.tv_sec += wait_ns / 1000000000 + ts.tv_nsec / 1000000000;
  ts.tv_nsec %= 1000000000;
  pthread_cond_timedwait(cv, &w->mu, &ts);
}

typedef struct {
  ak_writer_t *w;
  int index;
} writer_arg_t;

static void *writer_main(void *arg) {
  writer_arg_t *wa = arg;
  ak_writer_t *w = wa->w;
  int wi = wa->index;
  free(wa);
  char name[16];
  snprintf(name, sizeof name, "ak-writer-%d", wi);
  pthread_setname_np(pthread_self(), name);
  ak_store_thread_init();
  pthread_mutex_lock(&w->mu);
  for (;;) {
    bool ok = atomic_load(&w->store_ok) && !atomic_load(&w->need_reopen);
    if (ok) {
      if (!w->head) {
        if (w->stopping) break;
        pthread_cond_wait(&w->cv, &w->mu);
        continue;
      }
      if (w->max_delay_ms > 0 && (int64_t)w->queued < w->max_batch && !w->stopping)
        timed_wait(w, &w->cv, w->max_delay_ms * 1000000);
      size_t n;
      ak_write_req_t *expired, *b = take_locked(w, &n, &expired);
      for (ak_write_req_t *r = b; r; r = r->next)
        if (r->kind == AK_WRITE_HOOK) {
          w->inflight_first[wi] = r->seq;
          break;
        }
      pthread_mutex_unlock(&w->mu);
      finish_taken(w, expired);
      commit_batch(w, wi, b, n);
      pthread_mutex_lock(&w->mu);
      w->inflight_first[wi] = 0;
      continue;
    }
    /* the store is closed or must be reopened: answer what is queued at once */
    if (w->head) {
      size_t n;
      ak_write_req_t *expired, *b = take_locked(w, &n, &expired);
      pthread_mutex_unlock(&w->mu);
      finish_taken(w, expired);
      finish_all(w, b, AK_WR_STORE_UNAVAILABLE);
      pthread_mutex_lock(&w->mu);
      continue;
    }
    if (w->stopping) break;
    if (wi != 0) { /* writer 0 owns close and reopen */
      timed_wait(w, &w->cv, 200000000);
      continue;
    }
    if (atomic_load(&w->need_reopen)) {
      pthread_mutex_unlock(&w->mu);
      close_for_reopen(w); /* waits for sibling writes in flight (store lock) */
      pthread_mutex_lock(&w->mu);
      continue;
    }
    int64_t now = ak_mono_ns();
    if (now >= w->reopen_at_ns) {
      pthread_mutex_unlock(&w->mu);
      try_reopen(w);
      pthread_mutex_lock(&w->mu);
      pthread_cond_broadcast(&w->cv);
      continue;
    }
    int64_t wait_ns = w->reopen_at_ns - now;
    timed_wait(w, &w->cv, wait_ns < 200000000 ? wait_ns : 200000000);
  }
  if (--w->running == 0) pthread_cond_broadcast(&w->reaper_cv);
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

/* Answers records whose deadline passed while still queued (the writer is stuck in a
 * commit). Records are unlinked under the lock, so the writer never sees them. */
static void *reaper_main(void *arg) {
  ak_writer_t *w = arg;
  pthread_setname_np(pthread_self(), "ak-reaper");
  pthread_mutex_lock(&w->mu);
  while (w->running > 0) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 100000000;
    ts.tv_sec += ts.tv_nsec / 1000000000;
    ts.tv_nsec %= 1000000000;
    pthread_cond_timedwait(&w->reaper_cv, &w->mu, &ts);
    int64_t now = ak_mono_ns();
    ak_write_req_t *expired = NULL, **et = &expired;
    ak_write_req_t **pp = &w->head;
    while (*pp && (*pp)->deadline_ns < now) {
      ak_write_req_t *r = *pp;
      *pp = r->next;
      r->next = NULL;
      *et = r;
      et = &r->next;
      w->queued--;
    }
    if (!w->head) w->tail = NULL;
    if (expired) {
      pthread_mutex_unlock(&w->mu);
      for (ak_write_req_t *r = expired, *nx; r; r = nx) {
        nx = r->next;
        finish(w, r, AK_WR_DEADLINE);
      }
      pthread_mutex_lock(&w->mu);
    }
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

void ak_writer_set_mirror(ak_writer_t *w, const ak_writer_mirror_t *m) {
  w->mirror = *m;
  w->has_mirror = true;
}

void ak_writer_answer(ak_writer_t *w, ak_write_req_t *list, ak_wr_status_t st) { finish_all(w, list, st); }

bool ak_writer_pending(ak_writer_t *w, const uint8_t id[16]) {
  return w && w->has_mirror && w->mirror.pending(w->mirror.ctx, id);
}

void ak_writer_commit_fixed(ak_writer_t *w, ak_write_req_t *list) {
  pthread_mutex_lock(&w->fixed_mu);
  int wi = w->nthreads; /* its own slot: writer threads may be committing beside it */
  while (list) {
    ak_write_req_t *run = NULL, **rt = &run, *expired = NULL, **et = &expired;
    size_t n = 0;
    uint64_t prev = 0;
    pthread_mutex_lock(&w->mu);
    /* a run of dense seqs (a group marker names first_seq .. first_seq + count - 1) */
    while (list && (n == 0 || list->seq == prev + 1) && (int64_t)n < w->max_batch) {
      ak_write_req_t *r = list;
      list = r->next;
      r->next = NULL;
      r->fixed = true;
      r->status = AK_WR_QUEUED;
      w->held_records++;
      w->held_bytes += r->body_len;
      if (r->dedupe && w->inst->dedupe) {
        ak_dedupe_verdict_t v = ak_dedupe_take(w->inst->dedupe, r);
        if (v == AK_DEDUPE_WAIT) break; /* parked on its key's first holder: answered with it */
        if (v == AK_DEDUPE_DUP) {
          *et = r;
          et = &r->next;
          break;
        }
        /* AK_DEDUPE_QUOTA: an acked hook is stored all the same, without its key */
      }
      if (r->seq >= w->next_seq) w->next_seq = r->seq + 1;
      prev = r->seq;
      *rt = r;
      rt = &r->next;
      n++;
    }
    if (run) w->inflight_first[wi] = run->seq;
    pthread_mutex_unlock(&w->mu);
    finish_taken(w, expired);
    commit_batch(w, wi, run, n);
    pthread_mutex_lock(&w->mu);
    w->inflight_first[wi] = 0;
    pthread_mutex_unlock(&w->mu);
  }
  pthread_mutex_unlock(&w->fixed_mu);
}

int ak_writer_start(ak_writer_t *w) {
  pthread_mutex_lock(&w->mu);
  w->running = w->nthreads;
  pthread_mutex_unlock(&w->mu);
  for (int i = 0; i < w->nthreads; i++) {
    writer_arg_t *wa = malloc(sizeof *wa);
    wa->w = w;
    wa->index = i;
    if (pthread_create(&w->threads[i], NULL, writer_main, wa) != 0) return -1;
  }
  if (pthread_create(&w->reaper, NULL, reaper_main, w) != 0) return -1;
  w->started = true;
  return 0;
}

void ak_writer_stop(ak_writer_t *w) {
  if (!w->started) return;
  pthread_mutex_lock(&w->mu);
  w->stopping = true;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  for (int i = 0; i < w->nthreads; i++) pthread_join(w->threads[i], NULL);
  pthread_join(w->reaper, NULL);
  w->started = false;
}

void ak_writer_free(ak_writer_t *w) {
  if (!w) return;
  ak_writer_stop(w);
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cv);
  pthread_cond_destroy(&w->reaper_cv);
  pthread_mutex_destroy(&w->probe_mu);
  ak_tenantshare_free(w->tshare);
  free(w->threads);
  free(w->hook_count);
  free(w->inflight_first);
  free(w->pen_bytes);
  free(w);
}

bool ak_writer_ready(ak_writer_t *w, const char **reason) {
  if (!atomic_load(&w->store_ok)) {
    *reason = atomic_load(&w->unavailable_since_ns) ? ak_wf_class_names[atomic_load(&w->last_failure_class)]
                                                     : "store_unavailable";
    return false;
  }
  int64_t now = ak_mono_ns();
  int64_t lf = atomic_load(&w->last_failure_ns);
  if (lf && now - lf < 5000000000LL) {
    *reason = ak_wf_class_names[atomic_load(&w->last_failure_class)];
    return false;
  }
  if (!disk_has_room(w, 64 * 1024, NULL)) {
    *reason = ak_wf_class_names[AK_WF_NO_SPACE];
    return false;
  }
  pthread_mutex_lock(&w->probe_mu);
  if (now - w->probe_at_ns > 1000000000LL || w->probe_at_ns == 0) {
    ak_wf_class_t cls = AK_WF_OTHER;
    char *err = NULL;
    w->probe_ok = ak_store_probe(w->store, &cls, &err) == 0;
    w->probe_at_ns = ak_mono_ns();
    if (!w->probe_ok) {
      ak_counter_add(w->m_fail[cls], 1);
      free(err);
      set_unavailable(w, cls);
      pthread_mutex_lock(&w->mu);
      pthread_cond_broadcast(&w->cv);
      pthread_mutex_unlock(&w->mu);
    }
  }
  bool ok = w->probe_ok;
  pthread_mutex_unlock(&w->probe_mu);
  *reason = ok ? "ok" : ak_wf_class_names[atomic_load(&w->last_failure_class)];
  return ok;
}

void ak_writer_on_commit(ak_writer_t *w, ak_writer_commit_fn fn, void *ctx) {
  w->on_commit = fn;
  w->on_commit_ctx = ctx;
}

void ak_writer_note_reclaimed(ak_writer_t *w, uint64_t n) {
  uint64_t left = atomic_fetch_sub(&w->hooks_total, n) - n;
  ak_gauge_set(w->m_hooks, (double)left);
}

void ak_writer_note_restored(ak_writer_t *w, uint64_t n) {
  ak_gauge_set(w->m_hooks, (double)(atomic_fetch_add(&w->hooks_total, n) + n));
}

uint64_t ak_writer_committed_below(ak_writer_t *w) { return safe_below(w, -1); }

uint64_t ak_writer_next_seq(ak_writer_t *w) {
  pthread_mutex_lock(&w->mu);
  uint64_t s = w->next_seq;
  pthread_mutex_unlock(&w->mu);
  return s;
}

uint64_t ak_writer_hooks(ak_writer_t *w) { return atomic_load(&w->hooks_total); }

void ak_writer_sample(ak_writer_t *w) {
  int64_t since = atomic_load(&w->unavailable_since_ns);
  ak_gauge_set(w->m_unavail, since ? (double)(ak_mono_ns() - since) / 1e9 : 0.0);
  pthread_mutex_lock(&w->mu);
  size_t r = w->held_records, b = w->held_bytes;
  pthread_mutex_unlock(&w->mu);
  uint64_t free_bytes = 0, total_bytes = 0;
  disk_has_room_total(w, 0, &free_bytes, &total_bytes);
  ak_gauge_set(w->m_disk_free, (double)free_bytes);
  ak_gauge_set(w->m_disk_total, (double)total_bytes);
  ak_gauge_set(w->m_queue_records, (double)r);
  ak_gauge_set(w->m_queue_bytes, (double)b);
}

/* ------------------------------------------------------------------- the modules ---- */

static const ak_opt_t batcher_rows[] = {
  {.key = "partitions", .type = AK_OPT_INT, .def = "1", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "group-commit writer threads; more than one overlaps commits (RocksDB pipelined writes), "
          "worth it only with cores to spare; at most 16 are started",
   AK_AT(ak_batcher_cfg_t, partitions)},
  {.key = "max_batch", .type = AK_OPT_INT, .def = "256", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "records per commit at most", AK_AT(ak_batcher_cfg_t, max_batch)},
  {.key = "max_delay_ms", .type = AK_OPT_INT, .def = "0", .min = 0, .flags = AK_OPTF_HAS_MIN,
   .doc = "linger before a commit (0 = none: the next batch fills while one syncs)",
   AK_AT(ak_batcher_cfg_t, max_delay_ms)},
  {.key = "max_queue", .type = AK_OPT_INT, .def = "10000", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "records buffered plus in flight per partition; beyond it 503 overload", AK_AT(ak_batcher_cfg_t, max_queue)},
  {.key = "max_queue_bytes", .type = AK_OPT_INT, .def = "268435456", .min = 1,
   .flags = AK_OPTF_HAS_MIN, .doc = "the same bound in body bytes", AK_AT(ak_batcher_cfg_t, max_queue_bytes)},
  {.key = "tenant_max_queue", .type = AK_OPT_INT, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN,
   .doc = "records of one tenant buffered plus in flight while another tenant holds records; beyond it 429 "
          "tenant_overload; alone, a tenant may use max_queue less this reserve; null = max_queue / 4",
   AK_AT(ak_batcher_cfg_t, tenant_max_queue)},
  {.key = "tenant_max_queue_bytes", .type = AK_OPT_INT, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN,
   .doc = "the same bound in body bytes; null = max_queue_bytes / 4", AK_AT(ak_batcher_cfg_t, tenant_max_queue_bytes)},
  {0},
};

/* A null tenant share resolves to a quarter of the queue (the same share dispatch.tenants
 * gives one tenant of the dispatch window); an explicit one may not exceed the queue. */
static void batcher_check(ak_check_t *c, json_t *b, json_t *root) {
  (void)root;
  static const char *const share[][2] = {{"tenant_max_queue", "max_queue"},
                                         {"tenant_max_queue_bytes", "max_queue_bytes"}};
  for (size_t k = 0; k < 2; k++) {
    int64_t global, v;
    if (!ak_check_int_at(b, share[k][1], &global)) continue;
    json_t *tv = json_object_get(b, share[k][0]);
    if (json_is_null(tv)) json_object_set_new(b, share[k][0], json_integer(global / 4 < 1 ? 1 : global / 4));
    else if (ak_check_int_at(b, share[k][0], &v) && v > global)
      ak_check_error(c, "batcher.%s must be between 1 and %lld (batcher.%s), got %lld", share[k][0],
                     (long long)global, share[k][1], (long long)v);
  }
}

static void sample_writer(void *w) { ak_writer_sample(w); }

static int batcher_open(ak_instance_t *inst, char **err) {
  (void)err;
  inst->writer = ak_writer_new(inst);
  if (!inst->writer) return AK_MODULE_FAILED;
  return ak_gauges_add(inst->gauges, sample_writer, inst->writer) == 0 ? 0 : AK_MODULE_FAILED;
}

static int batcher_start(ak_instance_t *inst, char **err) {
  if (ak_writer_start(inst->writer) == 0) return 0;
  ak_log(AK_LOG_ERROR, "writer", "cannot start the writer thread", NULL);
  *err = strdup("cannot start the writer thread");
  return AK_MODULE_FAILED;
}

/* First of the stops: everything queued is committed and answered before the listeners
 * wait for their last answers. */
static void batcher_stop(ak_instance_t *inst) { ak_writer_stop(inst->writer); }

static void batcher_close(ak_instance_t *inst) {
  ak_writer_free(inst->writer);
  inst->writer = NULL;
}

const ak_module_t ak_mod_batcher = {
  .name = "batcher",
  .roles = AK_ROLES_STORE,
  .section = "batcher",
  .doc = "group commit",
  .options = batcher_rows,
  .cfg_size = sizeof(ak_batcher_cfg_t),
  .check = batcher_check,
  .open = batcher_open,
  .start = batcher_start,
  .stop = batcher_stop,
  .close = batcher_close,
};

const ak_batcher_cfg_t *ak_batcher_cfg(const ak_config_t *cfg) { return ak_config_of(cfg, &ak_mod_batcher); }

static const ak_opt_t wal_rows[] = {
  {.key = "type", .type = AK_OPT_ENUM, .def = "disk", .enum_vals = "disk|none|dual",
   .env = "ANKUSA_WAL_TYPE",
   .doc = "what a 201 waits for: disk, the synced store write; dual, that and the intake log's confirm "
          "(intake.*); none, every sink's confirm, inside the request",
   AK_AT(ak_wal_cfg_t, type)},
  {.key = "publish_timeout_ms", .type = AK_OPT_INT, .def = "8000", .min = 1,
   .flags = AK_OPTF_HAS_MIN, .doc = "wal.type none: the one deadline (ms) for every sink of a hook to confirm, from the "
          "start of its publish; past it 503 (keep it below the provider's timeout)",
   AK_AT(ak_wal_cfg_t, publish_timeout_ms)},
  {0},
};

const ak_module_t ak_mod_wal = {
  .name = "wal",
  .roles = AK_ROLES_STORE,
  .section = "wal",
  .doc = "durability of the ack",
  .options = wal_rows,
  .cfg_size = sizeof(ak_wal_cfg_t),
};

const ak_wal_cfg_t *ak_wal_cfg(const ak_config_t *cfg) { return ak_config_of(cfg, &ak_mod_wal); }

const char *ak_wal_type_text(ak_wal_type_t t) {
  switch (t) {
  case AK_WAL_DISK: return "disk";
  case AK_WAL_NONE: return "none";
  case AK_WAL_DUAL: return "dual";
  }
  return "disk";
}
