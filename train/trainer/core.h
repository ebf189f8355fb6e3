/* train/trainer/core.h - the trainer's types, its calls, and what its strategies share (errors, events, signals). A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_TRAINER_CORE_H /* part */
#define TRAIN_TRAINER_CORE_H /* part */
#include "../math.h" /* part */
#include "../battery.h" /* part */
#include "../callbacks/early_stopping.h" /* part */

TR__C_BEGIN /* part */
/* =================================================================================================
   THE TRAINER: tr_init, tr_fit, tr_validate / tr_test / tr_predict, tr_save / tr_load on the run layer
   (leave it out with TRAIN_NO_TRAINER). Every option in full: docs/trainer.md, "The options".
   ================================================================================================= */
typedef struct tr_desc {
  tr_model model;         /* required */
  hk_registry *reg;       /* your hooks; NULL: the trainer makes (and frees) one, t->reg */
  tr_optim optim;
  tr_sched sched;
  uint64_t seed;          /* t->rng and the per-epoch shuffles; 0 is a seed like any other */
  FILE *log;              /* warnings and HK_REQUEST_LOG lines; NULL = stderr */
  void *user;             /* ctx->user */
  int strict_hook_state;  /* tr_load with hook state missing or unclaimed: 0 = warn, 1 = refuse (TR_ERR_STATE) */
  uint64_t max_checkpoint_bytes; /* the largest file tr_load reads; 0 = the model's state plus 256 MiB */
  int threads;            /* per-step math threads (-fopenmp); 0 = 1; the same bits for any count */
  double mpi_timeout;     /* TRAIN_MPI: seconds to wait for every rank (TR_ERR_COMM); 0 = 1800; < 0 = forever */
  int zero;               /* TRAIN_MPI: 1 = ZeRO-1, the optimizer state sharded over the ranks; 0 = off */
  int async_save;         /* 1: tr_save during a run stages the file for a background writer; 0 = write at once */
} tr_desc;

/* A NaN or infinite training loss (told by the bits: -ffast-math builds still see it). */
typedef enum tr_nonfinite {
  TR_NONFINITE_FAIL = 0,  /* fail the run with TR_ERR_NONFINITE through on_exception (default) */
  TR_NONFINITE_SKIP,      /* warn, skip the rest of the batch (no backward, no step) */
  TR_NONFINITE_IGNORE     /* do nothing */
} tr_nonfinite;

typedef enum tr_clip { TR_CLIP_NORM = 0, TR_CLIP_VALUE } tr_clip;

/* One run. Zero means the default in every field. */
typedef struct tr_config {
  const tr_data *train;          /* required */
  const tr_data *val;            /* optional validation data */
  int64_t max_epochs;            /* 0 = 1000 if max_steps is 0, else no limit (Lightning's rule) */
  int64_t max_steps;             /* optimizer steps; 0 = no limit */
  int64_t min_epochs, min_steps; /* an HK_STOP is held back until both are reached */
  int64_t limit_train_batches;   /* per epoch; 0 = all */
  int64_t limit_val_batches;     /* per run; 0 = all; negative = no validation */
  int num_sanity_val_steps;      /* 0 = 2; negative = none */
  int64_t val_every_n_steps;     /* validate every N-th optimizer step of the run; 0 = off */
  int64_t val_check_interval;    /* validate every N-th training batch of an epoch (Lightning's); 0 = off */
  int64_t val_every_n_epochs;    /* 0 = 1; negative = never */
  int accumulate_grad_batches;   /* micro-batches per step; 0 = 1; the sum divided by it (times the ranks) */
  int accumulate_mean_of_window; /* 1: divide by the micro-batches the window had instead */
  double gradient_clip_val;      /* 0 = no clipping */
  tr_clip gradient_clip_algorithm; /* 0 = by total L2 norm (clip_grad_norm_), or by value */
  tr_nonfinite on_nonfinite_loss;/* 0 = fail */
  int no_sigint;                 /* 1: leave SIGINT and SIGTERM alone; default: Ctrl-C ends tr_fit after the batch */
  const char *resume_from;       /* a checkpoint to continue from, or "auto": this run's newest that loads */
  int no_resume_message;         /* 1: not the "Restored all states ..." line */
  int new_version_on_resume;     /* TR_YES: log into a new version_N; default: continue the run's */
  const char *save_to;           /* where checkpoint requests, Ctrl-C and preemption save; NULL: requests warn */
  int64_t log_every_n_steps;     /* a training record every N steps; 0 = 50; negative = none */
  tr_preempt preempt;            /* the preemption signal (SIGUSR1): save to save_to, requeue, end the fit */
} tr_config;

