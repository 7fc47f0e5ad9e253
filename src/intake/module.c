/* The intake section and the dual commit (module.h). */
#include "intake/module.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "core/buf.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/envelope.h"
#include "core/instance.h"
#include "core/log.h"
#include "core/metrics.h"
#include "core/sources.h"
#include "core/tmap.h"
#include "fleet/fleet.h"
#include "intake/log.h"
#include "net/kafka.h"
#include "queue/dedupe.h"
#include "queue/writer.h"
#include "store/batch.h"
#include "store/keys.h"
#include "store/store.h"

#define KEY_OFFSET "m:intake_offset"
#define KEY_WM "m:intake_wm"
#define REPUBLISH_MAX 256 /* records per reconciler publish */

/* ------------------------------------------------------------------ the section ---- */

/* Defaults and why:
 *   topic ankusa.intake: one topic for a fleet; each node's records are keyed by its
 *     node_id and go to one partition, so a replacement reads only its own.
 *   produce_timeout_ms 5000: a confirm slower than this answers 503 (the provider retries)
 *     well inside a provider's own timeout, and the breaker counts it.
 *   min_insync_replicas 2: the seed's figure; a topic that would confirm on one broker is
 *     refused at start when the cluster says so.
 *   breaker_failures 5 / breaker_open_ms 10000: five failed publishes in a row mean the log
 *     is down: hooks are refused (503 intake_unavailable) without touching either half
 *     until one probe goes through. */
static const ak_opt_t intake_rows[] = {
  {.key = "brokers", .type = AK_OPT_STRLIST, .def = "[]", .env = "ANKUSA_INTAKE_BROKERS",
   .doc = "bootstrap brokers of the intake log, host:port (required with wal.type dual)",
   AK_AT(ak_intake_cfg_t, brokers)},
  {.key = "topic", .type = AK_OPT_STRING, .def = "ankusa.intake", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .env = "ANKUSA_INTAKE_TOPIC", .doc = "the intake topic (never created by ankusa)", AK_AT(ak_intake_cfg_t, topic)},
  {.key = "node_id", .type = AK_OPT_STRING, .min = 1, .max = 128, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX,
   .env = "ANKUSA_INTAKE_NODE_ID",
   .doc = "this node's name in the log (its records' key); a replacement takes the lost node's "
          "(required with wal.type dual)",
   AK_AT(ak_intake_cfg_t, node_id)},
  {.key = "ssl", .type = AK_OPT_BOOL, .def = "false", .doc = "TLS to the intake brokers (system CA store)",
   AK_AT(ak_intake_cfg_t, ssl)},
  {.key = "sasl", .type = AK_OPT_MAP, .children = ak_kafka_sasl_rows, .flags = AK_OPTF_NULLABLE,
   .doc = "SASL authentication: mechanism, username and password, all three", AK_AT(ak_intake_cfg_t, sasl)},
  {.key = "client", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN,
   .doc = "Kafka client.id (default ankusa-intake)", AK_AT(ak_intake_cfg_t, client)},
  {.key = "produce_timeout_ms", .type = AK_OPT_INT, .def = "5000", .min = 100, .max = 300000,
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX,
   .doc = "a publish not confirmed within this fails (503 intake_unavailable)", AK_AT(ak_intake_cfg_t, produce_timeout_ms)},
  {.key = "linger_ms", .type = AK_OPT_INT, .def = "1", .min = 0, .max = 1000, .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX,
   .env = "ANKUSA_INTAKE_LINGER_MS",
   .doc = "how long the producer gathers records into one request (adds at most this to the ack)",
   AK_AT(ak_intake_cfg_t, linger_ms)},
  {.key = "max_record_bytes", .type = AK_OPT_INT, .def = "0", .min = 0, .max = 900000000,
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX,
   .doc = "largest record produced (0: http.max_body_bytes plus 64 KiB for the envelope)",
   AK_AT(ak_intake_cfg_t, max_record_bytes)},
  {.key = "min_insync_replicas", .type = AK_OPT_INT, .def = "2", .min = 0, .flags = AK_OPTF_HAS_MIN,
   .doc = "the topic's min.insync.replicas must be at least this, checked at start when the cluster tells (0: not "
          "checked)",
   AK_AT(ak_intake_cfg_t, min_insync_replicas)},
  {.key = "breaker_failures", .type = AK_OPT_INT, .def = "5", .min = 0, .flags = AK_OPTF_HAS_MIN,
   .doc = "failed publishes in a row that open the breaker (0: no breaker)", AK_AT(ak_intake_cfg_t, breaker_failures)},
  {.key = "breaker_open_ms", .type = AK_OPT_INT, .def = "10000", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "how long an open breaker refuses before one probe", AK_AT(ak_intake_cfg_t, breaker_open_ms)},
  {.key = "reconcile_interval_ms", .type = AK_OPT_INT, .def = "1000", .min = 10, .flags = AK_OPTF_HAS_MIN,
   .doc = "how often the reconciler republishes stored hooks the log has not confirmed",
   AK_AT(ak_intake_cfg_t, reconcile_interval_ms)},
  {.key = "recovery_timeout_ms", .type = AK_OPT_INT, .def = "60000", .min = 100, .flags = AK_OPTF_HAS_MIN,
   .doc = "how long the start waits for the log (recovery); past it the node does not start",
   AK_AT(ak_intake_cfg_t, recovery_timeout_ms)},
  {0},
};

static bool wal_is_dual(const json_t *root) {
  const char *t = json_string_value(json_object_get(json_object_get(root, "wal"), "type"));
  return t && !strcmp(t, "dual");
}

static void intake_check(ak_check_t *c, json_t *sec, json_t *root) {
  if (!wal_is_dual(root)) return;
  json_t *b = json_object_get(sec, "brokers");
  if (!json_is_array(b) || json_array_size(b) == 0)
    ak_check_error(c, "intake.brokers: required with wal.type dual");
  if (!json_is_string(json_object_get(sec, "node_id")))
    ak_check_error(c, "intake.node_id: required with wal.type dual (a replacement node takes the lost one's)");
}

/* ------------------------------------------------------------------- the state ---- */

enum { HALF_WAIT = 0, HALF_OK = 1, HALF_FAILED = -1 };
enum { BRK_CLOSED = 0, BRK_OPEN = 1, BRK_PROBE = 2 };

/* One group in flight: from begin to both halves answered. Kept in begin order until the
 * offset mark can pass it. */
