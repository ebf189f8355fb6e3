/* train/loop.h - your loop in a dozen lines: tr_run_begin / tr_run_next / tr_run_update / tr_run_end, the run layer keeping the loop's place. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_LOOP_H /* part */
#define TRAIN_LOOP_H /* part */
#include "factories.h" /* part */

TR__C_BEGIN /* part */
/* ---- YOUR LOOP IN A DOZEN LINES -------------------------------------------------------------------------
   The run keeps the loop's place (epoch, batch, step, lr); the loop asks what comes next and does it:

       hk_registry *reg = hk_create(NULL);
       hk_ctx *ctx = tr_run_begin(reg, &(tr_run_desc){ .epochs = TR_NO, .max_steps = 5000, .lr = 3e-4,
                                  .val_every_n_steps = 100, .val_batches = 20, TR_VIEWS(param_views, grad_views),
                                  .save_model = save, .load_model = load, .spec = "nan_guard; csv" }, resume);
       for (int what; (what = tr_run_next(reg)); ) {
         if (what == TR_RUN_VAL_BATCH) { ctx->loss = evaluate(ctx->batch_idx); continue; }
         ctx->loss = forward(ctx->global_step);         (the data's place: ctx->epoch, batch_idx, global_step)
         HK_FIRE(reg, HK_ON_BEFORE_BACKWARD, ctx);
         backward();
         HK_FIRE(reg, HK_ON_AFTER_BACKWARD, ctx);
         HK_FIRE(reg, HK_ON_BEFORE_OPTIMIZER_STEP, ctx);
         if (tr_run_update(reg)) adamw(ctx->lr, ctx->global_step);
       }
       return tr_run_end(reg) != TR_OK;               (a failure is said on stderr by the run itself)

   tr_run_begin: tr_run_setup, the loop's shape checked, tr_run_start; the context is the run's (a change the
   loop makes to epoch, global_step or batch_idx fails the run, naming it); NULL only without a registry or
   memory. tr_run_next closes what the loop did last and returns TR_RUN_TRAIN (ctx->lr set, on_train_batch_start
   fired), TR_RUN_VAL_BATCH (set ctx->loss to the batch's loss; val/loss is their mean) or 0 (the run is over).
   tr_run_update: 1 when the optimizer steps now (ctx->global_step moved), 0 when skipped or mid-window; a
   training batch must call it. tr_run_end: tr_run_finish, the outcome; a failure says why once. Details:
   docs/reference.md ("Your own loop in full"). */
enum { TR_RUN_TRAIN = 1, TR_RUN_VAL_BATCH = 2 };
TRAIN_API hk_ctx *tr_run_begin(hk_registry *reg, const tr_run_desc *d, const char *resume_from);
TRAIN_API int tr_run_next(hk_registry *reg);
TRAIN_API int tr_run_update(hk_registry *reg);
TRAIN_API tr_err tr_run_end(hk_registry *reg);
/* Views of n tensors in one flat buffer (llm.c's params_memory and param_sizes); base NULL: data NULL. */
TRAIN_API void tr_views(hk_tensor *views, float *base, const char *const *names, const size_t *sizes, int n);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
/* ---- your loop in a dozen lines ------------------------------------------------------------------------
   A client of the run layer's calls: tr_run_next is the loop a hand-written one would be (tr_run_epoch_start,
   the batch's events, tr_run_batch_end, a validation between tr_run_eval_start and _end, tr_run_epoch_end),
   with the counters kept here instead of in the loop, so that they cannot disagree with the run. */
