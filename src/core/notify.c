/* sd_notify without libsystemd: the protocol is one datagram on a unix socket, so a
 * dependency would buy nothing. */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include "core/notify.h"

int ak_notify_send_to(const char *path, const char *state) {
  if (!path || !*path || !state) return 0;
  /* systemd hands out absolute paths or abstract names; anything else (a vsock address
   * or a relative path) is not a socket we know how to reach */
  if (path[0] != '/' && path[0] != '@') {
    errno = EAFNOSUPPORT;
    return -1;
  }
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  size_t n = strlen(path);
  if (n >= sizeof sa.sun_path) {
    errno = ENAMETOOLONG;
    return -1;
  }
  memcpy(sa.sun_path, path, n);
  if (path[0] == '@') sa.sun_path[0] = 0; /* abstract: the name is not NUL-terminated */
  socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (path[0] == '@' ? 0 : 1));
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  ssize_t w = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa, len);
  int saved = errno;
  close(fd);
  if (w < 0) {
    errno = saved;
    return -1;
  }
  return 1;
}

int ak_notify_send(const char *state) { return ak_notify_send_to(getenv("NOTIFY_SOCKET"), state); }
