/* The module table: one row per module, in the order a node opens and starts them (and
 * the reverse in which it stops and closes them); a module's config section appears in
 * print-config and the options reference in this order too. Adding a capability is its
 * file or folder plus one row here (a plug-in: one row in its kind's registry instead).
 * The order is the design:
 *   - a restore from backup (backup.enabled, an empty store directory) before the store
 *     opens; the store first, the sources next (the config file's, then the stored ones), so that
 *     every module that attaches per-source state or reads hooks sees them all;
 *   - fleet admission after the quota and the dedupe index whose scopes it reads, and
 *     before the ingest listener, so it stops after the last request that may call it;
 *   - the gauge sampler before the modules that add samplers to it;
 *   - the HTTP client before every module whose plug-ins speak HTTP (the dispatcher's
 *     sinks), so it is closed after them;
 *   - the backup uploader after the HTTP client (its S3/GCS stores speak HTTP) and before
 *     every module that writes to the store, so it stops after all of them: its last
 *     checkpoint, on a clean stop, holds every hook the writer acked and every outcome the
 *     dispatcher wrote;
 *   - the claim check after the HTTP client (its S3/GCS claim stores speak HTTP) and just
 *     before the dispatcher, which reads inst->claims (the claim stores its check-in
 *     writes packs to) when it opens: the stores are open before the dispatcher's first
 *     check-in and closed only after its last; the claim gateway stops after it too;
 *   - the audit trail before anything an operator can change;
 *   - the dispatcher starts before the writer (its due-index scan and the writer's commit
 *     notices must not both count a row), the admin listener before the ingest listener
 *     (a node that answers /ready on 4000 answers on 4002 too);
 *   - the intake log of wal.type dual after the dispatcher and before the archive, the
 *     ingest listener and the writer: its start replays the log into the store (the
 *     dispatcher takes the recovered hooks' notices; nothing is served or archived before
 *     it is done) and registers the writer's second half; it stops after the writer and
 *     the ingest listener, so every group still waiting on the log is answered first;
 *   - the archive (storage role) after the dispatcher, whose reclaim its cursor bounds,
 *     and before the writer: its boot reconcile raises next_seq past what the archive
 *     holds before the writer hands out a seq; its replay reader right after it (it reads
 *     through the compactor's blob handle) and after the replay jobs it serves, so it
 *     stops (and takes its fetch back from them) before either is gone;
 *   - the direct publisher of wal.type none after the edge, so it stops first: what still
 *     waits on a sink is answered before the ingest listeners stop;
 *   - the tenant erase after the dispatcher (its drain and hooks stages run on the
 *     dispatch thread; it stops first) and before the listeners: its open rebuilds the
 *     closing set from the progress rows before the dispatcher claims or the edge accepts
 *     anything, and its start resumes an erase a kill interrupted;
 *   - the writer last of the stateful modules, so it is the first to stop: it commits and
 *     answers everything queued before the ingest listener waits for its last answers;
 *   - the lifecycle publisher at the very end: it opens (and flags the audit trail's
 *     changes) before anything starts, after the HTTP client and the egress guard its sinks
 *     use, and stops first, before the sinks' clients close.
 *   - the route guard after the audit trail (its seeds are audited) and long before the
 *     ingest listener whose heads it judges; its admin listener right after the admin one. */
#include "modules.h"
#include "admin/admin.h"
#include "admin/claims.h"
#include "admin/routes_api.h"
#include "admin/sources_api.h"
#include "archive/compactor.h"
#include "archive/replay_reader.h"
#include "backup/module.h"
#include "core/gauges.h"
#include "core/log.h"
#include "core/node.h"
#include "core/sources.h"
#include "dispatch/dispatch.h"
#include "dispatch/replay.h"
#include "edge/admission.h"
#include "edge/edge.h"
#include "edge/headers.h"
#include "edge/publish.h"
#include "edge/quota.h"
#include "fleet/fleet.h"
#include "intake/module.h"
#include "lifecycle/module.h"
#include "net/httpc.h"
#include "queue/dedupe.h"
#include "queue/quarantine.h"
#include "queue/sweeper.h"
#include "queue/writer.h"
#include "routes/routes.h"
#include "sinks/egress.h"
#include "sinks/sink.h"
#include "store/audit.h"
#include "store/store.h"
#include "tenant/erase.h"
#include "verify/verifier.h"

static const ak_module_t *const modules[] = {
  &ak_mod_node,
  &ak_mod_log,
  &ak_mod_restore,
  &ak_mod_store,
  &ak_mod_gauges,
  &ak_mod_sources,
  &ak_mod_source_store,
  &ak_mod_audit,
  &ak_mod_store_headers,
  &ak_mod_routes,
  &ak_mod_rate_limits,
  &ak_mod_admission,
  &ak_mod_quarantine,
  &ak_mod_dedupe,
  &ak_mod_sweeper,
  &ak_mod_fleet,
  &ak_mod_egress,
  &ak_mod_httpc,
  &ak_mod_backup,
  &ak_mod_claim_check,
  &ak_mod_dispatch,
  &ak_mod_replay,
  &ak_mod_intake,
  &ak_mod_storage,
  &ak_mod_archive,
  &ak_mod_archive_replay,
  &ak_mod_erase,
  &ak_mod_admin,
  &ak_mod_routes_admin,
  &ak_mod_listener,
  &ak_mod_edge,
  &ak_mod_publish,
  &ak_mod_batcher,
  &ak_mod_wal,
  &ak_mod_lifecycle,
};

static const ak_plugin_kind_t *const kinds[] = {&ak_verify_kind, &ak_sink_kind};

static const ak_schema_t schema = {
  .modules = modules,
  .nmodules = sizeof modules / sizeof modules[0],
  .kinds = kinds,
  .nkinds = sizeof kinds / sizeof kinds[0],
};

const ak_schema_t *ak_modules(void) { return &schema; }
