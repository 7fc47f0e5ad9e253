/* The fleet thread runs one libuv loop with the Redis connection (net/redis.h). Calls
 * arrive on a lock-free stack (one push, one wake-up that libuv coalesces), are taken
 * all at once, written as one pipelined burst, and answered in order as the replies
 * come. A call waits in `outstanding` (submission order = deadline order, all calls
 * having the same budget) until its reply or its deadline, whichever comes first; a
 * reply that comes after the deadline finds its wire slot emptied and is dropped (the
 * call already fell back, and its settle covers whatever the late script did: a promote
 * takes the key if it is ours or free, a release frees it only if it is ours).
 *
 * Settles arrive on a second stack with a counter for the bound; the first one into an
 * empty queue wakes the thread, which drains the queue on a short timer so one round
 * trip carries a batch.
 *
 * Keys (namespace default "ankusa:fleet"; the tenant in braces keeps a tenant's keys in
 * one cluster slot): <ns>:{<tenant>}:h and :b are the GCRA TATs of the hooks and bytes
 * lanes (microseconds of the store's clock, so nodes' clocks never disagree), and
 * <ns>:{<tenant>}:d:<32 hex> is an event claim, "p:<token>" while pending and
 * "c:<hook id>" once committed. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <uv.h>
#include "core/clock.h"
#include "core/config.h"
#include "core/ids.h"
#include "core/log.h"
#include "fleet/breaker.h"
#include "fleet/fleet.h"
#include "net/redis.h"

/* ------------------------------------------------------------------- config ---- */

typedef struct ak_fleet_cfg {
  struct {
    const char *url;
    const char *password;
    const char *ns;
  } store;
  int64_t timeout_ms;
  double breaker_failure_rate;
  int64_t breaker_min_calls, breaker_window_ms, breaker_open_ms;
  int64_t pending_ttl_ms;
  /* derived (finish): the scopes of rate_limits and dedupe, whose rows those sections own */
  bool rate_scope, dedupe_scope;
} ak_fleet_cfg_t;

#define DEFAULT_SETTLE_MAX 50000
#define DEFAULT_SETTLE_INTERVAL_MS 2
#define DEFAULT_NAMESPACE "ankusa:fleet"

enum { K_RATE = 0, K_DEDUPE, K_COUNT };
static const char *const kind_names[K_COUNT] = {"rate_limit", "dedupe"};
enum { C_OK = 0, C_ERROR, C_TIMEOUT, C_UNAVAILABLE, C_COUNT };
static const char *const call_results[C_COUNT] = {"ok", "error", "timeout", "unavailable"};
enum { S_OK = 0, S_ERROR, S_COUNT };
static const char *const settle_results[S_COUNT] = {"ok", "error"};

enum { OP_SETTLE = 0, OP_FORGET };

/* What the settle stack carries: the call itself (it holds every key), or a forget. */
typedef struct op {
  struct op *next;
  int kind;
  ak_fleet_call_t *call;       /* OP_SETTLE */
  bool promote;
  char id[AK_UUID_STR_LEN];    /* promote: the hook that holds the event */
  char tenant[65];             /* OP_FORGET */
} op_t;

/* A call on the wire: its reply comes in order whatever happened to the call. */
typedef struct wire {
  ak_fleet_t *f;
  ak_fleet_call_t *call;       /* NULL once the call was answered (deadline) */
  struct wire *prev, *next;    /* in outstanding while call != NULL */
} wire_t;

struct ak_fleet {
  ak_instance_t *inst;
  const ak_fleet_cfg_t *cfg;
  ak_redis_url_t url;
  char addr[300];
  const char *ns;
  size_t ns_len;
  char pending_ttl[24];         /* fleet.pending_ttl_ms as text */
  ak_fbreaker_t br;
  int64_t timeout_ns;
  int64_t settle_max, settle_interval_ms;
  uint32_t token_node;
  _Atomic uint64_t token_seq;
  char sha_admit[41], sha_settle[41], sha_promote[41];
  /* fleet thread only: the last limit's arguments (lane_args), the promote batch */
  bool lane_cached;
  ak_ratelimit_t lane_lim;
  char lane_iv[2][32], lane_burst[2][32];
  struct promote_batch *pb;

  /* the thread */
  pthread_t th;
  bool started;
  uv_loop_t loop;
  uv_async_t wake;
  uv_timer_t deadline_t, settle_t, tick_t;
  ak_redis_t *redis;
  _Atomic int stopping;
  _Atomic int conn;                    /* ak_redis_state_t */
  _Atomic(ak_fleet_call_t *) calls;    /* inbound, newest first */
  _Atomic(op_t *) ops;                 /* settles and forgets, newest first */
  _Atomic int64_t nops;
  _Atomic bool last_failed[K_COUNT];
  wire_t *out_head, *out_tail;         /* fleet thread only */
  int64_t last_warn_ms;

  /* metrics */
  ak_series_t *m_calls[C_COUNT], *m_fallback[K_COUNT], *m_degraded[K_COUNT], *m_settles[S_COUNT];
  ak_series_t *m_settle_dropped, *m_settle_queue, *m_duration, *m_transitions[3], *m_breaker;
};

/* -------------------------------------------------------------------- scripts ---- */

/* Admission. KEYS: hooks TAT, bytes TAT, event key. ARGV: what (1 hooks lane, 2 bytes
 * lane, 4 claim), hooks interval_us, hooks burst, bytes interval_us, bytes burst, body
 * bytes, token, pending ttl ms. Returns {0} admitted, {1, id} duplicate, {2, ms} rate
 * limited, {3, ms} pending. The lanes are the node limiter's GCRA (core/gcra.c): a cost
 * above the burst is charged as the burst, both lanes pass or nothing is charged. */
static const char admit_lua[] =
  "if redis.replicate_commands then redis.replicate_commands() end\n"
  "local what = tonumber(ARGV[1])\n"
  "local claim = what >= 4\n"
  "if claim then\n"
  "  local v = redis.call('GET', KEYS[3])\n"
  "  if v then\n"
  "    if string.sub(v, 1, 2) == 'c:' then return {1, string.sub(v, 3)} end\n"
  "    local ttl = redis.call('PTTL', KEYS[3])\n"
  "    if ttl < 1 then ttl = 1 end\n"
  "    return {3, ttl}\n"
  "  end\n"
  "end\n"
  "local t = redis.call('TIME')\n"
  "local now = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"
  "local function lane(key, interval, burst, cost)\n"
  "  if cost > burst then cost = burst end\n"
  "  local tat = tonumber(redis.call('GET', key) or '0')\n"
  "  if tat < now then tat = now end\n"
  "  local nt = tat + cost * interval\n"
  "  local ahead = nt - now\n"
  "  local limit = burst * interval\n"
  "  if ahead <= limit then return nt, 0 end\n"
  "  return nil, ahead - limit\n"
  "end\n"
  "local h, b, wait\n"
  "if what % 2 == 1 then\n"
  "  h, wait = lane(KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[3]), 1)\n"
  "  if not h then return {2, math.ceil(wait / 1000)} end\n"
  "end\n"
  "if math.floor(what / 2) % 2 == 1 then\n"
  "  b, wait = lane(KEYS[2], tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]))\n"
  "  if not b then return {2, math.ceil(wait / 1000)} end\n"
  "end\n"
  "if h then redis.call('SET', KEYS[1], string.format('%.3f', h), 'PX', math.ceil((h - now) / 1000) + 1) end\n"
  "if b then redis.call('SET', KEYS[2], string.format('%.3f', b), 'PX', math.ceil((b - now) / 1000) + 1) end\n"
  "if claim then redis.call('SET', KEYS[3], 'p:' .. ARGV[7], 'PX', ARGV[8]) end\n"
  "return {0}\n";

