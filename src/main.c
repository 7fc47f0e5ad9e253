/* CLI: serve (default), check-config, print-config, healthcheck, version, inspect hooks|rows,
 * rotate-secrets. The only
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
#include "admin/healthcheck.h"
#include "admin/hooks_api.h"
#include "admin/sources_api.h"
#include "archive/catalogue.h"
#include "archive/compactor.h"
#include "archive/segment.h"
#include "backup/module.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/config_view.h"
#include "core/envelope.h"
#include "core/log.h"
#include "core/node.h"
#include "core/notify.h"
#include "core/sources.h"
#include "edge/edge.h"
#include "modules.h"
#include "net/httpc.h"
#include "queue/writer.h"
#include "store/audit.h"
#include "store/store.h"

extern char **environ;

static void usage(FILE *f) {
  fprintf(f,
          "usage: ankusa [serve] [--config FILE]\n"
          "       ankusa check-config [--config FILE]\n"
          "       ankusa print-config [--config FILE]\n"
          "       ankusa healthcheck [--config FILE]   (GET /ready on ingest, then admin; exit 0 or 1)\n"
          "       ankusa inspect hooks --data-dir DIR [--archive [--config FILE]]   (--archive: archived ones too)\n"
          "       ankusa inspect rows --data-dir DIR [--cf NAME] [--prefix TEXT]   (every row, raw)\n"
          "       ankusa inspect segments [--config FILE] [--data-dir DIR]   (the archive catalogue)\n"
          "       ankusa inspect hook ID [--config FILE] [--data-dir DIR]   (from the store or the archive)\n"
          "       ankusa rotate-secrets [--config FILE]   (node stopped: re-seal stored secrets)\n"
          "       ankusa backup list|verify [--id ID]|now [--config FILE]   (the backups; now: node stopped)\n"
          "       ankusa restore --to DIR [--id ID] [--config FILE]   (a backup into DIR, checked)\n"
          "       ankusa options --markdown | --secrets\n"
          "       ankusa version\n");
}

static int load_config(const char *path, ak_config_t **cfg) {
  char *err = NULL;
  if (ak_config_load(ak_modules(), path, (const char *const *)environ, cfg, &err) != 0) {
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

/* The original's success line: `config OK: roles=[:edge, :dispatch, :storage] sources=a,b
 * wal=disk storage=Ankusa.BlobStore.LocalFS`, the roles as Elixir prints a list of atoms and
 * the archive's blob store by the original's module name (as GET /v1/config names it). */
static int cmd_check(const char *path) {
  ak_config_t *cfg;
  int rc = load_config(path, &cfg);
  if (rc) return rc;
  char roles[128];
  const ak_sources_cfg_t *sc = ak_sources_cfg(cfg);
  ak_node_roles_text(ak_node_cfg(cfg)->roles, roles, sizeof roles);
  printf("config OK: roles=[");
  for (char *r = roles, *next; r && *r; r = next) {
    next = strchr(r, ',');
    if (next) *next++ = '\0';
    printf("%s:%s", r == roles ? "" : ", ", r);
  }
  printf("] sources=");
  for (size_t i = 0; i < sc->n; i++) printf("%s%s", i ? "," : "", sc->v[i].id);
  printf(" wal=%s", ak_wal_type_text(ak_wal_cfg(cfg)->type));
  const char *st = json_string_value(json_object_get(json_object_get(cfg->effective, "storage"), "type"));
  printf(" storage=Ankusa.BlobStore.%s\n", st && !strcmp(st, "s3") ? "S3" : st && !strcmp(st, "gcs") ? "GCS" : "LocalFS");
  ak_config_free(cfg);
  return 0;
}

static int cmd_print(const char *path) {
  ak_config_t *cfg;
  int rc = load_config(path, &cfg);
  if (rc) return rc;
  json_t *j = ak_config_view(cfg);
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
  uint64_t *seqs; /* --archive: the seqs printed from the store, in order */
  size_t nseqs, capseqs;
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
  if (ic->capseqs != (size_t)-1 && ak_buf_grow(&ic->seqs, &ic->capseqs, ic->nseqs + 1, sizeof *ic->seqs) == 0)
    ic->seqs[ic->nseqs++] = ak_get_u64((const uint8_t *)k);
  return 0;
}

