/* The shared versioned hash in Redis (net/sharedkv.h): two blocking hiredis
 * connections with timeouts and the sync thread. A command that gets no answer drops its
 * connection (the next call reconnects), so a half-read reply never answers a later call. */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <hiredis/hiredis.h>
#include "net/sharedkv.h"
#include "core/clock.h"
#include "core/log.h"

#define CONNECT_TIMEOUT_MS 1000
#define COMMAND_TIMEOUT_MS 2000
#define POLL_MS 250          /* the sync thread looks at its stop flag at least this often */
#define RETRY_MS 1000        /* a failed load (or none yet) is tried again this soon */

struct ak_skv {
  ak_redis_url_t url;
  char addr[300];
  char what[64];
  char *k_items, *k_version, *k_channel;
  int64_t tick_ms;
  ak_skv_reload_fn reload;
  void *ctx;
  pthread_mutex_t mu;        /* cmd */
  redisContext *cmd;
  /* the sync thread's */
  redisContext *sub;
  pthread_t th;
  bool started;
  _Atomic bool stop;
  _Atomic bool poke;         /* ak_skv_reload_soon */
  bool have_last;
  uint64_t last;
  bool sub_down_logged;
};

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static char *cat3(const char *a, const char *b) {
  char *s = NULL;
  if (asprintf(&s, "%s%s", a, b) < 0) return NULL;
  return s;
}

ak_skv_t *ak_skv_new(const ak_redis_url_t *url, const char *what, const char *ns, int64_t tick_ms,
                     ak_skv_reload_fn reload, void *ctx) {
  ak_skv_t *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->url = *url;
  ak_redis_url_redacted(url, r->addr, sizeof r->addr);
  snprintf(r->what, sizeof r->what, "%s", what);
  r->k_items = cat3(ns, ":items");
  r->k_version = cat3(ns, ":version");
  r->k_channel = cat3(ns, ":changes");
  r->tick_ms = tick_ms > 0 ? tick_ms : 30000;
  r->reload = reload;
  r->ctx = ctx;
  pthread_mutex_init(&r->mu, NULL);
  if (!r->k_items || !r->k_version || !r->k_channel) {
    ak_skv_free(r);
    return NULL;
  }
  return r;
}

void ak_skv_stop(ak_skv_t *r) {
  if (!r || !r->started) return;
  atomic_store(&r->stop, true);
  pthread_join(r->th, NULL);
  r->started = false;
}

void ak_skv_free(ak_skv_t *r) {
  if (!r) return;
  ak_skv_stop(r);
  if (r->sub) redisFree(r->sub);
  if (r->cmd) redisFree(r->cmd);
  pthread_mutex_destroy(&r->mu);
  free(r->k_items);
  free(r->k_version);
  free(r->k_channel);
  explicit_bzero(&r->url, sizeof r->url);
  free(r);
}

const char *ak_skv_addr(const ak_skv_t *r) { return r->addr; }

/* ---------------------------------------------------------------- connections ---- */

static void tv_of(struct timeval *tv, long ms) {
  tv->tv_sec = ms / 1000;
  tv->tv_usec = (ms % 1000) * 1000;
}

/* A connection with AUTH and SELECT done. NULL with why (never the password). */
static redisContext *dial(const ak_skv_t *r, char *why, size_t wl) {
  struct timeval tv;
  tv_of(&tv, CONNECT_TIMEOUT_MS);
  redisContext *c = redisConnectWithTimeout(r->url.host, r->url.port, tv);
  if (!c || c->err) {
    snprintf(why, wl, "cannot connect to %s: %s", r->addr, c ? c->errstr : "out of memory");
    if (c) redisFree(c);
    return NULL;
  }
  tv_of(&tv, COMMAND_TIMEOUT_MS);
  redisSetTimeout(c, tv);
  if (r->url.password[0]) {
    redisReply *rep = r->url.user[0] ? redisCommand(c, "AUTH %s %s", r->url.user, r->url.password)
                                     : redisCommand(c, "AUTH %s", r->url.password);
    bool ok = rep && rep->type != REDIS_REPLY_ERROR;
    if (rep) freeReplyObject(rep);
    if (!ok) {
      snprintf(why, wl, "%s refused the credentials of %s", r->addr, r->what);
      redisFree(c);
      return NULL;
    }
  }
  if (r->url.db) {
    redisReply *rep = redisCommand(c, "SELECT %d", r->url.db);
    bool ok = rep && rep->type != REDIS_REPLY_ERROR;
    if (rep) freeReplyObject(rep);
    if (!ok) {
      snprintf(why, wl, "%s refused SELECT %d", r->addr, r->url.db);
      redisFree(c);
      return NULL;
    }
  }
  return c;
}

