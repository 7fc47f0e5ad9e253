/* Unit tests: the source table (core/sources.h) and the one-source check of the config
 * loader (ak_config_source_check). Lookups, replacement and removal while a reader holds
 * the old version, identity kept by updates, extension states built and freed exactly
 * once, attach failures undone, the gauges, and readers racing a writer (the sanitizer
 * build turns a use after free into a failure). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/config.h"
#include "core/metrics.h"
#include "core/sources.h"
#include "verify/verifier.h"
#include "modules.h"
#include "core/node.h"
#include "edge/edge.h"
#include "admin/admin.h"
#include "store/audit.h"
#include "queue/writer.h"
#include "queue/dedupe.h"
#include "queue/quarantine.h"
#include "dispatch/dispatch.h"
#include "sinks/egress.h"
#include "edge/headers.h"
#include "admin/sources_api.h"
#include "core/log.h"

static ak_config_t *load(const char *yaml) {
  const char *const env[] = {NULL};
  ak_config_t *cfg = NULL;
  char *err = NULL;
  cr_assert_eq(ak_config_load_string(ak_modules(), yaml, strlen(yaml), env, &cfg, &err), 0, "%s", err ? err : "");
  return cfg;
}

static const char *BASE = "source_store: {type: persistent, secret_key: AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=}\n"
                          "sources:\n"
                          "  zeta: {tenant: acme, sinks: [{type: log}]}\n"
                          "  alpha: {sinks: [{type: log}], verify: {type: github, secret: s3cr3t}}\n";

/* A checked spec, made the way the admin API makes one. */
static json_t *checked(const ak_config_t *cfg, const char *id, const char *spec_json) {
  json_t *spec = json_loads(spec_json, 0, NULL);
  cr_assert_not_null(spec, "bad test JSON: %s", spec_json);
  json_t *out = NULL;
  char *err = NULL;
  cr_assert_eq(ak_sources_check_spec(cfg, id, spec, 0, &out, NULL, &err), 0, "%s", err ? err : "");
  json_decref(spec);
  return out;
}

static ak_source_t *make(ak_sources_t *t, const ak_config_t *cfg, const char *id, const char *spec_json,
                         const ak_source_t *prev) {
  json_t *c = checked(cfg, id, spec_json);
  ak_source_meta_t m = {.origin = AK_SOURCE_API, .prev = prev, .born_ms = 1000, .updated_ms = 2000,
                        .revision = prev ? prev->revision + 1 : 1};
  char err[256] = "";
  ak_source_t *s = ak_sources_make(t, id, c, &m, err, sizeof err);
  json_decref(c);
  cr_assert_not_null(s, "%s", err);
  return s;
}

/* ------------------------------------------------------------------ extensions ---- */

#define MAGIC 0x5eed5eedu

typedef struct {
  unsigned magic;
  char name[70];
} state_t;

typedef struct {
  _Atomic int built, freed;
  const char *refuse; /* a name whose build fails */
} counts_t;

static counts_t *g_counts; /* the free function has no context: the test's one counter set */

static void *build_state(void *ctx, const ak_source_t *s, char *err, size_t errlen) {
  counts_t *c = ctx;
  if (c->refuse && !strcmp(s->cfg.id, c->refuse)) {
    snprintf(err, errlen, "sources.%s.sinks[0]: refused by the test", s->cfg.id);
    return NULL;
  }
  state_t *st = calloc(1, sizeof *st);
  st->magic = MAGIC;
  snprintf(st->name, sizeof st->name, "%s", s->cfg.id);
  atomic_fetch_add(&c->built, 1);
  return st;
}

static void free_state(void *p) {
  state_t *st = p;
  cr_assert_eq(st->magic, MAGIC, "a state freed twice");
  st->magic = 0xdeadu;
  atomic_fetch_add(&g_counts->freed, 1);
  free(st);
}

/* ------------------------------------------------------------------ lookups ---- */