enum { TR__LOOP_OPEN, TR__LOOP_TRAIN, TR__LOOP_VAL_START, TR__LOOP_VAL, TR__LOOP_EPOCH_END, TR__LOOP_DONE };
typedef struct tr__loop {
  hk_ctx ctx;                /* the run's context: the loop reads it, the sites fire with it */
  tr_run *run;
  hk_flow flow;              /* the run's events' signals and, through ctx.flow, the loop's sites' */
  hk_tensor *views;          /* TR_TENSORS: n_tensors parameter views, then n_tensors gradient views */
  float *param_base, *grad_base; /* the buffers those views were cut from */
  tr_sched sched;            /* tr_run_desc.sched with its total resolved */
  int phase;                 /* TR__LOOP_*: what tr_run_next does next */
  int epochs;                /* the loop has epochs (tr_run_desc.epochs is not TR_NO) */
  int updated, stepped;      /* this training batch called tr_run_update; it stepped */
  int micro, window_skip;    /* micro-batches of the accumulation window so far; a skip raised in it */
  int epoch_open;            /* tr_run_epoch_start began an epoch that has not ended */
  int after_val;             /* the phase after the validation going on (TR__LOOP_OPEN or _EPOCH_END) */
  int resumed;               /* a resume: the first batch may owe the validation its checkpoint came before */
  int64_t epoch, step, batch;/* the counters as the run left them in ctx: a change is the loop's mistake */
  int64_t next;              /* the index of the next training batch */
  int64_t val_n;             /* validation batches done, their losses' sum (val/loss: the mean) */
  double val_sum;
} tr__loop;

static void tr__loop_free(void *p) {
  tr__loop *L = (tr__loop *)p;
  if (!L) return;
  hk_ctx_free(&L->ctx);
  free(L->views);
  free(L);
}
static tr__loop *tr__loop_of(hk_registry *reg) {
  tr_run *run = reg ? (tr_run *)hk_attached(reg) : NULL;
  return run ? (tr__loop *)run->tr__p->loop : NULL;
}
/* A refusal of the loop's call that also ends the run: a loop that calls out of order has a bug. */
static void tr__loop_fail(hk_registry *reg, tr__loop *L, const char *fmt, ...) TR__PRINTF(3, 4);
static void tr__loop_fail(hk_registry *reg, tr__loop *L, const char *fmt, ...) {
  char msg[640];
  va_list ap;
  va_start(ap, fmt);
  (void)tr__vmsg(msg, sizeof msg, 0, fmt, ap);
  va_end(ap);
  tr_run_fail(reg, TR_ERR_INVALID, "%s", msg);
  hk_set_error(reg, HK_ERR_INVALID, "%s", msg);
  L->phase = TR__LOOP_DONE;
}
/* tr_run_begin found the loop's shape wrong: a run that fails before anything fires (tr_run_end reports it, in the
   desc's log: the settings were refused, but where the run talks is the loop's choice). */
static hk_ctx *tr__loop_refused(hk_registry *reg, tr_run *run, tr__loop *L, const tr_run_desc *d, const char *why) {
  run->desc.log = d->log;
  tr__run_begin(run, reg, &L->ctx, HK_STAGE_FIT);
  run->tr__p->own_loop = 1;
  run->tr__p->refused_start = 1;
  tr_run_fail(reg, TR_ERR_INVALID, "tr_run_begin: %s", why);
  L->phase = TR__LOOP_DONE;
  return &L->ctx;
}

TRAIN_API void tr_views(hk_tensor *views, float *base, const char *const *names, const size_t *sizes, int n) {
  size_t off = 0;
  int i;
  for (i = 0; i < n; i++) {
    views[i].name = names[i];
    views[i].data = base ? base + off : NULL;
    views[i].count = sizes[i];
    views[i].on_device = 0;
    off += sizes[i];
  }
}

