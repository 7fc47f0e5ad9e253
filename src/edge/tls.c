/* TLS ingest listener support (see tls.h): load and check the http.tls PEM files once,
 * hand libmicrohttpd the options of its GnuTLS daemon, require a client certificate
 * when asked, and fingerprint a verified client certificate. Keeps no state. Must never
 * put a byte of the private key into an error, a log line or anything but MHD's option. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <openssl/evp.h>
#include "core/buf.h"
#include "edge/tls.h"

#define PEM_MAX_BYTES (1u << 20)

/* Every client certificate is checked for this purpose: a certificate whose extended
 * key usage leaves out client authentication does not count as one. Read-only; static
 * because gnutls_session_set_verify_cert2 keeps the pointer for the session's life. */
static gnutls_typed_vdata_st client_purpose[1] = {
  {.type = GNUTLS_DT_KEY_PURPOSE_OID, .data = (unsigned char *)GNUTLS_KP_TLS_WWW_CLIENT, .size = 0}};

/* ------------------------------------------------------------------- loading ---- */

/* Error lines, joined by '\n'. */
static void add_line(ak_buf_t *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_line(ak_buf_t *l, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (l->len) ak_buf_append(l, "\n", 1);
  ak_buf_vprintf(l, fmt, ap);
  va_end(ap);
}

/* The whole file as a NUL-terminated string (MHD takes PEM as C strings). NULL after
 * reporting under `key`. */
static char *read_pem(ak_buf_t *errs, const char *key, const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    add_line(errs, "%s: cannot read %s: %s", key, path, strerror(errno));
    return NULL;
  }
  char *buf = malloc(PEM_MAX_BYTES + 1);
  size_t n = buf ? fread(buf, 1, PEM_MAX_BYTES + 1, f) : 0;
  int rd_errno = errno;
  bool failed = !buf || ferror(f);
  fclose(f);
  if (failed) {
    add_line(errs, "%s: cannot read %s: %s", key, path, buf ? strerror(rd_errno ? rd_errno : EIO) : "out of memory");
    free(buf);
    return NULL;
  }
  if (n > PEM_MAX_BYTES) {
    add_line(errs, "%s: %s is larger than %u bytes", key, path, PEM_MAX_BYTES);
    free(buf);
    return NULL;
  }
  buf[n] = '\0';
  if (memchr(buf, '\0', n)) {
    add_line(errs, "%s: %s is not a PEM file (it holds a NUL byte)", key, path);
    free(buf);
    return NULL;
  }
  *len = n;
  return buf;
}

static gnutls_datum_t datum(const char *s, size_t n) {
  return (gnutls_datum_t){.data = (unsigned char *)s, .size = (unsigned)n};
}

/* Number of certificates GnuTLS finds in a PEM text, or a GnuTLS error (< 0). */
static int count_certs(const char *pem, size_t len) {
  gnutls_x509_crt_t *crts = NULL;
  unsigned n = 0;
  gnutls_datum_t d = datum(pem, len);
  int rc = gnutls_x509_crt_list_import2(&crts, &n, &d, GNUTLS_X509_FMT_PEM, 0);
  if (rc < 0) return rc;
  for (unsigned i = 0; i < n; i++) gnutls_x509_crt_deinit(crts[i]);
  gnutls_free(crts);
  return (int)n;
}

static int check_key(const char *pem, size_t len) {
  gnutls_x509_privkey_t k;
  int rc = gnutls_x509_privkey_init(&k);
  if (rc < 0) return rc;
  gnutls_datum_t d = datum(pem, len);
  rc = gnutls_x509_privkey_import2(k, &d, GNUTLS_X509_FMT_PEM, NULL, 0);
  gnutls_x509_privkey_deinit(k);
  return rc;
}

/* The pair the way libmicrohttpd will load it at daemon start. */
static int check_pair(const char *cert, size_t clen, const char *key, size_t klen) {
  gnutls_certificate_credentials_t cred;
  int rc = gnutls_certificate_allocate_credentials(&cred);
  if (rc < 0) return rc;
  gnutls_datum_t c = datum(cert, clen), k = datum(key, klen);
  rc = gnutls_certificate_set_x509_key_mem2(cred, &c, &k, GNUTLS_X509_FMT_PEM, NULL, 0);
  gnutls_certificate_free_credentials(cred);
  return rc;
}

