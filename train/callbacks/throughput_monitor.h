/* train/callbacks/throughput_monitor.h - throughput_monitor. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_THROUGHPUT_MONITOR_H /* part */
#define TRAIN_THROUGHPUT_MONITOR_H /* part */
#include "../battery.h" /* part */

TR__C_BEGIN /* part */
/* ---- throughput_monitor (Lightning's ThroughputMonitor; kempnerforge's tokens_seen) -------------------
   At every on_train_batch_end it reads the clock and ctx->samples_seen (the loop counts it) into a ring
   of the last `window` steps (allocated when made: nothing per step but the clock and a few stores);
   time spent in validation (on_validation_start .. _end) is left out, as Lightning does. Each training
   record (on_log) gets, over that window:
     throughput/batches_per_sec, throughput/samples_per_sec   the job's rates
     throughput/tokens_per_sec, throughput/tokens             with tokens_per_sample or tokens_metric
     throughput/flops_per_sec                                 with flops_per_sample
     throughput/mfu                                           with peak_flops: flops_per_sec / (peak x ranks)
     throughput/step_ms_p50, _p90, _p99                       step time percentiles (nearest rank)
     throughput/samples                                       samples seen by the job
   and the same values are set as metrics (hk_metric_set) for other hooks, and kept for
   tr_throughput_monitor_get (which computes them afresh). Tokens: tokens_per_sample (a fixed sequence
   length), or the metric tokens_metric, which the loop sets to each batch's token count before
   on_train_batch_end (kempnerforge's tokens_seen; packed or variable-length batches). Several processes
   (ctx->world_size > 1): no collective inside a hook, so the job's rates are this rank's times
   world_size (train.h's trainer checks that every rank has the same batches; a loop of your own must
   give them equal work), as Lightning's; throughput/device/samples_per_sec and device/tokens_per_sec are
   this rank's. Differences from Lightning: no batch_size_fn (the loop's samples_seen), the peak is a
   parameter (Lightning looks the device up in a table), percentiles of the step time (Lightning has
   none), tokens from a metric as well as per sample. Hand-written loop: fire on_train_start and
   on_train_batch_end with ctx->samples_seen counted, and send records (tr_run_batch_end does). */
#define TR_THROUGHPUT_MONITOR_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD) */ \
  X(INT,    int,          window,            "100", NULL, "steps the rates and percentiles are taken over (2..1000000)") \
  X(DOUBLE, double,       tokens_per_sample, "0",   NULL, "tokens in one sample (a sequence length); 0: none") \
  X(STRING, const char *, tokens_metric,     "",    NULL, "a metric the loop sets to the batch's token count (wins over " \
    "tokens_per_sample; empty: none)") \
  X(DOUBLE, double,       flops_per_sample,  "0",   NULL, "model FLOPs per sample, forward and backward (e.g. 6 x params x tokens); 0: none") \
  X(DOUBLE, double,       peak_flops,        "0",   NULL, "one device's peak FLOP/s, for throughput/mfu (needs flops_per_sample); 0: none") \
  X(C_ONLY, tr_clock_fn,  clock,             NULL,  NULL, "seconds; NULL = hooks.h's hk_clock") \
  X(C_ONLY, void *,       clock_user,        NULL,  NULL, "clock's argument")
typedef struct tr_throughput_monitor_desc { TR_THROUGHPUT_MONITOR_PARAMS(TR__FIELD) } tr_throughput_monitor_desc;
typedef struct tr_throughput_monitor_state {
  int64_t steps;                /* steps timed (this process) */
  int n;                        /* steps in the window now */
  double batches_per_sec, samples_per_sec, tokens_per_sec, flops_per_sec, mfu; /* the job's; NaN when unknown */
  double device_samples_per_sec, device_tokens_per_sec; /* this rank's */
  double step_ms_p50, step_ms_p90, step_ms_p99;
  double samples, tokens;       /* seen by the job since on_train_start */
} tr_throughput_monitor_state;
TRAIN_API tr_err tr_throughput_monitor(hk_registry *reg, const tr_throughput_monitor_desc *d, hk_handle *out);
TRAIN_API const tr_throughput_monitor_state *tr_throughput_monitor_get(const hk_registry *reg, hk_handle h);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
/* ---- throughput_monitor --------------------------------------------------------------------------- */
typedef struct tr__tp {
  tr_throughput_monitor_state pub;
  tr_run *run;
  int window, world;
  double tokens_per_sample, flops_per_sample, peak;
  char *tokens_metric;          /* NULL: none */
  tr_clock_fn clock;
  void *clock_user;
  double paused, pause_start;   /* validation time left out; when the running one began (< 0: none) */
  /* the ring: window + 1 points (time, samples, tokens) at on_train_start and each step's end */
  double *t, *samples, *tokens, *scratch;
  int head, n;                  /* the newest point; points held */
  int64_t last_samples;
  double tokens_seen;
  int warned;                   /* samples_seen did not move */
} tr__tp;

