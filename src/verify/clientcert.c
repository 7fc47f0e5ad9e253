/* The client_cert verifier: the request came over the TLS listener with a client
 * certificate that chains to http.tls.client_ca (checked by the edge, edge/tls.c), and
 * the SHA-256 of that certificate (DER) is one of the source's pins. Holds only the
 * decoded pins, which are public fingerprints, not secrets. Never reads the TLS session
 * itself: the edge hands it the fingerprint, or NULL. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <openssl/crypto.h>
#include "core/config.h"
#include "verify/verifier.h"

#define MAX_PINS 16
#define FP_LEN 32

static const ak_opt_t clientcert_rows[] = {
  {.key = "pins", .type = AK_OPT_STRLIST, .min = 1, .max = MAX_PINS,
   .flags = AK_OPTF_REQUIRED | AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX,
   .doc = "SHA-256 fingerprints of the accepted client certificates (DER): sha256:<64 hex>, "
          "64 hex digits, or 32 colon-separated hex pairs, any case; 1 to 16"},
  {0},
};

typedef struct {
  size_t n;
  uint8_t pins[MAX_PINS][FP_LEN];
} clientcert_t;

static int hexval(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

/* "sha256:<64 hex>", "<64 hex>" or "AB:CD:..." (32 pairs; the prefix allowed too). */
static bool parse_pin(const char *s, uint8_t out[FP_LEN]) {
  if (!strncasecmp(s, "sha256:", 7)) s += 7;
  size_t len = strlen(s);
  bool colons = len == FP_LEN * 3 - 1;
  if (len != FP_LEN * 2 && !colons) return false;
  for (size_t i = 0; i < FP_LEN; i++) {
    const char *p = s + (colons ? i * 3 : i * 2);
    if (colons && i + 1 < FP_LEN && p[2] != ':') return false;
    int hi = hexval(p[0]), lo = hexval(p[1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = (uint8_t)(hi << 4 | lo);
  }
  return true;
}

static void *clientcert_create(const json_t *spec, char *err, size_t errlen) {
  const json_t *pins = json_object_get(spec, "pins");
  size_t n = json_array_size(pins);
  if (!json_is_array(pins) || n < 1 || n > MAX_PINS) {
    snprintf(err, errlen, "pins: expected a list of 1 to %d certificate fingerprints", MAX_PINS);
    return NULL;
  }
  clientcert_t *cc = calloc(1, sizeof *cc);
  if (!cc) {
    snprintf(err, errlen, "pins: out of memory");
    return NULL;
  }
  size_t i;
  const json_t *item;
  json_array_foreach(pins, i, item) {
    const char *s = json_string_value(item);
    if (!s || !parse_pin(s, cc->pins[i])) {
      snprintf(err, errlen,
               "pins[%zu]: not a SHA-256 fingerprint; expected sha256:<64 hex>, 64 hex digits "
               "or 32 colon-separated hex pairs",
               i);
      free(cc);
      return NULL;
    }
  }
  cc->n = n;
  return cc;
}

static ak_verify_reason_t clientcert_check(const void *self, const ak_verify_input_t *in) {
  const clientcert_t *cc = self;
  if (!in->client_cert_sha256) return AK_VR_MISSING_SIGNATURE;
  /* Every pin is compared, whatever matched first: the time says nothing about which. */
  int found = 0;
  for (size_t i = 0; i < cc->n; i++) found |= CRYPTO_memcmp(cc->pins[i], in->client_cert_sha256, FP_LEN) == 0;
  return found ? AK_VR_OK : AK_VR_NO_MATCH;
}

static void clientcert_destroy(void *self) { free(self); }

/* A client_cert source needs a TLS listener that asks for certificates: http.tls with a
 * client_ca, and client_cert request or require (null means request when client_ca is
 * set). Without one no request could ever pass. */
static void clientcert_config_check(ak_check_t *c, const char *path, json_t *spec, const json_t *root) {
  (void)spec;
  const json_t *tls = json_object_get(json_object_get(root, "http"), "tls");
  bool has_ca = json_is_string(json_object_get(tls, "client_ca"));
  const char *mode = json_string_value(json_object_get(tls, "client_cert"));
  if (!mode) mode = has_ca ? "request" : "none";
  if (!json_is_object(tls) || !has_ca || !strcmp(mode, "none"))
    ak_check_error(c, "%s: type client_cert needs http.tls with a client_ca (and client_cert request or require): "
                      "no request could ever pass", path);
}

const ak_verifier_vtable_t ak_verifier_client_cert = {
  .plugin = {.type = "client_cert", .options = clientcert_rows, .check = clientcert_config_check},
  .create = clientcert_create,
  .check = clientcert_check,
  .destroy = clientcert_destroy,
  .needs_client_cert = true,
};