/* The trainer (tr_init .. tr_free). Hooks get it as ctx->trainer: read the fields above "private";
   change them only through the functions below. */
typedef struct tr_trainer {
  hk_registry *reg;        /* the hooks (yours, or one the trainer made) */
  hk_ctx ctx;              /* what every hook sees */
  tr_model model;
  tr_optim optim;          /* with defaults filled in */
  tr_sched sched;
  tr_rng rng;              /* yours to draw from; saved in checkpoints */
  uint64_t seed;
  int64_t epoch;           /* current (or next) epoch, from 0 */
  int64_t global_step;     /* optimizer steps taken */
  int64_t epoch_batch;     /* training batches finished in the current epoch */
  int64_t samples_seen;
  double lr;               /* current learning rate (also ctx->lr) */
  hk_stage running;        /* the run in progress, HK_STAGE_NONE between runs */
  int64_t train_batches;   /* batches in the current training epoch */
  int64_t eval_batches;    /* batches of the evaluation loop in progress */
  char error[512];         /* the last error's message ("" if none) */
  tr_run *run;             /* reg's run layer (train/run.h), which the trainer drives */
  /* private */
  tr_err tr__err;          /* the first error of the run in progress */
  FILE *tr__log;
  int tr__own_reg;         /* tr_free destroys reg */
  hk_tensor *tr__views;    /* 2*n_tensors views: params, then grads */
  tr_tensor tr__whole;     /* the one tensor when model.tensors is NULL */
  float *tr__m, *tr__v;    /* optimizer state of [tr__opt_lo, + tr__opt_n): all, or this rank's shard */
  size_t tr__opt_lo, tr__opt_n;
  int tr__zero;            /* the state is sharded (train/trainer/mpi.h) */
  int tr__n_buf;           /* how many of m, v exist */
  int tr__has_momentum;    /* PyTorch copies d into an empty buffer */
  int tr__accum;           /* micro-batches per step now */
  int64_t tr__accum_pos;   /* micro-batches seen in the window */
  int64_t tr__accum_n;     /* ... of which ran backward */
  int tr__grads_zeroed;    /* the window's zero_grad happened */
  int64_t tr__val_at;      /* epoch_batch of the last in-epoch validation, -1 = none */
  int tr__epoch_ended;     /* inside on_train_epoch_end */
  int tr__restarting;      /* a mid-epoch checkpoint was loaded: no sanity check */
  uint64_t tr__loaded;     /* the loaded checkpoint's identity, which ranks compare (0: none) */
  int tr__lift_stop;       /* resuming past a recorded early stop */
  int64_t tr__total;       /* the cosine schedule's resolved total */
  double tr__last_loss;    /* the metric train/loss */
  const tr_config *tr__cfg;/* the resolved config of the run in progress */
  hk_flow tr__flow;        /* what hooks asked for */
  hk_bytes tr__data_state; /* the training iterator's position */
  int tr__saving;          /* a nested tr_save is refused */
  char tr__save_why[512];  /* why the last tr_save failed (error keeps a failing run's own) */
  int tr__async;
  int tr__async_now;       /* this tr_save stages its file */
  int tr__staged;          /* ... and did: on_checkpoint_saved waits for the disk */
  int tr__in_request;      /* honouring HK_REQUEST_CHECKPOINT */
  int tr__strict_hook_state;
  uint64_t tr__max_ckpt;
  struct tr__asave *tr__asave; /* the background writer (made at the first async save) */
  int tr__sync_only;       /* on_exception, teardown: saves write at once */
  char tr__settings[1024]; /* the hyperparameters, as tr_run_desc.settings words */
  void *tr__dist;          /* the MPI strategy's state, else NULL */
  void *tr__dev;           /* the CUDA device state of an on_device model */
  int tr__threads;
  int tr__grouped;         /* parameter groups: the update goes per tensor */
  float tr__gscale;        /* clipping's scale, for the update's pass (1 = none) */
  double tr__mpi_timeout;  /* seconds; < 0 = none */
  tr_region tr__state[5];  /* the training state's snapshot regions (spike_detection) */
  int tr__win_open;        /* a window has begun and not stepped (on_exception_checkpoint) */
  int64_t tr__win_batch, tr__win_samples; /* where it began */
  int tr__bs_warned;       /* the batch_size warning is given once */
  tr__grad_pass tr__gpass; /* the gradients' one pass per change (the host's grad norm) */
  int tr__sig_deferred;    /* several processes: act on the agreed stop-signal counts (the MPI votes') */
  int tr__sigint_count, tr__preempt_count; /* those counts: Ctrl-C / SIGTERM, the preemption signal */
  int64_t tr__sigterm;     /* agreed: TR_STOP_SIGTERM when a rank's signal was SIGTERM */
} tr_trainer;

