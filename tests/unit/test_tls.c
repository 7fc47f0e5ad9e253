/* TLS ingest listener and the client_cert verifier: pin parsing and matching through the
 * vtable, the http.tls config (files read at load, errors naming key and path), the MHD
 * options, and real handshakes against an MHD TLS daemon built from those options (a
 * GnuTLS client) for what ak_tls_peer_cert_sha256 reports in request and require mode.
 * Certificates are made here with libcrypto, in a temp dir. */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <gnutls/gnutls.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include "core/config.h"
#include "edge/tls.h"
#include "verify/verifier.h"
#include "modules.h"
#include "core/node.h"
#include "core/sources.h"
#include "edge/edge.h"
#include "admin/admin.h"
#include "store/audit.h"
#include "queue/writer.h"
#include "queue/dedupe.h"
#include "queue/quarantine.h"
#include "dispatch/dispatch.h"
#include "sinks/egress.h"
#include "edge/headers.h"
#include "admin/sources_api.h"
#include "core/log.h"

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

static ident_t ca, srv, cli, cli_server_eku, self_signed, other_ca;

static void certs_setup(void) {
  signal(SIGPIPE, SIG_IGN); /* a server that refused the client closes while it writes */
  strcpy(tmpdir, "/tmp/ak_test_tls_XXXXXX");
  cr_assert(mkdtemp(tmpdir));
  ca = make_ident("ankusa test CA", NULL, true, EKU_NONE);
  other_ca = make_ident("another CA", NULL, true, EKU_NONE);
  srv = make_ident("127.0.0.1", &ca, false, EKU_SERVER);
  cli = make_ident("pinned client", &ca, false, EKU_CLIENT);
  cli_server_eku = make_ident("server-only client", &ca, false, EKU_SERVER);
  self_signed = make_ident("self-signed client", NULL, false, EKU_CLIENT);
  write_file("ca.pem", ca.cert_pem);
  write_file("srv.pem", srv.cert_pem);
  write_file("srv.key", srv.key_pem);
  write_file("cli.key", cli.key_pem);
  write_file("garbage.pem", "-----BEGIN CERTIFICATE-----\nnot base64 at all !!\n-----END CERTIFICATE-----\n");
  write_file("secretish.key", "-----BEGIN PRIVATE KEY-----\nSECRETBYTESxyz\n-----END PRIVATE KEY-----\n");
  write_file("empty.pem", "");
}

