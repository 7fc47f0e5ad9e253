/* The one rule for an HTTP header (field) name: an RFC 9110 token (section 5.1: field-name
 * = token; 5.6.2: token = 1*tchar). Used wherever a name is accepted, whether it comes
 * from a request, an operator's config or a sink's options, so what one part accepts no
 * other part refuses. Owns nothing; never allocates, logs or looks at values. */
#ifndef AK_CORE_HEADER_H
#define AK_CORE_HEADER_H

#include <stdbool.h>
#include <stddef.h>

/* tchar = "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" / "-" / "." / "^" / "_" / "`" / "|"
 *       / "~" / DIGIT / ALPHA (ASCII only). */
bool ak_header_tchar(unsigned char c);
/* len bytes (NULs included, never read past len), at least one, every one a tchar. */
bool ak_header_name_ok(const char *s, size_t len);

#endif
