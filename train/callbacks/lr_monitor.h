/* train/callbacks/lr_monitor.h - lr_monitor. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_LR_MONITOR_H /* part */
#define TRAIN_LR_MONITOR_H /* part */
#include "../battery.h" /* part */

TR__C_BEGIN /* part */
/* ---- lr_monitor (Lightning's LearningRateMonitor) -------------------------------------------------
   Publishes the lr as "lr-<Optimizer>" (lr-AdamW; "lr" without tr_run_desc.optimizer), with
   log_momentum / log_weight_decay "lr-<Optimizer>-momentum" (AdamW: beta1) and "-weight_decay". Interval
   step (lazy metrics: a step costs nothing) or epoch (one record of its own per epoch); default: the
   schedule's. Needs no logger: any hook reads the metrics. Hand-written loop: on_train_start (and
   on_train_epoch_start) with ctx->lr set. docs/callbacks.md. */
enum { TR_LR_LOG_STEP = 1, TR_LR_LOG_EPOCH = 2 };
#define TR_LR_MONITOR_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD) */ \
  X(CHOICE, int,          logging_interval, "auto",  "auto|step|epoch", "when to publish (auto: the schedule's interval; C: " \
    "TR_LR_LOG_STEP, TR_LR_LOG_EPOCH)") \
  X(TRI,    int,          log_momentum,     "false", NULL, "also <name>-momentum (SGD's momentum, AdamW's beta1)") \
  X(TRI,    int,          log_weight_decay, "false", NULL, "also <name>-weight_decay") \
  X(STRING, const char *, name,             "",      NULL, "the metric's name (empty: lr-<Optimizer>; Lightning's scheduler name)")
typedef struct tr_lr_monitor_desc { TR_LR_MONITOR_PARAMS(TR__FIELD) } tr_lr_monitor_desc;
typedef struct tr_lr_monitor_state {
  const char *name, *momentum_name, *weight_decay_name; /* the metrics it publishes ("" = none) */
  int per_epoch;                /* the resolved interval: 1 epoch, 0 step */
} tr_lr_monitor_state;
TRAIN_API tr_err tr_lr_monitor(hk_registry *reg, const tr_lr_monitor_desc *d, hk_handle *out);
TRAIN_API const tr_lr_monitor_state *tr_lr_monitor_get(const hk_registry *reg, hk_handle h);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
/* ---- lr_monitor ------------------------------------------------------------------------------------ */
typedef struct tr__lrm {
  tr_lr_monitor_state pub;
  tr_run *run;          /* the registry's run: what the loop says (train/run.h) */
  int interval, log_momentum, log_wd, named;
  char name[128], mom[160], wd[160];
  tr_log_record rec;    /* interval epoch: the record sent at each epoch's start */
} tr__lrm;

static void tr__lrm_destroy(void *user) {
  tr__lrm *s = (tr__lrm *)user;
  if (s) tr_log_record_free(&s->rec);
  free(s);
}
/* lazy: read only when someone asks (no user pointer: the callback may go first) */
static double tr__lrm_lr(const hk_ctx *ctx, void *user) { (void)user; return ctx->lr; }
/* lazy too, in every row the lr is in (Lightning's rows); the run's values */
static double tr__lrm_momentum(const hk_ctx *ctx, void *user) {
  const tr_run *run = (const tr_run *)hk_attached(ctx->reg);
  (void)user;
  return run ? run->desc.momentum : NAN;
}
static double tr__lrm_weight_decay(const hk_ctx *ctx, void *user) {
  const tr_run *run = (const tr_run *)hk_attached(ctx->reg);
  (void)user;
  return run ? run->desc.weight_decay : NAN;
}

