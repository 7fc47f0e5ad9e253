/* Unit tests: the blob store interface on LocalFS (blob/blob.h): put, get, ranges, head,
 * listing with pagination past 1,000 keys, delete, scopes kept apart, key checks, and that
 * a put never leaves a part of an object or a temporary file behind. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
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
