/* The dedupe index: which provider event keys (scope tenant, source, key) the node has
 * stored, with the id of the hook that holds each one and when it expires. Owns the
 * in-memory table (exact: rebuilt from the store at open), the node and per-tenant live
 * key counts (dedupe.max_entries, dedupe.max_entries_per_tenant), the 'e' records of the
 * dedupe CF and the sweep of expired ones. The writer decides with it which record of a
 * key is first; this module never assigns seqs, never writes a hook, and never deletes
 * a key from the writer thread.
 *
 * Lifecycle of one claim (one hook's request for one key):
 *   edge:   ak_dedupe_claim_new; ak_dedupe_seen answers a repeat of a committed key at
 *           once (201 duplicate, nothing queued); else the claim rides on the write request.
 *   writer: ak_dedupe_take, under the queue lock, before the record gets a seq:
 *             NEW   the record is the first occurrence: it gets its seq, and the key is
 *                   pending on it; ak_dedupe_put adds the batch's keys to it as records;
 *             DUP   the key is committed and live: answered AK_WR_DUPLICATE, no seq;
 *             WAIT  another record holds the key pending: parked on it, no seq;
 *             QUOTA a bound is reached: answered AK_WR_DEDUPE_QUOTA, no seq.
 *           ak_dedupe_settle, when the pending record is answered: committed -> the key
 *           is live and the parked repeats are answered duplicate with its id; failed ->
 *           the key is released and they get the same failure.
 *   sweeper: ak_dedupe_sweep deletes the 'e' records whose time passed (its own thread). */
#ifndef AK_QUEUE_DEDUPE_H
#define AK_QUEUE_DEDUPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/config.h"
#include "core/sources.h"
#include "core/module.h"
#include "queue/dedupe_record.h"
#include "store/batch.h"

struct ak_instance;
struct ak_write_req;

typedef struct ak_dedupe ak_dedupe_t;

enum { AK_DEDUPE_CLAIM_NEW = 0, AK_DEDUPE_CLAIM_PENDING, AK_DEDUPE_CLAIM_WAITING, AK_DEDUPE_CLAIM_DONE };

typedef struct ak_dedupe_claim {
  uint8_t digest[16];          /* SHA-256 of the scope, first 16 bytes: the table key */
  int64_t ttl_ms;
  /* below: the index's, under its lock */
  int state;                   /* AK_DEDUPE_CLAIM_* */
  bool swept;                  /* its record was swept before it settled (a TTL shorter than the commit) */
  int64_t expires_at_ms;       /* PENDING: the key's expiry, kept in its record */
  uint8_t first_id[16];        /* answered AK_WR_DUPLICATE: the hook that holds the key */
  void *tenant_count;
  struct ak_write_req *parked; /* PENDING: repeats waiting for this commit, `next`-linked */
  struct ak_dedupe_claim *pnext;
  const char *tenant;          /* into scope */
  size_t tenant_len;
  size_t scope_len;
  uint8_t scope[];             /* tlen:8 tenant slen:8 source klen:8 key */
} ak_dedupe_claim_t;

typedef enum { AK_DEDUPE_NEW = 0, AK_DEDUPE_DUP, AK_DEDUPE_WAIT, AK_DEDUPE_QUOTA } ak_dedupe_verdict_t;

/* Build from the open store (every 'e' record) and inst->cfg; registers the metrics and logs
 * a warning per source without dedupe. NULL with *err (malloc'd) when the store cannot be
 * read or holds a damaged key: an unreadable index is never taken as empty. */
ak_dedupe_t *ak_dedupe_new(struct ak_instance *inst, char **err);

/* The `dedupe` section (bounds of the index) and the index's lifecycle (inst->dedupe);
 * its sweeper thread is a module of its own (queue/sweeper.h). */
typedef struct ak_dedupe_cfg {
  int64_t max_entries;            /* live keys on the node */
  int64_t max_entries_per_tenant;
  int64_t sweep_interval_ms;
} ak_dedupe_cfg_t;
extern const ak_module_t ak_mod_dedupe;
const ak_dedupe_cfg_t *ak_dedupe_cfg(const ak_config_t *cfg);
void ak_dedupe_free(ak_dedupe_t *dx);

/* A claim on key (at most 255 bytes) for a hook of (tenant, source); NULL when out of
 * memory or a part is too long. */
ak_dedupe_claim_t *ak_dedupe_claim_new(const char *tenant, size_t tenant_len, const char *source, const char *key,
                                       size_t key_len, int64_t ttl_ms);
void ak_dedupe_claim_free(ak_dedupe_claim_t *c);

/* Edge: true when the key is committed and live; *first_id gets its hook id. */
bool ak_dedupe_seen(ak_dedupe_t *dx, const ak_dedupe_claim_t *c, uint8_t first_id[16]);

/* Writer, under its queue lock: see the top of this file. DUP and QUOTA set r->status. */
/* The writer, before taking a batch: start loading the index slots of up to max queued
 * records, so their misses overlap instead of each ak_dedupe_take waiting on its own. */
void ak_dedupe_prefetch(ak_dedupe_t *dx, const struct ak_write_req *list, size_t max);
ak_dedupe_verdict_t ak_dedupe_take(ak_dedupe_t *dx, struct ak_write_req *r);
/* Writer: the keys the records of list (`next`-linked, seqs assigned) hold pending, into
 * their commit's batch as 'e' records (a few per commit: see dedupe.c). */
void ak_dedupe_put(ak_dedupe_t *dx, ak_batch_t *b, const struct ak_write_req *list);
/* Writer, when r is answered (r->status final, before its done()): returns the parked
 * repeats, `next`-linked, each with its status set, for the writer to answer. */
struct ak_write_req *ak_dedupe_settle(ak_dedupe_t *dx, struct ak_write_req *r);

/* Sweeper: delete the records whose keys all expired, whole records until max keys are
 * reached (so at least max when that many are due, at most max plus one record's; not
 * synced: a crash only sweeps them again), and forget their keys. gate, when set, runs
 * between reading the records and deleting them (a test seam). Returns the number of
 * keys swept, or -1 when the store failed. */
typedef void (*ak_dedupe_gate_fn)(void *ctx, size_t nread);
long ak_dedupe_sweep(ak_dedupe_t *dx, size_t max, ak_dedupe_gate_fn gate, void *gate_ctx);

/* Tenant erase (tenant/erase.c): the tenant's keys leave the store, each record that holds
 * one deleted or, when other tenants' keys share it, rewritten without them (one synced
 * batch), and then the index; at most max records a call, from the key in from (from_len
 * 0: the first). On return from/from_len is where the next call starts (from_len 0: the
 * last record was read; from holds AK_DEDUPE_EKEY_MAX + 1 bytes). Returns the keys removed,
 * or -1 (nothing changed) when the store failed. Never runs beside a sweep pass. */
long ak_dedupe_erase_tenant(ak_dedupe_t *dx, const char *tenant, size_t tlen, size_t max, uint8_t *from,
                            size_t *from_len);

/* Live keys on the node (committed plus pending). */
int64_t ak_dedupe_count(ak_dedupe_t *dx);

#endif
