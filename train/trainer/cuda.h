/* train/trainer/cuda.h - the CUDA strategy of the trainer (TRAIN_CUDA). A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_TRAINER_CUDA_H /* part */
#define TRAIN_TRAINER_CUDA_H /* part */
#include "core.h" /* part */

TR__C_BEGIN /* part */
/* The host's waits for the GPU so far (copies back, synchronisations); 0 without TRAIN_CUDA. */
TRAIN_API unsigned long long tr_cuda_sync_count(void);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
/* =================================================================================================
   CUDA (TRAIN_CUDA, in the file nvcc builds): a model with tr_model.on_device = 1 trains on the GPU.
   params and grads are its device buffers, the optimizer state lives on the device, and the step's
   pieces below run kernels/train_cuda.cuh instead of the CPU loops, with the CPU's bits (-fmad=false).
   Nothing in a step waits for the device unless a hook reads a value (tr_cuda_sync_count counts);
   hooks see device views. Checkpoints go through host mirrors, in the CPU's format. In full: docs/cuda.md.
   ================================================================================================= */
#ifdef TRAIN_CUDA
typedef struct tr__device {
  float *m, *v;             /* the optimizer state (t->tr__m / tr__v are its host mirrors) */
  float *params, *grads;    /* the device buffers while host mirrors stand in */
  float *host_params, *host_grads;
  double *partials;         /* TRC_NORM_BLOCKS */
  trc_ctrl *ctrl;           /* the norm, the clip scale: device-side */
  unsigned long long *counts; /* histogram bins */
  int fold_clip;            /* the next update multiplies by ctrl->clip_scale */
  int norm_known;           /* ctrl->norm belongs to the gradients of version norm_version */
  uint64_t norm_version;
  int loss_known;           /* loss holds the device loss of the last training forward */
  double loss;
  int swapped;              /* model.params/grads point at the host mirrors */
  trc_ctrl *tensor_ctrl, *tensor_ctrl_host; /* the callbacks' per-tensor sums */
  float *kept;              /* lr_finder's copy of params, grads, m, v */
} tr__device;

#define TR__DEV(t) ((tr__device *)(t)->tr__dev)

static int tr__dev_ok(tr_trainer *t, int e, const char *what) {
  if (e) tr__fail(t, TR_ERR_DEVICE, "CUDA: %s failed: %s", what, trc_error_string(e));
  return e == 0;
}

/* The gradients' norm on the device; max_norm gives the clip scale (0: none). */
static void tr__dev_norm(tr_trainer *t, double max_norm) {
  tr__device *d = TR__DEV(t);
  if (tr__dev_ok(t, trc_norm(t->model.grads, t->model.n_params, d->partials, d->ctrl, max_norm, 0, t->model.stream), "trc_norm")) {
    d->norm_known = 1;
    d->norm_version = t->ctx.hk__grads_version;
  }
}

/* ctx->grad_norm_source: the only place the norm comes back to the host, when a hook asks. */
static double tr__dev_grad_norm(hk_ctx *ctx, void *user) {
  tr_trainer *t = (tr_trainer *)user;
  tr__device *d = TR__DEV(t);
  double norm = NAN;
  (void)ctx;
  if (!d->norm_known || d->norm_version != t->ctx.hk__grads_version) tr__dev_norm(t, 0);
  if (d->norm_known) tr__dev_ok(t, trc_copy_to_host(&norm, &d->ctrl->norm, sizeof norm, t->model.stream), "copying the norm");
  return norm;
}

static double tr__dev_loss_metric(const hk_ctx *ctx, void *user) {
  tr_trainer *t = (tr_trainer *)user;
  tr__device *d = TR__DEV(t);
  float x = NAN;
  (void)ctx;
  if (!t->model.device_loss || d->loss_known) return t->tr__last_loss;
  if (tr__dev_ok(t, trc_copy_to_host(&x, t->model.device_loss, sizeof x, t->model.stream), "copying the loss")) {
    d->loss_known = 1;
    t->tr__last_loss = x;
  }
  return t->tr__last_loss;
}

