/* A table lookup per byte: the ingest edge checks every name of every request. Neither
 * isalnum() (locale-dependent) nor a strchr() of the symbols per byte. */
#include "core/header.h"

static const unsigned char tchar[256] = {
  ['0' ... '9'] = 1, ['A' ... 'Z'] = 1, ['a' ... 'z'] = 1,
  ['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1, ['*'] = 1, ['+'] = 1,
  ['-'] = 1, ['.'] = 1, ['^'] = 1, ['_'] = 1, ['`'] = 1, ['|'] = 1, ['~'] = 1,
};

bool ak_header_tchar(unsigned char c) { return tchar[c]; }

bool ak_header_name_ok(const char *s, size_t len) {
  if (len == 0) return false;
  for (size_t i = 0; i < len; i++)
    if (!tchar[(unsigned char)s[i]]) return false;
  return true;
}
