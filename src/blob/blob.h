/* Blob stores (DESIGN.md §5, issue 21): where archive segments, claim packs and backups
 * go. One interface (put, get, get_range, head, list with pagination, delete) behind one
 * vtable per type, chosen by a store mapping's type in blob/registry.c (LocalFS, S3, GCS);
 * a put from a file and a streamed read for objects too large for memory (backups).
 * Calls are synchronous: their callers (the compactor, backups) run on threads of
 * their own. Owns key checking and the scope prefix (segments, claims, backup: a scope is
 * a key prefix the adapters never see); never knows what the bytes mean.
 *
 * Keys are '/'-separated names of printable ASCII without "." or ".." segments, empty
 * segments, a leading '/' or a backslash, at most AK_BLOB_KEY_MAX bytes: the same key
 * means the same object on every adapter. */
#ifndef AK_BLOB_BLOB_H
#define AK_BLOB_BLOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AK_BLOB_KEY_MAX 1024

enum {
  AK_BLOB_OK = 0,
  AK_BLOB_NOT_FOUND = 1, /* get, get_range, head: no such object */
  AK_BLOB_ERROR = -1,    /* err says what (secret-free) */
};

typedef struct ak_blob_list {
  char **keys;   /* up to max keys in byte order, each the full key (scope included) */
  size_t n;
  char *next;    /* the continuation: pass as `after` for the next page; NULL at the end */
} ak_blob_list_t;

typedef struct ak_blob_vtable {
  const char *type;
  /* Writes the whole object, replacing one of the same key; it is durable when put
   * answers OK (a crash leaves the old object or the new one, never a part). */
  int (*put)(void *self, const char *key, const void *data, size_t len, char *err, size_t errlen);
  /* The same for the bytes [0, size) of the file fd (borrowed, read with pread, so its
   * offset is left alone), streamed: never the whole file in memory. sha256_hex (64
   * lowercase hex, checked by blob.c) is the caller's hash of those bytes (S3 sends it as
   * the payload hash). A file shorter than size is an error and no object. */
  int (*put_file)(void *self, const char *key, int fd, uint64_t size, const char *sha256_hex, char *err,
                  size_t errlen);
  /* The len bytes from off (fewer at the end of the object; 0 past it). *data is malloc'd. */
  int (*get_range)(void *self, const char *key, uint64_t off, size_t len, uint8_t **data, size_t *got, char *err,
                   size_t errlen);
  int (*head)(void *self, const char *key, uint64_t *size, char *err, size_t errlen);
  /* Keys starting with prefix and greater than after (NULL: from the first), at most max. */
  int (*list)(void *self, const char *prefix, const char *after, size_t max, ak_blob_list_t *out, char *err,
              size_t errlen);
  /* Deleting a key that does not exist is OK. */
  int (*del)(void *self, const char *key, char *err, size_t errlen);
  /* Optional (NULL: the store has no folders): remove the empty folders at and below the
   * key prefix, which deleting their objects left behind (LocalFS). */
  int (*prune)(void *self, const char *prefix, char *err, size_t errlen);
  void (*destroy)(void *self);
} ak_blob_vtable_t;

/* One blob store and one scope on it. */
typedef struct ak_blob {
  const ak_blob_vtable_t *vt;
  void *self;
  char prefix[256]; /* key_prefix + scope + "/" */
  bool owner;       /* destroys self when freed (the first handle; scopes share it) */
  struct ak_blob_metrics *metrics; /* request durations and errors (ak_blob_instrument), or NULL */
} ak_blob_t;

/* A LocalFS store rooted at root (created if missing). NULL with err on failure. */
ak_blob_t *ak_blob_local_new(const char *root, char *err, size_t errlen);

struct json_t;
struct ak_httpc;
/* The remote adapters (blob/s3.c, blob/gcs.c). cfg is the validated s3 or gcs block of a
 * store mapping (core/blobcfg.c's rows: bucket, region, endpoint, credentials...; gcs: bucket,
 * endpoint, auth, token); they speak HTTP through httpc (the node's shared client), which
 * outlives them. NULL with err (secret-free) on failure. */
