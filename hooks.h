/* hooks.h - v0.2.0 - 2026-11-22 - Lightning-style hooks for C training loops - MIT or public domain

   A training loop calls HK_FIRE(reg, HK_ON_TRAIN_BATCH_END, &ctx) at each interesting point; users
   register functions or whole callbacks against those events. A site with nothing registered costs
   a load, a compare and a branch; with HK_DISABLE defined it costs nothing at all.

   USAGE
     In exactly one C or C++ file:
         #define HOOKS_IMPLEMENTATION
         #include "hooks.h"
     Everywhere else just #include "hooks.h". The implementation needs stb_ds.h
     (Debian: libstb-dev, found as <stb/stb_ds.h>); link with -lm. Defined in two files, the link's
     first error names hk__HOOKS_IMPLEMENTATION_defined_in_more_than_one_file.

       static hk_signal log_loss(hk_ctx *ctx, void *user) {
           printf("step %lld loss %.4f\n", (long long)ctx->global_step, ctx->loss);
           return HK_CONTINUE;
       }
       hk_registry *reg = hk_create(NULL);
       hk_on(reg, HK_ON_TRAIN_BATCH_END, log_loss, NULL, &(hk_opts){ .name = "log" }, NULL);
       ...
       hk_ctx ctx = { .stage = HK_STAGE_FIT };
       hk_flow flow = { 0 };
       for (...) {
           ...; ctx.loss = loss;
           HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_END, &ctx, &flow);    (or HK_FIRE, ignoring signals)
           if (HK_FLOW_HAS(&flow, HK_FLOW_STOP)) break;
       }
       hk_ctx_free(&ctx);
       hk_destroy(reg);

     Your own loop: read "THE CONTEXT CONTRACT" (what each hk_ctx field means and when it changes)
     and "your own loop" (hk_flow, Ctrl-C with hk_stop_signals_install, hk_grad_norm, hk_is_finite)
     below.

   COMPILE-TIME OPTIONS (define before including)
     HOOKS_IMPLEMENTATION     emit the implementation in this translation unit
     HK_DISABLE               compile every site (HK_FIRE, HK_FIRE_FLOW, HK_ACTIVE) to nothing; arguments
                              are still type-checked. Only the sites go: every function stays real and
                              callable (so the same program builds either way; registrations succeed,
                              nothing is ever dispatched), and the implementation stays linked (about
                              42 KB of code with gcc -O2) unless the program calls none of it and links
                              with -Wl,--gc-sections
     HOOKS_STATIC             make every function static (private copy per translation unit)
     HOOKS_API                declaration prefix for public functions (default: extern)
     HOOKS_ASSERT(c)          assertion used by the implementation (default: assert)
     HOOKS_REALLOC(p,n)       allocator pair; define both or neither (default: realloc/free)
     HOOKS_FREE(p)
     HOOKS_STB_DS_INCLUDE     how to include stb_ds.h (default: <stb/stb_ds.h>)
     HOOKS_NO_STB_DS_IMPL     the program already defines STB_DS_IMPLEMENTATION elsewhere (or links -lstb)
     HK_NO_SIGNALS            no <signal.h>: hk_stop_signals_install returns -1 (the default on WASI)
     HK_MAX_EVENTS            built-in plus user-defined events (default 128)
     HK_MAX_DEPTH             how deep dispatches may nest (a hook firing an event, which fires ...):
                              one deeper runs no hook and returns HK_FAIL with ctx->hook_failure saying
                              so, instead of overflowing the stack (default 64)
     HK_CLOCK_NS()            hk_clock's and hk_profile's clock: nanoseconds as uint64_t (default:
                              clock_gettime(CLOCK_MONOTONIC), even under strict -std=c99 on Linux)

   ENVIRONMENT
     HOOKS_TRACE=tree|lines   print every dispatched event and hook call (same as hk_trace)

   CONTENTS (search for a title)
     declarations   the event table; signals, tiers, stages, errors, filters; THE CONTEXT CONTRACT
                    (hk_ctx); options and callbacks; registry; inside hooks (metrics); finite checks;
                    your own loop (acting on signals, Ctrl-C and SIGTERM, the gradient norm); trace;
                    profile; callback state; factories and spec strings;
                    THE HOT PATH: the call site, inline: HK_FIRE, HK_FIRE_FLOW, HK_ACTIVE, the
                    guard, hk__fire (the loop a site runs), the registry's layout
     IMPLEMENTATION private types; tables from the X-macros; small helpers; names; the per-event run
                    lists; registry; trace; profile;
                    THE HOT PATH, out of line: the general loop (hk__dispatch), settling signals and
                    failures, hk__fire's slow exits;
                    inside hooks; your own loop; metrics; callback state; factories and spec strings

   CHANGELOG: CHANGES.md in the hooks.h repository (every version of hooks.h, train.h and the kernels).
*/
#ifndef HOOKS_H
#define HOOKS_H

#define HOOKS_VERSION_MAJOR 0
#define HOOKS_VERSION_MINOR 2
#define HOOKS_VERSION_PATCH 0
#define HOOKS_VERSION_STRING "0.2.0"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h> /* memcpy in the inline finite checks */

#ifndef HOOKS_API
#  ifdef HOOKS_STATIC
#    define HOOKS_API static
#  else
#    define HOOKS_API extern
#  endif
#endif

