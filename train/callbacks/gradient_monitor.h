/* train/callbacks/gradient_monitor.h - gradient_monitor. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_GRADIENT_MONITOR_H /* part */
#define TRAIN_GRADIENT_MONITOR_H /* part */
#include "../battery.h" /* part */

TR__C_BEGIN /* part */
/* ---- gradient_monitor (Lightning's grad_norm utility) ----------------
   Every log_frequency-th step at on_before_optimizer_step (the window's averaged gradients, before
   clipping): grad_2.0_norm_total, grad_2.0_norm/<tensor> (per_tensor), grad_abs_p<q> (percentiles),
   grad_vanishing / grad_exploding, and with histogram_bins a histogram ("gradients" in the next record).
   Sums from the loop's shared pass when it has one. param_filter keeps tensors whose name contains one of
   its substrings. Steps not due cost one filter test; views checked and scratch allocated at the first
   due step (llm.c allocates gradients in the first backward). Hand-written loop: on_train_start,
   on_before_optimizer_step with host ctx->grads; log_frequency 0 follows log_every_n_steps. On a device
   model the norms come from the device kernel (one wait), percentiles and histograms from host copies.
   docs/callbacks.md. */
typedef struct tr_histogram {
  int n_bins;
  const double *edges;          /* n_bins + 1 bin edges, from min to max (equal widths) */
  const int64_t *counts;        /* n_bins counts; a value equal to max goes to the last bin */
  double min, max, sum, sum_squares;
  int64_t num;
  int64_t step;                 /* ctx->global_step + 1: the step these gradients are for */
} tr_histogram;
typedef void (*tr_histogram_fn)(const tr_histogram *h, hk_ctx *ctx, void *user);
#define TR_GRADIENT_MONITOR_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD) */ \
  X(INT,    int64_t,         log_frequency,       "0",     NULL, "every n-th optimizer step (0: the run's log_every_n_steps, " \
    "tr_config's or tr_run_desc's, 50 when it has none, so that each training record has them)") \
  X(TRI,    int,             per_tensor,          "true",  NULL, "one norm per tensor, grad_2.0_norm/<tensor>") \
  X(INT,    int,             histogram_bins,      "0",     NULL, "a histogram of the gradient values with this many bins " \
    "(up to 100000; 0: none)") \
  X(STRING, const char *,    percentiles,         "",      NULL, "percentiles of |g|, e.g. \"10,50,90\" (each in [0, 100]; empty: none)") \
  X(STRING, const char *,    param_filter,        "",      NULL, "comma-separated substrings of tensor names, e.g. " \
    "\"fc1,bias\" (empty: all)") \
  X(DOUBLE, double,          vanishing_threshold, "1e-7",  NULL, "flag a total norm below this (negative: never)") \
  X(DOUBLE, double,          exploding_threshold, "1e3",   NULL, "flag a total norm above this (negative: never)") \
  X(BOOL,   int,             verbose,             "false", NULL, "print a warning when flagged") \
  X(C_ONLY, tr_histogram_fn, on_histogram,        NULL,    NULL, "called at each due step with the histogram") \
  X(C_ONLY, void *,          histogram_user,      NULL,    NULL, "on_histogram's user argument")
typedef struct tr_gradient_monitor_desc { TR_GRADIENT_MONITOR_PARAMS(TR__FIELD) } tr_gradient_monitor_desc;
typedef struct tr_gradient_monitor_state {
  int64_t checks;               /* due steps so far (this process) */
  int64_t vanishing, exploding; /* how many of them were flagged */
  double total_norm;            /* at the last due step (NaN before) */
  int n_tensors;                /* tensors the filter selected (after its first due step) */
  const tr_histogram *histogram;/* the last one (NULL before, or without histogram_bins) */
} tr_gradient_monitor_state;
TRAIN_API tr_err tr_gradient_monitor(hk_registry *reg, const tr_gradient_monitor_desc *d, hk_handle *out);
TRAIN_API const tr_gradient_monitor_state *tr_gradient_monitor_get(const hk_registry *reg, hk_handle h);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
/* ---- gradient_monitor ----------------------------------------------------------------------------- */
#define TR__GM_MAX_PCT 16
typedef struct tr__gm {
  tr_gradient_monitor_state pub;
  tr_histogram hist;
  tr_run *run;          /* the registry's run: what the loop says (train/run.h) */
  int64_t every;
  int per_tensor, bins, verbose, n_pct;
  double pct[TR__GM_MAX_PCT], vanish, explode;
  char *filter;                 /* comma-separated substrings, or NULL */
  void (*on_histogram)(const tr_histogram *, hk_ctx *, void *);
  void *hist_user;
  /* sized at the first due step of a fit (tr__gm_views) */
  int *sel;                     /* selected tensor indices */
  char **names;                 /* "grad_2.0_norm/<tensor>" per selected tensor */
  char pct_names[TR__GM_MAX_PCT][32];
  float *scratch;               /* |g| of the selected tensors, for the percentiles */
  size_t scratch_n;
  double *edges;
  int64_t *counts;
  int ready;
  const tr__dev_ops *dev;       /* device gradients (train/battery.h's seam), else NULL */
  float *host;                  /* with dev, for percentiles or a histogram: the selected gradients, copied */
  size_t *off;                  /* where each selected tensor starts in host */
  double *sq;                   /* with dev: each selected tensor's sum of squares */
} tr__gm;

