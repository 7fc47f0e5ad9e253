/* Ingest on our HTTP layer (http/server.h: libuv loops, strict framing, limits). A
 * request's life, in the layer's handler calls on the loop that owns its connection:
 *   on_head (the head, no body byte read yet): health/ready, route shape, Content-Length,
 *       source lookup, header bytes, pre-read admission (edge/admission.h) and the
 *       tenant's max_body_bytes -> refuse here and the layer never reads the body or sends
 *       100 Continue;
 *   on_body: append to a buffer bounded by max_body_bytes (past it, or past a source's
 *       byte budget: swallow, answer 413/429 at the end so the connection stays usable);
 *   on_end: verify the raw bytes, apply on_verify_failure (401 / flag / quarantine),
 *       read the dedupe key (a repeat of a committed key is answered here), charge a
 *       verified hook to its tenant's quota (edge/quota.h), apply store_headers, encode
 *       the envelope, suspend the request, submit;
 *   on_resume (the writer resumed it from its thread): answer from the writer's status.
 * The writer resumes a request only after its commit returned. Under wal.type none a hook
 * goes to the direct publisher (edge/publish.h) instead, which resumes it once every sink
 * confirmed, one refused or the deadline passed. Also the `http` and
 * `listener` modules: the ingest listeners' keys, lifecycle and drain. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "core/buf.h"
#include "core/clock.h"
#include "core/envelope.h"
#include "core/gcra.h"
#include "core/header.h"
#include "core/log.h"
#include "core/sources.h"
#include "edge/admission.h"
#include "edge/dedupe_key.h"
#include "edge/edge.h"
#include "edge/headers.h"
#include "edge/httpx.h"
#include "edge/publish.h"
#include "edge/quota.h"
#include "edge/route.h"
#include "edge/ticket.h"
#include "edge/tls.h"
#include "http/server.h"
#include "http/tls.h"
#include "intake/module.h"
#include "queue/dedupe.h"
#include "queue/quarantine.h"
#include "queue/writer.h"
#include "routes/routes.h"
#include "verify/verifier.h"

enum { ST_READING = 0, ST_FLEET, ST_SUBMITTED, ST_ANSWERED };
enum { H_FLEET = 1, H_QUOTA, H_STATUS, H_NOMEM, H_ERASING }; /* why admit_tail stopped short of the writer */

typedef enum {
  R_PAYLOAD_TOO_LARGE = 0, R_DEDUPE_QUOTA, R_UNKNOWN_SOURCE, R_NOT_FOUND, R_INVALID_HEADER, R_BODY_READ_FAILED,
  R_OVERLOAD, R_STORE_UNAVAILABLE, R_COMMIT_DEADLINE, R_DRAINING, R_VERIFICATION_FAILED,
  R_QUARANTINE_RATE_LIMITED, R_QUARANTINE_FULL, R_QUARANTINE_OVERLOAD, R_DEDUPE_PENDING,
  R_INTAKE_UNAVAILABLE, R_INTAKE_PENDING,
  /* the HTTP layer's own refusals (http/server.h on_refused) */
  R_BAD_REQUEST, R_NOT_IMPLEMENTED, R_HEADERS_TOO_LARGE, R_URI_TOO_LONG, R_REQUEST_TIMEOUT, R_HTTP_VERSION,
  R_CONNECTION_LIMIT,
  /* wal.type none: a sink refused, or the deadline passed (the body says store_unavailable) */
  R_PUBLISH_FAILED, R_PUBLISH_TIMEOUT,
  /* the route guard (routes/routes.h), in ak_guard_t order */
  R_ROUTE_NOT_FOUND, R_METHOD_NOT_ALLOWED, R_ROUTE_DISABLED, R_IP_DENIED,
  R_TENANT_ERASING, /* the tenant's erase runs (tenant/erase.h) */
  R_COUNT
} refuse_t;
static const char *const refuse_names[R_COUNT] = {
  "payload_too_large", "dedupe_quota", "unknown_source", "not_found", "invalid_header", "body_read_failed",
  "overload", "store_unavailable", "commit_deadline", "draining", "verification_failed",
  "quarantine_rate_limited", "quarantine_full", "quarantine_overload", "dedupe_pending",
  "intake_unavailable", "intake_pending",
  "bad_request", "not_implemented", "request_header_fields_too_large", "uri_too_long", "request_timeout",
  "http_version_not_supported", "connection_limit", "publish_failed", "publish_timeout",
  "route_not_found", "method_not_allowed", "route_disabled", "ip_denied",
  "tenant_erasing"};

/* Refusals of the limits (edge/admission.h, edge/quota.h, the writer's tenant share). */
typedef enum { L_RATE_LIMITED = 0, L_IP, L_NODE, L_SOURCE, L_TENANT_OVERLOAD, L_COUNT } limit_t;
static const char *const limit_names[L_COUNT] = {"rate_limited", "ip_rate_limited", "node_rate_limited",
                                                 "source_rate_limited", "tenant_overload"};

/* outcome of ankusa_ingest_requests_total, from the answer's status */
typedef enum { O_ACCEPTED = 0, O_DUPLICATE, O_QUARANTINED, O_REJECTED, O_UNAVAILABLE, O_COUNT } outcome_t;
static const char *const outcome_names[O_COUNT] = {"accepted", "duplicate", "quarantined", "rejected",
                                                   "unavailable"};

static const unsigned status_codes[] = {200, 201, 202, 400, 401, 404, 405, 408, 409, 413, 414, 429, 431, 501, 503, 505};
#define NSTATUS (sizeof status_codes / sizeof status_codes[0])

struct ak_edge {
  ak_instance_t *inst;
  const ak_http_cfg_t *hc;     /* the http section */
  const ak_listener_cfg_t *lc; /* the listener section */
  ak_hserver_t *srv, *tls_srv;  /* plain ingest; TLS ingest (http.tls) */
  ak_htls_ctx_t *tls_ctx;       /* the TLS listener's live context (a reference; SIGHUP swaps it) */
  pthread_mutex_t tls_mu;       /* one reload at a time */
  ak_header_policy_t *hpol;
#ifdef AK_TEST_HOOKS
  int64_t test_now_s;  /* ANKUSA_TEST_NOW pins the verifiers' clock */
#endif
  ak_series_t *m_status[NSTATUS], *m_status_other, *m_refused[R_COUNT], *m_duration, *m_abandoned;
  ak_series_t *m_verify_fail[AK_VR_COUNT], *m_flagged, *m_quarantined;
  ak_admission_t *adm;  /* pre-read limits */
  bool adm_on;          /* a limit besides the sources' own is on */
  ak_series_t *m_limit[L_COUNT], *m_bodies_read;
  ak_series_t *m_load_shed;          /* 503 overload: the node shed the request */
  ak_family_t *f_rl_rejected;        /* the tenant's quota refused it, by tenant_id */
  ak_series_t *m_rl_rejected_all;    /* ... at metrics.detail tenant */
};

/* What the edge attaches to each source version (AK_SOURCE_EXT_EDGE): it lives exactly as
 * long as the version, so a request holding the version holds these too. */
typedef struct edge_src {
  ak_pen_bucket_t *pen;        /* on_verify_failure quarantine only */
  ak_admission_source_t *adm;  /* NULL: the source's bytes are not limited */
  ak_series_t *weak;           /* NULL unless its verifier hashes with SHA-1 */
  ak_series_t *q_full, *q_rate; /* the pen refused: full, rate limited (source_id at metrics.detail) */
  /* the original's per-source series (source_id "_all" below metrics.detail source) */
  ak_series_t *m_outcome[O_COUNT], *m_duration, *m_verify_fail;
} edge_src_t;

/* The source of the request a handler is serving on this thread (NULL: none bound yet),
 * set at each handler's entry so that count() can charge the per-source series. */
static _Thread_local const edge_src_t *tl_es;

typedef struct conn {
  int state;
  int64_t t0_ns;
  int64_t received_at_ms;
  ak_source_t *sv;     /* the source version this request bound to, held until completed() */
  edge_src_t *es;      /* sv's edge state */
  const ak_source_cfg_t *src; /* &sv->cfg */
  const char *tenant;
  bool too_large;
  bool meter_body;     /* source bytes limited, no Content-Length: charged as it arrives */
  int late_retry;      /* > 0: over the source's bytes mid-body; 429 after the body */
  int64_t max_body;    /* http.max_body_bytes, or the tenant's when smaller */
  uint8_t *body;
  size_t len, cap;
  ak_ticket_t ticket;  /* pen, dedupe claim, quota, queue share, fleet call: settled once, in settle() */
  uint32_t flags;      /* the envelope's (what verification decided: req.kind, req.reason) */
  char *dkey;          /* the provider event key (NULL: none) */
  size_t dklen;
  int halt;            /* what stopped admit_tail (H_*), for answer_halt */
  int64_t retry_ns;    /* H_QUOTA: until the tenant's quota would pass */
  bool published;      /* wal.type none: the hook went to the publisher, not the writer */
  ak_write_req_t req;
  ak_hreq_t *r;
  ak_edge_t *edge;
} conn_t;

