/* Key layout of the node's RocksDB store (docs/storage.md). All integers big-endian so
 * byte order is sort order. Owns encoding only; never opens the database. */
#ifndef AK_STORE_KEYS_H
#define AK_STORE_KEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* column families, in open order */
/* a family added later is created at open (create_missing_column_families): an older store
 * opens fine and starts it empty */
enum { AK_CF_DEFAULT = 0, AK_CF_HOOKS, AK_CF_DELIVERIES, AK_CF_INDEX, AK_CF_QUARANTINE, AK_CF_AUDIT, AK_CF_DEDUPE,
       AK_CF_ARCHIVE, AK_CF_COUNT };
extern const char *const ak_cf_names[AK_CF_COUNT];

/* default CF meta keys */
#define AK_KEY_NEXT_SEQ "m:next_seq"
#define AK_KEY_HOOK_COUNT "m:hook_count"
/* m:hook_count:r -> minus the hooks reclaimed (u64, two's complement): summed with the
 * writers' counters, the hooks the store holds */
#define AK_KEY_HOOK_COUNT_RECLAIMED "m:hook_count:r"
#define AK_KEY_READY_PROBE "m:ready_probe"
#define AK_KEY_STORE_ID "m:store_id"
#define AK_KEY_FORMAT "m:format"
/* m:id_key -> 16 random bytes that seal hook ids (core/ids.h; store.c makes it) */
#define AK_KEY_ID_SEAL "m:id_key"
/* m:quarantine_bytes:<w> (writer thread w) and m:quarantine_bytes:admin (purges): int64
 * two's complement running totals of pen body bytes; the pen holds their sum */
#define AK_KEY_QUARANTINE_BYTES "m:quarantine_bytes"
/* r: id:128 -> replay job record (JSON, dispatch/replay.c); ids are UUIDv7, so key order
 * is creation order */
#define AK_KEY_REPLAY "r:"
/* rl:<tenant> -> a runtime rate-limit override (JSON, core/ratelimit.h; edge/quota.c) */
#define AK_KEY_RATE_LIMIT "rl:"
/* s:<tenant>\0<name> -> a source created over the admin API (JSON, admin/sources_api.c) */
#define AK_KEY_SOURCE "s:"
/* rt:<id> -> a route of the route guard (JSON, routes/store.c); m:ip_rules -> the guard's
 * global IP rules once set over the route admin API (JSON {default, rules}) */
#define AK_KEY_ROUTE "rt:"
#define AK_KEY_IP_RULES "m:ip_rules"
/* m:erase:<tenant> -> the progress of that tenant's erase (JSON, tenant/erase.c), from
 * its start until its tombstone; m:erased:<tenant> -> the tombstone (the finished
 * progress): a fetch of an archived hook of the tenant received before it is 410 gone */
#define AK_KEY_ERASE "m:erase:"
#define AK_KEY_ERASED "m:erased:"
/* m:hook_count:e -> minus the hooks an erase deleted on a node without the dispatcher */
#define AK_KEY_HOOK_COUNT_ERASED "m:hook_count:e"
/* m:format -> u32: the store's layout version (AK_STORE_FORMAT); absent = 1, the layout
 * with a delivery row and a due key per delivery (store.c migrates it at open) */
#define AK_STORE_FORMAT 2
/* m:dlow -> u64: the hook log's low mark: every delivery of every hook below it is
 * settled (delivered, or moved into an exception row); the dispatcher reads the group
 * markers from here at start (dispatch/dispatch.c) */
#define AK_KEY_DISPATCH_LOW "m:dlow"
/* m:reclaimed -> u64: hooks below it that had no exception row are deleted */
#define AK_KEY_RECLAIMED "m:reclaimed"
/* dc:<tenant> -> u64: the tenant's log cursor: every delivery of its hooks below it is
 * settled; only meaningful at or above m:dlow */
#define AK_KEY_TENANT_CURSOR "dc:"

/* m:acursor -> u64: the compactor's cursor: every hook below it is in a catalogued
 * segment (archive/compactor.c); reclaim takes the lower of it and m:dlow */
#define AK_KEY_ARCHIVE_CURSOR "m:acursor"
/* m:aexpired -> u64: archive retention deleted every segment whose hooks all lie below it */
#define AK_KEY_ARCHIVE_EXPIRED "m:aexpired"
/* m:lifecycle_cursor -> u64: the lowest audit seq whose lifecycle event is not yet
 * published (every flagged row below it is done); audit retention never deletes a row at
 * or above it while lifecycle.sinks is set (store/audit.c, lifecycle/publisher.c) */
#define AK_KEY_LIFECYCLE_CURSOR "m:lifecycle_cursor"
/* m:lifecycle_replay -> JSON {id, from_seq, to_seq, next}: the lifecycle replay running */
#define AK_KEY_LIFECYCLE_REPLAY "m:lifecycle_replay"

