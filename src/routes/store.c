/* The node-local route store (store.h): rows in the default column family, each change in
 * one synced batch with its audit row (store/audit.h's pattern). */
#include <stdlib.h>
#include <string.h>
#include "routes/store.h"
#include "store/batch.h"
#include "store/keys.h"

typedef struct ets {
  ak_rstore_t base;
  ak_store_t *st;
  ak_audit_t *audit;
} ets_t;

typedef struct {
  ak_rstore_load_fn cb;
  void *ctx;
} load_ctx_t;

static int load_one(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  load_ctx_t *lc = ctx;
  size_t pl = strlen(AK_KEY_ROUTE);
  char id[80];
  if (kl - pl >= sizeof id) return 0; /* never written by us */
  memcpy(id, k + pl, kl - pl);
  id[kl - pl] = 0;
  ak_rstore_item_t it = {.id = id, .value = v, .len = vl};
  return lc->cb(&it, lc->ctx);
}

static int ets_load(ak_rstore_t *s, ak_rstore_load_fn cb, void *ctx) {
  ets_t *e = (ets_t *)s;
  load_ctx_t lc = {cb, ctx};
  if (ak_store_scan(e->st, AK_CF_DEFAULT, AK_KEY_ROUTE, strlen(AK_KEY_ROUTE), load_one, &lc) != 0) return -1;
  char *v = NULL;
  size_t vl = 0;
  int rc = ak_store_get(e->st, AK_CF_DEFAULT, AK_KEY_IP_RULES, strlen(AK_KEY_IP_RULES), &v, &vl);
  if (rc < 0) return -1;
  if (rc == 0) {
    ak_rstore_item_t it = {.id = NULL, .value = v, .len = vl};
    rc = cb(&it, ctx);
    free(v);
    if (rc) return -1;
  }
  return 0;
}

static int ets_apply(ak_rstore_t *s, const ak_rstore_item_t *item, const ak_audit_entry_t *ae) {
  ets_t *e = (ets_t *)s;
  char key[96];
  size_t kl;
  if (item->id) {
    kl = strlen(AK_KEY_ROUTE) + strlen(item->id);
    if (kl >= sizeof key) return -1;
    memcpy(key, AK_KEY_ROUTE, strlen(AK_KEY_ROUTE));
    memcpy(key + strlen(AK_KEY_ROUTE), item->id, strlen(item->id));
  } else {
    kl = strlen(AK_KEY_IP_RULES);
    memcpy(key, AK_KEY_IP_RULES, kl);
  }
  if (ak_store_pin(e->st) != 0) return -1;
  ak_batch_t *wb = ak_batch_new(e->st);
  if (!wb) {
    ak_store_unpin(e->st);
    return -1;
  }
  if (item->value) ak_batch_put(wb, AK_CF_DEFAULT, key, kl, item->value, item->len);
  else ak_batch_delete(wb, AK_CF_DEFAULT, key, kl);
  int rc;
  if (ae && e->audit) {
    rc = ak_audit_put(e->audit, wb, ae);
    if (rc == 0) rc = ak_audit_commit(e->audit, e->st, wb, NULL, NULL);
  } else {
    rc = ak_store_write_pinned(e->st, wb, true, NULL, NULL);
  }
  ak_store_unpin(e->st);
  ak_batch_free(wb);
  return rc;
}

static void ets_free(ak_rstore_t *s) { free(s); }

ak_rstore_t *ak_rstore_ets_new(ak_store_t *st, ak_audit_t *audit) {
  ets_t *e = calloc(1, sizeof *e);
  if (!e) return NULL;
  e->base = (ak_rstore_t){.load = ets_load, .apply = ets_apply, .free = ets_free};
  e->st = st;
  e->audit = audit;
  return &e->base;
}
