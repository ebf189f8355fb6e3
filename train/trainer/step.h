/* train/trainer/step.h - the work of a training step: fetch, forward, backward, clipping, the optimizer. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_TRAINER_STEP_H /* part */
#define TRAIN_TRAINER_STEP_H /* part */
#include "checkpoint.h" /* part */

TR__C_BEGIN /* part */
/* The gradients' histogram into counts[bins + 3]: equal-width bins over [lo, hi), then below lo, at or
   above hi, NaN/Inf. bins in 1..4096, lo < hi, both finite; the same counts on the CPU and the GPU. */
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

/* Lazy metrics: a call when a hook asks, so the step loop never touches the metrics map. */
static double tr__lr_metric(const hk_ctx *ctx, void *user) { (void)ctx; return ((const tr_trainer *)user)->lr; }
static double tr__loss_metric(const hk_ctx *ctx, void *user) { (void)ctx; return ((const tr_trainer *)user)->tr__last_loss; }

/* ---- log records and requests: the run layer's, as in any loop ------------------------------------ */
static TR__NOINLINE void tr__log_record(tr_trainer *t, const char *stage) {
  if (t->tr__err) return;
  if (tr_run_log(t->reg, &t->ctx, stage) == HK_FAIL) hk_flow_raise(&t->tr__flow, HK_FAIL); /* a hook of on_log failed */
  if (t->ctx.hook_failure || HK_FLOW_HAS(&t->tr__flow, HK_FLOW_FAIL) || tr__interrupts(t) >= 2) tr__settle(t);
}
/* Hooks' requests among `which`, done by the run layer (checkpoints, log lines, records). */
static void tr__hand_requests(tr_trainer *t, unsigned which) {
  unsigned later = t->ctx.requests & ~which;
  t->ctx.requests &= which;
  if (t->ctx.requests & HK_REQUEST_CHECKPOINT) tr__dist_paths(t); /* rank 0's paths, on every rank */
  if (t->ctx.requests && !t->tr__err) (void)tr_run_requests(t->reg, &t->ctx, &t->tr__flow);
  t->ctx.requests |= later; /* (asked during the saves: the next safe point's) */
  if (t->ctx.hook_failure || HK_FLOW_HAS(&t->tr__flow, HK_FLOW_FAIL)) tr__settle(t);
}

/* ---- the work of a step -------------------------------------------------------------------------
   Each piece does nothing once skipped (or failed), so a batch reads as a straight list. */

/* Batch b into ctx.batch. */
static void *tr__fetch(tr_trainer *t, const tr_data *d, int64_t b, const char *what) {
  void *batch = NULL;
  int rc = d->next ? d->next(d->user, &batch) : d->get(d->user, tr__dist_index(t, b), &batch);
  if (rc) tr__fail(t, TR_ERR_MODEL, "%s data: %s(%lld) returned %d", what, d->next ? "next" : "get", (long long)b, rc);
  t->ctx.batch_idx = b;
  t->ctx.batch = batch;
  t->ctx.outputs = NULL;
  t->ctx.loss = NAN; /* NaN until the forward pass */
  return batch;
}

/* A training forward; a non-finite loss as tr_config.on_nonfinite_loss says. */
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

/* Once per window, in its first micro-batch that gets this far (Lightning's). */
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
  t->tr__accum_n++; /* gradients in the window's sum */
}

/* Clipping by norm on the host, over views that tile the gradient, reads the norm right after the averaging. */
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
/* The averaging's scale and the norm's pass (tr__grad_pass_source's bits) in one pass. */
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
/* The window's sum divided by accumulate_grad_batches times the ranks (Lightning divides every loss), or
   by the micro-batches that ran backward; a window where none did gets no step. */
static void tr__average_window(tr_trainer *t) {
  int64_t by = t->tr__cfg->accumulate_mean_of_window ? t->tr__accum_n
             : (int64_t)t->tr__accum * (t->ctx.world_size > 1 ? t->ctx.world_size : 1);
  if (t->tr__accum_n == 0) hk_flow_raise(&t->tr__flow, HK_SKIP_STEP);
  if (tr__skips(t, HK_FLOW_SKIP_STEP) || by == 1) return;
  if (tr__clips_by_norm(t)) { tr__scale_norm(t, 1.0f / (float)by); return; } /* the norm is read next */
#ifdef TRAIN_CUDA
  if (TR__ON_DEVICE(t)) tr__dev_scale_grads(t, 1.0f / (float)by); else
#endif
  tr_scale(t->model.grads, t->model.n_params, 1.0f / (float)by, t->tr__threads);
  hk_grads_changed(&t->ctx);
}