static void count(ak_edge_t *e, unsigned status, int64_t t0_ns) {
  ak_series_t *s = e->m_status_other;
  for (size_t i = 0; i < NSTATUS; i++)
    if (status_codes[i] == status) s = e->m_status[i];
  ak_counter_add(s, 1);
  const edge_src_t *es = tl_es;
  if (es) {
    outcome_t o = status == 201 ? O_ACCEPTED : status == 200 ? O_DUPLICATE : status == 202 ? O_QUARANTINED
                  : status < 500 ? O_REJECTED : O_UNAVAILABLE;
    ak_counter_add(es->m_outcome[o], 1);
  }
  /* a request no source was bound to: in the "_all" series below metrics.detail source */
  ak_series_t *d = es ? es->m_duration : e->m_duration;
  if (t0_ns && d) ak_histogram_observe(d, (double)(ak_mono_ns() - t0_ns) / 1e9);
}

/* A JSON answer, with Retry-After when retry_after > 0. */
static void reply(ak_hreq_t *r, unsigned status, const char *body, size_t len, int retry_after) {
  if (retry_after > 0) {
    char ra[16];
    snprintf(ra, sizeof ra, "%d", retry_after);
    ak_hreq_add_header(r, "Retry-After", ra);
  }
  ak_hreq_reply(r, status, "application/json", body, len);
}

static void refuse(ak_edge_t *e, ak_hreq_t *r, unsigned status, refuse_t why, const char *code, int retry_after,
                   int64_t t0) {
  ak_counter_add(e->m_refused[why], 1);
  if (why == R_OVERLOAD || why == R_QUARANTINE_OVERLOAD) ak_counter_add(e->m_load_shed, 1);
  count(e, status, t0);
  ak_hreq_error(r, status, code, retry_after);
}

static void refuse_limit(ak_edge_t *e, ak_hreq_t *r, unsigned status, limit_t why, int retry_after, int64_t t0) {
  ak_counter_add(e->m_limit[why], 1);
  count(e, status, t0);
  ak_hreq_error(r, status, limit_names[why], retry_after);
}

static void too_large(ak_edge_t *e, ak_hreq_t *r, int64_t limit, int64_t t0) {
  char b[96];
  int n = snprintf(b, sizeof b, "{\"error\":\"payload_too_large\",\"limit\":%lld}", (long long)limit);
  ak_counter_add(e->m_refused[R_PAYLOAD_TOO_LARGE], 1);
  count(e, 413, t0);
  reply(r, 413, b, (size_t)n, 0);
}

/* The writer's callback, on its thread: hand the request back to its loop. */
static void on_committed(ak_write_req_t *req, void *ctx) {
  (void)req;
  conn_t *c = ctx;
  ak_hreq_resume(c->r); /* last touch: the loop may answer and free c after this */
}

/* The one place a request gives back what it holds: at its answer, whatever it is (a
 * refusal, a duplicate, a failed or a good commit), or when its client left first. */
static void settle(conn_t *c, bool stored, const uint8_t holder[16]) {
  ak_ticket_settle_held(&c->ticket, stored, holder);
  c->req.dedupe = NULL; /* the ticket's, freed with it */
}

/* A repeat of a stored event: the first hook's id, and nothing stored. */
static void answer_duplicate(ak_edge_t *e, ak_hreq_t *r, const uint8_t first_id[16], int64_t t0) {
  char id[AK_UUID_STR_LEN], body[128];
  ak_uuid_format(first_id, id);
  int n = snprintf(body, sizeof body, "{\"status\":\"accepted\",\"id\":\"%s\",\"duplicate\":true}", id);
  count(e, 201, t0);
  reply(r, 201, body, (size_t)n, 0);
}

/* A refusal before anything reached the writer: what the ticket holds goes back first. */
static void refuse_settled(ak_edge_t *e, conn_t *c, unsigned status, refuse_t why, const char *code,
                           int retry_after) {
  settle(c, false, NULL);
  c->state = ST_ANSWERED;
  refuse(e, c->r, status, why, code, retry_after, c->t0_ns);
}

/* 429 rate_limited: the tenant's quota (node or fleet) is spent. */
static void rate_limited(ak_edge_t *e, conn_t *c, int64_t retry_ns) {
  ak_instance_t *inst = e->inst;
  settle(c, false, NULL);
  c->state = ST_ANSWERED;
  if (ak_metrics_per_id(inst->metrics)) {
    const char *tv[] = {inst->name, c->tenant};
    ak_counter_add(ak_metrics_series(e->f_rl_rejected, tv), 1);
  } else {
    ak_counter_add(e->m_rl_rejected_all, 1);
  }
  refuse_limit(e, c->r, 429, L_RATE_LIMITED, ak_gcra_retry_after_s(retry_ns), c->t0_ns);
}

typedef enum { TAIL_QUEUED = 0, TAIL_ANSWER } tail_t;
static tail_t admit_tail(ak_edge_t *e, conn_t *c, bool on_loop);

/* The fleet's verdict is in, on the fleet thread, the request suspended: an admitted (or
 * node-local) hook goes on to the writer from here, which answers it; anything else goes
 * back to its loop to be answered. */
static void on_fleet_done(ak_fleet_call_t *call, void *ctx) {
  (void)call;
  conn_t *c = ctx;
  if (admit_tail(c->edge, c, false) == TAIL_ANSWER) ak_hreq_resume(c->r); /* last touch */
}

/* The answer to the writer's verdict (c->req.status), the ticket already settled. */
static void respond(ak_edge_t *e, conn_t *c, const uint8_t first_id[16]) {
  ak_hreq_t *mc = c->r;
  switch (c->req.status) {
    case AK_WR_COMMITTED: {
      char id[AK_UUID_STR_LEN], body[128];
      int n;
      if (c->req.kind == AK_WRITE_QUARANTINE) {
        ak_counter_add(e->m_quarantined, 1);
        n = snprintf(body, sizeof body, "{\"status\":\"quarantined\",\"reason\":\"%s\"}",
                     ak_verify_reason_text((ak_verify_reason_t)c->req.reason));
        count(e, 202, c->t0_ns);
        reply(mc, 202, body, (size_t)n, 0);
        return;
      }
      ak_uuid_format(c->req.id, id);
      n = snprintf(body, sizeof body, "{\"status\":\"accepted\",\"id\":\"%s\"}", id);
      count(e, 201, c->t0_ns);
      reply(mc, 201, body, (size_t)n, 0);
      return;
    }
    case AK_WR_DUPLICATE:
      answer_duplicate(e, mc, first_id, c->t0_ns);
      return;
    case AK_WR_DEDUPE_QUOTA:
      refuse(e, mc, 503, R_DEDUPE_QUOTA, "dedupe_quota", 60, c->t0_ns);
      return;
    case AK_WR_OVERLOAD:
      refuse(e, mc, 503, R_OVERLOAD, "overload", 1, c->t0_ns);
      return;
    case AK_WR_DEADLINE:
      refuse(e, mc, 503, R_COMMIT_DEADLINE, "store_unavailable", 1, c->t0_ns);
      return;
    case AK_WR_DRAINING:
      refuse(e, mc, 503, R_DRAINING, "draining", 1, c->t0_ns);
      return;
    case AK_WR_TENANT_OVERLOAD:
      refuse_limit(e, mc, 429, L_TENANT_OVERLOAD, 1, c->t0_ns);
      return;
    case AK_WR_INTAKE_UNAVAILABLE:
      refuse(e, mc, 503, R_INTAKE_UNAVAILABLE, "intake_unavailable", 1, c->t0_ns);
      return;
    case AK_WR_INTAKE_PENDING:
      refuse(e, mc, 503, R_INTAKE_PENDING, "intake_pending", 1, c->t0_ns);
      return;
    case AK_WR_STORE_UNAVAILABLE:
    default:
      refuse(e, mc, 503, R_STORE_UNAVAILABLE, "store_unavailable", 1, c->t0_ns);
      return;
  }
}

static void answer(ak_edge_t *e, conn_t *c) {
  c->state = ST_ANSWERED;
  free(c->req.rec);
  c->req.rec = NULL;
  uint8_t first_id[16] = {0};
  bool dup = c->req.status == AK_WR_DUPLICATE && c->req.dedupe;
  if (dup) memcpy(first_id, c->req.dedupe->first_id, 16);
  bool committed = c->req.status == AK_WR_COMMITTED;
  /* wal.type dual: stored, but not confirmed in the intake log (503): it is completed by
   * the reconciler, and its fleet claim is held pending until then */
  bool half = !committed && c->req.stored && c->req.kind == AK_WRITE_HOOK;
  if (half && c->ticket.fleet && e->inst->intake) {
    ak_intake_hold_claim(e->inst->intake, c->req.id, c->ticket.fleet);
    c->ticket.fleet = NULL;
  }
  bool stored = committed || half;
  settle(c, stored, committed ? c->req.id : dup ? first_id : NULL);
  if (c->published && (c->req.status == AK_WR_STORE_UNAVAILABLE || c->req.status == AK_WR_DEADLINE)) {
    refuse(e, c->r, 503, c->req.status == AK_WR_DEADLINE ? R_PUBLISH_TIMEOUT : R_PUBLISH_FAILED,
           "store_unavailable", 1, c->t0_ns);
    return;
  }
  respond(e, c, first_id);
}

