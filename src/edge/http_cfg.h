/* The `http` section's typed form (edge.c declares its rows and binds them): the ingest
 * listener's port, body bound, routing, prefix and TLS listener. Types only, so that the
 * route and TLS helpers read the section without depending on the listener. */
#ifndef AK_EDGE_HTTP_CFG_H
#define AK_EDGE_HTTP_CFG_H

#include <stdbool.h>
#include <stdint.h>

struct ak_htls_ctx; /* http/tls.h */

typedef enum { AK_ROUTING_PATH = 0, AK_ROUTING_TENANT_PATH = 1 } ak_routing_t;
/* http.tls.client_cert, in the order of its enum row */
typedef enum {
  AK_TLS_CLIENT_CERT_NONE = 0, AK_TLS_CLIENT_CERT_REQUEST = 1, AK_TLS_CLIENT_CERT_REQUIRE = 2
} ak_tls_client_cert_t;

/* http.tls: a second ingest listener over TLS. The PEM files are read and checked once,
 * at load (edge/tls.c), into the server layer's TLS context (http/tls.h); the key is never
 * printed or logged. */
typedef struct ak_http_tls_cfg {
  int64_t port;
  const char *cert, *key, *client_ca;    /* paths as written */
  ak_tls_client_cert_t client_cert;      /* resolved: none unless client_ca is set */
  bool enabled;                          /* http.tls is a mapping */
  struct ak_htls_ctx *ctx;               /* built from the files at load; NULL when !enabled */
} ak_http_tls_cfg_t;

/* The `http` section. */
typedef struct ak_http_cfg {
  const char *ip;              /* NULL = every interface, IPv4 and IPv6 */
  int64_t port;
  int64_t max_body_bytes;
  ak_routing_t routing;
  const char *prefix;          /* normalised: "" (no prefix) or "/a/b" (no trailing slash) */
  ak_http_tls_cfg_t tls;
} ak_http_cfg_t;

#endif
