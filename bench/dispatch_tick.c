/* The cost of one dispatcher scheduling pass (ak_dispatch_debug_scan) against the size of
 * the backlog and the number of tenants. Run by bench/dispatch_tick.sh, which builds it
 * (`ninja -C build dispatch_tick`, not part of `make`).
 *
 * For each case a node is opened in a fresh data dir through core/node.c, as main.c opens
 * one, with the store and the sources by their modules (the dispatch module is not
 * opened: it would start its thread). Its store is written directly with the key codecs
 * of store/keys.h (hook record, delivery row, due key + due value: what the writer commits
 * per hook), the node is restarted, then `reps` times: a fresh dispatcher over the node
 * (ak_dispatch_new + ak_dispatch_load, what the dispatch module's open and start do
 * without the thread), and `passes` scheduling passes timed one by one. A pass claims up to dispatch.batch (128) rows and
 * keeps them claimed, so later passes continue from the tenants' cursors. The windows are
 * set far above what a pass can claim, so nothing but the batch stops a pass.
 *
 * Cases (rows due now x tenants the dispatcher tracks):
 *   10 x 10            one due row per tenant
 *   10 x 10,000        10 tenants with one due row each; 9,990 more tenants each hold one
 *                      retry due in an hour (tracked on the timer heap, not due)
 *   100,000 x 10       10,000 due rows per tenant
 *   100,000 x 10,000   10 due rows per tenant
 *   100,000 x 1,000    diagnostic: 100 due rows per tenant. A pass serves at most 128
 *                      tenants (one seek each), so from 128 tenants up the cost must
 *                      not move: this case and the 10,000 one should match
 *   tombstones         diagnostic: 1 tenant whose first 100,000 due keys were deleted (as
 *                      delivered rows' keys are) before 1,000 live ones; a dispatcher
 *                      without a cursor (a start, or a cursor reset) seeks the tenant's
 *                      first key and steps over every deleted key not yet compacted away
 *
 * Baselines in the same store, same run: a RocksDB seek + 128 nexts over due keys, and the
 * same plus the 128 hook point reads a pass of 128 claims makes.
 *
 *   dispatch_tick [-r REPS] [-p PASSES] [-d PARENT_DIR] [-q]   (-q: skip the tombstones case)
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/clock.h"
#include "core/config.h"
#include "core/envelope.h"
#include "core/log.h"
#include "core/node.h"
#include "dispatch/dispatch.h"
#include "modules.h"
#include "store/batch.h"
#include "store/keys.h"
#include "store/store.h"

#define BODY_LEN 1024
#define BATCH 128

/* node.data_dir comes from the environment given to the load: each case's own dir */
static const char *const yaml =
  "node: {roles: [dispatch, storage]}\n"
  "log: {level: warning}\n"
  "dispatch:\n"
  "  batch: 128\n"
  "  concurrency: 32\n"
  "  max_inflight: 100000000\n"
  "  max_inflight_bytes: 1000000000000\n"
  "  breaker_failures: 0\n"
  "  tenants: {max_inflight: 100000000, max_inflight_bytes: 1000000000000}\n"
  "sources:\n"
  "  bench:\n"
  "    sinks:\n"
  "      - type: log\n";

typedef struct {
  const char *name;
  long due;      /* rows due now */
  long tenants;  /* tenants holding rows */
  long later;    /* tenants (beyond the first `due`) with one row due in an hour */
  long deleted;  /* tombstones case: due keys written then deleted ahead of the live ones */
} case_t;

static void die(const char *what) {
  fprintf(stderr, "dispatch_tick: %s\n", what);
  exit(1);
}

/* The config of yaml with node.data_dir = data_dir (the process environment is not read). */
static ak_config_t *load_config(const char *data_dir) {
  char dd[4300];
  snprintf(dd, sizeof dd, "ANKUSA_DATA_DIR=%s", data_dir);
  const char *const env[] = {dd, NULL};
  ak_config_t *cfg = NULL;
  char *err = NULL;
  if (ak_config_load_string(ak_modules(), yaml, strlen(yaml), env, &cfg, &err) != 0) {
    fprintf(stderr, "dispatch_tick: config: %s\n", err ? err : "?");
    exit(1);
  }
  if (ak_dispatch_cfg(cfg)->batch != BATCH) die("dispatch.batch is not 128");
  return cfg;
}

