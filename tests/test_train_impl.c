/* tests/test_train_impl.c - the implementation TU for tests/test_train_user.c (see there).
   -DTEST_TRAIN_HOOKS_ONLY: only hooks.h's implementation (the user TU has a static train.h). */
#define HOOKS_IMPLEMENTATION
#ifndef TEST_TRAIN_HOOKS_ONLY
#  define TRAIN_IMPLEMENTATION
#endif
#include "train.h"
