/* The `none` verifier: every request passes. It exists so that a source without
 * verification goes through the same code path as every other. It accepts (and ignores)
 * `secret` and `tolerance_seconds`, as Ankusa's schema does for every named type, and
 * holds nothing. */
#include "verify/verifier.h"

static const char none_self; /* create must return non-NULL; nothing is kept */

static void *none_create(const json_t *spec, char *err, size_t errlen) {
  (void)spec;
  (void)err;
  (void)errlen;
  return (void *)&none_self;
}

static ak_verify_reason_t none_check(const void *self, const ak_verify_input_t *in) {
  (void)self;
  (void)in;
  return AK_VR_OK;
}

static void none_destroy(void *self) { (void)self; }

static const ak_opt_t none_opts[] = {
  {.key = "secret", .type = AK_OPT_SECRETS, .flags = AK_OPTF_SECRET,
   .doc = "accepted for compatibility; unused"},
  {.key = "tolerance_seconds", .type = AK_OPT_INT, .min = 1, .max = 3600,
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX, .doc = "accepted for compatibility; unused"},
  {0},
};

const ak_verifier_vtable_t ak_verifier_none = {
  .plugin = {.type = "none", .options = none_opts}, .create = none_create, .check = none_check,
  .destroy = none_destroy};
