/* Unit tests: the nats sink against a scripted NATS server in this process (a thread on
 * 127.0.0.1, port 0, speaking the text protocol: INFO, PING/PONG, SUB, HPUB, MSG). The
 * server answers each publish on its reply subject with the scripted JSON, or never: the
 * confirm rule (stream + seq > 0, duplicate still ok, error and malformed replies), the
 * timeout, the in-flight bound ("busy"), destroy answering every delivery still under way
 * exactly once, and the config rules. */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "core/envelope.h"
#include "core/ids.h"
#include "sinks/sink.h"

extern const ak_sink_vtable_t ak_sink_nats;

/* ---- the scripted server ----------------------------------------------------------- */

typedef struct {
  int lfd;
  unsigned short port;
  pthread_t thread;
  pthread_mutex_t mu;
  const char *answer; /* JSON answered to every publish; NULL: never answer */
  int pubs;
  char last_headers[2048];
  char sid[32];
  bool quit;
} srv_t;

static int read_line(int fd, char *buf, size_t max) {
  size_t n = 0;
  while (n + 1 < max) {
    char c;
    ssize_t r = recv(fd, &c, 1, 0);
    if (r <= 0) return -1;
    if (c == '\n') break;
    if (c != '\r') buf[n++] = c;
  }
  buf[n] = '\0';
  return (int)n;
}

static int read_exact(int fd, char *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = recv(fd, buf + got, n - got, 0);
    if (r <= 0) return -1;
    got += (size_t)r;
  }
  return 0;
}

static void send_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) return;
    p += w;
    n -= (size_t)w;
  }
}

static void serve_conn(srv_t *s, int fd) {
  static const char info[] = "INFO {\"server_id\":\"T\",\"version\":\"2.9.10\",\"proto\":1,\"headers\":true,"
                             "\"max_payload\":1048576}\r\n";
  send_all(fd, info, strlen(info));
  char line[4096];
  while (read_line(fd, line, sizeof line) >= 0) {
    if (!strcmp(line, "PING")) {
      send_all(fd, "PONG\r\n", 6);
    } else if (!strncmp(line, "SUB ", 4)) {
      char subj[256], sid[32];
      if (sscanf(line, "SUB %255s %31s", subj, sid) == 2) {
        pthread_mutex_lock(&s->mu);
        snprintf(s->sid, sizeof s->sid, "%s", sid);
        pthread_mutex_unlock(&s->mu);
      }
    } else if (!strncmp(line, "HPUB ", 5)) {
      char subj[256], reply[256];
      int hlen = 0, total = 0;
      if (sscanf(line, "HPUB %255s %255s %d %d", subj, reply, &hlen, &total) != 4) break;
      char *payload = malloc((size_t)total + 2);
      if (!payload || read_exact(fd, payload, (size_t)total + 2) != 0) {
        free(payload);
        break;
      }
      pthread_mutex_lock(&s->mu);
      s->pubs++;
      size_t hl = (size_t)hlen < sizeof s->last_headers ? (size_t)hlen : sizeof s->last_headers - 1;
      memcpy(s->last_headers, payload, hl);
      s->last_headers[hl] = '\0';
      const char *ans = s->answer;
      char sid[32];
      snprintf(sid, sizeof sid, "%s", s->sid);
      pthread_mutex_unlock(&s->mu);
      free(payload);
      if (ans) {
        char out[1024];
        int n = snprintf(out, sizeof out, "MSG %s %s %zu\r\n%s\r\n", reply, sid, strlen(ans), ans);
        send_all(fd, out, (size_t)n);
      }
    }
  }
  close(fd);
}

static void *srv_main(void *arg) {
  srv_t *s = arg;
  for (;;) {
    int fd = accept(s->lfd, NULL, NULL);
    if (fd < 0) return NULL;
    pthread_mutex_lock(&s->mu);
    bool quit = s->quit;
    pthread_mutex_unlock(&s->mu);
    if (quit) {
      close(fd);
      return NULL;
    }
    serve_conn(s, fd); /* one connection at a time: the sink keeps one */
  }
}

static srv_t *srv_start(const char *answer) {
  srv_t *s = calloc(1, sizeof *s);
  cr_assert(s);
  pthread_mutex_init(&s->mu, NULL);
  s->answer = answer;
  s->lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  cr_assert(bind(s->lfd, (struct sockaddr *)&sa, sizeof sa) == 0);
  socklen_t sl = sizeof sa;
  getsockname(s->lfd, (struct sockaddr *)&sa, &sl);
  s->port = ntohs(sa.sin_port);
  cr_assert(listen(s->lfd, 8) == 0);
  pthread_create(&s->thread, NULL, srv_main, s);
  return s;
}

