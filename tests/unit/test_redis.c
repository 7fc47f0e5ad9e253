/* Unit tests: the Redis client (net/redis.h) against real redis-servers, each test
 * starting its own on a free loopback port and stopping it by its PID. The URL parser
 * (good forms, each error, TLS refused, no password in a why or the redacted form), a
 * pipelined burst in order, AUTH (good, user, wrong), SELECT, init commands, error
 * replies, a big binary value, the server killed (every command NULL exactly once, the
 * reconnect by itself), a stopped server given up on as stalled, reset, and free in
 * every state (pending commands, a resolve, a connect, a handshake nobody answers, from
 * inside a callback) with the loop closing clean after it. */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "net/redis.h"

#define REDIS_SERVER "/usr/bin/redis-server"

/* ---- servers ---------------------------------------------------------------------- */

#define MAX_SRV 4
static pid_t srv_pids[MAX_SRV]; /* what teardown stops if a test failed halfway */

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  cr_assert_geq(fd, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  socklen_t al = sizeof a;
  cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &al), 0);
  close(fd);
  return ntohs(a.sin_port);
}

/* The server answers a PING (or says NOAUTH): it is serving. */
static bool srv_answers(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  bool ok = false;
  if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0 && write(fd, "PING\r\n", 6) == 6) {
    char b[64];
    ok = read(fd, b, sizeof b) > 0;
  }
  close(fd);
  return ok;
}

static pid_t srv_start(int port, const char *pass) {
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* a test that dies takes its server along */
    int nul = open("/dev/null", O_RDWR);
    if (nul >= 0) {
      dup2(nul, 0);
      dup2(nul, 1);
      dup2(nul, 2);
    }
    const char *argv[20] = {REDIS_SERVER, "--port", ps, "--bind", "127.0.0.1", "--save", "",
                            "--appendonly", "no", "--daemonize", "no", "--dir", "/tmp"};
    int n = 13;
    if (pass) {
      argv[n++] = "--requirepass";
      argv[n++] = pass;
    }
    argv[n] = NULL;
    execv(REDIS_SERVER, (char *const *)argv);
    _exit(127);
  }
  for (int i = 0; i < MAX_SRV; i++)
    if (!srv_pids[i]) {
      srv_pids[i] = pid;
      break;
    }
  int64_t dl = mono_ms() + 10000;
  while (!srv_answers(port)) {
    int st;
    cr_assert_eq(waitpid(pid, &st, WNOHANG), 0, "redis-server exited at start");
    cr_assert_lt(mono_ms(), dl, "redis-server did not start");
    sleep_ms(10);
  }
  return pid;
}

static void srv_forget(pid_t pid) {
  for (int i = 0; i < MAX_SRV; i++)
    if (srv_pids[i] == pid) srv_pids[i] = 0;
}

static void srv_stop(pid_t pid) {
  kill(pid, SIGCONT);
  kill(pid, SIGTERM);
  waitpid(pid, NULL, 0);
  srv_forget(pid);
}

static void srv_kill9(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  srv_forget(pid);
}

/* ---- the loop --------------------------------------------------------------------- */

static uv_loop_t loop;
static uv_timer_t tick; /* keeps uv_run(UV_RUN_ONCE) coming back to look at the condition */

static void tick_cb(uv_timer_t *t) { (void)t; }

static void setup(void) {
  memset(srv_pids, 0, sizeof srv_pids);
  signal(SIGPIPE, SIG_IGN);
  cr_assert_eq(uv_loop_init(&loop), 0);
  uv_timer_init(&loop, &tick);
  uv_timer_start(&tick, tick_cb, 5, 5);
}

static void teardown(void) {
  for (int i = 0; i < MAX_SRV; i++)
    if (srv_pids[i]) srv_stop(srv_pids[i]);
}

TestSuite(redis, .init = setup, .fini = teardown, .timeout = 60);

#define RUN_UNTIL(cond, ms)                                                   \
  do {                                                                        \
    int64_t dl_ = mono_ms() + (ms);                                           \
    while (!(cond) && mono_ms() < dl_) uv_run(&loop, UV_RUN_ONCE);            \
  } while (0)

static void run_for(int ms) {
  int64_t dl = mono_ms() + ms;
  while (mono_ms() < dl) uv_run(&loop, UV_RUN_ONCE);
}

static void walk_cb(uv_handle_t *h, void *arg) {
  (void)arg;
  fprintf(stderr, "handle left: %s\n", uv_handle_type_name(h->type));
}

/* Frees the client, and the loop must then run dry and close: no handle or request of
 * the client is left behind. */
static void finish(ak_redis_t *r) {
  if (r) ak_redis_free(r);
  uv_close((uv_handle_t *)&tick, NULL);
  int64_t t0 = mono_ms();
  uv_run(&loop, UV_RUN_DEFAULT);
  cr_assert_lt(mono_ms() - t0, 5000);
  int rc = uv_loop_close(&loop);
  if (rc != 0) uv_walk(&loop, walk_cb, NULL);
  cr_assert_eq(rc, 0, "the loop still has handles after ak_redis_free");
}

/* ---- the client ------------------------------------------------------------------- */

typedef struct {
  int ups, downs, connectings;
  ak_redis_state_t last;
  char why[256];       /* the last loss */
  char first_why[256]; /* the first loss since cleared */
} obs_t;

