/* Configuration loader: the option tables of the core sections, ${VAR} interpolation,
 * ANKUSA_* overrides, validation with dotted-key messages, the effective tree and its
 * redacted copy, and the lookup of the file. Owns the schema of node, log, http, admin,
 * batcher, dispatch, egress, wal and sources (sink rows belong to each sink, looked up in
 * the registry).
 * Must never exit, log, or keep state between calls: every result and every error goes
 * back to the caller, and no secret value is ever copied into an error message. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <curl/curl.h>
#include "core/config.h"
#include "core/netaddr.h"
#include "core/ratelimit.h"
#include "core/yamltree.h"
#include "admin/auth.h"
#include "edge/tls.h"
#include "sinks/egress.h"
#include "sinks/sink.h"
#include "verify/verifier.h"


#define ID_PATTERN "[A-Za-z0-9_-]{1,64}"
#define REDACTED "[REDACTED]"
#define MAX_SECRETS 8
#define MAX_CONFIG_BYTES (16u << 20)
#define NOT_YET_HINT "remove it or leave it empty"

/* ---------------------------------------------------------------- option tables ---- */

static const ak_opt_t node_rows[] = {
  {.key = "roles", .type = AK_OPT_STRLIST, .def = "[edge, dispatch, storage]",
   .enum_vals = "edge|dispatch|storage|claim_check", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .env = "ANKUSA_ROLES", .doc = "what this node runs: a list or a comma-separated string"},
  {.key = "data_dir", .type = AK_OPT_STRING, .def = "./data", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .env = "ANKUSA_DATA_DIR", .doc = "directory of the node's store"},
  {.key = "min_free_bytes", .type = AK_OPT_INT, .def = "268435456", .min = 0, .flags = AK_OPTF_HAS_MIN,
   .doc = "free space the data volume must keep: below it commits are refused (503) before RocksDB "
          "could hit ENOSPC"},
  {0},
};

static const ak_opt_t log_rows[] = {
  {.key = "level", .type = AK_OPT_ENUM, .def = "info", .enum_vals = "debug|info|warning|error",
   .env = "ANKUSA_LOG_LEVEL", .doc = "lowest level written to stderr"},
  {0},
};

/* http.tls: the PEM files are read (and parsed) at load, by edge/tls.c. */
static const ak_opt_t http_tls_rows[] = {
  {.key = "port", .type = AK_OPT_INT, .def = "4443", .min = 0, .max = 65535,
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX, .env = "ANKUSA_HTTP_TLS_PORT",
   .doc = "TLS ingest listener port (0 = pick a free port)"},
  {.key = "cert", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_REQUIRED | AK_OPTF_HAS_MIN,
   .doc = "PEM file: the server certificate chain, leaf first"},
  {.key = "key", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_REQUIRED | AK_OPTF_HAS_MIN,
   .doc = "PEM file: the server certificate's private key (not encrypted); never printed"},
  {.key = "client_ca", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN,
   .doc = "PEM file: the CA bundle client certificates must chain to (client_cert verifier)"},
  {.key = "client_cert", .type = AK_OPT_ENUM, .enum_vals = "none|request|require",
   .flags = AK_OPTF_NULLABLE,
   .doc = "request: ask for a client certificate; require: refuse the handshake without one "
          "from client_ca; default request when client_ca is set, else none"},
  {0},
};

static const ak_opt_t http_rows[] = {
  {.key = "port", .type = AK_OPT_INT, .def = "4000", .min = 0, .max = 65535,
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX, .env = "ANKUSA_HTTP_PORT|PORT",
   .doc = "ingest listener port (0 = pick a free port)"},
  {.key = "max_body_bytes", .type = AK_OPT_INT, .def = "8000000", .min = 1,
   .flags = AK_OPTF_HAS_MIN, .doc = "a larger body gets 413"},
  {.key = "routing", .type = AK_OPT_ENUM, .def = "path", .enum_vals = "path|tenant_path",
   .doc = "path: POST <prefix>/<source>; tenant_path: POST <prefix>/<tenant>/<source>"},
  {.key = "prefix", .type = AK_OPT_URL_PREFIX, .def = "/webhooks",
   .doc = "URL path prefix of the catch URLs; \"/\" or \"\" means none"},
  {.key = "tls", .type = AK_OPT_MAP, .children = http_tls_rows, .flags = AK_OPTF_NULLABLE,
   .doc = "a second ingest listener over TLS (client certificates); absent or null = none"},
  {0},
};

/* admin.principals[]: who may call the admin API. The file holds only the SHA-256 of a
 * token, never the token; print-config redacts even that. */
static const ak_opt_t principal_rows[] = {
  {.key = "name", .type = AK_OPT_STRING, .flags = AK_OPTF_REQUIRED | AK_OPTF_ID,
   .doc = "who this is: the actor named in its audit rows"},
  {.key = "token_sha256", .type = AK_OPT_STRING, .flags = AK_OPTF_REQUIRED | AK_OPTF_SECRET,
   .doc = "SHA-256 of the bearer token as 64 lowercase hex digits (printf %s \"$TOKEN\" | sha256sum)"},
  {.key = "scopes", .type = AK_OPT_STRLIST, .enum_vals = AK_AUTH_SCOPE_NAMES, .min = 1,
   .flags = AK_OPTF_REQUIRED | AK_OPTF_HAS_MIN, .doc = "what it may do (docs/admin-api.md lists each endpoint's scope)"},
  {.key = "tenants", .type = AK_OPT_STRLIST, .min = 1, .flags = AK_OPTF_REQUIRED | AK_OPTF_HAS_MIN,
   .doc = "\"*\" (every tenant, and the node-wide endpoints) or a list of tenant ids"},
  {0},
};

static const ak_opt_t admin_rows[] = {
  {.key = "enabled", .type = AK_OPT_BOOL, .def = "true", .doc = "serve the admin API and /metrics"},
  {.key = "ip", .type = AK_OPT_IP, .def = "127.0.0.1", .env = "ANKUSA_ADMIN_IP",
   .doc = "admin listener address (an IP literal; 0.0.0.0 exposes it)"},
  {.key = "port", .type = AK_OPT_INT, .def = "4002", .min = 0, .max = 65535,
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX, .env = "ANKUSA_ADMIN_PORT",
   .doc = "admin listener port"},
  {.key = "gauge_interval_ms", .type = AK_OPT_INT, .def = "15000", .min = 1,
   .flags = AK_OPTF_HAS_MIN, .doc = "how often gauges are sampled"},
  {.key = "principals", .type = AK_OPT_LIST_OF, .children = principal_rows,
   .doc = "bearer-token principals; none = no authentication, and then admin.ip must be a loopback address"},
  {0},
};

static const ak_opt_t audit_rows[] = {
  {.key = "retention_days", .type = AK_OPT_INT, .def = "365", .min = 1, .max = 36500,
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX, .doc = "audit rows older than this are pruned (checked hourly)"},
  {0},
};

static const ak_opt_t batcher_rows[] = {
  {.key = "partitions", .type = AK_OPT_INT, .def = "1", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "group-commit writer threads; more than one overlaps commits (RocksDB pipelined writes), "
          "worth it only with cores to spare; at most 16 are started"},
  {.key = "max_batch", .type = AK_OPT_INT, .def = "256", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "records per commit at most"},
  {.key = "max_delay_ms", .type = AK_OPT_INT, .def = "0", .min = 0, .flags = AK_OPTF_HAS_MIN,
   .doc = "linger before a commit (0 = none: the next batch fills while one syncs)"},
  {.key = "max_queue", .type = AK_OPT_INT, .def = "10000", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "records buffered plus in flight per partition; beyond it 503 overload"},
  {.key = "max_queue_bytes", .type = AK_OPT_INT, .def = "268435456", .min = 1,
   .flags = AK_OPTF_HAS_MIN, .doc = "the same bound in body bytes"},
  {.key = "tenant_max_queue", .type = AK_OPT_INT, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN,
   .doc = "records of one tenant buffered plus in flight; beyond it 429 tenant_overload; null = max_queue / 4"},
  {.key = "tenant_max_queue_bytes", .type = AK_OPT_INT, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN,
   .doc = "the same bound in body bytes; null = max_queue_bytes / 4"},
  {0},
};

static const ak_opt_t wal_rows[] = {
  {.key = "type", .type = AK_OPT_ENUM, .def = "disk", .enum_vals = "disk|none|dual",
   .enum_unsupported = "none|dual", .env = "ANKUSA_WAL_TYPE",
   .doc = "disk: every hook is synced to the local store before the ack"},
  {.key = "publish_timeout_ms", .type = AK_OPT_INT, .def = "8000", .min = 1,
   .flags = AK_OPTF_HAS_MIN, .doc = "publish timeout of wal.type none (accepted, unused)"},
  {0},
};

/* Only `type` is here (for docs): the other keys are each verifier's option rows, looked
 * up in the verifier registry by check_verifier() and by the redaction. */
static const ak_opt_t verify_rows[] = {
  {.key = "type", .type = AK_OPT_STRING, .flags = AK_OPTF_REQUIRED,
   .doc = "verifier type (verify/registry.c): none, stripe, github, standard_webhooks, shopify, "
          "slack, hmac, standard_webhooks_v1a, asymmetric, token, ..."},
  {0},
};

/* sources.<id>.dedupe: exactly one of preset, header or json (check_dedupe); a bare
 * preset name is shorthand for {preset: name}. */
static const ak_opt_t dedupe_source_rows[] = {
  {.key = "preset", .type = AK_OPT_ENUM, .enum_vals = "github|standard_webhooks|svix|shopify|stripe",
   .flags = AK_OPTF_NULLABLE,
   .doc = "github: x-github-delivery; standard_webhooks: webhook-id; svix: svix-id; shopify: "
          "x-shopify-webhook-id (headers); stripe: the body's JSON field id"},
  {.key = "header", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN,
   .doc = "the request header holding the provider's event id (any case)"},
  {.key = "json", .type = AK_OPT_STRING, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN,
   .doc = "dot path of object keys to the event id in a JSON body (a non-empty string or an integer)"},
  {.key = "ttl_seconds", .type = AK_OPT_INT, .def = "259200", .min = 1, .max = 315360000,
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX,
   .doc = "how long a key answers repeats with the first hook's id (72 h)"},
  {0},
};

/* {rate, burst} of one limit (rate_limits.*.bytes, admission.*, sources.*.admission_bytes) */
static const ak_opt_t rate_lane_rows[] = {
  {.key = "rate", .type = AK_OPT_NUMBER, .min = 0, .flags = AK_OPTF_REQUIRED | AK_OPTF_HAS_MIN,
   .doc = "units per second (> 0, fractions allowed)"},
  {.key = "burst", .type = AK_OPT_INT, .min = 1, .flags = AK_OPTF_REQUIRED | AK_OPTF_HAS_MIN,
   .doc = "units at once"},
  {0},
};

static const ak_opt_t source_rows[] = {
  {.key = "tenant", .type = AK_OPT_STRING, .def = "default", .flags = AK_OPTF_ID,
   .doc = "owning tenant; \"default\" makes the source shared"},
  {.key = "on_verify_failure", .type = AK_OPT_ENUM, .def = "reject",
   .enum_vals = "reject|quarantine|accept_flag", .doc = "what a failed verification does"},
  {.key = "verify", .type = AK_OPT_VERIFIER, .children = verify_rows,
   .doc = "verifier; absent or {} means none"},
  {.key = "sinks", .type = AK_OPT_SINK_LIST, .flags = AK_OPTF_REQUIRED,
   .doc = "where every hook is delivered (each sink gets every hook)"},
  {.key = "trust_url_tenant", .type = AK_OPT_BOOL, .def = "false",
   .doc = "allow a shared unverified source under tenant_path routing"},
  {.key = "dedupe", .type = AK_OPT_MAP_OR_NAME, .children = dedupe_source_rows,
   .doc = "provider event key: a repeat within the TTL gets the first hook's id and stores nothing"},
  {.key = "forward_headers", .type = AK_OPT_STRLIST, .flags = AK_OPTF_NULLABLE,
   .doc = "provider headers passed to sinks: absent or null = all but the deny set, a list = only "
          "these (lowercased, still minus the deny set), [] = none"},
  {.key = "admission_bytes", .type = AK_OPT_MAP, .children = rate_lane_rows, .flags = AK_OPTF_NULLABLE,
   .doc = "body bytes per second this source takes before reading a body ({rate, burst}); null = "
          "admission.source_bytes"},
  {0},
};

static const ak_opt_t store_headers_rows[] = {
  {.key = "drop", .type = AK_OPT_STRLIST, .def = "[]",
   .doc = "header names never stored, besides the built-in credential headers"},
  {.key = "hash", .type = AK_OPT_STRLIST, .def = "[]",
   .doc = "header names stored as sha256:<hex> of their value instead of the value"},
  {.key = "keep", .type = AK_OPT_STRLIST, .def = "[]",
   .doc = "built-in credential headers to store anyway (a verifier's token header never is)"},
  {0},
};

