/* The backup section, the restore and backup modules, and the CLI (module.h). */
#include "backup/module.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "archive/compactor.h"
#include "backup/backup.h"
#include "core/blobcfg.h"
#include "core/clock.h"
#include "core/fsutil.h"
#include "core/instance.h"
#include "core/log.h"
#include "core/metrics.h"
#include "core/node.h"
#include "net/httpc.h"
#include "store/store.h"

/* ------------------------------------------------------------------ the section ---- */

/* Defaults and why:
 *   interval_ms 60000: the original's; a lost host loses at most the hooks of one interval.
 *   keep 3: the original's; a bad newest backup leaves two older ones to restore by hand.
 *   verify_interval_ms 3600000: a read-back downloads every file of the newest backup, so
 *     once an hour finds a damaged or deleted object long before a restore needs it,
 *     without paying the whole store's egress every interval. 0 turns it off. */
static const ak_opt_t backup_rows[] = {
  {.key = "enabled", .type = AK_OPT_BOOL, .def = "false", .env = "ANKUSA_BACKUP_ENABLED",
   .doc = "continuous store backup, and restore at boot into an empty data_dir", AK_AT(ak_backup_cfg_t, enabled)},
  {.key = "interval_ms", .type = AK_OPT_INT, .def = "60000", .min = 100, .flags = AK_OPTF_HAS_MIN,
   .doc = "how often a checkpoint is uploaded: a lost host loses at most the hooks acked since the last one",
   AK_AT(ak_backup_cfg_t, interval_ms)},
  {.key = "keep", .type = AK_OPT_INT, .def = "3", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "complete backups kept on each store", AK_AT(ak_backup_cfg_t, keep)},
  {.key = "store", .type = AK_OPT_MAP, .flags = AK_OPTF_NULLABLE, .children = ak_blobcfg_store_rows,
   .doc = "where backups live (unset: the storage section's store), under <storage.key_prefix>backup/"},
  {.key = "secondary", .type = AK_OPT_MAP, .flags = AK_OPTF_NULLABLE, .children = ak_blobcfg_store_rows,
   .doc = "a second store, written after the first and restored from when the first cannot be read"},
  {.key = "signing_key", .type = AK_OPT_STRING, .min = 32, .flags = AK_OPTF_NULLABLE | AK_OPTF_SECRET | AK_OPTF_HAS_MIN,
   .env = "ANKUSA_BACKUP_SIGNING_KEY",
   .doc = "HMAC-SHA256 key of the manifests (at least 32 bytes; required when enabled): a restore refuses a "
          "manifest it did not sign",
   AK_AT(ak_backup_cfg_t, signing_key)},
  {.key = "verify_interval_ms", .type = AK_OPT_INT, .def = "3600000", .min = 0, .flags = AK_OPTF_HAS_MIN,
   .doc = "how often the newest backup is read back and checked on each store (0: never)",
   AK_AT(ak_backup_cfg_t, verify_interval_ms)},
  {0},
};

static void backup_check(ak_check_t *c, json_t *b, json_t *root) {
  (void)root;
  const char *names[] = {"store", "secondary"};
  for (size_t i = 0; i < 2; i++) {
    json_t *st = json_object_get(b, names[i]);
    char path[32];
    snprintf(path, sizeof path, "backup.%s", names[i]);
    if (json_is_object(st)) ak_blobcfg_check(c, path, st);
  }
  if (json_is_true(json_object_get(b, "enabled")) && !json_is_string(json_object_get(b, "signing_key")) &&
      !ak_check_reported_under(c, "backup.signing_key"))
    ak_check_error(c, "backup.signing_key: required when backup.enabled is true (the manifests are signed; "
                      "32 random bytes or more, e.g. `openssl rand -base64 32`)");
}

const ak_backup_cfg_t *ak_backup_cfg(const ak_config_t *cfg) { return ak_config_of(cfg, &ak_mod_backup); }

