/* The admin API's views of the node itself: the probes (GET /health, GET /ready), GET
 * /metrics, GET /v1/config (the effective config, redacted) and GET /v1/wal (the
 * durability path: wal.type, the store and its counters), and the store gauges sampled
 * for /metrics. Handlers (api.h): the router is the one caller. Never puts a secret in a view: the config goes through
 * ak_config_redacted like print-config. */
#ifndef AK_ADMIN_NODE_API_H
#define AK_ADMIN_NODE_API_H

#include "admin/api.h"

void ak_node_api_health(ak_admin_call_t *call, const ak_admin_path_t *path);
void ak_node_api_ready(ak_admin_call_t *call, const ak_admin_path_t *path);
void ak_node_api_metrics(ak_admin_call_t *call, const ak_admin_path_t *path);
/* The redacted effective config: the document `ankusa print-config` prints. */
void ak_node_api_config(ak_admin_call_t *call, const ak_admin_path_t *path);
/* {instance, wal:{type, store_path, open, ready, reason, next_seq, hooks, deliveries,
 * disk_bytes, last_open_ms}} */
void ak_node_api_wal(ak_admin_call_t *call, const ak_admin_path_t *path);
/* GET /v1/fleet: fleet admission's state (fleet/fleet.h ak_fleet_json); edge role only. */
void ak_node_api_fleet(ak_admin_call_t *call, const ak_admin_path_t *path);

/* The store gauges /v1/wal also answers, for /metrics: ankusa_store_deliveries (delivery
 * rows, dead ones included: the dispatcher's counters) and ankusa_store_disk_bytes (the
 * store directory's files). Sampled by the gauge thread (core/gauges.h). */
typedef struct ak_node_gauges ak_node_gauges_t;
ak_node_gauges_t *ak_node_gauges_new(ak_instance_t *inst);
void ak_node_gauges_sample(void *ng);
void ak_node_gauges_free(ak_node_gauges_t *ng);

#endif
