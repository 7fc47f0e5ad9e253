/* Ingest on libmicrohttpd (epoll thread pool, suspend/resume). Request lifecycle:
 *   1st call (headers only): health/ready, route shape, Content-Length, source lookup,
 *       header bytes, pre-read admission (edge/admission.h) and the tenant's
 *       max_body_bytes -> refuse here and MHD never reads the body or sends 100 Continue;
 *   body calls: append to a buffer bounded by max_body_bytes (past it, or past a source's
 *       byte budget: swallow, answer 413/429 at the end so the connection stays usable);
 *   last call: verify the raw bytes, apply on_verify_failure (401 / flag / quarantine),
 *       read the dedupe key (a repeat of a committed key is answered here), charge a
 *       verified hook to its tenant's quota (edge/quota.h), apply
 *       store_headers, encode the envelope, suspend the connection, submit;
 *   resumed call: answer from the writer's status.
 * The writer resumes the connection only after its commit returned. */
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
#include "edge/quota.h"
#include "edge/route.h"
#include "edge/ticket.h"
#include "edge/tls.h"
#include "queue/dedupe.h"
#include "queue/quarantine.h"
#include "queue/writer.h"
#include "verify/verifier.h"

enum { ST_READING = 0, ST_SUBMITTED, ST_ANSWERED };

typedef enum {
  R_PAYLOAD_TOO_LARGE = 0, R_DEDUPE_QUOTA, R_UNKNOWN_SOURCE, R_NOT_FOUND, R_INVALID_HEADER, R_BODY_READ_FAILED,
  R_OVERLOAD, R_STORE_UNAVAILABLE, R_COMMIT_DEADLINE, R_DRAINING, R_VERIFICATION_FAILED,
  R_QUARANTINE_RATE_LIMITED, R_QUARANTINE_FULL, R_QUARANTINE_OVERLOAD, R_COUNT
} refuse_t;
static const char *const refuse_names[R_COUNT] = {
  "payload_too_large", "dedupe_quota", "unknown_source", "not_found", "invalid_header", "body_read_failed",
  "overload", "store_unavailable", "commit_deadline", "draining", "verification_failed",
  "quarantine_rate_limited", "quarantine_full", "quarantine_overload"};

/* Refusals of the limits (edge/admission.h, edge/quota.h, the writer's tenant share). */
typedef enum { L_RATE_LIMITED = 0, L_IP, L_NODE, L_SOURCE, L_TENANT_OVERLOAD, L_COUNT } limit_t;
static const char *const limit_names[L_COUNT] = {"rate_limited", "ip_rate_limited", "node_rate_limited",
                                                 "source_rate_limited", "tenant_overload"};

static const unsigned status_codes[] = {200, 201, 202, 400, 401, 404, 405, 413, 429, 503};
#define NSTATUS (sizeof status_codes / sizeof status_codes[0])

struct ak_edge {
  ak_instance_t *inst;
  const ak_http_cfg_t *hc;     /* the http section */
  struct MHD_Daemon *d, *tls_d; /* plain ingest; TLS ingest (http.tls) */
  int port, tls_port;
  _Atomic int waiting; /* requests suspended on the writer */
  ak_header_policy_t *hpol;
#ifdef AK_TEST_HOOKS
  int64_t test_now_s;  /* ANKUSA_TEST_NOW pins the verifiers' clock */
#endif
  /* TLS listener: SHA-256 of the live peer certificate (read only for client_cert sources) */
  bool (*peer_cert)(struct MHD_Connection *c, uint8_t out[32]);
  ak_series_t *m_status[NSTATUS], *m_status_other, *m_refused[R_COUNT], *m_duration, *m_abandoned;
  ak_series_t *m_verify_fail[AK_VR_COUNT], *m_flagged, *m_quarantined;
  ak_admission_t *adm;  /* pre-read limits */
  bool adm_on;          /* a limit besides the sources' own is on */
  ak_series_t *m_limit[L_COUNT], *m_bodies_read;
};

/* What the edge attaches to each source version (AK_SOURCE_EXT_EDGE): it lives exactly as
 * long as the version, so a request holding the version holds these too. */
typedef struct edge_src {
  ak_pen_bucket_t *pen;        /* on_verify_failure quarantine only */
  ak_admission_source_t *adm;  /* NULL: the source's bytes are not limited */
  ak_series_t *weak;           /* NULL unless its verifier hashes with SHA-1 */
} edge_src_t;

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
  ak_ticket_t ticket;  /* pen, dedupe claim, quota, queue share: settled once, in settle() */
  ak_write_req_t req;
  struct MHD_Connection *mc;
  ak_edge_t *edge;
} conn_t;

