/* The claim check module (docs/claim-check.md): the `claim_check` section, the claim
 * stores of a node (inst->claims, read by the dispatcher's check-in), the claim gateway
 * listener (claim_check role: GET/HEAD /v1/claims/{tenant}/{claim_id}, authenticated with
 * the admin principals' claims:read scope) and the retention sweeper of LocalFS claim
 * stores. See admin/claims.c. */
#ifndef AK_ADMIN_CLAIMS_H
#define AK_ADMIN_CLAIMS_H

#include <stdint.h>
#include "core/module.h"

extern const ak_module_t ak_mod_claim_check;

/* The gateway's bound port (claim_check.port 0 picks one), or -1 when it does not run. */
struct ak_instance;
int ak_claims_port(const struct ak_instance *inst);

/* One sweep of the LocalFS claim store rooted at root: every root/claims/tenant=<t>/dt=<day>
 * directory of a day before the UTC day of now_ms - retention_days is removed whole;
 * what does not parse (a tenant or a day of another form, a file) is left alone. The
 * number of day directories removed, or -1 when root/claims cannot be read (absent is 0). */
int ak_claims_sweep_root(const char *root, int64_t now_ms, int64_t retention_days);

#endif
