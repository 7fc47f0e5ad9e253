/* Unit tests: the blob store interface on LocalFS (blob/blob.h): put, get, ranges, head,
 * listing with pagination past 1,000 keys, delete, scopes kept apart, key checks, that
 * a put never leaves a part of an object or a temporary file behind; puts from a file
 * (multi-MiB, short files refused) and streamed reads in chunks. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <openssl/evp.h>
#include "blob/blob.h"

static char dir[256];
static char err[256];

static void setup(void) {
  snprintf(dir, sizeof dir, "/tmp/ak-blob-test-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
}

static void rm_rf(const char *p) {
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", p);
  cr_assert_eq(system(cmd), 0);
}

static void teardown(void) { rm_rf(dir); }

TestSuite(blob, .init = setup, .fini = teardown);

static ak_blob_t *store(void) {
  char root[300];
  snprintf(root, sizeof root, "%s/node/segments", dir);
  ak_blob_t *b = ak_blob_local_new(root, err, sizeof err);
  cr_assert_not_null(b, "%s", err);
  return b;
}

Test(blob, put_get_range_head_delete) {
  ak_blob_t *b = store();
  const char *body = "0123456789abcdef";
  cr_assert_eq(ak_blob_put(b, "archive/v1/dt=2026-12-01/n1/seg-1-9.seg", body, 16, err, sizeof err), AK_BLOB_OK,
               "%s", err);
  uint8_t *v = NULL;
  size_t n = 0;
  cr_assert_eq(ak_blob_get(b, "archive/v1/dt=2026-12-01/n1/seg-1-9.seg", &v, &n, err, sizeof err), AK_BLOB_OK);
  cr_assert(n == 16 && !memcmp(v, body, 16));
  free(v);
  cr_assert_eq(ak_blob_get_range(b, "archive/v1/dt=2026-12-01/n1/seg-1-9.seg", 10, 4, &v, &n, err, sizeof err),
               AK_BLOB_OK);
  cr_assert(n == 4 && !memcmp(v, "abcd", 4));
  free(v);
  cr_assert_eq(ak_blob_get_range(b, "archive/v1/dt=2026-12-01/n1/seg-1-9.seg", 14, 100, &v, &n, err, sizeof err),
               AK_BLOB_OK);
  cr_assert(n == 2 && !memcmp(v, "ef", 2), "a range past the end is cut at the end");
  free(v);
  cr_assert_eq(ak_blob_get_range(b, "archive/v1/dt=2026-12-01/n1/seg-1-9.seg", 99, 4, &v, &n, err, sizeof err),
               AK_BLOB_OK);
  cr_assert_eq(n, 0);
  free(v);
  uint64_t size = 0;
  cr_assert_eq(ak_blob_head(b, "archive/v1/dt=2026-12-01/n1/seg-1-9.seg", &size, err, sizeof err), AK_BLOB_OK);
  cr_assert_eq(size, 16);
  cr_assert_eq(ak_blob_head(b, "archive/v1/nothing", &size, err, sizeof err), AK_BLOB_NOT_FOUND);
  cr_assert_eq(ak_blob_get(b, "archive/v1/nothing", &v, &n, err, sizeof err), AK_BLOB_NOT_FOUND);
  cr_assert_eq(ak_blob_head(b, "archive/v1", &size, err, sizeof err), AK_BLOB_NOT_FOUND, "a directory is no object");
  /* a second put of the same key replaces it whole (a retried PUT) */
  cr_assert_eq(ak_blob_put(b, "archive/v1/dt=2026-12-01/n1/seg-1-9.seg", "xy", 2, err, sizeof err), AK_BLOB_OK);
  cr_assert_eq(ak_blob_get(b, "archive/v1/dt=2026-12-01/n1/seg-1-9.seg", &v, &n, err, sizeof err), AK_BLOB_OK);
  cr_assert(n == 2 && !memcmp(v, "xy", 2));
  free(v);
  cr_assert_eq(ak_blob_delete(b, "archive/v1/dt=2026-12-01/n1/seg-1-9.seg", err, sizeof err), AK_BLOB_OK);
  cr_assert_eq(ak_blob_head(b, "archive/v1/dt=2026-12-01/n1/seg-1-9.seg", &size, err, sizeof err), AK_BLOB_NOT_FOUND);
  cr_assert_eq(ak_blob_delete(b, "archive/v1/dt=2026-12-01/n1/seg-1-9.seg", err, sizeof err), AK_BLOB_OK,
               "deleting what is gone is fine");
  /* an empty object */
  cr_assert_eq(ak_blob_put(b, "empty", "", 0, err, sizeof err), AK_BLOB_OK);
  cr_assert_eq(ak_blob_get(b, "empty", &v, &n, err, sizeof err), AK_BLOB_OK);
  cr_assert_eq(n, 0);
  free(v);
  ak_blob_free(b);
}

