/* Archive replay reads (archive/replay_reader.h). A request (job, after_seq, window) is
 * answered from the catalogue: the row holding after_seq + 1, or the next row whose
 * received_at range meets the window; that row's segment is read whole (one GET, kept
 * as the one cached segment so a job's next requests do not read it again) and walked
 * from after_seq on, keeping the hooks received in the window. A segment whose objects
 * are gone (or that no longer reads back) is passed over, counted in the batch, and
 * logged once; a store or blob store that cannot be read is retried with a backoff, the
 * request staying queued. Hands a finished batch to the dispatch thread under a mutex
 * held only for that; never holds it across I/O. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "archive/catalogue.h"
#include "archive/compactor.h"
#include "archive/replay_reader.h"
#include "archive/segment.h"
#include "core/clock.h"
#include "core/envelope.h"
#include "core/instance.h"
#include "core/log.h"

#define SLOTS (2 * AK_REPLAY_MAX_ACTIVE)
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 10000
#define IDLE_MS 30000 /* a slot its job has not asked about for this long is freed (paused, cancelled) */

typedef struct req {
  uint64_t after;
  int64_t from, to;
  size_t max;
} req_t;

typedef enum { S_FREE = 0, S_PENDING, S_WORKING, S_READY } slot_state_t;

typedef struct slot {
  slot_state_t st;
  uint8_t job[16];
  req_t req;
  ak_replay_abatch_t out; /* S_READY */
  uint64_t queued;        /* order of requests: oldest first */
  uint64_t used;          /* last fetch: the least recently used slot is reused first */
  int64_t touched_ms;     /* last fetch, ak_now_ms */
  int64_t retry_at;       /* S_PENDING after a failure: not before (ak_now_ms) */
  int64_t backoff;
} slot_t;

struct ak_areader {
  ak_store_t *st;
  ak_blob_t *blob;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  bool started, stopping;
  slot_t slots[SLOTS];
  uint64_t clock;
  /* the reader's own (one thread, or a test calling ak_areader_read) */
  char cache_key[AK_BLOB_KEY_MAX + 1];
  uint8_t *cache;
  size_t cache_len;
  char gone_logged[AK_BLOB_KEY_MAX + 1];
  int64_t failed_logged_at;
};

ak_areader_t *ak_areader_new(ak_store_t *st, ak_blob_t *blob) {
  ak_areader_t *a = calloc(1, sizeof *a);
  if (!a) return NULL;
  a->st = st;
  a->blob = blob;
  pthread_mutex_init(&a->mu, NULL);
  pthread_cond_init(&a->cv, NULL);
  return a;
}

void ak_areader_free(ak_areader_t *a) {
  if (!a) return;
  ak_areader_stop(a);
  for (size_t i = 0; i < SLOTS; i++) ak_replay_abatch_clear(&a->slots[i].out);
  free(a->cache);
  pthread_mutex_destroy(&a->mu);
  pthread_cond_destroy(&a->cv);
  free(a);
}

static bool same_req(const req_t *x, const req_t *y) {
  /* max is a hint for the size of the batch: the job decides as much of it as its budget allows */
  return x->after == y->after && x->from == y->from && x->to == y->to;
}

/* ------------------------------------------------------------------- reading ---- */

typedef struct find {
  uint64_t after;
  int64_t from, to;
  unsigned left;
  bool found, stopped;
  uint64_t looked_to;
  ak_cat_row_t row;
} find_t;

static int find_cb(void *ctx, const ak_cat_row_t *r) {
  find_t *f = ctx;
  if (r->last_seq <= f->after) return 0;
  if (r->max_received_ms < f->from || r->min_received_ms > f->to) {
    f->looked_to = r->last_seq; /* nothing of it is in the window */
    if (--f->left == 0) {
      f->stopped = true;
      return 1;
    }
    return 0;
  }
  f->row = *r;
  f->found = true;
  return 1;
}

typedef struct walk {
  ak_replay_abatch_t *out;
  size_t cap, max, bytes;
  uint64_t after;
  int64_t from, to;
  bool full, oom;
  uint64_t last; /* the last seq looked at */
} walk_t;

