/* Configuration: ankusa.yml (Ankusa-compatible schema), ${VAR} interpolation, ANKUSA_*
 * overrides, validation with dotted-key messages. Owns the option tables of the core
 * sections and the typed result. Never exits: errors come back as text for main.c. */
#ifndef AK_CORE_CONFIG_H
#define AK_CORE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include "core/options.h"

#define AK_EXIT_CONFIG 78

enum {
  AK_ROLE_EDGE = 1u << 0,
  AK_ROLE_DISPATCH = 1u << 1,
  AK_ROLE_STORAGE = 1u << 2,
  AK_ROLE_CLAIM_CHECK = 1u << 3,
};

typedef enum { AK_ROUTING_PATH = 0, AK_ROUTING_TENANT_PATH = 1 } ak_routing_t;
typedef enum { AK_WAL_DISK = 0, AK_WAL_NONE = 1, AK_WAL_DUAL = 2 } ak_wal_type_t;
typedef enum { AK_LOG_DEBUG = 0, AK_LOG_INFO = 1, AK_LOG_WARNING = 2, AK_LOG_ERROR = 3 } ak_log_level_t;
typedef enum { AK_OVF_REJECT = 0, AK_OVF_QUARANTINE = 1, AK_OVF_ACCEPT_FLAG = 2 } ak_on_verify_failure_t;
/* http.tls.client_cert, in the order of its enum row */
typedef enum {
  AK_TLS_CLIENT_CERT_NONE = 0, AK_TLS_CLIENT_CERT_REQUEST = 1, AK_TLS_CLIENT_CERT_REQUIRE = 2
} ak_tls_client_cert_t;

/* Where a source's provider event key comes from (sources.<id>.dedupe). */
typedef enum { AK_DEDUPE_NONE = 0, AK_DEDUPE_HEADER = 1, AK_DEDUPE_JSON = 2 } ak_dedupe_from_t;

typedef struct ak_sink_cfg {
  char *type;     /* e.g. "log" */
  json_t *opts;   /* the validated mapping with defaults filled in (owned reference) */
} ak_sink_cfg_t;

typedef struct ak_source_cfg {
  char *id;                    /* map key: the catch-URL segment */
  char *tenant;                /* default "default" */
  ak_on_verify_failure_t on_verify_failure;
  char *verify_type;           /* "none" when verify is absent or {} */
  json_t *verify;              /* validated verify mapping, or NULL */
  bool trust_url_tenant;
  /* dedupe: the key is the header dedupe_field (lowercased) or the JSON dot path
   * dedupe_field of the body; AK_DEDUPE_NONE = every hook is new */
  ak_dedupe_from_t dedupe_from;
  char *dedupe_field;
  int64_t dedupe_ttl_ms;
  /* forward_headers: absent -> forward_default true (every provider header except the
   * deny set); a list -> only these lowercased names (still minus the deny set); [] -> none */
  bool forward_default;
  char **forward_headers;
  size_t nforward_headers;
  ak_sink_cfg_t *sinks;
  size_t nsinks;
} ak_source_cfg_t;

typedef struct ak_config {
  char *path;                  /* file that was loaded, NULL when none */
  unsigned roles;              /* AK_ROLE_* bits */
  char *data_dir;
  int64_t min_free_bytes;      /* node.min_free_bytes: commits refused below this much free disk */
  ak_log_level_t log_level;
  int http_port;
  int64_t http_max_body_bytes;
  ak_routing_t http_routing;
  char *http_prefix;           /* normalised: "" (no prefix) or "/a/b" (no trailing slash) */
  /* http.tls: a second ingest listener over TLS. The PEM texts are read once, at load
   * (edge/tls.c); the key text is never printed or logged. */
  bool http_tls_enabled;
  int http_tls_port;
  char *http_tls_cert_pem;     /* certificate chain, leaf first */
  char *http_tls_key_pem;      /* private key */
  char *http_tls_client_ca_pem; /* CA bundle for client certificates, NULL when unset */
  ak_tls_client_cert_t http_tls_client_cert_mode; /* none unless client_ca is set */
  bool admin_enabled;
  char *admin_ip;
  int admin_port;
  int64_t admin_gauge_interval_ms;
  json_t *admin_principals;    /* admin.principals: [{name, token_sha256, scopes, tenants}] (borrowed
                                  from effective; admin/auth.c builds the principals) */
  int64_t audit_retention_days; /* audit.retention_days */
  int64_t batcher_partitions;
  int64_t batcher_max_batch;
  int64_t batcher_max_delay_ms;
  int64_t batcher_max_queue;
  int64_t batcher_max_queue_bytes;
  int64_t batcher_tenant_max_queue;       /* one tenant's share of max_queue (429 tenant_overload) */
  int64_t batcher_tenant_max_queue_bytes; /* and of max_queue_bytes */
  ak_wal_type_t wal_type;
  /* dispatch.* (docs/configuration.md) */
  int64_t dispatch_batch;              /* rows claimed per scan: 128 */
  int64_t dispatch_concurrency;        /* attempts in flight: 32 */
  int64_t dispatch_max_inflight;       /* claimed, unfinished rows: 4096 */
  int64_t dispatch_max_inflight_bytes; /* stored bytes of those rows: 134217728 */
  int64_t dispatch_attempt_timeout_ms; /* 30000 */
  int64_t dispatch_sink_concurrency;   /* per sink key; 0 when null (no cap beyond the others) */
  int64_t dispatch_breaker_failures;   /* 5; 0 = no breaker */
  int64_t dispatch_breaker_open_ms;    /* 30000 */
  int64_t dispatch_breaker_max_open_ms; /* 300000 */
  int64_t dispatch_retry_base_ms;      /* 100 */
  int64_t dispatch_retry_max_ms;       /* 300000 */
  int64_t dispatch_retry_max_attempts; /* 84 */
  bool dispatch_retry_jitter;          /* true */
  /* dispatch.tenants: the window every tenant is held to (null = the derived default,
   * resolved at load: max_inflight / 4, max_inflight_bytes / 4, max(1, concurrency / 2)) */
  int64_t dispatch_tenant_max_inflight;
  int64_t dispatch_tenant_max_inflight_bytes;
  int64_t dispatch_tenant_concurrency;
  /* egress.* */
  char **egress_allow_cidrs;
  size_t egress_nallow_cidrs;
  bool egress_allow_http;
  int64_t quarantine_burst;    /* quarantine.burst: tokens per source bucket */
  double quarantine_rate;      /* quarantine.rate: tokens per second (> 0) */
  int64_t quarantine_max_bytes; /* quarantine.max_bytes: body bytes the pen may hold */
  int64_t dedupe_max_entries;            /* dedupe.max_entries: live keys on the node */
  int64_t dedupe_max_entries_per_tenant; /* dedupe.max_entries_per_tenant */
  int64_t dedupe_sweep_interval_ms;      /* dedupe.sweep_interval_ms */
  json_t *store_headers;       /* {drop, hash, keep}: lists of header names (borrowed from effective) */
  bool source_store_persistent; /* source_store.type persistent: the admin API's sources, kept in the store */
  ak_source_cfg_t *sources;    /* the config file's, sorted by id (the node serves core/sources.h) */
  size_t nsources;
  json_t *effective;           /* the whole effective tree, defaults applied (unredacted) */
} ak_config_t;

