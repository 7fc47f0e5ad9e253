/* CLI: serve (default), check-config, print-config, version, inspect hooks. The only
 * place that calls exit(): every module returns errors here, and here they become exit
 * codes (78 for an invalid configuration). */
#include <errno.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "admin/admin.h"
#include "admin/hooks_api.h"
#include "admin/sources_api.h"
#include "core/config.h"
#include "core/envelope.h"
#include "core/gauges.h"
#include "core/instance.h"
#include "core/log.h"
#include "core/notify.h"
#include "core/sources.h"
#include "dispatch/dispatch.h"
#include "dispatch/replay.h"
#include "edge/edge.h"
#include "edge/quota.h"
#include "queue/dedupe.h"
#include "queue/quarantine.h"
#include "queue/sweeper.h"
#include "queue/writer.h"
#include "sinks/egress.h"
#include "store/audit.h"
#include "store/store.h"
#include "verify/verifier.h"

extern char **environ;

static void usage(FILE *f) {
  fprintf(f,
          "usage: ankusa [serve] [--config FILE]\n"
          "       ankusa check-config [--config FILE]\n"
          "       ankusa print-config [--config FILE]\n"
          "       ankusa inspect hooks --data-dir DIR\n"
          "       ankusa version\n");
}

static int load_config(const char *path, ak_config_t **cfg) {
  char *err = NULL;
  if (ak_config_load(path, (const char *const *)environ, cfg, &err) != 0) {
    fprintf(stderr, "ankusa: invalid configuration\n");
    /* indent every line of the message */
    for (char *line = err, *next; line && *line; line = next) {
      next = strchr(line, '\n');
      if (next) *next++ = 0;
      fprintf(stderr, "  %s\n", line);
    }
    free(err);
    return AK_EXIT_CONFIG;
  }
  return 0;
}

static char *store_path(const char *data_dir, const char *instance) {
  size_t n = strlen(data_dir) + strlen(instance) + 16;
  char *p = malloc(n);
  snprintf(p, n, "%s/%s/store", data_dir, instance);
  return p;
}

static int cmd_check(const char *path) {
  ak_config_t *cfg;
  int rc = load_config(path, &cfg);
  if (rc) return rc;
  char roles[128];
  printf("config OK: roles=%s sources=", ak_config_roles_text(cfg->roles, roles, sizeof roles));
  for (size_t i = 0; i < cfg->nsources; i++) printf("%s%s", i ? "," : "", cfg->sources[i].id);
  printf(" wal=%s\n", ak_config_wal_text(cfg->wal_type));
  ak_config_free(cfg);
  return 0;
}

static int cmd_print(const char *path) {
  ak_config_t *cfg;
  int rc = load_config(path, &cfg);
  if (rc) return rc;
  json_t *j = ak_config_redacted(cfg);
  char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  printf("%s\n", s);
  free(s);
  json_decref(j);
  ak_config_free(cfg);
  return 0;
}

typedef struct {
  unsigned long long n;
  int bad;
} inspect_ctx_t;

static int inspect_one(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  inspect_ctx_t *ic = ctx;
  ak_envelope_t env;
  if (kl != AK_HOOK_KEY_LEN || ak_envelope_decode((const uint8_t *)v, vl, &env) != 0) {
    fprintf(stderr, "ankusa: damaged hook record at seq %llu\n",
            kl == AK_HOOK_KEY_LEN ? (unsigned long long)ak_get_u64((const uint8_t *)k) : 0ULL);
    ic->bad = 1;
    return 0;
  }
  json_t *j = ak_hooks_api_json(&env, 0);
  char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
  fputs(s, stdout);
  fputc('\n', stdout);
  free(s);
  json_decref(j);
  ak_envelope_clear(&env);
  ic->n++;
  return 0;
}

