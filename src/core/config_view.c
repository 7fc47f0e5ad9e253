/* The config as `print-config` and `GET /v1/config` show it: the effective tree in the
 * YAML's own shape (already redacted by config.c), plus the fields of the Elixir Ankusa's
 * config as its own print-config shows them (`instance`, `roles`, `port`, `wal`,
 * `route_resolver`, `source_store.module/opts`, `{module, opts}` adapters), so a tool
 * written against either reads what it expects.
 *
 * Everything inside an adapter's opts is shown by allowlist (the original's rule): numbers,
 * booleans and null stay; header names stay and their values are hidden; a URL under
 * url/endpoint/resource keeps scheme, host and path, with the password, a lone token and
 * every query value hidden; a string under a key of `shown` is shown; anything else is
 * "[REDACTED]". The input is the redacted tree, so a secret is hidden twice over. */
#include <stdlib.h>
#include <string.h>
#include "core/config.h"
#include "core/config_view.h"

#define REDACTED "[REDACTED]"

static const char *const shown[] = {
  "tenant_id", "id", "forward_headers", "prefix", "header", "json", "preset", "from", "signature_header",
  "sig_prefix", "sig_key", "version", "signed", "timestamp", "timestamp_header", "bucket", "region",
  "namespace", "container", "account_name", "client_id", "exchange", "routing_key", "topic", "brokers",
  "servers", "subject", "channel", "queue_url", "message_group_id", "client_name", "inbox_prefix",
  "username", "mechanism", "type", "method", "exchange_type", "parse", "hash", "encoding", "secret_decode",
  "on_verify_failure", "scheme", "algorithm", "auth", NULL};

static bool in_list(const char *const *list, const char *k) {
  for (size_t i = 0; k && list[i]; i++)
    if (!strcmp(list[i], k)) return true;
  return false;
}

static bool url_key(const char *k) {
  return k && (!strcmp(k, "url") || !strcmp(k, "endpoint") || !strcmp(k, "resource"));
}

static json_t *closed(const char *key, const json_t *v);

static json_t *closed_map(const json_t *obj, const char *skip) {
  json_t *out = json_object();
  const char *k;
  json_t *item;
  json_object_foreach((json_t *)obj, k, item)
    if (!skip || strcmp(k, skip) != 0) json_object_set_new(out, k, closed(k, item));
  return out;
}

static json_t *closed(const char *key, const json_t *v) {
  if (key && !strcmp(key, "headers")) {
    if (!json_is_object(v)) return json_is_null(v) ? json_null() : json_string(REDACTED);
    json_t *out = json_object();
    const char *k;
    json_t *item;
    json_object_foreach((json_t *)v, k, item) json_object_set_new(out, k, json_string(REDACTED));
    return out;
  }
  if (json_is_number(v) || json_is_boolean(v) || json_is_null(v)) return json_copy((json_t *)v);
  if (json_is_object(v)) return closed_map(v, NULL);
  if (json_is_array(v)) {
    bool structured = json_array_size(v) > 0;
    size_t i;
    json_t *item;
    json_array_foreach(v, i, item) structured = structured && json_is_object(item);
    if (structured) {
      json_t *out = json_array();
      json_array_foreach(v, i, item) json_array_append_new(out, closed("", item));
      return out;
    }
  }
  if (url_key(key) && json_is_string(v)) return ak_config_view_url(json_string_value(v));
  if (in_list(shown, key)) return json_deep_copy(v);
  return json_string(REDACTED);
}

static json_t *pair(const char *module, json_t *opts) {
  return json_pack("{s:s,s:o}", "module", module, "opts", opts ? opts : json_object());
}

