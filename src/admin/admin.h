/* The admin listener (admin.ip:admin.port, 127.0.0.1:4002 by default): /health, /ready,
 * /metrics and the /v1 API, behind bearer-token principals and scopes (admin/auth.h; the
 * route table: admin/router.h; the handler contract: admin/api.h). Owns its own server
 * on the HTTP layer (http/server.h) with its own loop, separate from ingest so operator
 * traffic never competes with providers. Never serves a secret. */
#ifndef AK_ADMIN_ADMIN_H
#define AK_ADMIN_ADMIN_H

#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>
#include "core/instance.h"
#include "core/module.h"

/* The `admin` section. */
typedef struct ak_admin_cfg {
  bool enabled;
  const char *ip;
  int64_t port;
  int64_t gauge_interval_ms;   /* read by the gauge sampler (core/gauges.c) from the tree */
  const json_t *principals;    /* [{name, token_sha256, scopes, tenants}] (admin/auth.c builds them) */
} ak_admin_cfg_t;

/* The `admin` section and the admin listener's lifecycle (inst->admin; off with
 * admin.enabled false). */
extern const ak_module_t ak_mod_admin;
const ak_admin_cfg_t *ak_admin_cfg(const ak_config_t *cfg);

typedef struct ak_admin ak_admin_t;

/* NULL when the principals cannot be built (logged). */
ak_admin_t *ak_admin_new(ak_instance_t *inst);
struct ak_admin_route;
/* Another listener on the same machinery (principals, checks, X-Request-Id, audit who)
 * serving its own route table: key names its config section in messages ("routes.admin"). */
ak_admin_t *ak_admin_new_listener(ak_instance_t *inst, const char *key, const char *ip, int port,
                                  const struct ak_admin_route *table, size_t n);
int ak_admin_start(ak_admin_t *a, char **err);
int ak_admin_port(const ak_admin_t *a);
void ak_admin_stop(ak_admin_t *a);
void ak_admin_free(ak_admin_t *a);

#endif
