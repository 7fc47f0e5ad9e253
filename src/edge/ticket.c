/* The ingest ticket (ticket.h): each take records what it holds, settle walks the record. */
#include <string.h>
#include "edge/quota.h"
#include "edge/ticket.h"

void ak_ticket_init(ak_ticket_t *t, ak_instance_t *inst, const char *tenant, size_t tenant_len, size_t bytes) {
  memset(t, 0, sizeof *t);
  t->inst = inst;
  t->tenant = tenant;
  t->tenant_len = tenant_len;
  t->bytes = bytes;
}

ak_pen_admit_t ak_ticket_take_pen(ak_ticket_t *t, ak_pen_bucket_t *bucket, int64_t *retry_after_ms) {
  ak_pen_admit_t a = ak_pen_admit(t->inst->pen, bucket, t->bytes, retry_after_ms);
  if (a == AK_PEN_OK) t->pen_bucket = bucket;
  return a;
}

bool ak_ticket_claim(ak_ticket_t *t, const char *source, const char *key, size_t keylen, int64_t ttl_ms) {
  t->claim = ak_dedupe_claim_new(t->tenant, t->tenant_len, source, key, keylen, ttl_ms);
  return t->claim != NULL;
}

bool ak_ticket_take_quota(ak_ticket_t *t, int64_t now_ns, int64_t *retry_ns) {
  if (!ak_quota_take(t->inst->quota, t->tenant, t->tenant_len, t->bytes, now_ns, retry_ns)) return false;
  t->quota = true;
  return true;
}

ak_wr_status_t ak_ticket_take_share(ak_ticket_t *t) {
  ak_wr_status_t st = ak_writer_share_take(t->inst->writer, t->tenant, t->tenant_len, t->bytes);
  t->share = st == AK_WR_QUEUED;
  return st;
}

void ak_ticket_settle(ak_ticket_t *t, bool stored) { ak_ticket_settle_held(t, stored, NULL); }

void ak_ticket_settle_held(ak_ticket_t *t, bool stored, const uint8_t holder[16]) {
  if (t->pen_bucket) ak_pen_settle(t->inst->pen, t->pen_bucket, t->bytes, stored);
  t->pen_bucket = NULL;
  if (t->quota && !stored) ak_quota_refund(t->inst->quota, t->tenant, t->tenant_len, t->bytes);
  t->quota = false;
  if (t->share) ak_writer_share_give(t->inst->writer, t->tenant, t->tenant_len, t->bytes);
  t->share = false;
  ak_dedupe_claim_free(t->claim);
  t->claim = NULL;
  if (t->fleet) ak_fleet_settle(t->inst->fleet, t->fleet, holder); /* an unused ticket has no inst */
  t->fleet = NULL;
}
