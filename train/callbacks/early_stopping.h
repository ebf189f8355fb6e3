/* train/callbacks/early_stopping.h - early_stopping. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_EARLY_STOPPING_H /* part */
#define TRAIN_EARLY_STOPPING_H /* part */
#include "../battery.h" /* part */

TR__C_BEGIN /* part */
/* ---- early_stopping (Lightning's EarlyStopping) ---------------------------------------------------
   Checks the monitored metric once per check (on_train_epoch_end or on_validation_end, in a fit): a
   non-finite value, a threshold passed, or patience checks without an improvement above min_delta stop
   it, in Lightning's order, by HK_STOP, so min_epochs / min_steps hold; a held stop is decided again at
   every check (Lightning issue 19966 latches it). The stop is said in one line from rank 0 (log_stop):
     early_stopping: Monitored metric val/loss did not improve in the last 3 records. Best score: 0.056. ...
   On resume the checkpoint's patience wins unless the one given now is larger, which trains on past a
   recorded stop. Hand-written loop: fire the check event with the metric set and stage HK_STAGE_FIT;
   stop at HK_STOP. docs/callbacks.md has the decision and the differences from Lightning. */
#define TR_STOP_REASONS(X) /* X(enum, name); the values are Lightning's EarlyStoppingReason */ \
  X(TR_STOP_NOT_STOPPED,          "not_stopped")          \
  X(TR_STOP_STOPPING_THRESHOLD,   "stopping_threshold")   \
  X(TR_STOP_DIVERGENCE_THRESHOLD, "divergence_threshold") \
  X(TR_STOP_PATIENCE_EXHAUSTED,   "patience_exhausted")   \
  X(TR_STOP_NON_FINITE_METRIC,    "non_finite_metric")
typedef enum tr_stop_reason {
#define TR__X(sym, name) sym,
  TR_STOP_REASONS(TR__X)
#undef TR__X
  TR_STOP_REASON_COUNT
} tr_stop_reason;
TRAIN_API const char *tr_stop_reason_name(tr_stop_reason r);

#define TR_EARLY_STOPPING_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD) */ \
  X(STRING,   const char *, monitor,                  NULL,    NULL,      "required: the metric to watch, e.g. val/loss") \
  X(CHOICE,   tr_mode,      mode,                     "min",   "min|max", "which direction is better") \
  X(DOUBLE,   double,       min_delta,                "0",     NULL,      ">= 0; an improvement must beat the best by more than this") \
  X(INT_ZERO, int,          patience,                 "3",     NULL,      "checks without improvement before stopping") \
  X(TRI,      int,          strict,                   "true",  NULL,      "a metric missing at a check fails the run (false: the check is skipped)") \
  X(TRI,      int,          check_finite,             "true",  NULL,      "a NaN or infinite value stops training") \
  X(C_ONLY,   int,          has_stopping_threshold,   NULL,    NULL,      "1: stopping_threshold is set (a spec: when it gives one)") \
  X(DOUBLE,   double,       stopping_threshold,       "0",     NULL,      "stop once the value is better than this (when given)") \
  X(C_ONLY,   int,          has_divergence_threshold, NULL,    NULL,      "1: divergence_threshold is set (a spec: when it gives one)") \
  X(DOUBLE,   double,       divergence_threshold,     "0",     NULL,      "stop once the value is worse than this (when given)") \
  X(AUTO,     int,          check_on_train_epoch_end, "auto",  NULL,      "true: check at on_train_epoch_end; false: at " \
    "on_validation_end; auto: at the epoch's end, unless the fit validates mid-epoch (val_check_interval, val_every_n_steps) or not every " \
    "epoch (Lightning's rule)") \
  X(BOOL,     int,          verbose,                  "false", NULL,      "print every decision (and why it stopped) to the " \
    "run's log: one line each, \"[rank: N] \" first when the job has several processes") \
  X(TRI,      int,          log_rank_zero_only,       "false", NULL,      "with several processes only rank 0 prints " \
    "(Lightning's flag)") \
  X(TRI,      int,          log_stop,                 "true",  NULL,      "when it stops training, one line saying why (the " \
    "metric, the checks without improvement, the best score) to the run's log, from rank 0; false: silent")