static int cmd_inspect(int argc, char **argv) {
  const char *data_dir = NULL;
  if (argc < 1 || strcmp(argv[0], "hooks") != 0) {
    usage(stderr);
    return 64;
  }
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--data-dir") == 0 && i + 1 < argc) data_dir = argv[++i];
    else if (strncmp(argv[i], "--data-dir=", 11) == 0) data_dir = argv[i] + 11;
    else {
      fprintf(stderr, "ankusa: unknown argument %s\n", argv[i]);
      return 64;
    }
  }
  if (!data_dir) {
    fprintf(stderr, "ankusa: inspect hooks needs --data-dir DIR (the node.data_dir)\n");
    return 64;
  }
  char *sp = store_path(data_dir, "default");
  ak_store_t *st = ak_store_new(sp, true);
  char *err = NULL;
  if (ak_store_open(st, &err) != 0) {
    fprintf(stderr, "ankusa: %s\n", err);
    free(err);
    ak_store_free(st);
    free(sp);
    return 1;
  }
  inspect_ctx_t ic = {0, 0};
  int rc = ak_store_scan(st, AK_CF_HOOKS, NULL, 0, inspect_one, &ic);
  fflush(stdout);
  ak_store_free(st);
  free(sp);
  if (rc != 0) {
    fprintf(stderr, "ankusa: reading the store failed part-way (corruption?); output is incomplete\n");
    return 1;
  }
  return ic.bad ? 1 : 0;
}

static void sample_writer(void *w) { ak_writer_sample(w); }
static void sample_pen(void *pen) { ak_pen_sample(pen); }

