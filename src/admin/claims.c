/* The claim check module (admin/claims.h, docs/claim-check.md): the `claim_check` section
 * and its rules, the claim stores of a node (claim_check.stores, else claim_check.store,
 * else the storage bucket; never under storage.key_prefix) handed to the dispatcher's
 * check-in as inst->claims, the claim gateway (claim_check role) and the LocalFS
 * retention sweeper.
 *
 * The gateway is read-only: GET and HEAD /v1/claims/{tenant}/{claim_id} and GET /health,
 * on its own listener (http/server.h, one loop). A request passes its checks on the loop
 * (the admin principals: claims:read and the claim's tenant), then is held while a
 * worker thread does the blocking store reads: one ranged read of the pack's index head,
 * one of the claim (with its entry header), and, once per pack (a small LRU), the pack's
 * manifest, against which the bytes are verified (length and SHA-256) before a byte is
 * served. Never writes, lists or deletes through the gateway, never answers with bytes
 * that fail their manifest, never echoes or keeps a token, never logs a claim's bytes. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include "admin/admin.h"
#include "admin/auth.h"
#include "admin/claims.h"
#include "blob/blob.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/blobcfg.h"
#include "core/instance.h"
#include "core/log.h"
#include "core/node.h"
#include "edge/publish.h"
#include "http/server.h"
#include "sinks/claimpack.h"

#define WORKERS 4
#define QUEUE_MAX 1024
#define MANIFEST_CACHE_PACKS 32
#define MANIFEST_CACHE_CLAIMS 262144 /* rows held across the cached packs */
#define MAX_AUTHORIZATION 4096
#define DAY_MS 86400000ll

/* ------------------------------------------------------------------ the section ---- */

static const ak_opt_t claim_check_rows[] = {
  {.key = "port", .type = AK_OPT_INT, .def = "4001", .min = 0, .max = 65535, .flags = AK_OPTF_HAS_MIN | AK_OPTF_HAS_MAX,
   .env = "ANKUSA_CLAIM_CHECK_PORT", .doc = "claim gateway listener port (claim_check role)"},
  {.key = "ip", .type = AK_OPT_IP, .def = "127.0.0.1", .env = "ANKUSA_CLAIM_CHECK_IP",
   .doc = "claim gateway listener address (an IP literal)"},
  {.key = "pack_max_bytes", .type = AK_OPT_INT, .def = "16777216", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "target size of one pack object"},
  {.key = "retention_days", .type = AK_OPT_INT, .min = 1, .flags = AK_OPTF_NULLABLE | AK_OPTF_HAS_MIN,
   .doc = "LocalFS claim stores: day directories kept this long; null: no sweeper (S3/GCS: a bucket lifecycle rule)"},
  {.key = "sweep_interval_ms", .type = AK_OPT_INT, .def = "3600000", .min = 1, .flags = AK_OPTF_HAS_MIN,
   .doc = "how often the retention sweeper runs"},
  {.key = "store", .type = AK_OPT_MAP, .flags = AK_OPTF_NULLABLE, .children = ak_blobcfg_store_rows,
   .doc = "where claims live (unset: the storage bucket)"},
  {.key = "stores", .type = AK_OPT_LIST_OF, .children = ak_blobcfg_store_rows,
   .doc = "claim stores tried in order (a write goes to the first that takes it, a read to the first that has "
          "it); instead of store"},
  {0},
};

static bool is_loopback(const char *ip) {
  unsigned char b[16];
  if (inet_pton(AF_INET, ip, b) == 1) return b[0] == 127;
  if (inet_pton(AF_INET6, ip, b) != 1) return false;
  static const unsigned char one[16] = {[15] = 1}, mapped[12] = {[10] = 0xff, [11] = 0xff};
  return !memcmp(b, one, 16) || (!memcmp(b, mapped, 12) && b[12] == 127);
}

/* The type of the claim store mapping st (local when unset). */
static const char *store_type(const json_t *st) {
  const char *t = json_string_value(json_object_get(st, "type"));
  return t ? t : "local";
}

static void claim_check_check(ak_check_t *c, json_t *cc, json_t *root) {
  json_t *store = json_object_get(cc, "store"), *stores = json_object_get(cc, "stores");
  bool one = json_is_object(store), many = json_array_size(stores) > 0;
  if (one) ak_blobcfg_check(c, "claim_check.store", store);
  size_t i;
  json_t *st;
  json_array_foreach(stores, i, st) {
    char path[64];
    snprintf(path, sizeof path, "claim_check.stores[%zu]", i);
    if (json_is_object(st)) ak_blobcfg_check(c, path, st);
  }
  if (one && many)
    ak_check_error(c, "claim_check.stores: claim_check.store and claim_check.stores are both set; keep one (stores "
                      "is the list tried in order)");
  int64_t days;
  if (ak_check_int_at(cc, "retention_days", &days)) {
    /* the sweeper deletes LocalFS day directories; a bucket expires objects by its own rule */
    if (many) {
      json_array_foreach(stores, i, st)
        if (json_is_object(st) && strcmp(store_type(st), "local"))
          ak_check_error(c, "claim_check.retention_days: only with LocalFS claim stores, but "
                            "claim_check.stores[%zu].type is %s; expire claims/ with a bucket lifecycle rule", i,
                         store_type(st));
    } else if (one) {
      if (strcmp(store_type(store), "local"))
        ak_check_error(c, "claim_check.retention_days: only with LocalFS claim stores, but claim_check.store.type "
                          "is %s; expire claims/ with a bucket lifecycle rule", store_type(store));
    } else {
      const char *t = json_string_value(json_object_get(json_object_get(root, "storage"), "type"));
      if (t && strcmp(t, "local"))
        ak_check_error(c, "claim_check.retention_days: only with LocalFS claim stores, but the claims go to the "
                          "storage bucket (storage.type %s); expire claims/ with a bucket lifecycle rule", t);
    }
  }
  int64_t mb;
  if (ak_check_int_at(json_object_get(root, "http"), "max_body_bytes", &mb) && mb >= 4294967296ll)
    ak_check_error(c, "http.max_body_bytes must be below 4294967296 (a claim pack has no ZIP64), got %lld",
                   (long long)mb);
  const char *ip = json_string_value(json_object_get(cc, "ip"));
  json_t *ps = json_object_get(json_object_get(root, "admin"), "principals");
  if (ip && !is_loopback(ip) && json_array_size(ps) == 0 && !ak_check_reported_under(c, "admin.principals"))
    ak_check_error(c, "claim_check.ip: %s is not a loopback address; without admin.principals the claim gateway "
                      "has no one to authenticate and listens on loopback only: add admin.principals with the "
                      "claims:read scope, or bind 127.0.0.1", ip);
}

