/* The direct publisher of wal.type none (publish.h). A publish is one refcounted object:
 * one reference for the timer list while it waits for its answer, one per sink call and
 * check-in under way, one for the submit call itself. Whoever answers first (the last
 * sink's confirm, a refusal, the check-in's failure, the timer) wins one flag and resumes
 * the request; everything that comes later only drops its reference. The last reference
 * hands the object to the timer thread, which frees it (and releases the source version
 * it holds, whose sink instances may then be destroyed: never on a sink's own thread).
 * Never writes a hook and never retries. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "core/clock.h"
#include "core/envelope.h"
#include "core/ids.h"
#include "core/list.h"
#include "core/log.h"
#include "core/sources.h"
#include "dispatch/checkin.h"
#include "dispatch/dispatch.h"
#include "edge/publish.h"
#include "sinks/sink.h"

/* One source version's sink instances (its AK_SOURCE_EXT_PUBLISH state). The publisher
 * lists every set it built so that it can destroy every sink (and so collect their late
 * callbacks) before it is freed; a set freed after that is a shell. */
typedef struct pset {
  ak_list_t link;              /* in the publisher's sets, under its mu */
  ak_publish_t *p;             /* NULL once the publisher destroyed the sinks */
  size_t n;
  struct {
    const ak_sink_vtable_t *vt;
    void *self;
    int64_t inline_max;        /* a body above it goes by claim ref; -1 never */
    ak_series_t *lat_ok, *lat_err;
  } v[];
} pset_t;

typedef struct pub pub_t;

typedef struct leg {
  pub_t *pb;
  size_t j;                    /* the sink's index in the set */
} leg_t;

struct pub {
  ak_list_t link;              /* in p->waiting until answered (under p->mu) */
  pub_t *gnext;                /* in p->grave once the last reference is gone */
  ak_publish_t *p;
  atomic_int refs;
  atomic_bool answered;
  atomic_size_t left;          /* sinks that have not confirmed */
  ak_write_req_t *req;         /* the request's, until answered */
  ak_source_t *sv;             /* held: its sink instances outlive every call into them */
  pset_t *set;
  uint8_t *rec;                /* the encoded record (taken from the request) */
  ak_envelope_t env;           /* decoded from rec */
  int64_t deadline_ns;
  char claim_ref[AK_CLAIM_REF_MAX], claim_sha[65];
  leg_t legs[];
};

struct ak_publish {
  ak_instance_t *inst;
  int64_t timeout_ns;
  ak_checkin_t *checkin;       /* NULL without claim stores */
  pthread_mutex_t mu;
  pthread_cond_t cv;           /* the timer: a new head, a finished publish, stop */
  ak_list_t waiting;           /* unanswered publishes; one timeout for all, so in deadline order */
  ak_list_t sets;
  pub_t *grave;                /* finished publishes for the timer thread to free */
  atomic_bool stopping;        /* stop ran: new publishes are refused (the drain still serves) */
  bool started, attached;
  pthread_t thread;
};

bool ak_publish_direct(const ak_config_t *cfg) {
  const ak_wal_cfg_t *w = ak_wal_cfg(cfg);
  return w && w->type == AK_WAL_NONE;
}

/* ---------------------------------------------------------------- a publish ---- */

static void pub_unref(pub_t *pb) {
  if (atomic_fetch_sub(&pb->refs, 1) != 1) return;
  ak_publish_t *p = pb->p;
  pthread_mutex_lock(&p->mu);
  pb->gnext = p->grave;
  p->grave = pb;
  pthread_cond_signal(&p->cv);
  pthread_mutex_unlock(&p->mu);
}

static void pub_free(pub_t *pb) {
  ak_envelope_clear(&pb->env);
  free(pb->rec);
  ak_source_release(pb->sv);
  free(pb);
}

