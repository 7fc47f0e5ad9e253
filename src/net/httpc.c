/* The shared HTTP client (net/httpc.h) on libcurl multi. Owns a few worker threads per
 * client (one per online CPU, at most MAX_WORKERS, started by the first request), each
 * with its own CURLM driven by curl_multi_socket_action from its own epoll set, its own
 * connection cache and idle easy handles, a bounded queue and a free list of answered
 * requests for submit to reuse. A worker needs no other worker's state. Requests fill the
 * first worker up to spread_at before the next gets any (pick_worker; 1 by default: an
 * idle worker first, else the least loaded, see DEFAULT_SPREAD). A request is
 * built once, by submit, in one block (body, header lines and the curl_slist nodes that
 * point at them; a body from a file stays there, read in chunks as it is sent); the
 * worker is woken through an eventfd only when it sleeps, once per sleep, and answers the
 * completions of one turn back to back. Also owns the outstanding bound, cancellation by
 * owner, and the address check of every connection a request uses. Never blocks a caller
 * on I/O (submit queues, the threads do the rest), never calls back while holding a lock,
 * never follows a redirect or uses a proxy, never reads past a request's
 * max_response_bytes, and never puts a URL or a header value into a `why`.
 *
 * Address checks: libcurl resolves the name (its threaded resolver, off the worker), and
 * CURLOPT_OPENSOCKETFUNCTION judges each sockaddr right before the socket for it is
 * created, so the address judged is the address connected to, whatever DNS answers next
 * (rebinding), and a refused address never sees a TCP handshake. A kept connection may
 * have been opened for a request judged by another policy (or by none), so the address of
 * the connection a request is about to go out on is judged again (CURLOPT_PREREQFUNCTION,
 * before a byte of it is sent). Proxies are disabled (CURLOPT_PROXY "", CURLOPT_NOPROXY
 * "*"): through one, the check would judge the proxy. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <curl/curl.h>
#include "core/buf.h"
#include "core/header.h"
#include "core/instance.h"
#include "net/httpc.h"

#define MAX_WORKERS 4        /* worker threads per client, at most (one per online CPU) */
#define DEFAULT_ACTIVE 64    /* transfers in one worker's CURLM at once */
#define NODE_ACTIVE 256      /* the same for the node's client, shared by every sink */
/* requests on a worker before the next one gets any (pick_worker). 1: a request goes to a
 * worker with nothing under way, else to the least loaded. 32 (the first worker takes a
 * burst of 32 alone) halved the client's context switches in bench/http_sink.sh, but in the
 * node's drain, where the dispatch thread shares the two cores, it cost 1.44x the CPU per
 * delivery (bench/ab.sh, 5 rounds, 23:52 Dec 1: 116.6 against 80.9 us; with 1: 1.015) */
#define DEFAULT_SPREAD 1
#define EVENTS 256           /* epoll events taken per wait */
#define REQ_MIN 2048         /* a request's allocation, at least (then powers of two) */
#define REQ_KEEP_MAX 32768   /* larger requests are freed when answered, not kept for reuse */

typedef struct worker worker_t;
typedef struct req req_t;

/* worker.fds: a socket this worker opened (and curl closes through on_close_socket), what
 * the epoll set holds for it (FD_IN/FD_OUT, none = not in the set), and whether curl
 * currently wants it watched. */
enum { FD_OURS = 1, FD_IN = 2, FD_OUT = 4, FD_WATCHED = 8 };

/* How a request is sent: with a body (POST, or a custom method), or without (GET, HEAD). */
enum { K_POST, K_GET, K_HEAD };

/* An easy handle and the request it carries now. The handle's callbacks get this, set
 * once per handle, so a reused handle needs no per-request callback data. It never leaves
 * its worker (its connections are in that worker's cache). */
typedef struct easy {
  CURL *e;
  worker_t *w;
  req_t *r;
  char *url;         /* as last set on the handle (curl takes it up again on every transfer) */
  long timeout_ms;   /* as last set; -1 = never */
  int kind;          /* K_* last set */
  char custom[24];   /* CUSTOMREQUEST last set ("" = none) */
  bool sigv4;        /* AWS_SIGV4 and USERPWD are set: cleared when the request ends */
  /* the last address a request on this handle was allowed to send to, and by whom: the
   * next one to the same address under the same policy needs no second look */
  ak_httpc_addr_fn ok_fn;
  void *ok_ctx;
  int ok_port;
  char ok_ip[48];
} easy_t;

struct req {
  req_t *next, *prev;
  worker_t *w;       /* the one whose queue (then CURLM) holds it */
  easy_t *easy;      /* while in the CURLM */
  size_t cap;        /* bytes of mem */
  struct curl_slist *hdrs; /* nlines nodes at the start of mem (built by submit, never by
                              curl_slist_append: no allocation per line), or NULL */
  ak_httpc_done_fn done;
  void *ctx;
  const void *owner;
  ak_httpc_addr_fn addr_ok;
  void *addr_ctx;
  const char *url;
  const char *custom; /* NULL = POST (K_POST), GET or HEAD */
  const char *sigv4;  /* CURLOPT_AWS_SIGV4, or NULL */
  const char *userpwd; /* with sigv4: key id and secret (wiped when r is recycled) */
  size_t userpwd_len;
  int kind;
  const uint8_t *body;
  size_t body_len;
  int body_fd;        /* >= 0: the body is body_len bytes of this file from body_off (the
                         caller's, open until the completion); body is NULL then */
  uint64_t body_off;
  uint64_t body_pos;  /* bytes of the file region handed to curl so far (on_read, on_seek) */
  int body_errno;     /* reading the file failed (-1: it ended before body_len): why says so */
  const char *lines;  /* nlines header lines, NUL-terminated, back to back */
  size_t nlines;
  long timeout_ms;
  size_t max_resp;
  bool keep_body;
  size_t nwant;
  const char *want[AK_HTTPC_MAX_WANT];
  size_t want_len[AK_HTTPC_MAX_WANT];
  char *val[AK_HTTPC_MAX_WANT]; /* AK_HTTPC_VALUE_MAX bytes each */
  bool have[AK_HTTPC_MAX_WANT];
  size_t resp_bytes;
  ak_buf_t resp;      /* keep_body */
  bool truncated;
  bool refused;       /* addr_ok said no: why holds its first reason */
  bool nomem;
  ak_httpc_result_t result; /* set when it finished (settle), answered after */
  long status;
  char why[128];
  union {              /* the caller's bytes (ak_httpc_req_t.user) */
    max_align_t align;
    unsigned char bytes[AK_HTTPC_USER_MAX];
  } user;
  char mem[];         /* header list nodes, body, URL, method, header lines, wanted names,
                         value slots */
};
_Static_assert(offsetof(req_t, mem) % _Alignof(struct curl_slist) == 0, "list nodes start mem");

/* ak_httpc_cancel's order to one worker: answered when done is set (under mu). */
typedef struct cancel {
  struct cancel *next;
  const void *owner;
  bool done;
} cancel_t;

/* Each its own allocation (not an array of structs), so that one worker's queue and
 * counters do not sit on the cache line of the next one's. */
