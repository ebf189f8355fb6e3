/* train/trainer/step.h - the work of a training step: fetch, forward, backward, clipping, the optimizer. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_TRAINER_STEP_H /* part */
#define TRAIN_TRAINER_STEP_H /* part */
#include "checkpoint.h" /* part */

TR__C_BEGIN /* part */
/* A histogram of the gradients (every view, in order): counts[0..bins-1] for equal-width bins over
   [lo, hi), then counts[bins] = values below lo, counts[bins+1] = at or above hi, counts[bins+2] =
   NaN/Inf (bins+3 entries, yours). The same binning on the CPU and on the GPU (one copy back from the
   device). bins in 1..4096, lo < hi, both finite. */
TRAIN_API tr_err tr_grad_histogram(tr_trainer *t, float lo, float hi, int bins, uint64_t *counts);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
TRAIN_API tr_err tr_grad_histogram(tr_trainer *t, float lo, float hi, int bins, uint64_t *counts) {
  float width;
  int k;
  if (!t || !counts) return TR_ERR_INVALID;
  if (bins < 1 || bins > 4096 || !hk_is_finitef(lo) || !hk_is_finitef(hi) || !(lo < hi))
    return tr__refuse(t, "tr_grad_histogram: bins must be in 1..4096 (got %d) and lo < hi, both finite (got %g, %g)",
                      bins, (double)lo, (double)hi);
  if (!t->model.grads) return tr__refuse(t, "tr_grad_histogram: model.grads is not set");
  memset(counts, 0, sizeof *counts * (size_t)(bins + 3));
#ifdef TRAIN_CUDA
  if (TR__ON_DEVICE(t)) return tr__dev_histogram(t, lo, hi, bins, counts);
#endif
  width = (hi - lo) / (float)bins;
  for (k = 0; k < t->ctx.n_tensors; k++) {
    const float *x = t->ctx.grads[k].data;
    size_t i;
    for (i = 0; i < t->ctx.grads[k].count; i++) counts[tr_hist_bin(x[i], lo, hi, width, bins)]++;
  }
  return TR_OK;
}

/* ---- setup --------------------------------------------------------------------------------------- */

/* The trainer's metrics are lazy: reading them costs a function call when a hook asks for one, and
   the step loop never touches the metrics map (no hashing, no allocation). The gradient norm is
   hooks.h's hk_grad_norm: computed when first asked after the gradients changed, then shared by
   every hook and by clipping. */
static double tr__lr_metric(const hk_ctx *ctx, void *user) { (void)ctx; return ((const tr_trainer *)user)->lr; }
static double tr__loss_metric(const hk_ctx *ctx, void *user) { (void)ctx; return ((const tr_trainer *)user)->tr__last_loss; }

/* ---- log records and requests: the run layer's (train/run.h), as in any loop ----------------------- */
static TR__NOINLINE void tr__log_record(tr_trainer *t, const char *stage) {
  if (t->tr__err) return;
  if (tr_run_log(t->reg, &t->ctx, stage) == HK_FAIL) hk_flow_raise(&t->tr__flow, HK_FAIL); /* a hook of on_log failed */
  if (t->ctx.hook_failure || HK_FLOW_HAS(&t->tr__flow, HK_FLOW_FAIL) || tr__interrupts(t) >= 2) tr__settle(t);
}
/* What hooks asked for (ctx.requests, only those in `which`) and is the run layer's to do: checkpoints (through
   tr__save_checkpoint), a log line and, in a fit, a training record. A failed save has failed the run. */
static void tr__hand_requests(tr_trainer *t, unsigned which) {
  unsigned later = t->ctx.requests & ~which;
  t->ctx.requests &= which;
  if (t->ctx.requests & HK_REQUEST_CHECKPOINT) tr__dist_paths(t); /* rank 0's paths, on every rank */
  if (t->ctx.requests && !t->tr__err) (void)tr_run_requests(t->reg, &t->ctx, &t->tr__flow);
  t->ctx.requests |= later; /* (and what hooks asked for during the saves: the next safe point's) */
  if (t->ctx.hook_failure || HK_FLOW_HAS(&t->tr__flow, HK_FLOW_FAIL)) tr__settle(t);
}

