/* train/trainer/fit.h - the trainer's loops: tr_init, tr_fit, tr_validate / tr_test / tr_predict. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_TRAINER_FIT_H /* part */
#define TRAIN_TRAINER_FIT_H /* part */
#include "lr_finder.h" /* part */
#include "../factories.h" /* part */

TR__C_BEGIN /* part */
/* Hand over the model's buffers after tr_init, for a model that allocates them late (llm.c allocates
   its gradients on the first backward: allocate them in a configure_model hook and pass them here).
   NULL keeps a buffer as it is. Not during a training step. The layout (n_params, tensors) stays. */
TRAIN_API tr_err tr_set_buffers(tr_trainer *t, float *params, float *grads);

/* Set up a trainer: validates the model and the optimizer/schedule settings, allocates the optimizer
   state and the tensor views (all allocation happens here, none in the step loop). On error the
   trainer is left freed (tr_free is harmless) and tr_error(t) says why. With TRAIN_MPI and several
   processes it is collective: every rank calls it, and the ranks' models must match (MPI STRATEGY). */
TRAIN_API tr_err tr_init(tr_trainer *t, const tr_desc *desc);
TRAIN_API void   tr_free(tr_trainer *t);

/* Train. Fires setup(fit), configure_model, on_fit_start, the sanity check, on_train_start, the epochs
   (batches, optimizer hooks, validation), on_train_end, on_fit_end, teardown(fit) - in Lightning's
   order. Calling tr_fit again continues from the trainer's counters (raise max_epochs/max_steps). */
TRAIN_API tr_err tr_fit(tr_trainer *t, const tr_config *cfg);

/* Evaluation loops (forward only, no gradients). limit_batches: 0 = all. mean_loss may be NULL; it
   is NaN when no batch was evaluated. The mean also appears as the metric "val/loss" / "test/loss".
   Data without batches runs no loop events at all (setup, configure_model and teardown still run). */
TRAIN_API tr_err tr_validate(tr_trainer *t, const tr_data *data, int64_t limit_batches, double *mean_loss);
TRAIN_API tr_err tr_test(tr_trainer *t, const tr_data *data, int64_t limit_batches, double *mean_loss);
/* Calls model.predict on every batch; hooks see each batch's outputs in on_predict_batch_end. */
TRAIN_API tr_err tr_predict(tr_trainer *t, const tr_data *data, int64_t limit_batches);

/* Micro-batches per optimizer step from the next window on (accumulation_scheduler calls it at each
   on_train_epoch_start). factor >= 1; during a fit only; tr_config.accumulate_grad_batches sets it
   at the start of every fit. TR_ERR_INVALID outside a fit or for factor < 1. */
TRAIN_API tr_err tr_set_accumulation(tr_trainer *t, int factor);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
/* One "key=value" word of the settings (tr__settings): text, or the number v as the loggers write numbers. */
static void tr__setting(tr_trainer *t, const char *key, const char *text, double v) {
  char num[40];
  size_t n = strlen(t->tr__settings);
  if (!text) { tr__num(num, sizeof num, v); text = num; }
  snprintf(t->tr__settings + n, sizeof t->tr__settings - n, "%s%s=%s", n ? " " : "", key, text);
}
/* The trainer's configuration, recorded by the loggers as hyperparameters (c: the fit's, NULL outside one). */
static const char *tr__settings_text(tr_trainer *t, const tr_config *c) {
  t->tr__settings[0] = 0;
  tr__setting(t, "optimizer", t->optim.kind == TR_OPTIM_SGD ? "sgd" : "adamw", 0);
  tr__setting(t, "lr", NULL, t->optim.lr);
  tr__setting(t, "weight_decay", NULL, t->optim.weight_decay);
  if (t->optim.kind == TR_OPTIM_SGD) tr__setting(t, "momentum", NULL, t->optim.momentum);
  else { tr__setting(t, "beta1", NULL, t->optim.beta1); tr__setting(t, "beta2", NULL, t->optim.beta2); tr__setting(t, "eps", NULL, t->optim.eps); }
  tr__setting(t, "scheduler", tr_sched_kind_name(t->sched.kind), 0);
  tr__setting(t, "warmup", NULL, (double)t->sched.warmup);
  tr__setting(t, "seed", NULL, (double)t->seed);
  tr__setting(t, "n_params", NULL, (double)t->model.n_params);
  if (c) {
    tr__setting(t, "max_epochs", NULL, (double)c->max_epochs);
    tr__setting(t, "max_steps", NULL, (double)c->max_steps);
    tr__setting(t, "min_epochs", NULL, (double)c->min_epochs);
    tr__setting(t, "min_steps", NULL, (double)c->min_steps);
    tr__setting(t, "limit_train_batches", NULL, (double)c->limit_train_batches);
    tr__setting(t, "limit_val_batches", NULL, (double)c->limit_val_batches);
    tr__setting(t, "val_every_n_steps", NULL, (double)c->val_every_n_steps);
    tr__setting(t, "val_every_n_epochs", NULL, (double)c->val_every_n_epochs);
    if (c->val_check_interval > 0) tr__setting(t, "val_check_interval", NULL, (double)c->val_check_interval);
    tr__setting(t, "accumulate_grad_batches", NULL, (double)c->accumulate_grad_batches);
    if (c->accumulate_mean_of_window) tr__setting(t, "accumulate_mean_of_window", NULL, 1);
    tr__setting(t, "gradient_clip_val", NULL, c->gradient_clip_val);
    tr__setting(t, "gradient_clip_algorithm", c->gradient_clip_algorithm == TR_CLIP_VALUE ? "value" : "norm", 0);
    tr__setting(t, "log_every_n_steps", NULL, (double)c->log_every_n_steps);
    tr__setting(t, "num_sanity_val_steps", NULL, (double)c->num_sanity_val_steps);
    tr__setting(t, "batch_size", NULL, (double)c->train->batch_size);
  }
  return t->tr__settings;
}

/* Views sorted by offset, for the tiling check. */
static int tr__by_offset(const void *a, const void *b) {
  size_t x = ((const tr_tensor *)a)->offset, y = ((const tr_tensor *)b)->offset;
  return x < y ? -1 : x > y;
}

/* Every parameter must lie in exactly one named tensor: the gradient norm, value clipping and the
   hooks all go through the views, so a gap or an overlap would make them disagree with the update. */
static tr_err tr__check_tiling(tr_trainer *t) {
  int i, n = t->model.n_tensors;
  size_t end = 0;
  tr_tensor *v = (tr_tensor *)malloc(sizeof *v * (size_t)n);
  if (!v) return tr__fail(t, TR_ERR_NOMEM, "tr_init: out of memory checking %d tensors", n);
  memcpy(v, t->model.tensors, sizeof *v * (size_t)n);
  qsort(v, (size_t)n, sizeof *v, tr__by_offset);
  for (i = 0; i < n && v[i].offset == end; i++) end += v[i].count;
  if (i < n || end != t->model.n_params) {
    if (i < n && v[i].offset < end) tr__fail(t, TR_ERR_INVALID, "tr_init: tensors '%s' and '%s' overlap (each parameter must "
                                             "belong to exactly one tensor)", v[i - 1].name, v[i].name);
    else tr__fail(t, TR_ERR_INVALID, "tr_init: parameters %zu..%zu belong to no tensor (the tensors must cover all %zu "
                  "parameters, without gaps)", end, (i < n ? v[i].offset : t->model.n_params) - 1, t->model.n_params);
  }
  free(v);
  return t->tr__err;
}

/* Point the views at the buffers (grads may still be NULL: tr_set_buffers comes later). */
static void tr__point_views(tr_trainer *t) {
  int i, n = t->model.n_tensors;
  for (i = 0; i < n; i++) {
    const tr_tensor *x = &t->model.tensors[i];
    hk_tensor *p = &t->tr__views[i], *g = &t->tr__views[n + i];
    p->name = g->name = x->name;
    p->count = g->count = x->count;
    p->data = t->model.params + x->offset;
    g->data = t->model.grads ? t->model.grads + x->offset : NULL;
  }
  hk_grads_changed(&t->ctx);
}

TRAIN_API tr_err tr_set_buffers(tr_trainer *t, float *params, float *grads) {
  if (!t || !t->tr__views) return TR_ERR_INVALID;
  if (t->tr__accum_pos > 0 || t->tr__grads_zeroed)
    return tr__refuse(t, "tr_set_buffers: an accumulation window is in progress; its gradient sum lives in the "
                      "current buffer (hand buffers over before training, e.g. in configure_model)");
  if (params) t->model.params = params;
  if (grads) t->model.grads = grads;
  tr__point_views(t);
  return TR_OK;
}

