/* Store backups: run, verify, list, purge and restore (backup.h). */
#include "backup/backup.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/buf.h"
#include "core/clock.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "store/batch.h"
#include "store/keys.h"
#include "store/store.h"

#define IO_CHUNK (1u << 20)
#define LIST_PAGE 1000
/* the live WAL is copied into a checkpoint up to this size; beyond it the memtables are
 * flushed first (a smaller upload than a large WAL, and fewer small SSTs than flushing
 * every checkpoint) */
#define CKPT_WAL_MAX (16u << 20)

const char *const ak_backup_result_names[4] = {"ok", "failed", "foreign_backup", "prefix_shared"};

typedef struct {
  char name[16];
  char where[256];
  ak_blob_t *store, *scope;
  bool wrote;                /* this process wrote LATEST here (owner guard) */
  char **verified;           /* shared keys known present with their size, sorted */
  size_t nverified, capverified;
} target_t;

typedef struct {
  char name[AK_BACKUP_NAME_MAX];
  ino_t ino;
  uint64_t size;
  char sha[65];
} sha_memo_t;

struct ak_backup {
  uint8_t *key;
  size_t keylen;
  int64_t keep;
  target_t t[AK_BACKUP_MAX_TARGETS];
  size_t nt;
  char writer[33];
  sha_memo_t *memo;          /* sha256 of immutable files already hashed (name, inode, size) */
  size_t nmemo, capmemo;
};

static void hex(const uint8_t *p, size_t n, char *out) {
  static const char d[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = d[p[i] >> 4];
    out[2 * i + 1] = d[p[i] & 15];
  }
  out[2 * n] = '\0';
}

/* ------------------------------------------------------------------- targets ---- */

static void describe(const json_t *m, const char *default_root, char *out, size_t n) {
  const char *type = json_string_value(json_object_get(m, "type"));
  if (!type || !strcmp(type, "local")) {
    const char *root = json_string_value(json_object_get(m, "root"));
    snprintf(out, n, "local %s", root ? root : default_root);
  } else {
    const char *bucket = json_string_value(json_object_get(json_object_get(m, type), "bucket"));
    snprintf(out, n, "%s bucket %s", type, bucket ? bucket : "?");
  }
}

