/* Which tenants an admin principal may act on, as the modules that list or change
 * per-tenant state see it (quarantine entries, dead letters, audit rows). Owns the type
 * and its one test only. Never allocates: the ids belong to the principal. */
#ifndef AK_CORE_TENANTS_H
#define AK_CORE_TENANTS_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

typedef struct ak_tenant_scope {
  const char *const *ids;
  size_t n;
} ak_tenant_scope_t;

/* A NULL scope is every tenant (a principal with tenants: "*", or no principals at all). */
static inline bool ak_tenant_scope_has(const ak_tenant_scope_t *s, const char *t, size_t len) {
  if (!s) return true;
  for (size_t i = 0; i < s->n; i++)
    if (strlen(s->ids[i]) == len && memcmp(s->ids[i], t, len) == 0) return true;
  return false;
}

#endif
