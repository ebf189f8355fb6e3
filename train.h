/* train.h - v0.2.0 - 2026-11-22 - a minimal, complete trainer built on hooks.h - MIT or public domain

   A small training loop you can read top to bottom: fit / validate / test / predict loops, a sanity
   check, limits, gradient accumulation and clipping, SGD and AdamW (PyTorch's formulas), learning-rate
   schedules, checksummed checkpoints with exact resume, and a failure path (hook failure, NaN loss,
   Ctrl-C). Hooks fire in PyTorch Lightning 2.6's order, except where the list "WHERE train.h DIFFERS
   FROM LIGHTNING" below says otherwise. It uses only hooks.h's public API.

   USAGE
     In exactly one C or C++ file (it may be the same file as hooks.h's implementation):
         #define HOOKS_IMPLEMENTATION
         #define TRAIN_IMPLEMENTATION
         #include "train.h"          (includes hooks.h)
     Everywhere else just #include "train.h". Link with -lm.

     The model is yours: a flat float buffer of parameters, a gradient buffer of the same layout, named
     views into them (llm.c style), and a forward+loss and a backward function. The data is yours too:
     a count and a "get batch i" function (or an iterator: next, reset, and its position saved in
     checkpoints), and an optional shuffle. Then:

       tr_trainer t;
       tr_err e = tr_init(&t, &(tr_desc){
           .model = { .params = P, .grads = G, .n_params = N, .tensors = views, .n_tensors = 2,
                      .user = &net, .forward = net_forward, .backward = net_backward },
           .optim = { .kind = TR_OPTIM_ADAMW, .lr = 1e-3 },
           .seed  = 42 });
       hk_on(t.reg, HK_ON_TRAIN_BATCH_END, log_loss, NULL, NULL, NULL);     (any hooks.h hook)
       if (!e) e = tr_fit(&t, &(tr_config){ .train = &train_data, .val = &val_data, .max_epochs = 3 });
       if (e) fprintf(stderr, "training failed: %s\n", tr_error(&t));
       tr_free(&t);

   A zero-initialised tr_desc / tr_config / tr_optim / tr_sched means sensible defaults: each field's
   comment says what its zero means.

   THE ORDER OF EVENTS IN tr_fit
     setup(fit)  configure_model  [tr_config.resume_from: load -> on_load_checkpoint]  on_fit_start
     on_sanity_check_start  <validation loop>  on_sanity_check_end
                            (skipped after resuming from a checkpoint written in the middle of an epoch
                             or of a validation; run after one written at an epoch's end, as Lightning)
     on_train_start
       per epoch:  on_train_epoch_start                       (not when resuming in mid-epoch)
         per batch:  on_train_batch_start  forward
                     on_before_zero_grad, zero_grad           (first micro-batch of a window only)
                     on_before_backward  backward  on_after_backward
                     on_before_optimizer_step  clip  on_gradient_clip  step  on_after_optimizer_step
                                                              (last micro-batch of a window only)
                     on_train_batch_end   [validation every val_every_n_steps]   [requests]
         [validation at the epoch's end]  on_train_epoch_end  [requests]
     on_train_end  on_fit_end  teardown(fit)
   The validation loop: on_validation_start, on_validation_epoch_start, per batch
   on_validation_batch_start / _end, on_validation_epoch_end (val/loss is set), on_validation_end.
   tr_validate / tr_test / tr_predict: setup(stage), configure_model, the loop, teardown(stage).
   Within an event: callbacks, then the model tier, then the strategy tier (hooks.h's tiers); on
   on_load_checkpoint the model tier first (hooks.h's HK_MODEL_FIRST), as Lightning.
   What each hk_ctx field holds at each event is hooks.h's "CONTEXT CONTRACT"; train.h keeps all of it.

   WHAT A HOOK'S SIGNAL DOES (the strongest of an event's hooks wins; every hook still runs). Which
   events honour which signals is hooks.h's event table; a signal an event does not honour counts as
   the strongest weaker one it does (hk_honoured): HK_FAIL from teardown or on_exception is only
   reported, HK_SKIP_STEP from on_train_batch_end does nothing.
     HK_SKIP_STEP   the current accumulation window gets no optimizer step; its gradients are dropped
                    (on_train_batch_start .. on_gradient_clip); global_step does not move.
     HK_SKIP_BATCH  the rest of this batch is skipped (forward, backward, step, whichever are left);
                    on_train_batch_end still fires. A window whose last micro-batch is skipped gets no
                    step. In validation/test/predict: the batch's forward is skipped (not averaged).
     HK_STOP_EPOCH  the epoch (or the evaluation loop) ends after this batch; the epoch's end runs
                    as usual (validation, on_train_epoch_end), then the next epoch starts.
     HK_STOP        training stops after the current batch, once min_epochs and min_steps are reached
                    (until then the request is held); the epoch ends as usual, then on_train_end,
                    on_fit_end, teardown; tr_fit returns TR_OK. From any event of a fit.
     HK_FAIL        the run fails: every on_exception handler runs (ctx->abort_reason says why), then
                    teardown; the function returns TR_ERR_HOOK with the hook's message.
   A non-finite loss (tr_config.on_nonfinite_loss) and Ctrl-C (tr_config.no_sigint) end the same way
   as HK_FAIL, with TR_ERR_NONFINITE / TR_ERR_INTERRUPTED. Requests (hk_request) are honoured after
   the current training batch or epoch: HK_REQUEST_VALIDATION runs a validation, HK_REQUEST_CHECKPOINT
   saves to tr_config.save_to (a failed save fails the run), HK_REQUEST_LOG writes the counters and
   every metric to tr_desc.log. A tr_fit, tr_validate, tr_test, tr_predict or tr_load called from a
   hook while a run is going is refused (TR_ERR_INVALID) and leaves the run as it was.

   METRICS the trainer provides (hk_metric_get), all lazy (computed only when a hook reads them):
     lr           the learning rate of the current step (also ctx->lr), from the first batch on
     train/loss   the last training batch's loss (NaN before the first)
     grad_norm    hk_grad_norm(ctx): the L2 norm of the gradients, from on_after_backward; during the
                  optimizer step it is the norm before clipping (computed once per step, shared with
                  clipping)
     val/loss     the mean loss of the last validation, set before on_validation_epoch_end
     test/loss    the mean loss of the last test, set before on_test_epoch_end

   WHERE train.h DIFFERS FROM LIGHTNING (2.6), ON PURPOSE (each one pinned by tests/test_train.c)
     - teardown also runs when a run fails, after on_exception; Lightning skips it on errors.
     - every on_exception handler runs even if one fails; in Lightning an exception in one ends the rest.
     - Ctrl-C ends tr_fit with TR_ERR_INTERRUPTED after on_exception and teardown; Lightning exits the
       process (sys.exit(1)).
     - A hook's state (save_state) is taken after on_save_checkpoint and restored before
       on_load_checkpoint, so on_save_checkpoint can update what is saved and on_load_checkpoint sees
       the restored state; Lightning takes state_dict before on_save_checkpoint and calls
       on_load_checkpoint before load_state_dict.
     - on_fit_start sees the whole restored state (counters, optimizer, schedule); Lightning restores
       the loop counters and optimizers after on_fit_start.
     - ctx->stage stays HK_STAGE_FIT during validation inside a fit; Lightning's stage is "validating".
     - Any hook can skip the step or the batch, end the epoch or stop (signals, the strongest wins);
       in Lightning only the LightningModule's on_train_batch_start can skip (by returning -1, which
       ends the epoch) and callbacks stop by setting trainer.should_stop.
     - HK_STOP_EPOCH still fires that batch's on_train_batch_end and runs the epoch's validation;
       Lightning's -1 skips both.

   COMPILE-TIME OPTIONS (define before including)
     TRAIN_IMPLEMENTATION   emit the implementation in this translation unit
     TRAIN_STATIC           make every function static
     TRAIN_API              declaration prefix for public functions (default: extern)
     TRAIN_ASSERT(c)        assertion used by the implementation (default: assert)
     (hooks.h's options apply to hooks.h, which this header includes)

   POSIX: the implementation uses open/write/fsync/rename for atomic checkpoints and signal() for
   Ctrl-C; elsewhere it falls back to stdio (no fsync).

   CHANGELOG
     0.2.0  the loop reads as a list (hooks.h's hk_flow); runs share one start/finish path; refused
            nested calls no longer fail the run; tr_config.ckpt_path/checkpoint_path renamed
            resume_from/save_to; TR_SCHED_WARMUP removed (every schedule has .warmup); late gradient
            buffers (tr_set_buffers); iterator data with its position in checkpoints; tensors must tile
            the parameter buffer; sanity check after an end-of-epoch resume, as Lightning; hardened
            checkpoints (see tr_save/tr_load).
     0.1.0  first release: loops, sanity check, limits, accumulation, clipping, SGD/AdamW, schedules,
            checkpoints (format version 1), exact resume, failure path, Ctrl-C.
*/
#ifndef TRAIN_H
#define TRAIN_H

#define TRAIN_VERSION_MAJOR 0
#define TRAIN_VERSION_MINOR 2
#define TRAIN_VERSION_PATCH 0
#define TRAIN_VERSION_STRING "0.2.0"

#include "hooks.h"
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifndef TRAIN_API
#  if defined(TRAIN_STATIC) && (defined(__GNUC__) || defined(__clang__))
#    define TRAIN_API static __attribute__((unused)) /* a private copy need not use every function */
#  elif defined(TRAIN_STATIC)
#    define TRAIN_API static
#  else
#    define TRAIN_API extern
#  endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors ------------------------------------------------------------------------------------
   Every function that can fail returns a tr_err (0 = success); tr_error(t) has the readable message. */
#define TR_ERRORS(X) /* X(enum, tr_err_name, when it happens) */ \
  X(TR_OK,              "ok",                   "success") \
  X(TR_ERR_INVALID,     "invalid argument",     "a bad argument or config value (the message names it), or a call not allowed now") \
  X(TR_ERR_NOMEM,       "out of memory",        "an allocation failed") \
  X(TR_ERR_NOT_FOUND,   "file not found",       "the checkpoint file does not exist") \
  X(TR_ERR_IO,          "i/o error",            "a file could not be opened, read, written or renamed") \
  X(TR_ERR_FORMAT,      "bad checkpoint format", "not a checkpoint, or truncated, or corrupted (a checksum does not match)") \
  X(TR_ERR_VERSION,     "unsupported checkpoint version", "a checkpoint format version this build cannot read") \
  X(TR_ERR_MISMATCH,    "checkpoint does not match", "the checkpoint's tensors or optimizer do not match this trainer's") \
  X(TR_ERR_HOOK,        "hook failed",          "a hook failed (returned HK_FAIL under the fatal policy)") \
  X(TR_ERR_STATE,       "hook state error",     "a hook's state could not be saved or restored") \
  X(TR_ERR_MODEL,       "model or data error",  "a model or data function returned nonzero") \
  X(TR_ERR_NONFINITE,   "non-finite loss",      "the training loss was NaN or infinite") \
  X(TR_ERR_INTERRUPTED, "interrupted",          "Ctrl-C (SIGINT) during tr_fit")
typedef enum tr_err {
#define TR__X(sym, name, doc) sym,
  TR_ERRORS(TR__X)
#undef TR__X
  TR_ERR_COUNT
} tr_err;

/* ---- random numbers ------------------------------------------------------------------------------
   A tiny seeded generator (splitmix64). The trainer owns one (t->rng, saved in checkpoints) for your
   own use, e.g. dropout or initialisation, and hands a per-epoch one to your shuffle function. */
typedef struct tr_rng { uint64_t state; } tr_rng;

TRAIN_API void     tr_rng_seed(tr_rng *r, uint64_t seed);
TRAIN_API uint64_t tr_rng_u64(tr_rng *r);
TRAIN_API uint32_t tr_rng_u32(tr_rng *r);
TRAIN_API uint64_t tr_rng_below(tr_rng *r, uint64_t n);  /* uniform in [0, n), n > 0; unbiased */
TRAIN_API float    tr_rng_float(tr_rng *r);              /* uniform in [0, 1) */
TRAIN_API float    tr_rng_normal(tr_rng *r);             /* standard normal (Box-Muller) */
/* Write a fresh random permutation of 0..n-1 into idx (Fisher-Yates). The result depends only on the
   generator, never on idx's previous contents: exactly what a resumable shuffle needs. */
TRAIN_API void     tr_rng_perm(tr_rng *r, int64_t *idx, int64_t n);

/* ---- the model (yours) ---------------------------------------------------------------------------
   llm.c style: every parameter lives in one flat float buffer; a tensor is a named (offset, count)
   view into it; the gradient buffer has the same layout. */
typedef struct tr_tensor {
  const char *name;    /* unique; checked against checkpoints; must stay valid while the trainer lives */
  size_t offset;       /* first element in params/grads */
  size_t count;        /* number of elements */
} tr_tensor;

typedef struct tr_model {
  float *params;              /* n_params floats, owned by you */
  float *grads;               /* n_params floats, same layout; the trainer zeroes it. May be NULL at
                                 tr_init for a model that allocates it late: hand it over with
                                 tr_set_buffers (e.g. in a configure_model hook) before training */
  size_t n_params;
  const tr_tensor *tensors;   /* named views; NULL = one tensor "params" covering everything */
  int n_tensors;
  void *user;                 /* passed as the first argument of the functions below */
  /* Forward pass and loss on one batch: store the batch's (mean) loss in *loss. training is 1 inside
     tr_fit's training batches and 0 in validation, test and the sanity check (turn dropout off).
     Return 0, or nonzero for an error (the run fails with TR_ERR_MODEL). Required. */
  int (*forward)(void *user, void *batch, int training, double *loss);
  /* Backward pass for the batch of the forward just before: ADD d(loss)/d(params) into grads (+=).
     The trainer zeroes grads at the start of each accumulation window and divides the sum by the
     window's size before clipping and the step. Return 0 or nonzero. Required for tr_fit. */
  int (*backward)(void *user, void *batch);
  /* Optional, for tr_predict: compute the batch's outputs and point *outputs at them (your memory,
     valid until the next call). Hooks see them as ctx->outputs. Return 0 or nonzero. */
  int (*predict)(void *user, void *batch, void **outputs);
} tr_model;

/* ---- the data (yours) -----------------------------------------------------------------------------
   Two shapes: random access (get batch i) or an iterator (next batch), as llm.c's data loader is.
   Give exactly one of get and next. */
typedef struct tr_data {
  void *user;                                          /* first argument of the functions below */
  int64_t (*count)(void *user);                        /* batches per epoch (required) */
  /* Batch `index` (0 <= index < count) in the current order: point *batch at it (your memory; it must
     stay valid until the next get). Hooks see it as ctx->batch. Return 0, or nonzero for an error. */
  int (*get)(void *user, int64_t index, void **batch);
  /* An iterator instead: the next batch. reset (optional) rewinds it at the start of every epoch that
     does not resume in its middle. For exact resume, save_state/load_state (optional; both or neither)
     write and read the iterator's position: checkpoints store it, and a fit that resumes hands it
     back before its first batch. A checkpoint written inside a training batch resumes after that
     batch (the iterator has moved past it), not at it as random-access data does. */
  int (*next)(void *user, void **batch);
  int (*reset)(void *user);
  int (*save_state)(void *user, hk_bytes *out);
  int (*load_state)(void *user, hk_reader *in);
  /* Optional: reorder your samples for a new training epoch. rng is seeded from the trainer's seed and
     the epoch number, so the same epoch gets the same order after a resume, provided the order depends
     only on the numbers drawn (start from a fixed order each time, as tr_rng_perm does). */
  void (*shuffle)(void *user, tr_rng *rng);
  int64_t batch_size;                                  /* samples per batch, for ctx->samples_seen (0 = 1) */
} tr_data;

/* ---- optimizers ------------------------------------------------------------------------------------
   The formulas are PyTorch's (torch.optim.SGD and torch.optim.AdamW), applied per element:
     SGD:   d = g + wd*p;  if momentum: buf = d on the first step, else buf = momentum*buf + (1-dampening)*d;
            d = nesterov ? d + momentum*buf : buf;   p -= lr*d
     AdamW: p -= lr*wd*p;  m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g*g;
            p -= lr * (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps)          (t = steps taken, from 1)
   The arithmetic is done in double per element; the stored values are float. */
typedef enum tr_optim_kind { TR_OPTIM_ADAMW = 0, TR_OPTIM_SGD } tr_optim_kind;

