/* CloudEvents 1.0 encoding of a flagged audit row (cloudevent.h). Only what the row and
 * its entity hold goes in: the entity is redacted before it is ever stored, so an event
 * never carries a secret. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "core/ids.h"
#include "lifecycle/cloudevent.h"

static void rfc3339_ms(int64_t ms, char out[32]) {
  time_t s = (time_t)(ms / 1000);
  struct tm tm;
  gmtime_r(&s, &tm);
  char day[24];
  strftime(day, sizeof day, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(out, 32, "%s.%03dZ", day, (int)(ms % 1000));
}

char *ak_cloudevent_build(const char *instance, const uint8_t id[16], const ak_audit_event_t *ev) {
  const json_t *row = ev->row;
  const char *type = json_string_value(json_object_get(ev->event, "event"));
  const char *subject = json_string_value(json_object_get(row, "subject"));
  json_t *at = json_object_get(row, "at");
  if (!type || !subject || !json_is_integer(at) || json_integer_value(at) < 0) return NULL;
  char uuid[AK_UUID_STR_LEN], when[32], seq[24], source[160];
  ak_uuid_format(id, uuid);
  rfc3339_ms(json_integer_value(at), when);
  snprintf(seq, sizeof seq, "%020" PRIu64, ev->seq);
  snprintf(source, sizeof source, "ankusa://%s", instance ? instance : "default");
  json_t *entity = json_object_get(ev->event, "entity");
  json_t *data = json_pack("{s:O,s:O,s:O,s:O,s:I,s:O}", "tenant", json_object_get(row, "tenant") ?: json_null(),
                           "action", json_object_get(row, "action") ?: json_null(), "revision",
                           json_object_get(row, "revision") ?: json_null(), "actor",
                           json_object_get(row, "actor") ?: json_null(), "seq", (json_int_t)ev->seq, "entity",
                           entity ? entity : json_null());
  json_t *ce = data ? json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:o}", "specversion", "1.0", "id", uuid, "source",
                                source, "type", type, "subject", subject, "time", when, "datacontenttype",
                                "application/json", "sequence", seq, "data", data)
                    : NULL;
  char *text = ce ? json_dumps(ce, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  json_decref(ce);
  return text;
}
