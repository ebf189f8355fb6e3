/* tests/ofast_loop.c - hooks.h's own-loop helpers do not change a host loop's numerics at -Ofast.

   A hand-written trainer (a linear model with a softplus loss, a vectorisable AdamW update, all
   inlined) is built twice at -Ofast: OFAST_SITES=0 has no hooks.h code at all, OFAST_SITES=1 has the
   sites, an hk_flow and the decisions around the update (tests/own_loop.mk). Both print the bits of
   every parameter; the outputs must be identical:
     ofast_loop plain   sites compiled in, nothing registered
     ofast_loop hooks   sites with hooks that read (loss, hk_grad_norm, a finite check) but change nothing
     ofast_loop nan     a NaN injected into the gradients at step 7: the guard (hk_is_finitef, which
                        -Ofast cannot fold away) must stop the run through HK_FAIL */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#if OFAST_SITES
#  define HOOKS_IMPLEMENTATION
#  include "hooks.h"
#endif

#define N 4096     /* parameters */
#define B 64       /* samples per batch */
#define STEPS 60

static float P[N], G[N], M[N], V[N], X[B][N], Y[B];

static uint32_t lcg(uint32_t *s) { *s = *s * 1664525u + 1013904223u; return *s >> 8; }

/* Forward and backward of a softplus regression loss: dot products (reductions) and exp/log. */
static inline float forward_backward(void) {
  float loss = 0;
  int b, i;
  for (i = 0; i < N; i++) G[i] = 0;
  for (b = 0; b < B; b++) {
    float z = 0, e, d;
    for (i = 0; i < N; i++) z += P[i] * X[b][i];
    e = z - Y[b];
    loss += logf(1.0f + expf(e)) / B;
    d = 1.0f / (1.0f + expf(-e)) / B;
    for (i = 0; i < N; i++) G[i] += d * X[b][i];
  }
  return loss;
}

/* PyTorch's AdamW, in float, element by element: the loop gcc vectorises. */
static inline void adamw(float lr, int t) {
  const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f;
  float bc1 = 1.0f - powf(b1, (float)t), bc2 = 1.0f - powf(b2, (float)t);
  int i;
  for (i = 0; i < N; i++) {
    P[i] -= lr * wd * P[i];
    M[i] = b1 * M[i] + (1.0f - b1) * G[i];
    V[i] = b2 * V[i] + (1.0f - b2) * G[i] * G[i];
    P[i] -= lr * (M[i] / bc1) / (sqrtf(V[i] / bc2) + eps);
  }
}

#if OFAST_SITES
static hk_signal read_everything(hk_ctx *ctx, void *user) {
  double *sink = (double *)user;
  *sink += ctx->loss + hk_grad_norm(ctx);
  return HK_CONTINUE;
}
static hk_signal nan_guard(hk_ctx *ctx, void *user) {
  int k;
  size_t i;
  (void)user;
  for (k = 0; k < ctx->n_tensors; k++)
    for (i = 0; i < ctx->grads[k].count; i++)
      if (!hk_is_finitef(ctx->grads[k].data[i]))
        return hk_fail(ctx, "gradient %s[%zu] is not finite at step %lld", ctx->grads[k].name, i, (long long)ctx->global_step);
  return HK_CONTINUE;
}
#endif

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "plain";
  uint32_t seed = 12345;
  int b, i, step;
  float loss = 0;
#if OFAST_SITES
  hk_registry *reg = hk_create(NULL);
  hk_tensor pv = { "w", P, N, 0 }, gv = { "w", G, N, 0 };
  hk_ctx ctx;
  hk_flow flow = { 0 };
  double sink = 0;
  memset(&ctx, 0, sizeof ctx);
  ctx.stage = HK_STAGE_FIT;
  ctx.params = &pv;
  ctx.grads = &gv;
  ctx.n_tensors = 1;
  if (!reg) return 2;
  if (!strcmp(mode, "hooks") || !strcmp(mode, "nan")) {
    hk_on(reg, HK_ON_AFTER_BACKWARD, nan_guard, NULL, &(hk_opts){ .name = "nan_guard" }, NULL);
    hk_on(reg, HK_ON_BEFORE_OPTIMIZER_STEP, read_everything, &sink, &(hk_opts){ .name = "reader" }, NULL);
    hk_on(reg, HK_ON_TRAIN_BATCH_END, read_everything, &sink, &(hk_opts){ .name = "reader2" }, NULL);
  }
#endif
  for (b = 0; b < B; b++) {
    for (i = 0; i < N; i++) X[b][i] = (float)(lcg(&seed) % 2001) / 1000.0f - 1.0f;
    Y[b] = (float)(lcg(&seed) % 2001) / 1000.0f - 1.0f;
  }
  for (i = 0; i < N; i++) P[i] = (float)(lcg(&seed) % 2001) / 100000.0f - 0.01f;

  for (step = 1; step <= STEPS; step++) {
#if OFAST_SITES
    ctx.global_step = step - 1;
    HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_START, &ctx, &flow);
    if (!HK_FLOW_HAS(&flow, HK_FLOW_SKIP_BATCH)) {
      loss = forward_backward();
      ctx.loss = loss;
      if (!strcmp(mode, "nan") && step == 7) G[123] = NAN;
      hk_grads_changed(&ctx);
      HK_FIRE_FLOW(reg, HK_ON_AFTER_BACKWARD, &ctx, &flow);
    }
    HK_FIRE_FLOW(reg, HK_ON_BEFORE_OPTIMIZER_STEP, &ctx, &flow);
    if (!HK_FLOW_HAS(&flow, HK_FLOW_SKIP_STEP)) {
      adamw(1e-3f, step);
      ctx.global_step = step;
    }
    HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_END, &ctx, &flow);
    hk_flow_clear(&flow, HK_FLOW_BATCH_SIGNALS);
    if (HK_FLOW_HAS(&flow, HK_FLOW_STOP)) break;
#else
    loss = forward_backward();
    adamw(1e-3f, step);
#endif
  }
#if OFAST_SITES
  if (!strcmp(mode, "nan")) {
    int ok = HK_FLOW_HAS(&flow, HK_FLOW_FAIL) && step == 7 && ctx.hook_failure &&
             strstr(ctx.hook_failure, "gradient w[123] is not finite at step 6");
    printf("nan guard: %s (%s)\n", ok ? "fired at step 7" : "DID NOT FIRE", ctx.hook_failure ? ctx.hook_failure : "no failure");
    hk_ctx_free(&ctx);
    hk_destroy(reg);
    return ok ? 0 : 1;
  }
  hk_ctx_free(&ctx);
  hk_destroy(reg);
  if (!strcmp(mode, "hooks") && !(sink > 0)) return 3; /* the hooks really ran */
#else
  (void)mode;
#endif
  {
    uint32_t lb;
    memcpy(&lb, &loss, 4);
    printf("loss %08x\n", lb);
  }
  for (i = 0; i < N; i++) {
    uint32_t u;
    memcpy(&u, &P[i], 4);
    printf("%08x\n", u);
  }
  return 0;
}
