/* The three limits are independent GCRA buckets: per address in the bounded table, one
 * for the node and one per source, each behind its own mutex (a check is a few
 * arithmetic operations under it). The client address needs X-Forwarded-For only when
 * the peer is a trusted proxy, so the headers are walked only then. */
#include <pthread.h>
#include <stdio.h>
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

static bool cfg_lane(const ak_rate_t *r, ak_gcra_t *g) {
  if (!(r->rate > 0)) return false;
  ak_gcra_init(g, r->rate, (double)r->burst);
  return true;
}

ak_admission_t *ak_admission_new(const ak_config_t *cfg) {
  ak_admission_t *a = calloc(1, sizeof *a);
  if (!a) return NULL;
  static const ak_admission_cfg_t off = {.max_addresses = 65536};
  const ak_admission_cfg_t *ac = ak_config_of(cfg, &ak_mod_admission);
  if (!ac) ac = &off;
  pthread_mutex_init(&a->node.mu, NULL);
  a->node.on = cfg_lane(&ac->node, &a->node.g);
  a->ip_on = cfg_lane(&ac->per_ip, &a->ip);
  if (a->ip_on) {
    a->ips = ak_ratetable_new(ac->max_addresses > 0 ? (size_t)ac->max_addresses : 65536, 0);
    if (!a->ips) goto fail;
  }
  a->proxies = calloc(ac->trusted_proxies.n + 1, sizeof *a->proxies);
  if (!a->proxies) goto fail;
  for (size_t i = 0; i < ac->trusted_proxies.n; i++)
    if (ak_netaddr_parse_cidr(ac->trusted_proxies.v[i], &a->proxies[a->nproxies], NULL)) a->nproxies++;
  a->has_def = cfg_lane(&ac->source_bytes, &a->def);
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

void ak_admission_client(const ak_admission_t *a, ak_hreq_t *r, ak_netaddr_t *out) {
  ak_hreq_client(r, a->proxies, a->nproxies, out);
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

ak_admit_t ak_admission_check(ak_admission_t *a, ak_hreq_t *r, ak_admission_source_t *src,
                              long long content_length, int64_t now_ns, int64_t *retry_ns) {
  ak_netaddr_t client;
  if (a->ip_on) ak_admission_client(a, r, &client);
  return ak_admission_check_addr(a, a->ip_on ? &client : NULL, src, content_length, now_ns, retry_ns);
}

bool ak_admission_charge_body(ak_admission_source_t *src, size_t n, int64_t now_ns, int64_t *retry_ns) {
  if (!ak_admission_meters_source(src)) return true;
  return bucket_take(&src->b, (double)n, now_ns, retry_ns);
}

uint64_t ak_admission_evictions(const ak_admission_t *a) { return a && a->ips ? ak_ratetable_evictions(a->ips) : 0; }

size_t ak_admission_table_slots(const ak_admission_t *a) { return a && a->ips ? ak_ratetable_capacity(a->ips) : 0; }

/* ------------------------------------------------------------------- the module ---- */

/* {rate, burst} bound into an ak_rate_t (the lane rows are ratelimit.c's, unbound). */
static const ak_opt_t lane_rows[] = {
  {.key = "rate", .type = AK_OPT_NUMBER, .min = 0, .flags = AK_OPTF_REQUIRED | AK_OPTF_HAS_MIN,
   .doc = "units per second (> 0, fractions allowed)", AK_AT(ak_rate_t, rate)},
  {.key = "burst", .type = AK_OPT_INT, .min = 1, .flags = AK_OPTF_REQUIRED | AK_OPTF_HAS_MIN,
   .doc = "units at once", AK_AT(ak_rate_t, burst)},
  {0},
};

/* Pre-read admission: refusals before a body is read or a signature computed. */
static const ak_opt_t admission_rows[] = {
  {.key = "per_ip", .type = AK_OPT_MAP, .children = lane_rows, .flags = AK_OPTF_NULLABLE,
   .doc = "requests per second per client address ({rate, burst}); null = off", AK_AT(ak_admission_cfg_t, per_ip)},
  {.key = "node", .type = AK_OPT_MAP, .children = lane_rows, .flags = AK_OPTF_NULLABLE,
   .doc = "requests per second the node takes ({rate, burst}); null = off", AK_AT(ak_admission_cfg_t, node)},
  {.key = "source_bytes", .type = AK_OPT_MAP, .children = lane_rows, .flags = AK_OPTF_NULLABLE,
   .doc = "body bytes per second each source takes ({rate, burst}); null = off",
   AK_AT(ak_admission_cfg_t, source_bytes)},
  {.key = "trusted_proxies", .type = AK_OPT_STRLIST, .def = "[]",
   .doc = "CIDRs of proxies whose X-Forwarded-For names the client", AK_AT(ak_admission_cfg_t, trusted_proxies)},
  {.key = "max_addresses", .type = AK_OPT_INT, .def = "65536", .min = 8, .max = 16777216,
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX, .doc = "client addresses whose per_ip state is kept at once",
   AK_AT(ak_admission_cfg_t, max_addresses)},
  {0},
};

/* Lanes that are off show as null in print-config, so an operator sees every knob. */
static void admission_check(ak_check_t *c, json_t *adm, json_t *root) {
  (void)root;
  ak_check_show_off(adm, admission_rows);
  static const char *const lanes[] = {"per_ip", "node", "source_bytes"};
  for (size_t i = 0; i < sizeof lanes / sizeof lanes[0]; i++) {
    char label[64];
    snprintf(label, sizeof label, "admission.%s", lanes[i]);
    ak_ratelimit_report_lane(c, label, json_object_get(adm, lanes[i]));
  }
  size_t i;
  json_t *item;
  json_array_foreach(json_object_get(adm, "trusted_proxies"), i, item) {
    ak_cidr_t cidr;
    const char *why = NULL;
    if (!ak_netaddr_parse_cidr(json_string_value(item), &cidr, &why)) {
      char *r = ak_check_render(item, false);
      ak_check_error(c, "admission.trusted_proxies[%zu]: %s %s", i, r ? r : "?", why);
      free(r);
    }
  }
}

const ak_module_t ak_mod_admission = {
  .name = "admission",
  .roles = AK_ROLES_STORE,
  .section = "admission",
  .doc = "limits applied before a body is read: per client address, per node, per source",
  .options = admission_rows,
  .cfg_size = sizeof(ak_admission_cfg_t),
  .check = admission_check,
};