/* archive CF: the catalogue, one row per segment (archive/catalogue.h) */
#define AK_ARC_SEGMENT 'S' /* 'S' first_seq:64 -> catalogue row v1 */

/* index CF tags */
#define AK_IDX_DUE 'd'     /* 'd' tlen:8 tenant at:64 seq:64 sink:16 -> due value v1 */
#define AK_IDX_DEAD 'x'    /* 'x' dead_at:64 seq:64 sink:16 -> dead entry v1 */
#define AK_IDX_ARCHIVE 'a' /* 'a' seq:64 -> size:32: format 1 only (an archive obligation), removed by the migration */
#define AK_IDX_GROUP 'g'   /* 'g' first_seq:64 -> group marker v1 (store/marker.h) */
#define AK_IDX_UNSEALED 'j' /* 'j' seq:64 -> id:128, beside every 'i' key (reclaim finds them by seq) */
#define AK_IDX_RECLAIM 'r' /* 'r' seq:64 -> id:128: a hook that may be reclaimable (its exception row settled) */
#define AK_IDX_LANE 'o'    /* 'o' tlen:8 tenant slen:8 source sink:16 seq:64 -> lane row v1 (ordered sinks) */
#define AK_IDX_ID 'i'      /* 'i' id:128 -> seq:64, only for ids that do not carry their seq sealed */
#define AK_IDX_CLAIM 'c'   /* 'c' seq:64 -> claim value v1: u8 1, u8 len, ref, 64 hex sha256 (dispatch/checkin.h) */
#define AK_IDX_DEDUPE 'e'  /* dedupe CF: 'e' expires_at:64 seq:64 -> a commit's keys (queue/dedupe_record.c) */

/* audit CF (store/audit.c): 'a' seq:64 -> row (JSON); 'p' seq:64 -> "" while that row is
 * pending (a dual write not settled yet); 'v' subject -> u64 revision; 'k' -> the HMAC
 * key of the rows' hashes (32 random bytes); 'n' -> u64 next seq; 'e' seq:64 -> the
 * lifecycle event of row seq ({"event", "entity"}: the redacted entity), only while
 * lifecycle.sinks is set: the outbox src/lifecycle/ publishes */
#define AK_AUDIT_ROW 'a'
#define AK_AUDIT_PENDING 'p'
#define AK_AUDIT_REV 'v'
#define AK_AUDIT_KEY 'k'
#define AK_AUDIT_NEXT 'n'
#define AK_AUDIT_EVENT 'e'
#define AK_AUDIT_ROW_KEY_LEN 9

/* quarantine CF tags: both keys 'x' received_at:64 id:128 (oldest first) */
#define AK_PEN_SUMMARY 's' /* -> summary v1 (ak_pen_summary_encode) */
#define AK_PEN_BODY 'b'    /* -> the encoded envelope record, seq 0 */

void ak_put_u16(uint8_t *p, uint16_t v);
void ak_put_u32(uint8_t *p, uint32_t v);
void ak_put_u64(uint8_t *p, uint64_t v);
uint16_t ak_get_u16(const uint8_t *p);
uint32_t ak_get_u32(const uint8_t *p);
uint64_t ak_get_u64(const uint8_t *p);

#define AK_HOOK_KEY_LEN 8
#define AK_DELIVERY_KEY_LEN 10
#define AK_DUE_KEY_MAX (2 + 255 + 18)  /* variable: 20 + tenant length */
#define AK_DEAD_KEY_LEN 19
#define AK_ARCHIVE_KEY_LEN 9
#define AK_ID_KEY_LEN 17
#define AK_PEN_KEY_LEN 25
#define AK_REPLAY_KEY_LEN 18

void ak_key_hook(uint8_t out[AK_HOOK_KEY_LEN], uint64_t seq);
void ak_key_delivery(uint8_t out[AK_DELIVERY_KEY_LEN], uint64_t seq, uint16_t sink);
/* Due keys are grouped by tenant (a scan for one tenant never wades through another's
 * rows), then ordered by due time. Returns the key length (20 + tenant length; tenant
 * lengths above 255 are cut, ids are at most 64). */
size_t ak_key_due(uint8_t out[AK_DUE_KEY_MAX], const char *tenant, size_t tlen, int64_t at_ms, uint64_t seq,
                  uint16_t sink);
/* Parse a due key; points tenant into k. 0, or -1 when it is not a well-formed due key. */
int ak_key_due_parse(const uint8_t *k, size_t klen, const char **tenant, size_t *tlen, int64_t *at_ms,
                     uint64_t *seq, uint16_t *sink);
/* The prefix every due key of one tenant starts with ('d' tlen tenant); returns its length. */
size_t ak_key_due_prefix(uint8_t out[AK_DUE_KEY_MAX], const char *tenant, size_t tlen);
void ak_key_dead(uint8_t out[AK_DEAD_KEY_LEN], int64_t dead_at_ms, uint64_t seq, uint16_t sink);
void ak_key_archive(uint8_t out[AK_ARCHIVE_KEY_LEN], uint64_t seq);
#define AK_GROUP_KEY_LEN 9
/* A lane's rows ('o'): every row of one {tenant, source, sink} shares the prefix, in seq
 * order. Returns the prefix length; ak_key_lane appends the seq. Names above 255 bytes
 * are cut (ids are at most 64). */
