/* The growable buffer: bytes appended, printed or reserved at the end of one heap block
 * that grows by doubling and stays NUL-terminated, so a string builder needs nothing else.
 * Owns its block until ak_buf_take hands it over. An allocation failure is sticky: the
 * buffer drops that append and every later one, and ak_buf_take answers NULL, so a builder
 * checks once at the end instead of after each append, and never hands out text with a
 * piece silently missing. Never locks, logs or does I/O.
 *
 * Typed arrays (T *v; size_t n, cap) grow by the same rule through ak_buf_grow. */
#ifndef AK_CORE_BUF_H
#define AK_CORE_BUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct ak_buf {
  char *p;                    /* len bytes then a NUL; NULL before the first byte */
  size_t len, cap;
  bool failed;                /* an allocation failed: appends are dropped, take is NULL */
} ak_buf_t;

#define AK_BUF_INIT {NULL, 0, 0, false}

/* Room for n more bytes (and the NUL) past len: p + len may then be written, up to n
 * bytes, and len moved on by what was written. 0, or -1 (and failed) out of memory. */
int ak_buf_reserve(ak_buf_t *b, size_t n);
/* 0, or -1 when the buffer failed (now or before). */
int ak_buf_append(ak_buf_t *b, const void *p, size_t n);
int ak_buf_puts(ak_buf_t *b, const char *s);
int ak_buf_printf(ak_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int ak_buf_vprintf(ak_buf_t *b, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

/* The bytes, NUL-terminated (malloc'd, the caller frees them; "" for none) and *len
 * (may be NULL); the buffer is empty again. NULL when the buffer failed (its bytes are
 * freed and the failure cleared). */
char *ak_buf_take(ak_buf_t *b, size_t *len);
/* Empty, keeping the block; clears a failure. */
void ak_buf_reset(ak_buf_t *b);
/* Free the block; the buffer is as AK_BUF_INIT. */
void ak_buf_free(ak_buf_t *b);

/* Make room for `need` items of `size` bytes in the array *items (a T **, passed as
 * &v) of capacity *cap: the capacity doubles (from 16) until it holds need. 0, or -1 out
 * of memory with the array and *cap untouched. */
int ak_buf_grow(void *items, size_t *cap, size_t need, size_t size);

#endif