static void certs_teardown(void) {
  ident_t *all[] = {&ca, &srv, &cli, &cli_server_eku, &self_signed, &other_ca};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ident_free(all[i]);
  nftw(tmpdir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

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
  cr_expect_null(ak_http_cfg(cfg)->tls.cert_pem);
  cr_expect_null(json_object_get(json_object_get(cfg->effective, "http"), "tls"), "left out of print-config");
  struct MHD_OptionItem o[AK_TLS_MHD_OPTIONS_MAX];
  cr_expect_eq(ak_tls_mhd_options(&ak_http_cfg(cfg)->tls, o, AK_TLS_MHD_OPTIONS_MAX), 0);
  cr_expect_eq(o[0].option, MHD_OPTION_END);
  ak_config_free(cfg);
  cr_assert_eq(load(NULL, &cfg, &err, "http:\n  tls: null\n"), 0, "%s", err);
  cr_expect_not(ak_http_cfg(cfg)->tls.enabled);
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
  cr_expect_str_eq(ak_http_cfg(cfg)->tls.cert_pem, srv.cert_pem);
  cr_expect_str_eq(ak_http_cfg(cfg)->tls.key_pem, srv.key_pem);
  cr_expect_str_eq(ak_http_cfg(cfg)->tls.client_ca_pem, ca.cert_pem);
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

  struct MHD_OptionItem o[AK_TLS_MHD_OPTIONS_MAX];
  cr_expect_eq(ak_tls_mhd_options(&ak_http_cfg(cfg)->tls, o, 3), 0, "too small an array is refused");
  cr_assert_eq(ak_tls_mhd_options(&ak_http_cfg(cfg)->tls, o, AK_TLS_MHD_OPTIONS_MAX), 3);
  cr_expect_eq(o[0].option, MHD_OPTION_HTTPS_MEM_CERT);
  cr_expect_eq(o[0].ptr_value, ak_http_cfg(cfg)->tls.cert_pem);
  cr_expect_eq(o[1].option, MHD_OPTION_HTTPS_MEM_KEY);
  cr_expect_eq(o[2].option, MHD_OPTION_HTTPS_MEM_TRUST);
  cr_expect_eq(o[2].ptr_value, ak_http_cfg(cfg)->tls.client_ca_pem);
  cr_expect_eq(o[3].option, MHD_OPTION_END);
  ak_config_free(cfg);

  /* require adds the connection callback; none asks for nothing */
  cr_assert_eq(load(NULL, &cfg, &err, TLS_YAML("    client_ca: %s/ca.pem\n    client_cert: require\n    port: 0\n"),
                    tmpdir, tmpdir, tmpdir), 0, "%s", err);
  cr_expect_eq(ak_http_cfg(cfg)->tls.client_cert, AK_TLS_CLIENT_CERT_REQUIRE);
  cr_expect_eq(ak_http_cfg(cfg)->tls.port, 0);
  cr_assert_eq(ak_tls_mhd_options(&ak_http_cfg(cfg)->tls, o, AK_TLS_MHD_OPTIONS_MAX), 4);
  cr_expect_eq(o[3].option, MHD_OPTION_NOTIFY_CONNECTION);
  cr_expect_eq(o[3].value, (intptr_t)ak_tls_notify_connection);
  ak_config_free(cfg);
  cr_assert_eq(load(NULL, &cfg, &err, TLS_YAML("    client_ca: %s/ca.pem\n    client_cert: none\n"), tmpdir,
                    tmpdir, tmpdir), 0, "%s", err);
  cr_assert_eq(ak_tls_mhd_options(&ak_http_cfg(cfg)->tls, o, AK_TLS_MHD_OPTIONS_MAX), 2);
  ak_config_free(cfg);

  /* no client_ca: no client certificates */
  const char *env[] = {"ANKUSA_HTTP_TLS_PORT=9443", NULL};
  cr_assert_eq(load(env, &cfg, &err, TLS_YAML(""), tmpdir, tmpdir), 0, "%s", err);
  cr_expect_eq(ak_http_cfg(cfg)->tls.port, 9443, "ANKUSA_HTTP_TLS_PORT");
  cr_expect_eq(ak_http_cfg(cfg)->tls.client_cert, AK_TLS_CLIENT_CERT_NONE);
  cr_expect_null(ak_http_cfg(cfg)->tls.client_ca_pem);
  cr_expect_eq(ak_tls_mhd_options(&ak_http_cfg(cfg)->tls, o, AK_TLS_MHD_OPTIONS_MAX), 2);
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

/* ------------------------------------------------------------ handshakes ---- */

static enum MHD_Result fp_handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **pp) {
  (void)cls, (void)url, (void)method, (void)version, (void)upload;
  static int first;
  if (!*pp) {
    *pp = &first;
    return MHD_YES;
  }
  *upload_size = 0;
  uint8_t fp[32];
  char out[80] = "none";
  if (ak_tls_peer_cert_sha256(c, fp))
    for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", fp[i]);
  struct MHD_Response *r = MHD_create_response_from_buffer(strlen(out), out, MHD_RESPMEM_MUST_COPY);
  enum MHD_Result ret = MHD_queue_response(c, 200, r);
  MHD_destroy_response(r);
  return ret;
}

static struct MHD_Daemon *start_tls(const char *extra_yaml, ak_config_t **cfgp, int *port) {
  char *err = NULL;
  cr_assert_eq(load(NULL, cfgp, &err, TLS_YAML("    port: 0\n%s"), tmpdir, tmpdir, extra_yaml), 0, "%s", err);
  struct MHD_OptionItem o[AK_TLS_MHD_OPTIONS_MAX];
  cr_assert_gt(ak_tls_mhd_options(&ak_http_cfg(*cfgp)->tls, o, AK_TLS_MHD_OPTIONS_MAX), 0);
  struct MHD_Daemon *d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_TLS, 0,
                                          NULL, NULL, fp_handler, NULL, MHD_OPTION_ARRAY, o,
                                          MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10, MHD_OPTION_END);
  cr_assert(d, "MHD TLS daemon did not start");
  *port = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT)->port;
  return d;
}

/* GET / over TLS with an optional client certificate. The body (the fingerprint, or
 * "none") into out and 0; -1 when the server refused (in the handshake, or, on TLS 1.3,
 * with an alert on the first read). */
