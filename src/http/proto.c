/* The protocol engine of the server layer (http/proto.h): one connection's bytes in,
 * handler calls, bytes out, with no socket. Owns the raw head check (RFC 9112: the
 * request line, field syntax, one decimal Content-Length, chunked as the only transfer
 * coding, limits on the line, the head's bytes and its fields), the request's life, the
 * answers' wire form and the per-connection timeouts. Also implements the ak_hreq_* calls
 * of http/server.h.
 *
 * Never reads a clock, a socket or a lock of its own (the driver's clock is read through
 * c->clk), never allocates per request beyond buffers a connection keeps and reuses, and
 * never hands the handler a request whose framing failed a check: every refusal closes
 * the connection and drops whatever was pipelined after it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "core/netaddr.h"
#include "http/proto.h"

#define IN_INITIAL 4096u
#define IN_MIN_ROOM 2048u
#define OUT_KEEP (64u * 1024u) /* an output buffer grown past this is freed after use */

void ak_hproto_limits(ak_hlimits_t *l) {
  if (!l->max_request_line) l->max_request_line = AK_HLIM_REQUEST_LINE;
  if (!l->max_header_bytes) l->max_header_bytes = AK_HLIM_HEADER_BYTES;
  if (!l->max_headers) l->max_headers = AK_HLIM_HEADERS;
  if (!l->header_timeout_ms) l->header_timeout_ms = AK_HLIM_HEADER_TIMEOUT_MS;
  if (!l->body_timeout_ms) l->body_timeout_ms = AK_HLIM_BODY_TIMEOUT_MS;
  if (!l->body_min_rate) l->body_min_rate = AK_HLIM_BODY_MIN_RATE;
  if (!l->idle_timeout_ms) l->idle_timeout_ms = AK_HLIM_IDLE_TIMEOUT_MS;
  if (!l->write_timeout_ms) l->write_timeout_ms = AK_HLIM_WRITE_TIMEOUT_MS;
  if (!l->max_connections) l->max_connections = AK_HLIM_MAX_CONNECTIONS;
}

static size_t head_max(const ak_hconn_t *c) {
  return (size_t)c->p->lim.max_request_line + 2 + c->p->lim.max_header_bytes + 2;
}

/* ---- answers -------------------------------------------------------------------------- */

static const char *reason_phrase(unsigned s) {
  switch (s) {
  case 100: return "Continue";
  case 200: return "OK";
  case 201: return "Created";
  case 202: return "Accepted";
  case 204: return "No Content";
  case 206: return "Partial Content";
  case 301: return "Moved Permanently";
  case 302: return "Found";
  case 303: return "See Other";
  case 304: return "Not Modified";
  case 307: return "Temporary Redirect";
  case 308: return "Permanent Redirect";
  case 400: return "Bad Request";
  case 401: return "Unauthorized";
  case 403: return "Forbidden";
  case 404: return "Not Found";
  case 405: return "Method Not Allowed";
  case 406: return "Not Acceptable";
  case 408: return "Request Timeout";
  case 409: return "Conflict";
  case 410: return "Gone";
  case 411: return "Length Required";
  case 412: return "Precondition Failed";
  case 413: return "Content Too Large";
  case 414: return "URI Too Long";
  case 415: return "Unsupported Media Type";
  case 416: return "Range Not Satisfiable";
  case 417: return "Expectation Failed";
  case 421: return "Misdirected Request";
  case 422: return "Unprocessable Content";
  case 425: return "Too Early";
  case 426: return "Upgrade Required";
  case 428: return "Precondition Required";
  case 429: return "Too Many Requests";
  case 431: return "Request Header Fields Too Large";
  case 500: return "Internal Server Error";
  case 501: return "Not Implemented";
  case 502: return "Bad Gateway";
  case 503: return "Service Unavailable";
  case 504: return "Gateway Timeout";
  case 505: return "HTTP Version Not Supported";
  case 507: return "Insufficient Storage";
  default: return "Status";
  }
}

static void put(ak_buf_t *b, const char *s) { ak_buf_append(b, s, strlen(s)); }

