/* CRC32C for RocksDB.
 *
 * Debian's librocksdb 7.8.3 is a portable build: its CRC32C, computed over every WAL record
 * a commit writes and every SST block flushed, compacted or read, is the table-driven
 * software loop. Under valgrind that loop was 12 % of the instructions of rocksdb_write
 * for a 28-hook commit of 1 KiB hooks (docs/performance.md).
 *
 * librocksdb calls rocksdb::crc32c::Extend through its PLT (37 call sites), so the dynamic
 * linker binds those calls to a definition in the executable when there is one, the same
 * way a malloc defined in a program replaces libc's. This file is that definition: the
 * CPU's crc32 instruction (SSE4.2) when it has it, else the library's own function, found
 * with dlsym(RTLD_NEXT). The values are the same CRC32C either way (Castagnoli polynomial,
 * pre- and post-inverted, as RocksDB's Extend); test_store checks them against the
 * library's on every length and alignment, and that the binding is in effect. If a later
 * librocksdb stopped calling through the PLT, this definition would simply go unused. */
#include "store/crc32c.h"

#include <dlfcn.h>
#include <nmmintrin.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef uint32_t (*extend_fn)(uint32_t, const char *, size_t);

__attribute__((target("sse4.2"))) static uint32_t extend_sse42(uint32_t crc, const char *buf, size_t n) {
  const unsigned char *p = (const unsigned char *)buf;
  uint64_t c = (uint32_t)~crc;
  while (n > 0 && ((uintptr_t)p & 7) != 0) {
    c = _mm_crc32_u8((uint32_t)c, *p++);
    n--;
  }
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    c = _mm_crc32_u64(c, w);
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = _mm_crc32_u8((uint32_t)c, *p++);
  return ~(uint32_t)c;
}

static _Atomic(extend_fn) chosen;
static pthread_once_t chosen_once = PTHREAD_ONCE_INIT;

static void choose(void) {
  extend_fn f;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("sse4.2")) {
    f = extend_sse42;
  } else {
    f = (extend_fn)dlsym(RTLD_NEXT, "_ZN7rocksdb6crc32c6ExtendEjPKcm");
    if (!f) abort(); /* librocksdb is linked in, so it has the symbol */
  }
  atomic_store_explicit(&chosen, f, memory_order_release);
}

static extend_fn resolve(void) {
  pthread_once(&chosen_once, choose);
  return atomic_load_explicit(&chosen, memory_order_acquire);
}

uint32_t _ZN7rocksdb6crc32c6ExtendEjPKcm(uint32_t crc, const char *buf, size_t n) {
  extend_fn f = atomic_load_explicit(&chosen, memory_order_acquire);
  if (__builtin_expect(f == NULL, 0)) f = resolve();
  return f(crc, buf, n);
}

const char *ak_crc32c_impl(void) { return resolve() == extend_sse42 ? "sse4.2" : "rocksdb"; }
