/* GET /asyncapi.json (AsyncAPI 3.0): the broker channels this node publishes to and the
 * message they carry (asyncapi_api.c). Never puts a credential in the document: servers
 * are protocol and host only. */
#ifndef AK_ADMIN_ASYNCAPI_API_H
#define AK_ADMIN_ASYNCAPI_API_H

#include <jansson.h>
#include "admin/api.h"

/* The document for the sources inst serves now (a new reference), or NULL out of memory. */
json_t *ak_asyncapi_document(ak_instance_t *inst);
void ak_asyncapi_api_get(ak_admin_call_t *call, const ak_admin_path_t *path);

#endif
