/* bench_body.c - the hook body and the globals, in their own translation unit so that nothing
   about them is visible where the sites are compiled. */
#include "bench.h"

hk_registry *bench_reg;
bench_table bench_tbl;

#ifdef __VERSION__
#  if defined(__clang__)
const char *bench_cc = __VERSION__;
#  else
const char *bench_cc = "gcc " __VERSION__;
#  endif
#else
const char *bench_cc = "unknown compiler";
#endif

#if defined(__GNUC__) || defined(__clang__)
__attribute__((noinline))
#endif
hk_signal bench_hook(hk_ctx *ctx, void *user) {
  (void)ctx; (void)user;
  return HK_CONTINUE;
}
