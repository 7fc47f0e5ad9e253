/* The request parser behind http/parse.h, on Debian's http_parser 2.9.4. Owns the
 * translation of the library's callbacks into our events (field and value pieces joined,
 * values trimmed, the target and fields reported in order, the end of a message reported
 * only after its last framing byte was checked) and the strict check of chunked framing
 * the library lets through (it accepts "5 \r\n", for one). http_parser's types appear in
 * this file only. Never allocates, never copies the caller's bytes, never answers anything
 * itself: the connection turns an error into its 400 / 501. */
#include <string.h>
#include <http_parser.h>
#include "http/parse.h"

/* The chunked-framing checker: a second reading of every byte the library did not report
 * as body, in the grammar of RFC 9112 section 7.1. */
enum {
  C_SIZE0,    /* first hex digit of a chunk size */
  C_SIZE,     /* more hex digits, BWS, ';' or CR */
  C_BWS,      /* whitespace after the size: only more of it or ';' */
  C_EXT,      /* chunk extensions up to CR */
  C_SIZE_LF,  /* LF ending the size line */
  C_DATA_CR,  /* the chunk's data was reported; CR follows */
  C_DATA_LF,
  C_TLINE0,   /* start of a trailer line or of the final CRLF */
  C_TLINE,
  C_TLINE_LF,
  C_FIN_LF,
  C_END,
};

typedef struct hp {
  http_parser p;
  const ak_hparse_ev_t *ev;
  void *u;
  const char *err;
  bool err_method;
  bool head_done, done, end_pending, in_head_feed, chunked;
  /* a field or value being joined from pieces; the target until the first field */
  const char *target, *f, *v;
  size_t target_len, flen, vlen;
  int have; /* 0 nothing pending, 1 a name, 2 a name and a value */
  bool target_sent;
  /* chunked framing */
  int cs;
  uint64_t csize;
  unsigned cdigits;
  size_t run, max_run;
  const uint8_t *scan; /* the next byte of this feed the checker has not seen */
} hp_t;

_Static_assert(sizeof(hp_t) <= sizeof(ak_hparse_t), "ak_hparse_t.opaque too small");
_Static_assert(_Alignof(hp_t) <= 16, "ak_hparse_t alignment");

static hp_t *hp_of(http_parser *p) { return (hp_t *)(void *)p; }

