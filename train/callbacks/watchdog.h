/* train/callbacks/watchdog.h - watchdog. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_WATCHDOG_H /* part */
#define TRAIN_WATCHDOG_H /* part */
#include "../battery.h" /* part */

TR__C_BEGIN /* part */
/* ---- watchdog: a hang reported, and on request the process ended ---------------------------------
   A thread of its own (setup to teardown) looks every poll seconds whether the loop moved (a step ended,
   or an event it listens to fired). After `seconds`, or `multiple` times the median step once `warmup`
   steps ran, it writes one report to fd 2 on every rank, taking nothing the stuck thread could hold:
     watchdog: rank 1 of 2: no progress for 2.1 s (limit 0.3 s) at step 7 (epoch 0, batch 3):
       in on_train_batch_start, hook 'slow' running
   action=exit then _exit(exit_code) (124), so a scheduler requeues: what stays is what kill -9 leaves.
   The loop's thread publishes a snapshot a step (three stores). POSIX threads. Hand-written loop: setup, teardown,
   on_train_batch_end (tr_run_* fire them). docs/callbacks.md ("watchdog in detail"). */
#define TR_WATCHDOG_ACTIONS(X) X(TR_WATCHDOG_REPORT, "report") X(TR_WATCHDOG_EXIT, "exit")
typedef enum tr_watchdog_action {
#define TR__X(sym, name) sym,
  TR_WATCHDOG_ACTIONS(TR__X)
#undef TR__X
  TR_WATCHDOG_ACTION_COUNT
} tr_watchdog_action;
#define TR_WATCHDOG_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD) */ \
  X(DOUBLE,   double,             seconds,   "0",      NULL,          "report when the loop has not moved for this many " \
    "seconds (0: no absolute limit)") \
  X(DOUBLE,   double,             multiple,  "0",      NULL,          "report when it has not moved for this many times the " \
    "median training step (> 1; 0: not by the median); with seconds, the larger limit") \
  X(INT_ZERO, int,                warmup,    "5",      NULL,          "training steps before the median step counts (1..1e6)") \
  X(CHOICE,   tr_watchdog_action, action,    "report", "report|exit", "report: say where it is stuck, once a stall; exit: " \
    "say it, then end the process with exit_code") \
  X(INT_ZERO, int,                exit_code, "124",    NULL,          "the process's exit status with action=exit (1..255)") \
  X(DOUBLE,   double,             poll,      "0",      NULL,          "seconds between the thread's looks (0: a tenth of the " \
    "limit, 0.01..1 s)")
typedef struct tr_watchdog_desc { TR_WATCHDOG_PARAMS(TR__FIELD) } tr_watchdog_desc;

/* Written by the watchdog's thread: read it once the run has ended (teardown joins the thread). */
typedef struct tr_watchdog_state {
  int64_t reports;              /* stalls reported */
  double median_step;           /* seconds; 0 before warmup steps have run */
  double limit;                 /* seconds: the limit the last report was made at (0: none) */
  char last[640];               /* the last report, as written */
} tr_watchdog_state;
TRAIN_API tr_err tr_watchdog(hk_registry *reg, const tr_watchdog_desc *d, hk_handle *out);
TRAIN_API const tr_watchdog_state *tr_watchdog_get(const hk_registry *reg, hk_handle h);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
/* ---- watchdog -------------------------------------------------------------------------------------- */
/* The loop's thread publishes, the watchdog's reads: relaxed for the snapshot's fields, the counters last with
   release and read with acquire, so a snapshot read after its counter is the one that counter ended. */
#if defined(__GNUC__) || defined(__clang__)
#  define TR__WD_PUT(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)
#  define TR__WD_GET(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#  define TR__WD_RELEASE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELEASE)
#  define TR__WD_ACQUIRE(x) __atomic_load_n(&(x), __ATOMIC_ACQUIRE)
#else
#  define TR__WD_PUT(x, v) ((x) = (v))
#  define TR__WD_GET(x) (x)
#  define TR__WD_RELEASE(x, v) ((x) = (v))
#  define TR__WD_ACQUIRE(x) (x)
#endif
enum { TR__WD_SAMPLES = 63 };   /* step times the median is taken over (odd: one middle) */

typedef struct tr__wd {
  tr_watchdog_state pub;
  hk_registry *reg;
  double seconds, multiple, poll;
  int warmup, action, exit_code;
  int64_t steps, beats;         /* the loop's thread writes them (release), the watchdog's reads (acquire) */
  int64_t at_step, at_batch, at_epoch; /* the snapshot: ctx's at the last step's end or beat (epoch: at beats) */
  int rank, world;              /* ctx's at setup, before the thread starts */
  hk_ctx *ctx;                  /* the run's, from setup to teardown */
  int depth;                    /* setups not torn down (a fit inside a fit: one thread) */
#ifdef TR__THREADS
  pthread_t th;
  int started;
  int wake[2];                  /* a byte written to wake[1] ends the thread at once */
#endif
  double sample[TR__WD_SAMPLES]; /* the watchdog's thread only: step times, a ring */
  int n_sample, next_sample;
} tr__wd;

