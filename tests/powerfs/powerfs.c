/* powerfs: an in-memory FUSE 3 filesystem that can lose power (tests/e2e/test_powerloss.py).
 *
 * Every object has two states: the live one, what processes see, and the durable one,
 * what a disk would still hold after a power cut. Only the calls that make things durable
 * on a real disk move live into durable:
 *   - fsync/fdatasync of a file: its durable bytes and size := its live ones;
 *   - fsync of a directory (FSYNCDIR): its durable entries := its live entries.
 * Everything else (create, write, truncate, fallocate, rename, link, unlink, mkdir, rmdir)
 * changes live state only. A file fsynced but never named by a synced directory entry is
 * lost by a cut, like on a real filesystem that makes no promise beyond POSIX.
 *
 * A power cut makes live := durable for everything reachable from the root through
 * durable entries, frees the rest, and starts a new epoch: every handle opened before the
 * cut answers EIO from then on, so a process that outlives the cut cannot write into the
 * new world (nor read from the old one).
 *
 * A torn cut is what a real disk may also do: some of what was never synced reached the
 * platter anyway. Each directory keeps, at random, either its durable entries or all of
 * its live ones (a metadata journal commits whole); each file with unsynced changes keeps,
 * at random, a prefix of them, cut at any byte (writeback got that far), and its size
 * grows with it. What was synced is kept either way.
 *
 * Control (outside the mount, so the mount's own contents never change for it):
 *   --ctl PATH   a Unix stream socket; one command line per connection, one answer line:
 *                  "cut"   -> "ok epoch=N" once the cut is done
 *                  "cut torn SEED" -> the same, torn (SEED: an integer, for a rerun)
 *                  "stats" -> "ok epoch=N inodes=N live_bytes=N durable_bytes=N"
 *   SIGUSR1      a cut too (no answer: for a shell; the socket says when it is done).
 *
 * Usage: powerfs MOUNTPOINT --ctl SOCKET [-d]
 * It always runs in the foreground and single-threaded (the test owns its PID; one big
 * lock also serialises the control thread against the FUSE loop). Stop it with
 * `fusermount3 -u MOUNTPOINT`; it then exits 0.
 *
 * Mount choices, so every write and sync reaches us: direct_io on every file (no page
 * cache, hence no kernel writeback), writeback caching off, zero entry/attr timeouts (the
 * kernel asks again after a cut instead of trusting what it saw before), hard_remove (an
 * unlinked open file is gone from the tree at once, its handle still works). Locks are not
 * implemented: the kernel then keeps POSIX locks locally, which is all RocksDB's LOCK
 * needs on one host. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RENAME_NOREPLACE; meson defines it for the whole project */
#endif
#define FUSE_USE_VERSION 31
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <linux/falloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

typedef struct pf_inode pf_inode_t;

typedef struct {
  char *name;
  pf_inode_t *ino;
} pf_dent_t;

typedef struct {
  pf_dent_t *v;
  size_t n, cap;
} pf_dir_t;

typedef struct {
  uint8_t *p;
  size_t len, cap;
} pf_bytes_t;

struct pf_inode {
  uint64_t ino;
  mode_t mode;
  uint32_t nlink;   /* live entries naming it */
  uint32_t dnlink;  /* durable entries naming it: it must outlive its last live name */
  uint32_t nopen;   /* handles: freed only when none is left */
  bool dead;        /* dropped by a cut while open: freed at the last release */
  bool mark;        /* reachability, during a cut */
  bool adopt;       /* a torn cut keeps this directory's live entries */
  struct timespec mtime, ctime;
  /* regular files: [dirty_lo, dirty_hi) is where live may differ from durable, so an
   * fsync copies only that (a WAL synced per commit must not cost its whole length) */
  pf_bytes_t live, dur;
  size_t dirty_lo, dirty_hi;
  /* directories */
  pf_dir_t dlive, ddur;
  pf_inode_t *prev, *next; /* every inode, for the cut */
};

typedef struct {
  pf_inode_t *ino;
  uint64_t epoch;
  int flags;
} pf_handle_t;

static struct {
  pthread_mutex_t mu;
  pf_inode_t *root;
  pf_inode_t *all;
  uint64_t next_ino, epoch, inodes;
  size_t live_bytes, dur_bytes;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER, .next_ino = 1};

#define LOCKED(expr)                  \
  do {                                \
    pthread_mutex_lock(&g.mu);        \
    int rc_ = (expr);                 \
    pthread_mutex_unlock(&g.mu);      \
    return rc_;                       \
  } while (0)

/* ------------------------------------------------------------------- inodes ---- */