/* The raw query string (as sent, no percent-decoding) without the parameters named skip
 * (a verifier's credential) and without empty parameters; NULL when nothing is left. */
static char *query_string(ak_hreq_t *r, const char *skip, size_t *len) {
  size_t ql = 0;
  const char *q = ak_hreq_query(r, &ql);
  *len = 0;
  if (!q) return NULL;
  size_t sl = skip ? strlen(skip) : 0;
  ak_buf_t b = AK_BUF_INIT;
  for (size_t i = 0; i < ql;) {
    const char *seg = q + i, *amp = memchr(seg, '&', ql - i);
    size_t n = amp ? (size_t)(amp - seg) : ql - i;
    i += n + 1;
    if (n == 0) continue;
    const char *eq = memchr(seg, '=', n);
    size_t kl = eq ? (size_t)(eq - seg) : n;
    if (skip && kl == sl && memcmp(seg, skip, sl) == 0) continue;
    if (b.len) ak_buf_append(&b, "&", 1);
    ak_buf_append(&b, seg, n);
  }
  return b.p ? ak_buf_take(&b, len) : NULL; /* NULL: no parameter (or out of memory) */
}

static bool build_record(ak_edge_t *e, conn_t *c, const ak_header_t *hv, size_t hn);
static void answer_halt(ak_edge_t *e, conn_t *c);

static void submit(ak_edge_t *e, conn_t *c) {
  ak_instance_t *inst = e->inst;
  ak_hreq_t *r = c->r;
  const ak_verifier_t *v = c->sv->verifier;
  ak_ticket_init(&c->ticket, inst, c->tenant, strlen(c->tenant), c->len);
  const ak_header_t *hv;
  size_t hn = ak_hreq_headers(r, &hv);

  ak_verify_reason_t vr = AK_VR_OK;
  uint32_t flags = 0;
  uint8_t kind = AK_WRITE_HOOK;
  size_t qlen = 0;
  if (v && !ak_verifier_is_none(v)) {
    /* only a query-token verifier reads the query string */
    const char *q = ak_verifier_credential_param(v) ? ak_hreq_query(r, &qlen) : NULL;
    uint8_t cert[32];
    const uint8_t *certp = NULL;
    if (ak_verifier_needs_client_cert(v) && ak_hreq_peer_cert_sha256(r, cert)) certp = cert;
    int64_t now_s = 0;
#ifdef AK_TEST_HOOKS
    now_s = e->test_now_s;
    size_t pl = 0;
    const char *pin = ak_hreq_header(r, "x-ankusa-test-now", &pl);
    if (pin) {
      char tmp[24] = "";
      memcpy(tmp, pin, pl < sizeof tmp - 1 ? pl : sizeof tmp - 1);
      now_s = atoll(tmp);
    }
#endif
    ak_verify_input_t in = {
      .headers = hv, .nheaders = hn, .body = c->body, .body_len = c->len, .query = q,
      .query_len = q ? qlen : 0, .client_cert_sha256 = certp, .now_s = now_s ? now_s : (int64_t)time(NULL),
    };
    vr = ak_verifier_check(v, &in);
    qlen = 0;
    if (c->es->weak) ak_counter_add(c->es->weak, 1);
    if (vr != AK_VR_OK) {
      ak_counter_add(e->m_verify_fail[vr], 1);
      ak_counter_add(c->es->m_verify_fail, 1);
      if (c->src->on_verify_failure == AK_OVF_REJECT) {
        char b[128];
        int n = snprintf(b, sizeof b, "{\"error\":\"verification_failed\",\"reason\":\"%s\"}",
                         ak_verify_reason_text(vr));
        ak_counter_add(e->m_refused[R_VERIFICATION_FAILED], 1);
        count(e, 401, c->t0_ns);
        c->state = ST_ANSWERED;
        reply(r, 401, b, (size_t)n, 0);
        return;
      }
      if (c->src->on_verify_failure == AK_OVF_ACCEPT_FLAG) {
        flags |= AK_ENV_FLAG_VERIFY_FAILED;
        ak_counter_add(e->m_flagged, 1);
      } else {
        int64_t retry_ms = 0;
        ak_pen_admit_t pa = ak_ticket_take_pen(&c->ticket, c->es->pen, &retry_ms);
        if (pa != AK_PEN_OK) {
          c->state = ST_ANSWERED;
          if (pa == AK_PEN_RATE_LIMITED) ak_counter_add(c->es->q_rate, 1);
          else if (pa == AK_PEN_FULL) ak_counter_add(c->es->q_full, 1);
          if (pa == AK_PEN_RATE_LIMITED)
            refuse(e, r, 429, R_QUARANTINE_RATE_LIMITED, "quarantine_rate_limited",
                   (int)((retry_ms + 999) / 1000 > 0 ? (retry_ms + 999) / 1000 : 1), c->t0_ns);
          else if (pa == AK_PEN_FULL)
            refuse(e, r, 503, R_QUARANTINE_FULL, "quarantine_full", 60, c->t0_ns);
          else
            refuse(e, r, 503, R_QUARANTINE_OVERLOAD, "overload", 1, c->t0_ns);
          return;
        }
        kind = AK_WRITE_QUARANTINE;
      }
    }
  }

  /* the provider event key, from every header and the raw body; a flagged hook gets none,
   * so a forged request cannot take the key of the real event */
  c->req.kind = kind;
  c->req.reason = (uint8_t)vr;
  c->flags = flags;
  c->dkey = kind == AK_WRITE_HOOK && !(flags & AK_ENV_FLAG_VERIFY_FAILED) && inst->dedupe
              ? ak_dedupe_key_extract(c->src, hv, hn, c->body, c->len, &c->dklen)
              : NULL;
  if (c->dkey && !inst->publish) { /* wal.type none keeps no key: the sinks' consumers dedupe */
    uint8_t first[16];
    if (!ak_ticket_claim(&c->ticket, c->src->id, c->dkey, c->dklen, c->src->dedupe_ttl_ms)) {
      refuse_settled(e, c, 503, R_OVERLOAD, "overload", 1);
      return;
    }
    c->req.dedupe = c->ticket.claim;
    if (ak_dedupe_seen(inst->dedupe, c->req.dedupe, first)) {
      /* wal.type dual: the first hook is stored but not confirmed in both halves yet */
      if (ak_writer_pending(inst->writer, first)) {
        refuse_settled(e, c, 503, R_INTAKE_PENDING, "intake_pending", 1);
        return;
      }
      settle(c, false, NULL);
      c->state = ST_ANSWERED;
      answer_duplicate(e, r, first, c->t0_ns);
      return;
    }
  }
  /* fleet scope: the tenant's quota and the event's claim in the fleet store, one call
   * (fleet/fleet.h). The request waits suspended; the fleet thread takes an admitted
   * hook on to the writer itself (admit_tail), so it comes back here once, answered */
  ak_fleet_t *fl = inst->fleet;
  if (fl) {
    bool charge = false, claim = c->dkey && ak_fleet_dedupe_scope(fl) && !inst->publish;
    ak_ratelimit_t lim;
    if (ak_fleet_rate_scope(fl) && kind == AK_WRITE_HOOK && vr == AK_VR_OK &&
        ak_quota_lookup(inst->quota, c->tenant, strlen(c->tenant), &lim) != AK_QUOTA_NONE &&
        (lim.hooks.rate > 0 || lim.bytes.rate > 0))
      charge = true;
    if (charge || claim) {
      ak_fleet_call_t *fc = calloc(1, sizeof *fc);
      if (!fc) {
        refuse_settled(e, c, 503, R_OVERLOAD, "overload", 1);
        return;
      }
      fc->charge = charge;
      if (charge) fc->lim = lim;
      fc->bytes = c->len;
      fc->claim = claim;
      if (claim) {
        memcpy(fc->digest, c->ticket.claim->digest, 16);
        fc->ttl_ms = c->src->dedupe_ttl_ms;
      }
      snprintf(fc->tenant, sizeof fc->tenant, "%s", c->tenant);
      fc->done = on_fleet_done;
      fc->ctx = c;
      c->ticket.fleet = fc;
      c->state = ST_FLEET;
      if (ak_fleet_begin(fl, fc)) {
        /* the record first, here on the request's loop (it reads the request): the
         * fleet thread carries the hook on from its verdict without touching it */
        if (!build_record(e, c, hv, hn)) {
          refuse_settled(e, c, 503, R_OVERLOAD, "overload", 1);
          return;
        }
        ak_hreq_suspend(r); /* before the verdict can come */
        ak_fleet_send(fl, fc);
        return;
      }
      /* the breaker is open: node-local at once, on this loop */
    }
  }
  if (admit_tail(e, c, true) == TAIL_ANSWER) answer_halt(e, c);
}

