/* One tenant's limits as written in `rate_limits.default`, `rate_limits.tenants.<t>` and
 * the body of PUT /v1/tenants/{t}/rate-limit: hooks per second ({rate, burst}, Ankusa's
 * keys), body bytes per second (`bytes: {rate, burst}`) and `max_body_bytes`. Owns the
 * parsing and the JSON form of an entry, so the loader, the admin API and the stored
 * override agree on one schema. Pure: no state, no I/O. */
#ifndef AK_CORE_RATELIMIT_H
#define AK_CORE_RATELIMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include "core/config.h"

typedef struct ak_rate {
  double rate;                /* units per second; 0 = this lane is not limited */
  int64_t burst;              /* units at once, >= 1 when rate > 0 */
} ak_rate_t;

typedef struct ak_ratelimit {
  ak_rate_t hooks;            /* rate, burst */
  ak_rate_t bytes;            /* bytes.rate, bytes.burst */
  int64_t max_body_bytes;     /* 0 = http.max_body_bytes only */
} ak_ratelimit_t;

/* Strict: rate a JSON number > 0, burst an integer >= 1, both or neither; bytes null or
 * {rate, burst} (both required); max_body_bytes null or an integer >= 1; at least one
 * limit; no other key. Ankusa's entries ({rate, burst}) always parse. On failure returns
 * -1 with field set to the offending key ("rate", "bytes.burst", a stray key) and msg to
 * what is wrong ("must be a number > 0"). */
int ak_ratelimit_parse(const json_t *j, ak_ratelimit_t *out, char *field, size_t fieldlen, char *msg,
                       size_t msglen);

/* {rate, burst} of one lane: rate a number > 0, burst an integer >= 1, both required.
 * Same error convention (field "rate" or "burst"). */
int ak_ratelimit_parse_rate(const json_t *j, ak_rate_t *out, char *field, size_t fieldlen, char *msg,
                            size_t msglen);

/* The entry as JSON: {rate, burst[, bytes: {rate, burst}][, max_body_bytes]}; rate and
 * burst are null when only bytes or max_body_bytes is set. New reference. */
json_t *ak_ratelimit_json(const ak_ratelimit_t *l);

/* Rows of {rate, burst} (rate_limits.*.bytes, admission.*, sources.*.admission_bytes)
 * and of one tenant's entry (rate_limits.default, rate_limits.tenants.<t>). */
extern const ak_opt_t ak_ratelimit_lane_rows[];
extern const ak_opt_t ak_ratelimit_entry_rows[];

/* The pairing rules of an entry / a lane, reported under label unless the schema pass
 * already reported something there (its partial entry would only repeat that). */
void ak_ratelimit_report_entry(ak_check_t *c, const char *label, const json_t *entry);
void ak_ratelimit_report_lane(ak_check_t *c, const char *label, const json_t *lane);

#endif
