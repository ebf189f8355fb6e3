/* bench_site.c - the measured step loop, compiled once per variant:
     -DBENCH_STEP=name -DBENCH_KIND=k   (k: 0 no site, 1 HK_FIRE, 2 direct call, 3 fn-pointer loop)
   and kind 1 also with -DHK_DISABLE. The loop body is a trainer-like store of the step followed by
   an empty asm with a memory clobber (the step's real work: afterwards any memory may have changed,
   so the registry is re-read every iteration, as it would be in a real training loop). */
#include "bench.h"

#if defined(__GNUC__) || defined(__clang__)
#  define BENCH_NOINLINE __attribute__((noinline))
#  define BENCH_WORK() __asm__ volatile("" ::: "memory")
#else
#  define BENCH_NOINLINE
#  define BENCH_WORK() ((void)0)
#endif

BENCH_NOINLINE void BENCH_STEP(hk_ctx *ctx, long n) {
  long i;
  for (i = 0; i < n; i++) {
    ctx->global_step = i;
    BENCH_WORK();
#if BENCH_KIND == 1
    (void)HK_FIRE(bench_reg, BENCH_EVENT, ctx);
#elif BENCH_KIND == 2
    (void)bench_hook(ctx, NULL);
#elif BENCH_KIND == 3
    {
      int k;
      for (k = 0; k < bench_tbl.n; k++) (void)bench_tbl.fn[k](ctx, bench_tbl.user[k]);
    }
#endif
  }
}
