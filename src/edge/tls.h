/* The TLS ingest listener's config (http.tls): at load, the PEM files named by the
 * section become the server layer's TLS context (http/tls.h), kept in the typed section
 * for the listener; at release the context's reference is dropped. Owns no listener and
 * no other state. Never logs, prints or copies the private key: the files are read and
 * checked by http/tls.c, whose errors name the dotted key and the path only. */
#ifndef AK_EDGE_TLS_H
#define AK_EDGE_TLS_H

#include "edge/http_cfg.h"

/* Builds tc->ctx from http.tls.cert, .key and .client_ca (the paths in tc) and
 * tc->client_cert: a certificate chain, a private key matching its leaf, a CA bundle of
 * at least one certificate. 0, or -1 with *err (malloc'd, one line per bad key, naming
 * the dotted key and the path, never a byte of the key) and tc untouched. Does nothing
 * when http.tls is not configured (!tc->enabled). */
int ak_tls_load_files(ak_http_tls_cfg_t *tc, char **err);
/* Drops the section's reference on tc->ctx (connections still open keep theirs). */
void ak_tls_free_files(ak_http_tls_cfg_t *tc);

#endif
