/* train/callbacks/profiler.h - profiler. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_PROFILER_H /* part */
#define TRAIN_PROFILER_H /* part */
#include "../battery.h" /* part */

TR__C_BEGIN /* part */
/* ---- profiler (Lightning's SimpleProfiler; Ignite's HandlersTimeProfiler; Keras's slow-callback warning) --
   Times every hook and every event of the registry with hooks.h's hk_profile (made: profiling on;
   removed: off again; a registry without a profiler pays nothing), and the loop's own phases, measured
   between the events that bracket them (hk_profile_gap: the time from the end of one dispatch to the
   start of the next): data = before on_train_batch_start (the batch being fetched), forward = from
   on_train_batch_start to on_before_zero_grad / on_before_backward, backward = to on_after_backward and
   on to on_before_optimizer_step (a data-parallel gradient sum included), optimizer = zero_grad (from
   on_before_zero_grad to on_before_backward), clipping and the update (to on_gradient_clip and
   on_after_optimizer_step). A training step is data + the time from on_train_batch_start to
   on_train_batch_end. Counts start at each setup; at teardown (on success and on failure: a failed run's
   table says where the time went) rank 0 prints the table: the phases, then every event with a hook
   (calls, mean, max, total, share of the run), each followed by its hooks. With log_metrics every
   training record carries profiler/step_ms, profiler/<phase>_ms (mean per step) and
   profiler/<event>_ms (mean per dispatch), each over the steps since the previous record. slow_fraction:
   after 5 steps, at each training record and at on_train_end, a hook whose mean time per call at a
   training batch event (on_train_batch_start .. on_train_batch_end) exceeds that fraction of the mean
   step gets a one-line warning, once per hook. Cost while registered: each hook call and dispatch takes
   two clock reads and leaves hooks.h's fast loop (make bench, "profile" rows); its own hooks show in
   the table as "profiler". Differences from Lightning: hooks of every tier and the loop's phases in one
   table, per hook and per event (Lightning's SimpleProfiler keeps every duration in a list, memory
   growing with the steps; here a few counters); no file output (give out). Hand-written loop: fire the
   training batch events around your work (fetch the batch before on_train_batch_start), setup and
   teardown around the run (tr_run_start and tr_run_finish do). */
#define TR_PROFILER_PHASES(X) X(TR_PHASE_DATA, "data") X(TR_PHASE_FORWARD, "forward") X(TR_PHASE_BACKWARD, "backward") \
  X(TR_PHASE_OPTIMIZER, "optimizer")
typedef enum tr_phase {
#define TR__X(sym, name) sym,
  TR_PROFILER_PHASES(TR__X)
#undef TR__X
  TR_PHASE_COUNT
} tr_phase;
#define TR_PROFILER_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD) */ \
  X(DOUBLE, double, slow_fraction, "0.5",  NULL, "warn once about a hook whose mean time per call at a training batch " \
    "event exceeds this fraction of the mean step (negative: never)") \
  X(TRI,    int,    table,         "true", NULL, "print the table at teardown (rank 0)") \
  X(TRI,    int,    log_metrics,   "true", NULL, "add profiler/step_ms, profiler/<phase>_ms and profiler/<event>_ms to training records") \
  X(C_ONLY, FILE *, out,           NULL,   NULL, "where the table and warnings go; NULL = the run's log (tr_run_desc.log), else stderr")
typedef struct tr_profiler_desc { TR_PROFILER_PARAMS(TR__FIELD) } tr_profiler_desc;
typedef struct tr_profiler_state {
  int64_t steps;                /* training steps timed since setup */
  double step_time;             /* their total seconds (mean: step_time / steps) */
  double phase_time[TR_PHASE_COUNT]; /* seconds per phase since setup */
  int64_t phase_calls[TR_PHASE_COUNT];
  double run_time;              /* seconds from setup to the last teardown (or to now, in a run) */
  int64_t warnings;             /* slow-hook warnings said */
} tr_profiler_state;
TRAIN_API tr_err tr_profiler(hk_registry *reg, const tr_profiler_desc *d, hk_handle *out);
TRAIN_API const tr_profiler_state *tr_profiler_get(const hk_registry *reg, hk_handle h);
TRAIN_API const char *tr_phase_name(tr_phase p);
/* The table now (what teardown prints) to out (NULL: the profiler's out); -1 if h is not a profiler. */
TRAIN_API int tr_profiler_print(hk_registry *reg, hk_handle h, FILE *out);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
/* ---- profiler ------------------------------------------------------------------------------------- */
TRAIN_API const char *tr_phase_name(tr_phase p) {
  static const char *const names[TR_PHASE_COUNT] = {
#define TR__X(sym, name) name,
    TR_PROFILER_PHASES(TR__X)
#undef TR__X
  };
  return (unsigned)p < TR_PHASE_COUNT ? names[p] : "unknown";
}