static void put_u64(ak_buf_t *b, uint64_t v) {
  char tmp[24];
  size_t i = sizeof tmp;
  do {
    tmp[--i] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  ak_buf_append(b, tmp + i, sizeof tmp - i);
}

/* One answer into out. close: say Connection: close (the caller closes after it). */
static void emit(ak_hconn_t *c, unsigned status, const char *ctype, const void *body, size_t len,
                 const ak_buf_t *xh, bool close, bool head_method, bool ka10) {
  ak_buf_t *b = &c->out;
  if (status < 100 || status > 999) status = 500;
  put(b, "HTTP/1.1 ");
  put_u64(b, status);
  ak_buf_append(b, " ", 1);
  put(b, reason_phrase(status));
  put(b, "\r\nDate: ");
  put(b, c->clk->date);
  put(b, "\r\n");
  bool no_body = status == 204 || status == 304 || status < 200;
  if (ctype && *ctype && !no_body) {
    put(b, "Content-Type: ");
    put(b, ctype);
    put(b, "\r\n");
  }
  if (status != 204 && status >= 200) {
    put(b, "Content-Length: ");
    put_u64(b, no_body ? 0 : len);
    put(b, "\r\n");
  }
  if (xh && xh->len) ak_buf_append(b, xh->p, xh->len);
  if (close) put(b, "Connection: close\r\n");
  else if (ka10) put(b, "Connection: keep-alive\r\n");
  put(b, "\r\n");
  if (!no_body && !head_method && len) ak_buf_append(b, body, len);
  c->write_t0 = c->clk->now_ms;
  if (b->failed) { /* out of memory: nothing coherent can be sent */
    ak_buf_free(b);
    c->out_off = 0;
    c->req.lost = true;
  }
}

static void report_refused(ak_hconn_t *c, unsigned status, const char *code) {
  if (c->p->h && c->p->h->on_refused) c->p->h->on_refused(c->p->ctx, status, code);
}

static void end_request(ak_hconn_t *c, bool answered);

/* The layer answers itself and closes: status with {"error": code[, "detail": ...]}. A
 * request the handler holds ends with on_done(false); nothing buffered after it is read. */
static void refuse(ak_hconn_t *c, unsigned status, const char *code, const char *detail, int retry_after_s) {
  if (c->st >= AK_HC_CLOSING) return;
  report_refused(c, status, code);
  if (c->req.in_flight) end_request(c, false);
  c->in_off = c->in_len;
  char body[192];
  int n = detail ? snprintf(body, sizeof body, "{\"error\":\"%s\",\"detail\":\"%s\"}", code, detail)
                 : snprintf(body, sizeof body, "{\"error\":\"%s\"}", code);
  if (n < 0 || (size_t)n >= sizeof body) n = 0;
  ak_buf_t xh = AK_BUF_INIT;
  char ra[48];
  if (retry_after_s > 0) {
    int m = snprintf(ra, sizeof ra, "Retry-After: %d\r\n", retry_after_s);
    xh.p = ra;
    xh.len = (size_t)m;
  }
  emit(c, status, "application/json", body, (size_t)n, &xh, true, false, false);
  c->st = AK_HC_CLOSING;
}

static void bad(ak_hconn_t *c, const char *detail) { refuse(c, 400, "bad_request", detail, 0); }

/* A field whose name is not a token or whose value holds a control byte: 400
 * {"error":"invalid_header","header":<the name as sent, at most 120 bytes, every byte
 * outside printable ASCII as \u00XX>}, then closed like any refusal. */
static void bad_header(ak_hconn_t *c, const uint8_t *name, size_t nl) {
  static const char hex[] = "0123456789abcdef";
  if (c->st >= AK_HC_CLOSING) return;
  report_refused(c, 400, "invalid_header");
  if (c->req.in_flight) end_request(c, false);
  c->in_off = c->in_len;
  char body[64 + 120 * 6];
  size_t o = (size_t)snprintf(body, sizeof body, "{\"error\":\"invalid_header\",\"header\":\"");
  for (size_t i = 0; i < nl && i < 120; i++) {
    uint8_t ch = name[i];
    if (ch == '"' || ch == '\\') {
      body[o++] = '\\';
      body[o++] = (char)ch;
    } else if (ch < 0x20 || ch > 0x7e) {
      memcpy(body + o, "\\u00", 4);
      o += 4;
      body[o++] = hex[ch >> 4];
      body[o++] = hex[ch & 15];
    } else {
      body[o++] = (char)ch;
    }
  }
  body[o++] = '"';
  body[o++] = '}';
  emit(c, 400, "application/json", body, o, NULL, true, false, false);
  c->st = AK_HC_CLOSING;
}

/* ---- the raw head --------------------------------------------------------------------- */

static bool is_tchar(uint8_t ch) {
  static const char extra[] = "!#$%&'*+-.^_`|~";
  if ((ch >= '0' && ch <= '9') || ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'z')) return true;
  return ch && memchr(extra, ch, sizeof extra - 1) != NULL;
}

static bool ows(uint8_t ch) { return ch == ' ' || ch == '\t'; }

static void trim_ows(const uint8_t **p, size_t *n) {
  while (*n && ows((*p)[0])) (*p)++, (*n)--;
  while (*n && ows((*p)[*n - 1])) (*n)--;
}

static bool eq_ci(const uint8_t *p, size_t n, const char *lit) {
  size_t l = strlen(lit);
  return n == l && strncasecmp((const char *)p, lit, l) == 0;
}

/* Calls fn for each element of a comma-separated list, OWS trimmed (empty ones too). */
static void list_each(const uint8_t *p, size_t n, void (*fn)(ak_hconn_t *, const uint8_t *, size_t), ak_hconn_t *c) {
  size_t start = 0;
  for (size_t i = 0; i <= n; i++) {
    if (i == n || p[i] == ',') {
      const uint8_t *e = p + start;
      size_t el = i - start;
      trim_ows(&e, &el);
      fn(c, e, el);
      start = i + 1;
    }
  }
}

static void te_elem(ak_hconn_t *c, const uint8_t *e, size_t n) {
  c->te_n++;
  if (n == 0) {
    c->te_empty = true;
    return;
  }
  c->te_last_chunked = eq_ci(e, n, "chunked");
  if (c->te_last_chunked) c->te_chunked++;
  else c->te_other++;
}

static void conn_elem(ak_hconn_t *c, const uint8_t *e, size_t n) {
  if (eq_ci(e, n, "close")) c->hs_close = true;
  else if (eq_ci(e, n, "keep-alive")) c->hs_ka = true;
}