static void tr__dev_free(tr_trainer *t) {
  tr__device *d = TR__DEV(t);
  if (!d) return;
  trc_free(d->m); trc_free(d->v); trc_free(d->partials); trc_free(d->ctrl); trc_free(d->counts);
  trc_free(d->tensor_ctrl); trc_free(d->kept);
  free(d->host_params); free(d->host_grads); free(d->tensor_ctrl_host);
  free(d);
  t->tr__dev = NULL;
}

/* ---- the standard callbacks' seam (tr__dev_ops, train/battery.h) ---- */
static tr_trainer *tr__dev_of(hk_ctx *ctx) { return (tr_trainer *)ctx->trainer; }
static int tr__dev_hook_ok(hk_ctx *ctx, int e, const char *what) {
  if (e) hk_fail(ctx, "CUDA: %s failed: %s", what, trc_error_string(e));
  return e ? -1 : 0;
}
static float *tr__dev_alloc(hk_ctx *ctx, size_t n) {
  void *p = NULL;
  int e = trc_malloc(&p, n * sizeof(float));
  e = e ? e : trc_memset(p, 0, n * sizeof(float), tr__dev_of(ctx)->model.stream);
  if (tr__dev_hook_ok(ctx, e, "allocating device memory")) { trc_free(p); return NULL; }
  return (float *)p;
}
static void tr__dev_release(void *d) { trc_free(d); }
static int tr__dev_to_host_bytes(hk_ctx *ctx, void *dst, const void *d_src, size_t bytes) {
  return tr__dev_hook_ok(ctx, trc_copy_to_host(dst, d_src, bytes, tr__dev_of(ctx)->model.stream), "copying to the host");
}
static int tr__dev_to_device_bytes(hk_ctx *ctx, void *d_dst, const void *src, size_t bytes) {
  return tr__dev_hook_ok(ctx, trc_copy_to_device(d_dst, src, bytes, tr__dev_of(ctx)->model.stream), "copying to the device");
}
static int tr__dev_copy(hk_ctx *ctx, float *d_dst, const float *d_src, size_t n) {
  return tr__dev_hook_ok(ctx, trc_copy_on_device(d_dst, d_src, n * sizeof(float), tr__dev_of(ctx)->model.stream), "a device copy");
}
static int tr__dev_swap(hk_ctx *ctx, float *d_a, float *d_b, size_t n) {
  return tr__dev_hook_ok(ctx, trc_swap(d_a, d_b, n, tr__dev_of(ctx)->model.stream), "trc_swap");
}
static int tr__dev_average(hk_ctx *ctx, float *d_avg, const float *d_p, size_t n, double w) {
  return tr__dev_hook_ok(ctx, trc_ema(d_avg, d_p, n, w, tr__dev_of(ctx)->model.stream), "trc_ema");
}
/* trc_norm per selected view into its own control block, then one copy */
static int tr__dev_grad_sumsq(hk_ctx *ctx, const int *sel, int n, double *out) {
  tr_trainer *t = tr__dev_of(ctx);
  tr__device *d = TR__DEV(t);
  int j, e = 0;
  if (n > t->model.n_tensors) return hk_fail(ctx, "CUDA: %d tensors asked, the model has %d", n, t->model.n_tensors), -1;
  for (j = 0; j < n && !e; j++) {
    const hk_tensor *g = &ctx->grads[sel[j]];
    e = trc_norm(g->data, g->count, d->partials, &d->tensor_ctrl[j], 0, 0, t->model.stream);
  }
  e = e ? e : trc_copy_to_host(d->tensor_ctrl_host, d->tensor_ctrl, sizeof(trc_ctrl) * (size_t)n, t->model.stream);
  if (tr__dev_hook_ok(ctx, e, "the per-tensor norms")) return -1;
  for (j = 0; j < n; j++) out[j] = d->tensor_ctrl_host[j].sumsq;
  return 0;
}
static const tr__dev_ops tr__dev_ops_table = { tr__dev_alloc, tr__dev_release, tr__dev_to_host_bytes, tr__dev_to_device_bytes,
                                               tr__dev_copy, tr__dev_swap, tr__dev_average, tr__dev_grad_sumsq };