/* Builds c->req's record: store_headers applied, a verifier's credential header and
 * query parameter removed. The request's loop only. False: out of memory. */
static bool build_record(ak_edge_t *e, conn_t *c, const ak_header_t *hv, size_t hn) {
  ak_instance_t *inst = e->inst;
  ak_hreq_t *r = c->r;
  const ak_verifier_t *v = c->sv->verifier;
  size_t qlen = 0;
  const char *cred_hdr = v ? ak_verifier_credential_header(v) : NULL;
  const char *cred_param = v ? ak_verifier_credential_param(v) : NULL;
  ak_header_t *kept = hn ? malloc(hn * sizeof *kept) : NULL;
  char *hashbuf = hn ? malloc(hn * AK_HDR_HASH_LEN) : NULL;
  size_t nkept = hn && kept && hashbuf ? ak_header_policy_apply(e->hpol, hv, hn, cred_hdr, kept, hashbuf) : 0;
  char *sq = query_string(r, cred_param, &qlen);
  size_t ul = 0;
  const char *url = ak_hreq_path(r, &ul);
  const char *method = ak_hreq_method(r);
  char *path = malloc(ul + qlen + 2);
  if (!path) {
    free(sq);
    free(kept);
    free(hashbuf);
    return false;
  }
  memcpy(path, url, ul);
  if (qlen) {
    path[ul] = '?';
    memcpy(path + ul + 1, sq, qlen);
  }
  path[ul + (qlen ? qlen + 1 : 0)] = 0;
  free(sq);

  size_t ctl = 0;
  const char *ct = ak_hreq_header(r, "Content-Type", &ctl);
  ak_envelope_t env = {0};
  ak_uuid7_new(&inst->ids, c->received_at_ms, env.id);
  env.received_at_ms = c->received_at_ms;
  env.tenant = c->tenant;
  env.tenant_len = strlen(c->tenant);
  env.source = c->src->id;
  env.source_len = strlen(c->src->id);
  env.method = method;
  env.method_len = strlen(method);
  env.path = path;
  env.path_len = strlen(path);
  env.content_type = ct;
  env.content_type_len = ct ? ctl : 0;
  env.headers = kept;
  env.nheaders = nkept;
  env.flags = c->flags;
  env.body = c->body;
  env.body_len = c->len;
  env.dedupe_key = c->dkey;
  env.dedupe_key_len = c->dkey ? c->dklen : 0;
  size_t rl = 0;
  uint8_t *rec = ak_envelope_encode(&env, &rl);
  free(kept);
  free(hashbuf);
  free(path);
  if (!rec) return false;
  c->req.rec = rec;
  c->req.rec_len = rl;
  c->req.body_len = c->len;
  memcpy(c->req.id, env.id, 16);
  c->req.received_at_ms = c->received_at_ms;
  c->req.source = c->src;
  c->req.tenant = c->tenant;
  c->req.tenant_len = strlen(c->tenant);
  c->req.done = on_committed;
  c->req.ctx = c;
  free(c->body);
  c->body = NULL;
  return true;
}

/* From the fleet's verdict (or none) to the writer: the tenant's node quota, the record
 * (on the loop, after the quota, so a refused hook costs no encoding), its share of the
 * queue, the submit. Runs on the request's loop (on_loop: it suspends the request before
 * the submit) or on the fleet thread while the request is suspended (the fleet thread is
 * then the one serving it; the record was built before the call). Never answers:
 * TAIL_ANSWER leaves c->halt for answer_halt, on the loop; TAIL_QUEUED means the writer
 * (or its refusal, through on_resume) answers. */
static tail_t admit_tail(ak_edge_t *e, conn_t *c, bool on_loop) {
  ak_instance_t *inst = e->inst;
  ak_fleet_call_t *fc = c->ticket.fleet;
  bool fleet_charged = false;
  if (fc) {
    switch (fc->verdict) {
      case AK_FLEET_DUPLICATE:
      case AK_FLEET_RATE_LIMITED:
      case AK_FLEET_PENDING:
        c->halt = H_FLEET;
        return TAIL_ANSWER;
      case AK_FLEET_ADMITTED:
        fleet_charged = fc->charge;
        break;
      case AK_FLEET_LOCAL:
        break; /* node-local: this node's buckets and its writer's index answer */
    }
  }
  /* the tenant's quota: verified hooks only, so a forged flood spends none of it; after
   * the dedupe check, so a provider's retry of a stored event spends none either */
  if (c->req.kind == AK_WRITE_HOOK && c->req.reason == AK_VR_OK && !fleet_charged &&
      !ak_ticket_take_quota(&c->ticket, ak_mono_ns(), &c->retry_ns)) {
    c->halt = H_QUOTA;
    return TAIL_ANSWER;
  }
  if (!c->req.rec) {
    const ak_header_t *hv;
    size_t hn = ak_hreq_headers(c->r, &hv);
    if (!on_loop || !build_record(e, c, hv, hn)) { /* never off the loop: built before the call */
      c->halt = H_NOMEM;
      return TAIL_ANSWER;
    }
  }
  /* the tenant's share of the queue: hooks of its requests, not pen writes (under wal.type
   * none a hook goes to its sinks instead, and never queues) */
  c->published = c->req.kind == AK_WRITE_HOOK && inst->publish;
  if (c->req.kind == AK_WRITE_HOOK && !c->published) {
    ak_wr_status_t share = ak_ticket_take_share(&c->ticket);
    if (share != AK_WR_QUEUED) {
      c->req.status = share;
      c->halt = H_STATUS;
      return TAIL_ANSWER;
    }
    /* checked again with the share held: an erase that starts now waits for this share
     * (tenant/erase.c), one that started before is seen here */
    if (inst->tenant_closing && inst->tenant_closing(inst->tenant_closing_ctx, c->ticket.tenant, c->ticket.tenant_len)) {
      c->halt = H_ERASING;
      return TAIL_ANSWER;
    }
  }
  c->state = ST_SUBMITTED;
  /* suspend first: the writer may resume it before submit() returns */
  if (on_loop) ak_hreq_suspend(c->r);
  ak_wr_status_t st =
      c->published ? ak_publish_submit(inst->publish, &c->req) : ak_writer_submit(inst->writer, &c->req);
  if (st != AK_WR_QUEUED) {
    c->req.status = st;
    ak_hreq_resume(c->r); /* answered from on_resume, like a commit */
  }
  return TAIL_QUEUED;
}

/* The answer to what stopped admit_tail (c->halt), on the request's loop. */
static void answer_halt(ak_edge_t *e, conn_t *c) {
  ak_hreq_t *r = c->r;
  switch (c->halt) {
    case H_FLEET: {
      ak_fleet_call_t *fc = c->ticket.fleet;
      if (fc->verdict == AK_FLEET_DUPLICATE) {
        uint8_t first[16];
        memcpy(first, fc->dup_id, 16);
        settle(c, false, NULL);
        c->state = ST_ANSWERED;
        answer_duplicate(e, r, first, c->t0_ns);
      } else if (fc->verdict == AK_FLEET_RATE_LIMITED) {
        rate_limited(e, c, fc->retry_ms * 1000000);
      } else {
        int ra = (int)((fc->retry_ms + 999) / 1000);
        settle(c, false, NULL);
        c->state = ST_ANSWERED;
        refuse(e, r, 409, R_DEDUPE_PENDING, "dedupe_pending", ra < 1 ? 1 : ra, c->t0_ns);
      }
      return;
    }
    case H_QUOTA:
      rate_limited(e, c, c->retry_ns);
      return;
    case H_NOMEM:
      refuse_settled(e, c, 503, R_OVERLOAD, "overload", 1);
      return;
    case H_ERASING:
      refuse_settled(e, c, 503, R_TENANT_ERASING, "tenant_erasing", 5);
      return;
    case H_STATUS:
    default:
      free(c->req.rec);
      c->req.rec = NULL;
      settle(c, false, NULL);
      c->state = ST_ANSWERED;
      respond(e, c, NULL);
      return;
  }
}

