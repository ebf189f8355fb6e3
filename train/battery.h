/* train/battery.h - what every callback and logger shares: parameters written once, constructors, factories. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_BATTERY_H /* part */
#define TRAIN_BATTERY_H /* part */
#include "run.h" /* part */

TR__C_BEGIN /* part */
/* =================================================================================================
   STANDARD CALLBACKS
   Lightning's callbacks on hooks.h's public API and the run layer. Each has a constructor taking the
   registry and a zero-initialised desc (bad parameters: TR_ERR_INVALID naming them, nothing registered),
   a spec factory of the same name (hk_spec_apply(reg, "early_stopping(patience=3)")), its state in
   checkpoints under its name (range-checked on load: an out-of-range state is refused and the callback
   keeps its own), and a getter tr_<name>_get(reg, handle). They act only through signals and requests and
   read the loop's settings from the registry's run. What they print goes to the run's log, one write a
   line, "[rank: N] " first with several processes. docs/callbacks.md has each in full.
   ================================================================================================= */

/* ---- parameters, written once ------------------------------------------------------------------
   Each battery's parameters are one X-macro list, TR_<NAME>_PARAMS(X), beside its doc block: the desc's
   fields (TR__FIELD, here), the spec table and the spec-to-desc copy (TR__PARAM, TR__COPY, below) and
   docs/'s tables come from it. X(kind, C type, name, default, choices, doc): default is the spec's as text
   (NULL: required) and what the field's zero means. The kinds:
     INT, DOUBLE     numbers (an int in -1e9..1e9)
     INT_ZERO, DOUBLE_ZERO  0 means the default; TR_ZERO / TR_ZERO_F is an explicit 0
     BOOL            1 / 0 (the default); spec true|false
     TRI, AUTO       TR_YES / TR_NO, 0 the default (AUTO: a rule the doc names; spec auto|true|false)
     STRING, CHOICE  const char * (NULL default); an enum of the choices in order (the first, 0, default)
     C_ONLY          no spec key (a function pointer, a FILE *)
     SPEC_ONLY       a spec key with no field: the factory sets C_ONLY fields from it by hand */
#define TR__FIELD(kind, type, name, def, choices, doc) TR__FIELD_##kind(type, name)
#define TR__FIELD_INT(type, name)       type name;
#define TR__FIELD_INT_ZERO(type, name)  type name;
#define TR__FIELD_DOUBLE_ZERO(type, name) type name;
#define TR__FIELD_DOUBLE(type, name)    type name;
#define TR__FIELD_BOOL(type, name)      type name;
#define TR__FIELD_TRI(type, name)       type name;
#define TR__FIELD_AUTO(type, name)      type name;
#define TR__FIELD_STRING(type, name)    type name;
#define TR__FIELD_CHOICE(type, name)    type name;
#define TR__FIELD_C_ONLY(type, name)    type name;
#define TR__FIELD_SPEC_ONLY(type, name)

/* A clock for callbacks that measure time (C_ONLY): seconds, from any fixed point. */
typedef double (*tr_clock_fn)(void *user);

/* The standard factories, X(name, NAME, p, what it does): tr_add_factories registers `name` when
   TR__ON_<NAME>, else the name alone, which says which define brings it. */