typedef struct tr_optim {
  tr_optim_kind kind;     /* 0 = AdamW */
  double lr;              /* base learning rate (the schedule scales it); 0 = 1e-3 */
  double weight_decay;    /* SGD: L2 added to the gradient; AdamW: decoupled. 0 = none */
  double momentum;        /* SGD; 0 = plain SGD */
  double dampening;       /* SGD; 0 = none (must be 0 with nesterov) */
  int nesterov;           /* SGD; needs momentum > 0 */
  double beta1, beta2;    /* AdamW; 0 = 0.9 and 0.999 */
  double eps;             /* AdamW; 0 = 1e-8 */
} tr_optim;

/* ---- learning-rate schedules --------------------------------------------------------------------
   lr(t) = optim.lr * factor(t), where t counts scheduler steps taken: optimizer steps (default) or
   finished epochs (per_epoch = 1). Every kind starts with an optional linear warmup:
     t < warmup:  factor = (t+1) / warmup
   then, with u = t - warmup:
     TR_SCHED_CONSTANT  1
     TR_SCHED_STEP      gamma ^ floor(u / step_size)
     TR_SCHED_COSINE    min_factor + (1-min_factor) * 0.5 * (1 + cos(pi * min(u, T) / T)),  T = total - warmup
   The current value is in ctx->lr before every training batch; tr_lr_at computes it anywhere. */
typedef enum tr_sched_kind { TR_SCHED_CONSTANT = 0, TR_SCHED_STEP, TR_SCHED_COSINE } tr_sched_kind;

typedef struct tr_sched {
  tr_sched_kind kind;     /* 0 = constant */
  int per_epoch;          /* 0: t counts optimizer steps; 1: t counts finished epochs */
  int64_t warmup;         /* scheduler steps of linear warmup; 0 = none */
  int64_t step_size;      /* TR_SCHED_STEP: decay every step_size scheduler steps (required there) */
  double gamma;           /* TR_SCHED_STEP: decay factor; 0 = 0.1 */
  int64_t total;          /* TR_SCHED_COSINE: scheduler steps until the minimum; 0 = tr_config.max_steps
                             (or max_epochs when per_epoch) of the fit that uses it. Set it when one
                             training is split over several fits (resume), so the curve stays put. */
  double min_factor;      /* TR_SCHED_COSINE: final lr as a fraction of optim.lr; 0 = decay to 0 */
} tr_sched;

/* lr after t scheduler steps (total must be resolved, i.e. > warmup, for the cosine kind). */
TRAIN_API double tr_lr_at(const tr_sched *s, double base_lr, int64_t t);

/* ---- the trainer ---------------------------------------------------------------------------------- */
typedef struct tr_desc {
  tr_model model;         /* required */
  hk_registry *reg;       /* your hooks; NULL: the trainer makes (and later frees) one, as t->reg */
  tr_optim optim;
  tr_sched sched;
  uint64_t seed;          /* seeds t->rng and the per-epoch shuffles; 0 is a seed like any other */
  FILE *log;              /* where HK_REQUEST_LOG lines and warnings go; NULL = stderr */
  void *user;             /* handed to hooks as ctx->user */
  /* tr_load with a hook registered whose state the checkpoint lacks (it keeps its current state), or
     with state no registered hook loads: 0 = load and warn about each, 1 = refuse (TR_ERR_STATE) */
  int strict_hook_state;
  /* the largest checkpoint file tr_load reads; 0 = what this model's checkpoint needs without hook
     state (parameters, optimizer state, gradients, counters) plus 256 MiB for hook and data state */
  uint64_t max_checkpoint_bytes;
} tr_desc;

/* How tr_fit treats a training loss that is NaN or infinite (tested on the bits, so -ffast-math
   builds still catch it). */
typedef enum tr_nonfinite {
  TR_NONFINITE_FAIL = 0,  /* fail the run with TR_ERR_NONFINITE through on_exception (default) */
  TR_NONFINITE_SKIP,      /* warn, skip the rest of the batch (no backward, no step) */
  TR_NONFINITE_IGNORE     /* do nothing */
} tr_nonfinite;

typedef enum tr_clip { TR_CLIP_NORM = 0, TR_CLIP_VALUE } tr_clip;

/* One fit. Zero means the default in every field. */
typedef struct tr_config {
  const tr_data *train;          /* required */
  const tr_data *val;            /* optional validation data (sanity check, per-epoch and per-step validation) */
  int64_t max_epochs;            /* 0 = 1000 if max_steps is 0, else no epoch limit (Lightning's rule) */
  int64_t max_steps;             /* optimizer steps; 0 = no limit */
  int64_t min_epochs, min_steps; /* a stop request (HK_STOP) is held back until both are reached */
  int64_t limit_train_batches;   /* training batches per epoch; 0 = all */
  int64_t limit_val_batches;     /* validation batches per run; 0 = all; negative = no validation */
  int num_sanity_val_steps;      /* validation batches of the sanity check; 0 = 2; negative = none */
  int64_t val_every_n_steps;     /* also validate after every N-th optimizer step; 0 = off */
  int64_t val_every_n_epochs;    /* validate at the end of every N-th epoch; 0 = 1; negative = never.
                                    Skipped when a step validation already ran at the same step. */
  int accumulate_grad_batches;   /* micro-batches per optimizer step; 0 = 1 */
  double gradient_clip_val;      /* 0 = no clipping */
  tr_clip gradient_clip_algorithm; /* 0 = by total L2 norm (PyTorch clip_grad_norm_), or by value */
  tr_nonfinite on_nonfinite_loss;/* 0 = fail */
  int no_sigint;                 /* 1: leave SIGINT alone. Default: during tr_fit the first Ctrl-C
                                    finishes the current batch, the second stops at once; both end
                                    through on_exception with TR_ERR_INTERRUPTED. The previous handler
                                    is restored when tr_fit returns. */
  const char *resume_from;       /* load this checkpoint after configure_model and continue from it */
  const char *save_to;           /* where HK_REQUEST_CHECKPOINT saves; NULL: such requests only warn */
} tr_config;

/* The trainer. Initialise with tr_init, free with tr_free. The fields above "private" may be read
   (hooks get the trainer as ctx->trainer); change them only through the functions below. */
typedef struct tr_trainer {
  hk_registry *reg;        /* the hooks (yours, or one the trainer made) */
  hk_ctx ctx;              /* what every hook sees */
  tr_model model;
  tr_optim optim;          /* with defaults filled in */
  tr_sched sched;
  tr_rng rng;              /* yours to draw from; saved in checkpoints */
  uint64_t seed;
  int64_t epoch;           /* current (or next) epoch, from 0 */
  int64_t global_step;     /* optimizer steps taken (AdamW's t; the schedule's t unless per_epoch) */
  int64_t epoch_batch;     /* training batches finished in the current epoch */
  int64_t samples_seen;
  double lr;               /* current learning rate (also ctx->lr) */
  hk_stage running;        /* the stage of the run in progress, HK_STAGE_NONE between runs */
  char error[512];         /* the last error's message ("" if none) */
  /* private */
  tr_err tr__err;          /* the first error of the run in progress */
  FILE *tr__log;
  int tr__own_reg;         /* reg was made by tr_init: tr_free destroys it */
  hk_tensor *tr__views;    /* 2*n_tensors views: params, then grads */
  tr_tensor tr__whole;     /* the single tensor used when model.tensors is NULL */
  float *tr__m, *tr__v;    /* optimizer state: SGD momentum (m) or AdamW moments (m, v) */
  int tr__n_buf;           /* how many of m, v exist: 0, 1 or 2 */
  int tr__has_momentum;    /* SGD: the momentum buffer holds a value (PyTorch copies d on the first step) */
  int64_t tr__accum_pos;   /* micro-batches seen in the current accumulation window */
  int64_t tr__accum_n;     /* ... of which ran backward (the gradient sum is divided by this) */
  int tr__grads_zeroed;    /* the current window's zero_grad happened */
  int64_t tr__val_at;      /* epoch_batch at which the last in-epoch validation ran, -1 = none */
  int tr__epoch_ended;     /* set while on_train_epoch_end runs: the epoch is complete */
  int tr__restarting;      /* a mid-epoch checkpoint was loaded: the next fit skips the sanity check */
  int64_t tr__total;       /* the cosine schedule's resolved total */
  double tr__last_loss;    /* the last training batch's loss (the lazy metric train/loss) */
  const tr_config *tr__cfg;/* the resolved config of the fit in progress */
  hk_flow tr__flow;        /* what hooks asked for: skip the step/batch, stop the epoch/training */
  hk_bytes tr__data_state; /* the training iterator's position: from a checkpoint, or the last fit's end */
  int tr__saving;          /* tr_save is running (a nested one is refused) */
  int tr__strict_hook_state;
  uint64_t tr__max_ckpt;   /* tr_desc.max_checkpoint_bytes, resolved */
} tr_trainer;

/* Hand over the model's buffers after tr_init, for a model that allocates them late (llm.c allocates
   its gradients on the first backward: allocate them in a configure_model hook and pass them here).
   NULL keeps a buffer as it is. Not during a training step. The layout (n_params, tensors) stays. */
TRAIN_API tr_err tr_set_buffers(tr_trainer *t, float *params, float *grads);

/* Set up a trainer: validates the model and the optimizer/schedule settings, allocates the optimizer
   state and the tensor views (all allocation happens here, none in the step loop). On error the
   trainer is left freed (tr_free is harmless) and tr_error(t) says why. */
TRAIN_API tr_err tr_init(tr_trainer *t, const tr_desc *desc);
TRAIN_API void   tr_free(tr_trainer *t);

/* Train. Fires setup(fit), configure_model, on_fit_start, the sanity check, on_train_start, the epochs
   (batches, optimizer hooks, validation), on_train_end, on_fit_end, teardown(fit) - in Lightning's
   order. Calling tr_fit again continues from the trainer's counters (raise max_epochs/max_steps). */
TRAIN_API tr_err tr_fit(tr_trainer *t, const tr_config *cfg);

/* Evaluation loops (forward only, no gradients). limit_batches: 0 = all. mean_loss may be NULL; it
   is NaN when no batch was evaluated. The mean also appears as the metric "val/loss" / "test/loss".
   Data without batches runs no loop events at all (setup, configure_model and teardown still run). */
TRAIN_API tr_err tr_validate(tr_trainer *t, const tr_data *data, int64_t limit_batches, double *mean_loss);
TRAIN_API tr_err tr_test(tr_trainer *t, const tr_data *data, int64_t limit_batches, double *mean_loss);
/* Calls model.predict on every batch; hooks see each batch's outputs in on_predict_batch_end. */
TRAIN_API tr_err tr_predict(tr_trainer *t, const tr_data *data, int64_t limit_batches);

/* Checkpoints (format described in the implementation section, "CHECKPOINT FORMAT").
   tr_save fires on_save_checkpoint, stores every stateful hook's state (hk_state_save) and the
   training iterator's position, writes a new temporary file <path>.tmp.<pid>.<n> (created with
   O_EXCL: an existing file or symlink there is never followed), fsyncs it and renames it over path,
   then fires on_checkpoint_saved (ctx->path). Any failure (a full disk, say) returns TR_ERR_IO naming
   the file that failed, removes the temporary file and leaves the previous checkpoint as it was.
   Temporary files left by a save that was killed are removed by the next save to the same path
   (those whose process no longer exists, where /proc tells). A tr_save from inside a save is refused;
   a tr_save from a hook never changes the run's outcome (its error is returned, not recorded).
   From a hook, prefer hk_request(ctx, HK_REQUEST_CHECKPOINT) with tr_config.save_to: the
   trainer then saves right after the current training batch (or epoch end), when every hook of that
   event has run. tr_save called directly from a hook records the loop as it is at that moment:
   from on_train_batch_end or later it resumes after that batch; from inside a training batch the
   resumed run repeats the batch (in an accumulation window a gradient it already added then counts
   twice).
   tr_load refuses what is not a regular file and files larger than tr_desc.max_checkpoint_bytes,
   reads and verifies the whole file (checksums, every field's range) before changing anything; then
   restores parameters, optimizer, schedule, counters, RNG, the data's position and hook states
   (the model tier's first), and fires on_load_checkpoint. On any error - a failing
   on_load_checkpoint hook included - the trainer and the hooks are exactly as before. A checkpoint
   without the state of a registered stateful hook, or with state no hook loads, warns (the hook keeps
   its state), or is refused under tr_desc.strict_hook_state. tr_load from a hook during a run is
   refused and leaves the run alone. */
TRAIN_API tr_err tr_save(tr_trainer *t, const char *path);
TRAIN_API tr_err tr_load(tr_trainer *t, const char *path);
TRAIN_API tr_err tr_load_mem(tr_trainer *t, const void *data, size_t len); /* the same, from memory */

TRAIN_API const char *tr_error(const tr_trainer *t);
TRAIN_API const char *tr_err_name(tr_err e);

#ifdef __cplusplus
}
#endif
#endif /* TRAIN_H */

/* =================================================================================================
   IMPLEMENTATION
   ================================================================================================= */
#ifdef TRAIN_IMPLEMENTATION
#ifndef TRAIN__IMPLEMENTED
#define TRAIN__IMPLEMENTED

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#if defined(__unix__) || defined(__APPLE__)
#  include <dirent.h>
#  include <fcntl.h>
#  include <sys/stat.h>
#  include <sys/types.h>
#  include <unistd.h>
#  define TR__POSIX 1
#endif
#ifndef TRAIN_ASSERT
#  include <assert.h>
#  define TRAIN_ASSERT(c) assert(c)
#endif
#if defined(__GNUC__) || defined(__clang__)
#  define TR__PRINTF(a, b) __attribute__((format(printf, a, b)))
#  define TR__NOINLINE __attribute__((noinline))
#else
#  define TR__PRINTF(a, b)
#  define TR__NOINLINE
#endif

#ifdef __cplusplus
extern "C" {
#endif

static tr_err tr__load_file(tr_trainer *t, const char *path); /* checkpoints, at the end */
static uint64_t tr__default_ckpt_limit(const tr_trainer *t);

/* ---- errors --------------------------------------------------------------------------------------- */

TRAIN_API const char *tr_err_name(tr_err e) {
  static const char *const names[TR_ERR_COUNT] = {
#define TR__X(sym, name, doc) name,
    TR_ERRORS(TR__X)
#undef TR__X
  };
  return (e >= 0 && e < TR_ERR_COUNT) ? names[e] : "unknown error";
}

TRAIN_API const char *tr_error(const tr_trainer *t) { return t ? t->error : "no trainer"; }

/* Record an error. The first error of a run wins (later ones are usually its consequences), and
   the run's loops check t->tr__err after every step that can fail. Returns the recorded code. */
static tr_err tr__fail(tr_trainer *t, tr_err code, const char *fmt, ...) TR__PRINTF(3, 4);
static tr_err tr__fail(tr_trainer *t, tr_err code, const char *fmt, ...) {
  if (t->tr__err == TR_OK) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->error, sizeof t->error, fmt, ap);
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
    vsnprintf(t->error, sizeof t->error, fmt, ap);
    va_end(ap);
  }
  return TR_ERR_INVALID;
}

static void tr__warn(tr_trainer *t, const char *fmt, ...) TR__PRINTF(2, 3);
static void tr__warn(tr_trainer *t, const char *fmt, ...) {
  va_list ap;
  FILE *f = t->tr__log ? t->tr__log : stderr;
  fputs("train.h: warning: ", f);
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fputc('\n', f);
}


/* ---- random numbers (splitmix64: one 64-bit word of state, good enough for shuffles and dropout) -- */

TRAIN_API void tr_rng_seed(tr_rng *r, uint64_t seed) { r->state = seed; }