typedef struct group {
  struct group *next;
  struct ak_intake *ik;
  uint64_t first_seq, end_seq;  /* its seqs: [first_seq, end_seq) */
  int disk, log;                /* HALF_* */
  bool answered;
  int64_t last_offset;
  int64_t t0_ns;
  ak_write_req_t *hooks;        /* the writer's, until answered */
  size_t unstored;              /* its hooks the log has and the store lacks, being completed */
  bool lost;                    /* some of those could not be copied (out of memory): only the
                                   next start's recovery stores them */
} group_t;

/* A stored hook the log has not confirmed: the reconciler's. */
typedef struct held {
  struct held *next;
  uint64_t seq;
  uint8_t id[16];
  uint8_t *rec;
  size_t len;
  ak_fleet_call_t *claim;       /* its fleet dedupe claim, held pending until confirmed */
  bool inflight;                /* the reconciler is publishing it (it stays on the list) */
} held_t;

typedef struct ak_intake {
  ak_instance_t *inst;
  const ak_intake_cfg_t *cfg;
  ak_intake_log_t *log;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  group_t *head, *tail;          /* in begin order */
  int64_t offset;                /* the m:intake_offset the store is given next (-2: beginning) */
  held_t *held;                  /* stored, not confirmed: republished by the reconciler
                                    (newest first: the reconciler takes the oldest) */
  size_t nheld;
  uint64_t held_min;             /* the lowest seq on it (UINT64_MAX: none) */
  struct rec_item *unstored;     /* confirmed, not stored (the store half failed): committed
                                    under their own seqs by the reconciler */
  bool offset_frozen;            /* a group's hooks are in the log only and nothing here will
                                    store them: the offset mark stays for the next start */
  uint64_t wm_floor;             /* a stored hook that could not be held (out of memory): the
                                    watermark stays below it for the next start */
  ak_tmap_t pending;             /* their ids (16 bytes) -> held_t * */
  int brk;                       /* BRK_* */
  int64_t brk_until_ns;
  int64_t fails;                 /* publishes failed in a row */
  bool stopping, thread_on;
  pthread_t thread;
  ak_series_t *m_latency, *m_fail, *m_pending, *m_reconciled, *m_brk, *m_replayed, *m_republished;
} ak_intake_t;

const ak_intake_cfg_t *ak_intake_cfg(const ak_config_t *cfg) { return ak_config_of(cfg, &ak_mod_intake); }

/* ------------------------------------------------------------ fixed commits ---- */

typedef struct rec_item {
  struct rec_item *next;    /* the unstored list (a hook whose store half failed) */
  struct group *group;      /* its group, whose offset mark waits for it */
  ak_write_req_t req;
  uint8_t *rec;
  ak_source_t *sv;          /* held until committed, or NULL: a source since deleted */
  ak_source_cfg_t orphan;   /* then: a source with no sinks, by its name */
  char *orphan_id;
  int status;
} rec_item_t;

static void on_recovered(ak_write_req_t *req, void *ctx) { ((rec_item_t *)ctx)->status = (int)req->status; }

/* A write request for an encoded record whose seq and id are given (a record of the log,
 * or a copy of a hook whose store half failed), for ak_writer_commit_fixed. NULL when out
 * of memory or the record does not decode. */
static rec_item_t *item_new(ak_intake_t *ik, const uint8_t *val, size_t len) {
  ak_envelope_t env;
  rec_item_t *it = calloc(1, sizeof *it);
  uint8_t *copy = it ? malloc(len ? len : 1) : NULL;
  if (!copy) {
    free(it);
    return NULL;
  }
  memcpy(copy, val, len);
  if (ak_envelope_decode(copy, len, &env) != 0) {
    free(copy);
    free(it);
    return NULL;
  }
  it->rec = copy;
  it->sv = ak_sources_get(ik->inst->sources, env.source, env.source_len);
  if (!it->sv) { /* a source deleted since: stored, with no sink to deliver to */
    it->orphan_id = strndup(env.source, env.source_len);
    it->orphan.id = it->orphan_id;
    it->orphan.tenant = it->orphan_id;
  }
  ak_write_req_t *r = &it->req;
  r->kind = AK_WRITE_HOOK;
  r->rec = copy;
  r->rec_len = len;
  r->body_len = env.body_len;
  memcpy(r->id, env.id, 16);
  r->seq = env.seq;
  r->received_at_ms = env.received_at_ms;
  r->source = it->sv ? &it->sv->cfg : &it->orphan;
  r->tenant = env.tenant; /* points into copy */
  r->tenant_len = env.tenant_len;
  if (env.dedupe_key_len && ik->inst->dedupe) {
    int64_t ttl = it->sv && it->sv->cfg.dedupe_ttl_ms ? it->sv->cfg.dedupe_ttl_ms : 72LL * 3600 * 1000;
    r->dedupe = ak_dedupe_claim_new(env.tenant, env.tenant_len, r->source->id, env.dedupe_key, env.dedupe_key_len, ttl);
  }
  r->done = on_recovered;
  r->ctx = it;
  ak_envelope_clear(&env);
  return it;
}

static void item_free(rec_item_t *it) {
  if (!it) return;
  ak_dedupe_claim_free(it->req.dedupe);
  if (it->sv) ak_source_release(it->sv);
  free(it->orphan_id);
  free(it->rec);
  free(it);
}

/* ------------------------------------------------------------------ the breaker ---- */

/* Under mu: may a publish start? An open breaker lets one probe through after its time. */
static bool brk_admit(ak_intake_t *ik, int64_t now) {
  if (ik->brk == BRK_CLOSED) return true;
  if (ik->brk == BRK_OPEN && now >= ik->brk_until_ns) {
    ik->brk = BRK_PROBE;
    ak_gauge_set(ik->m_brk, BRK_PROBE);
    return true;
  }
  return false;
}