static void now(struct timespec *ts) { clock_gettime(CLOCK_REALTIME, ts); }

static pf_inode_t *inode_new(mode_t mode) {
  pf_inode_t *n = calloc(1, sizeof *n);
  if (!n) return NULL;
  n->ino = g.next_ino++;
  n->mode = mode;
  now(&n->mtime);
  n->ctime = n->mtime;
  n->next = g.all;
  if (g.all) g.all->prev = n;
  g.all = n;
  g.inodes++;
  return n;
}

static void bytes_free(pf_bytes_t *b, size_t *acct) {
  *acct -= b->len;
  free(b->p);
  memset(b, 0, sizeof *b);
}

static void dir_clear(pf_dir_t *d) {
  for (size_t i = 0; i < d->n; i++) free(d->v[i].name);
  free(d->v);
  memset(d, 0, sizeof *d);
}

static void inode_maybe_free(pf_inode_t *n);

/* Drops a directory's entries, releasing what they named (live or durable references). */
static void dir_release(pf_dir_t *d, bool durable) {
  pf_dir_t old = *d;
  memset(d, 0, sizeof *d);
  for (size_t i = 0; i < old.n; i++) {
    pf_inode_t *c = old.v[i].ino;
    if (durable) c->dnlink--;
    else c->nlink--;
    inode_maybe_free(c);
  }
  dir_clear(&old);
}

static void inode_free(pf_inode_t *n) {
  if (n->prev) n->prev->next = n->next;
  else g.all = n->next;
  if (n->next) n->next->prev = n->prev;
  bytes_free(&n->live, &g.live_bytes);
  bytes_free(&n->dur, &g.dur_bytes);
  dir_clear(&n->dlive);
  dir_clear(&n->ddur);
  g.inodes--;
  free(n);
}

static void inode_maybe_free(pf_inode_t *n) {
  if (n == g.root || n->nopen) return;
  if (n->dead) {
    inode_free(n);
    return;
  }
  if (n->nlink || n->dnlink) return;
  /* nothing names it any more, live or durable: what its directory still named goes too */
  dir_release(&n->dlive, false);
  dir_release(&n->ddur, true);
  inode_free(n);
}

static int bytes_reserve(pf_bytes_t *b, size_t need) {
  if (need <= b->cap) return 0;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap < need) cap *= 2;
  uint8_t *p = realloc(b->p, cap);
  if (!p) return -ENOMEM;
  b->p = p;
  b->cap = cap;
  return 0;
}

static void mark_dirty(pf_inode_t *n, size_t lo, size_t hi) {
  if (lo >= hi) return;
  if (n->dirty_lo >= n->dirty_hi) {
    n->dirty_lo = lo;
    n->dirty_hi = hi;
  } else {
    if (lo < n->dirty_lo) n->dirty_lo = lo;
    if (hi > n->dirty_hi) n->dirty_hi = hi;
  }
}

/* Live size := size: a shrink forgets bytes, a growth reads as zeros (both only live). */
static int set_size(pf_inode_t *n, size_t size) {
  size_t old = n->live.len;
  if (size > old) {
    int rc = bytes_reserve(&n->live, size);
    if (rc) return rc;
    memset(n->live.p + old, 0, size - old);
    mark_dirty(n, old, size);
  } else if (n->dirty_hi > size) {
    n->dirty_hi = size;
  }
  g.live_bytes += size;
  g.live_bytes -= old;
  n->live.len = size;
  now(&n->mtime);
  n->ctime = n->mtime;
  return 0;
}

static int file_sync(pf_inode_t *n) {
  int rc = bytes_reserve(&n->dur, n->live.len);
  if (rc) return rc;
  if (n->dirty_lo < n->dirty_hi)
    memcpy(n->dur.p + n->dirty_lo, n->live.p + n->dirty_lo, n->dirty_hi - n->dirty_lo);
  g.dur_bytes += n->live.len;
  g.dur_bytes -= n->dur.len;
  n->dur.len = n->live.len;
  n->dirty_lo = n->dirty_hi = 0;
  return 0;
}

/* ---------------------------------------------------------------- directories ---- */

static pf_dent_t *dir_find(pf_dir_t *d, const char *name) {
  for (size_t i = 0; i < d->n; i++)
    if (strcmp(d->v[i].name, name) == 0) return &d->v[i];
  return NULL;
}

