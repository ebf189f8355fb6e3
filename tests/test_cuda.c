/* tests/test_cuda.c - the GPU tests (make cuda-test). Plain C, linked with examples/cuda_mlp.o (hooks.h
   and train.h built with TRAIN_CUDA, the kernels, the spirals MLP's kernels). Without a CUDA device it
   prints "skipped: no CUDA device (why)" and exits 0.

   Tolerances, per kernel, and why:
     AdamW, SGD, zero, scale, clip (norm and value), skip   bit-identical to train.h's CPU passes
         (tr_adamw_update, tr_sgd_update, tr_scale, tr_clamp_sumsq): the kernels run the same
         tr_*_elem functions, IEEE-rounded, never fused (-fmad=false)
     norm   relative 1e-10 to hk_sumsq: both sum n float squares in double, in different orders; the worst-case bound is n * 2^-53 = 1.2e-10 for n = 2^20. Bit-identical run
         to run (fixed grid, fixed reduction order)
     loss mean   1 float ulp: a double sum in another order, rounded to float once
     histogram, NaN/Inf count   exact (integer counts; the bin is the same float arithmetic)
     training (spirals MLP, GPU vs CPU, 3 epochs)   relative L2 1e-3 on the parameters: expf/logf on
         the device differ from glibc's by up to 2 ulp, and 90 AdamW steps amplify that; resume and
         checkpoints are bitwise.
     the standard callbacks on the GPU model: ema's average bit-identical to the CPU's formula applied to
         the same parameters (trc_ema), and no wait per step; gradient_monitor's per-tensor norms within
         the norm's 1e-10 of hk_sumsq on the same gradients, one wait per logged step (one per tensor
         with percentiles); lr_finder's sweep leaves the fit that follows bit-identical to a fit without
         it, with one wait per sweep step and one at the restore; device_stats reads the GPU's utilisation and
         memory through NVML (0 <= utilisation <= 100, 0 < used <= total) and waits for nothing.
     parameter groups (param_group, finetuning; one launch per stretch of tensors)   as training, relative L2 1e-3;
         a frozen tensor bit-identical to its start. */
#include "examples/cuda_mlp.h"
#include <stdio.h>
#include <string.h>

static int failures;
#define CHECK(c) do { if (!(c)) { fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c); failures++; } } while (0)
#define CU(x) do { int e_ = (x); if (e_) { fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, trc_error_string(e_)); exit(1); } } while (0)

static const char *dir = ".";
enum { N = (1 << 20) + 3 }; /* odd: the tails of every grid */

static float *dev_copy(const float *h, size_t n) { float *d; CU(trc_malloc((void **)&d, n * 4)); CU(trc_copy_to_device(d, h, n * 4, NULL)); return d; }
static void host_copy(float *h, const float *d, size_t n) { CU(trc_copy_to_host(h, d, n * 4, NULL)); }
static size_t differ(const float *a, const float *b, size_t n) { size_t i, c = 0; for (i = 0; i < n; i++) c += memcmp(&a[i], &b[i], 4) != 0; return c; }
static void fill(float *x, size_t n, unsigned seed) {
  tr_rng r;
  size_t i;
  tr_rng_seed(&r, seed);
  for (i = 0; i < n; i++) x[i] = tr_rng_normal(&r) * (float)(1 << (i % 10)) * 1e-3f;
}

