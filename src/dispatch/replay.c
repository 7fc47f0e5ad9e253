/* Replay jobs and the dead-letter listing (replay.h). A dlq job walks the dead-letter index
 * ('x' dead_at seq sink, oldest first) from its cursor and moves each matching row back
 * to the due queue. Every move is decided and written on the dispatch thread, which is
 * also the only thread that dead-letters rows, so a row seen in the index cannot change
 * between the scan and the batch that moves it. Never moves a row dead-lettered after the
 * job was created: a replayed row that fails again gets a newer dead-letter time and is
 * past the job's bound, so no job can loop on its own failures.
 *
 * An archive job walks the archived hooks in seq order from its cursor (the last seq it
 * decided), through batches the archive side prepares off this thread (replay.h), and
 * puts back, for each hook its filter keeps and each selected sink without a delivery row,
 * the hook record (when reclaim deleted it) and a pending delivery row with the job's id,
 * in one unsynced batch with the job's cursor. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/buf.h"
#include "core/clock.h"
#include "core/envelope.h"
#include "core/log.h"
#include "core/sources.h"
#include "dispatch/dispatch.h"
#include "dispatch/replay.h"
#include "store/audit.h"
#include "store/batch.h"
#include "store/keys.h"
#include "store/store.h"


typedef struct job {
  uint8_t id[16];
  ak_replay_state_t state;
  bool archive; /* kind archive (else dlq); the archive filter below is immutable too */
  int64_t from_ms, to_ms;
  char *tenant_id;
  uint16_t *sinks; /* NULL: every sink of the hook's source */
  size_t nsinks;
  uint64_t aseq; /* archive: the last seq this job has decided (with has_cursor) */
  char *source_id; /* filter; immutable after creation */
  bool has_id;
  uint8_t fid[16];
  bool has_since, has_until;
  int64_t since_ms, until_ms;
  int64_t rate, max_lag_ms;
  int64_t created_at, updated_at, finished_at; /* finished_at 0: not finished */
  int64_t moved, scanned, skipped, delivered, dead;
  int64_t dead_streak; /* re-dead-lettered in a row since the last delivered one */
  char *error;
  bool has_cursor;
  uint8_t cursor[AK_DEAD_KEY_LEN]; /* the last dead-letter key this job has decided */
  /* memory only */
  double budget;     /* rows the job may still move (fractional carry) */
  int64_t last_tick; /* 0: the next tick starts the clock instead of crediting */
  uint64_t gen;      /* bumped by every state change from outside the tick */
  bool dirty;        /* counters changed since the record was last written */
} job_t;

struct ak_replays {
  ak_instance_t *inst;
  pthread_mutex_t mu;
  job_t **jobs; /* creation order (ids are UUIDv7) */
  size_t n, cap;
  size_t rr; /* which running job goes first in the next tick */
  /* the original's ankusa_replay_moved_total{kind} and ankusa_replay_throttled_total{reason} */
  ak_series_t *m_moved_dlq, *m_moved_archive, *m_throttled_lag, *m_throttled_full;
  /* the archive side's fetch (archive/replay_reader.c), NULL without the storage role */
  ak_replay_fetch_fn afetch;
  void *actx;
};

static const char *const state_names[] = {"running", "paused", "cancelled", "done", "failed"};

const char *ak_replays_state_name(ak_replay_state_t s) {
  return (unsigned)s < sizeof state_names / sizeof *state_names ? state_names[s] : "failed";
}

int ak_replays_state_parse(const char *s) {
  for (int i = 0; s && i < (int)(sizeof state_names / sizeof *state_names); i++)
    if (!strcmp(s, state_names[i])) return i;
  return -1;
}

static bool finished(const job_t *j) { return j->state != AK_REPLAY_RUNNING && j->state != AK_REPLAY_PAUSED; }

static void job_free(job_t *j) {
  if (!j) return;
  free(j->source_id);
  free(j->tenant_id);
  free(j->sinks);
  free(j->error);
  free(j);
}

/* ------------------------------------------------------------------- records ---- */

static json_t *filter_json(const job_t *j) {
  json_t *f = json_object();
  if (j->archive) {
    json_object_set_new(f, "from", json_integer(j->from_ms));
    json_object_set_new(f, "to", json_integer(j->to_ms));
    if (j->tenant_id) json_object_set_new(f, "tenant_id", json_string(j->tenant_id));
    if (j->sinks) {
      json_t *a = json_array();
      for (size_t i = 0; i < j->nsinks; i++) json_array_append_new(a, json_integer(j->sinks[i]));
      json_object_set_new(f, "sinks", a);
    }
  }
  if (j->source_id) json_object_set_new(f, "source_id", json_string(j->source_id));
  if (j->has_id) {
    char t[AK_UUID_STR_LEN];
    ak_uuid_format(j->fid, t);
    json_object_set_new(f, "id", json_string(t));
  }
  if (j->has_since) json_object_set_new(f, "since", json_integer(j->since_ms));
  if (j->has_until) json_object_set_new(f, "until", json_integer(j->until_ms));
  return f;
}

/* The Replay object; with record, also what only a restart needs (cursor, streak). */
static json_t *job_json(const job_t *j, bool record) {
  char ids[AK_UUID_STR_LEN];
  ak_uuid_format(j->id, ids);
  json_t *o = json_pack("{s:s,s:s,s:s,s:o,s:I,s:I,s:I,s:I,s:o,s:I,s:I,s:I,s:I,s:I,s:o}", "id", ids, "kind",
                        j->archive ? "archive" : "dlq", "state", ak_replays_state_name(j->state), "filter",
                        filter_json(j), "rate", (json_int_t)j->rate, "max_lag_ms", (json_int_t)j->max_lag_ms,
                        "created_at", (json_int_t)j->created_at, "updated_at", (json_int_t)j->updated_at, "finished_at",
                        j->finished_at ? json_integer(j->finished_at) : json_null(), "moved", (json_int_t)j->moved,
                        "scanned", (json_int_t)j->scanned, "skipped", (json_int_t)j->skipped, "delivered",
                        (json_int_t)j->delivered, "dead", (json_int_t)j->dead, "error",
                        j->error ? json_string(j->error) : json_null());
  if (record) {
    json_object_set_new(o, "v", json_integer(1));
    json_object_set_new(o, "dead_streak", json_integer(j->dead_streak));
    if (j->archive) {
      json_object_set_new(o, "cursor", j->has_cursor ? json_integer((json_int_t)j->aseq) : json_null());
    } else if (j->has_cursor) {
      char hex[2 * AK_DEAD_KEY_LEN + 1];
      for (int i = 0; i < AK_DEAD_KEY_LEN; i++) snprintf(hex + 2 * i, 3, "%02x", j->cursor[i]);
      json_object_set_new(o, "cursor", json_string(hex));
    } else {
      json_object_set_new(o, "cursor", json_null());
    }
  }
  return o;
}

static void batch_record(ak_batch_t *wb, const job_t *j) {
  uint8_t k[AK_REPLAY_KEY_LEN];
  ak_key_replay(k, j->id);
  json_t *o = job_json(j, true);
  char *v = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  ak_batch_put(wb, AK_CF_DEFAULT, k, sizeof k, v, strlen(v));
  free(v);
}