typedef struct tr__prof {
  tr_profiler_state pub;
  tr_run *run;
  hk_registry *reg;
  hk_handle self;               /* its own handle: no warning about itself */
  double slow;                  /* slow_fraction; < 0 never */
  int table, log_metrics;
  FILE *out;
  double t_setup, t_step;       /* hk_clock at setup; the running step's start */
  int in_step;
  double be_seen;               /* on_train_batch_end's dispatch time already in step_time (it runs first there:
                                   a step's own on_train_batch_end is added at the next step, record or teardown) */
  /* at the last training record: what the interval metrics subtract */
  int64_t rec_steps, rec_phase_calls[TR_PHASE_COUNT];
  double rec_step_time, rec_phase_time[TR_PHASE_COUNT];
  int64_t rec_calls[HK_MAX_EVENTS];
  double rec_total[HK_MAX_EVENTS];
  hk_handle *warned;            /* hooks warned about (grown at a check, never in a step) */
  int n_warned, cap_warned;
} tr__prof;

static void tr__prof_destroy(void *user) {
  tr__prof *s = (tr__prof *)user;
  if (!s) return;
  hk_profile(s->reg, 0); /* a registry without a profiler pays nothing again */
  free(s->warned);
  free(s);
}
static FILE *tr__prof_file(const tr__prof *s, FILE *f) {
  return f ? f : s->out ? s->out : s->run && s->run->desc.log ? s->run->desc.log : stderr;
}
static void tr__prof_zero(tr__prof *s) {
  memset(&s->pub, 0, sizeof s->pub);
  s->rec_steps = 0;
  s->rec_step_time = 0;
  memset(s->rec_phase_calls, 0, sizeof s->rec_phase_calls);
  memset(s->rec_phase_time, 0, sizeof s->rec_phase_time);
  memset(s->rec_calls, 0, sizeof s->rec_calls);
  memset(s->rec_total, 0, sizeof s->rec_total);
  s->in_step = 0;
  s->be_seen = 0;
}
static void tr__prof_settle(tr__prof *s, hk_registry *reg) {
  hk_prof p;
  if (hk_profile_event(reg, HK_ON_TRAIN_BATCH_END, &p) != 0) return;
  s->pub.step_time += p.total - s->be_seen;
  s->be_seen = p.total;
}
static hk_signal tr__prof_setup(hk_ctx *ctx, void *user) {
  tr__prof *s = (tr__prof *)user;
  hk_profile_reset(ctx->reg);
  tr__prof_zero(s);
  s->t_setup = hk_clock();
  return HK_CONTINUE;
}
static void tr__prof_phase(tr__prof *s, tr_phase p, double dt) {
  s->pub.phase_time[p] += dt;
  s->pub.phase_calls[p]++;
}
/* The loop's work before this event (hk_profile_gap), put in the phase it belongs to. */
static hk_signal tr__prof_gap(hk_ctx *ctx, void *user) {
  tr__prof *s = (tr__prof *)user;
  int prev;
  double gap = hk_profile_gap(ctx->reg, &prev);
  if (gap < 0) return HK_CONTINUE;
  switch (ctx->event) {
  case HK_ON_TRAIN_BATCH_START:
    tr__prof_phase(s, TR_PHASE_DATA, gap);
    s->t_step = hk_clock() - gap;
    s->in_step = 1;
    break;
  case HK_ON_BEFORE_ZERO_GRAD: tr__prof_phase(s, TR_PHASE_FORWARD, gap); break;
  case HK_ON_BEFORE_BACKWARD:
    tr__prof_phase(s, prev == HK_ON_BEFORE_ZERO_GRAD ? TR_PHASE_OPTIMIZER : TR_PHASE_FORWARD, gap);
    break;
  case HK_ON_AFTER_BACKWARD: case HK_ON_BEFORE_OPTIMIZER_STEP: tr__prof_phase(s, TR_PHASE_BACKWARD, gap); break;
  case HK_ON_GRADIENT_CLIP: case HK_ON_AFTER_OPTIMIZER_STEP: tr__prof_phase(s, TR_PHASE_OPTIMIZER, gap); break;
  default: break;
  }
  return HK_CONTINUE;
}
static hk_signal tr__prof_batch_end(hk_ctx *ctx, void *user) {
  tr__prof *s = (tr__prof *)user;
  if (!s->in_step) return HK_CONTINUE;
  s->in_step = 0;
  s->pub.steps++;
  s->pub.step_time += hk_clock() - s->t_step;
  tr__prof_settle(s, ctx->reg);
  return HK_CONTINUE;
}

