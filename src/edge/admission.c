/* The three limits are independent GCRA buckets: per address in the bounded table, one
 * for the node and one per source, each behind its own mutex (a check is a few
 * arithmetic operations under it). The client address needs X-Forwarded-For only when
 * the peer is a trusted proxy, so the headers are walked only then. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "core/gcra.h"
#include "core/ratelimit.h"
#include "core/ratetable.h"
#include "edge/admission.h"

typedef struct bucket {
  bool on;
  ak_gcra_t g;
  pthread_mutex_t mu;
  double tat;
} bucket_t;

struct ak_admission_source {
  bucket_t b;
};

struct ak_admission {
  bool ip_on;
  ak_gcra_t ip;
  ak_ratetable_t *ips;
  bucket_t node;
  bool has_def;               /* admission.source_bytes: every source's default */
  ak_gcra_t def;
  ak_cidr_t *proxies;
  size_t nproxies;
};

static bool lane(const json_t *j, ak_gcra_t *g) {
  ak_rate_t r;
  if (!json_is_object(j) || ak_ratelimit_parse_rate(j, &r, NULL, 0, NULL, 0) != 0) return false;
  ak_gcra_init(g, r.rate, (double)r.burst);
  return true;
}

ak_admission_t *ak_admission_new(const ak_config_t *cfg) {
  ak_admission_t *a = calloc(1, sizeof *a);
  if (!a) return NULL;
  const json_t *adm = json_object_get(cfg->effective, "admission");
  pthread_mutex_init(&a->node.mu, NULL);
  a->node.on = lane(json_object_get(adm, "node"), &a->node.g);
  a->ip_on = lane(json_object_get(adm, "per_ip"), &a->ip);
  if (a->ip_on) {
    json_int_t slots = json_integer_value(json_object_get(adm, "max_addresses"));
    a->ips = ak_ratetable_new(slots > 0 ? (size_t)slots : 65536, 0);
    if (!a->ips) goto fail;
  }
  const json_t *list = json_object_get(adm, "trusted_proxies");
  a->proxies = calloc(json_array_size(list) + 1, sizeof *a->proxies);
  if (!a->proxies) goto fail;
  for (size_t i = 0; i < json_array_size(list); i++)
    if (ak_netaddr_parse_cidr(json_string_value(json_array_get(list, i)), &a->proxies[a->nproxies], NULL))
      a->nproxies++;
  a->has_def = lane(json_object_get(adm, "source_bytes"), &a->def);
  return a;
fail:
  ak_admission_free(a);
  return NULL;
}

void ak_admission_free(ak_admission_t *a) {
  if (!a) return;
  ak_ratetable_free(a->ips);
  pthread_mutex_destroy(&a->node.mu);
  free(a->proxies);
  free(a);
}

ak_admission_source_t *ak_admission_source_new(const ak_admission_t *a, const json_t *source_spec) {
  ak_gcra_t g;
  bool on = lane(json_object_get(source_spec, "admission_bytes"), &g);
  if (!on && a && a->has_def) {
    g = a->def;
    on = true;
  }
  if (!on) return NULL;
  ak_admission_source_t *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  pthread_mutex_init(&s->b.mu, NULL);
  s->b.on = true;
  s->b.g = g;
  return s;
}

void ak_admission_source_free(ak_admission_source_t *s) {
  if (!s) return;
  pthread_mutex_destroy(&s->b.mu);
  free(s);
}

bool ak_admission_enabled(const ak_admission_t *a) { return a && (a->ip_on || a->node.on); }

bool ak_admission_meters_source(const ak_admission_source_t *s) { return s && s->b.on; }

static bool bucket_take(bucket_t *b, double cost, int64_t now_ns, int64_t *retry_ns) {
  double nt;
  pthread_mutex_lock(&b->mu);
  bool ok = ak_gcra_check(&b->g, b->tat, cost, now_ns, &nt, retry_ns);
  if (ok) b->tat = nt;
  pthread_mutex_unlock(&b->mu);
  return ok;
}

typedef struct {
  const char *v[16];
  size_t len[16];
  size_t n;
} xff_t;

static enum MHD_Result collect_xff(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
                                   const char *value, size_t value_size) {
  (void)kind;
  xff_t *x = cls;
  if (key_size != 15 || strncasecmp(key, "X-Forwarded-For", 15) != 0 || !value) return MHD_YES;
  if (x->n == 16) { /* keep the last 16: the walk starts from the right */
    memmove(&x->v[0], &x->v[1], 15 * sizeof x->v[0]);
    memmove(&x->len[0], &x->len[1], 15 * sizeof x->len[0]);
    x->n = 15;
  }
  x->v[x->n] = value;
  x->len[x->n++] = value_size;
  return MHD_YES;
}

void ak_admission_client(const ak_admission_t *a, struct MHD_Connection *mc, ak_netaddr_t *out) {
  memset(out, 0, sizeof *out);
  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  ak_netaddr_t peer;
  if (!ci || !ak_netaddr_from_sockaddr(ci->client_addr, &peer)) return;
  *out = peer;
  if (!a->nproxies || !ak_netaddr_in_any(a->proxies, a->nproxies, &peer)) return;
  xff_t x = {.n = 0};
  MHD_get_connection_values_n(mc, MHD_HEADER_KIND, collect_xff, &x);
  ak_netaddr_client(&peer, a->proxies, a->nproxies, x.v, x.len, x.n, out);
}

ak_admit_t ak_admission_check_addr(ak_admission_t *a, const ak_netaddr_t *client, ak_admission_source_t *src,
                                   long long content_length, int64_t now_ns, int64_t *retry_ns) {
  int64_t dummy;
  if (!retry_ns) retry_ns = &dummy;
  *retry_ns = 0;
  if (a->ip_on && client) {
    uint8_t key[16];
    ak_netaddr_limit_key(client, key);
    const ak_gcra_t *p[1] = {&a->ip};
    double cost[1] = {1};
    if (!ak_ratetable_take(a->ips, key, p, cost, 1, now_ns, retry_ns)) return AK_ADMIT_IP;
  }
  if (a->node.on && !bucket_take(&a->node, 1, now_ns, retry_ns)) return AK_ADMIT_NODE;
  if (content_length >= 0 && ak_admission_meters_source(src) &&
      !bucket_take(&src->b, (double)content_length, now_ns, retry_ns))
    return AK_ADMIT_SOURCE;
  return AK_ADMIT_OK;
}

ak_admit_t ak_admission_check(ak_admission_t *a, struct MHD_Connection *mc, ak_admission_source_t *src,
                              long long content_length, int64_t now_ns, int64_t *retry_ns) {
  ak_netaddr_t client;
  if (a->ip_on) ak_admission_client(a, mc, &client);
  return ak_admission_check_addr(a, a->ip_on ? &client : NULL, src, content_length, now_ns, retry_ns);
}

bool ak_admission_charge_body(ak_admission_source_t *src, size_t n, int64_t now_ns, int64_t *retry_ns) {
  if (!ak_admission_meters_source(src)) return true;
  return bucket_take(&src->b, (double)n, now_ns, retry_ns);
}

uint64_t ak_admission_evictions(const ak_admission_t *a) { return a && a->ips ? ak_ratetable_evictions(a->ips) : 0; }

size_t ak_admission_table_slots(const ak_admission_t *a) { return a && a->ips ? ak_ratetable_capacity(a->ips) : 0; }
