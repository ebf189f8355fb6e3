/* train/trainer/lr_finder.h - lr_finder (needs the trainer). A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_LR_FINDER_H /* part */
#define TRAIN_LR_FINDER_H /* part */
#include "fit.h" /* part */

TR__C_BEGIN /* part */
/* ---- lr_finder (Lightning's LearningRateFinder) -------------------------------------------------
   At on_fit_start of a fit from step 0: an exponential learning-rate sweep of N steps (no hooks fire),
   the suggestion at the smoothed loss's steepest descent, then the state restored exactly and, with
   update_attr, the suggestion as the fit's lr. Its result is in checkpoints: a resume does not sweep
   again. The rules in full: docs/callbacks.md. */
#define TR_LR_FINDER_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD) */ \
  X(DOUBLE_ZERO, double,  min_lr,               "1e-8", NULL, "the sweep's first learning rate") \
  X(DOUBLE_ZERO, double,  max_lr,               "1",    NULL, "the sweep's last learning rate") \
  X(INT_ZERO, int,        num_training_steps,   "100",  NULL, "steps of the sweep (2..1000000)") \
  X(DOUBLE_ZERO, double,  early_stop_threshold, "4",    NULL, "stop once the smoothed loss exceeds this x the best (negative: never)") \
  X(TRI,    int,          update_attr,          "true", NULL, "set the optimizer's lr to the suggestion") \
  X(STRING, const char *, curve_path,           "",     NULL, "write the curve (\"lr,loss\" lines) here (empty: no file)") \
  X(TRI,    int,          verbose,              "true", NULL, "print the suggestion")
typedef struct tr_lr_finder_desc { TR_LR_FINDER_PARAMS(TR__FIELD) } tr_lr_finder_desc;
typedef struct tr_lr_finder_state {
  int done;                     /* the sweep ran (here or before the checkpoint) */
  double suggestion;            /* NaN when there is none */
  int suggestion_index;         /* into lrs/losses; -1 when none */
  int n;                        /* points of the curve (0 after a resume: not saved) */
  const double *lrs, *losses;   /* the learning rates and smoothed losses */
} tr_lr_finder_state;
TRAIN_API tr_err tr_lr_finder(hk_registry *reg, const tr_lr_finder_desc *d, hk_handle *out);
TRAIN_API const tr_lr_finder_state *tr_lr_finder_get(const hk_registry *reg, hk_handle h);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
static tr_err tr__lrf_make(hk_registry *reg, const tr_lr_finder_desc *d, hk_handle *out, tr__why *w);
TR__FACTORY_OF(lrf, tr_lr_finder_desc, TR_LR_FINDER_PARAMS)
/* ---- lr_finder ------------------------------------------------------------------------------------ */
typedef struct tr__lrf {
  tr_lr_finder_state pub;
  double min_lr, max_lr, threshold;
  int steps, update_attr, verbose;
  char *curve_path;
  double *lrs, *losses;
} tr__lrf;

static void tr__lrf_destroy(void *user) {
  tr__lrf *s = (tr__lrf *)user;
  free(s->lrs);
  free(s->losses);
  free(s->curve_path);
  free(s);
}

/* Lightning's: numpy.gradient's argmin, skipping the first 10 points and the last; -1 with too few. */
static int tr__lrf_suggest(const double *loss, int n) {
  enum { SKIP_BEGIN = 10, SKIP_END = 1 };
  int i, best = -1, m = n - SKIP_BEGIN - SKIP_END;
  double best_g = HUGE_VAL;
  const double *y = loss + SKIP_BEGIN;
  if (m < 2) return -1;
  for (i = 0; i < m; i++) {
    double g;
    if (!hk_is_finite(y[i])) return -1;
    g = i == 0 ? y[1] - y[0] : i == m - 1 ? y[m - 1] - y[m - 2] : (y[i + 1] - y[i - 1]) / 2;
    if (g < best_g) { best_g = g; best = i; }
  }
  return best < 0 ? -1 : best + SKIP_BEGIN;
}