ak_backup_t *ak_backup_new(const ak_backup_opts_t *o, char *err, size_t errlen) {
  ak_backup_t *b = calloc(1, sizeof *b);
  if (!b || !(b->key = malloc(o->keylen ? o->keylen : 1))) {
    free(b);
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  memcpy(b->key, o->key, o->keylen);
  b->keylen = o->keylen;
  b->keep = o->keep > 0 ? o->keep : 1;
  uint8_t nonce[16];
  if (RAND_bytes(nonce, sizeof nonce) != 1) {
    snprintf(err, errlen, "no random bytes for the writer nonce");
    ak_backup_free(b);
    return NULL;
  }
  hex(nonce, sizeof nonce, b->writer);
  const json_t *maps[AK_BACKUP_MAX_TARGETS] = {o->primary, o->secondary};
  for (size_t i = 0; i < AK_BACKUP_MAX_TARGETS; i++) {
    if (!maps[i] || json_is_null(maps[i])) continue;
    target_t *t = &b->t[b->nt];
    snprintf(t->name, sizeof t->name, "%s", i == 0 ? "primary" : "secondary");
    describe(maps[i], o->default_root, t->where, sizeof t->where);
    char e[256] = "";
    t->store = ak_blob_open(maps[i], o->default_root, o->httpc, e, sizeof e);
    t->scope = t->store ? ak_blob_scope(t->store, o->key_prefix ? o->key_prefix : "", "backup") : NULL;
    b->nt++;
    if (!t->scope) {
      snprintf(err, errlen, "backup %s store (%s): %s", t->name, t->where, e[0] ? e : "out of memory");
      ak_backup_free(b);
      return NULL;
    }
  }
  if (!b->nt) {
    snprintf(err, errlen, "backup: no store to back up to");
    ak_backup_free(b);
    return NULL;
  }
  return b;
}

static void verified_clear(target_t *t) {
  for (size_t i = 0; i < t->nverified; i++) free(t->verified[i]);
  free(t->verified);
  t->verified = NULL;
  t->nverified = t->capverified = 0;
}

void ak_backup_free(ak_backup_t *b) {
  if (!b) return;
  for (size_t i = 0; i < b->nt; i++) {
    ak_blob_free(b->t[i].scope);
    ak_blob_free(b->t[i].store);
    verified_clear(&b->t[i]);
  }
  if (b->key) OPENSSL_cleanse(b->key, b->keylen);
  free(b->key);
  free(b->memo);
  free(b);
}

size_t ak_backup_ntargets(const ak_backup_t *b) { return b->nt; }
const char *ak_backup_target_name(const ak_backup_t *b, size_t i) { return b->t[i].name; }
const char *ak_backup_target_where(const ak_backup_t *b, size_t i) { return b->t[i].where; }
ak_blob_t *ak_backup_target_store(ak_backup_t *b, size_t i) { return b->t[i].store; }
const char *ak_backup_writer(const ak_backup_t *b) { return b->writer; }

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static bool verified_has(const target_t *t, const char *key) {
  return t->nverified && bsearch(&key, t->verified, t->nverified, sizeof *t->verified, cmp_str);
}

static void verified_add(target_t *t, const char *key) {
  if (verified_has(t, key) || ak_buf_grow(&t->verified, &t->capverified, t->nverified + 1, sizeof *t->verified) != 0)
    return;
  char *k = strdup(key);
  if (!k) return;
  size_t at = t->nverified;
  while (at > 0 && strcmp(t->verified[at - 1], k) > 0) at--;
  memmove(t->verified + at + 1, t->verified + at, (t->nverified - at) * sizeof *t->verified);
  t->verified[at] = k;
  t->nverified++;
}

static void verified_del(target_t *t, const char *key) {
  for (size_t i = 0; i < t->nverified; i++)
    if (!strcmp(t->verified[i], key)) {
      free(t->verified[i]);
      memmove(t->verified + i, t->verified + i + 1, (t->nverified - i - 1) * sizeof *t->verified);
      t->nverified--;
      return;
    }
}

/* Every key under prefix on t (all pages), sorted. 0, or -1 with why. */
static int list_all(target_t *t, const char *prefix, char ***keys, size_t *n, char *why, size_t whylen) {
  *keys = NULL;
  *n = 0;
  size_t cap = 0;
  char *after = NULL;
  for (;;) {
    ak_blob_list_t l = {0};
    char e[256] = "";
    if (ak_blob_list(t->scope, prefix, after, LIST_PAGE, &l, e, sizeof e) != AK_BLOB_OK) {
      snprintf(why, whylen, "listing %sbackup/%s on the %s store (%s) failed: %s", "", prefix, t->name, t->where, e);
      free(after);
      for (size_t i = 0; i < *n; i++) free((*keys)[i]);
      free(*keys);
      *keys = NULL;
      *n = 0;
      return -1;
    }
    for (size_t i = 0; i < l.n; i++) {
      if (ak_buf_grow(keys, &cap, *n + 1, sizeof **keys) != 0) break;
      (*keys)[(*n)++] = l.keys[i];
      l.keys[i] = NULL;
    }
    free(after);
    after = l.next;
    l.next = NULL;
    ak_blob_list_clear(&l);
    if (!after) break;
  }
  if (*n) qsort(*keys, *n, sizeof **keys, cmp_str);
  return 0;
}

static void keys_free(char **keys, size_t n) {
  for (size_t i = 0; i < n; i++) free(keys[i]);
  free(keys);
}

/* ----------------------------------------------------------------- the store id ---- */

int ak_backup_store_id(ak_store_t *st, char out[33], char *err, size_t errlen) {
  char *v = NULL;
  size_t vl = 0;
  int rc = ak_store_get(st, AK_CF_DEFAULT, AK_KEY_STORE_ID, strlen(AK_KEY_STORE_ID), &v, &vl);
  if (rc == 0 && vl == 16) {
    hex((const uint8_t *)v, 16, out);
    free(v);
    return 0;
  }
  free(v);
  if (rc == 0 || rc < 0) {
    snprintf(err, errlen, rc == 0 ? "m:store_id is damaged (wrong length)" : "the store is not readable");
    return -1;
  }
  uint8_t id[16];
  ak_batch_t *wb = RAND_bytes(id, sizeof id) == 1 ? ak_batch_new(st) : NULL;
  if (!wb) {
    snprintf(err, errlen, "cannot make a store id");
    return -1;
  }
  ak_batch_put(wb, AK_CF_DEFAULT, AK_KEY_STORE_ID, strlen(AK_KEY_STORE_ID), id, sizeof id);
  ak_wf_class_t cls;
  char *e = NULL;
  rc = ak_store_write(st, wb, true, &cls, &e);
  ak_batch_free(wb);
  if (rc != 0) {
    snprintf(err, errlen, "writing m:store_id failed: %s", e ? e : "store closed");
    free(e);
    return -1;
  }
  hex(id, sizeof id, out);
  return 0;
}

/* ------------------------------------------------------------------- files ---- */

bool ak_backup_is_store_file(const char *name) {
  size_t n = strlen(name);
  if (!strncmp(name, "MANIFEST-", 9)) return true;
  if (!strcmp(name, "CURRENT")) return true;
  return (n > 4 && (!strcmp(name + n - 4, ".sst") || !strcmp(name + n - 4, ".log"))) ||
         (n > 5 && !strcmp(name + n - 5, ".blob"));
}

/* sha256 (hex) of the fd's bytes from the start; *size the bytes read. */
static int sha_fd(int fd, char out[65], uint64_t *size) {
  EVP_MD_CTX *c = EVP_MD_CTX_new();
  uint8_t *buf = malloc(IO_CHUNK);
  int rc = -1;
  uint64_t total = 0;
  if (c && buf && EVP_DigestInit_ex(c, EVP_sha256(), NULL) == 1) {
    for (;;) {
      ssize_t r = pread(fd, buf, IO_CHUNK, (off_t)total);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) break;
      if (r == 0) {
        unsigned char md[32];
        unsigned int l = 0;
        if (EVP_DigestFinal_ex(c, md, &l) == 1 && l == 32) {
          hex(md, 32, out);
          rc = 0;
        }
        break;
      }
      EVP_DigestUpdate(c, buf, (size_t)r);
      total += (uint64_t)r;
    }
  }
  free(buf);
  EVP_MD_CTX_free(c);
  *size = total;
  return rc;
}

