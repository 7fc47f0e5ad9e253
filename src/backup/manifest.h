/* A backup's manifest (docs/backup.md): what one backup holds, file by file, signed with
 * backup.signing_key (HMAC-SHA256). Owns the text format and its checks, nothing else:
 * never touches a store or a file. The text is the JSON object
 *   {"version":1,"id":ULID,"created_at_ms":N,"store_id":HEX32,"writer":HEX32,
 *    "files":[{"name","kind":"shared"|"private","key","size","sha256"}...],
 *    "signature":"hmac-sha256:HEX64"}
 * whose signature covers the same bytes with the signature member left out (the text up
 * to it, then "}"), so a reader checks the bytes it read and never re-serialises. */
#ifndef AK_BACKUP_MANIFEST_H
#define AK_BACKUP_MANIFEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AK_BACKUP_MANIFEST_VERSION 1
#define AK_BACKUP_ID_LEN 26      /* a ULID, Crockford base32 */
#define AK_BACKUP_NAME_MAX 128   /* a RocksDB file name */
#define AK_BACKUP_KEY_MAX 192    /* a file's key under the backup scope */

typedef struct ak_backup_file {
  char name[AK_BACKUP_NAME_MAX];
  bool shared;                   /* .sst/.blob: immutable, one object for every backup */
  char key[AK_BACKUP_KEY_MAX];   /* ak_backup_file_key's */
  uint64_t size;
  char sha256[65];               /* lowercase hex */
} ak_backup_file_t;

typedef struct ak_backup_manifest {
  int version;
  char id[AK_BACKUP_ID_LEN + 1];
  int64_t created_at_ms;
  char store_id[33];             /* the store's m:store_id (hex) */
  char writer[33];               /* the writing process's nonce (hex) */
  ak_backup_file_t *files;
  size_t nfiles, capfiles;
} ak_backup_manifest_t;

/* Is name a bare RocksDB file name ([A-Za-z0-9._-], not starting with '.')? */
bool ak_backup_name_ok(const char *name);
/* Shared (immutable: .sst and .blob) or private to one backup (everything else). */
bool ak_backup_name_shared(const char *name);
/* The key of a file under the backup scope: "sst/<sha256[0:16]>-<name>" for a shared one
 * (content-addressed: two files of one name never share a key), "<id>/<name>" else. */
void ak_backup_file_key(const char *id, const char *name, bool shared, const char *sha256, char out[AK_BACKUP_KEY_MAX]);

/* Append a file (name checked, key derived). 0, or -1 (bad name, out of memory). */
int ak_backup_manifest_add(ak_backup_manifest_t *m, const char *name, uint64_t size, const char *sha256);
void ak_backup_manifest_clear(ak_backup_manifest_t *m);
/* The signed text (malloc'd, *len set), or NULL (out of memory). */
char *ak_backup_manifest_encode(const ak_backup_manifest_t *m, const uint8_t *key, size_t keylen, size_t *len);
/* Check and read a manifest's text: the signature under key first, then every field
 * (version, a ULID id, hex ids, bare file names, derived keys, sizes, sha256 values, no
 * name twice, CURRENT present). 0, or -1 with why ("signature does not match", "files[3].sha256
 * is not 64 hex digits"...) and *out cleared. */
int ak_backup_manifest_decode(const char *text, size_t len, const uint8_t *key, size_t keylen,
                              ak_backup_manifest_t *out, char *why, size_t whylen);

/* LATEST: which backup is the newest complete one, and who wrote it (owner guard). */
typedef struct ak_backup_latest {
  char id[AK_BACKUP_ID_LEN + 1];
  char store_id[33];
  char writer[33];
  int64_t created_at_ms;
} ak_backup_latest_t;
char *ak_backup_latest_encode(const ak_backup_latest_t *l, size_t *len);
int ak_backup_latest_decode(const char *text, size_t len, ak_backup_latest_t *out, char *why, size_t whylen);

/* A new backup id: a ULID of ms and 80 random bits. */
void ak_backup_new_id(int64_t ms, char out[AK_BACKUP_ID_LEN + 1]);
/* Is s a backup id (26 Crockford base32 characters of a ULID)? */
bool ak_backup_id_ok(const char *s, size_t n);

#endif
