/* minimal.c - hooks.h in one page: fit y = 2x + 1 with SGD, and watch the loop with two hooks.
   Build and run:  make examples && build/minimal */
#define HOOKS_IMPLEMENTATION            /* exactly one .c file of a program says this */
#include "hooks.h"

/* A hook is a function: it reads the context the loop filled in, and returns what to do next. */
static hk_signal print_loss(hk_ctx *ctx, void *user) {
  (void)user;
  if (ctx->epoch % 25 == 0) printf("epoch %3d  loss %.6f\n", (int)ctx->epoch, ctx->loss);
  return HK_CONTINUE;
}
/* A callback bundles several hooks (one field per event) with their shared state in .user. */
static hk_signal say_hello(hk_ctx *ctx, void *user) { (void)ctx; printf("fitting %s\n", (const char *)user); return HK_CONTINUE; }
static hk_signal stop_when_good(hk_ctx *ctx, void *user) { (void)user; return ctx->loss < 1e-6 ? HK_STOP : HK_CONTINUE; }
static hk_signal say_bye(hk_ctx *ctx, void *user) { (void)user; printf("stopped after epoch %d\n", (int)ctx->epoch); return HK_CONTINUE; }

int main(void) {
  float w = 0, b = 0, lr = 0.1f;                               /* the model: y = w*x + b */
  hk_registry *reg = hk_create(NULL);                          /* where hooks are registered */
  hk_callback cb = { .name = "early_stop", .user = "y = 2x + 1", .on_train_start = say_hello,
                     .on_train_epoch_end = stop_when_good, .on_train_end = say_bye };
  hk_add_callback(reg, &cb, NULL, NULL);                       /* callback #1: a struct of hooks */
  hk_on(reg, HK_ON_TRAIN_EPOCH_END, print_loss, NULL, NULL, NULL); /* callback #2: one function */

  hk_ctx ctx = { .stage = HK_STAGE_FIT };                      /* what every hook gets to see */
  HK_FIRE(reg, HK_ON_TRAIN_START, &ctx);                       /* site 1: costs ~nothing if unused */
  for (ctx.epoch = 0; ctx.epoch < 1000; ctx.epoch++) {
    float gw = 0, gb = 0, loss = 0;
    for (int i = 0; i < 8; i++) {                              /* one batch: x = 0, 0.25, ..., 1.75 */
      float x = 0.25f * (float)i, err = w * x + b - (2 * x + 1);
      loss += err * err / 8; gw += err * x / 4; gb += err / 4; /* mean squared error and its gradient */
    }
    w -= lr * gw; b -= lr * gb;                                /* the SGD step */
    ctx.loss = loss;
    if (HK_FIRE(reg, HK_ON_TRAIN_EPOCH_END, &ctx) >= HK_STOP) break; /* site 2: hooks may stop us */
  }
  HK_FIRE(reg, HK_ON_TRAIN_END, &ctx);                         /* site 3 */
  printf("w = %.4f  b = %.4f\n", w, b);
  hk_ctx_free(&ctx);
  hk_destroy(reg);
  return 0;
}