#define TR__BATTERIES(X) \
  X(early_stopping, EARLY_STOPPING, es, "stop training when a monitored metric stops improving (Lightning's EarlyStopping)") \
  X(model_checkpoint, MODEL_CHECKPOINT, mc, "save checkpoints, keeping the k best by a metric (Lightning's ModelCheckpoint)") \
  X(timer, TIMER, timer, "stop training after a time limit; time per stage (Lightning's Timer)") \
  X(lr_monitor, LR_MONITOR, lrm, "publish the learning rate as lr-<Optimizer> (Lightning's LearningRateMonitor)") \
  X(gradient_monitor, GRADIENT_MONITOR, gm, "gradient norms, percentiles, a histogram and vanishing/exploding flags every n steps") \
  X(nan_guard, NAN_GUARD, ng, "fail, skip the step or stop on a non-finite loss or gradient, naming where") \
  X(ema, EMA, ema, "an exponential (or SWA) average of the weights, used for evaluation (EMAWeightAveraging)") \
  X(param_group, PARAM_GROUP, pg, "a learning-rate multiplier, weight decay or freezing for the tensors a name pattern matches (parameter groups)") \
  X(finetuning, FINETUNING, ft, "freeze a backbone until an epoch, then train it at a reduced lr that ramps up (Lightning's BackboneFinetuning)") \
  X(lr_finder, LR_FINDER, lrf, "sweep the learning rate before training and use the suggestion (LearningRateFinder)") \
  X(model_summary, MODEL_SUMMARY, ms, "print the tensor table at fit start (Lightning's ModelSummary)") \
  X(accumulation_scheduler, ACCUMULATION_SCHEDULER, as, "gradient accumulation factor by epoch (GradientAccumulationScheduler)") \
  X(profiler, PROFILER, prof, "time every hook, event and loop phase; a table at teardown, metrics in records (SimpleProfiler)") \
  X(throughput_monitor, THROUGHPUT_MONITOR, tp, "samples/s, tokens/s, step-time percentiles and MFU in training records (ThroughputMonitor)") \
  X(watchdog, WATCHDOG, wd, "report a loop that stopped moving (a hung step, a rank stuck in a collective), where it is, and end the process on request") \
  X(device_stats, DEVICE_STATS, ds, "host memory, CPU use and load, and with TRAIN_CUDA the GPU's through NVML, every n steps (DeviceStatsMonitor)") \
  X(on_exception_checkpoint, ON_EXCEPTION_CHECKPOINT, oec, "save the state after the last step when a fit fails or is interrupted (OnExceptionCheckpoint)") \
  X(spike_detection, SPIKE_DETECTION, sd, "roll back to an in-memory snapshot at a loss spike and skip its batches (SpikeDetection)") \
  X(prediction_writer, PREDICTION_WRITER, pw, "write tr_predict's predictions as csv, jsonl or safetensors, per batch or per epoch (BasePredictionWriter)") \
  X(csv, CSV, csv, "log records to save_dir/name/version_N/metrics.csv and hparams.yaml (Lightning's CSVLogger)") \
  X(jsonl, JSONL, jsonl, "log records as JSON lines to save_dir/name/version_N/metrics.jsonl") \
  X(tensorboard, TENSORBOARD, tb, "log records as TensorBoard event files (scalars, histograms, hparams as text)") \
  X(progress_bar, PROGRESS_BAR, bar, "tqdm's progress bar on a terminal, plain lines elsewhere (Lightning's TQDMProgressBar)") \
  X(plot, PLOT, plot, "write logged metrics against step as an SVG plot at the end of each run") \
  X(mlflow, MLFLOW, mlf, "send records to an MLflow tracking server (needs TRAIN_MLFLOW and -lcurl; Lightning's MLFlowLogger)")
/* (tr_add_factories registers them, train/factories.h, after the batteries; the trainer's, TR__LATE_<NAME>, tr_init) */

/* ---- which batteries are compiled ---------------------------------------------------------------
   TRAIN_NO_<NAME> leaves one out; TRAIN_ONLY_SPECIFIC_BATTERIES keeps only those with a TRAIN_ENABLE_<NAME>
   (also for a program that includes parts directly). A left-out battery is not declared and its spec
   name fails naming the define. Give every file that includes train.h the same defines (docs/setup.md).
   TR__ON_<NAME>: 1 when compiled; the table below is written by make train.h from TR__BATTERIES. */