/* inspect hooks --archive: the archived hooks the store no longer holds, segment by
 * segment, each line as a stored one's plus "from": "archive". */
typedef struct {
  inspect_ctx_t *ic;
  ak_blob_t *blob;
  int rc;
} arch_list_t;

static bool printed(const inspect_ctx_t *ic, uint64_t seq) {
  size_t lo = 0, hi = ic->nseqs;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (ic->seqs[mid] < seq) lo = mid + 1;
    else hi = mid;
  }
  return lo < ic->nseqs && ic->seqs[lo] == seq;
}

static int arch_frame(void *ctx, const uint8_t *p, size_t n, uint64_t off) {
  (void)off;
  arch_list_t *al = ctx;
  ak_envelope_t env;
  if (ak_envelope_decode(p, n, &env) != 0) {
    al->rc = 1;
    return 0;
  }
  if (!printed(al->ic, env.seq)) {
    json_t *j = ak_hooks_api_json(&env, 0);
    json_object_set_new(j, "from", json_string("archive"));
    char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    puts(s);
    free(s);
    json_decref(j);
    al->ic->n++;
  }
  ak_envelope_clear(&env);
  return 0;
}

static int arch_row(void *ctx, const ak_cat_row_t *r) {
  arch_list_t *al = ctx;
  uint8_t *seg = NULL;
  size_t len = 0;
  char err[512];
  int rc = ak_blob_get(al->blob, r->seg_key, &seg, &len, err, sizeof err);
  if (rc != AK_BLOB_OK || len != r->seg_bytes || ak_seg_walk(seg, len, arch_frame, al) != AK_SEG_OK) {
    fprintf(stderr, "ankusa: archive segment %s: %s\n", r->seg_key,
            rc == AK_BLOB_NOT_FOUND ? "gone" : rc != AK_BLOB_OK ? err : "damaged");
    al->rc = 1;
  }
  free(seg);
  return 0;
}

/* A key or value as text: printable ASCII as is, every other byte (and the backslash) as
 * \xNN, so a line is one row whatever its bytes. */
static void put_escaped(const char *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)p[i];
    if (c >= 0x20 && c < 0x7f && c != '\\') fputc(c, stdout);
    else printf("\\x%02x", c);
  }
}

static int rows_one(const char *k, size_t kl, const char *v, size_t vl, void *ctx) {
  fputs((const char *)ctx, stdout);
  fputc('\t', stdout);
  put_escaped(k, kl);
  fputc('\t', stdout);
  put_escaped(v, vl);
  fputc('\n', stdout);
  return 0;
}

/* Every row of one column family (or all) whose key starts with prefix, read through the
 * store's iterator: values as the store holds them, after any block compression, so a
 * test can look for a secret that must not be there. */
static int inspect_rows(ak_store_t *st, const char *cf, const char *prefix) {
  int found = 0, rc = 0;
  for (int i = 0; i < AK_CF_COUNT && rc == 0; i++) {
    if (cf && strcmp(cf, ak_cf_names[i]) != 0) continue;
    found = 1;
    if (!ak_store_has_cf(st, i)) continue;
    rc = ak_store_scan(st, i, prefix, prefix ? strlen(prefix) : 0, rows_one, (void *)ak_cf_names[i]);
  }
  fflush(stdout);
  if (!found) {
    fprintf(stderr, "ankusa: no column family %s\n", cf);
    return 64;
  }
  if (rc != 0) {
    fprintf(stderr, "ankusa: reading the store failed part-way (corruption?); output is incomplete\n");
    return 1;
  }
  return 0;
}

