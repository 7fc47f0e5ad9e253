/* Replays over the admin API: POST /v1/replays (kind dlq: a job dispatch/replay.c runs;
 * kind quarantine: a release of held hooks, finished in the request), GET /v1/replays,
 * GET and PATCH /v1/replays/{id}. Handlers only (api.h); the router is the one caller. */
#ifndef AK_ADMIN_REPLAYS_API_H
#define AK_ADMIN_REPLAYS_API_H

#include "admin/api.h"

void ak_replays_api_post(ak_admin_call_t *call, const ak_admin_path_t *path);
void ak_replays_api_list(ak_admin_call_t *call, const ak_admin_path_t *path);
/* {id}: a replay job's id */
void ak_replays_api_get(ak_admin_call_t *call, const ak_admin_path_t *path);
void ak_replays_api_patch(ak_admin_call_t *call, const ak_admin_path_t *path);

#endif