static const ak_opt_t quarantine_rows[] = {
  {.key = "burst", .type = AK_OPT_INT, .def = "100", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "tokens in each source's quarantine bucket (hooks held at once before the rate applies)"},
  {.key = "rate", .type = AK_OPT_NUMBER, .def = "20", .min = 0, .flags = AK_OPTF_HAS_MIN,
   .doc = "tokens per second refilled into each source's bucket (must be > 0)"},
  {.key = "max_bytes", .type = AK_OPT_INT, .def = "1073741824", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "body bytes the whole pen may hold; a full pen answers 503 quarantine_full, never evicts"},
  {0},
};

static const ak_opt_t dispatch_retry_rows[] = {
  {.key = "base_ms", .type = AK_OPT_INT, .def = "100", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "delay after the first failed attempt; it doubles after each further one"},
  {.key = "max_ms", .type = AK_OPT_INT, .def = "300000", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "cap on the delay, applied before jitter; at least base_ms"},
  {.key = "max_attempts", .type = AK_OPT_INT, .def = "84", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "attempts in all; the last failed one dead-letters the row"},
  {.key = "jitter", .type = AK_OPT_BOOL, .def = "true",
   .doc = "scale each delay by a random factor in [0.5, 1.0]"},
  {0},
};

/* Each null resolves at load to a share of the node's window (check_dispatch). */
static const ak_opt_t dispatch_tenant_rows[] = {
  {.key = "max_inflight", .type = AK_OPT_INT, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN,
   .doc = "claimed, unfinished rows of one tenant; null = dispatch.max_inflight / 4"},
  {.key = "max_inflight_bytes", .type = AK_OPT_INT, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN,
   .doc = "stored bytes of those rows; null = dispatch.max_inflight_bytes / 4"},
  {.key = "concurrency", .type = AK_OPT_INT, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN,
   .doc = "attempts in flight for one tenant; null = dispatch.concurrency / 2"},
  {0},
};

static const ak_opt_t dispatch_rows[] = {
  {.key = "batch", .type = AK_OPT_INT, .def = "128", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "delivery rows claimed per scan"},
  {.key = "concurrency", .type = AK_OPT_INT, .def = "32", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "attempts in flight on the node"},
  {.key = "max_inflight", .type = AK_OPT_INT, .def = "4096", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "claimed, unfinished rows; claiming stops when full"},
  {.key = "max_inflight_bytes", .type = AK_OPT_INT, .def = "134217728", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "stored hook bytes of those rows; claiming stops when full"},
  {.key = "attempt_timeout_ms", .type = AK_OPT_INT, .def = "30000", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "an attempt running longer counts as a transient failure"},
  {.key = "sink_concurrency", .type = AK_OPT_INT, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN,
   .doc = "attempts in flight per sink key {source, sink index, type}; null = no cap of its own"},
  {.key = "breaker_failures", .type = AK_OPT_INT, .def = "5", .min = 0, .flags = AK_OPTF_HAS_MIN,
   .doc = "consecutive transient failures that open a sink key's breaker; 0 = no breaker"},
  {.key = "breaker_open_ms", .type = AK_OPT_INT, .def = "30000", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "first open period of a breaker"},
  {.key = "breaker_max_open_ms", .type = AK_OPT_INT, .def = "300000", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "the open period doubles after each failed probe, up to this; at least breaker_open_ms"},
  {.key = "retry", .type = AK_OPT_MAP, .children = dispatch_retry_rows, .doc = "retry policy (dispatch-wide)"},
  {.key = "tenants", .type = AK_OPT_MAP, .children = dispatch_tenant_rows,
   .doc = "the share of the dispatch window one tenant may hold"},
  {0},
};

/* Not in Ankusa: the SSRF guard of the sinks that connect out (sinks/egress.h). */
static const ak_opt_t egress_rows[] = {
  {.key = "allow_cidrs", .type = AK_OPT_STRLIST, .def = "[]",
   .doc = "non-public destinations sinks may reach anyway (\"10.1.0.0/16\", \"fd00::/8\", a bare address)"},
  {.key = "allow_http", .type = AK_OPT_BOOL, .def = "false",
   .doc = "allow http:// sink URLs (plain text) besides https://"},
  {0},
};

/* Not in Ankusa: the bounds of the dedupe index (queue/dedupe.c). The index holds every
 * live key in memory (about 64 bytes each), so max_entries bounds its memory: 10 million
 * keys (about 640 MB) is a 72 h TTL at ~38 new events per second, sustained. One tenant
 * may hold a tenth of that, so a single noisy tenant cannot exhaust it for the others. */
static const ak_opt_t dedupe_rows[] = {
  {.key = "max_entries", .type = AK_OPT_INT, .def = "10000000", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "dedupe keys the node keeps at most (expired ones count until swept); past it a hook "
          "with a key gets 503 dedupe_quota"},
  {.key = "max_entries_per_tenant", .type = AK_OPT_INT, .def = "1000000", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "the same bound for one tenant's keys"},
  {.key = "sweep_interval_ms", .type = AK_OPT_INT, .def = "10000", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "how often the sweeper removes expired keys"},
  {0},
};

/* One tenant's limits (core/ratelimit.h parses it; rate and burst are required unless
 * the entry sets only additions: check_limits). */
static const ak_opt_t ratelimit_entry_rows[] = {
  {.key = "rate", .type = AK_OPT_NUMBER, .min = 0, .flags = AK_OPTF_HAS_MIN,
   .doc = "hooks per second (> 0, fractions allowed), charged after verification"},
  {.key = "burst", .type = AK_OPT_INT, .min = 1, .flags = AK_OPTF_HAS_MIN, .doc = "hooks at once"},
  {.key = "bytes", .type = AK_OPT_MAP, .children = rate_lane_rows, .flags = AK_OPTF_NULLABLE,
   .doc = "body bytes per second ({rate, burst}), charged with the hooks"},
  {.key = "max_body_bytes", .type = AK_OPT_INT, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN,
   .doc = "a larger body of this tenant gets 413 before it is read"},
  {0},
};

static const ak_opt_t rate_limits_rows[] = {
  {.key = "default", .type = AK_OPT_MAP, .children = ratelimit_entry_rows, .flags = AK_OPTF_NULLABLE,
   .doc = "limits of every tenant without an entry or override; null = unlimited"},
  {.key = "tenants", .type = AK_OPT_MAP_OF, .children = ratelimit_entry_rows,
   .doc = "tenant id -> limits (an admin override beats it)"},
  {0},
};

/* Pre-read admission: refusals before a body is read or a signature computed. */
static const ak_opt_t admission_rows[] = {
  {.key = "per_ip", .type = AK_OPT_MAP, .children = rate_lane_rows, .flags = AK_OPTF_NULLABLE,
   .doc = "requests per second per client address ({rate, burst}); null = off"},
  {.key = "node", .type = AK_OPT_MAP, .children = rate_lane_rows, .flags = AK_OPTF_NULLABLE,
   .doc = "requests per second the node takes ({rate, burst}); null = off"},
  {.key = "source_bytes", .type = AK_OPT_MAP, .children = rate_lane_rows, .flags = AK_OPTF_NULLABLE,
   .doc = "body bytes per second each source takes ({rate, burst}); null = off"},
  {.key = "trusted_proxies", .type = AK_OPT_STRLIST, .def = "[]",
   .doc = "CIDRs of proxies whose X-Forwarded-For names the client"},
  {.key = "max_addresses", .type = AK_OPT_INT, .def = "65536", .min = 8, .max = 16777216,
   .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX, .doc = "client addresses whose per_ip state is kept at once"},
  {0},
};

/* Where sources come from besides the config file. redis (shared by a fleet) is Ankusa's
 * third type; url, namespace and tick_ms belong to it alone. A url without a type means
 * redis, so type has no default here: check_source_store() resolves it. */
static const ak_opt_t source_store_rows[] = {
  {.key = "type", .type = AK_OPT_ENUM, .enum_vals = "static|persistent|redis", .flags = AK_OPTF_NULLABLE,
   .doc = "static: the config file's sources only, the API refuses writes; persistent: also sources "
          "created over the admin API, kept in the node's store; redis: not supported yet. "
          "Default static (redis when url is set)"},
  {.key = "url", .type = AK_OPT_STRING, .flags = AK_OPTF_NULLABLE | AK_OPTF_SECRET,
   .env = "ANKUSA_SOURCE_STORE_URL", .doc = "redis only: the shared store"},
  {.key = "namespace", .type = AK_OPT_STRING, .flags = AK_OPTF_NULLABLE,
   .doc = "redis only: key namespace (ankusa:sources:<instance>)"},
  {.key = "tick_ms", .type = AK_OPT_INT, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN,
   .doc = "redis only: how often the shared store is re-read (30000)"},
  {0},
};

#define NOT_YET_SECTION(name, what) \
  {.key = name, .type = AK_OPT_MAP, .flags = AK_OPTF_UNSUPPORTED, .doc = what}

static const ak_opt_t root_rows[] = {
  {.key = "node", .type = AK_OPT_MAP, .children = node_rows, .doc = "this node"},
  {.key = "log", .type = AK_OPT_MAP, .children = log_rows, .doc = "logging"},
  {.key = "http", .type = AK_OPT_MAP, .children = http_rows, .doc = "ingest listener"},
  {.key = "admin", .type = AK_OPT_MAP, .children = admin_rows, .doc = "admin listener"},
  {.key = "audit", .type = AK_OPT_MAP, .children = audit_rows, .doc = "the trail of operator changes"},
  {.key = "store_headers", .type = AK_OPT_MAP, .children = store_headers_rows,
   .doc = "which request headers are stored with a hook"},
  NOT_YET_SECTION("routes", "route guard"),
  {.key = "rate_limits", .type = AK_OPT_MAP, .children = rate_limits_rows,
   .doc = "per-tenant limits: hooks and body bytes per second, max_body_bytes"},
  {.key = "admission", .type = AK_OPT_MAP, .children = admission_rows,
   .doc = "limits applied before a body is read: per client address, per node, per source"},
  {.key = "quarantine", .type = AK_OPT_MAP, .children = quarantine_rows,
   .doc = "the pen for hooks that failed verification (on_verify_failure: quarantine)"},
  {.key = "batcher", .type = AK_OPT_MAP, .children = batcher_rows, .doc = "group commit"},
  {.key = "dispatch", .type = AK_OPT_MAP, .children = dispatch_rows, .doc = "delivery scheduler"},
  {.key = "egress", .type = AK_OPT_MAP, .children = egress_rows,
   .doc = "which destinations sinks may connect to"},
  {.key = "wal", .type = AK_OPT_MAP, .children = wal_rows, .doc = "durability of the ack"},
  {.key = "dedupe", .type = AK_OPT_MAP, .children = dedupe_rows, .doc = "bounds of the dedupe index"},
  NOT_YET_SECTION("storage", "segment archive"),
  NOT_YET_SECTION("claim_check", "claim-check gateway"),
  NOT_YET_SECTION("backup", "store backup"),
  {.key = "sources", .type = AK_OPT_MAP_OF, .children = source_rows, .doc = "source id -> source"},
  {.key = "source_store", .type = AK_OPT_MAP, .children = source_store_rows,
   .doc = "where sources come from besides the config file (the admin API's sources)"},
  NOT_YET_SECTION("lifecycle", "lifecycle events"),
  {0},
};

const ak_opt_t *ak_config_root_options(void) { return root_rows; }

/* ----------------------------------------------------------------- small helpers ---- */

static const ak_opt_t *row_find(const ak_opt_t *rows, const char *key, size_t *idx) {
  for (size_t i = 0; rows && rows[i].key; i++)
    if (!strcmp(rows[i].key, key)) {
      if (idx) *idx = i;
      return &rows[i];
    }
  return NULL;
}

static size_t row_count(const ak_opt_t *rows) {
  size_t n = 0;
  while (rows && rows[n].key) n++;
  return n;
}

/* Position of word in "a|b|c", or -1. */
static int list_index(const char *list, const char *word) {
  if (!list) return -1;
  size_t wl = strlen(word);
  int i = 0;
  for (const char *p = list;; i++) {
    const char *bar = strchr(p, '|');
    size_t len = bar ? (size_t)(bar - p) : strlen(p);
    if (len == wl && !memcmp(p, word, wl)) return i;
    if (!bar) return -1;
    p = bar + 1;
  }
}

static bool is_id(const char *s) {
  size_t n = strlen(s);
  if (n < 1 || n > 64) return false;
  for (size_t i = 0; i < n; i++) {
    char ch = s[i];
    bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '-';
    if (!ok) return false;
  }
  return true;
}

static char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *xasprintf(const char *fmt, ...) {
  char *s = NULL;
  va_list ap;
  va_start(ap, fmt);
  int rc = vasprintf(&s, fmt, ap);
  va_end(ap);
  return rc < 0 ? NULL : s;
}

static char *path_key(const char *parent, const char *key) {
  return *parent ? xasprintf("%s.%s", parent, key) : strdup(key);
}

static char *path_idx(const char *parent, size_t i) { return xasprintf("%s[%zu]", parent, i); }

static const char *env_lookup(const char *const *env, const char *name) {
  if (!env) return getenv(name);
  size_t n = strlen(name);
  for (size_t i = 0; env[i]; i++)
    if (!strncmp(env[i], name, n) && env[i][n] == '=') return env[i] + n + 1;
  return NULL;
}

/* The value of the first of "A|B" that is set and non-empty; *which names it. An empty
 * override is treated as unset so that `PORT=` in a unit file does not break a boot. */