/* Settle. KEYS: event key, hooks TAT, bytes TAT. ARGV: what (1 promote, 2 release,
 * 4 refund the hooks lane, 8 refund the bytes lane), token, hook id, ttl ms, hooks
 * interval_us, hooks burst, bytes interval_us, bytes burst, body bytes. A promote takes
 * the key when it is this call's pending claim or free (a late or lost admission); a
 * release frees it only when it is this call's. */
static const char settle_lua[] =
  "if redis.replicate_commands then redis.replicate_commands() end\n"
  "local what = tonumber(ARGV[1])\n"
  "local mine = 'p:' .. ARGV[2]\n"
  "if what % 2 == 1 then\n"
  "  local v = redis.call('GET', KEYS[1])\n"
  "  if (not v) or v == mine then redis.call('SET', KEYS[1], 'c:' .. ARGV[3], 'PX', ARGV[4]) end\n"
  "  return 1\n"
  "end\n"
  "if math.floor(what / 2) % 2 == 1 and redis.call('GET', KEYS[1]) == mine then redis.call('DEL', KEYS[1]) end\n"
  "local t = redis.call('TIME')\n"
  "local now = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"
  "local function refund(key, interval, burst, cost)\n"
  "  if cost > burst then cost = burst end\n"
  "  local tat = tonumber(redis.call('GET', key) or '0')\n"
  "  local nt = tat - cost * interval\n"
  "  if nt <= now then redis.call('DEL', key)\n"
  "  else redis.call('SET', key, string.format('%.3f', nt), 'PX', math.ceil((nt - now) / 1000) + 1) end\n"
  "end\n"
  "if math.floor(what / 4) % 2 == 1 then refund(KEYS[2], tonumber(ARGV[5]), tonumber(ARGV[6]), 1) end\n"
  "if math.floor(what / 8) % 2 == 1 then refund(KEYS[3], tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])) end\n"
  "return 1\n";

/* Promotes in a batch. KEYS: event keys. ARGV: per key its call's token, the hook id, the
 * ttl ms. The same rule as the settle script's promote. */
static const char promote_lua[] =
  "for i = 1, #KEYS do\n"
  "  local a = (i - 1) * 3\n"
  "  local v = redis.call('GET', KEYS[i])\n"
  "  if (not v) or v == 'p:' .. ARGV[a + 1] then\n"
  "    redis.call('SET', KEYS[i], 'c:' .. ARGV[a + 2], 'PX', ARGV[a + 3])\n"
  "  end\n"
  "end\n"
  "return #KEYS\n";