static const char *memo_find(ak_backup_t *b, const char *name, ino_t ino, uint64_t size) {
  for (size_t i = 0; i < b->nmemo; i++)
    if (b->memo[i].ino == ino && b->memo[i].size == size && !strcmp(b->memo[i].name, name)) return b->memo[i].sha;
  return NULL;
}

/* Keep the memo to the files of the last checkpoint (compactions delete the others). */
static void memo_keep(ak_backup_t *b, const ak_backup_manifest_t *m) {
  size_t w = 0;
  for (size_t i = 0; i < b->nmemo; i++) {
    bool live = false;
    for (size_t j = 0; j < m->nfiles && !live; j++) live = !strcmp(m->files[j].name, b->memo[i].name);
    if (live) b->memo[w++] = b->memo[i];
  }
  b->nmemo = w;
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The manifest of the checkpoint in dir: every file, its size and sha256 (immutable ones
 * hashed once per process). 0, or -1 with why. */
static int describe_dir(ak_backup_t *b, const char *dir, ak_backup_manifest_t *m, char *why, size_t whylen) {
  DIR *d = opendir(dir);
  if (!d) {
    snprintf(why, whylen, "cannot read the checkpoint %s: %s", dir, strerror(errno));
    return -1;
  }
  char **names = NULL;
  size_t n = 0, cap = 0;
  struct dirent *e;
  int rc = 0;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char *s = strdup(e->d_name);
    if (!s || ak_buf_grow(&names, &cap, n + 1, sizeof *names) != 0) {
      free(s);
      rc = -1;
      snprintf(why, whylen, "out of memory");
      break;
    }
    names[n++] = s;
  }
  closedir(d);
  if (n) qsort(names, n, sizeof *names, cmp_name);
  bool current = false;
  for (size_t i = 0; rc == 0 && i < n; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
      snprintf(why, whylen, "cannot read %s: %s", path, strerror(errno));
      rc = -1;
    } else if (!S_ISREG(sb.st_mode) || !ak_backup_name_ok(names[i])) {
      snprintf(why, whylen, "the checkpoint holds %s, which is not a store file", names[i]);
      rc = -1;
    } else {
      bool shared = ak_backup_name_shared(names[i]);
      const char *known = shared ? memo_find(b, names[i], sb.st_ino, (uint64_t)sb.st_size) : NULL;
      char sha[65];
      uint64_t size = (uint64_t)sb.st_size;
      if (known) memcpy(sha, known, 65);
      else if (sha_fd(fd, sha, &size) != 0 || size != (uint64_t)sb.st_size) {
        snprintf(why, whylen, "cannot read %s", path);
        rc = -1;
      } else if (shared && ak_buf_grow(&b->memo, &b->capmemo, b->nmemo + 1, sizeof *b->memo) == 0) {
        sha_memo_t *mm = &b->memo[b->nmemo++];
        snprintf(mm->name, sizeof mm->name, "%s", names[i]);
        mm->ino = sb.st_ino;
        mm->size = size;
        memcpy(mm->sha, sha, 65);
      }
      if (rc == 0 && ak_backup_manifest_add(m, names[i], size, sha) != 0) {
        snprintf(why, whylen, "out of memory");
        rc = -1;
      }
      if (!strcmp(names[i], "CURRENT")) current = true;
    }
    if (fd >= 0) close(fd);
  }
  for (size_t i = 0; i < n; i++) free(names[i]);
  free(names);
  if (rc == 0 && !current) {
    snprintf(why, whylen, "the checkpoint %s has no CURRENT", dir);
    rc = -1;
  }
  return rc;
}