TRAIN_API uint64_t tr_rng_u64(tr_rng *r) {
  uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

TRAIN_API uint32_t tr_rng_u32(tr_rng *r) { return (uint32_t)(tr_rng_u64(r) >> 32); }

TRAIN_API uint64_t tr_rng_below(tr_rng *r, uint64_t n) {
  /* Reject the top sliver that would make some values more likely than others. */
  uint64_t limit, x;
  if (n == 0) return 0;
  limit = UINT64_MAX - UINT64_MAX % n;
  do x = tr_rng_u64(r); while (x >= limit);
  return x % n;
}

TRAIN_API float tr_rng_float(tr_rng *r) { return (float)(tr_rng_u64(r) >> 40) * (1.0f / 16777216.0f); }

TRAIN_API float tr_rng_normal(tr_rng *r) {
  double u1 = ((double)(tr_rng_u64(r) >> 11) + 1.0) * (1.0 / 9007199254740992.0); /* (0, 1] */
  double u2 = (double)(tr_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

TRAIN_API void tr_rng_perm(tr_rng *r, int64_t *idx, int64_t n) {
  int64_t i;
  for (i = 0; i < n; i++) idx[i] = i;
  for (i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)tr_rng_below(r, (uint64_t)i + 1), tmp = idx[i];
    idx[i] = idx[j];
    idx[j] = tmp;
  }
}

/* The shuffle of epoch e gets its own generator, derived from the seed and e alone, so that an
   epoch resumed from a checkpoint sees exactly the order it had the first time. */
static tr_rng tr__epoch_rng(uint64_t seed, int64_t epoch) {
  tr_rng r;
  tr_rng_seed(&r, seed ^ 0x5DEECE66Dull);
  r.state = tr_rng_u64(&r) ^ ((uint64_t)epoch * 0xD1B54A32D192ED03ull);
  return r;
}

/* ---- learning-rate schedule ------------------------------------------------------------------------ */

TRAIN_API double tr_lr_at(const tr_sched *s, double base_lr, int64_t t) {
  int64_t warmup = s->warmup > 0 ? s->warmup : 0, u;
  if (t < 0) t = 0;
  if (t < warmup) return base_lr * (double)(t + 1) / (double)warmup;
  u = t - warmup;
  switch (s->kind) {
  case TR_SCHED_STEP: {
    double gamma = s->gamma > 0 ? s->gamma : 0.1;
    int64_t size = s->step_size > 0 ? s->step_size : 1;
    return base_lr * pow(gamma, (double)(u / size));
  }
  case TR_SCHED_COSINE: {
    double T = (double)(s->total - warmup), x = (double)u;
    if (T <= 0) return base_lr * s->min_factor;
    if (x > T) x = T;
    return base_lr * (s->min_factor + (1.0 - s->min_factor) * 0.5 * (1.0 + cos(3.141592653589793 * x / T)));
  }
  default: return base_lr; /* constant (after its warmup, if any) */
  }
}

/* The lr for the next optimizer step: the schedule's t is steps taken, or epochs finished. */
static double tr__current_lr(const tr_trainer *t) {
  tr_sched s = t->sched;
  s.total = t->tr__total;
  return tr_lr_at(&s, t->optim.lr, s.per_epoch ? t->epoch : t->global_step);
}

/* ---- setup --------------------------------------------------------------------------------------- */

/* The trainer's metrics are lazy: reading them costs a function call when a hook asks for one, and
   the step loop never touches the metrics map (no hashing, no allocation). The gradient norm is
   hooks.h's hk_grad_norm: computed when first asked after the gradients changed, then shared by
   every hook and by clipping. */
static double tr__lr_metric(const hk_ctx *ctx, void *user) { (void)ctx; return ((const tr_trainer *)user)->lr; }
static double tr__loss_metric(const hk_ctx *ctx, void *user) { (void)ctx; return ((const tr_trainer *)user)->tr__last_loss; }

/* Views sorted by offset, for the tiling check. */
static int tr__by_offset(const void *a, const void *b) {
  size_t x = ((const tr_tensor *)a)->offset, y = ((const tr_tensor *)b)->offset;
  return x < y ? -1 : x > y;
}

/* Every parameter must lie in exactly one named tensor: the gradient norm, value clipping and the
   hooks all go through the views, so a gap or an overlap would make them disagree with the update. */
static tr_err tr__check_tiling(tr_trainer *t) {
  int i, n = t->model.n_tensors;
  size_t end = 0;
  tr_tensor *v = (tr_tensor *)malloc(sizeof *v * (size_t)n);
  if (!v) return tr__fail(t, TR_ERR_NOMEM, "tr_init: out of memory checking %d tensors", n);
  memcpy(v, t->model.tensors, sizeof *v * (size_t)n);
  qsort(v, (size_t)n, sizeof *v, tr__by_offset);
  for (i = 0; i < n && v[i].offset == end; i++) end += v[i].count;
  if (i < n || end != t->model.n_params) {
    if (i < n && v[i].offset < end) tr__fail(t, TR_ERR_INVALID, "tr_init: tensors '%s' and '%s' overlap (each parameter must "
                                             "belong to exactly one tensor)", v[i - 1].name, v[i].name);
    else tr__fail(t, TR_ERR_INVALID, "tr_init: parameters %zu..%zu belong to no tensor (the tensors must cover all %zu "
                  "parameters, without gaps)", end, (i < n ? v[i].offset : t->model.n_params) - 1, t->model.n_params);
  }
  free(v);
  return t->tr__err;
}

/* Point the views at the buffers (grads may still be NULL: tr_set_buffers comes later). */
static void tr__point_views(tr_trainer *t) {
  int i, n = t->model.n_tensors;
  for (i = 0; i < n; i++) {
    const tr_tensor *x = &t->model.tensors[i];
    hk_tensor *p = &t->tr__views[i], *g = &t->tr__views[n + i];
    p->name = g->name = x->name;
    p->count = g->count = x->count;
    p->data = t->model.params + x->offset;
    g->data = t->model.grads ? t->model.grads + x->offset : NULL;
  }
  hk_grads_changed(&t->ctx);
}

TRAIN_API tr_err tr_set_buffers(tr_trainer *t, float *params, float *grads) {
  if (!t || !t->tr__views) return TR_ERR_INVALID;
  if (t->tr__accum_pos > 0 || t->tr__grads_zeroed)
    return tr__refuse(t, "tr_set_buffers: an accumulation window is in progress; its gradient sum lives in the "
                      "current buffer (hand buffers over before training, e.g. in configure_model)");
  if (params) t->model.params = params;
  if (grads) t->model.grads = grads;
  tr__point_views(t);
  return TR_OK;
}

static int tr__bad_number(double x, double lo, double hi) { return !hk_is_finite(x) || x < lo || x > hi; }

TRAIN_API void tr_free(tr_trainer *t) {
  if (!t) return;
  hk_ctx_free(&t->ctx);
  hk_bytes_free(&t->tr__data_state);
  if (t->tr__own_reg && t->reg) hk_destroy(t->reg);
  free(t->tr__views);
  free(t->tr__m);
  free(t->tr__v);
  t->reg = NULL;
  t->tr__views = NULL;
  t->tr__m = t->tr__v = NULL;
  t->tr__own_reg = 0;
}

TRAIN_API tr_err tr_init(tr_trainer *t, const tr_desc *d) {
  const tr_model *m;
  tr_optim *o;
  int i, j, n;
  if (!t) return TR_ERR_INVALID;
  memset(t, 0, sizeof *t);
  t->running = HK_STAGE_NONE;
  t->tr__val_at = -1;
  if (!d) return tr__fail(t, TR_ERR_INVALID, "tr_init: desc is NULL");
  t->tr__log = d->log;
  t->model = d->model;
  m = &t->model;
  if (!m->params || m->n_params == 0)
    return tr__fail(t, TR_ERR_INVALID, "tr_init: model.params and model.n_params are required (model.grads may "
                    "come later, through tr_set_buffers)");
  if (!m->forward) return tr__fail(t, TR_ERR_INVALID, "tr_init: model.forward is required");
  if (m->n_tensors < 0 || (m->n_tensors > 0 && !m->tensors) || (m->tensors && m->n_tensors == 0))
    return tr__fail(t, TR_ERR_INVALID, "tr_init: model.tensors and model.n_tensors must be given together");
  if (!m->tensors) { /* no names given: one tensor covering the whole buffer */
    t->tr__whole.name = "params";
    t->tr__whole.offset = 0;
    t->tr__whole.count = m->n_params;
    t->model.tensors = &t->tr__whole;
    t->model.n_tensors = 1;
  }
  n = t->model.n_tensors;
  for (i = 0; i < n; i++) {
    const tr_tensor *x = &t->model.tensors[i];
    if (!x->name || !x->name[0]) return tr__fail(t, TR_ERR_INVALID, "tr_init: tensor %d has no name", i);
    if (x->offset > m->n_params || x->count > m->n_params - x->offset)
      return tr__fail(t, TR_ERR_INVALID, "tr_init: tensor '%s' (offset %zu, count %zu) lies outside the %zu parameters",
                      x->name, x->offset, x->count, m->n_params);
    for (j = 0; j < i; j++)
      if (strcmp(t->model.tensors[j].name, x->name) == 0)
        return tr__fail(t, TR_ERR_INVALID, "tr_init: two tensors are named '%s'", x->name);
  }
  if (tr__check_tiling(t)) return t->tr__err;

  /* The optimizer: fill in the defaults, then check (PyTorch raises on the same values). */
  t->optim = d->optim;
  o = &t->optim;
  if (o->kind != TR_OPTIM_ADAMW && o->kind != TR_OPTIM_SGD)
    return tr__fail(t, TR_ERR_INVALID, "tr_init: optim.kind %d is not an optimizer", (int)o->kind);
  if (o->lr == 0) o->lr = 1e-3;
  if (o->beta1 == 0) o->beta1 = 0.9;
  if (o->beta2 == 0) o->beta2 = 0.999;
  if (o->eps == 0) o->eps = 1e-8;
  if (tr__bad_number(o->lr, 0, HUGE_VAL) || o->lr <= 0) return tr__fail(t, TR_ERR_INVALID, "tr_init: optim.lr must be > 0");
  if (tr__bad_number(o->weight_decay, 0, HUGE_VAL)) return tr__fail(t, TR_ERR_INVALID, "tr_init: optim.weight_decay must be >= 0");
  if (tr__bad_number(o->momentum, 0, HUGE_VAL)) return tr__fail(t, TR_ERR_INVALID, "tr_init: optim.momentum must be >= 0");
  if (tr__bad_number(o->dampening, 0, 1)) return tr__fail(t, TR_ERR_INVALID, "tr_init: optim.dampening must be in [0, 1]");
  if (o->nesterov && (o->momentum <= 0 || o->dampening != 0))
    return tr__fail(t, TR_ERR_INVALID, "tr_init: nesterov needs momentum > 0 and dampening 0");
  if (tr__bad_number(o->beta1, 0, 1) || o->beta1 >= 1 || tr__bad_number(o->beta2, 0, 1) || o->beta2 >= 1)
    return tr__fail(t, TR_ERR_INVALID, "tr_init: optim.beta1 and optim.beta2 must be in [0, 1)");
  if (tr__bad_number(o->eps, 0, HUGE_VAL)) return tr__fail(t, TR_ERR_INVALID, "tr_init: optim.eps must be > 0");

  t->sched = d->sched;
  if (t->sched.kind < TR_SCHED_CONSTANT || t->sched.kind > TR_SCHED_COSINE)
    return tr__fail(t, TR_ERR_INVALID, "tr_init: sched.kind %d is not a schedule", (int)t->sched.kind);
  if (t->sched.warmup < 0 || t->sched.step_size < 0 || t->sched.total < 0)
    return tr__fail(t, TR_ERR_INVALID, "tr_init: sched.warmup, sched.step_size and sched.total must be >= 0");
  if (t->sched.kind == TR_SCHED_STEP && t->sched.step_size == 0)
    return tr__fail(t, TR_ERR_INVALID, "tr_init: the step schedule needs sched.step_size");
  if (t->sched.gamma == 0) t->sched.gamma = 0.1;
  if (tr__bad_number(t->sched.gamma, 0, HUGE_VAL) || tr__bad_number(t->sched.min_factor, 0, 1))
    return tr__fail(t, TR_ERR_INVALID, "tr_init: sched.gamma must be > 0 and sched.min_factor in [0, 1]");
  t->tr__total = t->sched.total;

  /* Everything the step loop needs is allocated now, once. */
  t->tr__n_buf = o->kind == TR_OPTIM_ADAMW ? 2 : (o->momentum > 0 ? 1 : 0);
  t->tr__views = (hk_tensor *)calloc((size_t)n * 2, sizeof(hk_tensor));
  if (t->tr__n_buf >= 1) t->tr__m = (float *)calloc(m->n_params, sizeof(float));
  if (t->tr__n_buf >= 2) t->tr__v = (float *)calloc(m->n_params, sizeof(float));
  if (!t->tr__views || (t->tr__n_buf >= 1 && !t->tr__m) || (t->tr__n_buf >= 2 && !t->tr__v)) {
    tr_free(t);
    return tr__fail(t, TR_ERR_NOMEM, "tr_init: out of memory for %zu parameters", m->n_params);
  }
  tr__point_views(t);
  if (d->reg) t->reg = d->reg;
  else {
    t->reg = hk_create(NULL);
    if (!t->reg) { tr_free(t); return tr__fail(t, TR_ERR_NOMEM, "tr_init: out of memory for the hook registry"); }
    t->tr__own_reg = 1;
  }

  t->seed = d->seed;
  tr_rng_seed(&t->rng, d->seed);
  t->tr__strict_hook_state = d->strict_hook_state != 0;
  t->tr__max_ckpt = d->max_checkpoint_bytes ? d->max_checkpoint_bytes : tr__default_ckpt_limit(t);
  t->lr = o->lr;
  t->ctx.trainer = t;
  t->ctx.user = d->user;
  t->ctx.params = t->tr__views;
  t->ctx.grads = t->tr__views + n;
  t->ctx.n_tensors = n;
  t->ctx.world_size = 1;
  t->ctx.lr = t->lr;
  t->tr__last_loss = NAN; /* no training batch yet */
  if (hk_metric_lazy(&t->ctx, "lr", tr__lr_metric, t) != HK_OK ||
      hk_metric_lazy(&t->ctx, "train/loss", tr__loss_metric, t) != HK_OK ||
      hk_metric_lazy(&t->ctx, "grad_norm", hk_grad_norm_metric, NULL) != HK_OK) {
    tr_free(t);
    return tr__fail(t, TR_ERR_NOMEM, "tr_init: could not register the metrics");
  }
  return TR_OK;
}

/* ---- Ctrl-C -----------------------------------------------------------------------------------------
   The handler only counts (all a signal handler may safely do); the loops look at the count between
   steps. 1: finish the current batch, then fail with TR_ERR_INTERRUPTED. 2: fail at the next event. */
static volatile sig_atomic_t tr__sigint_count;

static void tr__on_sigint(int sig) {
  tr__sigint_count = tr__sigint_count >= 1 ? 2 : 1;
  signal(sig, tr__on_sigint); /* where signal() has System V semantics, the handler must be re-armed */
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
  if (tr__sigint_count >= 2) tr__fail(t, TR_ERR_INTERRUPTED, "interrupted (Ctrl-C twice)");
}

/* hooks.h reports a fatal failure only through ctx.hook_failure; this is where train.h reports it. */
static inline void tr__fire(tr_trainer *t, int event) {
  if (t->tr__err) return;
  (void)HK_FIRE_FLOW(t->reg, event, &t->ctx, &t->tr__flow);
  if (t->ctx.hook_failure || tr__sigint_count >= 2) tr__settle(t);
}

/* "Do this unless a hook skipped it": the batch's work and events stop at HK_SKIP_BATCH (or an
   error); the optimizer's stop at HK_SKIP_STEP too. */
static int tr__skips(const tr_trainer *t, unsigned mask) { return t->tr__err || HK_FLOW_HAS(&t->tr__flow, mask); }
static void tr__fire_unless(tr_trainer *t, unsigned mask, int event) { if (!tr__skips(t, mask)) tr__fire(t, event); }

/* The failure path: every on_exception handler runs (hooks.h runs them all, even if one fails), then
   teardown, which always runs. Lightning skips teardown on errors; we do not. */
static tr_err tr__abort(tr_trainer *t, hk_stage stage) {
  tr__sigint_count = 0; /* handled: an on_exception handler may still save a checkpoint */
  t->ctx.abort_reason = t->error;
  t->ctx.hook_failure = NULL;
  (void)HK_FIRE(t->reg, HK_ON_EXCEPTION, &t->ctx);
  tr__settle(t); /* the run has failed already: a failing handler is reported, not recorded */
  t->ctx.stage = stage;
  (void)HK_FIRE(t->reg, HK_TEARDOWN, &t->ctx);
  tr__settle(t);
  t->ctx.abort_reason = NULL;
  return t->tr__err;
}

/* Write the HK_REQUEST_LOG line: counters, then every metric. */
static void tr__log_line(tr_trainer *t) {
  FILE *f = t->tr__log ? t->tr__log : stderr;
  int i, n = hk_metric_count(&t->ctx);
  fprintf(f, "epoch=%lld step=%lld batch=%lld loss=%.6g lr=%.6g", (long long)t->ctx.epoch,
          (long long)t->ctx.global_step, (long long)t->ctx.batch_idx, t->ctx.loss, t->ctx.lr);
  for (i = 0; i < n; i++) {
    double v = 0;
    const char *name = hk_metric_at(&t->ctx, i, &v);
    if (name) fprintf(f, " %s=%.6g", name, v);
  }
  fputc('\n', f);
}

/* ---- the work of a step -------------------------------------------------------------------------
   Each piece does nothing once a hook has skipped it (or the run has failed), so the batch below
   reads as a straight list. */

/* Fetch batch b of data into ctx.batch (random access, or the iterator's next). */
static void *tr__fetch(tr_trainer *t, const tr_data *d, int64_t b, const char *what) {
  void *batch = NULL;
  int rc = d->next ? d->next(d->user, &batch) : d->get(d->user, b, &batch);
  if (rc) tr__fail(t, TR_ERR_MODEL, "%s data: %s(%lld) returned %d", what, d->next ? "next" : "get", (long long)b, rc);
  t->ctx.batch_idx = b;
  t->ctx.batch = batch;
  t->ctx.outputs = NULL;
  t->ctx.loss = NAN; /* until the forward pass; it stays NaN in a batch skipped before it */
  return batch;
}

/* The forward pass of a training batch. A non-finite loss (tested on the bits, so -Ofast builds
   catch it) fails the run, skips the batch or is ignored, as tr_config.on_nonfinite_loss says. */
static void tr__forward(tr_trainer *t, void *batch) {
  const tr_config *c = t->tr__cfg;
  double loss = 0;
  int rc;
  if (tr__skips(t, HK_FLOW_SKIP_BATCH)) return;
  rc = t->model.forward(t->model.user, batch, 1, &loss);
  if (rc) { tr__fail(t, TR_ERR_MODEL, "model.forward returned %d on training batch %lld", rc, (long long)t->epoch_batch); return; }
  t->ctx.loss = t->tr__last_loss = loss;
  if (hk_is_finite(loss) || c->on_nonfinite_loss == TR_NONFINITE_IGNORE) return;
  if (c->on_nonfinite_loss == TR_NONFINITE_FAIL) {
    tr__fail(t, TR_ERR_NONFINITE, "the training loss is %f at epoch %lld, batch %lld, step %lld", loss,
             (long long)t->epoch, (long long)t->epoch_batch, (long long)t->global_step);
    return;
  }
  tr__warn(t, "the training loss is %f at epoch %lld, batch %lld: batch skipped", loss, (long long)t->epoch, (long long)t->epoch_batch);
  hk_flow_raise(&t->tr__flow, HK_SKIP_BATCH);
}

/* Zero the gradients once per accumulation window, in its first micro-batch that gets this far
   (Lightning: when batch_idx % accumulate_grad_batches == 0). */
static void tr__zero_grad(tr_trainer *t) {
  if (tr__skips(t, HK_FLOW_SKIP_BATCH)) return;
  memset(t->model.grads, 0, t->model.n_params * sizeof(float));
  hk_grads_changed(&t->ctx);
  t->tr__grads_zeroed = 1;
}

static void tr__backward(tr_trainer *t, void *batch) {
  int rc;
  if (tr__skips(t, HK_FLOW_SKIP_BATCH)) return;
  rc = t->model.backward(t->model.user, batch);
  if (rc) { tr__fail(t, TR_ERR_MODEL, "model.backward returned %d on training batch %lld", rc, (long long)t->epoch_batch); return; }
  hk_grads_changed(&t->ctx);
  t->tr__accum_n++; /* micro-batches of this window whose gradient is in the sum */
}

/* The window's gradient is the mean over its micro-batches that ran backward; a window where none did
   gets no step. */
static void tr__average_window(tr_trainer *t) {
  size_t i;
  float scale;
  if (t->tr__accum_n == 0) hk_flow_raise(&t->tr__flow, HK_SKIP_STEP);
  if (tr__skips(t, HK_FLOW_SKIP_STEP) || t->tr__accum_n == 1) return;
  scale = 1.0f / (float)t->tr__accum_n;
  for (i = 0; i < t->model.n_params; i++) t->model.grads[i] *= scale;
  hk_grads_changed(&t->ctx);
}

/* Clip by the total L2 norm (PyTorch's clip_grad_norm_: scale by limit / (norm + 1e-6) when that is
   below 1) or by value. The norm before clipping stays hk_grad_norm's value for the rest of the step:
   clipping by norm reads it (computed once, shared with every hook that asks); clipping by value
   computes it in the same pass, so a hook reading it later finds the norm before clipping. */
static void tr__clip_gradients(tr_trainer *t) {
  const tr_config *c = t->tr__cfg;
  float *g = t->model.grads;
  size_t i, n = t->model.n_params;
  if (tr__skips(t, HK_FLOW_SKIP_STEP)) return;
  if (c->gradient_clip_algorithm == TR_CLIP_NORM) {
    double coef = c->gradient_clip_val / (hk_grad_norm(&t->ctx) + 1e-6);
    if (coef < 1.0) {
      float k = (float)coef;
      for (i = 0; i < n; i++) g[i] *= k;
    }
  } else { /* over the views (they tile the buffer), in hk_grad_norm's order: the same bits */
    float hi = (float)c->gradient_clip_val, lo = -hi;
    double sum = 0;
    int k;
    for (k = 0; k < t->ctx.n_tensors; k++) {
      float *x = t->ctx.grads[k].data;
      for (i = 0; i < t->ctx.grads[k].count; i++) {
        sum += (double)x[i] * x[i];
        x[i] = x[i] > hi ? hi : (x[i] < lo ? lo : x[i]);
      }
    }
    hk_grad_norm_set(&t->ctx, sqrt(sum));
  }
}

/* One optimizer update with learning rate lr; t->global_step + 1 is the step number.
   noinline: inlined into tr_fit, gcc has laid this loop out as a cold block that calls libm's sqrt
   for every element (+3% per step in bench/bench_train.c). */
static TR__NOINLINE void tr__update(tr_trainer *t, double lr) {
  const tr_optim *o = &t->optim;
  float *p = t->model.params, *g = t->model.grads, *m = t->tr__m, *v = t->tr__v;
  size_t i, n = t->model.n_params;
  if (o->kind == TR_OPTIM_ADAMW) {
    double step = (double)(t->global_step + 1);
    double b1 = o->beta1, b2 = o->beta2, eps = o->eps;
    double bc1 = 1.0 - pow(b1, step), bc2_sqrt = sqrt(1.0 - pow(b2, step));
    double decay = 1.0 - lr * o->weight_decay; /* decoupled weight decay: p -= lr*wd*p */
    for (i = 0; i < n; i++) {
      double gi = g[i];
      double mi = b1 * m[i] + (1.0 - b1) * gi;
      double vi = b2 * v[i] + (1.0 - b2) * gi * gi;
      double pi = p[i] * decay;
      pi -= (lr / bc1) * mi / (sqrt(vi) / bc2_sqrt + eps);
      m[i] = (float)mi;
      v[i] = (float)vi;
      p[i] = (float)pi;
    }
  } else {
    double mu = o->momentum, damp = o->dampening, wd = o->weight_decay;
    int first = !t->tr__has_momentum;
    for (i = 0; i < n; i++) {
      double d = (double)g[i] + wd * p[i];
      if (mu > 0) {
        double buf = first ? d : mu * m[i] + (1.0 - damp) * d;
        m[i] = (float)buf;
        d = o->nesterov ? d + mu * buf : buf;
      }
      p[i] = (float)(p[i] - lr * d);
    }
    if (mu > 0) t->tr__has_momentum = 1;
  }
}

/* The update, then global_step moves (before on_after_optimizer_step, as in the context contract). */
static void tr__optimizer_step(tr_trainer *t) {
  if (tr__skips(t, HK_FLOW_SKIP_STEP)) return;
  tr__update(t, t->lr);
  t->ctx.global_step = ++t->global_step;
}

/* The end of an accumulation window: its bookkeeping and a skipped step are forgotten. */
static void tr__end_window(tr_trainer *t) {
  t->tr__accum_pos = t->tr__accum_n = 0;
  t->tr__grads_zeroed = 0;
  hk_flow_clear(&t->tr__flow, HK_SIGNAL_BIT(HK_SKIP_STEP));
}

/* ---- the evaluation loops (validation, test, predict, sanity check) ---------------------------------- */

typedef struct tr__loop_events { int start, epoch_start, batch_start, batch_end, epoch_end, end; } tr__loop_events;
static const tr__loop_events tr__val_events = {
  HK_ON_VALIDATION_START, HK_ON_VALIDATION_EPOCH_START, HK_ON_VALIDATION_BATCH_START,
  HK_ON_VALIDATION_BATCH_END, HK_ON_VALIDATION_EPOCH_END, HK_ON_VALIDATION_END };
static const tr__loop_events tr__test_events = {
  HK_ON_TEST_START, HK_ON_TEST_EPOCH_START, HK_ON_TEST_BATCH_START,
  HK_ON_TEST_BATCH_END, HK_ON_TEST_EPOCH_END, HK_ON_TEST_END };
static const tr__loop_events tr__predict_events = {
  HK_ON_PREDICT_START, HK_ON_PREDICT_EPOCH_START, HK_ON_PREDICT_BATCH_START,
  HK_ON_PREDICT_BATCH_END, HK_ON_PREDICT_EPOCH_END, HK_ON_PREDICT_END };

/* What one evaluation loop runs: its events, its data, and where its mean loss goes. */
typedef struct tr__eval {
  const tr__loop_events *ev;
  const tr_data *data;
  int64_t limit;        /* batches; 0 = all */
  int predict;          /* model.predict instead of forward; no loss */
  const char *metric;   /* the mean loss's metric name, or NULL */
  const char *what;     /* for messages */
  double *mean;         /* where the mean loss goes, or NULL */
} tr__eval;

/* Number of batches to run: the data's count, capped by limit (> 0). */
static int64_t tr__n_batches(tr_trainer *t, const tr_data *data, int64_t limit, const char *what) {
  int64_t n = data->count(data->user);
  if (n < 0) { tr__fail(t, TR_ERR_MODEL, "%s data: count() returned %lld", what, (long long)n); return 0; }
  return (limit > 0 && limit < n) ? limit : n;
}

/* One evaluation batch: forward (its loss joins the mean) or predict (ctx->outputs). */
static void tr__eval_forward(tr_trainer *t, const tr__eval *e, void *batch, double *sum, int64_t *counted) {
  double loss = 0;
  int rc;
  if (tr__skips(t, HK_FLOW_SKIP_BATCH)) return;
  if (e->predict) {
    rc = t->model.predict(t->model.user, batch, &t->ctx.outputs);
    if (rc) tr__fail(t, TR_ERR_MODEL, "model.predict returned %d on batch %lld", rc, (long long)t->ctx.batch_idx);
    return;
  }
  rc = t->model.forward(t->model.user, batch, 0, &loss);
  if (rc) { tr__fail(t, TR_ERR_MODEL, "model.forward returned %d on %s batch %lld", rc, e->what, (long long)t->ctx.batch_idx); return; }
  t->ctx.loss = loss;
  *sum += loss;
  ++*counted;
}

/* start, epoch_start, every batch, epoch_end, end; nothing at all when the data has no batches. The
   mean loss goes into the metric before epoch_end. HK_STOP_EPOCH and HK_SKIP_BATCH mean this loop's
   epoch and batches: the loop keeps its own (`own`) and gives the training loop's back afterwards.
   HK_STOP ends a standalone run like HK_STOP_EPOCH; inside fit it only asks training to stop (the
   validation finishes), so it stays in the flow for the fit, next to a held stop or a skipped step
   (which a checkpoint written during the validation records). */
static tr_err tr__eval_loop(tr_trainer *t, const tr__eval *e) {
  int in_fit = t->running == HK_STAGE_FIT;
  unsigned own = HK_SIGNAL_BIT(HK_SKIP_BATCH) | HK_SIGNAL_BIT(HK_STOP_EPOCH) | (in_fit ? 0 : HK_SIGNAL_BIT(HK_STOP));
  unsigned ends = in_fit ? HK_SIGNAL_BIT(HK_STOP_EPOCH) : HK_FLOW_STOP_EPOCH;
  unsigned outer = t->tr__flow.signals;
  int64_t b, n, counted = 0;
  double sum = 0, mean = NAN;
  int64_t saved_idx = t->ctx.batch_idx; /* inside fit, the training batch's view comes back after */
  double saved_loss = t->ctx.loss;
  void *saved_batch = t->ctx.batch;

  if (e->mean) *e->mean = NAN;
  n = tr__n_batches(t, e->data, e->limit, e->what);
  if (t->tr__err || n == 0) return t->tr__err; /* no batches: no loop at all (as in Lightning) */
  hk_flow_clear(&t->tr__flow, own);
  if (e->data->reset && e->data->reset(e->data->user))
    tr__fail(t, TR_ERR_MODEL, "%s data: reset() failed", e->what);
  tr__fire(t, e->ev->start);
  tr__fire(t, e->ev->epoch_start);
  for (b = 0; b < n && !tr__skips(t, ends); b++) {
    void *batch = tr__fetch(t, e->data, b, e->what);
    tr__fire(t, e->ev->batch_start);
    tr__eval_forward(t, e, batch, &sum, &counted);
    tr__fire(t, e->ev->batch_end);
    hk_flow_clear(&t->tr__flow, HK_FLOW_BATCH_SIGNALS);
  }
  t->ctx.outputs = NULL;
  if (!e->predict) {
    mean = counted ? sum / (double)counted : NAN; /* NaN: every batch was skipped */
    t->ctx.loss = mean;
    if (e->metric && !t->tr__err && hk_metric_set(&t->ctx, e->metric, mean) != HK_OK)
      tr__fail(t, TR_ERR_NOMEM, "could not set the metric %s", e->metric);
  }
  if (e->mean) *e->mean = mean;
  tr__fire(t, e->ev->epoch_end);
  tr__fire(t, e->ev->end);
  t->ctx.batch_idx = saved_idx;
  t->ctx.batch = saved_batch;
  if (in_fit) t->ctx.loss = saved_loss;
  t->tr__flow.signals = (t->tr__flow.signals & ~own) | (outer & own);
  return t->tr__err;
}

/* ---- runs -------------------------------------------------------------------------------------------
   fit, validate, test and predict start and end the same way: refuse to start inside another run,
   setup(stage), configure_model, the body, then teardown; on failure on_exception, then teardown. */

static tr_err tr__idle(tr_trainer *t, const char *fn) {
  if (t->running != HK_STAGE_NONE)
    return tr__refuse(t, "%s called during a %s run (from a hook?); call it when the run has returned", fn, hk_stage_name(t->running));
  t->tr__err = TR_OK;
  t->error[0] = 0;
  return TR_OK;
}

static tr_err tr__run(tr_trainer *t, hk_stage stage, void (*body)(tr_trainer *t, const void *arg), const void *arg) {
  hk_flow kept = t->tr__flow; /* a fit starts from what a checkpoint holds (a held stop, a skipped step) */
  tr_err e;
  t->running = stage;
  t->ctx.stage = stage;
  t->ctx.requests = 0;
  if (stage != HK_STAGE_FIT) t->tr__flow.signals = 0;
  tr__fire(t, HK_SETUP);
  tr__fire(t, HK_CONFIGURE_MODEL);
  if (!t->tr__err) body(t, arg);
  if (t->tr__err) e = tr__abort(t, stage);
  else {
    t->ctx.stage = stage;
    tr__fire(t, HK_TEARDOWN);
    e = TR_OK; /* teardown honours no signal */
  }
  t->running = HK_STAGE_NONE;
  t->ctx.stage = HK_STAGE_NONE;
  t->ctx.batch = NULL;
  t->ctx.requests = 0;
  t->tr__flow.signals = stage == HK_STAGE_FIT ? 0 : kept.signals; /* a fit consumes its signals */
  return e;
}

static void tr__eval_body(tr_trainer *t, const void *arg) {
  tr__eval_loop(t, (const tr__eval *)arg);
  if (!t->tr__err && (t->ctx.requests & HK_REQUEST_LOG)) tr__log_line(t);
}

static tr_err tr__eval_run(tr_trainer *t, hk_stage stage, const tr__eval *e, const char *fn) {
  if (!t) return TR_ERR_INVALID;
  if (tr__idle(t, fn)) return TR_ERR_INVALID;
  if (!e->data || !e->data->count || !e->data->get == !e->data->next)
    return tr__fail(t, TR_ERR_INVALID, "%s: the data needs count, and get or next (one of them)", fn);
  if (e->predict && !t->model.predict) return tr__fail(t, TR_ERR_INVALID, "tr_predict: model.predict is not set");
  return tr__run(t, stage, tr__eval_body, e);
}

TRAIN_API tr_err tr_validate(tr_trainer *t, const tr_data *data, int64_t limit_batches, double *mean_loss) {
  tr__eval e = { &tr__val_events, data, limit_batches, 0, "val/loss", "validate", mean_loss };
  return tr__eval_run(t, HK_STAGE_VALIDATE, &e, "tr_validate");
}
TRAIN_API tr_err tr_test(tr_trainer *t, const tr_data *data, int64_t limit_batches, double *mean_loss) {
  tr__eval e = { &tr__test_events, data, limit_batches, 0, "test/loss", "test", mean_loss };
  return tr__eval_run(t, HK_STAGE_TEST, &e, "tr_test");
}
TRAIN_API tr_err tr_predict(tr_trainer *t, const tr_data *data, int64_t limit_batches) {
  tr__eval e = { &tr__predict_events, data, limit_batches, 1, NULL, "predict", NULL };
  return tr__eval_run(t, HK_STAGE_PREDICT, &e, "tr_predict");
}

/* ---- the training loop ------------------------------------------------------------------------------- */

static int tr__can_stop(const tr_trainer *t) {
  return t->epoch >= t->tr__cfg->min_epochs && t->global_step >= t->tr__cfg->min_steps;
}
/* A graceful stop (HK_STOP) takes effect once min_epochs and min_steps are reached; until then it is held. */
static int tr__stopping(const tr_trainer *t) {
  return (t->tr__flow.signals & HK_SIGNAL_BIT(HK_STOP)) && tr__can_stop(t);
}

/* Validation inside fit. tr__val_at is set first, so that a checkpoint written during this
   validation resumes after it instead of repeating it. */
static void tr__fit_validate(tr_trainer *t) {
  const tr_config *c = t->tr__cfg;
  tr__eval e = { &tr__val_events, c->val, c->limit_val_batches, 0, "val/loss", "validation", NULL };
  if (t->tr__err) return;
  t->tr__val_at = t->epoch_batch;
  tr__eval_loop(t, &e);
}

/* A safe point (after a training batch or an epoch): honour what hooks requested. */
static void tr__honour_requests(tr_trainer *t) {
  const tr_config *c = t->tr__cfg;
  unsigned r = t->ctx.requests;
  if (t->tr__err) return;
  t->ctx.requests = 0; /* cleared first: a hook that requests again during validation gets a new turn */
  if (r & HK_REQUEST_VALIDATION) {
    if (c->val) tr__fit_validate(t);
    else tr__warn(t, "a hook requested a validation but tr_config.val is not set");
  }
  if ((r & HK_REQUEST_CHECKPOINT) && !t->tr__err) {
    if (!c->save_to) tr__warn(t, "a hook requested a checkpoint but tr_config.save_to is not set");
    else {
      tr_err e = tr_save(t, c->save_to); /* its failure is the run's failure: the hook asked for it */
      if (e) {
        char why[sizeof t->error];
        memcpy(why, t->error, sizeof why);
        tr__fail(t, e, "%s", why);
      }
    }
  }
  if ((r & HK_REQUEST_LOG) && !t->tr__err) tr__log_line(t);
}

/* One training batch, in Lightning's order. Each line fires an event or does a piece of work; once a
   hook skips the batch (HK_SKIP_BATCH) or the window's step (HK_SKIP_STEP), or anything fails, the
   lines it covers do nothing, and on_train_batch_end still fires (unless the run failed). */
static void tr__train_batch(tr_trainer *t, int64_t n_batches) {
  const tr_config *c = t->tr__cfg;
  int64_t steps_before = t->global_step;
  int window_ends = t->tr__accum_pos + 1 >= c->accumulate_grad_batches || t->epoch_batch + 1 >= n_batches;
  void *batch;

  t->lr = t->ctx.lr = tr__current_lr(t);
  batch = tr__fetch(t, c->train, t->epoch_batch, "train");
  tr__fire(t, HK_ON_TRAIN_BATCH_START);
  tr__forward(t, batch);
  if (!t->tr__grads_zeroed) {              /* the window's first micro-batch that gets this far */
    tr__fire_unless(t, HK_FLOW_SKIP_BATCH, HK_ON_BEFORE_ZERO_GRAD);
    tr__zero_grad(t);
  }
  tr__fire_unless(t, HK_FLOW_SKIP_BATCH, HK_ON_BEFORE_BACKWARD);
  tr__backward(t, batch);
  tr__fire_unless(t, HK_FLOW_SKIP_BATCH, HK_ON_AFTER_BACKWARD);
  t->tr__accum_pos++;                      /* with accum_n: a checkpoint taken mid-batch stays consistent */
  if (window_ends) {                       /* the last micro-batch of the window steps */
    tr__average_window(t);
    tr__fire_unless(t, HK_FLOW_SKIP_STEP, HK_ON_BEFORE_OPTIMIZER_STEP);
    if (c->gradient_clip_val > 0) {
      tr__clip_gradients(t);
      tr__fire_unless(t, HK_FLOW_SKIP_STEP, HK_ON_GRADIENT_CLIP);
    }
    tr__optimizer_step(t);
    tr__fire_unless(t, HK_FLOW_SKIP_STEP, HK_ON_AFTER_OPTIMIZER_STEP);
    tr__end_window(t);
  }
  t->epoch_batch++;
  t->samples_seen += c->train->batch_size > 0 ? c->train->batch_size : 1;
  t->ctx.samples_seen = t->samples_seen;
  tr__fire(t, HK_ON_TRAIN_BATCH_END);
  hk_flow_clear(&t->tr__flow, HK_SIGNAL_BIT(HK_SKIP_BATCH));
  if (tr__sigint_count >= 1) tr__fail(t, TR_ERR_INTERRUPTED, "interrupted (Ctrl-C)");

  if (t->global_step > steps_before && c->val && c->val_every_n_steps > 0 && t->global_step % c->val_every_n_steps == 0)
    tr__fit_validate(t);
  tr__honour_requests(t);
}

/* The epoch is over: move the counters to the next one. */
static void tr__finish_epoch(tr_trainer *t) {
  t->epoch++;
  t->epoch_batch = 0;
  t->tr__val_at = -1;
  t->tr__epoch_ended = 0;
  tr__end_window(t); /* a window cut short by a stop is dropped */
  hk_flow_clear(&t->tr__flow, HK_FLOW_EPOCH_SIGNALS);
  t->ctx.epoch = t->epoch;
}

/* Start epoch t->epoch, or continue it mid-way after a resume: the shuffle is rebuilt from the seed
   either way; an iterator is rewound only at a real start (a resumed one was handed its position). */
static void tr__start_epoch(tr_trainer *t, const tr_data *d) {
  int resuming = t->epoch_batch > 0;
  t->ctx.epoch = t->epoch;
  t->ctx.batch_idx = t->epoch_batch;
  if (d->shuffle) {
    tr_rng r = tr__epoch_rng(t->seed, t->epoch);
    d->shuffle(d->user, &r);
  }
  if (resuming) return; /* no second on_train_epoch_start, as Lightning after a mid-epoch restart */
  if (d->reset && d->reset(d->user)) tr__fail(t, TR_ERR_MODEL, "train data: reset() failed at epoch %lld", (long long)t->epoch);
  tr__fire(t, HK_ON_TRAIN_EPOCH_START);
}

/* One training epoch: on_train_epoch_start, batches, [validation], on_train_epoch_end. An epoch that
   max_steps cuts short stays open (epoch_batch > 0): the next fit continues it mid-way. */
static void tr__train_epoch(tr_trainer *t, int64_t n) {
  const tr_config *c = t->tr__cfg;
  int complete;
  tr__start_epoch(t, c->train);
  while (t->epoch_batch < n && !tr__skips(t, HK_SIGNAL_BIT(HK_STOP_EPOCH)) && !tr__stopping(t)) {
    tr__train_batch(t, n);
    if (c->max_steps > 0 && t->global_step >= c->max_steps) break;
  }
  if (t->tr__err) return;
  complete = t->epoch_batch >= n || HK_FLOW_HAS(&t->tr__flow, HK_SIGNAL_BIT(HK_STOP_EPOCH)) || tr__stopping(t);
  if (complete && c->val && c->val_every_n_epochs > 0 && (t->epoch + 1) % c->val_every_n_epochs == 0 &&
      t->tr__val_at != t->epoch_batch)
    tr__fit_validate(t);
  t->tr__epoch_ended = complete; /* a checkpoint written by an on_train_epoch_end hook resumes after it */
  tr__fire(t, HK_ON_TRAIN_EPOCH_END);
  if (complete && !t->tr__err) tr__finish_epoch(t);
  tr__honour_requests(t);
}

static int tr__fit_done(const tr_trainer *t) {
  const tr_config *c = t->tr__cfg;
  return t->tr__err || (c->max_steps > 0 && t->global_step >= c->max_steps) ||
         (c->max_epochs > 0 && t->epoch >= c->max_epochs) || tr__stopping(t);
}

/* Fill in the defaults of a tr_config and check it; nothing has fired yet. */
static tr_err tr__resolve(tr_trainer *t, const tr_config *in, tr_config *c) {
  if (!in) return tr__fail(t, TR_ERR_INVALID, "tr_fit: config is NULL");
  *c = *in;
  if (!c->train || !c->train->count || !c->train->get == !c->train->next)
    return tr__fail(t, TR_ERR_INVALID, "tr_fit: config.train needs count, and get or next (one of them)");
  if (c->val && (!c->val->count || !c->val->get == !c->val->next))
    return tr__fail(t, TR_ERR_INVALID, "tr_fit: config.val needs count, and get or next (one of them)");
  if (!c->train->save_state != !c->train->load_state)
    return tr__fail(t, TR_ERR_INVALID, "tr_fit: config.train has only one of save_state/load_state; give both or neither");
  if (!t->model.backward) return tr__fail(t, TR_ERR_INVALID, "tr_fit: model.backward is required");
  if (c->max_epochs < 0 || c->max_steps < 0 || c->min_epochs < 0 || c->min_steps < 0 || c->limit_train_batches < 0 ||
      c->val_every_n_steps < 0 || c->accumulate_grad_batches < 0)
    return tr__fail(t, TR_ERR_INVALID, "tr_fit: max_*, min_*, limit_train_batches, val_every_n_steps and "
                    "accumulate_grad_batches must be >= 0");
  if (tr__bad_number(c->gradient_clip_val, 0, HUGE_VAL) ||
      (c->gradient_clip_algorithm != TR_CLIP_NORM && c->gradient_clip_algorithm != TR_CLIP_VALUE))
    return tr__fail(t, TR_ERR_INVALID, "tr_fit: gradient_clip_val must be >= 0 and the algorithm norm or value");
  if (c->on_nonfinite_loss < TR_NONFINITE_FAIL || c->on_nonfinite_loss > TR_NONFINITE_IGNORE)
    return tr__fail(t, TR_ERR_INVALID, "tr_fit: on_nonfinite_loss is not a tr_nonfinite value");
  if (c->max_epochs == 0 && c->max_steps == 0) c->max_epochs = 1000;
  if (c->limit_val_batches < 0) c->val = NULL;
  if (c->num_sanity_val_steps == 0) c->num_sanity_val_steps = 2;
  if (c->num_sanity_val_steps < 0) c->num_sanity_val_steps = 0;
  if (c->val_every_n_epochs == 0) c->val_every_n_epochs = 1;
  if (c->accumulate_grad_batches == 0) c->accumulate_grad_batches = 1;
  t->tr__total = t->sched.total;
  if (t->sched.kind == TR_SCHED_COSINE && t->tr__total == 0)
    t->tr__total = t->sched.per_epoch ? c->max_epochs : c->max_steps;
  if (t->sched.kind == TR_SCHED_COSINE && t->tr__total <= t->sched.warmup)
    return tr__fail(t, TR_ERR_INVALID, "tr_fit: the cosine schedule needs sched.total (or max_steps / max_epochs) "
                    "greater than sched.warmup");
  return TR_OK;
}

/* Everything the model must have handed over by the first step, and the training data's position. */
static void tr__ready_to_train(tr_trainer *t) {
  const tr_data *d = t->tr__cfg->train;
  if (t->tr__err) return;
  if (!t->model.grads) {
    tr__fail(t, TR_ERR_INVALID, "model.grads is not set: pass it to tr_init, or hand it over with tr_set_buffers "
             "(for example in a configure_model hook) before training starts");
    return;
  }
  if (t->tr__data_state.len && d->load_state) { /* from a checkpoint, or where the last fit left it */
    hk_reader rd = { t->tr__data_state.data, t->tr__data_state.len, 0 };
    if (d->load_state(d->user, &rd)) tr__fail(t, TR_ERR_STATE, "train data: load_state() rejected the saved position (%zu bytes)", t->tr__data_state.len);
  }
}

/* The sanity check: a few validation batches before training, to find bugs in validation early. */
static void tr__sanity_check(tr_trainer *t) {
  const tr_config *c = t->tr__cfg;
  int64_t limit = c->num_sanity_val_steps;
  tr__eval e = { &tr__val_events, c->val, 0, 0, "val/loss", "sanity check", NULL };
  if (t->tr__err || !c->val || c->num_sanity_val_steps <= 0 || t->tr__restarting) return;
  if (c->limit_val_batches > 0 && c->limit_val_batches < limit) limit = c->limit_val_batches;
  e.limit = limit;
  t->ctx.stage = HK_STAGE_SANITY_CHECK;
  tr__fire(t, HK_ON_SANITY_CHECK_START);
  if (!t->tr__err) tr__eval_loop(t, &e);
  tr__fire(t, HK_ON_SANITY_CHECK_END);
  t->ctx.stage = HK_STAGE_FIT;
}

/* The body of tr_fit, after setup and configure_model, in the order of Lightning's Trainer.fit. */
static void tr__fit_body(tr_trainer *t, const void *arg) {
  const tr_config *c = t->tr__cfg;
  int64_t n;
  (void)arg;
  if (c->resume_from && tr__load_file(t, c->resume_from)) return;
  tr__ready_to_train(t);
  tr__fire(t, HK_ON_FIT_START);
  tr__sanity_check(t);
  tr__fire(t, HK_ON_TRAIN_START);
  if (t->tr__epoch_ended) tr__finish_epoch(t); /* a checkpoint from inside on_train_epoch_end */
  while (!tr__fit_done(t)) {
    if (tr__sigint_count >= 1) { tr__fail(t, TR_ERR_INTERRUPTED, "interrupted (Ctrl-C)"); break; }
    n = tr__n_batches(t, c->train, c->limit_train_batches, "train");
    if (n == 0) { /* nothing to train on: Lightning skips the training loop too */
      if (!t->tr__err) tr__warn(t, "the training data has no batches: nothing to train");
      break;
    }
    tr__train_epoch(t, n);
  }
  tr__fire(t, HK_ON_TRAIN_END);
  tr__fire(t, HK_ON_FIT_END);
}

/* Where the training iterator stands when a fit ends: what tr_save writes and the next fit restores. */
static void tr__keep_data_state(tr_trainer *t, const tr_data *d) {
  hk_bytes b;
  if (!d->save_state) return;
  memset(&b, 0, sizeof b);
  if (d->save_state(d->user, &b) || b.failed) {
    hk_bytes_free(&b);
    tr__warn(t, "train data: save_state() failed when the fit ended; the next checkpoint holds the previous position");
    return;
  }
  hk_bytes_free(&t->tr__data_state);
  t->tr__data_state = b;
}

TRAIN_API tr_err tr_fit(tr_trainer *t, const tr_config *cfg) {
  tr_config c;
  tr_err e;
  void (*prev)(int) = SIG_ERR;
  if (!t) return TR_ERR_INVALID;
  if (tr__idle(t, "tr_fit") || tr__resolve(t, cfg, &c)) return TR_ERR_INVALID;
  t->tr__cfg = &c;
  t->ctx.epoch = t->epoch;
  t->ctx.global_step = t->global_step;
  t->ctx.samples_seen = t->samples_seen;
  t->lr = t->ctx.lr = tr__current_lr(t);
  tr__sigint_count = 0;
  if (!c.no_sigint) prev = signal(SIGINT, tr__on_sigint);

  e = tr__run(t, HK_STAGE_FIT, tr__fit_body, NULL);

  if (prev != SIG_ERR) signal(SIGINT, prev);
  tr__sigint_count = 0;
  tr__keep_data_state(t, c.train);
  t->tr__restarting = 0;
  t->tr__cfg = NULL;
  return e;
}

/* ---- checkpoints --------------------------------------------------------------------------------------
   CHECKPOINT FORMAT, version 2. Little-endian throughout; floats are IEEE-754 binary32 bit patterns.

     header   8 bytes magic "TRAINCKP" | u32 version (2; version 1 files, which have no DATA, still
              load) | u32 flags (0)
     section  u32 tag (4 ASCII characters) | u64 size | size bytes of payload |
              u64 checksum: FNV-1a 64 over the tag, size and payload bytes

   The sections, in this order:
     META  u64 n_params | u32 optimizer (0 AdamW, 1 SGD) | u32 state buffers (0, 1 or 2) | u32 n_tensors |
           n_tensors x (u32 name length | name | u64 offset | u64 count)
     LOOP  u64 seed | u64 rng state | i64 epoch | i64 global_step | i64 epoch_batch | i64 samples_seen |
           i64 val_at | i64 accum_pos | i64 accum_n |
           u32 flags (1 grads zeroed, 2 step skipped, 4 stop requested, 8 epoch ended, 16 momentum set)
     PARM  n_params x f32: the parameters
     OPTM  buffers x n_params x f32: AdamW's m then v, or SGD's momentum buffer (nothing for plain SGD)
     GRAD  n_params x f32, only when saved inside an accumulation window (accum_pos > 0)
     DATA  the training iterator's position (tr_data.save_state's bytes), only when there is one
     HOOK  u32 key length | key | u64 state length | state: one per hook with save_state (hk_state_save)
     END   empty; nothing may follow it
   The learning rate is not stored: it is a function of the counters (tr_lr_at). A new version number
   is needed for any change to this layout. */

#define TR__MAGIC "TRAINCKP"
#define TR__VERSION 2u
#define TR__TAG(a, b, c, d) ((uint32_t)(a) | (uint32_t)(b) << 8 | (uint32_t)(c) << 16 | (uint32_t)(d) << 24)
#define TR__META TR__TAG('M', 'E', 'T', 'A')
#define TR__LOOP TR__TAG('L', 'O', 'O', 'P')
#define TR__PARM TR__TAG('P', 'A', 'R', 'M')
#define TR__OPTM TR__TAG('O', 'P', 'T', 'M')
#define TR__GRAD TR__TAG('G', 'R', 'A', 'D')
#define TR__DATA TR__TAG('D', 'A', 'T', 'A')
#define TR__HOOK TR__TAG('H', 'O', 'O', 'K')
#define TR__END  TR__TAG('E', 'N', 'D', '!')
#define TR__LOOP_SIZE (9 * 8 + 4)
#define TR__MAX_KEY 4096
#define TR__MAX_COUNT ((int64_t)1 << 53) /* loop counters stay exact as doubles and cannot overflow */
enum { TR__F_ZEROED = 1, TR__F_SKIP = 2, TR__F_STOP = 4, TR__F_ENDED = 8, TR__F_MOMENTUM = 16, TR__F_ALL = 31 };

/* tr_desc.max_checkpoint_bytes' default: every section but the hooks' at its largest (SGD with
   momentum or AdamW, gradients of an open window), plus 256 MiB for hook and data state. */
static uint64_t tr__default_ckpt_limit(const tr_trainer *t) {
  uint64_t meta = 20, sections = 8; /* META LOOP PARM OPTM GRAD DATA END: headers and checksums */
  int i;
  for (i = 0; i < t->model.n_tensors; i++) meta += 4 + strlen(t->model.tensors[i].name) + 16;
  return 16 + sections * 20 + meta + TR__LOOP_SIZE + 4 * (uint64_t)t->model.n_params * 4 + ((uint64_t)256 << 20);
}

static uint64_t tr__fnv(uint64_t h, const unsigned char *p, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) { h ^= p[i]; h *= 0x100000001b3ull; }
  return h;
}
#define TR__FNV_START 0xcbf29ce484222325ull

static void tr__le(unsigned char *p, uint64_t v, int bytes) {
  int i;
  for (i = 0; i < bytes; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint64_t tr__get(const unsigned char *p, int bytes) {
  uint64_t v = 0;
  int i;
  for (i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

/* -- writing: a buffered writer that checksums what it writes -- */
typedef struct tr__writer {
  unsigned char *buf;
  size_t pos, cap;
  uint64_t hash;     /* running checksum of the current section */
  uint64_t left;     /* payload bytes the current section still owes (checks our own sizes) */
#ifdef TR__POSIX
  int fd;
#else
  FILE *f;
#endif
  int failed;        /* 0, or the errno of the first failure */
} tr__writer;

/* After a failure nothing more is written, and the buffer is emptied either way: the writer must never
   wait for room that a failed write will not make (it used to spin here on a full disk). */
static void tr__w_flush(tr__writer *w) {
  size_t done = 0;
  while (!w->failed && done < w->pos) {
#ifdef TR__POSIX
    ssize_t k = write(w->fd, w->buf + done, w->pos - done);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) { w->failed = k < 0 ? errno : EIO; return; }
    done += (size_t)k;
#else
    size_t k = fwrite(w->buf + done, 1, w->pos - done, w->f);
    if (k == 0) { w->failed = EIO; return; }
    done += k;
#endif
  }
  w->pos = 0;
}

static void tr__w_put(tr__writer *w, const void *data, size_t n) {
  const unsigned char *p = (const unsigned char *)data;
  w->hash = tr__fnv(w->hash, p, n);
  w->left -= n;
  while (n > 0 && !w->failed) {
    size_t k = w->cap - w->pos < n ? w->cap - w->pos : n;
    memcpy(w->buf + w->pos, p, k);
    w->pos += k;
    p += k;
    n -= k;
    if (w->pos == w->cap) tr__w_flush(w);
  }
}
static void tr__w_u32(tr__writer *w, uint32_t v) { unsigned char b[4]; tr__le(b, v, 4); tr__w_put(w, b, 4); }
static void tr__w_u64(tr__writer *w, uint64_t v) { unsigned char b[8]; tr__le(b, v, 8); tr__w_put(w, b, 8); }
static void tr__w_f32s(tr__writer *w, const float *x, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &x[i], 4);
    tr__w_u32(w, u);
  }
}
static void tr__w_begin(tr__writer *w, uint32_t tag, uint64_t size) {
  w->hash = TR__FNV_START;
  w->left = 12;
  tr__w_u32(w, tag);
  tr__w_u64(w, size);
  w->left = size;
}
static void tr__w_end(tr__writer *w) {
  TRAIN_ASSERT(w->left == 0); /* the size written in the header matches the payload */
  w->left = 8;
  tr__w_u64(w, w->hash);
}

/* hk_state_save hands every stateful hook's blob to this sink: one HOOK section each. */
static hk_err tr__hook_sink(const char *key, const void *data, size_t len, void *user) {
  tr__writer *w = (tr__writer *)user;
  size_t klen = strlen(key);
  tr__w_begin(w, TR__HOOK, 4 + (uint64_t)klen + 8 + len);
  tr__w_u32(w, (uint32_t)klen);
  tr__w_put(w, key, klen);
  tr__w_u64(w, len);
  tr__w_put(w, data, len);
  tr__w_end(w);
  return HK_OK;
}

/* The training iterator's position to store: asked of the data during a fit, else the one kept from
   the last fit's end (or from the checkpoint loaded last). */
static const hk_bytes *tr__data_position(tr_trainer *t, hk_bytes *live) {
  const tr_data *d = t->tr__cfg ? t->tr__cfg->train : NULL;
  if (!d || !d->save_state) return &t->tr__data_state;
  if (d->save_state(d->user, live) || live->failed) {
    tr__fail(t, TR_ERR_STATE, "train data: save_state() failed");
    return NULL;
  }
  return live;
}

static void tr__write_all(tr_trainer *t, tr__writer *w) {
  size_t n = t->model.n_params, meta = 8 + 4 + 4 + 4;
  int i;
  unsigned char header[16];
  hk_bytes live = { NULL, 0, 0, 0 };
  const hk_bytes *data = tr__data_position(t, &live);
  /* Outside a window (accum_pos 0) no gradient is kept: the resumed run starts a new window. */
  int in_window = t->tr__accum_pos > 0;
  uint32_t flags = (t->tr__grads_zeroed && in_window ? TR__F_ZEROED : 0) | (HK_FLOW_HAS(&t->tr__flow, HK_SIGNAL_BIT(HK_SKIP_STEP)) && in_window ? TR__F_SKIP : 0) |
                   (HK_FLOW_HAS(&t->tr__flow, HK_SIGNAL_BIT(HK_STOP)) ? TR__F_STOP : 0) | (t->tr__epoch_ended ? TR__F_ENDED : 0) |
                   (t->tr__has_momentum ? TR__F_MOMENTUM : 0);
  memcpy(header, TR__MAGIC, 8);
  tr__le(header + 8, TR__VERSION, 4);
  tr__le(header + 12, 0, 4);
  w->left = 16;
  tr__w_put(w, header, 16);

  for (i = 0; i < t->model.n_tensors; i++) meta += 4 + strlen(t->model.tensors[i].name) + 16;
  tr__w_begin(w, TR__META, meta);
  tr__w_u64(w, n);
  tr__w_u32(w, (uint32_t)t->optim.kind);
  tr__w_u32(w, (uint32_t)t->tr__n_buf);
  tr__w_u32(w, (uint32_t)t->model.n_tensors);
  for (i = 0; i < t->model.n_tensors; i++) {
    const tr_tensor *x = &t->model.tensors[i];
    size_t len = strlen(x->name);
    tr__w_u32(w, (uint32_t)len);
    tr__w_put(w, x->name, len);
    tr__w_u64(w, x->offset);
    tr__w_u64(w, x->count);
  }
  tr__w_end(w);

  tr__w_begin(w, TR__LOOP, TR__LOOP_SIZE);
  tr__w_u64(w, t->seed);
  tr__w_u64(w, t->rng.state);
  tr__w_u64(w, (uint64_t)t->epoch);
  tr__w_u64(w, (uint64_t)t->global_step);
  tr__w_u64(w, (uint64_t)t->epoch_batch);
  tr__w_u64(w, (uint64_t)t->samples_seen);
  tr__w_u64(w, (uint64_t)t->tr__val_at);
  tr__w_u64(w, (uint64_t)t->tr__accum_pos);
  tr__w_u64(w, (uint64_t)(in_window ? t->tr__accum_n : 0));
  tr__w_u32(w, flags);
  tr__w_end(w);

  tr__w_begin(w, TR__PARM, 4 * (uint64_t)n);
  tr__w_f32s(w, t->model.params, n);
  tr__w_end(w);

  tr__w_begin(w, TR__OPTM, 4 * (uint64_t)n * (uint64_t)t->tr__n_buf);
  if (t->tr__n_buf >= 1) tr__w_f32s(w, t->tr__m, n);
  if (t->tr__n_buf >= 2) tr__w_f32s(w, t->tr__v, n);
  tr__w_end(w);

  if (in_window) { /* inside an accumulation window: the partial sum must survive */
    tr__w_begin(w, TR__GRAD, 4 * (uint64_t)n);
    tr__w_f32s(w, t->model.grads, n);
    tr__w_end(w);
  }
  if (data && data->len) { /* the training iterator's position */
    tr__w_begin(w, TR__DATA, data->len);
    tr__w_put(w, data->data, data->len);
    tr__w_end(w);
  }
  hk_bytes_free(&live);
  if (hk_state_save(t->reg, tr__hook_sink, w) != HK_OK)
    tr__fail(t, TR_ERR_STATE, "saving hook state failed: %s", hk_last_error(t->reg));
  tr__w_begin(w, TR__END, 0);
  tr__w_end(w);
  tr__w_flush(w);
}

/* The temporary file: <path>.tmp.<pid>.<n>, created with O_EXCL (and O_NOFOLLOW where defined), so an
   existing file or a symlink planted at that name is never opened, let alone overwritten. A save
   killed half-way leaves one behind; the next save to the same path removes those whose process no
   longer exists (told by /proc/<pid>; where there is no /proc, nothing is removed). unlink removes a
   name, never what a symlink points to, so a planted link costs nothing either. (These are the calls
   a strict -std=c99 build declares: no kill, no lstat.) */
#ifdef TR__POSIX
static void tr__remove_stale_temps(const char *path) {
  const char *slash = strrchr(path, '/');
  const char *base = slash ? slash + 1 : path;
  size_t dlen = slash ? (size_t)(slash - path) + (slash == path) : 1, blen = strlen(base);
  char dir[4096], file[4096 + 256];
  DIR *d;
  struct dirent *e;
  struct stat st;
  if (dlen >= sizeof dir || stat("/proc/self", &st) != 0) return;
  memcpy(dir, slash ? path : ".", dlen);
  dir[dlen] = 0;
  if (!(d = opendir(dir))) return;
  while ((e = readdir(d)) != NULL) {
    const char *tail = e->d_name + blen;
    char *end, proc[64];
    long pid;
    if (strncmp(e->d_name, base, blen) != 0 || strncmp(tail, ".tmp.", 5) != 0) continue;
    pid = strtol(tail + 5, &end, 10);
    if (end == tail + 5 || *end != '.' || pid <= 0 || pid == (long)getpid()) continue;
    snprintf(proc, sizeof proc, "/proc/%ld", pid);
    if (stat(proc, &st) == 0 || errno != ENOENT) continue; /* alive, or not ours to judge */
    if (snprintf(file, sizeof file, "%s/%s", dir, e->d_name) < (int)sizeof file) (void)unlink(file);
  }
  closedir(d);
}

static int tr__open_temp(const char *path, char *tmp, size_t cap) {
  static unsigned counter;
  int tries, fd = -1, flags = O_WRONLY | O_CREAT | O_EXCL;
#ifdef O_NOFOLLOW
  flags |= O_NOFOLLOW;
#endif
#ifdef O_CLOEXEC
  flags |= O_CLOEXEC;
#endif
  for (tries = 0; tries < 100 && fd < 0; tries++) {
    snprintf(tmp, cap, "%s.tmp.%ld.%u", path, (long)getpid(), counter++);
    fd = open(tmp, flags, 0644); /* the umask applies, as to any new file */
    if (fd < 0 && errno != EEXIST) break;
  }
  return fd;
}
#endif

/* Write to a temporary file, flush it to the disk, then rename it over path: a crash at any moment
   leaves either the old checkpoint or the new one, never half of one. Every failure removes the
   temporary file and names the file that failed. */
static tr_err tr__save_file(tr_trainer *t, const char *path) {
  tr__writer w;
  size_t cap = strlen(path) + 64;
  char *tmp = (char *)malloc(cap);
  const char *step = "creating";
  memset(&w, 0, sizeof w);
  w.cap = 1 << 16;
  w.buf = (unsigned char *)malloc(w.cap);
  if (!tmp || !w.buf) {
    free(tmp);
    free(w.buf);
    return tr__fail(t, TR_ERR_NOMEM, "tr_save: out of memory");
  }
#ifdef TR__POSIX
  tr__remove_stale_temps(path);
  w.fd = tr__open_temp(path, tmp, cap);
  if (w.fd < 0) w.failed = errno;
#else
  snprintf(tmp, cap, "%s.tmp", path);
  w.f = fopen(tmp, "wb");
  if (!w.f) w.failed = errno ? errno : EIO;
#endif
  if (!w.failed) {
    step = "writing";
    tr__write_all(t, &w);
#ifdef TR__POSIX
    if (!w.failed && fsync(w.fd) != 0) w.failed = errno;
    if (close(w.fd) != 0 && !w.failed) w.failed = errno;
#else
    if (fflush(w.f) != 0 && !w.failed) w.failed = errno ? errno : EIO;
    if (fclose(w.f) != 0 && !w.failed) w.failed = errno ? errno : EIO;
    if (!w.failed && !t->tr__err) remove(path); /* rename does not replace files everywhere */
#endif
    if (w.failed || t->tr__err) remove(tmp);
    else if (rename(tmp, path) != 0) {
      w.failed = errno;
      step = "renaming";
      remove(tmp);
    }
#ifdef TR__POSIX
    else { /* make the rename itself durable: fsync the directory (best effort) */
      const char *slash = strrchr(path, '/');
      int dfd;
      if (slash) {
        size_t n = (size_t)(slash - path) + (slash == path);
        memcpy(tmp, path, n);
        tmp[n] = 0;
        dfd = open(tmp, O_RDONLY);
      } else dfd = open(".", O_RDONLY);
      if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
      }
    }
#endif
  }
  if (w.failed && !strcmp(step, "renaming"))
    tr__fail(t, TR_ERR_IO, "tr_save: renaming '%s' to '%s' failed: %s", tmp, path, strerror(w.failed));
  else if (w.failed)
    tr__fail(t, TR_ERR_IO, "tr_save: %s '%s' failed: %s (the previous '%s' is untouched)", step, tmp, strerror(w.failed), path);
  free(tmp);
  free(w.buf);
  return t->tr__err;
}

/* tr_save never changes the outcome of the run it is called in: its error is returned (and is
   tr_error(t) when the run has none); the run's own error and signals stay as they were. A save from
   inside a save (an on_save_checkpoint hook calling tr_save) is refused. */
TRAIN_API tr_err tr_save(tr_trainer *t, const char *path) {
  tr_err run_err, e;
  char run_msg[sizeof t->error];
  hk_flow run_flow;
  if (!t) return TR_ERR_INVALID;
  if (t->tr__saving)
    return tr__refuse(t, "tr_save called while a save is in progress (from an on_save_checkpoint or on_checkpoint_saved "
                      "hook?); ask for one with hk_request(ctx, HK_REQUEST_CHECKPOINT) instead");
  if (t->running == HK_STAGE_NONE) { t->tr__err = TR_OK; t->error[0] = 0; }
  run_err = t->tr__err;
  run_flow = t->tr__flow;
  if (run_err) memcpy(run_msg, t->error, sizeof run_msg);
  t->tr__err = TR_OK; /* an on_exception handler may save while the run is failing: a clean slate */
  t->tr__saving = 1;
  if (!path || !path[0]) tr__fail(t, TR_ERR_INVALID, "tr_save: no path");
  else {
    t->ctx.path = path;
    tr__fire(t, HK_ON_SAVE_CHECKPOINT); /* hooks may update what they save */
    if (!t->tr__err) tr__save_file(t, path);
    if (!t->tr__err) tr__fire(t, HK_ON_CHECKPOINT_SAVED);
    t->ctx.path = NULL;
  }
  e = t->tr__err;
  t->tr__saving = 0;
  if (t->running != HK_STAGE_NONE) {
    t->tr__err = run_err;
    t->tr__flow = run_flow;
    if (run_err) memcpy(t->error, run_msg, sizeof run_msg);
  }
  return e;
}

/* -- reading: verify everything first, then change the trainer -- */
typedef struct tr__section { uint32_t tag; const unsigned char *p; size_t n, at; } tr__section;

static const char *tr__tag_name(uint32_t tag, char out[5]) {
  int i;
  for (i = 0; i < 4; i++) {
    char c = (char)(tag >> (8 * i));
    out[i] = (c >= 32 && c < 127) ? c : '?';
  }
  out[4] = 0;
  return out;
}

/* Read the section at *pos: its header, bounds and checksum. */
static tr_err tr__read_section(tr_trainer *t, const unsigned char *buf, size_t len, size_t *pos, tr__section *s) {
  size_t at = *pos, avail = len - at;
  uint64_t size;
  char name[5];
  if (avail < 12)
    return tr__fail(t, TR_ERR_FORMAT, "checkpoint truncated: a section header at byte %zu needs 12 bytes, %zu remain", at, avail);
  s->tag = (uint32_t)tr__get(buf + at, 4);
  size = tr__get(buf + at + 4, 8);
  if (size > (uint64_t)(avail - 12) || avail - 12 - (size_t)size < 8)
    return tr__fail(t, TR_ERR_FORMAT, "checkpoint truncated: section '%s' at byte %zu declares %llu bytes, %zu remain",
                    tr__tag_name(s->tag, name), at, (unsigned long long)size, avail - 12);
  if (tr__fnv(TR__FNV_START, buf + at, 12 + (size_t)size) != tr__get(buf + at + 12 + (size_t)size, 8))
    return tr__fail(t, TR_ERR_FORMAT, "checkpoint corrupted: the checksum of section '%s' at byte %zu does not match",
                    tr__tag_name(s->tag, name), at);
  s->p = buf + at + 12;
  s->n = (size_t)size;
  s->at = at;
  *pos = at + 12 + (size_t)size + 8;
  return TR_OK;
}

/* Read the next section and check that it is the expected one. */
static tr_err tr__expect(tr_trainer *t, const unsigned char *buf, size_t len, size_t *pos, uint32_t tag, tr__section *s) {
  char want[5], got[5];
  if (tr__read_section(t, buf, len, pos, s)) return t->tr__err;
  if (s->tag != tag)
    return tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: expected section '%s' at byte %zu, found '%s'",
                    tr__tag_name(tag, want), s->at, tr__tag_name(s->tag, got));
  return TR_OK;
}