static void brk_result(ak_intake_t *ik, bool ok) {
  if (ok) {
    ik->fails = 0;
    if (ik->brk != BRK_CLOSED) {
      ik->brk = BRK_CLOSED;
      ak_gauge_set(ik->m_brk, BRK_CLOSED);
      ak_log(AK_LOG_INFO, "intake", "the intake log confirms again: breaker closed", NULL);
    }
    return;
  }
  ak_counter_add(ik->m_fail, 1);
  ik->fails++;
  if (ik->cfg->breaker_failures > 0 && (ik->brk == BRK_PROBE || ik->fails >= ik->cfg->breaker_failures)) {
    if (ik->brk != BRK_OPEN)
      ak_log(AK_LOG_ERROR, "intake", "the intake log does not confirm: breaker open, hooks get 503 intake_unavailable",
             "failures=%lld open_ms=%lld", (long long)ik->fails, (long long)ik->cfg->breaker_open_ms);
    ik->brk = BRK_OPEN;
    ik->brk_until_ns = ak_mono_ns() + ik->cfg->breaker_open_ms * 1000000;
    ak_gauge_set(ik->m_brk, BRK_OPEN);
  }
}

/* -------------------------------------------------------------- the two marks ---- */

static void put_offset(ak_batch_t *b, int32_t partition, int64_t offset) {
  uint8_t v[12];
  v[0] = (uint8_t)((uint32_t)partition >> 24);
  v[1] = (uint8_t)((uint32_t)partition >> 16);
  v[2] = (uint8_t)((uint32_t)partition >> 8);
  v[3] = (uint8_t)partition;
  ak_put_u64(v + 4, (uint64_t)offset);
  ak_batch_put(b, AK_CF_DEFAULT, KEY_OFFSET, strlen(KEY_OFFSET), v, sizeof v);
}

static void put_wm(ak_batch_t *b, uint64_t wm) {
  uint8_t v[8];
  ak_put_u64(v, wm);
  ak_batch_put(b, AK_CF_DEFAULT, KEY_WM, strlen(KEY_WM), v, sizeof v);
}

/* Under mu: drop the groups the offset mark may pass (both halves in, and the log's half
 * is either confirmed with the store's, or failed: its hooks are republished), moving the
 * mark past their records. A group whose store half failed while the log confirmed stays:
 * its hooks are in the log only, and the next start must read them. */
static void advance(ak_intake_t *ik) {
  while (ik->head && ik->head->answered) {
    group_t *g = ik->head;
    if (g->log == HALF_OK && g->disk != HALF_OK) {
      if (g->unstored && !g->lost) break; /* the reconciler is storing them: wait */
      ik->offset_frozen = true;           /* never here: the list must not grow behind it */
    }
    if (g->log == HALF_OK && !ik->offset_frozen && g->last_offset + 1 > ik->offset) ik->offset = g->last_offset + 1;
    ik->head = g->next;
    if (!ik->head) ik->tail = NULL;
    free(g);
  }
}

/* Under mu: every seq below the answer is confirmed in the log (or void). */
static uint64_t watermark(ak_intake_t *ik, uint64_t committed_below) {
  uint64_t wm = committed_below < ik->wm_floor ? committed_below : ik->wm_floor;
  for (group_t *g = ik->head; g; g = g->next)
    if (g->log != HALF_OK && g->first_seq < wm) wm = g->first_seq;
  return ik->held_min < wm ? ik->held_min : wm;
}

/* ------------------------------------------------------------- the dual commit ---- */

static void group_answer(ak_intake_t *ik, group_t *g);

static void on_group_published(void *ctx, bool ok, int64_t last_offset, const char *why) {
  group_t *g = ctx;
  ak_intake_t *ik = g->ik;
  ak_histogram_observe(ik->m_latency, (double)(ak_mono_ns() - g->t0_ns) / 1e9);
  pthread_mutex_lock(&ik->mu);
  brk_result(ik, ok);
  if (!ok)
    ak_log(AK_LOG_WARNING, "intake", "a group was not confirmed by the intake log", "reason=\"%s\" hooks=%llu",
           why ? why : "", (unsigned long long)(g->end_seq - g->first_seq));
  g->log = ok ? HALF_OK : HALF_FAILED;
  g->last_offset = last_offset;
  bool both = g->disk != HALF_WAIT;
  pthread_mutex_unlock(&ik->mu);
  if (both) group_answer(ik, g);
}

/* Both halves are in: answer the hooks. Stored but not confirmed: held for the
 * reconciler first, so that a repeat of a key finds it pending. */
static void group_answer(ak_intake_t *ik, group_t *g) {
  ak_wr_status_t st = AK_WR_COMMITTED;
  held_t *add = NULL, **at = &add;
  size_t nadd = 0;
  rec_item_t *un = NULL, **ut = &un;
  size_t nun = 0;
  if (g->disk != HALF_OK) {
    st = AK_WR_STORE_UNAVAILABLE;
    /* in the log only: the reconciler stores them when the store is back (the next start's
     * recovery, if the node stops first: the offset mark waits for this group) */
    for (ak_write_req_t *r = g->hooks; g->log == HALF_OK && r; r = r->next) {
      rec_item_t *it = item_new(ik, r->rec, r->rec_len);
      if (!it) { /* out of memory: left to the next start (the offset mark stays before it) */
        g->lost = true;
        continue;
      }
      it->group = g;
      *ut = it;
      ut = &it->next;
      nun++;
    }
  } else if (g->log != HALF_OK) {
    st = AK_WR_INTAKE_UNAVAILABLE;
    for (ak_write_req_t *r = g->hooks; r; r = r->next) {
      held_t *h = malloc(sizeof *h);
      uint8_t *copy = h ? malloc(r->rec_len) : NULL;
      if (!copy) {
        /* out of memory: the watermark stays below it, so the next start republishes it */
        free(h);
        pthread_mutex_lock(&ik->mu);
        if (r->seq < ik->wm_floor) ik->wm_floor = r->seq;
        pthread_mutex_unlock(&ik->mu);
        ak_log(AK_LOG_ERROR, "intake", "out of memory: a stored hook is republished only at the next start", NULL);
        continue;
      }
      memcpy(copy, r->rec, r->rec_len);
      *h = (held_t){.seq = r->seq, .rec = copy, .len = r->rec_len};
      memcpy(h->id, r->id, 16);
      *at = h;
      at = &h->next;
      nadd++;
    }
  }
  pthread_mutex_lock(&ik->mu);
  if (add) {
    for (held_t *h = add; h; h = h->next) {
      bool created;
      held_t **slot = ak_tmap_get(&ik->pending, (const char *)h->id, 16, &created);
      if (slot) *slot = h; /* NULL: out of memory, not answered pending */
      if (h->seq < ik->held_min) ik->held_min = h->seq;
    }
    *at = ik->held;
    ik->held = add;
    ik->nheld += nadd;
    ak_gauge_set(ik->m_pending, (double)ik->nheld);
  }
  if (un) {
    *ut = ik->unstored;
    ik->unstored = un;
    g->unstored += nun;
  }
  ak_write_req_t *hooks = g->hooks;
  g->hooks = NULL;
  g->answered = true;
  advance(ik);
  pthread_mutex_unlock(&ik->mu);
  ak_writer_answer(ik->inst->writer, hooks, st);
}

