/* The audit trail over the admin API: GET /v1/audit (the trail itself is store/audit.h).
 * Handlers only (api.h); the router is the one caller. Never writes a row. */
#ifndef AK_ADMIN_AUDIT_API_H
#define AK_ADMIN_AUDIT_API_H

#include "admin/api.h"

/* ?after_seq=|before_seq=&action=&tenant=&since=&limit= */
void ak_audit_api_get(ak_admin_call_t *call, const ak_admin_path_t *path);

#endif