/* One command on the command connection (mu held). The reply (free it), or NULL with why:
 * the connection is dropped, and *sent says whether the command may have reached Redis.
 * A read (sent == NULL) that fails on a connection made earlier is tried once more on a
 * new one: a Redis restarted since the last command closed it. */
static redisReply *command(ak_skv_t *r, int argc, const char **argv, const size_t *lens, bool *sent,
                           char *why, size_t wl) {
  if (sent) *sent = false;
  for (int attempt = 0;; attempt++) {
    bool fresh = !r->cmd;
    if (!r->cmd && !(r->cmd = dial(r, why, wl))) return NULL;
    if (sent) *sent = true;
    redisReply *rep = redisCommandArgv(r->cmd, argc, argv, lens);
    if (rep) return rep;
    snprintf(why, wl, "%s: %s", r->addr, r->cmd->errstr[0] ? r->cmd->errstr : "no answer");
    redisFree(r->cmd);
    r->cmd = NULL;
    if (sent || fresh || attempt) return NULL;
  }
}

/* --------------------------------------------------------------------- reads ---- */

static const char fetch_lua[] =
  "return {redis.call('GET', KEYS[1]) or '0', redis.call('HGETALL', KEYS[2])}";

void ak_skv_rows_free(ak_skv_row_t *rows, size_t n) {
  for (size_t i = 0; i < n; i++) {
    free(rows[i].name);
    free(rows[i].row);
  }
  free(rows);
}

int ak_skv_fetch(ak_skv_t *r, uint64_t *version, ak_skv_row_t **rows, size_t *n, char *why,
                      size_t wl) {
  *rows = NULL;
  *n = 0;
  const char *argv[] = {"EVAL", fetch_lua, "2", r->k_version, r->k_items};
  pthread_mutex_lock(&r->mu);
  redisReply *rep = command(r, 5, argv, NULL, NULL, why, wl);
  pthread_mutex_unlock(&r->mu);
  if (!rep) return -1;
  int rc = -1;
  if (rep->type == REDIS_REPLY_ERROR) {
    snprintf(why, wl, "%s answered an error: %.200s", r->addr, rep->str);
  } else if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 || rep->element[0]->type != REDIS_REPLY_STRING ||
             rep->element[1]->type != REDIS_REPLY_ARRAY || rep->element[1]->elements % 2) {
    snprintf(why, wl, "%s: an unexpected answer to the read of %s", r->addr, r->k_items);
  } else {
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(rep->element[0]->str, &end, 10);
    redisReply *h = rep->element[1];
    size_t cnt = h->elements / 2;
    ak_skv_row_t *out = cnt ? calloc(cnt, sizeof *out) : NULL;
    if (errno || !end || *end) {
      snprintf(why, wl, "%s: %s is not a number", r->addr, r->k_version);
    } else if (cnt && !out) {
      snprintf(why, wl, "out of memory");
    } else {
      rc = 0;
      for (size_t i = 0; i < cnt && rc == 0; i++) {
        redisReply *k = h->element[2 * i], *val = h->element[2 * i + 1];
        out[i].name = strndup(k->str ? k->str : "", k->len);
        out[i].row = malloc(val->len + 1);
        if (!out[i].name || !out[i].row) {
          snprintf(why, wl, "out of memory");
          rc = -1;
          cnt = i + 1;
          break;
        }
        memcpy(out[i].row, val->str, val->len);
        out[i].row[val->len] = '\0';
        out[i].len = val->len;
      }
      if (rc == 0) {
        *rows = out;
        *n = cnt;
        *version = v;
      } else {
        ak_skv_rows_free(out, cnt);
      }
    }
  }
  freeReplyObject(rep);
  return rc;
}

