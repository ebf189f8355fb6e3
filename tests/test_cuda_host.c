/* tests/test_cuda_host.c - train.h's CUDA section, run on the CPU (make test-cuda-cpu; no GPU, no nvcc).

   train.h is compiled with TRAIN_CUDA and TRAIN_CUDA_NO_KERNELS, and tests/cuda_host.h supplies the trc_*
   functions on host memory. A model marked on_device then takes the whole device path - optimizer state
   in "device" buffers, clipping folded into the update or applied for an on_gradient_clip hook, the
   loss left in tr_model.device_loss, lazy copies for hooks, checkpoints through host mirrors - and must
   give the CPU path's results bit for bit, with the waits the section promises:
     - training: AdamW/SGD, clip by norm (folded, and applied when on_gradient_clip listens), clip by
       value (the gradient buffer ends clipped), accumulation; parameters identical to the CPU run
     - waits: none per step with nothing registered (TR_NONFINITE_IGNORE); one per step under FAIL;
       one loss copy and one norm copy per step for a hook that reads each twice
     - ctx->loss is NaN in training with the loss on the device; the metric train/loss is the CPU's loss
     - validation loss, tr_grad_histogram, views marked on_device
     - checkpoints: device -> CPU -> device round trip, exact resume, a failed load leaves the buffers
     - errors: no device, an allocation failure (TR_ERR_DEVICE with the reason)
     - every kernel and copy goes to tr_model.stream
     - standard callbacks on a device model, each against the same callback on the CPU model, bit for bit:
       gradient_monitor (per-tensor norms: one wait per logged step, none on the others; percentiles and
       histogram: one copy per tensor), ema (EMA and SWA, swapped for validation, copied at the end,
       checkpoints device <-> CPU: no wait per step), lr_finder (the sweep, the suggestion, the restore:
       one wait per sweep step and one at the restore); nan_guard (two waits per step)
     - device_stats's NVML path: no NVML, no device, and tests/fake_nvml.c as a device (its values recorded)
     - parameter groups (param_group, finetuning) with AdamW and SGD: one launch per stretch of tensors, the CPU's bits */
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#define TRAIN_CUDA
#define TRAIN_CUDA_NO_KERNELS
#include "train.h"
#include "tests/cuda_host.h"
#include "examples/mlp.h"
#include <stdio.h>

static int failures;
#define CHECK(c) do { if (!(c)) { fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c); failures++; } } while (0)

/* The spirals MLP, once as a CPU model and once as a "device" one (its loss in device_loss). */
typedef struct run {
  spirals train, val; mlp net; float dev_loss; tr_data data, vdata; tr_trainer t; double losses[200], norms[200]; int n_read;
  tr_tensor views[MLP_NUM_TENSORS]; hk_handle h; double seen[2048]; int n_seen; int64_t checks; /* the callbacks' tests */
} run;

static int cpu_forward(void *user, void *batch, int training, double *loss) {
  run *r = (run *)user;
  const mlp_batch *b = (const mlp_batch *)batch;
  (void)training;
  *loss = mlp_forward(&r->net, b->x, b->y, b->n);
  return 0;
}
static int dev_forward(void *user, void *batch, int training, double *loss) {
  run *r = (run *)user;
  const mlp_batch *b = (const mlp_batch *)batch;
  (void)training;
  *loss = -1; /* ignored: the loss is on the device */
  r->dev_loss = mlp_forward(&r->net, b->x, b->y, b->n);
  return 0;
}
static int backward(void *user, void *batch) { (void)batch; mlp_backward(&((run *)user)->net, 1.0f); return 0; }

static tr_optim adamw(void) { tr_optim o = { .kind = TR_OPTIM_ADAMW, .lr = 1e-2, .weight_decay = 1e-4 }; return o; }
static tr_optim sgd(void) { tr_optim o = { .kind = TR_OPTIM_SGD, .lr = 5e-2, .momentum = 0.9, .nesterov = 1 }; return o; }