/* The targets of a config: backup.store (else the storage section), backup.secondary. */
static ak_backup_t *open_targets(const ak_config_t *cfg, const char *instance, ak_httpc_t *httpc, char *err,
                                 size_t errlen) {
  const ak_backup_cfg_t *bc = ak_backup_cfg(cfg);
  const ak_node_cfg_t *nc = ak_node_cfg(cfg);
  const ak_storage_cfg_t *sc = ak_storage_cfg(cfg);
  const json_t *sec = json_object_get(cfg->effective, "backup");
  const json_t *primary = json_object_get(sec, "store");
  if (!json_is_object(primary)) primary = json_object_get(cfg->effective, "storage");
  char root[4096];
  snprintf(root, sizeof root, "%s/%s/segments", nc && nc->data_dir ? nc->data_dir : "./data", instance);
  if (!bc->signing_key) {
    snprintf(err, errlen, "backup.signing_key is not set");
    return NULL;
  }
  ak_backup_opts_t o = {
    .key = (const uint8_t *)bc->signing_key,
    .keylen = strlen(bc->signing_key),
    .keep = bc->keep,
    .primary = primary,
    .secondary = json_is_object(json_object_get(sec, "secondary")) ? json_object_get(sec, "secondary") : NULL,
    .default_root = root,
    .key_prefix = sc && sc->key_prefix ? sc->key_prefix : "",
    .httpc = httpc,
  };
  return ak_backup_new(&o, err, errlen);
}

static char *store_dir(const ak_config_t *cfg, const char *instance) {
  const ak_node_cfg_t *nc = ak_node_cfg(cfg);
  return ak_store_path_of(nc && nc->data_dir ? nc->data_dir : "./data", instance);
}

/* ------------------------------------------------------------------- restore ---- */

static bool exists(const char *dir, const char *name) {
  char p[4096];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  return access(p, F_OK) == 0;
}

/* The store files in dir (MANIFEST-*, *.sst, *.blob, *.log), comma-joined into out. */
static size_t store_files(const char *dir, char *out, size_t n) {
  out[0] = '\0';
  DIR *d = opendir(dir);
  if (!d) return 0;
  size_t count = 0, off = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!ak_backup_is_store_file(e->d_name)) continue;
    if (count < 8 && off < n) {
      int k = snprintf(out + off, n - off, "%s%s", count ? "," : "", e->d_name);
      if (k > 0) off += (size_t)k;
    }
    count++;
  }
  closedir(d);
  return count;
}

/* Empties dir of what an interrupted restore left (its marker says the files are ours). */
static void clear_restored(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.' || !strcmp(e->d_name, AK_BACKUP_MARKER)) continue;
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    unlink(p);
  }
  closedir(d);
}

static int write_marker(const char *dir) {
  char p[4096];
  snprintf(p, sizeof p, "%s/%s", dir, AK_BACKUP_MARKER);
  int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  int rc = fsync(fd);
  close(fd);
  return rc == 0 ? ak_fsync_dir(dir) : -1;
}

static void drop_marker(const char *dir) {
  char p[4096];
  snprintf(p, sizeof p, "%s/%s", dir, AK_BACKUP_MARKER);
  if (unlink(p) == 0) ak_fsync_dir(dir);
}

/* Restore at boot (the restore module's open, before the store): 0 when the store can open
 * (it has CURRENT, was restored, or is new), else -1 with err. */