/* N optimizer steps driven by hand, everything restored after. */
static hk_signal tr__lrf_sweep(tr__lrf *s, hk_ctx *ctx, tr_trainer *t) {
  const tr_config *c = t->tr__cfg;
  const tr_data *d = c->train;
  size_t n = t->model.n_params, bytes = n * sizeof(float);
  int dev = TR__ON_DEVICE(t); /* kept on the device */
  float *save = dev ? NULL : (float *)malloc(bytes * (size_t)(2 + t->tr__n_buf));
  int64_t count = d->count(d->user), step0 = t->global_step;
  int has_mom = t->tr__has_momentum, i, stop = 0;
  double avg = 0, best = HUGE_VAL, beta = 0.98;
  if (count <= 0) return hk_fail(ctx, "the training data has no batches");
  if (d->next && !d->reset) return hk_fail(ctx, "iterator training data needs reset() (the sweep rewinds it)");
  if (dev) { if (tr__dev_keep(t, 0)) return HK_FAIL; }
  else if (!save) return hk_fail(ctx, "out of memory");
  else {
    memcpy(save, t->model.params, bytes);
    memcpy(save + n, t->model.grads, bytes);
    if (t->tr__n_buf > 0) memcpy(save + 2 * n, t->tr__m, bytes);
    if (t->tr__n_buf > 1) memcpy(save + 3 * n, t->tr__v, bytes);
  }
  s->pub.n = 0;
  for (i = 0; i < s->steps && !stop; i++) {
    double lr = s->min_lr * pow(s->max_lr / s->min_lr, s->steps > 1 ? (double)i / (double)(s->steps - 1) : 0.0), loss = 0, smooth;
    void *batch = NULL;
    int rc = d->next ? d->next(d->user, &batch) : d->get(d->user, i % count, &batch);
    if (rc) { stop = 2; break; }
    if (t->model.forward(t->model.user, batch, 1, &loss)) { stop = 2; break; }
    if (dev) { loss = tr__dev_eval_loss(t, loss); tr__dev_zero_grad(t); } /* the step's one wait: its loss */
    else memset(t->model.grads, 0, bytes);
    if (t->model.backward(t->model.user, batch)) { stop = 2; break; }
    hk_grads_changed(&t->ctx);
    if (c->gradient_clip_val > 0) tr__clip_gradients(t);
    t->global_step = step0 + i; /* AdamW's bias correction counts the sweep's steps */
    tr__update(t, lr);
    if (t->tr__err) { stop = 2; break; } /* a device call failed */
    avg = beta * avg + (1 - beta) * loss;
    smooth = avg / (1 - pow(beta, i + 1));
    s->lrs[i] = lr;
    s->losses[i] = smooth;
    s->pub.n = i + 1;
    if (!hk_is_finite(smooth) || (s->threshold > 0 && i > 1 && smooth > s->threshold * best)) stop = 1; /* diverged */
    if (smooth < best || i == 0) best = smooth;
    if (d->next && i + 1 < s->steps && (i + 1) % count == 0 && d->reset(d->user)) { stop = 2; break; }
  }
  /* exactly what the fit starts from */
  if (dev) (void)tr__dev_keep(t, 1);
  else {
    memcpy(t->model.params, save, bytes);
    memcpy(t->model.grads, save + n, bytes);
    if (t->tr__n_buf > 0) memcpy(t->tr__m, save + 2 * n, bytes);
    if (t->tr__n_buf > 1) memcpy(t->tr__v, save + 3 * n, bytes);
    free(save);
  }
  t->global_step = step0;
  t->tr__has_momentum = has_mom;
  hk_grads_changed(&t->ctx);
  t->ctx.loss = NAN;
  if (d->next && d->reset(d->user)) stop = 2;
  if (t->tr__err) return HK_FAIL; /* the run's error says which */
  if (stop == 2) return hk_fail(ctx, "the model or the data failed during the sweep (step %d)", i);
  return HK_CONTINUE;
}

