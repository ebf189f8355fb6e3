/* train/callbacks/finetuning.h - finetuning. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_FINETUNING_H /* part */
#define TRAIN_FINETUNING_H /* part */
#include "../battery.h" /* part */

TR__C_BEGIN /* part */
/* ---- finetuning (Lightning's BackboneFinetuning) ----------------------------------------------------
   The tensors matching `match` are frozen until epoch unfreeze_at_epoch, then train at ratio x the run's
   lr: initial_lr / lr (or initial_ratio) at the unfreeze, times lr_factor (lr_factor_at in C) at each
   later epoch's start, with align never above 1. Unfrozen tensors start AdamW afresh, as Lightning's new
   parameter group. norms with train_norms (train_bn) are never frozen. State in checkpoints. Needs epochs.
   docs/callbacks.md ("Parameter groups and fine-tuning"). */
typedef double (*tr_epoch_factor_fn)(void *user, int64_t epoch); /* lr_factor_at's type */
#define TR_FINETUNING_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD) */ \
  X(STRING,      const char *, match,             NULL,   NULL, "the backbone's tensors ('|'-separated whole-name patterns, " \
    "'*' and '?'); required") \
  X(INT_ZERO,    int64_t,      unfreeze_at_epoch, "10",   NULL, "the epoch at whose start the backbone is unfrozen (0-based)") \
  X(DOUBLE_ZERO, double,       lr_factor,         "2",    NULL, "the ratio's growth at each later epoch's start (> 0)") \
  X(DOUBLE_ZERO, double,       initial_ratio,     "0.1",  NULL, "the backbone's lr as a fraction of the run's at the unfreeze (> 0)") \
  X(DOUBLE,      double,       initial_lr,        "0",    NULL, "the backbone's lr at the unfreeze instead (0 = from initial_ratio)") \
  X(TRI,         int,          align,             "true", NULL, "the ratio never goes above 1") \
  X(STRING,      const char *, norms,             "",     NULL, "the backbone's normalisation tensors (patterns; \"\" = none)") \
  X(TRI,         int,          train_norms,       "true", NULL, "norms are never frozen (Lightning's train_bn)") \
  X(BOOL,        int,          verbose,           "false", NULL, "print the backbone's lr at every epoch's start once unfrozen") \
  X(C_ONLY,      tr_epoch_factor_fn, lr_factor_at, NULL, NULL, "the growth per epoch instead (Lightning's lambda_func: " \
    "called with e + 1 at epoch e's start)") \
  X(C_ONLY,      void *,       lr_factor_user,    NULL,   NULL, "lr_factor_at's user")
typedef struct tr_finetuning_desc { TR_FINETUNING_PARAMS(TR__FIELD) } tr_finetuning_desc;
typedef struct tr_finetuning_state {
  int unfrozen;         /* the backbone trains */
  int64_t unfrozen_at;  /* the optimizer steps taken when it was unfrozen */
  double ratio;         /* its lr as a fraction of the run's (0 while frozen) */
} tr_finetuning_state;
TRAIN_API tr_err tr_finetuning(hk_registry *reg, const tr_finetuning_desc *d, hk_handle *out);
TRAIN_API const tr_finetuning_state *tr_finetuning_get(const hk_registry *reg, hk_handle h);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
/* ---- finetuning ----------------------------------------------------------------------------------- */
typedef struct tr__ft {
  tr_finetuning_state pub;
  tr__pg_rule rule;     /* a rule that gives nothing: the run keeps per-tensor settings, and says a match of none */
  tr_run *run;
  char *match, *norms;
  int64_t at;           /* unfreeze_at_epoch */
  int64_t last_epoch;   /* the epoch whose start set the ratio last (-1: none): a resumed epoch is not counted twice */
  double factor, initial_ratio, initial_lr;
  tr_epoch_factor_fn factor_at;
  void *factor_user;
  int align, train_norms, verbose;
} tr__ft;

static void tr__ft_destroy(void *user) {
  tr__ft *s = (tr__ft *)user;
  if (!s) return;
  if (s->run) tr__run_rule_drop(s->run, &s->rule);
  free(s->match);
  free(s->norms);
  free(s);
}
static int tr__ft_takes(const tr__ft *s, const char *name) {
  return tr_name_match(s->match, name) && !(s->train_norms && s->norms[0] && tr_name_match(s->norms, name));
}
/* What decides its effect on the updates, for tr_run_groups_hash (several processes compare it at a fit's
   start): which of the n tensors it takes (match, norms, train_norms), when it unfreezes and the ratio's
   schedule. lr_factor_at: only whether it is given (a function's address says nothing across processes). */