static void *mirror_begin(void *ctx, const ak_write_req_t *hooks, ak_batch_t *wb) {
  ak_intake_t *ik = ctx;
  size_t n = 0;
  uint64_t first = UINT64_MAX, end = 0;
  for (const ak_write_req_t *r = hooks; r; r = r->next) {
    if (r->kind != AK_WRITE_HOOK) continue;
    n++;
    if (r->seq < first) first = r->seq;
    if (r->seq + 1 > end) end = r->seq + 1;
  }
  ak_intake_val_t stackv[64];
  ak_intake_val_t *vals = n <= 64 ? stackv : malloc(n * sizeof *vals);
  group_t *g = calloc(1, sizeof *g);
  if (!vals || !g) {
    if (vals != stackv) free(vals);
    free(g);
    return NULL;
  }
  size_t i = 0;
  for (const ak_write_req_t *r = hooks; r; r = r->next)
    if (r->kind == AK_WRITE_HOOK) vals[i++] = (ak_intake_val_t){.p = r->rec, .len = r->rec_len};
  *g = (group_t){.ik = ik, .first_seq = first, .end_seq = end, .t0_ns = ak_mono_ns(), .last_offset = -1};
  uint64_t below = ak_writer_committed_below(ik->inst->writer);
  pthread_mutex_lock(&ik->mu);
  bool go = !ik->stopping && brk_admit(ik, ak_mono_ns());
  if (go) {
    /* queued before the publish: its answer may come at once, from the log's thread */
    if (ik->tail) ik->tail->next = g;
    else ik->head = g;
    ik->tail = g;
    put_offset(wb, ak_intake_log_partition(ik->log), ik->offset);
    put_wm(wb, watermark(ik, below < first ? below : first));
  }
  pthread_mutex_unlock(&ik->mu);
  if (go && ak_intake_log_publish(ik->log, vals, n, on_group_published, g) != 0) {
    /* not queued at all: nothing of the group reaches the log */
    pthread_mutex_lock(&ik->mu);
    g->log = HALF_FAILED;
    brk_result(ik, false);
    pthread_mutex_unlock(&ik->mu);
    go = false;
    /* it stays in the list until the writer's store half is in; the writer answers it
     * intake_unavailable (NULL) without writing: drop it here */
    pthread_mutex_lock(&ik->mu);
    group_t **pp = &ik->head, *prev = NULL;
    while (*pp && *pp != g) {
      prev = *pp;
      pp = &(*pp)->next;
    }
    if (*pp) *pp = g->next;
    if (ik->tail == g) ik->tail = prev;
    pthread_mutex_unlock(&ik->mu);
  }
  if (vals != stackv) free(vals);
  if (!go) {
    free(g);
    return NULL;
  }
  return g;
}

static void mirror_disk_done(void *ctx, void *group, bool stored, ak_write_req_t *hooks) {
  ak_intake_t *ik = ctx;
  group_t *g = group;
  pthread_mutex_lock(&ik->mu);
  g->hooks = hooks;
  g->disk = stored ? HALF_OK : HALF_FAILED;
  bool both = g->log != HALF_WAIT;
  pthread_mutex_unlock(&ik->mu);
  if (both) group_answer(ik, g);
}

static uint64_t mirror_hold_below(void *ctx) {
  ak_intake_t *ik = ctx;
  uint64_t h = UINT64_MAX;
  pthread_mutex_lock(&ik->mu);
  for (rec_item_t *it = ik->unstored; it; it = it->next)
    if (it->req.seq < h) h = it->req.seq;
  pthread_mutex_unlock(&ik->mu);
  return h;
}

static bool mirror_pending(void *ctx, const uint8_t id[16]) {
  ak_intake_t *ik = ctx;
  pthread_mutex_lock(&ik->mu);
  bool p = ak_tmap_find(&ik->pending, (const char *)id, 16) != NULL;
  pthread_mutex_unlock(&ik->mu);
  return p;
}

bool ak_intake_ready(struct ak_intake *ik, const char **reason) {
  /* only while it refuses: past breaker_open_ms the next hook is its probe, and a node
   * taken out of the balancer would never get one */
  pthread_mutex_lock(&ik->mu);
  bool open = ik->brk == BRK_OPEN && ak_mono_ns() < ik->brk_until_ns;
  pthread_mutex_unlock(&ik->mu);
  if (open) *reason = "breaker_open";
  return !open;
}

void ak_intake_hold_claim(ak_intake_t *ik, const uint8_t id[16], ak_fleet_call_t *call) {
  pthread_mutex_lock(&ik->mu);
  held_t **slot = ak_tmap_find(&ik->pending, (const char *)id, 16);
  held_t *h = slot ? *slot : NULL;
  if (h && !h->claim) {
    h->claim = call;
    call = NULL;
  }
  pthread_mutex_unlock(&ik->mu);
  /* not held (the reconciler confirmed it meanwhile): both halves are in */
  if (call) ak_fleet_settle(ik->inst->fleet, call, id);
}

/* ------------------------------------------------------------- the reconciler ---- */

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done, ok;
  int64_t last_offset;
} wait_t;

