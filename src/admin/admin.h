/* The admin listener (admin.ip:admin.port, 127.0.0.1:4002 by default): /health, /ready,
 * /metrics and the /v1 API, behind bearer-token principals and scopes (admin/auth.h; the
 * route table: admin/router.h; the handler contract: admin/api.h). Owns its own
 * libmicrohttpd daemon, separate from ingest so operator traffic never competes with
 * providers. Never serves a secret. */
#ifndef AK_ADMIN_ADMIN_H
#define AK_ADMIN_ADMIN_H

#include "core/instance.h"

typedef struct ak_admin ak_admin_t;

/* NULL when the principals cannot be built (logged). */
ak_admin_t *ak_admin_new(ak_instance_t *inst);
int ak_admin_start(ak_admin_t *a, char **err);
int ak_admin_port(const ak_admin_t *a);
void ak_admin_stop(ak_admin_t *a);
void ak_admin_free(ak_admin_t *a);

#endif
