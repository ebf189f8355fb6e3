/* hook_tree.c - where each hook fires in a training run, printed as a tree.

   A hand-written fit loop (a linear model learning y = 2x + 1) with a hook site at every point
   where Lightning calls a hook, in Lightning's order:
     setup, configure_model, on_fit_start,
     sanity check (a short validation run), on_train_start,
     per epoch: on_train_epoch_start,
                per batch: on_train_batch_start, on_before_zero_grad, on_before_backward,
                           on_after_backward, on_before_optimizer_step, on_gradient_clip,
                           on_after_optimizer_step, on_train_batch_end,
                validation (start, epoch start, batches, epoch end, end), on_train_epoch_end,
     on_train_end, on_fit_end, teardown.
   Two registrations show the order within an event: a callback (tier HK_TIER_CALLBACK) and the
   model's own hooks (tier HK_TIER_MODEL); callbacks run first. hk_trace(reg, HK_TRACE_TREE, stdout)
   prints every dispatched event, indented by nesting, with the hooks it ran.

   Run:  make hook-tree      (the same tree: HOOKS_TRACE=tree with any program using hooks.h) */
#define HOOKS_IMPLEMENTATION
#include "hooks.h"
#include <math.h>

enum { EPOCHS = 2, BATCHES = 2, VAL_BATCHES = 1, SANITY_BATCHES = 1 };

/* ---- the model: y = w*x + b, trained on 8 points per batch ---------------------------------- */
typedef struct model { float w, b, gw, gb; } model;

static float forward(const model *m, int batch, float shift) { /* the loss of one batch */
  float loss = 0;
  int i;
  for (i = 0; i < 8; i++) {
    float x = shift + 0.1f * (float)(batch * 8 + i), err = m->w * x + m->b - (2 * x + 1);
    loss += err * err / 8;
  }
  return loss;
}

static void backward(model *m, int batch) {          /* add its gradient to gw, gb */
  int i;
  for (i = 0; i < 8; i++) {
    float x = 0.1f * (float)(batch * 8 + i), err = m->w * x + m->b - (2 * x + 1);
    m->gw += err * x / 4;
    m->gb += err / 4;
  }
}

/* ---- the hooks ------------------------------------------------------------------------------ */
/* A callback: one struct, several events. */
static hk_signal cb_train_start(hk_ctx *ctx, void *user) { (void)ctx; (void)user; return HK_CONTINUE; }
static hk_signal cb_epoch_end(hk_ctx *ctx, void *user) {
  double v;
  (void)user;
  if (hk_metric_get(ctx, "val/loss", &v)) hk_metric_set(ctx, "best/val_loss", v);
  return HK_CONTINUE;
}
static hk_signal cb_after_backward(hk_ctx *ctx, void *user) { (void)ctx; (void)user; return HK_CONTINUE; }

/* The model's own hooks: registered one function at a time with tier HK_TIER_MODEL. */
static hk_signal model_train_start(hk_ctx *ctx, void *user) { (void)ctx; (void)user; return HK_CONTINUE; }
static hk_signal model_epoch_end(hk_ctx *ctx, void *user) { (void)ctx; (void)user; return HK_CONTINUE; }

/* ---- the loop ------------------------------------------------------------------------------- */
static void validation(hk_registry *reg, hk_ctx *ctx, const model *m, int batches) {
  float total = 0;
  int i;
  HK_FIRE(reg, HK_ON_VALIDATION_START, ctx);
  HK_FIRE(reg, HK_ON_VALIDATION_EPOCH_START, ctx);
  for (i = 0; i < batches; i++) {
    ctx->batch_idx = i;
    HK_FIRE(reg, HK_ON_VALIDATION_BATCH_START, ctx);
    ctx->loss = forward(m, i, 0.05f);               /* validation points lie between the training ones */
    total += (float)ctx->loss;
    HK_FIRE(reg, HK_ON_VALIDATION_BATCH_END, ctx);
  }
  hk_metric_set(ctx, "val/loss", total / (float)batches);
  HK_FIRE(reg, HK_ON_VALIDATION_EPOCH_END, ctx);
  HK_FIRE(reg, HK_ON_VALIDATION_END, ctx);
}