static void rm_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
  }
  closedir(d);
  rmdir(dir);
}

/* ------------------------------------------------------------------- one run ---- */

static int get_latest(target_t *t, ak_backup_latest_t *l, char *why, size_t whylen) {
  uint8_t *data = NULL;
  size_t len = 0;
  char e[256] = "";
  int rc = ak_blob_get(t->scope, "LATEST", &data, &len, e, sizeof e);
  if (rc == AK_BLOB_NOT_FOUND) return AK_BACKUP_NOT_THERE;
  if (rc != AK_BLOB_OK) {
    snprintf(why, whylen, "reading backup/LATEST on the %s store (%s) failed: %s", t->name, t->where, e);
    return -1;
  }
  char w[256];
  rc = ak_backup_latest_decode((const char *)data, len, l, w, sizeof w);
  free(data);
  if (rc != 0) snprintf(why, whylen, "backup/LATEST on the %s store (%s): %s", t->name, t->where, w);
  return rc == 0 ? 0 : -1;
}

static int fail(ak_backup_result_t *r, int rc, const char *stage, const char *fmt, ...)
  __attribute__((format(printf, 4, 5)));
static int fail(ak_backup_result_t *r, int rc, const char *stage, const char *fmt, ...) {
  r->rc = rc;
  snprintf(r->stage, sizeof r->stage, "%s", stage);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->why, sizeof r->why, fmt, ap);
  va_end(ap);
  return rc;
}

static int upload_file(target_t *t, const char *dir, const ak_backup_file_t *f, char *e, size_t el) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, f->name);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    snprintf(e, el, "%.300s: %s", path, strerror(errno));
    return AK_BLOB_ERROR;
  }
  int rc = ak_blob_put_file(t->scope, f->key, fd, f->size, f->sha256, e, el);
  close(fd);
  return rc;
}

static void purge(ak_backup_t *b, target_t *t, const ak_backup_latest_t *latest, ak_backup_result_t *r);

static int run_target(ak_backup_t *b, target_t *t, const char *dir, const ak_backup_manifest_t *m,
                      ak_backup_result_t *r) {
  memset(r, 0, sizeof *r);
  char why[512];
  ak_backup_latest_t l;
  int lr = get_latest(t, &l, why, sizeof why);
  if (lr < 0) return fail(r, AK_BACKUP_FAILED, "guard", "%s", why);
  if (lr == 0 && strcmp(l.store_id, m->store_id))
    return fail(r, AK_BACKUP_FOREIGN, "guard",
                "backup/LATEST on the %s store (%s) belongs to another store (%s, ours %s): nothing uploaded or "
                "purged; give this node its own storage.key_prefix or backup.store",
                t->name, t->where, l.store_id, m->store_id);
  if (lr == 0 && t->wrote && strcmp(l.writer, b->writer))
    return fail(r, AK_BACKUP_SHARED, "guard",
                "backup/LATEST on the %s store (%s) was written by another process of this store (writer %s, ours "
                "%s) after our last backup: an old host still running beside its replacement? nothing uploaded",
                t->name, t->where, l.writer, b->writer);
  /* the shared files present, by listing (a key deleted behind our back is uploaded again) */
  char **have = NULL;
  size_t nhave = 0;
  if (list_all(t, "sst/", &have, &nhave, why, sizeof why) != 0) return fail(r, AK_BACKUP_FAILED, "upload", "%s", why);
  for (size_t i = 0; i < m->nfiles; i++) {
    const ak_backup_file_t *f = &m->files[i];
    char e[512] = "";
    if (f->shared) {
      const char *k = f->key;
      bool listed = nhave && bsearch(&k, have, nhave, sizeof *have, cmp_str);
      if (listed && verified_has(t, f->key)) {
        r->skipped++;
        continue;
      }
      uint64_t size = 0;
      if (listed && ak_blob_head(t->scope, f->key, &size, e, sizeof e) == AK_BLOB_OK && size == f->size) {
        verified_add(t, f->key);
        r->skipped++;
        continue;
      }
    }
    if (upload_file(t, dir, f, e, sizeof e) != AK_BLOB_OK) {
      keys_free(have, nhave);
      return fail(r, AK_BACKUP_FAILED, "upload", "uploading %s to backup/%s on the %s store (%s) failed: %s", f->name,
                  f->key, t->name, t->where, e);
    }
    if (f->shared) verified_add(t, f->key);
    r->uploaded++;
    r->bytes += f->size;
  }
  keys_free(have, nhave);
  size_t len = 0;
  char *text = ak_backup_manifest_encode(m, b->key, b->keylen, &len);
  char key[AK_BACKUP_KEY_MAX + 16], e[512] = "";
  snprintf(key, sizeof key, "%s/manifest.json", m->id);
  if (!text || ak_blob_put(t->scope, key, text, len, e, sizeof e) != AK_BLOB_OK) {
    free(text);
    return fail(r, AK_BACKUP_FAILED, "manifest", "writing backup/%s on the %s store (%s) failed: %s", key, t->name,
                t->where, text ? e : "out of memory");
  }
  free(text);
  r->bytes += len;
  ak_backup_latest_t nl = {.created_at_ms = m->created_at_ms};
  memcpy(nl.id, m->id, sizeof nl.id);
  memcpy(nl.store_id, m->store_id, sizeof nl.store_id);
  memcpy(nl.writer, b->writer, sizeof nl.writer);
  text = ak_backup_latest_encode(&nl, &len);
  if (!text || ak_blob_put(t->scope, "LATEST", text, len, e, sizeof e) != AK_BLOB_OK) {
    free(text);
    return fail(r, AK_BACKUP_FAILED, "latest", "writing backup/LATEST on the %s store (%s) failed: %s", t->name,
                t->where, e);
  }
  free(text);
  t->wrote = true;
  purge(b, t, &nl, r);
  return AK_BACKUP_OK;
}