/* ------------------------------------------------------------------ the module ---- */

typedef struct job job_t;

/* A cached manifest: per claim position, its length and SHA-256. */
typedef struct manifest {
  char key[AK_CLAIM_KEY_MAX];
  size_t store;
  size_t n;
  uint32_t *len;
  uint8_t (*sha)[32];
  uint64_t used; /* LRU tick */
} manifest_t;

typedef struct claims {
  ak_instance_t *inst;
  ak_claim_stores_t stores;
  ak_blob_t **blobs;
  char **local_roots; /* per store: its LocalFS root, or NULL */
  size_t n;
  bool gateway;
  bool sweeper;
  /* gateway */
  ak_auth_t *auth;
  ak_hserver_t *srv;
  int port;
  pthread_t workers[WORKERS];
  size_t nworkers;
  pthread_mutex_t mu;
  pthread_cond_t cv;       /* jobs queued (the workers wait on it) */
  pthread_cond_t sweep_cv; /* stopping (the sweeper waits on it, between sweeps) */
  bool stopped;
  job_t *head, *tail;
  size_t queued;
  bool stopping;
  manifest_t cache[MANIFEST_CACHE_PACKS];
  size_t cached_rows;
  uint64_t tick;
  pthread_mutex_t cache_mu;
  /* sweeper */
  pthread_t sweep_thread;
  bool sweep_started;
  int64_t retention_days, sweep_interval_ms;
  /* metrics */
  ak_family_t *ops_f, *redeems_f;
  ak_series_t *fail_checkin, *fail_redeem;
} claims_t;

static claims_t *the; /* one node per process serves one gateway; ak_claims_port reads it */

static void count(claims_t *c, ak_family_t *f, const char *result) {
  if (!f) return;
  ak_series_t *s = ak_metrics_series(f, (const char *const[]){c->inst->name, result});
  if (s) ak_counter_add(s, 1);
}

/* ----------------------------------------------------------- opening the stores ---- */

static char *data_root(ak_instance_t *inst, const char *leaf) {
  const ak_node_cfg_t *nc = ak_node_cfg(inst->cfg);
  char *p = NULL;
  if (asprintf(&p, "%s/%s%s%s", nc && nc->data_dir ? nc->data_dir : "./data", inst->name, leaf ? "/" : "",
               leaf ? leaf : "") < 0)
    return NULL;
  return p;
}

/* Store i of the list from mapping st (NULL: the storage section). */
static int open_one(claims_t *c, size_t i, const json_t *st, const char *what, char **err) {
  ak_instance_t *inst = c->inst;
  char e[256] = "";
  char *root = NULL;
  if (st) {
    const char *r = json_string_value(json_object_get(st, "root"));
    root = r ? strdup(r) : data_root(inst, NULL);
    if (root) c->blobs[i] = ak_blob_open(st, root, inst->httpc, e, sizeof e);
  } else {
    const json_t *storage = json_object_get(inst->cfg->effective, "storage");
    root = data_root(inst, "segments");
    if (root) c->blobs[i] = ak_blob_open(storage, root, inst->httpc, e, sizeof e);
  }
  if (!c->blobs[i]) {
    if (asprintf(err, "%s: cannot open the claim store: %s", what, e[0] ? e : "out of memory") < 0) *err = NULL;
    free(root);
    return -1;
  }
  ak_blob_instrument(c->blobs[i], inst->metrics, inst->name);
  if (!strcmp(ak_blob_type(c->blobs[i]), "local")) c->local_roots[i] = root;
  else free(root);
  return 0;
}

static int open_stores(claims_t *c, const json_t *cc, char **err) {
  const json_t *store = json_object_get(cc, "store"), *stores = json_object_get(cc, "stores");
  size_t n = json_array_size(stores) ? json_array_size(stores) : 1;
  c->blobs = calloc(n, sizeof *c->blobs);
  c->local_roots = calloc(n, sizeof *c->local_roots);
  if (!c->blobs || !c->local_roots) {
    *err = strdup("out of memory");
    return -1;
  }
  c->n = n;
  if (json_array_size(stores)) {
    for (size_t i = 0; i < n; i++) {
      char what[64];
      snprintf(what, sizeof what, "claim_check.stores[%zu]", i);
      if (open_one(c, i, json_array_get(stores, i), what, err) != 0) return -1;
    }
  } else if (json_is_object(store)) {
    if (open_one(c, 0, store, "claim_check.store", err) != 0) return -1;
  } else if (open_one(c, 0, NULL, "storage", err) != 0) {
    return -1;
  }
  c->stores.v = c->blobs;
  c->stores.n = n;
  return 0;
}

static void free_manifest(manifest_t *m) {
  free(m->len);
  free(m->sha);
  memset(m, 0, sizeof *m);
}