/* lr_finder's keep (restore = 0) and restore of params, grads and the optimizer state, on the device. */
static tr_err tr__dev_keep(tr_trainer *t, int restore) {
  tr__device *d = TR__DEV(t);
  size_t n = t->model.n_params, bytes = n * sizeof(float);
  float *bufs[4];
  int i, e = 0;
  bufs[0] = t->model.params; bufs[1] = t->model.grads; bufs[2] = d->m; bufs[3] = d->v;
  if (!restore && !d->kept) e = trc_malloc((void **)&d->kept, 4 * bytes);
  for (i = 0; i < 4 && !e && d->kept; i++)
    if (bufs[i]) e = restore ? trc_copy_on_device(bufs[i], d->kept + (size_t)i * n, bytes, t->model.stream)
                             : trc_copy_on_device(d->kept + (size_t)i * n, bufs[i], bytes, t->model.stream);
  if (restore) {
    e = e ? e : trc_synchronize(t->model.stream); /* the buffer is freed now */
    trc_free(d->kept);
    d->kept = NULL;
    d->norm_known = 0;
    d->fold_clip = 0;
  }
  return tr__dev_ok(t, e, restore ? "restoring the state on the device" : "keeping the state on the device") ? TR_OK : t->tr__err;
}

/* tr_init's part: the device state; the norm and train/loss read from the device. */
static tr_err tr__dev_init(tr_trainer *t) {
  tr__device *d;
  size_t n = t->model.n_params, bytes = n * sizeof(float);
  char why[256];
  int i, e = 0;
  if (!t->model.on_device) return TR_OK;
  if (!trc_device_ok(why, sizeof why))
    return tr__fail(t, TR_ERR_DEVICE, "tr_init: model.on_device, but no CUDA device can be used (%s)", why);
  d = (tr__device *)calloc(1, sizeof *d);
  if (!d) return tr__fail(t, TR_ERR_NOMEM, "tr_init: out of memory");
  t->tr__dev = d;
  d->host_params = (float *)malloc(bytes);
  d->host_grads = (float *)malloc(bytes);
  d->tensor_ctrl_host = (trc_ctrl *)malloc(sizeof(trc_ctrl) * (size_t)(t->model.n_tensors > 0 ? t->model.n_tensors : 1));
  if (!d->host_params || !d->host_grads || !d->tensor_ctrl_host) return tr__fail(t, TR_ERR_NOMEM, "tr_init: out of memory for the host mirrors");
  if (t->tr__n_buf >= 1) e = e ? e : trc_malloc((void **)&d->m, bytes);
  if (t->tr__n_buf >= 2) e = e ? e : trc_malloc((void **)&d->v, bytes);
  e = e ? e : trc_malloc((void **)&d->partials, TRC_NORM_BLOCKS * sizeof(double));
  e = e ? e : trc_malloc((void **)&d->ctrl, sizeof(trc_ctrl));
  e = e ? e : trc_malloc((void **)&d->counts, (4096 + 3) * sizeof(unsigned long long));
  e = e ? e : trc_malloc((void **)&d->tensor_ctrl, sizeof(trc_ctrl) * (size_t)(t->model.n_tensors > 0 ? t->model.n_tensors : 1));
  if (d->m) e = e ? e : trc_memset(d->m, 0, bytes, t->model.stream);
  if (d->v) e = e ? e : trc_memset(d->v, 0, bytes, t->model.stream);
  if (!tr__dev_ok(t, e, "allocating the optimizer state on the device")) return t->tr__err;
  for (i = 0; i < 2 * t->model.n_tensors; i++) t->tr__views[i].on_device = 1;
  t->ctx.grad_norm_source = tr__dev_grad_norm;
  t->ctx.grad_norm_source_user = t;
  *tr__dev_seam() = &tr__dev_ops_table; /* the callbacks' way to the device */
  if (hk_metric_lazy(&t->ctx, "train/loss", tr__dev_loss_metric, t) != HK_OK)
    return tr__fail(t, TR_ERR_NOMEM, "tr_init: could not register the metrics");
  return TR_OK;
}