static void on_waited(void *ctx, bool ok, int64_t last_offset, const char *why) {
  (void)why;
  wait_t *w = ctx;
  pthread_mutex_lock(&w->mu);
  w->done = true;
  w->ok = ok;
  w->last_offset = last_offset;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

/* Publishes n records and waits for their answer. 0 confirmed. */
static int publish_wait(ak_intake_t *ik, const ak_intake_val_t *vals, size_t n) {
  wait_t w = {.done = false};
  pthread_mutex_init(&w.mu, NULL);
  pthread_cond_init(&w.cv, NULL);
  int rc = -1;
  if (ak_intake_log_publish(ik->log, vals, n, on_waited, &w) == 0) {
    pthread_mutex_lock(&w.mu);
    while (!w.done) pthread_cond_wait(&w.cv, &w.mu);
    pthread_mutex_unlock(&w.mu);
    rc = w.ok ? 0 : -1;
  }
  pthread_mutex_destroy(&w.mu);
  pthread_cond_destroy(&w.cv);
  return rc;
}

static int by_seq(const void *a, const void *b);

/* The hooks the log has and the store lacks, committed under their own seqs. They stay on
 * the list (holding the writer's committed mark below them) until their commit returned;
 * a repeat of their key stored meanwhile wins (duplicate: nothing stored). */
static void store_unstored(ak_intake_t *ik) {
  pthread_mutex_lock(&ik->mu);
  size_t n = 0;
  for (rec_item_t *it = ik->unstored; it; it = it->next) n++;
  rec_item_t **v = n ? malloc(n * sizeof *v) : NULL;
  n = 0;
  for (rec_item_t *it = ik->unstored; v && it; it = it->next) v[n++] = it;
  pthread_mutex_unlock(&ik->mu);
  if (!v) return;
  qsort(v, n, sizeof *v, by_seq);
  ak_write_req_t *list = NULL, **lt = &list;
  for (size_t i = 0; i < n; i++) {
    v[i]->req.next = NULL;
    v[i]->req.stored = false;
    v[i]->status = AK_WR_QUEUED;
    *lt = &v[i]->req;
    lt = &v[i]->req.next;
  }
  ak_writer_commit_fixed(ik->inst->writer, list);
  size_t stored = 0;
  pthread_mutex_lock(&ik->mu);
  for (size_t i = 0; i < n; i++) {
    rec_item_t *it = v[i];
    if (it->status != AK_WR_COMMITTED && it->status != AK_WR_DUPLICATE) continue;
    stored += it->status == AK_WR_COMMITTED;
    rec_item_t **pp = &ik->unstored;
    while (*pp && *pp != it) pp = &(*pp)->next;
    if (*pp) *pp = it->next;
    if (it->group && --it->group->unstored == 0) it->group->disk = HALF_OK; /* the offset may pass it */
    item_free(it);
  }
  advance(ik);
  pthread_mutex_unlock(&ik->mu);
  free(v);
  if (stored) {
    ak_counter_add(ik->m_reconciled, stored);
    ak_log(AK_LOG_INFO, "intake", "hooks the intake log confirmed were stored by the reconciler", "hooks=%zu", stored);
  }
}

/* One pass: the hooks the store lacks, then the held hooks, oldest first, up to
 * REPUBLISH_MAX at a time, while the breaker lets them through. */
static void reconcile(ak_intake_t *ik) {
  pthread_mutex_lock(&ik->mu);
  bool unstored = ik->unstored != NULL;
  pthread_mutex_unlock(&ik->mu);
  if (unstored) store_unstored(ik);
  for (;;) {
    pthread_mutex_lock(&ik->mu);
    if (!ik->held || ik->stopping || !brk_admit(ik, ak_mono_ns())) {
      pthread_mutex_unlock(&ik->mu);
      return;
    }
    /* the oldest, up to REPUBLISH_MAX: the list's tail (new ones are only ever put at its
     * head, and only this thread takes any off, so the tail holds still). They stay on the
     * list while published, holding the watermark and answering repeats pending. */
    size_t skip = ik->nheld > REPUBLISH_MAX ? ik->nheld - REPUBLISH_MAX : 0, n = ik->nheld - skip;
    ak_intake_val_t *vals = malloc(n * sizeof *vals);
    if (!vals) {
      pthread_mutex_unlock(&ik->mu);
      return;
    }
    held_t *h = ik->held;
    for (size_t i = 0; i < skip; i++) h = h->next;
    for (size_t i = 0; h; h = h->next, i++) {
      h->inflight = true;
      vals[i] = (ak_intake_val_t){.p = h->rec, .len = h->len};
    }
    pthread_mutex_unlock(&ik->mu);

    int rc = publish_wait(ik, vals, n);
    free(vals);
    pthread_mutex_lock(&ik->mu);
    brk_result(ik, rc == 0);
    ik->held_min = UINT64_MAX;
    for (held_t **pp = &ik->held; *pp;) {
      h = *pp;
      if (!h->inflight || rc != 0) {
        h->inflight = false;
        if (h->seq < ik->held_min) ik->held_min = h->seq;
        pp = &h->next;
        continue;
      }
      *pp = h->next;
      ik->nheld--;
      void *pv = ak_tmap_find(&ik->pending, (const char *)h->id, 16);
      if (pv) ak_tmap_remove(&ik->pending, pv);
      if (h->claim) ak_fleet_settle(ik->inst->fleet, h->claim, h->id); /* both halves: promoted */
      free(h->rec);
      free(h);
    }
    if (rc == 0) ak_counter_add(ik->m_reconciled, n);
    ak_gauge_set(ik->m_pending, (double)ik->nheld);
    pthread_mutex_unlock(&ik->mu);
    if (rc == 0)
      ak_log(AK_LOG_INFO, "intake", "stored hooks confirmed in the intake log by the reconciler", "hooks=%zu", n);
    else
      return;
  }
}

static void *reconciler_main(void *arg) {
  ak_intake_t *ik = arg;
  pthread_setname_np(pthread_self(), "ak-intake-rec");
  pthread_mutex_lock(&ik->mu);
  while (!ik->stopping) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t ns = ts.tv_nsec + ik->cfg->reconcile_interval_ms * 1000000;
    ts.tv_sec += ns / 1000000000;
    ts.tv_nsec = ns % 1000000000;
    pthread_cond_timedwait(&ik->cv, &ik->mu, &ts);
    if (ik->stopping) break;
    pthread_mutex_unlock(&ik->mu);
    reconcile(ik);
    pthread_mutex_lock(&ik->mu);
  }
  pthread_mutex_unlock(&ik->mu);
  return NULL;
}

/* ------------------------------------------------------------------ recovery ---- */


typedef struct {
  ak_intake_t *ik;
  rec_item_t **v;
  size_t n, cap;
  uint64_t reclaimed;       /* hooks below it were deleted after archiving */
  uint64_t skipped, dups;
  char err[200];
} replay_t;

static uint64_t meta_u64(ak_store_t *st, const char *key) {
  char *v = NULL;
  size_t vl = 0;
  uint64_t x = 0;
  if (ak_store_get(st, AK_CF_DEFAULT, key, strlen(key), &v, &vl) == 0 && vl == 8) x = ak_get_u64((const uint8_t *)v);
  free(v);
  return x;
}