static void claims_free(claims_t *c) {
  if (!c) return;
  for (size_t i = 0; i < c->n; i++) {
    ak_blob_free(c->blobs ? c->blobs[i] : NULL);
    free(c->local_roots ? c->local_roots[i] : NULL);
  }
  free(c->blobs);
  free(c->local_roots);
  for (size_t i = 0; i < MANIFEST_CACHE_PACKS; i++) free_manifest(&c->cache[i]);
  ak_auth_free(c->auth);
  if (c->srv) ak_hserver_free(c->srv);
  pthread_mutex_destroy(&c->mu);
  pthread_mutex_destroy(&c->cache_mu);
  pthread_cond_destroy(&c->cv);
  pthread_cond_destroy(&c->sweep_cv);
  free(c);
}

/* ------------------------------------------------------------- the manifests ---- */

static int hexval(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  return -1;
}

/* The manifest text's rows into m: 0, or -1 when it is not a pack's manifest. */
static int manifest_parse(const uint8_t *p, size_t n, manifest_t *m) {
  json_error_t je;
  json_t *root = json_loadb((const char *)p, n, 0, &je);
  json_t *cl = json_object_get(root, "claims");
  int rc = -1;
  size_t k = json_array_size(cl);
  if (!root || json_integer_value(json_object_get(root, "v")) != 1 || !json_is_array(cl) || !k ||
      k > AK_CLAIM_PACK_MAX_CLAIMS)
    goto out;
  m->len = calloc(k, sizeof *m->len);
  m->sha = calloc(k, sizeof *m->sha);
  if (!m->len || !m->sha) goto out;
  for (size_t i = 0; i < k; i++) {
    json_t *row = json_array_get(cl, i);
    json_t *l = json_object_get(row, "length");
    const char *h = json_string_value(json_object_get(row, "sha256"));
    if (!json_is_integer(l) || json_integer_value(l) < 0 || json_integer_value(l) > UINT32_MAX || !h ||
        strlen(h) != 64)
      goto out;
    m->len[i] = (uint32_t)json_integer_value(l);
    for (int b = 0; b < 32; b++) {
      int hi = hexval(h[2 * b]), lo = hexval(h[2 * b + 1]);
      if (hi < 0 || lo < 0) goto out;
      m->sha[i][b] = (uint8_t)(hi << 4 | lo);
    }
  }
  m->n = k;
  rc = 0;
out:
  if (rc != 0) free_manifest(m);
  json_decref(root);
  return rc;
}

/* What the cache holds for key on store si: its row for pos copied out. true on a hit. */
static bool cache_get(claims_t *c, const char *key, size_t si, uint16_t pos, bool *has_row, uint32_t *len,
                      uint8_t sha[32]) {
  bool hit = false;
  pthread_mutex_lock(&c->cache_mu);
  for (size_t i = 0; i < MANIFEST_CACHE_PACKS; i++) {
    manifest_t *m = &c->cache[i];
    if (m->n && m->store == si && !strcmp(m->key, key)) {
      m->used = ++c->tick;
      hit = true;
      *has_row = pos < m->n;
      if (*has_row) {
        *len = m->len[pos];
        memcpy(sha, m->sha[pos], 32);
      }
      break;
    }
  }
  pthread_mutex_unlock(&c->cache_mu);
  return hit;
}

/* Takes m's rows into the cache (evicting the least recently used packs to make room). */
static void cache_put(claims_t *c, manifest_t *m) {
  if (m->n > MANIFEST_CACHE_CLAIMS) {
    free_manifest(m);
    return;
  }
  pthread_mutex_lock(&c->cache_mu);
  for (;;) {
    manifest_t *free_slot = NULL, *lru = NULL;
    for (size_t i = 0; i < MANIFEST_CACHE_PACKS; i++) {
      manifest_t *e = &c->cache[i];
      if (!e->n) {
        if (!free_slot) free_slot = e;
      } else if (!lru || e->used < lru->used) {
        lru = e;
      }
    }
    if (free_slot && c->cached_rows + m->n <= MANIFEST_CACHE_CLAIMS) {
      m->used = ++c->tick;
      *free_slot = *m;
      c->cached_rows += m->n;
      memset(m, 0, sizeof *m);
      break;
    }
    if (!lru) { /* cannot happen: m->n is below the bound */
      free_manifest(m);
      break;
    }
    c->cached_rows -= lru->n;
    free_manifest(lru);
  }
  pthread_mutex_unlock(&c->cache_mu);
}

/* ----------------------------------------------------------------- the reads ---- */

enum { R_OK, R_NOT_FOUND, R_ERROR, R_FORBIDDEN, R_CORRUPT };

static int classify(int rc, const char *err) {
  if (rc == AK_BLOB_OK) return R_OK;
  if (rc == AK_BLOB_NOT_FOUND) return R_NOT_FOUND;
  return strstr(err, "HTTP 403") || strstr(err, "HTTP 401") ? R_FORBIDDEN : R_ERROR;
}

/* The manifest row of pos of the pack at key on store si (cached). R_OK with *len and
 * sha, R_CORRUPT when the pack has no usable manifest or no row for pos, or a store
 * error. */
static int manifest_row(claims_t *c, size_t si, const char *key, uint16_t pos, uint32_t *len, uint8_t sha[32],
                        char *err, size_t errlen) {
  bool has_row = false;
  if (cache_get(c, key, si, pos, &has_row, len, sha)) return has_row ? R_OK : R_CORRUPT;
  ak_blob_t *b = c->blobs[si];
  uint64_t size = 0;
  int rc = ak_blob_head(b, key, &size, err, errlen);
  if (rc != AK_BLOB_OK) return rc == AK_BLOB_NOT_FOUND ? R_CORRUPT : classify(rc, err);
  size_t tl = ak_claim_manifest_tail_len();
  if (size < tl) return R_CORRUPT;
  uint8_t *tail = NULL, *text = NULL;
  size_t got = 0;
  rc = ak_blob_get_range(b, key, size - tl, tl, &tail, &got, err, errlen);
  if (rc != AK_BLOB_OK) return rc == AK_BLOB_NOT_FOUND ? R_CORRUPT : classify(rc, err);
  uint64_t moff = 0;
  uint32_t mlen = 0;
  int found = ak_claim_manifest_find(tail, got, size, &moff, &mlen);
  free(tail);
  if (found != 0) return R_CORRUPT;
  rc = ak_blob_get_range(b, key, moff, mlen, &text, &got, err, errlen);
  if (rc != AK_BLOB_OK) return rc == AK_BLOB_NOT_FOUND ? R_CORRUPT : classify(rc, err);
  manifest_t m = {0};
  int parsed = got == mlen ? manifest_parse(text, got, &m) : -1;
  free(text);
  if (parsed != 0) return R_CORRUPT;
  snprintf(m.key, sizeof m.key, "%s", key);
  m.store = si;
  has_row = pos < m.n;
  if (has_row) {
    *len = m.len[pos];
    memcpy(sha, m.sha[pos], 32);
  }
  cache_put(c, &m);
  return has_row ? R_OK : R_CORRUPT;
}

