/* Where routes and the global IP rules live: an interface, with the node-local store and
 * the shared one (routes.store.type redis, routes/store_redis.c, docs/shared-stores.md). The `ets` store keeps them in this
 * node's RocksDB store (default CF: rt:<id> -> the route's JSON, m:ip_rules -> the rules'
 * JSON): our departure from the original's in-memory ETS, so routes made over the API
 * survive a restart. A change and its audit row are one synced batch: both survive a
 * kill -9, or neither. */
#ifndef AK_ROUTES_STORE_H
#define AK_ROUTES_STORE_H

#include <stddef.h>
#include <stdint.h>
#include "net/redis.h"
#include "store/audit.h"
#include "store/store.h"

typedef struct ak_rstore ak_rstore_t;

/* One stored thing: a route (id set) or the global IP rules (id NULL); value NULL = delete. */
typedef struct ak_rstore_item {
  const char *id;
  const char *value;
  size_t len;
} ak_rstore_item_t;

typedef int (*ak_rstore_load_fn)(const ak_rstore_item_t *item, void *ctx);

struct ak_rstore {
  /* Every stored route, then the IP rules (when stored). 0, or -1 unreadable (or cb's
   * nonzero). */
  int (*load)(ak_rstore_t *s, ak_rstore_load_fn cb, void *ctx);
  /* The change and its audit row (e, may be NULL for no row), durably. 0, -1: nothing
   * changed (or, shared, a write whose answer never came: the next load settles its audit
   * row), 1: a shared item changed meanwhile on another node (nothing changed). */
  int (*apply)(ak_rstore_t *s, const ak_rstore_item_t *item, const ak_audit_entry_t *e);
  /* Shared stores only (NULL otherwise): from now on call reload(ctx) (from another
   * thread) whenever the shared items may have changed; reload calls load. 0 or -1. */
  int (*watch)(ak_rstore_t *s, int (*reload)(void *ctx), void *ctx);
  /* Stops watching first. */
  void (*free)(ak_rstore_t *s);
};

/* The node-local store on st, with its rows in audit (NULL: none). */
ak_rstore_t *ak_rstore_ets_new(ak_store_t *st, ak_audit_t *audit);

/* The shared store (routes.store.type redis): url (wiped here), ns, tick_ms; its pending audit rows in audit. NULL out of memory. */
ak_rstore_t *ak_rstore_redis_new(ak_redis_url_t *url, const char *ns, int64_t tick_ms, ak_audit_t *audit);
/* "redis://host:port/db" of a shared store, no credentials. */
const char *ak_rstore_redis_addr(const ak_rstore_t *s);

#endif
