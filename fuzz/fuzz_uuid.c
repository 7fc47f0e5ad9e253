/* libFuzzer harness for ak_uuid_parse / ak_uuid_format (core/ids.c): ids arrive in admin
 * URLs as untrusted text. Checks parse against an independent reading of the canonical
 * form, and that a parsed id formats back to the same text up to hex case. */
#include <ctype.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "core/ids.h"

#define CHECK(cond)                                                                                 \
  do {                                                                                              \
    if (!(cond)) {                                                                                  \
      fprintf(stderr, "fuzz_uuid: invariant failed at line %d: %s\n", __LINE__, #cond);             \
      abort();                                                                                      \
    }                                                                                               \
  } while (0)

/* 8-4-4-4-12 hex digits, any case, nothing else. */
static bool oracle(const char *s, uint8_t out[16]) {
  if (strlen(s) != 36) return false;
  int b = 0, half = 0;
  for (int i = 0; i < 36; i++) {
    bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash) {
      if (s[i] != '-') return false;
      continue;
    }
    if (!isxdigit((unsigned char)s[i])) return false;
    int v = isdigit((unsigned char)s[i]) ? s[i] - '0' : tolower((unsigned char)s[i]) - 'a' + 10;
    if (half == 0) out[b] = (uint8_t)(v << 4);
    else out[b++] |= (uint8_t)v;
    half ^= 1;
  }
  return b == 16;
}

static void check_format(const uint8_t id[16]) {
  char txt[AK_UUID_STR_LEN];
  memset(txt, 'X', sizeof txt);
  ak_uuid_format(id, txt);
  CHECK(txt[36] == '\0' && strlen(txt) == 36);
  for (int i = 0; i < 36; i++) CHECK(txt[i] == '-' || isdigit((unsigned char)txt[i]) || (txt[i] >= 'a' && txt[i] <= 'f'));
  uint8_t back[16];
  CHECK(ak_uuid_parse(txt, back));
  CHECK(memcmp(back, id, 16) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1); /* exact size + NUL: ASan sees a read past the terminator */
  CHECK(s != NULL);
  memcpy(s, data, size);
  s[size] = '\0';

  uint8_t id[16], want[16];
  memset(id, 0xA5, sizeof id);
  bool ok = ak_uuid_parse(s, id);
  CHECK(!ak_uuid_parse(NULL, want));
  bool expect = oracle(s, want);
  CHECK(ok == expect);
  if (ok) {
    CHECK(memcmp(id, want, 16) == 0);
    char txt[AK_UUID_STR_LEN];
    ak_uuid_format(id, txt);
    CHECK(strcasecmp(txt, s) == 0);
    uint8_t again[16];
    CHECK(ak_uuid_parse(txt, again));
    CHECK(memcmp(again, id, 16) == 0);
  }

  /* any 16 bytes format to a canonical id that parses back */
  uint8_t raw[16] = {0};
  memcpy(raw, data, size < 16 ? size : 16);
  check_format(raw);
  CHECK(ak_uuid7_ms(raw) == (int64_t)((uint64_t)raw[0] << 40 | (uint64_t)raw[1] << 32 | (uint64_t)raw[2] << 24 |
                                      (uint64_t)raw[3] << 16 | (uint64_t)raw[4] << 8 | raw[5]));

  free(s);
  return 0;
}