/* Host mirrors stand in for the device buffers while a checkpoint is written or read. */
static tr_err tr__dev_to_host(tr_trainer *t) {
  tr__device *d = TR__DEV(t);
  size_t bytes = t->model.n_params * sizeof(float);
  int e = 0;
  if (!d || d->swapped) return TR_OK;
  e = e ? e : trc_copy_to_host(d->host_params, t->model.params, bytes, t->model.stream);
  if (t->model.grads) e = e ? e : trc_copy_to_host(d->host_grads, t->model.grads, bytes, t->model.stream);
  if (d->m) e = e ? e : trc_copy_to_host(t->tr__m, d->m, bytes, t->model.stream);
  if (d->v) e = e ? e : trc_copy_to_host(t->tr__v, d->v, bytes, t->model.stream);
  if (!tr__dev_ok(t, e, "copying the state from the device")) return t->tr__err;
  d->params = t->model.params;
  d->grads = t->model.grads;
  t->model.params = d->host_params;
  if (t->model.grads) t->model.grads = d->host_grads;
  d->swapped = 1;
  return TR_OK;
}

/* After a load's commit (or its rollback): what the host mirrors hold goes to the device. */
static void tr__dev_upload(tr_trainer *t) {
  tr__device *d = TR__DEV(t);
  size_t bytes = t->model.n_params * sizeof(float);
  int e = 0;
  if (!d || !d->swapped) return;
  e = e ? e : trc_copy_to_device(d->params, d->host_params, bytes, t->model.stream);
  if (d->grads) e = e ? e : trc_copy_to_device(d->grads, d->host_grads, bytes, t->model.stream);
  if (d->m) e = e ? e : trc_copy_to_device(d->m, t->tr__m, bytes, t->model.stream);
  if (d->v) e = e ? e : trc_copy_to_device(d->v, t->tr__v, bytes, t->model.stream);
  e = e ? e : trc_synchronize(t->model.stream); /* the mirrors may change again as soon as we return */
  tr__dev_ok(t, e, "copying the state to the device");
  d->norm_known = 0;
}

static void tr__dev_unswap(tr_trainer *t) {
  tr__device *d = TR__DEV(t);
  if (!d || !d->swapped) return;
  t->model.params = d->params;
  if (d->grads) t->model.grads = d->grads;
  d->swapped = 0;
}

/* The step's pieces on the device (called by the CPU's when TR__ON_DEVICE). */
static void tr__dev_zero_grad(tr_trainer *t) {
  tr__dev_ok(t, trc_zero(t->model.grads, t->model.n_params, t->model.stream), "zeroing the gradients");
}

static void tr__dev_scale_grads(tr_trainer *t, float k) {
  tr__dev_ok(t, trc_scale(t->model.grads, t->model.n_params, k, t->model.stream), "scaling the gradients");
}

static void tr__dev_clip(tr_trainer *t, const tr_config *c) {
  tr__device *d = TR__DEV(t);
  if (c->gradient_clip_algorithm == TR_CLIP_NORM) {
    tr__dev_norm(t, c->gradient_clip_val);
    if (HK_ACTIVE(t->reg, HK_ON_GRADIENT_CLIP)) /* the hook must see clipped gradients: clip now */
      tr__dev_ok(t, trc_apply_clip(t->model.grads, t->model.n_params, d->ctrl, t->model.stream), "clipping");
    else d->fold_clip = 1;
  } else if (tr__dev_ok(t, trc_clip_value(t->model.grads, t->model.n_params, (float)c->gradient_clip_val, d->partials,
                                         d->ctrl, t->model.stream), "clipping by value")) {
    d->norm_known = 1; /* the norm before clipping, as hk_grad_norm promises */
    d->norm_version = t->ctx.hk__grads_version;
  }
}