static int tr__bad_number(double x, double lo, double hi) { return !hk_is_finite(x) || x < lo || x > hi; }

TRAIN_API void tr_free(tr_trainer *t) {
  if (!t) return;
  tr__dev_free(t);
  hk_ctx_free(&t->ctx);
  hk_bytes_free(&t->tr__data_state);
  tr__asave_free(t->tr__asave); /* the last save in flight ends first */
  t->tr__asave = NULL;
  if (t->run && !t->tr__own_reg && t->run->desc.model_user == (void *)t) { /* the run stays with a registry of the
                                                                             user's: it forgets this trainer */
    tr_run_desc d = t->run->desc;
    d.state = NULL;
    d.n_state = 0;
    d.rolled_back = NULL;
    d.save_checkpoint = NULL;
    d.wait_saves = NULL;
    d.model_user = NULL;
    d.settings = NULL;
    (void)tr_run_setup(t->reg, &d);
  }
  t->run = NULL;
  if (t->tr__own_reg && t->reg) hk_destroy(t->reg);
  free(t->tr__views);
  free(t->tr__m);
  free(t->tr__v);
  free(t->tr__gpass.sq);
  t->tr__gpass.sq = NULL;
  tr__dist_free(t);
  t->reg = NULL;
  t->tr__views = NULL;
  t->tr__m = t->tr__v = NULL;
  t->tr__opt_lo = t->tr__opt_n = 0;
  t->tr__own_reg = 0;
}

/* The training state a rollback puts back (spike_detection): parameters, optimizer state, the step
   count (AdamW's t and the schedule's) and SGD's first-step flag. The data's counters go on. */
static int tr__state_regions(tr_trainer *t) {
  int n = 0;
  size_t bytes = t->model.n_params * sizeof(float), opt = t->tr__opt_n * sizeof(float); /* (zero: this rank's shard) */
  if (t->model.params) { t->tr__state[n].data = t->model.params; t->tr__state[n++].bytes = bytes; }
  if (t->tr__m && opt) { t->tr__state[n].data = t->tr__m; t->tr__state[n++].bytes = opt; } /* (an empty shard: none) */
  if (t->tr__v && opt) { t->tr__state[n].data = t->tr__v; t->tr__state[n++].bytes = opt; }
  t->tr__state[n].data = &t->global_step; t->tr__state[n++].bytes = sizeof t->global_step;
  t->tr__state[n].data = &t->tr__has_momentum; t->tr__state[n++].bytes = sizeof t->tr__has_momentum;
  return n;
}

/* spike_detection put the state back: the window in progress is dropped, ctx follows the step count. */
static void tr__rolled_back(void *user, hk_ctx *ctx) {
  tr_trainer *t = (tr_trainer *)user;
  (void)ctx;
  t->ctx.global_step = t->global_step;
  t->tr__accum_pos = t->tr__accum_n = 0;
  t->tr__grads_zeroed = 0;
  t->tr__gscale = 1.0f;
  t->tr__win_open = 0;
  hk_flow_clear(&t->tr__flow, HK_SIGNAL_BIT(HK_SKIP_STEP));
  hk_grads_changed(&t->ctx);
}

/* What the batteries read from the run layer: this trainer's settings and the fit's config (c; NULL
   outside a fit), given through tr_run_setup as any loop gives them; then, for a run (stage), the run
   entered (tr_run_enter). Set at every run: the trainer's registry may be shared. */
static tr_err tr__configure(tr_trainer *t, hk_stage stage, const tr_config *c) {
  tr_run_desc d = t->run->desc;
  d.log = t->tr__log;
  d.epochs = TR_YES;
  d.optimizer = t->optim.kind == TR_OPTIM_SGD ? "SGD" : "AdamW"; /* Lightning's names for lr_monitor */
  d.momentum = t->optim.kind == TR_OPTIM_SGD ? t->optim.momentum : t->optim.beta1;
  d.weight_decay = t->optim.weight_decay;
  d.lr_per_epoch = t->sched.per_epoch;
  d.settings = tr__settings_text(t, c);
  d.model_user = t;
  d.save_checkpoint = tr__save_checkpoint;
  d.wait_saves = tr__wait_saves;
  d.rolled_back = tr__rolled_back;
  d.state = t->tr__state;
  d.n_state = tr__state_regions(t);
  if (c) {
    d.max_steps = c->max_steps;
    d.max_epochs = c->max_epochs;
    d.min_steps = c->min_steps;
    d.min_epochs = c->min_epochs;
    d.log_every_n_steps = c->log_every_n_steps;
    d.validation = c->val && c->limit_val_batches >= 0 ? TR_YES : TR_NO;
    /* Lightning's rule: monitors act at the epoch's end when validation runs at every epoch's end only
       (or not at all), else at the validation's end */
    d.check_on_train_epoch_end = !c->val || (c->val_every_n_steps <= 0 && c->val_check_interval <= 0 &&
                                              c->val_every_n_epochs == 1) ? TR_YES : TR_NO;
    d.no_resume_message = c->no_resume_message;
    d.new_version_on_resume = c->new_version_on_resume;
    d.accumulate_grad_batches = c->accumulate_grad_batches;
    d.save_to = c->save_to;
    d.no_signals = c->no_sigint; /* the run installs Ctrl-C, SIGTERM and the preemption signal (tr_run_enter) */
    d.preempt = c->preempt;
  }
  if (tr_run_setup(t->reg, &d) != TR_OK) return tr__fail(t, TR_ERR_INVALID, "%s", tr_run_error(t->reg));
  if (stage != HK_STAGE_NONE && tr_run_enter(t->reg, &t->ctx, stage, c ? c->resume_from : NULL) != TR_OK)
    return tr__fail(t, TR_ERR_INVALID, "%s", tr_run_error(t->reg));
  t->tr__grouped = stage != HK_STAGE_NONE && tr_run_grouped(t->reg); /* (asked once: the groups are fixed for the run) */
  return TR_OK;
}

/* The factories of the batteries that need the trainer (TR__LATE_<NAME>: lr_finder), which tr_add_factories
   leaves to it; a name already registered stays. */