static int restore_at_boot(ak_instance_t *inst, char **err) {
  const ak_backup_cfg_t *bc = ak_backup_cfg(inst->cfg);
  if (!bc || !bc->enabled) return 0;
  char *dir = store_dir(inst->cfg, inst->name);
  if (!dir) return AK_MODULE_FAILED;
  int rc = 0;
  char files[512];
  if (exists(dir, "CURRENT")) {
    if (exists(dir, AK_BACKUP_MARKER)) {
      ak_log(AK_LOG_INFO, "backup", "a restore had finished before the last stop; the store opens", "store=%s", dir);
      drop_marker(dir);
    }
    free(dir);
    return 0;
  }
  if (exists(dir, AK_BACKUP_MARKER)) {
    ak_log(AK_LOG_WARNING, "backup", "an interrupted restore left files: removing them and restoring again",
           "store=%s", dir);
    clear_restored(dir);
  } else if (store_files(dir, files, sizeof files)) {
    ak_log(AK_LOG_ERROR, "backup", "unrecognized_store_files: refusing to start", "store=%s files=%s", dir, files);
    if (asprintf(err, "store_restore_failed: %s holds store files without CURRENT (%s): not restoring over them "
                 "and not starting empty; move them away or restore them by hand", dir, files) < 0)
      *err = NULL;
    free(dir);
    return AK_MODULE_FAILED;
  }
  char why[2048] = "";
  ak_httpc_t *hc = ak_httpc_new(&(ak_httpc_opts_t){.name = "ak-restore", .workers = 1}, why, sizeof why);
  ak_backup_t *b = hc ? open_targets(inst->cfg, inst->name, hc, why, sizeof why) : NULL;
  if (!b || ak_mkdirs_durable(dir, 0750) != 0 || write_marker(dir) != 0) {
    if (!why[0]) snprintf(why, sizeof why, "cannot write %s/%s: %s", dir, AK_BACKUP_MARKER, strerror(errno));
    rc = -1;
  } else {
    int64_t t0 = ak_mono_ns();
    const char *from = NULL;
    ak_backup_manifest_t m = {0};
    int r = ak_backup_restore(b, dir, NULL, &from, &m, why, sizeof why);
    if (r == AK_RESTORE_DONE) {
      uint64_t bytes = 0;
      for (size_t i = 0; i < m.nfiles; i++) bytes += m.files[i].size;
      if (why[0]) ak_log(AK_LOG_WARNING, "backup", "restored from the secondary store", "primary=\"%s\"", why);
      ak_log(AK_LOG_INFO, "backup", "store restored from a backup: hooks acked after it are not in it",
             "store=%s from=%s backup_id=%s created_at_ms=%lld files=%zu bytes=%llu seconds=%.3f", dir, from, m.id,
             (long long)m.created_at_ms, m.nfiles, (unsigned long long)bytes, (double)(ak_mono_ns() - t0) / 1e9);
      ak_backup_manifest_clear(&m);
      drop_marker(dir);
    } else if (r == AK_RESTORE_EMPTY) {
      ak_log(AK_LOG_INFO, "backup", "no backup yet on any backup store: a new node, starting with an empty store",
             "store=%s", dir);
      drop_marker(dir);
    } else {
      rc = -1;
    }
  }
  ak_backup_free(b);
  ak_httpc_free(hc);
  if (rc != 0) {
    ak_log(AK_LOG_ERROR, "backup", "store_restore_failed: refusing to start (never starting empty)", "store=%s reason=\"%s\"",
           dir, why);
    if (asprintf(err, "store_restore_failed: %s", why) < 0) *err = NULL;
  }
  free(dir);
  return rc == 0 ? 0 : AK_MODULE_FAILED;
}

const ak_module_t ak_mod_restore = {
  .name = "restore",
  .roles = AK_ROLES_STORE,
  .open = restore_at_boot,
};

/* -------------------------------------------------------------- the uploader ---- */

typedef struct ak_backup_mod {
  ak_instance_t *inst;
  ak_backup_t *b;
  char store_id[33];
  char ckpt[4096];
  int64_t interval_ms, verify_ms;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool started, stopping, run_now;
  int64_t last_ok_ms;            /* wall time of the newest backup a store took */
  ak_series_t *runs[4], *age, *fail[AK_BACKUP_MAX_TARGETS], *verify_fail[AK_BACKUP_MAX_TARGETS],
    *bytes[AK_BACKUP_MAX_TARGETS], *duration;
} backup_mod_t;

