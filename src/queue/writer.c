/* Group commit. Edge threads append to one FIFO under a mutex (no I/O under it); the
 * writer thread swaps out everything queued, writes one synced batch, and answers. While
 * it is in fsync, the next batch accumulates. A reaper thread answers records whose
 * deadline passed while still queued, so a stalled fsync cannot hold callers forever.
 * A failed write closes the store; the writer reopens it with backoff and only declares
 * it usable after a synced probe write succeeds. */
#include <pthread.h>
#include <sys/statvfs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/clock.h"
#include "core/envelope.h"
#include "core/log.h"
#include "queue/writer.h"
#include "store/store.h"

struct ak_writer {
  ak_instance_t *inst;
  ak_store_t *store;
  pthread_mutex_t mu;
  pthread_cond_t cv;        /* writer waits for work */
  pthread_cond_t reaper_cv; /* reaper sleeps on it so stop is prompt */
  ak_write_req_t *head, *tail;
  size_t queued;            /* records buffered (not yet taken) */
  size_t held_records;      /* buffered + in flight */
  size_t held_bytes;
  bool stopping, stopped;
  pthread_t thread, reaper;
  bool started;

  int64_t max_queue, max_queue_bytes, max_batch, max_delay_ms;
  bool write_archive;

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

  uint64_t next_seq, hook_count;
  int64_t test_commit_delay_ms;
  int64_t deadline_ms;
  uint64_t min_free_bytes;
  int64_t last_space_log_ns;

  ak_series_t *m_batch, *m_commit, *m_hooks, *m_fail[AK_WF_COUNT], *m_reopen_ok, *m_reopen_err,
      *m_unavail, *m_replay, *m_queue_records, *m_queue_bytes, *m_disk_free;
};

static void set_unavailable(ak_writer_t *w, ak_wf_class_t cls) {
  atomic_store(&w->store_ok, 0);
  atomic_store(&w->last_failure_ns, ak_mono_ns());
  atomic_store(&w->last_failure_class, (int)cls);
  int64_t zero = 0;
  atomic_compare_exchange_strong(&w->unavailable_since_ns, &zero, ak_mono_ns());
}

/* Debian's RocksDB 7.8.3 is built with assertions: a WAL append that fails with ENOSPC
 * aborts the process inside rocksdb_write (WritableFileWriter asserts on the errored
 * file). So RocksDB must never meet a full disk: every write is preceded by a statvfs
 * and refused while less than node.min_free_bytes (plus what the write needs) is free. */