/* The last failure's message; empty after a run that returned TR_OK. */
TRAIN_API const char *tr_error(const tr_trainer *t);

/* The bytes of optimizer state this process holds (AdamW 8 per parameter, SGD with momentum 4); with
   tr_desc.zero and W ranks, about 1/W of that. */
TRAIN_API size_t tr_optim_state_bytes(const tr_trainer *t);


/* The bin of x: one definition for the CPU and the GPU kernel, so both count alike; NaN/Inf by the bits. */
TR__HD static inline int tr_hist_bin(float x, float lo, float hi, float width, int bins) {
  union { float f; uint32_t u; } bits;
  int k;
  bits.f = x;
  if ((bits.u & 0x7f800000u) == 0x7f800000u) return bins + 2;
  if (x < lo) return bins;
  if (x >= hi) return bins + 1;
  k = (int)((x - lo) / width);
  return k < bins ? k : bins - 1; /* rounding just below hi */
}

TR__C_END /* part */


#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
#ifdef TRAIN_CUDA
#  define TR__ON_DEVICE(t) ((t)->tr__dev != NULL) /* the model trains on the GPU (trainer/cuda.h) */
#else
#  define TR__ON_DEVICE(t) 0
#endif
TRAIN_API const char *tr_error(const tr_trainer *t) { return t ? t->error : "no trainer"; }
TRAIN_API size_t tr_optim_state_bytes(const tr_trainer *t) { return t ? t->tr__opt_n * (size_t)t->tr__n_buf * sizeof(float) : 0; }

/* Record an error. The first error of a run wins (later ones are usually its consequences), and
   the run's loops check t->tr__err after every step that can fail. Returns the recorded code. */
static tr_err tr__fail(tr_trainer *t, tr_err code, const char *fmt, ...) TR__PRINTF(3, 4);
static tr_err tr__fail(tr_trainer *t, tr_err code, const char *fmt, ...) {
  if (t->tr__err == TR_OK) {
    va_list ap;
    va_start(ap, fmt);
    (void)tr__vmsg(t->error, sizeof t->error, 0, fmt, ap);
    va_end(ap);
    t->tr__err = code;
  }
  return t->tr__err;
}

/* A call that is not allowed right now (tr_fit from a hook, say) is refused without touching the run
   in progress: its error stays as it is, so a hook that ignores the refusal does not end the run. */
