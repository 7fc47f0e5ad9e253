/* The LocalFS blob store (blob/blob.h): an object is a file under the root, its key the
 * path. A put writes a temporary file beside the object (".ak-tmp-" in its name, never a
 * key), fsyncs it, renames it over the object and fsyncs the directory, after creating
 * (and fsyncing into their parents) the directories the key needs: a crash leaves the old
 * object or the new one. A put from a file fills that temporary file by copy_file_range
 * (or 1 MiB reads and writes), never the whole file in memory. A list walks the tree
 * under the root (sorted, so pages follow byte order); it costs the objects under the
 * prefix's directory, which suits the few thousand segments a node keeps per day, not a
 * bucket's millions. */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <openssl/rand.h>
#include "core/buf.h"
#include "core/fsutil.h"
#include "blob/blob.h"

typedef struct {
  char *root;
} local_t;

static int fail(char *err, size_t errlen, const char *what, int e) {
  snprintf(err, errlen, "localfs: %s: %s", what, strerror(e));
  return AK_BLOB_ERROR;
}

static char *path_of(const local_t *l, const char *key) {
  size_t n = strlen(l->root) + 1 + strlen(key) + 1;
  char *p = malloc(n);
  if (p) snprintf(p, n, "%s/%s", l->root, key);
  return p;
}

/* mkdir -p of path's parent directories below the root, each new one fsynced into its
 * parent. */
static int make_parents(const local_t *l, char *path) {
  size_t rl = strlen(l->root);
  for (char *p = path + rl + 1; (p = strchr(p, '/')); p++) {
    *p = 0;
    int rc = mkdir(path, 0755);
    int e = errno;
    if (rc == 0) {
      char *slash = strrchr(path, '/');
      *slash = 0;
      int frc = ak_fsync_dir(path);
      *slash = '/';
      if (frc != 0) {
        *p = '/';
        return -1;
      }
    } else if (e != EEXIST) {
      *p = '/';
      errno = e;
      return -1;
    }
    *p = '/';
  }
  return 0;
}

/* What goes into the temporary file: 0, or -1 with err filled. */
typedef int (*fill_fn)(int fd, void *ctx, char *err, size_t errlen);

typedef struct {
  const uint8_t *data;
  size_t len;
} mem_src_t;

static int fill_mem(int fd, void *ctx, char *err, size_t errlen) {
  const mem_src_t *m = ctx;
  for (size_t done = 0; done < m->len;) {
    ssize_t w = write(fd, m->data + done, m->len - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return fail(err, errlen, "writing", w < 0 ? errno : EIO);
    done += (size_t)w;
  }
  return 0;
}

#define COPY_BUF (1u << 20) /* bytes per copy; the read/write fallback's buffer (all of a file
                               that is ever in memory) */

typedef struct {
  int fd;
  uint64_t size;
} file_src_t;

/* [0, size) of the source into fd: copy_file_range (the kernel copies, or reflinks, with
 * no byte in our memory), else 1 MiB at a time through pread/write (another filesystem on
 * an old kernel, a filesystem without it). The source's offset is never moved. A source
 * that ends early is an error: a short object must never be put. */