int ak_backup_run(ak_backup_t *b, ak_store_t *st, const char *store_id, const char *ckpt_dir,
                  char id[AK_BACKUP_ID_LEN + 1], ak_backup_result_t res[AK_BACKUP_MAX_TARGETS], char *why,
                  size_t whylen) {
  rm_dir(ckpt_dir);
  char *e = NULL;
  int64_t now = ak_now_ms();
  if (ak_store_checkpoint(st, ckpt_dir, CKPT_WAL_MAX, &e) != 0) {
    snprintf(why, whylen, "%s", e ? e : "checkpoint failed");
    free(e);
    rm_dir(ckpt_dir);
    return -1;
  }
  ak_backup_manifest_t m = {.version = AK_BACKUP_MANIFEST_VERSION, .created_at_ms = now};
  ak_backup_new_id(now, m.id);
  snprintf(m.store_id, sizeof m.store_id, "%s", store_id);
  snprintf(m.writer, sizeof m.writer, "%s", b->writer);
  memcpy(id, m.id, AK_BACKUP_ID_LEN + 1);
  if (describe_dir(b, ckpt_dir, &m, why, whylen) != 0) {
    ak_backup_manifest_clear(&m);
    rm_dir(ckpt_dir);
    return -1;
  }
  memo_keep(b, &m);
  int rc = 0;
  for (size_t i = 0; i < b->nt; i++) {
    run_target(b, &b->t[i], ckpt_dir, &m, &res[i]);
    if (res[i].rc != AK_BACKUP_OK) rc = 1;
  }
  ak_backup_manifest_clear(&m);
  rm_dir(ckpt_dir);
  return rc;
}

/* --------------------------------------------------------------------- purge ---- */

/* "<id>/..." -> id, when the key's first part is a backup id. */
static bool key_id(const char *key, char id[AK_BACKUP_ID_LEN + 1]) {
  const char *slash = strchr(key, '/');
  if (!slash || slash - key != AK_BACKUP_ID_LEN || !ak_backup_id_ok(key, AK_BACKUP_ID_LEN)) return false;
  memcpy(id, key, AK_BACKUP_ID_LEN);
  id[AK_BACKUP_ID_LEN] = '\0';
  return true;
}

