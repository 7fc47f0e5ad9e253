/* Unit tests: the shared small structures of core/ — the intrusive list, the tenant map,
 * the growable buffer and the header-name rule — each against a plain reference model. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/buf.h"
#include "core/header.h"
#include "core/list.h"
#include "core/tmap.h"

/* ------------------------------------------------------------------------ list ---- */

typedef struct {
  int id;
  ak_list_t link;
} item_t;

/* The ids in list order, as a string like "1 2 3", checked against the prev links too. */
static const char *order(const ak_list_t *head) {
  static char out[512];
  size_t o = 0;
  out[0] = 0;
  size_t fwd = 0;
  ak_list_foreach(p, head) {
    item_t *it = ak_list_entry(p, item_t, link);
    o += (size_t)snprintf(out + o, sizeof out - o, "%s%d", o ? " " : "", it->id);
    cr_assert_eq(p->next->prev, p, "prev link of %d", it->id);
    fwd++;
  }
  size_t back = 0;
  for (const ak_list_t *p = head->prev; p != head; p = p->prev) back++;
  cr_assert_eq(fwd, back, "as many nodes backwards as forwards");
  return out;
}

Test(list, insert_remove_first_last) {
  ak_list_t h;
  ak_list_init(&h);
  item_t v[5] = {{1, {0}}, {2, {0}}, {3, {0}}, {4, {0}}, {5, {0}}};
  cr_expect(ak_list_empty(&h));
  cr_expect_null(ak_list_first(&h));
  cr_expect_null(ak_list_last(&h));
  cr_expect_not(ak_list_linked(&v[0].link), "zeroed memory is unlinked");
  ak_list_insert_tail(&h, &v[1].link);
  ak_list_insert_tail(&h, &v[2].link);
  ak_list_insert_head(&h, &v[0].link);
  ak_list_insert_tail(&h, &v[3].link);
  cr_expect_str_eq(order(&h), "1 2 3 4");
  cr_expect_not(ak_list_empty(&h));
  cr_expect(ak_list_linked(&v[2].link));
  cr_expect_eq(ak_list_entry(ak_list_first(&h), item_t, link), &v[0]);
  cr_expect_eq(ak_list_entry(ak_list_last(&h), item_t, link), &v[3]);
  ak_list_remove(&v[2].link);
  cr_expect_not(ak_list_linked(&v[2].link), "removed reads as unlinked");
  cr_expect_str_eq(order(&h), "1 2 4");
  ak_list_remove(&v[0].link);
  cr_expect_str_eq(order(&h), "2 4");
  ak_list_remove(&v[3].link);
  cr_expect_str_eq(order(&h), "2");
  cr_expect_eq(ak_list_first(&h), ak_list_last(&h));
  ak_list_remove(&v[1].link);
  cr_expect(ak_list_empty(&h));
  cr_expect_str_eq(order(&h), "");
}

Test(list, rotate_after_serves_round_robin) {
  ak_list_t h;
  ak_list_init(&h);
  item_t v[4] = {{1, {0}}, {2, {0}}, {3, {0}}, {4, {0}}};
  for (int i = 0; i < 4; i++) ak_list_insert_tail(&h, &v[i].link);
  ak_list_rotate_after(&h, ak_list_first(&h));
  cr_expect_str_eq(order(&h), "2 3 4 1", "the first goes last");
  ak_list_rotate_after(&h, &v[2].link);
  cr_expect_str_eq(order(&h), "4 1 2 3", "the node after 3 comes first");
  ak_list_rotate_after(&h, &v[2].link);
  cr_expect_str_eq(order(&h), "4 1 2 3", "the last stays last");
  /* a tail insert after a rotation lands behind the node just served */
  item_t x = {9, {0}};
  ak_list_rotate_after(&h, ak_list_first(&h));
  ak_list_insert_tail(&h, &x.link);
  cr_expect_str_eq(order(&h), "1 2 3 4 9");
  ak_list_t one;
  ak_list_init(&one);
  item_t y = {7, {0}};
  ak_list_insert_tail(&one, &y.link);
  ak_list_rotate_after(&one, &y.link);
  cr_expect_str_eq(order(&one), "7");
}

