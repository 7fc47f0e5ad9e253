/* Request parsing for the server layer, behind one small interface so the library under
 * it (Debian's http_parser today, llhttp on a newer Debian) can change without touching
 * the connection code. Bytes go in with ak_hparse_feed; events come out through callbacks:
 * the request line, each header field, the end of the head (with the framing the parser
 * derived from it), decoded body bytes (chunked undone) and the end of the message.
 * Also owns the strict check of chunked framing that the library is lenient about
 * (a chunk-size line is HEXDIG then optional BWS ";" extensions, every line ends in CRLF,
 * no control byte, no obs-fold in a trailer, a bounded run of framing bytes).
 *
 * Never allocates, never copies a byte: the events point into the caller's buffer, so a
 * head must be fed in one contiguous piece (the connection buffers it until its blank
 * line). Nothing of the library's types leaks out of parse.c. */
#ifndef AK_HTTP_PARSE_H
#define AK_HTTP_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What the parser derived from a head. */
typedef struct ak_hparse_head {
  const char *method;      /* NUL-terminated, static */
  unsigned major, minor;   /* HTTP version */
  bool chunked;            /* Transfer-Encoding: chunked */
  bool has_length;         /* Content-Length present */
  uint64_t content_length; /* when has_length */
} ak_hparse_head_t;

/* The events. on_body returns 0 to go on, non-zero to stop the feed right after it (the
 * bytes after it stay unconsumed). Trailer fields are not reported. */
typedef struct ak_hparse_ev {
  void (*on_target)(void *u, const char *target, size_t len);
  void (*on_field)(void *u, const char *name, size_t nlen, const char *value, size_t vlen); /* value trimmed */
  void (*on_head)(void *u, const ak_hparse_head_t *h);
  int (*on_body)(void *u, const uint8_t *p, size_t n);
  void (*on_end)(void *u);
} ak_hparse_ev_t;

/* The parser's state, held inline by its owner (no allocation); opaque. */
typedef struct ak_hparse {
  _Alignas(16) unsigned char opaque[224];
} ak_hparse_t;

/* Ready for a new request (also between requests on one connection). max_framing bounds
 * a run of chunk framing bytes without a body byte (extensions, trailers). */
void ak_hparse_reset(ak_hparse_t *p, const ak_hparse_ev_t *ev, void *u, size_t max_framing);
/* Feeds n bytes; returns how many were consumed. A head is fed alone, whole, through its
 * blank line; body bytes in later feeds. Fewer than n consumed: on_body asked to stop,
 * the message ended (the rest belongs to the next one), or an error (ak_hparse_error).
 * After the end of a message, reset before feeding the next one. */
size_t ak_hparse_feed(ak_hparse_t *p, const uint8_t *data, size_t n);
/* NULL, or why the bytes were refused (a short phrase for a 400's detail). */
const char *ak_hparse_error(const ak_hparse_t *p);
/* The error was an unknown method (a 501 rather than a 400). */
bool ak_hparse_error_is_method(const ak_hparse_t *p);
/* The message ended (on_end was reported). */
bool ak_hparse_done(const ak_hparse_t *p);
/* Raises the library's head-size bound (process-wide) to at least n bytes; the
 * connection enforces its own, smaller, limits before the parser sees a head. */
void ak_hparse_allow_head(size_t n);

#endif