typedef struct tr_early_stopping_desc { TR_EARLY_STOPPING_PARAMS(TR__FIELD) } tr_early_stopping_desc;

typedef struct tr_early_stopping_state { /* in checkpoints; patience: the checkpoint's or the one given, whichever is larger */
  int64_t wait_count;           /* checks since the last improvement */
  int64_t stopped_epoch;        /* the epoch at whose check it stopped training; 0 = it did not */
  double best_score;            /* +inf (min) / -inf (max) before the first check */
  int64_t patience;
  tr_stop_reason stopping_reason;
  const char *stopping_reason_message; /* "" while not stopped */
  int held;                     /* the last check said "stop" but min_epochs/min_steps held it back */
} tr_early_stopping_state;

TRAIN_API tr_err tr_early_stopping(hk_registry *reg, const tr_early_stopping_desc *d, hk_handle *out);
TRAIN_API const tr_early_stopping_state *tr_early_stopping_get(const hk_registry *reg, hk_handle h);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
/* ---- early_stopping ------------------------------------------------------------------------------- */
TRAIN_API const char *tr_stop_reason_name(tr_stop_reason r) {
  static const char *const names[TR_STOP_REASON_COUNT] = {
#define TR__X(sym, name) name,
    TR_STOP_REASONS(TR__X)
#undef TR__X
  };
  return (unsigned)r < TR_STOP_REASON_COUNT ? names[r] : "unknown";
}

typedef struct tr__es {
  tr_early_stopping_state pub;
  tr_run *run;          /* the registry's run: what the loop says (train/run.h) */
  char *monitor, *message;
  tr_mode mode;
  double min_delta;             /* signed as Lightning: negative for min */
  int strict, check_finite, has_stop, has_div, at_epoch_flag, verbose, zero_only, log_stop;
  int64_t checks;               /* checks made in this fit */
  int64_t desc_patience;        /* the patience it was given (a checkpoint's may be smaller or larger) */
  int warned_stage, warned_never;
  double stop_thr, div_thr;
} tr__es;

static void tr__es_destroy(void *user) {
  tr__es *s = (tr__es *)user;
  if (!s) return;
  free(s->monitor);
  free(s->message);
  free(s);
}