static int walk_cb(void *ctx, const uint8_t *payload, size_t plen, uint64_t off) {
  (void)off;
  walk_t *w = ctx;
  ak_envelope_t env;
  if (ak_envelope_decode(payload, plen, &env) != 0) return 0; /* left to the mover's count: not a hook */
  uint64_t seq = env.seq;
  int64_t at = env.received_at_ms;
  ak_envelope_clear(&env);
  if (seq <= w->after) return 0;
  if (at >= w->from && at <= w->to) {
    if (w->out->n >= w->max || w->bytes >= AK_AREADER_BATCH_BYTES) {
      w->full = true;
      return 1;
    }
    if (w->out->n == w->cap) {
      size_t nc = w->cap ? 2 * w->cap : 64;
      ak_replay_arec_t *v = realloc(w->out->v, nc * sizeof *v);
      if (!v) {
        w->oom = true;
        return 1;
      }
      w->out->v = v;
      w->cap = nc;
    }
    uint8_t *copy = malloc(plen);
    if (!copy) {
      w->oom = true;
      return 1;
    }
    memcpy(copy, payload, plen);
    w->out->v[w->out->n++] = (ak_replay_arec_t){.seq = seq, .rec = copy, .len = plen};
    w->bytes += plen;
  }
  w->last = seq;
  return 0;
}

/* The segment of r, from the cache or one GET. AK_BLOB_OK, AK_BLOB_NOT_FOUND, or an error. */
static int segment(ak_areader_t *a, const ak_cat_row_t *r, char *err, size_t errlen) {
  if (a->cache && !strcmp(a->cache_key, r->seg_key)) return AK_BLOB_OK;
  free(a->cache);
  a->cache = NULL;
  a->cache_len = 0;
  a->cache_key[0] = 0;
  uint8_t *buf = NULL;
  size_t len = 0;
  int rc = ak_blob_get(a->blob, r->seg_key, &buf, &len, err, errlen);
  if (rc != AK_BLOB_OK) {
    free(buf);
    return rc;
  }
  a->cache = buf;
  a->cache_len = len;
  snprintf(a->cache_key, sizeof a->cache_key, "%s", r->seg_key);
  return AK_BLOB_OK;
}

static void passed_over(ak_areader_t *a, const ak_cat_row_t *r, const char *why) {
  if (!strcmp(a->gone_logged, r->seg_key)) return; /* once per segment, not once per job and request */
  snprintf(a->gone_logged, sizeof a->gone_logged, "%s", r->seg_key);
  ak_log(AK_LOG_WARNING, "replay", "archive replay passes over a segment", "segment=%s first_seq=%llu last_seq=%llu "
         "reason=\"%s\"", r->seg_key, (unsigned long long)r->first_seq, (unsigned long long)r->last_seq, why);
}

int ak_areader_read(ak_areader_t *a, uint64_t after, int64_t from, int64_t to, size_t max, ak_replay_abatch_t *out) {
  memset(out, 0, sizeof *out);
  out->looked_to = after;
  if (max < 1) max = 1;
  find_t f = {.after = after, .from = from, .to = to, .left = AK_AREADER_ROWS_PER_REQUEST, .looked_to = after};
  if (ak_cat_scan(a->st, after + 1, find_cb, &f) != 0) {
    int64_t now = ak_now_ms();
    if (now - a->failed_logged_at >= 10000) {
      a->failed_logged_at = now;
      ak_log(AK_LOG_WARNING, "replay", "archive replay cannot read the catalogue; retrying", "after_seq=%llu",
             (unsigned long long)after);
    }
    return -1;
  }
  if (!f.found) {
    out->looked_to = f.looked_to;
    out->end = !f.stopped;
    return 0;
  }
  const ak_cat_row_t *r = &f.row;
  char err[256] = "";
  int rc = segment(a, r, err, sizeof err);
  if (rc == AK_BLOB_NOT_FOUND) {
    passed_over(a, r, "its segment object is gone");
    out->gone = 1;
    out->looked_to = r->last_seq;
    return 0;
  }
  if (rc != AK_BLOB_OK) {
    int64_t now = ak_now_ms();
    if (now - a->failed_logged_at >= 10000) {
      a->failed_logged_at = now;
      ak_log(AK_LOG_WARNING, "replay", "archive replay cannot read a segment; retrying", "segment=%s error=\"%s\"",
             r->seg_key, err);
    }
    return -1;
  }
  walk_t w = {.out = out, .max = max, .after = after, .from = from, .to = to, .last = after};
  int wrc = a->cache_len == r->seg_bytes ? ak_seg_walk(a->cache, a->cache_len, walk_cb, &w) : AK_SEG_MALFORMED;
  if (w.oom) {
    ak_replay_abatch_clear(out);
    return -1;
  }
  if (wrc != AK_SEG_OK) {
    ak_replay_abatch_clear(out);
    passed_over(a, r, wrc == AK_SEG_CRC ? "its segment fails its checksum" : "its segment is damaged");
    out->gone = 1;
    out->looked_to = r->last_seq;
    return 0;
  }
  out->looked_to = w.full ? w.last : r->last_seq;
  return 0;
}