/* no temporary file survives a put, and none is ever listed */
static int count_tmp(const char *d) {
  DIR *dd = opendir(d);
  if (!dd) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(dd))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", d, e->d_name);
    struct stat st;
    if (strstr(e->d_name, ".ak-tmp-")) n++;
    else if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) n += count_tmp(p);
  }
  closedir(dd);
  return n;
}

Test(blob, listing_pages_in_byte_order) {
  ak_blob_t *b = store();
  enum { N = 2500 };
  for (int i = 0; i < N; i++) {
    char k[64];
    snprintf(k, sizeof k, "seg/%c/k%05d", 'a' + i % 3, i);
    cr_assert_eq(ak_blob_put(b, k, &i, sizeof i, err, sizeof err), AK_BLOB_OK, "%s", err);
  }
  cr_assert_eq(ak_blob_put(b, "other/x", "1", 1, err, sizeof err), AK_BLOB_OK);
  char root[300];
  snprintf(root, sizeof root, "%s/node/segments", dir);
  cr_assert_eq(count_tmp(root), 0);
  /* a stray temporary file (a crash mid-put) is never an object */
  char stray[400];
  snprintf(stray, sizeof stray, "%s/seg/a/k00000.ak-tmp-0000000000000000", root);
  FILE *f = fopen(stray, "w");
  cr_assert_not_null(f);
  fclose(f);
  char *after = NULL, prev[64] = "";
  size_t total = 0, pages = 0;
  for (;;) {
    ak_blob_list_t l;
    cr_assert_eq(ak_blob_list(b, "seg/", after, 1000, &l, err, sizeof err), AK_BLOB_OK, "%s", err);
    pages++;
    for (size_t i = 0; i < l.n; i++) {
      cr_assert(strncmp(l.keys[i], "seg/", 4) == 0 && !strstr(l.keys[i], "ak-tmp"), "%s", l.keys[i]);
      cr_assert_gt(strcmp(l.keys[i], prev), 0, "byte order, no repeats: %s after %s", l.keys[i], prev);
      snprintf(prev, sizeof prev, "%s", l.keys[i]);
    }
    total += l.n;
    free(after);
    after = l.next ? strdup(l.next) : NULL;
    ak_blob_list_clear(&l);
    if (!after) break;
  }
  cr_assert_eq(total, N);
  cr_assert_eq(pages, 3);
  ak_blob_list_t l;
  cr_assert_eq(ak_blob_list(b, "seg/b/", NULL, 5000, &l, err, sizeof err), AK_BLOB_OK);
  cr_assert_eq(l.n, N / 3);
  cr_assert_null(l.next, "the last page has no continuation");
  ak_blob_list_clear(&l);
  cr_assert_eq(ak_blob_list(b, "nope/", NULL, 10, &l, err, sizeof err), AK_BLOB_OK);
  cr_assert_eq(l.n, 0);
  ak_blob_list_clear(&l);
  ak_blob_free(b);
}