static hk_signal tr__es_check(tr__es *s, hk_ctx *ctx) {
  tr_run *run = s->run;
  tr_stop_reason why = TR_STOP_NOT_STOPPED;
  char msg[400];
  double cur;
  tr__warn_stage(run, ctx, "early_stopping", &s->warned_stage);
  if (ctx->stage != HK_STAGE_FIT) return HK_CONTINUE; /* not in the sanity check, not outside a fit */
  s->checks++;
  if (!hk_metric_get(ctx, s->monitor, &cur)) {
    if (s->strict) return tr__missing_metric(ctx, "early_stopping", s->monitor);
    if (s->verbose) tr__run_say_on(run, ctx, s->zero_only, "early_stopping", "'%s' is not set; check skipped (strict=false)", s->monitor);
    return HK_CONTINUE;
  }
  msg[0] = 0;
  if (s->check_finite && !hk_is_finite(cur)) {
    why = TR_STOP_NON_FINITE_METRIC;
    snprintf(msg, sizeof msg, "Monitored metric %s = %g is not finite. Previous best value was %.3f. Signaling Trainer to stop.",
             s->monitor, cur, s->pub.best_score);
  } else if (s->has_stop && tr__better(s->mode, cur, s->stop_thr)) {
    why = TR_STOP_STOPPING_THRESHOLD;
    snprintf(msg, sizeof msg, "Stopping threshold reached: %s = %g %s %g. Signaling Trainer to stop.", s->monitor, cur,
             s->mode == TR_MODE_MAX ? ">" : "<", s->stop_thr);
  } else if (s->has_div && tr__better(s->mode, s->div_thr, cur)) {
    why = TR_STOP_DIVERGENCE_THRESHOLD;
    snprintf(msg, sizeof msg, "Divergence threshold reached: %s = %g %s %g. Signaling Trainer to stop.", s->monitor, cur,
             s->mode == TR_MODE_MAX ? "<" : ">", s->div_thr);
  } else if (tr__better(s->mode, cur - s->min_delta, s->pub.best_score)) {
    if (s->verbose) {
      if (hk_is_finite(s->pub.best_score))
        tr__run_say_on(run, ctx, s->zero_only, "early_stopping", "Metric %s improved by %.3f >= min_delta = %g. New best score: %.3f", s->monitor,
                   fabs(s->pub.best_score - cur), fabs(s->min_delta), cur);
      else tr__run_say_on(run, ctx, s->zero_only, "early_stopping", "Metric %s improved. New best score: %.3f", s->monitor, cur);
    }
    s->pub.best_score = cur;
    s->pub.wait_count = 0;
  } else {
    s->pub.wait_count++;
    if (s->pub.wait_count >= s->pub.patience) {
      why = TR_STOP_PATIENCE_EXHAUSTED;
      tr__msg(msg, sizeof msg, "Monitored metric %s did not improve in the last %lld records. Best score: %.3f. "
              "Signaling Trainer to stop.", s->monitor, (long long)s->pub.wait_count, s->pub.best_score);
    }
  }
  if (why == TR_STOP_NOT_STOPPED) { /* re-decided: an earlier held "stop" is gone */
    s->pub.held = 0;
    s->pub.stopping_reason = TR_STOP_NOT_STOPPED;
    s->message[0] = 0;
    s->pub.stopping_reason_message = s->message;
    return HK_CONTINUE;
  }
  if (!tr_stop_allowed(ctx)) { /* min_epochs / min_steps unmet: decide again at the next check */
    s->pub.held = 1;
    if (s->verbose) tr__run_say_on(run, ctx, s->zero_only, "early_stopping", "%s (held: min_epochs/min_steps not reached; decided again at the next check)", msg);
    return HK_CONTINUE;
  }
  s->pub.held = 0;
  s->pub.stopping_reason = why;
  s->pub.stopped_epoch = ctx->epoch;
  tr__set_str(&s->message, msg);
  s->pub.stopping_reason_message = s->message;
  if (s->verbose) tr__run_say_on(run, ctx, s->zero_only, "early_stopping", "%s", msg);
  else if (s->log_stop) tr__run_say_on(run, ctx, 1, "early_stopping", "%s", msg); /* Lightning logs it at info level */
  return HK_STOP;
}

