/* tests/test.h - what the cmocka suites share, once: cmocka (extern "C" in the C++ builds), the implementation
   (train.h's and hooks.h's; hooks.h's alone with TEST_HOOKS_ONLY), the C library they use, and three small
   helpers. A suite defines first what must come before the implementation (a feature macro, a wrapped call:
   test_async.c's fsync, TEST_NO_FSYNC), then includes this. */
#ifndef TESTS_TEST_H
#define TESTS_TEST_H
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
#include <cmocka.h>
#ifdef __cplusplus
}
#endif

#ifndef TEST_IMPL_ELSEWHERE
#define HOOKS_IMPLEMENTATION
#endif
#ifdef TEST_HOOKS_ONLY
#include "hooks.h"
#elif defined(TEST_IMPL_ELSEWHERE)
/* -DTEST_IMPL_ELSEWHERE (the Makefile's cmocka_suite, 5th argument): the implementation is compiled once, in
   tests/test_impl.c, and linked; the suite compiles only its own code, so it includes the headers it uses
   (the implementation's are not there). That object skips fsync. */
#ifndef TEST_NO_FSYNC
#error "tests/test_impl.c's implementation skips fsync: a suite that links it defines TEST_NO_FSYNC, else it compiles its own"
#endif
#include "train.h"
#else
/* TEST_NO_FSYNC, defined by a suite before this: train.h's fsync calls only check the descriptor, no flush
   to the disk (each waits for the disk: test_continue makes 2,700, 10 to 15 s of waiting for 0.6 s of
   CPU). Only a machine's crash loses what a process wrote without fsync, and no suite makes one: a killed
   process's files are read back the same. The suites on the writer and full disks (test_ckpt, test_log,
   test_async with a wrapper of its own) and the rest keep the real fsync. Tests only: train.h has no such
   switch. */
#ifdef TEST_NO_FSYNC
#include <fcntl.h>
#include <unistd.h>
static inline int test_no_fsync(int fd) { return fcntl(fd, F_GETFD) == -1 ? -1 : 0; }
#define fsync test_no_fsync
#endif
#define TRAIN_IMPLEMENTATION
#include "train.h"
#ifdef TEST_NO_FSYNC
#undef fsync
#endif
#endif

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* A file's bytes, NUL-terminated, and their count in *len (len may be NULL); NULL and 0 when it cannot be opened.
   The caller frees it. */
static inline char *slurp_len(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  char *p;
  long n;
  if (len) *len = 0;
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  fseek(f, 0, SEEK_SET);
  p = (char *)malloc((size_t)n + 1);
  if (fread(p, 1, (size_t)n, f) != (size_t)n) n = 0;
  p[n] = 0;
  fclose(f);
  if (len) *len = (size_t)n;
  return p;
}
static inline char *slurp(const char *path) { return slurp_len(path, NULL); }
/* What a tmpfile() holds now (it stays open, at its end); the caller frees it. */
static inline char *file_text(FILE *f) {
  long n;
  char *p;
  fflush(f);
  n = ftell(f);
  p = (char *)malloc((size_t)n + 1);
  rewind(f);
  if (fread(p, 1, (size_t)n, f) != (size_t)n) n = 0;
  p[n] = 0;
  fseek(f, 0, SEEK_END);
  return p;
}
/* How many times needle stands in text, not overlapping. */
static inline int count_of(const char *text, const char *needle) {
  int n = 0;
  const char *p = text;
  while ((p = strstr(p, needle)) != NULL) { n++; p += strlen(needle); }
  return n;
}
#endif