/* One gateway request, from its checks to its answer. */
struct job {
  job_t *next;
  claims_t *c;
  ak_hreq_t *r;
  bool head;
  char tenant[65];
  ak_claim_id_t id;
  char key[AK_CLAIM_KEY_MAX];
  char range[128];     /* the Range value ("" when none, or when If-Range came with it) */
  /* the result */
  int result;
  uint32_t len;        /* the claim's length */
  uint8_t *bytes;      /* GET: the verified bytes (malloc'd) */
  char reason[256];    /* a store's failure, for the log */
};

/* Store si: R_OK with j->len (and j->bytes for a GET, verified), or why not. */
static int read_from(claims_t *c, job_t *j, size_t si) {
  ak_blob_t *b = c->blobs[si];
  uint16_t pos = ak_claim_id_pos(&j->id);
  size_t hl = ak_claim_head_len(pos);
  uint8_t *head = NULL;
  size_t got = 0;
  int rc = ak_blob_get_range(b, j->key, 0, hl, &head, &got, j->reason, sizeof j->reason);
  if (rc != AK_BLOB_OK) return classify(rc, j->reason);
  uint32_t off = 0, len = 0;
  int located = ak_claim_locate(head, got, pos, &off, &len);
  free(head);
  if (located != 0 || off < AK_CLAIM_ENTRY_HEAD) return R_NOT_FOUND; /* a short index, or not a pack */
  j->len = len;
  if (j->head) return R_OK;
  uint8_t *data = NULL;
  rc = ak_blob_get_range(b, j->key, off - AK_CLAIM_ENTRY_HEAD, (size_t)len + AK_CLAIM_ENTRY_HEAD, &data, &got,
                         j->reason, sizeof j->reason);
  if (rc != AK_BLOB_OK) return classify(rc, j->reason);
  if (got != (size_t)len + AK_CLAIM_ENTRY_HEAD) {
    free(data);
    return R_NOT_FOUND; /* a short pack */
  }
  if (ak_claim_entry_check(data, got, &j->id, len) != 0) {
    free(data);
    snprintf(j->reason, sizeof j->reason, "the index row points at another entry");
    return R_CORRUPT;
  }
  uint32_t want_len = 0;
  uint8_t want_sha[32], sha[32];
  int mr = manifest_row(c, si, j->key, pos, &want_len, want_sha, j->reason, sizeof j->reason);
  if (mr != R_OK) {
    free(data);
    if (mr == R_CORRUPT) snprintf(j->reason, sizeof j->reason, "no manifest row for the claim");
    return mr;
  }
  SHA256(data + AK_CLAIM_ENTRY_HEAD, len, sha);
  if (want_len != len || CRYPTO_memcmp(sha, want_sha, 32) != 0) {
    free(data);
    snprintf(j->reason, sizeof j->reason, want_len != len ? "length differs from the manifest's"
                                                          : "sha256 differs from the manifest's");
    return R_CORRUPT;
  }
  memmove(data, data + AK_CLAIM_ENTRY_HEAD, len);
  j->bytes = data;
  return R_OK;
}

/* Every store in order, until one has the claim: a store that does not have it sends the
 * read on; one that fails is remembered, so "not found" is said only when every store
 * answered it. */
static void redeem(claims_t *c, job_t *j) {
  int worst = R_NOT_FOUND;
  char first_err[256] = "";
  for (size_t si = 0; si < c->n; si++) {
    j->reason[0] = '\0';
    int r = read_from(c, j, si);
    if (r == R_OK) {
      j->result = R_OK;
      return;
    }
    if (r == R_CORRUPT) {
      j->result = R_CORRUPT;
      return;
    }
    if (r != R_NOT_FOUND) {
      if (!first_err[0]) snprintf(first_err, sizeof first_err, "store %zu: %.200s", si, j->reason);
      if (worst == R_NOT_FOUND || r == R_FORBIDDEN) worst = r;
    }
  }
  j->result = worst;
  snprintf(j->reason, sizeof j->reason, "%.230s", first_err);
}