static hk_signal tr__lrf_fit_start(hk_ctx *ctx, void *user) {
  tr__lrf *s = (tr__lrf *)user;
  tr_trainer *t = (tr_trainer *)ctx->trainer;
  int k;
  if (!t) return hk_fail(ctx, "needs train.h's tr_fit (it re-runs training steps itself); a hand-written loop "
                         "can sweep the learning rate with its own steps");
  if (s->pub.done) { /* a resumed fit: no second sweep */
    if (s->update_attr && hk_is_finite(s->pub.suggestion)) t->optim.lr = s->pub.suggestion;
    return HK_CONTINUE;
  }
  if (t->global_step != 0 || t->epoch_batch != 0) return HK_CONTINUE; /* only before the first step */
  if (t->tr__zero && t->ctx.world_size > 1) /* its steps would need a collective inside a hook */
    return hk_fail(ctx, "does not work with tr_desc.zero (each rank updates only its shard of the parameters): find the "
                   "learning rate in a run without zero, then set it");
  if (tr__lrf_sweep(s, ctx, t) == HK_FAIL) return HK_FAIL;
  s->pub.done = 1;
  k = tr__lrf_suggest(s->losses, s->pub.n);
  s->pub.suggestion_index = k;
  s->pub.suggestion = k >= 0 ? s->lrs[k] : NAN;
  if (s->verbose && ctx->rank == 0) {
    if (k >= 0) tr_run_say(t->reg, ctx, "lr_finder", "suggested learning rate %.6g (steepest descent of the smoothed loss, %d points%s)",
                           s->pub.suggestion, s->pub.n, s->update_attr ? "; set as the optimizer's lr" : "");
    else tr_run_say(t->reg, ctx, "lr_finder", "no suggestion: too few points (%d; it needs at least 13) or a non-finite loss; lr stays %g",
                    s->pub.n, t->optim.lr);
  }
  if (s->update_attr && k >= 0) {
    t->optim.lr = s->pub.suggestion;
    t->lr = tr__current_lr(t);
  }
  if (s->curve_path && ctx->rank == 0) { /* every rank sweeps the same */
    hk_bytes b;
    char why[1100];
    int e;
    memset(&b, 0, sizeof b);
    tr__putf(&b, "lr,loss\n");
    for (k = 0; k < s->pub.n; k++) tr__putf(&b, "%.9g,%.9g\n", s->lrs[k], s->losses[k]);
    e = b.failed ? ENOMEM : tr__write_whole(s->curve_path, b.data, b.len, 0, NULL, why, sizeof why);
    hk_bytes_free(&b);
    if (e) return hk_fail(ctx, "cannot write the curve to '%s': %s", s->curve_path, e == ENOMEM ? "out of memory" : why);
  }
  return HK_CONTINUE;
}
static int tr__lrf_save(void *user, hk_bytes *out) {
  tr__lrf *s = (tr__lrf *)user;
  tr__put_u64(out, 1);
  tr__put_u64(out, (uint64_t)s->pub.done);
  tr__put_f64(out, s->pub.suggestion);
  return out->failed ? -1 : 0;
}
static int tr__lrf_load(void *user, hk_reader *in) {
  tr__lrf *s = (tr__lrf *)user;
  uint64_t done = 0;
  double v = 0;
  if (tr__get_version(in, 1)) return -1;
  if (tr__get_u64(in, &done) || done > 1) return hk_reject(in, "done is truncated or not 0 or 1");
  if (tr__get_f64(in, &v)) return hk_reject(in, "truncated at suggestion");
  if (v == v && (!hk_is_finite(v) || v <= 0)) /* NaN: no suggestion; else a learning rate */
    return hk_reject(in, "suggestion is %g; a learning rate is finite and > 0 (NaN: none)", v);
  if (tr__get_end(in)) return -1;
  s->pub.done = (int)done;
  s->pub.suggestion = v;
  s->pub.suggestion_index = -1;
  s->pub.n = 0;
  return 0;
}
static tr_err tr__lrf_make(hk_registry *reg, const tr_lr_finder_desc *d, hk_handle *out, tr__why *w) {
  tr__lrf *s;
  hk_callback cb;
  double lo, hi, threshold;
  int steps;
  if (!d) return tr__bad(w, "lr_finder: desc is NULL");
  lo = tr__zero_double(d->min_lr, 1e-8);
  hi = tr__zero_double(d->max_lr, 1.0);
  steps = tr__zero_int(d->num_training_steps, 100);
  threshold = tr__zero_double(d->early_stop_threshold, 4.0);
  if (!hk_is_finite(lo) || !hk_is_finite(hi) || lo <= 0 || hi <= lo)
    return tr__bad(w, "lr_finder: need 0 < min_lr < max_lr (got min_lr=%g, max_lr=%g)", lo, hi);
  if (steps < 2 || steps > 1000000) return tr__bad(w, "lr_finder: num_training_steps must be in 2..1000000, got %d", steps);
  if (!hk_is_finite(threshold) || (threshold >= 0 && threshold <= 1))
    return tr__bad(w, "lr_finder: early_stop_threshold must be > 1 (negative: never), got %g", threshold);
  s = (tr__lrf *)calloc(1, sizeof *s);
  if (!s) return tr__bad(w, "lr_finder: out of memory"), TR_ERR_NOMEM;
  s->min_lr = lo;
  s->max_lr = hi;
  s->steps = steps;
  s->threshold = threshold;
  s->update_attr = tr__flag(d->update_attr, 1);
  s->verbose = tr__flag(d->verbose, 1);
  s->pub.suggestion = NAN;
  s->pub.suggestion_index = -1;
  s->lrs = (double *)calloc((size_t)s->steps, sizeof(double));
  s->losses = (double *)calloc((size_t)s->steps, sizeof(double));
  if (!s->lrs || !s->losses || (d->curve_path && d->curve_path[0] && !(s->curve_path = tr__strdup(d->curve_path)))) {
    tr__lrf_destroy(s);
    return tr__bad(w, "lr_finder: out of memory"), TR_ERR_NOMEM;
  }
  s->pub.lrs = s->lrs;
  s->pub.losses = s->losses;
  memset(&cb, 0, sizeof cb);
  cb.name = "lr_finder";
  cb.user = s;
  cb.on_fit_start = tr__lrf_fit_start;
  cb.save_state = tr__lrf_save;
  cb.load_state = tr__lrf_load;
  cb.destroy = tr__lrf_destroy;
  return tr__cb_register(reg, &cb, -30, out, w); /* first at on_fit_start: the others see the chosen lr */
}
TR__PUBLIC_OF(tr_lr_finder, lrf)
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