/* A parsed, verified checkpoint: pointers into the file's bytes. */
typedef struct tr__ckpt {
  uint32_t version;
  tr__section meta, loop, parm, optm, grad, data;
  int has_grad, has_data;
  int n_hooks;                /* HOOK sections, and the bytes their keys need with terminators */
  size_t key_bytes;
  size_t hooks_at, hooks_end; /* the HOOK sections lie in [hooks_at, hooks_end) */
  uint64_t seed, rng;
  int64_t v[7];               /* epoch, global_step, epoch_batch, samples_seen, val_at, accum_pos, accum_n */
  uint32_t flags;
} tr__ckpt;

static tr_err tr__check_meta(tr_trainer *t, const tr__section *s) {
  const unsigned char *p = s->p;
  size_t pos = 20, n = s->n;
  uint64_t n_params;
  uint32_t kind, nbuf, nt, i;
  static const char *optim_names[2] = { "AdamW", "SGD" };
  if (n < 20) return tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: META is %zu bytes, at least 20 expected", n);
  n_params = tr__get(p, 8);
  kind = (uint32_t)tr__get(p + 8, 4);
  nbuf = (uint32_t)tr__get(p + 12, 4);
  nt = (uint32_t)tr__get(p + 16, 4);
  if (kind > 1 || nbuf > 2) return tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: unknown optimizer %u with %u buffers", kind, nbuf);
  if (kind != (uint32_t)t->optim.kind)
    return tr__fail(t, TR_ERR_MISMATCH, "checkpoint mismatch: it holds %s state, this trainer uses %s",
                    optim_names[kind], optim_names[t->optim.kind]);
  if (nbuf != (uint32_t)t->tr__n_buf)
    return tr__fail(t, TR_ERR_MISMATCH, "checkpoint mismatch: it holds %u optimizer buffers, this trainer has %d "
                    "(SGD momentum on one side only?)", nbuf, t->tr__n_buf);
  if (nt != (uint32_t)t->model.n_tensors)
    return tr__fail(t, TR_ERR_MISMATCH, "checkpoint mismatch: it has %u tensors, the model has %d", nt, t->model.n_tensors);
  for (i = 0; i < nt; i++) {
    const tr_tensor *x = &t->model.tensors[i];
    size_t len;
    uint64_t off, cnt;
    if (n - pos < 4) break;
    len = (size_t)tr__get(p + pos, 4);
    if (n - pos - 4 < 16 || len > n - pos - 4 - 16) break;
    off = tr__get(p + pos + 4 + len, 8);
    cnt = tr__get(p + pos + 4 + len + 8, 8);
    if (len != strlen(x->name) || memcmp(p + pos + 4, x->name, len) != 0)
      return tr__fail(t, TR_ERR_MISMATCH, "checkpoint mismatch: tensor %u is '%.*s' in the checkpoint, '%s' in the model",
                      i, (int)(len > 64 ? 64 : len), (const char *)(p + pos + 4), x->name);
    if (off != x->offset || cnt != x->count)
      return tr__fail(t, TR_ERR_MISMATCH, "checkpoint mismatch: tensor '%s' has %llu elements at offset %llu in the "
                      "checkpoint, %zu at offset %zu in the model", x->name, (unsigned long long)cnt,
                      (unsigned long long)off, x->count, x->offset);
    pos += 4 + len + 16;
  }
  if (i < nt || pos != n) return tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: the META section's tensor list is inconsistent");
  if (n_params != t->model.n_params)
    return tr__fail(t, TR_ERR_MISMATCH, "checkpoint mismatch: it has %llu parameters, the model has %zu",
                    (unsigned long long)n_params, t->model.n_params);
  return TR_OK;
}