static void on_head(void *ctx, ak_hreq_t *r) {
  tl_es = NULL;
  ak_edge_t *e = ctx;
  ak_instance_t *inst = e->inst;
  int64_t t0 = ak_mono_ns();
  const char *method = ak_hreq_method(r);
  size_t ul = 0;
  const char *url = ak_hreq_path(r, &ul);
  if (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0) {
    if (strcmp(url, "/health") == 0) {
      count(e, 200, 0);
      ak_http_health(inst, r);
      return;
    }
    if (strcmp(url, "/ready") == 0) {
      unsigned st;
      ak_http_ready(inst, r, &st);
      count(e, st, 0);
      return;
    }
  }
  /* the route guard first (routes.enabled), on the head alone: nothing is read past it */
  if (inst->routes) {
    if (!ak_routes_ready(inst->routes)) { /* a shared route store never read yet: never a false 404 */
      refuse(e, r, 503, R_STORE_UNAVAILABLE, "store_unavailable", 0, t0);
      return;
    }
    ak_guard_result_t g;
    ak_routes_check(inst->routes, r, &g);
    if (g.decision != AK_GUARD_ALLOW) {
      const char *code;
      unsigned st = ak_routes_refusal(inst->routes, g.decision, &code);
      refuse(e, r, st, (refuse_t)(R_ROUTE_NOT_FOUND + (g.decision - AK_GUARD_ROUTE_NOT_FOUND)), code, 0, t0);
      return;
    }
  }
  if (strcmp(method, "POST") != 0) {
    refuse(e, r, 404, R_NOT_FOUND, "not_found", 0, t0);
    return;
  }
  ak_route_t route;
  ak_route_status_t rs = ak_route_parse(e->hc, url, &route);
  if (rs != AK_ROUTE_OK) {
    if (rs == AK_ROUTE_NOT_FOUND) refuse(e, r, 404, R_NOT_FOUND, "not_found", 0, t0);
    else refuse(e, r, 404, R_UNKNOWN_SOURCE, "unknown_source", 0, t0);
    return;
  }

  /* the layer accepted one decimal Content-Length or chunked: -1 = chunked or no body */
  int64_t max = e->hc->max_body_bytes;
  long long clen = ak_hreq_content_length(r);
  if (clen > max) {
    too_large(e, r, max, t0);
    return;
  }
  /* received_at is read before the lookup: a hook bound to a source that was deleted
   * meanwhile is then older than any source re-created under the name (born_ms) */
  int64_t received_at = ak_now_ms();
  ak_source_t *sv = ak_sources_get(inst->sources, route.source_id, strlen(route.source_id));
  const ak_source_cfg_t *src = sv ? &sv->cfg : NULL;
  const char *tenant;
  if (!sv && ak_sources_incomplete(inst->sources)) { /* the shared source store is not read yet */
    refuse(e, r, 503, R_STORE_UNAVAILABLE, "store_unavailable", 1, t0);
    return;
  }
  if (!sv || ak_route_bind_source(e->hc, &route, src, &tenant) != AK_ROUTE_OK) {
    ak_source_release(sv);
    refuse(e, r, 404, R_UNKNOWN_SOURCE, "unknown_source", 0, t0);
    return;
  }
  if (inst->tenant_closing && inst->tenant_closing(inst->tenant_closing_ctx, tenant, strlen(tenant))) {
    ak_source_release(sv);
    refuse(e, r, 503, R_TENANT_ERASING, "tenant_erasing", 5, t0);
    return;
  }
  /* bound to a source born after the clock was read (or the clock stepped back): the
   * hook is this source's, so it is received no earlier than the source was born */
  if (received_at < sv->born_ms) received_at = sv->born_ms;
  edge_src_t *es = sv->ext[AK_SOURCE_EXT_EDGE];
  if (!es) { /* every version gets one while the edge runs; never seen, but never crash */
    ak_source_release(sv);
    refuse(e, r, 503, R_STORE_UNAVAILABLE, "store_unavailable", 1, t0);
    return;
  }
  tl_es = es; /* bound: what is answered from here on is this source's */

  /* the layer refused control bytes and non-tokens in names; what is stored must also
   * be printable text (edge/route.h) */
  const ak_header_t *hv, *bad = NULL;
  size_t hn = ak_hreq_headers(r, &hv);
  for (size_t i = 0; i < hn && !bad; i++)
    if (!ak_header_name_ok(hv[i].name, hv[i].name_len) || !ak_header_value_ok(hv[i].value, hv[i].value_len))
      bad = &hv[i];
  if (bad) {
    char name[512], b[600];
    ak_json_quote(name, sizeof name, bad->name, bad->name_len > 120 ? 120 : bad->name_len);
    ak_source_release(sv);
    int n = snprintf(b, sizeof b, "{\"error\":\"invalid_header\",\"header\":%s}", name);
    ak_counter_add(e->m_refused[R_INVALID_HEADER], 1);
    count(e, 400, t0);
    reply(r, 400, b, (size_t)n, 0);
    return;
  }

  /* pre-read limits: the tenant's body cap, then per address, node, source bytes */
  int64_t max_body = max, tmax = ak_quota_max_body(inst->quota, tenant, strlen(tenant));
  if (tmax > 0 && tmax < max_body) max_body = tmax;
  if (clen > max_body) {
    ak_source_release(sv);
    too_large(e, r, max_body, t0);
    return;
  }
  if (e->adm_on || es->adm) {
    int64_t retry_ns = 0;
    static const limit_t why[] = {L_RATE_LIMITED, L_IP, L_NODE, L_SOURCE};
    ak_admit_t ad = ak_admission_check(e->adm, r, es->adm, clen, ak_mono_ns(), &retry_ns);
    if (ad != AK_ADMIT_OK) {
      ak_source_release(sv);
      refuse_limit(e, r, 429, why[ad], ak_gcra_retry_after_s(retry_ns), t0);
      return;
    }
  }

  conn_t *c = calloc(1, sizeof *c);
  if (!c) {
    ak_source_release(sv);
    refuse(e, r, 503, R_OVERLOAD, "overload", 1, t0);
    return;
  }
  c->t0_ns = t0;
  c->received_at_ms = received_at;
  c->sv = sv;
  c->es = es;
  c->src = src;
  c->tenant = tenant; /* points into config or into route copy below */
  c->r = r;
  c->edge = e;
  c->max_body = max_body;
  c->meter_body = clen < 0 && ak_admission_meters_source(es->adm);
  if (tenant != src->tenant) {
    /* URL tenant of a shared source: keep our own copy */
    char *t = strdup(tenant);
    c->tenant = t ? t : "default";
  }
  if (clen > 0) {
    /* a declared length is a hint, not a promise: preallocate at most 64 KiB */
    c->cap = clen < 65536 ? (size_t)clen : 65536;
    c->body = malloc(c->cap);
    if (!c->body) c->cap = 0;
  }
  ak_hreq_set_data(r, c);
}

static void on_body(void *ctx, ak_hreq_t *r, const uint8_t *p, size_t n) {
  (void)ctx;
  conn_t *c = ak_hreq_data(r);
  if (!c || c->state != ST_READING || c->too_large || c->late_retry || n == 0) return;
  int64_t retry_ns = 0;
  if (c->meter_body && !ak_admission_charge_body(c->es->adm, n, ak_mono_ns(), &retry_ns)) {
    c->late_retry = ak_gcra_retry_after_s(retry_ns); /* swallow the rest; 429 at the end */
    free(c->body);
    c->body = NULL;
    c->len = c->cap = 0;
    return;
  }
  if ((int64_t)(c->len + n) > c->max_body) {
    c->too_large = true; /* swallow the rest; answer 413 at the end */
    free(c->body);
    c->body = NULL;
    c->len = c->cap = 0;
    return;
  }
  if (c->len + n > c->cap) {
    size_t nc = c->cap ? c->cap * 2 : 4096;
    while (nc < c->len + n) nc *= 2;
    if ((int64_t)nc > c->max_body) nc = (size_t)c->max_body;
    uint8_t *nb = realloc(c->body, nc);
    if (!nb) {
      c->too_large = true; /* out of memory: the body cannot be kept */
      free(c->body);
      c->body = NULL;
      c->len = c->cap = 0;
      return;
    }
    c->body = nb;
    c->cap = nc;
  }
  memcpy(c->body + c->len, p, n);
  c->len += n;
}

static void on_end(void *ctx, ak_hreq_t *r) {
  ak_edge_t *e = ctx;
  conn_t *c = ak_hreq_data(r);
  tl_es = c ? c->es : NULL;
  if (!c || c->state != ST_READING) return;
  ak_counter_add(e->m_bodies_read, 1);
  if (c->too_large) {
    c->state = ST_ANSWERED;
    too_large(e, r, c->max_body, c->t0_ns);
    return;
  }
  if (c->late_retry) {
    c->state = ST_ANSWERED;
    refuse_limit(e, r, 429, L_SOURCE, c->late_retry, c->t0_ns);
    return;
  }
  submit(e, c);
}

static void on_resume(void *ctx, ak_hreq_t *r) {
  ak_edge_t *e = ctx;
  conn_t *c = ak_hreq_data(r);
  tl_es = c ? c->es : NULL;
  if (c && c->state == ST_FLEET) answer_halt(e, c);
  else if (c && c->state == ST_SUBMITTED) answer(e, c);
}

/* The last call for a request: give back what it holds. */
static void on_done(void *ctx, ak_hreq_t *r, bool answered) {
  ak_edge_t *e = ctx;
  conn_t *c = ak_hreq_data(r);
  tl_es = c ? c->es : NULL;
  if (!c) return;
  ak_hreq_set_data(r, NULL);
  if (c->state == ST_READING && !answered) {
    /* the client went away or was too slow mid-body: nothing stored */
    ak_counter_add(e->m_refused[R_BODY_READ_FAILED], 1);
    count(e, 400, c->t0_ns);
  } else if (c->state == ST_ANSWERED && !answered) {
    /* the answer had nobody to go to (the hook may well be stored; the provider's retry
     * is what covers it) */
    ak_counter_add(e->m_abandoned, 1);
  }
  if (c->tenant != c->src->tenant) free((void *)c->tenant);
  free(c->body);
  free(c->req.rec);
  free(c->dkey);
  settle(c, false, NULL); /* a request that never got an answer: nothing of it is stored */
  ak_source_release(c->sv); /* last: c->src and c->es point into it */
  free(c);
}

