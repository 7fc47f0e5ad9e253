/* The ingest listeners (http.port 4000, http.tls.port): routing, pre-read refusals,
 * bounded body read, envelope, hand-off to the writer with the request suspended, the
 * status mapping of the answer, and the drain. Owns the ingest servers (http/server.h),
 * plain and TLS. Never answers 201 before the writer reported the hook committed. */
#ifndef AK_EDGE_EDGE_H
#define AK_EDGE_EDGE_H

#include "core/instance.h"
#include "core/module.h"
#include "edge/http_cfg.h"

/* The `listener` section: the ingest listeners' limits (http/server.h) and the drain. */
typedef struct ak_listener_cfg {
  int64_t drain_delay_ms, drain_timeout_ms, loops;
  int64_t max_connections, max_connections_per_client;
  int64_t max_request_line_bytes, max_header_bytes, max_headers;
  int64_t header_timeout_ms, body_timeout_ms, body_min_rate, idle_timeout_ms, write_timeout_ms;
} ak_listener_cfg_t;

/* The `http` section and the ingest listeners' lifecycle; the `listener` section. */
extern const ak_module_t ak_mod_edge;
extern const ak_module_t ak_mod_listener;
const ak_http_cfg_t *ak_http_cfg(const ak_config_t *cfg);
const ak_listener_cfg_t *ak_listener_cfg(const ak_config_t *cfg);

typedef struct ak_edge ak_edge_t;

ak_edge_t *ak_edge_new(ak_instance_t *inst);
/* Bind and serve. 0, or -1 with *err. */
int ak_edge_start(ak_edge_t *e, char **err);
int ak_edge_port(const ak_edge_t *e);
/* The TLS listener's port (http.tls), 0 when there is none. */
int ak_edge_tls_port(const ak_edge_t *e);
/* Requests between their head and their end, on both listeners. */
size_t ak_edge_inflight(const ak_edge_t *e);
/* SIGTERM (the seed's drain): serve on for listener.drain_delay_ms, stop accepting, wait
 * for the requests in flight (record deadline + 5 s, at most listener.drain_timeout_ms). */
void ak_edge_drain(ak_edge_t *e);
/* SIGHUP: re-read http.tls's files; a bad new certificate is refused (logged), the old kept. */
void ak_edge_reload_tls(ak_edge_t *e);
/* Closes every connection and joins the loops (after the writer answered everything). */
void ak_edge_stop(ak_edge_t *e);
void ak_edge_free(ak_edge_t *e);

#endif
