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
     - standard callbacks: gradient_monitor, ema, lr_finder refuse a device model; nan_guard works */
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
typedef struct run { spirals train, val; mlp net; float dev_loss; tr_data data, vdata; tr_trainer t; double losses[200], norms[200]; int n_read; } run;

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

static tr_err run_init(run *r, int dev, tr_optim optim) {
  memset(r, 0, sizeof *r);
  CHECK(spirals_make(&r->train, 100, 3, 0.2f, 1) == 0 && spirals_make(&r->val, 30, 3, 0.2f, 2) == 0);
  CHECK(mlp_init(&r->net, 2, 32, 3, 32, 42) == 0);
  r->data = spirals_tr_data(&r->train, 32, 1);
  r->vdata = spirals_tr_data(&r->val, 32, 0);
  /* one tensor: the emulated norm (hk_sumsq of the whole buffer) then has the CPU's bits */
  return tr_init(&r->t, &(tr_desc){ .model = { .params = r->net.params, .grads = r->net.grads, .n_params = r->net.num_params,
      .user = r, .forward = dev ? dev_forward : cpu_forward, .backward = backward, .on_device = dev,
      .device_loss = dev ? &r->dev_loss : NULL, .stream = dev ? &cuda_host_stream : NULL }, .optim = optim, .seed = 3 });
}
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

/* The standard callbacks on a device model: those that read tensors on the host refuse it clearly;
   nan_guard works (through hk_grad_norm and the loss metric: two copies per step, no false alarm). */
static void callbacks(void) {
  static run r;
  hk_handle h;
  unsigned long long before;
  CHECK(run_init(&r, 1, adamw()) == TR_OK);
  /* made from the registry alone, they learn where the tensors live when the fit starts, and refuse then */
  CHECK(tr_gradient_monitor(r.t.reg, &(tr_gradient_monitor_desc){ 0 }, &h) == TR_OK);
  CHECK(run_fit(&r, 2, 0, TR_CLIP_NORM, 1, TR_NONFINITE_IGNORE) == TR_ERR_HOOK && strstr(tr_error(&r.t), "gradient_monitor: tensor"));
  CHECK(strstr(tr_error(&r.t), "is in device memory") && hk_off(r.t.reg, h) == HK_OK);
  CHECK(tr_ema(r.t.reg, &(tr_ema_desc){ 0 }, &h) == TR_OK);
  CHECK(run_fit(&r, 2, 0, TR_CLIP_NORM, 1, TR_NONFINITE_IGNORE) == TR_ERR_HOOK && strstr(tr_error(&r.t), "ema: tensor"));
  CHECK(hk_off(r.t.reg, h) == HK_OK);
  CHECK(tr_lr_finder(r.t.reg, &(tr_lr_finder_desc){ 0 }, &h) == TR_OK);
  CHECK(run_fit(&r, 2, 0, TR_CLIP_NORM, 1, TR_NONFINITE_IGNORE) == TR_ERR_HOOK && strstr(tr_error(&r.t), "lr_finder: tensor"));
  CHECK(hk_off(r.t.reg, h) == HK_OK);
  CHECK(hk_spec_apply(r.t.reg, "gradient_monitor(log_frequency=1)") == HK_OK);
  CHECK(run_fit(&r, 2, 0, TR_CLIP_NORM, 1, TR_NONFINITE_IGNORE) == TR_ERR_HOOK && strstr(tr_error(&r.t), "is in device memory"));
  CHECK(hk_off(r.t.reg, hk_find(r.t.reg, "gradient_monitor")) == HK_OK);
  CHECK(tr_nan_guard(r.t.reg, &(tr_nan_guard_desc){ 0 }, &h) == TR_OK);
  before = tr_cuda_sync_count();
  CHECK(run_fit(&r, 20, 1.0, TR_CLIP_NORM, 1, TR_NONFINITE_IGNORE) == TR_OK);
  CHECK(tr_nan_guard_get(r.t.reg, h)->found == 0 && tr_cuda_sync_count() - before == 40);
  run_free(&r);
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : ".";
  same_steps(adamw(), 0, TR_CLIP_NORM, 1, 0);
  same_steps(adamw(), 0.05, TR_CLIP_NORM, 1, 0); /* folded into the update */
  same_steps(adamw(), 0.05, TR_CLIP_NORM, 1, 1); /* applied first: on_gradient_clip listens */
  same_steps(adamw(), 0.02, TR_CLIP_VALUE, 1, 1);
  same_steps(sgd(), 0.05, TR_CLIP_NORM, 3, 0);   /* accumulation: the window's mean on the device */
  same_steps(sgd(), 0.01, TR_CLIP_VALUE, 2, 0);
  waits();
  checkpoints(dir);
  errors();
  callbacks();
  CHECK(cuda_host_wrong_stream == 0); /* everything went to the model's stream */
  if (failures) { fprintf(stderr, "test_cuda_host: %d check(s) failed\n", failures); return 1; }
  printf("test_cuda_host: train.h's CUDA path on emulated kernels = the CPU path, bit for bit; no wait per step "
         "unless asked; checkpoints across CPU and device; errors: passed\n");
  return 0;
}
