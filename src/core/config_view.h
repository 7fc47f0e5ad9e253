/* The config as print-config and GET /v1/config show it: ankusa's effective tree in the
 * YAML's own shape plus the Elixir Ankusa's fields ({module, opts} adapters, `roles`,
 * `port`, `wal`, ...), redacted; and the pieces of that redaction others share. */
#ifndef AK_CORE_CONFIG_VIEW_H
#define AK_CORE_CONFIG_VIEW_H

#include <jansson.h>

struct ak_config;

/* The whole view (new reference; NULL without a config). */
json_t *ak_config_view(const struct ak_config *cfg);

/* One source (YAML shape, already redacted) in the original's shape: tenant_id,
 * on_verify_failure, verifier/dedup/sinks as {module, opts}, opts by allowlist. */
json_t *ak_config_view_source(const json_t *src);

/* ak_config_view_url (the URL rule of this view) lives with the redaction in
 * core/config.h. */

#endif