/* ------------------------------------------------------------------- the thread ---- */

static slot_t *next_pending(ak_areader_t *a, int64_t now, int64_t *wake_at) {
  slot_t *best = NULL;
  *wake_at = 0;
  for (size_t i = 0; i < SLOTS; i++) {
    slot_t *s = &a->slots[i];
    if ((s->st == S_PENDING || s->st == S_READY) && now - s->touched_ms > IDLE_MS) {
      ak_replay_abatch_clear(&s->out); /* bounds memory: prepared batches nobody will take */
      s->st = S_FREE;
    }
    int64_t idle_at = s->touched_ms + IDLE_MS + 1;
    if (s->st == S_READY && (!*wake_at || idle_at < *wake_at)) *wake_at = idle_at;
    if (s->st != S_PENDING) continue;
    if (s->retry_at > now) {
      if (!*wake_at || s->retry_at < *wake_at) *wake_at = s->retry_at;
      continue;
    }
    if (!best || s->queued < best->queued) best = s;
  }
  return best;
}

static void *reader_main(void *arg) {
  ak_areader_t *a = arg;
  pthread_setname_np(pthread_self(), "ak-areplay");
  pthread_mutex_lock(&a->mu);
  for (;;) {
    int64_t wake_at = 0;
    slot_t *s = NULL;
    while (!a->stopping && !(s = next_pending(a, ak_now_ms(), &wake_at))) {
      if (wake_at) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t ms = wake_at - ak_now_ms();
        if (ms < 1) ms = 1;
        ts.tv_sec += ms / 1000;
        ts.tv_nsec += (ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
          ts.tv_sec++;
          ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&a->cv, &a->mu, &ts);
      } else {
        pthread_cond_wait(&a->cv, &a->mu);
      }
    }
    if (a->stopping) break;
    s->st = S_WORKING;
    uint8_t job[16];
    memcpy(job, s->job, 16);
    req_t q = s->req;
    pthread_mutex_unlock(&a->mu);
    ak_replay_abatch_t out;
    int rc = ak_areader_read(a, q.after, q.from, q.to, q.max, &out);
    pthread_mutex_lock(&a->mu);
    if (s->st == S_WORKING && !memcmp(s->job, job, 16) && same_req(&s->req, &q)) {
      if (rc == 0) {
        s->out = out;
        s->st = S_READY;
        s->backoff = 0;
      } else {
        s->st = S_PENDING;
        s->backoff = s->backoff ? s->backoff * 2 : BACKOFF_MIN_MS;
        if (s->backoff > BACKOFF_MAX_MS) s->backoff = BACKOFF_MAX_MS;
        s->retry_at = ak_now_ms() + s->backoff;
      }
    } else if (rc == 0) {
      ak_replay_abatch_clear(&out); /* the job asked for something else meanwhile */
    }
  }
  pthread_mutex_unlock(&a->mu);
  return NULL;
}