static const char *env_override(const char *const *env, const char *names, char *which,
                                size_t whichlen) {
  for (const char *p = names; p && *p;) {
    const char *bar = strchr(p, '|');
    size_t len = bar ? (size_t)(bar - p) : strlen(p);
    if (len < whichlen) {
      memcpy(which, p, len);
      which[len] = '\0';
      const char *v = env_lookup(env, which);
      if (v && *v) return v;
    }
    p = bar ? bar + 1 : p + len;
  }
  return NULL;
}

/* A value as it appears in an error: strings quoted (and cut when long), collections
 * elided; a secret scalar never appears at all. */
static char *render(const json_t *v, bool secret) {
  if (json_is_array(v)) return strdup("[...]");
  if (json_is_object(v)) return strdup("{...}");
  if (secret && !json_is_null(v)) return strdup(REDACTED);
  if (json_is_string(v)) {
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    bool cut = n > 64;
    if (cut) {
      n = 60;
      while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) n--;
    }
    json_t *tmp = json_stringn(s, n);
    char *q = tmp ? json_dumps(tmp, JSON_ENCODE_ANY) : NULL;
    json_decref(tmp);
    if (!q || !cut) return q;
    size_t ql = strlen(q);
    char *out = xasprintf("%.*s...\"", (int)(ql - 1), q);
    free(q);
    return out;
  }
  return json_dumps(v, JSON_ENCODE_ANY | JSON_REAL_PRECISION(15));
}

/* ------------------------------------------------------------ validation context ---- */

typedef struct {
  char **lines;
  size_t n, cap;
  const char *const *env;
  /* A spec that came over the admin API: its strings are taken as written. ${VAR} reads
   * the node's environment, which is the operator's, not the API caller's. */
  bool literal;
} vctx_t;

static void verr(vctx_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void verr(vctx_t *c, const char *fmt, ...) {
  char *s = NULL;
  va_list ap;
  va_start(ap, fmt);
  int rc = vasprintf(&s, fmt, ap);
  va_end(ap);
  if (rc < 0) s = NULL;
  if (c->n == c->cap) {
    size_t cap = c->cap ? c->cap * 2 : 8;
    char **nl = realloc(c->lines, cap * sizeof *nl);
    if (!nl) {
      free(s);
      return;
    }
    c->lines = nl;
    c->cap = cap;
  }
  c->lines[c->n++] = s ? s : strdup("out of memory");
}

static char *vctx_join(vctx_t *c) {
  size_t len = 1;
  for (size_t i = 0; i < c->n; i++) len += (c->lines[i] ? strlen(c->lines[i]) : 0) + 1;
  char *out = malloc(len);
  if (!out) return NULL;
  char *p = out;
  for (size_t i = 0; i < c->n; i++) {
    if (i) *p++ = '\n';
    size_t l = c->lines[i] ? strlen(c->lines[i]) : 0;
    memcpy(p, c->lines[i], l);
    p += l;
  }
  *p = '\0';
  return out;
}

static void vctx_free(vctx_t *c) {
  for (size_t i = 0; i < c->n; i++) free(c->lines[i]);
  free(c->lines);
}

static void type_error(vctx_t *c, const char *label, const char *want, const json_t *v, bool secret) {
  char *r = render(v, secret);
  verr(c, "%s: expected %s, got %s", label, want, r ? r : "?");
  free(r);
}

/* ------------------------------------------------------------------ interpolation ---- */

typedef struct {
  char *s;
  size_t n, cap;
} sbuf_t;

static void sb_add(sbuf_t *b, const char *s, size_t n) {
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + n + 1) cap *= 2;
    char *ns = realloc(b->s, cap);
    if (!ns) return;
    b->s = ns;
    b->cap = cap;
  }
  memcpy(b->s + b->n, s, n);
  b->n += n;
  b->s[b->n] = '\0';
}