int ak_tls_load_files(ak_http_tls_cfg_t *tc, char **err) {
  *err = NULL;
  if (!tc->enabled) return 0;
  const char *cert_path = tc->cert;
  const char *key_path = tc->key;
  const char *ca_path = tc->client_ca;
  ak_buf_t errs = AK_BUF_INIT;
  size_t clen = 0, klen = 0, calen = 0;
  char *cert = cert_path ? read_pem(&errs, "http.tls.cert", cert_path, &clen) : NULL;
  char *key = key_path ? read_pem(&errs, "http.tls.key", key_path, &klen) : NULL;
  char *ca = ca_path ? read_pem(&errs, "http.tls.client_ca", ca_path, &calen) : NULL;
  int rc;
  bool cert_ok = false, key_ok = false;
  if (cert) {
    if ((rc = count_certs(cert, clen)) <= 0)
      add_line(&errs, "http.tls.cert: %s holds no PEM certificate (%s)", cert_path,
               rc < 0 ? gnutls_strerror(rc) : "none found");
    else cert_ok = true;
  }
  if (key) {
    /* GnuTLS's message only: it never quotes the key. */
    if ((rc = check_key(key, klen)) < 0)
      add_line(&errs, "http.tls.key: %s holds no usable PEM private key (%s)", key_path,
               rc == GNUTLS_E_DECRYPTION_FAILED ? "encrypted keys are not supported" : gnutls_strerror(rc));
    else key_ok = true;
  }
  if (cert_ok && key_ok && (rc = check_pair(cert, clen, key, klen)) < 0) {
    if (rc == GNUTLS_E_CERTIFICATE_KEY_MISMATCH)
      add_line(&errs, "http.tls.key: %s does not match the certificate in %s", key_path, cert_path);
    else
      add_line(&errs, "http.tls.key: %s with %s: %s", key_path, cert_path, gnutls_strerror(rc));
  }
  if (ca && (rc = count_certs(ca, calen)) <= 0)
    add_line(&errs, "http.tls.client_ca: %s holds no PEM certificate (%s)", ca_path,
             rc < 0 ? gnutls_strerror(rc) : "none found");
  if (errs.len || errs.failed || (cert_path && !cert) || (key_path && !key) || (ca_path && !ca)) {
    if (key) explicit_bzero(key, klen);
    free(cert);
    free(key);
    free(ca);
    *err = errs.len ? ak_buf_take(&errs, NULL) : NULL;
    ak_buf_free(&errs);
    if (!*err) *err = strdup("http.tls: out of memory");
    return -1;
  }
  ak_tls_free_files(tc);
  tc->cert_pem = cert;
  tc->key_pem = key;
  tc->client_ca_pem = ca;
  return 0;
}

void ak_tls_free_files(ak_http_tls_cfg_t *tc) {
  free(tc->cert_pem);
  free(tc->client_ca_pem);
  if (tc->key_pem) explicit_bzero(tc->key_pem, strlen(tc->key_pem));
  free(tc->key_pem);
  tc->cert_pem = tc->key_pem = tc->client_ca_pem = NULL;
}

/* --------------------------------------------------------------- the daemon ---- */

size_t ak_tls_mhd_options(const ak_http_tls_cfg_t *cfg, struct MHD_OptionItem *out, size_t max) {
  if (!out || max == 0) return 0;
  out[0] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
  if (!cfg || max < AK_TLS_MHD_OPTIONS_MAX || !cfg->enabled || !cfg->cert_pem ||
      !cfg->key_pem)
    return 0;
  size_t n = 0;
  out[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, cfg->cert_pem};
  out[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, cfg->key_pem};
  bool ask = cfg->client_cert != AK_TLS_CLIENT_CERT_NONE && cfg->client_ca_pem;
  if (ask) out[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_TRUST, 0, cfg->client_ca_pem};
  if (ask && cfg->client_cert == AK_TLS_CLIENT_CERT_REQUIRE)
    out[n++] = (struct MHD_OptionItem){MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)ak_tls_notify_connection, NULL};
  out[n] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
  return n;
}

void ak_tls_notify_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                              enum MHD_ConnectionNotificationCode toe) {
  (void)cls;
  (void)socket_context;
  if (toe != MHD_CONNECTION_NOTIFY_STARTED) return;
  /* MHD has created the session (and asked for a certificate, trust bundle loaded) but
   * not read a byte of the handshake yet: the last moment to make the request strict. */
  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_GNUTLS_SESSION);
  if (!ci || !ci->tls_session) return;
  gnutls_session_t s = (gnutls_session_t)ci->tls_session;
  gnutls_certificate_server_set_request(s, GNUTLS_CERT_REQUIRE);
  gnutls_session_set_verify_cert2(s, client_purpose, 1, 0);
}

/* -------------------------------------------------------- the peer's certificate ---- */

bool ak_tls_peer_cert_sha256(struct MHD_Connection *c, uint8_t out[32]) {
  const union MHD_ConnectionInfo *ci = c ? MHD_get_connection_info(c, MHD_CONNECTION_INFO_GNUTLS_SESSION) : NULL;
  if (!ci || !ci->tls_session) return false; /* the plain listener */
  gnutls_session_t s = (gnutls_session_t)ci->tls_session;
  if (gnutls_certificate_type_get(s) != GNUTLS_CRT_X509) return false;
  unsigned n = 0;
  const gnutls_datum_t *certs = gnutls_certificate_get_peers(s, &n);
  if (!certs || n == 0 || !certs[0].data || certs[0].size == 0) return false;
  /* With client_cert: request the handshake lets any certificate through. Only one that
   * chains to client_ca, is in its validity period and may authenticate a client counts;
   * anything else is reported as no certificate at all (the verifier: missing_signature). */
  unsigned status = 0;
  if (gnutls_certificate_verify_peers(s, client_purpose, 1, &status) < 0 || status != 0) return false;
  unsigned int mdlen = 0;
  return EVP_Digest(certs[0].data, certs[0].size, out, &mdlen, EVP_sha256(), NULL) == 1 && mdlen == 32;
}
