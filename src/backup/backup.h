/* Store backups (docs/backup.md, issue 24): a RocksDB checkpoint uploaded to one or two
 * blob stores under <storage.key_prefix>backup/, described by a signed manifest
 * (backup/manifest.h), named by LATEST once complete; read back (verify), pruned to the
 * newest `keep`, and restored into an empty store directory. The operations only: the
 * module (backup/module.c) runs them on its thread and the CLI (main.c) runs them by
 * hand. Owns the keys under backup/; never opens the store it restores into and never
 * deletes a file it did not write.
 *
 * Key layout under the scope:
 *   sst/<sha256[0:16]>-<name>  an immutable file (.sst, .blob), shared by every backup
 *   <id>/<name>                a mutable file (MANIFEST-*, CURRENT, OPTIONS-*, *.log)
 *   <id>/manifest.json         the signed manifest
 *   LATEST                     {id, store_id, writer, created_at_ms}: the newest complete */
#ifndef AK_BACKUP_BACKUP_H
#define AK_BACKUP_BACKUP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "backup/manifest.h"
#include "blob/blob.h"

struct ak_httpc;
struct ak_store;
typedef struct ak_backup ak_backup_t;

#define AK_BACKUP_MAX_TARGETS 2
#define AK_BACKUP_MARKER "RESTORE-IN-PROGRESS"

typedef struct ak_backup_opts {
  const uint8_t *key;          /* backup.signing_key */
  size_t keylen;
  int64_t keep;                /* complete backups kept per target */
  const json_t *primary;       /* backup.store, or the storage section when unset */
  const json_t *secondary;     /* backup.secondary, or NULL */
  const char *default_root;    /* a local store's root when its mapping names none */
  const char *key_prefix;      /* storage.key_prefix ("" or "a/b/") */
  struct ak_httpc *httpc;      /* for s3/gcs stores; outlives the handle */
} ak_backup_opts_t;

/* Opens the targets (no request is made). NULL with err. */
ak_backup_t *ak_backup_new(const ak_backup_opts_t *o, char *err, size_t errlen);
void ak_backup_free(ak_backup_t *b);
size_t ak_backup_ntargets(const ak_backup_t *b);
/* "primary" / "secondary"; and where it is ("s3", "local /path"...: secret-free). */
const char *ak_backup_target_name(const ak_backup_t *b, size_t i);
const char *ak_backup_target_where(const ak_backup_t *b, size_t i);
/* The targets' blob handles, for ak_blob_instrument. */
ak_blob_t *ak_backup_target_store(ak_backup_t *b, size_t i);
/* This process's writer nonce (hex). */
const char *ak_backup_writer(const ak_backup_t *b);

/* The store's id (m:store_id, 32 hex), made and written synced the first time. 0, or -1. */
int ak_backup_store_id(struct ak_store *st, char out[33], char *err, size_t errlen);

enum {
  AK_BACKUP_OK = 0,
  AK_BACKUP_FAILED = 1,  /* a step failed: why says which and on what key */
  AK_BACKUP_FOREIGN = 2, /* LATEST was written by another store: nothing uploaded or purged */
  AK_BACKUP_SHARED = 3,  /* another writer of this store wrote LATEST after us: nothing done */
};
extern const char *const ak_backup_result_names[4]; /* ok, failed, foreign_backup, prefix_shared */

typedef struct ak_backup_result {
  int rc;                      /* AK_BACKUP_* */
  char stage[16];              /* where it failed: guard, upload, manifest, latest, purge */
  char why[512];
  uint64_t bytes;              /* bytes uploaded */
  size_t uploaded, skipped;    /* files */
  bool purge_skipped;          /* the purge could not read what it needed: nothing deleted */
} ak_backup_result_t;

/* One backup: a checkpoint of st in ckpt_dir (removed before and after), uploaded to each
 * target in turn (files, manifest, then LATEST), then each target's purge. res[i] per
 * target; *id the backup's id. 0 when every target took it, -1 when the checkpoint
 * failed (why), 1 when a target did not (see res). */
int ak_backup_run(ak_backup_t *b, struct ak_store *st, const char *store_id, const char *ckpt_dir,
                  char id[AK_BACKUP_ID_LEN + 1], ak_backup_result_t res[AK_BACKUP_MAX_TARGETS], char *why,
                  size_t whylen);

/* Read back backup id (NULL: the one LATEST names) on target i: the manifest's signature,
 * then every file's size and sha256. 0 (m filled when not NULL), AK_BACKUP_NOT_THERE when
 * the target has no LATEST, or -1 with why naming the key. With repair, a shared object
 * whose bytes differ from the signed manifest is deleted (it is damaged for every backup
 * that lists it), so the next run uploads it again while the store still has the file. */
#define AK_BACKUP_NOT_THERE 2
int ak_backup_verify(ak_backup_t *b, size_t i, const char *id, bool repair, ak_backup_manifest_t *m, char *why,
                     size_t whylen);

/* The backups on target i, newest first: ids with a manifest (complete) or without one. */
typedef struct ak_backup_entry {
  char id[AK_BACKUP_ID_LEN + 1];
  bool complete, latest;
} ak_backup_entry_t;
int ak_backup_list(ak_backup_t *b, size_t i, ak_backup_entry_t **out, size_t *n, char *why, size_t whylen);

/* Restore into dir (an empty directory that exists): the backup id (NULL: each target's
 * LATEST), from the primary, else from the secondary; each file downloaded, checked
 * (size, sha256) and written durably, CURRENT last, the directory synced. Answers
 * AK_RESTORE_DONE (from names the target, m the manifest used), AK_RESTORE_EMPTY (every
 * target readable and without LATEST: a new node), or AK_RESTORE_FAILED with why (each
 * target's reason). A failed attempt removes the files it wrote. */
enum { AK_RESTORE_DONE = 0, AK_RESTORE_EMPTY = 1, AK_RESTORE_FAILED = -1 };
int ak_backup_restore(ak_backup_t *b, const char *dir, const char *id, const char **from, ak_backup_manifest_t *m,
                      char *why, size_t whylen);

/* The files RocksDB keeps data in (CURRENT, MANIFEST-*, *.sst, *.blob, *.log), the marker apart. */
bool ak_backup_is_store_file(const char *name);

#endif
