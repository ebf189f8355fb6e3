/* train/callbacks/timer.h - timer. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_TIMER_H /* part */
#define TRAIN_TIMER_H /* part */
#include "../battery.h" /* part */

TR__C_BEGIN /* part */
/* ---- timer (Lightning's Timer) ------------------------------------------------------------------
   Measures the time spent per stage (train = on_train_start .. on_train_end, validation inside it
   included, as Lightning; sanity_check, validate, test, predict = their runs, summed over runs) and
   stops training with HK_STOP once the train time reaches the duration: checked at on_fit_start and
   then at every on_train_batch_end (interval step) or on_train_epoch_end (interval epoch). The
   elapsed times are in checkpoints (a resumed run keeps counting) and in the metrics time/train,
   time/validate, ... (seconds, updated at each check and stage end). Hand-written loop: fire the
   start/end events of the stages you want measured and a check event; stop at HK_STOP. */
#define TR_TIMER_STAGES(X) X(TR_TIMER_TRAIN, "train") X(TR_TIMER_SANITY_CHECK, "sanity_check") \
  X(TR_TIMER_VALIDATE, "validate") X(TR_TIMER_TEST, "test") X(TR_TIMER_PREDICT, "predict")
typedef enum tr_timer_stage {
#define TR__X(sym, name) sym,
  TR_TIMER_STAGES(TR__X)
#undef TR__X
  TR_TIMER_STAGE_COUNT
} tr_timer_stage;
typedef enum tr_interval { TR_INTERVAL_STEP = 0, TR_INTERVAL_EPOCH } tr_interval;

#define TR_TIMER_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD) */ \
  X(STRING, const char *, duration,   "",     NULL,         "the limit as \"DD:HH:MM:SS\", e.g. \"00:12:00:00\" (empty: seconds)") \
  X(DOUBLE, double,       seconds,    "0",    NULL,         "the limit in seconds (not with duration); neither: only measure") \
  X(CHOICE, tr_interval,  interval,   "step", "step|epoch", "check after every training step or every epoch") \
  X(TRI,    int,          verbose,    "true", NULL,         "say when it stops") \
  X(C_ONLY, tr_clock_fn,  clock,      NULL,   NULL,         "seconds; NULL = a monotonic clock") \
  X(C_ONLY, void *,       clock_user, NULL,   NULL,         "clock's argument")
typedef struct tr_timer_desc { TR_TIMER_PARAMS(TR__FIELD) } tr_timer_desc;

typedef struct tr_timer_state {
  double duration;              /* seconds; 0 = no limit */
  double time_elapsed[TR_TIMER_STAGE_COUNT]; /* at the last start, end or check */
} tr_timer_state;

TRAIN_API tr_err tr_timer(hk_registry *reg, const tr_timer_desc *d, hk_handle *out);
TRAIN_API const tr_timer_state *tr_timer_get(const hk_registry *reg, hk_handle h);
/* The time spent in a stage so far, running stage included; a negative value if h is not a timer. */
TRAIN_API double tr_timer_elapsed(const hk_registry *reg, hk_handle h, tr_timer_stage stage);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
/* ---- timer ---------------------------------------------------------------------------------------- */
static const char *const tr__timer_metric[TR_TIMER_STAGE_COUNT] = {
#define TR__X(sym, name) "time/" name,
  TR_TIMER_STAGES(TR__X)
#undef TR__X
};

typedef struct tr__timer {
  tr_timer_state pub;
  tr_run *run;          /* the registry's run: what the loop says (train/run.h) */
  tr_interval interval;
  int verbose;
  double (*clock)(void *);
  void *clock_user;
  double start[TR_TIMER_STAGE_COUNT];
  int running[TR_TIMER_STAGE_COUNT];
  double offset[TR_TIMER_STAGE_COUNT]; /* time of the finished runs (and from a checkpoint) */
} tr__timer;

static void tr__timer_destroy(void *user) { free(user); }

static double tr__timer_elapsed(const tr__timer *s, int k, double now) {
  return s->offset[k] + (s->running[k] ? now - s->start[k] : 0);
}
static void tr__timer_publish(tr__timer *s, hk_ctx *ctx, int k, double now) {
  s->pub.time_elapsed[k] = tr__timer_elapsed(s, k, now);
  (void)hk_metric_set(ctx, tr__timer_metric[k], s->pub.time_elapsed[k]);
}
static void tr__timer_start(tr__timer *s, int k) {
  s->start[k] = tr__clock(s->clock, s->clock_user);
  s->running[k] = 1;
}
static void tr__timer_stop(tr__timer *s, hk_ctx *ctx, int k) {
  double now = tr__clock(s->clock, s->clock_user);
  if (!s->running[k]) return;
  s->offset[k] = tr__timer_elapsed(s, k, now);
  s->running[k] = 0;
  tr__timer_publish(s, ctx, k, now);
}
static int tr__timer_eval_stage(const hk_ctx *ctx) { return ctx->stage == HK_STAGE_SANITY_CHECK ? TR_TIMER_SANITY_CHECK : TR_TIMER_VALIDATE; }