/* The training batch events: where a hook's time is a step's. */
static int tr__prof_batch_event(int e) {
  return e == HK_ON_TRAIN_BATCH_START || e == HK_ON_BEFORE_ZERO_GRAD || e == HK_ON_BEFORE_BACKWARD ||
         e == HK_ON_AFTER_BACKWARD || e == HK_ON_BEFORE_OPTIMIZER_STEP || e == HK_ON_GRADIENT_CLIP ||
         e == HK_ON_AFTER_OPTIMIZER_STEP || e == HK_ON_TRAIN_BATCH_END;
}
static void tr__prof_check(tr__prof *s, hk_ctx *ctx) {
  double step;
  int e, i, k;
  hk_prof p;
  if (s->slow < 0 || s->pub.steps < 5) return;
  step = s->pub.step_time / (double)s->pub.steps;
  for (e = 0; e < HK_EVENT_COUNT; e++) {
    if (!tr__prof_batch_event(e)) continue;
    for (i = 0; hk_profile_hook(ctx->reg, e, i, &p) == 0; i++) {
      double mean = p.calls > 0 ? p.total / (double)p.calls : 0;
      if (p.handle == s->self || p.calls < 5 || !(mean > s->slow * step)) continue;
      for (k = 0; k < s->n_warned && s->warned[k] != p.handle; k++) {}
      if (k < s->n_warned) continue;
      if (s->n_warned == s->cap_warned) {
        int cap = s->cap_warned ? 2 * s->cap_warned : 8;
        hk_handle *q = (hk_handle *)realloc(s->warned, (size_t)cap * sizeof *q);
        if (!q) return;
        s->warned = q;
        s->cap_warned = cap;
      }
      s->warned[s->n_warned++] = p.handle;
      s->pub.warnings++;
      if (ctx->rank == 0) {
        FILE *f = tr__prof_file(s, NULL);
        fprintf(f, "profiler: warning: hook '%s' takes %.3f ms per call at %s, %.0f%% of a training step (%.3f ms mean; "
                "slow_fraction=%g)\n", p.name, 1e3 * mean, hk_event_name(ctx->reg, e), 100 * mean / step, 1e3 * step, s->slow);
        fflush(f);
      }
    }
  }
}
static hk_signal tr__prof_train_end(hk_ctx *ctx, void *user) {
  tr__prof_settle((tr__prof *)user, ctx->reg);
  tr__prof_check((tr__prof *)user, ctx);
  return HK_CONTINUE;
}
/* A training record: the interval's means, then the slow-hook check. */
static hk_signal tr__prof_on_log(hk_ctx *ctx, void *user) {
  tr__prof *s = (tr__prof *)user;
  tr_log_record *r = tr_log_current(ctx);
  char name[96];
  int64_t steps;
  int e, k;
  hk_prof p;
  if (!r || !r->stage || strcmp(r->stage, "train")) return HK_CONTINUE;
  tr__prof_settle(s, ctx->reg);
  steps = s->pub.steps - s->rec_steps;
  if (s->log_metrics && steps > 0) {
    (void)tr_log_set(r, "profiler/step_ms", 1e3 * (s->pub.step_time - s->rec_step_time) / (double)steps);
    for (k = 0; k < TR_PHASE_COUNT; k++) {
      snprintf(name, sizeof name, "profiler/%s_ms", tr_phase_name((tr_phase)k));
      if (s->pub.phase_calls[k] > s->rec_phase_calls[k])
        (void)tr_log_set(r, name, 1e3 * (s->pub.phase_time[k] - s->rec_phase_time[k]) / (double)steps);
    }
  }
  for (e = 0; e < HK_MAX_EVENTS && hk_profile_event(ctx->reg, e, &p) == 0; e++) {
    if (s->log_metrics && steps > 0 && p.calls > s->rec_calls[e]) {
      snprintf(name, sizeof name, "profiler/%s_ms", p.name);
      (void)tr_log_set(r, name, 1e3 * (p.total - s->rec_total[e]) / (double)(p.calls - s->rec_calls[e]));
    }
    s->rec_calls[e] = p.calls;
    s->rec_total[e] = p.total;
  }
  s->rec_steps = s->pub.steps;
  s->rec_step_time = s->pub.step_time;
  memcpy(s->rec_phase_calls, s->pub.phase_calls, sizeof s->rec_phase_calls);
  memcpy(s->rec_phase_time, s->pub.phase_time, sizeof s->rec_phase_time);
  tr__prof_check(s, ctx);
  return HK_CONTINUE;
}