static int dir_add(pf_dir_t *d, const char *name, pf_inode_t *ino) {
  if (d->n == d->cap) {
    size_t cap = d->cap ? d->cap * 2 : 8;
    pf_dent_t *v = realloc(d->v, cap * sizeof *v);
    if (!v) return -ENOMEM;
    d->v = v;
    d->cap = cap;
  }
  char *nm = strdup(name);
  if (!nm) return -ENOMEM;
  d->v[d->n].name = nm;
  d->v[d->n].ino = ino;
  d->n++;
  return 0;
}

/* Removes the entry (it must be in d); the caller settles the inode's counts. */
static void dir_del(pf_dir_t *d, pf_dent_t *e) {
  free(e->name);
  *e = d->v[--d->n];
}

static int dir_copy(pf_dir_t *dst, const pf_dir_t *src) {
  memset(dst, 0, sizeof *dst);
  for (size_t i = 0; i < src->n; i++) {
    int rc = dir_add(dst, src->v[i].name, src->v[i].ino);
    if (rc) return rc;
  }
  return 0;
}

static int dir_sync(pf_inode_t *d) {
  pf_dir_t fresh;
  if (dir_copy(&fresh, &d->dlive) != 0) {
    dir_clear(&fresh);
    return -ENOMEM;
  }
  for (size_t i = 0; i < fresh.n; i++) fresh.v[i].ino->dnlink++;
  dir_release(&d->ddur, true);
  d->ddur = fresh;
  return 0;
}

/* The inode a path names (live tree), or NULL with *err set. */
static pf_inode_t *resolve(const char *path, int *err) {
  pf_inode_t *cur = g.root;
  char buf[4096];
  if (!path || strlen(path) >= sizeof buf) {
    *err = -ENAMETOOLONG;
    return NULL;
  }
  strcpy(buf, path);
  for (char *save = NULL, *tok = strtok_r(buf, "/", &save); tok; tok = strtok_r(NULL, "/", &save)) {
    if (!S_ISDIR(cur->mode)) {
      *err = -ENOTDIR;
      return NULL;
    }
    pf_dent_t *e = dir_find(&cur->dlive, tok);
    if (!e) {
      *err = -ENOENT;
      return NULL;
    }
    cur = e->ino;
  }
  return cur;
}

/* The directory that holds path's last component, and that component (in buf). */
static pf_inode_t *resolve_parent(const char *path, char *buf, size_t bufsz, const char **name, int *err) {
  if (!path || strlen(path) >= bufsz) {
    *err = -ENAMETOOLONG;
    return NULL;
  }
  strcpy(buf, path);
  char *slash = strrchr(buf, '/');
  if (!slash || slash[1] == 0) {
    *err = -EINVAL;
    return NULL;
  }
  *name = slash + 1;
  if (strlen(*name) > 255) {
    *err = -ENAMETOOLONG;
    return NULL;
  }
  *slash = 0;
  pf_inode_t *p = resolve(buf[0] ? buf : "/", err);
  if (p && !S_ISDIR(p->mode)) {
    *err = -ENOTDIR;
    return NULL;
  }
  return p;
}

/* ------------------------------------------------------------------- handles ---- */

static int handle_new(pf_inode_t *n, int flags, uint64_t *fh) {
  pf_handle_t *h = calloc(1, sizeof *h);
  if (!h) return -ENOMEM;
  h->ino = n;
  h->epoch = g.epoch;
  h->flags = flags;
  n->nopen++;
  *fh = (uint64_t)(uintptr_t)h;
  return 0;
}

/* The inode behind a handle, or NULL when the handle predates the last cut. */
static pf_inode_t *handle_ino(struct fuse_file_info *fi) {
  pf_handle_t *h = (pf_handle_t *)(uintptr_t)fi->fh;
  return h->epoch == g.epoch ? h->ino : NULL;
}

static void handle_release(struct fuse_file_info *fi) {
  pf_handle_t *h = (pf_handle_t *)(uintptr_t)fi->fh;
  h->ino->nopen--;
  inode_maybe_free(h->ino);
  free(h);
}

/* fi when the call came with one (fstat, ftruncate), the path otherwise. */
static pf_inode_t *target(const char *path, struct fuse_file_info *fi, int *err) {
  if (fi) {
    pf_inode_t *n = handle_ino(fi);
    if (!n) *err = -EIO;
    return n;
  }
  return resolve(path, err);
}

/* ---------------------------------------------------------------------- cut ---- */

/* xorshift64*: a torn cut is reproducible from its seed */
static uint64_t rng;
static uint64_t rnd(void) {
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return rng * 2685821657736338717ull;
}

/* The entries a directory has after the cut. */
static pf_dir_t *kept(pf_inode_t *d) { return d->adopt ? &d->dlive : &d->ddur; }