Test(sources, config_sources_load_with_verifiers_and_are_found_by_name) {
  ak_config_t *cfg = load(BASE);
  char err[256];
  ak_sources_t *t = ak_sources_new(cfg, err, sizeof err);
  cr_assert_not_null(t, "%s", err);
  cr_expect_eq(ak_sources_count(t), 2);
  ak_source_t *a = ak_sources_get(t, "alphabet", 5); /* by length: the route hands a prefix */
  cr_assert_not_null(a);
  cr_expect_str_eq(a->cfg.id, "alpha");
  cr_expect_eq(a->origin, AK_SOURCE_CONFIG);
  cr_expect_eq(a->born_ms, 0, "a config source is older than any hook");
  cr_assert_not_null(a->verifier);
  cr_expect_str_eq(ak_verifier_type(a->verifier), "github");
  ak_source_t *z = ak_sources_get(t, "zeta", 4);
  cr_assert_not_null(z);
  cr_expect_null(z->verifier, "verify none builds nothing");
  cr_expect_neq(a->uid, z->uid);
  cr_expect_null(ak_sources_get(t, "alph", 4));
  cr_expect_null(ak_sources_get(t, "zetaa", 5));
  ak_source_t **v = NULL;
  size_t n = ak_sources_list(t, "acme", &v);
  cr_assert_eq(n, 1);
  cr_expect_str_eq(v[0]->cfg.id, "zeta");
  ak_sources_list_free(v, n);
  n = ak_sources_list(t, NULL, &v);
  cr_assert_eq(n, 2);
  cr_expect_str_eq(v[0]->cfg.id, "alpha", "sorted by name");
  ak_sources_list_free(v, n);
  ak_source_release(a);
  ak_source_release(z);
  ak_sources_free(t);
  ak_config_free(cfg);
}

/* ------------------------------------------------------------ replacement ---- */

Test(sources, replacement_keeps_the_old_version_alive_for_its_holder) {
  ak_config_t *cfg = load(BASE);
  char err[256];
  ak_sources_t *t = ak_sources_new(cfg, err, sizeof err);
  counts_t c = {0};
  g_counts = &c;
  cr_assert_eq(ak_sources_attach(t, AK_SOURCE_EXT_DISPATCH, build_state, free_state, &c, err, sizeof err), 0);
  cr_expect_eq(atomic_load(&c.built), 2, "attach builds for every version already in the table");

  ak_source_t *v1 = make(t, cfg, "api", "{\"tenant\":\"acme\",\"sinks\":[{\"type\":\"log\"}]}", NULL);
  cr_expect_eq(atomic_load(&c.built), 3, "a version is made complete before it is published");
  cr_assert_eq(ak_sources_reserve(t), 0);
  cr_expect_null(ak_sources_put(t, v1), "a new name replaces nothing");
  ak_source_t *held = ak_sources_get(t, "api", 3); /* a reader (an edge request) holds v1 */
  cr_assert_eq(held, v1);

  ak_source_t *v2 = make(t, cfg, "api",
                         "{\"tenant\":\"acme\",\"sinks\":[{\"type\":\"log\"},{\"type\":\"log\"}],"
                         "\"verify\":{\"type\":\"github\",\"secret\":\"new\"}}", held);
  cr_expect_eq(v2->uid, v1->uid, "an update keeps the identity");
  cr_expect_eq(v2->born_ms, v1->born_ms);
  cr_expect_eq(v2->inflight, v1->inflight, "the identity's counters are shared");
  cr_expect_eq(v2->revision, 2);
  ak_source_t *old = ak_sources_put(t, v2);
  cr_assert_eq(old, v1, "the replaced version comes back to the writer");
  ak_source_release(old); /* the table's reference */
  cr_expect_eq(atomic_load(&c.freed), 0, "still held by the reader");
  /* the holder still reads a whole version: config, verifier, extension state */
  cr_expect_eq(held->cfg.nsinks, 1);
  cr_expect_null(held->verifier);
  cr_expect_eq(((state_t *)held->ext[AK_SOURCE_EXT_DISPATCH])->magic, MAGIC);
  ak_source_t *now = ak_sources_get(t, "api", 3);
  cr_assert_eq(now, v2, "new lookups see the new version at once");
  cr_expect_eq(now->cfg.nsinks, 2);
  cr_assert_not_null(now->verifier);
  ak_source_release(now);
  ak_source_release(held);
  cr_expect_eq(atomic_load(&c.freed), 1, "the last holder frees it, once");

  /* removal: the same for a holder; a re-created name is a new identity */
  held = ak_sources_get(t, "api", 3);
  ak_source_t *gone = ak_sources_remove(t, "api");
  cr_assert_eq(gone, v2);
  cr_expect_null(ak_sources_get(t, "api", 3));
  cr_expect_null(ak_sources_remove(t, "api"));
  ak_source_release(gone);
  cr_expect_eq(atomic_load(&c.freed), 1);
  cr_expect_eq(held->ext[AK_SOURCE_EXT_DISPATCH] != NULL, true);
  ak_source_t *v3 = make(t, cfg, "api", "{\"tenant\":\"beta\",\"sinks\":[{\"type\":\"log\"}]}", NULL);
  cr_expect_neq(v3->uid, held->uid);
  cr_expect_neq(v3->inflight, held->inflight);
  ak_source_release(held);
  cr_expect_eq(atomic_load(&c.freed), 2);
  cr_assert_eq(ak_sources_reserve(t), 0);
  cr_expect_null(ak_sources_put(t, v3));
  cr_expect_eq(ak_sources_count(t), 3);

  /* detached: versions made now carry no state; those made before keep theirs */
  ak_sources_detach(t, AK_SOURCE_EXT_DISPATCH);
  ak_source_t *v4 = make(t, cfg, "late", "{\"sinks\":[{\"type\":\"log\"}]}", NULL);
  cr_expect_null(v4->ext[AK_SOURCE_EXT_DISPATCH]);
  ak_source_release(v4);
  ak_sources_free(t); /* frees alpha, zeta, api (v3) with their states */
  cr_expect_eq(atomic_load(&c.built), 5);
  cr_expect_eq(atomic_load(&c.freed), 5, "every state built is freed exactly once");
  ak_config_free(cfg);
}