/* A monitored val/ metric in a run that never validates is refused here, not at the first check. */
static hk_signal tr__es_fit_start(hk_ctx *ctx, void *user) {
  tr__es *s = (tr__es *)user;
  s->checks = 0;
  if (s->run && s->run->desc.epochs == TR_NO && tr__at_epoch_end(s->run, s->at_epoch_flag) && !s->warned_never) {
    s->warned_never = 1; /* known now: say it before the run, not after it */
    tr__run_say(s->run, ctx, "early_stopping", "checks '%s' at on_train_epoch_end, which this loop never fires "
                "(tr_run_desc.epochs = TR_NO): it would never stop training; set check_on_train_epoch_end=false "
                "to check at on_validation_end", s->monitor);
  }
  if (s->run && s->run->desc.validation == TR_NO && tr__starts(s->monitor, "val/")) {
    if (s->strict)
      return hk_fail(ctx, "monitors '%s', but this run never validates (no validation data); "
                     "monitor a training metric, or give the fit validation data", s->monitor);
    tr__run_say(s->run, ctx, "early_stopping", "monitors '%s', but this run never validates: it will never stop "
                "training (strict=false)", s->monitor);
  }
  return HK_CONTINUE;
}
/* Where it checks is asked at each event (the loop may change its settings between runs). */
static hk_signal tr__es_epoch_end(hk_ctx *ctx, void *user) {
  tr__es *s = (tr__es *)user;
  return tr__at_epoch_end(s->run, s->at_epoch_flag) ? tr__es_check(s, ctx) : HK_CONTINUE;
}
static hk_signal tr__es_val_end(hk_ctx *ctx, void *user) {
  tr__es *s = (tr__es *)user;
  return tr__at_epoch_end(s->run, s->at_epoch_flag) ? HK_CONTINUE : tr__es_check(s, ctx);
}
/* A check point the loop never reached is a misconfiguration the user cannot see: say so, once. */
static hk_signal tr__es_train_end(hk_ctx *ctx, void *user) {
  tr__es *s = (tr__es *)user;
  int at_epoch = tr__at_epoch_end(s->run, s->at_epoch_flag);
  if (ctx->stage == HK_STAGE_FIT && s->checks == 0 && !s->warned_never && ctx->global_step > 0) {
    s->warned_never = 1;
    tr__run_say(s->run, ctx, "early_stopping", "never checked '%s' in this fit: it checks at %s, which the loop did not "
                "fire; set check_on_train_epoch_end=%s, or tr_run_desc.check_on_train_epoch_end / epochs", s->monitor,
                at_epoch ? "on_train_epoch_end" : "on_validation_end", at_epoch ? "false" : "true");
  }
  return HK_CONTINUE;
}

static int tr__es_save(void *user, hk_bytes *out) {
  tr__es *s = (tr__es *)user;
  tr__put_u64(out, 1); /* version */
  tr__put_i64(out, s->pub.wait_count);
  tr__put_i64(out, s->pub.stopped_epoch);
  tr__put_f64(out, s->pub.best_score);
  tr__put_i64(out, s->pub.patience);
  tr__put_i64(out, (int64_t)s->pub.stopping_reason);
  tr__put_str(out, s->message);
  tr__put_i64(out, s->pub.held);
  return out->failed ? -1 : 0;
}
/* The saved state, read and checked (the checkpoint's own peek, tr_fit's, reads it too). */
typedef struct tr__es_saved { int64_t wait, stopped, patience, reason, held; double best; char *msg; } tr__es_saved;
static int tr__es_read(hk_reader *in, tr__es_saved *v) {
  memset(v, 0, sizeof *v);
  if (tr__get_version(in, 1) || tr__get_count(in, "wait_count", 0, &v->wait) || tr__get_count(in, "stopped_epoch", 0, &v->stopped))
    return -1;
  if (tr__get_f64(in, &v->best)) return hk_reject(in, "truncated at best_score");
  if (v->best != v->best) return hk_reject(in, "best_score is NaN (it is a number, or the mode's worst value +-inf)");
  if (tr__get_i64(in, &v->patience)) return hk_reject(in, "truncated at patience");
  if (v->patience < 0 || v->patience > INT_MAX) /* the constructor's range: wait_count + 1 is compared with it */
    return hk_reject(in, "patience is %lld, outside 0..%d", (long long)v->patience, INT_MAX);
  if (tr__get_i64(in, &v->reason)) return hk_reject(in, "truncated at stopping_reason");
  if (v->reason < 0 || v->reason >= TR_STOP_REASON_COUNT)
    return hk_reject(in, "stopping_reason is %lld, outside 0..%d", (long long)v->reason, TR_STOP_REASON_COUNT - 1);
  if (tr__get_text(in, "the stopping message", &v->msg)) return -1;
  if (tr__get_i64(in, &v->held) || (v->held != 0 && v->held != 1)) { free(v->msg); v->msg = NULL; return hk_reject(in, "held is truncated or not 0 or 1"); }
  if (tr__get_end(in)) { free(v->msg); v->msg = NULL; return -1; }
  return 0;
}
/* The checkpoint's patience wins (Lightning), unless the one given now is larger: the only way to train
   on past an early stop. A patience stop the patience now no longer makes is undone, silently. */
