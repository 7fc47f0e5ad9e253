/* The `lifecycle` module: its option rows (the sink list, validated like a source's by
 * the sink kind), and the publisher's open/start/stop/close on the nodes that keep the
 * store (the audit trail is there). Open binds the publisher to the trail before any
 * module starts, so the first change an operator makes is already flagged; the table puts
 * this module last, so it stops first: a change made while the rest of the node drains is
 * still flagged and goes out at the next start. */
#include <stdlib.h>
#include <string.h>
#include "core/config.h"
#include "core/instance.h"
#include "core/log.h"
#include "dispatch/dispatch.h"
#include "lifecycle/module.h"
#include "lifecycle/publisher.h"

static const ak_opt_t lifecycle_rows[] = {
  {.key = "sinks", .type = AK_OPT_PLUGIN_LIST, .kind = "sink", .flags = AK_OPTF_REQUIRED,
   .doc = "where lifecycle events (CloudEvents 1.0, io.ankusa.source.created, ...) go, at least one; each sink's "
          "own keys as under sources.<id>.sinks; retried by dispatch.retry (docs/lifecycle.md)",
   AK_AT(ak_lifecycle_cfg_t, sinks)},
  {0},
};

static int lifecycle_open(ak_instance_t *inst, char **err) {
  const ak_lifecycle_cfg_t *lc = ak_config_of(inst->cfg, &ak_mod_lifecycle);
  if (!lc || !json_array_size(lc->sinks)) return 0; /* off */
  const ak_dispatch_cfg_t *dc = ak_dispatch_cfg(inst->cfg);
  ak_retry_policy_t pol = ak_retry_policy_default();
  if (dc)
    pol = (ak_retry_policy_t){.base_ms = dc->retry.base_ms, .max_ms = dc->retry.max_ms,
                              .max_attempts = (int)dc->retry.max_attempts, .jitter = dc->retry.jitter};
  inst->lifecycle = ak_lifecycle_new(inst, lc->sinks, &pol, err);
  if (!inst->lifecycle) {
    ak_log(AK_LOG_ERROR, "lifecycle", "cannot open the lifecycle publisher", "reason=\"%s\"", *err ? *err : "?");
    return AK_MODULE_FAILED;
  }
  ak_log(AK_LOG_INFO, "lifecycle", "lifecycle events on", "sinks=%zu cursor=%llu", json_array_size(lc->sinks),
         (unsigned long long)ak_lifecycle_cursor(inst->lifecycle));
  return 0;
}

static int lifecycle_start(ak_instance_t *inst, char **err) {
  if (!inst->lifecycle) return 0;
  if (ak_lifecycle_start(inst->lifecycle) != 0) {
    *err = strdup("lifecycle: cannot start the publisher thread");
    return AK_MODULE_FAILED;
  }
  return 0;
}

static void lifecycle_stop(ak_instance_t *inst) { ak_lifecycle_stop(inst->lifecycle); }

static void lifecycle_close(ak_instance_t *inst) {
  ak_lifecycle_free(inst->lifecycle);
  inst->lifecycle = NULL;
}

const ak_module_t ak_mod_lifecycle = {
  .name = "lifecycle",
  .section = "lifecycle",
  .doc = "lifecycle events: absent (or null) is off; a section needs sinks (docs/lifecycle.md)",
  .section_flags = AK_OPTF_NULLABLE,
  .options = lifecycle_rows,
  .cfg_size = sizeof(ak_lifecycle_cfg_t),
  .roles = AK_ROLES_STORE,
  .open = lifecycle_open,
  .start = lifecycle_start,
  .stop = lifecycle_stop,
  .close = lifecycle_close,
};
