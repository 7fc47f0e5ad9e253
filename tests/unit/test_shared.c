/* Unit tests: the shared small structures of core/ — the intrusive list, the tenant map,
 * the growable buffer and the header-name rule — each against a plain reference model. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/list.h"

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