static bool is_hex(uint8_t c) { return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f'); }

static unsigned hex_val(uint8_t c) { return c <= '9' ? (unsigned)(c - '0') : (unsigned)((c | 0x20) - 'a' + 10); }

static int fail(hp_t *h, const char *why) {
  if (!h->err) h->err = why;
  if (HTTP_PARSER_ERRNO(&h->p) == HPE_OK) http_parser_pause(&h->p, 1); /* (it refuses to pause an error) */
  return 0;
}

/* Checks framing bytes [from, to). false (and err set) on the first wrong byte. */
static bool check_framing(hp_t *h, const uint8_t *from, const uint8_t *to) {
  for (const uint8_t *q = from; q < to; q++) {
    uint8_t c = *q;
    if (++h->run > h->max_run) return fail(h, "chunk framing too long"), false; /* per byte: split-proof */
    switch (h->cs) {
    case C_SIZE0:
      if (!is_hex(c)) return fail(h, "bad chunk size"), false;
      h->csize = hex_val(c);
      h->cdigits = 1;
      h->cs = C_SIZE;
      break;
    case C_SIZE:
      if (is_hex(c)) {
        if (h->csize >> 56) return fail(h, "chunk size too large"), false;
        h->csize = (h->csize << 4) | hex_val(c);
        if (++h->cdigits > 32) return fail(h, "bad chunk size"), false;
      } else if (c == ';') {
        h->cs = C_EXT;
      } else if (c == ' ' || c == '\t') {
        h->cs = C_BWS;
      } else if (c == '\r') {
        h->cs = C_SIZE_LF;
      } else {
        return fail(h, "bad chunk size"), false;
      }
      break;
    case C_BWS:
      if (c == ';') h->cs = C_EXT;
      else if (c != ' ' && c != '\t') return fail(h, "bad chunk size"), false;
      break;
    case C_EXT:
      if (c == '\r') h->cs = C_SIZE_LF;
      else if ((c < 0x20 && c != '\t') || c == 0x7f) return fail(h, "bad chunk extension"), false;
      break;
    case C_SIZE_LF:
      if (c != '\n') return fail(h, "bare CR in chunk framing"), false;
      h->cs = h->csize ? C_DATA_CR : C_TLINE0;
      break;
    case C_DATA_CR:
      if (c != '\r') return fail(h, "chunk data longer than its size"), false;
      h->cs = C_DATA_LF;
      break;
    case C_DATA_LF:
      if (c != '\n') return fail(h, "bare CR in chunk framing"), false;
      h->cs = C_SIZE0;
      break;
    case C_TLINE0:
      if (c == '\r') h->cs = C_FIN_LF;
      else if (c == ' ' || c == '\t') return fail(h, "obs-fold in trailer"), false;
      else if (c < 0x20 || c == 0x7f) return fail(h, "control byte in trailer"), false;
      else h->cs = C_TLINE;
      break;
    case C_TLINE:
      if (c == '\r') h->cs = C_TLINE_LF;
      else if ((c < 0x20 && c != '\t') || c == 0x7f) return fail(h, "control byte in trailer"), false;
      break;
    case C_TLINE_LF:
      if (c != '\n') return fail(h, "bare CR in trailer"), false;
      h->cs = C_TLINE0;
      break;
    case C_FIN_LF:
      if (c != '\n') return fail(h, "bare CR in chunk framing"), false;
      h->cs = C_END;
      break;
    default:
      return fail(h, "bytes after the last chunk"), false;
    }
  }
  return true;
}

static void trim(const char **p, size_t *n) {
  while (*n && ((*p)[0] == ' ' || (*p)[0] == '\t')) (*p)++, (*n)--;
  while (*n && ((*p)[*n - 1] == ' ' || (*p)[*n - 1] == '\t')) (*n)--;
}

static int send_target(hp_t *h) {
  if (h->target_sent) return 0;
  h->target_sent = true;
  if (h->ev->on_target) h->ev->on_target(h->u, h->target ? h->target : "", h->target_len);
  return 0;
}

static int send_field(hp_t *h) {
  if (h->have == 0) return 0;
  const char *v = h->have == 2 ? h->v : "";
  size_t vl = h->have == 2 ? h->vlen : 0;
  h->have = 0;
  trim(&v, &vl);
  if (h->ev->on_field) h->ev->on_field(h->u, h->f, h->flen, v, vl);
  return 0;
}

/* A piece joins the previous one only when it continues it in memory: a head arrives in
 * one piece, so anything else is a caller breaking the contract. */
static bool join(const char **p, size_t *n, const char *at, size_t len) {
  if (!*p) {
    *p = at;
    *n = len;
    return true;
  }
  if (*p + *n != at) return false;
  *n += len;
  return true;
}

static int cb_url(http_parser *p, const char *at, size_t len) {
  hp_t *h = hp_of(p);
  if (!join(&h->target, &h->target_len, at, len)) return fail(h, "head not fed in one piece");
  return 0;
}

static int cb_field(http_parser *p, const char *at, size_t len) {
  hp_t *h = hp_of(p);
  if (h->head_done) return 0; /* a trailer: checked as framing, not reported */
  send_target(h);
  if (h->have == 2) send_field(h);
  if (h->have == 0) {
    h->f = h->v = NULL;
    h->flen = h->vlen = 0;
    h->have = 1;
  }
  if (!join(&h->f, &h->flen, at, len)) return fail(h, "head not fed in one piece");
  return 0;
}

static int cb_value(http_parser *p, const char *at, size_t len) {
  hp_t *h = hp_of(p);
  if (h->head_done) return 0;
  h->have = 2;
  if (!join(&h->v, &h->vlen, at, len)) return fail(h, "head not fed in one piece");
  return 0;
}

static int cb_headers_complete(http_parser *p) {
  hp_t *h = hp_of(p);
  send_target(h);
  send_field(h);
  h->head_done = true;
  h->chunked = (p->flags & F_CHUNKED) != 0;
  ak_hparse_head_t hd = {
    .method = http_method_str((enum http_method)p->method),
    .major = p->http_major,
    .minor = p->http_minor,
    .chunked = h->chunked,
    .has_length = (p->flags & F_CONTENTLENGTH) != 0,
    .content_length = (p->flags & F_CONTENTLENGTH) ? p->content_length : 0,
  };
  if (h->ev->on_head) h->ev->on_head(h->u, &hd);
  return 0;
}

static int cb_body(http_parser *p, const char *at, size_t len) {
  hp_t *h = hp_of(p);
  if (h->err) return 0;
  if (h->in_head_feed) return fail(h, "head not fed alone");
  const uint8_t *b = (const uint8_t *)at;
  if (h->chunked) {
    if (!check_framing(h, h->scan, b)) return 0;
    if (h->cs != C_DATA_CR) return fail(h, "chunk framing disagreement");
    h->run = 0;
  }
  h->scan = b + len;
  if (h->ev->on_body && h->ev->on_body(h->u, b, len)) http_parser_pause(&h->p, 1);
  return 0;
}

static int cb_message_complete(http_parser *p) {
  hp_t *h = hp_of(p);
  h->end_pending = true; /* reported once the last framing bytes are checked */
  http_parser_pause(p, 1);
  return 0;
}

static const http_parser_settings settings = {
  .on_url = cb_url,
  .on_header_field = cb_field,
  .on_header_value = cb_value,
  .on_headers_complete = cb_headers_complete,
  .on_body = cb_body,
  .on_message_complete = cb_message_complete,
};

void ak_hparse_reset(ak_hparse_t *hp, const ak_hparse_ev_t *ev, void *u, size_t max_framing) {
  hp_t *h = (hp_t *)(void *)hp->opaque;
  memset(h, 0, sizeof *h);
  http_parser_init(&h->p, HTTP_REQUEST);
  h->ev = ev;
  h->u = u;
  h->max_run = max_framing ? max_framing : 8192;
  h->cs = C_SIZE0;
}

static const char *reason(const hp_t *h, enum http_errno e) {
  switch (e) {
  case HPE_INVALID_METHOD: return "unknown method";
  case HPE_INVALID_VERSION: return "bad HTTP version";
  case HPE_INVALID_URL:
  case HPE_INVALID_HOST:
  case HPE_INVALID_PORT:
  case HPE_INVALID_PATH:
  case HPE_INVALID_QUERY_STRING:
  case HPE_INVALID_FRAGMENT: return "bad request target";
  case HPE_INVALID_HEADER_TOKEN: return "bad header field";
  case HPE_INVALID_CONTENT_LENGTH: return h->head_done ? "bad chunk size" : "bad Content-Length";
  case HPE_UNEXPECTED_CONTENT_LENGTH: return "Content-Length with Transfer-Encoding";
  case HPE_INVALID_TRANSFER_ENCODING: return "bad Transfer-Encoding";
  case HPE_INVALID_CHUNK_SIZE: return "bad chunk size";
  case HPE_HEADER_OVERFLOW: return "head too large";
  case HPE_LF_EXPECTED:
  case HPE_STRICT: return h->head_done ? "bad chunk framing" : "bad line ending";
  default: return h->head_done ? "bad body framing" : "unparsable head";
  }
}

size_t ak_hparse_feed(ak_hparse_t *hp, const uint8_t *data, size_t n) {
  hp_t *h = (hp_t *)(void *)hp->opaque;
  if (h->err || h->done || n == 0) return 0;
  bool head_feed = !h->head_done;
  h->in_head_feed = head_feed;
  h->scan = data;
  size_t got = http_parser_execute(&h->p, &settings, (const char *)data, n);
  h->in_head_feed = false;
  enum http_errno e = HTTP_PARSER_ERRNO(&h->p);
  if (h->err) return got;
  if (e != HPE_OK && e != HPE_PAUSED) {
    /* The library (built lenient) may stop bytes after the first wrong one, or at it;
     * the checker reads up to and including the byte it stopped at, so the reason names
     * the first wrong byte whatever the cuts between feeds. */
    const uint8_t *upto = data + (got < n ? got + 1 : got);
    if (h->chunked && !head_feed && h->scan <= upto && !check_framing(h, h->scan, upto)) return got;
    h->err = reason(h, e);
    h->err_method = e == HPE_INVALID_METHOD;
    return got;
  }
  if (e == HPE_PAUSED) http_parser_pause(&h->p, 0);
  if (h->chunked && !head_feed && !check_framing(h, h->scan, data + got)) return got;
  if (h->end_pending) {
    if (h->chunked && h->cs != C_END) {
      h->err = "chunk framing disagreement";
      return got;
    }
    h->end_pending = false;
    h->done = true;
    if (h->ev->on_end) h->ev->on_end(h->u);
  }
  return got;
}

const char *ak_hparse_error(const ak_hparse_t *hp) { return ((const hp_t *)(const void *)hp->opaque)->err; }

bool ak_hparse_error_is_method(const ak_hparse_t *hp) {
  return ((const hp_t *)(const void *)hp->opaque)->err_method;
}

bool ak_hparse_done(const ak_hparse_t *hp) { return ((const hp_t *)(const void *)hp->opaque)->done; }

void ak_hparse_allow_head(size_t n) {
  if (n > 80 * 1024 && n < UINT32_MAX) http_parser_set_max_header_size((uint32_t)n);
}
