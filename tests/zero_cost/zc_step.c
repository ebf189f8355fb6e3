/* zc_step.c - the step function the zero-cost test measures. Compiled several times:
     -DZC_SITE=0   no hook site at all: the reference
     -DZC_SITE=1   one HK_FIRE site
     -DZC_SITE=2   one HK_ACTIVE-guarded site whose argument is costly (computed only when armed)
     -DZC_SITE=3   no site: a hand-written loop over zc_tbl's function pointers (the limit a dispatch
                   is compared with)
   sites 1 and 2 with and without -DHK_DISABLE. Sites are bare statements, the form hooks.h documents
   (so a -DHK_DISABLE site that warns "statement with no effect" fails the build under -Werror).
   Compiled with -ffunction-sections so that zc_step sits alone
   in its section and its disassembly can be compared byte for byte. */
#include "zc.h"

#if defined(__GNUC__) || defined(__clang__)
#  define ZC_NOINLINE __attribute__((noinline))
#  define ZC_WORK() __asm__ volatile("" ::: "memory") /* the step's real work: memory may change */
#else
#  define ZC_NOINLINE
#  define ZC_WORK() ((void)0)
#endif

#ifndef ZC_SITE
#  define ZC_SITE 1
#endif

ZC_NOINLINE void zc_step(hk_ctx *ctx, long n) {
  long i;
  for (i = 0; i < n; i++) {
    ctx->global_step = i;
    ZC_WORK();
#if ZC_SITE == 1
    HK_FIRE(zc_reg, HK_ON_TRAIN_BATCH_END, ctx);         /* the documented form: a bare statement */
#elif ZC_SITE == 2
    if (HK_ACTIVE(zc_reg, HK_ON_AFTER_BACKWARD)) {
      ctx->loss = zc_expensive(ctx);
      HK_FIRE(zc_reg, HK_ON_AFTER_BACKWARD, ctx);
    }
#elif ZC_SITE == 3
    {
      int k;
      for (k = 0; k < zc_tbl.n; k++) (void)zc_tbl.fn[k](ctx, zc_tbl.user[k]);
    }
#endif
  }
}