static void tr__tp_destroy(void *user) {
  tr__tp *s = (tr__tp *)user;
  if (!s) return;
  free(s->tokens_metric);
  free(s->t);
  free(s);
}
static double tr__tp_now(const tr__tp *s) { return (s->clock ? s->clock(s->clock_user) : hk_clock()) - s->paused; }
static void tr__tp_push(tr__tp *s, double t, int64_t samples, double tokens) {
  s->head = (s->head + 1) % (s->window + 1);
  s->t[s->head] = t;
  s->samples[s->head] = (double)samples;
  s->tokens[s->head] = tokens;
  if (s->n < s->window + 1) s->n++;
}
static hk_signal tr__tp_train_start(hk_ctx *ctx, void *user) {
  tr__tp *s = (tr__tp *)user;
  s->paused = 0;
  s->pause_start = -1;
  s->n = 0;
  s->head = 0;
  s->tokens_seen = 0;
  s->last_samples = ctx->samples_seen;
  s->world = ctx->world_size > 1 ? ctx->world_size : 1;
  memset(&s->pub, 0, sizeof s->pub);
  tr__tp_push(s, tr__tp_now(s), 0, 0); /* samples and tokens count from here (a resumed run's too) */
  return HK_CONTINUE;
}
/* The step: a clock read and the ring's stores. */
static hk_signal tr__tp_batch_end(hk_ctx *ctx, void *user) {
  tr__tp *s = (tr__tp *)user;
  int64_t d = ctx->samples_seen - s->last_samples;
  double tok;
  if (s->n == 0) return HK_CONTINUE; /* on_train_start never fired */
  s->last_samples = ctx->samples_seen;
  if (s->tokens_metric) tok = hk_metric_get(ctx, s->tokens_metric, &tok) ? tok : 0;
  else tok = s->tokens_per_sample * (double)d;
  s->tokens_seen += tok;
  s->pub.steps++;
  tr__tp_push(s, tr__tp_now(s), (int64_t)s->samples[s->head] + d, s->tokens_seen);
  return HK_CONTINUE;
}
static hk_signal tr__tp_val_start(hk_ctx *ctx, void *user) {
  tr__tp *s = (tr__tp *)user;
  (void)ctx;
  if (s->pause_start < 0) s->pause_start = tr__tp_now(s);
  return HK_CONTINUE;
}
static hk_signal tr__tp_val_end(hk_ctx *ctx, void *user) {
  tr__tp *s = (tr__tp *)user;
  (void)ctx;
  if (s->pause_start >= 0) { s->paused += tr__tp_now(s) - s->pause_start; s->pause_start = -1; }
  return HK_CONTINUE;
}
static int tr__tp_dcmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
/* The window's values, into pub (at a record, or for the getter). */
static void tr__tp_compute(tr__tp *s) {
  tr_throughput_monitor_state *p = &s->pub;
  int W = s->window + 1, first = (s->head - (s->n - 1) + W) % W, k, m = s->n - 1;
  double dt = s->t[s->head] - s->t[first], world = (double)s->world;
  double ds = s->samples[s->head] - s->samples[first], dtok = s->tokens[s->head] - s->tokens[first];
  p->n = m > 0 ? m : 0;
  p->samples = s->samples[s->head] * world;
  p->tokens = s->tokens_seen * world;
  p->batches_per_sec = p->samples_per_sec = p->tokens_per_sec = p->flops_per_sec = p->mfu = NAN;
  p->device_samples_per_sec = p->device_tokens_per_sec = NAN;
  p->step_ms_p50 = p->step_ms_p90 = p->step_ms_p99 = NAN;
  if (m <= 0 || !(dt > 0)) return;
  p->batches_per_sec = (double)m / dt * world;
  p->device_samples_per_sec = ds / dt;
  p->samples_per_sec = p->device_samples_per_sec * world;
  if (s->tokens_metric || s->tokens_per_sample > 0) {
    p->device_tokens_per_sec = dtok / dt;
    p->tokens_per_sec = p->device_tokens_per_sec * world;
  }
  if (s->flops_per_sample > 0) p->flops_per_sec = p->samples_per_sec * s->flops_per_sample;
  if (s->flops_per_sample > 0 && s->peak > 0) p->mfu = p->flops_per_sec / (s->peak * world);
  for (k = 0; k < m; k++) { /* step times, oldest first, then sorted: nearest-rank percentiles */
    int i = (first + k) % W, j = (first + k + 1) % W;
    s->scratch[k] = 1e3 * (s->t[j] - s->t[i]);
  }
  qsort(s->scratch, (size_t)m, sizeof s->scratch[0], tr__tp_dcmp);
  p->step_ms_p50 = s->scratch[(int)ceil(0.50 * m) - 1];
  p->step_ms_p90 = s->scratch[(int)ceil(0.90 * m) - 1];
  p->step_ms_p99 = s->scratch[(int)ceil(0.99 * m) - 1];
}
static hk_signal tr__tp_on_log(hk_ctx *ctx, void *user) {
  tr__tp *s = (tr__tp *)user;
  tr_log_record *r = tr_log_current(ctx);
  const tr_throughput_monitor_state *p = &s->pub;
  struct { const char *name; double v; } m[13];
  int k, n = 0;
  if (!r || !r->stage || strcmp(r->stage, "train") || s->n < 2) return HK_CONTINUE;
  if (!s->warned && s->samples[s->head] == 0) {
    s->warned = 1;
    tr__run_say_on(s->run, ctx, 1, "throughput_monitor", "ctx->samples_seen did not move in %lld steps: samples/s is 0; "
                   "add each batch's size to ctx.samples_seen before on_train_batch_end", (long long)p->steps);
  }
  tr__tp_compute(s);
  m[n].name = "throughput/batches_per_sec", m[n++].v = p->batches_per_sec;
  m[n].name = "throughput/samples_per_sec", m[n++].v = p->samples_per_sec;
  m[n].name = "throughput/samples", m[n++].v = p->samples;
  m[n].name = "throughput/step_ms_p50", m[n++].v = p->step_ms_p50;
  m[n].name = "throughput/step_ms_p90", m[n++].v = p->step_ms_p90;
  m[n].name = "throughput/step_ms_p99", m[n++].v = p->step_ms_p99;
  if (s->tokens_metric || s->tokens_per_sample > 0) {
    m[n].name = "throughput/tokens_per_sec", m[n++].v = p->tokens_per_sec;
    m[n].name = "throughput/tokens", m[n++].v = p->tokens;
  }
  if (s->flops_per_sample > 0) m[n].name = "throughput/flops_per_sec", m[n++].v = p->flops_per_sec;
  if (s->flops_per_sample > 0 && s->peak > 0) m[n].name = "throughput/mfu", m[n++].v = p->mfu;
  if (s->world > 1) {
    m[n].name = "throughput/device/samples_per_sec", m[n++].v = p->device_samples_per_sec;
    if (s->tokens_metric || s->tokens_per_sample > 0) m[n].name = "throughput/device/tokens_per_sec", m[n++].v = p->device_tokens_per_sec;
  }
  for (k = 0; k < n; k++) {
    if (!hk_is_finite(m[k].v)) continue;
    if (tr_log_set(r, m[k].name, m[k].v) != TR_OK || hk_metric_set(ctx, m[k].name, m[k].v) != HK_OK)
      return hk_fail(ctx, "out of memory");
  }
  return HK_CONTINUE;
}

