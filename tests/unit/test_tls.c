/* TLS for the server layer and the client_cert verifier: pin parsing and matching through
 * the vtable, the http.tls config (files read at load into an ak_htls context, errors
 * naming key and path), and the engine itself (http/tls.h) driven by a real OpenSSL client
 * through memory, both directions pumped by hand: handshakes on TLS 1.2 and 1.3, the
 * client certificate modes and what ak_htls_peer_sha256 reports, reload and refcounts.
 * Certificates are made here with libcrypto, in a temp dir. */
#include <criterion/criterion.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include "core/config.h"
#include "core/sources.h"
#include "edge/edge.h"
#include "edge/tls.h"
#include "http/tls.h"
#include "verify/verifier.h"
#include "modules.h"

extern const ak_verifier_vtable_t ak_verifier_client_cert;

/* ------------------------------------------------------------------ pins ---- */

static void *create_pins(const char *json_pins, char *err, size_t errlen) {
  json_error_t je;
  json_t *pins = json_loads(json_pins, JSON_DECODE_ANY, &je);
  cr_assert(pins, "bad test JSON: %s", je.text);
  json_t *spec = json_pack("{s:s,s:o}", "type", "client_cert", "pins", pins);
  void *v = ak_verifier_client_cert.create(spec, err, errlen);
  json_decref(spec);
  return v;
}

static ak_verify_reason_t check_fp(const void *v, const uint8_t *fp) {
  ak_verify_input_t in = {.client_cert_sha256 = fp, .now_s = 1700000000};
  return ak_verifier_client_cert.check(v, &in);
}

static const uint8_t FP_A[32] = {0x82, 0x37, 0x64, 0xbe, 0x6e, 0x96, 0xfb, 0xfa, 0xfa, 0x3e, 0xb3,
                                 0xa9, 0x5d, 0x14, 0x0d, 0x2b, 0xb1, 0x32, 0xb2, 0xaa, 0x53, 0x36,
                                 0x90, 0x72, 0xb9, 0x17, 0xe4, 0xe2, 0x2d, 0xb2, 0xd3, 0x0b};
#define FP_A_HEX "823764be6e96fbfafa3eb3a95d140d2bb132b2aa53369072b917e4e22db2d30b"
#define FP_A_COLONS                                                                            \
  "82:37:64:BE:6E:96:FB:FA:FA:3E:B3:A9:5D:14:0D:2B:B1:32:B2:AA:53:36:90:72:B9:17:E4:E2:2D:B2:" \
  "D3:0B"

Test(clientcert, vtable_shape) {
  cr_assert_str_eq(ak_verifier_client_cert.plugin.type, "client_cert");
  cr_assert(ak_verifier_client_cert.needs_client_cert);
  cr_assert_str_eq(ak_verifier_client_cert.plugin.options[0].key, "pins");
  cr_assert_null(ak_verifier_client_cert.plugin.options[1].key);
  cr_assert_null(ak_verifier_client_cert.weak_hash);
  cr_assert_null(ak_verifier_client_cert.credential_header);
}

Test(clientcert, every_pin_form_matches) {
  const char *forms[] = {"[\"sha256:" FP_A_HEX "\"]", "[\"SHA256:" FP_A_HEX "\"]", "[\"" FP_A_HEX "\"]",
                         "[\"823764BE6E96FBFAFA3EB3A95D140D2BB132B2AA53369072B917E4E22DB2D30B\"]",
                         "[\"" FP_A_COLONS "\"]", "[\"sha256:" FP_A_COLONS "\"]"};
  for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
    char err[256] = "";
    void *v = create_pins(forms[i], err, sizeof err);
    cr_assert(v, "%s: %s", forms[i], err);
    cr_expect_eq(check_fp(v, FP_A), AK_VR_OK, "%s", forms[i]);
    ak_verifier_client_cert.destroy(v);
  }
}

Test(clientcert, reasons) {
  char err[256] = "";
  uint8_t other[32];
  memcpy(other, FP_A, 32);
  other[31] ^= 1;
  void *v = create_pins("[\"sha256:" FP_A_HEX "\", \"" "00" FP_A_HEX "\"]", err, sizeof err);
  cr_assert_null(v, "a 66-digit pin must be refused");
  cr_expect_str_eq(err, "pins[1]: not a SHA-256 fingerprint; expected sha256:<64 hex>, 64 hex digits or 32 "
                        "colon-separated hex pairs");
  /* rotation: the second pin matches too */
  char two[300];
  snprintf(two, sizeof two, "[\"%064d\", \"sha256:%s\"]", 0, FP_A_HEX);
  v = create_pins(two, err, sizeof err);
  cr_assert(v, "%s", err);
  cr_expect_eq(check_fp(v, FP_A), AK_VR_OK);
  cr_expect_eq(check_fp(v, other), AK_VR_NO_MATCH);
  cr_expect_eq(check_fp(v, NULL), AK_VR_MISSING_SIGNATURE);
  uint8_t zero[32] = {0};
  cr_expect_eq(check_fp(v, zero), AK_VR_OK, "the all-zero pin is a pin like any other");
  ak_verifier_client_cert.destroy(v);
}

Test(clientcert, bad_pins_name_the_item) {
  static const struct {
    const char *pins, *want;
  } cases[] = {
    {"[\"sha256:" FP_A_HEX "\", \"sha1:" FP_A_HEX "\"]", "pins[1]: "},
    {"[\"" FP_A_HEX "\", \"" FP_A_HEX "\", \"82376\"]", "pins[2]: "},
    {"[\"sha256:823764be6e96fbfafa3eb3a95d140d2bb132b2aa53369072b917e4e22db2d30g\"]", "pins[0]: "},
    {"[\"82:37:64:BE:6E:96:FB:FA:FA:3E:B3:A9:5D:14:0D:2B:B1:32:B2:AA:53:36:90:72:B9:17:E4:E2:2D:B2:D3-0B\"]",
     "pins[0]: "},
    {"[\"8:237:64:BE:6E:96:FB:FA:FA:3E:B3:A9:5D:14:0D:2B:B1:32:B2:AA:53:36:90:72:B9:17:E4:E2:2D:B2:D3:0B\"]",
     "pins[0]: "},
    {"[\"\"]", "pins[0]: "},
    {"[\"sha256:\"]", "pins[0]: "},
    {"[42]", "pins[0]: "},
    {"[\" " FP_A_HEX "\"]", "pins[0]: "},
    {"[]", "pins: expected a list of 1 to 16"},
    {"\"" FP_A_HEX "\"", "pins: expected a list of 1 to 16"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char err[256] = "";
    void *v = create_pins(cases[i].pins, err, sizeof err);
    cr_expect_null(v, "%s accepted", cases[i].pins);
    if (v) ak_verifier_client_cert.destroy(v);
    cr_expect(!strncmp(err, cases[i].want, strlen(cases[i].want)), "%s: got \"%s\"", cases[i].pins, err);
  }
  /* 16 pins are fine, 17 are not */
  char many[17 * 70 + 8] = "[";
  for (int i = 0; i < 17; i++) {
    char one[80];
    snprintf(one, sizeof one, "%s\"%064x\"", i ? "," : "", i);
    strcat(many, one);
  }
  strcat(many, "]");
  char err[256] = "";
  cr_expect_null(create_pins(many, err, sizeof err));
  char *cut = strrchr(many, ',');
  strcpy(cut, "]");
  void *v = create_pins(many, err, sizeof err);
  cr_expect(v, "16 pins: %s", err);
  uint8_t last[32] = {0};
  last[31] = 15;
  if (v) cr_expect_eq(check_fp(v, last), AK_VR_OK, "the 16th pin is compared too");
  if (v) ak_verifier_client_cert.destroy(v);
}

/* ------------------------------------------------------------ certificates ---- */

typedef struct {
  EVP_PKEY *key;
  X509 *crt;
  char *cert_pem, *key_pem;
  uint8_t fp[32];
} ident_t;

static char *bio_text(BIO *b) {
  char *data = NULL;
  long n = BIO_get_mem_data(b, &data);
  char *s = strndup(data, (size_t)n);
  BIO_free(b);
  return s;
}

typedef enum { EKU_NONE, EKU_CLIENT, EKU_SERVER } eku_t;

static void add_ext(X509 *crt, X509 *issuer, int nid, const char *value) {
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer, crt, NULL, NULL, 0);
  X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
  cr_assert(ext, "extension %d=%s", nid, value);
  X509_add_ext(crt, ext, -1);
  X509_EXTENSION_free(ext);
}