/* The request line (CR excluded). 0, or -1 refused. */
static int request_line(ak_hconn_t *c, const uint8_t *p, size_t len, size_t off) {
  const uint8_t *sp1 = memchr(p, ' ', len);
  if (!sp1 || sp1 == p) return bad(c, "bad request line"), -1;
  for (const uint8_t *q = p; q < sp1; q++)
    if (!is_tchar(*q)) return bad(c, "bad method"), -1;
  const uint8_t *t = sp1 + 1, *end = p + len;
  const uint8_t *sp2 = memchr(t, ' ', (size_t)(end - t));
  if (!sp2 || sp2 == t) return bad(c, "bad request line"), -1;
  const uint8_t *v = sp2 + 1;
  size_t vl = (size_t)(end - v);
  if (memchr(v, ' ', vl)) return bad(c, "bad request line"), -1;
  if (vl == 8 && memcmp(v, "HTTP/", 5) == 0 && v[5] >= '0' && v[5] <= '9' && v[6] == '.' && v[7] >= '0' &&
      v[7] <= '9') {
    if (v[5] != '1' || (v[7] != '0' && v[7] != '1')) {
      refuse(c, 505, "http_version_not_supported", NULL, 0);
      return -1;
    }
    c->hs_minor = (unsigned)(v[7] - '0');
  } else {
    return bad(c, "bad HTTP version"), -1;
  }
  for (const uint8_t *q = t; q < sp2; q++)
    if (*q < 0x21 || *q > 0x7e) return bad(c, "bad request target"), -1;
  size_t tl = (size_t)(sp2 - t);
  if (t[0] != '/' && !(tl == 1 && t[0] == '*' && sp1 - p == 7 && memcmp(p, "OPTIONS", 7) == 0))
    return bad(c, "request target not in origin form"), -1;
  c->hs_toff = off + (size_t)(t - p);
  c->hs_tlen = tl;
  return 0;
}

/* A field line (CR excluded). 0, or -1 refused. */
static int field_line(ak_hconn_t *c, const uint8_t *p, size_t len) {
  if (ows(p[0])) return bad(c, "obs-fold"), -1;
  const uint8_t *colon = memchr(p, ':', len);
  if (!colon) return bad(c, "header line without a colon"), -1;
  size_t nl = (size_t)(colon - p);
  if (nl == 0) return bad(c, "empty header name"), -1;
  if (ows(p[nl - 1])) return bad(c, "whitespace before colon"), -1;
  for (size_t i = 0; i < nl; i++)
    if (!is_tchar(p[i])) return bad_header(c, p, nl), -1;
  const uint8_t *v = colon + 1;
  size_t vl = len - nl - 1;
  for (size_t i = 0; i < vl; i++)
    if ((v[i] < 0x20 && v[i] != '\t') || v[i] == 0x7f) return bad_header(c, p, nl), -1;
  trim_ows(&v, &vl);
  switch (nl) {
  case 4:
    if (eq_ci(p, nl, "host") && ++c->hs_nhost > 1) return bad(c, "duplicate Host"), -1;
    break;
  case 6:
    if (eq_ci(p, nl, "expect") && eq_ci(v, vl, "100-continue")) c->hs_expect = true;
    break;
  case 10:
    if (eq_ci(p, nl, "connection")) list_each(v, vl, conn_elem, c);
    break;
  case 14:
    if (eq_ci(p, nl, "content-length")) {
      if (++c->hs_ncl > 1) return bad(c, "duplicate Content-Length"), -1;
      if (vl == 0) return bad(c, "bad Content-Length"), -1;
      uint64_t x = 0;
      for (size_t i = 0; i < vl; i++) {
        if (v[i] < '0' || v[i] > '9') return bad(c, "bad Content-Length"), -1;
        if (x > (UINT64_C(0x7fffffffffffffff) - (uint64_t)(v[i] - '0')) / 10) return bad(c, "bad Content-Length"), -1;
        x = x * 10 + (uint64_t)(v[i] - '0');
      }
      c->hs_cl = x;
    }
    break;
  case 17:
    if (eq_ci(p, nl, "transfer-encoding")) {
      c->te_lines++;
      list_each(v, vl, te_elem, c);
    }
    break;
  default:
    break;
  }
  return 0;
}

/* The head's blank line: the rules across fields. 0, or -1 refused. */
static int head_end(ak_hconn_t *c) {
  if (!c->te_lines) return 0;
  if (c->hs_ncl) return bad(c, "Content-Length with Transfer-Encoding"), -1;
  if (c->hs_minor == 0) return bad(c, "Transfer-Encoding in HTTP/1.0"), -1;
  if (c->te_empty) return bad(c, "empty transfer coding"), -1;
  if (c->te_n == 1 && c->te_chunked == 1) return 0;
  if (c->te_n > 1 && !c->te_last_chunked) return bad(c, "chunked is not the final transfer coding"), -1;
  if (c->te_other) return refuse(c, 501, "not_implemented", NULL, 0), -1;
  return bad(c, "chunked applied more than once"), -1;
}

/* One line of the head, LF excluded (a CR before it included), at off from the head's
 * start. Limits first, then syntax, so a verdict does not depend on how the bytes were
 * split into reads. 0 go on, 1 the head is complete, -1 refused. */