static void tr__gm_free_views(tr__gm *s) {
  int i;
  for (i = 0; s->names && i < s->pub.n_tensors; i++) free(s->names[i]);
  free(s->names);
  free(s->sel);
  free(s->scratch);
  free(s->host);
  free(s->off);
  free(s->sq);
  s->names = NULL;
  s->sel = NULL;
  s->scratch = NULL;
  s->host = NULL;
  s->off = NULL;
  s->sq = NULL;
  s->pub.n_tensors = 0;
  s->ready = 0;
}
static void tr__gm_destroy(void *user) {
  tr__gm *s = (tr__gm *)user;
  tr__gm_free_views(s);
  free(s->filter);
  free(s->edges);
  free(s->counts);
  free(s);
}

/* Lightning's log_every_n_steps counting: the step being taken is the n-th, 2n-th, ... */
static int tr__gm_due(const hk_ctx *ctx, void *user) {
  const tr__gm *s = (const tr__gm *)user;
  int64_t n = s->every; /* 0: the run's logging cadence, asked now (the loop may set it after this was made) */
  if (n == 0) n = s->run && s->run->desc.log_every_n_steps > 0 ? s->run->desc.log_every_n_steps : 50;
  return ctx->event != HK_ON_BEFORE_OPTIMIZER_STEP || (ctx->global_step + 1) % n == 0;
}

static int tr__gm_selected(const tr__gm *s, const char *name) {
  const char *p = s->filter;
  if (!p) return 1;
  while (*p) {
    const char *e = strchr(p, ',');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    char part[128];
    if (n < sizeof part && n > 0) {
      memcpy(part, p, n);
      part[n] = 0;
      if (strstr(name ? name : "", part)) return 1;
    }
    p += n + (e ? 1 : 0);
  }
  return 0;
}

/* A fit takes the views afresh at its first due step; a param_filter that selects no name is said now. */
static hk_signal tr__gm_train_start(hk_ctx *ctx, void *user) {
  tr__gm *s = (tr__gm *)user;
  int k, named = ctx->grads && ctx->n_tensors > 0, hit = 0;
  tr__gm_free_views(s);
  for (k = 0; named && k < ctx->n_tensors; k++) {
    named = ctx->grads[k].name != NULL;
    hit |= named && tr__gm_selected(s, ctx->grads[k].name);
  }
  if (named && !hit) return hk_fail(ctx, "param_filter '%s' selects no tensor", s->filter ? s->filter : "");
  return HK_CONTINUE;
}
/* All allocation happens here, once per fit, where the gradients are first read (not at on_train_start:
   llm.c's exist only after the first backward). */
