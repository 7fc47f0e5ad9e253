/* Tenant erase over the admin API: DELETE /v1/tenants/{tenant}?confirm={tenant} and
 * GET /v1/tenants/{tenant}/erase (tenant/erase.h does the work). */
#ifndef AK_ADMIN_TENANTS_API_H
#define AK_ADMIN_TENANTS_API_H

#include "admin/api.h"

void ak_tenants_api_delete(ak_admin_call_t *call, const ak_admin_path_t *path);
void ak_tenants_api_erase_get(ak_admin_call_t *call, const ak_admin_path_t *path);

#endif
