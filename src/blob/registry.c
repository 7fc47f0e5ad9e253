/* The blob store types (blob/blob.h): a store mapping's `type` to its adapter. Adding a
 * store type is its file plus one branch here. Never keeps a handle. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include "blob/blob.h"

ak_blob_t *ak_blob_open(const json_t *store, const char *default_root, struct ak_httpc *httpc, char *err,
                        size_t errlen) {
  const char *type = json_string_value(json_object_get(store, "type"));
  if (!type || !strcmp(type, "local")) {
    const char *root = json_string_value(json_object_get(store, "root"));
    return ak_blob_local_new(root ? root : default_root, err, errlen);
  }
  if (!httpc) {
    snprintf(err, errlen, "%s blob store: no HTTP client", type);
    return NULL;
  }
  if (!strcmp(type, "s3")) return ak_blob_s3_new(json_object_get(store, "s3"), httpc, err, errlen);
  if (!strcmp(type, "gcs")) return ak_blob_gcs_new(json_object_get(store, "gcs"), httpc, err, errlen);
  snprintf(err, errlen, "unknown blob store type %s", type);
  return NULL;
}