/* env: NULL-terminated "K=V" array; NULL means the process environment. */

/* Pick the file: cli_path, else $ANKUSA_CONFIG (must exist), else /etc/ankusa/ankusa.yml,
 * else ./ankusa.yml, else none (*path_out = NULL, returns 0). -1 with *err on error. */
int ak_config_find(const char *cli_path, const char *const *env, char **path_out, char **err);

/* Parse + interpolate + overrides + validate. 0 on success; -1 with *err (malloc'd,
 * possibly several lines, each naming a dotted key) on failure. */
int ak_config_load_string(const char *yaml, size_t len, const char *const *env,
                          ak_config_t **out, char **err);
int ak_config_load_file(const char *path, const char *const *env, ak_config_t **out, char **err);
/* find + load; no file at all = defaults, no sources. */
int ak_config_load(const char *cli_path, const char *const *env, ak_config_t **out, char **err);

void ak_config_free(ak_config_t *cfg);

/* The effective config with every secret replaced by "[REDACTED]" (new reference). */
json_t *ak_config_redacted(const ak_config_t *cfg);

/* Redaction of any tree: values of rows flagged AK_OPTF_SECRET (rows NULL = the root
 * table, sinks by their registry rows), any key named like a secret, and the password of
 * scheme://user:pass@ URLs. New reference. ak_config_redacted() is this on cfg->effective. */
json_t *ak_config_redact_tree(const json_t *tree, const ak_opt_t *rows);

const ak_source_cfg_t *ak_config_source(const ak_config_t *cfg, const char *id);

/* One source spec, checked by the same code as a source of the config file: the schema
 * of sources.<id>, then its rules across keys (forward_headers, dedupe, http sink URLs
 * against egress.*, admission_bytes, client_cert against http.tls, the trust rule under
 * tenant_path). spec is the mapping as JSON, taken literally (no ${VAR}). 0 with *checked
 * (the effective spec, defaults filled in: new reference); -1 with *err (malloc'd, one
 * line per problem, each naming sources.<id>.<key>). With AK_SOURCE_CHECK_STORED (a
 * source read back from the store) the trust rule is a *warning (malloc'd) instead of an
 * error; warning may be NULL. */
#define AK_SOURCE_CHECK_STORED 1u
int ak_config_source_check(const ak_config_t *cfg, const char *id, const json_t *spec, unsigned flags,
                           json_t **checked, char **warning, char **err);
/* The typed source of a checked spec. 0, or -1 (out of memory; *out cleared). */
int ak_config_source_build(const char *id, const json_t *checked, ak_source_cfg_t *out);
void ak_config_source_clear(ak_source_cfg_t *s);
/* The option rows of one source (redaction: ak_config_redact_tree(spec, these)). */
const ak_opt_t *ak_config_source_options(void);

/* "edge,dispatch,storage" style text of roles, into buf. */
const char *ak_config_roles_text(unsigned roles, char *buf, size_t len);
const char *ak_config_wal_text(ak_wal_type_t t);

/* The root option table (for docs). */
const ak_opt_t *ak_config_root_options(void);

#endif