/* ---- the work of a step -------------------------------------------------------------------------
   Each piece does nothing once a hook has skipped it (or the run has failed), so the batch below
   reads as a straight list. */

/* Fetch batch b of data into ctx.batch (random access, or the iterator's next). */
static void *tr__fetch(tr_trainer *t, const tr_data *d, int64_t b, const char *what) {
  void *batch = NULL;
  int rc = d->next ? d->next(d->user, &batch) : d->get(d->user, tr__dist_index(t, b), &batch);
  if (rc) tr__fail(t, TR_ERR_MODEL, "%s data: %s(%lld) returned %d", what, d->next ? "next" : "get", (long long)b, rc);
  t->ctx.batch_idx = b;
  t->ctx.batch = batch;
  t->ctx.outputs = NULL;
  t->ctx.loss = NAN; /* until the forward pass; it stays NaN in a batch skipped before it */
  return batch;
}

/* The forward pass of a training batch. A non-finite loss (tested on the bits, so -Ofast builds
   catch it) fails the run, skips the batch or is ignored, as tr_config.on_nonfinite_loss says. */
static void tr__forward(tr_trainer *t, void *batch) {
  const tr_config *c = t->tr__cfg;
  double loss = 0;
  int rc;
  if (tr__skips(t, HK_FLOW_SKIP_BATCH)) return;
  rc = t->model.forward(t->model.user, batch, 1, &loss);
  if (rc) { tr__fail(t, TR_ERR_MODEL, "model.forward returned %d on training batch %lld", rc, (long long)t->epoch_batch); return; }
#ifdef TRAIN_CUDA
  if (TR__ON_DEVICE(t)) tr__dev_forward_loss(t, &loss); /* stays on the device unless needed */
#endif
  t->ctx.loss = t->tr__last_loss = loss;
  if (hk_is_finite(loss) || c->on_nonfinite_loss == TR_NONFINITE_IGNORE) return;
  if (c->on_nonfinite_loss == TR_NONFINITE_FAIL) {
    tr__fail(t, TR_ERR_NONFINITE, "the training loss is %f at epoch %lld, batch %lld, step %lld", loss,
             (long long)t->epoch, (long long)t->epoch_batch, (long long)t->global_step);
    return;
  }
  tr__warn(t, "the training loss is %f at epoch %lld, batch %lld: batch skipped", loss, (long long)t->epoch, (long long)t->epoch_batch);
  hk_flow_raise(&t->tr__flow, HK_SKIP_BATCH);
}

/* Zero the gradients once per accumulation window, in its first micro-batch that gets this far
   (Lightning: when batch_idx % accumulate_grad_batches == 0). */
static void tr__zero_grad(tr_trainer *t) {
  if (tr__skips(t, HK_FLOW_SKIP_BATCH)) return;
#ifdef TRAIN_CUDA
  if (TR__ON_DEVICE(t)) tr__dev_zero_grad(t); else
#endif
  tr_zero(t->model.grads, t->model.n_params, t->tr__threads);
  hk_grads_changed(&t->ctx);
  t->tr__grads_zeroed = 1;
}

static void tr__backward(tr_trainer *t, void *batch) {
  int rc;
  if (tr__skips(t, HK_FLOW_SKIP_BATCH)) return;
  rc = t->model.backward(t->model.user, batch);
  if (rc) { tr__fail(t, TR_ERR_MODEL, "model.backward returned %d on training batch %lld", rc, (long long)t->epoch_batch); return; }
  hk_grads_changed(&t->ctx);
  t->tr__accum_n++; /* micro-batches of this window whose gradient is in the sum */
}