static tr_err tr__parse(tr_trainer *t, const unsigned char *buf, size_t len, tr__ckpt *ck) {
  size_t pos = 16, n4 = t->model.n_params * 4;
  int i;
  tr__section s;
  memset(ck, 0, sizeof *ck);
  if (len < 16) return tr__fail(t, TR_ERR_FORMAT, "not a checkpoint: %zu bytes is too short", len);
  if (memcmp(buf, TR__MAGIC, 8) != 0) return tr__fail(t, TR_ERR_FORMAT, "not a train.h checkpoint (bad magic)");
  ck->version = (uint32_t)tr__get(buf + 8, 4);
  if (ck->version < 1 || ck->version > TR__VERSION)
    return tr__fail(t, TR_ERR_VERSION, "checkpoint format version %u; this build reads versions 1 to %u",
                    (unsigned)ck->version, TR__VERSION);
  if (tr__get(buf + 12, 4) != 0) return tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: unknown header flags");

  if (tr__expect(t, buf, len, &pos, TR__META, &ck->meta) || tr__check_meta(t, &ck->meta)) return t->tr__err;
  if (tr__expect(t, buf, len, &pos, TR__LOOP, &ck->loop)) return t->tr__err;
  if (ck->loop.n != TR__LOOP_SIZE)
    return tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: LOOP is %zu bytes, %d expected", ck->loop.n, TR__LOOP_SIZE);
  ck->seed = tr__get(ck->loop.p, 8);
  ck->rng = tr__get(ck->loop.p + 8, 8);
  for (i = 0; i < 7; i++) ck->v[i] = (int64_t)tr__get(ck->loop.p + 16 + 8 * i, 8);
  ck->flags = (uint32_t)tr__get(ck->loop.p + 72, 4);
  /* every field in its range, so that nothing overflows when the loop counts on from it */
  for (i = 0; i < 7; i++) {
    static const char *const names[7] = { "epoch", "global_step", "epoch_batch", "samples_seen", "val_at", "accum_pos", "accum_n" };
    int64_t lo = i == 4 ? -1 : 0;
    if (ck->v[i] < lo || ck->v[i] > TR__MAX_COUNT)
      return tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: LOOP's %s is %lld, outside %lld..2^53", names[i],
                      (long long)ck->v[i], (long long)lo);
  }
  if (ck->v[4] > ck->v[2])
    return tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: LOOP's val_at (%lld) is after epoch_batch (%lld)",
                    (long long)ck->v[4], (long long)ck->v[2]);
  if (ck->v[5] > ck->v[2] + 1 || ck->v[6] > ck->v[5])
    return tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: LOOP's accumulation counters (accum_pos %lld, accum_n %lld) do "
                    "not fit epoch_batch %lld (accum_n <= accum_pos <= epoch_batch + 1)", (long long)ck->v[5],
                    (long long)ck->v[6], (long long)ck->v[2]);
  if (ck->flags & ~(uint32_t)TR__F_ALL)
    return tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: LOOP's flags 0x%x has unknown bits (known: 0x%x)",
                    (unsigned)ck->flags, (unsigned)TR__F_ALL);

  if (tr__expect(t, buf, len, &pos, TR__PARM, &ck->parm)) return t->tr__err;
  if (ck->parm.n != n4) return tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: PARM is %zu bytes, %zu expected", ck->parm.n, n4);
  if (tr__expect(t, buf, len, &pos, TR__OPTM, &ck->optm)) return t->tr__err;
  if (ck->optm.n != n4 * (size_t)t->tr__n_buf)
    return tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: OPTM is %zu bytes, %zu expected", ck->optm.n, n4 * (size_t)t->tr__n_buf);
  if (ck->v[5] > 0) {
    if (tr__expect(t, buf, len, &pos, TR__GRAD, &ck->grad)) return t->tr__err;
    if (ck->grad.n != n4) return tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: GRAD is %zu bytes, %zu expected", ck->grad.n, n4);
    ck->has_grad = 1;
  }
  if (ck->version >= 2 && len - pos >= 4 && tr__get(buf + pos, 4) == TR__DATA) {
    if (tr__expect(t, buf, len, &pos, TR__DATA, &ck->data)) return t->tr__err;
    ck->has_data = 1;
  }

  /* HOOK sections until END. Keys must be sane (hk_state_check finds duplicates, in linear time). */
  ck->hooks_at = pos;
  for (;;) {
    size_t klen, at = pos;
    if (tr__read_section(t, buf, len, &pos, &s)) return t->tr__err;
    if (s.tag == TR__END) break;
    if (s.tag != TR__HOOK) {
      char name[5];
      return tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: unexpected section '%s' at byte %zu", tr__tag_name(s.tag, name), at);
    }
    klen = s.n >= 4 ? (size_t)tr__get(s.p, 4) : 0;
    if (s.n < 12 || klen == 0 || klen > TR__MAX_KEY || klen > s.n - 12 || tr__get(s.p + 4 + klen, 8) != s.n - 12 - klen ||
        memchr(s.p + 4, 0, klen) != NULL)
      return tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: bad HOOK section at byte %zu", at);
    ck->n_hooks++;
    ck->key_bytes += klen + 1;
  }
  ck->hooks_end = pos - 20; /* where END starts */
  if (s.n != 0) return tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: the END section is not empty");
  if (pos != len) return tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: %zu unexpected bytes after the END section", len - pos);
  return TR_OK;
}