static int read_manifest(ak_backup_t *b, target_t *t, const char *id, ak_backup_manifest_t *m, char *why,
                         size_t whylen) {
  char key[64], e[256] = "";
  snprintf(key, sizeof key, "%s/manifest.json", id);
  uint8_t *data = NULL;
  size_t len = 0;
  int rc = ak_blob_get(t->scope, key, &data, &len, e, sizeof e);
  if (rc != AK_BLOB_OK) {
    snprintf(why, whylen, "backup/%s on the %s store (%s): %s", key, t->name, t->where,
             rc == AK_BLOB_NOT_FOUND ? "missing" : e);
    return -1;
  }
  char w[256];
  rc = ak_backup_manifest_decode((const char *)data, len, b->key, b->keylen, m, w, sizeof w);
  free(data);
  if (rc == 0 && strcmp(m->id, id)) {
    ak_backup_manifest_clear(m);
    snprintf(w, sizeof w, "it names another backup (%.26s)", m->id);
    rc = -1;
  }
  if (rc != 0) snprintf(why, whylen, "backup/%s on the %s store (%s): %s", key, t->name, t->where, w);
  return rc;
}

/* The newest `keep` complete backups stay (LATEST's always); other backups go, and shared
 * files no kept manifest lists. Nothing is deleted when the listing or a kept manifest
 * cannot be read. */
static void purge(ak_backup_t *b, target_t *t, const ak_backup_latest_t *latest, ak_backup_result_t *r) {
  char **keys = NULL, why[512];
  size_t n = 0;
  if (list_all(t, "", &keys, &n, why, sizeof why) != 0) {
    r->purge_skipped = true;
    snprintf(r->why, sizeof r->why, "purge skipped: %.480s", why);
    return;
  }
  /* complete backups (with a manifest), newest first: keys are sorted, ids are ULIDs */
  char (*kept)[AK_BACKUP_ID_LEN + 1] = calloc((size_t)b->keep + 1, sizeof *kept);
  size_t nkept = 0;
  if (!kept) {
    keys_free(keys, n);
    r->purge_skipped = true;
    return;
  }
  memcpy(kept[nkept++], latest->id, AK_BACKUP_ID_LEN + 1);
  for (size_t i = n; i-- > 0 && nkept < (size_t)b->keep;) {
    char id[AK_BACKUP_ID_LEN + 1];
    if (!key_id(keys[i], id) || strcmp(keys[i] + AK_BACKUP_ID_LEN, "/manifest.json") || !strcmp(id, latest->id) ||
        strcmp(id, latest->id) > 0)
      continue;
    memcpy(kept[nkept++], id, sizeof id);
  }
  /* the shared keys the kept manifests list */
  char **refs = NULL;
  size_t nrefs = 0, caprefs = 0;
  bool ok = true;
  for (size_t k = 0; k < nkept && ok; k++) {
    ak_backup_manifest_t m;
    if (read_manifest(b, t, kept[k], &m, why, sizeof why) != 0) {
      ok = false;
      snprintf(r->why, sizeof r->why, "purge skipped: %.480s", why);
      break;
    }
    for (size_t i = 0; i < m.nfiles && ok; i++) {
      if (!m.files[i].shared) continue;
      char *s = strdup(m.files[i].key);
      if (!s || ak_buf_grow(&refs, &caprefs, nrefs + 1, sizeof *refs) != 0) {
        free(s);
        ok = false;
      } else refs[nrefs++] = s;
    }
    ak_backup_manifest_clear(&m);
  }
  if (ok) {
    if (nrefs) qsort(refs, nrefs, sizeof *refs, cmp_str);
    for (size_t i = 0; i < n; i++) {
      char id[AK_BACKUP_ID_LEN + 1];
      bool drop = false;
      if (key_id(keys[i], id)) {
        drop = true;
        for (size_t k = 0; k < nkept && drop; k++) drop = strcmp(id, kept[k]) != 0;
      } else if (!strncmp(keys[i], "sst/", 4)) {
        const char *k = keys[i];
        drop = !(nrefs && bsearch(&k, refs, nrefs, sizeof *refs, cmp_str));
      }
      if (!drop) continue;
      char e[256];
      if (ak_blob_delete(t->scope, keys[i], e, sizeof e) == AK_BLOB_OK) verified_del(t, keys[i]);
    }
  } else r->purge_skipped = true;
  keys_free(refs, nrefs);
  keys_free(keys, n);
  free(kept);
}

/* -------------------------------------------------------------- verify, list ---- */

typedef struct {
  EVP_MD_CTX *md;
  int fd;       /* restore: where the bytes go, else -1 */
  uint64_t off;
  int err;
} sink_t;

static int to_sink(void *ctx, const uint8_t *p, size_t n) {
  sink_t *s = ctx;
  EVP_DigestUpdate(s->md, p, n);
  while (s->fd >= 0 && n) {
    ssize_t w = pwrite(s->fd, p, n, (off_t)s->off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      s->err = w < 0 ? errno : ENOSPC;
      return -1;
    }
    p += w;
    n -= (size_t)w;
    s->off += (uint64_t)w;
  }
  return 0;
}

