/* tests/test_cuda_cpu.c - the parts of the CUDA feature that run without a GPU (make test-cuda-cpu).

   - The clipping helpers the kernels run (trc_clip_scale, trc_clamp) clip as train.h's CPU path does:
     a CPU trainer and a loop of tr_*_elem steps with those helpers take the same steps, bit for bit.
   - tr_grad_histogram on the CPU (the API the GPU path answers too) and its bad inputs.
   - A model with on_device is refused (TR_ERR_DEVICE) by an implementation built without TRAIN_CUDA.
   - hooks.h's ctx->grad_norm_source is asked once per change of the gradients.
   Plain C99, built with gcc like every other test. */
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "kernels/train_cuda.cuh"
#include <stdio.h>
#include <string.h>

static int failures;
#define CHECK(c) do { if (!(c)) { fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c); failures++; } } while (0)

enum { N = 1000, STEPS = 50 };

/* A model whose gradient is a fixed function of the step and of the parameters: enough to drive
   every branch of the optimizers (signs, magnitudes over many decades, zeros). */
typedef struct toy { float p[N], g[N]; int step; } toy;

static float toy_grad(int step, int i, float p) {
  float base = (float)((i * 7919 + step * 104729) % 2001 - 1000) / 1000.0f;
  return base * (float)(1 << (i % 12)) * 1e-3f + 0.01f * p;
}
static int toy_forward(void *user, void *batch, int training, double *loss) { (void)user; (void)batch; (void)training; *loss = 1.0; return 0; }
static int toy_backward(void *user, void *batch) {
  toy *m = (toy *)user;
  int i;
  (void)batch;
  for (i = 0; i < N; i++) m->g[i] += toy_grad(m->step, i, m->p[i]);
  m->step++;
  return 0;
}
static int64_t toy_count(void *user) { (void)user; return STEPS; }
static int toy_get(void *user, int64_t i, void **batch) { (void)user; (void)i; *batch = NULL; return 0; }

static void toy_init(toy *m) {
  int i;
  memset(m, 0, sizeof *m);
  for (i = 0; i < N; i++) m->p[i] = (float)((i * 31) % 200 - 100) / 100.0f;
}

/* Train STEPS steps with train.h's CPU path, and the same steps with the shared element functions;
   the parameters must agree bit for bit. */
static void optimizer_matches(tr_optim optim, double clip, tr_clip algo) {
  toy cpu, ref;
  float m[N] = { 0 }, v[N] = { 0 };
  tr_trainer t;
  tr_data data = { 0 };
  int s, i;
  toy_init(&cpu);
  toy_init(&ref);
  data.count = toy_count;
  data.get = toy_get;
  CHECK(tr_init(&t, &(tr_desc){ .model = { .params = cpu.p, .grads = cpu.g, .n_params = N, .user = &cpu,
                                           .forward = toy_forward, .backward = toy_backward }, .optim = optim }) == TR_OK);
  CHECK(tr_fit(&t, &(tr_config){ .train = &data, .max_steps = STEPS, .num_sanity_val_steps = -1,
                                 .gradient_clip_val = clip, .gradient_clip_algorithm = algo, .no_sigint = 1 }) == TR_OK);
  optim = t.optim; /* with the defaults filled in */
  for (s = 0; s < STEPS; s++) {
    double sumsq = 0;
    float k;
    for (i = 0; i < N; i++) ref.g[i] = toy_grad(s, i, ref.p[i]);
    sumsq = hk_sumsq(ref.g, N); /* hk_grad_norm's order */
    if (clip > 0 && algo == TR_CLIP_VALUE)
      for (i = 0; i < N; i++) ref.g[i] = trc_clamp(ref.g[i], -(float)clip, (float)clip);
    k = clip > 0 && algo == TR_CLIP_NORM ? trc_clip_scale(sqrt(sumsq), clip) : 1.0f;
    for (i = 0; i < N; i++) {
      float g = k != 1.0f ? ref.g[i] * k : ref.g[i];
      if (optim.kind == TR_OPTIM_ADAMW) {
        tr_adamw_coef c = tr_adamw_coefs(&optim, optim.lr, s + 1);
        tr_adamw_elem(&ref.p[i], g, &m[i], &v[i], c, c.lerp_small);
      } else
        tr_sgd_elem(&ref.p[i], g, &m[i], tr_sgd_coefs(&optim, optim.lr, s == 0));
    }
  }
  CHECK(memcmp(cpu.p, ref.p, sizeof cpu.p) == 0);
  if (memcmp(cpu.p, ref.p, sizeof cpu.p) != 0)
    for (i = 0; i < N; i++)
      if (cpu.p[i] != ref.p[i]) { fprintf(stderr, "  first difference at %d: %.9g (train.h) vs %.9g (kernels' clipping)\n", i, cpu.p[i], ref.p[i]); break; }
  tr_free(&t);
}

