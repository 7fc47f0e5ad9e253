/* libFuzzer harness for the Redis URL parser (net/redis.c ak_redis_url_parse): it reads
 * fleet.store.url from the config and the environment, and its errors and the redacted
 * form go to logs and to GET /v1/fleet. Properties:
 *  1. it never reads past the string (an exact-size heap copy, so ASan sees an overread);
 *  2. a parse either fails with a reason, or gives a host, a port in 1..65535 and a db >= 0;
 *  3. the redacted form is host, port and db alone, and a failed parse's reason is the
 *     same whatever the password's bytes: neither can carry a secret. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "net/redis.h"

#define CHECK(cond)                                                                          \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      fprintf(stderr, "fuzz_redis_url: invariant failed at line %d: %s\n", __LINE__, #cond); \
      abort();                                                                               \
    }                                                                                        \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  if (!s) return 0;
  memcpy(s, data, size);
  s[size] = 0;
  ak_redis_url_t u;
  char why[256] = "", red[600] = "";
  memset(&u, 0, sizeof u);
  int rc = ak_redis_url_parse(s, &u, why, sizeof why);
  if (rc == 0) {
    CHECK(u.host[0] != 0);
    CHECK(u.port >= 1 && u.port <= 65535);
    CHECK(u.db >= 0);
    CHECK(memchr(u.host, 0, sizeof u.host) && memchr(u.user, 0, sizeof u.user) &&
          memchr(u.password, 0, sizeof u.password));
    ak_redis_url_redacted(&u, red, sizeof red);
    /* the redacted form is made of host, port and db alone */
    char want[600];
    snprintf(want, sizeof want, strchr(u.host, ':') ? "redis://[%s]:%d/%d" : "redis://%s:%d/%d", u.host, u.port, u.db);
    CHECK(strcmp(red, want) == 0);
  } else {
    CHECK(rc == -1 && why[0] != 0);
    /* the reason does not depend on the password: with its bytes replaced, a parse that
     * still fails gives the very same reason (so none of it can be echoed) */
    const char *sch = strstr(s, "://"), *at = strrchr(s, '@');
    const char *colon = sch ? memchr(sch + 3, ':', at && at > sch ? (size_t)(at - sch - 3) : 0) : NULL;
    bool plain = colon && at > colon + 1; /* a password of unreserved bytes only: one that
                                             cannot change how the rest is split or decoded */
    for (const char *p = colon ? colon + 1 : NULL; plain && p < at; p++)
      plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
              *p == '.' || *p == '_' || *p == '~';
    if (plain) {
      char *t = strdup(s);
      if (t) {
        memset(t + (colon + 1 - s), 'Z', (size_t)(at - colon - 1));
        char why2[256] = "";
        ak_redis_url_t u2;
        if (ak_redis_url_parse(t, &u2, why2, sizeof why2) != 0) CHECK(strcmp(why, why2) == 0);
        free(t);
      }
    }
  }
  free(s);
  return 0;
}