Test(list, move_and_foreach_safe) {
  ak_list_t a, b;
  ak_list_init(&a);
  ak_list_init(&b);
  item_t v[5] = {{1, {0}}, {2, {0}}, {3, {0}}, {4, {0}}, {5, {0}}};
  ak_list_insert_tail(&a, &v[0].link);
  ak_list_insert_tail(&a, &v[1].link);
  ak_list_insert_tail(&b, &v[2].link);
  ak_list_move(&b, &a);
  cr_expect_str_eq(order(&a), "1 2 3");
  cr_expect(ak_list_empty(&b), "from is left empty");
  ak_list_move(&b, &a);
  cr_expect_str_eq(order(&a), "1 2 3", "moving an empty list changes nothing");
  ak_list_move(&a, &b);
  cr_expect_str_eq(order(&b), "1 2 3", "into an empty list");
  cr_expect(ak_list_empty(&a));
  ak_list_insert_tail(&b, &v[3].link);
  ak_list_insert_tail(&b, &v[4].link);
  int seen = 0;
  ak_list_foreach_safe(p, nx, &b) {
    item_t *it = ak_list_entry(p, item_t, link);
    seen++;
    if (it->id % 2) ak_list_remove(p);
  }
  cr_expect_eq(seen, 5);
  cr_expect_str_eq(order(&b), "2 4");
}

/* Random operations against an array holding the same order. */
Test(list, random_ops_match_a_model) {
  enum { N = 64 };
  item_t v[N];
  int model[N], mn = 0;
  ak_list_t h;
  ak_list_init(&h);
  for (int i = 0; i < N; i++) v[i] = (item_t){.id = i};
  srand(7);
  for (int step = 0; step < 20000; step++) {
    int i = rand() % N, op = rand() % 4;
    int at = -1;
    for (int k = 0; k < mn; k++)
      if (model[k] == i) at = k;
    cr_assert_eq(ak_list_linked(&v[i].link), at >= 0, "step %d: membership of %d", step, i);
    if (at < 0 && op < 2) {
      if (op == 0) {
        ak_list_insert_tail(&h, &v[i].link);
        model[mn++] = i;
      } else {
        ak_list_insert_head(&h, &v[i].link);
        memmove(model + 1, model, (size_t)mn * sizeof *model);
        model[0] = i;
        mn++;
      }
    } else if (at >= 0 && op == 2) {
      ak_list_remove(&v[i].link);
      memmove(model + at, model + at + 1, (size_t)(mn - at - 1) * sizeof *model);
      mn--;
    } else if (at >= 0 && op == 3) {
      ak_list_rotate_after(&h, &v[i].link);
      int tmp[N];
      for (int k = 0; k < mn; k++) tmp[k] = model[(at + 1 + k) % mn];
      memcpy(model, tmp, (size_t)mn * sizeof *model);
    }
    int k = 0;
    ak_list_foreach(p, &h) {
      cr_assert_lt(k, mn, "step %d: longer than the model", step);
      cr_assert_eq(ak_list_entry(p, item_t, link)->id, model[k], "step %d: position %d", step, k);
      k++;
    }
    cr_assert_eq(k, mn, "step %d: shorter than the model", step);
  }
}

/* ------------------------------------------------------------------------ tmap ---- */

typedef struct {
  int64_t records;
  char tag[24];
} tval_t;

