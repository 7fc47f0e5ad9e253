/* Claim check-in (see checkin.h). One thread, named ak-checkin; requests in a lock-free
 * stack, answered in the order they came. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/sha.h>
#include "core/clock.h"
#include "core/log.h"
#include "core/metrics.h"
#include "dispatch/checkin.h"

struct ak_checkin {
  const ak_claim_stores_t *stores;
  ak_checkin_done_fn done;
  void *ctx;
  _Atomic(ak_checkin_req_t *) stack;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool stop;
  pthread_t thread;
};

static void sha_hex(const uint8_t *p, size_t n, char out[65]) {
  static const char hx[] = "0123456789abcdef";
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(p, n, md);
  for (int i = 0; i < SHA256_DIGEST_LENGTH; i++) {
    out[2 * i] = hx[md[i] >> 4];
    out[2 * i + 1] = hx[md[i] & 15];
  }
  out[64] = '\0';
}

/* A hook without a tenant is the tenant "default" (as in its idempotency key). */
static void tenant_of(const ak_checkin_req_t *r, const char **t, size_t *n) {
  *t = r->tenant_len ? r->tenant : "default";
  *n = r->tenant_len ? r->tenant_len : 7;
}

static void fail(ak_checkin_t *c, ak_checkin_req_t *r, const char *why) {
  r->rc = -1;
  snprintf(r->err, sizeof r->err, "%s", why);
  if (c->stores->checkin_failed) ak_counter_add(c->stores->checkin_failed, 1);
}

/* One pack of v[0..n) (all of one tenant): 0, or -1 with err. */
static int put_pack(ak_checkin_t *c, ak_checkin_req_t **v, size_t n, char *err, size_t errlen) {
  ak_claim_item_t *items = calloc(n, sizeof *items);
  if (!items) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  const char *tenant;
  size_t tlen;
  tenant_of(v[0], &tenant, &tlen);
  char tname[65];
  snprintf(tname, sizeof tname, "%.*s", (int)tlen, tenant);
  for (size_t i = 0; i < n; i++) {
    items[i].body = v[i]->body;
    items[i].len = v[i]->len;
    memcpy(items[i].hook_id, v[i]->hook_id, 16);
    items[i].content_type = v[i]->content_type;
    items[i].content_type_len = v[i]->content_type_len;
    items[i].received_at_ms = v[i]->received_at_ms;
    memcpy(items[i].sha256, v[i]->sha256, 65);
  }
  ak_claim_id_t pack;
  ak_claim_pack_id(ak_now_ms(), &pack);
  char key[AK_CLAIM_KEY_MAX];
  size_t len = 0;
  uint8_t *obj = NULL;
  int rc = -1;
  if (ak_claim_key(tname, &pack, key, sizeof key) != 0) {
    snprintf(err, errlen, "tenant is not a claim tenant");
  } else if (!(obj = ak_claim_pack_build(&pack, items, n, &len))) {
    snprintf(err, errlen, "pack could not be built (out of memory or too large)");
  } else if (ak_claim_stores_put(c->stores, key, obj, len, NULL, err, errlen) == 0) {
    rc = 0;
    for (size_t i = 0; i < n; i++) {
      ak_claim_id_t id;
      ak_claim_id_at(&pack, (uint16_t)i, &id);
      if (ak_claim_ref_format(tname, strlen(tname), &id, v[i]->ref, sizeof v[i]->ref) != 0) rc = -1;
    }
    if (rc != 0) snprintf(err, errlen, "claim ref could not be formatted");
  }
  free(obj);
  free(items);
  return rc;
}

/* v[0..n), all of one tenant: packs up to pack_max_bytes; a failed pack of several goes
 * again claim by claim. */
static void check_in_tenant(ak_checkin_t *c, ak_checkin_req_t **v, size_t n) {
  size_t max_bytes = c->stores->pack_max_bytes > 0 ? (size_t)c->stores->pack_max_bytes : SIZE_MAX;
  size_t i = 0;
  while (i < n) {
    size_t j = i, bytes = 0;
    while (j < n && j - i < AK_CLAIM_PACK_MAX_CLAIMS && (j == i || bytes + v[j]->len <= max_bytes)) bytes += v[j++]->len;
    char err[160];
    if (put_pack(c, v + i, j - i, err, sizeof err) != 0) {
      if (j - i == 1) {
        fail(c, v[i], err);
      } else {
        ak_log(AK_LOG_WARNING, "claims", "pack check-in failed; checking in one claim at a time", "claims=%zu error=%s",
               j - i, err);
        for (size_t k = i; k < j; k++)
          if (put_pack(c, v + k, 1, err, sizeof err) != 0) fail(c, v[k], err);
      }
    }
    i = j;
  }
}