/* What tr_run_begin checks of the loop's shape before the run starts: why (the first problem), or "". */
static void tr__loop_check(const tr_run_desc *d, tr__loop *L, char *why, size_t cap) {
  int i, j, views = d->params || d->grads, flat = d->param_memory || d->grad_memory;
  why[0] = 0;
  if (L->epochs && d->train_batches <= 0)
    snprintf(why, cap, "train_batches is %lld: a loop with epochs gives its batches per epoch (or epochs = TR_NO for a "
             "step loop)", (long long)d->train_batches);
  else if (!L->epochs && d->max_steps <= 0)
    snprintf(why, cap, "a step loop (epochs = TR_NO) needs max_steps > 0: it is %lld", (long long)d->max_steps);
  else if (L->epochs && d->max_epochs <= 0 && d->max_steps <= 0)
    snprintf(why, cap, "give max_epochs or max_steps (both are 0): the loop would never end");
  else if (d->validation != TR_NO && d->val_batches <= 0 && (d->val_every_n_steps > 0 || L->epochs))
    snprintf(why, cap, "val_batches is %lld: give the batches of a validation, or validation = TR_NO", (long long)d->val_batches);
  else if (d->val_every_n_steps < 0 || d->val_every_n_epochs < 0 || d->batch_size < 0)
    snprintf(why, cap, "val_every_n_steps, val_every_n_epochs and batch_size must be >= 0");
  else if (!hk_is_finite(d->lr) || d->lr < 0)
    snprintf(why, cap, "lr is %g: give the learning rate, >= 0 and finite", d->lr);
  else if (views && flat)
    snprintf(why, cap, "give the tensors once: params and grads (TR_VIEWS) or param_memory and grad_memory (TR_TENSORS)");
  else if ((views || flat) && d->n_tensors <= 0)
    snprintf(why, cap, "n_tensors is %d with the tensors given: TR_VIEWS / TR_TENSORS count them from arrays (a pointer "
             "counts as 0)", d->n_tensors);
  else if (views && (!d->params || !d->grads))
    snprintf(why, cap, "give params and grads together (the views of the parameters and of their gradients)");
  else if (flat && (!d->param_memory || !d->grad_memory || !d->tensor_names || !d->tensor_sizes))
    snprintf(why, cap, "TR_TENSORS needs the addresses of both buffers, the names and the sizes");
  for (i = 0; !why[0] && (views || flat) && i < d->n_tensors; i++) { /* a count past the array shows as junk here */
    const char *name = views ? d->params[i].name : d->tensor_names[i];
    size_t count = views ? d->params[i].count : d->tensor_sizes[i];
    if (!name || !name[0] || !count || (views && (!d->params[i].data || d->grads[i].count != count)))
      snprintf(why, cap, "tensor %d of %d is not whole (%s): is the array shorter than n_tensors? TR_VIEWS / TR_TENSORS "
               "count it", i, d->n_tensors, !name || !name[0] ? "no name" : !count ? "0 values"
               : !d->params[i].data ? "no data" : "its gradient's count differs");
    for (j = 0; !why[0] && j < i; j++)
      if (!strcmp(name, views ? d->params[j].name : d->tensor_names[j]))
        snprintf(why, cap, "two tensors are named '%s' (%d and %d): the batteries tell them apart by name", name, j, i);
  }
}

/* The views of TR_TENSORS, cut again when a buffer moved: at every batch, and at on_after_backward (the run's
   watch calls it first there: llm.c allocates its gradients in the first backward). */
static void tr__loop_views(void *loop) {
  tr__loop *L = (tr__loop *)loop;
  const tr_run_desc *d = &L->run->desc;
  if (!L->views || (*d->param_memory == L->param_base && *d->grad_memory == L->grad_base)) return;
  L->param_base = *d->param_memory;
  L->grad_base = *d->grad_memory;
  tr_views(L->views, L->param_base, d->tensor_names, d->tensor_sizes, d->n_tensors);
  tr_views(L->views + d->n_tensors, L->grad_base, d->tensor_names, d->tensor_sizes, d->n_tensors);
  hk_grads_changed(&L->ctx);
}