/* The one answer of a publish, from whichever thread gets here first. */
static void finish(pub_t *pb, ak_wr_status_t st) {
  if (atomic_exchange(&pb->answered, true)) return;
  ak_publish_t *p = pb->p;
  bool listed = false;
  pthread_mutex_lock(&p->mu);
  if (ak_list_linked(&pb->link)) {
    ak_list_remove(&pb->link);
    listed = true;
  }
  pthread_mutex_unlock(&p->mu);
  ak_write_req_t *req = pb->req;
  pb->req = NULL;
  req->status = st;
  req->done(req, req->ctx); /* last touch of the request: it may be answered and gone now */
  if (listed) pub_unref(pb);
}

static void on_leg_done(void *ctx, const ak_sink_outcome_t *o) {
  leg_t *lg = ctx;
  pub_t *pb = lg->pb;
  bool ok = o->result == AK_SINK_OK;
  ak_series_t *lat = ok ? pb->set->v[lg->j].lat_ok : pb->set->v[lg->j].lat_err;
  int64_t age_ms = ak_now_ms() - pb->env.received_at_ms;
  ak_histogram_observe(lat, age_ms > 0 ? (double)age_ms / 1000.0 : 0.0);
  if (!ok) {
    if (!atomic_load(&pb->answered))
      ak_log(AK_LOG_DEBUG, "publish", "a sink refused the hook: 503", "source_id=%s sink=%zu type=%s reason=\"%s\"",
             pb->sv->cfg.id, lg->j, pb->set->v[lg->j].vt->plugin.type, o->reason);
    finish(pb, AK_WR_STORE_UNAVAILABLE);
  } else if (atomic_fetch_sub(&pb->left, 1) == 1) {
    finish(pb, AK_WR_COMMITTED);
  }
  pub_unref(pb);
}

/* Every sink at once. A sink may answer before its deliver returns. */
static void start_legs(pub_t *pb) {
  pset_t *set = pb->set;
  atomic_store(&pb->left, set->n);
  for (size_t j = 0; j < set->n && !atomic_load(&pb->answered); j++) {
    char id[AK_UUID_STR_LEN];
    bool by_claim = set->v[j].inline_max >= 0 && (uint64_t)pb->env.body_len > (uint64_t)set->v[j].inline_max;
    ak_sink_attempt_t att = {
      .attempt = 1,
      .source = &pb->sv->cfg,
      .claim_ref = by_claim ? pb->claim_ref : NULL,
      .body_sha256 = by_claim ? pb->claim_sha : NULL,
    };
    ak_sink_attempt_keys(&att, &pb->env, id);
    pb->legs[j] = (leg_t){.pb = pb, .j = j};
    atomic_fetch_add(&pb->refs, 1);
    set->v[j].vt->deliver(set->v[j].self, &att, &pb->legs[j], on_leg_done);
    ak_sink_attempt_keys_free(&att, id);
  }
}

/* The check-in's answer (its thread): the sinks go on with the ref, or the publish fails. */
static void on_checkin(void *ctx, ak_checkin_req_t *req) {
  (void)ctx;
  pub_t *pb = req->user;
  if (req->rc == 0) {
    snprintf(pb->claim_ref, sizeof pb->claim_ref, "%s", req->ref);
    memcpy(pb->claim_sha, req->sha256, sizeof pb->claim_sha);
    if (!atomic_load(&pb->answered)) start_legs(pb);
  } else {
    ak_log(AK_LOG_DEBUG, "publish", "claim check-in failed: 503", "source_id=%s reason=\"%s\"", pb->sv->cfg.id,
           req->err);
    finish(pb, AK_WR_STORE_UNAVAILABLE);
  }
  free(req);
  pub_unref(pb);
}

static bool needs_claim(const pub_t *pb) {
  for (size_t j = 0; j < pb->set->n; j++)
    if (pb->set->v[j].inline_max >= 0 && (uint64_t)pb->env.body_len > (uint64_t)pb->set->v[j].inline_max)
      return true;
  return false;
}

