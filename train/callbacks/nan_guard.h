/* train/callbacks/nan_guard.h - nan_guard. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_NAN_GUARD_H /* part */
#define TRAIN_NAN_GUARD_H /* part */
#include "../battery.h" /* part */

TR__C_BEGIN /* part */
/* ---- nan_guard (Lightning's detect_anomaly) ---------------------------
   Checks the loss at on_before_backward and the gradients at on_before_optimizer_step with bit tests
   (they survive -ffast-math), through the shared hk_grad_norm pass; only a non-finite norm is scanned for
   the first bad tensor and index. TR_NAN_FAIL (default) fails the run naming what, where and the step;
   TR_NAN_SKIP_STEP skips the window's step; TR_NAN_STOP skips it and stops. Counters in checkpoints.
   Hand-written loop: fire those events (HK_FIRE_FLOW), skip at HK_FLOW_SKIP_STEP, fire
   on_train_batch_end, stop at HK_FLOW_STOP; a check whose event never fires is said once.
   docs/callbacks.md. */
typedef enum tr_nan_action { TR_NAN_FAIL = 0, TR_NAN_SKIP_STEP, TR_NAN_STOP } tr_nan_action;
#define TR_NAN_GUARD_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD) */ \
  X(TRI,    int,           check_loss,  "true", NULL, "check the training loss (before backward)") \
  X(TRI,    int,           check_grads, "true", NULL, "check the gradients (before the optimizer step)") \
  X(CHOICE, tr_nan_action, action,      "fail", "fail|skip_step|stop", "what to do when something is not finite") \
  X(TRI,    int,           verbose,     "true", NULL, "say what was found (skip_step and stop)")
typedef struct tr_nan_guard_desc { TR_NAN_GUARD_PARAMS(TR__FIELD) } tr_nan_guard_desc;
typedef struct tr_nan_guard_state {
  int64_t found;                /* non-finite losses or gradients seen */
  int64_t skipped;              /* steps it dropped (action skip_step or stop) */
  const char *last;             /* what it found last, e.g. "gradient of 'w1'[17] is nan at step 40" ("" before) */
} tr_nan_guard_state;
TRAIN_API tr_err tr_nan_guard(hk_registry *reg, const tr_nan_guard_desc *d, hk_handle *out);
TRAIN_API const tr_nan_guard_state *tr_nan_guard_get(const hk_registry *reg, hk_handle h);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
/* ---- nan_guard ------------------------------------------------------------------------------------ */
typedef struct tr__ng {
  tr_nan_guard_state pub;
  tr_run *run;          /* the registry's run: what the loop says (train/run.h) */
  int check_loss, check_grads, verbose;
  int stop_due;                 /* action stop: the step was skipped, HK_STOP at this batch's end */
  int64_t loss_checks, grad_checks; /* events seen in this fit: a check the loop never fires is said once */
  int64_t fit_step;             /* global_step at on_fit_start (a resumed run's): the fit's own steps come after */
  int warned_loss, warned_grads;
  tr_nan_action action;
  char last[200];
} tr__ng;

static void tr__ng_destroy(void *user) { free(user); }

