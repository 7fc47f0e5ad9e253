/* The ingest listener (http.port, 4000): routing, pre-read refusals, bounded body read,
 * envelope, hand-off to the writer with the connection suspended, and the status
 * mapping of the answer. Owns the libmicrohttpd daemon. Never answers 201 before the
 * writer reported the hook committed. */
#ifndef AK_EDGE_EDGE_H
#define AK_EDGE_EDGE_H

#include "core/instance.h"
#include "core/module.h"
#include "edge/http_cfg.h"

/* The `http` section and the ingest listener's lifecycle. */
extern const ak_module_t ak_mod_edge;
const ak_http_cfg_t *ak_http_cfg(const ak_config_t *cfg);

typedef struct ak_edge ak_edge_t;

ak_edge_t *ak_edge_new(ak_instance_t *inst);
/* Bind and serve. 0, or -1 with *err. */
int ak_edge_start(ak_edge_t *e, char **err);
int ak_edge_port(const ak_edge_t *e);
/* The TLS listener's port (http.tls), 0 when there is none. */
int ak_edge_tls_port(const ak_edge_t *e);
/* Wait (up to timeout_ms) until no request is waiting on the writer. */
void ak_edge_wait_idle(ak_edge_t *e, int timeout_ms);
void ak_edge_stop(ak_edge_t *e);
void ak_edge_free(ak_edge_t *e);

#endif