static hk_signal tr__gm_views(tr__gm *s, hk_ctx *ctx) {
  int k, n = 0;
  tr__gm_free_views(s); /* what a failed try left */
  if (!ctx->grads || ctx->n_tensors <= 0)
    return hk_fail(ctx, "the loop has no gradient views at %s: set ctx->grads and ctx->n_tensors by then",
                   hk_event_name(ctx->reg, ctx->event));
  if (tr__views_where(ctx, ctx->grads, &s->dev) < 0) return HK_FAIL;
  if (tr__views_ready(ctx, ctx->grads, ctx->n_tensors, "ctx->grads")) return HK_FAIL;
  s->sel = (int *)calloc((size_t)ctx->n_tensors, sizeof *s->sel);
  s->names = (char **)calloc((size_t)ctx->n_tensors, sizeof *s->names);
  s->off = (size_t *)calloc((size_t)ctx->n_tensors, sizeof *s->off);
  s->sq = (double *)calloc((size_t)ctx->n_tensors, sizeof *s->sq);
  if (!s->sel || !s->names || !s->off || !s->sq) return hk_fail(ctx, "out of memory");
  s->scratch_n = 0;
  for (k = 0; k < ctx->n_tensors; k++) {
    const char *name = ctx->grads[k].name ? ctx->grads[k].name : "";
    size_t len = strlen(name) + 16;
    if (!tr__gm_selected(s, name)) continue;
    s->names[n] = (char *)malloc(len);
    if (!s->names[n]) { s->pub.n_tensors = n; return hk_fail(ctx, "out of memory"); }
    snprintf(s->names[n], len, "grad_2.0_norm/%s", name);
    s->off[n] = s->scratch_n;
    s->sel[n++] = k;
    s->scratch_n += ctx->grads[k].count;
  }
  s->pub.n_tensors = n;
  if (n == 0) return hk_fail(ctx, "param_filter '%s' selects no tensor", s->filter ? s->filter : "");
  if (s->n_pct && !(s->scratch = (float *)malloc((s->scratch_n ? s->scratch_n : 1) * sizeof(float))))
    return hk_fail(ctx, "out of memory");
  if (s->dev && (s->n_pct || s->bins) && !(s->host = (float *)malloc((s->scratch_n ? s->scratch_n : 1) * sizeof(float))))
    return hk_fail(ctx, "out of memory");
  s->ready = 1;
  return HK_CONTINUE;
}

/* the k-th smallest of x[0..n) (quickselect; reorders x) */
static float tr__select(float *x, size_t n, size_t k) {
  size_t lo = 0, hi = n - 1;
  while (lo < hi) {
    float pivot = x[lo + (hi - lo) / 2];
    size_t i = lo, j = hi;
    while (i <= j) {
      while (x[i] < pivot) i++;
      while (x[j] > pivot) j--;
      if (i <= j) { float tmp = x[i]; x[i] = x[j]; x[j] = tmp; i++; if (j == 0) break; j--; }
    }
    if (k <= j) hi = j;
    else if (k >= i) lo = i;
    else return x[k];
  }
  return x[k];
}
static double tr__percentile(float *x, size_t n, double q) {
  double pos = q / 100.0 * (double)(n - 1), frac;
  size_t lo = (size_t)pos, i;
  float a = tr__select(x, n, lo), b = a;
  frac = pos - (double)lo;
  if (frac > 0 && lo + 1 < n) { /* the next order statistic: the smallest of the upper part */
    b = x[lo + 1];
    for (i = lo + 1; i < n; i++) if (x[i] < b) b = x[i];
  }
  return (double)a + frac * ((double)b - (double)a);
}

/* The j-th selected tensor's gradient in host memory: the loop's, or the copy of a device model's. */
static const float *tr__gm_values(const tr__gm *s, const hk_ctx *ctx, int j) {
  return s->host ? s->host + s->off[j] : ctx->grads[s->sel[j]].data;
}