static int fill_file(int fd, void *ctx, char *err, size_t errlen) {
  const file_src_t *f = ctx;
  uint64_t done = 0;
  bool kernel = true;
#ifdef AK_TEST_HOOKS
  /* test builds only: the read/write path on a filesystem where copy_file_range works */
  if (getenv("ANKUSA_TEST_NO_COPY_FILE_RANGE")) kernel = false;
#endif
  uint8_t *buf = NULL;
  while (done < f->size) {
    uint64_t left = f->size - done;
    size_t want = left > COPY_BUF ? COPY_BUF : (size_t)left;
    ssize_t n;
    if (kernel) {
      loff_t in = (loff_t)done;
      n = copy_file_range(f->fd, &in, fd, NULL, want, 0);
      if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP) && done == 0) {
        kernel = false;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        free(buf);
        return fail(err, errlen, "copying the file", errno);
      }
    } else {
      if (!buf && !(buf = malloc(COPY_BUF))) return fail(err, errlen, "copying the file", ENOMEM);
      n = pread(f->fd, buf, want, (off_t)done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        free(buf);
        return fail(err, errlen, "reading the file", errno);
      }
      for (ssize_t put = 0; put < n;) {
        ssize_t w = write(fd, buf + put, (size_t)(n - put));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
          free(buf);
          return fail(err, errlen, "writing", w < 0 ? errno : EIO);
        }
        put += w;
      }
    }
    if (n == 0) {
      free(buf);
      snprintf(err, errlen, "localfs: the file ended after %llu of %llu bytes", (unsigned long long)done,
               (unsigned long long)f->size);
      return -1;
    }
    done += (uint64_t)n;
  }
  free(buf);
  return 0;
}

/* The durable write of one object: a temporary file beside it filled by fill, fsynced,
 * renamed over the key, the directory fsynced. On failure the temporary file is gone and
 * an old object of the key is untouched. */
static int local_write(local_t *l, const char *key, fill_fn fill, void *ctx, char *err, size_t errlen) {
  char *path = path_of(l, key), *tmp = NULL;
  int fd = -1, rc = AK_BLOB_ERROR;
  uint8_t rnd[8];
  if (!path || RAND_bytes(rnd, sizeof rnd) != 1) {
    snprintf(err, errlen, "localfs: out of memory or randomness");
    goto out;
  }
  if (make_parents(l, path) != 0) {
    rc = fail(err, errlen, "creating the key's directories", errno);
    goto out;
  }
  if (asprintf(&tmp, "%s.ak-tmp-%02x%02x%02x%02x%02x%02x%02x%02x", path, rnd[0], rnd[1], rnd[2], rnd[3], rnd[4],
               rnd[5], rnd[6], rnd[7]) < 0) {
    tmp = NULL;
    snprintf(err, errlen, "localfs: out of memory");
    goto out;
  }
  fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    rc = fail(err, errlen, "creating the temporary file", errno);
    goto out;
  }
  if (fill(fd, ctx, err, errlen) != 0) goto out;
  if (fsync(fd) != 0) {
    rc = fail(err, errlen, "fsync", errno);
    goto out;
  }
  close(fd);
  fd = -1;
  if (rename(tmp, path) != 0) {
    rc = fail(err, errlen, "rename", errno);
    goto out;
  }
  free(tmp);
  tmp = NULL;
  char *slash = strrchr(path, '/');
  *slash = 0;
  int frc = ak_fsync_dir(path);
  *slash = '/';
  if (frc != 0) {
    rc = fail(err, errlen, "fsync of the directory", errno);
    goto out;
  }
  rc = AK_BLOB_OK;
out:
  if (fd >= 0) close(fd);
  if (tmp) {
    unlink(tmp);
    free(tmp);
  }
  free(path);
  return rc;
}

static int local_put(void *self, const char *key, const void *data, size_t len, char *err, size_t errlen) {
  mem_src_t m = {.data = data, .len = len};
  return local_write(self, key, fill_mem, &m, err, errlen);
}

static int local_put_file(void *self, const char *key, int fd, uint64_t size, const char *sha256_hex, char *err,
                          size_t errlen) {
  (void)sha256_hex; /* the bytes are copied as they are; nothing on the way to check them against */
  file_src_t f = {.fd = fd, .size = size};
  return local_write(self, key, fill_file, &f, err, errlen);
}