Test(blob, scopes_are_prefixes_the_caller_never_sees) {
  ak_blob_t *b = store();
  ak_blob_t *seg = ak_blob_scope(b, "tenants/", "seg"), *bak = ak_blob_scope(b, "tenants/", "backup");
  cr_assert(seg && bak);
  cr_assert_eq(ak_blob_put(seg, "one", "s", 1, err, sizeof err), AK_BLOB_OK);
  cr_assert_eq(ak_blob_put(bak, "one", "b", 1, err, sizeof err), AK_BLOB_OK);
  uint8_t *v = NULL;
  size_t n = 0;
  cr_assert_eq(ak_blob_get(seg, "one", &v, &n, err, sizeof err), AK_BLOB_OK);
  cr_assert(n == 1 && v[0] == 's');
  free(v);
  cr_assert_eq(ak_blob_get(b, "tenants/backup/one", &v, &n, err, sizeof err), AK_BLOB_OK, "the full key");
  cr_assert(n == 1 && v[0] == 'b');
  free(v);
  ak_blob_list_t l;
  cr_assert_eq(ak_blob_list(seg, "", NULL, 10, &l, err, sizeof err), AK_BLOB_OK);
  cr_assert_eq(l.n, 1);
  cr_assert_str_eq(l.keys[0], "one", "keys come back relative to the scope");
  ak_blob_list_clear(&l);
  ak_blob_free(seg);
  ak_blob_free(bak);
  ak_blob_free(b);
}

Test(blob, bad_keys_are_refused_and_change_nothing) {
  ak_blob_t *b = store();
  const char *bad[] = {"", "/abs", "a//b", "a/./b", "../up", "a/..", "sp ace", "back\\slash", "tab\tkey",
                       "x.ak-tmp-1", "a/", "\x7f"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cr_assert_not(ak_blob_key_ok(bad[i]), "%s", bad[i]);
    cr_assert_eq(ak_blob_put(b, bad[i], "x", 1, err, sizeof err), AK_BLOB_ERROR, "%s", bad[i]);
  }
  char longk[AK_BLOB_KEY_MAX + 2];
  memset(longk, 'k', sizeof longk - 1);
  longk[sizeof longk - 1] = 0;
  cr_assert_not(ak_blob_key_ok(longk));
  cr_assert(ak_blob_key_ok("archive/v1/dt=2026-12-01/node-1/seg-00000001-00000009.idx"));
  ak_blob_list_t l;
  cr_assert_eq(ak_blob_list(b, "", NULL, 10, &l, err, sizeof err), AK_BLOB_OK);
  cr_assert_eq(l.n, 0, "nothing was written");
  ak_blob_list_clear(&l);
  ak_blob_free(b);
}

/* ---- put from a file, streamed reads ------------------------------------------------ */

static void sha256_hex(const uint8_t *p, size_t n, char out[65]) {
  unsigned char d[32];
  unsigned dl = 0;
  cr_assert_eq(EVP_Digest(p, n, d, &dl, EVP_sha256(), NULL), 1);
  for (int i = 0; i < 32; i++) sprintf(out + 2 * i, "%02x", d[i]);
}

/* A file of n pseudo-random bytes (into *bytes, malloc'd), open for reading and writing,
 * its offset left at its end. */
static int data_file(const char *name, size_t n, uint8_t **bytes) {
  char path[400];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  cr_assert_geq(fd, 0);
  uint8_t *b = malloc(n ? n : 1);
  cr_assert_not_null(b);
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b[i] = (uint8_t)x;
  }
  for (size_t done = 0; done < n;) {
    ssize_t w = write(fd, b + done, n - done);
    cr_assert_gt(w, 0);
    done += (size_t)w;
  }
  *bytes = b;
  return fd;
}

typedef struct {
  EVP_MD_CTX *md;
  uint8_t *copy;
  size_t len, cap;
  int calls, stop_at;
  size_t biggest;
} sink_t;

static int sink_cb(void *ctx, const uint8_t *p, size_t n) {
  sink_t *s = ctx;
  s->calls++;
  if (n > s->biggest) s->biggest = n;
  EVP_DigestUpdate(s->md, p, n);
  if (s->copy) {
    cr_assert_leq(s->len + n, s->cap, "more bytes than the object has");
    memcpy(s->copy + s->len, p, n);
  }
  s->len += n;
  return s->stop_at && s->calls >= s->stop_at;
}

