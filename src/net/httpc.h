/* The HTTP client every HTTP-speaking part of a node shares (the HTTP sink today; the S3
 * blob store, SQS and Pub/Sub later): submit a request, get one completion. One per
 * process (inst->httpc, opened by ak_mod_httpc), so the number of threads does not grow
 * with the number of sources or sinks. Owns the transport: libcurl, its threads, its
 * connection caches, the bound on requests outstanding, and the address check of every
 * connection a request uses. Never follows a redirect, never retries (its callers own
 * retries), never goes through a proxy (the address check would judge the proxy), never
 * reads more than a request's max_response_bytes, never puts a URL, a header value or a
 * body byte into a completion's `why`, never holds more than a chunk of a body sent from a
 * file, and never knows who calls it (net/ sits below every caller: a caller's policy
 * comes in as a callback).
 *
 * How it runs is private to net/httpc.c and may change without touching a caller. */
#ifndef AK_NET_HTTPC_H
#define AK_NET_HTTPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include "core/module.h"

typedef struct ak_httpc ak_httpc_t;

#define AK_HTTPC_MAX_OUTSTANDING 4096 /* default bound: queued + in flight, whole client */
#define AK_HTTPC_MAX_WANT 4           /* response headers one request can ask for */
#define AK_HTTPC_VALUE_MAX 256        /* bytes kept of such a header's value, NUL included */
#define AK_HTTPC_USER_MAX 32          /* bytes of the caller's own a request carries */

typedef struct ak_httpc_opts {
  const char *name;       /* names its threads ("name", "name-1", ...; at most 13 bytes);
                             NULL = "ak-httpc" */
  unsigned workers;       /* threads; 0 = one per online CPU, at most 4 */
  size_t max_outstanding; /* requests accepted and not answered yet, at most; 0 = the default */
  unsigned max_active;    /* transfers under way at once per thread, the rest wait their turn;
                             0 = 64 */
  unsigned spread_at;     /* requests (queued + under way) the first thread carries before the
                             next one gets any, and so on; beyond that on every thread, the
                             least loaded takes it. 0 = 1 (see DEFAULT_SPREAD in httpc.c) */
} ak_httpc_opts_t;

/* May a request connect to (or send on a kept connection to) sa? Answering false refuses
 * it: the request ends AK_HTTPC_REFUSED and `why` (secret-free) is the completion's why.
 * Runs on one of the client's threads, for every address tried, before the socket for a
 * new connection exists, and before a request goes out on a kept one (a connection opened
 * for another caller may have been judged by another policy, or by none). The answer must
 * depend on ctx and the address only: the client may reuse a "yes" for the same pair. */
typedef bool (*ak_httpc_addr_fn)(void *ctx, const struct sockaddr *sa, char *why, size_t whylen);

/* One request. Everything it points to is copied by submit, except addr_ctx and owner
 * (and body_fd's file, read while the body is sent). */
typedef struct ak_httpc_req {
  const char *method;              /* "POST" (also NULL), "PUT", "PATCH", "GET", "HEAD", "DELETE"... */
  const char *url;                 /* http:// or https:// (anything else fails the request) */
  const char *const *headers;      /* nheaders "name: value" lines; "name;" sends an empty value,
                                      "name:" removes a header the client would send */
  size_t nheaders;
  const void *body;                /* sent as is with a Content-Length, empty too; GET and HEAD
                                      send none */
  size_t body_len;                 /* bytes of body, or of the file region below */
  bool body_from_fd;               /* the body is body_len bytes of body_fd from body_off instead,
                                      read with pread in chunks while it is sent (and again from
                                      the start if libcurl rewinds): memory stays bounded however
                                      large the file. body_fd is borrowed: the caller keeps it open
                                      and the region unchanged until the completion. A file shorter
                                      than the region fails the request (AK_HTTPC_FAILED, why
                                      "body file: ...") */
  int body_fd;
  uint64_t body_off;
  long timeout_ms;                 /* connect and whole exchange, once started; 0 = none */
  size_t max_response_bytes;       /* body bytes read at most; beyond them the exchange stops */
  bool keep_body;                  /* hand the bytes read to the completion */
  const char *const *want_headers; /* response headers whose last value the completion carries */
  size_t nwant;                    /* at most AK_HTTPC_MAX_WANT */
  ak_httpc_addr_fn addr_ok;        /* NULL: any address */
  void *addr_ctx;                  /* borrowed: outlives the request */
  const void *owner;               /* a tag ak_httpc_cancel finds the request by; NULL = none */
  const void *user;                /* user_len (<= AK_HTTPC_USER_MAX) bytes of the caller's, */
  size_t user_len;                 /* handed back in the completion: no allocation of its own */
  const char *aws_sigv4;           /* libcurl's CURLOPT_AWS_SIGV4 ("aws:amz:REGION:SERVICE"):
                                      libcurl signs the request (host, x-amz-date and every
                                      header line above); NULL = unsigned */
  const char *userpwd;             /* with aws_sigv4: "ACCESS_KEY_ID:SECRET" (a secret: never in
                                      a why, a log line, or a handle once the request ends) */
} ak_httpc_req_t;