/* generated table: begin */
#if defined(TRAIN_ONLY_SPECIFIC_BATTERIES)
#  define TR__PICKED 1
#else
#  define TR__PICKED 0
#endif
#if defined(TRAIN_NO_CALLBACKS) || defined(TRAIN_NO_EARLY_STOPPING) || (TR__PICKED && !defined(TRAIN_ENABLE_EARLY_STOPPING))
#  define TR__ON_EARLY_STOPPING 0
#else
#  define TR__ON_EARLY_STOPPING 1
#endif
#define TR__LATE_EARLY_STOPPING 0
#if defined(TRAIN_NO_CALLBACKS) || defined(TRAIN_NO_MODEL_CHECKPOINT) || (TR__PICKED && !defined(TRAIN_ENABLE_MODEL_CHECKPOINT))
#  define TR__ON_MODEL_CHECKPOINT 0
#else
#  define TR__ON_MODEL_CHECKPOINT 1
#endif
#define TR__LATE_MODEL_CHECKPOINT 0
#if defined(TRAIN_NO_CALLBACKS) || defined(TRAIN_NO_TIMER) || (TR__PICKED && !defined(TRAIN_ENABLE_TIMER))
#  define TR__ON_TIMER 0
#else
#  define TR__ON_TIMER 1
#endif
#define TR__LATE_TIMER 0
#if defined(TRAIN_NO_CALLBACKS) || defined(TRAIN_NO_LR_MONITOR) || (TR__PICKED && !defined(TRAIN_ENABLE_LR_MONITOR))
#  define TR__ON_LR_MONITOR 0
#else
#  define TR__ON_LR_MONITOR 1
#endif
#define TR__LATE_LR_MONITOR 0
#if defined(TRAIN_NO_CALLBACKS) || defined(TRAIN_NO_GRADIENT_MONITOR) || (TR__PICKED && !defined(TRAIN_ENABLE_GRADIENT_MONITOR))
#  define TR__ON_GRADIENT_MONITOR 0
#else
#  define TR__ON_GRADIENT_MONITOR 1
#endif
#define TR__LATE_GRADIENT_MONITOR 0
#if defined(TRAIN_NO_CALLBACKS) || defined(TRAIN_NO_NAN_GUARD) || (TR__PICKED && !defined(TRAIN_ENABLE_NAN_GUARD))
#  define TR__ON_NAN_GUARD 0
#else
#  define TR__ON_NAN_GUARD 1
#endif
#define TR__LATE_NAN_GUARD 0
#if defined(TRAIN_NO_CALLBACKS) || defined(TRAIN_NO_EMA) || (TR__PICKED && !defined(TRAIN_ENABLE_EMA))
#  define TR__ON_EMA 0
#else
#  define TR__ON_EMA 1
#endif
#define TR__LATE_EMA 0
#if defined(TRAIN_NO_CALLBACKS) || defined(TRAIN_NO_PARAM_GROUP) || (TR__PICKED && !defined(TRAIN_ENABLE_PARAM_GROUP))
#  define TR__ON_PARAM_GROUP 0
#else
#  define TR__ON_PARAM_GROUP 1
#endif
#define TR__LATE_PARAM_GROUP 0
#if defined(TRAIN_NO_CALLBACKS) || defined(TRAIN_NO_FINETUNING) || (TR__PICKED && !defined(TRAIN_ENABLE_FINETUNING))
#  define TR__ON_FINETUNING 0
#else
#  define TR__ON_FINETUNING 1
#endif
#define TR__LATE_FINETUNING 0
#if defined(TRAIN_NO_CALLBACKS) || defined(TRAIN_NO_LR_FINDER) || defined(TRAIN_NO_TRAINER) || (TR__PICKED && !defined(TRAIN_ENABLE_LR_FINDER))
#  define TR__ON_LR_FINDER 0
#else
#  define TR__ON_LR_FINDER 1
#endif
#define TR__LATE_LR_FINDER 1
#if defined(TRAIN_NO_CALLBACKS) || defined(TRAIN_NO_MODEL_SUMMARY) || (TR__PICKED && !defined(TRAIN_ENABLE_MODEL_SUMMARY))
#  define TR__ON_MODEL_SUMMARY 0
#else
#  define TR__ON_MODEL_SUMMARY 1
#endif
#define TR__LATE_MODEL_SUMMARY 0
#if defined(TRAIN_NO_CALLBACKS) || defined(TRAIN_NO_ACCUMULATION_SCHEDULER) || (TR__PICKED && !defined(TRAIN_ENABLE_ACCUMULATION_SCHEDULER))
#  define TR__ON_ACCUMULATION_SCHEDULER 0
#else
#  define TR__ON_ACCUMULATION_SCHEDULER 1
#endif
#define TR__LATE_ACCUMULATION_SCHEDULER 0
#if defined(TRAIN_NO_CALLBACKS) || defined(TRAIN_NO_PROFILER) || (TR__PICKED && !defined(TRAIN_ENABLE_PROFILER))
#  define TR__ON_PROFILER 0
#else
#  define TR__ON_PROFILER 1
#endif
#define TR__LATE_PROFILER 0
#if defined(TRAIN_NO_CALLBACKS) || defined(TRAIN_NO_THROUGHPUT_MONITOR) || (TR__PICKED && !defined(TRAIN_ENABLE_THROUGHPUT_MONITOR))
#  define TR__ON_THROUGHPUT_MONITOR 0
#else
#  define TR__ON_THROUGHPUT_MONITOR 1
#endif
#define TR__LATE_THROUGHPUT_MONITOR 0
#if defined(TRAIN_NO_CALLBACKS) || defined(TRAIN_NO_WATCHDOG) || (TR__PICKED && !defined(TRAIN_ENABLE_WATCHDOG))
#  define TR__ON_WATCHDOG 0
#else
#  define TR__ON_WATCHDOG 1
#endif
#define TR__LATE_WATCHDOG 0
#if defined(TRAIN_NO_CALLBACKS) || defined(TRAIN_NO_DEVICE_STATS) || (TR__PICKED && !defined(TRAIN_ENABLE_DEVICE_STATS))
#  define TR__ON_DEVICE_STATS 0
#else
#  define TR__ON_DEVICE_STATS 1
#endif
#define TR__LATE_DEVICE_STATS 0
#if defined(TRAIN_NO_CALLBACKS) || defined(TRAIN_NO_ON_EXCEPTION_CHECKPOINT) || (TR__PICKED && !defined(TRAIN_ENABLE_ON_EXCEPTION_CHECKPOINT))
#  define TR__ON_ON_EXCEPTION_CHECKPOINT 0
#else
#  define TR__ON_ON_EXCEPTION_CHECKPOINT 1
#endif
#define TR__LATE_ON_EXCEPTION_CHECKPOINT 0
#if defined(TRAIN_NO_CALLBACKS) || defined(TRAIN_NO_SPIKE_DETECTION) || (TR__PICKED && !defined(TRAIN_ENABLE_SPIKE_DETECTION))
#  define TR__ON_SPIKE_DETECTION 0
#else
#  define TR__ON_SPIKE_DETECTION 1
#endif
#define TR__LATE_SPIKE_DETECTION 0
#if defined(TRAIN_NO_CALLBACKS) || defined(TRAIN_NO_PREDICTION_WRITER) || (TR__PICKED && !defined(TRAIN_ENABLE_PREDICTION_WRITER))
#  define TR__ON_PREDICTION_WRITER 0
#else
#  define TR__ON_PREDICTION_WRITER 1
#endif
#define TR__LATE_PREDICTION_WRITER 0
#if defined(TRAIN_NO_LOGGERS) || defined(TRAIN_NO_CSV) || (TR__PICKED && !defined(TRAIN_ENABLE_CSV))
#  define TR__ON_CSV 0
#else
#  define TR__ON_CSV 1
#endif
#define TR__LATE_CSV 0
#if defined(TRAIN_NO_LOGGERS) || defined(TRAIN_NO_JSONL) || (TR__PICKED && !defined(TRAIN_ENABLE_JSONL))
#  define TR__ON_JSONL 0
#else
#  define TR__ON_JSONL 1
#endif
#define TR__LATE_JSONL 0
#if defined(TRAIN_NO_LOGGERS) || defined(TRAIN_NO_TENSORBOARD) || (TR__PICKED && !defined(TRAIN_ENABLE_TENSORBOARD))
#  define TR__ON_TENSORBOARD 0
#else
#  define TR__ON_TENSORBOARD 1
#endif
#define TR__LATE_TENSORBOARD 0
#if defined(TRAIN_NO_LOGGERS) || defined(TRAIN_NO_PROGRESS_BAR) || (TR__PICKED && !defined(TRAIN_ENABLE_PROGRESS_BAR))
#  define TR__ON_PROGRESS_BAR 0
#else
#  define TR__ON_PROGRESS_BAR 1
#endif
#define TR__LATE_PROGRESS_BAR 0
#if defined(TRAIN_NO_LOGGERS) || defined(TRAIN_NO_PLOT) || (TR__PICKED && !defined(TRAIN_ENABLE_PLOT))
#  define TR__ON_PLOT 0
#else
#  define TR__ON_PLOT 1
#endif
#define TR__LATE_PLOT 0
#if defined(TRAIN_NO_LOGGERS) || defined(TRAIN_NO_MLFLOW) || (TR__PICKED && !defined(TRAIN_ENABLE_MLFLOW))
#  define TR__ON_MLFLOW 0
#else
#  define TR__ON_MLFLOW 1
#endif
#define TR__LATE_MLFLOW 0
#define TR__ON_FILE_LOGGERS (TR__ON_CSV || TR__ON_JSONL || TR__ON_TENSORBOARD || TR__ON_PLOT)
/* generated table: end */
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
/* =================================================================================================
   THE BATTERY KIT (implementation)
   What callbacks and loggers share: the clock, flags, the monitored metric, state checks, constructor
   errors, registration. TR__SHARED marks helpers a left-out battery may leave unused.
   ================================================================================================= */