static tr_err run_init_views(run *r, int dev, tr_optim optim, int views) {
  tr_model m;
  memset(r, 0, sizeof *r);
  CHECK(spirals_make(&r->train, 100, 3, 0.2f, 1) == 0 && spirals_make(&r->val, 30, 3, 0.2f, 2) == 0);
  CHECK(mlp_init(&r->net, 2, 32, 3, 32, 42) == 0);
  r->data = spirals_tr_data(&r->train, 32, 1);
  r->vdata = spirals_tr_data(&r->val, 32, 0);
  /* one tensor: the emulated norm (hk_sumsq of the whole buffer) then has the CPU's bits; the MLP's views
     (views = 1) for the callbacks' per-tensor work, in runs that do not clip by norm */
  m = mlp_tr_model(&r->net, r->views);
  if (!views) { m.tensors = NULL; m.n_tensors = 0; }
  m.user = r; m.forward = dev ? dev_forward : cpu_forward; m.backward = backward; m.predict = NULL; m.on_device = dev;
  m.device_loss = dev ? &r->dev_loss : NULL; m.stream = dev ? &cuda_host_stream : NULL;
  return tr_init(&r->t, &(tr_desc){ .model = m, .optim = optim, .seed = 3 });
}
static tr_err run_init(run *r, int dev, tr_optim optim) { return run_init_views(r, dev, optim, 0); }
static tr_err run_fit(run *r, int64_t steps, double clip, tr_clip algo, int accum, tr_nonfinite nf) {
  return tr_fit(&r->t, &(tr_config){ .train = &r->data, .max_steps = steps, .num_sanity_val_steps = -1,
      .limit_val_batches = -1, .gradient_clip_val = clip, .gradient_clip_algorithm = algo,
      .accumulate_grad_batches = accum, .on_nonfinite_loss = nf, .no_sigint = 1 });
}
static void run_free(run *r) { tr_free(&r->t); mlp_free(&r->net); spirals_free(&r->train); spirals_free(&r->val); }
static int same_params(const run *a, const run *b) { return memcmp(a->net.params, b->net.params, a->net.num_params * 4) == 0; }

static hk_signal clip_seen(hk_ctx *ctx, void *user) { /* at on_gradient_clip the gradients are clipped */
  run *r = (run *)user;
  r->norms[r->n_read++ % 200] = hk_sumsq(ctx->grads[0].data, ctx->grads[0].count); /* host memory here */
  return HK_CONTINUE;
}

static void same_steps(tr_optim optim, double clip, tr_clip algo, int accum, int clip_hook) {
  static run c, d;
  CHECK(run_init(&c, 0, optim) == TR_OK && run_init(&d, 1, optim) == TR_OK);
  if (clip_hook) {
    CHECK(hk_on(c.t.reg, HK_ON_GRADIENT_CLIP, clip_seen, &c, NULL, NULL) == HK_OK);
    CHECK(hk_on(d.t.reg, HK_ON_GRADIENT_CLIP, clip_seen, &d, NULL, NULL) == HK_OK);
  }
  CHECK(run_fit(&c, 60, clip, algo, accum, TR_NONFINITE_IGNORE) == TR_OK);
  CHECK(run_fit(&d, 60, clip, algo, accum, TR_NONFINITE_IGNORE) == TR_OK);
  CHECK(c.t.global_step == 60 && d.t.global_step == 60 && same_params(&c, &d));
  CHECK(memcmp(c.net.grads, d.net.grads, c.net.num_params * 4) == 0); /* clipped alike, in place */
  if (clip_hook) CHECK(c.n_read == 60 && memcmp(c.norms, d.norms, sizeof c.norms) == 0);
  if (!same_params(&c, &d)) fprintf(stderr, "  (optimizer %d, clip %g, algo %d, accum %d, hook %d)\n", optim.kind, clip, algo, accum, clip_hook);
  run_free(&c); run_free(&d);
}

/* Parameter groups (param_group, finetuning) on the device path: one launch per stretch of tensors with the same
   settings, the same bits as the CPU's per-stretch passes; a frozen tensor keeps its bits and its state stays 0. */