Test(tmap, find_get_remove_count) {
  ak_tmap_t m;
  ak_tmap_init(&m, sizeof(tval_t));
  cr_expect_null(ak_tmap_find(&m, "acme", 4), "an empty map finds nothing");
  cr_expect_eq(ak_tmap_count(&m), 0);
  bool created = false;
  tval_t *a = ak_tmap_get(&m, "acme", 4, &created);
  cr_assert_not_null(a);
  cr_expect(created);
  cr_expect_eq(a->records, 0, "inserted zeroed");
  cr_expect_eq(a->tag[0], 0);
  a->records = 7;
  cr_expect_eq(ak_tmap_get(&m, "acme", 4, &created), a, "the same entry again");
  cr_expect_not(created);
  cr_expect_eq(ak_tmap_find(&m, "acme", 4), a);
  cr_expect_null(ak_tmap_find(&m, "acm", 3), "a prefix is another key");
  cr_expect_null(ak_tmap_find(&m, "acmex", 5));
  cr_expect_null(ak_tmap_find(&m, "ACME", 4), "keys compare byte for byte");
  size_t len = 0;
  cr_expect_str_eq(ak_tmap_key(a, &len), "acme");
  cr_expect_eq(len, 4);
  tval_t *e = ak_tmap_get(&m, "", 0, &created);
  cr_assert_not_null(e, "the empty key is a key");
  cr_expect(created);
  cr_expect_neq(e, a);
  cr_expect_eq(ak_tmap_count(&m), 2);
  char big[AK_TMAP_KEY_MAX + 1];
  memset(big, 'x', sizeof big);
  cr_expect_not_null(ak_tmap_get(&m, big, AK_TMAP_KEY_MAX, NULL), "the longest key fits");
  cr_expect_null(ak_tmap_get(&m, big, AK_TMAP_KEY_MAX + 1, &created), "one byte more is refused");
  cr_expect_not(created);
  cr_expect_eq(ak_tmap_count(&m), 3);
  ak_tmap_remove(&m, a);
  cr_expect_null(ak_tmap_find(&m, "acme", 4));
  cr_expect_eq(ak_tmap_find(&m, "", 0), e);
  cr_expect_eq(ak_tmap_count(&m), 2);
  ak_tmap_fini(&m);
  cr_expect_eq(ak_tmap_count(&m), 0);
  cr_expect_null(ak_tmap_find(&m, "", 0), "fini empties the map");
  a = ak_tmap_get(&m, "again", 5, NULL);
  cr_expect_not_null(a, "and it is usable again");
  ak_tmap_fini(&m);
}

Test(tmap, pointer_values_and_iteration) {
  ak_tmap_t m;
  ak_tmap_init(&m, sizeof(void *));
  static int objs[3];
  const char *keys[] = {"t-1", "t_2", "T3"};
  for (int i = 0; i < 3; i++) {
    void **slot = ak_tmap_get(&m, keys[i], strlen(keys[i]), NULL);
    cr_assert_not_null(slot);
    *slot = &objs[i];
  }
  int seen[3] = {0};
  size_t pos = 0, n = 0;
  void **v;
  while ((v = ak_tmap_next(&m, &pos))) {
    int i = (int)((int *)*v - objs);
    cr_assert(i >= 0 && i < 3);
    cr_expect_str_eq(ak_tmap_key(v, NULL), keys[i], "each value with its own key");
    seen[i]++;
    n++;
  }
  cr_expect_eq(n, 3);
  cr_expect(seen[0] == 1 && seen[1] == 1 && seen[2] == 1, "every entry once");
  ak_tmap_fini(&m);
}

/* Random inserts and removals of tenants against a plain array; values must keep their
 * address through growth and through the removal of others (callers hold pointers). */
Test(tmap, random_ops_match_a_model_and_values_never_move) {
  enum { KEYS = 3000 };
  static char names[KEYS][16];
  static tval_t *where[KEYS];
  ak_tmap_t m;
  ak_tmap_init(&m, sizeof(tval_t));
  for (int i = 0; i < KEYS; i++) snprintf(names[i], sizeof names[i], "tenant-%d", i);
  size_t live = 0;
  srand(11);
  for (int step = 0; step < 60000; step++) {
    int i = rand() % KEYS;
    size_t kl = strlen(names[i]);
    tval_t *f = ak_tmap_find(&m, names[i], kl);
    cr_assert_eq(f, where[i], "step %d: %s found where it was put", step, names[i]);
    if (f) cr_assert_eq(f->records, i, "step %d: value intact", step);
    if (!where[i] && rand() % 3) {
      bool created;
      tval_t *v = ak_tmap_get(&m, names[i], kl, &created);
      cr_assert(v && created);
      v->records = i;
      where[i] = v;
      live++;
    } else if (where[i] && rand() % 2) {
      ak_tmap_remove(&m, where[i]);
      where[i] = NULL;
      live--;
    }
    cr_assert_eq(ak_tmap_count(&m), live);
  }
  size_t pos = 0, n = 0;
  tval_t *v;
  while ((v = ak_tmap_next(&m, &pos))) {
    cr_assert_eq(where[v->records], v, "iteration yields live entries only");
    n++;
  }
  cr_expect_eq(n, live);
  ak_tmap_fini(&m);
}