#if defined(TR__POSIX) && !defined(__cplusplus)
extern int symlink(const char *target, const char *linkpath); /* strict C99 headers hide it */
#endif

static double tr__now(void) {
#ifdef TR__POSIX
  return hk_clock(); /* monotonic with ns, also under strict -std=c99 (where <time.h> hides clock_gettime) */
#else
  return (double)time(NULL); /* wall seconds: hk_clock's fallback there is processor time */
#endif
}
TR__SHARED double tr__clock(double (*fn)(void *), void *user) { return fn ? fn(user) : tr__now(); }

TR__SHARED int tr__flag(int v, int dflt) { return v == TR_DEFAULT ? dflt : v > 0; }
TR__SHARED int tr__zero_int(int v, int dflt) { return v == TR_ZERO ? 0 : v == 0 ? dflt : v; }
TR__SHARED int64_t tr__zero_int64(int64_t v, int64_t dflt) { return v == TR_ZERO ? 0 : v == 0 ? dflt : v; }
TR__SHARED double tr__zero_double(double v, double dflt) { return v != 0 ? v : signbit(v) ? 0.0 : dflt; } /* TR_ZERO_F: 0 */
TR__SHARED int tr__better(tr_mode m, double a, double b) { return m == TR_MODE_MAX ? a > b : a < b; } /* strict */
TR__SHARED double tr__worst(tr_mode m) { return m == TR_MODE_MAX ? -HUGE_VAL : HUGE_VAL; }
TR__SHARED const char *tr__mode_name(tr_mode m) { return m == TR_MODE_MAX ? "max" : "min"; }