static void *worker(void *arg) {
  claims_t *c = arg;
  pthread_mutex_lock(&c->mu);
  for (;;) {
    while (!c->head && !c->stopping) pthread_cond_wait(&c->cv, &c->mu);
    if (!c->head) break;
    job_t *j = c->head;
    c->head = j->next;
    if (!c->head) c->tail = NULL;
    c->queued--;
    pthread_mutex_unlock(&c->mu);
    redeem(c, j);
    ak_hreq_resume(j->r);
    pthread_mutex_lock(&c->mu);
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

/* ------------------------------------------------------------------ answers ---- */

/* One range of a representation of len bytes: 1 with [*a, *b], 0 to serve it whole
 * (malformed, several ranges, not bytes), -1 unsatisfiable. */
static int parse_range(const char *v, uint64_t len, uint64_t *a, uint64_t *b) {
  if (strncmp(v, "bytes=", 6)) return 0;
  v += 6;
  if (strchr(v, ',')) return 0;
  const char *dash = strchr(v, '-');
  if (!dash) return 0;
  bool has_first = dash > v, has_last = dash[1] != '\0';
  uint64_t first = 0, last = 0;
  for (const char *p = v; p < dash; p++) {
    if (*p < '0' || *p > '9' || first > UINT64_MAX / 10 - 1) return 0;
    first = first * 10 + (uint64_t)(*p - '0');
  }
  for (const char *p = dash + 1; *p; p++) {
    if (*p < '0' || *p > '9' || last > UINT64_MAX / 10 - 1) return 0;
    last = last * 10 + (uint64_t)(*p - '0');
  }
  if (!has_first && !has_last) return 0;
  if (!has_first) { /* -n: the last n bytes */
    if (last == 0 || len == 0) return -1;
    *a = last >= len ? 0 : len - last;
    *b = len - 1;
    return 1;
  }
  if (has_last && last < first) return 0;
  if (first >= len) return -1;
  *a = first;
  *b = has_last && last < len - 1 ? last : len - 1;
  return 1;
}

static void claim_headers(ak_hreq_t *r) {
  ak_hreq_add_header(r, "Cache-Control", "private, max-age=31536000, immutable");
  ak_hreq_add_header(r, "Accept-Ranges", "bytes");
}

static void answer(claims_t *c, job_t *j) {
  ak_hreq_t *r = j->r;
  char ids[AK_CLAIM_ID_LEN + 1];
  ak_claim_id_format(&j->id, ids);
  switch (j->result) {
  case R_OK: break;
  case R_NOT_FOUND:
    count(c, c->redeems_f, "not_found");
    count(c, c->ops_f, "not_found");
    ak_hreq_error(r, 404, "not_found", 0);
    return;
  case R_FORBIDDEN:
  case R_ERROR: {
    bool forbidden = j->result == R_FORBIDDEN;
    if (c->fail_redeem) ak_counter_add(c->fail_redeem, 1);
    count(c, c->redeems_f, forbidden ? "store_forbidden" : "store_unavailable");
    count(c, c->ops_f, forbidden ? "store_forbidden" : "store_unavailable");
    ak_log(AK_LOG_WARNING, "claim_check", "claim store read failed", "tenant=%s claim_id=%s reason=\"%s\"", j->tenant,
           ids, j->reason);
    ak_hreq_error(r, 503, forbidden ? "store_forbidden" : "store_unavailable", forbidden ? 60 : 1);
    return;
  }
  default:
    if (c->fail_redeem) ak_counter_add(c->fail_redeem, 1);
    count(c, c->redeems_f, "corrupt");
    count(c, c->ops_f, "claim_corrupt");
    ak_log(AK_LOG_ERROR, "claim_check", "claim refused: its bytes fail the pack's manifest",
           "tenant=%s claim_id=%s key=%s reason=\"%s\"", j->tenant, ids, j->key, j->reason);
    ak_hreq_error(r, 502, "claim_corrupt", 0);
    return;
  }
  uint64_t a = 0, b = 0;
  int rg = j->range[0] ? parse_range(j->range, j->len, &a, &b) : 0;
  char cr[96];
  if (rg < 0) { /* not cacheable: only the claim's bytes are immutable */
    snprintf(cr, sizeof cr, "bytes */%u", j->len);
    ak_hreq_add_header(r, "Accept-Ranges", "bytes");
    ak_hreq_add_header(r, "Content-Range", cr);
    count(c, c->ops_f, "range_not_satisfiable");
    ak_hreq_error(r, 416, "range_not_satisfiable", 0);
    return;
  }
  count(c, c->redeems_f, "ok");
  claim_headers(r);
  if (rg > 0) {
    snprintf(cr, sizeof cr, "bytes %llu-%llu/%u", (unsigned long long)a, (unsigned long long)b, j->len);
    ak_hreq_add_header(r, "Content-Range", cr);
    count(c, c->ops_f, "partial");
    const uint8_t *from = j->bytes ? j->bytes + a : NULL;
    ak_hreq_reply(r, 206, "application/octet-stream", from, (size_t)(b - a + 1));
    return;
  }
  count(c, c->ops_f, "ok");
  ak_hreq_reply(r, 200, "application/octet-stream", j->bytes, j->len);
}

/* -------------------------------------------------------------- the listener ---- */

static bool peer_loopback(ak_hreq_t *r) {
  socklen_t len = 0;
  const struct sockaddr *sa = ak_hreq_peer(r, &len);
  char ip[64] = "";
  if (!sa) return false;
  if (sa->sa_family == AF_INET) inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, ip, sizeof ip);
  else if (sa->sa_family == AF_INET6) inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, ip, sizeof ip);
  else return false;
  return is_loopback(ip);
}

/* The caller (ak_auth_check on a bounded, wiped copy of the Authorization value). With
 * no principals, the anonymous principal, for loopback clients only. */
static const ak_principal_t *caller(claims_t *c, ak_hreq_t *r) {
  if (ak_auth_count(c->auth) == 0 && !peer_loopback(r)) return NULL;
  size_t len = 0;
  const char *v = ak_hreq_header(r, "Authorization", &len);
  if (!v) return ak_auth_check(c->auth, NULL);
  char buf[MAX_AUTHORIZATION + 1];
  if (len > MAX_AUTHORIZATION || memchr(v, 0, len)) len = 0;
  memcpy(buf, v, len);
  buf[len] = 0;
  const ak_principal_t *p = ak_auth_check(c->auth, buf);
  explicit_bzero(buf, len);
  return p;
}

static void refuse(claims_t *c, ak_hreq_t *r, unsigned status, const char *code) {
  count(c, c->ops_f, code);
  ak_hreq_error(r, status, code, 0);
}

#define CLAIMS_PATH "/v1/claims/"

/* Everything but the store reads, on the loop: the route, the caller, the tenant and id,
 * the scope. A request that passes gets a job (ak_hreq_data) and is held at on_end. */
