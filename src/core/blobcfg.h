/* Config rows shared by every blob store mapping: the storage section (archive/),
 * claim_check.store and backup.store. See core/blobcfg.c. */
#ifndef AK_CORE_BLOBCFG_H
#define AK_CORE_BLOBCFG_H

#include <stdbool.h>
#include <jansson.h>
#include "core/module.h"
#include "core/options.h"

/* storage.s3 and storage.gcs (they read ANKUSA_S3_* / ANKUSA_GCS_BUCKET) */
extern const ak_opt_t ak_blobcfg_storage_s3_rows[];
extern const ak_opt_t ak_blobcfg_storage_gcs_rows[];
/* a claim or backup store: {type, root, s3, gcs} (no environment) */
extern const ak_opt_t ak_blobcfg_store_rows[];
/* The rules of a store mapping at path: its type's block names its bucket (and region);
 * a gcs token goes with auth token; root is for local. */
void ak_blobcfg_check(ak_check_t *c, const char *path, const json_t *st);
/* "" or one or more "name/" parts, name from [A-Za-z0-9._-]. */
bool ak_blobcfg_key_prefix_ok(const char *p);

#endif