static void count(ak_edge_t *e, unsigned status, int64_t t0_ns) {
  ak_series_t *s = e->m_status_other;
  for (size_t i = 0; i < NSTATUS; i++)
    if (status_codes[i] == status) s = e->m_status[i];
  ak_counter_add(s, 1);
  if (t0_ns) ak_histogram_observe(e->m_duration, (double)(ak_mono_ns() - t0_ns) / 1e9);
}

static enum MHD_Result refuse(ak_edge_t *e, struct MHD_Connection *c, unsigned status, refuse_t why,
                              const char *code, int retry_after, int64_t t0) {
  ak_counter_add(e->m_refused[why], 1);
  count(e, status, t0);
  return ak_http_error(c, status, code, retry_after);
}

static enum MHD_Result refuse_limit(ak_edge_t *e, struct MHD_Connection *c, unsigned status, limit_t why,
                                    int retry_after, int64_t t0) {
  ak_counter_add(e->m_limit[why], 1);
  count(e, status, t0);
  return ak_http_error(c, status, limit_names[why], retry_after);
}

static enum MHD_Result too_large(ak_edge_t *e, struct MHD_Connection *mc, int64_t limit, int64_t t0) {
  char b[96];
  int n = snprintf(b, sizeof b, "{\"error\":\"payload_too_large\",\"limit\":%lld}", (long long)limit);
  ak_counter_add(e->m_refused[R_PAYLOAD_TOO_LARGE], 1);
  count(e, 413, t0);
  return ak_http_reply(mc, 413, "application/json", b, (size_t)n, 0);
}

typedef struct {
  ak_header_t *v;
  size_t n, cap;
} hdrs_t;

static enum MHD_Result collect_header(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
                                      const char *value, size_t value_size) {
  (void)kind;
  hdrs_t *h = cls;
  if (h->n == h->cap && ak_buf_grow(&h->v, &h->cap, h->n + 1, sizeof *h->v) != 0) return MHD_NO;
  h->v[h->n++] = (ak_header_t){key, key_size, value ? value : "", value ? value_size : 0};
  return MHD_YES;
}

/* libmicrohttpd 0.9.75 measures header values with strlen, so "a\0b" arrives as "a"
 * and the rest would be silently dropped from what we store. Headers sit in order in
 * the connection's read buffer, each line ending in CRLF or LF (zeroed in place): the
 * next header's name starts 1 or 2 bytes after a value's end, unless a NUL cut the
 * value short. For the last header only the byte after its terminator can be checked. */
static bool value_cut_at_nul(const ak_header_t *h, const ak_header_t *next) {
  const char *end = h->value + h->value_len;
  if (next) {
    ptrdiff_t gap = next->name - end;
    return gap > 2 && gap < 65536;
  }
  char c = end[1];
  return c != '\0' && c != '\r' && c != '\n';
}

static void on_committed(ak_write_req_t *req, void *ctx) {
  (void)req;
  conn_t *c = ctx;
  MHD_resume_connection(c->mc); /* last touch: c may be freed after this */
}

/* The one place a request gives back what it holds: at its answer, whatever it is (a
 * refusal, a duplicate, a failed or a good commit), or when its client left first. */
static void settle(conn_t *c, bool stored) {
  ak_ticket_settle(&c->ticket, stored);
  c->req.dedupe = NULL; /* the ticket's, freed with it */
}

/* A repeat of a stored event: the first hook's id, and nothing stored. */
static enum MHD_Result answer_duplicate(ak_edge_t *e, struct MHD_Connection *mc, const uint8_t first_id[16],
                                        int64_t t0) {
  char id[AK_UUID_STR_LEN], body[128];
  ak_uuid_format(first_id, id);
  int n = snprintf(body, sizeof body, "{\"status\":\"accepted\",\"id\":\"%s\",\"duplicate\":true}", id);
  count(e, 201, t0);
  return ak_http_reply(mc, 201, "application/json", body, (size_t)n, 0);
}

/* A refusal before anything reached the writer: what the ticket holds goes back first. */
static enum MHD_Result refuse_settled(ak_edge_t *e, conn_t *c, struct MHD_Connection *mc, unsigned status,
                                      refuse_t why, const char *code, int retry_after) {
  settle(c, false);
  c->state = ST_ANSWERED;
  return refuse(e, mc, status, why, code, retry_after, c->t0_ns);
}

