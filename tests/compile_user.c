/* tests/compile_user.c - a C translation unit WITHOUT the implementation (compile matrix).
   It uses the public API the way a trainer does and returns nonzero when something is off.
   With -DHK_DISABLE every HK_FIRE site is compiled out: hooks never run. With -DHK_NO_SIGNALS (in both
   TUs) the stop-signal helper says it has no signals. */
#include <stdio.h>
#include <string.h>
#include "hooks.h"

static int calls;
static hk_signal on_batch_end(hk_ctx *ctx, void *user) {
  (void)user;
  calls++;
  hk_metric_set(ctx, "seen", (double)ctx->global_step);
  return ctx->global_step == 3 ? HK_STOP : HK_CONTINUE;
}

int main(void) {
  hk_registry *reg = hk_create(NULL);
  hk_ctx ctx;
  hk_opts opts;
  hk_handle h = 0;
  hk_signal s = HK_CONTINUE;
  int64_t step;
  int expect_calls;
  if (!reg) return 1;
  memset(&ctx, 0, sizeof ctx);
  memset(&opts, 0, sizeof opts);
  opts.name = "batch_end";
  if (hk_on(reg, HK_ON_TRAIN_BATCH_END, on_batch_end, NULL, &opts, &h) != HK_OK || h <= 0) return 2;
  for (step = 0; step < 10 && s < HK_STOP; step++) {
    ctx.global_step = step;
    if (HK_ACTIVE(reg, HK_ON_TRAIN_BATCH_START)) return 3; /* nothing registered there */
    s = HK_FIRE(reg, HK_ON_TRAIN_BATCH_END, &ctx);
  }
#ifdef HK_DISABLE
  expect_calls = 0;
  if (s != HK_CONTINUE || step != 10) return 4;
#else
  expect_calls = 4;
  if (s != HK_STOP || step != 4) return 4;
#endif
  if (calls != expect_calls) return 5;
  if (strcmp(hk_event_name(NULL, HK_ON_TRAIN_BATCH_END), "on_train_batch_end") != 0) return 6;
  /* a bare statement and a cast: both must compile warning-free, enabled and with HK_DISABLE */
  HK_FIRE(reg, HK_ON_TRAIN_END, &ctx);
  (void)HK_FIRE(reg, HK_ON_FIT_END, &ctx);
  if (HK_ACTIVE(reg, HK_ON_TRAIN_END)) HK_FIRE(reg, HK_ON_TRAIN_END, &ctx);
  { /* the stop-signal helper links and answers (no signal comes here) */
    hk_flow flow = {0};
#ifdef HK_NO_SIGNALS
    if (hk_stop_signals_install(0) != -1) return 7;
#else
    if (hk_stop_signals_install(HK_STOP_COUNT_ONLY) != 0) return 7;
#endif
    if (hk_stop_poll(&flow) != 0 || flow.signals != 0 || hk_stop_requested() != 0) return 8;
    hk_stop_signals_restore();
  }
  hk_ctx_free(&ctx);
  hk_destroy(reg);
  printf("compile_user.c (C%s): ok\n",
#ifdef HK_DISABLE
         ", HK_DISABLE"
#elif defined(HK_NO_SIGNALS)
         ", HK_NO_SIGNALS"
#else
         ""
#endif
  );
  return 0;
}
