/* Unit tests of dedupe: the sources.<id>.dedupe and dedupe.* config keys and their
 * errors, key extraction (every preset, header, json path, value types, the 200-byte
 * rule), the record's dedupe key (v2), and the index behind the writer: first occurrence
 * wins inside one batch with dense seqs, quotas, the index rebuilt from the store, and
 * the sweeper's stale delete of a key refreshed after it was read. */
#include <criterion/criterion.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/clock.h"
#include "core/config.h"
#include "core/envelope.h"
#include "core/instance.h"
#include "edge/dedupe_key.h"
#include "queue/dedupe.h"
#include "queue/sweeper.h"
#include "queue/writer.h"
#include "store/batch.h"
#include "store/store.h"
#include "writer_waiter.h"
#include "core/sources.h"
#include "fixture.h"
#include "modules.h"

static const char *const NOENV[] = {NULL};

static ak_config_t *load_ok(const char *yaml) {
  ak_config_t *cfg = NULL;
  char *err = NULL;
  int rc = ak_config_load_string(ak_modules(), yaml, strlen(yaml), NOENV, &cfg, &err);
  cr_assert_eq(rc, 0, "load failed: %s\n%s", err ? err : "(no message)", yaml);
  return cfg;
}

static void expect_err(const char *yaml, const char *want) {
  ak_config_t *cfg = NULL;
  char *err = NULL;
  int rc = ak_config_load_string(ak_modules(), yaml, strlen(yaml), NOENV, &cfg, &err);
  cr_assert_eq(rc, -1, "load unexpectedly succeeded for:\n%s", yaml);
  cr_expect_str_eq(err, want, "yaml:\n%s", yaml);
  free(err);
}

#define SRC "sources:\n  a:\n    sinks: [{type: log}]\n"

/* ------------------------------------------------------------------- config ---- */

static void expect_source(const char *dedupe_yaml, ak_dedupe_from_t from, const char *field, int64_t ttl_ms) {
  char yaml[512];
  snprintf(yaml, sizeof yaml, SRC "    dedupe: %s\n", dedupe_yaml);
  ak_config_t *cfg = load_ok(yaml);
  const ak_source_cfg_t *s = ak_source_cfg_find(cfg, "a");
  cr_assert_not_null(s);
  cr_expect_eq(s->dedupe_from, from, "%s", dedupe_yaml);
  if (field) cr_expect_str_eq(s->dedupe_field, field, "%s", dedupe_yaml);
  else cr_expect_null(s->dedupe_field);
  cr_expect_eq(s->dedupe_ttl_ms, ttl_ms, "%s", dedupe_yaml);
  ak_config_free(cfg);
}

Test(dedupe_config, presets_headers_and_paths) {
  expect_source("github", AK_DEDUPE_HEADER, "x-github-delivery", 259200000);
  expect_source("standard_webhooks", AK_DEDUPE_HEADER, "webhook-id", 259200000);
  expect_source("svix", AK_DEDUPE_HEADER, "svix-id", 259200000);
  expect_source("shopify", AK_DEDUPE_HEADER, "x-shopify-webhook-id", 259200000);
  expect_source("stripe", AK_DEDUPE_JSON, "id", 259200000);
  expect_source("{preset: github, ttl_seconds: 60}", AK_DEDUPE_HEADER, "x-github-delivery", 60000);
  expect_source("{header: X-Event-ID}", AK_DEDUPE_HEADER, "x-event-id", 259200000);
  expect_source("{json: data.object.id, ttl_seconds: \"1\"}", AK_DEDUPE_JSON, "data.object.id", 1000);
  expect_source("null", AK_DEDUPE_NONE, NULL, 0);
  expect_source("~", AK_DEDUPE_NONE, NULL, 0);
}

Test(dedupe_config, absent_is_off_and_root_defaults) {
  ak_config_t *cfg = load_ok(SRC "dedupe: {max_entries: 5, max_entries_per_tenant: 2, sweep_interval_ms: 50}\n");
  cr_expect_eq(ak_sources_cfg(cfg)->v[0].dedupe_from, AK_DEDUPE_NONE);
  cr_expect_eq(ak_dedupe_cfg(cfg)->max_entries, 5);
  cr_expect_eq(ak_dedupe_cfg(cfg)->max_entries_per_tenant, 2);
  cr_expect_eq(ak_dedupe_cfg(cfg)->sweep_interval_ms, 50);
  json_t *src = json_object_get(json_object_get(cfg->effective, "sources"), "a");
  cr_expect_null(json_object_get(src, "dedupe"), "absent stays absent in print-config");
  ak_config_free(cfg);
  /* the shorthand is shown as the mapping it stands for */
  cfg = load_ok(SRC "    dedupe: svix\n");
  src = json_object_get(json_object_get(cfg->effective, "sources"), "a");
  char *s = json_dumps(json_object_get(src, "dedupe"), JSON_COMPACT);
  cr_expect_str_eq(s, "{\"preset\":\"svix\",\"header\":null,\"json\":null,\"ttl_seconds\":259200}");
  free(s);
  ak_config_free(cfg);
}

