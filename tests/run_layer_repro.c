/* tests/run_layer_repro.c DIR EPOCHS [RESUME] - a minimal epoch loop of one's own (a linear model y = w*x + b, its own
   SGD and model bytes) through the run layer, for tests/run_layer_repro.sh: reproducers of what a user integrating
   train.h (README and docs/ only) found. NO_BEFORE_BACKWARD=1 leaves the on_before_backward site out. */
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NB 8
static float P[2], Gr[2];
static int save_model(void *u, FILE *f) { (void)u; return fwrite(P, sizeof P, 1, f) == 1 ? 0 : -1; }
static int load_model(void *u, FILE *f) { (void)u; return fread(P, sizeof P, 1, f) == 1 ? 0 : -1; }
static double batch(int64_t b, int grad) {          /* 4 points of y = 2x + 1 per batch; mean squared error */
  double l = 0;
  for (int i = 0; i < 4; i++) {
    float x = (float)(b * 4 + i) / 32 - 0.5f, e = P[0] * x + P[1] - (2 * x + 1);
    l += (double)e * e / 4;
    if (grad) { Gr[0] += e * x / 2; Gr[1] += e / 2; }
  }
  return l;
}
static void validate(hk_registry *reg, hk_ctx *ctx, hk_flow *flow) {
  double l = 0, tl = ctx->loss; int64_t tb = ctx->batch_idx;
  HK_FIRE_FLOW(reg, HK_ON_VALIDATION_START, ctx, flow);
  HK_FIRE_FLOW(reg, HK_ON_VALIDATION_EPOCH_START, ctx, flow);
  for (int64_t b = 0; b < 2; b++) {
    ctx->batch_idx = b;
    HK_FIRE_FLOW(reg, HK_ON_VALIDATION_BATCH_START, ctx, flow);
    l += ctx->loss = batch(b, 0);
    HK_FIRE_FLOW(reg, HK_ON_VALIDATION_BATCH_END, ctx, flow);
  }
  hk_metric_set(ctx, "val/loss", ctx->loss = l / 2);
  HK_FIRE_FLOW(reg, HK_ON_VALIDATION_EPOCH_END, ctx, flow);
  tr_run_log(reg, ctx, "val");
  HK_FIRE_FLOW(reg, HK_ON_VALIDATION_END, ctx, flow);
  ctx->loss = tl; ctx->batch_idx = tb;
}
int main(int argc, char **argv) {
  if (argc < 3) { fprintf(stderr, "usage: run_layer_repro DIR EPOCHS [RESUME]\n"); return 2; }
  int64_t epochs = atoi(argv[2]);
  char spec[1024];
  snprintf(spec, sizeof spec, "nan_guard; early_stopping(monitor=val/loss, patience=1, min_delta=10); "
           "model_checkpoint(dirpath=%s/ckpt, monitor=val/loss, save_last=true); csv(save_dir=%s/runs)", argv[1], argv[1]);
  hk_registry *reg = hk_create(NULL);
  hk_tensor pv = { .name = "p", .data = P, .count = 2 }, gv = { .name = "p", .data = Gr, .count = 2 };
  hk_ctx ctx = { .stage = HK_STAGE_FIT, .params = &pv, .grads = &gv, .n_tensors = 1 };
  hk_flow flow = {0};
  if (tr_run_setup(reg, &(tr_run_desc){ .max_epochs = epochs, .optimizer = "SGD", .log_every_n_steps = 4, .val_batches = 2,
                                       .save_model = save_model, .load_model = load_model })
      || hk_spec_apply(reg, spec)) { fprintf(stderr, "%s\n", hk_last_error(reg)); return 2; }
  unsigned next = tr_run_start(reg, &ctx, argc > 3 ? argv[3] : NULL) ? TR_RUN_STOP : 0;
  for (; !(next & TR_RUN_STOP) && ctx.epoch < epochs; ctx.epoch++) {
    for (int64_t b = tr_run_epoch_start(reg, &ctx, &flow, NB); b < NB && !(next & TR_RUN_STOP); b++) {
      ctx.batch_idx = b;
      float lr = (float)tr_run_lr(reg, &ctx, 0.3);
      HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_START, &ctx, &flow);
      memset(Gr, 0, sizeof Gr);
      ctx.loss = batch(b, 1);
      if (!getenv("NO_BEFORE_BACKWARD")) HK_FIRE_FLOW(reg, HK_ON_BEFORE_BACKWARD, &ctx, &flow);
      hk_grads_changed(&ctx);
      HK_FIRE_FLOW(reg, HK_ON_AFTER_BACKWARD, &ctx, &flow);
      HK_FIRE_FLOW(reg, HK_ON_BEFORE_OPTIMIZER_STEP, &ctx, &flow);
      if (!HK_FLOW_HAS(&flow, HK_FLOW_SKIP_STEP)) { P[0] -= lr * Gr[0]; P[1] -= lr * Gr[1]; ctx.global_step++; }
      ctx.samples_seen += 4;
      HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_END, &ctx, &flow);
      next = tr_run_batch_end(reg, &ctx, &flow);
      hk_flow_clear(&flow, HK_FLOW_BATCH_SIGNALS);
    }
    if (next & TR_RUN_STOP) break;
    validate(reg, &ctx, &flow);
    HK_FIRE_FLOW(reg, HK_ON_TRAIN_EPOCH_END, &ctx, &flow);
    next |= tr_run_epoch_end(reg, &ctx, &flow);
    hk_flow_clear(&flow, HK_FLOW_EPOCH_SIGNALS);
  }
  tr_err e = tr_run_finish(reg, &ctx, TR_OK);
  printf("ended at epoch %lld, step %lld: %s\n", (long long)ctx.epoch, (long long)ctx.global_step, e ? tr_run_error(reg) : "ok");
  hk_ctx_free(&ctx);
  hk_destroy(reg);
  return e ? 1 : 0;
}
