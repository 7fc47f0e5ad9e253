/* Our HTTP/1.1 server layer, shared by every listener (ingest 4000, admin 4002, and the
 * claims and routes listeners when they come): libuv loops, Debian's http_parser behind
 * http/parse.h, TLS through http/tls.h. It owns the connections, the framing rules
 * (RFC 9112 section 6: one decimal Content-Length, chunked as the only transfer coding,
 * no obs-fold, no space before a colon, no control byte in a name), the limits (request
 * line, header bytes and count, timeouts, a connection cap with the oldest idle
 * keep-alive connection closed first, an optional per-address cap), keep-alive and
 * pipelining answered in order, Expect: 100-continue, lingering close, and the drain.
 * Every refusal it makes itself is JSON ({"error": code}) and closes the connection.
 *
 * It never interprets a request: the handler does, on the loop thread that owns the
 * connection. A request can be held without a thread (ak_hreq_suspend) and handed back
 * from any thread (ak_hreq_resume): the ingest edge suspends a hook on the writer and
 * the writer resumes it after its commit.
 *
 * A request's life, in handler calls (all on its loop thread):
 *   on_head    the head is complete and its framing valid. The handler may answer here,
 *              and then no body byte is read and no 100 Continue is sent (a request that
 *              announced a body has its connection closed after the answer, lingering).
 *   on_body    decoded body bytes, in order (chunked is undone). Only when on_head did not
 *              answer. The handler may answer here too (the rest is not delivered).
 *   on_end     the whole body arrived. The handler answers, or suspends.
 *   on_resume  after ak_hreq_resume: the handler answers (it must).
 *   on_done    last call for this request, exactly once for every request that reached
 *              on_head: answered = true when its answer was handed to the connection
 *              (the whole of it written to the socket), false when the connection ended
 *              first (client gone, timeout, stop). A body that stalls (body_timeout_ms,
 *              body_min_rate) is answered 408 by the layer itself (reported to
 *              on_refused) and its request's on_done says false: the handler's answer
 *              never went out. A suspended request is never ended under the handler: its
 *              on_done comes after its on_resume.
 * Requests that never reach on_head (bad framing, a limit, a timeout before the head
 * completed) are answered by the layer and reported through on_refused only. */
#ifndef AK_HTTP_SERVER_H
#define AK_HTTP_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include "core/envelope.h" /* ak_header_t */

typedef struct ak_hserver ak_hserver_t;
typedef struct ak_hreq ak_hreq_t;
struct ak_htls_ctx;

/* The limits a listener holds under abuse. Every field 0 = its default (below). */
typedef struct ak_hlimits {
  uint32_t max_request_line;  /* bytes of the request line, CRLF excluded; past it 414 (8192) */
  uint32_t max_header_bytes;  /* bytes of the header lines after the request line; past it 431 (32768) */
  uint32_t max_headers;       /* header fields; past it 431 (100) */
  uint32_t header_timeout_ms; /* a head must complete this long after its first byte; 408 (10000) */
  uint32_t body_timeout_ms;   /* the longest gap between two reads of body bytes; 408 (10000) */
  uint32_t body_min_rate;     /* bytes/s a body must average once it has taken body_timeout_ms; 408 (1024) */
  uint32_t idle_timeout_ms;   /* a keep-alive connection with no request in progress is closed (75000) */
  uint32_t write_timeout_ms;  /* an answer the client does not read for this long: connection closed (30000) */
  uint32_t max_connections;   /* this listener's open connections; at the cap the oldest idle one is
                               * closed, and with none idle the new one gets 503 and is closed (20000).
                               * RLIMIT_NOFILE is raised to fit (or the cap lowered, logged). */
  uint32_t max_per_client;    /* open connections per peer address; past it 503 and closed (0 = no cap) */
} ak_hlimits_t;

/* Defaults of the fields above. */
#define AK_HLIM_REQUEST_LINE 8192u
#define AK_HLIM_HEADER_BYTES 32768u
#define AK_HLIM_HEADERS 100u
#define AK_HLIM_HEADER_TIMEOUT_MS 10000u
#define AK_HLIM_BODY_TIMEOUT_MS 10000u
#define AK_HLIM_BODY_MIN_RATE 1024u
#define AK_HLIM_IDLE_TIMEOUT_MS 75000u
#define AK_HLIM_WRITE_TIMEOUT_MS 30000u
#define AK_HLIM_MAX_CONNECTIONS 20000u

typedef struct ak_hhandler {
  void (*on_head)(void *ctx, ak_hreq_t *r);
  void (*on_body)(void *ctx, ak_hreq_t *r, const uint8_t *p, size_t n);
  void (*on_end)(void *ctx, ak_hreq_t *r);
  void (*on_resume)(void *ctx, ak_hreq_t *r);
  void (*on_done)(void *ctx, ak_hreq_t *r, bool answered);
  /* Optional: the layer answered a request itself (status, code as in its JSON body:
   * "bad_request", "request_header_fields_too_large", ...). For metrics; any thread. */
  void (*on_refused)(void *ctx, unsigned status, const char *code);
} ak_hhandler_t;

