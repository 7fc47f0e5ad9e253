/* The gcs blob store (blob/blob.h): not built yet; a helper replaces this file. */
#include <stdio.h>
#include "blob/blob.h"

ak_blob_t *ak_blob_gcs_new(const struct json_t *cfg, struct ak_httpc *httpc, char *err, size_t errlen) {
  (void)cfg;
  (void)httpc;
  snprintf(err, errlen, "gcs blob store: not built yet");
  return NULL;
}