static hk_err tr__add_own_factories(hk_registry *reg) {
  hk_err e = HK_OK;
  (void)reg; /* (none compiled: lr_finder left out) */
#define TR__X(name, NAME, p, doc) \
  if (!e) { \
    e = TR__IF(TR__ON_##NAME, TR__IF(TR__LATE_##NAME, tr__##p##_factory_add(reg, #name, doc), HK_OK), HK_OK); \
    if (e == HK_ERR_DUPLICATE) e = HK_OK; \
  }
  TR__BATTERIES(TR__X)
#undef TR__X
  return e;
}
static tr_err tr__init(tr_trainer *t, const tr_desc *d) {
  const tr_model *m;
  tr_optim *o;
  int i, j, n;
  memset(t, 0, sizeof *t);
  t->running = HK_STAGE_NONE;
  t->tr__val_at = -1;
  t->tr__mpi_timeout = 1800;
  if (!d) return tr__fail(t, TR_ERR_INVALID, "tr_init: desc is NULL");
  if (d->mpi_timeout != d->mpi_timeout) return tr__fail(t, TR_ERR_INVALID, "tr_init: mpi_timeout is NaN (seconds; 0 = 1800, < 0 = forever)");
  if (d->mpi_timeout != 0) t->tr__mpi_timeout = d->mpi_timeout < 0 ? -1 : d->mpi_timeout;
  t->tr__log = d->log;
  t->model = d->model;
  m = &t->model;
  if (!m->params || m->n_params == 0)
    return tr__fail(t, TR_ERR_INVALID, "tr_init: model.params and model.n_params are required (model.grads may "
                    "come later, through tr_set_buffers)");
  if (!m->forward) return tr__fail(t, TR_ERR_INVALID, "tr_init: model.forward is required");
  if (m->n_tensors < 0 || (m->n_tensors > 0 && !m->tensors) || (m->tensors && m->n_tensors == 0))
    return tr__fail(t, TR_ERR_INVALID, "tr_init: model.tensors and model.n_tensors must be given together");
  if (!m->tensors) { /* no names given: one tensor covering the whole buffer */
    t->tr__whole.name = "params";
    t->tr__whole.offset = 0;
    t->tr__whole.count = m->n_params;
    t->model.tensors = &t->tr__whole;
    t->model.n_tensors = 1;
  }
  n = t->model.n_tensors;
  for (i = 0; i < n; i++) {
    const tr_tensor *x = &t->model.tensors[i];
    if (!x->name || !x->name[0]) return tr__fail(t, TR_ERR_INVALID, "tr_init: tensor %d has no name", i);
    if (x->offset > m->n_params || x->count > m->n_params - x->offset)
      return tr__fail(t, TR_ERR_INVALID, "tr_init: tensor '%s' (offset %zu, count %zu) lies outside the %zu parameters",
                      x->name, x->offset, x->count, m->n_params);
    for (j = 0; j < i; j++)
      if (strcmp(t->model.tensors[j].name, x->name) == 0)
        return tr__fail(t, TR_ERR_INVALID, "tr_init: two tensors are named '%s'", x->name);
  }
  if (tr__check_tiling(t)) return t->tr__err;
  if (d->threads < 0 || d->threads > 4096)
    return tr__fail(t, TR_ERR_INVALID, "tr_init: threads is %d; it must be 0 (one thread) to 4096", d->threads);
  t->tr__threads = d->threads ? d->threads : 1;
  t->tr__gscale = 1.0f;

  /* The optimizer: fill in the defaults, then check (PyTorch raises on the same values). */
  t->optim = d->optim;
  o = &t->optim;
  if (o->kind != TR_OPTIM_ADAMW && o->kind != TR_OPTIM_SGD)
    return tr__fail(t, TR_ERR_INVALID, "tr_init: optim.kind %d is not an optimizer", (int)o->kind);
  if (o->lr == 0) o->lr = 1e-3;
  if (o->beta1 == 0) o->beta1 = 0.9;
  if (o->beta2 == 0) o->beta2 = 0.999;
  if (o->eps == 0) o->eps = 1e-8;
  if (tr__bad_number(o->lr, 0, HUGE_VAL) || o->lr <= 0) return tr__fail(t, TR_ERR_INVALID, "tr_init: optim.lr must be > 0");
  if (tr__bad_number(o->weight_decay, 0, HUGE_VAL)) return tr__fail(t, TR_ERR_INVALID, "tr_init: optim.weight_decay must be >= 0");
  if (tr__bad_number(o->momentum, 0, HUGE_VAL)) return tr__fail(t, TR_ERR_INVALID, "tr_init: optim.momentum must be >= 0");
  if (tr__bad_number(o->dampening, 0, 1)) return tr__fail(t, TR_ERR_INVALID, "tr_init: optim.dampening must be in [0, 1]");
  if (o->nesterov && (o->momentum <= 0 || o->dampening != 0))
    return tr__fail(t, TR_ERR_INVALID, "tr_init: nesterov needs momentum > 0 and dampening 0");
  if (tr__bad_number(o->beta1, 0, 1) || o->beta1 >= 1 || tr__bad_number(o->beta2, 0, 1) || o->beta2 >= 1)
    return tr__fail(t, TR_ERR_INVALID, "tr_init: optim.beta1 and optim.beta2 must be in [0, 1)");
  if (tr__bad_number(o->eps, 0, HUGE_VAL)) return tr__fail(t, TR_ERR_INVALID, "tr_init: optim.eps must be > 0");

  t->sched = d->sched;
  {
    char why[256];
    if (tr_sched_check(&t->sched, t->sched.total, why, sizeof why)) return tr__fail(t, TR_ERR_INVALID, "tr_init: %s", why);
  }
  t->tr__total = t->sched.total;

  /* Everything the step loop needs is allocated now, once (a sharded state by the strategy, below). */
  t->tr__n_buf = o->kind == TR_OPTIM_ADAMW ? 2 : (o->momentum > 0 ? 1 : 0);
  if (d->zero != 0 && d->zero != 1)
    return tr__fail(t, TR_ERR_INVALID, "tr_init: zero is %d; it must be 0 (off) or 1 (ZeRO-1: each rank keeps its shard of "
                    "the optimizer state; stages 2 and 3 are not implemented)", d->zero);
#ifndef TRAIN_MPI
  if (d->zero)
    return tr__fail(t, TR_ERR_INVALID, "tr_init: zero = 1 shards the optimizer state over MPI ranks, and this build has no "
                    "TRAIN_MPI: define it in the file with TRAIN_IMPLEMENTATION and build with mpicc, or leave zero at 0");
#endif
  if (d->zero && t->tr__n_buf == 0)
    return tr__fail(t, TR_ERR_INVALID, "tr_init: zero = 1 shards the optimizer's state, and plain SGD (momentum 0) has "
                    "none: leave zero at 0, or use AdamW or SGD with momentum");
  if (d->zero && m->on_device)
    return tr__fail(t, TR_ERR_INVALID, "tr_init: zero = 1 shards optimizer state kept on the host; an on_device model's state "
                    "lives on the GPU and is not sharded (train/trainer/cuda.h): leave zero at 0");
  t->tr__zero = d->zero;
  t->tr__views = (hk_tensor *)calloc((size_t)n * 2, sizeof(hk_tensor));
  t->tr__gpass.sq = (double *)calloc((size_t)n, sizeof(double));
  if (!t->tr__views || !t->tr__gpass.sq || (!t->tr__zero && tr__alloc_state(t, 0, m->n_params))) {
    tr_free(t);
    return tr__fail(t, TR_ERR_NOMEM, "tr_init: out of memory for %zu parameters", m->n_params);
  }
  tr__point_views(t);
  if (d->reg) t->reg = d->reg;
  else {
    t->reg = hk_create(NULL);
    if (!t->reg) { tr_free(t); return tr__fail(t, TR_ERR_NOMEM, "tr_init: out of memory for the hook registry"); }
    t->tr__own_reg = 1;
  }
  if (!(t->run = tr_run_get(t->reg))) { tr_free(t); return tr__fail(t, TR_ERR_NOMEM, "tr_init: out of memory for the run"); }

  t->seed = d->seed;
  tr_rng_seed(&t->rng, d->seed);
  t->tr__strict_hook_state = d->strict_hook_state != 0;
  t->tr__async = d->async_save != 0;
  t->tr__max_ckpt = d->max_checkpoint_bytes ? d->max_checkpoint_bytes : tr__default_ckpt_limit(t);
  t->lr = o->lr;
  t->ctx.trainer = t;
  t->ctx.user = d->user;
  t->ctx.params = t->tr__views;
  t->ctx.grads = t->tr__views + n;
  t->ctx.n_tensors = n;
  t->ctx.world_size = 1;
  t->ctx.lr = t->lr;
  t->tr__gpass.n = n; /* the gradient norm: one pass per change, its per-view sums kept for gradient_monitor */
  t->tr__gpass.threads = t->tr__threads;
  t->tr__gpass.sumsq = tr_sumsq;
  t->ctx.grad_norm_source = tr__grad_pass_source; /* (on_device: train/trainer/cuda.h puts its own) */
  t->ctx.grad_norm_source_user = &t->tr__gpass;
  t->tr__last_loss = NAN; /* no training batch yet */
  if (hk_metric_lazy(&t->ctx, "lr", tr__lr_metric, t) != HK_OK ||
      hk_metric_lazy(&t->ctx, "train/loss", tr__loss_metric, t) != HK_OK ||
      hk_metric_lazy(&t->ctx, "grad_norm", tr__grad_norm_metric, t) != HK_OK) {
    tr_free(t);
    return tr__fail(t, TR_ERR_NOMEM, "tr_init: could not register the metrics");
  }
  /* the batteries see this trainer's settings from now on; spec strings such as "early_stopping(...)"
     work at once (tr_run_setup registers the factories; the trainer's own, lr_finder, first) */
  if (tr__add_own_factories(t->reg) != HK_OK) { tr_free(t); return tr__fail(t, TR_ERR_NOMEM, "tr_init: out of memory"); }
  if (tr__configure(t, HK_STAGE_NONE, NULL)) { tr_free(t); return t->tr__err; }
  if (tr__dev_init(t)) { tr_free(t); return t->tr__err; } /* on_device: train/trainer/cuda.h */
  return TR_OK;
}

TRAIN_API tr_err tr_init(tr_trainer *t, const tr_desc *d) {
  tr_err e, mine;
  if (!t) return TR_ERR_INVALID;
  mine = tr__init(t, d);
  /* the MPI strategy (TRAIN_MPI, several processes): every rank agrees on the model, also a rank whose
     own checks failed (it takes part with its error, so that no rank waits for it) */
  if ((e = tr__dist_init(t, mine)) != TR_OK && !mine) {
    char why[sizeof t->error];
    memcpy(why, t->error, sizeof why);
    tr_free(t);
    return tr__fail(t, e, "%s", why);
  }
  return e;
}

/* The failure path: every on_exception handler runs (hooks.h runs them all, even if one fails), then
   teardown, which always runs. Lightning skips teardown on errors; we do not. */
static tr_err tr__abort(tr_trainer *t, hk_stage stage) {
  t->tr__sigint_count = 0; /* handled: an on_exception handler may still save a checkpoint */
  tr_run_stops_handled(t->reg);
  t->ctx.abort_reason = t->error;
  t->ctx.hook_failure = NULL;
  (void)HK_FIRE(t->reg, HK_ON_EXCEPTION, &t->ctx);
  tr__settle(t); /* the run has failed already: a failing handler is reported, not recorded */
  t->ctx.stage = stage;
  tr_run_fail(t->reg, t->tr__err, "%s", t->error); /* teardown's hooks see it (tensorboard's session status) */
  (void)HK_FIRE(t->reg, HK_TEARDOWN, &t->ctx);
  tr__settle(t);
  t->ctx.abort_reason = NULL;
  return t->tr__err;
}

/* ---- the evaluation loops (validation, test, predict, sanity check) ---------------------------------- */

typedef struct tr__loop_events { int start, epoch_start, batch_start, batch_end, epoch_end, end; } tr__loop_events;
static const tr__loop_events tr__val_events = {
  HK_ON_VALIDATION_START, HK_ON_VALIDATION_EPOCH_START, HK_ON_VALIDATION_BATCH_START,
  HK_ON_VALIDATION_BATCH_END, HK_ON_VALIDATION_EPOCH_END, HK_ON_VALIDATION_END };
static const tr__loop_events tr__test_events = {
  HK_ON_TEST_START, HK_ON_TEST_EPOCH_START, HK_ON_TEST_BATCH_START,
  HK_ON_TEST_BATCH_END, HK_ON_TEST_EPOCH_END, HK_ON_TEST_END };
static const tr__loop_events tr__predict_events = {
  HK_ON_PREDICT_START, HK_ON_PREDICT_EPOCH_START, HK_ON_PREDICT_BATCH_START,
  HK_ON_PREDICT_BATCH_END, HK_ON_PREDICT_EPOCH_END, HK_ON_PREDICT_END };

/* What one evaluation loop runs: its events, its data, and where its mean loss goes. */
typedef struct tr__eval {
  const tr__loop_events *ev;
  const tr_data *data;
  int64_t limit;        /* batches; 0 = all */
  int predict;          /* model.predict instead of forward; no loss */
  const char *metric;   /* the mean loss's metric name, or NULL */
  const char *what;     /* for messages */
  double *mean;         /* where the mean loss goes, or NULL */
} tr__eval;

/* Number of batches to run: the data's count (this rank's share of it), capped by limit (> 0). */
static int64_t tr__n_batches(tr_trainer *t, const tr_data *data, int64_t limit, const char *what) {
  int64_t n = t->tr__err ? 0 : data->count(data->user);
  if (n < 0) { tr__fail(t, TR_ERR_MODEL, "%s data: count() returned %lld", what, (long long)n); n = 0; }
  n = tr__dist_shard(t, data, n, !strcmp(what, "train"), what);
  return (limit > 0 && limit < n) ? limit : n;
}

/* One evaluation batch: forward (its loss joins the mean) or predict (ctx->outputs). */
static void tr__eval_forward(tr_trainer *t, const tr__eval *e, void *batch, double *sum, int64_t *counted) {
  double loss = 0;
  int rc;
  if (tr__skips(t, HK_FLOW_SKIP_BATCH)) return;
  if (e->predict) {
    rc = t->model.predict(t->model.user, batch, &t->ctx.outputs);
    if (rc) tr__fail(t, TR_ERR_MODEL, "model.predict returned %d on batch %lld", rc, (long long)t->ctx.batch_idx);
    return;
  }
  rc = t->model.forward(t->model.user, batch, 0, &loss);
  if (rc) { tr__fail(t, TR_ERR_MODEL, "model.forward returned %d on %s batch %lld", rc, e->what, (long long)t->ctx.batch_idx); return; }
#ifdef TRAIN_CUDA
  if (TR__ON_DEVICE(t)) loss = tr__dev_eval_loss(t, loss);
#endif
  t->ctx.loss = loss;
  *sum += loss;
  ++*counted;
}

/* start, epoch_start, every batch, epoch_end, end; nothing at all when the data has no batches. The
   mean loss goes into the metric before epoch_end. HK_STOP_EPOCH and HK_SKIP_BATCH mean this loop's
   epoch and batches: the loop keeps its own (`own`) and gives the training loop's back afterwards.
   HK_STOP ends a standalone run like HK_STOP_EPOCH; inside fit it only asks training to stop (the
   validation finishes), so it stays in the flow for the fit, next to a held stop or a skipped step
   (which a checkpoint written during the validation records). */
static tr_err tr__eval_loop(tr_trainer *t, const tr__eval *e) {
  int in_fit = t->running == HK_STAGE_FIT;
  unsigned own = HK_SIGNAL_BIT(HK_SKIP_BATCH) | HK_SIGNAL_BIT(HK_STOP_EPOCH) | (in_fit ? 0 : HK_SIGNAL_BIT(HK_STOP));
  unsigned ends = in_fit ? HK_SIGNAL_BIT(HK_STOP_EPOCH) : HK_FLOW_STOP_EPOCH;
  unsigned outer = t->tr__flow.signals;
  int64_t b, n, counted = 0;
  double sum = 0, mean = NAN;
  int64_t saved_idx = t->ctx.batch_idx; /* inside fit, the training batch's view comes back after */
  double saved_loss = t->ctx.loss;
  void *saved_batch = t->ctx.batch;

  if (e->mean) *e->mean = NAN;
  n = tr__n_batches(t, e->data, e->limit, e->what);
  if (t->tr__err || tr__dist_empty(t, n)) return t->tr__err; /* no batches (on any rank): no loop at all, as Lightning */
  t->eval_batches = t->run->eval_batches = n;
  hk_flow_clear(&t->tr__flow, own);
  if (e->data->reset && e->data->reset(e->data->user))
    tr__fail(t, TR_ERR_MODEL, "%s data: reset() failed", e->what);
  tr__fire(t, e->ev->start);
  tr__dist_agree(t); /* a refusal at the start on one rank (prediction_writer's) stops every rank before a batch */
  tr__fire(t, e->ev->epoch_start);
  for (b = 0; b < n && !tr__skips(t, ends); b++) {
    void *batch = tr__fetch(t, e->data, b, e->what);
    tr__fire(t, e->ev->batch_start);
    tr__eval_forward(t, e, batch, &sum, &counted);
    tr__fire(t, e->ev->batch_end);
    hk_flow_clear(&t->tr__flow, HK_FLOW_BATCH_SIGNALS);
  }
  t->ctx.outputs = NULL;
  tr__dist_mean(t, &sum, &counted); /* every rank's batches: the global mean */
  if (!e->predict) {
    mean = counted ? sum / (double)counted : NAN; /* NaN: every batch was skipped */
    t->ctx.loss = mean;
    if (e->metric && !t->tr__err && hk_metric_set(&t->ctx, e->metric, mean) != HK_OK)
      tr__fail(t, TR_ERR_NOMEM, "could not set the metric %s", e->metric);
  }
  if (e->mean) *e->mean = mean;
  tr__fire(t, e->ev->epoch_end);
  if (!e->predict && t->ctx.stage != HK_STAGE_SANITY_CHECK && HK_ACTIVE(t->reg, HK_ON_LOG))
    tr__log_record(t, e->ev == &tr__test_events ? "test" : "val");
  tr__fire(t, e->ev->end);
  tr__dist_agree(t);
  t->ctx.batch_idx = saved_idx;
  t->ctx.batch = saved_batch;
  if (in_fit) t->ctx.loss = saved_loss;
  t->tr__flow.signals = (t->tr__flow.signals & ~own) | (outer & own);
  return t->tr__err;
}

/* ---- runs -------------------------------------------------------------------------------------------
   fit, validate, test and predict start and end the same way: refuse to start inside another run,
   setup(stage), configure_model, the body, then teardown; on failure on_exception, then teardown. */

static tr_err tr__idle(tr_trainer *t, const char *fn) {
  if (t->running != HK_STAGE_NONE)
    return tr__refuse(t, "%s called during a %s run (from a hook?); call it when the run has returned", fn, hk_stage_name(t->running));
  t->tr__err = TR_OK;
  t->error[0] = 0;
  return TR_OK;
}

/* The run's start, before anything fires: the run entered (tr__configure), then the ranks' start agreement
   (TRAIN_MPI), which is told a refusal of the run layer's on any rank (a param_group naming no tensor, a bad
   setting): every rank fails with its reason, none is left waiting at the run's first agreement. A rank
   whose run entered leaves it when the agreement fails. */
static tr_err tr__stage_start(tr_trainer *t, hk_stage stage, const tr_config *c, tr_err failed,
                              tr_err (*agree)(tr_trainer *t, hk_stage stage, const void *arg, tr_err failed), const void *arg) {
  int entered = !failed && !tr__configure(t, stage, c);
  tr_err e = agree(t, stage, arg, entered ? TR_OK : failed ? failed : t->tr__err);
  if (e && entered) tr_run_leave(t->reg, &t->ctx); /* nothing fired: the run ends as it began */
  return e;
}

/* After tr__stage_start: setup, configure_model, the body, teardown (on failure on_exception first). */
static tr_err tr__stage_run(tr_trainer *t, hk_stage stage, void (*body)(tr_trainer *t, const void *arg), const void *arg) {
  hk_flow kept = t->tr__flow; /* a fit starts from what a checkpoint holds (a held stop, a skipped step) */
  tr_err e;
  t->tr__sync_only = 0;
  t->running = stage;
  t->ctx.stage = stage;
  t->ctx.requests = 0;
  t->ctx.n_checkpoint_paths = t->ctx.checkpoint_default = 0;
  if (stage != HK_STAGE_FIT) t->tr__flow.signals = 0;
  tr__fire(t, HK_SETUP);
  tr__fire(t, HK_CONFIGURE_MODEL);
  tr__dist_run_dir(t); /* rank 0's run directory (its loggers opened it at setup), on every rank */
  tr__dist_agree(t);
  if (!t->tr__err) body(t, arg);
  tr__saves_settle(t, 1); /* the run ends once its last save is on disk (or has failed it) */
  t->tr__sync_only = 1; /* a save from on_exception or teardown: nothing collects it later */
  tr__dist_agree(t); /* a failure on any rank fails the run on every rank */
  if (t->tr__err) e = tr__abort(t, stage);
  else {
    t->ctx.stage = stage;
    tr__fire(t, HK_TEARDOWN);
    e = TR_OK; /* teardown honours no signal */
    t->error[0] = 0; /* a refused call from a hook (its message) does not outlive a run that succeeded */
  }
  tr__dist_agree(t); /* after on_exception / teardown: a tr_save there on some ranks only meets the others here */
  if (!e && tr__dist_broken(t)) e = t->tr__err;
  t->running = HK_STAGE_NONE;
  tr_run_leave(t->reg, &t->ctx);
  t->ctx.stage = HK_STAGE_NONE;
  t->ctx.batch = NULL;
  t->ctx.requests = 0;
  t->ctx.n_checkpoint_paths = t->ctx.checkpoint_default = 0;
  t->tr__flow.signals = stage == HK_STAGE_FIT ? 0 : kept.signals; /* a fit consumes its signals */
  return e;
}

static void tr__eval_body(tr_trainer *t, const void *arg) {
  tr__eval_loop(t, (const tr__eval *)arg);
  if (!t->tr__err) tr__hand_requests(t, HK_REQUEST_LOG); /* the log line; an evaluation honours nothing else */
}

static tr_err tr__eval_agree(tr_trainer *t, hk_stage stage, const void *arg, tr_err failed) {
  const tr__eval *e = (const tr__eval *)arg;
  return tr__dist_start_eval(t, stage, failed ? NULL : e->data, e->limit, failed);
}
static tr_err tr__eval_run(tr_trainer *t, hk_stage stage, const tr__eval *e, const char *fn) {
  tr_err err = TR_OK;
  if (!t) return TR_ERR_INVALID;
  if (tr__idle(t, fn)) return TR_ERR_INVALID;
  if (!e->data || !e->data->count || !e->data->get == !e->data->next)
    err = tr__fail(t, TR_ERR_INVALID, "%s: the data needs count, and get or next (one of them)", fn);
  else if (e->predict && !t->model.predict) err = tr__fail(t, TR_ERR_INVALID, "tr_predict: model.predict is not set");
  if ((err = tr__stage_start(t, stage, NULL, err, tr__eval_agree, e)) != TR_OK) return err;
  return tr__stage_run(t, stage, tr__eval_body, e);
}

TRAIN_API tr_err tr_validate(tr_trainer *t, const tr_data *data, int64_t limit_batches, double *mean_loss) {
  tr__eval e = { &tr__val_events, data, limit_batches, 0, "val/loss", "validate", mean_loss };
  return tr__eval_run(t, HK_STAGE_VALIDATE, &e, "tr_validate");
}
TRAIN_API tr_err tr_test(tr_trainer *t, const tr_data *data, int64_t limit_batches, double *mean_loss) {
  tr__eval e = { &tr__test_events, data, limit_batches, 0, "test/loss", "test", mean_loss };
  return tr__eval_run(t, HK_STAGE_TEST, &e, "tr_test");
}
TRAIN_API tr_err tr_predict(tr_trainer *t, const tr_data *data, int64_t limit_batches) {
  tr__eval e = { &tr__predict_events, data, limit_batches, 1, NULL, "predict", NULL };
  return tr__eval_run(t, HK_STAGE_PREDICT, &e, "tr_predict");
}

/* ---- the training loop ------------------------------------------------------------------------------- */

static int tr__can_stop(const tr_trainer *t) {
  return t->epoch >= t->tr__cfg->min_epochs && t->global_step >= t->tr__cfg->min_steps;
}
/* A graceful stop (HK_STOP) takes effect once min_epochs and min_steps are reached; until then it is held. */
static int tr__stopping(const tr_trainer *t) {
  return (t->tr__flow.signals & HK_SIGNAL_BIT(HK_STOP)) && tr__can_stop(t);
}


/* This epoch validates (val_every_n_epochs: Lightning's check_val_every_n_epoch). */
static int tr__val_epoch(const tr_trainer *t, const tr_config *c) {
  return c->val_every_n_epochs > 0 && (t->epoch + 1) % c->val_every_n_epochs == 0;
}
/* val_check_interval: the training batch just finished (epoch_batch of them so far) is the N-th, 2N-th, ...
   of its epoch (Lightning: (batch_idx + 1) % val_check_batch == 0, batch_idx counted within the epoch). */
static int tr__val_in_epoch(const tr_trainer *t, const tr_config *c) {
  return c->val_check_interval > 0 && t->epoch_batch > 0 && t->epoch_batch % c->val_check_interval == 0 && tr__val_epoch(t, c);
}
/* Does a validation run right after the training batch in progress: at this step (val_every_n_steps, when
   the batch stepped), at this batch of the epoch (val_check_interval), or at the epoch's end after its last
   batch? (tr_run.validates_next: model_checkpoint ranks a step save due now on that validation's value.) */
static int tr__val_follows(const tr_trainer *t, int stepped) {
  const tr_config *c = t->tr__cfg;
  if (!c->val || c->val->count(c->val->user) <= 0) return 0;
  if (stepped && c->val_every_n_steps > 0 && t->global_step % c->val_every_n_steps == 0) return 1;
  if (c->val_check_interval > 0) return tr__val_in_epoch(t, c); /* its epoch's end adds none (unless stopped) */
  return t->run->epoch_done && tr__val_epoch(t, c);
}
/* The factor goes to the run layer, which keeps it for every loop (tr_run.accumulation): the next batch takes it. */
TRAIN_API tr_err tr_set_accumulation(tr_trainer *t, int factor) {
  if (!t) return TR_ERR_INVALID;
  if (t->running != HK_STAGE_FIT || !t->tr__cfg) return tr__refuse(t, "tr_set_accumulation: only during a fit (from a hook)");
  if (factor < 1) return tr__refuse(t, "tr_set_accumulation: factor must be >= 1, got %d", factor);
  t->run->accumulation = factor;
  return TR_OK;
}

/* Validation inside fit. tr__val_at is set first, so that a checkpoint written during this
   validation resumes after it instead of repeating it. */
static void tr__fit_validate(tr_trainer *t) {
  const tr_config *c = t->tr__cfg;
  tr__eval e = { &tr__val_events, c->val, c->limit_val_batches, 0, "val/loss", "validation", NULL };
  if (t->tr__err) return;
  t->tr__val_at = t->epoch_batch;
  tr__eval_loop(t, &e);
}


/* A safe point (after a training batch or an epoch): honour what hooks requested, a validation first. */
static void tr__honour_requests(tr_trainer *t) {
  const tr_config *c = t->tr__cfg;
  unsigned r = t->ctx.requests, later;
  tr__saves_settle(t, 0); /* a save written in the background: done yet? */
  if (t->tr__err) return;
  t->ctx.requests = 0; /* cleared first: a hook that requests again during validation gets a new turn */
  if (r & HK_REQUEST_VALIDATION) {
    if (c->val) tr__fit_validate(t);
    else tr__warn(t, "a hook requested a validation but tr_config.val is not set");
  }
  later = t->ctx.requests;
  t->ctx.requests = r & (HK_REQUEST_CHECKPOINT | HK_REQUEST_LOG);
  tr__hand_requests(t, HK_REQUEST_CHECKPOINT | HK_REQUEST_LOG);
  t->ctx.requests |= later;
}

/* After on_train_end: checkpoints and logs asked for there (model_checkpoint's final last.ckpt);
   a validation is not run any more. */
static void tr__honour_final_requests(tr_trainer *t) {
  if (t->tr__err) return;
  tr__hand_requests(t, HK_REQUEST_CHECKPOINT | HK_REQUEST_LOG);
  t->ctx.requests = 0;
}

/* After a training batch, a stop signal or the preemption signal (agreed by every rank): with the preemption
   handled (tr_config.preempt), the finished step is saved to save_to (every rank calls tr_save; rank 0 writes)
   and rank 0 requeues the job when asked; then the fit ends through on_exception. */
static void tr__stop_on_signal(tr_trainer *t) {
  const tr_config *c = t->tr__cfg;
  int64_t stops = (tr__interrupts(t) >= 1 ? TR_STOP_SIGNAL : 0) | (tr__preempts(t) >= 1 ? TR_STOP_PREEMPT : 0);
  char msg[sizeof t->error], why[sizeof t->error];
  int saves = !t->tr__err && c->save_to && c->save_to[0];
  tr_err e = saves ? tr__save_for_request(t, &t->ctx, c->save_to, why, sizeof why) : TR_OK;
  if (t->tr__err && !e) return; /* (the save failed the run on another rank: its error stands) */
  if (stops & TR_STOP_PREEMPT)
    tr__preempt_stopped(msg, sizeof msg, stops, t->global_step, saves ? c->save_to : NULL, e ? why : NULL, &c->preempt, t->ctx.rank);
  else if (e) tr__msg(msg, sizeof msg, "interrupted (%s); saving the step to %s failed: %s", tr__stop_name(tr__interrupt_kind(t)), c->save_to, why);
  else tr__msg(msg, sizeof msg, "interrupted (%s)%s%s", tr__stop_name(tr__interrupt_kind(t)), saves ? "; its state saved to " : "", saves ? c->save_to : "");
  t->tr__err = TR_OK; /* a failed save's error gives way to the interruption's, which names it */
  tr__fail(t, TR_ERR_INTERRUPTED, "%s", msg);
}

/* One training batch, in Lightning's order. Each line fires an event or does a piece of work; once a
   hook skips the batch (HK_SKIP_BATCH) or the window's step (HK_SKIP_STEP), or anything fails, the
   lines it covers do nothing, and on_train_batch_end still fires (unless the run failed). */
static void tr__train_batch(tr_trainer *t, int64_t n_batches) {
  const tr_config *c = t->tr__cfg;
  int64_t steps_before = t->global_step;
  int window_ends;
  void *batch;

  t->tr__accum = t->run->accumulation; /* tr_set_accumulation's, accumulation_scheduler's: from this batch on */
  window_ends = t->tr__accum_pos + 1 >= t->tr__accum || t->epoch_batch + 1 >= n_batches;

  t->lr = tr__current_lr(t);
  if (t->tr__accum_pos == 0) { /* a window begins: where a failure before its step resumes */
    t->tr__win_open = 1;
    t->tr__win_batch = t->epoch_batch;
    t->tr__win_samples = t->samples_seen;
  }
  batch = tr__fetch(t, c->train, t->epoch_batch, "train");
  tr__fire(t, HK_ON_TRAIN_BATCH_START);
  tr__forward(t, batch);
  if (!t->tr__grads_zeroed) {              /* the window's first micro-batch that gets this far */
    tr__fire_unless(t, HK_FLOW_SKIP_BATCH, HK_ON_BEFORE_ZERO_GRAD);
    tr__zero_grad(t);
  }
  tr__fire_unless(t, HK_FLOW_SKIP_BATCH, HK_ON_BEFORE_BACKWARD);
  tr__backward(t, batch);
  tr__fire_unless(t, HK_FLOW_SKIP_BATCH, HK_ON_AFTER_BACKWARD);
  t->tr__accum_pos++;                      /* with accum_n: a checkpoint taken mid-batch stays consistent */
  if (window_ends) {                       /* the last micro-batch of the window steps */
    tr__dist_grads(t);                     /* every rank's gradients summed (TRAIN_MPI) */
    tr__average_window(t);
    tr__fire_unless(t, HK_FLOW_SKIP_STEP, HK_ON_BEFORE_OPTIMIZER_STEP);
    if (c->gradient_clip_val > 0) {
      tr__clip_gradients(t);
      tr__fire_unless(t, HK_FLOW_SKIP_STEP, HK_ON_GRADIENT_CLIP);
    }
    tr__dist_agree(t);                     /* a skip from on_before_optimizer_step .. on_gradient_clip: everywhere */
    tr__optimizer_step(t);
    if (t->global_step > steps_before || !t->tr__err) t->tr__win_open = 0; /* stepped, or ended without a step */
    tr__fire_unless(t, HK_FLOW_SKIP_STEP, HK_ON_AFTER_OPTIMIZER_STEP);
    tr__end_window(t);
  }
  t->epoch_batch++;
  t->run->epoch_done = t->epoch_batch >= n_batches;
  t->samples_seen += c->train->batch_size > 0 ? c->train->batch_size : 1;
  t->ctx.samples_seen = t->samples_seen;
  t->run->validates_next = tr__val_follows(t, t->global_step > steps_before);
  tr__fire(t, HK_ON_TRAIN_BATCH_END);
  t->run->validates_next = 0;
  hk_flow_clear(&t->tr__flow, HK_SIGNAL_BIT(HK_SKIP_BATCH));
  tr__dist_agree(t);
  if (HK_ACTIVE(t->reg, HK_ON_LOG) && t->global_step > steps_before && c->log_every_n_steps > 0 &&
      t->global_step % c->log_every_n_steps == 0)
    tr__log_record(t, "train");
  /* after the step's record: a stop saves this step, and its resume logs from the next one (as tr_run_batch_end) */
  if (tr__interrupts(t) >= 1 || tr__preempts(t) >= 1) tr__stop_on_signal(t);

  if (c->val && ((t->global_step > steps_before && c->val_every_n_steps > 0 && t->global_step % c->val_every_n_steps == 0) ||
                 tr__val_in_epoch(t, c)))
    tr__fit_validate(t);
  tr__honour_requests(t);
}

/* The epoch is over: move the counters to the next one. */
static void tr__finish_epoch(tr_trainer *t) {
  t->epoch++;
  t->epoch_batch = 0;
  t->tr__val_at = -1;
  t->tr__epoch_ended = 0;
  t->run->epoch_done = 0;
  tr__end_window(t); /* a window cut short by a stop is dropped */
  t->tr__win_open = 0;
  hk_flow_clear(&t->tr__flow, HK_FLOW_EPOCH_SIGNALS);
  t->ctx.epoch = t->epoch;
}

/* Start epoch t->epoch, or continue it mid-way after a resume: the shuffle is rebuilt from the seed
   either way; an iterator is rewound only at a real start (a resumed one was handed its position). */
static void tr__start_epoch(tr_trainer *t, const tr_data *d) {
  int resuming = t->epoch_batch > 0;
  t->ctx.epoch = t->epoch;
  t->ctx.batch_idx = t->epoch_batch;
  if (d->shuffle) {
    tr_rng r = tr__epoch_rng(t->seed, t->epoch);
    d->shuffle(d->user, &r);
  }
  if (resuming) return; /* no second on_train_epoch_start, as Lightning after a mid-epoch restart */
  if (d->reset && d->reset(d->user)) tr__fail(t, TR_ERR_MODEL, "train data: reset() failed at epoch %lld", (long long)t->epoch);
  t->lr = tr__current_lr(t); /* the epoch's learning rate is known before its first batch (lr_monitor) */
  tr__fire(t, HK_ON_TRAIN_EPOCH_START);
}

/* The plateau's check at a complete epoch's end, after its validation and before on_train_epoch_end
   (so that a checkpoint written there holds it). The lr it sets applies from the next batch on. */
static void tr__plateau_check(tr_trainer *t) {
  double v = 0, sum;
  int64_t have = hk_metric_get(&t->ctx, t->sched.monitor, &v) ? 1 : 0; /* a lazy one is computed now (hooks.h) */
  sum = have ? v : 0;
  /* TRAIN_MPI: every rank decides on the ranks' mean (val/loss is the same on each already; a rank's own
     train/loss is not), so the lr stays the same everywhere; one process: the value itself */
  tr__dist_mean(t, &sum, &have);
  if (t->tr__err) return;
  if (have < (t->tr__dist ? (int64_t)t->ctx.world_size : 1)) {
    tr__fail(t, TR_ERR_INVALID, "the plateau schedule monitors '%s', which is not set at the end of epoch %lld (no "
             "validation data? monitor a metric a hook sets, e.g. train/loss)", t->sched.monitor, (long long)t->epoch);
    return;
  }
  if (t->tr__dist) v = sum / (double)have;
  (void)tr_plateau_step(&t->sched, &t->run->lr_state, t->optim.lr, v);
}

/* One training epoch: on_train_epoch_start, batches, [validation], on_train_epoch_end. An epoch that
   max_steps cuts short stays open (epoch_batch > 0): the next fit continues it mid-way. */
static void tr__train_epoch(tr_trainer *t, int64_t n) {
  const tr_config *c = t->tr__cfg;
  int complete, stopped;
  t->train_batches = t->run->train_batches = n;
  tr__start_epoch(t, c->train);
  tr__dist_agree(t);
  while (t->epoch_batch < n && !tr__skips(t, HK_SIGNAL_BIT(HK_STOP_EPOCH)) && !tr__stopping(t)) {
    tr__train_batch(t, n);
    if (c->max_steps > 0 && t->global_step >= c->max_steps) break;
  }
  if (t->tr__err) return;
  stopped = HK_FLOW_HAS(&t->tr__flow, HK_SIGNAL_BIT(HK_STOP_EPOCH)) || tr__stopping(t);
  complete = t->epoch_batch >= n || stopped;
  t->run->epoch_done = complete;
  /* the epoch's validation, unless one just ran after its last batch; with val_check_interval only when a
     stop ended the epoch (Lightning validates at a stop; otherwise at the N-th batches alone) */
  if (complete && c->val && tr__val_epoch(t, c) && (c->val_check_interval <= 0 || stopped) && t->tr__val_at != t->epoch_batch)
    tr__fit_validate(t);
  if (complete && !t->tr__err && t->sched.kind == TR_SCHED_PLATEAU) tr__plateau_check(t);
  t->tr__epoch_ended = complete; /* a checkpoint written by an on_train_epoch_end hook resumes after it */
  tr__fire(t, HK_ON_TRAIN_EPOCH_END);
  tr__dist_agree(t);
  if (complete && !t->tr__err) tr__finish_epoch(t);
  tr__honour_requests(t);
}

static int tr__fit_done(const tr_trainer *t) {
  const tr_config *c = t->tr__cfg;
  return t->tr__err || (c->max_steps > 0 && t->global_step >= c->max_steps) ||
         (c->max_epochs > 0 && t->epoch >= c->max_epochs) || tr__stopping(t);
}

/* Fill in the defaults of a tr_config and check it; nothing has fired yet. */
static tr_err tr__resolve(tr_trainer *t, const tr_config *in, tr_config *c) {
  char why[512];
  if (!in) return tr__fail(t, TR_ERR_INVALID, "tr_fit: config is NULL");
  *c = *in;
  if (!c->train || !c->train->count || !c->train->get == !c->train->next)
    return tr__fail(t, TR_ERR_INVALID, "tr_fit: config.train needs count, and get or next (one of them)");
  if (c->val && (!c->val->count || !c->val->get == !c->val->next))
    return tr__fail(t, TR_ERR_INVALID, "tr_fit: config.val needs count, and get or next (one of them)");
  if (!c->train->save_state != !c->train->load_state)
    return tr__fail(t, TR_ERR_INVALID, "tr_fit: config.train has only one of save_state/load_state; give both or neither");
  if (!t->model.backward) return tr__fail(t, TR_ERR_INVALID, "tr_fit: model.backward is required");
  if (tr_preempt_check(&in->preempt, in->save_to, "tr_fit: config.", why, sizeof why)) return tr__fail(t, TR_ERR_INVALID, "%s", why);
  if (c->max_epochs < 0 || c->max_steps < 0 || c->min_epochs < 0 || c->min_steps < 0 || c->limit_train_batches < 0 ||
      c->val_every_n_steps < 0 || c->val_check_interval < 0 || c->accumulate_grad_batches < 0)
    return tr__fail(t, TR_ERR_INVALID, "tr_fit: max_*, min_*, limit_train_batches, val_every_n_steps, val_check_interval "
                    "and accumulate_grad_batches must be >= 0");
  if (c->val_every_n_steps > 0 && c->val_check_interval > 0)
    return tr__fail(t, TR_ERR_INVALID, "tr_fit: val_every_n_steps (%lld, optimizer steps over the run) and val_check_interval "
                    "(%lld, batches within each epoch) are both set; give one", (long long)c->val_every_n_steps,
                    (long long)c->val_check_interval);
  if (tr__bad_number(c->gradient_clip_val, 0, HUGE_VAL) ||
      (c->gradient_clip_algorithm != TR_CLIP_NORM && c->gradient_clip_algorithm != TR_CLIP_VALUE))
    return tr__fail(t, TR_ERR_INVALID, "tr_fit: gradient_clip_val must be >= 0 and the algorithm norm or value");
  if (c->on_nonfinite_loss < TR_NONFINITE_FAIL || c->on_nonfinite_loss > TR_NONFINITE_IGNORE)
    return tr__fail(t, TR_ERR_INVALID, "tr_fit: on_nonfinite_loss is not a tr_nonfinite value");
  if (c->max_epochs == 0 && c->max_steps == 0) c->max_epochs = 1000;
  if (c->limit_val_batches < 0) c->val = NULL;
  if (c->num_sanity_val_steps == 0) c->num_sanity_val_steps = 2;
  if (c->num_sanity_val_steps < 0) c->num_sanity_val_steps = 0;
  if (c->val_every_n_epochs == 0) c->val_every_n_epochs = 1;
  if (c->accumulate_grad_batches == 0) c->accumulate_grad_batches = 1;
  if (c->log_every_n_steps == 0) c->log_every_n_steps = 50;
  t->tr__total = t->sched.total;
  if (t->tr__total == 0 && (t->sched.kind == TR_SCHED_COSINE || t->sched.kind == TR_SCHED_LINEAR ||
                            t->sched.kind == TR_SCHED_WSD || t->sched.kind == TR_SCHED_ONECYCLE))
    t->tr__total = t->sched.per_epoch ? c->max_epochs : c->max_steps;
  {
    char why[256];
    tr_sched s = t->sched;
    if ((s.kind == TR_SCHED_COSINE || s.kind == TR_SCHED_LINEAR || s.kind == TR_SCHED_WSD || s.kind == TR_SCHED_ONECYCLE) &&
        t->tr__total == 0)
      return tr__fail(t, TR_ERR_INVALID, "tr_fit: the %s schedule needs its total, the scheduler steps of the whole curve "
                      "(%s): give sched.total (in a spec: %s(total=N)), or %s so that the run's length is the total",
                      tr_sched_kind_name(s.kind), s.per_epoch ? "epochs, per_epoch" : "optimizer steps; epochs with per_epoch=true",
                      tr_sched_kind_name(s.kind), s.per_epoch ? "tr_config.max_epochs" : "tr_config.max_steps (max_epochs does not give "
                      "the steps: the batches per epoch are not known before the fit)");
    if (s.kind == TR_SCHED_STEP || s.kind == TR_SCHED_EXPONENTIAL) { /* gamma^steps over the run, when its length is known */
      int64_t horizon = s.total ? s.total : s.per_epoch ? c->max_epochs : c->max_steps;
      if (tr_sched_check(&s, horizon, why, sizeof why)) return tr__fail(t, TR_ERR_INVALID, "tr_fit: %s", why);
      if (horizon > 0) { /* the updates are float32: the lr at either end must be a float above 0 */
        double first = tr_lr_at(&s, t->optim.lr, 0), last = tr_lr_at(&s, t->optim.lr, horizon - 1);
        double worst = s.gamma > 1 ? last : first > last ? last : first;
        if (!(worst <= FLT_MAX) || !((float)worst > 0))
          return tr__fail(t, TR_ERR_INVALID, "tr_fit: the %s schedule (gamma %g) takes the learning rate to %g by scheduler step %lld "
                          "of %lld, which float32 updates %s; give a gamma closer to 1, a smaller or larger optim.lr, or fewer steps",
                          tr_sched_kind_name(s.kind), s.gamma, worst, (long long)(horizon - 1), (long long)horizon,
                          worst > 1 ? "turn into inf" : "round to 0");
      }
    } else if (tr_sched_check(&s, t->tr__total, why, sizeof why)) return tr__fail(t, TR_ERR_INVALID, "tr_fit: %s", why);
  }
  (void)tr_run_continue(t->reg, NULL, 0); /* a resume's run directory: tr__resume_check gives it (tr__peek) */
  return c->resume_from && c->resume_from[0] ? tr__resume_check(t, c) : TR_OK;
}

/* Everything the model must have handed over by the first step, and the training data's position. */
static void tr__ready_to_train(tr_trainer *t) {
  const tr_data *d = t->tr__cfg->train;
  if (t->tr__err) return;
  /* Without batch_size samples_seen counts batches: a rate per sample would be off by the batch's size */
  if (d->batch_size <= 0 && !t->tr__bs_warned && t->ctx.rank == 0 && hk_find(t->reg, "throughput_monitor")) {
    t->tr__bs_warned = 1;
    tr__warn(t, "throughput_monitor is registered but the training data's tr_data.batch_size is 0: samples_seen "
             "counts batches, so its samples/s, tokens and FLOP/s are per batch; set tr_data.batch_size to the "
             "samples in one batch");
  }
  if (!t->model.grads) {
    tr__fail(t, TR_ERR_INVALID, "model.grads is not set: pass it to tr_init, or hand it over with tr_set_buffers "
             "(for example in a configure_model hook) before training starts");
    return;
  }
  if (t->tr__data_state.len && d->load_state) { /* from a checkpoint, or where the last fit left it */
    hk_reader rd;
    memset(&rd, 0, sizeof rd);
    rd.data = t->tr__data_state.data;
    rd.len = t->tr__data_state.len;
    if (d->load_state(d->user, &rd)) {
      rd.why[sizeof rd.why - 1] = 0;
      tr__fail(t, TR_ERR_STATE, "train data: load_state() rejected the saved position (%zu bytes)%s%s", t->tr__data_state.len,
               rd.why[0] ? ": " : "", rd.why);
    }
  }
}

/* The sanity check: a few validation batches before training, to find bugs in validation early. */
static void tr__sanity_check(tr_trainer *t) {
  const tr_config *c = t->tr__cfg;
  int64_t limit = c->num_sanity_val_steps;
  tr__eval e = { &tr__val_events, c->val, 0, 0, "val/loss", "sanity check", NULL };
  uint64_t before, during;
  if (t->tr__err || !c->val || c->num_sanity_val_steps <= 0 || t->tr__restarting) return;
  if (c->limit_val_batches > 0 && c->limit_val_batches < limit) limit = c->limit_val_batches;
  e.limit = limit;
  t->ctx.stage = HK_STAGE_SANITY_CHECK;
  before = hk_metric_stamp(&t->ctx, NULL);
  tr__fire(t, HK_ON_SANITY_CHECK_START);
  tr__eval_loop(t, &e); /* nothing after a failure (but the ranks' agreement on it) */
  during = hk_metric_stamp(&t->ctx, NULL);
  tr__fire(t, HK_ON_SANITY_CHECK_END);
  /* As Lightning resets its metrics after the sanity check: nothing ranks or stops on its val/loss.
     What hooks publish at on_sanity_check_end (the timer's time/sanity_check) stays. */
  hk_metric_forget_between(&t->ctx, before, during);
  t->ctx.stage = HK_STAGE_FIT;
}

/* The body of tr_fit, after setup and configure_model, in the order of Lightning's Trainer.fit. */
static void tr__fit_body(tr_trainer *t, const void *arg) {
  const tr_config *c = t->tr__cfg;
  int64_t n;
  char why[600];
  (void)arg;
  if (tr__save_to_check(c->save_to, "tr_fit: config.", why, sizeof why)) tr__fail(t, TR_ERR_INVALID, "%s", why); /* not at Ctrl-C */
  if (c->resume_from && !t->tr__err) { /* a failure skips what follows */
    tr__load_file(t, c->resume_from);
    if (!t->tr__err) tr_run_resumed(t->reg, &t->ctx);
    if (!t->tr__err && t->tr__lift_stop) { /* a larger patience now: the early stop it recorded is not made again */
      hk_flow_clear(&t->tr__flow, HK_SIGNAL_BIT(HK_STOP));
      tr__warn(t, "resuming past the early stop that checkpoint recorded: early_stopping's patience given now is larger");
    }
  }
  t->tr__lift_stop = 0;
  tr__ready_to_train(t);
  tr__dist_check_resumed(t); /* every rank starts from the same counters (TRAIN_MPI) */
  tr__fire(t, HK_ON_FIT_START);
  tr__dist_agree(t);
  tr__sanity_check(t);
  tr__fire(t, HK_ON_TRAIN_START);
  tr__dist_agree(t);
  if (t->tr__epoch_ended) tr__finish_epoch(t); /* a checkpoint from inside on_train_epoch_end */
  while (!tr__fit_done(t)) {
    if (tr__interrupts(t) >= 1) { tr__fail(t, TR_ERR_INTERRUPTED, "interrupted (%s)", tr__stop_name(tr__interrupt_kind(t))); break; }
    n = tr__n_batches(t, c->train, c->limit_train_batches, "train");
    if (n == 0) { /* nothing to train on: Lightning skips the training loop too */
      if (!t->tr__err) tr__warn(t, "the training data has no batches: nothing to train");
      break;
    }
    if (c->val && c->val_check_interval > n) { /* it would never validate (Lightning raises a ValueError) */
      tr__fail(t, TR_ERR_INVALID, "tr_fit: val_check_interval (%lld) is more than the %lld training batches of an epoch: it "
               "counts batches within each epoch (Lightning's rule); give at most %lld, or val_every_n_steps to count "
               "optimizer steps across epochs", (long long)c->val_check_interval, (long long)n, (long long)n);
      break;
    }
    tr__train_epoch(t, n);
  }
  tr__fire(t, HK_ON_TRAIN_END);
  tr__dist_agree(t);
  tr__honour_final_requests(t);
  tr__fire(t, HK_ON_FIT_END);
}

/* Where the training iterator stands when a fit ends: what tr_save writes and the next fit restores. */
static void tr__keep_data_state(tr_trainer *t, const tr_data *d) {
  hk_bytes b;
  if (!d->save_state) return;
  memset(&b, 0, sizeof b);
  if (d->save_state(d->user, &b) || b.failed) {
    hk_bytes_free(&b);
    tr__warn(t, "train data: save_state() failed when the fit ended; the next checkpoint holds the previous position");
    return;
  }
  hk_bytes_free(&t->tr__data_state);
  t->tr__data_state = b;
}

static tr_err tr__fit_agree(tr_trainer *t, hk_stage stage, const void *arg, tr_err failed) {
  (void)stage;
  return tr__dist_start_fit(t, (const tr_config *)arg, failed);
}

TRAIN_API tr_err tr_fit(tr_trainer *t, const tr_config *cfg) {
  tr_config c;
  tr_err e;
  const char *requeued = NULL;
  char foreign[600] = "";
  if (!t) return TR_ERR_INVALID;
  if (tr__idle(t, "tr_fit")) return TR_ERR_INVALID; /* nested in a hook: this rank alone, no agreement */
  e = tr__resolve(t, cfg, &c);
  if (!e && c.resume_from && !strcmp(c.resume_from, "auto")) /* the newest checkpoint of this run, or a fresh start */
    c.resume_from = tr_run_find_resume(t->reg, &t->ctx, c.save_to, tr__ckpt_check, t);
  if (!e && (!c.resume_from || !c.resume_from[0]) && t->global_step == 0 && t->epoch == 0 && t->epoch_batch == 0)
    c.resume_from = requeued = tr__preempt_resume(&c.preempt, c.save_to); /* a requeued job's first fit */
  if (requeued && tr__requeue_foreign(t, requeued, foreign, sizeof foreign)) /* only this job's own checkpoint */
    c.resume_from = requeued = NULL;
  if (!e) {
    t->tr__cfg = &c;
    t->tr__accum = c.accumulate_grad_batches;
    t->ctx.epoch = t->epoch;
    t->ctx.global_step = t->global_step;
    t->ctx.samples_seen = t->samples_seen;
    t->lr = tr__current_lr(t);
    t->tr__sigint_count = t->tr__preempt_count = 0;
    t->tr__sigterm = 0;
    t->tr__sig_deferred = t->tr__dist != NULL;
  }
  if ((e = tr__stage_start(t, HK_STAGE_FIT, &c, e, tr__fit_agree, &c)) != TR_OK) { /* every rank: the same run length (TRAIN_MPI) */
    t->tr__sig_deferred = 0;
    t->tr__cfg = NULL;
    return e;
  }
  if (t->ctx.rank == 0 && foreign[0]) tr_run_say(t->reg, &t->ctx, "train.h", "%s", foreign);

  e = tr__stage_run(t, HK_STAGE_FIT, tr__fit_body, NULL); /* (the run installs the stop signals: tr_run_enter) */

  t->tr__sig_deferred = t->tr__sigint_count = t->tr__preempt_count = 0;
  tr__keep_data_state(t, c.train);
  t->tr__restarting = 0;
  t->tr__cfg = NULL;
  return e;
}
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
