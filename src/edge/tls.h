/* The TLS ingest listener (http.tls) on libmicrohttpd's GnuTLS back end: the PEM files
 * read and checked at config load, the MHD options of the HTTPS daemon, and the SHA-256
 * of a connection's client certificate for the client_cert verifier. Owns no daemon and
 * no state: the edge starts the listener. Never logs, prints or copies the private key.
 *
 * How the edge uses it (a second MHD daemon next to the plain one):
 *
 *   struct MHD_OptionItem tls[AK_TLS_MHD_OPTIONS_MAX];
 *   if (tc->enabled && ak_tls_mhd_options(tc, tls, AK_TLS_MHD_OPTIONS_MAX) > 0)
 *     MHD_start_daemon(flags | MHD_USE_TLS, (uint16_t)tc->port, ..., handler, e,
 *                      <same options as the plain daemon>,
 *                      MHD_OPTION_ARRAY, tls, MHD_OPTION_END);
 *
 * MHD_USE_TLS is the caller's flag to add. The array carries MHD_OPTION_NOTIFY_CONNECTION
 * when client_cert is `require`; a caller that needs its own connection callback on this
 * daemon must call ak_tls_notify_connection() from it instead.
 *
 * What libmicrohttpd 0.9.75 does with a client certificate:
 *   - MHD_OPTION_HTTPS_MEM_TRUST loads the CA bundle and makes every session *request* a
 *     certificate (GNUTLS_CERT_REQUEST); the handshake goes on without one, or with one
 *     that does not chain to the bundle. MHD has no option for "require".
 *   - `require` is done here: at MHD_CONNECTION_NOTIFY_STARTED the GnuTLS session exists
 *     and the handshake has not begun, so the callback switches it to GNUTLS_CERT_REQUIRE
 *     and has GnuTLS verify the certificate against the bundle during the handshake. A
 *     client with no certificate, or one not from client_ca, is refused in the handshake
 *     (on TLS 1.3 the client sees the alert on its first read, not in its handshake).
 *   - with `request`, a missing or untrusted certificate still gets a TLS session; the
 *     client_cert verifier then sees no certificate (401 missing_signature).
 */
#ifndef AK_EDGE_TLS_H
#define AK_EDGE_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <microhttpd.h>
#include "core/config.h"
#include "edge/http_cfg.h"

/* Enough room for everything ak_tls_mhd_options() writes, MHD_OPTION_END included. */
#define AK_TLS_MHD_OPTIONS_MAX 8

/* Reads http.tls.cert, .key and .client_ca (the paths in tc) into tc->cert_pem /
 * key_pem / client_ca_pem and checks that GnuTLS takes them:
 * a certificate chain, a private key matching its leaf, a CA bundle of at least one
 * certificate. 0, or -1 with *err (malloc'd, one line per bad key, naming the dotted key
 * and the path, never a byte of the key). Does nothing when http.tls is not configured. */
int ak_tls_load_files(ak_http_tls_cfg_t *tc, char **err);
/* Frees (and wipes the key of) what ak_tls_load_files read. */
void ak_tls_free_files(ak_http_tls_cfg_t *tc);

/* The options of the HTTPS daemon, written into out[0..max) and ended by MHD_OPTION_END
 * (for MHD_OPTION_ARRAY): MHD_OPTION_HTTPS_MEM_CERT, MHD_OPTION_HTTPS_MEM_KEY, and when
 * client_cert is request or require MHD_OPTION_HTTPS_MEM_TRUST (the client CA); with
 * require also MHD_OPTION_NOTIFY_CONNECTION (ak_tls_notify_connection). Returns how many
 * options were written before the END item; 0 when TLS is not configured or max is
 * smaller than AK_TLS_MHD_OPTIONS_MAX. The items point into tc: keep it alive as long
 * as the daemon. */
size_t ak_tls_mhd_options(const ak_http_tls_cfg_t *tc, struct MHD_OptionItem *out, size_t max);

/* MHD_NotifyConnectionCallback: on MHD_CONNECTION_NOTIFY_STARTED of a TLS connection,
 * requires a client certificate that chains to the trusted bundle (refused in the
 * handshake otherwise). cls is unused. Only for client_cert: require. */
void ak_tls_notify_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                              enum MHD_ConnectionNotificationCode toe);

/* SHA-256 of the DER of the peer's leaf certificate on this connection's live TLS
 * session, into out. false when the connection is not TLS, the client sent no
 * certificate, or its certificate does not verify against http.tls.client_ca (untrusted
 * chain, expired, not valid for client authentication): an unverified certificate is
 * treated exactly like an absent one, so a pin can only ever match a CA-issued cert. */
bool ak_tls_peer_cert_sha256(struct MHD_Connection *c, uint8_t out[32]);

#endif
