/* train.h - v0.2.0 - 2026-11-22 - a minimal, complete trainer built on hooks.h - MIT or public domain

   The batteries for a training loop in C, and a small trainer you can read top to bottom. Built only
   on hooks.h's public API; every section but the run layer can be left out with a define.

   CONTENTS (declarations in this order; the implementation follows the same order)
     BASICS                    errors, random numbers, your model and data, optimizers, schedules
     PER-STEP MATH             AdamW, SGD, zero_grad, clipping, norms at memory speed   TRAIN_NO_MATH
     THE RUN LAYER             what any loop gives the batteries: run directory, log records,
                               checkpoints in your own format, stop signals (tr_run_*)
     STANDARD CALLBACKS        Lightning's: early_stopping, model_checkpoint, timer, lr_monitor,
                               gradient_monitor, nan_guard, ema, lr_finder, model_summary,
                               accumulation_scheduler, on_exception_checkpoint,
                               spike_detection, profiler, throughput_monitor;
                               constructors and spec factories                      TRAIN_NO_CALLBACKS
     LOGGERS AND PROGRESS BAR  csv, jsonl, tensorboard, plot, progress_bar           TRAIN_NO_LOGGERS
     SWEEPS                    tr_sweep: Hydra's multirun (overrides key=v1,v2 of the program's fields
                               and spec parameters, a job per combination, a summary) TRAIN_NO_SWEEP
     THE TRAINER               tr_fit / validate / test / predict, a sanity check, limits,
                               accumulation, clipping, checksummed checkpoints with exact resume,
                               the failure path (hook failure, NaN loss, Ctrl-C)     TRAIN_NO_TRAINER
     MPI STRATEGY              data parallelism across processes                    TRAIN_MPI
     CUDA                      models on the GPU with kernels/train_cuda.cuh        TRAIN_CUDA
   Each callback and logger can be left out too (TRAIN_NO_EARLY_STOPPING, TRAIN_NO_TENSORBOARD, ...), or
   all but those a program names (TRAIN_ONLY_SPECIFIC_BATTERIES with TRAIN_ENABLE_<NAME>): see "which
   batteries are compiled". A loop of your own (the train_gpt2.c kind) uses the run layer with the
   callbacks and loggers it wants, and can leave out the trainer and the math: examples/own_loop.c. In the trainer, hooks fire
   in PyTorch Lightning 2.6's order, except where the list "WHERE train.h DIFFERS FROM LIGHTNING"
   below says otherwise.

   USAGE
     In exactly one C or C++ file, with hooks.h's implementation:
         #define HOOKS_IMPLEMENTATION
         #define TRAIN_IMPLEMENTATION
         #include "train.h"          (includes hooks.h)
     Everywhere else just #include "train.h". Link with -lm, and -pthread (asynchronous saves use one
     writer thread; glibc 2.34 and later need nothing extra; TRAIN_NO_THREADS leaves it out).
     TRAIN_IMPLEMENTATION without HOOKS_IMPLEMENTATION is an #error that says so (else: hundreds of
     undefined hk_* symbols at link time); a program whose hooks.h implementation is in another file
     defines TRAIN_HOOKS_ELSEWHERE.

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

     examples/first_trainer.c is that in full (validation, early stopping, the best checkpoints, csv and
     TensorBoard logs, the progress bar, resume when run again); docs/trainer.md, docs/callbacks.md and
     docs/logging.md are the long versions of what the doc blocks below say.

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
   saves at every path queued with hk_request_checkpoint (each followed by on_checkpoint_saved), and
   at tr_config.save_to when plain hk_request asked for it (a failed save fails the run), HK_REQUEST_LOG
   writes the counters and every metric to tr_desc.log and, in a fit, sends a training log record to
   the loggers (on_log) at once. Checkpoint and log requests made in
   on_train_end are honoured right after it. A tr_fit, tr_validate, tr_test, tr_predict or tr_load called from a
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
     - The plateau schedule checks its metric before on_train_epoch_end (after the epoch's validation);
       Lightning steps it after, which a checkpoint written at the epoch's end misses on resume
       (test_schedule_resume_exact).

   COMPILE-TIME OPTIONS (define before including)
     TRAIN_IMPLEMENTATION   emit the implementation in this translation unit (with HOOKS_IMPLEMENTATION)
     TRAIN_HOOKS_ELSEWHERE  with TRAIN_IMPLEMENTATION: hooks.h's implementation is in another file
     TRAIN_STATIC           make every function static
     TRAIN_API              declaration prefix for public functions (default: extern)
     TRAIN_ASSERT(c)        assertion used by the implementation (default: assert)
     TRAIN_NO_TRAINER       leave out the trainer (tr_trainer, tr_fit, tr_save/tr_load, lr_finder): a
                            loop of your own with the run layer, callbacks and loggers
     TRAIN_NO_MATH          leave out the per-step math (implies TRAIN_NO_TRAINER)
     TRAIN_NO_CALLBACKS     leave out the standard callbacks
     TRAIN_NO_LOGGERS       leave out the loggers and the progress bar (log records and tr_log_emit
                            stay: they are the run layer's)
     TRAIN_NO_SWEEP         leave out the sweep runner (tr_sweep)
     TRAIN_NO_SIMD          plain C loops only in the per-step math (no x86 intrinsics, no AVX2 copies)
     TRAIN_NO_AVX           x86: AdamW's SSE kernel even where the CPU has AVX
     TRAIN_NO_THREADS       no POSIX threads: asynchronous saves (async_save) are written in the caller
     TRAIN_MPI              data parallelism across processes on MPI (in the implementation's TU; build
                            with mpicc, run with mpirun): section "MPI STRATEGY" at the end
     TRAIN_CUDA             with TRAIN_IMPLEMENTATION, in a file built by nvcc -fmad=false: models with
                            tr_model.on_device train on the GPU with kernels/train_cuda.cuh (section CUDA)
     TRAIN_CUDA_NO_KERNELS  with TRAIN_CUDA: the kernels' implementation is not compiled here (another
                            file provides the trc_* functions; the tests run train.h's CUDA path this way
                            on the CPU)
     (hooks.h's options apply to hooks.h, which this header includes)

   POSIX: the implementation uses open/write/fsync/rename for atomic checkpoints; elsewhere it falls
   back to stdio (no fsync). Ctrl-C is hooks.h's stop-signal helper (ISO C signal()).

   CHANGELOG
     next   model_checkpoint claims each file name on disk when it picks it (an exclusive create, replaced by
            the save's rename): two processes with one dirpath never pick one name (each could take the
            other's epoch=0.ckpt or last.ckpt and later evict it)
     next   the plateau schedule reads its metric through hk_metric_get only (a lazy metric read outside a
            dispatch is computed then: hooks.h), no special case for train/loss and lr
     next   tr_print prints on global rank 0 only (Lightning's print; the run's rank, else the launcher's);
            tr_print_all prints on every rank
     next   asynchronous saves: the writer thread blocks every signal (Ctrl-C/SIGTERM during a background
            write reach the loop's thread; on FUSE/NFS one taken by the writer interrupted its fsync and
            failed the save), and an fsync interrupted by a signal (EINTR) is retried
     next   train.h's clock is hooks.h's hk_clock on POSIX (ns under strict -std=c99 too: the timer and the
            bar's rate had whole seconds there)
     next   issue 22, what a user sees: the progress bar's whole line is cut to the terminal's width (never
            wraps; a narrowed terminal's rewrapped rows erased), in a pipe one line per epoch with its
            validation's metrics and the sanity check once, under mpirun rank 0 draws as mpirun's own
            output decides; tr_print (now in the run layer) and callbacks' lines print above a live
            bar; one bar per registry; early_stopping says why it stopped by default (log_stop), a
            resume says where it restarted (tr_config / tr_run_desc .no_resume_message);
            TRAIN_IMPLEMENTATION without HOOKS_IMPLEMENTATION is an #error (TRAIN_HOOKS_ELSEWHERE)
     next   schedules linear (to zero), exponential, wsd (warmup-stable-decay), onecycle and plateau
            (ReduceLROnPlateau) beside constant, step and cosine, each checked against PyTorch's schedulers;
            their parameters one X-macro list (TR_SCHED_PARAMS), spec strings (tr_sched_parse), checks
            (tr_sched_check), tr_sched_lr, tr_plateau_step, tr_sched_kind_name; tr_lr_scale / tr_lr_set
            for hooks (a multiplier on the schedule); the schedule's state (tr_run.lr_state) in
            checkpoints: tr_save's optional LRST section, a block of tr_run_save's
     next   sweeps (section SWEEPS, TRAIN_NO_SWEEP): tr_sweep runs a job per combination of command-line
            overrides (program fields and spec parameters, Hydra's order), each in version_<job> of the
            sweep's version_N with its hyperparameters, fires hooks.h's on_multirun_start/end,
            on_job_start/end (on_run_start/end for one job), writes summary.csv and summary.svg;
            tr_sweep_current, tr_sweep_metric; tr_plot_csv plots against a "job" column too
     next   profiler (every hook, event and loop phase timed with hooks.h's hk_profile; a table at teardown,
            profiler metrics in training records, a slow-hook warning) and throughput_monitor (samples/s,
            tokens/s, step-time percentiles, MFU; the job's rates under MPI without a collective):
            constructors, factories, getters; tr_profiler_print, tr_phase_name
     next   issue 22: model_checkpoint's default dirpath is the run directory's checkpoints/ (version_N/
            checkpoints) when a logger made one, ./checkpoints otherwise; tr_run_hparam, tr_run_hparam_num,
            tr_run_hparam_bool: your hyperparameters in every logger; tensorboard writes the hparams
            plugin's session start (typed values) and the fit's end (success, failure) for the HParams
            tab; TRAIN_MPI: rank 0 warns once when the ranks on a host outnumber its cores
     next   checkpoints off the step's critical path: tr_desc.async_save, tr_run_desc.async_save and
            model_checkpoint's async_save copy the state into a reused staging buffer and let a writer
            thread write, fsync and rename it (same bytes, same guarantees); on_checkpoint_saved once on
            disk; errors at the next safe point or at the run's end; one save in flight (the next waits);
            TRAIN_NO_THREADS; make bench-async
     next   on_exception_checkpoint (a failed or interrupted fit saves its state after the last optimizer
            step; resuming gives the bits of a run that never failed) and spike_detection (a loss spike or
            a non-finite gradient rolls the training state back to one in-memory snapshot taken every n
            steps and skips the batches since, instead of failing); tr_region, tr_run_desc.state/n_state
            (the training state of a loop of your own, for the snapshot)
     next   each callback's and logger's parameters written once: TR_<NAME>_PARAMS X-macro lists generate
            the desc structs (same fields, same order), the spec tables and the factories' copies; a spec
            sets only the fields it gives; timer's verbose defaults to yes in C as in a spec (TR_NO:
            quiet); progress_bar's constructor refuses width > 100000 as the spec did; tr_clock_fn and
            tr_histogram_fn name the callbacks' function-pointer types
     next   files are safe (issue 18): one atomic writer (exclusive temporary, no link following, fsync,
            rename; never replaces anything but a regular file) for checkpoints, the run layer's
            checkpoints, loggers, plot and lr_finder's curve; version_N claimed by mkdir (parallel runs
            never share one); records of any size (tr_log_record.metrics grows; tr_log_record_free;
            TR_LOG_MAX_METRICS is gone, TR_LOG_NAME_MAX only limits histogram tags), UTF-8 names
            (others refused and reported once); a full disk leaves whole records; csv rewrites paid
            for (a new column costs linear work); no empty metrics.csv; verbose lines rank-zero-only
            where Lightning's are; early_stopping log_rank_zero_only; lr_monitor(logging_interval=epoch)
            logs a record per epoch at its start
     next   run layer in a loop of your own: a second tr_run_batch_end after a validation honours what it
            asked for at that step; the loop's hparams keep their values in hparams.yaml; loggers follow
            tr_run_desc.version; gradient_monitor's log_frequency defaults to the run's log_every_n_steps;
            the bar's final line in a pipe; warnings at tr_run_start for checks or saves at
            on_train_epoch_end in a loop without epochs, and model_checkpoint's for ctx.stage unset;
            tr_run_load reads a checkpoint of a registry without stateful callbacks (it refused it);
            the bar's rate and ETA after a resume count the steps run since
     next   TRAIN_MPI: ranks that differ (model, run length, the function called, a resume) fail every rank
            with the values per rank instead of hanging; out-of-step ranks are found at the next vote;
            tr_desc.mpi_timeout bounds the wait at tr_init and at each run's start
     next   every stateful callback range-checks its loaded state and says why it refuses one (hk_reject);
            accumulation_scheduler's scheduling grammar is strict ("{0: 2" and "{0:2 1:3}" are refused)
     next   issue 18: model_checkpoint removes only files it writes (its dirpath, its names, regular
            files), whatever a loaded state lists; never claims a name another hook queued; save_last=link
            writes a file of its own when the step saved no top-k file; filename last with save_last and
            filename "" refused; step/time saves wait for a validation at the same step; a missing metric
            warns until the fit's first validation; kth with save_top_k -1, no best_k_models without a
            monitor, one entry per file (Lightning); setup checks at on_fit_start (directory, val/
            monitor without validation data); nan_guard(action=stop) skips the bad step; a successful
            run clears the message of a refused call
     next   the run layer (tr_run_*: tr_run_setup, _start, _batch_end, _epoch_end, _log, _finish, _save,
            _load, _dir, tr_print): every battery works in a loop of your own; constructors of callbacks
            and loggers take an hk_registry * (was tr_trainer *), their errors in hk_last_error(reg);
            tr_stop_allowed takes the context; records carry only metrics set since the last record;
            loggers flush when the registry is destroyed; spec-made loggers use the run's directory;
            callbacks reading host tensors refuse a device model when the fit starts (was: when made)
     next   Ctrl-C/SIGTERM through hooks.h's hk_stop_signals_install (same behaviour; a signal the
            process ignores stays ignored); clean under gcc -Wc++-compat
     next   loggers and progress bar: on_log records (tr_config.log_every_n_steps), csv, jsonl,
            tensorboard, plot, progress_bar (constructors and factories), tr_plot_csv, tr_crc32c,
            tr_bar_format, tr_log_* (tr_log_due, tr_log_histogram_bins); HK_REQUEST_LOG also sends a training record;
            tr_trainer.train_batches/eval_batches; on a terminal the bar redraws at most every
            refresh_seconds (epoch ends too; the last state at the end of training); faster number text
            and CRC-32C (bench-log)
     next   TRAIN_MPI: data-parallel training on MPI (sharded data, gradients summed in rank order at one
            point, signals/requests/failures agreed by every rank, rank-0 checkpoints), TR_ERR_COMM;
            SIGTERM is handled like Ctrl-C; model_checkpoint touches files on rank 0 only;
            per-step math in float32 in PyTorch's order (the sections "PER-STEP MATH"): tr_adamw_update,
            tr_sgd_update, tr_zero, tr_scale, tr_sumsq, tr_clamp_sumsq, tr_count_nonfinite, the
            per-element tr_adamw_elem / tr_sgd_elem (host and device), tr_desc.threads (OpenMP),
            deterministic reductions (the same bits for any thread count); SIMD at default flags
            (TRAIN_NO_SIMD, TRAIN_NO_AVX); clipping by norm folded into the update;
            CUDA (TRAIN_CUDA, the section "CUDA"): on_device models train on the GPU with
            kernels/train_cuda.cuh, no host wait in a step unless a hook reads a device value,
            tr_model.device_loss, TR_ERR_DEVICE, tr_cuda_sync_count, tr_grad_histogram (CPU and GPU);
            standard callbacks early_stopping, model_checkpoint, timer (constructors, factories through
            TR_FACTORIES/tr_add_factories, state in checkpoints); HK_REQUEST_CHECKPOINT honours
            hk_request_checkpoint's paths, and requests made in on_train_end; tr_stop_allowed;
            standard callbacks lr_monitor, gradient_monitor, nan_guard, ema, lr_finder, model_summary,
            accumulation_scheduler; tr_set_accumulation
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

/* Sections left out (COMPILE-TIME OPTIONS): the trainer needs the per-step math; MPI and CUDA are the
   trainer's strategies. */
#if defined(TRAIN_NO_MATH) && !defined(TRAIN_NO_TRAINER)
#  define TRAIN_NO_TRAINER
#endif
#if defined(TRAIN_NO_TRAINER) && (defined(TRAIN_MPI) || defined(TRAIN_CUDA))
#  error "train.h: TRAIN_MPI and TRAIN_CUDA run the trainer: do not define TRAIN_NO_TRAINER or TRAIN_NO_MATH with them"
#endif

#include "hooks.h"
#include <math.h> /* sqrtf in the per-element optimizer functions */
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
  X(TR_ERR_INTERRUPTED, "interrupted",          "Ctrl-C (SIGINT) or SIGTERM during tr_fit") \
  X(TR_ERR_COMM,        "communication error",  "an MPI call failed (TRAIN_MPI)") \
  X(TR_ERR_DEVICE,      "device error",         "a CUDA call failed, or model.on_device without TRAIN_CUDA (section CUDA)")
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
  /* On the GPU (section "CUDA (TRAIN_CUDA)"): 1 when params and grads are device memory. The trainer
     then keeps the optimizer state on the device and runs kernels/train_cuda.cuh for every step. */
  int on_device;
  /* With on_device: a device float where forward leaves the batch's mean loss (trc_loss_mean makes
     it from per-sample losses); forward's *loss is then ignored and the loss stays on the device
     until a hook reads it. NULL: forward stores *loss on the host, as on the CPU. */
  float *device_loss;
  /* With on_device: the CUDA stream (a cudaStream_t) train.h queues its kernels and copies on, in
     order with your forward and backward if they use it too; NULL = the default stream. A stream of
     your own is what CUDA graph capture needs (the legacy default stream cannot be captured). */
  void *stream;
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
   The arithmetic is float32 in PyTorch's order (the section "PER-STEP MATH" below). */
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
   lr(t) = optim.lr * factor(t) * scale, where t counts scheduler steps taken: optimizer steps (default)
   or finished epochs (per_epoch = 1), and scale is what hooks set (tr_lr_scale, below; 1 by default).
   Every kind starts with an optional linear warmup:
     t < warmup:  factor = (t+1) / warmup        (the first step already trains: 1/warmup, not 0)
   then, with u = t - warmup, T = total - warmup, m = min_factor and each formula PyTorch's:
     TR_SCHED_CONSTANT     1
     TR_SCHED_STEP         gamma ^ floor(u / step_size)                                      (StepLR)
     TR_SCHED_COSINE       m + (1-m) * 0.5 * (1 + cos(pi * min(u, T) / T))        (CosineAnnealingLR)
     TR_SCHED_LINEAR       m + (1-m) * max(0, (T - u) / T)        (Hugging Face's default: linear to 0)
     TR_SCHED_EXPONENTIAL  gamma ^ u                                                  (ExponentialLR)
     TR_SCHED_WSD          warmup, then 1 (stable) until total - decay, then over the decay steps,
                           with p = (u - stable) / decay: m + (1-m) * d(p), d = 1-p (linear),
                           0.5 * (1 + cos(pi p)) (cos) or 1 - sqrt(p) (1-sqrt); m after total
                           (Hugging Face's get_wsd_schedule; stable = T - decay)
     TR_SCHED_ONECYCLE     PyTorch's OneCycleLR over total steps (t counts from 0, no warmup of its
                           own: pct_start is its warmup): from max_lr/div_factor up to max_lr at step
                           pct_start*total - 1, then down to max_lr/(div_factor*final_div_factor) at
                           total - 1 (three_phase: down to max_lr/div_factor at 2*pct_start*total - 2
                           first), each phase cos or linear (anneal). Steps past total keep the last
                           value (PyTorch raises). The momentum is not cycled.
     TR_SCHED_PLATEAU      ReduceLROnPlateau: after warmup the lr is the plateau's own (it starts at
                           optim.lr), checked once per training epoch with the metric `monitor`
                           (tr_plateau_step, PyTorch's rule exactly: threshold rel/abs, patience,
                           cooldown, min_lr, eps; with TRAIN_MPI on the ranks' mean of
                           the metric, so every rank keeps the same lr). The trainer checks right after each epoch's
                           validation, before on_train_epoch_end (Lightning: after it), so a checkpoint
                           written at the epoch's end holds the state after that check; a monitored
                           metric that is not set then fails the run (Lightning's strict default).
   The schedule's state (the plateau's and the scale) is saved in checkpoints (tr_save, tr_run_save);
   the others depend on t alone, so a resume is exact. Set total explicitly when one training is split
   over fits with different max_steps (resume), so that the curve stays put.
   The current value is in ctx->lr before every training batch; tr_lr_at / tr_sched_lr compute it
   anywhere (a loop of your own calls them). A spec string makes one: tr_sched_parse(&s, "onecycle(
   max_lr=0.01, pct_start=0.25)", ...), the kind as the name and the parameters below as keys. */
#define TR_SCHED_KINDS(X) /* X(enum, spec name) */ \
  X(TR_SCHED_CONSTANT, "constant") X(TR_SCHED_STEP, "step") X(TR_SCHED_COSINE, "cosine") \
  X(TR_SCHED_LINEAR, "linear") X(TR_SCHED_PLATEAU, "plateau") X(TR_SCHED_WSD, "wsd") \
  X(TR_SCHED_ONECYCLE, "onecycle") X(TR_SCHED_EXPONENTIAL, "exponential")
typedef enum tr_sched_kind {
#define TR__X(sym, name) sym,
  TR_SCHED_KINDS(TR__X)
#undef TR__X
  TR_SCHED_KIND_COUNT
} tr_sched_kind;
TRAIN_API const char *tr_sched_kind_name(tr_sched_kind k); /* "cosine", ...; "?" when out of range */

/* The shape of onecycle's phases and of wsd's decay. */
typedef enum tr_anneal { TR_ANNEAL_COS = 0, TR_ANNEAL_LINEAR, TR_ANNEAL_SQRT } tr_anneal;
#define TR_SCHED_NAME_MAX 64 /* the monitored metric's name, with its NUL */
/* A double field whose 0 means a default takes TR_ZERO_F (a negative zero) for an explicit 0. */
#define TR_ZERO_F (-0.0)

/* The parameters, written once: X(kind, C type, name, spec default, choices, kinds, doc). kind is
   INT, INT_ZERO, DOUBLE, BOOL or CHOICE as for the callbacks' lists (TR__FIELD), NAME for a char
   array of TR_SCHED_NAME_MAX, C_ONLY for no spec key; kinds lists the schedules the key belongs to in
   a spec (' *' all; a '!' after a name: required there). The spec default is also what 0 means. */
#define TR_SCHED_PARAMS(X) \
  X(C_ONLY,   tr_sched_kind, kind,          "",      NULL, "",  "the schedule; 0 = constant (a spec names it)") \
  X(BOOL,     int,       per_epoch,         "false", NULL, " *", "0: t counts optimizer steps; 1: finished epochs") \
  X(INT,      int64_t,   warmup,            "0",     NULL, " *", "scheduler steps of linear warmup; 0 = none") \
  X(INT,      int64_t,   step_size,         NULL,    NULL, " step!", "step: decay every step_size scheduler steps (required)") \
  X(DOUBLE,   double,    gamma,             "0.1",   NULL, " step exponential!", \
    "step: the decay factor (0 = 0.1); exponential: the factor per step (required), > 0") \
  X(INT,      int64_t,   total,             "0",     NULL, " cosine linear wsd onecycle", \
    "scheduler steps of the whole curve; 0 = the fit's max_steps (max_epochs when per_epoch)") \
  X(DOUBLE,   double,    min_factor,        "0",     NULL, " cosine linear wsd", "the final lr as a fraction of optim.lr, in [0, 1]") \
  X(NAME,     char,      monitor,           "val/loss", NULL, " plateau", "plateau: the metric it watches (\"\" = val/loss)") \
  X(CHOICE,   int,       mode,              "min",   "min|max", " plateau", "plateau: min (0, TR_MODE_MIN) or max: which way is better") \
  X(DOUBLE,   double,    factor,            "0.1",   NULL, " plateau", "plateau: new lr = lr * factor, in (0, 1)") \
  X(INT_ZERO, int,       patience,          "10",    NULL, " plateau", "plateau: checks without improvement before a reduction") \
  X(DOUBLE,   double,    threshold,         "1e-4",  NULL, " plateau", "plateau: how much better counts (TR_ZERO_F: any), >= 0") \
  X(CHOICE,   int,       threshold_mode,    "rel",   "rel|abs", " plateau", "plateau: rel: best * (1 -/+ threshold); abs: best -/+ threshold") \
  X(INT,      int,       cooldown,          "0",     NULL, " plateau", "plateau: checks after a reduction that count no bad checks") \
  X(DOUBLE,   double,    min_lr,            "0",     NULL, " plateau", "plateau: the lr never goes below it") \
  X(DOUBLE,   double,    eps,               "1e-8",  NULL, " plateau", "plateau: a reduction smaller than eps is not made (TR_ZERO_F: 0)") \
  X(DOUBLE,   double,    max_lr,            "0",     NULL, " onecycle", "onecycle: the peak lr; 0 = optim.lr") \
  X(DOUBLE,   double,    pct_start,         "0.3",   NULL, " onecycle", "onecycle: the share of total spent going up, in (0, 1)") \
  X(CHOICE,   tr_anneal, anneal,            "cos",   "cos|linear|1-sqrt", " onecycle wsd", \
    "onecycle: its phases' shape (cos or linear); wsd: the decay's (cos, linear or 1-sqrt)") \
  X(DOUBLE,   double,    div_factor,        "25",    NULL, " onecycle", "onecycle: the first lr is max_lr / div_factor") \
  X(DOUBLE,   double,    final_div_factor,  "1e4",   NULL, " onecycle", "onecycle: the last lr is the first / final_div_factor") \
  X(BOOL,     int,       three_phase,       "false", NULL, " onecycle", "onecycle: down to the first lr, then the last (pct_start < 0.5)") \
  X(INT,      int64_t,   decay,             NULL,    NULL, " wsd!", "wsd: scheduler steps of the final decay (required), <= total - warmup")
#define TR__SCHED_FIELD(kind, type, name, def, choices, kinds, doc) TR__SCHED_FIELD_##kind(type, name)
#define TR__SCHED_FIELD_C_ONLY(type, name)   type name;
#define TR__SCHED_FIELD_BOOL(type, name)     type name;
#define TR__SCHED_FIELD_INT(type, name)      type name;
#define TR__SCHED_FIELD_INT_ZERO(type, name) type name;
#define TR__SCHED_FIELD_DOUBLE(type, name)   type name;
#define TR__SCHED_FIELD_CHOICE(type, name)   type name;
#define TR__SCHED_FIELD_NAME(type, name)     type name[TR_SCHED_NAME_MAX];
typedef struct tr_sched { TR_SCHED_PARAMS(TR__SCHED_FIELD) } tr_sched;

/* What a schedule keeps beyond t: the plateau's progress and the hooks' scale. Zero = the start. */
typedef struct tr_sched_state {
  double scale;        /* tr_lr_scale's multiplier on the scheduled lr; 0 = 1 */
  double plateau_lr;   /* plateau: its lr now; 0 = not reduced yet (optim.lr) */
  double best;         /* plateau: the best value so far (valid once checks > 0) */
  int64_t num_bad;     /* plateau: checks since the last improvement (PyTorch's num_bad_epochs) */
  int64_t cooldown;    /* plateau: checks of cooldown left */
  int64_t checks;      /* plateau: checks made */
} tr_sched_state;

/* lr after t scheduler steps of the stateless part (total must be resolved, i.e. > warmup, where the
   kind uses it; a plateau gives its warmup, then base_lr). */
TRAIN_API double tr_lr_at(const tr_sched *s, double base_lr, int64_t t);
/* The whole lr: tr_lr_at, the plateau's lr in place of base_lr after warmup, times the scale. */
TRAIN_API double tr_sched_lr(const tr_sched *s, const tr_sched_state *st, double base_lr, int64_t t);
/* One plateau check with the metric's value now (PyTorch's ReduceLROnPlateau.step): returns 1 when it
   reduced the lr. A NaN never improves. Call it once per epoch in a loop of your own. */
TRAIN_API int tr_plateau_step(const tr_sched *s, tr_sched_state *st, double base_lr, double metric);
/* Fill in the defaults (the zeros) and check s; total_resolved is the total the fit will use (0 when
   not known yet: the checks that need it wait). TR_ERR_INVALID with why naming the field and what
   would be right. */
TRAIN_API tr_err tr_sched_check(tr_sched *s, int64_t total_resolved, char *why, size_t cap);
/* Parse a spec, e.g. "cosine(warmup=100, min_factor=0.1)" or "plateau(monitor=val/acc, mode=max)",
   into *s (zeroed first), then tr_sched_check it; TR_ERR_INVALID with why naming the bad part and
   listing what is valid. Allocates while it parses (setup, not the step loop). */
TRAIN_API tr_err tr_sched_parse(tr_sched *s, const char *spec, char *why, size_t cap);

#ifndef TRAIN_NO_MATH
/* =================================================================================================
   PER-STEP MATH
   Every pass the trainer makes over the parameters and gradients in a step, public so that a
   hand-written loop can use them too: the optimizer updates, zero_grad, scaling, clipping, the
   gradient norm and the NaN/Inf scan.

   Same answers: float32 arithmetic in the order of PyTorch's single-tensor torch.optim.AdamW and
   torch.optim.SGD (the per-step scalars are computed in double on the host, as Python does, and
   rounded to float once). Per element, with the tr_*_coef fields:
     AdamW  p = p * decay                          param.mul_(1 - lr*wd)          (skipped when wd = 0)
            m = m + w1 * (g - m)                   exp_avg.lerp_(g, 1 - beta1)    (g - (g - m) * (1 - w1)
                                                                                   when w1 >= 0.5, as lerp)
            v = v * beta2 + (w2 * g) * g           exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1 - beta2)
            d = sqrt(v) / bc2_sqrt + eps           (exp_avg_sq.sqrt() / sqrt(1 - beta2^t)).add_(eps)
            p = p + (neg_step * m) / d             param.addcdiv_(m, d, value=-lr / (1 - beta1^t))
     SGD    d = g + wd * p                         (when wd != 0)
            b = d on the first step, else b = b * momentum + damp1 * d        (when momentum != 0)
            d = nesterov ? d + momentum * b : b
            p = p + neg_lr * d
   No product is fused with an addition (no FMA): tests/ref_f32.c writes the same formulas as plain
   scalar C compiled with -ffp-contract=off, and the test compares bit for bit. (PyTorch's own
   vectorised CPU kernels fuse a few of these, lerp and add-with-alpha, so torch itself can differ
   from this in the last bit.) Build with contraction off (ISO modes such as -std=c99 are; GNU modes
   with an FMA target are not) to keep the bits; -ffast-math builds are faster and only close.

   Threads: each pass takes a thread count (tr_desc.threads for the trainer). With OpenMP (-fopenmp)
   the work is split over that many threads, in fixed chunks of HK_NORM_CHUNK elements; without it
   the passes run on the calling thread. Reductions are deterministic: every chunk is summed in
   hooks.h's hk_sumsq order and the chunk sums are added in chunk order, so the results are the same
   bits for any thread count, and equal to hooks.h's hk_grad_norm.

   Speed, with the default flags (-O2, nothing machine-specific; docs/numbers.md, make bench-math,
   against loops at the limit timed in the same run): on arrays far larger than the caches, AdamW,
   SGD, zero_grad and scale move their bytes at 0.9 or more of an in-place axpy's rate (a += s*b);
   the gradient norm and the NaN/Inf scan, which only read one array, at 0.75-0.9 of a loop that
   reads one array (itself about 0.6 of the axpy on the machine measured), clip by value at about
   0.7 of the axpy (it reads for the norm, then clamps from cache). The loops are shaped so that gcc
   vectorises them at -O2, AdamW has SSE and AVX kernels (chosen at run time), the other loops get
   AVX2 copies on x86-64 with glibc (TRAIN_NO_SIMD / TRAIN_NO_AVX turn these off), clipping by norm
   is folded into the optimizer's pass when no on_gradient_clip hook would look at the clipped
   gradients, and zero_grad of a buffer much larger than the caches is one memset per thread. No
   pass allocates.

   The per-element functions (tr_adamw_elem, tr_sgd_elem) are the single definition of the formulas:
   the CPU loops call them, and under nvcc (TR__HD = __host__ __device__) CUDA kernels can too. */
#if defined(__CUDACC__)
#  define TR__HD __host__ __device__
#else
#  define TR__HD
#endif

/* One AdamW step's scalars (tr_adamw_coefs), each rounded to float once. */
typedef struct tr_adamw_coef {
  float decay;      /* 1 - lr*wd */
  float w1;         /* 1 - beta1, the lerp weight of m */
  float w1_comp;    /* 1 - w1 in float: lerp's other form, used when w1 >= 0.5 */
  float beta2, w2;  /* beta2 and 1 - beta2 */
  float bc2_sqrt;   /* sqrt(1 - beta2^t) */
  float eps;
  float neg_step;   /* -lr / (1 - beta1^t) */
  float gscale;     /* the gradient is multiplied by this first (and stored back) unless it is 1:
                       clipping by norm folded into the update */
  int decays;       /* wd != 0 (PyTorch multiplies by 1 - lr*wd = 1 then, which changes nothing) */
  int lerp_small;   /* w1 < 0.5: lerp's first form */
} tr_adamw_coef;

/* One SGD step's scalars (tr_sgd_coefs). */
typedef struct tr_sgd_coef {
  float wd, momentum, damp1; /* damp1 = 1 - dampening */
  float neg_lr;
  float gscale;     /* as in tr_adamw_coef */
  int decays;       /* wd != 0 */
  int has_momentum; /* momentum != 0: the buffer is read and written */
  int first;        /* the momentum buffer is empty: it takes d as it is (PyTorch's clone) */
  int nesterov;
} tr_sgd_coef;

/* The coefficients of AdamW's step number `step` (1 for the first) at learning rate lr, and of
   an SGD step (first = the momentum buffer holds nothing yet). gscale starts at 1. Zero fields of o
   mean tr_optim's defaults (beta1 0.9, beta2 0.999, eps 1e-8); o->lr is not read (lr is). */
TRAIN_API tr_adamw_coef tr_adamw_coefs(const tr_optim *o, double lr, int64_t step);
TRAIN_API tr_sgd_coef   tr_sgd_coefs(const tr_optim *o, double lr, int first);

/* One element of AdamW (g already scaled); small is c.lerp_small. The int fields of c and small only
   choose between forms: a loop that fixes them (constants in its copy of c) has no branch left in
   its body. */
TR__HD static inline void tr_adamw_elem(float *p, float g, float *m, float *v, tr_adamw_coef c, int small) {
  float pi = c.decays ? *p * c.decay : *p;
  float mi = small ? *m + c.w1 * (g - *m) : g - (g - *m) * c.w1_comp; /* PyTorch's lerp */
  float vi = *v * c.beta2 + (c.w2 * g) * g;
  float d = sqrtf(vi) / c.bc2_sqrt + c.eps;
  *p = pi + (c.neg_step * mi) / d;
  *m = mi;
  *v = vi;
}

/* One element of SGD (g already scaled); buf is read and written only when c.has_momentum. */
TR__HD static inline void tr_sgd_elem(float *p, float g, float *buf, tr_sgd_coef c) {
  float d = c.decays ? g + c.wd * *p : g;
  if (c.has_momentum) {
    float b = c.first ? d : *buf * c.momentum + c.damp1 * d;
    *buf = b;
    d = c.nesterov ? d + c.momentum * b : b;
  }
  *p = *p + c.neg_lr * d;
}

/* The passes, over n elements with `threads` threads (0 or 1 = the calling thread only). g is
   written only when c->gscale != 1 (then it holds the scaled gradient, as after a separate clip). */
TRAIN_API void   tr_adamw_update(float *p, float *g, float *m, float *v, size_t n, const tr_adamw_coef *c, int threads);
TRAIN_API void   tr_sgd_update(float *p, float *g, float *buf, size_t n, const tr_sgd_coef *c, int threads);
TRAIN_API void   tr_zero(float *x, size_t n, int threads);                  /* x = 0 */
TRAIN_API void   tr_scale(float *x, size_t n, float k, int threads);        /* x = x * k */
/* hk_sumsq(x, n) (the same bits), computed with threads. */
TRAIN_API double tr_sumsq(const float *x, size_t n, int threads);
/* Clamp x into [lo, hi] and return hk_sumsq of x as it was before (one pass for value clipping and
   the norm before clipping). A NaN stays NaN. */
TRAIN_API double tr_clamp_sumsq(float *x, size_t n, float lo, float hi, int threads);
/* How many of x are NaN or infinite, tested on the bits (so -ffast-math builds still see them). */
TRAIN_API size_t tr_count_nonfinite(const float *x, size_t n, int threads);

#endif /* TRAIN_NO_MATH */

/* Int fields whose zero means a default take TR_ZERO for an explicit 0; tri-state flags take TR_YES /
   TR_NO, and 0 (TR_DEFAULT) means the default each field names. */
#define TR_ZERO (-2147483647 - 1)
enum { TR_NO = -1, TR_DEFAULT = 0, TR_YES = 1 };

/* =================================================================================================
   THE RUN LAYER
   What any loop gives the batteries (the standard callbacks, the loggers, the progress bar), in one
   place attached to the hook registry, and the few calls every loop repeats. train.h's trainer is
   one client of it; a hand-written loop (the train_gpt2.c kind) is another:

       hk_registry *reg = hk_create(NULL);
       tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO, .max_steps = 5000, .optimizer = "AdamW",
                                         .save_model = save, .load_model = load, .model_user = &model });
       hk_spec_apply(reg, "early_stopping(monitor=val/loss) model_checkpoint(monitor=val/loss) csv() progress_bar()");
       hk_ctx ctx = { .params = views, .grads = grad_views, .n_tensors = n };
       hk_flow flow = { 0 };
       tr_run_start(reg, &ctx, resume_path);              (setup .. on_train_start; resume; Ctrl-C handled)
       while (ctx.global_step < 5000) {
           ... the step, with HK_FIRE_FLOW(reg, event, &ctx, &flow) at its sites, ending with on_train_batch_end
           unsigned next = tr_run_batch_end(reg, &ctx, &flow);   (log record, requests, stop signals)
           if (ctx.global_step % 100 == 0 || (next & TR_RUN_VALIDATE)) {
               ... validation events, tr_run_log(reg, &ctx, "val") after on_validation_epoch_end ...
               next |= tr_run_batch_end(reg, &ctx, &flow);      (its checkpoint and stop: at this step)
           }
           hk_flow_clear(&flow, HK_FLOW_BATCH_SIGNALS);
           if (next & TR_RUN_STOP) break;
       }
       tr_run_finish(reg, &ctx, TR_OK);                   (on_train_end .. teardown, or on_exception; flushes)
       hk_destroy(reg);

   examples/own_loop.c is that loop in full. The run's settings (tr_run_desc) can be given before or
   after the batteries are made: every battery made on a registry reads them from the registry's run
   when it acts (a registry gets a run with the defaults when its first battery is made).

   What the run does for the batteries:
     - one version directory (save_dir/name/version_N) for every logger of the registry, claimed
       atomically (parallel runs never share one);
     - training log records from the context every log_every_n_steps-th optimizer step, validation
       and test records on request (tr_run_log), histograms (a gradient monitor's) riding with them;
     - the totals the progress bar shows, where monitoring callbacks check by default, the minimum
       steps/epochs a stop waits for, the optimizer's name for lr_monitor, the hyperparameters;
     - checkpoints in the loop's own format: save_model writes the model into a file the library
       made (a new temporary, fsynced, renamed over the path: a crash leaves the old file or the new
       one), then every stateful callback's state and the loop's counters are appended after the
       model's bytes with a checksum; tr_run_load calls load_model on the same file (from its start;
       the model's bytes come first, so a loader that reads only what it needs is unchanged) and
       restores the callbacks and counters exactly;
     - the learning-rate schedule's state (tr_run.lr_state: tr_lr_scale's scale, a plateau's progress)
       in those checkpoints; the loop computes its lr with tr_sched_lr(&sched, &run->lr_state, lr, t)
       and calls tr_plateau_step once per epoch for a plateau;
     - SIGINT/SIGTERM (hooks.h's stop signals): the first stops after the current step, a second one
       at the next safe point, both through on_exception;
     - warnings, once, when a callback waits for an event the loop never fires before the run ends,
       or sees ctx->stage unset.
   ================================================================================================= */

/* A piece of the loop's training state in memory (tr_run_desc.state): bytes a snapshot copies. */
typedef struct tr_region { void *data; size_t bytes; } tr_region;

/* Where monitoring callbacks check, and whether the loop has epochs: TR_YES / TR_NO, 0 = the default. */
typedef struct tr_run_desc {
  /* where the loggers write: save_dir/name/version_N (a logger's own desc fields win) */
  const char *save_dir;          /* NULL = "runs" */
  const char *name;              /* NULL = "lightning_logs"; "" = versions directly in save_dir */
  const char *version;           /* NULL = the next free version_N, claimed once for the registry */
  FILE *log;                     /* where callbacks talk (verbose lines, warnings); NULL = stderr */
  /* the loop's shape */
  int epochs;                    /* TR_NO: a step loop that never fires on_train_epoch_start/_end;
                                    default: the loop has epochs */
  int64_t train_batches;         /* training batches per epoch (the bar's total); 0 = unknown; a step
                                    loop's bar counts to max_steps */
  int64_t max_steps, max_epochs; /* the run's limits as the loop applies them; 0 = none known */
  int64_t min_steps, min_epochs; /* a stop (HK_STOP) waits until both are reached (tr_stop_allowed) */
  int64_t log_every_n_steps;     /* a training record every N-th optimizer step; 0 = 50; negative = none */
  int validation;                /* TR_NO: the loop never validates (a callback monitoring a val/ metric
                                    is refused at tr_run_start); default: it does */
  int check_on_train_epoch_end;  /* where monitoring callbacks check when their own flag is left at its
                                    default: TR_YES at on_train_epoch_end, TR_NO at on_validation_end;
                                    default: the epoch's end with epochs, the validation's end without */
  /* the optimizer: lr_monitor's metric names (lr-<optimizer>) and the hyperparameters */
  const char *optimizer;         /* "AdamW", "SGD", ...; NULL: lr_monitor publishes "lr" */
  double momentum, weight_decay; /* published by lr_monitor's log_momentum / log_weight_decay (with optimizer) */
  int lr_per_epoch;              /* 1: the learning rate changes per epoch (lr_monitor's default interval) */
  const char *hparams;           /* "key=value key=value ...": hyperparameters the loggers record */
  /* checkpoints in the loop's own format */
  int (*save_model)(void *user, FILE *f); /* write the model (and optimizer state) your way; 0 = ok */
  int (*load_model)(void *user, FILE *f); /* read it back from the start of f; 0 = ok */
  void *model_user;
  const char *save_to;           /* where a plain hk_request(ctx, HK_REQUEST_CHECKPOINT) saves */
  int async_save;                /* TR_YES: during a run, tr_run_save and requested checkpoints copy the
                                    state and write it in the background (see "asynchronous saves"
                                    at tr_run_save); default: written before the call returns */
  int no_signals;                /* 1: tr_run_start leaves SIGINT and SIGTERM alone */
  /* the training state in memory, for spike_detection's rollback: everything a step changes that a
     rollback must put back (parameters, optimizer state, the optimizer's step count if it is not
     ctx->global_step), as n_state regions, yours and valid while the run lives (not copied). The
     trainer gives its own. */
  const tr_region *state;
  int n_state;
  int no_resume_message;         /* 1: no "Restored all states from the checkpoint at ..." line when
                                    tr_run_start resumes (by default one, from rank 0, in the run's log) */
} tr_run_desc;

/* The run of a registry. Read any field; change only train_batches / eval_batches (a loop whose epochs
   differ in length) - the rest through tr_run_setup. */
typedef struct tr_run {
  tr_run_desc desc;              /* the settings, strings copied */
  int64_t train_batches;         /* batches of the training epoch in progress: the bar's total (0 = unknown) */
  int64_t eval_batches;          /* batches of the evaluation loop in progress (0 = unknown) */
  hk_stage running;              /* HK_STAGE_FIT from tr_run_start to tr_run_finish (the trainer: its runs) */
  const char *resume_from;       /* the checkpoint the run resumed from ("" when none): never deleted */
  int failed;                    /* the run has failed (tr_run_error says why); tr_run_finish ends it so */
  void *trainer;                 /* train.h's trainer while it drives the run, else NULL */
  struct tr__run_priv *tr__p;    /* private */
  tr_sched_state lr_state;       /* the schedule's state: tr_lr_scale's scale, the plateau's progress;
                                    saved by tr_save and tr_run_save, restored by their loads */
} tr_run;

/* What the loop should do next (tr_run_batch_end, tr_run_epoch_end). */
enum { TR_RUN_VALIDATE = 1, TR_RUN_STOP = 2 };

/* Set (or change) the run of reg: copies d (NULL = defaults) and registers the standard factories
   (tr_add_factories), so spec strings work at once. TR_ERR_INVALID with hk_last_error(reg) naming
   the field for a bad setting. Call it before tr_run_start. */
TRAIN_API tr_err tr_run_setup(hk_registry *reg, const tr_run_desc *d);
/* The run of reg, made with the defaults when it has none (NULL only out of memory). */
TRAIN_API tr_run *tr_run_get(hk_registry *reg);
/* The version directory every logger of reg writes into: the one the first logger opened (under its
   save_dir), else claimed (and made) now under tr_run_desc.save_dir; NULL and hk_last_error(reg) when
   it cannot be made. */
TRAIN_API const char *tr_run_dir(hk_registry *reg);

/* Your hyperparameters (model width, data set, seed ...), recorded by every logger beside the
   trainer's configuration and the spec strings: csv's hparams.yaml, jsonl's first line, tensorboard's
   text table and its HParams tab (the hparams plugin: the run's values, its status at the end, and
   every scalar logged as a metric to compare runs by), plot's <desc>. Typed: a string, a number, a
   boolean; a key given again takes the new value, and wins over the trainer's key of the same name
   and tr_run_desc.hparams'. Give them before the run starts (tr_run_start, tr_fit): the loggers write
   them when they open their files, at the first run's setup. TR_ERR_INVALID (hk_last_error(reg) says
   why) for a key that is empty, longer than 63 bytes or holds a control character or '=', a string
   value longer than 255 bytes, a number that is not finite, or a call while a run is going. */
TRAIN_API tr_err tr_run_hparam(hk_registry *reg, const char *key, const char *value);
TRAIN_API tr_err tr_run_hparam_num(hk_registry *reg, const char *key, double value);
TRAIN_API tr_err tr_run_hparam_bool(hk_registry *reg, const char *key, int value);

/* Start a fit: ctx->stage = HK_STAGE_FIT, ctx->reg, rank defaults; stop signals installed (unless
   no_signals); setup, configure_model; with resume_from (not NULL or "") tr_run_load; then
   on_fit_start and on_train_start. A loop with a sanity check fires its events itself and then forgets
   what it set (hk_metric_forget_between, as train.h's trainer does), so that nothing ranks or stops on
   its val/loss. TR_OK, or the
   run failed (a hook failed, the checkpoint could not be loaded): call tr_run_finish, which reports it. */
TRAIN_API tr_err tr_run_start(hk_registry *reg, hk_ctx *ctx, const char *resume_from);
/* After on_train_batch_end: sends a training record on every log_every_n_steps-th optimizer step (not
   when the batch did not step), honours the requests hooks made (checkpoints, a log line; a validation
   is returned as TR_RUN_VALIDATE), looks at flow (HK_FAIL fails the run; HK_STOP is returned as
   TR_RUN_STOP once min_steps/min_epochs allow) and at the stop signals. Returns TR_RUN_* bits; a failed
   run returns TR_RUN_STOP and tr_run_finish reports it. It leaves flow's signals to the loop
   (hk_flow_clear). Call it again after a validation run at this step (the loop's own cadence or
   TR_RUN_VALIDATE): no second record is sent, and what the validation's callbacks asked for happens at
   this step (model_checkpoint's file holds this step's model; early_stopping's stop ends the run before
   another step), as in train.h's trainer. */
TRAIN_API unsigned tr_run_batch_end(hk_registry *reg, hk_ctx *ctx, hk_flow *flow);
/* The same after on_train_epoch_end (no training record; the epoch counts as done for min_epochs). */
TRAIN_API unsigned tr_run_epoch_end(hk_registry *reg, hk_ctx *ctx, hk_flow *flow);
/* Send a record for stage "train", "val" or "test" built from the context now: train carries
   train/loss (ctx->loss) and every metric except val/ and test/ ones; val every val/ metric; test every
   test/ one. A loop calls it for "val" after on_validation_epoch_end, for "test" after on_test_epoch_end. */
TRAIN_API hk_signal tr_run_log(hk_registry *reg, hk_ctx *ctx, const char *stage);
/* End the run: when it failed (status != TR_OK, a hook's HK_FAIL, a failed save, a second Ctrl-C)
   on_exception with ctx->abort_reason, else on_train_end (its checkpoint and log requests honoured)
   and on_fit_end; then teardown, the loggers' files flushed, the stop signals restored. Returns the
   run's outcome: TR_OK, status, or the run's own error (tr_run_error): TR_ERR_INTERRUPTED after
   Ctrl-C / SIGTERM, TR_ERR_HOOK after a hook's HK_FAIL. Safe to call once per start. */
TRAIN_API tr_err tr_run_finish(hk_registry *reg, hk_ctx *ctx, tr_err status);
/* Why the run failed ("" when it did not). */
TRAIN_API const char *tr_run_error(hk_registry *reg);
/* Fail the run from the loop (a non-finite loss, a data error): tr_run_finish reports it. */
TRAIN_API void tr_run_fail(hk_registry *reg, tr_err e, const char *fmt, ...);

/* Checkpoints in the loop's own format (see above): fires on_save_checkpoint, writes, fires
   on_checkpoint_saved; tr_run_load reads and checks everything before changing anything, then
   restores the model (load_model), the counters (epoch, global_step, batch_idx, samples_seen) into
   ctx, every callback's state, and fires on_load_checkpoint. TR_ERR_INVALID without save_model /
   load_model; TR_ERR_IO / TR_ERR_FORMAT / TR_ERR_STATE with tr_run_error naming the file and why.
   Asynchronous saves (tr_run_desc.async_save TR_YES, or model_checkpoint(async_save=true) for the
   checkpoints hooks request), between tr_run_start and tr_run_finish: tr_run_save fires
   on_save_checkpoint, lets save_model write into a memory stream on the staging buffer (one copy; the
   buffer is allocated at the first save, or grown when the state grows, and reused), appends the state
   block and returns TR_OK; a background thread writes the same bytes through the same atomic writer.
   on_checkpoint_saved fires (ctx->path = the file) at the next safe point once it is on disk:
   tr_run_batch_end / tr_run_epoch_end, the next tr_run_save or tr_run_load, tr_run_finish. A failed
   write fails the run there (tr_run_error says "tr_run_save (in the background): ..."; the previous
   file intact, no temporary left). One save in flight: the next waits for it (never coalesced); the
   run ends (tr_run_finish, before on_exception / teardown) only once the last is on disk; a save from
   on_exception or teardown is written at once. In a process of an MPI job, the saves of that process.
   The writer thread blocks every signal: Ctrl-C and SIGTERM go to the loop's threads (the stop is
   counted there, never in the writer, whose write or fsync a signal would interrupt on FUSE or NFS;
   an interrupted fsync is asked again). Under a strict -std=c99 without _POSIX_C_SOURCE outside glibc,
   where <signal.h> hides pthread_sigmask, the writer keeps the caller's mask. */
TRAIN_API tr_err tr_run_save(hk_registry *reg, hk_ctx *ctx, const char *path);
TRAIN_API tr_err tr_run_load(hk_registry *reg, hk_ctx *ctx, const char *path);

/* Set or scale the learning rate from a hook (the seeds' "halve the lr when the loss stays high").
   The scale is a multiplier on the schedule, kept in the run's lr_state (saved in checkpoints): the
   lr is schedule(t) * scale from now on, so the schedule keeps its shape at the new level, and a
   plateau or onecycle curve goes on under it. tr_lr_scale multiplies the scale by factor (> 0,
   finite); tr_lr_set sets it so that the lr now is lr (> 0; needs ctx->lr > 0). Both set ctx->lr at
   once: the hooks after this one and, in the trainer, the optimizer step of the current batch (when
   called before it) see the new value. A loop of your own multiplies its lr by lr_state.scale (or
   uses tr_sched_lr). TR_ERR_INVALID for a bad value, with hk_last_error(ctx->reg) saying why. */
TRAIN_API tr_err tr_lr_scale(hk_ctx *ctx, double factor);
TRAIN_API tr_err tr_lr_set(hk_ctx *ctx, double lr);

/* 1 when a stop now would end the run at the loop's next stopping point: min_epochs and min_steps
   are reached (the epoch counts once its on_train_epoch_end runs); 1 outside a fit. A callback that
   re-decides at every check (early_stopping) asks this instead of returning HK_STOP early. */
TRAIN_API int tr_stop_allowed(const hk_ctx *ctx);

/* Print a line above the progress bar (tqdm.write): the way for hooks to print while a bar is live.
   On a terminal the bar's lines are cleared, the text printed (a newline added) on the bar's stream,
   the bar redrawn below it; otherwise (no bar, a pipe) a plain line on the bar's stream or stdout.
   Global rank 0 only, as Lightning's print: one line from a job, whichever ranks call it. The rank is
   the run's (ctx->rank at tr_run_start; the trainer's MPI rank from tr_init on); before either, the
   launcher's (OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK, SLURM_PROCID or RANK; 0 without one).
   tr_print_all prints on every rank that calls it (the same way; the lines of processes sharing a
   stream may interleave, each one whole). */
TRAIN_API void tr_print(hk_registry *reg, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
  __attribute__((format(printf, 2, 3)))
#endif
  ;
TRAIN_API void tr_print_all(hk_registry *reg, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
  __attribute__((format(printf, 2, 3)))
#endif
  ;

/* =================================================================================================
   STANDARD CALLBACKS
   Lightning's callbacks, as hooks.h callbacks built on hooks.h's public API and the run layer.
   Each has
     - a constructor taking the registry and a zero-initialised desc (sokol style) that registers one
       hk_callback on reg and hands back its handle (out may be NULL); bad parameters are refused
       before anything is registered, with TR_ERR_INVALID and a message (hk_last_error(reg)) naming
       the parameter and what is valid;
     - a spec-string factory of the same name (TR_FACTORIES): tr_init and tr_run_setup register them,
       so  hk_spec_apply(reg, "early_stopping(monitor=val/loss, patience=3)")  works (any other
       registry: tr_add_factories(reg); a bad parameter: HK_ERR_INVALID and hk_last_error naming it);
       a spec-made callback's handle is hk_spec_find(reg, "early_stopping", 0);
     - its state in checkpoints (the callback's name is its state key): tr_save's, and tr_run_save's
       in a loop of your own, so a resumed run decides exactly as the uninterrupted one; a loaded
       state is range-checked as tr_load checks the LOOP counters (counters in 0..2^53,
       early_stopping's patience in 0..INT_MAX, timer's elapsed times finite in 0..2^53 s, lr_finder's
       suggestion finite and > 0 or NaN, nan_guard's skipped <= found, ema's n_averaged matching its
       average), so nothing overflows when it counts on or prints; an out-of-range state is refused
       (hk_reject: the message names the field, its value and the range) and the callback keeps the
       state it had;
     - a getter for its public state: tr_<name>_get(reg, handle), NULL when handle is not one of these.
   They act only through hooks.h's signals (HK_STOP) and requests (hk_request_checkpoint), and read
   what they need to know of the loop (where to check, the run directory, the optimizer's name) from
   the registry's run (THE RUN LAYER): train.h's trainer fills it at every fit, a loop of yours with
   tr_run_setup. Each one's "Hand-written loop:" note lists the events it needs; tr_run_start,
   tr_run_batch_end and tr_run_finish fire or honour the rest.
   Int fields whose zero means a default take TR_ZERO for an explicit 0; tri-state flags take
   TR_YES / TR_NO, and 0 (TR_DEFAULT) means the default each field names.
   What a callback prints (verbose) goes to the run's log (tr_run_desc.log; the trainer's tr_desc.log),
   else stderr, one line in one write (never torn by another process's output), with "[rank: N] "
   first when the job has several processes (Lightning's prefix); model_checkpoint, timer, lr_finder,
   gradient_monitor and model_summary print on rank 0 only (Lightning's rank_zero_info),
   early_stopping and nan_guard on every rank (early_stopping's log_rank_zero_only: rank 0 only, as
   Lightning's flag).
   ================================================================================================= */

/* Which direction is better for a monitored metric. */
typedef enum tr_mode { TR_MODE_MIN = 0, TR_MODE_MAX } tr_mode;

/* ---- parameters, written once ------------------------------------------------------------------
   Each callback's (and logger's) parameters are one X-macro list, TR_<NAME>_PARAMS(X), beside its
   doc block. Its desc struct's fields are generated from the list here (TR__FIELD); its spec
   factory's parameter table and the factory's copy of a spec's arguments into the desc are generated
   from the same list in the implementation (TR__PARAM, TR__COPY). An entry
       X(kind, C type, name, default, choices, doc)
   is the desc field `name` and the spec key "name"; default is the spec's default as text (NULL:
   required), and it is also what the field's zero means, since a zero desc is the defaults; choices
   are CHOICE's ("min|max"); doc says what the parameter does. The kinds:
     INT        an integer field (int: -1e9..1e9, or int64_t); spec: an integer
     INT_ZERO   the same where the field's 0 means the default: TR_ZERO is an explicit 0 (spec: 0)
     DOUBLE     a double; spec: a number
     BOOL       an int, 1 yes, 0 no (the default); spec: true or false
     TRI        an int flag, TR_YES or TR_NO, 0 (TR_DEFAULT) the default; spec: true or false
     AUTO       the same, where 0 is a rule the doc names; spec: auto|true|false
     STRING     a const char *, NULL the default; spec: text
     CHOICE     an enum whose values are the choices in their order (the first, 0, the default);
                spec: one of the choices
     C_ONLY     a field with no spec parameter (a function pointer, a FILE *, what a hook sets)
     SPEC_ONLY  a spec parameter of type `C type` (CHOICE, INT, ...) with no field: the factory turns
                it into C_ONLY fields by hand
   A spec sets only the fields it gives; the others stay zero, i.e. their defaults. */
#define TR__FIELD(kind, type, name, def, choices, doc) TR__FIELD_##kind(type, name)
#define TR__FIELD_INT(type, name)       type name;
#define TR__FIELD_INT_ZERO(type, name)  type name;
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

/* ---- which batteries are compiled ---------------------------------------------------------------
   Each callback and logger can be left out on its own: TRAIN_NO_<NAME> (TRAIN_NO_EARLY_STOPPING,
   TRAIN_NO_TENSORBOARD, ...); or every one but those named: TRAIN_ONLY_SPECIFIC_BATTERIES with a
   TRAIN_ENABLE_<NAME> for each one wanted, so a program compiles only what it uses.
   A left-out battery has no declarations, so a call of its constructor does not compile, and its spec
   name stays known: "tensorboard(...)" fails with a message that names the define to change.
   TRAIN_NO_CALLBACKS and TRAIN_NO_LOGGERS leave out a whole group; lr_finder needs the trainer.
   Give the same defines to every file that includes train.h (the compiler's command line does), else a
   call of a left-out constructor in another file is an undefined symbol at link time instead.
   TR__ON_<NAME> is 1 for a battery that is compiled, 0 for one left out. */
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
#if defined(TRAIN_NO_CALLBACKS) || defined(TRAIN_NO_MODEL_CHECKPOINT) || (TR__PICKED && !defined(TRAIN_ENABLE_MODEL_CHECKPOINT))
#  define TR__ON_MODEL_CHECKPOINT 0
#else
#  define TR__ON_MODEL_CHECKPOINT 1
#endif
#if defined(TRAIN_NO_CALLBACKS) || defined(TRAIN_NO_TIMER) || (TR__PICKED && !defined(TRAIN_ENABLE_TIMER))
#  define TR__ON_TIMER 0
#else
#  define TR__ON_TIMER 1
#endif
#if defined(TRAIN_NO_CALLBACKS) || defined(TRAIN_NO_LR_MONITOR) || (TR__PICKED && !defined(TRAIN_ENABLE_LR_MONITOR))
#  define TR__ON_LR_MONITOR 0
#else
#  define TR__ON_LR_MONITOR 1
#endif
#if defined(TRAIN_NO_CALLBACKS) || defined(TRAIN_NO_GRADIENT_MONITOR) || (TR__PICKED && !defined(TRAIN_ENABLE_GRADIENT_MONITOR))
#  define TR__ON_GRADIENT_MONITOR 0
#else
#  define TR__ON_GRADIENT_MONITOR 1
#endif
#if defined(TRAIN_NO_CALLBACKS) || defined(TRAIN_NO_NAN_GUARD) || (TR__PICKED && !defined(TRAIN_ENABLE_NAN_GUARD))
#  define TR__ON_NAN_GUARD 0
#else
#  define TR__ON_NAN_GUARD 1
#endif
#if defined(TRAIN_NO_CALLBACKS) || defined(TRAIN_NO_EMA) || (TR__PICKED && !defined(TRAIN_ENABLE_EMA))
#  define TR__ON_EMA 0
#else
#  define TR__ON_EMA 1
#endif
#if defined(TRAIN_NO_CALLBACKS) || defined(TRAIN_NO_LR_FINDER) || defined(TRAIN_NO_TRAINER) || (TR__PICKED && !defined(TRAIN_ENABLE_LR_FINDER))
#  define TR__ON_LR_FINDER 0
#else
#  define TR__ON_LR_FINDER 1
#endif
#if defined(TRAIN_NO_CALLBACKS) || defined(TRAIN_NO_MODEL_SUMMARY) || (TR__PICKED && !defined(TRAIN_ENABLE_MODEL_SUMMARY))
#  define TR__ON_MODEL_SUMMARY 0
#else
#  define TR__ON_MODEL_SUMMARY 1
#endif
#if defined(TRAIN_NO_CALLBACKS) || defined(TRAIN_NO_ACCUMULATION_SCHEDULER) || (TR__PICKED && !defined(TRAIN_ENABLE_ACCUMULATION_SCHEDULER))
#  define TR__ON_ACCUMULATION_SCHEDULER 0
#else
#  define TR__ON_ACCUMULATION_SCHEDULER 1
#endif
#if defined(TRAIN_NO_CALLBACKS) || defined(TRAIN_NO_PROFILER) || (TR__PICKED && !defined(TRAIN_ENABLE_PROFILER))
#  define TR__ON_PROFILER 0
#else
#  define TR__ON_PROFILER 1
#endif
#if defined(TRAIN_NO_CALLBACKS) || defined(TRAIN_NO_THROUGHPUT_MONITOR) || (TR__PICKED && !defined(TRAIN_ENABLE_THROUGHPUT_MONITOR))
#  define TR__ON_THROUGHPUT_MONITOR 0
#else
#  define TR__ON_THROUGHPUT_MONITOR 1
#endif
#if defined(TRAIN_NO_CALLBACKS) || defined(TRAIN_NO_ON_EXCEPTION_CHECKPOINT) || (TR__PICKED && !defined(TRAIN_ENABLE_ON_EXCEPTION_CHECKPOINT))
#  define TR__ON_ON_EXCEPTION_CHECKPOINT 0
#else
#  define TR__ON_ON_EXCEPTION_CHECKPOINT 1
#endif
#if defined(TRAIN_NO_CALLBACKS) || defined(TRAIN_NO_SPIKE_DETECTION) || (TR__PICKED && !defined(TRAIN_ENABLE_SPIKE_DETECTION))
#  define TR__ON_SPIKE_DETECTION 0
#else
#  define TR__ON_SPIKE_DETECTION 1
#endif
#if defined(TRAIN_NO_LOGGERS) || defined(TRAIN_NO_CSV) || (TR__PICKED && !defined(TRAIN_ENABLE_CSV))
#  define TR__ON_CSV 0
#else
#  define TR__ON_CSV 1
#endif
#if defined(TRAIN_NO_LOGGERS) || defined(TRAIN_NO_JSONL) || (TR__PICKED && !defined(TRAIN_ENABLE_JSONL))
#  define TR__ON_JSONL 0
#else
#  define TR__ON_JSONL 1
#endif
#if defined(TRAIN_NO_LOGGERS) || defined(TRAIN_NO_TENSORBOARD) || (TR__PICKED && !defined(TRAIN_ENABLE_TENSORBOARD))
#  define TR__ON_TENSORBOARD 0
#else
#  define TR__ON_TENSORBOARD 1
#endif
#if defined(TRAIN_NO_LOGGERS) || defined(TRAIN_NO_PROGRESS_BAR) || (TR__PICKED && !defined(TRAIN_ENABLE_PROGRESS_BAR))
#  define TR__ON_PROGRESS_BAR 0
#else
#  define TR__ON_PROGRESS_BAR 1
#endif
#if defined(TRAIN_NO_LOGGERS) || defined(TRAIN_NO_PLOT) || (TR__PICKED && !defined(TRAIN_ENABLE_PLOT))
#  define TR__ON_PLOT 0
#else
#  define TR__ON_PLOT 1
#endif
#define TR__ON_FILE_LOGGERS (TR__ON_CSV || TR__ON_JSONL || TR__ON_TENSORBOARD || TR__ON_PLOT) /* they share tr__logger */
/* The standard factories, X(name, NAME, p, what it does): tr_add_factories registers the spec factory
   `name` (tr__<p>_params, tr__<p>_factory) when TR__ON_<NAME>, else the name alone, which says how
   to get it. The callbacks they make read the loop's settings from the registry's run (tr_run_setup;
   the trainer sets them at each fit). */
#define TR__BATTERIES(X) \
  X(early_stopping, EARLY_STOPPING, es, "stop training when a monitored metric stops improving (Lightning's EarlyStopping)") \
  X(model_checkpoint, MODEL_CHECKPOINT, mc, "save checkpoints, keeping the k best by a metric (Lightning's ModelCheckpoint)") \
  X(timer, TIMER, timer, "stop training after a time limit; time per stage (Lightning's Timer)") \
  X(lr_monitor, LR_MONITOR, lrm, "publish the learning rate as lr-<Optimizer> (Lightning's LearningRateMonitor)") \
  X(gradient_monitor, GRADIENT_MONITOR, gm, "gradient norms, percentiles, a histogram and vanishing/exploding flags every n steps") \
  X(nan_guard, NAN_GUARD, ng, "fail, skip the step or stop on a non-finite loss or gradient, naming where") \
  X(ema, EMA, ema, "an exponential (or SWA) average of the weights, used for evaluation (EMAWeightAveraging)") \
  X(lr_finder, LR_FINDER, lrf, "sweep the learning rate before training and use the suggestion (LearningRateFinder)") \
  X(model_summary, MODEL_SUMMARY, ms, "print the tensor table at fit start (Lightning's ModelSummary)") \
  X(accumulation_scheduler, ACCUMULATION_SCHEDULER, as, "gradient accumulation factor by epoch (GradientAccumulationScheduler)") \
  X(profiler, PROFILER, prof, "time every hook, event and loop phase; a table at teardown, metrics in records (SimpleProfiler)") \
  X(throughput_monitor, THROUGHPUT_MONITOR, tp, "samples/s, tokens/s, step-time percentiles and MFU in training records (ThroughputMonitor)") \
  X(on_exception_checkpoint, ON_EXCEPTION_CHECKPOINT, oec, "save the state after the last step when a fit fails or is interrupted (OnExceptionCheckpoint)") \
  X(spike_detection, SPIKE_DETECTION, sd, "roll back to an in-memory snapshot at a loss spike and skip its batches (SpikeDetection)") \
  X(csv, CSV, csv, "log records to save_dir/name/version_N/metrics.csv and hparams.yaml (Lightning's CSVLogger)") \
  X(jsonl, JSONL, jsonl, "log records as JSON lines to save_dir/name/version_N/metrics.jsonl") \
  X(tensorboard, TENSORBOARD, tb, "log records as TensorBoard event files (scalars, histograms, hparams as text)") \
  X(progress_bar, PROGRESS_BAR, bar, "tqdm's progress bar on a terminal, plain lines elsewhere (Lightning's TQDMProgressBar)") \
  X(plot, PLOT, plot, "write logged metrics against step as an SVG plot at the end of each run")
/* Registers every standard factory on reg; a name already registered is left as it is. */
TRAIN_API hk_err tr_add_factories(hk_registry *reg);

#ifndef TRAIN_NO_CALLBACKS
#if TR__ON_EARLY_STOPPING
/* ---- early_stopping (Lightning's EarlyStopping) ---------------------------------------------------
   Checks the monitored metric once per check: at on_train_epoch_end, or at on_validation_end (see
   check_on_train_epoch_end), never during the sanity check or outside a fit. The decision, in
   Lightning's order, each exclusive: (1) check_finite and the value is NaN/inf: stop; (2) the value
   is better than stopping_threshold (strictly): stop; (3) it is worse than divergence_threshold
   (strictly): stop; (4) it improves on the best by more than min_delta (strictly): best = value,
   wait_count = 0; (5) otherwise wait_count += 1, and stop once wait_count >= patience (patience
   counts checks, not epochs). min_delta must be >= 0 (Lightning accepts a negative one, which then
   counts worse values as improvements); values are compared in double (Lightning: in the metric's
   float32). It stops by returning HK_STOP, so min_epochs / min_steps hold; unlike
   Lightning (issue 19966) a decision taken while they are unmet is not latched: it is made again at
   every check, so a metric that improves meanwhile keeps training going (state.held says so).
   Hand-written loop: fire on_train_epoch_end (or on_validation_end) with the metric set
   (hk_metric_set) and stage HK_STAGE_FIT; stop at HK_STOP. It returns HK_STOP at every check whose
   decision is "stop", so a loop that ignores stops before its own minimum gets the same behaviour.
   Said once (tr_run_desc.log): ctx->stage unset at a check; checking at on_train_epoch_end in a run
   whose tr_run_desc.epochs is TR_NO (at on_fit_start); no check at all in a fit (at on_train_end).
   When it stops training it says why in one line, by default, from rank 0 (log_stop; Lightning logs
   it only with verbose), above a live progress bar:
     early_stopping: Monitored metric val/loss did not improve in the last 3 records. Best score: 0.056. ...
   Held stops and the other decisions are printed with verbose only. */
#define TR_STOP_REASONS(X) /* X(enum, name); the values are Lightning's EarlyStoppingReason */ \
  X(TR_STOP_NOT_STOPPED,          "not_stopped")          \
  X(TR_STOP_STOPPING_THRESHOLD,   "stopping_threshold")   \
  X(TR_STOP_DIVERGENCE_THRESHOLD, "divergence_threshold") \
  X(TR_STOP_PATIENCE_EXHAUSTED,   "patience_exhausted")   \
  X(TR_STOP_NON_FINITE_METRIC,    "non_finite_metric")
typedef enum tr_stop_reason {
#define TR__X(sym, name) sym,
  TR_STOP_REASONS(TR__X)
#undef TR__X
  TR_STOP_REASON_COUNT
} tr_stop_reason;
TRAIN_API const char *tr_stop_reason_name(tr_stop_reason r);

#define TR_EARLY_STOPPING_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD) */ \
  X(STRING,   const char *, monitor,                  NULL,    NULL,      "required: the metric to watch, e.g. val/loss") \
  X(CHOICE,   tr_mode,      mode,                     "min",   "min|max", "which direction is better") \
  X(DOUBLE,   double,       min_delta,                "0",     NULL,      ">= 0; an improvement must beat the best by more than this") \
  X(INT_ZERO, int,          patience,                 "3",     NULL,      "checks without improvement before stopping") \
  X(TRI,      int,          strict,                   "true",  NULL,      "a metric missing at a check fails the run (false: the check is skipped)") \
  X(TRI,      int,          check_finite,             "true",  NULL,      "a NaN or infinite value stops training") \
  X(C_ONLY,   int,          has_stopping_threshold,   NULL,    NULL,      "1: stopping_threshold is set (a spec: when it gives one)") \
  X(DOUBLE,   double,       stopping_threshold,       "0",     NULL,      "stop once the value is better than this (when given)") \
  X(C_ONLY,   int,          has_divergence_threshold, NULL,    NULL,      "1: divergence_threshold is set (a spec: when it gives one)") \
  X(DOUBLE,   double,       divergence_threshold,     "0",     NULL,      "stop once the value is worse than this (when given)") \
  X(AUTO,     int,          check_on_train_epoch_end, "auto",  NULL,      "true: check at on_train_epoch_end; false: at " \
    "on_validation_end; auto: at the epoch's end, unless the fit validates mid-epoch (val_every_n_steps) or not every " \
    "epoch (Lightning's rule)") \
  X(BOOL,     int,          verbose,                  "false", NULL,      "print every decision (and why it stopped) to the " \
    "run's log: one line each, \"[rank: N] \" first when the job has several processes") \
  X(TRI,      int,          log_rank_zero_only,       "false", NULL,      "with several processes only rank 0 prints " \
    "(Lightning's flag)") \
  X(TRI,      int,          log_stop,                 "true",  NULL,      "when it stops training, one line saying why (the " \
    "metric, the checks without improvement, the best score) to the run's log, from rank 0; false: silent")
typedef struct tr_early_stopping_desc { TR_EARLY_STOPPING_PARAMS(TR__FIELD) } tr_early_stopping_desc;

typedef struct tr_early_stopping_state { /* in checkpoints; patience from a checkpoint wins, as Lightning */
  int64_t wait_count;           /* checks since the last improvement */
  int64_t stopped_epoch;        /* the epoch at whose check it stopped training; 0 = it did not */
  double best_score;            /* +inf (min) / -inf (max) before the first check */
  int64_t patience;
  tr_stop_reason stopping_reason;
  const char *stopping_reason_message; /* "" while not stopped */
  int held;                     /* the last check said "stop" but min_epochs/min_steps held it back */
} tr_early_stopping_state;

TRAIN_API tr_err tr_early_stopping(hk_registry *reg, const tr_early_stopping_desc *d, hk_handle *out);
TRAIN_API const tr_early_stopping_state *tr_early_stopping_get(const hk_registry *reg, hk_handle h);
#endif /* TR__ON_EARLY_STOPPING */

#if TR__ON_MODEL_CHECKPOINT
/* ---- model_checkpoint (Lightning's ModelCheckpoint) -----------------------------------------------
   At each save point it picks a file name and asks the loop to save there (hk_request_checkpoint);
   the bookkeeping (top-k, best, last) is updated before the save, so the state stored in that very
   file already counts it. Files it replaces are deleted only in on_checkpoint_saved of the new file
   (the new one is safely on disk: train.h renames a synced temporary file), never the checkpoint the
   fit resumed from, and only files it writes: inside dirpath (not below it), named by its filename
   template or last (with -vN) and .ckpt, and regular files (a symlink only as save_last's link).
   Whatever a loaded state lists (its checksums can be recomputed by anyone), nothing else is
   removed: it says "not removing" and leaves the file.
   Save points: every_n_epochs (the default, 1, when no trigger is given) at on_train_epoch_end or
   on_validation_end (save_on_train_epoch_end); every_n_train_steps at on_train_batch_end when
   global_step % n == 0; train_time_interval seconds at on_train_batch_end. Never during the sanity
   check, outside a fit, or twice at one global step. A step or time save waits for the next
   on_validation_end when a validation runs right after it at the same step (val_every_n_steps, or
   the epoch's validation after its last batch: train.h only), so it is ranked and named on that
   validation's value, not the previous one (Lightning waits only at an epoch's last batch); and when
   its monitored metric does not exist yet.
   A monitored metric missing at any other save point: before the fit's first validation a warning
   (once) and no top-k file (last is still written); after one, the run fails naming it (Lightning).
   At on_fit_start (before training) it fails when the monitor is a "val/..." metric and the run never
   validates (tr_run_desc.validation TR_NO; train.h: no validation data), or when dirpath cannot be
   created or written (rank 0 checks).
   Top-k: save_top_k = k keeps the k best files by the monitored value (a new value must be strictly
   better than the k-th); -1 keeps all (the k-th is then the worst kept, as Lightning); TR_ZERO none
   (only last). One entry per file: a fixed name saved again takes its new value. Without a monitor
   only -1 (keep every save) and 1 (keep the latest) are allowed; best_model_path is the newest file
   and best_k_models stays empty (Lightning). NaN is never best: it counts as the worst value, so it is
   evicted first, and best_model_path never names a NaN checkpoint (Lightning stores NaN as +-inf and
   may call it best). Values are compared in double (Lightning: in the metric's float32).
   Where: dirpath, or when none is given the run directory's checkpoints/ (version_N/checkpoints, so a
   second run in the same place writes beside its own logs, not among the first run's files), decided
   at the fit's start (or a load before it) on rank 0; ./checkpoints when no logger made a run directory
   (other ranks, which write nothing, keep ./checkpoints). A resume into a new version_N restores only
   best_model_path (the dirpath differs), as Lightning.
   File names: dirpath/<filename>.ckpt; the template's {epoch} and {step} are the epoch and
   global_step, any other {name} or {name:fmt} a metric (0 when missing), fmt is Python's
   [0][width][.precision][f|e|g|d]. auto_insert_metric_name writes {val/loss:.2f} as
   "val_loss=0.42": a '/' in a metric name becomes '_' (Lightning makes subdirectories of it, left
   behind empty), and the template itself may not contain '/' (put directories in dirpath), may not be
   empty, and with save_last may not be last or last-vN (one file would be both). A name that exists
   already (a second save in one epoch, a rerun into the same directory, another process saving into
   the same dirpath) gets -v1, -v2 ... (enable_version_counter), except the file being replaced;
   without a monitor, keep-all versions a repeated name too (Lightning overwrites it). Names are
   claimed on disk when picked (rank 0 creates the file exclusively, empty until its save replaces it
   by a rename): two processes started together with one dirpath never pick one name, and neither
   replaces or deletes a file of the other; a claim whose save never came (the run failed first) is
   removed at teardown (a process killed in between leaves it empty; a later run skips the name).
   Without the counter a name is used as it is, also when another process wrote it. A name another hook queued at this save point (a
   second model_checkpoint in the same directory) is taken even before it is on disk, and gets a
   version even without the counter.
   save_last: at each save point (Lightning 2.6: only with a top-k save at that step, so it can go
   stale) also write dirpath/last.ckpt (last-v1.ckpt when a run finds one it did not write);
   TR_SAVE_LAST_LINK makes it a relative symlink to the file saved at this same step (a copy where
   symlinks fail), and a file of its own when this step saved no top-k file, so last is always the
   latest state; at on_train_end it is written if no checkpoint was saved at the final step.
   Hand-written loop: fire on_fit_start, on_train_epoch_end / on_validation_end / on_train_batch_end
   (stage HK_STAGE_FIT, epoch and global_step set, metrics set) and call tr_run_batch_end /
   tr_run_epoch_end, which save through tr_run_desc.save_model with the callbacks' state (tr_run_save,
   a new file renamed over the path) and fire on_checkpoint_saved; a loop that honours
   HK_REQUEST_CHECKPOINT itself saves at each ctx->checkpoint_paths[i] (a new file renamed over the
   path: last.ckpt may be a link) and fires on_checkpoint_saved with ctx->path = that path (see
   hk_request_checkpoint); without on_checkpoint_saved nothing is ever deleted. Said once
   (tr_run_desc.log): ctx->stage unset at a save point; epoch saves at on_train_epoch_end in a run whose
   tr_run_desc.epochs is TR_NO (at on_fit_start).
   async_save: the run writes every checkpoint hooks request in the background (tr_run_save's and
   tr_save's "asynchronous saves"); a save point while its last file is still being written first waits
   for it, so evictions and the link see that file on disk. */
typedef enum tr_save_last { TR_SAVE_LAST_NO = 0, TR_SAVE_LAST_YES, TR_SAVE_LAST_LINK } tr_save_last;

#define TR_MODEL_CHECKPOINT_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD) */ \
  X(STRING,   const char *, dirpath,                 "",               NULL, "the directory, created (with parents) when missing; " \
    "not given or empty: the run directory's checkpoints/ (save_dir/name/version_N/checkpoints, as Lightning) when a logger made " \
    "one (or tr_run_dir gave it) by the fit's start, else ./checkpoints") \
  X(STRING,   const char *, filename,                "{epoch}-{step}", NULL, "the file name template without .ckpt (not empty), " \
    "e.g. {epoch}-{val/loss:.2f}") \
  X(STRING,   const char *, monitor,                 "",      NULL,  "the metric that ranks checkpoints (empty: none; every save is the newest)") \
  X(CHOICE,   tr_mode,      mode,                    "min",   "min|max", "which direction is better") \
  X(INT_ZERO, int,          save_top_k,              "1",     NULL,  "keep the k best files; -1 all, 0 none (only last)") \
  X(CHOICE,   tr_save_last, save_last,               "false", "false|true|link", "also write last.ckpt (or link it)") \
  X(INT,      int64_t,      every_n_train_steps,     "0",     NULL,  "> 0: save every n optimizer steps") \
  X(INT_ZERO, int64_t,      every_n_epochs,          "1",     NULL,  "save every n epochs; 0: never by epoch (the default, 1, " \
    "only while no other trigger is given)") \
  X(DOUBLE,   double,       train_time_interval,     "0",     NULL,  "> 0: save when this many seconds passed since the last check") \
  X(AUTO,     int,          save_on_train_epoch_end, "auto",  NULL,  "epoch saves: true at on_train_epoch_end, false at " \
    "on_validation_end; auto: as early_stopping's check_on_train_epoch_end") \
  X(TRI,      int,          auto_insert_metric_name, "true",  NULL,  "{val/loss} -> val_loss=...") \
  X(TRI,      int,          enable_version_counter,  "true",  NULL,  "-v1, -v2 ... on name collisions") \
  X(BOOL,     int,          verbose,                 "false", NULL,  "print every save and eviction") \
  X(BOOL,     int,          async_save,              "false", NULL,  "the loop writes its files in the background (the " \
    "step copies the state; a thread writes, fsyncs and renames)") \
  X(C_ONLY,   tr_clock_fn,  clock,                   NULL,    NULL,  "seconds, for train_time_interval; NULL = a monotonic clock") \
  X(C_ONLY,   void *,       clock_user,              NULL,    NULL,  "clock's argument")
typedef struct tr_model_checkpoint_desc { TR_MODEL_CHECKPOINT_PARAMS(TR__FIELD) } tr_model_checkpoint_desc;

typedef struct tr_model_checkpoint_state { /* in checkpoints (all of it; only best_model_path when
                                              the checkpoint's dirpath differs, as Lightning) */
  const char *dirpath;
  const char *best_model_path;  /* "" until a save; without a monitor the newest file */
  double best_model_score;      /* NaN until a save with a monitored value */
  const char *kth_best_model_path; /* the worst kept file once k are kept (-1: always; "" before, or no monitor) */
  double kth_value;
  const char *last_model_path;  /* save_last's file ("" until written) */
  double current_score;         /* the value at the newest save */
  int n_best_k;                 /* best_k_models: path -> value, in the order they were saved (0 without a monitor) */
  const char *const *best_k_paths;
  const double *best_k_scores;
  int64_t last_global_step_saved; /* -1 = none */
} tr_model_checkpoint_state;

TRAIN_API tr_err tr_model_checkpoint(hk_registry *reg, const tr_model_checkpoint_desc *d, hk_handle *out);
TRAIN_API const tr_model_checkpoint_state *tr_model_checkpoint_get(const hk_registry *reg, hk_handle h);
#endif /* TR__ON_MODEL_CHECKPOINT */

#if TR__ON_TIMER
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
#endif /* TR__ON_TIMER */

#if TR__ON_LR_MONITOR
/* ---- lr_monitor (Lightning's LearningRateMonitor) -------------------------------------------------
   Publishes the learning rate as the metric "lr-<Optimizer>" (lr-AdamW, lr-SGD: Lightning's names),
   with log_momentum "lr-<Optimizer>-momentum" (SGD's momentum, AdamW's beta1, as Lightning) and with
   log_weight_decay "lr-<Optimizer>-weight_decay". Interval step: a lazy metric, read from ctx->lr
   when someone asks (a logger), so a step costs nothing, and it rides with the training records;
   interval epoch: set at each on_train_epoch_start to that epoch's learning rate, and sent to the
   loggers then as a record of its own (step = the optimizer steps taken so far, as Lightning: one
   row per epoch whatever log_every_n_steps is), kept out of the step records (with the momentum and
   weight decay). Default interval: the schedule's (epoch when tr_sched.per_epoch, else step), as
   Lightning follows its scheduler's interval. Unlike Lightning it needs no logger: the metrics map
   has it for any hook. The optimizer's name, momentum and weight decay come from the run
   (tr_run_desc.optimizer, .momentum, .weight_decay; the trainer sets them); without an optimizer
   name the metric is "lr" and momentum / weight decay are not published. Hand-written loop: fire
   on_train_start (and on_train_epoch_start for epoch) with ctx->lr set. */
enum { TR_LR_LOG_STEP = 1, TR_LR_LOG_EPOCH = 2 };
#define TR_LR_MONITOR_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD) */ \
  X(CHOICE, int,          logging_interval, "auto",  "auto|step|epoch", "when to publish (auto: the schedule's interval; C: " \
    "TR_LR_LOG_STEP, TR_LR_LOG_EPOCH)") \
  X(TRI,    int,          log_momentum,     "false", NULL, "also <name>-momentum (SGD's momentum, AdamW's beta1)") \
  X(TRI,    int,          log_weight_decay, "false", NULL, "also <name>-weight_decay") \
  X(STRING, const char *, name,             "",      NULL, "the metric's name (empty: lr-<Optimizer>; Lightning's scheduler name)")
typedef struct tr_lr_monitor_desc { TR_LR_MONITOR_PARAMS(TR__FIELD) } tr_lr_monitor_desc;
typedef struct tr_lr_monitor_state {
  const char *name, *momentum_name, *weight_decay_name; /* the metrics it publishes ("" = none) */
  int per_epoch;                /* the resolved interval: 1 epoch, 0 step */
} tr_lr_monitor_state;
TRAIN_API tr_err tr_lr_monitor(hk_registry *reg, const tr_lr_monitor_desc *d, hk_handle *out);
TRAIN_API const tr_lr_monitor_state *tr_lr_monitor_get(const hk_registry *reg, hk_handle h);
#endif /* TR__ON_LR_MONITOR */

#if TR__ON_GRADIENT_MONITOR
/* ---- gradient_monitor (Lightning's grad_norm utility) ----------------
   On every log_frequency-th optimizer step (the step being taken: steps n, 2n, ...) at
   on_before_optimizer_step, i.e. on the window's averaged gradients before clipping, it publishes
     grad_2.0_norm_total          the L2 norm of the selected tensors' gradients (Lightning's name)
     grad_2.0_norm/<tensor>       per tensor (per_tensor, default yes)
     grad_abs_p<q>                the q-th percentile of |g| for each q of percentiles ("10,50,90"),
                                  linear interpolation between order statistics (numpy's default)
     grad_vanishing, grad_exploding  1 when the total norm is below vanishing_threshold / above
                                  exploding_threshold, else 0 (verbose also prints a warning)
   and, with histogram_bins > 0, a histogram of the gradient values (tr_histogram) handed to
   on_histogram, kept for tr_gradient_monitor_get, and sent to the loggers with the next log record
   as "gradients" (tr_log_histogram_bins; more than TR_LOG_HIST_BUCKETS bins are merged there). param_filter keeps the tensors whose name contains one of its
   comma-separated substrings. Steps that are not due cost one filter test in the dispatcher (a
   hooks.h filter predicate); nothing is computed. The scratch memory is allocated at on_train_start.
   Hand-written loop: fire on_train_start and on_before_optimizer_step with ctx->grads (host memory)
   and global_step = steps taken before this one; with log_frequency left at 0 it follows
   tr_run_desc.log_every_n_steps, so every training record carries its metrics and histogram. */
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
  int n_tensors;                /* tensors the filter selected (after on_train_start) */
  const tr_histogram *histogram;/* the last one (NULL before, or without histogram_bins) */
} tr_gradient_monitor_state;
TRAIN_API tr_err tr_gradient_monitor(hk_registry *reg, const tr_gradient_monitor_desc *d, hk_handle *out);
TRAIN_API const tr_gradient_monitor_state *tr_gradient_monitor_get(const hk_registry *reg, hk_handle h);
#endif /* TR__ON_GRADIENT_MONITOR */

#if TR__ON_NAN_GUARD
/* ---- nan_guard (Lightning's detect_anomaly) ---------------------------
   Checks the training loss at on_before_backward and the gradients at on_before_optimizer_step with
   hk_is_finite (bit tests: they survive -ffast-math). The gradient check reads hk_grad_norm (one pass,
   shared with clipping and monitors); only when it is not finite does it scan for the first tensor
   and index that is not. Then it acts: TR_NAN_FAIL (default) fails the run with a message naming
   what, where and the step; TR_NAN_SKIP_STEP drops the accumulation window's step (HK_SKIP_STEP) and
   warns; TR_NAN_STOP drops that step too (the non-finite update is never applied, so the weights and
   any checkpoint stay finite) and stops training gracefully: HK_SKIP_STEP from the check, then HK_STOP
   from that batch's on_train_batch_end. With train.h, set
   tr_config.on_nonfinite_loss = TR_NONFINITE_IGNORE to let nan_guard decide about the loss (the
   trainer's default acts first). Its counters are in checkpoints. Hand-written loop: fire
   on_before_backward with ctx->loss and on_before_optimizer_step with ctx->grads (HK_FIRE_FLOW), skip
   the update when HK_FLOW_HAS(&flow, HK_FLOW_SKIP_STEP), fire on_train_batch_end and stop at
   HK_FLOW_STOP (HK_FAIL: ctx->hook_failure says why). */
typedef enum tr_nan_action { TR_NAN_FAIL = 0, TR_NAN_SKIP_STEP, TR_NAN_STOP } tr_nan_action;
#define TR_NAN_GUARD_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD) */ \
  X(TRI,    int,           check_loss,  "true", NULL, "check the training loss (before backward)") \
  X(TRI,    int,           check_grads, "true", NULL, "check the gradients (before the optimizer step)") \
  X(CHOICE, tr_nan_action, action,      "fail", "fail|skip_step|stop", "what to do when something is not finite") \
  X(TRI,    int,           verbose,     "true", NULL, "say what was found (skip_step and stop)")
typedef struct tr_nan_guard_desc { TR_NAN_GUARD_PARAMS(TR__FIELD) } tr_nan_guard_desc;
typedef struct tr_nan_guard_state {
  int64_t found;                /* non-finite losses or gradients seen */
  int64_t skipped;              /* steps it dropped (action skip_step or stop) */
  const char *last;             /* what it found last, e.g. "gradient of 'w1'[17] is nan at step 40" ("" before) */
} tr_nan_guard_state;
TRAIN_API tr_err tr_nan_guard(hk_registry *reg, const tr_nan_guard_desc *d, hk_handle *out);
TRAIN_API const tr_nan_guard_state *tr_nan_guard_get(const hk_registry *reg, hk_handle h);
#endif /* TR__ON_NAN_GUARD */

#if TR__ON_EMA
/* ---- ema (Lightning's EMAWeightAveraging; StochasticWeightAveraging as an option) ----------------
   Keeps an average of the parameters: at on_after_optimizer_step when global_step >= start_step and
   global_step % every_n_steps == 0, avg = decay*avg + (1-decay)*params (the first update copies the
   parameters, as torch's AveragedModel). With swa_epoch_start > 0 it is SWA instead: an equal-weight
   average, avg += (params - avg)/(n+1), of the weights at the end of every epoch from epoch
   swa_epoch_start (0-based) on, and no per-step updates. Once there is an average, it is swapped into
   the parameters for each validation, test and predict run (on_*_start) and swapped back at their
   end (on_*_end, or teardown when the run failed inside one); train.h's sanity check included. copy_at_end copies the average into the model at
   on_train_end (Lightning does; here the default is no, so that a later tr_fit continues from the
   trained weights exactly). The average and its count are in checkpoints (a save from inside an
   evaluation, while the average is swapped in, is refused: TR_ERR_STATE). Hand-written loop: fire
   on_after_optimizer_step (ctx->params in host memory), the evaluation start/end events around your
   evaluations, on_train_epoch_end for SWA. */
#define TR_EMA_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD) */ \
  X(DOUBLE, double,  decay,           "0.999", NULL, "in (0, 1): avg = decay*avg + (1-decay)*params") \
  X(INT,    int64_t, every_n_steps,   "1",     NULL, "update every n optimizer steps") \
  X(INT,    int64_t, start_step,      "0",     NULL, "the first global_step that updates") \
  X(INT,    int64_t, swa_epoch_start, "0",     NULL, "> 0: SWA (an equal average per epoch) from this epoch (0-based) " \
    "instead of the EMA") \
  X(TRI,    int,     copy_at_end,     "false", NULL, "copy the average into the model at on_train_end") \
  X(TRI,    int,     swap_for_eval,   "true",  NULL, "use the average for validation, test and predict (false: never " \
    "swap; read the average with the getter)")
typedef struct tr_ema_desc { TR_EMA_PARAMS(TR__FIELD) } tr_ema_desc;
typedef struct tr_ema_state {
  int64_t n_averaged;           /* updates so far (0: no average yet) */
  const float *average;         /* count floats, the layout of ctx->params (NULL before the first update) */
  size_t count;
  int swapped;                  /* the average is in the model now */
} tr_ema_state;
TRAIN_API tr_err tr_ema(hk_registry *reg, const tr_ema_desc *d, hk_handle *out);
TRAIN_API const tr_ema_state *tr_ema_get(const hk_registry *reg, hk_handle h);
#endif /* TR__ON_EMA */

#if TR__ON_LR_FINDER
/* ---- lr_finder (Lightning's LearningRateFinder) -------------------------------------------------
   At on_fit_start of a fit that starts from step 0 it sweeps the learning rate exponentially,
   lr_i = min_lr * (max_lr/min_lr)^(i/(N-1)) for N = num_training_steps optimizer steps on the
   training data (batch i mod count; clipping as configured, no accumulation, no hooks fire), records
   the loss smoothed with beta 0.98 (bias-corrected) and stops early once it exceeds
   early_stop_threshold x the best. The suggestion is the learning rate at the steepest descent of the
   smoothed curve (numpy.gradient's argmin, skipping the first 10 and the last point, as Lightning).
   Then parameters, optimizer state, counters and gradients are restored exactly, and with
   update_attr (default) tr_desc.optim.lr becomes the suggestion for the fit that follows. It prints
   the suggestion, writes the curve as CSV (lr,loss) to curve_path when given (whole, through the
   atomic writer: never through a symlink), and keeps it for tr_lr_finder_get. Its result is in checkpoints: a resumed fit does not sweep again but applies the
   same learning rate. Too few points (fewer than 13) give no suggestion (NaN) and leave lr alone.
   train.h only (it drives the model itself); random-access training data, or an iterator with reset. */
#define TR_LR_FINDER_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD) */ \
  X(DOUBLE, double,       min_lr,               "1e-8", NULL, "the sweep's first learning rate") \
  X(DOUBLE, double,       max_lr,               "1",    NULL, "the sweep's last learning rate") \
  X(INT,    int,          num_training_steps,   "100",  NULL, "steps of the sweep (2..1000000)") \
  X(DOUBLE, double,       early_stop_threshold, "4",    NULL, "stop once the smoothed loss exceeds this x the best (negative: never)") \
  X(TRI,    int,          update_attr,          "true", NULL, "set the optimizer's lr to the suggestion") \
  X(STRING, const char *, curve_path,           "",     NULL, "write the curve (\"lr,loss\" lines) here (empty: no file)") \
  X(TRI,    int,          verbose,              "true", NULL, "print the suggestion")
typedef struct tr_lr_finder_desc { TR_LR_FINDER_PARAMS(TR__FIELD) } tr_lr_finder_desc;
typedef struct tr_lr_finder_state {
  int done;                     /* the sweep ran (in this process or before the checkpoint) */
  double suggestion;            /* NaN when there is none */
  int suggestion_index;         /* into lrs/losses; -1 when none */
  int n;                        /* points of the curve (0 after a resume: the curve is not saved) */
  const double *lrs, *losses;   /* the learning rates and smoothed losses */
} tr_lr_finder_state;
TRAIN_API tr_err tr_lr_finder(hk_registry *reg, const tr_lr_finder_desc *d, hk_handle *out);
TRAIN_API const tr_lr_finder_state *tr_lr_finder_get(const hk_registry *reg, hk_handle h);
#endif /* TR__ON_LR_FINDER */

#if TR__ON_MODEL_SUMMARY
/* ---- model_summary (Lightning's ModelSummary) ---------------------------------------------------
   At on_fit_start prints the tensor table: index, name, element count, share of all parameters,
   device (cpu / gpu from hk_tensor.on_device), then the total and the size in MB (4 bytes each),
   with Lightning's count format (12.3 K, 1.2 M). max_rows limits the table (the rest is summed in
   one line). Printed on rank 0 only (Lightning's rule). Hand-written loop: fire on_fit_start with
   ctx->params. */
#define TR_MODEL_SUMMARY_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD) */ \
  X(INT_ZERO, int,    max_rows, "50", NULL, "tensors listed (0: totals only)") \
  X(C_ONLY,   FILE *, out,      NULL, NULL, "NULL = the run's log (tr_run_desc.log), else stdout")
typedef struct tr_model_summary_desc { TR_MODEL_SUMMARY_PARAMS(TR__FIELD) } tr_model_summary_desc;
typedef struct tr_model_summary_state { int64_t total_params; int n_tensors; } tr_model_summary_state;
TRAIN_API tr_err tr_model_summary(hk_registry *reg, const tr_model_summary_desc *d, hk_handle *out);
TRAIN_API const tr_model_summary_state *tr_model_summary_get(const hk_registry *reg, hk_handle h);
#endif /* TR__ON_MODEL_SUMMARY */

#if TR__ON_ACCUMULATION_SCHEDULER
/* ---- accumulation_scheduler (Lightning's GradientAccumulationScheduler) --------------------------
   scheduling "{0: 4, 5: 2}" (epoch: factor pairs separated by commas, braces both or neither, epochs
   0-based and increasing, factors >= 1; anything else, "{0: 2" or "{0:2 1:3}", is refused): from
   epoch 0 accumulate 4 micro-batches per step, from epoch 5 on 2; an epoch before the first key gets
   1 (Lightning adds {0: 1}). Set through tr_set_accumulation at on_train_start (a resumed run gets
   its epoch's factor) and at every on_train_epoch_start. A fit whose tr_config.accumulate_grad_batches
   is not 1 fails at on_fit_start (Lightning refuses the combination too). The last window of an epoch
   steps even when short (train.h and Lightning alike). Hand-written loop: fire those events and read
   the factor from tr_accumulation_scheduler_get(...)->factor. */
#define TR_ACCUMULATION_SCHEDULER_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD) */ \
  X(STRING, const char *, scheduling, NULL, NULL, "required: epoch: factor, e.g. \"{0: 4, 5: 2}\"")
typedef struct tr_accumulation_scheduler_desc { TR_ACCUMULATION_SCHEDULER_PARAMS(TR__FIELD) } tr_accumulation_scheduler_desc;
typedef struct tr_accumulation_scheduler_state {
  int n;                        /* entries */
  const int64_t *epochs;
  const int *factors;
  int factor;                   /* the factor set last (1 before) */
} tr_accumulation_scheduler_state;
TRAIN_API tr_err tr_accumulation_scheduler(hk_registry *reg, const tr_accumulation_scheduler_desc *d, hk_handle *out);
TRAIN_API const tr_accumulation_scheduler_state *tr_accumulation_scheduler_get(const hk_registry *reg, hk_handle h);
#endif /* TR__ON_ACCUMULATION_SCHEDULER */

#if TR__ON_PROFILER
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
#endif /* TR__ON_PROFILER */

#if TR__ON_THROUGHPUT_MONITOR
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
#endif /* TR__ON_THROUGHPUT_MONITOR */
#if TR__ON_ON_EXCEPTION_CHECKPOINT
/* ---- on_exception_checkpoint (Lightning's OnExceptionCheckpoint) ---------------------------------
   When a fit fails or is interrupted (a hook's HK_FAIL, a model error, a non-finite loss, Ctrl-C or
   SIGTERM: every path through on_exception), saves the last consistent state to
   dirpath/filename.ckpt before teardown, so that tr_config.resume_from (tr_run_start's resume_from in
   a loop of your own) continues from it. The last consistent state is the state after the last
   completed optimizer step: in train.h's trainer the parameters, optimizer state, counters, RNG and
   every callback's state as tr_save writes them, with the loop's position moved back to the first
   batch of the accumulation window that was in progress (the batch that failed, with no
   accumulation), whose partial gradients are dropped; so a resumed run repeats that window and ends
   with the same bits as a run that never failed (random-access data; an iterator cannot go back:
   it resumes where it stood). Callbacks' states are saved as they were at the failure. In a loop of
   your own it saves through tr_run_save (save_model, the callbacks' state, ctx's counters): call
   tr_run_finish with the model and ctx as they were after the last step. Nothing is saved before
   on_train_start of the fit (a failed setup, configure_model or resume would overwrite a good file
   with the initial state), nor in tr_validate / tr_test / tr_predict (Lightning saves on any
   exception). The file is written atomically (the old one stays until the new one is whole); a save
   that fails is reported (verbose) and the run's own error stands. dirpath is made when missing.
   Stateless. Hand-written loop: tr_run_setup's save_model / load_model, tr_run_start, tr_run_finish. */
#define TR_ON_EXCEPTION_CHECKPOINT_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD) */ \
  X(STRING, const char *, dirpath,  NULL,           NULL, "required: the checkpoint's directory (made when missing)") \
  X(STRING, const char *, filename, "on_exception", NULL, "the file's name without \".ckpt\" (no '/')") \
  X(TRI,    int,          verbose,  "true",         NULL, "say where it saved, or why it could not")
typedef struct tr_on_exception_checkpoint_desc { TR_ON_EXCEPTION_CHECKPOINT_PARAMS(TR__FIELD) } tr_on_exception_checkpoint_desc;
typedef struct tr_on_exception_checkpoint_state {
  const char *ckpt_path;        /* dirpath/filename.ckpt */
  int64_t saved;                /* checkpoints written (one per failed fit) */
  int64_t saved_step;           /* global_step of the last one (-1: none) */
  tr_err last_error;            /* TR_OK, or why the last save failed */
} tr_on_exception_checkpoint_state;
TRAIN_API tr_err tr_on_exception_checkpoint(hk_registry *reg, const tr_on_exception_checkpoint_desc *d, hk_handle *out);
TRAIN_API const tr_on_exception_checkpoint_state *tr_on_exception_checkpoint_get(const hk_registry *reg, hk_handle h);
#endif /* TR__ON_ON_EXCEPTION_CHECKPOINT */

#if TR__ON_SPIKE_DETECTION
/* ---- spike_detection (Lightning's SpikeDetection, with a rollback instead of an exception) -------
   Watches the training loss against a running window of the last `window` good losses (checked from
   the batch that fills it), and, with check_grads, the gradient norm. A loss that is NaN or infinite,
   or above centre + threshold * |centre| (mode relative) or centre + threshold * the window's
   standard deviation (mode zscore), where centre is the window's mean or median, is a spike, and so
   is a non-finite gradient norm. Lightning's SpikeDetection then raises; this one rolls back:
     - every every_n_steps-th optimizer step (and at on_train_start) it copies the training state into
       one buffer allocated at on_train_start (the only snapshot: memory is the state's size once);
       the state is the run's (tr_run_desc.state): train.h's trainer gives its parameters, optimizer
       state and step counters, a loop of yours the regions it lists;
     - at a spike (the batch's backward and step are skipped: HK_SKIP_BATCH from on_before_backward,
       HK_SKIP_STEP from on_before_optimizer_step) it copies the snapshot back at the batch's end, puts
       ctx->global_step (the trainer: its step count, so the learning rate too) and its window back to
       the snapshot's, and skips the next skip_after batches (HK_SKIP_BATCH from
       on_train_batch_start). The data goes on: the batches from the snapshot to the spike are
       undone and never seen again, which is what a run that skipped them from the snapshot on does,
       bit for bit (same data, same order; the counters of the data - epoch, batch, samples_seen -
       go on in both). An accumulation window in progress is dropped.
   The (max_rollbacks+1)-th spike fails the run (HK_FAIL) as Lightning does at the first
   (max_rollbacks = TR_ZERO: Lightning's behaviour; -1: never). Not restored: the other callbacks'
   states (ema's average keeps the undone steps), the trainer's RNG (t->rng). In checkpoints: the
   window, the counters, the skip range, and the snapshot itself (a resumed run rolls back to the
   same snapshot as the run that did not stop; a checkpoint grows by the state's size). Refused at
   on_train_start: no state to snapshot, a model on the GPU, more than one process (TRAIN_MPI). With
   train.h, set tr_config.on_nonfinite_loss = TR_NONFINITE_IGNORE to let it see non-finite losses
   (the trainer's default fails first). Cost per batch without a spike: the window's update (O(window);
   the median sorts a copy), with check_grads a gradient norm (shared with clipping and the other
   hooks), and a memcpy of the state every every_n_steps steps: +0.7% per step at the defaults on
   make bench-train's MLP (about 1900 instructions, most of them the gradient norm).
   Hand-written loop: tr_run_desc.state (and n_state), on_train_start, on_train_batch_start,
   on_before_backward with ctx->loss, on_before_optimizer_step with ctx->grads, on_train_batch_end
   (HK_FIRE_FLOW; honour HK_FLOW_SKIP_BATCH and HK_FLOW_SKIP_STEP), then take the step count from
   ctx->global_step. */
typedef enum tr_spike_centre { TR_SPIKE_MEAN = 0, TR_SPIKE_MEDIAN } tr_spike_centre;
typedef enum tr_spike_mode { TR_SPIKE_RELATIVE = 0, TR_SPIKE_ZSCORE } tr_spike_mode;
#define TR_SPIKE_DETECTION_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD) */ \
  X(INT,      int,             window,        "10",       NULL, "good losses in the running window (2..10000)") \
  X(CHOICE,   tr_spike_centre, centre,        "mean",     "mean|median", "the window's centre") \
  X(CHOICE,   tr_spike_mode,   mode,          "relative", "relative|zscore", "relative: a spike is above centre + " \
    "threshold*|centre|; zscore: above centre + threshold*std") \
  X(DOUBLE,   double,          threshold,     "2",        NULL, "> 0, finite: how far above the centre a spike is") \
  X(INT,      int64_t,         every_n_steps, "100",      NULL, "snapshot after every n-th optimizer step (>= 1)") \
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
#endif /* TR__ON_SPIKE_DETECTION */

#endif /* TRAIN_NO_CALLBACKS */

/* =================================================================================================
   LOGGERS AND PROGRESS BAR
   Logging is an event. The trainer builds a log record (step, epoch, stage and the metrics that are
   due) and fires on_log with ctx->outputs pointing at it; hooks change it there (tr_log_current,
   tr_log_set, tr_log_drop), then the loggers, which are ordinary callbacks registered as monitoring
   callbacks with a high order, write it: on_log is an HK_MONITOR_LAST event, so they run after every
   other callback and the model tier's hooks. Records, in Lightning's rhythm:
     train  after on_train_batch_end of every log_every_n_steps-th optimizer step (tr_config, 50 by
            default; a batch that did not step - accumulation, a skipped step - logs nothing):
            "train/loss" (the batch's loss) and every metric in the context except val/ and test/
            ones and the trainer's computed-on-demand lr and grad_norm (lr_monitor logs lr; a hook
            adds grad_norm at on_log with tr_log_set(r, "grad_norm", hk_grad_norm(ctx)))
     val    after on_validation_epoch_end of every validation in a fit (not the sanity check) and of
            tr_validate: every metric named val/...
     test   after on_test_epoch_end: every metric named test/...
     train  also at once when a hook asks with hk_request(ctx, HK_REQUEST_LOG) in a fit (after the
            current training batch or epoch end, where requests are honoured)
   step is Lightning's: the number of optimizer steps taken before the record's batch (the 50th step
   logs step 49; validation records carry the last training step), so columns line up with
   Lightning's CSVLogger. Histograms (tr_log_histogram) ride with the next record.
   Loggers and the bar write only on rank 0 (ctx->rank). An I/O error (unwritable directory, full
   disk) is reported once, with the path and the system's reason, and that logger stops writing;
   training goes on unless the logger was made with fail_on_error (then the run fails, HK_FAIL). A
   short write (a full disk) is cut back to the file's last whole line or TensorBoard record: no
   reader ever sees half of one.
   Files: everything written whole (hparams.yaml, metrics.csv at its first rows and when its columns
   change, the start of metrics.jsonl and of the TensorBoard file, the plot) goes through the atomic
   writer that checkpoints use: an exclusive temporary (O_CREAT|O_EXCL|O_NOFOLLOW), fsync, rename; the
   logs are then appended to that descriptor, never reopened by name. A symlink planted at any of these
   names is never followed, and nothing but a regular file is replaced: a link, a device, a FIFO or a
   directory where a logger's file goes is reported (the logger stops) and left as it is.
   Hand-written loop: the run layer sends the records - tr_run_batch_end a training record every
   log_every_n_steps-th step, tr_run_log(reg, &ctx, "val") after on_validation_epoch_end - and every
   logger of the registry writes into the run's one version directory (tr_run_dir); fire the stage
   events the progress bar lists (a loop without epochs: tr_run_desc.epochs = TR_NO and max_steps,
   and the bar counts steps). A record of your own: tr_log_emit(reg, &ctx, &record) (zero it once, set
   n_metrics = 0 between records, tr_log_record_free it at the end). Records are flushed at teardown
   (tr_run_finish fires it) and, in any case, when the registry is destroyed.
   ================================================================================================= */
#ifndef TR_LOG_MAX_HISTOGRAMS
#  define TR_LOG_MAX_HISTOGRAMS 16  /* histograms riding with one record; more are refused (an error, not a drop) */
#endif
#ifndef TR_LOG_NAME_MAX
#  define TR_LOG_NAME_MAX 64        /* a histogram tag's bytes, its NUL included (metric names have no limit) */
#endif
#define TR_LOG_HIST_BUCKETS 30      /* the most buckets a histogram keeps (tr_log_histogram uses all) */

/* A record holds any number of metrics with names of any length: tr_log_set grows its storage (the
   trainer's record grows in its first records, then reuses it). Names must be valid UTF-8 (every
   logger writes UTF-8 text: JSON, CSV, TensorBoard's protobuf strings); tr_log_set refuses others, and
   the trainer reports such a metric once (tr_desc.log) instead of logging it. */
typedef struct tr_log_metric {
  const char *name;             /* the record's own copy */
  double value;
  size_t tr__cap;               /* private: the bytes allocated for name */
} tr_log_metric;
typedef struct tr_log_histogram_data {
  char tag[TR_LOG_NAME_MAX];
  double min, max, num, sum, sum_squares;
  int n_buckets;
  double limit[TR_LOG_HIST_BUCKETS];  /* right edge of each bucket (TensorBoard's bucket_limit) */
  double count[TR_LOG_HIST_BUCKETS];
} tr_log_histogram_data;

typedef struct tr_log_record {
  int64_t step;                 /* Lightning's step (see above) */
  int64_t epoch;
  const char *stage;            /* "train", "val" or "test" */
  int n_metrics;                /* in the order they were added */
  tr_log_metric *metrics;       /* n_metrics of them (tr_log_set's storage) */
  int n_histograms;
  tr_log_histogram_data histograms[TR_LOG_MAX_HISTOGRAMS];
  int tr__cap;                  /* private: metrics allocated (their names are kept for reuse) */
} tr_log_record;

/* The record being logged, at on_log (NULL at any other event). */
TRAIN_API tr_log_record *tr_log_current(hk_ctx *ctx);
/* Add or change a metric: TR_ERR_INVALID for a NULL or empty name or one that is not valid UTF-8,
   TR_ERR_NOMEM when out of memory. A record of your own loop: zero it once, set n_metrics = 0 (and
   n_histograms = 0) between records to reuse its storage, tr_log_record_free it at the end. */
TRAIN_API tr_err tr_log_set(tr_log_record *r, const char *name, double value);
TRAIN_API void tr_log_record_free(tr_log_record *r); /* its storage; the record is empty (zero) after */
TRAIN_API int tr_log_get(const tr_log_record *r, const char *name, double *value); /* 1 if present */
TRAIN_API int tr_log_drop(tr_log_record *r, const char *name);                     /* 1 if it was there */
/* A histogram of n values (non-finite ones are left out) for TensorBoard. At on_log it joins that
   record; at any other event of train.h's trainer it waits for the next record (a gradient monitor
   calls it where gradients are valid). A tag given twice before a record is sent keeps the last. */
TRAIN_API tr_err tr_log_histogram(hk_ctx *ctx, const char *tag, const float *values, size_t n);
/* The same from a histogram already counted (a monitor's): n_bins equal or unequal bins with
   n_bins + 1 edges from min to max, their counts, and the values' sum and sum of squares. More than
   TR_LOG_HIST_BUCKETS bins are merged into that many (neighbours summed, edges kept). */
TRAIN_API tr_err tr_log_histogram_bins(hk_ctx *ctx, const char *tag, int n_bins, const double *edges,
                                       const int64_t *counts, double sum, double sum_squares);
/* 1 when a training record will follow the optimizer step being taken now: from on_train_batch_start
   to on_before_optimizer_step / on_gradient_clip of train.h's fit (global_step not moved yet), with a
   hook on on_log. A monitor that costs something (a gradient histogram) computes it only then. */
TRAIN_API int tr_log_due(const hk_ctx *ctx);
/* Fire on_log for a record of your own loop (ctx->outputs points at it while on_log runs). */
TRAIN_API hk_signal tr_log_emit(hk_registry *reg, hk_ctx *ctx, tr_log_record *r);

/* CRC-32C (Castagnoli), as TensorBoard's record framing uses it; tr_crc32c_masked is LevelDB's mask. */
TRAIN_API uint32_t tr_crc32c(const void *data, size_t n);
TRAIN_API uint32_t tr_crc32c_masked(const void *data, size_t n);

#ifndef TRAIN_NO_LOGGERS
/* Where a logger writes: Lightning's layout  save_dir/name/version_N/  (N = 1 + the largest
   version_<int> there, 0 when none). The loggers of one trainer with the same save_dir and name share
   one version directory. The directory is made at the logger's first write (setup of the first run
   on rank 0); the configuration (hparams) is written then. version_N is claimed with one mkdir: when
   it exists already (another run started at the same moment took it) N+1 is tried, so parallel runs
   never share a version directory. */
#define TR_LOGGER_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD) */ \
  X(STRING, const char *, save_dir,      "runs",           NULL, "the directory of runs (not given: the run's, " \
    "tr_run_desc.save_dir, runs by default)") \
  X(STRING, const char *, name,          "lightning_logs", NULL, "a subdirectory for this experiment (empty: versions " \
    "directly in save_dir; not given: the run's, lightning_logs by default)") \
  X(STRING, const char *, version,       "",               NULL, "the version directory (empty: the next free version_N; " \
    "else this name, its old metrics file, if a regular file, replaced at the first write, as Lightning; not " \
    "given: the run's, tr_run_desc.version)") \
  X(INT,    int,          flush_every,   "0",              NULL, "> 0: write after this many records; 0: at most once a " \
    "second (the first record at once) and at the end of every run. Lines are written whole: a process killed with " \
    "-9 loses at most the records not written yet (about a second), never half a line") \
  X(TRI,    int,          fail_on_error, "false",          NULL, "an I/O error fails the run (default: reported once, " \
    "training goes on)")
typedef struct tr_logger_desc { TR_LOGGER_PARAMS(TR__FIELD) } tr_logger_desc;

typedef struct tr_logger_state {
  const char *dir;              /* the version directory ("" before the first write) */
  const char *path;             /* the file it writes ("" before the first write) */
  int64_t records;              /* records written to disk */
  const char *error;            /* the first I/O error ("" when none) */
} tr_logger_state;

#if TR__ON_CSV
/* csv: metrics.csv and hparams.yaml as Lightning's CSVLogger writes them. Columns: the union of every
   key logged, epoch and step included, sorted by name; one row per record; an empty cell where a
   record lacks a column; numbers in the shortest form that reads back exactly (nan, inf, -inf as
   Python writes them). metrics.csv is made with its first rows (none when nothing is logged, as
   Lightning); rows are appended as whole lines. A new column rewrites the file (atomically: a crash
   leaves the old file or the new one): at once while it is under 16 KiB; in a larger file the rows
   are appended without the new column until the rewrite is paid for (the bytes appended since the
   last rewrite reach half of it), 2 seconds have passed, or the run ends (teardown), so that a new
   column at every record costs work linear in the rows per column instead of rewriting everything
   each time. hparams.yaml: "key: value" lines sorted by key; the spec strings in effect as a list
   under "specs". */
TRAIN_API tr_err tr_csv_logger(hk_registry *reg, const tr_logger_desc *d, hk_handle *out);
#endif
#if TR__ON_JSONL
/* jsonl: metrics.jsonl, one JSON object per line. The first line is {"hparams": {...}} (numbers as
   numbers, the rest as strings, "specs" as a list); then one line per record:
   {"step":49,"epoch":0,"stage":"train","metrics":{"train/loss":0.25}}. NaN and infinities, which
   JSON cannot hold, are written as the strings "NaN", "Infinity" and "-Infinity". */
TRAIN_API tr_err tr_jsonl_logger(hk_registry *reg, const tr_logger_desc *d, hk_handle *out);
#endif
#if TR__ON_TENSORBOARD
/* tensorboard: events.out.tfevents.<secs>.<host>.<pid>.0, TFRecord-framed Event protos with real
   CRC-32C: a file_version event, the hparams as a text summary (tag "hparams", a Markdown table),
   then per record one event holding every metric as a scalar (tag = the metric's name) and every
   histogram. Look at it with  tensorboard --logdir <save_dir>. */
TRAIN_API tr_err tr_tensorboard_logger(hk_registry *reg, const tr_logger_desc *d, hk_handle *out);
#endif
#if TR__ON_FILE_LOGGERS
TRAIN_API const tr_logger_state *tr_logger_get(const hk_registry *reg, hk_handle h); /* any of these loggers, or plot */
#endif

/* plot: curves of logged metrics against step, written as SVG (no dependency; any browser shows it)
   at every teardown, i.e. at the end of each run, failed runs included. The hparams go into the
   SVG's <desc> element (as hparams.yaml's lines). */
#define TR_PLOT_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD); a spec also takes TR_LOGGER_PARAMS */ \
  X(C_ONLY, tr_logger_desc, dir,     NULL, NULL, "the version directory (a spec: the logger parameters)") \
  X(STRING, const char *,   path,    "",   NULL, "the SVG file (empty: metrics.svg in the version directory)") \
  X(STRING, const char *,   metrics, "",   NULL, "space-separated metric names (empty: every metric with loss in its name)") \
  X(STRING, const char *,   title,   "",   NULL, "the plot's title (empty: the file's directory)")
typedef struct tr_plot_desc { TR_PLOT_PARAMS(TR__FIELD) } tr_plot_desc; /* (also without plot: the factories use it) */
#if TR__ON_PLOT
TRAIN_API tr_err tr_plot(hk_registry *reg, const tr_plot_desc *d, hk_handle *out);
/* The same plot from a CSV file in metrics.csv's layout (a "step" column and metric columns; empty
   cells are skipped), or with a "job" column instead of "step" (a sweep's summary.csv: x is the job). why (may be NULL) gets the reason on error: TR_ERR_IO, TR_ERR_INVALID. */
TRAIN_API tr_err tr_plot_csv(const char *csv_path, const char *svg_path, const char *metrics, char *why, size_t why_len);
#endif

#if TR__ON_PROGRESS_BAR
/* progress_bar: tqdm's line, as Lightning's TQDMProgressBar draws it,
     Epoch 3:  45%|████▌     | 27/60 [00:01<00:01, 25.30it/s, loss=0.231, val/loss=0.187]
   the rate averaged over the epoch (after a resume: over the batches run since, as tqdm's initial),
   the postfix the last training record's train/loss (as loss) and the last validation record's
   metrics. A validation bar ("Validation", "Sanity Checking", "Testing") runs on the line below
   during evaluation. One bar per registry: a second is refused (it would print everything twice).
   On a terminal: redrawn in place (carriage return, the line, erase to its end) at most every
   refresh_seconds, the end of an epoch included (Lightning redraws at every epoch's end; with a fast
   model that is hundreds of redraws a second), and once more when training ends with its final
   state. The whole line (bar, counts, rate, postfix) is cut to the terminal's width less one (tqdm),
   measured at every redraw (TIOCGWINSZ on the stream, else $COLUMNS, else 80), so it never wraps and
   a resized terminal gets lines of its new width; when the terminal was narrowed below the last line,
   the rows a rewrapping terminal (tmux, most desktop ones) made of it are erased too (those still on
   the screen: tmux may push one into its scrollback). The validation
   line is cleared when it ends, so the screen shows one live bar. Elsewhere (a pipe, a file, CI):
   complete lines, never a carriage return or an escape code: the sanity check's, one at the end of
   every training epoch carrying its validation's metrics (a validation inside an epoch has no line
   of its own), one per evaluation run (tr_validate, tr_test; a step loop's validations), one at most
   every line_seconds within a long epoch or evaluation, and the final state at the end of training
   when no line showed it (a loop without epochs).
   mode=auto tells a terminal by isatty, except under a launcher (mpirun, mpiexec, srun; Open MPI
   gives every rank a pseudo-terminal even when mpirun writes to a file): then by where the launcher's
   own output goes (Linux: its /proc/PID/fd), as a user expects; its terminal's width is measured too.
   Only rank 0 (ctx->rank) draws. mode=tty / lines force either.
   PRINTING WHILE THE BAR IS LIVE: tr_print(reg, fmt, ...) (tqdm.write) clears the bar's lines, prints
   the line, draws the bar again below it; a hook's plain printf lands in the middle of the bar's line.
   Callbacks' lines (the run's log: warnings, verbose, early_stopping's stop, a resume) go the same way
   when that stream is a terminal. Events it uses: on_train_epoch_start/end, on_train_batch_end,
   on_validation_start/batch_end/end, on_test_*, on_train_end, on_log, teardown. */
typedef enum tr_bar_mode { TR_BAR_AUTO = 0, TR_BAR_TTY, TR_BAR_LINES } tr_bar_mode;
#define TR_PROGRESS_BAR_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD) */ \
  X(C_ONLY,    FILE *,      out,             NULL,     NULL, "NULL = stdout (a spec: stream)") \
  X(SPEC_ONLY, CHOICE,      stream,          "stdout", "stdout|stderr", "where the bar goes (C: out)") \
  X(CHOICE,    tr_bar_mode, mode,            "auto",   "auto|tty|lines", "auto: in place on a terminal (isatty; under " \
    "mpirun: mpirun's own output), else lines") \
  X(DOUBLE,    double,      refresh_seconds, "0.1",    NULL, "terminal: the least time between redraws") \
  X(DOUBLE,    double,      line_seconds,    "10",     NULL, "lines: the least time between lines within an epoch") \
  X(INT,       int,         width,           "0",      NULL, "the line's width, up to 100000 (0: the terminal's, " \
    "$COLUMNS, else 80; lines: a 10-cell bar)") \
  X(BOOL,      int,         ascii,           "false",  NULL, "draw the bar in \" 123456789#\" instead of Unicode blocks")
typedef struct tr_progress_bar_desc { TR_PROGRESS_BAR_PARAMS(TR__FIELD) } tr_progress_bar_desc;
TRAIN_API tr_err tr_progress_bar(hk_registry *reg, const tr_progress_bar_desc *d, hk_handle *out);
/* tqdm's line for n of total (total <= 0: unknown) after elapsed seconds, into buf; width <= 0 gives a
   10-cell bar. Returns the line's length in bytes (clipped to cap - 1). */
TRAIN_API size_t tr_bar_format(char *buf, size_t cap, const char *desc, int64_t n, int64_t total, double elapsed,
                               const char *postfix, int width, int ascii);
#endif

#endif /* TRAIN_NO_LOGGERS */

#ifndef TRAIN_NO_SWEEP
/* =================================================================================================
   SWEEPS (Hydra's multirun)
   Run a program's job once per combination of values given on the command line, one job after
   another, each in its own directory with its hyperparameters, and compare their final metrics:

       static double lr = 1e-3; static int batch = 32;
       static const tr_sweep_field fields[] = { { "optim.lr", TR_SWEEP_DOUBLE, &lr }, { "batch", TR_SWEEP_INT, &batch } };
       static tr_err job(hk_registry *reg, tr_sweep_job *job, void *user) {   (lr and batch hold this job's values)
           ... tr_init(&t, &(tr_desc){ .reg = reg, ... }); e = tr_fit(&t, &cfg); tr_free(&t); return e;
       }
       tr_sweep_result res;
       tr_err e = tr_sweep(&(tr_sweep_desc){ .fields = fields, .n_fields = 2, .job = job,
                                             .spec = "early_stopping(monitor=val/loss); csv" },
                           argc - 1, argv + 1, &res);
       $ ./train optim.lr=1e-2,1e-3 batch=32,64 early_stopping.patience=3,5     (8 jobs)

   Overrides: key=v1,v2,... A key names one of the program's fields (tr_sweep_field: name, type,
   pointer; the job reads the variable) or, when no field has that name, factory.param: a parameter
   of a callback in the spec string (the job's spec has it set, or replaced, in every item of that
   factory). The jobs are the cartesian product of the lists, the last key varying fastest, as
   Hydra's basic sweeper: a=1,2 b=x,y runs a=1 b=x, a=1 b=y, a=2 b=x, a=2 b=y. A value cannot hold a
   comma. "-m" or "--multirun" asks for a sweep even with one job. Everything is checked before the
   first job: an unknown key, a key given twice, an empty list or value, a value that is not of the
   field's type, a spec parameter the factory does not have or a value it refuses (every job's spec
   goes through hk_spec_check): TR_ERR_INVALID, with res->error naming the key and what it accepts.
   Nothing runs and no directory is made then.

   Each job gets a registry of its own (the standard factories, desc.add_factories', the job's spec
   applied) with its run set up from desc.run: in a sweep, its directory is version_<job> inside the
   sweep's directory (save_dir/version_N, claimed as the run layer claims one; Hydra: multirun/<date>/
   <time>/<job>); every field's value and every spec override are the run's hyperparameters
   (tr_run_hparam*, typed: hparams.yaml, TensorBoard's HParams tab - tensorboard --logdir on the
   sweep's directory shows one row per job with its final metrics -, the plot); overrides.yaml there
   lists the job's overrides. A job that calls tr_run_setup itself
   (a loop of its own) starts from *job->run. A job's final metrics are the last value of every
   metric sent to the job's loggers (on_log; a hook that runs after the loggers records them) and
   whatever the job set with tr_sweep_metric.

   The sweep's own hooks live on desc.reg (any hooks.h hook, callback or spec-made callback):
     on_multirun_start, then per job on_job_start .. the job .. on_job_end, then on_multirun_end;
     a single job without -m is a plain run: on_run_start, on_job_start, on_job_end, on_run_end
     (Hydra's RUN mode; it writes where desc.run says, no summary).
   Start events run in registration order, end events reversed (hooks.h's HK_REVERSED), as Hydra's.
   At on_job_start and on_job_end ctx->outputs is the tr_sweep_job (tr_sweep_current); at on_job_end
   its status, error and final metrics are set, and ctx's metrics are the job's final metrics. A hook
   that fails at on_multirun_start / on_run_start ends the sweep before any job (TR_ERR_HOOK); at
   on_job_start the job fails without running; at on_job_end the job counts as failed; HK_STOP at
   on_job_end runs no further job.
   A failing job (its function returned an error) is reported and the sweep goes on with the next
   one, unless desc.stop_on_failure; Ctrl-C in a job (TR_ERR_INTERRUPTED) always ends the sweep.
   At the end (a sweep): summary.csv in the sweep's directory - one row per job: job, status (ok,
   failed, skipped), every swept key, every final metric (columns sorted by name), error - and
   summary.svg, the final metrics (desc.metrics, or every one with loss in its name) against the
   job's number (tr_plot_csv; without the loggers section, no SVG).
   Hydra differences: no config files or composition (the program's fields are the config), no
   launchers (jobs run one after another in this process), no range()/choice()/glob() sweeps, the
   summary files are ours (Hydra writes multirun.yaml); Lightning has no sweeps.
   ================================================================================================= */
#define TR_SWEEP_TYPES(X) /* X(enum, name in messages) */ \
  X(TR_SWEEP_INT,    "an integer (int)") \
  X(TR_SWEEP_INT64,  "an integer (int64_t)") \
  X(TR_SWEEP_DOUBLE, "a number (double)") \
  X(TR_SWEEP_FLOAT,  "a number (float)") \
  X(TR_SWEEP_BOOL,   "true or false (also yes/no, on/off, 1/0)") \
  X(TR_SWEEP_STRING, "any text without a comma (const char *)")
typedef enum tr_sweep_type {
#define TR__X(sym, doc) sym,
  TR_SWEEP_TYPES(TR__X)
#undef TR__X
  TR_SWEEP_TYPE_COUNT
} tr_sweep_type;

/* One of the program's configuration fields: ptr points at a variable of the type's C type (int,
   int64_t, double, float, int for bool, const char * for string). Each job sees its value there; the
   sweep puts the old values back when it returns (a string's text lives until then). */
typedef struct tr_sweep_field { const char *name; tr_sweep_type type; void *ptr; } tr_sweep_field;

typedef struct tr_sweep_job {
  int index, count;              /* this job's number (from 0; Hydra's job.num) and the jobs in the sweep */
  const char *overrides;         /* this job's values of the swept keys: "optim.lr=1e-2 batch=32" */
  const char *dir;               /* its run directory (tr_run_dir of its registry; "" in a plain run until made) */
  const char *spec;              /* the spec string applied to its registry, spec overrides in ("" when none) */
  const tr_run_desc *run;        /* the run it was set up with (a job that calls tr_run_setup starts from it) */
  /* on_job_end: */
  tr_err status;                 /* TR_OK, or the job's error */
  const char *error;             /* why it failed ("" when it did not) */
  int n_metrics;                 /* its final metrics, in the order first seen */
  const tr_log_metric *metrics;
  void *tr__p;                   /* private */
} tr_sweep_job;

typedef tr_err (*tr_sweep_fn)(hk_registry *reg, tr_sweep_job *job, void *user);

typedef struct tr_sweep_desc {
  const tr_sweep_field *fields;  /* the program's configuration fields */
  int n_fields;
  const char *spec;              /* every job's callbacks and loggers (NULL: none); factory.param keys rewrite it */
  tr_sweep_fn job;               /* runs one job on reg; returns TR_OK or its error (required) */
  void *user;
  hk_registry *reg;              /* the sweep's hooks (on_multirun_start ...); NULL: none */
  tr_run_desc run;               /* every job's run (in a sweep save_dir, name and version are the sweep's) */
  const char *save_dir;          /* where the sweep's directory version_N is claimed; NULL = "multirun" */
  hk_err (*add_factories)(hk_registry *reg); /* your own spec factories, for the check and every job */
  int stop_on_failure;           /* 1: a failing job ends the sweep (the rest are skipped); 0: go on */
  int multirun;                  /* 1: a sweep even for one job (as -m on the command line) */
  const char *metrics;           /* summary.svg's metrics, space-separated; NULL/"": those with loss in the name */
  FILE *log;                     /* where the sweep says what it runs; NULL = stderr */
} tr_sweep_desc;

typedef struct tr_sweep_result {
  int jobs, ok, failed, skipped; /* jobs in the sweep; how they ended */
  int multirun;                  /* 1: it ran as a sweep (summary written), 0: a plain run */
  char dir[512];                 /* the sweep's directory ("" in a plain run) */
  char error[1024];              /* why tr_sweep did not return TR_OK ("" when it did) */
} tr_sweep_result;

/* Parse argc/argv (overrides, "-m"), check them, run the jobs, write the summary. Returns TR_OK when
   every job that ran succeeded; TR_ERR_INVALID for bad overrides or desc (no job ran); else the first
   failed job's error (or TR_ERR_HOOK from a sweep hook, TR_ERR_IO when the summary cannot be
   written), with res->error saying which job and why. res may be NULL. */
TRAIN_API tr_err tr_sweep(const tr_sweep_desc *d, int argc, char **argv, tr_sweep_result *res);
/* The job at on_job_start / on_job_end of a sweep's hooks (NULL elsewhere). */
TRAIN_API tr_sweep_job *tr_sweep_current(hk_ctx *ctx);
/* A final metric of the job, set by the job itself (it wins over a logged value of the same name). */
TRAIN_API tr_err tr_sweep_metric(tr_sweep_job *job, const char *name, double value);
#endif /* TRAIN_NO_SWEEP */

#ifndef TRAIN_NO_TRAINER
/* =================================================================================================
   THE TRAINER
   tr_init, tr_fit, tr_validate / tr_test / tr_predict, checkpoints (tr_save / tr_load): a complete loop
   on the run layer, the callbacks and the loggers above (leave it out with TRAIN_NO_TRAINER).
   ================================================================================================= */
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
  /* threads for the per-step math (the section "PER-STEP MATH"); 0 = 1. More than 1 needs a build
     with -fopenmp (otherwise the passes run on one thread); the results are the same bits either way. */
  int threads;
  /* TRAIN_MPI with several processes: how long tr_init and the start of each run (tr_fit, tr_validate,
     tr_test, tr_predict) wait for every rank to arrive, in seconds; past it they fail with TR_ERR_COMM
     instead of hanging on a rank that returned early. 0 = 1800 (torch.distributed's default); < 0 =
     wait forever. Ignored in one process. (Section "MPI STRATEGY".) */
  double mpi_timeout;
  /* 1: tr_save during a run (hooks' checkpoint requests included) copies the state into a staging
     buffer and returns; a background thread writes the file with the same guarantees and bytes, and
     on_checkpoint_saved fires at the next safe point after it is on disk (see tr_save). 0: the file
     is written before tr_save returns. */
  int async_save;
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
  int no_sigint;                 /* 1: leave SIGINT and SIGTERM alone. Default: during tr_fit the first Ctrl-C
                                    (or SIGTERM, which is what mpirun sends the ranks on Ctrl-C)
                                    finishes the current batch, the second stops at once; both end
                                    through on_exception with TR_ERR_INTERRUPTED. This is hooks.h's
                                    hk_stop_signals_install(HK_STOP_COUNT_ONLY): the previous handlers
                                    are back when tr_fit returns, a signal the process ignores stays
                                    ignored, and inside a loop of yours that installed it too, only
                                    the signals that come during tr_fit count here. */
  const char *resume_from;       /* load this checkpoint after configure_model and continue from it; says
                                    where in one line (rank 0, tr_desc.log): "Restored all states from the
                                    checkpoint at PATH: epoch E, global step S, batch B of the epoch" */
  int no_resume_message;         /* 1: not that line */
  const char *save_to;           /* where hk_request(ctx, HK_REQUEST_CHECKPOINT) saves; NULL: such requests only
                                    warn (hk_request_checkpoint names its own path) */
  int64_t log_every_n_steps;     /* a training log record every N optimizer steps (on_log, the loggers);
                                    0 = 50 (Lightning's default); negative = no training records */
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
  int64_t train_batches;   /* batches in the current training epoch (the progress bar's total) */
  int64_t eval_batches;    /* batches of the evaluation loop in progress */
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
  int tr__accum;           /* micro-batches per step now (tr_config.accumulate_grad_batches, tr_set_accumulation) */
  int64_t tr__accum_pos;   /* micro-batches seen in the current accumulation window */
  int64_t tr__accum_n;     /* ... of which ran backward (the gradient sum is divided by this) */
  int tr__grads_zeroed;    /* the current window's zero_grad happened */
  int64_t tr__val_at;      /* epoch_batch at which the last in-epoch validation ran, -1 = none */
  int tr__epoch_ended;     /* set while on_train_epoch_end runs: the epoch is complete */
  int tr__epoch_done;      /* the epoch's last batch has run (its end, validation included, is next) */
  int tr__restarting;      /* a mid-epoch checkpoint was loaded: the next fit skips the sanity check */
  int64_t tr__total;       /* the cosine schedule's resolved total */
  double tr__last_loss;    /* the last training batch's loss (the lazy metric train/loss) */
  const tr_config *tr__cfg;/* the resolved config of the fit in progress */
  hk_flow tr__flow;        /* what hooks asked for: skip the step/batch, stop the epoch/training */
  hk_bytes tr__data_state; /* the training iterator's position: from a checkpoint, or the last fit's end */
  int tr__saving;          /* tr_save is running (a nested one is refused) */
  int tr__async;           /* tr_desc.async_save */
  int tr__async_now;       /* this tr_save stages its file for the background writer */
  int tr__staged;          /* ... and did: on_checkpoint_saved waits until it is on disk */
  int tr__in_request;      /* honouring HK_REQUEST_CHECKPOINT (model_checkpoint's async_save) */
  int tr__strict_hook_state;
  uint64_t tr__max_ckpt;   /* tr_desc.max_checkpoint_bytes, resolved */
  tr_run *tr__run;         /* the run layer of reg: what the batteries read (section THE RUN LAYER) */
  void *tr__dist;          /* the MPI strategy's state (TRAIN_MPI, more than one process), else NULL */
  void *tr__dev;           /* TRAIN_CUDA: the device state of an on_device model (section CUDA) */
  int tr__threads;         /* tr_desc.threads, resolved (>= 1) */
  float tr__gscale;        /* clipping's scale, left for the update's pass to apply (1 = none) */
  double tr__mpi_timeout;  /* tr_desc.mpi_timeout, resolved (seconds; < 0 = none) */
  tr_region tr__state[5];  /* what a snapshot of the training state holds (spike_detection) */
  int tr__win_open;        /* an accumulation window has begun and not stepped (on_exception_checkpoint) */
  int64_t tr__win_batch, tr__win_samples; /* epoch_batch and samples_seen where it began */
} tr_trainer;

/* Hand over the model's buffers after tr_init, for a model that allocates them late (llm.c allocates
   its gradients on the first backward: allocate them in a configure_model hook and pass them here).
   NULL keeps a buffer as it is. Not during a training step. The layout (n_params, tensors) stays. */
TRAIN_API tr_err tr_set_buffers(tr_trainer *t, float *params, float *grads);

/* Set up a trainer: validates the model and the optimizer/schedule settings, allocates the optimizer
   state and the tensor views (all allocation happens here, none in the step loop). On error the
   trainer is left freed (tr_free is harmless) and tr_error(t) says why. With TRAIN_MPI and several
   processes it is collective: every rank calls it, and the ranks' models must match (MPI STRATEGY). */
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
   then fires on_checkpoint_saved (ctx->path). path must be a regular file, a symlink (replaced itself,
   never followed) or nothing: a device, a FIFO or a directory there is refused (TR_ERR_IO), never
   replaced. Any failure (a full disk, say) returns TR_ERR_IO naming
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
   ASYNCHRONOUS SAVES (tr_desc.async_save, or model_checkpoint(async_save=true) for requested ones):
   during a run, tr_save fires on_save_checkpoint, copies parameters, optimizer state (the gradients
   inside a window), the data's position and the hooks' state into a staging buffer (allocated at the
   first such save, reused after) and returns TR_OK; a background thread writes the same bytes with the
   same guarantees. on_checkpoint_saved fires at the trainer's next safe point (after a training batch,
   at the next save, or when the run ends) once the file is on disk; a failed write fails the run there
   (TR_ERR_IO, "tr_save (in the background): ..."), the previous file intact. One save in flight: the
   next tr_save first waits for it (saves are not coalesced). The run ends (teardown) only after the
   last one is on disk. Outside a run, and from on_exception or teardown, tr_save writes at once. TRAIN_MPI: rank 0 writes in the
   background; the other ranks fire on_checkpoint_saved at once. Ctrl-C during a background write is
   taken by the loop's thread (the writer blocks signals: tr_run_save above).
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

/* The message of the last failure. Empty after a run (tr_fit, tr_validate, ...) that returned TR_OK,
   even if a hook's call was refused during it (the hook saw that message when its call returned). */
TRAIN_API const char *tr_error(const tr_trainer *t);
TRAIN_API const char *tr_err_name(tr_err e);


/* A histogram of the gradients (every view, in order): counts[0..bins-1] for equal-width bins over
   [lo, hi), then counts[bins] = values below lo, counts[bins+1] = at or above hi, counts[bins+2] =
   NaN/Inf (bins+3 entries, yours). The same binning on the CPU and on the GPU (one copy back from the
   device). bins in 1..4096, lo < hi, both finite. */
TRAIN_API tr_err tr_grad_histogram(tr_trainer *t, float lo, float hi, int bins, uint64_t *counts);
/* The bin of x (width = (hi - lo) / bins, as a float): one definition for the CPU and the GPU kernel
   (TR__HD), so both count exactly alike. NaN/Inf are told by the bits (-ffast-math safe). */
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

/* Calls so far that made the host wait for the GPU (device-to-host copies, synchronisations) in the
   TRAIN_CUDA build; 0 without it. A training step with nothing registered makes none (section CUDA). */
TRAIN_API unsigned long long tr_cuda_sync_count(void);
/* Micro-batches per optimizer step from the next window on (accumulation_scheduler calls it at each
   on_train_epoch_start). factor >= 1; during a fit only; tr_config.accumulate_grad_batches sets it
   at the start of every fit. TR_ERR_INVALID outside a fit or for factor < 1. */
TRAIN_API tr_err tr_set_accumulation(tr_trainer *t, int factor);

#endif /* TRAIN_NO_TRAINER */

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
/* Forgetting hooks.h's implementation gives hundreds of undefined hk_* symbols at link time with no
   hint; this says it at once. A program with hooks.h's implementation in another file says so. */
#if !defined(HOOKS_IMPLEMENTATION) && !defined(TRAIN_HOOKS_ELSEWHERE)
#  error "train.h: TRAIN_IMPLEMENTATION needs hooks.h's implementation: #define HOOKS_IMPLEMENTATION too, before #include \"train.h\" in this file (or, when another file of the program defines it, #define TRAIN_HOOKS_ELSEWHERE here)"
#endif

#include <limits.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__unix__) || defined(__APPLE__)
#  include <dirent.h>
#  include <fcntl.h>
#  include <sys/ioctl.h>
#  include <sys/stat.h>
#  include <sys/time.h>
#  include <sys/types.h>
#  include <unistd.h>
#  define TR__POSIX 1
#endif
#if defined(TR__POSIX) && !defined(TRAIN_NO_THREADS)
#  include <pthread.h> /* asynchronous saves: one background writer */
#  include <signal.h>
#  define TR__THREADS 1
/* The writer thread is made with every signal blocked, so that Ctrl-C/SIGTERM always reach a thread
   of the loop (and never interrupt the writer's write or fsync). A strict -std=c99 <signal.h> hides
   sigset_t and pthread_sigmask; glibc's are known (pthread.h gives __sigset_t), elsewhere without
   _POSIX_C_SOURCE the writer keeps the caller's mask (the handlers only count, and it retries EINTR). */
#  if defined(SIG_SETMASK)
#    define TR__SIGMASK 1
#    define TR__SIG_SETMASK SIG_SETMASK
typedef sigset_t tr__sigset;
#  elif defined(__GLIBC__) && !defined(__cplusplus)
#    define TR__SIGMASK 1
#    define TR__SIG_SETMASK 2 /* glibc's SIG_SETMASK on every architecture */
typedef __sigset_t tr__sigset;
extern int sigfillset(__sigset_t *set);
extern int pthread_sigmask(int how, const __sigset_t *set, __sigset_t *old);
#  endif
#endif
#if defined(TR__POSIX) && !defined(__cplusplus) /* strict -std=c99 headers hide these POSIX calls */
extern int lstat(const char *path, struct stat *st);
extern ssize_t readlink(const char *path, char *buf, size_t len);
extern int ftruncate(int fd, off_t length);
#endif
#ifdef TRAIN_MPI /* the MPI strategy; C bindings only (the C++ ones are deprecated and warn) */
#  ifndef OMPI_SKIP_MPICXX
#    define OMPI_SKIP_MPICXX 1
#  endif
#  ifndef MPICH_SKIP_MPICXX
#    define MPICH_SKIP_MPICXX 1
#  endif
#  include <mpi.h>
#  ifdef TRAIN_CUDA
#    include <nccl.h> /* device gradients are summed by NCCL (in the CUDA toolkit) */
#  endif
#endif
#ifndef TRAIN_ASSERT
#  include <assert.h>
#  define TRAIN_ASSERT(c) assert(c)
#endif
#if defined(__GNUC__) || defined(__clang__)
#  define TR__PRINTF(a, b) __attribute__((format(printf, a, b)))
#  define TR__NOINLINE __attribute__((noinline))
#  define TR__SHARED static __attribute__((unused)) /* a helper of several sections: some may be left out */
#else
#  define TR__PRINTF(a, b)
#  define TR__NOINLINE
#  define TR__SHARED static
#endif

#ifdef TRAIN_CUDA /* the kernels come with the implementation (section CUDA): this file is built by nvcc */
#  ifndef TRAIN_CUDA_NO_KERNELS /* the program links its own trc_* functions (tests/cuda_host.h: on the CPU) */
#    define TRAIN_CUDA_IMPLEMENTATION
#  endif
#  include "kernels/train_cuda.cuh"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The run layer's private part (section THE RUN LAYER). */
typedef struct tr__run_dir { char *base, *dir; struct tr__run_dir *next; } tr__run_dir;
enum { TR__RUN_SAVE_DIR, TR__RUN_NAME, TR__RUN_VERSION, TR__RUN_OPTIMIZER, TR__RUN_HPARAMS, TR__RUN_SAVE_TO, TR__RUN_STRS };
struct tr__hparam;
#define TR__HPARAM_KEY 64   /* tr_run_hparam: a key's bytes, its NUL included */
#define TR__HPARAM_VAL 256  /* and a value's */
typedef struct tr__user_hp { char *key, *val; int kind; } tr__user_hp; /* kind: tr__hparam's num */
typedef tr_err (*tr__save_fn)(void *user, hk_ctx *ctx, const char *path, char *why, size_t cap);
typedef struct tr__run_priv {
  tr_log_record rec;         /* the record being built; histograms wait here for the next record */
  tr__run_dir *dirs;         /* the version directory each save_dir/name got: the registry's loggers share it */
  char *dir;                 /* the run's directory: the first one a logger opened or tr_run_dir gave
                                (model_checkpoint's default dirpath is its checkpoints/); NULL: none yet */
  tr__user_hp *hp;           /* tr_run_hparam's, in the order given */
  int n_hp;
  char *strs[TR__RUN_STRS];  /* tr_run_desc's strings, copied */
  char *resume;              /* run->resume_from */
  char error[512];           /* tr_run_error */
  tr_err err;
  hk_registry *reg;
  uint64_t stamp[3];         /* hk_metric_stamp(ctx, NULL) at the last train, val and test record */
  int64_t last_step;         /* global_step at the last safe point: a training record is due only when it moved */
  int signals;               /* tr_run_start installed the stop signals */
  int rank;                  /* this process's global rank (ctx->rank of tr_run_start, the trainer's); -1: not known yet */
  int stop_pending;          /* a hook asked to stop while tr_run_start fired */
  int own_loop;              /* tr_run_start began the run (a hand-written loop, not the trainer) */
  const int *epoch_done;     /* the trainer's "the epoch's last batch has run" (tr_stop_allowed) */
  int (*set_accumulation)(void *trainer, int factor); /* the trainer's tr_set_accumulation */
  int (*val_follows)(const void *trainer, int64_t step, int stepped); /* the trainer validates right after this batch */
  int fixed_accumulation;    /* the trainer's tr_config.accumulate_grad_batches (accumulation_scheduler refuses > 1) */
  int (*hparams)(const void *trainer, struct tr__hparam *h, int cap); /* the trainer's configuration */
  struct tr__bar *bar;       /* the registry's progress bar (one at most) */
  void (*above)(struct tr__bar *bar, FILE *f, const char *text); /* write text above the live bar (tr_print) */
  hk_bytes refused;          /* metric names a record could not take, each reported once (NUL-separated) */
  struct tr__asave *asave;   /* the background writer of asynchronous saves (made at the first one) */
  int async_requests;        /* model_checkpoint(async_save): requested checkpoints are written in the background */
  int in_request;            /* honouring HK_REQUEST_CHECKPOINT now */
  int sync_only;             /* the run's last save has been collected (on_exception, teardown): saves write at once */
  const tr_region *state;    /* the trainer's training state (spike_detection's snapshot), else NULL: the desc's */
  int n_state;
  void (*rolled_back)(void *trainer); /* the trainer after spike_detection put its state back */
  tr__save_fn save_failed;   /* the trainer's save of its state after the last optimizer step (on_exception_checkpoint) */
} tr__run_priv;
/* The run layer's pieces the trainer calls (section THE RUN LAYER). */
static void tr__run_write(const tr_run *run, FILE *f, const char *text);
static void tr__run_send(tr_run *run, hk_ctx *ctx, const char *stage, hk_flow *flow);
static void tr__run_log_line(const tr_run *run, hk_ctx *ctx);
static tr_err tr__run_checkpoints(hk_ctx *ctx, const char *dflt_path, tr__save_fn save, void *user, char *why, size_t cap,
                                  int *no_default);
static void tr__msg(char *dst, size_t cap, const char *fmt, ...) TR__PRINTF(3, 4);
#ifndef TRAIN_NO_TRAINER /* the trainer's own pieces, defined in its section */
static tr_err tr__load_file(tr_trainer *t, const char *path);
static uint64_t tr__default_ckpt_limit(const tr_trainer *t);
static int tr__hparams(const void *trainer, struct tr__hparam *h, int cap);
static int tr__set_accumulation(void *trainer, int factor);
static int tr__val_follows(const void *trainer, int64_t step, int stepped);
static void tr__run_configure(tr_trainer *t, hk_stage stage, const tr_config *c);
/* The MPI strategy (section "MPI STRATEGY", at the end): each does nothing in a single process.
   tr__dist_init and the tr__dist_start_* agreements also run on a rank whose own checks failed
   (`failed`, its error): it takes part, so that every rank fails instead of some hanging. */
static tr_err  tr__dist_init(tr_trainer *t, tr_err failed);
static tr_err  tr__dist_start_fit(tr_trainer *t, const tr_config *c, tr_err failed);
static tr_err  tr__dist_start_eval(tr_trainer *t, hk_stage stage, const tr_data *data, int64_t limit, tr_err failed);
static void    tr__dist_check_resumed(tr_trainer *t);
static void    tr__dist_free(tr_trainer *t);
static void    tr__dist_agree_at(tr_trainer *t, int site);
/* Each agreement point is told apart by its line (site = 2 * line): ranks at different points are out of step. */
#define tr__dist_agree(t) tr__dist_agree_at((t), 2 * __LINE__)
static int64_t tr__dist_shard(tr_trainer *t, const tr_data *d, int64_t n, int equal, const char *what);
static int64_t tr__dist_index(const tr_trainer *t, int64_t b);
static int     tr__dist_empty(const tr_trainer *t, int64_t n);
static void    tr__dist_grads(tr_trainer *t);
static void    tr__dist_mean(tr_trainer *t, double *sum, int64_t *counted);
static void    tr__dist_paths(tr_trainer *t);
static void    tr__dist_save_file(tr_trainer *t, const char *path);
static double tr__grad_norm_metric(const hk_ctx *ctx, void *user); /* the step's work, below */
#endif /* TRAIN_NO_TRAINER */
static void tr__putf(hk_bytes *b, const char *fmt, ...) TR__PRINTF(2, 3); /* text into a buffer (loggers) */

/* ---- little-endian integers (checkpoints, callback state) ---------------------------------------- */
#define TR__MAX_COUNT ((int64_t)1 << 53) /* loop counters stay exact as doubles and cannot overflow */
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

/* ---- errors --------------------------------------------------------------------------------------- */

TRAIN_API const char *tr_err_name(tr_err e) {
  static const char *const names[TR_ERR_COUNT] = {
#define TR__X(sym, name, doc) name,
    TR_ERRORS(TR__X)
#undef TR__X
  };
  return (e >= 0 && e < TR_ERR_COUNT) ? names[e] : "unknown error";
}

#ifndef TRAIN_NO_TRAINER /* the trainer's errors */
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
static void tr__warn(tr_trainer *t, const char *fmt, ...) { /* one line in one write, "[rank: N] " first with several processes */
  va_list ap;
  FILE *f = t->tr__log ? t->tr__log : stderr;
  char line[1024];
  size_t n = t->ctx.world_size > 1 ? (size_t)snprintf(line, sizeof line, "[rank: %d] ", t->ctx.rank) : 0;
  n += (size_t)snprintf(line + n, sizeof line - n, "train.h: warning: ");
  va_start(ap, fmt);
  vsnprintf(line + n, sizeof line - n, fmt, ap);
  va_end(ap);
  n = strlen(line);
  if (n + 1 >= sizeof line) n = sizeof line - 2;
  line[n++] = '\n';
  line[n] = 0;
  tr__run_write(t->tr__run, f, line);
}
#endif /* TRAIN_NO_TRAINER */


/* ---- files written whole: one atomic writer for checkpoints, loggers and plots (no section's own) ----
   Every file train.h writes whole (a checkpoint, metrics.csv when its columns change, hparams.yaml, the
   first part of metrics.jsonl and of a TensorBoard file, an SVG plot, lr_finder's curve) goes through
   tr__afile: a new temporary file <path>.tmp.<pid>.<n>, created with O_CREAT|O_EXCL|O_NOFOLLOW (an
   existing file or a symlink planted at that name is never opened, let alone written through), written,
   flushed to the disk (fsync), then renamed over path, and the directory fsynced: a crash at any moment
   leaves the old file or the new one, never half of one. What is at path is replaced only when it is a
   regular file (TR__AF_LINK_OK: or a symlink, replaced itself, never followed); a device, a FIFO, a
   socket or a directory is never replaced (a plain rename would put a regular file in a device's place).
   A temporary file left by a writer that was killed is removed by the next write to the same path (those
   whose process no longer exists, where /proc tells). A file that is appended to afterwards (a log) keeps
   the temporary's descriptor (tr__afile_commit's keep_fd): it is never opened again by name. */
#if defined(O_NOFOLLOW)
#  define TR__O_NOFOLLOW O_NOFOLLOW
#elif defined(__O_NOFOLLOW)
#  define TR__O_NOFOLLOW __O_NOFOLLOW /* glibc under strict -std=c99 hides the name, not the flag */
#else
#  define TR__O_NOFOLLOW 0
#endif
#if defined(O_CLOEXEC)
#  define TR__O_CLOEXEC O_CLOEXEC
#elif defined(__O_CLOEXEC)
#  define TR__O_CLOEXEC __O_CLOEXEC
#else
#  define TR__O_CLOEXEC 0
#endif
#if defined(S_ISLNK)
#  define TR__S_ISLNK(m) S_ISLNK(m)
#elif defined(__S_IFLNK) && defined(__S_IFMT)
#  define TR__S_ISLNK(m) (((m) & __S_IFMT) == __S_IFLNK)
#else
#  define TR__S_ISLNK(m) 0
#endif

/* write() all of it; 0 or errno. *done (may be NULL) gets the bytes that were written. */
static int tr__fd_write_n(int fd, const void *data, size_t n, size_t *done) {
  size_t at = 0;
  int e = 0;
#ifdef TR__POSIX
  const char *p = (const char *)data;
  while (at < n) {
    ssize_t w = write(fd, p + at, n - at);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) { e = w < 0 ? errno : EIO; break; }
    at += (size_t)w;
  }
#else
  (void)fd; (void)data; (void)n;
  e = ENOSYS;
#endif
  if (done) *done = at;
  return e;
}
static int tr__fd_write(int fd, const void *data, size_t n) { return tr__fd_write_n(fd, data, n, NULL); }

#ifdef TR__POSIX
/* Temporary files of path whose process is gone. unlink removes a name, never what a symlink points
   to, so a planted link costs nothing either. (kill is not declared by a strict -std=c99 build.) */
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
  int tries, fd = -1, flags = O_WRONLY | O_CREAT | O_EXCL | TR__O_NOFOLLOW | TR__O_CLOEXEC;
  for (tries = 0; tries < 100 && fd < 0; tries++) {
#if defined(__GNUC__) || defined(__clang__) /* the background writer opens temporaries too */
    unsigned n = __atomic_fetch_add(&counter, 1u, __ATOMIC_RELAXED);
#else
    unsigned n = counter++;
#endif
    snprintf(tmp, cap, "%s.tmp.%ld.%u", path, (long)getpid(), n);
    fd = open(tmp, flags, 0644); /* the umask applies, as to any new file */
    if (fd < 0 && errno != EEXIST && errno != EINTR) break;
  }
  return fd;
}

/* 1 when what is at path may be replaced: nothing, a regular file, a symlink with link_ok. */
static int tr__replaceable(const char *path, int link_ok) {
  struct stat st;
  if (lstat(path, &st) != 0) return 1; /* nothing there (or the rename will say why not) */
  return S_ISREG(st.st_mode) || (link_ok && TR__S_ISLNK(st.st_mode));
}
#endif

enum { TR__AF_LINK_OK = 1 };
typedef struct tr__afile {
  const char *path;
  char *tmp;           /* the temporary's name */
#ifdef TR__POSIX
  int fd;
#else
  FILE *f;
#endif
  int err;             /* 0, or the errno of the first failure (EEXIST: path is not a regular file) */
  int special;         /* the failure: path is there and is not a regular file */
  const char *step;    /* what failed: "creating", "writing" or "renaming" */
  unsigned flags;
  int done;            /* committed: the temporary is path now */
} tr__afile;

static int tr__afile_open(tr__afile *a, const char *path, unsigned flags) {
  size_t cap = strlen(path) + 64;
  memset(a, 0, sizeof *a);
  a->path = path;
  a->flags = flags;
  a->step = "creating";
#ifdef TR__POSIX
  a->fd = -1;
#endif
  if (!(a->tmp = (char *)malloc(cap))) return a->err = ENOMEM;
#ifdef TR__POSIX
  a->tmp[0] = 0;
  if (!tr__replaceable(path, flags & TR__AF_LINK_OK)) { /* say so before writing anything */
    a->special = 1;
    return a->err = EEXIST;
  }
  tr__remove_stale_temps(path);
  a->fd = tr__open_temp(path, a->tmp, cap);
  if (a->fd < 0) a->err = errno ? errno : EIO;
#else
  snprintf(a->tmp, cap, "%s.tmp", path);
  a->f = fopen(a->tmp, "wb");
  if (!a->f) a->err = errno ? errno : EIO;
#endif
  return a->err;
}

static int tr__afile_write(tr__afile *a, const void *data, size_t n) {
  if (a->err || n == 0) return a->err;
#ifdef TR__POSIX
  a->err = tr__fd_write(a->fd, data, n);
#else
  if (fwrite(data, 1, n, a->f) != n) a->err = errno ? errno : EIO;
#endif
  if (a->err) a->step = "writing";
  return a->err;
}

/* Flush, check path, rename. keep_fd (POSIX, may be NULL) gets the descriptor of the file now at path,
   open for writing at its end; else it is closed. On failure the temporary is removed and path is as
   it was once tr__afile_free (called afterwards in every case) has removed the temporary. Returns 0 or
   errno. */
static int tr__afile_commit(tr__afile *a, int *keep_fd) {
  if (keep_fd) *keep_fd = -1;
#ifdef TR__POSIX
  if (a->fd >= 0) {
    if (!a->err) { /* an interrupted fsync (FUSE, NFS) is asked again */
      int r;
      while ((r = fsync(a->fd)) != 0 && errno == EINTR) {}
      if (r != 0) { a->err = errno; a->step = "writing"; }
    }
    if ((!keep_fd || a->err) && close(a->fd) != 0 && !a->err) { a->err = errno; a->step = "writing"; }
    if (keep_fd && !a->err) *keep_fd = a->fd;
    a->fd = -1;
  }
  if (!a->err && !tr__replaceable(a->path, a->flags & TR__AF_LINK_OK)) { a->err = EEXIST; a->special = 1; a->step = "renaming"; }
#else
  if (a->f) {
    if (fflush(a->f) != 0 && !a->err) { a->err = errno ? errno : EIO; a->step = "writing"; }
    if (fclose(a->f) != 0 && !a->err) { a->err = errno ? errno : EIO; a->step = "writing"; }
    a->f = NULL;
  }
  if (!a->err) remove(a->path); /* rename does not replace files everywhere */
#endif
  if (!a->err && rename(a->tmp, a->path) != 0) { a->err = errno; a->step = "renaming"; }
  if (a->err) {
#ifdef TR__POSIX
    if (keep_fd && *keep_fd >= 0) { close(*keep_fd); *keep_fd = -1; }
#endif
    return a->err; /* tr__afile_free removes the temporary */
  }
  a->done = 1;
#ifdef TR__POSIX
  { /* make the rename itself durable: fsync the directory (best effort) */
    const char *slash = strrchr(a->path, '/');
    int dfd;
    if (slash) {
      char *dir = (char *)malloc((size_t)(slash - a->path) + 2);
      size_t n = (size_t)(slash - a->path) + (slash == a->path);
      dfd = -1;
      if (dir) {
        memcpy(dir, a->path, n);
        dir[n] = 0;
        dfd = open(dir, O_RDONLY);
        free(dir);
      }
    } else dfd = open(".", O_RDONLY);
    if (dfd >= 0) {
      (void)fsync(dfd);
      close(dfd);
    }
  }
#endif
  return 0;
}

/* Release: an uncommitted temporary is removed. */
static void tr__afile_free(tr__afile *a) {
#ifdef TR__POSIX
  if (a->fd >= 0) close(a->fd);
  a->fd = -1;
#else
  if (a->f) fclose(a->f);
  a->f = NULL;
#endif
  if (!a->done && a->tmp && a->tmp[0]) remove(a->tmp);
  free(a->tmp);
  a->tmp = NULL;
}

/* The reason of a failed tr__afile, for a message: "cannot write /x/metrics.csv.tmp.12.0: No space left
   on device", "/x/metrics.csv is not a regular file (a symlink, a device, a FIFO or a directory): it is
   not replaced". */
static void tr__afile_why(const tr__afile *a, char *buf, size_t cap) {
  if (a->special)
    snprintf(buf, cap, "%s is not a regular file (a symlink, a device, a FIFO or a directory): it is not replaced", a->path);
  else if (!strcmp(a->step, "renaming"))
    snprintf(buf, cap, "cannot rename %s to %s: %s", a->tmp ? a->tmp : "", a->path, strerror(a->err));
  else snprintf(buf, cap, "cannot %s %s: %s", !strcmp(a->step, "creating") ? "create" : "write",
                a->tmp && a->tmp[0] ? a->tmp : a->path, strerror(a->err));
}

/* A whole file in one go: 0, or errno with why filled (why may be NULL). keep_fd as tr__afile_commit. */
TR__SHARED int tr__write_whole(const char *path, const void *data, size_t n, unsigned flags, int *keep_fd, char *why, size_t why_len) {
  tr__afile a;
  int e;
  if (tr__afile_open(&a, path, flags) == 0) tr__afile_write(&a, data, n);
  e = a.err ? a.err : tr__afile_commit(&a, keep_fd);
  if (e && why) {
    if (a.tmp) tr__afile_why(&a, why, why_len);
    else snprintf(why, why_len, "out of memory");
  }
  tr__afile_free(&a);
  return e;
}

/* ---- asynchronous saves: the step copies the state, one background thread writes it -----------------
   A save asked for asynchronously (tr_desc.async_save, tr_run_desc.async_save, model_checkpoint's
   async_save) copies everything the file will hold into a staging buffer (allocated at the first such
   save, grown only when the state grows, reused after) and hands it to a writer thread: the thread
   writes it through tr__afile (exclusive temporary, fsync, rename, directory fsync: the guarantees and
   the bytes of a synchronous save), and the loop collects the outcome at its next safe point: then
   on_checkpoint_saved fires, or the error fails the run. One save in flight: the next save waits for
   it (never coalesced: two requests are two files, and each gets its on_checkpoint_saved). Without
   threads (TRAIN_NO_THREADS, not POSIX, pthread_create failing) the writer runs at once in the caller
   and the outcome is collected the same way. */
typedef struct tr__asave tr__asave;
typedef void (*tr__asave_job)(tr__asave *as, tr__afile *a);  /* the writer's side: write the staged file */
typedef void (*tr__asave_done)(tr__asave *as, hk_ctx *ctx); /* the loop's side: on_checkpoint_saved or the error */
struct tr__asave {
  unsigned char *buf;      /* the staging buffer: the loop's while idle, the writer's while busy */
  size_t len, cap;
  char *path;              /* where it goes; ctx->path of its on_checkpoint_saved */
  size_t path_cap;
  tr__asave_job job;
  tr__asave_done done;
  void *owner;             /* the registry (run layer) or the trainer */
  void *job_user;          /* the job's own description (the trainer's snapshot), freed with this */
  int pending;             /* loop thread only: handed over, outcome not yet collected */
  int err;                 /* the write's outcome: 0 or errno; why says what */
  char why[640];
#ifdef TR__THREADS
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int started, busy, quit; /* busy and quit under mu */
#endif
};

static void tr__asave_raw(tr__asave *as, tr__afile *a) { tr__afile_write(a, as->buf, as->len); }

/* The write itself, in whichever thread: the same steps and messages as a synchronous save. */
static void tr__asave_write(tr__asave *as) {
  tr__afile a;
  int e;
  if (tr__afile_open(&a, as->path, TR__AF_LINK_OK) == 0) as->job(as, &a);
  e = a.err ? a.err : tr__afile_commit(&a, NULL);
  as->why[0] = 0;
  if (e && !a.tmp) snprintf(as->why, sizeof as->why, "out of memory writing '%s'", as->path);
  else if (e && a.special)
    snprintf(as->why, sizeof as->why, "'%s' is not a regular file (a device, a FIFO or a directory): it is not replaced", as->path);
  else if (e) snprintf(as->why, sizeof as->why, "%s '%s' failed: %s (the previous '%s' is untouched)", a.step, a.tmp, strerror(e), as->path);
  tr__afile_free(&a);
  as->err = e;
}

#ifdef TR__THREADS
static void *tr__asave_main(void *p) {
  tr__asave *as = (tr__asave *)p;
  pthread_mutex_lock(&as->mu);
  for (;;) {
    while (!as->busy && !as->quit) pthread_cond_wait(&as->cv, &as->mu);
    if (!as->busy) break;
    pthread_mutex_unlock(&as->mu);
    tr__asave_write(as);
    pthread_mutex_lock(&as->mu);
    as->busy = 0;
    pthread_cond_broadcast(&as->cv);
  }
  pthread_mutex_unlock(&as->mu);
  return NULL;
}
#endif

static tr__asave *tr__asave_new(void) {
  tr__asave *as = (tr__asave *)calloc(1, sizeof *as);
#ifdef TR__THREADS
  if (as && pthread_mutex_init(&as->mu, NULL) != 0) { free(as); return NULL; }
  if (as && pthread_cond_init(&as->cv, NULL) != 0) { pthread_mutex_destroy(&as->mu); free(as); return NULL; }
#endif
  return as;
}

/* Room for n staged bytes (the bytes there are kept): 0 or ENOMEM. Only while nothing is in flight. */
static int tr__asave_reserve(tr__asave *as, size_t n) {
  unsigned char *p;
  if (n <= as->cap) return 0;
  if (!(p = (unsigned char *)realloc(as->buf, n))) return ENOMEM;
  as->buf = p;
  as->cap = n;
  return 0;
}
static int tr__asave_set_path(tr__asave *as, const char *path) {
  size_t n = strlen(path) + 1;
  if (n > as->path_cap) {
    char *p = (char *)realloc(as->path, n);
    if (!p) return ENOMEM;
    as->path = p;
    as->path_cap = n;
  }
  memcpy(as->path, path, n);
  return 0;
}

/* Hand the staged file over (buf, len, path, job, done, owner set): returns at once when the writer
   thread runs, else after writing it here. */
static void tr__asave_submit(tr__asave *as) {
  as->pending = 1;
  as->err = 0;
#ifdef TR__THREADS
  if (!as->started) {
#  ifdef TR__SIGMASK /* the thread inherits a mask with everything blocked; the caller's comes back */
    tr__sigset all, old;
    int masked = sigfillset(&all) == 0 && pthread_sigmask(TR__SIG_SETMASK, &all, &old) == 0;
    as->started = pthread_create(&as->th, NULL, tr__asave_main, as) == 0;
    if (masked) (void)pthread_sigmask(TR__SIG_SETMASK, &old, NULL);
#  else
    as->started = pthread_create(&as->th, NULL, tr__asave_main, as) == 0;
#  endif
  }
  if (as->started) {
    pthread_mutex_lock(&as->mu);
    as->busy = 1;
    pthread_cond_broadcast(&as->cv);
    pthread_mutex_unlock(&as->mu);
    return;
  }
#endif
  tr__asave_write(as);
}

/* 1 when the save handed over has ended (wait: once it has), its outcome in err/why: the caller
   collects it (done). 0 when none is in flight, or it is still being written. */
static int tr__asave_ended(tr__asave *as, int wait) {
  int busy = 0;
  (void)wait;
  if (!as || !as->pending) return 0;
#ifdef TR__THREADS
  if (as->started) {
    pthread_mutex_lock(&as->mu);
    while (wait && as->busy) pthread_cond_wait(&as->cv, &as->mu);
    busy = as->busy;
    pthread_mutex_unlock(&as->mu);
  }
#endif
  if (busy) return 0;
  as->pending = 0;
  return 1;
}

/* Collect the save in flight at a safe point (wait: until it is on disk): its done runs here, in the
   loop's thread. */
static void tr__asave_settle(tr__asave *as, hk_ctx *ctx, int wait) {
  if (as && as->pending && tr__asave_ended(as, wait)) as->done(as, ctx);
}

/* The last save finishes first; an outcome nobody collected (a registry destroyed in the middle of a
   run) is said on stderr, never lost silently. */
static void tr__asave_free(tr__asave *as) {
  if (!as) return;
  if (tr__asave_ended(as, 1) && as->err) fprintf(stderr, "train.h: a checkpoint written in the background failed: %s\n", as->why);
#ifdef TR__THREADS
  if (as->started) {
    pthread_mutex_lock(&as->mu);
    as->quit = 1;
    pthread_cond_broadcast(&as->cv);
    pthread_mutex_unlock(&as->mu);
    pthread_join(as->th, NULL);
  }
  pthread_cond_destroy(&as->cv);
  pthread_mutex_destroy(&as->mu);
#endif
  free(as->buf);
  free(as->path);
  free(as->job_user);
  free(as);
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

#ifndef TRAIN_NO_TRAINER
/* The shuffle of epoch e gets its own generator, derived from the seed and e alone, so that an
   epoch resumed from a checkpoint sees exactly the order it had the first time. */
static tr_rng tr__epoch_rng(uint64_t seed, int64_t epoch) {
  tr_rng r;
  tr_rng_seed(&r, seed ^ 0x5DEECE66Dull);
  r.state = tr_rng_u64(&r) ^ ((uint64_t)epoch * 0xD1B54A32D192ED03ull);
  return r;
}
#endif

/* ---- learning-rate schedule ------------------------------------------------------------------------ */

TRAIN_API const char *tr_sched_kind_name(tr_sched_kind k) {
  static const char *const names[] = {
#define TR__X(sym, name) name,
    TR_SCHED_KINDS(TR__X)
#undef TR__X
  };
  return (int)k >= 0 && (int)k < TR_SCHED_KIND_COUNT ? names[k] : "?";
}

static double tr__anneal(tr_anneal a, double from, double to, double pct) {
  if (a == TR_ANNEAL_LINEAR) return (to - from) * pct + from;          /* PyTorch's _annealing_linear */
  return to + (from - to) / 2.0 * (cos(3.141592653589793 * pct) + 1); /* ... _annealing_cos */
}

/* OneCycleLR.get_lr at step t (PyTorch's phases and float arithmetic, in double). */
static double tr__onecycle(const tr_sched *s, double base_lr, int64_t t) {
  double max_lr = s->max_lr > 0 ? s->max_lr : base_lr, div = s->div_factor > 0 ? s->div_factor : 25.0;
  double fin = s->final_div_factor > 0 ? s->final_div_factor : 1e4, pct = s->pct_start > 0 ? s->pct_start : 0.3;
  double initial = max_lr / div, min_lr = initial / fin, total = (double)s->total;
  double end[3], from[3], to[3], start = 0, step;
  int n, i;
  end[0] = pct * total - 1; from[0] = initial; to[0] = max_lr;
  if (s->three_phase) {
    end[1] = 2 * pct * total - 2; from[1] = max_lr; to[1] = initial;
    end[2] = total - 1;           from[2] = initial; to[2] = min_lr;
    n = 3;
  } else {
    end[1] = total - 1; from[1] = max_lr; to[1] = min_lr;
    n = 2;
  }
  step = (double)(t < s->total - 1 ? t : s->total - 1); /* past the end: the last value */
  for (i = 0; i < n; i++) {
    if (step <= end[i] || i == n - 1) return tr__anneal(s->anneal, from[i], to[i], (step - start) / (end[i] - start));
    start = end[i];
  }
  return min_lr;
}

TRAIN_API double tr_lr_at(const tr_sched *s, double base_lr, int64_t t) {
  int64_t warmup = s->warmup > 0 ? s->warmup : 0, u;
  double m = s->min_factor;
  if (t < 0) t = 0;
  if (s->kind == TR_SCHED_ONECYCLE) return s->total > 0 ? tr__onecycle(s, base_lr, t) : base_lr;
  if (t < warmup) return base_lr * (double)(t + 1) / (double)warmup;
  u = t - warmup;
  switch (s->kind) {
  case TR_SCHED_STEP: {
    double gamma = s->gamma > 0 ? s->gamma : 0.1;
    int64_t size = s->step_size > 0 ? s->step_size : 1;
    return base_lr * pow(gamma, (double)(u / size));
  }
  case TR_SCHED_EXPONENTIAL: return base_lr * pow(s->gamma > 0 ? s->gamma : 0.1, (double)u);
  case TR_SCHED_COSINE: {
    double T = (double)(s->total - warmup), x = (double)u;
    if (T <= 0) return base_lr * m;
    if (x > T) x = T;
    return base_lr * (m + (1.0 - m) * 0.5 * (1.0 + cos(3.141592653589793 * x / T)));
  }
  case TR_SCHED_LINEAR: {
    double T = (double)(s->total - warmup), r;
    if (T <= 0) return base_lr * m;
    r = (T - (double)u) / T;
    return base_lr * (m + (1.0 - m) * (r > 0 ? r : 0));
  }
  case TR_SCHED_WSD: {
    int64_t stable = s->total - warmup - s->decay;
    double p, d;
    if (u < stable) return base_lr;
    if (u >= stable + s->decay || s->decay <= 0) return base_lr * m;
    p = (double)(u - stable) / (double)s->decay;
    d = s->anneal == TR_ANNEAL_LINEAR ? 1.0 - p : s->anneal == TR_ANNEAL_SQRT ? 1.0 - sqrt(p) : 0.5 * (1.0 + cos(3.141592653589793 * p));
    return base_lr * (m + (1.0 - m) * d);
  }
  default: return base_lr; /* constant and plateau (after their warmup, if any) */
  }
}

TRAIN_API double tr_sched_lr(const tr_sched *s, const tr_sched_state *st, double base_lr, int64_t t) {
  double scale = st && st->scale > 0 ? st->scale : 1.0;
  if (s->kind == TR_SCHED_PLATEAU && st && st->plateau_lr > 0 && t >= s->warmup) return st->plateau_lr * scale;
  return tr_lr_at(s, base_lr, t) * scale;
}

/* PyTorch's ReduceLROnPlateau.step(metrics), its is_better and _reduce_lr, for one parameter group. */
TRAIN_API int tr_plateau_step(const tr_sched *s, tr_sched_state *st, double base_lr, double metric) {
  int max = s->mode == 1, rel = s->threshold_mode == 0, better;
  double th = s->threshold, lr = st->plateau_lr > 0 ? st->plateau_lr : base_lr, eps = s->eps;
  double factor = s->factor > 0 ? s->factor : 0.1, next;
  int64_t patience = s->patience == TR_ZERO ? 0 : s->patience == 0 ? 10 : s->patience;
  if (th == 0 && !signbit(th)) th = 1e-4;
  if (eps == 0 && !signbit(eps)) eps = 1e-8;
  if (st->checks == 0) st->best = max ? -HUGE_VAL : HUGE_VAL; /* mode_worse */
  st->checks++;
  if (!max && rel) better = metric < st->best * (1.0 - th);
  else if (!max)   better = metric < st->best - th;
  else if (rel)    better = metric > st->best * (th + 1.0);
  else             better = metric > st->best + th;
  if (better) { st->best = metric; st->num_bad = 0; }
  else st->num_bad++;
  if (st->cooldown > 0) { st->cooldown--; st->num_bad = 0; }
  if (st->num_bad <= patience) return 0;
  st->cooldown = s->cooldown;
  st->num_bad = 0;
  next = lr * factor > s->min_lr ? lr * factor : s->min_lr;
  if (lr - next > eps) { st->plateau_lr = next; return 1; }
  return 0;
}

#define TR__SCHED_BAD(...) do { if (why && cap) snprintf(why, cap, __VA_ARGS__); return TR_ERR_INVALID; } while (0)
TRAIN_API tr_err tr_sched_check(tr_sched *s, int64_t total, char *why, size_t cap) {
  const char *k = tr_sched_kind_name(s->kind);
  if (why && cap) why[0] = 0;
  if ((int)s->kind < 0 || (int)s->kind >= TR_SCHED_KIND_COUNT)
    TR__SCHED_BAD("sched.kind %d is not a schedule (TR_SCHED_CONSTANT .. TR_SCHED_EXPONENTIAL)", (int)s->kind);
  if (s->warmup < 0 || s->step_size < 0 || s->total < 0 || s->decay < 0)
    TR__SCHED_BAD("sched.warmup, step_size, total and decay must be >= 0 (%s: %lld, %lld, %lld, %lld)", k,
                  (long long)s->warmup, (long long)s->step_size, (long long)s->total, (long long)s->decay);
  if (s->kind == TR_SCHED_STEP && s->step_size == 0) TR__SCHED_BAD("the step schedule needs sched.step_size");
  if (s->kind == TR_SCHED_EXPONENTIAL && s->gamma == 0) TR__SCHED_BAD("the exponential schedule needs sched.gamma (> 0, e.g. 0.99)");
  if ((s->gamma == 0 && signbit(s->gamma)) || (s->factor == 0 && signbit(s->factor)) || (s->pct_start == 0 && signbit(s->pct_start)) ||
      (s->div_factor == 0 && signbit(s->div_factor)) || (s->final_div_factor == 0 && signbit(s->final_div_factor)))
    TR__SCHED_BAD("%s: gamma, factor, pct_start, div_factor and final_div_factor cannot be 0 (leave them out for the defaults)", k);
  if (s->gamma == 0) s->gamma = 0.1;
  if (!(s->gamma > 0) || !(s->gamma < HUGE_VAL)) TR__SCHED_BAD("%s: sched.gamma must be > 0 and finite, got %g", k, s->gamma);
  if (!(s->min_factor >= 0 && s->min_factor <= 1)) TR__SCHED_BAD("%s: sched.min_factor must be in [0, 1], got %g", k, s->min_factor);
  if (s->kind == TR_SCHED_PLATEAU) {
    if (memchr(s->monitor, 0, sizeof s->monitor) == NULL) TR__SCHED_BAD("plateau: sched.monitor is not NUL-terminated within %d bytes", TR_SCHED_NAME_MAX);
    if (!s->monitor[0]) strcpy(s->monitor, "val/loss");
    if (s->mode != 0 && s->mode != 1) TR__SCHED_BAD("plateau: sched.mode must be 0 (min) or 1 (max), got %d", s->mode);
    if (s->threshold_mode != 0 && s->threshold_mode != 1) TR__SCHED_BAD("plateau: sched.threshold_mode must be 0 (rel) or 1 (abs), got %d", s->threshold_mode);
    if (s->factor == 0) s->factor = 0.1;
    if (s->patience == 0) s->patience = 10;
    if (s->threshold == 0 && !signbit(s->threshold)) s->threshold = 1e-4; /* TR_ZERO_F stays: an explicit 0 */
    if (s->eps == 0 && !signbit(s->eps)) s->eps = 1e-8;
    if (!(s->factor > 0 && s->factor < 1)) TR__SCHED_BAD("plateau: sched.factor must be in (0, 1) (new lr = lr * factor), got %g", s->factor);
    if (s->patience < 0 && s->patience != TR_ZERO) TR__SCHED_BAD("plateau: sched.patience must be >= 0 (0 = 10, TR_ZERO = 0), got %d", s->patience);
    if (s->cooldown < 0) TR__SCHED_BAD("plateau: sched.cooldown must be >= 0, got %d", s->cooldown);
    if (!(s->threshold >= 0 && s->threshold < HUGE_VAL)) TR__SCHED_BAD("plateau: sched.threshold must be >= 0 and finite, got %g", s->threshold);
    if (!(s->min_lr >= 0 && s->min_lr < HUGE_VAL)) TR__SCHED_BAD("plateau: sched.min_lr must be >= 0 and finite, got %g", s->min_lr);
    if (!(s->eps >= 0 && s->eps < HUGE_VAL)) TR__SCHED_BAD("plateau: sched.eps must be >= 0 and finite, got %g", s->eps);
  }
  if (s->kind == TR_SCHED_ONECYCLE || s->kind == TR_SCHED_WSD) {
    if ((int)s->anneal < 0 || (int)s->anneal > TR_ANNEAL_SQRT) TR__SCHED_BAD("%s: sched.anneal %d is not cos, linear or 1-sqrt", k, (int)s->anneal);
  }
  if (s->kind == TR_SCHED_ONECYCLE) {
    if (s->anneal == TR_ANNEAL_SQRT) TR__SCHED_BAD("onecycle: sched.anneal must be cos or linear (1-sqrt is wsd's)");
    if (s->pct_start == 0) s->pct_start = 0.3;
    if (s->div_factor == 0) s->div_factor = 25;
    if (s->final_div_factor == 0) s->final_div_factor = 1e4;
    if (!(s->pct_start > 0 && s->pct_start < 1)) TR__SCHED_BAD("onecycle: sched.pct_start must be in (0, 1), got %g", s->pct_start);
    if (s->three_phase && !(s->pct_start < 0.5)) TR__SCHED_BAD("onecycle: three_phase needs sched.pct_start < 0.5 (up, then down as long), got %g", s->pct_start);
    if (!(s->max_lr >= 0 && s->max_lr < HUGE_VAL)) TR__SCHED_BAD("onecycle: sched.max_lr must be > 0 and finite (0 = optim.lr), got %g", s->max_lr);
    if (!(s->div_factor > 0 && s->div_factor < HUGE_VAL) || !(s->final_div_factor > 0 && s->final_div_factor < HUGE_VAL))
      TR__SCHED_BAD("onecycle: sched.div_factor and final_div_factor must be > 0 and finite, got %g and %g", s->div_factor, s->final_div_factor);
    if (s->warmup) TR__SCHED_BAD("onecycle: sched.warmup must be 0 (pct_start is its warmup), got %lld", (long long)s->warmup);
  }
  if (s->kind == TR_SCHED_WSD && s->decay == 0) TR__SCHED_BAD("wsd: sched.decay (the final decay's scheduler steps) is required, e.g. 10%% of total");
  if (total > 0) {
    if ((s->kind == TR_SCHED_COSINE || s->kind == TR_SCHED_LINEAR) && total <= s->warmup)
      TR__SCHED_BAD("the %s schedule needs sched.total (or max_steps / max_epochs) greater than sched.warmup (%lld <= %lld)", k,
                    (long long)total, (long long)s->warmup);
    if (s->kind == TR_SCHED_WSD && total < s->warmup + s->decay)
      TR__SCHED_BAD("wsd: sched.total (or max_steps / max_epochs) must be >= warmup + decay (%lld < %lld + %lld)",
                    (long long)total, (long long)s->warmup, (long long)s->decay);
    if (s->kind == TR_SCHED_ONECYCLE) { /* every phase at least one step long (PyTorch divides by zero otherwise) */
      double e1 = s->pct_start * (double)total - 1, e2 = s->three_phase ? 2 * s->pct_start * (double)total - 2 : (double)total - 1;
      if (!(e1 > 0 && e2 > e1 && (double)total - 1 > (s->three_phase ? e2 : e1)))
        TR__SCHED_BAD("onecycle: %lld total steps with pct_start %g leave a phase without steps; give more steps or another pct_start",
                      (long long)total, s->pct_start);
    }
  }
  return TR_OK;
}

/* The spec: one factory per kind on a registry of its own, with the keys TR_SCHED_PARAMS gives that
   kind, so the grammar and the messages are hooks.h's (names the bad part, lists what is valid). */
typedef struct tr__sched_parsing { tr_sched *s; char *why; size_t cap; } tr__sched_parsing;
static int tr__sched_in(const char *kinds, const char *kind, int *required) {
  size_t n = strlen(kind);
  const char *p = kinds;
  *required = 0;
  if (!strcmp(kinds, " *")) return 1;
  while ((p = strstr(p, kind)) != NULL) {
    if (p[-1] == ' ' && (p[n] == 0 || p[n] == ' ' || p[n] == '!')) { *required = p[n] == '!'; return 1; }
    p += n;
  }
  return 0;
}
static hk_err tr__sched_factory(hk_registry *reg, const hk_args *a, void *user) {
  tr__sched_parsing *ps = (tr__sched_parsing *)user;
  tr_sched *s = ps->s;
  int k;
  for (k = 0; k < TR_SCHED_KIND_COUNT; k++)
    if (!strcmp(a->factory, tr_sched_kind_name((tr_sched_kind)k))) s->kind = (tr_sched_kind)k;
#define TR__SCHED_COPY(kind, type, name, def, choices, kinds, doc) TR__SCHED_COPY_##kind(type, name)
#define TR__SCHED_COPY_C_ONLY(type, name)
#define TR__SCHED_COPY_BOOL(type, name)     if (hk_arg_given(a, #name)) s->name = hk_arg_bool(a, #name);
#define TR__SCHED_COPY_INT(type, name)      if (hk_arg_given(a, #name)) s->name = (type)hk_arg_int(a, #name);
#define TR__SCHED_COPY_INT_ZERO(type, name) if (hk_arg_given(a, #name)) s->name = hk_arg_int(a, #name) ? (type)hk_arg_int(a, #name) : TR_ZERO;
#define TR__SCHED_COPY_DOUBLE(type, name)   if (hk_arg_given(a, #name)) s->name = hk_arg_double(a, #name) == 0 ? TR_ZERO_F : hk_arg_double(a, #name);
#define TR__SCHED_COPY_CHOICE(type, name)   if (hk_arg_given(a, #name)) s->name = (type)hk_arg_int(a, #name);
#define TR__SCHED_COPY_NAME(type, name) \
  if (hk_arg_given(a, #name)) { \
    if (strlen(hk_arg_str(a, #name)) >= sizeof s->name) \
      return hk_set_error(reg, HK_ERR_INVALID, "%s: " #name " is longer than %d bytes", a->factory, (int)sizeof s->name - 1); \
    strcpy(s->name, hk_arg_str(a, #name)); }
  TR_SCHED_PARAMS(TR__SCHED_COPY)
  if (tr_sched_check(s, 0, ps->why, ps->cap)) return hk_set_error(reg, HK_ERR_INVALID, "%s", ps->why);
  return HK_OK;
}
static const hk_param tr__sched_params[] = {
#define TR__SCHED_PARAM(kind, type, name, def, choices, kinds, doc) TR__SCHED_PARAM_##kind(name, def, choices, kinds, doc)
#define TR__SCHED_PARAM_C_ONLY(name, def, choices, kinds, doc)   { "", HK_PARAM_INT, def, choices, kinds },
#define TR__SCHED_PARAM_BOOL(name, def, choices, kinds, doc)     { #name, HK_PARAM_BOOL, def, choices, kinds },
#define TR__SCHED_PARAM_INT(name, def, choices, kinds, doc)      { #name, HK_PARAM_INT, def, choices, kinds },
#define TR__SCHED_PARAM_INT_ZERO(name, def, choices, kinds, doc) { #name, HK_PARAM_INT, def, choices, kinds },
#define TR__SCHED_PARAM_DOUBLE(name, def, choices, kinds, doc)   { #name, HK_PARAM_DOUBLE, def, choices, kinds },
#define TR__SCHED_PARAM_CHOICE(name, def, choices, kinds, doc)   { #name, HK_PARAM_CHOICE, def, choices, kinds },
#define TR__SCHED_PARAM_NAME(name, def, choices, kinds, doc)     { #name, HK_PARAM_STRING, def, choices, kinds },
  TR_SCHED_PARAMS(TR__SCHED_PARAM)
}; /* doc holds the kinds column here; the table below hands hooks.h the real docs */
static const char *const tr__sched_docs[] = {
#define TR__SCHED_DOC(kind, type, name, def, choices, kinds, doc) doc,
  TR_SCHED_PARAMS(TR__SCHED_DOC)
};
TRAIN_API tr_err tr_sched_parse(tr_sched *s, const char *spec, char *why, size_t cap) {
  enum { N = (int)(sizeof tr__sched_params / sizeof tr__sched_params[0]) };
  hk_param prm[N];
  hk_registry *reg;
  tr__sched_parsing ps;
  tr_err e = TR_OK;
  int k, i, n, semis = 0;
  const char *c;
  if (why && cap) why[0] = 0;
  if (!s || !spec) TR__SCHED_BAD("tr_sched_parse: no schedule or no spec");
  for (c = spec; *c; c++) semis += *c == ';';
  if (semis) TR__SCHED_BAD("tr_sched_parse: '%s' holds ';': give one schedule, e.g. cosine(warmup=100)", spec);
  memset(s, 0, sizeof *s);
  ps.s = s; ps.why = why; ps.cap = cap;
  if (!(reg = hk_create(NULL))) TR__SCHED_BAD("tr_sched_parse: out of memory");
  for (k = 0; k < TR_SCHED_KIND_COUNT && !e; k++) {
    const char *kind = tr_sched_kind_name((tr_sched_kind)k);
    for (i = n = 0; i < N; i++) {
      int required;
      if (!tr__sched_params[i].key[0] || !tr__sched_in(tr__sched_params[i].doc, kind, &required)) continue;
      prm[n] = tr__sched_params[i];
      prm[n].doc = tr__sched_docs[i];
      if (required) prm[n].def = NULL;
      else if (!prm[n].def) prm[n].def = "0";
      n++;
    }
    if (hk_factory_add(reg, kind, prm, n, tr__sched_factory, &ps, "a learning-rate schedule") != HK_OK) e = TR_ERR_NOMEM;
  }
  if (e) { if (why && cap) snprintf(why, cap, "tr_sched_parse: out of memory"); }
  else if (hk_spec_apply(reg, spec) != HK_OK) {
    if (why && cap) snprintf(why, cap, "tr_sched_parse: %s", hk_last_error(reg));
    e = TR_ERR_INVALID;
  }
  hk_destroy(reg);
  return e;
}

#ifndef TRAIN_NO_TRAINER
/* The lr for the next optimizer step: the schedule's t is steps taken, or epochs finished. */
static double tr__current_lr(const tr_trainer *t) {
  tr_sched s = t->sched;
  s.total = t->tr__total;
  return tr_sched_lr(&s, t->tr__run ? &t->tr__run->lr_state : NULL, t->optim.lr, s.per_epoch ? t->epoch : t->global_step);
}
#endif

#ifndef TRAIN_NO_MATH
/* =================================================================================================
   PER-STEP MATH (CPU kernels)
   The passes declared in "PER-STEP MATH". Each splits its array into chunks of HK_NORM_CHUNK
   elements (256 KiB of floats: a chunk stays in L2 while a pass works on it) and hands whole chunks
   to OpenMP threads; a reduction stores one partial per chunk and adds them in chunk order, so no
   thread count changes a bit. No allocation: partials live on the stack, TR__GROUP chunks at a time.
   ================================================================================================= */
#if defined(__cplusplus) || !defined(__STDC_VERSION__) || __STDC_VERSION__ < 199901L
#  define TR__RESTRICT __restrict
#else
#  define TR__RESTRICT restrict
#endif
/* x86-64 with gcc or clang: AdamW has SSE and AVX kernels (tr__adamw_sse/avx), the AVX one chosen at
   run time, and with gcc and glibc the other loops get an AVX2 copy beside the default one
   (target_clones: the loader picks one per machine, so a plain -O2 build runs AVX2 where the CPU
   has it). Elsewhere: the same loops, plain. */
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__) && !defined(TRAIN_NO_SIMD)
#  include <immintrin.h>
#  define TR__X86 1
#  ifdef TRAIN_NO_AVX
static int tr__has_avx(void) { return 0; }
#  else
static int tr__has_avx(void) { return __builtin_cpu_supports("avx"); }
#  endif
#else
#  define TR__X86 0
#endif
#if TR__X86 && defined(__GNUC__) && !defined(__clang__) && defined(__GLIBC__) /* ifunc: glibc's loader */
#  define TR__CLONES __attribute__((target_clones("avx2", "default")))
#else
#  define TR__CLONES
#endif
#define TR__AHEAD 1024
#if defined(__GNUC__) || defined(__clang__)
#  define TR__PREFETCH(p) __builtin_prefetch(p)
#else
#  define TR__PREFETCH(p) ((void)0)
#endif
#define TR__PRAGMA(x) _Pragma(#x)
#ifdef _OPENMP /* whole chunks per thread; no team at all for one thread */
#  define TR__FOR_CHUNKS(threads) TR__PRAGMA(omp parallel for schedule(static) num_threads((threads) > 1 ? (threads) : 1) if((threads) > 1))
#else
#  define TR__FOR_CHUNKS(threads) (void)(threads);
#endif
#define TR__CHUNK ((size_t)HK_NORM_CHUNK)
#define TR__GROUP 256 /* chunks per round of partials (2 KiB of stack) */

/* The elements of chunk k of an n-element array: [k*TR__CHUNK, +tr__chunk_len). */
static size_t tr__chunk_len(size_t n, size_t k) { return n - k * TR__CHUNK < TR__CHUNK ? n - k * TR__CHUNK : TR__CHUNK; }
static long tr__n_chunks(size_t n) { return (long)((n + TR__CHUNK - 1) / TR__CHUNK); }

TRAIN_API tr_adamw_coef tr_adamw_coefs(const tr_optim *o, double lr, int64_t step) {
  tr_adamw_coef c;
  double b1 = o->beta1 ? o->beta1 : 0.9, b2 = o->beta2 ? o->beta2 : 0.999; /* tr_optim's zeros, as tr_init */
  double bc1 = 1.0 - pow(b1, (double)step), bc2 = 1.0 - pow(b2, (double)step);
  c.decay = (float)(1.0 - lr * o->weight_decay);
  c.decays = o->weight_decay != 0;
  c.w1 = (float)(1.0 - b1);
  c.w1_comp = 1.0f - c.w1; /* lerp computes 1 - weight in float */
  c.lerp_small = c.w1 < 0.5f;
  c.beta2 = (float)b2;
  c.w2 = (float)(1.0 - b2);
  c.bc2_sqrt = (float)sqrt(bc2);
  c.eps = (float)(o->eps ? o->eps : 1e-8);
  c.neg_step = (float)-(lr / bc1);
  c.gscale = 1.0f;
  return c;
}

TRAIN_API tr_sgd_coef tr_sgd_coefs(const tr_optim *o, double lr, int first) {
  tr_sgd_coef c;
  c.wd = (float)o->weight_decay;
  c.momentum = (float)o->momentum;
  c.damp1 = (float)(1.0 - o->dampening);
  c.neg_lr = (float)-lr;
  c.gscale = 1.0f;
  c.decays = o->weight_decay != 0;
  c.has_momentum = o->momentum != 0;
  c.first = first != 0 && c.has_momentum;     /* both only matter with momentum */
  c.nesterov = o->nesterov != 0 && c.has_momentum;
  return c;
}

/* Every chunk loop below runs in blocks of TR__BLOCK elements, then the remainder: an inner loop
   with a constant trip count is one that gcc vectorises at -O2 (its default "very cheap" cost model
   refuses loops that would need a scalar epilogue), so the default flags get SIMD code. Loops whose
   float forms depend on a flag are copied per value of the flag (a constant in their copy of the
   coefficients), so their bodies have no branch. */
#define TR__BLOCK 16

/* x *= k */
static inline void tr__scale_run(float *TR__RESTRICT x, size_t n, float k) {
  size_t i;
  for (i = 0; i < n; i++) x[i] *= k;
}
static TR__CLONES void tr__scale_range(float *TR__RESTRICT x, size_t n, float k) {
  size_t i = 0;
  for (; i + TR__BLOCK <= n; i += TR__BLOCK) tr__scale_run(x + i, TR__BLOCK, k);
  tr__scale_run(x + i, n - i, k);
}

/* AdamW, one element after another (tr_adamw_elem): the lerp's other form, the remainders, and every
   machine without the SIMD kernels below. */
static inline void tr__adamw_run(float *TR__RESTRICT p, const float *TR__RESTRICT g, float *TR__RESTRICT m,
                                 float *TR__RESTRICT v, size_t n, tr_adamw_coef c) {
  size_t i;
  for (i = 0; i < n; i++) tr_adamw_elem(&p[i], g[i], &m[i], &v[i], c, c.lerp_small);
}

#if TR__X86
/* AdamW four and eight elements at a time: tr_adamw_elem's operations in its order, one intrinsic
   each (no fused multiply-add: neither target enables FMA). Intrinsics because the square root in C
   is sqrtf, which sets errno on a negative input, so no compiler vectorises it without
   -fno-math-errno; here it is the instruction itself. The branch on c.decays is the same every
   iteration (predicted). */
static void tr__adamw_sse(float *p, const float *g, float *m, float *v, size_t n, tr_adamw_coef c) {
  const __m128 decay = _mm_set1_ps(c.decay), w1 = _mm_set1_ps(c.w1), b2 = _mm_set1_ps(c.beta2),
               w2 = _mm_set1_ps(c.w2), bc2 = _mm_set1_ps(c.bc2_sqrt), eps = _mm_set1_ps(c.eps),
               step = _mm_set1_ps(c.neg_step);
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    __m128 gi = _mm_loadu_ps(g + i), pi = _mm_loadu_ps(p + i), mi = _mm_loadu_ps(m + i), vi = _mm_loadu_ps(v + i), d;
    if (c.decays) pi = _mm_mul_ps(pi, decay);
    mi = _mm_add_ps(mi, _mm_mul_ps(w1, _mm_sub_ps(gi, mi)));
    vi = _mm_add_ps(_mm_mul_ps(vi, b2), _mm_mul_ps(_mm_mul_ps(w2, gi), gi));
    d = _mm_add_ps(_mm_div_ps(_mm_sqrt_ps(vi), bc2), eps);
    _mm_storeu_ps(p + i, _mm_add_ps(pi, _mm_div_ps(_mm_mul_ps(step, mi), d)));
    _mm_storeu_ps(m + i, mi);
    _mm_storeu_ps(v + i, vi);
  }
  tr__adamw_run(p + i, g + i, m + i, v + i, n - i, c);
}
__attribute__((target("avx"))) static void tr__adamw_avx(float *p, const float *g, float *m, float *v, size_t n, tr_adamw_coef c) {
  const __m256 decay = _mm256_set1_ps(c.decay), w1 = _mm256_set1_ps(c.w1), b2 = _mm256_set1_ps(c.beta2),
               w2 = _mm256_set1_ps(c.w2), bc2 = _mm256_set1_ps(c.bc2_sqrt), eps = _mm256_set1_ps(c.eps),
               step = _mm256_set1_ps(c.neg_step);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 gi = _mm256_loadu_ps(g + i), pi = _mm256_loadu_ps(p + i), mi = _mm256_loadu_ps(m + i), vi = _mm256_loadu_ps(v + i), d;
    if (c.decays) pi = _mm256_mul_ps(pi, decay);
    mi = _mm256_add_ps(mi, _mm256_mul_ps(w1, _mm256_sub_ps(gi, mi)));
    vi = _mm256_add_ps(_mm256_mul_ps(vi, b2), _mm256_mul_ps(_mm256_mul_ps(w2, gi), gi));
    d = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc2), eps);
    _mm256_storeu_ps(p + i, _mm256_add_ps(pi, _mm256_div_ps(_mm256_mul_ps(step, mi), d)));
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
  }
  tr__adamw_run(p + i, g + i, m + i, v + i, n - i, c);
}
#endif

/* AdamW over one chunk; a clip scale is applied to the chunk first, while it is in cache. */
static void tr__adamw_range(float *TR__RESTRICT p, float *TR__RESTRICT g, float *TR__RESTRICT m,
                            float *TR__RESTRICT v, size_t n, tr_adamw_coef c) {
  if (c.gscale != 1.0f) tr__scale_range(g, n, c.gscale);
  if (!c.lerp_small) { tr__adamw_run(p, g, m, v, n, c); return; } /* beta1 <= 0.5: rare, plain loop */
#if TR__X86
  if (tr__has_avx()) tr__adamw_avx(p, g, m, v, n, c);
  else tr__adamw_sse(p, g, m, v, n, c);
#else
  {
    size_t i = 0;
    c.lerp_small = 1;
    if (c.decays) { c.decays = 1; for (; i + TR__BLOCK <= n; i += TR__BLOCK) tr__adamw_run(p + i, g + i, m + i, v + i, TR__BLOCK, c); }
    else          { c.decays = 0; for (; i + TR__BLOCK <= n; i += TR__BLOCK) tr__adamw_run(p + i, g + i, m + i, v + i, TR__BLOCK, c); }
    tr__adamw_run(p + i, g + i, m + i, v + i, n - i, c);
  }
#endif
}

/* SGD, one element after another (tr_sgd_elem). */
static inline void tr__sgd_run(float *TR__RESTRICT p, const float *TR__RESTRICT g, float *TR__RESTRICT b, size_t n, tr_sgd_coef c) {
  size_t i;
  for (i = 0; i < n; i++) tr_sgd_elem(&p[i], g[i], c.has_momentum ? &b[i] : (float *)0, c);
}
/* SGD over one chunk: a copy of the loop per form, each with the flags as constants. */
static TR__CLONES void tr__sgd_range(float *TR__RESTRICT p, float *TR__RESTRICT g, float *TR__RESTRICT b, size_t n, tr_sgd_coef c) {
  size_t i = 0;
  if (c.gscale != 1.0f) tr__scale_range(g, n, c.gscale);
#define TR__SGD_FORM(dec, mom, fst, nes) \
  if (c.decays == dec && c.has_momentum == mom && c.first == fst && c.nesterov == nes) { \
    c.decays = dec; c.has_momentum = mom; c.first = fst; c.nesterov = nes; \
    for (; i + TR__BLOCK <= n; i += TR__BLOCK) tr__sgd_run(p + i, g + i, mom ? b + i : b, TR__BLOCK, c); \
  } else
  TR__SGD_FORM(0, 0, 0, 0) TR__SGD_FORM(1, 0, 0, 0)
  TR__SGD_FORM(0, 1, 0, 0) TR__SGD_FORM(1, 1, 0, 0) TR__SGD_FORM(0, 1, 0, 1) TR__SGD_FORM(1, 1, 0, 1)
  TR__SGD_FORM(0, 1, 1, 0) TR__SGD_FORM(1, 1, 1, 0) TR__SGD_FORM(0, 1, 1, 1) TR__SGD_FORM(1, 1, 1, 1)
  { (void)0; } /* (tr_sgd_coefs makes no other combination; one would still be right, plainly below) */
#undef TR__SGD_FORM
  tr__sgd_run(p + i, g + i, c.has_momentum ? b + i : b, n - i, c);
}

/* Clamp into [lo, hi]; NaN fails both tests and stays. */
static inline void tr__clamp_run(float *TR__RESTRICT x, size_t n, float lo, float hi) {
  size_t i;
  for (i = 0; i < n; i++) x[i] = x[i] > hi ? hi : (x[i] < lo ? lo : x[i]);
}
static TR__CLONES void tr__clamp_range(float *TR__RESTRICT x, size_t n, float lo, float hi) {
  size_t i = 0;
  for (; i + TR__BLOCK <= n; i += TR__BLOCK) tr__clamp_run(x + i, TR__BLOCK, lo, hi);
  tr__clamp_run(x + i, n - i, lo, hi);
}

/* Non-finite values: exponent bits all ones (hk_is_finitef's test), counted without a branch. */
static inline uint32_t tr__nonfinite_run(const float *TR__RESTRICT x, size_t n) {
  size_t i;
  uint32_t bad = 0; /* 32-bit lanes like the data's (a block counts at most TR__BLOCK) */
  for (i = 0; i < n; i++) {
    uint32_t bits;
    memcpy(&bits, &x[i], sizeof bits);
    bad += (bits & 0x7f800000u) == 0x7f800000u;
  }
  return bad;
}
static TR__CLONES size_t tr__nonfinite_range(const float *TR__RESTRICT x, size_t n) {
  size_t i = 0, bad = 0;
  for (; i + TR__BLOCK <= n; i += TR__BLOCK) {
    if (i + TR__AHEAD < n) TR__PREFETCH(x + i + TR__AHEAD); /* one read stream: ask ahead (hk_sumsq's note) */
    bad += tr__nonfinite_run(x + i, TR__BLOCK);
  }
  return bad + tr__nonfinite_run(x + i, n - i);
}

TRAIN_API void tr_adamw_update(float *p, float *g, float *m, float *v, size_t n, const tr_adamw_coef *c, int threads) {
  long k, nk = tr__n_chunks(n);
  TR__FOR_CHUNKS(threads)
  for (k = 0; k < nk; k++) {
    size_t o = (size_t)k * TR__CHUNK;
    tr__adamw_range(p + o, g + o, m + o, v + o, tr__chunk_len(n, (size_t)k), *c);
  }
}

TRAIN_API void tr_sgd_update(float *p, float *g, float *buf, size_t n, const tr_sgd_coef *c, int threads) {
  long k, nk = tr__n_chunks(n);
  TR__FOR_CHUNKS(threads)
  for (k = 0; k < nk; k++) {
    size_t o = (size_t)k * TR__CHUNK;
    tr__sgd_range(p + o, g + o, c->has_momentum ? buf + o : NULL, tr__chunk_len(n, (size_t)k), *c);
  }
}

/* zero_grad. A buffer far larger than the caches is zeroed by one memset per thread over its whole
   share: for a large size the C library writes without first reading the lines it overwrites (a
   plain store costs 8 bytes of traffic for 4 written); measured (make bench-math, 16M floats) at 2x
   the streaming stores this used before and 1.7x a memset per chunk. A small buffer is zeroed chunk
   by chunk, its zeros staying in cache for the backward pass that comes next. (Zero floats are zero
   bytes in IEEE 754, which train.h assumes throughout.) */
#define TR__STREAM_MIN ((size_t)1 << 23) /* floats (32 MiB) */
TRAIN_API void tr_zero(float *x, size_t n, int threads) {
  long k, nk = tr__n_chunks(n);
  if (n >= TR__STREAM_MIN) {
    nk = threads > 1 ? threads : 1;
    TR__FOR_CHUNKS(threads)
    for (k = 0; k < nk; k++) {
      size_t lo = n / (size_t)nk * (size_t)k, hi = k + 1 == nk ? n : n / (size_t)nk * (size_t)(k + 1);
      memset(x + lo, 0, (hi - lo) * sizeof(float));
    }
    return;
  }
  TR__FOR_CHUNKS(threads)
  for (k = 0; k < nk; k++) memset(x + (size_t)k * TR__CHUNK, 0, tr__chunk_len(n, (size_t)k) * sizeof(float));
}

TRAIN_API void tr_scale(float *x, size_t n, float s, int threads) {
  long k, nk = tr__n_chunks(n);
  TR__FOR_CHUNKS(threads)
  for (k = 0; k < nk; k++) tr__scale_range(x + (size_t)k * TR__CHUNK, tr__chunk_len(n, (size_t)k), s);
}

/* The reductions: TR__GROUP chunks at a time, one partial each (any thread computes it), then the
   partials added in chunk order on this thread. */
TRAIN_API double tr_sumsq(const float *x, size_t n, int threads) {
  double part[TR__GROUP], sum = 0;
  long g, k, nk = tr__n_chunks(n);
  for (g = 0; g < nk; g += TR__GROUP) {
    long ng = nk - g < TR__GROUP ? nk - g : TR__GROUP;
    TR__FOR_CHUNKS(threads)
    for (k = 0; k < ng; k++) part[k] = hk_sumsq(x + (size_t)(g + k) * TR__CHUNK, tr__chunk_len(n, (size_t)(g + k)));
    for (k = 0; k < ng; k++) sum += part[k];
  }
  return sum;
}

/* The chunk's sum of squares is taken first, then the chunk (still in cache) is clamped. */
TRAIN_API double tr_clamp_sumsq(float *x, size_t n, float lo, float hi, int threads) {
  double part[TR__GROUP], sum = 0;
  long g, k, nk = tr__n_chunks(n);
  for (g = 0; g < nk; g += TR__GROUP) {
    long ng = nk - g < TR__GROUP ? nk - g : TR__GROUP;
    TR__FOR_CHUNKS(threads)
    for (k = 0; k < ng; k++) {
      float *c = x + (size_t)(g + k) * TR__CHUNK;
      size_t len = tr__chunk_len(n, (size_t)(g + k));
      part[k] = hk_sumsq(c, len);
      tr__clamp_range(c, len, lo, hi);
    }
    for (k = 0; k < ng; k++) sum += part[k];
  }
  return sum;
}

TRAIN_API size_t tr_count_nonfinite(const float *x, size_t n, int threads) {
  size_t part[TR__GROUP], bad = 0;
  long g, k, nk = tr__n_chunks(n);
  for (g = 0; g < nk; g += TR__GROUP) {
    long ng = nk - g < TR__GROUP ? nk - g : TR__GROUP;
    TR__FOR_CHUNKS(threads)
    for (k = 0; k < ng; k++) part[k] = tr__nonfinite_range(x + (size_t)(g + k) * TR__CHUNK, tr__chunk_len(n, (size_t)(g + k)));
    for (k = 0; k < ng; k++) bad += part[k];
  }
  return bad;
}

#endif /* TRAIN_NO_MATH */

/* =================================================================================================
   SHARED PIECES (implementation)
   What the run layer, the callbacks and the loggers have in common: the clock, flags, the monitored
   metric, state bytes, errors of constructors, registering a callback. TR__SHARED marks the helpers
   that a section left out may leave unused.
   ================================================================================================= */
#if defined(TR__POSIX) && !defined(__cplusplus)
extern int symlink(const char *target, const char *linkpath); /* strict C99 headers hide it */
#endif

#define TR__CB_MAX_STR 4096 /* the longest string a callback's state may hold */

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
TR__SHARED int tr__better(tr_mode m, double a, double b) { return m == TR_MODE_MAX ? a > b : a < b; } /* strict */
TR__SHARED double tr__worst(tr_mode m) { return m == TR_MODE_MAX ? -HUGE_VAL : HUGE_VAL; }
TR__SHARED const char *tr__mode_name(tr_mode m) { return m == TR_MODE_MAX ? "max" : "min"; }

static char *tr__strdup(const char *s) {
  size_t n = strlen(s ? s : "") + 1;
  char *p = (char *)malloc(n);
  if (p) memcpy(p, s ? s : "", n);
  return p;
}
TR__SHARED void tr__set_str(char **dst, const char *s) { /* keeps the old value when out of memory */
  char *p = tr__strdup(s);
  if (p) { free(*dst); *dst = p; }
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

/* State bytes: little-endian integers, doubles as their bit patterns, strings as u32 length + bytes. */
static void tr__put_u64(hk_bytes *b, uint64_t v) { unsigned char x[8]; tr__le(x, v, 8); hk_bytes_put(b, x, 8); }
TR__SHARED void tr__put_i64(hk_bytes *b, int64_t v) { tr__put_u64(b, (uint64_t)v); }
TR__SHARED void tr__put_f64(hk_bytes *b, double v) { uint64_t u; memcpy(&u, &v, 8); tr__put_u64(b, u); }
TR__SHARED void tr__put_str(hk_bytes *b, const char *s) {
  size_t n = strlen(s ? s : "");
  unsigned char x[4];
  tr__le(x, (uint64_t)n, 4);
  hk_bytes_put(b, x, 4);
  hk_bytes_put(b, s ? s : "", n);
}
static int tr__get_u64(hk_reader *r, uint64_t *v) {
  unsigned char x[8];
  if (hk_read(r, x, 8)) return -1;
  *v = tr__get(x, 8);
  return 0;
}
static int tr__get_i64(hk_reader *r, int64_t *v) { uint64_t u; if (tr__get_u64(r, &u)) return -1; *v = (int64_t)u; return 0; }
TR__SHARED int tr__get_f64(hk_reader *r, double *v) { uint64_t u; if (tr__get_u64(r, &u)) return -1; memcpy(v, &u, 8); return 0; }
static int tr__get_str(hk_reader *r, char **out) { /* a new string in *out; -1 when bad or out of memory */
  unsigned char x[4];
  uint64_t n;
  char *s;
  if (hk_read(r, x, 4)) return -1;
  n = tr__get(x, 4);
  if (n > TR__CB_MAX_STR || n > r->len - r->pos) return -1;
  s = (char *)malloc((size_t)n + 1);
  if (!s) return -1;
  if (hk_read(r, s, (size_t)n) || memchr(s, 0, (size_t)n)) { free(s); return -1; }
  s[n] = 0;
  *out = s;
  return 0;
}
/* A loaded callback state is checked as the LOOP counters are: every field in its range, so that nothing
   overflows when a callback counts on from it or prints it; each refusal says which field and why. */
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
  vsnprintf(w->msg, sizeof w->msg, fmt, ap);
  va_end(ap);
  return TR_ERR_INVALID;
}
TR__SHARED tr_err tr__cb_result(hk_registry *reg, tr_err e, const tr__why *w) { /* the message: hk_last_error(reg) */
  if (e) hk_set_error(reg, e == TR_ERR_NOMEM ? HK_ERR_NOMEM : HK_ERR_INVALID, "%s", w->msg);
  return e;
}
/* A callback's public constructor and getter: tr_<name>(reg, desc, out) over its maker tr__<p>_make,
   and tr_<name>_get(reg, handle), its state's public part (NULL for a handle of another kind). */
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

/* Register cb (its destroy frees user on failure too). Monitoring callbacks run after the model tier
   at on_train_epoch_end (hooks.h's HK_MONITOR_LAST), early stopping before checkpointing (order),
   as Lightning orders them. */
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

/* lstat (declared at the top of the implementation where strict -std=c99 headers hide it): a symlink
   is seen as one, never as what it points to. */
#ifdef TR__POSIX
static int tr__lstat(const char *path, struct stat *st) { return lstat(path, st); }
#endif
TR__SHARED int tr__file_exists(const char *path) { /* a dangling symlink is a name too */
#ifdef TR__POSIX
  struct stat st;
  return tr__lstat(path, &st) == 0;
#else
  FILE *f = fopen(path, "rb");
  if (f) fclose(f);
  return f != NULL;
#endif
}

/* mkdir -p; 0 on success */
static int tr__mkdirs(const char *dir) {
#ifdef TR__POSIX
  char buf[TR__CB_MAX_STR];
  size_t i, n = strlen(dir);
  if (n == 0 || n >= sizeof buf) return n == 0 ? 0 : -1;
  memcpy(buf, dir, n + 1);
  for (i = 1; i <= n; i++) {
    if (buf[i] == '/' || buf[i] == 0) {
      char c = buf[i];
      buf[i] = 0;
      if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
      buf[i] = c;
    }
  }
  return 0;
#else
  (void)dir;
  return 0;
#endif
}

/* =================================================================================================
   THE RUN LAYER (implementation)
   The run is one malloc'd struct attached to the registry (hooks.h's hk_attach), freed after every
   callback by hk_destroy. Nothing here runs on a step unless the loop calls it.
   ================================================================================================= */
/* A message into a buffer, cut to fit (vsnprintf: a long path is cut, not a compiler warning). */
static void tr__msg(char *dst, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(dst, cap, fmt, ap);
  va_end(ap);
}

static void tr__run_free(void *p) {
  tr_run *run = (tr_run *)p;
  tr__run_priv *q;
  int i;
  if (!run) return;
  q = run->tr__p;
  if (q->signals) hk_stop_signals_restore(); /* a run started and never finished: the handlers go back */
  while (q->dirs) { tr__run_dir *next = q->dirs->next; free(q->dirs->base); free(q->dirs->dir); free(q->dirs); q->dirs = next; }
  for (i = 0; i < TR__RUN_STRS; i++) free(q->strs[i]);
  for (i = 0; i < q->n_hp; i++) { free(q->hp[i].key); free(q->hp[i].val); }
  free(q->hp);
  free(q->dir);
  free(q->resume);
  tr_log_record_free(&q->rec);
  hk_bytes_free(&q->refused);
  tr__asave_free(q->asave); /* the last save in flight ends first */
  free(q);
  free(run);
}

TRAIN_API tr_run *tr_run_get(hk_registry *reg) {
  tr_run *run;
  if (!reg) return NULL;
  if ((run = (tr_run *)hk_attached(reg)) != NULL) return run;
  run = (tr_run *)calloc(1, sizeof *run);
  if (!run || !(run->tr__p = (tr__run_priv *)calloc(1, sizeof *run->tr__p))) { free(run); return NULL; }
  run->resume_from = "";
  run->tr__p->rank = -1;
  hk_attach(reg, run, tr__run_free);
  return run;
}

/* Text to f (NULL: the progress bar's stream, stdout without a bar), above the progress bar while one is
   live on a terminal (the bar's section sets q->above). */
static void tr__run_write(const tr_run *run, FILE *f, const char *text) {
  if (run && run->tr__p->above) { run->tr__p->above(run->tr__p->bar, f, text); return; }
  if (!f) f = stdout;
  fputs(text, f);
  fflush(f);
}
/* This process's global rank: the run's when it knows it, else the launcher's (Lightning's rank_zero
   looks at the environment the same way before a strategy sets it), else 0. */
static int tr__run_rank(const tr_run *run) {
  static const char *const vars[] = { "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "RANK" };
  size_t i;
  if (run && run->tr__p->rank >= 0) return run->tr__p->rank;
  for (i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    char *end;
    long r = v ? strtol(v, &end, 10) : -1;
    if (v && end != v && *end == 0 && r >= 0 && r <= INT_MAX) return (int)r;
  }
  return 0;
}
static void tr__run_vprint(hk_registry *reg, int all, const char *fmt, va_list ap) {
  const tr_run *run = reg ? (const tr_run *)hk_attached(reg) : NULL;
  char line[2048];
  size_t n;
  if (!all && tr__run_rank(run) != 0) return;
  vsnprintf(line, sizeof line - 1, fmt, ap);
  n = strlen(line);
  line[n++] = '\n';
  line[n] = 0;
  tr__run_write(run, NULL, line);
}
TRAIN_API void tr_print(hk_registry *reg, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tr__run_vprint(reg, 0, fmt, ap);
  va_end(ap);
}
TRAIN_API void tr_print_all(hk_registry *reg, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tr__run_vprint(reg, 1, fmt, ap);
  va_end(ap);
}

/* Where callbacks talk: the run's log, else stderr; one write per line (lines of processes and
   callbacks never tear into each other), with "[rank: N] " first when there are several processes. */
static void tr__run_vsay(const tr_run *run, const hk_ctx *ctx, const char *who, const char *fmt, va_list ap) {
  FILE *f = run && run->desc.log ? run->desc.log : stderr;
  char line[1024];
  size_t n = 0;
  if (ctx && ctx->world_size > 1) n = (size_t)snprintf(line, sizeof line, "[rank: %d] ", ctx->rank);
  if (who) n += (size_t)snprintf(line + n, sizeof line - n, "%s: ", who);
  if (n < sizeof line) vsnprintf(line + n, sizeof line - n, fmt, ap);
  n = strlen(line);
  if (n + 1 >= sizeof line) n = sizeof line - 2;
  line[n++] = '\n';
  line[n] = 0;
  tr__run_write(run, f, line);
}
static void tr__run_say(const tr_run *run, const hk_ctx *ctx, const char *who, const char *fmt, ...) TR__PRINTF(4, 5);
static void tr__run_say(const tr_run *run, const hk_ctx *ctx, const char *who, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tr__run_vsay(run, ctx, who, fmt, ap);
  va_end(ap);
}
/* The same, said on rank 0 only when zero_only is set (Lightning's rank_zero_info: a message that is the
   same on every rank, or one Lightning prints there only). */
static void tr__run_say_on(const tr_run *run, const hk_ctx *ctx, int zero_only, const char *who, const char *fmt, ...) TR__PRINTF(5, 6);
static void tr__run_say_on(const tr_run *run, const hk_ctx *ctx, int zero_only, const char *who, const char *fmt, ...) {
  va_list ap;
  if (zero_only && ctx && ctx->rank != 0) return;
  va_start(ap, fmt);
  tr__run_vsay(run, ctx, who, fmt, ap);
  va_end(ap);
}

/* Where a resumed run goes on from: one line (rank 0), as Lightning's "Restored all states ..." */
static void tr__run_say_resumed(const tr_run *run, const hk_ctx *ctx, const char *path) {
  if (run->desc.no_resume_message) return;
  tr__run_say_on(run, ctx, 1, NULL, "Restored all states from the checkpoint at %s: epoch %lld, global step %lld, "
                 "batch %lld of the epoch", path, (long long)ctx->epoch, (long long)ctx->global_step, (long long)ctx->batch_idx);
}

static const char *tr__run_str(const tr_run *run, int i, const char *dflt) {
  const char *s = run ? run->tr__p->strs[i] : NULL;
  return s ? s : dflt;
}
static int tr__tri_ok(int v) { return v >= TR_NO && v <= TR_YES; }

TRAIN_API tr_err tr_run_setup(hk_registry *reg, const tr_run_desc *d) {
  tr_run_desc zero;
  tr_run *run = tr_run_get(reg);
  tr__run_priv *q;
  const char *strs[TR__RUN_STRS];
  char *copy[TR__RUN_STRS];
  int i;
  if (!reg) return TR_ERR_INVALID;
  if (!run) return hk_set_error(reg, HK_ERR_NOMEM, "tr_run_setup: out of memory"), TR_ERR_NOMEM;
  memset(&zero, 0, sizeof zero);
  if (!d) d = &zero;
  if (!tr__tri_ok(d->epochs) || !tr__tri_ok(d->validation) || !tr__tri_ok(d->check_on_train_epoch_end))
    return hk_set_error(reg, HK_ERR_INVALID, "tr_run_setup: epochs, validation and check_on_train_epoch_end take "
                        "TR_YES, TR_NO or 0 (the default)"), TR_ERR_INVALID;
  if (d->train_batches < 0 || d->max_steps < 0 || d->max_epochs < 0 || d->min_steps < 0 || d->min_epochs < 0)
    return hk_set_error(reg, HK_ERR_INVALID, "tr_run_setup: train_batches, max_steps, max_epochs, min_steps and "
                        "min_epochs must be >= 0 (0 = unknown / none)"), TR_ERR_INVALID;
  if (d->save_dir && !d->save_dir[0])
    return hk_set_error(reg, HK_ERR_INVALID, "tr_run_setup: save_dir is empty (NULL means \"runs\"; \".\" is the "
                        "current directory)"), TR_ERR_INVALID;
  if (d->version && strchr(d->version, '/'))
    return hk_set_error(reg, HK_ERR_INVALID, "tr_run_setup: version '%s' must be a directory name without '/'",
                        d->version), TR_ERR_INVALID;
  if (!d->save_model != !d->load_model)
    return hk_set_error(reg, HK_ERR_INVALID, "tr_run_setup: give save_model and load_model together (a checkpoint "
                        "that cannot be loaded, or a loader with nothing to load)"), TR_ERR_INVALID;
  if (!hk_is_finite(d->momentum) || !hk_is_finite(d->weight_decay))
    return hk_set_error(reg, HK_ERR_INVALID, "tr_run_setup: momentum and weight_decay must be finite"), TR_ERR_INVALID;
  if (d->n_state < 0 || (d->n_state > 0 && !d->state))
    return hk_set_error(reg, HK_ERR_INVALID, "tr_run_setup: n_state is %d with state %s: give n_state >= 0 regions "
                        "in state", d->n_state, d->state ? "set" : "NULL"), TR_ERR_INVALID;
  for (i = 0; i < d->n_state; i++)
    if (!d->state[i].data || !d->state[i].bytes)
      return hk_set_error(reg, HK_ERR_INVALID, "tr_run_setup: state[%d] has %s: every region needs data and bytes > 0", i,
                          d->state[i].data ? "0 bytes" : "data NULL"), TR_ERR_INVALID;
  strs[TR__RUN_SAVE_DIR] = d->save_dir;
  strs[TR__RUN_NAME] = d->name;
  strs[TR__RUN_VERSION] = d->version;
  strs[TR__RUN_OPTIMIZER] = d->optimizer;
  strs[TR__RUN_HPARAMS] = d->hparams;
  strs[TR__RUN_SAVE_TO] = d->save_to;
  for (i = 0; i < TR__RUN_STRS; i++) {
    copy[i] = strs[i] ? tr__strdup(strs[i]) : NULL;
    if (strs[i] && !copy[i]) {
      while (i-- > 0) free(copy[i]);
      return hk_set_error(reg, HK_ERR_NOMEM, "tr_run_setup: out of memory"), TR_ERR_NOMEM;
    }
  }
  q = run->tr__p;
  for (i = 0; i < TR__RUN_STRS; i++) { free(q->strs[i]); q->strs[i] = copy[i]; }
  run->desc = *d;
  run->desc.save_dir = q->strs[TR__RUN_SAVE_DIR];
  run->desc.name = q->strs[TR__RUN_NAME];
  run->desc.version = q->strs[TR__RUN_VERSION];
  run->desc.optimizer = q->strs[TR__RUN_OPTIMIZER];
  run->desc.hparams = q->strs[TR__RUN_HPARAMS];
  run->desc.save_to = q->strs[TR__RUN_SAVE_TO];
  run->train_batches = d->train_batches;
  if (tr_add_factories(reg) != HK_OK) return TR_ERR_NOMEM;
  return TR_OK;
}

/* tr_run_hparam*: kind is tr__hparam's num (0 string, 1 number, 2 boolean); text the value as written. */
static tr_err tr__run_hparam_add(hk_registry *reg, const char *fn, const char *key, const char *text, int kind) {
  tr_run *run = tr_run_get(reg);
  tr__run_priv *q;
  tr__user_hp *grown;
  const char *c;
  char *k, *v;
  int i;
  if (!reg) return TR_ERR_INVALID;
  if (!run) return hk_set_error(reg, HK_ERR_NOMEM, "%s: out of memory", fn), TR_ERR_NOMEM;
  if (!key || !key[0] || strlen(key) >= TR__HPARAM_KEY)
    return hk_set_error(reg, HK_ERR_INVALID, "%s: the key must be a name of 1 to %d bytes (e.g. \"width\")", fn,
                        TR__HPARAM_KEY - 1), TR_ERR_INVALID;
  for (c = key; *c; c++)
    if ((unsigned char)*c < 32 || *c == 127 || *c == '=')
      return hk_set_error(reg, HK_ERR_INVALID, "%s: the key '%s' holds a control character or '=': give a plain name", fn,
                          key), TR_ERR_INVALID;
  if (!text || strlen(text) >= TR__HPARAM_VAL)
    return hk_set_error(reg, HK_ERR_INVALID, "%s: the value of '%s' must be a string of at most %d bytes (NULL is not one)",
                        fn, key, TR__HPARAM_VAL - 1), TR_ERR_INVALID;
  if (run->running != HK_STAGE_NONE)
    return hk_set_error(reg, HK_ERR_INVALID, "%s: '%s' comes during a %s run: the loggers wrote the hyperparameters when "
                        "it started; give them before tr_run_start / tr_fit", fn, key, hk_stage_name(run->running)), TR_ERR_INVALID;
  q = run->tr__p;
  for (i = 0; i < q->n_hp; i++)
    if (!strcmp(q->hp[i].key, key)) break;
  if (!(v = tr__strdup(text))) return hk_set_error(reg, HK_ERR_NOMEM, "%s: out of memory", fn), TR_ERR_NOMEM;
  if (i < q->n_hp) { free(q->hp[i].val); q->hp[i].val = v; q->hp[i].kind = kind; return TR_OK; }
  k = tr__strdup(key);
  grown = k ? (tr__user_hp *)realloc(q->hp, (size_t)(q->n_hp + 1) * sizeof *grown) : NULL;
  if (!grown) { free(k); free(v); return hk_set_error(reg, HK_ERR_NOMEM, "%s: out of memory", fn), TR_ERR_NOMEM; }
  q->hp = grown;
  q->hp[q->n_hp].key = k;
  q->hp[q->n_hp].val = v;
  q->hp[q->n_hp].kind = kind;
  q->n_hp++;
  return TR_OK;
}
static void tr__num(char *buf, size_t cap, double v);
TRAIN_API tr_err tr_run_hparam(hk_registry *reg, const char *key, const char *value) {
  return tr__run_hparam_add(reg, "tr_run_hparam", key, value, 0);
}
TRAIN_API tr_err tr_run_hparam_num(hk_registry *reg, const char *key, double value) {
  char text[40];
  if (!hk_is_finite(value)) {
    if (reg) hk_set_error(reg, HK_ERR_INVALID, "tr_run_hparam_num: the value of '%s' is not finite (%g): give a finite "
                          "number", key ? key : "(null)", value);
    return TR_ERR_INVALID;
  }
  tr__num(text, sizeof text, value);
  return tr__run_hparam_add(reg, "tr_run_hparam_num", key, text, 1);
}
TRAIN_API tr_err tr_run_hparam_bool(hk_registry *reg, const char *key, int value) {
  return tr__run_hparam_add(reg, "tr_run_hparam_bool", key, value ? "true" : "false", 2);
}

/* Where monitoring callbacks check when their own flag is the default (Lightning's rule, resolved by
   the trainer at each fit; a hand-written loop says it, or gets the epoch's end with epochs). */
TR__SHARED int tr__at_epoch_end(const tr_run *run, int flag) {
  if (flag != TR_DEFAULT) return flag > 0;
  if (!run) return 1;
  if (run->desc.check_on_train_epoch_end != TR_DEFAULT) return run->desc.check_on_train_epoch_end > 0;
  return run->desc.epochs != TR_NO;
}

/* ---- the schedule's state in checkpoints, and hooks that set the lr ----------------------------------
   56 bytes: "TRLR", u32 version 1, the doubles scale, plateau_lr, best (their bits), the int64s num_bad,
   cooldown, checks (little-endian). Written only when the state is not all zero (the start), so a run
   without it writes the checkpoints it always wrote; a checkpoint without it loads the start. */
#define TR__LR_STATE_SIZE 56
#define TR__LR_STATE_KEY "train.lr_state" /* the run's checkpoint: a state block of its own under this key */
static int tr__lr_state_any(const tr_sched_state *st) {
  return st->scale != 0 || st->plateau_lr != 0 || st->best != 0 || st->num_bad || st->cooldown || st->checks;
}
static void tr__lr_state_put(unsigned char *p, const tr_sched_state *st) {
  double d[3];
  int i;
  d[0] = st->scale; d[1] = st->plateau_lr; d[2] = st->best;
  memcpy(p, "TRLR", 4);
  tr__le(p + 4, 1, 4);
  for (i = 0; i < 3; i++) { uint64_t u; memcpy(&u, &d[i], 8); tr__le(p + 8 + 8 * i, u, 8); }
  tr__le(p + 32, (uint64_t)st->num_bad, 8);
  tr__le(p + 40, (uint64_t)st->cooldown, 8);
  tr__le(p + 48, (uint64_t)st->checks, 8);
}
/* Read and range-check; why says what is wrong. */
static int tr__lr_state_get(const unsigned char *p, size_t n, tr_sched_state *st, char *why, size_t cap) {
  double d[3];
  int64_t v[3];
  int i;
  if (n != TR__LR_STATE_SIZE || memcmp(p, "TRLR", 4) != 0 || tr__get(p + 4, 4) != 1)
    return tr__msg(why, cap, "the schedule's state is malformed (%zu bytes, %d expected, version 1)", n, TR__LR_STATE_SIZE), -1;
  for (i = 0; i < 3; i++) { uint64_t u = tr__get(p + 8 + 8 * i, 8); memcpy(&d[i], &u, 8); }
  for (i = 0; i < 3; i++) v[i] = (int64_t)tr__get(p + 32 + 8 * i, 8);
  if (!(d[0] >= 0 && d[0] < HUGE_VAL) || !(d[1] >= 0 && d[1] < HUGE_VAL) || d[2] != d[2])
    return tr__msg(why, cap, "the schedule's state is out of range (scale %g and plateau lr %g must be >= 0 and finite, best %g a number)",
                   d[0], d[1], d[2]), -1;
  for (i = 0; i < 3; i++)
    if (v[i] < 0 || v[i] > ((int64_t)1 << 53))
      return tr__msg(why, cap, "the schedule's state is out of range (num_bad, cooldown, checks: %lld %lld %lld)",
                     (long long)v[0], (long long)v[1], (long long)v[2]), -1;
  st->scale = d[0]; st->plateau_lr = d[1]; st->best = d[2];
  st->num_bad = v[0]; st->cooldown = v[1]; st->checks = v[2];
  return 0;
}

TRAIN_API tr_err tr_lr_scale(hk_ctx *ctx, double factor) {
  tr_run *run;
  double scale;
  if (!ctx || !ctx->reg || !(run = tr_run_get(ctx->reg))) return TR_ERR_INVALID;
  if (!(factor > 0 && factor < HUGE_VAL)) {
    hk_set_error(ctx->reg, HK_ERR_INVALID, "tr_lr_scale: factor must be > 0 and finite (0.5 halves the lr), got %g", factor);
    return TR_ERR_INVALID;
  }
  scale = (run->lr_state.scale > 0 ? run->lr_state.scale : 1.0) * factor;
  if (!(scale > 0 && scale < HUGE_VAL)) {
    hk_set_error(ctx->reg, HK_ERR_INVALID, "tr_lr_scale: the scale would become %g; it must stay > 0 and finite", scale);
    return TR_ERR_INVALID;
  }
  run->lr_state.scale = scale;
  ctx->lr *= factor;
  return TR_OK;
}

TRAIN_API tr_err tr_lr_set(hk_ctx *ctx, double lr) {
  if (!ctx || !ctx->reg) return TR_ERR_INVALID;
  if (!(lr > 0 && lr < HUGE_VAL)) {
    hk_set_error(ctx->reg, HK_ERR_INVALID, "tr_lr_set: lr must be > 0 and finite, got %g", lr);
    return TR_ERR_INVALID;
  }
  if (!(ctx->lr > 0 && ctx->lr < HUGE_VAL)) {
    hk_set_error(ctx->reg, HK_ERR_INVALID, "tr_lr_set: ctx->lr is %g; it must be > 0 to scale from (set ctx->lr first in a loop of your own)", ctx->lr);
    return TR_ERR_INVALID;
  }
  return tr_lr_scale(ctx, lr / ctx->lr);
}

TRAIN_API int tr_stop_allowed(const hk_ctx *ctx) {
  const tr_run *run = ctx ? (const tr_run *)hk_attached(ctx->reg) : NULL;
  int64_t epochs;
  if (!run || run->running != HK_STAGE_FIT) return 1;
  /* the epoch counts once its last batch has run: the trainer says when; a loop's epoch at its end */
  epochs = ctx->epoch + ((run->tr__p->epoch_done ? *run->tr__p->epoch_done : ctx->event == HK_ON_TRAIN_EPOCH_END) ? 1 : 0);
  return epochs >= run->desc.min_epochs && ctx->global_step >= run->desc.min_steps;
}

/* ---- log records ------------------------------------------------------------------------------ */
static int tr__starts(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

/* Which of the context's metrics a record carries: val/ ones in val records, test/ ones in test
   records, the rest in training records except the trainer's computed-on-demand lr, grad_norm and
   train/loss (which the record sets itself). */
static int tr__log_wanted(const char *name, const char *stage) {
  if (!strcmp(stage, "val")) return tr__starts(name, "val/");
  if (!strcmp(stage, "test")) return tr__starts(name, "test/");
  return !tr__starts(name, "val/") && !tr__starts(name, "test/") && strcmp(name, "lr") && strcmp(name, "grad_norm") &&
         strcmp(name, "train/loss");
}
static int tr__stage_index(const char *stage) { return !strcmp(stage, "train") ? 0 : !strcmp(stage, "val") ? 1 : 2; }

/* Build the record for stage from ctx and fire on_log (signals into flow). Only values set since the
   stage's last record go in (hk_metric_stamp), and values computed on demand (lazy ones), so that a
   value set once does not repeat in every row (Lightning logs what was logged since). */
/* A metric the record could not take (a name that is not UTF-8, or no memory) is reported once per
   name (rank 0), with its bytes escaped, instead of vanishing. */
static void tr__log_refused(tr_run *run, const hk_ctx *ctx, const char *name, tr_err e) {
  hk_bytes *seen = &run->tr__p->refused;
  char shown[200];
  size_t at = 0, k = 0;
  const unsigned char *p = (const unsigned char *)name;
  while (at < seen->len) { /* reported already? */
    const char *old = (const char *)seen->data + at;
    if (!strcmp(old, name)) return;
    at += strlen(old) + 1;
  }
  hk_bytes_put(seen, name, strlen(name) + 1);
  for (; *p && k + 8 < sizeof shown; p++) /* printable ASCII as is, every other byte as \xNN */
    k += (size_t)(*p >= 0x20 && *p < 0x7F && *p != '\\' ? snprintf(shown + k, sizeof shown - k, "%c", *p)
                                                         : snprintf(shown + k, sizeof shown - k, "\\x%02X", *p));
  if (*p) snprintf(shown + k, sizeof shown - k, "...");
  tr__run_say_on(run, ctx, 1, "train.h: warning", "the metric '%s' is not logged: %s (reported once)", shown,
                 e == TR_ERR_NOMEM ? "out of memory" : "its name is not valid UTF-8, which every logger writes; rename it");
}

static void tr__run_send(tr_run *run, hk_ctx *ctx, const char *stage, hk_flow *flow) {
  tr__run_priv *q = run->tr__p;
  tr_log_record *r = &q->rec;
  void *saved = ctx->outputs;
  int i, n = hk_metric_count(ctx), k = tr__stage_index(stage);
  uint64_t since = q->stamp[k];
  double loss;
  tr_err e;
  q->stamp[k] = hk_metric_stamp(ctx, NULL);
  r->step = ctx->global_step > 0 ? ctx->global_step - 1 : 0; /* Lightning's _batches_that_stepped */
  r->epoch = ctx->epoch;
  r->stage = stage;
  r->n_metrics = 0;
  if (k == 0 && (e = tr_log_set(r, "train/loss", hk_metric_get(ctx, "train/loss", &loss) ? loss : ctx->loss)) != TR_OK)
    tr__log_refused(run, ctx, "train/loss", e);
  for (i = 0; i < n; i++) {
    const char *name = hk_metric_at(ctx, i, NULL);
    uint64_t stamp;
    double v;
    if (!name || !tr__log_wanted(name, stage)) continue;
    stamp = hk_metric_stamp(ctx, name);
    if (stamp != 0 && stamp <= since) continue; /* not set since the last record */
    if (hk_metric_get(ctx, name, &v) && (e = tr_log_set(r, name, v)) != TR_OK) tr__log_refused(run, ctx, name, e);
  }
  ctx->outputs = r;
  (void)HK_FIRE_FLOW(ctx->reg ? ctx->reg : q->reg, HK_ON_LOG, ctx, flow);
  ctx->outputs = saved;
  r->n_histograms = 0;
}

TRAIN_API hk_signal tr_run_log(hk_registry *reg, hk_ctx *ctx, const char *stage) {
  tr_run *run = tr_run_get(reg);
  hk_flow flow = { 0 };
  if (!run || !ctx || !stage || !HK_ACTIVE(reg, HK_ON_LOG)) return HK_CONTINUE;
  if (strcmp(stage, "train") && strcmp(stage, "val") && strcmp(stage, "test")) return HK_CONTINUE;
  run->tr__p->reg = reg;
  if (ctx->reg != reg) ctx->reg = reg;
  tr__run_send(run, ctx, stage, &flow);
  if (HK_FLOW_HAS(&flow, HK_FLOW_FAIL)) {
    tr_run_fail(reg, TR_ERR_HOOK, "%s", ctx->hook_failure ? ctx->hook_failure : "a hook failed in on_log");
    return HK_FAIL;
  }
  return HK_CONTINUE;
}

/* The line HK_REQUEST_LOG writes to the run's log: the counters, then every metric. */
static void tr__run_log_line(const tr_run *run, hk_ctx *ctx) {
  char line[2048];
  size_t len;
  int i, n = hk_metric_count(ctx);
  if (ctx->rank != 0) return; /* one log for the job */
  len = (size_t)snprintf(line, sizeof line, "epoch=%lld step=%lld batch=%lld loss=%.6g lr=%.6g", (long long)ctx->epoch,
                         (long long)ctx->global_step, (long long)ctx->batch_idx, ctx->loss, ctx->lr);
  for (i = 0; i < n && len < sizeof line; i++) {
    double v = 0;
    const char *name = hk_metric_at(ctx, i, &v);
    if (name) len += (size_t)snprintf(line + len, sizeof line - len, " %s=%.6g", name, v);
  }
  tr__run_say(run, NULL, NULL, "%s", line);
}

/* ---- failures ------------------------------------------------------------------------------------ */
TRAIN_API void tr_run_fail(hk_registry *reg, tr_err e, const char *fmt, ...) {
  tr_run *run = tr_run_get(reg);
  va_list ap;
  if (!run || run->failed) return; /* the first failure is the run's */
  run->failed = 1;
  run->tr__p->err = e ? e : TR_ERR_HOOK;
  va_start(ap, fmt);
  vsnprintf(run->tr__p->error, sizeof run->tr__p->error, fmt, ap);
  va_end(ap);
}
TRAIN_API const char *tr_run_error(hk_registry *reg) {
  tr_run *run = (tr_run *)hk_attached(reg);
  return run ? run->tr__p->error : "";
}

/* Look at what the loop's sites collected: a fatal hook failure fails the run. */
static void tr__run_settle(hk_registry *reg, hk_ctx *ctx, hk_flow *flow) {
  if (flow && HK_FLOW_HAS(flow, HK_FLOW_FAIL)) {
    tr_run_fail(reg, TR_ERR_HOOK, "%s", ctx->hook_failure ? ctx->hook_failure : "a hook failed");
    hk_flow_clear(flow, HK_FLOW_FAIL);
  }
  ctx->hook_failure = NULL;
}

/* ---- checkpoints ------------------------------------------------------------------------------------
   Honouring HK_REQUEST_CHECKPOINT is the same in every loop: every path hooks queued
   (hk_request_checkpoint), then the loop's default path when a hook asked for it (or queued none).
   The queue is copied and cleared first, so hooks of on_checkpoint_saved may queue anew. *no_default
   is set when the default was asked for and the loop has none. */
static tr_err tr__run_checkpoints(hk_ctx *ctx, const char *dflt_path, tr__save_fn save, void *user, char *why, size_t cap,
                                  int *no_default) {
  const char *paths[HK_MAX_CHECKPOINT_PATHS];
  int i, n = ctx->n_checkpoint_paths, dflt = ctx->checkpoint_default || n == 0;
  if (n < 0 || n > HK_MAX_CHECKPOINT_PATHS) n = 0;
  for (i = 0; i < n; i++) paths[i] = ctx->checkpoint_paths[i];
  ctx->n_checkpoint_paths = 0;
  ctx->checkpoint_default = 0;
  for (i = 0; i <= n; i++) {
    const char *path = i < n ? paths[i] : dflt ? dflt_path : NULL;
    tr_err e;
    if (i == n && !dflt) break;
    if (!path) { *no_default = 1; break; }
    if ((e = save(user, ctx, path, why, cap)) != TR_OK) return e;
  }
  return TR_OK;
}

#if defined(TR__POSIX) && !defined(__cplusplus)
extern FILE *fdopen(int fd, const char *mode); /* strict C99 headers hide these */
extern int fileno(FILE *f);
extern FILE *fmemopen(void *buf, size_t size, const char *mode);
extern FILE *open_memstream(char **ptr, size_t *size);
#endif
/* Write a file atomically through tr__afile (the one writer): fill writes it into a stream on the new
   temporary file, which is then flushed to the disk and renamed over path; any failure removes the
   temporary file, leaves path as it was and says why. fill returns 0, or an errno-like code. path may
   be a symlink (replaced itself, never followed), never a device or a directory. */
static tr_err tr__write_atomic(const char *path, int (*fill)(FILE *f, void *user), void *user, char *why, size_t cap) {
  tr__afile a;
  FILE *f = NULL;
  int e;
  if (tr__afile_open(&a, path, TR__AF_LINK_OK) == 0) {
#ifdef TR__POSIX
    int fd = dup(a.fd); /* the stream gets its own descriptor: the writer keeps a.fd for fsync and rename */
    if (fd < 0 || !(f = fdopen(fd, "wb"))) {
      a.err = errno ? errno : EIO;
      a.step = "writing";
      if (fd >= 0) close(fd);
    }
#else
    f = a.f;
#endif
    if (f) {
      int filled = fill(f, user);
      if (filled && !a.err) { a.err = filled > 0 ? filled : EIO; a.step = "writing"; }
      if (fflush(f) != 0 && !a.err) { a.err = errno ? errno : EIO; a.step = "writing"; }
#ifdef TR__POSIX
      if (fclose(f) != 0 && !a.err) { a.err = errno ? errno : EIO; a.step = "writing"; }
#endif
    }
  }
  e = a.err ? a.err : tr__afile_commit(&a, NULL);
  if (e && !a.tmp) tr__msg(why, cap, "out of memory writing '%s'", path);
  else if (e && a.special) tr__msg(why, cap, "'%s' is not a regular file (a device, a FIFO or a directory): it is not replaced", path);
  else if (e) tr__msg(why, cap, "%s '%s' failed: %s (the previous '%s' is untouched)", a.step, a.tmp, strerror(e), path);
  tr__afile_free(&a);
  return !e ? TR_OK : e == ENOMEM ? TR_ERR_NOMEM : TR_ERR_IO;
}

/* The run's checkpoint: the model's bytes (save_model), then the state block, then a trailer
     state:   "TRRUN" 0 0 0 | u64 epoch, global_step, batch_idx, samples_seen | u32 hooks |
              per hook: u32 key length | key | u64 length | the callback's state
     trailer: u64 state length | u32 CRC-32C of the state | u32 version (1) | "TRRUNEND"
   (little-endian), so the file starts as the loop's own format and ends with what the library needs. */
#define TR__RUN_TRAILER 24
typedef struct tr__run_saving { tr_run *run; hk_bytes state; } tr__run_saving;
static hk_err tr__run_state_sink(const char *key, const void *data, size_t len, void *user) {
  hk_bytes *b = (hk_bytes *)user;
  unsigned char x[8];
  size_t klen = strlen(key);
  tr__le(x, (uint64_t)klen, 4); hk_bytes_put(b, x, 4);
  hk_bytes_put(b, key, klen);
  tr__le(x, (uint64_t)len, 8); hk_bytes_put(b, x, 8);
  hk_bytes_put(b, data, len);
  return HK_OK;
}
static void tr__run_trailer(unsigned char *t, const hk_bytes *state) {
  tr__le(t, (uint64_t)state->len, 8);
  tr__le(t + 8, tr_crc32c(state->data, state->len), 4);
  tr__le(t + 12, 1, 4);
  memcpy(t + 16, "TRRUNEND", 8);
}
static int tr__run_fill(FILE *f, void *user) {
  tr__run_saving *s = (tr__run_saving *)user;
  unsigned char t[TR__RUN_TRAILER];
  if (s->run->desc.save_model(s->run->desc.model_user, f) != 0) return EIO;
  if (ferror(f)) return errno ? errno : EIO;
  tr__run_trailer(t, &s->state);
  if (fwrite(s->state.data, 1, s->state.len, f) != s->state.len || fwrite(t, 1, sizeof t, f) != sizeof t) return errno ? errno : EIO;
  return 0;
}

/* Collect the run's save in flight (wait: until it is on disk): on_checkpoint_saved, or its error fails
   the run. At every safe point (no wait), before any other save or load, and before the run ends. */
static void tr__run_saves_settle(tr_run *run, hk_ctx *ctx, int wait) {
  if (run && run->tr__p->asave) tr__asave_settle(run->tr__p->asave, ctx, wait);
}

/* The loop's side of an asynchronous tr_run_save: the file is on disk, or the write failed. */
static void tr__run_save_ended(tr__asave *as, hk_ctx *ctx) {
  hk_registry *reg = (hk_registry *)as->owner;
  const char *path = ctx->path, *failure = ctx->hook_failure; /* inside a hook's dispatch: put back after */
  if (as->err) {
    tr_run_fail(reg, as->err == ENOMEM ? TR_ERR_NOMEM : TR_ERR_IO, "tr_run_save (in the background): %s", as->why);
    return;
  }
  ctx->path = as->path;
  ctx->hook_failure = NULL;
  if (HK_FIRE(reg, HK_ON_CHECKPOINT_SAVED, ctx) == HK_FAIL)
    tr_run_fail(reg, TR_ERR_HOOK, "%s", ctx->hook_failure ? ctx->hook_failure : "on_checkpoint_saved failed");
  ctx->path = path;
  ctx->hook_failure = failure;
}

/* The step's part of an asynchronous save: save_model writes into the staging buffer (a memory stream
   on it, unbuffered: one copy), the state block and trailer follow, and the writer thread takes it from
   there. The first save (or one that outgrew the buffer) writes into a growing stream instead, whose
   buffer becomes the staging buffer: save_model runs once per save (twice when the state has grown).
   POSIX (fmemopen, open_memstream) only. */
#ifdef TR__POSIX
static tr_err tr__run_stage(tr_run *run, hk_registry *reg, const hk_bytes *state, const char *path, char *why, size_t cap) {
  tr__run_priv *q = run->tr__p;
  tr__asave *as;
  FILE *f;
  long pos;
  size_t len = 0;
  int rc, over = 1;
  if (!q->asave && !(q->asave = tr__asave_new())) { tr__msg(why, cap, "out of memory saving '%s'", path); return TR_ERR_NOMEM; }
  as = q->asave;
  if (as->cap) {
    if (!(f = fmemopen(as->buf, as->cap, "wb"))) { tr__msg(why, cap, "cannot stage '%s' in memory: %s", path, strerror(errno)); return TR_ERR_IO; }
    setvbuf(f, NULL, _IONBF, 0); /* straight into the buffer */
    rc = run->desc.save_model(run->desc.model_user, f);
    over = fflush(f) != 0 || ferror(f);
    pos = ftell(f);
    fclose(f);
    over = over || pos < 0 || (size_t)pos >= as->cap;
    len = over ? 0 : (size_t)pos;
  }
  if (over) { /* it did not fit (or there is no buffer yet): a stream that grows */
    char *mem = NULL;
    size_t size = 0;
    if (!(f = open_memstream(&mem, &size))) { tr__msg(why, cap, "cannot stage '%s' in memory: %s", path, strerror(errno)); return TR_ERR_NOMEM; }
    rc = run->desc.save_model(run->desc.model_user, f);
    over = fflush(f) != 0 || ferror(f);
    if (fclose(f) != 0) over = 1;
    if (over || !mem) { free(mem); tr__msg(why, cap, "out of memory staging '%s'", path); return TR_ERR_NOMEM; }
    free(as->buf);
    as->buf = (unsigned char *)mem;
    as->cap = len = size;
  }
  if (rc != 0) { tr__msg(why, cap, "save_model failed for '%s' (the previous '%s' is untouched)", path, path); return TR_ERR_IO; }
  if (tr__asave_reserve(as, len + state->len + TR__RUN_TRAILER) || tr__asave_set_path(as, path)) {
    tr__msg(why, cap, "out of memory staging '%s'", path);
    return TR_ERR_NOMEM;
  }
  if (state->len) memcpy(as->buf + len, state->data, state->len);
  tr__run_trailer(as->buf + len + state->len, state);
  as->len = len + state->len + TR__RUN_TRAILER;
  as->job = tr__asave_raw;
  as->done = tr__run_save_ended;
  as->owner = reg;
  tr__asave_submit(as);
  return TR_OK;
}
#endif

static tr_err tr__run_save_to(void *user, hk_ctx *ctx, const char *path, char *why, size_t cap) {
  hk_registry *reg = (hk_registry *)user;
  tr__run_saving s;
  unsigned char x[8];
  int n_hooks = 0;
  uint64_t v[4];
  size_t count_at;
  tr_err e;
  int i, async;
  memset(&s, 0, sizeof s);
  s.run = tr_run_get(reg);
  if (!s.run || !s.run->desc.save_model) {
    tr__msg(why, cap, "cannot save '%s': the run has no save_model (tr_run_desc.save_model and load_model write and "
             "read your model's own format)", path);
    return TR_ERR_INVALID;
  }
  tr__run_saves_settle(s.run, ctx, 1); /* one save in flight: this one waits for the last */
  async = s.run->running != HK_STAGE_NONE && !s.run->tr__p->sync_only &&
          (s.run->desc.async_save == TR_YES || (s.run->tr__p->async_requests && s.run->tr__p->in_request));
  ctx->path = path;
  ctx->hook_failure = NULL;
  if (HK_FIRE(reg, HK_ON_SAVE_CHECKPOINT, ctx) == HK_FAIL) {
    tr__msg(why, cap, "%s", ctx->hook_failure ? ctx->hook_failure : "on_save_checkpoint failed");
    ctx->path = NULL;
    return TR_ERR_HOOK;
  }
  hk_bytes_put(&s.state, "TRRUN\0\0\0", 8);
  v[0] = (uint64_t)ctx->epoch; v[1] = (uint64_t)ctx->global_step; v[2] = (uint64_t)ctx->batch_idx; v[3] = (uint64_t)ctx->samples_seen;
  for (i = 0; i < 4; i++) { tr__le(x, v[i], 8); hk_bytes_put(&s.state, x, 8); }
  count_at = s.state.len;
  hk_bytes_put(&s.state, "\0\0\0\0", 4);
  if (hk_state_save(reg, tr__run_state_sink, &s.state) != HK_OK) {
    tr__msg(why, cap, "saving the callbacks' state for '%s' failed: %s", path, hk_last_error(reg));
    hk_bytes_free(&s.state);
    ctx->path = NULL;
    return TR_ERR_STATE;
  }
  if (tr__lr_state_any(&s.run->lr_state)) { /* the schedule's state, as one more block (tr_run_load takes it out) */
    unsigned char b[TR__LR_STATE_SIZE];
    tr__lr_state_put(b, &s.run->lr_state);
    (void)tr__run_state_sink(TR__LR_STATE_KEY, b, sizeof b, &s.state);
  }
  { /* count the hooks: walk the blocks just written */
    size_t p = count_at + 4;
    while (p + 4 <= s.state.len) {
      uint64_t klen = tr__get(s.state.data + p, 4), len = tr__get(s.state.data + p + 4 + klen, 8);
      p += 4 + (size_t)klen + 8 + (size_t)len;
      n_hooks++;
    }
    if (!s.state.failed) tr__le(s.state.data + count_at, (uint64_t)n_hooks, 4);
  }
  if (s.state.failed) { hk_bytes_free(&s.state); ctx->path = NULL; tr__msg(why, cap, "out of memory saving '%s'", path); return TR_ERR_NOMEM; }
#ifdef TR__POSIX
  e = async ? tr__run_stage(s.run, reg, &s.state, path, why, cap) : tr__write_atomic(path, tr__run_fill, &s, why, cap);
#else
  async = 0;
  e = tr__write_atomic(path, tr__run_fill, &s, why, cap);
#endif
  hk_bytes_free(&s.state);
  if (!e && !async) { /* asynchronous: when it is on disk (tr__run_save_ended) */
    ctx->hook_failure = NULL;
    if (HK_FIRE(reg, HK_ON_CHECKPOINT_SAVED, ctx) == HK_FAIL) {
      tr__msg(why, cap, "%s", ctx->hook_failure ? ctx->hook_failure : "on_checkpoint_saved failed");
      e = TR_ERR_HOOK;
    }
  }
  ctx->path = NULL;
  return e;
}

TRAIN_API tr_err tr_run_save(hk_registry *reg, hk_ctx *ctx, const char *path) {
  tr_run *run = tr_run_get(reg);
  char why[400];
  tr_err e;
  if (!run || !ctx || !path || !path[0]) return TR_ERR_INVALID;
  if ((e = tr__run_save_to(reg, ctx, path, why, sizeof why)) != TR_OK) tr__msg(run->tr__p->error, sizeof run->tr__p->error, "tr_run_save: %s", why);
  return e;
}

TRAIN_API tr_err tr_run_load(hk_registry *reg, hk_ctx *ctx, const char *path) {
  tr_run *run = tr_run_get(reg);
  char *err;
  size_t cap;
  FILE *f = NULL;
  unsigned char t[TR__RUN_TRAILER], *state = NULL;
  uint64_t size, slen, v[4];
  hk_state_blob *blobs = NULL;
  uint32_t n_hooks = 0, i;
  size_t p;
  int missing = 0;
  tr_sched_state lr_state;
  tr_err e = TR_OK;
  if (!run || !ctx || !path) return TR_ERR_INVALID;
  tr__run_saves_settle(run, ctx, 1); /* the file may be the one being written */
  err = run->tr__p->error;
  cap = sizeof run->tr__p->error;
  err[0] = 0;
  if (!run->desc.load_model) {
    tr__msg(err, cap, "tr_run_load: the run has no load_model (tr_run_setup's save_model / load_model)");
    return TR_ERR_INVALID;
  }
#define TR__RUN_BAD(code, ...) do { tr__msg(err, cap, __VA_ARGS__); e = code; goto done; } while (0)
  if (!(f = fopen(path, "rb"))) TR__RUN_BAD(errno == ENOENT ? TR_ERR_NOT_FOUND : TR_ERR_IO, "tr_run_load: cannot open '%s': %s", path, strerror(errno));
#ifdef TR__POSIX
  {
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) TR__RUN_BAD(TR_ERR_IO, "tr_run_load: '%s' is not a regular file", path);
  }
#endif
  if (fseek(f, 0, SEEK_END) != 0 || (long)(size = (uint64_t)ftell(f)) < 0) TR__RUN_BAD(TR_ERR_IO, "tr_run_load: cannot size '%s'", path);
  if (size < TR__RUN_TRAILER || fseek(f, (long)(size - TR__RUN_TRAILER), SEEK_SET) != 0 || fread(t, 1, sizeof t, f) != sizeof t ||
      memcmp(t + 16, "TRRUNEND", 8) != 0)
    TR__RUN_BAD(TR_ERR_FORMAT, "tr_run_load: '%s' was not written by tr_run_save (no run trailer at its end)", path);
  if (tr__get(t + 12, 4) != 1) TR__RUN_BAD(TR_ERR_FORMAT, "tr_run_load: '%s' has run format version %u; this train.h reads 1", path, (unsigned)tr__get(t + 12, 4));
  slen = tr__get(t, 8);
  /* 44: the tag, the four counters and the count of hooks (a registry without stateful callbacks) */
  if (slen < 44 || slen > size - TR__RUN_TRAILER || slen > ((uint64_t)1 << 31))
    TR__RUN_BAD(TR_ERR_FORMAT, "tr_run_load: '%s' is truncated or corrupted (its state block does not fit)", path);
  if (!(state = (unsigned char *)malloc((size_t)slen))) TR__RUN_BAD(TR_ERR_NOMEM, "tr_run_load: out of memory");
  if (fseek(f, (long)(size - TR__RUN_TRAILER - slen), SEEK_SET) != 0 || fread(state, 1, (size_t)slen, f) != slen)
    TR__RUN_BAD(TR_ERR_IO, "tr_run_load: reading '%s' failed", path);
  if (tr_crc32c(state, (size_t)slen) != (uint32_t)tr__get(t + 8, 4) || memcmp(state, "TRRUN\0\0\0", 8) != 0)
    TR__RUN_BAD(TR_ERR_FORMAT, "tr_run_load: '%s' is corrupted (the checksum of its state block does not match)", path);
  for (i = 0; i < 4; i++) v[i] = tr__get(state + 8 + 8 * i, 8);
  for (i = 0; i < 4; i++)
    if ((int64_t)v[i] < 0 || v[i] > ((uint64_t)1 << 53))
      TR__RUN_BAD(TR_ERR_FORMAT, "tr_run_load: '%s' holds a counter out of range (epoch, step, batch, samples: %lld %lld %lld %lld)",
                  path, (long long)v[0], (long long)v[1], (long long)v[2], (long long)v[3]);
  n_hooks = (uint32_t)tr__get(state + 40, 4);
  if (n_hooks > 4096) TR__RUN_BAD(TR_ERR_FORMAT, "tr_run_load: '%s' lists %u callback states (corrupted?)", path, (unsigned)n_hooks);
  if (n_hooks && !(blobs = (hk_state_blob *)calloc(n_hooks, sizeof *blobs))) TR__RUN_BAD(TR_ERR_NOMEM, "tr_run_load: out of memory");
  for (p = 44, i = 0; i < n_hooks; i++) { /* each key is NUL-terminated in place: the length field ahead of the next is copied first */
    uint64_t klen, len;
    if (p + 4 > slen || (klen = tr__get(state + p, 4)) == 0 || klen > 256 || p + 4 + klen + 8 > slen)
      TR__RUN_BAD(TR_ERR_FORMAT, "tr_run_load: '%s': callback state %u is malformed", path, (unsigned)i);
    len = tr__get(state + p + 4 + klen, 8);
    if (len > slen - (p + 4 + klen + 8)) TR__RUN_BAD(TR_ERR_FORMAT, "tr_run_load: '%s': callback state %u is truncated", path, (unsigned)i);
    if (memchr(state + p + 4, 0, (size_t)klen)) TR__RUN_BAD(TR_ERR_FORMAT, "tr_run_load: '%s': a callback name holds a NUL byte", path);
    blobs[i].key = (const char *)(state + p + 3); /* moved one byte back below, to make room for its NUL */
    memmove(state + p + 3, state + p + 4, (size_t)klen);
    state[p + 3 + klen] = 0;
    blobs[i].data = state + p + 4 + klen + 8;
    blobs[i].len = (size_t)len;
    p += 4 + (size_t)klen + 8 + (size_t)len;
  }
  if (p != slen) TR__RUN_BAD(TR_ERR_FORMAT, "tr_run_load: '%s': %llu stray bytes after the callbacks' state", path, (unsigned long long)(slen - p));
  memset(&lr_state, 0, sizeof lr_state); /* none saved: the schedule's start */
  for (i = 0; i < n_hooks; i++)
    if (!strcmp(blobs[i].key, TR__LR_STATE_KEY)) {
      char why[200];
      if (tr__lr_state_get((const unsigned char *)blobs[i].data, blobs[i].len, &lr_state, why, sizeof why))
        TR__RUN_BAD(TR_ERR_FORMAT, "tr_run_load: '%s': %s", path, why);
      blobs[i] = blobs[--n_hooks];
      break;
    }
  if (hk_state_check(reg, blobs, (int)n_hooks, &missing) != HK_OK)
    TR__RUN_BAD(TR_ERR_FORMAT, "tr_run_load: '%s': %s", path, hk_last_error(reg));
  for (i = 0; i < n_hooks; i++)
    if (blobs[i].result == HK_ERR_NOT_FOUND) tr__run_say(run, ctx, "tr_run_load", "'%s' holds state for '%s', which is not registered now (ignored)", path, blobs[i].key);
  if (missing) tr__run_say(run, ctx, "tr_run_load", "'%s': %s (they keep their current state)", path, hk_last_error(reg));
  rewind(f);
  if (run->desc.load_model(run->desc.model_user, f) != 0) TR__RUN_BAD(TR_ERR_FORMAT, "tr_run_load: load_model failed on '%s' (the callbacks and counters are unchanged)", path);
  if (hk_state_load_all(reg, blobs, (int)n_hooks) != HK_OK)
    TR__RUN_BAD(TR_ERR_STATE, "tr_run_load: '%s': a callback refused its state: %s (the model is loaded, the callbacks are unchanged)", path, hk_last_error(reg));
  ctx->epoch = (int64_t)v[0];
  ctx->global_step = (int64_t)v[1];
  ctx->batch_idx = (int64_t)v[2];
  ctx->samples_seen = (int64_t)v[3];
  run->lr_state = lr_state;
  run->tr__p->last_step = ctx->global_step;
  hk_grads_changed(ctx);
  free(run->tr__p->resume);
  run->tr__p->resume = tr__strdup(path);
  run->resume_from = run->tr__p->resume ? run->tr__p->resume : "";
  ctx->path = path;
  ctx->hook_failure = NULL;
  if (HK_FIRE(reg, HK_ON_LOAD_CHECKPOINT, ctx) == HK_FAIL)
    TR__RUN_BAD(TR_ERR_HOOK, "tr_run_load: %s", ctx->hook_failure ? ctx->hook_failure : "on_load_checkpoint failed");
#undef TR__RUN_BAD
done:
  ctx->path = NULL;
  if (f) fclose(f);
  free(state);
  free(blobs);
  return e;
}

/* ---- start, safe points, finish ------------------------------------------------------------------ */
static void tr__run_fire(hk_registry *reg, hk_ctx *ctx, int event, hk_flow *flow) {
  tr_run *run = (tr_run *)hk_attached(reg);
  if (run && run->failed) return;
  (void)HK_FIRE_FLOW(reg, event, ctx, flow);
  tr__run_settle(reg, ctx, flow);
}

TRAIN_API tr_err tr_run_start(hk_registry *reg, hk_ctx *ctx, const char *resume_from) {
  tr_run *run = tr_run_get(reg);
  tr__run_priv *q;
  hk_flow flow = { 0 };
  if (!run || !ctx) return TR_ERR_INVALID;
  q = run->tr__p;
  if (run->running != HK_STAGE_NONE) {
    hk_set_error(reg, HK_ERR_INVALID, "tr_run_start: a run is going already (tr_run_finish ends it)");
    return TR_ERR_INVALID;
  }
  run->failed = 0;
  q->err = TR_OK;
  q->error[0] = 0;
  q->sync_only = 0;
  memset(q->stamp, 0, sizeof q->stamp);
  q->stop_pending = 0;
  q->own_loop = 1;
  q->reg = reg;
  q->last_step = ctx->global_step;
  run->running = HK_STAGE_FIT;
  run->trainer = NULL;
  ctx->reg = reg;
  ctx->stage = HK_STAGE_FIT;
  if (ctx->world_size < 1) ctx->world_size = 1;
  q->rank = ctx->rank; /* tr_print's */
  ctx->requests = 0;
  ctx->n_checkpoint_paths = ctx->checkpoint_default = 0;
  if (!run->desc.no_signals) q->signals = hk_stop_signals_install(HK_STOP_COUNT_ONLY) == 0;
  tr__run_fire(reg, ctx, HK_SETUP, &flow);
  tr__run_fire(reg, ctx, HK_CONFIGURE_MODEL, &flow);
  if (!run->failed && resume_from && resume_from[0]) {
    tr_err e = tr_run_load(reg, ctx, resume_from);
    if (e) { char why[sizeof q->error]; memcpy(why, q->error, sizeof why); tr_run_fail(reg, e, "%s", why); }
    else tr__run_say_resumed(run, ctx, resume_from);
    q->last_step = ctx->global_step;
  }
  tr__run_fire(reg, ctx, HK_ON_FIT_START, &flow);
  tr__run_fire(reg, ctx, HK_ON_TRAIN_START, &flow);
  if (HK_FLOW_HAS(&flow, HK_FLOW_STOP)) q->stop_pending = 1;
  return run->failed ? q->err : TR_OK;
}

/* A safe point: requests, signals, the stop decision. epoch_end: after on_train_epoch_end. */
static unsigned tr__run_safe_point(hk_registry *reg, hk_ctx *ctx, hk_flow *flow, int epoch_end) {
  tr_run *run = tr_run_get(reg);
  tr__run_priv *q;
  unsigned out = 0, r;
  if (!run || !ctx) return TR_RUN_STOP;
  q = run->tr__p;
  tr__run_settle(reg, ctx, flow);
  if (q->asave) tr__run_saves_settle(run, ctx, 0); /* a save written in the background: done yet? */
  if (!epoch_end && !run->failed && ctx->global_step > q->last_step) { /* the batch stepped: a record when due */
    int64_t n = run->desc.log_every_n_steps ? run->desc.log_every_n_steps : 50;
    q->last_step = ctx->global_step;
    if (n > 0 && ctx->global_step % n == 0 && HK_ACTIVE(reg, HK_ON_LOG)) {
      tr__run_send(run, ctx, "train", flow);
      tr__run_settle(reg, ctx, flow);
    }
  }
  r = ctx->requests;
  ctx->requests = 0;
  if (!run->failed && (r & HK_REQUEST_VALIDATION)) out |= TR_RUN_VALIDATE;
  if (!run->failed && (r & HK_REQUEST_CHECKPOINT)) {
    char why[512];
    int no_default = 0;
    tr_err e;
    q->in_request = 1;
    e = tr__run_checkpoints(ctx, run->desc.save_to, tr__run_save_to, reg, why, sizeof why, &no_default);
    q->in_request = 0;
    if (no_default) tr__run_say(run, ctx, "tr_run", "a hook requested a checkpoint but tr_run_desc.save_to is not set");
    if (e) tr_run_fail(reg, e, "%s", why);
  }
  if (!run->failed && (r & HK_REQUEST_LOG)) {
    tr__run_log_line(run, ctx);
    if (HK_ACTIVE(reg, HK_ON_LOG)) { tr__run_send(run, ctx, "train", flow); tr__run_settle(reg, ctx, flow); }
  }
  if (q->signals && hk_stop_requested() > 0)
    tr_run_fail(reg, TR_ERR_INTERRUPTED, "interrupted (SIGINT or SIGTERM): stopped after step %lld", (long long)ctx->global_step);
  if (flow && HK_FLOW_HAS(flow, HK_FLOW_STOP)) {
    int64_t epochs = ctx->epoch + (epoch_end ? 1 : 0);
    if (epochs >= run->desc.min_epochs && ctx->global_step >= run->desc.min_steps) out |= TR_RUN_STOP;
  }
  if (q->stop_pending || run->failed) out |= TR_RUN_STOP;
  return out;
}
TRAIN_API unsigned tr_run_batch_end(hk_registry *reg, hk_ctx *ctx, hk_flow *flow) { return tr__run_safe_point(reg, ctx, flow, 0); }
TRAIN_API unsigned tr_run_epoch_end(hk_registry *reg, hk_ctx *ctx, hk_flow *flow) { return tr__run_safe_point(reg, ctx, flow, 1); }

TRAIN_API tr_err tr_run_finish(hk_registry *reg, hk_ctx *ctx, tr_err status) {
  tr_run *run = tr_run_get(reg);
  tr__run_priv *q;
  hk_flow flow = { 0 };
  tr_err e;
  if (!run || !ctx) return TR_ERR_INVALID;
  q = run->tr__p;
  if (run->running == HK_STAGE_NONE) return run->failed ? q->err : TR_OK;
  if (status != TR_OK) tr_run_fail(reg, status, "the loop ended the run: %s", tr_err_name(status));
  ctx->stage = HK_STAGE_FIT;
  if (!run->failed) {
    tr__run_fire(reg, ctx, HK_ON_TRAIN_END, &flow);
    if (!run->failed && (ctx->requests & (HK_REQUEST_CHECKPOINT | HK_REQUEST_LOG))) {
      ctx->requests &= HK_REQUEST_CHECKPOINT | HK_REQUEST_LOG; /* a validation is not run any more */
      (void)tr__run_safe_point(reg, ctx, &flow, 1);
    }
    tr__run_fire(reg, ctx, HK_ON_FIT_END, &flow);
  }
  tr__run_saves_settle(run, ctx, 1); /* the run ends once its last save is on disk (or has failed it) */
  q->sync_only = 1;                  /* a save from on_exception or teardown: nothing collects it later */
  if (run->failed) {
    ctx->abort_reason = q->error;
    ctx->hook_failure = NULL;
    (void)HK_FIRE(reg, HK_ON_EXCEPTION, ctx);
    if (ctx->hook_failure) tr__run_say(run, ctx, "tr_run", "%s (on_exception: reported only)", ctx->hook_failure);
  }
  ctx->hook_failure = NULL;
  (void)HK_FIRE(reg, HK_TEARDOWN, ctx);
  if (ctx->hook_failure) tr__run_say(run, ctx, "tr_run", "%s (teardown: reported only)", ctx->hook_failure);
  ctx->hook_failure = NULL;
  ctx->abort_reason = NULL;
  if (q->signals) { hk_stop_signals_restore(); q->signals = 0; }
  e = run->failed ? q->err : TR_OK;
  run->running = HK_STAGE_NONE;
  q->own_loop = 0;
  ctx->stage = HK_STAGE_NONE;
  ctx->requests = 0;
  return e;
}

#ifndef TRAIN_NO_CALLBACKS
/* =================================================================================================
   STANDARD CALLBACKS (implementation)
   One part per callback (lr_finder's is the trainer's: it re-runs its steps); their factories are in
   "the factories" below. A callback's state is one malloc'd struct (its hk_callback user), freed by
   its destroy; nothing here runs on a step unless the callback is due.
   ================================================================================================= */
/* The parameter views a callback works on: the loop's, checked to be in host memory. */
TR__SHARED int tr__host_views(hk_ctx *ctx, const hk_tensor *v, const char *who) {
  int k;
  for (k = 0; k < ctx->n_tensors; k++)
    if (v[k].on_device) return hk_fail(ctx, "%s: tensor '%s' is in device memory; it reads host memory only", who, v[k].name), -1;
  return 0;
}
/* from the bits, as hk_is_finite: -ffast-math folds x != x to 0 */
TR__SHARED const char *tr__nonfinite_name(double x) {
  uint64_t b;
  memcpy(&b, &x, sizeof b);
  return (b & 0xfffffffffffffull) ? "nan" : b >> 63 ? "-inf" : "inf";
}
/* A hand-written loop that forgot to say it is fitting gets nothing from the monitoring callbacks (they
   act only in a fit): say so, once per callback. */
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

#if TR__ON_EARLY_STOPPING
/* ---- early_stopping ------------------------------------------------------------------------------- */
TRAIN_API const char *tr_stop_reason_name(tr_stop_reason r) {
  static const char *const names[TR_STOP_REASON_COUNT] = {
#define TR__X(sym, name) name,
    TR_STOP_REASONS(TR__X)
#undef TR__X
  };
  return (unsigned)r < TR_STOP_REASON_COUNT ? names[r] : "unknown";
}

typedef struct tr__es {
  tr_early_stopping_state pub;
  tr_run *run;          /* the registry's run: what the loop says (section THE RUN LAYER) */
  char *monitor, *message;
  tr_mode mode;
  double min_delta;             /* signed as Lightning: negative for min */
  int strict, check_finite, has_stop, has_div, at_epoch_flag, verbose, zero_only, log_stop;
  int64_t checks;               /* checks made in this fit */
  int warned_stage, warned_never;
  double stop_thr, div_thr;
} tr__es;

static void tr__es_destroy(void *user) {
  tr__es *s = (tr__es *)user;
  if (!s) return;
  free(s->monitor);
  free(s->message);
  free(s);
}


static hk_signal tr__es_check(tr__es *s, hk_ctx *ctx) {
  tr_run *run = s->run;
  tr_stop_reason why = TR_STOP_NOT_STOPPED;
  char msg[400];
  double cur;
  tr__warn_stage(run, ctx, "early_stopping", &s->warned_stage);
  if (ctx->stage != HK_STAGE_FIT) return HK_CONTINUE; /* not in the sanity check, not outside a fit */
  s->checks++;
  if (!hk_metric_get(ctx, s->monitor, &cur)) {
    if (s->strict) return tr__missing_metric(ctx, "early_stopping", s->monitor);
    if (s->verbose) tr__run_say_on(run, ctx, s->zero_only, "early_stopping", "'%s' is not set; check skipped (strict=false)", s->monitor);
    return HK_CONTINUE;
  }
  msg[0] = 0;
  if (s->check_finite && !hk_is_finite(cur)) {
    why = TR_STOP_NON_FINITE_METRIC;
    snprintf(msg, sizeof msg, "Monitored metric %s = %g is not finite. Previous best value was %.3f. Signaling Trainer to stop.",
             s->monitor, cur, s->pub.best_score);
  } else if (s->has_stop && tr__better(s->mode, cur, s->stop_thr)) {
    why = TR_STOP_STOPPING_THRESHOLD;
    snprintf(msg, sizeof msg, "Stopping threshold reached: %s = %g %s %g. Signaling Trainer to stop.", s->monitor, cur,
             s->mode == TR_MODE_MAX ? ">" : "<", s->stop_thr);
  } else if (s->has_div && tr__better(s->mode, s->div_thr, cur)) {
    why = TR_STOP_DIVERGENCE_THRESHOLD;
    snprintf(msg, sizeof msg, "Divergence threshold reached: %s = %g %s %g. Signaling Trainer to stop.", s->monitor, cur,
             s->mode == TR_MODE_MAX ? "<" : ">", s->div_thr);
  } else if (tr__better(s->mode, cur - s->min_delta, s->pub.best_score)) {
    if (s->verbose) {
      if (hk_is_finite(s->pub.best_score))
        tr__run_say_on(run, ctx, s->zero_only, "early_stopping", "Metric %s improved by %.3f >= min_delta = %g. New best score: %.3f", s->monitor,
                   fabs(s->pub.best_score - cur), fabs(s->min_delta), cur);
      else tr__run_say_on(run, ctx, s->zero_only, "early_stopping", "Metric %s improved. New best score: %.3f", s->monitor, cur);
    }
    s->pub.best_score = cur;
    s->pub.wait_count = 0;
  } else {
    s->pub.wait_count++;
    if (s->pub.wait_count >= s->pub.patience) {
      why = TR_STOP_PATIENCE_EXHAUSTED;
      snprintf(msg, sizeof msg, "Monitored metric %s did not improve in the last %lld records. Best score: %.3f. "
               "Signaling Trainer to stop.", s->monitor, (long long)s->pub.wait_count, s->pub.best_score);
    }
  }
  if (why == TR_STOP_NOT_STOPPED) { /* re-decided: an earlier held "stop" is gone */
    s->pub.held = 0;
    s->pub.stopping_reason = TR_STOP_NOT_STOPPED;
    s->message[0] = 0;
    s->pub.stopping_reason_message = s->message;
    return HK_CONTINUE;
  }
  if (!tr_stop_allowed(ctx)) { /* min_epochs / min_steps unmet: decide again at the next check */
    s->pub.held = 1;
    if (s->verbose) tr__run_say_on(run, ctx, s->zero_only, "early_stopping", "%s (held: min_epochs/min_steps not reached; decided again at the next check)", msg);
    return HK_CONTINUE;
  }
  s->pub.held = 0;
  s->pub.stopping_reason = why;
  s->pub.stopped_epoch = ctx->epoch;
  tr__set_str(&s->message, msg);
  s->pub.stopping_reason_message = s->message;
  if (s->verbose) tr__run_say_on(run, ctx, s->zero_only, "early_stopping", "%s", msg);
  else if (s->log_stop) tr__run_say_on(run, ctx, 1, "early_stopping", "%s", msg); /* Lightning logs it at info level */
  return HK_STOP;
}

/* What can be known before training is checked here: a monitored val/ metric in a run that never
   validates would only fail at the first check. */
static hk_signal tr__es_fit_start(hk_ctx *ctx, void *user) {
  tr__es *s = (tr__es *)user;
  s->checks = 0;
  if (s->run && s->run->desc.epochs == TR_NO && tr__at_epoch_end(s->run, s->at_epoch_flag) && !s->warned_never) {
    s->warned_never = 1; /* known now: say it before the run, not after it */
    tr__run_say(s->run, ctx, "early_stopping", "checks '%s' at on_train_epoch_end, which this loop never fires "
                "(tr_run_desc.epochs = TR_NO): it would never stop training; set check_on_train_epoch_end=false "
                "to check at on_validation_end", s->monitor);
  }
  if (s->run && s->run->desc.validation == TR_NO && tr__starts(s->monitor, "val/")) {
    if (s->strict)
      return hk_fail(ctx, "early_stopping: monitors '%s', but this run never validates (no validation data); "
                     "monitor a training metric, or give the fit validation data", s->monitor);
    tr__run_say(s->run, ctx, "early_stopping", "monitors '%s', but this run never validates: it will never stop "
                "training (strict=false)", s->monitor);
  }
  return HK_CONTINUE;
}
/* Where it checks is asked at each event (the loop may change its settings between runs). */
static hk_signal tr__es_epoch_end(hk_ctx *ctx, void *user) {
  tr__es *s = (tr__es *)user;
  return tr__at_epoch_end(s->run, s->at_epoch_flag) ? tr__es_check(s, ctx) : HK_CONTINUE;
}
static hk_signal tr__es_val_end(hk_ctx *ctx, void *user) {
  tr__es *s = (tr__es *)user;
  return tr__at_epoch_end(s->run, s->at_epoch_flag) ? HK_CONTINUE : tr__es_check(s, ctx);
}
/* A check point the loop never reached is a misconfiguration the user cannot see: say so, once. */
static hk_signal tr__es_train_end(hk_ctx *ctx, void *user) {
  tr__es *s = (tr__es *)user;
  int at_epoch = tr__at_epoch_end(s->run, s->at_epoch_flag);
  if (ctx->stage == HK_STAGE_FIT && s->checks == 0 && !s->warned_never && ctx->global_step > 0) {
    s->warned_never = 1;
    tr__run_say(s->run, ctx, "early_stopping", "never checked '%s' in this fit: it checks at %s, which the loop did not "
                "fire; set check_on_train_epoch_end=%s, or tr_run_desc.check_on_train_epoch_end / epochs", s->monitor,
                at_epoch ? "on_train_epoch_end" : "on_validation_end", at_epoch ? "false" : "true");
  }
  return HK_CONTINUE;
}

static int tr__es_save(void *user, hk_bytes *out) {
  tr__es *s = (tr__es *)user;
  tr__put_u64(out, 1); /* version */
  tr__put_i64(out, s->pub.wait_count);
  tr__put_i64(out, s->pub.stopped_epoch);
  tr__put_f64(out, s->pub.best_score);
  tr__put_i64(out, s->pub.patience);
  tr__put_i64(out, (int64_t)s->pub.stopping_reason);
  tr__put_str(out, s->message);
  tr__put_i64(out, s->pub.held);
  return out->failed ? -1 : 0;
}
static int tr__es_load(void *user, hk_reader *in) {
  tr__es *s = (tr__es *)user;
  int64_t wait = 0, stopped = 0, patience = 0, reason = 0, held = 0; /* (set on every path used; gcc cannot tell) */
  double best = 0;
  char *msg = NULL;
  if (tr__get_version(in, 1) || tr__get_count(in, "wait_count", 0, &wait) || tr__get_count(in, "stopped_epoch", 0, &stopped))
    return -1;
  if (tr__get_f64(in, &best)) return hk_reject(in, "truncated at best_score");
  if (best != best) return hk_reject(in, "best_score is NaN (it is a number, or the mode's worst value +-inf)");
  if (tr__get_i64(in, &patience)) return hk_reject(in, "truncated at patience");
  if (patience < 0 || patience > INT_MAX) /* the constructor's range: wait_count + 1 is compared with it */
    return hk_reject(in, "patience is %lld, outside 0..%d", (long long)patience, INT_MAX);
  if (tr__get_i64(in, &reason)) return hk_reject(in, "truncated at stopping_reason");
  if (reason < 0 || reason >= TR_STOP_REASON_COUNT)
    return hk_reject(in, "stopping_reason is %lld, outside 0..%d", (long long)reason, TR_STOP_REASON_COUNT - 1);
  if (tr__get_text(in, "the stopping message", &msg)) return -1;
  if (tr__get_i64(in, &held) || (held != 0 && held != 1)) { free(msg); return hk_reject(in, "held is truncated or not 0 or 1"); }
  if (tr__get_end(in)) { free(msg); return -1; }
  s->pub.wait_count = wait;
  s->pub.stopped_epoch = stopped;
  s->pub.best_score = best;
  s->pub.patience = patience;
  s->pub.stopping_reason = (tr_stop_reason)reason;
  s->pub.held = (int)held;
  free(s->message);
  s->message = msg;
  s->pub.stopping_reason_message = msg;
  return 0;
}

static tr_err tr__es_make(hk_registry *reg, const tr_early_stopping_desc *d, hk_handle *out, tr__why *w) {
  tr__es *s;
  hk_callback cb;
  char name[300];
  if (!d) return tr__bad(w, "early_stopping: desc is NULL");
  if (!d->monitor || !d->monitor[0]) return tr__bad(w, "early_stopping: monitor is required (the metric to watch, e.g. val/loss)");
  if (strlen(d->monitor) > 200) return tr__bad(w, "early_stopping: monitor is longer than 200 characters");
  if (d->mode != TR_MODE_MIN && d->mode != TR_MODE_MAX)
    return tr__bad(w, "early_stopping: mode %d is not valid (min or max)", (int)d->mode);
  if (!hk_is_finite(d->min_delta) || d->min_delta < 0)
    return tr__bad(w, "early_stopping: min_delta must be a finite number >= 0 (got %g)", d->min_delta);
  if (d->patience < 0 && d->patience != TR_ZERO)
    return tr__bad(w, "early_stopping: patience must be >= 0 (got %d): the checks without improvement before stopping", d->patience);
  if ((d->has_stopping_threshold && !hk_is_finite(d->stopping_threshold)) ||
      (d->has_divergence_threshold && !hk_is_finite(d->divergence_threshold)))
    return tr__bad(w, "early_stopping: stopping_threshold and divergence_threshold must be finite numbers");
  s = (tr__es *)calloc(1, sizeof *s);
  if (!s) return tr__bad(w, "early_stopping: out of memory"), TR_ERR_NOMEM;
  s->run = tr_run_get(reg);
  s->monitor = tr__strdup(d->monitor);
  s->message = tr__strdup("");
  s->mode = d->mode;
  s->min_delta = s->mode == TR_MODE_MIN ? -d->min_delta : d->min_delta;
  s->pub.patience = tr__zero_int(d->patience, 3);
  s->pub.best_score = tr__worst(s->mode);
  s->pub.stopping_reason_message = s->message;
  s->strict = tr__flag(d->strict, 1);
  s->check_finite = tr__flag(d->check_finite, 1);
  s->has_stop = d->has_stopping_threshold != 0;
  s->stop_thr = d->stopping_threshold;
  s->has_div = d->has_divergence_threshold != 0;
  s->div_thr = d->divergence_threshold;
  s->at_epoch_flag = d->check_on_train_epoch_end;
  s->verbose = d->verbose;
  s->log_stop = tr__flag(d->log_stop, 1);
  s->zero_only = tr__flag(d->log_rank_zero_only, 0);
  if (!s->monitor || !s->message) { tr__es_destroy(s); return tr__bad(w, "early_stopping: out of memory"), TR_ERR_NOMEM; }
  /* the state key: two early stoppings on one metric and mode would share it (Lightning's key) */
  snprintf(name, sizeof name, "early_stopping{monitor=%s,mode=%s}", d->monitor, tr__mode_name(s->mode));
  memset(&cb, 0, sizeof cb);
  cb.name = name;
  cb.user = s;
  cb.on_fit_start = tr__es_fit_start;
  cb.on_train_epoch_end = tr__es_epoch_end;
  cb.on_validation_end = tr__es_val_end;
  cb.on_train_end = tr__es_train_end;
  cb.save_state = tr__es_save;
  cb.load_state = tr__es_load;
  cb.destroy = tr__es_destroy;
  return tr__cb_register(reg, &cb, 0, out, w);
}

TR__PUBLIC_OF(tr_early_stopping, es)
#endif /* TR__ON_EARLY_STOPPING */

#if TR__ON_MODEL_CHECKPOINT
/* ---- model_checkpoint ----------------------------------------------------------------------------- */
typedef struct tr__mc {
  tr_model_checkpoint_state pub;
  tr_run *run;          /* the registry's run: what the loop says (section THE RUN LAYER) */
  char *dirpath, *filename, *monitor;
  int dir_default;              /* dirpath was not given: the run's directory's checkpoints/ once it has one */
  int rank;                     /* ctx->rank at setup */
  tr_mode mode;
  int top_k;                    /* -1 all, 0 none, k */
  tr_save_last save_last;
  int64_t every_steps, every_epochs;
  double every_seconds;
  int epoch_flag, at_epoch_end, auto_insert, versions, verbose;
  double (*clock)(void *);
  void *clock_user;
  double last_time_checked;
  int deferred;                 /* a step/time save waits for the next on_validation_end */
  int64_t prev_step;            /* global_step at the previous on_train_batch_end: did this batch step? */
  int val_ran, warned;          /* this fit: a validation has run; the missing-metric warning was given */
  int *pat;                     /* the names it makes, as a pattern (tr__glob) */
  size_t npat;
  int warned_stage;             /* said once that ctx->stage is unset */
  /* best_k_models, in insertion order; a NaN value is kept as NaN and ranks as the worst */
  char **paths;
  double *scores;
  int n, cap;
  char *best, *kth, *last, *newest; /* pub's strings; newest: the newest file saved (save_last's link target) */
  /* requested, not yet on disk: the file, the one it replaces; the last file, the one it replaces */
  char *want, *evict, *want_last, *old_last;
  char *spent;                  /* the last file just saved: ctx->path points at it while on_checkpoint_saved runs */
  int64_t want_step, newest_step; /* the global_step `want` / `newest` hold (-1: not known) */
  int link_after_want;          /* make the last link once `want` is on disk */
  char buf[TR__CB_MAX_STR];     /* names are rendered here (no allocation but the kept paths) */
} tr__mc;

static char *tr__join(const char *a, const char *b);
static int tr__mc_default_dir(tr__mc *s);
static void tr__mc_sync(tr__mc *s) { /* point the public view at the current values */
  s->pub.dirpath = s->dirpath;
  s->pub.best_model_path = s->best ? s->best : "";
  s->pub.kth_best_model_path = s->kth ? s->kth : "";
  s->pub.last_model_path = s->last ? s->last : "";
  s->pub.n_best_k = s->n;
  s->pub.best_k_paths = (const char *const *)s->paths;
  s->pub.best_k_scores = s->scores;
}

static void tr__mc_destroy(void *user) {
  tr__mc *s = (tr__mc *)user;
  int i;
  if (!s) return;
  for (i = 0; i < s->n; i++) free(s->paths[i]);
  free(s->paths);
  free(s->scores);
  free(s->dirpath); free(s->filename); free(s->monitor);
  free(s->best); free(s->kth); free(s->last); free(s->newest);
  free(s->want); free(s->evict); free(s->want_last); free(s->old_last);
  free(s->pat); free(s->spent);
  free(s);
}

/* -- file name templates: {name} or {name:fmt}, fmt = [0][width][.precision][f|e|g|d] -- */
typedef struct tr__field { const char *key; size_t key_len; int zero, width, prec; char type; } tr__field;

/* Parse the field at p ('{'); returns the position after '}', or NULL with a reason. */
static const char *tr__field_parse(const char *p, tr__field *f, const char **why) {
  const char *q = p + 1, *end;
  memset(f, 0, sizeof *f);
  f->prec = -1;
  f->key = q;
  while (*q && *q != '}' && *q != ':' && *q != '{') q++;
  f->key_len = (size_t)(q - f->key);
  if (*q == '{') { *why = "a '{' inside a field"; return NULL; }
  if (!*q) { *why = "a '{' without its '}'"; return NULL; }
  if (f->key_len == 0) { *why = "an empty field name"; return NULL; }
  if (*q == '}') return q + 1;
  end = strchr(q, '}');
  if (!end) { *why = "a '{' without its '}'"; return NULL; }
  q++; /* the format spec */
  if (*q == '0') { f->zero = 1; q++; }
  while (q < end && *q >= '0' && *q <= '9') { f->width = f->width * 10 + (*q - '0'); q++; if (f->width > 64) break; }
  if (q < end && *q == '.') {
    q++;
    if (q == end || *q < '0' || *q > '9') { *why = "a '.' without a precision in the format"; return NULL; }
    f->prec = 0;
    while (q < end && *q >= '0' && *q <= '9') { f->prec = f->prec * 10 + (*q - '0'); q++; if (f->prec > 30) break; }
  }
  if (q < end && strchr("fegd", *q)) f->type = *q++;
  if (q != end || f->width > 64 || f->prec > 30) { *why = "a format this library cannot render (valid: [0][width][.precision][f|e|g|d], e.g. .2f)"; return NULL; }
  return end + 1;
}

/* Check a template; 0 if fine, else a message in w. */
static int tr__template_check(const char *tpl, tr__why *w) {
  const char *p = tpl, *why = NULL;
  tr__field f;
  while (*p) {
    if (*p == '/') return tr__bad(w, "model_checkpoint: filename '%s' contains '/': put directories in dirpath", tpl), -1;
    if (*p == '}') return tr__bad(w, "model_checkpoint: filename '%s' has a '}' without its '{' (at offset %d)", tpl, (int)(p - tpl)), -1;
    if (*p != '{') { p++; continue; }
    if (!(p = tr__field_parse(p, &f, &why)) || (f.type == 'd' && f.prec >= 0))
      return tr__bad(w, "model_checkpoint: filename '%s' is not a valid template: %s; write fields as {epoch}, {step}, "
                     "{val/loss} or {val/loss:.2f}", tpl, why ? why : "'d' takes no precision"), -1;
  }
  return 0;
}

/* Python's str() of a float, near enough: the shortest digits that read back the same. */
static void tr__repr(char *out, size_t cap, double v) {
  int p;
  if (!hk_is_finite(v)) { snprintf(out, cap, "%s", v != v ? "nan" : v > 0 ? "inf" : "-inf"); return; }
  for (p = 1; p <= 17; p++) {
    snprintf(out, cap, "%.*g", p, v);
    if (strtod(out, NULL) == v) break;
  }
  if (!strpbrk(out, ".e")) { size_t n = strlen(out); if (n + 2 < cap) memcpy(out + n, ".0", 3); }
}

static void tr__field_render(char *out, size_t cap, const tr__field *f, int is_int, int64_t i, double v) {
  char spec[32];
  if (!is_int && !hk_is_finite(v) && f->type != 'd') { tr__repr(out, cap, v); return; }
  if (f->type == 'd' || (is_int && !f->type && f->prec < 0)) {
    long long x = is_int ? (long long)i : hk_is_finite(v) && fabs(v) < 9e18 ? (long long)floor(v + 0.5) : 0;
    snprintf(spec, sizeof spec, "%%%s%dlld", f->zero ? "0" : "", f->width);
    snprintf(out, cap, spec, x);
  } else if (!f->type && f->prec < 0 && !f->width) {
    tr__repr(out, cap, v);
  } else {
    snprintf(spec, sizeof spec, "%%%s%d.%d%c", f->zero ? "0" : "", f->width, f->prec < 0 ? 6 : f->prec, f->type ? f->type : 'g');
    snprintf(out, cap, spec, is_int ? (double)i : v);
  }
}

/* Render tpl with the current epoch, step and metrics into s->buf (without directory or extension). */
static void tr__mc_render(tr__mc *s, hk_ctx *ctx, const char *tpl) {
  const char *p = tpl, *why;
  size_t len = 0, cap = sizeof s->buf - 64; /* room for "-vN.ckpt" and the directory is added later */
  while (*p && len < cap) {
    tr__field f;
    char key[256], val[128];
    const char *next;
    int is_int = 0;
    int64_t iv = 0;
    double dv = 0;
    size_t k;
    if (*p != '{') { s->buf[len++] = *p++; continue; }
    next = tr__field_parse(p, &f, &why);
    if (!next) break; /* checked at construction */
    k = f.key_len < sizeof key - 1 ? f.key_len : sizeof key - 1;
    memcpy(key, f.key, k);
    key[k] = 0;
    if (!strcmp(key, "epoch")) { is_int = 1; iv = ctx->epoch; }
    else if (!strcmp(key, "step")) { is_int = 1; iv = ctx->global_step; }
    else if (!hk_metric_get(ctx, key, &dv)) { is_int = 1; iv = 0; } /* missing: 0, as Lightning */
    tr__field_render(val, sizeof val, &f, is_int, iv, dv);
    if (s->auto_insert) {
      size_t j;
      for (j = 0; j < k && len < cap; j++) s->buf[len++] = key[j] == '/' ? '_' : key[j];
      if (len < cap) s->buf[len++] = '=';
    }
    for (k = 0; val[k] && len < cap; k++) s->buf[len++] = val[k] == '/' ? '_' : val[k];
    p = next;
  }
  s->buf[len] = 0;
}

/* A name another hook queued at this save point (ctx->checkpoint_paths) is taken although it is not
   on disk yet: two model_checkpoints in one directory never claim one file. */
static int tr__mc_queued(const hk_ctx *ctx, const char *path) {
  int i;
  for (i = 0; i < ctx->n_checkpoint_paths && i < HK_MAX_CHECKPOINT_PATHS; i++)
    if (ctx->checkpoint_paths[i] && !strcmp(ctx->checkpoint_paths[i], path)) return 1;
  return 0;
}

/* Take a free name on disk for this process: rank 0 (the one that writes) creates it exclusively, an
   empty file its save replaces by a rename, so that another process with the same dirpath (two runs
   started together) finds it taken even before the checkpoint is written; any other error is left to
   the save, which says it. Other ranks write nothing: for them a name is free when it is missing or
   empty (rank 0's claim at this save point), so they name files as rank 0 does. 1: this name. */
static int tr__mc_claim(const hk_ctx *ctx, const char *path) {
#ifdef TR__POSIX
  struct stat st;
  if (ctx->rank == 0) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | TR__O_NOFOLLOW | TR__O_CLOEXEC, 0644);
    if (fd >= 0) { close(fd); return 1; }
    return errno != EEXIST;
  }
  return tr__lstat(path, &st) != 0 || (S_ISREG(st.st_mode) && st.st_size == 0);
#else
  (void)ctx;
  return !tr__file_exists(path);
#endif
}
/* A claim no save replaced (the run failed first): removed at teardown, when nothing can write it any
   more. Only an empty regular file: a checkpoint is never empty. */
static void tr__mc_unclaim(const hk_ctx *ctx, const char *path) {
#ifdef TR__POSIX
  struct stat st;
  if (path && path[0] && ctx->rank == 0 && tr__lstat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0) remove(path);
#else
  (void)ctx; (void)path;
#endif
}

static int tr__mc_owned(const tr__mc *s, const char *path);
/* dirpath/<rendered>[-vN].ckpt: a version while the name is taken on disk (tr__mc_claim; `reuse`, the
   file this save replaces, when that is still a file of its own, is not taken), or while another hook
   queued it at this save point (even without the counter). Without the counter the name is used as it
   is (Lightning overwrites). */
static char *tr__mc_path(tr__mc *s, const hk_ctx *ctx, const char *reuse) {
  size_t need = strlen(s->dirpath) + strlen(s->buf) + 32;
  char *path = (char *)malloc(need);
  int v;
  if (!path) return NULL;
  snprintf(path, need, "%s/%s.ckpt", s->dirpath, s->buf);
  for (v = 1; v < 1000000; v++) {
    if (!tr__mc_queued(ctx, path) &&
        (!s->versions || (reuse && !strcmp(reuse, path) && tr__mc_owned(s, path) == 0) || tr__mc_claim(ctx, path)))
      break;
    snprintf(path, need, "%s/%s-v%d.ckpt", s->dirpath, s->buf, v);
  }
  return path;
}

/* -- which files are its own: the template with any text for each field -- */
#define TR__GLOB_ONE (-1) /* any one character */
#define TR__GLOB_ANY (-2) /* any run of characters */
static int tr__glob(const int *p, size_t np, const char *s, size_t ns) { /* O(np * ns): one star to go back to */
  size_t i = 0, j = 0, star = (size_t)-1, mark = 0;
  while (j < ns) {
    if (i < np && (p[i] == TR__GLOB_ONE || p[i] == (int)(unsigned char)s[j])) { i++; j++; }
    else if (i < np && p[i] == TR__GLOB_ANY) { star = i++; mark = j; }
    else if (star != (size_t)-1) { i = star + 1; j = ++mark; }
    else return 0;
  }
  while (i < np && p[i] == TR__GLOB_ANY) i++;
  return i == np;
}
/* The template as a pattern: its text, and per field "key=" (auto_insert_metric_name, '/' as '_') and
   one or more characters (whatever the field renders to). NULL when out of memory. */
static int *tr__mc_pattern(const char *tpl, int auto_insert, size_t *n) {
  int *p = (int *)malloc((2 * strlen(tpl) + 2) * sizeof *p); /* "{k}" (k + 2 chars) gives k + 3 tokens */
  size_t len = 0, j;
  const char *q = tpl, *why = NULL;
  if (!p) return NULL;
  while (*q) {
    tr__field f;
    const char *next;
    if (*q != '{') { p[len++] = (unsigned char)*q++; continue; }
    if (!(next = tr__field_parse(q, &f, &why))) break; /* checked at construction */
    for (j = 0; auto_insert && j < f.key_len; j++) p[len++] = f.key[j] == '/' ? '_' : (unsigned char)f.key[j];
    if (auto_insert) p[len++] = '=';
    p[len++] = TR__GLOB_ONE;
    p[len++] = TR__GLOB_ANY;
    q = next;
  }
  *n = len;
  return p;
}
/* "-v<digits>" ends name[0..n): the length without it, else n */
static size_t tr__strip_version(const char *name, size_t n) {
  size_t d = n;
  while (d > 0 && name[d - 1] >= '0' && name[d - 1] <= '9') d--;
  return d < n && d >= 2 && name[d - 1] == 'v' && name[d - 2] == '-' ? d - 2 : n;
}
static int tr__is_last_name(const char *name, size_t n) { n = tr__strip_version(name, n); return n == 4 && !memcmp(name, "last", 4); }

/* Is path a file this callback writes, that it may delete? Inside dirpath (no further directory), its
   naming (the template or last, -vN, .ckpt), and a regular file (a symlink only as save_last's link).
   0: yes; 1: not its name or place; 2: not a regular file; 3: not there. */
static int tr__mc_owned(const tr__mc *s, const char *path) {
  size_t d = strlen(s->dirpath), n;
  const char *base = path + d + 1;
  int last;
  if (strncmp(path, s->dirpath, d) != 0 || path[d] != '/' || !*base || strchr(base, '/')) return 1;
  n = strlen(base);
  if (n <= 5 || strcmp(base + n - 5, ".ckpt") != 0) return 1;
  n -= 5;
  last = s->save_last != TR_SAVE_LAST_NO && tr__is_last_name(base, n);
  if (!last && !(s->pat && (tr__glob(s->pat, s->npat, base, n) || tr__glob(s->pat, s->npat, base, tr__strip_version(base, n)))))
    return 1;
#ifdef TR__POSIX
  {
    struct stat st;
    if (tr__lstat(path, &st) != 0) return 3;
    if (S_ISREG(st.st_mode)) return 0;
#  ifdef S_ISLNK
    if (last && s->save_last == TR_SAVE_LAST_LINK && S_ISLNK(st.st_mode)) return 0;
#  endif
    return 2;
  }
#else
  return tr__file_exists(path) ? 0 : 3;
#endif
}

/* The value kept for ranking: NaN counts as the worst (Lightning: NaN -> +-inf). */
static double tr__mc_rank(const tr__mc *s, double v) { return v != v ? tr__worst(s->mode) : v; }

/* With a monitor: best = first best non-NaN (none: ""), kth = first worst once k are kept (with
   save_top_k = -1 always: Lightning names the worst kept file); Python's min/max order. Without one,
   best is the newest file (set by the save) and there is no k-th. */
static void tr__mc_rerank(tr__mc *s) {
  int i, b = -1, k = -1;
  if (!s->monitor) { tr__mc_sync(s); return; }
  for (i = 0; i < s->n; i++) {
    double v = s->scores[i];
    if (v == v && (b < 0 || tr__better(s->mode, v, s->scores[b]))) b = i;
    if (k < 0 || tr__better(s->mode, tr__mc_rank(s, s->scores[k]), tr__mc_rank(s, v))) k = i;
  }
  tr__set_str(&s->best, b >= 0 ? s->paths[b] : "");
  s->pub.best_model_score = b >= 0 ? s->scores[b] : NAN;
  if (k >= 0 && (s->top_k < 0 || (s->top_k > 0 && s->n >= s->top_k))) {
    tr__set_str(&s->kth, s->paths[k]);
    s->pub.kth_value = tr__mc_rank(s, s->scores[k]);
  } else {
    tr__set_str(&s->kth, "");
    s->pub.kth_value = tr__worst(s->mode);
  }
  tr__mc_sync(s);
}

/* Adds path (owned) with its score; a path already listed (a fixed name without the version counter)
   keeps its place and takes the new score and string: one entry per file, as Lightning's dict. */
static int tr__mc_push(tr__mc *s, char *path, double score) {
  int i;
  for (i = 0; i < s->n; i++)
    if (!strcmp(s->paths[i], path)) {
      free(s->paths[i]);
      s->paths[i] = path;
      s->scores[i] = score;
      return 0;
    }
  if (s->n == s->cap) {
    int cap = s->cap ? s->cap * 2 : 4;
    char **p = (char **)realloc(s->paths, (size_t)cap * sizeof *p);
    double *d;
    if (!p) return -1;
    s->paths = p;
    d = (double *)realloc(s->scores, (size_t)cap * sizeof *d);
    if (!d) return -1;
    s->scores = d;
    s->cap = cap;
  }
  s->paths[s->n] = path;
  s->scores[s->n++] = score;
  return 0;
}
static char *tr__mc_pop(tr__mc *s, const char *path) { /* removes path from best_k; returns it (owned) */
  int i;
  for (i = 0; i < s->n; i++)
    if (!strcmp(s->paths[i], path)) {
      char *p = s->paths[i];
      memmove(s->paths + i, s->paths + i + 1, (size_t)(s->n - i - 1) * sizeof *s->paths);
      memmove(s->scores + i, s->scores + i + 1, (size_t)(s->n - i - 1) * sizeof *s->scores);
      s->n--;
      return p;
    }
  return NULL;
}

/* Delete a file this callback wrote (tr__mc_owned: whatever a loaded state lists), unless it is `keep`
   or the checkpoint the fit resumed from. */
static void tr__mc_remove(tr__mc *s, hk_ctx *ctx, const char *path, const char *keep) {
  tr_run *run = s->run;
  int why;
  if (!path || !path[0] || (keep && !strcmp(path, keep)) || ctx->rank != 0) return; /* files: rank 0's job */
  if (run && run->resume_from[0] && !strcmp(run->resume_from, path)) return;
  why = tr__mc_owned(s, path);
  if (why == 1 || why == 2)
    tr__run_say(run, ctx, "model_checkpoint", "not removing '%s': %s", path, why == 1 ? "not a file of this callback (its "
                "files are in its dirpath, named by its filename or last, ending in .ckpt)" : "not a regular file");
  if (why == 0 && remove(path) == 0 && s->verbose) tr__run_say_on(run, ctx, 1, "model_checkpoint", "removed %s", path);
}

/* save_last as a link: a relative symlink next to its target, made under a new name (no file is
   replaced or followed) and renamed over link_path; a copy where that fails. */
static int tr__mc_link(const hk_ctx *ctx, const char *target, const char *link_path) {
  const char *slash = strrchr(target, '/');
  size_t n = strlen(link_path) + 64;
  char *tmp;
  int ok = 0;
  if (ctx->rank != 0) return 0; /* with several processes, rank 0 alone touches the files */
  if (!(tmp = (char *)malloc(n))) return -1;
#ifdef TR__POSIX
  {
    static unsigned counter;
    int tries;
    for (tries = 0; tries < 100 && !ok; tries++) { /* the name tr_save's stale-temporary sweep knows */
      snprintf(tmp, n, "%s.tmp.%ld.l%u", link_path, (long)getpid(), counter++);
      ok = symlink(slash ? slash + 1 : target, tmp) == 0;
      if (!ok && errno != EEXIST) break;
    }
  }
  if (!ok) { /* copy into a new temporary file */
    FILE *in = fopen(target, "rb");
    int fd = in ? tr__open_temp(link_path, tmp, n) : -1;
    char block[1 << 14];
    size_t got;
    ok = in && fd >= 0;
    while (ok && (got = fread(block, 1, sizeof block, in)) > 0) ok = write(fd, block, got) == (ssize_t)got;
    if (in && ferror(in)) ok = 0;
    if (in) fclose(in);
    if (fd >= 0 && close(fd) != 0) ok = 0;
    if (!ok && fd >= 0) remove(tmp);
    if (fd < 0) tmp[0] = 0;
  }
#else
  snprintf(tmp, n, "%s.link.tmp", link_path);
  {
    FILE *in = fopen(target, "rb"), *o = in ? fopen(tmp, "wb") : NULL;
    char block[1 << 14];
    size_t got;
    ok = in && o;
    while (ok && (got = fread(block, 1, sizeof block, in)) > 0) ok = fwrite(block, 1, got, o) == got;
    if (in && ferror(in)) ok = 0;
    if (in) fclose(in);
    if (o && fclose(o) != 0) ok = 0;
    if (ok) remove(link_path); /* rename does not replace files everywhere */
  }
#endif
  if (ok && rename(tmp, link_path) != 0) { ok = 0; remove(tmp); }
  free(tmp);
  return ok ? 0 : -1;
}

static hk_signal tr__mc_request(hk_ctx *ctx, const char *path) {
  hk_err e = hk_request_checkpoint(ctx, path);
  return e ? hk_fail(ctx, "model_checkpoint: cannot request a checkpoint at '%s': %s", path, hk_err_name(e)) : HK_CONTINUE;
}

/* The last file at this save point: a link to the file saved at this very step, else a save of its
   own (a link to an older file would not be the latest state). */
static hk_signal tr__mc_save_last(tr__mc *s, hk_ctx *ctx) {
  tr_run *run = s->run;
  char *path;
  int link;
  tr__mc_render(s, ctx, "last");
  path = tr__mc_path(s, ctx, s->last);
  if (!path) return hk_fail(ctx, "model_checkpoint: out of memory");
  if (s->last && s->last[0] && strcmp(s->last, path)) { free(s->old_last); s->old_last = tr__strdup(s->last); }
  tr__set_str(&s->last, path);
  tr__mc_sync(s);
  link = s->save_last == TR_SAVE_LAST_LINK &&
         (s->want ? s->want_step == ctx->global_step : s->newest && s->newest[0] && s->newest_step == ctx->global_step);
  if (link) {
    free(path);
    if (s->want) { s->link_after_want = 1; return HK_CONTINUE; } /* linked once the target is on disk */
    if (tr__mc_link(ctx, s->newest, s->last) != 0) return hk_fail(ctx, "model_checkpoint: cannot link %s to %s", s->last, s->newest);
    if (s->old_last) { tr__mc_remove(s, ctx, s->old_last, s->last); free(s->old_last); s->old_last = NULL; }
    if (s->verbose) tr__run_say_on(run, ctx, 1, "model_checkpoint", "%s -> %s", s->last, s->newest);
    return HK_CONTINUE;
  }
  free(s->want_last);
  s->want_last = path;
  return tr__mc_request(ctx, path);
}

/* The monitored metric is missing at a save point that is not waiting for a validation: before the
   fit's first validation a warning (once) and no top-k file, after it a failure (Lightning's rule). */
static int tr__mc_missing(tr__mc *s, hk_ctx *ctx, hk_signal *sig) {
  if (s->val_ran) { *sig = tr__missing_metric(ctx, "model_checkpoint", s->monitor); return 1; }
  if (!s->warned) {
    s->warned = 1;
    tr__run_say_on(s->run, ctx, 1, "model_checkpoint", "the monitored metric '%s' is not set (at epoch %lld, step %lld); "
                "no validation has run yet, so this save point keeps no top-k file (once one has, a missing metric fails "
                "the run)", s->monitor, (long long)ctx->epoch, (long long)ctx->global_step);
  }
  return 0;
}

/* One save point: top-k, then last. */
static hk_signal tr__mc_save(tr__mc *s, hk_ctx *ctx, int from_step) {
  tr_run *run = s->run;
  double cur = NAN;
  hk_signal sig = HK_CONTINUE;
  int saved = 0, have = 1;
  if (ctx->stage != HK_STAGE_FIT) return HK_CONTINUE;
  if (s->pub.last_global_step_saved == ctx->global_step) { if (!from_step) s->deferred = 0; return HK_CONTINUE; }
  if (s->monitor && !hk_metric_get(ctx, s->monitor, &cur)) {
    if (from_step) { s->deferred = 1; return HK_CONTINUE; } /* saved after the next validation */
    if (tr__mc_missing(s, ctx, &sig)) return sig;
    have = 0;
  }
  s->deferred = 0;
  /* a file of the last save point still being written: its on_checkpoint_saved (evictions, the link)
     comes first, so the decisions below see the files as they are */
  if (s->want || s->want_last) tr__run_saves_settle(run, ctx, 1);
  if (tr__mkdirs(s->dirpath) != 0)
    return hk_fail(ctx, "model_checkpoint: cannot create the directory '%s': %s", s->dirpath, strerror(errno));
  if (s->top_k != 0 && have) {
    int k = s->top_k < 0 ? s->n + 1 : s->top_k;
    int take = !s->monitor || s->top_k < 0 || s->n < s->top_k || (cur == cur && tr__better(s->mode, cur, s->pub.kth_value));
    if (take) {
      char *evict = NULL, *path, *want;
      if (!s->monitor) { /* the newest is the best; save_top_k 1 replaces the previous one */
        if (s->top_k == 1 && s->best && s->best[0]) evict = tr__strdup(s->best);
      } else if (s->n == k && s->kth && s->kth[0]) evict = tr__mc_pop(s, s->kth);
      tr__mc_render(s, ctx, s->filename);
      path = tr__mc_path(s, ctx, evict);
      want = path ? tr__strdup(path) : NULL;
      if (!want || (s->monitor && tr__mc_push(s, path, cur))) { /* the list owns path from here */
        free(want); free(path); free(evict);
        return hk_fail(ctx, "model_checkpoint: out of memory");
      }
      if (!s->monitor) { free(s->best); s->best = path; } /* no best_k_models without a monitor (Lightning) */
      free(s->want);
      s->want = want;
      s->want_step = ctx->global_step;
      s->pub.current_score = cur;
      tr__mc_rerank(s);
      free(s->evict);
      s->evict = evict;
      s->link_after_want = 0;
      if (s->verbose) {
        if (s->monitor) tr__run_say_on(run, ctx, 1, "model_checkpoint", "epoch %lld, step %lld: '%s' reached %g (best %g), saving %s",
                                   (long long)ctx->epoch, (long long)ctx->global_step, s->monitor, cur, s->pub.best_model_score, want);
        else tr__run_say_on(run, ctx, 1, "model_checkpoint", "epoch %lld, step %lld: saving %s", (long long)ctx->epoch, (long long)ctx->global_step, want);
      }
      sig = tr__mc_request(ctx, s->want);
      saved = 1;
    } else if (s->verbose)
      tr__run_say_on(run, ctx, 1, "model_checkpoint", "epoch %lld, step %lld: '%s' was not in top %d", (long long)ctx->epoch,
                 (long long)ctx->global_step, s->monitor, s->top_k);
  }
  if (sig == HK_CONTINUE && s->save_last != TR_SAVE_LAST_NO) { sig = tr__mc_save_last(s, ctx); saved = 1; }
  if (saved) s->pub.last_global_step_saved = ctx->global_step;
  return sig;
}

/* What can be checked before training is: a monitor of validation metrics in a fit without validation
   data (nothing would ever set it), and a directory that cannot be made or written. */
static hk_signal tr__mc_fit_start(hk_ctx *ctx, void *user) {
  tr__mc *s = (tr__mc *)user;
  s->at_epoch_end = tr__at_epoch_end(s->run, s->epoch_flag);
  if (s->run && s->run->desc.epochs == TR_NO && s->at_epoch_end && s->every_epochs > 0)
    tr__run_say(s->run, ctx, "model_checkpoint", "saves every %lld epochs at on_train_epoch_end, which this loop never "
                "fires (tr_run_desc.epochs = TR_NO): set save_on_train_epoch_end=false to save at on_validation_end, "
                "or every_n_train_steps", (long long)s->every_epochs);
  s->val_ran = s->warned = s->deferred = 0;
  if (tr__mc_default_dir(s)) return hk_fail(ctx, "model_checkpoint: out of memory");
  if (s->monitor && s->run && s->run->desc.validation == TR_NO && tr__starts(s->monitor, "val/"))
    return hk_fail(ctx, "model_checkpoint: monitor '%s' is a validation metric, but this run never validates (no validation "
                   "data): nothing would set it; give the fit validation data, or monitor a metric training sets", s->monitor);
  if (ctx->rank != 0) return HK_CONTINUE; /* files: rank 0's job */
  if (tr__mkdirs(s->dirpath) != 0)
    return hk_fail(ctx, "model_checkpoint: cannot create the directory '%s': %s", s->dirpath, strerror(errno));
#ifdef TR__POSIX
  { /* a probe file, created exclusively and removed: what a save does first */
    size_t n = strlen(s->dirpath) + 64;
    char *probe = (char *)malloc(n);
    int fd, err = 0;
    if (!probe) return hk_fail(ctx, "model_checkpoint: out of memory");
    snprintf(probe, n, "%s/.model_checkpoint-probe.%ld", s->dirpath, (long)getpid());
    fd = open(probe, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0) err = errno;
    else { close(fd); (void)unlink(probe); }
    free(probe);
    if (err && err != EEXIST)
      return hk_fail(ctx, "model_checkpoint: the directory '%s' is not writable: %s; checkpoints could not be saved there",
                     s->dirpath, strerror(err));
  }
#endif
  return HK_CONTINUE;
}
static hk_signal tr__mc_train_start(hk_ctx *ctx, void *user) {
  tr__mc *s = (tr__mc *)user;
  s->last_time_checked = tr__clock(s->clock, s->clock_user);
  s->prev_step = ctx->global_step;
  return HK_CONTINUE;
}
static int tr__mc_epoch_due(const tr__mc *s, const hk_ctx *ctx) { return s->every_epochs > 0 && (ctx->epoch + 1) % s->every_epochs == 0; }
/* train.h validates right after this batch (at this step, or at the epoch's end): a step or time save
   due now then waits for that validation's end, to be ranked on its value. (The trainer says; a
   hand-written loop's saves are ranked on the metrics as they are.) */
static int tr__mc_val_follows(const tr__mc *s, const hk_ctx *ctx, int stepped) {
  const tr_run *run = s->run;
  return run && run->trainer && run->tr__p->val_follows && run->tr__p->val_follows(run->trainer, ctx->global_step, stepped);
}
static hk_signal tr__mc_batch_end(hk_ctx *ctx, void *user) {
  tr__mc *s = (tr__mc *)user;
  int due = 0, stepped = ctx->global_step != s->prev_step;
  s->prev_step = ctx->global_step;
  tr__warn_stage(s->run, ctx, "model_checkpoint", &s->warned_stage);
  if (s->every_steps > 0) due = ctx->global_step > 0 && ctx->global_step % s->every_steps == 0;
  else if (s->every_seconds > 0) {
    double now = tr__clock(s->clock, s->clock_user);
    if (now - s->last_time_checked >= s->every_seconds) { due = 1; s->last_time_checked = now; }
  }
  if (!due || ctx->stage != HK_STAGE_FIT || s->pub.last_global_step_saved == ctx->global_step) return HK_CONTINUE;
  if (tr__mc_val_follows(s, ctx, stepped)) { s->deferred = 1; return HK_CONTINUE; }
  return tr__mc_save(s, ctx, 1);
}
static hk_signal tr__mc_epoch_end(hk_ctx *ctx, void *user) {
  tr__mc *s = (tr__mc *)user;
  tr__warn_stage(s->run, ctx, "model_checkpoint", &s->warned_stage);
  return s->at_epoch_end && tr__mc_epoch_due(s, ctx) ? tr__mc_save(s, ctx, 0) : HK_CONTINUE;
}
static hk_signal tr__mc_val_end(hk_ctx *ctx, void *user) {
  tr__mc *s = (tr__mc *)user;
  tr__warn_stage(s->run, ctx, "model_checkpoint", &s->warned_stage);
  if (ctx->stage != HK_STAGE_FIT) return HK_CONTINUE;
  s->val_ran = 1;
  if (s->deferred) return tr__mc_save(s, ctx, 0);
  return !s->at_epoch_end && tr__mc_epoch_due(s, ctx) ? tr__mc_save(s, ctx, 0) : HK_CONTINUE;
}
static hk_signal tr__mc_train_end(hk_ctx *ctx, void *user) {
  tr__mc *s = (tr__mc *)user;
  if (ctx->stage != HK_STAGE_FIT || s->save_last == TR_SAVE_LAST_NO || s->pub.last_global_step_saved == ctx->global_step)
    return HK_CONTINUE;
  s->pub.last_global_step_saved = ctx->global_step;
  return tr__mc_save_last(s, ctx);
}

/* A file is on disk: now, and only now, remove what it replaces. */
static hk_signal tr__mc_saved(hk_ctx *ctx, void *user) {
  tr__mc *s = (tr__mc *)user;
  if (!ctx->path) return HK_CONTINUE;
  if (s->want && !strcmp(ctx->path, s->want)) {
    tr__mc_remove(s, ctx, s->evict, s->want);
    free(s->evict);
    s->evict = NULL;
    free(s->newest);
    s->newest = s->want;
    s->newest_step = s->want_step;
    s->want = NULL;
    if (s->link_after_want && s->last) {
      s->link_after_want = 0;
      if (tr__mc_link(ctx, s->newest, s->last) != 0) return hk_fail(ctx, "model_checkpoint: cannot link %s to %s", s->last, s->newest);
      if (s->old_last) { tr__mc_remove(s, ctx, s->old_last, s->last); free(s->old_last); s->old_last = NULL; }
    }
  } else if (s->want_last && !strcmp(ctx->path, s->want_last)) {
    if (s->old_last) { tr__mc_remove(s, ctx, s->old_last, s->want_last); free(s->old_last); s->old_last = NULL; }
    free(s->spent); /* not freed yet: the other hooks of this event still read ctx->path */
    s->spent = s->want_last;
    s->want_last = NULL;
  }
  return HK_CONTINUE;
}

/* The default dirpath: the run directory's checkpoints/ (Lightning's version_N/checkpoints) once the
   run has a directory (a logger opened it at setup, or tr_run_dir gave it), else ./checkpoints. Looked
   at when a checkpoint is loaded and at on_fit_start, both after setup; fixed once it is the run's. */
static int tr__mc_default_dir(tr__mc *s) {
  const char *rd = s->run ? s->run->tr__p->dir : NULL;
  char *p;
  if (s->dir_default != 1 || !rd) return 0;
  if (!(p = tr__join(rd, "checkpoints"))) return -1;
  free(s->dirpath);
  s->dirpath = p;
  s->dir_default = 2;
  tr__mc_sync(s);
  return 0;
}
static hk_signal tr__mc_setup(hk_ctx *ctx, void *user) {
  ((tr__mc *)user)->rank = ctx->rank;
  return HK_CONTINUE;
}
static hk_signal tr__mc_teardown(hk_ctx *ctx, void *user) {
  tr__mc *s = (tr__mc *)user;
  tr__mc_unclaim(ctx, s->want);
  tr__mc_unclaim(ctx, s->want_last);
  if (s->link_after_want) tr__mc_unclaim(ctx, s->last); /* the link waited for want */
  return HK_CONTINUE;
}

static int tr__mc_save_state(void *user, hk_bytes *out) {
  tr__mc *s = (tr__mc *)user;
  int i;
  tr__put_u64(out, 1); /* version */
  tr__put_str(out, s->dirpath);
  tr__put_str(out, s->best);
  tr__put_f64(out, s->pub.best_model_score);
  tr__put_str(out, s->kth);
  tr__put_f64(out, s->pub.kth_value);
  tr__put_str(out, s->last);
  tr__put_f64(out, s->pub.current_score);
  tr__put_i64(out, s->pub.last_global_step_saved);
  tr__put_str(out, s->want ? s->want : s->newest); /* a requested file is on disk by the time this is read */
  tr__put_u64(out, (uint64_t)s->n);
  for (i = 0; i < s->n; i++) { tr__put_str(out, s->paths[i]); tr__put_f64(out, s->scores[i]); }
  return out->failed ? -1 : 0;
}
static int tr__mc_load_state(void *user, hk_reader *in) {
  tr__mc *s = (tr__mc *)user;
  uint64_t version, n = 0, i;
  char *dir = NULL, *best = NULL, *kth = NULL, *last = NULL, *newest = NULL, **paths = NULL;
  double best_score, kth_value, current, *scores = NULL;
  int64_t step;
  int ok = !tr__get_u64(in, &version) && version == 1 && !tr__get_str(in, &dir) && !tr__get_str(in, &best) &&
           !tr__get_f64(in, &best_score) && !tr__get_str(in, &kth) && !tr__get_f64(in, &kth_value) &&
           !tr__get_str(in, &last) && !tr__get_f64(in, &current) && !tr__get_i64(in, &step) &&
           !tr__get_str(in, &newest) && !tr__get_u64(in, &n);
  if (!ok) hk_reject(in, "truncated, or a path longer than %d bytes or holding a NUL byte", TR__CB_MAX_STR);
  else if (step < -1 || step > TR__MAX_COUNT) /* as the LOOP counters */
    ok = hk_reject(in, "last_global_step_saved is %lld, outside -1..2^53", (long long)step) + 1;
  else if (n > (in->len - in->pos) / 12 || n >= INT_MAX)
    ok = hk_reject(in, "best_k_models has %llu entries, more than the %zu bytes left can hold", (unsigned long long)n, in->len - in->pos) + 1;
  if (ok) {
    paths = (char **)calloc((size_t)n + 1, sizeof *paths);
    scores = (double *)calloc((size_t)n + 1, sizeof *scores);
    ok = paths && scores;
    for (i = 0; ok && i < n; i++) ok = !tr__get_str(in, &paths[i]) && !tr__get_f64(in, &scores[i]);
    if (!ok) hk_reject(in, "best_k_models is truncated, or holds a path longer than %d bytes or with a NUL byte", TR__CB_MAX_STR);
    else if (tr__get_end(in)) ok = 0;
  }
  if (ok && tr__mc_default_dir(s)) { hk_reject(in, "out of memory"); ok = 0; }
  if (ok && strcmp(dir, s->dirpath) == 0) { /* the same directory: everything */
    int k;
    for (k = 0; k < s->n; k++) free(s->paths[k]);
    free(s->paths); free(s->scores);
    s->paths = paths; s->scores = scores; s->n = (int)n;
    s->cap = (int)n + 1; /* calloc'd n + 1 */
    free(s->best); s->best = best; best = NULL;
    free(s->kth); s->kth = kth; kth = NULL;
    free(s->last); s->last = last; last = NULL;
    free(s->newest); s->newest = newest; newest = NULL;
    s->newest_step = -1; /* not known: save_last=link writes a file of its own until the next top-k file */
    s->pub.best_model_score = best_score;
    s->pub.kth_value = kth_value;
    s->pub.current_score = current;
    s->pub.last_global_step_saved = step;
    paths = NULL; scores = NULL; n = 0;
  } else if (ok) { /* another directory: only best_model_path, as Lightning; the rest starts afresh */
    if (s->rank == 0 || !s->dir_default) /* other ranks keep ./checkpoints (no logger there): nothing to say */
      tr__run_say(s->run, NULL, "model_checkpoint", "the checkpoint's dirpath '%s' differs from '%s': only best_model_path is "
               "restored, top-k starts afresh", dir, s->dirpath);
    free(s->best); s->best = best; best = NULL;
  }
  for (i = 0; paths && i < n; i++) free(paths[i]);
  free(paths); free(scores);
  free(dir); free(best); free(kth); free(last); free(newest);
  tr__mc_sync(s);
  return ok ? 0 : -1;
}

static tr_err tr__mc_make(hk_registry *reg, const tr_model_checkpoint_desc *d, hk_handle *out, tr__why *w) {
  tr__mc *s;
  hk_callback cb;
  char name[400];
  int triggers;
  const char *tpl;
  if (!d) return tr__bad(w, "model_checkpoint: desc is NULL");
  tpl = d->filename ? d->filename : "{epoch}-{step}";
  if (d->mode != TR_MODE_MIN && d->mode != TR_MODE_MAX) return tr__bad(w, "model_checkpoint: mode %d is not valid (min or max)", (int)d->mode);
  if (d->save_top_k < -1 && d->save_top_k != TR_ZERO)
    return tr__bad(w, "model_checkpoint: save_top_k must be >= -1 (got %d): k best files, -1 = all, 0 = none", d->save_top_k);
  if (d->save_last < TR_SAVE_LAST_NO || d->save_last > TR_SAVE_LAST_LINK)
    return tr__bad(w, "model_checkpoint: save_last %d is not valid (no, yes or link)", (int)d->save_last);
  if (d->every_n_train_steps < 0)
    return tr__bad(w, "model_checkpoint: every_n_train_steps=%lld is out of range: give 0 (no step saves) to %lld",
                   (long long)d->every_n_train_steps, (long long)INT64_MAX);
  if (d->every_n_epochs < 0 && d->every_n_epochs != TR_ZERO)
    return tr__bad(w, "model_checkpoint: every_n_epochs=%lld is out of range: give 0 (no epoch saves) to %lld",
                   (long long)d->every_n_epochs, (long long)INT64_MAX);
  if (!(d->train_time_interval >= 0) || !hk_is_finite(d->train_time_interval))
    return tr__bad(w, "model_checkpoint: train_time_interval=%g is out of range: give 0 (no timed saves) or a finite "
                   "number of seconds", d->train_time_interval);
  triggers = (d->every_n_train_steps > 0) + (d->every_n_epochs > 0) + (d->train_time_interval > 0);
  if (triggers > 1)
    return tr__bad(w, "model_checkpoint: every_n_train_steps=%lld, every_n_epochs=%lld and train_time_interval=%g are "
                   "mutually exclusive: give at most one", (long long)d->every_n_train_steps,
                   (long long)(d->every_n_epochs == TR_ZERO ? 0 : d->every_n_epochs), d->train_time_interval);
  if ((!d->monitor || !d->monitor[0]) && d->save_top_k > 1)
    return tr__bad(w, "model_checkpoint: save_top_k=%d needs a monitor (without one only -1, 0 or 1 are valid)", d->save_top_k);
  if (d->monitor && strlen(d->monitor) > 200) return tr__bad(w, "model_checkpoint: monitor is longer than 200 characters");
  if (d->dirpath && strlen(d->dirpath) > TR__CB_MAX_STR / 2)
    return tr__bad(w, "model_checkpoint: dirpath must be a path shorter than %d characters", TR__CB_MAX_STR / 2);
  if (!tpl[0]) return tr__bad(w, "model_checkpoint: filename is empty; give a template such as {epoch}-{step} (NULL: that default)");
  if (strlen(tpl) > 1024) return tr__bad(w, "model_checkpoint: filename is longer than 1024 characters");
  if (tr__template_check(tpl, w)) return TR_ERR_INVALID;
  if (d->save_last != TR_SAVE_LAST_NO && !strchr(tpl, '{') && tr__is_last_name(tpl, strlen(tpl)))
    return tr__bad(w, "model_checkpoint: filename '%s' is save_last's name (last.ckpt, last-vN.ckpt): the top-k file and the "
                   "last file would be one file; choose another filename", tpl);
  s = (tr__mc *)calloc(1, sizeof *s);
  if (!s) return tr__bad(w, "model_checkpoint: out of memory"), TR_ERR_NOMEM;
  s->run = tr_run_get(reg);
  s->dir_default = !d->dirpath || !d->dirpath[0]; /* not given (NULL or "", a spec's default) */
  s->dirpath = tr__strdup(s->dir_default ? "checkpoints" : d->dirpath);
  s->filename = tr__strdup(tpl);
  s->monitor = d->monitor && d->monitor[0] ? tr__strdup(d->monitor) : NULL;
  s->mode = d->mode;
  s->top_k = tr__zero_int(d->save_top_k, 1);
  s->save_last = d->save_last;
  s->every_steps = d->every_n_train_steps;
  s->every_seconds = d->train_time_interval;
  s->every_epochs = d->every_n_epochs == TR_ZERO ? 0 : triggers == 0 ? 1 : d->every_n_epochs;
  s->epoch_flag = d->save_on_train_epoch_end;
  s->at_epoch_end = tr__at_epoch_end(s->run, s->epoch_flag);
  s->auto_insert = tr__flag(d->auto_insert_metric_name, 1);
  s->versions = tr__flag(d->enable_version_counter, 1);
  s->verbose = d->verbose;
  if (d->async_save && s->run) s->run->tr__p->async_requests = 1; /* the run's requested saves, from now on */
  s->clock = d->clock;
  s->clock_user = d->clock_user;
  s->pub.best_model_score = NAN;
  s->pub.current_score = NAN;
  s->pub.kth_value = tr__worst(s->mode);
  s->pub.last_global_step_saved = 0; /* Lightning: nothing is saved at step 0 */
  s->want_step = s->newest_step = -1;
  s->pat = tr__mc_pattern(tpl, s->auto_insert, &s->npat);
  if (!s->dirpath || !s->filename || !s->pat || (d->monitor && d->monitor[0] && !s->monitor)) {
    tr__mc_destroy(s);
    return tr__bad(w, "model_checkpoint: out of memory"), TR_ERR_NOMEM;
  }
  { /* drop trailing slashes: names are dirpath + "/" + file */
    size_t n = strlen(s->dirpath);
    while (n > 1 && s->dirpath[n - 1] == '/') s->dirpath[--n] = 0;
  }
  tr__mc_sync(s);
  /* the state key (Lightning's: monitor, mode and the triggers; not the file names) */
  snprintf(name, sizeof name, "model_checkpoint{monitor=%s,mode=%s,every_n_train_steps=%lld,every_n_epochs=%lld,"
           "train_time_interval=%g}", s->monitor ? s->monitor : "none", tr__mode_name(s->mode), (long long)s->every_steps,
           (long long)s->every_epochs, s->every_seconds);
  memset(&cb, 0, sizeof cb);
  cb.name = name;
  cb.user = s;
  cb.setup = tr__mc_setup;
  cb.teardown = tr__mc_teardown;
  cb.on_fit_start = tr__mc_fit_start;
  cb.on_train_start = tr__mc_train_start;
  if (s->every_steps > 0 || s->every_seconds > 0) cb.on_train_batch_end = tr__mc_batch_end;
  cb.on_train_epoch_end = tr__mc_epoch_end;
  cb.on_validation_end = tr__mc_val_end;
  cb.on_train_end = tr__mc_train_end;
  cb.on_checkpoint_saved = tr__mc_saved;
  cb.save_state = tr__mc_save_state;
  cb.load_state = tr__mc_load_state;
  cb.destroy = tr__mc_destroy;
  return tr__cb_register(reg, &cb, 1000, out, w);
}

TR__PUBLIC_OF(tr_model_checkpoint, mc)
#endif /* TR__ON_MODEL_CHECKPOINT */

#if TR__ON_TIMER
/* ---- timer ---------------------------------------------------------------------------------------- */
static const char *const tr__timer_metric[TR_TIMER_STAGE_COUNT] = {
#define TR__X(sym, name) "time/" name,
  TR_TIMER_STAGES(TR__X)
#undef TR__X
};

typedef struct tr__timer {
  tr_timer_state pub;
  tr_run *run;          /* the registry's run: what the loop says (section THE RUN LAYER) */
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

#endif /* TR__ON_TIMER */

#if TR__ON_LR_MONITOR
/* ---- lr_monitor ------------------------------------------------------------------------------------ */
typedef struct tr__lrm {
  tr_lr_monitor_state pub;
  tr_run *run;          /* the registry's run: what the loop says (section THE RUN LAYER) */
  int interval, log_momentum, log_wd, named;
  char name[128], mom[160], wd[160];
  tr_log_record rec;    /* interval epoch: the record sent at each epoch's start */
} tr__lrm;

static void tr__lrm_destroy(void *user) {
  tr__lrm *s = (tr__lrm *)user;
  if (s) tr_log_record_free(&s->rec);
  free(s);
}
/* lazy: the step's learning rate, read only when someone asks (no user pointer: the callback may go first) */
static double tr__lrm_lr(const hk_ctx *ctx, void *user) { (void)user; return ctx->lr; }

static hk_signal tr__lrm_train_start(hk_ctx *ctx, void *user) {
  tr__lrm *s = (tr__lrm *)user;
  tr_run *run = s->run;
  const char *opt = run ? run->desc.optimizer : NULL;
  if (!s->named) { /* Lightning's lr-<optimizer class>; "lr" when the loop names no optimizer */
    if (opt) snprintf(s->name, sizeof s->name, "lr-%s", opt);
    else snprintf(s->name, sizeof s->name, "lr");
  }
  snprintf(s->mom, sizeof s->mom, "%s-momentum", s->name);
  snprintf(s->wd, sizeof s->wd, "%s-weight_decay", s->name);
  s->pub.per_epoch = s->interval == TR_LR_LOG_EPOCH || (s->interval == 0 && run && run->desc.lr_per_epoch);
  s->pub.name = s->name;
  s->pub.momentum_name = s->log_momentum && opt ? s->mom : "";
  s->pub.weight_decay_name = s->log_wd && opt ? s->wd : "";
  if (!s->pub.per_epoch && hk_metric_lazy(ctx, s->name, tr__lrm_lr, NULL)) return hk_fail(ctx, "lr_monitor: out of memory");
  if (opt && s->log_momentum) (void)hk_metric_set(ctx, s->mom, run->desc.momentum);
  if (opt && s->log_wd) (void)hk_metric_set(ctx, s->wd, run->desc.weight_decay);
  return HK_CONTINUE;
}
/* interval epoch: the metric for hooks, and one record of its own for the loggers (Lightning logs it at
   the epoch's start with the steps taken so far, whatever log_every_n_steps says) */
static hk_signal tr__lrm_epoch_start(hk_ctx *ctx, void *user) {
  tr__lrm *s = (tr__lrm *)user;
  double v;
  if (!s->pub.per_epoch) return HK_CONTINUE;
  (void)hk_metric_set(ctx, s->name, ctx->lr); /* the loop sets the epoch's lr first */
  if (!ctx->reg || !HK_ACTIVE(ctx->reg, HK_ON_LOG)) return HK_CONTINUE;
  s->rec.step = ctx->global_step;
  s->rec.epoch = ctx->epoch;
  s->rec.stage = "train";
  s->rec.n_metrics = s->rec.n_histograms = 0;
  if (tr_log_set(&s->rec, s->name, ctx->lr) != TR_OK) return hk_fail(ctx, "lr_monitor: out of memory");
  if (s->pub.momentum_name[0] && hk_metric_get(ctx, s->mom, &v)) (void)tr_log_set(&s->rec, s->mom, v);
  if (s->pub.weight_decay_name[0] && hk_metric_get(ctx, s->wd, &v)) (void)tr_log_set(&s->rec, s->wd, v);
  return tr_log_emit(ctx->reg, ctx, &s->rec);
}
/* interval epoch: the values are logged once per epoch by that record, so they are kept out of the
   others (a training record carries the context's metrics set since the last one) */
static hk_signal tr__lrm_on_log(hk_ctx *ctx, void *user) {
  tr__lrm *s = (tr__lrm *)user;
  tr_log_record *r = tr_log_current(ctx);
  if (!r || r == &s->rec || !s->pub.per_epoch) return HK_CONTINUE;
  tr_log_drop(r, s->name);
  if (s->pub.momentum_name[0]) tr_log_drop(r, s->mom);
  if (s->pub.weight_decay_name[0]) tr_log_drop(r, s->wd);
  return HK_CONTINUE;
}

static tr_err tr__lrm_make(hk_registry *reg, const tr_lr_monitor_desc *d, hk_handle *out, tr__why *w) {
  tr__lrm *s;
  hk_callback cb;
  if (!d) return tr__bad(w, "lr_monitor: desc is NULL");
  if (d->logging_interval != 0 && d->logging_interval != TR_LR_LOG_STEP && d->logging_interval != TR_LR_LOG_EPOCH)
    return tr__bad(w, "lr_monitor: logging_interval %d is not valid (0 = the schedule's, TR_LR_LOG_STEP or TR_LR_LOG_EPOCH)", d->logging_interval);
  if (d->name && strlen(d->name) > 100) return tr__bad(w, "lr_monitor: name is longer than 100 characters");
  s = (tr__lrm *)calloc(1, sizeof *s);
  if (!s) return tr__bad(w, "lr_monitor: out of memory"), TR_ERR_NOMEM;
  s->run = tr_run_get(reg);
  s->interval = d->logging_interval;
  s->log_momentum = tr__flag(d->log_momentum, 0);
  s->log_wd = tr__flag(d->log_weight_decay, 0);
  if (d->name && d->name[0]) snprintf(s->name, sizeof s->name, "%s", d->name), s->named = 1;
  s->pub.name = s->pub.momentum_name = s->pub.weight_decay_name = "";
  memset(&cb, 0, sizeof cb);
  cb.name = "lr_monitor";
  cb.user = s;
  cb.on_train_start = tr__lrm_train_start;
  cb.on_train_epoch_start = tr__lrm_epoch_start;
  if (s->interval != TR_LR_LOG_STEP) cb.on_log = tr__lrm_on_log; /* where the epoch interval is possible */
  cb.destroy = tr__lrm_destroy;
  return tr__cb_register(reg, &cb, 0, out, w);
}
TR__PUBLIC_OF(tr_lr_monitor, lrm)
#endif /* TR__ON_LR_MONITOR */

#if TR__ON_GRADIENT_MONITOR
/* ---- gradient_monitor ----------------------------------------------------------------------------- */
#define TR__GM_MAX_PCT 16
typedef struct tr__gm {
  tr_gradient_monitor_state pub;
  tr_histogram hist;
  tr_run *run;          /* the registry's run: what the loop says (section THE RUN LAYER) */
  int64_t every;
  int per_tensor, bins, verbose, n_pct;
  double pct[TR__GM_MAX_PCT], vanish, explode;
  char *filter;                 /* comma-separated substrings, or NULL */
  void (*on_histogram)(const tr_histogram *, hk_ctx *, void *);
  void *hist_user;
  /* sized at on_train_start */
  int *sel;                     /* selected tensor indices */
  char **names;                 /* "grad_2.0_norm/<tensor>" per selected tensor */
  char pct_names[TR__GM_MAX_PCT][32];
  float *scratch;               /* |g| of the selected tensors, for the percentiles */
  size_t scratch_n;
  double *edges;
  int64_t *counts;
  int ready;
} tr__gm;

static void tr__gm_free_views(tr__gm *s) {
  int i;
  for (i = 0; s->names && i < s->pub.n_tensors; i++) free(s->names[i]);
  free(s->names);
  free(s->sel);
  free(s->scratch);
  s->names = NULL;
  s->sel = NULL;
  s->scratch = NULL;
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

/* All allocation happens here, before the first step. */
static hk_signal tr__gm_train_start(hk_ctx *ctx, void *user) {
  tr__gm *s = (tr__gm *)user;
  int k, n = 0;
  tr__gm_free_views(s);
  if (!ctx->grads || ctx->n_tensors <= 0) return hk_fail(ctx, "gradient_monitor: the loop has no gradient views (ctx->grads)");
  if (tr__host_views(ctx, ctx->grads, "gradient_monitor")) return HK_FAIL;
  s->sel = (int *)calloc((size_t)ctx->n_tensors, sizeof *s->sel);
  s->names = (char **)calloc((size_t)ctx->n_tensors, sizeof *s->names);
  if (!s->sel || !s->names) return hk_fail(ctx, "gradient_monitor: out of memory");
  s->scratch_n = 0;
  for (k = 0; k < ctx->n_tensors; k++) {
    const char *name = ctx->grads[k].name ? ctx->grads[k].name : "";
    size_t len = strlen(name) + 16;
    if (!tr__gm_selected(s, name)) continue;
    s->names[n] = (char *)malloc(len);
    if (!s->names[n]) { s->pub.n_tensors = n; return hk_fail(ctx, "gradient_monitor: out of memory"); }
    snprintf(s->names[n], len, "grad_2.0_norm/%s", name);
    s->sel[n++] = k;
    s->scratch_n += ctx->grads[k].count;
  }
  s->pub.n_tensors = n;
  if (n == 0) return hk_fail(ctx, "gradient_monitor: param_filter '%s' selects no tensor", s->filter ? s->filter : "");
  if (s->n_pct && !(s->scratch = (float *)malloc((s->scratch_n ? s->scratch_n : 1) * sizeof(float))))
    return hk_fail(ctx, "gradient_monitor: out of memory");
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

static hk_signal tr__gm_check(hk_ctx *ctx, void *user) {
  tr__gm *s = (tr__gm *)user;
  double total = 0;
  size_t at = 0, i;
  int j;
  if (!s->ready) return HK_CONTINUE;
  if (ctx->n_tensors <= s->sel[s->pub.n_tensors - 1])
    return hk_fail(ctx, "gradient_monitor: the loop's tensors changed since on_train_start");
  for (j = 0; j < s->pub.n_tensors; j++) {
    const hk_tensor *g = &ctx->grads[s->sel[j]];
    double sq = hk_sumsq(g->data, g->count); /* hk_grad_norm's order: the same bits when every tensor is selected */
    total += sq;
    if (s->per_tensor) (void)hk_metric_set(ctx, s->names[j], sqrt(sq));
    if (s->scratch) for (i = 0; i < g->count; i++) s->scratch[at++] = fabsf(g->data[i]);
  }
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
      for (i = 0; i < g->count; i++) {
        double x = g->data[i];
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
      for (i = 0; i < g->count; i++) {
        double x = g->data[i];
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
#endif /* TR__ON_GRADIENT_MONITOR */

#if TR__ON_NAN_GUARD
/* ---- nan_guard ------------------------------------------------------------------------------------ */
typedef struct tr__ng {
  tr_nan_guard_state pub;
  tr_run *run;          /* the registry's run: what the loop says (section THE RUN LAYER) */
  int check_loss, check_grads, verbose;
  int stop_due;                 /* action stop: the step was skipped, HK_STOP at this batch's end */
  tr_nan_action action;
  char last[200];
} tr__ng;

static void tr__ng_destroy(void *user) { free(user); }

static hk_signal tr__ng_act(tr__ng *s, hk_ctx *ctx) {
  s->pub.found++;
  if (s->action == TR_NAN_FAIL) return hk_fail(ctx, "nan_guard: %s", s->last);
  if (s->verbose)
    tr__run_say(s->run, ctx, "nan_guard", "%s: %s", s->last, s->action == TR_NAN_STOP ? "step skipped, stopping training" : "step skipped");
  /* stop: the bad update is never applied either; one signal per event, so HK_STOP comes at the batch's end */
  if (s->action == TR_NAN_STOP) s->stop_due = 1;
  s->pub.skipped++;
  return HK_SKIP_STEP;
}
static hk_signal tr__ng_batch_end(hk_ctx *ctx, void *user) {
  tr__ng *s = (tr__ng *)user;
  (void)ctx;
  if (!s->stop_due) return HK_CONTINUE;
  s->stop_due = 0;
  return HK_STOP;
}
static hk_signal tr__ng_loss(hk_ctx *ctx, void *user) {
  tr__ng *s = (tr__ng *)user;
  double loss = ctx->loss;
  if (!s->check_loss) return HK_CONTINUE;
  if (ctx->params && ctx->n_tensors > 0 && ctx->params[0].on_device) (void)hk_metric_get(ctx, "train/loss", &loss); /* on the GPU: one copy */
  if (hk_is_finite(loss)) return HK_CONTINUE;
  snprintf(s->last, sizeof s->last, "the training loss is %s at epoch %lld, batch %lld, step %lld", tr__nonfinite_name(loss),
           (long long)ctx->epoch, (long long)ctx->batch_idx, (long long)ctx->global_step + 1);
  return tr__ng_act(s, ctx);
}
/* One pass through hk_grad_norm (cached, shared); the scan for the culprit only when it is not finite. */
static hk_signal tr__ng_grads(hk_ctx *ctx, void *user) {
  tr__ng *s = (tr__ng *)user;
  int k;
  size_t i;
  if (!s->check_grads || !ctx->grads || hk_is_finite(hk_grad_norm(ctx))) return HK_CONTINUE;
  snprintf(s->last, sizeof s->last, "the gradient norm is not finite at step %lld", (long long)ctx->global_step + 1);
  for (k = 0; k < ctx->n_tensors; k++) {
    const hk_tensor *g = &ctx->grads[k];
    if (g->on_device) continue;
    for (i = 0; i < g->count; i++)
      if (!hk_is_finitef(g->data[i])) {
        snprintf(s->last, sizeof s->last, "gradient of '%s'[%zu] is %s at epoch %lld, batch %lld, step %lld", g->name ? g->name : "?", i,
                 tr__nonfinite_name(g->data[i]), (long long)ctx->epoch, (long long)ctx->batch_idx, (long long)ctx->global_step + 1);
        return tr__ng_act(s, ctx);
      }
  }
  return tr__ng_act(s, ctx); /* finite values whose squares overflow, or device memory */
}
static int tr__ng_save(void *user, hk_bytes *out) {
  tr__ng *s = (tr__ng *)user;
  tr__put_u64(out, 1);
  tr__put_i64(out, s->pub.found);
  tr__put_i64(out, s->pub.skipped);
  tr__put_str(out, s->last);
  return out->failed ? -1 : 0;
}
static int tr__ng_load(void *user, hk_reader *in) {
  tr__ng *s = (tr__ng *)user;
  int64_t found = 0, skipped = 0;
  char *last = NULL;
  if (tr__get_version(in, 1) || tr__get_count(in, "found", 0, &found) || tr__get_count(in, "skipped", 0, &skipped)) return -1;
  if (skipped > found) return hk_reject(in, "skipped (%lld) is more than found (%lld)", (long long)skipped, (long long)found);
  if (tr__get_text(in, "the last message", &last)) return -1;
  if (tr__get_end(in)) { free(last); return -1; }
  s->pub.found = found;
  s->pub.skipped = skipped;
  snprintf(s->last, sizeof s->last, "%s", last);
  free(last);
  return 0;
}
static tr_err tr__ng_make(hk_registry *reg, const tr_nan_guard_desc *d, hk_handle *out, tr__why *w) {
  tr__ng *s;
  hk_callback cb;
  if (!d) return tr__bad(w, "nan_guard: desc is NULL");
  if (d->action != TR_NAN_FAIL && d->action != TR_NAN_SKIP_STEP && d->action != TR_NAN_STOP)
    return tr__bad(w, "nan_guard: action %d is not valid (fail, skip_step or stop)", (int)d->action);
  s = (tr__ng *)calloc(1, sizeof *s);
  if (!s) return tr__bad(w, "nan_guard: out of memory"), TR_ERR_NOMEM;
  s->run = tr_run_get(reg);
  s->check_loss = tr__flag(d->check_loss, 1);
  s->check_grads = tr__flag(d->check_grads, 1);
  s->verbose = tr__flag(d->verbose, 1);
  s->action = d->action;
  s->pub.last = s->last;
  if (!s->check_loss && !s->check_grads) { free(s); return tr__bad(w, "nan_guard: check_loss and check_grads are both off: nothing to check"); }
  memset(&cb, 0, sizeof cb);
  cb.name = "nan_guard";
  cb.user = s;
  if (s->check_loss) cb.on_before_backward = tr__ng_loss;
  if (s->check_grads) cb.on_before_optimizer_step = tr__ng_grads;
  if (s->action == TR_NAN_STOP) cb.on_train_batch_end = tr__ng_batch_end;
  cb.save_state = tr__ng_save;
  cb.load_state = tr__ng_load;
  cb.destroy = tr__ng_destroy;
  return tr__cb_register(reg, &cb, -10, out, w); /* before the monitors: a skipped step is not monitored */
}
TR__PUBLIC_OF(tr_nan_guard, ng)
#endif /* TR__ON_NAN_GUARD */

#if TR__ON_EMA
/* ---- ema ------------------------------------------------------------------------------------------ */
typedef struct tr__ema {
  tr_ema_state pub;
  double decay;
  int64_t every, start_step, swa_from;
  int copy_at_end, swap;
  float *avg;
  size_t count;
  int swapped;
} tr__ema;

static void tr__ema_destroy(void *user) {
  tr__ema *s = (tr__ema *)user;
  free(s->avg);
  free(s);
}
static void tr__ema_sync(tr__ema *s) {
  s->pub.average = s->pub.n_averaged ? s->avg : NULL;
  s->pub.count = s->count;
  s->pub.swapped = s->swapped;
}
/* The buffer has the layout of ctx->params (sized at the first use, or by a checkpoint). */
static int tr__ema_ready(tr__ema *s, hk_ctx *ctx) {
  size_t n = tr__views_count(ctx, ctx->params);
  if (!ctx->params || n == 0) return hk_fail(ctx, "ema: the loop has no parameter views (ctx->params)"), -1;
  if (tr__host_views(ctx, ctx->params, "ema")) return -1;
  if (s->avg && s->count != n)
    return hk_fail(ctx, "ema: the average has %zu values but the model has %zu parameters (a checkpoint of another model?)", s->count, n), -1;
  if (!s->avg) {
    if (!(s->avg = (float *)calloc(n, sizeof(float)))) return hk_fail(ctx, "ema: out of memory"), -1;
    s->count = n;
  }
  return 0;
}
static hk_signal tr__ema_train_start(hk_ctx *ctx, void *user) { return tr__ema_ready((tr__ema *)user, ctx) ? HK_FAIL : HK_CONTINUE; }

/* avg = avg + w*(p - avg) over the views, in order; w = 1 on the first update (a copy) */
static void tr__ema_update(tr__ema *s, hk_ctx *ctx, double w) {
  float *a = s->avg;
  int k;
  size_t i;
  if (s->pub.n_averaged == 0) w = 1.0;
  for (k = 0; k < ctx->n_tensors; k++) {
    const float *p = ctx->params[k].data;
    for (i = 0; i < ctx->params[k].count; i++, a++) *a = (float)((double)*a + w * ((double)p[i] - (double)*a));
  }
  s->pub.n_averaged++;
  tr__ema_sync(s);
}
static hk_signal tr__ema_step(hk_ctx *ctx, void *user) {
  tr__ema *s = (tr__ema *)user;
  if (s->swa_from > 0 || ctx->global_step < s->start_step || ctx->global_step % s->every != 0) return HK_CONTINUE;
  if (!s->avg && tr__ema_ready(s, ctx)) return HK_FAIL;
  tr__ema_update(s, ctx, 1.0 - s->decay); /* d*avg + (1-d)*p */
  return HK_CONTINUE;
}
static hk_signal tr__ema_epoch_end(hk_ctx *ctx, void *user) {
  tr__ema *s = (tr__ema *)user;
  if (s->swa_from <= 0 || ctx->epoch < s->swa_from || ctx->stage != HK_STAGE_FIT) return HK_CONTINUE;
  if (!s->avg && tr__ema_ready(s, ctx)) return HK_FAIL;
  tr__ema_update(s, ctx, 1.0 / (double)(s->pub.n_averaged + 1));
  return HK_CONTINUE;
}
static void tr__ema_exchange(tr__ema *s, hk_ctx *ctx) {
  float *a = s->avg;
  int k;
  size_t i;
  for (k = 0; k < ctx->n_tensors; k++) {
    float *p = ctx->params[k].data;
    for (i = 0; i < ctx->params[k].count; i++, a++) { float x = p[i]; p[i] = *a; *a = x; }
  }
  s->swapped = !s->swapped;
  tr__ema_sync(s);
}
static hk_signal tr__ema_eval_start(hk_ctx *ctx, void *user) {
  tr__ema *s = (tr__ema *)user;
  if (!s->swap || s->swapped || s->pub.n_averaged == 0) return HK_CONTINUE;
  if (tr__ema_ready(s, ctx)) return HK_FAIL;
  tr__ema_exchange(s, ctx);
  return HK_CONTINUE;
}
static hk_signal tr__ema_eval_end(hk_ctx *ctx, void *user) {
  tr__ema *s = (tr__ema *)user;
  if (s->swapped) tr__ema_exchange(s, ctx);
  return HK_CONTINUE;
}
static hk_signal tr__ema_train_end(hk_ctx *ctx, void *user) {
  tr__ema *s = (tr__ema *)user;
  int k;
  const float *a = s->avg;
  if (!s->copy_at_end || s->pub.n_averaged == 0 || s->swapped || tr__ema_ready(s, ctx)) return HK_CONTINUE;
  for (k = 0; k < ctx->n_tensors; a += ctx->params[k].count, k++)
    memcpy(ctx->params[k].data, a, ctx->params[k].count * sizeof(float));
  return HK_CONTINUE;
}
/* The average as it is outside evaluations: while swapped, the model holds it and avg the trained weights. */
static int tr__ema_save(void *user, hk_bytes *out) {
  tr__ema *s = (tr__ema *)user;
  size_t i;
  tr__put_u64(out, 1);
  tr__put_i64(out, s->pub.n_averaged);
  tr__put_u64(out, s->pub.n_averaged ? s->count : 0);
  if (s->swapped) return -1; /* a checkpoint from inside an evaluation would store the wrong buffer */
  for (i = 0; s->pub.n_averaged && i < s->count; i++) {
    unsigned char x[4];
    uint32_t u;
    memcpy(&u, &s->avg[i], 4);
    tr__le(x, u, 4);
    hk_bytes_put(out, x, 4);
  }
  return out->failed ? -1 : 0;
}
static int tr__ema_load(void *user, hk_reader *in) {
  tr__ema *s = (tr__ema *)user;
  uint64_t n = 0;
  int64_t averaged = 0;
  float *buf = NULL;
  size_t i;
  if (tr__get_version(in, 1) || tr__get_count(in, "n_averaged", 0, &averaged)) return -1;
  if (tr__get_u64(in, &n)) return hk_reject(in, "truncated at the average's size");
  if ((averaged > 0) != (n > 0))
    return hk_reject(in, "n_averaged is %lld but the average holds %llu values (both zero or both not)", (long long)averaged, (unsigned long long)n);
  if (n > (in->len - in->pos) / 4 || (in->len - in->pos) != n * 4)
    return hk_reject(in, "the average should hold %llu values, and %zu bytes follow", (unsigned long long)n, in->len - in->pos);
  if (s->swapped) return hk_reject(in, "the average is swapped into the model (inside a validation): load it outside one");
  if (s->avg && n && n != s->count)
    return hk_reject(in, "the average holds %llu values, this model %zu (a checkpoint of another model?)", (unsigned long long)n, s->count);
  if (n && !(buf = (float *)malloc((size_t)n * sizeof(float)))) return hk_reject(in, "out of memory for %llu values", (unsigned long long)n);
  for (i = 0; i < n; i++) {
    unsigned char x[4];
    uint32_t u;
    if (hk_read(in, x, 4)) { free(buf); return -1; }
    u = (uint32_t)tr__get(x, 4);
    memcpy(&buf[i], &u, 4);
  }
  if (buf) { free(s->avg); s->avg = buf; s->count = (size_t)n; }
  else if (s->avg) memset(s->avg, 0, s->count * sizeof(float));
  s->pub.n_averaged = averaged;
  tr__ema_sync(s);
  return 0;
}
static tr_err tr__ema_make(hk_registry *reg, const tr_ema_desc *d, hk_handle *out, tr__why *w) {
  tr__ema *s;
  hk_callback cb;
  if (!d) return tr__bad(w, "ema: desc is NULL");
  if (!hk_is_finite(d->decay) || d->decay < 0 || d->decay >= 1)
    return tr__bad(w, "ema: decay must be in (0, 1) (0 = 0.999), got %g", d->decay);
  if (d->every_n_steps < 0) return tr__bad(w, "ema: every_n_steps must be >= 1 (0 = 1), got %lld", (long long)d->every_n_steps);
  if (d->start_step < 0) return tr__bad(w, "ema: start_step must be >= 0, got %lld", (long long)d->start_step);
  if (d->swa_epoch_start < 0) return tr__bad(w, "ema: swa_epoch_start must be >= 0 (0 = EMA, > 0 = SWA from that epoch), got %lld", (long long)d->swa_epoch_start);
  if (d->swa_epoch_start > 0 && (d->decay != 0 || d->every_n_steps != 0 || d->start_step != 0))
    return tr__bad(w, "ema: swa_epoch_start (SWA: an equal average per epoch) does not take decay, every_n_steps or start_step");
  s = (tr__ema *)calloc(1, sizeof *s);
  if (!s) return tr__bad(w, "ema: out of memory"), TR_ERR_NOMEM;
  s->decay = d->decay == 0 ? 0.999 : d->decay;
  s->every = d->every_n_steps ? d->every_n_steps : 1;
  s->start_step = d->start_step;
  s->swa_from = d->swa_epoch_start;
  s->copy_at_end = tr__flag(d->copy_at_end, 0);
  s->swap = tr__flag(d->swap_for_eval, 1);
  memset(&cb, 0, sizeof cb);
  cb.name = "ema";
  cb.user = s;
  cb.on_train_start = tr__ema_train_start;
  if (s->swa_from > 0) cb.on_train_epoch_end = tr__ema_epoch_end;
  else cb.on_after_optimizer_step = tr__ema_step;
  cb.on_validation_start = cb.on_test_start = cb.on_predict_start = tr__ema_eval_start;
  cb.on_validation_end = cb.on_test_end = cb.on_predict_end = tr__ema_eval_end;
  cb.on_train_end = tr__ema_train_end;
  cb.teardown = tr__ema_eval_end; /* a run that failed inside an evaluation gets its trained weights back */
  cb.save_state = tr__ema_save;
  cb.load_state = tr__ema_load;
  cb.destroy = tr__ema_destroy;
  return tr__cb_register(reg, &cb, -20, out, w); /* first at on_train_epoch_end, so SWA averages before checkpoints are asked for */
}
TR__PUBLIC_OF(tr_ema, ema)
#endif /* TR__ON_EMA */

#if TR__ON_MODEL_SUMMARY
/* ---- model_summary -------------------------------------------------------------------------------- */
typedef struct tr__ms { tr_model_summary_state pub; tr_run *run; int max_rows; FILE *out; } tr__ms;
static void tr__ms_destroy(void *user) { free(user); }

/* Lightning's count format: 123, 1.2 K, 12.3 M, 1.2 B */
static void tr__count_str(char *out, size_t cap, double n) {
  static const char *const unit[] = { "", " K", " M", " B", " T" };
  int u = 0;
  while (n >= 999.95 && u < 4) { n /= 1000; u++; }
  if (u == 0) snprintf(out, cap, "%.0f", n);
  else snprintf(out, cap, "%.1f%s", n, unit[u]);
}
static hk_signal tr__ms_fit_start(hk_ctx *ctx, void *user) {
  tr__ms *s = (tr__ms *)user;
  tr_run *run = s->run;
  FILE *f = s->out ? s->out : run && run->desc.log ? run->desc.log : stdout;
  size_t total = tr__views_count(ctx, ctx->params), rest = 0, name_w = 4;
  int k, shown = 0;
  char num[32];
  for (k = 0; k < ctx->n_tensors; k++) {
    size_t len = strlen(ctx->params[k].name ? ctx->params[k].name : "");
    if (k < s->max_rows && len > name_w) name_w = len > 40 ? 40 : len;
  }
  s->pub.total_params = (int64_t)total;
  s->pub.n_tensors = ctx->n_tensors;
  if (ctx->rank != 0) return HK_CONTINUE; /* one table for the job (Lightning: rank zero) */
  if (s->max_rows > 0) fprintf(f, "  | %-*s | %-8s | %-6s | Device\n", (int)name_w, "Name", "Params", "Share");
  for (k = 0; k < ctx->n_tensors; k++) {
    const hk_tensor *v = &ctx->params[k];
    if (k >= s->max_rows) { rest += v->count; continue; }
    tr__count_str(num, sizeof num, (double)v->count);
    fprintf(f, "%-2d| %-*.*s | %-8s | %5.1f%% | %s\n", k, (int)name_w, (int)name_w, v->name ? v->name : "?", num,
            total ? 100.0 * (double)v->count / (double)total : 0.0, v->on_device ? "gpu" : "cpu");
    shown++;
  }
  if (shown < ctx->n_tensors && s->max_rows > 0) {
    tr__count_str(num, sizeof num, (double)rest);
    fprintf(f, "  | (%d more tensors) %s parameters\n", ctx->n_tensors - shown, num);
  }
  tr__count_str(num, sizeof num, (double)total);
  fprintf(f, "%-9s Total params (%d tensors)\n%-9.3f Total estimated model params size (MB)\n", num, ctx->n_tensors,
          (double)total * 4 * 1e-6);
  return HK_CONTINUE;
}
static tr_err tr__ms_make(hk_registry *reg, const tr_model_summary_desc *d, hk_handle *out, tr__why *w) {
  tr__ms *s;
  hk_callback cb;
  if (!d) return tr__bad(w, "model_summary: desc is NULL");
  if (d->max_rows < 0 && d->max_rows != TR_ZERO) return tr__bad(w, "model_summary: max_rows must be >= 0 (0 = 50, TR_ZERO = totals only), got %d", d->max_rows);
  s = (tr__ms *)calloc(1, sizeof *s);
  if (!s) return tr__bad(w, "model_summary: out of memory"), TR_ERR_NOMEM;
  s->run = tr_run_get(reg);
  s->max_rows = tr__zero_int(d->max_rows, 50);
  s->out = d->out;
  memset(&cb, 0, sizeof cb);
  cb.name = "model_summary";
  cb.user = s;
  cb.on_fit_start = tr__ms_fit_start;
  cb.destroy = tr__ms_destroy;
  return tr__cb_register(reg, &cb, 0, out, w);
}
TR__PUBLIC_OF(tr_model_summary, ms)
#endif /* TR__ON_MODEL_SUMMARY */

#if TR__ON_ACCUMULATION_SCHEDULER
/* ---- accumulation_scheduler ----------------------------------------------------------------------- */
#define TR__AS_MAX 64
typedef struct tr__as {
  tr_accumulation_scheduler_state pub;
  tr_run *run;          /* the registry's run: what the loop says (section THE RUN LAYER) */
  int n;
  int64_t epochs[TR__AS_MAX];
  int factors[TR__AS_MAX];
} tr__as;
static void tr__as_destroy(void *user) { free(user); }

/* "{0: 4, 5: 2}" -> increasing epochs, factors >= 1; -1 with the reason in w. The grammar is strict:
   [ "{" ] entry { "," entry } [ "," ] [ "}" ], braces both or neither, spaces anywhere between tokens;
   entry = epoch ":" factor (decimal digits). "{0: 2" and "{0:2 1:3}" are refused, not guessed at. */
static int tr__as_parse(tr__as *s, const char *text, tr__why *w) {
  static const char *const form = "valid: a schedule like \"{0: 4, 5: 2}\" (epoch: factor pairs separated by commas, "
                                  "epochs 0-based and increasing, factors >= 1, braces optional)";
  const char *p = text;
  int braced;
#define TR__AS_BAD(...) do { char what_[200]; snprintf(what_, sizeof what_, __VA_ARGS__); \
    return tr__bad(w, "accumulation_scheduler: scheduling '%s': %s; %s", text, what_, form), -1; } while (0)
#define TR__AS_SPACE() while (*p == ' ' || *p == '\t') p++
  TR__AS_SPACE();
  braced = *p == '{';
  if (braced) p++;
  for (;;) {
    long long v[2];
    int k;
    TR__AS_SPACE();
    if (braced && *p == '}' && s->n > 0) break; /* "{0: 2,}" as a Python dict allows */
    for (k = 0; k < 2; k++) {
      const char *at;
      v[k] = 0;
      if (k) { TR__AS_SPACE(); }
      at = p;
      if (*p < '0' || *p > '9') {
        if (!*p) TR__AS_BAD("it ends where %s was expected", k ? "a factor" : "an epoch");
        TR__AS_BAD("'%c' at position %d where %s was expected", *p, (int)(p - text), k ? "a factor" : "an epoch");
      }
      while (*p >= '0' && *p <= '9') {
        if (v[k] > 10000000000000LL) TR__AS_BAD("the number at position %d is too large", (int)(at - text));
        v[k] = v[k] * 10 + (*p++ - '0');
      }
      TR__AS_SPACE();
      if (!k && *p++ != ':') TR__AS_BAD("epoch %lld is not followed by ':'", v[0]);
    }
    if (v[0] > ((int64_t)1 << 40)) TR__AS_BAD("epoch %lld is too large (at most 2^40)", v[0]);
    if (v[1] < 1 || v[1] > 1000000) return tr__bad(w, "accumulation_scheduler: the factor for epoch %lld must be in 1..1000000, got %lld", v[0], v[1]), -1;
    if (s->n && v[0] <= s->epochs[s->n - 1])
      return tr__bad(w, "accumulation_scheduler: epochs must increase (%lld after %lld) in '%s'", v[0], (long long)s->epochs[s->n - 1], text), -1;
    if (s->n == TR__AS_MAX) return tr__bad(w, "accumulation_scheduler: at most %d entries", TR__AS_MAX), -1;
    s->epochs[s->n] = v[0];
    s->factors[s->n++] = (int)v[1];
    if (*p == ',') { p++; continue; }
    if (braced && *p == '}') break;
    if (!*p && !braced) return 0;
    if (!*p) TR__AS_BAD("the closing '}' is missing");
    if (*p >= '0' && *p <= '9') TR__AS_BAD("a ',' is missing before position %d", (int)(p - text));
    TR__AS_BAD("'%c' at position %d where ','%s was expected", *p, (int)(p - text), braced ? " or '}'" : "");
  }
  p++; /* the '}' */
  TR__AS_SPACE();
  if (*p) TR__AS_BAD("'%c' at position %d after the closing '}'", *p, (int)(p - text));
  return 0;
#undef TR__AS_BAD
#undef TR__AS_SPACE
}
static int tr__as_factor(const tr__as *s, int64_t epoch) {
  int i, f = 1; /* before the first key: 1 (Lightning adds {0: 1}) */
  for (i = 0; i < s->n && s->epochs[i] <= epoch; i++) f = s->factors[i];
  return f;
}
static hk_signal tr__as_apply(hk_ctx *ctx, void *user) {
  tr__as *s = (tr__as *)user;
  tr_run *run = s->run;
  s->pub.factor = tr__as_factor(s, ctx->epoch);
  if (run && run->trainer && run->tr__p->set_accumulation) run->tr__p->set_accumulation(run->trainer, s->pub.factor);
  return HK_CONTINUE;
}
static hk_signal tr__as_fit_start(hk_ctx *ctx, void *user) {
  tr__as *s = (tr__as *)user;
  tr_run *run = s->run;
  if (run && run->tr__p->fixed_accumulation > 1)
    return hk_fail(ctx, "accumulation_scheduler: tr_config.accumulate_grad_batches is %d; leave it at 0 or 1 when the "
                   "scheduler sets the factor", run->tr__p->fixed_accumulation);
  return HK_CONTINUE;
}
static tr_err tr__as_make(hk_registry *reg, const tr_accumulation_scheduler_desc *d, hk_handle *out, tr__why *w) {
  tr__as *s;
  hk_callback cb;
  if (!d || !d->scheduling || !d->scheduling[0]) return tr__bad(w, "accumulation_scheduler: scheduling is required, e.g. \"{0: 4, 5: 2}\"");
  s = (tr__as *)calloc(1, sizeof *s);
  if (!s) return tr__bad(w, "accumulation_scheduler: out of memory"), TR_ERR_NOMEM;
  if (tr__as_parse(s, d->scheduling, w)) { free(s); return TR_ERR_INVALID; }
  s->run = tr_run_get(reg);
  s->pub.n = s->n;
  s->pub.epochs = s->epochs;
  s->pub.factors = s->factors;
  s->pub.factor = 1;
  memset(&cb, 0, sizeof cb);
  cb.name = "accumulation_scheduler";
  cb.user = s;
  cb.on_fit_start = tr__as_fit_start;
  cb.on_train_start = tr__as_apply;
  cb.on_train_epoch_start = tr__as_apply;
  cb.destroy = tr__as_destroy;
  return tr__cb_register(reg, &cb, 0, out, w);
}
TR__PUBLIC_OF(tr_accumulation_scheduler, as)
#endif /* TR__ON_ACCUMULATION_SCHEDULER */

#if TR__ON_PROFILER
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
  char mx[32];
  if (max == max) snprintf(mx, sizeof mx, "%11.4f", 1e3 * max);
  else snprintf(mx, sizeof mx, "%11s", "-"); /* phases keep no maximum */
  fprintf(f, "%*s%-*s %-*.*s %10lld %11.4f %s %10.4f %6.1f%%\n", indent, "", 10 - indent, kind, 36, 36, name,
          (long long)calls, calls > 0 ? 1e3 * total / (double)calls : 0.0, mx, total, run > 0 ? 100 * total / run : 0.0);
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
#endif /* TR__ON_PROFILER */

#if TR__ON_THROUGHPUT_MONITOR
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
      return hk_fail(ctx, "throughput_monitor: out of memory");
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
#endif /* TR__ON_THROUGHPUT_MONITOR */

#if TR__ON_ON_EXCEPTION_CHECKPOINT
/* ---- on_exception_checkpoint ------------------------------------------------------------------------ */
typedef struct tr__oec {
  tr_on_exception_checkpoint_state pub;
  tr_run *run;
  hk_registry *reg;
  char *dirpath, *path;
  int verbose;
  int training;                 /* on_train_start of this fit has fired: there is a state worth saving */
} tr__oec;
static void tr__oec_destroy(void *user) {
  tr__oec *s = (tr__oec *)user;
  free(s->dirpath);
  free(s->path);
  free(s);
}
static hk_signal tr__oec_train_start(hk_ctx *ctx, void *user) { (void)ctx; ((tr__oec *)user)->training = 1; return HK_CONTINUE; }
static hk_signal tr__oec_over(hk_ctx *ctx, void *user) { (void)ctx; ((tr__oec *)user)->training = 0; return HK_CONTINUE; }
static hk_signal tr__oec_exception(hk_ctx *ctx, void *user) {
  tr__oec *s = (tr__oec *)user;
  tr_run *run = s->run;
  char why[600];
  tr_err e;
  if (!s->training || run->running != HK_STAGE_FIT) return HK_CONTINUE;
  s->training = 0;
  why[0] = 0;
  if (tr__mkdirs(s->dirpath) != 0) {
    tr__msg(why, sizeof why, "cannot make the directory '%s': %s", s->dirpath, strerror(errno));
    e = TR_ERR_IO;
  } else if (run->trainer && run->tr__p->save_failed) e = run->tr__p->save_failed(run->trainer, ctx, s->path, why, sizeof why);
  else e = tr__run_save_to(s->reg, ctx, s->path, why, sizeof why);
  s->pub.last_error = e;
  if (e) {
    if (s->verbose) tr__run_say(run, ctx, "on_exception_checkpoint", "could not save '%s': %s", s->path, why);
    return HK_CONTINUE; /* the run has failed already; its own error stands */
  }
  s->pub.saved++;
  s->pub.saved_step = ctx->global_step;
  if (s->verbose)
    tr__run_say(run, ctx, "on_exception_checkpoint", "the run failed (%s); saved its state after step %lld to '%s' "
                "(resume from it)", ctx->abort_reason ? ctx->abort_reason : "interrupted", (long long)ctx->global_step, s->path);
  return HK_CONTINUE;
}
static tr_err tr__oec_make(hk_registry *reg, const tr_on_exception_checkpoint_desc *d, hk_handle *out, tr__why *w) {
  tr__oec *s;
  hk_callback cb;
  const char *name;
  size_t n;
  if (!d) return tr__bad(w, "on_exception_checkpoint: desc is NULL");
  if (!d->dirpath || !d->dirpath[0]) return tr__bad(w, "on_exception_checkpoint: dirpath is required (the directory the checkpoint goes into)");
  name = d->filename ? d->filename : "on_exception";
  if (!name[0] || strchr(name, '/'))
    return tr__bad(w, "on_exception_checkpoint: filename '%s' must be a file name without '/' (\".ckpt\" is added)", name);
  s = (tr__oec *)calloc(1, sizeof *s);
  if (!s) return tr__bad(w, "on_exception_checkpoint: out of memory"), TR_ERR_NOMEM;
  n = strlen(d->dirpath) + strlen(name) + 7;
  s->dirpath = tr__strdup(d->dirpath);
  s->path = (char *)malloc(n);
  if (!s->dirpath || !s->path) { tr__oec_destroy(s); return tr__bad(w, "on_exception_checkpoint: out of memory"), TR_ERR_NOMEM; }
  snprintf(s->path, n, "%s/%s.ckpt", d->dirpath, name);
  s->run = tr_run_get(reg);
  s->reg = reg;
  s->verbose = tr__flag(d->verbose, 1);
  s->pub.ckpt_path = s->path;
  s->pub.saved_step = -1;
  memset(&cb, 0, sizeof cb);
  cb.name = "on_exception_checkpoint";
  cb.user = s;
  cb.on_train_start = tr__oec_train_start;
  cb.on_train_end = tr__oec_over; /* the fit got through: a later failure (on_fit_end, teardown) has nothing new */
  cb.on_exception = tr__oec_exception;
  cb.destroy = tr__oec_destroy;
  return tr__cb_register(reg, &cb, -20, out, w); /* first of on_exception: the state before other handlers change it */
}
TR__PUBLIC_OF(tr_on_exception_checkpoint, oec)
#endif /* TR__ON_ON_EXCEPTION_CHECKPOINT */

#if TR__ON_SPIKE_DETECTION
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
  const tr__run_priv *q = s->run->tr__p;
  if (q->state) { *r = q->state; *n = q->n_state; }
  else { *r = s->run->desc.state; *n = s->run->desc.n_state; }
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
    return hk_fail(ctx, "spike_detection: the run has no training state to snapshot: give tr_run_desc.state (the "
                   "parameters, the optimizer state and its step count) in a loop of your own");
  if (ctx->params && ctx->n_tensors > 0 && ctx->params[0].on_device)
    return hk_fail(ctx, "spike_detection: the model is on the GPU; its snapshot is a host copy (leave spike_detection out, or train on the CPU)");
  if (ctx->world_size > 1)
    return hk_fail(ctx, "spike_detection: %d processes: each would decide alone and the ranks would part; use it with one "
                   "process", ctx->world_size);
  if (s->from_ckpt && s->pub.snapshot_bytes == size) { s->from_ckpt = 0; return HK_CONTINUE; } /* the checkpoint's snapshot */
  if (s->from_ckpt)
    tr__run_say(s->run, ctx, "spike_detection", "the checkpoint's snapshot has %zu bytes, the state %zu: a new snapshot is "
                "taken at step %lld", s->pub.snapshot_bytes, size, (long long)ctx->global_step);
  s->from_ckpt = 0;
  if (s->pub.snapshot_bytes != size) {
    unsigned char *p = (unsigned char *)realloc(s->snap, size);
    if (!p) return hk_fail(ctx, "spike_detection: out of memory for a %zu-byte snapshot", size);
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
  if (s->skipping || s->pending || !ctx->grads || hk_is_finite(hk_grad_norm(ctx))) return HK_CONTINUE;
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
    return hk_fail(ctx, "spike_detection: %s at step %lld (batch %lld of the epoch); %lld rollback%s already (max_rollbacks %d)",
                   s->why, (long long)ctx->global_step + 1, (long long)ctx->batch_idx, (long long)s->pub.rollbacks,
                   s->pub.rollbacks == 1 ? "" : "s", s->max_rollbacks);
  if (!s->snap) return hk_fail(ctx, "spike_detection: %s, and there is no snapshot (on_train_start did not fire)", s->why);
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
  if (run->trainer && run->tr__p->rolled_back) run->tr__p->rolled_back(run->trainer);
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
  if (!d) return tr__bad(w, "spike_detection: desc is NULL");
  window = d->window ? d->window : 10;
  if (window < 2 || window > 10000) return tr__bad(w, "spike_detection: window must be in 2..10000, got %d", window);
  if (d->centre != TR_SPIKE_MEAN && d->centre != TR_SPIKE_MEDIAN)
    return tr__bad(w, "spike_detection: centre %d is not valid (mean or median)", (int)d->centre);
  if (d->mode != TR_SPIKE_RELATIVE && d->mode != TR_SPIKE_ZSCORE)
    return tr__bad(w, "spike_detection: mode %d is not valid (relative or zscore)", (int)d->mode);
  if (!hk_is_finite(d->threshold) || d->threshold < 0)
    return tr__bad(w, "spike_detection: threshold must be finite and > 0, got %g", d->threshold);
  if (d->every_n_steps < 0) return tr__bad(w, "spike_detection: every_n_steps must be >= 1, got %lld", (long long)d->every_n_steps);
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
  s->threshold = d->threshold ? d->threshold : 2;
  s->every = d->every_n_steps ? d->every_n_steps : 100;
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
#endif /* TR__ON_SPIKE_DETECTION */

#endif /* TRAIN_NO_CALLBACKS */

/* ---- LOGGERS AND PROGRESS BAR ---------------------------------------------------------------------
   The record API, CRC-32C, number formatting, run directories and hparams first; then csv, jsonl,
   tensorboard (one struct, tr__logger, with a part per format), plot (SVG), the progress bar. */
#if defined(TR__POSIX) && !defined(__cplusplus)
extern int fileno(FILE *f);                        /* strict C99 headers hide these */
extern int gethostname(char *name, size_t len);
#endif

TRAIN_API tr_log_record *tr_log_current(hk_ctx *ctx) {
  return ctx && ctx->event == HK_ON_LOG ? (tr_log_record *)ctx->outputs : NULL;
}
static int tr__log_find(const tr_log_record *r, const char *name) {
  int i;
  for (i = 0; i < r->n_metrics; i++) if (!strcmp(r->metrics[i].name, name)) return i;
  return -1;
}
/* The length of the UTF-8 sequence at p (1 to 4 bytes), 0 when it is not one: no overlong forms, no
   surrogates, nothing above U+10FFFF (RFC 3629). */
static size_t tr__utf8_len(const unsigned char *p) {
  unsigned c = p[0];
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return (p[1] & 0xC0) == 0x80 ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if ((p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return 0;
    if ((c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] > 0x9F)) return 0; /* overlong; surrogates */
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if ((p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return 0;
    if ((c == 0xF0 && p[1] < 0x90) || (c == 0xF4 && p[1] > 0x8F)) return 0; /* overlong; above U+10FFFF */
    return 4;
  }
  return 0;
}
static int tr__utf8_ok(const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  size_t k;
  while (*p) {
    if ((k = tr__utf8_len(p)) == 0) return 0;
    p += k;
  }
  return 1;
}

TRAIN_API tr_err tr_log_set(tr_log_record *r, const char *name, double value) {
  int i;
  size_t len = name ? strlen(name) : 0;
  if (!r || len == 0 || !tr__utf8_ok(name)) return TR_ERR_INVALID;
  if ((i = tr__log_find(r, name)) < 0) {
    tr_log_metric *m;
    if (r->n_metrics >= r->tr__cap) { /* the storage grows; entries past n_metrics keep their names' memory */
      int cap = r->tr__cap ? 2 * r->tr__cap : 32;
      tr_log_metric *p = (tr_log_metric *)realloc(r->metrics, (size_t)cap * sizeof *p);
      if (!p) return TR_ERR_NOMEM;
      memset(p + r->tr__cap, 0, (size_t)(cap - r->tr__cap) * sizeof *p);
      r->metrics = p;
      r->tr__cap = cap;
    }
    m = &r->metrics[r->n_metrics];
    if (m->tr__cap < len + 1) {
      size_t cap = len + 1 < 32 ? 32 : len + 1;
      char *p = (char *)realloc((void *)m->name, cap);
      if (!p) return TR_ERR_NOMEM;
      m->name = p;
      m->tr__cap = cap;
    }
    memcpy((void *)m->name, name, len + 1);
    i = r->n_metrics++;
  }
  r->metrics[i].value = value;
  return TR_OK;
}
TRAIN_API void tr_log_record_free(tr_log_record *r) {
  int i;
  if (!r) return;
  for (i = 0; i < r->tr__cap; i++) free((void *)r->metrics[i].name);
  free(r->metrics);
  memset(r, 0, sizeof *r);
}
TRAIN_API int tr_log_get(const tr_log_record *r, const char *name, double *value) {
  int i = r && name ? tr__log_find(r, name) : -1;
  if (i >= 0 && value) *value = r->metrics[i].value;
  return i >= 0;
}
TRAIN_API int tr_log_drop(tr_log_record *r, const char *name) {
  int i = r && name ? tr__log_find(r, name) : -1;
  tr_log_metric gone;
  if (i < 0) return 0;
  gone = r->metrics[i]; /* its name's memory moves behind the last entry, for reuse */
  memmove(&r->metrics[i], &r->metrics[i + 1], (size_t)(r->n_metrics - i - 1) * sizeof r->metrics[0]);
  r->metrics[--r->n_metrics] = gone;
  return 1;
}

/* The record's slot for tag (a new one, or the one with that tag), cleared; NULL when refused. */
static tr_log_histogram_data *tr__hist_slot(hk_ctx *ctx, const char *tag, tr_err *e) {
  tr_log_record *r = tr_log_current(ctx);
  tr_run *run = ctx ? (tr_run *)hk_attached(ctx->reg) : NULL;
  tr_log_histogram_data *h;
  size_t len = tag ? strlen(tag) : 0;
  int k;
  *e = TR_ERR_INVALID;
  if (!ctx || len == 0 || len >= TR_LOG_NAME_MAX || !tr__utf8_ok(tag)) return NULL;
  if (!r && run) r = &run->tr__p->rec; /* waits for the next record */
  if (!r) return NULL; /* not at on_log, and no run on the registry */
  for (k = 0; k < r->n_histograms && strcmp(r->histograms[k].tag, tag); k++) {}
  if (k == TR_LOG_MAX_HISTOGRAMS) { *e = TR_ERR_NOMEM; return NULL; }
  if (k == r->n_histograms) r->n_histograms++;
  h = &r->histograms[k];
  memset(h, 0, sizeof *h);
  memcpy(h->tag, tag, len + 1);
  *e = TR_OK;
  return h;
}

TRAIN_API tr_err tr_log_histogram(hk_ctx *ctx, const char *tag, const float *values, size_t n) {
  tr_log_histogram_data *h;
  tr_err e;
  size_t i;
  int k;
  if (!values && n) return TR_ERR_INVALID;
  if (!(h = tr__hist_slot(ctx, tag, &e))) return e;
  h->min = HUGE_VAL;
  h->max = -HUGE_VAL;
  for (i = 0; i < n; i++) {
    double v = values[i];
    if (!hk_is_finitef(values[i])) continue;
    if (v < h->min) h->min = v;
    if (v > h->max) h->max = v;
    h->num += 1;
    h->sum += v;
    h->sum_squares += v * v;
  }
  if (h->num == 0) h->min = h->max = 0;
  h->n_buckets = TR_LOG_HIST_BUCKETS;
  for (k = 0; k < TR_LOG_HIST_BUCKETS; k++) /* right edges; the first one is >= min (TensorBoard reads it so) */
    h->limit[k] = h->min + (h->max - h->min) * (double)(k + 1) / TR_LOG_HIST_BUCKETS;
  h->limit[TR_LOG_HIST_BUCKETS - 1] = h->max;
  for (i = 0; i < n; i++) {
    double v = values[i];
    if (!hk_is_finitef(values[i])) continue;
    k = h->max > h->min ? (int)((v - h->min) / (h->max - h->min) * TR_LOG_HIST_BUCKETS) : 0;
    if (k >= TR_LOG_HIST_BUCKETS) k = TR_LOG_HIST_BUCKETS - 1;
    h->count[k] += 1;
  }
  return TR_OK;
}

TRAIN_API tr_err tr_log_histogram_bins(hk_ctx *ctx, const char *tag, int n_bins, const double *edges,
                                       const int64_t *counts, double sum, double sum_squares) {
  tr_log_histogram_data *h;
  tr_err e;
  int b, group;
  if (n_bins < 1 || !edges || !counts) return TR_ERR_INVALID;
  for (b = 0; b < n_bins; b++)
    if (!(edges[b] <= edges[b + 1]) || counts[b] < 0) return TR_ERR_INVALID; /* NaN edges too */
  if (!(h = tr__hist_slot(ctx, tag, &e))) return e;
  group = (n_bins + TR_LOG_HIST_BUCKETS - 1) / TR_LOG_HIST_BUCKETS; /* bins per bucket */
  h->min = edges[0];
  h->max = edges[n_bins];
  h->sum = sum;
  h->sum_squares = sum_squares;
  for (b = 0; b < n_bins; b++) {
    int k = b / group;
    h->count[k] += (double)counts[b];
    h->limit[k] = edges[b + 1];
    h->num += (double)counts[b];
    if (k + 1 > h->n_buckets) h->n_buckets = k + 1;
  }
  return TR_OK;
}

TRAIN_API int tr_log_due(const hk_ctx *ctx) {
  const tr_run *run = ctx ? (const tr_run *)hk_attached(ctx->reg) : NULL;
  int64_t n;
  if (!run || run->running != HK_STAGE_FIT || !HK_ACTIVE(ctx->reg, HK_ON_LOG)) return 0;
  n = run->desc.log_every_n_steps ? run->desc.log_every_n_steps : 50;
  return n > 0 && (ctx->global_step + 1) % n == 0;
}

TRAIN_API hk_signal tr_log_emit(hk_registry *reg, hk_ctx *ctx, tr_log_record *r) {
  void *saved;
  hk_signal s;
  if (!reg || !ctx || !r) return HK_CONTINUE;
  saved = ctx->outputs;
  ctx->outputs = r;
  s = HK_FIRE(reg, HK_ON_LOG, ctx);
  ctx->outputs = saved;
  return s;
}

/* CRC-32C (reflected polynomial 0x82F63B78) four bits at a time: a 16-entry table (the CRC of each
   nibble) is small enough to write out and 4x faster than bit by bit, which showed in a logging
   record's cost (bench-log). */
TRAIN_API uint32_t tr_crc32c(const void *data, size_t n) {
  static const uint32_t nibble[16] = {
    0x00000000u, 0x105EC76Fu, 0x20BD8EDEu, 0x30E349B1u, 0x417B1DBCu, 0x5125DAD3u, 0x61C69362u, 0x7198540Du,
    0x82F63B78u, 0x92A8FC17u, 0xA24BB5A6u, 0xB21572C9u, 0xC38D26C4u, 0xD3D3E1ABu, 0xE330A81Au, 0xF36E6F75u };
  const unsigned char *p = (const unsigned char *)data;
  uint32_t crc = 0xFFFFFFFFu;
  size_t i;
  for (i = 0; i < n; i++) {
    crc ^= p[i];
    crc = (crc >> 4) ^ nibble[crc & 15u];
    crc = (crc >> 4) ^ nibble[crc & 15u];
  }
  return crc ^ 0xFFFFFFFFu;
}
TRAIN_API uint32_t tr_crc32c_masked(const void *data, size_t n) {
  uint32_t c = tr_crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

/* The shortest text that reads back as exactly v (Python's repr does the same); nan/inf as Python.
   Tried at 16 digits first: when 16 fail, 17 always read back (no check); when 16 do, 15 may. A value
   that reads back at p digits does at p + 1 too, so this finds the same text as trying 15, 16, 17 in
   turn, with one formatting and parse fewer for most values (a float's, like a loss, needs 16 or 17). */
static void tr__num(char *buf, size_t cap, double v) {
  char shorter[32];
  if (!hk_is_finite(v)) { snprintf(buf, cap, "%s", v != v ? "nan" : v > 0 ? "inf" : "-inf"); return; }
  if (v != 0 && v > -1e9 && v < 1e9 && v == (double)(long)v) { snprintf(buf, cap, "%ld", (long)v); return; } /* %.15g's text */
  snprintf(buf, cap, "%.16g", v);
  if (strtod(buf, NULL) != v) { snprintf(buf, cap, "%.17g", v); return; }
  snprintf(shorter, sizeof shorter, "%.15g", v);
  if (strtod(shorter, NULL) == v) snprintf(buf, cap, "%s", shorter);
}

/* Wall-clock seconds with microseconds (TensorBoard's wall_time; the bar's clock). */
TR__SHARED double tr__wall(void) {
#ifdef TR__POSIX
  struct timeval tv;
  if (gettimeofday(&tv, NULL) == 0) return (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
#endif
  return (double)time(NULL);
}

/* -- the version directory: save_dir/name/version_N, shared by one trainer's loggers -- */
static int64_t tr__next_version(const char *base) {
  int64_t next = 0;
#ifdef TR__POSIX
  DIR *d = opendir(base);
  struct dirent *e;
  if (!d) return 0;
  while ((e = readdir(d)) != NULL) {
    const char *p = e->d_name;
    int64_t v = 0;
    int digits = 0;
    if (strncmp(p, "version_", 8)) continue;
    for (p += 8; *p >= '0' && *p <= '9' && digits < 15; p++, digits++) v = v * 10 + (*p - '0');
    if (digits && !*p && v + 1 > next) next = v + 1;
  }
  closedir(d);
#else
  (void)base;
#endif
  return next;
}

static char *tr__join(const char *a, const char *b) { /* "a/b" (or b alone when a is empty) */
  size_t na = strlen(a), nb = strlen(b);
  char *p = (char *)malloc(na + nb + 2);
  if (!p) return NULL;
  if (na) { memcpy(p, a, na); p[na++] = '/'; }
  memcpy(p + na, b, nb + 1);
  return p;
}

/* The directory a logger writes into (a new string), made with its parents; NULL and why on failure.
   A new version_N is claimed with one mkdir (its parents are made first): mkdir fails with EEXIST
   when that directory exists, made by another run started at the same moment (or left by an earlier
   one), and then N+1 is tried. So parallel runs never share a version directory. A given version is
   used as it is (made when missing). */
static char *tr__run_dir_get(tr_run *run, const char *save_dir, const char *name, const char *version,
                             char *why, size_t why_len) {
  tr__run_priv *q = run ? run->tr__p : NULL;
  char *base = name[0] ? tr__join(save_dir, name) : tr__strdup(save_dir), *dir = NULL;
  tr__run_dir *rd = NULL;
  if (!base) { snprintf(why, why_len, "out of memory"); return NULL; }
  if (version && version[0]) {
    dir = tr__join(base, version);
    if (dir && tr__mkdirs(dir)) {
      snprintf(why, why_len, "cannot create the directory %s: %s", dir, strerror(errno));
      free(dir);
      dir = NULL;
    } else if (!dir) snprintf(why, why_len, "out of memory");
    free(base);
    return dir;
  }
  for (rd = q ? q->dirs : NULL; rd; rd = rd->next)
    if (!strcmp(rd->base, base)) break;
  if (rd) { /* this registry claimed it already */
    free(base);
    if (!(dir = tr__strdup(rd->dir))) snprintf(why, why_len, "out of memory");
    return dir;
  }
  if (tr__mkdirs(base)) {
    snprintf(why, why_len, "cannot create the directory %s: %s", base, strerror(errno));
    free(base);
    return NULL;
  }
  {
    int64_t v = tr__next_version(base);
    int tries;
    for (tries = 0; tries < 100000; tries++, v++) {
      char leaf[40];
      snprintf(leaf, sizeof leaf, "version_%lld", (long long)v);
      if (!(dir = tr__join(base, leaf))) break;
#ifdef TR__POSIX
      if (mkdir(dir, 0777) == 0) break; /* ours */
      if (errno != EEXIST) {
        snprintf(why, why_len, "cannot create the directory %s: %s", dir, strerror(errno));
        free(dir);
        free(base);
        return NULL;
      }
      free(dir);
      dir = NULL;
#else
      break;
#endif
    }
  }
  if (!dir) {
    snprintf(why, why_len, "%s", "out of memory, or no free version_N");
    free(base);
    return NULL;
  }
  if (q && (rd = (tr__run_dir *)calloc(1, sizeof *rd)) != NULL) {
    rd->base = tr__strdup(base);
    rd->dir = tr__strdup(dir);
    if (rd->base && rd->dir) { rd->next = q->dirs; q->dirs = rd; }
    else { free(rd->base); free(rd->dir); free(rd); }
  }
  free(base);
  return dir;
}

/* The run's directory is the first one made for it (model_checkpoint's default goes under it). */
TR__SHARED void tr__run_note_dir(tr_run *run, const char *dir) {
  if (run && !run->tr__p->dir && dir) run->tr__p->dir = tr__strdup(dir); /* out of memory: ./checkpoints */
}

TRAIN_API const char *tr_run_dir(hk_registry *reg) {
  tr_run *run = tr_run_get(reg);
  tr__run_dir *rd;
  char why[600], *dir;
  const char *base_dir, *name, *version;
  if (!run) return NULL;
  if (run->tr__p->dir) return run->tr__p->dir; /* a logger opened it already, wherever its save_dir says */
  base_dir = tr__run_str(run, TR__RUN_SAVE_DIR, "runs");
  name = tr__run_str(run, TR__RUN_NAME, "lightning_logs");
  version = tr__run_str(run, TR__RUN_VERSION, NULL);
  if (!(dir = tr__run_dir_get(run, base_dir, name, version, why, sizeof why))) {
    hk_set_error(reg, HK_ERR_INVALID, "tr_run_dir: %s", why[0] ? why : "out of memory");
    return NULL;
  }
  tr__run_note_dir(run, dir);
  for (rd = run->tr__p->dirs; rd; rd = rd->next) /* the registry keeps the string */
    if (!strcmp(rd->dir, dir)) { free(dir); return rd->dir; }
  if ((rd = (tr__run_dir *)calloc(1, sizeof *rd)) == NULL) { free(dir); return NULL; }
  rd->base = tr__strdup(dir); /* a named version: its own entry */
  rd->dir = dir;
  rd->next = run->tr__p->dirs;
  run->tr__p->dirs = rd;
  return rd->dir;
}

/* -- hparams: the trainer's configuration and the spec strings in effect, sorted by key -- */
#define TR__MAX_HPARAMS 40  /* the trainer's and tr_run_desc.hparams' entries; tr_run_hparam's come on top */
/* num: 0 a string, 1 a number (val is its text), 2 a boolean (val is "true" or "false"); prio: who
   gave it (the trainer 0, tr_run_desc.hparams 1, tr_run_hparam 2): of one key, the highest is kept */
typedef struct tr__hparam { const char *key; char keybuf[64]; char val[TR__HPARAM_VAL]; int num, prio; } tr__hparam;
/* A key of the loop's own lives in its entry (keybuf, key NULL until sorted: qsort moves entries). */
static const char *tr__hparam_key(const tr__hparam *h) { return h->key ? h->key : h->keybuf; }
static int tr__hparam_cmp(const void *a, const void *b) {
  const tr__hparam *x = (const tr__hparam *)a, *y = (const tr__hparam *)b;
  int c = strcmp(tr__hparam_key(x), tr__hparam_key(y));
  return c ? c : x->prio - y->prio;
}
TR__SHARED void tr__hp(tr__hparam *h, int *n, const char *key, const char *text, double v) {
  if (*n >= TR__MAX_HPARAMS) return;
  h[*n].key = key;
  h[*n].num = text == NULL;
  h[*n].prio = 0;
  if (text) snprintf(h[*n].val, sizeof h[*n].val, "%s", text);
  else tr__num(h[*n].val, sizeof h[*n].val, v);
  ++*n;
}
#ifndef TRAIN_NO_TRAINER
static int tr__hparams(const void *trainer, struct tr__hparam *h, int cap) {
  static const char *const optim[] = { "adamw", "sgd" };
  const tr_trainer *t = (const tr_trainer *)trainer;
  int n = 0;
  (void)cap; /* TR__MAX_HPARAMS: tr__hp stops there */
  if (!t) return 0;
  tr__hp(h, &n, "optimizer", optim[t->optim.kind == TR_OPTIM_SGD], 0);
  tr__hp(h, &n, "lr", NULL, t->optim.lr);
  tr__hp(h, &n, "weight_decay", NULL, t->optim.weight_decay);
  if (t->optim.kind == TR_OPTIM_SGD) tr__hp(h, &n, "momentum", NULL, t->optim.momentum);
  else { tr__hp(h, &n, "beta1", NULL, t->optim.beta1); tr__hp(h, &n, "beta2", NULL, t->optim.beta2); tr__hp(h, &n, "eps", NULL, t->optim.eps); }
  tr__hp(h, &n, "scheduler", tr_sched_kind_name(t->sched.kind), 0);
  tr__hp(h, &n, "warmup", NULL, (double)t->sched.warmup);
  tr__hp(h, &n, "seed", NULL, (double)t->seed);
  tr__hp(h, &n, "n_params", NULL, (double)t->model.n_params);
  if (t->tr__cfg) {
    const tr_config *c = t->tr__cfg;
    tr__hp(h, &n, "max_epochs", NULL, (double)c->max_epochs);
    tr__hp(h, &n, "max_steps", NULL, (double)c->max_steps);
    tr__hp(h, &n, "min_epochs", NULL, (double)c->min_epochs);
    tr__hp(h, &n, "min_steps", NULL, (double)c->min_steps);
    tr__hp(h, &n, "limit_train_batches", NULL, (double)c->limit_train_batches);
    tr__hp(h, &n, "limit_val_batches", NULL, (double)c->limit_val_batches);
    tr__hp(h, &n, "val_every_n_steps", NULL, (double)c->val_every_n_steps);
    tr__hp(h, &n, "val_every_n_epochs", NULL, (double)c->val_every_n_epochs);
    tr__hp(h, &n, "accumulate_grad_batches", NULL, (double)c->accumulate_grad_batches);
    tr__hp(h, &n, "gradient_clip_val", NULL, c->gradient_clip_val);
    tr__hp(h, &n, "gradient_clip_algorithm", c->gradient_clip_algorithm == TR_CLIP_VALUE ? "value" : "norm", 0);
    tr__hp(h, &n, "log_every_n_steps", NULL, (double)c->log_every_n_steps);
    tr__hp(h, &n, "num_sanity_val_steps", NULL, (double)c->num_sanity_val_steps);
    tr__hp(h, &n, "batch_size", NULL, (double)c->train->batch_size);
  }
  return n;
}
#endif
/* The run's hyperparameters, sorted by key, into a new array (*out; free it): the trainer's
   configuration, the loop's own (tr_run_desc.hparams, "key=value" words; a value that reads as a
   number is written as one), then the user's (tr_run_hparam*), which win over the others' same key.
   Returns the count; -1 out of memory. */
TR__SHARED int tr__run_hparams(const tr_run *run, tr__hparam **out) {
  const char *p;
  int i, j, n = 0;
  tr__hparam *h;
  *out = NULL;
  if (!run) return 0;
  if (!(h = (tr__hparam *)calloc((size_t)(TR__MAX_HPARAMS + run->tr__p->n_hp + 1), sizeof *h))) return -1;
  *out = h;
  if (run->trainer && run->tr__p->hparams) n = run->tr__p->hparams(run->trainer, h, TR__MAX_HPARAMS);
  for (p = run->desc.hparams; p && *p && n < TR__MAX_HPARAMS;) {
    size_t len, klen;
    const char *eq;
    char *end;
    while (*p == ' ' || *p == ',') p++;
    len = strcspn(p, " ,");
    if (!len) break;
    eq = (const char *)memchr(p, '=', len);
    klen = eq ? (size_t)(eq - p) : len;
    if (klen && klen < sizeof h[n].keybuf) {
      memcpy(h[n].keybuf, p, klen);
      h[n].keybuf[klen] = 0;
      h[n].key = NULL; /* keybuf: pointed at after the sort */
      snprintf(h[n].val, sizeof h[n].val, "%.*s", eq ? (int)(len - klen - 1) : 0, eq ? eq + 1 : "");
      h[n].num = h[n].val[0] && (strtod(h[n].val, &end), *end == 0);
      h[n].prio = 1;
      n++;
    }
    p += len;
  }
  for (i = 0; i < run->tr__p->n_hp; i++, n++) { /* checked by tr_run_hparam: they fit */
    const tr__user_hp *u = &run->tr__p->hp[i];
    snprintf(h[n].keybuf, sizeof h[n].keybuf, "%s", u->key);
    snprintf(h[n].val, sizeof h[n].val, "%s", u->val);
    h[n].key = NULL;
    h[n].num = u->kind;
    h[n].prio = 2;
  }
  qsort(h, (size_t)n, sizeof *h, tr__hparam_cmp);
  for (i = j = 0; i < n; i++) { /* of equal keys the last (the highest prio) stays */
    if (i + 1 < n && !strcmp(tr__hparam_key(&h[i]), tr__hparam_key(&h[i + 1]))) continue;
    if (j != i) h[j] = h[i];
    j++;
  }
  n = j;
  for (i = 0; i < n; i++) h[i].key = tr__hparam_key(&h[i]);
  return n;
}

/* Text into a growing buffer (hk_bytes: out of memory sets failed). */
static void tr__putf(hk_bytes *b, const char *fmt, ...) TR__PRINTF(2, 3);
static void tr__putf(hk_bytes *b, const char *fmt, ...) {
  char tmp[512];
  int n;
  va_list ap;
  va_start(ap, fmt);
  n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0) { b->failed = 1; return; }
  if ((size_t)n < sizeof tmp) { hk_bytes_put(b, tmp, (size_t)n); return; }
  {
    char *big = (char *)malloc((size_t)n + 1);
    if (!big) { b->failed = 1; return; }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    hk_bytes_put(b, big, (size_t)n);
    free(big);
  }
}
static void tr__put_s(hk_bytes *b, const char *s) { hk_bytes_put(b, s, strlen(s)); }

/* Text that must be UTF-8 (JSON, YAML, TensorBoard's strings, SVG): valid sequences as they are, every
   byte that does not start one as U+FFFD (the replacement character), so a name or a spec string with
   stray bytes still gives a file every reader decodes. Metric names are checked by tr_log_set; this
   covers the rest (spec strings, titles, the stage). */
static const char *tr__utf8_next(const char *s, size_t *k) { /* the sequence at s: *k bytes, or U+FFFD */
  *k = tr__utf8_len((const unsigned char *)s);
  if (*k) return s;
  *k = 3;
  return "\xEF\xBF\xBD";
}

/* JSON string, escaped */
static void tr__json_str(hk_bytes *b, const char *s) {
  hk_bytes_put(b, "\"", 1);
  while (*s) {
    unsigned char c = (unsigned char)*s;
    size_t k;
    const char *seq;
    if (c == '"' || c == '\\') { char e[2] = { '\\', (char)c }; hk_bytes_put(b, e, 2); s++; continue; }
    if (c < 0x20) { tr__putf(b, "\\u%04x", c); s++; continue; }
    seq = tr__utf8_next(s, &k);
    hk_bytes_put(b, seq, k);
    s += seq == s ? k : 1;
  }
  hk_bytes_put(b, "\"", 1);
}
TR__SHARED void tr__utf8_put(hk_bytes *b, const char *s) { /* plain text, U+FFFD for bad bytes */
  while (*s) {
    size_t k;
    const char *seq = tr__utf8_next(s, &k);
    hk_bytes_put(b, seq, k);
    s += seq == s ? k : 1;
  }
}
TR__SHARED void tr__json_num(hk_bytes *b, double v) {
  char n[40];
  if (!hk_is_finite(v)) { tr__put_s(b, v != v ? "\"NaN\"" : v > 0 ? "\"Infinity\"" : "\"-Infinity\""); return; }
  tr__num(n, sizeof n, v);
  tr__put_s(b, n);
}
/* CSV cell: quoted when it holds a comma, a quote or a line break (a metric name: UTF-8 already) */
TR__SHARED void tr__csv_cell(hk_bytes *b, const char *s) {
  if (!strpbrk(s, ",\"\r\n")) { tr__put_s(b, s); return; }
  hk_bytes_put(b, "\"", 1);
  for (; *s; s++) {
    if (*s == '"') hk_bytes_put(b, "\"\"", 2);
    else hk_bytes_put(b, s, 1);
  }
  hk_bytes_put(b, "\"", 1);
}
/* YAML scalar: quoted unless it is plain safe text */
TR__SHARED void tr__yaml_str(hk_bytes *b, const char *s) {
  const char *p;
  int plain = s[0] != 0;
  for (p = s; *p && plain; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || strchr("_./-", *p))) plain = 0;
  if (plain) tr__put_s(b, s);
  else tr__json_str(b, s); /* a JSON string is a YAML double-quoted scalar */
}

#ifndef TRAIN_NO_LOGGERS
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

#if TR__ON_FILE_LOGGERS
/* -- the file loggers: csv, jsonl, tensorboard, and plot's bookkeeping -- */
#define TR__LOGGERS(X) /* X(enum, name) */ \
  X(TR__LOG_CSV, "csv") X(TR__LOG_JSONL, "jsonl") X(TR__LOG_TB, "tensorboard") X(TR__LOG_PLOT, "plot")
typedef enum tr__log_kind {
#define TR__X(sym, name) sym,
  TR__LOGGERS(TR__X)
#undef TR__X
  TR__LOG_KINDS
} tr__log_kind;
static const char *const tr__log_kind_name[TR__LOG_KINDS] = {
#define TR__X(sym, name) name,
  TR__LOGGERS(TR__X)
#undef TR__X
};

typedef struct tr__series { char *name; double *x, *y; int n, cap; } tr__series;

/* csv: a new column rewrites the whole file; while the file is small (TR__CSV_SMALL) that happens at
   once. In a larger file rows that bring new columns are appended without them (every row and every
   known column is on disk as usual), and the rewrite that adds them waits until it is paid for: the
   bytes appended since the last rewrite reach half of what that rewrite wrote (so rewrites cost at
   most a constant times the bytes logged: a new column costs linear work in the rows, where rewriting
   at every new column made a column per record cubic), or TR__CSV_WAIT seconds have passed since
   rows first went without it (and 20 times the last rewrite's duration), or the run ends (teardown). */
#define TR__CSV_SMALL (16 * 1024)
#define TR__CSV_WAIT 2.0

typedef struct tr__logger {
  tr_logger_state pub;
  tr__log_kind kind;
  tr_run *run;          /* the registry's run: what the loop says (section THE RUN LAYER) */
  char *save_dir, *name, *version;
  int flush_every, fail_on_error;
  double last_flush;    /* flush_every 0: when whole lines were last written (wall clock) */
  int opened, broken;   /* broken: an I/O error was reported; nothing more is written */
  char *dir, *path;
  char err[1200];
  int fd;               /* the file it appends to: the descriptor of its creation (tr__afile), never
                           reopened by name; -1 before (csv: until its first rows) */
  int64_t size;         /* bytes of whole lines (records) in the file */
  hk_bytes out;         /* whole lines (or records) waiting for one write */
  int pending;          /* records in out (jsonl, tensorboard) or rows not written yet (csv) */
  hk_bytes scratch, vals, tmp; /* tensorboard: an event, its summary values, one value (reused) */
  int session_ended;    /* tensorboard: the fit's session_end_info is written */
  /* csv: every row stays in memory, so that a new column can rewrite the file */
  char **cols; int n_cols, cap_cols, col_hint;  /* columns by first appearance (epoch 0, step 1) */
  int file_cols;        /* the columns in the file's header: ids 0 .. file_cols-1 */
  int *order, *pos;     /* the file's layout: its p-th column is cols[order[p]]; pos[id] = p */
  char *has; double *rowv; /* one row's cells in file order (scratch) */
  int *row_at; int n_rows, cap_rows, rows_in_file; /* row r's cells: row_at[r] .. row_at[r+1] */
  int *cell_col; double *cell_val; int n_cells, cap_cells;
  int64_t base_size, appended; /* csv: the size the last whole write left, bytes appended since */
  double waiting_since, rewrite_secs; /* csv: rows went without a new column since (0: none); the last rewrite's time */
  /* plot */
  char *plot_path, *metrics, *title;
  tr__series *series; int n_series;
} tr__logger;

static void tr__logger_destroy(void *user);

/* Report an I/O error once, then write nothing more. fail_on_error fails the run (HK_FAIL). */
static hk_signal tr__logger_broke(tr__logger *s, hk_ctx *ctx, const char *fmt, ...) TR__PRINTF(3, 4);
static hk_signal tr__logger_broke(tr__logger *s, hk_ctx *ctx, const char *fmt, ...) {
  va_list ap;
  const char *who = tr__log_kind_name[s->kind];
  if (s->broken) return HK_CONTINUE;
  s->broken = 1;
  va_start(ap, fmt);
  vsnprintf(s->err, sizeof s->err, fmt, ap);
  va_end(ap);
  s->pub.error = s->err;
  if (s->fail_on_error && ctx) return hk_fail(ctx, "%s logger: %s", who, s->err);
  tr__run_say(s->run, ctx, who, "%s; this logger writes nothing more%s", s->err, ctx ? " (training goes on)" : "");
  return HK_CONTINUE;
}

#if TR__ON_CSV
static int tr__csv_col(tr__logger *s, const char *name) { /* the column's id, added when new; -1 on OOM */
  int i;
  if (s->col_hint < s->n_cols && !strcmp(s->cols[s->col_hint], name)) return s->col_hint++; /* the last record's order */
  for (i = 0; i < s->n_cols; i++) if (!strcmp(s->cols[i], name)) { s->col_hint = i + 1; return i; }
  if (s->n_cols == s->cap_cols) {
    int cap = s->cap_cols ? 2 * s->cap_cols : 16;
    char **p = (char **)realloc(s->cols, (size_t)cap * sizeof *p);
    if (!p) return -1;
    s->cols = p;
    s->cap_cols = cap;
  }
  if (!(s->cols[s->n_cols] = tr__strdup(name))) return -1;
  s->col_hint = s->n_cols + 1;
  return s->n_cols++;
}
static int tr__csv_cell_add(tr__logger *s, int col, double v) {
  if (col < 0) return -1;
  if (s->n_cells == s->cap_cells) {
    int cap = s->cap_cells ? 2 * s->cap_cells : 256;
    int *c = (int *)realloc(s->cell_col, (size_t)cap * sizeof *c);
    double *d;
    if (!c) return -1;
    s->cell_col = c;
    if (!(d = (double *)realloc(s->cell_val, (size_t)cap * sizeof *d))) return -1;
    s->cell_val = d;
    s->cap_cells = cap;
  }
  s->cell_col[s->n_cells] = col;
  s->cell_val[s->n_cells++] = v;
  return 0;
}
static int tr__csv_add_row(tr__logger *s, const tr_log_record *r) {
  int i;
  if (s->n_rows + 2 > s->cap_rows) {
    int cap = s->cap_rows ? 2 * s->cap_rows : 64;
    int *p = (int *)realloc(s->row_at, (size_t)cap * sizeof *p);
    if (!p) return -1;
    s->row_at = p;
    s->cap_rows = cap;
  }
  if (s->n_rows == 0) s->row_at[0] = 0;
  s->col_hint = 0;
  if (tr__csv_cell_add(s, tr__csv_col(s, "epoch"), (double)r->epoch) ||
      tr__csv_cell_add(s, tr__csv_col(s, "step"), (double)r->step)) return -1;
  for (i = 0; i < r->n_metrics; i++)
    if (strcmp(r->metrics[i].name, "epoch") && strcmp(r->metrics[i].name, "step") &&
        tr__csv_cell_add(s, tr__csv_col(s, r->metrics[i].name), r->metrics[i].value)) return -1;
  s->row_at[++s->n_rows] = s->n_cells;
  return 0;
}

/* The file's layout from every column known now, in Lightning's order (sorted by name). */
typedef struct tr__csv_key { const char *name; int id; } tr__csv_key;
static int tr__csv_key_cmp(const void *a, const void *b) { return strcmp(((const tr__csv_key *)a)->name, ((const tr__csv_key *)b)->name); }
static int tr__csv_layout(tr__logger *s) {
  size_t n = (size_t)s->n_cols;
  tr__csv_key *k = (tr__csv_key *)malloc(n * sizeof *k);
  int *order = k ? (int *)realloc(s->order, n * sizeof *order) : NULL, *pos;
  char *has;
  double *rowv;
  size_t i;
  if (order) s->order = order;
  if (!order || !(pos = (int *)realloc(s->pos, n * sizeof *pos))) { free(k); return -1; }
  s->pos = pos;
  if (!(has = (char *)realloc(s->has, n))) { free(k); return -1; }
  s->has = has;
  if (!(rowv = (double *)realloc(s->rowv, n * sizeof *rowv))) { free(k); return -1; }
  s->rowv = rowv;
  for (i = 0; i < n; i++) { k[i].name = s->cols[i]; k[i].id = (int)i; }
  qsort(k, n, sizeof *k, tr__csv_key_cmp);
  for (i = 0; i < n; i++) { order[i] = k[i].id; pos[k[i].id] = (int)i; }
  free(k);
  s->file_cols = (int)n;
  return 0;
}
static void tr__put_commas(hk_bytes *b, int n) {
  static const char commas[] = ",,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,"; /* 32 */
  for (; n > 0; n -= 32) hk_bytes_put(b, commas, n < 32 ? (size_t)n : 32);
}
/* Rows [from, n_rows) as CSV lines in the file's layout (the header first when header is set); a cell
   of a column the file does not have yet is left out. Work: the row's text and its cells. */
static int tr__csv_text(tr__logger *s, hk_bytes *b, int header, int from) {
  int nc = s->file_cols, i, r, c;
  char num[40];
  if (header) {
    for (i = 0; i < nc; i++) { if (i) tr__put_s(b, ","); tr__csv_cell(b, s->cols[s->order[i]]); }
    tr__put_s(b, "\n");
  }
  for (r = from; r < s->n_rows; r++) {
    int owed = 0; /* commas before the next cell */
    memset(s->has, 0, (size_t)nc);
    for (c = s->row_at[r]; c < s->row_at[r + 1]; c++) {
      int id = s->cell_col[c];
      if (id < nc) { s->has[s->pos[id]] = 1; s->rowv[s->pos[id]] = s->cell_val[c]; }
    }
    for (i = 0; i < nc; i++) {
      if (i) owed++;
      if (!s->has[i]) continue;
      tr__put_commas(b, owed);
      owed = 0;
      if (s->order[i] < 2) snprintf(num, sizeof num, "%lld", (long long)s->rowv[i]); /* epoch, step */
      else tr__num(num, sizeof num, s->rowv[i]);
      tr__put_s(b, num);
    }
    tr__put_commas(b, owed);
    tr__put_s(b, "\n");
  }
  return b->failed ? -1 : 0;
}
#endif

/* How much of the first n bytes of s->out is whole records (lines; TensorBoard's length-framed
   records), and how many records that is. */
static size_t tr__whole_records(const tr__logger *s, size_t n, int *count) {
  size_t at = 0, i;
  *count = 0;
  if (s->kind == TR__LOG_TB) {
    while (at + 12 <= n) {
      uint64_t len = tr__get(s->out.data + at, 8);
      if (len > n - at - 12 || n - at - 12 - len < 4) break;
      at += 16 + (size_t)len;
      ++*count;
    }
    return at;
  }
  for (i = 0; i < n; i++) if (s->out.data[i] == '\n') { at = i + 1; ++*count; }
  return at;
}

/* Append s->out (whole lines or records) to the file. On a short write (a full disk) the file is cut
   back to its last whole record, so no reader ever sees half of one. 0 or errno; *count gets the
   records that made it, *kept their bytes. */
static int tr__logger_append(tr__logger *s, size_t *kept, int *count) {
  size_t done = 0;
  int e = tr__fd_write_n(s->fd, s->out.data, s->out.len, &done);
  if (e) *kept = tr__whole_records(s, done, count);
  else { *kept = s->out.len; *count = -1; } /* all of them: the caller knows how many */
#ifdef TR__POSIX
  if (e && *kept < done) {
    off_t end = (off_t)(s->size + (int64_t)*kept);
    if (ftruncate(s->fd, end) != 0 || lseek(s->fd, end, SEEK_SET) < 0) e = errno;
  }
#endif
  s->size += (int64_t)*kept;
  return e;
}

#if TR__ON_CSV
/* csv: the whole file (header and every row) written anew and renamed over metrics.csv, its descriptor
   kept for the appends that follow. */
static hk_signal tr__csv_write_whole(tr__logger *s, hk_ctx *ctx) {
  char why[1100];
  double t0 = tr__wall();
  int fd, e;
  if (tr__csv_layout(s) || tr__csv_text(s, &s->out, 1, 0)) return tr__logger_broke(s, ctx, "out of memory");
  if ((e = tr__write_whole(s->path, s->out.data, s->out.len, 0, &fd, why, sizeof why)) != 0)
    return tr__logger_broke(s, ctx, "%s%s", why, s->fd >= 0 && e != EEXIST ? " (the file keeps the rows it had)" : "");
#ifdef TR__POSIX
  if (s->fd >= 0) close(s->fd);
#endif
  s->fd = fd;
  s->size = s->base_size = (int64_t)s->out.len;
  s->appended = 0;
  s->waiting_since = 0;
  s->rewrite_secs = tr__wall() - t0;
  s->pub.records = s->rows_in_file = s->n_rows;
  return HK_CONTINUE;
}

static hk_signal tr__csv_flush(tr__logger *s, hk_ctx *ctx, int force) {
  hk_signal sig = HK_CONTINUE;
  int whole = s->fd < 0, count, e;
  size_t kept;
  s->out.len = 0;
  s->out.failed = 0;
  if (!whole && s->file_cols != s->n_cols) { /* new columns: rewrite now, or once it is paid for */
    double now = tr__wall();
    if (force || s->size <= TR__CSV_SMALL || 2 * s->appended >= s->base_size ||
        (s->waiting_since > 0 && now - s->waiting_since >= TR__CSV_WAIT && now - s->waiting_since >= 20 * s->rewrite_secs))
      whole = 1;
    else if (s->waiting_since == 0) s->waiting_since = now;
  }
  if (whole) sig = tr__csv_write_whole(s, ctx);
  else {
    if (tr__csv_text(s, &s->out, 0, s->rows_in_file)) return tr__logger_broke(s, ctx, "out of memory");
    e = tr__logger_append(s, &kept, &count);
    if (count < 0) count = s->n_rows - s->rows_in_file;
    s->appended += (int64_t)kept;
    s->rows_in_file += count;
    s->pub.records += count;
    if (e) return tr__logger_broke(s, ctx, "cannot write %s: %s (it ends with its last whole row)", s->path, strerror(e));
  }
  s->out.len = 0;
  s->pending = 0;
  return sig;
}
#endif

/* Write what waits (force: csv's pending new columns too, at the end of a run). */
static hk_signal tr__logger_flush(tr__logger *s, hk_ctx *ctx, int force) {
  size_t kept;
  int e, count;
  (void)force; /* csv's */
  if (s->broken) return HK_CONTINUE;
#if TR__ON_CSV
  if (s->kind == TR__LOG_CSV && (s->pending || (force && s->fd >= 0 && s->file_cols != s->n_cols))) return tr__csv_flush(s, ctx, force);
#endif
  if (!s->pending || s->kind == TR__LOG_CSV) return HK_CONTINUE;
  if (s->fd < 0) return HK_CONTINUE;
  if (s->out.failed) return tr__logger_broke(s, ctx, "out of memory");
  e = tr__logger_append(s, &kept, &count);
  s->pub.records += count < 0 ? s->pending : count;
  s->out.len = 0;
  s->pending = 0;
  if (e) return tr__logger_broke(s, ctx, "cannot write %s: %s (it ends with its last whole %s)", s->path, strerror(e),
                                 s->kind == TR__LOG_TB ? "record" : "line");
  return HK_CONTINUE;
}

#if TR__ON_TENSORBOARD
/* -- tensorboard: protobuf fields and TFRecord framing (field numbers from TensorFlow's event.proto,
   summary.proto, tensor.proto) -- */
static void tr__pb_varint(hk_bytes *b, uint64_t v) {
  unsigned char x[10];
  int n = 0;
  do { x[n++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0)); v >>= 7; } while (v);
  hk_bytes_put(b, x, (size_t)n);
}
static void tr__pb_key(hk_bytes *b, int field, int wire) { tr__pb_varint(b, (uint64_t)(field << 3 | wire)); }
static void tr__pb_f64(hk_bytes *b, int field, double v) { unsigned char x[8]; uint64_t u; memcpy(&u, &v, 8); tr__le(x, u, 8); tr__pb_key(b, field, 1); hk_bytes_put(b, x, 8); }
static void tr__pb_f32(hk_bytes *b, int field, float v) { unsigned char x[4]; uint32_t u; memcpy(&u, &v, 4); tr__le(x, u, 4); tr__pb_key(b, field, 5); hk_bytes_put(b, x, 4); }
static void tr__pb_bytes(hk_bytes *b, int field, const void *p, size_t n) { tr__pb_key(b, field, 2); tr__pb_varint(b, n); hk_bytes_put(b, p, n); }
static void tr__pb_str(hk_bytes *b, int field, const char *s) { tr__pb_bytes(b, field, s, strlen(s)); }

/* One TFRecord: length, its masked CRC, the data, its masked CRC. */
static void tr__tf_record(hk_bytes *out, const hk_bytes *event) {
  unsigned char len[8], crc[4];
  tr__le(len, (uint64_t)event->len, 8);
  hk_bytes_put(out, len, 8);
  tr__le(crc, tr_crc32c_masked(len, 8), 4);
  hk_bytes_put(out, crc, 4);
  hk_bytes_put(out, event->data, event->len);
  tr__le(crc, tr_crc32c_masked(event->data, event->len), 4);
  hk_bytes_put(out, crc, 4);
}
/* Event{wall_time, step, summary{values}} where summary holds the Summary.Value messages in vals */
static void tr__tf_event(tr__logger *s, int64_t step, const hk_bytes *vals) {
  s->scratch.len = 0;
  tr__pb_f64(&s->scratch, 1, tr__wall());
  tr__pb_key(&s->scratch, 2, 0);
  tr__pb_varint(&s->scratch, (uint64_t)step);
  tr__pb_bytes(&s->scratch, 5, vals->data, vals->len);
  if (s->scratch.failed) s->out.failed = 1;
  tr__tf_record(&s->out, &s->scratch);
}
/* Summary.Value{tag, metadata{plugin_data{plugin_name "text"}}, tensor{DT_STRING, shape {}, string_val}} */
static void tr__tf_text(hk_bytes *vals, const char *tag, const char *text) {
  hk_bytes meta, plugin, tensor, value;
  memset(&meta, 0, sizeof meta); memset(&plugin, 0, sizeof plugin); memset(&tensor, 0, sizeof tensor); memset(&value, 0, sizeof value);
  tr__pb_str(&plugin, 1, "text");
  tr__pb_bytes(&meta, 1, plugin.data, plugin.len);
  tr__pb_key(&tensor, 1, 0); tr__pb_varint(&tensor, 7); /* DT_STRING */
  tr__pb_bytes(&tensor, 2, "", 0);                      /* a scalar: an empty shape */
  tr__pb_str(&tensor, 8, text);
  tr__pb_str(&value, 1, tag);
  tr__pb_bytes(&value, 9, meta.data, meta.len);
  tr__pb_bytes(&value, 8, tensor.data, tensor.len);
  tr__pb_bytes(vals, 1, value.data, value.len);
  if (meta.failed || plugin.failed || tensor.failed || value.failed) vals->failed = 1;
  hk_bytes_free(&meta); hk_bytes_free(&plugin); hk_bytes_free(&tensor); hk_bytes_free(&value);
}
/* TensorBoard's hparams plugin (its HParams tab): a summary value tagged _hparams_/session_start_info
   (the run's hyperparameters) or _hparams_/session_end_info (its status), whose metadata's plugin
   content is an HParamsPluginData message (version 0), with the plugin's null tensor (an empty float
   tensor), as tensorboard.plugins.hparams.summary writes them. No _hparams_/experiment summary: the
   plugin takes one run's experiment for every run in the log directory (the first it finds), so
   runs with other keys would lose theirs; without it the tab gathers the hyperparameters of every
   run's session_start_info and lists every scalar tag as a metric (its last value). */
static void tr__tf_hparams_value(hk_bytes *vals, const char *tag, const hk_bytes *content) {
  hk_bytes meta, plugin, value;
  static const unsigned char null_tensor[] = { 0x08, 0x01, 0x12, 0x02, 0x12, 0x00 }; /* DT_FLOAT, shape (0,) */
  memset(&meta, 0, sizeof meta); memset(&plugin, 0, sizeof plugin); memset(&value, 0, sizeof value);
  tr__pb_str(&plugin, 1, "hparams");
  tr__pb_bytes(&plugin, 2, content->data, content->len);
  tr__pb_bytes(&meta, 1, plugin.data, plugin.len);
  tr__pb_str(&value, 1, tag);
  tr__pb_bytes(&value, 9, meta.data, meta.len);
  tr__pb_bytes(&value, 8, null_tensor, sizeof null_tensor);
  tr__pb_bytes(vals, 1, value.data, value.len);
  if (meta.failed || plugin.failed || value.failed || content->failed) vals->failed = 1;
  hk_bytes_free(&meta); hk_bytes_free(&plugin); hk_bytes_free(&value);
}
/* A protobuf string is UTF-8: a stray byte becomes U+FFFD (tr__utf8_put). */
static void tr__pb_utf8(hk_bytes *b, int field, const char *text) {
  hk_bytes u;
  memset(&u, 0, sizeof u);
  tr__utf8_put(&u, text);
  tr__pb_bytes(b, field, u.data, u.len);
  if (u.failed) b->failed = 1;
  hk_bytes_free(&u);
}
/* SessionStartInfo { map<string, google.protobuf.Value> hparams = 1; double start_time_secs = 5; } */
static void tr__tf_hparams_start(hk_bytes *vals, const tr__hparam *h, int n, double start) {
  hk_bytes info, entry, v, data;
  int i;
  memset(&info, 0, sizeof info); memset(&entry, 0, sizeof entry); memset(&v, 0, sizeof v); memset(&data, 0, sizeof data);
  for (i = 0; i < n; i++) {
    entry.len = v.len = 0;
    if (h[i].num == 1) tr__pb_f64(&v, 2, strtod(h[i].val, NULL));                          /* number_value */
    else if (h[i].num == 2) { tr__pb_key(&v, 4, 0); tr__pb_varint(&v, h[i].val[0] == 't'); } /* bool_value */
    else tr__pb_utf8(&v, 3, h[i].val);                                                          /* string_value */
    tr__pb_utf8(&entry, 1, h[i].key);
    tr__pb_bytes(&entry, 2, v.data, v.len);
    tr__pb_bytes(&info, 1, entry.data, entry.len);
    if (entry.failed || v.failed) info.failed = 1;
  }
  tr__pb_f64(&info, 5, start);
  tr__pb_bytes(&data, 3, info.data, info.len);
  if (info.failed) data.failed = 1;
  tr__tf_hparams_value(vals, "_hparams_/session_start_info", &data);
  hk_bytes_free(&info); hk_bytes_free(&entry); hk_bytes_free(&v); hk_bytes_free(&data);
}
/* SessionEndInfo { Status status = 1 (1 success, 2 failure); double end_time_secs = 2; } */
static void tr__tf_hparams_end(hk_bytes *vals, int failed, double end) {
  hk_bytes info, data;
  memset(&info, 0, sizeof info); memset(&data, 0, sizeof data);
  tr__pb_key(&info, 1, 0); tr__pb_varint(&info, failed ? 2 : 1);
  tr__pb_f64(&info, 2, end);
  tr__pb_bytes(&data, 4, info.data, info.len);
  if (info.failed) data.failed = 1;
  tr__tf_hparams_value(vals, "_hparams_/session_end_info", &data);
  hk_bytes_free(&info); hk_bytes_free(&data);
}
static void tr__tf_scalar(hk_bytes *vals, hk_bytes *tmp, const char *tag, double v) {
  tmp->len = 0;
  tr__pb_str(tmp, 1, tag);
  tr__pb_f32(tmp, 2, (float)v);
  tr__pb_bytes(vals, 1, tmp->data, tmp->len);
  if (tmp->failed) vals->failed = 1;
}
static void tr__tf_histogram(hk_bytes *vals, hk_bytes *tmp, const tr_log_histogram_data *h) {
  hk_bytes histo;
  unsigned char x[8];
  int k;
  memset(&histo, 0, sizeof histo);
  tr__pb_f64(&histo, 1, h->min);
  tr__pb_f64(&histo, 2, h->max);
  tr__pb_f64(&histo, 3, h->num);
  tr__pb_f64(&histo, 4, h->sum);
  tr__pb_f64(&histo, 5, h->sum_squares);
  tr__pb_key(&histo, 6, 2); tr__pb_varint(&histo, 8 * (uint64_t)h->n_buckets); /* packed doubles */
  for (k = 0; k < h->n_buckets; k++) { uint64_t u; memcpy(&u, &h->limit[k], 8); tr__le(x, u, 8); hk_bytes_put(&histo, x, 8); }
  tr__pb_key(&histo, 7, 2); tr__pb_varint(&histo, 8 * (uint64_t)h->n_buckets);
  for (k = 0; k < h->n_buckets; k++) { uint64_t u; memcpy(&u, &h->count[k], 8); tr__le(x, u, 8); hk_bytes_put(&histo, x, 8); }
  tmp->len = 0;
  tr__pb_str(tmp, 1, h->tag);
  tr__pb_bytes(tmp, 5, histo.data, histo.len);
  tr__pb_bytes(vals, 1, tmp->data, tmp->len);
  if (tmp->failed || histo.failed) vals->failed = 1;
  hk_bytes_free(&histo);
}
#endif /* TR__ON_TENSORBOARD */

/* The hparams as text in a logger's format (csv: hparams.yaml; plot uses that too). */
static void tr__hparams_text(tr__logger *s, hk_ctx *ctx, tr__log_kind format, hk_bytes *b) {
  tr__hparam *h;
  int i, n = tr__run_hparams(s->run, &h);
  const char *spec;
  if (n < 0) { b->failed = 1; return; }
  if (format == TR__LOG_CSV || format == TR__LOG_PLOT) { /* hparams.yaml */
    for (i = 0; i < n; i++) { tr__putf(b, "%s: ", h[i].key); if (h[i].num) tr__put_s(b, h[i].val); else tr__yaml_str(b, h[i].val); tr__put_s(b, "\n"); }
    tr__put_s(b, "specs:");
    if (!hk_spec_applied(ctx->reg, 0)) tr__put_s(b, " []");
    for (i = 0; (spec = hk_spec_applied(ctx->reg, i)) != NULL; i++) { tr__put_s(b, "\n- "); tr__json_str(b, spec); }
    tr__put_s(b, "\n");
  } else if (format == TR__LOG_JSONL) {
    tr__put_s(b, "{\"hparams\":{");
    for (i = 0; i < n; i++) { if (i) tr__put_s(b, ","); tr__json_str(b, h[i].key); tr__put_s(b, ":"); if (h[i].num) tr__put_s(b, h[i].val); else tr__json_str(b, h[i].val); }
    tr__put_s(b, n ? ",\"specs\":[" : "\"specs\":[");
    for (i = 0; (spec = hk_spec_applied(ctx->reg, i)) != NULL; i++) { if (i) tr__put_s(b, ","); tr__json_str(b, spec); }
    tr__put_s(b, "]}}\n");
  } else { /* a Markdown table for TensorBoard's text plugin */
    tr__put_s(b, "| hparam | value |\n|---|---|\n");
    for (i = 0; i < n; i++) tr__putf(b, "| %s | %s |\n", h[i].key, h[i].val);
    for (i = 0; (spec = hk_spec_applied(ctx->reg, i)) != NULL; i++) { tr__put_s(b, "| spec | `"); tr__utf8_put(b, spec); tr__put_s(b, "` |\n"); }
    hk_bytes_put(b, "", 1); /* a C string */
  }
  free(h);
}

/* A logger's save_dir, name and version: its own desc's, else the run's, else Lightning's defaults. */
static const char *tr__logger_save_dir(const tr__logger *s) { return s->save_dir ? s->save_dir : tr__run_str(s->run, TR__RUN_SAVE_DIR, "runs"); }
static const char *tr__logger_name(const tr__logger *s) { return s->name ? s->name : tr__run_str(s->run, TR__RUN_NAME, "lightning_logs"); }
static const char *tr__logger_version(const tr__logger *s) { return s->version ? s->version : tr__run_str(s->run, TR__RUN_VERSION, NULL); }


/* Make the version directory and create the file (rank 0, at the first setup or record): hparams.yaml
   (csv), or the file with its first lines (jsonl: the hparams; tensorboard: file_version and the
   hparams), written whole by tr__afile; the logger then appends to that descriptor. metrics.csv is
   made with its first rows (no empty file when nothing is logged, as Lightning). Nothing here follows a
   symlink or replaces anything but a regular file. */
static hk_signal tr__logger_open(tr__logger *s, hk_ctx *ctx) {
  char why[1100], file[160];
  hk_bytes b;
  int e = 0;
  if (s->opened || s->broken || ctx->rank != 0) return HK_CONTINUE;
  s->opened = 1;
  why[0] = 0;
  if (!(s->dir = tr__run_dir_get(s->run, tr__logger_save_dir(s), tr__logger_name(s), tr__logger_version(s), why, sizeof why)))
    return tr__logger_broke(s, ctx, "%s", why);
  tr__run_note_dir(s->run, s->dir);
  s->pub.dir = s->dir;
  if (TR__ON_PLOT && s->kind == TR__LOG_PLOT) {
    if (!s->plot_path || !s->plot_path[0]) { free(s->plot_path); s->plot_path = tr__join(s->dir, "metrics.svg"); }
    if (!s->plot_path) return tr__logger_broke(s, ctx, "out of memory");
    s->path = tr__strdup(s->plot_path);
    s->pub.path = s->path ? s->path : "";
    return HK_CONTINUE;
  }
  if (s->kind == TR__LOG_TB) { /* TensorBoard's name; two in one second and process get .1, .2 ... */
    char host[64] = "localhost";
    long pid = 0;
    int k;
#ifdef TR__POSIX
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = 0;
    pid = (long)getpid();
#endif
    for (k = 0; k < 1000; k++) {
      snprintf(file, sizeof file, "events.out.tfevents.%010lld.%s.%ld.%d", (long long)time(NULL), host, pid, k);
      free(s->path);
      if (!(s->path = tr__join(s->dir, file)) || !tr__file_exists(s->path)) break;
    }
  } else s->path = tr__join(s->dir, s->kind == TR__LOG_CSV ? "metrics.csv" : "metrics.jsonl");
  if (!s->path) return tr__logger_broke(s, ctx, "out of memory");
  s->pub.path = s->path;
#ifndef TR__POSIX
  return tr__logger_broke(s, ctx, "file loggers need a POSIX system");
#endif
  memset(&b, 0, sizeof b);
  tr__hparams_text(s, ctx, s->kind, &b);
  if (b.failed) e = ENOMEM;
  else if (s->kind == TR__LOG_CSV) {
    char *yaml = tr__join(s->dir, "hparams.yaml");
    e = yaml ? tr__write_whole(yaml, b.data, b.len, 0, NULL, why, sizeof why) : ENOMEM;
    free(yaml);
  } else if (s->kind == TR__LOG_JSONL) {
    if ((e = tr__write_whole(s->path, b.data, b.len, 0, &s->fd, why, sizeof why)) == 0) s->size = (int64_t)b.len;
  }
#if TR__ON_TENSORBOARD
  else { /* file_version, then the hparams as text */
    hk_bytes vals;
    memset(&vals, 0, sizeof vals);
    s->scratch.len = 0;
    tr__pb_f64(&s->scratch, 1, tr__wall());
    tr__pb_str(&s->scratch, 3, "brain.Event:2");
    tr__tf_record(&s->out, &s->scratch);
    tr__tf_text(&vals, "hparams", (const char *)b.data);
    { /* and for the HParams tab */
      tr__hparam *h;
      int n = tr__run_hparams(s->run, &h);
      if (n < 0) vals.failed = 1;
      else tr__tf_hparams_start(&vals, h, n, tr__wall());
      free(h);
    }
    tr__tf_event(s, 0, &vals);
    if (vals.failed) s->out.failed = 1;
    hk_bytes_free(&vals);
    if (s->out.failed) e = ENOMEM;
    else if ((e = tr__write_whole(s->path, s->out.data, s->out.len, 0, &s->fd, why, sizeof why)) == 0) s->size = (int64_t)s->out.len;
    s->out.len = 0;
  }
#endif
  hk_bytes_free(&b);
  if (e) return tr__logger_broke(s, ctx, "%s", e == ENOMEM ? "out of memory" : why);
  return HK_CONTINUE;
}

static hk_signal tr__logger_setup(hk_ctx *ctx, void *u) { return tr__logger_open((tr__logger *)u, ctx); }


#if TR__ON_PLOT
static hk_signal tr__plot_add(tr__logger *s, hk_ctx *ctx, const tr_log_record *r);
static hk_signal tr__plot_write(tr__logger *s, hk_ctx *ctx);
#endif
static hk_signal tr__logger_on_log(hk_ctx *ctx, void *u) {
  tr__logger *s = (tr__logger *)u;
  const tr_log_record *r = tr_log_current(ctx);
  hk_signal sig;
  int i;
  if (!r || ctx->rank != 0) return HK_CONTINUE;
  if ((sig = tr__logger_open(s, ctx)) != HK_CONTINUE || s->broken) return sig;
  switch (s->kind) {
#if TR__ON_CSV
  case TR__LOG_CSV:
    if (tr__csv_add_row(s, r)) return tr__logger_broke(s, ctx, "out of memory");
    break;
#endif
  case TR__LOG_JSONL:
    tr__putf(&s->out, "{\"step\":%lld,\"epoch\":%lld,\"stage\":", (long long)r->step, (long long)r->epoch);
    tr__json_str(&s->out, r->stage ? r->stage : "");
    tr__put_s(&s->out, ",\"metrics\":{");
    for (i = 0; i < r->n_metrics; i++) {
      if (i) tr__put_s(&s->out, ",");
      tr__json_str(&s->out, r->metrics[i].name);
      tr__put_s(&s->out, ":");
      tr__json_num(&s->out, r->metrics[i].value);
    }
    tr__put_s(&s->out, "}}\n");
    break;
#if TR__ON_TENSORBOARD
  case TR__LOG_TB:
    s->vals.len = 0;
    for (i = 0; i < r->n_metrics; i++) tr__tf_scalar(&s->vals, &s->tmp, r->metrics[i].name, r->metrics[i].value);
    for (i = 0; i < r->n_histograms; i++) tr__tf_histogram(&s->vals, &s->tmp, &r->histograms[i]);
    if (s->vals.failed) s->out.failed = 1;
    if (s->vals.len) tr__tf_event(s, r->step, &s->vals);
    break;
#endif
#if TR__ON_PLOT
  case TR__LOG_PLOT:
    return tr__plot_add(s, ctx, r);
#endif
  default: break;
  }
  ++s->pending;
  if (s->flush_every > 0 ? s->pending >= s->flush_every : tr__wall() - s->last_flush >= 1.0) {
    s->last_flush = tr__wall(); /* a write is a system call: at the step rate of a small model it shows */
    return tr__logger_flush(s, ctx, 0);
  }
  return HK_CONTINUE;
}

/* At the end of every run (and of a failed one): write what waits, keep the file open for the next run. */
static hk_signal tr__logger_teardown(hk_ctx *ctx, void *u) {
  tr__logger *s = (tr__logger *)u;
  if (ctx->rank != 0) return HK_CONTINUE;
#if TR__ON_PLOT
  if (s->kind == TR__LOG_PLOT) return tr__plot_write(s, ctx);
#endif
#if TR__ON_TENSORBOARD
  if (s->kind == TR__LOG_TB && ctx->stage == HK_STAGE_FIT && !s->session_ended && s->opened && !s->broken) {
    s->session_ended = 1; /* the fit's status for the HParams tab (the plugin reads a run's first one) */
    s->vals.len = 0;
    tr__tf_hparams_end(&s->vals, s->run && s->run->failed, tr__wall());
    tr__tf_event(s, ctx->global_step, &s->vals);
    s->pending++;
  }
#endif
  return tr__logger_flush(s, ctx, 1);
}

#if TR__ON_PLOT
/* -- plot: SVG curves -- */
static int tr__plot_wants(const char *metrics, const char *name) { /* metrics: space-separated names, or NULL */
  size_t n = strlen(name);
  const char *p = metrics;
  if (!metrics || !metrics[0]) return strstr(name, "loss") != NULL;
  while ((p = strstr(p, name)) != NULL) {
    if ((p == metrics || p[-1] == ' ') && (p[n] == ' ' || p[n] == 0)) return 1;
    p += n;
  }
  return 0;
}
static tr__series *tr__series_get(tr__series **all, int *n, const char *name) {
  int i;
  tr__series *grown;
  char *copy;
  for (i = 0; i < *n; i++) if (!strcmp((*all)[i].name, name)) return &(*all)[i];
  if (!(copy = tr__strdup(name))) return NULL;
  if (!(grown = (tr__series *)realloc(*all, (size_t)(*n + 1) * sizeof *grown))) { free(copy); return NULL; }
  *all = grown;
  memset(&grown[*n], 0, sizeof grown[0]);
  grown[*n].name = copy;
  return &grown[(*n)++];
}
static int tr__series_add(tr__series *s, double x, double y) {
  if (s->n == s->cap) {
    int cap = s->cap ? 2 * s->cap : 64;
    double *nx = (double *)realloc(s->x, (size_t)cap * sizeof *nx), *ny;
    if (!nx) return -1;
    s->x = nx;
    if (!(ny = (double *)realloc(s->y, (size_t)cap * sizeof *ny))) return -1;
    s->y = ny;
    s->cap = cap;
  }
  s->x[s->n] = x;
  s->y[s->n++] = y;
  return 0;
}
static void tr__series_free(tr__series *all, int n) {
  int i;
  for (i = 0; i < n; i++) { free(all[i].name); free(all[i].x); free(all[i].y); }
  free(all);
}
static hk_signal tr__plot_add(tr__logger *s, hk_ctx *ctx, const tr_log_record *r) {
  int i;
  for (i = 0; i < r->n_metrics; i++) {
    tr__series *se;
    if (!tr__plot_wants(s->metrics, r->metrics[i].name)) continue;
    se = tr__series_get(&s->series, &s->n_series, r->metrics[i].name);
    if (!se || tr__series_add(se, (double)r->step, r->metrics[i].value)) return tr__logger_broke(s, ctx, "out of memory");
  }
  s->pub.records++;
  return HK_CONTINUE;
}

static double tr__nice(double span) { /* a tick spacing of 1, 2 or 5 times a power of ten, about span/5 */
  double raw = span / 5, p = pow(10, floor(log10(raw))), f = raw / p;
  return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}
/* XML text: markup escaped, bytes that are not UTF-8 and control characters XML forbids as U+FFFD */
static void tr__svg_text(hk_bytes *b, const char *s) {
  while (*s) {
    unsigned char c = (unsigned char)*s;
    size_t k;
    const char *seq;
    if (c == '<') tr__put_s(b, "&lt;");
    else if (c == '>') tr__put_s(b, "&gt;");
    else if (c == '&') tr__put_s(b, "&amp;");
    else if (c == '"') tr__put_s(b, "&quot;");
    else if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') tr__put_s(b, "\xEF\xBF\xBD");
    else {
      seq = tr__utf8_next(s, &k);
      hk_bytes_put(b, seq, k);
      s += seq == s ? k : 1;
      continue;
    }
    s++;
  }
}
/* Curves of every series against x, one colour each, with axes, ticks, grid and a legend; written
   whole (tr__afile). 0, or errno with why filled. */
static int tr__svg_write(const char *path, const char *title, const char *desc, const char *xlabel, const tr__series *s, int n, char *why, size_t why_len) {
  static const char *const colour[] = { "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf" };
  const double W = 760, H = 420, L = 70, R = 190, T = 40, B = 50, pw = W - L - R, ph = H - T - B;
  double x0 = HUGE_VAL, x1 = -HUGE_VAL, y0 = HUGE_VAL, y1 = -HUGE_VAL, dx, dy, v;
  hk_bytes f;
  int i, k, e;
  for (i = 0; i < n; i++)
    for (k = 0; k < s[i].n; k++)
      if (hk_is_finite(s[i].y[k]) && hk_is_finite(s[i].x[k])) {
        if (s[i].x[k] < x0) x0 = s[i].x[k];
        if (s[i].x[k] > x1) x1 = s[i].x[k];
        if (s[i].y[k] < y0) y0 = s[i].y[k];
        if (s[i].y[k] > y1) y1 = s[i].y[k];
      }
  if (x0 > x1) { x0 = 0; x1 = 1; y0 = 0; y1 = 1; } /* nothing finite: empty axes */
  if (x1 == x0) { x0 -= 1; x1 += 1; }
  if (y1 == y0) { y0 -= fabs(y0) * 0.1 + 1e-9; y1 += fabs(y1) * 0.1 + 1e-9; }
  dx = tr__nice(x1 - x0);
  dy = tr__nice(y1 - y0);
  y0 = floor(y0 / dy) * dy;
  y1 = ceil(y1 / dy) * dy;
  memset(&f, 0, sizeof f);
#define TR__SX(x) (L + ((x) - x0) / (x1 - x0) * pw)
#define TR__SY(y) (T + ph - ((y) - y0) / (y1 - y0) * ph)
  tr__putf(&f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" viewBox=\"0 0 %g %g\" font-family=\"sans-serif\" font-size=\"12\">\n", W, H, W, H);
  tr__putf(&f, "<rect width=\"%g\" height=\"%g\" fill=\"white\"/>\n<text x=\"%g\" y=\"24\" font-size=\"15\">", W, H, L);
  tr__svg_text(&f, title);
  tr__put_s(&f, "</text>\n");
  if (desc && desc[0]) { tr__put_s(&f, "<desc>"); tr__svg_text(&f, desc); tr__put_s(&f, "</desc>\n"); } /* the hparams */
  for (v = ceil(x0 / dx) * dx; v <= x1 + dx * 1e-9; v += dx)
    tr__putf(&f, "<line x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" y2=\"%g\" stroke=\"#e5e5e5\"/><text x=\"%.1f\" y=\"%g\" text-anchor=\"middle\">%g</text>\n",
             TR__SX(v), T, TR__SX(v), T + ph, TR__SX(v), T + ph + 16, v);
  for (v = y0; v <= y1 + dy * 1e-9; v += dy)
    tr__putf(&f, "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" stroke=\"#e5e5e5\"/><text x=\"%g\" y=\"%.1f\" text-anchor=\"end\">%.4g</text>\n",
             L, TR__SY(v), L + pw, TR__SY(v), L - 6, TR__SY(v) + 4, fabs(v) < dy * 1e-9 ? 0.0 : v);
  tr__putf(&f, "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"#333\"/>\n", L, T, pw, ph);
  tr__putf(&f, "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">%s</text>\n", L + pw / 2, H - 12, xlabel);
  for (i = 0; i < n; i++) {
    const char *c = colour[i % 8];
    int open = 0;
    for (k = 0; k < s[i].n; k++) { /* a non-finite value breaks the line */
      if (!hk_is_finite(s[i].y[k]) || !hk_is_finite(s[i].x[k])) { if (open) tr__put_s(&f, "\"/>\n"); open = 0; continue; }
      if (!open) tr__putf(&f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", c);
      tr__putf(&f, "%s%.1f,%.1f", open ? " " : "", TR__SX(s[i].x[k]), TR__SY(s[i].y[k]));
      open = 1;
    }
    if (open) tr__put_s(&f, "\"/>\n");
    if (s[i].n <= 60) /* few points (a validation curve): mark them */
      for (k = 0; k < s[i].n; k++)
        if (hk_is_finite(s[i].y[k]) && hk_is_finite(s[i].x[k]))
          tr__putf(&f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", TR__SX(s[i].x[k]), TR__SY(s[i].y[k]), c);
    tr__putf(&f, "<rect x=\"%g\" y=\"%g\" width=\"14\" height=\"4\" fill=\"%s\"/><text x=\"%g\" y=\"%g\">", L + pw + 14, T + 10 + 20.0 * i, c, L + pw + 34, T + 15 + 20.0 * i);
    tr__svg_text(&f, s[i].name);
    tr__put_s(&f, "</text>\n");
  }
#undef TR__SX
#undef TR__SY
  tr__put_s(&f, "</svg>\n");
  if (f.failed) { snprintf(why, why_len, "out of memory"); e = ENOMEM; }
  else e = tr__write_whole(path, f.data, f.len, 0, NULL, why, why_len);
  hk_bytes_free(&f);
  return e;
}

static hk_signal tr__plot_write(tr__logger *s, hk_ctx *ctx) {
  char why[600];
  hk_bytes desc;
  int e;
  hk_signal sig = tr__logger_open(s, ctx);
  if (sig != HK_CONTINUE || s->broken || !s->n_series) return sig;
  memset(&desc, 0, sizeof desc);
  tr__hparams_text(s, ctx, TR__LOG_PLOT, &desc);
  hk_bytes_put(&desc, "", 1);
  e = tr__svg_write(s->path, s->title && s->title[0] ? s->title : s->dir, desc.failed ? NULL : (const char *)desc.data, "step",
                    s->series, s->n_series, why, sizeof why);
  hk_bytes_free(&desc);
  return e ? tr__logger_broke(s, ctx, "%s", why) : HK_CONTINUE;
}

/* Read a CSV line's cells in place (quotes removed); returns the number of cells. */
static int tr__csv_split(char *line, char **cells, int max) {
  int n = 0;
  char *p = line, *w;
  while (n < max) {
    cells[n++] = w = p;
    if (*p == '"') {
      p++;
      while (*p && !(*p == '"' && p[1] != '"')) { if (*p == '"') p++; *w++ = *p++; }
      if (*p == '"') p++;
    } else while (*p && *p != ',') *w++ = *p++;
    if (*p != ',') { *w = 0; break; }
    *w = 0;
    p++;
  }
  return n;
}

TRAIN_API tr_err tr_plot_csv(const char *csv_path, const char *svg_path, const char *metrics, char *why, size_t why_len) {
  enum { MAXC = 256 };
  char dummy[8], *line = NULL, *cells[MAXC];
  size_t cap = 0;
  FILE *f;
  int n_cols = 0, step_col = -1, job_col = -1, i, line_no = 0, e;
  int col_series[MAXC];
  tr__series *series = NULL;
  int n_series = 0;
  tr_err err = TR_OK;
  if (!why) { why = dummy; why_len = sizeof dummy; }
  why[0] = 0;
  if (!csv_path || !svg_path) { snprintf(why, why_len, "tr_plot_csv: the CSV and SVG paths are required"); return TR_ERR_INVALID; }
  if (!(f = fopen(csv_path, "r"))) { snprintf(why, why_len, "cannot read %s: %s", csv_path, strerror(errno)); return TR_ERR_IO; }
  for (;;) { /* whole lines of any length */
    size_t len = 0;
    int c;
    while ((c = fgetc(f)) != EOF && c != '\n') {
      if (len + 2 > cap) {
        char *p = (char *)realloc(line, cap = cap ? 2 * cap : 256);
        if (!p) { err = TR_ERR_NOMEM; break; }
        line = p;
      }
      line[len++] = (char)c;
    }
    if (err || (c == EOF && len == 0)) break;
    if (!line && !(line = (char *)malloc(cap = 256))) { err = TR_ERR_NOMEM; break; }
    line[len] = 0;
    if (len && line[len - 1] == '\r') line[--len] = 0;
    if (line_no++ == 0) {
      n_cols = tr__csv_split(line, cells, MAXC);
      for (i = 0; i < n_cols; i++) {
        col_series[i] = -1;
        if (!strcmp(cells[i], "step")) step_col = i;
        else if (!strcmp(cells[i], "job")) job_col = i; /* a sweep's summary.csv: one row per job */
        else if (tr__plot_wants(metrics, cells[i])) {
          tr__series *s = tr__series_get(&series, &n_series, cells[i]);
          if (!s) { err = TR_ERR_NOMEM; break; }
          col_series[i] = (int)(s - series);
        }
      }
      if (step_col < 0) step_col = job_col; /* else "job" is a column like any other */
      else if (job_col >= 0 && tr__plot_wants(metrics, "job")) {
        tr__series *s = tr__series_get(&series, &n_series, "job");
        if (!s) err = TR_ERR_NOMEM;
        else col_series[job_col] = (int)(s - series);
      }
      if (!err && step_col < 0) { snprintf(why, why_len, "%s: the header has no \"step\" column (expected metrics.csv's layout, or a \"job\" column: a sweep's summary.csv)", csv_path); err = TR_ERR_INVALID; }
      if (!err && n_series == 0) { snprintf(why, why_len, "%s: no column to plot (%s)", csv_path, metrics && metrics[0] ? "none of the metrics asked for" : "no column name contains \"loss\""); err = TR_ERR_INVALID; }
      if (err) break;
    } else {
      int n = tr__csv_split(line, cells, MAXC);
      char *end;
      double x;
      if (n != n_cols) { snprintf(why, why_len, "%s:%d: %d cells, the header has %d", csv_path, line_no, n, n_cols); err = TR_ERR_INVALID; break; }
      x = strtod(cells[step_col], &end);
      if (end == cells[step_col] || *end) continue;
      for (i = 0; i < n; i++) {
        double y;
        if (col_series[i] < 0 || !cells[i][0]) continue;
        y = strtod(cells[i], &end);
        if (*end) continue;
        if (tr__series_add(&series[col_series[i]], x, y)) { err = TR_ERR_NOMEM; break; }
      }
      if (err) break;
    }
  }
  if (!err && ferror(f)) { snprintf(why, why_len, "cannot read %s", csv_path); err = TR_ERR_IO; }
  if (!err && line_no == 0) { snprintf(why, why_len, "%s is empty", csv_path); err = TR_ERR_INVALID; }
  fclose(f);
  free(line);
  if (err == TR_ERR_NOMEM) snprintf(why, why_len, "out of memory");
  if (!err && (e = tr__svg_write(svg_path, csv_path, NULL, step_col == job_col ? "job" : "step", series, n_series, why, why_len)) != 0) err = TR_ERR_IO;
  tr__series_free(series, n_series);
  return err;
}
#endif /* TR__ON_PLOT */

static void tr__logger_destroy(void *user) {
  tr__logger *s = (tr__logger *)user;
  int i;
  if (!s) return;
  (void)tr__logger_flush(s, NULL, 1); /* a loop that never fired teardown still gets every record on disk */
#ifdef TR__POSIX
  if (s->fd >= 0) close(s->fd);
#endif
  free(s->save_dir); free(s->name); free(s->version); free(s->dir); free(s->path);
  hk_bytes_free(&s->out); hk_bytes_free(&s->scratch); hk_bytes_free(&s->vals); hk_bytes_free(&s->tmp);
  for (i = 0; i < s->n_cols; i++) free(s->cols[i]);
  free(s->cols); free(s->row_at); free(s->cell_col); free(s->cell_val);
  free(s->order); free(s->pos); free(s->has); free(s->rowv);
  free(s->plot_path); free(s->metrics); free(s->title);
#if TR__ON_PLOT
  tr__series_free(s->series, s->n_series);
#endif
  free(s);
}


static tr_err tr__logger_make(hk_registry *reg, tr__log_kind kind, const tr_logger_desc *d,
                              const tr_plot_desc *pd, hk_handle *out, tr__why *w) {
  const char *who = tr__log_kind_name[kind];
  char unique[64];
  tr__logger *s;
  hk_callback cb;
  hk_opts o;
  hk_err e;
  if (!d) return tr__bad(w, "%s: desc is NULL", who);
  if (d->flush_every < 0) return tr__bad(w, "%s: flush_every must be >= 0 (0 = once a second), got %d", who, d->flush_every);
  if (d->version && strchr(d->version, '/')) return tr__bad(w, "%s: version '%s' must be a directory name without '/'", who, d->version);
  if (d->save_dir && !d->save_dir[0]) return tr__bad(w, "%s: save_dir is empty (NULL means \"runs\"; \".\" is the current directory)", who);
  if (!(s = (tr__logger *)calloc(1, sizeof *s))) return tr__bad(w, "%s: out of memory", who), TR_ERR_NOMEM;
  s->kind = kind;
  s->run = tr_run_get(reg);
  s->fd = -1;
  s->pub.dir = s->pub.path = s->pub.error = "";
  s->flush_every = d->flush_every;
  s->fail_on_error = d->fail_on_error > 0;
  s->save_dir = d->save_dir ? tr__strdup(d->save_dir) : NULL; /* NULL: the run's (tr_run_desc) */
  s->name = d->name ? tr__strdup(d->name) : NULL;
  s->version = d->version ? tr__strdup(d->version) : NULL;
  if (pd) {
    s->plot_path = tr__strdup(pd->path);
    s->metrics = tr__strdup(pd->metrics);
    s->title = tr__strdup(pd->title);
  }
  if ((d->save_dir && !s->save_dir) || (d->name && !s->name) || (d->version && !s->version) ||
      (pd && (!s->plot_path || !s->metrics || !s->title))) {
    tr__logger_destroy(s);
    return tr__bad(w, "%s: out of memory", who), TR_ERR_NOMEM;
  }
  memset(&cb, 0, sizeof cb);
  cb.name = tr__unique_name(reg, who, unique, sizeof unique);
  cb.user = s;
  cb.setup = tr__logger_setup;
  cb.on_log = tr__logger_on_log;
  cb.teardown = tr__logger_teardown;
  cb.destroy = tr__logger_destroy;
  /* loggers run last at on_log (a monitoring callback on an HK_MONITOR_LAST event, high order): every
     other hook has changed the record by then */
  memset(&o, 0, sizeof o);
  o.monitor = 1;
  o.order = 1000;
  e = hk_add_callback(reg, &cb, &o, out);
  if (e) {
    tr__bad(w, "%s", hk_last_error(reg));
    tr__logger_destroy(s);
    return e == HK_ERR_NOMEM ? TR_ERR_NOMEM : TR_ERR_INVALID;
  }
  return TR_OK;
}

#if TR__ON_CSV
TRAIN_API tr_err tr_csv_logger(hk_registry *reg, const tr_logger_desc *d, hk_handle *out) {
  tr__why w;
  if (!reg) return TR_ERR_INVALID;
  return tr__cb_result(reg, tr__logger_make(reg, TR__LOG_CSV, d, NULL, out, &w), &w);
}
#endif
#if TR__ON_JSONL
TRAIN_API tr_err tr_jsonl_logger(hk_registry *reg, const tr_logger_desc *d, hk_handle *out) {
  tr__why w;
  if (!reg) return TR_ERR_INVALID;
  return tr__cb_result(reg, tr__logger_make(reg, TR__LOG_JSONL, d, NULL, out, &w), &w);
}
#endif
#if TR__ON_TENSORBOARD
TRAIN_API tr_err tr_tensorboard_logger(hk_registry *reg, const tr_logger_desc *d, hk_handle *out) {
  tr__why w;
  if (!reg) return TR_ERR_INVALID;
  return tr__cb_result(reg, tr__logger_make(reg, TR__LOG_TB, d, NULL, out, &w), &w);
}
#endif
#if TR__ON_PLOT
TRAIN_API tr_err tr_plot(hk_registry *reg, const tr_plot_desc *d, hk_handle *out) {
  tr__why w;
  if (!reg) return TR_ERR_INVALID;
  if (!d) return tr__cb_result(reg, tr__bad(&w, "plot: desc is NULL"), &w);
  return tr__cb_result(reg, tr__logger_make(reg, TR__LOG_PLOT, &d->dir, d, out, &w), &w);
}
#endif
TRAIN_API const tr_logger_state *tr_logger_get(const hk_registry *reg, hk_handle h) {
  const hk_callback *cb = hk_callback_get(reg, h);
  return cb && cb->destroy == tr__logger_destroy ? &((const tr__logger *)cb->user)->pub : NULL;
}
#endif /* TR__ON_FILE_LOGGERS */

#if TR__ON_PROGRESS_BAR
/* -- the progress bar -- */
static size_t tr__clock_fmt(char *b, size_t cap, double s) { /* MM:SS, or H:MM:SS from an hour */
  long long t = s > 0 && s < 1e12 ? (long long)s : 0;
  return (size_t)(t >= 3600 ? snprintf(b, cap, "%lld:%02lld:%02lld", t / 3600, t / 60 % 60, t % 60)
                            : snprintf(b, cap, "%02lld:%02lld", t / 60, t % 60));
}

/* initial: the count the bar started from (a resumed run), left out of the rate, as tqdm's initial */
static size_t tr__bar_format(char *buf, size_t cap, const char *desc, int64_t n, int64_t initial, int64_t total,
                             double elapsed, const char *postfix, int width, int ascii) {
  static const char *const blocks[9] = { " ", "\xe2\x96\x8f", "\xe2\x96\x8e", "\xe2\x96\x8d", "\xe2\x96\x8c",
                                         "\xe2\x96\x8b", "\xe2\x96\x8a", "\xe2\x96\x89", "\xe2\x96\x88" };
  char el[24], rem[24], rate[32], left[96], right[400];
  double r = elapsed > 0 ? (double)(n - initial) / elapsed : 0;
  int nl, nr, cells, full, k, units;
  size_t len = 0;
  if (!buf || cap == 0) return 0;
  buf[0] = 0;
  tr__clock_fmt(el, sizeof el, elapsed);
  if (r <= 0) snprintf(rate, sizeof rate, "?it/s");
  else if (r < 1) snprintf(rate, sizeof rate, "%.2fs/it", 1 / r); /* tqdm flips below one per second */
  else snprintf(rate, sizeof rate, "%.2fit/s", r);
  if (total <= 0) /* unknown total: "desc: 12it [00:01, 9.50it/s]" */
    return (size_t)snprintf(buf, cap, "%s: %lldit [%s, %s%s%s]", desc ? desc : "", (long long)n, el, rate,
                            postfix && postfix[0] ? ", " : "", postfix ? postfix : "") >= cap ? cap - 1 : strlen(buf);
  if (r > 0) tr__clock_fmt(rem, sizeof rem, (double)(total - n) / r);
  else snprintf(rem, sizeof rem, "?");
  nl = snprintf(left, sizeof left, "%s: %3.0f%%|", desc ? desc : "", 100.0 * (double)n / (double)total);
  nr = snprintf(right, sizeof right, "| %lld/%lld [%s<%s, %s%s%s]", (long long)n, (long long)total, el, rem, rate,
                postfix && postfix[0] ? ", " : "", postfix ? postfix : "");
  if (nl < 0 || nr < 0) return 0;
  if (nl >= (int)sizeof left) nl = (int)sizeof left - 1;
  if (nr >= (int)sizeof right) nr = (int)sizeof right - 1;
  cells = width > 0 ? width - nl - nr : 10; /* tqdm: the bar takes what the text leaves */
  if (cells < 1) cells = 1;
  if (cells > 400) cells = 400;
  units = ascii ? 10 : 8; /* tqdm: tenths in ASCII (" 123456789#"), eighths in blocks */
  full = (int)((double)cells * units * (double)(n < total ? n : total) / (double)total);
#define TR__ADD(s, l) do { size_t l_ = (l); if (len + l_ < cap) { memcpy(buf + len, (s), l_); len += l_; } } while (0)
  TR__ADD(left, (size_t)nl);
  for (k = 0; k < cells; k++) {
    int part = full - units * k;
    if (part > units) part = units;
    if (part < 0) part = 0;
    if (ascii) { char c = part == units ? '#' : part == 0 ? ' ' : (char)('0' + part); TR__ADD(&c, 1); }
    else TR__ADD(blocks[part], strlen(blocks[part]));
  }
  TR__ADD(right, (size_t)nr);
#undef TR__ADD
  buf[len] = 0;
  return len;
}

TRAIN_API size_t tr_bar_format(char *buf, size_t cap, const char *desc, int64_t n, int64_t total, double elapsed,
                               const char *postfix, int width, int ascii) {
  return tr__bar_format(buf, cap, desc, n, 0, total, elapsed, postfix, width, ascii);
}

typedef struct tr__bar_line {
  char desc[32];
  int64_t n, total;
  int64_t drawn_n;           /* n when the line was last drawn (-1: not yet) */
  int64_t initial;           /* n when the line started (a resumed run's steps before it): not in the rate */
  int64_t next_look;         /* the batch at which to read the clock again (tqdm's miniters) */
  double start, last;
  int live;
} tr__bar_line;
typedef struct tr__bar {
  tr_run *run;          /* the registry's run: what the loop says (section THE RUN LAYER) */
  FILE *out;
  int tty, width, ascii;
  int size_fd;               /* terminal: where to measure the width when out itself cannot say (mpirun's rank
                                pseudo-terminal has no size: the launcher's terminal); -1: none */
  double refresh, line_every;
  tr__bar_line main, eval;   /* the training epoch's bar; the evaluation's (the line below on a terminal) */
  int eval_shown;            /* terminal: the evaluation line is on screen (drawn once its first redraw is due) */
  int drawn_w;               /* terminal: the columns of the line the cursor is on (0: none of ours) */
  int above_w;               /* terminal: the training bar's columns while the evaluation line shows below it */
  int epoch_open;            /* lines: the epoch's line is still to come (an evaluation now is part of it) */
  double last_draw;          /* terminal: when anything was last drawn */
  char loss[64], val[256];   /* the postfix: the last training loss, the last validation's metrics */
} tr__bar;

static void tr__bar_destroy(void *user) {
  tr__bar *b = (tr__bar *)user;
  if (b && b->run && b->run->tr__p->bar == b) { b->run->tr__p->bar = NULL; b->run->tr__p->above = NULL; }
#ifdef TR__POSIX
  if (b && b->size_fd >= 0) close(b->size_fd);
#endif
  free(b);
}

#ifdef TR__POSIX
static int tr__term_cols(int fd) {
#  ifdef TIOCGWINSZ
  struct winsize ws;
  if (fd >= 0 && ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
#  endif
  (void)fd;
  return 0;
}
#endif
/* Under a launcher (mpirun, mpiexec, srun) a rank's output may be a pseudo-terminal whatever the
   launcher's own output is (Open MPI gives every rank one): the user's terminal or file is where the
   launcher writes. Walks up the parent processes (Linux /proc) to the launcher and reads where its fd
   goes: 1, a terminal (its path in term, to measure); 0, a file or a pipe; -1, no launcher found or
   not Linux (then isatty decides). */
#ifdef TR__POSIX
static int tr__launcher_tty(int fd, char *term, size_t cap) {
#ifdef __linux__
  static const char *const launchers[] = { "mpirun", "mpiexec", "orterun", "prterun", "mpiexec.hydra", "srun", NULL };
  char buf[512], link[64];
  long pid, ppid;
  int depth, i;
  if (!getenv("OMPI_COMM_WORLD_SIZE") && !getenv("PMIX_RANK") && !getenv("PMI_RANK") && !getenv("SLURM_PROCID")) return -1;
  for (pid = (long)getppid(), depth = 0; pid > 1 && depth < 32; pid = ppid, depth++) {
    FILE *f;
    char *name, *end;
    size_t n;
    ssize_t k;
    snprintf(link, sizeof link, "/proc/%ld/stat", pid);
    if (!(f = fopen(link, "r"))) return -1;
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0; /* "pid (name) state ppid ...": the name may hold spaces and parentheses */
    if (!(name = strchr(buf, '(')) || !(end = strrchr(buf, ')')) || sscanf(end + 1, " %*c %ld", &ppid) != 1) return -1;
    *end = 0;
    for (i = 0; launchers[i] && strcmp(name + 1, launchers[i]); i++) {}
    if (!launchers[i]) continue; /* a shell, a daemon or proxy between (orted, hydra_pmi_proxy) */
    snprintf(link, sizeof link, "/proc/%ld/fd/%d", pid, fd == 2 ? 2 : 1);
    if ((k = readlink(link, term, cap - 1)) <= 0) return -1;
    term[k] = 0;
    return !strncmp(term, "/dev/pts/", 9) || !strncmp(term, "/dev/tty", 8) || !strcmp(term, "/dev/console");
  }
#endif
  (void)fd;
  (void)term;
  (void)cap;
  return -1;
}
#endif
/* The columns the line may take: the terminal's less one (tqdm), measured at every redraw (at most
   every refresh_seconds), so a resized terminal gets lines of its new width. */
static int tr__bar_cols(tr__bar *b) {
  const char *c;
  int n = 0;
#ifdef TR__POSIX
  n = tr__term_cols(fileno(b->out));
  if (n <= 0) n = tr__term_cols(b->size_fd);
#endif
  if (n <= 0) n = (c = getenv("COLUMNS")) != NULL ? atoi(c) : 0;
  if (n <= 1 || n > 100000) n = 80;
  return n - 1;
}
static size_t tr__utf8_width(const char *s) { size_t n = 0; for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80; return n; }
/* Cut s to at most cols characters (UTF-8: the bar's blocks take one column each): the whole line, not
   only the bar's cells, so a narrow terminal never wraps it (a wrapped line leaves a row behind at
   every carriage return). */
static void tr__utf8_cut(char *s, int cols) {
  int n = 0;
  for (; *s; s++)
    if (((unsigned char)*s & 0xC0) != 0x80 && n++ == cols) { *s = 0; return; }
}

/* Terminal: back to the start of the line the cursor is on, erased. When the terminal was narrowed below
   that line's width, a terminal that rewraps lines (tmux, most desktop ones) made it several rows, the
   cursor on the last: go up to the first, erasing each (row by row: erasing to the screen's end from
   the top row makes tmux push the screen into its history). */
static void tr__bar_home(tr__bar *b, int width) {
  int up = b->width <= 0 && width > 0 && b->drawn_w > width + 1 ? (b->drawn_w - 1) / (width + 1) : 0;
  fputs("\r\033[K", b->out);
  for (; up > 0; up--) fputs("\033[A\033[K", b->out);
  b->drawn_w = 0;
}
/* The evaluation line goes below the training bar, and back up: the training bar's rows erased too */
static void tr__bar_below(tr__bar *b) {
  fputc('\n', b->out);
  b->above_w = b->drawn_w;
  b->drawn_w = 0;
}
static void tr__bar_up(tr__bar *b) {
  int width = b->width > 0 ? b->width : tr__bar_cols(b);
  tr__bar_home(b, width);
  fputs("\033[A", b->out);
  b->drawn_w = b->above_w;
  tr__bar_home(b, width);
}
/* Draw a line: in place on a terminal (carriage return, the line, erase to its end), else a complete line. */
static void tr__bar_draw(tr__bar *b, tr__bar_line *l, double now) {
  char line[1024], post[400];
  int width = b->width > 0 ? b->width : b->tty ? tr__bar_cols(b) : 0;
  if (!l->live) return;
  snprintf(post, sizeof post, "%s%s%s", b->loss, b->loss[0] && b->val[0] ? ", " : "", b->val);
  tr__bar_format(line, sizeof line, l->desc, l->n, l->initial, l->total, now - l->start, post, width, b->ascii);
  if (width > 0) tr__utf8_cut(line, width);
  l->last = b->last_draw = now;
  l->drawn_n = l->n;
  if (!b->tty) { fprintf(b->out, "%s\n", line); fflush(b->out); return; }
  tr__bar_home(b, width);
  fputs(line, b->out);
  b->drawn_w = (int)tr__utf8_width(line);
  fflush(b->out);
}
static void tr__bar_start(tr__bar_line *l, const char *desc, int64_t n, int64_t total) {
  snprintf(l->desc, sizeof l->desc, "%s", desc);
  l->n = l->initial = n;
  l->total = total;
  l->start = l->last = tr__wall();
  l->drawn_n = -1;
  l->next_look = 0;
  l->live = 1;
}
/* A step loop (tr_run_desc.epochs = TR_NO) has one bar over the whole run: steps of max_steps. */
static int tr__bar_steps(const tr__bar *b) { return b->run && b->run->desc.epochs == TR_NO; }

static hk_signal tr__bar_epoch_start(hk_ctx *ctx, void *u) {
  tr__bar *b = (tr__bar *)u;
  char desc[32];
  if (ctx->rank != 0) return HK_CONTINUE;
  if (!b->tty && b->epoch_open && b->main.live && b->main.drawn_n != b->main.n) /* a loop without on_train_epoch_end */
    tr__bar_draw(b, &b->main, tr__wall());
  snprintf(desc, sizeof desc, "Epoch %lld", (long long)ctx->epoch);
  tr__bar_start(&b->main, desc, ctx->batch_idx, b->run ? b->run->train_batches : 0); /* a resumed epoch starts mid-way */
  b->epoch_open = 1;
  if (b->tty && b->main.start - b->last_draw >= b->refresh) tr__bar_draw(b, &b->main, b->main.start);
  return HK_CONTINUE;
}
static hk_signal tr__bar_batch_end(hk_ctx *ctx, void *u) {
  tr__bar *b = (tr__bar *)u;
  tr__bar_line *l = ctx->event == HK_ON_TRAIN_BATCH_END ? &b->main : &b->eval;
  double now;
  if (ctx->rank != 0) return HK_CONTINUE;
  if (!l->live && l == &b->main) { /* no on_train_epoch_start came: a step loop, or an epoch resumed mid-way */
    char desc[32];
    if (tr__bar_steps(b)) tr__bar_start(l, "Training", ctx->global_step, b->run->desc.max_steps);
    else {
      snprintf(desc, sizeof desc, "Epoch %lld", (long long)ctx->epoch);
      tr__bar_start(l, desc, ctx->batch_idx, b->run ? b->run->train_batches : 0);
      b->epoch_open = 1;
    }
  }
  if (!l->live) return HK_CONTINUE;
  l->n = l == &b->main && tr__bar_steps(b) ? ctx->global_step : ctx->batch_idx + 1;
  if (l->n < l->next_look && l->n != l->total) return HK_CONTINUE; /* not even the clock: a step is short */
  now = tr__wall();
  /* terminal: at most one redraw per refresh interval, the last batch's too (the final state is drawn at
     the end of training; a redraw at every epoch's end cost ~1% of a small model's step time). Lines:
     one every line_seconds within a long epoch or evaluation; the final one comes at its end. */
  if (b->tty ? now - b->last_draw >= b->refresh : now - l->last >= b->line_every && l->n != l->total) {
    if (b->tty && l == &b->eval && !b->eval_shown) { /* the evaluation line appears below the training bar */
      if (b->main.live) tr__bar_below(b);
      b->eval_shown = 1;
    }
    tr__bar_draw(b, l, now);
  }
  { /* look again after about a quarter of the interval, at the rate seen so far (tqdm's dynamic miniters) */
    double rate = now > l->start ? (double)(l->n - l->initial) / (now - l->start) : 0, ahead = rate * (b->tty ? b->refresh : b->line_every) / 4;
    l->next_look = l->n + (ahead >= 1 ? (ahead < 1e9 ? (int64_t)ahead : 1000000000) : 1);
  }
  return HK_CONTINUE;
}
static hk_signal tr__bar_epoch_end(hk_ctx *ctx, void *u) {
  tr__bar *b = (tr__bar *)u;
  double now;
  if (ctx->rank != 0 || !b->main.live) return HK_CONTINUE;
  b->epoch_open = 0;
  now = tr__wall(); /* the epoch's final state (with this epoch's validation): its one line in a pipe; on a
                       terminal when a redraw is due (the last epoch's is drawn at the end of training) */
  if (!b->tty || now - b->last_draw >= b->refresh) tr__bar_draw(b, &b->main, now);
  return HK_CONTINUE;
}
static hk_signal tr__bar_train_end(hk_ctx *ctx, void *u) {
  tr__bar *b = (tr__bar *)u;
  if (ctx->rank != 0) return HK_CONTINUE;
  if (b->tty && b->main.live) { tr__bar_draw(b, &b->main, tr__wall()); fputc('\n', b->out); fflush(b->out); b->drawn_w = 0; }
  else if (b->main.live && b->main.drawn_n != b->main.n) tr__bar_draw(b, &b->main, tr__wall()); /* lines: the final
                                   state (a step loop has no epoch end to print it; an epoch loop printed it there) */
  b->main.live = 0;
  b->epoch_open = 0;
  return HK_CONTINUE;
}
/* Evaluation: on a terminal its bar runs on the line below the training bar and is erased at its end.
   In lines, its one line at its end: for a standalone run, the sanity check, a step loop's validation;
   a validation inside an epoch has none, the epoch's line that follows carries its metrics. */
static hk_signal tr__bar_eval_start(hk_ctx *ctx, void *u) {
  tr__bar *b = (tr__bar *)u;
  const char *desc = ctx->stage == HK_STAGE_SANITY_CHECK ? "Sanity Checking" : ctx->event == HK_ON_TEST_START ? "Testing" : "Validation";
  if (ctx->rank != 0) return HK_CONTINUE;
  tr__bar_start(&b->eval, desc, 0, b->run ? b->run->eval_batches : 0);
  b->eval_shown = 0; /* terminal: shown at its first due redraw; a short evaluation never shows (no cost) */
  return HK_CONTINUE;
}
static hk_signal tr__bar_eval_end(hk_ctx *ctx, void *u) {
  tr__bar *b = (tr__bar *)u;
  if (ctx->rank != 0 || !b->eval.live) return HK_CONTINUE;
  if (!b->tty) {
    if (!(b->epoch_open && b->main.live && ctx->stage != HK_STAGE_SANITY_CHECK)) tr__bar_draw(b, &b->eval, tr__wall());
  } else if (!b->main.live && (ctx->event == HK_ON_TEST_END || ctx->stage != HK_STAGE_SANITY_CHECK)) {
    tr__bar_draw(b, &b->eval, tr__wall()); /* a standalone run's bar stays */
    fputc('\n', b->out);
    b->drawn_w = 0;
  } else if (b->eval_shown && b->main.live) { /* erase the line, go back up to the training bar */
    tr__bar_up(b);
    tr__bar_draw(b, &b->main, tr__wall());
  } else if (b->eval_shown) { fputs("\r\033[K", b->out); b->drawn_w = 0; } /* the sanity check's line goes */
  fflush(b->out);
  b->eval.live = 0;
  b->eval_shown = 0;
  return HK_CONTINUE;
}
static hk_signal tr__bar_on_log(hk_ctx *ctx, void *u) {
  tr__bar *b = (tr__bar *)u;
  const tr_log_record *r = tr_log_current(ctx);
  double v;
  int i;
  size_t len = 0;
  if (!r || ctx->rank != 0) return HK_CONTINUE;
  if (r->stage && !strcmp(r->stage, "train")) {
    if (tr_log_get(r, "train/loss", &v)) snprintf(b->loss, sizeof b->loss, "loss=%.4g", v);
    return HK_CONTINUE;
  }
  b->val[0] = 0;
  for (i = 0; i < r->n_metrics && len + 2 < sizeof b->val; i++) {
    int k = snprintf(b->val + len, sizeof b->val - len, "%s%s=%.4g", i ? ", " : "", r->metrics[i].name, r->metrics[i].value);
    if (k < 0) break;
    len += (size_t)k;
  }
  if (len >= sizeof b->val) b->val[sizeof b->val - 1] = 0;
  return HK_CONTINUE;
}
static hk_signal tr__bar_teardown(hk_ctx *ctx, void *u) { /* a failed run: leave the cursor on a fresh line */
  tr__bar *b = (tr__bar *)u;
  if (ctx->rank != 0) return HK_CONTINUE;
  if (b->tty && (b->main.live || b->eval.live)) { fputc('\n', b->out); fflush(b->out); b->drawn_w = 0; }
  b->main.live = b->eval.live = b->epoch_open = 0;
  return HK_CONTINUE;
}

/* Text above the bar (tr_print, callbacks' lines): on a terminal, while a bar is on screen, its lines
   are cleared, the text written, the bar redrawn below it (tqdm.write). Text for another stream (a
   callback's stderr) is handled so only when that stream is a terminal too. */
static void tr__bar_above(tr__bar *b, FILE *f, const char *text) {
  int live = b->tty && (b->main.live || b->eval.live);
  if (!f) f = b->out;
#ifdef TR__POSIX
  if (live && f != b->out) live = isatty(fileno(f));
#endif
  if (live) {
    if (b->eval_shown && b->main.live) tr__bar_up(b);
    else tr__bar_home(b, b->width > 0 ? b->width : tr__bar_cols(b));
    fflush(b->out);
  }
  fputs(text, f);
  fflush(f);
  if (!live) return;
  if (b->main.live) tr__bar_draw(b, &b->main, tr__wall());
  if (b->eval_shown && b->eval.live) {
    if (b->main.live) tr__bar_below(b);
    tr__bar_draw(b, &b->eval, tr__wall());
  }
  fflush(b->out);
}

static tr_err tr__bar_make(hk_registry *reg, const tr_progress_bar_desc *d, hk_handle *out, tr__why *w) {
  char unique[64];
  tr_run *run;
  tr__bar *b;
  hk_callback cb;
  hk_opts o;
  hk_err e;
  if (!d) return tr__bad(w, "progress_bar: desc is NULL");
  if (d->mode < TR_BAR_AUTO || d->mode > TR_BAR_LINES) return tr__bad(w, "progress_bar: mode %d is not valid (auto, tty or lines)", (int)d->mode);
  if (!(d->refresh_seconds >= 0) || !(d->line_seconds >= 0) || !hk_is_finite(d->refresh_seconds) || !hk_is_finite(d->line_seconds))
    return tr__bad(w, "progress_bar: refresh_seconds and line_seconds must be finite and >= 0");
  if (d->width < 0 || d->width > 100000) return tr__bad(w, "progress_bar: width must be between 0 and 100000 (0 = the terminal's), got %d", d->width);
  if ((run = tr_run_get(reg)) != NULL && run->tr__p->bar) /* two would draw every line twice */
    return tr__bad(w, "progress_bar: this registry has a progress bar already; one bar shows the run (remove the "
                   "other one, or give each its own registry)");
  if (!(b = (tr__bar *)calloc(1, sizeof *b))) return tr__bad(w, "progress_bar: out of memory"), TR_ERR_NOMEM;
  b->run = run;
  b->out = d->out ? d->out : stdout;
  b->size_fd = -1;
#ifdef TR__POSIX
  b->tty = d->mode == TR_BAR_TTY;
  if (d->mode == TR_BAR_AUTO && isatty(fileno(b->out))) { /* under mpirun: where the launcher's output goes */
    char term[256];
    int at = tr__launcher_tty(fileno(b->out), term, sizeof term);
    b->tty = at != 0;
    if (at == 1) b->size_fd = open(term, O_RDONLY | O_NOCTTY | O_NONBLOCK);
  }
#else
  b->tty = d->mode == TR_BAR_TTY;
#endif
  b->refresh = d->refresh_seconds > 0 ? d->refresh_seconds : 0.1;
  b->line_every = d->line_seconds > 0 ? d->line_seconds : 10;
  b->width = d->width;
  b->ascii = d->ascii;
  memset(&cb, 0, sizeof cb);
  cb.name = tr__unique_name(reg, "progress_bar", unique, sizeof unique);
  cb.user = b;
  cb.on_train_epoch_start = tr__bar_epoch_start;
  cb.on_train_batch_end = tr__bar_batch_end;
  cb.on_train_epoch_end = tr__bar_epoch_end;
  cb.on_train_end = tr__bar_train_end;
  cb.on_validation_start = tr__bar_eval_start;
  cb.on_validation_batch_end = tr__bar_batch_end;
  cb.on_validation_end = tr__bar_eval_end;
  cb.on_test_start = tr__bar_eval_start;
  cb.on_test_batch_end = tr__bar_batch_end;
  cb.on_test_end = tr__bar_eval_end;
  cb.on_log = tr__bar_on_log;
  cb.teardown = tr__bar_teardown;
  cb.destroy = tr__bar_destroy;
  memset(&o, 0, sizeof o);
  o.monitor = 1;
  o.order = 1000; /* after the hooks that change the record, and after other callbacks' epoch ends */
  e = hk_add_callback(reg, &cb, &o, out);
  if (e) {
    tr__bad(w, "%s", hk_last_error(reg));
    tr__bar_destroy(b);
    return e == HK_ERR_NOMEM ? TR_ERR_NOMEM : TR_ERR_INVALID;
  }
  if (run) { run->tr__p->bar = b; run->tr__p->above = tr__bar_above; } /* tr_print and callbacks' lines: above it */
  return TR_OK;
}
TRAIN_API tr_err tr_progress_bar(hk_registry *reg, const tr_progress_bar_desc *d, hk_handle *out) {
  tr__why w;
  if (!reg) return TR_ERR_INVALID;
  return tr__cb_result(reg, tr__bar_make(reg, d, out, &w), &w);
}
#endif /* TR__ON_PROGRESS_BAR */

#endif /* TRAIN_NO_LOGGERS */

/* ---- the factories: spec strings -> the constructors above --------------------------------------
   Each factory's parameter table and its copy of a spec's arguments into the desc are generated from
   the callback's parameter list (TR_<NAME>_PARAMS; the kinds are explained at TR__FIELD). The entry
       X(INT_ZERO, int, patience, "3", NULL, "checks without improvement before stopping")
   is, in the desc (TR__FIELD), in the spec table (TR__PARAM) and in the copy (TR__COPY):
       int patience;
       { "patience", HK_PARAM_INT, "3", NULL, "checks without improvement before stopping" },
       if (hk_arg_given(a, "patience")) { ...tr__int_arg: 0 -> TR_ZERO...; d->patience = (int)v; }
   TR__SPEC_OF(p, desc, LIST) defines both for one callback: tr__<p>_params[] and tr__<p>_args(),
   which copies each parameter the spec gave into a zero desc. A parameter not given keeps its zero,
   the default its default text names (test_spec_desc_agree in tests/test_callbacks_b.c checks that
   they agree for every factory). What a list cannot say is a few lines in the factory after the copy.
   Each factory's user is the trainer when tr_init registered it (NULL from tr_add_factories). */
#define TR__NPARAMS(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define TR__PARAM(kind, type, name, def, choices, doc) TR__PARAM_##kind(type, name, def, choices, doc)
#define TR__PARAM_INT(type, name, def, choices, doc)       { #name, HK_PARAM_INT, def, choices, doc },
#define TR__PARAM_INT_ZERO(type, name, def, choices, doc)  { #name, HK_PARAM_INT, def, choices, doc },
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
/* A factory that needs nothing but its list: the spec table, the copy, and the factory itself. */
#define TR__FACTORY_OF(p, desc_type, LIST) \
  TR__SPEC_OF(p, desc_type, LIST) \
  static hk_err tr__##p##_factory(hk_registry *reg, const hk_args *a, void *user) { \
    desc_type d; \
    tr__why w; \
    tr_err e = tr__##p##_args(a, &d, &w); \
    (void)user; \
    return tr__factory_result(reg, e ? e : tr__##p##_make(reg, &d, NULL, &w), &w); \
  }
#define TR__ARGS_OF(p, desc_type, LIST) \
  static tr_err tr__##p##_args(const hk_args *a, desc_type *d, tr__why *w) { \
    int64_t v = 0; \
    memset(d, 0, sizeof *d); \
    LIST(TR__COPY) \
    (void)v; \
    (void)w; \
    return TR_OK; \
  }

/* An integer for an int or int64_t field. In an int, and for INT_ZERO, it must lie in -1e9..1e9;
   INT_ZERO's 0 becomes TR_ZERO (the field's own 0 means the default). */
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

#if TR__ON_EARLY_STOPPING
TR__SPEC_OF(es, tr_early_stopping_desc, TR_EARLY_STOPPING_PARAMS)
static hk_err tr__es_factory(hk_registry *reg, const hk_args *a, void *user) {
  tr_early_stopping_desc d;
  tr__why w;
  tr_err e = tr__es_args(a, &d, &w);
  (void)user;
  d.has_stopping_threshold = hk_arg_given(a, "stopping_threshold");
  d.has_divergence_threshold = hk_arg_given(a, "divergence_threshold");
  return tr__factory_result(reg, e ? e : tr__es_make(reg, &d, NULL, &w), &w);
}
#endif

#if TR__ON_MODEL_CHECKPOINT
/* every_n_epochs: not given, the desc's 0 (1 while no other trigger is given, as Lightning) */
TR__FACTORY_OF(mc, tr_model_checkpoint_desc, TR_MODEL_CHECKPOINT_PARAMS)
#endif

#if TR__ON_TIMER
TR__FACTORY_OF(timer, tr_timer_desc, TR_TIMER_PARAMS)
#endif

#if TR__ON_LR_MONITOR
TR__FACTORY_OF(lrm, tr_lr_monitor_desc, TR_LR_MONITOR_PARAMS)
#endif

#if TR__ON_GRADIENT_MONITOR
TR__SPEC_OF(gm, tr_gradient_monitor_desc, TR_GRADIENT_MONITOR_PARAMS)
static hk_err tr__gm_factory(hk_registry *reg, const hk_args *a, void *user) {
  tr_gradient_monitor_desc d;
  tr__why w;
  tr_err e = tr__gm_args(a, &d, &w);
  (void)user;
  if (tr__given_zero(a, "exploding_threshold")) return hk_set_error(reg, HK_ERR_INVALID, "gradient_monitor: exploding_threshold=0 would flag every step; give a positive limit, or a negative one for never");
  if (tr__given_zero(a, "vanishing_threshold")) d.vanishing_threshold = -1; /* flags nothing */
  return tr__factory_result(reg, e ? e : tr__gm_make(reg, &d, NULL, &w), &w);
}
#endif

#if TR__ON_NAN_GUARD
TR__FACTORY_OF(ng, tr_nan_guard_desc, TR_NAN_GUARD_PARAMS)
#endif

#if TR__ON_EMA
TR__SPEC_OF(ema, tr_ema_desc, TR_EMA_PARAMS)
static hk_err tr__ema_factory(hk_registry *reg, const hk_args *a, void *user) {
  tr_ema_desc d;
  tr__why w;
  tr_err e = tr__ema_args(a, &d, &w);
  (void)user;
  if (tr__given_zero(a, "decay")) return hk_set_error(reg, HK_ERR_INVALID, "ema: decay must be in (0, 1), got 0");
  if (tr__given_zero(a, "every_n_steps")) return hk_set_error(reg, HK_ERR_INVALID, "ema: every_n_steps must be >= 1, got 0");
  return tr__factory_result(reg, e ? e : tr__ema_make(reg, &d, NULL, &w), &w);
}
#endif

#if TR__ON_ON_EXCEPTION_CHECKPOINT
TR__FACTORY_OF(oec, tr_on_exception_checkpoint_desc, TR_ON_EXCEPTION_CHECKPOINT_PARAMS)
#endif

#if TR__ON_SPIKE_DETECTION
TR__SPEC_OF(sd, tr_spike_detection_desc, TR_SPIKE_DETECTION_PARAMS)
static hk_err tr__sd_factory(hk_registry *reg, const hk_args *a, void *user) {
  tr_spike_detection_desc d;
  tr__why w;
  tr_err e = tr__sd_args(a, &d, &w);
  (void)user;
  if (tr__given_zero(a, "window")) return hk_set_error(reg, HK_ERR_INVALID, "spike_detection: window must be in 2..10000, got 0");
  if (tr__given_zero(a, "threshold")) return hk_set_error(reg, HK_ERR_INVALID, "spike_detection: threshold must be finite and > 0, got 0");
  if (tr__given_zero(a, "every_n_steps")) return hk_set_error(reg, HK_ERR_INVALID, "spike_detection: every_n_steps must be >= 1, got 0");
  return tr__factory_result(reg, e ? e : tr__sd_make(reg, &d, NULL, &w), &w);
}
#endif

#if TR__ON_LR_FINDER /* lr_finder re-runs the trainer's steps (its implementation is the trainer's) */
static tr_err tr__lrf_make(hk_registry *reg, const tr_lr_finder_desc *d, hk_handle *out, tr__why *w);
TR__SPEC_OF(lrf, tr_lr_finder_desc, TR_LR_FINDER_PARAMS)
static hk_err tr__lrf_factory(hk_registry *reg, const hk_args *a, void *user) {
  tr_lr_finder_desc d;
  tr__why w;
  tr_err e = tr__lrf_args(a, &d, &w);
  (void)user;
  if (tr__given_zero(a, "min_lr") || tr__given_zero(a, "max_lr"))
    return hk_set_error(reg, HK_ERR_INVALID, "lr_finder: need 0 < min_lr < max_lr (got min_lr=%g, max_lr=%g)", hk_arg_double(a, "min_lr"), hk_arg_double(a, "max_lr"));
  if (tr__given_zero(a, "num_training_steps")) return hk_set_error(reg, HK_ERR_INVALID, "lr_finder: num_training_steps must be in 2..1000000, got 0");
  if (tr__given_zero(a, "early_stop_threshold")) return hk_set_error(reg, HK_ERR_INVALID, "lr_finder: early_stop_threshold must be > 1 (negative: never), got 0");
  return tr__factory_result(reg, e ? e : tr__lrf_make(reg, &d, NULL, &w), &w);
}
#endif

#if TR__ON_MODEL_SUMMARY
TR__FACTORY_OF(ms, tr_model_summary_desc, TR_MODEL_SUMMARY_PARAMS)
#endif

#if TR__ON_ACCUMULATION_SCHEDULER
TR__FACTORY_OF(as, tr_accumulation_scheduler_desc, TR_ACCUMULATION_SCHEDULER_PARAMS)
#endif

#if TR__ON_PROFILER
TR__SPEC_OF(prof, tr_profiler_desc, TR_PROFILER_PARAMS)
static hk_err tr__prof_factory(hk_registry *reg, const hk_args *a, void *user) {
  tr_profiler_desc d;
  tr__why w;
  tr_err e = tr__prof_args(a, &d, &w);
  (void)user;
  if (tr__given_zero(a, "slow_fraction"))
    return hk_set_error(reg, HK_ERR_INVALID, "profiler: slow_fraction=0 would call every hook slow; give a fraction > 0 (e.g. 0.5), or a negative one for never");
  return tr__factory_result(reg, e ? e : tr__prof_make(reg, &d, NULL, &w), &w);
}
#endif

#if TR__ON_THROUGHPUT_MONITOR
TR__SPEC_OF(tp, tr_throughput_monitor_desc, TR_THROUGHPUT_MONITOR_PARAMS)
static hk_err tr__tp_factory(hk_registry *reg, const hk_args *a, void *user) {
  tr_throughput_monitor_desc d;
  tr__why w;
  tr_err e = tr__tp_args(a, &d, &w);
  (void)user;
  if (tr__given_zero(a, "window")) return hk_set_error(reg, HK_ERR_INVALID, "throughput_monitor: window must be in 2..1000000 steps, got 0");
  return tr__factory_result(reg, e ? e : tr__tp_make(reg, &d, NULL, &w), &w);
}
#endif

#if TR__ON_FILE_LOGGERS
TR__ARGS_OF(logger, tr_logger_desc, TR_LOGGER_PARAMS)
TR__ARGS_OF(plot, tr_plot_desc, TR_PLOT_PARAMS)
static hk_err tr__log_factory(hk_registry *reg, const hk_args *a, void *user, tr__log_kind kind) {
  tr_plot_desc pd;
  tr__why w;
  tr_err e = tr__plot_args(a, &pd, &w); /* csv, jsonl, tensorboard: no plot keys, a zero plot desc */
  (void)user;
  if (!e) e = tr__logger_args(a, &pd.dir, &w);
  if (!e && pd.dir.flush_every < 0)
    return hk_set_error(reg, HK_ERR_INVALID, "%s: flush_every must be between 0 and 1e9 (0: once a second), got %d", a->factory, pd.dir.flush_every);
  return tr__factory_result(reg, e ? e : tr__logger_make(reg, kind, &pd.dir, kind == TR__LOG_PLOT ? &pd : NULL, NULL, &w), &w);
}
/* csv, jsonl and tensorboard take the logger's parameters; plot takes them and its own */
#define TR__LOG_FACTORY_OF(p, kind, LIST) \
  static const hk_param tr__##p##_params[] = { LIST(TR__PARAM) }; \
  static hk_err tr__##p##_factory(hk_registry *reg, const hk_args *a, void *user) { return tr__log_factory(reg, a, user, kind); }
#if TR__ON_CSV
TR__LOG_FACTORY_OF(csv, TR__LOG_CSV, TR_LOGGER_PARAMS)
#endif
#if TR__ON_JSONL
TR__LOG_FACTORY_OF(jsonl, TR__LOG_JSONL, TR_LOGGER_PARAMS)
#endif
#if TR__ON_TENSORBOARD
TR__LOG_FACTORY_OF(tb, TR__LOG_TB, TR_LOGGER_PARAMS)
#endif
#if TR__ON_PLOT
#  define TR__LOGGER_AND_PLOT_PARAMS(X) TR_LOGGER_PARAMS(X) TR_PLOT_PARAMS(X)
TR__LOG_FACTORY_OF(plot, TR__LOG_PLOT, TR__LOGGER_AND_PLOT_PARAMS)
#endif
#endif /* TR__ON_FILE_LOGGERS */

#if TR__ON_PROGRESS_BAR
TR__SPEC_OF(bar, tr_progress_bar_desc, TR_PROGRESS_BAR_PARAMS)
static hk_err tr__bar_factory(hk_registry *reg, const hk_args *a, void *user) {
  tr_progress_bar_desc d;
  tr__why w;
  tr_err e = tr__bar_args(a, &d, &w);
  (void)user;
  d.out = hk_arg_int(a, "stream") == 1 ? stderr : stdout; /* stdout|stderr */
  return tr__factory_result(reg, e ? e : tr__bar_make(reg, &d, NULL, &w), &w);
}
#endif

/* Every standard factory (TR__BATTERIES); names already registered stay as they are (a registry
   handed to two trainers, or given the factories before tr_init). A battery left out of the build
   is registered without a constructor (hooks.h then refuses the name with this reason). */
#define TR__IF_1(on, off) on
#define TR__IF_0(on, off) off
#define TR__IF(c, on, off) TR__IF_(c, on, off)
#define TR__IF_(c, on, off) TR__IF_##c(on, off)
TRAIN_API hk_err tr_add_factories(hk_registry *reg) {
  hk_err e = HK_OK;
  if (!reg) return HK_ERR_INVALID;
#define TR__X(name, NAME, p, doc) \
  if (!e) { \
    e = TR__IF(TR__ON_##NAME, hk_factory_add(reg, #name, tr__##p##_params, TR__NPARAMS(tr__##p##_params), tr__##p##_factory, NULL, doc), \
               hk_factory_add(reg, #name, NULL, 0, NULL, NULL, "train.h's implementation was compiled without it: with TRAIN_NO_" \
                              #NAME ", its group's TRAIN_NO_CALLBACKS or TRAIN_NO_LOGGERS (lr_finder: TRAIN_NO_TRAINER), or " \
                              "TRAIN_ONLY_SPECIFIC_BATTERIES without TRAIN_ENABLE_" #NAME)); \
    if (e == HK_ERR_DUPLICATE) e = HK_OK; \
  }
  TR__BATTERIES(TR__X)
#undef TR__X
  return e;
}

#ifndef TRAIN_NO_SWEEP
/* =================================================================================================
   SWEEPS (implementation)
   Nothing here runs unless the program calls tr_sweep: a job's registry gets one extra on_log hook
   (its final metrics), which runs only where a record is sent.
   ================================================================================================= */
typedef struct tr__sweep_key {
  const char *key;               /* the override's key (in the argument's copy) */
  const tr_sweep_field *field;   /* the program's field, or NULL: a spec parameter */
  char factory[64];              /* a spec parameter: factory.param */
  const char *param;
  char **vals;                   /* the values (in the argument's copy) */
  int n, cur;
} tr__sweep_key;
typedef union tr__sweep_old { int i; int64_t l; double d; float f; const char *s; } tr__sweep_old;
typedef struct tr__sweep_done { /* what the summary needs of a job */
  int status;                    /* 0 ok, 1 failed, 2 skipped */
  char *error;
  tr_log_record final;
} tr__sweep_done;
typedef struct tr__sweep_priv { tr_log_record logged, set; } tr__sweep_priv;

static int tr__sweep_word_char(char c) { return c && c != ' ' && c != '\t' && c != '\n' && c != '\r' && !strchr(",;()=\"'", c); }
static int tr__sweep_ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
}
static int tr__sweep_digits(const char *t) { /* [+-]digits and nothing else */
  if (*t == '+' || *t == '-') t++;
  if (!(*t >= '0' && *t <= '9')) return 0;
  while (*t >= '0' && *t <= '9') t++;
  return *t == 0;
}
/* Text -> the field's type; out may be NULL (a check). 0, or -1 when the text is not of the type. */
static int tr__sweep_parse(tr_sweep_type type, const char *text, void *out) {
  char *end;
  long long l;
  double d;
  errno = 0;
  switch (type) {
  case TR_SWEEP_INT: case TR_SWEEP_INT64:
    if (!tr__sweep_digits(text)) return -1;
    l = strtoll(text, NULL, 10);
    if (errno == ERANGE || (type == TR_SWEEP_INT && (l < INT_MIN || l > INT_MAX))) return -1;
    if (out && type == TR_SWEEP_INT) *(int *)out = (int)l;
    if (out && type == TR_SWEEP_INT64) *(int64_t *)out = (int64_t)l;
    return 0;
  case TR_SWEEP_DOUBLE: case TR_SWEEP_FLOAT:
    if (!text[0] || !tr__sweep_word_char(text[0])) return -1;
    d = strtod(text, &end);
    if (*end || !hk_is_finite(d) || (type == TR_SWEEP_FLOAT && (d > 3.4028234663852886e38 || d < -3.4028234663852886e38)))
      return -1;
    if (out && type == TR_SWEEP_DOUBLE) *(double *)out = d;
    if (out && type == TR_SWEEP_FLOAT) *(float *)out = (float)d;
    return 0;
  case TR_SWEEP_BOOL: {
    int v;
    if (!strcmp(text, "true") || !strcmp(text, "yes") || !strcmp(text, "on") || !strcmp(text, "1")) v = 1;
    else if (!strcmp(text, "false") || !strcmp(text, "no") || !strcmp(text, "off") || !strcmp(text, "0")) v = 0;
    else return -1;
    if (out) *(int *)out = v;
    return 0;
  }
  case TR_SWEEP_STRING:
    if (out) *(const char **)out = text;
    return 0;
  default:
    return -1;
  }
}
static const char *tr__sweep_type_doc(tr_sweep_type t) {
  static const char *const docs[] = {
#define TR__X(sym, doc) doc,
    TR_SWEEP_TYPES(TR__X)
#undef TR__X
  };
  return (int)t >= 0 && t < TR_SWEEP_TYPE_COUNT ? docs[t] : "?";
}
static void tr__sweep_keep(const tr_sweep_field *f, tr__sweep_old *o, int restore) {
  void *p = f->ptr, *q = NULL;
  size_t n = 0;
  switch (f->type) {
  case TR_SWEEP_INT: case TR_SWEEP_BOOL: q = &o->i; n = sizeof o->i; break;
  case TR_SWEEP_INT64: q = &o->l; n = sizeof o->l; break;
  case TR_SWEEP_DOUBLE: q = &o->d; n = sizeof o->d; break;
  case TR_SWEEP_FLOAT: q = &o->f; n = sizeof o->f; break;
  case TR_SWEEP_STRING: q = (void *)&o->s; n = sizeof o->s; break;
  default: return;
  }
  if (restore) memcpy(p, q, n);
  else memcpy(q, p, n);
}

/* ---- spec strings: set factory(param=value) in every item of that factory ---------------------- */
static const char *tr__sweep_skip_quoted(const char *p) {
  char q = *p++;
  while (*p && *p != q) p += (*p == '\\' && p[1]) ? 2 : 1;
  return *p ? p + 1 : p;
}
static void tr__sweep_put_value(hk_bytes *b, const char *v) {
  const char *p;
  int bare = v[0] != 0;
  for (p = v; *p && bare; p++) bare = tr__sweep_word_char(*p);
  if (bare) { tr__put_s(b, v); return; }
  hk_bytes_put(b, "\"", 1);
  for (p = v; *p; p++) {
    if (*p == '"' || *p == '\\') hk_bytes_put(b, "\\", 1);
    if (*p == '\n') tr__put_s(b, "\\n");
    else if (*p == '\t') tr__put_s(b, "\\t");
    else hk_bytes_put(b, p, 1);
  }
  hk_bytes_put(b, "\"", 1);
}
/* A new string (or NULL out of memory); *found counts the items of factory. The spec's other bytes are
   copied as they are; a malformed spec is left for hk_spec_check to explain. */
static char *tr__sweep_spec_set(const char *spec, const char *factory, const char *param, const char *value, int *found) {
  hk_bytes b;
  const char *p = spec;
  size_t fl = strlen(factory), pl = strlen(param);
  memset(&b, 0, sizeof b);
  *found = 0;
  while (*p) {
    const char *name = p, *after, *q, *close;
    int target;
    if (*p == '"' || *p == '\'') { q = tr__sweep_skip_quoted(p); hk_bytes_put(&b, p, (size_t)(q - p)); p = q; continue; }
    if (!tr__sweep_ident_char(*p)) { hk_bytes_put(&b, p++, 1); continue; }
    while (tr__sweep_ident_char(*p)) p++;
    target = (size_t)(p - name) == fl && !strncmp(name, factory, fl);
    hk_bytes_put(&b, name, (size_t)(p - name));
    for (after = p; *after == ' ' || *after == '\t' || *after == '\n' || *after == '\r'; after++) {}
    close = NULL;
    if (*after == '(') { /* its arguments: to the matching ')' (quoted strings skipped) */
      for (q = after + 1; *q && *q != ')';) q = (*q == '"' || *q == '\'') ? tr__sweep_skip_quoted(q) : q + 1;
      if (*q == ')') close = q;
    }
    if (!target) {
      if (close) { hk_bytes_put(&b, p, (size_t)(close + 1 - p)); p = close + 1; }
      continue;
    }
    ++*found;
    hk_bytes_put(&b, "(", 1);
    if (close) { /* each argument: replaced when it is param=..., else copied */
      const char *a = after + 1;
      int n = 0, set = 0;
      while (a < close) {
        const char *e = a, *k;
        while (e < close && *e != ',') e = (*e == '"' || *e == '\'') ? tr__sweep_skip_quoted(e) : e + 1;
        if (e > close) e = close;
        for (k = a; k < e && (*k == ' ' || *k == '\t' || *k == '\n' || *k == '\r'); k++) {}
        if (k < e) {
          const char *eq = k + pl;
          while (eq < e && (*eq == ' ' || *eq == '\t')) eq++;
          if (n++) tr__put_s(&b, ", ");
          if ((size_t)(e - k) > pl && !strncmp(k, param, pl) && !tr__sweep_ident_char(k[pl]) && *eq == '=') {
            tr__putf(&b, "%s=", param);
            tr__sweep_put_value(&b, value);
            set = 1;
          } else {
            const char *t = e;
            while (t > k && (t[-1] == ' ' || t[-1] == '\t' || t[-1] == '\n' || t[-1] == '\r')) t--;
            hk_bytes_put(&b, k, (size_t)(t - k));
          }
        }
        a = e < close ? e + 1 : close;
      }
      if (!set) { if (n) tr__put_s(&b, ", "); tr__putf(&b, "%s=", param); tr__sweep_put_value(&b, value); }
      p = close + 1;
    } else {
      tr__putf(&b, "%s=", param);
      tr__sweep_put_value(&b, value);
    }
    hk_bytes_put(&b, ")", 1);
  }
  hk_bytes_put(&b, "", 1);
  if (b.failed) { hk_bytes_free(&b); return NULL; }
  return (char *)b.data;
}

/* ---- the job's final metrics: the last value of every metric its loggers were sent ---------------- */
static hk_signal tr__sweep_capture(hk_ctx *ctx, void *user) {
  tr__sweep_priv *p = (tr__sweep_priv *)user;
  const tr_log_record *r = tr_log_current(ctx);
  int i;
  for (i = 0; r && i < r->n_metrics; i++) tr_log_set(&p->logged, r->metrics[i].name, r->metrics[i].value);
  return HK_CONTINUE;
}
TRAIN_API tr_err tr_sweep_metric(tr_sweep_job *job, const char *name, double value) {
  if (!job || !job->tr__p) return TR_ERR_INVALID;
  return tr_log_set(&((tr__sweep_priv *)job->tr__p)->set, name, value);
}
TRAIN_API tr_sweep_job *tr_sweep_current(hk_ctx *ctx) {
  if (!ctx || (ctx->event != HK_ON_JOB_START && ctx->event != HK_ON_JOB_END)) return NULL;
  return (tr_sweep_job *)ctx->outputs;
}

static void tr__sweep_say(const tr_sweep_desc *d, const char *fmt, ...) TR__PRINTF(2, 3);
static void tr__sweep_say(const tr_sweep_desc *d, const char *fmt, ...) {
  char line[1200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  fprintf(d->log ? d->log : stderr, "sweep: %s\n", line);
  fflush(d->log ? d->log : stderr);
}

/* The values of job j: the last key varies fastest (Hydra's basic sweeper, itertools.product). */
static void tr__sweep_pick(tr__sweep_key *k, int n, long j) {
  int i;
  for (i = n - 1; i >= 0; i--) { k[i].cur = (int)(j % k[i].n); j /= k[i].n; }
}

/* summary.csv (and summary.svg): one row per job */
static int tr__sweep_metric_cmp(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }
static tr_err tr__sweep_summary(const tr_sweep_desc *d, const char *dir, tr__sweep_key *keys, int n_keys,
                                tr__sweep_done *done, long count, char *why, size_t why_len) {
  static const char *const status[] = { "ok", "failed", "skipped" };
  const char **names = NULL;
  int n_names = 0, cap = 0, i, k, e;
  long j;
  hk_bytes b;
  char *path, num[40];
  tr_err err = TR_OK;
  for (j = 0; j < count; j++) /* every final metric's name, once */
    for (i = 0; i < done[j].final.n_metrics; i++) {
      const char *nm = done[j].final.metrics[i].name;
      for (k = 0; k < n_names && strcmp(names[k], nm); k++) {}
      if (k < n_names) continue;
      if (n_names == cap) {
        const char **g = (const char **)realloc((void *)names, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *g);
        if (!g) { free((void *)names); snprintf(why, why_len, "out of memory"); return TR_ERR_NOMEM; }
        names = g;
      }
      names[n_names++] = nm;
    }
  if (n_names) qsort((void *)names, (size_t)n_names, sizeof *names, tr__sweep_metric_cmp);
  memset(&b, 0, sizeof b);
  tr__put_s(&b, "job,status");
  for (k = 0; k < n_keys; k++) { hk_bytes_put(&b, ",", 1); tr__csv_cell(&b, keys[k].key); }
  for (i = 0; i < n_names; i++) { hk_bytes_put(&b, ",", 1); tr__csv_cell(&b, names[i]); }
  tr__put_s(&b, ",error\n");
  for (j = 0; j < count; j++) {
    tr__sweep_pick(keys, n_keys, j);
    tr__putf(&b, "%ld,%s", j, status[done[j].status]);
    for (k = 0; k < n_keys; k++) { hk_bytes_put(&b, ",", 1); tr__csv_cell(&b, keys[k].vals[keys[k].cur]); }
    for (i = 0; i < n_names; i++) {
      double v;
      hk_bytes_put(&b, ",", 1);
      if (tr_log_get(&done[j].final, names[i], &v)) { tr__num(num, sizeof num, v); tr__put_s(&b, num); }
    }
    hk_bytes_put(&b, ",", 1);
    if (done[j].error) tr__csv_cell(&b, done[j].error);
    hk_bytes_put(&b, "\n", 1);
  }
  free((void *)names);
  path = tr__join(dir, "summary.csv");
  if (b.failed || !path) { snprintf(why, why_len, "out of memory"); err = TR_ERR_NOMEM; }
  else if ((e = tr__write_whole(path, b.data, b.len, 0, NULL, why, why_len)) != 0) err = TR_ERR_IO;
  hk_bytes_free(&b);
#if TR__ON_PLOT
  if (!err) {
    char *svg = tr__join(dir, "summary.svg");
    if (!svg) { snprintf(why, why_len, "out of memory"); err = TR_ERR_NOMEM; }
    else err = tr_plot_csv(path, svg, d->metrics, why, why_len);
    free(svg);
  }
#else
  (void)d;
#endif
  free(path);
  return err;
}

static void tr__sweep_job_free(tr__sweep_done *done, long count) {
  long j;
  for (j = 0; done && j < count; j++) { free(done[j].error); tr_log_record_free(&done[j].final); }
  free(done);
}

/* The job's hyperparameters (tr_run_hparam*, typed): every field's value, every spec override. */
static tr_err tr__sweep_hparams(hk_registry *reg, const tr_sweep_desc *d, const tr__sweep_key *keys, int n_keys) {
  tr_err e = TR_OK;
  int i;
  for (i = 0; i < d->n_fields && !e; i++) {
    const tr_sweep_field *f = &d->fields[i];
    switch (f->type) {
    case TR_SWEEP_INT: e = tr_run_hparam_num(reg, f->name, (double)*(const int *)f->ptr); break;
    case TR_SWEEP_INT64: e = tr_run_hparam_num(reg, f->name, (double)*(const int64_t *)f->ptr); break;
    case TR_SWEEP_DOUBLE: e = tr_run_hparam_num(reg, f->name, *(const double *)f->ptr); break;
    case TR_SWEEP_FLOAT: e = tr_run_hparam_num(reg, f->name, (double)*(const float *)f->ptr); break;
    case TR_SWEEP_BOOL: e = tr_run_hparam_bool(reg, f->name, *(const int *)f->ptr); break;
    default: e = tr_run_hparam(reg, f->name, *(const char *const *)f->ptr ? *(const char *const *)f->ptr : ""); break;
    }
  }
  for (i = 0; i < n_keys && !e; i++)
    if (!keys[i].field) e = tr_run_hparam(reg, keys[i].key, keys[i].vals[keys[i].cur]);
  return e;
}

TRAIN_API tr_err tr_sweep(const tr_sweep_desc *d, int argc, char **argv, tr_sweep_result *res) {
  tr_sweep_result scratch;
  tr__sweep_key *keys = NULL;
  tr__sweep_old *old = NULL;
  tr__sweep_done *done = NULL;
  char **copies = NULL, *sweep_dir = NULL, *msg;
  hk_registry *check = NULL;
  hk_ctx sctx;
  int n_keys = 0, multirun, i, k, stopped = 0;
  long count = 1, j;
  tr_err first = TR_OK, err = TR_OK;
  size_t cap;
  if (!res) res = &scratch;
  memset(res, 0, sizeof *res);
  memset(&sctx, 0, sizeof sctx);
  msg = res->error;
  cap = sizeof res->error;
  if (!d || !d->job) { tr__msg(msg, cap, "tr_sweep: %s", d ? "desc.job (the function that runs a job) is NULL" : "the desc is NULL"); return TR_ERR_INVALID; }
  if (argc < 0 || (argc > 0 && !argv) || d->n_fields < 0 || (d->n_fields > 0 && !d->fields)) {
    tr__msg(msg, cap, "tr_sweep: argc/argv or fields/n_fields do not match (argc %d, n_fields %d)", argc, d->n_fields);
    return TR_ERR_INVALID;
  }
  for (i = 0; i < d->n_fields; i++)
    if (!d->fields[i].name || !d->fields[i].name[0] || !d->fields[i].ptr || (int)d->fields[i].type < 0 || d->fields[i].type >= TR_SWEEP_TYPE_COUNT) {
      tr__msg(msg, cap, "tr_sweep: field %d needs a name, a pointer and a type (TR_SWEEP_INT .. TR_SWEEP_STRING)", i);
      return TR_ERR_INVALID;
    }
  multirun = d->multirun;
  keys = (tr__sweep_key *)calloc((size_t)argc + 1, sizeof *keys);
  copies = (char **)calloc((size_t)argc + 1, sizeof *copies);
  old = (tr__sweep_old *)calloc((size_t)d->n_fields + 1, sizeof *old);
  if (!keys || !copies || !old) { tr__msg(msg, cap, "tr_sweep: out of memory"); err = TR_ERR_NOMEM; goto out; }
  check = hk_create(NULL);
  if (!check || tr_run_setup(check, NULL) || (d->add_factories && d->add_factories(check) != HK_OK)) {
    tr__msg(msg, cap, "tr_sweep: %s", check ? hk_last_error(check) : "out of memory");
    err = check ? TR_ERR_INVALID : TR_ERR_NOMEM;
    goto out;
  }
  if (d->spec && d->spec[0] && hk_spec_check(check, d->spec)) {
    tr__msg(msg, cap, "tr_sweep: the spec: %s", hk_last_error(check));
    err = TR_ERR_INVALID;
    goto out;
  }

  /* ---- every override checked before anything runs ---- */
  for (i = 0; i < argc; i++) {
    tr__sweep_key *kk = &keys[n_keys];
    char *eq, *p;
    const char *a = argv[i] ? argv[i] : "", *at = strchr(a, '=');
    if (!strcmp(a, "-m") || !strcmp(a, "--multirun")) { multirun = 1; continue; }
    if (!at || at == a) {
      tr__msg(msg, cap, "tr_sweep: argument '%s' is not an override: expected key=value or key=v1,v2,... (or -m)", a);
      err = TR_ERR_INVALID;
      goto out;
    }
    if (!(copies[i] = tr__strdup(a))) { tr__msg(msg, cap, "tr_sweep: out of memory"); err = TR_ERR_NOMEM; goto out; }
    eq = copies[i] + (at - a);
    *eq = 0;
    kk->key = copies[i];
    for (k = 0; k < n_keys; k++)
      if (!strcmp(keys[k].key, kk->key)) {
        tr__msg(msg, cap, "tr_sweep: key '%s' is given twice: give one list (%s=v1,v2,...)", kk->key, kk->key);
        err = TR_ERR_INVALID;
        goto out;
      }
    for (k = 0; k < d->n_fields; k++) if (!strcmp(d->fields[k].name, kk->key)) kk->field = &d->fields[k];
    if (!kk->field) { /* factory.param of the spec */
      const char *dot = strrchr(kk->key, '.');
      char *trial;
      int found = 0;
      if (dot && dot != kk->key && dot[1] && (size_t)(dot - kk->key) < sizeof kk->factory) {
        snprintf(kk->factory, sizeof kk->factory, "%.*s", (int)(dot - kk->key), kk->key);
        kk->param = dot + 1;
        if (!(trial = tr__sweep_spec_set(d->spec ? d->spec : "", kk->factory, kk->param, "0", &found))) {
          tr__msg(msg, cap, "tr_sweep: out of memory");
          err = TR_ERR_NOMEM;
          goto out;
        }
        free(trial);
      }
      if (!found) {
        hk_bytes fl;
        memset(&fl, 0, sizeof fl);
        for (k = 0; k < d->n_fields; k++) tr__putf(&fl, "%s%s", k ? ", " : "", d->fields[k].name);
        hk_bytes_put(&fl, "", 1);
        tr__msg(msg, cap, "tr_sweep: unknown key '%s': not a field of the program (fields: %s) nor factory.param of a "
                "callback in the spec (\"%s\")", kk->key, fl.data && !fl.failed && d->n_fields ? (const char *)fl.data : "none",
                d->spec ? d->spec : "");
        hk_bytes_free(&fl);
        err = TR_ERR_INVALID;
        goto out;
      }
    }
    /* the values: a comma list, none empty */
    for (p = eq + 1;; ) {
      char *c = strchr(p, ','), **g;
      if (c) *c = 0;
      if (!*p) {
        tr__msg(msg, cap, "tr_sweep: '%s=%s' has an empty %s: give %s=v1,v2,... with %s", kk->key, a + (eq + 1 - copies[i]),
                eq[1] ? "value" : "list", kk->key, kk->field ? tr__sweep_type_doc(kk->field->type) : "values of its spec parameter");
        err = TR_ERR_INVALID;
        goto out;
      }
      if (!(g = (char **)realloc(kk->vals, (size_t)(kk->n + 1) * sizeof *g))) { tr__msg(msg, cap, "tr_sweep: out of memory"); err = TR_ERR_NOMEM; goto out; }
      kk->vals = g;
      kk->vals[kk->n++] = p;
      if (kk->field && tr__sweep_parse(kk->field->type, p, NULL)) {
        tr__msg(msg, cap, "tr_sweep: bad value '%s' for '%s': expected %s", p, kk->key, tr__sweep_type_doc(kk->field->type));
        err = TR_ERR_INVALID;
        goto out;
      }
      if (!kk->field) { /* the factory checks it: its spec with this value */
        int found;
        char *trial = tr__sweep_spec_set(d->spec ? d->spec : "", kk->factory, kk->param, p, &found);
        hk_err he = trial ? hk_spec_check(check, trial) : HK_ERR_NOMEM;
        free(trial);
        if (he) {
          tr__msg(msg, cap, "tr_sweep: bad override '%s=%s': %s", kk->key, p, he == HK_ERR_NOMEM ? "out of memory" : hk_last_error(check));
          err = he == HK_ERR_NOMEM ? TR_ERR_NOMEM : TR_ERR_INVALID;
          goto out;
        }
      }
      if (!c) break;
      p = c + 1;
    }
    if (count > 100000 / kk->n) {
      tr__msg(msg, cap, "tr_sweep: more than 100000 jobs (at '%s'): sweep fewer values", kk->key);
      err = TR_ERR_INVALID;
      goto out;
    }
    count *= kk->n;
    n_keys++;
  }
  if (count > 1) multirun = 1;
  res->jobs = (int)count;
  res->multirun = multirun;
  if (!(done = (tr__sweep_done *)calloc((size_t)count, sizeof *done))) { tr__msg(msg, cap, "tr_sweep: out of memory"); err = TR_ERR_NOMEM; goto out; }

  /* ---- the sweep's directory ---- */
  if (multirun) {
    tr_run_desc sd;
    const char *dir;
    memset(&sd, 0, sizeof sd);
    sd.save_dir = d->save_dir ? d->save_dir : "multirun";
    sd.name = "";
    if (tr_run_setup(check, &sd) || !(dir = tr_run_dir(check)) || !(sweep_dir = tr__strdup(dir))) {
      tr__msg(msg, cap, "tr_sweep: the sweep's directory: %s", hk_last_error(check));
      err = TR_ERR_IO;
      goto out;
    }
    snprintf(res->dir, sizeof res->dir, "%s", sweep_dir);
    tr__sweep_say(d, "%ld job%s in %s", count, count == 1 ? "" : "s", sweep_dir);
  }
  for (i = 0; i < d->n_fields; i++) tr__sweep_keep(&d->fields[i], &old[i], 0);

  sctx.reg = d->reg;
  if (d->reg && HK_FIRE(d->reg, multirun ? HK_ON_MULTIRUN_START : HK_ON_RUN_START, &sctx) == HK_FAIL) {
    tr__msg(msg, cap, "tr_sweep: %s", sctx.hook_failure ? sctx.hook_failure : "a hook failed");
    err = TR_ERR_HOOK;
    for (i = 0; i < d->n_fields; i++) tr__sweep_keep(&d->fields[i], &old[i], 1);
    goto out;
  }

  /* ---- the jobs, one after another ---- */
  for (j = 0; j < count; j++) {
    tr_sweep_job job;
    tr__sweep_priv priv;
    tr_run_desc rd;
    hk_bytes ov;
    char *spec = NULL, leaf[40], why[600], keep[512];
    hk_registry *jreg = NULL;
    tr_err st = TR_OK;
    memset(&job, 0, sizeof job);
    memset(&priv, 0, sizeof priv);
    memset(&ov, 0, sizeof ov);
    why[0] = 0;
    if (stopped) { done[j].status = 2; res->skipped++; continue; }
    tr__sweep_pick(keys, n_keys, j);
    spec = tr__strdup(d->spec ? d->spec : "");
    for (k = 0; k < n_keys; k++) {
      tr__sweep_key *kk = &keys[k];
      tr__putf(&ov, "%s%s=%s", k ? " " : "", kk->key, kk->vals[kk->cur]);
      if (kk->field) tr__sweep_parse(kk->field->type, kk->vals[kk->cur], kk->field->ptr);
      else if (spec) {
        int found;
        char *next = tr__sweep_spec_set(spec, kk->factory, kk->param, kk->vals[kk->cur], &found);
        free(spec);
        spec = next;
      }
    }
    hk_bytes_put(&ov, "", 1);
    rd = d->run;
    if (multirun) {
      snprintf(leaf, sizeof leaf, "version_%ld", j);
      rd.save_dir = sweep_dir;
      rd.name = "";
      rd.version = leaf;
    }
    job.index = (int)j;
    job.count = (int)count;
    job.overrides = ov.failed ? "" : (const char *)ov.data;
    job.spec = spec ? spec : "";
    job.run = &rd;
    job.dir = "";
    job.error = "";
    job.tr__p = &priv;
    if (multirun) tr__sweep_say(d, "#%ld %s", j, job.overrides);
    if (!spec || ov.failed) { st = TR_ERR_NOMEM; snprintf(why, sizeof why, "out of memory"); }
    hk_metric_clear(&sctx);
    sctx.outputs = &job;
    if (!st && d->reg && HK_FIRE(d->reg, HK_ON_JOB_START, &sctx) == HK_FAIL) {
      st = TR_ERR_HOOK;
      snprintf(why, sizeof why, "%s", sctx.hook_failure ? sctx.hook_failure : "a hook failed at on_job_start");
    }
    if (!st) { /* its registry: the run, the factories, the spec, the final-metrics hook */
      hk_opts o;
      memset(&o, 0, sizeof o);
      o.name = "sweep_final_metrics";
      o.monitor = 1;
      o.order = INT_MAX; /* after the loggers: what they were sent */
      if (!(jreg = hk_create(NULL))) { st = TR_ERR_NOMEM; snprintf(why, sizeof why, "out of memory"); }
      else if ((st = tr_run_setup(jreg, &rd)) != TR_OK ||
               (d->add_factories && d->add_factories(jreg) != HK_OK && (st = TR_ERR_INVALID)) ||
               (hk_on(jreg, HK_ON_LOG, tr__sweep_capture, &priv, &o, NULL) != HK_OK && (st = TR_ERR_NOMEM)) ||
               (st = tr__sweep_hparams(jreg, d, keys, n_keys)) != TR_OK ||
               (spec[0] && hk_spec_apply(jreg, spec) != HK_OK && (st = TR_ERR_INVALID)))
        snprintf(why, sizeof why, "%s", hk_last_error(jreg));
      else {
        const char *dir = tr_run_dir(jreg);
        if (!dir) { st = TR_ERR_IO; snprintf(why, sizeof why, "%s", hk_last_error(jreg)); }
        else {
          char *path = tr__join(dir, "overrides.yaml");
          hk_bytes y;
          memset(&y, 0, sizeof y);
          job.dir = dir;
          for (k = 0; k < n_keys; k++) { /* Hydra's .hydra/overrides.yaml: "- key=value" */
            char *entry = (char *)malloc(strlen(keys[k].key) + strlen(keys[k].vals[keys[k].cur]) + 2);
            if (!entry) { y.failed = 1; break; }
            sprintf(entry, "%s=%s", keys[k].key, keys[k].vals[keys[k].cur]);
            tr__put_s(&y, "- ");
            tr__yaml_str(&y, entry);
            tr__put_s(&y, "\n");
            free(entry);
          }
          if (!path || y.failed) { st = TR_ERR_NOMEM; snprintf(why, sizeof why, "out of memory"); }
          else if (tr__write_whole(path, y.data ? (const void *)y.data : (const void *)"", y.len, 0, NULL, why, sizeof why)) st = TR_ERR_IO;
          free(path);
          hk_bytes_free(&y);
        }
      }
      if (!st) {
        st = d->job(jreg, &job, d->user);
        if (st) snprintf(why, sizeof why, "%s", tr_run_error(jreg)[0] ? tr_run_error(jreg) : tr_err_name(st));
      }
      if (jreg) { /* the job's files are complete before on_job_end */
        snprintf(keep, sizeof keep, "%s", job.dir);
        hk_destroy(jreg);
        job.dir = keep;
      }
    }
    /* final metrics: the logged ones, then the job's own */
    for (i = 0; i < priv.logged.n_metrics; i++) tr_log_set(&done[j].final, priv.logged.metrics[i].name, priv.logged.metrics[i].value);
    for (i = 0; i < priv.set.n_metrics; i++) tr_log_set(&done[j].final, priv.set.metrics[i].name, priv.set.metrics[i].value);
    job.status = st;
    job.error = why;
    job.n_metrics = done[j].final.n_metrics;
    job.metrics = done[j].final.metrics;
    for (i = 0; i < job.n_metrics; i++) hk_metric_set(&sctx, job.metrics[i].name, job.metrics[i].value);
    sctx.outputs = &job;
    if (d->reg) {
      hk_signal sig = HK_FIRE(d->reg, HK_ON_JOB_END, &sctx);
      sig = hk_honoured(d->reg, HK_ON_JOB_END, sig);
      if (sig == HK_FAIL && !st) {
        st = job.status = TR_ERR_HOOK;
        snprintf(why, sizeof why, "%s", sctx.hook_failure ? sctx.hook_failure : "a hook failed at on_job_end");
      }
      if (sig == HK_STOP) stopped = 1;
    }
    sctx.outputs = NULL;
    if (st) {
      done[j].status = 1;
      done[j].error = tr__strdup(why);
      res->failed++;
      tr__sweep_say(d, "#%ld failed (%s): %s", j, tr_err_name(st), why);
      if (!first) {
        first = st;
        tr__msg(msg, cap, "job %ld (%s) failed: %s", j, job.overrides[0] ? job.overrides : "no overrides", why);
      }
      if (d->stop_on_failure || st == TR_ERR_INTERRUPTED) stopped = 1;
    } else res->ok++;
    free(spec);
    hk_bytes_free(&ov);
    tr_log_record_free(&priv.logged);
    tr_log_record_free(&priv.set);
  }
  for (i = 0; i < d->n_fields; i++) tr__sweep_keep(&d->fields[i], &old[i], 1);

  /* ---- the summary, then the end events ---- */
  err = first;
  if (multirun) {
    char why[600];
    tr_err e = tr__sweep_summary(d, sweep_dir, keys, n_keys, done, count, why, sizeof why);
    if (e) {
      if (!err) { err = e; tr__msg(msg, cap, "tr_sweep: the summary: %s", why); }
      tr__sweep_say(d, "the summary: %s", why);
    } else tr__sweep_say(d, "%d ok, %d failed, %d skipped: %s/summary.csv", res->ok, res->failed, res->skipped, sweep_dir);
  }
  hk_metric_clear(&sctx);
  if (d->reg && HK_FIRE(d->reg, multirun ? HK_ON_MULTIRUN_END : HK_ON_RUN_END, &sctx) == HK_FAIL && !err) {
    tr__msg(msg, cap, "tr_sweep: %s", sctx.hook_failure ? sctx.hook_failure : "a hook failed");
    err = TR_ERR_HOOK;
  }
out:
  hk_ctx_free(&sctx);
  if (check) hk_destroy(check);
  for (i = 0; keys && i <= argc; i++) free(keys[i].vals);
  for (i = 0; copies && i <= argc; i++) free(copies[i]);
  free(keys);
  free(copies);
  free(old);
  free(sweep_dir);
  tr__sweep_job_free(done, count);
  if (!err) res->error[0] = 0;
  return err;
}
#endif /* TRAIN_NO_SWEEP */

#ifndef TRAIN_NO_TRAINER
/* =================================================================================================
   CUDA (TRAIN_CUDA)
   With TRAIN_CUDA defined where the implementation is compiled (a .cu file built by nvcc; every other
   file of the program stays C and sees the same declarations), a model with tr_model.on_device = 1
   trains on the GPU: params and grads are the user's device buffers, the optimizer state lives on the
   device, and each step runs kernels/train_cuda.cuh instead of the CPU loops:
     zero_grad       trc_zero                     accumulation mean   trc_scale
     clip by norm    trc_norm (the clip scale stays on the device), folded into the update; when an
                     on_gradient_clip hook is registered it is applied first (trc_apply_clip), so the
                     hook sees clipped gradients, as on the CPU. Either way the buffer ends clipped.
     clip by value   trc_clip_value (clamps in place and keeps the norm from before clipping)
     AdamW / SGD     trc_adamw / trc_sgd run tr_adamw_elem / tr_sgd_elem (section "PER-STEP MATH"):
                     the CPU's float32 formulas, bit for bit when the file is built with -fmad=false
                     (make cuda-test compares them with tr_adamw_update / tr_sgd_update)
   NO HOST WAIT IN A STEP. Every kernel is queued on the default stream; nothing in a step copies to
   the host or synchronises unless asked:
     - hk_grad_norm(ctx) (and the metric grad_norm) copy the norm from the device once per change of
       the gradients, when a hook first reads it (ctx->grad_norm_source);
     - the loss stays on the device (tr_model.device_loss): the metric train/loss copies it when a
       hook reads it (once per batch). ctx->loss is NaN in training batches, unless the loss was
       copied anyway: tr_config.on_nonfinite_loss FAIL (the default) and SKIP must see the loss before
       backward, so they cost one copy per step; TR_NONFINITE_IGNORE costs none;
     - a tr_model without device_loss hands the loss over on the host (forward waited for it).
   tr_cuda_sync_count() counts every wait; make cuda-test checks that a step with nothing registered
   and TR_NONFINITE_IGNORE makes none. Validation and test copy each batch's loss (one wait per batch).
   Non-finite gradients are not skipped, as on the CPU (trc_norm's device-side skip is for own loops).
   make test-cuda-cpu runs this whole section on the CPU with emulated kernels (tests/cuda_host.h) and
   checks it against the CPU path bit for bit.
   WHAT HOOKS CAN DO. ctx->params / ctx->grads are views of device memory (on_device = 1): a hook
   launches its own kernels on them, or copies them; it must not dereference them on the host. Of
   the standard callbacks, gradient_monitor, ema and lr_finder read tensors on the host and refuse a
   device model (TR_ERR_INVALID, saying so); nan_guard reads hk_grad_norm and train/loss instead.
   CUDA GRAPHS. Hook sites with nothing registered cost a host-side branch and launch nothing, so a
   step with no hooks is a fixed sequence of kernel launches on tr_model.stream that can be captured
   (give the model a stream of its own: the legacy default stream cannot be captured). A hook runs once,
   at capture time, and never on replay: during capture, hooks must not read lazy metrics (a copy
   cannot be captured), call tr_save, or expect to run each step. AdamW's step count and the learning
   rate are kernel arguments: a captured update keeps the captured values (see the kernels' header).
   CHECKPOINTS are the CPU format: tr_save copies the device state to host mirrors (t->tr__m/tr__v
   double as the optimizer's), writes them, and tr_load copies what it read back to the device, so a
   checkpoint from the GPU resumes on the CPU and the other way round. Without TRAIN_CUDA, a model
   with on_device is refused by tr_init (TR_ERR_DEVICE).
   ================================================================================================= */
#ifdef TRAIN_CUDA
typedef struct tr__device {
  float *m, *v;             /* the optimizer state (t->tr__m / tr__v are its host mirrors) */
  float *params, *grads;    /* the model's device buffers while host mirrors stand in (tr__dev_to_host) */
  float *host_params, *host_grads;
  double *partials;         /* TRC_NORM_BLOCKS */
  trc_ctrl *ctrl;           /* the norm, the clip scale, the skip decision: device-side */
  unsigned long long *counts; /* histogram bins */
  int fold_clip;            /* the next update multiplies by ctrl->clip_scale */
  int norm_known;           /* ctrl->norm belongs to the gradients of version norm_version */
  uint64_t norm_version;
  int loss_known;           /* loss holds the device loss of the last training forward */
  double loss;
  int swapped;              /* model.params/grads point at the host mirrors */
} tr__device;

#define TR__DEV(t) ((tr__device *)(t)->tr__dev)

static int tr__dev_ok(tr_trainer *t, int e, const char *what) {
  if (e) tr__fail(t, TR_ERR_DEVICE, "CUDA: %s failed: %s", what, trc_error_string(e));
  return e == 0;
}

/* The norm of the current gradients on the device, max_norm giving the clip scale (0: none). */
static void tr__dev_norm(tr_trainer *t, double max_norm) {
  tr__device *d = TR__DEV(t);
  if (tr__dev_ok(t, trc_norm(t->model.grads, t->model.n_params, d->partials, d->ctrl, max_norm, 0, t->model.stream), "trc_norm")) {
    d->norm_known = 1;
    d->norm_version = t->ctx.hk__grads_version;
  }
}

/* ctx->grad_norm_source: the only place the norm comes back to the host, when a hook asks. */
static double tr__dev_grad_norm(hk_ctx *ctx, void *user) {
  tr_trainer *t = (tr_trainer *)user;
  tr__device *d = TR__DEV(t);
  double norm = NAN;
  (void)ctx;
  if (!d->norm_known || d->norm_version != t->ctx.hk__grads_version) tr__dev_norm(t, 0);
  if (d->norm_known) tr__dev_ok(t, trc_copy_to_host(&norm, &d->ctrl->norm, sizeof norm, t->model.stream), "copying the norm");
  return norm;
}

static double tr__dev_loss_metric(const hk_ctx *ctx, void *user) {
  tr_trainer *t = (tr_trainer *)user;
  tr__device *d = TR__DEV(t);
  float x = NAN;
  (void)ctx;
  if (!t->model.device_loss || d->loss_known) return t->tr__last_loss;
  if (tr__dev_ok(t, trc_copy_to_host(&x, t->model.device_loss, sizeof x, t->model.stream), "copying the loss")) {
    d->loss_known = 1;
    t->tr__last_loss = x;
  }
  return t->tr__last_loss;
}

static void tr__dev_free(tr_trainer *t) {
  tr__device *d = TR__DEV(t);
  if (!d) return;
  trc_free(d->m); trc_free(d->v); trc_free(d->partials); trc_free(d->ctrl); trc_free(d->counts);
  free(d->host_params); free(d->host_grads);
  free(d);
  t->tr__dev = NULL;
}

/* tr_init's part: the device state, and the lazy metrics and norm that read from the device. */
static tr_err tr__dev_init(tr_trainer *t) {
  tr__device *d;
  size_t n = t->model.n_params, bytes = n * sizeof(float);
  char why[256];
  int i, e = 0;
  if (!t->model.on_device) return TR_OK;
  if (!trc_device_ok(why, sizeof why))
    return tr__fail(t, TR_ERR_DEVICE, "tr_init: model.on_device, but no CUDA device can be used (%s)", why);
  d = (tr__device *)calloc(1, sizeof *d);
  if (!d) return tr__fail(t, TR_ERR_NOMEM, "tr_init: out of memory");
  t->tr__dev = d;
  d->host_params = (float *)malloc(bytes);
  d->host_grads = (float *)malloc(bytes);
  if (!d->host_params || !d->host_grads) return tr__fail(t, TR_ERR_NOMEM, "tr_init: out of memory for the host mirrors");
  if (t->tr__n_buf >= 1) e = e ? e : trc_malloc((void **)&d->m, bytes);
  if (t->tr__n_buf >= 2) e = e ? e : trc_malloc((void **)&d->v, bytes);
  e = e ? e : trc_malloc((void **)&d->partials, TRC_NORM_BLOCKS * sizeof(double));
  e = e ? e : trc_malloc((void **)&d->ctrl, sizeof(trc_ctrl));
  e = e ? e : trc_malloc((void **)&d->counts, (4096 + 3) * sizeof(unsigned long long));
  if (d->m) e = e ? e : trc_memset(d->m, 0, bytes, t->model.stream);
  if (d->v) e = e ? e : trc_memset(d->v, 0, bytes, t->model.stream);
  if (!tr__dev_ok(t, e, "allocating the optimizer state on the device")) return t->tr__err;
  for (i = 0; i < 2 * t->model.n_tensors; i++) t->tr__views[i].on_device = 1;
  t->ctx.grad_norm_source = tr__dev_grad_norm;
  t->ctx.grad_norm_source_user = t;
  if (hk_metric_lazy(&t->ctx, "train/loss", tr__dev_loss_metric, t) != HK_OK)
    return tr__fail(t, TR_ERR_NOMEM, "tr_init: could not register the metrics");
  return TR_OK;
}

/* Host mirrors stand in for the device buffers while a checkpoint is written or read. */
static tr_err tr__dev_to_host(tr_trainer *t) {
  tr__device *d = TR__DEV(t);
  size_t bytes = t->model.n_params * sizeof(float);
  int e = 0;
  if (!d || d->swapped) return TR_OK;
  e = e ? e : trc_copy_to_host(d->host_params, t->model.params, bytes, t->model.stream);
  if (t->model.grads) e = e ? e : trc_copy_to_host(d->host_grads, t->model.grads, bytes, t->model.stream);
  if (d->m) e = e ? e : trc_copy_to_host(t->tr__m, d->m, bytes, t->model.stream);
  if (d->v) e = e ? e : trc_copy_to_host(t->tr__v, d->v, bytes, t->model.stream);
  if (!tr__dev_ok(t, e, "copying the state from the device")) return t->tr__err;
  d->params = t->model.params;
  d->grads = t->model.grads;
  t->model.params = d->host_params;
  if (t->model.grads) t->model.grads = d->host_grads;
  d->swapped = 1;
  return TR_OK;
}

/* After a load's commit (or its rollback): what the host mirrors hold goes to the device. */
static void tr__dev_upload(tr_trainer *t) {
  tr__device *d = TR__DEV(t);
  size_t bytes = t->model.n_params * sizeof(float);
  int e = 0;
  if (!d || !d->swapped) return;
  e = e ? e : trc_copy_to_device(d->params, d->host_params, bytes, t->model.stream);
  if (d->grads) e = e ? e : trc_copy_to_device(d->grads, d->host_grads, bytes, t->model.stream);
  if (d->m) e = e ? e : trc_copy_to_device(d->m, t->tr__m, bytes, t->model.stream);
  if (d->v) e = e ? e : trc_copy_to_device(d->v, t->tr__v, bytes, t->model.stream);
  e = e ? e : trc_synchronize(t->model.stream); /* the mirrors may change again as soon as we return */
  tr__dev_ok(t, e, "copying the state to the device");
  d->norm_known = 0;
}

static void tr__dev_unswap(tr_trainer *t) {
  tr__device *d = TR__DEV(t);
  if (!d || !d->swapped) return;
  t->model.params = d->params;
  if (d->grads) t->model.grads = d->grads;
  d->swapped = 0;
}

/* The step's pieces on the device (the CPU versions call these first when TR__ON_DEVICE). */
static void tr__dev_zero_grad(tr_trainer *t) {
  tr__dev_ok(t, trc_zero(t->model.grads, t->model.n_params, t->model.stream), "zeroing the gradients");
}

static void tr__dev_scale_grads(tr_trainer *t, float k) {
  tr__dev_ok(t, trc_scale(t->model.grads, t->model.n_params, k, t->model.stream), "scaling the gradients");
}

static void tr__dev_clip(tr_trainer *t, const tr_config *c) {
  tr__device *d = TR__DEV(t);
  if (c->gradient_clip_algorithm == TR_CLIP_NORM) {
    tr__dev_norm(t, c->gradient_clip_val);
    if (HK_ACTIVE(t->reg, HK_ON_GRADIENT_CLIP)) /* the hook must see clipped gradients: clip now */
      tr__dev_ok(t, trc_apply_clip(t->model.grads, t->model.n_params, d->ctrl, t->model.stream), "clipping");
    else d->fold_clip = 1;
  } else if (tr__dev_ok(t, trc_clip_value(t->model.grads, t->model.n_params, (float)c->gradient_clip_val, d->partials,
                                         d->ctrl, t->model.stream), "clipping by value")) {
    d->norm_known = 1; /* the norm before clipping, as hk_grad_norm promises */
    d->norm_version = t->ctx.hk__grads_version;
  }
}

static void tr__dev_update(tr_trainer *t, double lr) {
  tr__device *d = TR__DEV(t);
  const tr_optim *o = &t->optim;
  const trc_ctrl *ctrl = d->fold_clip ? d->ctrl : NULL;
  size_t n = t->model.n_params;
  int e;
  d->fold_clip = 0;
  if (o->kind == TR_OPTIM_ADAMW)
    e = trc_adamw(t->model.params, t->model.grads, d->m, d->v, n, tr_adamw_coefs(o, lr, t->global_step + 1), ctrl, t->model.stream);
  else {
    e = trc_sgd(t->model.params, t->model.grads, d->m, n, tr_sgd_coefs(o, lr, !t->tr__has_momentum), ctrl, t->model.stream);
    if (o->momentum > 0) t->tr__has_momentum = 1;
  }
  tr__dev_ok(t, e, "the optimizer step");
}

/* After a training forward: the loss stays on the device unless the non-finite policy must see it. */
static void tr__dev_forward_loss(tr_trainer *t, double *loss) {
  tr__device *d = TR__DEV(t);
  if (!t->model.device_loss) return;
  d->loss_known = 0;
  *loss = t->tr__last_loss = NAN;
  if (t->tr__cfg && t->tr__cfg->on_nonfinite_loss != TR_NONFINITE_IGNORE) *loss = tr__dev_loss_metric(&t->ctx, t);
}

/* An evaluation batch's loss (one copy). */
static double tr__dev_eval_loss(tr_trainer *t, double loss) {
  float x = NAN;
  if (!t->model.device_loss) return loss;
  tr__dev_ok(t, trc_copy_to_host(&x, t->model.device_loss, sizeof x, t->model.stream), "copying the loss");
  return x;
}

TRAIN_API unsigned long long tr_cuda_sync_count(void) { return trc_sync_count(); }
#define TR__ON_DEVICE(t) ((t)->tr__dev != NULL)
#else /* no TRAIN_CUDA: a device model is refused, and the hooks below compile to nothing */
static tr_err tr__dev_init(tr_trainer *t) {
  return t->model.on_device ? tr__fail(t, TR_ERR_DEVICE, "tr_init: model.on_device needs train.h's implementation "
                                       "compiled with TRAIN_CUDA by nvcc (see the section CUDA)") : TR_OK;
}
static void tr__dev_free(tr_trainer *t) { (void)t; }
static tr_err tr__dev_to_host(tr_trainer *t) { (void)t; return TR_OK; }
static void tr__dev_upload(tr_trainer *t) { (void)t; }
static void tr__dev_unswap(tr_trainer *t) { (void)t; }
TRAIN_API unsigned long long tr_cuda_sync_count(void) { return 0; }
#define TR__ON_DEVICE(t) 0
#endif

TRAIN_API tr_err tr_grad_histogram(tr_trainer *t, float lo, float hi, int bins, uint64_t *counts) {
  float width;
  int k;
  if (!t || !counts) return TR_ERR_INVALID;
  if (bins < 1 || bins > 4096 || !hk_is_finitef(lo) || !hk_is_finitef(hi) || !(lo < hi))
    return tr__refuse(t, "tr_grad_histogram: bins must be in 1..4096 (got %d) and lo < hi, both finite (got %g, %g)",
                      bins, (double)lo, (double)hi);
  if (!t->model.grads) return tr__refuse(t, "tr_grad_histogram: model.grads is not set");
  memset(counts, 0, sizeof *counts * (size_t)(bins + 3));
#ifdef TRAIN_CUDA
  if (TR__ON_DEVICE(t)) {
    tr__device *d = TR__DEV(t);
    unsigned long long c[4096 + 3];
    int b, e = trc_histogram(t->model.grads, t->model.n_params, lo, hi, bins, d->counts, t->model.stream);
    e = e ? e : trc_copy_to_host(c, d->counts, sizeof *c * (size_t)(bins + 3), t->model.stream);
    if (e) return tr__refuse(t, "tr_grad_histogram: CUDA: %s", trc_error_string(e));
    for (b = 0; b < bins + 3; b++) counts[b] = c[b];
    return TR_OK;
  }
#endif
  width = (hi - lo) / (float)bins;
  for (k = 0; k < t->ctx.n_tensors; k++) {
    const float *x = t->ctx.grads[k].data;
    size_t i;
    for (i = 0; i < t->ctx.grads[k].count; i++) counts[tr_hist_bin(x[i], lo, hi, width, bins)]++;
  }
  return TR_OK;
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
  tr__dev_free(t);
  hk_ctx_free(&t->ctx);
  hk_bytes_free(&t->tr__data_state);
  if (t->tr__run && t->tr__run->trainer == t) { /* the run stays with a registry of the user's */
    t->tr__run->trainer = NULL;
    t->tr__run->tr__p->epoch_done = NULL;
  }
  t->tr__run = NULL;
  if (t->tr__own_reg && t->reg) hk_destroy(t->reg);
  free(t->tr__views);
  free(t->tr__m);
  free(t->tr__v);
  tr__dist_free(t);
  t->reg = NULL;
  t->tr__views = NULL;
  t->tr__m = t->tr__v = NULL;
  t->tr__own_reg = 0;
}

static tr_err tr__init(tr_trainer *t, const tr_desc *d) {
  const tr_model *m;
  tr_optim *o;
  int i, j, n;
  memset(t, 0, sizeof *t);
  t->running = HK_STAGE_NONE;
  t->tr__val_at = -1;
  t->tr__mpi_timeout = 1800;
  if (!d) return tr__fail(t, TR_ERR_INVALID, "tr_init: desc is NULL");
  if (d->mpi_timeout != d->mpi_timeout) return tr__fail(t, TR_ERR_INVALID, "tr_init: mpi_timeout is NaN (seconds; 0 = 1800, < 0 = forever)");
  if (d->mpi_timeout != 0) t->tr__mpi_timeout = d->mpi_timeout < 0 ? -1 : d->mpi_timeout;
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
  if (d->threads < 0 || d->threads > 4096)
    return tr__fail(t, TR_ERR_INVALID, "tr_init: threads is %d; it must be 0 (one thread) to 4096", d->threads);
  t->tr__threads = d->threads ? d->threads : 1;
  t->tr__gscale = 1.0f;

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
  {
    char why[256];
    if (tr_sched_check(&t->sched, t->sched.total, why, sizeof why)) return tr__fail(t, TR_ERR_INVALID, "tr_init: %s", why);
  }
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
  if (!(t->tr__run = tr_run_get(t->reg))) { tr_free(t); return tr__fail(t, TR_ERR_NOMEM, "tr_init: out of memory for the run"); }
  t->tr__run->tr__p->hparams = tr__hparams;
  t->tr__run->tr__p->set_accumulation = tr__set_accumulation;
  t->tr__run->tr__p->val_follows = tr__val_follows;

  t->seed = d->seed;
  tr_rng_seed(&t->rng, d->seed);
  t->tr__strict_hook_state = d->strict_hook_state != 0;
  t->tr__async = d->async_save != 0;
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
      hk_metric_lazy(&t->ctx, "grad_norm", tr__grad_norm_metric, t) != HK_OK) {
    tr_free(t);
    return tr__fail(t, TR_ERR_NOMEM, "tr_init: could not register the metrics");
  }
  tr__run_configure(t, HK_STAGE_NONE, NULL); /* the batteries see this trainer's settings from now on */
  if (tr__dev_init(t)) { tr_free(t); return t->tr__err; } /* on_device: section CUDA */
  if (tr_add_factories(t->reg) != HK_OK) { /* spec strings such as "early_stopping(...)" work at once */
    tr_free(t);
    return tr__fail(t, TR_ERR_NOMEM, "tr_init: could not register the standard callbacks' factories");
  }
  return TR_OK;
}

TRAIN_API tr_err tr_init(tr_trainer *t, const tr_desc *d) {
  tr_err e, mine;
  if (!t) return TR_ERR_INVALID;
  mine = tr__init(t, d);
  /* the MPI strategy (TRAIN_MPI, several processes): every rank agrees on the model, also a rank whose
     own checks failed (it takes part with its error, so that no rank waits for it) */
  if ((e = tr__dist_init(t, mine)) != TR_OK && !mine) {
    char why[sizeof t->error];
    memcpy(why, t->error, sizeof why);
    tr_free(t);
    return tr__fail(t, e, "%s", why);
  }
  return e;
}

/* ---- Ctrl-C and SIGTERM ---------------------------------------------------------------------------
   hooks.h's stop-signal helper counts (hk_stop_signals_install with HK_STOP_COUNT_ONLY); the loops
   look at the count between steps. 1: finish the current batch, then fail with TR_ERR_INTERRUPTED.
   2: fail at the next event. SIGTERM counts like SIGINT: mpirun turns Ctrl-C into SIGTERM for every
   rank. With several processes a rank's own count is only voted on: the strategy's agreement points
   move tr__sigint_count (to the largest count of any rank), so that every rank stops at the same point. */
static int tr__sig_on;       /* this fit installed the helper: its count is ours */
static int tr__sig_base;     /* the helper's count already dealt with (when the fit began, after an abort) */
static int tr__sig_deferred; /* a multi-process fit is running: act on the agreed count only */
static int tr__sigint_count; /* multi-process: the agreed count */

/* This process's signals since the fit began (or since an abort dealt with them): 0, 1 or 2. */
static int tr__sig_own(void) {
  int n = tr__sig_on ? hk_stop_requested() - tr__sig_base : 0;
  return n < 0 ? 0 : n > 2 ? 2 : n;
}
/* What the loops act on. */
static int tr__interrupts(void) { return tr__sig_deferred ? tr__sigint_count : tr__sig_own(); }

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
  if (tr__interrupts() >= 2) tr__fail(t, TR_ERR_INTERRUPTED, "interrupted (Ctrl-C twice)");
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
  if (t->ctx.hook_failure || tr__interrupts() >= 2) tr__settle(t);
}

/* Collect the save written in the background (wait: until it is on disk): tr__save_ended. */
static void tr__saves_settle(tr_trainer *t, int wait) {
  if (t->tr__run && t->tr__run->tr__p->asave) tr__asave_settle(t->tr__run->tr__p->asave, &t->ctx, wait);
}

/* "Do this unless a hook skipped it": the batch's work and events stop at HK_SKIP_BATCH (or an
   error); the optimizer's stop at HK_SKIP_STEP too. */
static int tr__skips(const tr_trainer *t, unsigned mask) { return t->tr__err || HK_FLOW_HAS(&t->tr__flow, mask); }
static void tr__fire_unless(tr_trainer *t, unsigned mask, int event) { if (!tr__skips(t, mask)) tr__fire(t, event); }

/* The failure path: every on_exception handler runs (hooks.h runs them all, even if one fails), then
   teardown, which always runs. Lightning skips teardown on errors; we do not. */
static tr_err tr__abort(tr_trainer *t, hk_stage stage) {
  tr__sigint_count = 0; /* handled: an on_exception handler may still save a checkpoint */
  tr__sig_base = hk_stop_requested();
  t->ctx.abort_reason = t->error;
  t->ctx.hook_failure = NULL;
  (void)HK_FIRE(t->reg, HK_ON_EXCEPTION, &t->ctx);
  tr__settle(t); /* the run has failed already: a failing handler is reported, not recorded */
  t->ctx.stage = stage;
  t->tr__run->failed = 1; /* teardown's hooks see it (tensorboard's session status) */
  (void)HK_FIRE(t->reg, HK_TEARDOWN, &t->ctx);
  tr__settle(t);
  t->ctx.abort_reason = NULL;
  return t->tr__err;
}

/* ---- log records and requests: the run layer's (section THE RUN LAYER), shared with any loop ---- */
static TR__NOINLINE void tr__log_record(tr_trainer *t, const char *stage) {
  if (t->tr__err) return;
  tr__run_send(t->tr__run, &t->ctx, stage, &t->tr__flow);
  if (t->ctx.hook_failure || tr__interrupts() >= 2) tr__settle(t);
}
static void tr__log_line(tr_trainer *t) { tr__run_log_line(t->tr__run, &t->ctx); }

/* HK_REQUEST_LOG during a fit: the line in tr_desc.log, and a training record for the loggers. */
static void tr__log_requested(tr_trainer *t) {
  tr__log_line(t);
  if (HK_ACTIVE(t->reg, HK_ON_LOG)) tr__log_record(t, "train");
}

/* ---- the work of a step -------------------------------------------------------------------------
   Each piece does nothing once a hook has skipped it (or the run has failed), so the batch below
   reads as a straight list. */

/* Fetch batch b of data into ctx.batch (random access, or the iterator's next). */
static void *tr__fetch(tr_trainer *t, const tr_data *d, int64_t b, const char *what) {
  void *batch = NULL;
  int rc = d->next ? d->next(d->user, &batch) : d->get(d->user, tr__dist_index(t, b), &batch);
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
#ifdef TRAIN_CUDA
  if (TR__ON_DEVICE(t)) tr__dev_forward_loss(t, &loss); /* stays on the device unless needed */
#endif
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
#ifdef TRAIN_CUDA
  if (TR__ON_DEVICE(t)) tr__dev_zero_grad(t); else
#endif
  tr_zero(t->model.grads, t->model.n_params, t->tr__threads);
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
  if (t->tr__accum_n == 0) hk_flow_raise(&t->tr__flow, HK_SKIP_STEP);
  if (tr__skips(t, HK_FLOW_SKIP_STEP) || t->tr__accum_n == 1) return;
#ifdef TRAIN_CUDA
  if (TR__ON_DEVICE(t)) tr__dev_scale_grads(t, 1.0f / (float)t->tr__accum_n); else
#endif
  tr_scale(t->model.grads, t->model.n_params, 1.0f / (float)t->tr__accum_n, t->tr__threads);
  hk_grads_changed(&t->ctx);
}

/* hk_grad_norm's value, computed with the trainer's threads when nobody has asked yet (tr_sumsq per
   view, in view order: hk_grad_norm's bits). */
static double tr__grad_norm(tr_trainer *t) {
  double sum = 0;
  int k;
  if (hk_grad_norm_known(&t->ctx) || TR__ON_DEVICE(t)) return hk_grad_norm(&t->ctx); /* device: its source */
  for (k = 0; k < t->ctx.n_tensors; k++) sum += tr_sumsq(t->ctx.grads[k].data, t->ctx.grads[k].count, t->tr__threads);
  hk_grad_norm_set(&t->ctx, sqrt(sum));
  return sqrt(sum);
}
static double tr__grad_norm_metric(const hk_ctx *ctx, void *user) { (void)ctx; return tr__grad_norm((tr_trainer *)user); }

/* Clip by the total L2 norm (PyTorch's clip_grad_norm_: scale by limit / (norm + 1e-6) when that is
   below 1) or by value. The norm before clipping stays hk_grad_norm's value for the rest of the step:
   clipping by norm reads it (computed once, shared with every hook that asks); clipping by value
   computes it in the same pass, so a hook reading it later finds the norm before clipping. */
static void tr__clip_gradients(tr_trainer *t) {
  const tr_config *c = t->tr__cfg;
  if (tr__skips(t, HK_FLOW_SKIP_STEP)) return;
#ifdef TRAIN_CUDA
  if (TR__ON_DEVICE(t)) { tr__dev_clip(t, c); return; }
#endif
  if (c->gradient_clip_algorithm == TR_CLIP_NORM) {
    double coef = c->gradient_clip_val / (tr__grad_norm(t) + 1e-6);
    if (coef >= 1.0) return;
    if (HK_ACTIVE(t->reg, HK_ON_GRADIENT_CLIP)) /* a hook will look at the clipped gradients: scale now */
      tr_scale(t->model.grads, t->model.n_params, (float)coef, t->tr__threads);
    else /* nobody looks before the update: its pass scales them (and stores them) on the way, one pass saved */
      t->tr__gscale = (float)coef;
  } else { /* over the views (they tile the buffer), in hk_grad_norm's order: the same bits */
    float hi = (float)c->gradient_clip_val;
    double sum = 0;
    int k;
    for (k = 0; k < t->ctx.n_tensors; k++)
      sum += tr_clamp_sumsq(t->ctx.grads[k].data, t->ctx.grads[k].count, -hi, hi, t->tr__threads);
    hk_grad_norm_set(&t->ctx, sqrt(sum));
  }
}

/* One optimizer update with learning rate lr; t->global_step + 1 is the step number. The per-step
   scalars in double, then one float pass (the section "PER-STEP MATH"). */
static void tr__update(tr_trainer *t, double lr) {
  const tr_optim *o = &t->optim;
#ifdef TRAIN_CUDA
  if (TR__ON_DEVICE(t)) { tr__dev_update(t, lr); return; }
#endif
  if (o->kind == TR_OPTIM_ADAMW) {
    tr_adamw_coef c = tr_adamw_coefs(o, lr, t->global_step + 1);
    c.gscale = t->tr__gscale;
    tr_adamw_update(t->model.params, t->model.grads, t->tr__m, t->tr__v, t->model.n_params, &c, t->tr__threads);
  } else {
    tr_sgd_coef c = tr_sgd_coefs(o, lr, !t->tr__has_momentum);
    c.gscale = t->tr__gscale;
    tr_sgd_update(t->model.params, t->model.grads, t->tr__m, t->model.n_params, &c, t->tr__threads);
    if (o->momentum > 0) t->tr__has_momentum = 1;
  }
  t->tr__gscale = 1.0f;
}

/* The update, then global_step moves (before on_after_optimizer_step, as in the context contract). */
static void tr__optimizer_step(tr_trainer *t) {
  if (tr__skips(t, HK_FLOW_SKIP_STEP)) return;
  t->lr = t->ctx.lr = tr__current_lr(t); /* a hook may have scaled it in this batch (tr_lr_scale) */
  tr__update(t, t->lr);
  t->ctx.global_step = ++t->global_step;
}

/* The end of an accumulation window: its bookkeeping and a skipped step are forgotten. */
static void tr__end_window(tr_trainer *t) {
  t->tr__accum_pos = t->tr__accum_n = 0;
  t->tr__grads_zeroed = 0;
  t->tr__gscale = 1.0f; /* (only a skipped step leaves one behind; its gradients are dropped) */
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

/* Number of batches to run: the data's count (this rank's share of it), capped by limit (> 0). */
static int64_t tr__n_batches(tr_trainer *t, const tr_data *data, int64_t limit, const char *what) {
  int64_t n = t->tr__err ? 0 : data->count(data->user);
  if (n < 0) { tr__fail(t, TR_ERR_MODEL, "%s data: count() returned %lld", what, (long long)n); n = 0; }
  n = tr__dist_shard(t, data, n, !strcmp(what, "train"), what);
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
#ifdef TRAIN_CUDA
  if (TR__ON_DEVICE(t)) loss = tr__dev_eval_loss(t, loss);
#endif
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
  if (t->tr__err || tr__dist_empty(t, n)) return t->tr__err; /* no batches (on any rank): no loop at all, as Lightning */
  t->eval_batches = t->tr__run->eval_batches = n;
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
  tr__dist_mean(t, &sum, &counted); /* every rank's batches: the global mean */
  if (!e->predict) {
    mean = counted ? sum / (double)counted : NAN; /* NaN: every batch was skipped */
    t->ctx.loss = mean;
    if (e->metric && !t->tr__err && hk_metric_set(&t->ctx, e->metric, mean) != HK_OK)
      tr__fail(t, TR_ERR_NOMEM, "could not set the metric %s", e->metric);
  }
  if (e->mean) *e->mean = mean;
  tr__fire(t, e->ev->epoch_end);
  if (!e->predict && t->ctx.stage != HK_STAGE_SANITY_CHECK && HK_ACTIVE(t->reg, HK_ON_LOG))
    tr__log_record(t, e->ev == &tr__test_events ? "test" : "val");
  tr__fire(t, e->ev->end);
  tr__dist_agree(t);
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

/* What the batteries read from the run layer, from this trainer's settings and the fit's config (c is
   NULL outside a fit). Set at every run: the trainer's registry may be shared. */
/* The training state a rollback puts back (spike_detection): parameters, optimizer state, the step
   count (AdamW's t and the schedule's) and SGD's first-step flag. The data's counters go on. */
static tr_err tr__save_failed(void *user, hk_ctx *ctx, const char *path, char *why, size_t cap);
static void tr__rolled_back(void *trainer);
static void tr__state_regions(tr_trainer *t) {
  tr__run_priv *q = t->tr__run->tr__p;
  int n = 0;
  size_t bytes = t->model.n_params * sizeof(float);
  if (t->model.params) { t->tr__state[n].data = t->model.params; t->tr__state[n++].bytes = bytes; }
  if (t->tr__n_buf >= 1) { t->tr__state[n].data = t->tr__m; t->tr__state[n++].bytes = bytes; }
  if (t->tr__n_buf >= 2) { t->tr__state[n].data = t->tr__v; t->tr__state[n++].bytes = bytes; }
  t->tr__state[n].data = &t->global_step; t->tr__state[n++].bytes = sizeof t->global_step;
  t->tr__state[n].data = &t->tr__has_momentum; t->tr__state[n++].bytes = sizeof t->tr__has_momentum;
  q->state = t->tr__state;
  q->n_state = n;
  q->rolled_back = tr__rolled_back;
  q->save_failed = tr__save_failed;
}

static void tr__run_configure(tr_trainer *t, hk_stage stage, const tr_config *c) {
  tr_run *run = t->tr__run;
  tr_run_desc *d = &run->desc;
  run->trainer = t;
  run->running = stage;
  run->failed = 0;
  run->tr__p->epoch_done = &t->tr__epoch_done;
  run->tr__p->reg = t->reg;
  run->tr__p->rank = t->ctx.rank;
  d->log = t->tr__log;
  d->epochs = TR_YES;
  d->optimizer = t->optim.kind == TR_OPTIM_SGD ? "SGD" : "AdamW"; /* Lightning's names for lr_monitor */
  d->momentum = t->optim.kind == TR_OPTIM_SGD ? t->optim.momentum : t->optim.beta1;
  d->weight_decay = t->optim.weight_decay;
  d->lr_per_epoch = t->sched.per_epoch;
  memset(run->tr__p->stamp, 0, sizeof run->tr__p->stamp);
  if (!c) return;
  d->max_steps = c->max_steps;
  d->max_epochs = c->max_epochs;
  d->min_steps = c->min_steps;
  d->min_epochs = c->min_epochs;
  d->log_every_n_steps = c->log_every_n_steps;
  d->validation = c->val && c->limit_val_batches >= 0 ? TR_YES : TR_NO;
  /* Lightning's rule: monitors act at the epoch's end when validation runs at every epoch's end only
     (or not at all), else at the validation's end */
  d->check_on_train_epoch_end = !c->val || (c->val_every_n_steps <= 0 && c->val_every_n_epochs == 1) ? TR_YES : TR_NO;
  run->resume_from = c->resume_from ? c->resume_from : "";
  d->no_resume_message = c->no_resume_message;
  run->tr__p->fixed_accumulation = c->accumulate_grad_batches;
  tr__state_regions(t);
}

static tr_err tr__run(tr_trainer *t, hk_stage stage, void (*body)(tr_trainer *t, const void *arg), const void *arg) {
  hk_flow kept = t->tr__flow; /* a fit starts from what a checkpoint holds (a held stop, a skipped step) */
  tr_err e;
  tr__run_configure(t, stage, stage == HK_STAGE_FIT ? t->tr__cfg : NULL);
  t->tr__run->tr__p->sync_only = 0;
  t->running = stage;
  t->ctx.stage = stage;
  t->ctx.requests = 0;
  t->ctx.n_checkpoint_paths = t->ctx.checkpoint_default = 0;
  if (stage != HK_STAGE_FIT) t->tr__flow.signals = 0;
  tr__fire(t, HK_SETUP);
  tr__fire(t, HK_CONFIGURE_MODEL);
  tr__dist_agree(t);
  if (!t->tr__err) body(t, arg);
  tr__saves_settle(t, 1); /* the run ends once its last save is on disk (or has failed it) */
  t->tr__run->tr__p->sync_only = 1; /* a save from on_exception or teardown: nothing collects it later */
  tr__dist_agree(t); /* a failure on any rank fails the run on every rank */
  if (t->tr__err) e = tr__abort(t, stage);
  else {
    t->ctx.stage = stage;
    tr__fire(t, HK_TEARDOWN);
    e = TR_OK; /* teardown honours no signal */
    t->error[0] = 0; /* a refused call from a hook (its message) does not outlive a run that succeeded */
  }
  t->running = HK_STAGE_NONE;
  t->tr__run->running = HK_STAGE_NONE;
  t->tr__run->resume_from = "";
  t->ctx.stage = HK_STAGE_NONE;
  t->ctx.batch = NULL;
  t->ctx.requests = 0;
  t->ctx.n_checkpoint_paths = t->ctx.checkpoint_default = 0;
  t->tr__flow.signals = stage == HK_STAGE_FIT ? 0 : kept.signals; /* a fit consumes its signals */
  return e;
}

static void tr__eval_body(tr_trainer *t, const void *arg) {
  tr__eval_loop(t, (const tr__eval *)arg);
  if (!t->tr__err && (t->ctx.requests & HK_REQUEST_LOG)) tr__log_line(t);
}

static tr_err tr__eval_run(tr_trainer *t, hk_stage stage, const tr__eval *e, const char *fn) {
  tr_err err = TR_OK;
  if (!t) return TR_ERR_INVALID;
  if (tr__idle(t, fn)) return TR_ERR_INVALID;
  if (!e->data || !e->data->count || !e->data->get == !e->data->next)
    err = tr__fail(t, TR_ERR_INVALID, "%s: the data needs count, and get or next (one of them)", fn);
  else if (e->predict && !t->model.predict) err = tr__fail(t, TR_ERR_INVALID, "tr_predict: model.predict is not set");
  if ((err = tr__dist_start_eval(t, stage, err ? NULL : e->data, e->limit, err)) != TR_OK) return err;
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


static int tr__set_accumulation(void *trainer, int factor) { return (int)tr_set_accumulation((tr_trainer *)trainer, factor); }
/* Does a validation run right after the training batch in progress: at this step (val_every_n_steps, when
   the batch stepped), or at the epoch's end after its last batch? (model_checkpoint ranks a step save
   due now on that validation's value.) */
static int tr__val_follows(const void *trainer, int64_t step, int stepped) {
  const tr_trainer *t = (const tr_trainer *)trainer;
  const tr_config *c = t->tr__cfg;
  if (!c || !c->val || t->running != HK_STAGE_FIT || c->val->count(c->val->user) <= 0) return 0;
  if (stepped && c->val_every_n_steps > 0 && step % c->val_every_n_steps == 0) return 1;
  return t->tr__epoch_done && c->val_every_n_epochs > 0 && (t->epoch + 1) % c->val_every_n_epochs == 0;
}
TRAIN_API tr_err tr_set_accumulation(tr_trainer *t, int factor) {
  if (!t) return TR_ERR_INVALID;
  if (t->running != HK_STAGE_FIT || !t->tr__cfg) return tr__refuse(t, "tr_set_accumulation: only during a fit (from a hook)");
  if (factor < 1) return tr__refuse(t, "tr_set_accumulation: factor must be >= 1, got %d", factor);
  t->tr__accum = factor;
  return TR_OK;
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

/* HK_REQUEST_CHECKPOINT: at every path hooks queued (hk_request_checkpoint), then at save_to when a
   hook asked for the default path (or queued none). A failed save is the run's failure: a hook asked
   for it. The queue is copied and cleared first, so hooks of on_checkpoint_saved may queue anew. */
static tr_err tr__save_for_request(void *user, hk_ctx *ctx, const char *path, char *why, size_t cap) {
  tr_trainer *t = (tr_trainer *)user;
  tr_err e = tr_save(t, path);
  (void)ctx;
  if (e) tr__msg(why, cap, "%s", t->error);
  return e;
}
/* spike_detection put the state back: the window in progress is dropped, ctx follows the step count. */
static void tr__rolled_back(void *trainer) {
  tr_trainer *t = (tr_trainer *)trainer;
  t->ctx.global_step = t->global_step;
  t->tr__accum_pos = t->tr__accum_n = 0;
  t->tr__grads_zeroed = 0;
  t->tr__gscale = 1.0f;
  t->tr__win_open = 0;
  hk_flow_clear(&t->tr__flow, HK_SIGNAL_BIT(HK_SKIP_STEP));
  hk_grads_changed(&t->ctx);
}

static void tr__honour_checkpoints(tr_trainer *t, const tr_config *c) {
  char why[sizeof t->error];
  int no_default = 0;
  tr_err e;
  tr__dist_paths(t); /* rank 0's paths, on every rank */
  t->tr__in_request = 1;
  e = tr__run_checkpoints(&t->ctx, c->save_to, tr__save_for_request, t, why, sizeof why, &no_default);
  t->tr__in_request = 0;
  if (no_default) tr__warn(t, "a hook requested a checkpoint but tr_config.save_to is not set");
  if (e) tr__fail(t, e, "%s", why);
}

/* A safe point (after a training batch or an epoch): honour what hooks requested. */
static void tr__honour_requests(tr_trainer *t) {
  const tr_config *c = t->tr__cfg;
  unsigned r = t->ctx.requests;
  if (t->tr__run->tr__p->asave) tr__saves_settle(t, 0); /* a save written in the background: done yet? */
  if (t->tr__err) return;
  t->ctx.requests = 0; /* cleared first: a hook that requests again during validation gets a new turn */
  if (r & HK_REQUEST_VALIDATION) {
    if (c->val) tr__fit_validate(t);
    else tr__warn(t, "a hook requested a validation but tr_config.val is not set");
  }
  if ((r & HK_REQUEST_CHECKPOINT) && !t->tr__err) tr__honour_checkpoints(t, c);
  if ((r & HK_REQUEST_LOG) && !t->tr__err) tr__log_requested(t);
}

/* After on_train_end: checkpoints and logs asked for there (model_checkpoint's final last.ckpt);
   a validation is not run any more. */
static void tr__honour_final_requests(tr_trainer *t) {
  unsigned r = t->ctx.requests;
  if (t->tr__err) return;
  t->ctx.requests = 0;
  if (r & HK_REQUEST_CHECKPOINT) tr__honour_checkpoints(t, t->tr__cfg);
  if ((r & HK_REQUEST_LOG) && !t->tr__err) tr__log_requested(t);
}

/* One training batch, in Lightning's order. Each line fires an event or does a piece of work; once a
   hook skips the batch (HK_SKIP_BATCH) or the window's step (HK_SKIP_STEP), or anything fails, the
   lines it covers do nothing, and on_train_batch_end still fires (unless the run failed). */
static void tr__train_batch(tr_trainer *t, int64_t n_batches) {
  const tr_config *c = t->tr__cfg;
  int64_t steps_before = t->global_step;
  int window_ends = t->tr__accum_pos + 1 >= t->tr__accum || t->epoch_batch + 1 >= n_batches;
  void *batch;

  t->lr = t->ctx.lr = tr__current_lr(t);
  if (t->tr__accum_pos == 0) { /* a window begins: where a failure before its step resumes */
    t->tr__win_open = 1;
    t->tr__win_batch = t->epoch_batch;
    t->tr__win_samples = t->samples_seen;
  }
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
    tr__dist_grads(t);                     /* every rank's gradients summed (TRAIN_MPI) */
    tr__average_window(t);
    tr__fire_unless(t, HK_FLOW_SKIP_STEP, HK_ON_BEFORE_OPTIMIZER_STEP);
    if (c->gradient_clip_val > 0) {
      tr__clip_gradients(t);
      tr__fire_unless(t, HK_FLOW_SKIP_STEP, HK_ON_GRADIENT_CLIP);
    }
    tr__dist_agree(t);                     /* a skip from on_before_optimizer_step .. on_gradient_clip: everywhere */
    tr__optimizer_step(t);
    if (t->global_step > steps_before || !t->tr__err) t->tr__win_open = 0; /* stepped, or ended without a step */
    tr__fire_unless(t, HK_FLOW_SKIP_STEP, HK_ON_AFTER_OPTIMIZER_STEP);
    tr__end_window(t);
  }
  t->epoch_batch++;
  t->tr__epoch_done = t->epoch_batch >= n_batches;
  t->samples_seen += c->train->batch_size > 0 ? c->train->batch_size : 1;
  t->ctx.samples_seen = t->samples_seen;
  tr__fire(t, HK_ON_TRAIN_BATCH_END);
  hk_flow_clear(&t->tr__flow, HK_SIGNAL_BIT(HK_SKIP_BATCH));
  tr__dist_agree(t);
  if (tr__interrupts() >= 1) tr__fail(t, TR_ERR_INTERRUPTED, "interrupted (Ctrl-C)");
  if (HK_ACTIVE(t->reg, HK_ON_LOG) && t->global_step > steps_before && c->log_every_n_steps > 0 &&
      t->global_step % c->log_every_n_steps == 0)
    tr__log_record(t, "train");

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
  t->tr__epoch_done = 0;
  tr__end_window(t); /* a window cut short by a stop is dropped */
  t->tr__win_open = 0;
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
  t->lr = t->ctx.lr = tr__current_lr(t); /* the epoch's learning rate is known before its first batch (lr_monitor) */
  tr__fire(t, HK_ON_TRAIN_EPOCH_START);
}

/* The plateau's check at a complete epoch's end, after its validation and before on_train_epoch_end
   (so that a checkpoint written there holds it). The lr it sets applies from the next batch on. */
static void tr__plateau_check(tr_trainer *t) {
  double v = 0, sum;
  int64_t have = hk_metric_get(&t->ctx, t->sched.monitor, &v) ? 1 : 0; /* a lazy one is computed now (hooks.h) */
  sum = have ? v : 0;
  /* TRAIN_MPI: every rank decides on the ranks' mean (val/loss is the same on each already; a rank's own
     train/loss is not), so the lr stays the same everywhere; one process: the value itself */
  tr__dist_mean(t, &sum, &have);
  if (t->tr__err) return;
  if (have < (t->tr__dist ? (int64_t)t->ctx.world_size : 1)) {
    tr__fail(t, TR_ERR_INVALID, "the plateau schedule monitors '%s', which is not set at the end of epoch %lld (no "
             "validation data? monitor a metric a hook sets, e.g. train/loss)", t->sched.monitor, (long long)t->epoch);
    return;
  }
  if (t->tr__dist) v = sum / (double)have;
  (void)tr_plateau_step(&t->sched, &t->tr__run->lr_state, t->optim.lr, v);
}

/* One training epoch: on_train_epoch_start, batches, [validation], on_train_epoch_end. An epoch that
   max_steps cuts short stays open (epoch_batch > 0): the next fit continues it mid-way. */
static void tr__train_epoch(tr_trainer *t, int64_t n) {
  const tr_config *c = t->tr__cfg;
  int complete;
  t->train_batches = t->tr__run->train_batches = n;
  tr__start_epoch(t, c->train);
  tr__dist_agree(t);
  while (t->epoch_batch < n && !tr__skips(t, HK_SIGNAL_BIT(HK_STOP_EPOCH)) && !tr__stopping(t)) {
    tr__train_batch(t, n);
    if (c->max_steps > 0 && t->global_step >= c->max_steps) break;
  }
  if (t->tr__err) return;
  complete = t->epoch_batch >= n || HK_FLOW_HAS(&t->tr__flow, HK_SIGNAL_BIT(HK_STOP_EPOCH)) || tr__stopping(t);
  t->tr__epoch_done = complete;
  if (complete && c->val && c->val_every_n_epochs > 0 && (t->epoch + 1) % c->val_every_n_epochs == 0 &&
      t->tr__val_at != t->epoch_batch)
    tr__fit_validate(t);
  if (complete && !t->tr__err && t->sched.kind == TR_SCHED_PLATEAU) tr__plateau_check(t);
  t->tr__epoch_ended = complete; /* a checkpoint written by an on_train_epoch_end hook resumes after it */
  tr__fire(t, HK_ON_TRAIN_EPOCH_END);
  tr__dist_agree(t);
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
  if (c->log_every_n_steps == 0) c->log_every_n_steps = 50;
  t->tr__total = t->sched.total;
  if (t->tr__total == 0 && (t->sched.kind == TR_SCHED_COSINE || t->sched.kind == TR_SCHED_LINEAR ||
                            t->sched.kind == TR_SCHED_WSD || t->sched.kind == TR_SCHED_ONECYCLE))
    t->tr__total = t->sched.per_epoch ? c->max_epochs : c->max_steps;
  {
    char why[256];
    tr_sched s = t->sched;
    if ((s.kind == TR_SCHED_COSINE || s.kind == TR_SCHED_LINEAR || s.kind == TR_SCHED_WSD || s.kind == TR_SCHED_ONECYCLE) &&
        t->tr__total == 0)
      return tr__fail(t, TR_ERR_INVALID, "tr_fit: the %s schedule needs sched.total (or max_steps / max_epochs) "
                      "greater than sched.warmup", tr_sched_kind_name(s.kind));
    if (tr_sched_check(&s, t->tr__total, why, sizeof why)) return tr__fail(t, TR_ERR_INVALID, "tr_fit: %s", why);
  }
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
    hk_reader rd;
    memset(&rd, 0, sizeof rd);
    rd.data = t->tr__data_state.data;
    rd.len = t->tr__data_state.len;
    if (d->load_state(d->user, &rd)) {
      rd.why[sizeof rd.why - 1] = 0;
      tr__fail(t, TR_ERR_STATE, "train data: load_state() rejected the saved position (%zu bytes)%s%s", t->tr__data_state.len,
               rd.why[0] ? ": " : "", rd.why);
    }
  }
}

/* The sanity check: a few validation batches before training, to find bugs in validation early. */
static void tr__sanity_check(tr_trainer *t) {
  const tr_config *c = t->tr__cfg;
  int64_t limit = c->num_sanity_val_steps;
  tr__eval e = { &tr__val_events, c->val, 0, 0, "val/loss", "sanity check", NULL };
  uint64_t before, during;
  if (t->tr__err || !c->val || c->num_sanity_val_steps <= 0 || t->tr__restarting) return;
  if (c->limit_val_batches > 0 && c->limit_val_batches < limit) limit = c->limit_val_batches;
  e.limit = limit;
  t->ctx.stage = HK_STAGE_SANITY_CHECK;
  before = hk_metric_stamp(&t->ctx, NULL);
  tr__fire(t, HK_ON_SANITY_CHECK_START);
  tr__eval_loop(t, &e); /* nothing after a failure (but the ranks' agreement on it) */
  during = hk_metric_stamp(&t->ctx, NULL);
  tr__fire(t, HK_ON_SANITY_CHECK_END);
  /* As Lightning resets its metrics after the sanity check: nothing ranks or stops on its val/loss.
     What hooks publish at on_sanity_check_end (the timer's time/sanity_check) stays. */
  hk_metric_forget_between(&t->ctx, before, during);
  t->ctx.stage = HK_STAGE_FIT;
}

/* The body of tr_fit, after setup and configure_model, in the order of Lightning's Trainer.fit. */
static void tr__fit_body(tr_trainer *t, const void *arg) {
  const tr_config *c = t->tr__cfg;
  int64_t n;
  (void)arg;
  if (c->resume_from) { /* a failure skips what follows */
    tr__load_file(t, c->resume_from);
    if (!t->tr__err) tr__run_say_resumed(t->tr__run, &t->ctx, c->resume_from);
  }
  tr__ready_to_train(t);
  tr__dist_check_resumed(t); /* every rank starts from the same counters (TRAIN_MPI) */
  tr__fire(t, HK_ON_FIT_START);
  tr__dist_agree(t);
  tr__sanity_check(t);
  tr__fire(t, HK_ON_TRAIN_START);
  tr__dist_agree(t);
  if (t->tr__epoch_ended) tr__finish_epoch(t); /* a checkpoint from inside on_train_epoch_end */
  while (!tr__fit_done(t)) {
    if (tr__interrupts() >= 1) { tr__fail(t, TR_ERR_INTERRUPTED, "interrupted (Ctrl-C)"); break; }
    n = tr__n_batches(t, c->train, c->limit_train_batches, "train");
    if (n == 0) { /* nothing to train on: Lightning skips the training loop too */
      if (!t->tr__err) tr__warn(t, "the training data has no batches: nothing to train");
      break;
    }
    tr__train_epoch(t, n);
  }
  tr__fire(t, HK_ON_TRAIN_END);
  tr__dist_agree(t);
  tr__honour_final_requests(t);
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
  if (!t) return TR_ERR_INVALID;
  if (tr__idle(t, "tr_fit")) return TR_ERR_INVALID; /* nested in a hook: this rank alone, no agreement */
  e = tr__resolve(t, cfg, &c);
  if ((e = tr__dist_start_fit(t, &c, e)) != TR_OK) return e; /* every rank: the same run length (TRAIN_MPI) */
  t->tr__cfg = &c;
  t->tr__accum = c.accumulate_grad_batches;
  t->ctx.epoch = t->epoch;
  t->ctx.global_step = t->global_step;
  t->ctx.samples_seen = t->samples_seen;
  t->lr = t->ctx.lr = tr__current_lr(t);
  tr__sigint_count = 0;
  tr__sig_deferred = t->tr__dist != NULL;
  tr__sig_on = !c.no_sigint && hk_stop_signals_install(HK_STOP_COUNT_ONLY) == 0;
  tr__sig_base = hk_stop_requested(); /* inside a loop that installed already: its earlier signals are its own */

  e = tr__run(t, HK_STAGE_FIT, tr__fit_body, NULL);

  if (tr__sig_on) hk_stop_signals_restore();
  tr__sigint_count = tr__sig_on = tr__sig_deferred = 0;
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
#define TR__LRST TR__TAG('L', 'R', 'S', 'T') /* the schedule's state (optional: only when not at its start) */
#define TR__END  TR__TAG('E', 'N', 'D', '!')
#define TR__LOOP_SIZE (9 * 8 + 4)
#define TR__MAX_KEY 4096
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


/* -- writing: a buffered writer that checksums what it writes -- */
typedef struct tr__writer {
  unsigned char *buf;
  size_t pos, cap;
  uint64_t hash;     /* running checksum of the current section */
  uint64_t left;     /* payload bytes the current section still owes (checks our own sizes) */
  tr__afile *af;     /* the temporary file it writes */
  int failed;        /* 0, or the errno of the first failure */
} tr__writer;

/* After a failure nothing more is written, and the buffer is emptied either way: the writer must never
   wait for room that a failed write will not make (it used to spin here on a full disk). */
static void tr__w_flush(tr__writer *w) {
  if (!w->failed) w->failed = tr__afile_write(w->af, w->buf, w->pos);
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
  unsigned char block[4096]; /* converted a block at a time: one checksum/copy call per 1024 floats */
  size_t i, k;
  for (i = 0; i < n; i += k) {
    const uint32_t one = 1;
    k = n - i < sizeof block / 4 ? n - i : sizeof block / 4;
    if (*(const unsigned char *)&one == 1) memcpy(block, x + i, 4 * k); /* a little-endian host: as is */
    else {
      size_t j;
      for (j = 0; j < k; j++) {
        uint32_t u;
        memcpy(&u, &x[i + j], 4);
        tr__le(block + 4 * j, u, 4);
      }
    }
    tr__w_put(w, block, 4 * k);
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

/* Everything a checkpoint holds, taken at one moment: tr__write_all writes the file from it alone, so
   the background writer can too (its arrays then point into the staging buffer). */
typedef struct tr__snap {
  uint64_t n;                          /* parameters */
  uint32_t optim, n_buf, flags;
  int n_tensors;
  const tr_tensor *tensors;            /* the model's views (fixed while the trainer lives) */
  uint64_t loop[9];                    /* seed, rng, epoch, global_step, epoch_batch, samples_seen, val_at,
                                          accum_pos, accum_n: the LOOP section */
  const float *params, *m, *v, *grads; /* grads: NULL outside an accumulation window */
  const unsigned char *data, *hooks;   /* the iterator's position; every hook's state (tr__run_state_sink's layout) */
  size_t data_len, hooks_len;
  int has_lrst;                        /* the LRST section: the schedule's state, when it has any */
  unsigned char lrst[TR__LR_STATE_SIZE];
} tr__snap;

/* Take the snapshot with pointers into the live trainer; hooks (and live) receive the bytes asked of
   hooks and data. TR_OK, or the run's error (a failed save_state). */
static tr_err tr__snap_take(tr_trainer *t, tr__snap *s, hk_bytes *live, hk_bytes *hooks) {
  const hk_bytes *data = tr__data_position(t, live);
  /* Outside a window (accum_pos 0) no gradient is kept: the resumed run starts a new window. */
  int in_window = t->tr__accum_pos > 0;
  memset(s, 0, sizeof *s);
  s->n = t->model.n_params;
  s->optim = (uint32_t)t->optim.kind;
  s->n_buf = (uint32_t)t->tr__n_buf;
  s->flags = (t->tr__grads_zeroed && in_window ? TR__F_ZEROED : 0) | (HK_FLOW_HAS(&t->tr__flow, HK_SIGNAL_BIT(HK_SKIP_STEP)) && in_window ? TR__F_SKIP : 0) |
             (HK_FLOW_HAS(&t->tr__flow, HK_SIGNAL_BIT(HK_STOP)) ? TR__F_STOP : 0) | (t->tr__epoch_ended ? TR__F_ENDED : 0) |
             (t->tr__has_momentum ? TR__F_MOMENTUM : 0);
  s->n_tensors = t->model.n_tensors;
  s->tensors = t->model.tensors;
  s->loop[0] = t->seed;
  s->loop[1] = t->rng.state;
  s->loop[2] = (uint64_t)t->epoch;
  s->loop[3] = (uint64_t)t->global_step;
  s->loop[4] = (uint64_t)t->epoch_batch;
  s->loop[5] = (uint64_t)t->samples_seen;
  s->loop[6] = (uint64_t)t->tr__val_at;
  s->loop[7] = (uint64_t)t->tr__accum_pos;
  s->loop[8] = (uint64_t)(in_window ? t->tr__accum_n : 0);
  s->params = t->model.params;
  s->m = t->tr__n_buf >= 1 ? t->tr__m : NULL;
  s->v = t->tr__n_buf >= 2 ? t->tr__v : NULL;
  s->grads = in_window ? t->model.grads : NULL; /* inside an accumulation window: the partial sum must survive */
  if (data && data->len) { s->data = data->data; s->data_len = data->len; }
  if ((s->has_lrst = tr__lr_state_any(&t->tr__run->lr_state)) != 0) tr__lr_state_put(s->lrst, &t->tr__run->lr_state);
  if (!data) return t->tr__err;
  if (hk_state_save(t->reg, tr__run_state_sink, hooks) != HK_OK)
    return tr__fail(t, TR_ERR_STATE, "saving hook state failed: %s", hk_last_error(t->reg));
  if (hooks->failed) return tr__fail(t, TR_ERR_NOMEM, "tr_save: out of memory");
  s->hooks = hooks->data;
  s->hooks_len = hooks->len;
  return TR_OK;
}

static void tr__write_all(tr__writer *w, const tr__snap *s) {
  size_t n = (size_t)s->n, meta = 8 + 4 + 4 + 4, p;
  int i;
  unsigned char header[16];
  memcpy(header, TR__MAGIC, 8);
  tr__le(header + 8, TR__VERSION, 4);
  tr__le(header + 12, 0, 4);
  w->left = 16;
  tr__w_put(w, header, 16);

  for (i = 0; i < s->n_tensors; i++) meta += 4 + strlen(s->tensors[i].name) + 16;
  tr__w_begin(w, TR__META, meta);
  tr__w_u64(w, n);
  tr__w_u32(w, s->optim);
  tr__w_u32(w, s->n_buf);
  tr__w_u32(w, (uint32_t)s->n_tensors);
  for (i = 0; i < s->n_tensors; i++) {
    const tr_tensor *x = &s->tensors[i];
    size_t len = strlen(x->name);
    tr__w_u32(w, (uint32_t)len);
    tr__w_put(w, x->name, len);
    tr__w_u64(w, x->offset);
    tr__w_u64(w, x->count);
  }
  tr__w_end(w);

  tr__w_begin(w, TR__LOOP, TR__LOOP_SIZE);
  for (i = 0; i < 9; i++) tr__w_u64(w, s->loop[i]);
  tr__w_u32(w, s->flags);
  tr__w_end(w);

  tr__w_begin(w, TR__PARM, 4 * (uint64_t)n);
  tr__w_f32s(w, s->params, n);
  tr__w_end(w);

  tr__w_begin(w, TR__OPTM, 4 * (uint64_t)n * (uint64_t)s->n_buf);
  if (s->n_buf >= 1) tr__w_f32s(w, s->m, n);
  if (s->n_buf >= 2) tr__w_f32s(w, s->v, n);
  tr__w_end(w);

  if (s->grads) {
    tr__w_begin(w, TR__GRAD, 4 * (uint64_t)n);
    tr__w_f32s(w, s->grads, n);
    tr__w_end(w);
  }
  if (s->data_len) { /* the training iterator's position */
    tr__w_begin(w, TR__DATA, s->data_len);
    tr__w_put(w, s->data, s->data_len);
    tr__w_end(w);
  }
  if (s->has_lrst) { /* the schedule's state */
    tr__w_begin(w, TR__LRST, sizeof s->lrst);
    tr__w_put(w, s->lrst, sizeof s->lrst);
    tr__w_end(w);
  }
  for (p = 0; p + 4 <= s->hooks_len;) { /* one HOOK section per stateful hook */
    size_t klen = (size_t)tr__get(s->hooks + p, 4), len = (size_t)tr__get(s->hooks + p + 4 + klen, 8);
    tr__w_begin(w, TR__HOOK, 4 + (uint64_t)klen + 8 + len);
    tr__w_put(w, s->hooks + p, 4 + klen + 8 + len); /* u32 key length | key | u64 length | state */
    tr__w_end(w);
    p += 4 + klen + 8 + len;
  }
  tr__w_begin(w, TR__END, 0);
  tr__w_end(w);
  tr__w_flush(w);
}

/* The background writer's job: the file from the snapshot in the staging buffer. */
static void tr__save_job(tr__asave *as, tr__afile *a) {
  tr__writer w;
  memset(&w, 0, sizeof w);
  w.cap = 1 << 16;
  if (!(w.buf = (unsigned char *)malloc(w.cap))) { a->err = ENOMEM; a->step = "writing"; return; }
  w.af = a;
  tr__write_all(&w, (const tr__snap *)as->job_user);
  free(w.buf);
}

/* The loop's side: the file is on disk (on_checkpoint_saved), or the write failed the run. */
static void tr__save_ended(tr__asave *as, hk_ctx *ctx) {
  tr_trainer *t = (tr_trainer *)as->owner;
  const char *path = t->ctx.path;
  (void)ctx;
  if (as->err) { tr__fail(t, as->err == ENOMEM ? TR_ERR_NOMEM : TR_ERR_IO, "tr_save (in the background): %s", as->why); return; }
  t->ctx.path = as->path;
  tr__fire(t, HK_ON_CHECKPOINT_SAVED);
  t->ctx.path = path;
}

/* The step's part of an asynchronous tr_save: one copy of the snapshot's arrays and bytes into the
   staging buffer (reused; grown only when the state grows), then the writer thread takes it. */
static void tr__stage_file(tr_trainer *t, const char *path, const tr__snap *live) {
  tr__run_priv *q = t->tr__run->tr__p;
  tr__asave *as;
  tr__snap *s;
  size_t n4 = 4 * (size_t)live->n, at = 0;
  size_t total = n4 * (1 + live->n_buf + (live->grads != NULL)) + live->data_len + live->hooks_len;
  if (!q->asave && !(q->asave = tr__asave_new())) { tr__fail(t, TR_ERR_NOMEM, "tr_save: out of memory"); return; }
  as = q->asave;
  if (!as->job_user && !(as->job_user = malloc(sizeof(tr__snap)))) { tr__fail(t, TR_ERR_NOMEM, "tr_save: out of memory"); return; }
  if (tr__asave_reserve(as, total) || tr__asave_set_path(as, path)) {
    tr__fail(t, TR_ERR_NOMEM, "tr_save: out of memory staging '%s' (%zu bytes)", path, total);
    return;
  }
  s = (tr__snap *)as->job_user;
  *s = *live;
#define TR__STAGE(field, type, bytes) \
  do { if (live->field) { memcpy(as->buf + at, live->field, (bytes)); s->field = (type)(const void *)(as->buf + at); at += (bytes); } } while (0)
  TR__STAGE(params, const float *, n4); /* n4 is a multiple of 4: every array stays aligned */
  TR__STAGE(m, const float *, n4);
  TR__STAGE(v, const float *, n4);
  TR__STAGE(grads, const float *, n4);
  TR__STAGE(data, const unsigned char *, live->data_len);
  TR__STAGE(hooks, const unsigned char *, live->hooks_len);
#undef TR__STAGE
  as->len = at;
  as->job = tr__save_job;
  as->done = tr__save_ended;
  as->owner = t;
  tr__asave_submit(as);
  t->tr__staged = 1;
}

/* Write to a temporary file, flush it to the disk, then rename it over path (tr__afile): a crash at any
   moment leaves either the old checkpoint or the new one, never half of one. Every failure removes the
   temporary file and names the file that failed. path may be a symlink (model_checkpoint's last.ckpt
   link): the link is replaced, never followed; a device or a directory at path is never replaced.
   With tr__async_now the file is staged for the background writer instead (the same bytes). */
static tr_err tr__save_file(tr_trainer *t, const char *path) {
  tr__writer w;
  tr__afile a;
  tr__snap snap;
  hk_bytes live, hooks;
  memset(&live, 0, sizeof live);
  memset(&hooks, 0, sizeof hooks);
  if (tr__snap_take(t, &snap, &live, &hooks) != TR_OK) {
    hk_bytes_free(&live);
    hk_bytes_free(&hooks);
    return t->tr__err;
  }
  if (t->tr__async_now) {
    tr__stage_file(t, path, &snap);
    hk_bytes_free(&live);
    hk_bytes_free(&hooks);
    return t->tr__err;
  }
  memset(&w, 0, sizeof w);
  w.cap = 1 << 16;
  w.buf = (unsigned char *)malloc(w.cap);
  if (!w.buf) { hk_bytes_free(&live); hk_bytes_free(&hooks); return tr__fail(t, TR_ERR_NOMEM, "tr_save: out of memory"); }
  w.af = &a;
  if (tr__afile_open(&a, path, TR__AF_LINK_OK) == 0) {
    tr__write_all(&w, &snap);
    if (!a.err && !t->tr__err) tr__afile_commit(&a, NULL);
  }
  if (!a.tmp) tr__fail(t, TR_ERR_NOMEM, "tr_save: out of memory");
  else if (a.special) tr__fail(t, TR_ERR_IO, "tr_save: '%s' is not a regular file (a device, a FIFO or a directory): it is not replaced", path);
  else if (a.err && !strcmp(a.step, "renaming"))
    tr__fail(t, TR_ERR_IO, "tr_save: renaming '%s' to '%s' failed: %s", a.tmp, path, strerror(a.err));
  else if (a.err)
    tr__fail(t, TR_ERR_IO, "tr_save: %s '%s' failed: %s (the previous '%s' is untouched)", a.step, a.tmp, strerror(a.err), path);
  tr__afile_free(&a);
  free(w.buf);
  hk_bytes_free(&live);
  hk_bytes_free(&hooks);
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
  tr__saves_settle(t, 1); /* one save in flight: this one waits for the last (a failed one fails the run) */
  run_err = t->tr__err;
  run_flow = t->tr__flow;
  if (run_err) memcpy(run_msg, t->error, sizeof run_msg);
  t->tr__err = TR_OK; /* an on_exception handler may save while the run is failing: a clean slate */
  t->tr__saving = 1;
  t->tr__staged = 0;
  t->tr__async_now = t->running != HK_STAGE_NONE && !t->tr__run->tr__p->sync_only && (t->tr__async || (t->tr__run->tr__p->async_requests && t->tr__in_request));
  if (!path || !path[0]) tr__fail(t, TR_ERR_INVALID, "tr_save: no path");
  else {
    t->ctx.path = path;
    tr__fire(t, HK_ON_SAVE_CHECKPOINT); /* hooks may update what they save */
    (void)tr__dev_to_host(t);    /* CUDA: from host mirrors (a failure is the run's error: nothing is written) */
  }
  /* also after a failure: every rank takes part in the same agreements (TRAIN_MPI) */
  tr__dist_save_file(t, path);   /* rank 0 writes (the only writer, unless failed), then every rank goes on */
  tr__dev_unswap(t);
  if (!t->tr__err && !t->tr__staged) tr__fire(t, HK_ON_CHECKPOINT_SAVED); /* staged: once it is on disk */
  t->tr__async_now = t->tr__staged = 0;
  tr__dist_agree(t);
  t->ctx.path = NULL;
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
  tr_sched_state lr_state;    /* the LRST section's; zero (the start) without one */
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
  if (ck->version >= 2 && len - pos >= 4 && tr__get(buf + pos, 4) == TR__LRST) {
    tr__section ls;
    char why[200];
    if (tr__expect(t, buf, len, &pos, TR__LRST, &ls)) return t->tr__err;
    if (tr__lr_state_get(ls.p, ls.n, &ck->lr_state, why, sizeof why)) return tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: %s", why);
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
  tr_sched_state lr_state;
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
  ls->lr_state = t->tr__run->lr_state;
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
  t->tr__run->lr_state = ls->lr_state;
  t->tr__data_state = ls->data;
  t->ctx.epoch = t->epoch;
  t->ctx.global_step = t->global_step;
  t->ctx.samples_seen = t->samples_seen;
  t->ctx.batch_idx = t->epoch_batch;
  hk_grads_changed(&t->ctx);
}

/* on_exception_checkpoint: the state after the last completed optimizer step. A window that began and
   did not step (the failure came inside it, or a stop signal after one of its micro-batches) is
   undone: the loop's position goes back to its first batch and its gradients are not saved, so the
   resumed run repeats it. The trainer's counters are put back after the save. */
static tr_err tr__save_failed(void *user, hk_ctx *ctx, const char *path, char *why, size_t cap) {
  tr_trainer *t = (tr_trainer *)user;
  tr__loop_state kept;
  tr_err e;
  tr__get_loop(t, &kept);
  if (t->tr__win_open) {
    t->epoch_batch = t->tr__win_batch;
    t->samples_seen = t->tr__win_samples;
    t->tr__accum_pos = t->tr__accum_n = 0;
    t->tr__grads_zeroed = 0;
    t->tr__epoch_ended = 0;
    if (t->tr__val_at > t->epoch_batch) t->tr__val_at = -1;
  }
  e = tr__save_for_request(user, ctx, path, why, cap);
  tr__set_loop(t, &kept);
  return e;
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
static tr_err tr__load_host(tr_trainer *t, const unsigned char *buf, size_t len, const char *path) {
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
  tr__dev_upload(t); /* CUDA: the device gets what was read (section CUDA) */
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
  after.lr_state = ck.lr_state;
  tr__set_loop(t, &after); /* no DATA section: the next fit starts the iterator afresh */

  t->ctx.path = path;
  tr__fire(t, HK_ON_LOAD_CHECKPOINT); /* hook state is already restored */
  t->ctx.path = NULL;
  if (t->tr__err && listened) { /* put everything back, as if the load had never started */
    memcpy(t->model.params, floats_before, 4 * n);
    if (t->tr__n_buf >= 1) memcpy(t->tr__m, floats_before + n, 4 * n);
    if (t->tr__n_buf >= 2) memcpy(t->tr__v, floats_before + 2 * n, 4 * n);
    if (t->model.grads) memcpy(t->model.grads, floats_before + n * (size_t)(1 + t->tr__n_buf), 4 * n);
    tr__dev_upload(t);
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

/* With TRAIN_CUDA the checkpoint is read into host mirrors of the device buffers (section CUDA). */
static tr_err tr__load_mem(tr_trainer *t, const unsigned char *buf, size_t len, const char *path) {
  if (!tr__dev_to_host(t)) tr__load_host(t, buf, len, path);
  tr__dev_unswap(t);
  return t->tr__err;
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



#if TR__ON_LR_FINDER
/* ---- lr_finder ------------------------------------------------------------------------------------ */
typedef struct tr__lrf {
  tr_lr_finder_state pub;
  tr_run *run;          /* the registry's run: what the loop says (section THE RUN LAYER) */
  double min_lr, max_lr, threshold;
  int steps, update_attr, verbose;
  char *curve_path;
  double *lrs, *losses;
} tr__lrf;

static void tr__lrf_destroy(void *user) {
  tr__lrf *s = (tr__lrf *)user;
  free(s->lrs);
  free(s->losses);
  free(s->curve_path);
  free(s);
}

/* Lightning's suggestion: the steepest descent (numpy.gradient's argmin over the index) of the
   finite smoothed losses, skipping the first 10 points and the last one; -1 with too few points. */
static int tr__lrf_suggest(const double *loss, int n) {
  enum { SKIP_BEGIN = 10, SKIP_END = 1 };
  int i, best = -1, m = n - SKIP_BEGIN - SKIP_END;
  double best_g = HUGE_VAL;
  const double *y = loss + SKIP_BEGIN;
  if (m < 2) return -1;
  for (i = 0; i < m; i++) {
    double g;
    if (!hk_is_finite(y[i])) return -1;
    g = i == 0 ? y[1] - y[0] : i == m - 1 ? y[m - 1] - y[m - 2] : (y[i + 1] - y[i - 1]) / 2;
    if (g < best_g) { best_g = g; best = i; }
  }
  return best < 0 ? -1 : best + SKIP_BEGIN;
}

/* The sweep itself: N optimizer steps driven by hand (no hooks fire), everything restored after. */
static hk_signal tr__lrf_sweep(tr__lrf *s, hk_ctx *ctx, tr_trainer *t) {
  const tr_config *c = t->tr__cfg;
  const tr_data *d = c->train;
  size_t n = t->model.n_params, bytes = n * sizeof(float);
  float *save = (float *)malloc(bytes * (size_t)(2 + t->tr__n_buf));
  int64_t count = d->count(d->user), step0 = t->global_step;
  int has_mom = t->tr__has_momentum, i, stop = 0;
  double avg = 0, best = HUGE_VAL, beta = 0.98;
  if (!save) return hk_fail(ctx, "lr_finder: out of memory");
  if (count <= 0) { free(save); return hk_fail(ctx, "lr_finder: the training data has no batches"); }
  if (d->next && !d->reset) { free(save); return hk_fail(ctx, "lr_finder: iterator training data needs reset() (the sweep rewinds it)"); }
  memcpy(save, t->model.params, bytes);
  memcpy(save + n, t->model.grads, bytes);
  if (t->tr__n_buf > 0) memcpy(save + 2 * n, t->tr__m, bytes);
  if (t->tr__n_buf > 1) memcpy(save + 3 * n, t->tr__v, bytes);
  s->pub.n = 0;
  for (i = 0; i < s->steps && !stop; i++) {
    double lr = s->min_lr * pow(s->max_lr / s->min_lr, s->steps > 1 ? (double)i / (double)(s->steps - 1) : 0.0), loss = 0, smooth;
    void *batch = NULL;
    int rc = d->next ? d->next(d->user, &batch) : d->get(d->user, i % count, &batch);
    if (rc) { stop = 2; break; }
    if (t->model.forward(t->model.user, batch, 1, &loss)) { stop = 2; break; }
    memset(t->model.grads, 0, bytes);
    if (t->model.backward(t->model.user, batch)) { stop = 2; break; }
    hk_grads_changed(&t->ctx);
    if (c->gradient_clip_val > 0) tr__clip_gradients(t);
    t->global_step = step0 + i; /* AdamW's bias correction counts the sweep's steps */
    tr__update(t, lr);
    avg = beta * avg + (1 - beta) * loss;
    smooth = avg / (1 - pow(beta, i + 1));
    s->lrs[i] = lr;
    s->losses[i] = smooth;
    s->pub.n = i + 1;
    if (!hk_is_finite(smooth) || (s->threshold > 0 && i > 1 && smooth > s->threshold * best)) stop = 1; /* diverged */
    if (smooth < best || i == 0) best = smooth;
    if (d->next && i + 1 < s->steps && (i + 1) % count == 0 && d->reset(d->user)) { stop = 2; break; }
  }
  /* restore exactly what the fit starts from */
  memcpy(t->model.params, save, bytes);
  memcpy(t->model.grads, save + n, bytes);
  if (t->tr__n_buf > 0) memcpy(t->tr__m, save + 2 * n, bytes);
  if (t->tr__n_buf > 1) memcpy(t->tr__v, save + 3 * n, bytes);
  free(save);
  t->global_step = step0;
  t->tr__has_momentum = has_mom;
  hk_grads_changed(&t->ctx);
  t->ctx.loss = NAN;
  if (d->next && d->reset(d->user)) stop = 2;
  if (stop == 2) return hk_fail(ctx, "lr_finder: the model or the data failed during the sweep (step %d)", i);
  return HK_CONTINUE;
}

static hk_signal tr__lrf_fit_start(hk_ctx *ctx, void *user) {
  tr__lrf *s = (tr__lrf *)user;
  tr_run *run = s->run;
  tr_trainer *t = run ? (tr_trainer *)run->trainer : NULL;
  int k;
  if (!t) return hk_fail(ctx, "lr_finder: needs train.h's tr_fit (it re-runs training steps itself); a hand-written loop "
                         "can sweep the learning rate with its own steps");
  if (tr__host_views(ctx, ctx->params, "lr_finder")) return HK_FAIL;
  if (s->pub.done) { /* a resumed fit: the same learning rate, no second sweep */
    if (s->update_attr && hk_is_finite(s->pub.suggestion)) t->optim.lr = s->pub.suggestion;
    return HK_CONTINUE;
  }
  if (t->global_step != 0 || t->epoch_batch != 0) return HK_CONTINUE; /* only before the first step */
  if (tr__lrf_sweep(s, ctx, t) == HK_FAIL) return HK_FAIL;
  s->pub.done = 1;
  k = tr__lrf_suggest(s->losses, s->pub.n);
  s->pub.suggestion_index = k;
  s->pub.suggestion = k >= 0 ? s->lrs[k] : NAN;
  if (s->verbose) {
    if (k >= 0) tr__run_say_on(run, ctx, 1, "lr_finder", "suggested learning rate %.6g (steepest descent of the smoothed loss, %d points%s)",
                           s->pub.suggestion, s->pub.n, s->update_attr ? "; set as the optimizer's lr" : "");
    else tr__run_say_on(run, ctx, 1, "lr_finder", "no suggestion: too few points (%d; it needs at least 13) or a non-finite loss; lr stays %g",
                    s->pub.n, t->optim.lr);
  }
  if (s->update_attr && k >= 0) {
    t->optim.lr = s->pub.suggestion;
    t->lr = t->ctx.lr = tr__current_lr(t);
  }
  if (s->curve_path && ctx->rank == 0) { /* one file for the job (every rank sweeps the same), written whole */
    hk_bytes b;
    char why[1100];
    int e;
    memset(&b, 0, sizeof b);
    tr__putf(&b, "lr,loss\n");
    for (k = 0; k < s->pub.n; k++) tr__putf(&b, "%.9g,%.9g\n", s->lrs[k], s->losses[k]);
    e = b.failed ? ENOMEM : tr__write_whole(s->curve_path, b.data, b.len, 0, NULL, why, sizeof why);
    hk_bytes_free(&b);
    if (e) return hk_fail(ctx, "lr_finder: cannot write the curve to '%s': %s", s->curve_path, e == ENOMEM ? "out of memory" : why);
  }
  return HK_CONTINUE;
}
static int tr__lrf_save(void *user, hk_bytes *out) {
  tr__lrf *s = (tr__lrf *)user;
  tr__put_u64(out, 1);
  tr__put_u64(out, (uint64_t)s->pub.done);
  tr__put_f64(out, s->pub.suggestion);
  return out->failed ? -1 : 0;
}
static int tr__lrf_load(void *user, hk_reader *in) {
  tr__lrf *s = (tr__lrf *)user;
  uint64_t done = 0;
  double v = 0;
  if (tr__get_version(in, 1)) return -1;
  if (tr__get_u64(in, &done) || done > 1) return hk_reject(in, "done is truncated or not 0 or 1");
  if (tr__get_f64(in, &v)) return hk_reject(in, "truncated at suggestion");
  if (v == v && (!hk_is_finite(v) || v <= 0)) /* NaN: no suggestion; else a learning rate */
    return hk_reject(in, "suggestion is %g; a learning rate is finite and > 0 (NaN: none)", v);
  if (tr__get_end(in)) return -1;
  s->pub.done = (int)done;
  s->pub.suggestion = v;
  s->pub.suggestion_index = -1;
  s->pub.n = 0;
  return 0;
}
static tr_err tr__lrf_make(hk_registry *reg, const tr_lr_finder_desc *d, hk_handle *out, tr__why *w) {
  tr__lrf *s;
  hk_callback cb;
  double lo, hi;
  if (!d) return tr__bad(w, "lr_finder: desc is NULL");
  lo = d->min_lr == 0 ? 1e-8 : d->min_lr;
  hi = d->max_lr == 0 ? 1.0 : d->max_lr;
  if (!hk_is_finite(lo) || !hk_is_finite(hi) || lo <= 0 || hi <= lo)
    return tr__bad(w, "lr_finder: need 0 < min_lr < max_lr (got min_lr=%g, max_lr=%g)", lo, hi);
  if (d->num_training_steps < 0 || d->num_training_steps == 1 || d->num_training_steps > 1000000)
    return tr__bad(w, "lr_finder: num_training_steps must be in 2..1000000 (0 = 100), got %d", d->num_training_steps);
  if (!hk_is_finite(d->early_stop_threshold) || (d->early_stop_threshold > 0 && d->early_stop_threshold <= 1))
    return tr__bad(w, "lr_finder: early_stop_threshold must be > 1 (0 = 4, negative = never), got %g", d->early_stop_threshold);
  s = (tr__lrf *)calloc(1, sizeof *s);
  if (!s) return tr__bad(w, "lr_finder: out of memory"), TR_ERR_NOMEM;
  s->run = tr_run_get(reg);
  s->min_lr = lo;
  s->max_lr = hi;
  s->steps = d->num_training_steps ? d->num_training_steps : 100;
  s->threshold = d->early_stop_threshold == 0 ? 4.0 : d->early_stop_threshold;
  s->update_attr = tr__flag(d->update_attr, 1);
  s->verbose = tr__flag(d->verbose, 1);
  s->pub.suggestion = NAN;
  s->pub.suggestion_index = -1;
  s->lrs = (double *)calloc((size_t)s->steps, sizeof(double));
  s->losses = (double *)calloc((size_t)s->steps, sizeof(double));
  if (!s->lrs || !s->losses || (d->curve_path && d->curve_path[0] && !(s->curve_path = tr__strdup(d->curve_path)))) {
    tr__lrf_destroy(s);
    return tr__bad(w, "lr_finder: out of memory"), TR_ERR_NOMEM;
  }
  s->pub.lrs = s->lrs;
  s->pub.losses = s->losses;
  memset(&cb, 0, sizeof cb);
  cb.name = "lr_finder";
  cb.user = s;
  cb.on_fit_start = tr__lrf_fit_start;
  cb.save_state = tr__lrf_save;
  cb.load_state = tr__lrf_load;
  cb.destroy = tr__lrf_destroy;
  return tr__cb_register(reg, &cb, -30, out, w); /* first at on_fit_start: the others see the chosen lr */
}
TR__PUBLIC_OF(tr_lr_finder, lrf)

#endif /* TR__ON_LR_FINDER */
#endif /* TRAIN_NO_TRAINER */

/* =================================================================================================
   MPI STRATEGY (TRAIN_MPI)
   Data parallelism across processes, Lightning's DDP on MPI: every rank holds the whole model, trains
   on its own shard of each epoch's batches, and the gradients are summed across ranks once per
   optimizer step, so the parameters stay bit-identical on every rank. Compiled in by
   #define TRAIN_MPI in the implementation's translation unit (build it with mpicc, run with mpirun);
   without the define every function below does nothing and MPI is not needed. In one process (no
   mpirun, or mpirun -np 1) the strategy keeps no state at all: the run is the plain trainer's, bit
   for bit. tr_init calls MPI_Init when the program has not (and then MPI_Finalize at exit); a program
   that uses MPI itself calls MPI_Init before tr_init and MPI_Finalize after tr_free. The trainer talks
   on its own duplicate of MPI_COMM_WORLD, so its messages never mix with the program's.

   Collectives happen only at the trainer's fixed points below, on every rank, in the same order, also
   after a failure on that rank (it takes part, contributing its failure). Never inside a hook: a hook
   may run on one rank only (hk_opts.rank_zero_only) without deadlocking the job.

   THE GRADIENT POINT (once per optimizer step): after on_after_backward of a window's last micro-batch,
   before the averaging and on_before_optimizer_step. Every rank contributes the sum of its window's
   gradients (zeros when it skipped them all) and its count of micro-batches that ran backward; the
   sum over ranks is divided by the total count (the trainer's usual averaging). So
   on_before_optimizer_step, clipping, on_gradient_clip and the optimizer see the same averaged
   gradient on every rank; on_after_backward sees the rank's own. Micro-batches before a window's last
   do not communicate. The sum is in rank order, g0 + g1 + ... + g(W-1), on every rank: with two ranks
   by MPI_Allreduce (a + b == b + a exactly in IEEE arithmetic), with three or more by an all-gather
   and a sum in rank order (MPI_Allreduce may add in any order, and differently per call).

   AGREEMENT POINTS: after configure_model, after on_fit_start, after on_train_start, after each
   epoch's start, before each optimizer step (after on_gradient_clip), after each training batch
   (after on_train_batch_end), after on_train_epoch_end, after on_train_end, when an evaluation loop
   counts its batches and at its end, inside tr_save, and when the run ends. One small
   MPI_Allreduce combines, over all ranks: whether a rank failed (the first failed rank's error, code
   and message, is then sent to every other rank: "rank 1: hook 'x' failed ..."), the OR of the
   signals hooks raised (skip step, skip batch, stop epoch, stop: any rank's signal acts on every
   rank), the OR of the requests (validation, checkpoint, log), and the largest Ctrl-C/SIGTERM count.
   The gradient point carries the same vote. So a skip_step on one rank skips the step everywhere, an
   early stop on one rank stops all at the same step, and a failure on one rank fails all, each
   through on_exception, without a hang. Every vote also carries its agreement point's identity (its
   line in train.h): ranks at different points (a tr_set_accumulation or a tr_save on one rank only)
   all fail there with TR_ERR_COMM, "the ranks are out of step ... rank 0 at train.h:N, rank 1 at
   train.h:M", and communicate no more until the next run's start, before a gradient sum could pair
   with the wrong call. Two int64 more in the vote: nothing else on the step path.

   START AGREEMENTS: what must be the same on every rank is compared before anything relies on it, by
   an all-gather of a few numbers per rank; a difference fails every rank with one message naming it
   and the values per rank ("max_epochs (rank 0: 3, rank 1: 1)"). tr_init: model.n_params, the
   tensors' names, offsets and counts, model.on_device, the seed, the optimizer and schedule settings
   (TR_ERR_INVALID). The start of tr_fit / tr_validate / tr_test / tr_predict: which function each
   rank called, and for tr_fit the resolved max_epochs, max_steps, min_epochs, min_steps,
   limit_train_batches, limit_val_batches, num_sanity_val_steps, val_every_n_steps,
   val_every_n_epochs, accumulate_grad_batches, gradient clipping, whether val / save_to are set and
   whether the data are iterators (TR_ERR_INVALID, before setup fires). After resume_from: the loop
   counters (a resume on some ranks only fails every rank through on_exception). A rank whose own
   tr_init, tr_fit or evaluation refuses its arguments takes part with its error, so the others fail
   with "rank 1: tr_init: threads is -1 ..." instead of waiting.

   A RANK THAT IS GONE: a rank that returns before a collective (an error of its own before tr_fit)
   and calls MPI_Finalize leaves the others waiting, and Open MPI's MPI_Finalize then waits for them
   too: the job hangs (a rank that exits without MPI_Finalize makes mpirun end the job). tr_init
   (MPI_Comm_idup) and the start agreements therefore poll a nonblocking collective for at most
   tr_desc.mpi_timeout seconds (default 1800, torch.distributed's; < 0 forever), then fail with
   TR_ERR_COMM: "not every rank arrived within 1800 s". The pending collective cannot be cancelled,
   so the trainer's MPI state is left to MPI (not freed) and the trainer communicates no more: end the
   job (MPI_Abort). The collectives inside a run are not timed (no cost on the step path): a rank that
   dies in a fit is ended by mpirun. Rule: every rank calls tr_init, tr_fit, tr_validate, tr_test,
   tr_predict and tr_save alike, and on an error of its own calls MPI_Abort rather than returning alone.

   DATA: with random-access data (get) the trainer shards: the same shuffle on every rank, and local
   batch b of rank r is the data's batch b * W + r. Training takes floor(count / W) batches per rank
   (every rank the same number; the count % W batches of the tail are left out each epoch, as
   DistributedSampler(drop_last=True)); limit_train_batches then caps each rank's share. Validation
   and test take every batch once: rank r gets r, r + W, ... (the last round may be uneven; evaluation
   loops do not communicate per batch); val/loss and test/loss are the mean over all ranks' batches,
   the same on every rank. Iterator data (next) is not sharded by the trainer: each rank's iterator
   yields its own shard, and its count() is the rank's count (training: equal on every rank, checked).

   RANK ZERO: checkpoints are written by rank 0 alone (atomically, as always); every rank runs
   on_save_checkpoint and on_checkpoint_saved, after rank 0's write has finished (a barrier), and a
   failed write fails every rank. The paths hooks queued with hk_request_checkpoint are rank 0's.
   Every rank loads the same file on resume. HK_REQUEST_LOG lines are written by rank 0.

   WHAT HOOKS SEE: ctx->rank and ctx->world_size; ctx->loss, train/loss and samples_seen are the
   rank's own; val/loss, test/loss, the gradients from on_before_optimizer_step on, grad_norm there,
   and the parameters are the same on every rank.

   GPU: with TRAIN_CUDA too (a .cu file built by nvcc with the MPI include path, linked with -lmpi
   -lnccl), an on_device model's gradients are summed by NCCL (ncclAllReduce on tr_model.stream,
   where every kernel of the step runs: no host wait). NCCL adds in its own order, the same bits on
   every rank (with two ranks equal to the rank order). One GPU per rank: each rank selects its GPU
   (cudaSetDevice, e.g. from OMPI_COMM_WORLD_LOCAL_RANK) before it allocates the model.

   CORES: ranks on one host (MPI_Comm_split_type: sharing memory) beyond its cores make Open MPI's
   waiting ranks busy-poll (4 ranks on 2 cores: 16-64 ms a step instead of 0.3-0.5 ms); tr_init then
   says so once on rank 0, naming the fix, mpirun --mca mpi_yield_when_idle 1 (silent when it is set).

   LIMITS: a checkpoint written inside an accumulation window (before its last micro-batch) holds rank
   0's partial gradient and iterator position, so resuming from it is exact on rank 0 only; windows'
   ends (the usual case) and epoch ends resume exactly. Data must be the same on every rank (or, for
   iterators, equally long shards). tr_save must be called on every rank (it synchronises; rank 0
   writes): from a hook use hk_request(ctx, HK_REQUEST_CHECKPOINT) instead. tr_load alone does not
   synchronise. Checkpoints do not record the number of ranks: resuming with another number works but
   splits the batches differently (not bit-exact). */
#ifdef TRAIN_MPI
#ifdef TR__POSIX
#  include <poll.h> /* poll(NULL, 0, ms): a sleep that strict C99 headers still declare */
#endif

#define TR__DIST_PATH 1024        /* a checkpoint path sent from rank 0: at most this many bytes */
#define TR__DIST_CHUNK (1 << 20)  /* floats per collective call (counts are ints; bounds the gather buffer) */
#define TR__FACTS 24              /* int64 per rank in a start agreement: where, this rank's error, facts */

/* The vote of an agreement point: X(field, how two ranks' values combine into one). */
#define TR__VOTE(X) \
  X(FAILED,   a + b)              /* ranks that have failed */ \
  X(FIRST,    a < b ? a : b)      /* the lowest failed rank (W when none) */ \
  X(SIGNALS,  a | b)              /* hk_flow signal bits */ \
  X(REQUESTS, a | b)              /* HK_REQUEST_* bits */ \
  X(SIGINT,   a > b ? a : b)      /* Ctrl-C / SIGTERM count */ \
  X(SUM,      a + b)              /* micro-batches that ran backward; evaluation batches counted */ \
  X(LEAST,    a < b ? a : b)      /* batch counts: the smallest and the largest */ \
  X(MOST,     a > b ? a : b) \
  X(SITE_LO,  a < b ? a : b)      /* which agreement point (its line): ranks that differ are out of step */ \
  X(SITE_HI,  a > b ? a : b)
enum {
#define TR__X(name, op) TR__V_##name,
  TR__VOTE(TR__X)
#undef TR__X
  TR__V_COUNT
};

typedef struct tr__dist {
  MPI_Comm comm;            /* the trainer's own duplicate of MPI_COMM_WORLD */
  MPI_Datatype vote_type;   /* one vote: TR__V_COUNT int64 */
  MPI_Op vote_op;           /* tr__dist_combine */
  int rank, world;
  int broken;               /* the ranks were out of step: no collective until the next run's start */
  int dead;                 /* a start agreement timed out: no collective ever again (a rank is gone) */
  int64_t most;             /* the largest rank-local batch count of the last tr__dist_shard */
  float *gather;            /* world * min(n_params, TR__DIST_CHUNK) floats (three or more ranks) */
  double *sums;             /* world evaluation loss sums */
  int64_t *facts;           /* world * TR__FACTS: every rank's facts of the last start agreement */
#ifdef TRAIN_CUDA
  ncclComm_t nccl;          /* an on_device model's gradients go through NCCL (NULL: none) */
#endif
  char paths[HK_MAX_CHECKPOINT_PATHS][TR__DIST_PATH];
} tr__dist;

static int tr__dist_we_initialised;
static void tr__dist_finalize(void) {
  int done = 0;
  MPI_Finalized(&done);
  if (!done) MPI_Finalize();
}

static void tr__dist_combine(void *in, void *inout, int *len, MPI_Datatype *type) {
  const int64_t *x = (const int64_t *)in;
  int64_t *y = (int64_t *)inout;
  int i;
  (void)type;
  for (i = 0; i < *len; i++, x += TR__V_COUNT, y += TR__V_COUNT) {
#define TR__X(name, op) { int64_t a = x[TR__V_##name], b = y[TR__V_##name]; y[TR__V_##name] = (op); }
    TR__VOTE(TR__X)
#undef TR__X
  }
}

static tr_err tr__dist_fail(tr_trainer *t, int rc, const char *what) {
  char msg[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return tr__fail(t, TR_ERR_COMM, "%s failed: %s", what, msg);
}

/* Wait for a nonblocking collective of a start agreement, at most `limit` seconds (< 0: forever).
   1 when it completed (rc its result), 0 when the time ran out (it stays pending: MPI cannot cancel a
   collective, so the memory it writes to is never freed). The first millisecond polls, then 1 ms naps. */
static int tr__dist_wait(MPI_Request *rq, double limit, int *rc) {
  double start = MPI_Wtime(), now;
  int done = 0;
  for (;;) {
    *rc = MPI_Test(rq, &done, MPI_STATUS_IGNORE);
    if (*rc != MPI_SUCCESS || done) return 1;
    now = MPI_Wtime();
    if (limit >= 0 && now - start > limit) return 0;
#ifdef TR__POSIX
    if (now - start > 1e-3) (void)poll(NULL, 0, 1);
#endif
  }
}

static const char *tr__dist_timeout_hint =
  "a rank that returned or failed before this call (e.g. on an error of its own before tr_fit) leaves the "
  "others waiting: every rank must call tr_init, tr_fit, tr_validate, tr_test and tr_predict alike; "
  "tr_desc.mpi_timeout sets the limit. This trainer cannot communicate any more: end the job "
  "(MPI_Abort(MPI_COMM_WORLD, 1))";

/* "rank 0: 3, rank 1: 1" (a value per rank; beyond 8 ranks, each distinct value with its first ranks). */
static void tr__dist_values(char *out, size_t cap, const int64_t *all, int world, int at, char kind) {
  size_t len = 0;
  int r, k, shown = 0;
#define TR__PUT(...) do { if (len < cap) { int n_ = snprintf(out + len, cap - len, __VA_ARGS__); if (n_ > 0) len += (size_t)n_; } } while (0)
#define TR__VAL(v) do { if (kind == 'b') TR__PUT("%s", (v) ? "set" : "not set"); \
    else if (kind == 'd') { double d_; memcpy(&d_, &(v), sizeof d_); TR__PUT("%g", d_); } \
    else if (kind == 'x') TR__PUT("%016llx", (unsigned long long)(v)); else TR__PUT("%lld", (long long)(v)); } while (0)
  out[0] = 0;
  if (world <= 8) {
    for (r = 0; r < world; r++) { TR__PUT("%srank %d: ", r ? ", " : "", r); TR__VAL(all[(size_t)r * TR__FACTS + at]); }
    return;
  }
  for (r = 0; r < world && shown < 4; r++) { /* a value not seen on an earlier rank */
    int64_t v = all[(size_t)r * TR__FACTS + at], count = 0, listed = 0;
    for (k = 0; k < r && all[(size_t)k * TR__FACTS + at] != v; k++) {}
    if (k < r) continue;
    TR__PUT("%s", shown++ ? "; " : "");
    TR__VAL(v);
    TR__PUT(" on rank");
    for (k = r; k < world; k++)
      if (all[(size_t)k * TR__FACTS + at] == v && count++ < 3) TR__PUT("%s %d", listed++ ? "," : "", k);
    if (count > 3) TR__PUT(" and %lld more", (long long)(count - 3));
  }
  if (shown == 4) TR__PUT("; ...");
#undef TR__VAL
#undef TR__PUT
}

/* One start agreement: every rank's facts (where it is, its own error, then n named facts) gathered,
   with tr_desc.mpi_timeout. Then every rank knows the same: a rank's error is sent to every other
   rank ("rank 1: ..."), and facts that differ between ranks are one error naming each with its values
   per rank. Returns this rank's outcome (its own error first). */
typedef struct tr__fact { const char *name; char kind; int64_t v; } tr__fact; /* kind: i int, b set, d double, x hash */
static const char *const tr__dist_where[] = { "", "tr_init", "tr_fit", "tr_validate", "tr_test", "tr_predict", "tr_fit (after resuming)" };
enum { TR__AT_INIT = 1, TR__AT_FIT, TR__AT_VALIDATE, TR__AT_TEST, TR__AT_PREDICT, TR__AT_RESUMED };

static tr_err tr__dist_gather(tr_trainer *t, tr__dist *d, int where, tr_err failed, const tr__fact *f, int n, const char *what) {
  int64_t mine[TR__FACTS];
  const int64_t *all = d->facts;
  int r, i, rc, first = -1, differ = 0;
  MPI_Request rq;
  char vals[320];
  size_t len;
  if (d->dead)
    return failed ? failed : tr__fail(t, TR_ERR_COMM, "%s: an earlier agreement between the ranks timed out, so this "
                                      "trainer cannot communicate any more (end the job and start it again)", tr__dist_where[where]);
  d->broken = 0; /* a new run: the ranks meet here again */
  memset(mine, 0, sizeof mine);
  mine[0] = where;
  mine[1] = failed;
  for (i = 0; i < n && !failed; i++) mine[2 + i] = f[i].v;
  rc = MPI_Iallgather(mine, TR__FACTS, MPI_INT64_T, d->facts, TR__FACTS, MPI_INT64_T, d->comm, &rq);
  if (rc == MPI_SUCCESS && !tr__dist_wait(&rq, t->tr__mpi_timeout, &rc)) {
    d->dead = 1;
    if (failed) return failed;
    return tr__fail(t, TR_ERR_COMM, "%s: not every rank arrived within %g s (%d ranks); %s", tr__dist_where[where],
                    t->tr__mpi_timeout, d->world, tr__dist_timeout_hint);
  }
  if (rc != MPI_SUCCESS) { d->dead = 1; return failed ? failed : tr__dist_fail(t, rc, "MPI_Iallgather (start agreement)"); }
  for (r = 0; r < d->world; r++) if (all[(size_t)r * TR__FACTS] != where) break;
  if (r < d->world) { /* every rank can tell: nobody sends anything more */
    if (failed) return failed;
    len = (size_t)snprintf(t->error, sizeof t->error, "%s: the ranks called different functions:", tr__dist_where[where]);
    for (r = 0; r < d->world && len < sizeof t->error; r++) {
      int64_t w = all[(size_t)r * TR__FACTS];
      len += (size_t)snprintf(t->error + len, sizeof t->error - len, "%s rank %d in %s", r ? "," : "", r,
                              w >= 1 && w <= TR__AT_RESUMED ? tr__dist_where[w] : "?");
    }
    t->tr__err = TR_ERR_INVALID;
    return TR_ERR_INVALID;
  }
  for (r = 0; r < d->world && first < 0; r++) if (all[(size_t)r * TR__FACTS + 1]) first = r;
  if (first >= 0) { /* the first failed rank tells every other rank why */
    struct { char msg[sizeof t->error]; } why;
    int64_t code = all[(size_t)first * TR__FACTS + 1];
    memset(&why, 0, sizeof why);
    if (d->rank == first) memcpy(why.msg, t->error, sizeof why.msg);
    rc = MPI_Bcast(&why, (int)sizeof why, MPI_BYTE, first, d->comm);
    if (failed) return failed;
    if (rc != MPI_SUCCESS) return tr__dist_fail(t, rc, "MPI_Bcast (error message)");
    why.msg[sizeof why.msg - 1] = 0;
    return tr__fail(t, code > TR_OK && code < TR_ERR_COUNT ? (tr_err)code : TR_ERR_COMM, "rank %d: %s", first, why.msg);
  }
  len = (size_t)snprintf(t->error, sizeof t->error, "%s: the ranks differ in %s:", tr__dist_where[where], what);
  for (i = 0; i < n; i++) {
    for (r = 1; r < d->world && all[(size_t)r * TR__FACTS + 2 + i] == all[2 + i]; r++) {}
    if (r == d->world) continue;
    tr__dist_values(vals, sizeof vals, all, d->world, 2 + i, f[i].kind);
    if (len < sizeof t->error) len += (size_t)snprintf(t->error + len, sizeof t->error - len, "%s %s (%s)", differ ? ";" : "", f[i].name, vals);
    differ++;
  }
  if (!differ) { t->error[0] = 0; return TR_OK; }
  t->tr__err = TR_ERR_INVALID;
  return TR_ERR_INVALID;
}

static uint64_t tr__dist_hash(uint64_t h, const void *p, size_t n) { return tr__fnv(h, (const unsigned char *)p, n); }

/* More ranks on a host than it has cores: Open MPI's waiting ranks busy-poll and take the cores the
   computing ones need (4 ranks on 2 cores: 16-64 ms a step instead of 0.3-0.5 ms). Ranks on one host
   are the ones that share memory (MPI_Comm_split_type), not the ones with one host name: two hosts
   may report the same name. Each rank compares its host's rank count with the cores it sees
   (sysconf); rank 0 says it, once per process, with the fix (not when the run has it already). */
static void tr__dist_host_check(tr_trainer *t, tr__dist *d) {
  static int said;
  MPI_Comm host;
  long n = 1;
  int local = 1;
  int64_t mine, worst = 0;
#if defined(TR__POSIX) && defined(_SC_NPROCESSORS_ONLN)
  n = sysconf(_SC_NPROCESSORS_ONLN);
#endif
  if (n < 1 || n > (1L << 20)) n = 1;
  { const char *y = getenv("OMPI_MCA_mpi_yield_when_idle"); /* mpirun --mca mpi_yield_when_idle 1 sets it */
    if (y && atoi(y) > 0) n = 1L << 20; }
  if (MPI_Comm_split_type(d->comm, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL, &host) == MPI_SUCCESS) {
    MPI_Comm_size(host, &local);
    MPI_Comm_free(&host);
  }
  /* the host with the most ranks beyond its cores: excess, ranks and cores packed into one MAX */
  mine = local > n ? ((int64_t)(local - n) << 42) | ((int64_t)local << 21) | (int64_t)n : 0;
  if (MPI_Reduce(&mine, &worst, 1, MPI_INT64_T, MPI_MAX, 0, d->comm) != MPI_SUCCESS || d->rank != 0 || !worst || said) return;
  said = 1;
  fprintf(t->tr__log ? t->tr__log : stderr, "train.h: %lld ranks share a host that has %lld cores: Open MPI's waiting ranks "
          "busy-poll and slow every step (many times over); run with mpirun --mca mpi_yield_when_idle 1, or fewer ranks per host\n",
          (long long)((worst >> 21) & ((1 << 21) - 1)), (long long)(worst & ((1 << 21) - 1)));
  fflush(t->tr__log ? t->tr__log : stderr);
}

static tr_err tr__dist_init(tr_trainer *t, tr_err failed) {
  tr__dist *d;
  int init = 0, done = 0, world = 1, rank = 0, rc, i;
  uint64_t layout = TR__FNV_START, optim = TR__FNV_START;
  MPI_Request rq;
  tr_err e;
  MPI_Initialized(&init);
  if (!init) {
    MPI_Finalized(&done);
    if (done) return failed ? failed : tr__fail(t, TR_ERR_COMM, "tr_init: MPI was finalized already; create trainers before MPI_Finalize");
    if ((rc = MPI_Init(NULL, NULL)) != MPI_SUCCESS) return failed ? failed : tr__dist_fail(t, rc, "tr_init: MPI_Init");
    if (!tr__dist_we_initialised) atexit(tr__dist_finalize);
    tr__dist_we_initialised = 1;
  }
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  t->ctx.rank = rank;
  t->ctx.world_size = world;
  if (t->tr__run) t->tr__run->tr__p->rank = rank; /* tr_print's */
  if (world == 1) return failed; /* one process: the plain trainer */
  d = (tr__dist *)calloc(1, sizeof *d);
  if (d) {
    d->rank = rank;
    d->world = world;
    d->sums = (double *)malloc((size_t)world * sizeof(double));
    d->facts = (int64_t *)malloc((size_t)world * TR__FACTS * sizeof(int64_t));
    if (world >= 3 && !failed) {
      size_t chunk = t->model.n_params < TR__DIST_CHUNK ? t->model.n_params : TR__DIST_CHUNK;
      d->gather = (float *)malloc((size_t)world * (chunk ? chunk : 1) * sizeof(float));
    }
  }
  if (!d || !d->sums || !d->facts || (world >= 3 && !failed && !d->gather)) { /* cannot take part: the others time out */
    if (d) { free(d->sums); free(d->facts); free(d->gather); free(d); }
    return failed ? failed : tr__fail(t, TR_ERR_NOMEM, "tr_init: out of memory for the MPI strategy");
  }
  /* the trainer's own communicator, made without waiting forever for a rank that never comes */
  rc = MPI_Comm_idup(MPI_COMM_WORLD, &d->comm, &rq);
  if (rc == MPI_SUCCESS && !tr__dist_wait(&rq, t->tr__mpi_timeout, &rc)) /* d stays allocated: MPI may still write it */
    return failed ? failed : tr__fail(t, TR_ERR_COMM, "tr_init: not every rank arrived within %g s (%d ranks); %s",
                                      t->tr__mpi_timeout, world, tr__dist_timeout_hint);
  if (rc != MPI_SUCCESS) {
    free(d->sums); free(d->facts); free(d->gather); free(d);
    return failed ? failed : tr__dist_fail(t, rc, "tr_init: MPI_Comm_idup");
  }
  MPI_Comm_set_errhandler(d->comm, MPI_ERRORS_RETURN); /* errors are values */
  MPI_Type_contiguous(TR__V_COUNT, MPI_INT64_T, &d->vote_type);
  MPI_Type_commit(&d->vote_type);
  MPI_Op_create(tr__dist_combine, 1, &d->vote_op);
  t->tr__dist = d;
  /* Every rank must hold the same model: the gradient sum runs over n_params floats per rank, and the
     tensors' names, offsets and counts say what each float is (DDP checks the parameters' shapes). */
  if (!failed) {
    for (i = 0; i < t->model.n_tensors; i++) {
      const tr_tensor *x = &t->model.tensors[i];
      uint64_t at = x->offset, count = x->count;
      layout = tr__dist_hash(layout, x->name, strlen(x->name) + 1);
      layout = tr__dist_hash(layout, &at, sizeof at);
      layout = tr__dist_hash(layout, &count, sizeof count);
    }
#define TR__H(field) optim = tr__dist_hash(optim, &(field), sizeof(field))
    TR__H(t->optim.kind); TR__H(t->optim.lr); TR__H(t->optim.weight_decay); TR__H(t->optim.momentum);
    TR__H(t->optim.dampening); TR__H(t->optim.nesterov); TR__H(t->optim.beta1); TR__H(t->optim.beta2); TR__H(t->optim.eps);
    TR__H(t->sched.kind); TR__H(t->sched.warmup); TR__H(t->sched.step_size); TR__H(t->sched.total);
    TR__H(t->sched.gamma); TR__H(t->sched.min_factor); TR__H(t->sched.per_epoch);
    TR__H(t->sched.monitor); TR__H(t->sched.mode); TR__H(t->sched.factor); TR__H(t->sched.patience);
    TR__H(t->sched.threshold); TR__H(t->sched.threshold_mode); TR__H(t->sched.cooldown); TR__H(t->sched.min_lr);
    TR__H(t->sched.eps); TR__H(t->sched.max_lr); TR__H(t->sched.pct_start); TR__H(t->sched.anneal);
    TR__H(t->sched.div_factor); TR__H(t->sched.final_div_factor); TR__H(t->sched.three_phase); TR__H(t->sched.decay);
#undef TR__H
  }
  {
    tr__fact f[6];
    f[0].name = "the parameter count (model.n_params)"; f[0].kind = 'i'; f[0].v = (int64_t)t->model.n_params;
    f[1].name = "the tensor count (model.n_tensors)"; f[1].kind = 'i'; f[1].v = t->model.n_tensors;
    f[2].name = "the tensors' names, offsets and counts (fingerprint)"; f[2].kind = 'x'; f[2].v = (int64_t)layout;
    f[3].name = "model.on_device"; f[3].kind = 'i'; f[3].v = t->model.on_device != 0;
    f[4].name = "the seed (shuffles must match to shard the data)"; f[4].kind = 'i'; f[4].v = (int64_t)t->seed;
    f[5].name = "the optimizer and schedule settings (fingerprint)"; f[5].kind = 'x'; f[5].v = (int64_t)optim;
    e = tr__dist_gather(t, d, TR__AT_INIT, failed, f, 6, "the model or its training settings (every rank needs the same)");
  }
  if (e) {
    if (!d->dead) tr__dist_free(t);
    else t->tr__dist = NULL; /* left to MPI (see tr__dist_wait) */
    return e;
  }
  tr__dist_host_check(t, d);
#ifdef TRAIN_CUDA
  if (TR__ON_DEVICE(t)) { /* llm.c's way: rank 0 makes the id, MPI carries it, every rank joins */
    ncclUniqueId id;
    ncclResult_t nr = ncclSuccess;
    memset(&id, 0, sizeof id);
    if (rank == 0) nr = ncclGetUniqueId(&id);
    if ((rc = MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, d->comm)) != MPI_SUCCESS) return tr__dist_fail(t, rc, "tr_init: MPI_Bcast (NCCL id)");
    if (nr == ncclSuccess) nr = ncclCommInitRank(&d->nccl, world, id, rank);
    if (nr != ncclSuccess) {
      d->nccl = NULL;
      return tr__fail(t, TR_ERR_DEVICE, "tr_init: NCCL could not join the %d ranks: %s (one GPU per rank: select it with "
                      "cudaSetDevice before allocating the model)", world, ncclGetErrorString(nr));
    }
  }
#endif
  return TR_OK;
}

/* What decides a fit's length and its collectives, the same on every rank (as resolved by tr__resolve). */
static tr_err tr__dist_start_fit(tr_trainer *t, const tr_config *c, tr_err failed) {
  tr__fact f[16];
  double clip = 0;
  int n = 0;
  if (!t->tr__dist) return failed;
  if (!failed) clip = c->gradient_clip_val;
#define TR__F(nm, k, val) do { f[n].name = (nm); f[n].kind = (k); f[n].v = failed ? 0 : (int64_t)(val); n++; } while (0)
  TR__F("max_epochs", 'i', c->max_epochs);
  TR__F("max_steps", 'i', c->max_steps);
  TR__F("min_epochs", 'i', c->min_epochs);
  TR__F("min_steps", 'i', c->min_steps);
  TR__F("limit_train_batches", 'i', c->limit_train_batches);
  TR__F("limit_val_batches", 'i', c->limit_val_batches);
  TR__F("num_sanity_val_steps", 'i', c->num_sanity_val_steps);
  TR__F("val_every_n_steps", 'i', c->val_every_n_steps);
  TR__F("val_every_n_epochs", 'i', c->val_every_n_epochs);
  TR__F("accumulate_grad_batches", 'i', c->accumulate_grad_batches);
  TR__F("val", 'b', !failed && c->val != NULL);
  TR__F("train.next (an iterator)", 'b', !failed && c->train && c->train->next != NULL);
  TR__F("val.next (an iterator)", 'b', !failed && c->val && c->val->next != NULL);
  TR__F("gradient_clip_algorithm", 'i', c->gradient_clip_algorithm);
  f[n].name = "gradient_clip_val"; f[n].kind = 'd';
  memcpy(&f[n].v, &clip, sizeof clip);
  n++;
  TR__F("save_to", 'b', !failed && c->save_to != NULL);
#undef TR__F
  return tr__dist_gather(t, (tr__dist *)t->tr__dist, TR__AT_FIT, failed, f, n, "what decides the run's length (tr_config)");
}

static tr_err tr__dist_start_eval(tr_trainer *t, hk_stage stage, const tr_data *data, int64_t limit, tr_err failed) {
  tr__fact f[2];
  int where = stage == HK_STAGE_TEST ? TR__AT_TEST : stage == HK_STAGE_PREDICT ? TR__AT_PREDICT : TR__AT_VALIDATE;
  if (!t->tr__dist) return failed;
  f[0].name = "limit_batches"; f[0].kind = 'i'; f[0].v = limit;
  f[1].name = "data.next (an iterator)"; f[1].kind = 'b'; f[1].v = data && data->next != NULL;
  return tr__dist_gather(t, (tr__dist *)t->tr__dist, where, failed, f, 2, "the run's arguments");
}

/* After resume_from (or an earlier tr_load on some ranks only): the counters the loop goes on from. A
   rank that failed (its load, say) is told to the others by the agreement that follows. */
static void tr__dist_check_resumed(tr_trainer *t) {
  tr__fact f[7];
  tr_err e;
  if (!t->tr__dist) return;
  f[0].name = "epoch"; f[0].kind = 'i'; f[0].v = t->epoch;
  f[1].name = "global_step"; f[1].kind = 'i'; f[1].v = t->global_step;
  f[2].name = "epoch_batch"; f[2].kind = 'i'; f[2].v = t->epoch_batch;
  f[3].name = "the accumulation window's position"; f[3].kind = 'i'; f[3].v = t->tr__accum_pos;
  f[4].name = "the step of the last validation in this epoch"; f[4].kind = 'i'; f[4].v = t->tr__val_at;
  f[5].name = "the epoch ended (a checkpoint from on_train_epoch_end)"; f[5].kind = 'i'; f[5].v = t->tr__epoch_ended;
  f[6].name = "restarting mid-epoch"; f[6].kind = 'i'; f[6].v = t->tr__restarting;
  e = tr__dist_gather(t, (tr__dist *)t->tr__dist, TR__AT_RESUMED, t->tr__err, f, 7,
                      "the counters they start from (every rank must resume from the same checkpoint, or none)");
  if (e && !t->tr__err) t->tr__err = e; /* the failed ranks keep their own error; the vote that follows tells the rest */
}

static void tr__dist_free(tr_trainer *t) {
  tr__dist *d = (tr__dist *)t->tr__dist;
  int done = 0;
  if (!d) return;
  t->tr__dist = NULL;
  if (d->dead) return; /* a collective is still pending on it: MPI may write into it later */
  MPI_Finalized(&done);
#ifdef TRAIN_CUDA
  if (d->nccl) ncclCommDestroy(d->nccl);
#endif
  if (!done) {
    MPI_Op_free(&d->vote_op);
    MPI_Type_free(&d->vote_type);
    MPI_Comm_free(&d->comm);
  }
  free(d->sums);
  free(d->facts);
  free(d->gather);
  free(d);
}

/* The ranks reached different agreement points (different paths through the loop): each learns where
   the others are, then none communicates until the next run's start (they cannot meet again). */
static void tr__dist_out_of_step(tr_trainer *t, tr__dist *d, int site) {
  int64_t mine = site;
  int r, rc;
  size_t len;
  char msg[sizeof t->error];
  d->broken = 1;
  rc = MPI_Allgather(&mine, 1, MPI_INT64_T, d->facts, 1, MPI_INT64_T, d->comm);
  len = (size_t)snprintf(msg, sizeof msg, "the ranks are out of step (a setting or a hook that differs between ranks, "
                         "e.g. tr_set_accumulation or a tr_save on one rank only, sent them different ways); they stopped "
                         "talking where they were:");
  for (r = 0; r < d->world && rc == MPI_SUCCESS && len < sizeof msg; r++)
    len += (size_t)snprintf(msg + len, sizeof msg - len, "%s rank %d at train.h:%lld", r ? "," : "", r, (long long)(d->facts[r] / 2));
  if (t->tr__err) return; /* (its own error stays) */
  tr__fail(t, TR_ERR_COMM, "%s", msg);
}

/* One vote: every rank's failure, signals, requests and interrupt count, plus `sum` and `count`
   combined as the list says; the agreed values act on this rank at once. v gets the result. `site`
   names the agreement point: ranks at different points are out of step, found here before any other
   collective can pair with the wrong one. */
static void tr__dist_vote(tr_trainer *t, int64_t sum, int64_t count, int64_t *v, int site) {
  tr__dist *d = (tr__dist *)t->tr__dist;
  int64_t mine[TR__V_COUNT];
  int rc;
  mine[TR__V_FAILED] = t->tr__err != TR_OK;
  mine[TR__V_FIRST] = t->tr__err ? d->rank : d->world;
  mine[TR__V_SIGNALS] = t->tr__flow.signals;
  mine[TR__V_REQUESTS] = t->ctx.requests;
  mine[TR__V_SIGINT] = tr__sig_own() > tr__sigint_count ? tr__sig_own() : tr__sigint_count;
  mine[TR__V_SUM] = sum;
  mine[TR__V_LEAST] = mine[TR__V_MOST] = count;
  mine[TR__V_SITE_LO] = mine[TR__V_SITE_HI] = site;
  if (d->broken || d->dead) { memcpy(v, mine, sizeof mine); return; }
  rc = MPI_Allreduce(mine, v, 1, d->vote_type, d->vote_op, d->comm);
  if (rc != MPI_SUCCESS) { memcpy(v, mine, sizeof mine); tr__dist_fail(t, rc, "MPI_Allreduce (agreement)"); return; }
  if (v[TR__V_SITE_LO] != v[TR__V_SITE_HI]) { tr__dist_out_of_step(t, d, site); memcpy(v, mine, sizeof mine); return; }
  t->tr__flow.signals |= (unsigned)v[TR__V_SIGNALS];
  t->ctx.requests |= (unsigned)v[TR__V_REQUESTS];
  if (v[TR__V_SIGINT] > tr__sigint_count) tr__sigint_count = (int)v[TR__V_SIGINT];
  if (v[TR__V_FAILED] > 0 && v[TR__V_FAILED] < d->world) { /* some ranks failed, some not: tell the others why */
    struct { int32_t code; char msg[sizeof t->error]; } why;
    int root = (int)v[TR__V_FIRST];
    memset(&why, 0, sizeof why);
    if (d->rank == root) { why.code = (int32_t)t->tr__err; memcpy(why.msg, t->error, sizeof why.msg); }
    rc = MPI_Bcast(&why, (int)sizeof why, MPI_BYTE, root, d->comm);
    if (rc != MPI_SUCCESS) tr__dist_fail(t, rc, "MPI_Bcast (error message)");
    else if (!t->tr__err) {
      why.msg[sizeof why.msg - 1] = 0;
      tr__fail(t, why.code > TR_OK && why.code < TR_ERR_COUNT ? (tr_err)why.code : TR_ERR_COMM, "rank %d: %s", root, why.msg);
    }
  }
}

static void tr__dist_agree_at(tr_trainer *t, int site) {
  int64_t v[TR__V_COUNT];
  if (t->tr__dist) tr__dist_vote(t, 0, 0, v, site);
}

static int64_t tr__dist_shard(tr_trainer *t, const tr_data *data, int64_t n, int equal, const char *what) {
  tr__dist *d = (tr__dist *)t->tr__dist;
  int64_t v[TR__V_COUNT], mine = n;
  if (!d) return n;
  if (data->get) mine = equal ? n / d->world : (n > d->rank ? (n - d->rank + d->world - 1) / d->world : 0);
  tr__dist_vote(t, 0, mine, v, 2 * __LINE__ + (equal ? 1 : 0)); /* training's count or an evaluation's */
  d->most = v[TR__V_MOST];
  if (equal && !t->tr__err && v[TR__V_LEAST] != v[TR__V_MOST])
    tr__fail(t, TR_ERR_MODEL, "%s data: the ranks have %lld to %lld batches per epoch; with several processes every "
             "rank needs the same number (same data, or iterator shards of equal length)", what,
             (long long)v[TR__V_LEAST], (long long)v[TR__V_MOST]);
  return t->tr__err ? 0 : mine;
}

static int64_t tr__dist_index(const tr_trainer *t, int64_t b) {
  const tr__dist *d = (const tr__dist *)t->tr__dist;
  return d ? b * d->world + d->rank : b;
}

static int tr__dist_empty(const tr_trainer *t, int64_t n) {
  const tr__dist *d = (const tr__dist *)t->tr__dist;
  return d ? d->most == 0 : n == 0;
}

/* g = g0 + g1 + ... + g(W-1) in rank order, the same bits on every rank. */
static int tr__dist_sum(tr__dist *d, float *g, size_t n) {
  size_t at, i;
  int r, rc = MPI_SUCCESS;
  for (at = 0; at < n && rc == MPI_SUCCESS; at += TR__DIST_CHUNK) {
    int k = (int)(n - at < TR__DIST_CHUNK ? n - at : TR__DIST_CHUNK);
    if (d->world == 2) { rc = MPI_Allreduce(MPI_IN_PLACE, g + at, k, MPI_FLOAT, MPI_SUM, d->comm); continue; }
    rc = MPI_Allgather(g + at, k, MPI_FLOAT, d->gather, k, MPI_FLOAT, d->comm);
    for (i = 0; i < (size_t)k && rc == MPI_SUCCESS; i++) {
      float s = d->gather[i];
      for (r = 1; r < d->world; r++) s += d->gather[(size_t)r * k + i];
      g[at + i] = s;
    }
  }
  return rc;
}

static void tr__dist_grads(tr_trainer *t) {
  tr__dist *d = (tr__dist *)t->tr__dist;
  int64_t v[TR__V_COUNT];
  int rc;
  if (!d) return;
  tr__dist_vote(t, t->tr__accum_n, 0, v, 2 * __LINE__);
  if (d->broken || d->dead) return; /* (failed: the sum below is skipped on every rank alike) */
  t->tr__accum_n = v[TR__V_SUM]; /* the averaging divides the sum by every rank's count */
  if (tr__skips(t, HK_FLOW_SKIP_STEP) || t->tr__accum_n == 0) return; /* agreed: no rank steps */
#ifdef TRAIN_CUDA
  if (d->nccl) { /* on tr_model.stream, as every kernel of the step: no host wait */
    ncclResult_t nr;
    if (!t->tr__grads_zeroed) tr__dev_zero_grad(t); /* this rank adds nothing */
    nr = ncclAllReduce(t->model.grads, t->model.grads, t->model.n_params, ncclFloat, ncclSum, d->nccl,
                       (cudaStream_t)t->model.stream);
    if (nr != ncclSuccess) tr__fail(t, TR_ERR_DEVICE, "the gradient all-reduce (NCCL) failed: %s", ncclGetErrorString(nr));
    hk_grads_changed(&t->ctx);
    return;
  }
#endif
  if (!t->tr__grads_zeroed) tr_zero(t->model.grads, t->model.n_params, t->tr__threads); /* this rank adds nothing */
  rc = tr__dist_sum(d, t->model.grads, t->model.n_params);
  if (rc != MPI_SUCCESS) tr__dist_fail(t, rc, "the gradient all-reduce");
  hk_grads_changed(&t->ctx);
}

static void tr__dist_mean(tr_trainer *t, double *sum, int64_t *counted) {
  tr__dist *d = (tr__dist *)t->tr__dist;
  int64_t v[TR__V_COUNT];
  double s = 0;
  int r, rc;
  if (!d) return;
  tr__dist_vote(t, *counted, 0, v, 2 * __LINE__);
  if (d->broken || d->dead) return;
  *counted = v[TR__V_SUM];
  rc = MPI_Allgather(sum, 1, MPI_DOUBLE, d->sums, 1, MPI_DOUBLE, d->comm);
  if (rc != MPI_SUCCESS) { tr__dist_fail(t, rc, "MPI_Allgather (evaluation loss)"); return; }
  for (r = 0; r < d->world; r++) s += d->sums[r]; /* in rank order: the same bits on every rank */
  *sum = s;
}

static void tr__dist_paths(tr_trainer *t) {
  tr__dist *d = (tr__dist *)t->tr__dist;
  int32_t head[2] = { 0, 0 }; /* rank 0's count of paths (-1: one is too long) and default flag */
  int i, rc;
  if (!d || d->broken || d->dead) return; /* (broken: the run has failed; nothing is saved) */
  if (d->rank == 0) {
    head[0] = t->ctx.n_checkpoint_paths < 0 || t->ctx.n_checkpoint_paths > HK_MAX_CHECKPOINT_PATHS ? 0 : t->ctx.n_checkpoint_paths;
    head[1] = t->ctx.checkpoint_default;
    for (i = 0; i < head[0]; i++) {
      const char *p = t->ctx.checkpoint_paths[i] ? t->ctx.checkpoint_paths[i] : "";
      if (strlen(p) >= TR__DIST_PATH) head[0] = -1;
      else strcpy(d->paths[i], p);
    }
  }
  rc = MPI_Bcast(head, 2, MPI_INT32_T, 0, d->comm);
  if (rc == MPI_SUCCESS && head[0] > 0) rc = MPI_Bcast(d->paths, head[0] * TR__DIST_PATH, MPI_CHAR, 0, d->comm);
  if (rc != MPI_SUCCESS) { tr__dist_fail(t, rc, "MPI_Bcast (checkpoint paths)"); head[0] = 0; }
  if (head[0] < 0) {
    tr__fail(t, TR_ERR_INVALID, "a requested checkpoint path is %d bytes or longer; with several processes it must be shorter", TR__DIST_PATH);
    head[0] = 0;
  }
  for (i = 0; i < head[0]; i++) t->ctx.checkpoint_paths[i] = d->paths[i];
  t->ctx.n_checkpoint_paths = head[0];
  t->ctx.checkpoint_default = head[1];
}

static void tr__dist_save_file(tr_trainer *t, const char *path) {
  if (!t->tr__err && (!t->tr__dist || ((tr__dist *)t->tr__dist)->rank == 0)) tr__save_file(t, path);
  tr__dist_agree(t); /* the barrier: no rank goes on before the file is complete (or failed everywhere) */
}

#elif !defined(TRAIN_NO_TRAINER) /* one process: nothing to do */
static tr_err  tr__dist_init(tr_trainer *t, tr_err failed) { (void)t; return failed; }
static tr_err  tr__dist_start_fit(tr_trainer *t, const tr_config *c, tr_err failed) { (void)t; (void)c; return failed; }
static tr_err  tr__dist_start_eval(tr_trainer *t, hk_stage stage, const tr_data *data, int64_t limit, tr_err failed) {
  (void)t; (void)stage; (void)data; (void)limit; return failed;
}
static void    tr__dist_check_resumed(tr_trainer *t) { (void)t; }
static void    tr__dist_free(tr_trainer *t) { (void)t; }
static void    tr__dist_agree_at(tr_trainer *t, int site) { (void)t; (void)site; }
static int64_t tr__dist_shard(tr_trainer *t, const tr_data *d, int64_t n, int equal, const char *what) { (void)t; (void)d; (void)equal; (void)what; return n; }
static int64_t tr__dist_index(const tr_trainer *t, int64_t b) { (void)t; return b; }
static int     tr__dist_empty(const tr_trainer *t, int64_t n) { (void)t; return n == 0; }
static void    tr__dist_grads(tr_trainer *t) { (void)t; }
static void    tr__dist_mean(tr_trainer *t, double *sum, int64_t *counted) { (void)t; (void)sum; (void)counted; }
static void    tr__dist_paths(tr_trainer *t) { (void)t; }
static void    tr__dist_save_file(tr_trainer *t, const char *path) { if (!t->tr__err) tr__save_file(t, path); }
#endif /* TRAIN_MPI */

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