static void groups_case(tr_optim optim, const char *spec) {
  static run c, d;
  float b1[64];
  size_t off, n;
  CHECK(run_init_views(&c, 0, optim, 1) == TR_OK && run_init_views(&d, 1, optim, 1) == TR_OK);
  CHECK(hk_spec_apply(c.t.reg, spec) == HK_OK && hk_spec_apply(d.t.reg, spec) == HK_OK);
  off = c.views[MLP_B1].offset, n = c.views[MLP_B1].count;
  CHECK(n <= 64);
  memcpy(b1, c.net.params + off, n * 4);
  CHECK(run_fit(&c, 60, 0, TR_CLIP_NORM, 1, TR_NONFINITE_IGNORE) == TR_OK);
  CHECK(run_fit(&d, 60, 0, TR_CLIP_NORM, 1, TR_NONFINITE_IGNORE) == TR_OK);
  CHECK(c.t.global_step == 60 && d.t.global_step == 60 && same_params(&c, &d));
  CHECK(memcmp(b1, d.net.params + off, n * 4) == 0); /* b1 frozen */
  if (!same_params(&c, &d)) fprintf(stderr, "  (groups: optimizer %d, %s)\n", optim.kind, spec);
  run_free(&c); run_free(&d);
}

static hk_signal read_twice(hk_ctx *ctx, void *user) {
  run *r = (run *)user;
  double loss = 0, again = 0;
  CHECK(!hk_is_finite(ctx->loss) == (r->t.model.on_device && r->t.tr__cfg->on_nonfinite_loss == TR_NONFINITE_IGNORE));
  CHECK(hk_metric_get(ctx, "train/loss", &loss) && hk_metric_get(ctx, "train/loss", &again) && loss == again);
  CHECK(ctx->grads[0].on_device == r->t.model.on_device);
  r->losses[r->n_read % 200] = loss;
  r->norms[r->n_read % 200] = hk_grad_norm(ctx);
  CHECK(hk_grad_norm(ctx) == r->norms[r->n_read % 200]);
  r->n_read++;
  return HK_CONTINUE;
}

static void waits(void) {
  static run c, d;
  unsigned long long before;
  CHECK(run_init(&c, 0, adamw()) == TR_OK && run_init(&d, 1, adamw()) == TR_OK);
  before = tr_cuda_sync_count();
  CHECK(run_fit(&d, 40, 1.0, TR_CLIP_NORM, 1, TR_NONFINITE_IGNORE) == TR_OK);
  CHECK(tr_cuda_sync_count() - before == 0);                  /* nothing registered: no wait */
  before = tr_cuda_sync_count();
  CHECK(run_fit(&d, 80, 1.0, TR_CLIP_NORM, 1, TR_NONFINITE_FAIL) == TR_OK);
  CHECK(tr_cuda_sync_count() - before == 40);                 /* the FAIL policy reads each loss */
  CHECK(run_fit(&c, 80, 1.0, TR_CLIP_NORM, 1, TR_NONFINITE_FAIL) == TR_OK && same_params(&c, &d));
  CHECK(hk_on(c.t.reg, HK_ON_TRAIN_BATCH_END, read_twice, &c, NULL, NULL) == HK_OK);
  CHECK(hk_on(d.t.reg, HK_ON_TRAIN_BATCH_END, read_twice, &d, NULL, NULL) == HK_OK);
  before = tr_cuda_sync_count();
  CHECK(run_fit(&d, 120, 1.0, TR_CLIP_NORM, 1, TR_NONFINITE_IGNORE) == TR_OK);
  CHECK(tr_cuda_sync_count() - before == 80);                 /* one loss + one norm per step */
  CHECK(run_fit(&c, 120, 1.0, TR_CLIP_NORM, 1, TR_NONFINITE_IGNORE) == TR_OK);
  CHECK(c.n_read == 40 && d.n_read == 40 && memcmp(c.losses, d.losses, sizeof c.losses) == 0);
  CHECK(memcmp(c.norms, d.norms, sizeof c.norms) == 0 && same_params(&c, &d));
  { /* validation: one copy per batch, the CPU's mean */
    double lc = 0, ld = 0;
    CHECK(tr_validate(&c.t, &c.vdata, 0, &lc) == TR_OK && tr_validate(&d.t, &d.vdata, 0, &ld) == TR_OK && lc == ld);
  }
  { /* the histogram API answers alike */
    uint64_t hc[16 + 3], hd[16 + 3];
    CHECK(tr_grad_histogram(&c.t, -0.05f, 0.05f, 16, hc) == TR_OK && tr_grad_histogram(&d.t, -0.05f, 0.05f, 16, hd) == TR_OK);
    CHECK(memcmp(hc, hd, sizeof hc) == 0);
  }
  run_free(&c); run_free(&d);
}