static int tls_get(int port, const ident_t *client, const char *prio, char *out, size_t outlen) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  struct timeval tv = {.tv_sec = 5};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  gnutls_certificate_credentials_t cred;
  gnutls_certificate_allocate_credentials(&cred);
  if (client) {
    gnutls_datum_t c = {(unsigned char *)client->cert_pem, (unsigned)strlen(client->cert_pem)};
    gnutls_datum_t k = {(unsigned char *)client->key_pem, (unsigned)strlen(client->key_pem)};
    cr_assert_geq(gnutls_certificate_set_x509_key_mem(cred, &c, &k, GNUTLS_X509_FMT_PEM), 0);
  }
  gnutls_session_t s;
  gnutls_init(&s, GNUTLS_CLIENT);
  cr_assert_geq(gnutls_priority_set_direct(s, prio, NULL), 0);
  gnutls_credentials_set(s, GNUTLS_CRD_CERTIFICATE, cred);
  gnutls_transport_set_int(s, fd);
  gnutls_handshake_set_timeout(s, 5000);
  int rc;
  do rc = gnutls_handshake(s);
  while (rc < 0 && !gnutls_error_is_fatal(rc));
  int result = -1;
  if (rc >= 0) {
    const char req[] = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    gnutls_record_send(s, req, sizeof req - 1);
    char buf[4096];
    size_t n = 0;
    ssize_t got;
    while (n < sizeof buf - 1 && ((got = gnutls_record_recv(s, buf + n, sizeof buf - 1 - n)) > 0 ||
                                   got == GNUTLS_E_AGAIN || got == GNUTLS_E_INTERRUPTED))
      if (got > 0) n += (size_t)got;
    buf[n] = '\0';
    char *body = strstr(buf, "\r\n\r\n");
    if (!strncmp(buf, "HTTP/1.1 200", 12) && body) {
      snprintf(out, outlen, "%s", body + 4);
      result = 0;
    }
  }
  gnutls_bye(s, GNUTLS_SHUT_RDWR);
  gnutls_deinit(s);
  gnutls_certificate_free_credentials(cred);
  close(fd);
  return result;
}

static void hex(const uint8_t fp[32], char out[65]) {
  for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", fp[i]);
}

static const char *const protos[] = {"NORMAL:-VERS-ALL:+VERS-TLS1.2", "NORMAL:-VERS-ALL:+VERS-TLS1.3"};

Test(tls_config, request_mode_fingerprints_only_verified_certificates) {
  ak_config_t *cfg;
  int port;
  char ca_yaml[256];
  snprintf(ca_yaml, sizeof ca_yaml, "    client_ca: %s/ca.pem\n", tmpdir);
  struct MHD_Daemon *d = start_tls(ca_yaml, &cfg, &port);
  char want[65], got[128];
  hex(cli.fp, want);
  for (size_t p = 0; p < 2; p++) {
    cr_assert_eq(tls_get(port, &cli, protos[p], got, sizeof got), 0, "%s: CA-issued cert refused", protos[p]);
    cr_expect_str_eq(got, want, "%s", protos[p]);
    cr_assert_eq(tls_get(port, NULL, protos[p], got, sizeof got), 0, "%s: request mode must not refuse", protos[p]);
    cr_expect_str_eq(got, "none", "%s: no certificate", protos[p]);
    cr_assert_eq(tls_get(port, &self_signed, protos[p], got, sizeof got), 0, "%s", protos[p]);
    cr_expect_str_eq(got, "none", "%s: a self-signed certificate counts as none", protos[p]);
    cr_assert_eq(tls_get(port, &cli_server_eku, protos[p], got, sizeof got), 0, "%s", protos[p]);
    cr_expect_str_eq(got, "none", "%s: a certificate not for client auth counts as none", protos[p]);
  }
  MHD_stop_daemon(d);
  ak_config_free(cfg);
}

Test(tls_config, require_mode_refuses_in_the_handshake) {
  ak_config_t *cfg;
  int port;
  char ca_yaml[256];
  snprintf(ca_yaml, sizeof ca_yaml, "    client_ca: %s/ca.pem\n    client_cert: require\n", tmpdir);
  struct MHD_Daemon *d = start_tls(ca_yaml, &cfg, &port);
  char want[65], got[128];
  hex(cli.fp, want);
  for (size_t p = 0; p < 2; p++) {
    cr_assert_eq(tls_get(port, &cli, protos[p], got, sizeof got), 0, "%s: CA-issued cert refused", protos[p]);
    cr_expect_str_eq(got, want, "%s", protos[p]);
    cr_expect_eq(tls_get(port, NULL, protos[p], got, sizeof got), -1, "%s: no certificate got through", protos[p]);
    cr_expect_eq(tls_get(port, &self_signed, protos[p], got, sizeof got), -1, "%s: self-signed got through",
                 protos[p]);
  }
  MHD_stop_daemon(d);
  ak_config_free(cfg);
}

Test(tls_config, no_client_ca_asks_for_nothing) {
  ak_config_t *cfg;
  int port;
  struct MHD_Daemon *d = start_tls("", &cfg, &port);
  char got[128];
  cr_assert_eq(tls_get(port, &cli, protos[1], got, sizeof got), 0);
  cr_expect_str_eq(got, "none", "a certificate never asked for is never read");
  MHD_stop_daemon(d);
  ak_config_free(cfg);
}

Test(tls_config, plain_connection_has_no_certificate) {
  cr_expect_not(ak_tls_peer_cert_sha256(NULL, (uint8_t[32]){0}));
}