static void tr__wd_stop(tr__wd *s);
static void tr__wd_destroy(void *user) {
  tr__wd *s = (tr__wd *)user;
  if (!s) return;
  tr__wd_stop(s);
  free(s);
}

/* The loop's side: the snapshot and a counter a step, another for the rest (cold). The watchdog's thread reads
   only these (and hooks.h's dispatch state, tr__wd_where), never ctx's fields the loop goes on writing. */
static void tr__wd_snap(tr__wd *s, const hk_ctx *ctx) {
  TR__WD_PUT(s->at_step, ctx->global_step);
  TR__WD_PUT(s->at_batch, ctx->batch_idx);
  TR__WD_PUT(s->at_epoch, ctx->epoch);
}
static hk_signal tr__wd_step(hk_ctx *ctx, void *u) { /* the epoch moves only at beats: two stores fewer a step */
  tr__wd *s = (tr__wd *)u;
  TR__WD_PUT(s->at_step, ctx->global_step);
  TR__WD_PUT(s->at_batch, ctx->batch_idx);
  TR__WD_RELEASE(s->steps, s->steps + 1);
  return HK_CONTINUE;
}
static hk_signal tr__wd_beat(hk_ctx *ctx, void *u) {
  tr__wd *s = (tr__wd *)u;
  tr__wd_snap(s, ctx);
  TR__WD_RELEASE(s->beats, s->beats + 1);
  return HK_CONTINUE;
}

#ifdef TR__THREADS
static int tr__wd_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static double tr__wd_median(const tr__wd *s) {
  double v[TR__WD_SAMPLES];
  memcpy(v, s->sample, (size_t)s->n_sample * sizeof *v);
  qsort(v, (size_t)s->n_sample, sizeof *v, tr__wd_cmp);
  return v[s->n_sample / 2];
}
static double tr__wd_limit(const tr__wd *s) {
  double m = s->multiple > 0 && s->n_sample > 0 ? s->multiple * s->pub.median_step : 0;
  return m > s->seconds ? m : s->seconds;
}

/* All of text to fd 2, unless unwritable for a second (a stuck reader must not keep us from ending). */
static void tr__wd_say(const char *text) {
  size_t n = strlen(text), at = 0;
  while (at < n) {
    struct pollfd p;
    ssize_t k;
    p.fd = 2;
    p.events = POLLOUT;
    p.revents = 0;
    if (poll(&p, 1, 1000) <= 0) return;
    k = write(2, text + at, n - at);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return;
    at += (size_t)k;
  }
}

/* "watchdog: " and, with several processes, "rank R of W: "; its length */
static int tr__wd_prefix(const tr__wd *s, char *out, size_t cap) {
  int n = s->world > 1 ? snprintf(out, cap, "watchdog: rank %d of %d: ", s->rank, s->world)
                                 : snprintf(out, cap, "watchdog: ");
  return n < 0 || (size_t)n >= cap ? 0 : n;
}
/* Where the loop is: hooks.h's dispatch state (ctx->event, ctx->self, hk_dispatching), which its dispatch loop
   writes with plain stores on every hook call. It is the one read here not ordered with the loop's thread: making
   it so would cost every dispatch of every program an atomic write; it is read only after the loop has stood
   still for the whole limit, and tests/tsan.supp names this function alone. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((noinline))
#endif
static void tr__wd_where(tr__wd *s, char *where, size_t cap, const char *waits) {
  const hk_ctx *c = s->ctx;
  const char *ev = hk_event_name(s->reg, c->event), *name;
  if (waits) snprintf(where, cap, "waiting in %s, after %s", waits, ev ? ev : "?");
  else if (hk_dispatching(s->reg) > 0 && (name = hk_name(s->reg, c->self)) != NULL)
    snprintf(where, cap, "in %s, hook '%s' running", ev ? ev : "?", name);
  else snprintf(where, cap, "after %s, in the loop's own code (no hook running)", ev ? ev : "?");
}
/* The snapshot is read after its counter (acquire): the step, epoch and batch at the last progress. */
static void tr__wd_report(tr__wd *s, double stuck, double limit) {
  char *out = s->pub.last, where[300];
  size_t cap = sizeof s->pub.last;
  int64_t at_step, at_epoch, at_batch;
  int n = tr__wd_prefix(s, out, cap);
  (void)TR__WD_ACQUIRE(s->steps);
  (void)TR__WD_ACQUIRE(s->beats);
  at_step = TR__WD_GET(s->at_step);
  at_epoch = TR__WD_GET(s->at_epoch);
  at_batch = TR__WD_GET(s->at_batch);
  tr__wd_where(s, where, sizeof where, tr_run_waits());
  tr__msg_at(out, cap, (size_t)n, "no progress for %.1f s (limit %.2g s) at step %lld (epoch %lld, batch %lld): %s\n",
             stuck, limit, (long long)at_step, (long long)at_epoch, (long long)at_batch, where);
  s->pub.reports++;
  s->pub.limit = limit;
  tr__wd_say(out);
  if (s->action == TR_WATCHDOG_EXIT) {
    char bye[300];
    n = tr__wd_prefix(s, bye, sizeof bye);
    snprintf(bye + n, sizeof bye - (size_t)n, "exiting with status %d (action=exit): the last checkpoint written stays; "
             "nothing else is saved\n", s->exit_code);
    tr__wd_say(bye);
    _exit(s->exit_code);
  }
}