static void checkpoints(const char *dir) {
  static run a, b, c;
  char path[512], bad[600];
  float *before;
  FILE *f;
  snprintf(path, sizeof path, "%s/cuda_host.ckpt", dir);
  snprintf(bad, sizeof bad, "%s/cuda_host_bad.ckpt", dir);
  /* exact resume on the "device": 50 straight == 20, save, fresh trainer, load, 30 */
  CHECK(run_init(&a, 1, sgd()) == TR_OK && run_init(&b, 1, sgd()) == TR_OK);
  CHECK(run_fit(&a, 50, 0.5, TR_CLIP_NORM, 2, TR_NONFINITE_IGNORE) == TR_OK);
  CHECK(run_fit(&b, 20, 0.5, TR_CLIP_NORM, 2, TR_NONFINITE_IGNORE) == TR_OK && tr_save(&b.t, path) == TR_OK);
  CHECK(b.t.model.params == b.net.params); /* the host mirrors stood in only during the save */
  run_free(&b);
  CHECK(run_init(&b, 1, sgd()) == TR_OK && tr_load(&b.t, path) == TR_OK && b.t.global_step == 20);
  CHECK(run_fit(&b, 50, 0.5, TR_CLIP_NORM, 2, TR_NONFINITE_IGNORE) == TR_OK && same_params(&a, &b));
  /* device -> CPU, both continue 10 steps: the same */
  CHECK(tr_save(&a.t, path) == TR_OK);
  CHECK(run_init(&c, 0, sgd()) == TR_OK && tr_load(&c.t, path) == TR_OK && same_params(&a, &c));
  CHECK(run_fit(&a, 60, 0.5, TR_CLIP_NORM, 2, TR_NONFINITE_IGNORE) == TR_OK);
  CHECK(run_fit(&c, 60, 0.5, TR_CLIP_NORM, 2, TR_NONFINITE_IGNORE) == TR_OK && same_params(&a, &c));
  /* CPU -> device, the same again */
  CHECK(run_fit(&c, 70, 0.5, TR_CLIP_NORM, 2, TR_NONFINITE_IGNORE) == TR_OK && tr_save(&c.t, path) == TR_OK);
  CHECK(tr_load(&b.t, path) == TR_OK && same_params(&b, &c) && b.t.global_step == 70);
  CHECK(run_fit(&b, 80, 0.5, TR_CLIP_NORM, 2, TR_NONFINITE_IGNORE) == TR_OK);
  CHECK(run_fit(&c, 80, 0.5, TR_CLIP_NORM, 2, TR_NONFINITE_IGNORE) == TR_OK && same_params(&b, &c));
  /* a corrupt file: refused, nothing changed, the device buffers are the model's again */
  f = fopen(bad, "wb");
  CHECK(f && fwrite("not a checkpoint", 1, 16, f) == 16);
  if (f) fclose(f);
  before = (float *)malloc(b.net.num_params * 4);
  memcpy(before, b.net.params, b.net.num_params * 4);
  CHECK(tr_load(&b.t, bad) == TR_ERR_FORMAT && b.t.model.params == b.net.params && b.t.model.grads == b.net.grads);
  CHECK(memcmp(before, b.net.params, b.net.num_params * 4) == 0);
  free(before);
  run_free(&a); run_free(&b); run_free(&c);
}

static void errors(void) {
  static run r;
  int k;
  cuda_host_no_device = 1;
  CHECK(run_init(&r, 1, adamw()) == TR_ERR_DEVICE && strstr(tr_error(&r.t), "no CUDA device") != NULL);
  run_free(&r);
  cuda_host_no_device = 0;
  for (k = 0; k < 5; k++) { /* each of the device allocations failing in turn */
    cuda_host_fail_malloc_after = k;
    CHECK(run_init(&r, 1, adamw()) == TR_ERR_DEVICE && strstr(tr_error(&r.t), "out of memory (emulated)") != NULL);
    run_free(&r);
  }
  cuda_host_fail_malloc_after = -1;
  CHECK(run_init(&r, 1, sgd()) == TR_OK); /* SGD with momentum: one state buffer */
  run_free(&r);
}