/* After the sink is destroyed (its connection closed). */
static void srv_stop(srv_t *s) {
  pthread_mutex_lock(&s->mu);
  s->quit = true;
  pthread_mutex_unlock(&s->mu);
  shutdown(s->lfd, SHUT_RDWR);
  close(s->lfd);
  pthread_join(s->thread, NULL);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

/* ---- the sink ------------------------------------------------------------------------ */

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int answers;
  int ok, retry, permanent;
  char last_reason[128];
  int stopped;
} waiter_t;

static waiter_t W;

static void on_done(void *ctx, const ak_sink_outcome_t *o) {
  (void)ctx;
  pthread_mutex_lock(&W.mu);
  W.answers++;
  if (o->result == AK_SINK_OK) W.ok++;
  else if (o->result == AK_SINK_RETRY) W.retry++;
  else W.permanent++;
  if (!strcmp(o->reason, "sink stopped")) W.stopped++;
  snprintf(W.last_reason, sizeof W.last_reason, "%s", o->reason);
  pthread_cond_broadcast(&W.cv);
  pthread_mutex_unlock(&W.mu);
}

static void reset_waiter(void) {
  pthread_mutex_init(&W.mu, NULL);
  pthread_cond_init(&W.cv, NULL);
  W.answers = W.ok = W.retry = W.permanent = W.stopped = 0;
  W.last_reason[0] = '\0';
}

static bool wait_answers(int n, int ms) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += (ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&W.mu);
  while (W.answers < n)
    if (pthread_cond_timedwait(&W.cv, &W.mu, &ts) != 0) break;
  bool ok = W.answers >= n;
  pthread_mutex_unlock(&W.mu);
  return ok;
}

static void *make_sink(unsigned short port, const char *extra) {
  char text[512];
  snprintf(text, sizeof text, "{\"servers\":\"127.0.0.1:%u\",\"subject\":\"t.x\"%s%s}", port, extra ? "," : "",
           extra ? extra : "");
  json_error_t je;
  json_t *opts = json_loads(text, 0, &je);
  cr_assert(opts, "%s", je.text);
  char err[256] = "";
  ak_sink_ctx_t ctx = {.source_id = "src", .trusted = true};
  void *s = ak_sink_nats.create(opts, &ctx, err, sizeof err);
  json_decref(opts);
  cr_assert(s, "create: %s", err);
  return s;
}

static const uint8_t BODY[] = "{\"hello\":1}";

static void deliver_n(void *sink, int n) {
  ak_envelope_t env = {.received_at_ms = 1, .tenant = "t", .tenant_len = 1, .source = "src", .source_len = 3,
                       .body = BODY, .body_len = sizeof BODY - 1};
  for (int i = 0; i < n; i++) {
    env.id[15] = (uint8_t)i;
    env.id[14] = (uint8_t)(i >> 8);
    env.id[6] = 0x70;
    char id[AK_UUID_STR_LEN];
    ak_uuid_format(env.id, id);
    ak_sink_attempt_t att = {.env = &env, .attempt = 1, .idempotency_key = id};
    ak_sink_nats.deliver(sink, &att, NULL, on_done);
  }
}

static void one_reply(const char *answer, ak_sink_result_t want, const char *reason) {
  reset_waiter();
  srv_t *srv = srv_start(answer);
  void *s = make_sink(srv->port, "\"publish_timeout_ms\":1000");
  deliver_n(s, 1);
  cr_assert(wait_answers(1, 5000), "no answer");
  cr_expect_eq(W.ok + W.retry + W.permanent, 1);
  cr_expect_eq(want == AK_SINK_OK ? W.ok : want == AK_SINK_RETRY ? W.retry : W.permanent, 1, "reason %s",
               W.last_reason);
  cr_expect_str_eq(W.last_reason, reason);
  ak_sink_nats.destroy(s);
  srv_stop(srv);
}

Test(sink_nats, ack_with_stream_and_seq_is_ok) { one_reply("{\"stream\":\"S\",\"seq\":7}", AK_SINK_OK, ""); }

Test(sink_nats, duplicate_is_still_ok) {
  one_reply("{\"stream\":\"S\",\"seq\":7,\"duplicate\":true}", AK_SINK_OK, "");
}

Test(sink_nats, error_reply_names_its_codes) {
  one_reply("{\"error\":{\"code\":503,\"err_code\":10077,\"description\":\"x\"},\"stream\":\"S\",\"seq\":0}",
            AK_SINK_RETRY, "jetstream_error 503/10077");
}