static bool disk_has_room(ak_writer_t *w, uint64_t need, uint64_t *free_out) {
  struct statvfs sv;
  if (statvfs(ak_store_path(w->store), &sv) != 0) return true; /* cannot tell: let the store answer */
  uint64_t avail = (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize;
  if (free_out) *free_out = avail;
  return avail >= w->min_free_bytes + need;
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

ak_writer_t *ak_writer_new(ak_instance_t *inst) {
  ak_writer_t *w = calloc(1, sizeof *w);
  if (!w) return NULL;
  w->inst = inst;
  w->store = inst->store;
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  pthread_cond_init(&w->reaper_cv, NULL);
  pthread_mutex_init(&w->probe_mu, NULL);
  const ak_config_t *c = inst->cfg;
  w->max_queue = c->batcher_max_queue;
  w->max_queue_bytes = c->batcher_max_queue_bytes;
  w->max_batch = c->batcher_max_batch;
  w->max_delay_ms = c->batcher_max_delay_ms;
  w->write_archive = (c->roles & AK_ROLE_STORAGE) != 0;
  w->next_seq = ak_store_next_seq(w->store);
  w->hook_count = ak_store_hook_count(w->store);
  atomic_store(&w->store_ok, ak_store_is_open(w->store) ? 1 : 0);
  w->deadline_ms = AK_RECORD_DEADLINE_MS;
  w->min_free_bytes = (uint64_t)c->min_free_bytes;
#ifdef AK_TEST_HOOKS
  /* test builds only: stall every commit, shorten the record deadline */
  const char *d = getenv("ANKUSA_TEST_COMMIT_DELAY_MS");
  if (d) w->test_commit_delay_ms = atoll(d);
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
  w->m_hooks = ak_metrics_series(ak_metrics_family(m, "ankusa_store_hooks", "Hooks held in the store.",
                                                   AK_METRIC_GAUGE, inst_l, NULL, 0), iv);
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
  w->m_unavail = ak_metrics_series(ak_metrics_family(m, "ankusa_store_unavailable_seconds",
                                                     "How long the store has been closed (0 when open).",
                                                     AK_METRIC_GAUGE, inst_l, NULL, 0), iv);
  w->m_replay = ak_metrics_series(ak_metrics_family(m, "ankusa_store_wal_replay_seconds",
                                                    "Duration of the last store open (WAL replay).",
                                                    AK_METRIC_GAUGE, inst_l, NULL, 0), iv);
  w->m_queue_records = ak_metrics_series(ak_metrics_family(m, "ankusa_batcher_queue_records",
                                                           "Records buffered or in flight in the writer.",
                                                           AK_METRIC_GAUGE, inst_l, NULL, 0), iv);
  w->m_queue_bytes = ak_metrics_series(ak_metrics_family(m, "ankusa_batcher_queue_bytes",
                                                         "Body bytes buffered or in flight in the writer.",
                                                         AK_METRIC_GAUGE, inst_l, NULL, 0), iv);
  w->m_disk_free = ak_metrics_series(ak_metrics_family(m, "ankusa_disk_free_bytes",
                                                      "Free bytes on the data volume (for unprivileged use).",
                                                      AK_METRIC_GAUGE, inst_l, NULL, 0), iv);
  ak_gauge_set(w->m_hooks, (double)w->hook_count);
  ak_gauge_set(w->m_replay, ak_store_last_open_seconds(w->store));
  return w;
}

static void finish(ak_writer_t *w, ak_write_req_t *r, ak_wr_status_t st) {
  r->status = st;
  pthread_mutex_lock(&w->mu);
  w->held_records--;
  w->held_bytes -= r->body_len;
  pthread_mutex_unlock(&w->mu);
  /* last touch of r: done() may resume the connection, after which r can be freed */
  r->done(r, r->ctx);
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
  if (w->tail) w->tail->next = req;
  else w->head = req;
  w->tail = req;
  w->queued++;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
  return AK_WR_QUEUED;
}

/* Take up to max_batch records off the queue. Caller holds mu. */
static ak_write_req_t *take_locked(ak_writer_t *w, size_t *n) {
  ak_write_req_t *first = w->head, *last = NULL, *r = w->head;
  size_t k = 0;
  while (r && (int64_t)k < w->max_batch) {
    last = r;
    r = r->next;
    k++;
  }
  if (!last) {
    *n = 0;
    return NULL;
  }
  w->head = r;
  if (!r) w->tail = NULL;
  last->next = NULL;
  w->queued -= k;
  *n = k;
  return first;
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
  w->next_seq = ak_store_next_seq(w->store);
  w->hook_count = ak_store_hook_count(w->store);
  ak_gauge_set(w->m_hooks, (double)w->hook_count);
  ak_gauge_set(w->m_replay, ak_store_last_open_seconds(w->store));
  ak_counter_add(w->m_reopen_ok, 1);
  ak_log(AK_LOG_INFO, "store", "store reopened", "path=%s next_seq=%llu", ak_store_path(w->store),
         (unsigned long long)w->next_seq);
  w->reopen_attempt = 0;
  atomic_store(&w->unavailable_since_ns, 0);
  atomic_store(&w->store_ok, 1);
}

static void commit_batch(ak_writer_t *w, ak_write_req_t *batch, size_t n) {
  int64_t now_ns = ak_mono_ns();
  /* drop what missed its deadline or cannot be written; the rest forms the group */
  ak_write_req_t *keep = NULL, **kt = &keep;
  size_t nk = 0;
  for (ak_write_req_t *r = batch, *nx; r; r = nx) {
    nx = r->next;
    r->next = NULL;
    if (r->deadline_ns < now_ns) finish(w, r, AK_WR_DEADLINE);
    else if (!atomic_load(&w->store_ok)) finish(w, r, AK_WR_STORE_UNAVAILABLE);
    else {
      *kt = r;
      kt = &r->next;
      nk++;
    }
  }
  (void)n;
  if (!keep) return;
  uint64_t need = 64 * 1024;
  for (ak_write_req_t *r = keep; r; r = r->next) need += 2 * (uint64_t)r->rec_len + 256;
  if (!disk_has_room(w, need, NULL)) {
    note_no_space(w, nk);
    for (ak_write_req_t *r = keep, *nx; r; r = nx) {
      nx = r->next;
      finish(w, r, AK_WR_STORE_UNAVAILABLE);
    }
    return;
  }

  rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
  rocksdb_column_family_handle_t *cf_hooks = ak_store_cf(w->store, AK_CF_HOOKS),
                                  *cf_del = ak_store_cf(w->store, AK_CF_DELIVERIES),
                                  *cf_idx = ak_store_cf(w->store, AK_CF_INDEX),
                                  *cf_def = ak_store_cf(w->store, AK_CF_DEFAULT);
  uint64_t seq = w->next_seq;
  int64_t now_ms = ak_now_ms();
  /* Puts are grouped by column family and key family: consecutive ascending keys let
   * each memtable's skiplist reuse its insert position instead of searching. */
  for (ak_write_req_t *r = keep; r; r = r->next) {
    r->seq = seq++;
    ak_envelope_set_seq(r->rec, r->seq);
    uint8_t hk[AK_HOOK_KEY_LEN];
    ak_key_hook(hk, r->seq);
    rocksdb_writebatch_put_cf(wb, cf_hooks, (const char *)hk, sizeof hk, (const char *)r->rec, r->rec_len);
  }
  for (ak_write_req_t *r = keep; r; r = r->next)
    for (size_t i = 0; i < r->source->nsinks; i++) {
      uint8_t dk[AK_DELIVERY_KEY_LEN], row[300];
      ak_key_delivery(dk, r->seq, (uint16_t)i);
      size_t rl = ak_delivery_row(row, sizeof row, AK_DELIVERY_PENDING, 0, now_ms, r->source->sinks[i].type);
      rocksdb_writebatch_put_cf(wb, cf_del, (const char *)dk, sizeof dk, (const char *)row, rl);
    }
  if (w->write_archive)
    for (ak_write_req_t *r = keep; r; r = r->next) {
      uint8_t ak[AK_ARCHIVE_KEY_LEN], sz[4];
      ak_key_archive(ak, r->seq);
      ak_put_u32(sz, (uint32_t)r->rec_len);
      rocksdb_writebatch_put_cf(wb, cf_idx, (const char *)ak, sizeof ak, (const char *)sz, 4);
    }
  for (ak_write_req_t *r = keep; r; r = r->next)
    for (size_t i = 0; i < r->source->nsinks; i++) {
      uint8_t due[AK_DUE_KEY_LEN];
      ak_key_due(due, now_ms, r->seq, (uint16_t)i);
      rocksdb_writebatch_put_cf(wb, cf_idx, (const char *)due, sizeof due, "", 0);
    }
  for (ak_write_req_t *r = keep; r; r = r->next) {
    uint8_t ik[AK_ID_KEY_LEN], sv[8];
    ak_key_id(ik, r->id);
    ak_put_u64(sv, r->seq);
    rocksdb_writebatch_put_cf(wb, cf_idx, (const char *)ik, sizeof ik, (const char *)sv, 8);
  }
  uint8_t ns[8], hc[8];
  ak_put_u64(ns, seq);
  ak_put_u64(hc, w->hook_count + nk);
  rocksdb_writebatch_put_cf(wb, cf_def, AK_KEY_NEXT_SEQ, strlen(AK_KEY_NEXT_SEQ), (const char *)ns, 8);
  rocksdb_writebatch_put_cf(wb, cf_def, AK_KEY_HOOK_COUNT, strlen(AK_KEY_HOOK_COUNT), (const char *)hc, 8);

  if (w->test_commit_delay_ms > 0) usleep((useconds_t)(w->test_commit_delay_ms * 1000));
  int64_t t0 = ak_mono_ns();
  ak_wf_class_t cls = AK_WF_OTHER;
  char *err = NULL;
  int rc = ak_store_write(w->store, wb, true, &cls, &err);
  double dur = (double)(ak_mono_ns() - t0) / 1e9;
  rocksdb_writebatch_destroy(wb);
  ak_histogram_observe(w->m_commit, dur);
  ak_histogram_observe(w->m_batch, (double)nk);
  if (rc == 0) {
    w->next_seq = seq;
    w->hook_count += nk;
    ak_gauge_set(w->m_hooks, (double)w->hook_count);
    for (ak_write_req_t *r = keep, *nx; r; r = nx) {
      nx = r->next;
      finish(w, r, AK_WR_COMMITTED);
    }
    return;
  }
  ak_counter_add(w->m_fail[cls], 1);
  ak_log(AK_LOG_ERROR, "store", "commit failed; closing store to reopen", "class=%s hooks=%zu",
         ak_wf_class_names[cls], nk);
  free(err);
  set_unavailable(w, cls);
  close_for_reopen(w);
  for (ak_write_req_t *r = keep, *nx; r; r = nx) {
    nx = r->next;
    finish(w, r, AK_WR_STORE_UNAVAILABLE);
  }
}

static void *writer_main(void *arg) {
  ak_writer_t *w = arg;
  pthread_mutex_lock(&w->mu);
  for (;;) {
    while (!w->head && !w->stopping && !atomic_load(&w->need_reopen) && atomic_load(&w->store_ok)) {
      pthread_cond_wait(&w->cv, &w->mu);
    }
    if (!atomic_load(&w->store_ok) || atomic_load(&w->need_reopen)) {
      if (atomic_load(&w->need_reopen) && ak_store_is_open(w->store)) {
        pthread_mutex_unlock(&w->mu);
        close_for_reopen(w);
        pthread_mutex_lock(&w->mu);
      }
      /* answer whatever is queued: the store is closed */
      if (w->head) {
        size_t n;
        ak_write_req_t *b = take_locked(w, &n);
        pthread_mutex_unlock(&w->mu);
        for (ak_write_req_t *r = b, *nx; r; r = nx) {
          nx = r->next;
          finish(w, r, AK_WR_STORE_UNAVAILABLE);
        }
        pthread_mutex_lock(&w->mu);
        continue;
      }
      if (w->stopping) break;
      int64_t now = ak_mono_ns();
      if (now >= w->reopen_at_ns) {
        pthread_mutex_unlock(&w->mu);
        try_reopen(w);
        pthread_mutex_lock(&w->mu);
        continue;
      }
      int64_t wait_ns = w->reopen_at_ns - now;
      if (wait_ns > 200000000) wait_ns = 200000000;
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += wait_ns % 1000000000;
      ts.tv_sec += wait_ns / 1000000000 + ts.tv_nsec / 1000000000;
      ts.tv_nsec %= 1000000000;
      pthread_cond_timedwait(&w->cv, &w->mu, &ts);
      continue;
    }
    if (!w->head) {
      if (w->stopping) break;
      continue;
    }
    if (w->max_delay_ms > 0 && (int64_t)w->queued < w->max_batch && !w->stopping) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += (w->max_delay_ms % 1000) * 1000000;
      ts.tv_sec += w->max_delay_ms / 1000 + ts.tv_nsec / 1000000000;
      ts.tv_nsec %= 1000000000;
      pthread_cond_timedwait(&w->cv, &w->mu, &ts);
    }
    size_t n;
    ak_write_req_t *b = take_locked(w, &n);
    pthread_mutex_unlock(&w->mu);
    commit_batch(w, b, n);
    pthread_mutex_lock(&w->mu);
  }
  w->stopped = true;
  pthread_cond_broadcast(&w->reaper_cv);
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

/* Answers records whose deadline passed while still queued (the writer is stuck in a
 * commit). Records are unlinked under the lock, so the writer never sees them. */
static void *reaper_main(void *arg) {
  ak_writer_t *w = arg;
  pthread_mutex_lock(&w->mu);
  while (!w->stopped) {
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

int ak_writer_start(ak_writer_t *w) {
  if (pthread_create(&w->thread, NULL, writer_main, w) != 0) return -1;
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
  pthread_join(w->thread, NULL);
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
      atomic_store(&w->need_reopen, 1);
      pthread_mutex_lock(&w->mu);
      pthread_cond_signal(&w->cv);
      pthread_mutex_unlock(&w->mu);
    }
  }
  bool ok = w->probe_ok;
  pthread_mutex_unlock(&w->probe_mu);
  *reason = ok ? "ok" : ak_wf_class_names[atomic_load(&w->last_failure_class)];
  return ok;
}

void ak_writer_sample(ak_writer_t *w) {
  int64_t since = atomic_load(&w->unavailable_since_ns);
  ak_gauge_set(w->m_unavail, since ? (double)(ak_mono_ns() - since) / 1e9 : 0.0);
  pthread_mutex_lock(&w->mu);
  size_t r = w->held_records, b = w->held_bytes;
  pthread_mutex_unlock(&w->mu);
  uint64_t free_bytes = 0;
  disk_has_room(w, 0, &free_bytes);
  ak_gauge_set(w->m_disk_free, (double)free_bytes);
  ak_gauge_set(w->m_queue_records, (double)r);
  ak_gauge_set(w->m_queue_bytes, (double)b);
}