static bool is_name_char(char ch) {
  return (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
}

/* ${NAME} / ${NAME:-default} in one string value. What gets substituted is never scanned
 * again, so a variable may hold "${" literally. New reference, or NULL after reporting. */
static json_t *interpolate(vctx_t *c, json_t *v, const char *label, bool secret) {
  const char *s = json_string_value(v);
  if (c->literal || !strstr(s, "${")) return json_incref(v);
  size_t n = strlen(s), errs = c->n;
  sbuf_t b = {0};
  sb_add(&b, "", 0);
  for (size_t i = 0; i < n;) {
    if (s[i] != '$' || s[i + 1] != '{') {
      sb_add(&b, s + i, 1);
      i++;
      continue;
    }
    size_t j = i + 2;
    while (j < n && is_name_char(s[j])) j++;
    bool named = j > i + 2;
    if (named && j < n && s[j] == '}') {
      char *name = strndup(s + i + 2, j - i - 2);
      const char *val = name ? env_lookup(c->env, name) : NULL;
      if (val) sb_add(&b, val, strlen(val));
      else verr(c, "%s: ${%s} is not set", label, name ? name : "?");
      free(name);
      i = j + 1;
      continue;
    }
    if (named && j + 1 < n && s[j] == ':' && s[j + 1] == '-') {
      const char *close = strchr(s + j + 2, '}');
      if (close) {
        char *name = strndup(s + i + 2, j - i - 2);
        const char *val = name ? env_lookup(c->env, name) : NULL;
        if (val) sb_add(&b, val, strlen(val));
        else sb_add(&b, s + j + 2, (size_t)(close - (s + j + 2)));
        free(name);
        i = (size_t)(close - s) + 1;
        continue;
      }
    }
    /* Not a reference we understand: say which text, unless it belongs to a secret. */
    const char *close = strchr(s + i, '}');
    size_t frag = close ? (size_t)(close - (s + i)) + 1 : n - i;
    if (secret) verr(c, "%s: unresolved ${...}", label);
    else if (frag > 40) verr(c, "%s: unresolved %.36s...", label, s + i);
    else verr(c, "%s: unresolved %.*s", label, (int)frag, s + i);
    i += frag;
  }
  json_t *out = NULL;
  if (c->n == errs) {
    out = b.s ? json_string(b.s) : NULL;
    if (!out) verr(c, "%s: the interpolated value is not valid UTF-8", label);
  }
  free(b.s);
  return out;
}

/* ---------------------------------------------------------------------- checking ---- */

static json_t *check_value(vctx_t *c, const ak_opt_t *row, json_t *v, const char *path,
                           const char *label, bool interp);
static json_t *check_map(vctx_t *c, const ak_opt_t *rows, json_t *obj, const char *path);

/* A string, or a plain integer taken as its text ("tenant: 2024"). Malloc'd or NULL. */
static char *as_text(const json_t *v) {
  if (json_is_string(v)) return strdup(json_string_value(v));
  if (json_is_integer(v)) return xasprintf("%lld", (long long)json_integer_value(v));
  return NULL;
}

static bool parse_int_text(const char *s, int64_t *out) {
  const char *p = s;
  if (*p == '-') p++;
  if (!*p) return false;
  for (const char *q = p; *q; q++)
    if (*q < '0' || *q > '9') return false;
  errno = 0;
  long long v = strtoll(s, NULL, 10);
  if (errno == ERANGE) return false;
  *out = v;
  return true;
}

static bool is_empty_value(const json_t *v) {
  return !v || json_is_null(v) || (json_is_object(v) && json_object_size(v) == 0) ||
         (json_is_array(v) && json_array_size(v) == 0) ||
         (json_is_string(v) && json_string_length(v) == 0);
}

static void bounds_text(const ak_opt_t *row, char *buf, size_t len) {
  bool lo = row->flags & AK_OPTF_HAS_MIN, hi = row->flags & AK_OPTF_HAS_MAX;
  if (lo && hi)
    snprintf(buf, len, "between %lld and %lld", (long long)row->min, (long long)row->max);
  else if (lo && row->min == 1) snprintf(buf, len, "positive");
  else if (lo && row->min == 0) snprintf(buf, len, "non-negative");
  else if (lo) snprintf(buf, len, "at least %lld", (long long)row->min);
  else snprintf(buf, len, "at most %lld", (long long)row->max);
}

static bool in_bounds(const ak_opt_t *row, double x) {
  if ((row->flags & AK_OPTF_HAS_MIN) && x < (double)row->min) return false;
  if ((row->flags & AK_OPTF_HAS_MAX) && x > (double)row->max) return false;
  return true;
}

static void range_error(vctx_t *c, const ak_opt_t *row, const char *label, const json_t *v) {
  char want[96];
  bounds_text(row, want, sizeof want);
  char *r = render(v, row->flags & AK_OPTF_SECRET);
  verr(c, "%s must be %s, got %s", label, want, r ? r : "?");
  free(r);
}

/* Length / count bounds of strings and lists; "must not be empty" for the common case. */
static bool check_count(vctx_t *c, const ak_opt_t *row, const char *label, size_t n, const char *unit) {
  if ((row->flags & AK_OPTF_HAS_MIN) && (int64_t)n < row->min) {
    if (row->min == 1) verr(c, "%s: must not be empty", label);
    else verr(c, "%s: must have at least %lld %s", label, (long long)row->min, unit);
    return false;
  }
  if ((row->flags & AK_OPTF_HAS_MAX) && (int64_t)n > row->max) {
    verr(c, "%s: must have at most %lld %s", label, (long long)row->max, unit);
    return false;
  }
  return true;
}

static void enum_expected(const char *vals, char *buf, size_t len) {
  size_t o = 0;
  for (const char *p = vals; *p && o + 3 < len; p++) {
    if (*p == '|') {
      buf[o++] = ',';
      buf[o++] = ' ';
    } else {
      buf[o++] = *p;
    }
  }
  buf[o] = '\0';
}

/* Checks a word against enum_vals / enum_unsupported; reports and returns false. */
static bool check_enum_word(vctx_t *c, const ak_opt_t *row, const char *label, const char *w) {
  if (list_index(row->enum_vals, w) < 0) {
    char exp[512];
    enum_expected(row->enum_vals, exp, sizeof exp);
    json_t *tmp = json_string(w);
    char *r = render(tmp, false);
    verr(c, "%s: unknown value %s; expected one of %s", label, r ? r : "?", exp);
    free(r);
    json_decref(tmp);
    return false;
  }
  if (list_index(row->enum_unsupported, w) >= 0) {
    verr(c, "%s: \"%s\" is not supported yet", label, w);
    return false;
  }
  return true;
}

/* A word named twice means the same as once (roles: [edge, edge]). */
static void strlist_add(json_t *list, const char *w) {
  size_t k;
  json_t *prev;
  json_array_foreach(list, k, prev)
    if (!strcmp(json_string_value(prev), w)) return;
  json_array_append_new(list, json_string(w));
}

static json_t *check_strlist(vctx_t *c, const ak_opt_t *row, json_t *v, const char *path,
                             const char *label, bool interp) {
  json_t *out = json_array();
  size_t errs = c->n;
  if (json_is_array(v)) {
    size_t i;
    json_t *item;
    json_array_foreach(v, i, item) {
      char *ip = path_idx(path, i);
      json_t *iv = (interp && json_is_string(item)) ? interpolate(c, item, ip, false) : json_incref(item);
      char *t = iv ? as_text(iv) : NULL;
      if (iv && !t) type_error(c, ip, "a string", iv, false);
      if (t && row->enum_vals && !check_enum_word(c, row, ip, t)) {
        free(t);
        t = NULL;
      }
      if (t) strlist_add(out, t);
      free(t);
      json_decref(iv);
      free(ip);
    }
  } else {
    json_t *sv = (interp && json_is_string(v)) ? interpolate(c, v, label, false) : json_incref(v);
    if (sv && !json_is_string(sv)) type_error(c, label, "a list", sv, false);
    if (sv && json_is_string(sv)) {
      /* "edge, dispatch" is the env form: split on commas, trim, drop empty parts */
      const char *s = json_string_value(sv);
      while (*s) {
        const char *comma = strchr(s, ',');
        const char *e = comma ? comma : s + strlen(s);
        const char *b = s;
        while (b < e && (*b == ' ' || *b == '\t')) b++;
        const char *t = e;
        while (t > b && (t[-1] == ' ' || t[-1] == '\t')) t--;
        if (t > b) {
          char *w = strndup(b, (size_t)(t - b));
          if (w && (!row->enum_vals || check_enum_word(c, row, label, w))) strlist_add(out, w);
          free(w);
        }
        s = comma ? comma + 1 : e;
      }
    }
    json_decref(sv);
  }
  if (c->n == errs) check_count(c, row, label, json_array_size(out), "items");
  if (c->n != errs) {
    json_decref(out);
    return NULL;
  }
  return out;
}

static json_t *check_secrets(vctx_t *c, json_t *v, const char *path, const char *label, bool interp) {
  size_t errs = c->n;
  if (json_is_string(v)) {
    json_t *sv = interp ? interpolate(c, v, label, true) : json_incref(v);
    if (sv && json_string_length(sv) == 0) verr(c, "%s: must not be empty", label);
    if (c->n == errs) return sv;
    json_decref(sv);
    return NULL;
  }
  if (!json_is_array(v)) {
    type_error(c, label, "a string or a list of strings", v, true);
    return NULL;
  }
  if (json_array_size(v) == 0) {
    verr(c, "%s: must not be empty", label);
    return NULL;
  }
  if (json_array_size(v) > MAX_SECRETS) {
    verr(c, "%s: at most %d secrets", label, MAX_SECRETS);
    return NULL;
  }
  json_t *out = json_array();
  size_t i;
  json_t *item;
  json_array_foreach(v, i, item) {
    char *ip = path_idx(path, i);
    if (!json_is_string(item)) {
      type_error(c, ip, "a string", item, true);
    } else {
      json_t *sv = interp ? interpolate(c, item, ip, true) : json_incref(item);
      if (sv && json_string_length(sv) == 0) verr(c, "%s: must not be empty", ip);
      else if (sv) json_array_append(out, sv);
      json_decref(sv);
    }
    free(ip);
  }
  if (c->n == errs) return out;
  json_decref(out);
  return NULL;
}

static json_t *check_prefix(vctx_t *c, const char *label, const char *s) {
  sbuf_t b = {0};
  sb_add(&b, "", 0);
  bool ok = true;
  while (*s) {
    const char *slash = strchr(s, '/');
    size_t len = slash ? (size_t)(slash - s) : strlen(s);
    if (len) {
      bool good = !(len == 1 && s[0] == '.') && !(len == 2 && s[0] == '.' && s[1] == '.');
      for (size_t i = 0; i < len && good; i++) {
        char ch = s[i];
        good = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
               ch == '.' || ch == '_' || ch == '~' || ch == '-';
      }
      if (!good) {
        char *seg = strndup(s, len);
        json_t *tmp = seg ? json_string(seg) : NULL;
        char *r = tmp ? render(tmp, false) : NULL;
        verr(c, "%s: invalid path segment %s; expected [A-Za-z0-9._~-]+ (and not . or ..)", label,
             r ? r : "?");
        free(r);
        json_decref(tmp);
        free(seg);
        ok = false;
        break;
      }
      sb_add(&b, "/", 1);
      sb_add(&b, s, len);
    }
    s += len + (slash ? 1 : 0);
  }
  json_t *out = ok && b.s ? json_string(b.s) : NULL;
  free(b.s);
  return out;
}

/* A "plug-in" mapping whose `type` decides what else is allowed: check the type alone
 * first, so a refused type does not also produce a pile of unknown-key errors; then the
 * other keys against that verifier's option rows; then build the verifier once, so a
 * secret or key that cannot be decoded fails the load (its error names the key, never
 * the value: "secret[1]: cannot be decoded: ..."). */
static json_t *check_verifier(vctx_t *c, const ak_opt_t *row, json_t *obj, const char *path) {
  (void)row;
  if (is_empty_value(obj)) return json_pack("{s:s}", "type", "none");
  json_t *t = json_object_get(obj, "type");
  if (!t) {
    verr(c, "%s: missing required key \"type\"", path);
    return NULL;
  }
  char *tp = path_key(path, "type");
  json_t *tv = json_is_string(t) ? interpolate(c, t, tp, false) : json_incref(t);
  char *type = tv ? as_text(tv) : NULL;
  const ak_verifier_vtable_t *vt = NULL;
  json_t *out = NULL;
  size_t errs = c->n;
  if (tv && !type) {
    type_error(c, tp, "a string", tv, false);
  } else if (type && !(vt = ak_verifiers_find(type))) {
    json_t *tmp = json_string(type);
    char *r = tmp ? render(tmp, false) : NULL;
    json_decref(tmp);
    verr(c, "%s: unknown value %s; expected one of %s", tp, r ? r : "?", ak_verifiers_type_list());
    free(r);
  } else if (vt) {
    json_t *rest = json_copy(obj);
    json_object_del(rest, "type");
    json_t *opts = check_map(c, vt->options, rest, path);
    json_decref(rest);
    if (opts && c->n == errs) {
      out = json_pack("{s:s}", "type", type);
      json_object_update(out, opts);
      char why[512];
      ak_verifier_t *v = ak_verifier_new(out, why, sizeof why);
      if (!v) {
        verr(c, "%s.%s", path, why[0] ? why : "type: cannot be created");
        json_decref(out);
        out = NULL;
      }
      ak_verifier_free(v);
    }
    json_decref(opts);
  }
  free(type);
  json_decref(tv);
  free(tp);
  return out;
}

static json_t *check_sink(vctx_t *c, json_t *item, const char *ip) {
  if (!json_is_object(item)) {
    type_error(c, ip, "a mapping", item, false);
    return NULL;
  }
  json_t *t = json_object_get(item, "type");
  if (!t) {
    verr(c, "%s: missing required key \"type\"", ip);
    return NULL;
  }
  char *tp = path_key(ip, "type");
  json_t *tv = json_is_string(t) ? interpolate(c, t, tp, false) : json_incref(t);
  char *type = tv ? as_text(tv) : NULL;
  json_t *out = NULL;
  const ak_sink_vtable_t *vt = NULL;
  if (tv && !type) {
    type_error(c, tp, "a string", tv, false);
  } else if (type && !(vt = ak_sinks_find(type))) {
    json_t *tmp = json_string(type);
    char *r = tmp ? render(tmp, false) : NULL;
    json_decref(tmp);
    verr(c, "%s: unknown value %s; expected one of %s", tp, r ? r : "?", ak_sinks_type_list());
    free(r);
  } else if (vt && !vt->supported) {
    verr(c, "%s: sink type \"%s\" is not supported yet", tp, type);
  } else if (vt) {
    json_t *rest = json_copy(item);
    json_object_del(rest, "type");
    json_t *opts = check_map(c, vt->options, rest, ip);
    json_decref(rest);
    if (opts) {
      out = json_pack("{s:s}", "type", type);
      json_object_update(out, opts);
      json_decref(opts);
    }
  }
  free(type);
  json_decref(tv);
  free(tp);
  return out;
}

static json_t *check_sink_list(vctx_t *c, json_t *v, const char *path, const char *label) {
  if (!json_is_null(v) && !json_is_array(v)) {
    type_error(c, label, "a list", v, false);
    return NULL;
  }
  if (json_array_size(v) == 0) {
    verr(c, "%s: must not be empty", label);
    return NULL;
  }
  size_t errs = c->n;
  json_t *out = json_array();
  size_t i;
  json_t *item;
  json_array_foreach(v, i, item) {
    char *ip = path_idx(path, i);
    json_t *sv = check_sink(c, item, ip);
    if (sv) json_array_append_new(out, sv);
    free(ip);
  }
  if (c->n == errs) return out;
  json_decref(out);
  return NULL;
}

/* A list of mappings (admin.principals); null = []. */
static json_t *check_list_of(vctx_t *c, const ak_opt_t *row, json_t *v, const char *path, const char *label) {
  if (json_is_null(v)) return json_array();
  if (!json_is_array(v)) {
    type_error(c, label, "a list", v, false);
    return NULL;
  }
  size_t errs = c->n;
  json_t *out = json_array();
  size_t i;
  json_t *item;
  json_array_foreach(v, i, item) {
    char *ip = path_idx(path, i);
    if (!json_is_object(item)) {
      type_error(c, ip, "a mapping", item, false);
    } else {
      json_t *m = check_map(c, row->children, item, ip);
      if (m) json_array_append_new(out, m);
    }
    free(ip);
  }
  if (c->n == errs) return out;
  json_decref(out);
  return NULL;
}

static int cmp_key(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A mapping of id -> mapping (sources). Checked in file order, emitted sorted by id. */
static json_t *check_map_of(vctx_t *c, const ak_opt_t *row, json_t *obj, const char *path) {
  if (json_is_null(obj)) return json_object();
  if (!json_is_object(obj)) {
    type_error(c, path, "a mapping", obj, false);
    return NULL;
  }
  size_t n = json_object_size(obj), k = 0;
  const char **keys = calloc(n + 1, sizeof *keys);
  json_t *checked = json_object();
  const char *id;
  json_t *val;
  size_t noun_len = strlen(row->key);
  if (noun_len > 1 && row->key[noun_len - 1] == 's') noun_len--; /* "sources" -> "source" */
  json_object_foreach(obj, id, val) {
    if (!is_id(id)) {
      json_t *tmp = json_string(id);
      char *r = render(tmp, false);
      verr(c, "%s: invalid %.*s id %s; expected " ID_PATTERN, path, (int)noun_len, row->key,
           r ? r : "?");
      free(r);
      json_decref(tmp);
      continue;
    }
    char *ip = path_key(path, id);
    json_t *cv = NULL;
    size_t before = c->n;
    if (!json_is_null(val) && !json_is_object(val)) type_error(c, ip, "a mapping", val, false);
    else cv = check_map(c, row->children, val, ip);
    if (cv && c->n == before) json_object_set_new(checked, id, cv); /* a bad entry is left out */
    else json_decref(cv);
    free(ip);
  }
  json_t *out = NULL;
  if (keys) {
    json_object_foreach(checked, id, val) keys[k++] = id;
    qsort(keys, k, sizeof *keys, cmp_key);
    out = json_object();
    for (size_t i = 0; i < k; i++) json_object_set(out, keys[i], json_object_get(checked, keys[i]));
  }
  free(keys);
  json_decref(checked);
  return out;
}

static json_t *check_value(vctx_t *c, const ak_opt_t *row, json_t *v, const char *path,
                           const char *label, bool interp) {
  bool secret = row->flags & AK_OPTF_SECRET;
  if (row->flags & AK_OPTF_UNSUPPORTED) {
    if (!is_empty_value(v)) verr(c, "%s: not supported yet; " NOT_YET_HINT, label);
    return NULL;
  }
  /* before the list types take over: null is "unset" for a nullable list too */
  if (json_is_null(v) && (row->flags & AK_OPTF_NULLABLE)) return json_null();
  if (row->type == AK_OPT_SECRETS) return check_secrets(c, v, path, label, interp);
  if (row->type == AK_OPT_STRLIST) return check_strlist(c, row, v, path, label, interp);
  json_t *own = (interp && json_is_string(v)) ? interpolate(c, v, label, secret) : json_incref(v);
  if (!own) return NULL;
  v = own;
  json_t *out = NULL;
  char *text = NULL;
  if (json_is_null(v) && (row->flags & AK_OPTF_NULLABLE)) {
    out = json_null();
    goto done;
  }
  switch (row->type) {
  case AK_OPT_STRING:
    if (!(text = as_text(v))) {
      type_error(c, label, "a string", v, secret);
    } else if ((row->flags & AK_OPTF_ID) && !is_id(text)) {
      char *r = render(v, secret);
      verr(c, "%s: invalid %s %s; expected " ID_PATTERN, label, row->key, r ? r : "?");
      free(r);
    } else if (check_count(c, row, label, strlen(text), "characters")) {
      out = json_string(text);
    }
    break;
  case AK_OPT_INT: {
    int64_t x = 0;
    bool ok = json_is_integer(v) ? (x = json_integer_value(v), true)
                                 : json_is_string(v) && parse_int_text(json_string_value(v), &x);
    if (!ok) {
      type_error(c, label, "an integer", v, secret);
    } else {
      json_t *iv = json_integer(x);
      if (in_bounds(row, (double)x)) out = iv;
      else {
        range_error(c, row, label, iv);
        json_decref(iv);
      }
    }
    break;
  }
  case AK_OPT_NUMBER: {
    json_t *nv = NULL;
    int64_t x;
    if (json_is_number(v)) {
      nv = json_incref(v);
    } else if (json_is_string(v)) {
      const char *s = json_string_value(v);
      char *end = NULL;
      if (parse_int_text(s, &x)) {
        nv = json_integer(x);
      } else if (*s) {
        double d = strtod(s, &end);
        if (end && !*end && d == d && d - d == 0) nv = json_real(d);
      }
    }
    if (!nv) type_error(c, label, "a number", v, secret);
    else if (!in_bounds(row, json_number_value(nv))) range_error(c, row, label, nv);
    else out = json_incref(nv);
    json_decref(nv);
    break;
  }
  case AK_OPT_BOOL:
    if (json_is_boolean(v)) out = json_incref(v);
    else if (json_is_string(v) && !strcasecmp(json_string_value(v), "true")) out = json_true();
    else if (json_is_string(v) && !strcasecmp(json_string_value(v), "false")) out = json_false();
    else type_error(c, label, "a boolean", v, secret);
    break;
  case AK_OPT_ENUM:
    if (!(text = as_text(v))) type_error(c, label, "a string", v, secret);
    else if (check_enum_word(c, row, label, text)) out = json_string(text);
    break;
  case AK_OPT_IP: {
    unsigned char buf[sizeof(struct in6_addr)];
    text = json_is_string(v) ? strdup(json_string_value(v)) : NULL;
    if (text && (inet_pton(AF_INET, text, buf) == 1 || inet_pton(AF_INET6, text, buf) == 1))
      out = json_string(text);
    else type_error(c, label, "an IP address literal", v, secret);
    break;
  }
  case AK_OPT_URL_PREFIX:
    if (!json_is_string(v)) type_error(c, label, "a string", v, secret);
    else out = check_prefix(c, label, json_string_value(v));
    break;
  case AK_OPT_MAP:
    if (!json_is_null(v) && !json_is_object(v)) type_error(c, label, "a mapping", v, secret);
    else out = check_map(c, row->children, json_is_null(v) ? NULL : v, path);
    break;
  case AK_OPT_ANY_MAP: {
    if (!json_is_null(v) && !json_is_object(v)) {
      type_error(c, label, "a mapping", v, secret);
      break;
    }
    size_t errs = c->n;
    json_t *m = json_object();
    const char *k;
    json_t *item;
    json_object_foreach(v, k, item) {
      char *ip = path_key(path, k);
      json_t *iv = (interp && json_is_string(item)) ? interpolate(c, item, ip, secret) : json_incref(item);
      char *t = iv ? as_text(iv) : NULL;
      if (iv && !t) type_error(c, ip, "a string", iv, secret);
      if (t) json_object_set_new(m, k, json_string(t));
      free(t);
      json_decref(iv);
      free(ip);
    }
    if (c->n == errs) out = m;
    else json_decref(m);
    break;
  }
  case AK_OPT_MAP_OF:
    out = check_map_of(c, row, v, path);
    break;
  case AK_OPT_MAP_OR_NAME:
    if (json_is_string(v)) {
      /* checked under the key the user wrote, not under the child it stands for */
      if (check_enum_word(c, &row->children[0], label, json_string_value(v))) {
        json_t *m = json_pack("{s:O}", row->children[0].key, v);
        out = check_map(c, row->children, m, path);
        json_decref(m);
      }
    } else if (json_is_object(v)) {
      out = check_map(c, row->children, v, path);
    } else if (!json_is_null(v)) { /* null: as if absent */
      type_error(c, label, "a name or a mapping", v, secret);
    }
    break;
  case AK_OPT_VERIFIER:
    if (!json_is_null(v) && !json_is_object(v)) type_error(c, label, "a mapping", v, secret);
    else out = check_verifier(c, row, v, path);
    break;
  case AK_OPT_SINK_LIST:
    out = check_sink_list(c, v, path, label);
    break;
  case AK_OPT_LIST_OF:
    out = check_list_of(c, row, v, path, label);
    break;
  case AK_OPT_STRLIST:
  case AK_OPT_SECRETS:
    break; /* handled above, before interpolation of the whole value */
  }
done:
  free(text);
  json_decref(own);
  return out;
}

/* The value of a key the file does not set (nor the environment). */
static json_t *default_value(vctx_t *c, const ak_opt_t *row, const char *path, const char *parent) {
  if (row->flags & AK_OPTF_REQUIRED) {
    if (*parent) verr(c, "%s: missing required key \"%s\"", parent, row->key);
    else verr(c, "missing required key \"%s\"", row->key);
    return NULL;
  }
  if (row->flags & AK_OPTF_UNSUPPORTED) return NULL;
  switch (row->type) {
  case AK_OPT_MAP: /* a nullable section (http.tls) is off, and left out, unless written */
    return (row->flags & AK_OPTF_NULLABLE) ? NULL : check_map(c, row->children, NULL, path);
  case AK_OPT_MAP_OF: return json_object();
  case AK_OPT_LIST_OF: return json_array();
  case AK_OPT_VERIFIER: return json_pack("{s:s}", "type", "none");
  case AK_OPT_ANY_MAP: return row->def ? NULL : json_object();
  default: break;
  }
  if (!row->def) return (row->flags & AK_OPTF_NULLABLE) ? json_null() : NULL;
  const char *d = row->def;
  size_t dl = strlen(d);
  json_t *dv = (row->type == AK_OPT_STRLIST && dl >= 2 && d[0] == '[' && d[dl - 1] == ']')
                 ? json_stringn(d + 1, dl - 2)
                 : json_string(d);
  json_t *out = dv ? check_value(c, row, dv, path, path, false) : NULL;
  json_decref(dv);
  return out;
}

/* A mapping checked against rows: file keys in file order (so errors come in document
 * order), then environment overrides, then defaults; emitted in row order. */
static json_t *check_map(vctx_t *c, const ak_opt_t *rows, json_t *obj, const char *path) {
  size_t n = row_count(rows);
  json_t **vals = calloc(n + 1, sizeof *vals);
  bool *seen = calloc(n + 1, sizeof *seen);
  const char **ovr = calloc(n + 1, sizeof *ovr);
  char (*ovr_name)[64] = calloc(n + 1, sizeof *ovr_name);
  if (!vals || !seen || !ovr || !ovr_name) {
    verr(c, "%s: out of memory", path);
    free(vals);
    free(seen);
    free(ovr);
    free(ovr_name);
    return NULL;
  }
  for (size_t i = 0; i < n; i++)
    if (rows[i].env) ovr[i] = env_override(c->env, rows[i].env, ovr_name[i], sizeof ovr_name[i]);
  if (obj) {
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v) {
      size_t i;
      if (!row_find(rows, k, &i)) {
        json_t *tmp = json_string(k);
        char *r = render(tmp, false);
        if (*path) verr(c, "%s: unknown key %s", path, r ? r : "?");
        else verr(c, "unknown key %s", r ? r : "?");
        free(r);
        json_decref(tmp);
        continue;
      }
      seen[i] = true;
      if (ovr[i]) continue; /* the environment beats the file */
      char *cp = path_key(path, k);
      vals[i] = check_value(c, &rows[i], v, cp, cp, true);
      free(cp);
    }
  }
  for (size_t i = 0; i < n; i++) {
    char *cp = path_key(path, rows[i].key);
    if (ovr[i]) {
      char *label = xasprintf("%s (from %s)", cp, ovr_name[i]);
      json_t *ev = json_string(ovr[i]);
      if (!ev) verr(c, "%s: not valid UTF-8", label);
      else vals[i] = check_value(c, &rows[i], ev, cp, label, false);
      json_decref(ev);
      free(label);
    } else if (!seen[i]) {
      vals[i] = default_value(c, &rows[i], cp, path);
    }
    free(cp);
  }
  json_t *out = json_object();
  for (size_t i = 0; i < n; i++)
    if (vals[i]) json_object_set_new(out, rows[i].key, vals[i]);
  free(vals);
  free(seen);
  free(ovr);
  free(ovr_name);
  /* Partial on error: the load fails anyway, but the cross-key rules can still look at
   * the keys that were fine (http.routing next to a bad http.port). */
  return out;
}

/* http.tls.client_cert defaults to request when client_ca is set, else none. Asking for
 * a certificate needs the bundle it is checked against. True when the TLS listener asks
 * for a client certificate (what a client_cert source needs). http.tls absent or null =
 * no listener. */
static bool check_tls(vctx_t *c, json_t *http) {
  json_t *tls = json_object_get(http, "tls");
  bool has_ca = json_is_string(json_object_get(tls, "client_ca"));
  const char *mode = "none";
  if (json_is_object(tls)) {
    json_t *m = json_object_get(tls, "client_cert");
    if (json_is_null(m)) json_object_set_new(tls, "client_cert", json_string(has_ca ? "request" : "none"));
    mode = json_string_value(json_object_get(tls, "client_cert"));
    if (!mode) return false;
    if (strcmp(mode, "none") && !has_ca)
      verr(c, "http.tls.client_cert: \"%s\" needs http.tls.client_ca (the CA bundle client certificates "
              "are checked against)", mode);
  }
  return strcmp(mode, "none") && has_ca;
}

/* An integer the schema pass accepted; false when that key failed (the tree is partial
 * then, and its own error is already reported). */
static bool int_at(const json_t *obj, const char *key, int64_t *out) {
  const json_t *v = json_object_get(obj, key);
  if (!json_is_integer(v)) return false;
  *out = json_integer_value(v);
  return true;
}

/* The scheduler keeps these in an int. */
static void check_int_range(vctx_t *c, const json_t *obj, const char *key, const char *label) {
  int64_t v;
  if (int_at(obj, key, &v) && v > INT_MAX)
    verr(c, "%s must be at most %d, got %lld", label, INT_MAX, (long long)v);
}

/* Keys bounded by another key of dispatch, and the tenant window: a null resolves to a
 * share of the node's window, so that one tenant whose sink is slow cannot hold every
 * claim and slot of the node; an explicit value may not exceed the node's own. */
static void check_dispatch(vctx_t *c, json_t *d) {
  if (!json_is_object(d)) return;
  int64_t conc = 0, v = 0, lo = 0;
  bool have_conc = int_at(d, "concurrency", &conc);
  if (have_conc && int_at(d, "sink_concurrency", &v) && v > conc)
    verr(c, "dispatch.sink_concurrency must be between 1 and %lld (dispatch.concurrency), got %lld",
         (long long)conc, (long long)v);
  check_int_range(c, d, "breaker_failures", "dispatch.breaker_failures");
  if (int_at(d, "breaker_open_ms", &lo) && int_at(d, "breaker_max_open_ms", &v) && v < lo)
    verr(c, "dispatch.breaker_max_open_ms must be at least %lld (dispatch.breaker_open_ms), got %lld",
         (long long)lo, (long long)v);
  json_t *retry = json_object_get(d, "retry");
  if (int_at(retry, "base_ms", &lo) && int_at(retry, "max_ms", &v) && v < lo)
    verr(c, "dispatch.retry.max_ms must be at least %lld (dispatch.retry.base_ms), got %lld",
         (long long)lo, (long long)v);
  check_int_range(c, retry, "max_attempts", "dispatch.retry.max_attempts");

  json_t *tenants = json_object_get(d, "tenants");
  if (!json_is_object(tenants)) return;
  static const struct { const char *key; int64_t div; } share[] = {
    {"max_inflight", 4}, {"max_inflight_bytes", 4}, {"concurrency", 2},
  };
  for (size_t i = 0; i < sizeof share / sizeof share[0]; i++) {
    int64_t global;
    if (!int_at(d, share[i].key, &global)) continue;
    json_t *tv = json_object_get(tenants, share[i].key);
    if (json_is_null(tv)) {
      int64_t derived = global / share[i].div;
      json_object_set_new(tenants, share[i].key, json_integer(derived < 1 ? 1 : derived));
    } else if (int_at(tenants, share[i].key, &v) && v > global) {
      verr(c, "dispatch.tenants.%s must be between 1 and %lld (dispatch.%s), got %lld", share[i].key,
           (long long)global, share[i].key, (long long)v);
    }
  }
}

/* The guard egress.* describes, or NULL after reporting (or when the section failed). */
static ak_egress_t *check_egress(vctx_t *c, const json_t *eg) {
  const json_t *list = json_object_get(eg, "allow_cidrs");
  const json_t *http = json_object_get(eg, "allow_http");
  if (!json_is_array(list) || !json_is_boolean(http)) return NULL;
  size_t n = json_array_size(list);
  const char **cidrs = calloc(n + 1, sizeof *cidrs);
  if (!cidrs) {
    verr(c, "egress: out of memory");
    return NULL;
  }
  for (size_t i = 0; i < n; i++) cidrs[i] = json_string_value(json_array_get(list, i));
  char why[192];
  ak_egress_t *g = ak_egress_new(cidrs, n, json_is_true(http), why, sizeof why);
  if (!g) verr(c, "%s", why); /* "egress.allow_cidrs[1]: ..." */
  free(cidrs);
  return g;
}

/* A static http sink whose URL the guard can never let through refuses the boot, so
 * the mistake shows in check-config instead of as dead letters. The URL is never
 * echoed: it may carry credentials. Names are not resolved here: what a name points at
 * can change, and the sink judges the address it connects to. */
static void check_http_url(vctx_t *c, const char *label, const char *url, const ak_egress_t *g) {
  CURLU *h = curl_url();
  char *scheme = NULL, *host = NULL;
  if (!h) {
    verr(c, "%s: out of memory", label);
    return;
  }
  CURLUcode rc = curl_url_set(h, CURLUPART_URL, url, 0);
  if (rc != CURLUE_OK) {
    verr(c, "%s: not a valid URL (%s)", label, curl_url_strerror(rc));
    goto done;
  }
  if (!g) goto done; /* egress.* is broken: its own error says so */
  curl_url_get(h, CURLUPART_SCHEME, &scheme, 0);
  char why[128];
  if (!scheme || (strcmp(scheme, "https") && strcmp(scheme, "http"))) {
    verr(c, "%s: only https:// (or http:// with egress.allow_http) URLs are allowed", label);
    goto done;
  }
  if (!ak_egress_url_allowed(g, url, why, sizeof why)) {
    if (!strcmp(scheme, "http"))
      verr(c, "%s: http:// is refused; use https:// or set egress.allow_http: true", label);
    else
      verr(c, "%s: %s", label, why);
    goto done;
  }
  if (curl_url_get(h, CURLUPART_HOST, &host, 0) != CURLUE_OK || !host) goto done;
  char lit[INET6_ADDRSTRLEN + 2];
  size_t hl = strlen(host);
  if (host[0] == '[' && hl >= 2 && hl - 2 < sizeof lit) {
    memcpy(lit, host + 1, hl - 2);
    lit[hl - 2] = '\0';
    char *zone = strchr(lit, '%');
    if (zone) *zone = '\0';
  } else if (hl < sizeof lit) {
    memcpy(lit, host, hl + 1);
  } else {
    goto done;
  }
  struct sockaddr_in6 sa6 = {.sin6_family = AF_INET6};
  struct sockaddr_in sa4 = {.sin_family = AF_INET};
  const struct sockaddr *sa = NULL;
  if (inet_pton(AF_INET, lit, &sa4.sin_addr) == 1) sa = (const struct sockaddr *)&sa4;
  else if (inet_pton(AF_INET6, lit, &sa6.sin6_addr) == 1) sa = (const struct sockaddr *)&sa6;
  if (sa && !ak_egress_addr_allowed(g, sa)) {
    ak_egress_refusal(sa, why, sizeof why);
    verr(c, "%s: %s (egress.allow_cidrs can allow it)", label, why);
  }
done:
  curl_free(scheme);
  curl_free(host);
  curl_url_cleanup(h);
}

static bool header_token(const char *n) {
  if (!*n) return false;
  for (const char *p = n; *p; p++)
    if (!(isalnum((unsigned char)*p) || strchr("!#$%&'*+-.^_`|~", *p))) return false;
  return true;
}

/* forward_headers: names are compared lowercased everywhere, so they are stored that
 * way; a name written twice counts once. */
static void check_forward_headers(vctx_t *c, const char *id, json_t *src) {
  json_t *list = json_object_get(src, "forward_headers");
  if (!json_is_array(list)) return;
  json_t *out = json_array();
  size_t i;
  json_t *item;
  bool bad = false;
  json_array_foreach(list, i, item) {
    const char *name = json_string_value(item);
    if (!name || !*name) {
      verr(c, "sources.%s.forward_headers[%zu]: must not be empty", id, i);
      bad = true;
      continue;
    }
    if (!header_token(name)) {
      char *r = render(item, false);
      verr(c, "sources.%s.forward_headers[%zu]: %s is not a header name", id, i, r ? r : "?");
      free(r);
      bad = true;
      continue;
    }
    char *low = strdup(name);
    if (!low) continue;
    for (char *p = low; *p; p++) *p = (char)tolower((unsigned char)*p);
    strlist_add(out, low);
    free(low);
  }
  if (!bad) json_object_set(src, "forward_headers", out);
  json_decref(out);
}

/* sources.<id>.dedupe names exactly one place for the key. A header is stored
 * lowercased (looked up in any case); a json path is object keys joined by dots. */
static void check_dedupe(vctx_t *c, const char *id, json_t *src) {
  json_t *d = json_object_get(src, "dedupe");
  if (!json_is_object(d)) return;
  static const char *const where[] = {"preset", "header", "json"};
  int n = 0;
  for (size_t i = 0; i < 3; i++) n += json_is_string(json_object_get(d, where[i]));
  if (n != 1) {
    verr(c, "sources.%s.dedupe: set exactly one of preset, header or json", id);
    return;
  }
  json_t *h = json_object_get(d, "header");
  if (json_is_string(h)) {
    if (!header_token(json_string_value(h))) {
      char *r = render(h, false);
      verr(c, "sources.%s.dedupe.header: %s is not a header name", id, r ? r : "?");
      free(r);
      return;
    }
    char *low = strdup(json_string_value(h));
    if (!low) return;
    for (char *p = low; *p; p++) *p = (char)tolower((unsigned char)*p);
    json_object_set_new(d, "header", json_string(low));
    free(low);
  }
  const char *j = json_string_value(json_object_get(d, "json"));
  if (j && (j[0] == '.' || j[strlen(j) - 1] == '.' || strstr(j, ".."))) {
    char *r = render(json_object_get(d, "json"), false);
    verr(c, "sources.%s.dedupe.json: %s has an empty segment; expected object keys joined by dots "
            "(data.object.id)", id, r ? r : "?");
    free(r);
  }
}

/* The http sink's own keys that the sink would refuse only when created: refused here,
 * so check-config reports them. Header values are never echoed (they are secret). */
static void check_http_sink(vctx_t *c, const char *id, size_t i, const json_t *sink, const ak_egress_t *g) {
  char label[160];
  const char *url = json_string_value(json_object_get(sink, "url"));
  snprintf(label, sizeof label, "sources.%s.sinks[%zu].url", id, i);
  if (url) check_http_url(c, label, url, g);
  const char *name;
  json_t *v;
  json_object_foreach((json_t *)json_object_get(sink, "headers"), name, v) {
    const char *val = json_string_value(v);
    if (!header_token(name)) {
      json_t *tmp = json_string(name);
      char *r = tmp ? render(tmp, false) : NULL;
      verr(c, "sources.%s.sinks[%zu].headers: %s is not a header name", id, i, r ? r : "?");
      free(r);
      json_decref(tmp);
    } else if (val && strpbrk(val, "\r\n")) {
      verr(c, "sources.%s.sinks[%zu].headers.%s: a header value cannot hold a line break", id, i, name);
    }
  }
}

/* rate_limits, admission and the tenant share of the writer queue. The schema pass
 * checked types; here: the pairing rules of an entry (core/ratelimit.c), rates > 0, the
 * proxies' CIDRs, and a null share resolved to a quarter of the queue (the same share
 * dispatch.tenants gives one tenant of the dispatch window). */
/* True when the schema pass already reported something under label: its partial entry
 * would only repeat that error as a missing key. */
static bool reported_under(const vctx_t *c, const char *label) {
  size_t n = strlen(label);
  for (size_t i = 0; i < c->n; i++)
    if (c->lines[i] && !strncmp(c->lines[i], label, n) && strchr(".: ", c->lines[i][n])) return true;
  return false;
}

static void report_entry(vctx_t *c, const char *label, const json_t *entry) {
  ak_ratelimit_t rl;
  char field[96], msg[96];
  if (reported_under(c, label) || ak_ratelimit_parse(entry, &rl, field, sizeof field, msg, sizeof msg) == 0)
    return;
  if (!strcmp(msg, "missing required key")) verr(c, "%s: missing required key \"%s\"", label, field);
  else if (*field) verr(c, "%s.%s %s", label, field, msg);
  else verr(c, "%s %s", label, msg);
}

static void report_lane(vctx_t *c, const char *label, const json_t *lane) {
  ak_rate_t r;
  char field[32], msg[96];
  if (!json_is_object(lane) || reported_under(c, label) ||
      ak_ratelimit_parse_rate(lane, &r, field, sizeof field, msg, sizeof msg) == 0)
    return;
  verr(c, "%s.%s %s", label, field, msg);
}

/* Limits that are off show as null in print-config (in schema order), so an operator
 * sees every knob; http.tls stays left out because its absence is the documented off. */
static void show_off_limits(json_t *obj, const ak_opt_t *rows) {
  if (!json_is_object(obj)) return;
  json_t *out = json_object();
  for (size_t i = 0; rows[i].key; i++) {
    json_t *v = json_object_get(obj, rows[i].key);
    if (!v && rows[i].type == AK_OPT_MAP && (rows[i].flags & AK_OPTF_NULLABLE)) v = json_null();
    if (v) json_object_set(out, rows[i].key, v);
  }
  json_object_clear(obj);
  json_object_update(obj, out);
  json_decref(out);
}

static void check_limits(vctx_t *c, json_t *eff) {
  json_t *rl = json_object_get(eff, "rate_limits");
  show_off_limits(rl, rate_limits_rows);
  show_off_limits(json_object_get(eff, "admission"), admission_rows);
  json_t *def = json_object_get(rl, "default");
  if (json_is_object(def)) report_entry(c, "rate_limits.default", def);
  const char *t;
  json_t *e;
  json_object_foreach(json_object_get(rl, "tenants"), t, e) {
    char label[128];
    snprintf(label, sizeof label, "rate_limits.tenants.%s", t);
    report_entry(c, label, e);
  }
  json_t *adm = json_object_get(eff, "admission");
  static const char *const lanes[] = {"per_ip", "node", "source_bytes"};
  for (size_t i = 0; i < sizeof lanes / sizeof lanes[0]; i++) {
    char label[64];
    snprintf(label, sizeof label, "admission.%s", lanes[i]);
    report_lane(c, label, json_object_get(adm, lanes[i]));
  }
  size_t i;
  json_t *item;
  json_array_foreach(json_object_get(adm, "trusted_proxies"), i, item) {
    ak_cidr_t cidr;
    const char *why = NULL;
    if (!ak_netaddr_parse_cidr(json_string_value(item), &cidr, &why)) {
      char *r = render(item, false);
      verr(c, "admission.trusted_proxies[%zu]: %s %s", i, r ? r : "?", why);
      free(r);
    }
  }
  json_t *b = json_object_get(eff, "batcher");
  static const char *const share[][2] = {{"tenant_max_queue", "max_queue"},
                                         {"tenant_max_queue_bytes", "max_queue_bytes"}};
  for (size_t k = 0; k < 2 && json_is_object(b); k++) {
    int64_t global, v;
    if (!int_at(b, share[k][1], &global)) continue;
    json_t *tv = json_object_get(b, share[k][0]);
    if (json_is_null(tv)) json_object_set_new(b, share[k][0], json_integer(global / 4 < 1 ? 1 : global / 4));
    else if (int_at(b, share[k][0], &v) && v > global)
      verr(c, "batcher.%s must be between 1 and %lld (batcher.%s), got %lld", share[k][0], (long long)global,
           share[k][1], (long long)v);
  }
}

static bool is_sha256_hex(const char *s) {
  size_t n = 0;
  for (; s[n]; n++)
    if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f'))) return false;
  return n == 64;
}

/* 127.0.0.0/8, ::1 and ::ffff:127.0.0.0/104. */
static bool is_loopback(const char *ip) {
  unsigned char b[16];
  if (inet_pton(AF_INET, ip, b) == 1) return b[0] == 127;
  if (inet_pton(AF_INET6, ip, b) != 1) return false;
  static const unsigned char one[16] = {[15] = 1}, mapped[12] = {[10] = 0xff, [11] = 0xff};
  return !memcmp(b, one, 16) || (!memcmp(b, mapped, 12) && b[12] == 127);
}

/* admin.principals: the hash is a real SHA-256 text (a token pasted by mistake is refused
 * without being echoed), names and tokens are unique (the actor of an audit row must name
 * one principal), tenants are "*" alone or ids. With none, the API is unauthenticated, so
 * it may only be reachable from this host. */
static void check_admin(vctx_t *c, json_t *eff) {
  json_t *admin = json_object_get(eff, "admin");
  json_t *ps = json_object_get(admin, "principals");
  size_t i, j;
  json_t *p, *q;
  json_array_foreach(ps, i, p) {
    const char *name = json_string_value(json_object_get(p, "name"));
    const char *h = json_string_value(json_object_get(p, "token_sha256"));
    if (h && !is_sha256_hex(h))
      verr(c, "admin.principals[%zu].token_sha256: expected 64 lowercase hex digits (the SHA-256 of the token, "
              "never the token itself)", i);
    for (j = 0; j < i && (q = json_array_get(ps, j)); j++) {
      const char *n2 = json_string_value(json_object_get(q, "name"));
      const char *h2 = json_string_value(json_object_get(q, "token_sha256"));
      if (name && n2 && !strcmp(name, n2))
        verr(c, "admin.principals[%zu].name: \"%s\" is already admin.principals[%zu]", i, name, j);
      if (h && h2 && !strcmp(h, h2))
        verr(c, "admin.principals[%zu].token_sha256: the same token as admin.principals[%zu]", i, j);
    }
    json_t *ts = json_object_get(p, "tenants");
    size_t k;
    json_t *t;
    json_array_foreach(ts, k, t) {
      const char *tv = json_string_value(t);
      if (!tv) continue;
      if (!strcmp(tv, "*")) {
        if (json_array_size(ts) > 1) verr(c, "admin.principals[%zu].tenants: \"*\" stands alone (every tenant)", i);
      } else if (!is_id(tv)) {
        char *r = render(t, false);
        verr(c, "admin.principals[%zu].tenants[%zu]: invalid tenant id %s; expected \"*\" or " ID_PATTERN, i, k,
             r ? r : "?");
        free(r);
      }
    }
  }
  const char *ip = json_string_value(json_object_get(admin, "ip"));
  if (json_array_size(ps) == 0 && !reported_under(c, "admin.principals") &&
      json_is_true(json_object_get(admin, "enabled")) && ip && !is_loopback(ip))
    verr(c, "admin.ip: %s is not a loopback address; without admin.principals the admin API has no "
            "authentication and listens on loopback only (127.0.0.1, ::1): add admin.principals or bind "
            "127.0.0.1", ip);
}

/* What the rules of one source depend on outside it. */
typedef struct {
  const ak_egress_t *guard;   /* NULL when egress.* is broken (its own error says so) */
  bool tenant_path;           /* http.routing tenant_path */
  bool tls_asks;              /* the TLS listener asks for client certificates */
  bool stored;                /* a source read back from the store: the trust rule warns */
  char *warning;              /* set by the trust rule of a stored source */
} source_env_t;

/* The rules of one source across its keys, on its checked mapping (the schema pass
 * already ran): the same for a source of the config file and one sent to the admin API. */
static void check_source(vctx_t *c, const char *id, json_t *s, source_env_t *x) {
  check_forward_headers(c, id, s);
  check_dedupe(c, id, s);
  size_t i;
  json_t *sink;
  json_array_foreach(json_object_get(s, "sinks"), i, sink) {
    const char *type = json_string_value(json_object_get(sink, "type"));
    if (type && !strcmp(type, "http")) check_http_sink(c, id, i, sink, x->guard);
  }
  char label[128];
  snprintf(label, sizeof label, "sources.%s.admission_bytes", id);
  report_lane(c, label, json_object_get(s, "admission_bytes"));
  const char *vt = json_string_value(json_object_get(json_object_get(s, "verify"), "type"));
  if (vt && !strcmp(vt, "client_cert") && !x->tls_asks)
    verr(c, "sources.%s.verify: type client_cert needs http.tls with a client_ca (and client_cert "
            "request or require): no request could ever pass", id);
  const char *tenant = json_string_value(json_object_get(s, "tenant"));
  bool trust = json_is_true(json_object_get(s, "trust_url_tenant"));
  if (x->tenant_path && tenant && !strcmp(tenant, "default") && vt && !strcmp(vt, "none") && !trust) {
    static const char rule[] = "a shared source (tenant \"default\") with no verifier under tenant_path "
                               "routing lets any URL tenant file hooks; set trust_url_tenant: true to allow it";
    if (x->stored) {
      free(x->warning);
      x->warning = xasprintf("sources.%s: %s", id, rule);
    } else {
      verr(c, "sources.%s: %s", id, rule);
    }
  }
}

/* source_store.type: null resolves to redis when a url is set (Ankusa's rule), else
 * static; the redis-only keys are refused on the other types. */
static void check_source_store(vctx_t *c, json_t *ss) {
  if (!json_is_object(ss)) return;
  json_t *type = json_object_get(ss, "type");
  bool has_url = json_is_string(json_object_get(ss, "url"));
  if (json_is_null(type)) json_object_set_new(ss, "type", json_string(has_url ? "redis" : "static"));
  const char *t = json_string_value(json_object_get(ss, "type"));
  if (!t) return;
  if (!strcmp(t, "redis")) {
    verr(c, "source_store.type: \"redis\" is not supported yet%s; use static or persistent",
         json_is_null(type) ? " (a url without a type means redis)" : "");
    return;
  }
  static const char *const redis_only[] = {"url", "namespace", "tick_ms"};
  for (size_t i = 0; i < sizeof redis_only / sizeof redis_only[0]; i++)
    if (!json_is_null(json_object_get(ss, redis_only[i])) && json_object_get(ss, redis_only[i]))
      verr(c, "source_store.%s: only valid with type redis, not %s", redis_only[i], t);
}

/* Rules across keys, run on the checked tree. */
static void check_cross(vctx_t *c, json_t *eff) {
  check_admin(c, eff);
  check_dispatch(c, json_object_get(eff, "dispatch"));
  check_limits(c, eff);
  ak_egress_t *guard = check_egress(c, json_object_get(eff, "egress"));
  json_t *http = json_object_get(eff, "http");
  const char *routing = json_string_value(json_object_get(http, "routing"));
  source_env_t x = {.guard = guard, .tenant_path = routing && !strcmp(routing, "tenant_path"),
                    .tls_asks = check_tls(c, http)};
  const char *sid;
  json_t *s;
  json_object_foreach(json_object_get(eff, "sources"), sid, s) check_source(c, sid, s, &x);
  ak_egress_free(guard);
  json_t *qrate = json_object_get(json_object_get(eff, "quarantine"), "rate");
  if (qrate && json_is_number(qrate) && !(json_number_value(qrate) > 0))
    verr(c, "quarantine.rate must be positive, got %g", json_number_value(qrate));
  check_source_store(c, json_object_get(eff, "source_store"));
}

/* ---------------------------------------------------------- typed configuration ---- */

static int enum_of(const ak_opt_t *rows, const char *key, const json_t *section) {
  const ak_opt_t *row = row_find(rows, key, NULL);
  const char *v = json_string_value(json_object_get(section, key));
  int i = (row && v) ? list_index(row->enum_vals, v) : -1;
  return i < 0 ? 0 : i;
}

static int64_t int_of(const json_t *section, const char *key) {
  return json_integer_value(json_object_get(section, key));
}

static char *str_of(const json_t *section, const char *key) {
  const char *s = json_string_value(json_object_get(section, key));
  return strdup(s ? s : "");
}

static const char *const role_names[] = {"edge", "dispatch", "storage", "claim_check"};

/* What each dedupe preset reads. */
static const struct {
  const char *name;
  ak_dedupe_from_t from;
  const char *field;
} dedupe_presets[] = {
  {"github", AK_DEDUPE_HEADER, "x-github-delivery"},
  {"standard_webhooks", AK_DEDUPE_HEADER, "webhook-id"},
  {"svix", AK_DEDUPE_HEADER, "svix-id"},
  {"shopify", AK_DEDUPE_HEADER, "x-shopify-webhook-id"},
  {"stripe", AK_DEDUPE_JSON, "id"},
};

static int build_dedupe(ak_source_cfg_t *s, const json_t *d) {
  if (!json_is_object(d)) return 0;
  const char *preset = json_string_value(json_object_get(d, "preset"));
  const char *header = json_string_value(json_object_get(d, "header"));
  const char *path = json_string_value(json_object_get(d, "json"));
  const char *field = NULL;
  s->dedupe_from = header ? AK_DEDUPE_HEADER : AK_DEDUPE_JSON;
  field = header ? header : path;
  for (size_t i = 0; preset && i < sizeof dedupe_presets / sizeof dedupe_presets[0]; i++)
    if (!strcmp(preset, dedupe_presets[i].name)) {
      s->dedupe_from = dedupe_presets[i].from;
      field = dedupe_presets[i].field;
    }
  if (!field) {
    s->dedupe_from = AK_DEDUPE_NONE;
    return 0;
  }
  s->dedupe_ttl_ms = int_of(d, "ttl_seconds") * 1000;
  return (s->dedupe_field = strdup(field)) ? 0 : -1;
}

/* A NULL-terminated copy of a list of strings (nothing when list is not an array). */
static int strlist_dup(const json_t *list, char ***out, size_t *n) {
  *out = NULL;
  *n = 0;
  if (!json_is_array(list)) return 0;
  size_t len = json_array_size(list);
  char **v = calloc(len + 1, sizeof *v);
  if (!v) return -1;
  *out = v;
  for (size_t i = 0; i < len; i++) {
    const char *s = json_string_value(json_array_get(list, i));
    if (!(v[i] = strdup(s ? s : ""))) return -1;
    *n = i + 1;
  }
  return 0;
}

static void strlist_free(char **v, size_t n) {
  for (size_t i = 0; v && i < n; i++) free(v[i]);
  free(v);
}

static int build_typed(ak_config_t *cfg) {
  json_t *e = cfg->effective;
  json_t *node = json_object_get(e, "node"), *log = json_object_get(e, "log"),
         *http = json_object_get(e, "http"), *admin = json_object_get(e, "admin"),
         *batcher = json_object_get(e, "batcher"), *wal = json_object_get(e, "wal"),
         *sources = json_object_get(e, "sources");
  size_t i;
  json_t *item;
  json_array_foreach(json_object_get(node, "roles"), i, item) {
    for (size_t r = 0; r < sizeof role_names / sizeof role_names[0]; r++)
      if (!strcmp(json_string_value(item), role_names[r])) cfg->roles |= 1u << r;
  }
  cfg->data_dir = str_of(node, "data_dir");
  cfg->min_free_bytes = int_of(node, "min_free_bytes");
  cfg->store_headers = json_object_get(e, "store_headers");
  cfg->log_level = (ak_log_level_t)enum_of(log_rows, "level", log);
  cfg->http_port = (int)int_of(http, "port");
  cfg->http_max_body_bytes = int_of(http, "max_body_bytes");
  cfg->http_routing = (ak_routing_t)enum_of(http_rows, "routing", http);
  cfg->http_prefix = str_of(http, "prefix");
  json_t *tls = json_object_get(http, "tls");
  cfg->http_tls_enabled = json_is_object(tls); /* the PEM texts: ak_tls_load_files() */
  cfg->http_tls_port = (int)int_of(tls, "port");
  cfg->http_tls_client_cert_mode = (ak_tls_client_cert_t)enum_of(http_tls_rows, "client_cert", tls);
  cfg->admin_enabled = json_is_true(json_object_get(admin, "enabled"));
  cfg->admin_ip = str_of(admin, "ip");
  cfg->admin_port = (int)int_of(admin, "port");
  cfg->admin_gauge_interval_ms = int_of(admin, "gauge_interval_ms");
  cfg->admin_principals = json_object_get(admin, "principals");
  cfg->audit_retention_days = int_of(json_object_get(e, "audit"), "retention_days");
  cfg->batcher_partitions = int_of(batcher, "partitions");
  cfg->batcher_max_batch = int_of(batcher, "max_batch");
  cfg->batcher_max_delay_ms = int_of(batcher, "max_delay_ms");
  cfg->batcher_max_queue = int_of(batcher, "max_queue");
  cfg->batcher_max_queue_bytes = int_of(batcher, "max_queue_bytes");
  cfg->batcher_tenant_max_queue = int_of(batcher, "tenant_max_queue"); /* resolved by check_limits */
  cfg->batcher_tenant_max_queue_bytes = int_of(batcher, "tenant_max_queue_bytes");
  cfg->wal_type = (ak_wal_type_t)enum_of(wal_rows, "type", wal);
  json_t *quarantine = json_object_get(e, "quarantine");
  cfg->quarantine_burst = int_of(quarantine, "burst");
  cfg->quarantine_rate = json_number_value(json_object_get(quarantine, "rate"));
  cfg->quarantine_max_bytes = int_of(quarantine, "max_bytes");
  json_t *dedupe = json_object_get(e, "dedupe");
  cfg->dedupe_max_entries = int_of(dedupe, "max_entries");
  cfg->dedupe_max_entries_per_tenant = int_of(dedupe, "max_entries_per_tenant");
  cfg->dedupe_sweep_interval_ms = int_of(dedupe, "sweep_interval_ms");
  json_t *d = json_object_get(e, "dispatch"), *retry = json_object_get(d, "retry"),
         *tenants = json_object_get(d, "tenants");
  cfg->dispatch_batch = int_of(d, "batch");
  cfg->dispatch_concurrency = int_of(d, "concurrency");
  cfg->dispatch_max_inflight = int_of(d, "max_inflight");
  cfg->dispatch_max_inflight_bytes = int_of(d, "max_inflight_bytes");
  cfg->dispatch_attempt_timeout_ms = int_of(d, "attempt_timeout_ms");
  cfg->dispatch_sink_concurrency = int_of(d, "sink_concurrency"); /* null reads as 0 */
  cfg->dispatch_breaker_failures = int_of(d, "breaker_failures");
  cfg->dispatch_breaker_open_ms = int_of(d, "breaker_open_ms");
  cfg->dispatch_breaker_max_open_ms = int_of(d, "breaker_max_open_ms");
  cfg->dispatch_retry_base_ms = int_of(retry, "base_ms");
  cfg->dispatch_retry_max_ms = int_of(retry, "max_ms");
  cfg->dispatch_retry_max_attempts = int_of(retry, "max_attempts");
  cfg->dispatch_retry_jitter = json_is_true(json_object_get(retry, "jitter"));
  cfg->dispatch_tenant_max_inflight = int_of(tenants, "max_inflight"); /* resolved by check_dispatch */
  cfg->dispatch_tenant_max_inflight_bytes = int_of(tenants, "max_inflight_bytes");
  cfg->dispatch_tenant_concurrency = int_of(tenants, "concurrency");
  json_t *egress = json_object_get(e, "egress");
  cfg->egress_allow_http = json_is_true(json_object_get(egress, "allow_http"));
  if (strlist_dup(json_object_get(egress, "allow_cidrs"), &cfg->egress_allow_cidrs, &cfg->egress_nallow_cidrs) < 0)
    return -1;
  if (!cfg->data_dir || !cfg->http_prefix || !cfg->admin_ip) return -1;

  const char *store_type = json_string_value(json_object_get(json_object_get(e, "source_store"), "type"));
  cfg->source_store_persistent = store_type && !strcmp(store_type, "persistent");
  size_t n = json_object_size(sources);
  cfg->sources = calloc(n ? n : 1, sizeof *cfg->sources);
  if (!cfg->sources) return -1;
  const char *id;
  json_t *src;
  json_object_foreach(sources, id, src) { /* already sorted by id */
    if (ak_config_source_build(id, src, &cfg->sources[cfg->nsources]) < 0) return -1;
    cfg->nsources++;
  }
  return 0;
}

int ak_config_source_build(const char *id, const json_t *src, ak_source_cfg_t *s) {
  memset(s, 0, sizeof *s);
  size_t i;
  json_t *item;
  json_t *verify = json_object_get(src, "verify");
  json_t *sinks = json_object_get(src, "sinks");
  s->id = strdup(id);
  s->tenant = str_of(src, "tenant");
  s->on_verify_failure = (ak_on_verify_failure_t)enum_of(source_rows, "on_verify_failure", src);
  s->verify_type = str_of(verify, "type");
  s->verify = (s->verify_type && strcmp(s->verify_type, "none")) ? json_incref(verify) : NULL;
  s->trust_url_tenant = json_is_true(json_object_get(src, "trust_url_tenant"));
  json_t *fwd = json_object_get(src, "forward_headers");
  s->forward_default = !json_is_array(fwd);
  s->sinks = calloc(json_array_size(sinks) + 1, sizeof *s->sinks);
  if (!s->id || !s->tenant || !s->verify_type || !s->sinks ||
      strlist_dup(fwd, &s->forward_headers, &s->nforward_headers) < 0 ||
      build_dedupe(s, json_object_get(src, "dedupe")) < 0)
    goto oom;
  json_array_foreach(sinks, i, item) {
    ak_sink_cfg_t *k = &s->sinks[s->nsinks++];
    k->type = str_of(item, "type");
    k->opts = json_incref(item);
    if (!k->type) goto oom;
  }
  return 0;
oom:
  ak_config_source_clear(s);
  return -1;
}

void ak_config_source_clear(ak_source_cfg_t *s) {
  for (size_t k = 0; k < s->nsinks; k++) {
    free(s->sinks[k].type);
    json_decref(s->sinks[k].opts);
  }
  free(s->sinks);
  free(s->id);
  free(s->tenant);
  free(s->verify_type);
  json_decref(s->verify);
  strlist_free(s->forward_headers, s->nforward_headers);
  free(s->dedupe_field);
  memset(s, 0, sizeof *s);
}

void ak_config_free(ak_config_t *cfg) {
  if (!cfg) return;
  for (size_t i = 0; i < cfg->nsources; i++) ak_config_source_clear(&cfg->sources[i]);
  strlist_free(cfg->egress_allow_cidrs, cfg->egress_nallow_cidrs);
  free(cfg->sources);
  free(cfg->path);
  free(cfg->data_dir);
  free(cfg->http_prefix);
  free(cfg->http_tls_cert_pem);
  if (cfg->http_tls_key_pem) explicit_bzero(cfg->http_tls_key_pem, strlen(cfg->http_tls_key_pem));
  free(cfg->http_tls_key_pem);
  free(cfg->http_tls_client_ca_pem);
  free(cfg->admin_ip);
  json_decref(cfg->effective);
  free(cfg);
}

/* ----------------------------------------------------------------------- loading ---- */

static int load_text(const char *yaml, size_t len, const char *path, const char *const *env,
                     ak_config_t **out, char **err) {
  *out = NULL;
  *err = NULL;
  json_t *doc = NULL;
  char *perr = NULL;
  if (ak_config_yaml_parse(yaml ? yaml : "", yaml ? len : 0, &doc, &perr) < 0) {
    *err = path ? xasprintf("%s: %s", path, perr ? perr : "invalid YAML") : perr;
    if (path) free(perr);
    if (!*err) *err = strdup("invalid YAML");
    return -1;
  }
  vctx_t c = {.env = env};
  json_t *eff = check_map(&c, root_rows, doc, "");
  json_decref(doc);
  if (eff) check_cross(&c, eff);
  if (c.n || !eff) {
    *err = c.n ? vctx_join(&c) : strdup("out of memory");
    vctx_free(&c);
    json_decref(eff);
    return -1;
  }
  vctx_free(&c);
  ak_config_t *cfg = calloc(1, sizeof *cfg);
  if (!cfg) {
    json_decref(eff);
    *err = strdup("out of memory");
    return -1;
  }
  cfg->effective = eff;
  if ((path && !(cfg->path = strdup(path))) || build_typed(cfg) < 0) {
    ak_config_free(cfg);
    *err = strdup("out of memory");
    return -1;
  }
  /* After the schema: a named PEM file that is missing or bad is a config error too. */
  if (ak_tls_load_files(cfg, err) < 0) {
    ak_config_free(cfg);
    return -1;
  }
  *out = cfg;
  return 0;
}

int ak_config_source_check(const ak_config_t *cfg, const char *id, const json_t *spec, unsigned flags,
                           json_t **checked, char **warning, char **err) {
  *checked = NULL;
  *err = NULL;
  if (warning) *warning = NULL;
  vctx_t c = {.literal = true};
  json_t *out = NULL;
  if (!id || !is_id(id)) {
    json_t *tmp = json_string(id ? id : "");
    char *r = tmp ? render(tmp, false) : NULL;
    verr(&c, "sources: invalid source id %s; expected " ID_PATTERN, r ? r : "?");
    free(r);
    json_decref(tmp);
  } else if (!json_is_null(spec) && !json_is_object(spec)) {
    char *label = path_key("sources", id);
    type_error(&c, label, "a mapping", spec, false);
    free(label);
  } else {
    char *path = path_key("sources", id);
    out = check_map(&c, source_rows, json_is_null(spec) ? NULL : (json_t *)spec, path);
    free(path);
    ak_egress_t *guard = check_egress(&c, json_object_get(cfg->effective, "egress"));
    /* the TLS listener's mode is already resolved in the effective tree */
    json_t *tls = json_object_get(json_object_get(cfg->effective, "http"), "tls");
    const char *mode = json_string_value(json_object_get(tls, "client_cert"));
    source_env_t x = {.guard = guard, .tenant_path = cfg->http_routing == AK_ROUTING_TENANT_PATH,
                      .tls_asks = mode && strcmp(mode, "none") && json_is_string(json_object_get(tls, "client_ca")),
                      .stored = flags & AK_SOURCE_CHECK_STORED};
    if (out && !c.n) check_source(&c, id, out, &x);
    ak_egress_free(guard);
    if (warning) *warning = x.warning;
    else free(x.warning);
  }
  if (c.n || !out) {
    *err = c.n ? vctx_join(&c) : strdup("out of memory");
    vctx_free(&c);
    json_decref(out);
    if (warning) {
      free(*warning);
      *warning = NULL;
    }
    return -1;
  }
  vctx_free(&c);
  *checked = out;
  return 0;
}

const ak_opt_t *ak_config_source_options(void) { return source_rows; }

int ak_config_load_string(const char *yaml, size_t len, const char *const *env,
                          ak_config_t **out, char **err) {
  return load_text(yaml, len, NULL, env, out, err);
}

int ak_config_load_file(const char *path, const char *const *env, ak_config_t **out, char **err) {
  *out = NULL;
  *err = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) {
    *err = xasprintf("config file %s: %s", path, strerror(errno));
    return -1;
  }
  char *buf = NULL;
  size_t len = 0, cap = 0;
  int rc = 0;
  for (;;) {
    if (len + 4096 > cap) {
      cap = cap ? cap * 2 : 8192;
      char *nb = realloc(buf, cap);
      if (!nb) {
        *err = strdup("out of memory");
        rc = -1;
        break;
      }
      buf = nb;
    }
    size_t got = fread(buf + len, 1, cap - len, f);
    len += got;
    if (len > MAX_CONFIG_BYTES) {
      *err = xasprintf("config file %s: larger than %u bytes", path, MAX_CONFIG_BYTES);
      rc = -1;
      break;
    }
    if (got == 0) {
      if (ferror(f)) {
        *err = xasprintf("config file %s: %s", path, strerror(errno ? errno : EIO));
        rc = -1;
      }
      break;
    }
  }
  fclose(f);
  if (rc == 0) rc = load_text(buf ? buf : "", len, path, env, out, err);
  free(buf);
  return rc;
}