int ak_skv_get(ak_skv_t *r, const char *name, char **row, size_t *len, char *why, size_t wl) {
  *row = NULL;
  *len = 0;
  const char *argv[] = {"HGET", r->k_items, name};
  pthread_mutex_lock(&r->mu);
  redisReply *rep = command(r, 3, argv, NULL, NULL, why, wl);
  pthread_mutex_unlock(&r->mu);
  if (!rep) return -1;
  int rc = 0;
  if (rep->type == REDIS_REPLY_STRING) {
    if ((*row = malloc(rep->len + 1))) {
      memcpy(*row, rep->str, rep->len);
      (*row)[rep->len] = '\0';
      *len = rep->len;
    } else {
      snprintf(why, wl, "out of memory");
      rc = -1;
    }
  } else if (rep->type != REDIS_REPLY_NIL) {
    snprintf(why, wl, "%s: an unexpected answer to HGET %s", r->addr, r->k_items);
    rc = -1;
  }
  freeReplyObject(rep);
  return rc;
}

/* -------------------------------------------------------------------- writes ---- */

/* KEYS: items, version. ARGV: name, tenant, expected revision (0: none), row ("" deletes),
 * channel. {0, version} written; {1, revision} another revision is stored; {2, tenant}
 * the name is another tenant's. */
static const char put_lua[] =
  "local cur = redis.call('HGET', KEYS[1], ARGV[1])\n"
  "local rev = 0\n"
  "if cur then\n"
  "  local ok, r = pcall(cjson.decode, cur)\n"
  "  if not ok or type(r) ~= 'table' then return {1, '-1'} end\n"
  "  if r['tenant'] ~= ARGV[2] then return {2, tostring(r['tenant'])} end\n"
  "  rev = tonumber(r['revision']) or -1\n"
  "end\n"
  "if rev ~= tonumber(ARGV[3]) then return {1, tostring(rev)} end\n"
  "if ARGV[4] == '' then redis.call('HDEL', KEYS[1], ARGV[1]) else redis.call('HSET', KEYS[1], ARGV[1], ARGV[4]) end\n"
  "local v = redis.call('INCR', KEYS[2])\n"
  "redis.call('PUBLISH', ARGV[5], tostring(v))\n"
  "return {0, tostring(v)}\n";

ak_skv_rc_t ak_skv_put(ak_skv_t *r, const char *name, const char *tenant, uint64_t expect,
                                 const char *row, size_t len, uint64_t *version, char *why, size_t wl) {
  char ex[24];
  snprintf(ex, sizeof ex, "%" PRIu64, expect);
  const char *argv[] = {"EVAL", put_lua, "2", r->k_items, r->k_version, name, tenant, ex, row ? row : "",
                        r->k_channel};
  size_t lens[10];
  for (int i = 0; i < 10; i++) lens[i] = argv[i] ? strlen(argv[i]) : 0;
  lens[8] = row ? len : 0;
  bool sent = false;
  pthread_mutex_lock(&r->mu);
  redisReply *rep = command(r, 10, argv, lens, &sent, why, wl);
  pthread_mutex_unlock(&r->mu);
  if (!rep) return sent ? AK_SKV_UNKNOWN : AK_SKV_DOWN;
  ak_skv_rc_t rc = AK_SKV_DOWN;
  if (rep->type == REDIS_REPLY_ERROR) {
    snprintf(why, wl, "%s answered an error: %.200s", r->addr, rep->str); /* the script failed: nothing written */
  } else if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 && rep->element[0]->type == REDIS_REPLY_INTEGER &&
             rep->element[1]->type == REDIS_REPLY_STRING) {
    long long what = rep->element[0]->integer;
    if (what == 0) {
      rc = AK_SKV_WRITTEN;
      if (version) *version = strtoull(rep->element[1]->str, NULL, 10);
    } else {
      rc = what == 2 ? AK_SKV_TAKEN : AK_SKV_CONFLICT;
      snprintf(why, wl, "%s", rep->element[1]->str);
    }
  } else {
    snprintf(why, wl, "%s: an unexpected answer to the write", r->addr);
    rc = AK_SKV_UNKNOWN;
  }
  freeReplyObject(rep);
  return rc;
}