static void on_state(void *ctx, ak_redis_state_t st, const char *why) {
  obs_t *o = ctx;
  o->last = st;
  if (st == AK_REDIS_UP) o->ups++;
  if (st == AK_REDIS_CONNECTING) o->connectings++;
  if (st == AK_REDIS_DOWN) {
    o->downs++;
    cr_assert_not_null(why);
    snprintf(o->why, sizeof o->why, "%s", why);
    if (!o->first_why[0]) snprintf(o->first_why, sizeof o->first_why, "%s", why);
  }
}

static ak_redis_t *client_opts(const char *url, obs_t *o, long stall, const char *const *const *init, size_t ninit,
                               long connect_ms) {
  ak_redis_url_t u;
  char why[256];
  cr_assert_eq(ak_redis_url_parse(url, &u, why, sizeof why), 0, "%s", why);
  ak_redis_opts_t opts = {.url = &u, .connect_timeout_ms = connect_ms, .stall_timeout_ms = stall,
                          .backoff_min_ms = 50, .backoff_max_ms = 200, .init_argv = init, .ninit = ninit,
                          .on_state = on_state, .ctx = o};
  ak_redis_t *r = ak_redis_new(&loop, &opts);
  cr_assert_not_null(r);
  return r;
}

static ak_redis_t *client(const char *url, obs_t *o) { return client_opts(url, o, 0, NULL, 0, 1000); }

static ak_redis_t *connected(const char *url, obs_t *o) {
  ak_redis_t *r = client(url, o);
  ak_redis_start(r);
  RUN_UNTIL(ak_redis_state(r) == AK_REDIS_UP, 5000);
  cr_assert_eq(ak_redis_state(r), AK_REDIS_UP, "not UP: %s", o->why);
  return r;
}

typedef struct {
  int calls, nulls, order, type;
  long long ival;
  char str[64];
  size_t len;
} slot_t;

static int seq; /* the order replies were handed back in */

static void on_reply(void *priv, redisReply *rep) {
  slot_t *s = priv;
  s->calls++;
  s->order = ++seq;
  if (!rep) {
    s->nulls++;
    return;
  }
  s->type = rep->type;
  s->ival = rep->integer;
  s->len = rep->len;
  if (rep->str) { /* binary: the bytes as they came */
    size_t k = rep->len < sizeof s->str - 1 ? rep->len : sizeof s->str - 1;
    memcpy(s->str, rep->str, k);
    s->str[k] = '\0';
  }
}

/* A command from its words (NULL-terminated). */
static int cmd(ak_redis_t *r, slot_t *s, ...) {
  const char *argv[16];
  int argc = 0;
  va_list ap;
  va_start(ap, s);
  const char *w;
  while ((w = va_arg(ap, const char *)) != NULL && argc < 16) argv[argc++] = w;
  va_end(ap);
  return ak_redis_command(r, argc, argv, NULL, on_reply, s);
}

static void url_of(char *buf, size_t n, const char *cred, int port, int db) {
  snprintf(buf, n, "redis://%s127.0.0.1:%d/%d", cred ? cred : "", port, db);
}

/* A server of its own on a free port (no password) and a client connected to it. */
static ak_redis_t *started(obs_t *o, int *port) {
  *port = free_port();
  srv_start(*port, NULL);
  char url[128];
  url_of(url, sizeof url, NULL, *port, 0);
  return connected(url, o);
}

/* One command and its reply. */
static slot_t roundtrip(ak_redis_t *r, const char *a0, const char *a1, const char *a2) {
  slot_t s = {0};
  cr_assert_eq(cmd(r, &s, a0, a1, a2, NULL), 0);
  RUN_UNTIL(s.calls == 1, 3000);
  cr_assert_eq(s.calls, 1);
  return s;
}

/* ---- URLs ------------------------------------------------------------------------- */

Test(redis, url_good_forms) {
  ak_redis_url_t u;
  char why[256] = "";
  cr_assert_eq(ak_redis_url_parse("redis://localhost", &u, why, sizeof why), 0, "%s", why);
  cr_assert_str_eq(u.host, "localhost");
  cr_assert_eq(u.port, 6379);
  cr_assert_eq(u.db, 0);
  cr_assert_str_eq(u.user, "");
  cr_assert_str_eq(u.password, "");

  cr_assert_eq(ak_redis_url_parse("redis://cache.internal:6380/7", &u, why, sizeof why), 0, "%s", why);
  cr_assert_str_eq(u.host, "cache.internal");
  cr_assert_eq(u.port, 6380);
  cr_assert_eq(u.db, 7);

  cr_assert_eq(ak_redis_url_parse("redis://:pw@10.0.0.1:1/", &u, why, sizeof why), 0, "%s", why);
  cr_assert_str_eq(u.host, "10.0.0.1");
  cr_assert_eq(u.port, 1);
  cr_assert_eq(u.db, 0);
  cr_assert_str_eq(u.user, "");
  cr_assert_str_eq(u.password, "pw");

  cr_assert_eq(ak_redis_url_parse("redis://alice:p%40ss%2Fw%3a@[::1]:65535/15", &u, why, sizeof why), 0, "%s", why);
  cr_assert_str_eq(u.host, "::1");
  cr_assert_eq(u.port, 65535);
  cr_assert_eq(u.db, 15);
  cr_assert_str_eq(u.user, "alice");
  cr_assert_str_eq(u.password, "p@ss/w:");

  /* an unescaped @ in the password: the last @ ends the credentials */
  cr_assert_eq(ak_redis_url_parse("redis://:a@b@h", &u, why, sizeof why), 0, "%s", why);
  cr_assert_str_eq(u.password, "a@b");
  cr_assert_str_eq(u.host, "h");

  cr_assert_eq(ak_redis_url_parse("REDIS://[2001:db8::5]", &u, why, sizeof why), 0, "%s", why);
  cr_assert_str_eq(u.host, "2001:db8::5");
  cr_assert_eq(u.port, 6379);
}

