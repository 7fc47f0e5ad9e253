/* The admin API's one route table ({method, path pattern, scope, flags, handler}:
 * docs/admin-api.md is the same table) and the matching of a request against it. The
 * only file of admin/ that includes the handler files' headers. Owns no state; never
 * authenticates, never reads a body, never answers (the listener, admin.c, does). */
#ifndef AK_ADMIN_ROUTER_H
#define AK_ADMIN_ROUTER_H

#include <stdbool.h>
#include <stddef.h>
#include "admin/api.h"

/* Every row; *n of them. */
const ak_admin_route_t *ak_admin_routes(size_t *n);

/* The row a request matches ("HEAD" matches the GET row), and the values its pattern
 * captured in *path (zeroed first; left "" when nothing matches). NULL when no row
 * matches; *path_known tells whether some row has the path under another method. A
 * capture is one non-empty segment shorter than AK_ADMIN_CAPTURE_MAX. */
const ak_admin_route_t *ak_admin_route_match(const char *method, const char *url, ak_admin_path_t *path,
                                             bool *path_known);

/* The same against another listener's table (the route admin API, 4003). */
const ak_admin_route_t *ak_admin_route_match_in(const ak_admin_route_t *table, size_t n, const char *method,
                                                const char *url, ak_admin_path_t *path, bool *path_known);
/* The route admin listener's rows (admin/routes_api.c's handlers); *n of them. */
const ak_admin_route_t *ak_admin_routes_api(size_t *n);

#endif