static int cmd_serve(const char *path) {
  ak_config_t *cfg;
  int rc = load_config(path, &cfg);
  if (rc) return rc;
  ak_log_set_level(cfg->log_level);

  /* signals are taken by sigwait in this thread only; block them before any thread starts */
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  signal(SIGPIPE, SIG_IGN);

  ak_instance_t inst = {.name = "default", .cfg = cfg};
  inst.metrics = ak_metrics_new();
  ak_idgen_init(&inst.ids);
  if (cfg->nsources == 0 && !cfg->source_store_persistent)
    ak_log(AK_LOG_WARNING, "config", "no sources configured: every POST will get 404", "config=%s",
           cfg->path ? cfg->path : "(none)");

  int exit_code = 0;
  ak_gauges_t *gauges = NULL;
  ak_sweeper_t *sweeper = NULL;
  char *sp = store_path(cfg->data_dir, inst.name);
  inst.store = ak_store_new(sp, false);
  char *err = NULL;
  if (ak_store_open(inst.store, &err) != 0) {
    ak_log(AK_LOG_ERROR, "store", "store_open_failed: refusing to start", "reason=\"%s\"", err);
    fprintf(stderr, "ankusa: store_open_failed: %s\n", err);
    free(err);
    ak_store_free(inst.store);
    free(sp);
    ak_metrics_free(inst.metrics);
    ak_config_free(cfg);
    return 1;
  }
  ak_log(AK_LOG_INFO, "store", "store opened", "path=%s next_seq=%llu hooks=%llu wal_replay_seconds=%.3f", sp,
         (unsigned long long)ak_store_next_seq(inst.store), (unsigned long long)ak_store_hook_count(inst.store),
         ak_store_last_open_seconds(inst.store));
  ak_log(AK_LOG_INFO, "durability",
         "wal.type=disk: a 201 means the hook is fsynced in this host's store; it survives a process crash "
         "and power loss on this host, not the loss of this host (no backup configured)",
         "store=%s", sp);

  {
    /* the config file's sources, then the stored ones: every module that attaches
     * per-source state (pen, edge, dispatcher) is built after this and sees them all */
    char serr[512] = "";
    inst.sources = ak_sources_new(cfg, serr, sizeof serr);
    if (!inst.sources) {
      /* the config loader built every verifier once already: this is belt and braces */
      fprintf(stderr, "ankusa: invalid configuration\n  %s\n", serr);
      exit_code = AK_EXIT_CONFIG;
      goto out;
    }
    ak_sources_set_metrics(inst.sources, inst.metrics, inst.name);
    if (ak_sources_api_load(&inst, &err) != 0) {
      ak_log(AK_LOG_ERROR, "sources", "cannot load the stored sources: refusing to start", "reason=\"%s\"", err);
      fprintf(stderr, "ankusa: source_store: %s\n", err);
      free(err);
      exit_code = 1;
      goto out;
    }
  }
  /* before everything an operator can change: each change writes its row */
  inst.audit = ak_audit_open(&inst, &err);
  if (!inst.audit || ak_audit_start(inst.audit) != 0) {
    ak_log(AK_LOG_ERROR, "audit", "cannot open the audit trail", "reason=\"%s\"", err ? err : "no thread");
    free(err);
    exit_code = 1;
    goto out;
  }
  inst.pen = ak_pen_new(&inst);
  if (!inst.pen) {
    ak_log(AK_LOG_ERROR, "quarantine", "cannot read the quarantine pen's state from the store", NULL);
    exit_code = 1;
    goto out;
  }
  inst.dedupe = ak_dedupe_new(&inst, &err);
  if (!inst.dedupe) {
    ak_log(AK_LOG_ERROR, "dedupe", "cannot read the dedupe index from the store", "reason=\"%s\"", err);
    free(err);
    exit_code = 1;
    goto out;
  }
  inst.quota = ak_quota_new(&inst, &err);
  if (!inst.quota) {
    ak_log(AK_LOG_ERROR, "rate_limit", "cannot read the rate-limit overrides from the store", "reason=\"%s\"", err);
    free(err);
    exit_code = 1;
    goto out;
  }
  inst.writer = ak_writer_new(&inst);
  {
    char eerr[256] = "";
    inst.egress = ak_egress_new((const char *const *)cfg->egress_allow_cidrs, cfg->egress_nallow_cidrs,
                                cfg->egress_allow_http, eerr, sizeof eerr);
    if (!inst.egress) {
      fprintf(stderr, "ankusa: invalid configuration\n  %s\n", eerr);
      exit_code = AK_EXIT_CONFIG;
      goto out;
    }
  }
  if (cfg->roles & AK_ROLE_DISPATCH) {
    char derr[512] = "";
    inst.dispatch = ak_dispatch_new(&inst, derr, sizeof derr);
    if (!inst.dispatch) {
      fprintf(stderr, "ankusa: invalid configuration\n  %s\n", derr);
      ak_log(AK_LOG_ERROR, "dispatch", "cannot build the sinks", "reason=\"%s\"", derr);
      exit_code = AK_EXIT_CONFIG;
      goto out;
    }
    inst.replays = ak_replays_new(&inst);
    char *rerr = NULL;
    if (!inst.replays || ak_replays_load(inst.replays, &rerr) != 0) {
      ak_log(AK_LOG_ERROR, "replay", "cannot read the replay jobs from the store", "reason=\"%s\"",
             rerr ? rerr : "out of memory");
      free(rerr);
      exit_code = 1;
      goto out;
    }
    ak_dispatch_on_tick(inst.dispatch, ak_replays_tick, inst.replays);
    ak_dispatch_on_replay_settled(inst.dispatch, ak_replays_settled, inst.replays);
    /* before the writer starts: the due-index scan and the commit notices must not
     * both count a row */
    if (ak_dispatch_start(inst.dispatch, derr, sizeof derr) != 0) {
      ak_log(AK_LOG_ERROR, "dispatch", "cannot start the dispatcher", "reason=\"%s\"", derr);
      exit_code = 1;
      goto out;
    }
  }
  inst.edge = ak_edge_new(&inst);
  if (!inst.edge) {
    exit_code = 1;
    goto out;
  }
  inst.admin = cfg->admin_enabled ? ak_admin_new(&inst) : NULL;
  if (cfg->admin_enabled && !inst.admin) {
    exit_code = AK_EXIT_CONFIG;
    goto out;
  }
  if (ak_writer_start(inst.writer) != 0) {
    ak_log(AK_LOG_ERROR, "writer", "cannot start the writer thread", NULL);
    exit_code = 1;
    goto out;
  }
  gauges = ak_gauges_new(&inst, 0);
  if (!gauges || ak_gauges_add(gauges, sample_writer, inst.writer) != 0 ||
      ak_gauges_add(gauges, sample_pen, inst.pen) != 0 || ak_gauges_start(gauges) != 0) {
    ak_log(AK_LOG_ERROR, "gauges", "cannot start the gauge sampler", NULL);
    exit_code = 1;
    goto out;
  }
  /* after the writer: the sweeper only deletes keys commits already wrote */
  sweeper = ak_sweeper_start(&inst, inst.dedupe);
  if (!sweeper) {
    ak_log(AK_LOG_ERROR, "dedupe", "cannot start the sweeper thread", NULL);
    exit_code = 1;
    goto out;
  }
  if (inst.admin && ak_admin_start(inst.admin, &err) != 0) {
    ak_log(AK_LOG_ERROR, "admin", "cannot start the admin listener", "reason=\"%s\"", err);
    fprintf(stderr, "ankusa: %s\n", err);
    free(err);
    exit_code = 1;
    goto out;
  }
  if (ak_edge_start(inst.edge, &err) != 0) {
    ak_log(AK_LOG_ERROR, "edge", "cannot start the ingest listener", "reason=\"%s\"", err);
    fprintf(stderr, "ankusa: %s\n", err);
    free(err);
    exit_code = 1;
    goto out;
  }
  ak_log(AK_LOG_INFO, "node", "listening",
         "http_port=%d admin_port=%d admin_ip=%s https_port=%d sources=%zu version=%s", ak_edge_port(inst.edge),
         inst.admin ? ak_admin_port(inst.admin) : 0, cfg->admin_ip, ak_edge_tls_port(inst.edge),
         ak_sources_count(inst.sources), AK_VERSION);
  /* the store is open and every listener bound: a service manager may route traffic */
  if (ak_notify_send("READY=1\nSTATUS=accepting webhooks") < 0)
    ak_log(AK_LOG_WARNING, "node", "cannot notify the service manager (NOTIFY_SOCKET)", "errno=%d", errno);

  int sig = 0;
  while (sigwait(&set, &sig) != 0) {
  }
  ak_log(AK_LOG_INFO, "node", "stopping: draining in-flight requests", "signal=%d", sig);
  ak_notify_send("STOPPING=1\nSTATUS=draining");
  /* drain order: stop accepting (the edge's accept policy and handler read the flag; /ready
   * answers draining), commit and answer everything queued, let the answers go out, then
   * close listeners (MHD must not be stopped with suspended connections) */
  atomic_store(&inst.draining, 1);
  ak_writer_stop(inst.writer);
  ak_sweeper_stop(sweeper);
  sweeper = NULL;
  ak_edge_wait_idle(inst.edge, 5000);
  /* deliveries in flight get a few seconds to settle; what is still claimed stays due */
  ak_dispatch_stop(inst.dispatch, 5000);
  usleep(200000);

out:
  ak_gauges_free(gauges); /* before the writer and pen it samples */
  ak_sweeper_stop(sweeper);
  ak_admin_free(inst.admin); /* first: its requests make source versions the edge builds for */
  ak_edge_free(inst.edge);
  ak_dispatch_free(inst.dispatch);
  ak_replays_free(inst.replays);
  ak_writer_free(inst.writer);
  ak_egress_free(inst.egress);
  ak_pen_free(inst.pen);
  ak_dedupe_free(inst.dedupe);
  ak_quota_free(inst.quota);
  ak_audit_free(inst.audit);
  ak_sources_free(inst.sources); /* last of the modules: versions may still hold their states */
  ak_store_free(inst.store);
  free(sp);
  ak_metrics_free(inst.metrics);
  ak_config_free(cfg);
  if (exit_code == 0) ak_log(AK_LOG_INFO, "node", "stopped", NULL);
  return exit_code;
}

int main(int argc, char **argv) {
  const char *cmd = "serve";
  int i = 1;
  if (argc > 1 && argv[1][0] != '-') {
    cmd = argv[1];
    i = 2;
  }
  if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
    printf("ankusa %s\n", AK_VERSION);
    return 0;
  }
  if (strcmp(cmd, "help") == 0) {
    usage(stdout);
    return 0;
  }
  if (strcmp(cmd, "inspect") == 0) return cmd_inspect(argc - i, argv + i);
  const char *config = NULL;
  for (; i < argc; i++) {
    if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) config = argv[++i];
    else if (strncmp(argv[i], "--config=", 9) == 0) config = argv[i] + 9;
    else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "ankusa: unknown argument %s\n", argv[i]);
      usage(stderr);
      return 64;
    }
  }
  if (strcmp(cmd, "serve") == 0 || strcmp(cmd, "start") == 0) return cmd_serve(config);
  if (strcmp(cmd, "check-config") == 0) return cmd_check(config);
  if (strcmp(cmd, "print-config") == 0) return cmd_print(config);
  fprintf(stderr, "ankusa: unknown command %s\n", cmd);
  usage(stderr);
  return 64;
}