TRAIN_API hk_ctx *tr_run_begin(hk_registry *reg, const tr_run_desc *d, const char *resume_from) {
  tr_run *run = tr_run_get(reg);
  tr__loop *L;
  tr_run_desc zero;
  char why[600];
  if (!run) return NULL;
  if (run->running != HK_STAGE_NONE) { /* refused, saying why; the run going is left alone */
    char msg[sizeof run->tr__p->error + 16];
    (void)tr_run_setup(reg, d);
    snprintf(msg, sizeof msg, "tr_run_begin: %s", tr_run_error(reg));
    if (!run->tr__p->loop && !(run->tr__p->loop = calloc(1, sizeof *L))) return NULL;
    run->tr__p->loop_free = tr__loop_free;
    L = (tr__loop *)run->tr__p->loop;
    if (run->tr__p->own_loop) tr__loop_fail(reg, L, "%s", msg); /* a loop begun twice: its run fails */
    else hk_set_error(reg, HK_ERR_INVALID, "%s", msg), L->phase = TR__LOOP_DONE; /* (the trainer's run goes on) */
    return &L->ctx;
  }
  memset(&zero, 0, sizeof zero);
  if (!d) d = &zero;
  if (run->tr__p->loop) tr__loop_free(run->tr__p->loop); /* a run begun again on this registry: a fresh place */
  run->tr__p->loop_views = NULL;
  if (!(L = (tr__loop *)(run->tr__p->loop = calloc(1, sizeof *L)))) return NULL;
  run->tr__p->loop_free = tr__loop_free;
  L->run = run;
  L->epochs = d->epochs != TR_NO;
  L->phase = TR__LOOP_OPEN;
  L->ctx.loss = NAN;
  tr__loop_check(d, L, why, sizeof why);
  if (!why[0] && d->sched.kind) {
    char sw[300];
    L->sched = d->sched;
    if (tr_sched_check(&L->sched, L->sched.per_epoch ? d->max_epochs : d->max_steps, sw, sizeof sw) != TR_OK)
      snprintf(why, sizeof why, "sched: %s", sw);
  }
  if (!why[0] && d->param_memory && !(L->views = (hk_tensor *)calloc(2 * (size_t)d->n_tensors, sizeof *L->views)))
    snprintf(why, sizeof why, "out of memory");
  if (why[0]) return tr__loop_refused(reg, run, L, d, why);
  if (tr_run_setup(reg, d) != TR_OK) {
    snprintf(why, sizeof why, "%s", tr_run_error(reg));
    return tr__loop_refused(reg, run, L, d, why);
  }
  if (d->param_memory) {
    L->ctx.params = L->views;
    L->ctx.grads = L->views + d->n_tensors;
    L->param_base = L->grad_base = (float *)&L->param_base; /* never a buffer: cut at the first look */
    tr__loop_views(L);
    run->tr__p->loop_views = tr__loop_views;
  } else {
    L->ctx.params = d->params;
    L->ctx.grads = d->grads;
  }
  L->ctx.n_tensors = d->params || d->param_memory ? d->n_tensors : 0;
  L->ctx.user = d->model_user;
  if (tr__groups_build(run, reg, &L->ctx, "")) { /* (tr_run_start would refuse it too, less plainly) */
    snprintf(why, sizeof why, "%s", tr_run_error(reg));
    return tr__loop_refused(reg, run, L, d, why);
  }
  if (tr_run_start(reg, &L->ctx, resume_from) != TR_OK) L->phase = TR__LOOP_DONE;
  else if (resume_from && resume_from[0]) L->resumed = 1, L->next = L->ctx.batch_idx + 1; /* (a step loop's) */
  L->epoch = L->ctx.epoch, L->step = L->ctx.global_step, L->batch = L->ctx.batch_idx;
  return &L->ctx;
}