/* The window's gradient sum divided by accumulate_grad_batches (times the ranks), as Lightning divides
   every loss by it, however many micro-batches the window had; with accumulate_mean_of_window by the
   micro-batches that ran backward (on every rank: tr__dist_grads counts them all). A window where none
   did gets no step. */
/* Clipping by norm on the host, over views that tile the gradient: it reads hk_grad_norm right after the averaging. */
static int tr__clips_by_norm(const tr_trainer *t) {
  const tr_config *c = t->tr__cfg;
  size_t n = 0;
  int k;
  if (!(c->gradient_clip_val > 0) || c->gradient_clip_algorithm != TR_CLIP_NORM || TR__ON_DEVICE(t) ||
      t->ctx.grad_norm_source != tr__grad_pass_source || t->ctx.n_tensors > t->tr__gpass.n)
    return 0;
  for (k = 0; k < t->ctx.n_tensors; k++) n += t->ctx.grads[k].count;
  return n == t->model.n_params;
}
/* The gradients times s and the shared pass's sums of squares of the result in one pass (tr__grad_pass_source's
   work, the same bits as a tr_scale and then that pass): the averaging's scale and the norm clipping reads. */
static void tr__scale_norm(tr_trainer *t, float s) {
  tr__grad_pass *p = &t->tr__gpass;
  double sum = 0;
  int k;
  hk_grads_changed(&t->ctx);
  for (k = 0; k < t->ctx.n_tensors; k++) sum += p->sq[k] = tr_scale_sumsq(t->ctx.grads[k].data, t->ctx.grads[k].count, s, t->tr__threads);
  p->ok = 1;
  p->version = t->ctx.hk__grads_version;
  hk_grad_norm_set(&t->ctx, sqrt(sum));
}
static void tr__average_window(tr_trainer *t) {
  int64_t by = t->tr__cfg->accumulate_mean_of_window ? t->tr__accum_n
             : (int64_t)t->tr__accum * (t->ctx.world_size > 1 ? t->ctx.world_size : 1);
  if (t->tr__accum_n == 0) hk_flow_raise(&t->tr__flow, HK_SKIP_STEP);
  if (tr__skips(t, HK_FLOW_SKIP_STEP) || by == 1) return;
  if (tr__clips_by_norm(t)) { tr__scale_norm(t, 1.0f / (float)by); return; } /* the norm is read next: one pass */
#ifdef TRAIN_CUDA
  if (TR__ON_DEVICE(t)) tr__dev_scale_grads(t, 1.0f / (float)by); else
#endif
  tr_scale(t->model.grads, t->model.n_params, 1.0f / (float)by, t->tr__threads);
  hk_grads_changed(&t->ctx);
}

/* hk_grad_norm's value: computed by ctx.grad_norm_source when nobody has asked since the gradients
   changed, on the host the shared pass (tr__grad_pass_source: tr_sumsq per view with the trainer's threads,
   in view order: hk_grad_norm's bits; the per-view sums kept for gradient_monitor), on the device cuda.h's. */
static double tr__grad_norm(tr_trainer *t) { return hk_grad_norm(&t->ctx); }
static double tr__grad_norm_metric(const hk_ctx *ctx, void *user) { (void)ctx; return tr__grad_norm((tr_trainer *)user); }

/* Clip by the total L2 norm (PyTorch's clip_grad_norm_: scale by limit / (norm + 1e-6) when that is
   below 1) or by value. The norm before clipping stays hk_grad_norm's value for the rest of the step:
   clipping by norm reads it (computed once, shared with every hook that asks); clipping by value
   computes it in the same pass, so a hook reading it later finds the norm before clipping. */