/* The answer to the writer's verdict (c->req.status), the ticket already settled. */
static enum MHD_Result respond(ak_edge_t *e, conn_t *c, struct MHD_Connection *mc, const uint8_t first_id[16]) {
  switch (c->req.status) {
    case AK_WR_COMMITTED: {
      char id[AK_UUID_STR_LEN], body[128];
      int n;
      if (c->req.kind == AK_WRITE_QUARANTINE) {
        ak_counter_add(e->m_quarantined, 1);
        n = snprintf(body, sizeof body, "{\"status\":\"quarantined\",\"reason\":\"%s\"}",
                     ak_verify_reason_name((ak_verify_reason_t)c->req.reason));
        count(e, 202, c->t0_ns);
        return ak_http_reply(mc, 202, "application/json", body, (size_t)n, 0);
      }
      ak_uuid_format(c->req.id, id);
      n = snprintf(body, sizeof body, "{\"status\":\"accepted\",\"id\":\"%s\"}", id);
      count(e, 201, c->t0_ns);
      return ak_http_reply(mc, 201, "application/json", body, (size_t)n, 0);
    }
    case AK_WR_DUPLICATE:
      return answer_duplicate(e, mc, first_id, c->t0_ns);
    case AK_WR_DEDUPE_QUOTA:
      return refuse(e, mc, 503, R_DEDUPE_QUOTA, "dedupe_quota", 60, c->t0_ns);
    case AK_WR_OVERLOAD:
      return refuse(e, mc, 503, R_OVERLOAD, "overload", 1, c->t0_ns);
    case AK_WR_DEADLINE:
      return refuse(e, mc, 503, R_COMMIT_DEADLINE, "store_unavailable", 1, c->t0_ns);
    case AK_WR_DRAINING:
      return refuse(e, mc, 503, R_DRAINING, "draining", 1, c->t0_ns);
    case AK_WR_TENANT_OVERLOAD:
      return refuse_limit(e, mc, 429, L_TENANT_OVERLOAD, 1, c->t0_ns);
    case AK_WR_STORE_UNAVAILABLE:
    default:
      return refuse(e, mc, 503, R_STORE_UNAVAILABLE, "store_unavailable", 1, c->t0_ns);
  }
}

static enum MHD_Result answer(ak_edge_t *e, conn_t *c, struct MHD_Connection *mc) {
  c->state = ST_ANSWERED;
  atomic_fetch_sub(&e->waiting, 1);
  free(c->req.rec);
  c->req.rec = NULL;
  uint8_t first_id[16] = {0};
  if (c->req.status == AK_WR_DUPLICATE && c->req.dedupe) memcpy(first_id, c->req.dedupe->first_id, 16);
  settle(c, c->req.status == AK_WR_COMMITTED);
  return respond(e, c, mc, first_id);
}

typedef struct {
  ak_buf_t b;
  const char *skip;    /* parameter left out (a verifier's credential) */
} qs_t;

/* The listener does not percent-decode (no_unescape), so MHD's parsed arguments are the
 * raw text: joining them in order gives back the query string as sent. */
static enum MHD_Result collect_arg(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
                                   const char *value, size_t value_size) {
  (void)kind;
  qs_t *q = cls;
  if (q->skip && strlen(q->skip) == key_size && memcmp(q->skip, key, key_size) == 0) return MHD_YES;
  if (q->b.len) ak_buf_append(&q->b, "&", 1);
  ak_buf_append(&q->b, key, key_size);
  if (value) {
    ak_buf_append(&q->b, "=", 1);
    ak_buf_append(&q->b, value, value_size);
  }
  return MHD_YES;
}

static char *query_string(struct MHD_Connection *mc, const char *skip, size_t *len) {
  qs_t q = {AK_BUF_INIT, skip};
  MHD_get_connection_values_n(mc, MHD_GET_ARGUMENT_KIND, collect_arg, &q);
  *len = 0;
  return q.b.p ? ak_buf_take(&q.b, len) : NULL; /* NULL: no argument (or out of memory) */
}

