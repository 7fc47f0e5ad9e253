/* Unit tests: the archive catalogue row codec (archive/catalogue.h): a row round-trips
 * field for field, and every truncation or damaged field is refused, never half-read. */
#include <criterion/criterion.h>
#include <string.h>
#include "archive/catalogue.h"
#include "store/keys.h"

static ak_cat_row_t sample(void) {
  ak_cat_row_t r;
  memset(&r, 0, sizeof r);
  r.first_seq = 1000;
  r.last_seq = 1999;
  r.count = 977;
  r.seg_bytes = 16777300;
  r.idx_bytes = 43000;
  r.min_received_ms = 1764633600000LL;
  r.max_received_ms = 1764633630000LL;
  memset(r.min_id, 0x11, 16);
  memset(r.max_id, 0xee, 16);
  r.archived_at_ms = 1764633640000LL;
  strcpy(r.seg_key, "pfx/archive/v1/dt=2025-12-02/node-0a0b0c0d0e0f/seg-00000000000000001000-00000000000000001999.seg");
  strcpy(r.idx_key, "pfx/archive/v1/dt=2025-12-02/node-0a0b0c0d0e0f/seg-00000000000000001000-00000000000000001999.idx");
  return r;
}

Test(catalogue, row_round_trip) {
  ak_cat_row_t r = sample(), back;
  uint8_t k[AK_CAT_KEY_LEN], v[4096];
  ak_cat_key(k, r.first_seq);
  cr_assert_eq(k[0], AK_ARC_SEGMENT);
  size_t n = ak_cat_encode(v, sizeof v, &r);
  cr_assert_gt(n, 0);
  memset(&back, 0x5a, sizeof back);
  cr_assert_eq(ak_cat_decode(k, sizeof k, v, n, &back), 0);
  cr_expect_eq(back.first_seq, r.first_seq);
  cr_expect_eq(back.last_seq, r.last_seq);
  cr_expect_eq(back.count, r.count);
  cr_expect_eq(back.seg_bytes, r.seg_bytes);
  cr_expect_eq(back.idx_bytes, r.idx_bytes);
  cr_expect_eq(back.min_received_ms, r.min_received_ms);
  cr_expect_eq(back.max_received_ms, r.max_received_ms);
  cr_expect_eq(back.archived_at_ms, r.archived_at_ms);
  cr_expect_eq(memcmp(back.min_id, r.min_id, 16), 0);
  cr_expect_eq(memcmp(back.max_id, r.max_id, 16), 0);
  cr_expect_str_eq(back.seg_key, r.seg_key);
  cr_expect_str_eq(back.idx_key, r.idx_key);
  /* a buffer one byte short is refused, not overrun */
  cr_expect_eq(ak_cat_encode(v, n - 1, &r), 0);
}

Test(catalogue, damaged_rows_are_refused) {
  ak_cat_row_t r = sample(), back;
  uint8_t k[AK_CAT_KEY_LEN], v[4096];
  ak_cat_key(k, r.first_seq);
  size_t n = ak_cat_encode(v, sizeof v, &r);
  for (size_t i = 0; i < n; i++) cr_expect_neq(ak_cat_decode(k, sizeof k, v, i, &back), 0, "prefix of %zu bytes", i);
  uint8_t longer[4097];
  memcpy(longer, v, n);
  longer[n] = 0;
  cr_expect_neq(ak_cat_decode(k, sizeof k, longer, n + 1, &back), 0, "trailing byte");
  uint8_t bad[4096];
  memcpy(bad, v, n);
  bad[0] = 2; /* unknown version */
  cr_expect_neq(ak_cat_decode(k, sizeof k, bad, n, &back), 0);
  cr_expect_neq(ak_cat_decode(k, sizeof k - 1, v, n, &back), 0, "short key");
  uint8_t wk[AK_CAT_KEY_LEN];
  memcpy(wk, k, sizeof wk);
  wk[0] = 'X';
  cr_expect_neq(ak_cat_decode(wk, sizeof wk, v, n, &back), 0, "another tag");
  /* last_seq below first_seq */
  ak_cat_key(wk, 5000);
  cr_expect_neq(ak_cat_decode(wk, sizeof wk, v, n, &back), 0);
  /* no segment key */
  ak_cat_row_t e = sample();
  e.seg_key[0] = 0;
  size_t en = ak_cat_encode(bad, sizeof bad, &e);
  cr_expect_neq(ak_cat_decode(k, sizeof k, bad, en, &back), 0, "empty key");
  /* count 0 */
  e = sample();
  e.count = 0;
  en = ak_cat_encode(bad, sizeof bad, &e);
  cr_expect_neq(ak_cat_decode(k, sizeof k, bad, en, &back), 0, "count 0");
}
