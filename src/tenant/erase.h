/* Tenant erase (docs/erase.md): DELETE /v1/tenants/{tenant}?confirm={tenant} as a job of
 * stages, each idempotent, its progress (m:erase:<tenant>) synced before the next starts,
 * so a kill -9 resumes the job at the next boot. Owns the set of closing tenants (the edge
 * answers their hooks 503 tenant_erasing, the dispatcher settles their rows undelivered),
 * the job thread, and the tombstone m:erased:<tenant> (an archived hook of the tenant
 * received before it is 410 gone). Never deletes a config-file source: an erase of a
 * tenant that has one is refused before anything starts. */
#ifndef AK_TENANT_ERASE_H
#define AK_TENANT_ERASE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/instance.h"
#include "core/module.h"
#include "store/audit.h"

/* The stages in order; the progress row names the next one to run. */
typedef enum {
  AK_ERASE_CLOSE = 0,   /* the tenant joins the closing set */
  AK_ERASE_DRAIN,       /* its running attempts finish, its log deliveries settle undelivered */
  AK_ERASE_SOURCES,     /* its API-managed sources: store rows and the served table */
  AK_ERASE_RATE_LIMIT,  /* its rate-limit override */
  AK_ERASE_HOOKS,       /* its hooks in the store and their delivery state */
  AK_ERASE_QUARANTINE,  /* its quarantine rows */
  AK_ERASE_DEDUPE,      /* its dedupe keys, inside shared records too */
  AK_ERASE_CLAIMS,      /* claims/tenant=<t>/ in every claim store */
  AK_ERASE_FLEET,       /* its Redis buckets (rate_limits.scope fleet) */
  AK_ERASE_ROUTES,      /* its routes (wired by the integrator) */
  AK_ERASE_LIFECYCLE,   /* its lifecycle entities (wired by the integrator) */
  AK_ERASE_COMPACT,     /* the families it had rows in are rewritten: deleted values leave the disk */
  AK_ERASE_TOMBSTONE,   /* tombstone + audit row, one synced batch */
  AK_ERASE_STAGES
} ak_erase_stage_t;
extern const char *const ak_erase_stage_names[AK_ERASE_STAGES];

typedef struct ak_erase ak_erase_t;

/* Is the tenant closing (an erase started and not finished)? Any thread; cheap while no
 * erase runs. False without the module. */
bool ak_tenant_erasing(ak_instance_t *inst, const char *tenant, size_t len);
/* The tombstone: 1 (erased; *at_ms the erase's finish time when at_ms), 0 not erased, -1
 * the store cannot be read. */
int ak_tenant_erased(ak_instance_t *inst, const char *tenant, size_t len, int64_t *at_ms);

typedef enum {
  AK_ERASE_OK = 0,          /* started (or resumed: already running) */
  AK_ERASE_STATIC_SOURCES,  /* *static_sources: the config-file sources that block it */
  AK_ERASE_UNAVAILABLE,     /* the store or the audit trail did not take it */
} ak_erase_rc_t;
/* Start erasing tenant (its progress row synced before this returns). *progress: the
 * job's view (as ak_erase_progress). */
ak_erase_rc_t ak_erase_start(ak_instance_t *inst, const char *tenant, const ak_audit_who_t *who, json_t **progress,
                             json_t **static_sources);
/* {tenant, state: running|done, stage, started_at, finished_at, counts{...}}: the job's
 * progress, or the tombstone's record once done. 0, 1 (never erased: *out NULL), -1 store. */
int ak_erase_progress(ak_instance_t *inst, const char *tenant, json_t **out);

/* The erase module (inst->erase): after the dispatcher (which it drains) and before the
 * admin and ingest listeners: its open rebuilds the closing set from the progress rows, so
 * no hook of a closing tenant is accepted and no row of it claimed; its start resumes the
 * unfinished jobs in its thread. */
extern const ak_module_t ak_mod_erase;

#endif