static void tr__read_f32s(float *dst, const unsigned char *p, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) {
    uint32_t u = (uint32_t)tr__get(p + 4 * i, 4);
    memcpy(&dst[i], &u, 4);
  }
}

/* Give every HOOK section to its hook, all or nothing (hk_state_load_all puts the hooks loaded before
   a rejecting one back as they were). The blobs point into buf, which tr__parse has verified. */
static tr_err tr__load_hooks(tr_trainer *t, const unsigned char *buf, const tr__ckpt *ck) {
  char *keys = (char *)malloc(ck->key_bytes + 1), *k = keys;
  hk_state_blob *blobs = (hk_state_blob *)malloc(sizeof *blobs * (size_t)(ck->n_hooks + 1));
  size_t pos;
  int i, missing = 0, unknown = 0;
  if (!keys || !blobs) {
    free(keys);
    free(blobs);
    return tr__fail(t, TR_ERR_NOMEM, "out of memory loading the state of %d hooks", ck->n_hooks);
  }
  for (i = 0, pos = ck->hooks_at; i < ck->n_hooks; i++, pos += 12 + (size_t)tr__get(buf + pos + 4, 8) + 8) {
    const unsigned char *p = buf + pos + 12;
    size_t klen = (size_t)tr__get(p, 4);
    memcpy(k, p + 4, klen);
    k[klen] = 0;
    blobs[i].key = k;
    blobs[i].data = p + 4 + klen + 8;
    blobs[i].len = (size_t)tr__get(p + 4 + klen, 8);
    k += klen + 1;
  }
  if (hk_state_check(t->reg, blobs, ck->n_hooks, &missing) != HK_OK)
    tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: %s", hk_last_error(t->reg));
  for (i = 0; i < ck->n_hooks && !t->tr__err; i++)
    if (blobs[i].result == HK_ERR_NOT_FOUND && unknown++ == 0 && t->tr__strict_hook_state)
      tr__fail(t, TR_ERR_STATE, "the checkpoint holds state for '%s', which no registered hook loads (tr_desc.strict_hook_state)", blobs[i].key);
  if (!t->tr__err && missing && t->tr__strict_hook_state)
    tr__fail(t, TR_ERR_STATE, "the checkpoint holds %s (tr_desc.strict_hook_state)", hk_last_error(t->reg));
  if (!t->tr__err && hk_state_load_all(t->reg, blobs, ck->n_hooks) != HK_OK)
    tr__fail(t, TR_ERR_STATE, "loading hook state: %s", hk_last_error(t->reg));
  if (!t->tr__err && missing) tr__warn(t, "the checkpoint holds %s: kept as it is now", hk_last_error(t->reg));
  for (i = 0; i < ck->n_hooks && !t->tr__err; i++)
    if (blobs[i].result == HK_ERR_NOT_FOUND) tr__warn(t, "the checkpoint has state for an unknown hook '%s'; ignored", blobs[i].key);
  free(keys);
  free(blobs);
  return t->tr__err;
}