static void sha1_hex(const char *s, char out[41]) {
  unsigned char d[SHA_DIGEST_LENGTH];
  SHA1((const unsigned char *)s, strlen(s), d);
  for (int i = 0; i < SHA_DIGEST_LENGTH; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

/* ---------------------------------------------------------------- accessors ---- */

bool ak_fleet_rate_scope(const ak_fleet_t *f) { return f && f->cfg->rate_scope; }
bool ak_fleet_dedupe_scope(const ak_fleet_t *f) { return f && f->cfg->dedupe_scope; }

static int64_t now_ms(void) { return ak_mono_ns() / 1000000; }

static void transition(ak_fleet_t *f, int to) {
  if (to < 0) return;
  ak_counter_add(f->m_transitions[to], 1);
  ak_gauge_set(f->m_breaker, to);
  if (to == AK_FB_OPEN)
    ak_log(AK_LOG_WARNING, "fleet", "breaker opened: hooks are admitted node-local", "store=\"%s\" for_ms=%" PRId64,
           f->addr, f->cfg->breaker_open_ms);
  else if (to == AK_FB_CLOSED)
    ak_log(AK_LOG_INFO, "fleet", "breaker closed: hooks are admitted by the fleet store again", "store=\"%s\"",
           f->addr);
}

static void degraded_refresh(ak_fleet_t *f) {
  bool open = ak_fbreaker_state(&f->br) != AK_FB_CLOSED;
  bool scope[K_COUNT] = {f->cfg->rate_scope, f->cfg->dedupe_scope};
  for (int k = 0; k < K_COUNT; k++)
    if (scope[k]) ak_gauge_set(f->m_degraded[k], open || atomic_load(&f->last_failed[k]) ? 1 : 0);
}

static void count_fallback(ak_fleet_t *f, const ak_fleet_call_t *c) {
  if (c->charge) ak_counter_add(f->m_fallback[K_RATE], 1);
  if (c->claim) ak_counter_add(f->m_fallback[K_DEDUPE], 1);
}

/* ------------------------------------------------------------ the fleet thread ---- */

static void out_unlink(ak_fleet_t *f, wire_t *w) {
  if (w->prev) w->prev->next = w->next;
  else f->out_head = w->next;
  if (w->next) w->next->prev = w->prev;
  else f->out_tail = w->prev;
  w->prev = w->next = NULL;
}

/* The verdict is in: record it and hand the call back. The last touch of the call. */
static void complete(ak_fleet_t *f, ak_fleet_call_t *c, int result) {
  int64_t t = ak_mono_ns();
  ak_counter_add(f->m_calls[result], 1);
  ak_histogram_observe(f->m_duration, (double)(t - c->t0_ns) / 1e9);
  bool ok = result == C_OK;
  if (!ok) {
    c->verdict = AK_FLEET_LOCAL;
    count_fallback(f, c);
  }
  if (c->charge) atomic_store(&f->last_failed[K_RATE], !ok);
  if (c->claim) atomic_store(&f->last_failed[K_DEDUPE], !ok);
  transition(f, ak_fbreaker_record(&f->br, t / 1000000, ok, c->probe));
  degraded_refresh(f);
  c->done(c, c->ctx);
}

static void on_deadline(uv_timer_t *t);

static void arm_deadline(ak_fleet_t *f) {
  if (!f->out_head) {
    uv_timer_stop(&f->deadline_t);
    return;
  }
  int64_t wait = f->out_head->call->deadline_ns - ak_mono_ns();
  uint64_t ms = wait <= 0 ? 0 : (uint64_t)((wait + 999999) / 1000000);
  uv_timer_start(&f->deadline_t, on_deadline, ms, 0);
}

static bool parse_admit(const redisReply *r, ak_fleet_call_t *c) {
  if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 1 || r->element[0]->type != REDIS_REPLY_INTEGER)
    return false;
  long long code = r->element[0]->integer;
  const redisReply *a = r->elements > 1 ? r->element[1] : NULL;
  switch (code) {
    case 0:
      c->verdict = AK_FLEET_ADMITTED;
      return true;
    case 1: {
      char id[AK_UUID_STR_LEN];
      if (!a || a->type != REDIS_REPLY_STRING || a->len != AK_UUID_STR_LEN - 1) return false;
      memcpy(id, a->str, a->len);
      id[a->len] = 0;
      if (!ak_uuid_parse(id, c->dup_id)) return false;
      c->verdict = AK_FLEET_DUPLICATE;
      return true;
    }
    case 2:
    case 3:
      if (!a || a->type != REDIS_REPLY_INTEGER) return false;
      c->verdict = code == 2 ? AK_FLEET_RATE_LIMITED : AK_FLEET_PENDING;
      c->retry_ms = a->integer > 0 ? a->integer : 1;
      return true;
    default:
      return false;
  }
}

static void on_admit_reply(void *priv, redisReply *r) {
  wire_t *w = priv;
  ak_fleet_t *f = w->f;
  ak_fleet_call_t *c = w->call;
  if (r && r->type == REDIS_REPLY_ERROR && r->str && strncmp(r->str, "NOSCRIPT", 8) == 0)
    ak_redis_reset(f->redis, "the store lost the scripts (SCRIPT FLUSH?): reloading");
  if (c) {
    bool was_head = f->out_head == w;
    out_unlink(f, w);
    if (r && r->type == REDIS_REPLY_ERROR)
      ak_log(AK_LOG_WARNING, "fleet", "the store refused an admission call", "error=\"%.120s\"", r->str ? r->str : "");
    complete(f, c, r ? (parse_admit(r, c) ? C_OK : C_ERROR) : C_ERROR);
    if (was_head) arm_deadline(f);
  }
  free(w);
}

/* Keys are built by copying (no printf: a hook formats three of them, twice). The
 * namespace is at most 100 bytes and a tenant 64, so KEY_MAX always fits. */
#define KEY_MAX 208

static size_t put(char *o, const char *s, size_t n) {
  memcpy(o, s, n);
  return n;
}

/* "<ns>:{<tenant>}:<suffix>" */
static size_t key_of(const ak_fleet_t *f, const char *tenant, const char *suffix, char *out) {
  size_t n = put(out, f->ns, f->ns_len);
  n += put(out + n, ":{", 2);
  n += put(out + n, tenant, strlen(tenant));
  n += put(out + n, "}:", 2);
  n += put(out + n, suffix, strlen(suffix));
  out[n] = 0;
  return n;
}

static void claim_key(const ak_fleet_t *f, const ak_fleet_call_t *c, char *out) {
  static const char hex[] = "0123456789abcdef";
  char sfx[40] = "d:";
  for (int i = 0; i < 16; i++) {
    sfx[2 + 2 * i] = hex[c->digest[i] >> 4];
    sfx[3 + 2 * i] = hex[c->digest[i] & 15];
  }
  sfx[34] = 0;
  key_of(f, c->tenant, sfx, out);
}

/* GCRA lane arguments: interval in microseconds and burst ("0" when the lane is off).
 * A tenant's limit changes rarely and hooks come in runs per tenant, so the text of the
 * last limit seen is kept (fleet thread only). */
static void lane_args(ak_fleet_t *f, const ak_ratelimit_t *l, char iv[2][32], char burst[2][32]) {
  if (f->lane_cached && memcmp(&f->lane_lim, l, sizeof *l) == 0) {
    memcpy(iv, f->lane_iv, sizeof f->lane_iv);
    memcpy(burst, f->lane_burst, sizeof f->lane_burst);
    return;
  }
  const ak_rate_t *r[2] = {&l->hooks, &l->bytes};
  for (int i = 0; i < 2; i++) {
    if (r[i]->rate > 0) {
      snprintf(iv[i], 32, "%.6f", 1e6 / r[i]->rate);
      snprintf(burst[i], 32, "%" PRId64, r[i]->burst);
    } else {
      snprintf(iv[i], 32, "0");
      snprintf(burst[i], 32, "0");
    }
  }
  f->lane_lim = *l;
  memcpy(f->lane_iv, iv, sizeof f->lane_iv);
  memcpy(f->lane_burst, burst, sizeof f->lane_burst);
  f->lane_cached = true;
}

/* Decimal text of v into out (at least 21 bytes); its length. */
static size_t utoa(uint64_t v, char *out) {
  char t[24];
  size_t n = 0;
  do t[n++] = (char)('0' + v % 10);
  while ((v /= 10));
  for (size_t i = 0; i < n; i++) out[i] = t[n - 1 - i];
  out[n] = 0;
  return n;
}

static void send_call(ak_fleet_t *f, ak_fleet_call_t *c) {
  if (ak_mono_ns() >= c->deadline_ns) {
    complete(f, c, C_TIMEOUT);
    return;
  }
  if (ak_redis_state(f->redis) != AK_REDIS_UP) {
    complete(f, c, C_UNAVAILABLE);
    return;
  }
  char kh[KEY_MAX], kb[KEY_MAX], kd[KEY_MAX], what[2], iv[2][32], burst[2][32], bytes[24];
  size_t lh_ = key_of(f, c->tenant, "h", kh), lb_ = key_of(f, c->tenant, "b", kb);
  if (c->claim) claim_key(f, c, kd);
  else key_of(f, c->tenant, "-", kd);
  bool lh = c->charge && c->lim.hooks.rate > 0, lb = c->charge && c->lim.bytes.rate > 0;
  what[0] = (char)('0' + ((lh ? 1 : 0) | (lb ? 2 : 0) | (c->claim ? 4 : 0)));
  what[1] = 0;
  if (c->charge) {
    lane_args(f, &c->lim, iv, burst);
  } else {
    memcpy(iv, (char[2][32]){"0", "0"}, sizeof iv);
    memcpy(burst, (char[2][32]){"0", "0"}, sizeof burst);
  }
  size_t bl = utoa(c->bytes, bytes);
  const char *argv[] = {"EVALSHA", f->sha_admit, "3", kh, kb, kd, what, iv[0], burst[0], iv[1], burst[1], bytes,
                        c->token, f->pending_ttl};
  size_t lens[] = {7, 40, 1, lh_, lb_, strlen(kd), 1, strlen(iv[0]), strlen(burst[0]), strlen(iv[1]),
                   strlen(burst[1]), bl, strlen(c->token), strlen(f->pending_ttl)};
  wire_t *w = calloc(1, sizeof *w);
  if (!w) {
    complete(f, c, C_UNAVAILABLE);
    return;
  }
  w->f = f;
  w->call = c;
  if (ak_redis_command(f->redis, (int)(sizeof argv / sizeof argv[0]), argv, lens, on_admit_reply, w) != 0) {
    free(w);
    complete(f, c, C_UNAVAILABLE);
    return;
  }
  c->sent = true;
  w->prev = f->out_tail;
  if (f->out_tail) f->out_tail->next = w;
  else f->out_head = w;
  f->out_tail = w;
}

static void on_deadline(uv_timer_t *t) {
  ak_fleet_t *f = t->data;
  int64_t now = ak_mono_ns();
  while (f->out_head && f->out_head->call->deadline_ns <= now) {
    wire_t *w = f->out_head;
    ak_fleet_call_t *c = w->call;
    out_unlink(f, w);
    w->call = NULL; /* the reply, when it comes, frees the slot */
    complete(f, c, C_TIMEOUT);
  }
  arm_deadline(f);
}

static void take_calls(ak_fleet_t *f) {
  ak_fleet_call_t *c = atomic_exchange(&f->calls, NULL), *fifo = NULL;
  while (c) { /* newest first: reverse into submission order */
    ak_fleet_call_t *n = c->next;
    c->next = fifo;
    fifo = c;
    c = n;
  }
  bool had = f->out_head != NULL;
  for (c = fifo; c;) {
    ak_fleet_call_t *n = c->next;
    c->next = NULL;
    send_call(f, c);
    c = n;
  }
  ak_redis_flush(f->redis);
  if (!had) arm_deadline(f);
}

/* ---- settles ---- */

static void on_settle_reply(void *priv, redisReply *r) {
  ak_fleet_t *f = priv;
  bool ok = r && r->type != REDIS_REPLY_ERROR;
  ak_counter_add(f->m_settles[ok ? S_OK : S_ERROR], 1);
}

static void op_free(op_t *o);

/* One forget, release or refund: a script call of its own (rare: a refused or failed
 * hook, a changed limit). */
static void send_op(ak_fleet_t *f, op_t *o) {
  if (ak_redis_state(f->redis) != AK_REDIS_UP) {
    ak_counter_add(f->m_settles[S_ERROR], 1);
    return;
  }
  char kh[KEY_MAX], kb[KEY_MAX], kd[KEY_MAX];
  if (o->kind == OP_FORGET) {
    size_t lh = key_of(f, o->tenant, "h", kh), lb = key_of(f, o->tenant, "b", kb);
    const char *argv[] = {"DEL", kh, kb};
    size_t lens[] = {3, lh, lb};
    if (ak_redis_command(f->redis, 3, argv, lens, on_settle_reply, f) != 0) ak_counter_add(f->m_settles[S_ERROR], 1);
    return;
  }
  ak_fleet_call_t *c = o->call;
  char what[4], ttl[24], iv[2][32], burst[2][32], bytes[24];
  if (c->claim) claim_key(f, c, kd);
  else key_of(f, c->tenant, "-", kd);
  key_of(f, c->tenant, "h", kh);
  key_of(f, c->tenant, "b", kb);
  /* a quota charge is given back only when the store answered that it took it */
  bool refund = !o->promote && c->charge && c->verdict == AK_FLEET_ADMITTED;
  int w = o->promote ? (c->claim ? 1 : 0) : (c->claim ? 2 : 0);
  if (refund && c->lim.hooks.rate > 0) w |= 4;
  if (refund && c->lim.bytes.rate > 0) w |= 8;
  if (w == 0) return;
  snprintf(what, sizeof what, "%d", w);
  utoa((uint64_t)(c->ttl_ms > 0 ? c->ttl_ms : 1), ttl);
  lane_args(f, &c->lim, iv, burst);
  utoa(c->bytes, bytes);
  const char *argv[] = {"EVALSHA", f->sha_settle, "3", kd, kh, kb, what, c->token, o->id, ttl, iv[0], burst[0],
                        iv[1], burst[1], bytes};
  size_t n = sizeof argv / sizeof argv[0], lens[sizeof argv / sizeof argv[0]];
  for (size_t i = 0; i < n; i++) lens[i] = strlen(argv[i]);
  if (ak_redis_command(f->redis, (int)n, argv, lens, on_settle_reply, f) != 0) ak_counter_add(f->m_settles[S_ERROR], 1);
}

/* Promotes, the settle of nearly every hook: PROMOTE_BATCH of them in one script call
 * (a key and three arguments each), one reply for the lot. */
#define PROMOTE_BATCH 128

typedef struct promote_batch {
  size_t n;
  const char *argv[3 + PROMOTE_BATCH * 4];
  size_t lens[3 + PROMOTE_BATCH * 4];
  char keys[PROMOTE_BATCH][KEY_MAX];
  char ttls[PROMOTE_BATCH][24];
} promote_batch_t;

static void on_promotes_reply(void *priv, redisReply *r) {
  ak_fleet_t *f = priv;
  bool ok = r && r->type == REDIS_REPLY_INTEGER;
  ak_counter_add(f->m_settles[ok ? S_OK : S_ERROR], ok ? (uint64_t)r->integer : 1);
}

static void promotes_flush(ak_fleet_t *f, promote_batch_t *b, op_t **held) {
  if (b->n > 0) {
    char nk[24];
    b->argv[0] = "EVALSHA";
    b->lens[0] = 7;
    b->argv[1] = f->sha_promote;
    b->lens[1] = 40;
    b->lens[2] = utoa(b->n, nk);
    b->argv[2] = nk;
    /* KEYS first, then the arguments: the batch kept them apart */
    const char *argv[3 + PROMOTE_BATCH * 4];
    size_t lens[3 + PROMOTE_BATCH * 4];
    memcpy(argv, b->argv, 3 * sizeof *argv);
    memcpy(lens, b->lens, 3 * sizeof *lens);
    for (size_t i = 0; i < b->n; i++) {
      argv[3 + i] = b->argv[3 + i];
      lens[3 + i] = b->lens[3 + i];
    }
    for (size_t i = 0; i < 3 * b->n; i++) {
      argv[3 + b->n + i] = b->argv[3 + PROMOTE_BATCH + i];
      lens[3 + b->n + i] = b->lens[3 + PROMOTE_BATCH + i];
    }
    if (ak_redis_state(f->redis) != AK_REDIS_UP ||
        ak_redis_command(f->redis, (int)(3 + 4 * b->n), argv, lens, on_promotes_reply, f) != 0)
      ak_counter_add(f->m_settles[S_ERROR], b->n);
  }
  b->n = 0;
  while (*held) { /* the argument strings lived in these ops until the command was formatted */
    op_t *o = *held;
    *held = o->next;
    op_free(o);
  }
}

static void promote_add(ak_fleet_t *f, promote_batch_t *b, op_t *o) {
  ak_fleet_call_t *c = o->call;
  size_t i = b->n++;
  claim_key(f, c, b->keys[i]);
  b->argv[3 + i] = b->keys[i];
  b->lens[3 + i] = strlen(b->keys[i]);
  const char **a = &b->argv[3 + PROMOTE_BATCH + 3 * i];
  size_t *l = &b->lens[3 + PROMOTE_BATCH + 3 * i];
  a[0] = c->token;
  l[0] = strlen(c->token);
  a[1] = o->id;
  l[1] = AK_UUID_STR_LEN - 1;
  l[2] = utoa((uint64_t)(c->ttl_ms > 0 ? c->ttl_ms : 1), b->ttls[i]);
  a[2] = b->ttls[i];
}

static void op_free(op_t *o) {
  if (o->kind == OP_SETTLE) free(o->call);
  free(o);
}

static void on_settle_timer(uv_timer_t *t);

static void drain_ops(ak_fleet_t *f) {
  op_t *o = atomic_exchange(&f->ops, NULL), *fifo = NULL;
  int64_t n = 0;
  while (o) {
    op_t *nx = o->next;
    o->next = fifo;
    fifo = o;
    o = nx;
    n++;
  }
  int64_t left = atomic_fetch_sub(&f->nops, n) - n;
  op_t *held = NULL;
  for (o = fifo; o;) {
    op_t *nx = o->next;
    if (o->kind == OP_SETTLE && o->promote && o->call->claim) {
      promote_add(f, f->pb, o);
      o->next = held;
      held = o;
      if (f->pb->n == PROMOTE_BATCH) promotes_flush(f, f->pb, &held);
    } else {
      send_op(f, o);
      op_free(o);
    }
    o = nx;
  }
  promotes_flush(f, f->pb, &held);
  ak_redis_flush(f->redis);
  ak_gauge_set(f->m_settle_queue, (double)(left > 0 ? left : 0));
  /* an op pushed while this drain ran (its count seen above) waits for the next turn */
  if (left > 0 && !uv_is_active((uv_handle_t *)&f->settle_t))
    uv_timer_start(&f->settle_t, on_settle_timer, (uint64_t)f->settle_interval_ms, 0);
}

static void on_settle_timer(uv_timer_t *t) { drain_ops(t->data); }

static void on_wake(uv_async_t *a) {
  ak_fleet_t *f = a->data;
  if (atomic_load(&f->stopping)) {
    uv_stop(&f->loop);
    return;
  }
  take_calls(f);
  if (atomic_load(&f->nops) > 0 && !uv_is_active((uv_handle_t *)&f->settle_t))
    uv_timer_start(&f->settle_t, on_settle_timer, (uint64_t)f->settle_interval_ms, 0);
}

/* Once a second: the degraded gauges (the breaker may have moved on another thread), the
 * settle queue's depth, and the warning while a kind is answered node-local. */
static void on_tick(uv_timer_t *t) {
  ak_fleet_t *f = t->data;
  degraded_refresh(f);
  ak_gauge_set(f->m_breaker, ak_fbreaker_state(&f->br));
  int64_t q = atomic_load(&f->nops);
  ak_gauge_set(f->m_settle_queue, (double)(q > 0 ? q : 0));
  bool deg = false;
  for (int k = 0; k < K_COUNT; k++) deg = deg || (f->m_degraded[k] && ak_gauge_get(f->m_degraded[k]) > 0);
  int64_t now = now_ms();
  if (deg && (f->last_warn_ms == 0 || now - f->last_warn_ms >= 60000)) {
    f->last_warn_ms = now;
    ak_log(AK_LOG_WARNING, "fleet", "hooks are admitted node-local: the fleet store does not answer",
           "store=\"%s\" breaker=%s connection=%s", f->addr, ak_fbreaker_state_name(ak_fbreaker_state(&f->br)),
           atomic_load(&f->conn) == AK_REDIS_UP ? "up" : atomic_load(&f->conn) == AK_REDIS_CONNECTING ? "connecting"
                                                                                                  : "down");
  } else if (!deg) {
    f->last_warn_ms = 0;
  }
}

static void on_conn_state(void *ctx, ak_redis_state_t st, const char *why) {
  ak_fleet_t *f = ctx;
  int was = atomic_exchange(&f->conn, (int)st);
  if (st == AK_REDIS_UP && was != AK_REDIS_UP)
    ak_log(AK_LOG_INFO, "fleet", "connected to the fleet store", "store=\"%s\"", f->addr);
  else if (st == AK_REDIS_DOWN && was == AK_REDIS_UP)
    ak_log(AK_LOG_WARNING, "fleet", "lost the fleet store", "store=\"%s\" reason=\"%s\"", f->addr, why ? why : "?");
}

static void close_walk(uv_handle_t *h, void *arg) {
  (void)arg;
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

static void *fleet_main(void *arg) {
  ak_fleet_t *f = arg;
  pthread_setname_np(pthread_self(), "ak-fleet");
  ak_redis_start(f->redis);
  uv_timer_start(&f->tick_t, on_tick, 1000, 1000);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  /* stopping: what is queued goes out, and its replies get a short while */
  take_calls(f);
  drain_ops(f);
  int64_t until = ak_mono_ns() + 500 * 1000000LL;
  while (ak_redis_pending(f->redis) > 0 && ak_redis_state(f->redis) == AK_REDIS_UP && ak_mono_ns() < until)
    uv_run(&f->loop, UV_RUN_ONCE);
  ak_redis_free(f->redis); /* every pending call gets its NULL reply: answered node-local */
  f->redis = NULL;
  while (f->out_head) { /* never happens after the edge stopped; never strand a caller */
    wire_t *w = f->out_head;
    ak_fleet_call_t *c = w->call;
    out_unlink(f, w);
    w->call = NULL;
    complete(f, c, C_UNAVAILABLE);
  }
  uv_walk(&f->loop, close_walk, NULL);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  return NULL;
}

/* ---------------------------------------------------------- the request side ---- */

bool ak_fleet_begin(ak_fleet_t *f, ak_fleet_call_t *c) {
  c->sent = false;
  c->probe = false;
  c->verdict = AK_FLEET_LOCAL;
  c->next = NULL;
  int64_t t = ak_mono_ns();
  ak_fb_ask_t a = atomic_load(&f->stopping) ? AK_FB_SKIP : ak_fbreaker_ask(&f->br, t / 1000000);
  if (a == AK_FB_SKIP) {
    count_fallback(f, c);
    return false;
  }
  if (a == AK_FB_PROBE) {
    c->probe = true;
    ak_counter_add(f->m_transitions[AK_FB_PROBING], 1);
  }
  /* the token: this node's random 32 bits and a 48-bit sequence, 20 hex digits */
  static const char hex[] = "0123456789abcdef";
  uint64_t seq = atomic_fetch_add(&f->token_seq, 1), node = f->token_node;
  for (int i = 0; i < 8; i++) c->token[i] = hex[(node >> (28 - 4 * i)) & 15];
  for (int i = 0; i < 12; i++) c->token[8 + i] = hex[(seq >> (44 - 4 * i)) & 15];
  c->token[20] = 0;
  c->t0_ns = t;
  c->deadline_ns = t + f->timeout_ns;
  return true;
}

void ak_fleet_send(ak_fleet_t *f, ak_fleet_call_t *c) {
  ak_fleet_call_t *head = atomic_load(&f->calls);
  do c->next = head;
  while (!atomic_compare_exchange_weak(&f->calls, &head, c));
  uv_async_send(&f->wake);
}

static void push_op(ak_fleet_t *f, op_t *o) {
  int64_t prev = atomic_fetch_add(&f->nops, 1);
  if (prev >= f->settle_max || atomic_load(&f->stopping)) {
    atomic_fetch_sub(&f->nops, 1);
    ak_counter_add(f->m_settle_dropped, 1);
    op_free(o);
    return;
  }
  op_t *head = atomic_load(&f->ops);
  do o->next = head;
  while (!atomic_compare_exchange_weak(&f->ops, &head, o));
  if (prev == 0) uv_async_send(&f->wake);
}

void ak_fleet_settle(ak_fleet_t *f, ak_fleet_call_t *c, const uint8_t *id) {
  if (!c) return;
  /* only a call the store may have acted on leaves something to settle: an admission
   * (a claim, a charge), or a call whose answer never came (it may have run) */
  bool acted = c->sent && (c->verdict == AK_FLEET_ADMITTED || c->verdict == AK_FLEET_LOCAL);
  bool work = acted && (c->claim || (!id && c->charge && c->verdict == AK_FLEET_ADMITTED));
  op_t *o = work && f ? calloc(1, sizeof *o) : NULL;
  if (!o) {
    free(c);
    return;
  }
  o->kind = OP_SETTLE;
  o->call = c;
  o->promote = id != NULL;
  if (id) ak_uuid_format(id, o->id);
  push_op(f, o);
}

void ak_fleet_forget(ak_fleet_t *f, const char *tenant, size_t tenant_len) {
  if (!f || !f->cfg->rate_scope || tenant_len == 0 || tenant_len > 64) return;
  op_t *o = calloc(1, sizeof *o);
  if (!o) return;
  o->kind = OP_FORGET;
  memcpy(o->tenant, tenant, tenant_len);
  push_op(f, o);
}

/* ------------------------------------------------------------------ admin view ---- */

json_t *ak_fleet_json(const ak_fleet_t *f, const ak_config_t *cfg) {
  const ak_fleet_cfg_t *fc = ak_config_of(cfg, &ak_mod_fleet);
  json_t *j = json_object();
  json_object_set_new(j, "rate_limits_scope", json_string(fc && fc->rate_scope ? "fleet" : "node"));
  json_object_set_new(j, "dedupe_scope", json_string(fc && fc->dedupe_scope ? "fleet" : "node"));
  json_t *deg = json_array();
  if (!f) {
    json_object_set_new(j, "store", json_null());
    json_object_set_new(j, "connection", json_null());
    json_object_set_new(j, "breaker", json_null());
    json_object_set_new(j, "degraded", deg);
    json_object_set_new(j, "settle_queue", json_integer(0));
    json_object_set_new(j, "settle_queue_max", json_integer(DEFAULT_SETTLE_MAX));
    return j;
  }
  int conn = atomic_load(&((ak_fleet_t *)f)->conn);
  ak_fb_state_t bs = ak_fbreaker_state(&f->br);
  json_object_set_new(j, "store", json_string(f->addr));
  json_object_set_new(j, "connection",
                      json_string(conn == AK_REDIS_UP ? "up" : conn == AK_REDIS_CONNECTING ? "connecting" : "down"));
  json_object_set_new(j, "breaker", json_string(ak_fbreaker_state_name(bs)));
  bool scope[K_COUNT] = {f->cfg->rate_scope, f->cfg->dedupe_scope};
  for (int k = 0; k < K_COUNT; k++)
    if (scope[k] && (bs != AK_FB_CLOSED || atomic_load(&((ak_fleet_t *)f)->last_failed[k])))
      json_array_append_new(deg, json_string(kind_names[k]));
  json_object_set_new(j, "degraded", deg);
  int64_t q = atomic_load(&((ak_fleet_t *)f)->nops);
  json_object_set_new(j, "settle_queue", json_integer(q > 0 ? q : 0));
  json_object_set_new(j, "settle_queue_max", json_integer(f->settle_max));
  return j;
}

/* ------------------------------------------------------------------ the module ---- */

/* Defaults, and why:
 *   timeout_ms 50: a store on the same network answers in well under a millisecond, and
 *     under load in a few; 50 ms is far above that and still small next to a provider's
 *     own timeout (seconds), so a stalled store costs each hook at most a blink.
 *   breaker 50 % of at least 20 calls in 10 s: a few stray timeouts do not open it, a
 *     store that is down opens it within the first 20 hooks.
 *   breaker_open_ms 5000: one probe per 5 s is no load on a store that is coming back.
 *   pending_ttl_ms 30000: twice the 15 s a record may wait to start committing, so a
 *     claim outlives any commit it guards and a crashed node's claim frees itself. */
static const ak_opt_t fleet_store_rows[] = {
  {.key = "url", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_SECRET | AK_OPTF_HAS_MIN,
   .env = "ANKUSA_FLEET_STORE_URL",
   .doc = "the shared Redis: redis://[:password@]host[:port][/db] (rediss:// is not supported by this build)",
   AK_AT(ak_fleet_cfg_t, store.url)},
  {.key = "password", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_SECRET | AK_OPTF_HAS_MIN,
   .env = "ANKUSA_FLEET_STORE_PASSWORD", .doc = "the store's password, when not in the url (the url's wins)",
   AK_AT(ak_fleet_cfg_t, store.password)},
  {.key = "namespace", .type = AK_OPT_STRING, .def = DEFAULT_NAMESPACE, .min = 1, .max = 100,
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX, .env = "ANKUSA_FLEET_STORE_NAMESPACE",
   .doc = "prefix of every key; nodes that share a limit share it", AK_AT(ak_fleet_cfg_t, store.ns)},
  {0},
};

static const ak_opt_t fleet_rows[] = {
  {.key = "store", .type = AK_OPT_MAP, .children = fleet_store_rows, .doc = "where fleet-scoped state is counted",
   AK_AT(ak_fleet_cfg_t, store)},
  {.key = "timeout_ms", .type = AK_OPT_INT, .def = "50", .min = 1, .max = 10000,
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX, .env = "ANKUSA_FLEET_TIMEOUT_MS",
   .doc = "hard budget of one hook's store call; past it the hook is admitted node-local",
   AK_AT(ak_fleet_cfg_t, timeout_ms)},
  {.key = "breaker_failure_rate", .type = AK_OPT_NUMBER, .def = "0.5", .env = "ANKUSA_FLEET_BREAKER_FAILURE_RATE",
   .doc = "share of failed calls in a window that opens the breaker (0 < rate <= 1)",
   AK_AT(ak_fleet_cfg_t, breaker_failure_rate)},
  {.key = "breaker_min_calls", .type = AK_OPT_INT, .def = "20", .min = 1, .max = 1000000,
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX, .env = "ANKUSA_FLEET_BREAKER_MIN_CALLS",
   .doc = "calls a window needs before its failure rate counts", AK_AT(ak_fleet_cfg_t, breaker_min_calls)},
  {.key = "breaker_window_ms", .type = AK_OPT_INT, .def = "10000", .min = 100, .flags = AK_OPTF_HAS_MIN,
   .env = "ANKUSA_FLEET_BREAKER_WINDOW_MS", .doc = "the breaker's counting window",
   AK_AT(ak_fleet_cfg_t, breaker_window_ms)},
  {.key = "breaker_open_ms", .type = AK_OPT_INT, .def = "5000", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .env = "ANKUSA_FLEET_BREAKER_OPEN_MS", .doc = "how long an open breaker admits node-local before one probe",
   AK_AT(ak_fleet_cfg_t, breaker_open_ms)},
  {.key = "pending_ttl_ms", .type = AK_OPT_INT, .def = "30000", .min = 1000, .flags = AK_OPTF_HAS_MIN,
   .env = "ANKUSA_FLEET_PENDING_TTL_MS",
   .doc = "life of an event claim not yet settled (a lost settle, a crashed node)",
   AK_AT(ak_fleet_cfg_t, pending_ttl_ms)},
  {0},
};

static bool scope_is_fleet(const json_t *root, const char *section) {
  const json_t *v = json_object_get(json_object_get(root, section), "scope");
  return json_is_string(v) && strcmp(json_string_value(v), "fleet") == 0;
}

static void fleet_check(ak_check_t *c, json_t *sec, json_t *root) {
  bool want = scope_is_fleet(root, "rate_limits") || scope_is_fleet(root, "dedupe");
  const json_t *st = json_object_get(sec, "store");
  const json_t *url = json_object_get(st, "url");
  if (json_is_string(url)) {
    ak_redis_url_t u;
    char why[160];
    if (ak_redis_url_parse(json_string_value(url), &u, why, sizeof why) != 0)
      ak_check_error(c, "fleet.store.url: %s", why);
  } else if (want) {
    ak_check_error(c, "fleet.store.url: required when rate_limits.scope or dedupe.scope is fleet");
  }
  const json_t *r = json_object_get(sec, "breaker_failure_rate");
  if (json_is_number(r) && !(json_number_value(r) > 0 && json_number_value(r) <= 1))
    ak_check_error(c, "fleet.breaker_failure_rate: must be > 0 and <= 1");
}

static int fleet_finish(void *typed, const json_t *section, const json_t *root, char **err) {
  (void)section;
  (void)err;
  ak_fleet_cfg_t *fc = typed;
  fc->rate_scope = scope_is_fleet(root, "rate_limits");
  fc->dedupe_scope = scope_is_fleet(root, "dedupe");
  return 0;
}

static int64_t test_env(const char *name, int64_t def) {
#ifdef AK_TEST_HOOKS
  const char *v = getenv(name);
  if (v && *v) {
    long long n = atoll(v);
    if (n > 0) return n;
  }
#else
  (void)name;
#endif
  return def;
}

static void fleet_free(ak_fleet_t *f) {
  if (!f) return;
  free(f->pb);
  OPENSSL_cleanse(&f->url, sizeof f->url); /* the password */
  free(f);
}

static int fleet_open(ak_instance_t *inst, char **err) {
  const ak_fleet_cfg_t *fc = ak_config_of(inst->cfg, &ak_mod_fleet);
  if (!fc || (!fc->rate_scope && !fc->dedupe_scope)) {
    if (fc && fc->store.url)
      ak_log(AK_LOG_INFO, "fleet", "fleet.store.url is set but no scope is fleet: admission is node-local", NULL);
    return 0;
  }
  ak_fleet_t *f = calloc(1, sizeof *f);
  if (!f) {
    *err = strdup("out of memory");
    return AK_MODULE_FAILED;
  }
  f->inst = inst;
  f->cfg = fc;
  char why[160];
  if (ak_redis_url_parse(fc->store.url, &f->url, why, sizeof why) != 0) { /* the check refused it already */
    free(f);
    if (asprintf(err, "fleet.store.url: %s", why) < 0) *err = NULL;
    return AK_MODULE_BAD_CONFIG;
  }
  if (!f->url.password[0] && fc->store.password) snprintf(f->url.password, sizeof f->url.password, "%s", fc->store.password);
  ak_redis_url_redacted(&f->url, f->addr, sizeof f->addr);
  f->ns = fc->store.ns ? fc->store.ns : DEFAULT_NAMESPACE;
  f->ns_len = strlen(f->ns);
  utoa((uint64_t)fc->pending_ttl_ms, f->pending_ttl);
  f->pb = calloc(1, sizeof *f->pb);
  if (!f->pb) {
    free(f);
    *err = strdup("out of memory");
    return AK_MODULE_FAILED;
  }
  f->timeout_ns = fc->timeout_ms * 1000000LL;
  ak_fbreaker_init(&f->br, fc->breaker_failure_rate, fc->breaker_min_calls, fc->breaker_window_ms,
                   fc->breaker_open_ms);
  f->settle_max = test_env("ANKUSA_TEST_FLEET_SETTLE_MAX", DEFAULT_SETTLE_MAX);
  f->settle_interval_ms = test_env("ANKUSA_TEST_FLEET_SETTLE_INTERVAL_MS", DEFAULT_SETTLE_INTERVAL_MS);
  if (RAND_bytes((unsigned char *)&f->token_node, sizeof f->token_node) != 1) f->token_node = (uint32_t)time(NULL);
  sha1_hex(admit_lua, f->sha_admit);
  sha1_hex(settle_lua, f->sha_settle);
  sha1_hex(promote_lua, f->sha_promote);

  ak_metrics_t *m = inst->metrics;
  const char *const kl[] = {"instance", "kind", NULL}, *const rl[] = {"instance", "result", NULL},
                    *const sl[] = {"instance", "state", NULL};
  ak_family_t *fdeg = ak_metrics_family(m, "ankusa_fleet_limiter_degraded",
                                        "1 while hooks of this kind are admitted node-local (breaker open or the "
                                        "last call failed)", AK_METRIC_GAUGE, kl, NULL, 0);
  ak_family_t *ffb = ak_metrics_family(m, "ankusa_fleet_fallback_total",
                                       "hooks admitted node-local because the fleet store did not answer",
                                       AK_METRIC_COUNTER, kl, NULL, 0);
  bool scope[K_COUNT] = {fc->rate_scope, fc->dedupe_scope};
  for (int k = 0; k < K_COUNT; k++) {
    const char *v[] = {inst->name, kind_names[k]};
    f->m_fallback[k] = ak_metrics_series(ffb, v);
    f->m_degraded[k] = scope[k] ? ak_metrics_series(fdeg, v) : NULL;
  }
  ak_family_t *fcalls = ak_metrics_family(m, "ankusa_fleet_calls_total", "admission calls to the fleet store",
                                          AK_METRIC_COUNTER, rl, NULL, 0);
  for (int i = 0; i < C_COUNT; i++) {
    const char *v[] = {inst->name, call_results[i]};
    f->m_calls[i] = ak_metrics_series(fcalls, v);
  }
  ak_family_t *fset = ak_metrics_family(m, "ankusa_fleet_settles_total",
                                        "claim settles (promote, release) and bucket resets sent to the fleet store",
                                        AK_METRIC_COUNTER, rl, NULL, 0);
  for (int i = 0; i < S_COUNT; i++) {
    const char *v[] = {inst->name, settle_results[i]};
    f->m_settles[i] = ak_metrics_series(fset, v);
  }
  ak_family_t *ftr = ak_metrics_family(m, "ankusa_fleet_breaker_transitions_total",
                                       "the fleet breaker's moves, by the state it moved to", AK_METRIC_COUNTER, sl,
                                       NULL, 0);
  for (int s = 0; s < 3; s++) {
    const char *v[] = {inst->name, ak_fbreaker_state_name((ak_fb_state_t)s)};
    f->m_transitions[s] = ak_metrics_series(ftr, v);
  }
  f->m_breaker = ak_metrics_instance_series(m, inst->name, "ankusa_fleet_breaker_state",
                                            "the fleet breaker: 0 closed, 1 open, 2 probing", AK_METRIC_GAUGE);
  f->m_settle_dropped = ak_metrics_instance_series(m, inst->name, "ankusa_fleet_settle_dropped_total",
                                                   "settles dropped because the settle queue was full",
                                                   AK_METRIC_COUNTER);
  f->m_settle_queue = ak_metrics_instance_series(m, inst->name, "ankusa_fleet_settle_queue",
                                                 "settles waiting to be sent", AK_METRIC_GAUGE);
  static const double bounds[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25};
  const char *const il[] = {"instance", NULL};
  const char *iv[] = {inst->name};
  f->m_duration = ak_metrics_series(ak_metrics_family(m, "ankusa_fleet_call_duration_seconds",
                                                      "time from a hook's admission call to its verdict",
                                                      AK_METRIC_HISTOGRAM, il, bounds,
                                                      sizeof bounds / sizeof bounds[0]),
                                    iv);
  for (int k = 0; k < K_COUNT; k++)
    if (f->m_degraded[k]) ak_gauge_set(f->m_degraded[k], 0);

  if (uv_loop_init(&f->loop) != 0) {
    fleet_free(f);
    *err = strdup("fleet: cannot make its event loop");
    return AK_MODULE_FAILED;
  }
  uv_async_init(&f->loop, &f->wake, on_wake);
  f->wake.data = f;
  uv_timer_init(&f->loop, &f->deadline_t);
  uv_timer_init(&f->loop, &f->settle_t);
  uv_timer_init(&f->loop, &f->tick_t);
  f->deadline_t.data = f->settle_t.data = f->tick_t.data = f;
  const char *const load_admit[] = {"SCRIPT", "LOAD", admit_lua, NULL};
  const char *const load_settle[] = {"SCRIPT", "LOAD", settle_lua, NULL};
  const char *const load_promote[] = {"SCRIPT", "LOAD", promote_lua, NULL};
  const char *const *const init[] = {load_admit, load_settle, load_promote};
  long tmo = fc->timeout_ms * 20 < 2000 ? 2000 : fc->timeout_ms * 20;
  ak_redis_opts_t ro = {
    .url = &f->url, .connect_timeout_ms = tmo, .stall_timeout_ms = tmo, .backoff_min_ms = 100,
    .backoff_max_ms = 2000, .init_argv = init, .ninit = 3, .on_state = on_conn_state, .ctx = f,
  };
  f->redis = ak_redis_new(&f->loop, &ro);
  if (!f->redis) {
    uv_walk(&f->loop, close_walk, NULL);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    uv_loop_close(&f->loop);
    fleet_free(f);
    *err = strdup("out of memory");
    return AK_MODULE_FAILED;
  }
  inst->fleet = f;
  ak_log(AK_LOG_INFO, "fleet", "fleet-scoped admission", "store=\"%s\" rate_limits=%s dedupe=%s timeout_ms=%" PRId64,
         f->addr, fc->rate_scope ? "fleet" : "node", fc->dedupe_scope ? "fleet" : "node", fc->timeout_ms);
  return 0;
}

static int fleet_start(ak_instance_t *inst, char **err) {
  ak_fleet_t *f = inst->fleet;
  if (!f) return 0;
  if (pthread_create(&f->th, NULL, fleet_main, f) != 0) {
    *err = strdup("fleet: cannot start its thread");
    return AK_MODULE_FAILED;
  }
  f->started = true;
  return 0;
}

static void fleet_stop(ak_instance_t *inst) {
  ak_fleet_t *f = inst->fleet;
  if (!f || !f->started) return;
  atomic_store(&f->stopping, 1);
  uv_async_send(&f->wake);
  pthread_join(f->th, NULL);
  f->started = false;
}

static void fleet_close(ak_instance_t *inst) {
  ak_fleet_t *f = inst->fleet;
  if (!f) return;
  if (f->redis) { /* opened, never started */
    ak_redis_free(f->redis);
    f->redis = NULL;
    uv_walk(&f->loop, close_walk, NULL);
    uv_run(&f->loop, UV_RUN_DEFAULT);
  }
  /* settles that came after the thread stopped */
  op_t *o = atomic_exchange(&f->ops, NULL);
  while (o) {
    op_t *n = o->next;
    op_free(o);
    o = n;
  }
  uv_loop_close(&f->loop);
  inst->fleet = NULL;
  fleet_free(f);
}

const ak_module_t ak_mod_fleet = {
  .name = "fleet",
  .section = "fleet",
  .doc = "fleet-scoped admission: one tenant quota and one dedupe window across nodes, counted in Redis",
  .options = fleet_rows,
  .cfg_size = sizeof(ak_fleet_cfg_t),
  .check = fleet_check,
  .finish = fleet_finish,
  .roles = AK_ROLE_EDGE,
  .open = fleet_open,
  .start = fleet_start,
  .stop = fleet_stop,
  .close = fleet_close,
};