Test(sources, a_refused_extension_refuses_the_version_or_the_attach) {
  ak_config_t *cfg = load(BASE);
  char err[256];
  ak_sources_t *t = ak_sources_new(cfg, err, sizeof err);
  counts_t c = {.refuse = "zeta"};
  g_counts = &c;
  err[0] = '\0';
  cr_expect_eq(ak_sources_attach(t, AK_SOURCE_EXT_EDGE, build_state, free_state, &c, err, sizeof err), -1);
  cr_expect_str_eq(err, "sources.zeta.sinks[0]: refused by the test");
  cr_expect_eq(atomic_load(&c.built), atomic_load(&c.freed), "what the failed attach built is undone");
  ak_source_t *a = ak_sources_get(t, "alpha", 5);
  cr_expect_null(a->ext[AK_SOURCE_EXT_EDGE]);
  ak_source_release(a);
  c.refuse = "bad";
  cr_assert_eq(ak_sources_attach(t, AK_SOURCE_EXT_EDGE, build_state, free_state, &c, err, sizeof err), 0);
  json_t *ck = checked(cfg, "bad", "{\"sinks\":[{\"type\":\"log\"}]}");
  ak_source_meta_t m = {.origin = AK_SOURCE_API, .born_ms = 1};
  cr_expect_null(ak_sources_make(t, "bad", ck, &m, err, sizeof err));
  cr_expect_str_eq(err, "sources.bad.sinks[0]: refused by the test");
  json_decref(ck);
  ak_sources_free(t);
  cr_expect_eq(atomic_load(&c.built), atomic_load(&c.freed));
  ak_config_free(cfg);
}

Test(sources, gauges_follow_every_change) {
  ak_config_t *cfg = load(BASE);
  char err[256];
  ak_sources_t *t = ak_sources_new(cfg, err, sizeof err);
  ak_metrics_t *mx = ak_metrics_new();
  ak_sources_set_metrics(t, mx, "default");
  ak_series_t *total = ak_metrics_instance_series(mx, "default", "ankusa_sources", "", AK_METRIC_GAUGE);
  ak_series_t *api = ak_metrics_instance_series(mx, "default", "ankusa_sources_api", "", AK_METRIC_GAUGE);
  ak_series_t *nod = ak_metrics_instance_series(mx, "default", "ankusa_sources_without_dedupe", "", AK_METRIC_GAUGE);
  cr_expect_eq(ak_gauge_get(total), 2);
  cr_expect_eq(ak_gauge_get(api), 0);
  cr_expect_eq(ak_gauge_get(nod), 2);
  ak_source_t *s = make(t, cfg, "d", "{\"sinks\":[{\"type\":\"log\"}],\"dedupe\":\"github\"}", NULL);
  ak_sources_reserve(t);
  ak_sources_put(t, s);
  cr_expect_eq(ak_gauge_get(total), 3);
  cr_expect_eq(ak_gauge_get(api), 1);
  cr_expect_eq(ak_gauge_get(nod), 2);
  ak_source_t *s2 = make(t, cfg, "d", "{\"sinks\":[{\"type\":\"log\"}]}", s);
  ak_source_release(ak_sources_put(t, s2));
  cr_expect_eq(ak_gauge_get(nod), 3);
  ak_source_release(ak_sources_remove(t, "d"));
  cr_expect_eq(ak_gauge_get(total), 2);
  cr_expect_eq(ak_gauge_get(api), 0);
  ak_sources_free(t);
  ak_metrics_free(mx);
  ak_config_free(cfg);
}