static void log_result(backup_mod_t *bm, const char *id, const ak_backup_result_t *r, size_t i, double secs) {
  const char *tn = ak_backup_target_name(bm->b, i), *where = ak_backup_target_where(bm->b, i);
  if (r->rc == AK_BACKUP_OK) {
    ak_log(AK_LOG_INFO, "backup", "backup taken", "target=%s store=\"%s\" backup_id=%s uploaded=%zu skipped=%zu "
           "bytes=%llu seconds=%.3f", tn, where, id, r->uploaded, r->skipped, (unsigned long long)r->bytes, secs);
    if (r->purge_skipped)
      ak_log(AK_LOG_WARNING, "backup", "old backups not purged", "target=%s reason=\"%s\"", tn, r->why);
    return;
  }
  ak_log(AK_LOG_ERROR, "backup", r->rc == AK_BACKUP_FAILED ? "backup failed" : ak_backup_result_names[r->rc],
         "target=%s store=\"%s\" stage=%s reason=\"%s\"", tn, where, r->stage, r->why);
}

/* One backup to every target; counted and logged. */
static void run_once(backup_mod_t *bm, const char *why_run) {
  ak_backup_result_t res[AK_BACKUP_MAX_TARGETS];
  memset(res, 0, sizeof res);
  char id[AK_BACKUP_ID_LEN + 1] = "", why[512] = "";
  int64_t t0 = ak_mono_ns();
  int rc = ak_backup_run(bm->b, bm->inst->store, bm->store_id, bm->ckpt, id, res, why, sizeof why);
  double secs = (double)(ak_mono_ns() - t0) / 1e9;
  ak_gauge_set(bm->duration, secs);
  if (rc < 0) {
    ak_counter_add(bm->runs[AK_BACKUP_FAILED], 1);
    for (size_t i = 0; i < ak_backup_ntargets(bm->b); i++) ak_counter_add(bm->fail[i], 1);
    ak_log(AK_LOG_ERROR, "backup", "backup failed", "stage=checkpoint reason=\"%s\" run=%s", why, why_run);
    return;
  }
  int worst = AK_BACKUP_OK;
  bool any_ok = false;
  for (size_t i = 0; i < ak_backup_ntargets(bm->b); i++) {
    log_result(bm, id, &res[i], i, secs);
    ak_counter_add(bm->bytes[i], res[i].bytes);
    if (res[i].rc == AK_BACKUP_OK) any_ok = true;
    else {
      ak_counter_add(bm->fail[i], 1);
      if (worst == AK_BACKUP_OK || res[i].rc > worst) worst = res[i].rc;
    }
  }
  ak_counter_add(bm->runs[worst], 1);
  if (any_ok) {
    pthread_mutex_lock(&bm->mu);
    bm->last_ok_ms = ak_now_ms();
    pthread_mutex_unlock(&bm->mu);
  }
}

static void verify_once(backup_mod_t *bm) {
  for (size_t i = 0; i < ak_backup_ntargets(bm->b); i++) {
    char why[768] = "";
    int64_t t0 = ak_mono_ns();
    ak_backup_manifest_t m = {0};
    int rc = ak_backup_verify(bm->b, i, NULL, true, &m, why, sizeof why);
    const char *tn = ak_backup_target_name(bm->b, i);
    if (rc == 0) {
      ak_log(AK_LOG_INFO, "backup", "backup verified", "target=%s backup_id=%s files=%zu seconds=%.3f", tn, m.id,
             m.nfiles, (double)(ak_mono_ns() - t0) / 1e9);
      ak_backup_manifest_clear(&m);
    } else if (rc < 0) {
      ak_counter_add(bm->verify_fail[i], 1);
      ak_log(AK_LOG_ERROR, "backup", "backup verify failed: the newest backup would not restore", "target=%s reason=\"%s\"",
             tn, why);
    }
  }
}

/* The newest backup already on a target: the age counts from it, not from this start (a
 * restart must not hide a stale backup); none anywhere: from this start. */
