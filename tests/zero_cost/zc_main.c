/* zc_main.c - driver of the zero-cost test:  zc_<variant> N [armed [CALLS [K]]]
   Runs zc_step(ctx, N) once. The registry always holds one hook on an event the step never fires
   (so it is not trivially empty). With "armed", K hooks (default 1) are also registered on each event
   the step fires, and the hand-written loop's table holds K pointers; with CALLS (a number, not "-")
   the driver checks that the hooks ran that many times (proving the site was compiled in). */
#define HOOKS_IMPLEMENTATION
#include "zc.h"
#include <stdlib.h>
#include <string.h>

hk_registry *zc_reg;
zc_table zc_tbl;
static long zc_calls;

static hk_signal zc_hook(hk_ctx *ctx, void *user) {
  (void)ctx; (void)user;
  zc_calls++;
  return HK_CONTINUE;
}

double zc_expensive(const hk_ctx *ctx) { return (double)ctx->global_step * 0.5; }

int main(int argc, char **argv) {
  long n = argc > 1 ? strtol(argv[1], NULL, 10) : 0;
  int armed = argc > 2 && strcmp(argv[2], "armed") == 0;
  int k, hooks = argc > 4 ? atoi(argv[4]) : 1;
  hk_ctx ctx;
  int rc = 0;
  memset(&ctx, 0, sizeof ctx);
  if (hooks < 1 || hooks > ZC_MAX_FNS) { printf("zc: K must be 1..%d\n", ZC_MAX_FNS); return 2; }
  zc_reg = hk_create(NULL);
  if (!zc_reg) return 2;
  if (hk_on(zc_reg, HK_ON_VALIDATION_END, zc_hook, NULL, NULL, NULL) != HK_OK) return 2;
  for (k = 0; armed && k < hooks; k++) {
    if (hk_on(zc_reg, HK_ON_TRAIN_BATCH_END, zc_hook, NULL, NULL, NULL) != HK_OK ||
        hk_on(zc_reg, HK_ON_AFTER_BACKWARD, zc_hook, NULL, NULL, NULL) != HK_OK) return 2;
    zc_tbl.fn[k] = zc_hook;
    zc_tbl.user[k] = NULL;
    zc_tbl.n = k + 1;
  }
  ctx.stage = HK_STAGE_FIT;
  zc_step(&ctx, n);
  if (argc > 3 && strcmp(argv[3], "-") != 0) { /* expected hook calls, checked in armed runs */
    long want = strtol(argv[3], NULL, 10);
    if (zc_calls != want) { printf("zc: hooks ran %ld times, expected %ld\n", zc_calls, want); rc = 1; }
  }
  hk_ctx_free(&ctx);
  hk_destroy(zc_reg);
  return rc;
}
