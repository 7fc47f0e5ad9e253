/* Durable directory operations (fsutil.h). */
#include "core/fsutil.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int ak_fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -1;
  int rc = fsync(fd);
  int e = errno;
  close(fd);
  errno = e;
  return rc;
}

/* fsync of dir's parent (dir is changed in place and put back). */
static int sync_parent_of(char *dir) {
  char *slash = strrchr(dir, '/');
  const char *parent = ".";
  if (slash == dir) {
    parent = "/";
  } else if (slash) {
    *slash = 0;
    parent = dir;
  }
  int rc = ak_fsync_dir(parent);
  int e = errno;
  if (slash && slash != dir) *slash = '/';
  errno = e;
  return rc;
}

/* RocksDB syncs the store directory it writes into, never the ones above it: without the
 * parents' fsync a power cut after the first acks of a fresh node took data/, default/ or
 * store/ away with every hook in them (tests/e2e/test_powerloss.py found it), and the node
 * started empty. */
int ak_mkdirs_durable(const char *path, mode_t mode) {
  char tmp[4096];
  if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp) {
    errno = ENAMETOOLONG;
    return -1;
  }
  for (char *p = tmp + 1;; p++) {
    if (*p == '/' || *p == 0) {
      char c = *p;
      *p = 0;
      if (mkdir(tmp, mode) == 0) {
        if (sync_parent_of(tmp) != 0) return -1;
      } else if (errno != EEXIST) {
        return -1;
      }
      *p = c;
      if (!c) break;
    }
  }
  return 0;
}
