/* examples/own_loop.c - hooks.h vendored into a hand-written training loop (train.h's loop unused).

   The loop is yours, llm.c style: a flat parameter buffer, your forward/backward, your AdamW. hooks.h
   adds the callback points and what a loop needs to act on them:
     - HK_FIRE_FLOW + hk_flow: hooks skip a step, stop training or fail; the loop tests one bit mask
     - hk_is_finite: a NaN guard that still fires when this file is built with -Ofast (make does)
     - hk_grad_norm: the gradient norm, computed only if a hook asks, once per step however many ask
     - on_exception: why the run aborted (ctx.abort_reason), then teardown
     - a standard callback from train.h, early_stopping, made from a spec string: it stops the run once
       the loss is below the goal (or stalls). What it needs from the loop: on_train_epoch_end fired
       with ctx.stage = HK_STAGE_FIT and the metric set (here every step is an epoch), and HK_STOP obeyed
   Run:  build/own_loop        trains until a hook stops it at the target loss
         build/own_loop nan    a NaN appears at step 20: the guard fails the run, on_exception reports */
#include <math.h>
#include <stdio.h>
#include <string.h>
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"                           /* hooks.h, and the standard callbacks */

enum { D = 16, N = 256 };                    /* features, samples (one full batch) */
static float params[D + 1], grads[D + 1], m[D + 1], v[D + 1], X[N][D], Y[N];

static float forward_backward(void) {        /* logistic regression: mean log-loss and its gradient */
  float loss = 0;
  memset(grads, 0, sizeof grads);
  for (int i = 0; i < N; i++) {
    float z = params[D];
    for (int j = 0; j < D; j++) z += params[j] * X[i][j];
    float p = 1.0f / (1.0f + expf(-z)), err = (p - Y[i]) / N;
    loss -= (Y[i] * logf(p + 1e-7f) + (1 - Y[i]) * logf(1 - p + 1e-7f)) / N;
    for (int j = 0; j < D; j++) grads[j] += err * X[i][j];
    grads[D] += err;
  }
  return loss;
}

static void adamw(float lr, int t) {         /* PyTorch's formula, weight decay 0 */
  for (int j = 0; j <= D; j++) {
    m[j] = 0.9f * m[j] + 0.1f * grads[j];
    v[j] = 0.999f * v[j] + 0.001f * grads[j] * grads[j];
    params[j] -= lr * (m[j] / (1 - powf(0.9f, (float)t))) / (sqrtf(v[j] / (1 - powf(0.999f, (float)t))) + 1e-8f);
  }
}

/* ---- hooks: each one is what a user would register ---- */
static hk_signal report(hk_ctx *ctx, void *u) {              /* every 25th step (a filter) */
  (void)u;
  printf("step %3lld  loss %.4f  grad norm %.4f\n", (long long)ctx->global_step, ctx->loss, hk_grad_norm(ctx));
  return HK_CONTINUE;
}
static hk_signal nan_guard(hk_ctx *ctx, void *u) {           /* bit test: survives -Ofast */
  (void)u;
  return hk_is_finite(ctx->loss) ? HK_CONTINUE : hk_fail(ctx, "loss is %f at step %lld", ctx->loss, (long long)ctx->global_step);
}
static hk_signal spike_guard(hk_ctx *ctx, void *u) {         /* skip a step whose gradient explodes */
  (void)u;
  return hk_grad_norm(ctx) > 10.0 ? HK_SKIP_STEP : HK_CONTINUE;
}
static hk_signal on_exception(hk_ctx *ctx, void *u) {
  (void)u;
  printf("aborting: %s\n", ctx->abort_reason);
  return HK_CONTINUE;
}

