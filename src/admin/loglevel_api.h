/* The log level over the admin API: GET and PUT /v1/log-level, in force at once for this
 * process. Handlers only (api.h); the router is the one caller. */
#ifndef AK_ADMIN_LOGLEVEL_API_H
#define AK_ADMIN_LOGLEVEL_API_H

#include "admin/api.h"

void ak_loglevel_api_get(ak_admin_call_t *call, const ak_admin_path_t *path);
/* {"level": "debug|info|warning|error"} */
void ak_loglevel_api_put(ak_admin_call_t *call, const ak_admin_path_t *path);

#endif
