/* The server layer's protocol engine: one HTTP/1.1 connection without a socket. Bytes in
 * (ak_hconn_rbuf + ak_hconn_input, or ak_hconn_feed), handler calls, bytes out
 * (ak_hconn_out / ak_hconn_out_done), and a few notices from whoever owns the socket
 * (everything sent, end of input, a clock tick, a resume, a drain). It owns the head
 * buffer and its limits, the strict framing rules of RFC 9112 (checked on the raw head
 * before the parser sees it, then cross-checked with what the parser derived), the
 * request's life (on_head .. on_done), keep-alive and pipelining (one request at a time,
 * later bytes stay buffered), Expect: 100-continue, the answers' bytes and the timeouts.
 * It implements the ak_hreq_* half of http/server.h.
 *
 * It never touches a socket, a loop, a thread or a lock: server.c drives it on a loop
 * thread, fuzz/fuzz_http.c drives it directly. It never calls its driver back inside an
 * engine call except through ak_hconn_ops_t (a resume may be posted from any thread);
 * after every engine call the driver looks at the engine's state (ak_hconn_state,
 * ak_hconn_out) and acts. */
#ifndef AK_HTTP_PROTO_H
#define AK_HTTP_PROTO_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/buf.h"
#include "core/envelope.h"
#include "http/parse.h"
#include "http/server.h"

/* Input a connection buffers beyond what it is working on (pipelined requests) before
 * its driver must stop reading. */
#define AK_HCONN_PENDING_MAX (64u * 1024u)

typedef struct ak_hconn ak_hconn_t;

/* A loop's clock, read by its connections: monotonic ms and the Date header's text, both
 * refreshed by the driver. */
typedef struct ak_hclock {
  uint64_t now_ms;
  char date[32]; /* "Tue, 01 Dec 2026 16:27:14 GMT" */
} ak_hclock_t;

/* What the engine asks of its driver. */
typedef struct ak_hconn_ops {
  void (*resume)(ak_hconn_t *c);                                  /* any thread: run ak_hconn_resumed soon */
  bool (*peer_sha256)(const ak_hconn_t *c, uint8_t out[32]);     /* may be NULL */
} ak_hconn_ops_t;

/* A listener's part every connection shares (read-only once serving, but inflight). */
typedef struct ak_hproto {
  ak_hlimits_t lim; /* defaults filled in (ak_hproto_limits) */
  const ak_hhandler_t *h;
  void *ctx;
  ak_hserver_t *server;
  const ak_hconn_ops_t *ops;
  atomic_size_t inflight; /* requests between on_head and on_done */
} ak_hproto_t;

/* Fills every 0 field of l with its default. */
void ak_hproto_limits(ak_hlimits_t *l);

typedef enum {
  AK_HC_HEAD,      /* waiting for / reading a head */
  AK_HC_BODY,      /* reading a body for the handler */
  AK_HC_SUSPENDED, /* the handler holds the request (ak_hreq_suspend) */
  AK_HC_WRITE,     /* the answer is in out; ak_hconn_sent ends the request */
  AK_HC_CLOSING,   /* send what out holds, then close (lingering) */
  AK_HC_DEAD,      /* close now, nothing more to send */
} ak_hc_state_t;

struct ak_hreq {
  ak_hconn_t *c;
  const char *method;
  const char *path, *query; /* NUL-terminated copies in the head buffer; query NULL without '?' */
  size_t path_len, query_len;
  ak_header_t *hdrs;
  size_t nhdrs, hdrs_cap;
  int64_t clen;
  unsigned major, minor;
  bool chunked, has_body, keep_alive, expect_100, head_method;
  bool in_flight, answered, suspended, lost;
  void *data;
  ak_buf_t xh; /* extra answer headers, "Name: value\r\n" each */
};