struct worker {
  ak_httpc_t *c;
  unsigned index;
  CURLM *multi;
  int epfd;            /* the sockets curl asks to watch (on_socket), and evfd */
  int evfd;            /* submit/cancel/free -> worker: work queued, or stop; edge-triggered
                          in epfd, so every write is one event and it is never read */
  int64_t deadline_us; /* curl's timer (on_timer), CLOCK_MONOTONIC; -1 = none; worker only */
  uint8_t *fds;        /* FD_* per descriptor number, for sockets on_open_socket made; worker only */
  size_t nfds;
  pthread_t thread;
  bool thread_started;
  pthread_mutex_t mu;
  pthread_cond_t cv;   /* a cancel order answered */
  bool sync_init;
  req_t *q_head, *q_tail; /* waiting for a slot; under mu */
  cancel_t *cancels;      /* under mu */
  bool stop;              /* under mu */
  atomic_size_t load;     /* queued + active here: submit prefers the lighter worker */
  atomic_bool sleeping;   /* set under mu: the worker waits in epoll_wait with nothing queued,
                             so the next submit wakes it (one eventfd write per sleep) */
  req_t *active;          /* in the CURLM; worker thread only */
  req_t *done_head, *done_tail; /* finished, to be answered together; worker thread only */
  req_t *recycle;         /* answered, back to free_reqs at the end of a batch; worker only */
  size_t nrecycle;
  /* Answered requests kept for reuse by submit (no malloc and no free of another
   * thread's memory per request): under free_mu, a lock of its own so that filling a
   * request does not hold up the queue. */
  pthread_mutex_t free_mu;
  req_t *free_reqs;
  size_t nfree;
  easy_t **spare;         /* idle handles for reuse, max_active at most; worker thread only */
  size_t nspare;
};