static hk_signal tr__timer_check(tr__timer *s, hk_ctx *ctx) {
  double now = tr__clock(s->clock, s->clock_user);
  tr__timer_publish(s, ctx, TR_TIMER_TRAIN, now);
  if (ctx->stage != HK_STAGE_FIT || s->pub.duration <= 0 || s->pub.time_elapsed[TR_TIMER_TRAIN] < s->pub.duration) return HK_CONTINUE;
  if (s->verbose) {
    double x = s->pub.time_elapsed[TR_TIMER_TRAIN];
    long long e = x <= (double)TR__MAX_COUNT ? (long long)x : 0; /* a user clock may jump past what a cast can hold */
    if (x <= (double)TR__MAX_COUNT)
      tr__run_say_on(s->run, ctx, 1, "timer", "Time limit reached. Elapsed time is %lld:%02lld:%02lld. Signaling Trainer to stop.",
                  e / 3600, e / 60 % 60, e % 60);
    else tr__run_say_on(s->run, ctx, 1, "timer", "Time limit reached. Elapsed time is %g s. Signaling Trainer to stop.", x);
  }
  return HK_STOP;
}

static hk_signal tr__timer_fit_start(hk_ctx *ctx, void *u) { return tr__timer_check((tr__timer *)u, ctx); }
static hk_signal tr__timer_train_start(hk_ctx *ctx, void *u) { (void)ctx; tr__timer_start((tr__timer *)u, TR_TIMER_TRAIN); return HK_CONTINUE; }
static hk_signal tr__timer_train_end(hk_ctx *ctx, void *u) { tr__timer_stop((tr__timer *)u, ctx, TR_TIMER_TRAIN); return HK_CONTINUE; }
static hk_signal tr__timer_val_start(hk_ctx *ctx, void *u) { tr__timer_start((tr__timer *)u, tr__timer_eval_stage(ctx)); return HK_CONTINUE; }
static hk_signal tr__timer_val_end(hk_ctx *ctx, void *u) { tr__timer_stop((tr__timer *)u, ctx, tr__timer_eval_stage(ctx)); return HK_CONTINUE; }
static hk_signal tr__timer_test_start(hk_ctx *ctx, void *u) { (void)ctx; tr__timer_start((tr__timer *)u, TR_TIMER_TEST); return HK_CONTINUE; }
static hk_signal tr__timer_test_end(hk_ctx *ctx, void *u) { tr__timer_stop((tr__timer *)u, ctx, TR_TIMER_TEST); return HK_CONTINUE; }
static hk_signal tr__timer_pred_start(hk_ctx *ctx, void *u) { (void)ctx; tr__timer_start((tr__timer *)u, TR_TIMER_PREDICT); return HK_CONTINUE; }
static hk_signal tr__timer_pred_end(hk_ctx *ctx, void *u) { tr__timer_stop((tr__timer *)u, ctx, TR_TIMER_PREDICT); return HK_CONTINUE; }
/* Published again here: the loop forgets what its sanity check set once it ends (Lightning's reset). */
static hk_signal tr__timer_sanity_end(hk_ctx *ctx, void *u) {
  tr__timer *s = (tr__timer *)u;
  tr__timer_publish(s, ctx, TR_TIMER_SANITY_CHECK, tr__clock(s->clock, s->clock_user));
  return HK_CONTINUE;
}
static hk_signal tr__timer_batch_end(hk_ctx *ctx, void *u) {
  tr__timer *s = (tr__timer *)u;
  return s->interval == TR_INTERVAL_STEP ? tr__timer_check(s, ctx) : HK_CONTINUE;
}
static hk_signal tr__timer_epoch_end(hk_ctx *ctx, void *u) {
  tr__timer *s = (tr__timer *)u;
  return s->interval == TR_INTERVAL_EPOCH ? tr__timer_check(s, ctx) : HK_CONTINUE;
}

