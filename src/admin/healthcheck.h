/* `ankusa healthcheck`: the container HEALTHCHECK's probe. GETs /ready on the ingest
 * listener (http.ip/http.port), then on the admin listener (admin.ip/admin.port) when
 * admin.enabled, each within its own short deadline, over a plain socket client (no
 * libcurl). Owns the probe and its one-line verdict. Never starts a node, opens the store,
 * or follows a redirect. */
#ifndef AK_ADMIN_HEALTHCHECK_H
#define AK_ADMIN_HEALTHCHECK_H

#include <stdio.h>
#include "core/config.h"

/* Each probe's budget (connect, send, read the answer). */
#define AK_HEALTHCHECK_TIMEOUT_MS 2000

/* 0 when every probed listener answered 200 (one "ok" line on out), 1 otherwise (one line
 * on err naming the listener that failed, its address and why: connection refused, a
 * status such as "503 draining", a timeout). */
int ak_healthcheck(const ak_config_t *cfg, int timeout_ms, FILE *out, FILE *err);

#endif