/* ---- the standard callbacks on a device model, against the same callbacks on the CPU model --------- */
static hk_signal gm_seen(hk_ctx *ctx, void *user) { /* what gradient_monitor published, on each logged step */
  run *r = (run *)user;
  const tr_gradient_monitor_state *g = tr_gradient_monitor_get(ctx->reg, r->h);
  char name[96];
  double x;
  int k;
  if (g->checks == r->checks) return HK_CONTINUE;
  r->checks = g->checks;
  r->seen[r->n_seen++] = g->total_norm;
  for (k = 0; k < ctx->n_tensors; k++) {
    snprintf(name, sizeof name, "grad_2.0_norm/%s", ctx->grads[k].name);
    CHECK(hk_metric_get(ctx, name, &x));
    r->seen[r->n_seen++] = x;
  }
  if (hk_metric_get(ctx, "grad_abs_p50", &x)) r->seen[r->n_seen++] = x;
  if (hk_metric_get(ctx, "grad_abs_p90", &x)) r->seen[r->n_seen++] = x;
  for (k = 0; g->histogram && k < g->histogram->n_bins; k++) r->seen[r->n_seen++] = (double)g->histogram->counts[k];
  if (g->histogram) r->seen[r->n_seen++] = g->histogram->min;
  CHECK(r->n_seen < 2048 - 64);
  return HK_CONTINUE;
}

/* 30 steps, logged every 3rd: the same norms (bitwise on emulated kernels; the GPU's within the norm's
   1e-10), one wait per logged step, or one per tensor with percentiles and a histogram */
static void gm_case(const char *pct, int bins) {
  static run c, d;
  unsigned long long before;
  tr_gradient_monitor_desc g = { .log_frequency = 3, .percentiles = pct, .histogram_bins = bins };
  CHECK(run_init_views(&c, 0, adamw(), 1) == TR_OK && run_init_views(&d, 1, adamw(), 1) == TR_OK);
  CHECK(tr_gradient_monitor(c.t.reg, &g, &c.h) == TR_OK && tr_gradient_monitor(d.t.reg, &g, &d.h) == TR_OK);
  CHECK(hk_on(c.t.reg, HK_ON_TRAIN_BATCH_END, gm_seen, &c, NULL, NULL) == HK_OK);
  CHECK(hk_on(d.t.reg, HK_ON_TRAIN_BATCH_END, gm_seen, &d, NULL, NULL) == HK_OK);
  CHECK(run_fit(&c, 30, 0, TR_CLIP_NORM, 1, TR_NONFINITE_IGNORE) == TR_OK);
  before = tr_cuda_sync_count();
  CHECK(run_fit(&d, 30, 0, TR_CLIP_NORM, 1, TR_NONFINITE_IGNORE) == TR_OK);
  CHECK(tr_cuda_sync_count() - before == (unsigned long long)(10 * (pct[0] || bins ? MLP_NUM_TENSORS : 1)));
  CHECK(c.checks == 10 && d.checks == 10 && c.n_seen == d.n_seen && c.n_seen >= 10 * (1 + MLP_NUM_TENSORS));
  CHECK(memcmp(c.seen, d.seen, sizeof c.seen) == 0 && same_params(&c, &d));
  run_free(&c); run_free(&d);
}

static const float *ema_avg(run *r) { return tr_ema_get(r->t.reg, r->h)->average; } /* host memory here */