static void tr__dev_update(tr_trainer *t, double lr) {
  tr__device *d = TR__DEV(t);
  const tr_optim *o = &t->optim;
  const trc_ctrl *ctrl = d->fold_clip ? d->ctrl : NULL;
  size_t n = t->model.n_params;
  int e;
  d->fold_clip = 0;
  if (t->tr__grouped) { /* parameter groups: one launch per run of equal settings */
    tr_optim og = *o;
    size_t off, len;
    int i = 0;
    e = 0;
    while (!e && i < t->ctx.n_tensors) {
      tr_tensor_opt s;
      float *p, *g;
      i = tr__group_run(t, i, lr, &s, &off, &len);
      p = t->model.params + off, g = t->model.grads + off;
      og.weight_decay = s.weight_decay;
      if (s.frozen) e = ctrl ? trc_apply_clip(g, len, ctrl, t->model.stream) : 0; /* clipped as hooks see it */
      else if (o->kind == TR_OPTIM_ADAMW) e = trc_adamw(p, g, d->m + off, d->v + off, len, tr_adamw_coefs(&og, s.lr, s.step), ctrl, t->model.stream);
      else e = trc_sgd(p, g, d->m ? d->m + off : NULL, len, tr_sgd_coefs(&og, s.lr, !t->tr__has_momentum || s.step == 1), ctrl, t->model.stream);
    }
    if (o->kind == TR_OPTIM_SGD && o->momentum > 0) t->tr__has_momentum = 1;
  } else if (o->kind == TR_OPTIM_ADAMW)
    e = trc_adamw(t->model.params, t->model.grads, d->m, d->v, n, tr_adamw_coefs(o, lr, t->global_step + 1), ctrl, t->model.stream);
  else {
    e = trc_sgd(t->model.params, t->model.grads, d->m, n, tr_sgd_coefs(o, lr, !t->tr__has_momentum), ctrl, t->model.stream);
    if (o->momentum > 0) t->tr__has_momentum = 1;
  }
  tr__dev_ok(t, e, "the optimizer step");
}

/* After a training forward: the loss stays on the device unless the non-finite policy must see it. */
static void tr__dev_forward_loss(tr_trainer *t, double *loss) {
  tr__device *d = TR__DEV(t);
  if (!t->model.device_loss) return;
  d->loss_known = 0;
  *loss = t->tr__last_loss = NAN;
  if (t->tr__cfg && t->tr__cfg->on_nonfinite_loss != TR_NONFINITE_IGNORE) *loss = tr__dev_loss_metric(&t->ctx, t);
}

/* An evaluation batch's loss (one copy). */
static double tr__dev_eval_loss(tr_trainer *t, double loss) {
  float x = NAN;
  if (!t->model.device_loss) return loss;
  tr__dev_ok(t, trc_copy_to_host(&x, t->model.device_loss, sizeof x, t->model.stream), "copying the loss");
  return x;
}

static tr_err tr__dev_histogram(tr_trainer *t, float lo, float hi, int bins, uint64_t *counts) { /* tr_grad_histogram */
  tr__device *d = TR__DEV(t);
  unsigned long long c[4096 + 3];
  int b, e = trc_histogram(t->model.grads, t->model.n_params, lo, hi, bins, d->counts, t->model.stream);
  e = e ? e : trc_copy_to_host(c, d->counts, sizeof *c * (size_t)(bins + 3), t->model.stream);
  if (e) return tr__refuse(t, "tr_grad_histogram: CUDA: %s", trc_error_string(e));
  for (b = 0; b < bins + 3; b++) counts[b] = c[b];
  return TR_OK;
}
TRAIN_API unsigned long long tr_cuda_sync_count(void) { return trc_sync_count(); }
#else /* no TRAIN_CUDA: a device model is refused; the rest is empty */
static tr_err tr__dev_init(tr_trainer *t) {
  return t->model.on_device ? tr__fail(t, TR_ERR_DEVICE, "tr_init: model.on_device needs train.h's implementation "
                                       "compiled with TRAIN_CUDA by nvcc (see train/trainer/cuda.h)") : TR_OK;
}
static void tr__dev_free(tr_trainer *t) { (void)t; }
static tr_err tr__dev_to_host(tr_trainer *t) { (void)t; return TR_OK; }
static void tr__dev_upload(tr_trainer *t) { (void)t; }
static void tr__dev_unswap(tr_trainer *t) { (void)t; }
TR__SHARED tr_err tr__dev_keep(tr_trainer *t, int restore) { (void)t; (void)restore; return TR_OK; }
TR__SHARED void tr__dev_zero_grad(tr_trainer *t) { (void)t; }
TR__SHARED double tr__dev_eval_loss(tr_trainer *t, double loss) { (void)t; return loss; }
TRAIN_API unsigned long long tr_cuda_sync_count(void) { return 0; }
#endif
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