static enum MHD_Result submit(ak_edge_t *e, conn_t *c, struct MHD_Connection *mc, const char *url,
                              const char *method) {
  ak_instance_t *inst = e->inst;
  const ak_verifier_t *v = c->sv->verifier;
  ak_ticket_init(&c->ticket, inst, c->tenant, strlen(c->tenant), c->len);
  hdrs_t h = {0};
  MHD_get_connection_values_n(mc, MHD_HEADER_KIND, collect_header, &h);

  ak_verify_reason_t vr = AK_VR_OK;
  uint32_t flags = 0;
  uint8_t kind = AK_WRITE_HOOK;
  size_t qlen = 0;
  if (v && !ak_verifier_is_none(v)) {
    /* only a query-token verifier reads the query string */
    char *q = ak_verifier_credential_param(v) ? query_string(mc, NULL, &qlen) : NULL;
    uint8_t cert[32];
    const uint8_t *certp = NULL;
    if (ak_verifier_needs_client_cert(v) && e->peer_cert && e->peer_cert(mc, cert)) certp = cert;
    int64_t now_s = 0;
#ifdef AK_TEST_HOOKS
    now_s = e->test_now_s;
    const char *pin = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "x-ankusa-test-now");
    if (pin) now_s = atoll(pin);
#endif
    ak_verify_input_t in = {
      .headers = h.v, .nheaders = h.n, .body = c->body, .body_len = c->len, .query = q,
      .query_len = qlen, .client_cert_sha256 = certp, .now_s = now_s ? now_s : (int64_t)time(NULL),
    };
    vr = ak_verifier_check(v, &in);
    free(q);
    if (c->es->weak) ak_counter_add(c->es->weak, 1);
    if (vr != AK_VR_OK) {
      ak_counter_add(e->m_verify_fail[vr], 1);
      if (c->src->on_verify_failure == AK_OVF_REJECT) {
        free(h.v);
        char b[128];
        int n = snprintf(b, sizeof b, "{\"error\":\"verification_failed\",\"reason\":\"%s\"}",
                         ak_verify_reason_name(vr));
        ak_counter_add(e->m_refused[R_VERIFICATION_FAILED], 1);
        count(e, 401, c->t0_ns);
        c->state = ST_ANSWERED;
        return ak_http_reply(mc, 401, "application/json", b, (size_t)n, 0);
      }
      if (c->src->on_verify_failure == AK_OVF_ACCEPT_FLAG) {
        flags |= AK_ENV_FLAG_VERIFY_FAILED;
        ak_counter_add(e->m_flagged, 1);
      } else {
        int64_t retry_ms = 0;
        ak_pen_admit_t pa = ak_ticket_take_pen(&c->ticket, c->es->pen, &retry_ms);
        if (pa != AK_PEN_OK) {
          free(h.v);
          c->state = ST_ANSWERED;
          if (pa == AK_PEN_RATE_LIMITED)
            return refuse(e, mc, 429, R_QUARANTINE_RATE_LIMITED, "quarantine_rate_limited",
                          (int)((retry_ms + 999) / 1000 > 0 ? (retry_ms + 999) / 1000 : 1), c->t0_ns);
          if (pa == AK_PEN_FULL)
            return refuse(e, mc, 503, R_QUARANTINE_FULL, "quarantine_full", 60, c->t0_ns);
          return refuse(e, mc, 503, R_QUARANTINE_OVERLOAD, "overload", 1, c->t0_ns);
        }
        kind = AK_WRITE_QUARANTINE;
      }
    }
  }

  /* the provider event key, from every header and the raw body; a flagged hook gets none,
   * so a forged request cannot take the key of the real event */
  size_t dklen = 0;
  char *dkey = kind == AK_WRITE_HOOK && !(flags & AK_ENV_FLAG_VERIFY_FAILED) && inst->dedupe
                 ? ak_dedupe_key_extract(c->src, h.v, h.n, c->body, c->len, &dklen)
                 : NULL;
  if (dkey) {
    uint8_t first[16];
    if (!ak_ticket_claim(&c->ticket, c->src->id, dkey, dklen, c->src->dedupe_ttl_ms)) {
      free(dkey);
      free(h.v);
      return refuse_settled(e, c, mc, 503, R_OVERLOAD, "overload", 1);
    }
    c->req.dedupe = c->ticket.claim;
    if (ak_dedupe_seen(inst->dedupe, c->req.dedupe, first)) {
      free(dkey);
      free(h.v);
      settle(c, false);
      c->state = ST_ANSWERED;
      return answer_duplicate(e, mc, first, c->t0_ns);
    }
  }
  /* the tenant's quota: verified hooks only, so a forged flood spends none of it; after
   * the dedupe check, so a provider's retry of a stored event spends none either */
  if (kind == AK_WRITE_HOOK && vr == AK_VR_OK) {
    int64_t retry_ns = 0;
    if (!ak_ticket_take_quota(&c->ticket, ak_mono_ns(), &retry_ns)) {
      free(dkey);
      free(h.v);
      settle(c, false);
      c->state = ST_ANSWERED;
      return refuse_limit(e, mc, 429, L_RATE_LIMITED, ak_gcra_retry_after_s(retry_ns), c->t0_ns);
    }
  }

  /* what is stored: store_headers applied, a verifier's credential header and query
   * parameter removed */
  const char *cred_hdr = v ? ak_verifier_credential_header(v) : NULL;
  const char *cred_param = v ? ak_verifier_credential_param(v) : NULL;
  ak_header_t *kept = h.n ? malloc(h.n * sizeof *kept) : NULL;
  char *hashbuf = h.n ? malloc(h.n * AK_HDR_HASH_LEN) : NULL;
  size_t nkept = h.n ? ak_header_policy_apply(e->hpol, h.v, h.n, cred_hdr, kept, hashbuf) : 0;
  char *sq = query_string(mc, cred_param, &qlen);
  size_t ul = strlen(url);
  char *path = malloc(ul + qlen + 2);
  memcpy(path, url, ul);
  if (qlen) {
    path[ul] = '?';
    memcpy(path + ul + 1, sq, qlen);
  }
  path[ul + (qlen ? qlen + 1 : 0)] = 0;
  free(sq);

  const char *ct = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
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
  env.content_type_len = ct ? strlen(ct) : 0;
  env.headers = kept;
  env.nheaders = nkept;
  env.flags = flags;
  env.body = c->body;
  env.body_len = c->len;
  env.dedupe_key = dkey;
  env.dedupe_key_len = dklen;
  size_t rl = 0;
  uint8_t *rec = ak_envelope_encode(&env, &rl);
  free(dkey);
  free(h.v);
  free(kept);
  free(hashbuf);
  free(path);
  if (!rec) return refuse_settled(e, c, mc, 503, R_OVERLOAD, "overload", 1);
  c->req.kind = kind;
  c->req.reason = (uint8_t)vr;
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
  /* the tenant's share of the queue: hooks of its requests, not pen writes */
  if (kind == AK_WRITE_HOOK) {
    ak_wr_status_t share = ak_ticket_take_share(&c->ticket);
    if (share != AK_WR_QUEUED) {
      c->req.status = share;
      free(c->req.rec);
      c->req.rec = NULL;
      settle(c, false);
      c->state = ST_ANSWERED;
      return respond(e, c, mc, NULL);
    }
  }
  c->state = ST_SUBMITTED;
  atomic_fetch_add(&e->waiting, 1);
  /* suspend first: the writer may answer before submit() returns */
  MHD_suspend_connection(mc);
  ak_wr_status_t st = ak_writer_submit(inst->writer, &c->req);
  if (st != AK_WR_QUEUED) {
    c->req.status = st;
    MHD_resume_connection(mc);
  }
  return MHD_YES;
}