/* Keys sharing their first bytes (what tenant ids look like): len - 1 'W's and one more
 * byte; len 0 is the empty key. */
static size_t similar_key(char *k, int len, int c) {
  memset(k, 'W', (size_t)len);
  if (len) k[len - 1] = (char)('0' + c);
  return (size_t)len;
}

/* Many more than the first slot array holds: every one still found, and gone once removed. */
Test(tmap, similar_keys_through_growth_and_removal) {
  ak_tmap_t m;
  ak_tmap_init(&m, sizeof(int));
  char k[64];
  for (int len = 1; len < 64; len++)
    for (int c = 0; c < 40; c++) {
      int *v = ak_tmap_get(&m, k, similar_key(k, len, c), NULL);
      cr_assert_not_null(v);
      *v = len * 100 + c;
    }
  cr_expect_eq(ak_tmap_count(&m), 63 * 40);
  for (int len = 2; len < 64; len += 2)
    for (int c = 0; c < 40; c += 3) {
      size_t kl = similar_key(k, len, c);
      int *v = ak_tmap_find(&m, k, kl);
      cr_assert_not_null(v);
      ak_tmap_remove(&m, v);
      cr_assert_null(ak_tmap_find(&m, k, kl));
    }
  for (int len = 1; len < 64; len++)
    for (int c = 0; c < 40; c++) {
      int *v = ak_tmap_find(&m, k, similar_key(k, len, c));
      bool removed = len % 2 == 0 && c % 3 == 0;
      cr_assert_eq(v == NULL, removed, "len %d c %d", len, c);
      if (v) cr_assert_eq(*v, len * 100 + c);
    }
  cr_expect_eq(ak_tmap_count(&m), 63 * 40 - 31 * 14);
  ak_tmap_fini(&m);
}

/* ------------------------------------------------------------------------- buf ---- */

Test(buf, append_printf_take) {
  ak_buf_t b = AK_BUF_INIT;
  char *empty = ak_buf_take(&b, NULL);
  cr_assert_not_null(empty, "an empty buffer gives \"\"");
  cr_expect_str_eq(empty, "");
  free(empty);
  cr_assert_eq(ak_buf_append(&b, "ab", 2), 0);
  cr_assert_eq(ak_buf_append(&b, "", 0), 0);
  cr_assert_eq(ak_buf_puts(&b, "cd"), 0);
  cr_assert_eq(ak_buf_printf(&b, "-%d-%s", 42, "x"), 0);
  cr_expect_eq(b.len, 9);
  cr_expect_str_eq(b.p, "abcd-42-x", "NUL-terminated at every step");
  /* a line longer than the room left: formatted again after growing */
  char big[5000];
  memset(big, 'y', sizeof big - 1);
  big[sizeof big - 1] = 0;
  cr_assert_eq(ak_buf_printf(&b, "[%s]", big), 0);
  cr_expect_eq(b.len, 9 + 4999 + 2);
  cr_expect_eq(b.p[9], '[');
  cr_expect_eq(b.p[9 + 4999], 'y');
  cr_expect_eq(b.p[b.len - 1], ']');
  cr_expect_eq(b.p[b.len], 0);
  cr_assert_eq(ak_buf_append(&b, "\0z", 2), 0, "bytes, NULs included");
  size_t len = 0;
  char *p = ak_buf_take(&b, &len);
  cr_assert_not_null(p);
  cr_expect_eq(len, 9 + 4999 + 2 + 2);
  cr_expect_eq(p[len - 2], 0);
  cr_expect_eq(p[len - 1], 'z');
  cr_expect_eq(p[len], 0);
  free(p);
  cr_expect(b.p == NULL && b.len == 0 && b.cap == 0, "take leaves an empty buffer");
  cr_assert_eq(ak_buf_puts(&b, "again"), 0);
  cr_expect_str_eq(b.p, "again");
  ak_buf_free(&b);
  cr_expect(b.p == NULL && b.len == 0);
}