/* snake_case -> CamelCase for the adapters Ankusa has no name for (ours). */
static json_t *module_for(const char *ns, const char *type) {
  char buf[160];
  size_t o = (size_t)snprintf(buf, sizeof buf, "Ankusa.%s.", ns);
  bool up = true;
  for (const char *p = type ? type : "unknown"; *p && o + 1 < sizeof buf; p++) {
    if (*p == '_') {
      up = true;
      continue;
    }
    buf[o++] = up && *p >= 'a' && *p <= 'z' ? (char)(*p - 'a' + 'A') : *p;
    up = false;
  }
  buf[o] = '\0';
  return json_string(buf);
}

static const char *sink_module(const char *type) {
  static const char *const names[][2] = {
    {"log", "Ankusa.Sink.Log"},     {"http", "Ankusa.Sink.Http"},
    {"kafka", "Ankusa.Sink.Kafka"}, {"rabbitmq", "Ankusa.Sink.RabbitMQ"},
    {"nats", "Ankusa.Sink.Nats"},   {"redis", "Ankusa.Sink.Redis"},
    {"sqs", "Ankusa.Sink.SQS"},     {"google_pubsub", "Ankusa.Sink.GooglePubSub"},
  };
  for (size_t i = 0; type && i < sizeof names / sizeof names[0]; i++)
    if (!strcmp(type, names[i][0])) return names[i][1];
  return NULL;
}

static json_t *adapter(const char *ns, const char *module, const json_t *spec) {
  const char *type = json_string_value(json_object_get(spec, "type"));
  json_t *name = module ? json_string(module) : module_for(ns, type);
  json_t *out = json_pack("{s:o,s:o}", "module", name, "opts", closed_map(spec, "type"));
  return out;
}

static json_t *sinks_view(const json_t *list) {
  json_t *out = json_array();
  size_t i;
  json_t *s;
  json_array_foreach(list, i, s) {
    const char *type = json_string_value(json_object_get(s, "type"));
    json_array_append_new(out, adapter("Sink", sink_module(type), s));
  }
  return out;
}

static json_t *verifier_view(const json_t *v) {
  const char *type = json_string_value(json_object_get(v, "type"));
  if (!type || !strcmp(type, "none")) return pair("Ankusa.Verifier.None", NULL);
  static const char *const presets[] = {"stripe", "github", "standard_webhooks", "shopify", "slack", NULL};
  if (!in_list(presets, type) && strcmp(type, "hmac") != 0) return adapter("Verifier", NULL, v);
  json_t *opts = json_object();
  if (!strcmp(type, "hmac")) {
    static const char *const scheme_keys[] = {"signature_header", "parse",   "sig_prefix",    "sig_key",
                                              "version",          "signed",  "hash",          "encoding",
                                              "secret_decode",    NULL};
    json_t *scheme = json_object();
    for (size_t i = 0; scheme_keys[i]; i++) {
      json_t *x = json_object_get(v, scheme_keys[i]);
      json_object_set_new(scheme, scheme_keys[i], x ? json_deep_copy(x) : json_null());
    }
    const char *ts = json_string_value(json_object_get(v, "timestamp_header"));
    if (ts) {
      json_t *q = json_string(ts);
      char *enc = json_dumps(q, JSON_ENCODE_ANY);
      size_t need = strlen(enc ? enc : "\"\"") + 16;
      char *txt = malloc(need);
      if (txt) snprintf(txt, need, "{:header, %s}", enc ? enc : "\"\"");
      json_object_set_new(scheme, "timestamp", txt ? json_string(txt) : json_null());
      free(txt);
      free(enc);
      json_decref(q);
    } else {
      json_object_set_new(scheme, "timestamp", json_null());
    }
    json_object_set_new(opts, "scheme", scheme);
  } else {
    json_object_set_new(opts, "scheme", json_string(type));
  }
  json_object_set_new(opts, "secret", json_string(REDACTED));
  json_t *tol = json_object_get(v, "tolerance_seconds");
  if (tol) json_object_set_new(opts, "tolerance", json_deep_copy(tol));
  /* ours beside the original's */
  const char *k;
  json_t *x;
  json_object_foreach((json_t *)v, k, x) {
    if (!strcmp(k, "type") || !strcmp(k, "secret") || !strcmp(k, "tolerance_seconds") ||
        json_object_get(opts, k) || (json_object_get(json_object_get(opts, "scheme"), k)))
      continue;
    if (!strcmp(k, "timestamp_header")) continue;
    json_object_set_new(opts, k, closed(k, x));
  }
  return pair("Ankusa.Verifier.Hmac", opts);
}

