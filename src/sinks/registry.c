/* The sink table: every sink type Ankusa's config knows, one row each, in one place.
 * Owns lookup (a type a build lists as unsupported would be refused by the config
 * loader with "not supported yet" rather than "unknown value"; every type of Ankusa is
 * built now), and the two things every caller of a sink does the same way: building a
 * source's sink instance and an attempt's keys. Adding a sink is its file plus its row
 * here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/envelope.h"
#include "core/ids.h"
#include "core/instance.h"
#include "core/sources.h"
#include "sinks/egress.h"
#include "sinks/sink.h"

extern const ak_sink_vtable_t ak_sink_log;
extern const ak_sink_vtable_t ak_sink_http;
extern const ak_sink_vtable_t ak_sink_kafka;
extern const ak_sink_vtable_t ak_sink_rabbitmq;
extern const ak_sink_vtable_t ak_sink_nats;
extern const ak_sink_vtable_t ak_sink_redis;
extern const ak_sink_vtable_t ak_sink_sqs;
extern const ak_sink_vtable_t ak_sink_google_pubsub;
#ifdef AK_TEST_HOOKS
extern const ak_sink_vtable_t ak_sink_test_echo;
#endif

static const ak_plugin_t *const sinks[] = {
  &ak_sink_log.plugin,      &ak_sink_http.plugin, &ak_sink_kafka.plugin, &ak_sink_rabbitmq.plugin,
  &ak_sink_nats.plugin,     &ak_sink_redis.plugin, &ak_sink_sqs.plugin,  &ak_sink_google_pubsub.plugin,
#ifdef AK_TEST_HOOKS
  &ak_sink_test_echo.plugin,
#endif
};

/* Keys of every sink entry, read by the dispatcher rather than the sink. */
static const ak_opt_t sink_common_rows[] = {
  {.key = "ordered", .type = AK_OPT_BOOL,
   .doc = "deliver the hooks of one lane {tenant, source, this sink} one at a time in seq order; a retry "
          "holds its lane only; absent = false (docs/delivery.md)"},
  {0},
};

const ak_plugin_kind_t ak_sink_kind = {
  .name = "sink",
  .all = sinks,
  .count = sizeof sinks / sizeof sinks[0],
  .common = sink_common_rows,
};

const ak_sink_vtable_t *ak_sinks_find(const char *type) {
  const ak_plugin_t *p = ak_plugin_find(&ak_sink_kind, type);
  return p ? (const ak_sink_vtable_t *)p : NULL; /* the plugin is the vtable's first member */
}

void *ak_sink_instance_new(const ak_instance_t *inst, const ak_source_t *src, size_t j, const ak_sink_vtable_t **vt,
                           char *err, size_t errlen) {
  const ak_source_cfg_t *s = &src->cfg;
  *vt = ak_sinks_find(s->sinks[j].type);
  if (!*vt || (*vt)->plugin.unsupported) {
    snprintf(err, errlen, "sources.%s.sinks[%zu]: sink type %s is not supported", s->id, j, s->sinks[j].type);
    return NULL;
  }
  char serr[256] = "";
  ak_sink_ctx_t sctx = {.source_id = s->id, .egress = inst->egress, .httpc = inst->httpc,
                        .trusted = !ak_egress_guards(ak_config_of(inst->cfg, &ak_mod_egress),
                                                     src->origin == AK_SOURCE_API)};
  json_t *own = json_copy(s->sinks[j].opts);
  for (const ak_opt_t *r = ak_sink_kind.common; own && r && r->key; r++) json_object_del(own, r->key);
  void *self = own ? (*vt)->create(own, &sctx, serr, sizeof serr) : NULL;
  json_decref(own);
  if (!self) snprintf(err, errlen, "sources.%s.sinks[%zu]: %s", s->id, j, serr[0] ? serr : "cannot be created");
  return self;
}

void ak_sink_attempt_keys(ak_sink_attempt_t *att, const ak_envelope_t *env, char id[AK_UUID_STR_LEN]) {
  ak_uuid_format(env->id, id);
  char *dkey = NULL, *idem = NULL;
  if (env->dedupe_key_len) {
    dkey = strndup(env->dedupe_key, env->dedupe_key_len);
    if (asprintf(&idem, "%.*s:%.*s:%.*s", (int)env->tenant_len, env->tenant, (int)env->source_len, env->source,
                 (int)env->dedupe_key_len, env->dedupe_key) < 0)
      idem = NULL;
  }
  att->env = env;
  att->dedupe_key = dkey;
  att->idempotency_key = idem ? idem : id;
}

void ak_sink_attempt_keys_free(ak_sink_attempt_t *att, const char *id) {
  free((char *)att->dedupe_key);
  if (att->idempotency_key != id) free((char *)att->idempotency_key);
  att->dedupe_key = att->idempotency_key = NULL;
}
