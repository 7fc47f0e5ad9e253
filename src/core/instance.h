/* The instance: everything one running node owns (config, metrics, ids, store, writer,
 * listeners). core/node.c builds it and each module's open fills its own pointer;
 * modules receive it. Never a second instance per store. */
#ifndef AK_CORE_INSTANCE_H
#define AK_CORE_INSTANCE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include "core/config.h"
#include "core/ids.h"
#include "core/metrics.h"

struct ak_store;
struct ak_writer;
struct ak_edge;
struct ak_admin;
struct ak_pen;
struct ak_quota;
struct ak_dispatch;
struct ak_replays;
struct ak_egress;
struct ak_dedupe;
struct ak_audit;
struct ak_sources;
struct ak_gauges;
struct ak_sweeper;
struct ak_httpc;
struct ak_archive;
struct ak_areader;
struct ak_fleet;
struct ak_claim_stores;
struct ak_backup_mod;
struct ak_intake;
struct ak_publish;
struct ak_lifecycle;
struct ak_srcstore;
struct ak_routes;
struct ak_erase;

typedef struct ak_instance {
  const char *name;            /* "default": Ankusa's YAML has no instance key */
  ak_config_t *cfg;
  unsigned roles;              /* AK_ROLE_* this node runs (node.roles), set by core/node.c */
  ak_metrics_t *metrics;
  ak_idgen_t ids;
  struct ak_store *store;
  struct ak_writer *writer;
  struct ak_edge *edge;
  struct ak_admin *admin;
  struct ak_pen *pen;           /* quarantine pen (queue/quarantine.h) */
  struct ak_dedupe *dedupe;     /* dedupe index (queue/dedupe.h); NULL in tools and some tests */
  struct ak_sweeper *sweeper;   /* its sweeper thread (queue/sweeper.h), while started */
  struct ak_quota *quota;       /* tenant rate limits and their overrides (edge/quota.h) */
  struct ak_egress *egress;     /* egress.* guard shared by every sink (sinks/egress.h) */
  struct ak_dispatch *dispatch; /* NULL unless the dispatch role runs (dispatch/dispatch.h) */
  struct ak_replays *replays;   /* replay jobs (dispatch/replay.h); NULL without dispatch */
  struct ak_audit *audit;       /* the audit trail (store/audit.h); NULL in tools and some tests */
  _Atomic int draining;        /* SIGTERM seen: /ready and new requests answer 503 draining,
                                  new connections are closed as soon as accepted (edge.c) */
  struct ak_sources *sources;  /* every source served, with its verifier (core/sources.h) */
  struct ak_gauges *gauges;    /* the gauge sampler; modules add their samplers at open (core/gauges.h) */
  struct ak_httpc *httpc;      /* the HTTP client every HTTP-speaking module shares (net/httpc.h) */
  struct ak_archive *archive;  /* the compactor (archive/compactor.h); NULL without the storage role */
  struct ak_areader *areader;  /* archive replay reads (archive/replay_reader.h); NULL without storage */
  struct ak_fleet *fleet;      /* fleet-scoped admission (fleet/fleet.h); NULL unless a scope is fleet */
  struct ak_intake *intake;     /* the intake log of wal.type dual (intake/module.h); NULL otherwise */
  struct ak_backup_mod *backup;  /* the backup uploader (backup/module.h); NULL unless backup.enabled */
  struct ak_publish *publish;   /* wal.type none: the direct publisher (edge/publish.h); else NULL */
  struct ak_srcstore *srcstore;  /* source_store.type redis (admin/sources_api.c); else NULL */
  struct ak_claim_stores *claims; /* the claim stores (sinks/claimpack.h), opened by the claim_check module
                                     (admin/claims.c) on a dispatch or claim_check node; else NULL */
  struct ak_lifecycle *lifecycle; /* the lifecycle publisher (lifecycle/publisher.h); NULL unless lifecycle.sinks */
  struct ak_routes *routes;     /* the route guard (routes/routes.h); NULL unless routes.enabled on an edge node */
  struct ak_admin *routes_admin; /* its admin listener (admin/routes_api.h), with inst->routes */
  struct ak_erase *erase;       /* tenant erase jobs and the closing set (tenant/erase.h); NULL without a store */
  /* Is this tenant being erased? Set by the erase module at open (tenant/erase.c) for the
   * layers below it (the edge); NULL: no tenant is. Any thread. */
  /* source_store.type redis: a tenant erase deletes one API source of the fleet's store
   * through it (admin/sources_api.c; the caller holds the sources table's write lock).
   * 0, or -1 (nothing changed). NULL on other store types. */
  int (*erase_shared_source)(struct ak_instance *inst, const char *tenant, const char *name);
  bool (*tenant_closing)(void *ctx, const char *tenant, size_t len);
  void *tenant_closing_ctx;
} ak_instance_t;

#endif
