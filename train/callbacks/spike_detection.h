/* train/callbacks/spike_detection.h - spike_detection. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_SPIKE_DETECTION_H /* part */
#define TRAIN_SPIKE_DETECTION_H /* part */
#include "../battery.h" /* part */

TR__C_BEGIN /* part */
/* ---- spike_detection (Lightning's SpikeDetection, with a rollback instead of an exception) -------
   A non-finite loss, or one too far above the running window's centre (relative or zscore), or with
   check_grads a non-finite gradient norm, is a spike. Instead of raising it rolls back: every
   every_n_steps-th step it copies the run's training state (tr_run_desc.state) into one buffer; at a spike
   the batch is skipped, the snapshot copied back (global_step with it) and skip_after more batches skipped,
   the data going on: bit for bit a run that skipped those batches. The (max_rollbacks+1)-th spike fails
   the run. Window, counters and the snapshot in checkpoints. Not with a GPU model or under MPI.
   Hand-written loop: tr_run_desc.state, the training batch events (HK_FIRE_FLOW, honour the skips), then
   take the step count from ctx->global_step. docs/callbacks.md has the rules and the cost. */
typedef enum tr_spike_centre { TR_SPIKE_MEAN = 0, TR_SPIKE_MEDIAN } tr_spike_centre;
typedef enum tr_spike_mode { TR_SPIKE_RELATIVE = 0, TR_SPIKE_ZSCORE } tr_spike_mode;
#define TR_SPIKE_DETECTION_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD) */ \
  X(INT_ZERO, int,             window,        "10",       NULL, "good losses in the running window (2..10000)") \
  X(CHOICE,   tr_spike_centre, centre,        "mean",     "mean|median", "the window's centre") \
  X(CHOICE,   tr_spike_mode,   mode,          "relative", "relative|zscore", "relative: a spike is above centre + " \
    "threshold*|centre|; zscore: above centre + threshold*std") \
  X(DOUBLE_ZERO, double,       threshold,     "2",        NULL, "> 0, finite: how far above the centre a spike is") \
  X(INT_ZERO, int64_t,         every_n_steps, "100",      NULL, "snapshot after every n-th optimizer step (>= 1)") \
  X(INT,      int64_t,         skip_after,    "0",         NULL, "batches skipped after a spike (>= 0)") \
  X(INT_ZERO, int,             max_rollbacks, "10",       NULL, "spikes rolled back before one fails the run (0: fail at " \
    "the first, as Lightning; -1: never)") \
  X(TRI,      int,             check_grads,   "true",     NULL, "a non-finite gradient norm is a spike too") \
  X(TRI,      int,             verbose,       "true",     NULL, "say each rollback")