/* The body on the claim store first (one check-in for every sink that needs the ref). */
static void check_in(ak_publish_t *p, pub_t *pb) {
  ak_checkin_req_t *req = p->checkin ? calloc(1, sizeof *req) : NULL;
  if (!req) {
    if (!p->checkin)
      ak_log(AK_LOG_DEBUG, "publish", "a body above a sink's inline_max_bytes and no claim store: 503",
             "source_id=%s", pb->sv->cfg.id);
    finish(pb, AK_WR_STORE_UNAVAILABLE);
    return;
  }
  req->tenant = pb->env.tenant;
  req->tenant_len = pb->env.tenant_len;
  req->body = pb->env.body;
  req->len = pb->env.body_len;
  memcpy(req->hook_id, pb->env.id, 16);
  req->content_type = pb->env.content_type;
  req->content_type_len = pb->env.content_type_len;
  req->received_at_ms = pb->env.received_at_ms;
  req->user = pb;
  atomic_fetch_add(&pb->refs, 1);
  ak_checkin_submit(p->checkin, req);
}

ak_wr_status_t ak_publish_submit(ak_publish_t *p, ak_write_req_t *req) {
  if (!p || atomic_load(&p->stopping)) return AK_WR_DRAINING;
  ak_source_t *sv = (ak_source_t *)(void *)((char *)req->source - offsetof(ak_source_t, cfg));
  pset_t *set = sv->ext[AK_SOURCE_EXT_PUBLISH];
  if (!set || !set->n) return AK_WR_STORE_UNAVAILABLE; /* no sink: nothing could confirm it */
  pub_t *pb = calloc(1, sizeof *pb + set->n * sizeof(leg_t));
  if (!pb) return AK_WR_STORE_UNAVAILABLE;
  if (ak_envelope_decode(req->rec, req->rec_len, &pb->env) != 0) {
    free(pb);
    return AK_WR_STORE_UNAVAILABLE;
  }
  pthread_mutex_lock(&p->mu);
  /* taken under the lock that orders the waiting list: the timer reads only its head */
  pb->deadline_ns = ak_mono_ns() + p->timeout_ns;
  if (atomic_load(&p->stopping)) { /* stop drained the list already: nobody would answer it */
    pthread_mutex_unlock(&p->mu);
    ak_envelope_clear(&pb->env);
    free(pb);
    return AK_WR_DRAINING;
  }
  pb->p = p;
  pb->req = req;
  pb->sv = ak_source_ref(sv);
  pb->set = set;
  pb->rec = req->rec; /* env points into it */
  req->rec = NULL;
  atomic_init(&pb->refs, 2); /* the timer list's, and this call's */
  bool first = ak_list_empty(&p->waiting);
  ak_list_insert_tail(&p->waiting, &pb->link);
  if (first) pthread_cond_signal(&p->cv);
  pthread_mutex_unlock(&p->mu);
  if (needs_claim(pb)) check_in(p, pb);
  else start_legs(pb);
  pub_unref(pb);
  return AK_WR_QUEUED;
}

/* ---------------------------------------------------------------- the timer ---- */

static void free_grave(ak_publish_t *p) {
  pthread_mutex_lock(&p->mu);
  pub_t *g = p->grave;
  p->grave = NULL;
  pthread_mutex_unlock(&p->mu);
  for (pub_t *nx; g; g = nx) {
    nx = g->gnext;
    pub_free(g);
  }
}