/* The loop may read ctx's counters, never move them: a change is said and ends the run. */
static TR__NOINLINE int tr__loop_tampered_say(hk_registry *reg, tr__loop *L, const char *fn);
static int tr__loop_tampered(hk_registry *reg, tr__loop *L, const char *fn) {
  if (L->ctx.epoch == L->epoch && L->ctx.global_step == L->step && L->ctx.batch_idx == L->batch) return 0; /* (every step) */
  return tr__loop_tampered_say(reg, L, fn);
}
static int tr__loop_tampered_say(hk_registry *reg, tr__loop *L, const char *fn) {
  static const char *const names[3] = { "epoch", "global_step", "batch_idx" };
  const int64_t now[3] = { L->ctx.epoch, L->ctx.global_step, L->ctx.batch_idx }, was[3] = { L->epoch, L->step, L->batch };
  int i = now[0] != was[0] ? 0 : now[1] != was[1] ? 1 : 2; /* (the caller saw one differ) */
  tr__loop_fail(reg, L, "%s: the loop changed ctx->%s from %lld to %lld: the run keeps the loop's place (epoch, batch_idx, "
                "global_step: read them; tr_run_update moves the step)", fn, names[i], (long long)was[i], (long long)now[i]);
  return 1;
}
static void tr__loop_noted(tr__loop *L) { L->epoch = L->ctx.epoch, L->step = L->ctx.global_step, L->batch = L->ctx.batch_idx; }
/* The signals the loop's sites left in ctx join the run's flow. */
static void tr__loop_signals(tr__loop *L) {
  L->flow.signals |= L->ctx.flow.signals;
  L->ctx.flow.signals = 0;
}
static void tr__loop_fire(hk_registry *reg, tr__loop *L, int event) {
  (void)HK_FIRE_FLOW(reg, event, &L->ctx, &L->flow);
  tr__loop_signals(L);
}

/* A validation is due after a batch that stepped to a multiple of val_every_n_steps, or, with epochs, after
   the last batch of every val_every_n_epochs-th epoch. */
static int tr__loop_val_due(const tr_run *run, const tr__loop *L, int stepped, int epoch_ends) {
  const tr_run_desc *d = &run->desc;
  int64_t every = d->val_every_n_epochs > 0 ? d->val_every_n_epochs : 1;
  if (d->validation == TR_NO || d->val_batches <= 0) return 0;
  if (stepped && d->val_every_n_steps > 0 && L->ctx.global_step % d->val_every_n_steps == 0) return 1;
  return L->epochs && epoch_ends && (L->ctx.epoch + 1) % every == 0;
}

/* This step's learning rate: the desc's schedule or function, times the hooks' scale. */
static void tr__loop_lr(hk_registry *reg, tr_run *run, tr__loop *L) {
  const tr_run_desc *d = &run->desc;
  if (d->lr_at) (void)tr_run_lr(reg, &L->ctx, d->lr_at(d->model_user, &L->ctx));
  else if (L->sched.kind)
    (void)tr_run_sched_lr(reg, &L->ctx, &L->sched, d->lr, L->sched.per_epoch ? L->ctx.epoch : L->ctx.global_step);
  else (void)tr__run_lr_now(run, &L->ctx, d->lr); /* tr_run_lr's, less its checks: tr_run_next made them */
}

