/* CRC32C for RocksDB: ankusa's own definition of rocksdb::crc32c::Extend. See crc32c.c. */
#ifndef AK_STORE_CRC32C_H
#define AK_STORE_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* rocksdb::crc32c::Extend(uint32_t, const char *, size_t), by its mangled name: the CRC32C
 * of A || buf[0..n) given crc, the CRC32C of A. Defined here, it takes the place of the
 * library's for every call librocksdb makes through its PLT. */
uint32_t _ZN7rocksdb6crc32c6ExtendEjPKcm(uint32_t crc, const char *buf, size_t n);
#define ak_crc32c_extend _ZN7rocksdb6crc32c6ExtendEjPKcm

/* The implementation in use: "sse4.2" (the CPU's crc32 instruction) or "rocksdb" (the
 * library's own, on a CPU without it). Resolves it on first use; the store calls it at
 * open, which also keeps this object (and so the definition above) in every binary that
 * links the store. */
const char *ak_crc32c_impl(void);

#endif