struct ak_httpc {
  char name[16];
  size_t max_outstanding;
  unsigned max_active;
  /* Queued + active over all workers. Raised by submit only below the bound (a CAS, so
   * the bound holds without a client-wide lock); lowered as each request is answered. */
  atomic_size_t outstanding;
  size_t spread_at;        /* pick_worker: requests on a worker before the next gets any */
  atomic_bool started;     /* the threads run (set once, under start_mu) */
  bool start_failed;       /* under start_mu */
  pthread_mutex_t start_mu;
  worker_t *workers[MAX_WORKERS];
  size_t nworkers;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_FAILED_INIT;
static void curl_init(void) { curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

static int64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void wake_worker(worker_t *w) {
  uint64_t one = 1;
  /* EAGAIN only once the counter reaches its maximum (2^64 - 2 writes); an event is
   * pending then anyway */
  if (write(w->evfd, &one, sizeof one) < 0) {}
}

/* ---- answering -------------------------------------------------------------------- */

/* A signed request's secret does not outlive it in memory that is reused or freed. */
static void req_wipe(req_t *r) {
  if (r->userpwd_len) explicit_bzero((void *)r->userpwd, r->userpwd_len);
  r->userpwd_len = 0;
}

/* An answered request: its memory waits on the worker's recycle list until the end of the
 * batch, then goes to free_reqs for submit to reuse (or back to malloc when it is large or
 * enough are kept already). Worker thread. */
static void req_recycle(worker_t *w, req_t *r) {
  req_wipe(r);
  ak_buf_free(&r->resp);
  r->next = w->recycle;
  w->recycle = r;
  w->nrecycle++;
}

static void recycle_flush(worker_t *w) {
  if (!w->recycle) return;
  size_t keep_max = w->c->max_active;
  req_t *drop = NULL;
  pthread_mutex_lock(&w->free_mu);
  while (w->recycle) {
    req_t *r = w->recycle;
    w->recycle = r->next;
    if (w->nfree < keep_max && r->cap <= REQ_KEEP_MAX) {
      r->next = w->free_reqs;
      w->free_reqs = r;
      w->nfree++;
    } else {
      r->next = drop;
      drop = r;
    }
  }
  w->nrecycle = 0;
  pthread_mutex_unlock(&w->free_mu);
  while (drop) {
    req_t *r = drop;
    drop = r->next;
    free(r);
  }
}

/* Calls done exactly once, then recycles the request. Worker thread. What the completion
 * shows points into the request, which is not reused before done returns. The request's
 * place in the bound is given back before done, so a caller woken by it finds the place
 * free. */
static void answer(req_t *r, ak_httpc_resp_t *rs) {
  worker_t *w = r->w;
  const char *vals[AK_HTTPC_MAX_WANT];
  for (size_t i = 0; i < r->nwant; i++) vals[i] = r->have[i] ? r->val[i] : NULL;
  rs->headers = r->nwant ? vals : NULL;
  rs->body_bytes = r->resp_bytes;
  rs->truncated = r->truncated;
  if (r->keep_body && rs->result == AK_HTTPC_OK) rs->body = (const uint8_t *)(r->resp.p ? r->resp.p : "");
  if (!rs->why) rs->why = "";
  rs->user = r->user.bytes;
  atomic_fetch_sub(&w->load, 1);
  atomic_fetch_sub(&w->c->outstanding, 1);
  r->done(r->ctx, rs);
  req_recycle(w, r);
}

static void answer_cancelled(req_t *r) {
  ak_httpc_resp_t rs = {.result = AK_HTTPC_CANCELLED, .why = "cancelled"};
  r->resp_bytes = 0;
  r->truncated = false;
  for (size_t i = 0; i < r->nwant; i++) r->have[i] = false;
  answer(r, &rs);
}

/* Answers every finished request (settle's batch) back to back, so that a caller woken
 * by the first completion finds the others already queued. */
static void answer_finished(worker_t *w) {
  while (w->done_head) {
    req_t *r = w->done_head;
    w->done_head = r->next;
    r->next = NULL;
    ak_httpc_resp_t rs = {.result = r->result, .status = r->status, .why = r->why};
    answer(r, &rs);
  }
  w->done_tail = NULL;
  recycle_flush(w);
}

static void finished(worker_t *w, req_t *r) {
  r->next = NULL;
  if (w->done_tail) w->done_tail->next = r;
  else w->done_head = r;
  w->done_tail = r;
}

static void transport_why(CURLcode rc, req_t *r) {
  const char *what = curl_easy_strerror(rc);
  char *buf = r->why;
  size_t len = sizeof r->why;
  r->result = AK_HTTPC_FAILED;
  switch (rc) {
  case CURLE_OPERATION_TIMEDOUT:
    r->result = AK_HTTPC_TIMEOUT;
    snprintf(buf, len, "timeout");
    break;
  case CURLE_COULDNT_RESOLVE_HOST:
    snprintf(buf, len, "resolve: %s", what);
    break;
  case CURLE_COULDNT_CONNECT:
    snprintf(buf, len, "connect: %s", what);
    break;
  case CURLE_SSL_CONNECT_ERROR:
  case CURLE_PEER_FAILED_VERIFICATION:
  case CURLE_SSL_CERTPROBLEM:
  case CURLE_SSL_CIPHER:
  case CURLE_SSL_CACERT_BADFILE:
    snprintf(buf, len, "tls: %s", what);
    break;
  default:
    snprintf(buf, len, "transport: %s", what);
    break;
  }
}

/* ---- curl's callbacks ------------------------------------------------------------- */

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *ud) {
  req_t *r = ((easy_t *)ud)->r;
  size_t n = size * nmemb, take = n;
  if (r->resp_bytes + n > r->max_resp) {
    /* Enough read: keep up to the cap and stop the transfer (the status is known). */
    take = r->max_resp - r->resp_bytes;
    r->truncated = true;
  }
  if (r->keep_body && take && ak_buf_append(&r->resp, ptr, take) != 0) {
    r->nomem = true;
    return 0;
  }
  r->resp_bytes += take;
  return take == n ? n : 0;
}

static size_t on_header(char *buf, size_t size, size_t nitems, void *ud) {
  req_t *r = ((easy_t *)ud)->r;
  size_t n = size * nitems;
  if (!r->nwant) return n;
  if (n >= 5 && strncmp(buf, "HTTP/", 5) == 0) {
    /* a new response (after a 1xx): forget what the previous one said */
    for (size_t i = 0; i < r->nwant; i++) r->have[i] = false;
    return n;
  }
  for (size_t i = 0; i < r->nwant; i++) {
    size_t wl = r->want_len[i];
    if (n <= wl || buf[wl] != ':' || strncasecmp(buf, r->want[i], wl) != 0) continue;
    const char *v = buf + wl + 1, *end = buf + n;
    while (v < end && (*v == ' ' || *v == '\t')) v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t')) end--;
    size_t vl = (size_t)(end - v);
    if (vl >= AK_HTTPC_VALUE_MAX) vl = AK_HTTPC_VALUE_MAX - 1;
    memcpy(r->val[i], v, vl);
    r->val[i][vl] = '\0';
    r->have[i] = true;
  }
  return n;
}

/* A body from a file: the next piece of the region, read where curl's upload buffer
 * wants it (so at most that buffer of it is in memory, 64 KiB by default). A file that
 * ends early or fails to read aborts the transfer; req_complete names it. */
static size_t on_read(char *buf, size_t size, size_t nitems, void *ud) {
  req_t *r = ((easy_t *)ud)->r;
  if (r->body_fd < 0) return 0; /* a body from memory never comes here (POSTFIELDS) */
  uint64_t left = (uint64_t)r->body_len - r->body_pos;
  size_t want = size * nitems;
  if (want > left) want = (size_t)left;
  if (want == 0) return 0;
  ssize_t n;
  do {
    n = pread(r->body_fd, buf, want, (off_t)(r->body_off + r->body_pos));
  } while (n < 0 && errno == EINTR);
  if (n <= 0) {
    r->body_errno = n < 0 ? (errno ? errno : EIO) : -1;
    return CURL_READFUNC_ABORT;
  }
  r->body_pos += (uint64_t)n;
  return (size_t)n;
}

/* curl rewinds a body it must send again (a kept connection that turned out dead after
 * the request went out is retried on a new one): a file region starts over from its
 * first byte, which pread makes free. */
static int on_seek(void *ud, curl_off_t offset, int origin) {
  req_t *r = ((easy_t *)ud)->r;
  if (r->body_fd < 0 || origin != SEEK_SET || offset < 0 || (uint64_t)offset > (uint64_t)r->body_len)
    return CURL_SEEKFUNC_CANTSEEK;
  r->body_pos = (uint64_t)offset;
  return CURL_SEEKFUNC_OK;
}

/* One address judged for r: the first refusal's reason is the one reported. */
static bool addr_allowed(req_t *r, const struct sockaddr *sa) {
  char why[sizeof r->why];
  why[0] = '\0';
  if (r->addr_ok(r->addr_ctx, sa, why, sizeof why)) return true;
  if (!r->refused) snprintf(r->why, sizeof r->why, "%s", why[0] ? why : "address refused");
  r->refused = true;
  return false;
}

static curl_socket_t on_open_socket(void *ud, curlsocktype purpose, struct curl_sockaddr *addr) {
  easy_t *x = ud;
  req_t *r = x->r;
  (void)purpose;
  if (r->addr_ok && !addr_allowed(r, &addr->addr)) return CURL_SOCKET_BAD;
  curl_socket_t fd = socket(addr->family, addr->socktype | SOCK_CLOEXEC, addr->protocol);
  worker_t *w = x->w;
  if (fd >= 0 && (size_t)fd >= w->nfds) {
    size_t n = w->nfds ? w->nfds : 64;
    while (n <= (size_t)fd) n *= 2;
    uint8_t *g = realloc(w->fds, n);
    if (g) { /* without room the socket is simply watched the plain way (on_socket) */
      memset(g + w->nfds, 0, n - w->nfds);
      w->fds = g;
      w->nfds = n;
    }
  }
  /* a new socket is in no epoll set, whatever its number was used for before */
  if (fd >= 0 && (size_t)fd < w->nfds) w->fds[fd] = FD_OURS;
  return fd;
}

/* Right before the request goes out, on a new connection or a kept one: the address it
 * is connected to is judged by this request's policy. */
static int on_prereq(void *ud, char *primary_ip, char *local_ip, int primary_port, int local_port) {
  easy_t *x = ud;
  req_t *r = x->r;
  (void)local_ip;
  (void)local_port;
  if (!r->addr_ok) return CURL_PREREQFUNC_OK;
  if (x->ok_fn == r->addr_ok && x->ok_ctx == r->addr_ctx && x->ok_port == primary_port && primary_ip &&
      strcmp(x->ok_ip, primary_ip) == 0)
    return CURL_PREREQFUNC_OK;
  struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)primary_port)};
  struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)primary_port)};
  const struct sockaddr *sa = NULL;
  if (primary_ip && inet_pton(AF_INET, primary_ip, &a4.sin_addr) == 1) sa = (const struct sockaddr *)&a4;
  else if (primary_ip && inet_pton(AF_INET6, primary_ip, &a6.sin6_addr) == 1) sa = (const struct sockaddr *)&a6;
  if (!sa) {
    if (!r->refused) snprintf(r->why, sizeof r->why, "the connection's address cannot be judged");
    r->refused = true;
    return CURL_PREREQFUNC_ABORT;
  }
  if (!addr_allowed(r, sa)) return CURL_PREREQFUNC_ABORT;
  if (strlen(primary_ip) < sizeof x->ok_ip) {
    strcpy(x->ok_ip, primary_ip);
    x->ok_port = primary_port;
    x->ok_fn = r->addr_ok;
    x->ok_ctx = r->addr_ctx;
  }
  return CURL_PREREQFUNC_OK;
}

/* Closing takes a socket out of every epoll set; only the bookkeeping is left to do. */
static int on_close_socket(void *ud, curl_socket_t fd) {
  worker_t *w = ud;
  if (fd >= 0 && (size_t)fd < w->nfds) w->fds[fd] = 0;
  return close(fd);
}

/* curl's socket callback: mirror what it wants watched into the epoll set. Event-driven
 * instead of curl_multi_perform + curl_multi_poll, which walk every transfer on every
 * wake-up: a wake-up here touches only the sockets that have something to say. socketp
 * (curl_multi_assign) marks a socket already in the set, so a change is one MOD. */