static void sink_hex(sink_t *s, char out[65]) {
  unsigned char d[32];
  unsigned dl = 0;
  EVP_DigestFinal_ex(s->md, d, &dl);
  for (int i = 0; i < 32; i++) sprintf(out + 2 * i, "%02x", d[i]);
}

/* put_file of a multi-MiB file, then streamed back in 4 MiB chunks: the same bytes and
 * hash; sizes around the chunk (a last chunk short, exactly two chunks, empty) and a
 * prefix of a file (size below the file's) */
Test(blob, put_file_then_stream_back) {
  ak_blob_t *b = store();
  ak_blob_t *bak = ak_blob_scope(b, "", "backup");
  cr_assert_not_null(bak);
  const size_t sizes[] = {9u * 1024 * 1024 + 123, 2u * AK_BLOB_STREAM_CHUNK, 0, 1, (5u << 20) + 3};
  for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
    size_t n = sizes[t];
    /* the last one through the read/write copy (test builds: copy_file_range off) */
    if (t == sizeof sizes / sizeof sizes[0] - 1) setenv("ANKUSA_TEST_NO_COPY_FILE_RANGE", "1", 1);
    uint8_t *bytes;
    char name[32], key[64], hex[65], got_hex[65];
    snprintf(name, sizeof name, "src-%zu", t);
    snprintf(key, sizeof key, "ckpt/000%zu/%zu.sst", t, n);
    int fd = data_file(name, n, &bytes);
    sha256_hex(bytes, n, hex);
    /* the offset sits at the end of the file: put_file reads [0, size) regardless */
    cr_assert_eq(ak_blob_put_file(bak, key, fd, n, hex, err, sizeof err), AK_BLOB_OK, "%zu: %s", n, err);
    cr_assert_eq(lseek(fd, 0, SEEK_CUR), (off_t)n, "the caller's offset is left alone");
    uint64_t size = 0;
    cr_assert_eq(ak_blob_head(bak, key, &size, err, sizeof err), AK_BLOB_OK);
    cr_assert_eq(size, n);
    sink_t s = {.md = EVP_MD_CTX_new(), .copy = malloc(n ? n : 1), .cap = n};
    EVP_DigestInit_ex(s.md, EVP_sha256(), NULL);
    uint64_t total = 0;
    cr_assert_eq(ak_blob_stream(bak, key, sink_cb, &s, &total, err, sizeof err), AK_BLOB_OK, "%s", err);
    sink_hex(&s, got_hex);
    cr_assert_eq(total, n);
    cr_assert_eq(s.len, n);
    cr_assert(n == 0 || memcmp(s.copy, bytes, n) == 0, "%zu: the bytes streamed back differ", n);
    cr_assert_str_eq(got_hex, hex);
    cr_assert_leq(s.biggest, AK_BLOB_STREAM_CHUNK, "one chunk at a time");
    cr_assert_eq(s.calls, (int)((n + AK_BLOB_STREAM_CHUNK - 1) / AK_BLOB_STREAM_CHUNK), "%zu bytes", n);
    EVP_MD_CTX_free(s.md);
    free(s.copy);
    /* a prefix: size below the file's puts exactly [0, size) */
    if (n > 1000) {
      char pkey[80], phex[65];
      snprintf(pkey, sizeof pkey, "%s.head", key);
      sha256_hex(bytes, 1000, phex);
      cr_assert_eq(ak_blob_put_file(bak, pkey, fd, 1000, phex, err, sizeof err), AK_BLOB_OK, "%s", err);
      uint8_t *v = NULL;
      size_t vn = 0;
      cr_assert_eq(ak_blob_get(bak, pkey, &v, &vn, err, sizeof err), AK_BLOB_OK);
      cr_assert(vn == 1000 && memcmp(v, bytes, 1000) == 0);
      free(v);
    }
    close(fd);
    free(bytes);
  }
  unsetenv("ANKUSA_TEST_NO_COPY_FILE_RANGE");
  char root[300];
  snprintf(root, sizeof root, "%s/node/segments", dir);
  cr_assert_eq(count_tmp(root), 0);
  ak_blob_free(bak);
  ak_blob_free(b);
}