static int head_line(ak_hconn_t *c, const uint8_t *p, size_t len, size_t off) {
  bool cr = len && p[len - 1] == '\r';
  size_t content = cr ? len - 1 : len;
  const ak_hlimits_t *l = &c->p->lim;
  if (c->hs_nlines == 0) {
    if (content > l->max_request_line) return refuse(c, 414, "uri_too_long", NULL, 0), -1;
  } else if (content) {
    if (c->hs_hbytes + content + 2 > l->max_header_bytes)
      return refuse(c, 431, "request_header_fields_too_large", NULL, 0), -1;
    if (c->hs_nfields + 1 > l->max_headers) return refuse(c, 431, "request_header_fields_too_large", NULL, 0), -1;
  }
  if (!cr) return bad(c, "bare LF"), -1;
  if (memchr(p, '\r', content)) return bad(c, "bare CR"), -1;
  if (c->hs_nlines++ == 0) {
    if (content == 0) return bad(c, "bad request line"), -1;
    return request_line(c, p, content, off);
  }
  if (content == 0) return head_end(c) < 0 ? -1 : 1;
  c->hs_hbytes += content + 2;
  c->hs_nfields++;
  return field_line(c, p, content);
}

/* Limits on a line not complete yet: the same bounds as head_line, on its bytes so far
 * (a trailing CR may still be the line's end). */
static int head_partial(ak_hconn_t *c, const uint8_t *p, size_t len) {
  size_t content = len && p[len - 1] == '\r' ? len - 1 : len;
  const ak_hlimits_t *l = &c->p->lim;
  if (c->hs_nlines == 0) {
    if (content > l->max_request_line) return refuse(c, 414, "uri_too_long", NULL, 0), -1;
  } else if (content && c->hs_hbytes + content + 2 > l->max_header_bytes) {
    return refuse(c, 431, "request_header_fields_too_large", NULL, 0), -1;
  }
  return 0;
}

/* Scans what arrived of the head. 0 more needed, 1 complete (hs_len bytes), -1 refused. */
static int scan_head(ak_hconn_t *c) {
  if (!c->in) return 0;
  const uint8_t *b = c->in + c->in_off;
  size_t n = c->in_len - c->in_off;
  if (!c->hs_started) {
    /* RFC 9112 2.2: empty lines before a request line are ignored */
    while (n >= 2 && b[0] == '\r' && b[1] == '\n') b += 2, n -= 2, c->in_off += 2;
    if (n == 0 || (n == 1 && b[0] == '\r')) return 0;
    c->hs_started = true;
    c->hs_t0 = c->clk->now_ms;
  }
  while (c->hs_pos < n) {
    const uint8_t *lf = memchr(b + c->hs_pos, '\n', n - c->hs_pos);
    if (!lf) {
      c->hs_pos = n;
      break;
    }
    size_t end = (size_t)(lf - b);
    c->hs_pos = end + 1;
    int r = head_line(c, b + c->hs_line, end - c->hs_line, c->hs_line);
    if (r < 0) return -1;
    if (r > 0) {
      c->hs_len = end + 1;
      return 1;
    }
    c->hs_line = end + 1;
  }
  return head_partial(c, b + c->hs_line, n - c->hs_line);
}

static void head_reset(ak_hconn_t *c) {
  c->hs_started = false;
  c->hs_pos = c->hs_line = c->hs_hbytes = c->hs_len = c->hs_toff = c->hs_tlen = 0;
  c->hs_nlines = c->hs_nfields = c->hs_ncl = c->hs_nhost = c->hs_minor = 0;
  c->hs_cl = 0;
  c->te_lines = c->te_n = c->te_chunked = c->te_other = 0;
  c->te_empty = c->te_last_chunked = c->hs_close = c->hs_ka = c->hs_expect = false;
}

/* ---- parser events -------------------------------------------------------------------- */

static void ev_target(void *u, const char *t, size_t n) {
  (void)u, (void)t, (void)n; /* the raw scan located it already */
}

static void ev_field(void *u, const char *name, size_t nlen, const char *value, size_t vlen) {
  ak_hconn_t *c = u;
  struct ak_hreq *r = &c->req;
  if (r->nhdrs == r->hdrs_cap && ak_buf_grow(&r->hdrs, &r->hdrs_cap, r->nhdrs + 1, sizeof *r->hdrs) < 0) {
    c->stop_body = true; /* out of memory: refused below */
    return;
  }
  r->hdrs[r->nhdrs++] = (ak_header_t){name, nlen, value, vlen};
}

static void ev_head(void *u, const ak_hparse_head_t *h) {
  ak_hconn_t *c = u;
  c->p_head = true;
  c->p_method = h->method;
  c->p_major = h->major;
  c->p_minor = h->minor;
  c->p_chunked = h->chunked;
  c->p_has_len = h->has_length;
  c->p_clen = h->content_length;
}

static int ev_body(void *u, const uint8_t *p, size_t n) {
  ak_hconn_t *c = u;
  struct ak_hreq *r = &c->req;
  c->body_bytes += n;
  c->body_last = c->clk->now_ms;
  if (c->p->h->on_body) c->p->h->on_body(c->p->ctx, r, p, n);
  if (r->answered) {
    c->stop_body = true;
    return 1;
  }
  return 0;
}

