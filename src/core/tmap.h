/* The tenant map: tenant id -> a value of a size fixed at init (a caller's struct, or a
 * pointer), in one hash table that grows by itself. Owns its entries (key copy + value,
 * allocated together, zeroed when inserted, at an address that never changes while the
 * entry is in the map) and its slot array; not what a value points to. Never locks:
 * callers keep their own lock around every call, as they did around the maps this
 * replaces. Never does I/O and never logs (keys are tenant ids, values are the caller's).
 *
 * Keys are bytes compared exactly. Tenant ids are [A-Za-z0-9_-]{1,64} where the edge and
 * the config check them; the map does not check the alphabet and takes any key of up to
 * AK_TMAP_KEY_MAX bytes (the empty one too), so it never refuses a tenant some other part
 * of the node has already accepted. The hash is seeded at random per map: tenant ids come
 * from URLs (tenant_path), and chosen ids must not be able to pile into one probe run. */
#ifndef AK_CORE_TMAP_H
#define AK_CORE_TMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AK_TMAP_KEY_MAX 255 /* the store's length-prefixed tenant fields hold no more */

struct ak_tmap_slot;

/* Embed one and ak_tmap_init it; the fields are the map's own. */
typedef struct ak_tmap {
  struct ak_tmap_slot *slots; /* cap slots (a power of two), NULL until the first insert */
  size_t cap, n;
  size_t vsize;               /* bytes of each value */
  uint64_t seed;
} ak_tmap_t;

/* An empty map whose values are vsize bytes each (sizeof(void *) for a pointer). Never
 * fails: nothing is allocated before the first insert. */
void ak_tmap_init(ak_tmap_t *m, size_t vsize);
/* Free every entry and the slots; the map is empty (and usable) again. What values point
 * to is the caller's to release first (iterate). */
void ak_tmap_fini(ak_tmap_t *m);

/* The value stored under key, or NULL. */
void *ak_tmap_find(const ak_tmap_t *m, const char *key, size_t len);
/* The value stored under key, inserted zeroed when absent (*created, may be NULL, says
 * which). NULL when out of memory or the key is longer than AK_TMAP_KEY_MAX: nothing
 * inserted. */
void *ak_tmap_get(ak_tmap_t *m, const char *key, size_t len, bool *created);
/* Remove and free the entry whose value this is (from find / get / next of this map). */
void ak_tmap_remove(ak_tmap_t *m, void *value);

/* The key of a value's entry: NUL-terminated, valid while the entry is in the map. */
const char *ak_tmap_key(const void *value, size_t *len);
size_t ak_tmap_count(const ak_tmap_t *m);

/* Iterate: size_t pos = 0; while ((v = ak_tmap_next(m, &pos))) ... in no particular
 * order. Nothing may be inserted or removed while iterating. */
void *ak_tmap_next(const ak_tmap_t *m, size_t *pos);

#endif