/* a file shorter than size: an error, no object, no temporary file, and an object already
 * under the key untouched; so too a bad hash, a bad key, a closed fd */
Test(blob, put_file_short_file_leaves_nothing) {
  ak_blob_t *b = store();
  char root[300];
  snprintf(root, sizeof root, "%s/node/segments", dir);
  uint8_t *bytes;
  int fd = data_file("short", 3u << 20, &bytes);
  char hex[65];
  sha256_hex(bytes, 3u << 20, hex);
  uint64_t size = 0;
  cr_assert_eq(ak_blob_put_file(b, "bk/new.sst", fd, (3u << 20) + 1, hex, err, sizeof err), AK_BLOB_ERROR);
  cr_assert(strstr(err, "fewer than"), "%s", err);
  cr_assert_eq(ak_blob_head(b, "bk/new.sst", &size, err, sizeof err), AK_BLOB_NOT_FOUND);
  cr_assert_eq(count_tmp(root), 0);
  cr_assert_eq(ak_blob_put(b, "bk/old.sst", "old", 3, err, sizeof err), AK_BLOB_OK);
  cr_assert_eq(ak_blob_put_file(b, "bk/old.sst", fd, 5u << 20, hex, err, sizeof err), AK_BLOB_ERROR);
  uint8_t *v = NULL;
  size_t vn = 0;
  cr_assert_eq(ak_blob_get(b, "bk/old.sst", &v, &vn, err, sizeof err), AK_BLOB_OK);
  cr_assert(vn == 3 && !memcmp(v, "old", 3), "the old object is untouched");
  free(v);
  const char *bad_hex[] = {NULL, "", "abc", "E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855",
                           "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b85\n"};
  for (size_t i = 0; i < sizeof bad_hex / sizeof bad_hex[0]; i++)
    cr_assert_eq(ak_blob_put_file(b, "bk/h.sst", fd, 10, bad_hex[i], err, sizeof err), AK_BLOB_ERROR, "%zu", i);
  cr_assert_eq(ak_blob_put_file(b, "../bk/h.sst", fd, 10, hex, err, sizeof err), AK_BLOB_ERROR);
  cr_assert_eq(ak_blob_head(b, "bk/h.sst", &size, err, sizeof err), AK_BLOB_NOT_FOUND);
  close(fd);
  cr_assert_eq(ak_blob_put_file(b, "bk/closed.sst", fd, 10, hex, err, sizeof err), AK_BLOB_ERROR);
  cr_assert_eq(ak_blob_put_file(b, "bk/closed.sst", -1, 10, hex, err, sizeof err), AK_BLOB_ERROR);
  cr_assert_eq(ak_blob_head(b, "bk/closed.sst", &size, err, sizeof err), AK_BLOB_NOT_FOUND);
  cr_assert_eq(count_tmp(root), 0);
  free(bytes);
  ak_blob_free(b);
}

/* The adapter's own check, below the up-front one: a file that shrinks after the caller
 * looked (here: the vtable called directly with a size past the end) fails mid-copy and
 * leaves no object and no temporary file. */
Test(blob, put_file_adapter_refuses_a_file_that_ends_early) {
  ak_blob_t *b = store();
  char root[300];
  snprintf(root, sizeof root, "%s/node/segments", dir);
  uint8_t *bytes;
  int fd = data_file("shrinks", (2u << 20) + 7, &bytes);
  char hex[65];
  sha256_hex(bytes, (2u << 20) + 7, hex);
  for (int path = 0; path < 2; path++) { /* copy_file_range, then read/write */
    if (path) setenv("ANKUSA_TEST_NO_COPY_FILE_RANGE", "1", 1);
    cr_assert_eq(b->vt->put_file(b->self, "bk/shrunk.sst", fd, (4u << 20), hex, err, sizeof err), AK_BLOB_ERROR);
    cr_assert(strstr(err, "ended after 2097159 of 4194304"), "%s", err);
    uint64_t size = 0;
    cr_assert_eq(ak_blob_head(b, "bk/shrunk.sst", &size, err, sizeof err), AK_BLOB_NOT_FOUND);
    cr_assert_eq(count_tmp(root), 0);
  }
  unsetenv("ANKUSA_TEST_NO_COPY_FILE_RANGE");
  close(fd);
  free(bytes);
  ak_blob_free(b);
}