/* EMA (or SWA) on both: no wait per step; validation with the average swapped in; checkpoints across */
static void ema_case(tr_ema_desc e, const char *dir) {
  static run c, d, x;
  char path[512];
  double lc = 0, ld = 0;
  size_t bytes;
  unsigned long long before;
  snprintf(path, sizeof path, "%s/cuda_host_ema.ckpt", dir);
  CHECK(run_init_views(&c, 0, sgd(), 1) == TR_OK && run_init_views(&d, 1, sgd(), 1) == TR_OK);
  bytes = c.net.num_params * 4;
  CHECK(tr_ema(c.t.reg, &e, &c.h) == TR_OK && tr_ema(d.t.reg, &e, &d.h) == TR_OK);
  CHECK(run_fit(&c, 30, 0, TR_CLIP_NORM, 1, TR_NONFINITE_IGNORE) == TR_OK);
  before = tr_cuda_sync_count();
  CHECK(run_fit(&d, 30, 0, TR_CLIP_NORM, 1, TR_NONFINITE_IGNORE) == TR_OK);
  CHECK(tr_cuda_sync_count() - before == 0); /* the average never waits */
  CHECK(tr_ema_get(d.t.reg, d.h)->on_device && !tr_ema_get(c.t.reg, c.h)->on_device);
  CHECK(tr_ema_get(c.t.reg, c.h)->n_averaged > 0 && tr_ema_get(c.t.reg, c.h)->n_averaged == tr_ema_get(d.t.reg, d.h)->n_averaged);
  CHECK(ema_avg(&c) && ema_avg(&d) && memcmp(ema_avg(&c), ema_avg(&d), bytes) == 0 && same_params(&c, &d));
  CHECK(tr_validate(&c.t, &c.vdata, 0, &lc) == TR_OK && tr_validate(&d.t, &d.vdata, 0, &ld) == TR_OK && lc == ld);
  CHECK(same_params(&c, &d) && !tr_ema_get(d.t.reg, d.h)->swapped);
  /* device -> CPU: the average through a checkpoint, then both go on */
  CHECK(tr_save(&d.t, path) == TR_OK);
  CHECK(run_init_views(&x, 0, sgd(), 1) == TR_OK && tr_ema(x.t.reg, &e, &x.h) == TR_OK && tr_load(&x.t, path) == TR_OK);
  CHECK(ema_avg(&x) && memcmp(ema_avg(&x), ema_avg(&d), bytes) == 0);
  run_free(&x);
  /* CPU -> a fresh device trainer: loaded before its fit, it goes to the device at the start */
  CHECK(tr_save(&c.t, path) == TR_OK);
  CHECK(run_init_views(&x, 1, sgd(), 1) == TR_OK && tr_ema(x.t.reg, &e, &x.h) == TR_OK && tr_load(&x.t, path) == TR_OK);
  CHECK(run_fit(&c, 40, 0, TR_CLIP_NORM, 1, TR_NONFINITE_IGNORE) == TR_OK);
  CHECK(run_fit(&x, 40, 0, TR_CLIP_NORM, 1, TR_NONFINITE_IGNORE) == TR_OK);
  CHECK(same_params(&c, &x) && memcmp(ema_avg(&c), ema_avg(&x), bytes) == 0);
  /* a device trainer with an average on the device loads one: it replaces it there */
  CHECK(tr_load(&d.t, path) == TR_OK && memcmp(ema_avg(&d), ema_avg(&x), bytes) != 0);
  CHECK(tr_save(&x.t, path) == TR_OK && tr_load(&d.t, path) == TR_OK && memcmp(ema_avg(&d), ema_avg(&x), bytes) == 0);
  run_free(&c); run_free(&d); run_free(&x);
}

/* The sweep on both: the same curve and suggestion, the state restored, the fit that follows the same */
static void lrf_case(void) {
  static run c, d;
  const tr_lr_finder_state *sc, *sd;
  unsigned long long before;
  tr_lr_finder_desc l = { .num_training_steps = 40, .min_lr = 1e-5, .max_lr = 10, .verbose = TR_NO };
  CHECK(run_init(&c, 0, adamw()) == TR_OK && run_init(&d, 1, adamw()) == TR_OK);
  CHECK(tr_lr_finder(c.t.reg, &l, &c.h) == TR_OK && tr_lr_finder(d.t.reg, &l, &d.h) == TR_OK);
  CHECK(run_fit(&c, 10, 0.5, TR_CLIP_NORM, 1, TR_NONFINITE_IGNORE) == TR_OK);
  before = tr_cuda_sync_count();
  CHECK(run_fit(&d, 10, 0.5, TR_CLIP_NORM, 1, TR_NONFINITE_IGNORE) == TR_OK);
  sc = tr_lr_finder_get(c.t.reg, c.h);
  sd = tr_lr_finder_get(d.t.reg, d.h);
  CHECK(tr_cuda_sync_count() - before == (unsigned long long)sd->n + 1); /* each step's loss, and the restore */
  CHECK(sc->done && sd->done && sc->n == sd->n && sc->n >= 13 && sc->suggestion == sd->suggestion && hk_is_finite(sd->suggestion));
  CHECK(memcmp(sc->lrs, sd->lrs, (size_t)sc->n * 8) == 0 && memcmp(sc->losses, sd->losses, (size_t)sc->n * 8) == 0);
  CHECK(c.t.optim.lr == d.t.optim.lr && same_params(&c, &d) && c.t.global_step == 10 && d.t.global_step == 10);
  run_free(&c); /* the restore is exact: the same fit, at the suggested lr, without a sweep */
  CHECK(run_init(&c, 1, adamw()) == TR_OK);
  c.t.optim.lr = d.t.optim.lr;
  CHECK(run_fit(&c, 10, 0.5, TR_CLIP_NORM, 1, TR_NONFINITE_IGNORE) == TR_OK && same_params(&c, &d));
  run_free(&c); run_free(&d);
}