static int seg_one(void *ctx, const ak_cat_row_t *r) {
  (void)ctx;
  char lo[AK_UUID_STR_LEN], hi[AK_UUID_STR_LEN];
  ak_uuid_format(r->min_id, lo);
  ak_uuid_format(r->max_id, hi);
  json_t *j = json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:s,s:s,s:I,s:s,s:s}", "first_seq", (json_int_t)r->first_seq,
                        "last_seq", (json_int_t)r->last_seq, "count", (json_int_t)r->count, "bytes",
                        (json_int_t)r->seg_bytes, "index_bytes", (json_int_t)r->idx_bytes, "min_received_at",
                        (json_int_t)r->min_received_ms, "max_received_at", (json_int_t)r->max_received_ms, "min_id",
                        lo, "max_id", hi, "archived_at", (json_int_t)r->archived_at_ms, "segment", r->seg_key,
                        "index", r->idx_key);
  char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
  puts(s);
  free(s);
  json_decref(j);
  return 0;
}

/* inspect hook ID: the store's copy, else the archive's (through the config's blob store). */
static int inspect_hook(ak_store_t *st, const ak_config_t *cfg, const char *ids) {
  uint8_t id[16];
  if (!ak_uuid_parse(ids, id)) {
    fprintf(stderr, "ankusa: %s is not a hook id\n", ids);
    return 64;
  }
  char *v = NULL;
  size_t vl = 0;
  uint64_t seq = 0;
  int rc = ak_store_find_hook(st, id, &seq, &v, &vl);
  const char *where = "store";
  if (rc < 0) {
    fprintf(stderr, "ankusa: the store cannot be read\n");
    return 1;
  }
  if (rc == 1) {
    char err[512] = "";
    ak_httpc_t *hc = ak_httpc_new(&(ak_httpc_opts_t){.name = "ak-inspect"}, err, sizeof err);
    ak_blob_t *b = hc ? ak_archive_open_blob(cfg, "default", hc, err, sizeof err) : NULL;
    if (!b) {
      ak_httpc_free(hc);
      fprintf(stderr, "ankusa: not in the store, and the archive cannot be opened: %s\n", err);
      return 1;
    }
    const ak_archive_cfg_t *ac = ak_archive_cfg(cfg);
    uint8_t *rec = NULL;
    size_t len = 0;
    int ar = ak_archive_fetch(st, b, id, ac && ac->retention_days > 0 ? ac->retention_days * 86400000LL : 0,
                              ak_now_ms(), &rec, &len, &seq, err, sizeof err);
    ak_blob_free(b);
    ak_httpc_free(hc);
    if (ar == AK_ARCHIVE_ERROR) {
      fprintf(stderr, "ankusa: the archive cannot be read: %s\n", err);
      return 1;
    }
    if (ar != AK_ARCHIVE_FOUND) {
      fprintf(stderr, "ankusa: %s: %s\n", ids, ar == AK_ARCHIVE_EXPIRED ? "expired (archive retention)" : "not found");
      return 2;
    }
    v = (char *)rec;
    vl = len;
    where = "archive";
  }
  ak_envelope_t env;
  if (ak_envelope_decode((const uint8_t *)v, vl, &env) != 0) {
    fprintf(stderr, "ankusa: the hook record is damaged\n");
    free(v);
    return 1;
  }
  json_t *j = ak_hooks_api_json(&env, 1);
  json_object_set_new(j, "from", json_string(where));
  char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
  puts(s);
  free(s);
  json_decref(j);
  ak_envelope_clear(&env);
  free(v);
  return 0;
}

