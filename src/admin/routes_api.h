/* The route admin API (routes.admin, 127.0.0.1:4003 by default): /health, /admin/routes
 * CRUD, /admin/ip-rules and the dry run /admin/routes/test, on the admin listener's
 * machinery (admin/admin.h: the same principals, checks and X-Request-Id) with its own
 * route table (admin/router.c). Also the module that runs that listener when the route
 * guard is on (routes.enabled) on an edge node. A route belongs to a tenant by the rule
 * of routes/table.h (its `tenant`, else a literal /webhooks/<tenant>/... path, else none);
 * a tenant-scoped principal sees and changes only its tenants' routes; a route of no
 * tenant, the global IP rules and the dry run need an all-tenants principal. The changes
 * themselves (validation, audit row in the same synced batch) are routes/guard.c's. */
#ifndef AK_ADMIN_ROUTES_API_H
#define AK_ADMIN_ROUTES_API_H

#include "admin/api.h"
#include "core/module.h"

void ak_routes_api_health(ak_admin_call_t *call, const ak_admin_path_t *path);
void ak_routes_api_list(ak_admin_call_t *call, const ak_admin_path_t *path);
void ak_routes_api_create(ak_admin_call_t *call, const ak_admin_path_t *path);
void ak_routes_api_get(ak_admin_call_t *call, const ak_admin_path_t *path);
void ak_routes_api_put(ak_admin_call_t *call, const ak_admin_path_t *path);
void ak_routes_api_patch(ak_admin_call_t *call, const ak_admin_path_t *path);
void ak_routes_api_delete(ak_admin_call_t *call, const ak_admin_path_t *path);
void ak_routes_api_ip_get(ak_admin_call_t *call, const ak_admin_path_t *path);
void ak_routes_api_ip_put(ak_admin_call_t *call, const ak_admin_path_t *path);
void ak_routes_api_test(ak_admin_call_t *call, const ak_admin_path_t *path);

/* The route admin listener's lifecycle (no section of its own: routes.admin is the routes
 * module's). */
extern const ak_module_t ak_mod_routes_admin;

#endif