typedef struct ak_hserver_cfg {
  const char *name;            /* for logs and errors: "ingest", "admin" */
  const char *ip;              /* bind address (IP literal); NULL or "" = every interface, IPv4 and IPv6 */
  int port;                    /* 0 = a free port (ak_hserver_port tells which) */
  unsigned loops;              /* event-loop threads; 0 = one per online core */
  ak_hlimits_t limits;
  struct ak_htls_ctx *tls;     /* NULL = plain HTTP; else every connection is TLS (ref taken) */
  const ak_hhandler_t *handler;
  void *ctx;                   /* handed to every handler call */
} ak_hserver_cfg_t;

/* Builds the server (no socket yet). NULL with *err (malloc'd) on a bad cfg. */
ak_hserver_t *ak_hserver_new(const ak_hserver_cfg_t *cfg, char **err);
/* Binds, listens and starts the loop threads. 0, or -1 with *err naming ip:port and why. */
int ak_hserver_start(ak_hserver_t *s, char **err);
/* The bound port (after start). */
int ak_hserver_port(const ak_hserver_t *s);
/* Swaps the TLS context new connections get (SIGHUP); connections already open keep
 * theirs. Takes a reference on tls. No-op on a plain server. Any thread. */
void ak_hserver_set_tls(ak_hserver_t *s, struct ak_htls_ctx *tls);
/* Stops accepting: what the backlog holds is accepted and served first, then the
 * listening socket closes. Open connections finish the request in progress (their
 * answer carries Connection: close); idle keep-alive connections are closed. Any thread;
 * returns at once. */
void ak_hserver_close_listener(ak_hserver_t *s);
/* Requests between on_head and on_done, suspended ones included. Any thread. */
size_t ak_hserver_inflight(const ak_hserver_t *s);
/* Waits until no request is in flight, up to timeout_ms. true when none is. */
bool ak_hserver_wait_idle(ak_hserver_t *s, int64_t timeout_ms);
/* Closes the listener (if open) and every connection, joins the threads. A suspended
 * request keeps its loop running until it is resumed and answered, so call this after
 * whatever resumes them (the writer) has answered everything. */
void ak_hserver_stop(ak_hserver_t *s);
void ak_hserver_free(ak_hserver_t *s);

/* ---- one request (valid from on_head to the end of on_done) ---- */

/* "GET", "POST", ...: NUL-terminated. */
const char *ak_hreq_method(const ak_hreq_t *r);
/* The request target's path exactly as sent (no percent-decoding), NUL-terminated. */
const char *ak_hreq_path(const ak_hreq_t *r, size_t *len);
/* What follows '?' in the target, exactly as sent, NUL-terminated; NULL when there is no '?'. */
const char *ak_hreq_query(const ak_hreq_t *r, size_t *len);
/* The header fields in the order sent (names as sent, values without surrounding
 * whitespace; neither NUL-terminated). */
size_t ak_hreq_headers(const ak_hreq_t *r, const ak_header_t **out);
/* The first field named name (ASCII case-insensitive), or NULL. Not NUL-terminated. */
const char *ak_hreq_header(const ak_hreq_t *r, const char *name, size_t *len);
/* The declared Content-Length, or -1 (chunked, or no body). */
int64_t ak_hreq_content_length(const ak_hreq_t *r);
/* The peer's address (the TCP peer, not X-Forwarded-For). */
const struct sockaddr *ak_hreq_peer(const ak_hreq_t *r, socklen_t *len);
/* The request's client (core/netaddr.h's ak_netaddr_client): the peer, or behind one of
 * the trusted proxies the right-most X-Forwarded-For address that is not one (the last 16
 * X-Forwarded-For lines are read). All zero when the peer has no address. */
struct ak_cidr;
struct ak_netaddr;
void ak_hreq_client(const ak_hreq_t *r, const struct ak_cidr *proxies, size_t nproxies, struct ak_netaddr *out);
/* TLS: SHA-256 of the peer's leaf certificate, only when it verified against the
 * listener's client CA (http/tls.h). false on a plain connection or without one. */
bool ak_hreq_peer_cert_sha256(const ak_hreq_t *r, uint8_t out[32]);
/* The handler's own pointer for this request (NULL at on_head). */
void *ak_hreq_data(const ak_hreq_t *r);
void ak_hreq_set_data(ak_hreq_t *r, void *data);
/* The server this request came to (to tell listeners apart in a shared handler). */
ak_hserver_t *ak_hreq_server(const ak_hreq_t *r);

/* ---- answers (loop thread, inside a handler call) ---- */

/* Adds a response header line to the answer being built (copied; before ak_hreq_reply).
 * Content-Type, Content-Length, Date and Connection are the layer's. */
void ak_hreq_add_header(ak_hreq_t *r, const char *name, const char *value);
/* Answers with status, Content-Type ctype and body (copied). Once per request; a second
 * call is ignored. HEAD gets no body bytes. */
void ak_hreq_reply(ak_hreq_t *r, unsigned status, const char *ctype, const void *body, size_t len);
/* {"error": code} with status (application/json; code is a fixed token, not escaped). */
void ak_hreq_error(ak_hreq_t *r, unsigned status, const char *code, int retry_after_s);

/* Holds r without a thread after on_end: no timeout runs and nothing more of the
 * connection reaches the handler until ak_hreq_resume (the layer keeps reading, at most
 * 64 KiB, to notice a client that leaves: then the answer is not sent and on_done says
 * false). Loop thread. */
void ak_hreq_suspend(ak_hreq_t *r);
/* Any thread, once per suspend: on_resume(r) runs on r's loop thread soon after. */
void ak_hreq_resume(ak_hreq_t *r);

#endif