static void kernels_vs_cpu(void) {
  float *g = malloc(N * 4), *p = malloc(N * 4), *m = calloc(N, 4), *v = calloc(N, 4), *out = malloc(N * 4);
  float *dg, *dp, *dm, *dv, *dl;
  double *dpart, sumsq = 0;
  trc_ctrl *dctrl, ctrl, ctrl2;
  unsigned long long *dcount, count, hist[16 + 3], hist_cpu[16 + 3] = { 0 };
  size_t i;
  int s;
  fill(g, N, 1); fill(p, N, 2);
  dg = dev_copy(g, N); dp = dev_copy(p, N); dm = dev_copy(m, N); dv = dev_copy(v, N);
  CU(trc_malloc((void **)&dpart, TRC_NORM_BLOCKS * 8)); CU(trc_malloc((void **)&dctrl, sizeof ctrl));
  CU(trc_malloc((void **)&dcount, sizeof count)); CU(trc_malloc((void **)&dl, 4));

  /* AdamW: 100 steps against train.h's tr_adamw_update, bitwise (lerp's both forms: beta1 0.9 and 0.3) */
  for (s = 1; s <= 100; s++) {
    tr_optim o = { .kind = TR_OPTIM_ADAMW, .lr = 1e-3, .weight_decay = 0.01, .beta1 = s <= 50 ? 0.9 : 0.3, .beta2 = 0.999, .eps = 1e-8 };
    tr_adamw_coef a = tr_adamw_coefs(&o, o.lr, s);
    CU(trc_adamw(dp, dg, dm, dv, N, a, NULL, NULL));
    tr_adamw_update(p, g, m, v, N, &a, 1);
  }
  host_copy(out, dp, N); CHECK(differ(out, p, N) == 0);
  host_copy(out, dm, N); CHECK(differ(out, m, N) == 0);
  host_copy(out, dv, N); CHECK(differ(out, v, N) == 0);
  printf("adamw: 100 steps on %d floats, %zu differ from the CPU\n", N, differ(out, v, N));

  /* SGD with momentum, nesterov, weight decay: 100 steps, bitwise (dm is the buffer) */
  for (s = 0; s < 100; s++) {
    tr_optim o = { .kind = TR_OPTIM_SGD, .lr = 1e-2, .weight_decay = 1e-3, .momentum = 0.9, .nesterov = 1 };
    tr_sgd_coef a = tr_sgd_coefs(&o, o.lr, s == 0);
    CU(trc_sgd(dp, dg, dm, N, a, NULL, NULL));
    tr_sgd_update(p, g, m, N, &a, 1);
  }
  host_copy(out, dp, N); CHECK(differ(out, p, N) == 0);
  host_copy(out, dm, N); CHECK(differ(out, m, N) == 0);

  /* the norm: close to hk_sumsq's double sum, and the same bits every run */
  sumsq = hk_sumsq(g, N);
  CU(trc_norm(dg, N, dpart, dctrl, 0.5, 0, NULL));
  CU(trc_copy_to_host(&ctrl, dctrl, sizeof ctrl, NULL));
  CHECK(fabs(ctrl.sumsq - sumsq) <= 1e-10 * sumsq);
  printf("norm: %.17g (GPU) vs %.17g (CPU), relative difference %.2e\n", ctrl.norm, sqrt(sumsq), fabs(ctrl.sumsq - sumsq) / sumsq);
  for (s = 0; s < 5; s++) {
    CU(trc_norm(dg, N, dpart, dctrl, 0.5, 0, NULL));
    CU(trc_copy_to_host(&ctrl2, dctrl, sizeof ctrl2, NULL));
    CHECK(memcmp(&ctrl.sumsq, &ctrl2.sumsq, 8) == 0);
  }
  CHECK(ctrl.clip_scale == trc_clip_scale(ctrl.norm, 0.5) && ctrl.clip_scale < 1.0f && !ctrl.skip && !ctrl.nonfinite);

  /* clip by norm folded into AdamW: the update and the gradient written back, bitwise */
  {
    tr_optim o = { .kind = TR_OPTIM_ADAMW, .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8 };
    tr_adamw_coef a = tr_adamw_coefs(&o, o.lr, 1);
    float *v2 = calloc(N, 4), *m2 = calloc(N, 4), *p2 = malloc(N * 4);
    CU(trc_memset(dm, 0, N * 4, NULL)); CU(trc_memset(dv, 0, N * 4, NULL));
    host_copy(p2, dp, N);
    CU(trc_adamw(dp, dg, dm, dv, N, a, dctrl, NULL)); /* the device's clip scale */
    a.gscale = ctrl.clip_scale;                       /* the CPU's folded clip: the same scale */
    tr_adamw_update(p2, g, m2, v2, N, &a, 1);
    host_copy(out, dp, N); CHECK(differ(out, p2, N) == 0);
    host_copy(out, dg, N); CHECK(differ(out, g, N) == 0);
    free(v2); free(m2); free(p2);
  }
  /* the separate clip pass, zero and scale */
  CU(trc_norm(dg, N, dpart, dctrl, 0.1, 0, NULL)); CU(trc_copy_to_host(&ctrl, dctrl, sizeof ctrl, NULL));
  CU(trc_apply_clip(dg, N, dctrl, NULL));
  tr_scale(g, N, ctrl.clip_scale, 1);
  host_copy(out, dg, N); CHECK(differ(out, g, N) == 0);
  CU(trc_scale(dg, N, 1.0f / 3.0f, NULL));
  tr_scale(g, N, 1.0f / 3.0f, 1);
  host_copy(out, dg, N); CHECK(differ(out, g, N) == 0);

  /* clip by value: clamped in place, the norm from before */
  sumsq = hk_sumsq(g, N);
  CU(trc_clip_value(dg, N, 1e-3f, dpart, dctrl, NULL)); CU(trc_copy_to_host(&ctrl, dctrl, sizeof ctrl, NULL));
  CHECK(tr_clamp_sumsq(g, N, -1e-3f, 1e-3f, 1) == sumsq);
  host_copy(out, dg, N); CHECK(differ(out, g, N) == 0);
  CHECK(fabs(ctrl.sumsq - sumsq) <= 1e-10 * sumsq);

  /* histogram: exact counts, NaN/Inf included */
  g[0] = NAN; g[N / 2] = INFINITY; g[N - 1] = -INFINITY; g[7] = NAN; g[8] = 1e-3f; g[9] = -1e-3f;
  CU(trc_copy_to_device(dg, g, N * 4, NULL));
  CU(trc_histogram(dg, N, -1e-3f, 1e-3f, 16, (unsigned long long *)dpart, NULL)); /* dpart as scratch */
  CU(trc_copy_to_host(hist, dpart, sizeof hist, NULL));
  for (i = 0; i < N; i++) hist_cpu[tr_hist_bin(g[i], -1e-3f, 1e-3f, (1e-3f - -1e-3f) / 16.0f, 16)]++;
  CHECK(memcmp(hist, hist_cpu, sizeof hist) == 0 && hist[16 + 2] == 4);
  { /* every count of per-warp copies: 8 (1,000 bins), 2 (3,000) and 1 (4,096, the most) */
    static unsigned long long big[4096 + 3], big_cpu[4096 + 3];
    unsigned long long *dbig;
    int k, bins_of[] = { 1000, 3000, 4096 };
    CU(trc_malloc((void **)&dbig, sizeof big));
    for (k = 0; k < 3; k++) {
      int bins = bins_of[k];
      memset(big_cpu, 0, sizeof big_cpu);
      CU(trc_histogram(dg, N, -1e-3f, 1e-3f, bins, dbig, NULL));
      CU(trc_copy_to_host(big, dbig, (size_t)(bins + 3) * sizeof *big, NULL));
      for (i = 0; i < N; i++) big_cpu[tr_hist_bin(g[i], -1e-3f, 1e-3f, (1e-3f - -1e-3f) / (float)bins, bins)]++;
      CHECK(memcmp(big, big_cpu, (size_t)(bins + 3) * sizeof *big) == 0);
    }
    trc_free(dbig);
  }

  /* NaN/Inf scan, and the skip: a non-finite norm leaves p, m, v untouched */
  CU(trc_memset(dcount, 0, sizeof count, NULL));
  CU(trc_count_nonfinite(dg, N, dcount, NULL)); CU(trc_copy_to_host(&count, dcount, sizeof count, NULL));
  CHECK(count == 4 && tr_count_nonfinite(g, N, 1) == 4);
  CU(trc_norm(dg, N, dpart, dctrl, 1.0, 1, NULL)); CU(trc_copy_to_host(&ctrl, dctrl, sizeof ctrl, NULL));
  CHECK(ctrl.nonfinite && ctrl.skip);
  host_copy(p, dp, N);
  {
    tr_optim o = { .kind = TR_OPTIM_ADAMW, .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8 };
    CU(trc_adamw(dp, dg, dm, dv, N, tr_adamw_coefs(&o, o.lr, 2), dctrl, NULL));
  }
  host_copy(out, dp, N); CHECK(differ(out, p, N) == 0);

  /* the loss mean: within one float ulp of the CPU's double mean */
  {
    double sum = 0;
    float mean, ref;
    fill(p, 1000, 3);
    for (i = 0; i < 1000; i++) sum += p[i];
    ref = (float)(sum / 1000);
    CU(trc_copy_to_device(dp, p, 1000 * 4, NULL));
    CU(trc_loss_mean(dp, 1000, dl, NULL)); CU(trc_copy_to_host(&mean, dl, 4, NULL));
    CHECK(mean == ref || nextafterf(mean, ref) == ref);
  }
  CU(trc_zero(dg, N, NULL)); host_copy(out, dg, N);
  memset(g, 0, N * 4); CHECK(differ(out, g, N) == 0);
  trc_free(dg); trc_free(dp); trc_free(dm); trc_free(dv); trc_free(dpart); trc_free(dctrl); trc_free(dcount); trc_free(dl);
  free(g); free(p); free(m); free(v); free(out);
}

