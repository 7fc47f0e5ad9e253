/* The ingest listener (http.port, 4000): routing, pre-read refusals, bounded body read,
 * envelope, hand-off to the writer with the connection suspended, and the status
 * mapping of the answer. Owns the libmicrohttpd daemon. Never answers 201 before the
 * writer reported the hook committed. */
#ifndef AK_EDGE_EDGE_H
#define AK_EDGE_EDGE_H

#include "core/instance.h"
#include "core/module.h"

typedef enum { AK_ROUTING_PATH = 0, AK_ROUTING_TENANT_PATH = 1 } ak_routing_t;
/* http.tls.client_cert, in the order of its enum row */
typedef enum {
  AK_TLS_CLIENT_CERT_NONE = 0, AK_TLS_CLIENT_CERT_REQUEST = 1, AK_TLS_CLIENT_CERT_REQUIRE = 2
} ak_tls_client_cert_t;

/* http.tls: a second ingest listener over TLS. The PEM texts are read once, at load
 * (edge/tls.c); the key text is never printed or logged. */
typedef struct ak_http_tls_cfg {
  int64_t port;
  const char *cert, *key, *client_ca;    /* paths as written */
  ak_tls_client_cert_t client_cert;      /* resolved: none unless client_ca is set */
  bool enabled;                          /* http.tls is a mapping */
  char *cert_pem;                        /* certificate chain, leaf first */
  char *key_pem;                         /* private key */
  char *client_ca_pem;                   /* CA bundle for client certificates, NULL when unset */
} ak_http_tls_cfg_t;

/* The `http` section. */
typedef struct ak_http_cfg {
  int64_t port;
  int64_t max_body_bytes;
  ak_routing_t routing;
  const char *prefix;          /* normalised: "" (no prefix) or "/a/b" (no trailing slash) */
  ak_http_tls_cfg_t tls;
} ak_http_cfg_t;

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
