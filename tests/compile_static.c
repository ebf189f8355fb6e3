/* tests/compile_static.c - HOOKS_STATIC: every function is static, a private copy per translation
   unit. Compiled twice and linked together: once as is (it has main), once with
   -DCOMPILE_STATIC_SECOND. Both copies define the implementation, so the second one must not emit
   stb_ds's implementation again (HOOKS_NO_STB_DS_IMPL). Each TU uses only part of the API: unused
   static functions must not warn under -Wall -Werror. */
#define HOOKS_STATIC
#define HOOKS_IMPLEMENTATION
#ifdef COMPILE_STATIC_SECOND
#  define HOOKS_NO_STB_DS_IMPL
#endif
#include <stdio.h>
#include <string.h>
#include "hooks.h"

static hk_signal stop_now(hk_ctx *ctx, void *user) { (void)ctx; (void)user; return HK_STOP; }

#ifdef COMPILE_STATIC_SECOND
int second_tu_fires(void);
int second_tu_fires(void) {
  hk_registry *reg = hk_create(NULL);
  hk_ctx ctx;
  hk_signal s;
  if (!reg) return -1;
  memset(&ctx, 0, sizeof ctx);
  if (hk_on(reg, HK_ON_FIT_END, stop_now, NULL, NULL, NULL) != HK_OK) return -2;
  s = HK_FIRE(reg, HK_ON_FIT_END, &ctx);
  hk_ctx_free(&ctx);
  hk_destroy(reg);
  return (int)s;
}
#else
int second_tu_fires(void);
int main(void) {
  hk_registry *reg = hk_create(NULL);
  hk_ctx ctx;
  int n;
  if (!reg) return 1;
  memset(&ctx, 0, sizeof ctx);
  if (hk_on(reg, HK_SETUP, stop_now, NULL, NULL, NULL) != HK_OK) return 2;
  if (HK_FIRE(reg, HK_SETUP, &ctx) != HK_STOP) return 3;
  n = hk_count(reg, HK_SETUP);
  hk_ctx_free(&ctx);
  hk_destroy(reg);
  if (n != 1) return 4;
  if (second_tu_fires() != HK_STOP) return 5;
  printf("compile_static.c (HOOKS_STATIC, two private copies): ok\n");
  return 0;
}
#endif