/* KEYS: items, version. ARGV: name, has expected (0/1), expected row, row ("" deletes),
 * channel. {0, version} written; {1, ""} another row is stored. */
static const char put_if_lua[] =
  "local cur = redis.call('HGET', KEYS[1], ARGV[1])\n"
  "if ARGV[2] == '0' then\n"
  "  if cur then return {1, ''} end\n"
  "elseif cur ~= ARGV[3] then return {1, ''} end\n"
  "if ARGV[4] == '' then redis.call('HDEL', KEYS[1], ARGV[1]) else redis.call('HSET', KEYS[1], ARGV[1], ARGV[4]) end\n"
  "local v = redis.call('INCR', KEYS[2])\n"
  "redis.call('PUBLISH', ARGV[5], tostring(v))\n"
  "return {0, tostring(v)}\n";

ak_skv_rc_t ak_skv_put_if(ak_skv_t *r, const char *name, const char *expect, size_t elen, const char *row,
                          size_t len, uint64_t *version, char *why, size_t wl) {
  const char *argv[] = {"EVAL", put_if_lua, "2", r->k_items, r->k_version, name, expect ? "1" : "0",
                        expect ? expect : "", row ? row : "", r->k_channel};
  size_t lens[10];
  for (int i = 0; i < 10; i++) lens[i] = strlen(argv[i]);
  lens[7] = expect ? elen : 0;
  lens[8] = row ? len : 0;
  bool sent = false;
  pthread_mutex_lock(&r->mu);
  redisReply *rep = command(r, 10, argv, lens, &sent, why, wl);
  pthread_mutex_unlock(&r->mu);
  if (!rep) return sent ? AK_SKV_UNKNOWN : AK_SKV_DOWN;
  ak_skv_rc_t rc = AK_SKV_DOWN;
  if (rep->type == REDIS_REPLY_ERROR) {
    snprintf(why, wl, "%s answered an error: %.200s", r->addr, rep->str);
  } else if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 && rep->element[0]->type == REDIS_REPLY_INTEGER &&
             rep->element[1]->type == REDIS_REPLY_STRING) {
    if (rep->element[0]->integer == 0) {
      rc = AK_SKV_WRITTEN;
      if (version) *version = strtoull(rep->element[1]->str, NULL, 10);
    } else {
      rc = AK_SKV_CONFLICT;
      snprintf(why, wl, "%s: %s changed meanwhile", r->addr, name);
    }
  } else {
    snprintf(why, wl, "%s: an unexpected answer to the write", r->addr);
    rc = AK_SKV_UNKNOWN;
  }
  freeReplyObject(rep);
  return rc;
}

/* --------------------------------------------------------------- sync thread ---- */

static void do_reload(ak_skv_t *r) {
  uint64_t v = 0;
  if (r->reload(r->ctx, &v) == 0) {
    r->have_last = true;
    r->last = v;
  }
}