static hk_signal tr__gm_check(hk_ctx *ctx, void *user) {
  tr__gm *s = (tr__gm *)user;
  double total = 0;
  const double *shared;
  size_t at = 0, i;
  int j;
  if (!s->ready && tr__gm_views(s, ctx) != HK_CONTINUE) return HK_FAIL;
  if (ctx->n_tensors <= s->sel[s->pub.n_tensors - 1])
    return hk_fail(ctx, "the loop's tensors changed since its first check: ctx->n_tensors is %d, it read tensor %d then",
                   ctx->n_tensors, s->sel[s->pub.n_tensors - 1]);
  for (j = 0; j < s->pub.n_tensors; j++)
    if (!ctx->grads[s->sel[j]].data) return tr__view_empty(ctx, ctx->grads, s->sel[j], "ctx->grads"), HK_FAIL;
  /* the loop's one pass per change (train.h's trainer: the one behind hk_grad_norm, shared with nan_guard
     and clipping), else a pass of its own */
  shared = tr__grad_pass_sums(ctx);
  if (s->dev) { /* a device model: the values to the host when needed, else the device's per-tensor sums */
    for (j = 0; j < s->pub.n_tensors && s->host; j++)
      if (s->dev->to_host(ctx, s->host + s->off[j], ctx->grads[s->sel[j]].data, ctx->grads[s->sel[j]].count * sizeof(float)))
        return HK_FAIL;
    if (!s->host && s->dev->grad_sumsq(ctx, s->sel, s->pub.n_tensors, s->sq)) return HK_FAIL;
  }
  for (j = 0; j < s->pub.n_tensors; j++) {
    const hk_tensor *g = &ctx->grads[s->sel[j]];
    const float *x = tr__gm_values(s, ctx, j);
    double sq = s->dev && !s->host ? s->sq[j] : shared ? shared[s->sel[j]] : hk_sumsq(x, g->count); /* hk_grad_norm's order: the same bits */
    total += sq;
    if (s->per_tensor) (void)hk_metric_set(ctx, s->names[j], sqrt(sq));
    if (s->scratch) for (i = 0; i < g->count; i++) s->scratch[at++] = fabsf(x[i]);
  }
  /* every view in order: this is hk_grad_norm for whoever asks next (not a device's: another order) */
  if (!shared && !s->dev && s->pub.n_tensors == ctx->n_tensors && !hk_grad_norm_known(ctx)) hk_grad_norm_set(ctx, sqrt(total));
  total = sqrt(total);
  s->pub.total_norm = total;
  s->pub.checks++;
  (void)hk_metric_set(ctx, "grad_2.0_norm_total", total);
  for (j = 0; j < s->n_pct && at > 0; j++) (void)hk_metric_set(ctx, s->pct_names[j], tr__percentile(s->scratch, at, s->pct[j]));
  {
    int v = s->vanish >= 0 && total < s->vanish, x = s->explode >= 0 && total > s->explode;
    s->pub.vanishing += v;
    s->pub.exploding += x;
    (void)hk_metric_set(ctx, "grad_vanishing", v);
    (void)hk_metric_set(ctx, "grad_exploding", x);
    if (s->verbose && (v || x))
      tr__run_say_on(s->run, ctx, 1, "gradient_monitor", "%s gradients at step %lld: total norm %g %s %g",
                 v ? "vanishing" : "exploding", (long long)ctx->global_step + 1, total, v ? "<" : ">", v ? s->vanish : s->explode);
  }
  if (s->bins > 0) {
    tr_histogram *h = &s->hist;
    double lo = HUGE_VAL, hi = -HUGE_VAL, sum = 0, sq = 0, width;
    int64_t num = 0;
    int b;
    for (j = 0; j < s->pub.n_tensors; j++) {
      const hk_tensor *g = &ctx->grads[s->sel[j]];
      const float *v = tr__gm_values(s, ctx, j);
      for (i = 0; i < g->count; i++) {
        double x = v[i];
        if (!hk_is_finite(x)) continue;
        if (x < lo) lo = x;
        if (x > hi) hi = x;
        sum += x;
        sq += x * x;
        num++;
      }
    }
    if (num == 0) lo = hi = 0;
    width = hi > lo ? (hi - lo) / s->bins : 1.0;
    for (b = 0; b <= s->bins; b++) s->edges[b] = b == s->bins && hi > lo ? hi : lo + width * b;
    memset(s->counts, 0, (size_t)s->bins * sizeof *s->counts);
    for (j = 0; j < s->pub.n_tensors; j++) {
      const hk_tensor *g = &ctx->grads[s->sel[j]];
      const float *v = tr__gm_values(s, ctx, j);
      for (i = 0; i < g->count; i++) {
        double x = v[i];
        int64_t bin;
        if (!hk_is_finite(x)) continue;
        bin = (int64_t)((x - lo) / width);
        if (bin >= s->bins) bin = s->bins - 1;
        if (bin < 0) bin = 0;
        s->counts[bin]++;
      }
    }
    h->n_bins = s->bins;
    h->edges = s->edges;
    h->counts = s->counts;
    h->min = lo;
    h->max = hi;
    h->sum = sum;
    h->sum_squares = sq;
    h->num = num;
    h->step = ctx->global_step + 1;
    s->pub.histogram = h;
    if (s->on_histogram) s->on_histogram(h, ctx, s->hist_user);
    if (HK_ACTIVE(ctx->reg, HK_ON_LOG)) /* the loggers get it with the next record (TensorBoard shows it) */
      (void)tr_log_histogram_bins(ctx, "gradients", h->n_bins, h->edges, h->counts, h->sum, h->sum_squares);
  }
  return HK_CONTINUE;
}

/* "10,50,90" -> values in [0, 100]; the count, or -1 with the reason in w */
static int tr__parse_numbers(const char *text, double *out, int cap, double lo, double hi, const char *who, tr__why *w) {
  const char *p = text;
  int n = 0;
  while (*p) {
    char *end;
    double v;
    while (*p == ' ' || *p == ',') p++;
    if (!*p) break;
    v = strtod(p, &end);
    if (end == p || !hk_is_finite(v) || v < lo || v > hi)
      return tr__bad(w, "%s: '%s' is not a list of numbers in [%g, %g] like \"10,50,90\"", who, text, lo, hi), -1;
    if (n == cap) return tr__bad(w, "%s: at most %d numbers in '%s'", who, cap, text), -1;
    out[n++] = v;
    p = end;
    while (*p == ' ') p++;
    if (*p && *p != ',') return tr__bad(w, "%s: '%s' is not a list of numbers in [%g, %g] like \"10,50,90\"", who, text, lo, hi), -1;
  }
  return n;
}