#ifndef HK_MAX_EVENTS
#  define HK_MAX_EVENTS 128
#endif
#ifndef HK_MAX_CHECKPOINT_PATHS
#  define HK_MAX_CHECKPOINT_PATHS 8 /* paths hk_request_checkpoint can queue before the loop honours them */
#endif
#ifndef HK_MAX_DEPTH
#  define HK_MAX_DEPTH 64 /* dispatches nested inside hooks; deeper ones fail instead of overflowing the stack */
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
   The event table: the single source of truth. Everything about an event (enum, name, callback
   field, pairing, which signals it honours, documentation) is generated from this list.

   X(ENUM_SUFFIX, name, pairing, honoured signals, doc)
     pairing:  HK_OPENS  starts a span closed by a matching *_end event (the trace indents after it)
               HK_CLOSES ends a span (runs in reverse hook order when reverse_end_events is set)
               HK_MONITOR_LAST also: callbacks registered with .monitor run after the model tier
               HK_MODEL_FIRST  also: the model tier runs before the callback tier (Lightning calls the
                               LightningModule's on_load_checkpoint before the callbacks')
               HK_REVERSED     also: always runs in reverse hook order, whatever reverse_end_events says
                               (Hydra's end events: on_run_end, on_multirun_end, on_job_end)
     signals:  the set of signals a trainer acts on at this event (HK_HONOURS_* below). A signal an
               event does not honour degrades to the strongest weaker one it does: hk_honoured().
   --------------------------------------------------------------------------------------------- */
#define HK_EVENTS(X) \
  X(SETUP,                      setup,                      HK_OPENS,  HK_HONOURS_RUN,    "a stage begins (ctx->stage: fit, validate, test, predict); allocate here") \
  X(CONFIGURE_MODEL,            configure_model,            0,         HK_HONOURS_RUN,    "build or modify the model before optimizers are made") \
  X(ON_FIT_START,               on_fit_start,               HK_OPENS,  HK_HONOURS_RUN,    "fit() begins, after setup and checkpoint restore") \
  X(ON_SANITY_CHECK_START,      on_sanity_check_start,      HK_OPENS,  HK_HONOURS_RUN,    "a few validation batches run before training to catch bugs early") \
  X(ON_SANITY_CHECK_END,        on_sanity_check_end,        HK_CLOSES, HK_HONOURS_RUN,    "the sanity check finished") \
  X(ON_TRAIN_START,             on_train_start,             HK_OPENS,  HK_HONOURS_RUN,    "the training loop begins") \
  X(ON_TRAIN_EPOCH_START,       on_train_epoch_start,       HK_OPENS,  HK_HONOURS_EPOCH,  "a training epoch begins (ctx->epoch)") \
  X(ON_TRAIN_BATCH_START,       on_train_batch_start,       HK_OPENS,  HK_HONOURS_STEP,   "a training batch begins (ctx->batch_idx, ctx->batch)") \
  X(ON_BEFORE_ZERO_GRAD,        on_before_zero_grad,        0,         HK_HONOURS_STEP,   "gradients are about to be zeroed (first micro-batch of a window)") \
  X(ON_BEFORE_BACKWARD,         on_before_backward,         0,         HK_HONOURS_STEP,   "the loss is known (ctx->loss); backward is next") \
  X(ON_AFTER_BACKWARD,          on_after_backward,          0,         HK_HONOURS_STEP,   "gradients of this micro-batch are accumulated (ctx->grads)") \
  X(ON_BEFORE_OPTIMIZER_STEP,   on_before_optimizer_step,   0,         HK_HONOURS_STEP,   "gradients are final, before clipping and the update") \
  X(ON_GRADIENT_CLIP,           on_gradient_clip,           0,         HK_HONOURS_STEP,   "gradients were clipped (hk_grad_norm(ctx) is still the norm before clipping)") \
  X(ON_AFTER_OPTIMIZER_STEP,    on_after_optimizer_step,    0,         HK_HONOURS_EPOCH,  "parameters were updated (EMA, weight averaging)") \
  X(ON_TRAIN_BATCH_END,         on_train_batch_end,         HK_CLOSES, HK_HONOURS_EPOCH,  "a training batch ended (ctx->loss, ctx->global_step)") \
  X(ON_VALIDATION_START,        on_validation_start,        HK_OPENS,  HK_HONOURS_RUN,    "a validation run begins") \
  X(ON_VALIDATION_EPOCH_START,  on_validation_epoch_start,  HK_OPENS,  HK_HONOURS_RUN,    "the validation epoch begins") \
  X(ON_VALIDATION_BATCH_START,  on_validation_batch_start,  HK_OPENS,  HK_HONOURS_BATCH,  "a validation batch begins") \
  X(ON_VALIDATION_BATCH_END,    on_validation_batch_end,    HK_CLOSES, HK_HONOURS_EPOCH,  "a validation batch ended (ctx->loss)") \
  X(ON_VALIDATION_EPOCH_END,    on_validation_epoch_end,    HK_CLOSES, HK_HONOURS_RUN,    "the validation epoch ended; metrics such as val/loss are set") \
  X(ON_VALIDATION_END,          on_validation_end,          HK_CLOSES, HK_HONOURS_RUN,    "the validation run ended") \
  X(ON_TRAIN_EPOCH_END,         on_train_epoch_end,         HK_CLOSES | HK_MONITOR_LAST, HK_HONOURS_RUN,    "a training epoch ended, after its validation") \
  X(ON_TRAIN_END,               on_train_end,               HK_CLOSES, HK_HONOURS_RUN,    "the training loop ended") \
  X(ON_FIT_END,                 on_fit_end,                 HK_CLOSES, HK_HONOURS_RUN,    "fit() is about to return successfully") \
  X(ON_TEST_START,              on_test_start,              HK_OPENS,  HK_HONOURS_RUN,    "a test run begins") \
  X(ON_TEST_EPOCH_START,        on_test_epoch_start,        HK_OPENS,  HK_HONOURS_RUN,    "the test epoch begins") \
  X(ON_TEST_BATCH_START,        on_test_batch_start,        HK_OPENS,  HK_HONOURS_BATCH,  "a test batch begins") \
  X(ON_TEST_BATCH_END,          on_test_batch_end,          HK_CLOSES, HK_HONOURS_EPOCH,  "a test batch ended (ctx->loss)") \
  X(ON_TEST_EPOCH_END,          on_test_epoch_end,          HK_CLOSES, HK_HONOURS_RUN,    "the test epoch ended; metrics such as test/loss are set") \
  X(ON_TEST_END,                on_test_end,                HK_CLOSES, HK_HONOURS_RUN,    "the test run ended") \
  X(ON_PREDICT_START,           on_predict_start,           HK_OPENS,  HK_HONOURS_RUN,    "a prediction run begins") \
  X(ON_PREDICT_EPOCH_START,     on_predict_epoch_start,     HK_OPENS,  HK_HONOURS_RUN,    "the prediction epoch begins") \
  X(ON_PREDICT_BATCH_START,     on_predict_batch_start,     HK_OPENS,  HK_HONOURS_BATCH,  "a prediction batch begins") \
  X(ON_PREDICT_BATCH_END,       on_predict_batch_end,       HK_CLOSES, HK_HONOURS_EPOCH,  "a prediction batch ended (ctx->outputs)") \
  X(ON_PREDICT_EPOCH_END,       on_predict_epoch_end,       HK_CLOSES, HK_HONOURS_RUN,    "the prediction epoch ended") \
  X(ON_PREDICT_END,             on_predict_end,             HK_CLOSES, HK_HONOURS_RUN,    "the prediction run ended") \
  X(ON_SAVE_CHECKPOINT,         on_save_checkpoint,         0,         HK_HONOURS_FAIL,   "a checkpoint is being written (ctx->path); hook state is saved with it") \
  X(ON_LOAD_CHECKPOINT,         on_load_checkpoint,         HK_MODEL_FIRST, HK_HONOURS_FAIL,   "a checkpoint was read (ctx->path); hook state is already restored") \
  X(ON_CHECKPOINT_SAVED,        on_checkpoint_saved,        0,         HK_HONOURS_FAIL,   "a checkpoint file is complete on disk (ctx->path)") \
  X(ON_LOG,                     on_log,                     HK_MONITOR_LAST, HK_HONOURS_FAIL, "a log record is about to be written (ctx->outputs: the loop's record); change it here") \
  X(ON_EXCEPTION,               on_exception,               0,         HK_HONOURS_NONE,   "a run is aborting (ctx->abort_reason says why); every handler runs") \
  X(TEARDOWN,                   teardown,                   HK_CLOSES, HK_HONOURS_NONE,   "a stage ends, on success and on failure (ctx->stage); free here") \
  X(ON_RUN_START,               on_run_start,               HK_OPENS,  HK_HONOURS_FAIL,   "a program's single run begins, before its job (Hydra's RUN mode; train.h: tr_sweep with one job)") \
  X(ON_RUN_END,                 on_run_end,                 HK_CLOSES | HK_REVERSED, HK_HONOURS_FAIL, "the single run ended, after its job") \
  X(ON_MULTIRUN_START,          on_multirun_start,          HK_OPENS,  HK_HONOURS_FAIL,   "a sweep begins, before any job (Hydra's MULTIRUN mode; train.h: tr_sweep)") \
  X(ON_MULTIRUN_END,            on_multirun_end,            HK_CLOSES | HK_REVERSED, HK_HONOURS_FAIL, "the sweep ended, after every job (its summary is written)") \
  X(ON_JOB_START,               on_job_start,               HK_OPENS,  HK_HONOURS_FAIL,   "a job begins (ctx->outputs: train.h's tr_sweep_job); fail: the job fails without running") \
  X(ON_JOB_END,                 on_job_end,                 HK_CLOSES | HK_REVERSED, HK_HONOURS_RUN, "a job ended (its status, error and final metrics; ctx->metrics too); stop: no more jobs")

/* What a hook returns. The strongest signal of all hooks of one dispatch wins; every hook runs. */
#define HK_SIGNALS(X) \
  X(HK_CONTINUE,   continue,   "carry on") \
  X(HK_SKIP_STEP,  skip_step,  "skip this optimizer step (gradients are discarded)") \
  X(HK_SKIP_BATCH, skip_batch, "skip the rest of this batch's work (its *_batch_end still fires)") \
  X(HK_STOP_EPOCH, stop_epoch, "end the current epoch (or evaluation loop) after this batch") \
  X(HK_STOP,       stop,       "stop training gracefully (respecting min_epochs/min_steps)") \
  X(HK_FAIL,       fail,       "abort: on_exception handlers run, then teardown; the run returns an error")

typedef enum hk_signal {
#define HK__X(sym, name, doc) sym,
  HK_SIGNALS(HK__X)
#undef HK__X
  HK_SIGNAL_COUNT
} hk_signal;

enum { HK_OPENS = 1, HK_CLOSES = 2, HK_MONITOR_LAST = 4, HK_MODEL_FIRST = 8, HK_REVERSED = 16 };

/* Signal sets for the event table's "signals" column. */
#define HK_SIGNAL_BIT(s) (1u << (s))
#define HK_HONOURS_NONE  HK_SIGNAL_BIT(HK_CONTINUE)                                  /* reported, never acted on */
#define HK_HONOURS_FAIL  (HK_HONOURS_NONE | HK_SIGNAL_BIT(HK_FAIL))
#define HK_HONOURS_RUN   (HK_HONOURS_FAIL | HK_SIGNAL_BIT(HK_STOP))                  /* stop gracefully, or fail */
#define HK_HONOURS_EPOCH (HK_HONOURS_RUN | HK_SIGNAL_BIT(HK_STOP_EPOCH))             /* ... or end this epoch/loop */
#define HK_HONOURS_BATCH (HK_HONOURS_EPOCH | HK_SIGNAL_BIT(HK_SKIP_BATCH))           /* ... or skip this batch */
#define HK_HONOURS_STEP  (HK_HONOURS_BATCH | HK_SIGNAL_BIT(HK_SKIP_STEP))            /* ... or skip the optimizer step */

typedef enum hk_event {
#define HK__X(NAME, name, pairing, signals, doc) HK_##NAME,
  HK_EVENTS(HK__X)
#undef HK__X
  HK_EVENT_COUNT /* built-in events; user events get ids from HK_EVENT_COUNT up */
} hk_event;

/* Order within an event: tier, then opts.order (ascending), then registration order.
   X(enum, name) - hk_tier_name() is generated from the same list. */
#define HK_TIERS(X) \
  X(HK_TIER_CALLBACK, "callback") \
  X(HK_TIER_MODEL,    "model")    \
  X(HK_TIER_STRATEGY, "strategy")
typedef enum hk_tier {
#define HK__X(sym, name) sym,
  HK_TIERS(HK__X)
#undef HK__X
  HK_TIER_COUNT
} hk_tier;

/* What the loop is running (ctx->stage). X(enum, name) - hk_stage_name(). */
#define HK_STAGES(X) \
  X(HK_STAGE_NONE,         "none")     \
  X(HK_STAGE_FIT,          "fit")      \
  X(HK_STAGE_VALIDATE,     "validate") \
  X(HK_STAGE_TEST,         "test")     \
  X(HK_STAGE_PREDICT,      "predict")  \
  X(HK_STAGE_SANITY_CHECK, "sanity_check")
typedef enum hk_stage {
#define HK__X(sym, name) sym,
  HK_STAGES(HK__X)
#undef HK__X
  HK_STAGE_COUNT
} hk_stage;

/* Errors are values; 0 is success. hk_last_error() has the readable message.
   X(enum, name for hk_err_name, when it happens) */
#define HK_ERRORS(X) \
  X(HK_OK,                "ok",             "success") \
  X(HK_ERR_INVALID,       "invalid argument", "a NULL or out-of-range argument, or a call not allowed now") \
  X(HK_ERR_UNKNOWN_EVENT, "unknown event",  "an event id or name that does not exist") \
  X(HK_ERR_DUPLICATE,     "duplicate name", "a name that is already registered") \
  X(HK_ERR_FULL,          "table full",     "a table reached its capacity") \
  X(HK_ERR_NOT_FOUND,     "not found",      "a handle, name or key that is not registered") \
  X(HK_ERR_NOMEM,         "out of memory",  "allocation failed") \
  X(HK_ERR_SPEC,          "bad spec",       "a spec string is malformed or names something unknown") \
  X(HK_ERR_HOOK,          "hook failed",    "a hook failed with the fatal policy") \
  X(HK_ERR_STATE,         "bad state",      "a callback could not save or load its state")
typedef enum hk_err {
#define HK__X(sym, name, doc) sym,
  HK_ERRORS(HK__X)
#undef HK__X
  HK_ERR_COUNT
} hk_err;

/* What happens when a hook returns HK_FAIL (or an invalid signal). */
typedef enum hk_on_error {
  HK_ON_ERROR_FATAL,     /* the dispatch returns HK_FAIL and ctx->hook_failure says what failed (default);
                            the loop reports it: hooks.h logs only a second fatal failure of one dispatch */
  HK_ON_ERROR_WARN,      /* log it (hk_desc.log) and carry on as if the hook returned HK_CONTINUE */
  HK_ON_ERROR_DISABLE    /* like WARN, and disable the hook after opts.max_failures failures */
} hk_on_error;

/* Which counter a filter reads. Every counter is read the same way, as a 1-based ordinal n, "the
   n-th such thing": every = N runs when n > 0 and n % N == 0 (the N-th, 2N-th, ...), once_at = N the
   first time n == N, from/until keep from <= n < until. Lightning counts so too: log_every_n_steps = 50
   logs on the 50th, 100th batch ((batches_that_stepped + 1) % 50 == 0), check_val_every_n_epoch = N
   validates after the N-th epoch ((current_epoch + 1) % N == 0). */
typedef enum hk_counter {
  HK_COUNT_CALLS,        /* n = calls of this hook on this event, this one included (default) */
  HK_COUNT_STEP,         /* n = ctx->global_step: optimizer steps taken (0 before the first) */
  HK_COUNT_EPOCH,        /* n = ctx->epoch + 1 */
  HK_COUNT_BATCH         /* n = ctx->batch_idx + 1 */
} hk_counter;

/* Requests a hook can make of the trainer (HuggingFace's TrainerControl); honoured at the next safe point. */
enum { HK_REQUEST_VALIDATION = 1, HK_REQUEST_CHECKPOINT = 2, HK_REQUEST_LOG = 4 };

typedef struct hk_registry hk_registry;
typedef struct hk_ctx hk_ctx;
typedef struct hk_flow { unsigned signals; } hk_flow; /* HK_SIGNAL_BIT set of what was asked since cleared */
typedef int hk_handle; /* > 0 for a live registration */

typedef hk_signal (*hk_fn)(hk_ctx *ctx, void *user);

/* A named view of a parameter or gradient tensor (llm.c style: one flat buffer, many views). */
typedef struct hk_tensor {
  const char *name;
  float *data;
  size_t count;
  int on_device;         /* 1 when data is device memory (read it with the trainer's helpers) */
} hk_tensor;

/* Everything a hook sees: THE CONTEXT CONTRACT. The loop (train.h, or yours) owns one hk_ctx and
   fills the fields below; dispatch fills reg/event/self/hook_failure. A callback written against
   this contract works in any loop that keeps it (train.h keeps all of it). "Lightning:" notes say
   where PyTorch Lightning's Trainer behaves the same or differently.

   field          set by     meaningful at / changes when
   reg,event,self dispatch   inside a hook: the registry, the event being run, the running hook's handle
   stage          loop       every event: HK_STAGE_FIT for a whole fit, validation inside it included;
                             HK_STAGE_SANITY_CHECK during the sanity check; VALIDATE/TEST/PREDICT in
                             standalone runs (Lightning: stage is "validating" inside fit too)
   epoch          loop       the current epoch, from 0; set before on_train_epoch_start, moves to the
                             next value after on_train_epoch_end (validation inside fit sees the
                             training epoch it belongs to)
   global_step    loop       optimizer steps taken. It moves right after the optimizer update, before
                             on_after_optimizer_step, so that event and on_train_batch_end see the new
                             count and on_before_optimizer_step the old one (Lightning: the same; it
                             has no on_after_optimizer_step). A skipped step does not move it.
   batch_idx      loop       the batch's index in its loop, from 0: from *_batch_start to *_batch_end;
                             after a validation inside fit, the training batch's index again
   samples_seen   loop       training samples processed, updated before on_train_batch_end
   loss           loop       training: NaN at on_train_batch_start, the batch's loss from
                             on_before_backward on; evaluation: the batch's loss at *_batch_end, the
                             loop's mean at *_epoch_end and *_end; after a validation inside fit, the
                             training batch's loss again
   lr             loop       the learning rate of the current step, set before on_train_batch_start
   rank,world_size loop      this process's rank and the number of processes (0 and 1 alone)
   params, grads  loop       n_tensors named views of the parameters and gradients (hk_tensor).
                             grads are meaningful from on_after_backward to on_after_optimizer_step;
                             read their norm with hk_grad_norm(ctx), computed once per change.
                             Views with on_device set hold device memory (train.h's CUDA path):
                             never dereference them on the host
   grad_norm_source loop     optional: how hk_grad_norm gets the norm of device views (a copy, made
                             only when a hook asks)
   batch, outputs loop       the current batch from *_batch_start to *_batch_end; outputs (predict) at
                             on_predict_batch_end; at on_log the loop's log record (train.h: a
                             tr_log_record, read with tr_log_current); at on_job_start/_end the job
                             (train.h's sweeps: a tr_sweep_job, read with tr_sweep_current)
   path           loop       on_save_checkpoint, on_checkpoint_saved, on_load_checkpoint: the file
   abort_reason   loop       on_exception only: why the run is aborting; NULL elsewhere
   hook_failure   dispatch   after a dispatch that returned HK_FAIL: "hook 'x' failed in on_y: why"
                             (the loop reports it; the registry does not print fatal failures)
   flow           dispatch   every signal a dispatch on this ctx returned, as its event honours it,
                             HK_FIRE's too: a loop (train.h's run layer) reads and clears it, so a
                             signal is never lost at a site that ignored the value
   trainer, user  loop       the loop's own object (train.h: the tr_trainer) and the user's pointer
   requests       hooks      HK_REQUEST_* bits a hook sets with hk_request(); the loop clears the ones
   checkpoint_paths, n_checkpoint_paths, checkpoint_default
                  hooks      where a requested checkpoint goes: hk_request_checkpoint(ctx, path) adds a
                             path; hk_request(ctx, HK_REQUEST_CHECKPOINT) sets checkpoint_default (the
                             loop's own path). The loop clears them with the request bit (below)
                             it honours at its next safe point
   metrics        both       hk_metric_set/get: the way hooks talk to each other; the loop may publish
                             values there (train.h's are listed in docs/trainer.md, "Metrics") */
struct hk_ctx {
  hk_registry *reg;
  int event;
  hk_handle self;
  hk_stage stage;
  int64_t epoch, global_step, batch_idx, samples_seen;
  double loss, lr;
  int rank, world_size;
  const hk_tensor *params, *grads;
  int n_tensors;         /* entries in params and in grads */
  void *batch, *outputs;
  const char *path;
  const char *abort_reason;
  const char *hook_failure;
  hk_flow flow;
  void *trainer, *user;
  unsigned requests;
  const char *checkpoint_paths[HK_MAX_CHECKPOINT_PATHS]; /* hk_request_checkpoint() */
  int n_checkpoint_paths;
  int checkpoint_default; /* also save at the loop's own path */
  char hk__fail_msg[256]; /* private: hk_fail() writes the message here; dispatch moves it to hook_failure */
  void *hk__metrics;     /* private: the metrics map */
  uint64_t hk__seq;      /* private: dispatch counter for lazy metric caching */
  double hk__grad_norm;  /* private: hk_grad_norm's cached value, valid while hk__grad_norm_ok */
  int hk__grad_norm_ok;
  /* Where hk_grad_norm gets the norm of gradients it cannot read (views with on_device set): the
     loop's function, called at most once per change of the gradients (train.h's CUDA path copies the
     norm from the device here, so only a hook that asks pays for the copy). NULL: NaN for such views. */
  double (*grad_norm_source)(hk_ctx *ctx, void *user);
  void *grad_norm_source_user;
  uint64_t hk__grads_version; /* private: counts hk_grads_changed calls (a device cache's key) */
  uint64_t hk__metric_sets;   /* private: counts hk_metric_set calls (hk_metric_stamp) */
};

/* Filters decide per call whether a hook runs. Zero fields mean "no constraint". */
typedef struct hk_filter {
  hk_counter counter;    /* what every/once_at/from/until read: the ordinal n (see hk_counter) */
  int64_t every;         /* run when n > 0 and n % every == 0: the every-th, 2*every-th, ... */
  int64_t once_at;       /* run the first time n == once_at, never again */
  int64_t from, until;   /* run when from <= n (and n < until, when until > 0) */
  int (*pred)(const hk_ctx *ctx, void *user); /* run only when pred returns nonzero */
  void *pred_user;
} hk_filter;

/* Per-registration options; a zero struct (or NULL) means the defaults. */
typedef struct hk_opts {
  const char *name;      /* single functions: unique name (default "hook#<handle>"); callbacks use cb->name */
  hk_tier tier;
  int order;             /* within a tier: lower runs first */
  int monitor;           /* a monitoring callback: on HK_MONITOR_LAST events it runs after the model tier */
  hk_filter filter;
  hk_on_error on_error;  /* fatal (default): reported once, by the loop, from ctx->hook_failure; warn/disable: logged */
  int max_failures;      /* HK_ON_ERROR_DISABLE: disable after this many failures (default 1) */
  int disabled;          /* register disabled; hk_enable() turns it on */
  int rank_zero_only;    /* run only where ctx->rank == 0 (loggers, printing; Lightning's rank_zero_only).
                            Its signals still count everywhere when the loop agrees on them (train.h
                            with TRAIN_MPI does); it must not call collectives (it runs on one rank) */
} hk_opts;

/* Bytes a callback writes its state into, and reads it back from. */
typedef struct hk_bytes { unsigned char *data; size_t len, cap; int failed; } hk_bytes;
/* why: where load_state says why it refuses the bytes (hk_reject); hk_state_load puts it in its message */
typedef struct hk_reader { const unsigned char *data; size_t len, pos; char why[200]; } hk_reader;

/* A whole callback: optional functions for any built-in events, plus state and lifetime. */
typedef struct hk_callback {
  const char *name;      /* unique; also the state key in checkpoints */
  void *user;            /* passed to every function below */
#define HK__X(NAME, name, pairing, signals, doc) hk_fn name;
  HK_EVENTS(HK__X)
#undef HK__X
  int (*save_state)(void *user, hk_bytes *out);   /* return 0 on success */
  int (*load_state)(void *user, hk_reader *in);   /* return 0 on success; reject bad data (hk_reject says why);
                                                     on a rejection leave the callback as it was */
  void (*destroy)(void *user);                    /* called when unregistered or at hk_destroy */
} hk_callback;

typedef void (*hk_log_fn)(const char *message, void *user);

/* Registry options; zero means default. */
typedef struct hk_desc {
  int max_hooks;         /* registrations (functions + callbacks), default 256 */
  int reverse_end_events;/* run HK_CLOSES events in reverse order (Hydra's rule; nests setup/teardown) */
  hk_log_fn log;         /* where failures and warnings go (default: stderr) */
  void *log_user;
  FILE *trace_out;       /* where the trace goes (default: stderr) */
} hk_desc;

/* ---- registry --------------------------------------------------------------------------------- */
HOOKS_API hk_registry *hk_create(const hk_desc *desc);  /* NULL desc = defaults; NULL on OOM */
HOOKS_API void hk_destroy(hk_registry *reg);             /* calls every callback's destroy */
HOOKS_API const char *hk_last_error(const hk_registry *reg);
/* One object a layer built on hooks.h keeps with the registry (train.h's run layer); hk_destroy calls
   destroy(p) after every callback's destroy, so callbacks may use it until then. A second hk_attach
   replaces the pointer (the old one is not freed). */
HOOKS_API void hk_attach(hk_registry *reg, void *p, void (*destroy)(void *p));
HOOKS_API void *hk_attached(const hk_registry *reg);
/* Set the message hk_last_error returns and return code: how a factory (or any library built on
   hooks.h) says why it refused, e.g. return hk_set_error(reg, HK_ERR_INVALID, "patience must be >= 0"). */
HOOKS_API hk_err hk_set_error(hk_registry *reg, hk_err code, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
  __attribute__((format(printf, 3, 4)))
#endif
  ;

/* Register one function for one event (built-in or user-defined). */
HOOKS_API hk_err hk_on(hk_registry *reg, int event, hk_fn fn, void *user, const hk_opts *opts, hk_handle *out);
/* Register every non-NULL function of a callback under one handle. */
HOOKS_API hk_err hk_add_callback(hk_registry *reg, const hk_callback *cb, const hk_opts *opts, hk_handle *out);
/* Unregister, enable, disable. Safe from inside a running dispatch: the change takes effect for the
   next dispatch; a hook that is disabled or removed mid-dispatch does not run later in it. */
HOOKS_API hk_err hk_off(hk_registry *reg, hk_handle h);
HOOKS_API hk_err hk_enable(hk_registry *reg, hk_handle h);
HOOKS_API hk_err hk_disable(hk_registry *reg, hk_handle h);
HOOKS_API hk_handle hk_find(const hk_registry *reg, const char *name); /* 0 if none */
HOOKS_API int hk_is_enabled(const hk_registry *reg, hk_handle h);
HOOKS_API int hk_count(const hk_registry *reg, int event);  /* enabled hooks on an event */
/* Dispatches in progress on reg: > 0 while a hook runs (a library refuses there what belongs to the loop). */
HOOKS_API int hk_dispatching(const hk_registry *reg);
/* The callback registered under h (a copy hooks.h keeps; its user pointer is the callback's state),
   or NULL when h is a single function or not registered. Lets a library find its own callback's
   state again from a handle (check cb->destroy to know the callback is yours). */
HOOKS_API const hk_callback *hk_callback_get(const hk_registry *reg, hk_handle h);
/* The name registration h goes by (a callback's cb->name, a function's opts.name or "hook#<h>"), NULL
   when h is not registered: with ctx->self, the hook running now (a report of where a loop is stuck). */
HOOKS_API const char *hk_name(const hk_registry *reg, hk_handle h);

/* User-defined events: ids from HK_EVENT_COUNT up to HK_MAX_EVENTS-1. pairing: 0, HK_OPENS or HK_CLOSES,
   optionally | HK_MONITOR_LAST, HK_MODEL_FIRST and/or HK_REVERSED (the event table's legend says what
   they do). */
HOOKS_API hk_err hk_event_define(hk_registry *reg, const char *name, int pairing, int *out_id);
HOOKS_API int hk_event_find(const hk_registry *reg, const char *name);   /* -1 if unknown */
HOOKS_API const char *hk_event_name(const hk_registry *reg, int event); /* reg may be NULL for built-ins */
HOOKS_API const char *hk_event_doc(int event);            /* built-in events */
HOOKS_API int hk_event_flags(const hk_registry *reg, int event);
HOOKS_API unsigned hk_event_signals(const hk_registry *reg, int event); /* HK_SIGNAL_BIT set it honours */
/* What a trainer acts on: s if the event honours it, else the strongest weaker signal it does honour. */
HOOKS_API hk_signal hk_honoured(const hk_registry *reg, int event, hk_signal s);
HOOKS_API const char *hk_signal_name(hk_signal s);
HOOKS_API const char *hk_signal_doc(hk_signal s);
HOOKS_API const char *hk_tier_name(hk_tier t);
HOOKS_API const char *hk_stage_name(hk_stage s);
HOOKS_API const char *hk_err_name(hk_err e);

/* ---- inside hooks ----------------------------------------------------------------------------- */
/* Fail with a message: return hk_fail(ctx, "loss is %f", ctx->loss); */
HOOKS_API hk_signal hk_fail(hk_ctx *ctx, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
  __attribute__((format(printf, 2, 3)))
#endif
  ;
HOOKS_API void hk_request(hk_ctx *ctx, unsigned request);  /* HK_REQUEST_* */
/* A checkpoint at a path of the hook's choosing (model_checkpoint's top-k files): sets
   HK_REQUEST_CHECKPOINT and queues path in ctx->checkpoint_paths (a path queued twice is kept once).
   The string is not copied: it must stay valid until the loop has honoured the request, i.e. until
   on_checkpoint_saved fired for it (keep it in the hook's own state). HK_ERR_FULL after
   HK_MAX_CHECKPOINT_PATHS paths, HK_ERR_INVALID for a NULL or empty path.
   A loop honours it at its next safe point: for each queued path, save there (atomically) and fire
   on_checkpoint_saved with ctx->path = that path; save at its own path too when checkpoint_default
   is set or no path is queued; then clear requests' HK_REQUEST_CHECKPOINT bit, n_checkpoint_paths
   and checkpoint_default. */
HOOKS_API hk_err hk_request_checkpoint(hk_ctx *ctx, const char *path);
HOOKS_API const hk_tensor *hk_tensor_find(const hk_tensor *t, int n, const char *name);

/* Metrics: a string -> double map in the context, the way hooks talk to each other. */
HOOKS_API hk_err hk_metric_set(hk_ctx *ctx, const char *name, double value);
HOOKS_API int hk_metric_get(hk_ctx *ctx, const char *name, double *value); /* 1 if present */
/* A lazy metric is computed by fn only when it is read: in a dispatch at most once (the event's hooks
   share the value), outside one (the loop's own reads, a record built between events) at every read, so
   the loop never sees a value cached before it changed what fn reads. */
HOOKS_API hk_err hk_metric_lazy(hk_ctx *ctx, const char *name, double (*fn)(const hk_ctx *ctx, void *user), void *user);
HOOKS_API int hk_metric_count(const hk_ctx *ctx);
/* When name was last set: the number of hk_metric_set calls on ctx up to that one (0: never set, or a
   lazy metric, which is computed when read); name NULL: the calls so far. A logger keeps the count at
   its last record and writes only what was set since (a value set once is not repeated in every row). */
HOOKS_API uint64_t hk_metric_stamp(hk_ctx *ctx, const char *name);
HOOKS_API const char *hk_metric_at(hk_ctx *ctx, int i, double *value);  /* i-th name (insertion order) */
HOOKS_API void hk_metric_clear(hk_ctx *ctx);              /* forget every value (lazy sources stay) */
/* Forget the values set after stamp `after` up to stamp `upto` (two hk_metric_stamp(ctx, NULL) readings):
   what one phase of a loop set, e.g. a sanity check's val/loss, which nothing should rank or stop on. */
HOOKS_API void hk_metric_forget_between(hk_ctx *ctx, uint64_t after, uint64_t upto);
HOOKS_API void hk_ctx_free(hk_ctx *ctx);                  /* frees the metrics map */

/* ---- finite checks that survive -ffast-math --------------------------------------------------
   Under -ffast-math / -Ofast the compiler may assume no value is NaN or infinite and fold isfinite()
   and isnan() to constants, so a NaN guard written with them never fires. These look at the bits:
   NaN and infinity are the values whose exponent bits are all ones. hooks.h and train.h test
   finiteness only through them. */
static inline int hk_is_finite(double x) {
  uint64_t bits;
  memcpy(&bits, &x, sizeof bits);
  return ((bits >> 52) & 0x7ff) != 0x7ff;
}
static inline int hk_is_finitef(float x) {
  uint32_t bits;
  memcpy(&bits, &x, sizeof bits);
  return ((bits >> 23) & 0xff) != 0xff;
}

/* ---- your own loop: acting on signals -----------------------------------------------------------
   HK_FIRE returns the strongest signal of one dispatch. A loop wants sticky decisions instead: "the
   rest of this batch is skipped", "this accumulation window gets no step", "stop after this batch".
   An hk_flow collects them. HK_FIRE_FLOW(reg, event, ctx, &flow) is HK_FIRE (the same 3-instruction
   guard when nothing is registered) whose out-of-line part also degrades the result to what the
   event honours (hk_honoured) and ORs it into flow.signals. The loop then tests one bit mask where it
   decides, with a branch hint, and none of the decision logic sits between its own hot code:

       hk_flow flow = {0};
       HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_START, &ctx, &flow);
       if (!HK_FLOW_HAS(&flow, HK_FLOW_SKIP_BATCH)) { forward...; backward...; }
       if (!HK_FLOW_HAS(&flow, HK_FLOW_SKIP_STEP)) optimizer_update();
       HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_END, &ctx, &flow);
       hk_flow_clear(&flow, HK_FLOW_BATCH_SIGNALS);          (batch over: skip_batch/skip_step go)
       if (HK_FLOW_HAS(&flow, HK_FLOW_STOP)) break;          (HK_FAIL: ctx.hook_failure says why)

   Your loop may set bits itself (hk_flow_raise(&flow, HK_FAIL) on a NaN loss) so that one test
   covers hooks and loop alike. Under HK_DISABLE, HK_FIRE_FLOW compiles to nothing. */
/* (hk_flow is defined with hk_ctx, which records one: see the context contract) */

/* Masks for HK_FLOW_HAS: each includes the stronger signals that imply it. */
#define HK_FLOW_FAIL       HK_SIGNAL_BIT(HK_FAIL)
#define HK_FLOW_STOP       (HK_SIGNAL_BIT(HK_STOP) | HK_FLOW_FAIL)           /* leave the training loop */
#define HK_FLOW_STOP_EPOCH (HK_SIGNAL_BIT(HK_STOP_EPOCH) | HK_FLOW_STOP)     /* leave this epoch */
#define HK_FLOW_SKIP_BATCH (HK_SIGNAL_BIT(HK_SKIP_BATCH) | HK_FLOW_FAIL)     /* do no more work in this batch */
#define HK_FLOW_SKIP_STEP  (HK_SIGNAL_BIT(HK_SKIP_STEP) | HK_FLOW_SKIP_BATCH) /* no optimizer step now */
/* What hk_flow_clear forgets when a batch is over (keep HK_SKIP_STEP until an accumulation window
   ends if you accumulate), and when an epoch is over. */
#define HK_FLOW_BATCH_SIGNALS (HK_SIGNAL_BIT(HK_SKIP_STEP) | HK_SIGNAL_BIT(HK_SKIP_BATCH))
#define HK_FLOW_EPOCH_SIGNALS (HK_FLOW_BATCH_SIGNALS | HK_SIGNAL_BIT(HK_STOP_EPOCH))

#define HK_FLOW_HAS(flow, mask) HK__UNLIKELY(((flow)->signals & (mask)) != 0)
static inline void hk_flow_raise(hk_flow *f, hk_signal s) { if (s != HK_CONTINUE) f->signals |= HK_SIGNAL_BIT(s); }
static inline void hk_flow_clear(hk_flow *f, unsigned mask) { f->signals &= ~mask; }

/* ---- your own loop: Ctrl-C and SIGTERM ---------------------------------------------------------
   A run should end cleanly on Ctrl-C (SIGINT) or SIGTERM (what kill, mpirun and batch schedulers
   send): finish the current step, then leave the loop the way it always ends (save, on_train_end or
   on_exception, teardown). The helper's handler only counts; the loop looks between steps:

       hk_stop_signals_install(0);                 (-1: no signals on this platform; nothing else changes)
       for (step = 0; step < n_steps; step++) {
           ... the step and its sites ...
           hk_stop_poll(&flow);                     (a signal came: HK_STOP goes into the flow)
           if (HK_FLOW_HAS(&flow, HK_FLOW_STOP)) break;
       }
       hk_stop_signals_restore();                   (the previous handlers are back)
       if (hk_stop_requested()) ... save, say so, exit(130) ...

   The first signal is counted. A second one (SIGINT or SIGTERM) does what it would without the
   helper: the process ends by the signal's default action (the exit status a shell expects), so a
   loop stuck in a long step can still be killed. With HK_STOP_COUNT_ONLY the second is counted too,
   and hk_stop_poll then also raises HK_FAIL (leave at once, through the failure path): train.h's
   tr_fit works this way. hk_stop_requested() is the count: 0, 1, 2, ... (it stops at 127), reset by
   the outermost install and kept after restore, so the code after the loop can still ask.
   - A signal the process ignores when install is called stays ignored (a background job of a shell
     script ignores SIGINT: Ctrl-C at the terminal is not meant for it).
   - Installs nest: an install inside another (tr_fit inside a loop of yours that installed) keeps the
     handlers and the count and changes only the flags, until its own restore (up to 16 deep; one
     more returns -1); restore without an install does nothing. Install and restore are not thread-safe: call them from one thread.
   - ISO C only (signal and raise; the handler re-arms itself where signal() resets it, System V
     style). With HK_NO_SIGNALS defined (a platform without <signal.h>; WASI by default) install
     returns -1, restore does nothing and the count stays 0. */
#define HK_STOP_COUNT_ONLY 1 /* hk_stop_signals_install flag: the second signal is counted, not the default action */
HOOKS_API int hk_stop_signals_install(int flags); /* SIGINT and SIGTERM; 0 ok, -1 when signals are unavailable */
HOOKS_API void hk_stop_signals_restore(void);
HOOKS_API int hk_stop_requested(void);            /* signals counted since the outermost install */
HOOKS_API int hk_stop_signal(void);               /* the latest of them: SIGINT or SIGTERM (0: none), for a message */
/* hk_stop_requested(), and when it is 1 or more raises HK_STOP in flow (may be NULL); 2 or more
   (only with HK_STOP_COUNT_ONLY: otherwise the process has ended) raises HK_FAIL as well. */
HOOKS_API int hk_stop_poll(hk_flow *flow);

/* ---- your own loop: the gradient norm ----------------------------------------------------------
   hk_grad_norm(ctx) is the L2 norm over every ctx->grads view, computed on first request and cached
   until the loop calls hk_grads_changed(ctx) (after zero_grad, backward, averaging an accumulation
   window). Clipping is not a change: for the rest of the step hk_grad_norm reports the norm before
   clipping, the value Lightning logs. A loop that computes the norm anyway (to clip) hands it over
   with hk_grad_norm_set, so nobody pays twice. Views with on_device set cannot be read here: the
   result is NaN unless the loop set the value or set ctx->grad_norm_source (then that function
   gives the norm, once per change). hk_grad_norm_metric plugs it into the metrics map:
       hk_metric_lazy(&ctx, "grad_norm", hk_grad_norm_metric, NULL); */
HOOKS_API double hk_grad_norm(hk_ctx *ctx);
HOOKS_API void hk_grad_norm_set(hk_ctx *ctx, double norm);
/* The sum of squares behind hk_grad_norm, in one fixed order so that every way of computing it gives
   the same bits (hk_grad_norm, train.h's threaded norm and clipping, any thread count, any vector
   width): the array is cut into chunks of HK_NORM_CHUNK elements; inside a chunk, element j (counted
   from the chunk's start) is squared in double and added to accumulator j % 16, then the 16
   accumulators are folded by halving (acc[j] += acc[j + w] for w = 8, 4, 2, 1); the chunks' sums are
   added in order, starting from 0. hk_grad_norm is sqrt of the sum over the views, in view order, of
   hk_sumsq(view). A loop that splits the work over threads sums whole chunks per thread (one
   hk_sumsq call each) and adds the results in chunk order. */
#define HK_NORM_CHUNK 65536
HOOKS_API double hk_sumsq(const float *x, size_t n);
HOOKS_API double hk_grad_norm_metric(const hk_ctx *ctx, void *user);
static inline void hk_grads_changed(hk_ctx *ctx) { ctx->hk__grad_norm_ok = 0; ctx->hk__grads_version++; }
/* 1 when hk_grad_norm would answer from its cache (a loop with a faster way to compute the norm asks
   this first, then hands its value over with hk_grad_norm_set). */
static inline int hk_grad_norm_known(const hk_ctx *ctx) { return ctx->hk__grad_norm_ok; }

/* ---- trace -------------------------------------------------------------------------------------- */
typedef enum hk_trace_mode { HK_TRACE_OFF, HK_TRACE_TREE, HK_TRACE_LINES } hk_trace_mode;
HOOKS_API void hk_trace(hk_registry *reg, hk_trace_mode mode, FILE *out); /* out NULL = keep current */

/* ---- profile -------------------------------------------------------------------------------------
   hk_profile(reg, 1) times every dispatch and every hook call from then on, with hk_clock, as the trace
   does it: the registry's events leave the fast loop for the general one (an event with nothing
   registered stays unarmed: its site still costs its guard only), so a registry that never turns it
   on pays nothing, not one instruction. With it on, each hook call costs two clock reads more and each
   dispatch two (make bench-hooks' "profiling" rows: about 120 ns per hook and 225 ns for a dispatch with
   one hook on a VM whose clock_gettime takes 50 ns; a fast vDSO clock takes about 20). Counts are kept per event
   (a dispatch: every hook of it, nested dispatches included) and per hook (registration and event;
   a hook's time includes the dispatches it fires); they survive hk_profile(reg, 0) and go with the
   hook when it is removed. train.h's profiler callback builds its table and metrics on these. */
typedef struct hk_prof {
  int64_t calls;         /* timed calls */
  double total, max;     /* seconds: their sum and the longest */
  hk_handle handle;      /* hk_profile_hook: the hook's handle and name (valid while it is registered) */
  const char *name;
} hk_prof;
HOOKS_API void hk_profile(hk_registry *reg, int on);
HOOKS_API int hk_profiling(const hk_registry *reg);  /* 1 while on */
HOOKS_API void hk_profile_reset(hk_registry *reg);  /* zero every count (events and hooks) */
/* The dispatches of event so far; 0, or -1 for an event that does not exist. */
HOOKS_API int hk_profile_event(const hk_registry *reg, int event, hk_prof *out);
/* The i-th hook of event in run order (0..hk_count(reg, event)-1); 0, or -1 past the end. */
HOOKS_API int hk_profile_hook(const hk_registry *reg, int event, int i, hk_prof *out);
/* Inside a hook of a top-level dispatch while profiling: the seconds the loop spent between the end of
   the previous top-level dispatch and the start of this one (the loop's own work: a forward pass, a
   batch fetched), and that dispatch's event in *prev_event (-1 when there was none). -1 when not
   profiling or not in a dispatch. */
HOOKS_API double hk_profile_gap(const hk_registry *reg, int *prev_event);
/* Seconds from a monotonic clock with nanosecond resolution where the system has one: clock_gettime
   (CLOCK_MONOTONIC) on POSIX systems, also under strict -std=c99 on Linux; elsewhere clock() (processor
   time). Define HK_CLOCK_NS() (an expression of type uint64_t, nanoseconds) to use your own. */
HOOKS_API double hk_clock(void);

/* ---- callback state (for checkpoints) ----------------------------------------------------------- */
HOOKS_API int hk_bytes_put(hk_bytes *b, const void *data, size_t n);  /* 0 ok, -1 on OOM */
HOOKS_API void hk_bytes_free(hk_bytes *b);
HOOKS_API int hk_read(hk_reader *r, void *dst, size_t n);             /* 0 ok, -1 if fewer than n left */
/* In load_state: refuse the state and say why (which field, its value, the valid range); returns -1:
   return hk_reject(in, "wait_count %lld is above 2^53", (long long)w); */
HOOKS_API int hk_reject(hk_reader *r, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
  __attribute__((format(printf, 2, 3)))
#endif
  ;
/* Calls sink(key, data, len, user) for every callback with save_state, in registration order. */
typedef hk_err (*hk_state_sink)(const char *key, const void *data, size_t len, void *user);
HOOKS_API hk_err hk_state_save(hk_registry *reg, hk_state_sink sink, void *user);
/* Hands a saved blob to the callback whose name is key. HK_ERR_NOT_FOUND if no such callback. */
HOOKS_API hk_err hk_state_load(hk_registry *reg, const char *key, const void *data, size_t len);
typedef struct hk_state_blob { const char *key; const void *data; size_t len; hk_err result; } hk_state_blob;
/* Checks many blobs against the registry without loading anything, in time linear in blobs plus
   registrations: each blob's result is HK_OK, HK_ERR_NOT_FOUND (no callback loads that key) or
   HK_ERR_DUPLICATE (the key came before); *missing (may be NULL) counts the stateful callbacks that
   get no blob, and hk_last_error names them (the first few). Returns HK_ERR_DUPLICATE if a key is
   given twice, else HK_OK. */
HOOKS_API hk_err hk_state_check(hk_registry *reg, hk_state_blob *blobs, int n, int *missing);
/* Loads many blobs, all or nothing: if one callback rejects its blob (HK_ERR_STATE), every callback
   loaded before it gets its previous state back. The model tier's callbacks load first, then the
   callback tier's, then the strategy's (Lightning restores the model before the callbacks). A key no
   callback loads is skipped and marked HK_ERR_NOT_FOUND in its blob's result, for the caller to warn
   about; a key given twice is an error (HK_ERR_DUPLICATE) and loads nothing. */
HOOKS_API hk_err hk_state_load_all(hk_registry *reg, hk_state_blob *blobs, int n);

/* ---- factories and spec strings --------------------------------------------------------------
   A factory turns a spec such as  early_stopping(monitor=val/loss, patience=3)  into registrations.
   Parameters are declared so the parser can check names, types and required keys before anything
   is created. A spec is a ';'-separated list of  name  or  name(key=value, ...); values are bare
   words or "double-quoted strings" (\" and \\ escapes). */
typedef enum hk_param_type { HK_PARAM_INT = 1, HK_PARAM_DOUBLE, HK_PARAM_BOOL, HK_PARAM_STRING, HK_PARAM_CHOICE } hk_param_type;

typedef struct hk_param {
  const char *key;
  hk_param_type type;
  const char *def;       /* default as text; NULL makes the key required */
  const char *choices;   /* HK_PARAM_CHOICE: "min|max" */
  const char *doc;
} hk_param;

#define HK_SPEC_MAX_ARGS 32
typedef struct hk_args {
  const char *factory;
  int n;
  struct { const char *key; hk_param_type type; int given; int64_t i; double d; const char *s; } v[HK_SPEC_MAX_ARGS];
} hk_args;

typedef hk_err (*hk_factory_fn)(hk_registry *reg, const hk_args *args, void *user);

/* The params array is copied; the strings it points to (keys, defaults, choices, docs) must outlive
   the registry, as string literals do. Argument strings handed to make() are valid only during it.
   make NULL registers a name that is known but not available in this program (a battery left out of
   the build): a spec naming it fails with doc, which must say why and what would make it available. */
HOOKS_API hk_err hk_factory_add(hk_registry *reg, const char *name, const hk_param *params, int n_params,
                                hk_factory_fn make, void *user, const char *doc);
/* Parse, check everything, then call the factories in order. All or nothing: if one fails, the
   registrations made by the earlier ones are removed again. An empty spec (or only whitespace) means
   no callbacks: HK_OK, nothing registered, nothing recorded for hk_spec_applied. */
HOOKS_API hk_err hk_spec_apply(hk_registry *reg, const char *spec);
/* The i-th spec string hk_spec_apply applied successfully on reg (a copy), in order; NULL past the
   end. Loggers record them with a run's hyperparameters. */
HOOKS_API const char *hk_spec_applied(const hk_registry *reg, int i);
/* The handle of the n-th live registration (from 0, in registration order) that specs made with the
   factory named factory (NULL: any factory); 0 when there is none. So a spec-made callback is
   reachable without knowing the name it chose:
     tr_model_checkpoint_get(reg, hk_spec_find(reg, "model_checkpoint", 0))->best_model_path */
HOOKS_API hk_handle hk_spec_find(const hk_registry *reg, const char *factory, int n);
/* Parse and check only (no factory is called). */
HOOKS_API hk_err hk_spec_check(hk_registry *reg, const char *spec);
HOOKS_API int64_t hk_arg_int(const hk_args *a, const char *key);
HOOKS_API double hk_arg_double(const hk_args *a, const char *key);
HOOKS_API int hk_arg_bool(const hk_args *a, const char *key);
HOOKS_API const char *hk_arg_str(const hk_args *a, const char *key);   /* strings and choices */
HOOKS_API int hk_arg_given(const hk_args *a, const char *key);

/* =============================================================================================
   THE HOT PATH: the call site, inline (HK_FIRE, HK_FIRE_FLOW, HK_ACTIVE; the guard; hk__fire)
   Its out-of-line half, the general loop (hk__dispatch) and the slow exits, is the implementation's
   "THE HOT PATH, out of line".
   ============================================================================================= */
/* HK_FIRE(reg, event, ctx) is an expression of type hk_signal. Prepare costly arguments under
   HK_ACTIVE(reg, event). With nothing registered a site is its guard: a load, a compare and a branch
   (3 instructions). Past the guard, in the branch's cold block, hk__fire runs a plain dispatch (the
   event's hooks have no signal to report, no trace, no profile, not inside another dispatch) as a
   loop over the event's run array at the site itself: one hook costs 27 instructions, a hand-written
   loop over one function pointer 14 (gcc -O2, make test-zero-cost), and each more hook 4 more than
   one more pointer. Everything else leaves that path through a call: the general loop (hk__dispatch)
   for NULL ctx, nesting, trace and profile; hk__fire_end for a signal or a change made by a hook.
   ctx may be NULL (the hooks then see a zeroed scratch context); the check costs nothing when the
   compiler sees ctx is not NULL (&ctx, or a ctx the loop writes through). */
#if defined(__GNUC__) || defined(__clang__)
#  define HK__UNLIKELY(x) __builtin_expect(!!(x), 0)
#  define HK__FORCEINLINE __attribute__((always_inline)) /* clang inlines no call in a cold branch otherwise */
#else
#  define HK__UNLIKELY(x) (x)
#  define HK__FORCEINLINE
#endif

#ifdef HK_DISABLE
/* hk__off() keeps a bare `HK_FIRE(...);` statement free of "statement with no effect" warnings. */
#  define HK_ACTIVE(reg, event) (0 && (reg)->armed[(event)])
#  define HK_FIRE(reg, event, ctx) hk__off(0 ? hk__dispatch((reg), (event), (ctx)) : HK_CONTINUE)
#  define HK_FIRE_FLOW(reg, event, ctx, flow) hk__off(0 ? hk__dispatch_flow((reg), (event), (ctx), (flow)) : HK_CONTINUE)
#else
#  define HK_ACTIVE(reg, event) HK__UNLIKELY((reg)->armed[(event)])
#  define HK_FIRE(reg, event, ctx) \
     (HK__UNLIKELY((reg)->armed[(event)]) ? hk__fire((reg), (event), (ctx)) : HK_CONTINUE)
#  define HK_FIRE_FLOW(reg, event, ctx, flow) \
     (HK__UNLIKELY((reg)->armed[(event)]) ? hk__fire_flow((reg), (event), (ctx), (flow)) : HK_CONTINUE)
#endif

/* private: one hook as the site's loop calls it. An event's run array lists its hooks in run order
   (a filtered hook's entry is hk__filtered, which checks the filter; a hook removed or disabled
   during a dispatch is entered as hk__skip) and ends with an entry whose fn is NULL. event and id
   sit as hk_ctx's event and self do, so that one 8-byte copy sets both. */
struct hk__entry {
  hk_fn fn;
  void *user;
  int event;
  hk_handle id;
};
typedef char hk__evself_check[(offsetof(hk_ctx, self) == offsetof(hk_ctx, event) + sizeof(int) &&
                               offsetof(struct hk__entry, id) == offsetof(struct hk__entry, event) + sizeof(int)) ? 1 : -1];

/* The guard reads armed[] directly; the rest of the registry is private. */
struct hk_registry {
  unsigned char armed[HK_MAX_EVENTS]; /* nonzero: the event has a hook to run (or trace is on) */
  struct hk__state *hk__s;
  /* private, here rather than in hk__s so that the site's loop (hk__fire) reads one struct: per
     event, the run array it walks (NULL while the trace or the profile is on, or nothing is listed:
     the general loop runs those); the dispatches in progress, plus a flag while a change waits until
     the outermost one returns */
  struct hk__entry *hk__fast[HK_MAX_EVENTS];
  unsigned hk__busy;
};

/* private: what HK_FIRE and HK_FIRE_FLOW run past their guard (above) */
HOOKS_API hk_signal hk__dispatch(hk_registry *reg, size_t event, hk_ctx *ctx);
HOOKS_API hk_signal hk__dispatch_flow(hk_registry *reg, int event, hk_ctx *ctx, hk_flow *flow);
HOOKS_API hk_signal hk__fire_end(hk_registry *reg, hk_ctx *ctx, const struct hk__entry *p, hk_signal r);
HOOKS_API hk_signal hk__flow_signal(hk_registry *reg, int event, hk_flow *flow, hk_signal r);
static inline hk_signal hk__off(hk_signal s) { return s; }
/* A top-level dispatch, inline: what it records in ctx (reg, a new hk__seq for lazy metrics, event
   and self per hook), the dispatch held (reg->hk__busy: an hk_off from a hook waits), the calls.
   The first signal other than HK_CONTINUE, or a change waiting when the dispatch is released, goes
   to hk__fire_end. The loop is written for gcc's layout: its exit after the last hook falls through. */
static HK__FORCEINLINE inline hk_signal hk__fire(hk_registry *reg, size_t event, hk_ctx *ctx) {
  const struct hk__entry *p = reg->hk__fast[event];
  if (HK__UNLIKELY(!p || !ctx || reg->hk__busy)) return hk__dispatch(reg, event, ctx);
  ctx->reg = reg;
  ctx->hk__seq++;
  reg->hk__busy = 1;
  do {
    hk_signal r;
    memcpy((char *)ctx + offsetof(hk_ctx, event), &p->event, sizeof(int) + sizeof(hk_handle)); /* event, self */
    r = p->fn(ctx, p->user);
    if (HK__UNLIKELY(r != HK_CONTINUE)) return hk__fire_end(reg, ctx, p, r);
  } while (HK__UNLIKELY((++p)->fn != NULL));
  if (HK__UNLIKELY(--reg->hk__busy)) return hk__fire_end(reg, ctx, p, HK_CONTINUE); /* a change waits */
  return HK_CONTINUE;
}
/* HK_FIRE_FLOW: the same, and a signal goes through hk_honoured into the flow (out of line). */
static HK__FORCEINLINE inline hk_signal hk__fire_flow(hk_registry *reg, int event, hk_ctx *ctx, hk_flow *flow) {
  hk_signal r = hk__fire(reg, (size_t)event, ctx);
  return HK__UNLIKELY(r != HK_CONTINUE) ? hk__flow_signal(reg, event, flow, r) : HK_CONTINUE;
}

#ifdef __cplusplus
}
#endif
#endif /* HOOKS_H */

/* =============================================================================================
   IMPLEMENTATION
   ============================================================================================= */
#ifdef HOOKS_IMPLEMENTATION
#ifndef HOOKS__IMPLEMENTED
#define HOOKS__IMPLEMENTED

/* The implementation defined in two files of one program: the linker's first line then names this
   function ("multiple definition of `hk__HOOKS_IMPLEMENTATION_defined_in_more_than_one_file'", with
   gcc or clang, GNU ld or lld), ahead of the hundreds of stb_ds and hk_ names that follow it. Defined
   before anything else, so that it comes first; empty, and never called. */
#ifndef HOOKS_STATIC
#ifdef __cplusplus
extern "C" {
#endif
void hk__HOOKS_IMPLEMENTATION_defined_in_more_than_one_file(void);
void hk__HOOKS_IMPLEMENTATION_defined_in_more_than_one_file(void) {}
#ifdef __cplusplus
}
#endif
#endif

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h> /* hk_clock */

#ifndef HOOKS_ASSERT
#  include <assert.h>
#  define HOOKS_ASSERT(c) assert(c)
#endif
#if defined(HOOKS_REALLOC) != defined(HOOKS_FREE)
#  error "hooks.h: define both HOOKS_REALLOC and HOOKS_FREE, or neither"
#endif
#ifndef HOOKS_REALLOC
#  define HOOKS_REALLOC(p, n) realloc((p), (n))
#  define HOOKS_FREE(p) free(p)
#endif
#ifndef HOOKS_STB_DS_INCLUDE
#  define HOOKS_STB_DS_INCLUDE <stb/stb_ds.h>
#endif
#if defined(__GNUC__) || defined(__clang__)
#  define HK__COLD __attribute__((noinline, cold))
#  define HK__NOINLINE __attribute__((noinline))
#else
#  define HK__COLD
#  define HK__NOINLINE
#endif
#if defined(__GNUC__) || defined(__clang__)
#  define HK__UNUSED __attribute__((unused))
#else
#  define HK__UNUSED
#endif
#ifdef HOOKS_STATIC
#  define HK__DEF static HK__UNUSED  /* a private copy: functions the program never calls are fine */
#else
#  define HK__DEF
#endif

/* stb_ds grows its maps without checking realloc for NULL, so hooks.h routes its allocations here.
   Everything hooks.h allocates itself is checked and reported as HK_ERR_NOMEM; a failure inside
   stb_ds (a name or metric map growing) cannot be unwound, so it is reported and aborts. */
static HK__UNUSED void *hk__stb_realloc(void *p, size_t n) {
  void *q = HOOKS_REALLOC(p, n);
  if (!q && n) {
    fprintf(stderr, "hooks.h: out of memory growing an stb_ds map (%lu bytes)\n", (unsigned long)n);
    abort();
  }
  return q;
}
#ifndef STBDS_REALLOC
#  define STBDS_REALLOC(c, p, n) hk__stb_realloc((p), (n))
#  define STBDS_FREE(c, p) HOOKS_FREE(p)
#endif
#ifndef HOOKS_NO_STB_DS_IMPL
#  define STB_DS_IMPLEMENTATION
#endif
#if defined(__GNUC__) || defined(__clang__)
#  pragma GCC diagnostic push
#  pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#  pragma GCC diagnostic ignored "-Wsign-compare"
#endif
#include HOOKS_STB_DS_INCLUDE
#if defined(__GNUC__) || defined(__clang__)
#  pragma GCC diagnostic pop
#endif
/* In C, stb_ds's map macros assign the void * its functions return to the table (C++ gets typed
   templates instead), which gcc -Wc++-compat reports at every use. With gcc or clang these give the
   result the table's own type, as the templates do; nothing else changes. */
#if !defined(__cplusplus) && (defined(__GNUC__) || defined(__clang__)) && defined(stbds_hmput_key_wrapper)
#  undef stbds_arrgrowf_wrapper
#  undef stbds_hmget_key_wrapper
#  undef stbds_hmget_key_ts_wrapper
#  undef stbds_hmput_default_wrapper
#  undef stbds_hmput_key_wrapper
#  undef stbds_hmdel_key_wrapper
#  undef stbds_shmode_func_wrapper
#  define stbds_arrgrowf_wrapper(a, ...)     ((__typeof__(a))stbds_arrgrowf((a), __VA_ARGS__))
#  define stbds_hmget_key_wrapper(a, ...)    ((__typeof__(a))stbds_hmget_key((a), __VA_ARGS__))
#  define stbds_hmget_key_ts_wrapper(a, ...) ((__typeof__(a))stbds_hmget_key_ts((a), __VA_ARGS__))
#  define stbds_hmput_default_wrapper(a, ...) ((__typeof__(a))stbds_hmput_default((a), __VA_ARGS__))
#  define stbds_hmput_key_wrapper(a, ...)    ((__typeof__(a))stbds_hmput_key((a), __VA_ARGS__))
#  define stbds_hmdel_key_wrapper(a, ...)    ((__typeof__(a))stbds_hmdel_key((a), __VA_ARGS__))
#  define stbds_shmode_func_wrapper(t, e, m) ((__typeof__(t))stbds_shmode_func((e), (m)))
#endif

/* ---- private types ------------------------------------------------------------------------- */
enum { HK__F_OFF = 1, HK__F_FILTER = 2, HK__F_TRACE = 4, HK__F_PROF = 8 }; /* hook flags: any set -> slow path */

/* An event's run array (hk__state.runs, struct hk__entry above) mirrors its list. */
typedef struct hk__entry hk__entry;

/* reg->hk__busy: the number of dispatches in progress, plus HK__DIRTY while a change made during one
   waits for the rebuild. One word, so that the fast loop tests both with one decrement at its end. */
#define HK__DIRTY 0x40000000u
static int hk__depth(const hk_registry *reg) { return (int)(reg->hk__busy & (HK__DIRTY - 1)); }

typedef struct hk__reg hk__reg;

/* One (registration, event) pair. Lives as long as its registration; dispatch lists point here. */
typedef struct hk__hook {
  hk_fn fn;
  void *user;
  hk_handle id;
  unsigned char flags;
  int event;
  int64_t calls;         /* times the event reached this hook (HK_COUNT_CALLS) */
  int fired;             /* once_at already happened */
  int rank;              /* sort key, fixed at registration: see hk__cmp */
  unsigned char reverse; /* this event runs its list backwards (reverse_end_events, HK_REVERSED) */
  hk__reg *owner;
  uint64_t prof_calls, prof_ns, prof_max; /* hk_profile: timed calls, their nanoseconds, the longest */
} hk__hook;

/* One registration: a single function or a whole callback. */
struct hk__reg {
  hk_handle id;
  int seq;               /* registration order, the last sort key */
  char *name;
  hk_opts opts;
  int has_filter;
  int enabled, failures;
  int dead;              /* removed: 1 (may still be listed, flagged off), 2 (unlisted, hk__reap frees it) */
  int is_callback;
  hk_callback cb;
  char factory[64];      /* the factory of the spec that made it ("" when not made by a spec) */
  hk__hook *hooks;       /* one per event this registration listens to */
  int n_hooks;
};

typedef struct hk__factory {
  hk_param params[HK_SPEC_MAX_ARGS];
  int n_params;
  hk_factory_fn make;
  void *user;
  const char *doc;
} hk__factory;

typedef struct hk__metric {
  double value;
  int has_value;
  double (*fn)(const hk_ctx *ctx, void *user); /* lazy source, or NULL */
  void *user;
  uint64_t seq;          /* dispatch in which value was computed */
  uint64_t stamp;        /* hk_metric_stamp: ctx's count of hk_metric_set calls when it was last set */
} hk__metric;

typedef struct { char *key; hk__metric value; } hk__metric_entry;
typedef struct { char *key; hk__reg *value; } hk__name_entry; /* live registrations by name */
typedef struct { char *key; hk__factory value; } hk__factory_entry;

typedef struct hk__state {
  hk_desc desc;
  hk__reg **regs;        /* in registration order */
  int n_regs, cap_regs;
  hk__hook **lists[HK_MAX_EVENTS]; /* per event: enabled hooks in run order (capacity desc.max_hooks) */
  hk__entry *runs[HK_MAX_EVENTS];  /* per event: the same hooks as run entries (capacity max_hooks + 1) */
  int n_list[HK_MAX_EVENTS];
  int n_events;          /* built-in + user-defined */
  char *user_names[HK_MAX_EVENTS];
  int user_flags[HK_MAX_EVENTS];
  hk__name_entry *names;
  hk__factory_entry *factories;
  char **specs;          /* copies of the specs hk_spec_apply applied (hk_spec_applied) */
  int n_specs;
  hk_handle next_id;
  int next_seq;
  int closing;           /* hk_destroy is running: no new registrations */
  hk_trace_mode trace;
  FILE *trace_out;
  int trace_depth;
  int profile;           /* hk_profile: time dispatches and hooks (general loop only) */
  uint64_t prof_calls[HK_MAX_EVENTS], prof_ns[HK_MAX_EVENTS], prof_max[HK_MAX_EVENTS]; /* per event */
  uint64_t prof_end;     /* when the last top-level dispatch ended (0: none yet) */
  int prof_prev;         /* its event (-1: none) */
  double prof_gap;       /* the running top-level dispatch's gap (-1 outside one) */
  int prof_gap_prev;
  char err[512];
  char fatal[512];       /* ctx->hook_failure after a fatal hook failure */
  /* the last nested dispatch that returned HK_FAIL: which context, its dispatch counter then, and the
     hook (depth, handle) that fired it; hk__settle passes its failure on only to that hook's call.
     The context is kept as a number: it is only compared, and may be gone by then. */
  uintptr_t inner_ctx;
  uint64_t inner_seq;
  int inner_depth;
  hk_handle inner_self;
  const char *making;    /* hk_spec_apply: the factory running now (its registrations remember it) */
  void *attached;        /* hk_attach: the layer above's object, freed after every callback */
  void (*attached_free)(void *p);
} hk__state;

/* ---- tables generated from the X-macros ----------------------------------------------------- */
static const char *const hk__event_names[] = {
#define HK__X(NAME, name, pairing, signals, doc) #name,
  HK_EVENTS(HK__X)
#undef HK__X
};
static const char *const hk__event_docs[] = {
#define HK__X(NAME, name, pairing, signals, doc) doc,
  HK_EVENTS(HK__X)
#undef HK__X
};
static const int hk__event_pairing[] = {
#define HK__X(NAME, name, pairing, signals, doc) pairing,
  HK_EVENTS(HK__X)
#undef HK__X
};
static const unsigned hk__event_signals[] = {
#define HK__X(NAME, name, pairing, signals, doc) signals,
  HK_EVENTS(HK__X)
#undef HK__X
};
static const char *const hk__signal_names[] = {
#define HK__X(sym, name, doc) #name,
  HK_SIGNALS(HK__X)
#undef HK__X
};
static const char *const hk__signal_docs[] = {
#define HK__X(sym, name, doc) doc,
  HK_SIGNALS(HK__X)
#undef HK__X
};

/* ---- small helpers -------------------------------------------------------------------------- */
static void *hk__alloc(size_t n) { return HOOKS_REALLOC(NULL, n ? n : 1); }

static char *hk__strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = (char *)hk__alloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

/* A text cut to fit buf's cap bytes ends in "..." (at a UTF-8 character's start), so the cut shows. */
static void hk__mark_cut(char *buf, size_t cap) {
  size_t k;
  if (cap < 4) return;
  for (k = cap - 4; k > 0 && ((unsigned char)buf[k] & 0xC0) == 0x80; k--) {}
  memcpy(buf + k, "...", 4);
}
/* s appended to buf at offset at, cut to fit (marked). Returns the length the whole would have (as
   snprintf): >= cap once cut. */
static size_t hk__cat(char *buf, size_t cap, size_t at, const char *s) {
  size_t n = strlen(s);
  if (at >= cap) return at;
  if (at + n < cap) { memcpy(buf + at, s, n + 1); return at + n; }
  memcpy(buf + at, s, cap - 1 - at);
  buf[cap - 1] = 0;
  hk__mark_cut(buf, cap);
  return at + n;
}
/* A message into buf, cut to fit (marked): an error too long for its buffer says so. */
static void hk__vfmt(char *buf, size_t cap, const char *fmt, va_list ap) {
  int w = vsnprintf(buf, cap, fmt, ap);
  if (w >= 0 && (size_t)w >= cap) hk__mark_cut(buf, cap);
}

static hk_err hk__fail_with(hk__state *s, hk_err code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  hk__vfmt(s->err, sizeof s->err, fmt, ap);
  va_end(ap);
  return code;
}

static void hk__log(hk__state *s, const char *fmt, ...) {
  char msg[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (s->desc.log) s->desc.log(msg, s->desc.log_user);
  else fprintf(stderr, "hooks: %s\n", msg);
}

static int hk__is_ident(const char *s) {
  if (!s || !(isalpha((unsigned char)*s) || *s == '_')) return 0;
  for (; *s; s++) if (!(isalnum((unsigned char)*s) || *s == '_' || *s == '.')) return 0;
  return 1;
}

static hk__reg *hk__find_reg(const hk__state *s, hk_handle h) {
  int i;
  for (i = 0; i < s->n_regs; i++)
    if (s->regs[i] && s->regs[i]->id == h && !s->regs[i]->dead) return s->regs[i];
  return NULL;
}

/* ---- names, docs, flags ------------------------------------------------------------------------ */
HK__DEF const char *hk_event_name(const hk_registry *reg, int event) {
  if (event >= 0 && event < HK_EVENT_COUNT) return hk__event_names[event];
  if (reg && event >= HK_EVENT_COUNT && event < reg->hk__s->n_events) return reg->hk__s->user_names[event];
  return NULL;
}
HK__DEF const char *hk_event_doc(int event) {
  return (event >= 0 && event < HK_EVENT_COUNT) ? hk__event_docs[event] : NULL;
}
HK__DEF int hk_event_flags(const hk_registry *reg, int event) {
  if (event >= 0 && event < HK_EVENT_COUNT) return hk__event_pairing[event];
  if (reg && event >= HK_EVENT_COUNT && event < reg->hk__s->n_events) return reg->hk__s->user_flags[event];
  return 0;
}
HK__DEF unsigned hk_event_signals(const hk_registry *reg, int event) {
  if (event >= 0 && event < HK_EVENT_COUNT) return hk__event_signals[event];
  if (reg && event >= HK_EVENT_COUNT && event < reg->hk__s->n_events) return ~0u; /* user events: the caller decides */
  return HK_HONOURS_NONE;
}
HK__DEF hk_signal hk_honoured(const hk_registry *reg, int event, hk_signal s) {
  unsigned set = hk_event_signals(reg, event);
  int k;
  for (k = (int)s; k > HK_CONTINUE; k--)
    if ((unsigned)k < HK_SIGNAL_COUNT && (set & HK_SIGNAL_BIT(k))) return (hk_signal)k;
  return HK_CONTINUE;
}
HK__DEF const char *hk_signal_name(hk_signal s) {
  return ((unsigned)s < HK_SIGNAL_COUNT) ? hk__signal_names[s] : "invalid";
}
HK__DEF const char *hk_signal_doc(hk_signal s) {
  return ((unsigned)s < HK_SIGNAL_COUNT) ? hk__signal_docs[s] : "";
}
HK__DEF const char *hk_tier_name(hk_tier t) {
  static const char *const n[] = {
#define HK__X(sym, name) name,
    HK_TIERS(HK__X)
#undef HK__X
  };
  return ((unsigned)t < HK_TIER_COUNT) ? n[t] : "invalid";
}
HK__DEF const char *hk_stage_name(hk_stage st) {
  static const char *const n[] = {
#define HK__X(sym, name) name,
    HK_STAGES(HK__X)
#undef HK__X
  };
  return ((unsigned)st < HK_STAGE_COUNT) ? n[st] : "invalid";
}
HK__DEF const char *hk_err_name(hk_err e) {
  static const char *const n[] = {
#define HK__X(sym, name, doc) name,
    HK_ERRORS(HK__X)
#undef HK__X
  };
  return ((unsigned)e < HK_ERR_COUNT) ? n[e] : "invalid error code";
}
HK__DEF int hk_event_find(const hk_registry *reg, const char *name) {
  int i;
  if (!name) return -1;
  for (i = 0; i < HK_EVENT_COUNT; i++) if (!strcmp(hk__event_names[i], name)) return i;
  if (reg) for (i = HK_EVENT_COUNT; i < reg->hk__s->n_events; i++) if (!strcmp(reg->hk__s->user_names[i], name)) return i;
  return -1;
}

/* ---- the per-event run lists ----------------------------------------------------------------
   Lists hold pointers to the enabled hooks of an event in run order. A change made while no dispatch
   runs is applied to them at once (a binary search and a move per hook); a change made from inside a
   dispatch waits (the running dispatch iterates a list) and a full rebuild, one sort per event,
   applies everything when the outermost dispatch returns.

   Run order: tier, then opts.order, then registration order; closing events run it backwards when
   desc.reverse_end_events is set, HK_REVERSED events (Hydra's *_end) always. A monitoring callback on a HK_MONITOR_LAST event still runs right
   after the model tier in either direction (Lightning's on_train_epoch_end rule); on a HK_MODEL_FIRST
   event the model tier runs first. The tier part is the hook's rank, fixed at registration. */
static int hk__rank(const hk_registry *reg, const hk__hook *h, int reverse) {
  const hk_opts *o = &h->owner->opts;
  int flags = hk_event_flags(reg, h->event);
  int model_first = (flags & HK_MODEL_FIRST) != 0;
  int model = model_first ? 0 : 2 * HK_TIER_MODEL; /* the model tier's rank on this event */
  if (o->monitor && (flags & HK_MONITOR_LAST)) /* next to the model tier, on its far side in run order */
    return reverse ? model - 1 : model + 1;
  if (model_first && o->tier <= HK_TIER_MODEL) /* model, then callbacks, then strategy */
    return 2 * (HK_TIER_MODEL - (int)o->tier);
  return 2 * (int)o->tier;
}

/* < 0 when a runs before b. Keys are unique (one hook per registration and event), so this is a
   total order and reversing it is exact. */
static int hk__cmp(const hk__hook *a, const hk__hook *b) {
  int x = a->owner->opts.order, y = b->owner->opts.order, c;
  if (a->rank != b->rank) c = a->rank < b->rank ? -1 : 1;
  else if (x != y) c = x < y ? -1 : 1;
  else c = a->owner->seq < b->owner->seq ? -1 : a->owner->seq > b->owner->seq;
  return a->reverse ? -c : c;
}
static int hk__qcmp(const void *a, const void *b) { return hk__cmp(*(hk__hook *const *)a, *(hk__hook *const *)b); }

static unsigned char hk__hook_flags(const hk__state *s, const hk__hook *h) {
  return (unsigned char)((h->owner->has_filter ? HK__F_FILTER : 0) | (s->trace ? HK__F_TRACE : 0) | (s->profile ? HK__F_PROF : 0));
}

static hk_signal hk__filtered(hk_ctx *ctx, void *user);

/* Event e's list changed (no dispatch runs): copy it into the run array (a hook with a filter as
   hk__filtered, which checks the filter first), arm the site, and give the event the fast loop
   unless the trace or the profile is on. */
static void hk__sync(hk_registry *reg, int e) {
  hk__state *s = reg->hk__s;
  int i, n = s->n_list[e];
  hk__entry *run = s->runs[e];
  for (i = 0; i < n; i++) {
    hk__hook *h = s->lists[e][i];
    int filtered = (h->flags & HK__F_FILTER) != 0;
    run[i].fn = filtered ? hk__filtered : h->fn;
    run[i].user = filtered ? (void *)h : h->user;
    run[i].event = e;
    run[i].id = h->id;
  }
  if (run) { run[n].fn = NULL; run[n].event = e; } /* the end entry names the event too (hk__fire_end) */
  reg->hk__fast[e] = n > 0 && s->trace == HK_TRACE_OFF && !s->profile ? run : NULL; /* the general loop times */
  reg->armed[e] = (unsigned char)(n > 0 || s->trace != HK_TRACE_OFF);
}

/* A hook leaves its list while a dispatch may be walking the run array, which changes only when no
   dispatch runs: its entry calls this from now on (the general loop skips it by its flag). */
static hk_signal hk__skip(hk_ctx *ctx, void *user) {
  (void)ctx; (void)user;
  return HK_CONTINUE;
}
static void hk__unplug(hk__state *s, const hk__hook *h) {
  hk__entry *x = s->runs[h->event];
  for (; x && x->fn; x++) if (x->id == h->id) x->fn = hk__skip;
}

static void hk__list_insert(hk_registry *reg, hk__hook *h) {
  hk__state *s = reg->hk__s;
  hk__hook **list = s->lists[h->event];
  int lo = 0, hi = s->n_list[h->event];
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (hk__cmp(list[mid], h) < 0) lo = mid + 1;
    else hi = mid;
  }
  memmove(list + lo + 1, list + lo, sizeof *list * (size_t)(s->n_list[h->event] - lo));
  list[lo] = h;
  s->n_list[h->event]++;
  h->flags = hk__hook_flags(s, h);
  hk__sync(reg, h->event);
}

static void hk__list_remove(hk_registry *reg, hk__hook *h) {
  hk__state *s = reg->hk__s;
  hk__hook **list = s->lists[h->event];
  int i, n = s->n_list[h->event];
  for (i = 0; i < n && list[i] != h; i++) {}
  if (i == n) return; /* not listed (disabled) */
  memmove(list + i, list + i + 1, sizeof *list * (size_t)(n - i - 1));
  s->n_list[h->event]--;
  h->flags = HK__F_OFF;
  hk__sync(reg, h->event);
}

/* A removed registration's destroy runs with the registry marked busy, so that an hk_off it calls
   (on another registration) is deferred like one made inside a dispatch instead of reshaping the
   arrays under this loop. */
static void hk__free_reg(hk_registry *reg, hk__reg *r) {
  if (r->is_callback && r->cb.destroy) {
    reg->hk__busy++;
    r->cb.destroy(r->cb.user);
    reg->hk__busy--;
  }
  HOOKS_FREE(r->name);
  HOOKS_FREE(r->hooks);
  HOOKS_FREE(r);
}

/* Free the registrations that were dead when this pass began (no list holds their hooks any more)
   and close the gaps they leave in s->regs. One that a destroy removes meanwhile is still listed,
   flagged off, so it waits for the next pass (the change set HK__DIRTY): a destroy that fires an
   event never walks a freed hook. */
static void hk__reap(hk_registry *reg) {
  hk__state *s = reg->hk__s;
  int i, n = s->n_regs, kept = 0;
  for (i = 0; i < n; i++) if (s->regs[i]->dead) s->regs[i]->dead = 2; /* 2: unlisted, free it now */
  for (i = 0; i < n; i++) {  /* only these; n_regs may grow meanwhile: a destroy may register */
    hk__reg *r = s->regs[i];
    if (r->dead == 2) { s->regs[i] = NULL; hk__free_reg(reg, r); }
  }
  for (i = 0; i < s->n_regs; i++) if (s->regs[i]) s->regs[kept++] = s->regs[i];
  s->n_regs = kept;
}

/* The full rebuild: every list from scratch (one sort each), then the removed registrations are
   freed; a destroy that changes the registry again makes it go round once more. */
static void hk__rebuild(hk_registry *reg) {
  hk__state *s = reg->hk__s;
  int e, i, j;
  HOOKS_ASSERT(hk__depth(reg) == 0);
  do {
    reg->hk__busy &= ~HK__DIRTY;
    for (e = 0; e < s->n_events; e++) s->n_list[e] = 0;
    for (i = 0; i < s->n_regs; i++) {
      hk__reg *r = s->regs[i];
      for (j = 0; j < r->n_hooks; j++) {
        hk__hook *h = &r->hooks[j];
        h->flags = HK__F_OFF;
        if (r->dead || !r->enabled) continue;
        h->flags = hk__hook_flags(s, h);
        s->lists[h->event][s->n_list[h->event]++] = h;
      }
    }
    for (e = 0; e < s->n_events; e++) {
      if (s->n_list[e] > 1) qsort(s->lists[e], (size_t)s->n_list[e], sizeof(hk__hook *), hk__qcmp);
      hk__sync(reg, e);
    }
    hk__reap(reg);
  } while (reg->hk__busy & HK__DIRTY);
}

/* Registration r was added, enabled, disabled or removed: apply it now, or after the running
   dispatch returns (then it stops running at once: its hooks are flagged off, their run entries
   unplugged). */
static void hk__changed(hk_registry *reg, hk__reg *r) {
  hk__state *s = reg->hk__s;
  int j, listed = r && r->enabled && !r->dead;
  if (reg->hk__busy || !r) { /* inside a dispatch, or a change waits already */
    if (r && !listed)
      for (j = 0; j < r->n_hooks; j++) { r->hooks[j].flags |= HK__F_OFF; hk__unplug(s, &r->hooks[j]); }
    reg->hk__busy |= HK__DIRTY;
    if (hk__depth(reg) == 0) hk__rebuild(reg);
    return;
  }
  for (j = 0; j < r->n_hooks; j++) {
    hk__hook *h = &r->hooks[j];
    int in_list = !(h->flags & HK__F_OFF);
    if (listed && !in_list) hk__list_insert(reg, h);
    else if (!listed && in_list) hk__list_remove(reg, h);
  }
  if (r->dead) {
    hk__reap(reg);
    if (reg->hk__busy & HK__DIRTY) hk__rebuild(reg); /* the destroy changed the registry */
  }
}

/* ---- registry ------------------------------------------------------------------------------- */
static hk_trace_mode hk__trace_from_env(hk__state *s) {
  const char *v = getenv("HOOKS_TRACE");
  if (!v || !*v || !strcmp(v, "0") || !strcmp(v, "off")) return HK_TRACE_OFF;
  if (!strcmp(v, "tree") || !strcmp(v, "1")) return HK_TRACE_TREE;
  if (!strcmp(v, "lines")) return HK_TRACE_LINES;
  hk__log(s, "warning: HOOKS_TRACE='%s' is not valid; use tree (or 1), lines, or 0; tracing stays off", v);
  return HK_TRACE_OFF;
}

HK__DEF hk_registry *hk_create(const hk_desc *desc) {
  hk_registry *reg = (hk_registry *)hk__alloc(sizeof *reg);
  hk__state *s = (hk__state *)hk__alloc(sizeof *s);
  if (!reg || !s) { HOOKS_FREE(reg); HOOKS_FREE(s); return NULL; }
  memset(reg, 0, sizeof *reg);
  memset(s, 0, sizeof *s);
  reg->hk__s = s;
  if (desc) s->desc = *desc;
  if (s->desc.max_hooks <= 0) s->desc.max_hooks = 256;
  s->trace_out = s->desc.trace_out ? s->desc.trace_out : stderr;
  s->n_events = HK_EVENT_COUNT;
  s->next_id = 1;
  stbds_sh_new_strdup(s->names);
  stbds_sh_new_strdup(s->factories);
  s->trace = hk__trace_from_env(s);
  s->prof_prev = s->prof_gap_prev = -1;
  s->prof_gap = -1;
  hk__rebuild(reg);
  return reg;
}

HK__DEF void hk_destroy(hk_registry *reg) {
  hk__state *s;
  int i;
  if (!reg) return;
  s = reg->hk__s;
  s->closing = 1; /* a destroy may hk_off another registration (it is freed in its turn), not add one */
  reg->hk__busy++;
  for (i = 0; i < HK_MAX_EVENTS; i++) { s->n_list[i] = 0; reg->hk__fast[i] = NULL; } /* an event fired from a destroy runs no hook */
  for (i = 0; i < s->n_regs; i++) {
    hk__reg *r = s->regs[i];
    (void)stbds_shdel(s->names, r->name); /* the name map points at it: hk_find from a later destroy must not */
    r->dead = 1;
    s->regs[i] = NULL;
    hk__free_reg(reg, r);
  }
  HOOKS_FREE(s->regs);
  if (s->attached_free) s->attached_free(s->attached); /* after the callbacks: their destroy may still use it */
  for (i = 0; i < HK_MAX_EVENTS; i++) { HOOKS_FREE(s->lists[i]); HOOKS_FREE(s->runs[i]); HOOKS_FREE(s->user_names[i]); }
  stbds_shfree(s->names);
  stbds_shfree(s->factories);
  for (i = 0; i < s->n_specs; i++) HOOKS_FREE(s->specs[i]);
  HOOKS_FREE(s->specs);
  HOOKS_FREE(s);
  HOOKS_FREE(reg);
}

HK__DEF void hk_attach(hk_registry *reg, void *p, void (*destroy)(void *p)) {
  if (!reg) return;
  reg->hk__s->attached = p;
  reg->hk__s->attached_free = destroy;
}
HK__DEF void *hk_attached(const hk_registry *reg) { return reg ? reg->hk__s->attached : NULL; }

HK__DEF const char *hk_last_error(const hk_registry *reg) {
  return reg ? reg->hk__s->err : "the registry is NULL (hk_create returned NULL: out of memory?)";
}

/* who: how messages name the registration: "'name'", or "an unnamed hook on on_x". */
static hk_err hk__check_opts(hk__state *s, const hk_opts *o, const char *who) {
  if ((unsigned)o->tier >= HK_TIER_COUNT)
    return hk__fail_with(s, HK_ERR_INVALID, "cannot register %s: tier %d is not valid (HK_TIER_CALLBACK, HK_TIER_MODEL or HK_TIER_STRATEGY)", who, (int)o->tier);
  if ((unsigned)o->on_error > HK_ON_ERROR_DISABLE)
    return hk__fail_with(s, HK_ERR_INVALID, "cannot register %s: on_error %d is not valid (HK_ON_ERROR_FATAL, _WARN or _DISABLE)", who, (int)o->on_error);
  if ((unsigned)o->filter.counter > HK_COUNT_BATCH)
    return hk__fail_with(s, HK_ERR_INVALID, "cannot register %s: filter counter %d is not valid (HK_COUNT_CALLS, _STEP, _EPOCH or _BATCH)", who, (int)o->filter.counter);
  if (o->filter.every < 0 || o->filter.once_at < 0 || o->filter.until < 0)
    return hk__fail_with(s, HK_ERR_INVALID, "cannot register %s: filter every/once_at/until must be >= 0 (0 means unused)", who);
  if (o->max_failures < 0)
    return hk__fail_with(s, HK_ERR_INVALID, "cannot register %s: max_failures must be >= 0 (0 means 1)", who);
  return HK_OK;
}

/* Common path of hk_on and hk_add_callback: validate, allocate everything, then commit. */
static hk_err hk__register(hk_registry *reg, const char *name, const hk_opts *opts, const int *events,
                           const hk_fn *fns, int n, void *user, const hk_callback *cb, hk_handle *out) {
  hk__state *s = reg->hk__s;
  hk_opts o;
  char autoname[32], who[128];
  hk__reg *r;
  hk_err err;
  int i;
  if (out) *out = 0;
  if (opts) o = *opts;
  else memset(&o, 0, sizeof o);
  /* errors name what the user registered, never an automatic name */
  if (name) snprintf(who, sizeof who, "'%s'", name);
  else snprintf(who, sizeof who, "an unnamed hook on %s", hk_event_name(reg, events[0]));
  if (!name) {  /* "hook#<handle>", with a suffix in the unlikely case a user took that name */
    int k = 0;
    snprintf(autoname, sizeof autoname, "hook#%d", s->next_id);
    while (stbds_shgeti(s->names, autoname) >= 0) snprintf(autoname, sizeof autoname, "hook#%d.%d", s->next_id, ++k);
    name = autoname;
  }
  if (s->closing) return hk__fail_with(s, HK_ERR_INVALID, "cannot register %s: the registry is being destroyed (from a destroy callback?)", who);
  if ((err = hk__check_opts(s, &o, who)) != HK_OK) return err;
  if (stbds_shgeti(s->names, name) >= 0)
    return hk__fail_with(s, HK_ERR_DUPLICATE, "a hook named '%s' is already registered (names must be unique; hk_off it first)", name);
  if (s->n_regs >= s->desc.max_hooks)
    return hk__fail_with(s, HK_ERR_FULL, "cannot register %s: the registry is full (%d registrations; raise hk_desc.max_hooks)", who, s->desc.max_hooks);
  /* allocate first, so a failure leaves the registry untouched */
  for (i = 0; i < n; i++) {
    if (!s->lists[events[i]]) {
      s->lists[events[i]] = (hk__hook **)hk__alloc(sizeof(hk__hook *) * (size_t)s->desc.max_hooks);
      if (!s->lists[events[i]]) return hk__fail_with(s, HK_ERR_NOMEM, "out of memory registering %s", who);
    }
    if (!s->runs[events[i]]) {
      s->runs[events[i]] = (hk__entry *)hk__alloc(sizeof(hk__entry) * ((size_t)s->desc.max_hooks + 1));
      if (!s->runs[events[i]]) return hk__fail_with(s, HK_ERR_NOMEM, "out of memory registering %s", who);
      s->runs[events[i]][0].fn = NULL;
      s->runs[events[i]][0].event = events[i];
    }
  }
  if (s->n_regs == s->cap_regs) {
    int cap = s->cap_regs ? 2 * s->cap_regs : 16;
    hk__reg **g = (hk__reg **)HOOKS_REALLOC(s->regs, sizeof *g * (size_t)cap);
    if (!g) return hk__fail_with(s, HK_ERR_NOMEM, "out of memory registering %s", who);
    s->regs = g;
    s->cap_regs = cap;
  }
  r = (hk__reg *)hk__alloc(sizeof *r);
  if (!r) return hk__fail_with(s, HK_ERR_NOMEM, "out of memory registering %s", who);
  memset(r, 0, sizeof *r);
  r->name = hk__strdup(name);
  r->hooks = (hk__hook *)hk__alloc(sizeof(hk__hook) * (size_t)(n ? n : 1));
  if (!r->name || !r->hooks) {
    HOOKS_FREE(r->name); HOOKS_FREE(r->hooks); HOOKS_FREE(r);
    return hk__fail_with(s, HK_ERR_NOMEM, "out of memory registering %s", who);
  }
  if (!o.max_failures) o.max_failures = 1;
  r->opts = o;
  r->opts.name = r->name;
  r->has_filter = o.filter.every || o.filter.once_at || o.filter.from || o.filter.until || o.filter.pred || o.rank_zero_only;
  r->id = s->next_id++;
  r->seq = s->next_seq++;
  if (s->making) snprintf(r->factory, sizeof r->factory, "%s", s->making);
  r->enabled = !o.disabled;
  if (cb) { r->is_callback = 1; r->cb = *cb; r->cb.name = r->name; } /* the caller's name may be gone */
  r->n_hooks = n;
  for (i = 0; i < n; i++) {
    hk__hook *h = &r->hooks[i];
    memset(h, 0, sizeof *h);
    h->fn = fns[i];
    h->user = user;
    h->id = r->id;
    h->event = events[i];
    h->owner = r;
    h->flags = HK__F_OFF; /* not yet in any list */
    h->reverse = (unsigned char)((s->desc.reverse_end_events && (hk_event_flags(reg, h->event) & HK_CLOSES)) ||
                                 (hk_event_flags(reg, h->event) & HK_REVERSED));
    h->rank = hk__rank(reg, h, h->reverse);
  }
  stbds_shput(s->names, r->name, r);
  s->regs[s->n_regs++] = r;
  if (out) *out = r->id;
  hk__changed(reg, r);
  return HK_OK;
}

HK__DEF hk_err hk_on(hk_registry *reg, int event, hk_fn fn, void *user, const hk_opts *opts, hk_handle *out) {
  hk__state *s;
  char who[128], users[64];
  if (out) *out = 0;
  if (!reg) return HK_ERR_INVALID;
  s = reg->hk__s;
  if (opts && opts->name) snprintf(who, sizeof who, "'%s'", opts->name);
  else snprintf(who, sizeof who, "an unnamed hook");
  if (event < 0 || event >= s->n_events) {
    if (s->n_events > HK_EVENT_COUNT) snprintf(users, sizeof users, "user events %d..%d", HK_EVENT_COUNT, s->n_events - 1);
    else snprintf(users, sizeof users, "no user events yet");
    return hk__fail_with(s, HK_ERR_UNKNOWN_EVENT, "cannot register %s: event id %d does not exist (built-in events are 0..%d, "
                         "%s; hk_event_define adds more)", who, event, HK_EVENT_COUNT - 1, users);
  }
  if (!fn)
    return hk__fail_with(s, HK_ERR_INVALID, "cannot register %s on %s: the hook function is NULL", who, hk_event_name(reg, event));
  if (opts && opts->name && !*opts->name)
    return hk__fail_with(s, HK_ERR_INVALID, "cannot register on %s: the name is empty (give a name or leave it NULL)", hk_event_name(reg, event));
  return hk__register(reg, opts ? opts->name : NULL, opts, &event, &fn, 1, user, NULL, out);
}

HK__DEF hk_err hk_add_callback(hk_registry *reg, const hk_callback *cb, const hk_opts *opts, hk_handle *out) {
  int events[HK_EVENT_COUNT];
  hk_fn fns[HK_EVENT_COUNT];
  int n = 0;
  if (out) *out = 0;
  if (!reg) return HK_ERR_INVALID;
  if (!cb) return hk__fail_with(reg->hk__s, HK_ERR_INVALID, "hk_add_callback: the callback is NULL");
  if (!cb->name || !*cb->name)
    return hk__fail_with(reg->hk__s, HK_ERR_INVALID, "hk_add_callback: the callback has no name (set .name; it is also its state key)");
#define HK__X(NAME, field, pairing, signals, doc) \
  if (cb->field) { events[n] = HK_##NAME; fns[n] = cb->field; n++; }
  HK_EVENTS(HK__X)
#undef HK__X
  if (n == 0 && !cb->save_state && !cb->load_state)
    return hk__fail_with(reg->hk__s, HK_ERR_INVALID, "callback '%s' has no event functions and no state functions: nothing to register", cb->name);
  if (!cb->save_state != !cb->load_state)
    return hk__fail_with(reg->hk__s, HK_ERR_INVALID, "callback '%s' has only one of save_state/load_state; give both or neither", cb->name);
  return hk__register(reg, cb->name, opts, events, fns, n, cb->user, cb, out);
}

static hk_err hk__lookup(hk_registry *reg, hk_handle h, hk__reg **out) {
  if (!reg) return HK_ERR_INVALID;
  *out = hk__find_reg(reg->hk__s, h);
  if (!*out) return hk__fail_with(reg->hk__s, HK_ERR_NOT_FOUND, "handle %d is not a live registration (already removed, or never returned by hk_on/hk_add_callback)", h);
  return HK_OK;
}

HK__DEF hk_err hk_off(hk_registry *reg, hk_handle h) {
  hk__reg *r;
  hk_err err = hk__lookup(reg, h, &r);
  if (err) return err;
  (void)stbds_shdel(reg->hk__s->names, r->name);
  r->dead = 1;
  hk__changed(reg, r);
  return HK_OK;
}

static hk_err hk__set_enabled(hk_registry *reg, hk_handle h, int on) {
  hk__reg *r;
  hk_err err = hk__lookup(reg, h, &r);
  if (err) return err;
  if (r->enabled == on) return HK_OK;
  r->enabled = on;
  hk__changed(reg, r);
  return HK_OK;
}
HK__DEF hk_err hk_enable(hk_registry *reg, hk_handle h) { return hk__set_enabled(reg, h, 1); }
HK__DEF hk_err hk_disable(hk_registry *reg, hk_handle h) { return hk__set_enabled(reg, h, 0); }

HK__DEF hk_handle hk_find(const hk_registry *reg, const char *name) {
  if (!reg || !name) return 0;
  return stbds_shgeti(reg->hk__s->names, name) >= 0 ? stbds_shget(reg->hk__s->names, name)->id : 0;
}
HK__DEF int hk_is_enabled(const hk_registry *reg, hk_handle h) {
  const hk__reg *r = reg ? hk__find_reg(reg->hk__s, h) : NULL;
  return r ? r->enabled : 0;
}
HK__DEF hk_err hk_set_error(hk_registry *reg, hk_err code, const char *fmt, ...) {
  va_list ap;
  if (!reg || !fmt) return code;
  va_start(ap, fmt);
  hk__vfmt(reg->hk__s->err, sizeof reg->hk__s->err, fmt, ap);
  va_end(ap);
  return code;
}
HK__DEF const hk_callback *hk_callback_get(const hk_registry *reg, hk_handle h) {
  const hk__reg *r = reg ? hk__find_reg(reg->hk__s, h) : NULL;
  return r && r->is_callback && !r->dead ? &r->cb : NULL;
}
HK__DEF const char *hk_name(const hk_registry *reg, hk_handle h) {
  const hk__reg *r = reg ? hk__find_reg(reg->hk__s, h) : NULL;
  return r ? r->name : NULL;
}
HK__DEF int hk_dispatching(const hk_registry *reg) { return reg ? hk__depth(reg) : 0; }
HK__DEF int hk_count(const hk_registry *reg, int event) {
  if (!reg || event < 0 || event >= reg->hk__s->n_events) return 0;
  return reg->hk__s->n_list[event];
}

HK__DEF hk_err hk_event_define(hk_registry *reg, const char *name, int pairing, int *out_id) {
  hk__state *s;
  int id;
  if (out_id) *out_id = -1;
  if (!reg) return HK_ERR_INVALID;
  s = reg->hk__s;
  if (!hk__is_ident(name) || strlen(name) > 63)
    return hk__fail_with(s, HK_ERR_INVALID, "event name '%s' is not valid (letters, digits, '_' and '.', starting with a letter or '_', at most 63 chars)", name ? name : "(null)");
  if (pairing & ~(HK_OPENS | HK_CLOSES | HK_MONITOR_LAST | HK_MODEL_FIRST | HK_REVERSED) || (pairing & HK_OPENS && pairing & HK_CLOSES))
    return hk__fail_with(s, HK_ERR_INVALID, "event '%s': pairing %d is not valid (0, HK_OPENS or HK_CLOSES, optionally "
                         "| HK_MONITOR_LAST, HK_MODEL_FIRST and/or HK_REVERSED)", name, pairing);
  if (hk_event_find(reg, name) >= 0)
    return hk__fail_with(s, HK_ERR_DUPLICATE, "event '%s' already exists", name);
  if (s->n_events >= HK_MAX_EVENTS)
    return hk__fail_with(s, HK_ERR_FULL, "cannot define event '%s': all %d event ids are used (raise HK_MAX_EVENTS)", name, HK_MAX_EVENTS);
  id = s->n_events;
  if (!(s->user_names[id] = hk__strdup(name))) return hk__fail_with(s, HK_ERR_NOMEM, "out of memory defining event '%s'", name);
  s->user_flags[id] = pairing;
  s->n_events++;
  reg->armed[id] = (unsigned char)(s->trace != HK_TRACE_OFF);
  if (out_id) *out_id = id;
  return HK_OK;
}

/* ---- trace -------------------------------------------------------------------------------------- */
HK__DEF void hk_trace(hk_registry *reg, hk_trace_mode mode, FILE *out) {
  if (!reg) return;
  if ((unsigned)mode > HK_TRACE_LINES) mode = HK_TRACE_OFF;
  reg->hk__s->trace = mode;
  reg->hk__s->trace_depth = 0;
  if (out) reg->hk__s->trace_out = out;
  hk__changed(reg, NULL);
}

static void hk__trace_indent(hk__state *s, int depth) {
  int i;
  for (i = 0; i < depth; i++) fputs("\xe2\x94\x82   ", s->trace_out);  /* "│   " */
  fputs("\xe2\x94\x9c\xe2\x94\x80\xe2\x94\x80 ", s->trace_out);       /* "├── " */
}

static HK__COLD void hk__trace_event(hk_registry *reg, int event, const hk_ctx *ctx) {
  hk__state *s = reg->hk__s;
  if (s->trace != HK_TRACE_TREE) return;
  if ((hk_event_flags(reg, event) & HK_CLOSES) && s->trace_depth > 0) s->trace_depth--;
  hk__trace_indent(s, s->trace_depth);
  if (event == HK_SETUP || event == HK_TEARDOWN) fprintf(s->trace_out, "%s(stage=%s)\n", hk_event_name(reg, event), hk_stage_name(ctx->stage));
  else fprintf(s->trace_out, "%s()\n", hk_event_name(reg, event));
}

static void hk__trace_hook(hk_registry *reg, const hk__hook *h) {
  hk__state *s = reg->hk__s;
  const char *tier = hk_tier_name(h->owner->opts.tier);
  if (s->trace == HK_TRACE_LINES) {
    fprintf(s->trace_out, "%s %s %s\n", hk_event_name(reg, h->event), tier, h->owner->name);
  } else {
    hk__trace_indent(s, s->trace_depth + 1);
    fprintf(s->trace_out, "[%s] %s\n", tier, h->owner->name);
  }
}

/* ---- profile ------------------------------------------------------------------------------------- */
HK__DEF void hk_profile(hk_registry *reg, int on) {
  if (!reg || reg->hk__s->profile == (on != 0)) return;
  reg->hk__s->profile = on != 0;
  reg->hk__s->prof_gap = -1;
  hk__changed(reg, NULL);
}
HK__DEF int hk_profiling(const hk_registry *reg) { return reg ? reg->hk__s->profile : 0; }
HK__DEF void hk_profile_reset(hk_registry *reg) {
  hk__state *s;
  int i, j;
  if (!reg) return;
  s = reg->hk__s;
  memset(s->prof_calls, 0, sizeof s->prof_calls);
  memset(s->prof_ns, 0, sizeof s->prof_ns);
  memset(s->prof_max, 0, sizeof s->prof_max);
  for (i = 0; i < s->n_regs; i++)
    for (j = 0; j < s->regs[i]->n_hooks; j++) {
      hk__hook *h = &s->regs[i]->hooks[j];
      h->prof_calls = h->prof_ns = h->prof_max = 0;
    }
}
static void hk__prof_out(hk_prof *out, uint64_t calls, uint64_t ns, uint64_t max) {
  out->calls = (int64_t)calls;
  out->total = 1e-9 * (double)ns;
  out->max = 1e-9 * (double)max;
}
HK__DEF int hk_profile_event(const hk_registry *reg, int event, hk_prof *out) {
  const hk__state *s;
  if (!reg || !out || event < 0 || event >= reg->hk__s->n_events) return -1;
  s = reg->hk__s;
  memset(out, 0, sizeof *out);
  hk__prof_out(out, s->prof_calls[event], s->prof_ns[event], s->prof_max[event]);
  out->name = hk_event_name(reg, event);
  return 0;
}
HK__DEF int hk_profile_hook(const hk_registry *reg, int event, int i, hk_prof *out) {
  const hk__state *s;
  const hk__hook *h;
  if (!reg || !out || event < 0 || event >= reg->hk__s->n_events) return -1;
  s = reg->hk__s;
  if (i < 0 || i >= s->n_list[event] || !s->lists[event]) return -1;
  h = s->lists[event][i];
  memset(out, 0, sizeof *out);
  hk__prof_out(out, h->prof_calls, h->prof_ns, h->prof_max);
  out->handle = h->id;
  out->name = h->owner->name;
  return 0;
}
HK__DEF double hk_profile_gap(const hk_registry *reg, int *prev_event) {
  const hk__state *s = reg ? reg->hk__s : NULL;
  if (prev_event) *prev_event = -1;
  if (!s || !s->profile || hk__depth(reg) == 0 || s->prof_gap < 0) return -1;
  if (prev_event) *prev_event = s->prof_gap_prev;
  return s->prof_gap;
}

/* The clock, and what the general loop does while profiling. */
#ifndef HK_CLOCK_NS
#  if defined(CLOCK_MONOTONIC)
static uint64_t hk__clock_ns(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) return 0;
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
#  elif defined(__linux__) && defined(__LP64__) && (defined(__GNUC__) || defined(__clang__))
/* strict -std=c99 hides clock_gettime and struct timespec: the same call under a private name (on
   64-bit Linux a timespec is two longs; CLOCK_MONOTONIC is 1) */
struct hk__timespec { long tv_sec, tv_nsec; };
extern int hk__clock_gettime(int clock_id, struct hk__timespec *ts) __asm__("clock_gettime");
static uint64_t hk__clock_ns(void) {
  struct hk__timespec ts;
  if (hk__clock_gettime(1, &ts) != 0) return 0;
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
#  else
static uint64_t hk__clock_ns(void) { return (uint64_t)((double)clock() * (1e9 / (double)CLOCKS_PER_SEC)); }
#  endif
#  define HK_CLOCK_NS() hk__clock_ns()
#endif

HK__DEF double hk_clock(void) { return 1e-9 * (double)(HK_CLOCK_NS()); }

static void hk__prof_add(uint64_t *calls, uint64_t *ns, uint64_t *max, uint64_t dt) {
  ++*calls;
  *ns += dt;
  if (dt > *max) *max = dt;
}
/* One hook call, timed (the general loop, while profiling). */
static HK__NOINLINE hk_signal hk__timed(hk__hook *h, hk_ctx *ctx) {
  uint64_t t0 = HK_CLOCK_NS();
  hk_signal r = h->fn(ctx, h->user);
  hk__prof_add(&h->prof_calls, &h->prof_ns, &h->prof_max, HK_CLOCK_NS() - t0);
  return r;
}

/* A dispatch starts while profiling: its clock, and for a top-level one the gap since the last. */
static uint64_t hk__prof_begin(hk_registry *reg) {
  hk__state *s = reg->hk__s;
  uint64_t t0 = HK_CLOCK_NS();
  if (hk__depth(reg) == 0) {
    s->prof_gap = s->prof_end ? 1e-9 * (double)(t0 - s->prof_end) : 0;
    s->prof_gap_prev = s->prof_end ? s->prof_prev : -1;
  }
  return t0 ? t0 : 1;
}
static void hk__prof_end(hk_registry *reg, int event, uint64_t t0) {
  hk__state *s = reg->hk__s;
  uint64_t t1 = HK_CLOCK_NS();
  hk__prof_add(&s->prof_calls[event], &s->prof_ns[event], &s->prof_max[event], t1 - t0);
  if (hk__depth(reg) == 0) {
    s->prof_end = t1 ? t1 : 1;
    s->prof_prev = event;
    s->prof_gap = -1;
  }
}

/* =============================================================================================
   THE HOT PATH, out of line: what HK_FIRE's inline loop (hk__fire, in "THE HOT PATH") leaves out.
   The general loop (hk__run, hk__dispatch: filters, trace, profile, nesting, a NULL ctx), how a
   hook's signal or failure is settled (hk__settle), the inline loop's slow exits (hk__fire_end,
   hk__flow_signal) and HK_FIRE_FLOW as a function (hk__dispatch_flow).
   ============================================================================================= */
/* The filter's ordinal n (see hk_counter): indexes from 0 become "the n-th", counts stay counts. */
static int64_t hk__counter(const hk__hook *h, const hk_ctx *ctx) {
  switch (h->owner->opts.filter.counter) {
  case HK_COUNT_STEP: return ctx->global_step;
  case HK_COUNT_EPOCH: return ctx->epoch + 1;
  case HK_COUNT_BATCH: return ctx->batch_idx + 1;
  default: return h->calls;
  }
}

/* Whether a hook with a filter (or rank_zero_only) runs this time; counts the call. */
static int hk__pass(hk__hook *h, hk_ctx *ctx) {
  const hk_filter *f = &h->owner->opts.filter;
  int64_t c;
  if (h->owner->opts.rank_zero_only && ctx->rank != 0) return 0; /* not counted: other ranks never see it */
  h->calls++;
  c = hk__counter(h, ctx);
  if (f->once_at && (h->fired || c != f->once_at)) return 0;
  if (f->every && (c <= 0 || c % f->every != 0)) return 0;
  if (c < f->from) return 0;
  if (f->until && c >= f->until) return 0;
  if (f->pred && !f->pred(ctx, f->pred_user)) return 0;
  if (f->once_at) h->fired = 1;
  return 1;
}

/* The general loop's slow path, for a hook whose flags are set: removed or disabled mid-dispatch,
   filtered, traced. */
static HK__NOINLINE int hk__admit(hk_registry *reg, hk__hook *h, hk_ctx *ctx) {
  if (h->flags & HK__F_OFF) return 0;
  if ((h->flags & HK__F_FILTER) && !hk__pass(h, ctx)) return 0;
  if (h->flags & HK__F_TRACE) hk__trace_hook(reg, h);
  return 1;
}

/* A hook with a filter, as the fast loop calls it: its run entry points here, with the hook as user. */
static hk_signal hk__filtered(hk_ctx *ctx, void *user) {
  hk__hook *h = (hk__hook *)user;
  return hk__pass(h, ctx) ? h->fn(ctx, h->user) : HK_CONTINUE;
}

/* "hook 'x'" for a function, "callback 'x'" for a callback; the tier only when it is not the default. */
static const char *hk__label(char *buf, size_t cap, const hk__reg *o) {
  snprintf(buf, cap, "%s '%s'%s%s%s", o->is_callback ? "callback" : "hook", o->name, o->opts.tier ? " (" : "",
           o->opts.tier ? hk_tier_name(o->opts.tier) : "", o->opts.tier ? " tier)" : "");
  return buf;
}

/* A hook returned something other than HK_CONTINUE: combine it, or apply the error policy. Each
   failure is reported once: the first fatal one of a dispatch through ctx->hook_failure (the loop
   reports it), every other one through the log. */
static HK__COLD hk_signal hk__settle(hk_registry *reg, hk__hook *h, hk_ctx *ctx, hk_signal r, hk_signal out) {
  hk__state *s = reg->hk__s;
  hk__reg *o = h->owner;
  char why[300], who[160];
  /* HK_FAIL without a message of its own, right after a nested dispatch fired by this very call failed
     (no dispatch since), passes that failure on as it is: the root cause, not one wrapper per level.
     An older ctx->hook_failure, from an earlier dispatch, is not this hook's failure. */
  int passed_on = r == HK_FAIL && !ctx->hk__fail_msg[0] && ctx->hook_failure && s->inner_ctx == (uintptr_t)ctx &&
                  s->inner_seq == ctx->hk__seq && s->inner_depth == hk__depth(reg) && s->inner_self == h->id;
  if ((unsigned)r < HK_FAIL) return r > out ? r : out;
  if (passed_on) snprintf(why, sizeof why, "%s", ctx->hook_failure);
  else if (r == HK_FAIL) snprintf(why, sizeof why, "%s", ctx->hk__fail_msg[0] ? ctx->hk__fail_msg : "(no message; use hk_fail)");
  else snprintf(why, sizeof why, "returned %d, which is not a hk_signal (valid: 0..%d)", (int)r, HK_FAIL);
  ctx->hk__fail_msg[0] = 0;
  o->failures++;
  hk__label(who, sizeof who, o);
  if (o->opts.on_error == HK_ON_ERROR_FATAL) {
    if (out != HK_FAIL) {
      if (passed_on) { if (ctx->hook_failure != s->fatal) snprintf(s->fatal, sizeof s->fatal, "%s", ctx->hook_failure); }
      else snprintf(s->fatal, sizeof s->fatal, "%s failed in %s: %s", who, hk_event_name(reg, h->event), why);
      ctx->hook_failure = s->fatal;
    } else hk__log(s, "error: %s failed in %s: %s (after another failure in this dispatch)", who, hk_event_name(reg, h->event), why);
    return HK_FAIL;
  }
  hk__log(s, "warning: %s failed in %s: %s (failure %d; continuing)", who, hk_event_name(reg, h->event), why, o->failures);
  if (o->opts.on_error == HK_ON_ERROR_DISABLE && o->failures >= o->opts.max_failures && o->enabled) {
    hk__log(s, "warning: %s disabled after %d failure(s)", who, o->failures);
    o->enabled = 0;
    hk__changed(reg, o);
  }
  return out;
}

/* The general loop: the hooks of `event` from index i on, with their flags (filters, trace, hooks
   flagged off mid-dispatch), out being the signal so far. The list and its length stay fixed while
   any dispatch runs: structural changes wait until the outermost dispatch returns. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((always_inline))
#endif
static inline hk_signal hk__run(hk_registry *reg, int event, hk_ctx *ctx, int i, hk_signal out) {
  hk__hook **p = reg->hk__s->lists[event], **end;
  if (!p) return out;  /* no list yet: only the trace armed this event */
  for (end = p + reg->hk__s->n_list[event], p += i; p < end; p++) {
    hk__hook *h = *p;
    hk_signal r;
    if (h->flags && !hk__admit(reg, h, ctx)) continue;
    ctx->self = h->id;
    r = HK__UNLIKELY(h->flags & HK__F_PROF) ? hk__timed(h, ctx) : h->fn(ctx, h->user);
    if (r != HK_CONTINUE) out = hk__settle(reg, *p, ctx, r, out);
  }
  return out;
}

/* A dispatch fired from inside the hook `self` (at the current depth) failed: remember it for hk__settle. */
static void hk__failed_inside(hk_registry *reg, const hk_ctx *ctx, hk_handle self) {
  hk__state *s = reg->hk__s;
  s->inner_ctx = (uintptr_t)ctx;
  s->inner_seq = ctx->hk__seq;
  s->inner_depth = hk__depth(reg);
  s->inner_self = self;
}

/* The general path: everything HK_FIRE's inline loop (hk__fire) leaves out. A NULL context, a bad
   event id, a dispatch fired from inside a hook (the caller's ctx->event and ctx->self are put back
   afterwards; HK_MAX_DEPTH), the trace and the profile (they clear reg->hk__fast). */
HK__DEF HK__COLD hk_signal hk__dispatch(hk_registry *reg, size_t id, hk_ctx *ctx) {
  hk__state *s = reg->hk__s;
  hk_ctx scratch;
  hk_signal out;
  int outer_event, event = (int)id;
  hk_handle outer_self;
  uint64_t t0 = 0;
  if (!ctx) { memset(&scratch, 0, sizeof scratch); ctx = &scratch; }
  if (id >= (size_t)s->n_events) {
    hk__log(s, "error: HK_FIRE with event id %d, which does not exist (0..%d)", event, s->n_events - 1);
    return HK_CONTINUE;
  }
  if (hk__depth(reg) >= HK_MAX_DEPTH) {
    snprintf(s->fatal, sizeof s->fatal, "%s fired %d dispatches deep, past HK_MAX_DEPTH (%d): does a hook fire the event "
             "it is running in, or save a checkpoint from on_save_checkpoint?", hk_event_name(reg, event), hk__depth(reg) + 1, HK_MAX_DEPTH);
    ctx->hook_failure = s->fatal;
    if (ctx != &scratch) hk__failed_inside(reg, ctx, ctx->self);
    return HK_FAIL;
  }
  outer_event = ctx->event;
  outer_self = ctx->self;
  ctx->reg = reg;
  ctx->event = event;
  ctx->hk__seq++;
  if (s->profile) t0 = hk__prof_begin(reg);
  reg->hk__busy++;
  if (s->trace) hk__trace_event(reg, event, ctx);
  out = hk__run(reg, event, ctx, 0, HK_CONTINUE);
  if (s->trace == HK_TRACE_TREE && (hk_event_flags(reg, event) & HK_OPENS)) s->trace_depth++;
  reg->hk__busy--;
  if (t0) hk__prof_end(reg, event, t0);
  ctx->event = outer_event;
  ctx->self = outer_self;
  if (out == HK_FAIL && hk__depth(reg) > 0 && ctx != &scratch) hk__failed_inside(reg, ctx, outer_self);
  if (reg->hk__busy == HK__DIRTY) hk__rebuild(reg);
  if (out != HK_CONTINUE) hk_flow_raise(&ctx->flow, hk_honoured(reg, event, out));
  return out;
}

/* hk__fire's loop ends here when something is unusual. r != HK_CONTINUE: the hook at p returned it
   (the dispatch is still held); settle it, run the rest of the list in the general loop (an earlier
   hook may have flagged later ones off), release the dispatch. r == HK_CONTINUE: every hook ran and
   the dispatch is released, but a change made during it waits: apply it now. */
HK__DEF HK__COLD hk_signal hk__fire_end(hk_registry *reg, hk_ctx *ctx, const hk__entry *p, hk_signal r) {
  hk__state *s = reg->hk__s;
  const hk__entry *end = p;
  hk_signal out;
  int event, i;
  if (r == HK_CONTINUE) {
    hk__rebuild(reg);
    return HK_CONTINUE;
  }
  while (end->fn) end++;
  event = end->event;
  i = (int)(p - s->runs[event]);
  out = hk__settle(reg, s->lists[event][i], ctx, r, HK_CONTINUE);
  out = hk__run(reg, event, ctx, i + 1, out);
  if (--reg->hk__busy) hk__rebuild(reg);
  hk_flow_raise(&ctx->flow, hk_honoured(reg, event, out));
  return out;
}

/* HK_FIRE_FLOW's end when a hook asked for something: what the event honours, into the flow. */
HK__DEF HK__COLD hk_signal hk__flow_signal(hk_registry *reg, int event, hk_flow *flow, hk_signal r) {
  hk_signal s = hk_honoured(reg, event, r);
  if (flow) hk_flow_raise(flow, s);
  return s;
}

/* HK_FIRE_FLOW past its guard, as a function (the HK_DISABLE form type-checks its arguments with it). */
HK__DEF HK__COLD hk_signal hk__dispatch_flow(hk_registry *reg, int event, hk_ctx *ctx, hk_flow *flow) {
  return hk__fire_flow(reg, event, ctx, flow);
}

/* ---- inside hooks --------------------------------------------------------------------------------- */
HK__DEF hk_signal hk_fail(hk_ctx *ctx, const char *fmt, ...) {
  va_list ap;
  if (!ctx) return HK_FAIL;
  va_start(ap, fmt);
  hk__vfmt(ctx->hk__fail_msg, sizeof ctx->hk__fail_msg, fmt ? fmt : "(no message)", ap);
  va_end(ap);
  return HK_FAIL;
}

HK__DEF void hk_request(hk_ctx *ctx, unsigned request) {
  if (!ctx) return;
  ctx->requests |= request;
  if (request & HK_REQUEST_CHECKPOINT) ctx->checkpoint_default = 1;
}
HK__DEF hk_err hk_request_checkpoint(hk_ctx *ctx, const char *path) {
  int i;
  if (!ctx || !path || !path[0]) return HK_ERR_INVALID;
  for (i = 0; i < ctx->n_checkpoint_paths; i++)
    if (ctx->checkpoint_paths[i] == path || strcmp(ctx->checkpoint_paths[i], path) == 0) break;
  if (i == ctx->n_checkpoint_paths) {
    if (i < 0 || i >= HK_MAX_CHECKPOINT_PATHS) return HK_ERR_FULL;
    ctx->checkpoint_paths[ctx->n_checkpoint_paths++] = path;
  }
  ctx->requests |= HK_REQUEST_CHECKPOINT;
  return HK_OK;
}

/* ---- your own loop ------------------------------------------------------------------------------- */
HK__DEF double hk_grad_norm(hk_ctx *ctx) {
  double sum = 0;
  int k;
  if (!ctx) return NAN;
  if (ctx->hk__grad_norm_ok) return ctx->hk__grad_norm;
  if (ctx->grad_norm_source) { /* the loop knows better (device memory): ask it once */
    hk_grad_norm_set(ctx, ctx->grad_norm_source(ctx, ctx->grad_norm_source_user));
    return ctx->hk__grad_norm;
  }
  for (k = 0; k < ctx->n_tensors && ctx->grads; k++) {
    const hk_tensor *g = &ctx->grads[k];
    if (g->on_device) return NAN; /* not readable from here, and not set by the loop */
    sum += hk_sumsq(g->data, g->count);
  }
  hk_grad_norm_set(ctx, sqrt(sum));
  return ctx->hk__grad_norm;
}

/* The gradient norm's loop: unrolled, so that its sixteen sums stay in registers, prefetching, and on
   x86-64 with gcc and glibc given an AVX2 copy that the loader picks where the CPU has it (the order
   of the additions is the same in both: vectorising follows the sixteen lanes). */
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__) /* nvcc's front end warns on it */
#  define HK__UNROLL16 _Pragma("GCC unroll 16")
#elif defined(__clang__)
#  define HK__UNROLL16 _Pragma("unroll 16")
#else
#  define HK__UNROLL16
#endif
/* A single stream read runs at a fraction of memory speed on many machines unless the loop asks
   for the data 4 KiB ahead (measured: about twice the rate); the order of the sums is unchanged. */
#define HK__AHEAD 1024
#if defined(__GNUC__) || defined(__clang__)
#  define HK__PREFETCH(p) __builtin_prefetch(p)
#else
#  define HK__PREFETCH(p) ((void)0)
#endif
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__) && !defined(__SANITIZE_THREAD__) /* ifunc (not under TSan: its resolvers would run before TSan's runtime) */
#  define HK__CLONES __attribute__((target_clones("avx2", "default")))
#else
#  define HK__CLONES
#endif

/* One chunk (n <= HK_NORM_CHUNK) in the documented order. Sixteen accumulators: the inner loop has a
   constant trip count, so gcc vectorises it even at -O2, and sixteen independent sums hide the
   latency of the additions (one accumulator would run at a fraction of memory speed). */
static HK__CLONES double hk__sumsq_chunk(const float *x, size_t n) {
  double acc[16] = {0};
  size_t i, j, w;
  for (i = 0; i + 16 + HK__AHEAD <= n; i += 16) { /* (no branch in these loops: it would stop the vectoriser) */
    HK__PREFETCH(x + i + HK__AHEAD);
    HK__UNROLL16 for (j = 0; j < 16; j++) acc[j] += (double)x[i + j] * (double)x[i + j];
  }
  for (; i + 16 <= n; i += 16)
    HK__UNROLL16 for (j = 0; j < 16; j++) acc[j] += (double)x[i + j] * (double)x[i + j];
  for (j = 0; i + j < n; j++) acc[j] += (double)x[i + j] * (double)x[i + j];
  for (w = 8; w >= 1; w /= 2)
    for (j = 0; j < w; j++) acc[j] += acc[j + w];
  return acc[0];
}

HK__DEF double hk_sumsq(const float *x, size_t n) {
  double sum = 0;
  size_t c;
  for (c = 0; c < n; c += HK_NORM_CHUNK) sum += hk__sumsq_chunk(x + c, n - c < HK_NORM_CHUNK ? n - c : HK_NORM_CHUNK);
  return sum;
}

HK__DEF void hk_grad_norm_set(hk_ctx *ctx, double norm) {
  if (!ctx) return;
  ctx->hk__grad_norm = norm;
  ctx->hk__grad_norm_ok = 1;
}

HK__DEF double hk_grad_norm_metric(const hk_ctx *ctx, void *user) {
  (void)user;
  return hk_grad_norm((hk_ctx *)ctx); /* the cache lives in the context, which the loop owns */
}

HK__DEF const hk_tensor *hk_tensor_find(const hk_tensor *t, int n, const char *name) {
  int i;
  if (!t || !name) return NULL;
  for (i = 0; i < n; i++) if (t[i].name && !strcmp(t[i].name, name)) return &t[i];
  return NULL;
}

/* ---- your own loop: Ctrl-C and SIGTERM ------------------------------------------------------------
   The handler touches sig_atomic_t variables only and calls only signal() (and raise(), on the second
   signal): all a signal handler may safely do. */
#if !defined(HK_NO_SIGNALS) && defined(__wasi__)
#  define HK_NO_SIGNALS
#endif
#ifndef HK_NO_SIGNALS
#include <signal.h>
static volatile sig_atomic_t hk__stop_count, hk__stop_count_only, hk__stop_last;
static int hk__stop_depth;      /* installs not restored yet */
static unsigned hk__stop_outer; /* the enclosing installs' count_only flags, the innermost in bit 0 */
static const int hk__stop_sigs[2] = { SIGINT, SIGTERM };
static void (*hk__stop_prev[2])(int);
static int hk__stop_mine[2];    /* our handler is in place for that signal: restore puts hk__stop_prev back */

static void hk__on_stop_signal(int sig) {
  hk__stop_last = (sig_atomic_t)sig;
  if (hk__stop_count < 127) hk__stop_count = (sig_atomic_t)(hk__stop_count + 1); /* 127: the least SIG_ATOMIC_MAX */
  if (hk__stop_count >= 2 && !hk__stop_count_only) {
    /* the second signal does what it would have done without us. BSD-style signal() blocks it while
       this handler runs (it is delivered on return), System V-style does not (it is delivered now) */
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  signal(sig, hk__on_stop_signal); /* System V-style signal() reset the handler before calling it */
}

HK__DEF int hk_stop_signals_install(int flags) {
  int i, any = 0;
  if (hk__stop_depth > 0) { /* nested: the same handlers and count, these flags until the matching restore */
    if (hk__stop_depth > 16) return -1; /* hk__stop_outer holds 16 levels (unsigned has at least 16 bits) */
    hk__stop_outer = (hk__stop_outer << 1) | (hk__stop_count_only ? 1u : 0u);
    hk__stop_count_only = (flags & HK_STOP_COUNT_ONLY) != 0;
    hk__stop_depth++;
    return 0;
  }
  hk__stop_count = hk__stop_last = 0;
  hk__stop_count_only = (flags & HK_STOP_COUNT_ONLY) != 0;
  for (i = 0; i < 2; i++) {
    void (*prev)(int) = signal(hk__stop_sigs[i], hk__on_stop_signal);
    hk__stop_mine[i] = 0;
    if (prev == SIG_ERR) continue;
    any = 1;
    if (prev == SIG_IGN) { signal(hk__stop_sigs[i], SIG_IGN); continue; } /* ignored on purpose: stays so */
    hk__stop_prev[i] = prev;
    hk__stop_mine[i] = 1;
  }
  if (!any) return -1;
  hk__stop_depth = 1;
  return 0;
}

HK__DEF void hk_stop_signals_restore(void) {
  int i;
  if (hk__stop_depth <= 0) return;
  if (--hk__stop_depth > 0) { /* back to the enclosing install's flags */
    hk__stop_count_only = (sig_atomic_t)(hk__stop_outer & 1u);
    hk__stop_outer >>= 1;
    return;
  }
  for (i = 0; i < 2; i++)
    if (hk__stop_mine[i]) { signal(hk__stop_sigs[i], hk__stop_prev[i]); hk__stop_mine[i] = 0; }
}

HK__DEF int hk_stop_requested(void) { return (int)hk__stop_count; }
HK__DEF int hk_stop_signal(void) { return (int)hk__stop_last; }
#else
HK__DEF int hk_stop_signals_install(int flags) { (void)flags; return -1; }
HK__DEF void hk_stop_signals_restore(void) {}
HK__DEF int hk_stop_requested(void) { return 0; }
HK__DEF int hk_stop_signal(void) { return 0; }
#endif

HK__DEF int hk_stop_poll(hk_flow *flow) {
  int n = hk_stop_requested();
  if (flow && n >= 1) hk_flow_raise(flow, HK_STOP);
  if (flow && n >= 2) hk_flow_raise(flow, HK_FAIL);
  return n;
}

/* ---- metrics ------------------------------------------------------------------------------------ */
static hk__metric *hk__metric_slot(hk_ctx *ctx, const char *name) {
  hk__metric_entry *m = (hk__metric_entry *)ctx->hk__metrics;
  ptrdiff_t i;
  if (!m) {
    stbds_sh_new_strdup(m);
    ctx->hk__metrics = m;
  }
  i = stbds_shgeti(m, name);
  if (i < 0) {
    hk__metric zero;
    memset(&zero, 0, sizeof zero);
    stbds_shput(m, name, zero);
    ctx->hk__metrics = m;
    i = stbds_shgeti(m, name);
  }
  return &m[i].value;
}

HK__DEF hk_err hk_metric_set(hk_ctx *ctx, const char *name, double value) {
  hk__metric *v;
  if (!ctx || !name || !*name) return HK_ERR_INVALID;
  v = hk__metric_slot(ctx, name);
  v->value = value;
  v->has_value = 1;
  v->seq = ctx->hk__seq;
  v->stamp = ++ctx->hk__metric_sets;
  return HK_OK;
}

HK__DEF uint64_t hk_metric_stamp(hk_ctx *ctx, const char *name) {
  hk__metric_entry *m;
  ptrdiff_t i;
  if (!ctx) return 0;
  if (!name) return ctx->hk__metric_sets;
  if (!ctx->hk__metrics) return 0;
  m = (hk__metric_entry *)ctx->hk__metrics;
  i = stbds_shgeti(m, name);
  return i < 0 ? 0 : m[i].value.stamp;
}

HK__DEF hk_err hk_metric_lazy(hk_ctx *ctx, const char *name, double (*fn)(const hk_ctx *, void *), void *user) {
  hk__metric *v;
  if (!ctx || !name || !*name || !fn) return HK_ERR_INVALID;
  v = hk__metric_slot(ctx, name);
  v->fn = fn;
  v->user = user;
  v->has_value = 0;
  return HK_OK;
}

/* A lazy value is computed on first request in a dispatch and reused until that dispatch ends (a nested
   one gets its own). Outside a dispatch every read computes it: since the last dispatch the loop may have
   changed what fn reads (steps whose events have no hook dispatch nothing), so a cached value is stale. */
static double hk__metric_read(hk_ctx *ctx, hk__metric *v) {
  if (v->fn && (!v->has_value || v->seq != ctx->hk__seq || !ctx->reg || hk__depth(ctx->reg) == 0)) {
    v->value = v->fn(ctx, v->user);
    v->has_value = 1;
    v->seq = ctx->hk__seq;
  }
  return v->value;
}

HK__DEF int hk_metric_get(hk_ctx *ctx, const char *name, double *value) {
  hk__metric_entry *m;
  ptrdiff_t i;
  if (!ctx || !name || !ctx->hk__metrics) return 0;
  m = (hk__metric_entry *)ctx->hk__metrics;
  i = stbds_shgeti(m, name);
  if (i < 0 || (!m[i].value.has_value && !m[i].value.fn)) return 0;
  if (value) *value = hk__metric_read(ctx, &m[i].value);
  else hk__metric_read(ctx, &m[i].value);
  return 1;
}

HK__DEF int hk_metric_count(const hk_ctx *ctx) {
  return (ctx && ctx->hk__metrics) ? (int)stbds_shlen((hk__metric_entry *)ctx->hk__metrics) : 0;
}

HK__DEF const char *hk_metric_at(hk_ctx *ctx, int i, double *value) {
  hk__metric_entry *m;
  if (i < 0 || i >= hk_metric_count(ctx)) return NULL;
  m = (hk__metric_entry *)ctx->hk__metrics;
  if (value) *value = hk__metric_read(ctx, &m[i].value);
  return m[i].key;
}

HK__DEF void hk_metric_forget_between(hk_ctx *ctx, uint64_t after, uint64_t upto) {
  hk__metric_entry *m, *keep = NULL;
  ptrdiff_t i;
  if (!ctx || !ctx->hk__metrics) return;
  m = (hk__metric_entry *)ctx->hk__metrics;
  stbds_sh_new_strdup(keep);
  for (i = 0; i < stbds_shlen(m); i++) {
    hk__metric v = m[i].value;
    if (v.fn) v.has_value = 0;            /* a lazy source stays; its cached value goes */
    else if (v.stamp > after && v.stamp <= upto) continue;
    stbds_shput(keep, m[i].key, v);
  }
  stbds_shfree(m);
  ctx->hk__metrics = keep;
}

HK__DEF void hk_metric_clear(hk_ctx *ctx) { hk_metric_forget_between(ctx, 0, UINT64_MAX); }

HK__DEF void hk_ctx_free(hk_ctx *ctx) {
  hk__metric_entry *m;
  if (!ctx || !ctx->hk__metrics) return;
  m = (hk__metric_entry *)ctx->hk__metrics;
  stbds_shfree(m);
  ctx->hk__metrics = NULL;
}

/* ---- callback state -------------------------------------------------------------------------------- */
HK__DEF int hk_bytes_put(hk_bytes *b, const void *data, size_t n) {
  if (!b || b->failed) return -1;
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 64;
    unsigned char *g;
    while (cap < b->len + n) cap *= 2;
    g = (unsigned char *)HOOKS_REALLOC(b->data, cap);
    if (!g) { b->failed = 1; return -1; }
    b->data = g;
    b->cap = cap;
  }
  if (n) memcpy(b->data + b->len, data, n);
  b->len += n;
  return 0;
}

HK__DEF void hk_bytes_free(hk_bytes *b) {
  if (!b) return;
  HOOKS_FREE(b->data);
  memset(b, 0, sizeof *b);
}

HK__DEF int hk_read(hk_reader *r, void *dst, size_t n) {
  if (!r || r->pos > r->len || r->len - r->pos < n) return -1;
  if (n) memcpy(dst, r->data + r->pos, n);
  r->pos += n;
  return 0;
}

HK__DEF int hk_reject(hk_reader *r, const char *fmt, ...) {
  va_list ap;
  if (!r || !fmt) return -1;
  va_start(ap, fmt);
  vsnprintf(r->why, sizeof r->why, fmt, ap);
  va_end(ap);
  return -1;
}

HK__DEF hk_err hk_state_save(hk_registry *reg, hk_state_sink sink, void *user) {
  hk__state *s;
  int i;
  if (!reg || !sink) return HK_ERR_INVALID;
  s = reg->hk__s;
  for (i = 0; i < s->n_regs; i++) {
    hk__reg *r = s->regs[i];
    hk_bytes b;
    hk_err err;
    if (!r || r->dead || !r->is_callback || !r->cb.save_state) continue; /* (NULL: being destroyed) */
    memset(&b, 0, sizeof b);
    if (r->cb.save_state(r->cb.user, &b) != 0 || b.failed) {
      hk_bytes_free(&b);
      return hk__fail_with(s, HK_ERR_STATE, "callback '%s' failed to save its state%s", r->name, b.failed ? " (out of memory)" : "");
    }
    err = sink(r->name, b.data, b.len, user);
    hk_bytes_free(&b);
    if (err) return err;
  }
  return HK_OK;
}

/* The live callback named key that can load state, or NULL. */
static hk__reg *hk__state_loader(const hk_registry *reg, const char *key) {
  hk__reg *r = key && stbds_shgeti(reg->hk__s->names, key) >= 0 ? stbds_shget(reg->hk__s->names, key) : NULL; /* O(1) */
  return (r && r->is_callback && r->cb.load_state) ? r : NULL;
}

HK__DEF hk_err hk_state_load(hk_registry *reg, const char *key, const void *data, size_t len) {
  hk__reg *r;
  hk_reader rd;
  if (!reg || !key || (!data && len)) return HK_ERR_INVALID;
  r = hk__state_loader(reg, key);
  if (!r)
    return hk__fail_with(reg->hk__s, HK_ERR_NOT_FOUND, "no registered callback named '%s' loads state; its saved state is ignored", key);
  rd.data = (const unsigned char *)data;
  rd.len = len;
  rd.pos = 0;
  rd.why[0] = 0;
  if (r->cb.load_state(r->cb.user, &rd) != 0) {
    rd.why[sizeof rd.why - 1] = 0;
    return hk__fail_with(reg->hk__s, HK_ERR_STATE, "callback '%s' rejected its saved state (%lu bytes)%s%s", key,
                         (unsigned long)len, rd.why[0] ? ": " : "", rd.why);
  }
  return HK_OK;
}

HK__DEF hk_err hk_state_check(hk_registry *reg, hk_state_blob *blobs, int n, int *missing) {
  typedef struct { char *key; int value; } seen_entry;
  seen_entry *seen = NULL;
  hk__state *s;
  hk_err err = HK_OK;
  char names[200];
  int i, n_missing = 0;
  size_t used = 0;
  if (missing) *missing = 0;
  if (!reg || n < 0 || (n && !blobs)) return HK_ERR_INVALID;
  s = reg->hk__s;
  stbds_sh_new_strdup(seen);
  for (i = 0; i < n; i++) {
    if (!blobs[i].key || stbds_shgeti(seen, blobs[i].key) >= 0) {
      blobs[i].result = HK_ERR_DUPLICATE;
      if (!err) err = hk__fail_with(s, HK_ERR_DUPLICATE, "the state of '%s' is given twice", blobs[i].key ? blobs[i].key : "(null)");
      continue;
    }
    stbds_shput(seen, blobs[i].key, i);
    blobs[i].result = hk__state_loader(reg, blobs[i].key) ? HK_OK : HK_ERR_NOT_FOUND;
  }
  names[0] = 0;
  for (i = 0; i < s->n_regs; i++) {
    hk__reg *r = s->regs[i];
    if (!r || r->dead || !r->is_callback || !r->cb.load_state || stbds_shgeti(seen, r->name) >= 0) continue;
    if (n_missing++ >= 3) continue;
    used = hk__cat(names, sizeof names, used, used ? ", '" : "'");
    used = hk__cat(names, sizeof names, hk__cat(names, sizeof names, used, r->name), "'");
  }
  stbds_shfree(seen);
  if (missing) *missing = n_missing;
  if (!err && n_missing) {
    if (n_missing > 3) hk__fail_with(s, HK_OK, "no saved state for %s and %d more", names, n_missing - 3);
    else hk__fail_with(s, HK_OK, "no saved state for %s", names);
  }
  return err;
}

HK__DEF hk_err hk_state_load_all(hk_registry *reg, hk_state_blob *blobs, int n) {
  static const hk_tier tiers[HK_TIER_COUNT] = { HK_TIER_MODEL, HK_TIER_CALLBACK, HK_TIER_STRATEGY };
  hk__state *s;
  hk__reg **who;
  hk_bytes *before;
  int *order;
  hk_err err;
  int i, k, j, n_order = 0;
  if ((err = hk_state_check(reg, blobs, n, NULL)) != HK_OK) return err;
  s = reg->hk__s;
  who = (hk__reg **)hk__alloc(sizeof *who * (size_t)n);
  before = (hk_bytes *)hk__alloc(sizeof *before * (size_t)n);
  order = (int *)hk__alloc(sizeof *order * (size_t)n);
  if (!who || !before || !order) {
    HOOKS_FREE(who); HOOKS_FREE(before); HOOKS_FREE(order);
    return hk__fail_with(s, HK_ERR_NOMEM, "out of memory loading callback state");
  }
  memset(before, 0, sizeof *before * (size_t)n);
  memset(who, 0, sizeof *who * (size_t)n);
  /* keep what every callback involved has now, so a rejection can be undone */
  for (i = 0; i < n && !err; i++) {
    hk__reg *r = who[i] = blobs[i].result == HK_OK ? hk__state_loader(reg, blobs[i].key) : NULL;
    if (r && (r->cb.save_state(r->cb.user, &before[i]) != 0 || before[i].failed))
      err = hk__fail_with(s, HK_ERR_STATE, "callback '%s' could not save its current state, so nothing was loaded", r->name);
  }
  for (k = 0; k < HK_TIER_COUNT; k++)  /* the order to load in: model, callbacks, strategy */
    for (i = 0; i < n; i++) if (who[i] && who[i]->opts.tier == tiers[k]) order[n_order++] = i;
  for (j = 0; j < n_order && !err; j++) {
    i = order[j];
    if ((err = hk_state_load(reg, blobs[i].key, blobs[i].data, blobs[i].len)) != HK_OK) {
      char why[sizeof s->err];
      memcpy(why, s->err, sizeof why); /* hk_state_load's message, with the callback's reason */
      blobs[i].result = err;
      for (k = 0; k < j; k++) (void)hk_state_load(reg, blobs[order[k]].key, before[order[k]].data, before[order[k]].len);
      hk__fail_with(s, err, "%s; the callbacks loaded before it were restored", why);
    }
  }
  for (i = 0; i < n; i++) hk_bytes_free(&before[i]);
  HOOKS_FREE(who);
  HOOKS_FREE(before);
  HOOKS_FREE(order);
  return err;
}

/* ---- factories and spec strings -------------------------------------------------------------------- */
typedef struct hk__span { const char *p; size_t n, pos; } hk__span;  /* pos: byte offset in the spec */
#define HK__NO_POS ((size_t)-1)  /* hk__convert checking a factory's default, not the spec */

/* One parsed spec item. make and user are copies: a make() may add factories, and the map that
   holds them moves when it grows. */
typedef struct hk__item {
  hk__span name;
  hk_factory_fn make;
  void *user;
  hk_args args;
} hk__item;

typedef struct hk__parser {
  hk__state *s;
  const char *spec, *p;
  char *values;          /* unescaped values, NUL-separated; never longer than the spec */
  size_t vlen;
  hk__item *items;
  int n_items, cap_items;
} hk__parser;

/* Line and column (from 1) of a byte offset; size_t, so that specs past 2 GiB still say where. */
static void hk__where(const char *spec, size_t pos, size_t *line, size_t *col) {
  size_t i;
  *line = 1;
  *col = 1;
  for (i = 0; i < pos && spec[i]; i++) {
    if (spec[i] == '\n') { (*line)++; *col = 1; }
    else (*col)++;
  }
}

static hk_err hk__spec_error(hk__parser *ps, size_t pos, const char *fmt, ...) {
  char what[400];
  size_t line, col;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  hk__where(ps->spec, pos, &line, &col);
  return hk__fail_with(ps->s, HK_ERR_SPEC, "spec error at %llu:%llu: %s", (unsigned long long)line, (unsigned long long)col, what);
}

/* How much of text to quote in a message: at most max bytes, up to a newline, and never ending
   inside a UTF-8 character (text[n] must not be a continuation byte). */
static size_t hk__prefix(const char *text, size_t max) {
  size_t n = 0;
  while (n < max && text[n] && text[n] != '\n') n++;
  while (n > 0 && text[n] && ((unsigned char)text[n] & 0xC0) == 0x80) n--;
  return n;
}

/* Bytes of the (UTF-8) character at p: a message never quotes half of one. */
static int hk__char_len(const char *p) {
  unsigned char c = (unsigned char)*p;
  int n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1, i;
  for (i = 1; i < n; i++) if (((unsigned char)p[i] & 0xC0) != 0x80) return i;
  return n;
}

/* A value for a message: itself, or its start, "..." and its length, so that a huge value cannot
   push the rest of the message (what was expected) out. */
static const char *hk__clip(char *buf, size_t cap, const char *text) {
  size_t n = hk__prefix(text, 40), len = strlen(text);
  if (n == len) snprintf(buf, cap, "%s", text);
  else snprintf(buf, cap, "%.*s... (%llu bytes)", (int)n, text, (unsigned long long)len);
  return buf;
}

/* Edit distance, for "did you mean" suggestions (names are short). */
static int hk__distance(const char *a, size_t na_, const char *b) {
  int nb = (int)strlen(b), na = (int)na_, i, j, row[64];
  if (na_ > 63 || nb > 63) return 99;
  for (j = 0; j <= nb; j++) row[j] = j;
  for (i = 1; i <= na; i++) {
    int diag = row[0];
    row[0] = i;
    for (j = 1; j <= nb; j++) {
      int up = row[j], best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      diag = up;
      row[j] = best;
    }
  }
  return row[nb];
}

/* " (did you mean 'x'?)" when one candidate is close, else "". */
static const char *hk__suggest(char *buf, size_t cap, const char *word, size_t n, const char *const *cands, int nc) {
  int i, best = 3, at = -1;
  for (i = 0; i < nc; i++) {
    int d = hk__distance(word, n, cands[i]);
    if (d < best && (size_t)d <= (n + 2) / 3 + 1) { best = d; at = i; }
  }
  if (at < 0) return "";
  snprintf(buf, cap, " (did you mean '%s'?)", cands[at]);
  return buf;
}

static void hk__list(char *buf, size_t cap, const char *const *names, int n) {
  size_t used = 0;
  int i;
  buf[0] = 0;
  if (n == 0) { snprintf(buf, cap, "(none registered)"); return; }
  for (i = 0; i < n && used < cap; i++) used = hk__cat(buf, cap, hk__cat(buf, cap, used, i ? ", " : ""), names[i]);
}

static void hk__skip_ws(hk__parser *ps) { while (*ps->p && isspace((unsigned char)*ps->p)) ps->p++; }

static int hk__ident(hk__parser *ps, hk__span *out) {
  const char *b = ps->p;
  if (!(isalpha((unsigned char)*b) || *b == '_')) return 0;
  while (isalnum((unsigned char)*ps->p) || *ps->p == '_' || *ps->p == '.') ps->p++;
  out->p = b;
  out->n = (size_t)(ps->p - b);
  out->pos = (size_t)(b - ps->spec);
  return 1;
}

static size_t hk__at(const hk__parser *ps) { return (size_t)(ps->p - ps->spec); }

/* What the parser found where it expected something else: a short quote, or "end of spec". */
static const char *hk__show(char *buf, size_t cap, const char *p) {
  if (!*p) return "end of spec";
  snprintf(buf, cap, "'%.*s'", (int)hk__prefix(p, 12), p);
  return buf;
}

/* A value: a "double-quoted" or 'single-quoted' string (escapes \" \' \\ \n \t in both) or a bare
   word. Returns its unescaped copy in ps->values. */
static hk_err hk__value(hk__parser *ps, const char *key, const char **out) {
  char *dst = ps->values + ps->vlen, shown[32];
  const char *b = ps->p;
  if (*ps->p == '"' || *ps->p == '\'') {
    char quote = *ps->p++;
    for (;;) {
      char c = *ps->p;
      if (!c || (c == '\\' && !ps->p[1])) /* the end, or a last backslash that escapes nothing */
        return hk__spec_error(ps, (size_t)(b - ps->spec), "unterminated string: the %s here has no closing %s",
                              quote == '"' ? "'\"'" : "\"'\"", quote == '"' ? "'\"'" : "\"'\"");
      ps->p++;
      if (c == quote) break;
      if (c == '\\') {
        char e = *ps->p;
        if (e == '"' || e == '\'' || e == '\\') c = e;
        else if (e == 'n') c = '\n';
        else if (e == 't') c = '\t';
        else return hk__spec_error(ps, hk__at(ps) - 1, "unknown escape '\\%.*s' in a string (valid: \\\" \\' \\\\ \\n \\t)",
                                   hk__char_len(ps->p), ps->p);
        ps->p++;
      }
      ps->values[ps->vlen++] = c;
    }
  } else {
    while (*ps->p && !isspace((unsigned char)*ps->p) && !strchr(",;()=\"'", *ps->p)) ps->values[ps->vlen++] = *ps->p++;
    if (ps->p == b) return hk__spec_error(ps, (size_t)(b - ps->spec), "expected a value for '%s', found %s (quote values that contain , ; ( ) = ' \" or spaces)", key, hk__show(shown, sizeof shown, ps->p));
  }
  ps->values[ps->vlen++] = 0;
  *out = dst;
  return HK_OK;
}

/* A number as a spec writes it: [+-]digits for an integer; for a double also a fraction and an
   exponent ([+-]digits[.digits][e[+-]digits], or .5). Nothing else: no spaces, no hex, no nan or
   inf, which strtod would take. */
static int hk__is_number(const char *t, int integer) {
  if (*t == '+' || *t == '-') t++;
  if (!isdigit((unsigned char)*t) && (integer || *t != '.' || !isdigit((unsigned char)t[1]))) return 0;
  while (isdigit((unsigned char)*t)) t++;
  if (integer) return *t == 0;
  if (*t == '.') for (t++; isdigit((unsigned char)*t); t++) {}
  if (*t == 'e' || *t == 'E') {
    t++;
    if (*t == '+' || *t == '-') t++;
    if (!isdigit((unsigned char)*t)) return 0;
    while (isdigit((unsigned char)*t)) t++;
  }
  return *t == 0;
}

/* Convert text to a typed argument. pos is where the value starts in the spec, or HK__NO_POS when a
   factory's default is being checked. */
static hk_err hk__convert(hk__parser *ps, const hk_param *prm, const char *text, size_t pos, const char *factory,
                          int64_t *i, double *d) {
  static const char *const expect[] = { "", "an integer such as 3", "a number such as 0.001 or 1e-3", "true or false (also yes/no, on/off, 1/0)",
                                        "any text", "one of " };
  const char *range = NULL;
  char shown[96];
  errno = 0;
  switch (prm->type) {
  case HK_PARAM_INT:
    if (!hk__is_number(text, 1)) goto bad;
    *i = strtoll(text, NULL, 10);
    if (errno == ERANGE) { range = "integers are -9223372036854775808..9223372036854775807"; goto bad; }
    *d = (double)*i;
    return HK_OK;
  case HK_PARAM_DOUBLE:
    if (!hk__is_number(text, 0)) goto bad;
    *d = strtod(text, NULL);
    if (errno == ERANGE && !hk_is_finite(*d)) { range = "beyond +-1.8e308"; goto bad; }
    if (errno == ERANGE && *d == 0) { range = "too close to 0 (the smallest magnitude is about 4.9e-324), write 0"; goto bad; }
    return HK_OK; /* a tiny (subnormal) value is kept as strtod gives it */
  case HK_PARAM_BOOL:
    if (!strcmp(text, "true") || !strcmp(text, "1") || !strcmp(text, "yes") || !strcmp(text, "on")) *i = 1;
    else if (!strcmp(text, "false") || !strcmp(text, "0") || !strcmp(text, "no") || !strcmp(text, "off")) *i = 0;
    else goto bad;
    return HK_OK;
  case HK_PARAM_CHOICE: {
    const char *c = prm->choices;
    size_t n = strlen(text);
    int k = 0;
    while (c && *c) {
      size_t len = strcspn(c, "|");
      if (len == n && !strncmp(c, text, n)) { *i = k; return HK_OK; }
      c += len + (c[len] == '|');
      k++;
    }
    goto bad;
  }
  case HK_PARAM_STRING:
    return HK_OK;
  }
bad:
  hk__clip(shown, sizeof shown, text);
  if (pos == HK__NO_POS)
    return range ? hk__fail_with(ps->s, HK_ERR_INVALID, "factory '%s': default value '%s' for '%s' is out of range: %s", factory, shown, prm->key, range)
                 : hk__fail_with(ps->s, HK_ERR_INVALID, "factory '%s': default value '%s' for '%s' is not %s%s", factory, shown,
                                 prm->key, expect[prm->type], prm->type == HK_PARAM_CHOICE ? prm->choices : "");
  if (range) return hk__spec_error(ps, pos, "value '%s' for '%s' of '%s' is out of range: %s", shown, prm->key, factory, range);
  return hk__spec_error(ps, pos, "bad value '%s' for '%s' of '%s': expected %s%s", shown, prm->key, factory,
                        expect[prm->type], prm->type == HK_PARAM_CHOICE ? prm->choices : "");
}

static hk_err hk__parse_item(hk__parser *ps, hk__item *it) {
  char shown[32], sugg[96], list[512], fname[64];
  const char *keys[HK_SPEC_MAX_ARGS];
  hk__factory_entry *fe = ps->s->factories;
  const hk__factory *f;
  const char *names[64];
  int k, nf = 0;
  size_t open_pos, used = 0;
  ptrdiff_t fi;
  memset(it, 0, sizeof *it);
  if (!hk__ident(ps, &it->name))
    return hk__spec_error(ps, hk__at(ps), "expected a callback name, found %s", hk__show(shown, sizeof shown, ps->p));
  for (fi = 0; fi < stbds_shlen(fe) && nf < 64; fi++) names[nf++] = fe[fi].key;
  snprintf(fname, sizeof fname, "%.*s", (int)(it->name.n < 63 ? it->name.n : 63), it->name.p);
  fi = it->name.n < 63 ? stbds_shgeti(ps->s->factories, fname) : -1;
  if (fi < 0) {
    hk__list(list, sizeof list, names, nf);
    return hk__spec_error(ps, it->name.pos, "unknown callback '%.*s'%s; known: %s", (int)hk__prefix(it->name.p, it->name.n < 63 ? it->name.n : 63),
                          it->name.p, hk__suggest(sugg, sizeof sugg, it->name.p, it->name.n, names, nf), list);
  }
  f = &ps->s->factories[fi].value; /* only while parsing: no factory runs until every item is parsed */
  if (!f->make) return hk__spec_error(ps, it->name.pos, "'%s' is not available: %s", fname, f->doc);
  it->make = f->make;
  it->user = f->user;
  it->args.factory = ps->s->factories[fi].key; /* stb_ds keeps each key in its own allocation */
  for (k = 0; k < f->n_params; k++) keys[k] = f->params[k].key;
  hk__skip_ws(ps);
  if (*ps->p == '(') {
    open_pos = hk__at(ps);
    ps->p++;
    hk__skip_ws(ps);
    if (*ps->p == ')') ps->p++;
    else for (;;) {
      hk__span key;
      const char *text = NULL;
      int slot = -1;
      size_t value_pos;
      hk_err err;
      if (!hk__ident(ps, &key)) {
        if (!*ps->p) return hk__spec_error(ps, open_pos, "unclosed '(' for '%s'", it->args.factory);
        return hk__spec_error(ps, hk__at(ps), "expected a key of '%s', found %s", it->args.factory, hk__show(shown, sizeof shown, ps->p));
      }
      for (k = 0; k < f->n_params; k++)
        if (strlen(keys[k]) == key.n && !strncmp(keys[k], key.p, key.n)) slot = k;
      if (slot < 0) {
        hk__list(list, sizeof list, keys, f->n_params);
        return hk__spec_error(ps, key.pos, "unknown key '%.*s' for '%s'%s; valid keys: %s", (int)hk__prefix(key.p, key.n < 40 ? key.n : 40),
                              key.p, it->args.factory, hk__suggest(sugg, sizeof sugg, key.p, key.n, keys, f->n_params), list);
      }
      if (it->args.v[slot].given) return hk__spec_error(ps, key.pos, "key '%s' is given twice for '%s'", keys[slot], it->args.factory);
      hk__skip_ws(ps);
      if (*ps->p != '=') return hk__spec_error(ps, hk__at(ps), "expected '=' after key '%s', found %s", keys[slot], hk__show(shown, sizeof shown, ps->p));
      ps->p++;
      hk__skip_ws(ps);
      value_pos = hk__at(ps);
      if ((err = hk__value(ps, keys[slot], &text)) != HK_OK) return err;
      it->args.v[slot].given = 1;
      it->args.v[slot].s = text;
      if ((err = hk__convert(ps, &f->params[slot], text, value_pos, it->args.factory, &it->args.v[slot].i, &it->args.v[slot].d)) != HK_OK) return err;
      hk__skip_ws(ps);
      if (*ps->p == ',') { ps->p++; hk__skip_ws(ps); continue; }
      if (*ps->p == ')') { ps->p++; break; }
      if (!*ps->p) return hk__spec_error(ps, open_pos, "unclosed '(' for '%s'", it->args.factory);
      return hk__spec_error(ps, hk__at(ps), "expected ',' or ')' after the value of '%s', found %s", keys[slot], hk__show(shown, sizeof shown, ps->p));
    }
  }
  /* fill in defaults; report every missing required key at once */
  it->args.n = f->n_params;
  list[0] = 0;
  for (k = 0; k < f->n_params; k++) {
    const hk_param *prm = &f->params[k];
    it->args.v[k].key = prm->key;
    it->args.v[k].type = prm->type;
    if (it->args.v[k].given) continue;
    if (!prm->def) {
      used = hk__cat(list, sizeof list, hk__cat(list, sizeof list, used, used ? ", " : ""), prm->key);
      continue;
    }
    it->args.v[k].s = prm->def;
    hk__convert(ps, prm, prm->def, HK__NO_POS, it->args.factory, &it->args.v[k].i, &it->args.v[k].d); /* checked at hk_factory_add */
  }
  if (list[0]) return hk__spec_error(ps, it->name.pos, "'%s' is missing required key(s): %s", it->args.factory, list);
  return HK_OK;
}

static hk_err hk__parse(hk__parser *ps, hk__state *s, const char *spec) {
  memset(ps, 0, sizeof *ps);
  ps->s = s;
  ps->spec = ps->p = spec;
  ps->values = (char *)hk__alloc(strlen(spec) + 1);
  if (!ps->values) return hk__fail_with(s, HK_ERR_NOMEM, "out of memory parsing a spec");
  hk__skip_ws(ps);
  /* an empty spec (or only whitespace) is no callbacks: a configuration's "callbacks: ''" */
  while (*ps->p) {
    char shown[32];
    hk_err err;
    if (ps->n_items == ps->cap_items) {
      int cap = ps->cap_items ? 2 * ps->cap_items : 8;
      hk__item *g = (hk__item *)HOOKS_REALLOC(ps->items, sizeof *g * (size_t)cap);
      if (!g) return hk__fail_with(s, HK_ERR_NOMEM, "out of memory parsing a spec");
      ps->items = g;
      ps->cap_items = cap;
    }
    if ((err = hk__parse_item(ps, &ps->items[ps->n_items])) != HK_OK) return err;
    ps->n_items++;
    hk__skip_ws(ps);
    if (*ps->p == ';') { ps->p++; hk__skip_ws(ps); continue; }
    if (*ps->p) return hk__spec_error(ps, hk__at(ps), "expected ';' between callbacks, found %s", hk__show(shown, sizeof shown, ps->p));
  }
  return HK_OK;
}

static void hk__parser_free(hk__parser *ps) {
  HOOKS_FREE(ps->values);
  HOOKS_FREE(ps->items);
}

HK__DEF hk_err hk_factory_add(hk_registry *reg, const char *name, const hk_param *params, int n_params,
                              hk_factory_fn make, void *user, const char *doc) {
  hk__state *s;
  hk__factory f;
  hk__parser check;
  int k, j;
  if (!reg) return HK_ERR_INVALID;
  s = reg->hk__s;
  if (!hk__is_ident(name) || strlen(name) > 62)
    return hk__fail_with(s, HK_ERR_INVALID, "factory name '%s' is not valid (letters, digits, '_' and '.', starting with a letter or '_')", name ? name : "(null)");
  if (!make && (!doc || !*doc)) return hk__fail_with(s, HK_ERR_INVALID, "factory '%s': the make function is NULL and no doc says why", name);
  if (n_params < 0 || n_params > HK_SPEC_MAX_ARGS || (n_params && !params))
    return hk__fail_with(s, HK_ERR_INVALID, "factory '%s': %d parameters given (0..%d, and params must not be NULL)", name, n_params, HK_SPEC_MAX_ARGS);
  if (stbds_shgeti(s->factories, name) >= 0) return hk__fail_with(s, HK_ERR_DUPLICATE, "factory '%s' is already registered", name);
  memset(&f, 0, sizeof f);
  memset(&check, 0, sizeof check);
  check.s = s;
  for (k = 0; k < n_params; k++) {
    const hk_param *p = &params[k];
    int64_t i;
    double d;
    if (!hk__is_ident(p->key)) return hk__fail_with(s, HK_ERR_INVALID, "factory '%s': parameter %d has an invalid key '%s'", name, k, p->key ? p->key : "(null)");
    for (j = 0; j < k; j++) if (!strcmp(params[j].key, p->key)) return hk__fail_with(s, HK_ERR_DUPLICATE, "factory '%s': parameter '%s' is declared twice", name, p->key);
    if (p->type < HK_PARAM_INT || p->type > HK_PARAM_CHOICE) return hk__fail_with(s, HK_ERR_INVALID, "factory '%s': parameter '%s' has no valid type (HK_PARAM_INT, _DOUBLE, _BOOL, _STRING, _CHOICE)", name, p->key);
    if (p->type == HK_PARAM_CHOICE && (!p->choices || !*p->choices)) return hk__fail_with(s, HK_ERR_INVALID, "factory '%s': choice parameter '%s' needs choices such as \"min|max\"", name, p->key);
    if (p->def && hk__convert(&check, p, p->def, HK__NO_POS, name, &i, &d) != HK_OK) return HK_ERR_INVALID;
    f.params[k] = *p;
  }
  f.n_params = n_params;
  f.make = make;
  f.user = user;
  f.doc = doc;
  stbds_shput(s->factories, name, f);
  return HK_OK;
}

HK__DEF hk_handle hk_spec_find(const hk_registry *reg, const char *factory, int n) {
  const hk__state *s;
  int i;
  if (!reg || n < 0) return 0;
  s = reg->hk__s;
  for (i = 0; i < s->n_regs; i++) {
    const hk__reg *r = s->regs[i];
    if (!r || r->dead || !r->factory[0] || (factory && strcmp(r->factory, factory))) continue;
    if (n-- == 0) return r->id;
  }
  return 0;
}

HK__DEF hk_err hk_spec_check(hk_registry *reg, const char *spec) {
  hk__parser ps;
  hk_err err;
  if (!reg) return HK_ERR_INVALID;
  if (!spec) return hk__fail_with(reg->hk__s, HK_ERR_INVALID, "the spec is NULL");
  err = hk__parse(&ps, reg->hk__s, spec);
  hk__parser_free(&ps);
  return err;
}

HK__DEF hk_err hk_spec_apply(hk_registry *reg, const char *spec) {
  hk__parser ps;
  hk__state *s;
  hk_handle first;
  hk_err err;
  int i;
  if (!reg) return HK_ERR_INVALID;
  s = reg->hk__s;
  if (!spec) return hk__fail_with(s, HK_ERR_INVALID, "the spec is NULL");
  if ((err = hk__parse(&ps, s, spec)) != HK_OK) { hk__parser_free(&ps); return err; }
  first = s->next_id;
  for (i = 0; i < ps.n_items && !err; i++) {
    hk__item *it = &ps.items[i];
    s->err[0] = 0;
    s->making = it->args.factory;
    err = it->make(reg, &it->args, it->user);
    s->making = NULL;
    if (err != HK_OK) {
      char why[512];
      size_t line, col;
      snprintf(why, sizeof why, "%s", s->err);
      hk__where(spec, it->name.pos, &line, &col);
      hk__fail_with(s, err, "spec item '%s' at %llu:%llu failed: %s", it->args.factory, (unsigned long long)line,
                    (unsigned long long)col, why[0] ? why : hk_err_name(err));
    }
  }
  if (err) {  /* all or nothing: remove what the earlier factories registered */
    hk_handle h;
    for (h = first; h < s->next_id; h++) if (hk__find_reg(s, h)) hk_off(reg, h);
  } else if (ps.n_items > 0) { /* remembered for hk_spec_applied; out of memory only loses the record, not the spec */
    size_t n = strlen(spec) + 1;
    char **grown = (char **)HOOKS_REALLOC(s->specs, (size_t)(s->n_specs + 1) * sizeof *grown);
    char *copy = grown ? (char *)HOOKS_REALLOC(NULL, n) : NULL;
    if (grown) s->specs = grown;
    if (copy) { memcpy(copy, spec, n); s->specs[s->n_specs++] = copy; }
  }
  hk__parser_free(&ps);
  return err;
}
HK__DEF const char *hk_spec_applied(const hk_registry *reg, int i) {
  return reg && i >= 0 && i < reg->hk__s->n_specs ? reg->hk__s->specs[i] : NULL;
}

static int hk__arg(const hk_args *a, const char *key) {
  int k;
  if (!a || !key) return -1;
  for (k = 0; k < a->n; k++) if (!strcmp(a->v[k].key, key)) return k;
  return -1;
}
HK__DEF int64_t hk_arg_int(const hk_args *a, const char *key) { int k = hk__arg(a, key); return k < 0 ? 0 : a->v[k].i; }
HK__DEF double hk_arg_double(const hk_args *a, const char *key) { int k = hk__arg(a, key); return k < 0 ? 0.0 : a->v[k].d; }
HK__DEF int hk_arg_bool(const hk_args *a, const char *key) { int k = hk__arg(a, key); return k < 0 ? 0 : (int)a->v[k].i; }
HK__DEF const char *hk_arg_str(const hk_args *a, const char *key) { int k = hk__arg(a, key); return k < 0 ? NULL : a->v[k].s; }
HK__DEF int hk_arg_given(const hk_args *a, const char *key) { int k = hk__arg(a, key); return k < 0 ? 0 : a->v[k].given; }

#endif /* HOOKS__IMPLEMENTED */
#endif /* HOOKS_IMPLEMENTATION */

/*
------------------------------------------------------------------------------
This software is available under 2 licenses -- choose whichever you prefer.
------------------------------------------------------------------------------
ALTERNATIVE A - MIT License
Copyright (c) 2026 the hooks.h authors
Permission is hereby granted, free of charge, to any person obtaining a copy of
this software and associated documentation files (the "Software"), to deal in
the Software without restriction, including without limitation the rights to
use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies
of the Software, and to permit persons to whom the Software is furnished to do
so, subject to the following conditions:
The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.
THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
------------------------------------------------------------------------------
ALTERNATIVE B - Public Domain (www.unlicense.org)
This is free and unencumbered software released into the public domain.
Anyone is free to copy, modify, publish, use, compile, sell, or distribute this
software, either in source code form or as a compiled binary, for any purpose,
commercial or non-commercial, and by any means.
In jurisdictions that recognize copyright laws, the author or authors of this
software dedicate any and all copyright interest in the software to the public
domain. We make this dedication in perpetuity for the benefit of the public at
large and to the detriment of our heirs and successors. We intend this
dedication to be an overt act of relinquishment in perpetuity of all present
and future rights to this software under copyright law.
THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN
ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION
WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
------------------------------------------------------------------------------
*/