static hk_signal tr__lrm_train_start(hk_ctx *ctx, void *user) {
  tr__lrm *s = (tr__lrm *)user;
  tr_run *run = s->run;
  const char *opt = run ? run->desc.optimizer : NULL;
  if (!s->named) { /* Lightning's lr-<optimizer class>; "lr" when the loop names no optimizer */
    if (opt) snprintf(s->name, sizeof s->name, "lr-%s", opt);
    else snprintf(s->name, sizeof s->name, "lr");
  }
  snprintf(s->mom, sizeof s->mom, "%s-momentum", s->name);
  snprintf(s->wd, sizeof s->wd, "%s-weight_decay", s->name);
  s->pub.per_epoch = s->interval == TR_LR_LOG_EPOCH || (s->interval == 0 && run && run->desc.lr_per_epoch);
  s->pub.name = s->name;
  s->pub.momentum_name = s->log_momentum && opt ? s->mom : "";
  s->pub.weight_decay_name = s->log_wd && opt ? s->wd : "";
  if (!s->pub.per_epoch) { /* every training record: the lr, the momentum and the weight decay (lazy: a step costs nothing) */
    if (hk_metric_lazy(ctx, s->name, tr__lrm_lr, NULL) || (opt && s->log_momentum && hk_metric_lazy(ctx, s->mom, tr__lrm_momentum, NULL)) ||
        (opt && s->log_wd && hk_metric_lazy(ctx, s->wd, tr__lrm_weight_decay, NULL)))
      return hk_fail(ctx, "out of memory");
    return HK_CONTINUE;
  }
  if (opt && s->log_momentum) (void)hk_metric_set(ctx, s->mom, run->desc.momentum); /* the epoch's record reads them */
  if (opt && s->log_wd) (void)hk_metric_set(ctx, s->wd, run->desc.weight_decay);
  return HK_CONTINUE;
}
/* interval epoch: the metric, and a record of its own at the epoch's start (Lightning's) */
static hk_signal tr__lrm_epoch_start(hk_ctx *ctx, void *user) {
  tr__lrm *s = (tr__lrm *)user;
  double v;
  if (!s->pub.per_epoch) return HK_CONTINUE;
  (void)hk_metric_set(ctx, s->name, ctx->lr); /* the loop sets the epoch's lr first */
  if (!ctx->reg || !HK_ACTIVE(ctx->reg, HK_ON_LOG)) return HK_CONTINUE;
  s->rec.step = ctx->global_step;
  s->rec.epoch = ctx->epoch;
  s->rec.stage = "train";
  s->rec.n_metrics = s->rec.n_histograms = 0;
  if (tr_log_set(&s->rec, s->name, ctx->lr) != TR_OK) return hk_fail(ctx, "out of memory");
  if (s->pub.momentum_name[0] && hk_metric_get(ctx, s->mom, &v)) (void)tr_log_set(&s->rec, s->mom, v);
  if (s->pub.weight_decay_name[0] && hk_metric_get(ctx, s->wd, &v)) (void)tr_log_set(&s->rec, s->wd, v);
  return tr_log_emit(ctx->reg, ctx, &s->rec);
}
/* interval epoch: kept out of the other records (they carry what was set since the last one) */
static hk_signal tr__lrm_on_log(hk_ctx *ctx, void *user) {
  tr__lrm *s = (tr__lrm *)user;
  tr_log_record *r = tr_log_current(ctx);
  if (!r || r == &s->rec || !s->pub.per_epoch) return HK_CONTINUE;
  tr_log_drop(r, s->name);
  if (s->pub.momentum_name[0]) tr_log_drop(r, s->mom);
  if (s->pub.weight_decay_name[0]) tr_log_drop(r, s->wd);
  return HK_CONTINUE;
}

static tr_err tr__lrm_make(hk_registry *reg, const tr_lr_monitor_desc *d, hk_handle *out, tr__why *w) {
  tr__lrm *s;
  hk_callback cb;
  if (!d) return tr__bad(w, "lr_monitor: desc is NULL");
  if (d->logging_interval != 0 && d->logging_interval != TR_LR_LOG_STEP && d->logging_interval != TR_LR_LOG_EPOCH)
    return tr__bad(w, "lr_monitor: logging_interval %d is not valid (0 = the schedule's, TR_LR_LOG_STEP or TR_LR_LOG_EPOCH)", d->logging_interval);
  if (d->name && strlen(d->name) > 100) return tr__bad(w, "lr_monitor: name is longer than 100 characters");
  s = (tr__lrm *)calloc(1, sizeof *s);
  if (!s) return tr__bad(w, "lr_monitor: out of memory"), TR_ERR_NOMEM;
  s->run = tr_run_get(reg);
  s->interval = d->logging_interval;
  s->log_momentum = tr__flag(d->log_momentum, 0);
  s->log_wd = tr__flag(d->log_weight_decay, 0);
  if (d->name && d->name[0]) snprintf(s->name, sizeof s->name, "%s", d->name), s->named = 1;
  s->pub.name = s->pub.momentum_name = s->pub.weight_decay_name = "";
  memset(&cb, 0, sizeof cb);
  cb.name = "lr_monitor";
  cb.user = s;
  cb.on_train_start = tr__lrm_train_start;
  cb.on_train_epoch_start = tr__lrm_epoch_start;
  if (s->interval != TR_LR_LOG_STEP) cb.on_log = tr__lrm_on_log; /* where the epoch interval is possible */
  cb.destroy = tr__lrm_destroy;
  return tr__cb_register(reg, &cb, 0, out, w);
}
TR__PUBLIC_OF(tr_lr_monitor, lrm)
TR__FACTORY_OF(lrm, tr_lr_monitor_desc, TR_LR_MONITOR_PARAMS)
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