static tr_err tr__refuse(tr_trainer *t, const char *fmt, ...) TR__PRINTF(2, 3);
static tr_err tr__refuse(tr_trainer *t, const char *fmt, ...) {
  if (t->tr__err == TR_OK) {
    va_list ap;
    va_start(ap, fmt);
    (void)tr__vmsg(t->error, sizeof t->error, 0, fmt, ap);
    va_end(ap);
  }
  return TR_ERR_INVALID;
}

static void tr__warn(tr_trainer *t, const char *fmt, ...) TR__PRINTF(2, 3);
static void tr__warn(tr_trainer *t, const char *fmt, ...) { /* one line in one write, "[rank: N] " first with several processes */
  va_list ap;
  char text[1024];
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  tr_run_say(t->reg, &t->ctx, "train.h: warning", "%s", text); /* the run's log (tr_desc.log), above the bar */
}
/* The shuffle of epoch e gets its own generator, derived from the seed and e alone, so that an
   epoch resumed from a checkpoint sees exactly the order it had the first time. */
static tr_rng tr__epoch_rng(uint64_t seed, int64_t epoch) {
  tr_rng r;
  tr_rng_seed(&r, seed ^ 0x5DEECE66Dull);
  r.state = tr_rng_u64(&r) ^ ((uint64_t)epoch * 0xD1B54A32D192ED03ull);
  return r;
}
/* The lr for the next optimizer step: the schedule's t is steps taken, or epochs finished. */
static double tr__current_lr(tr_trainer *t) {
  tr_sched s = t->sched;
  s.total = t->tr__total;
  return tr_run_sched_lr(t->reg, &t->ctx, &s, t->optim.lr, s.per_epoch ? t->epoch : t->global_step);
}

/* The optimizer state, zeroed, for parameters [lo, lo + n): all of them, or (zero) a rank's shard, which
   the strategy allocates once it knows the ranks (tr__dist_init). */
static tr_err tr__alloc_state(tr_trainer *t, size_t lo, size_t n) {
  t->tr__opt_lo = lo;
  t->tr__opt_n = n;
  if (t->tr__n_buf >= 1) t->tr__m = (float *)calloc(n ? n : 1, sizeof(float));
  if (t->tr__n_buf >= 2) t->tr__v = (float *)calloc(n ? n : 1, sizeof(float));
  if ((t->tr__n_buf >= 1 && !t->tr__m) || (t->tr__n_buf >= 2 && !t->tr__v))
    return tr__fail(t, TR_ERR_NOMEM, "tr_init: out of memory for the optimizer state of %zu parameters", n);
  return TR_OK;
}

/* ---- Ctrl-C, SIGTERM and the preemption signal -----------------------------------------------------------
   The run layer's, as in any loop: a fit installs them (tr_run_enter, unless tr_config.no_sigint) and counts
   them (tr_run_stops); the loops look between steps. 1: finish the current batch (saved to save_to when given),
   then fail with TR_ERR_INTERRUPTED; 2: fail at the next event. With several processes a rank acts on the
   count every rank agreed on (the MPI strategy's votes move t->tr__sigint_count and co), so that every rank
   stops at the same point. hk_stop_requested() first: an event with no signal ever counted asks nothing more. */
static int tr__interrupts(const tr_trainer *t) {
  return t->tr__sig_deferred ? t->tr__sigint_count : hk_stop_requested() > 0 ? tr_run_stops(t->reg, NULL, NULL) : 0;
}
static int tr__preempts(const tr_trainer *t) {
  int preempted = 0;
  if (t->tr__sig_deferred) return t->tr__preempt_count;
  if (tr_preempt_requested() > 0) (void)tr_run_stops(t->reg, NULL, &preempted);
  return preempted;
}
/* Which signal, as every rank names it: the agreed one, or this process's. */
static int64_t tr__interrupt_kind(const tr_trainer *t) {
  int64_t sigterm = 0;
  if (t->tr__sig_deferred) return t->tr__sigterm;
  (void)tr_run_stops(t->reg, &sigterm, NULL);
  return sigterm;
}