/* The version in Redis, compared with the one loaded. -1: not read. */
static int check_version(ak_skv_t *r) {
  const char *argv[] = {"GET", r->k_version};
  char why[400];
  pthread_mutex_lock(&r->mu);
  redisReply *rep = command(r, 2, argv, NULL, NULL, why, sizeof why);
  pthread_mutex_unlock(&r->mu);
  if (!rep) return -1;
  uint64_t v = rep->type == REDIS_REPLY_STRING ? strtoull(rep->str, NULL, 10) : 0;
  bool ok = rep->type == REDIS_REPLY_STRING || rep->type == REDIS_REPLY_NIL;
  freeReplyObject(rep);
  if (!ok) return -1;
  if (!r->have_last || v != r->last) do_reload(r);
  return 0;
}

static int sub_connect(ak_skv_t *r) {
  char why[400];
  r->sub = dial(r, why, sizeof why);
  if (r->sub) {
    redisReply *rep = redisCommand(r->sub, "SUBSCRIBE %s", r->k_channel);
    bool ok = rep && rep->type == REDIS_REPLY_ARRAY;
    if (rep) freeReplyObject(rep);
    if (!ok) {
      snprintf(why, sizeof why, "%s: SUBSCRIBE %s refused", r->addr, r->k_channel);
      redisFree(r->sub);
      r->sub = NULL;
    }
  }
  if (!r->sub) {
    if (!r->sub_down_logged)
      ak_log(AK_LOG_WARNING, "sharedkv", "a shared store's change channel is down: changes are read every tick",
             "store=%s reason=\"%s\"", r->what, why);
    r->sub_down_logged = true;
    return -1;
  }
  if (r->sub_down_logged)
    ak_log(AK_LOG_INFO, "sharedkv", "a shared store's change channel is back", "store=%s addr=%s", r->what, r->addr);
  r->sub_down_logged = false;
  return 0;
}

static void sub_drop(ak_skv_t *r) {
  redisFree(r->sub);
  r->sub = NULL;
}

static void *sync_main(void *arg) {
  ak_skv_t *r = arg;
  int64_t next_tick = 0, next_dial = 0;
  while (!atomic_load(&r->stop)) {
    int64_t now = mono_ms();
    if (atomic_exchange(&r->poke, false)) {
      r->have_last = false; /* the next check reloads whatever the version says */
      next_tick = now;
    }
    if (!r->sub && now >= next_dial) {
      if (sub_connect(r) == 0) next_tick = now; /* whatever was published meanwhile: read the version now */
      else next_dial = now + RETRY_MS;
    }
    if (now >= next_tick) {
      int rc = check_version(r);
      next_tick = now + (rc != 0 || !r->have_last ? (r->tick_ms < RETRY_MS ? r->tick_ms : RETRY_MS) : r->tick_ms);
    }
    if (!r->sub) {
      struct timespec ts = {0, POLL_MS * 1000000L};
      nanosleep(&ts, NULL);
      continue;
    }
    void *m = NULL;
    if (redisGetReplyFromReader(r->sub, &m) != REDIS_OK) {
      sub_drop(r);
      continue;
    }
    if (!m) {
      int64_t wait = next_tick - mono_ms();
      if (wait > POLL_MS) wait = POLL_MS;
      if (wait < 0) wait = 0;
      struct pollfd p = {.fd = r->sub->fd, .events = POLLIN};
      int pr = poll(&p, 1, (int)wait);
      if (pr > 0 && redisBufferRead(r->sub) != REDIS_OK) sub_drop(r);
      continue;
    }
    redisReply *rep = m;
    if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 3 && rep->element[2]->type == REDIS_REPLY_STRING &&
        rep->element[0]->type == REDIS_REPLY_STRING && !strcmp(rep->element[0]->str, "message")) {
      uint64_t v = strtoull(rep->element[2]->str, NULL, 10);
      if (!r->have_last || v != r->last) do_reload(r);
    }
    freeReplyObject(rep);
  }
  return NULL;
}

void ak_skv_reload_soon(ak_skv_t *r) { atomic_store(&r->poke, true); }

int ak_skv_start(ak_skv_t *r, bool have_last, uint64_t last) {
  r->have_last = have_last;
  r->last = last;
  if (pthread_create(&r->th, NULL, sync_main, r) != 0) return -1;
  r->started = true;
  return 0;
}