static enum MHD_Result first_call(ak_edge_t *e, struct MHD_Connection *mc, const char *url, const char *method,
                                  void **con_cls) {
  ak_instance_t *inst = e->inst;
  int64_t t0 = ak_mono_ns();
  if (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0) {
    if (strcmp(url, "/health") == 0) {
      count(e, 200, 0);
      return ak_http_health(inst, mc);
    }
    if (strcmp(url, "/ready") == 0) {
      unsigned st;
      enum MHD_Result r = ak_http_ready(inst, mc, &st);
      count(e, st, 0);
      return r;
    }
  }
  if (strcmp(method, "POST") != 0) return refuse(e, mc, 404, R_NOT_FOUND, "not_found", 0, t0);
  ak_route_t route;
  ak_route_status_t rs = ak_route_parse(e->hc, url, &route);
  if (rs == AK_ROUTE_NOT_FOUND) return refuse(e, mc, 404, R_NOT_FOUND, "not_found", 0, t0);
  if (rs != AK_ROUTE_OK) return refuse(e, mc, 404, R_UNKNOWN_SOURCE, "unknown_source", 0, t0);

  int64_t max = e->hc->max_body_bytes;
  const char *cl = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
  long long clen = -1;
  if (cl) {
    char *end;
    clen = strtoll(cl, &end, 10);
    if (clen > max) {
      char b[96];
      int n = snprintf(b, sizeof b, "{\"error\":\"payload_too_large\",\"limit\":%lld}", (long long)max);
      ak_counter_add(e->m_refused[R_PAYLOAD_TOO_LARGE], 1);
      count(e, 413, t0);
      return ak_http_reply(mc, 413, "application/json", b, (size_t)n, 0);
    }
  }
  /* received_at is read before the lookup: a hook bound to a source that was deleted
   * meanwhile is then older than any source re-created under the name (born_ms) */
  int64_t received_at = ak_now_ms();
  ak_source_t *sv = ak_sources_get(inst->sources, route.source_id, strlen(route.source_id));
  const ak_source_cfg_t *src = sv ? &sv->cfg : NULL;
  const char *tenant;
  if (!sv || ak_route_bind_source(e->hc, &route, src, &tenant) != AK_ROUTE_OK) {
    ak_source_release(sv);
    return refuse(e, mc, 404, R_UNKNOWN_SOURCE, "unknown_source", 0, t0);
  }
  /* bound to a source born after the clock was read (or the clock stepped back): the
   * hook is this source's, so it is received no earlier than the source was born */
  if (received_at < sv->born_ms) received_at = sv->born_ms;
  edge_src_t *es = sv->ext[AK_SOURCE_EXT_EDGE];
  if (!es) { /* every version gets one while the edge runs; never seen, but never crash */
    ak_source_release(sv);
    return refuse(e, mc, 503, R_STORE_UNAVAILABLE, "store_unavailable", 1, t0);
  }

  const ak_header_t *bad = NULL;
  hdrs_t hs = {0};
  MHD_get_connection_values_n(mc, MHD_HEADER_KIND, collect_header, &hs);
  for (size_t i = 0; i < hs.n && !bad; i++) {
    const ak_header_t *h = &hs.v[i];
    if (!ak_header_name_ok(h->name, h->name_len) || !ak_header_value_ok(h->value, h->value_len) ||
        value_cut_at_nul(h, i + 1 < hs.n ? &hs.v[i + 1] : NULL))
      bad = h;
  }
  if (bad) {
    char name[512], b[600];
    ak_json_quote(name, sizeof name, bad->name, bad->name_len > 120 ? 120 : bad->name_len);
    free(hs.v);
    ak_source_release(sv);
    int n = snprintf(b, sizeof b, "{\"error\":\"invalid_header\",\"header\":%s}", name);
    ak_counter_add(e->m_refused[R_INVALID_HEADER], 1);
    count(e, 400, t0);
    return ak_http_reply(mc, 400, "application/json", b, (size_t)n, 0);
  }
  free(hs.v);

  /* pre-read limits: the tenant's body cap, then per address, node, source bytes */
  int64_t max_body = max, tmax = ak_quota_max_body(inst->quota, tenant, strlen(tenant));
  if (tmax > 0 && tmax < max_body) max_body = tmax;
  if (clen > max_body) {
    ak_source_release(sv);
    return too_large(e, mc, max_body, t0);
  }
  if (e->adm_on || es->adm) {
    int64_t retry_ns = 0;
    static const limit_t why[] = {L_RATE_LIMITED, L_IP, L_NODE, L_SOURCE};
    ak_admit_t ad = ak_admission_check(e->adm, mc, es->adm, clen, ak_mono_ns(), &retry_ns);
    if (ad != AK_ADMIT_OK) {
      ak_source_release(sv);
      return refuse_limit(e, mc, 429, why[ad], ak_gcra_retry_after_s(retry_ns), t0);
    }
  }

  conn_t *c = calloc(1, sizeof *c);
  if (!c) {
    ak_source_release(sv);
    return MHD_NO;
  }
  c->t0_ns = t0;
  c->received_at_ms = received_at;
  c->sv = sv;
  c->es = es;
  c->src = src;
  c->tenant = tenant; /* points into config or into route copy below */
  c->mc = mc;
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
  *con_cls = c;
  return MHD_YES;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *mc, const char *url, const char *method,
                               const char *version, const char *upload_data, size_t *upload_data_size,
                               void **con_cls) {
  (void)version;
  ak_edge_t *e = cls;
  conn_t *c = *con_cls;
  if (!c) return first_call(e, mc, url, method, con_cls);
  if (c->state == ST_SUBMITTED) return answer(e, c, mc);
  if (c->state == ST_ANSWERED) return MHD_YES;
  if (*upload_data_size > 0) {
    size_t n = *upload_data_size;
    *upload_data_size = 0;
    if (c->too_large || c->late_retry) return MHD_YES;
    int64_t retry_ns = 0;
    if (c->meter_body && !ak_admission_charge_body(c->es->adm, n, ak_mono_ns(), &retry_ns)) {
      c->late_retry = ak_gcra_retry_after_s(retry_ns); /* swallow the rest; 429 at the end */
      free(c->body);
      c->body = NULL;
      c->len = c->cap = 0;
      return MHD_YES;
    }
    if ((int64_t)(c->len + n) > c->max_body) {
      c->too_large = true; /* swallow the rest; answer 413 at the end */
      free(c->body);
      c->body = NULL;
      c->len = c->cap = 0;
      return MHD_YES;
    }
    if (c->len + n > c->cap) {
      size_t nc = c->cap ? c->cap * 2 : 4096;
      while (nc < c->len + n) nc *= 2;
      if ((int64_t)nc > c->max_body) nc = (size_t)c->max_body;
      uint8_t *nb = realloc(c->body, nc);
      if (!nb) return MHD_NO;
      c->body = nb;
      c->cap = nc;
    }
    memcpy(c->body + c->len, upload_data, n);
    c->len += n;
    return MHD_YES;
  }
  /* end of body */
  ak_counter_add(e->m_bodies_read, 1);
  if (c->too_large) {
    c->state = ST_ANSWERED;
    return too_large(e, mc, c->max_body, c->t0_ns);
  }
  if (c->late_retry) {
    c->state = ST_ANSWERED;
    return refuse_limit(e, mc, 429, L_SOURCE, c->late_retry, c->t0_ns);
  }
  return submit(e, c, mc, url, method);
}

