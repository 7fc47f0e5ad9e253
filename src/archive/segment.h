/* Archive segments (docs/storage.md, "The archive"): the codec of the two immutable
 * objects the compactor writes per segment, and their keys. Owns bytes only: never reads
 * the store or a blob store, never allocates past what one object needs.
 *
 * A segment object (.seg): the magic "AKSEG\0\0\1" (8 bytes; the last byte is the format
 * version), then one frame per hook in seq order:
 *     u32 payload length | u32 crc32c(payload) | payload
 * where the payload is the hook's stored record (core/envelope.h) byte for byte. All
 * integers are big-endian.
 *
 * An index object (.idx): the magic "AKIDX\0\0\1", then
 *     u64 first_seq | u64 last_seq | u32 count | u64 segment size in bytes
 * then count entries of AK_SEG_ENTRY_LEN bytes, sorted by id (bytewise, no two equal):
 *     id[16] | u64 seq | u64 frame offset in the segment | u32 frame length (header
 *     included) | i64 received_at_ms
 * then u32 crc32c of every byte before it.
 *
 * Keys (relative to the archive scope, "<storage.key_prefix>archive/"):
 *     v1/dt=<yyyy-mm-dd>/<node>/seg-<first_seq:020>-<last_seq:020>.seg   (and .idx)
 *     v1/dt=<yyyy-mm-dd>/<node>/_manifest.json
 * the day (UTC) of the segment's oldest hook; node is [A-Za-z0-9._-]{1,64}. */
#ifndef AK_ARCHIVE_SEGMENT_H
#define AK_ARCHIVE_SEGMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AK_SEG_MAGIC "AKSEG\0\0\1"
#define AK_SEG_IDX_MAGIC "AKIDX\0\0\1"
#define AK_SEG_MAGIC_LEN 8
#define AK_SEG_FRAME_HDR 8
#define AK_SEG_IDX_HDR (AK_SEG_MAGIC_LEN + 8 + 8 + 4 + 8)
#define AK_SEG_ENTRY_LEN (16 + 8 + 8 + 4 + 8)
#define AK_SEG_KEY_MAX 160
#define AK_SEG_NODE_MAX 64

enum {
  AK_SEG_OK = 0,
  AK_SEG_MALFORMED = -1, /* not this format, truncated, a length or count that does not fit */
  AK_SEG_CRC = -2,       /* well-formed but a checksum does not match */
  AK_SEG_NOMEM = -3,
};

/* ------------------------------------------------------------------ encoding ---- */

typedef struct ak_seg_writer ak_seg_writer_t;

ak_seg_writer_t *ak_seg_writer_new(void);
/* Appends one hook's stored record (its id, seq and received_at are read from it; seqs
 * must increase). AK_SEG_MALFORMED when the record does not decode, AK_SEG_NOMEM. */
int ak_seg_writer_add(ak_seg_writer_t *w, const uint8_t *rec, size_t len);
size_t ak_seg_writer_count(const ak_seg_writer_t *w);
size_t ak_seg_writer_bytes(const ak_seg_writer_t *w); /* the segment's size so far */
uint64_t ak_seg_writer_first_seq(const ak_seg_writer_t *w);
uint64_t ak_seg_writer_last_seq(const ak_seg_writer_t *w);
int64_t ak_seg_writer_min_received(const ak_seg_writer_t *w);
int64_t ak_seg_writer_max_received(const ak_seg_writer_t *w);
/* The smallest and largest id added (bytewise). */
void ak_seg_writer_id_range(const ak_seg_writer_t *w, uint8_t min_id[16], uint8_t max_id[16]);
/* The two objects of what was added (at least one hook): *seg and *idx point into the
 * writer (valid until reset or free). 0, AK_SEG_NOMEM, or AK_SEG_MALFORMED when nothing
 * was added or two hooks share an id (the index could not be read back). */
int ak_seg_writer_finish(ak_seg_writer_t *w, const uint8_t **seg, size_t *seg_len, const uint8_t **idx,
                         size_t *idx_len);
/* Empties it for the next segment (keeps its memory). */
void ak_seg_writer_reset(ak_seg_writer_t *w);
void ak_seg_writer_free(ak_seg_writer_t *w);

/* ------------------------------------------------------------------ decoding ---- */

/* The frame at off in a segment (or, with off 0, in a ranged read of one frame: buf then
 * starts at the frame's offset from the index). payload points into buf. */
int ak_seg_frame(const uint8_t *buf, size_t len, size_t off, const uint8_t **payload, size_t *plen,
                 size_t *frame_len);
/* Walks a whole segment: checks the magic, that it holds at least one frame, and every
 * frame (a damaged one anywhere means fn is never called), then calls fn for every frame
 * in order (payload, its offset); fn returning nonzero stops the walk (answered
 * AK_SEG_OK). A segment cut at a frame boundary still walks: check len against the
 * index's seg_bytes when it matters. */
int ak_seg_walk(const uint8_t *seg, size_t len,
                int (*fn)(void *ctx, const uint8_t *payload, size_t plen, uint64_t off), void *ctx);

typedef struct ak_seg_entry {
  uint8_t id[16];
  uint64_t seq;
  uint64_t offset;
  uint32_t length;
  int64_t received_at_ms;
} ak_seg_entry_t;

typedef struct ak_seg_index {
  uint64_t first_seq, last_seq, seg_bytes;
  uint32_t count;
  const uint8_t *entries; /* points into the parsed buffer */
} ak_seg_index_t;

/* Checks the magic, the crc, that count entries (at least one) fit exactly, that ids are
 * strictly increasing, first <= last, seqs within [first, last] and frames (header
 * included, after the magic) within the segment size. */
int ak_seg_index_parse(const uint8_t *buf, size_t len, ak_seg_index_t *ix);
void ak_seg_index_entry(const ak_seg_index_t *ix, uint32_t i, ak_seg_entry_t *e);
/* Binary search by id: true and *e when present. */
bool ak_seg_index_find(const ak_seg_index_t *ix, const uint8_t id[16], ak_seg_entry_t *e);

/* ---------------------------------------------------------------------- keys ---- */

/* Is node a valid node name ([A-Za-z0-9._-]{1,64}, not "." or "..")? */
bool ak_seg_node_ok(const char *node);
/* The key of a segment (ext ".seg" or ".idx") or, with first = last = 0 and ext
 * "_manifest.json", of the node-day's manifest. day_ms: any ms of the UTC day. Returns the
 * length, or 0 when it does not fit or node is not valid. */
size_t ak_seg_key(char *out, size_t cap, int64_t day_ms, const char *node, uint64_t first, uint64_t last,
                  const char *ext);
/* The key's parts: 0, or -1 when it is not a segment or index key of this layout.
 * day: "yyyy-mm-dd" (11 bytes with the NUL); node: up to AK_SEG_NODE_MAX + 1. */
int ak_seg_key_parse(const char *key, char day[11], char node[AK_SEG_NODE_MAX + 1], uint64_t *first,
                     uint64_t *last, bool *is_index);
/* The day prefix "v1/dt=<yyyy-mm-dd>/" of day_ms. */
size_t ak_seg_day_prefix(char *out, size_t cap, int64_t day_ms);

#endif