static void on_head(void *ctx, ak_hreq_t *r) {
  claims_t *c = ctx;
  const char *method = ak_hreq_method(r);
  size_t plen = 0;
  const char *path = ak_hreq_path(r, &plen);
  bool get = !strcmp(method, "GET"), head = !strcmp(method, "HEAD");
  if (plen == 7 && !memcmp(path, "/health", 7)) {
    if (!get && !head) {
      ak_hreq_add_header(r, "Allow", "GET, HEAD");
      refuse(c, r, 405, "method_not_allowed");
      return;
    }
    count(c, c->ops_f, "health");
    static const char ok[] = "{\"status\":\"ok\"}";
    ak_hreq_reply(r, 200, "application/json", ok, sizeof ok - 1);
    return;
  }
  /* a claim_check-only node runs no admin listener: its /metrics is here (metrics:read) */
  if (plen == 8 && !memcmp(path, "/metrics", 8) && !(c->inst->roles & AK_ROLES_STORE)) {
    if (!get && !head) {
      ak_hreq_add_header(r, "Allow", "GET, HEAD");
      refuse(c, r, 405, "method_not_allowed");
      return;
    }
    const ak_principal_t *mp = caller(c, r);
    if (!mp) {
      refuse(c, r, 401, "unauthorized");
      return;
    }
    if (!ak_principal_has(mp, AK_SCOPE_METRICS_READ)) {
      refuse(c, r, 403, "forbidden");
      return;
    }
    size_t len = 0;
    char *text = ak_metrics_render(c->inst->metrics, &len);
    if (!text) {
      refuse(c, r, 500, "internal");
      return;
    }
    ak_hreq_reply(r, 200, "text/plain; version=0.0.4", text, len);
    free(text);
    return;
  }
  size_t pl = sizeof CLAIMS_PATH - 1;
  const char *slash = plen > pl && !memcmp(path, CLAIMS_PATH, pl) ? memchr(path + pl, '/', plen - pl) : NULL;
  if (!slash || memchr(slash + 1, '/', plen - (size_t)(slash + 1 - path))) {
    refuse(c, r, 404, "not_found");
    return;
  }
  if (!get && !head) {
    ak_hreq_add_header(r, "Allow", "GET, HEAD");
    refuse(c, r, 405, "method_not_allowed");
    return;
  }
  const ak_principal_t *p = caller(c, r);
  if (!p) {
    refuse(c, r, 401, "unauthorized");
    return;
  }
  const char *t = path + pl, *id = slash + 1;
  size_t tl = (size_t)(slash - t), il = plen - (size_t)(id - path);
  if (!ak_claim_tenant_ok(t, tl)) {
    refuse(c, r, 400, "invalid_tenant");
    return;
  }
  ak_claim_id_t cid;
  if (ak_claim_id_parse(id, il, &cid) != 0) {
    refuse(c, r, 400, "invalid_id");
    return;
  }
  if (!ak_principal_has(p, AK_SCOPE_CLAIMS_READ)) {
    refuse(c, r, 403, "forbidden");
    return;
  }
  if (!ak_principal_tenant(p, t, tl)) {
    refuse(c, r, 403, "forbidden_tenant");
    return;
  }
  job_t *j = calloc(1, sizeof *j);
  if (!j) {
    refuse(c, r, 500, "internal");
    return;
  }
  j->c = c;
  j->r = r;
  j->head = head;
  memcpy(j->tenant, t, tl);
  j->id = cid;
  if (ak_claim_key(j->tenant, &cid, j->key, sizeof j->key) != 0) {
    free(j);
    refuse(c, r, 400, "invalid_tenant");
    return;
  }
  size_t rl = 0;
  const char *rv = ak_hreq_header(r, "Range", &rl);
  if (rv && rl < sizeof j->range && !ak_hreq_header(r, "If-Range", NULL)) {
    memcpy(j->range, rv, rl);
    j->range[rl] = '\0';
  }
  ak_hreq_set_data(r, j);
}

static void on_end(void *ctx, ak_hreq_t *r) {
  claims_t *c = ctx;
  job_t *j = ak_hreq_data(r);
  if (!j) return;
  pthread_mutex_lock(&c->mu);
  bool full = c->queued >= QUEUE_MAX || c->stopping;
  if (!full) {
    if (c->tail) c->tail->next = j;
    else c->head = j;
    c->tail = j;
    c->queued++;
    ak_hreq_suspend(r);
    pthread_cond_signal(&c->cv);
  }
  pthread_mutex_unlock(&c->mu);
  if (full) {
    count(c, c->ops_f, "busy");
    ak_hreq_error(r, 503, "busy", 1);
  }
}

static void on_resume(void *ctx, ak_hreq_t *r) {
  claims_t *c = ctx;
  job_t *j = ak_hreq_data(r);
  if (!j) {
    ak_hreq_error(r, 500, "internal", 0);
    return;
  }
  answer(c, j);
}

static void on_done(void *ctx, ak_hreq_t *r, bool answered) {
  (void)ctx;
  (void)answered;
  job_t *j = ak_hreq_data(r);
  if (!j) return;
  free(j->bytes);
  free(j);
  ak_hreq_set_data(r, NULL);
}

static const ak_hhandler_t claims_handler = {
  .on_head = on_head,
  .on_end = on_end,
  .on_resume = on_resume,
  .on_done = on_done,
};

/* ------------------------------------------------------------------ sweeper ---- */

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(p) != 0 && errno != ENOENT ? -1 : 0;
}

/* "dt=YYYY-MM-DD" of a real day: its UTC midnight in ms. */
static bool parse_day(const char *s, int64_t *ms) {
  int y, m, d;
  char tail;
  if (strlen(s) != 13 || strncmp(s, "dt=", 3) || s[7] != '-' || s[10] != '-') return false;
  for (int i = 3; i < 13; i++)
    if (i != 7 && i != 10 && (s[i] < '0' || s[i] > '9')) return false;
  if (sscanf(s + 3, "%4d-%2d-%2d%c", &y, &m, &d, &tail) != 3 || m < 1 || m > 12 || d < 1 || d > 31) return false;
  struct tm tm = {.tm_year = y - 1900, .tm_mon = m - 1, .tm_mday = d};
  time_t t = timegm(&tm);
  struct tm back;
  if (t == (time_t)-1 || !gmtime_r(&t, &back) || back.tm_mday != d || back.tm_mon != m - 1) return false;
  *ms = (int64_t)t * 1000;
  return true;
}