/* The layer's own refusals (framing, limits, timeouts): counted like ours. */
static void on_refused(void *ctx, unsigned status, const char *code) {
  tl_es = NULL;
  ak_edge_t *e = ctx;
  static const struct { const char *code; refuse_t why; } map[] = {
    {"bad_request", R_BAD_REQUEST}, {"invalid_header", R_INVALID_HEADER}, {"not_implemented", R_NOT_IMPLEMENTED},
    {"request_header_fields_too_large", R_HEADERS_TOO_LARGE}, {"uri_too_long", R_URI_TOO_LONG},
    {"request_timeout", R_REQUEST_TIMEOUT}, {"http_version_not_supported", R_HTTP_VERSION},
    {"overload", R_CONNECTION_LIMIT},
  };
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (strcmp(code, map[i].code) == 0) ak_counter_add(e->m_refused[map[i].why], 1);
  count(e, status, 0);
}

static const ak_hhandler_t edge_handler = {
  .on_head = on_head, .on_body = on_body, .on_end = on_end, .on_resume = on_resume, .on_done = on_done,
  .on_refused = on_refused,
};

static void edge_src_free(void *state) {
  edge_src_t *es = state;
  if (!es) return;
  ak_pen_bucket_free(es->pen);
  ak_admission_source_free(es->adm);
  free(es);
}

/* Runs for every source version: at boot, and on an admin thread when the API makes
 * one (the metrics registry and the pen are thread-safe to call from there). */
static void *edge_src_build(void *ctx, const ak_source_t *s, char *err, size_t errlen) {
  ak_edge_t *e = ctx;
  edge_src_t *es = calloc(1, sizeof *es);
  if (!es) goto oom;
  if (s->cfg.on_verify_failure == AK_OVF_QUARANTINE) {
    if (!e->inst->pen || !(es->pen = ak_pen_bucket_new(e->inst->pen))) goto oom;
    ak_metrics_t *m = e->inst->metrics;
    const char *const ql[] = {"instance", "source_id", NULL};
    const char *qv[] = {e->inst->name, ak_metrics_id_label(m, s->cfg.id)};
    /* the families were made by ak_edge_new (same name: the same family) */
    es->q_full = ak_metrics_series(ak_metrics_family(m, "ankusa_quarantine_full_total", "", AK_METRIC_COUNTER, ql,
                                                     NULL, 0), qv);
    es->q_rate = ak_metrics_series(ak_metrics_family(m, "ankusa_quarantine_rate_limited_total", "",
                                                     AK_METRIC_COUNTER, ql, NULL, 0), qv);
  }
  es->adm = ak_admission_source_new(e->adm, s->spec);
  {
    ak_metrics_t *m = e->inst->metrics;
    const char *sid = ak_metrics_id_label(m, s->cfg.id);
    const char *const ol[] = {"instance", "source_id", "outcome", NULL};
    ak_family_t *of = ak_metrics_family(m, "ankusa_ingest_requests_total", "", AK_METRIC_COUNTER, ol, NULL, 0);
    for (int i = 0; i < O_COUNT; i++) {
      const char *v[] = {e->inst->name, sid, outcome_names[i]};
      es->m_outcome[i] = ak_metrics_series(of, v);
    }
    const char *const dl[] = {"instance", "source_id", NULL};
    const char *dv[] = {e->inst->name, sid};
    es->m_duration = ak_metrics_series(ak_metrics_family(m, "ankusa_ingest_duration_seconds", "",
                                                         AK_METRIC_HISTOGRAM, dl, ak_latency_bounds,
                                                         ak_latency_nbounds), dv);
    const char *const vl[] = {"instance", "source_id", "provider", "scheme", NULL};
    const char *vv[] = {e->inst->name, sid, ak_verifier_type(s->verifier), ak_verifier_scheme(s->verifier)};
    es->m_verify_fail = ak_metrics_series(ak_metrics_family(m, "ankusa_verify_failures_total", "",
                                                            AK_METRIC_COUNTER, vl, NULL, 0), vv);
  }
  if (s->verifier && ak_verifier_weak_hash(s->verifier)) {
    const char *const wl[] = {"instance", "source_id", "scheme", NULL};
    ak_family_t *wf = ak_metrics_family(e->inst->metrics, "ankusa_verifier_weak_hash_total",
                                        "Requests verified with a weak hash (SHA-1), matched or not.",
                                        AK_METRIC_COUNTER, wl, NULL, 0);
    const char *v[] = {e->inst->name, s->cfg.id, ak_verifier_type(s->verifier)};
    es->weak = ak_metrics_series(wf, v);
  }
  return es;
oom:
  edge_src_free(es);
  snprintf(err, errlen, "sources.%s: out of memory", s->cfg.id);
  return NULL;
}

ak_edge_t *ak_edge_new(ak_instance_t *inst) {
  ak_edge_t *e = calloc(1, sizeof *e);
  if (!e) return NULL;
  e->inst = inst;
  e->hc = ak_http_cfg(inst->cfg);
  e->lc = ak_listener_cfg(inst->cfg);
  pthread_mutex_init(&e->tls_mu, NULL);
  ak_metrics_t *m = inst->metrics;
  /* the original's names first (made here so their HELP is set; the per-source series are
   * made by edge_src_build) */
  const char *const osl[] = {"instance", "source_id", "outcome", NULL};
  ak_metrics_family(m, "ankusa_ingest_requests_total",
                    "Ingest requests bound to a source, by outcome (accepted 201, duplicate 200, quarantined 202, "
                    "rejected 4xx, unavailable 5xx).", AK_METRIC_COUNTER, osl, NULL, 0);
  const char *const vsl[] = {"instance", "source_id", "provider", "scheme", NULL};
  ak_metrics_family(m, "ankusa_verify_failures_total",
                    "Requests whose verification failed, by source, verifier type (provider) and scheme.",
                    AK_METRIC_COUNTER, vsl, NULL, 0);
  const char *const sl[] = {"instance", "status", NULL};
  ak_family_t *sf = ak_metrics_family(m, "ankusa_ingest_responses_total",
                                      "Answers on the ingest listener by HTTP status (/health and /ready included).",
                                      AK_METRIC_COUNTER, sl, NULL, 0);
  for (size_t i = 0; i < NSTATUS; i++) {
    char code[8];
    snprintf(code, sizeof code, "%u", status_codes[i]);
    const char *v[] = {inst->name, code};
    e->m_status[i] = ak_metrics_series(sf, v);
  }
  const char *ov[] = {inst->name, "other"};
  e->m_status_other = ak_metrics_series(sf, ov);
  const char *const rl[] = {"instance", "reason", NULL};
  ak_family_t *rf = ak_metrics_family(m, "ankusa_ingest_refused_total",
                                      "Ingest requests refused, by reason (nothing stored).",
                                      AK_METRIC_COUNTER, rl, NULL, 0);
  for (int i = 0; i < R_COUNT; i++) {
    const char *v[] = {inst->name, refuse_names[i]};
    e->m_refused[i] = ak_metrics_series(rf, v);
  }
  for (int i = 0; i < L_COUNT; i++) {
    const char *v[] = {inst->name, limit_names[i]};
    e->m_limit[i] = ak_metrics_series(rf, v);
  }
  e->m_bodies_read = ak_metrics_instance_series(m, inst->name, "ankusa_ingest_bodies_read_total",
                                                "Request bodies the edge read to the end (admitted past the "
                                                "pre-read limits).", AK_METRIC_COUNTER);
  e->m_load_shed = ak_metrics_instance_series(m, inst->name, "ankusa_load_shed_total",
                                              "Requests shed with 503 overload (a queue or the node was full).",
                                              AK_METRIC_COUNTER);
  const char *const tl[] = {"instance", "tenant_id", NULL};
  e->f_rl_rejected = ak_metrics_family(m, "ankusa_rate_limit_rejected_total",
                                       "Verified hooks refused by their tenant's rate limit (429 rate_limited).",
                                       AK_METRIC_COUNTER, tl, NULL, 0);
  const char *const ql[] = {"instance", "source_id", NULL};
  ak_family_t *qff = ak_metrics_family(m, "ankusa_quarantine_full_total",
                                       "Hooks for the quarantine pen refused because it was full.",
                                       AK_METRIC_COUNTER, ql, NULL, 0);
  ak_family_t *qrf = ak_metrics_family(m, "ankusa_quarantine_rate_limited_total",
                                       "Hooks for the quarantine pen refused by its rate limit.",
                                       AK_METRIC_COUNTER, ql, NULL, 0);
  if (!ak_metrics_per_id(m)) { /* the one series each, served from the start */
    const char *tv[] = {inst->name, AK_METRICS_ALL};
    e->m_rl_rejected_all = ak_metrics_series(e->f_rl_rejected, tv);
    ak_metrics_series(qff, tv);
    ak_metrics_series(qrf, tv);
  }
  e->adm = ak_admission_new(inst->cfg);
  e->adm_on = ak_admission_enabled(e->adm);
  const char *const il[] = {"instance", "source_id", NULL};
  const char *iv[] = {inst->name, AK_METRICS_ALL};
  ak_family_t *df = ak_metrics_family(m, "ankusa_ingest_duration_seconds",
                                      "Ack latency: time to answer one ingest request, by source.",
                                      AK_METRIC_HISTOGRAM, il, ak_latency_bounds, ak_latency_nbounds);
  /* requests bound to no source: "_all" below metrics.detail source, not sampled at it */
  e->m_duration = ak_metrics_per_id(m) ? NULL : ak_metrics_series(df, iv);
  e->hpol = ak_header_policy_new(ak_store_headers_spec(inst->cfg));
#ifdef AK_TEST_HOOKS
  const char *tn = getenv("ANKUSA_TEST_NOW");
  if (tn) e->test_now_s = atoll(tn);
#endif
  const char *const vl[] = {"instance", "reason", NULL};
  ak_family_t *vf = ak_metrics_family(m, "ankusa_verify_failure_reasons_total",
                                      "Requests whose verification failed, by reason.", AK_METRIC_COUNTER, vl,
                                      NULL, 0);
  for (int i = 1; i < AK_VR_COUNT; i++) {
    const char *v[] = {inst->name, ak_verify_reason_name((ak_verify_reason_t)i)};
    e->m_verify_fail[i] = ak_metrics_series(vf, v);
  }
  const char *const ol[] = {"instance", "outcome", NULL};
  ak_family_t *of = ak_metrics_family(m, "ankusa_verify_failure_outcomes_total",
                                      "Failed verifications that were stored anyway, by on_verify_failure.",
                                      AK_METRIC_COUNTER, ol, NULL, 0);
  const char *fv[] = {inst->name, "accept_flag"}, *qv[] = {inst->name, "quarantine"};
  e->m_flagged = ak_metrics_series(of, fv);
  e->m_quarantined = ak_metrics_series(of, qv);
  e->m_abandoned = ak_metrics_instance_series(m, inst->name, "ankusa_ingest_abandoned_total", "Requests whose client left before its answer was sent "
                                                       "(the hook may be stored).", AK_METRIC_COUNTER);
  char err[256] = "";
  if (!e->adm || !e->hpol ||
      ak_sources_attach(inst->sources, AK_SOURCE_EXT_EDGE, edge_src_build, edge_src_free, e, err, sizeof err) != 0) {
    ak_log(AK_LOG_ERROR, "edge", "cannot build the edge's per-source state", "reason=\"%s\"",
           err[0] ? err : "out of memory");
    ak_edge_free(e);
    return NULL;
  }
  return e;
}

