/* The direct publisher of wal.type none (Ankusa.Edge.Publish): the edge hands it one
 * verified hook instead of the writer, and it asks every sink of the hook's source at
 * once, under one deadline (wal.publish_timeout_ms from the start of the publish). A body
 * above a sink's inline_max_bytes is checked in to the claim store first. Every sink
 * confirmed: the hook is accepted (201). A sink refusing (retry or permanent), a failed
 * check-in or the deadline: 503, nothing retried here (the provider is the retry); a sink
 * that confirmed keeps its copy, so the provider's retry is a duplicate there.
 *
 * Owns the sink instances of each source version (AK_SOURCE_EXT_PUBLISH), a check-in
 * thread when claim stores are configured, and one timer thread that answers the publishes
 * whose deadline passed and frees the finished ones. No thread waits on a sink: the request
 * stays suspended and is resumed from a sink's callback, the check-in's or the timer.
 * Never writes a hook to the store; a late sink answer only updates metrics.
 *
 * Also the boot rule of wal.type none: every source of the config file needs a durable
 * sink (sinks/sink.h: durable). */
#ifndef AK_EDGE_PUBLISH_H
#define AK_EDGE_PUBLISH_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>
#include "core/config.h"
#include "core/module.h"
#include "queue/writer.h"

typedef struct ak_publish ak_publish_t;

/* The publisher's lifecycle (edge role; it opens only under wal.type none, as
 * inst->publish) and the boot rule on durable sinks. Placed after the edge in the module
 * table: it answers what is left before the ingest listeners stop. */
extern const ak_module_t ak_mod_publish;

/* wal.type none in this config. */
bool ak_publish_direct(const ak_config_t *cfg);

/* Does this list of sink entries (a checked spec's "sinks") hold a durable one? When not,
 * why names the reason in one line (for the admin API's 400 invalid_source). */
bool ak_publish_sinks_durable(const json_t *sinks, char *why, size_t whylen);

/* Publish req's hook (req->source is the cfg of a source version the caller holds; req->rec
 * its encoded record, which the publisher takes: req->rec is NULL after a QUEUED answer).
 * AK_WR_QUEUED: req->done(req, ctx) runs exactly once, from any thread, possibly before
 * this returns, with req->status AK_WR_COMMITTED (every sink confirmed),
 * AK_WR_STORE_UNAVAILABLE (a sink refused, a check-in failed, a source without sinks) or
 * AK_WR_DEADLINE (wal.publish_timeout_ms passed), or AK_WR_DRAINING at a stop. Any other
 * answer: refused now, done is not called and req->rec is the caller's still. */
ak_wr_status_t ak_publish_submit(ak_publish_t *p, ak_write_req_t *req);

#endif