static int on_socket(CURL *e, curl_socket_t fd, int what, void *userp, void *socketp) {
  worker_t *w = userp;
  (void)e;
  if (fd >= 0 && (size_t)fd < w->nfds && (w->fds[fd] & FD_OURS)) {
    /* A connection goes back to the cache after every request (REMOVE) and out again
     * for the next (IN): it stays in the set meanwhile, so that is no epoll_ctl at all.
     * An idle one that speaks up is taken out by the worker loop. */
    uint8_t *st = &w->fds[fd];
    if (what == CURL_POLL_REMOVE) {
      *st &= (uint8_t)~FD_WATCHED;
      return 0;
    }
    *st |= FD_WATCHED;
    uint8_t want = (uint8_t)(((what & CURL_POLL_IN) ? FD_IN : 0) | ((what & CURL_POLL_OUT) ? FD_OUT : 0));
    uint8_t have = *st & (FD_IN | FD_OUT);
    if (want == have) return 0;
    struct epoll_event ev = {.events = ((want & FD_IN) ? EPOLLIN : 0u) | ((want & FD_OUT) ? EPOLLOUT : 0u),
                             .data.fd = fd};
    if (epoll_ctl(w->epfd, have ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev) == 0)
      *st = (uint8_t)((*st & ~(FD_IN | FD_OUT)) | want);
    return 0;
  }
  if (what == CURL_POLL_REMOVE) {
    /* fails when curl already closed it (closing left the set): nothing to undo */
    epoll_ctl(w->epfd, EPOLL_CTL_DEL, fd, NULL);
    return 0;
  }
  struct epoll_event ev = {.events = ((what & CURL_POLL_IN) ? EPOLLIN : 0u) | ((what & CURL_POLL_OUT) ? EPOLLOUT : 0u),
                           .data.fd = fd};
  if (socketp && epoll_ctl(w->epfd, EPOLL_CTL_MOD, fd, &ev) == 0) return 0;
  /* new to the set, or a reused descriptor number the set dropped on close */
  if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) != 0 && errno == EEXIST)
    epoll_ctl(w->epfd, EPOLL_CTL_MOD, fd, &ev);
  curl_multi_assign(w->multi, fd, w);
  return 0;
}

/* curl's timer callback: only noted here; the worker acts on it when it falls due (curl
 * must not be re-entered from its own callback). */
static int on_timer(CURLM *m, long timeout_ms, void *userp) {
  worker_t *w = userp;
  (void)m;
  w->deadline_us = timeout_ms < 0 ? -1 : now_us() + (int64_t)timeout_ms * 1000;
  return 0;
}

/* ---- transfers -------------------------------------------------------------------- */

#define SET(opt, val) \
  if (rc == CURLE_OK) rc = curl_easy_setopt(e, opt, val)

static void easy_free(easy_t *x) {
  if (!x) return;
  curl_easy_cleanup(x->e);
  free(x->url);
  free(x);
}

/* A new easy handle with the options every request shares. They are set once per handle,
 * not per request (the handle is reused without curl_easy_reset): req_start overwrites
 * everything a request leaves behind, and a request's response state lives in its req_t,
 * never in the handle. */
static easy_t *easy_new(worker_t *w, CURLcode *rcp) {
  easy_t *x = calloc(1, sizeof *x);
  CURL *e = x ? curl_easy_init() : NULL;
  if (!e) {
    free(x);
    *rcp = CURLE_OUT_OF_MEMORY;
    return NULL;
  }
  x->e = e;
  x->w = w;
  x->timeout_ms = -1;
  x->kind = K_POST;
  CURLcode rc = CURLE_OK;
  SET(CURLOPT_PROTOCOLS_STR, "http,https");
  SET(CURLOPT_FOLLOWLOCATION, 0L);
  SET(CURLOPT_PROXY, "");
  /* and no proxy for any host: libcurl then skips reading no_proxy/NO_PROXY from the
   * environment on every request */
  SET(CURLOPT_NOPROXY, "*");
  SET(CURLOPT_NOSIGNAL, 1L);
  SET(CURLOPT_USERAGENT, "ankusa/" AK_VERSION);
  SET(CURLOPT_POST, 1L);
  SET(CURLOPT_WRITEFUNCTION, on_body);
  SET(CURLOPT_WRITEDATA, (void *)x);
  SET(CURLOPT_HEADERFUNCTION, on_header);
  SET(CURLOPT_HEADERDATA, (void *)x);
  /* a body from a file only (one from memory is POSTFIELDS, which curl never reads
   * through these) */
  SET(CURLOPT_READFUNCTION, on_read);
  SET(CURLOPT_READDATA, (void *)x);
  SET(CURLOPT_SEEKFUNCTION, on_seek);
  SET(CURLOPT_SEEKDATA, (void *)x);
  SET(CURLOPT_OPENSOCKETFUNCTION, on_open_socket);
  SET(CURLOPT_OPENSOCKETDATA, (void *)x);
  SET(CURLOPT_PREREQFUNCTION, on_prereq);
  SET(CURLOPT_PREREQDATA, (void *)x);
  SET(CURLOPT_PRIVATE, (void *)x);
  /* per connection (it outlives the request that opened it): the worker whose cache holds
   * it. A handle never leaves its worker, so this is set once. */
  SET(CURLOPT_CLOSESOCKETFUNCTION, on_close_socket);
  SET(CURLOPT_CLOSESOCKETDATA, (void *)w);
  if (rc != CURLE_OK) {
    easy_free(x);
    *rcp = rc;
    return NULL;
  }
  return x;
}

/* Put r on a handle and into the CURLM; false (why filled) when it cannot start. */
static bool req_start(worker_t *w, req_t *r, const char **why) {
  CURLcode rc = CURLE_OK;
  *why = "out of memory";
  /* a reused handle keeps its allocations: creating one per request was a fifth of the
   * HTTP sink's CPU (bench/deliver.sh profile) */
  easy_t *x = w->nspare ? w->spare[--w->nspare] : easy_new(w, &rc);
  if (!x) {
    if (rc != CURLE_OUT_OF_MEMORY) *why = "curl setup failed";
    return false;
  }
  x->r = r;
  r->easy = x;
  CURL *e = x->e;
  if (!x->url || strcmp(x->url, r->url) != 0) {
    free(x->url);
    x->url = strdup(r->url);
    if (!x->url) return false;
    SET(CURLOPT_URL, r->url);
  }
  SET(CURLOPT_HTTPHEADER, r->hdrs);
  if (r->sigv4) {
    /* libcurl signs from the request it is about to send, so every attempt (a submit of
     * its own) carries a fresh date and signature */
    SET(CURLOPT_AWS_SIGV4, r->sigv4);
    SET(CURLOPT_USERPWD, r->userpwd);
    x->sigv4 = true;
  }
  if (x->timeout_ms != r->timeout_ms) {
    SET(CURLOPT_TIMEOUT_MS, r->timeout_ms);
    SET(CURLOPT_CONNECTTIMEOUT_MS, r->timeout_ms);
    x->timeout_ms = rc == CURLE_OK ? r->timeout_ms : -1;
  }
  const char *custom = r->custom ? r->custom : "";
  if (strcmp(x->custom, custom) != 0) {
    SET(CURLOPT_CUSTOMREQUEST, r->custom);
    snprintf(x->custom, sizeof x->custom, "%s", rc == CURLE_OK && strlen(custom) < sizeof x->custom ? custom : "?");
  }
  static const char empty[1] = "";
  if (r->kind == K_POST && r->body_fd >= 0) {
    if (x->kind != K_POST) SET(CURLOPT_POST, 1L);
    /* no POSTFIELDS: curl reads the body through on_read, body_len of it (Content-Length) */
    SET(CURLOPT_POSTFIELDS, NULL);
    SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
  } else if (r->kind == K_POST) {
    if (x->kind != K_POST) SET(CURLOPT_POST, 1L); /* also clears a HEAD's "no body" */
    SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
    SET(CURLOPT_POSTFIELDS, r->body_len ? (const char *)r->body : empty);
  } else {
    /* no pointer into a freed request stays behind in the handle */
    SET(CURLOPT_POSTFIELDS, NULL);
    if (r->kind == K_GET) {
      SET(CURLOPT_HTTPGET, 1L);
    } else {
      SET(CURLOPT_NOBODY, 1L);
    }
  }
  x->kind = r->kind;
  if (rc != CURLE_OK) {
    *why = "curl setup failed";
    return false;
  }
  if (curl_multi_add_handle(w->multi, e) != CURLM_OK) {
    *why = "curl setup failed: multi add";
    return false;
  }
  return true;
}
#undef SET

