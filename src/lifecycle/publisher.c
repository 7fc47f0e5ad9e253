/* The lifecycle publisher (publisher.h). One thread; mu guards stop, kick, the cursor's
 * copy, the replay state and every slot's answer (done, out), which sinks fill from their
 * own threads. The event in flight, its envelope and the attempt live on the thread's
 * stack: a sink copies what it keeps before deliver() returns (sinks/sink.h). Lock
 * order: the trail's mu (its notify) before ours; nothing here calls the trail while
 * holding mu. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "core/clock.h"
#include "core/envelope.h"
#include "core/ids.h"
#include "core/log.h"
#include "lifecycle/cloudevent.h"
#include "lifecycle/publisher.h"
#include "sinks/egress.h"
#include "store/audit.h"
#include "store/keys.h"
#include "store/store.h"

#define IDLE_WAIT_MS 5000   /* a commit signals; this is only the safety net */
#define ERROR_WAIT_MS 1000  /* after a store error */

typedef struct lc_sink {
  const ak_sink_vtable_t *vt;
  void *self;
  char label[48]; /* "<type>:<index in lifecycle.sinks>": the sink label of the metrics */
} lc_sink_t;

typedef struct lc_slot {
  struct ak_lifecycle *lc;
  bool settled, inflight;
  int attempts;
  int64_t due_ns;
  bool done;              /* under mu: the answer of the attempt in flight arrived */
  ak_sink_outcome_t out;  /* under mu */
} lc_slot_t;

struct ak_lifecycle {
  ak_instance_t *inst;
  ak_audit_t *audit;
  lc_sink_t *sinks;
  lc_slot_t *slots;
  size_t n;
  ak_retry_policy_t pol;
  uint64_t rnd;
  ak_family_t *f_delivered, *f_dropped;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool stop, kick;
  uint64_t cursor;        /* under mu for readers; written by the thread (or drain_once) only */
  bool has_replay;        /* the replay: under mu */
  bool replay_creating;   /* a POST is storing one (not seen by the thread yet) */
  bool replay_kept;       /* replay_id & co. describe the running or the last finished one */
  char replay_id[AK_UUID_STR_LEN];
  uint64_t r_from, r_to, r_next;
  pthread_t th;
  bool started;
  bool bound;             /* the trail's outbox signals us */
};

/* ------------------------------------------------------------------ helpers ---- */

static void timed_wait(ak_lifecycle_t *lc, int64_t ms) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  int64_t ns = (int64_t)ts.tv_nsec + (ms % 1000) * 1000000LL;
  ts.tv_sec += (time_t)(ms / 1000 + ns / 1000000000LL);
  ts.tv_nsec = (long)(ns % 1000000000LL);
  pthread_cond_timedwait(&lc->cv, &lc->mu, &ts);
}

