/* Stored hooks over the admin API: GET /v1/hooks/{id}, and the JSON view of a stored hook
 * that `ankusa` tools print too (`ankusa inspect`). Reads only; never shows a hook to a caller whose scope
 * does not hold its tenant (it is "not found" to them). */
#ifndef AK_ADMIN_HOOKS_API_H
#define AK_ADMIN_HOOKS_API_H

#include "admin/api.h"

struct ak_envelope;

/* The JSON view of a stored hook (metadata; body base64 when with_body). New reference
 * (a json_t *). */
void *ak_hooks_api_json(const struct ak_envelope *env, int with_body);

void ak_hooks_api_get(ak_admin_call_t *call, const ak_admin_path_t *path);

#endif
