/* The route guard's decision cache: what a method and a path found in one snapshot
 * (ak_rfind_t and the route's index), so a request does not walk every pattern. Keyed by
 * method + path only: IP rules are evaluated on every request (a cheap walk) and never
 * cached, so an entry is right for any client. An entry belongs to one snapshot
 * generation: after any change of the route set every older entry is a miss (a route
 * added after a miss is served at once). A hit lives ttl_ms, a miss (route_not_found)
 * negative_ttl_ms (0: misses are not cached); expired entries are dropped every
 * gc_interval_ms. Bounded: at most max_size entries (a full cache caches nothing more
 * until a collection frees room); paths longer than AK_RCACHE_MAX_PATH are not cached.
 * Thread safety: 64 lock stripes over the buckets; the size is atomic. */
#ifndef AK_ROUTES_CACHE_H
#define AK_ROUTES_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AK_RCACHE_MAX_PATH 1024

typedef struct ak_rcache ak_rcache_t;

ak_rcache_t *ak_rcache_new(int64_t max_size, int64_t ttl_ms, int64_t negative_ttl_ms, int64_t gc_interval_ms);
void ak_rcache_free(ak_rcache_t *c);
/* true on a live hit of this generation: *kind (ak_rfind_t), *idx. */
bool ak_rcache_get(ak_rcache_t *c, uint64_t gen, const char *method, const char *path, size_t len, int64_t now_ms,
                   int *kind, size_t *idx);
void ak_rcache_put(ak_rcache_t *c, uint64_t gen, const char *method, const char *path, size_t len, int64_t now_ms,
                   int kind, bool negative, size_t idx);
/* Drop expired and stale entries now (also run by get/put every gc_interval_ms). */
void ak_rcache_gc(ak_rcache_t *c, uint64_t gen, int64_t now_ms);
size_t ak_rcache_size(ak_rcache_t *c);

#endif
