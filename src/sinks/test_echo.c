/* The `test_echo` sink, compiled into test builds only: appends one line per delivery
 * ("<prefix> <hook id> <source> <attempt>\n", then " claim=<ref> sha256=<hex>" before the
 * newline when the hook went by claim: its `inline_max_bytes`, null by default) to the file
 * its `path` names. It exists to
 * prove that a capability is one file plus one registry row: the config loader, its
 * check hook, print-config, the options reference and the dispatcher pick it up from
 * its row in sinks/registry.c and nothing else (tests/e2e/test_modules.py). Never part
 * of a release build. */
#ifdef AK_TEST_HOOKS
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/config.h"
#include "core/envelope.h"
#include "sinks/message.h"
#include "sinks/sink.h"

typedef struct {
  char *path;
  char *prefix;
  int64_t inline_max;
  char source_id[72];
} echo_sink_t;

static const ak_opt_t echo_opts[] = {
  {.key = "path", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_REQUIRED | AK_OPTF_HAS_MIN,
   .doc = "absolute path of the file each delivery appends a line to"},
  {.key = "prefix", .type = AK_OPT_STRING, .def = "echo", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "first word of each line"},
  {.key = "inline_max_bytes", .type = AK_OPT_INT, .min = 0, .flags = AK_OPTF_HAS_MIN | AK_OPTF_NULLABLE,
   .doc = "a body larger than this goes by claim (the line names the ref); null: never"},
  {0},
};

/* A relative path would depend on the node's working directory: refused at load. */
static void echo_check(ak_check_t *c, const char *path, json_t *spec, const json_t *root) {
  (void)root;
  const char *p = json_string_value(json_object_get(spec, "path"));
  if (p && p[0] != '/') ak_check_error(c, "%s.path: must be an absolute path", path);
}

static void echo_destroy(void *self) {
  echo_sink_t *s = self;
  if (!s) return;
  free(s->path);
  free(s->prefix);
  free(s);
}

static void *echo_create(const json_t *opts, const ak_sink_ctx_t *sctx, char *err, size_t errlen) {
  echo_sink_t *s = calloc(1, sizeof *s);
  const char *path = json_string_value(json_object_get(opts, "path"));
  const char *prefix = json_string_value(json_object_get(opts, "prefix"));
  if (!s || !path || !(s->path = strdup(path)) || !(s->prefix = strdup(prefix ? prefix : "echo"))) {
    snprintf(err, errlen, "out of memory");
    echo_destroy(s);
    return NULL;
  }
  snprintf(s->source_id, sizeof s->source_id, "%s", sctx && sctx->source_id ? sctx->source_id : "");
  const json_t *im = json_object_get(opts, "inline_max_bytes");
  s->inline_max = json_is_integer(im) ? json_integer_value(im) : -1;
  return s;
}

static int64_t echo_inline_max(const void *self) { return ((const echo_sink_t *)self)->inline_max; }

static void echo_deliver(void *self, const ak_sink_attempt_t *att, void *ctx, ak_sink_done_fn done) {
  echo_sink_t *s = self;
  char id[AK_UUID_STR_LEN];
  ak_uuid_format(att->env->id, id);
  char line[512];
  int n;
  ak_sink_outcome_t out = {.result = AK_SINK_OK};
  if (ak_sink_by_claim(att, s->inline_max)) {
    if (!att->claim_ref) {
      out.result = AK_SINK_RETRY;
      snprintf(out.reason, sizeof out.reason, "claim_missing");
      done(ctx, &out);
      return;
    }
    char sha[65];
    ak_sink_body_sha256(att, sha);
    n = snprintf(line, sizeof line, "%s %s %s %u claim=%s sha256=%s\n", s->prefix, id, s->source_id, att->attempt,
                 att->claim_ref, sha);
  } else {
    n = snprintf(line, sizeof line, "%s %s %s %u\n", s->prefix, id, s->source_id, att->attempt);
  }
  int fd = open(s->path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0 || n < 0 || write(fd, line, (size_t)n) != n) {
    out.result = AK_SINK_RETRY;
    snprintf(out.reason, sizeof out.reason, "test_echo: %s", strerror(errno));
  }
  if (fd >= 0) close(fd);
  done(ctx, &out);
}

const ak_sink_vtable_t ak_sink_test_echo = {
  .plugin = {.type = "test_echo", .doc = "test builds only: appends a line per delivery to a file",
             .options = echo_opts, .check = echo_check},
  .durable = false,
  .create = echo_create,
  .deliver = echo_deliver,
  .destroy = echo_destroy,
  .inline_max = echo_inline_max,
};
#endif