Test(buf, reserve_then_write_in_place) {
  ak_buf_t b = AK_BUF_INIT;
  cr_assert_eq(ak_buf_reserve(&b, 3), 0);
  cr_assert_geq(b.cap - b.len, 4, "three bytes and the NUL");
  memcpy(b.p, "abc", 3);
  b.len = 3;
  for (size_t want = 1; want < 100000; want = want * 3 + 1) {
    cr_assert_eq(ak_buf_reserve(&b, want), 0);
    cr_assert_gt(b.cap - b.len, want, "room for %zu more and the NUL", want);
  }
  size_t cap = b.cap;
  ak_buf_reset(&b);
  cr_expect_eq(b.len, 0);
  cr_expect_eq(b.cap, cap, "reset keeps the block");
  cr_expect_str_eq(b.p, "");
  ak_buf_free(&b);
}

Test(buf, a_failure_is_sticky_and_take_refuses) {
  ak_buf_t b = AK_BUF_INIT;
  cr_assert_eq(ak_buf_puts(&b, "part one"), 0);
  cr_expect_eq(ak_buf_reserve(&b, SIZE_MAX - 8), -1, "an impossible size fails like an allocation");
  cr_expect(b.failed);
  cr_expect_eq(ak_buf_puts(&b, " two"), -1, "later appends are dropped");
  cr_expect_eq(ak_buf_printf(&b, "%d", 3), -1);
  cr_expect_str_eq(b.p, "part one", "what was there stays readable");
  cr_expect_null(ak_buf_take(&b, NULL), "never a text with a piece missing");
  cr_expect_not(b.failed, "take clears the failure");
  cr_expect_eq(ak_buf_puts(&b, "fresh"), 0);
  cr_expect_str_eq(b.p, "fresh");
  cr_expect_eq(ak_buf_reserve(&b, SIZE_MAX), -1);
  ak_buf_reset(&b);
  cr_expect_not(b.failed, "reset clears it too");
  cr_expect_eq(ak_buf_puts(&b, "ok"), 0);
  ak_buf_free(&b);
}

Test(buf, grow_typed_arrays) {
  uint64_t *v = NULL;
  size_t n = 0, cap = 0;
  for (uint64_t i = 0; i < 1000; i++) {
    cr_assert_eq(ak_buf_grow(&v, &cap, n + 1, sizeof *v), 0);
    cr_assert_geq(cap, n + 1);
    v[n++] = i * i;
  }
  for (uint64_t i = 0; i < 1000; i++) cr_assert_eq(v[i], i * i, "kept through every growth");
  cr_expect_eq(cap, 1024, "doubled from 16");
  size_t before = cap;
  cr_expect_eq(ak_buf_grow(&v, &cap, 10, sizeof *v), 0, "enough room: nothing to do");
  cr_expect_eq(cap, before);
  uint64_t *old = v;
  cr_expect_eq(ak_buf_grow(&v, &cap, SIZE_MAX / 4, sizeof *v), -1, "too big");
  cr_expect(v == old && cap == before, "untouched on failure");
  cr_expect_eq(ak_buf_grow(&v, &cap, 5000, sizeof *v), 0, "straight to what is needed");
  cr_expect_eq(cap, 8192);
  cr_expect_eq(v[999], 999 * 999);
  free(v);
}

/* ---------------------------------------------------------------- header names ---- */

/* RFC 9110 5.6.2: token = 1*tchar; tchar = "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" /
 * "-" / "." / "^" / "_" / "`" / "|" / "~" / DIGIT / ALPHA. Every byte value is checked
 * against that list written out here. */