static void *tr__wd_main(void *p) {
  tr__wd *s = (tr__wd *)p;
  int64_t steps = TR__WD_ACQUIRE(s->steps), beats = TR__WD_ACQUIRE(s->beats);
  double moved = hk_clock(), t_steps = moved;
  int fired = 0;
  for (;;) {
    struct pollfd w;
    double limit = tr__wd_limit(s), nap = s->poll > 0 ? s->poll : limit > 0 ? limit / 10 : 0.05, now;
    int64_t st, bt;
    int r;
    if (nap < 0.01 && s->poll <= 0) nap = 0.01;
    if (nap > 1 && s->poll <= 0) nap = 1;
    if (s->multiple > 0 && s->n_sample == 0 && s->poll <= 0 && nap > 0.05) nap = 0.05; /* to measure the first steps */
    w.fd = s->wake[0];
    w.events = POLLIN;
    w.revents = 0;
    r = poll(&w, 1, (int)(nap * 1000 + 0.5));
    if (r < 0 && errno == EINTR) continue;
    if (r != 0) break; /* woken (or the pipe broke): the run has ended */
    now = hk_clock();
    st = TR__WD_ACQUIRE(s->steps);
    bt = TR__WD_ACQUIRE(s->beats);
    if (st != steps || bt != beats) {
      if (fired) {
        char again[200];
        int n = tr__wd_prefix(s, again, sizeof again);
        tr__msg_at(again, sizeof again, (size_t)n, "moved on after %.1f s\n", now - moved);
        tr__wd_say(again);
      }
      if (bt == beats && steps >= s->warmup) { /* only steps since the last look, past the warmup: a sample */
        s->sample[s->next_sample] = (now - t_steps) / (double)(st - steps);
        s->next_sample = (s->next_sample + 1) % TR__WD_SAMPLES;
        if (s->n_sample < TR__WD_SAMPLES) s->n_sample++;
        s->pub.median_step = tr__wd_median(s);
      }
      steps = st;
      beats = bt;
      moved = t_steps = now;
      fired = 0;
      continue;
    }
    if (!fired && limit > 0 && now - moved > limit) {
      fired = 1;
      tr__wd_report(s, now - moved, limit);
    }
  }
  return NULL;
}
#endif

static void tr__wd_stop(tr__wd *s) {
#ifdef TR__THREADS
  if (!s->started) return;
  while (write(s->wake[1], "", 1) < 0 && errno == EINTR) {}
  pthread_join(s->th, NULL);
  close(s->wake[0]);
  close(s->wake[1]);
  s->started = 0;
#else
  (void)s;
#endif
}