static void tr__clip_gradients(tr_trainer *t) {
  const tr_config *c = t->tr__cfg;
  if (tr__skips(t, HK_FLOW_SKIP_STEP)) return;
#ifdef TRAIN_CUDA
  if (TR__ON_DEVICE(t)) { tr__dev_clip(t, c); return; }
#endif
  if (c->gradient_clip_algorithm == TR_CLIP_NORM) {
    double coef = c->gradient_clip_val / (tr__grad_norm(t) + 1e-6);
    if (coef >= 1.0) return;
    if (HK_ACTIVE(t->reg, HK_ON_GRADIENT_CLIP)) /* a hook will look at the clipped gradients: scale now */
      tr_scale(t->model.grads, t->model.n_params, (float)coef, t->tr__threads);
    else /* nobody looks before the update: its pass scales them (and stores them) on the way, one pass saved */
      t->tr__gscale = (float)coef;
  } else { /* over the views (they tile the buffer), in hk_grad_norm's order: the same bits */
    float hi = (float)c->gradient_clip_val;
    double sum = 0;
    int k;
    for (k = 0; k < t->ctx.n_tensors; k++)
      sum += tr_clamp_sumsq(t->ctx.grads[k].data, t->ctx.grads[k].count, -hi, hi, t->tr__threads);
    hk_grad_norm_set(&t->ctx, sqrt(sum));
  }
}

/* No step with a learning rate that float32 updates cannot use: inf or NaN (or above FLT_MAX, inf once
   rounded) would make every parameter inf / NaN, and a step or exponential decay that rounds to 0
   trains nothing. The run fails instead, naming the schedule (tr_fit refuses at set-up what it can
   foresee; this catches the rest: a run whose length was not known, a hook's tr_lr_scale). */
static int tr__lr_usable(tr_trainer *t, double lr) {
  const tr_sched *s = &t->sched;
  const tr_sched_state *st = t->run ? &t->run->lr_state : NULL;
  int decays = s->kind == TR_SCHED_STEP || s->kind == TR_SCHED_EXPONENTIAL;
  int inf = !hk_is_finite(lr) || lr < 0 || lr > FLT_MAX, zero = !inf && decays && (float)lr == 0;
  char gamma[48] = "", scale[64] = "";
  if (!inf && !zero) return 1;
  if (decays) snprintf(gamma, sizeof gamma, ", gamma %g", s->gamma);
  if (st && st->scale > 0 && st->scale != 1) snprintf(scale, sizeof scale, ", times tr_lr_scale's %g", st->scale);
  tr__fail(t, TR_ERR_INVALID, "step %lld: the learning rate is %g%s (the %s schedule%s%s at scheduler step %lld); no step was "
           "taken with it: give the schedule values that stay finite over the run's length",
           (long long)t->global_step + 1, lr, zero ? ", 0 as a float32: it decayed away" : hk_is_finite(lr) && lr > FLT_MAX ? ", inf as a float32" : "",
           tr_sched_kind_name(s->kind), gamma, scale, (long long)(s->per_epoch ? t->epoch : t->global_step));
  return 0;
}

/* The update with parameter groups: each run of tensors with its own lr, weight decay and step count (torch's
   AdamW over param_groups, one tensor's state per tensor); a frozen run is left alone, its state untouched (its
   gradient is still clipped, as hooks see it). With zero, each run's part in this rank's shard. */
