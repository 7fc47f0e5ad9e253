/* libFuzzer harness for the config loader (core/config.c + core/yamltree.c): any bytes as
 * YAML text must give a config or an error, never a crash, leak or hang. On success it
 * also checks the typed result against itself and against the router: every configured
 * source must be reachable at the catch URL its own config describes.
 * The environment is always an explicit array: the process environment is never read. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "core/config.h"
#include "edge/route.h"
#include "modules.h"
#include "core/node.h"
#include "core/sources.h"
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

#define CHECK(cond)                                                                   \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      fprintf(stderr, "fuzz_config: invariant failed at line %d: %s\n", __LINE__, #cond); \
      abort();                                                                        \
    }                                                                                 \
  } while (0)

static const char *const no_env[] = {NULL};
/* Used only when the text has a ${...}: lets interpolation succeed now and then.
 * Overrides are kept out so the file's own values are what gets checked. */
static const char *const fuzz_env[] = {"FUZZ_IP=127.0.0.1", "FUZZ_PORT=4000", "FUZZ_EMPTY=",
                                       "FUZZ_TENANT=acme", "FUZZ_LIST=edge, storage", NULL};

static void check_source_route(const ak_config_t *cfg, const ak_source_cfg_t *s) {
  char *path = NULL;
  const char *url_tenant = strcmp(s->tenant, "default") ? s->tenant : "t-1";
  int n = ak_http_cfg(cfg)->routing == AK_ROUTING_TENANT_PATH
            ? asprintf(&path, "%s/%s/%s/", ak_http_cfg(cfg)->prefix, url_tenant, s->id)
            : asprintf(&path, "%s//%s", ak_http_cfg(cfg)->prefix, s->id);
  CHECK(n > 0 && path);
  ak_route_t r;
  CHECK(ak_route_parse(ak_http_cfg(cfg), path, &r) == AK_ROUTE_OK);
  CHECK(strcmp(r.source_id, s->id) == 0);
  const ak_source_cfg_t *got = NULL;
  const char *tenant = NULL;
  CHECK(ak_route_bind(ak_http_cfg(cfg), cfg, &r, &got, &tenant) == AK_ROUTE_OK);
  CHECK(got == s);
  if (ak_http_cfg(cfg)->routing == AK_ROUTING_TENANT_PATH) CHECK(strcmp(tenant, url_tenant) == 0);
  else CHECK(strcmp(tenant, s->tenant) == 0);
  free(path);
}

static void check_config(const ak_config_t *cfg) {
  CHECK(cfg->effective && json_is_object(cfg->effective));
  CHECK(ak_node_cfg(cfg)->data_dir && ak_node_cfg(cfg)->data_dir[0]);
  CHECK(ak_admin_cfg(cfg)->ip);
  CHECK(ak_node_cfg(cfg)->roles != 0);
  CHECK(ak_http_cfg(cfg)->port >= 0 && ak_http_cfg(cfg)->port <= 65535);
  CHECK(ak_admin_cfg(cfg)->port >= 0 && ak_admin_cfg(cfg)->port <= 65535);
  CHECK(ak_http_cfg(cfg)->max_body_bytes >= 1);
  CHECK(ak_batcher_cfg(cfg)->partitions >= 1 && ak_batcher_cfg(cfg)->max_batch >= 1 && ak_batcher_cfg(cfg)->max_queue >= 1);
  CHECK(ak_batcher_cfg(cfg)->max_delay_ms >= 0 && ak_batcher_cfg(cfg)->max_queue_bytes >= 1);
  /* prefix is normalised: "" or "/a/b", no empty segment, no trailing slash */
  const char *pre = ak_http_cfg(cfg)->prefix;
  CHECK(pre);
  size_t pl = strlen(pre);
  CHECK(pl == 0 || (pre[0] == '/' && pre[pl - 1] != '/' && !strstr(pre, "//")));
  for (size_t i = 0; i < ak_sources_cfg(cfg)->n; i++) {
    const ak_source_cfg_t *s = &ak_sources_cfg(cfg)->v[i];
    CHECK(s->id && ak_tenant_valid(s->id, strlen(s->id)));
    CHECK(s->tenant && ak_tenant_valid(s->tenant, strlen(s->tenant)));
    CHECK(i == 0 || strcmp(ak_sources_cfg(cfg)->v[i - 1].id, s->id) < 0); /* sorted, unique */
    CHECK(ak_source_cfg_find(cfg, s->id) == s);
    CHECK(s->nsinks >= 1);
    for (size_t k = 0; k < s->nsinks; k++) CHECK(s->sinks[k].type && s->sinks[k].opts);
    CHECK(s->verify_type);
    check_source_route(cfg, s);
  }
  CHECK(ak_source_cfg_find(cfg, "") == NULL);

  json_t *red = ak_config_redacted(cfg);
  CHECK(red && json_is_object(red));
  char *txt = json_dumps(red, JSON_SORT_KEYS | JSON_COMPACT);
  CHECK(txt);
  free(txt);
  json_decref(red);
  char roles[128];
  ak_node_roles_text(ak_node_cfg(cfg)->roles, roles, sizeof roles);
  CHECK(roles[0]);
}

static void load(const uint8_t *data, size_t size, const char *const *env) {
  ak_config_t *cfg = (ak_config_t *)(uintptr_t)1;
  char *err = (char *)(uintptr_t)1;
  int rc = ak_config_load_string(ak_modules(), (const char *)data, size, env, &cfg, &err);
  if (rc == 0) {
    CHECK(cfg != NULL && err == NULL);
    check_config(cfg);
    ak_config_free(cfg);
  } else {
    CHECK(rc == -1 && cfg == NULL && err != NULL && err[0] != '\0');
    free(err);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  load(data, size, no_env);
  if (memmem(data, size, "${", 2)) load(data, size, fuzz_env);
  return 0;
}