TR__SHARED void tr__set_str(char **dst, const char *s) { /* keeps the old value when out of memory */
  char *p = tr__strdup(s);
  if (p) { free(*dst); *dst = p; }
}

/* Wall-clock seconds with microseconds (TensorBoard's wall_time; the bar's clock). */
TR__SHARED double tr__wall(void) {
#ifdef TR__POSIX
  struct timeval tv;
  if (gettimeofday(&tv, NULL) == 0) return (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
#endif
  return (double)time(NULL);
}

/* The monitored metric is missing: the failure names it and lists what there is. */
TR__SHARED hk_signal tr__missing_metric(hk_ctx *ctx, const char *who, const char *monitor) {
  char have[256];
  size_t len = 0;
  int i, n = hk_metric_count(ctx);
  have[0] = 0;
  for (i = 0; i < n && len + 4 < sizeof have; i++) {
    double v;
    const char *name = hk_metric_at(ctx, i, &v);
    if (name) len += (size_t)snprintf(have + len, sizeof have - len, "%s%s", i ? ", " : "", name);
  }
  if (len >= sizeof have) len = sizeof have - 1;
  return hk_fail(ctx, "%s: the monitored metric '%s' is not set (metrics now: %s); set it before this check, or "
                 "monitor one of those", who, monitor, len ? have : "none");
}

/* A loaded state is range-checked like the loop counters, so nothing overflows; a refusal names the field. */
TR__SHARED int tr__get_version(hk_reader *r, uint64_t want) {
  uint64_t v;
  if (tr__get_u64(r, &v)) return hk_reject(r, "empty or truncated (no version)");
  if (v != want) return hk_reject(r, "state version %llu; this build reads version %llu", (unsigned long long)v, (unsigned long long)want);
  return 0;
}
TR__SHARED int tr__get_count(hk_reader *r, const char *what, int64_t lo, int64_t *v) { /* lo..2^53 */
  if (tr__get_i64(r, v)) return hk_reject(r, "truncated at %s", what);
  if (*v < lo || *v > TR__MAX_COUNT) return hk_reject(r, "%s is %lld, outside %lld..2^53", what, (long long)*v, (long long)lo);
  return 0;
}
TR__SHARED int tr__get_text(hk_reader *r, const char *what, char **out) {
  *out = NULL;
  if (tr__get_str(r, out)) return hk_reject(r, "%s is truncated, holds a NUL byte or is longer than %d bytes", what, TR__CB_MAX_STR);
  return 0;
}
TR__SHARED int tr__get_end(hk_reader *r) {
  if (r->pos != r->len) return hk_reject(r, "%zu bytes after the end of the state", r->len - r->pos);
  return 0;
}

/* Constructors report into a buffer first: the trainer's message, or the registry's for a factory. */
typedef struct tr__why { char msg[512]; } tr__why;
static tr_err tr__bad(tr__why *w, const char *fmt, ...) TR__PRINTF(2, 3);
static tr_err tr__bad(tr__why *w, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  (void)tr__vmsg(w->msg, sizeof w->msg, 0, fmt, ap);
  va_end(ap);
  return TR_ERR_INVALID;
}
TR__SHARED tr_err tr__cb_result(hk_registry *reg, tr_err e, const tr__why *w) { /* the message: hk_last_error(reg) */
  if (e) hk_set_error(reg, e == TR_ERR_NOMEM ? HK_ERR_NOMEM : HK_ERR_INVALID, "%s", w->msg);
  return e;
}
/* tr_<name>(reg, desc, out) over tr__<p>_make, and tr_<name>_get(reg, handle) (NULL for another kind). */
#define TR__PUBLIC_OF(name, p) \
  TRAIN_API tr_err name(hk_registry *reg, const name##_desc *d, hk_handle *out) { \
    tr__why w; \
    if (!reg) return TR_ERR_INVALID; \
    return tr__cb_result(reg, tr__##p##_make(reg, d, out, &w), &w); \
  } \
  TRAIN_API const name##_state *name##_get(const hk_registry *reg, hk_handle h) { \
    const hk_callback *cb = hk_callback_get(reg, h); \
    return cb && cb->destroy == tr__##p##_destroy ? &((const tr__##p *)cb->user)->pub : NULL; \
  }

/* Register cb (its destroy frees user on failure too). Monitors run after the model tier at
   on_train_epoch_end (HK_MONITOR_LAST), early stopping before checkpointing (order): Lightning's order. */
static tr_err tr__cb_register_when(hk_registry *reg, const hk_callback *cb, int order, int (*due)(const hk_ctx *, void *),
                                   void *due_user, hk_handle *out, tr__why *w) {
  hk_opts o;
  hk_err e;
  memset(&o, 0, sizeof o);
  o.monitor = 1;
  o.order = order;
  o.filter.pred = due; /* a callback due only on some calls: the dispatcher tests it, the rest run no code of it */
  o.filter.pred_user = due_user;
  e = hk_add_callback(reg, cb, &o, out);
  if (e) {
    tr__bad(w, "%s", hk_last_error(reg));
    cb->destroy(cb->user);
    return e == HK_ERR_NOMEM ? TR_ERR_NOMEM : TR_ERR_INVALID;
  }
  return TR_OK;
}
TR__SHARED tr_err tr__cb_register(hk_registry *reg, const hk_callback *cb, int order, hk_handle *out, tr__why *w) {
  return tr__cb_register_when(reg, cb, order, NULL, NULL, out, w);
}
/* A callback's directory, made and found writable before the first step (not when its file is due and the state
   would be lost): HK_CONTINUE, or the hook fails naming it and what could not be written there (lost). */
TR__SHARED hk_signal tr__cb_dir_ready(hk_ctx *ctx, const char *dir, const char *lost) {
  int e;
  if (tr__mkdirs(dir) != 0) return hk_fail(ctx, "cannot create the directory '%s': %s", dir, strerror(errno));
  if ((e = tr__probe_dir(dir)) != 0) return hk_fail(ctx, "the directory '%s' is not writable: %s; %s there", dir, strerror(e), lost);
  return HK_CONTINUE;
}


/* =================================================================================================
   STANDARD CALLBACKS (implementation)
   One part per callback; each state one malloc'd struct freed by its destroy; nothing runs on a step
   unless the callback is due.
   ================================================================================================= */
/* DEVICE VIEWS: callbacks reach device tensors (TRAIN_CUDA's trainer) only through this table, which
   train/trainer/cuda.h fills; NULL without it (device views refused). Entries queue on ctx's stream and return 0,
   or fail the hook naming the call; only to_host and sumsq wait. */
typedef struct tr__dev_ops {
  float *(*alloc)(hk_ctx *ctx, size_t n);                              /* n floats, zeroed (NULL: failed) */
  void (*release)(void *d);                                            /* NULL is fine */
  int (*to_host)(hk_ctx *ctx, void *dst, const void *d_src, size_t bytes); /* waits (tr_cuda_sync_count) */
  int (*to_device)(hk_ctx *ctx, void *d_dst, const void *src, size_t bytes);
  int (*copy)(hk_ctx *ctx, float *d_dst, const float *d_src, size_t n);
  int (*swap)(hk_ctx *ctx, float *d_a, float *d_b, size_t n);
  int (*average)(hk_ctx *ctx, float *d_avg, const float *d_p, size_t n, double w); /* ema.h's avg += w*(p - avg) */
  int (*grad_sumsq)(hk_ctx *ctx, const int *sel, int n, double *out); /* out[j] = sum of squares of ctx->grads[sel[j]]: one wait */
} tr__dev_ops;
TR__SHARED const tr__dev_ops **tr__dev_seam(void) { static const tr__dev_ops *ops; return &ops; }

/* Where the views live: 0 host, 1 device with the trainer (*dev set), -1 refused (own loop's or mixed). */
TR__SHARED int tr__views_where(hk_ctx *ctx, const hk_tensor *v, const tr__dev_ops **dev) {
  int k, on = 0;
  *dev = NULL;
  for (k = 0; k < ctx->n_tensors; k++) on += v[k].on_device != 0;
  if (on == 0) return 0;
  if (on == ctx->n_tensors && ctx->trainer && *tr__dev_seam()) { *dev = *tr__dev_seam(); return 1; }
  for (k = 0; k < ctx->n_tensors && !v[k].on_device; k++) {}
  return hk_fail(ctx, "tensor '%s' is in device memory; device tensors are read only through train.h's trainer "
                 "(tr_fit with TRAIN_CUDA), host memory in a loop of your own", v[k].name ? v[k].name : "?"), -1;
}
/* from the bits, as hk_is_finite: -ffast-math folds x != x to 0 */
TR__SHARED const char *tr__nonfinite_name(double x) {
  uint64_t b;
  memcpy(&b, &x, sizeof b);
  return (b & 0xfffffffffffffull) ? "nan" : b >> 63 ? "-inf" : "inf";
}
/* A loop that forgot ctx->stage = fit gets nothing from monitors (fit only): said once per callback. */
TR__SHARED void tr__warn_stage(const tr_run *run, hk_ctx *ctx, const char *who, int *warned) {
  if (ctx->stage != HK_STAGE_NONE || *warned) return;
  *warned = 1;
  tr__run_say(run, ctx, who, "ctx->stage is not set (HK_STAGE_NONE) at %s: it acts only in a fit; set "
              "ctx.stage = HK_STAGE_FIT (tr_run_start does)", hk_event_name(ctx->reg, ctx->event));
}
TR__SHARED size_t tr__views_count(const hk_ctx *ctx, const hk_tensor *v) {
  size_t n = 0;
  int k;
  for (k = 0; v && k < ctx->n_tensors; k++) n += v[k].count;
  return n;
}
/* Callback names are unique: the second csv logger is "csv-1" (loggers keep no state, so the name is
   only a label). */
TR__SHARED const char *tr__unique_name(const hk_registry *reg, const char *base, char *buf, size_t cap) {
  int i;
  if (!hk_find(reg, base)) return base;
  for (i = 1; i < 1000000; i++) {
    snprintf(buf, cap, "%s-%d", base, i);
    if (!hk_find(reg, buf)) break;
  }
  return buf;
}

/* ---- the factories: spec strings -> the constructors above --------------------------------------
   Generated from each TR_<NAME>_PARAMS: X(INT_ZERO, int, patience, "3", NULL, "...") is
       int patience;                                                        (TR__FIELD)
       { "patience", HK_PARAM_INT, "3", NULL, "..." },                      (TR__PARAM)
       if (hk_arg_given(a, "patience")) { ... d->patience = (int)v; }       (TR__COPY)
   TR__SPEC_OF(p, desc, LIST) makes tr__<p>_params[] and tr__<p>_args(); test_spec_desc_agree checks a
   spec at its defaults makes a zero desc. A factory's user is the trainer from tr_init, else NULL. */
#define TR__NPARAMS(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define TR__PARAM(kind, type, name, def, choices, doc) TR__PARAM_##kind(type, name, def, choices, doc)
#define TR__PARAM_INT(type, name, def, choices, doc)       { #name, HK_PARAM_INT, def, choices, doc },
#define TR__PARAM_INT_ZERO(type, name, def, choices, doc)  { #name, HK_PARAM_INT, def, choices, doc },
#define TR__PARAM_DOUBLE_ZERO(type, name, def, choices, doc) { #name, HK_PARAM_DOUBLE, def, choices, doc },
#define TR__PARAM_DOUBLE(type, name, def, choices, doc)    { #name, HK_PARAM_DOUBLE, def, choices, doc },
#define TR__PARAM_BOOL(type, name, def, choices, doc)      { #name, HK_PARAM_BOOL, def, choices, doc },
#define TR__PARAM_TRI(type, name, def, choices, doc)       { #name, HK_PARAM_BOOL, def, choices, doc },
#define TR__PARAM_AUTO(type, name, def, choices, doc)      { #name, HK_PARAM_CHOICE, def, "auto|true|false", doc },
#define TR__PARAM_STRING(type, name, def, choices, doc)    { #name, HK_PARAM_STRING, def, choices, doc },
#define TR__PARAM_CHOICE(type, name, def, choices, doc)    { #name, HK_PARAM_CHOICE, def, choices, doc },
#define TR__PARAM_C_ONLY(type, name, def, choices, doc)
#define TR__PARAM_SPEC_ONLY(type, name, def, choices, doc) { #name, HK_PARAM_##type, def, choices, doc },

/* The copy of one parameter, when the spec gives it (a: the arguments, d: the desc, w: the reason). */
#define TR__COPY(kind, type, name, def, choices, doc) TR__COPY_##kind(type, name)
#define TR__GIVEN(name) if (hk_arg_given(a, #name))
#define TR__COPY_INT(type, name) \
  TR__GIVEN(name) { if (tr__int_arg(a, #name, sizeof d->name, 0, &v, w)) return TR_ERR_INVALID; d->name = (type)v; }
#define TR__COPY_INT_ZERO(type, name) \
  TR__GIVEN(name) { if (tr__int_arg(a, #name, sizeof d->name, 1, &v, w)) return TR_ERR_INVALID; d->name = (type)v; }
#define TR__COPY_DOUBLE(type, name)   TR__GIVEN(name) d->name = hk_arg_double(a, #name);
#define TR__COPY_DOUBLE_ZERO(type, name) TR__GIVEN(name) { d->name = hk_arg_double(a, #name); if (d->name == 0) d->name = TR_ZERO_F; }
#define TR__COPY_BOOL(type, name)     TR__GIVEN(name) d->name = hk_arg_bool(a, #name);
#define TR__COPY_TRI(type, name)      TR__GIVEN(name) d->name = hk_arg_bool(a, #name) ? TR_YES : TR_NO;
#define TR__COPY_AUTO(type, name)     TR__GIVEN(name) d->name = tr__auto_arg(a, #name);
#define TR__COPY_STRING(type, name)   TR__GIVEN(name) d->name = hk_arg_str(a, #name);
#define TR__COPY_CHOICE(type, name)   TR__GIVEN(name) d->name = (type)hk_arg_int(a, #name); /* the choice's index */
#define TR__COPY_C_ONLY(type, name)
#define TR__COPY_SPEC_ONLY(type, name)

#define TR__SPEC_OF(p, desc_type, LIST) \
  static const hk_param tr__##p##_params[] = { LIST(TR__PARAM) }; \
  TR__ARGS_OF(p, desc_type, LIST)
/* A factory: spec table, argument copy, then from_spec for what a spec says unlike the C desc (a 0 that
   means something else, a stream by name); tr__as_given for nothing. */
#define tr__as_given(a, d, w) TR_OK
#define TR__FACTORY_WITH(p, desc_type, LIST, from_spec) \
  TR__SPEC_OF(p, desc_type, LIST) \
  static hk_err tr__##p##_factory(hk_registry *reg, const hk_args *a, void *user) { \
    desc_type d; \
    tr__why w; \
    tr_err e = tr__##p##_args(a, &d, &w); \
    (void)user; \
    if (!e) e = from_spec(a, &d, &w); \
    return tr__factory_result(reg, e ? e : tr__##p##_make(reg, &d, NULL, &w), &w); \
  } \
  TR__ADD_OF(p)
#define TR__FACTORY_OF(p, desc_type, LIST) TR__FACTORY_WITH(p, desc_type, LIST, tr__as_given)
/* tr__<p>_factory_add for tr_add_factories (train/factories.h); unused in a program that names no battery. */
#define TR__ADD_OF(p) \
  TR__SHARED hk_err tr__##p##_factory_add(hk_registry *reg, const char *name, const char *doc) { \
    return hk_factory_add(reg, name, tr__##p##_params, TR__NPARAMS(tr__##p##_params), tr__##p##_factory, NULL, doc); \
  }
#define TR__ARGS_OF(p, desc_type, LIST) \
  static tr_err tr__##p##_args(const hk_args *a, desc_type *d, tr__why *w) { \
    int64_t v; /* the integer fields' value (tr__int_arg writes it first) */ \
    memset(d, 0, sizeof *d); \
    LIST(TR__COPY) \
    (void)&v; /* a list without integers: nvcc's front end warns on a (void)v of a variable only set */ \
    (void)w; \
    return TR_OK; \
  }

/* An int or int64_t field; int and INT_ZERO in -1e9..1e9, INT_ZERO's 0 becoming TR_ZERO. */
TR__SHARED int tr__int_arg(const hk_args *a, const char *key, size_t size, int zero, int64_t *v, tr__why *w) {
  *v = hk_arg_int(a, key);
  if ((zero || size < sizeof(int64_t)) && (*v < -1000000000 || *v > 1000000000))
    return tr__bad(w, "%s: %s=%lld is out of range: give a number between -1e9 and 1e9", a->factory, key, (long long)*v), -1;
  if (zero && *v == 0) *v = TR_ZERO;
  return 0;
}
TR__SHARED int tr__auto_arg(const hk_args *a, const char *key) { /* auto|true|false */
  static const int flag[3] = { TR_DEFAULT, TR_YES, TR_NO };
  return flag[hk_arg_int(a, key)];
}
/* the spec gives key as 0 where the desc's 0 means a default (so a spec cannot mean 0 by it) */
TR__SHARED int tr__given_zero(const hk_args *a, const char *key) { return hk_arg_given(a, key) && hk_arg_double(a, key) == 0; }
TR__SHARED hk_err tr__factory_result(hk_registry *reg, tr_err e, const tr__why *w) {
  return e ? hk_set_error(reg, e == TR_ERR_NOMEM ? HK_ERR_NOMEM : HK_ERR_INVALID, "%s", w->msg) : HK_OK;
}
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