Test(sink_nats, seq_zero_or_missing_stream_or_not_json_is_a_bad_reply) {
  one_reply("{\"stream\":\"S\",\"seq\":0}", AK_SINK_RETRY, "bad_reply");
  one_reply("{\"seq\":3}", AK_SINK_RETRY, "bad_reply");
  one_reply("{\"stream\":\"S\",\"seq\":\"3\"}", AK_SINK_RETRY, "bad_reply");
  one_reply("+OK", AK_SINK_RETRY, "bad_reply");
}

Test(sink_nats, no_answer_is_publish_timeout) { one_reply(NULL, AK_SINK_RETRY, "publish_timeout"); }

Test(sink_nats, headers_carry_the_msg_id_and_metadata) {
  reset_waiter();
  srv_t *srv = srv_start("{\"stream\":\"S\",\"seq\":1}");
  void *s = make_sink(srv->port, NULL);
  deliver_n(s, 1);
  cr_assert(wait_answers(1, 5000));
  cr_expect_eq(W.ok, 1);
  pthread_mutex_lock(&srv->mu);
  char h[2048];
  snprintf(h, sizeof h, "%s", srv->last_headers);
  pthread_mutex_unlock(&srv->mu);
  ak_sink_nats.destroy(s);
  srv_stop(srv);
  cr_expect(strstr(h, "NATS/1.0\r\n") == h, "%s", h);
  cr_expect(strstr(h, "Nats-Msg-Id: 00000000-0000-7000-0000-000000000000\r\n"), "%s", h);
  cr_expect(strstr(h, "ankusa_tenant_id: t\r\n") && strstr(h, "ankusa_source_id: src\r\n"), "%s", h);
  cr_expect(strstr(h, "ankusa_message_version: 1\r\n") && strstr(h, "content_type: application/json\r\n"), "%s", h);
}

Test(sink_nats, bound_answers_busy_and_destroy_answers_the_rest_once) {
  reset_waiter();
  srv_t *srv = srv_start(NULL); /* never acks: everything stays in flight */
  void *s = make_sink(srv->port, "\"publish_timeout_ms\":60000");
  deliver_n(s, 1024 + 10);
  cr_assert(wait_answers(10, 5000));
  pthread_mutex_lock(&W.mu);
  cr_expect_eq(W.answers, 10, "only the ones beyond the bound are answered");
  cr_expect_str_eq(W.last_reason, "busy");
  pthread_mutex_unlock(&W.mu);
  /* the publishes reach the server (in flight, not just queued) */
  for (int i = 0; i < 500; i++) {
    pthread_mutex_lock(&srv->mu);
    int pubs = srv->pubs;
    pthread_mutex_unlock(&srv->mu);
    if (pubs >= 1024) break;
    usleep(10000);
  }
  ak_sink_nats.destroy(s);
  /* destroy returned: every delivery was answered, exactly once */
  cr_expect_eq(W.answers, 1024 + 10);
  cr_expect_eq(W.stopped, 1024);
  cr_expect_eq(W.ok, 0);
  srv_stop(srv);
}

Test(sink_nats, unreachable_server_is_not_connected) {
  reset_waiter();
  srv_t *srv = srv_start(NULL);
  unsigned short port = srv->port;
  srv_stop(srv); /* nothing listens there any more */
  void *s = make_sink(port, NULL);
  deliver_n(s, 3);
  cr_assert(wait_answers(3, 10000));
  cr_expect_eq(W.retry, 3);
  cr_expect_str_eq(W.last_reason, "not_connected");
  ak_sink_nats.destroy(s);
}

Test(sink_nats, config_rules_refuse_at_create) {
  const char *bad[][2] = {
    {"{\"servers\":\"a:1\",\"subject\":\"x\",\"auth\":{\"token\":\"t\",\"username\":\"u\",\"password\":\"p\"}}",
     "mutually exclusive"},
    {"{\"servers\":\"a:1\",\"subject\":\"x\",\"auth\":{\"password\":\"p\"}}", "go together"},
    {"{\"servers\":\"a:1\",\"subject\":\"x\",\"idle_timeout_ms\":5999}", "idle_timeout_ms"},
    {"{\"servers\":\"a:1\",\"subject\":\"x..y\"}", "empty token"},
    {"{\"servers\":\"[::1:4222\",\"subject\":\"x\"}", "servers[0]"},
    {"{\"servers\":\"a:70000\",\"subject\":\"x\"}", "bad port"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    json_t *o = json_loads(bad[i][0], 0, NULL);
    cr_assert(o);
    char err[256] = "";
    ak_sink_ctx_t ctx = {.source_id = "src", .trusted = true};
    void *s = ak_sink_nats.create(o, &ctx, err, sizeof err);
    json_decref(o);
    cr_expect_null(s, "%s", bad[i][0]);
    cr_expect(strstr(err, bad[i][1]) != NULL, "%s -> %s", bad[i][0], err);
    if (s) ak_sink_nats.destroy(s);
  }
}