/* ------------------------------------------------------------ readers vs a writer ---- */

typedef struct {
  ak_sources_t *t;
  _Atomic bool stop;
  _Atomic long reads;
} race_t;

static void *reader(void *p) {
  race_t *r = p;
  while (!atomic_load(&r->stop)) {
    ak_source_t *s = ak_sources_get(r->t, "hot", 3);
    if (!s) continue; /* between a remove and the next put */
    state_t *st = s->ext[AK_SOURCE_EXT_DISPATCH];
    if (!st || st->magic != MAGIC || strcmp(st->name, "hot") || strcmp(s->cfg.id, "hot") || s->cfg.nsinks < 1 ||
        strcmp(s->cfg.sinks[0].type, "log"))
      abort(); /* a torn or freed version */
    atomic_fetch_add(&r->reads, 1);
    ak_source_release(s);
  }
  return NULL;
}

Test(sources, readers_never_see_a_freed_version) {
  ak_config_t *cfg = load(BASE);
  char err[256];
  ak_sources_t *t = ak_sources_new(cfg, err, sizeof err);
  counts_t c = {0};
  g_counts = &c;
  cr_assert_eq(ak_sources_attach(t, AK_SOURCE_EXT_DISPATCH, build_state, free_state, &c, err, sizeof err), 0);
  race_t r = {.t = t};
  ak_source_t *cur = make(t, cfg, "hot", "{\"sinks\":[{\"type\":\"log\"}]}", NULL);
  ak_sources_reserve(t);
  ak_sources_put(t, ak_source_ref(cur));
  pthread_t th[3];
  for (int i = 0; i < 3; i++) pthread_create(&th[i], NULL, reader, &r);
  json_t *one = checked(cfg, "hot", "{\"sinks\":[{\"type\":\"log\"}]}");
  json_t *two = checked(cfg, "hot", "{\"sinks\":[{\"type\":\"log\"},{\"type\":\"log\"}],\"dedupe\":\"svix\"}");
  for (int i = 0; i < 3000; i++) {
    ak_source_meta_t m = {.origin = AK_SOURCE_API, .prev = i % 100 == 99 ? NULL : cur, .born_ms = i};
    ak_source_t *next = ak_sources_make(t, "hot", i % 2 ? one : two, &m, err, sizeof err);
    cr_assert_not_null(next, "%s", err);
    if (i % 100 == 99) ak_source_release(ak_sources_remove(t, "hot")); /* delete, then re-create */
    ak_sources_reserve(t);
    ak_source_release(ak_sources_put(t, ak_source_ref(next)));
    ak_source_release(cur);
    cur = next;
  }
  atomic_store(&r.stop, true);
  for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
  cr_expect_gt(atomic_load(&r.reads), 0);
  ak_source_release(cur);
  json_decref(one);
  json_decref(two);
  ak_sources_free(t);
  cr_expect_eq(atomic_load(&c.built), atomic_load(&c.freed), "nothing leaked, nothing freed twice");
  ak_config_free(cfg);
}

/* ------------------------------------------------------------ the one-source check ---- */

static char *check_err(const ak_config_t *cfg, const char *id, const char *spec_json, unsigned flags) {
  json_t *spec = json_loads(spec_json, 0, NULL);
  json_t *out = NULL;
  char *err = NULL;
  cr_assert_eq(ak_sources_check_spec(cfg, id, spec, flags, &out, NULL, &err), -1, "accepted: %s", spec_json);
  cr_assert_null(out);
  json_decref(spec);
  return err;
}

/* The sink types every build knows; a test build adds its test-only sink (sinks/test_echo.c). */
#ifdef AK_TEST_HOOKS
#define TEST_SINKS ", test_echo"
#else
#define TEST_SINKS ""
#endif