int main(int argc, char **argv) {
  int inject_nan = argc > 1 && !strcmp(argv[1], "nan");
  double goal = 0.12;
  unsigned seed = 1;
  for (int i = 0; i < N; i++) {              /* two Gaussian-ish blobs */
    Y[i] = (float)(i % 2);
    for (int j = 0; j < D; j++) {
      seed = seed * 1664525u + 1013904223u;
      X[i][j] = (float)(seed >> 9) / 8388608.0f - 1.0f + (Y[i] ? 0.4f : -0.4f) * (j < 4);
    }
  }

  hk_registry *reg = hk_create(NULL);
  hk_tensor pv = { "w", params, D + 1, 0 }, gv = { "w", grads, D + 1, 0 };
  hk_ctx ctx = { .stage = HK_STAGE_FIT, .params = &pv, .grads = &gv, .n_tensors = 1, .world_size = 1 };
  hk_on(reg, HK_ON_TRAIN_BATCH_END, report, NULL, &(hk_opts){ .name = "report", .filter = { .counter = HK_COUNT_STEP, .every = 25 } }, NULL);
  hk_on(reg, HK_ON_BEFORE_BACKWARD, nan_guard, NULL, &(hk_opts){ .name = "nan_guard" }, NULL);
  hk_on(reg, HK_ON_BEFORE_OPTIMIZER_STEP, spike_guard, NULL, &(hk_opts){ .name = "spike_guard" }, NULL);
  tr_add_factories(reg);                     /* train.h's standard callbacks, for spec strings */
  if (hk_spec_apply(reg, "early_stopping(monitor=loss, stopping_threshold=0.12, patience=50)")) {
    printf("%s\n", hk_last_error(reg));
    return 1;
  }
  hk_on(reg, HK_ON_EXCEPTION, on_exception, NULL, &(hk_opts){ .name = "on_exception" }, NULL);

  hk_flow flow = { 0 };
  HK_FIRE_FLOW(reg, HK_ON_TRAIN_START, &ctx, &flow);
  for (int step = 0; step < 1000 && !HK_FLOW_HAS(&flow, HK_FLOW_STOP); step++) {
    ctx.batch_idx = step;
    ctx.lr = 0.05;
    HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_START, &ctx, &flow);
    if (!HK_FLOW_HAS(&flow, HK_FLOW_SKIP_BATCH)) {
      ctx.loss = forward_backward();
      if (inject_nan && step == 20) ctx.loss = NAN;
      hk_grads_changed(&ctx);                /* a new gradient: hk_grad_norm recomputes on request */
      HK_FIRE_FLOW(reg, HK_ON_BEFORE_BACKWARD, &ctx, &flow);
    }
    HK_FIRE_FLOW(reg, HK_ON_BEFORE_OPTIMIZER_STEP, &ctx, &flow);
    if (!HK_FLOW_HAS(&flow, HK_FLOW_SKIP_STEP)) {
      adamw((float)ctx.lr, (int)ctx.global_step + 1);
      ctx.global_step++;                     /* steps taken; moves before on_after_optimizer_step */
      HK_FIRE_FLOW(reg, HK_ON_AFTER_OPTIMIZER_STEP, &ctx, &flow);
    }
    if (!HK_FLOW_HAS(&flow, HK_FLOW_FAIL)) HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_END, &ctx, &flow);
    hk_flow_clear(&flow, HK_FLOW_BATCH_SIGNALS);
    if (!HK_FLOW_HAS(&flow, HK_FLOW_FAIL)) {  /* one batch is one epoch here: early stopping checks now */
      ctx.epoch = step;
      hk_metric_set(&ctx, "loss", ctx.loss);
      HK_FIRE_FLOW(reg, HK_ON_TRAIN_EPOCH_END, &ctx, &flow);
    }
  }
  int failed = HK_FLOW_HAS(&flow, HK_FLOW_FAIL);
  if (failed) {                              /* the loop reports the failure, once */
    ctx.abort_reason = ctx.hook_failure;
    HK_FIRE(reg, HK_ON_EXCEPTION, &ctx);
  } else {
    HK_FIRE(reg, HK_ON_TRAIN_END, &ctx);
    printf("stopped after %lld steps at loss %.4f\n", (long long)ctx.global_step, ctx.loss);
    printf("early_stopping: %s\n", tr_early_stopping_get(reg, hk_find(reg, "early_stopping{monitor=loss,mode=min}"))->stopping_reason_message);
  }
  HK_FIRE(reg, HK_TEARDOWN, &ctx);
  hk_ctx_free(&ctx);
  hk_destroy(reg);
  /* the example checks its own claim: the goal is reached, or the injected NaN is caught */
  return inject_nan ? !(failed && ctx.global_step == 20) : !(ctx.loss < goal);
}
