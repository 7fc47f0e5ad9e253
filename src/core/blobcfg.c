/* The config rows of a blob store mapping (core/blobcfg.h): the storage section's s3 and
 * gcs blocks, the store mapping of claim_check.store and backup.store, the rules across
 * their keys, and the key prefix grammar. Rows and rules only: never opens a store. */
#include <string.h>
#include "core/blobcfg.h"
#include "core/config.h"

/* storage.s3 and the s3 block of a claim or backup store. Only the storage section's
 * block reads the environment (as the original does). */
#define S3_ROWS(bucket_env, region_env, endpoint_env) \
  {.key = "bucket", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN, \
   .env = bucket_env, .doc = "bucket (required when type is s3)"}, \
  {.key = "region", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN, \
   .env = region_env, .doc = "region (required when type is s3)"}, \
  {.key = "endpoint", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN, \
   .env = endpoint_env, .doc = "endpoint URL (default: AWS's for the region)"}, \
  {.key = "access_key_id", .type = AK_OPT_STRING, .flags = AK_OPTF_NULLABLE | AK_OPTF_SECRET, \
   .doc = "static credential (else AWS_* env, IRSA, then IMDSv2)"}, \
  {.key = "secret_access_key", .type = AK_OPT_STRING, .flags = AK_OPTF_NULLABLE | AK_OPTF_SECRET, \
   .doc = "static credential"}, \
  {.key = "session_token", .type = AK_OPT_STRING, .flags = AK_OPTF_NULLABLE | AK_OPTF_SECRET, \
   .doc = "temporary credentials only"}, \
  {.key = "timeout_ms", .type = AK_OPT_INT, .def = "10000", .min = 1, .max = 600000, \
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX, .doc = "one request's budget (each attempt)"}, \
  {.key = "retries", .type = AK_OPT_INT, .def = "2", .min = 0, .max = 10, .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX, \
   .doc = "attempts after the first on a transport error, 408, 429 or 5xx (200 ms, then 1 s apart)"}, \
  {0}

#define GCS_ROWS(bucket_env) \
  {.key = "bucket", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN, \
   .env = bucket_env, .doc = "bucket (required when type is gcs)"}, \
  {.key = "endpoint", .type = AK_OPT_STRING, .def = "https://storage.googleapis.com", .min = 1, \
   .flags = AK_OPTF_HAS_MIN, .doc = "API endpoint"}, \
  {.key = "auth", .type = AK_OPT_ENUM, .def = "metadata", .enum_vals = "metadata|token|none", \
   .doc = "metadata: the instance metadata server; token: the token below; none: no credential"}, \
  {.key = "token", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_SECRET | AK_OPTF_HAS_MIN, \
   .doc = "bearer token, required iff auth is token"}, \
  {.key = "timeout_ms", .type = AK_OPT_INT, .def = "10000", .min = 1, .max = 600000, \
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX, .doc = "one request's budget (each attempt)"}, \
  {.key = "retries", .type = AK_OPT_INT, .def = "2", .min = 0, .max = 10, .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX, \
   .doc = "attempts after the first on a transport error, 408, 429 or 5xx (200 ms, then 1 s apart)"}, \
  {0}

const ak_opt_t ak_blobcfg_storage_s3_rows[] = {S3_ROWS("ANKUSA_S3_BUCKET", "ANKUSA_S3_REGION", "ANKUSA_S3_ENDPOINT")};
const ak_opt_t ak_blobcfg_storage_gcs_rows[] = {GCS_ROWS("ANKUSA_GCS_BUCKET")};
static const ak_opt_t store_s3_rows[] = {S3_ROWS(NULL, NULL, NULL)};
static const ak_opt_t store_gcs_rows[] = {GCS_ROWS(NULL)};

/* claim_check.store, backup.store: unset = the storage bucket. */
const ak_opt_t ak_blobcfg_store_rows[] = {
  {.key = "type", .type = AK_OPT_ENUM, .def = "local", .enum_vals = "local|s3|gcs", .doc = "where the objects live"},
  {.key = "root", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN,
   .doc = "local only: the directory"},
  {.key = "s3", .type = AK_OPT_MAP, .flags = AK_OPTF_NULLABLE, .children = store_s3_rows, .doc = "type s3 only"},
  {.key = "gcs", .type = AK_OPT_MAP, .flags = AK_OPTF_NULLABLE, .children = store_gcs_rows, .doc = "type gcs only"},
  {0},
};

static bool has_text(const json_t *obj, const char *key) { return json_is_string(json_object_get(obj, key)); }

/* The rules of a store mapping (storage, or a claim/backup store) at path: the block of
 * its type names its bucket; a gcs token goes with auth token; root is for local. */
void ak_blobcfg_check(ak_check_t *c, const char *path, const json_t *st) {
  const char *type = json_string_value(json_object_get(st, "type"));
  if (!type) return;
  const json_t *s3 = json_object_get(st, "s3"), *gcs = json_object_get(st, "gcs");
  if (!strcmp(type, "s3")) {
    if (!has_text(s3, "bucket")) ak_check_error(c, "%s.s3.bucket: required when %s.type is s3", path, path);
    if (!has_text(s3, "region")) ak_check_error(c, "%s.s3.region: required when %s.type is s3", path, path);
  }
  if (!strcmp(type, "gcs") && !has_text(gcs, "bucket"))
    ak_check_error(c, "%s.gcs.bucket: required when %s.type is gcs", path, path);
  if (json_is_object(gcs)) {
    const char *auth = json_string_value(json_object_get(gcs, "auth"));
    bool token = has_text(gcs, "token");
    if (auth && !strcmp(auth, "token") && !token)
      ak_check_error(c, "%s.gcs.token: required when %s.gcs.auth is token", path, path);
    if (auth && strcmp(auth, "token") && token)
      ak_check_error(c, "%s.gcs.token: only with %s.gcs.auth token", path, path);
  }
  if (has_text(st, "root") && strcmp(type, "local"))
    ak_check_error(c, "%s.root: only with %s.type local", path, path);
}

/* "" or ("name/")+ with name from [A-Za-z0-9._-]. */
bool ak_blobcfg_key_prefix_ok(const char *p) {
  size_t part = 0;
  for (; *p; p++) {
    char ch = *p;
    if (ch == '/') {
      if (!part) return false;
      part = 0;
    } else if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
               ch == '_' || ch == '-') {
      part++;
    } else {
      return false;
    }
  }
  return part == 0;
}

