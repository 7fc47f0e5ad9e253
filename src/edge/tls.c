/* http.tls at config load (see tls.h): maps the section onto the server layer's TLS
 * context and holds the section's reference on it. Keeps no state of its own. Must never
 * read, copy or report the key itself: http/tls.c does the reading and the checks. */
#include <stdlib.h>
#include "edge/tls.h"
#include "http/tls.h"

int ak_tls_load_files(ak_http_tls_cfg_t *tc, char **err) {
  *err = NULL;
  if (!tc->enabled) return 0;
  ak_htls_client_t mode = tc->client_cert == AK_TLS_CLIENT_CERT_REQUIRE   ? AK_HTLS_CLIENT_REQUIRE
                          : tc->client_cert == AK_TLS_CLIENT_CERT_REQUEST ? AK_HTLS_CLIENT_REQUEST
                                                                          : AK_HTLS_CLIENT_NONE;
  ak_htls_files_t f = {.cert = tc->cert, .key = tc->key, .client_ca = tc->client_ca, .client_cert = mode,
                       .key_prefix = "http.tls"};
  ak_htls_ctx_t *ctx = ak_htls_ctx_new(&f, err);
  if (!ctx) return -1;
  ak_htls_ctx_unref(tc->ctx);
  tc->ctx = ctx;
  return 0;
}

void ak_tls_free_files(ak_http_tls_cfg_t *tc) {
  ak_htls_ctx_unref(tc->ctx);
  tc->ctx = NULL;
}
