/* The quarantine pen over the admin API: GET /v1/quarantine (list held hooks) and DELETE
 * /v1/quarantine (purge them). Handlers only (api.h); the router is the one caller. A
 * release of held hooks is POST /v1/replays kind quarantine (replays_api.h). */
#ifndef AK_ADMIN_QUARANTINE_API_H
#define AK_ADMIN_QUARANTINE_API_H

#include "admin/api.h"

/* ?source_id=&limit= */
void ak_quarantine_api_list(ak_admin_call_t *call, const ak_admin_path_t *path);
/* ?source_id=&id=&since=&until=&limit= */
void ak_quarantine_api_purge(ak_admin_call_t *call, const ak_admin_path_t *path);

#endif