static void ev_end(void *u) { ((ak_hconn_t *)u)->p_end = true; }

static const ak_hparse_ev_t events = {
  .on_target = ev_target,
  .on_field = ev_field,
  .on_head = ev_head,
  .on_body = ev_body,
  .on_end = ev_end,
};

/* ---- a request's life ----------------------------------------------------------------- */

static void request_reset(ak_hconn_t *c) {
  struct ak_hreq *r = &c->req;
  r->method = r->path = r->query = NULL;
  r->path_len = r->query_len = 0;
  r->nhdrs = 0;
  r->clen = -1;
  r->major = r->minor = 0;
  r->chunked = r->has_body = r->keep_alive = r->expect_100 = r->head_method = false;
  r->in_flight = r->answered = r->suspended = r->lost = false;
  r->data = NULL;
  ak_buf_reset(&r->xh);
  c->p_head = c->p_end = c->p_chunked = c->p_has_len = c->stop_body = false;
  c->p_clen = 0;
  c->p_method = NULL;
  c->body_t0 = c->body_last = c->body_bytes = 0;
  head_reset(c);
}

/* The request's last call. answered: its answer reached the socket. */
static void end_request(ak_hconn_t *c, bool answered) {
  struct ak_hreq *r = &c->req;
  if (!r->in_flight) return;
  r->in_flight = false;
  if (c->p->h->on_done) c->p->h->on_done(c->p->ctx, r, answered);
  atomic_fetch_sub(&((ak_hproto_t *)c->p)->inflight, 1);
}

/* After a handler call that may have answered: the next state. */
static void after_handler(ak_hconn_t *c, bool may_suspend) {
  struct ak_hreq *r = &c->req;
  if (c->st >= AK_HC_CLOSING) return;
  if (r->answered) {
    if (r->lost) {
      end_request(c, false);
      c->st = AK_HC_DEAD;
      return;
    }
    c->st = AK_HC_WRITE;
    return;
  }
  if (may_suspend && r->suspended) {
    c->st = AK_HC_SUSPENDED;
    return;
  }
  if (may_suspend) {
    /* on_end / on_resume must answer or suspend: the client is not left waiting */
    ak_hreq_error(r, 500, "internal", 0);
    after_handler(c, false);
  }
}

static void call_end(ak_hconn_t *c) {
  struct ak_hreq *r = &c->req;
  c->in_end_cb = true;
  if (c->p->h->on_end) c->p->h->on_end(c->p->ctx, r);
  c->in_end_cb = false;
  after_handler(c, true);
}

/* Feeds buffered body bytes to the parser (and so to the handler). */
static void body_step(ak_hconn_t *c) {
  struct ak_hreq *r = &c->req;
  size_t avail = c->in_len - c->in_off;
  if (avail) {
    size_t got = ak_hparse_feed(&c->parser, c->in + c->in_off, avail);
    c->in_off += got;
  }
  if (r->answered) { /* at on_body: the rest of the body is not read; close after the answer */
    after_handler(c, false);
    return;
  }
  const char *err = ak_hparse_error(&c->parser);
  if (err) {
    bad(c, err);
    return;
  }
  if (c->p_end) call_end(c);
}

/* The head is complete and passed the raw checks: copy it, parse it, start the request. */
static void start_request(ak_hconn_t *c) {
  struct ak_hreq *r = &c->req;
  size_t hl = c->hs_len, tl = c->hs_tlen;
  size_t need = hl + tl + 2;
  if (need > c->head_cap) {
    size_t cap = c->head_cap ? c->head_cap : 1024;
    while (cap < need) cap *= 2;
    uint8_t *nh = realloc(c->head, cap);
    if (!nh) {
      refuse(c, 503, "overload", NULL, 1);
      return;
    }
    c->head = nh;
    c->head_cap = cap;
  }
  memcpy(c->head, c->in + c->in_off, hl);
  c->in_off += hl;
  /* path and query, NUL-terminated, after the head */
  char *t = (char *)c->head + hl;
  memcpy(t, c->head + c->hs_toff, tl);
  const char *q = memchr(t, '?', tl);
  size_t pl = q ? (size_t)(q - t) : tl;
  t[pl] = '\0';
  r->path = t;
  r->path_len = pl;
  if (q) {
    memmove(t + pl + 1, q + 1, tl - pl - 1);
    t[tl] = '\0';
    r->query = t + pl + 1;
    r->query_len = tl - pl - 1;
  }
  ak_hparse_reset(&c->parser, &events, c, c->p->lim.max_header_bytes);
  size_t got = ak_hparse_feed(&c->parser, c->head, hl);
  const char *err = ak_hparse_error(&c->parser);
  if (err) {
    if (ak_hparse_error_is_method(&c->parser)) refuse(c, 501, "not_implemented", NULL, 0);
    else bad(c, err);
    return;
  }
  if (c->stop_body) {
    refuse(c, 503, "overload", NULL, 1);
    return;
  }
  /* what the parser derived must be what the raw check saw */
  bool chunked = c->te_lines > 0;
  if (got != hl || !c->p_head || c->p_chunked != chunked || c->p_has_len != (c->hs_ncl == 1) ||
      (c->p_has_len && c->p_clen != c->hs_cl) || c->p_major != 1 || c->p_minor != c->hs_minor) {
    bad(c, "framing disagreement");
    return;
  }
  r->method = c->p_method;
  r->major = 1;
  r->minor = c->hs_minor;
  r->chunked = chunked;
  r->clen = c->p_has_len ? (int64_t)c->hs_cl : -1;
  r->has_body = chunked || (c->p_has_len && c->hs_cl > 0);
  r->keep_alive = r->minor == 1 ? !c->hs_close : (c->hs_ka && !c->hs_close);
  r->expect_100 = c->hs_expect && r->minor == 1 && r->has_body;
  r->head_method = strcmp(r->method, "HEAD") == 0;
  r->in_flight = true;
  c->served++;
  atomic_fetch_add(&((ak_hproto_t *)c->p)->inflight, 1);
  c->st = AK_HC_BODY;
  if (c->p->h->on_head) c->p->h->on_head(c->p->ctx, r);
  if (r->answered) {
    after_handler(c, false);
    return;
  }
  if (r->has_body) {
    if (r->expect_100) ak_buf_append(&c->out, "HTTP/1.1 100 Continue\r\n\r\n", 25);
    c->body_t0 = c->body_last = c->clk->now_ms;
    body_step(c);
    return;
  }
  if (c->p_end) call_end(c);
  else bad(c, "framing disagreement");
}

