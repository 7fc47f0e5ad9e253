/* The sink table: every sink type Ankusa's config knows, one row each, in one place.
 * Owns lookup only (a type a build lists as unsupported would be refused by the config
 * loader with "not supported yet" rather than "unknown value"; every type of Ankusa is
 * built now). Adding a sink is its file plus its row here. */
#include <string.h>
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