/* issuer NULL = self-signed. */
static ident_t make_ident(const char *cn, const ident_t *issuer, bool ca, eku_t eku) {
  static long serial = 1;
  ident_t id = {0};
  id.key = EVP_EC_gen("P-256");
  cr_assert(id.key);
  id.crt = X509_new();
  X509_set_version(id.crt, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(id.crt), serial++);
  X509_gmtime_adj(X509_getm_notBefore(id.crt), -3600);
  X509_gmtime_adj(X509_getm_notAfter(id.crt), 86400);
  X509_set_pubkey(id.crt, id.key);
  X509_NAME *name = X509_get_subject_name(id.crt);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
  X509_set_issuer_name(id.crt, issuer ? X509_get_subject_name(issuer->crt) : name);
  X509 *icrt = issuer ? issuer->crt : id.crt;
  if (ca) {
    add_ext(id.crt, icrt, NID_basic_constraints, "critical,CA:TRUE");
    add_ext(id.crt, icrt, NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    add_ext(id.crt, icrt, NID_basic_constraints, "CA:FALSE");
  }
  if (eku == EKU_CLIENT) add_ext(id.crt, icrt, NID_ext_key_usage, "clientAuth");
  if (eku == EKU_SERVER) {
    add_ext(id.crt, icrt, NID_ext_key_usage, "serverAuth");
    add_ext(id.crt, icrt, NID_subject_alt_name, "IP:127.0.0.1");
  }
  cr_assert(X509_sign(id.crt, issuer ? issuer->key : id.key, EVP_sha256()) > 0);
  BIO *b = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(b, id.crt);
  id.cert_pem = bio_text(b);
  b = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(b, id.key, NULL, NULL, 0, NULL, NULL);
  id.key_pem = bio_text(b);
  unsigned char *der = NULL;
  int dlen = i2d_X509(id.crt, &der);
  cr_assert(dlen > 0);
  unsigned mdlen = 0;
  EVP_Digest(der, (size_t)dlen, id.fp, &mdlen, EVP_sha256(), NULL);
  OPENSSL_free(der);
  return id;
}

static void ident_free(ident_t *id) {
  EVP_PKEY_free(id->key);
  X509_free(id->crt);
  free(id->cert_pem);
  free(id->key_pem);
}

static char tmpdir[64];

static void write_file(const char *name, const char *text) {
  char p[256];
  snprintf(p, sizeof p, "%s/%s", tmpdir, name);
  FILE *f = fopen(p, "wb");
  cr_assert(f, "%s", p);
  fputs(text, f);
  fclose(f);
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(p);
}

static ident_t ca, srv, cli, cli_server_eku, self_signed, other_ca, inter, srv_inter, cli_inter;

static void certs_setup(void) {
  strcpy(tmpdir, "/tmp/ak_test_tls_XXXXXX");
  cr_assert(mkdtemp(tmpdir));
  ca = make_ident("ankusa test CA", NULL, true, EKU_NONE);
  other_ca = make_ident("another CA", NULL, true, EKU_NONE);
  srv = make_ident("127.0.0.1", &ca, false, EKU_SERVER);
  cli = make_ident("pinned client", &ca, false, EKU_CLIENT);
  cli_server_eku = make_ident("server-only client", &ca, false, EKU_SERVER);
  self_signed = make_ident("self-signed client", NULL, false, EKU_CLIENT);
  inter = make_ident("ankusa intermediate CA", &ca, true, EKU_NONE);
  srv_inter = make_ident("127.0.0.1", &inter, false, EKU_SERVER);
  cli_inter = make_ident("client of the intermediate", &inter, false, EKU_CLIENT);
  write_file("ca.pem", ca.cert_pem);
  write_file("inter.pem", inter.cert_pem);
  write_file("srv.pem", srv.cert_pem);
  write_file("srv.key", srv.key_pem);
  write_file("cli.key", cli.key_pem);
  write_file("garbage.pem", "-----BEGIN CERTIFICATE-----\nnot base64 at all !!\n-----END CERTIFICATE-----\n");
  write_file("secretish.key", "-----BEGIN PRIVATE KEY-----\nSECRETBYTESxyz\n-----END PRIVATE KEY-----\n");
  write_file("empty.pem", "");
  char both[8192];
  snprintf(both, sizeof both, "%s%s", srv.cert_pem, srv.key_pem);
  write_file("combined.pem", both);
  snprintf(both, sizeof both, "%s%s", srv_inter.cert_pem, inter.cert_pem);
  write_file("chain.pem", both);
  write_file("chain.key", srv_inter.key_pem);
  /* the server's key, encrypted with a pass phrase */
  BIO *b = BIO_new(BIO_s_mem());
  cr_assert(PEM_write_bio_PKCS8PrivateKey(b, srv.key, EVP_aes_256_cbc(), NULL, 0, NULL, (void *)"pass phrase"));
  char *enc = bio_text(b);
  write_file("encrypted.key", enc);
  free(enc);
}

static void certs_teardown(void) {
  ident_t *all[] = {&ca, &srv, &cli, &cli_server_eku, &self_signed, &other_ca, &inter, &srv_inter, &cli_inter};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ident_free(all[i]);
  nftw(tmpdir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

/* ------------------------------------------------------- in-memory client ---- */

/* An OpenSSL client and an ak_htls session, joined by hand: what one writes is moved to
 * the other by pump(), chunk bytes at a time (0 = all at once). */
typedef struct {
  SSL_CTX *cctx;
  SSL *c;
  BIO *c_in, *c_out;     /* ciphertext to the client; from the client */
  ak_htls_t *s;
  ak_htls_status_t st;   /* the server's first status other than OK */
  size_t chunk;
  bool asked;            /* the server asked the client for a certificate */
  unsigned long c_fail;  /* the client's error when its handshake failed */
} conn_t;

/* An OpenSSL error that reports an alert received from the peer. */
static bool is_alert(unsigned long e) {
  return ERR_GET_LIB(e) == ERR_LIB_SSL && ERR_GET_REASON(e) >= SSL_AD_REASON_OFFSET;
}

static int note_asked(SSL *ssl, void *arg) {
  (void)ssl;
  *(bool *)arg = true;
  return 1;
}

static SSL_CTX *client_ctx(int version, const ident_t *id) {
  SSL_CTX *x = SSL_CTX_new(TLS_client_method());
  cr_assert(x);
  cr_assert(SSL_CTX_set_min_proto_version(x, version));
  cr_assert(SSL_CTX_set_max_proto_version(x, version));
  if (version < TLS1_2_VERSION) { /* OpenSSL 3 allows TLS 1.1 only at security level 0 */
    SSL_CTX_set_security_level(x, 0);
    cr_assert(SSL_CTX_set_cipher_list(x, "DEFAULT:@SECLEVEL=0"));
  }
  /* the client checks the server's chain against the test CA */
  cr_assert(X509_STORE_add_cert(SSL_CTX_get_cert_store(x), ca.crt));
  SSL_CTX_set_verify(x, SSL_VERIFY_PEER, NULL);
  if (id) {
    cr_assert(SSL_CTX_use_certificate(x, id->crt));
    cr_assert(SSL_CTX_use_PrivateKey(x, id->key));
  }
  return x;
}

static void conn_open(conn_t *k, ak_htls_ctx_t *ctx, int version, const ident_t *id) {
  memset(k, 0, sizeof *k);
  k->cctx = client_ctx(version, id);
  SSL_CTX_set_cert_cb(k->cctx, note_asked, &k->asked);
  k->c = SSL_new(k->cctx);
  k->c_in = BIO_new(BIO_s_mem());
  k->c_out = BIO_new(BIO_s_mem());
  cr_assert(k->c && k->c_in && k->c_out);
  BIO_set_mem_eof_return(k->c_in, -1);
  BIO_set_mem_eof_return(k->c_out, -1);
  SSL_set_bio(k->c, k->c_in, k->c_out);
  SSL_set_connect_state(k->c);
  k->s = ak_htls_new(ctx);
  cr_assert(k->s);
  size_t n = 1;
  cr_assert_null(ak_htls_peek_out(k->s, &n));
  cr_assert_eq(n, 0);
}

static void conn_close(conn_t *k) {
  SSL_free(k->c);
  SSL_CTX_free(k->cctx);
  ak_htls_free(k->s);
}

static void note(conn_t *k, ak_htls_status_t st) {
  if (st != AK_HTLS_OK && k->st == AK_HTLS_OK) k->st = st;
}

/* Moves what each side wrote to the other; the bytes moved. */
static size_t step(conn_t *k) {
  size_t moved = 0;
  if (!SSL_is_init_finished(k->c) && !k->c_fail) {
    ERR_clear_error();
    int r = SSL_do_handshake(k->c);
    if (r <= 0 && SSL_get_error(k->c, r) == SSL_ERROR_SSL) k->c_fail = ERR_peek_last_error();
  }
  uint8_t buf[65536];
  size_t cap = k->chunk ? k->chunk : sizeof buf;
  int n;
  while ((n = BIO_read(k->c_out, buf, (int)cap)) > 0) {
    note(k, ak_htls_feed(k->s, buf, (size_t)n));
    moved += (size_t)n;
  }
  size_t avail;
  const uint8_t *p;
  while ((p = ak_htls_peek_out(k->s, &avail))) {
    cr_assert_gt(avail, 0);
    size_t m = k->chunk && k->chunk < avail ? k->chunk : avail;
    cr_assert_eq(BIO_write(k->c_in, p, (int)m), (int)m);
    ak_htls_consume_out(k->s, m);
    moved += m;
  }
  return moved;
}

static void pump(conn_t *k) {
  for (int i = 0; i < 1000 && step(k) > 0; i++) {
  }
}

/* true when both sides finished the handshake. */
static bool handshake(conn_t *k) {
  pump(k);
  return SSL_is_init_finished(k->c) && ak_htls_established(k->s) && k->st == AK_HTLS_OK;
}

/* Plaintext the server has, up to cap bytes. */
static size_t srv_read(conn_t *k, uint8_t *out, size_t cap) {
  size_t total = 0, got;
  pump(k);
  while (total < cap) {
    ak_htls_status_t st = ak_htls_read(k->s, out + total, cap - total > 1000 ? 1000 : cap - total, &got);
    note(k, st);
    if (st != AK_HTLS_OK || got == 0) break;
    total += got;
    pump(k); /* a read may have written (TLS 1.3 key update answers) */
  }
  return total;
}

/* Plaintext the client has, up to cap bytes; -1 when its connection failed (an alert). */
static long cli_read(conn_t *k, uint8_t *out, size_t cap, int *ssl_err) {
  size_t total = 0, got = 0;
  *ssl_err = SSL_ERROR_NONE;
  pump(k);
  while (total < cap) {
    ERR_clear_error();
    int r = SSL_read_ex(k->c, out + total, cap - total, &got);
    if (r != 1) {
      *ssl_err = SSL_get_error(k->c, r);
      if (*ssl_err == SSL_ERROR_WANT_READ) *ssl_err = SSL_ERROR_NONE;
      break;
    }
    total += got;
    pump(k);
  }
  return *ssl_err == SSL_ERROR_NONE || *ssl_err == SSL_ERROR_ZERO_RETURN ? (long)total : -1;
}

static void cli_write(conn_t *k, const void *p, size_t n) {
  size_t w = 0;
  cr_assert_eq(SSL_write_ex(k->c, p, n, &w), 1);
  cr_assert_eq(w, n);
  pump(k);
}

static ak_htls_ctx_t *server_ctx(const char *cert, const char *key, const char *client_ca, ak_htls_client_t mode) {
  char c[256], kp[256], ca_p[256];
  snprintf(c, sizeof c, "%s/%s", tmpdir, cert);
  snprintf(kp, sizeof kp, "%s/%s", tmpdir, key);
  if (client_ca) snprintf(ca_p, sizeof ca_p, "%s/%s", tmpdir, client_ca);
  ak_htls_files_t f = {.cert = c, .key = kp, .client_ca = client_ca ? ca_p : NULL, .client_cert = mode,
                       .key_prefix = "http.tls"};
  char *err = NULL;
  ak_htls_ctx_t *x = ak_htls_ctx_new(&f, &err);
  cr_assert(x, "%s", err);
  cr_assert_null(err);
  return x;
}

/* What a server in mode `mode` reports for a client presenting id (NULL = none):
 * 1 = handshake done and a fingerprint (into fp), 0 = done and none, -1 = refused. */
static int outcome(ak_htls_ctx_t *ctx, int version, const ident_t *id, uint8_t fp[32], bool *asked) {
  conn_t k;
  conn_open(&k, ctx, version, id);
  int r = -1;
  if (handshake(&k)) {
    /* a request and an answer prove the session works both ways */
    cli_write(&k, "ping", 4);
    uint8_t buf[16];
    size_t n = srv_read(&k, buf, sizeof buf);
    if (n == 4 && !memcmp(buf, "ping", 4) && ak_htls_write(k.s, (const uint8_t *)"pong", 4) == AK_HTLS_OK) {
      int e;
      long got = cli_read(&k, buf, sizeof buf, &e);
      if (got == 4 && !memcmp(buf, "pong", 4)) r = ak_htls_peer_sha256(k.s, fp) ? 1 : 0;
    }
  } else {
    cr_expect_eq(k.st, AK_HTLS_ERROR, "a refused handshake is AK_HTLS_ERROR");
  }
  /* on TLS 1.3 the client finishes before the server checks its certificate: it learns of
   * the refusal from the alert on its first read */
  if (r == -1 && k.st == AK_HTLS_ERROR) {
    uint8_t buf[16];
    if (SSL_is_init_finished(k.c)) {
      int e;
      cr_expect_eq(cli_read(&k, buf, sizeof buf, &e), -1);
      cr_expect_eq(e, SSL_ERROR_SSL);
      cr_expect(is_alert(ERR_peek_last_error()), "the client read the server's alert");
    } else {
      cr_expect(is_alert(k.c_fail), "the client's handshake ended on the server's alert (%lu)", k.c_fail);
    }
    cr_expect_eq(ak_htls_read(k.s, buf, sizeof buf, &(size_t){0}), AK_HTLS_ERROR);
    cr_expect_eq(ak_htls_write(k.s, buf, 1), AK_HTLS_ERROR);
  }
  if (asked) *asked = k.asked;
  conn_close(&k);
  return r;
}

static const int versions[] = {TLS1_2_VERSION, TLS1_3_VERSION};
static const char *vname(int v) { return v == TLS1_3_VERSION ? "TLS 1.3" : "TLS 1.2"; }

/* -------------------------------------------------------------- config ---- */

static const char *const no_env[] = {NULL};

static int load(const char *const *env, ak_config_t **cfg, char **err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int load(const char *const *env, ak_config_t **cfg, char **err, const char *fmt, ...) {
  char yaml[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(yaml, sizeof yaml, fmt, ap);
  va_end(ap);
  return ak_config_load_string(ak_modules(), yaml, strlen(yaml), env ? env : no_env, cfg, err);
}

#define TLS_YAML(extra)                              \
  "http:\n  tls:\n    cert: %s/srv.pem\n    key: %s/srv.key\n" extra

TestSuite(tls_config, .init = certs_setup, .fini = certs_teardown);

Test(tls_config, absent_or_null_means_off) {
  ak_config_t *cfg = NULL;
  char *err = NULL;
  cr_assert_eq(load(NULL, &cfg, &err, "log: {level: info}\n"), 0, "%s", err);
  cr_expect_not(ak_http_cfg(cfg)->tls.enabled);
  cr_expect_null(ak_http_cfg(cfg)->tls.ctx);
  cr_expect_null(json_object_get(json_object_get(cfg->effective, "http"), "tls"), "left out of print-config");
  ak_config_free(cfg);
  cr_assert_eq(load(NULL, &cfg, &err, "http:\n  tls: null\n"), 0, "%s", err);
  cr_expect_not(ak_http_cfg(cfg)->tls.enabled);
  cr_expect_null(ak_http_cfg(cfg)->tls.ctx);
  ak_config_free(cfg);
  /* the port override does not switch TLS on by itself */
  const char *env[] = {"ANKUSA_HTTP_TLS_PORT=9443", NULL};
  cr_assert_eq(load(env, &cfg, &err, "http: {port: 4000}\n"), 0, "%s", err);
  cr_expect_not(ak_http_cfg(cfg)->tls.enabled);
  ak_config_free(cfg);
}

Test(tls_config, files_are_loaded_once) {
  ak_config_t *cfg = NULL;
  char *err = NULL;
  cr_assert_eq(load(NULL, &cfg, &err, TLS_YAML("    client_ca: %s/ca.pem\n"), tmpdir, tmpdir, tmpdir), 0,
               "%s", err);
  cr_expect(ak_http_cfg(cfg)->tls.enabled);
  cr_expect_eq(ak_http_cfg(cfg)->tls.port, 4443);
  cr_assert(ak_http_cfg(cfg)->tls.ctx);
  uint8_t fp[32];
  ak_htls_ctx_cert_sha256(ak_http_cfg(cfg)->tls.ctx, fp);
  cr_expect_arr_eq(fp, srv.fp, 32, "the context serves http.tls.cert");
  cr_expect_eq(ak_http_cfg(cfg)->tls.client_cert, AK_TLS_CLIENT_CERT_REQUEST, "request when client_ca is set");
  json_t *tls = json_object_get(json_object_get(cfg->effective, "http"), "tls");
  cr_expect_str_eq(json_string_value(json_object_get(tls, "client_cert")), "request");
  /* the effective tree (print-config) names the files; it never holds their text */
  json_t *red = ak_config_redacted(cfg);
  char *dump = json_dumps(red, 0);
  cr_expect_null(strstr(dump, "PRIVATE KEY"));
  cr_expect_not_null(strstr(dump, "/srv.key"));
  free(dump);
  json_decref(red);

  bool asked = false;
  cr_expect_eq(outcome(ak_http_cfg(cfg)->tls.ctx, TLS1_3_VERSION, &cli, fp, &asked), 1);
  cr_expect_arr_eq(fp, cli.fp, 32);
  cr_expect(asked, "request asks for a certificate");
  cr_expect_eq(outcome(ak_http_cfg(cfg)->tls.ctx, TLS1_3_VERSION, NULL, fp, NULL), 0, "and goes on without one");
  ak_config_free(cfg);

  /* require refuses a client without a certificate; none asks for nothing */
  cr_assert_eq(load(NULL, &cfg, &err, TLS_YAML("    client_ca: %s/ca.pem\n    client_cert: require\n    port: 0\n"),
                    tmpdir, tmpdir, tmpdir), 0, "%s", err);
  cr_expect_eq(ak_http_cfg(cfg)->tls.client_cert, AK_TLS_CLIENT_CERT_REQUIRE);
  cr_expect_eq(ak_http_cfg(cfg)->tls.port, 0);
  cr_expect_eq(outcome(ak_http_cfg(cfg)->tls.ctx, TLS1_3_VERSION, NULL, fp, NULL), -1);
  cr_expect_eq(outcome(ak_http_cfg(cfg)->tls.ctx, TLS1_2_VERSION, &cli, fp, NULL), 1);
  ak_config_free(cfg);
  cr_assert_eq(load(NULL, &cfg, &err, TLS_YAML("    client_ca: %s/ca.pem\n    client_cert: none\n"), tmpdir,
                    tmpdir, tmpdir), 0, "%s", err);
  cr_expect_eq(outcome(ak_http_cfg(cfg)->tls.ctx, TLS1_3_VERSION, &cli, fp, &asked), 0);
  cr_expect_not(asked, "none asks for no certificate");
  ak_config_free(cfg);

  /* no client_ca: no client certificates */
  const char *env[] = {"ANKUSA_HTTP_TLS_PORT=9443", NULL};
  cr_assert_eq(load(env, &cfg, &err, TLS_YAML(""), tmpdir, tmpdir), 0, "%s", err);
  cr_expect_eq(ak_http_cfg(cfg)->tls.port, 9443, "ANKUSA_HTTP_TLS_PORT");
  cr_expect_eq(ak_http_cfg(cfg)->tls.client_cert, AK_TLS_CLIENT_CERT_NONE);
  cr_expect_eq(outcome(ak_http_cfg(cfg)->tls.ctx, TLS1_3_VERSION, &cli, fp, &asked), 0);
  cr_expect_not(asked);
  ak_config_free(cfg);
}

/* One failing load: err must contain every line of want (NULL-terminated), and never nope. */
static void expect_error(const char *yaml, const char *const *want, const char *nope) {
  ak_config_t *cfg = NULL;
  char *err = NULL;
  int rc = ak_config_load_string(ak_modules(), yaml, strlen(yaml), no_env, &cfg, &err);
  cr_expect_eq(rc, -1, "loaded:\n%s", yaml);
  cr_expect_null(cfg);
  if (rc == 0) ak_config_free(cfg);
  for (size_t i = 0; want[i]; i++) cr_expect(err && strstr(err, want[i]), "want \"%s\" in \"%s\"", want[i], err);
  if (nope) cr_expect(!err || !strstr(err, nope), "\"%s\" leaked into \"%s\"", nope, err);
  free(err);
}

Test(tls_config, errors_name_key_and_path) {
  char yaml[2048], w1[512], w2[512], w3[512];
  snprintf(yaml, sizeof yaml, TLS_YAML(""), tmpdir, "/nonexistent/dir");
  snprintf(w1, sizeof w1, "http.tls.key: cannot read /nonexistent/dir/srv.key: No such file or directory");
  expect_error(yaml, (const char *[]){w1, NULL}, NULL);

  snprintf(yaml, sizeof yaml, "http:\n  tls:\n    cert: %s/nope.pem\n    key: %s/nope.key\n    client_ca: %s/nope-ca.pem\n",
           tmpdir, tmpdir, tmpdir);
  snprintf(w1, sizeof w1, "http.tls.cert: cannot read %s/nope.pem: No such file or directory", tmpdir);
  snprintf(w2, sizeof w2, "http.tls.key: cannot read %s/nope.key: No such file or directory", tmpdir);
  snprintf(w3, sizeof w3, "http.tls.client_ca: cannot read %s/nope-ca.pem: No such file or directory", tmpdir);
  expect_error(yaml, (const char *[]){w1, w2, w3, NULL}, NULL);

  snprintf(yaml, sizeof yaml, "http:\n  tls:\n    cert: %s\n    key: %s/srv.key\n", tmpdir, tmpdir);
  snprintf(w1, sizeof w1, "http.tls.cert: cannot read %s: Is a directory", tmpdir);
  expect_error(yaml, (const char *[]){w1, NULL}, NULL);

  snprintf(yaml, sizeof yaml, "http:\n  tls:\n    cert: %s/garbage.pem\n    key: %s/srv.key\n", tmpdir, tmpdir);
  snprintf(w1, sizeof w1, "http.tls.cert: %s/garbage.pem holds no PEM certificate", tmpdir);
  expect_error(yaml, (const char *[]){w1, NULL}, NULL);

  snprintf(yaml, sizeof yaml, "http:\n  tls:\n    cert: %s/empty.pem\n    key: %s/srv.key\n", tmpdir, tmpdir);
  snprintf(w1, sizeof w1, "http.tls.cert: %s/empty.pem holds no PEM certificate", tmpdir);
  expect_error(yaml, (const char *[]){w1, NULL}, NULL);

  /* a bad key is named, its bytes never shown */
  snprintf(yaml, sizeof yaml, "http:\n  tls:\n    cert: %s/srv.pem\n    key: %s/secretish.key\n", tmpdir, tmpdir);
  snprintf(w1, sizeof w1, "http.tls.key: %s/secretish.key holds no usable PEM private key", tmpdir);
  expect_error(yaml, (const char *[]){w1, NULL}, "SECRETBYTES");
  snprintf(yaml, sizeof yaml, "http:\n  tls:\n    cert: %s/srv.pem\n    key: %s/encrypted.key\n", tmpdir, tmpdir);
  snprintf(w1, sizeof w1, "http.tls.key: %s/encrypted.key holds no usable PEM private key (encrypted keys are not "
           "supported)", tmpdir);
  expect_error(yaml, (const char *[]){w1, NULL}, "ENCRYPTED");

  /* a key that is not the certificate's */
  snprintf(yaml, sizeof yaml, "http:\n  tls:\n    cert: %s/srv.pem\n    key: %s/cli.key\n", tmpdir, tmpdir);
  snprintf(w1, sizeof w1, "http.tls.key: %s/cli.key does not match the certificate in %s/srv.pem", tmpdir, tmpdir);
  expect_error(yaml, (const char *[]){w1, NULL}, "PRIVATE KEY");

  snprintf(yaml, sizeof yaml, TLS_YAML("    client_ca: %s/garbage.pem\n"), tmpdir, tmpdir, tmpdir);
  snprintf(w1, sizeof w1, "http.tls.client_ca: %s/garbage.pem holds no PEM certificate", tmpdir);
  expect_error(yaml, (const char *[]){w1, NULL}, NULL);

  /* schema: required keys, bounds, the enum, asking without a bundle */
  expect_error("http:\n  tls: {}\n",
               (const char *[]){"http.tls: missing required key \"cert\"", "http.tls: missing required key \"key\"", NULL},
               NULL);
  expect_error("http:\n  tls: 443\n", (const char *[]){"http.tls: expected a mapping", NULL}, NULL);
  snprintf(yaml, sizeof yaml, TLS_YAML("    port: 70000\n"), tmpdir, tmpdir);
  expect_error(yaml, (const char *[]){"http.tls.port must be between 0 and 65535, got 70000", NULL}, NULL);
  snprintf(yaml, sizeof yaml, TLS_YAML("    client_cert: optional\n"), tmpdir, tmpdir);
  expect_error(yaml,
               (const char *[]){"http.tls.client_cert: unknown value \"optional\"; expected one of none, request, require",
                                NULL},
               NULL);
  snprintf(yaml, sizeof yaml, TLS_YAML("    client_cert: require\n"), tmpdir, tmpdir);
  expect_error(yaml, (const char *[]){"http.tls.client_cert: \"require\" needs http.tls.client_ca", NULL}, NULL);
  snprintf(yaml, sizeof yaml, TLS_YAML("    client_cert: request\n"), tmpdir, tmpdir);
  expect_error(yaml, (const char *[]){"http.tls.client_cert: \"request\" needs http.tls.client_ca", NULL}, NULL);
}

Test(tls_config, client_cert_sources) {
  char yaml[4096];
  ak_config_t *cfg = NULL;
  char *err = NULL;
  const char *src = "sources:\n  m:\n    verify: {type: client_cert, pins: [\"sha256:" FP_A_HEX "\", \"" FP_A_COLONS
                    "\"]}\n    sinks: [{type: log}]\n";
  cr_assert_eq(load(NULL, &cfg, &err, TLS_YAML("    client_ca: %s/ca.pem\n%s"), tmpdir, tmpdir, tmpdir, src), 0,
               "%s", err);
  const ak_source_cfg_t *m = ak_source_cfg_find(cfg, "m");
  cr_assert(m);
  cr_expect_str_eq(m->verify_type, "client_cert");
  ak_verifier_t *v = ak_verifier_new(m->verify, NULL, 0);
  cr_assert(v);
  cr_expect(ak_verifier_needs_client_cert(v));
  ak_verify_input_t in = {.client_cert_sha256 = FP_A};
  cr_expect_eq(ak_verifier_check(v, &in), AK_VR_OK);
  in.client_cert_sha256 = NULL;
  cr_expect_eq(ak_verifier_check(v, &in), AK_VR_MISSING_SIGNATURE);
  ak_verifier_free(v);
  ak_config_free(cfg);

  /* a bad pin is named by its full dotted key */
  snprintf(yaml, sizeof yaml,
           TLS_YAML("    client_ca: %s/ca.pem\nsources:\n  m:\n    verify:\n      type: client_cert\n"
                    "      pins: [\"" FP_A_HEX "\", \"sha256:abc\"]\n    sinks: [{type: log}]\n"),
           tmpdir, tmpdir, tmpdir);
  expect_error(yaml, (const char *[]){"sources.m.verify.pins[1]: not a SHA-256 fingerprint", NULL}, NULL);
  snprintf(yaml, sizeof yaml,
           TLS_YAML("    client_ca: %s/ca.pem\nsources:\n  m:\n    verify: {type: client_cert}\n"
                    "    sinks: [{type: log}]\n"),
           tmpdir, tmpdir, tmpdir);
  expect_error(yaml, (const char *[]){"sources.m.verify: missing required key \"pins\"", NULL}, NULL);

  /* a listener that never asks for a certificate would refuse every request */
  expect_error(src, (const char *[]){"sources.m.verify: type client_cert needs http.tls with a client_ca", NULL},
               NULL);
  snprintf(yaml, sizeof yaml, TLS_YAML("    client_ca: %s/ca.pem\n    client_cert: none\n%s"), tmpdir, tmpdir,
           tmpdir, src);
  expect_error(yaml, (const char *[]){"sources.m.verify: type client_cert needs http.tls with a client_ca", NULL},
               NULL);
}

/* ---------------------------------------------------- the engine (http/tls.h) ---- */

TestSuite(htls, .init = certs_setup, .fini = certs_teardown);

static void fill(uint8_t *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(i * 31u + seed + (i >> 9));
}

/* Handshake, plaintext both ways (small, then larger than many records), then close_notify
 * both ways. chunk: bytes moved per step (0 = all). */
static void echo(int version, size_t chunk) {
  ak_htls_ctx_t *ctx = server_ctx("srv.pem", "srv.key", NULL, AK_HTLS_CLIENT_NONE);
  conn_t k;
  conn_open(&k, ctx, version, NULL);
  k.chunk = chunk;
  ak_htls_ctx_unref(ctx);
  /* written before the handshake: held, then sent first */
  cr_assert_eq(ak_htls_write(k.s, (const uint8_t *)"early ", 6), AK_HTLS_OK);
  size_t n = 1;
  cr_expect_null(ak_htls_peek_out(k.s, &n), "nothing to send before the client says hello");
  cr_assert(handshake(&k), "%s: handshake (server status %d)", vname(version), k.st);
  cr_expect_eq(SSL_version(k.c), version);
  uint8_t fp[32];
  cr_expect_not(ak_htls_peer_sha256(k.s, fp), "no certificate was asked for");

  cli_write(&k, "hello", 5);
  uint8_t buf[16];
  cr_assert_eq(srv_read(&k, buf, sizeof buf), 5);
  cr_expect_arr_eq(buf, "hello", 5);
  cr_assert_eq(ak_htls_write(k.s, (const uint8_t *)"world", 5), AK_HTLS_OK);
  int e;
  cr_assert_eq(cli_read(&k, buf, sizeof buf, &e), 11, "%s: ssl error %d", vname(version), e);
  cr_expect_arr_eq(buf, "early world", 11);
  if (version == TLS1_3_VERSION) {
    /* a key update the client asks to be answered: the server's answer comes out of a read */
    cr_assert_eq(SSL_key_update(k.c, SSL_KEY_UPDATE_REQUESTED), 1);
    cli_write(&k, "new keys", 8);
    cr_assert_eq(srv_read(&k, buf, sizeof buf), 8);
    cr_expect_arr_eq(buf, "new keys", 8);
    cr_assert_eq(ak_htls_write(k.s, (const uint8_t *)"ok", 2), AK_HTLS_OK);
    cr_assert_eq(cli_read(&k, buf, sizeof buf, &e), 2, "ssl error %d", e);
    cr_expect_arr_eq(buf, "ok", 2);
  }

  enum { BIG = 300000 };
  uint8_t *want = malloc(BIG), *got = malloc(BIG);
  cr_assert(want && got);
  fill(want, BIG, 7);
  cli_write(&k, want, BIG);
  cr_assert_eq(srv_read(&k, got, BIG), BIG);
  cr_expect_arr_eq(got, want, BIG);
  fill(want, BIG, 11);
  /* the server writes in pieces while its earlier ciphertext is only half sent */
  for (size_t off = 0; off < BIG; off += 70000) {
    cr_assert_eq(ak_htls_write(k.s, want + off, BIG - off < 70000 ? BIG - off : 70000), AK_HTLS_OK);
    size_t avail;
    const uint8_t *p = ak_htls_peek_out(k.s, &avail);
    cr_assert(p && avail > 1);
    cr_assert_eq(BIO_write(k.c_in, p, (int)(avail / 2)), (int)(avail / 2));
    ak_htls_consume_out(k.s, avail / 2);
  }
  memset(got, 0, BIG);
  cr_assert_eq(cli_read(&k, got, BIG, &e), BIG, "ssl error %d", e);
  cr_expect_arr_eq(got, want, BIG);
  free(want);
  free(got);

  /* close_notify from the server, then from the client */
  ak_htls_shutdown(k.s);
  cr_expect_eq(cli_read(&k, buf, sizeof buf, &e), 0);
  cr_expect_eq(e, SSL_ERROR_ZERO_RETURN, "the client saw close_notify");
  cr_expect_eq(ak_htls_write(k.s, (const uint8_t *)"x", 1), AK_HTLS_ERROR, "no write after shutdown");
  cr_expect_eq(SSL_shutdown(k.c), 1);
  pump(&k);
  size_t g = 1;
  cr_expect_eq(ak_htls_read(k.s, buf, sizeof buf, &g), AK_HTLS_CLOSED);
  cr_expect_eq(g, 0);
  cr_expect_eq(ak_htls_feed(k.s, NULL, 0), AK_HTLS_CLOSED);
  conn_close(&k);
}

Test(htls, handshake_and_echo_tls12) { echo(TLS1_2_VERSION, 0); }
Test(htls, handshake_and_echo_tls13) { echo(TLS1_3_VERSION, 0); }
Test(htls, bytes_trickle_in_and_out) {
  echo(TLS1_3_VERSION, 7);
  echo(TLS1_2_VERSION, 1);
}

Test(htls, tls11_client_refused) {
  ak_htls_ctx_t *ctx = server_ctx("srv.pem", "srv.key", NULL, AK_HTLS_CLIENT_NONE);
  conn_t k;
  conn_open(&k, ctx, TLS1_1_VERSION, NULL);
  cr_expect_not(handshake(&k));
  cr_expect_eq(k.st, AK_HTLS_ERROR);
  cr_expect_not(ak_htls_established(k.s));
  cr_expect_not(SSL_is_init_finished(k.c));
  cr_expect_eq(ERR_GET_REASON(k.c_fail), SSL_R_TLSV1_ALERT_PROTOCOL_VERSION, "the client read the server's "
               "protocol_version alert (%lu)", k.c_fail);
  cr_expect_eq(ak_htls_feed(k.s, (const uint8_t *)"x", 1), AK_HTLS_ERROR, "the session stays failed");
  conn_close(&k);
  ak_htls_ctx_unref(ctx);
}

Test(htls, chain_is_sent) {
  /* leaf then intermediate in the cert file: a client that trusts only the root verifies */
  ak_htls_ctx_t *ctx = server_ctx("chain.pem", "chain.key", NULL, AK_HTLS_CLIENT_NONE);
  uint8_t fp[32];
  ak_htls_ctx_cert_sha256(ctx, fp);
  cr_expect_arr_eq(fp, srv_inter.fp, 32, "the leaf is the first certificate of the file");
  for (size_t v = 0; v < 2; v++) cr_expect_eq(outcome(ctx, versions[v], NULL, fp, NULL), 0, "%s", vname(versions[v]));
  ak_htls_ctx_unref(ctx);
  /* a file holding the certificate and the key serves as both */
  ctx = server_ctx("combined.pem", "combined.pem", NULL, AK_HTLS_CLIENT_NONE);
  cr_expect_eq(outcome(ctx, TLS1_3_VERSION, NULL, fp, NULL), 0);
  ak_htls_ctx_unref(ctx);
}

Test(htls, client_cert_none_asks_for_nothing) {
  ak_htls_ctx_t *ctx = server_ctx("srv.pem", "srv.key", "ca.pem", AK_HTLS_CLIENT_NONE);
  for (size_t v = 0; v < 2; v++) {
    uint8_t fp[32];
    bool asked = true;
    cr_expect_eq(outcome(ctx, versions[v], &cli, fp, &asked), 0, "%s", vname(versions[v]));
    cr_expect_not(asked, "%s: a certificate was asked for", vname(versions[v]));
  }
  ak_htls_ctx_unref(ctx);
}

Test(htls, request_counts_only_ca_issued_client_certificates) {
  ak_htls_ctx_t *ctx = server_ctx("srv.pem", "srv.key", "ca.pem", AK_HTLS_CLIENT_REQUEST);
  for (size_t v = 0; v < 2; v++) {
    const char *vn = vname(versions[v]);
    uint8_t fp[32] = {0};
    bool asked = false;
    cr_expect_eq(outcome(ctx, versions[v], NULL, fp, &asked), 0, "%s: no certificate: handshake, no pin", vn);
    cr_expect(asked, "%s: request asks", vn);
    cr_expect_eq(outcome(ctx, versions[v], &cli, fp, NULL), 1, "%s: a CA-issued certificate counts", vn);
    cr_expect_arr_eq(fp, cli.fp, 32, "%s: SHA-256 of the certificate's DER", vn);
    cr_expect_eq(outcome(ctx, versions[v], &self_signed, fp, NULL), 0, "%s: self-signed counts as none", vn);
    cr_expect_eq(outcome(ctx, versions[v], &cli_server_eku, fp, NULL), 0, "%s: serverAuth-only counts as none", vn);
    cr_expect_eq(outcome(ctx, versions[v], &cli_inter, fp, NULL), 0, "%s: the intermediate is not in client_ca", vn);
  }
  ak_htls_ctx_unref(ctx);
  /* every certificate of client_ca is an anchor: a bundle of the intermediate alone */
  ctx = server_ctx("srv.pem", "srv.key", "inter.pem", AK_HTLS_CLIENT_REQUEST);
  uint8_t fp[32];
  cr_expect_eq(outcome(ctx, TLS1_3_VERSION, &cli_inter, fp, NULL), 1);
  cr_expect_arr_eq(fp, cli_inter.fp, 32);
  cr_expect_eq(outcome(ctx, TLS1_3_VERSION, &cli, fp, NULL), 0, "issued by the root, which is not in the bundle");
  ak_htls_ctx_unref(ctx);
}

Test(htls, require_refuses_without_a_ca_issued_client_certificate) {
  ak_htls_ctx_t *ctx = server_ctx("srv.pem", "srv.key", "ca.pem", AK_HTLS_CLIENT_REQUIRE);
  for (size_t v = 0; v < 2; v++) {
    const char *vn = vname(versions[v]);
    uint8_t fp[32] = {0};
    cr_expect_eq(outcome(ctx, versions[v], &cli, fp, NULL), 1, "%s: a CA-issued certificate", vn);
    cr_expect_arr_eq(fp, cli.fp, 32, "%s", vn);
    cr_expect_eq(outcome(ctx, versions[v], NULL, fp, NULL), -1, "%s: no certificate got through", vn);
    cr_expect_eq(outcome(ctx, versions[v], &self_signed, fp, NULL), -1, "%s: self-signed got through", vn);
    cr_expect_eq(outcome(ctx, versions[v], &cli_server_eku, fp, NULL), -1, "%s: serverAuth-only got through", vn);
  }
  ak_htls_ctx_unref(ctx);
}

Test(htls, no_certificate_before_the_handshake) {
  ak_htls_ctx_t *ctx = server_ctx("srv.pem", "srv.key", "ca.pem", AK_HTLS_CLIENT_REQUEST);
  ak_htls_t *t = ak_htls_new(ctx);
  ak_htls_ctx_unref(ctx);
  cr_assert(t);
  uint8_t fp[32], buf[8];
  size_t got = 1;
  cr_expect_not(ak_htls_established(t));
  cr_expect_not(ak_htls_peer_sha256(t, fp));
  cr_expect_eq(ak_htls_read(t, buf, sizeof buf, &got), AK_HTLS_OK);
  cr_expect_eq(got, 0);
  ak_htls_shutdown(t); /* nothing to close yet: nothing to send */
  size_t n = 1;
  cr_expect_null(ak_htls_peek_out(t, &n));
  /* not TLS at all */
  cr_expect_eq(ak_htls_feed(t, (const uint8_t *)"GET / HTTP/1.1\r\n\r\n", 18), AK_HTLS_ERROR);
  ak_htls_free(t);
}

static void put(const char *name, const char *text) { write_file(name, text); }

Test(htls, reload_picks_up_new_files_and_keeps_the_old_on_error) {
  put("r.pem", srv.cert_pem);
  put("r.key", srv.key_pem);
  ak_htls_ctx_t *old = server_ctx("r.pem", "r.key", "ca.pem", AK_HTLS_CLIENT_REQUIRE);
  uint8_t fp[32];
  ak_htls_ctx_cert_sha256(old, fp);
  cr_expect_arr_eq(fp, srv.fp, 32);

  ident_t srv2 = make_ident("127.0.0.1", &ca, false, EKU_SERVER);
  put("r.pem", srv2.cert_pem);
  put("r.key", srv2.key_pem);
  char *err = NULL;
  ak_htls_ctx_t *now = ak_htls_ctx_reload(old, &err);
  cr_assert(now, "%s", err);
  ak_htls_ctx_cert_sha256(now, fp);
  cr_expect_arr_eq(fp, srv2.fp, 32, "the new certificate is served");
  /* same paths and mode: still require, still client_ca */
  cr_expect_eq(outcome(now, TLS1_3_VERSION, NULL, fp, NULL), -1);
  cr_expect_eq(outcome(now, TLS1_3_VERSION, &cli, fp, NULL), 1);
  conn_t k;
  conn_open(&k, now, TLS1_2_VERSION, &cli);
  cr_assert(handshake(&k));
  cr_expect_eq(X509_cmp(SSL_get0_peer_certificate(k.c), srv2.crt), 0, "the client got the new certificate");
  conn_close(&k);

  /* a key that is not the certificate's: refused, named, the serving context untouched */
  put("r.key", cli.key_pem);
  cr_expect_null(ak_htls_ctx_reload(now, &err));
  char want[512];
  snprintf(want, sizeof want, "http.tls.key: %s/r.key does not match the certificate in %s/r.pem", tmpdir, tmpdir);
  cr_expect(err && strstr(err, want), "got \"%s\"", err);
  cr_expect(err && !strstr(err, "PRIVATE"), "%s", err);
  free(err);
  put("r.key", "-----BEGIN PRIVATE KEY-----\nSECRETBYTESxyz\n-----END PRIVATE KEY-----\n");
  cr_expect_null(ak_htls_ctx_reload(now, &err));
  cr_expect(err && strstr(err, "http.tls.key: ") && strstr(err, "/r.key holds no usable PEM private key"), "%s", err);
  cr_expect(err && !strstr(err, "SECRETBYTES"), "%s", err);
  free(err);
  unlink(strcat(strcpy(want, tmpdir), "/r.pem"));
  cr_expect_null(ak_htls_ctx_reload(now, &err));
  cr_expect(err && strstr(err, "http.tls.cert: cannot read ") && strstr(err, "r.pem: No such file or directory"),
            "%s", err);
  free(err);
  cr_expect_eq(outcome(now, TLS1_3_VERSION, &cli, fp, NULL), 1, "the last good context keeps serving");
  cr_expect_eq(outcome(old, TLS1_3_VERSION, &cli, fp, NULL), 1, "and so does the one before");
  ak_htls_ctx_unref(old);
  ak_htls_ctx_unref(now);
  ident_free(&srv2);
}

Test(htls, a_session_holds_its_context) {
  ak_htls_ctx_t *ctx = server_ctx("srv.pem", "srv.key", "ca.pem", AK_HTLS_CLIENT_REQUEST);
  cr_assert_eq(ak_htls_ctx_ref(ctx), ctx);
  conn_t k, k2;
  conn_open(&k, ctx, TLS1_3_VERSION, &cli);
  conn_open(&k2, ctx, TLS1_2_VERSION, NULL);
  ak_htls_ctx_unref(ctx);
  ak_htls_ctx_unref(ctx); /* the server's references are gone; the sessions hold theirs */
  cr_assert(handshake(&k));
  cr_assert(handshake(&k2));
  conn_close(&k2);
  uint8_t fp[32];
  cr_expect(ak_htls_peer_sha256(k.s, fp));
  cr_expect_arr_eq(fp, cli.fp, 32);
  cli_write(&k, "still here", 10);
  uint8_t buf[16];
  cr_expect_eq(srv_read(&k, buf, sizeof buf), 10);
  cr_expect_arr_eq(buf, "still here", 10);
  conn_close(&k); /* the last reference: the context goes with it (ASan checks) */
}

Test(htls, errors_use_the_key_prefix) {
  char c[256], kp[256], ca_p[256], bad[256], enc[256];
  snprintf(c, sizeof c, "%s/srv.pem", tmpdir);
  snprintf(kp, sizeof kp, "%s/srv.key", tmpdir);
  snprintf(ca_p, sizeof ca_p, "%s/empty.pem", tmpdir);
  snprintf(bad, sizeof bad, "%s/secretish.key", tmpdir);
  snprintf(enc, sizeof enc, "%s/encrypted.key", tmpdir);
  char *err = NULL;
  ak_htls_files_t f = {.cert = c, .key = kp, .client_ca = NULL, .client_cert = AK_HTLS_CLIENT_REQUEST,
                       .key_prefix = "admin.tls"};
  cr_expect_null(ak_htls_ctx_new(&f, &err));
  cr_expect(err && strstr(err, "admin.tls.client_cert: \"request\" needs admin.tls.client_ca"), "%s", err);
  free(err);
  f.client_ca = ca_p;
  f.key = bad;
  cr_expect_null(ak_htls_ctx_new(&f, &err));
  char want[1024];
  snprintf(want, sizeof want, "admin.tls.key: %s holds no usable PEM private key\n"
                              "admin.tls.client_ca: %s holds no PEM certificate (none found)", bad, ca_p);
  cr_expect_str_eq(err, want);
  cr_expect(err && !strstr(err, "SECRETBYTES"), "%s", err);
  cr_expect_eq(err ? (int)(strchr(err, '\n') != NULL) : 0, 1, "one line per problem: %s", err);
  free(err);
  f = (ak_htls_files_t){.cert = c, .key = enc, .key_prefix = "admin.tls"};
  cr_expect_null(ak_htls_ctx_new(&f, &err), "an encrypted key is never decrypted (no prompt, no pass phrase)");
  snprintf(want, sizeof want, "admin.tls.key: %s holds no usable PEM private key (encrypted keys are not supported)",
           enc);
  cr_expect_str_eq(err, want);
  free(err);
  f = (ak_htls_files_t){.cert = NULL, .key = "", .key_prefix = NULL};
  cr_expect_null(ak_htls_ctx_new(&f, &err));
  cr_expect_str_eq(err, "tls.cert: not set\ntls.key: not set");
  free(err);
}

/* A resumed session (ticket) reports what the full handshake verified, and only that. */
Test(htls, resumed_sessions_keep_what_was_verified) {
  ak_htls_ctx_t *ctx = server_ctx("srv.pem", "srv.key", "ca.pem", AK_HTLS_CLIENT_REQUEST);
  const ident_t *ids[] = {&cli, &self_signed};
  for (size_t v = 0; v < 2; v++)
    for (size_t i = 0; i < 2; i++) {
      const char *vn = vname(versions[v]);
      conn_t k;
      conn_open(&k, ctx, versions[v], ids[i]);
      cr_assert(handshake(&k), "%s", vn);
      cli_write(&k, "a", 1);
      uint8_t buf[4];
      cr_assert_eq(srv_read(&k, buf, sizeof buf), 1);
      cr_assert_eq(ak_htls_write(k.s, (const uint8_t *)"b", 1), AK_HTLS_OK);
      int e;
      cr_assert_eq(cli_read(&k, buf, sizeof buf, &e), 1); /* TLS 1.3: the tickets come with it */
      SSL_SESSION *sess = SSL_get1_session(k.c);
      cr_assert(sess && SSL_SESSION_is_resumable(sess), "%s: no ticket", vn);
      SSL_shutdown(k.c); /* freed without it, the client would mark its session not resumable */
      conn_close(&k);

      conn_open(&k, ctx, versions[v], ids[i]);
      cr_assert(SSL_set_session(k.c, sess));
      SSL_SESSION_free(sess);
      cr_assert(handshake(&k), "%s: resumption", vn);
      cr_expect(SSL_session_reused(k.c), "%s: the session was resumed", vn);
      uint8_t fp[32];
      if (ids[i] == &cli) {
        cr_expect(ak_htls_peer_sha256(k.s, fp), "%s: the verified certificate still counts", vn);
        cr_expect_arr_eq(fp, cli.fp, 32, "%s", vn);
      } else {
        cr_expect_not(ak_htls_peer_sha256(k.s, fp), "%s: an unverified one still does not", vn);
      }
      conn_close(&k);
    }
  ak_htls_ctx_unref(ctx);
}