static int tr__timer_save(void *user, hk_bytes *out) {
  tr__timer *s = (tr__timer *)user;
  double now = tr__clock(s->clock, s->clock_user);
  int k;
  tr__put_u64(out, 1);
  for (k = 0; k < TR_TIMER_STAGE_COUNT; k++) tr__put_f64(out, tr__timer_elapsed(s, k, now));
  return out->failed ? -1 : 0;
}
static int tr__timer_load(void *user, hk_reader *in) {
  tr__timer *s = (tr__timer *)user;
  double v[TR_TIMER_STAGE_COUNT], now = tr__clock(s->clock, s->clock_user);
  int k;
  if (tr__get_version(in, 1)) return -1;
  for (k = 0; k < TR_TIMER_STAGE_COUNT; k++) { /* 2^53 s (285 million years): whole seconds stay exact and fit a long long */
    if (tr__get_f64(in, &v[k])) return hk_reject(in, "truncated at %s", tr__timer_metric[k]);
    if (!hk_is_finite(v[k]) || v[k] < 0 || v[k] > (double)TR__MAX_COUNT)
      return hk_reject(in, "%s is %g s, outside 0..2^53 s", tr__timer_metric[k], v[k]);
  }
  if (tr__get_end(in)) return -1;
  for (k = 0; k < TR_TIMER_STAGE_COUNT; k++) { /* a resumed run keeps counting from here */
    s->offset[k] = v[k];
    s->pub.time_elapsed[k] = v[k];
    if (s->running[k]) s->start[k] = now;
  }
  return 0;
}

/* "DD:HH:MM:SS" (Lightning's Timer string) in seconds; -1 if it is not that. */
static double tr__parse_duration(const char *s) {
  double total = 0;
  static const double unit[4] = { 86400, 3600, 60, 1 };
  int f;
  for (f = 0; f < 4; f++) {
    double x = 0;
    int digits = 0;
    while (*s >= '0' && *s <= '9' && digits < 9) { x = x * 10 + (*s++ - '0'); digits++; }
    if (!digits) return -1;
    total += x * unit[f];
    if (f < 3 && *s++ != ':') return -1;
  }
  return *s ? -1 : total;
}

static tr_err tr__timer_make(hk_registry *reg, const tr_timer_desc *d, hk_handle *out, tr__why *w) {
  tr__timer *s;
  hk_callback cb;
  double limit = 0;
  if (!d) return tr__bad(w, "timer: desc is NULL");
  if (d->duration && d->duration[0] && d->seconds != 0)
    return tr__bad(w, "timer: give duration (\"DD:HH:MM:SS\") or seconds, not both");
  if (d->duration && d->duration[0] && (limit = tr__parse_duration(d->duration)) < 0)
    return tr__bad(w, "timer: duration '%s' is not \"DD:HH:MM:SS\" (four numbers, e.g. \"00:12:00:00\" for 12 hours)", d->duration);
  if (!(d->seconds >= 0) || !hk_is_finite(d->seconds)) return tr__bad(w, "timer: seconds must be a finite number >= 0 (got %g)", d->seconds);
  if (d->seconds > 0) limit = d->seconds;
  if (d->interval != TR_INTERVAL_STEP && d->interval != TR_INTERVAL_EPOCH)
    return tr__bad(w, "timer: interval %d is not valid (step or epoch)", (int)d->interval);
  s = (tr__timer *)calloc(1, sizeof *s);
  if (!s) return tr__bad(w, "timer: out of memory"), TR_ERR_NOMEM;
  s->run = tr_run_get(reg);
  s->pub.duration = limit;
  s->interval = d->interval;
  s->verbose = tr__flag(d->verbose, 1);
  s->clock = d->clock;
  s->clock_user = d->clock_user;
  memset(&cb, 0, sizeof cb);
  cb.name = "timer";
  cb.user = s;
  cb.on_fit_start = tr__timer_fit_start;
  cb.on_sanity_check_end = tr__timer_sanity_end;
  cb.on_train_start = tr__timer_train_start;
  cb.on_train_end = tr__timer_train_end;
  cb.on_validation_start = tr__timer_val_start;
  cb.on_validation_end = tr__timer_val_end;
  cb.on_test_start = tr__timer_test_start;
  cb.on_test_end = tr__timer_test_end;
  cb.on_predict_start = tr__timer_pred_start;
  cb.on_predict_end = tr__timer_pred_end;
  if (s->interval == TR_INTERVAL_STEP) cb.on_train_batch_end = tr__timer_batch_end;
  else cb.on_train_epoch_end = tr__timer_epoch_end;
  cb.save_state = tr__timer_save;
  cb.load_state = tr__timer_load;
  cb.destroy = tr__timer_destroy;
  return tr__cb_register(reg, &cb, 0, out, w);
}

TR__PUBLIC_OF(tr_timer, timer)
TRAIN_API double tr_timer_elapsed(const hk_registry *reg, hk_handle h, tr_timer_stage stage) {
  const hk_callback *cb = hk_callback_get(reg, h);
  const tr__timer *s = cb && cb->destroy == tr__timer_destroy ? (const tr__timer *)cb->user : NULL;
  if (!s || (unsigned)stage >= TR_TIMER_STAGE_COUNT) return -1;
  return tr__timer_elapsed(s, (int)stage, tr__clock(s->clock, s->clock_user));
}

TR__FACTORY_OF(timer, tr_timer_desc, TR_TIMER_PARAMS)
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