static void mark_from(pf_inode_t *n) {
  if (n->mark) return;
  n->mark = true;
  pf_dir_t *k = kept(n);
  for (size_t i = 0; i < k->n; i++) mark_from(k->v[i].ino);
}

/* Torn: the synced bytes plus a prefix of the unsynced changes reached the disk. */
static void tear(pf_inode_t *n) {
  if (n->dirty_lo >= n->dirty_hi || rnd() % 2) return;
  size_t end = n->dirty_lo + (size_t)(rnd() % (n->dirty_hi - n->dirty_lo + 1));
  if (bytes_reserve(&n->dur, end) != 0) abort();
  memcpy(n->dur.p + n->dirty_lo, n->live.p + n->dirty_lo, end - n->dirty_lo);
  if (end > n->dur.len) {
    g.dur_bytes += end - n->dur.len;
    n->dur.len = end;
  }
}

static void power_cut(bool torn, uint64_t seed) {
  g.epoch++;
  rng = seed ? seed : 0x9e3779b97f4a7c15ull;
  for (pf_inode_t *n = g.all; n; n = n->next) {
    n->mark = false;
    n->adopt = torn && S_ISDIR(n->mode) && rnd() % 2;
  }
  mark_from(g.root);
  pf_inode_t *next;
  for (pf_inode_t *n = g.all; n; n = next) {
    next = n->next;
    n->nlink = n->dnlink = 0;
    if (n->mark) {
      if (S_ISDIR(n->mode)) {
        pf_dir_t *from = kept(n), *to = n->adopt ? &n->ddur : &n->dlive;
        dir_clear(to);
        if (dir_copy(to, from) != 0) abort(); /* half a tree is no test */
      } else {
        if (torn) tear(n);
        if (bytes_reserve(&n->live, n->dur.len) != 0) abort();
        if (n->dur.len) memcpy(n->live.p, n->dur.p, n->dur.len);
        g.live_bytes += n->dur.len;
        g.live_bytes -= n->live.len;
        n->live.len = n->dur.len;
        n->dirty_lo = n->dirty_hi = 0;
      }
    } else {
      /* unreachable after the cut: its names are counted by nobody any more */
      dir_clear(&n->dlive);
      dir_clear(&n->ddur);
      bytes_free(&n->live, &g.live_bytes);
      bytes_free(&n->dur, &g.dur_bytes);
      if (n->nopen) n->dead = true; /* a stale handle still points here: free at release */
      else inode_free(n);
    }
  }
  /* live == durable now: each surviving entry is one live and one durable name */
  for (pf_inode_t *n = g.all; n; n = n->next)
    if (n->mark && S_ISDIR(n->mode))
      for (size_t i = 0; i < n->ddur.n; i++) {
        n->ddur.v[i].ino->nlink++;
        n->ddur.v[i].ino->dnlink++;
      }
  g.root->nlink = 1;
}

/* ---------------------------------------------------------------- operations ---- */

static void *pf_init(struct fuse_conn_info *conn, struct fuse_config *cfg) {
  conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
  cfg->direct_io = 1;
  cfg->kernel_cache = 0;
  cfg->auto_cache = 0;
  cfg->entry_timeout = 0;
  cfg->attr_timeout = 0;
  cfg->negative_timeout = 0;
  cfg->hard_remove = 1;
  cfg->nullpath_ok = 1;
  cfg->use_ino = 1;
  return NULL;
}

static void fill_stat(const pf_inode_t *n, struct stat *st) {
  memset(st, 0, sizeof *st);
  st->st_ino = n->ino;
  st->st_mode = n->mode;
  st->st_nlink = S_ISDIR(n->mode) ? 2 : n->nlink;
  st->st_size = S_ISDIR(n->mode) ? 4096 : (off_t)n->live.len;
  st->st_blksize = 4096;
  st->st_blocks = (blkcnt_t)((st->st_size + 511) / 512);
  st->st_mtim = n->mtime;
  st->st_ctim = n->ctime;
  st->st_atim = n->mtime;
}

static int do_getattr(const char *path, struct stat *st, struct fuse_file_info *fi) {
  int err = 0;
  pf_inode_t *n = target(path, fi, &err);
  if (!n) return err;
  fill_stat(n, st);
  return 0;
}
static int pf_getattr(const char *path, struct stat *st, struct fuse_file_info *fi) {
  LOCKED(do_getattr(path, st, fi));
}