int ak_claims_sweep_root(const char *root, int64_t now_ms, int64_t retention_days) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/claims", root);
  DIR *top = opendir(dir);
  if (!top) return errno == ENOENT ? 0 : -1;
  int64_t cutoff = now_ms - retention_days * DAY_MS;
  cutoff -= ((cutoff % DAY_MS) + DAY_MS) % DAY_MS; /* the UTC day of now - retention */
  int removed = 0;
  struct dirent *te;
  while ((te = readdir(top))) {
    if (strncmp(te->d_name, "tenant=", 7) || !ak_claim_tenant_ok(te->d_name + 7, strlen(te->d_name + 7))) continue;
    char tdir[4400];
    snprintf(tdir, sizeof tdir, "%s/%s", dir, te->d_name);
    DIR *td = opendir(tdir);
    if (!td) continue;
    struct dirent *de;
    while ((de = readdir(td))) {
      int64_t day;
      if (!parse_day(de->d_name, &day) || day >= cutoff) continue;
      char ddir[4700];
      snprintf(ddir, sizeof ddir, "%s/%s", tdir, de->d_name);
      struct stat st;
      if (lstat(ddir, &st) != 0 || !S_ISDIR(st.st_mode)) continue;
      if (nftw(ddir, rm_entry, 16, FTW_DEPTH | FTW_PHYS) == 0) removed++;
      else
        ak_log(AK_LOG_WARNING, "claim_check", "cannot remove an expired claim day", "dir=%s errno=%d", ddir, errno);
    }
    closedir(td);
  }
  closedir(top);
  return removed;
}

