/* wal.type dual (docs/dual.md): the `intake` section and the module that makes every
 * commit a dual commit. It registers itself as the writer's mirror (queue/writer.h): each
 * group of hooks is published to this node's partition of the intake topic (intake/log.h)
 * while the writer writes it to the store, and each hook is answered when both halves
 * are in:
 *   both confirmed                -> committed (201);
 *   the log did not confirm       -> 503 intake_unavailable; the hook is stored, held in the
 *                                    pending set (a repeat of its key: 503 intake_pending)
 *                                    and republished by the reconciler until confirmed;
 *   the store write failed        -> 503 store_unavailable; a hook the log confirmed is
 *                                    stored by the reconciler under its own seq and id when
 *                                    the store is back (or by the next start's recovery);
 *   the breaker is open           -> 503 intake_unavailable before either half starts.
 * The store keeps two marks, written in each group's own batch:
 *   m:intake_offset  partition:u32 offset:i64 - every record of this node in the log below
 *                    the offset is in the store (or was reclaimed);
 *   m:intake_wm      u64 - every hook below this seq is confirmed in the log.
 * At start, before the writer, the dispatcher's notices or the ingest listener serve
 * anything new, recovery reads the log from m:intake_offset (a seq the store lacks, and did
 * not reclaim, is stored under its own seq and id: a duplicate or a reordered record
 * changes nothing), then republishes the stored hooks from m:intake_wm. A node whose log
 * cannot be read does not start. */
#ifndef AK_INTAKE_MODULE_H
#define AK_INTAKE_MODULE_H

#include <stdbool.h>
#include <stdint.h>
#include "core/module.h"
#include "core/config.h"
#include "core/options.h"
#include "net/kafka.h"

typedef struct ak_intake_cfg {
  ak_strlist_t brokers;
  const char *topic;
  const char *node_id;
  const char *client;
  bool ssl;
  ak_kafka_sasl_opts_t sasl;
  int64_t produce_timeout_ms;
  int64_t linger_ms;
  int64_t max_record_bytes;
  int64_t min_insync_replicas;
  int64_t breaker_failures;
  int64_t breaker_open_ms;
  int64_t reconcile_interval_ms;
  int64_t recovery_timeout_ms;
} ak_intake_cfg_t;

extern const ak_module_t ak_mod_intake;
const ak_intake_cfg_t *ak_intake_cfg(const ak_config_t *cfg);

struct ak_intake;
struct ak_fleet_call;
/* The edge, answering a half-persisted hook (stored, the log's half failed): its fleet
 * dedupe claim stays pending and is promoted when the reconciler confirms the hook (at
 * once when it already has). Takes the call. */
/* /ready: false (reason "breaker_open") while the intake breaker refuses every hook (until
 * its probe is due), so a load balancer sends the traffic elsewhere. */
bool ak_intake_ready(struct ak_intake *ik, const char **reason);
void ak_intake_hold_claim(struct ak_intake *ik, const uint8_t id[16], struct ak_fleet_call *call);

#endif