/* ---- train.h on the GPU ------------------------------------------------------------------------- */
typedef struct run { spirals train, val; mlp cpu; cuda_mlp gpu; cuda_spirals gtrain; tr_data data; tr_trainer t; } run;

static tr_optim adamw(void) { tr_optim o = { .kind = TR_OPTIM_ADAMW, .lr = 1e-2, .weight_decay = 1e-4 }; return o; }

/* A trainer on the GPU (on_gpu) or the CPU, for the same model, data and seed. */
static void run_init(run *r, int on_gpu, tr_optim optim) {
  tr_tensor *views = r->gpu.views;
  memset(r, 0, sizeof *r);
  CHECK(spirals_make(&r->train, 100, 3, 0.2f, 1) == 0 && mlp_init(&r->cpu, 2, 64, 3, 32, 42) == 0);
  if (on_gpu) {
    CU(cuda_mlp_init(&r->gpu, &r->cpu));
    CU(cuda_spirals_init(&r->gtrain, &r->train, 32, 1));
    r->data = cuda_spirals_tr_data(&r->gtrain);
    CHECK(tr_init(&r->t, &(tr_desc){ .model = cuda_mlp_tr_model(&r->gpu), .optim = optim, .seed = 5 }) == TR_OK);
  } else {
    views = r->gpu.views;
    r->data = spirals_tr_data(&r->train, 32, 1);
    CHECK(tr_init(&r->t, &(tr_desc){ .model = mlp_tr_model(&r->cpu, views), .optim = optim, .seed = 5 }) == TR_OK);
  }
}
static tr_err run_fit(run *r, int64_t steps, double clip, tr_clip algo, tr_nonfinite nf) {
  return tr_fit(&r->t, &(tr_config){ .train = &r->data, .max_steps = steps, .num_sanity_val_steps = -1, .gradient_clip_val = clip,
                                     .gradient_clip_algorithm = algo, .on_nonfinite_loss = nf, .no_sigint = 1 });
}
static void run_params(run *r, float *out) { /* the parameters on the host, wherever they live */
  if (r->t.model.on_device) host_copy(out, r->gpu.d_params, r->cpu.num_params);
  else memcpy(out, r->cpu.params, r->cpu.num_params * 4);
}
static void run_free(run *r) {
  tr_free(&r->t);
  if (r->gpu.d_params) { cuda_mlp_free(&r->gpu); cuda_spirals_free(&r->gtrain); }
  mlp_free(&r->cpu); spirals_free(&r->train);
}