typedef enum {
  AK_HTTPC_OK = 0,     /* a response arrived: status, wanted headers, body */
  AK_HTTPC_TIMEOUT,    /* timeout_ms passed before the response was read (why "timeout") */
  AK_HTTPC_REFUSED,    /* addr_ok refused the address (each one tried, or the kept connection's);
                          why: its reason. Nothing of the request was sent */
  AK_HTTPC_FAILED,     /* resolve, connect, TLS or another transport failure (why says which) */
  AK_HTTPC_CANCELLED,  /* ak_httpc_cancel or ak_httpc_free before it was answered */
} ak_httpc_result_t;

/* What a completion reports. Pointers are valid during the callback only. */
typedef struct ak_httpc_resp {
  ak_httpc_result_t result;
  long status;                /* the HTTP status; 0 unless result is AK_HTTPC_OK */
  const char *const *headers; /* one per want_headers name, in its order: the value (trimmed)
                                 of its last occurrence in the final response, or NULL */
  size_t body_bytes;          /* response body bytes read (at most max_response_bytes) */
  bool truncated;             /* there was more than max_response_bytes: the rest was not read */
  const uint8_t *body;        /* keep_body: the body_bytes read; else NULL */
  const char *why;            /* result != OK: short, secret-free ("timeout", "connect: ...");
                                 "" for AK_HTTPC_OK */
  const void *user;           /* the request's user bytes (aligned for any type) */
} ak_httpc_resp_t;

typedef void (*ak_httpc_done_fn)(void *ctx, const ak_httpc_resp_t *resp);

/* What submit answers besides 0 (accepted). */
enum {
  AK_HTTPC_BUSY = -1,    /* max_outstanding requests are outstanding: try again later */
  AK_HTTPC_STOPPED = -2, /* the client is being freed */
  AK_HTTPC_NOMEM = -3,
  AK_HTTPC_EINVAL = -4,  /* no URL or callback, a method that is not a token, more than
                            AK_HTTPC_MAX_WANT wanted headers or AK_HTTPC_USER_MAX user bytes,
                            body_from_fd with a negative body_fd or a region past 2^63 */
  AK_HTTPC_ESTART = -5,  /* the client's threads could not be started */
};

/* A client. Its threads start with the first request, so a node that never speaks HTTP
 * has none. NULL with err filled on failure. */
ak_httpc_t *ak_httpc_new(const ak_httpc_opts_t *opts, char *err, size_t errlen);
/* Answers every request still outstanding AK_HTTPC_CANCELLED (once each), then frees. */
void ak_httpc_free(ak_httpc_t *c);

/* 0: accepted; done(ctx, resp) will be called exactly once, on one of the client's
 * threads, possibly before submit returns. Anything else (AK_HTTPC_BUSY...): refused at
 * once, and done is never called. Any thread. */
int ak_httpc_submit(ak_httpc_t *c, const ak_httpc_req_t *req, ak_httpc_done_fn done, void *ctx);

/* Answers every outstanding request submitted with this owner AK_HTTPC_CANCELLED, and
 * returns once no callback of theirs can run any more: after it, what owner points to may
 * be freed. The owner must not submit meanwhile. It waits for the client's threads, which
 * run every caller's completions: never call it from a completion callback, nor while
 * holding a lock any completion callback takes. */
void ak_httpc_cancel(ak_httpc_t *c, const void *owner);

/* Text for a submit answer ("busy", ...). */
const char *ak_httpc_strerror(int rc);

/* The node's client (inst->httpc): opened before anything that speaks HTTP, closed after. */
extern const ak_module_t ak_mod_httpc;

#endif