static void fit(hk_registry *reg, hk_ctx *ctx, model *m) {
  const float lr = 0.1f;
  int epoch, batch;
  ctx->stage = HK_STAGE_FIT;
  HK_FIRE(reg, HK_SETUP, ctx);
  HK_FIRE(reg, HK_CONFIGURE_MODEL, ctx);
  HK_FIRE(reg, HK_ON_FIT_START, ctx);

  ctx->stage = HK_STAGE_SANITY_CHECK;           /* catch bugs in validation before training */
  HK_FIRE(reg, HK_ON_SANITY_CHECK_START, ctx);
  validation(reg, ctx, m, SANITY_BATCHES);
  HK_FIRE(reg, HK_ON_SANITY_CHECK_END, ctx);
  ctx->stage = HK_STAGE_FIT;

  HK_FIRE(reg, HK_ON_TRAIN_START, ctx);
  for (epoch = 0; epoch < EPOCHS; epoch++) {
    ctx->epoch = epoch;
    HK_FIRE(reg, HK_ON_TRAIN_EPOCH_START, ctx);
    for (batch = 0; batch < BATCHES; batch++) {
      float norm;
      ctx->batch_idx = batch;
      HK_FIRE(reg, HK_ON_TRAIN_BATCH_START, ctx);
      ctx->loss = forward(m, batch, 0);            /* training_step */
      HK_FIRE(reg, HK_ON_BEFORE_ZERO_GRAD, ctx);
      m->gw = m->gb = 0;
      HK_FIRE(reg, HK_ON_BEFORE_BACKWARD, ctx);
      backward(m, batch);
      HK_FIRE(reg, HK_ON_AFTER_BACKWARD, ctx);
      HK_FIRE(reg, HK_ON_BEFORE_OPTIMIZER_STEP, ctx);
      norm = sqrtf(m->gw * m->gw + m->gb * m->gb); /* clip the gradient norm at 1 */
      hk_grad_norm_set(ctx, norm);                 /* hooks read it with hk_grad_norm(ctx) */
      if (norm > 1) { m->gw /= norm; m->gb /= norm; }
      HK_FIRE(reg, HK_ON_GRADIENT_CLIP, ctx);
      m->w -= lr * m->gw;
      m->b -= lr * m->gb;
      ctx->global_step++;                          /* steps taken: moves before on_after_optimizer_step */
      HK_FIRE(reg, HK_ON_AFTER_OPTIMIZER_STEP, ctx);
      HK_FIRE(reg, HK_ON_TRAIN_BATCH_END, ctx);
    }
    validation(reg, ctx, m, VAL_BATCHES);          /* validation runs before on_train_epoch_end */
    HK_FIRE(reg, HK_ON_TRAIN_EPOCH_END, ctx);
  }
  HK_FIRE(reg, HK_ON_TRAIN_END, ctx);
  HK_FIRE(reg, HK_ON_FIT_END, ctx);
  HK_FIRE(reg, HK_TEARDOWN, ctx);
}

int main(void) {
  model m = { 0, 0, 0, 0 };
  hk_ctx ctx = { .world_size = 1 };
  hk_registry *reg = hk_create(NULL);
  hk_callback cb = { .name = "my_callback", .on_train_start = cb_train_start,
                     .on_after_backward = cb_after_backward, .on_train_epoch_end = cb_epoch_end };
  if (!reg) return 1;
  /* Registered in this order on purpose: the model's hooks first, the callback second. The tiers
     still run the callback before the model at every shared event. */
  hk_on(reg, HK_ON_TRAIN_START, model_train_start, NULL, &(hk_opts){ .name = "model.on_train_start", .tier = HK_TIER_MODEL }, NULL);
  hk_on(reg, HK_ON_TRAIN_EPOCH_END, model_epoch_end, NULL, &(hk_opts){ .name = "model.on_train_epoch_end", .tier = HK_TIER_MODEL }, NULL);
  hk_add_callback(reg, &cb, NULL, NULL);

  hk_trace(reg, HK_TRACE_TREE, stdout);            /* print every event as it is dispatched */
  fit(reg, &ctx, &m);
  hk_trace(reg, HK_TRACE_OFF, NULL);
  printf("after %d steps: w = %.3f  b = %.3f  (target 2, 1)\n", (int)ctx.global_step, m.w, m.b);

  hk_ctx_free(&ctx);
  hk_destroy(reg);
  return 0;
}