/* ---- firing events ---------------------------------------------------------------------------------
   Every event of a run goes through tr__fire. HK_FIRE_FLOW costs hooks.h's 3-instruction guard when
   nothing is registered; what hooks ask for (skip the step, skip the batch, end the epoch, stop)
   collects in t->tr__flow, already degraded to what each event honours, for the loops to act on.
   HK_FAIL becomes the run's error. Once the run has failed nothing fires any more: the abort path
   fires on_exception and teardown itself. */
static TR__NOINLINE void tr__settle(tr_trainer *t) {
  const char *why = t->ctx.hook_failure; /* "hook 'name' failed in on_x: message" */
  t->ctx.hook_failure = NULL;
  if (HK_FLOW_HAS(&t->tr__flow, HK_FLOW_FAIL)) { /* t->tr__err is the one record of a failure */
    tr__fail(t, TR_ERR_HOOK, "%s", why ? why : "a hook failed");
    hk_flow_clear(&t->tr__flow, HK_FLOW_FAIL);
  } else if (why) tr__warn(t, "%s (this event does not stop the run)", why); /* teardown: reported only */
  if (tr__interrupts(t) >= 2) tr__fail(t, TR_ERR_INTERRUPTED, "interrupted (%s twice)", tr__stop_name(tr__interrupt_kind(t)));
}

/* hooks.h reports a fatal failure only through ctx.hook_failure; this is where train.h reports it.
   Each site keeps only hooks.h's guard inline: the dispatch HK_FIRE_FLOW runs past it is inlined once,
   in tr__fire_armed, not at the trainer's thirty sites (whose functions then stay small enough to
   keep tr__fire inline: an empty site costs its guard, not a call). */
static TR__NOINLINE void tr__fire_armed(tr_trainer *t, int event) {
  (void)HK_FIRE_FLOW(t->reg, event, &t->ctx, &t->tr__flow);
}
static inline void tr__fire(tr_trainer *t, int event) {
  if (t->tr__err) return;
  if (HK_ACTIVE(t->reg, event)) tr__fire_armed(t, event);
  if (t->ctx.hook_failure || tr__interrupts(t) >= 2) tr__settle(t);
}

/* "Do this unless a hook skipped it": the batch's work and events stop at HK_SKIP_BATCH (or an
   error); the optimizer's stop at HK_SKIP_STEP too. */
static int tr__skips(const tr_trainer *t, unsigned mask) { return t->tr__err || HK_FLOW_HAS(&t->tr__flow, mask); }
static void tr__fire_unless(tr_trainer *t, unsigned mask, int event) { if (!tr__skips(t, mask)) tr__fire(t, event); }

/* The next run of neighbouring tensors from i on (in the buffer: views tile it) whose settings are the same: its
   first element and length in *off, *len and its settings in *o; returns the tensor after it. Parameter groups. */
TR__SHARED int tr__group_run(tr_trainer *t, int i, double lr, tr_tensor_opt *o, size_t *off, size_t *len) {
  const hk_tensor *v = t->tr__views;
  int j;
  *o = tr_run_tensor_opt(t->reg, i, lr, t->global_step + 1);
  *off = (size_t)(v[i].data - t->model.params); /* (on the device too: views into the one buffer) */
  *len = v[i].count;
  for (j = i + 1; j < t->ctx.n_tensors && v[j].data == v[j - 1].data + v[j - 1].count; j++) {
    tr_tensor_opt x = tr_run_tensor_opt(t->reg, j, lr, t->global_step + 1);
    if (x.lr != o->lr || x.weight_decay != o->weight_decay || x.frozen != o->frozen || x.step != o->step) break;
    *len += v[j].count;
  }
  return j;
}

TR__C_END /* part */
#endif /* implementation */
#endif /* part */
