/* The archive compactor (docs/storage.md, "The archive"): the storage role's thread that
 * moves committed hooks, in seq order, into immutable segments on the blob store
 * (storage.type), catalogues them in the store and advances its cursor, so that reclaim
 * (the dispatcher's, bounded by this cursor) can delete what is archived and delivered.
 * It also deletes segments past archive.retention_days and catalogue rows past
 * storage.catalogue_retention_days, and at boot reconciles what a kill left between a
 * PUT and its catalogue row. Owns the cursor m:acursor, the catalogue rows and the
 * objects under <key_prefix>archive/; never deletes a hook and never touches delivery
 * state. */
#ifndef AK_ARCHIVE_COMPACTOR_H
#define AK_ARCHIVE_COMPACTOR_H

#include <stdint.h>
#include "blob/blob.h"
#include "core/module.h"

struct ak_instance;
struct ak_config;
typedef struct ak_archive ak_archive_t;

/* The storage section (the original's keys) and the archive section (the seed's). */
typedef struct ak_storage_cfg {
  int type;                       /* index in local|s3|gcs */
  int64_t roll_bytes, roll_ms, interval_ms;
  const char *key_prefix;
  int64_t catalogue_retention_days; /* 0: rows kept for ever */
} ak_storage_cfg_t;

typedef struct ak_archive_cfg {
  int64_t retention_days;         /* 0: off */
} ak_archive_cfg_t;

const ak_storage_cfg_t *ak_storage_cfg(const struct ak_config *cfg);
const ak_archive_cfg_t *ak_archive_cfg(const struct ak_config *cfg);

/* The store's blob store as the config names it (storage.*), for reads outside the
 * compactor (ankusa inspect on a stopped node): the unscoped handle catalogued keys are
 * read through. NULL with err. */
ak_blob_t *ak_archive_open_blob(const struct ak_config *cfg, const char *instance, struct ak_httpc *httpc,
                                char *err, size_t errlen);

/* The running compactor's blob handle (catalogued keys), or NULL without the storage
 * role; retention in ms (0: off). For GET /v1/hooks/{id} and replays. */
ak_blob_t *ak_archive_blob(struct ak_instance *inst);
int64_t ak_archive_retention_ms(struct ak_instance *inst);

extern const ak_module_t ak_mod_storage;
extern const ak_module_t ak_mod_archive;

#endif