static void gpu_vs_cpu(tr_optim optim, double clip, tr_clip algo) {
  static run g, c;
  float pg[512], pc[512];
  double d2 = 0, n2 = 0;
  size_t i, n;
  run_init(&g, 1, optim); run_init(&c, 0, optim);
  CHECK(run_fit(&g, 90, clip, algo, TR_NONFINITE_FAIL) == TR_OK && run_fit(&c, 90, clip, algo, TR_NONFINITE_FAIL) == TR_OK);
  n = c.cpu.num_params;
  run_params(&g, pg); run_params(&c, pc);
  for (i = 0; i < n; i++) { d2 += (pg[i] - pc[i]) * (double)(pg[i] - pc[i]); n2 += (double)pc[i] * pc[i]; }
  printf("training, GPU vs CPU (%s, clip %g %s, 90 steps): relative L2 difference of the parameters %.2e\n",
         optim.kind == TR_OPTIM_ADAMW ? "AdamW" : "SGD", clip, algo == TR_CLIP_NORM ? "norm" : "value", sqrt(d2 / n2));
  CHECK(sqrt(d2 / n2) < 1e-3 && g.t.global_step == c.t.global_step);
  if (clip > 0 && algo == TR_CLIP_VALUE) { /* the gradient buffer is clipped, as on the CPU */
    host_copy(pg, g.gpu.d_grads, n);
    for (i = 0; i < n; i++) CHECK(fabsf(pg[i]) <= (float)clip);
  }
  { /* the same gradients give the same histogram through tr_grad_histogram, CPU and GPU */
    uint64_t hg[32 + 3], hc[32 + 3];
    host_copy(c.cpu.grads, g.gpu.d_grads, n);
    CHECK(tr_grad_histogram(&g.t, -0.05f, 0.05f, 32, hg) == TR_OK && tr_grad_histogram(&c.t, -0.05f, 0.05f, 32, hc) == TR_OK);
    CHECK(memcmp(hg, hc, sizeof hg) == 0);
  }
  run_free(&g); run_free(&c);
}

