/* PLACEHOLDER, to be deleted when the real src/http/tls.c is merged: the functions of
 * http/tls.h, each failing, so this branch links without TLS. ak_htls_ctx_new answers
 * NULL with "TLS not built in this branch"; nothing here ever touches a key or a socket. */
#include <stdlib.h>
#include <string.h>
#include "http/tls.h"

ak_htls_ctx_t *ak_htls_ctx_new(const ak_htls_files_t *files, char **err) {
  (void)files;
  if (err) *err = strdup("TLS not built in this branch");
  return NULL;
}

ak_htls_ctx_t *ak_htls_ctx_reload(const ak_htls_ctx_t *old, char **err) {
  (void)old;
  if (err) *err = strdup("TLS not built in this branch");
  return NULL;
}

ak_htls_ctx_t *ak_htls_ctx_ref(ak_htls_ctx_t *c) { return c; }

void ak_htls_ctx_unref(ak_htls_ctx_t *c) { (void)c; }

void ak_htls_ctx_cert_sha256(const ak_htls_ctx_t *c, uint8_t out[32]) {
  (void)c;
  memset(out, 0, 32);
}

ak_htls_t *ak_htls_new(ak_htls_ctx_t *ctx) {
  (void)ctx;
  return NULL;
}

void ak_htls_free(ak_htls_t *t) { (void)t; }

ak_htls_status_t ak_htls_feed(ak_htls_t *t, const uint8_t *p, size_t n) {
  (void)t, (void)p, (void)n;
  return AK_HTLS_ERROR;
}

ak_htls_status_t ak_htls_read(ak_htls_t *t, uint8_t *out, size_t cap, size_t *got) {
  (void)t, (void)out, (void)cap;
  *got = 0;
  return AK_HTLS_ERROR;
}

ak_htls_status_t ak_htls_write(ak_htls_t *t, const uint8_t *p, size_t n) {
  (void)t, (void)p, (void)n;
  return AK_HTLS_ERROR;
}

const uint8_t *ak_htls_peek_out(ak_htls_t *t, size_t *n) {
  (void)t;
  *n = 0;
  return NULL;
}

void ak_htls_consume_out(ak_htls_t *t, size_t n) { (void)t, (void)n; }

void ak_htls_shutdown(ak_htls_t *t) { (void)t; }

bool ak_htls_established(const ak_htls_t *t) {
  (void)t;
  return false;
}

bool ak_htls_peer_sha256(const ak_htls_t *t, uint8_t out[32]) {
  (void)t, (void)out;
  return false;
}
