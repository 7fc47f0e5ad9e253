/* AWS credentials and the synchronous AWS exchange (blob/s3.c today, SQS later). Owns the
 * chain that finds credentials, in the order the original does: the config block (access
 * key id + secret [+ session token]), then the environment (AWS_ACCESS_KEY_ID,
 * AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), then a web identity (AWS_WEB_IDENTITY_TOKEN_FILE
 * + AWS_ROLE_ARN [+ AWS_ROLE_SESSION_NAME] through STS AssumeRoleWithWebIdentity, endpoint
 * AWS_ENDPOINT_URL_STS or https://sts.REGION.amazonaws.com), then IMDSv2 (endpoint
 * AWS_EC2_METADATA_SERVICE_ENDPOINT or http://169.254.169.254); and their cache (until 5
 * minutes before they expire). Also owns the one synchronous exchange with retries that
 * every AWS caller uses (a submit to httpc per attempt, so libcurl signs each anew).
 * Never puts a secret, a session token, a signature or a web identity token into an error
 * string or a log line, and never signs by hand (libcurl's CURLOPT_AWS_SIGV4 does). */
#ifndef AK_BLOB_AWSCREDS_H
#define AK_BLOB_AWSCREDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "net/httpc.h"

typedef struct ak_awscreds ak_awscreds_t;

/* One set of credentials, copied out to a caller (who wipes it with ak_awscreds_wipe). */
typedef struct ak_awscreds_val {
  char key_id[128];
  char secret[256];
  char token[4096]; /* "" = none */
  int64_t expires;  /* unix seconds; 0 = never */
} ak_awscreds_val_t;

/* The chain for one region. key_id and secret (both, or neither is used) and token come
 * from the config block and may be NULL; httpc outlives the chain. NULL with err on
 * failure (out of memory only: nothing is looked up before the first get). */
ak_awscreds_t *ak_awscreds_new(const char *key_id, const char *secret, const char *token, const char *region,
                               ak_httpc_t *httpc, char *err, size_t errlen);
void ak_awscreds_free(ak_awscreds_t *c);

/* Credentials good for at least the next 5 minutes (or never expiring), from the cache or
 * found anew. 0, or -1 with err (secret-free) when no source has any. Any thread. */
int ak_awscreds_get(ak_awscreds_t *c, ak_awscreds_val_t *out, char *err, size_t errlen);
void ak_awscreds_wipe(ak_awscreds_val_t *v);

/* ---- the synchronous exchange ---------------------------------------------------------- */

typedef struct ak_awscreds_resp {
  long status;       /* the last attempt's HTTP status */
  uint8_t *body;     /* malloc'd, body_len bytes and a NUL after them */
  size_t body_len;
  bool truncated;    /* more than the request's max_response_bytes came */
  char headers[AK_HTTPC_MAX_WANT][AK_HTTPC_VALUE_MAX]; /* the wanted headers' values */
  bool have[AK_HTTPC_MAX_WANT];
  unsigned attempts;
} ak_awscreds_resp_t;

/* Sends req (keep_body is forced) and waits for the answer, retrying up to retries times,
 * 200 ms then 1 s apart, on a transport failure, a timeout or a 408/429/500/502/503/504.
 * 0: a response (possibly one of those statuses, after the last attempt) in resp, which
 * ak_awscreds_resp_clear frees. -1: no response; err says "OP: why (after N attempts)". */
int ak_awscreds_http(ak_httpc_t *hc, const ak_httpc_req_t *req, unsigned retries, const char *op,
                     ak_awscreds_resp_t *resp, char *err, size_t errlen);
void ak_awscreds_resp_clear(ak_awscreds_resp_t *r);

/* The text of the first <tag>...</tag> in xml, entities decoded, into out (cap bytes).
 * false when absent, too long or malformed. */
bool ak_awscreds_xml_text(const char *xml, size_t len, const char *tag, char *out, size_t cap);
/* Decodes the XML text [s, s+n) (&amp; &lt; &gt; &quot; &apos; &#N; &#xN;) into out. */
bool ak_awscreds_xml_decode(const char *s, size_t n, char *out, size_t cap);
/* RFC 3986 percent-encoding of s (A-Z a-z 0-9 - . _ ~ kept, and '/' when keep_slash)
 * appended at out (cap bytes); false when it does not fit. */
bool ak_awscreds_uri_encode(const char *s, bool keep_slash, char *out, size_t cap);

#endif
