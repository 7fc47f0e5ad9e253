/* Routes and the route set. A route (ak_rroute_t) is immutable once built and counted by
 * reference, so consecutive route sets share the routes they have in common. A set
 * (ak_rsnap_t) is an immutable snapshot: the routes in match order (most specific pattern
 * first, then by id) and the global IP rules, with a generation number. The table holds
 * the current snapshot; a reader takes a reference under a lock held only for that
 * pointer copy, a writer builds the next snapshot outside any lock and swaps it in, so a
 * request never waits for a change being built or written. Pure data: no I/O. */
#ifndef AK_ROUTES_TABLE_H
#define AK_ROUTES_TABLE_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include "routes/iprules.h"
#include "routes/pattern.h"

#define AK_ROUTE_ID_MAX 64
#define AK_ROUTE_META_MAX_KEYS 32
#define AK_ROUTE_META_MAX_VALUE 1024

/* methods a route may name (bit i = ak_rmethod_names[i]); 0 = every method */
extern const char *const ak_rmethod_names[];
uint32_t ak_rmethod_bit(const char *m);

typedef struct ak_rroute {
  atomic_int refs;
  char *id;
  char *tenant;          /* the route's tenant (ak_rroute_from_json's rule), NULL: none */
  ak_rpattern_t *pat;
  uint32_t methods;      /* 0: every method */
  bool enabled;
  ak_iprules_t *ip;      /* the route's own rules, NULL: none */
  json_t *json;          /* the canonical form: what the API answers and the store keeps */
} ak_rroute_t;

/* A route from its JSON form {id, path, methods, enabled, ip_rules, metadata, tenant}:
 * path required; methods null/absent = all; enabled default true; tenant: the `tenant`
 * key when given, else the literal second segment of a path /webhooks/<tenant>/<more>,
 * else none (a `tenant` that contradicts the path is refused). id: the id the caller
 * names (the URL's), which the body must not contradict; NULL: the body's. NULL with err
 * ("path: must not contain %2F") for an invalid one. */
ak_rroute_t *ak_rroute_from_json(const json_t *j, const char *id, char *err, size_t errlen);
ak_rroute_t *ak_rroute_ref(ak_rroute_t *r);
void ak_rroute_unref(ak_rroute_t *r);
bool ak_rroute_method_ok(const ak_rroute_t *r, const char *method);
/* A route id: [A-Za-z0-9_.-]{1,64}. */
bool ak_rroute_id_valid(const char *id);

/* What a path and method find in a snapshot, before any IP rule. */
typedef enum { AK_RFIND_ROUTE = 0, AK_RFIND_NONE, AK_RFIND_METHOD, AK_RFIND_DISABLED } ak_rfind_t;

typedef struct ak_rsnap {
  atomic_int refs;
  uint64_t gen;
  ak_rroute_t **v;       /* match order */
  size_t n;
  ak_iprules_t *global;  /* never NULL */
} ak_rsnap_t;

/* A snapshot of routes v[0..n) (each referenced again; v is the caller's) and global
 * (taken). NULL out of memory (global freed). */
ak_rsnap_t *ak_rsnap_new(ak_rroute_t *const *v, size_t n, ak_iprules_t *global, uint64_t gen);
void ak_rsnap_unref(ak_rsnap_t *s);
/* The route with this id, or NULL (not referenced: valid while s is). */
ak_rroute_t *ak_rsnap_get(const ak_rsnap_t *s, const char *id);
/* The first enabled route whose pattern matches and whose methods allow method (ROUTE);
 * else METHOD (an enabled route has the path under other methods), DISABLED (only
 * disabled routes have it) or NONE. *idx: the route's index in v (ROUTE, METHOD,
 * DISABLED). path must be ak_rpath_valid. */
ak_rfind_t ak_rsnap_find(const ak_rsnap_t *s, const char *method, const char *path, size_t len, size_t *idx);

typedef struct ak_rtable {
  pthread_mutex_t mu;    /* guards cur (the pointer and taking a reference) only */
  ak_rsnap_t *cur;
} ak_rtable_t;

void ak_rtable_init(ak_rtable_t *t, ak_rsnap_t *first);
void ak_rtable_destroy(ak_rtable_t *t);
/* The current snapshot, referenced: ak_rsnap_unref when done. */
ak_rsnap_t *ak_rtable_get(ak_rtable_t *t);
/* Replace the current snapshot with s (taken). */
void ak_rtable_swap(ak_rtable_t *t, ak_rsnap_t *s);

#endif