typedef struct tr_spike_detection_desc { TR_SPIKE_DETECTION_PARAMS(TR__FIELD) } tr_spike_detection_desc;
typedef struct tr_spike_detection_state {
  int64_t spikes;               /* spikes found (rolled back, or the one that failed the run) */
  int64_t rollbacks;
  int64_t skipped_batches;      /* batches undone (snapshot to spike) or skipped (skip_after), all rollbacks */
  int64_t batches;              /* training batches seen (on_train_batch_end), from 1 */
  int64_t snapshot_step;        /* ctx->global_step of the snapshot held (-1: none) */
  int64_t snapshot_batch;       /* `batches` when it was taken (after a rollback: the last batch undone or to skip) */
  int64_t skip_left;            /* batches still to skip */
  int64_t last_first, last_last;/* the last rollback's range of batches undone or skipped (`batches`' numbers; 0 0: none) */
  double last_loss, last_centre;/* the last spike's loss (NaN for a gradient) and the window's centre then */
  size_t snapshot_bytes;        /* the snapshot's size */
} tr_spike_detection_state;
TRAIN_API tr_err tr_spike_detection(hk_registry *reg, const tr_spike_detection_desc *d, hk_handle *out);
TRAIN_API const tr_spike_detection_state *tr_spike_detection_get(const hk_registry *reg, hk_handle h);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
/* ---- spike_detection -------------------------------------------------------------------------------- */
typedef struct tr__sd {
  tr_spike_detection_state pub;
  tr_run *run;
  int window, check_grads, verbose, max_rollbacks;
  tr_spike_centre centre;
  tr_spike_mode mode;
  double threshold;
  int64_t every, skip_after;
  double *win, *snap_win, *sorted;   /* the window (a ring), its copy in the snapshot, the median's scratch */
  int n, pos, snap_n, snap_pos;
  unsigned char *snap;               /* the one snapshot (pub.snapshot_bytes) */
  int from_ckpt;                     /* snap came from a checkpoint: on_train_start keeps it */
  int64_t last_step;                 /* ctx->global_step at the last batch end (a snapshot only after a step) */
  int pending, skipping, saw_loss;   /* this batch: a spike to roll back, skipped by us, its loss checked */
  double loss;
  char why[160];
} tr__sd;
static void tr__sd_destroy(void *user) {
  tr__sd *s = (tr__sd *)user;
  free(s->win);
  free(s->snap);
  free(s);
}
static void tr__sd_regions(const tr__sd *s, const tr_region **r, int *n) {
  *r = s->run->desc.state;
  *n = s->run->desc.n_state;
}
static size_t tr__sd_size(const tr__sd *s) {
  const tr_region *r;
  int n, i;
  size_t total = 0;
  tr__sd_regions(s, &r, &n);
  for (i = 0; i < n; i++) total += r[i].bytes;
  return total;
}
/* copy the state into the snapshot (save) or back (restore): one memcpy per region */
static void tr__sd_copy(tr__sd *s, int restore) {
  const tr_region *r;
  int n, i;
  size_t at = 0;
  tr__sd_regions(s, &r, &n);
  for (i = 0; i < n; i++) {
    if (restore) memcpy(r[i].data, s->snap + at, r[i].bytes);
    else memcpy(s->snap + at, r[i].data, r[i].bytes);
    at += r[i].bytes;
  }
}
static void tr__sd_take(tr__sd *s, const hk_ctx *ctx) {
  tr__sd_copy(s, 0);
  memcpy(s->snap_win, s->win, (size_t)s->window * sizeof *s->win);
  s->snap_n = s->n;
  s->snap_pos = s->pos;
  s->pub.snapshot_step = ctx->global_step;
  s->pub.snapshot_batch = s->pub.batches;
}
/* The window's centre, and its spread for zscore. Recomputed from the window each time: the same bits
   whatever came before (exact resume). */
