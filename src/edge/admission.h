/* Pre-read admission (`admission.*`, `sources.<id>.admission_bytes`): what the edge
 * decides after the source lookup and before it reads a body or computes a signature,
 * so a flood costs a header parse, not a read or an HMAC. Owns the per-client-address
 * table (bounded, core/ratetable.h), the node bucket, the byte buckets of sources (each
 * source version holds its own, made by ak_admission_source_new), and the trusted-proxy
 * list that decides which address is the client's. Never reads a body
 * and never creates a metric series from request data (the edge counts refusals by
 * reason only). */
#ifndef AK_EDGE_ADMISSION_H
#define AK_EDGE_ADMISSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "http/server.h"
#include "core/config.h"
#include "core/module.h"
#include "core/netaddr.h"
#include "core/ratelimit.h"

/* The `admission` section (a lane that is off has rate 0). */
typedef struct ak_admission_cfg {
  ak_rate_t per_ip, node, source_bytes;
  ak_strlist_t trusted_proxies;
  int64_t max_addresses;
} ak_admission_cfg_t;

extern const ak_module_t ak_mod_admission;

typedef struct ak_admission ak_admission_t;
typedef struct ak_admission_source ak_admission_source_t;

typedef enum {
  AK_ADMIT_OK = 0,
  AK_ADMIT_IP,                /* 429 ip_rate_limited */
  AK_ADMIT_NODE,              /* 429 node_rate_limited */
  AK_ADMIT_SOURCE,            /* 429 source_rate_limited */
} ak_admit_t;

/* From the admission section (the loader validated it). Nothing is allocated for a
 * limit that is off. NULL when out of memory. */
ak_admission_t *ak_admission_new(const ak_config_t *cfg);
void ak_admission_free(ak_admission_t *a);

/* One source's byte bucket from its checked spec (admission_bytes, else
 * admission.source_bytes); NULL when the source's bytes are not limited (or out of
 * memory: then they are not limited either). The bucket does not point at a. */
ak_admission_source_t *ak_admission_source_new(const ak_admission_t *a, const json_t *source_spec);
void ak_admission_source_free(ak_admission_source_t *s);

/* True when a limit that is not a source's is on (per address, node): with neither
 * those nor a source bucket, the edge skips the check. */
bool ak_admission_enabled(const ak_admission_t *a);
/* True when the source's bytes are limited and a body without Content-Length must be
 * charged as it arrives. */
bool ak_admission_meters_source(const ak_admission_source_t *s);

/* The request's first call: per client address, then node, then (when content_length
 * >= 0) the source's bytes (src NULL: not limited). A refusal spends nothing further
 * down the list; *retry_ns is the wait until the refusing limit would pass. */
ak_admit_t ak_admission_check(ak_admission_t *a, ak_hreq_t *r, ak_admission_source_t *src,
                              long long content_length, int64_t now_ns, int64_t *retry_ns);
/* The same check on an already resolved client address (tests, tools). */
ak_admit_t ak_admission_check_addr(ak_admission_t *a, const ak_netaddr_t *client, ak_admission_source_t *src,
                                   long long content_length, int64_t now_ns, int64_t *retry_ns);
/* A chunk of a body that came without Content-Length. False: over the source's byte
 * budget (the edge swallows the rest and answers 429 at the end). */
bool ak_admission_charge_body(ak_admission_source_t *src, size_t n, int64_t now_ns, int64_t *retry_ns);

/* The client address of a request: the peer, or behind a trusted proxy the
 * X-Forwarded-For entry it vouches for (core/netaddr.h). */
void ak_admission_client(const ak_admission_t *a, ak_hreq_t *r, ak_netaddr_t *out);

/* Per-address states dropped while in debt (a flood of more addresses than the table
 * holds), and the table's size (0 when per_ip is off). */
uint64_t ak_admission_evictions(const ak_admission_t *a);
size_t ak_admission_table_slots(const ak_admission_t *a);

#endif
