/* Durable directory operations shared by the store, the LocalFS blob store and backups:
 * a new file or directory survives a power cut only once the directory that names it is
 * fsynced. Owns nothing; never decides what to write. */
#ifndef AK_CORE_FSUTIL_H
#define AK_CORE_FSUTIL_H

#include <sys/types.h>

/* fsync of a directory: 0, or -1 with errno. */
int ak_fsync_dir(const char *dir);
/* mkdir -p: what is missing of path is created with mode, each new directory fsynced into
 * its parent before the next (one that exists was made durable by whoever created it). 0,
 * or -1 with errno. */
int ak_mkdirs_durable(const char *path, mode_t mode);

#endif
