/* GET /asyncapi.json: an AsyncAPI 3.0 document of the channels this node publishes to:
 * one channel per broker sink of every source it serves (the config file's and the API's),
 * its server (protocol and host, never credentials), the operation `send`, and the one
 * message they all carry, SinkMessageV1 (sinks/message.h: the same schema as
 * docs/sink-message-v1.schema.json) with the metadata headers. Built per request from the
 * current sources; HTTP and log sinks are not channels and are left out. The broker sinks
 * of lifecycle.sinks are channels too (source id ankusa:lifecycle): their messages carry a
 * CloudEvent as the body (docs/lifecycle.md). */
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <jansson.h>
#include "admin/asyncapi_api.h"
#include "core/instance.h"
#include "core/sources.h"
#include "lifecycle/module.h"
#include "lifecycle/publisher.h"
#include "sinks/message.h"

/* The host[:port] of a URL, without scheme, userinfo, path or query (never a password). */
static void url_host(const char *url, char *out, size_t cap) {
  out[0] = '\0';
  if (!url) return;
  const char *p = strstr(url, "://");
  p = p ? p + 3 : url;
  size_t n = strcspn(p, "/?#");
  const char *at = memrchr(p, '@', n);
  if (at) {
    n -= (size_t)(at + 1 - p);
    p = at + 1;
  }
  snprintf(out, cap, "%.*s", (int)n, p);
}

static const char *str_opt(const json_t *o, const char *k) { return json_string_value(json_object_get(o, k)); }

/* The first entry of a list-or-comma-string option (brokers, servers). */
static void first_of(const json_t *v, char *out, size_t cap) {
  out[0] = '\0';
  if (json_is_array(v)) v = json_array_get(v, 0);
  const char *s = json_string_value(v);
  if (!s) return;
  size_t n = strcspn(s, ",");
  while (n && isspace((unsigned char)s[n - 1])) n--;
  snprintf(out, cap, "%.*s", (int)n, s);
}

typedef struct {
  const char *protocol;
  char host[256];
  char pathname[256];
  const char *address;
  json_t *bindings; /* channel bindings, or NULL */
} chan_t;

/* What the document says of one sink; false for a sink that is not a broker channel. */
static bool describe(const ak_sink_cfg_t *sk, const char *source_id, chan_t *c) {
  const json_t *o = sk->opts;
  memset(c, 0, sizeof *c);
  char tmp[256];
  if (!strcmp(sk->type, "kafka")) {
    c->protocol = "kafka";
    first_of(json_object_get(o, "brokers"), c->host, sizeof c->host);
    c->address = str_opt(o, "topic");
  } else if (!strcmp(sk->type, "rabbitmq")) {
    const char *url = str_opt(o, "url");
    c->protocol = url && !strncmp(url, "amqps:", 6) ? "amqps" : "amqp";
    url_host(url ? url : "amqp://localhost:5672", c->host, sizeof c->host);
    c->address = str_opt(o, "exchange");
    const char *rk = str_opt(o, "routing_key");
    char dflt[96];
    snprintf(dflt, sizeof dflt, "ankusa.%s", source_id);
    c->bindings = json_pack("{s:{s:s,s:{s:s?,s:s,s:b},s:s}}", "amqp", "is", "routingKey", "exchange", "name",
                            c->address, "type", str_opt(o, "exchange_type") ? str_opt(o, "exchange_type") : "topic",
                            "durable", 1, "bindingVersion", "0.3.0");
    if (c->bindings) json_object_set_new(c->bindings, "x-routing-key", json_string(rk ? rk : dflt));
  } else if (!strcmp(sk->type, "nats")) {
    c->protocol = "nats";
    first_of(json_object_get(o, "servers"), tmp, sizeof tmp);
    url_host(tmp, c->host, sizeof c->host);
    c->address = str_opt(o, "subject");
  } else if (!strcmp(sk->type, "redis")) {
    c->protocol = "redis";
    url_host(str_opt(o, "url"), c->host, sizeof c->host);
    c->address = str_opt(o, "channel");
  } else if (!strcmp(sk->type, "sqs")) {
    const char *q = str_opt(o, "queue_url");
    c->protocol = "sqs";
    url_host(q, c->host, sizeof c->host);
    const char *slash = q ? strrchr(q, '/') : NULL;
    c->address = slash && slash[1] ? slash + 1 : q;
  } else if (!strcmp(sk->type, "google_pubsub")) {
    const char *ep = str_opt(o, "endpoint");
    c->protocol = "googlepubsub";
    url_host(ep ? ep : "https://pubsub.googleapis.com", c->host, sizeof c->host);
    const char *proj = str_opt(o, "project");
    snprintf(c->pathname, sizeof c->pathname, "/v1/projects/%s", proj ? proj : "");
    c->address = str_opt(o, "topic");
  } else {
    return false;
  }
  return c->address != NULL;
}