static double tr__sd_centre(tr__sd *s, double *spread) {
  double sum = 0, c, var = 0;
  int i, j;
  for (i = 0; i < s->n; i++) sum += s->win[i];
  c = sum / s->n;
  if (s->centre == TR_SPIKE_MEDIAN) {
    for (i = 0; i < s->n; i++) { /* insertion sort of a copy: the window is small */
      double x = s->win[i];
      for (j = i; j > 0 && s->sorted[j - 1] > x; j--) s->sorted[j] = s->sorted[j - 1];
      s->sorted[j] = x;
    }
    c = s->n % 2 ? s->sorted[s->n / 2] : 0.5 * (s->sorted[s->n / 2 - 1] + s->sorted[s->n / 2]);
  }
  if (s->mode == TR_SPIKE_ZSCORE) {
    double mean = sum / s->n;
    for (i = 0; i < s->n; i++) var += (s->win[i] - mean) * (s->win[i] - mean);
    *spread = sqrt(var / s->n);
  } else *spread = fabs(c);
  return c;
}
static hk_signal tr__sd_train_start(hk_ctx *ctx, void *user) {
  tr__sd *s = (tr__sd *)user;
  size_t size = tr__sd_size(s);
  s->last_step = ctx->global_step;
  s->pending = s->skipping = s->saw_loss = 0;
  if (!size)
    return hk_fail(ctx, "the run has no training state to snapshot: give tr_run_desc.state (the "
                   "parameters, the optimizer state and its step count) in a loop of your own");
  if (ctx->params && ctx->n_tensors > 0 && ctx->params[0].on_device)
    return hk_fail(ctx, "the model is on the GPU; its snapshot is a host copy (leave spike_detection out, or train on the CPU)");
  if (ctx->world_size > 1)
    return hk_fail(ctx, "%d processes: each would decide alone and the ranks would part; use it with one "
                   "process", ctx->world_size);
  if (s->from_ckpt && s->pub.snapshot_bytes == size) { s->from_ckpt = 0; return HK_CONTINUE; } /* the checkpoint's snapshot */
  if (s->from_ckpt)
    tr__run_say(s->run, ctx, "spike_detection", "the checkpoint's snapshot has %zu bytes, the state %zu: a new snapshot is "
                "taken at step %lld", s->pub.snapshot_bytes, size, (long long)ctx->global_step);
  s->from_ckpt = 0;
  if (s->pub.snapshot_bytes != size) {
    unsigned char *p = (unsigned char *)realloc(s->snap, size);
    if (!p) return hk_fail(ctx, "out of memory for a %zu-byte snapshot", size);
    s->snap = p;
    s->pub.snapshot_bytes = size;
  }
  tr__sd_take(s, ctx);
  return HK_CONTINUE;
}
static hk_signal tr__sd_batch_start(hk_ctx *ctx, void *user) {
  tr__sd *s = (tr__sd *)user;
  (void)ctx;
  s->pending = s->saw_loss = 0;
  s->skipping = s->pub.skip_left > 0;
  if (!s->skipping) return HK_CONTINUE;
  s->pub.skip_left--;
  return HK_SKIP_BATCH;
}
static hk_signal tr__sd_spike(tr__sd *s, const hk_ctx *ctx, double centre) {
  s->pending = 1;
  s->pub.spikes++;
  s->pub.last_loss = s->loss;
  s->pub.last_centre = centre;
  (void)ctx;
  return HK_CONTINUE;
}
static hk_signal tr__sd_loss(hk_ctx *ctx, void *user) {
  tr__sd *s = (tr__sd *)user;
  double spread = 0, c = NAN;
  if (s->skipping) return HK_CONTINUE;
  s->loss = ctx->loss;
  if (ctx->params && ctx->n_tensors > 0 && ctx->params[0].on_device) (void)hk_metric_get(ctx, "train/loss", &s->loss);
  s->saw_loss = 1;
  if (!hk_is_finite(s->loss)) snprintf(s->why, sizeof s->why, "the loss is %s", tr__nonfinite_name(s->loss));
  else if (s->n < s->window) return HK_CONTINUE; /* the window fills first */
  else {
    c = tr__sd_centre(s, &spread);
    if (!(s->loss > c + s->threshold * spread)) return HK_CONTINUE;
    snprintf(s->why, sizeof s->why, "the loss %.6g is above %.6g (%s %.6g + %g x %.6g)", s->loss, c + s->threshold * spread,
             s->centre == TR_SPIKE_MEDIAN ? "median" : "mean", c, s->threshold, spread);
  }
  tr__sd_spike(s, ctx, c);
  return HK_SKIP_BATCH; /* no backward, no step for it */
}
static hk_signal tr__sd_grads(hk_ctx *ctx, void *user) {
  tr__sd *s = (tr__sd *)user;
  if (s->skipping || s->pending || !ctx->grads) return HK_CONTINUE;
  if (tr__views_data(ctx, ctx->grads, "ctx->grads")) return HK_FAIL; /* a late buffer never set: said, not a crash */
  if (hk_is_finite(hk_grad_norm(ctx))) return HK_CONTINUE;
  snprintf(s->why, sizeof s->why, "the gradient norm is not finite");
  s->loss = NAN;
  tr__sd_spike(s, ctx, NAN);
  return HK_SKIP_STEP;
}
static hk_signal tr__sd_batch_end(hk_ctx *ctx, void *user) {
  tr__sd *s = (tr__sd *)user;
  tr_run *run = s->run;
  int64_t undone;
  s->pub.batches++;
  if (s->skipping) { s->pub.skipped_batches++; s->skipping = 0; return HK_CONTINUE; }
  if (!s->pending) {
    if (s->saw_loss) { /* a good loss joins the window */
      s->win[s->pos] = s->loss;
      s->pos = (s->pos + 1) % s->window;
      if (s->n < s->window) s->n++;
    }
    if (ctx->global_step != s->last_step && ctx->global_step % s->every == 0 && s->snap) tr__sd_take(s, ctx);
    s->last_step = ctx->global_step;
    return HK_CONTINUE;
  }
  s->pending = 0;
  if (s->max_rollbacks >= 0 && s->pub.rollbacks >= s->max_rollbacks)
    return hk_fail(ctx, "%s at step %lld (batch %lld of the epoch); %lld rollback%s already (max_rollbacks %d)",
                   s->why, (long long)ctx->global_step + 1, (long long)ctx->batch_idx, (long long)s->pub.rollbacks,
                   s->pub.rollbacks == 1 ? "" : "s", s->max_rollbacks);
  if (!s->snap) return hk_fail(ctx, "%s, and there is no snapshot (on_train_start did not fire)", s->why);
  tr__sd_copy(s, 1);
  memcpy(s->win, s->snap_win, (size_t)s->window * sizeof *s->win);
  s->n = s->snap_n;
  s->pos = s->snap_pos;
  undone = s->pub.batches - s->pub.snapshot_batch;
  s->pub.rollbacks++;
  s->pub.skipped_batches += undone;
  s->pub.skip_left = s->skip_after;
  s->pub.last_first = s->pub.snapshot_batch + 1;
  s->pub.last_last = s->pub.batches + s->skip_after;
  if (s->verbose)
    tr__run_say(run, ctx, "spike_detection", "%s at step %lld: rolled back to step %lld, %lld batch%s undone, %lld more to skip",
                s->why, (long long)ctx->global_step + 1, (long long)s->pub.snapshot_step, (long long)undone,
                undone == 1 ? "" : "es", (long long)s->skip_after);
  ctx->global_step = s->last_step = s->pub.snapshot_step;
  s->pub.snapshot_batch = s->pub.batches + s->skip_after; /* the state is the snapshot's again, as of the skip's end */
  hk_grads_changed(ctx);
  if (run->desc.rolled_back) run->desc.rolled_back(run->desc.model_user, ctx);
  return HK_CONTINUE;
}
static int tr__sd_save(void *user, hk_bytes *out) {
  tr__sd *s = (tr__sd *)user;
  int i;
  tr__put_u64(out, 1);
  tr__put_i64(out, s->pub.spikes);
  tr__put_i64(out, s->pub.rollbacks);
  tr__put_i64(out, s->pub.skipped_batches);
  tr__put_i64(out, s->pub.batches);
  tr__put_i64(out, s->pub.snapshot_step + 1);
  tr__put_i64(out, s->pub.snapshot_batch);
  tr__put_i64(out, s->pub.skip_left);
  tr__put_i64(out, s->pub.last_first);
  tr__put_i64(out, s->pub.last_last);
  tr__put_f64(out, s->pub.last_loss);
  tr__put_f64(out, s->pub.last_centre);
  tr__put_u64(out, (uint64_t)s->window);
  tr__put_u64(out, (uint64_t)s->n);
  tr__put_u64(out, (uint64_t)s->pos);
  for (i = 0; i < s->window; i++) tr__put_f64(out, s->win[i]);
  tr__put_u64(out, (uint64_t)s->snap_n);
  tr__put_u64(out, (uint64_t)s->snap_pos);
  for (i = 0; i < s->window; i++) tr__put_f64(out, s->snap_win[i]);
  tr__put_u64(out, s->snap ? (uint64_t)s->pub.snapshot_bytes : 0);
  if (s->snap) hk_bytes_put(out, s->snap, s->pub.snapshot_bytes);
  return out->failed ? -1 : 0;
}
static int tr__sd_get_ring(hk_reader *in, const tr__sd *s, double *win, int *n, int *pos, const char *what) {
  uint64_t un, upos;
  int i;
  if (tr__get_u64(in, &un) || tr__get_u64(in, &upos)) return hk_reject(in, "truncated at the %s", what);
  if (un > (uint64_t)s->window || upos >= (uint64_t)s->window || (un < (uint64_t)s->window && upos != un))
    return hk_reject(in, "the %s holds %llu losses at %llu; the window has %d places", what, (unsigned long long)un,
                     (unsigned long long)upos, s->window);
  for (i = 0; i < s->window; i++) {
    if (tr__get_f64(in, &win[i])) return hk_reject(in, "truncated in the %s", what);
    if ((uint64_t)i < un && !hk_is_finite(win[i])) return hk_reject(in, "the %s holds a loss that is not finite", what);
  }
  *n = (int)un;
  *pos = (int)upos;
  return 0;
}
static int tr__sd_load(void *user, hk_reader *in) {
  tr__sd *s = (tr__sd *)user;
  tr_spike_detection_state p = s->pub;
  uint64_t w, bytes;
  int64_t snap1;
  double *win = NULL;
  int n, pos, sn, spos;
  unsigned char *snap = NULL;
  if (tr__get_version(in, 1) || tr__get_count(in, "spikes", 0, &p.spikes) || tr__get_count(in, "rollbacks", 0, &p.rollbacks) ||
      tr__get_count(in, "skipped_batches", 0, &p.skipped_batches) || tr__get_count(in, "batches", 0, &p.batches) ||
      tr__get_count(in, "snapshot_step + 1", 0, &snap1) || tr__get_count(in, "snapshot_batch", 0, &p.snapshot_batch) ||
      tr__get_count(in, "skip_left", 0, &p.skip_left) || tr__get_count(in, "last_first", 0, &p.last_first) ||
      tr__get_count(in, "last_last", 0, &p.last_last))
    return -1;
  if (p.rollbacks > p.spikes) return hk_reject(in, "rollbacks (%lld) is more than spikes (%lld)", (long long)p.rollbacks, (long long)p.spikes);
  if (p.snapshot_batch > p.batches + p.skip_left)
    return hk_reject(in, "snapshot_batch (%lld) is after batches + skip_left (%lld)", (long long)p.snapshot_batch, (long long)(p.batches + p.skip_left));
  if (tr__get_f64(in, &p.last_loss) || tr__get_f64(in, &p.last_centre) || tr__get_u64(in, &w)) return hk_reject(in, "truncated after the counters");
  if (w != (uint64_t)s->window) return hk_reject(in, "window is %llu; this spike_detection's is %d", (unsigned long long)w, s->window);
  win = (double *)malloc(2 * (size_t)s->window * sizeof *win);
  if (!win) return hk_reject(in, "out of memory");
  if (tr__sd_get_ring(in, s, win, &n, &pos, "window") || tr__sd_get_ring(in, s, win + s->window, &sn, &spos, "snapshot's window")) {
    free(win);
    return -1;
  }
  if (tr__get_u64(in, &bytes) || bytes > in->len - in->pos) { free(win); return hk_reject(in, "the snapshot is truncated"); }
  if (bytes && !(snap = (unsigned char *)malloc((size_t)bytes))) { free(win); return hk_reject(in, "out of memory for the snapshot"); }
  if ((bytes && hk_read(in, snap, (size_t)bytes)) || tr__get_end(in)) { free(win); free(snap); return -1; }
  memcpy(s->win, win, (size_t)s->window * sizeof *win);
  memcpy(s->snap_win, win + s->window, (size_t)s->window * sizeof *win);
  free(win);
  s->n = n; s->pos = pos; s->snap_n = sn; s->snap_pos = spos;
  free(s->snap);
  s->snap = snap;
  p.snapshot_step = snap1 - 1;
  p.snapshot_bytes = (size_t)bytes;
  s->pub = p;
  s->from_ckpt = snap != NULL;
  return 0;
}
static tr_err tr__sd_make(hk_registry *reg, const tr_spike_detection_desc *d, hk_handle *out, tr__why *w) {
  tr__sd *s;
  hk_callback cb;
  int window;
  double threshold;
  int64_t every;
  if (!d) return tr__bad(w, "spike_detection: desc is NULL");
  window = tr__zero_int(d->window, 10);
  if (window < 2 || window > 10000) return tr__bad(w, "spike_detection: window must be in 2..10000, got %d", window);
  if (d->centre != TR_SPIKE_MEAN && d->centre != TR_SPIKE_MEDIAN)
    return tr__bad(w, "spike_detection: centre %d is not valid (mean or median)", (int)d->centre);
  if (d->mode != TR_SPIKE_RELATIVE && d->mode != TR_SPIKE_ZSCORE)
    return tr__bad(w, "spike_detection: mode %d is not valid (relative or zscore)", (int)d->mode);
  threshold = tr__zero_double(d->threshold, 2);
  every = tr__zero_int64(d->every_n_steps, 100);
  if (!hk_is_finite(threshold) || threshold <= 0)
    return tr__bad(w, "spike_detection: threshold must be finite and > 0, got %g", threshold);
  if (every < 1) return tr__bad(w, "spike_detection: every_n_steps must be >= 1, got %lld", (long long)every);
  if (d->skip_after < 0 || d->skip_after > TR__MAX_COUNT)
    return tr__bad(w, "spike_detection: skip_after must be in 0..2^53, got %lld", (long long)d->skip_after);
  if (d->max_rollbacks < -1 && d->max_rollbacks != TR_ZERO)
    return tr__bad(w, "spike_detection: max_rollbacks must be >= 0, or -1 for no limit, got %d", d->max_rollbacks);
  s = (tr__sd *)calloc(1, sizeof *s);
  if (!s) return tr__bad(w, "spike_detection: out of memory"), TR_ERR_NOMEM;
  s->window = window;
  s->win = (double *)calloc(3 * (size_t)window, sizeof *s->win);
  if (!s->win) { free(s); return tr__bad(w, "spike_detection: out of memory"), TR_ERR_NOMEM; }
  s->snap_win = s->win + window;
  s->sorted = s->win + 2 * window;
  s->run = tr_run_get(reg);
  s->centre = d->centre;
  s->mode = d->mode;
  s->threshold = threshold;
  s->every = every;
  s->skip_after = d->skip_after;
  s->max_rollbacks = tr__zero_int(d->max_rollbacks, 10);
  s->check_grads = tr__flag(d->check_grads, 1);
  s->verbose = tr__flag(d->verbose, 1);
  s->pub.snapshot_step = -1;
  s->pub.last_loss = s->pub.last_centre = NAN;
  memset(&cb, 0, sizeof cb);
  cb.name = "spike_detection";
  cb.user = s;
  cb.on_train_start = tr__sd_train_start;
  cb.on_train_batch_start = tr__sd_batch_start;
  cb.on_before_backward = tr__sd_loss;
  if (s->check_grads) cb.on_before_optimizer_step = tr__sd_grads;
  cb.on_train_batch_end = tr__sd_batch_end;
  cb.save_state = tr__sd_save;
  cb.load_state = tr__sd_load;
  cb.destroy = tr__sd_destroy;
  return tr__cb_register(reg, &cb, -15, out, w); /* before the monitors (a rolled-back batch is not monitored), after nan_guard's... */
}
TR__PUBLIC_OF(tr_spike_detection, sd)
TR__FACTORY_OF(sd, tr_spike_detection_desc, TR_SPIKE_DETECTION_PARAMS)
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