static void log_write_failure(const char *what, const job_t *j, ak_wf_class_t cls, char *err) {
  char ids[AK_UUID_STR_LEN];
  ak_uuid_format(j->id, ids);
  ak_log(AK_LOG_ERROR, "replay", what, "replay_id=%s class=%s", ids, ak_wf_class_names[cls]);
  free(err);
}

/* What an operator set on a job (not its progress): the canonical bytes its audit rows
 * hash. Malloc'd. */
static char *settings_text(const job_t *j) {
  char ids[AK_UUID_STR_LEN];
  ak_uuid_format(j->id, ids);
  json_t *o = json_pack("{s:s,s:s,s:o,s:I,s:I,s:s,s:s?}", "id", ids, "kind",
                        j->archive ? "archive" : "dlq", "filter", filter_json(j), "rate",
                        (json_int_t)j->rate, "max_lag_ms", (json_int_t)j->max_lag_ms, "state",
                        ak_replays_state_name(j->state), "error", j->error);
  char *t = o ? json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
  json_decref(o);
  return t;
}

/* One put of j's record; with ae, its audit row in the same synced batch. Caller holds
 * r->mu (the record must not be overtaken by an older one). 0, or -1 (logged). */
static int write_record(ak_replays_t *r, const job_t *j, bool sync, const ak_audit_entry_t *ae) {
  ak_store_t *st = r->inst->store;
  ak_batch_t *wb = ak_batch_new(st);
  if (!wb || ak_store_pin(st) != 0) {
    ak_batch_free(wb);
    return -1;
  }
  batch_record(wb, j);
  ak_wf_class_t cls = AK_WF_OTHER;
  char *err = NULL;
  int rc;
  if (ae) {
    rc = ak_audit_put(r->inst->audit, wb, ae);
    if (rc == 0) rc = ak_audit_commit(r->inst->audit, st, wb, &cls, &err);
  } else {
    rc = ak_store_write_pinned(st, wb, sync, &cls, &err);
  }
  ak_store_unpin(st);
  ak_batch_free(wb);
  if (rc != 0) log_write_failure("job record write failed", j, cls, err);
  return rc;
}

static bool get_i64(json_t *o, const char *k, int64_t *out) {
  json_t *v = json_object_get(o, k);
  if (!json_is_integer(v)) return false;
  *out = json_integer_value(v);
  return true;
}