static void process(ak_checkin_t *c, ak_checkin_req_t *list) {
  size_t n = 0;
  for (ak_checkin_req_t *r = list; r; r = r->next) n++;
  ak_checkin_req_t **all = malloc(n * sizeof *all), **group = malloc(n * sizeof *group);
  size_t k = 0;
  for (ak_checkin_req_t *r = list; r; r = r->next) {
    r->rc = 0;
    r->ref[0] = '\0';
    r->err[0] = '\0';
    sha_hex(r->body, r->len, r->sha256);
    if (all) all[k++] = r;
  }
  if (!all || !group) {
    for (ak_checkin_req_t *r = list; r; r = r->next) fail(c, r, "out of memory");
  } else {
    /* by tenant, in arrival order within each */
    bool *done = calloc(n, sizeof *done);
    for (size_t i = 0; i < n && done; i++) {
      if (done[i]) continue;
      const char *ti, *tj;
      size_t li, lj, g = 0;
      tenant_of(all[i], &ti, &li);
      for (size_t j = i; j < n; j++) {
        if (done[j]) continue;
        tenant_of(all[j], &tj, &lj);
        if (li == lj && !memcmp(ti, tj, li)) {
          group[g++] = all[j];
          done[j] = true;
        }
      }
      check_in_tenant(c, group, g);
    }
    if (!done)
      for (ak_checkin_req_t *r = list; r; r = r->next) fail(c, r, "out of memory");
    free(done);
  }
  free(all);
  free(group);
  for (ak_checkin_req_t *r = list, *nx; r; r = nx) {
    nx = r->next;
    r->next = NULL;
    c->done(c->ctx, r);
  }
}

/* The stack holds the newest first: the list in arrival order. */
static ak_checkin_req_t *take_all(ak_checkin_t *c) {
  ak_checkin_req_t *list = NULL;
  for (ak_checkin_req_t *r = atomic_exchange(&c->stack, NULL), *nx; r; r = nx) {
    nx = r->next;
    r->next = list;
    list = r;
  }
  return list;
}

static void *run(void *arg) {
  ak_checkin_t *c = arg;
  pthread_setname_np(pthread_self(), "ak-checkin");
  for (;;) {
    pthread_mutex_lock(&c->mu);
    while (!c->stop && !atomic_load(&c->stack)) pthread_cond_wait(&c->cv, &c->mu);
    bool stop = c->stop;
    pthread_mutex_unlock(&c->mu);
    if (stop) break;
    ak_checkin_req_t *list = take_all(c);
    if (list) process(c, list);
  }
  return NULL;
}

ak_checkin_t *ak_checkin_new(const ak_claim_stores_t *stores, ak_checkin_done_fn done, void *ctx) {
  ak_checkin_t *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->stores = stores;
  c->done = done;
  c->ctx = ctx;
  atomic_init(&c->stack, NULL);
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  if (pthread_create(&c->thread, NULL, run, c) != 0) {
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
    return NULL;
  }
  return c;
}

void ak_checkin_submit(ak_checkin_t *c, ak_checkin_req_t *req) {
  ak_checkin_req_t *old = atomic_load(&c->stack);
  do {
    req->next = old;
  } while (!atomic_compare_exchange_weak(&c->stack, &old, req));
  if (old) return;
  pthread_mutex_lock(&c->mu);
  pthread_cond_signal(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

void ak_checkin_free(ak_checkin_t *c) {
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  c->stop = true;
  pthread_cond_signal(&c->cv);
  pthread_mutex_unlock(&c->mu);
  pthread_join(c->thread, NULL);
  for (ak_checkin_req_t *r = take_all(c), *nx; r; r = nx) {
    nx = r->next;
    r->next = NULL;
    r->rc = -1;
    snprintf(r->err, sizeof r->err, "stopped");
    c->done(c->ctx, r);
  }
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c);
}
