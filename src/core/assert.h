/* Debug assertions: the rules a comment would state (which lock is held, which thread a
 * field belongs to, what must be true here) as checks. Compiled into the test and
 * sanitizer builds (AK_TEST_HOOKS) and out of release builds, where every macro here is
 * empty and an ak_owner_t has no fields. A failed check prints the rule and aborts.
 *
 *   AK_ASSERT(cond)           what must be true
 *   AK_ASSERT_HELD(&mu)       this thread holds the pthread mutex mu (glibc records the
 *                             owner of a default mutex; Debian is the platform)
 *   AK_OWNER_CLAIM(&o)        the calling thread becomes the owner of what o guards
 *   AK_OWNER_RELEASE(&o)      no thread owns it (the owner is about to exit)
 *   AK_ASSERT_OWNER(&o)       this is that thread ("dispatch thread only") */
#ifndef AK_CORE_ASSERT_H
#define AK_CORE_ASSERT_H

#ifdef AK_TEST_HOOKS
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((noreturn, cold)) static inline void ak_assert_fail(const char *what, const char *file, int line) {
  fprintf(stderr, "ankusa: assertion failed at %s:%d: %s\n", file, line, what);
  abort();
}

typedef struct ak_owner {
  pid_t tid; /* 0: not claimed yet */
} ak_owner_t;

#define AK_ASSERT(cond) ((cond) ? (void)0 : ak_assert_fail(#cond, __FILE__, __LINE__))
#define AK_ASSERT_HELD(mu) \
  ((mu)->__data.__owner == gettid() ? (void)0 : ak_assert_fail("this thread holds " #mu, __FILE__, __LINE__))
#define AK_OWNER_CLAIM(o) ((o)->tid = gettid())
#define AK_OWNER_RELEASE(o) ((o)->tid = 0)
#define AK_ASSERT_OWNER(o) \
  ((o)->tid == 0 || (o)->tid == gettid() ? (void)0 : ak_assert_fail("the owner of " #o " runs this", __FILE__, __LINE__))
#else
typedef struct ak_owner {
  char unused[0];
} ak_owner_t;
#define AK_ASSERT(cond) ((void)0)
#define AK_ASSERT_HELD(mu) ((void)0)
#define AK_OWNER_CLAIM(o) ((void)0)
#define AK_OWNER_RELEASE(o) ((void)0)
#define AK_ASSERT_OWNER(o) ((void)0)
#endif

#endif