static void completed(void *cls, struct MHD_Connection *mc, void **con_cls, enum MHD_RequestTerminationCode toe) {
  (void)mc;
  ak_edge_t *e = cls;
  conn_t *c = *con_cls;
  if (!c) return;
  if (c->state == ST_READING && toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) {
    /* the client went away or timed out mid-body: nothing to answer, nothing stored */
    ak_counter_add(e->m_refused[R_BODY_READ_FAILED], 1);
    count(e, 400, c->t0_ns);
  } else if (c->state == ST_SUBMITTED) {
    /* resumed, but the client had closed meanwhile: the answer has nobody to go to (the
     * hook may well be stored; the provider's retry is what covers it) */
    atomic_fetch_sub(&e->waiting, 1);
    ak_counter_add(e->m_abandoned, 1);
    settle(c, c->req.status == AK_WR_COMMITTED);
  }
  if (c->tenant != c->src->tenant) free((void *)c->tenant);
  free(c->body);
  free(c->req.rec);
  settle(c, false); /* a request that never got an answer: nothing of it is stored */
  ak_source_release(c->sv); /* last: c->src and c->es point into it */
  free(c);
  *con_cls = NULL;
}

/* Keep the path exactly as sent: no percent-decoding. */
static size_t no_unescape(void *cls, struct MHD_Connection *c, char *s) {
  (void)cls;
  (void)c;
  return strlen(s);
}

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
  }
  es->adm = ak_admission_source_new(e->adm, s->spec);
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
  ak_metrics_t *m = inst->metrics;
  const char *const sl[] = {"instance", "status", NULL};
  ak_family_t *sf = ak_metrics_family(m, "ankusa_ingest_requests_total", "Ingest requests by HTTP status.",
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
  e->adm = ak_admission_new(inst->cfg);
  e->adm_on = ak_admission_enabled(e->adm);
  const char *const il[] = {"instance", NULL};
  const char *iv[] = {inst->name};
  e->m_duration = ak_metrics_series(ak_metrics_family(m, "ankusa_ingest_duration_seconds",
                                                      "Ack latency: time to answer one ingest request.",
                                                      AK_METRIC_HISTOGRAM, il, ak_latency_bounds,
                                                      ak_latency_nbounds), iv);
  e->hpol = ak_header_policy_new(ak_store_headers_spec(inst->cfg));
#ifdef AK_TEST_HOOKS
  const char *tn = getenv("ANKUSA_TEST_NOW");
  if (tn) e->test_now_s = atoll(tn);
#endif
  const char *const vl[] = {"instance", "reason", NULL};
  ak_family_t *vf = ak_metrics_family(m, "ankusa_verify_failures_total",
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

/* Draining (SIGTERM): a new connection is closed as soon as it is accepted, so its client
 * fails over at once; requests on connections already open are answered 503 draining by
 * the handler. MHD_quiesce_daemon did this by taking the listen socket out of every
 * worker's epoll set from the calling thread, racing each worker's own removal of it in
 * libmicrohttpd 0.9.75: when a worker won, the quiesce's epoll_ctl failed and MHD aborted
 * the process ("Failed to remove listen FD from epoll set", once in `make test`). */
static enum MHD_Result accept_policy(void *cls, const struct sockaddr *addr, socklen_t addrlen) {
  (void)addr, (void)addrlen;
  const ak_edge_t *e = cls;
  return atomic_load(&e->inst->draining) ? MHD_NO : MHD_YES;
}

int ak_edge_start(ak_edge_t *e, char **err) {
  const ak_http_cfg_t *cfg = e->hc;
  long nproc = sysconf(_SC_NPROCESSORS_ONLN);
  unsigned threads = nproc > 0 ? (unsigned)nproc : 2;
  unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_TURBO;
  /* the options both listeners share; the TLS one adds its certificate options */
  struct MHD_OptionItem common[] = {
    {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)completed, e},
    {MHD_OPTION_UNESCAPE_CALLBACK, (intptr_t)no_unescape, NULL},
    {MHD_OPTION_CONNECTION_TIMEOUT, 60, NULL},
    {MHD_OPTION_CONNECTION_LIMIT, 20000, NULL},
    {MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024, NULL},
    {MHD_OPTION_CONNECTION_MEMORY_LIMIT, 16 * 1024, NULL}, /* MHD clears it per request */
    {MHD_OPTION_STRICT_FOR_CLIENT, 1, NULL},
    {MHD_OPTION_END, 0, NULL},
  };
  e->d = MHD_start_daemon(flags, (uint16_t)cfg->port, accept_policy, e, handler, e,
                          MHD_OPTION_THREAD_POOL_SIZE, threads, MHD_OPTION_ARRAY, common, MHD_OPTION_END);
  if (!e->d) {
    char b[160];
    snprintf(b, sizeof b, "cannot listen on http.port %d (in use, or no permission)", (int)cfg->port);
    *err = strdup(b);
    return -1;
  }
  const union MHD_DaemonInfo *di = MHD_get_daemon_info(e->d, MHD_DAEMON_INFO_BIND_PORT);
  e->port = di ? di->port : (int)cfg->port;
  if (cfg->tls.enabled) {
    /* the TLS listener moves to the server layer (http/server.h, http/tls.h) */
    *err = strdup("http.tls: the TLS listener is not available in this build");
    return -1;
  }
  return 0;
}

int ak_edge_port(const ak_edge_t *e) { return e->port; }
int ak_edge_tls_port(const ak_edge_t *e) { return e->tls_d ? e->tls_port : 0; }

void ak_edge_wait_idle(ak_edge_t *e, int timeout_ms) {
  for (int i = 0; i < timeout_ms / 10 && atomic_load(&e->waiting) > 0; i++) usleep(10000);
}

void ak_edge_stop(ak_edge_t *e) {
  if (e->tls_d) MHD_stop_daemon(e->tls_d);
  if (e->d) MHD_stop_daemon(e->d);
  e->d = e->tls_d = NULL;
}

void ak_edge_free(ak_edge_t *e) {
  if (!e) return;
  ak_edge_stop(e);
  ak_sources_detach(e->inst->sources, AK_SOURCE_EXT_EDGE);
  ak_header_policy_free(e->hpol);
  ak_admission_free(e->adm);
  free(e);
}

/* ------------------------------------------------------------------- the module ---- */

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

/* After the writer answered everything queued (its stop runs first): wait for those
 * answers, and give them a moment to go out before the listeners close. */
static void edge_stop(ak_instance_t *inst) {
  ak_edge_wait_idle(inst->edge, 5000);
  usleep(200000);
}

static void edge_close(ak_instance_t *inst) {
  ak_edge_free(inst->edge);
  inst->edge = NULL;
}

const ak_module_t ak_mod_edge = {
  .name = "edge",
  .section = "http",
  .doc = "ingest listener",
  .options = http_rows,
  .cfg_size = sizeof(ak_http_cfg_t),
  .check = http_check,
  .finish = http_finish,
  .release = http_release,
  .open = edge_open,
  .start = edge_start,
  .stop = edge_stop,
  .close = edge_close,
};