static int on_replayed(void *ctx, int64_t offset, const uint8_t *val, size_t len) {
  (void)offset;
  replay_t *rp = ctx;
  ak_intake_t *ik = rp->ik;
  ak_envelope_t env;
  if (ak_envelope_decode(val, len, &env) != 0) {
    ak_log(AK_LOG_ERROR, "intake", "a record of this node in the intake log cannot be decoded: skipped",
           "offset=%lld bytes=%zu", (long long)offset, len);
    rp->skipped++;
    return 0;
  }
  uint64_t seq = env.seq;
  uint8_t hk[AK_HOOK_KEY_LEN];
  ak_key_hook(hk, seq);
  char *have = NULL;
  size_t hl = 0;
  int g = ak_store_get(ik->inst->store, AK_CF_HOOKS, hk, sizeof hk, &have, &hl);
  bool skip = g == 0 || seq < rp->reclaimed;
  if (g == 0) {
    ak_envelope_t mine;
    if (ak_envelope_decode((const uint8_t *)have, hl, &mine) == 0) {
      if (memcmp(mine.id, env.id, 16) != 0)
        ak_log(AK_LOG_WARNING, "intake", "the log holds another hook under a seq the store has: the store's is kept",
               "seq=%llu offset=%lld", (unsigned long long)seq, (long long)offset);
      ak_envelope_clear(&mine);
    }
  }
  free(have);
  if (g < 0) {
    ak_envelope_clear(&env);
    snprintf(rp->err, sizeof rp->err, "store unavailable while reading seq %llu", (unsigned long long)seq);
    return -1;
  }
  for (size_t i = 0; !skip && i < rp->n; i++)
    if (rp->v[i]->req.seq == seq) skip = true; /* a record published twice */
  if (skip) {
    ak_envelope_clear(&env);
    return 0;
  }
  ak_envelope_clear(&env);
  rec_item_t *it = item_new(ik, val, len);
  if (!it || (rp->n == rp->cap && ak_buf_grow((void **)&rp->v, &rp->cap, rp->n + 1, sizeof *rp->v) != 0)) {
    item_free(it);
    snprintf(rp->err, sizeof rp->err, "out of memory");
    return -1;
  }
  rp->v[rp->n++] = it;
  return 0;
}

static int by_seq(const void *a, const void *b) {
  uint64_t x = (*(rec_item_t *const *)a)->req.seq, y = (*(rec_item_t *const *)b)->req.seq;
  return x < y ? -1 : x > y;
}

typedef struct {
  ak_intake_val_t *vals;
  uint8_t **recs;
  size_t n, cap, total;
  ak_intake_t *ik;
  int rc;
} repub_t;

static int repub_flush(repub_t *rp) {
  if (!rp->n) return 0;
  int rc = publish_wait(rp->ik, rp->vals, rp->n);
  for (size_t i = 0; i < rp->n; i++) free(rp->recs[i]);
  rp->total += rp->n;
  rp->n = 0;
  return rc;
}

static int on_stored_hook(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  (void)k;
  (void)kl;
  repub_t *rp = ctx;
  if (rp->n == rp->cap) return 1;
  uint8_t *copy = malloc(vl ? vl : 1);
  if (!copy) {
    rp->rc = -1;
    return 1;
  }
  memcpy(copy, v, vl);
  rp->recs[rp->n] = copy;
  rp->vals[rp->n++] = (ak_intake_val_t){.p = copy, .len = vl};
  return rp->n == rp->cap;
}

/* Republishes the stored hooks from seq wm on, REPUBLISH_MAX at a time. */
static int republish_from(ak_intake_t *ik, uint64_t wm, size_t *total) {
  repub_t rp = {.ik = ik, .cap = REPUBLISH_MAX};
  rp.vals = calloc(REPUBLISH_MAX, sizeof *rp.vals);
  rp.recs = calloc(REPUBLISH_MAX, sizeof *rp.recs);
  int rc = rp.vals && rp.recs ? 0 : -1;
  uint64_t from = wm;
  while (rc == 0) {
    uint8_t fk[AK_HOOK_KEY_LEN];
    ak_key_hook(fk, from);
    if (ak_store_scan_from(ik->inst->store, AK_CF_HOOKS, NULL, 0, fk, sizeof fk, false, on_stored_hook, &rp) != 0 ||
        rp.rc != 0) {
      rc = -1;
      break;
    }
    if (!rp.n) break;
    ak_envelope_t last;
    uint64_t next = from + rp.n;
    if (ak_envelope_decode(rp.vals[rp.n - 1].p, rp.vals[rp.n - 1].len, &last) == 0) {
      next = last.seq + 1;
      ak_envelope_clear(&last);
    }
    bool full = rp.n == rp.cap;
    if (repub_flush(&rp) != 0) rc = -1;
    if (!full) break;
    from = next;
  }
  for (size_t i = 0; i < rp.n; i++) free(rp.recs[i]);
  free(rp.vals);
  free(rp.recs);
  *total = rp.total;
  return rc;
}

/* Before anything is served: the log's records of this node the store lacks, then the
 * stored hooks the log may lack. 0, or -1 with err. */