int ak_areader_fetch(void *ctx, const uint8_t job[16], uint64_t after, int64_t from, int64_t to, size_t max,
                     ak_replay_abatch_t *out) {
  ak_areader_t *a = ctx;
  req_t q = {.after = after, .from = from, .to = to, .max = max};
  pthread_mutex_lock(&a->mu);
  slot_t *s = NULL, *lru = NULL;
  for (size_t i = 0; i < SLOTS && !s; i++) {
    slot_t *x = &a->slots[i];
    if (x->st != S_FREE && !memcmp(x->job, job, 16)) {
      s = x;
    } else if (x->st != S_WORKING) {
      if (!lru || (lru->st != S_FREE && (x->st == S_FREE || x->used < lru->used))) lru = x;
    }
  }
  if (s && s->st == S_READY && same_req(&s->req, &q)) {
    *out = s->out;
    memset(&s->out, 0, sizeof s->out);
    s->used = ++a->clock;
    s->touched_ms = ak_now_ms();
    if (!out->end) {
      /* the job's next request, most likely: read ahead while this batch is moved */
      s->req.after = out->looked_to;
      s->req.max = max;
      s->st = S_PENDING;
      s->queued = ++a->clock;
      s->retry_at = 0;
      pthread_cond_signal(&a->cv);
    } else {
      s->st = S_FREE;
    }
    pthread_mutex_unlock(&a->mu);
    return AK_REPLAY_FETCH_READY;
  }
  if (s && (s->st == S_PENDING || s->st == S_WORKING) && same_req(&s->req, &q)) {
    s->req.max = max;
    s->used = ++a->clock;
    s->touched_ms = ak_now_ms();
    pthread_mutex_unlock(&a->mu);
    return AK_REPLAY_FETCH_NOT_READY;
  }
  if (!s) s = lru; /* a job's slot is taken back only from the least recently served one */
  if (s) {
    ak_replay_abatch_clear(&s->out);
    memcpy(s->job, job, 16);
    s->req = q;
    s->st = S_PENDING; /* a slot being worked for an old request: its answer is dropped */
    s->queued = s->used = ++a->clock;
    s->touched_ms = ak_now_ms();
    s->retry_at = 0;
    s->backoff = 0;
    pthread_cond_signal(&a->cv);
  }
  pthread_mutex_unlock(&a->mu);
  return AK_REPLAY_FETCH_NOT_READY;
}

int ak_areader_start(ak_areader_t *a) {
  if (a->started) return 0;
  a->stopping = false;
  if (pthread_create(&a->thread, NULL, reader_main, a) != 0) return -1;
  a->started = true;
  return 0;
}

void ak_areader_stop(ak_areader_t *a) {
  if (!a || !a->started) return;
  pthread_mutex_lock(&a->mu);
  a->stopping = true;
  pthread_cond_broadcast(&a->cv);
  pthread_mutex_unlock(&a->mu);
  pthread_join(a->thread, NULL);
  a->started = false;
}

/* ------------------------------------------------------------------- module ---- */

static int areader_open(ak_instance_t *inst, char **err) {
  ak_blob_t *blob = ak_archive_blob(inst);
  if (!blob) return 0; /* the compactor is not running: no archive to replay from */
  inst->areader = ak_areader_new(inst->store, blob);
  if (!inst->areader) {
    *err = strdup("archive replay: out of memory");
    return AK_MODULE_FAILED;
  }
  return 0;
}

static int areader_start(ak_instance_t *inst, char **err) {
  if (!inst->areader) return 0;
  if (ak_areader_start(inst->areader) != 0) {
    *err = strdup("archive replay: cannot start the reader thread");
    return AK_MODULE_FAILED;
  }
  /* jobs without a reader wait; from here on their requests are answered */
  ak_replays_set_archive(inst->replays, ak_areader_fetch, inst->areader);
  return 0;
}

static void areader_stop(ak_instance_t *inst) {
  if (!inst->areader) return;
  /* taken back first: once this returns, the dispatch thread never calls the reader again */
  ak_replays_set_archive(inst->replays, NULL, NULL);
  ak_areader_stop(inst->areader);
}

static void areader_close(ak_instance_t *inst) {
  ak_areader_free(inst->areader);
  inst->areader = NULL;
}

const ak_module_t ak_mod_archive_replay = {
  .name = "archive_replay",
  .roles = AK_ROLE_STORAGE,
  .open = areader_open,
  .start = areader_start,
  .stop = areader_stop,
  .close = areader_close,
};