/* Works through buffered input while the state allows it. */
static void process(ak_hconn_t *c) {
  for (;;) {
    if (c->st == AK_HC_BODY) {
      if (c->in_off == c->in_len) return;
      body_step(c);
      continue;
    }
    if (c->st != AK_HC_HEAD) return;
    int r = scan_head(c);
    if (r < 0) return;
    if (r == 0) {
      if (c->peer_eof) c->st = AK_HC_CLOSING; /* a head cut short: nobody to answer */
      else if (c->draining && c->served && c->in_off == c->in_len) c->st = AK_HC_CLOSING;
      return;
    }
    start_request(c);
  }
}

/* ---- the driver's calls --------------------------------------------------------------- */

void ak_hconn_init(ak_hconn_t *c, const ak_hproto_t *p, const ak_hclock_t *clk, void *io) {
  memset(c, 0, sizeof *c);
  c->p = p;
  c->clk = clk;
  c->io = io;
  c->req.c = c;
  c->req.xh = (ak_buf_t)AK_BUF_INIT;
  c->out = (ak_buf_t)AK_BUF_INIT;
  c->st = AK_HC_HEAD;
  c->since = clk->now_ms;
  request_reset(c);
}

void ak_hconn_free(ak_hconn_t *c) {
  free(c->in);
  free(c->head);
  free(c->req.hdrs);
  ak_buf_free(&c->req.xh);
  ak_buf_free(&c->out);
  c->in = c->head = NULL;
  c->req.hdrs = NULL;
}

static void compact_in(ak_hconn_t *c) {
  if (!c->in_off) return;
  memmove(c->in, c->in + c->in_off, c->in_len - c->in_off);
  c->in_len -= c->in_off;
  c->in_off = 0; /* the head scan's offsets are relative to in_off: nothing else moves */
}

/* At least room bytes free at the end of the input buffer (less only when it reached
 * limit, and then whatever is left). */
static bool reserve_in(ak_hconn_t *c, size_t room, size_t limit) {
  if (c->in_off == c->in_len) c->in_off = c->in_len = 0;
  if (c->in_cap - c->in_len >= room) return true;
  compact_in(c);
  if (c->in_cap - c->in_len >= room) return true;
  if (c->in_cap >= limit) return c->in_cap > c->in_len;
  size_t cap = c->in_cap ? c->in_cap * 2 : IN_INITIAL;
  while (cap - c->in_len < room) cap *= 2;
  if (cap > limit) cap = limit;
  uint8_t *n = realloc(c->in, cap);
  if (!n) return false;
  c->in = n;
  c->in_cap = cap;
  return true;
}

uint8_t *ak_hconn_rbuf(ak_hconn_t *c, size_t *cap) {
  *cap = 0;
  if (c->st >= AK_HC_CLOSING || c->peer_eof) return NULL;
  size_t pending = c->in_len - c->in_off;
  size_t limit;
  if (c->st == AK_HC_HEAD) {
    limit = head_max(c) + IN_MIN_ROOM;
    if (limit < AK_HCONN_PENDING_MAX) limit = AK_HCONN_PENDING_MAX;
  } else if (c->st == AK_HC_BODY) {
    limit = AK_HCONN_PENDING_MAX;
  } else {
    if (pending >= AK_HCONN_PENDING_MAX) return NULL;
    limit = AK_HCONN_PENDING_MAX;
  }
  if (pending >= limit) return NULL;
  if (!reserve_in(c, IN_MIN_ROOM, limit)) return NULL;
  *cap = c->in_cap - c->in_len;
  return c->in + c->in_len;
}

void ak_hconn_input(ak_hconn_t *c, size_t n) {
  if (c->st >= AK_HC_CLOSING) return;
  c->in_len += n;
  process(c);
}

