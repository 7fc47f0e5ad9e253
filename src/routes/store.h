/* Where routes and the global IP rules live: an interface, so a shared store (redis, a
 * later build) can sit beside the node-local one. The `ets` store keeps them in this
 * node's RocksDB store (default CF: rt:<id> -> the route's JSON, m:ip_rules -> the rules'
 * JSON): our departure from the original's in-memory ETS, so routes made over the API
 * survive a restart. A change and its audit row are one synced batch: both survive a
 * kill -9, or neither. */
#ifndef AK_ROUTES_STORE_H
#define AK_ROUTES_STORE_H

#include <stddef.h>
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
  /* The change and its audit row (e, may be NULL for no row), durably. 0, or -1: nothing
   * changed. */
  int (*apply)(ak_rstore_t *s, const ak_rstore_item_t *item, const ak_audit_entry_t *e);
  void (*free)(ak_rstore_t *s);
};

/* The node-local store on st, with its rows in audit (NULL: none). */
ak_rstore_t *ak_rstore_ets_new(ak_store_t *st, ak_audit_t *audit);

#endif