static int recover(ak_intake_t *ik, char *err, size_t errlen) {
  ak_store_t *st = ik->inst->store;
  int64_t from = AK_INTAKE_BEGINNING;
  int32_t part = -1;
  char *v = NULL;
  size_t vl = 0;
  if (ak_store_get(st, AK_CF_DEFAULT, KEY_OFFSET, strlen(KEY_OFFSET), &v, &vl) == 0 && vl == 12) {
    const uint8_t *p = (const uint8_t *)v;
    part = (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
    from = (int64_t)ak_get_u64(p + 4);
  }
  free(v);
  int32_t now_part = ak_intake_log_partition(ik->log);
  if (part >= 0 && part != now_part) {
    snprintf(err, errlen,
             "intake: this node's records were in partition %d of %s and now go to %d (its partition count "
             "changed?): recovery cannot tell which records are this node's",
             (int)part, ik->cfg->topic, (int)now_part);
    return -1;
  }
  uint64_t wm = meta_u64(st, KEY_WM);
  replay_t rp = {.ik = ik, .reclaimed = meta_u64(st, AK_KEY_RECLAIMED)};
  int64_t end = 0;
  char lerr[200] = "";
  int64_t t0 = ak_mono_ns();
  int rc = ak_intake_log_replay(ik->log, from, ik->cfg->recovery_timeout_ms, on_replayed, &rp, &end, lerr, sizeof lerr);
  if (rc != 0) {
    snprintf(err, errlen, "intake: cannot read the intake log (%s): %s", ik->cfg->topic,
             rp.err[0] ? rp.err : lerr[0] ? lerr : "failed");
  } else if (rp.n) {
    qsort(rp.v, rp.n, sizeof *rp.v, by_seq);
    ak_write_req_t *list = NULL, **lt = &list;
    for (size_t i = 0; i < rp.n; i++) {
      rec_item_t *it = rp.v[i];
      it->req.next = NULL;
      *lt = &it->req;
      lt = &it->req.next;
    }
    ak_writer_commit_fixed(ik->inst->writer, list);
    size_t stored = 0;
    for (size_t i = 0; i < rp.n; i++) {
      if (rp.v[i]->status == AK_WR_COMMITTED) stored++;
      else if (rp.v[i]->status == AK_WR_DUPLICATE) rp.dups++;
      else if (rc == 0) {
        snprintf(err, errlen, "intake: recovery could not store seq %llu (the store refused the write)",
                 (unsigned long long)rp.v[i]->req.seq);
        rc = -1;
      }
    }
    ak_counter_add(ik->m_replayed, stored);
    ak_log(AK_LOG_INFO, "intake", "recovery stored the hooks the intake log held and the store lacked",
           "stored=%zu duplicates=%llu from_offset=%lld to_offset=%lld", stored, (unsigned long long)rp.dups,
           (long long)from, (long long)end);
  }
  for (size_t i = 0; i < rp.n; i++) item_free(rp.v[i]);
  free(rp.v);
  if (rc != 0) return -1;
  /* the stored hooks from the watermark: the log may lack them (answered 503, or never
   * answered: the node died between the halves) */
  size_t repub = 0;
  uint64_t next = ak_store_next_seq(st) > ak_writer_next_seq(ik->inst->writer) ? ak_store_next_seq(st)
                                                                               : ak_writer_next_seq(ik->inst->writer);
  if (wm < next && republish_from(ik, wm, &repub) != 0) {
    snprintf(err, errlen, "intake: cannot republish the stored hooks from seq %llu to the intake log (%s)",
             (unsigned long long)wm, ik->cfg->topic);
    return -1;
  }
  ak_counter_add(ik->m_republished, repub);
  /* both marks: the log read to its end (our republished records are stored), every seq
   * handed out confirmed */
  ak_batch_t *b = ak_store_pin(st) == 0 ? ak_batch_new(st) : NULL;
  if (!b) {
    snprintf(err, errlen, "intake: store unavailable");
    return -1;
  }
  ik->offset = end > from ? end : from;
  put_offset(b, now_part, ik->offset);
  put_wm(b, next);
  ak_store_unpin(st);
  ak_wf_class_t cls;
  char *werr = NULL;
  int w = ak_store_write(st, b, true, &cls, &werr);
  ak_batch_free(b);
  free(werr);
  if (w != 0) {
    snprintf(err, errlen, "intake: cannot write the intake marks to the store");
    return -1;
  }
  ak_log(AK_LOG_INFO, "intake", "recovery done", "partition=%d offset=%lld republished=%zu seconds=%.3f",
         (int)now_part, (long long)ik->offset, repub, (double)(ak_mono_ns() - t0) / 1e9);
  return 0;
}

/* ------------------------------------------------------------------- module ---- */

static void intake_free(ak_intake_t *ik) {
  if (!ik) return;
  if (ik->log) ak_intake_log_free(ik->log, 10000);
  for (held_t *h = ik->held, *nx; h; h = nx) {
    nx = h->next;
    free(h->claim); /* a pending fleet claim is left to expire (intake_stop) */
    free(h->rec);
    free(h);
  }
  for (group_t *g = ik->head, *nx; g; g = nx) {
    nx = g->next;
    free(g);
  }
  for (rec_item_t *it = ik->unstored, *nx; it; it = nx) {
    nx = it->next;
    item_free(it);
  }
  ak_tmap_fini(&ik->pending);
  pthread_mutex_destroy(&ik->mu);
  pthread_cond_destroy(&ik->cv);
  free(ik);
}

static int intake_open(ak_instance_t *inst, char **err) {
  if (ak_wal_cfg(inst->cfg)->type != AK_WAL_DUAL) return 0;
  const ak_intake_cfg_t *c = ak_intake_cfg(inst->cfg);
  ak_intake_t *ik = calloc(1, sizeof *ik);
  if (!ik) {
    *err = strdup("out of memory");
    return AK_MODULE_FAILED;
  }
  ik->inst = inst;
  ik->cfg = c;
  ik->offset = AK_INTAKE_BEGINNING;
  ik->wm_floor = UINT64_MAX;
  pthread_mutex_init(&ik->mu, NULL);
  pthread_cond_init(&ik->cv, NULL);
  ak_tmap_init(&ik->pending, sizeof(held_t *));
  ik->held_min = UINT64_MAX;
  int64_t mrb = c->max_record_bytes;
  if (!mrb) {
    const json_t *mb = json_object_get(json_object_get(inst->cfg->effective, "http"), "max_body_bytes");
    mrb = (json_is_integer(mb) ? json_integer_value(mb) : 8000000) + 65536;
  }
  ak_intake_log_cfg_t lc = {
    .brokers = c->brokers.v, .nbrokers = c->brokers.n, .topic = c->topic, .node_id = c->node_id,
    .client_id = c->client ? c->client : "ankusa-intake", .produce_timeout_ms = c->produce_timeout_ms, .linger_ms = c->linger_ms,
    .max_record_bytes = mrb, .min_insync_replicas = c->min_insync_replicas, .ssl = c->ssl,
    .sasl_mechanism = c->sasl.username ? ak_kafka_sasl_name(c->sasl.mechanism) : NULL, .sasl_username = c->sasl.username, .sasl_password = c->sasl.password,
  };
  char e[256] = "";
  ik->log = ak_intake_log_new(&lc, e, sizeof e);
  if (!ik->log) {
    if (asprintf(err, "intake: %s", e) < 0) *err = NULL;
    intake_free(ik);
    return AK_MODULE_BAD_CONFIG;
  }
  ak_metrics_t *m = inst->metrics;
  static const double lat_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  const char *const il[] = {"instance", NULL};
  ak_family_t *lf = ak_metrics_family(m, "ankusa_intake_publish_duration_seconds",
                                      "From a group's publish to the intake log's answer (the log half of the ack).",
                                      AK_METRIC_HISTOGRAM, il, lat_bounds, sizeof lat_bounds / sizeof *lat_bounds);
  ik->m_latency = ak_metrics_series(lf, (const char *const[]){inst->name});
  ik->m_fail = ak_metrics_instance_series(m, inst->name, "ankusa_intake_publish_failures_total",
                                          "Publishes the intake log did not confirm (groups and reconciler batches).",
                                          AK_METRIC_COUNTER);
  ik->m_pending = ak_metrics_instance_series(m, inst->name, "ankusa_intake_pending_hooks",
                                             "Stored hooks not yet confirmed in the intake log (half-persisted): the "
                                             "reconciler's work.",
                                             AK_METRIC_GAUGE);
  ik->m_reconciled = ak_metrics_instance_series(m, inst->name, "ankusa_intake_reconciled_total",
                                                "Half-persisted hooks the reconciler completed.", AK_METRIC_COUNTER);
  ik->m_brk = ak_metrics_instance_series(m, inst->name, "ankusa_intake_breaker_state",
                                         "The intake breaker: 0 closed, 1 open, 2 probing.", AK_METRIC_GAUGE);
  ik->m_replayed = ak_metrics_instance_series(m, inst->name, "ankusa_intake_recovered_total",
                                              "Hooks recovery stored from the intake log (the store lacked them).",
                                              AK_METRIC_COUNTER);
  ik->m_republished = ak_metrics_instance_series(m, inst->name, "ankusa_intake_republished_total",
                                                 "Stored hooks recovery published again (above the watermark).",
                                                 AK_METRIC_COUNTER);
  inst->intake = ik;
  ak_log(AK_LOG_INFO, "durability",
         "wal.type=dual: a 201 means the hook is fsynced in this host's store and confirmed in the intake log; it is "
         "lost only when this host and every in-sync replica of its partition are lost together",
         "topic=%s node_id=%s min_insync_replicas=%lld", c->topic, c->node_id, (long long)c->min_insync_replicas);
  return 0;
}

/* Before the writer and the ingest listener start: the log is reached, recovery runs,
 * then the writer gets its second half. */
static int intake_start(ak_instance_t *inst, char **err) {
  ak_intake_t *ik = inst->intake;
  if (!ik) return 0;
  char e[400] = "";
  bool checked = false;
  if (ak_intake_log_open(ik->log, ik->cfg->recovery_timeout_ms, &checked, e, sizeof e) != 0) {
    if (asprintf(err, "intake: %s", e) < 0) *err = NULL;
    return AK_MODULE_FAILED;
  }
  if (!checked && ik->cfg->min_insync_replicas > 0)
    ak_log(AK_LOG_WARNING, "intake", "the cluster did not tell the topic's min.insync.replicas: not checked",
           "topic=%s required=%lld", ik->cfg->topic, (long long)ik->cfg->min_insync_replicas);
  if (recover(ik, e, sizeof e) != 0) {
    *err = strdup(e);
    return AK_MODULE_FAILED;
  }
  ak_writer_mirror_t mm = {.begin = mirror_begin, .disk_done = mirror_disk_done, .pending = mirror_pending,
                           .hold_below = mirror_hold_below, .ctx = ik};
  ak_writer_set_mirror(inst->writer, &mm);
  if (pthread_create(&ik->thread, NULL, reconciler_main, ik) != 0) {
    *err = strdup("intake: cannot start the reconciler thread");
    return AK_MODULE_FAILED;
  }
  ik->thread_on = true;
  return 0;
}

/* After the writer stopped (it answered everything, waiting for the log's answers): the
 * reconciler's last pass, then the marks. */
static void intake_stop(ak_instance_t *inst) {
  ak_intake_t *ik = inst->intake;
  if (!ik || !ik->thread_on) return;
  pthread_mutex_lock(&ik->mu);
  ik->stopping = true;
  pthread_cond_broadcast(&ik->cv);
  pthread_mutex_unlock(&ik->mu);
  pthread_join(ik->thread, NULL);
  ik->thread_on = false;
  /* held hooks are stored, and published again by the next start: their fleet claims are
   * neither promoted (the host could be lost before that start, and the event with it) nor
   * released (another node would store it a second time at once): left pending, they
   * expire after fleet.pending_ttl_ms, after which a retry elsewhere is a new hook (at
   * least once, never lost). The call is freed without a settle. */
  pthread_mutex_lock(&ik->mu);
  for (held_t *h = ik->held; h; h = h->next) {
    free(h->claim);
    h->claim = NULL;
  }
  pthread_mutex_unlock(&ik->mu);
  /* every group still waiting on the log is answered before the writer can be freed (it
   * closes after this module stops): confirmed, or "stopped" (held, republished at the
   * next start) */
  int32_t part = ak_intake_log_partition(ik->log);
  ak_intake_log_free(ik->log, 10000);
  ik->log = NULL;
  ak_store_t *st = inst->store;
  ak_batch_t *b = ak_store_pin(st) == 0 ? ak_batch_new(st) : NULL;
  if (!b) return;
  uint64_t below = ak_writer_committed_below(inst->writer); /* never under ik->mu: the writer's
                                                              lock comes first */
  pthread_mutex_lock(&ik->mu);
  advance(ik);
  put_offset(b, part, ik->offset);
  put_wm(b, watermark(ik, below));
  pthread_mutex_unlock(&ik->mu);
  ak_store_unpin(st);
  ak_wf_class_t cls;
  char *werr = NULL;
  ak_store_write(st, b, true, &cls, &werr);
  free(werr);
  ak_batch_free(b);
}

static void intake_close(ak_instance_t *inst) {
  intake_free(inst->intake);
  inst->intake = NULL;
}

const ak_module_t ak_mod_intake = {
  .name = "intake",
  .section = "intake",
  .doc = "the intake log of wal.type dual: a replicated Kafka topic every hook is confirmed in before its 201",
  .options = intake_rows,
  .cfg_size = sizeof(ak_intake_cfg_t),
  .check = intake_check,
  .roles = AK_ROLES_STORE,
  .open = intake_open,
  .start = intake_start,
  .stop = intake_stop,
  .close = intake_close,
};