/* TR__LOOP_OPEN: the next training batch, or the end. Returns TR_RUN_TRAIN, or 0 with L->phase moved on. */
static int tr__loop_open(hk_registry *reg, tr_run *run, tr__loop *L) {
  const tr_run_desc *d = &run->desc;
  int64_t next = L->next;
  if (d->max_steps > 0 && L->ctx.global_step >= d->max_steps) return L->phase = TR__LOOP_DONE, 0;
  if (L->epochs && !L->epoch_open) {
    if (d->max_epochs > 0 && L->ctx.epoch >= d->max_epochs) return L->phase = TR__LOOP_DONE, 0;
    L->epoch_open = 1;
    next = tr_run_epoch_start(reg, &L->ctx, &L->flow, d->train_batches); /* a resume: after its checkpoint's batch */
    tr__loop_signals(L);
  }
  if (L->resumed) { /* the checkpoint came after a batch whose validation had not run yet: that validation now */
    int ends = L->epochs && next >= run->train_batches;
    L->resumed = 0;
    if (tr_run_resumed_at(reg, TR_RUN_AT_BATCH) && L->ctx.global_step > 0 && tr__loop_val_due(run, L, 1, ends)) {
      L->after_val = ends ? TR__LOOP_EPOCH_END : TR__LOOP_OPEN;
      return L->phase = TR__LOOP_VAL_START, 0;
    }
  }
  if (L->epochs && (next >= run->train_batches || HK_FLOW_HAS(&L->flow, HK_FLOW_STOP_EPOCH)))
    return L->phase = TR__LOOP_EPOCH_END, 0; /* (resumed after the epoch's last batch and its validation) */
  if (HK_FLOW_HAS(&L->flow, HK_FLOW_STOP)) return L->phase = TR__LOOP_DONE, 0; /* a stop from on_train_epoch_start */
  tr__loop_views(L);
  L->ctx.batch_idx = next;
  L->next = next + 1;
  L->ctx.loss = NAN;
  tr__loop_lr(reg, run, L);
  L->updated = L->stepped = 0;
  L->phase = TR__LOOP_TRAIN;
  tr__loop_fire(reg, L, HK_ON_TRAIN_BATCH_START);
  tr__loop_noted(L);
  if (HK_FLOW_HAS(&L->flow, HK_FLOW_SKIP_BATCH)) return L->updated = 1, 0; /* a hook skipped it: closed at once */
  return TR_RUN_TRAIN;
}

/* TR__LOOP_TRAIN: the batch the loop ran is over. */
static void tr__loop_close(hk_registry *reg, tr_run *run, tr__loop *L) {
  int ends, due;
  unsigned out;
  tr__loop_signals(L);
  if (!L->updated && !HK_FLOW_HAS(&L->flow, HK_FLOW_SKIP_STEP)) {
    tr__loop_fail(reg, L, "tr_run_next: the training batch %lld ended without tr_run_update (at step %lld): call it "
                  "where your optimizer steps: if (tr_run_update(reg)) your_update(ctx->lr, ctx->global_step)",
                  (long long)L->ctx.batch_idx, (long long)L->ctx.global_step);
    return;
  }
  if (L->stepped) tr__loop_fire(reg, L, HK_ON_AFTER_OPTIMIZER_STEP);
  L->ctx.samples_seen += run->desc.batch_size;
  ends = L->epochs && (L->ctx.batch_idx + 1 >= run->train_batches || HK_FLOW_HAS(&L->flow, HK_FLOW_STOP_EPOCH));
  if (ends) run->epoch_done = 1;
  due = tr__loop_val_due(run, L, L->stepped, ends);
  run->validates_next = due; /* model_checkpoint ranks a save due now on the validation's value */
  if (!HK_FLOW_HAS(&L->flow, HK_FLOW_FAIL)) tr__loop_fire(reg, L, HK_ON_TRAIN_BATCH_END);
  run->validates_next = 0;
  out = run->running != HK_STAGE_NONE ? tr__run_safe_at(run, reg, &L->ctx, &L->flow, 0, "tr_run_batch_end") /* (tr_run_next */
      : tr_run_batch_end(reg, &L->ctx, &L->flow);                      /* checked the call; a hook may have ended the run) */
  tr__loop_noted(L);
  if (out & TR_RUN_STOP) { L->phase = TR__LOOP_DONE; return; }
  L->after_val = ends ? TR__LOOP_EPOCH_END : TR__LOOP_OPEN;
  L->phase = due || (out & TR_RUN_VALIDATE) ? TR__LOOP_VAL_START : L->after_val;
}

