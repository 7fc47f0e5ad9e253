/* Small reply helpers on the server layer (http/server.h) shared by the ingest and admin
 * listeners: JSON replies and the probes (GET /health, GET /ready: the writer's
 * readiness, so this sits above queue/, in edge/, the lowest layer both listeners reach).
 * Owns no state; never answers /ready from anything but the writer and the drain flag. */
#ifndef AK_EDGE_HTTPX_H
#define AK_EDGE_HTTPX_H

#include <stddef.h>
#include <jansson.h>
#include "core/instance.h"
#include "http/server.h"

/* Answers r with j as compact JSON (application/json) and takes j; Retry-After:
 * retry_after when > 0. A j that cannot be rendered (NULL, out of memory) is answered
 * 500 {"error":"internal"}. */
void ak_http_json(ak_hreq_t *r, unsigned status, json_t *j, int retry_after);
/* GET /ready: 200 {"status":"ready",...} or 503 with Retry-After 1 naming the reason. */
void ak_http_ready(ak_instance_t *inst, ak_hreq_t *r, unsigned *status_out);
/* GET /health: 200 {"status":"ok", instance, version, roles}. */
void ak_http_health(ak_instance_t *inst, ak_hreq_t *r);

/* Append s as a JSON string literal (quotes included) escaping every byte outside
 * printable ASCII as \u00XX, so arbitrary bytes never break a body. */
size_t ak_json_quote(char *out, size_t cap, const char *s, size_t len);

#endif
