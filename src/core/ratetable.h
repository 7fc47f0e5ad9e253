/* A bounded table of GCRA states keyed by 16 bytes (a client address, a tenant's keyed
 * hash): set-associative, a fixed number of slots allocated once, so a flood of new keys
 * can evict state but never grow memory. Each entry holds up to AK_RATETABLE_LANES
 * buckets charged together (all pass or none is charged). Owns the slots and their
 * striped locks; never allocates after creation and never does I/O. */
#ifndef AK_CORE_RATETABLE_H
#define AK_CORE_RATETABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/gcra.h"

#define AK_RATETABLE_LANES 2
#define AK_RATETABLE_WAYS 8   /* slots a key may live in; eviction picks among them */

typedef struct ak_ratetable ak_ratetable_t;

/* capacity: slots, rounded up to a power of two (at least AK_RATETABLE_WAYS). seed 0
 * draws a random one: the slot a key lands in cannot be predicted, so colliding keys
 * cannot be crafted to evict someone's state. NULL when out of memory. */
ak_ratetable_t *ak_ratetable_new(size_t capacity, uint64_t seed);
void ak_ratetable_free(ak_ratetable_t *t);
size_t ak_ratetable_capacity(const ak_ratetable_t *t);

/* Charge cost[i] to lane i with params p[i] (n <= AK_RATETABLE_LANES; p[i] NULL = lane
 * not limited) for key. An absent key starts full. When every lane passes, all are
 * charged and true is returned; else nothing is charged and *retry_ns (may be NULL) is
 * the longest wait among the refusing lanes. A new key takes a free slot of its set, else
 * one whose buckets are full again (no information lost), else the one least in debt
 * (counted as an eviction). */
bool ak_ratetable_take(ak_ratetable_t *t, const uint8_t key[16], const ak_gcra_t *const *p, const double *cost,
                       size_t n, int64_t now_ns, int64_t *retry_ns);
/* Give back what a take charged (a request refused later, nothing stored). */
void ak_ratetable_refund(ak_ratetable_t *t, const uint8_t key[16], const ak_gcra_t *const *p,
                         const double *cost, size_t n);
/* Forget a key (its limit changed): it starts full again. */
void ak_ratetable_reset(ak_ratetable_t *t, const uint8_t key[16]);

/* Keys whose state still matters at now (some bucket not full); walks every slot. */
size_t ak_ratetable_live(ak_ratetable_t *t, int64_t now_ns);
/* Entries dropped while still in debt since creation. */
uint64_t ak_ratetable_evictions(const ak_ratetable_t *t);

/* A 16-byte key for a string (a tenant id) under a per-table random seed. */
void ak_ratetable_key(const ak_ratetable_t *t, const char *s, size_t len, uint8_t out[16]);

#endif