/* The layer's limits from the listener section (0 in a field = the layer's default). */
static ak_hlimits_t limits_of(const ak_listener_cfg_t *lc) {
  return (ak_hlimits_t){
    .max_request_line = (uint32_t)lc->max_request_line_bytes,
    .max_header_bytes = (uint32_t)lc->max_header_bytes,
    .max_headers = (uint32_t)lc->max_headers,
    .header_timeout_ms = (uint32_t)lc->header_timeout_ms,
    .body_timeout_ms = (uint32_t)lc->body_timeout_ms,
    .body_min_rate = (uint32_t)lc->body_min_rate,
    .idle_timeout_ms = (uint32_t)lc->idle_timeout_ms,
    .write_timeout_ms = (uint32_t)lc->write_timeout_ms,
    .max_connections = (uint32_t)lc->max_connections,
    .max_per_client = (uint32_t)lc->max_connections_per_client,
  };
}

static ak_hserver_t *listen_on(ak_edge_t *e, const char *name, int port, ak_htls_ctx_t *tls, char **err) {
  ak_hserver_cfg_t sc = {
    .name = name, .ip = e->hc->ip, .port = port, .loops = (unsigned)e->lc->loops, .limits = limits_of(e->lc),
    .tls = tls, .handler = &edge_handler, .ctx = e,
  };
  ak_hserver_t *s = ak_hserver_new(&sc, err);
  if (s && ak_hserver_start(s, err) != 0) {
    ak_hserver_free(s);
    s = NULL;
  }
  return s;
}

int ak_edge_start(ak_edge_t *e, char **err) {
  if (!(e->srv = listen_on(e, "ingest", (int)e->hc->port, NULL, err))) return -1;
  if (e->hc->tls.enabled) {
    e->tls_ctx = ak_htls_ctx_ref(e->hc->tls.ctx);
    if (!(e->tls_srv = listen_on(e, "ingest tls", (int)e->hc->tls.port, e->tls_ctx, err))) return -1;
  }
  return 0;
}

int ak_edge_port(const ak_edge_t *e) { return e && e->srv ? ak_hserver_port(e->srv) : 0; }
int ak_edge_tls_port(const ak_edge_t *e) { return e && e->tls_srv ? ak_hserver_port(e->tls_srv) : 0; }

size_t ak_edge_inflight(const ak_edge_t *e) {
  return (e->srv ? ak_hserver_inflight(e->srv) : 0) + (e->tls_srv ? ak_hserver_inflight(e->tls_srv) : 0);
}

/* Sleeps up to ms, in slices. */
static void nap_ms(int64_t ms) {
  while (ms > 0) {
    int64_t s = ms < 100 ? ms : 100;
    struct timespec ts = {0, (long)s * 1000000L};
    nanosleep(&ts, NULL);
    ms -= s;
  }
}

void ak_edge_drain(ak_edge_t *e) {
  const ak_listener_cfg_t *lc = e->lc;
  /* /ready already answers draining: a balancer takes the node out while it still serves */
  if (lc->drain_delay_ms > 0) {
    ak_log(AK_LOG_INFO, "edge", "draining: serving on until the delay passes", "drain_delay_ms=%lld",
           (long long)lc->drain_delay_ms);
    nap_ms(lc->drain_delay_ms);
  }
  if (e->srv) ak_hserver_close_listener(e->srv);
  if (e->tls_srv) ak_hserver_close_listener(e->tls_srv);
  /* the requests being served: each gets its answer within the record deadline, the commit
   * it may be in, and a margin; never longer than drain_timeout_ms */
  int64_t wait_ms = AK_RECORD_DEADLINE_MS + 5000;
  if (wait_ms > lc->drain_timeout_ms) wait_ms = lc->drain_timeout_ms;
  int64_t until = ak_mono_ns() + wait_ms * 1000000;
  while (ak_edge_inflight(e) > 0 && ak_mono_ns() < until) nap_ms(10);
  size_t left = ak_edge_inflight(e);
  if (left)
    ak_log(AK_LOG_WARNING, "edge", "drain timed out with requests in flight", "inflight=%zu waited_ms=%lld", left,
           (long long)wait_ms);
  else
    ak_log(AK_LOG_INFO, "edge", "listeners closed, every request answered", NULL);
}

void ak_edge_reload_tls(ak_edge_t *e) {
  if (!e->tls_srv) return;
  pthread_mutex_lock(&e->tls_mu);
  char *err = NULL;
  ak_htls_ctx_t *fresh = ak_htls_ctx_reload(e->tls_ctx, &err);
  if (!fresh) {
    ak_log(AK_LOG_ERROR, "edge", "TLS certificate not reloaded: the old one stays in use", "reason=\"%s\"",
           err ? err : "?");
    free(err);
  } else {
    uint8_t fp[32];
    char hex[17];
    ak_htls_ctx_cert_sha256(fresh, fp);
    for (int i = 0; i < 8; i++) snprintf(hex + 2 * i, 3, "%02x", fp[i]);
    ak_hserver_set_tls(e->tls_srv, fresh);
    ak_htls_ctx_unref(e->tls_ctx);
    e->tls_ctx = fresh;
    ak_log(AK_LOG_INFO, "edge", "TLS certificate reloaded", "cert_sha256_prefix=%s", hex);
  }
  pthread_mutex_unlock(&e->tls_mu);
}

void ak_edge_stop(ak_edge_t *e) {
  if (e->tls_srv) ak_hserver_stop(e->tls_srv);
  if (e->srv) ak_hserver_stop(e->srv);
}

void ak_edge_free(ak_edge_t *e) {
  if (!e) return;
  ak_edge_stop(e);
  ak_hserver_free(e->tls_srv);
  ak_hserver_free(e->srv);
  ak_htls_ctx_unref(e->tls_ctx);
  ak_sources_detach(e->inst->sources, AK_SOURCE_EXT_EDGE);
  ak_header_policy_free(e->hpol);
  ak_admission_free(e->adm);
  pthread_mutex_destroy(&e->tls_mu);
  free(e);
}

/* ------------------------------------------------------------------- the modules ---- */