static void tr__update_grouped(tr_trainer *t, double lr) {
  tr_optim o = t->optim;
  size_t lo = t->tr__opt_lo, hi = lo + t->tr__opt_n, off, len, a, b;
  int i = 0;
  while (i < t->ctx.n_tensors) {
    tr_tensor_opt s;
    float *p, *g;
    i = tr__group_run(t, i, lr, &s, &off, &len);
    a = off > lo ? off : lo;
    b = off + len < hi ? off + len : hi;
    if (a >= b) continue; /* (zero: another rank's) */
    p = t->model.params + a, g = t->model.grads + a;
    if (s.frozen) { if (t->tr__gscale != 1.0f) tr_scale(g, b - a, t->tr__gscale, t->tr__threads); continue; }
    o.weight_decay = s.weight_decay;
    if (o.kind == TR_OPTIM_ADAMW) {
      tr_adamw_coef c = tr_adamw_coefs(&o, s.lr, s.step);
      c.gscale = t->tr__gscale;
      tr_adamw_update(p, g, t->tr__m + (a - lo), t->tr__v + (a - lo), b - a, &c, t->tr__threads);
    } else {
      tr_sgd_coef c = tr_sgd_coefs(&o, s.lr, !t->tr__has_momentum || s.step == 1); /* torch: a fresh buffer per tensor */
      c.gscale = t->tr__gscale;
      tr_sgd_update(p, g, t->tr__m ? t->tr__m + (a - lo) : NULL, b - a, &c, t->tr__threads);
    }
  }
  if (o.kind == TR_OPTIM_SGD && o.momentum > 0) t->tr__has_momentum = 1;
}

/* One optimizer update with learning rate lr; t->global_step + 1 is the step number. The per-step
   scalars in double, then one float pass (train/math.h) over the parameters whose optimizer state this
   rank keeps: all, or with tr_desc.zero its shard (tr__dist_params then brings the others'). */
static void tr__update(tr_trainer *t, double lr) {
  const tr_optim *o = &t->optim;
  size_t n = t->model.n_params, lo = t->tr__opt_lo, k = t->tr__opt_n; /* the parameters whose state this rank keeps */
  float *p = t->model.params + lo, *g = t->model.grads + lo;
#ifdef TRAIN_CUDA
  if (TR__ON_DEVICE(t)) { tr__dev_update(t, lr); return; }
#endif
  if (t->tr__grouped) tr__update_grouped(t, lr);
  else if (o->kind == TR_OPTIM_ADAMW) {
    tr_adamw_coef c = tr_adamw_coefs(o, lr, t->global_step + 1);
    c.gscale = t->tr__gscale;
    tr_adamw_update(p, g, t->tr__m, t->tr__v, k, &c, t->tr__threads);
  } else {
    tr_sgd_coef c = tr_sgd_coefs(o, lr, !t->tr__has_momentum);
    c.gscale = t->tr__gscale;
    tr_sgd_update(p, g, t->tr__m, k, &c, t->tr__threads);
    if (o->momentum > 0) t->tr__has_momentum = 1;
  }
  if (t->tr__gscale != 1.0f && k < n) { /* sharded: the rest of the gradient is clipped too, as hooks see it unsharded */
    tr_scale(t->model.grads, lo, t->tr__gscale, t->tr__threads);
    tr_scale(g + k, n - lo - k, t->tr__gscale, t->tr__threads);
  }
  t->tr__gscale = 1.0f;
}

/* The update, then global_step moves (before on_after_optimizer_step, as in the context contract). */
static void tr__optimizer_step(tr_trainer *t) {
  if (tr__skips(t, HK_FLOW_SKIP_STEP)) return;
  t->lr = tr__current_lr(t); /* a hook may have scaled it in this batch (tr_lr_scale) */
  if (!tr__lr_usable(t, t->lr)) { tr__dist_params(t); return; } /* (sharded: the other ranks exchange all the same) */
  tr__update(t, t->lr);
  tr__dist_params(t);
  t->ctx.global_step = ++t->global_step;
}

/* The end of an accumulation window: its bookkeeping and a skipped step are forgotten. */
static void tr__end_window(tr_trainer *t) {
  t->tr__accum_pos = t->tr__accum_n = 0;
  t->tr__grads_zeroed = 0;
  t->tr__gscale = 1.0f; /* (only a skipped step leaves one behind; its gradients are dropped) */
  hk_flow_clear(&t->tr__flow, HK_SIGNAL_BIT(HK_SKIP_STEP));
}

TR__C_END /* part */
#endif /* implementation */
#endif /* part */
