/* Growth doubles from 64 bytes (16 items for arrays), or straight to what one append
 * needs when that is more; sizes that would overflow fail like an allocation. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/buf.h"

#define MIN_BYTES 64
#define MIN_ITEMS 16

int ak_buf_reserve(ak_buf_t *b, size_t n) {
  if (b->failed) return -1;
  if (n < b->cap - b->len) return 0; /* cap - len > n: n bytes and the NUL fit */
  if (n > SIZE_MAX / 2 - b->len - 1) goto fail;
  size_t want = b->len + n + 1, nc = b->cap ? b->cap : MIN_BYTES;
  while (nc < want) nc *= 2;
  char *np = realloc(b->p, nc);
  if (!np) goto fail;
  if (!b->p) np[0] = '\0';
  b->p = np;
  b->cap = nc;
  return 0;
fail:
  b->failed = true;
  return -1;
}

int ak_buf_append(ak_buf_t *b, const void *p, size_t n) {
  if (ak_buf_reserve(b, n) != 0) return -1;
  if (n) memcpy(b->p + b->len, p, n);
  b->len += n;
  b->p[b->len] = '\0';
  return 0;
}

int ak_buf_puts(ak_buf_t *b, const char *s) { return ak_buf_append(b, s, strlen(s)); }

int ak_buf_vprintf(ak_buf_t *b, const char *fmt, va_list ap) {
  /* most lines fit what is left: format once, and again only after growing */
  if (ak_buf_reserve(b, 0) != 0) return -1;
  va_list again;
  va_copy(again, ap);
  int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
  if (n >= 0 && (size_t)n >= b->cap - b->len) {
    if (ak_buf_reserve(b, (size_t)n) == 0) n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, again);
    else n = -1;
  }
  va_end(again);
  if (n < 0) {
    b->failed = true;
    if (b->p) b->p[b->len] = '\0';
    return -1;
  }
  b->len += (size_t)n;
  return 0;
}

int ak_buf_printf(ak_buf_t *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int rc = ak_buf_vprintf(b, fmt, ap);
  va_end(ap);
  return rc;
}

char *ak_buf_take(ak_buf_t *b, size_t *len) {
  if (!b->failed) ak_buf_reserve(b, 0); /* an empty buffer still gives "" */
  char *p = b->failed ? NULL : b->p;
  if (len) *len = p ? b->len : 0;
  if (!p) free(b->p);
  *b = (ak_buf_t)AK_BUF_INIT;
  return p;
}

void ak_buf_reset(ak_buf_t *b) {
  b->len = 0;
  b->failed = false;
  if (b->p) b->p[0] = '\0';
}

void ak_buf_free(ak_buf_t *b) {
  free(b->p);
  *b = (ak_buf_t)AK_BUF_INIT;
}

int ak_buf_grow(void *items, size_t *cap, size_t need, size_t size) {
  if (need <= *cap) return 0;
  size_t nc = *cap ? *cap : MIN_ITEMS;
  while (nc < need) {
    if (nc > SIZE_MAX / 2) return -1;
    nc *= 2;
  }
  if (size && nc > SIZE_MAX / size) return -1;
  void *old;
  memcpy(&old, items, sizeof old); /* items is a T **: its pointer, read as bytes */
  void *nv = realloc(old, nc * size);
  if (!nv) return -1;
  memcpy(items, &nv, sizeof nv);
  *cap = nc;
  return 0;
}