Test(dedupe_config, errors_name_the_dotted_key) {
  expect_err(SRC "    dedupe: gitlab\n",
             "sources.a.dedupe: unknown value \"gitlab\"; expected one of github, standard_webhooks, svix, shopify, "
             "stripe");
  expect_err(SRC "    dedupe: {preset: gitlab}\n",
             "sources.a.dedupe.preset: unknown value \"gitlab\"; expected one of github, standard_webhooks, svix, "
             "shopify, stripe");
  expect_err(SRC "    dedupe: {}\n", "sources.a.dedupe: set exactly one of preset, header or json");
  expect_err(SRC "    dedupe: {ttl_seconds: 5}\n", "sources.a.dedupe: set exactly one of preset, header or json");
  expect_err(SRC "    dedupe: {header: x-id, json: id}\n",
             "sources.a.dedupe: set exactly one of preset, header or json");
  expect_err(SRC "    dedupe: {preset: stripe, header: x-id}\n",
             "sources.a.dedupe: set exactly one of preset, header or json");
  expect_err(SRC "    dedupe: {header: \"\"}\n", "sources.a.dedupe.header: must not be empty");
  expect_err(SRC "    dedupe: {header: \"x id\"}\n", "sources.a.dedupe.header: \"x id\" is not a header name");
  expect_err(SRC "    dedupe: {json: \"\"}\n", "sources.a.dedupe.json: must not be empty");
  expect_err(SRC "    dedupe: {json: data..id}\n",
             "sources.a.dedupe.json: \"data..id\" has an empty segment; expected object keys joined by dots "
             "(data.object.id)");
  expect_err(SRC "    dedupe: {json: .id}\n",
             "sources.a.dedupe.json: \".id\" has an empty segment; expected object keys joined by dots "
             "(data.object.id)");
  expect_err(SRC "    dedupe: {json: id.}\n",
             "sources.a.dedupe.json: \"id.\" has an empty segment; expected object keys joined by dots "
             "(data.object.id)");
  expect_err(SRC "    dedupe: {header: x-id, ttl_seconds: 0}\n",
             "sources.a.dedupe.ttl_seconds must be between 1 and 315360000, got 0");
  expect_err(SRC "    dedupe: {header: x-id, ttl_seconds: soon}\n",
             "sources.a.dedupe.ttl_seconds: expected an integer, got \"soon\"");
  expect_err(SRC "    dedupe: {header: x-id, ttl_ms: 1000}\n", "sources.a.dedupe: unknown key \"ttl_ms\"");
  expect_err(SRC "    dedupe: [github]\n", "sources.a.dedupe: expected a name or a mapping, got [...]");
  expect_err(SRC "dedupe: {max_entries: 0}\n", "dedupe.max_entries must be positive, got 0");
  expect_err(SRC "dedupe: {max_entries_per_tenant: -1}\n", "dedupe.max_entries_per_tenant must be positive, got -1");
  expect_err(SRC "dedupe: {sweep_interval_ms: 0}\n", "dedupe.sweep_interval_ms must be positive, got 0");
  expect_err(SRC "dedupe: {max_keys: 1}\n", "dedupe: unknown key \"max_keys\"");
}

/* --------------------------------------------------------------- extraction ---- */

static ak_source_cfg_t src_of(ak_dedupe_from_t from, const char *field) {
  ak_source_cfg_t s;
  memset(&s, 0, sizeof s);
  s.id = "a";
  s.tenant = "default";
  s.dedupe_from = from;
  s.dedupe_field = (char *)field;
  s.dedupe_ttl_ms = 1000;
  return s;
}

static char *key_of(ak_dedupe_from_t from, const char *field, const ak_header_t *h, size_t nh, const char *body) {
  ak_source_cfg_t s = src_of(from, field);
  size_t len = 12345;
  char *k = ak_dedupe_key_extract(&s, h, nh, (const uint8_t *)body, body ? strlen(body) : 0, &len);
  if (k) cr_expect_eq(len, strlen(k));
  else cr_expect_eq(len, 0);
  return k;
}

static void expect_key(ak_dedupe_from_t from, const char *field, const ak_header_t *h, size_t nh, const char *body,
                       const char *want) {
  char *k = key_of(from, field, h, nh, body);
  if (want) {
    cr_assert_not_null(k, "no key; want %s (field %s, body %s)", want, field, body ? body : "-");
    cr_expect_str_eq(k, want, "field %s, body %s", field, body ? body : "-");
  } else {
    cr_expect_null(k, "key %s; want none (field %s, body %s)", k ? k : "", field, body ? body : "-");
  }
  free(k);
}

#define H(n, v) {n, sizeof(n) - 1, v, sizeof(v) - 1}

