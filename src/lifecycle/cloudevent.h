/* The CloudEvent of a lifecycle event: one flagged audit row as a CloudEvents 1.0 JSON
 * object (structured mode, application/cloudevents+json). Owns the event's shape only:
 * pure, no store, no I/O, safe on any thread. */
#ifndef AK_LIFECYCLE_CLOUDEVENT_H
#define AK_LIFECYCLE_CLOUDEVENT_H

#include <stddef.h>
#include <stdint.h>
#include "store/audit.h"

#define AK_CLOUDEVENT_CONTENT_TYPE "application/cloudevents+json"

/* The event of ev (a flagged row read by ak_audit_outbox_next) with id (ak_audit_event_id)
 * from ankusa://<instance>: compact JSON text, malloc'd, or NULL (no memory, or a row
 * without seq/at/subject). Its keys: specversion "1.0", id (the UUID text), source, type
 * (the row's event), subject (the row's subject, "source:<tenant>/<name>"), time (the row's
 * at, RFC 3339 UTC with ms), datacontenttype "application/json", sequence (the row's seq,
 * 20 zero-padded digits: it sorts as text), data {tenant, action, revision, actor, seq,
 * entity}. */
char *ak_cloudevent_build(const char *instance, const uint8_t id[16], const ak_audit_event_t *ev);

#endif