static int local_get_range(void *self, const char *key, uint64_t off, size_t len, uint8_t **data, size_t *got,
                           char *err, size_t errlen) {
  local_t *l = self;
  char *path = path_of(l, key);
  if (!path) return fail(err, errlen, "path", ENOMEM);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  int e = errno;
  free(path);
  if (fd < 0) return e == ENOENT || e == ENOTDIR ? AK_BLOB_NOT_FOUND : fail(err, errlen, "open", e);
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return AK_BLOB_NOT_FOUND;
  }
  uint64_t size = (uint64_t)st.st_size;
  size_t want = off >= size ? 0 : (size - off < len ? (size_t)(size - off) : len);
  uint8_t *buf = malloc(want ? want : 1);
  if (!buf) {
    close(fd);
    return fail(err, errlen, "read", ENOMEM);
  }
  size_t done = 0;
  while (done < want) {
    ssize_t r = pread(fd, buf + done, want - done, (off_t)(off + done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    done += (size_t)r;
  }
  close(fd);
  if (done != want) {
    free(buf);
    return fail(err, errlen, "read", EIO);
  }
  *data = buf;
  *got = done;
  return AK_BLOB_OK;
}

static int local_head(void *self, const char *key, uint64_t *size, char *err, size_t errlen) {
  local_t *l = self;
  char *path = path_of(l, key);
  if (!path) return fail(err, errlen, "path", ENOMEM);
  struct stat st;
  int rc = stat(path, &st);
  int e = errno;
  free(path);
  if (rc != 0) return e == ENOENT || e == ENOTDIR ? AK_BLOB_NOT_FOUND : fail(err, errlen, "stat", e);
  if (!S_ISREG(st.st_mode)) return AK_BLOB_NOT_FOUND;
  *size = (uint64_t)st.st_size;
  return AK_BLOB_OK;
}

typedef struct {
  char **v;
  size_t n, cap;
  int err;
} keys_t;

/* Every object key under dir (rel: its key so far), into k. */
static void walk(const char *dir, const char *rel, const char *prefix, keys_t *k) {
  DIR *d = opendir(dir);
  if (!d) {
    if (errno != ENOENT) k->err = errno;
    return;
  }
  struct dirent *e;
  while ((e = readdir(d)) && !k->err) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || strstr(e->d_name, ".ak-tmp-")) continue;
    char *key = NULL, *path = NULL;
    if (asprintf(&key, "%s%s%s", rel, *rel ? "/" : "", e->d_name) < 0 ||
        asprintf(&path, "%s/%s", dir, e->d_name) < 0) {
      k->err = ENOMEM;
      free(key);
      break;
    }
    /* only what can lie under the prefix: a directory whose key is a prefix of it or
     * starts with it, an object that starts with it */
    size_t kl = strlen(key), pl = strlen(prefix);
    struct stat st;
    if (lstat(path, &st) == 0) {
      if (S_ISDIR(st.st_mode)) {
        if (!strncmp(key, prefix, kl < pl ? kl : pl)) walk(path, key, prefix, k);
      } else if (S_ISREG(st.st_mode) && !strncmp(key, prefix, pl)) {
        if (ak_buf_grow(&k->v, &k->cap, k->n + 1, sizeof *k->v) != 0) k->err = ENOMEM;
        else {
          k->v[k->n++] = key;
          key = NULL;
        }
      }
    }
    free(key);
    free(path);
  }
  closedir(d);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int local_list(void *self, const char *prefix, const char *after, size_t max, ak_blob_list_t *out,
                      char *err, size_t errlen) {
  local_t *l = self;
  keys_t k = {0};
  walk(l->root, "", prefix, &k);
  int rc = AK_BLOB_OK;
  if (k.err) rc = fail(err, errlen, "listing", k.err);
  else {
    qsort(k.v, k.n, sizeof *k.v, cmp_str);
    size_t i = 0;
    while (after && i < k.n && strcmp(k.v[i], after) <= 0) i++;
    out->keys = calloc(max ? max : 1, sizeof *out->keys);
    if (!out->keys) rc = fail(err, errlen, "listing", ENOMEM);
    for (; rc == AK_BLOB_OK && i < k.n && out->n < max; i++) {
      out->keys[out->n++] = k.v[i];
      k.v[i] = NULL;
    }
    if (rc == AK_BLOB_OK && i < k.n && out->n && !(out->next = strdup(out->keys[out->n - 1])))
      rc = fail(err, errlen, "listing", ENOMEM);
  }
  for (size_t j = 0; j < k.n; j++) free(k.v[j]);
  free(k.v);
  if (rc != AK_BLOB_OK) ak_blob_list_clear(out);
  return rc;
}