static bool file_exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}

int ak_config_find(const char *cli_path, const char *const *env, char **path_out, char **err) {
  *path_out = NULL;
  *err = NULL;
  const char *chosen = NULL, *from = NULL;
  if (cli_path) {
    chosen = cli_path;
    from = "";
  } else {
    const char *e = env_lookup(env, "ANKUSA_CONFIG");
    if (e && *e) {
      chosen = e;
      from = " (from ANKUSA_CONFIG)";
    }
  }
  if (chosen) {
    struct stat st;
    if (stat(chosen, &st) != 0) {
      *err = xasprintf("config file %s%s: %s", chosen, from, strerror(errno));
      return -1;
    }
  } else if (file_exists("/etc/ankusa/ankusa.yml")) {
    chosen = "/etc/ankusa/ankusa.yml";
  } else if (file_exists("./ankusa.yml")) {
    chosen = "./ankusa.yml";
  } else {
    return 0;
  }
  if (!(*path_out = strdup(chosen))) {
    *err = strdup("out of memory");
    return -1;
  }
  return 0;
}

int ak_config_load(const char *cli_path, const char *const *env, ak_config_t **out, char **err) {
  char *path = NULL;
  *out = NULL;
  if (ak_config_find(cli_path, env, &path, err) < 0) return -1;
  int rc = path ? ak_config_load_file(path, env, out, err) : load_text("", 0, NULL, env, out, err);
  free(path);
  return rc;
}