static json_t *dedupe_view(const json_t *d) {
  if (!json_is_object(d)) return json_null();
  const char *preset = json_string_value(json_object_get(d, "preset"));
  if (preset) {
    json_t *m = module_for("DedupKey", preset);
    if (!strcmp(preset, "github")) json_string_set(m, "Ankusa.DedupKey.GitHub");
    return json_pack("{s:o,s:o}", "module", m, "opts", closed_map(d, "preset"));
  }
  json_t *opts = json_object();
  json_t *h = json_object_get(d, "header");
  json_object_set_new(opts, "header", h ? json_deep_copy(h) : json_null());
  const char *path = json_string_value(json_object_get(d, "json"));
  if (path) {
    json_t *parts = json_array();
    for (const char *p = path; *p;) {
      size_t l = strcspn(p, ".");
      json_array_append_new(parts, json_stringn(p, l));
      p += l + (p[l] == '.');
    }
    json_object_set_new(opts, "json", parts);
  } else {
    json_object_set_new(opts, "json", json_null());
  }
  json_t *ttl = json_object_get(d, "ttl_seconds");
  if (ttl) json_object_set_new(opts, "ttl_seconds", json_deep_copy(ttl));
  return pair("Ankusa.DedupKey.Rules", opts);
}

json_t *ak_config_view_source(const json_t *src) {
  json_t *o = json_object();
  json_t *t = json_object_get(src, "tenant");
  if (t) json_object_set_new(o, "tenant_id", json_deep_copy(t));
  json_t *ovf = json_object_get(src, "on_verify_failure");
  if (ovf) json_object_set_new(o, "on_verify_failure", json_deep_copy(ovf));
  json_object_set_new(o, "verifier", verifier_view(json_object_get(src, "verify")));
  json_object_set_new(o, "dedup", dedupe_view(json_object_get(src, "dedupe")));
  json_object_set_new(o, "sinks", sinks_view(json_object_get(src, "sinks")));
  const char *k;
  json_t *x;
  json_object_foreach((json_t *)src, k, x) {
    if (!strcmp(k, "tenant") || !strcmp(k, "verify") || !strcmp(k, "sinks") || !strcmp(k, "dedupe") ||
        json_object_get(o, k))
      continue;
    json_object_set_new(o, k, closed(k, x));
  }
  return o;
}

/* Put the original's keys into a section that holds ours: theirs win a clash. */
static void merge_into(json_t *root, const char *section, json_t *theirs) {
  json_t *ours = json_object_get(root, section);
  if (json_is_object(ours) && json_is_object(theirs)) {
    json_object_update(ours, theirs);
    json_decref(theirs);
  } else {
    json_object_set_new(root, section, theirs);
  }
}

static json_t *get2(const json_t *root, const char *a, const char *b) {
  return json_object_get(json_object_get(root, a), b);
}

static json_t *copy_or_null(const json_t *v) { return v ? json_deep_copy(v) : json_null(); }