typedef struct { int event; double total; } tr__prof_row;
static int tr__prof_row_cmp(const void *a, const void *b) {
  double x = ((const tr__prof_row *)a)->total, y = ((const tr__prof_row *)b)->total;
  return x > y ? -1 : x < y ? 1 : ((const tr__prof_row *)a)->event - ((const tr__prof_row *)b)->event;
}
static void tr__prof_line(FILE *f, int indent, const char *kind, const char *name, int64_t calls, double total, double max,
                          double run) {
  fprintf(f, "%*s%-*s %-*.*s %10lld %11.4f ", indent, "", 10 - indent, kind, 36, 36, name, (long long)calls,
          calls > 0 ? 1e3 * total / (double)calls : 0.0);
  if (max == max) fprintf(f, "%11.4f", 1e3 * max); /* straight to the stream: no buffer to outgrow */
  else fprintf(f, "%11s", "-");                    /* phases keep no maximum */
  fprintf(f, " %10.4f %6.1f%%\n", total, run > 0 ? 100 * total / run : 0.0);
}
static void tr__prof_table(tr__prof *s, hk_registry *reg, FILE *f, const char *stage) {
  tr__prof_row rows[HK_MAX_EVENTS];
  int n = 0, e, i, k;
  hk_prof p;
  double run = s->pub.run_time;
  for (e = 0; e < HK_MAX_EVENTS && hk_profile_event(reg, e, &p) == 0; e++)
    if (p.calls > 0) { rows[n].event = e; rows[n].total = p.total; n++; }
  qsort(rows, (size_t)n, sizeof rows[0], tr__prof_row_cmp);
  fprintf(f, "profiler: %s, %.4f s, %lld training steps, %.4f ms per step\n", stage, run, (long long)s->pub.steps,
          s->pub.steps ? 1e3 * s->pub.step_time / (double)s->pub.steps : 0.0);
  fprintf(f, "%-10s %-36s %10s %11s %11s %10s %7s\n", "kind", "name", "calls", "mean ms", "max ms", "total s", "share");
  for (k = 0; k < TR_PHASE_COUNT; k++)
    if (s->pub.phase_calls[k])
      tr__prof_line(f, 0, "phase", tr_phase_name((tr_phase)k), s->pub.phase_calls[k], s->pub.phase_time[k], NAN, run);
  for (k = 0; k < n; k++) {
    hk_profile_event(reg, rows[k].event, &p);
    tr__prof_line(f, 0, "event", p.name, p.calls, p.total, p.max, run);
    for (i = 0; hk_profile_hook(reg, rows[k].event, i, &p) == 0; i++)
      tr__prof_line(f, 2, "hook", p.name, p.calls, p.total, p.max, run);
  }
  fflush(f);
}
static hk_signal tr__prof_teardown(hk_ctx *ctx, void *user) {
  tr__prof *s = (tr__prof *)user;
  s->pub.run_time = hk_clock() - s->t_setup;
  tr__prof_settle(s, ctx->reg);
  if (s->table && ctx->rank == 0) tr__prof_table(s, ctx->reg, tr__prof_file(s, NULL), hk_stage_name(ctx->stage));
  return HK_CONTINUE;
}