typedef struct {
  sink_t s;
  const char *path;
} shrink_t;

static int shrink_cb(void *ctx, const uint8_t *p, size_t n) {
  shrink_t *x = ctx;
  if (x->s.calls == 0) cr_assert_eq(truncate(x->path, AK_BLOB_STREAM_CHUNK + 10), 0);
  return sink_cb(&x->s, p, n);
}

/* an object that shrinks while it is streamed: a short range is an error, not the end */
Test(blob, stream_of_an_object_that_shrinks_fails) {
  ak_blob_t *b = store();
  uint8_t *bytes;
  size_t n = 3 * AK_BLOB_STREAM_CHUNK;
  int fd = data_file("shrink-src", n, &bytes);
  char hex[65], path[400];
  sha256_hex(bytes, n, hex);
  cr_assert_eq(ak_blob_put_file(b, "bk/shrinks.sst", fd, n, hex, err, sizeof err), AK_BLOB_OK, "%s", err);
  snprintf(path, sizeof path, "%s/node/segments/bk/shrinks.sst", dir);
  shrink_t x = {.s = {.md = EVP_MD_CTX_new()}, .path = path};
  EVP_DigestInit_ex(x.s.md, EVP_sha256(), NULL);
  uint64_t total = 0;
  cr_assert_eq(ak_blob_stream(b, "bk/shrinks.sst", shrink_cb, &x, &total, err, sizeof err), AK_BLOB_ERROR);
  cr_assert(strstr(err, "changed while it was read"), "%s", err);
  cr_assert_eq(x.s.calls, 1);
  EVP_MD_CTX_free(x.s.md);
  close(fd);
  free(bytes);
  ak_blob_free(b);
}

Test(blob, stream_missing_key_is_not_found) {
  ak_blob_t *b = store();
  sink_t s = {.md = EVP_MD_CTX_new()};
  EVP_DigestInit_ex(s.md, EVP_sha256(), NULL);
  uint64_t total = 99;
  cr_assert_eq(ak_blob_stream(b, "bk/none.sst", sink_cb, &s, &total, err, sizeof err), AK_BLOB_NOT_FOUND);
  cr_assert_eq(s.calls, 0);
  cr_assert_eq(total, 0);
  cr_assert_eq(ak_blob_stream(b, "bad//key", sink_cb, &s, &total, err, sizeof err), AK_BLOB_ERROR);
  EVP_MD_CTX_free(s.md);
  ak_blob_free(b);
}

/* a cb answering non-zero stops the stream: no further chunk is read or handed out */
Test(blob, stream_stops_when_the_callback_says_so) {
  ak_blob_t *b = store();
  uint8_t *bytes;
  size_t n = 3 * AK_BLOB_STREAM_CHUNK + 5;
  int fd = data_file("three", n, &bytes);
  char hex[65];
  sha256_hex(bytes, n, hex);
  cr_assert_eq(ak_blob_put_file(b, "bk/three.sst", fd, n, hex, err, sizeof err), AK_BLOB_OK, "%s", err);
  for (int stop = 1; stop <= 2; stop++) {
    sink_t s = {.md = EVP_MD_CTX_new(), .stop_at = stop};
    EVP_DigestInit_ex(s.md, EVP_sha256(), NULL);
    uint64_t total = 0;
    err[0] = 0;
    cr_assert_eq(ak_blob_stream(b, "bk/three.sst", sink_cb, &s, &total, err, sizeof err), AK_BLOB_ERROR);
    cr_assert_str_eq(err, "stopped");
    cr_assert_eq(s.calls, stop);
    cr_assert_eq(total, (uint64_t)stop * AK_BLOB_STREAM_CHUNK);
    EVP_MD_CTX_free(s.md);
  }
  close(fd);
  free(bytes);
  ak_blob_free(b);
}