#define DAMAGED (-2) /* read whole, and not the bytes the manifest signed */

/* Stream a file's object through its checks (and into fd when >= 0). 0, DAMAGED, or -1
 * (unreadable) with why. */
static int fetch_checked(target_t *t, const ak_backup_file_t *f, int fd, char *why, size_t whylen) {
  sink_t s = {.md = EVP_MD_CTX_new(), .fd = fd};
  if (!s.md || EVP_DigestInit_ex(s.md, EVP_sha256(), NULL) != 1) {
    EVP_MD_CTX_free(s.md);
    snprintf(why, whylen, "out of memory");
    return -1;
  }
  uint64_t total = 0;
  char e[256] = "";
  int rc = ak_blob_stream(t->scope, f->key, to_sink, &s, &total, e, sizeof e);
  unsigned char md[32];
  unsigned int l = 0;
  char sha[65] = "";
  if (rc == AK_BLOB_OK && EVP_DigestFinal_ex(s.md, md, &l) == 1 && l == 32) hex(md, 32, sha);
  EVP_MD_CTX_free(s.md);
  if (rc == AK_BLOB_NOT_FOUND) snprintf(why, whylen, "backup/%s (%s) is missing", f->key, f->name);
  else if (rc != AK_BLOB_OK && s.err)
    snprintf(why, whylen, "writing %s failed: %s", f->name, strerror(s.err));
  else if (rc != AK_BLOB_OK) snprintf(why, whylen, "reading backup/%s (%s) failed: %s", f->key, f->name, e);
  else if (total != f->size) {
    snprintf(why, whylen, "backup/%s (%s) is %llu bytes, the manifest says %llu", f->key, f->name,
             (unsigned long long)total, (unsigned long long)f->size);
    return DAMAGED;
  } else if (strcmp(sha, f->sha256)) {
    snprintf(why, whylen, "backup/%s (%s): checksum_mismatch (sha256 %s, the manifest says %s)", f->key, f->name, sha,
             f->sha256);
    return DAMAGED;
  } else return 0;
  return -1;
}

int ak_backup_verify(ak_backup_t *b, size_t i, const char *id, bool repair, ak_backup_manifest_t *mout, char *why,
                     size_t whylen) {
  target_t *t = &b->t[i];
  ak_backup_latest_t l;
  if (!id) {
    int lr = get_latest(t, &l, why, whylen);
    if (lr != 0) return lr == AK_BACKUP_NOT_THERE ? AK_BACKUP_NOT_THERE : -1;
    id = l.id;
  }
  ak_backup_manifest_t m;
  if (read_manifest(b, t, id, &m, why, whylen) != 0) return -1;
  for (size_t k = 0; k < m.nfiles; k++) {
    char w[512];
    int rc = fetch_checked(t, &m.files[k], -1, w, sizeof w);
    if (rc != 0) {
      char e[256] = "";
      bool fixed = repair && rc == DAMAGED && m.files[k].shared &&
                   ak_blob_delete(t->scope, m.files[k].key, e, sizeof e) == AK_BLOB_OK;
      if (fixed) verified_del(t, m.files[k].key);
      snprintf(why, whylen, "%s store (%s): %s%s", t->name, t->where, w,
               fixed ? " (the damaged object was deleted: the next backup uploads it again)" : "");
      ak_backup_manifest_clear(&m);
      return -1;
    }
  }
  if (mout) *mout = m;
  else ak_backup_manifest_clear(&m);
  return 0;
}

static int cmp_entry(const void *a, const void *b) {
  return -strcmp(((const ak_backup_entry_t *)a)->id, ((const ak_backup_entry_t *)b)->id);
}

int ak_backup_list(ak_backup_t *b, size_t i, ak_backup_entry_t **out, size_t *n, char *why, size_t whylen) {
  target_t *t = &b->t[i];
  *out = NULL;
  *n = 0;
  char **keys = NULL;
  size_t nk = 0, cap = 0;
  if (list_all(t, "", &keys, &nk, why, whylen) != 0) return -1;
  ak_backup_latest_t l = {0};
  char w[256];
  bool has_latest = get_latest(t, &l, w, sizeof w) == 0;
  for (size_t k = 0; k < nk; k++) {
    char id[AK_BACKUP_ID_LEN + 1];
    if (!key_id(keys[k], id)) continue;
    if (!*n || strcmp((*out)[*n - 1].id, id)) {
      if (ak_buf_grow(out, &cap, *n + 1, sizeof **out) != 0) break;
      memset(&(*out)[*n], 0, sizeof **out);
      memcpy((*out)[*n].id, id, sizeof id);
      (*out)[*n].latest = has_latest && !strcmp(l.id, id);
      (*n)++;
    }
    if (!strcmp(keys[k] + AK_BACKUP_ID_LEN, "/manifest.json")) (*out)[*n - 1].complete = true;
  }
  keys_free(keys, nk);
  if (*n) qsort(*out, *n, sizeof **out, cmp_entry);
  return 0;
}