static tr_err tr__prof_make(hk_registry *reg, const tr_profiler_desc *d, hk_handle *out, tr__why *w) {
  tr__prof *s;
  hk_callback cb;
  hk_handle h = 0;
  tr_err e;
  if (!d) return tr__bad(w, "profiler: desc is NULL");
  if (!hk_is_finite(d->slow_fraction)) return tr__bad(w, "profiler: slow_fraction must be a finite number (> 0; negative: never warn), got %g", d->slow_fraction);
  if (!tr__tri_ok(d->table) || !tr__tri_ok(d->log_metrics))
    return tr__bad(w, "profiler: table and log_metrics take TR_YES, TR_NO or 0 (the default), got %d and %d", d->table, d->log_metrics);
  s = (tr__prof *)calloc(1, sizeof *s);
  if (!s) return tr__bad(w, "profiler: out of memory"), TR_ERR_NOMEM;
  s->run = tr_run_get(reg);
  s->reg = reg;
  s->slow = d->slow_fraction == 0 ? 0.5 : d->slow_fraction;
  s->table = tr__flag(d->table, 1);
  s->log_metrics = tr__flag(d->log_metrics, 1);
  s->out = d->out;
  s->t_setup = hk_clock();
  memset(&cb, 0, sizeof cb);
  cb.name = "profiler";
  cb.user = s;
  cb.setup = tr__prof_setup;
  cb.on_train_batch_start = tr__prof_gap;
  cb.on_before_zero_grad = tr__prof_gap;
  cb.on_before_backward = tr__prof_gap;
  cb.on_after_backward = tr__prof_gap;
  cb.on_before_optimizer_step = tr__prof_gap;
  cb.on_gradient_clip = tr__prof_gap;
  cb.on_after_optimizer_step = tr__prof_gap;
  cb.on_train_batch_end = tr__prof_batch_end;
  cb.on_train_end = tr__prof_train_end;
  cb.on_log = tr__prof_on_log;
  cb.teardown = tr__prof_teardown;
  cb.destroy = tr__prof_destroy;
  s->reg = NULL; /* not profiling yet: a refused registration must not turn it off */
  if ((e = tr__cb_register(reg, &cb, -1000, &h, w)) != TR_OK) return e;
  s->reg = reg;
  s->self = h;
  hk_profile(reg, 1);
  if (out) *out = h;
  return TR_OK;
}
TRAIN_API tr_err tr_profiler(hk_registry *reg, const tr_profiler_desc *d, hk_handle *out) {
  tr__why w;
  if (!reg) return TR_ERR_INVALID;
  return tr__cb_result(reg, tr__prof_make(reg, d, out, &w), &w);
}
static tr__prof *tr__prof_of(const hk_registry *reg, hk_handle h) {
  const hk_callback *cb = hk_callback_get(reg, h);
  return cb && cb->destroy == tr__prof_destroy ? (tr__prof *)cb->user : NULL;
}
TRAIN_API const tr_profiler_state *tr_profiler_get(const hk_registry *reg, hk_handle h) {
  tr__prof *s = tr__prof_of(reg, h);
  return s ? &s->pub : NULL;
}
TRAIN_API int tr_profiler_print(hk_registry *reg, hk_handle h, FILE *out) {
  tr__prof *s = tr__prof_of(reg, h);
  if (!s) return -1;
  if (s->run && s->run->running) s->pub.run_time = hk_clock() - s->t_setup;
  tr__prof_table(s, reg, tr__prof_file(s, out), "now");
  return 0;
}
/* slow_fraction=0 written in a spec is refused (the desc's 0: the default) */
static tr_err tr__prof_from_spec(const hk_args *a, tr_profiler_desc *d, tr__why *w) {
  (void)d;
  return tr__given_zero(a, "slow_fraction") ? tr__bad(w, "profiler: slow_fraction=0 would call every hook slow; give a fraction > 0 "
                                                          "(e.g. 0.5), or a negative one for never") : TR_OK;
}
TR__FACTORY_WITH(prof, tr_profiler_desc, TR_PROFILER_PARAMS, tr__prof_from_spec)
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