static int cmd_inspect(int argc, char **argv) {
  const char *data_dir = NULL, *cf = NULL, *prefix = NULL, *config = NULL, *hook_id = NULL;
  bool rows = argc >= 1 && strcmp(argv[0], "rows") == 0;
  bool segments = argc >= 1 && strcmp(argv[0], "segments") == 0;
  bool hook = argc >= 2 && strcmp(argv[0], "hook") == 0;
  bool archive = false;
  if (argc < 1 || (strcmp(argv[0], "hooks") != 0 && !rows && !segments && !hook)) {
    usage(stderr);
    return 64;
  }
  if (hook) hook_id = argv[1];
  for (int i = hook ? 2 : 1; i < argc; i++) {
    if (strcmp(argv[i], "--data-dir") == 0 && i + 1 < argc) data_dir = argv[++i];
    else if (strncmp(argv[i], "--data-dir=", 11) == 0) data_dir = argv[i] + 11;
    else if ((segments || hook || !rows) && strcmp(argv[i], "--config") == 0 && i + 1 < argc) config = argv[++i];
    else if (!rows && !segments && !hook && strcmp(argv[i], "--archive") == 0) archive = true;
    else if (rows && strcmp(argv[i], "--cf") == 0 && i + 1 < argc) cf = argv[++i];
    else if (rows && strcmp(argv[i], "--prefix") == 0 && i + 1 < argc) prefix = argv[++i];
    else {
      fprintf(stderr, "ankusa: unknown argument %s\n", argv[i]);
      return 64;
    }
  }
  ak_config_t *cfg = NULL;
  if (segments || hook || archive) {
    /* the config names the blob store and, unless --data-dir does, the data dir */
    if (data_dir && setenv("ANKUSA_DATA_DIR", data_dir, 1) != 0) return 1;
    int lc = load_config(config, &cfg);
    if (lc) return lc;
    const ak_node_cfg_t *nc = ak_node_cfg(cfg);
    data_dir = nc && nc->data_dir ? nc->data_dir : "./data";
  }
  if (!data_dir) {
    fprintf(stderr, "ankusa: inspect %s needs --data-dir DIR (the node.data_dir)\n", argv[0]);
    return 64;
  }
  char *sp = ak_store_path_of(data_dir, "default");
  ak_store_t *st = ak_store_new(sp, true);
  char *err = NULL;
  if (ak_store_open(st, &err) != 0) {
    fprintf(stderr, "ankusa: %s\n", err);
    free(err);
    ak_store_free(st);
    free(sp);
    return 1;
  }
  if (rows) {
    int r = inspect_rows(st, cf, prefix);
    ak_store_free(st);
    free(sp);
    return r;
  }
  if (segments || hook) {
    int r = 0;
    if (segments) {
      if (ak_cat_scan(st, 0, seg_one, NULL) != 0) {
        fprintf(stderr, "ankusa: reading the archive catalogue failed part-way; output is incomplete\n");
        r = 1;
      }
      fflush(stdout);
    } else {
      r = inspect_hook(st, cfg, hook_id);
    }
    ak_store_free(st);
    free(sp);
    ak_config_free(cfg);
    return r;
  }
  inspect_ctx_t ic = {0};
  if (!archive) ic.capseqs = (size_t)-1; /* no need to remember what was printed */
  int rc = ak_store_scan(st, AK_CF_HOOKS, NULL, 0, inspect_one, &ic);
  if (rc != 0) {
    fflush(stdout);
    fprintf(stderr, "ankusa: reading the store failed part-way (corruption?); output is incomplete\n");
    ak_store_free(st);
    free(sp);
    free(ic.seqs);
    ak_config_free(cfg);
    return 1;
  }
  int arc = 0;
  if (archive) {
    char aerr[512] = "";
    ak_httpc_t *hc = ak_httpc_new(&(ak_httpc_opts_t){.name = "ak-inspect"}, aerr, sizeof aerr);
    ak_blob_t *b = hc ? ak_archive_open_blob(cfg, "default", hc, aerr, sizeof aerr) : NULL;
    arch_list_t al = {.ic = &ic, .blob = b};
    if (!b) {
      fprintf(stderr, "ankusa: the archive cannot be opened: %s\n", aerr);
      arc = 1;
    } else if (ak_cat_scan(st, 0, arch_row, &al) != 0) {
      fprintf(stderr, "ankusa: reading the archive catalogue failed part-way; output is incomplete\n");
      arc = 1;
    } else {
      arc = al.rc;
    }
    ak_blob_free(b);
    ak_httpc_free(hc);
  }
  fflush(stdout);
  ak_store_free(st);
  free(sp);
  free(ic.seqs);
  ak_config_free(cfg);
  return ic.bad || arc ? 1 : 0;
}