static int do_mknode(const char *path, mode_t mode, pf_inode_t **out) {
  char buf[4096];
  const char *name;
  int err = 0;
  pf_inode_t *p = resolve_parent(path, buf, sizeof buf, &name, &err);
  if (!p) return err;
  if (dir_find(&p->dlive, name)) return -EEXIST;
  pf_inode_t *n = inode_new(mode);
  if (!n) return -ENOMEM;
  if ((err = dir_add(&p->dlive, name, n)) != 0) {
    inode_maybe_free(n);
    return err;
  }
  n->nlink = 1;
  now(&p->mtime);
  *out = n;
  return 0;
}

static int do_mkdir(const char *path, mode_t mode) {
  pf_inode_t *n;
  return do_mknode(path, S_IFDIR | (mode & 07777), &n);
}
static int pf_mkdir(const char *path, mode_t mode) { LOCKED(do_mkdir(path, mode)); }

/* unlink and rmdir: the entry goes from the live tree; the inode lives on while a
 * durable entry or a handle still names it. */
static int do_remove(const char *path, bool want_dir) {
  char buf[4096];
  const char *name;
  int err = 0;
  pf_inode_t *p = resolve_parent(path, buf, sizeof buf, &name, &err);
  if (!p) return err;
  pf_dent_t *e = dir_find(&p->dlive, name);
  if (!e) return -ENOENT;
  pf_inode_t *n = e->ino;
  if (want_dir && !S_ISDIR(n->mode)) return -ENOTDIR;
  if (!want_dir && S_ISDIR(n->mode)) return -EISDIR;
  if (want_dir && n->dlive.n) return -ENOTEMPTY;
  dir_del(&p->dlive, e);
  n->nlink--;
  now(&p->mtime);
  inode_maybe_free(n);
  return 0;
}
static int pf_unlink(const char *path) { LOCKED(do_remove(path, false)); }
static int pf_rmdir(const char *path) { LOCKED(do_remove(path, true)); }

static int do_rename(const char *from, const char *to, unsigned int flags) {
  if (flags & ~RENAME_NOREPLACE) return -EINVAL; /* RENAME_EXCHANGE, WHITEOUT: not needed */
  char fb[4096], tb[4096];
  const char *fname, *tname;
  int err = 0;
  pf_inode_t *fp = resolve_parent(from, fb, sizeof fb, &fname, &err);
  if (!fp) return err;
  pf_inode_t *tp = resolve_parent(to, tb, sizeof tb, &tname, &err);
  if (!tp) return err;
  pf_dent_t *fe = dir_find(&fp->dlive, fname);
  if (!fe) return -ENOENT;
  pf_inode_t *n = fe->ino;
  pf_dent_t *te = dir_find(&tp->dlive, tname);
  if (te) {
    if (flags & RENAME_NOREPLACE) return -EEXIST;
    pf_inode_t *old = te->ino;
    if (old == n) return 0;
    if (S_ISDIR(old->mode) && !S_ISDIR(n->mode)) return -EISDIR;
    if (!S_ISDIR(old->mode) && S_ISDIR(n->mode)) return -ENOTDIR;
    if (S_ISDIR(old->mode) && old->dlive.n) return -ENOTEMPTY;
    /* the replaced inode keeps its durable name (if any) until the directory is synced */
    te->ino = n;
    n->nlink++;
    old->nlink--;
    inode_maybe_free(old);
  } else if ((err = dir_add(&tp->dlive, tname, n)) != 0) {
    return err;
  } else {
    n->nlink++;
  }
  /* dir_add may have moved fp's entries (fp == tp): look the source up again */
  fe = dir_find(&fp->dlive, fname);
  dir_del(&fp->dlive, fe);
  n->nlink--;
  now(&fp->mtime);
  tp->mtime = fp->mtime;
  n->ctime = fp->mtime;
  return 0;
}
static int pf_rename(const char *from, const char *to, unsigned int flags) {
  LOCKED(do_rename(from, to, flags));
}

static int do_link(const char *from, const char *to) {
  char tb[4096];
  const char *tname;
  int err = 0;
  pf_inode_t *n = resolve(from, &err);
  if (!n) return err;
  if (S_ISDIR(n->mode)) return -EPERM;
  pf_inode_t *tp = resolve_parent(to, tb, sizeof tb, &tname, &err);
  if (!tp) return err;
  if (dir_find(&tp->dlive, tname)) return -EEXIST;
  if ((err = dir_add(&tp->dlive, tname, n)) != 0) return err;
  n->nlink++;
  now(&n->ctime);
  return 0;
}
static int pf_link(const char *from, const char *to) { LOCKED(do_link(from, to)); }