/* ------------------------------------------------------------------- restore ---- */

/* One file: into "<name>.ak-restore", checked, synced, renamed. */
static int restore_file(target_t *t, const char *dir, const ak_backup_file_t *f, char *why, size_t whylen) {
  char tmp[4096], path[4096];
  snprintf(tmp, sizeof tmp, "%s/%s.ak-restore", dir, f->name);
  snprintf(path, sizeof path, "%s/%s", dir, f->name);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    snprintf(why, whylen, "cannot write %.300s: %s", tmp, strerror(errno));
    return -1;
  }
  int rc = fetch_checked(t, f, fd, why, whylen);
  if (rc == 0 && fsync(fd) != 0) {
    snprintf(why, whylen, "fsync %.300s: %s", tmp, strerror(errno));
    rc = -1;
  }
  close(fd);
  if (rc == 0 && rename(tmp, path) != 0) {
    snprintf(why, whylen, "rename %.300s: %s", tmp, strerror(errno));
    rc = -1;
  }
  if (rc != 0) unlink(tmp);
  return rc;
}

/* Remove what a failed attempt wrote (the manifest's names and their temporaries). */
static void restore_undo(const char *dir, const ak_backup_manifest_t *m) {
  for (size_t i = 0; i < m->nfiles; i++) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, m->files[i].name);
    unlink(p);
    snprintf(p, sizeof p, "%s/%s.ak-restore", dir, m->files[i].name);
    unlink(p);
  }
}

static int restore_from(ak_backup_t *b, target_t *t, const char *dir, const char *id, ak_backup_manifest_t *m,
                        char *why, size_t whylen) {
  if (read_manifest(b, t, id, m, why, whylen) != 0) return -1;
  const ak_backup_file_t *current = NULL;
  for (size_t i = 0; i < m->nfiles; i++) {
    if (!strcmp(m->files[i].name, "CURRENT")) {
      current = &m->files[i];
      continue;
    }
    if (restore_file(t, dir, &m->files[i], why, whylen) != 0) goto undo;
  }
  /* every other file is durable before CURRENT names them */
  if (ak_fsync_dir(dir) != 0 || restore_file(t, dir, current, why, whylen) != 0 || ak_fsync_dir(dir) != 0) {
    if (!why[0]) snprintf(why, whylen, "fsync %s: %s", dir, strerror(errno));
    goto undo;
  }
  return 0;
undo:
  restore_undo(dir, m);
  ak_backup_manifest_clear(m);
  return -1;
}

int ak_backup_restore(ak_backup_t *b, const char *dir, const char *id, const char **from, ak_backup_manifest_t *m,
                      char *why, size_t whylen) {
  size_t empty = 0, off = 0;
  why[0] = '\0';
  for (size_t i = 0; i < b->nt; i++) {
    target_t *t = &b->t[i];
    char w[768] = "";
    ak_backup_latest_t l;
    char **keys = NULL;
    size_t nk = 0;
    /* a listing, not a read: a bucket or prefix that cannot be listed is an error, never
     * "no backup yet" */
    int rc = list_all(t, "LATEST", &keys, &nk, w, sizeof w);
    bool has = false;
    for (size_t k = 0; k < nk; k++) has |= !strcmp(keys[k], "LATEST");
    keys_free(keys, nk);
    if (rc == 0 && !has && !id) {
      empty++;
      snprintf(w, sizeof w, "no backup/LATEST");
    } else if (rc == 0) {
      const char *want = id;
      if (!want) {
        rc = get_latest(t, &l, w, sizeof w);
        want = l.id;
      }
      if (rc == 0) {
        w[0] = '\0';
        rc = restore_from(b, t, dir, want, m, w, sizeof w);
        if (rc == 0) {
          *from = t->name;
          return AK_RESTORE_DONE;
        }
      }
    }
    int k = snprintf(why + off, whylen - off, "%s%s store (%s): %s", off ? "; " : "", t->name, t->where, w);
    if (k > 0) off = (size_t)k + off < whylen ? off + (size_t)k : whylen - 1;
  }
  return empty == b->nt ? AK_RESTORE_EMPTY : AK_RESTORE_FAILED;
}