/* TR__LOOP_VAL_START / TR__LOOP_VAL: a validation batch, or its end. Returns TR_RUN_VAL_BATCH or 0. */
static int tr__loop_val(hk_registry *reg, tr_run *run, tr__loop *L) {
  int64_t n = run->desc.val_batches;
  unsigned out;
  if (L->phase == TR__LOOP_VAL_START) {
    L->val_n = 0;
    L->val_sum = 0;
    (void)tr_run_eval_start(reg, &L->ctx, &L->flow, "val", n);
    L->phase = TR__LOOP_VAL;
  } else {
    tr__loop_signals(L);
    L->val_sum += L->ctx.loss;
    L->val_n++;
    tr__loop_fire(reg, L, HK_ON_VALIDATION_BATCH_END);
  }
  if (L->val_n < n && !HK_FLOW_HAS(&L->flow, HK_FLOW_STOP_EPOCH)) { /* (a hook may end a validation early) */
    L->ctx.batch_idx = L->val_n;
    L->ctx.loss = NAN;
    tr__loop_fire(reg, L, HK_ON_VALIDATION_BATCH_START);
    tr__loop_noted(L);
    return TR_RUN_VAL_BATCH;
  }
  tr_run_eval_end(reg, &L->ctx, &L->flow, L->val_n ? L->val_sum / (double)L->val_n : NAN);
  tr__loop_signals(L);
  if (L->sched.kind == TR_SCHED_PLATEAU) { /* the plateau looks at its metric after every validation */
    double m = NAN;
    (void)hk_metric_get(&L->ctx, L->sched.monitor[0] ? L->sched.monitor : "val/loss", &m);
    (void)tr_plateau_step(&L->sched, &run->lr_state, run->desc.lr, m);
  }
  out = tr_run_batch_end(reg, &L->ctx, &L->flow); /* the validation's checkpoints and stop: at this step */
  tr__loop_noted(L);
  L->phase = out & TR_RUN_STOP ? TR__LOOP_DONE : L->after_val;
  return 0;
}

/* TR__LOOP_EPOCH_END: on_train_epoch_end, then the next epoch (as Lightning's current_epoch, also after a stop:
   epochs done). A run that failed here (Ctrl-C seen at this safe point) keeps the epoch: its checkpoints say
   "at the end of this epoch", and a resume starts the next. */
static void tr__loop_epoch_end(hk_registry *reg, tr_run *run, tr__loop *L) {
  unsigned out;
  tr__loop_fire(reg, L, HK_ON_TRAIN_EPOCH_END);
  out = tr_run_epoch_end(reg, &L->ctx, &L->flow);
  L->epoch_open = 0;
  L->phase = out & TR_RUN_STOP ? TR__LOOP_DONE : TR__LOOP_OPEN;
  if (!run->failed) {
    L->ctx.epoch++;
    L->ctx.batch_idx = L->next = 0;
    run->tr__p->at = TR_RUN_AT_EPOCH_START; /* a save from now on: the next epoch, none of its batches run */
  }
  tr__loop_noted(L);
}

TRAIN_API int tr_run_next(hk_registry *reg) {
  tr_run *run = reg ? (tr_run *)hk_attached(reg) : NULL;
  tr__loop *L = run ? (tr__loop *)run->tr__p->loop : NULL;
  if (!L) {
    if (reg) hk_set_error(reg, HK_ERR_INVALID, "tr_run_next: no run was begun on this registry: call tr_run_begin first");
    return 0;
  }
  if (L->phase == TR__LOOP_DONE || tr__loop_tampered(reg, L, "tr_run_next")) return 0;
  if (run->running == HK_STAGE_NONE) return tr__loop_fail(reg, L, "tr_run_next: the run has ended (tr_run_end)"), 0;
  if (hk_dispatching(reg))
    return tr__loop_fail(reg, L, "tr_run_next: called from a hook of %s", hk_event_name(reg, L->ctx.event)), 0;
  if (run->tr__p->busy || run->tr__p->io || run->tr__p->sending)
    return tr__loop_fail(reg, L, "tr_run_next: called from a hook while the run fires its events"), 0;
  for (;;) {
    int what = 0;
    if (run->failed) L->phase = TR__LOOP_DONE;
    switch (L->phase) {
    case TR__LOOP_OPEN: what = tr__loop_open(reg, run, L); break;
    case TR__LOOP_TRAIN: tr__loop_close(reg, run, L); break;
    case TR__LOOP_VAL_START: case TR__LOOP_VAL: what = tr__loop_val(reg, run, L); break;
    case TR__LOOP_EPOCH_END: tr__loop_epoch_end(reg, run, L); break;
    default: return tr__loop_noted(L), 0;
    }
    if (what) return tr__loop_noted(L), what;
  }
}