/* chmod, chown, utimens: nothing in the drill depends on them; succeed. */
static int pf_chmod(const char *path, mode_t mode, struct fuse_file_info *fi) {
  (void)path, (void)mode, (void)fi;
  return 0;
}
static int pf_chown(const char *path, uid_t uid, gid_t gid, struct fuse_file_info *fi) {
  (void)path, (void)uid, (void)gid, (void)fi;
  return 0;
}
static int pf_utimens(const char *path, const struct timespec tv[2], struct fuse_file_info *fi) {
  (void)path, (void)tv, (void)fi;
  return 0;
}

static int do_truncate(const char *path, off_t size, struct fuse_file_info *fi) {
  int err = 0;
  pf_inode_t *n = target(path, fi, &err);
  if (!n) return err;
  if (S_ISDIR(n->mode)) return -EISDIR;
  if (size < 0) return -EINVAL;
  return set_size(n, (size_t)size);
}
static int pf_truncate(const char *path, off_t size, struct fuse_file_info *fi) {
  LOCKED(do_truncate(path, size, fi));
}

static int open_inode(pf_inode_t *n, struct fuse_file_info *fi) {
  if (S_ISDIR(n->mode) && (fi->flags & O_ACCMODE) != O_RDONLY) return -EISDIR;
  if ((fi->flags & O_TRUNC) && (fi->flags & O_ACCMODE) != O_RDONLY && !S_ISDIR(n->mode)) {
    int rc = set_size(n, 0);
    if (rc) return rc;
  }
  fi->direct_io = 1;
  fi->keep_cache = 0;
  return handle_new(n, fi->flags, &fi->fh);
}

static int do_open(const char *path, struct fuse_file_info *fi) {
  int err = 0;
  pf_inode_t *n = resolve(path, &err);
  if (!n) return err;
  return open_inode(n, fi);
}
static int pf_open(const char *path, struct fuse_file_info *fi) { LOCKED(do_open(path, fi)); }

static int do_create(const char *path, mode_t mode, struct fuse_file_info *fi) {
  int err = 0;
  pf_inode_t *n = resolve(path, &err);
  if (n) {
    if (fi->flags & O_EXCL) return -EEXIST;
    return open_inode(n, fi);
  }
  if (err != -ENOENT) return err;
  if ((err = do_mknode(path, S_IFREG | (mode & 07777), &n)) != 0) return err;
  return open_inode(n, fi);
}
static int pf_create(const char *path, mode_t mode, struct fuse_file_info *fi) {
  LOCKED(do_create(path, mode, fi));
}

static int do_read(char *buf, size_t size, off_t off, struct fuse_file_info *fi) {
  pf_inode_t *n = handle_ino(fi);
  if (!n) return -EIO;
  if (off < 0) return -EINVAL;
  if ((size_t)off >= n->live.len) return 0;
  size_t k = n->live.len - (size_t)off;
  if (k > size) k = size;
  memcpy(buf, n->live.p + off, k);
  return (int)k;
}
static int pf_read(const char *path, char *buf, size_t size, off_t off, struct fuse_file_info *fi) {
  (void)path;
  LOCKED(do_read(buf, size, off, fi));
}

static int do_write(const char *buf, size_t size, off_t off, struct fuse_file_info *fi) {
  pf_handle_t *h = (pf_handle_t *)(uintptr_t)fi->fh;
  pf_inode_t *n = handle_ino(fi);
  if (!n) return -EIO;
  if (off < 0) return -EINVAL;
  /* the kernel computes an O_APPEND offset from the size it cached; ours is the truth */
  if (h->flags & O_APPEND) off = (off_t)n->live.len;
  size_t end = (size_t)off + size;
  if (end > n->live.len) {
    int rc = set_size(n, end);
    if (rc) return rc;
  }
  memcpy(n->live.p + off, buf, size);
  mark_dirty(n, (size_t)off, end);
  now(&n->mtime);
  return (int)size;
}
static int pf_write(const char *path, const char *buf, size_t size, off_t off, struct fuse_file_info *fi) {
  (void)path;
  LOCKED(do_write(buf, size, off, fi));
}

static int pf_statfs(const char *path, struct statvfs *st) {
  (void)path;
  pthread_mutex_lock(&g.mu);
  /* 4 TiB, nearly all free: the node refuses writes below 256 MiB free, and the data
   * lives in memory, which a test of this size never fills */
  memset(st, 0, sizeof *st);
  st->f_bsize = st->f_frsize = 4096;
  st->f_blocks = 1ull << 30;
  uint64_t used = (g.live_bytes + 4095) / 4096;
  st->f_bfree = st->f_bavail = st->f_blocks - used;
  st->f_files = 1u << 24;
  st->f_ffree = st->f_favail = st->f_files - g.inodes;
  st->f_namemax = 255;
  pthread_mutex_unlock(&g.mu);
  return 0;
}