void ak_hconn_feed(ak_hconn_t *c, const uint8_t *p, size_t n) {
  if (c->st >= AK_HC_CLOSING || n == 0) return;
  if (c->in_off == c->in_len) c->in_off = c->in_len = 0;
  if (c->in_cap - c->in_len < n) {
    compact_in(c);
    if (c->in_cap - c->in_len < n) {
      size_t cap = c->in_cap ? c->in_cap : IN_INITIAL;
      while (cap - c->in_len < n) cap *= 2;
      uint8_t *nb = realloc(c->in, cap);
      if (!nb) {
        ak_hconn_abort(c);
        return;
      }
      c->in = nb;
      c->in_cap = cap;
    }
  }
  memcpy(c->in + c->in_len, p, n);
  ak_hconn_input(c, n);
}

void ak_hconn_eof(ak_hconn_t *c) {
  c->peer_eof = true;
  switch (c->st) {
  case AK_HC_HEAD:
    process(c); /* complete requests already buffered are still answered */
    if (c->st == AK_HC_HEAD) c->st = AK_HC_CLOSING;
    break;
  case AK_HC_BODY: /* the body will not come */
    end_request(c, false);
    c->st = AK_HC_DEAD;
    break;
  case AK_HC_SUSPENDED: /* the client left: the answer is not sent, on_done(false) after on_resume */
    c->req.lost = true;
    break;
  default:
    break;
  }
}

const uint8_t *ak_hconn_out(const ak_hconn_t *c, size_t *n) {
  *n = c->out.len - c->out_off;
  return *n ? (const uint8_t *)c->out.p + c->out_off : NULL;
}

void ak_hconn_out_done(ak_hconn_t *c, size_t n) {
  c->out_off += n;
  if (c->out_off >= c->out.len) {
    c->out_off = 0;
    if (c->out.cap > OUT_KEEP) ak_buf_free(&c->out);
    else ak_buf_reset(&c->out);
  }
}

void ak_hconn_sent(ak_hconn_t *c) {
  if (c->st != AK_HC_WRITE || c->out.len > c->out_off) return;
  end_request(c, true);
  bool close = c->close_after || c->stopping;
  request_reset(c);
  c->close_after = false;
  c->since = c->clk->now_ms;
  if (close) {
    c->st = c->stopping ? AK_HC_DEAD : AK_HC_CLOSING;
    return;
  }
  c->st = AK_HC_HEAD;
  process(c);
  if (c->st == AK_HC_HEAD && c->peer_eof && c->in_off == c->in_len) c->st = AK_HC_CLOSING;
}

void ak_hconn_tick(ak_hconn_t *c) {
  const ak_hlimits_t *l = &c->p->lim;
  uint64_t now = c->clk->now_ms;
  switch (c->st) {
  case AK_HC_HEAD:
    if (c->hs_started) {
      if (now - c->hs_t0 >= l->header_timeout_ms) refuse(c, 408, "request_timeout", NULL, 0);
    } else if (now - c->since >= (c->served ? l->idle_timeout_ms : l->header_timeout_ms)) {
      c->st = AK_HC_CLOSING; /* silently: nothing was asked */
    }
    break;
  case AK_HC_BODY: {
    uint64_t took = now - c->body_t0;
    if (now - c->body_last >= l->body_timeout_ms ||
        (took >= l->body_timeout_ms && c->body_bytes * 1000 / took < l->body_min_rate))
      refuse(c, 408, "request_timeout", NULL, 0);
    break;
  }
  case AK_HC_WRITE:
  case AK_HC_CLOSING:
    if (c->out.len > c->out_off && now - c->write_t0 >= l->write_timeout_ms) ak_hconn_abort(c);
    break;
  default:
    break;
  }
}

void ak_hconn_resumed(ak_hconn_t *c) {
  struct ak_hreq *r = &c->req;
  if (c->st != AK_HC_SUSPENDED) return;
  r->suspended = false;
  c->in_end_cb = true;
  if (c->p->h->on_resume) c->p->h->on_resume(c->p->ctx, r);
  c->in_end_cb = false;
  after_handler(c, true);
}

void ak_hconn_drain(ak_hconn_t *c) {
  c->draining = true;
  if (c->st == AK_HC_HEAD && !c->hs_started && c->served && c->in_off == c->in_len) c->st = AK_HC_CLOSING;
}

void ak_hconn_stop(ak_hconn_t *c) {
  c->stopping = true;
  c->draining = true;
  if (c->st == AK_HC_SUSPENDED || c->st == AK_HC_WRITE) return;
  ak_hconn_abort(c);
}

void ak_hconn_abort(ak_hconn_t *c) {
  if (c->st == AK_HC_SUSPENDED) {
    c->req.lost = true;
    return;
  }
  end_request(c, false);
  c->st = AK_HC_DEAD;
}

void ak_hconn_refuse(ak_hconn_t *c, unsigned status, const char *code, int retry_after_s) {
  refuse(c, status, code, NULL, retry_after_s);
}

bool ak_hconn_idle(const ak_hconn_t *c) {
  return c->st == AK_HC_HEAD && c->served && !c->hs_started && c->in_off == c->in_len;
}

/* ---- server.h: one request ------------------------------------------------------------ */

const char *ak_hreq_method(const ak_hreq_t *r) { return r->method; }

const char *ak_hreq_path(const ak_hreq_t *r, size_t *len) {
  if (len) *len = r->path_len;
  return r->path;
}