static int tr__es_load(void *user, hk_reader *in) {
  tr__es *s = (tr__es *)user;
  tr__es_saved v;
  if (tr__es_read(in, &v)) return -1;
  if (s->desc_patience > v.patience) v.patience = s->desc_patience;
  if (v.reason == TR_STOP_PATIENCE_EXHAUSTED && v.wait < v.patience) {
    v.reason = TR_STOP_NOT_STOPPED;
    v.stopped = 0;
    v.msg[0] = 0;
  }
  s->pub.wait_count = v.wait;
  s->pub.stopped_epoch = v.stopped;
  s->pub.best_score = v.best;
  s->pub.patience = v.patience;
  s->pub.stopping_reason = (tr_stop_reason)v.reason;
  s->pub.held = (int)v.held;
  free(s->message);
  s->message = v.msg;
  s->pub.stopping_reason_message = v.msg;
  return 0;
}

/* The stop half of the resume rule tr_fit and tr_run_start share (tr__resume_finished, train/base.h), for
   the state v under key written at epochs / step. 0: it did not stop; 2: a patience stop the registered
   patience now goes past (tr__es_load undoes it); 1: resuming would stop again: why (fn first) names the
   patience to exceed, or says nothing lifts it. */
static int tr__es_resume_verdict(hk_registry *reg, const char *fn, const char *path, int64_t epochs, int64_t step, const char *key,
                                 const tr__es_saved *v, char *why, size_t cap) {
  hk_handle h = hk_find(reg, key);
  const tr_early_stopping_state *es = h ? tr_early_stopping_get(reg, h) : NULL;
  if (v->reason == TR_STOP_NOT_STOPPED) return 0;
  if (v->reason == TR_STOP_PATIENCE_EXHAUSTED) {
    if (es && ((const tr__es *)(const void *)es)->desc_patience > v->wait) return 2;
    snprintf(why, cap, "%s: the run that wrote '%s' stopped early, at epoch %lld (step %lld): %s (%s). Resuming it trains nothing; "
             "to train on from it, give early_stopping a patience above %lld (its checks without improvement; the checkpoint's "
             "patience is %lld, and a larger one given now wins)", fn, path, (long long)epochs, (long long)step, key,
             v->msg ? v->msg : "", (long long)v->wait, (long long)v->patience);
  } else
    snprintf(why, cap, "%s: the run that wrote '%s' stopped early, at epoch %lld (step %lld): %s (%s). Resuming it trains nothing: "
             "its %s holds whatever patience is given; a new fit starts afresh", fn, path, (long long)epochs, (long long)step, key,
             v->msg ? v->msg : "", tr_stop_reason_name((tr_stop_reason)v->reason));
  return 1;
}
/* The run layer's look at a checkpoint it resumes (tr__run_priv.resume_stopped): one callback's block. */
static int tr__es_resume_stopped(hk_registry *reg, const hk_state_blob *b, const char *fn, const char *path, int64_t epochs,
                                 int64_t step, char *why, size_t cap) {
  hk_reader rd;
  tr__es_saved v;
  int r;
  if (strncmp(b->key, "early_stopping{", 15) != 0) return 0;
  memset(&rd, 0, sizeof rd);
  rd.data = (const unsigned char *)b->data;
  rd.len = b->len;
  if (tr__es_read(&rd, &v)) return 0; /* tr_run_load says what is wrong with it */
  r = tr__es_resume_verdict(reg, fn, path, epochs, step, b->key, &v, why, cap);
  free(v.msg);
  return r;
}