static uint64_t tr__ft_schedule(const tr__pg_rule *r, const hk_tensor *v, int n, uint64_t h) {
  const tr__ft *s = (const tr__ft *)(const void *)((const char *)r - offsetof(tr__ft, rule));
  double x[3];
  int64_t k[4];
  int i;
  for (i = 0; i < n; i++) {
    unsigned char takes = (unsigned char)tr__ft_takes(s, v[i].name);
    h = tr__fnv(h, &takes, 1);
  }
  x[0] = s->factor;
  x[1] = s->initial_ratio;
  x[2] = s->initial_lr + 0.0;
  k[0] = s->at;
  k[1] = s->align;
  k[2] = s->factor_at != NULL;
  k[3] = 0;
  h = tr__fnv(h, (const unsigned char *)x, sizeof x);
  return tr__fnv(h, (const unsigned char *)k, sizeof k);
}
/* The backbone's tensors as the state says, on the run's table as it was built at the start: frozen since the
   start (step 0), and unfrozen at unfrozen_at with the ratio (tr_run_tensor_set counts their steps from there). */
static hk_signal tr__ft_apply(tr__ft *s, hk_ctx *ctx, int fresh) {
  int i;
  for (i = 0; i < ctx->n_tensors; i++) {
    if (!tr__ft_takes(s, ctx->params[i].name)) continue;
    if (fresh && tr_run_tensor_set(ctx->reg, i, 1, 1, 0) != TR_OK) return hk_fail(ctx, "%s", tr_run_error(ctx->reg));
    if (s->pub.unfrozen && tr_run_tensor_set(ctx->reg, i, 0, s->pub.ratio, s->pub.unfrozen_at) != TR_OK)
      return hk_fail(ctx, "%s", tr_run_error(ctx->reg));
  }
  return HK_CONTINUE;
}
static hk_signal tr__ft_train_start(hk_ctx *ctx, void *user) {
  tr__ft *s = (tr__ft *)user;
  if (s->run->desc.epochs == TR_NO)
    return hk_fail(ctx, "finetuning unfreezes at an epoch's start, and this loop has no epochs (epochs = TR_NO): use a "
                   "param_group(frozen=...) or tr_run_tensor_set in a step loop");
  if (!tr_run_grouped(ctx->reg)) return hk_fail(ctx, "the run has no tensors to freeze (ctx->params)");
  return tr__ft_apply(s, ctx, 1);
}
static hk_signal tr__ft_epoch_start(hk_ctx *ctx, void *user) {
  tr__ft *s = (tr__ft *)user;
  if (ctx->epoch < s->at || ctx->epoch == s->last_epoch) return HK_CONTINUE;
  if (!s->pub.unfrozen) {
    s->pub.unfrozen = 1;
    s->pub.unfrozen_at = ctx->global_step;
    double lr = ctx->lr > 0 ? ctx->lr : s->run->desc.lr; /* (a loop of your own sets the batch's lr after this event) */
    s->pub.ratio = s->initial_lr > 0 && lr > 0 ? s->initial_lr / lr : s->initial_ratio;
  } else {
    s->pub.ratio *= s->factor_at ? s->factor_at(s->factor_user, ctx->epoch + 1) : s->factor;
    if (s->align && s->pub.ratio > 1) s->pub.ratio = 1;
  }
  if (!hk_is_finite(s->pub.ratio) || s->pub.ratio <= 0)
    return hk_fail(ctx, "the backbone's lr ratio became %g at epoch %lld: lr_factor_at must return a finite factor > 0",
                   s->pub.ratio, (long long)ctx->epoch);
  s->last_epoch = ctx->epoch;
  if (s->verbose && ctx->rank == 0)
    tr_run_say(ctx->reg, ctx, "finetuning", "epoch %lld: lr %g, backbone lr %g", (long long)ctx->epoch, ctx->lr, ctx->lr * s->pub.ratio);
  return tr__ft_apply(s, ctx, 0);
}

