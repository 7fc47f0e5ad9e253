/* Tenant rate limits over the admin API: GET /v1/rate-limits and GET|PUT|DELETE
 * /v1/tenants/{tenant}/rate-limit (edge/quota.c keeps them). Handlers only (api.h); the
 * router is the one caller. */
#ifndef AK_ADMIN_RATELIMITS_API_H
#define AK_ADMIN_RATELIMITS_API_H

#include "admin/api.h"

void ak_ratelimits_api_list(ak_admin_call_t *call, const ak_admin_path_t *path);
/* {tenant} */
void ak_ratelimits_api_get(ak_admin_call_t *call, const ak_admin_path_t *path);
void ak_ratelimits_api_put(ak_admin_call_t *call, const ak_admin_path_t *path);
void ak_ratelimits_api_delete(ak_admin_call_t *call, const ak_admin_path_t *path);

#endif