/* Offline (the node stopped: the store is opened for writing): every stored secret
 * re-sealed with source_store.secret_key, so the previous keys can leave the config. */
static int cmd_rotate(const char *path) {
  ak_config_t *cfg;
  int rc = load_config(path, &cfg);
  if (rc) return rc;
  const ak_node_cfg_t *nc = ak_node_cfg(cfg);
  char *sp = ak_store_path_of(nc && nc->data_dir ? nc->data_dir : "./data", "default");
  ak_store_t *st = sp ? ak_store_new(sp, false) : NULL;
  char *err = NULL;
  if (!st || ak_store_open(st, &err) != 0) {
    fprintf(stderr, "ankusa: rotate-secrets: cannot open the store at %s (stop the node first): %s\n",
            sp ? sp : "?", err ? err : "out of memory");
    free(err);
    ak_store_free(st);
    free(sp);
    ak_config_free(cfg);
    return 1;
  }
  /* the trail of the store, so the rotation is one of its rows */
  ak_instance_t inst = {.name = "default", .cfg = cfg, .store = st};
  ak_audit_t *audit = ak_audit_open(&inst, &err);
  if (!audit) {
    fprintf(stderr, "ankusa: rotate-secrets: %s\n", err ? err : "cannot open the audit trail");
    free(err);
    ak_store_free(st);
    free(sp);
    ak_config_free(cfg);
    return 1;
  }
  ak_sources_rotate_t r;
  rc = ak_sources_api_rotate(cfg, st, audit, &r, &err);
  ak_audit_free(audit);
  if (rc != 0) {
    fprintf(stderr, "ankusa: rotate-secrets: %s; nothing was rewritten\n", err ? err : "failed");
    free(err);
  } else {
    printf("rotate-secrets: %zu stored sources; %zu rows re-sealed (%zu secrets) with key id %s; the others "
           "were sealed with it already\n", r.rows, r.rewritten, r.values, r.key_id);
  }
  ak_store_free(st);
  free(sp);
  ak_config_free(cfg);
  return rc ? 1 : 0;
}

/* The option reference (docs/configuration.md holds it between markers). */
static int cmd_options(int argc, char **argv) {
  bool secrets = argc == 1 && strcmp(argv[0], "--secrets") == 0;
  if (argc != 1 || (!secrets && strcmp(argv[0], "--markdown") != 0)) {
    fprintf(stderr, "ankusa: options needs --markdown or --secrets\n");
    return 64;
  }
  char *md = secrets ? ak_config_secret_rows(ak_modules()) : ak_config_options_markdown(ak_modules());
  if (!md) return 1;
  fputs(md, stdout);
  free(md);
  return 0;
}