static int tr__ft_save(void *user, hk_bytes *out) {
  const tr__ft *s = (const tr__ft *)user;
  tr__put_u64(out, 1);
  tr__put_u64(out, (uint64_t)s->pub.unfrozen);
  tr__put_i64(out, s->pub.unfrozen_at);
  tr__put_i64(out, s->last_epoch);
  tr__put_f64(out, s->pub.ratio);
  return out->failed ? -1 : 0;
}
static int tr__ft_load(void *user, hk_reader *in) {
  tr__ft *s = (tr__ft *)user;
  uint64_t unfrozen;
  int64_t at, last;
  double ratio;
  if (tr__get_version(in, 1)) return -1;
  if (tr__get_u64(in, &unfrozen) || unfrozen > 1) return hk_reject(in, "unfrozen is truncated or not 0 or 1");
  if (tr__get_count(in, "unfrozen_at", 0, &at)) return -1;
  if (tr__get_i64(in, &last) || last < -1 || last > TR__MAX_COUNT) return hk_reject(in, "last_epoch is truncated or outside -1..2^53");
  if (tr__get_f64(in, &ratio) || !hk_is_finite(ratio) || ratio < 0 || (unfrozen && ratio == 0))
    return hk_reject(in, "the lr ratio is truncated, not finite, or not > 0 once unfrozen");
  if (tr__get_end(in)) return -1;
  s->pub.unfrozen = (int)unfrozen;
  s->pub.unfrozen_at = at;
  s->pub.ratio = ratio;
  s->last_epoch = last; /* on_train_start applies it (the run's table is built anew at every start) */
  return 0;
}

static tr_err tr__ft_make(hk_registry *reg, const tr_finetuning_desc *d, hk_handle *out, tr__why *w) {
  tr__ft *s;
  hk_callback cb;
  tr_run *run;
  int64_t at;
  if (!d) return tr__bad(w, "finetuning: desc is NULL");
  if (!d->match || !d->match[0]) return tr__bad(w, "finetuning: match is required: the backbone's tensors, e.g. match=backbone.*");
  at = tr__zero_int64(d->unfreeze_at_epoch, 10);
  if (at < 0) return tr__bad(w, "finetuning: unfreeze_at_epoch is %lld: give an epoch >= 0", (long long)at);
  if (!hk_is_finite(d->lr_factor) || d->lr_factor < 0 || (d->lr_factor == 0 && signbit(d->lr_factor)))
    return tr__bad(w, "finetuning: lr_factor is %g: give a finite factor > 0", d->lr_factor);
  if (!hk_is_finite(d->initial_ratio) || d->initial_ratio < 0 || (d->initial_ratio == 0 && signbit(d->initial_ratio)))
    return tr__bad(w, "finetuning: initial_ratio is %g: give a finite fraction > 0", d->initial_ratio);
  if (!hk_is_finite(d->initial_lr) || d->initial_lr < 0)
    return tr__bad(w, "finetuning: initial_lr is %g: give a finite lr > 0, or 0 for initial_ratio", d->initial_lr);
  if (!(run = tr_run_get(reg))) return tr__bad(w, "finetuning: out of memory"), TR_ERR_NOMEM;
  if (run->running != HK_STAGE_NONE) return tr__bad(w, "finetuning: registered while a run goes: register it before tr_run_start / tr_fit");
  s = (tr__ft *)calloc(1, sizeof *s);
  if (!s || !(s->match = tr__strdup(d->match)) || !(s->norms = tr__strdup(d->norms ? d->norms : "")))
    return tr__ft_destroy(s), tr__bad(w, "finetuning: out of memory"), TR_ERR_NOMEM;
  s->rule.match = s->match;
  s->rule.who = "finetuning";
  s->rule.schedule = tr__ft_schedule;
  s->at = at;
  s->last_epoch = -1;
  s->factor = d->lr_factor > 0 ? d->lr_factor : 2.0;
  s->initial_ratio = d->initial_ratio > 0 ? d->initial_ratio : 0.1;
  s->initial_lr = d->initial_lr;
  s->factor_at = d->lr_factor_at;
  s->factor_user = d->lr_factor_user;
  s->align = tr__flag(d->align, 1);
  s->train_norms = tr__flag(d->train_norms, 1);
  s->verbose = d->verbose;
  memset(&cb, 0, sizeof cb);
  cb.name = "finetuning";
  cb.user = s;
  cb.on_train_start = tr__ft_train_start;
  cb.on_train_epoch_start = tr__ft_epoch_start;
  cb.save_state = tr__ft_save;
  cb.load_state = tr__ft_load;
  cb.destroy = tr__ft_destroy;
  if (tr__run_rule_add(run, &s->rule) != TR_OK) return tr__ft_destroy(s), tr__bad(w, "finetuning: out of memory"), TR_ERR_NOMEM;
  s->run = run;
  return tr__cb_register(reg, &cb, -5, out, w); /* before the monitors: lr_monitor sees the backbone frozen, then its new lr */
}
TR__PUBLIC_OF(tr_finetuning, ft)
TR__FACTORY_OF(ft, tr_finetuning_desc, TR_FINETUNING_PARAMS)
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