static void *sweeper(void *arg) {
  claims_t *c = arg;
  pthread_mutex_lock(&c->mu);
  while (!c->stopping) {
    pthread_mutex_unlock(&c->mu);
    for (size_t i = 0; i < c->n; i++) {
      if (!c->local_roots[i]) continue;
      int n = ak_claims_sweep_root(c->local_roots[i], ak_now_ms(), c->retention_days);
      if (n > 0)
        ak_log(AK_LOG_INFO, "claim_check", "expired claim days removed", "store=%zu days=%d retention_days=%lld", i,
               n, (long long)c->retention_days);
      else if (n < 0)
        ak_log(AK_LOG_WARNING, "claim_check", "cannot read the claim store to sweep it", "store=%zu", i);
    }
    pthread_mutex_lock(&c->mu);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t ns = ts.tv_nsec + (c->sweep_interval_ms % 1000) * 1000000;
    ts.tv_sec += (time_t)(c->sweep_interval_ms / 1000 + ns / 1000000000);
    ts.tv_nsec = (long)(ns % 1000000000);
    while (!c->stopping && pthread_cond_timedwait(&c->sweep_cv, &c->mu, &ts) != ETIMEDOUT) {
    }
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

/* ------------------------------------------------------------- the lifecycle ---- */

static int claims_open(ak_instance_t *inst, char **err) {
  /* an edge checks bodies in itself only under wal.type none (edge/publish.h) */
  if (!(inst->roles & (AK_ROLE_DISPATCH | AK_ROLE_STORAGE | AK_ROLE_CLAIM_CHECK)) && !ak_publish_direct(inst->cfg))
    return 0;
  const json_t *cc = json_object_get(inst->cfg->effective, "claim_check");
  claims_t *c = calloc(1, sizeof *c);
  if (!c) {
    *err = strdup("out of memory");
    return AK_MODULE_FAILED;
  }
  c->inst = inst;
  pthread_mutex_init(&c->mu, NULL);
  pthread_mutex_init(&c->cache_mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&c->cv, NULL);
  pthread_cond_init(&c->sweep_cv, &ca);
  pthread_condattr_destroy(&ca);
  if (open_stores(c, cc, err) != 0) {
    ak_log(AK_LOG_ERROR, "claim_check", "cannot open the claim stores", "reason=\"%s\"", *err ? *err : "?");
    claims_free(c);
    return AK_MODULE_FAILED;
  }
  json_t *pm = json_object_get(cc, "pack_max_bytes");
  c->stores.pack_max_bytes = json_is_integer(pm) ? json_integer_value(pm) : 16777216;
  json_t *rd = json_object_get(cc, "retention_days");
  c->retention_days = json_is_integer(rd) ? json_integer_value(rd) : 0;
  json_t *si = json_object_get(cc, "sweep_interval_ms");
  c->sweep_interval_ms = json_is_integer(si) ? json_integer_value(si) : 3600000;
  c->gateway = inst->roles & AK_ROLE_CLAIM_CHECK;
  bool any_local = false;
  for (size_t i = 0; i < c->n; i++) any_local |= c->local_roots[i] != NULL;
  c->sweeper = c->retention_days > 0 && any_local && (inst->roles & (AK_ROLE_STORAGE | AK_ROLE_CLAIM_CHECK));
  ak_metrics_t *m = inst->metrics;
  const char *const rl[] = {"instance", "result", NULL}, *const ol[] = {"instance", "op", NULL};
  c->ops_f = ak_metrics_family(m, "ankusa_claim_check_operations_total",
                               "Claim gateway requests, by result (ok, partial, not_found, unauthorized, "
                               "forbidden_tenant, store_unavailable, claim_corrupt, ...).",
                               AK_METRIC_COUNTER, rl, NULL, 0);
  c->redeems_f = ak_metrics_family(m, "ankusa_claim_check_redeems_total",
                                   "Claims read through the gateway, by result (ok, not_found, store_unavailable, "
                                   "store_forbidden, corrupt).",
                                   AK_METRIC_COUNTER, rl, NULL, 0);
  ak_family_t *ff = ak_metrics_family(m, "ankusa_claim_check_failures_total",
                                      "Claim store operations that failed: check_in (a pack not written) or redeem "
                                      "(a store unavailable or refusing this node's credential, or bytes failing "
                                      "their manifest's sha256).",
                                      AK_METRIC_COUNTER, ol, NULL, 0);
  if (ff) {
    c->fail_checkin = ak_metrics_series(ff, (const char *const[]){inst->name, "check_in"});
    c->fail_redeem = ak_metrics_series(ff, (const char *const[]){inst->name, "redeem"});
  }
  c->stores.checkin_failed = c->fail_checkin;
  c->stores.redeem_failed = c->fail_redeem;
  if (c->gateway) {
    char *why = NULL;
    c->auth = ak_auth_new(ak_admin_cfg(inst->cfg)->principals, &why);
    if (!c->auth) {
      if (asprintf(err, "admin.principals: cannot be built for the claim gateway: %s", why ? why : "out of memory") <
          0)
        *err = NULL;
      free(why);
      claims_free(c);
      return AK_MODULE_BAD_CONFIG;
    }
  }
  inst->claims = &c->stores;
  the = c;
  char roles[64];
  ak_log(AK_LOG_INFO, "claim_check", "claim stores open", "stores=%zu first=%s roles=%s gateway=%s sweeper=%s", c->n,
         ak_blob_type(c->blobs[0]), ak_node_roles_text(inst->roles, roles, sizeof roles), c->gateway ? "yes" : "no",
         c->sweeper ? "yes" : "no");
  return 0;
}

static int claims_start(ak_instance_t *inst, char **err) {
  claims_t *c = the;
  if (!c || inst->claims != &c->stores) return 0;
  if (c->sweeper) {
    if (pthread_create(&c->sweep_thread, NULL, sweeper, c) != 0) {
      *err = strdup("claim_check: cannot start the retention sweeper");
      return AK_MODULE_FAILED;
    }
    c->sweep_started = true;
  }
  if (!c->gateway) return 0;
  const json_t *cc = json_object_get(inst->cfg->effective, "claim_check");
  const char *ip = json_string_value(json_object_get(cc, "ip"));
  int port = (int)json_integer_value(json_object_get(cc, "port"));
  for (; c->nworkers < WORKERS; c->nworkers++)
    if (pthread_create(&c->workers[c->nworkers], NULL, worker, c) != 0) {
      *err = strdup("claim_check: cannot start the gateway's workers");
      return AK_MODULE_FAILED;
    }
  ak_hserver_cfg_t hc = {
    .name = "claims",
    .ip = ip,
    .port = port,
    .loops = 1,
    .limits = {.max_connections = 4096},
    .handler = &claims_handler,
    .ctx = c,
  };
  char *why = NULL;
  c->srv = ak_hserver_new(&hc, &why);
  if (!c->srv || ak_hserver_start(c->srv, &why) != 0) {
    if (asprintf(err, "cannot listen on claim_check.ip %s claim_check.port %d: %s", ip ? ip : "?", port,
                 why ? why : "in use, or no permission") < 0)
      *err = NULL;
    free(why);
    if (c->srv) ak_hserver_free(c->srv);
    c->srv = NULL;
    return AK_MODULE_FAILED;
  }
  c->port = ak_hserver_port(c->srv);
  if (ak_auth_count(c->auth) == 0)
    ak_log(AK_LOG_WARNING, "claim_check",
           "admin.principals is empty: the claim gateway answers loopback clients without authentication",
           "claim_check_ip=%s claim_check_port=%d", ip, c->port);
  else
    ak_log(AK_LOG_INFO, "claim_check", "claim gateway requires a bearer token with claims:read",
           "principals=%zu claim_check_ip=%s claim_check_port=%d", ak_auth_count(c->auth), ip, c->port);
  return 0;
}

/* The listener stops first (held requests are answered by the workers before it
 * returns), then the workers and the sweeper. */
static void claims_stop(ak_instance_t *inst) {
  claims_t *c = the;
  if (!c || inst->claims != &c->stores || c->stopped) return;
  c->stopped = true;
  if (c->srv) ak_hserver_close_listener(c->srv);
  if (c->srv) ak_hserver_wait_idle(c->srv, 10000);
  pthread_mutex_lock(&c->mu);
  c->stopping = true;
  pthread_cond_broadcast(&c->cv);
  pthread_cond_broadcast(&c->sweep_cv);
  pthread_mutex_unlock(&c->mu);
  for (size_t i = 0; i < c->nworkers; i++) pthread_join(c->workers[i], NULL);
  c->nworkers = 0;
  if (c->srv) ak_hserver_stop(c->srv);
  if (c->sweep_started) pthread_join(c->sweep_thread, NULL);
  c->sweep_started = false;
}

static void claims_close(ak_instance_t *inst) {
  claims_t *c = the;
  if (!c || inst->claims != &c->stores) return;
  claims_stop(inst);
  inst->claims = NULL;
  the = NULL;
  claims_free(c);
}

int ak_claims_port(const ak_instance_t *inst) {
  return the && inst->claims == &the->stores && the->srv ? the->port : -1;
}

const ak_module_t ak_mod_claim_check = {
  .name = "claim_check",
  .section = "claim_check",
  .doc = "the claim check: claim stores for the check-in (dispatch role; the edge under wal.type none), the claim gateway (claim_check role) and "
         "the LocalFS retention sweeper",
  .options = claim_check_rows,
  .check = claim_check_check,
  .roles = AK_ROLE_EDGE | AK_ROLE_DISPATCH | AK_ROLE_STORAGE | AK_ROLE_CLAIM_CHECK,
  .open = claims_open,
  .start = claims_start,
  .stop = claims_stop,
  .close = claims_close,
};