static void histogram(void) {
  float p[8] = { 0 }, g[8] = { -2.0f, -1.0f, -0.5f, 0.0f, 0.999f, 1.0f, NAN, INFINITY };
  uint64_t c[4 + 3];
  tr_trainer t;
  CHECK(tr_init(&t, &(tr_desc){ .model = { .params = p, .grads = g, .n_params = 8, .forward = toy_forward } }) == TR_OK);
  CHECK(tr_grad_histogram(&t, -1.0f, 1.0f, 4, c) == TR_OK);
  /* bins [-1,-.5) [-.5,0) [0,.5) [.5,1); below; at/above; non-finite */
  CHECK(c[0] == 1 && c[1] == 1 && c[2] == 1 && c[3] == 1 && c[4] == 1 && c[5] == 1 && c[6] == 2);
  CHECK(tr_grad_histogram(&t, 1.0f, 1.0f, 4, c) == TR_ERR_INVALID && strstr(tr_error(&t), "lo < hi"));
  CHECK(tr_grad_histogram(&t, -1.0f, 1.0f, 0, c) == TR_ERR_INVALID && strstr(tr_error(&t), "1..4096"));
  CHECK(tr_grad_histogram(&t, NAN, 1.0f, 4, c) == TR_ERR_INVALID);
  CHECK(tr_grad_histogram(&t, -1.0f, 1.0f, 4, NULL) == TR_ERR_INVALID);
  tr_free(&t);
}

static void device_refused(void) {
  float p[4] = { 0 }, g[4] = { 0 };
  tr_trainer t;
  CHECK(tr_init(&t, &(tr_desc){ .model = { .params = p, .grads = g, .n_params = 4, .forward = toy_forward,
                                           .on_device = 1 } }) == TR_ERR_DEVICE);
  CHECK(strstr(tr_error(&t), "TRAIN_CUDA") != NULL);
  CHECK(strcmp(tr_err_name(TR_ERR_DEVICE), "device error") == 0);
  tr_free(&t);
  CHECK(tr_cuda_sync_count() == 0);
}

static int source_calls;
static double norm_source(hk_ctx *ctx, void *user) { (void)ctx; source_calls++; return *(double *)user; }

static void grad_norm_source(void) {
  hk_ctx ctx;
  hk_tensor view = { "g", NULL, 3, 1 };
  double value = 5.0;
  memset(&ctx, 0, sizeof ctx);
  ctx.grads = &view;
  ctx.n_tensors = 1;
  CHECK(isnan(hk_grad_norm(&ctx)));             /* device memory and no source: NaN, never read */
  hk_grads_changed(&ctx);
  ctx.grad_norm_source = norm_source;
  ctx.grad_norm_source_user = &value;
  CHECK(hk_grad_norm(&ctx) == 5.0 && hk_grad_norm(&ctx) == 5.0 && source_calls == 1);
  hk_grads_changed(&ctx);
  value = 7.0;
  CHECK(hk_grad_norm(&ctx) == 7.0 && source_calls == 2);
  hk_ctx_free(&ctx);
}

int main(void) {
  optimizer_matches((tr_optim){ .kind = TR_OPTIM_ADAMW, .lr = 1e-2, .weight_decay = 0.1 }, 0, TR_CLIP_NORM);
  optimizer_matches((tr_optim){ .kind = TR_OPTIM_ADAMW, .lr = 3e-3, .beta1 = 0.8, .beta2 = 0.99 }, 0.5, TR_CLIP_NORM);
  optimizer_matches((tr_optim){ .kind = TR_OPTIM_SGD, .lr = 1e-2 }, 0.01, TR_CLIP_VALUE);
  optimizer_matches((tr_optim){ .kind = TR_OPTIM_SGD, .lr = 1e-2, .momentum = 0.9, .weight_decay = 1e-3, .dampening = 0.1 }, 0.5, TR_CLIP_NORM);
  optimizer_matches((tr_optim){ .kind = TR_OPTIM_SGD, .lr = 1e-2, .momentum = 0.9, .nesterov = 1 }, 0, TR_CLIP_NORM);
  histogram();
  device_refused();
  grad_norm_source();
  if (failures) { fprintf(stderr, "test_cuda_cpu: %d check(s) failed\n", failures); return 1; }
  printf("test_cuda_cpu: the kernels' clipping is train.h's, bit for bit (5 configurations, %d steps each); "
         "histogram, TR_ERR_DEVICE, grad_norm_source: passed\n", STEPS);
  return 0;
}