/* Computed by ctx.grad_norm_source once per change of the gradients (the shared pass, or the device's). */
static double tr__grad_norm(tr_trainer *t) { return hk_grad_norm(&t->ctx); }
static double tr__grad_norm_metric(const hk_ctx *ctx, void *user) { (void)ctx; return tr__grad_norm((tr_trainer *)user); }

/* By norm (clip_grad_norm_: limit / (norm + 1e-6) when below 1) or by value; hk_grad_norm stays the norm
   before clipping for the rest of the step. */
static void tr__clip_gradients(tr_trainer *t) {
  const tr_config *c = t->tr__cfg;
  if (tr__skips(t, HK_FLOW_SKIP_STEP)) return;
#ifdef TRAIN_CUDA
  if (TR__ON_DEVICE(t)) { tr__dev_clip(t, c); return; }
#endif
  if (c->gradient_clip_algorithm == TR_CLIP_NORM) {
    double coef = c->gradient_clip_val / (tr__grad_norm(t) + 1e-6);
    if (coef >= 1.0) return;
    if (HK_ACTIVE(t->reg, HK_ON_GRADIENT_CLIP)) /* a hook will look: scale now */
      tr_scale(t->model.grads, t->model.n_params, (float)coef, t->tr__threads);
    else /* else the update's pass scales them: one pass saved */
      t->tr__gscale = (float)coef;
  } else { /* in hk_grad_norm's order: the same bits */
    float hi = (float)c->gradient_clip_val;
    double sum = 0;
    int k;
    for (k = 0; k < t->ctx.n_tensors; k++)
      sum += tr_clamp_sumsq(t->ctx.grads[k].data, t->ctx.grads[k].count, -hi, hi, t->tr__threads);
    hk_grad_norm_set(&t->ctx, sqrt(sum));
  }
}

/* No step with an lr float32 cannot use (inf or NaN poisons every parameter; a decay to 0 trains nothing):
   the run fails naming the schedule. Set-up refuses what it can foresee; this catches the rest. */
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

/* Per run of tensors with equal settings (torch's param_groups); a frozen run only clipped, as hooks see it. */
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

/* One update, step global_step + 1, over the parameters whose state this rank keeps (zero: its shard). */
static void tr__update(tr_trainer *t, double lr) {
  const tr_optim *o = &t->optim;
  size_t n = t->model.n_params, lo = t->tr__opt_lo, k = t->tr__opt_n;
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
  if (t->tr__gscale != 1.0f && k < n) { /* sharded: the rest clipped too, for hooks */
    tr_scale(t->model.grads, lo, t->tr__gscale, t->tr__threads);
    tr_scale(g + k, n - lo - k, t->tr__gscale, t->tr__threads);
  }
  t->tr__gscale = 1.0f;
}

/* global_step moves before on_after_optimizer_step (the context contract). */
static void tr__optimizer_step(tr_trainer *t) {
  if (tr__skips(t, HK_FLOW_SKIP_STEP)) return;
  t->lr = tr__current_lr(t); /* a hook may have scaled it */
  if (!tr__lr_usable(t, t->lr)) { tr__dist_params(t); return; } /* (the ranks exchange all the same) */
  tr__update(t, t->lr);
  tr__dist_params(t);
  t->ctx.global_step = ++t->global_step;
}

/* A window's end: its bookkeeping and a skipped step are forgotten. */
static void tr__end_window(tr_trainer *t) {
  t->tr__accum_pos = t->tr__accum_n = 0;
  t->tr__grads_zeroed = 0;
  t->tr__gscale = 1.0f; /* (a skipped step's) */
  hk_flow_clear(&t->tr__flow, HK_SIGNAL_BIT(HK_SKIP_STEP));
}

TR__C_END /* part */
#endif /* implementation */
#endif /* part */
