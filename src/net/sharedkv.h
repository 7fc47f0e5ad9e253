/* A versioned hash a fleet shares in Redis (docs/shared-stores.md): the keys under a
 * namespace, the connections and the sync thread, used by source_store.type redis
 * (admin/sources_api.c) and routes.store.type redis (routes/store_redis.c). Owns two
 * blocking hiredis connections with timeouts (net/redis.h's async client has no pub/sub):
 * one for commands (reads and the checked writes), one SUBSCRIBEd to the change channel,
 * read by the sync thread. Knows nothing of rows' contents beyond what the checked writes
 * compare: the owner builds, audits and applies them.
 *
 * Keys: <ns>:items (hash: item name -> the stored row), <ns>:version (counter, INCR'd by
 * every change), channel <ns>:changes (the new version, PUBLISHed by every change).
 *
 * Threads: every call but the sync thread's own is made by a writer holding its owner's
 * write lock, or at boot; the command connection is under `mu` (lock order: the owner's
 * write lock, then mu). The sync thread calls reload() (which takes the owner's write
 * lock itself) when the version in Redis is not the one last loaded: on a message, on
 * each tick_ms, after a resubscribe. */
#ifndef AK_NET_SHAREDKV_H
#define AK_NET_SHAREDKV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "net/redis.h"

typedef struct ak_skv ak_skv_t;

typedef struct ak_skv_row {
  char *name;
  char *row;
  size_t len;
} ak_skv_row_t;

/* reload: read every row and apply it; 0 with *version loaded, or -1 (tried again at the
 * next tick or message). */
typedef int (*ak_skv_reload_fn)(void *ctx, uint64_t *version);

/* Does not connect yet. what: the url's config key, for errors ("source_store.url").
 * NULL when out of memory. */
ak_skv_t *ak_skv_new(const ak_redis_url_t *url, const char *what, const char *ns, int64_t tick_ms,
                     ak_skv_reload_fn reload, void *ctx);
/* Stops the thread (when started), closes, frees. NULL is fine. */
void ak_skv_free(ak_skv_t *r);
/* "redis://host:port/db", no credentials. */
const char *ak_skv_addr(const ak_skv_t *r);

/* Every row and the version, read atomically (one script). 0, or -1 with why (no secret). */
int ak_skv_fetch(ak_skv_t *r, uint64_t *version, ak_skv_row_t **rows, size_t *n, char *why,
                      size_t wl);
void ak_skv_rows_free(ak_skv_row_t *rows, size_t n);
/* The row of name: 0 with *row (malloc'd) or *row NULL (none); -1 with why. */
int ak_skv_get(ak_skv_t *r, const char *name, char **row, size_t *len, char *why, size_t wl);

typedef enum {
  AK_SKV_WRITTEN = 0,   /* the row is stored (or deleted), the version moved, the change published */
  AK_SKV_CONFLICT = 1,  /* the stored revision is not the expected one: nothing written */
  AK_SKV_TAKEN = 2,     /* the name belongs to another tenant: nothing written */
  AK_SKV_DOWN = -1,     /* not sent (no connection): nothing written */
  AK_SKV_UNKNOWN = -2,  /* sent, no answer: written or not */
} ak_skv_rc_t;
/* The checked write: name's row replaced by row (NULL: deleted) when the stored row is of
 * tenant and has revision expect (0: no row). One script, atomic on the server. */
ak_skv_rc_t ak_skv_put(ak_skv_t *r, const char *name, const char *tenant, uint64_t expect,
                                 const char *row, size_t len, uint64_t *version, char *why, size_t wl);

/* The checked write by value: name's row replaced by row (NULL: deleted) when the stored
 * row is exactly expect (NULL: no row). WRITTEN, CONFLICT (why: the stored row differs),
 * DOWN, UNKNOWN. */
ak_skv_rc_t ak_skv_put_if(ak_skv_t *r, const char *name, const char *expect, size_t elen, const char *row,
                          size_t len, uint64_t *version, char *why, size_t wl);

/* Stop the sync thread (when started) and wait for it; before the table or the audit
 * trail its reload uses are closed. */
void ak_skv_stop(ak_skv_t *r);
/* Any thread: the sync thread reloads soon (at its next turn, retried until it succeeds)
 * even if the version did not move: a write whose answer never came left its audit row
 * pending, and the load settles it. */
void ak_skv_reload_soon(ak_skv_t *r);
/* Start the sync thread; last: the version already loaded (have_last false: none). 0 or -1. */
int ak_skv_start(ak_skv_t *r, bool have_last, uint64_t last);

#endif