struct ak_hconn {
  const ak_hproto_t *p;
  const ak_hclock_t *clk;
  void *io; /* the driver's */
  const struct sockaddr *peer;
  socklen_t peer_len;
  ak_hc_state_t st;
  /* input: [in_off, in_len) not yet consumed */
  uint8_t *in;
  size_t in_off, in_len, in_cap;
  /* the head being scanned (offsets from in_off) */
  bool hs_started;
  uint64_t hs_t0;
  size_t hs_pos, hs_line, hs_hbytes, hs_len, hs_toff, hs_tlen;
  unsigned hs_nlines, hs_nfields, hs_ncl, hs_nhost, hs_minor;
  uint64_t hs_cl;
  unsigned te_lines, te_n, te_chunked, te_other;
  bool te_empty, te_last_chunked, hs_close, hs_ka, hs_expect;
  /* the current request */
  uint8_t *head;
  size_t head_cap;
  ak_hparse_t parser;
  bool p_head, p_end, p_chunked, p_has_len, stop_body;
  uint64_t p_clen;
  unsigned p_major, p_minor;
  const char *p_method;
  uint64_t body_t0, body_last, body_bytes;
  struct ak_hreq req;
  /* output */
  ak_buf_t out;
  size_t out_off;
  uint64_t since, write_t0; /* idle since / answer queued at */
  unsigned served;
  bool close_after, draining, stopping, peer_eof, in_end_cb;
};

void ak_hconn_init(ak_hconn_t *c, const ak_hproto_t *p, const ak_hclock_t *clk, void *io);
/* Frees the buffers. Not while a request is suspended. */
void ak_hconn_free(ak_hconn_t *c);

static inline ak_hc_state_t ak_hconn_state(const ak_hconn_t *c) { return c->st; }

/* Room for incoming bytes at the end of the input buffer; *cap = 0 when the connection
 * holds as much as it may (stop reading until it changes). */
uint8_t *ak_hconn_rbuf(ak_hconn_t *c, size_t *cap);
/* n bytes were written at what ak_hconn_rbuf returned. */
void ak_hconn_input(ak_hconn_t *c, size_t n);
/* Copies p in (growing the buffer as needed; for drivers that do not read in place). */
void ak_hconn_feed(ak_hconn_t *c, const uint8_t *p, size_t n);
/* The peer will send nothing more (EOF or a read error). */
void ak_hconn_eof(ak_hconn_t *c);

/* Bytes to send (*n = 0 when none); ak_hconn_out_done(n) once n of them are taken. */
const uint8_t *ak_hconn_out(const ak_hconn_t *c, size_t *n);
void ak_hconn_out_done(ak_hconn_t *c, size_t n);
/* Everything taken from ak_hconn_out has reached the socket: ends a request in
 * AK_HC_WRITE (on_done answered = true) and goes on with buffered input. */
void ak_hconn_sent(ak_hconn_t *c);

/* Timeouts against clk->now_ms; call at least a few times per second. */
void ak_hconn_tick(ak_hconn_t *c);
/* On the loop thread after ops->resume: the handler's on_resume. */
void ak_hconn_resumed(ak_hconn_t *c);
/* The listener closed: an idle keep-alive connection closes now, any other one after
 * its next answer (which says Connection: close). */
void ak_hconn_drain(ak_hconn_t *c);
/* The server stops: a suspended request is still answered (then the connection closes);
 * anything else ends now (a request in flight gets on_done(false)). */
void ak_hconn_stop(ak_hconn_t *c);
/* The connection is lost (write error, write timeout): a request in flight that is not
 * suspended gets on_done(false) and the state becomes AK_HC_DEAD. A suspended request is
 * marked lost and ends after its on_resume. */
void ak_hconn_abort(ak_hconn_t *c);
/* Answers a connection the layer will not serve (at a cap) with {"error": code} and
 * Connection: close, before any request. */
void ak_hconn_refuse(ak_hconn_t *c, unsigned status, const char *code, int retry_after_s);
/* A keep-alive connection between requests with nothing buffered (evictable). */
bool ak_hconn_idle(const ak_hconn_t *c);

#endif