/* A handle back to the idle ones, or freed when they are enough already. The credentials
 * of a signed request do not stay behind in it (nor does its way of authenticating). */
static void easy_release(worker_t *w, easy_t *x) {
  x->r = NULL;
  if (x->sigv4) {
    curl_easy_setopt(x->e, CURLOPT_USERPWD, NULL);
    curl_easy_setopt(x->e, CURLOPT_AWS_SIGV4, NULL);
    curl_easy_setopt(x->e, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
    x->sigv4 = false;
  }
  if (w->nspare < w->c->max_active) w->spare[w->nspare++] = x;
  else easy_free(x);
}

static void active_unlink(worker_t *w, req_t *r) {
  if (r->prev) r->prev->next = r->next;
  else w->active = r->next;
  if (r->next) r->next->prev = r->prev;
  r->next = r->prev = NULL;
}

/* The outcome into r, the handle back to the idle ones; r waits in the batch. */
static void req_complete(worker_t *w, req_t *r, CURLcode rc) {
  long status = 0;
  curl_easy_getinfo(r->easy->e, CURLINFO_RESPONSE_CODE, &status);
  r->status = 0;
  if (r->refused && rc != CURLE_OK && status == 0) {
    r->result = AK_HTTPC_REFUSED; /* r->why: the first refusal's reason */
  } else if (r->nomem) {
    r->result = AK_HTTPC_FAILED;
    snprintf(r->why, sizeof r->why, "out of memory");
  } else if (r->body_errno && rc != CURLE_OK) {
    /* the body's file, not the transport: no part of a short body is a request */
    r->result = AK_HTTPC_FAILED;
    snprintf(r->why, sizeof r->why, "body file: %s",
             r->body_errno < 0 ? "shorter than the body" : strerror(r->body_errno));
  } else if (status > 0 && (rc == CURLE_OK || (rc == CURLE_WRITE_ERROR && r->truncated))) {
    r->result = AK_HTTPC_OK;
    r->status = status;
    r->why[0] = '\0';
  } else {
    transport_why(rc, r);
  }
  curl_multi_remove_handle(w->multi, r->easy->e);
  easy_release(w, r->easy);
  r->easy = NULL;
  finished(w, r);
}

/* A request that never made it into the CURLM. */
static void req_fail_start(worker_t *w, req_t *r, const char *why) {
  if (r->easy) {
    easy_free(r->easy); /* half set up: not worth trusting again */
    r->easy = NULL;
  }
  r->result = AK_HTTPC_FAILED;
  r->status = 0;
  snprintf(r->why, sizeof r->why, "%s", why);
  finished(w, r);
}

static void run_timer_if_due(worker_t *w) {
  if (w->deadline_us < 0 || w->deadline_us > now_us()) return;
  w->deadline_us = -1;
  int running;
  curl_multi_socket_action(w->multi, CURL_SOCKET_TIMEOUT, 0, &running);
}

/* Answers every finished transfer (and request that could not start), together;
 * returns how many transfers finished. */
static size_t settle(worker_t *w) {
  size_t n = 0;
  CURLMsg *msg;
  int left;
  while ((msg = curl_multi_info_read(w->multi, &left))) {
    if (msg->msg != CURLMSG_DONE) continue;
    easy_t *x = NULL;
    curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
    req_t *r = x->r;
    CURLcode rc = msg->data.result;
    active_unlink(w, r);
    req_complete(w, r, rc);
    n++;
  }
  answer_finished(w);
  return n;
}

/* Takes every request of a cancelled owner out of the CURLM and answers it; returns how
 * many were active. */
static size_t cancel_active(worker_t *w, const void *owner) {
  size_t n = 0;
  for (req_t *r = w->active, *nx; r; r = nx) {
    nx = r->next;
    if (r->owner != owner) continue;
    active_unlink(w, r);
    curl_multi_remove_handle(w->multi, r->easy->e);
    easy_release(w, r->easy);
    r->easy = NULL;
    answer_cancelled(r);
    n++;
  }
  return n;
}

static bool cancelled_by(const cancel_t *orders, const void *owner) {
  for (const cancel_t *o = orders; o; o = o->next)
    if (owner && o->owner == owner) return true;
  return false;
}

static void *worker_main(void *arg) {
  worker_t *w = arg;
  ak_httpc_t *c = w->c;
  /* worker 0 keeps the client's name, the others add their number ("ak-http-sink-3"
   * still fits the 15 characters a thread name may have) */
  _Static_assert(MAX_WORKERS <= 10, "one digit in the thread name");
  char name[16];
  snprintf(name, sizeof name, "%.13s", c->name);
  if (w->index) {
    size_t l = strlen(name);
    name[l] = '-';
    name[l + 1] = (char)('0' + w->index);
    name[l + 2] = '\0';
  }
  pthread_setname_np(pthread_self(), name);
  size_t nactive = 0;
  for (;;) {
    req_t *take = NULL, **tail = &take, *gone = NULL, **gtail = &gone;
    pthread_mutex_lock(&w->mu);
    bool stop = w->stop;
    cancel_t *orders = w->cancels;
    w->cancels = NULL;
    if (orders && !stop) {
      /* the cancelled owners' requests still waiting in the queue */
      for (req_t **pp = &w->q_head; *pp;) {
        req_t *r = *pp;
        if (!cancelled_by(orders, r->owner)) {
          pp = &r->next;
          continue;
        }
        *pp = r->next;
        r->next = NULL;
        *gtail = r;
        gtail = &r->next;
      }
      w->q_tail = NULL;
      for (req_t *r = w->q_head; r; r = r->next) w->q_tail = r;
    }
    while (!stop && w->q_head && nactive < c->max_active) {
      req_t *r = w->q_head;
      w->q_head = r->next;
      if (!w->q_head) w->q_tail = NULL;
      r->next = NULL;
      *tail = r;
      tail = &r->next;
      nactive++;
    }
    /* Left in the queue (all slots busy): submit did not wake us for these (it wakes only
     * on the first entry), so this thread must come back for them by itself. */
    bool backlog = w->q_head != NULL;
    pthread_mutex_unlock(&w->mu);
    if (stop) {
      if (orders) { /* answered below, with everything else */
        pthread_mutex_lock(&w->mu);
        cancel_t **pp = &orders;
        while (*pp) pp = &(*pp)->next;
        *pp = w->cancels;
        w->cancels = orders;
        pthread_mutex_unlock(&w->mu);
      }
      break;
    }

    if (orders) {
      while (gone) {
        req_t *r = gone;
        gone = r->next;
        r->next = NULL;
        answer_cancelled(r);
      }
      for (cancel_t *o = orders; o; o = o->next) nactive -= cancel_active(w, o->owner);
      pthread_mutex_lock(&w->mu);
      for (cancel_t *o = orders, *nx; o; o = nx) {
        nx = o->next;
        o->done = true; /* the canceller's stack: not touched after this */
      }
      pthread_cond_broadcast(&w->cv);
      pthread_mutex_unlock(&w->mu);
    }

    while (take) {
      req_t *r = take;
      take = r->next;
      r->next = NULL;
      const char *why;
      if (!req_start(w, r, &why)) {
        nactive--;
        req_fail_start(w, r, why);
        continue;
      }
      r->next = w->active;
      if (w->active) w->active->prev = r;
      w->active = r;
    }

    /* a handle just added asks for its first run through the timer */
    run_timer_if_due(w);
    nactive -= settle(w);

    int wait_ms = -1;
    if (backlog && nactive < c->max_active) {
      wait_ms = 0; /* a slot is free for a queued request: only look, do not sleep */
    } else if (w->deadline_us >= 0) {
      int64_t left = w->deadline_us - now_us();
      wait_ms = left <= 0 ? 0 : (int)((left + 999) / 1000);
    }
    if (wait_ms != 0) {
      /* About to sleep: from here the next submit writes the eventfd (one write per
       * sleep; while this thread is busy, submits only queue). Unless something came
       * meanwhile that this turn can take. */
      pthread_mutex_lock(&w->mu);
      if (w->stop || w->cancels || (w->q_head && nactive < c->max_active)) wait_ms = 0;
      else atomic_store_explicit(&w->sleeping, true, memory_order_relaxed);
      pthread_mutex_unlock(&w->mu);
    }
    struct epoll_event evs[EVENTS];
    int n = epoll_wait(w->epfd, evs, EVENTS, wait_ms);
    if (wait_ms != 0) {
      /* not under mu: at worst a submit meanwhile writes once more than needed, and the
       * queue is looked at first thing on the next turn anyway */
      atomic_store_explicit(&w->sleeping, false, memory_order_relaxed);
    }
    for (int i = 0; i < n; i++) {
      int fd = evs[i].data.fd;
      if (fd == w->evfd) continue; /* edge-triggered: nothing to read, the queue says it all */
      if ((size_t)fd < w->nfds && (w->fds[fd] & (FD_OURS | FD_WATCHED)) == FD_OURS) {
        /* an idle cached connection (closed by the peer, most likely): curl looks at it
         * when it reuses it; until then it leaves the set, or it would wake us in a loop */
        epoll_ctl(w->epfd, EPOLL_CTL_DEL, fd, NULL);
        w->fds[fd] = FD_OURS;
        continue;
      }
      uint32_t ev = evs[i].events;
      int mask = ((ev & (EPOLLIN | EPOLLHUP)) ? CURL_CSELECT_IN : 0) | ((ev & EPOLLOUT) ? CURL_CSELECT_OUT : 0) |
                 ((ev & EPOLLERR) ? CURL_CSELECT_ERR : 0);
      int running;
      curl_multi_socket_action(w->multi, fd, mask, &running);
    }
    run_timer_if_due(w);
    nactive -= settle(w);
  }

  /* Stopping: everything still here is answered once, cancelled. */
  while (w->active) {
    req_t *r = w->active;
    active_unlink(w, r);
    curl_multi_remove_handle(w->multi, r->easy->e);
    easy_release(w, r->easy);
    r->easy = NULL;
    answer_cancelled(r);
  }
  for (;;) {
    pthread_mutex_lock(&w->mu);
    req_t *r = w->q_head;
    if (r) {
      w->q_head = r->next;
      if (!w->q_head) w->q_tail = NULL;
    }
    pthread_mutex_unlock(&w->mu);
    if (!r) break;
    answer_cancelled(r);
  }
  /* nothing of anyone's is left: every cancel order still waiting is answered */
  pthread_mutex_lock(&w->mu);
  for (cancel_t *o = w->cancels, *nx; o; o = nx) {
    nx = o->next;
    o->done = true;
  }
  w->cancels = NULL;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

/* ---- the client ------------------------------------------------------------------- */

static void worker_free(worker_t *w) {
  if (!w) return;
  for (size_t i = 0; i < w->nspare; i++) easy_free(w->spare[i]);
  free(w->spare);
  /* the multi's callbacks may still touch epfd and fds while it closes its connections */
  if (w->multi) curl_multi_cleanup(w->multi);
  if (w->evfd >= 0) close(w->evfd);
  if (w->epfd >= 0) close(w->epfd);
  free(w->fds);
  recycle_flush(w); /* what the stopping worker answered last */
  for (req_t *r = w->free_reqs, *nx; r; r = nx) {
    nx = r->next;
    free(r);
  }
  if (w->sync_init) {
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->free_mu);
    pthread_mutex_destroy(&w->mu);
  }
  free(w);
}

static worker_t *worker_new(ak_httpc_t *c, unsigned index, char *err, size_t errlen) {
  worker_t *w = calloc(1, sizeof *w);
  if (!w) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  w->c = c;
  w->index = index;
  w->epfd = w->evfd = -1;
  w->deadline_us = -1;
  pthread_mutex_init(&w->mu, NULL);
  pthread_mutex_init(&w->free_mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  w->sync_init = true;
  w->spare = calloc(c->max_active, sizeof *w->spare);
  w->multi = curl_multi_init();
  if (!w->multi || !w->spare) {
    snprintf(err, errlen, "out of memory");
    goto fail;
  }
  /* keep a connection per transfer slot: the default cache (4 x handles added) shrinks as
   * handles come and go, and a closed connection means a new TCP (and TLS) handshake */
  curl_multi_setopt(w->multi, CURLMOPT_MAXCONNECTS, (long)c->max_active);
  w->epfd = epoll_create1(EPOLL_CLOEXEC);
  w->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  /* EPOLLET: each write to an eventfd is a new edge, whatever its counter holds, so the
   * worker need not read it (one syscall less per wake-up) */
  struct epoll_event ev = {.events = EPOLLIN | EPOLLET};
  ev.data.fd = w->evfd;
  if (w->epfd < 0 || w->evfd < 0 || epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->evfd, &ev) != 0) {
    snprintf(err, errlen, "cannot set up the http client's event loop: %s", strerror(errno));
    goto fail;
  }
  curl_multi_setopt(w->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
  curl_multi_setopt(w->multi, CURLMOPT_SOCKETDATA, w);
  curl_multi_setopt(w->multi, CURLMOPT_TIMERFUNCTION, on_timer);
  curl_multi_setopt(w->multi, CURLMOPT_TIMERDATA, w);
  return w;
fail:
  worker_free(w);
  return NULL;
}

/* One per online CPU, up to MAX_WORKERS: beyond the cores there is nothing to gain, and
 * every worker holds its own connections to each destination. */
static size_t worker_count(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
#ifdef AK_TEST_HOOKS
  /* test builds only: the same cases with one worker and with several, on any box */
  const char *t = getenv("ANKUSA_TEST_HTTP_WORKERS");
  if (t && atol(t) > 0) n = atol(t);
#endif
  if (n < 1) n = 1;
  return n > MAX_WORKERS ? MAX_WORKERS : (size_t)n;
}

ak_httpc_t *ak_httpc_new(const ak_httpc_opts_t *opts, char *err, size_t errlen) {
  pthread_once(&curl_once, curl_init);
  if (curl_init_rc != CURLE_OK) {
    snprintf(err, errlen, "libcurl init failed: %s", curl_easy_strerror(curl_init_rc));
    return NULL;
  }
  ak_httpc_t *c = calloc(1, sizeof *c);
  if (!c) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  const char *name = opts && opts->name && *opts->name ? opts->name : "ak-httpc";
  snprintf(c->name, sizeof c->name, "%.13s", name);
  c->max_outstanding = opts && opts->max_outstanding ? opts->max_outstanding : AK_HTTPC_MAX_OUTSTANDING;
  c->max_active = opts && opts->max_active ? opts->max_active : DEFAULT_ACTIVE;
  c->spread_at = opts && opts->spread_at ? opts->spread_at : DEFAULT_SPREAD;
  pthread_mutex_init(&c->start_mu, NULL);
  size_t n = opts && opts->workers ? (opts->workers > MAX_WORKERS ? MAX_WORKERS : opts->workers) : worker_count();
  for (size_t i = 0; i < n; i++) {
    worker_t *w = worker_new(c, (unsigned)i, err, errlen);
    if (!w) {
      ak_httpc_free(c);
      return NULL;
    }
    c->workers[c->nworkers++] = w;
  }
  return c;
}

/* all told first, then all joined: they wind down side by side */
static void stop_workers(ak_httpc_t *c) {
  for (size_t i = 0; i < c->nworkers; i++) {
    worker_t *w = c->workers[i];
    if (!w->thread_started) continue;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_mutex_unlock(&w->mu);
    wake_worker(w);
  }
  for (size_t i = 0; i < c->nworkers; i++) {
    worker_t *w = c->workers[i];
    if (!w->thread_started) continue;
    pthread_join(w->thread, NULL);
    w->thread_started = false;
  }
}

void ak_httpc_free(ak_httpc_t *c) {
  if (!c) return;
  stop_workers(c);
  for (size_t i = 0; i < c->nworkers; i++) worker_free(c->workers[i]);
  pthread_mutex_destroy(&c->start_mu);
  free(c);
}

/* The threads, on the first request. A client that could not start them stays refused
 * (AK_HTTPC_ESTART): half a pool would be a pool nobody sized. */
static int start(ak_httpc_t *c) {
  pthread_mutex_lock(&c->start_mu);
  int rc = 0;
  if (c->start_failed) {
    rc = AK_HTTPC_ESTART;
  } else if (!atomic_load(&c->started)) {
    for (size_t i = 0; i < c->nworkers && rc == 0; i++) {
      worker_t *w = c->workers[i];
      if (pthread_create(&w->thread, NULL, worker_main, w) != 0) rc = AK_HTTPC_ESTART;
      else w->thread_started = true;
    }
    if (rc == 0) {
      atomic_store_explicit(&c->started, true, memory_order_release);
    } else {
      stop_workers(c);
      c->start_failed = true;
    }
  }
  pthread_mutex_unlock(&c->start_mu);
  return rc;
}

/* Fill first: the first worker carrying fewer than spread_at requests (queued + in
 * flight), else the least loaded. Spreading every request over the workers in turn split
 * each burst of submits (and of completions) between threads: each woke for half of it,
 * and both woke the caller, so a delivery cost more context switches and contended
 * locks than transfers (bench/http_sink.sh, 2 cores: 58,600 against 3,300 context
 * switches per 50,000 deliveries with 32 outstanding). More requests than spread_at, a
 * worker that falls behind or a destination that stalls its connections spill over to
 * the next. */
static worker_t *pick_worker(ak_httpc_t *c) {
  worker_t *best = c->workers[0];
  size_t bl = atomic_load_explicit(&best->load, memory_order_relaxed);
  if (c->nworkers == 1 || bl < c->spread_at) return best;
  for (size_t i = 1; i < c->nworkers; i++) {
    worker_t *w = c->workers[i];
    size_t l = atomic_load_explicit(&w->load, memory_order_relaxed);
    if (l < c->spread_at) return w;
    if (l < bl) best = w, bl = l;
  }
  return best;
}

/* Takes one of the client's max_outstanding places; false when none is left. */
static bool reserve_outstanding(ak_httpc_t *c) {
  size_t n = atomic_load(&c->outstanding);
  do {
    if (n >= c->max_outstanding) return false;
  } while (!atomic_compare_exchange_weak(&c->outstanding, &n, n + 1));
  return true;
}

int ak_httpc_submit(ak_httpc_t *c, const ak_httpc_req_t *req, ak_httpc_done_fn done, void *ctx) {
  if (!c || !req || !req->url || !done || req->nwant > AK_HTTPC_MAX_WANT || (req->nwant && !req->want_headers) ||
      (req->nheaders && !req->headers) || (req->body_len && !req->body && !req->body_from_fd) ||
      (req->body_from_fd && (req->body_fd < 0 || (uint64_t)req->body_len > INT64_MAX ||
                             req->body_off > INT64_MAX - (uint64_t)req->body_len)) ||
      req->timeout_ms < 0 || req->user_len > AK_HTTPC_USER_MAX || (req->user_len && !req->user))
    return AK_HTTPC_EINVAL;
  int kind = K_POST;
  const char *custom = NULL;
  if (req->method && strcasecmp(req->method, "POST") != 0) {
    if (!ak_header_name_ok(req->method, strlen(req->method))) return AK_HTTPC_EINVAL; /* a token, like a name */
    if (strcmp(req->method, "GET") == 0) kind = K_GET;
    else if (strcmp(req->method, "HEAD") == 0) kind = K_HEAD;
    else custom = req->method;
  }
  for (size_t i = 0; i < req->nwant; i++)
    if (!req->want_headers[i]) return AK_HTTPC_EINVAL;
  if (!atomic_load_explicit(&c->started, memory_order_acquire) && start(c) != 0) return AK_HTTPC_ESTART;

  size_t body_len = kind == K_POST ? req->body_len : 0;
  /* a body from a file is read while it is sent, never copied in */
  size_t copy_len = req->body_from_fd ? 0 : body_len;
  size_t url_len = strlen(req->url) + 1, custom_len = custom ? strlen(custom) + 1 : 0, lines_len = 0;
  size_t sigv4_len = req->aws_sigv4 ? strlen(req->aws_sigv4) + 1 : 0;
  size_t userpwd_len = req->aws_sigv4 && req->userpwd ? strlen(req->userpwd) + 1 : 0;
  size_t lens[64]; /* each line measured once, when there are not too many */
  for (size_t i = 0; i < req->nheaders; i++) {
    size_t l = strlen(req->headers[i]) + 1;
    if (i < sizeof lens / sizeof lens[0]) lens[i] = l;
    lines_len += l;
  }
  size_t want_len = 0;
  for (size_t i = 0; i < req->nwant; i++) want_len += strlen(req->want_headers[i]) + 1 + AK_HTTPC_VALUE_MAX;
  size_t nodes_len = req->nheaders * sizeof(struct curl_slist);
  size_t need = nodes_len + copy_len + url_len + custom_len + lines_len + want_len + sigv4_len + userpwd_len;
  worker_t *w = pick_worker(c);
  req_t *r = NULL;
  pthread_mutex_lock(&w->free_mu);
  if (w->free_reqs && w->free_reqs->cap >= need) {
    r = w->free_reqs;
    w->free_reqs = r->next;
    w->nfree--;
  }
  pthread_mutex_unlock(&w->free_mu);
  size_t cap = r ? r->cap : 0;
  if (!r) {
    size_t total = REQ_MIN;
    while (total < sizeof *r + need) total *= 2;
    if (total > REQ_KEEP_MAX) total = sizeof *r + need; /* not kept: no rounding */
    r = malloc(total);
    if (!r) return AK_HTTPC_NOMEM;
    cap = total - sizeof *r;
  }
  memset(r, 0, sizeof *r);
  r->cap = cap;
  r->done = done;
  r->ctx = ctx;
  r->owner = req->owner;
  r->addr_ok = req->addr_ok;
  r->addr_ctx = req->addr_ctx;
  r->kind = kind;
  r->timeout_ms = req->timeout_ms;
  r->max_resp = req->max_response_bytes;
  r->keep_body = req->keep_body;
  r->nlines = req->nheaders;
  r->nwant = req->nwant;
  char *p = r->mem;
  struct curl_slist *nodes = (struct curl_slist *)(void *)p;
  p += nodes_len;
  r->body_len = body_len;
  r->body_fd = -1;
  if (req->body_from_fd && kind == K_POST) {
    r->body_fd = req->body_fd;
    r->body_off = req->body_off;
  } else {
    r->body = (const uint8_t *)p;
    if (body_len) memcpy(p, req->body, body_len);
    p += body_len;
  }
  r->url = memcpy(p, req->url, url_len);
  p += url_len;
  if (custom) {
    r->custom = memcpy(p, custom, custom_len);
    p += custom_len;
  }
  r->lines = p;
  for (size_t i = 0; i < req->nheaders; i++) {
    size_t l = i < sizeof lens / sizeof lens[0] ? lens[i] : strlen(req->headers[i]) + 1;
    /* the list libcurl is handed (CURLOPT_HTTPHEADER only reads it), built here, once */
    nodes[i].data = memcpy(p, req->headers[i], l);
    nodes[i].next = i + 1 < req->nheaders ? &nodes[i + 1] : NULL;
    p += l;
  }
  r->hdrs = req->nheaders ? nodes : NULL;
  if (sigv4_len) {
    r->sigv4 = memcpy(p, req->aws_sigv4, sigv4_len);
    p += sigv4_len;
    r->userpwd = userpwd_len ? memcpy(p, req->userpwd, userpwd_len) : "";
    r->userpwd_len = userpwd_len;
    p += userpwd_len;
  }
  if (req->user_len) memcpy(r->user.bytes, req->user, req->user_len);
  for (size_t i = 0; i < req->nwant; i++) {
    size_t l = strlen(req->want_headers[i]);
    r->want[i] = memcpy(p, req->want_headers[i], l + 1);
    r->want_len[i] = l;
    p += l + 1;
    r->val[i] = p;
    p += AK_HTTPC_VALUE_MAX;
  }

  r->w = w;
  pthread_mutex_lock(&w->mu);
  int rc = w->stop ? AK_HTTPC_STOPPED : !reserve_outstanding(c) ? AK_HTTPC_BUSY : 0;
  if (rc != 0) {
    pthread_mutex_unlock(&w->mu);
    req_wipe(r);
    free(r);
    return rc;
  }
  atomic_fetch_add(&w->load, 1);
  if (w->q_tail) w->q_tail->next = r;
  else w->q_head = r;
  w->q_tail = r;
  /* Only a sleeping worker is woken, and once per sleep: awake, it takes the whole queue
   * (up to its free slots) on its next turn, and when the slots are full it comes back
   * for the rest after a transfer finishes. It decides to sleep under mu, after a last
   * look at the queue, so an entry queued after that look sees it sleeping. */
  bool wake = atomic_load_explicit(&w->sleeping, memory_order_relaxed);
  if (wake) atomic_store_explicit(&w->sleeping, false, memory_order_relaxed);
  pthread_mutex_unlock(&w->mu);
  if (wake) wake_worker(w);
  return 0;
}

void ak_httpc_cancel(ak_httpc_t *c, const void *owner) {
  /* not started: nothing was ever accepted */
  if (!c || !owner || !atomic_load_explicit(&c->started, memory_order_acquire)) return;
  cancel_t orders[MAX_WORKERS];
  for (size_t i = 0; i < c->nworkers; i++) {
    worker_t *w = c->workers[i];
    orders[i] = (cancel_t){.owner = owner};
    pthread_mutex_lock(&w->mu);
    orders[i].next = w->cancels;
    w->cancels = &orders[i];
    pthread_mutex_unlock(&w->mu);
    wake_worker(w);
  }
  for (size_t i = 0; i < c->nworkers; i++) {
    worker_t *w = c->workers[i];
    pthread_mutex_lock(&w->mu);
    while (!orders[i].done) pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
  }
}

const char *ak_httpc_strerror(int rc) {
  switch (rc) {
  case 0: return "accepted";
  case AK_HTTPC_BUSY: return "busy";
  case AK_HTTPC_STOPPED: return "stopped";
  case AK_HTTPC_NOMEM: return "out of memory";
  case AK_HTTPC_EINVAL: return "invalid request";
  case AK_HTTPC_ESTART: return "cannot start the http client's threads";
  default: return "unknown";
  }
}

/* ---- the module ------------------------------------------------------------------- */

static int httpc_open(ak_instance_t *inst, char **err) {
  char why[192] = "";
  /* One client for every sink of every source: more transfers under way per thread than
   * a sink's own client had, since they are now everybody's (dispatch.concurrency bounds
   * what is asked of it; beyond this the requests queue here). */
  inst->httpc = ak_httpc_new(&(ak_httpc_opts_t){.max_active = NODE_ACTIVE}, why, sizeof why);
  if (inst->httpc) return 0;
  if (asprintf(err, "httpc: %s", why[0] ? why : "cannot create the http client") < 0) *err = NULL;
  return AK_MODULE_FAILED;
}

static void httpc_close(ak_instance_t *inst) {
  ak_httpc_free(inst->httpc);
  inst->httpc = NULL;
}

const ak_module_t ak_mod_httpc = {
  .name = "httpc",
  .open = httpc_open,
  .close = httpc_close,
};
