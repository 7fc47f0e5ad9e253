/* The `log` sink: writes one structured line per delivery. Not durable (a log line is
 * not a store), so wal.type none cannot rely on it. Never logs the body or headers:
 * they may carry personal data; the id, source, tenant and size are enough to trace. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sinks/sink.h"
#include "core/envelope.h"
#include "core/log.h"

typedef struct {
  char source_id[72];
} log_sink_t;

static const ak_opt_t log_opts[] = {{0}};

static void *log_create(const json_t *opts, const ak_sink_ctx_t *sctx, char *err, size_t errlen) {
  (void)opts;
  const char *source_id = sctx ? sctx->source_id : NULL;
  log_sink_t *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  snprintf(s->source_id, sizeof s->source_id, "%s", source_id ? source_id : "");
  return s;
}

static void log_deliver(void *self, const ak_sink_attempt_t *att, void *ctx, ak_sink_done_fn done) {
  log_sink_t *s = self;
  const ak_envelope_t *env = att->env;
  char id[AK_UUID_STR_LEN];
  ak_uuid_format(env->id, id);
  ak_log(AK_LOG_INFO, "sink.log", "delivered", "id=%s seq=%llu tenant=%.*s source=%s size=%zu", id,
         (unsigned long long)env->seq, (int)env->tenant_len, env->tenant ? env->tenant : "", s->source_id,
         env->body_len);
  ak_sink_outcome_t out = {.result = AK_SINK_OK};
  done(ctx, &out);
}

static void log_destroy(void *self) { free(self); }

const ak_sink_vtable_t ak_sink_log = {
  .plugin = {.type = "log", .doc = "writes one line per hook to the node's log", .options = log_opts},
  .durable = false,
  .create = log_create,
  .deliver = log_deliver,
  .destroy = log_destroy,
};