/* Parameter groups on the GPU: one launch per stretch of tensors with its own coefficients; against the CPU as the
   training above (relative L2 1e-3), and a frozen tensor's bits untouched on both. */
static void groups_on_gpu(tr_optim optim, const char *spec) {
  static run g, c;
  float pg[512], pc[512], b1[64];
  double d2 = 0, n2 = 0;
  size_t i, n, off, nb;
  run_init(&g, 1, optim); run_init(&c, 0, optim);
  CHECK(hk_spec_apply(g.t.reg, spec) == HK_OK && hk_spec_apply(c.t.reg, spec) == HK_OK);
  off = c.gpu.views[MLP_B1].offset, nb = c.gpu.views[MLP_B1].count;
  CHECK(nb <= 64 && !strcmp(c.gpu.views[MLP_B1].name, "b1"));
  memcpy(b1, c.cpu.params + off, nb * 4);
  CHECK(run_fit(&g, 90, 1.0, TR_CLIP_NORM, TR_NONFINITE_FAIL) == TR_OK && run_fit(&c, 90, 1.0, TR_CLIP_NORM, TR_NONFINITE_FAIL) == TR_OK);
  n = c.cpu.num_params;
  run_params(&g, pg); run_params(&c, pc);
  for (i = 0; i < n; i++) { d2 += (pg[i] - pc[i]) * (double)(pg[i] - pc[i]); n2 += (double)pc[i] * pc[i]; }
  printf("parameter groups, GPU vs CPU (%s, %s, 90 steps): relative L2 difference %.2e\n",
         optim.kind == TR_OPTIM_ADAMW ? "AdamW" : "SGD", spec, sqrt(d2 / n2));
  CHECK(sqrt(d2 / n2) < 1e-3 && g.t.global_step == c.t.global_step);
  CHECK(differ(pg + off, b1, nb) == 0 && differ(pc + off, b1, nb) == 0); /* b1 frozen */
  run_free(&g); run_free(&c);
}

static int reads;
static hk_signal read_both(hk_ctx *ctx, void *user) {
  double x;
  (void)user;
  reads++;
  CHECK(hk_metric_get(ctx, "train/loss", &x) && hk_metric_get(ctx, "train/loss", &x) && hk_is_finite(x));
  CHECK(hk_grad_norm(ctx) > 0 && hk_grad_norm(ctx) > 0);
  return HK_CONTINUE;
}

static void sync_count(void) {
  static run r;
  unsigned long long before;
  run_init(&r, 1, adamw());
  before = tr_cuda_sync_count();
  CHECK(run_fit(&r, 40, 1.0, TR_CLIP_NORM, TR_NONFINITE_IGNORE) == TR_OK);
  printf("waits in 40 steps, nothing registered, clip by norm: %llu\n", tr_cuda_sync_count() - before);
  CHECK(tr_cuda_sync_count() - before == 0);
  before = tr_cuda_sync_count();
  CHECK(run_fit(&r, 80, 1.0, TR_CLIP_NORM, TR_NONFINITE_FAIL) == TR_OK); /* the policy needs the loss: 1 per step */
  CHECK(tr_cuda_sync_count() - before == 40);
  CHECK(hk_on(r.t.reg, HK_ON_AFTER_OPTIMIZER_STEP, read_both, NULL, NULL, NULL) == HK_OK);
  before = tr_cuda_sync_count();
  CHECK(run_fit(&r, 120, 1.0, TR_CLIP_NORM, TR_NONFINITE_IGNORE) == TR_OK); /* one loss + one norm per step */
  CHECK(reads == 40 && tr_cuda_sync_count() - before == 80);
  run_free(&r);
}

/* 2N steps straight == N, save, a new trainer loads, N more: bitwise, on the GPU. Then the checkpoint
   goes to the CPU and back. */