static void initial_age(backup_mod_t *bm) {
  int64_t newest = 0;
  for (size_t i = 0; i < ak_backup_ntargets(bm->b); i++) {
    ak_backup_entry_t *e = NULL;
    size_t n = 0;
    char why[256];
    if (ak_backup_list(bm->b, i, &e, &n, why, sizeof why) == 0) {
      for (size_t k = 0; k < n; k++) {
        if (!e[k].latest) continue;
        /* the id's first 10 characters are its ms */
        int64_t ms = 0;
        static const char cf[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
        for (int c = 0; c < 10; c++) ms = ms * 32 + (int64_t)(strchr(cf, e[k].id[c]) - cf);
        if (ms > newest) newest = ms;
      }
    }
    free(e);
  }
  if (newest > 0) {
    pthread_mutex_lock(&bm->mu);
    bm->last_ok_ms = newest;
    pthread_mutex_unlock(&bm->mu);
  }
}

static void *backup_main(void *arg) {
  backup_mod_t *bm = arg;
  pthread_setname_np(pthread_self(), "ak-backup");
  ak_store_thread_init();
  initial_age(bm);
  int64_t next_run = ak_mono_ns() / 1000000 + bm->interval_ms;
  int64_t next_verify = bm->verify_ms > 0 ? ak_mono_ns() / 1000000 + bm->verify_ms : INT64_MAX;
  pthread_mutex_lock(&bm->mu);
  while (!bm->stopping) {
    int64_t now = ak_mono_ns() / 1000000;
    ak_gauge_set(bm->age, (double)(ak_now_ms() - bm->last_ok_ms) / 1000.0);
    if (now >= next_run || bm->run_now) {
      bm->run_now = false;
      pthread_mutex_unlock(&bm->mu);
      run_once(bm, "interval");
      pthread_mutex_lock(&bm->mu);
      next_run = ak_mono_ns() / 1000000 + bm->interval_ms;
      continue;
    }
    if (now >= next_verify) {
      pthread_mutex_unlock(&bm->mu);
      verify_once(bm);
      pthread_mutex_lock(&bm->mu);
      next_verify = ak_mono_ns() / 1000000 + bm->verify_ms;
      continue;
    }
    /* wake at least every second: the age gauge moves */
    int64_t wait = next_run < next_verify ? next_run - now : next_verify - now;
    if (wait > 1000) wait = 1000;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += wait / 1000;
    ts.tv_nsec += (wait % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&bm->cv, &bm->mu, &ts);
  }
  pthread_mutex_unlock(&bm->mu);
  /* the clean stop's last checkpoint: every module that writes stopped before this one */
  ak_log(AK_LOG_INFO, "backup", "clean stop: taking the last backup", NULL);
  run_once(bm, "stop");
  ak_gauge_set(bm->age, (double)(ak_now_ms() - bm->last_ok_ms) / 1000.0);
  return NULL;
}

static void mod_free(backup_mod_t *bm) {
  if (!bm) return;
  ak_backup_free(bm->b);
  pthread_mutex_destroy(&bm->mu);
  pthread_cond_destroy(&bm->cv);
  free(bm);
}

static int backup_open(ak_instance_t *inst, char **err) {
  const ak_backup_cfg_t *bc = ak_backup_cfg(inst->cfg);
  if (!bc->enabled) return 0;
  backup_mod_t *bm = calloc(1, sizeof *bm);
  if (!bm) return AK_MODULE_FAILED;
  bm->inst = inst;
  pthread_mutex_init(&bm->mu, NULL);
  pthread_cond_init(&bm->cv, NULL);
  bm->interval_ms = bc->interval_ms;
  bm->verify_ms = bc->verify_interval_ms;
  bm->last_ok_ms = ak_now_ms();
  char e[512] = "";
  bm->b = open_targets(inst->cfg, inst->name, inst->httpc, e, sizeof e);
  if (!bm->b || ak_backup_store_id(inst->store, bm->store_id, e, sizeof e) != 0) {
    if (asprintf(err, "backup: %s", e) < 0) *err = NULL;
    mod_free(bm);
    return AK_MODULE_FAILED;
  }
  char *sd = store_dir(inst->cfg, inst->name);
  snprintf(bm->ckpt, sizeof bm->ckpt, "%s.checkpoint", sd ? sd : "./data/default/store");
  free(sd);
  ak_metrics_t *m = inst->metrics;
  const char *const rl[] = {"instance", "result", NULL}, *const tl[] = {"instance", "target", NULL};
  ak_family_t *rf = ak_metrics_family(m, "ankusa_backup_runs_total", "Backup runs by result (the worst store's).",
                                      AK_METRIC_COUNTER, rl, NULL, 0);
  for (int r = 0; r < 4; r++) bm->runs[r] = ak_metrics_series(rf, (const char *const[]){inst->name, ak_backup_result_names[r]});
  ak_family_t *ff = ak_metrics_family(m, "ankusa_backup_failures_total",
                                      "Backups a store did not take (failed, foreign_backup or prefix_shared).",
                                      AK_METRIC_COUNTER, tl, NULL, 0);
  ak_family_t *vf = ak_metrics_family(m, "ankusa_backup_verify_failed_total",
                                      "Read-backs of the newest backup that failed (a signature, a size, a sha256).",
                                      AK_METRIC_COUNTER, tl, NULL, 0);
  ak_family_t *bf = ak_metrics_family(m, "ankusa_backup_uploaded_bytes_total", "Bytes uploaded by backups.",
                                      AK_METRIC_COUNTER, tl, NULL, 0);
  for (size_t i = 0; i < ak_backup_ntargets(bm->b); i++) {
    const char *v[] = {inst->name, ak_backup_target_name(bm->b, i)};
    bm->fail[i] = ak_metrics_series(ff, v);
    bm->verify_fail[i] = ak_metrics_series(vf, v);
    bm->bytes[i] = ak_metrics_series(bf, v);
    ak_blob_instrument(ak_backup_target_store(bm->b, i), m, inst->name);
  }
  bm->age = ak_metrics_instance_series(m, inst->name, "ankusa_backup_age_seconds",
                                       "Seconds since the last backup a store took: what a lost host would take with it.",
                                       AK_METRIC_GAUGE);
  bm->duration = ak_metrics_instance_series(m, inst->name, "ankusa_backup_duration_seconds",
                                            "Duration of the last backup run.", AK_METRIC_GAUGE);
  char where[600];
  int off = snprintf(where, sizeof where, "%s", ak_backup_target_where(bm->b, 0));
  if (ak_backup_ntargets(bm->b) > 1 && off > 0 && (size_t)off < sizeof where)
    snprintf(where + off, sizeof where - (size_t)off, " and %s", ak_backup_target_where(bm->b, 1));
  const char *wal = json_string_value(json_object_get(json_object_get(inst->cfg->effective, "wal"), "type"));
  if (!wal || strcmp(wal, "none")) /* under none the store's line says what a 201 means */
    ak_log(AK_LOG_INFO, "durability",
           "wal.type=disk with backup: a 201 means the hook is fsynced in this host's store; it survives a process "
           "crash and power loss on this host, and the loss of this host but for the hooks acked after the last "
           "backup",
           "backup_interval_ms=%lld backup_to=\"%s\" store_id=%s", (long long)bm->interval_ms, where, bm->store_id);
  inst->backup = bm;
  return 0;
}

static int backup_start(ak_instance_t *inst, char **err) {
  backup_mod_t *bm = inst->backup;
  if (!bm) return 0;
  if (pthread_create(&bm->thread, NULL, backup_main, bm) != 0) {
    *err = strdup("backup: cannot start its thread");
    return AK_MODULE_FAILED;
  }
  bm->started = true;
  return 0;
}

static void backup_stop(ak_instance_t *inst) {
  backup_mod_t *bm = inst->backup;
  if (!bm || !bm->started) return;
  pthread_mutex_lock(&bm->mu);
  bm->stopping = true;
  pthread_cond_broadcast(&bm->cv);
  pthread_mutex_unlock(&bm->mu);
  pthread_join(bm->thread, NULL);
  bm->started = false;
}

static void backup_close(ak_instance_t *inst) {
  mod_free(inst->backup);
  inst->backup = NULL;
}

const ak_module_t ak_mod_backup = {
  .name = "backup",
  .section = "backup",
  .doc = "store backups to one or two blob stores, and restore at boot (off by default)",
  .options = backup_rows,
  .cfg_size = sizeof(ak_backup_cfg_t),
  .check = backup_check,
  .roles = AK_ROLES_STORE,
  .open = backup_open,
  .start = backup_start,
  .stop = backup_stop,
  .close = backup_close,
};

/* ----------------------------------------------------------------------- CLI ---- */

static ak_backup_t *cli_targets(const ak_config_t *cfg, ak_httpc_t **hc) {
  char why[512] = "";
  if (!ak_backup_cfg(cfg)->signing_key) {
    fprintf(stderr, "ankusa: backup.signing_key is not set in this config\n");
    return NULL;
  }
  *hc = ak_httpc_new(&(ak_httpc_opts_t){.name = "ak-backup-cli", .workers = 1}, why, sizeof why);
  ak_backup_t *b = *hc ? open_targets(cfg, "default", *hc, why, sizeof why) : NULL;
  if (!b) fprintf(stderr, "ankusa: %s\n", why);
  return b;
}

static int cmd_list(ak_backup_t *b) {
  int rc = 0;
  for (size_t i = 0; i < ak_backup_ntargets(b); i++) {
    ak_backup_entry_t *e = NULL;
    size_t n = 0;
    char why[512];
    printf("%s store (%s):\n", ak_backup_target_name(b, i), ak_backup_target_where(b, i));
    if (ak_backup_list(b, i, &e, &n, why, sizeof why) != 0) {
      printf("  cannot list: %s\n", why);
      rc = 1;
      continue;
    }
    if (!n) printf("  no backups\n");
    for (size_t k = 0; k < n; k++)
      printf("  %s %s%s\n", e[k].id, e[k].complete ? "complete" : "incomplete (no manifest)",
             e[k].latest ? " LATEST" : "");
    free(e);
  }
  return rc;
}

static int cmd_verify(ak_backup_t *b, const char *id) {
  int rc = 0;
  for (size_t i = 0; i < ak_backup_ntargets(b); i++) {
    char why[768] = "";
    ak_backup_manifest_t m = {0};
    int r = ak_backup_verify(b, i, id, false, &m, why, sizeof why);
    const char *tn = ak_backup_target_name(b, i);
    if (r == 0) {
      uint64_t bytes = 0;
      for (size_t k = 0; k < m.nfiles; k++) bytes += m.files[k].size;
      printf("%s: backup %s verified: signature ok, %zu files, %llu bytes, every size and sha256 match\n", tn, m.id,
             m.nfiles, (unsigned long long)bytes);
      ak_backup_manifest_clear(&m);
    } else if (r == AK_BACKUP_NOT_THERE) {
      printf("%s: no backup (no LATEST)\n", tn);
    } else {
      printf("%s: FAILED: %s\n", tn, why);
      rc = 1;
    }
  }
  return rc;
}

static int cmd_now(const ak_config_t *cfg, ak_backup_t *b) {
  char *dir = store_dir(cfg, "default");
  ak_store_t *st = dir ? ak_store_new(dir, false) : NULL;
  char *err = NULL;
  if (!st || ak_store_open(st, &err) != 0) {
    fprintf(stderr, "ankusa: backup now: cannot open the store at %s (a running node backs itself up every "
            "backup.interval_ms and on a clean stop; stop it first for a backup by hand): %s\n",
            dir ? dir : "?", err ? err : "out of memory");
    free(err);
    ak_store_free(st);
    free(dir);
    return 1;
  }
  char sid[33], why[512] = "", id[AK_BACKUP_ID_LEN + 1] = "";
  ak_backup_result_t res[AK_BACKUP_MAX_TARGETS];
  memset(res, 0, sizeof res);
  int rc = ak_backup_store_id(st, sid, why, sizeof why);
  char ck[4200];
  snprintf(ck, sizeof ck, "%s.checkpoint", dir);
  if (rc == 0) rc = ak_backup_run(b, st, sid, ck, id, res, why, sizeof why);
  if (rc < 0) fprintf(stderr, "ankusa: backup now: %s\n", why);
  for (size_t i = 0; rc >= 0 && i < ak_backup_ntargets(b); i++) {
    if (res[i].rc == AK_BACKUP_OK)
      printf("%s: backup %s taken: %zu files uploaded, %zu already there, %llu bytes%s%s\n",
             ak_backup_target_name(b, i), id, res[i].uploaded, res[i].skipped, (unsigned long long)res[i].bytes,
             res[i].purge_skipped ? "; old backups not purged: " : "", res[i].purge_skipped ? res[i].why : "");
    else
      printf("%s: %s at %s: %s\n", ak_backup_target_name(b, i), ak_backup_result_names[res[i].rc], res[i].stage,
             res[i].why);
  }
  ak_store_free(st);
  free(dir);
  return rc == 0 ? 0 : 1;
}

int ak_backup_cmd(const ak_config_t *cfg, int argc, char **argv) {
  const char *sub = argc > 0 ? argv[0] : NULL, *id = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--id") && i + 1 < argc) id = argv[++i];
    else {
      fprintf(stderr, "ankusa: backup: unknown argument %s\n", argv[i]);
      return 64;
    }
  }
  if (!sub || (strcmp(sub, "list") && strcmp(sub, "verify") && strcmp(sub, "now"))) {
    fprintf(stderr, "usage: ankusa backup list|verify [--id ID]|now [--config FILE]\n");
    return 64;
  }
  ak_httpc_t *hc = NULL;
  ak_backup_t *b = cli_targets(cfg, &hc);
  int rc = 1;
  if (b) {
    if (!strcmp(sub, "list")) rc = cmd_list(b);
    else if (!strcmp(sub, "verify")) rc = cmd_verify(b, id);
    else rc = cmd_now(cfg, b);
  }
  ak_backup_free(b);
  ak_httpc_free(hc);
  return rc;
}