ak_blob_t *ak_blob_s3_new(const struct json_t *cfg, struct ak_httpc *httpc, char *err, size_t errlen);
ak_blob_t *ak_blob_gcs_new(const struct json_t *cfg, struct ak_httpc *httpc, char *err, size_t errlen);

/* The store a mapping names: {type: local|s3|gcs, root, s3: {...}, gcs: {...}} (the
 * storage section, or a claim/backup store). type local uses root, else default_root. */
ak_blob_t *ak_blob_open(const struct json_t *store, const char *default_root, struct ak_httpc *httpc, char *err,
                        size_t errlen);
/* Count this store's requests (ankusa_blob_request_duration_seconds{store, op} and
 * ankusa_blob_errors_total{store, op}); scopes made after it count too. Before any use. */
struct ak_metrics;
void ak_blob_instrument(ak_blob_t *b, struct ak_metrics *m, const char *instance);

/* "local", "s3", "gcs": the type of the store a handle is on. */
const char *ak_blob_type(const ak_blob_t *b);
/* A handle on the same store whose keys live under key_prefix + scope + "/" (key_prefix
 * may be "" or end with '/'). The store outlives it: free scopes before the store. */
ak_blob_t *ak_blob_scope(const ak_blob_t *b, const char *key_prefix, const char *scope);
void ak_blob_free(ak_blob_t *b);

/* Is key a valid key (see above)? */
bool ak_blob_key_ok(const char *key);

/* The operations, keys relative to the handle's scope. */
int ak_blob_put(ak_blob_t *b, const char *key, const void *data, size_t len, char *err, size_t errlen);
/* A put of the bytes [0, size) of the regular file fd, streamed from disk (backups: files
 * of GBs). sha256_hex: their SHA-256 as 64 lowercase hex digits, computed by the caller
 * beforehand. The caller keeps fd open, and the file unchanged, until it returns. */
int ak_blob_put_file(ak_blob_t *b, const char *key, int fd, uint64_t size, const char *sha256_hex, char *err,
                     size_t errlen);
int ak_blob_get(ak_blob_t *b, const char *key, uint8_t **data, size_t *len, char *err, size_t errlen);
int ak_blob_get_range(ak_blob_t *b, const char *key, uint64_t off, size_t len, uint8_t **data, size_t *got,
                      char *err, size_t errlen);
int ak_blob_head(ak_blob_t *b, const char *key, uint64_t *size, char *err, size_t errlen);
#define AK_BLOB_STREAM_CHUNK (4u << 20) /* bytes ak_blob_stream reads per get_range */
/* Reads the whole object: its size (head), then AK_BLOB_STREAM_CHUNK ranges up to it,
 * each handed to cb in order: memory is one chunk, whatever the object's size. A range
 * that comes back short (the object shrank) is an error. A cb answering non-zero stops it
 * (AK_BLOB_ERROR, err "stopped"). *total (may be NULL): the bytes read. AK_BLOB_NOT_FOUND
 * when there is no such object (before any cb). Not a snapshot: an object replaced
 * meanwhile may mix its versions (backups never replace one). */
int ak_blob_stream(ak_blob_t *b, const char *key, int (*cb)(void *ctx, const uint8_t *p, size_t n), void *ctx,
                   uint64_t *total, char *err, size_t errlen);
/* Keys come back relative to the scope; next too. */
int ak_blob_list(ak_blob_t *b, const char *prefix, const char *after, size_t max, ak_blob_list_t *out, char *err,
                 size_t errlen);
void ak_blob_list_clear(ak_blob_list_t *l);
int ak_blob_delete(ak_blob_t *b, const char *key, char *err, size_t errlen);
/* The empty folders at and below prefix (a key prefix without its last '/'), for a caller
 * that deleted every object there and writes none there meanwhile (a tenant erase); OK on
 * a store without folders. */
int ak_blob_prune(ak_blob_t *b, const char *prefix, char *err, size_t errlen);

#endif
