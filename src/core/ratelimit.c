/* Types are checked on JSON values: after the loader's schema pass (which coerces "10"
 * to 10) a file entry and an API body look the same here. Rates are compared as doubles,
 * bursts as integers; a float burst is refused rather than rounded. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "core/ratelimit.h"

static int fail(char *field, size_t fl, const char *f, char *msg, size_t ml, const char *m) {
  if (field && fl) snprintf(field, fl, "%s", f);
  if (msg && ml) snprintf(msg, ml, "%s", m);
  return -1;
}

static int parse_lane(const json_t *rate, const json_t *burst, const char *prefix, ak_rate_t *out, char *field,
                      size_t fl, char *msg, size_t ml) {
  char f[32];
  snprintf(f, sizeof f, "%srate", prefix);
  if (!rate) return fail(field, fl, f, msg, ml, "missing required key");
  if (!json_is_number(rate) || !(json_number_value(rate) > 0) || !isfinite(json_number_value(rate)))
    return fail(field, fl, f, msg, ml, "must be a number > 0");
  snprintf(f, sizeof f, "%sburst", prefix);
  if (!burst) return fail(field, fl, f, msg, ml, "missing required key");
  if (!json_is_integer(burst) || json_integer_value(burst) < 1)
    return fail(field, fl, f, msg, ml, "must be an integer >= 1");
  out->rate = json_number_value(rate);
  out->burst = json_integer_value(burst);
  return 0;
}

int ak_ratelimit_parse_rate(const json_t *j, ak_rate_t *out, char *field, size_t fl, char *msg, size_t ml) {
  memset(out, 0, sizeof *out);
  if (!json_is_object(j)) return fail(field, fl, "", msg, ml, "must be a mapping {rate, burst}");
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)j, k, v)
    if (strcmp(k, "rate") && strcmp(k, "burst")) return fail(field, fl, k, msg, ml, "unknown key");
  return parse_lane(json_object_get(j, "rate"), json_object_get(j, "burst"), "", out, field, fl, msg, ml);
}

int ak_ratelimit_parse(const json_t *j, ak_ratelimit_t *out, char *field, size_t fl, char *msg, size_t ml) {
  memset(out, 0, sizeof *out);
  if (!json_is_object(j)) return fail(field, fl, "", msg, ml, "must be a mapping {rate, burst}");
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)j, k, v)
    if (strcmp(k, "rate") && strcmp(k, "burst") && strcmp(k, "bytes") && strcmp(k, "max_body_bytes"))
      return fail(field, fl, k, msg, ml, "unknown key");
  json_t *rate = json_object_get(j, "rate"), *burst = json_object_get(j, "burst");
  json_t *bytes = json_object_get(j, "bytes"), *mbb = json_object_get(j, "max_body_bytes");
  if (json_is_null(rate)) rate = NULL;
  if (json_is_null(burst)) burst = NULL;
  if (json_is_null(bytes)) bytes = NULL;
  if (json_is_null(mbb)) mbb = NULL;
  /* Ankusa's entry is {rate, burst}: without any addition both stay required */
  if (rate || burst || (!bytes && !mbb)) {
    if (parse_lane(rate, burst, "", &out->hooks, field, fl, msg, ml) != 0) return -1;
  }
  if (bytes) {
    if (!json_is_object(bytes)) return fail(field, fl, "bytes", msg, ml, "must be a mapping {rate, burst}");
    json_object_foreach(bytes, k, v)
      if (strcmp(k, "rate") && strcmp(k, "burst")) {
        char f[80];
        snprintf(f, sizeof f, "bytes.%s", k);
        return fail(field, fl, f, msg, ml, "unknown key");
      }
    if (parse_lane(json_object_get(bytes, "rate"), json_object_get(bytes, "burst"), "bytes.", &out->bytes, field,
                   fl, msg, ml) != 0)
      return -1;
  }
  if (mbb) {
    if (!json_is_integer(mbb) || json_integer_value(mbb) < 1)
      return fail(field, fl, "max_body_bytes", msg, ml, "must be an integer >= 1");
    out->max_body_bytes = json_integer_value(mbb);
  }
  return 0;
}

/* 10 stays 10 (not 10.0) when it is read back */
static json_t *num(double d) {
  if (d == floor(d) && fabs(d) < 9e15) return json_integer((json_int_t)d);
  return json_real(d);
}

json_t *ak_ratelimit_json(const ak_ratelimit_t *l) {
  json_t *o = json_object();
  json_object_set_new(o, "rate", l->hooks.rate > 0 ? num(l->hooks.rate) : json_null());
  json_object_set_new(o, "burst", l->hooks.rate > 0 ? json_integer(l->hooks.burst) : json_null());
  if (l->bytes.rate > 0)
    json_object_set_new(o, "bytes", json_pack("{s:o,s:I}", "rate", num(l->bytes.rate), "burst", (json_int_t)l->bytes.burst));
  if (l->max_body_bytes > 0) json_object_set_new(o, "max_body_bytes", json_integer(l->max_body_bytes));
  return o;
}

/* ---------------------------------------------------------------- option rows ---- */

const ak_opt_t ak_ratelimit_lane_rows[] = {
  {.key = "rate", .type = AK_OPT_NUMBER, .min = 0, .flags = AK_OPTF_REQUIRED | AK_OPTF_HAS_MIN,
   .doc = "units per second (> 0, fractions allowed)"},
  {.key = "burst", .type = AK_OPT_INT, .min = 1, .flags = AK_OPTF_REQUIRED | AK_OPTF_HAS_MIN,
   .doc = "units at once"},
  {0},
};

/* rate and burst are required unless the entry sets only additions (the pairing rule
 * is ak_ratelimit_parse's, reported by ak_ratelimit_report_entry). */
const ak_opt_t ak_ratelimit_entry_rows[] = {
  {.key = "rate", .type = AK_OPT_NUMBER, .min = 0, .flags = AK_OPTF_HAS_MIN,
   .doc = "hooks per second (> 0, fractions allowed), charged after verification"},
  {.key = "burst", .type = AK_OPT_INT, .min = 1, .flags = AK_OPTF_HAS_MIN, .doc = "hooks at once"},
  {.key = "bytes", .type = AK_OPT_MAP, .children = ak_ratelimit_lane_rows, .flags = AK_OPTF_NULLABLE,
   .doc = "body bytes per second ({rate, burst}), charged with the hooks"},
  {.key = "max_body_bytes", .type = AK_OPT_INT, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN,
   .doc = "a larger body of this tenant gets 413 before it is read"},
  {0},
};

void ak_ratelimit_report_entry(ak_check_t *c, const char *label, const json_t *entry) {
  ak_ratelimit_t rl;
  char field[96], msg[96];
  if (ak_check_reported_under(c, label) ||
      ak_ratelimit_parse(entry, &rl, field, sizeof field, msg, sizeof msg) == 0)
    return;
  if (!strcmp(msg, "missing required key")) ak_check_error(c, "%s: missing required key \"%s\"", label, field);
  else if (*field) ak_check_error(c, "%s.%s %s", label, field, msg);
  else ak_check_error(c, "%s %s", label, msg);
}

void ak_ratelimit_report_lane(ak_check_t *c, const char *label, const json_t *lane) {
  ak_rate_t r;
  char field[32], msg[96];
  if (!json_is_object(lane) || ak_check_reported_under(c, label) ||
      ak_ratelimit_parse_rate(lane, &r, field, sizeof field, msg, sizeof msg) == 0)
    return;
  ak_check_error(c, "%s.%s %s", label, field, msg);
}
