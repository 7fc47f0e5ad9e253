/* libFuzzer harness for the claim check's formats (sinks/claimpack.c), which the claim
 * gateway applies to untrusted input: the tenant and claim id of a request path, the refs
 * consumers hand around, and the bytes a claim store returns for a pack's head, an entry's
 * local header and its tail. Properties:
 *  1. no parser reads past its input (exact-size heap copies, so ASan sees an overread);
 *  2. an id or ref that parses formats back to the very same text (one canonical form);
 *  3. a located claim lies inside the pack's 32-bit range, and a found manifest lies before
 *     the end of the pack it was read from. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sinks/claimpack.h"

#define CHECK(cond)                                                                      \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      fprintf(stderr, "fuzz_claim: invariant failed at line %d: %s\n", __LINE__, #cond); \
      abort();                                                                           \
    }                                                                                    \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *p = malloc(size ? size : 1);
  if (!p) return 0;
  memcpy(p, data, size);
  /* an id */
  ak_claim_id_t id;
  if (ak_claim_id_parse((const char *)p, size, &id) == 0) {
    char back[AK_CLAIM_ID_LEN + 1];
    ak_claim_id_format(&id, back);
    CHECK(size == AK_CLAIM_ID_LEN && memcmp(back, p, size) == 0);
  }
  /* a ref */
  char tenant[65];
  if (ak_claim_ref_parse((const char *)p, size, tenant, &id) == 0) {
    char back[AK_CLAIM_REF_MAX];
    CHECK(ak_claim_ref_format(tenant, strlen(tenant), &id, back, sizeof back) == 0);
    CHECK(strlen(back) == size && memcmp(back, p, size) == 0);
    char key[AK_CLAIM_KEY_MAX];
    CHECK(ak_claim_key(tenant, &id, key, sizeof key) == 0);
  }
  /* a tenant */
  (void)ak_claim_tenant_ok((const char *)p, size);
  /* pack bytes: the head at every position the input could hold, an entry header, a tail */
  if (size >= 2) {
    uint16_t pos = (uint16_t)(p[0] | p[1] << 8);
    uint32_t off = 0, len = 0;
    if (ak_claim_locate(p, size, pos, &off, &len) == 0) CHECK((uint64_t)off + len <= UINT32_MAX);
    ak_claim_id_t any = {{0}};
    memcpy(any.b, p, size < 16 ? size : 16);
    (void)ak_claim_entry_check(p, size, &any, len);
    uint64_t moff = 0, pack_size = size + (size_t)p[0] * 4096;
    uint32_t mlen = 0;
    if (ak_claim_manifest_find(p, size, pack_size, &moff, &mlen) == 0) CHECK(moff + mlen <= pack_size);
  }
  free(p);
  return 0;
}