int ak_restore_cmd(const ak_config_t *cfg, int argc, char **argv) {
  const char *to = NULL, *id = NULL;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--to") && i + 1 < argc) to = argv[++i];
    else if (!strcmp(argv[i], "--id") && i + 1 < argc) id = argv[++i];
    else {
      fprintf(stderr, "ankusa: restore: unknown argument %s\n", argv[i]);
      return 64;
    }
  }
  if (!to) {
    fprintf(stderr, "usage: ankusa restore --to DIR [--id ID] [--config FILE]\n");
    return 64;
  }
  if (id && !ak_backup_id_ok(id, strlen(id))) {
    fprintf(stderr, "ankusa: restore: %s is not a backup id\n", id);
    return 64;
  }
  DIR *d = opendir(to);
  if (d) {
    struct dirent *e;
    bool empty = true;
    while ((e = readdir(d)))
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) empty = false;
    closedir(d);
    if (!empty) {
      fprintf(stderr, "ankusa: restore: %s is not empty\n", to);
      return 1;
    }
  } else if (ak_mkdirs_durable(to, 0750) != 0) {
    fprintf(stderr, "ankusa: restore: cannot make %s: %s\n", to, strerror(errno));
    return 1;
  }
  ak_httpc_t *hc = NULL;
  ak_backup_t *b = cli_targets(cfg, &hc);
  int rc = 1;
  if (b) {
    char why[2048] = "";
    const char *from = NULL;
    ak_backup_manifest_t m = {0};
    int r = ak_backup_restore(b, to, id, &from, &m, why, sizeof why);
    if (r == AK_RESTORE_DONE) {
      printf("restored backup %s (created_at_ms %lld, %zu files) from the %s store into %s%s%s\n", m.id,
             (long long)m.created_at_ms, m.nfiles, from, to, why[0] ? "; before it: " : "", why);
      ak_backup_manifest_clear(&m);
      rc = 0;
    } else if (r == AK_RESTORE_EMPTY) {
      fprintf(stderr, "ankusa: restore: no backup on any store (%s)\n", why);
    } else {
      fprintf(stderr, "ankusa: restore failed: %s\n", why);
    }
  }
  ak_backup_free(b);
  ak_httpc_free(hc);
  return rc;
}