/* --------------------------------------------------------------------- redaction ---- */

static bool secret_key_name(const char *k) {
  static const char *const names[] = {"secret", "password", "token", "secret_access_key",
                                      "session_token", "nkey_seed", "jwt", "signing_key"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!strcmp(k, names[i])) return true;
  return false;
}

/* scheme://user:pass@host -> scheme://user:[REDACTED]@host; anything else unchanged. */
static json_t *mask_url(const json_t *v) {
  const char *s = json_string_value(v);
  const char *auth = strstr(s, "://");
  if (!auth) return json_copy((json_t *)v);
  auth += 3;
  size_t alen = strcspn(auth, "/?#");
  const char *at = NULL;
  for (size_t i = 0; i < alen; i++)
    if (auth[i] == '@') at = auth + i;
  const char *colon = at ? memchr(auth, ':', (size_t)(at - auth)) : NULL;
  if (!colon) return json_copy((json_t *)v);
  char *m = xasprintf("%.*s" REDACTED "%s", (int)(colon + 1 - s), s, at);
  json_t *out = m ? json_string(m) : NULL;
  free(m);
  return out ? out : json_string(REDACTED);
}

static json_t *redact_obj(const json_t *obj, const ak_opt_t *rows);

static json_t *redact_node(const json_t *v, const ak_opt_t *row, const char *key) {
  if (!json_is_null(v) && ((row && (row->flags & AK_OPTF_SECRET)) || (key && secret_key_name(key))))
    return json_string(REDACTED);
  if (json_is_string(v)) return mask_url(v);
  if (json_is_array(v)) {
    json_t *out = json_array();
    size_t i;
    json_t *item;
    json_array_foreach(v, i, item) {
      json_t *r = NULL;
      if (row && row->type == AK_OPT_SINK_LIST) {
        const ak_sink_vtable_t *vt = ak_sinks_find(json_string_value(json_object_get(item, "type")));
        r = json_is_object(item) ? redact_obj(item, vt ? vt->options : NULL) : redact_node(item, NULL, NULL);
      } else if (row && row->type == AK_OPT_LIST_OF && json_is_object(item)) {
        r = redact_obj(item, row->children);
      } else {
        r = redact_node(item, NULL, key);
      }
      json_array_append_new(out, r);
    }
    return out;
  }
  if (json_is_object(v)) {
    if (row && row->type == AK_OPT_MAP_OF) {
      json_t *out = json_object();
      const char *k;
      json_t *item;
      json_object_foreach((json_t *)v, k, item) {
        json_t *r = json_is_object(item) ? redact_obj(item, row->children) : redact_node(item, NULL, k);
        json_object_set_new(out, k, r);
      }
      return out;
    }
    if (row && row->type == AK_OPT_VERIFIER) { /* a verifier's rows live in its registry entry */
      const ak_verifier_vtable_t *vt = ak_verifiers_find(json_string_value(json_object_get(v, "type")));
      return redact_obj(v, vt ? vt->options : row->children);
    }
    bool typed = row && row->type == AK_OPT_MAP;
    return redact_obj(v, typed ? row->children : NULL);
  }
  return json_copy((json_t *)v);
}