static void resume_and_checkpoints(void) {
  static run a, b, c;
  float pa[512], pb[512], pc[512];
  char path[512];
  size_t n;
  snprintf(path, sizeof path, "%s/test_cuda.ckpt", dir);
  run_init(&a, 1, adamw()); run_init(&b, 1, adamw());
  CHECK(run_fit(&a, 60, 1.0, TR_CLIP_NORM, TR_NONFINITE_IGNORE) == TR_OK);
  CHECK(run_fit(&b, 25, 1.0, TR_CLIP_NORM, TR_NONFINITE_IGNORE) == TR_OK && tr_save(&b.t, path) == TR_OK);
  run_free(&b); run_init(&b, 1, adamw());
  CHECK(tr_load(&b.t, path) == TR_OK && b.t.global_step == 25);
  CHECK(run_fit(&b, 60, 1.0, TR_CLIP_NORM, TR_NONFINITE_IGNORE) == TR_OK);
  n = a.cpu.num_params;
  run_params(&a, pa); run_params(&b, pb);
  CHECK(differ(pa, pb, n) == 0);
  printf("GPU resume after 25 of 60 steps: %zu of %zu parameters differ\n", differ(pa, pb, n), n);
  /* GPU -> CPU: the same parameters, and the CPU continues from there */
  CHECK(tr_save(&a.t, path) == TR_OK);
  run_init(&c, 0, adamw());
  CHECK(tr_load(&c.t, path) == TR_OK && c.t.global_step == 60);
  run_params(&c, pc); CHECK(differ(pa, pc, n) == 0);
  CHECK(run_fit(&c, 70, 1.0, TR_CLIP_NORM, TR_NONFINITE_IGNORE) == TR_OK);
  /* CPU -> GPU: the same parameters and optimizer state (one more step agrees with the CPU's) */
  CHECK(tr_save(&c.t, path) == TR_OK && tr_load(&b.t, path) == TR_OK && b.t.global_step == 70);
  run_params(&c, pc); run_params(&b, pb); CHECK(differ(pb, pc, n) == 0);
  run_free(&a); run_free(&b); run_free(&c);
}

/* ---- the standard callbacks on the GPU model ------------------------------------------------------ */
typedef struct follow { const float *d_params; float *p, *avg; size_t n; int64_t updates; double decay; } follow;
static hk_signal ema_follow(hk_ctx *ctx, void *user) { /* the CPU's EMA of the same parameters, after ema's update */
  follow *e = (follow *)user;
  double w = e->updates ? 1.0 - e->decay : 1.0;
  size_t i;
  (void)ctx;
  host_copy(e->p, e->d_params, e->n);
  for (i = 0; i < e->n; i++) e->avg[i] = (float)((double)e->avg[i] + w * ((double)e->p[i] - (double)e->avg[i]));
  e->updates++;
  return HK_CONTINUE;
}

static void ema_on_gpu(void) {
  static run r;
  static follow f;
  hk_handle h;
  unsigned long long before;
  float before_val[512], after_val[512], avg[512];
  double loss = 0;
  const tr_ema_state *st;
  run_init(&r, 1, adamw());
  f.n = r.cpu.num_params; f.d_params = r.gpu.d_params; f.decay = 0.9; f.updates = 0;
  f.p = calloc(f.n, 4); f.avg = calloc(f.n, 4);
  CHECK(tr_ema(r.t.reg, &(tr_ema_desc){ .decay = 0.9 }, &h) == TR_OK);
  before = tr_cuda_sync_count();
  CHECK(run_fit(&r, 20, 0, TR_CLIP_NORM, TR_NONFINITE_IGNORE) == TR_OK);
  printf("ema on the GPU: %llu waits in 20 steps\n", tr_cuda_sync_count() - before);
  CHECK(tr_cuda_sync_count() - before == 0);
  CHECK(hk_on(r.t.reg, HK_ON_AFTER_OPTIMIZER_STEP, ema_follow, &f, NULL, NULL) == HK_OK);
  st = tr_ema_get(r.t.reg, h);
  host_copy(f.avg, st->average, f.n); /* the CPU follows from the device's average after 20 steps */
  f.updates = st->n_averaged;
  CHECK(run_fit(&r, 50, 0, TR_CLIP_NORM, TR_NONFINITE_IGNORE) == TR_OK && st->on_device && st->n_averaged == 50);
  host_copy(avg, st->average, f.n);
  printf("ema on the GPU: 30 updates, %zu of %zu averaged values differ from the CPU's formula\n", differ(avg, f.avg, f.n), f.n);
  CHECK(differ(avg, f.avg, f.n) == 0);
  run_params(&r, before_val); /* validation runs on the average, and the trained weights come back */
  CHECK(tr_validate(&r.t, &r.data, 0, &loss) == TR_OK && hk_is_finite(loss) && !st->swapped);
  run_params(&r, after_val);
  CHECK(differ(before_val, after_val, f.n) == 0);
  free(f.p); free(f.avg);
  run_free(&r);
}

