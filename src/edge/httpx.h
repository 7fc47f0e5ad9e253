/* Small libmicrohttpd helpers shared by the ingest and admin listeners: JSON replies and
 * the probes (GET /health, GET /ready: the writer's readiness, so this sits above queue/,
 * in edge/, the lowest layer both listeners reach). Owns no state; never answers /ready
 * from anything but the writer and the drain flag. */
#ifndef AK_EDGE_HTTPX_H
#define AK_EDGE_HTTPX_H

#include <microhttpd.h>
#include <stddef.h>
#include <jansson.h>
#include "core/instance.h"

enum MHD_Result ak_http_reply(struct MHD_Connection *c, unsigned status, const char *ctype,
                              const char *body, size_t len, int retry_after);
/* Takes ownership of j. */
enum MHD_Result ak_http_json(struct MHD_Connection *c, unsigned status, json_t *j, int retry_after);
/* {"error": code} */
enum MHD_Result ak_http_error(struct MHD_Connection *c, unsigned status, const char *code, int retry_after);
/* GET /ready: 200 {"status":"ready",...} or 503 with Retry-After 1 naming the reason. */
enum MHD_Result ak_http_ready(ak_instance_t *inst, struct MHD_Connection *c, unsigned *status_out);
enum MHD_Result ak_http_health(ak_instance_t *inst, struct MHD_Connection *c);

/* Append s as a JSON string literal (quotes included) escaping every byte outside
 * printable ASCII as \u00XX, so arbitrary bytes never break a body. */
size_t ak_json_quote(char *out, size_t cap, const char *s, size_t len);

#endif