json_t *ak_config_view(const ak_config_t *cfg) {
  json_t *red = ak_config_redacted(cfg);
  if (!red) return NULL;
  json_t *out = json_object();
  /* The original's flat fields first, in its struct's order. */
  json_object_set_new(out, "instance", json_string("default"));
  json_object_set_new(out, "data_dir", copy_or_null(get2(red, "node", "data_dir")));
  json_object_set_new(out, "roles", copy_or_null(get2(red, "node", "roles")));
  json_object_set_new(out, "port", copy_or_null(get2(red, "http", "port")));

  const char *routing = json_string_value(get2(red, "http", "routing"));
  json_t *ropts = json_object();
  const char *prefix = json_string_value(get2(red, "http", "prefix"));
  if (prefix) {
    json_t *parts = json_array();
    for (const char *p = prefix; *p;) {
      while (*p == '/') p++;
      size_t l = strcspn(p, "/");
      if (l) json_array_append_new(parts, json_stringn(p, l));
      p += l;
    }
    json_object_set_new(ropts, "prefix", parts);
  }
  json_object_set_new(out, "route_resolver",
                      pair(routing && !strcmp(routing, "tenant_path") ? "Ankusa.RouteResolver.TenantPath"
                                                                      : "Ankusa.RouteResolver.Path",
                           ropts));
  json_object_set_new(out, "max_body_bytes", copy_or_null(get2(red, "http", "max_body_bytes")));

  const char *wal = json_string_value(get2(red, "wal", "type"));
  json_object_set_new(out, "direct_publish_timeout_ms", copy_or_null(get2(red, "wal", "publish_timeout_ms")));

  /* Then every section of ours, in the module table's order, with the original's
   * {module, opts} fields merged into those it shares. */
  const char *k;
  json_t *v;
  json_object_foreach(red, k, v) if (!json_object_get(out, k)) json_object_set(out, k, v);
  json_decref(red);

  json_object_set_new(out, "wal", json_string(wal ? wal : "disk"));

  const char *store = json_string_value(get2(out, "source_store", "type"));
  json_t *srcs = json_object();
  json_object_foreach(json_object_get(out, "sources"), k, v) json_object_set_new(srcs, k, ak_config_view_source(v));
  merge_into(out, "source_store",
             json_pack("{s:s,s:{s:o}}", "module",
                       store && !strcmp(store, "persistent") ? "Ankusa.SourceStore.Persistent"
                       : store && !strcmp(store, "redis")      ? "Ankusa.SourceStore.Redis"
                                                               : "Ankusa.SourceStore.Static",
                       "opts", "sources", srcs));

  json_t *retry = get2(out, "dispatch", "retry");
  if (json_is_object(retry)) {
    json_t *theirs = pair("Ankusa.RetryPolicy.Exponential", closed_map(retry, NULL));
    json_object_update(retry, theirs);
    json_decref(theirs);
  }

  json_t *storage = json_object_get(out, "storage");
  if (json_is_object(storage)) {
    const char *st = json_string_value(json_object_get(storage, "type"));
    json_t *blob;
    if (st && !strcmp(st, "s3")) blob = pair("Ankusa.BlobStore.S3", closed_map(json_object_get(storage, "s3"), NULL));
    else if (st && !strcmp(st, "gcs"))
      blob = pair("Ankusa.BlobStore.GCS", closed_map(json_object_get(storage, "gcs"), NULL));
    else blob = pair("Ankusa.BlobStore.LocalFS", NULL);
    json_object_set_new(storage, "blob_store", blob);
    json_object_set_new(storage, "codec", pair("Ankusa.Codec.Raw", NULL));
  }

  json_t *rstore = get2(out, "routes", "store");
  if (json_is_object(rstore)) {
    const char *rt = json_string_value(json_object_get(rstore, "type"));
    json_t *theirs = json_object();
    json_object_set_new(theirs, "module", rt && strcmp(rt, "ets") != 0 ? module_for("Routes.Store", rt)
                                                                      : json_string("Ankusa.Routes.Store.ETS"));
    json_object_set_new(theirs, "opts", closed_map(rstore, "type"));
    json_object_update(rstore, theirs);
    json_decref(theirs);
  }

  json_t *lsinks = get2(out, "lifecycle", "sinks");
  if (json_is_array(lsinks)) json_object_set_new(json_object_get(out, "lifecycle"), "sinks", sinks_view(lsinks));
  return out;
}