static uint64_t next_rnd(ak_lifecycle_t *lc) {
  uint64_t z = (lc->rnd += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

static bool stopping(ak_lifecycle_t *lc) {
  pthread_mutex_lock(&lc->mu);
  bool s = lc->stop;
  pthread_mutex_unlock(&lc->mu);
  return s;
}

static void on_wake(void *ctx) {
  ak_lifecycle_t *lc = ctx;
  pthread_mutex_lock(&lc->mu);
  lc->kick = true;
  pthread_cond_broadcast(&lc->cv);
  pthread_mutex_unlock(&lc->mu);
}

static void on_done(void *ctx, const ak_sink_outcome_t *o) {
  lc_slot_t *s = ctx;
  pthread_mutex_lock(&s->lc->mu);
  s->out = *o;
  s->done = true;
  pthread_cond_broadcast(&s->lc->cv);
  pthread_mutex_unlock(&s->lc->mu);
}

static int advance(ak_lifecycle_t *lc, uint64_t cursor) {
  if (ak_audit_outbox_advance(lc->audit, cursor) != 0) {
    ak_log(AK_LOG_ERROR, "lifecycle", "cannot move m:lifecycle_cursor; retried", "cursor=%" PRIu64, cursor);
    return -1;
  }
  pthread_mutex_lock(&lc->mu);
  lc->cursor = cursor;
  pthread_mutex_unlock(&lc->mu);
  return 0;
}

/* ------------------------------------------------------------------ delivery ---- */

static void count_dropped(ak_lifecycle_t *lc, const char *reason) {
  ak_counter_add(ak_metrics_series(lc->f_dropped, (const char *const[]){lc->inst->name, reason}), 1);
}

/* The answer of slot i's attempt, under mu: settle it or schedule the next attempt. */
static void settle(ak_lifecycle_t *lc, size_t i, uint64_t seq, const char *type) {
  lc_slot_t *s = &lc->slots[i];
  s->inflight = false;
  s->done = false;
  s->attempts++;
  int64_t delay = 0;
  const char *why = NULL;
  switch (ak_retry_decide(&lc->pol, s->attempts, s->out.result, s->out.retry_after_ms, next_rnd(lc), &delay, &why)) {
  case AK_RETRY_DONE:
    s->settled = true;
    ak_counter_add(ak_metrics_series(lc->f_delivered, (const char *const[]){lc->inst->name, type, lc->sinks[i].label}),
                   1);
    break;
  case AK_RETRY_AGAIN:
    s->due_ns = ak_mono_ns() + delay * 1000000LL;
    ak_log(AK_LOG_DEBUG, "lifecycle", "lifecycle event not delivered; retried", "seq=%" PRIu64
           " sink=%s attempt=%d delay_ms=%lld reason=\"%s\"", seq, lc->sinks[i].label, s->attempts, (long long)delay,
           s->out.reason);
    break;
  case AK_RETRY_DEAD: {
    const char *reason = s->out.result == AK_SINK_PERMANENT ? "permanent" : "retries_exhausted";
    s->settled = true;
    count_dropped(lc, reason);
    ak_log(AK_LOG_WARNING, "lifecycle", "lifecycle event lost for a sink (replayable: POST /v1/replays kind lifecycle)",
           "seq=%" PRIu64 " type=%s sink=%s reason=%s attempts=%d last=\"%s\"", seq, type, lc->sinks[i].label,
           reason, s->attempts, s->out.reason);
    break;
  }
  }
}

/* Deliver one event to every sink until each has settled it. 0, or -2 when stop was asked
 * first (the event is not settled: it goes again at the next start). */
static int deliver(ak_lifecycle_t *lc, const ak_audit_event_t *ev, const char *replay_id) {
  uint8_t id[16];
  ak_audit_event_id(lc->audit, ev->seq, id);
  char *ce = ak_cloudevent_build(lc->inst->name, id, ev);
  const char *type = json_string_value(json_object_get(ev->event, "event"));
  if (!ce || !type) {
    free(ce);
    count_dropped(lc, "unencodable");
    ak_log(AK_LOG_ERROR, "lifecycle", "a lifecycle event cannot be built from its audit row: skipped",
           "seq=%" PRIu64, ev->seq);
    return 0;
  }
  const char *tenant = json_string_value(json_object_get(ev->row, "tenant"));
  ak_envelope_t env = {0};
  memcpy(env.id, id, 16);
  env.seq = ev->seq;
  env.received_at_ms = json_integer_value(json_object_get(ev->row, "at"));
  env.tenant = tenant ? tenant : "";
  env.tenant_len = strlen(env.tenant);
  env.source = AK_LIFECYCLE_SOURCE_ID;
  env.source_len = strlen(AK_LIFECYCLE_SOURCE_ID);
  env.method = "POST";
  env.method_len = 4;
  env.path = "/";
  env.path_len = 1;
  env.content_type = AK_CLOUDEVENT_CONTENT_TYPE;
  env.content_type_len = strlen(AK_CLOUDEVENT_CONTENT_TYPE);
  env.body = (const uint8_t *)ce;
  env.body_len = strlen(ce);
  char idtext[AK_UUID_STR_LEN];
  ak_uuid_format(id, idtext);
  ak_sink_attempt_t att = {.env = &env, .replay_id = replay_id, .idempotency_key = idtext};

  bool *send = calloc(lc->n ? lc->n : 1, sizeof *send);
  if (!send) {
    free(ce);
    return -1;
  }
  int64_t now = ak_mono_ns();
  pthread_mutex_lock(&lc->mu);
  for (size_t i = 0; i < lc->n; i++)
    lc->slots[i] = (lc_slot_t){.lc = lc, .due_ns = now};
  int rc = 0;
  for (;;) {
    bool inflight = false, all = true, any_done = false;
    for (size_t i = 0; i < lc->n; i++) {
      lc_slot_t *s = &lc->slots[i];
      if (s->inflight && s->done) settle(lc, i, ev->seq, type);
      inflight = inflight || s->inflight;
      all = all && s->settled;
    }
    if (all) break;
    if (lc->stop) {
      if (!inflight) {
        rc = -2;
        break;
      }
      pthread_cond_wait(&lc->cv, &lc->mu); /* a sink's answer is bounded by its timeout */
      continue;
    }
    now = ak_mono_ns();
    int64_t next_due = INT64_MAX;
    size_t nsend = 0;
    for (size_t i = 0; i < lc->n; i++) {
      lc_slot_t *s = &lc->slots[i];
      send[i] = !s->settled && !s->inflight && s->due_ns <= now;
      if (send[i]) {
        s->inflight = true;
        s->done = false;
        nsend++;
      } else if (!s->settled && !s->inflight && s->due_ns < next_due) {
        next_due = s->due_ns;
      }
    }
    if (nsend) {
      pthread_mutex_unlock(&lc->mu);
      for (size_t i = 0; i < lc->n; i++) {
        if (!send[i]) continue;
        att.attempt = (uint32_t)lc->slots[i].attempts + 1;
        lc->sinks[i].vt->deliver(lc->sinks[i].self, &att, &lc->slots[i], on_done);
      }
      pthread_mutex_lock(&lc->mu);
      continue;
    }
    for (size_t i = 0; i < lc->n; i++) any_done = any_done || (lc->slots[i].inflight && lc->slots[i].done);
    if (any_done) continue;
    int64_t wait_ms = next_due == INT64_MAX ? 1000 : (next_due - now) / 1000000 + 1;
    timed_wait(lc, wait_ms > 1000 ? 1000 : wait_ms);
  }
  pthread_mutex_unlock(&lc->mu);
  free(send);
  free(ce);
  return rc;
}

/* ------------------------------------------------------------------- replay ---- */

/* The replay's state (or its end, done) in a synced write; with who, the replay's audit
 * row rides the same batch. */
static int replay_persist(ak_lifecycle_t *lc, bool done, const ak_audit_who_t *who) {
  ak_store_t *st = lc->inst->store;
  char *text = NULL;
  if (!done) {
    pthread_mutex_lock(&lc->mu);
    json_t *j = json_pack("{s:s,s:I,s:I,s:I}", "id", lc->replay_id, "from_seq", (json_int_t)lc->r_from, "to_seq",
                          (json_int_t)lc->r_to, "next", (json_int_t)lc->r_next);
    pthread_mutex_unlock(&lc->mu);
    text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!text) return -1;
  }
  if (ak_store_pin(st) != 0) {
    free(text);
    return -1;
  }
  ak_batch_t *wb = ak_batch_new(st);
  if (wb && text)
    ak_batch_put(wb, AK_CF_DEFAULT, AK_KEY_LIFECYCLE_REPLAY, strlen(AK_KEY_LIFECYCLE_REPLAY), text, strlen(text));
  else if (wb)
    ak_batch_delete(wb, AK_CF_DEFAULT, AK_KEY_LIFECYCLE_REPLAY, strlen(AK_KEY_LIFECYCLE_REPLAY));
  int rc = -1;
  if (wb && who) {
    char subject[64];
    snprintf(subject, sizeof subject, "replay:%s", lc->replay_id);
    json_t *detail = json_pack("{s:s,s:I,s:I}", "kind", "lifecycle", "from_seq", (json_int_t)lc->r_from, "to_seq",
                               (json_int_t)lc->r_to);
    ak_audit_entry_t e = {.who = who, .action = "replay.create", .subject = subject, .detail = detail};
    if (detail && ak_audit_put(lc->audit, wb, &e) == 0) rc = ak_audit_commit(lc->audit, st, wb, NULL, NULL);
    json_decref(detail);
  } else if (wb) {
    rc = ak_store_write_pinned(st, wb, true, NULL, NULL);
  }
  ak_store_unpin(st);
  ak_batch_free(wb);
  free(text);
  return rc;
}

static int replay_load(ak_lifecycle_t *lc) {
  char *v = NULL;
  size_t vl = 0;
  int rc = ak_store_get(lc->inst->store, AK_CF_DEFAULT, AK_KEY_LIFECYCLE_REPLAY, strlen(AK_KEY_LIFECYCLE_REPLAY), &v,
                        &vl);
  if (rc != 0) return rc < 0 ? -1 : 0;
  json_t *j = json_loadb(v, vl, 0, NULL);
  free(v);
  const char *id = json_string_value(json_object_get(j, "id"));
  if (!id || strlen(id) >= sizeof lc->replay_id) {
    json_decref(j);
    ak_log(AK_LOG_ERROR, "lifecycle", "m:lifecycle_replay is damaged: the replay is dropped", NULL);
    return replay_persist(lc, true, NULL);
  }
  snprintf(lc->replay_id, sizeof lc->replay_id, "%s", id);
  lc->r_from = (uint64_t)json_integer_value(json_object_get(j, "from_seq"));
  lc->r_to = (uint64_t)json_integer_value(json_object_get(j, "to_seq"));
  lc->r_next = (uint64_t)json_integer_value(json_object_get(j, "next"));
  lc->has_replay = lc->replay_kept = true;
  json_decref(j);
  ak_log(AK_LOG_INFO, "lifecycle", "lifecycle replay resumed", "id=%s next=%" PRIu64 " to=%" PRIu64, lc->replay_id,
         lc->r_next, lc->r_to);
  return 0;
}

/* under mu */
static json_t *replay_view(const ak_lifecycle_t *lc) {
  return json_pack("{s:s,s:s,s:I,s:I,s:I,s:s}", "id", lc->replay_id, "kind", "lifecycle", "from_seq",
                   (json_int_t)lc->r_from, "to_seq", (json_int_t)(lc->r_to > INT64_MAX ? INT64_MAX : lc->r_to),
                   "next_seq", (json_int_t)lc->r_next, "state", lc->has_replay || lc->replay_creating ? "running"
                                                                                                       : "done");
}

json_t *ak_lifecycle_replay_get(ak_lifecycle_t *lc, const char *id) {
  pthread_mutex_lock(&lc->mu);
  json_t *j = lc->replay_kept && id && !strcmp(id, lc->replay_id) ? replay_view(lc) : NULL;
  pthread_mutex_unlock(&lc->mu);
  return j;
}

ak_lc_replay_rc_t ak_lifecycle_replay(ak_lifecycle_t *lc, uint64_t from_seq, uint64_t to_seq,
                                      const ak_audit_who_t *who, json_t **out) {
  *out = NULL;
  pthread_mutex_lock(&lc->mu);
  if (lc->has_replay || lc->replay_creating) {
    *out = replay_view(lc);
    pthread_mutex_unlock(&lc->mu);
    return AK_LC_REPLAY_BUSY;
  }
  uint8_t rid[16];
  ak_uuid7_new(&lc->inst->ids, ak_now_ms(), rid);
  ak_uuid_format(rid, lc->replay_id);
  lc->r_from = lc->r_next = from_seq;
  lc->r_to = to_seq;
  lc->replay_creating = true; /* the thread does not see it before it is stored */
  lc->replay_kept = true;
  pthread_mutex_unlock(&lc->mu);
  int rc = replay_persist(lc, false, who);
  pthread_mutex_lock(&lc->mu);
  lc->replay_creating = false;
  lc->replay_kept = rc == 0;
  if (rc == 0) {
    lc->has_replay = true;
    *out = replay_view(lc);
    lc->kick = true;
    pthread_cond_broadcast(&lc->cv);
  }
  pthread_mutex_unlock(&lc->mu);
  if (rc != 0) return AK_LC_REPLAY_FAILED;
  ak_log(AK_LOG_INFO, "lifecycle", "lifecycle replay started", "id=%s from_seq=%" PRIu64 " to_seq=%" PRIu64,
         lc->replay_id, from_seq, to_seq);
  return AK_LC_REPLAY_OK;
}

/* ---------------------------------------------------------------------- loop ---- */

/* One step: the next event of the outbox, else the next of the replay. 1 (did one), 0
 * (nothing to do), -1 (store error), -2 (stop). */
static int step(ak_lifecycle_t *lc) {
  uint64_t below = ak_audit_next_seq(lc->audit); /* every row below it is committed */
  uint64_t cursor = lc->cursor;
  ak_audit_event_t ev;
  int r = ak_audit_outbox_next(lc->audit, cursor, below, &ev);
  if (r < 0) return -1;
  if (r == 2) { /* a pending row: everything before it is done; wait for its verdict */
    uint64_t held = ev.seq;
    ak_audit_event_clear(&ev);
    if (held > cursor && advance(lc, held) != 0) return -1;
    return 0;
  }
  if (r == 1) {
    int d = deliver(lc, &ev, NULL);
    uint64_t seq = ev.seq;
    ak_audit_event_clear(&ev);
    if (d != 0) return d == -2 ? -2 : -1;
    return advance(lc, seq + 1) == 0 ? 1 : -1;
  }
  /* nothing flagged below `below`: the rows in between need no event */
  if (below > cursor && advance(lc, below) != 0) return -1;
  pthread_mutex_lock(&lc->mu);
  bool rep = lc->has_replay;
  uint64_t rnext = lc->r_next, rto = lc->r_to;
  char rid[AK_UUID_STR_LEN];
  memcpy(rid, lc->replay_id, sizeof rid);
  pthread_mutex_unlock(&lc->mu);
  if (!rep) return 0;
  uint64_t rbelow = rto < UINT64_MAX ? rto + 1 : rto;
  if (rbelow > below) rbelow = below;
  r = ak_audit_outbox_next(lc->audit, rnext, rbelow, &ev);
  if (r < 0) return -1;
  if (r == 2) { /* the replay stops at a pending row too: the outbox gets it first */
    ak_audit_event_clear(&ev);
    return 0;
  }
  if (r == 0) {
    if (replay_persist(lc, true, NULL) != 0) return -1;
    pthread_mutex_lock(&lc->mu);
    lc->has_replay = false;
    pthread_mutex_unlock(&lc->mu);
    ak_log(AK_LOG_INFO, "lifecycle", "lifecycle replay done", "id=%s", rid);
    return 1;
  }
  int d = deliver(lc, &ev, rid);
  uint64_t seq = ev.seq;
  ak_audit_event_clear(&ev);
  if (d != 0) return d == -2 ? -2 : -1;
  pthread_mutex_lock(&lc->mu);
  lc->r_next = seq + 1;
  pthread_mutex_unlock(&lc->mu);
  return replay_persist(lc, false, NULL) == 0 ? 1 : -1;
}

static void *publisher_main(void *arg) {
  ak_lifecycle_t *lc = arg;
  for (;;) {
    pthread_mutex_lock(&lc->mu);
    bool stop = lc->stop;
    lc->kick = false;
    pthread_mutex_unlock(&lc->mu);
    if (stop) break;
    int r = step(lc);
    if (r == -2) break;
    if (r == 1) continue;
    pthread_mutex_lock(&lc->mu);
    if (!lc->stop && !lc->kick) timed_wait(lc, r < 0 ? ERROR_WAIT_MS : IDLE_WAIT_MS);
    pthread_mutex_unlock(&lc->mu);
  }
  return NULL;
}

int ak_lifecycle_drain_once(ak_lifecycle_t *lc) {
  for (;;) {
    if (stopping(lc)) return -1;
    int r = step(lc);
    if (r == 0) return 0;
    if (r < 0) return -1;
  }
}

uint64_t ak_lifecycle_cursor(ak_lifecycle_t *lc) {
  pthread_mutex_lock(&lc->mu);
  uint64_t c = lc->cursor;
  pthread_mutex_unlock(&lc->mu);
  return c;
}

/* ----------------------------------------------------------------- lifecycle ---- */

ak_lifecycle_t *ak_lifecycle_new(ak_instance_t *inst, const json_t *sinks, const ak_retry_policy_t *pol, char **err) {
  *err = NULL;
  if (!inst->audit) {
    *err = strdup("lifecycle.sinks: the audit trail is not open (the store roles run it)");
    return NULL;
  }
  ak_lifecycle_t *lc = calloc(1, sizeof *lc);
  size_t n = json_array_size(sinks);
  if (lc) {
    lc->sinks = calloc(n ? n : 1, sizeof *lc->sinks);
    lc->slots = calloc(n ? n : 1, sizeof *lc->slots);
  }
  if (!lc || !lc->sinks || !lc->slots) {
    if (lc) {
      free(lc->sinks);
      free(lc->slots);
    }
    free(lc);
    *err = strdup("lifecycle: out of memory");
    return NULL;
  }
  lc->inst = inst;
  lc->audit = inst->audit;
  lc->pol = *pol;
  lc->rnd = (uint64_t)ak_mono_ns();
  pthread_mutex_init(&lc->mu, NULL);
  pthread_cond_init(&lc->cv, NULL);
  bool trusted = !ak_egress_guards(ak_config_of(inst->cfg, &ak_mod_egress), false);
  for (size_t i = 0; i < n; i++) {
    const json_t *spec = json_array_get(sinks, i);
    const char *type = json_string_value(json_object_get(spec, "type"));
    const ak_sink_vtable_t *vt = type ? ak_sinks_find(type) : NULL;
    char serr[256] = "";
    if (!vt || vt->plugin.unsupported) {
      if (asprintf(err, "lifecycle.sinks[%zu]: sink type %s is not supported", i, type ? type : "(none)") < 0)
        *err = NULL;
      ak_lifecycle_free(lc);
      return NULL;
    }
    ak_sink_ctx_t sctx = {.source_id = AK_LIFECYCLE_SOURCE_ID, .egress = inst->egress, .httpc = inst->httpc,
                          .trusted = trusted};
    json_t *own = json_copy((json_t *)spec);
    for (const ak_opt_t *r = ak_sink_kind.common; own && r && r->key; r++) json_object_del(own, r->key);
    void *self = own ? vt->create(own, &sctx, serr, sizeof serr) : NULL;
    json_decref(own);
    if (!self) {
      if (asprintf(err, "lifecycle.sinks[%zu]: %s", i, serr[0] ? serr : "cannot be created") < 0) *err = NULL;
      ak_lifecycle_free(lc);
      return NULL;
    }
    lc->sinks[i] = (lc_sink_t){.vt = vt, .self = self};
    snprintf(lc->sinks[i].label, sizeof lc->sinks[i].label, "%s:%zu", type, i);
    lc->n = i + 1;
  }
  ak_metrics_t *m = inst->metrics;
  lc->f_delivered = ak_metrics_family(m, "ankusa_lifecycle_delivered_total",
                                      "Lifecycle events a lifecycle sink confirmed, by event type and sink "
                                      "(<type>:<index in lifecycle.sinks>).", AK_METRIC_COUNTER,
                                      (const char *const[]){"instance", "type", "sink", NULL}, NULL, 0);
  lc->f_dropped = ak_metrics_family(m, "ankusa_lifecycle_dropped_total",
                                    "Lifecycle events a sink never got: permanent (the sink refused it), "
                                    "retries_exhausted (dispatch.retry.max_attempts), unencodable (a damaged row). "
                                    "Replayable.", AK_METRIC_COUNTER,
                                    (const char *const[]){"instance", "reason", NULL}, NULL, 0);
  for (const char *const *r = (const char *const[]){"permanent", "retries_exhausted", "unencodable", NULL}; *r; r++)
    ak_metrics_series(lc->f_dropped, (const char *const[]){inst->name, *r});
  if (ak_audit_outbox_cursor(lc->audit, &lc->cursor) != 0 || replay_load(lc) != 0) {
    *err = strdup("lifecycle: m:lifecycle_cursor or m:lifecycle_replay cannot be read from the store");
    ak_lifecycle_free(lc);
    return NULL;
  }
  ak_audit_outbox_enable(lc->audit, on_wake, lc);
  lc->bound = true;
  return lc;
}

int ak_lifecycle_start(ak_lifecycle_t *lc) {
  if (pthread_create(&lc->th, NULL, publisher_main, lc) != 0) return -1;
  lc->started = true;
  return 0;
}

void ak_lifecycle_stop(ak_lifecycle_t *lc) {
  if (!lc) return;
  /* no commit signals us any more; the outbox stays on */
  if (lc->bound) ak_audit_outbox_enable(lc->audit, NULL, NULL);
  lc->bound = false;
  pthread_mutex_lock(&lc->mu);
  lc->stop = true;
  pthread_cond_broadcast(&lc->cv);
  pthread_mutex_unlock(&lc->mu);
  if (lc->started) {
    pthread_join(lc->th, NULL);
    lc->started = false;
  }
}

void ak_lifecycle_free(ak_lifecycle_t *lc) {
  if (!lc) return;
  ak_lifecycle_stop(lc);
  for (size_t i = 0; i < lc->n; i++)
    if (lc->sinks[i].self) lc->sinks[i].vt->destroy(lc->sinks[i].self);
  pthread_mutex_destroy(&lc->mu);
  pthread_cond_destroy(&lc->cv);
  free(lc->sinks);
  free(lc->slots);
  free(lc);
}
