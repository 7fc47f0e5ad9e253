/* TLS for the server layer (http/server.h), on OpenSSL: a context built from PEM files
 * (certificate chain, private key, optional client CA bundle and client-certificate
 * mode), TLS 1.2 and later only, re-read without a restart (SIGHUP: a bad new file is
 * refused and the old context kept), and one session per connection driven through
 * memory BIOs, so the connection's socket stays the server layer's: ciphertext read
 * from the socket goes in with ak_htls_feed, plaintext comes out of ak_htls_read,
 * plaintext answers go in with ak_htls_write and the ciphertext to send comes out of
 * ak_htls_peek_out (ak_htls_consume_out once sent). Never logs, prints or copies a byte
 * of the private key: an error names the dotted config key and the path only.
 *
 * Client certificates (client_cert mode):
 *   none     no certificate is asked for;
 *   request  one is asked for; the handshake goes on without one, or with one that does
 *            not verify against client_ca (the verifier then sees none);
 *   require  the handshake fails without a certificate that verifies against client_ca.
 * A certificate counts only when it chains to client_ca, is within its validity, and is
 * fit for client authentication (purpose sslclient); ak_htls_peer_sha256 reports only
 * such a certificate, so a pin can only ever match a CA-issued one. */
#ifndef AK_HTTP_TLS_H
#define AK_HTTP_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef enum { AK_HTLS_CLIENT_NONE = 0, AK_HTLS_CLIENT_REQUEST = 1, AK_HTLS_CLIENT_REQUIRE = 2 } ak_htls_client_t;

typedef struct ak_htls_files {
  const char *cert;       /* PEM: certificate chain, leaf first */
  const char *key;        /* PEM: the leaf's private key (not encrypted) */
  const char *client_ca;  /* PEM: CA bundle for client certificates; NULL = none */
  ak_htls_client_t client_cert;
  const char *key_prefix; /* dotted config key the paths came from, for errors ("http.tls") */
} ak_htls_files_t;

/* A context (refcounted: the server and each connection hold a reference). */
typedef struct ak_htls_ctx ak_htls_ctx_t;

/* Reads and checks the files: a certificate chain, a private key that matches its leaf,
 * a CA bundle of at least one certificate when client_ca is set (and required for
 * request/require). NULL with *err (malloc'd; one line per problem, "<key_prefix>.cert:
 * cannot read /path: No such file or directory", never a byte of the key). The paths
 * are copied, for ak_htls_ctx_reload. */
ak_htls_ctx_t *ak_htls_ctx_new(const ak_htls_files_t *files, char **err);
/* A new context from the same paths (SIGHUP), or NULL with *err when the files now fail
 * the checks above (the caller keeps the old one). */
ak_htls_ctx_t *ak_htls_ctx_reload(const ak_htls_ctx_t *old, char **err);
ak_htls_ctx_t *ak_htls_ctx_ref(ak_htls_ctx_t *c);
void ak_htls_ctx_unref(ak_htls_ctx_t *c);
/* SHA-256 of the serving leaf certificate (DER), for logs and tests. */
void ak_htls_ctx_cert_sha256(const ak_htls_ctx_t *c, uint8_t out[32]);

/* One connection's session (server side). Holds a reference on its context. */
typedef struct ak_htls ak_htls_t;

ak_htls_t *ak_htls_new(ak_htls_ctx_t *ctx);
void ak_htls_free(ak_htls_t *t);

typedef enum {
  AK_HTLS_OK = 0,     /* progress made or nothing to do yet (want more bytes) */
  AK_HTLS_CLOSED,     /* the peer sent close_notify: no more plaintext will come */
  AK_HTLS_ERROR,      /* handshake failed or the record layer broke: send what
                       * ak_htls_take_out holds (an alert), then close */
} ak_htls_status_t;

/* Ciphertext from the socket. Drives the handshake. */
ak_htls_status_t ak_htls_feed(ak_htls_t *t, const uint8_t *p, size_t n);
/* Ciphertext fed and not yet decrypted (the driver stops reading the socket past a bound,
 * so a client that sends without reading its answers cannot grow it without limit). */
size_t ak_htls_pending_in(const ak_htls_t *t);
/* Plaintext available after feed: up to cap bytes into out; *got = 0 when none yet.
 * A read may also produce ciphertext (TLS 1.3 key update): check peek_out after it. */
ak_htls_status_t ak_htls_read(ak_htls_t *t, uint8_t *out, size_t cap, size_t *got);
/* Encrypts plaintext (all of it, once the handshake is done; before, it is buffered). */
ak_htls_status_t ak_htls_write(ak_htls_t *t, const uint8_t *p, size_t n);
/* Ciphertext to send: pointer to up to *n bytes, consumed with ak_htls_consume_out.
 * *n = 0 (and NULL) when there is none. The pointer is valid until the next call on t
 * other than consume_out. */
const uint8_t *ak_htls_peek_out(ak_htls_t *t, size_t *n);
void ak_htls_consume_out(ak_htls_t *t, size_t n);
/* Queues a close_notify (the ciphertext comes out of peek_out); before the handshake
 * completed there is nothing to close and nothing is queued. Writes fail after it. */
void ak_htls_shutdown(ak_htls_t *t);
/* true once the handshake completed. */
bool ak_htls_established(const ak_htls_t *t);
/* SHA-256 of the DER of the peer's leaf certificate, when it sent one that verified
 * (see above); false otherwise. */
bool ak_htls_peer_sha256(const ak_htls_t *t, uint8_t out[32]);

#endif