#define AK_LANE_PFX_MAX (1 + 1 + 255 + 1 + 255 + 2)
#define AK_LANE_KEY_MAX (AK_LANE_PFX_MAX + 8)
size_t ak_key_lane_prefix(uint8_t *out, const char *tenant, size_t tlen, const char *source, size_t slen,
                          uint16_t sink);
void ak_key_group(uint8_t out[AK_GROUP_KEY_LEN], uint64_t first_seq);
void ak_key_unsealed(uint8_t out[AK_GROUP_KEY_LEN], uint64_t seq);
void ak_key_id(uint8_t out[AK_ID_KEY_LEN], const uint8_t id[16]);
void ak_key_pen(uint8_t out[AK_PEN_KEY_LEN], char tag, int64_t received_at_ms, const uint8_t id[16]);
void ak_key_replay(uint8_t out[AK_REPLAY_KEY_LEN], const uint8_t id[16]);

/* delivery row value v1: u8 version, u8 state, u32 attempts, u64 next_at_ms (pending: when
 * due; dead: when dead-lettered), str8 sink type, then optionally 16 bytes: the replay
 * job id that moved the row back from the dead-letter set. */
enum { AK_DELIVERY_PENDING = 0, AK_DELIVERY_DEAD = 1 };
size_t ak_delivery_row(uint8_t *out, size_t cap, uint8_t state, uint32_t attempts,
                       int64_t next_at_ms, const char *sink_type);
size_t ak_delivery_row_ex(uint8_t *out, size_t cap, uint8_t state, uint32_t attempts, int64_t next_at_ms,
                          const char *sink_type, size_t type_len, const uint8_t *replay_id /* 16 or NULL */);
typedef struct ak_delivery_row {
  uint8_t state;
  uint32_t attempts;
  int64_t next_at_ms;
  const char *sink_type; /* points into the value, not NUL-terminated */
  size_t sink_type_len;
  bool has_replay;
  uint8_t replay_id[16];
} ak_delivery_row_t;
int ak_delivery_row_decode(const uint8_t *v, size_t len, ak_delivery_row_t *r);

/* due value v1 (what the scheduler needs without reading the delivery row):
 * u8 version=1, u32 attempts made, str8 sink type, then optionally 16 bytes replay id. */
#define AK_DUE_VALUE_MAX (1 + 4 + 1 + 255 + 16)
size_t ak_due_value(uint8_t *out, size_t cap, uint32_t attempts, const char *sink_type, size_t type_len,
                    const uint8_t *replay_id /* 16 or NULL */);
typedef struct ak_due_value {
  uint32_t attempts;
  const char *sink_type;
  size_t sink_type_len;
  bool has_replay;
  uint8_t replay_id[16];
} ak_due_value_t;
/* An empty value (written before this format) decodes as attempts 0, no type. */
int ak_due_value_decode(const uint8_t *v, size_t len, ak_due_value_t *d);

/* dead entry v1, the value of a 'x' key: everything GET /v1/dlq lists, so a listing
 * never reads hooks. u8 version=1, 16 id, u64 received_at_ms, u32 attempts,
 * str8 sink type, str8 source, str8 tenant, str16 reason. */
typedef struct ak_dead_entry {
  uint8_t id[16];
  int64_t received_at_ms;
  uint32_t attempts;
  const char *sink_type;
  size_t sink_type_len;
  const char *source;
  size_t source_len;
  const char *tenant;
  size_t tenant_len;
  const char *reason;
  size_t reason_len;
} ak_dead_entry_t;
/* Bytes written, or 0 when it does not fit (lengths above 255 / 65535 are cut). */
size_t ak_dead_entry_encode(uint8_t *out, size_t cap, const ak_dead_entry_t *e);
int ak_dead_entry_decode(const uint8_t *v, size_t len, ak_dead_entry_t *e);

/* quarantine summary value v1: u8 version, u8 reason (ak_verify_reason_t), u64 size (body
 * bytes counted on the pen), str16 source_id, str16 tenant_id. The source is kept by id:
 * a source index is not stable across config changes. */
typedef struct ak_pen_summary {
  uint8_t reason;
  uint64_t size;
  const char *source;
  size_t source_len;
  const char *tenant;
  size_t tenant_len;
} ak_pen_summary_t;
/* Bytes written into out (cap >= 14 + lengths), or 0 when it does not fit. */
size_t ak_pen_summary_encode(uint8_t *out, size_t cap, const ak_pen_summary_t *s);
/* Points into v. 0, or -1 when damaged. */
int ak_pen_summary_decode(const uint8_t *v, size_t len, ak_pen_summary_t *s);

#endif
