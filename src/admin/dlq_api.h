/* The dead-letter set over the admin API: GET /v1/dlq. Handlers only (api.h); the router
 * is the one caller. Moving dead rows back is a replay (replays_api.h). */
#ifndef AK_ADMIN_DLQ_API_H
#define AK_ADMIN_DLQ_API_H

#include "admin/api.h"

/* ?source_id=&since=&limit= */
void ak_dlq_api_list(ak_admin_call_t *call, const ak_admin_path_t *path);

#endif