static tr_err tr__tp_make(hk_registry *reg, const tr_throughput_monitor_desc *d, hk_handle *out, tr__why *w) {
  tr__tp *s;
  hk_callback cb;
  size_t W;
  if (!d) return tr__bad(w, "throughput_monitor: desc is NULL");
  if (d->window != 0 && (d->window < 2 || d->window > 1000000))
    return tr__bad(w, "throughput_monitor: window must be in 2..1000000 steps (0 = 100), got %d", d->window);
  if (!(d->tokens_per_sample >= 0) || !hk_is_finite(d->tokens_per_sample))
    return tr__bad(w, "throughput_monitor: tokens_per_sample must be a finite number >= 0, got %g", d->tokens_per_sample);
  if (!(d->flops_per_sample >= 0) || !hk_is_finite(d->flops_per_sample))
    return tr__bad(w, "throughput_monitor: flops_per_sample must be a finite number >= 0, got %g", d->flops_per_sample);
  if (!(d->peak_flops >= 0) || !hk_is_finite(d->peak_flops))
    return tr__bad(w, "throughput_monitor: peak_flops must be a finite number >= 0 (one device's FLOP/s), got %g", d->peak_flops);
  if (d->peak_flops > 0 && d->flops_per_sample == 0)
    return tr__bad(w, "throughput_monitor: peak_flops needs flops_per_sample (MFU is the model's FLOP/s over the peak)");
  if (d->tokens_metric && strlen(d->tokens_metric) > 200) return tr__bad(w, "throughput_monitor: tokens_metric is longer than 200 characters");
  s = (tr__tp *)calloc(1, sizeof *s);
  if (!s) return tr__bad(w, "throughput_monitor: out of memory"), TR_ERR_NOMEM;
  s->window = d->window ? d->window : 100;
  W = (size_t)s->window + 1;
  s->t = (double *)malloc(4 * W * sizeof(double)); /* one block: t, samples, tokens, scratch */
  if (d->tokens_metric && d->tokens_metric[0]) s->tokens_metric = tr__strdup(d->tokens_metric);
  if (!s->t || (d->tokens_metric && d->tokens_metric[0] && !s->tokens_metric)) {
    tr__tp_destroy(s);
    return tr__bad(w, "throughput_monitor: out of memory"), TR_ERR_NOMEM;
  }
  s->samples = s->t + W;
  s->tokens = s->t + 2 * W;
  s->scratch = s->t + 3 * W;
  s->run = tr_run_get(reg);
  s->tokens_per_sample = d->tokens_per_sample;
  s->flops_per_sample = d->flops_per_sample;
  s->peak = d->peak_flops;
  s->clock = d->clock;
  s->clock_user = d->clock_user;
  s->world = 1;
  s->pause_start = -1;
  memset(&cb, 0, sizeof cb);
  cb.name = "throughput_monitor";
  cb.user = s;
  cb.on_train_start = tr__tp_train_start;
  cb.on_train_batch_end = tr__tp_batch_end;
  cb.on_validation_start = tr__tp_val_start;
  cb.on_validation_end = tr__tp_val_end;
  cb.on_log = tr__tp_on_log;
  cb.destroy = tr__tp_destroy;
  return tr__cb_register(reg, &cb, 0, out, w);
}
TRAIN_API tr_err tr_throughput_monitor(hk_registry *reg, const tr_throughput_monitor_desc *d, hk_handle *out) {
  tr__why w;
  if (!reg) return TR_ERR_INVALID;
  return tr__cb_result(reg, tr__tp_make(reg, d, out, &w), &w);
}
TRAIN_API const tr_throughput_monitor_state *tr_throughput_monitor_get(const hk_registry *reg, hk_handle h) {
  const hk_callback *cb = hk_callback_get(reg, h);
  tr__tp *s = cb && cb->destroy == tr__tp_destroy ? (tr__tp *)cb->user : NULL;
  if (!s) return NULL;
  if (s->n >= 1) tr__tp_compute(s);
  return &s->pub;
}
/* window=0 written in a spec is refused (the desc's 0: the default) */
static tr_err tr__tp_from_spec(const hk_args *a, tr_throughput_monitor_desc *d, tr__why *w) {
  (void)d;
  return tr__given_zero(a, "window") ? tr__bad(w, "throughput_monitor: window must be in 2..1000000 steps, got 0") : TR_OK;
}
TR__FACTORY_WITH(tp, tr_throughput_monitor_desc, TR_THROUGHPUT_MONITOR_PARAMS, tr__tp_from_spec)
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
