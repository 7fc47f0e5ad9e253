/* Route resolution: catch URL -> (tenant, source) under http.routing and http.prefix, the
 * tenant-binding rule, and the header value byte check. Pure functions over the config (and a
 * source already looked up), so
 * they are unit tested and fuzzed directly. Never reads a body. */
#ifndef AK_EDGE_ROUTE_H
#define AK_EDGE_ROUTE_H

#include <stdbool.h>
#include <stddef.h>
#include "core/config.h"
#include "core/sources.h"
#include "edge/http_cfg.h"

typedef enum {
  AK_ROUTE_OK = 0,
  AK_ROUTE_NOT_FOUND,      /* not under the prefix: 404 not_found */
  AK_ROUTE_UNKNOWN_SOURCE, /* under the prefix but bad shape, unknown source, wrong tenant */
} ak_route_status_t;

typedef struct ak_route {
  char url_tenant[65];     /* tenant_path only; "" otherwise */
  char source_id[65];
} ak_route_t;

/* Shape only: split the path (without query) into prefix + segments. */
ak_route_status_t ak_route_parse(const ak_http_cfg_t *hc, const char *path, ak_route_t *out);
/* The tenant binding of a source already looked up (src NULL: unknown): an owned source
 * answers only under its tenant, a shared one ("default") files the hook under the URL's
 * tenant with tenant_path. *tenant_out gets the tenant the hook is filed under. */
ak_route_status_t ak_route_bind_source(const ak_http_cfg_t *hc, const ak_route_t *r, const ak_source_cfg_t *src,
                                       const char **tenant_out);
/* The same with the lookup in the config file's sources (tests, tools; the edge looks
 * sources up in core/sources.h). */
ak_route_status_t ak_route_bind(const ak_http_cfg_t *hc, const ak_config_t *cfg, const ak_route_t *r,
                                const ak_source_cfg_t **src_out, const char **tenant_out);

bool ak_tenant_valid(const char *s, size_t len);
/* A header value's bytes: visible ASCII plus space and tab (names: core/header.h). */
bool ak_header_value_ok(const char *s, size_t len);

#endif