static int hexval(char c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* A stored record back into a job; NULL when damaged. */
static job_t *job_parse(const uint8_t key_id[16], const char *v, size_t vl) {
  json_t *o = json_loadb(v, vl, 0, NULL);
  job_t *j = calloc(1, sizeof *j);
  bool ok = o && json_is_object(o) && j;
  const char *s;
  if (ok) {
    memcpy(j->id, key_id, 16);
    s = json_string_value(json_object_get(o, "kind"));
    ok = s && (!strcmp(s, "dlq") || !strcmp(s, "archive"));
    j->archive = ok && !strcmp(s, "archive");
  }
  if (ok) {
    int st = ak_replays_state_parse(json_string_value(json_object_get(o, "state")));
    ok = st >= 0;
    j->state = (ak_replay_state_t)st;
  }
  ok = ok && get_i64(o, "rate", &j->rate) && get_i64(o, "max_lag_ms", &j->max_lag_ms) &&
       get_i64(o, "created_at", &j->created_at) && get_i64(o, "updated_at", &j->updated_at) &&
       get_i64(o, "moved", &j->moved) && get_i64(o, "scanned", &j->scanned) &&
       get_i64(o, "skipped", &j->skipped) && get_i64(o, "delivered", &j->delivered) &&
       get_i64(o, "dead", &j->dead);
  if (ok) {
    get_i64(o, "finished_at", &j->finished_at);
    get_i64(o, "dead_streak", &j->dead_streak);
    s = json_string_value(json_object_get(o, "error"));
    if (s) j->error = strdup(s);
    json_t *f = json_object_get(o, "filter");
    ok = json_is_object(f);
    if (ok && (s = json_string_value(json_object_get(f, "source_id")))) j->source_id = strdup(s);
    if (ok && (s = json_string_value(json_object_get(f, "id")))) ok = j->has_id = ak_uuid_parse(s, j->fid);
    if (ok) j->has_since = get_i64(f, "since", &j->since_ms);
    if (ok) j->has_until = get_i64(f, "until", &j->until_ms);
    if (ok && j->archive) {
      ok = get_i64(f, "from", &j->from_ms) && get_i64(f, "to", &j->to_ms);
      if (ok && (s = json_string_value(json_object_get(f, "tenant_id")))) j->tenant_id = strdup(s);
      json_t *a = json_object_get(f, "sinks");
      if (ok && a) {
        ok = json_is_array(a) && json_array_size(a) <= AK_SOURCE_MAX_SINKS &&
             (j->sinks = calloc(json_array_size(a) + 1, sizeof *j->sinks));
        for (size_t i = 0; ok && i < json_array_size(a); i++) {
          json_t *x = json_array_get(a, i);
          ok = json_is_integer(x) && json_integer_value(x) >= 0 && json_integer_value(x) < AK_SOURCE_MAX_SINKS;
          if (ok) j->sinks[j->nsinks++] = (uint16_t)json_integer_value(x);
        }
      }
    }
  }
  if (ok && j->archive) {
    json_t *c = json_object_get(o, "cursor");
    if (json_is_integer(c) && json_integer_value(c) >= 0) {
      j->aseq = (uint64_t)json_integer_value(c);
      j->has_cursor = true;
    } else {
      ok = c == NULL || json_is_null(c);
    }
  } else if (ok && (s = json_string_value(json_object_get(o, "cursor")))) {
    ok = strlen(s) == 2 * AK_DEAD_KEY_LEN;
    for (int i = 0; ok && i < AK_DEAD_KEY_LEN; i++) {
      int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
      ok = hi >= 0 && lo >= 0;
      j->cursor[i] = (uint8_t)(hi << 4 | lo);
    }
    j->has_cursor = ok;
  }
  json_decref(o);
  if (!ok) {
    job_free(j);
    return NULL;
  }
  return j;
}

/* ------------------------------------------------------------------ lifecycle ---- */

ak_replays_t *ak_replays_new(ak_instance_t *inst) {
  ak_replays_t *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->inst = inst;
  pthread_mutex_init(&r->mu, NULL);
  if (inst->metrics) {
    const char *const kl[] = {"instance", "kind", NULL}, *const rl[] = {"instance", "reason", NULL};
    ak_family_t *mf = ak_metrics_family(inst->metrics, "ankusa_replay_moved_total",
                                        "Rows a replay job moved back to the queue, by kind.", AK_METRIC_COUNTER, kl,
                                        NULL, 0);
    ak_family_t *tf = ak_metrics_family(inst->metrics, "ankusa_replay_throttled_total",
                                        "Replay ticks held back to spare the dispatcher: dispatch_lag (its oldest due "
                                        "row is older than the job's max_lag_ms) or dispatch_full (no room).",
                                        AK_METRIC_COUNTER, rl, NULL, 0);
    r->m_moved_dlq = ak_metrics_series(mf, (const char *const[]){inst->name, "dlq"});
    r->m_moved_archive = ak_metrics_series(mf, (const char *const[]){inst->name, "archive"});
    r->m_throttled_lag = ak_metrics_series(tf, (const char *const[]){inst->name, "dispatch_lag"});
    r->m_throttled_full = ak_metrics_series(tf, (const char *const[]){inst->name, "dispatch_full"});
  }
  return r;
}

static int append(ak_replays_t *r, job_t *j) {
  if (ak_buf_grow(&r->jobs, &r->cap, r->n + 1, sizeof *r->jobs) != 0) return -1;
  r->jobs[r->n++] = j;
  return 0;
}

typedef struct load_ctx {
  ak_replays_t *r;
  int damaged;
  bool oom;
} load_ctx_t;

static int load_one(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  load_ctx_t *lc = ctx;
  job_t *j = kl == AK_REPLAY_KEY_LEN ? job_parse((const uint8_t *)k + 2, v, vl) : NULL;
  if (!j) {
    lc->damaged++;
    return 0;
  }
  if (append(lc->r, j) != 0) {
    job_free(j);
    lc->oom = true;
    return 1;
  }
  return 0;
}

int ak_replays_load(ak_replays_t *r, char **err) {
  pthread_mutex_lock(&r->mu);
  load_ctx_t lc = {.r = r};
  int rc = ak_store_scan(r->inst->store, AK_CF_DEFAULT, AK_KEY_REPLAY, 2, load_one, &lc);
  size_t running = 0;
  for (size_t i = 0; i < r->n; i++) running += r->jobs[i]->state == AK_REPLAY_RUNNING;
  pthread_mutex_unlock(&r->mu);
  if (rc != 0 || lc.oom) {
    char b[512];
    snprintf(b, sizeof b, "cannot read the replay jobs from the store at %s", ak_store_path(r->inst->store));
    *err = strdup(b);
    return -1;
  }
  /* A damaged record cannot be trusted for its filter or cursor; the rows it would have
   * moved stay dead-lettered, where GET /v1/dlq shows them and a new job can take them. */
  if (lc.damaged)
    ak_log(AK_LOG_ERROR, "replay", "left out damaged replay job records", "count=%d", lc.damaged);
  if (r->n) ak_log(AK_LOG_INFO, "replay", "replay jobs loaded", "jobs=%zu running=%zu", r->n, running);
  return 0;
}

void ak_replays_free(ak_replays_t *r) {
  if (!r) return;
  for (size_t i = 0; i < r->n; i++) job_free(r->jobs[i]);
  free(r->jobs);
  pthread_mutex_destroy(&r->mu);
  free(r);
}

static job_t *find(ak_replays_t *r, const uint8_t id[16]) {
  for (size_t i = r->n; i-- > 0;)
    if (!memcmp(r->jobs[i]->id, id, 16)) return r->jobs[i];
  return NULL;
}

/* ---------------------------------------------------------------- admin side ---- */

static bool same_filter(const job_t *j, const ak_replay_filter_t *f) {
  if (j->archive != f->is_archive) return false;
  if (f->is_archive) {
    if (j->from_ms != f->from_ms || j->to_ms != f->to_ms) return false;
    if (!j->tenant_id != !f->tenant_id || (f->tenant_id && strcmp(j->tenant_id, f->tenant_id))) return false;
    if (!j->sinks != !f->sinks || j->nsinks != f->nsinks) return false;
    if (f->sinks && memcmp(j->sinks, f->sinks, f->nsinks * sizeof *f->sinks)) return false;
  }
  if (!j->source_id != !f->source_id || (f->source_id && strcmp(j->source_id, f->source_id))) return false;
  if (j->has_id != f->has_id || (f->has_id && memcmp(j->fid, f->id, 16))) return false;
  if (j->has_since != f->has_since || (f->has_since && j->since_ms != f->since_ms)) return false;
  return j->has_until == f->has_until && (!f->has_until || j->until_ms == f->until_ms);
}

ak_replay_result_t ak_replays_create(ak_replays_t *r, const ak_replay_filter_t *f, int64_t rate, int64_t max_lag_ms,
                                     json_t **out) {
  pthread_mutex_lock(&r->mu);
  size_t active = 0;
  for (size_t i = 0; i < r->n; i++) {
    job_t *j = r->jobs[i];
    if (finished(j)) continue;
    if (same_filter(j, f)) {
      *out = job_json(j, false);
      pthread_mutex_unlock(&r->mu);
      return AK_REPLAY_EXISTS;
    }
    active++;
  }
  if (active >= AK_REPLAY_MAX_ACTIVE) {
    pthread_mutex_unlock(&r->mu);
    return AK_REPLAY_TOO_MANY;
  }
  job_t *j = calloc(1, sizeof *j);
  if (!j) {
    pthread_mutex_unlock(&r->mu);
    return AK_REPLAY_STORE_ERROR;
  }
  int64_t now = ak_now_ms();
  ak_uuid7_new(&r->inst->ids, now, j->id);
  j->state = AK_REPLAY_RUNNING;
  j->source_id = f->source_id ? strdup(f->source_id) : NULL;
  j->has_id = f->has_id;
  if (f->has_id) memcpy(j->fid, f->id, 16);
  j->has_since = f->has_since;
  j->since_ms = f->since_ms;
  j->has_until = f->has_until;
  j->until_ms = f->until_ms;
  j->rate = rate;
  j->max_lag_ms = max_lag_ms;
  j->created_at = j->updated_at = now;
  bool oom = f->source_id && !j->source_id;
  if (f->is_archive) {
    j->archive = true;
    j->from_ms = f->from_ms;
    j->to_ms = f->to_ms;
    j->tenant_id = f->tenant_id ? strdup(f->tenant_id) : NULL;
    oom = oom || (f->tenant_id && !j->tenant_id);
    if (f->sinks) {
      j->sinks = calloc(f->nsinks + 1, sizeof *j->sinks);
      if (j->sinks) memcpy(j->sinks, f->sinks, f->nsinks * sizeof *f->sinks);
      j->nsinks = f->nsinks;
      oom = oom || !j->sinks;
    }
  }
  /* synced before 202, with its audit row: an acknowledged job survives a crash; the
   * table is only changed once the record is durable, so a failed write leaves nothing */
  char subject[8 + AK_UUID_STR_LEN];
  char ids0[AK_UUID_STR_LEN];
  ak_uuid_format(j->id, ids0);
  snprintf(subject, sizeof subject, "replay:%s", ids0);
  char *after = settings_text(j);
  ak_audit_entry_t ae = {.who = f->who, .action = "replay.create", .tenant = f->tenant, .subject = subject,
                         .after = after, .after_len = after ? strlen(after) : 0};
  int wrc = oom || !after ? -1 : write_record(r, j, true, &ae);
  free(after);
  if (wrc != 0 || append(r, j) != 0) {
    pthread_mutex_unlock(&r->mu);
    job_free(j);
    return AK_REPLAY_STORE_ERROR;
  }
  *out = job_json(j, false);
  pthread_mutex_unlock(&r->mu);
  char ids[AK_UUID_STR_LEN];
  ak_uuid_format(j->id, ids);
  if (f->is_archive)
    ak_log(AK_LOG_INFO, "replay", "archive replay created", "replay_id=%s from=%lld to=%lld rate=%lld max_lag_ms=%lld",
           ids, (long long)f->from_ms, (long long)f->to_ms, (long long)rate, (long long)max_lag_ms);
  else
    ak_log(AK_LOG_INFO, "replay", "dlq replay created", "replay_id=%s rate=%lld max_lag_ms=%lld", ids,
           (long long)rate, (long long)max_lag_ms);
  return AK_REPLAY_OK;
}

json_t *ak_replays_list(ak_replays_t *r) {
  json_t *arr = json_array();
  pthread_mutex_lock(&r->mu);
  for (size_t i = r->n; i-- > 0;) json_array_append_new(arr, job_json(r->jobs[i], false));
  pthread_mutex_unlock(&r->mu);
  return json_pack("{s:o}", "replays", arr);
}

json_t *ak_replays_get(ak_replays_t *r, const uint8_t id[16]) {
  pthread_mutex_lock(&r->mu);
  job_t *j = find(r, id);
  json_t *o = j ? job_json(j, false) : NULL;
  pthread_mutex_unlock(&r->mu);
  return o;
}

/* Undo what a PATCH changed (field by field: the tick reads the filter and the cursor
 * without the mutex, so the job is never overwritten as a whole). */
static void restore_settings(job_t *j, const job_t *s) {
  j->state = s->state;
  j->rate = s->rate;
  j->max_lag_ms = s->max_lag_ms;
  j->error = s->error;
  j->dead_streak = s->dead_streak;
  j->last_tick = s->last_tick;
  j->gen = s->gen;
  j->finished_at = s->finished_at;
  j->updated_at = s->updated_at;
}

ak_replay_result_t ak_replays_patch(ak_replays_t *r, const uint8_t id[16], const ak_replay_patch_t *p,
                                    json_t **out) {
  pthread_mutex_lock(&r->mu);
  job_t *j = find(r, id);
  ak_replay_result_t res = !j ? AK_REPLAY_NOT_FOUND : finished(j) ? AK_REPLAY_FINISHED : AK_REPLAY_OK;
  if (res != AK_REPLAY_OK) {
    pthread_mutex_unlock(&r->mu);
    return res;
  }
  job_t saved = *j;
  int64_t now = ak_now_ms();
  if (p->rate > 0) j->rate = p->rate;
  if (p->max_lag_ms > 0) j->max_lag_ms = p->max_lag_ms;
  if (p->state == AK_REPLAY_RUNNING) {
    j->error = NULL;
    j->dead_streak = 0;
    if (saved.state != AK_REPLAY_RUNNING) {
      j->state = AK_REPLAY_RUNNING;
      j->last_tick = 0; /* no credit for the paused time */
      j->gen++;
    }
  } else if (p->state == AK_REPLAY_PAUSED || p->state == AK_REPLAY_CANCELLED) {
    if (saved.state != (ak_replay_state_t)p->state) j->gen++;
    j->state = (ak_replay_state_t)p->state;
    if (j->state == AK_REPLAY_CANCELLED) j->finished_at = now;
  }
  char *before = settings_text(&saved), *after = settings_text(j);
  if (before && after && !strcmp(before, after)) {
    /* nothing an operator set changes: no write, no audit row */
    restore_settings(j, &saved);
    free(before);
    free(after);
    *out = job_json(j, false);
    pthread_mutex_unlock(&r->mu);
    return AK_REPLAY_OK;
  }
  j->updated_at = now;
  char subject[8 + AK_UUID_STR_LEN], ids0[AK_UUID_STR_LEN];
  ak_uuid_format(j->id, ids0);
  snprintf(subject, sizeof subject, "replay:%s", ids0);
  ak_audit_entry_t ae = {.who = p->who, .action = "replay.patch", .tenant = p->tenant, .subject = subject,
                         .before = before, .before_len = before ? strlen(before) : 0, .after = after,
                         .after_len = after ? strlen(after) : 0};
  int wrc = before && after ? write_record(r, j, true, &ae) : -1;
  free(before);
  free(after);
  if (wrc != 0) {
    restore_settings(j, &saved);
    pthread_mutex_unlock(&r->mu);
    return AK_REPLAY_STORE_ERROR;
  }
  if (saved.error && !j->error) free(saved.error);
  j->dirty = false;
  *out = job_json(j, false);
  saved = *j; /* for the log line, after the mutex */
  pthread_mutex_unlock(&r->mu);
  char ids[AK_UUID_STR_LEN];
  ak_uuid_format(id, ids);
  ak_log(AK_LOG_INFO, "replay", "replay changed", "replay_id=%s state=%s rate=%lld max_lag_ms=%lld", ids,
         ak_replays_state_name(saved.state), (long long)saved.rate, (long long)saved.max_lag_ms);
  return AK_REPLAY_OK;
}

/* -------------------------------------------------------- dispatch thread side ---- */

void ak_replays_settled(void *ctx, const uint8_t replay_id[16], bool delivered) {
  ak_replays_t *r = ctx;
  char ids[AK_UUID_STR_LEN];
  bool paused = false;
  pthread_mutex_lock(&r->mu);
  job_t *j = find(r, replay_id);
  if (j) {
    j->dirty = true;
    if (delivered) {
      j->delivered++;
      j->dead_streak = 0;
    } else {
      j->dead++;
      j->dead_streak++;
      /* The cause (a sink still broken, a bad payload) is still there: replaying the rest
       * now would only dead-letter it again and spend the sink's capacity. */
      if (j->dead_streak >= AK_REPLAY_DEAD_STREAK && j->state == AK_REPLAY_RUNNING) {
        char b[160];
        snprintf(b, sizeof b, "auto-paused: %d replayed deliveries in a row were dead-lettered again",
                 AK_REPLAY_DEAD_STREAK);
        free(j->error);
        j->error = strdup(b);
        j->state = AK_REPLAY_PAUSED;
        j->updated_at = ak_now_ms();
        j->gen++;
        paused = true;
        ak_uuid_format(j->id, ids);
      }
    }
  }
  pthread_mutex_unlock(&r->mu);
  if (paused) ak_log(AK_LOG_WARNING, "replay", "replay auto-paused: its deliveries keep dead-lettering",
                     "replay_id=%s", ids);
}

/* One dead-lettered row a job will move. */
typedef struct cand {
  uint8_t xkey[AK_DEAD_KEY_LEN];
  uint64_t seq;
  uint16_t sink;
  uint8_t tlen, typelen;
  char tenant[255];
  char type[255];
} cand_t;

/* What a tick read about one job, outside the mutex. */
typedef struct scan_ctx {
  const job_t *j; /* filter fields only: immutable */
  int64_t bound;  /* last dead-letter time the job may touch */
  cand_t *c;
  size_t n, want;
  size_t *scan_left;
  int64_t scanned, skipped;
  bool has_last;
  uint8_t last[AK_DEAD_KEY_LEN];
  bool stopped; /* by a cap, not by the end of the job's range */
  bool end;
} scan_ctx_t;

static int scan_one(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  scan_ctx_t *s = ctx;
  if (kl != AK_DEAD_KEY_LEN) return 0;
  const uint8_t *key = (const uint8_t *)k;
  if ((int64_t)ak_get_u64(key + 1) > s->bound) {
    s->end = true;
    return 1;
  }
  if (s->n == s->want || *s->scan_left == 0) {
    s->stopped = true;
    return 1;
  }
  (*s->scan_left)--;
  memcpy(s->last, key, AK_DEAD_KEY_LEN);
  s->has_last = true;
  const job_t *j = s->j;
  ak_dead_entry_t e;
  if (ak_dead_entry_decode((const uint8_t *)v, vl, &e) != 0) {
    /* cannot tell its source, id or tenant: left where it is, listed by GET /v1/dlq */
    if (!j->source_id && !j->has_id) {
      s->scanned++;
      s->skipped++;
    }
    return 0;
  }
  if (j->source_id && (e.source_len != strlen(j->source_id) || memcmp(e.source, j->source_id, e.source_len)))
    return 0;
  if (j->has_id && memcmp(e.id, j->fid, 16)) return 0;
  s->scanned++;
  cand_t *c = &s->c[s->n++];
  memcpy(c->xkey, key, AK_DEAD_KEY_LEN);
  c->seq = ak_get_u64(key + 9);
  c->sink = ak_get_u16(key + 17);
  c->tlen = (uint8_t)e.tenant_len;
  memcpy(c->tenant, e.tenant, e.tenant_len);
  return 0;
}

/* The delivery row must still be the dead row this key points at; a row that is gone or
 * was changed since is skipped, never resurrected. 1 movable, 0 skip, -1 read error. */
static int check_row(ak_store_t *st, cand_t *c) {
  uint8_t dk[AK_DELIVERY_KEY_LEN];
  ak_key_delivery(dk, c->seq, c->sink);
  char *v = NULL;
  size_t vl = 0;
  int rc = ak_store_get(st, AK_CF_DELIVERIES, dk, sizeof dk, &v, &vl);
  if (rc != 0) return rc < 0 ? -1 : 0;
  ak_delivery_row_t row;
  int ok = ak_delivery_row_decode((const uint8_t *)v, vl, &row) == 0 && row.state == AK_DELIVERY_DEAD &&
           row.next_at_ms == (int64_t)ak_get_u64(c->xkey + 1);
  if (ok) {
    c->typelen = (uint8_t)row.sink_type_len;
    memcpy(c->type, row.sink_type, row.sink_type_len);
  }
  free(v);
  return ok;
}

static int cand_by_tenant(const void *a, const void *b) {
  const cand_t *x = a, *y = b;
  int d = memcmp(x->tenant, y->tenant, x->tlen < y->tlen ? x->tlen : y->tlen);
  return d ? d : (int)x->tlen - (int)y->tlen;
}

/* One job's share of a tick, with what was read of it under the mutex. */
typedef struct turn {
  job_t *j;
  uint64_t gen;
  size_t want;
  bool has_cursor;
  uint8_t cursor[AK_DEAD_KEY_LEN];
  uint64_t aseq;
} turn_t;

/* Read (no mutex) and move (one batch, under the mutex) one job's share of this tick. */
static void run_job(ak_replays_t *r, const turn_t *t, size_t want, size_t *scan_left, int64_t now) {
  ak_instance_t *inst = r->inst;
  ak_store_t *st = inst->store;
  job_t *j = t->j;
  /* the filter is read without the mutex: it never changes after creation */
  scan_ctx_t s = {.j = j, .want = want, .scan_left = scan_left};
  s.bound = j->created_at;
  if (j->has_until && j->until_ms < s.bound) s.bound = j->until_ms;
  uint8_t from[AK_DEAD_KEY_LEN + 1];
  size_t flen = 0;
  if (t->has_cursor) {
    memcpy(from, t->cursor, AK_DEAD_KEY_LEN);
    from[AK_DEAD_KEY_LEN] = 0; /* the first key after the cursor */
    flen = sizeof from;
  } else if (j->has_since) {
    ak_key_dead(from, j->since_ms, 0, 0);
    flen = AK_DEAD_KEY_LEN;
  }
  s.c = malloc(want * sizeof *s.c);
  if (!s.c) return;
  const char prefix = AK_IDX_DEAD;
  if (ak_store_scan_from(st, AK_CF_INDEX, &prefix, 1, flen ? from : NULL, flen, false, scan_one, &s) != 0) {
    free(s.c);
    return; /* store closed or failing: the writer reopens it; the job retries next tick */
  }
  if (!s.stopped) s.end = true;
  size_t m = 0;
  for (size_t i = 0; i < s.n; i++) {
    int rc = check_row(st, &s.c[i]);
    if (rc < 0) {
      free(s.c);
      return;
    }
    if (rc) s.c[m++] = s.c[i];
    else s.skipped++;
  }

  pthread_mutex_lock(&r->mu);
  if (j->state != AK_REPLAY_RUNNING || j->gen != t->gen) {
    /* paused or cancelled while this was read: nothing was written, nothing is lost */
    pthread_mutex_unlock(&r->mu);
    free(s.c);
    return;
  }
  if (!s.has_last && !s.end) {
    pthread_mutex_unlock(&r->mu);
    free(s.c);
    return;
  }
  const job_t saved = *j;
  j->moved += (int64_t)m;
  j->scanned += s.scanned;
  j->skipped += s.skipped;
  j->budget -= (double)m;
  if (s.has_last) {
    memcpy(j->cursor, s.last, AK_DEAD_KEY_LEN);
    j->has_cursor = true;
  }
  if (s.end) {
    j->state = AK_REPLAY_DONE;
    j->finished_at = now;
  }
  if (m || s.end) j->updated_at = now;
  int rc = -1;
  ak_batch_t *wb = ak_batch_new(st);
  if (wb && ak_store_pin(st) == 0) {
    for (size_t i = 0; i < m; i++) {
      const cand_t *c = &s.c[i];
      uint8_t k[AK_DUE_KEY_MAX], v[512]; /* a delivery row or a due value */
      ak_batch_delete(wb, AK_CF_INDEX, c->xkey, AK_DEAD_KEY_LEN);
      ak_key_delivery(k, c->seq, c->sink);
      size_t vl = ak_delivery_row_ex(v, sizeof v, AK_DELIVERY_PENDING, 0, now, c->type, c->typelen, j->id);
      ak_batch_put(wb, AK_CF_DELIVERIES, k, AK_DELIVERY_KEY_LEN, v, vl);
      size_t kl = ak_key_due(k, c->tenant, c->tlen, now, c->seq, c->sink);
      vl = ak_due_value(v, sizeof v, 0, c->type, c->typelen, j->id);
      ak_batch_put(wb, AK_CF_INDEX, k, kl, v, vl);
    }
    /* the cursor commits with the rows it passed: a restart resumes exactly here */
    batch_record(wb, j);
    ak_wf_class_t cls = AK_WF_OTHER;
    char *err = NULL;
    /* not synced, like dispatch outcomes: a crash loses a suffix of the WAL, so the rows
     * and the cursor come back together in their old place */
    rc = ak_store_write_pinned(st, wb, false, &cls, &err);
    ak_store_unpin(st);
    if (rc != 0) log_write_failure("replay batch write failed", j, cls, err);
  }
  ak_batch_free(wb);
  if (rc != 0) {
    j->moved = saved.moved;
    j->scanned = saved.scanned;
    j->skipped = saved.skipped;
    j->budget = saved.budget;
    j->has_cursor = saved.has_cursor;
    memcpy(j->cursor, saved.cursor, AK_DEAD_KEY_LEN);
    j->state = saved.state;
    j->finished_at = saved.finished_at;
    j->updated_at = saved.updated_at;
  } else {
    j->dirty = false;
    if (m && r->m_moved_dlq) ak_counter_add(r->m_moved_dlq, m);
  }
  pthread_mutex_unlock(&r->mu);
  if (rc != 0) {
    free(s.c);
    return;
  }
  if (s.end) {
    char ids[AK_UUID_STR_LEN];
    ak_uuid_format(j->id, ids);
    ak_log(AK_LOG_INFO, "replay", "dlq replay finished", "replay_id=%s moved=%lld scanned=%lld skipped=%lld", ids,
           (long long)saved.moved + (long long)m, (long long)(saved.scanned + s.scanned),
           (long long)(saved.skipped + s.skipped));
  }
  if (inst->dispatch && m) {
    qsort(s.c, m, sizeof *s.c, cand_by_tenant);
    for (size_t i = 0; i < m;) {
      size_t e = i + 1;
      while (e < m && !cand_by_tenant(&s.c[i], &s.c[e])) e++;
      ak_dispatch_note_due(inst->dispatch, s.c[i].tenant, s.c[i].tlen, now, e - i, e - i);
      i = e;
    }
  }
  free(s.c);
}

/* ------------------------------------------------------------ archive jobs ---- */

void ak_replays_set_archive(ak_replays_t *r, ak_replay_fetch_fn fn, void *ctx) {
  if (!r) return;
  pthread_mutex_lock(&r->mu);
  r->afetch = fn;
  r->actx = ctx;
  pthread_mutex_unlock(&r->mu);
}

void ak_replay_abatch_clear(ak_replay_abatch_t *b) {
  for (size_t i = 0; i < b->n; i++) free(b->v[i].rec);
  free(b->v);
  memset(b, 0, sizeof *b);
}

static bool str_is(const char *want, const char *s, size_t len) {
  return strlen(want) == len && !memcmp(want, s, len);
}

/* A delivery row (seq, sink) in the store: 1 yes, 0 no, -1 read error. */
static int row_exists(ak_store_t *st, uint64_t seq, uint16_t sink) {
  uint8_t dk[AK_DELIVERY_KEY_LEN];
  ak_key_delivery(dk, seq, sink);
  char *v = NULL;
  size_t vl = 0;
  int rc = ak_store_get(st, AK_CF_DELIVERIES, dk, sizeof dk, &v, &vl);
  free(v);
  return rc < 0 ? -1 : rc == 0;
}

static int hook_held(ak_store_t *st, uint64_t seq) {
  uint8_t hk[AK_HOOK_KEY_LEN];
  ak_key_hook(hk, seq);
  char *v = NULL;
  size_t vl = 0;
  int rc = ak_store_get(st, AK_CF_HOOKS, hk, sizeof hk, &v, &vl);
  free(v);
  return rc < 0 ? -1 : rc == 0;
}

/* The hook log's low mark as written (m:dlow): hooks at or above it may still owe log
 * deliveries. UINT64_MAX when absent (no log written yet), 0 when unreadable. */
static uint64_t log_low(ak_store_t *st) {
  char *v = NULL;
  size_t vl = 0;
  int rc = ak_store_get(st, AK_CF_DEFAULT, AK_KEY_DISPATCH_LOW, strlen(AK_KEY_DISPATCH_LOW), &v, &vl);
  uint64_t x = rc > 0 ? UINT64_MAX : rc == 0 && vl == 8 ? ak_get_u64((const uint8_t *)v) : 0;
  free(v);
  return x;
}

/* Decide (reads, no mutex) and move (one batch, under the mutex) one archive job's share
 * of this tick: the batch the archive side prepared for the job's cursor, or nothing
 * (the request is queued and answered by a later tick). */
static void run_archive_job(ak_replays_t *r, const turn_t *t, size_t want, int64_t now) {
  ak_instance_t *inst = r->inst;
  ak_store_t *st = inst->store;
  job_t *j = t->j;
  uint64_t after = t->has_cursor ? t->aseq : 0;
  ak_replay_abatch_t b = {0};
  pthread_mutex_lock(&r->mu);
  int got = r->afetch ? r->afetch(r->actx, j->id, after, j->from_ms, j->to_ms, want, &b) : AK_REPLAY_FETCH_NOT_READY;
  pthread_mutex_unlock(&r->mu);
  if (got != AK_REPLAY_FETCH_READY) return;
  cand_t *c = NULL;
  size_t nc = 0, capc = 0;
  size_t *puts = NULL, nputs = 0, capputs = 0;
  uint64_t last = after;
  int64_t scanned = 0, skipped = b.gone;
  bool partial = false, failed = false;
  /* a hook whose log deliveries may still be owed (archived before it was delivered) waits
   * until the log has settled it: a replayed row must not meet the log's own delivery of
   * the same (seq, sink), which would then take the row over */
  uint64_t low = b.n ? log_low(st) : UINT64_MAX;
  for (size_t i = 0; i < b.n && !failed; i++) {
    const ak_replay_arec_t *h = &b.v[i];
    if (nc >= want || h->seq >= low) {
      partial = true; /* the budget is spent, or the log is behind: a later tick decides the rest */
      break;
    }
    ak_envelope_t env;
    if (ak_envelope_decode(h->rec, h->len, &env) != 0) {
      skipped++; /* the reader checked its frame: a record this build cannot read */
      last = h->seq;
      continue;
    }
    bool keep = (!j->source_id || str_is(j->source_id, env.source, env.source_len)) &&
                (!j->tenant_id || str_is(j->tenant_id, env.tenant, env.tenant_len));
    ak_source_t *src = keep && inst->sources ? ak_sources_get(inst->sources, env.source, env.source_len) : NULL;
    if (keep) {
      scanned++;
      /* a hook of a source deleted since (or of an older one of the same name) has nowhere to go */
      if (!src || (src->born_ms && env.received_at_ms < src->born_ms)) {
        skipped++;
        keep = false;
      }
    }
    size_t before = nc;
    size_t ns = keep ? (j->sinks ? j->nsinks : src->cfg.nsinks) : 0;
    for (size_t k = 0; k < ns; k++) {
      uint16_t sink = j->sinks ? j->sinks[k] : (uint16_t)k;
      if (sink >= src->cfg.nsinks) {
        skipped++;
        continue;
      }
      int ex = row_exists(st, h->seq, sink);
      if (ex < 0 || ak_buf_grow(&c, &capc, nc + 1, sizeof *c) != 0) {
        failed = true;
        break;
      }
      if (ex) { /* pending or dead already: that delivery is not lost, and not doubled */
        skipped++;
        continue;
      }
      const char *type = src->cfg.sinks[sink].type;
      size_t tl = strlen(type), tn = env.tenant_len;
      cand_t *x = &c[nc++];
      x->seq = h->seq;
      x->sink = sink;
      x->typelen = (uint8_t)(tl > 255 ? 255 : tl);
      memcpy(x->type, type, x->typelen);
      x->tlen = (uint8_t)(tn > 255 ? 255 : tn);
      memcpy(x->tenant, env.tenant, x->tlen);
    }
    if (!failed && nc > before) {
      int held = hook_held(st, h->seq);
      if (held < 0 || ak_buf_grow(&puts, &capputs, nputs + 1, sizeof *puts) != 0) failed = true;
      else if (!held) puts[nputs++] = i;
    }
    if (src) ak_source_release(src);
    ak_envelope_clear(&env);
    if (!failed) last = h->seq;
  }
  bool end = false;
  if (!partial && !failed) {
    if (b.looked_to > last) last = b.looked_to;
    end = b.end;
  }
  if (failed) { /* the store could not be read: nothing decided, the next tick asks again */
    free(c);
    free(puts);
    ak_replay_abatch_clear(&b);
    return;
  }
  size_t m = nc;
  pthread_mutex_lock(&r->mu);
  if (j->state != AK_REPLAY_RUNNING || j->gen != t->gen || (!m && !end && last == after)) {
    pthread_mutex_unlock(&r->mu);
    free(c);
    free(puts);
    ak_replay_abatch_clear(&b);
    return;
  }
  const job_t saved = *j;
  j->moved += (int64_t)m;
  j->scanned += scanned;
  j->skipped += skipped;
  j->budget -= (double)m;
  j->aseq = last;
  j->has_cursor = true;
  if (end) {
    j->state = AK_REPLAY_DONE;
    j->finished_at = now;
  }
  if (m || end || last != after) j->updated_at = now;
  int rc = -1;
  ak_batch_t *wb = ak_batch_new(st);
  if (wb && ak_store_pin(st) == 0) {
    for (size_t i = 0; i < nputs; i++) {
      uint8_t hk[AK_HOOK_KEY_LEN];
      const ak_replay_arec_t *h = &b.v[puts[i]];
      ak_key_hook(hk, h->seq);
      ak_batch_put(wb, AK_CF_HOOKS, hk, sizeof hk, h->rec, h->len);
    }
    /* the store holds those hooks again: its hook count says so in the same batch (the
     * reclaim that deletes them once their replayed deliveries settle counts them off) */
    if (nputs && inst->dispatch) ak_dispatch_count_restored(inst->dispatch, wb, nputs);
    for (size_t i = 0; i < m; i++) {
      const cand_t *x = &c[i];
      uint8_t k[AK_DUE_KEY_MAX], v[512];
      ak_key_delivery(k, x->seq, x->sink);
      size_t vl = ak_delivery_row_ex(v, sizeof v, AK_DELIVERY_PENDING, 0, now, x->type, x->typelen, j->id);
      ak_batch_put(wb, AK_CF_DELIVERIES, k, AK_DELIVERY_KEY_LEN, v, vl);
      size_t kl = ak_key_due(k, x->tenant, x->tlen, now, x->seq, x->sink);
      vl = ak_due_value(v, sizeof v, 0, x->type, x->typelen, j->id);
      ak_batch_put(wb, AK_CF_INDEX, k, kl, v, vl);
    }
    /* the cursor commits with the rows and hooks it passed, unsynced as dlq moves */
    batch_record(wb, j);
    ak_wf_class_t cls = AK_WF_OTHER;
    char *err = NULL;
    rc = ak_store_write_pinned(st, wb, false, &cls, &err);
    ak_store_unpin(st);
    if (rc != 0) log_write_failure("archive replay batch write failed", j, cls, err);
  }
  ak_batch_free(wb);
  if (rc != 0) {
    j->moved = saved.moved;
    j->scanned = saved.scanned;
    j->skipped = saved.skipped;
    j->budget = saved.budget;
    j->has_cursor = saved.has_cursor;
    j->aseq = saved.aseq;
    j->state = saved.state;
    j->finished_at = saved.finished_at;
    j->updated_at = saved.updated_at;
  } else {
    j->dirty = false;
    if (m && r->m_moved_archive) ak_counter_add(r->m_moved_archive, m);
  }
  pthread_mutex_unlock(&r->mu);
  if (rc == 0 && nputs && inst->dispatch) ak_dispatch_restored(inst->dispatch, nputs);
  if (rc == 0 && end) {
    char ids[AK_UUID_STR_LEN];
    ak_uuid_format(j->id, ids);
    ak_log(AK_LOG_INFO, "replay", "archive replay finished", "replay_id=%s moved=%lld scanned=%lld skipped=%lld",
           ids, (long long)(saved.moved + (int64_t)m), (long long)(saved.scanned + scanned),
           (long long)(saved.skipped + skipped));
  }
  if (rc == 0 && inst->dispatch && m) {
    qsort(c, m, sizeof *c, cand_by_tenant);
    for (size_t i = 0; i < m;) {
      size_t e = i + 1;
      while (e < m && !cand_by_tenant(&c[i], &c[e])) e++;
      ak_dispatch_note_due(inst->dispatch, c[i].tenant, c[i].tlen, now, e - i, 0);
      i = e;
    }
  }
  free(c);
  free(puts);
  ak_replay_abatch_clear(&b);
}

/* Persist counters changed by settled deliveries and drop the oldest finished jobs past
 * AK_REPLAY_KEEP_FINISHED. Only this thread frees jobs (it is the one that uses job
 * pointers outside the mutex). Caller holds r->mu. */
static void housekeep(ak_replays_t *r) {
  size_t nfin = 0, ndirty = 0;
  for (size_t i = 0; i < r->n; i++) {
    nfin += finished(r->jobs[i]);
    ndirty += r->jobs[i]->dirty;
  }
  if (nfin <= AK_REPLAY_KEEP_FINISHED && !ndirty) return;
  ak_store_t *st = r->inst->store;
  ak_batch_t *wb = ak_batch_new(st);
  if (!wb || ak_store_pin(st) != 0) {
    ak_batch_free(wb);
    return;
  }
  size_t drop = nfin > AK_REPLAY_KEEP_FINISHED ? nfin - AK_REPLAY_KEEP_FINISHED : 0, o = 0;
  for (size_t i = 0; i < r->n; i++) {
    job_t *j = r->jobs[i];
    if (drop && finished(j)) {
      uint8_t k[AK_REPLAY_KEY_LEN];
      ak_key_replay(k, j->id);
      ak_batch_delete(wb, AK_CF_DEFAULT, k, sizeof k);
      job_free(j);
      drop--;
      continue;
    }
    if (j->dirty) batch_record(wb, j);
    r->jobs[o++] = j;
  }
  r->n = o;
  ak_wf_class_t cls = AK_WF_OTHER;
  char *err = NULL;
  if (ak_store_write_pinned(st, wb, false, &cls, &err) == 0) {
    for (size_t i = 0; i < r->n; i++) r->jobs[i]->dirty = false;
  } else {
    ak_log(AK_LOG_WARNING, "replay", "job record write failed", "class=%s", ak_wf_class_names[cls]);
    free(err);
  }
  ak_store_unpin(st);
  ak_batch_free(wb);
}

void ak_replays_tick(void *ctx, int64_t now_ms) {
  ak_replays_t *r = ctx;
  ak_dispatch_t *d = r->inst->dispatch;
  /* spare capacity only: a dispatcher that is behind or full gets no replayed rows */
  int64_t lag = d ? ak_dispatch_oldest_due_age_ms(d) : 0;
  bool room = d ? ak_dispatch_has_room(d) : true;
  turn_t turns[AK_REPLAY_MAX_ACTIVE];
  size_t nt = 0;
  pthread_mutex_lock(&r->mu);
  size_t n = r->n, start = n ? r->rr++ % n : 0;
  for (size_t k = 0; k < n && nt < AK_REPLAY_MAX_ACTIVE; k++) {
    job_t *j = r->jobs[(start + k) % n];
    if (j->state != AK_REPLAY_RUNNING) continue;
    if (j->last_tick == 0 || now_ms < j->last_tick || !room || lag > j->max_lag_ms) {
      if (j->last_tick != 0 && now_ms >= j->last_tick && r->m_throttled_lag) /* held back, not just started */
        ak_counter_add(!room ? r->m_throttled_full : r->m_throttled_lag, 1);
      j->last_tick = now_ms; /* held back: no credit piles up for later */
      continue;
    }
    double cap = j->rate < 1 ? 1.0 : (double)j->rate; /* at most one second's worth */
    j->budget += (double)j->rate * (double)(now_ms - j->last_tick) / 1000.0;
    if (j->budget > cap) j->budget = cap;
    j->last_tick = now_ms;
    if (j->budget < 1.0) continue;
    turn_t *t = &turns[nt++];
    t->j = j;
    t->gen = j->gen;
    t->want = (size_t)floor(j->budget);
    t->has_cursor = j->has_cursor;
    memcpy(t->cursor, j->cursor, AK_DEAD_KEY_LEN);
    t->aseq = j->aseq;
  }
  pthread_mutex_unlock(&r->mu);
  size_t rows_left = AK_REPLAY_TICK_ROWS, scan_left = AK_REPLAY_TICK_SCAN;
  for (size_t i = 0; i < nt && rows_left && scan_left; i++) {
    size_t want = turns[i].want < rows_left ? turns[i].want : rows_left;
    if (turns[i].j->archive) run_archive_job(r, &turns[i], want, now_ms);
    else run_job(r, &turns[i], want, &scan_left, now_ms);
    rows_left -= want; /* what it was offered, moved or not: bounds the tick's reads */
  }
  pthread_mutex_lock(&r->mu);
  housekeep(r);
  pthread_mutex_unlock(&r->mu);
}

/* ------------------------------------------------------------------ listing ---- */

typedef struct dlq_ctx {
  ak_store_t *st;
  const char *source_id;
  const ak_tenant_scope_t *scope;
  int64_t since_ms, limit, total;
  json_t *entries;
  bool failed;
} dlq_ctx_t;

/* The hook's body size and content type onto a listed entry (a dead row keeps its hook
 * until it is replayed and delivered): null when the hook is gone or undecodable. One
 * point read per listed entry, never per match. -1 when the store cannot be read. */
static int dlq_hook_facts(ak_store_t *st, uint64_t seq, json_t *o) {
  uint8_t hk[AK_HOOK_KEY_LEN];
  ak_key_hook(hk, seq);
  char *rec = NULL;
  size_t rl = 0;
  int rc = ak_store_get(st, AK_CF_HOOKS, hk, sizeof hk, &rec, &rl);
  if (rc < 0) return -1;
  ak_envelope_t env;
  if (rc == 0 && ak_envelope_decode((const uint8_t *)rec, rl, &env) == 0) {
    json_object_set_new(o, "size", json_integer((json_int_t)env.body_len));
    json_object_set_new(o, "content_type", env.content_type_len
                                               ? json_stringn_nocheck(env.content_type, env.content_type_len)
                                               : json_null());
    ak_envelope_clear(&env);
  } else {
    json_object_set_new(o, "size", json_null());
    json_object_set_new(o, "content_type", json_null());
  }
  free(rec);
  return 0;
}

static int dlq_one(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  dlq_ctx_t *c = ctx;
  if (kl != AK_DEAD_KEY_LEN) return 0;
  const uint8_t *key = (const uint8_t *)k;
  int64_t dead_at = (int64_t)ak_get_u64(key + 1);
  if (c->since_ms >= 0 && dead_at < c->since_ms) return 1; /* newest first: the rest is older */
  ak_dead_entry_t e;
  bool ok = ak_dead_entry_decode((const uint8_t *)v, vl, &e) == 0;
  if (c->source_id && (!ok || e.source_len != strlen(c->source_id) || memcmp(e.source, c->source_id, e.source_len)))
    return 0;
  /* a row whose tenant cannot be read is shown to every-tenant readers only */
  if (c->scope && (!ok || !ak_tenant_scope_has(c->scope, e.tenant, e.tenant_len))) return 0;
  c->total++;
  if ((int64_t)json_array_size(c->entries) >= c->limit) return 0;
  json_t *o = json_object();
  char ids[AK_UUID_STR_LEN];
  if (ok) ak_uuid_format(e.id, ids);
  json_object_set_new(o, "id", ok ? json_string(ids) : json_null());
  json_object_set_new(o, "source_id", ok ? json_stringn_nocheck(e.source, e.source_len) : json_null());
  json_object_set_new(o, "tenant_id", ok ? json_stringn_nocheck(e.tenant, e.tenant_len) : json_null());
  json_object_set_new(o, "seq", json_integer((json_int_t)ak_get_u64(key + 9)));
  json_object_set_new(o, "sink_index", json_integer(ak_get_u16(key + 17)));
  json_object_set_new(o, "sink", ok ? json_stringn_nocheck(e.sink_type, e.sink_type_len) : json_null());
  json_object_set_new(o, "attempts", ok ? json_integer(e.attempts) : json_null());
  json_object_set_new(o, "received_at", ok ? json_integer(e.received_at_ms) : json_null());
  json_object_set_new(o, "dead_lettered_at", json_integer(dead_at));
  if (dlq_hook_facts(c->st, ak_get_u64(key + 9), o) != 0) {
    json_decref(o);
    c->failed = true;
    return 1;
  }
  json_object_set_new(o, "reason", ok ? json_stringn_nocheck(e.reason, e.reason_len)
                                      : json_string("undecodable delivery row"));
  json_array_append_new(c->entries, o);
  return 0;
}

int ak_replays_dlq_list(ak_store_t *st, const char *source_id, const ak_tenant_scope_t *scope, int64_t since_ms,
                        int64_t limit, json_t **out) {
  dlq_ctx_t c = {.st = st, .source_id = source_id, .scope = scope, .since_ms = since_ms, .limit = limit,
                 .entries = json_array()};
  const char prefix = AK_IDX_DEAD;
  if (ak_store_scan_from(st, AK_CF_INDEX, &prefix, 1, NULL, 0, true, dlq_one, &c) != 0 || c.failed) {
    json_decref(c.entries);
    return -1;
  }
  *out = json_pack("{s:I,s:o}", "total", (json_int_t)c.total, "entries", c.entries);
  return 0;
}

/* ------------------------------------------------------------------- the module ---- */

static int replay_open(ak_instance_t *inst, char **err) {
  char *why = NULL;
  inst->replays = ak_replays_new(inst);
  if (!inst->replays || ak_replays_load(inst->replays, &why) != 0) {
    ak_log(AK_LOG_ERROR, "replay", "cannot read the replay jobs from the store", "reason=\"%s\"",
           why ? why : "out of memory");
    ak_replays_free(inst->replays);
    inst->replays = NULL;
    *err = why ? why : strdup("replay: out of memory");
    return AK_MODULE_FAILED;
  }
  ak_dispatch_on_tick(inst->dispatch, ak_replays_tick, inst->replays);
  ak_dispatch_on_replay_settled(inst->dispatch, ak_replays_settled, inst->replays);
  return 0;
}

static void replay_close(ak_instance_t *inst) {
  ak_replays_free(inst->replays);
  inst->replays = NULL;
}

const ak_module_t ak_mod_replay = {
  .name = "replay",
  .roles = AK_ROLE_DISPATCH,
  .open = replay_open,
  .close = replay_close,
};