Test(dedupe_key, every_preset_reads_its_header_in_any_case) {
  static const struct {
    const char *preset, *sent;
  } cases[] = {
    {"github", "X-GitHub-Delivery"},     {"standard_webhooks", "Webhook-Id"}, {"svix", "SVIX-ID"},
    {"shopify", "X-Shopify-Webhook-Id"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char yaml[256];
    snprintf(yaml, sizeof yaml, SRC "    dedupe: %s\n", cases[i].preset);
    ak_config_t *cfg = load_ok(yaml);
    ak_header_t h[] = {H("Content-Type", "application/json"),
                       {cases[i].sent, strlen(cases[i].sent), "evt-42", 6}};
    size_t len;
    char *k = ak_dedupe_key_extract(&ak_sources_cfg(cfg)->v[0], h, 2, (const uint8_t *)"{}", 2, &len);
    cr_assert_not_null(k, "%s", cases[i].preset);
    cr_expect_str_eq(k, "evt-42");
    free(k);
    /* a body id is not a header */
    k = ak_dedupe_key_extract(&ak_sources_cfg(cfg)->v[0], h, 1, (const uint8_t *)"{\"id\":\"x\"}", 10, &len);
    cr_expect_null(k, "%s: no header, no key", cases[i].preset);
    ak_config_free(cfg);
  }
  ak_config_t *cfg = load_ok(SRC "    dedupe: stripe\n");
  const char *body = "{\"id\":\"evt_1Nq\",\"object\":\"event\",\"data\":{\"object\":{\"id\":\"pi_1\"}}}";
  size_t len;
  char *k = ak_dedupe_key_extract(&ak_sources_cfg(cfg)->v[0], NULL, 0, (const uint8_t *)body, strlen(body), &len);
  cr_assert_not_null(k);
  cr_expect_str_eq(k, "evt_1Nq");
  free(k);
  ak_config_free(cfg);
}

Test(dedupe_key, header_rules) {
  ak_header_t h[] = {H("X-Other", "1"), H("x-event-id", "first"), H("X-Event-Id", "second")};
  expect_key(AK_DEDUPE_HEADER, "x-event-id", h, 3, NULL, "first");
  expect_key(AK_DEDUPE_HEADER, "x-missing", h, 3, NULL, NULL);
  ak_header_t empty[] = {H("x-event-id", "")};
  expect_key(AK_DEDUPE_HEADER, "x-event-id", empty, 1, NULL, NULL);
  ak_header_t spaced[] = {H("x-event-id", "a b")};
  expect_key(AK_DEDUPE_HEADER, "x-event-id", spaced, 1, NULL, "a b");
  expect_key(AK_DEDUPE_NONE, NULL, h, 3, NULL, NULL);
}

Test(dedupe_key, json_paths_and_value_types) {
  expect_key(AK_DEDUPE_JSON, "id", NULL, 0, "{\"id\":\"evt_1\"}", "evt_1");
  expect_key(AK_DEDUPE_JSON, "id", NULL, 0, "{\"id\":12345678901234}", "12345678901234");
  expect_key(AK_DEDUPE_JSON, "id", NULL, 0, "{\"id\":-7}", "-7");
  expect_key(AK_DEDUPE_JSON, "id", NULL, 0, "{\"id\":0}", "0");
  expect_key(AK_DEDUPE_JSON, "data.object.id", NULL, 0, "{\"data\":{\"object\":{\"id\":\"pi_9\"}},\"id\":\"top\"}",
             "pi_9");
  expect_key(AK_DEDUPE_JSON, "meta.seq", NULL, 0, "{\"meta\":{\"seq\":42}}", "42");
  /* no key: missing, wrong types, arrays (object keys only), empty string, not JSON */
  expect_key(AK_DEDUPE_JSON, "id", NULL, 0, "{\"other\":\"x\"}", NULL);
  expect_key(AK_DEDUPE_JSON, "id", NULL, 0, "{\"id\":\"\"}", NULL);
  expect_key(AK_DEDUPE_JSON, "id", NULL, 0, "{\"id\":1.5}", NULL);
  expect_key(AK_DEDUPE_JSON, "id", NULL, 0, "{\"id\":true}", NULL);
  expect_key(AK_DEDUPE_JSON, "id", NULL, 0, "{\"id\":null}", NULL);
  expect_key(AK_DEDUPE_JSON, "id", NULL, 0, "{\"id\":{\"a\":1}}", NULL);
  expect_key(AK_DEDUPE_JSON, "id", NULL, 0, "{\"id\":[\"a\"]}", NULL);
  expect_key(AK_DEDUPE_JSON, "items.0", NULL, 0, "{\"items\":[\"a\"]}", NULL);
  expect_key(AK_DEDUPE_JSON, "items.0.id", NULL, 0, "{\"items\":[{\"id\":\"a\"}]}", NULL);
  expect_key(AK_DEDUPE_JSON, "id", NULL, 0, "[{\"id\":\"a\"}]", NULL);
  expect_key(AK_DEDUPE_JSON, "a.id", NULL, 0, "{\"a\":\"id\"}", NULL);
  expect_key(AK_DEDUPE_JSON, "id", NULL, 0, "id=evt_1&type=x", NULL);
  expect_key(AK_DEDUPE_JSON, "id", NULL, 0, "{\"id\":\"evt_1\"", NULL);
  expect_key(AK_DEDUPE_JSON, "id", NULL, 0, "", NULL);
  expect_key(AK_DEDUPE_JSON, "id", NULL, 0, NULL, NULL);
  /* a key holding a dot is not reachable as one segment */
  expect_key(AK_DEDUPE_JSON, "a.b", NULL, 0, "{\"a.b\":\"x\"}", NULL);
}

static void sha256_key(const char *v, size_t n, char out[72]) {
  unsigned char dg[32];
  unsigned int dl;
  EVP_Digest(v, n, dg, &dl, EVP_sha256(), NULL);
  strcpy(out, "sha256:");
  for (int i = 0; i < 32; i++) snprintf(out + 7 + 2 * i, 3, "%02x", dg[i]);
}

Test(dedupe_key, keys_over_200_bytes_are_hashed) {
  char v[400], want[72], body[512];
  memset(v, 'k', sizeof v);
  for (size_t n = 199; n <= 202; n++) {
    v[n] = '\0';
    ak_header_t h[] = {{"x-id", 4, v, n}};
    char *k = key_of(AK_DEDUPE_HEADER, "x-id", h, 1, NULL);
    cr_assert_not_null(k);
    if (n <= AK_DEDUPE_KEY_MAX) {
      cr_expect_str_eq(k, v, "a key of %zu bytes is kept as is", n);
    } else {
      sha256_key(v, n, want);
      cr_expect_str_eq(k, want, "a key of %zu bytes is hashed", n);
      cr_expect_eq(strlen(k), 71);
    }
    free(k);
    snprintf(body, sizeof body, "{\"id\":\"%s\"}", v);
    k = key_of(AK_DEDUPE_JSON, "id", NULL, 0, body);
    cr_assert_not_null(k);
    if (n > AK_DEDUPE_KEY_MAX) cr_expect_str_eq(k, want);
    else cr_expect_str_eq(k, v);
    free(k);
    v[n] = 'k';
  }
}

/* ---------------------------------------------------------------- envelope ---- */

Test(dedupe_record, key_in_v2_and_v1_unchanged_without) {
  ak_envelope_t e = {0};
  e.tenant = "t";
  e.tenant_len = 1;
  e.source = "s";
  e.source_len = 1;
  e.body = (const uint8_t *)"hi";
  e.body_len = 2;
  size_t n1, n2;
  uint8_t *v1 = ak_envelope_encode(&e, &n1);
  cr_assert_eq(v1[0], AK_ENV_VERSION, "no key: still a v1 record");
  e.dedupe_key = "evt_1";
  e.dedupe_key_len = 5;
  uint8_t *v2 = ak_envelope_encode(&e, &n2);
  cr_assert_eq(v2[0], AK_ENV_VERSION_DEDUPE);
  cr_assert_eq(n2, n1 + 2 + 5);
  cr_assert_eq(memcmp(v1 + 1, v2 + 1, n1 - 1), 0, "v2 is v1 plus the key");
  ak_envelope_t d;
  cr_assert_eq(ak_envelope_decode(v1, n1, &d), 0);
  cr_expect_null(d.dedupe_key);
  cr_expect_eq(d.dedupe_key_len, 0);
  ak_envelope_clear(&d);
  cr_assert_eq(ak_envelope_decode(v2, n2, &d), 0);
  cr_expect_eq(d.dedupe_key_len, 5);
  cr_expect_eq(memcmp(d.dedupe_key, "evt_1", 5), 0);
  cr_expect_eq(d.body_len, 2);
  ak_envelope_clear(&d);
  for (size_t cut = n1; cut < n2; cut++) cr_expect_neq(ak_envelope_decode(v2, cut, &d), 0, "cut at %zu", cut);
  v1[0] = AK_ENV_VERSION_DEDUPE; /* a v2 record must carry a key */
  cr_expect_neq(ak_envelope_decode(v1, n1, &d), 0);
  free(v1);
  free(v2);
}

/* ------------------------------------------------------- index and writer ---- */

static ak_fx_t fx;
static char clock_file[300];

static void set_clock(long long offset_ms) {
  FILE *f = fopen(clock_file, "w");
  cr_assert_not_null(f);
  fprintf(f, "%lld\n", offset_ms);
  fclose(f);
}

static void setup(void) {
  ak_fx_tmp(&fx, "dedupe-test");
  snprintf(clock_file, sizeof clock_file, "%s/clock", fx.dir);
  set_clock(0);
  setenv("ANKUSA_TEST_DEDUPE_CLOCK_FILE", clock_file, 1);
}

static void teardown(void) {
  ak_fx_close(&fx);
  ak_fx_rm(&fx);
}

/* A test's handle on the suite's node: the store, the dedupe index and the writer, opened
 * by their modules. The writer is started, the sweeper is not: the tests sweep by hand
 * (one starts a sweeper of its own). */
typedef struct {
  ak_instance_t *inst;
  ak_writer_t *w;
} node_t;

static const char *const store_dedupe_writer[] = {"node", "store", "dedupe", "batcher", NULL};

/* The suite's sources after extra, opened with the modules of only. */
static void node_open_only(node_t *n, const char *extra, const char *const *only) {
  char yaml[1024];
  snprintf(yaml, sizeof yaml,
           "%s"
           "sources:\n"
           "  a: {tenant: t1, sinks: [{type: log}], dedupe: {header: x-id, ttl_seconds: 60}}\n"
           "  b: {tenant: t2, sinks: [{type: log}], dedupe: {header: x-id, ttl_seconds: 60}}\n"
           "  c: {tenant: t1, sinks: [{type: log}], dedupe: {header: x-id, ttl_seconds: 3600}}\n",
           extra);
  memset(n, 0, sizeof *n);
  ak_fx_open(&fx, yaml, only);
  n->inst = fx.inst;
}

static void node_open(node_t *n, const char *extra) {
  node_open_only(n, extra, store_dedupe_writer);
  cr_assert_not_null(n->inst->dedupe);
  n->w = n->inst->writer;
  cr_assert_not_null(n->w);
  cr_assert_eq(ak_writer_start(n->w), 0);
}

static void node_close(node_t *n) {
  ak_fx_close(&fx);
  memset(n, 0, sizeof *n);
}


/* A hook of source si carrying key (or none), ready to submit. */
static void make_req(node_t *n, ak_write_req_t *r, size_t si, const char *key, waiter_t *wt) {
  memset(r, 0, sizeof *r);
  const ak_source_cfg_t *s = &ak_sources_cfg(n->inst->cfg)->v[si];
  ak_envelope_t e = {0};
  ak_uuid7_new(&n->inst->ids, 1000, e.id);
  memcpy(r->id, e.id, 16);
  e.tenant = s->tenant;
  e.tenant_len = strlen(s->tenant);
  e.source = s->id;
  e.source_len = strlen(s->id);
  e.body = (const uint8_t *)"b";
  e.body_len = 1;
  e.dedupe_key = key;
  e.dedupe_key_len = key ? strlen(key) : 0;
  r->rec = ak_envelope_encode(&e, &r->rec_len);
  r->body_len = 1;
  r->source = s;
  r->tenant = s->tenant;
  r->tenant_len = strlen(s->tenant);
  if (key) r->dedupe = ak_dedupe_claim_new(s->tenant, strlen(s->tenant), s->id, key, strlen(key), s->dedupe_ttl_ms);
  r->done = on_done;
  r->ctx = wt;
}

static void free_req(ak_write_req_t *r) {
  free(r->rec);
  ak_dedupe_claim_free(r->dedupe);
}

static int count_cb(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  (void)k, (void)kl, (void)v, (void)vl;
  (*(int *)ctx)++;
  return 0;
}

/* The first key and value of a scan, copied. */
typedef struct {
  char *k, *v;
  size_t kl, vl;
} first_t;

static int first_cb(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  first_t *f = ctx;
  f->k = malloc(kl);
  f->v = malloc(vl);
  memcpy(f->k, k, kl);
  memcpy(f->v, v, vl);
  f->kl = kl;
  f->vl = vl;
  return 1;
}

static int count_cf(node_t *n, int cf, char prefix) {
  int c = 0;
  cr_assert_eq(ak_store_scan(n->inst->store, cf, prefix ? &prefix : NULL, prefix ? 1 : 0, count_cb, &c), 0);
  return c;
}

static double metric(node_t *n, const char *series) {
  size_t len;
  char *text = ak_metrics_render(n->inst->metrics, &len);
  const char *p = strstr(text, series);
  double v = p ? atof(p + strlen(series)) : -1;
  free(text);
  return v;
}

/* One batch (the writer is held in a commit while they queue), three occurrences of a key
 * and two other keys: the first occurrence gets the first seq, its repeats no seq and its
 * id, the other keys the next seqs. */
Test(dedupe_index, first_occurrence_wins_inside_one_batch, .init = setup, .fini = teardown) {
  node_t n;
  setenv("ANKUSA_TEST_COMMIT_DELAY_MS", "300", 1);
  node_open(&n, "");
  unsetenv("ANKUSA_TEST_COMMIT_DELAY_MS");
  waiter_t wt = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
  ak_write_req_t plug, r[5];
  make_req(&n, &plug, 0, NULL, &wt);
  cr_assert_eq(ak_writer_submit(n.w, &plug), AK_WR_QUEUED);
  usleep(100000); /* the writer took the plug and sleeps in its commit */
  make_req(&n, &r[0], 0, "evt-1", &wt);
  make_req(&n, &r[1], 0, "evt-1", &wt);
  make_req(&n, &r[2], 0, "evt-2", &wt);
  make_req(&n, &r[3], 0, "evt-1", &wt);
  make_req(&n, &r[4], 1, "evt-1", &wt); /* another source: another scope */
  for (int i = 0; i < 5; i++) cr_assert_eq(ak_writer_submit(n.w, &r[i]), AK_WR_QUEUED);
  wait_for(&wt, 6);
  cr_expect_eq(metric(&n, "ankusa_commit_batch_size_count{instance=\"default\"} "), 2,
               "the plug, then all five in one batch");
  cr_expect_eq(plug.seq, 1);
  free_req(&plug);
  cr_expect_eq(r[0].status, AK_WR_COMMITTED);
  cr_expect_eq(r[0].seq, 2);
  cr_expect_eq(r[1].seq, 0);
  cr_expect_eq(r[3].seq, 0);
  cr_expect_eq(r[1].status, AK_WR_DUPLICATE);
  cr_expect_eq(memcmp(r[1].dedupe->first_id, r[0].id, 16), 0);
  cr_expect_eq(r[3].status, AK_WR_DUPLICATE);
  cr_expect_eq(memcmp(r[3].dedupe->first_id, r[0].id, 16), 0);
  cr_expect_eq(r[2].status, AK_WR_COMMITTED);
  cr_expect_eq(r[2].seq, 3, "seqs stay dense: a repeat takes none");
  cr_expect_eq(r[4].status, AK_WR_COMMITTED);
  cr_expect_eq(r[4].seq, 4);
  cr_expect_eq(count_cf(&n, AK_CF_HOOKS, 0), 4);
  cr_expect_eq(count_cf(&n, AK_CF_DEDUPE, 'e'), 1, "the commit's three keys in one record");
  cr_expect_eq(ak_dedupe_count(n.inst->dedupe), 3);
  /* across batches: a repeat after the commit */
  ak_write_req_t again;
  make_req(&n, &again, 0, "evt-2", &wt);
  cr_assert_eq(ak_writer_submit(n.w, &again), AK_WR_QUEUED);
  wait_for(&wt, 7);
  cr_expect_eq(again.status, AK_WR_DUPLICATE);
  cr_expect_eq(memcmp(again.dedupe->first_id, r[2].id, 16), 0);
  uint8_t first[16];
  cr_expect(ak_dedupe_seen(n.inst->dedupe, r[0].dedupe, first), "the edge sees a committed key");
  cr_expect_eq(memcmp(first, r[0].id, 16), 0);
  for (int i = 0; i < 5; i++) free_req(&r[i]);
  free_req(&again);
  node_close(&n);
  /* the index comes back from the store */
  node_open(&n, "");
  cr_expect_eq(ak_dedupe_count(n.inst->dedupe), 3);
  make_req(&n, &again, 0, "evt-1", &wt);
  cr_expect(ak_dedupe_seen(n.inst->dedupe, again.dedupe, first));
  cr_expect_eq(memcmp(first, r[0].id, 16), 0, "the same first id after a reopen");
  free_req(&again);
  node_close(&n);
}

/* The keys of one commit are written as a few records, not one store key each: keys
 * whose expiries are close share a record (up to 8 KiB), keys of another TTL get their
 * own, and each is swept when its own keys expire. 40 keys of 200 bytes (60 s TTL) take
 * two records, 3 keys of a 3600 s source a third; all come back after a reopen with their
 * own ids; at 61 s the sweeper removes exactly the 40 (one whole record per pass of 10),
 * at 3601 s the rest. */
Test(dedupe_index, a_commit_writes_its_keys_as_few_records, .init = setup, .fini = teardown) {
  enum { NA = 40, NC = 3, N = NA + NC };
  node_t n;
  setenv("ANKUSA_TEST_COMMIT_DELAY_MS", "300", 1);
  node_open(&n, "");
  unsetenv("ANKUSA_TEST_COMMIT_DELAY_MS");
  waiter_t wt = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
  ak_write_req_t plug, r[N];
  make_req(&n, &plug, 0, NULL, &wt);
  cr_assert_eq(ak_writer_submit(n.w, &plug), AK_WR_QUEUED);
  usleep(100000); /* the writer took the plug and sleeps in its commit */
  char key[N][201];
  for (int i = 0; i < N; i++) {
    memset(key[i], 'k', 200);
    key[i][200] = 0;
    snprintf(key[i], 12, "key-%06d", i);
    key[i][10] = 'k';
    /* interleaved: the two TTLs alternate in the batch */
    make_req(&n, &r[i], i % 14 == 13 ? 2 : 0, key[i], &wt);
  }
  int nc = 0;
  for (int i = 0; i < N; i++) nc += i % 14 == 13;
  cr_assert_eq(nc, NC);
  for (int i = 0; i < N; i++) cr_assert_eq(ak_writer_submit(n.w, &r[i]), AK_WR_QUEUED);
  wait_for(&wt, N + 1);
  cr_expect_eq(metric(&n, "ankusa_commit_batch_size_count{instance=\"default\"} "), 2,
               "the plug, then all of them in one batch");
  for (int i = 0; i < N; i++) cr_expect_eq(r[i].status, AK_WR_COMMITTED, "key %d", i);
  cr_expect_eq(count_cf(&n, AK_CF_DEDUPE, 'e'), 3, "two records of 60 s keys (8 KiB each at most), one of 3600 s");
  cr_expect_eq(ak_dedupe_count(n.inst->dedupe), N);
  node_close(&n);

  node_open(&n, "");
  cr_expect_eq(ak_dedupe_count(n.inst->dedupe), N, "every key of every record is read back");
  for (int i = 0; i < N; i++) {
    uint8_t first[16];
    cr_expect(ak_dedupe_seen(n.inst->dedupe, r[i].dedupe, first), "key %d after a reopen", i);
    cr_expect_eq(memcmp(first, r[i].id, 16), 0, "key %d keeps its own hook's id", i);
  }
  set_clock(61000);
  /* a pass takes whole records until it reaches its max: at least max when that many are
   * due (the sweeper repeats a pass that reached it), never a record in part */
  long n1 = ak_dedupe_sweep(n.inst->dedupe, 10, NULL, NULL);
  cr_expect(n1 >= 10 && n1 < NA, "one whole record of the 60 s keys (%ld)", n1);
  long n2 = ak_dedupe_sweep(n.inst->dedupe, 10, NULL, NULL);
  cr_expect_eq(n1 + n2, NA, "then the other: the 60 s keys, and only they");
  cr_expect_eq(ak_dedupe_sweep(n.inst->dedupe, 10, NULL, NULL), 0);
  cr_expect_eq(ak_dedupe_count(n.inst->dedupe), NC);
  cr_expect_eq(count_cf(&n, AK_CF_DEDUPE, 'e'), 1);
  for (int i = 0; i < N; i++) {
    uint8_t first[16];
    cr_expect_eq(ak_dedupe_seen(n.inst->dedupe, r[i].dedupe, first), i % 14 == 13, "key %d", i);
  }
  set_clock(3601000);
  cr_expect_eq(ak_dedupe_sweep(n.inst->dedupe, 10000, NULL, NULL), NC);
  cr_expect_eq(ak_dedupe_count(n.inst->dedupe), 0);
  cr_expect_eq(count_cf(&n, AK_CF_DEDUPE, 'e'), 0);
  free_req(&plug);
  for (int i = 0; i < N; i++) free_req(&r[i]);
  node_close(&n);
}

/* A store written before records (one v1 'e' key per event key) opens with its keys
 * beside new records, answers repeats of both, and sweeps both when they expire. */
Test(dedupe_index, v1_keys_load_and_sweep_beside_records, .init = setup, .fini = teardown) {
  node_t n;
  node_open(&n, "");
  ak_batch_t *wb = ak_batch_new(n.inst->store);
  int64_t at = ak_now_ms() + 60000;
  for (int i = 0; i < 2; i++) {
    char key[16];
    ak_dedupe_claim_t *c = ak_dedupe_claim_new("t1", 2, "a", key, (size_t)snprintf(key, sizeof key, "old-%d", i), 60000);
    uint8_t k[AK_DEDUPE_EKEY_MAX], v[17] = {1};
    size_t kl = ak_dedupe_ekey(k, at, c->scope, c->scope_len);
    v[1] = (uint8_t)(0xa0 + i);
    ak_batch_put(wb, AK_CF_DEDUPE, k, kl, v, sizeof v);
    ak_dedupe_claim_free(c);
  }
  char *err = NULL;
  cr_assert_eq(ak_store_write(n.inst->store, wb, true, NULL, &err), 0);
  ak_batch_free(wb);
  node_close(&n);

  node_open(&n, "");
  cr_expect_eq(ak_dedupe_count(n.inst->dedupe), 2, "the v1 keys are read");
  waiter_t wt = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
  ak_write_req_t old, fresh;
  make_req(&n, &old, 0, "old-1", &wt);
  make_req(&n, &fresh, 0, "new-1", &wt);
  cr_assert_eq(ak_writer_submit(n.w, &old), AK_WR_QUEUED);
  cr_assert_eq(ak_writer_submit(n.w, &fresh), AK_WR_QUEUED);
  wait_for(&wt, 2);
  cr_expect_eq(old.status, AK_WR_DUPLICATE, "a repeat of a v1 key");
  cr_expect_eq(old.dedupe->first_id[0], 0xa1, "answered with the v1 key's id");
  cr_expect_eq(fresh.status, AK_WR_COMMITTED);
  cr_expect_eq(count_cf(&n, AK_CF_DEDUPE, 'e'), 3, "two v1 keys and one record");
  set_clock(61000);
  cr_expect_eq(ak_dedupe_sweep(n.inst->dedupe, 10000, NULL, NULL), 3, "v1 keys and the record alike");
  cr_expect_eq(ak_dedupe_count(n.inst->dedupe), 0);
  cr_expect_eq(count_cf(&n, AK_CF_DEDUPE, 'e'), 0);
  free_req(&old);
  free_req(&fresh);
  node_close(&n);
}

/* The sweeper thread repeats a pass that reached its 10,000 keys at once, instead of
 * waiting an interval: 1,715 records of 7 keys (12,005) expire together; the first pass
 * takes whole records up to 10,003 keys (never exactly 10,000), and the rest must go
 * within a second, well before the next 2 s interval. */
Test(dedupe_index, the_sweeper_repeats_a_pass_that_reached_its_max, .init = setup, .fini = teardown) {
  enum { PER = 7, RECS = 1715, N = PER * RECS };
  const char *cfg = "dedupe: {sweep_interval_ms: 2000, max_entries: 100000, max_entries_per_tenant: 100000}\n";
  node_t n;
  node_open(&n, cfg);
  ak_batch_t *wb = ak_batch_new(n.inst->store);
  int64_t at = ak_now_ms() + 60000;
  ak_write_req_t r[PER];
  for (int rec = 0; rec < RECS; rec++) {
    for (int i = 0; i < PER; i++) {
      char key[32];
      memset(&r[i], 0, sizeof r[i]);
      r[i].seq = (uint64_t)(rec * PER + i + 1);
      r[i].dedupe = ak_dedupe_claim_new("t1", 2, "a", key, (size_t)snprintf(key, sizeof key, "k-%d-%d", rec, i), 60000);
      r[i].dedupe->state = AK_DEDUPE_CLAIM_PENDING;
      r[i].dedupe->expires_at_ms = at;
      r[i].next = i + 1 < PER ? &r[i + 1] : NULL;
    }
    ak_dedupe_put(n.inst->dedupe, wb, &r[0]);
    for (int i = 0; i < PER; i++) ak_dedupe_claim_free(r[i].dedupe);
  }
  char *err = NULL;
  cr_assert_eq(ak_store_write(n.inst->store, wb, true, NULL, &err), 0);
  ak_batch_free(wb);
  node_close(&n);

  node_open(&n, cfg);
  cr_assert_eq(count_cf(&n, AK_CF_DEDUPE, 'e'), RECS);
  cr_assert_eq(ak_dedupe_count(n.inst->dedupe), N);
  set_clock(61000);
  ak_sweeper_t *sw = ak_sweeper_start(n.inst, n.inst->dedupe);
  cr_assert_not_null(sw);
  int64_t t0 = ak_mono_ns(), t1 = 0, t2 = 0;
  while (ak_mono_ns() - t0 < 20 * 1000000000LL) {
    int64_t c = ak_dedupe_count(n.inst->dedupe);
    if (!t1 && c < N) t1 = ak_mono_ns();
    if (c == 0) {
      t2 = ak_mono_ns();
      break;
    }
    usleep(2000);
  }
  ak_sweeper_stop(sw);
  cr_assert(t1 && t2, "the sweeper swept them all (count %lld)", (long long)ak_dedupe_count(n.inst->dedupe));
  cr_expect_lt((t2 - t1) / 1000000, 1000, "the rest went with the full pass, not an interval later (%lld ms)",
               (long long)((t2 - t1) / 1000000));
  cr_expect_eq(count_cf(&n, AK_CF_DEDUPE, 'e'), 0);
  node_close(&n);
}

/* A damaged record (a key cut short inside a commit's record) refuses the open with an
 * error naming it: an unreadable index is never taken as empty. */
Test(dedupe_index, a_damaged_record_refuses_the_open, .init = setup, .fini = teardown) {
  node_t n;
  node_open(&n, "");
  waiter_t wt = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
  ak_write_req_t r;
  make_req(&n, &r, 0, "evt-1", &wt);
  cr_assert_eq(ak_writer_submit(n.w, &r), AK_WR_QUEUED);
  wait_for(&wt, 1);
  cr_assert_eq(r.status, AK_WR_COMMITTED);
  /* read the record back and store it again one byte short */
  first_t f = {0};
  cr_assert_eq(ak_store_scan(n.inst->store, AK_CF_DEDUPE, NULL, 0, first_cb, &f), 0);
  cr_assert_not_null(f.k);
  cr_assert_eq(f.kl, 17);
  cr_assert_gt(f.vl, 27);
  ak_batch_t *wb = ak_batch_new(n.inst->store);
  ak_batch_put(wb, AK_CF_DEDUPE, f.k, f.kl, f.v, f.vl - 1);
  free(f.k);
  free(f.v);
  char *err = NULL;
  cr_assert_eq(ak_store_write(n.inst->store, wb, true, NULL, &err), 0);
  ak_batch_free(wb);
  free_req(&r);
  node_close(&n);
  /* a restart with the store alone, the index read by hand: what the dedupe module's
   * open reads */
  static const char *const store_only[] = {"node", "store", NULL};
  node_open_only(&n, "", store_only);
  n.inst->dedupe = ak_dedupe_new(n.inst, &err);
  cr_expect_null(n.inst->dedupe);
  cr_expect_str_eq(err ? err : "", "a dedupe record in the store is damaged");
  free(err);
  ak_dedupe_free(n.inst->dedupe); /* not the node's to close: its module was not opened */
  n.inst->dedupe = NULL;
  node_close(&n);
}

Test(dedupe_index, quotas_per_node_and_per_tenant, .init = setup, .fini = teardown) {
  node_t n;
  node_open(&n, "dedupe: {max_entries: 3, max_entries_per_tenant: 2}\n");
  waiter_t wt = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
  ak_write_req_t r[7];
  const struct {
    size_t src;
    const char *key;
    ak_wr_status_t want;
  } steps[] = {
    {0, "k1", AK_WR_COMMITTED}, {0, "k2", AK_WR_COMMITTED},
    {0, "k3", AK_WR_DEDUPE_QUOTA},  /* tenant t1 is at 2 */
    {0, "k1", AK_WR_DUPLICATE},     /* a repeat needs no new key */
    {1, "k1", AK_WR_COMMITTED},     /* t2 has room, the node reaches 3 */
    {1, "k2", AK_WR_DEDUPE_QUOTA},  /* the node is at 3 */
    {0, NULL, AK_WR_COMMITTED},     /* a hook without a key is never refused */
  };
  uint64_t seq = 0;
  for (int i = 0; i < 7; i++) {
    make_req(&n, &r[i], steps[i].src, steps[i].key, &wt);
    cr_assert_eq(ak_writer_submit(n.w, &r[i]), AK_WR_QUEUED);
    wait_for(&wt, i + 1);
    cr_expect_eq(r[i].status, steps[i].want, "step %d: %d", i, r[i].status);
    if (r[i].status == AK_WR_COMMITTED) cr_expect_eq(r[i].seq, ++seq, "step %d: dense seqs", i);
  }
  cr_expect_eq(count_cf(&n, AK_CF_HOOKS, 0), 4, "a refused hook is not stored");
  for (int i = 0; i < 7; i++) free_req(&r[i]);
  node_close(&n);
  /* the counts come back from the store */
  node_open(&n, "dedupe: {max_entries: 3, max_entries_per_tenant: 2}\n");
  ak_write_req_t again;
  make_req(&n, &again, 1, "k9", &wt);
  cr_assert_eq(ak_writer_submit(n.w, &again), AK_WR_QUEUED);
  wait_for(&wt, 8);
  cr_expect_eq(again.status, AK_WR_DEDUPE_QUOTA);
  free_req(&again);
  node_close(&n);
}

typedef struct {
  node_t *n;
  waiter_t *wt;
  ak_write_req_t *refresh;
  int calls;
} gate_t;

/* Between the sweeper's read and its delete: the expired key is used again. */
static void refresh_between(void *ctx, size_t nread) {
  gate_t *g = ctx;
  g->calls++;
  cr_expect_eq(nread, 1);
  cr_assert_eq(ak_writer_submit(g->n->w, g->refresh), AK_WR_QUEUED);
  wait_for(g->wt, 2);
}

Test(dedupe_index, a_key_refreshed_after_the_sweeper_read_it_survives, .init = setup, .fini = teardown) {
  node_t n;
  node_open(&n, "");
  waiter_t wt = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
  ak_write_req_t first, refresh, probe;
  make_req(&n, &first, 0, "evt-1", &wt);
  cr_assert_eq(ak_writer_submit(n.w, &first), AK_WR_QUEUED);
  wait_for(&wt, 1);
  cr_assert_eq(first.status, AK_WR_COMMITTED);
  cr_expect_eq(ak_dedupe_sweep(n.inst->dedupe, 100, NULL, NULL), 0, "nothing expired yet");
  set_clock(61000); /* past the 60 s TTL */
  make_req(&n, &refresh, 0, "evt-1", &wt);
  gate_t g = {&n, &wt, &refresh, 0};
  cr_expect_eq(ak_dedupe_sweep(n.inst->dedupe, 100, refresh_between, &g), 1);
  cr_expect_eq(g.calls, 1);
  cr_expect_eq(refresh.status, AK_WR_COMMITTED, "an expired key is a new hook");
  cr_expect_eq(ak_dedupe_count(n.inst->dedupe), 1, "the stale key is gone, the refreshed one counts");
  cr_expect_eq(count_cf(&n, AK_CF_DEDUPE, 'e'), 1, "the refreshed key survived the stale delete");
  uint8_t id[16];
  cr_expect(ak_dedupe_seen(n.inst->dedupe, refresh.dedupe, id));
  cr_expect_eq(memcmp(id, refresh.id, 16), 0);
  cr_expect_eq(ak_dedupe_sweep(n.inst->dedupe, 100, NULL, NULL), 0, "the refreshed key is not expired");
  node_close(&n);
  node_open(&n, "");
  make_req(&n, &probe, 0, "evt-1", &wt);
  cr_expect(ak_dedupe_seen(n.inst->dedupe, probe.dedupe, id), "after a reopen too");
  cr_expect_eq(memcmp(id, refresh.id, 16), 0);
  cr_expect_eq(ak_dedupe_count(n.inst->dedupe), 1);
  set_clock(200000);
  cr_expect(!ak_dedupe_seen(n.inst->dedupe, probe.dedupe, id), "expired");
  cr_expect_eq(ak_dedupe_sweep(n.inst->dedupe, 100, NULL, NULL), 1);
  cr_expect_eq(ak_dedupe_count(n.inst->dedupe), 0);
  cr_expect_eq(count_cf(&n, AK_CF_DEDUPE, 'e'), 0);
  free_req(&first);
  free_req(&refresh);
  free_req(&probe);
  node_close(&n);
}

/* A commit that fails releases its key: the repeats parked on it fail alike, and the next
 * occurrence is a new hook. */
Test(dedupe_index, a_failed_commit_releases_the_key, .init = setup, .fini = teardown) {
  node_t n;
  node_open(&n, "batcher: {max_delay_ms: 200}\n");
  waiter_t wt = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
  ak_write_req_t r[3];
  ak_store_close(n.inst->store); /* the writer's next commit cannot pin it */
  make_req(&n, &r[0], 0, "evt-1", &wt);
  make_req(&n, &r[1], 0, "evt-1", &wt);
  for (int i = 0; i < 2; i++) cr_assert_eq(ak_writer_submit(n.w, &r[i]), AK_WR_QUEUED);
  wait_for(&wt, 2);
  cr_expect_eq(r[0].status, AK_WR_STORE_UNAVAILABLE);
  cr_expect_eq(r[1].status, AK_WR_STORE_UNAVAILABLE, "a repeat never answers for a hook that failed");
  cr_expect_eq(ak_dedupe_count(n.inst->dedupe), 0);
  char *err = NULL;
  cr_assert_eq(ak_store_open(n.inst->store, &err), 0);
  make_req(&n, &r[2], 0, "evt-1", &wt);
  cr_assert_eq(ak_writer_submit(n.w, &r[2]), AK_WR_QUEUED);
  wait_for(&wt, 3);
  cr_expect_eq(r[2].status, AK_WR_COMMITTED);
  cr_expect_eq(ak_dedupe_count(n.inst->dedupe), 1);
  for (int i = 0; i < 3; i++) free_req(&r[i]);
  node_close(&n);
}

/* A table past 2 MiB comes from mmap (huge-page advice) instead of calloc, and grows by
 * rehashing into a new mapping: 100,000 keys written as 'e' rows load back through both
 * (1024 slots doubling to 2^18, 10 MiB), every key is found with its own id, a key never
 * stored is not, and the mappings are released (ASan build: no leak, no bad access). */
Test(dedupe_index, a_large_index_loads_into_a_mapped_table, .init = setup, .fini = teardown) {
  enum { N = 100000 };
  node_t n;
  node_open(&n, "dedupe: {max_entries: 1000000, max_entries_per_tenant: 1000000}\n");
  ak_batch_t *wb = ak_batch_new(n.inst->store);
  int64_t at = ak_now_ms() + 3600 * 1000;
  for (int i = 0; i < N; i++) {
    char key[32];
    ak_dedupe_claim_t *c = ak_dedupe_claim_new("t1", 2, "a", key, (size_t)snprintf(key, sizeof key, "big-%d", i), 60000);
    uint8_t k[AK_DEDUPE_EKEY_MAX], v[17] = {1};
    size_t kl = ak_dedupe_ekey(k, at, c->scope, c->scope_len);
    memcpy(v + 1, &i, sizeof i); /* the id: the key's number */
    ak_batch_put(wb, AK_CF_DEDUPE, k, kl, v, sizeof v);
    ak_dedupe_claim_free(c);
  }
  char *err = NULL;
  cr_assert_eq(ak_store_write(n.inst->store, wb, true, NULL, &err), 0, "%s", err ? err : "");
  ak_batch_free(wb);
  node_close(&n);

  node_open(&n, "dedupe: {max_entries: 1000000, max_entries_per_tenant: 1000000}\n");
  cr_assert_eq(ak_dedupe_count(n.inst->dedupe), N);
  for (int i = 0; i < N; i += 7) {
    char key[32];
    ak_dedupe_claim_t *c = ak_dedupe_claim_new("t1", 2, "a", key, (size_t)snprintf(key, sizeof key, "big-%d", i), 60000);
    uint8_t first[16] = {0};
    cr_assert(ak_dedupe_seen(n.inst->dedupe, c, first), "key %d is in the index", i);
    int got;
    memcpy(&got, first, sizeof got);
    cr_assert_eq(got, i, "key %d has its own id, not %d's", i, got);
    ak_dedupe_claim_free(c);
  }
  ak_dedupe_claim_t *c = ak_dedupe_claim_new("t1", 2, "a", "never", 5, 60000);
  uint8_t first[16];
  cr_expect(!ak_dedupe_seen(n.inst->dedupe, c, first), "a key never stored is not seen");
  ak_dedupe_claim_free(c);
  node_close(&n);
}