/* Verify, then commit. Nothing of the trainer changes before every check has passed. */
/* The trainer state a load replaces (besides the float buffers): one struct, so that the commit and
   its rollback are the same assignment. */
typedef struct tr__loop_state {
  uint64_t seed, rng;
  int64_t epoch, global_step, epoch_batch, samples_seen, val_at, accum_pos, accum_n;
  unsigned signals;
  int grads_zeroed, epoch_ended, has_momentum, restarting;
  hk_bytes data;
} tr__loop_state;

static void tr__get_loop(const tr_trainer *t, tr__loop_state *ls) {
  ls->seed = t->seed;                 ls->rng = t->rng.state;
  ls->epoch = t->epoch;               ls->global_step = t->global_step;
  ls->epoch_batch = t->epoch_batch;   ls->samples_seen = t->samples_seen;
  ls->val_at = t->tr__val_at;         ls->accum_pos = t->tr__accum_pos;
  ls->accum_n = t->tr__accum_n;       ls->signals = t->tr__flow.signals;
  ls->grads_zeroed = t->tr__grads_zeroed;
  ls->epoch_ended = t->tr__epoch_ended;
  ls->has_momentum = t->tr__has_momentum;
  ls->restarting = t->tr__restarting;
  ls->data = t->tr__data_state;
}