/* An id AsyncAPI accepts ([A-Za-z0-9_-]+). */
static void sanitize(char *s) {
  for (; *s; s++)
    if (!isalnum((unsigned char)*s) && *s != '_' && *s != '-') *s = '_';
}

static json_t *metadata_headers(void) {
  json_t *props = json_object();
  static const char *const names[] = {"ankusa_id", "ankusa_source_id", "ankusa_tenant_id", "ankusa_message_version",
                                      "ankusa_idempotency_key", "content_type", "ankusa_dedupe_key",
                                      "ankusa_replay_id"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    json_object_set_new(props, names[i], json_pack("{s:s}", "type", "string"));
  return json_pack("{s:s,s:s,s:o,s:[sssss]}", "type", "object", "description",
                   "transport headers or attributes where the transport has them (Kafka, RabbitMQ, NATS, SQS, "
                   "Pub/Sub): the same values as the message's fields",
                   "properties", props, "required", "ankusa_id", "ankusa_source_id", "ankusa_message_version",
                   "ankusa_idempotency_key", "content_type");
}

/* The channel of one broker sink (and its server, one per protocol and host, and its send
 * operation) into doc; nothing for a sink that is not a channel. */
static void add_channel(json_t *doc, size_t *nservers, const ak_sink_cfg_t *sk, const char *source_id,
                        const char *channel_id, const char *desc) {
  json_t *servers = json_object_get(doc, "servers"), *channels = json_object_get(doc, "channels"),
         *ops = json_object_get(doc, "operations");
  chan_t c;
  if (!describe(sk, source_id, &c)) return;
  /* one server per protocol and host */
  const char *skey = NULL, *k;
  json_t *sv;
  json_object_foreach(servers, k, sv) {
    if (!strcmp(json_string_value(json_object_get(sv, "protocol")), c.protocol) &&
        !strcmp(json_string_value(json_object_get(sv, "host")), c.host))
      skey = k;
  }
  char sname[64];
  if (!skey) {
    snprintf(sname, sizeof sname, "%s-%zu", c.protocol, ++*nservers);
    json_t *srv = json_pack("{s:s,s:s}", "host", c.host, "protocol", c.protocol);
    if (c.pathname[0]) json_object_set_new(srv, "pathname", json_string(c.pathname));
    json_object_set_new(servers, sname, srv);
    skey = sname;
  }
  char cid[160], ref[200], cref[200], oid[176];
  snprintf(cid, sizeof cid, "%s", channel_id);
  sanitize(cid);
  /* a lifecycle channel's id may meet a source's ("lifecycle-0-kafka"): never replaced */
  for (int dup = 2; json_object_get(channels, cid) && dup < 100; dup++)
    snprintf(cid, sizeof cid, "%.140s-%d", channel_id, dup), sanitize(cid);
  snprintf(ref, sizeof ref, "#/servers/%s", skey);
  json_t *ch = json_pack("{s:s,s:s,s:[{s:s}],s:{s:{s:s}}}", "address", c.address, "description", desc, "servers",
                         "$ref", ref, "messages", "SinkMessageV1", "$ref", "#/components/messages/SinkMessageV1");
  if (c.bindings) json_object_set_new(ch, "bindings", c.bindings);
  json_object_set_new(channels, cid, ch);
  snprintf(cref, sizeof cref, "#/channels/%s", cid);
  char mref[240];
  snprintf(mref, sizeof mref, "#/channels/%s/messages/SinkMessageV1", cid);
  snprintf(oid, sizeof oid, "%s-send", cid);
  json_object_set_new(ops, oid, json_pack("{s:s,s:{s:s},s:[{s:s}]}", "action", "send", "channel", "$ref", cref,
                                          "messages", "$ref", mref));
}

json_t *ak_asyncapi_document(ak_instance_t *inst) {
  json_t *schema = json_loads(ak_sink_message_schema(), 0, NULL);
  json_t *doc = json_pack(
      "{s:s,s:{s:s,s:s,s:s},s:s,s:{},s:{},s:{},s:{s:{s:{s:s,s:s,s:s,s:s,s:o,s:o}}}}", "asyncapi", "3.0.0", "info",
      "title", "ankusa broker sinks", "version", AK_VERSION, "description",
      "Every broker sink of this node publishes SinkMessageV1 (docs/sink-message.md): one JSON object per hook "
      "and attempt, byte-identical across transports; bodies above a sink's inline_max_bytes go as a claim ref "
      "redeemed at the claim gateway (docs/claim-check.md). Delivery is at least once: de-duplicate on "
      "idempotency_key.",
      "defaultContentType", "application/json", "servers", "channels", "operations", "components", "messages",
      "SinkMessageV1", "name", "SinkMessageV1", "title", "SinkMessageV1", "contentType", "application/json",
      "summary", "one stored hook, as every broker sink sends it", "payload",
      schema ? schema : json_object(), "headers", metadata_headers());
  if (!doc) return NULL;
  ak_source_t **v = NULL;
  size_t n = inst->sources ? ak_sources_list(inst->sources, NULL, &v) : 0;
  size_t nservers = 0;
  for (size_t i = 0; i < n; i++) {
    const ak_source_cfg_t *s = &v[i]->cfg;
    for (size_t j = 0; j < s->nsinks; j++) {
      char cid[160], desc[256];
      snprintf(cid, sizeof cid, "%s-%zu-%s", s->id, j, s->sinks[j].type);
      snprintf(desc, sizeof desc, "source %s (tenant %s), sink %zu: %s", s->id, s->tenant ? s->tenant : "default", j,
               s->sinks[j].type);
      add_channel(doc, &nservers, &s->sinks[j], s->id, cid, desc);
    }
  }
  ak_sources_list_free(v, n);
  /* lifecycle.sinks: the same message, whose body is a CloudEvent */
  const ak_lifecycle_cfg_t *lc = ak_config_of(inst->cfg, &ak_mod_lifecycle);
  for (size_t j = 0; lc && j < json_array_size(lc->sinks); j++) {
    json_t *spec = json_array_get(lc->sinks, j);
    ak_sink_cfg_t sk = {.type = (char *)json_string_value(json_object_get(spec, "type")), .opts = spec};
    if (!sk.type) continue;
    char cid[160], desc[256];
    snprintf(cid, sizeof cid, "lifecycle-%zu-%s", j, sk.type);
    snprintf(desc, sizeof desc, "lifecycle.sinks[%zu]: %s; body_base64 holds a CloudEvents 1.0 event "
             "(application/cloudevents+json, io.ankusa.source.created, ...)", j, sk.type);
    add_channel(doc, &nservers, &sk, AK_LIFECYCLE_SOURCE_ID, cid, desc);
  }
  return doc;
}

void ak_asyncapi_api_get(ak_admin_call_t *call, const ak_admin_path_t *path) {
  (void)path;
  json_t *doc = ak_asyncapi_document(call->inst);
  if (!doc) {
    ak_admin_error(call, 500, "internal");
    return;
  }
  ak_admin_json(call, 200, doc);
}