Test(redis, url_errors_say_why_without_the_password) {
  static const struct {
    const char *url, *want;
  } cases[] = {
      {"", "redis://"},
      {"http://h:1", "redis://"},
      {"redis:/h", "redis://"},
      {"rediss://:sekrit@h:6380", "TLS"},
      {"redis://", "empty host"},
      {"redis://:sekrit@", "empty host"},
      {"redis://:sekrit@:6379/0", "empty host"},
      {"redis://[]:1", "empty host"},
      {"redis://h:0", "port"},
      {"redis://:sekrit@h:65536", "port"},
      {"redis://h:", "port"},
      {"redis://h:12a", "port"},
      {"redis://h:-1", "port"},
      {"redis://h/-1", "db"},
      {"redis://:sekrit@h/x", "db"},
      {"redis://h/1/2", "db"},
      {"redis://h/99999999999", "db"},
      {"redis://h:1/2?db=3", "trailing"},
      {"redis://h#frag", "trailing"},
      {"redis://[::1]x", "trailing"},
      {"redis://[::1", "["},
      {"redis://[zz]:1", "IPv6"},
      {"redis://bad host:1", "host"},
      {"redis://sekrit@h", "password"},
      {"redis://:sek%2rit@h", "escape"},
      {"redis://:sek%00rit@h", "escape"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ak_redis_url_t u;
    char why[256] = "";
    cr_assert_eq(ak_redis_url_parse(cases[i].url, &u, why, sizeof why), -1, "accepted %s", cases[i].url);
    cr_assert(strstr(why, cases[i].want) != NULL, "%s: why '%s' lacks '%s'", cases[i].url, why, cases[i].want);
    cr_assert(strstr(why, "sekrit") == NULL && strstr(why, "sek") == NULL, "%s: why has the secret", cases[i].url);
    cr_assert(strstr(u.password, "sek") == NULL, "%s: password left in out after a failure", cases[i].url);
  }
  ak_redis_url_t u;
  char why[256] = "";
  cr_assert_eq(ak_redis_url_parse("rediss://h", &u, why, sizeof why), -1);
  cr_assert(strstr(why, "rediss://") && strstr(why, "not supported"), "%s", why);
  /* a why buffer of 1 byte or none at all */
  cr_assert_eq(ak_redis_url_parse("x", &u, why, 1), -1);
  cr_assert_eq(why[0], '\0');
  cr_assert_eq(ak_redis_url_parse("x", &u, NULL, 0), -1);
}

Test(redis, url_redacted_has_no_credentials) {
  ak_redis_url_t u;
  char why[256], buf[300];
  cr_assert_eq(ak_redis_url_parse("redis://bob:sekrit@cache:7000/3", &u, why, sizeof why), 0);
  ak_redis_url_redacted(&u, buf, sizeof buf);
  cr_assert_str_eq(buf, "redis://cache:7000/3");
  cr_assert_eq(ak_redis_url_parse("redis://:sekrit@[::1]", &u, why, sizeof why), 0);
  ak_redis_url_redacted(&u, buf, sizeof buf);
  cr_assert_str_eq(buf, "redis://[::1]:6379/0");
  ak_redis_url_redacted(&u, buf, 8);
  cr_assert_str_eq(buf, "redis:/");
}

/* ---- against a server ------------------------------------------------------------- */

Test(redis, command_while_down_is_refused) {
  obs_t o = {0};
  int port = free_port(); /* nobody listens */
  char url[128];
  url_of(url, sizeof url, NULL, port, 0);
  ak_redis_t *r = client(url, &o);
  slot_t s = {0};
  cr_assert_eq(ak_redis_state(r), AK_REDIS_DOWN);
  cr_assert_eq(cmd(r, &s, "PING", NULL), -1);
  ak_redis_start(r);
  cr_assert_eq(ak_redis_state(r), AK_REDIS_CONNECTING);
  cr_assert_eq(cmd(r, &s, "PING", NULL), -1);
  RUN_UNTIL(o.downs >= 1, 3000);
  cr_assert_eq(o.downs, 1);
  cr_assert_str_eq(o.why, "connection refused");
  cr_assert_eq(cmd(r, &s, "PING", NULL), -1);
  RUN_UNTIL(o.downs >= 3, 3000); /* it keeps trying, with backoff */
  cr_assert_geq(o.connectings, 3);
  cr_assert_eq(o.ups, 0);
  cr_assert_eq(s.calls, 0);
  cr_assert_eq(ak_redis_pending(r), 0);
  finish(r);
}

Test(redis, pipelined_burst_in_order) {
  obs_t o = {0};
  int port;
  ak_redis_t *r = started(&o, &port);
  cr_assert_eq(o.connectings, 1);
  cr_assert_eq(o.ups, 1);
  enum { N = 1000 };
  static slot_t s[N];
  memset(s, 0, sizeof s);
  seq = 0;
  for (int i = 0; i < N; i++) cr_assert_eq(cmd(r, &s[i], "INCR", "counter", NULL), 0);
  cr_assert_eq(ak_redis_pending(r), N);
  for (int i = 0; i < N; i++) cr_assert_eq(s[i].calls, 0, "called back from inside ak_redis_command");
  ak_redis_flush(r);
  cr_assert_eq(ak_redis_pending(r), N);
  RUN_UNTIL(s[N - 1].calls == 1, 5000);
  for (int i = 0; i < N; i++) {
    cr_assert_eq(s[i].calls, 1);
    cr_assert_eq(s[i].nulls, 0);
    cr_assert_eq(s[i].type, REDIS_REPLY_INTEGER);
    cr_assert_eq(s[i].ival, i + 1);
    cr_assert_eq(s[i].order, i + 1);
  }
  cr_assert_eq(ak_redis_pending(r), 0);

  /* without a flush, the loop sends them on its next turn */
  slot_t a = {0};
  cr_assert_eq(cmd(r, &a, "GET", "counter", NULL), 0);
  RUN_UNTIL(a.calls == 1, 3000);
  cr_assert_str_eq(a.str, "1000");
  cr_assert_eq(o.downs, 0);
  finish(r);
}

Test(redis, host_name_and_error_reply) {
  int port = free_port();
  srv_start(port, NULL);
  obs_t o = {0};
  char url[128];
  snprintf(url, sizeof url, "redis://localhost:%d", port); /* ::1 may refuse: the next address */
  ak_redis_t *r = connected(url, &o);
  slot_t e = roundtrip(r, "NOSUCHCOMMAND", "x", NULL);
  cr_assert_eq(e.type, REDIS_REPLY_ERROR);
  cr_assert(strncmp(e.str, "ERR", 3) == 0, "%s", e.str);
  slot_t p = roundtrip(r, "SET", "k", "v");
  cr_assert_eq(p.type, REDIS_REPLY_STATUS);
  slot_t w = roundtrip(r, "INCR", "k", NULL);
  cr_assert_eq(w.type, REDIS_REPLY_ERROR);
  cr_assert_eq(ak_redis_state(r), AK_REDIS_UP);
  cr_assert_eq(o.downs, 0);
  finish(r);
}

Test(redis, big_binary_value) {
  obs_t o = {0};
  int port;
  ak_redis_t *r = started(&o, &port);
  size_t n = 4u << 20;
  char *v = malloc(n);
  cr_assert_not_null(v);
  for (size_t i = 0; i < n; i++) v[i] = (char)(i * 7 % 251); /* NULs and CRLFs among them */
  const char *argv[] = {"SET", "big", v};
  size_t lens[] = {3, 3, n};
  slot_t s = {0};
  cr_assert_eq(ak_redis_command(r, 3, argv, lens, on_reply, &s), 0);
  ak_redis_flush(r);
  /* more than the socket takes at once: these wait for the write in flight */
  slot_t g = {0}, h = {0};
  cr_assert_eq(cmd(r, &g, "STRLEN", "big", NULL), 0);
  ak_redis_flush(r);
  cr_assert_eq(cmd(r, &h, "GETRANGE", "big", "0", "9", NULL), 0);
  cr_assert_eq(ak_redis_pending(r), 3);
  RUN_UNTIL(h.calls == 1, 5000);
  cr_assert_eq(s.type, REDIS_REPLY_STATUS);
  cr_assert_eq(g.ival, (long long)n);
  cr_assert_eq(h.len, 10);
  cr_assert(memcmp(h.str, v, 10) == 0);
  cr_assert(s.order < g.order && g.order < h.order);
  free(v);
  finish(r);
}

Test(redis, auth_password_user_and_wrong) {
  int port = free_port();
  srv_start(port, "pw");
  char url[128];

  obs_t o = {0};
  url_of(url, sizeof url, ":pw@", port, 0);
  ak_redis_t *r = connected(url, &o);
  slot_t p = roundtrip(r, "PING", NULL, NULL);
  cr_assert_str_eq(p.str, "PONG");
  finish(r);

  /* AUTH user password (the ACL default user) */
  cr_assert_eq(uv_loop_init(&loop), 0);
  uv_timer_init(&loop, &tick);
  uv_timer_start(&tick, tick_cb, 5, 5);
  obs_t o2 = {0};
  url_of(url, sizeof url, "default:pw@", port, 0);
  r = connected(url, &o2);
  p = roundtrip(r, "PING", NULL, NULL);
  cr_assert_str_eq(p.str, "PONG");
  finish(r);

  /* the wrong password: the handshake fails, reported without the secret, never UP */
  cr_assert_eq(uv_loop_init(&loop), 0);
  uv_timer_init(&loop, &tick);
  uv_timer_start(&tick, tick_cb, 5, 5);
  obs_t o3 = {0};
  url_of(url, sizeof url, ":nopenope@", port, 0);
  r = client(url, &o3);
  ak_redis_start(r);
  RUN_UNTIL(o3.downs >= 2, 5000);
  cr_assert_geq(o3.downs, 2);
  cr_assert_eq(o3.ups, 0);
  cr_assert(strncmp(o3.first_why, "handshake: ", 11) == 0, "%s", o3.first_why);
  cr_assert(strstr(o3.first_why, "WRONGPASS") != NULL, "%s", o3.first_why);
  cr_assert(strstr(o3.first_why, "nopenope") == NULL, "%s", o3.first_why);
  finish(r);

  /* no password where one is needed: the handshake's PING says NOAUTH */
  cr_assert_eq(uv_loop_init(&loop), 0);
  uv_timer_init(&loop, &tick);
  uv_timer_start(&tick, tick_cb, 5, 5);
  obs_t o4 = {0};
  url_of(url, sizeof url, NULL, port, 0);
  r = client(url, &o4);
  ak_redis_start(r);
  RUN_UNTIL(o4.downs >= 1, 3000);
  cr_assert_eq(o4.ups, 0);
  cr_assert(strncmp(o4.first_why, "handshake: NOAUTH", 17) == 0, "%s", o4.first_why);
  finish(r);
}

Test(redis, select_db) {
  int port = free_port();
  srv_start(port, NULL);
  char url[128];
  obs_t o3 = {0}, o0 = {0};
  url_of(url, sizeof url, NULL, port, 3);
  ak_redis_t *r3 = connected(url, &o3);
  url_of(url, sizeof url, NULL, port, 0);
  ak_redis_t *r0 = connected(url, &o0);
  slot_t s = roundtrip(r3, "SET", "only3", "yes");
  cr_assert_eq(s.type, REDIS_REPLY_STATUS);
  slot_t g0 = roundtrip(r0, "GET", "only3", NULL);
  cr_assert_eq(g0.type, REDIS_REPLY_NIL);
  slot_t g3 = roundtrip(r3, "GET", "only3", NULL);
  cr_assert_str_eq(g3.str, "yes");
  ak_redis_free(r0);
  finish(r3);

  /* a db the server does not have: a handshake error */
  cr_assert_eq(uv_loop_init(&loop), 0);
  uv_timer_init(&loop, &tick);
  uv_timer_start(&tick, tick_cb, 5, 5);
  obs_t ob = {0};
  url_of(url, sizeof url, NULL, port, 999);
  ak_redis_t *rb = client(url, &ob);
  ak_redis_start(rb);
  RUN_UNTIL(ob.downs >= 1, 3000);
  cr_assert_eq(ob.ups, 0);
  cr_assert(strncmp(ob.first_why, "handshake: ", 11) == 0, "%s", ob.first_why);
  finish(rb);
}

static const char *SCRIPT = "return 42";

Test(redis, init_argv_script_load_then_evalsha) {
  int port = free_port();
  srv_start(port, NULL);
  unsigned char md[20];
  unsigned int mdl = 0;
  cr_assert(EVP_Digest(SCRIPT, strlen(SCRIPT), md, &mdl, EVP_sha1(), NULL));
  char sha[41];
  for (int i = 0; i < 20; i++) snprintf(sha + 2 * i, 3, "%02x", md[i]);

  static const char *const load[] = {"SCRIPT", "LOAD", "return 42", NULL};
  static const char *const set[] = {"SET", "initialized", "1", NULL};
  const char *const *init[] = {load, set};
  obs_t o = {0};
  char url[128];
  url_of(url, sizeof url, NULL, port, 2);
  ak_redis_t *r = client_opts(url, &o, 0, init, 2, 1000);
  ak_redis_start(r);
  RUN_UNTIL(ak_redis_state(r) == AK_REDIS_UP, 3000);
  cr_assert_eq(ak_redis_state(r), AK_REDIS_UP, "%s", o.why);
  cr_assert_eq(ak_redis_pending(r), 0, "handshake commands are not the caller's");
  slot_t e = roundtrip(r, "EVALSHA", sha, "0");
  cr_assert_eq(e.type, REDIS_REPLY_INTEGER, "%s", e.str);
  cr_assert_eq(e.ival, 42);
  slot_t g = roundtrip(r, "GET", "initialized", NULL); /* after SELECT 2: on db 2 */
  cr_assert_str_eq(g.str, "1");
  finish(r);

  /* an init command that fails closes the connection */
  cr_assert_eq(uv_loop_init(&loop), 0);
  uv_timer_init(&loop, &tick);
  uv_timer_start(&tick, tick_cb, 5, 5);
  static const char *const bad[] = {"NOSUCHCOMMAND", "arg", NULL};
  const char *const *init2[] = {load, bad};
  obs_t o2 = {0};
  r = client_opts(url, &o2, 0, init2, 2, 1000);
  ak_redis_start(r);
  RUN_UNTIL(o2.downs >= 2, 3000);
  cr_assert_eq(o2.ups, 0);
  cr_assert(strncmp(o2.first_why, "handshake: ERR", 14) == 0, "%s", o2.first_why);
  finish(r);
}

/* A fake server on a nonblocking listening socket, driven from the test between loop
 * turns: replies split at any byte, garbage, a reply nobody asked for. */
static int fake_listen(int *port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  cr_assert_eq(listen(fd, 4), 0);
  socklen_t al = sizeof a;
  getsockname(fd, (struct sockaddr *)&a, &al);
  *port = ntohs(a.sin_port);
  return fd;
}

static int fake_accept(int lfd) {
  int cfd = -1;
  RUN_UNTIL((cfd = accept(lfd, NULL, NULL)) >= 0, 3000);
  cr_assert_geq(cfd, 0);
  return cfd;
}

/* Waits for exactly these bytes of commands from the client. */
static void fake_expect(int cfd, const char *want) {
  size_t n = strlen(want), got = 0;
  char buf[256];
  int64_t dl = mono_ms() + 3000;
  fcntl(cfd, F_SETFL, O_NONBLOCK);
  while (got < n && mono_ms() < dl) {
    ssize_t k = read(cfd, buf + got, n - got);
    if (k > 0) got += (size_t)k;
    else uv_run(&loop, UV_RUN_ONCE);
  }
  cr_assert_eq(got, n);
  cr_assert(memcmp(buf, want, n) == 0, "got %.*s", (int)n, buf);
}

static void fake_say(int cfd, const char *s) { cr_assert_eq(write(cfd, s, strlen(s)), (ssize_t)strlen(s)); }

Test(redis, split_replies_and_protocol_errors) {
  int port;
  int lfd = fake_listen(&port);
  obs_t o = {0};
  char url[128];
  url_of(url, sizeof url, NULL, port, 0);
  ak_redis_t *r = client(url, &o);
  ak_redis_start(r);
  int cfd = fake_accept(lfd);
  fake_expect(cfd, "*1\r\n$4\r\nPING\r\n");
  fake_say(cfd, "+PO");
  run_for(30);
  cr_assert_eq(ak_redis_state(r), AK_REDIS_CONNECTING);
  fake_say(cfd, "NG\r\n");
  RUN_UNTIL(ak_redis_state(r) == AK_REDIS_UP, 3000);
  cr_assert_eq(ak_redis_state(r), AK_REDIS_UP);

  slot_t a = {0}, b = {0};
  cr_assert_eq(cmd(r, &a, "GET", "k", NULL), 0);
  cr_assert_eq(cmd(r, &b, "GET", "k", NULL), 0);
  fake_expect(cfd, "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
  fake_say(cfd, "$5\r\nhel");
  run_for(30);
  cr_assert_eq(a.calls, 0);
  fake_say(cfd, "lo\r\n$-1\r\n");
  RUN_UNTIL(b.calls == 1, 3000);
  cr_assert_str_eq(a.str, "hello");
  cr_assert_eq(b.type, REDIS_REPLY_NIL);

  /* garbage: the reader refuses it, the connection closes, the command gets NULL */
  slot_t c = {0};
  cr_assert_eq(cmd(r, &c, "GET", "k", NULL), 0);
  fake_expect(cfd, "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
  fake_say(cfd, "!nonsense\r\n");
  RUN_UNTIL(c.calls == 1, 3000);
  cr_assert_eq(c.nulls, 1);
  cr_assert(strncmp(o.first_why, "protocol error", 14) == 0, "%s", o.first_why);
  close(cfd);

  /* a reply to no command */
  cfd = fake_accept(lfd);
  fake_expect(cfd, "*1\r\n$4\r\nPING\r\n");
  fake_say(cfd, "+PONG\r\n");
  RUN_UNTIL(ak_redis_state(r) == AK_REDIS_UP, 3000);
  int downs = o.downs;
  fake_say(cfd, "+OK\r\n");
  RUN_UNTIL(o.downs > downs, 3000);
  cr_assert(strncmp(o.why, "protocol error", 14) == 0, "%s", o.why);
  close(cfd);

  /* the server closes: "closed by server" */
  cfd = fake_accept(lfd);
  fake_expect(cfd, "*1\r\n$4\r\nPING\r\n");
  fake_say(cfd, "+PONG\r\n");
  RUN_UNTIL(ak_redis_state(r) == AK_REDIS_UP, 3000);
  downs = o.downs;
  close(cfd);
  RUN_UNTIL(o.downs > downs, 3000);
  cr_assert_str_eq(o.why, "closed by server");
  finish(r);
  close(lfd);
}

/* ---- losses ----------------------------------------------------------------------- */

typedef struct {
  ak_redis_t *r;
  int calls, nulls, refused, order;
} loss_t;

static int loss_seq;

/* A loss callback queues and flushes: refused while not UP, harmless. */
static void on_loss(void *priv, redisReply *rep) {
  loss_t *l = priv;
  l->calls++;
  l->order = ++loss_seq;
  if (rep) return;
  l->nulls++;
  const char *argv[] = {"PING"};
  if (ak_redis_command(l->r, 1, argv, NULL, on_reply, NULL) == -1) l->refused++;
  ak_redis_flush(l->r);
}

/* A BLPOP that never returns, then n INCRs behind it: n + 1 commands pending. */
static void block_with(ak_redis_t *r, loss_t *l, int n) {
  const char *blpop[] = {"BLPOP", "never", "0"};
  const char *incr[] = {"INCR", "c"};
  l[0].r = r;
  cr_assert_eq(ak_redis_command(r, 3, blpop, NULL, on_loss, &l[0]), 0);
  for (int i = 1; i <= n; i++) {
    l[i].r = r;
    cr_assert_eq(ak_redis_command(r, 2, incr, NULL, on_loss, &l[i]), 0);
  }
  ak_redis_flush(r);
  run_for(100);
  cr_assert_eq(ak_redis_pending(r), (size_t)n + 1);
  for (int i = 0; i <= n; i++) cr_assert_eq(l[i].calls, 0);
}

static void all_null_once(loss_t *l, int n) {
  for (int i = 0; i <= n; i++) {
    cr_assert_eq(l[i].calls, 1, "command %d called %d times", i, l[i].calls);
    cr_assert_eq(l[i].nulls, 1);
    cr_assert_eq(l[i].refused, 1);
    cr_assert_eq(l[i].order, i + 1, "out of order");
  }
}

Test(redis, server_killed_then_back) {
  int port = free_port();
  pid_t pid = srv_start(port, NULL);
  obs_t o = {0};
  char url[128];
  url_of(url, sizeof url, NULL, port, 0);
  ak_redis_t *r = connected(url, &o);
  enum { N = 100 };
  static loss_t l[N + 1];
  memset(l, 0, sizeof l);
  loss_seq = 0;
  block_with(r, l, N);
  srv_kill9(pid);
  RUN_UNTIL(l[N].calls == 1, 3000);
  all_null_once(l, N);
  cr_assert_eq(o.downs, 1);
  cr_assert_str_eq(o.why, "closed by server");
  cr_assert_neq(ak_redis_state(r), AK_REDIS_UP);
  cr_assert_eq(ak_redis_pending(r), 0);
  run_for(300); /* refused a few times */
  cr_assert_geq(o.downs, 2);
  cr_assert_str_eq(o.why, "connection refused");
  cr_assert_eq(o.ups, 1);

  srv_start(port, NULL);
  RUN_UNTIL(ak_redis_state(r) == AK_REDIS_UP, 3000);
  cr_assert_eq(ak_redis_state(r), AK_REDIS_UP);
  cr_assert_eq(o.ups, 2);
  slot_t s = roundtrip(r, "INCR", "c", NULL);
  cr_assert_eq(s.type, REDIS_REPLY_INTEGER);
  cr_assert_eq(s.ival, 1); /* a new server: nothing of the old one */
  run_for(50);
  for (int i = 0; i <= N; i++) cr_assert_eq(l[i].calls, 1);
  finish(r);
}

Test(redis, stopped_server_stalls_then_recovers) {
  int port = free_port();
  pid_t pid = srv_start(port, NULL);
  obs_t o = {0};
  char url[128];
  url_of(url, sizeof url, NULL, port, 0);
  ak_redis_t *r = client_opts(url, &o, 200, NULL, 0, 500);
  ak_redis_start(r);
  RUN_UNTIL(ak_redis_state(r) == AK_REDIS_UP, 3000);
  cr_assert_eq(ak_redis_state(r), AK_REDIS_UP);
  slot_t ok = roundtrip(r, "PING", NULL, NULL);
  cr_assert_str_eq(ok.str, "PONG");
  run_for(300); /* idle is not stalled */
  cr_assert_eq(o.downs, 0);

  kill(pid, SIGSTOP);
  enum { N = 10 };
  slot_t s[N];
  memset(s, 0, sizeof s);
  for (int i = 0; i < N; i++) cr_assert_eq(cmd(r, &s[i], "PING", NULL), 0);
  ak_redis_flush(r);
  int64_t t0 = mono_ms();
  RUN_UNTIL(s[N - 1].calls == 1, 3000);
  int64_t took = mono_ms() - t0;
  cr_assert_geq(took, 150);
  cr_assert_leq(took, 1000, "stall took %lld ms", (long long)took);
  for (int i = 0; i < N; i++) {
    cr_assert_eq(s[i].calls, 1);
    cr_assert_eq(s[i].nulls, 1);
  }
  cr_assert_str_eq(o.first_why, "stalled");
  /* reconnects find the stopped server's backlog, but no answer: not UP */
  run_for(700);
  cr_assert_eq(o.ups, 1);
  cr_assert_neq(ak_redis_state(r), AK_REDIS_UP);

  kill(pid, SIGCONT);
  RUN_UNTIL(ak_redis_state(r) == AK_REDIS_UP, 5000);
  cr_assert_eq(ak_redis_state(r), AK_REDIS_UP, "%s", o.why);
  slot_t p = roundtrip(r, "PING", NULL, NULL);
  cr_assert_str_eq(p.str, "PONG");
  finish(r);
}

Test(redis, reset_then_reconnect) {
  obs_t o = {0};
  int port;
  ak_redis_t *r = started(&o, &port);
  static loss_t l[6];
  memset(l, 0, sizeof l);
  loss_seq = 0;
  block_with(r, l, 5);
  ak_redis_reset(r, "test reset");
  all_null_once(l, 5); /* from inside the reset */
  cr_assert_eq(ak_redis_state(r), AK_REDIS_DOWN);
  cr_assert_str_eq(o.why, "test reset");
  RUN_UNTIL(ak_redis_state(r) == AK_REDIS_UP, 3000);
  cr_assert_eq(o.ups, 2);
  slot_t p = roundtrip(r, "PING", NULL, NULL);
  cr_assert_str_eq(p.str, "PONG");
  finish(r);
}

Test(redis, connect_timeout_on_a_blackhole) {
  /* listens and never accepts: the kernel completes the TCP handshake from the backlog,
   * nobody answers ours */
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  cr_assert_eq(listen(fd, 16), 0);
  socklen_t al = sizeof a;
  getsockname(fd, (struct sockaddr *)&a, &al);
  obs_t o = {0};
  char url[128];
  url_of(url, sizeof url, ":pw@", ntohs(a.sin_port), 0);
  ak_redis_t *r = client_opts(url, &o, 0, NULL, 0, 200);
  ak_redis_start(r);
  int64_t t0 = mono_ms();
  RUN_UNTIL(o.downs >= 1, 3000);
  cr_assert_geq(mono_ms() - t0, 150);
  cr_assert_str_eq(o.first_why, "connect timeout");
  cr_assert_eq(o.ups, 0);
  /* and freed while CONNECTING again, mid-handshake */
  RUN_UNTIL(ak_redis_state(r) == AK_REDIS_CONNECTING, 3000);
  run_for(50);
  cr_assert_eq(ak_redis_state(r), AK_REDIS_CONNECTING);
  finish(r);
  close(fd);
}

/* ---- free ------------------------------------------------------------------------- */

Test(redis, free_with_commands_pending) {
  obs_t o = {0};
  int port;
  ak_redis_t *r = started(&o, &port);
  static loss_t l[51];
  memset(l, 0, sizeof l);
  loss_seq = 0;
  block_with(r, l, 50);
  /* and some queued, not yet written, with a write in flight for a big one */
  slot_t q[20];
  memset(q, 0, sizeof q);
  for (int i = 0; i < 20; i++) cr_assert_eq(cmd(r, &q[i], "INCR", "c", NULL), 0);
  size_t n = 8u << 20;
  char *v = calloc(1, n);
  const char *argv[] = {"SET", "big", v};
  size_t lens[] = {3, 3, n};
  slot_t b = {0};
  cr_assert_eq(ak_redis_command(r, 3, argv, lens, on_reply, &b), 0);
  ak_redis_flush(r);
  slot_t after = {0};
  cr_assert_eq(cmd(r, &after, "PING", NULL), 0);
  free(v);
  ak_redis_free(r);
  all_null_once(l, 50);
  for (int i = 0; i < 20; i++) cr_assert_eq(q[i].nulls, 1);
  cr_assert_eq(b.nulls, 1);
  cr_assert_eq(after.nulls, 1);
  cr_assert_eq(after.calls, 1);
  cr_assert_eq(o.last, AK_REDIS_DOWN);
  finish(NULL);
}

Test(redis, free_while_resolving) {
  obs_t o = {0};
  char url[128];
  snprintf(url, sizeof url, "redis://localhost:%d", free_port());
  ak_redis_t *r = client(url, &o);
  ak_redis_start(r);
  cr_assert_eq(ak_redis_state(r), AK_REDIS_CONNECTING);
  finish(r);
}

Test(redis, free_while_connecting) {
  obs_t o = {0};
  char url[128];
  url_of(url, sizeof url, NULL, free_port(), 0);
  ak_redis_t *r = client(url, &o);
  ak_redis_start(r); /* the connect request is out */
  finish(r);
}

Test(redis, free_while_waiting_to_reconnect) {
  obs_t o = {0};
  char url[128];
  url_of(url, sizeof url, NULL, free_port(), 0);
  ak_redis_t *r = client(url, &o);
  ak_redis_start(r);
  RUN_UNTIL(o.downs == 1, 3000);
  cr_assert_eq(ak_redis_state(r), AK_REDIS_DOWN);
  finish(r);
}

Test(redis, free_never_started) {
  obs_t o = {0};
  char url[128];
  url_of(url, sizeof url, NULL, 1, 0);
  finish(client(url, &o));
}

typedef struct {
  ak_redis_t *r;
  int calls, nulls;
} freer_t;

static void free_in_cb(void *priv, redisReply *rep) {
  freer_t *f = priv;
  f->calls++;
  if (!rep) f->nulls++;
  else ak_redis_free(f->r);
}

Test(redis, free_from_a_reply_callback) {
  obs_t o = {0};
  int port;
  ak_redis_t *r = started(&o, &port);
  freer_t f[10];
  memset(f, 0, sizeof f);
  const char *argv[] = {"PING"};
  for (int i = 0; i < 10; i++) {
    f[i].r = r;
    cr_assert_eq(ak_redis_command(r, 1, argv, NULL, free_in_cb, &f[i]), 0);
  }
  ak_redis_flush(r);
  RUN_UNTIL(f[9].calls == 1, 3000);
  cr_assert_eq(f[0].calls, 1);
  cr_assert_eq(f[0].nulls, 0);
  for (int i = 1; i < 10; i++) {
    cr_assert_eq(f[i].calls, 1);
    cr_assert_eq(f[i].nulls, 1);
  }
  finish(NULL);
}

/* A reply callback that sends the next command: a chain over the pipeline. */
typedef struct {
  ak_redis_t *r;
  int left, got;
} chain_t;

static void chain_cb(void *priv, redisReply *rep) {
  chain_t *c = priv;
  cr_assert_not_null(rep);
  c->got++;
  if (--c->left > 0) {
    const char *argv[] = {"INCR", "chain"};
    cr_assert_eq(ak_redis_command(c->r, 2, argv, NULL, chain_cb, c), 0);
    if (c->left % 2) ak_redis_flush(c->r);
  }
}

Test(redis, commands_from_reply_callbacks) {
  obs_t o = {0};
  int port;
  ak_redis_t *r = started(&o, &port);
  chain_t c = {.r = r, .left = 200};
  const char *argv[] = {"INCR", "chain"};
  cr_assert_eq(ak_redis_command(r, 2, argv, NULL, chain_cb, &c), 0);
  RUN_UNTIL(c.left == 0, 5000);
  cr_assert_eq(c.got, 200);
  slot_t g = roundtrip(r, "GET", "chain", NULL);
  cr_assert_str_eq(g.str, "200");
  finish(r);
}