static hk_signal tr__wd_setup(hk_ctx *ctx, void *u) {
  tr__wd *s = (tr__wd *)u;
  tr__wd_snap(s, ctx);
  TR__WD_RELEASE(s->beats, s->beats + 1);
  if (s->depth++ > 0) return HK_CONTINUE;
  s->ctx = ctx;
  s->rank = ctx->rank; /* (pthread_create orders these before the thread's reads) */
  s->world = ctx->world_size;
#ifdef TR__THREADS
  if (pipe(s->wake) != 0) return hk_fail(ctx, "watchdog: pipe: %s", strerror(errno));
  (void)fcntl(s->wake[0], F_SETFD, FD_CLOEXEC);
  (void)fcntl(s->wake[1], F_SETFD, FD_CLOEXEC);
  {
    int e;
#  ifdef TR__SIGMASK /* the thread blocks every signal: Ctrl-C and SIGTERM reach the loop's thread */
    tr__sigset all, old;
    int masked = sigfillset(&all) == 0 && pthread_sigmask(TR__SIG_SETMASK, &all, &old) == 0;
    e = pthread_create(&s->th, NULL, tr__wd_main, s);
    if (masked) (void)pthread_sigmask(TR__SIG_SETMASK, &old, NULL);
#  else
    e = pthread_create(&s->th, NULL, tr__wd_main, s);
#  endif
    if (e != 0) {
      close(s->wake[0]);
      close(s->wake[1]);
      return hk_fail(ctx, "watchdog: its thread could not be made: %s", strerror(e));
    }
  }
  s->started = 1;
#endif
  return HK_CONTINUE;
}
static hk_signal tr__wd_teardown(hk_ctx *ctx, void *u) {
  tr__wd *s = (tr__wd *)u;
  (void)ctx;
  if (s->depth > 0 && --s->depth > 0) return HK_CONTINUE;
  tr__wd_stop(s);
  return HK_CONTINUE;
}

static tr_err tr__wd_make(hk_registry *reg, const tr_watchdog_desc *d, hk_handle *out, tr__why *w) {
  tr__wd *s;
  hk_callback cb;
  int warmup, code;
  if (!d) return tr__bad(w, "watchdog: desc is NULL");
  if (!hk_is_finite(d->seconds) || d->seconds < 0)
    return tr__bad(w, "watchdog: seconds must be a finite number >= 0 (got %g)", d->seconds);
  if (!hk_is_finite(d->multiple) || (d->multiple != 0 && !(d->multiple > 1)))
    return tr__bad(w, "watchdog: multiple must be > 1 (times the median step; 0: none), got %g", d->multiple);
  if (d->seconds == 0 && d->multiple == 0)
    return tr__bad(w, "watchdog: give a limit: seconds (e.g. watchdog(seconds=600)) or multiple (e.g. watchdog(multiple=20))");
  if (!hk_is_finite(d->poll) || (d->poll != 0 && !(d->poll >= 0.001 && d->poll <= 60)))
    return tr__bad(w, "watchdog: poll must be 0 (a tenth of the limit) or 0.001..60 seconds (got %g)", d->poll);
  warmup = tr__zero_int(d->warmup, 5);
  if (warmup < 1 || warmup > 1000000) return tr__bad(w, "watchdog: warmup must be 1..1000000 steps (got %d)", warmup);
  code = tr__zero_int(d->exit_code, 124);
  if (code < 1 || code > 255) return tr__bad(w, "watchdog: exit_code must be 1..255 (got %d): 0 would tell the scheduler the job finished", code);
  if ((unsigned)d->action >= TR_WATCHDOG_ACTION_COUNT)
    return tr__bad(w, "watchdog: action %d is not valid (report or exit)", (int)d->action);
#ifndef TR__THREADS /* (the rest compiles, unused) */
  if (d) return tr__bad(w, "watchdog: needs POSIX threads; this build has none (TRAIN_NO_THREADS, or not POSIX)");
#endif
  s = (tr__wd *)calloc(1, sizeof *s);
  if (!s) return tr__bad(w, "watchdog: out of memory"), TR_ERR_NOMEM;
  s->reg = reg;
  s->seconds = d->seconds;
  s->multiple = d->multiple;
  s->poll = d->poll;
  s->warmup = warmup;
  s->action = (int)d->action;
  s->exit_code = code;
  memset(&cb, 0, sizeof cb);
  cb.name = "watchdog";
  cb.user = s;
  cb.setup = tr__wd_setup;
  cb.teardown = tr__wd_teardown;
  cb.on_train_batch_end = tr__wd_step;
#define TR__WD_BEATS(X) X(on_fit_start) X(on_fit_end) X(on_sanity_check_start) X(on_sanity_check_end) X(on_train_start) \
  X(on_train_end) X(on_train_epoch_start) X(on_train_epoch_end) X(on_validation_start) X(on_validation_end) \
  X(on_validation_batch_end) X(on_test_start) X(on_test_end) X(on_test_batch_end) X(on_predict_start) X(on_predict_end) \
  X(on_predict_batch_end) X(on_save_checkpoint) X(on_checkpoint_saved) X(on_load_checkpoint) X(on_exception)
#define TR__X(ev) cb.ev = tr__wd_beat;
  TR__WD_BEATS(TR__X)
#undef TR__X
  cb.destroy = tr__wd_destroy;
  return tr__cb_register(reg, &cb, 0, out, w);
}
TR__PUBLIC_OF(tr_watchdog, wd)
TR__FACTORY_OF(wd, tr_watchdog_desc, TR_WATCHDOG_PARAMS)
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
