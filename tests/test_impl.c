/* tests/test_impl.c - hooks.h's and train.h's implementation as the cmocka suites have it (tests/test.h), with
   fsync skipped (TEST_NO_FSYNC), compiled once plain and once with the sanitizers for the suites that link it
   instead of compiling their own (the Makefile's cmocka_suite, 5th argument: 9 s a suite plain, 11 s with the
   sanitizers). */
#define TEST_NO_FSYNC
#include "test.h"