/* A loop of your own with device views: no trainer to reach them through, so a clear refusal */
static void own_loop_refused(void) {
  hk_registry *reg = hk_create(NULL);
  hk_tensor v[1];
  hk_ctx ctx;
  float x[4] = { 0 };
  memset(&ctx, 0, sizeof ctx);
  memset(v, 0, sizeof v);
  v[0].name = "w"; v[0].data = x; v[0].count = 4; v[0].on_device = 1;
  ctx.params = ctx.grads = v;
  ctx.n_tensors = 1;
  ctx.stage = HK_STAGE_FIT;
  CHECK(reg && tr_ema(reg, &(tr_ema_desc){ 0 }, NULL) == TR_OK);
  CHECK(HK_FIRE(reg, HK_ON_TRAIN_START, &ctx) == HK_FAIL && ctx.hook_failure);
  CHECK(ctx.hook_failure && strstr(ctx.hook_failure, "callback 'ema' failed in on_train_start: tensor 'w' is in device memory") && strstr(ctx.hook_failure, "train.h's trainer"));
  hk_destroy(reg);
}

/* nan_guard reads the norm and the loss: two waits per step, no false alarm */
static void callbacks(const char *dir) {
  static run r;
  hk_handle h;
  unsigned long long before;
  gm_case("", 0);
  gm_case("50,90", 8);
  ema_case((tr_ema_desc){ .decay = 0.9 }, dir);
  ema_case((tr_ema_desc){ .decay = 0.8, .every_n_steps = 2, .start_step = 5, .copy_at_end = TR_YES }, dir);
  ema_case((tr_ema_desc){ .swa_epoch_start = 1 }, dir);
  lrf_case();
  own_loop_refused();
  CHECK(run_init(&r, 1, adamw()) == TR_OK);
  CHECK(tr_nan_guard(r.t.reg, &(tr_nan_guard_desc){ 0 }, &h) == TR_OK);
  before = tr_cuda_sync_count();
  CHECK(run_fit(&r, 20, 1.0, TR_CLIP_NORM, 1, TR_NONFINITE_IGNORE) == TR_OK);
  CHECK(tr_nan_guard_get(r.t.reg, h)->found == 0 && tr_cuda_sync_count() - before == 40);
  run_free(&r);
}

/* device_stats's NVML path without a GPU (TRAIN_CUDA): NVML missing, NVML without the process's device, and
   tests/fake_nvml.c standing in for one. A loop of your own, 8 steps, a record every 4 (2 readings). */