const char *ak_hreq_query(const ak_hreq_t *r, size_t *len) {
  if (len) *len = r->query ? r->query_len : 0;
  return r->query;
}

size_t ak_hreq_headers(const ak_hreq_t *r, const ak_header_t **out) {
  *out = r->hdrs;
  return r->nhdrs;
}

const char *ak_hreq_header(const ak_hreq_t *r, const char *name, size_t *len) {
  size_t nl = strlen(name);
  for (size_t i = 0; i < r->nhdrs; i++) {
    const ak_header_t *h = &r->hdrs[i];
    if (h->name_len == nl && strncasecmp(h->name, name, nl) == 0) {
      if (len) *len = h->value_len;
      return h->value;
    }
  }
  if (len) *len = 0;
  return NULL;
}

int64_t ak_hreq_content_length(const ak_hreq_t *r) { return r->chunked ? -1 : r->clen; }

const struct sockaddr *ak_hreq_peer(const ak_hreq_t *r, socklen_t *len) {
  if (len) *len = r->c->peer_len;
  return r->c->peer;
}

void ak_hreq_client(const ak_hreq_t *r, const ak_cidr_t *proxies, size_t nproxies, ak_netaddr_t *out) {
  memset(out, 0, sizeof *out);
  ak_netaddr_t peer;
  if (!r->c->peer || !ak_netaddr_from_sockaddr(r->c->peer, &peer)) return;
  *out = peer;
  if (!nproxies || !ak_netaddr_in_any(proxies, nproxies, &peer)) return;
  /* the X-Forwarded-For lines in order; the last 16 kept: the walk starts from the right */
  const char *v[16];
  size_t len[16], n = 0;
  const ak_header_t *h;
  size_t nh = ak_hreq_headers(r, &h);
  for (size_t i = 0; i < nh; i++) {
    if (h[i].name_len != 15 || strncasecmp(h[i].name, "X-Forwarded-For", 15) != 0) continue;
    if (n == 16) {
      memmove(&v[0], &v[1], 15 * sizeof v[0]);
      memmove(&len[0], &len[1], 15 * sizeof len[0]);
      n = 15;
    }
    v[n] = h[i].value;
    len[n++] = h[i].value_len;
  }
  ak_netaddr_client(&peer, proxies, nproxies, v, len, n, out);
}

bool ak_hreq_peer_cert_sha256(const ak_hreq_t *r, uint8_t out[32]) {
  const ak_hconn_ops_t *ops = r->c->p->ops;
  return ops && ops->peer_sha256 && ops->peer_sha256(r->c, out);
}

void *ak_hreq_data(const ak_hreq_t *r) { return r->data; }

void ak_hreq_set_data(ak_hreq_t *r, void *data) { r->data = data; }

ak_hserver_t *ak_hreq_server(const ak_hreq_t *r) { return r->c->p->server; }

static bool token_ok(const char *s) {
  if (!*s) return false;
  for (; *s; s++)
    if (!is_tchar((uint8_t)*s)) return false;
  return true;
}

static bool value_ok(const char *s) {
  for (; *s; s++)
    if (((uint8_t)*s < 0x20 && *s != '\t') || *s == 0x7f) return false;
  return true;
}

void ak_hreq_add_header(ak_hreq_t *r, const char *name, const char *value) {
  if (r->answered || !name || !value || !token_ok(name) || !value_ok(value)) return;
  static const char *const ours[] = {"content-type", "content-length", "date", "connection", "transfer-encoding"};
  for (size_t i = 0; i < sizeof ours / sizeof ours[0]; i++)
    if (strcasecmp(name, ours[i]) == 0) return;
  put(&r->xh, name);
  put(&r->xh, ": ");
  put(&r->xh, value);
  put(&r->xh, "\r\n");
}

void ak_hreq_reply(ak_hreq_t *r, unsigned status, const char *ctype, const void *body, size_t len) {
  ak_hconn_t *c = r->c;
  if (r->answered || !r->in_flight || c->st >= AK_HC_WRITE) return;
  r->answered = true;
  if (r->lost) return; /* the client left while the request was held */
  bool body_unread = r->has_body && !c->p_end;
  bool close = !r->keep_alive || body_unread || c->draining || c->stopping;
  c->close_after = close;
  if (r->xh.failed) ak_buf_reset(&r->xh);
  emit(c, status, ctype, body, len, &r->xh, close, r->head_method, r->minor == 0 && !close);
}

void ak_hreq_error(ak_hreq_t *r, unsigned status, const char *code, int retry_after_s) {
  char body[160];
  int n = snprintf(body, sizeof body, "{\"error\":\"%s\"}", code ? code : "error");
  if (n < 0 || (size_t)n >= sizeof body) n = 0;
  if (retry_after_s > 0 && !r->answered) {
    char ra[16];
    snprintf(ra, sizeof ra, "%d", retry_after_s);
    ak_hreq_add_header(r, "Retry-After", ra);
  }
  ak_hreq_reply(r, status, "application/json", body, (size_t)n);
}

void ak_hreq_suspend(ak_hreq_t *r) {
  if (r->c->in_end_cb && !r->answered) r->suspended = true;
}

void ak_hreq_resume(ak_hreq_t *r) {
  const ak_hconn_ops_t *ops = r->c->p->ops;
  if (ops && ops->resume) ops->resume(r->c);
}