/* http.tls: the PEM files are read (and parsed) at load, by edge/tls.c. */
static const ak_opt_t http_tls_rows[] = {
  {.key = "port", .type = AK_OPT_INT, .def = "4443", .min = 0, .max = 65535,
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX, .env = "ANKUSA_HTTP_TLS_PORT",
   .doc = "TLS ingest listener port (0 = pick a free port)", AK_AT(ak_http_tls_cfg_t, port)},
  {.key = "cert", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_REQUIRED | AK_OPTF_HAS_MIN,
   .doc = "PEM file: the server certificate chain, leaf first", AK_AT(ak_http_tls_cfg_t, cert)},
  {.key = "key", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_REQUIRED | AK_OPTF_HAS_MIN,
   .doc = "PEM file: the server certificate's private key (not encrypted); never printed",
   AK_AT(ak_http_tls_cfg_t, key)},
  {.key = "client_ca", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN,
   .doc = "PEM file: the CA bundle client certificates must chain to (client_cert verifier)",
   AK_AT(ak_http_tls_cfg_t, client_ca)},
  {.key = "client_cert", .type = AK_OPT_ENUM, .enum_vals = "none|request|require",
   .flags = AK_OPTF_NULLABLE,
   .doc = "request: ask for a client certificate; require: refuse the handshake without one "
          "from client_ca; default request when client_ca is set, else none",
   AK_AT(ak_http_tls_cfg_t, client_cert)},
  {0},
};

static const ak_opt_t http_rows[] = {
  {.key = "ip", .type = AK_OPT_IP, .flags = AK_OPTF_NULLABLE, .env = "ANKUSA_HTTP_IP",
   .doc = "ingest listeners' bind address (an IP literal); null = every interface, IPv4 and IPv6",
   AK_AT(ak_http_cfg_t, ip)},
  {.key = "port", .type = AK_OPT_INT, .def = "4000", .min = 0, .max = 65535,
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX, .env = "ANKUSA_HTTP_PORT|PORT",
   .doc = "ingest listener port (0 = pick a free port)", AK_AT(ak_http_cfg_t, port)},
  {.key = "max_body_bytes", .type = AK_OPT_INT, .def = "8000000", .min = 1,
   .flags = AK_OPTF_HAS_MIN, .doc = "a larger body gets 413", AK_AT(ak_http_cfg_t, max_body_bytes)},
  {.key = "routing", .type = AK_OPT_ENUM, .def = "path", .enum_vals = "path|tenant_path",
   .doc = "path: POST <prefix>/<source>; tenant_path: POST <prefix>/<tenant>/<source>",
   AK_AT(ak_http_cfg_t, routing)},
  {.key = "prefix", .type = AK_OPT_URL_PREFIX, .def = "/webhooks",
   .doc = "URL path prefix of the catch URLs; \"/\" or \"\" means none", AK_AT(ak_http_cfg_t, prefix)},
  {.key = "tls", .type = AK_OPT_MAP, .children = http_tls_rows, .flags = AK_OPTF_NULLABLE,
   .doc = "a second ingest listener over TLS (client certificates); absent or null = none",
   AK_AT(ak_http_cfg_t, tls)},
  {0},
};

/* listener: the ingest listeners' limits (http/server.h) and the drain (SIGTERM). */
#define LIMIT_ROW(k, d, lo, field, text)                                                                   \
  {.key = k, .type = AK_OPT_INT, .def = d, .min = lo, .max = 2147483647,                                  \
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX, .doc = text, AK_AT(ak_listener_cfg_t, field)}
static const ak_opt_t listener_rows[] = {
  LIMIT_ROW("drain_delay_ms", "5000", 0, drain_delay_ms,
            "on SIGTERM, how long the ingest listeners keep serving after /ready turns 503 (a balancer's time to "
            "notice), before they stop accepting"),
  LIMIT_ROW("drain_timeout_ms", "30000", 0, drain_timeout_ms,
            "on SIGTERM, the longest wait for the requests in flight to be answered once the listeners closed"),
  LIMIT_ROW("loops", "0", 0, loops, "event-loop threads per ingest listener; 0 = one per core"),
  LIMIT_ROW("max_connections", "20000", 1, max_connections,
            "open connections per ingest listener; at the cap the oldest idle keep-alive one is closed, with "
            "none idle the new one gets 503 (RLIMIT_NOFILE is raised to fit)"),
  LIMIT_ROW("max_connections_per_client", "0", 0, max_connections_per_client,
            "open connections per client address; past it 503; 0 = no cap (behind a balancer every connection "
            "has its address)"),
  LIMIT_ROW("max_request_line_bytes", "8192", 64, max_request_line_bytes, "a longer request line gets 414"),
  LIMIT_ROW("max_header_bytes", "32768", 256, max_header_bytes, "larger header lines in all get 431"),
  LIMIT_ROW("max_headers", "100", 1, max_headers, "more header fields get 431"),
  LIMIT_ROW("header_timeout_ms", "10000", 1, header_timeout_ms,
            "a request head must arrive within this time of its first byte; 408"),
  LIMIT_ROW("body_timeout_ms", "10000", 1, body_timeout_ms, "the longest gap between two reads of a body; 408"),
  LIMIT_ROW("body_min_rate", "1024", 0, body_min_rate,
            "bytes per second a body must average once it has taken body_timeout_ms; 408; 0 = no floor"),
  LIMIT_ROW("idle_timeout_ms", "75000", 1, idle_timeout_ms, "an idle keep-alive connection is closed after this"),
  LIMIT_ROW("write_timeout_ms", "30000", 1, write_timeout_ms,
            "an answer the client does not read for this long: the connection is closed"),
  {0},
};
#undef LIMIT_ROW

/* http.tls.client_cert defaults to request when client_ca is set, else none. Asking for
 * a certificate needs the bundle it is checked against. http.tls absent or null = no
 * listener. */
static void http_check(ak_check_t *c, json_t *http, json_t *root) {
  (void)root;
  json_t *tls = json_object_get(http, "tls");
  if (!json_is_object(tls)) return;
  bool has_ca = json_is_string(json_object_get(tls, "client_ca"));
  json_t *m = json_object_get(tls, "client_cert");
  if (json_is_null(m)) json_object_set_new(tls, "client_cert", json_string(has_ca ? "request" : "none"));
  const char *mode = json_string_value(json_object_get(tls, "client_cert"));
  if (mode && strcmp(mode, "none") && !has_ca)
    ak_check_error(c, "http.tls.client_cert: \"%s\" needs http.tls.client_ca (the CA bundle client certificates "
                      "are checked against)", mode);
}

/* After the schema: a named PEM file that is missing or bad is a config error too. */
static int http_finish(void *typed, const json_t *section, const json_t *root, char **err) {
  (void)root;
  ak_http_cfg_t *hc = typed;
  hc->tls.enabled = json_is_object(json_object_get(section, "tls"));
  return ak_tls_load_files(&hc->tls, err);
}

static void http_release(void *typed) { ak_tls_free_files(&((ak_http_cfg_t *)typed)->tls); }

const ak_http_cfg_t *ak_http_cfg(const ak_config_t *cfg) { return ak_config_of(cfg, &ak_mod_edge); }
const ak_listener_cfg_t *ak_listener_cfg(const ak_config_t *cfg) { return ak_config_of(cfg, &ak_mod_listener); }

static int edge_open(ak_instance_t *inst, char **err) {
  (void)err;
  inst->edge = ak_edge_new(inst);
  return inst->edge ? 0 : AK_MODULE_FAILED;
}

static int edge_start(ak_instance_t *inst, char **err) {
  char *why = NULL;
  if (ak_edge_start(inst->edge, &why) == 0) return 0;
  ak_log(AK_LOG_ERROR, "edge", "cannot start the ingest listener", "reason=\"%s\"", why ? why : "?");
  *err = why;
  return AK_MODULE_FAILED;
}

/* SIGTERM, before any module stops: serve on for drain_delay_ms, close the listeners,
 * wait for the requests in flight (they are answered by the writer, still running). */
static void edge_drain(ak_instance_t *inst) { ak_edge_drain(inst->edge); }

/* SIGHUP: the TLS certificate, re-read. */
static void edge_reload(ak_instance_t *inst) { ak_edge_reload_tls(inst->edge); }

/* After the writer answered everything queued (its stop runs first): every request is
 * answered, the loops stop. */
static void edge_stop(ak_instance_t *inst) { ak_edge_stop(inst->edge); }

static void edge_close(ak_instance_t *inst) {
  ak_edge_free(inst->edge);
  inst->edge = NULL;
}

const ak_module_t ak_mod_edge = {
  .name = "edge",
  .roles = AK_ROLES_STORE,
  .section = "http",
  .doc = "ingest listener",
  .options = http_rows,
  .cfg_size = sizeof(ak_http_cfg_t),
  .check = http_check,
  .finish = http_finish,
  .release = http_release,
  .open = edge_open,
  .start = edge_start,
  .drain = edge_drain,
  .reload = edge_reload,
  .stop = edge_stop,
  .close = edge_close,
};

const ak_module_t ak_mod_listener = {
  .name = "listener",
  .roles = AK_ROLES_STORE,
  .section = "listener",
  .doc = "the ingest listeners' limits and drain",
  .options = listener_rows,
  .cfg_size = sizeof(ak_listener_cfg_t),
};