static tr_err tr__es_make(hk_registry *reg, const tr_early_stopping_desc *d, hk_handle *out, tr__why *w) {
  tr__es *s;
  hk_callback cb;
  char name[300];
  if (!d) return tr__bad(w, "early_stopping: desc is NULL");
  if (!d->monitor || !d->monitor[0]) return tr__bad(w, "early_stopping: monitor is required (the metric to watch, e.g. val/loss)");
  if (strlen(d->monitor) > 200) return tr__bad(w, "early_stopping: monitor is longer than 200 characters");
  if (d->mode != TR_MODE_MIN && d->mode != TR_MODE_MAX)
    return tr__bad(w, "early_stopping: mode %d is not valid (min or max)", (int)d->mode);
  if (!hk_is_finite(d->min_delta) || d->min_delta < 0)
    return tr__bad(w, "early_stopping: min_delta must be a finite number >= 0 (got %g)", d->min_delta);
  if (d->patience < 0 && d->patience != TR_ZERO)
    return tr__bad(w, "early_stopping: patience must be >= 0 (got %d): the checks without improvement before stopping", d->patience);
  if ((d->has_stopping_threshold && !hk_is_finite(d->stopping_threshold)) ||
      (d->has_divergence_threshold && !hk_is_finite(d->divergence_threshold)))
    return tr__bad(w, "early_stopping: stopping_threshold and divergence_threshold must be finite numbers");
  s = (tr__es *)calloc(1, sizeof *s);
  if (!s) return tr__bad(w, "early_stopping: out of memory"), TR_ERR_NOMEM;
  s->run = tr_run_get(reg);
  if (s->run) s->run->tr__p->resume_stopped = tr__es_resume_stopped; /* tr_run_start's look at a checkpoint's stop */
  s->monitor = tr__strdup(d->monitor);
  s->message = tr__strdup("");
  s->mode = d->mode;
  s->min_delta = s->mode == TR_MODE_MIN ? -d->min_delta : d->min_delta;
  s->pub.patience = s->desc_patience = tr__zero_int(d->patience, 3);
  s->pub.best_score = tr__worst(s->mode);
  s->pub.stopping_reason_message = s->message;
  s->strict = tr__flag(d->strict, 1);
  s->check_finite = tr__flag(d->check_finite, 1);
  s->has_stop = d->has_stopping_threshold != 0;
  s->stop_thr = d->stopping_threshold;
  s->has_div = d->has_divergence_threshold != 0;
  s->div_thr = d->divergence_threshold;
  s->at_epoch_flag = d->check_on_train_epoch_end;
  s->verbose = d->verbose;
  s->log_stop = tr__flag(d->log_stop, 1);
  s->zero_only = tr__flag(d->log_rank_zero_only, 0);
  if (!s->monitor || !s->message) { tr__es_destroy(s); return tr__bad(w, "early_stopping: out of memory"), TR_ERR_NOMEM; }
  /* the state key: two early stoppings on one metric and mode would share it (Lightning's key) */
  snprintf(name, sizeof name, "early_stopping{monitor=%s,mode=%s}", d->monitor, tr__mode_name(s->mode));
  memset(&cb, 0, sizeof cb);
  cb.name = name;
  cb.user = s;
  cb.on_fit_start = tr__es_fit_start;
  cb.on_train_epoch_end = tr__es_epoch_end;
  cb.on_validation_end = tr__es_val_end;
  cb.on_train_end = tr__es_train_end;
  cb.save_state = tr__es_save;
  cb.load_state = tr__es_load;
  cb.destroy = tr__es_destroy;
  return tr__cb_register(reg, &cb, 0, out, w);
}

TR__PUBLIC_OF(tr_early_stopping, es)
/* a threshold named in the spec is set, whatever its value */
static tr_err tr__es_from_spec(const hk_args *a, tr_early_stopping_desc *d, tr__why *w) {
  (void)w;
  d->has_stopping_threshold = hk_arg_given(a, "stopping_threshold");
  d->has_divergence_threshold = hk_arg_given(a, "divergence_threshold");
  return TR_OK;
}
TR__FACTORY_WITH(es, tr_early_stopping_desc, TR_EARLY_STOPPING_PARAMS, tr__es_from_spec)
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
