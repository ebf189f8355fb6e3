/* tests/compile_impl.c - the one translation unit with the implementation (compile matrix).
   Built as C (gcc, clang; -std=c99 and -std=c11) and as C++ (-x c++ -std=c++11), always with
   -Wall -Wextra -pedantic -Werror; linked with compile_user.c or compile_user.cc. */
#define HOOKS_IMPLEMENTATION
#include "hooks.h"
#include "hooks.h" /* a second include is harmless */