static int cmd_serve(const char *path) {
  ak_config_t *cfg;
  int rc = load_config(path, &cfg);
  if (rc) return rc;
  const ak_log_cfg_t *lc = ak_config_of(cfg, &ak_mod_log);
  ak_log_set_level(lc->level);

  /* signals are taken by sigwait in this thread only; block them before any thread starts */
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  signal(SIGPIPE, SIG_IGN);

  ak_node_t node;
  char *err = NULL;
  rc = ak_node_open(&node, cfg, NULL, &err);
  if (rc == 0) rc = ak_node_start(&node, &err);
  if (rc != 0) {
    if (rc == AK_MODULE_BAD_CONFIG) fprintf(stderr, "ankusa: invalid configuration\n  %s\n", err ? err : "?");
    else fprintf(stderr, "ankusa: %s\n", err ? err : "cannot start");
    free(err);
    ak_node_close(&node);
    ak_config_free(cfg);
    return rc == AK_MODULE_BAD_CONFIG ? AK_EXIT_CONFIG : 1;
  }
  ak_instance_t *inst = &node.inst;
  ak_log(AK_LOG_INFO, "node", "listening",
         "http_port=%d admin_port=%d admin_ip=%s https_port=%d sources=%zu version=%s", ak_edge_port(inst->edge),
         inst->admin ? ak_admin_port(inst->admin) : 0, ak_admin_cfg(cfg)->ip, ak_edge_tls_port(inst->edge),
         inst->sources ? ak_sources_count(inst->sources) : 0, AK_VERSION);
  /* the store is open and every listener bound: a service manager may route traffic */
  if (ak_notify_send("READY=1\nSTATUS=accepting webhooks") < 0)
    ak_log(AK_LOG_WARNING, "node", "cannot notify the service manager (NOTIFY_SOCKET)", "errno=%d", errno);

  int sig = 0;
  for (;;) {
    if (sigwait(&set, &sig) != 0) continue;
    if (sig != SIGHUP) break;
    ak_log(AK_LOG_INFO, "node", "SIGHUP: reloading the TLS certificate", NULL);
    ak_notify_send("RELOADING=1");
    ak_node_reload(&node);
    ak_notify_send("READY=1");
  }
  ak_log(AK_LOG_INFO, "node", "stopping: draining in-flight requests", "signal=%d", sig);
  ak_notify_send("STOPPING=1\nSTATUS=draining");
  /* the seed's drain (core/node.c, src/modules.c): /ready answers draining at once, the
   * ingest listeners serve on for listener.drain_delay_ms, stop accepting and wait for the
   * requests in flight; then the modules stop in reverse: the writer commits and answers
   * what is queued, the loops and the rest stop */
  ak_node_drain(&node);
  ak_node_stop(&node);
  ak_node_close(&node);
  ak_config_free(cfg);
  ak_log(AK_LOG_INFO, "node", "stopped", NULL);
  return 0;
}

/* backup ... / restore ...: --config taken out, the rest to backup/module.c. */
static int cmd_backup(const char *cmd, int argc, char **argv) {
  const char *path = NULL;
  char **rest = calloc((size_t)argc + 1, sizeof *rest);
  int n = 0;
  if (!rest) return 1;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) path = argv[++i];
    else if (strncmp(argv[i], "--config=", 9) == 0) path = argv[i] + 9;
    else rest[n++] = argv[i];
  }
  ak_config_t *cfg;
  int rc = load_config(path, &cfg);
  if (rc == 0) {
    rc = strcmp(cmd, "backup") == 0 ? ak_backup_cmd(cfg, n, rest) : ak_restore_cmd(cfg, n, rest);
    ak_config_free(cfg);
  }
  free(rest);
  return rc;
}

int main(int argc, char **argv) {
  const char *cmd = "serve";
  int i = 1;
  if (argc > 1 && argv[1][0] != '-') {
    cmd = argv[1];
    i = 2;
  }
  if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
    /* the original's two lines: the server release, then the core library */
    printf("ankusa_server %s\nankusa %s\n", AK_VERSION, AK_VERSION);
    return 0;
  }
  if (strcmp(cmd, "help") == 0) {
    usage(stdout);
    return 0;
  }
  if (strcmp(cmd, "inspect") == 0) return cmd_inspect(argc - i, argv + i);
  if (strcmp(cmd, "options") == 0) return cmd_options(argc - i, argv + i);
  if (strcmp(cmd, "backup") == 0 || strcmp(cmd, "restore") == 0) return cmd_backup(cmd, argc - i, argv + i);
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
  if (strcmp(cmd, "rotate-secrets") == 0) return cmd_rotate(config);
  if (strcmp(cmd, "healthcheck") == 0) {
    ak_config_t *cfg;
    int rc = load_config(config, &cfg);
    if (rc) return rc;
    rc = ak_healthcheck(cfg, AK_HEALTHCHECK_TIMEOUT_MS, stdout, stderr);
    ak_config_free(cfg);
    return rc;
  }
  fprintf(stderr, "ankusa: unknown command %s\n", cmd);
  usage(stderr);
  return 64;
}