static hk_signal tr__ng_act(tr__ng *s, hk_ctx *ctx) {
  s->pub.found++;
  if (s->action == TR_NAN_FAIL) return hk_fail(ctx, "%s", s->last);
  if (s->verbose)
    tr__run_say(s->run, ctx, "nan_guard", "%s: %s", s->last, s->action == TR_NAN_STOP ? "step skipped, stopping training" : "step skipped");
  /* stop: the bad update is never applied either; one signal per event, so HK_STOP comes at the batch's end */
  if (s->action == TR_NAN_STOP) s->stop_due = 1;
  s->pub.skipped++;
  return HK_SKIP_STEP;
}
static hk_signal tr__ng_batch_end(hk_ctx *ctx, void *user) {
  tr__ng *s = (tr__ng *)user;
  (void)ctx;
  if (!s->stop_due) return HK_CONTINUE;
  s->stop_due = 0;
  return HK_STOP;
}
/* A check the loop never fires its event for would find nothing, silently: said once (at: where it is known). */
static void tr__ng_unfired(tr__ng *s, const hk_ctx *ctx, int loss, const char *at) {
  if (ctx->stage != HK_STAGE_FIT || (loss ? s->warned_loss || s->loss_checks : s->warned_grads || s->grad_checks)) return;
  *(loss ? &s->warned_loss : &s->warned_grads) = 1;
  tr__run_say(s->run, ctx, "nan_guard", "never checked %s in this fit: it checks at %s, which the loop did not fire %s; "
              "fire %s (HK_FIRE_FLOW) with %s, or set %s=false", loss ? "the training loss" : "the gradients",
              loss ? "on_before_backward" : "on_before_optimizer_step", at,
              loss ? "on_before_backward" : "on_before_optimizer_step", loss ? "ctx->loss set, before backward" :
              "ctx->grads set, before the update", loss ? "check_loss" : "check_grads");
}
static hk_signal tr__ng_fit_start(hk_ctx *ctx, void *user) {
  tr__ng *s = (tr__ng *)user;
  s->loss_checks = s->grad_checks = 0;
  s->fit_step = ctx->global_step;
  return HK_CONTINUE;
}
static hk_signal tr__ng_train_end(hk_ctx *ctx, void *user) {
  tr__ng *s = (tr__ng *)user;
  if (ctx->global_step <= s->fit_step) return HK_CONTINUE; /* no step in this fit: nothing was missed */
  if (s->check_loss) tr__ng_unfired(s, ctx, 1, "in this fit");
  if (s->check_grads) tr__ng_unfired(s, ctx, 0, "in this fit");
  return HK_CONTINUE;
}
static hk_signal tr__ng_loss(hk_ctx *ctx, void *user) {
  tr__ng *s = (tr__ng *)user;
  double loss = ctx->loss;
  s->loss_checks++;
  if (!s->check_loss) return HK_CONTINUE;
  if (ctx->params && ctx->n_tensors > 0 && ctx->params[0].on_device) (void)hk_metric_get(ctx, "train/loss", &loss); /* on the GPU: one copy */
  if (hk_is_finite(loss)) return HK_CONTINUE;
  snprintf(s->last, sizeof s->last, "the training loss is %s at epoch %lld, batch %lld, step %lld", tr__nonfinite_name(loss),
           (long long)ctx->epoch, (long long)ctx->batch_idx, (long long)ctx->global_step + 1);
  return tr__ng_act(s, ctx);
}
/* One pass through hk_grad_norm (cached, shared); the scan for the culprit only when it is not finite. */
static hk_signal tr__ng_grads(hk_ctx *ctx, void *user) {
  tr__ng *s = (tr__ng *)user;
  int k;
  size_t i;
  s->grad_checks++;
  if (s->check_loss) tr__ng_unfired(s, ctx, 1, "before this fit's first optimizer step"); /* backward ran: known now */
  if (!s->check_grads || !ctx->grads) return HK_CONTINUE;
  if (tr__views_data(ctx, ctx->grads, "ctx->grads")) return HK_FAIL; /* a late buffer never set: said, not a crash */
  if (hk_is_finite(hk_grad_norm(ctx))) return HK_CONTINUE;
  snprintf(s->last, sizeof s->last, "the gradient norm is not finite at step %lld", (long long)ctx->global_step + 1);
  for (k = 0; k < ctx->n_tensors; k++) {
    const hk_tensor *g = &ctx->grads[k];
    if (g->on_device) continue;
    for (i = 0; i < g->count; i++)
      if (!hk_is_finitef(g->data[i])) {
        snprintf(s->last, sizeof s->last, "gradient of '%s'[%zu] is %s at epoch %lld, batch %lld, step %lld", g->name ? g->name : "?", i,
                 tr__nonfinite_name(g->data[i]), (long long)ctx->epoch, (long long)ctx->batch_idx, (long long)ctx->global_step + 1);
        return tr__ng_act(s, ctx);
      }
  }
  return tr__ng_act(s, ctx); /* finite values whose squares overflow, or device memory */
}
static int tr__ng_save(void *user, hk_bytes *out) {
  tr__ng *s = (tr__ng *)user;
  tr__put_u64(out, 1);
  tr__put_i64(out, s->pub.found);
  tr__put_i64(out, s->pub.skipped);
  tr__put_str(out, s->last);
  return out->failed ? -1 : 0;
}
static int tr__ng_load(void *user, hk_reader *in) {
  tr__ng *s = (tr__ng *)user;
  int64_t found = 0, skipped = 0;
  char *last = NULL;
  if (tr__get_version(in, 1) || tr__get_count(in, "found", 0, &found) || tr__get_count(in, "skipped", 0, &skipped)) return -1;
  if (skipped > found) return hk_reject(in, "skipped (%lld) is more than found (%lld)", (long long)skipped, (long long)found);
  if (tr__get_text(in, "the last message", &last)) return -1;
  if (tr__get_end(in)) { free(last); return -1; }
  s->pub.found = found;
  s->pub.skipped = skipped;
  snprintf(s->last, sizeof s->last, "%s", last);
  free(last);
  return 0;
}
static tr_err tr__ng_make(hk_registry *reg, const tr_nan_guard_desc *d, hk_handle *out, tr__why *w) {
  tr__ng *s;
  hk_callback cb;
  if (!d) return tr__bad(w, "nan_guard: desc is NULL");
  if (d->action != TR_NAN_FAIL && d->action != TR_NAN_SKIP_STEP && d->action != TR_NAN_STOP)
    return tr__bad(w, "nan_guard: action %d is not valid (fail, skip_step or stop)", (int)d->action);
  s = (tr__ng *)calloc(1, sizeof *s);
  if (!s) return tr__bad(w, "nan_guard: out of memory"), TR_ERR_NOMEM;
  s->run = tr_run_get(reg);
  s->check_loss = tr__flag(d->check_loss, 1);
  s->check_grads = tr__flag(d->check_grads, 1);
  s->verbose = tr__flag(d->verbose, 1);
  s->action = d->action;
  s->pub.last = s->last;
  if (!s->check_loss && !s->check_grads) { free(s); return tr__bad(w, "nan_guard: check_loss and check_grads are both off: nothing to check"); }
  memset(&cb, 0, sizeof cb);
  cb.name = "nan_guard";
  cb.user = s;
  if (s->check_loss) cb.on_before_backward = tr__ng_loss;
  if (s->check_grads) cb.on_before_optimizer_step = tr__ng_grads;
  if (s->action == TR_NAN_STOP) cb.on_train_batch_end = tr__ng_batch_end;
  cb.on_fit_start = tr__ng_fit_start; /* once per run: where a check the loop never fires is said */
  cb.on_train_end = tr__ng_train_end;
  cb.save_state = tr__ng_save;
  cb.load_state = tr__ng_load;
  cb.destroy = tr__ng_destroy;
  return tr__cb_register(reg, &cb, -10, out, w); /* before the monitors: a skipped step is not monitored */
}
TR__PUBLIC_OF(tr_nan_guard, ng)
TR__FACTORY_OF(ng, tr_nan_guard_desc, TR_NAN_GUARD_PARAMS)
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