typedef struct gm_watch { hk_handle h; int64_t checks; int reads; double worst; const float *d_grads; float g[512]; } gm_watch;
static hk_signal gm_watch_fn(hk_ctx *ctx, void *user) { /* each logged step's norms against hk_sumsq of a copy */
  gm_watch *w = (gm_watch *)user;
  const tr_gradient_monitor_state *st = tr_gradient_monitor_get(ctx->reg, w->h);
  char name[96];
  double x, sq;
  int k;
  if (st->checks == w->checks) return HK_CONTINUE;
  w->checks = st->checks;
  for (k = 0; k < ctx->n_tensors; k++) {
    host_copy(w->g, ctx->grads[k].data, ctx->grads[k].count);
    sq = hk_sumsq(w->g, ctx->grads[k].count);
    snprintf(name, sizeof name, "grad_2.0_norm/%s", ctx->grads[k].name);
    CHECK(hk_metric_get(ctx, name, &x));
    if (sq > 0 && fabs(x * x - sq) / sq > w->worst) w->worst = fabs(x * x - sq) / sq;
    w->reads++;
  }
  return HK_CONTINUE;
}

static void gm_on_gpu(const char *pct) {
  static run r;
  static gm_watch w;
  unsigned long long before;
  double x;
  run_init(&r, 1, adamw());
  memset(&w, 0, sizeof w);
  CHECK(tr_gradient_monitor(r.t.reg, &(tr_gradient_monitor_desc){ .log_frequency = 3, .percentiles = pct }, &w.h) == TR_OK);
  before = tr_cuda_sync_count();
  CHECK(run_fit(&r, 30, 0, TR_CLIP_NORM, TR_NONFINITE_IGNORE) == TR_OK);
  printf("gradient_monitor on the GPU (percentiles '%s'): %llu waits in 30 steps, 10 logged\n", pct, tr_cuda_sync_count() - before);
  CHECK(tr_cuda_sync_count() - before == (unsigned long long)(pct[0] ? 10 * MLP_NUM_TENSORS : 10));
  CHECK(tr_gradient_monitor_get(r.t.reg, w.h)->checks == 10 && hk_is_finite(tr_gradient_monitor_get(r.t.reg, w.h)->total_norm));
  CHECK(!pct[0] || (hk_metric_get(&r.t.ctx, "grad_abs_p50", &x) && x > 0));
  w.checks = tr_gradient_monitor_get(r.t.reg, w.h)->checks;
  CHECK(hk_on(r.t.reg, HK_ON_TRAIN_BATCH_END, gm_watch_fn, &w, NULL, NULL) == HK_OK);
  CHECK(run_fit(&r, 60, 0, TR_CLIP_NORM, TR_NONFINITE_IGNORE) == TR_OK);
  printf("gradient_monitor on the GPU: per-tensor sums of squares within %.2e (relative) of the CPU's\n", w.worst);
  CHECK(w.reads == 10 * MLP_NUM_TENSORS && w.worst <= 1e-10);
  run_free(&r);
}

/* device_stats with TRAIN_CUDA on the GPU: NVML (loaded at run time) reads the process's device; a reading
   waits for nothing on the device. The line it prints is scripts/gpu_check.sh's "device_stats" row. */
