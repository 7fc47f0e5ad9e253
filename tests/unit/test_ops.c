/* Unit tests: the service-manager notify protocol and the gauge sampler. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include "core/gauges.h"
#include "core/notify.h"
#include "fixture.h"

/* A datagram socket bound at path ("@x": abstract); the fd. */
static int bind_dgram(const char *path) {
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  cr_assert(fd >= 0);
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  size_t n = strlen(path);
  memcpy(sa.sun_path, path, n);
  if (path[0] == '@') sa.sun_path[0] = 0;
  socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (path[0] == '@' ? 0 : 1));
  cr_assert_eq(bind(fd, (struct sockaddr *)&sa, len), 0, "bind %s: %s", path, strerror(errno));
  struct timeval tv = {2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

static void expect_datagram(int fd, const char *want) {
  char buf[256];
  ssize_t n = recv(fd, buf, sizeof buf - 1, 0);
  cr_assert(n >= 0, "no datagram: %s", strerror(errno));
  buf[n] = 0;
  cr_assert_str_eq(buf, want);
}

Test(notify, sends_each_state_as_one_datagram_in_order) {
  char path[] = "/tmp/ak-notify-XXXXXX";
  cr_assert_not_null(mkdtemp(path));
  char sock[128];
  snprintf(sock, sizeof sock, "%s/notify", path);
  int fd = bind_dgram(sock);
  setenv("NOTIFY_SOCKET", sock, 1);
  cr_assert_eq(ak_notify_send("READY=1\nSTATUS=accepting webhooks"), 1);
  cr_assert_eq(ak_notify_send("STOPPING=1"), 1);
  expect_datagram(fd, "READY=1\nSTATUS=accepting webhooks");
  expect_datagram(fd, "STOPPING=1");
  close(fd);
  unlink(sock);
  rmdir(path);
  unsetenv("NOTIFY_SOCKET");
}

Test(notify, abstract_namespace_socket) {
  char name[64];
  snprintf(name, sizeof name, "@ak-notify-test-%d", (int)getpid());
  int fd = bind_dgram(name);
  cr_assert_eq(ak_notify_send_to(name, "READY=1"), 1);
  expect_datagram(fd, "READY=1");
  close(fd);
}

Test(notify, unset_is_not_an_error_and_a_dead_socket_is) {
  unsetenv("NOTIFY_SOCKET");
  cr_assert_eq(ak_notify_send("READY=1"), 0, "outside systemd: nothing to do");
  setenv("NOTIFY_SOCKET", "", 1);
  cr_assert_eq(ak_notify_send("READY=1"), 0);
  cr_assert_eq(ak_notify_send_to("/nonexistent-dir/notify", "READY=1"), -1);
  cr_assert_eq(ak_notify_send_to("relative/notify", "READY=1"), -1);
  unsetenv("NOTIFY_SOCKET");
}

static void count_calls(void *ctx) { (*(int *)ctx)++; }

/* The instance of a node with no module opened (its name and metrics); the sampler made
 * by hand at a 50 ms interval (the gauges module's is the default). */
Test(gauges, samples_at_start_then_every_interval_and_stops_promptly) {
  static const char *const only[] = {"node", NULL};
  ak_fx_t fx;
  ak_fx_tmp(&fx, "gauges-test");
  ak_fx_open(&fx, "", only);
  int calls = 0;
  ak_gauges_t *g = ak_gauges_new(fx.inst, 50);
  cr_assert_not_null(g);
  cr_assert_eq(ak_gauges_add(g, count_calls, &calls), 0);
  cr_assert_eq(ak_gauges_start(g), 0);
  cr_assert_eq(ak_gauges_rounds(g), 1, "the first round runs before start returns");
  cr_assert_eq(ak_gauges_add(g, count_calls, &calls), -1, "no samplers added to a running thread");
  struct timespec ts = {0, 300 * 1000000L};
  nanosleep(&ts, NULL);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  ak_gauges_stop(g);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  uint64_t rounds = ak_gauges_rounds(g);
  cr_assert(rounds >= 3 && rounds <= 8, "rounds=%llu in 300 ms at 50 ms", (unsigned long long)rounds);
  cr_assert_eq((uint64_t)calls, rounds);
  double stop_ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
  cr_assert(stop_ms < 40, "stop waits for no interval (%.1f ms)", stop_ms);

  size_t len;
  char *text = ak_metrics_render(fx.inst->metrics, &len);
  cr_assert_not_null(strstr(text, "\nankusa_process_resident_memory_bytes{instance=\"default\"} "));
  cr_assert_not_null(strstr(text, "\nankusa_vm_memory_bytes{instance=\"default\"} "));
  free(text);
  ak_gauges_free(g);
  ak_fx_close(&fx);
  ak_fx_rm(&fx);
}

Test(gauges, memory_readings_are_plausible) {
  uint64_t rss = ak_gauges_rss_bytes();
  cr_assert(rss > 1u << 20 && rss < (uint64_t)64 << 30, "rss=%llu", (unsigned long long)rss);
#if defined(__SANITIZE_ADDRESS__)
  return; /* ASan's allocator replaces glibc's: mallinfo2 does not see its blocks */
#endif
  uint64_t before = ak_gauges_heap_bytes();
  /* volatile: the compiler may otherwise drop a malloc/free pair nobody reads */
  char *volatile p = malloc(8u << 20); /* mmap'd by glibc: shows in hblkhd */
  memset(p, 1, 8u << 20);
  uint64_t after = ak_gauges_heap_bytes();
  free(p);
  cr_assert(after >= before + (8u << 20), "before=%llu after=%llu", (unsigned long long)before,
            (unsigned long long)after);
}