static int pf_flush(const char *path, struct fuse_file_info *fi) {
  (void)path, (void)fi;
  return 0;
}

static int pf_release(const char *path, struct fuse_file_info *fi) {
  (void)path;
  pthread_mutex_lock(&g.mu);
  handle_release(fi);
  pthread_mutex_unlock(&g.mu);
  return 0;
}

static int do_fsync(struct fuse_file_info *fi) {
  pf_inode_t *n = handle_ino(fi);
  if (!n) return -EIO;
  return S_ISDIR(n->mode) ? dir_sync(n) : file_sync(n);
}
/* fdatasync too: the size is part of what it must make durable, and nothing else is kept */
static int pf_fsync(const char *path, int datasync, struct fuse_file_info *fi) {
  (void)path, (void)datasync;
  LOCKED(do_fsync(fi));
}

static int do_opendir(const char *path, struct fuse_file_info *fi) {
  int err = 0;
  pf_inode_t *n = resolve(path, &err);
  if (!n) return err;
  if (!S_ISDIR(n->mode)) return -ENOTDIR;
  return handle_new(n, fi->flags, &fi->fh);
}
static int pf_opendir(const char *path, struct fuse_file_info *fi) { LOCKED(do_opendir(path, fi)); }

static int do_readdir(void *buf, fuse_fill_dir_t filler, struct fuse_file_info *fi) {
  pf_inode_t *n = handle_ino(fi);
  if (!n) return -EIO;
  filler(buf, ".", NULL, 0, 0);
  filler(buf, "..", NULL, 0, 0);
  for (size_t i = 0; i < n->dlive.n; i++) {
    struct stat st;
    fill_stat(n->dlive.v[i].ino, &st);
    filler(buf, n->dlive.v[i].name, &st, 0, 0);
  }
  return 0;
}
static int pf_readdir(const char *path, void *buf, fuse_fill_dir_t filler, off_t off, struct fuse_file_info *fi,
                      enum fuse_readdir_flags flags) {
  (void)path, (void)off, (void)flags;
  LOCKED(do_readdir(buf, filler, fi));
}

static int pf_releasedir(const char *path, struct fuse_file_info *fi) { return pf_release(path, fi); }

static int pf_fsyncdir(const char *path, int datasync, struct fuse_file_info *fi) {
  (void)path, (void)datasync;
  LOCKED(do_fsync(fi));
}

static int do_fallocate(int mode, off_t off, off_t len, struct fuse_file_info *fi) {
  pf_inode_t *n = handle_ino(fi);
  if (!n) return -EIO;
  if (mode & ~FALLOC_FL_KEEP_SIZE) return -EOPNOTSUPP;
  if (off < 0 || len <= 0) return -EINVAL;
  /* memory is allocated on write: a preallocation that keeps the size changes nothing */
  if (mode & FALLOC_FL_KEEP_SIZE) return 0;
  size_t end = (size_t)off + (size_t)len;
  return end > n->live.len ? set_size(n, end) : 0;
}
static int pf_fallocate(const char *path, int mode, off_t off, off_t len, struct fuse_file_info *fi) {
  (void)path;
  LOCKED(do_fallocate(mode, off, len, fi));
}

/* Unmounted: everything goes, so a sanitizer build of powerfs reports no leak. */
static void pf_destroy(void *data) {
  (void)data;
  pthread_mutex_lock(&g.mu);
  while (g.all) inode_free(g.all);
  g.root = NULL;
  pthread_mutex_unlock(&g.mu);
}

static const struct fuse_operations pf_ops = {
  .init = pf_init,
  .destroy = pf_destroy,
  .getattr = pf_getattr,
  .mkdir = pf_mkdir,
  .unlink = pf_unlink,
  .rmdir = pf_rmdir,
  .rename = pf_rename,
  .link = pf_link,
  .chmod = pf_chmod,
  .chown = pf_chown,
  .truncate = pf_truncate,
  .open = pf_open,
  .read = pf_read,
  .write = pf_write,
  .statfs = pf_statfs,
  .flush = pf_flush,
  .release = pf_release,
  .fsync = pf_fsync,
  .opendir = pf_opendir,
  .readdir = pf_readdir,
  .releasedir = pf_releasedir,
  .fsyncdir = pf_fsyncdir,
  .create = pf_create,
  .utimens = pf_utimens,
  .fallocate = pf_fallocate,
};