static void ds_on_gpu(void) {
  static run r;
  hk_handle h;
  const tr_device_stats_state *s;
  unsigned long long before;
  run_init(&r, 1, adamw());
  CHECK(tr_device_stats(r.t.reg, &(tr_device_stats_desc){ .every_n_steps = 10 }, &h) == TR_OK);
  before = tr_cuda_sync_count();
  CHECK(run_fit(&r, 30, 0, TR_CLIP_NORM, TR_NONFINITE_IGNORE) == TR_OK);
  s = tr_device_stats_get(r.t.reg, h);
  CHECK(s->readings == 3 && tr_cuda_sync_count() - before == 0);
  CHECK(s->rss_mb > 0 && s->peak_rss_mb >= s->rss_mb && s->load_1m >= 0 && s->cpu_percent >= 0);
  if (s->gpu == 1) {
    printf("device_stats on the GPU through NVML (%lld readings in 30 steps, %llu host waits): utilisation %.0f %%, memory used "
           "%.0f MB of %.0f MB; host: rss %.0f MB, peak %.0f MB, cpu %.0f %%, load %.2f\n", (long long)s->readings,
           tr_cuda_sync_count() - before, s->gpu_util_percent, s->gpu_mem_used_mb, s->gpu_mem_total_mb, s->rss_mb, s->peak_rss_mb,
           s->cpu_percent, s->load_1m);
    CHECK(s->gpu_util_percent >= 0 && s->gpu_util_percent <= 100);
    CHECK(s->gpu_mem_total_mb > 0 && s->gpu_mem_used_mb > 0 && s->gpu_mem_used_mb <= s->gpu_mem_total_mb);
    CHECK(hk_metric_get(&r.t.ctx, "device_stats/gpu_mem_total_mb", &(double){ 0 }));
  } else /* a GPU without NVML reachable (no libnvidia-ml.so.1 in this container): said, and the summary shows why */
    printf("device_stats on the GPU: no GPU metrics: %s\n", s->gpu_why);
  run_free(&r);
}

static void lrf_on_gpu(void) {
  static run a, b;
  float pa[512], pb[512];
  unsigned long long before;
  hk_handle h;
  const tr_lr_finder_state *st;
  run_init(&a, 1, adamw()); run_init(&b, 1, adamw());
  CHECK(tr_lr_finder(a.t.reg, &(tr_lr_finder_desc){ .num_training_steps = 40, .min_lr = 1e-5, .max_lr = 10, .update_attr = TR_NO,
                                                    .verbose = TR_NO }, &h) == TR_OK);
  before = tr_cuda_sync_count();
  CHECK(run_fit(&a, 10, 1.0, TR_CLIP_NORM, TR_NONFINITE_IGNORE) == TR_OK);
  st = tr_lr_finder_get(a.t.reg, h);
  printf("lr_finder on the GPU: %d points, suggestion %g, %llu waits\n", st->n, st->suggestion, tr_cuda_sync_count() - before);
  CHECK(st->done && st->n >= 13 && hk_is_finite(st->suggestion) && tr_cuda_sync_count() - before == (unsigned long long)st->n + 1);
  CHECK(run_fit(&b, 10, 1.0, TR_CLIP_NORM, TR_NONFINITE_IGNORE) == TR_OK); /* the same fit without the sweep */
  run_params(&a, pa); run_params(&b, pb);
  CHECK(differ(pa, pb, a.cpu.num_params) == 0);
  run_free(&a); run_free(&b);
}

int main(int argc, char **argv) {
  char why[256];
  if (argc > 1) dir = argv[1];
  if (!trc_device_ok(why, sizeof why)) { printf("test_cuda: skipped: no CUDA device (%s)\n", why); return 0; }
  kernels_vs_cpu();
  gpu_vs_cpu(adamw(), 1.0, TR_CLIP_NORM);
  gpu_vs_cpu(adamw(), 0.05, TR_CLIP_VALUE);
  gpu_vs_cpu((tr_optim){ .kind = TR_OPTIM_SGD, .lr = 0.05, .momentum = 0.9, .nesterov = 1 }, 0, TR_CLIP_NORM);
  groups_on_gpu(adamw(), "param_group(match=b*, weight_decay=0); param_group(match=w2, lr_mult=3); param_group(match=b1, frozen=true)");
  groups_on_gpu((tr_optim){ .kind = TR_OPTIM_SGD, .lr = 0.05, .momentum = 0.9 }, "param_group(match=b1, frozen=true); "
                "finetuning(match=w1, unfreeze_at_epoch=3, initial_ratio=0.2)");
  sync_count();
  resume_and_checkpoints();
  ema_on_gpu();
  gm_on_gpu("");
  gm_on_gpu("50");
  lrf_on_gpu();
  ds_on_gpu();
  if (failures) { fprintf(stderr, "test_cuda: %d check(s) failed\n", failures); return 1; }
  printf("test_cuda: passed\n");
  return 0;
}