static json_t *redact_obj(const json_t *obj, const ak_opt_t *rows) {
  json_t *out = json_object();
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)obj, k, v)
    json_object_set_new(out, k, redact_node(v, row_find(rows, k, NULL), k));
  return out;
}

json_t *ak_config_redact_tree(const json_t *tree, const ak_opt_t *rows) {
  if (!tree) return NULL;
  if (!json_is_object(tree)) return redact_node(tree, NULL, NULL);
  return redact_obj(tree, rows ? rows : root_rows);
}

json_t *ak_config_redacted(const ak_config_t *cfg) {
  return cfg ? ak_config_redact_tree(cfg->effective, root_rows) : NULL;
}

/* ----------------------------------------------------------------------- lookups ---- */

static int cmp_source(const void *key, const void *elem) {
  return strcmp((const char *)key, ((const ak_source_cfg_t *)elem)->id);
}

const ak_source_cfg_t *ak_config_source(const ak_config_t *cfg, const char *id) {
  if (!cfg || !id || !cfg->nsources) return NULL;
  return bsearch(id, cfg->sources, cfg->nsources, sizeof *cfg->sources, cmp_source);
}

const char *ak_config_roles_text(unsigned roles, char *buf, size_t len) {
  if (!buf || !len) return "";
  size_t o = 0;
  buf[0] = '\0';
  for (size_t r = 0; r < sizeof role_names / sizeof role_names[0]; r++) {
    if (!(roles & (1u << r))) continue;
    int w = snprintf(buf + o, len - o, "%s%s", o ? "," : "", role_names[r]);
    if (w < 0 || (size_t)w >= len - o) break;
    o += (size_t)w;
  }
  return buf;
}

const char *ak_config_wal_text(ak_wal_type_t t) {
  switch (t) {
  case AK_WAL_DISK: return "disk";
  case AK_WAL_NONE: return "none";
  case AK_WAL_DUAL: return "dual";
  }
  return "disk";
}