static void expect_err(const ak_config_t *cfg, const char *id, const char *spec_json, const char *want) {
  char *err = check_err(cfg, id, spec_json, 0);
  cr_expect_str_eq(err, want, "spec %s", spec_json);
  free(err);
}

Test(source_check, the_config_loaders_rules_with_dotted_keys) {
  ak_config_t *cfg = load("egress: {allow_http: false}\nsources: {}\n");
  expect_err(cfg, "x", "{}", "sources.x: missing required key \"sinks\"");
  expect_err(cfg, "x", "{\"sinks\":[{\"type\":\"log\"}],\"colour\":1}", "sources.x: unknown key \"colour\"");
  expect_err(cfg, "x", "{\"sinks\":[{\"type\":\"ftp\"}]}",
             "sources.x.sinks[0].type: unknown value \"ftp\"; expected one of log, http, kafka, rabbitmq, nats, "
             "redis, sqs, google_pubsub" TEST_SINKS);
  expect_err(cfg, "x", "{\"sinks\":[{\"type\":\"http\",\"url\":\"http://10.0.0.1/h\"}]}",
             "sources.x.sinks[0].url: http:// is refused; use https:// or set egress.allow_http: true");
  expect_err(cfg, "x", "{\"sinks\":[{\"type\":\"log\"}],\"forward_headers\":[\"\"]}",
             "sources.x.forward_headers[0]: must not be empty");
  expect_err(cfg, "x", "{\"sinks\":[{\"type\":\"log\"}],\"verify\":{\"type\":\"client_cert\",\"pins\":[\""
             "0000000000000000000000000000000000000000000000000000000000000000\"]}}",
             "sources.x.verify: type client_cert needs http.tls with a client_ca (and client_cert request or "
             "require): no request could ever pass");
  expect_err(cfg, "bad id", "{\"sinks\":[{\"type\":\"log\"}]}",
             "sources: invalid source id \"bad id\"; expected [A-Za-z0-9_-]{1,64}");
  expect_err(cfg, "x", "[1]", "sources.x: expected a mapping, got [...]");
  ak_config_free(cfg);
}

/* The egress rule (sinks/egress.h): a config-file source's http sink is trusted (http://,
 * loopback, private), the same sink sent to the admin API is guarded, whatever
 * egress.guard_static_sources says; the opt-in guards the config file's too. */
Test(source_check, api_sinks_are_guarded_config_sinks_trusted) {
  static const char *quickstart =
    "sources:\n  demo:\n    sinks: [{type: http, url: \"http://127.0.0.1:8080/hooks\"}]\n";
  ak_config_t *cfg = load(quickstart);
  cr_expect_eq(ak_sources_cfg(cfg)->n, 1, "the config file's http:// loopback sink loads");
  const char *spec = "{\"sinks\":[{\"type\":\"http\",\"url\":\"http://127.0.0.1:8080/hooks\"}]}";
  expect_err(cfg, "x", spec, "sources.x.sinks[0].url: http:// is refused; use https:// or set egress.allow_http: true");
  expect_err(cfg, "x", "{\"sinks\":[{\"type\":\"http\",\"url\":\"https://10.1.2.3/hooks\"}]}",
             "sources.x.sinks[0].url: egress: 10.1.2.3 is not a public address (egress.allow_cidrs can allow it)");
  json_decref(checked(cfg, "x", "{\"sinks\":[{\"type\":\"http\",\"url\":\"https://hooks.example.com/in\"}]}"));
  ak_config_free(cfg);

  cfg = load("egress: {guard_static_sources: false, allow_http: true}\nsources: {}\n");
  expect_err(cfg, "x", spec,
             "sources.x.sinks[0].url: egress: 127.0.0.1 is not a public address (egress.allow_cidrs can allow it)");
  ak_config_free(cfg);
  cfg = load("egress: {allow_http: true, allow_cidrs: [127.0.0.0/8]}\nsources: {}\n");
  json_decref(checked(cfg, "x", spec)); /* the allow list opens it for the API too */
  ak_config_free(cfg);

  const char *const env[] = {NULL};
  char *err = NULL;
  cfg = NULL;
  char *y = NULL;
  cr_assert(asprintf(&y, "egress: {guard_static_sources: true}\n%s", quickstart) > 0);
  cr_expect_neq(ak_config_load_string(ak_modules(), y, strlen(y), env, &cfg, &err), 0, "the opt-in guards it");
  cr_expect(err && strstr(err, "sources.demo.sinks[0].url: http:// is refused"), "%s", err ? err : "");
  free(err);
  free(y);
  ak_config_free(cfg);
}