typedef struct ds_seen { int records, with_gpu; double util, used, total; } ds_seen;
static hk_signal ds_grab(hk_ctx *ctx, void *u) { /* after device_stats's on_log: what the loggers would write */
  ds_seen *s = (ds_seen *)u;
  tr_log_record *r = tr_log_current(ctx);
  double v;
  if (!r) return HK_CONTINUE;
  s->records += tr_log_get(r, "device_stats/rss_mb", &v) && v > 0;
  if (tr_log_get(r, "device_stats/gpu_util_percent", &s->util) | tr_log_get(r, "device_stats/gpu_mem_used_mb", &s->used) |
      tr_log_get(r, "device_stats/gpu_mem_total_mb", &s->total))
    s->with_gpu++;
  return HK_CONTINUE;
}
static tr_device_stats_state ds_run(const char *lib, const char *bus, ds_seen *seen, char *said, size_t cap) {
  hk_registry *reg = hk_create(NULL);
  FILE *log = tmpfile();
  hk_handle h = 0;
  hk_ctx *ctx;
  tr_device_stats_state st;
  size_t n;
  memset(seen, 0, sizeof *seen);
  memset(&st, 0, sizeof st);
  cuda_host_pci_bus_id = bus;
  CHECK(log != NULL && tr_device_stats(reg, &(tr_device_stats_desc){ .nvml_library = lib }, &h) == TR_OK);
  CHECK(hk_on(reg, HK_ON_LOG, ds_grab, seen, &(hk_opts){ .name = "grab", .monitor = 1, .order = 1 << 20 }, NULL) == HK_OK);
  ctx = tr_run_begin(reg, &(tr_run_desc){ .epochs = TR_NO, .max_steps = 8, .log_every_n_steps = 4, .lr = 0.1, .log = log,
                                          .no_signals = 1, .validation = TR_NO }, NULL);
  while (ctx && tr_run_next(reg)) { ctx->loss = 1; (void)tr_run_update(reg); }
  CHECK(tr_run_end(reg) == TR_OK);
  if (tr_device_stats_get(reg, h)) st = *tr_device_stats_get(reg, h);
  hk_destroy(reg);
  rewind(log);
  n = fread(said, 1, cap - 1, log);
  said[n] = 0;
  fclose(log);
  cuda_host_pci_bus_id = NULL;
  return st;
}
static int count_in(const char *text, const char *what) {
  int n = 0;
  for (; (text = strstr(text, what)) != NULL; text++) n++;
  return n;
}
static void device_stats(const char *dir) {
  char said[4096], fake[1024];
  ds_seen seen;
  tr_device_stats_state st;
  /* no NVML: said once, no GPU metric anywhere, the host's in both records */
  st = ds_run("libtr-no-such-nvml.so.1", "00000000:65:00.0", &seen, said, sizeof said);
  CHECK(st.gpu == -1 && st.readings == 2 && seen.records == 2 && seen.with_gpu == 0 && isnan(st.gpu_util_percent));
  CHECK(count_in(said, "device_stats: no GPU metrics: libtr-no-such-nvml.so.1") == 1);
  printf("device_stats without NVML says, once: %s", said);
  /* NVML there, the process has no CUDA device */
  snprintf(fake, sizeof fake, "%s/libfake_nvml.so", dir);
  st = ds_run(fake, NULL, &seen, said, sizeof said);
  CHECK(st.gpu == -1 && seen.records == 2 && seen.with_gpu == 0);
  CHECK(count_in(said, "device_stats: no GPU metrics: no CUDA device: no CUDA-capable device is detected (emulated)") == 1);
  /* NVML and the device: its values, in MB, in both records */
  st = ds_run(fake, "00000000:65:00.0", &seen, said, sizeof said);
  CHECK(st.gpu == 1 && seen.records == 2 && seen.with_gpu == 2 && said[0] == 0);
  CHECK(seen.util == 42 && seen.used == 1024 && seen.total == 8192 && st.gpu_mem_total_mb == 8192);
  /* the real library name: a machine without it says so once; with it, this process has no CUDA device */
  st = ds_run("libnvidia-ml.so.1", NULL, &seen, said, sizeof said);
  CHECK(st.gpu == -1 && seen.with_gpu == 0 && count_in(said, "device_stats: no GPU metrics") == 1);
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : ".";
  same_steps(adamw(), 0, TR_CLIP_NORM, 1, 0);
  same_steps(adamw(), 0.05, TR_CLIP_NORM, 1, 0); /* folded into the update */
  same_steps(adamw(), 0.05, TR_CLIP_NORM, 1, 1); /* applied first: on_gradient_clip listens */
  same_steps(adamw(), 0.02, TR_CLIP_VALUE, 1, 1);
  same_steps(sgd(), 0.05, TR_CLIP_NORM, 3, 0);   /* accumulation: the window's mean on the device */
  same_steps(sgd(), 0.01, TR_CLIP_VALUE, 2, 0);
  groups_case(adamw(), "param_group(match=b*, weight_decay=0); param_group(match=w2, lr_mult=3); param_group(match=b1, frozen=true)");
  groups_case(sgd(), "param_group(match=b*, weight_decay=0.01); param_group(match=w2, lr_mult=3); param_group(match=b1, frozen=true)");
  groups_case(adamw(), "param_group(match=b1, frozen=true); finetuning(match=w1|b2, unfreeze_at_epoch=2, initial_ratio=0.2)");
  waits();
  checkpoints(dir);
  errors();
  callbacks(dir);
  device_stats(dir);
  CHECK(cuda_host_wrong_stream == 0); /* everything went to the model's stream */
  if (failures) { fprintf(stderr, "test_cuda_host: %d check(s) failed\n", failures); return 1; }
  printf("test_cuda_host: train.h's CUDA path on emulated kernels = the CPU path, bit for bit; no wait per step "
         "unless asked; checkpoints across CPU and device; errors: passed\n");
  return 0;
}