/* The node the bench reads: the store (<data_dir>/default/store) and the sources. */
static void node_open(ak_node_t *n, ak_config_t *cfg) {
  static const char *const only[] = {"node", "log", "store", "sources", NULL};
  ak_node_opts_t o = {.only = only};
  char *err = NULL;
  if (ak_node_open(n, cfg, &o, &err) != 0) die(err ? err : "node open failed");
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, size_t n) {
  if (!n) return 0;
  qsort(v, n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double now_us(void) { return (double)ak_mono_ns() / 1000.0; }

static void tenant_name(char *out, size_t len, long i) { snprintf(out, len, "tenant-%05ld", i); }

/* Write rows in batches of 1,000 hooks, unsynced (the bench measures reads). */
typedef struct {
  ak_store_t *st;
  ak_batch_t *wb;
  size_t n;
  uint64_t seq;
  uint8_t body[BODY_LEN];
} writer_t;

static void wflush(writer_t *w) {
  if (!w->n) return;
  ak_wf_class_t cls;
  char *err = NULL;
  if (ak_store_write(w->st, w->wb, false, &cls, &err) != 0) {
    fprintf(stderr, "dispatch_tick: write failed: %s\n", err ? err : "?");
    exit(1);
  }
  ak_batch_clear(w->wb);
  w->n = 0;
}

static void put_row(writer_t *w, const char *tenant, int64_t at, uint32_t attempts, bool delete_due) {
  uint64_t seq = ++w->seq;
  ak_envelope_t env = {0};
  for (int i = 0; i < 16; i++) env.id[i] = (uint8_t)(seq >> (8 * (i % 8))) ^ (uint8_t)i;
  env.id[6] = (uint8_t)(0x70 | (env.id[6] & 0x0f));
  env.seq = seq;
  env.received_at_ms = at;
  env.tenant = tenant;
  env.tenant_len = strlen(tenant);
  env.source = "bench";
  env.source_len = 5;
  env.method = "POST";
  env.method_len = 4;
  env.path = "/webhooks/bench";
  env.path_len = 15;
  env.content_type = "application/json";
  env.content_type_len = 16;
  env.body = w->body;
  env.body_len = sizeof w->body;
  size_t rl = 0;
  uint8_t *rec = ak_envelope_encode(&env, &rl);
  if (!rec) die("ak_envelope_encode failed");
  uint8_t hk[AK_HOOK_KEY_LEN], dk[AK_DELIVERY_KEY_LEN], row[300], uk[AK_DUE_KEY_MAX], uv[AK_DUE_VALUE_MAX];
  ak_key_hook(hk, seq);
  ak_key_delivery(dk, seq, 0);
  size_t rowl = ak_delivery_row(row, sizeof row, AK_DELIVERY_PENDING, attempts, at, "log");
  size_t ukl = ak_key_due(uk, tenant, strlen(tenant), at, seq, 0);
  size_t uvl = ak_due_value(uv, sizeof uv, attempts, "log", 3, NULL);
  if (ak_store_pin(w->st) != 0) die("store closed");
  ak_batch_put(w->wb, AK_CF_HOOKS, hk, sizeof hk, rec, rl);
  ak_batch_put(w->wb, AK_CF_DELIVERIES, dk, sizeof dk, row, rowl);
  ak_batch_put(w->wb, AK_CF_INDEX, uk, ukl, uv, uvl);
  if (delete_due) {
    /* a delivered row: the outcome write deletes its due key and delivery row (the hook
     * itself is reclaimed later; keeping it changes nothing for a scan) */
    ak_batch_delete(w->wb, AK_CF_INDEX, uk, ukl);
    ak_batch_delete(w->wb, AK_CF_DELIVERIES, dk, sizeof dk);
  }
  ak_store_unpin(w->st);
  free(rec);
  if (++w->n >= 1000) wflush(w);
}

static void fill(ak_store_t *st, const case_t *c, int64_t now) {
  writer_t *w = calloc(1, sizeof *w);
  if (!w) die("out of memory");
  w->st = st;
  w->wb = ak_batch_new(st);
  if (!w->wb) die("out of memory");
  memset(w->body, 'x', sizeof w->body);
  char tn[32];
  /* deleted keys first in the tenant's key order (earlier due times) */
  for (long i = 0; i < c->deleted; i++) {
    tenant_name(tn, sizeof tn, 0);
    put_row(w, tn, now - 10000 - c->deleted + i, 0, true);
  }
  /* due rows round-robin over the tenants that hold due rows, oldest first */
  long holders = c->due < c->tenants ? c->due : c->tenants;
  for (long i = 0; i < c->due; i++) {
    tenant_name(tn, sizeof tn, i % holders);
    put_row(w, tn, now - 5000 + i / holders, 0, false);
  }
  for (long i = 0; i < c->later; i++) {
    tenant_name(tn, sizeof tn, holders + i);
    put_row(w, tn, now + 3600 * 1000, 1, false);
  }
  wflush(w);
  ak_batch_free(w->wb);
  free(w);
}

typedef struct {
  double load_ms;
  double pass1_us, pass1_rows;
  double later_us, later_rows; /* passes 2..K that claimed rows */
  size_t later_n;
} result_t;

static result_t run_case(ak_instance_t *inst, int reps, int passes) {
  double *p1 = calloc((size_t)reps, sizeof *p1), *p1r = calloc((size_t)reps, sizeof *p1r);
  double *pl = calloc((size_t)reps * (size_t)passes, sizeof *pl), *plr = calloc((size_t)reps * (size_t)passes, sizeof *plr);
  double *ld = calloc((size_t)reps, sizeof *ld);
  if (!p1 || !p1r || !pl || !plr || !ld) die("out of memory");
  size_t npl = 0;
  for (int r = 0; r < reps; r++) {
    char err[512] = "";
    ak_dispatch_t *d = ak_dispatch_new(inst, err, sizeof err);
    if (!d) die(err);
    double t0 = now_us();
    if (ak_dispatch_load(d, err, sizeof err) != 0) die(err);
    ld[r] = (now_us() - t0) / 1000.0;
    for (int p = 0; p < passes; p++) {
      int64_t now = ak_now_ms();
      t0 = now_us();
      size_t got = ak_dispatch_debug_scan(d, now);
      double us = now_us() - t0;
      if (p == 0) {
        p1[r] = us;
        p1r[r] = (double)got;
      } else if (got) {
        pl[npl] = us;
        plr[npl] = (double)got;
        npl++;
      }
    }
    ak_dispatch_free(d);
  }
  result_t res = {.load_ms = median(ld, (size_t)reps), .pass1_us = median(p1, (size_t)reps),
                  .pass1_rows = median(p1r, (size_t)reps), .later_n = npl};
  res.later_us = median(pl, npl);
  res.later_rows = median(plr, npl);
  free(p1);
  free(p1r);
  free(pl);
  free(plr);
  free(ld);
  return res;
}

/* Baselines: seek to a due key and read 128 keys and values; and the same with a point
 * read of each row's hook record (what claiming 128 rows reads at the least). */
static void baseline(ak_store_t *st, int reps, double *seek_us, double *seek_get_us) {
  size_t n = (size_t)reps * 5;
  double *a = calloc(n, sizeof *a), *b = calloc(n, sizeof *b);
  if (!a || !b) die("out of memory");
  if (ak_store_pin(st) != 0) die("store closed");
  for (size_t i = 0; i < 2 * n; i++) {
    bool with_get = i >= n;
    char tn[32];
    tenant_name(tn, sizeof tn, (long)(i % 10));
    uint8_t pfx[AK_DUE_KEY_MAX];
    size_t pl = ak_key_due_prefix(pfx, tn, strlen(tn));
    double t0 = now_us();
    ak_store_cursor_t *it = ak_store_cursor_new_pinned(st, AK_CF_INDEX, false);
    if (!it) die("store closed");
    ak_store_cursor_seek(it, pfx, pl);
    size_t got = 0;
    for (; ak_store_cursor_valid(it) && got < BATCH; ak_store_cursor_next(it), got++) {
      size_t kl, vl;
      const uint8_t *k = (const uint8_t *)ak_store_cursor_key(it, &kl);
      (void)ak_store_cursor_value(it, &vl);
      if (with_get) {
        int64_t at;
        uint64_t seq;
        uint16_t sink;
        if (ak_key_due_parse(k, kl, NULL, NULL, &at, &seq, &sink) != 0) continue;
        uint8_t hk[AK_HOOK_KEY_LEN];
        ak_key_hook(hk, seq);
        char *v = NULL;
        size_t l = 0;
        ak_store_unpin(st); /* ak_store_get pins itself */
        if (ak_store_get(st, AK_CF_HOOKS, hk, sizeof hk, &v, &l) < 0) die("hook read failed");
        if (ak_store_pin(st) != 0) die("store closed");
        free(v);
      }
    }
    ak_store_cursor_free(it);
    double us = now_us() - t0;
    if (got < BATCH) die("baseline: fewer than 128 due keys");
    (with_get ? b : a)[i % n] = us;
  }
  ak_store_unpin(st);
  *seek_us = median(a, n);
  *seek_get_us = median(b, n);
  free(a);
  free(b);
}

int main(int argc, char **argv) {
  int reps = 9, passes = 5, opt;
  bool tomb = true;
  const char *parent = ".";
  while ((opt = getopt(argc, argv, "r:p:d:q")) != -1) {
    switch (opt) {
      case 'r': reps = atoi(optarg); break;
      case 'p': passes = atoi(optarg); break;
      case 'd': parent = optarg; break;
      case 'q': tomb = false; break;
      default:
        fprintf(stderr, "usage: dispatch_tick [-r REPS] [-p PASSES] [-d PARENT_DIR] [-q]\n");
        return 2;
    }
  }
  if (reps < 1 || passes < 1) die("REPS and PASSES must be >= 1");
  ak_log_set_level(AK_LOG_WARNING);

  char tmpl[4096];
  snprintf(tmpl, sizeof tmpl, "%s/dispatch_tick.XXXXXX", parent);
  if (!mkdtemp(tmpl)) {
    fprintf(stderr, "dispatch_tick: mkdtemp %s: %s\n", tmpl, strerror(errno));
    return 1;
  }
  static const case_t cases[] = {
    {"10 rows x 10 tenants", 10, 10, 0, 0},
    {"10 rows x 10,000 tenants", 10, 10, 9990, 0},
    {"100,000 rows x 10 tenants", 100000, 10, 0, 0},
    {"100,000 rows x 10,000 tenants", 100000, 10000, 0, 0},
    {"100,000 rows x 1,000 tenants", 100000, 1000, 0, 0},
    {"tombstones: 100,000 deleted + 1,000 due, 1 tenant", 1000, 1, 0, 100000},
  };
  size_t ncases = sizeof cases / sizeof cases[0] - (tomb ? 0 : 1);
  if (ncases > 8) die("too many cases");
  printf("dispatch_tick: %d fresh dispatchers per case, %d passes each (dispatch.batch %d); medians\n", reps,
         passes, BATCH);
  printf("  %-50s %9s %10s %8s %9s | %10s %8s %9s\n", "case (rows due x tenants tracked)", "load ms",
         "pass 1 us", "rows", "us/row", "later us", "rows", "us/row");
  double per_row[8], per_pass[8];
  result_t machine[8];
  double seek_us = 0, seek_get_us = 0;
  for (size_t ci = 0; ci < ncases; ci++) {
    const case_t *c = &cases[ci];
    char dir[4200], rm[4300];
    snprintf(dir, sizeof dir, "%s/case%zu", tmpl, ci);
    ak_config_t *cfg = load_config(dir);
    ak_node_t node;
    node_open(&node, cfg);
    fill(node.inst.store, c, ak_now_ms());
    /* restart so every case reads a store in the same shape: flushed memtables replayed
     * from the WAL as a restarted node finds them */
    ak_node_close(&node);
    node_open(&node, cfg);
    result_t r = run_case(&node.inst, reps, passes);
    per_row[ci] = r.pass1_rows > 0 ? r.pass1_us / r.pass1_rows : 0;
    per_pass[ci] = r.pass1_us;
    printf("  %-50s %9.1f %10.1f %8.0f %9.2f | ", c->name, r.load_ms, r.pass1_us, r.pass1_rows, per_row[ci]);
    if (r.later_n)
      printf("%10.1f %8.0f %9.2f\n", r.later_us, r.later_rows, r.later_rows > 0 ? r.later_us / r.later_rows : 0);
    else
      printf("%10s %8s %9s\n", "-", "-", "-");
    /* for bench/dispatch_tick.sh: case index, pass 1 us, rows, later us, rows, load ms */
    machine[ci] = r;
    if (ci == 2) baseline(node.inst.store, reps, &seek_us, &seek_get_us);
    ak_node_close(&node);
    ak_config_free(cfg);
    snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
    if (system(rm) != 0) fprintf(stderr, "dispatch_tick: could not remove %s\n", dir);
  }
  rmdir(tmpl);
  double mn = per_row[0], mx = per_row[0];
  for (size_t i = 1; i < 4; i++) {
    if (per_row[i] < mn) mn = per_row[i];
    if (per_row[i] > mx) mx = per_row[i];
  }
  printf("  baseline (100,000 x 10 store): RocksDB seek + 128 next %.1f us (%.2f us/key); "
         "+ 128 hook point reads %.1f us (%.2f us/row)\n",
         seek_us, seek_us / BATCH, seek_get_us, seek_get_us / BATCH);
  printf("  pass 1, 128-row passes: 100,000 x 10 %.1f us, 100,000 x 10,000 %.1f us (ratio %.2f)\n", per_pass[2],
         per_pass[3], per_pass[2] > 0 ? per_pass[3] / per_pass[2] : 0);
  printf("  flatness (the four cases, pass 1, us per claimed row): max/min = %.2f  (%.2f .. %.2f us/row)\n",
         mx / mn, mn, mx);
  for (size_t i = 0; i < ncases; i++)
    printf("#case %zu %.1f %.0f %.1f %.0f %.1f\n", i, machine[i].pass1_us, machine[i].pass1_rows,
           machine[i].later_n ? machine[i].later_us : -1.0, machine[i].later_n ? machine[i].later_rows : -1.0,
           machine[i].load_ms);
  printf("#baseline %.1f %.1f\n", seek_us, seek_get_us);
  return 0;
}
