/* The sink table: every sink type Ankusa's config knows, in one place. Owns lookup only;
 * a type listed with supported=false is refused by the config loader with a clear
 * "not supported yet" rather than an "unknown value". */
#include <string.h>
#include "sinks/sink.h"

extern const ak_sink_vtable_t ak_sink_log;
extern const ak_sink_vtable_t ak_sink_http;

#define AK_FUTURE_SINK(name) \
  static const ak_opt_t name##_opts[] = {{0}}; \
  static const ak_sink_vtable_t ak_sink_##name = {.type = #name, .supported = false, .options = name##_opts}

AK_FUTURE_SINK(kafka);
AK_FUTURE_SINK(rabbitmq);
AK_FUTURE_SINK(nats);
AK_FUTURE_SINK(redis);
AK_FUTURE_SINK(sqs);
AK_FUTURE_SINK(google_pubsub);

static const ak_sink_vtable_t *const sinks[] = {
  &ak_sink_log, &ak_sink_http, &ak_sink_kafka, &ak_sink_rabbitmq, &ak_sink_nats,
  &ak_sink_redis, &ak_sink_sqs, &ak_sink_google_pubsub,
};

const ak_sink_vtable_t *ak_sinks_find(const char *type) {
  if (!type) return NULL;
  for (size_t i = 0; i < sizeof sinks / sizeof sinks[0]; i++)
    if (strcmp(sinks[i]->type, type) == 0) return sinks[i];
  return NULL;
}

const char *ak_sinks_type_list(void) {
  return "log, http, kafka, rabbitmq, nats, redis, sqs, google_pubsub";
}