static int local_del(void *self, const char *key, char *err, size_t errlen) {
  local_t *l = self;
  char *path = path_of(l, key);
  if (!path) return fail(err, errlen, "path", ENOMEM);
  int rc = unlink(path);
  int e = errno;
  if (rc == 0) {
    char *slash = strrchr(path, '/');
    *slash = 0;
    rc = ak_fsync_dir(path);
    e = errno;
  } else if (e == ENOENT || e == ENOTDIR) {
    rc = 0;
  }
  free(path);
  return rc == 0 ? AK_BLOB_OK : fail(err, errlen, "delete", e);
}

static int rm_empty(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)ftw;
  if (flag == FTW_DP && rmdir(path) != 0 && errno != ENOTEMPTY && errno != EEXIST) return -1;
  return 0;
}

/* Depth first: a folder goes once the folders inside it went; one with a file stays. */
static int local_prune(void *self, const char *prefix, char *err, size_t errlen) {
  local_t *l = self;
  char *path = path_of(l, prefix);
  if (!path) return fail(err, errlen, "path", ENOMEM);
  struct stat st;
  int rc = 0, e = 0;
  if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
    rc = nftw(path, rm_empty, 16, FTW_DEPTH | FTW_PHYS);
    e = errno;
    char *slash = strrchr(path, '/');
    if (rc == 0 && slash) {
      *slash = 0;
      rc = ak_fsync_dir(path);
      e = errno;
    }
  }
  free(path);
  return rc == 0 ? AK_BLOB_OK : fail(err, errlen, "prune", e);
}

static void local_destroy(void *self) {
  local_t *l = self;
  if (!l) return;
  free(l->root);
  free(l);
}

static const ak_blob_vtable_t local_vt = {
  .type = "local",
  .put = local_put,
  .put_file = local_put_file,
  .get_range = local_get_range,
  .head = local_head,
  .list = local_list,
  .del = local_del,
  .prune = local_prune,
  .destroy = local_destroy,
};

ak_blob_t *ak_blob_local_new(const char *root, char *err, size_t errlen) {
  if (!root || !*root) {
    snprintf(err, errlen, "localfs: no root directory");
    return NULL;
  }
  /* create the root and its missing parents; every directory entry this makes, and the
   * root's own entry in its parent (an earlier run may have made it and crashed before it
   * was synced), is fsynced: an object fsynced under a root that a power cut takes away
   * would be lost with it */
  char *r = strdup(root);
  if (!r) return NULL;
  while (strlen(r) > 1 && r[strlen(r) - 1] == '/') r[strlen(r) - 1] = 0;
  for (char *p = r + 1;; p++) {
    p = strchr(p, '/');
    if (p) *p = 0;
    int made = mkdir(r, 0755) == 0;
    if (!made && errno != EEXIST) {
      snprintf(err, errlen, "localfs: cannot create %s: %s", r, strerror(errno));
      free(r);
      return NULL;
    }
    char *up = strrchr(r, '/');
    if ((made || !p) && up && up != r) {
      *up = 0;
      int frc = ak_fsync_dir(r);
      int e = errno;
      *up = '/';
      if (frc != 0) {
        snprintf(err, errlen, "localfs: cannot fsync the directory above %s: %s", r, strerror(e));
        free(r);
        return NULL;
      }
    }
    if (!p) break;
    *p = '/';
  }
  local_t *l = calloc(1, sizeof *l);
  ak_blob_t *b = calloc(1, sizeof *b);
  if (!l || !b) {
    free(l);
    free(b);
    free(r);
    snprintf(err, errlen, "localfs: out of memory");
    return NULL;
  }
  l->root = r;
  b->vt = &local_vt;
  b->self = l;
  b->owner = true;
  return b;
}