static void *timer_main(void *arg) {
  ak_publish_t *p = arg;
  pthread_mutex_lock(&p->mu);
  while (!atomic_load(&p->stopping)) {
    if (p->grave) {
      pthread_mutex_unlock(&p->mu);
      free_grave(p);
      pthread_mutex_lock(&p->mu);
      continue;
    }
    ak_list_t *h = ak_list_first(&p->waiting);
    if (!h) {
      pthread_cond_wait(&p->cv, &p->mu);
      continue;
    }
    pub_t *pb = ak_list_entry(h, pub_t, link);
    int64_t now = ak_mono_ns();
    if (pb->deadline_ns <= now) {
      ak_list_remove(&pb->link); /* the list's reference is ours now */
      pthread_mutex_unlock(&p->mu);
      finish(pb, AK_WR_DEADLINE);
      pub_unref(pb);
      pthread_mutex_lock(&p->mu);
      continue;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t ns = ts.tv_nsec + (pb->deadline_ns - now);
    ts.tv_sec += (time_t)(ns / 1000000000);
    ts.tv_nsec = (long)(ns % 1000000000);
    pthread_cond_timedwait(&p->cv, &p->mu, &ts);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

/* ------------------------------------------------------------ the sink sets ---- */

static void pset_destroy(pset_t *set) {
  for (size_t j = 0; j < set->n; j++)
    if (set->v[j].self) set->v[j].vt->destroy(set->v[j].self);
  set->n = 0;
}

/* A version's sinks go with it (on the timer thread, an admin thread or at shutdown),
 * unless the publisher already destroyed them. */
static void pset_free(void *state) {
  pset_t *set = state;
  if (!set) return;
  ak_publish_t *p = set->p;
  if (p) {
    pthread_mutex_lock(&p->mu);
    if (ak_list_linked(&set->link)) ak_list_remove(&set->link);
    pthread_mutex_unlock(&p->mu);
    pset_destroy(set);
  }
  free(set);
}

static void *pset_build(void *ctx, const ak_source_t *src, char *err, size_t errlen) {
  ak_publish_t *p = ctx;
  const ak_source_cfg_t *s = &src->cfg;
  pset_t *set = calloc(1, sizeof *set + (s->nsinks ? s->nsinks : 1) * sizeof set->v[0]);
  if (!set) {
    snprintf(err, errlen, "sources.%s: out of memory", s->id);
    return NULL;
  }
  ak_metrics_t *m = p->inst->metrics;
  ak_family_t *lat = ak_metrics_family(m, "ankusa_delivery_latency_seconds",
                                       "Age of a hook (from received_at) when its delivery settled; replays excluded. "
                                       "wal.type none: when its sink answered (result ok or error).",
                                       AK_METRIC_HISTOGRAM, (const char *const[]){"instance", "sink", "result", NULL},
                                       ak_delivery_latency_bounds, ak_delivery_latency_nbounds);
  for (size_t j = 0; j < s->nsinks; j++) {
    set->v[j].self = ak_sink_instance_new(p->inst, src, j, &set->v[j].vt, err, errlen);
    set->n = j + 1;
    if (!set->v[j].self) {
      pset_destroy(set);
      free(set);
      return NULL;
    }
    set->v[j].inline_max = set->v[j].vt->inline_max ? set->v[j].vt->inline_max(set->v[j].self) : -1;
    set->v[j].lat_ok = ak_metrics_series(lat, (const char *const[]){p->inst->name, s->sinks[j].type, "ok"});
    set->v[j].lat_err = ak_metrics_series(lat, (const char *const[]){p->inst->name, s->sinks[j].type, "error"});
  }
  set->p = p;
  pthread_mutex_lock(&p->mu);
  ak_list_insert_head(&p->sets, &set->link);
  pthread_mutex_unlock(&p->mu);
  return set;
}

/* ------------------------------------------------------------ the module ---- */

static void publish_free(ak_publish_t *p) {
  if (!p) return;
  if (p->attached) ak_sources_detach(p->inst->sources, AK_SOURCE_EXT_PUBLISH);
  /* the check-in thread first: a check-in answered just now must not start its sinks on
   * instances being destroyed (it answers what waits: those publishes were answered at
   * stop) */
  ak_checkin_free(p->checkin);
  p->checkin = NULL;
  /* every sink destroyed: their late callbacks have run when this returns */
  pthread_mutex_lock(&p->mu);
  while (!ak_list_empty(&p->sets)) {
    pset_t *set = ak_list_entry(ak_list_first(&p->sets), pset_t, link);
    ak_list_remove(&set->link);
    set->p = NULL;
    pthread_mutex_unlock(&p->mu);
    pset_destroy(set);
    pthread_mutex_lock(&p->mu);
  }
  pthread_mutex_unlock(&p->mu);
  free_grave(p);
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  free(p);
}

static int publish_open(ak_instance_t *inst, char **err) {
  if (!ak_publish_direct(inst->cfg)) return 0;
  ak_publish_t *p = calloc(1, sizeof *p);
  if (!p) {
    *err = strdup("publish: out of memory");
    return AK_MODULE_FAILED;
  }
  p->inst = inst;
  p->timeout_ns = ak_wal_cfg(inst->cfg)->publish_timeout_ms * 1000000;
  pthread_mutex_init(&p->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&p->cv, &ca);
  pthread_condattr_destroy(&ca);
  ak_list_init(&p->waiting);
  ak_list_init(&p->sets);
  char why[512] = "";
  if (inst->claims && !(p->checkin = ak_checkin_new(inst->claims, on_checkin, p))) {
    publish_free(p);
    *err = strdup("publish: cannot start the claim check-in");
    return AK_MODULE_FAILED;
  }
  if (ak_sources_attach(inst->sources, AK_SOURCE_EXT_PUBLISH, pset_build, pset_free, p, why, sizeof why) != 0) {
    publish_free(p);
    *err = strdup(why[0] ? why : "publish: out of memory");
    return AK_MODULE_FAILED;
  }
  p->attached = true;
  inst->publish = p;
  return 0;
}

static int publish_start(ak_instance_t *inst, char **err) {
  ak_publish_t *p = inst->publish;
  if (!p) return 0;
  if (pthread_create(&p->thread, NULL, timer_main, p) != 0) {
    *err = strdup("publish: cannot start the timer thread");
    return AK_MODULE_FAILED;
  }
  p->started = true;
  return 0;
}

/* Before the ingest listeners stop: what still waits is answered 503 draining. Late sink
 * answers after this are collected at close. */
static void publish_stop(ak_instance_t *inst) {
  ak_publish_t *p = inst->publish;
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  atomic_store(&p->stopping, true);
  pthread_cond_signal(&p->cv);
  pthread_mutex_unlock(&p->mu);
  if (p->started) pthread_join(p->thread, NULL);
  p->started = false;
  for (;;) {
    pthread_mutex_lock(&p->mu);
    ak_list_t *h = ak_list_first(&p->waiting);
    pub_t *pb = h ? ak_list_entry(h, pub_t, link) : NULL;
    if (pb) ak_list_remove(&pb->link);
    pthread_mutex_unlock(&p->mu);
    if (!pb) break;
    finish(pb, AK_WR_DRAINING);
    pub_unref(pb);
  }
}

static void publish_close(ak_instance_t *inst) {
  publish_stop(inst);
  publish_free(inst->publish);
  inst->publish = NULL;
}

bool ak_publish_sinks_durable(const json_t *sinks, char *why, size_t whylen) {
  size_t i;
  const json_t *s;
  json_array_foreach(sinks, i, s) {
    const ak_sink_vtable_t *vt = ak_sinks_find(json_string_value(json_object_get(s, "type")));
    if (vt && vt->durable) return true;
  }
  snprintf(why, whylen, "wal.type none needs a durable sink: a 201 means every sink confirmed, and none of these "
                        "keeps the hook (log and redis do not; use http, kafka, rabbitmq, nats, sqs or google_pubsub)");
  return false;
}

/* Boot: a static source none of whose sinks keeps what it confirms is refused (an API
 * source is checked by the admin API when it is made). */
static void publish_check(ak_check_t *c, json_t *section, json_t *root) {
  (void)section;
  const char *t = json_string_value(json_object_get(json_object_get(root, "wal"), "type"));
  if (!t || strcmp(t, "none")) return;
  const char *id;
  json_t *src;
  json_object_foreach(json_object_get(root, "sources"), id, src) {
    char why[256];
    const json_t *sinks = json_object_get(src, "sinks");
    if (json_array_size(sinks) && !ak_publish_sinks_durable(sinks, why, sizeof why))
      ak_check_error(c, "sources.%s: %s", id, why);
  }
}

const ak_module_t ak_mod_publish = {
  .name = "publish",
  .doc = "wal.type none: the hook published to its sinks in the request",
  .check = publish_check,
  .roles = AK_ROLE_EDGE,
  .open = publish_open,
  .start = publish_start,
  .stop = publish_stop,
  .close = publish_close,
};
