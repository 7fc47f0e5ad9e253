/* The admin API's read-only views of how the node is set up: GET /v1/config (the
 * effective config, redacted) and GET /v1/wal (the durability path: wal.type, the store
 * and its counters). Builds JSON only; routing and replies stay in admin.c. Never puts a
 * secret in a view: the config goes through ak_config_redacted like print-config. */
#ifndef AK_ADMIN_OPS_H
#define AK_ADMIN_OPS_H

#include <jansson.h>
#include "core/instance.h"

/* The redacted effective config: the document `ankusa print-config` prints. New ref. */
json_t *ak_admin_config_view(ak_instance_t *inst);

/* {instance, wal:{type, store_path, open, ready, reason, next_seq, hooks, deliveries,
 * disk_bytes, last_open_ms}}. New reference. */
json_t *ak_admin_wal_view(ak_instance_t *inst);

#endif