/* ------------------------------------------------------------------- control ---- */

static void *ctl_main(void *arg) {
  int ls = (int)(intptr_t)arg;
  for (;;) {
    int c = accept(ls, NULL, NULL);
    if (c < 0) {
      if (errno == EINTR) continue;
      perror("powerfs: accept");
      return NULL;
    }
    char cmd[96] = "";
    ssize_t k = read(c, cmd, sizeof cmd - 1);
    if (k > 0) cmd[k] = 0;
    cmd[strcspn(cmd, "\r\n")] = 0;
    char out[256];
    pthread_mutex_lock(&g.mu);
    unsigned long long seed = 0;
    if (strcmp(cmd, "cut") == 0 || sscanf(cmd, "cut torn %llu", &seed) == 1) {
      power_cut(strcmp(cmd, "cut") != 0, seed);
      snprintf(out, sizeof out, "ok epoch=%llu\n", (unsigned long long)g.epoch);
    } else if (strcmp(cmd, "stats") == 0) {
      snprintf(out, sizeof out, "ok epoch=%llu inodes=%llu live_bytes=%zu durable_bytes=%zu\n",
               (unsigned long long)g.epoch, (unsigned long long)g.inodes, g.live_bytes, g.dur_bytes);
    } else {
      snprintf(out, sizeof out, "error unknown command %.32s (cut, cut torn SEED, stats)\n", cmd);
    }
    pthread_mutex_unlock(&g.mu);
    if (write(c, out, strlen(out)) < 0) perror("powerfs: write");
    close(c);
  }
}

static void *sig_main(void *arg) {
  sigset_t *set = arg;
  for (;;) {
    int sig;
    if (sigwait(set, &sig) == 0 && sig == SIGUSR1) {
      pthread_mutex_lock(&g.mu);
      power_cut(false, 0);
      pthread_mutex_unlock(&g.mu);
    }
  }
  return NULL;
}

static int ctl_listen(const char *path) {
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof a.sun_path) {
    fprintf(stderr, "powerfs: control socket path too long: %s\n", path);
    return -1;
  }
  strcpy(a.sun_path, path);
  unlink(path);
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) != 0 || listen(s, 16) != 0) {
    fprintf(stderr, "powerfs: control socket %s: %s\n", path, strerror(errno));
    if (s >= 0) close(s);
    return -1;
  }
  return s;
}

int main(int argc, char **argv) {
  const char *mnt = NULL, *ctl = NULL;
  bool debug = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--ctl") == 0 && i + 1 < argc) ctl = argv[++i];
    else if (strcmp(argv[i], "-d") == 0) debug = true;
    else if (!mnt && argv[i][0] != '-') mnt = argv[i];
    else {
      fprintf(stderr, "powerfs: unknown argument %s\nusage: powerfs MOUNTPOINT --ctl SOCKET [-d]\n", argv[i]);
      return 2;
    }
  }
  if (!mnt || !ctl) {
    fprintf(stderr, "usage: powerfs MOUNTPOINT --ctl SOCKET [-d]\n");
    return 2;
  }
  g.root = inode_new(S_IFDIR | 0755);
  g.root->nlink = 1;

  /* SIGUSR1 is taken by its own thread: blocked here, before any thread exists. The
   * control threads block the signals that unmount too, so those reach the FUSE loop's
   * thread and interrupt its read (libfuse's handler only flags the session). */
  static sigset_t set;
  sigset_t stop;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  pthread_sigmask(SIG_BLOCK, &stop, NULL);
  int ls = ctl_listen(ctl);
  if (ls < 0) return 1;
  pthread_t t1, t2;
  if (pthread_create(&t1, NULL, ctl_main, (void *)(intptr_t)ls) != 0 ||
      pthread_create(&t2, NULL, sig_main, &set) != 0) {
    fprintf(stderr, "powerfs: cannot start the control threads\n");
    return 1;
  }
  pthread_detach(t1);
  pthread_detach(t2);
  pthread_sigmask(SIG_UNBLOCK, &stop, NULL);

  char *fargv[8];
  int fargc = 0;
  fargv[fargc++] = argv[0];
  fargv[fargc++] = (char *)mnt;
  fargv[fargc++] = "-f";
  fargv[fargc++] = "-s";
  fargv[fargc++] = "-o";
  fargv[fargc++] = "fsname=powerfs,subtype=powerfs";
  if (debug) fargv[fargc++] = "-d";
  fargv[fargc] = NULL;
  int rc = fuse_main(fargc, fargv, &pf_ops, NULL);
  unlink(ctl);
  return rc;
}
