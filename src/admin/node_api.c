/* The node's own endpoints (node_api.h): the probes, /metrics, /v1/config, /v1/wal. Every
 * number here is one the node already keeps (writer counters, dispatch gauges, the store
 * directory's file sizes): a request never scans the store, so answering costs the same
 * at any backlog. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "admin/node_api.h"
#include "core/config_view.h"
#include "core/metrics.h"
#include "fleet/fleet.h"
#include "dispatch/dispatch.h"
#include "edge/httpx.h"
#include "edge/publish.h"
#include "queue/quarantine.h"
#include "queue/writer.h"
#include "store/store.h"

/* The probes answer as on the ingest listener (edge/httpx.c), not through the admin
 * replies: the same bodies on both ports. */
void ak_node_api_health(ak_admin_call_t *call, const ak_admin_path_t *path) {
  (void)path;
  ak_http_health(call->inst, call->req);
  call->answered = true;
}

void ak_node_api_ready(ak_admin_call_t *call, const ak_admin_path_t *path) {
  (void)path;
  unsigned st;
  ak_http_ready(call->inst, call->req, &st);
  call->answered = true;
}

void ak_node_api_metrics(ak_admin_call_t *call, const ak_admin_path_t *path) {
  (void)path;
  ak_instance_t *inst = call->inst;
  if (inst->writer) ak_writer_sample(inst->writer);
  ak_pen_sample(inst->pen);
  size_t len;
  char *text = ak_metrics_render(inst->metrics, &len);
  if (!text) {
    ak_admin_error(call, 500, "internal");
    return;
  }
  ak_admin_reply(call, 200, "text/plain; version=0.0.4", text, len);
  free(text);
}

void ak_node_api_config(ak_admin_call_t *call, const ak_admin_path_t *path) {
  (void)path;
  ak_admin_json(call, 200, ak_config_view(call->inst->cfg));
}

/* Bytes the store's files occupy on disk (RocksDB keeps one flat directory). -1 when the
 * directory cannot be read. */
static int64_t dir_bytes(const char *path) {
  DIR *d = opendir(path);
  if (!d) return -1;
  int64_t total = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    struct stat st;
    if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2]))) continue;
    if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
      total += (int64_t)st.st_blocks * 512;
  }
  closedir(d);
  return total;
}

static json_t *wal_view(ak_instance_t *inst) {
  json_t *w = json_object();
  json_object_set_new(w, "type", json_string(ak_wal_type_text(ak_wal_cfg(inst->cfg)->type)));
  const char *path = inst->store ? ak_store_path(inst->store) : NULL;
  json_object_set_new(w, "store_path", path ? json_string(path) : json_null());
  json_object_set_new(w, "open", json_boolean(inst->store && ak_store_is_open(inst->store)));
  const char *reason = "store_unavailable";
  bool ready = inst->writer && ak_writer_ready(inst->writer, &reason);
  json_object_set_new(w, "ready", json_boolean(ready));
  json_object_set_new(w, "reason", json_string(reason));
  if (inst->writer) {
    json_object_set_new(w, "next_seq", json_integer((json_int_t)ak_writer_next_seq(inst->writer)));
    json_object_set_new(w, "hooks", json_integer((json_int_t)ak_writer_hooks(inst->writer)));
  } else {
    json_object_set_new(w, "next_seq", json_null());
    json_object_set_new(w, "hooks", json_null());
  }
  if (inst->dispatch) {
    ak_dispatch_counts_t dc;
    ak_dispatch_queue_counts(inst->dispatch, &dc);
    /* the original's integer: every delivery row the store holds, dead ones included */
    json_object_set_new(w, "deliveries", json_integer((json_int_t)(dc.pending + dc.scheduled + dc.inflight + dc.dead)));
    json_object_set_new(w, "delivery_states",
                        json_pack("{s:I,s:I,s:I,s:I}", "pending", (json_int_t)dc.pending, "scheduled",
                                  (json_int_t)dc.scheduled, "inflight", (json_int_t)dc.inflight, "dead",
                                  (json_int_t)dc.dead));
  } else { /* no dispatch role: nobody counts them */
    json_object_set_new(w, "deliveries", json_null());
    json_object_set_new(w, "delivery_states", json_null());
  }
  int64_t bytes = path ? dir_bytes(path) : -1;
  json_object_set_new(w, "disk_bytes", bytes >= 0 ? json_integer((json_int_t)bytes) : json_null());
  /* how long the last open took: the WAL replay a restart would pay again */
  json_object_set_new(w, "last_open_ms",
                      json_integer(inst->store ? (json_int_t)(ak_store_last_open_seconds(inst->store) * 1000.0) : 0));
  return json_pack("{s:s,s:o}", "instance", inst->name, "wal", w);
}

struct ak_node_gauges {
  ak_instance_t *inst;
  ak_series_t *deliveries, *disk_bytes;
};

ak_node_gauges_t *ak_node_gauges_new(ak_instance_t *inst) {
  ak_node_gauges_t *ng = calloc(1, sizeof *ng);
  if (!ng) return NULL;
  ng->inst = inst;
  ng->deliveries = ak_metrics_instance_series(inst->metrics, inst->name, "ankusa_store_deliveries",
                                              "Delivery rows the store holds, dead ones included.", AK_METRIC_GAUGE);
  ng->disk_bytes = ak_metrics_instance_series(inst->metrics, inst->name, "ankusa_store_disk_bytes",
                                              "Bytes the store's files take on disk.", AK_METRIC_GAUGE);
  return ng;
}

void ak_node_gauges_sample(void *arg) {
  ak_node_gauges_t *ng = arg;
  ak_instance_t *inst = ng->inst;
  if (inst->dispatch) {
    ak_dispatch_counts_t dc;
    ak_dispatch_queue_counts(inst->dispatch, &dc);
    ak_gauge_set(ng->deliveries, (double)(dc.pending + dc.scheduled + dc.inflight + dc.dead));
  }
  const char *path = inst->store ? ak_store_path(inst->store) : NULL;
  int64_t bytes = path ? dir_bytes(path) : -1;
  if (bytes >= 0) ak_gauge_set(ng->disk_bytes, (double)bytes);
}

void ak_node_gauges_free(ak_node_gauges_t *ng) { free(ng); }

void ak_node_api_wal(ak_admin_call_t *call, const ak_admin_path_t *path) {
  (void)path;
  if (ak_publish_direct(call->inst->cfg)) { /* no hook is stored: nothing to report */
    ak_admin_error(call, 409, "wal_disabled");
    return;
  }
  ak_admin_json(call, 200, wal_view(call->inst));
}

void ak_node_api_fleet(ak_admin_call_t *call, const ak_admin_path_t *path) {
  (void)path;
  if (!(call->inst->roles & AK_ROLE_EDGE)) {
    ak_admin_role_not_enabled(call, "edge");
    return;
  }
  ak_admin_json(call, 200, ak_fleet_json(call->inst->fleet, call->inst->cfg));
}