static void tr__set_loop(tr_trainer *t, const tr__loop_state *ls) {
  t->seed = ls->seed;                 t->rng.state = ls->rng;
  t->epoch = ls->epoch;               t->global_step = ls->global_step;
  t->epoch_batch = ls->epoch_batch;   t->samples_seen = ls->samples_seen;
  t->tr__val_at = ls->val_at;         t->tr__accum_pos = ls->accum_pos;
  t->tr__accum_n = ls->accum_n;       t->tr__flow.signals = ls->signals;
  t->tr__grads_zeroed = ls->grads_zeroed;
  t->tr__epoch_ended = ls->epoch_ended;
  t->tr__has_momentum = ls->has_momentum;
  t->tr__restarting = ls->restarting;
  t->tr__data_state = ls->data;
  t->ctx.epoch = t->epoch;
  t->ctx.global_step = t->global_step;
  t->ctx.samples_seen = t->samples_seen;
  t->ctx.batch_idx = t->epoch_batch;
  hk_grads_changed(&t->ctx);
}

/* Hook states as records (u32 key length | key | u64 length | bytes), in memory, to put back. */
static hk_err tr__snap_sink(const char *key, const void *data, size_t len, void *user) {
  hk_bytes *b = (hk_bytes *)user;
  uint32_t k = (uint32_t)strlen(key);
  uint64_t l = len;
  return hk_bytes_put(b, &k, 4) || hk_bytes_put(b, key, k) || hk_bytes_put(b, &l, 8) || hk_bytes_put(b, data, len) ? HK_ERR_NOMEM : HK_OK;
}
static void tr__snap_restore(tr_trainer *t, const hk_bytes *b) {
  size_t pos = 0;
  int n = 0, i;
  hk_state_blob *blobs;
  char *keys = (char *)malloc(b->len + 1), *k = keys;
  while (pos < b->len) { uint32_t kl; uint64_t l; memcpy(&kl, b->data + pos, 4); memcpy(&l, b->data + pos + 4 + kl, 8); pos += 12 + kl + (size_t)l; n++; }
  blobs = (hk_state_blob *)malloc(sizeof *blobs * (size_t)(n + 1));
  if (!keys || !blobs) {
    tr__warn(t, "out of memory putting the hooks' state back after a failed load");
  } else {
    for (i = 0, pos = 0; i < n; i++) {
      uint32_t kl;
      uint64_t l;
      memcpy(&kl, b->data + pos, 4);
      memcpy(k, b->data + pos + 4, kl);
      k[kl] = 0;
      memcpy(&l, b->data + pos + 4 + kl, 8);
      blobs[i].key = k;
      blobs[i].data = b->data + pos + 12 + kl;
      blobs[i].len = (size_t)l;
      k += kl + 1;
      pos += 12 + kl + (size_t)l;
    }
    if (hk_state_load_all(t->reg, blobs, n) != HK_OK) tr__warn(t, "putting the hooks' state back: %s", hk_last_error(t->reg));
  }
  free(keys);
  free(blobs);
}

/* Verify, then commit. Nothing of the trainer changes before every check has passed; if an
   on_load_checkpoint hook then fails, everything the commit replaced is put back. That needs a copy of
   the parameters, optimizer state, gradients and hook states, made only when a hook listens to
   on_load_checkpoint (nobody else can fail after the commit). */
static tr_err tr__load_mem(tr_trainer *t, const unsigned char *buf, size_t len, const char *path) {
  tr__ckpt ck;
  size_t n = t->model.n_params, n_floats = n * (size_t)(1 + t->tr__n_buf + (t->model.grads != NULL));
  int listened = HK_ACTIVE(t->reg, HK_ON_LOAD_CHECKPOINT) != 0;
  tr__loop_state before, after;
  hk_bytes hooks_before = { NULL, 0, 0, 0 };
  float *floats_before = NULL;
  memset(&after, 0, sizeof after);
  if (tr__parse(t, buf, len, &ck)) return t->tr__err;
  if (ck.has_grad && !t->model.grads)
    return tr__fail(t, TR_ERR_INVALID, "the checkpoint was written inside an accumulation window and holds its gradients, "
                    "but model.grads is not set: hand the buffer over with tr_set_buffers before loading");
  if (ck.has_data && hk_bytes_put(&after.data, ck.data.p, ck.data.n))
    return tr__fail(t, TR_ERR_NOMEM, "out of memory for the training data's position (%zu bytes)", ck.data.n);
  if (listened) {
    floats_before = (float *)malloc(sizeof(float) * (n_floats ? n_floats : 1));
    if (!floats_before || hk_state_save(t->reg, tr__snap_sink, &hooks_before) != HK_OK || hooks_before.failed) {
      free(floats_before);
      hk_bytes_free(&hooks_before);
      hk_bytes_free(&after.data);
      return tr__fail(t, TR_ERR_NOMEM, "out of memory keeping the trainer's state while loading (%zu floats)", n_floats);
    }
    memcpy(floats_before, t->model.params, 4 * n);
    if (t->tr__n_buf >= 1) memcpy(floats_before + n, t->tr__m, 4 * n);
    if (t->tr__n_buf >= 2) memcpy(floats_before + 2 * n, t->tr__v, 4 * n);
    if (t->model.grads) memcpy(floats_before + n * (size_t)(1 + t->tr__n_buf), t->model.grads, 4 * n);
  }
  if (tr__load_hooks(t, buf, &ck)) {
    free(floats_before);
    hk_bytes_free(&hooks_before);
    hk_bytes_free(&after.data);
    return t->tr__err;
  }

  tr__get_loop(t, &before);
  tr__read_f32s(t->model.params, ck.parm.p, n);
  if (t->tr__n_buf >= 1) tr__read_f32s(t->tr__m, ck.optm.p, n);
  if (t->tr__n_buf >= 2) tr__read_f32s(t->tr__v, ck.optm.p + 4 * n, n);
  if (ck.has_grad) tr__read_f32s(t->model.grads, ck.grad.p, n);
  after.seed = ck.seed;
  after.rng = ck.rng;
  after.epoch = ck.v[0];
  after.global_step = ck.v[1];
  after.epoch_batch = ck.v[2];
  after.samples_seen = ck.v[3];
  after.val_at = ck.v[4];
  after.accum_pos = ck.v[5];
  after.accum_n = ck.v[6];
  after.grads_zeroed = (ck.flags & TR__F_ZEROED) != 0;
  after.signals = ((ck.flags & TR__F_SKIP) ? HK_SIGNAL_BIT(HK_SKIP_STEP) : 0) |
                  ((ck.flags & TR__F_STOP) ? HK_SIGNAL_BIT(HK_STOP) : 0); /* what hooks asked, held */
  after.epoch_ended = (ck.flags & TR__F_ENDED) != 0;
  after.has_momentum = (ck.flags & TR__F_MOMENTUM) != 0;
  after.restarting = after.epoch_batch > 0 && !after.epoch_ended; /* mid-epoch or mid-validation (Lightning) */
  tr__set_loop(t, &after); /* no DATA section: the next fit starts the iterator afresh */

  t->ctx.path = path;
  tr__fire(t, HK_ON_LOAD_CHECKPOINT); /* hook state is already restored */
  t->ctx.path = NULL;
  if (t->tr__err && listened) { /* put everything back, as if the load had never started */
    memcpy(t->model.params, floats_before, 4 * n);
    if (t->tr__n_buf >= 1) memcpy(t->tr__m, floats_before + n, 4 * n);
    if (t->tr__n_buf >= 2) memcpy(t->tr__v, floats_before + 2 * n, 4 * n);
    if (t->model.grads) memcpy(t->model.grads, floats_before + n * (size_t)(1 + t->tr__n_buf), 4 * n);
    tr__set_loop(t, &before);
    tr__snap_restore(t, &hooks_before);
    hk_bytes_free(&after.data);
  } else hk_bytes_free(&before.data);
  free(floats_before);
  hk_bytes_free(&hooks_before);
  return t->tr__err;
}

/* Read a whole checkpoint file into memory: a regular file no larger than tr__max_ckpt, read in one
   pass of its size (a file that grows meanwhile is refused rather than read forever). */
static tr_err tr__read_file(tr_trainer *t, const char *path, unsigned char **out, size_t *out_len) {
  unsigned char *buf;
  uint64_t size;
  size_t len = 0;
#ifdef TR__POSIX
  struct stat st;
#ifdef O_NONBLOCK
  int fd = open(path, O_RDONLY | O_NONBLOCK); /* a FIFO must not block the open: it is refused below */
#else
  int fd = open(path, O_RDONLY);
#endif
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return tr__fail(t, TR_ERR_NOT_FOUND, "checkpoint '%s' does not exist", path);
    return tr__fail(t, TR_ERR_IO, "cannot open checkpoint '%s': %s", path, strerror(err));
  }
  if (fstat(fd, &st) != 0) { int err = errno; close(fd); return tr__fail(t, TR_ERR_IO, "cannot stat checkpoint '%s': %s", path, strerror(err)); }
  if (S_ISDIR(st.st_mode)) { close(fd); return tr__fail(t, TR_ERR_IO, "'%s' is a directory, not a checkpoint file", path); }
  if (!S_ISREG(st.st_mode)) { close(fd); return tr__fail(t, TR_ERR_IO, "'%s' is not a regular file (a device, pipe or socket?); checkpoints are files", path); }
  size = (uint64_t)st.st_size;
#else
  FILE *f = fopen(path, "rb");
  long end;
  if (!f) {
    int err = errno;
    if (err == ENOENT) return tr__fail(t, TR_ERR_NOT_FOUND, "checkpoint '%s' does not exist", path);
    return tr__fail(t, TR_ERR_IO, "cannot open checkpoint '%s': %s", path, strerror(err));
  }
  if (fseek(f, 0, SEEK_END) != 0 || (end = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
    fclose(f);
    return tr__fail(t, TR_ERR_IO, "'%s' is not a regular file; checkpoints are files", path);
  }
  size = (uint64_t)end;
#endif
  if (size > t->tr__max_ckpt || size > (uint64_t)SIZE_MAX - 1) {
#ifdef TR__POSIX
    close(fd);
#else
    fclose(f);
#endif
    return tr__fail(t, TR_ERR_FORMAT, "checkpoint '%s' is %llu bytes, more than the %llu this model's checkpoints can need "
                    "(raise tr_desc.max_checkpoint_bytes if its hooks keep that much state)", path,
                    (unsigned long long)size, (unsigned long long)t->tr__max_ckpt);
  }
  buf = (unsigned char *)malloc((size_t)size + 1);
  if (!buf) {
#ifdef TR__POSIX
    close(fd);
#else
    fclose(f);
#endif
    return tr__fail(t, TR_ERR_NOMEM, "out of memory reading '%s' (%llu bytes)", path, (unsigned long long)size);
  }
  for (;;) { /* one byte more than the size: to see a file that grew */
#ifdef TR__POSIX
    ssize_t k = read(fd, buf + len, (size_t)size + 1 - len);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) { int err = errno; free(buf); close(fd); return tr__fail(t, TR_ERR_IO, "reading checkpoint '%s' failed: %s", path, strerror(err)); }
#else
    size_t k = fread(buf + len, 1, (size_t)size + 1 - len, f);
    if (k == 0 && ferror(f)) { free(buf); fclose(f); return tr__fail(t, TR_ERR_IO, "reading checkpoint '%s' failed", path); }
#endif
    if (k == 0) break;
    len += (size_t)k;
    if (len > size) break;
  }
#ifdef TR__POSIX
  close(fd);
#else
  fclose(f);
#endif
  if (len != size) {
    free(buf);
    return tr__fail(t, TR_ERR_IO, "checkpoint '%s' changed size while it was read (%llu bytes, then %s%zu): is something "
                    "writing it?", path, (unsigned long long)size, len > size ? "more than " : "", len > size ? (size_t)size : len);
  }
  *out = buf;
  *out_len = len;
  return TR_OK;
}

static tr_err tr__load_file(tr_trainer *t, const char *path) {
  unsigned char *buf = NULL;
  size_t len = 0;
  if (tr__read_file(t, path, &buf, &len)) return t->tr__err;
  tr__load_mem(t, buf, len, path);
  free(buf);
  return t->tr__err;
}

/* Loading while a run is going would pull the counters from under the loop (tr_config.resume_from is
   the way to resume inside fit): refused, without touching the run. */
static tr_err tr__load_allowed(tr_trainer *t) {
  if (t->running != HK_STAGE_NONE)
    return tr__refuse(t, "tr_load called during a %s run (from a hook?); to resume inside a fit, use tr_config.resume_from",
                      hk_stage_name(t->running));
  t->tr__err = TR_OK;
  t->error[0] = 0;
  return TR_OK;
}

TRAIN_API tr_err tr_load(tr_trainer *t, const char *path) {
  if (!t) return TR_ERR_INVALID;
  if (tr__load_allowed(t)) return TR_ERR_INVALID;
  if (!path || !path[0]) return tr__fail(t, TR_ERR_INVALID, "tr_load: no path");
  return tr__load_file(t, path);
}

TRAIN_API tr_err tr_load_mem(tr_trainer *t, const void *data, size_t len) {
  if (!t) return TR_ERR_INVALID;
  if (tr__load_allowed(t)) return TR_ERR_INVALID;
  if (!data && len) return tr__fail(t, TR_ERR_INVALID, "tr_load_mem: no data");
  return tr__load_mem(t, (const unsigned char *)(data ? data : ""), len, "<memory>");
}

#ifdef __cplusplus
}
#endif
#endif /* TRAIN__IMPLEMENTED */
#endif /* TRAIN_IMPLEMENTATION */

/*
   ------------------------------------------------------------------------------------------------
   This software is available under 2 licenses -- choose whichever you prefer.
   ALTERNATIVE A - MIT License. Copyright (c) 2026 the hooks.h authors.
   Permission is hereby granted, free of charge, to any person obtaining a copy of this software and
   associated documentation files (the "Software"), to deal in the Software without restriction,
   including without limitation the rights to use, copy, modify, merge, publish, distribute,
   sublicense, and/or sell copies of the Software, and to permit persons to whom the Software is
   furnished to do so, subject to the following conditions: The above copyright notice and this
   permission notice shall be included in all copies or substantial portions of the Software.
   THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED.
   ALTERNATIVE B - Public Domain (www.unlicense.org). Anyone is free to copy, modify, publish, use,
   compile, sell, or distribute this software, either in source code form or as a compiled binary,
   for any purpose, commercial or non-commercial, and by any means.
   ------------------------------------------------------------------------------------------------
*/