Test(header, tchar_is_exactly_the_rfc_set) {
  const char *sym = "!#$%&'*+-.^_`|~";
  for (int c = 0; c < 256; c++) {
    bool want = (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                (c && strchr(sym, c) != NULL);
    cr_assert_eq(ak_header_tchar((unsigned char)c), want, "byte 0x%02x", c);
    char one = (char)c;
    cr_assert_eq(ak_header_name_ok(&one, 1), want, "a name of byte 0x%02x alone", c);
  }
}

Test(header, names) {
  cr_expect(ak_header_name_ok("X-Hub-Signature-256", 19));
  cr_expect(ak_header_name_ok("webhook-id", 10));
  cr_expect(ak_header_name_ok("!#$%&'*+-.^_`|~09azAZ", 21), "every symbol tchar");
  cr_expect_not(ak_header_name_ok("", 0), "empty");
  cr_expect_not(ak_header_name_ok("anything", 0), "a length of 0 is empty whatever follows");
  cr_expect(ak_header_name_ok("X-Ok trailing", 4), "only len bytes are read");
  /* separators (RFC 9110 5.6.2 delimiters), whitespace, controls */
  const char *bad[] = {"X Bad", "X\tBad", "X:Bad", "X(Bad)", "X,Bad", "X/Bad", "X;Bad", "X<Bad>", "X=Bad",
                       "X?Bad", "X@Bad", "X[Bad]", "X\\Bad", "X{Bad}", "X\"Bad\"", "X-\x7f", "X-\x01", "X\r\n"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    cr_expect_not(ak_header_name_ok(bad[i], strlen(bad[i])), "%s", bad[i]);
  /* non-ASCII: UTF-8 and Latin-1 letters are not ALPHA */
  cr_expect_not(ak_header_name_ok("caf\xc3\xa9", 5));
  cr_expect_not(ak_header_name_ok("X-\xe9", 3));
  cr_expect_not(ak_header_name_ok("X-\xff", 3));
  cr_expect_not(ak_header_name_ok("X\0Y", 3), "a NUL inside the length");
}

/* ------------------------------------------------------- debug assertions ---- */
/* compiled into test builds only, like the assertions themselves */
#ifdef AK_TEST_HOOKS
#include <pthread.h>
#include <signal.h>
#include "core/assert.h"

static pthread_mutex_t held_mu = PTHREAD_MUTEX_INITIALIZER;

Test(assert, held_passes_while_the_mutex_is_ours) {
  pthread_mutex_lock(&held_mu);
  AK_ASSERT_HELD(&held_mu);
  pthread_mutex_unlock(&held_mu);
  AK_ASSERT(1 + 1 == 2);
}

Test(assert, held_aborts_when_the_mutex_is_free, .signal = SIGABRT) { AK_ASSERT_HELD(&held_mu); }

static void *lock_and_hold(void *arg) {
  (void)arg;
  pthread_mutex_lock(&held_mu);
  return NULL; /* exits holding it: the test thread must not pass for its owner */
}

Test(assert, held_aborts_when_another_thread_holds_it, .signal = SIGABRT) {
  pthread_t t;
  pthread_create(&t, NULL, lock_and_hold, NULL);
  pthread_join(t, NULL);
  AK_ASSERT_HELD(&held_mu);
}

static ak_owner_t owner;

static void *as_owner(void *arg) {
  (void)arg;
  AK_OWNER_CLAIM(&owner);
  return NULL;
}

Test(assert, owner_runs_its_own_code) {
  AK_ASSERT_OWNER(&owner); /* not claimed yet: boot code may run it */
  AK_OWNER_CLAIM(&owner);
  AK_ASSERT_OWNER(&owner);
  AK_OWNER_RELEASE(&owner);
}

Test(assert, another_thread_is_not_the_owner, .signal = SIGABRT) {
  pthread_t t;
  pthread_create(&t, NULL, as_owner, NULL);
  pthread_join(t, NULL);
  AK_ASSERT_OWNER(&owner);
}

Test(assert, a_false_condition_aborts, .signal = SIGABRT) { AK_ASSERT(1 + 1 == 3); }
#endif