Test(source_check, literal_defaults_and_the_trust_rule) {
  ak_config_t *cfg = load("http: {routing: tenant_path}\nsources: {}\n");
  /* literal: ${VAR} is the caller's text, never the node's environment */
  json_t *c = checked(cfg, "x", "{\"tenant\":\"t\",\"sinks\":[{\"type\":\"log\"}],"
                                "\"verify\":{\"type\":\"github\",\"secret\":\"${HOME}\"}}");
  cr_expect_str_eq(json_string_value(json_object_get(json_object_get(c, "verify"), "secret")), "${HOME}");
  cr_expect_str_eq(json_string_value(json_object_get(c, "on_verify_failure")), "reject", "defaults filled in");
  ak_source_cfg_t s;
  cr_assert_eq(ak_source_cfg_build("x", c, &s), 0);
  cr_expect_str_eq(s.tenant, "t");
  cr_expect_str_eq(s.verify_type, "github");
  cr_expect_eq(s.nsinks, 1);
  ak_source_cfg_clear(&s);
  json_decref(c);
  /* a shared unverified source under tenant_path: refused, or a warning when read back */
  const char *open = "{\"sinks\":[{\"type\":\"log\"}]}";
  char *err = check_err(cfg, "open", open, 0);
  cr_expect(strstr(err, "sources.open: a shared source") && strstr(err, "trust_url_tenant"), "%s", err);
  free(err);
  json_t *spec = json_loads(open, 0, NULL);
  char *warning = NULL;
  cr_assert_eq(ak_sources_check_spec(cfg, "open", spec, AK_SOURCE_CHECK_STORED, &c, &warning, &err), 0);
  cr_assert_not_null(warning);
  cr_expect(strstr(warning, "sources.open: a shared source") != NULL, "%s", warning);
  free(warning);
  json_decref(c);
  json_decref(spec);
  ak_config_free(cfg);
}

Test(source_check, source_store_section) {
  ak_config_t *cfg = load("source_store: {type: persistent, secret_key: AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=}\n");
  cr_expect(ak_source_store_persistent(cfg));
  ak_config_free(cfg);
  const char *const env[] = {NULL};
  char *err = NULL;
  ak_config_t *bad = NULL;
  const char *y1 = "source_store: {url: 'redis://h:6379'}\n";
  cr_assert_eq(ak_config_load_string(ak_modules(), y1, strlen(y1), env, &bad, &err), -1);
  cr_expect(strstr(err, "source_store.secret_key: required with type redis") != NULL, "%s", err);
  free(err);
  /* a url without a type means redis; with a key it loads */
  ak_config_t *rc = load("source_store: {url: 'redis://:pw@h:6379/2', secret_key: "
                         "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=}\n");
  cr_expect(ak_source_store_redis(rc));
  cr_expect(!ak_source_store_persistent(rc));
  ak_config_free(rc);
  const char *y4 = "source_store: {type: redis, secret_key: AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=}\n";
  cr_assert_eq(ak_config_load_string(ak_modules(), y4, strlen(y4), env, &bad, &err), -1);
  cr_expect(strstr(err, "source_store.url: required with type redis") != NULL, "%s", err);
  free(err);
  const char *y5 = "source_store: {url: 'http://h', secret_key: AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=}\n";
  cr_assert_eq(ak_config_load_string(ak_modules(), y5, strlen(y5), env, &bad, &err), -1);
  cr_expect(strstr(err, "source_store.url: ") != NULL && !strstr(err, "http://h"), "%s", err);
  free(err);
  const char *y2 = "source_store: {type: persistent, tick_ms: 5, secret_key: AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=}\n";
  cr_assert_eq(ak_config_load_string(ak_modules(), y2, strlen(y2), env, &bad, &err), -1);
  cr_expect_str_eq(err, "source_store.tick_ms: only valid with type redis, not persistent");
  free(err);
  const char *y3 = "source_store: {type: shared}\n";
  cr_assert_eq(ak_config_load_string(ak_modules(), y3, strlen(y3), env, &bad, &err), -1);
  cr_expect_str_eq(err, "source_store.type: unknown value \"shared\"; expected one of static, persistent, redis");
  free(err);
}