TRAIN_API int tr_run_update(hk_registry *reg) {
  tr__loop *L = tr__loop_of(reg);
  tr_run *run;
  int window;
  if (L && hk_dispatching(reg) && L->phase != TR__LOOP_DONE) { /* a hook would step the optimizer inside the loop's event */
    tr__loop_fail(reg, L, "tr_run_update: called from a hook of %s: call it from the loop, where your optimizer steps",
                  hk_event_name(reg, L->ctx.event));
    return 0;
  }
  if (!L || L->phase != TR__LOOP_TRAIN) {
    if (L && L->phase != TR__LOOP_DONE)
      tr__loop_fail(reg, L, "tr_run_update: called outside a training batch (%s): call it once in each batch "
                    "tr_run_next gave as TR_RUN_TRAIN", L->phase == TR__LOOP_VAL ? "in a validation batch" : "between "
                    "batches");
    else if (!L && reg) hk_set_error(reg, HK_ERR_INVALID, "tr_run_update: no run was begun: call tr_run_begin first");
    return 0;
  }
  if (tr__loop_tampered(reg, L, "tr_run_update")) return 0;
  if (L->updated) {
    tr__loop_fail(reg, L, "tr_run_update: called twice in the training batch %lld (step %lld): once per batch",
                  (long long)L->ctx.batch_idx, (long long)L->ctx.global_step);
    return 0;
  }
  run = (tr_run *)hk_attached(reg);
  tr__loop_signals(L);
  L->updated = 1;
  L->window_skip |= HK_FLOW_HAS(&L->flow, HK_FLOW_SKIP_STEP);
  window = run->accumulation > 1 ? run->accumulation : 1;
  if (++L->micro < window) return 0; /* the window goes on: the gradients accumulate */
  L->micro = 0;
  if (L->window_skip) return L->window_skip = 0, 0;
  L->stepped = 1;
  L->ctx.global_step++;
  tr__loop_noted(L);
  return 1;
}

TRAIN_API tr_err tr_run_end(hk_registry *reg) {
  tr__loop *L = tr__loop_of(reg);
  tr_run *run;
  if (!L) {
    if (reg) hk_set_error(reg, HK_ERR_INVALID, "tr_run_end: no run was begun on this registry: call tr_run_begin first");
    return TR_ERR_INVALID;
  }
  run = (tr_run *)hk_attached(reg);
  if (run->running == HK_STAGE_NONE) return tr_run_finish(reg, &L->ctx, TR_OK); /* refused: said there */
  if (hk_dispatching(reg)) { /* it would end the run inside the dispatch: the run fails, the loop's tr_run_next returns 0 */
    if (L->phase != TR__LOOP_DONE)
      tr__loop_fail(reg, L, "tr_run_end: called from a hook of %s: call it from the loop, once tr_run_next returns 0 "
                    "(a hook ends the run with HK_STOP, or HK_FAIL)", hk_event_name(reg, L->ctx.event));
    return TR_ERR_INVALID;
  }
  if (L->phase != TR__LOOP_DONE && !tr__loop_tampered(reg, L, "tr_run_end")) {
    if (L->phase == TR__LOOP_TRAIN && L->updated) tr__loop_close(reg, run, L); /* the loop left after a whole batch */
    else if (L->phase == TR__LOOP_VAL) tr_run_eval_end(reg, &L->ctx, &L->flow, NAN);
  }
  L->phase = TR__LOOP_DONE;
  return tr_run_finish(reg, &L->ctx, TR_OK);
}

TR__C_END /* part */
#endif /* implementation */
#endif /* part */