static tr_err tr__gm_make(hk_registry *reg, const tr_gradient_monitor_desc *d, hk_handle *out, tr__why *w) {
  tr__gm *s;
  hk_callback cb;
  double pct[TR__GM_MAX_PCT];
  int n_pct = 0, j;
  if (!d) return tr__bad(w, "gradient_monitor: desc is NULL");
  if (d->log_frequency < 0) return tr__bad(w, "gradient_monitor: log_frequency must be >= 1 (0 = the run's log_every_n_steps), got %lld", (long long)d->log_frequency);
  if (d->histogram_bins < 0 || d->histogram_bins > 100000) return tr__bad(w, "gradient_monitor: histogram_bins must be in 0..100000 (0 = no histogram), got %d", d->histogram_bins);
  if (!hk_is_finite(d->vanishing_threshold) || !hk_is_finite(d->exploding_threshold))
    return tr__bad(w, "gradient_monitor: vanishing_threshold and exploding_threshold must be finite (negative = off)");
  if (d->percentiles && (n_pct = tr__parse_numbers(d->percentiles, pct, TR__GM_MAX_PCT, 0, 100, "gradient_monitor: percentiles", w)) < 0)
    return TR_ERR_INVALID;
  if (d->param_filter && strlen(d->param_filter) > TR__CB_MAX_STR) return tr__bad(w, "gradient_monitor: param_filter is too long");
  s = (tr__gm *)calloc(1, sizeof *s);
  if (!s) return tr__bad(w, "gradient_monitor: out of memory"), TR_ERR_NOMEM;
  s->run = tr_run_get(reg);
  s->every = d->log_frequency; /* 0: the run's log_every_n_steps (tr__gm_due) */
  s->per_tensor = tr__flag(d->per_tensor, 1);
  s->bins = d->histogram_bins;
  s->verbose = d->verbose;
  s->vanish = d->vanishing_threshold == 0 ? 1e-7 : d->vanishing_threshold;
  s->explode = d->exploding_threshold == 0 ? 1e3 : d->exploding_threshold;
  s->on_histogram = d->on_histogram;
  s->hist_user = d->histogram_user;
  s->n_pct = n_pct;
  s->pub.total_norm = NAN;
  for (j = 0; j < n_pct; j++) {
    s->pct[j] = pct[j];
    snprintf(s->pct_names[j], sizeof s->pct_names[j], "grad_abs_p%g", pct[j]);
  }
  if ((d->param_filter && d->param_filter[0] && !(s->filter = tr__strdup(d->param_filter))) ||
      (s->bins && (!(s->edges = (double *)calloc((size_t)s->bins + 1, sizeof *s->edges)) ||
                   !(s->counts = (int64_t *)calloc((size_t)s->bins, sizeof *s->counts))))) {
    tr__gm_destroy(s);
    return tr__bad(w, "gradient_monitor: out of memory"), TR_ERR_NOMEM;
  }
  memset(&cb, 0, sizeof cb);
  cb.name = "gradient_monitor";
  cb.user = s;
  cb.on_train_start = tr__gm_train_start;
  cb.on_before_optimizer_step = tr__gm_check;
  cb.destroy = tr__gm_destroy;
  return tr__cb_register_when(reg, &cb, 0, tr__gm_due, s, out, w);
}
TR__PUBLIC_OF(tr_gradient_monitor, gm)
/* a 0 written in a spec: refused for exploding_threshold, "never" for vanishing_threshold (the desc's 0: the default) */
static tr_err tr__gm_from_spec(const hk_args *a, tr_gradient_monitor_desc *d, tr__why *w) {
  if (tr__given_zero(a, "exploding_threshold"))
    return tr__bad(w, "gradient_monitor: exploding_threshold=0 would flag every step; give a positive limit, or a negative one for never");
  if (tr__given_zero(a, "vanishing_threshold")) d->vanishing_threshold = -1; /* flags nothing */
  return TR_OK;
}
TR__FACTORY_WITH(gm, tr_gradient_monitor_desc, TR_GRADIENT_MONITOR_PARAMS, tr__gm_from_spec)
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
