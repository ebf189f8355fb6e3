/* train/run.h - the run layer: what any loop gives the batteries (run directory, log records, checkpoints, stop signals). A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_RUN_H /* part */
#define TRAIN_RUN_H /* part */
#include "cluster.h" /* part */

TR__C_BEGIN /* part */
/* =================================================================================================
   THE RUN LAYER
   What any loop gives the batteries (callbacks, loggers, the bar), attached to the hook registry: one
   version directory for every logger, log records, the bar's totals, checkpoints in the loop's own format
   with every callback's state, the schedule's state, Ctrl-C / SIGTERM / preemption. train.h's trainer is
   one client (tr_run_enter / tr_run_leave), train/loop.h's tr_run_begin / next / update / end another. A
   small state machine (no run, running, entered): a call out of order is refused with TR_ERR_INVALID and a
   message naming the call to make (tr_run_error, hk_last_error). The states and every call:
   docs/reference.md ("The run layer underneath", "Every run-layer call").
   ================================================================================================= */

/* A piece of the loop's training state in memory (tr_run_desc.state): bytes a snapshot copies. */
typedef struct tr_region { void *data; size_t bytes; } tr_region;

/* The run's settings; zero means the default, TR_YES / TR_NO where zero is ambiguous. */
typedef struct tr_run_desc {
  /* where the loggers write: save_dir/name/version_N (a logger's own desc fields win) */
  const char *save_dir;          /* NULL = "runs" */
  const char *name;              /* NULL = "lightning_logs"; "" = versions directly in save_dir */
  const char *version;           /* NULL = the next free version_N, claimed once for the registry */
  int new_version_on_resume;     /* TR_YES: a resume logs into a new version_N (Lightning's way); default:
                                    it continues its run */
  FILE *log;                     /* where callbacks talk (verbose lines, warnings); NULL = stderr */
  /* the loop's shape */
  int epochs;                    /* TR_NO: a step loop (no on_train_epoch_start/_end); default: epochs */
  int64_t train_batches;         /* training batches per epoch (the bar's total); 0 = unknown */
  int64_t val_batches;           /* batches of each validation; 0 = unknown */
  int64_t max_steps, max_epochs; /* the run's limits as the loop applies them; 0 = none known */
  int64_t min_steps, min_epochs; /* a stop (HK_STOP) waits until both are reached (tr_stop_allowed) */
  int64_t log_every_n_steps;     /* a training record every N-th optimizer step; 0 = 50; negative = none */
  int validation;                /* TR_NO: the loop never validates (a val/ monitor is refused at the start) */
  int check_on_train_epoch_end;  /* where monitors check by default: TR_YES on_train_epoch_end, TR_NO
                                    on_validation_end; default: the epoch's end with epochs, else validation's */
  /* the optimizer: lr_monitor's metric names (lr-<optimizer>) and the hyperparameters */
  const char *optimizer;         /* "AdamW", "SGD", ...; NULL: lr_monitor publishes "lr" */
  double momentum, weight_decay; /* for lr_monitor's log_momentum / log_weight_decay */
  int lr_per_epoch;              /* 1: the lr changes per epoch (lr_monitor's default interval) */
  const char *hparams;           /* "key=value key=value ...": hyperparameters the loggers record */
  /* checkpoints in the loop's own format */
  int (*save_model)(void *user, FILE *f); /* write the model (and optimizer state) your way; 0 = ok */
  int (*load_model)(void *user, FILE *f); /* read it back from the start of f; 0 = ok */
  void *model_user;
  const char *save_to;           /* where a plain hk_request(ctx, HK_REQUEST_CHECKPOINT) and Ctrl-C save */
  int async_save;                /* TR_YES: saves during a run are written in the background (tr_run_save) */
  int no_signals;                /* 1: leave SIGINT, SIGTERM and the preemption signal alone */
  tr_preempt preempt;            /* the preemption signal: save, maybe requeue (train/cluster.h) */
  int64_t (*agree)(void *user, int64_t stops); /* several processes: every rank's 64 bits OR'ed (cluster.h) */
  /* spike_detection's rollback: everything a step changes (parameters, optimizer state, its step count
     if not ctx->global_step), yours and valid while the run lives (not copied). */
  const tr_region *state;
  int n_state;
  void (*rolled_back)(void *user, hk_ctx *ctx); /* after a rollback: drop what the undone steps left */
  int no_resume_message;         /* 1: no "Restored all states from the checkpoint at ..." line */
  int accumulate_grad_batches;   /* micro-batches per step the loop fixed (0 = 1) */
  const char *settings;          /* the loop's settings, "key=value ...", recorded as hyperparameters in place
                                    of this desc's; hparams and tr_run_hparam* win */
  /* A loop with a checkpoint format of its own (train.h's trainer) writes requested, on_exception and
     Ctrl-C checkpoints through this (model_user); during on_exception, the state after the last finished
     step. TR_OK, or the error with why. */
  tr_err (*save_checkpoint)(void *user, hk_ctx *ctx, const char *path, char *why, size_t cap);
  const char *spec;              /* callbacks and loggers, applied by tr_run_setup (all or nothing; not kept) */
  void (*wait_saves)(void *user, hk_ctx *ctx); /* a background save_checkpoint: return once its last file is on
                                    disk and on_checkpoint_saved fired */
  /* A loop that tr_run_begin drives (YOUR LOOP IN A DOZEN LINES, below): */
  double lr;                     /* the learning rate, or the schedule's base (sched); 0: none (ctx->lr 0) */
  tr_sched sched;                /* one of train.h's schedules over lr (kind 0: constant) */
  double (*lr_at)(void *user, const hk_ctx *ctx); /* or your own: the lr of step ctx->global_step + 1 */
  int64_t val_every_n_steps;     /* a validation after every N-th optimizer step; 0: none by steps */
  int64_t val_every_n_epochs;    /* with epochs: at the end of every N-th epoch (0 = 1) */
  int64_t batch_size;            /* samples per training batch: ctx->samples_seen counts them (0: not counted) */
  const hk_tensor *params, *grads; /* the model's views (n_tensors of each; TR_VIEWS counts them), */
  float **param_memory, **grad_memory; /* or the addresses of one flat buffer each (read at every batch, so a
                                    buffer allocated late is seen), cut by names and sizes (TR_TENSORS) */
  const char *const *tensor_names;
  const size_t *tensor_sizes;
  int n_tensors;
} tr_run_desc;

/* The model's tensors in a tr_run_desc, counted from the arrays themselves (a count cannot disagree with them):
   TR_VIEWS(param_views, grad_views): two arrays of hk_tensor of the same length;
   TR_TENSORS(&params_memory, &grads_memory, names, sizes): llm.c's flat buffers, cut into tensors. */
#if (defined(__GNUC__) || defined(__clang__)) && !defined(__cplusplus)
#  define TR__IS_ARRAY(a) (0 * (int)sizeof(char[1 - 2 * __builtin_types_compatible_p(__typeof__(a), __typeof__(&(a)[0]))]))
#else
#  define TR__IS_ARRAY(a) 0
#endif
#define TR__COUNT2(a, b) ((int)(sizeof(a) / sizeof((a)[0])) + TR__IS_ARRAY(a) + TR__IS_ARRAY(b) + \
                          0 * (int)sizeof(char[sizeof(a) / sizeof((a)[0]) == sizeof(b) / sizeof((b)[0]) ? 1 : -1]))
#define TR_VIEWS(param_views, grad_views) .params = (param_views), .grads = (grad_views), \
                                          .n_tensors = TR__COUNT2(param_views, grad_views)
#define TR_TENSORS(param_memory_addr, grad_memory_addr, names, sizes) .param_memory = (param_memory_addr), \
  .grad_memory = (grad_memory_addr), .tensor_names = (names), .tensor_sizes = (sizes), .n_tensors = TR__COUNT2(names, sizes)

/* Where in the loop a checkpoint was written (tr_run.resumed_at after a resume). */
typedef enum tr_run_at { TR_RUN_AT_BATCH = 0, TR_RUN_AT_VALIDATION, TR_RUN_AT_EPOCH_START, TR_RUN_AT_EPOCH_END } tr_run_at;

/* The run of a registry. Read any field; change only train_batches / eval_batches (epochs of different
   lengths) - the rest through tr_run_setup. */
typedef struct tr_run {
  tr_run_desc desc;              /* the settings, strings copied */
  int64_t train_batches;         /* batches of the training epoch in progress: the bar's total (0 = unknown) */
  int64_t eval_batches;          /* batches of the evaluation loop in progress (0 = unknown) */
  hk_stage running;              /* HK_STAGE_FIT from tr_run_start to tr_run_finish (the trainer: its runs) */
  const char *resume_from;       /* the checkpoint the run resumed from ("" when none): never deleted */
  tr_run_at resumed_at;          /* where in the loop it was written */
  int failed;                    /* the run has failed (tr_run_error says why) */
  tr_sched_state lr_state;       /* tr_lr_scale's scale, the plateau's progress: in checkpoints */
  /* The loop and the batteries share these while a run goes (docs/reference.md): */
  int epoch_done;                /* the epoch's last batch has run, its validation still to come */
  int validates_next;            /* 1 around the on_train_batch_end of a batch right before a validation */
  int accumulation;              /* micro-batches per step from the next window on */
  int async_requests;            /* model_checkpoint(async_save=true): requested saves in the background */
  struct tr__run_priv *tr__p;    /* private */
} tr_run;

/* What the loop should do next (tr_run_batch_end, tr_run_epoch_end). */
enum { TR_RUN_VALIDATE = 1, TR_RUN_STOP = 2 };

/* (tr_run_setup, which sets a run's settings, is train/factories.h's: it registers the batteries' factories) */
/* The run of reg, made with the defaults when it has none (NULL only out of memory). */
TRAIN_API tr_run *tr_run_get(hk_registry *reg);
/* The version directory every logger of reg writes into (claimed and made now if none has); NULL and
   hk_last_error(reg) when it cannot be made. */
TRAIN_API const char *tr_run_dir(hk_registry *reg);
/* Several processes: loggers open the run directory on rank 0 alone, and its run id (in the directory and
   every checkpoint) comes with it. tr_run_dir_id: this process's directory (NULL: none yet; nothing is made)
   and id ("" none yet). tr_run_dir_adopt: the other ranks take rank 0's, so that what defaults to a path under
   it (model_checkpoint's and on_exception_checkpoint's checkpoints/, prediction_writer's predictions/ with
   {rank}) and a later process's claim to its files (prediction_writer's record) are the same on every rank;
   a directory or an id this process has already stays. A loop on several processes sends rank 0's at each
   run's start, after setup (train.h's MPI strategy does). */
TRAIN_API const char *tr_run_dir_id(hk_registry *reg, const char **id);
TRAIN_API tr_err tr_run_dir_adopt(hk_registry *reg, const char *dir, const char *id);
/* What this process waits for now, for the watchdog's report: tr_run_waiting("MPI_Allreduce (gradients)")
   before a collective, tr_run_waiting(NULL) after (a store each). what must outlive the wait. */
TRAIN_API void tr_run_waiting(const char *what);
TRAIN_API const char *tr_run_waits(void); /* NULL: not waiting */

/* Your hyperparameters, typed, recorded by every logger (csv's hparams.yaml, jsonl's first line,
   TensorBoard's HParams tab, plot's <desc>); a key given again takes the new value and wins over the
   trainer's and tr_run_desc.hparams'. Before the run starts. TR_ERR_INVALID for an empty key, one over 63
   bytes or with a control character or '=', a string over 255 bytes, a non-finite number, or during a run. */
TRAIN_API tr_err tr_run_hparam(hk_registry *reg, const char *key, const char *value);
TRAIN_API tr_err tr_run_hparam_num(hk_registry *reg, const char *key, double value);
TRAIN_API tr_err tr_run_hparam_bool(hk_registry *reg, const char *key, int value);

/* Start a fit: stop signals, setup, configure_model, the resume (resume_from: a tr_run_save file, or "auto":
   the newest of this run that loads, else a fresh start), on_fit_start, on_train_start. A resume continues
   its run's directory; one with nothing left to train, or a file that cannot be read, is refused before
   anything fires or is made on disk. TR_OK, or the run failed: tr_run_finish reports it either way. A loop
   with a sanity check forgets what it set (hk_metric_forget_between). docs/reference.md has the rest. */
TRAIN_API tr_err tr_run_start(hk_registry *reg, hk_ctx *ctx, const char *resume_from);
/* resume "auto" in a checkpoint format of your own: the newest of save_to and the checkpoint callbacks'
   *.ckpt that `check` reads (0 and the file's step), or NULL; each refused file said in one line. The path
   lives until the next call or the run's end. */
typedef int (*tr_ckpt_check_fn)(void *user, const char *path, int64_t *step, char *why, size_t cap);
TRAIN_API const char *tr_run_find_resume(hk_registry *reg, hk_ctx *ctx, const char *save_to, tr_ckpt_check_fn check, void *user);
/* After every on_train_batch_end (and again after a validation at that step): the training record, the
   requests hooks made, flow's HK_FAIL / HK_STOP (once min_steps/min_epochs allow), the stop signals. Returns
   TR_RUN_* bits (a failed run: TR_RUN_STOP); clears the batch's signals in flow, HK_STOP stays. */
TRAIN_API unsigned tr_run_batch_end(hk_registry *reg, hk_ctx *ctx, hk_flow *flow);
/* Where on_train_epoch_start belongs: fires it and returns (and sets ctx->batch_idx to) the first batch to
   run, 0 or, after a mid-epoch resume, the one after the checkpoint's (the event not fired again). n_batches:
   the bar's total (0: unknown).  for (b = tr_run_epoch_start(reg, &ctx, &flow, n); b < n; b++) { ... } */
TRAIN_API int64_t tr_run_epoch_start(hk_registry *reg, hk_ctx *ctx, hk_flow *flow, int64_t n_batches);
/* After on_train_epoch_end, after the epoch's last tr_run_batch_end: as tr_run_batch_end, no record. */
TRAIN_API unsigned tr_run_epoch_end(hk_registry *reg, hk_ctx *ctx, hk_flow *flow);
/* 1 when the run resumed from a checkpoint written at `at` and no batch has started since: skip what the
   checkpoint's run did there.  if (step % 100 == 0 && !tr_run_resumed_at(reg, TR_RUN_AT_VALIDATION)) ... */
TRAIN_API int tr_run_resumed_at(hk_registry *reg, tr_run_at at);
/* An evaluation in a loop of your own, stage "val" or "test":
       for (b = tr_run_eval_start(reg, &ctx, &flow, "val", n); b < n; b++) { ctx.batch_idx = b; ...events... }
       tr_run_eval_end(reg, &ctx, &flow, sum / n);
   start fires on_validation_start / _epoch_start and keeps the training batch's view of ctx; end sets
   val/loss (a NaN leaves it), fires on_validation_epoch_end, sends the record, fires on_validation_end and
   puts the training view back. Refused outside a run, from a hook, and nested. */
TRAIN_API int64_t tr_run_eval_start(hk_registry *reg, hk_ctx *ctx, hk_flow *flow, const char *stage, int64_t n_batches);
TRAIN_API void tr_run_eval_end(hk_registry *reg, hk_ctx *ctx, hk_flow *flow, double loss);
/* Send a record for stage "train" (train/loss and every metric but val/ and test/), "val" or "test" (their
   metrics): "val" after on_validation_epoch_end. HK_FAIL when an on_log hook failed or the call is refused. */
TRAIN_API hk_signal tr_run_log(hk_registry *reg, hk_ctx *ctx, const char *stage);
/* End the run: on_exception when it failed, else on_train_end and on_fit_end; teardown; files flushed;
   signals restored. Returns the outcome (TR_ERR_INTERRUPTED after Ctrl-C, TR_ERR_HOOK, TR_ERR_INVALID for
   a skipped call). Once per start. */
TRAIN_API tr_err tr_run_finish(hk_registry *reg, hk_ctx *ctx, tr_err status);
/* Why the run failed, or why the last call was refused ("" until either happens). */
TRAIN_API const char *tr_run_error(hk_registry *reg);
/* Fail the run from the loop (a non-finite loss, a data error): tr_run_finish reports it. */
TRAIN_API void tr_run_fail(hk_registry *reg, tr_err e, const char *fmt, ...);

/* A loop that fires every event itself, setup to teardown (train.h's trainer; a sanity check, validate or
   test run of your own): a run of stage for the batteries, nothing fired, watched or checked between. The
   loop calls tr_run_log and tr_run_requests at its safe points, tr_run_resumed after restoring resume_from
   (never deleted), tr_run_fail before its on_exception. Refused while a run goes. */
TRAIN_API tr_err tr_run_enter(hk_registry *reg, hk_ctx *ctx, hk_stage stage, const char *resume_from);
TRAIN_API void tr_run_leave(hk_registry *reg, hk_ctx *ctx);
/* For a loop that drives the run between its own events (train.h's trainer; a loop of your own has
   tr_run_batch_end act on them): the stop signals (SIGINT, SIGTERM) the run has received since it began or
   since tr_run_stops_handled - 0, 1 or 2 (1 at the most in a Slurm job) - with TR_STOP_SIGTERM in *sigterm when
   the latest was SIGTERM, and in *preempted 1 once the preemption signal came (NULLs are fine). A fit entered
   with tr_run_enter installs them unless tr_run_desc.no_signals; tr_run_leave puts the handlers back. */
TRAIN_API int tr_run_stops(hk_registry *reg, int64_t *sigterm, int *preempted);
TRAIN_API void tr_run_stops_handled(hk_registry *reg);
/* Honour hk_request: every queued checkpoint (then save_to), a log line, in a fit a training record;
   TR_RUN_VALIDATE when a validation was asked for. A failed save fails the run. */
TRAIN_API unsigned tr_run_requests(hk_registry *reg, hk_ctx *ctx, hk_flow *flow);
/* The loop restored tr_run_enter's checkpoint: the "Restored all states ..." line (rank 0). */
TRAIN_API void tr_run_resumed(hk_registry *reg, const hk_ctx *ctx);
/* A loop with a checkpoint format of its own keeps the run's block (where it logs, its id, its Slurm job):
   tr_run_block hands it to sink under TR_RUN_KEY in the save (step, at: where it is written); the resume
   gives it back to tr_run_continue before tr_run_enter (NULL: none, a new version). An unreadable block
   counts as none (TR_ERR_FORMAT, nothing said). Refused during a run. */
#define TR_RUN_KEY "train.run"
TRAIN_API hk_err tr_run_block(hk_registry *reg, int64_t step, tr_run_at at, hk_state_sink sink, void *user);
TRAIN_API tr_err tr_run_continue(hk_registry *reg, const void *data, size_t len);
/* After tr_run_continue: 1 when another Slurm job (or a run outside Slurm) wrote path, why saying so (start
   from the beginning: tr_run_continue(reg, NULL, 0)); 0 to resume it. */
TRAIN_API int tr_run_other_job(hk_registry *reg, const char *path, char *why, size_t cap);
/* A line in the run's log above the bar, in one write: "who: " (not NULL), "[rank: N] " with several
   processes. How batteries and loops report. */
TRAIN_API void tr_run_say(hk_registry *reg, const hk_ctx *ctx, const char *who, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
  __attribute__((format(printf, 4, 5)))
#endif
  ;

/* Checkpoints in the loop's own format: on_save_checkpoint, save_model into a new file written atomically,
   the callbacks' state and counters after it, on_checkpoint_saved; tr_run_load checks everything before
   changing anything, then restores the model, counters, callbacks and fires on_load_checkpoint. Errors name
   the file and why. They do not nest (a hook asks with hk_request_checkpoint). With async_save a save
   during the run copies into a reused staging buffer and returns; a thread writes the same bytes (its
   signals blocked), on_checkpoint_saved fires at the next safe point, a failed write fails the run there;
   one save in flight; tr_run_finish waits for the last. docs/reference.md has the whole contract. */
TRAIN_API tr_err tr_run_save(hk_registry *reg, hk_ctx *ctx, const char *path);
TRAIN_API tr_err tr_run_load(hk_registry *reg, hk_ctx *ctx, const char *path);

/* From a hook: the lr is schedule(t) * scale from now on (the scale in checkpoints); tr_lr_scale multiplies
   the scale by factor (> 0, finite), tr_lr_set makes the lr now lr (needs ctx->lr > 0). ctx->lr changes at
   once. TR_ERR_INVALID for a bad value. */
TRAIN_API tr_err tr_lr_scale(hk_ctx *ctx, double factor);
TRAIN_API tr_err tr_lr_set(hk_ctx *ctx, double lr);
/* This step's lr: lr (your schedule's value) times the hooks' scale, into ctx->lr and returned. Once per
   step before on_train_batch_start; a hook's direct write of ctx->lr lasts one step and is said once. */
TRAIN_API double tr_run_lr(hk_registry *reg, hk_ctx *ctx, double lr);
/* The same with train.h's schedule s at t (steps, or epochs for a per-epoch schedule); a plateau's state is
   the run's lr_state (tr_plateau_step once per epoch). */
TRAIN_API double tr_run_sched_lr(hk_registry *reg, hk_ctx *ctx, const tr_sched *s, double base_lr, int64_t t);

/* ---- PARAMETER GROUPS: each tensor's learning rate, weight decay and freezing -------------------------
   param_group and finetuning (train/callbacks/) give tensors matched by name their own lr multiplier,
   weight decay or freezing; the run resolves them at its start and every optimizer step asks per tensor
   (tr_run_tensor_opt) when tr_run_grouped says there are groups. Nothing registered: the same bits as
   one flat update. docs/callbacks.md ("Parameter groups and fine-tuning"). */
typedef struct tr_tensor_opt {
  double lr;            /* this update's learning rate for the tensor */
  double weight_decay;  /* its weight decay (AdamW: decoupled; SGD: L2) */
  int frozen;           /* 1: no update, no optimizer state touched */
  int64_t step;         /* its AdamW t (1 for its first update); an SGD momentum buffer is fresh at 1 */
} tr_tensor_opt;
/* 1 when some tensor's settings may differ from the run's. */
TRAIN_API int tr_run_grouped(hk_registry *reg);
/* Before the run's start: a hash of what the registered groups give the n tensors of v (each one's lr
   multiplier, weight decay, frozen; whether a group names none, which refuses the start; finetuning's
   schedule: the tensors it takes, unfreeze_at_epoch, lr_factor, initial_ratio, initial_lr, align, whether
   lr_factor_at is given); 0 with none.
   Processes compare it before they train together (train.h's MPI strategy): the same groups spelt
   differently hash the same. */
TRAIN_API uint64_t tr_run_groups_hash(hk_registry *reg, const hk_tensor *v, int n);
/* Tensor i's settings for the update with lr (ctx->lr) at step (AdamW's t); without groups or out of
   range: { lr, the run's weight decay, 0, step }. */
TRAIN_API tr_tensor_opt tr_run_tensor_opt(hk_registry *reg, int i, double lr, int64_t step);
/* During a run (finetuning): freeze or unfreeze tensor i and scale its lr (> 0) from the next update;
   steps: ctx->global_step now (its update count starts there). A param_group's frozen stays. */
TRAIN_API tr_err tr_run_tensor_set(hk_registry *reg, int i, int frozen, double lr_scale, int64_t steps);
/* 1 when name matches pattern: '|'-separated whole-name globs ('*', '?'): "*.bias|*norm*|wte". */
TRAIN_API int tr_name_match(const char *pattern, const char *name);

/* 1 when a stop now would end the run: min_epochs and min_steps reached (1 outside a fit). */
TRAIN_API int tr_stop_allowed(const hk_ctx *ctx);

/* A line above the progress bar (tqdm.write), from global rank 0 only (the run's rank, else the launcher's
   environment); tr_print_all on every rank. Without a bar, a plain line. */
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

/* A histogram of n values (non-finite left out) for TensorBoard, sent with the next record (a tag given
   twice keeps the last). */
TRAIN_API tr_err tr_log_histogram(hk_ctx *ctx, const char *tag, const float *values, size_t n);
/* The same, already counted: n_bins bins, n_bins + 1 edges, counts, sum, sum of squares; more than
   TR_LOG_HIST_BUCKETS bins are merged. */
TRAIN_API tr_err tr_log_histogram_bins(hk_ctx *ctx, const char *tag, int n_bins, const double *edges,
                                       const int64_t *counts, double sum, double sum_squares);
/* 1 when a training record will follow this step's update (with an on_log hook): a costly monitor
   computes only then. */
TRAIN_API int tr_log_due(const hk_ctx *ctx);
/* Fire on_log for a record of your own loop (ctx->outputs points at it while on_log runs). */
TRAIN_API hk_signal tr_log_emit(hk_registry *reg, hk_ctx *ctx, tr_log_record *r);

TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
/* The run layer's private part (train/run.h). */
/* A directory the run's loggers write into, held (tr__dir_hold: fd) while the registry lives. base: the
   save_dir/name it was claimed under, or the directory itself for a named version. */
typedef struct tr__run_dir { char *base, *dir; int fd, continued, made; uint64_t dev, ino; char id[33]; struct tr__run_dir *next; } tr__run_dir;
/* made: this run claimed it (mkdir): a resume that then fails to load removes it again while it is empty.
   id: its run_id file's (TR__RUN_ID_FILE; "" none yet: written at the run's first checkpoint) */
enum { TR__RUN_SAVE_DIR, TR__RUN_NAME, TR__RUN_VERSION, TR__RUN_OPTIMIZER, TR__RUN_HPARAMS, TR__RUN_SAVE_TO, TR__RUN_SETTINGS,
       TR__RUN_STRS };
struct tr__hparam;
typedef struct tr__user_hp { char *key, *val; int kind; } tr__user_hp; /* kind: tr__hparam's num */
typedef tr_err (*tr__save_fn)(void *user, hk_ctx *ctx, const char *path, char *why, size_t cap);
typedef struct tr__run_priv {
  tr_log_record rec;         /* the record being built; histograms wait here */
  tr__run_dir *dirs;         /* the version directory of each save_dir/name */
  char *dir;                 /* the run's directory (the first a logger opened); NULL: none yet */
  char *cont_dir;            /* a resume continues its run: the directory its checkpoint recorded */
  uint64_t cont_dev, cont_ino; /* what that directory was (a version 1 block) */
  char cont_id[33];          /* the block's run id ("" none) */
  char cont_job[24];         /* the Slurm job that wrote it ("" none) */
  int cont_version;          /* the block's version (0: none read) */
  char id[33];               /* the run's id ("" not yet) */
  int id_said;               /* an unwritable run_id file was said */
  int64_t cont_step;         /* the checkpoint's step and place: the records after them */
  tr_run_at cont_at;         /* are superseded */
  int cont_given;            /* tr_run_continue gave the block for the next tr_run_enter */
  tr__user_hp *hp;           /* tr_run_hparam's, in order */
  int n_hp;
  char *strs[TR__RUN_STRS];  /* tr_run_desc's strings, copied */
  char *resume;              /* run->resume_from */
  char **ckpt_dirs;          /* checkpoint callbacks' dirpaths, for resume "auto" */
  int n_ckpt_dirs;
  int ckpt_default;          /* one saves into the default checkpoints/ */
  char *auto_path;           /* what resume "auto" chose */
  char error[512];           /* tr_run_error */
  tr_err err;
  hk_registry *reg;
  uint64_t stamp[3];         /* hk_metric_stamp at the last train, val, test record */
  int64_t last_step;         /* global_step at the last safe point */
  int signals, preempt;      /* the stop signals and the preemption handler are installed */
  int sig_base, sig_most, pre_base; /* the counts at the run's start (or since tr_run_stops_handled); 1 or 2 */
  int rank;                  /* global rank; -1: not known yet */
  int stop_pending;          /* a hook asked to stop during tr_run_start */
  int own_loop;              /* tr_run_start began the run (else tr_run_enter) */
  struct tr__bar *bar;       /* the registry's progress bar */
  void (*above)(struct tr__bar *bar, FILE *f, const char *text); /* text above the live bar */
  hk_bytes refused;          /* metric names refused and said (NUL-separated) */
  double lr;                 /* the step's lr as tr_run_lr left ctx->lr */
  tr_run_at at;              /* where in the loop the run is now */
  int resumed_here;          /* restored, and no batch started since */
  uint64_t loaded;           /* a hash of the restored state, for the ranks to compare */
  int lr_known, lr_warned;   /* lr set this run; a hook's write said */
  int lr_hook_said;          /* a hook's tr_run_lr refused and said */
  struct tr__asave *asave;   /* the background writer (made at the first async save) */
  int in_request;            /* honouring HK_REQUEST_CHECKPOINT now */
  int sync_only;             /* the last save collected (on_exception, teardown): write at once */
  /* the state machine */
  char failure[512];         /* why the run failed: ctx->abort_reason at tr_run_finish */
  hk_handle guard;           /* the watch on the loop's events, 0 when none */
  unsigned pending;          /* TR__PEND_*: an end event whose tr_run_* call is due */
  int64_t pending_step[2];   /* global_step at those on_train_batch_end, on_train_epoch_end */
  int in_sanity;             /* in the sanity check */
  int val_ran, val_sent;     /* since the last safe point: a fit's validation ended; its record went */
  int64_t val_step;          /* global_step at that validation */
  int val_warned;            /* a forgotten "val" record said */
  int sending;               /* firing on_log of the run's own record */
  const char *busy;          /* the run-layer call firing events now */
  const char *io, *io_path;  /* the save or load in progress, and its file */
  const char *eval;          /* tr_run_eval_start's stage until tr_run_eval_end */
  int64_t eval_idx;          /* the training batch's view of ctx, kept during an evaluation */
  double eval_loss;
  void *eval_batch;
  unsigned eval_signals;
  int refused_start;         /* tr_run_start refused to begin: nothing fired */
  int loading;               /* a resume not loaded yet: loggers write nothing (tr__run_loading) */
  /* early_stopping's: does a callback's block (saved at epochs / step) record a stop? 0 no; 1 a stop a
     resume would make again (why, fn first); 2 a stop the settings now go past. */
  int (*resume_stopped)(hk_registry *reg, const hk_state_blob *b, const char *fn, const char *path, int64_t epochs,
                        int64_t step, char *why, size_t cap);
  tr__grad_pass gpass;       /* the gradients' shared pass, for a loop without a grad_norm_source */
  void *loop;                /* tr_run_begin's loop (train/loop.h), freed with the run */
  void (*loop_free)(void *loop);
  void (*loop_views)(void *loop); /* its views cut again where the gradients change */
  const struct tr__pg_rule **rules; /* the param_group rules, in order (their callbacks own them) */
  int n_rules;
  struct tr__tgroup *tg;     /* each tensor's settings (NULL: no groups) */
  int n_tg;
} tr__run_priv;
/* A param_group's rule: the tensors matching `match` get the fields it gives (lr_mult 0 and weight_decay 0:
   not given, TR_ZERO_F: an explicit 0; frozen TR_YES / TR_NO, 0: not given). Later rules win. schedule: what
   else its owner decides about the n tensors' updates (finetuning's unfreeze schedule), folded into h for
   tr_run_groups_hash; NULL: nothing. */
typedef struct tr__pg_rule {
  const char *match, *who;
  double lr_mult, weight_decay;
  int frozen;
  uint64_t (*schedule)(const struct tr__pg_rule *r, const hk_tensor *v, int n, uint64_t h);
} tr__pg_rule;
/* A tensor's settings: the rules' (lr_mult, wd, frozen), the run's own (off, scale: tr_run_tensor_set);
   taken: updates before the stretch begun at step since. */
typedef struct tr__tgroup { double lr_mult, wd, scale; int has_wd, frozen, off; int64_t taken, since; } tr__tgroup;
enum { TR__PEND_BATCH = 1, TR__PEND_EPOCH = 2 };
static void tr__run_write(const tr_run *run, FILE *f, const char *text);
static void tr__run_send(tr_run *run, hk_ctx *ctx, const char *stage, hk_flow *flow);

/* =================================================================================================
   THE RUN LAYER (implementation)
   One malloc'd struct attached to the registry (hk_attach), freed after every callback by hk_destroy.
   Nothing runs on a step unless the loop calls it, but the run's watch (see "the state machine").
   ================================================================================================= */

/* ---- the stop signals: one path for every loop --------------------------------------------------------
   SIGINT / SIGTERM and the preemption signal are installed when a run starts (tr_run_start; tr_run_enter for a
   fit) unless tr_run_desc.no_signals, and put back when it ends. They count from there (an outer install's
   earlier signals are its own). The second stop signal ends a loop of your own at once outside Slurm (hooks.h's
   default); a loop that checks between its events (count_only: train.h's trainer) fails at its next event. In
   a Slurm job a second SIGTERM is Slurm's own: only the first counts (tr__slurm_job). */
static void tr__run_signals_on(tr_run *run, int count_only) {
  tr__run_priv *q = run->tr__p;
  q->signals = hk_stop_signals_install(count_only || tr__slurm_job() ? HK_STOP_COUNT_ONLY : 0) == 0;
  q->sig_base = hk_stop_requested();
  q->sig_most = tr__slurm_job() ? 1 : 2;
  q->preempt = q->signals ? tr__preempt_on(&run->desc.preempt) : 0;
  q->pre_base = tr_preempt_requested();
}
static void tr__run_signals_off(tr_run *run) {
  tr__run_priv *q = run->tr__p;
  if (q->signals) hk_stop_signals_restore();
  q->signals = 0;
  tr__preempt_off(&q->preempt);
}
/* The stop signals received since the run began (0, 1 or 2; sig_most at the most); *preempted: the preemption's. */
static int tr__run_stops(const tr__run_priv *q, int *preempted) {
  int n = q->signals ? hk_stop_requested() - q->sig_base : 0;
  *preempted = q->preempt > 0 && tr_preempt_requested() > q->pre_base;
  return n < 0 ? 0 : n > q->sig_most ? q->sig_most : n;
}

static void tr__run_free(void *p) {
  tr_run *run = (tr_run *)p;
  tr__run_priv *q;
  int i;
  if (!run) return;
  q = run->tr__p;
  tr__run_signals_off(run); /* a run started and never finished: the handlers go back */
  while (q->dirs) {
    tr__run_dir *next = q->dirs->next;
    tr__dir_release(q->dirs->fd);
    free(q->dirs->base); free(q->dirs->dir); free(q->dirs);
    q->dirs = next;
  }
  free(q->cont_dir);
  for (i = 0; i < TR__RUN_STRS; i++) free(q->strs[i]);
  for (i = 0; i < q->n_hp; i++) { free(q->hp[i].key); free(q->hp[i].val); }
  free(q->hp);
  free(q->dir);
  free(q->resume);
  for (i = 0; i < q->n_ckpt_dirs; i++) free(q->ckpt_dirs[i]);
  free(q->ckpt_dirs);
  free(q->auto_path);
  tr_log_record_free(&q->rec);
  hk_bytes_free(&q->refused);
  tr__asave_free(q->asave); /* the last save in flight ends first */
  if (q->loop_free) q->loop_free(q->loop);
  free(q->gpass.sq);
  free(q->rules);
  free(q->tg);
  free(q);
  free(run);
}

/* tr_run_get on the per-step path: no call, made only when there is none. */
/* Written by the loop's thread, read by the watchdog's: atomic where available. */
static const char *tr__run_waiting_now;
TRAIN_API void tr_run_waiting(const char *what) {
#if defined(__GNUC__) || defined(__clang__)
  __atomic_store_n(&tr__run_waiting_now, what, __ATOMIC_RELAXED);
#else
  tr__run_waiting_now = what;
#endif
}
TRAIN_API const char *tr_run_waits(void) {
#if defined(__GNUC__) || defined(__clang__)
  return __atomic_load_n(&tr__run_waiting_now, __ATOMIC_RELAXED);
#else
  return tr__run_waiting_now;
#endif
}
static tr_run *tr__run_of(hk_registry *reg) {
  tr_run *run = (tr_run *)hk_attached(reg);
  return run || !reg ? run : tr_run_get(reg);
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

/* Text to f (NULL: the bar's stream, else stdout), above a live bar (q->above). */
static void tr__run_write(const tr_run *run, FILE *f, const char *text) {
  if (run && run->tr__p->above) { run->tr__p->above(run->tr__p->bar, f, text); return; }
  if (!f) f = stdout;
  fputs(text, f);
  fflush(f);
}
/* This process's global rank: the run's when it knows it, else the launcher's (train/cluster.h), else 0. */
static int tr__run_rank(const tr_run *run) { return run && run->tr__p->rank >= 0 ? run->tr__p->rank : tr__launcher_rank(); }
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

/* Where callbacks talk: the run's log, else stderr; one write a line (never torn), "[rank: N] " first with
   several processes. */
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
/* The same, on rank 0 only with zero_only (Lightning's rank_zero_info). */
static void tr__run_say_on(const tr_run *run, const hk_ctx *ctx, int zero_only, const char *who, const char *fmt, ...) TR__PRINTF(5, 6);
static void tr__run_say_on(const tr_run *run, const hk_ctx *ctx, int zero_only, const char *who, const char *fmt, ...) {
  va_list ap;
  if (zero_only && ctx && ctx->rank != 0) return;
  va_start(ap, fmt);
  tr__run_vsay(run, ctx, who, fmt, ap);
  va_end(ap);
}

TRAIN_API void tr_run_say(hk_registry *reg, const hk_ctx *ctx, const char *who, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tr__run_vsay(reg ? (const tr_run *)hk_attached(reg) : NULL, ctx, who, fmt, ap);
  va_end(ap);
}

/* Where a resumed run goes on from: one line (rank 0), as Lightning's "Restored all states ..." */
static void tr__run_say_resumed(const tr_run *run, const hk_ctx *ctx, const char *path) {
  if (run->desc.no_resume_message) return;
  tr__run_say_on(run, ctx, 1, NULL, "Restored all states from the checkpoint at %s: epoch %lld, global step %lld, "
                 "batch %lld of the epoch", path, (long long)ctx->epoch, (long long)ctx->global_step, (long long)ctx->batch_idx);
}

/* A refused call says why in hk_last_error(reg) and tr_run_error(reg), the same text. Returns e. */
static tr_err tr__run_refuse(hk_registry *reg, tr_err e, const char *fmt, ...) TR__PRINTF(3, 4);
static tr_err tr__run_refuse(hk_registry *reg, tr_err e, const char *fmt, ...) {
  tr_run *run = reg ? (tr_run *)hk_attached(reg) : NULL;
  char msg[sizeof run->tr__p->error];
  va_list ap;
  va_start(ap, fmt);
  (void)tr__vmsg(msg, sizeof msg, 0, fmt, ap);
  va_end(ap);
  if (reg) hk_set_error(reg, e == TR_ERR_NOMEM ? HK_ERR_NOMEM : HK_ERR_INVALID, "%s", msg);
  if (run) memcpy(run->tr__p->error, msg, sizeof msg);
  return e;
}
/* The run's error text (a failed save or load: tr_run_error) into hk_last_error(reg) too. */
static tr_err tr__run_said(hk_registry *reg, const tr_run *run, tr_err e) {
  if (e != TR_OK && reg && run) hk_set_error(reg, e == TR_ERR_NOMEM ? HK_ERR_NOMEM : HK_ERR_INVALID, "%s", run->tr__p->error);
  return e;
}
/* Who began the run that is going, and when a call that needs no run may come instead. */
static const char *tr__run_driver(const tr_run *run) {
  return run->tr__p->own_loop ? "tr_run_start began it" : "tr_run_enter began it: train.h's trainer, or a loop firing every event";
}
static const char *tr__run_outside(const tr_run *run) {
  return run->tr__p->own_loop ? "before tr_run_start or after tr_run_finish"
                              : "before the trainer's run (tr_fit, tr_validate, ...) or after it returns";
}

static const char *tr__run_str(const tr_run *run, int i, const char *dflt) {
  const char *s = run ? run->tr__p->strs[i] : NULL;
  return s ? s : dflt;
}
static int tr__tri_ok(int v) { return v >= TR_NO && v <= TR_YES; }
static char *tr__join(const char *a, const char *b) { /* "a/b" (or b alone when a is empty) */
  size_t na = strlen(a), nb = strlen(b);
  char *p = (char *)malloc(na + nb + 2);
  if (!p) return NULL;
  if (na) { memcpy(p, a, na); p[na++] = '/'; }
  memcpy(p + na, b, nb + 1);
  return p;
}

/* tr_run_setup's settings half (train/factories.h adds the factories and applies the spec): checked and copied. */
TR__SHARED tr_err tr__run_settings(hk_registry *reg, const tr_run_desc *d) {
  tr_run_desc zero;
  tr_run *run = tr_run_get(reg);
  tr__run_priv *q;
  const char *strs[TR__RUN_STRS];
  char *copy[TR__RUN_STRS], q_why[512];
  int i;
  if (!reg) return TR_ERR_INVALID;
  if (!run) return tr__run_refuse(reg, TR_ERR_NOMEM, "tr_run_setup: out of memory");
  if (run->running != HK_STAGE_NONE) /* callbacks and the loop hold on to the run's settings while it goes */
    return tr__run_refuse(reg, TR_ERR_INVALID, "tr_run_setup: called during a %s run (%s): the run's settings are fixed "
                          "until it ends; call tr_run_setup %s", hk_stage_name(run->running), tr__run_driver(run),
                          tr__run_outside(run));
  memset(&zero, 0, sizeof zero);
  if (!d) d = &zero;
  if (!tr__tri_ok(d->epochs) || !tr__tri_ok(d->validation) || !tr__tri_ok(d->check_on_train_epoch_end))
    return tr__run_refuse(reg, TR_ERR_INVALID, "tr_run_setup: epochs, validation and check_on_train_epoch_end take "
                          "TR_YES, TR_NO or 0 (the default)");
  if (tr_preempt_check(&d->preempt, d->save_to, "tr_run_setup: tr_run_desc.", q_why, sizeof q_why))
    return tr__run_refuse(reg, TR_ERR_INVALID, "%s", q_why);
  if (!tr__tri_ok(d->new_version_on_resume))
    return tr__run_refuse(reg, TR_ERR_INVALID, "tr_run_setup: new_version_on_resume is %d: give TR_YES (a resume logs into "
                          "a new version_N, as Lightning's), TR_NO or 0 (the default: a resume continues its run)",
                          d->new_version_on_resume);
  if (d->train_batches < 0 || d->val_batches < 0 || d->max_steps < 0 || d->max_epochs < 0 || d->min_steps < 0 || d->min_epochs < 0)
    return tr__run_refuse(reg, TR_ERR_INVALID, "tr_run_setup: train_batches, val_batches, max_steps, max_epochs, min_steps and "
                          "min_epochs must be >= 0 (0 = unknown / none)");
  if (d->save_dir && !d->save_dir[0])
    return tr__run_refuse(reg, TR_ERR_INVALID, "tr_run_setup: save_dir is empty (NULL means \"runs\"; \".\" is the "
                          "current directory)");
  if (d->version && strchr(d->version, '/'))
    return tr__run_refuse(reg, TR_ERR_INVALID, "tr_run_setup: version '%s' must be a directory name without '/'",
                          d->version);
  if (!d->save_model != !d->load_model)
    return tr__run_refuse(reg, TR_ERR_INVALID, "tr_run_setup: give save_model and load_model together (a checkpoint "
                          "that cannot be loaded, or a loader with nothing to load)");
  if (!hk_is_finite(d->momentum) || !hk_is_finite(d->weight_decay))
    return tr__run_refuse(reg, TR_ERR_INVALID, "tr_run_setup: momentum and weight_decay must be finite");
  if (d->n_state < 0 || (d->n_state > 0 && !d->state))
    return tr__run_refuse(reg, TR_ERR_INVALID, "tr_run_setup: n_state is %d with state %s: give n_state >= 0 regions "
                          "in state", d->n_state, d->state ? "set" : "NULL");
  for (i = 0; i < d->n_state; i++)
    if (!d->state[i].data || !d->state[i].bytes)
      return tr__run_refuse(reg, TR_ERR_INVALID, "tr_run_setup: state[%d] has %s: every region needs data and bytes > 0", i,
                            d->state[i].data ? "0 bytes" : "data NULL");
  strs[TR__RUN_SAVE_DIR] = d->save_dir;
  strs[TR__RUN_NAME] = d->name;
  strs[TR__RUN_VERSION] = d->version;
  strs[TR__RUN_OPTIMIZER] = d->optimizer;
  strs[TR__RUN_HPARAMS] = d->hparams;
  strs[TR__RUN_SAVE_TO] = d->save_to;
  strs[TR__RUN_SETTINGS] = d->settings;
  for (i = 0; i < TR__RUN_STRS; i++) {
    copy[i] = strs[i] ? tr__strdup(strs[i]) : NULL;
    if (strs[i] && !copy[i]) {
      while (i-- > 0) free(copy[i]);
      return tr__run_refuse(reg, TR_ERR_NOMEM, "tr_run_setup: out of memory");
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
  run->desc.settings = q->strs[TR__RUN_SETTINGS];
  run->train_batches = d->train_batches;
  run->eval_batches = d->val_batches;
  run->desc.spec = NULL; /* applied once, by tr_run_setup */
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
  if (!run) return tr__run_refuse(reg, TR_ERR_NOMEM, "%s: out of memory", fn);
  if (!key || !key[0] || strlen(key) >= TR__HPARAM_KEY)
    return tr__run_refuse(reg, TR_ERR_INVALID, "%s: the key must be a name of 1 to %d bytes (e.g. \"width\")", fn,
                          TR__HPARAM_KEY - 1);
  for (c = key; *c; c++)
    if ((unsigned char)*c < 32 || *c == 127 || *c == '=')
      return tr__run_refuse(reg, TR_ERR_INVALID, "%s: the key '%s' holds a control character or '=': give a plain name", fn,
                            key);
  if (!text || strlen(text) >= TR__HPARAM_VAL)
    return tr__run_refuse(reg, TR_ERR_INVALID, "%s: the value of '%s' must be a string of at most %d bytes (NULL is not one)",
                          fn, key, TR__HPARAM_VAL - 1);
  if (run->running != HK_STAGE_NONE)
    return tr__run_refuse(reg, TR_ERR_INVALID, "%s: '%s' comes during a %s run: the loggers wrote the hyperparameters when "
                          "it started; give them before tr_run_start / tr_fit", fn, key, hk_stage_name(run->running));
  q = run->tr__p;
  for (i = 0; i < q->n_hp; i++)
    if (!strcmp(q->hp[i].key, key)) break;
  if (!(v = tr__strdup(text))) return tr__run_refuse(reg, TR_ERR_NOMEM, "%s: out of memory", fn);
  if (i < q->n_hp) { free(q->hp[i].val); q->hp[i].val = v; q->hp[i].kind = kind; return TR_OK; }
  k = tr__strdup(key);
  grown = k ? (tr__user_hp *)realloc(q->hp, (size_t)(q->n_hp + 1) * sizeof *grown) : NULL;
  if (!grown) { free(k); free(v); return tr__run_refuse(reg, TR_ERR_NOMEM, "%s: out of memory", fn); }
  q->hp = grown;
  q->hp[q->n_hp].key = k;
  q->hp[q->n_hp].val = v;
  q->hp[q->n_hp].kind = kind;
  q->n_hp++;
  return TR_OK;
}
TRAIN_API tr_err tr_run_hparam(hk_registry *reg, const char *key, const char *value) {
  return tr__run_hparam_add(reg, "tr_run_hparam", key, value, 0);
}
TRAIN_API tr_err tr_run_hparam_num(hk_registry *reg, const char *key, double value) {
  char text[40];
  if (!hk_is_finite(value)) {
    return tr__run_refuse(reg, TR_ERR_INVALID, "tr_run_hparam_num: the value of '%s' is not finite (%g): give a finite "
                          "number", key ? key : "(null)", value);
  }
  tr__num(text, sizeof text, value);
  return tr__run_hparam_add(reg, "tr_run_hparam_num", key, text, 1);
}
TRAIN_API tr_err tr_run_hparam_bool(hk_registry *reg, const char *key, int value) {
  return tr__run_hparam_add(reg, "tr_run_hparam_bool", key, value ? "true" : "false", 2);
}

/* Where monitors check when their flag is the default (Lightning's rule; the trainer resolves it per fit). */
TR__SHARED int tr__at_epoch_end(const tr_run *run, int flag) {
  if (flag != TR_DEFAULT) return flag > 0;
  if (!run) return 1;
  if (run->desc.check_on_train_epoch_end != TR_DEFAULT) return run->desc.check_on_train_epoch_end > 0;
  return run->desc.epochs != TR_NO;
}

/* ---- the schedule's state in checkpoints, and hooks that set the lr ----------------------------------
   56 bytes LE: "TRLR", u32 1, doubles scale, plateau_lr, best, int64s num_bad, cooldown, checks. Written
   only when not all zero, so a run without it writes the checkpoints it always wrote. */
#define TR__LR_STATE_KEY "train.lr_state" /* the run's checkpoint: a state block of its own under this key */
#define TR__AT_KEY "train.at"             /* and where in the loop it was written (tr_run_at, one byte) */
/* A checkpoint at TR_RUN_AT_VALIDATION keeps that validation's val/ metrics, for what judges them next
   (early_stopping at the epoch's end) without running it again: u32 count, then per metric u16 name
   length, name, the value's 8 bytes. */
#define TR__VAL_METRICS_KEY "train.val_metrics"
/* TR_RUN_KEY (above): the run's id, its Slurm job and its directory (tr__run_block): both formats */

TRAIN_API tr_err tr_lr_scale(hk_ctx *ctx, double factor) {
  tr_run *run;
  double scale;
  if (!ctx || !ctx->reg || !(run = tr_run_get(ctx->reg))) return TR_ERR_INVALID;
  if (!(factor > 0 && factor < HUGE_VAL)) {
    return tr__run_refuse(ctx->reg, TR_ERR_INVALID, "tr_lr_scale: factor must be > 0 and finite (0.5 halves the lr), got %g", factor);
  }
  scale = (run->lr_state.scale > 0 ? run->lr_state.scale : 1.0) * factor;
  if (!(scale > 0 && scale < HUGE_VAL)) {
    return tr__run_refuse(ctx->reg, TR_ERR_INVALID, "tr_lr_scale: the scale would become %g; it must stay > 0 and finite", scale);
  }
  run->lr_state.scale = scale;
  ctx->lr *= factor;
  run->tr__p->lr = ctx->lr;
  return TR_OK;
}

TRAIN_API tr_err tr_lr_set(hk_ctx *ctx, double lr) {
  if (!ctx || !ctx->reg) return TR_ERR_INVALID;
  if (!(lr > 0 && lr < HUGE_VAL)) {
    return tr__run_refuse(ctx->reg, TR_ERR_INVALID, "tr_lr_set: lr must be > 0 and finite, got %g", lr);
  }
  if (!(ctx->lr > 0 && ctx->lr < HUGE_VAL)) {
    return tr__run_refuse(ctx->reg, TR_ERR_INVALID, "tr_lr_set: ctx->lr is %g; it must be > 0 to scale from (set ctx->lr first in a "
                          "loop of your own)", ctx->lr);
  }
  return tr_lr_scale(ctx, lr / ctx->lr);
}
/* tr_run_lr for a run looked up. A hook's write is told by the bits (x != x folds under -ffast-math). */
static double tr__run_lr_now(tr_run *run, hk_ctx *ctx, double lr) {
  tr__run_priv *q = run->tr__p;
  if (q->lr_known && !q->lr_warned && ctx->lr != q->lr && memcmp(&ctx->lr, &q->lr, sizeof q->lr) != 0) {
    q->lr_warned = 1;
    tr__run_say(run, ctx, "train.h", "ctx->lr was written (= %g, by a hook or the loop) where the step's learning rate was %g: that lasts one step; "
                "tr_lr_set(ctx, lr) (or tr_lr_scale) keeps a new learning rate", ctx->lr, q->lr);
  }
  ctx->lr = q->lr = lr * (run->lr_state.scale > 0 ? run->lr_state.scale : 1.0);
  q->lr_known = 1;
  return ctx->lr;
}
/* A hook of your own loop may not set the lr (it would be logged for a step that did not use it): refused,
   said once per run. */
static int tr__run_lr_refused(tr_run *run, hk_registry *reg, hk_ctx *ctx, const char *fn) {
  tr__run_priv *q = run->tr__p;
  if (run->running == HK_STAGE_NONE || !q->own_loop || !hk_dispatching(reg)) return 0; /* (the trainer's own hooks, lr_finder, may) */
  (void)tr__run_refuse(reg, TR_ERR_INVALID, "%s: called from a hook of %s: the step's learning rate is the loop's, set once "
                       "before on_train_batch_start; a hook changes it with tr_lr_set(ctx, lr) or tr_lr_scale (kept for every "
                       "step after). ctx->lr is left at %g", fn, hk_event_name(reg, ctx->event), ctx->lr);
  if (!q->lr_hook_said) { q->lr_hook_said = 1; tr__run_say(run, ctx, "train.h", "%s (said once)", q->error); }
  return 1;
}
TRAIN_API double tr_run_lr(hk_registry *reg, hk_ctx *ctx, double lr) {
  tr_run *run = tr__run_of(reg);
  if (!ctx) return lr;
  if (run && tr__run_lr_refused(run, reg, ctx, "tr_run_lr")) return ctx->lr;
  return run ? tr__run_lr_now(run, ctx, lr) : (ctx->lr = lr);
}
TRAIN_API double tr_run_sched_lr(hk_registry *reg, hk_ctx *ctx, const tr_sched *s, double base_lr, int64_t t) {
  tr_run *run = reg ? tr_run_get(reg) : NULL;
  tr_sched_state st;
  double lr;
  if (ctx && run && tr__run_lr_refused(run, reg, ctx, "tr_run_sched_lr")) return ctx->lr;
  memset(&st, 0, sizeof st);
  if (run) st = run->lr_state;
  st.scale = 0; /* applied once, below */
  lr = tr_sched_lr(s, &st, base_lr, t);
  if (!ctx) return lr;
  return run ? tr__run_lr_now(run, ctx, lr) : (ctx->lr = lr);
}

/* ---- parameter groups ------------------------------------------------------------------------------ */
static int tr__name_glob(const char *p, const char *pe, const char *n) { /* the alternative [p, pe) against all of n */
  const char *star = NULL, *back = NULL;
  while (*n) {
    if (p < pe && (*p == '?' || *p == *n)) p++, n++;
    else if (p < pe && *p == '*') star = ++p, back = n;
    else if (star) p = star, n = ++back;
    else return 0;
  }
  while (p < pe && *p == '*') p++;
  return p == pe;
}
TRAIN_API int tr_name_match(const char *pattern, const char *name) {
  const char *p = pattern, *e;
  if (!pattern || !name) return 0;
  for (;; p = e + 1) {
    e = strchr(p, '|');
    if (!e) e = p + strlen(p);
    if (tr__name_glob(p, e, name)) return 1;
    if (!*e) return 0;
  }
}
static int tr__given_d(double x) { return x != 0 || signbit(x); } /* TR_ZERO_F: an explicit 0 */
TR__SHARED tr_err tr__run_rule_add(tr_run *run, const tr__pg_rule *r) {
  tr__run_priv *q = run->tr__p;
  const tr__pg_rule **rules = (const tr__pg_rule **)realloc((void *)q->rules, (size_t)(q->n_rules + 1) * sizeof *rules);
  if (!rules) return TR_ERR_NOMEM;
  q->rules = rules;
  q->rules[q->n_rules++] = r;
  return TR_OK;
}
TR__SHARED void tr__run_rule_drop(tr_run *run, const tr__pg_rule *r) {
  tr__run_priv *q = run->tr__p;
  int i, k = 0;
  for (i = 0; i < q->n_rules; i++)
    if (q->rules[i] != r) q->rules[k++] = q->rules[i];
  q->n_rules = k;
}
/* The tensor called name: its settings from the rules in order, a later rule winning for the fields it gives. */
static void tr__group_resolve(const tr__run_priv *q, const char *name, tr__tgroup *g) {
  int k;
  memset(g, 0, sizeof *g);
  g->lr_mult = g->scale = 1;
  for (k = 0; k < q->n_rules; k++) {
    const tr__pg_rule *r = q->rules[k];
    if (!tr_name_match(r->match, name)) continue;
    if (tr__given_d(r->lr_mult)) g->lr_mult = r->lr_mult;
    if (tr__given_d(r->weight_decay)) g->wd = r->weight_decay, g->has_wd = 1;
    if (r->frozen) g->frozen = r->frozen == TR_YES;
  }
}
/* The first rule that names none of the n tensors in v (-1: none such). */
static int tr__group_unmatched(const tr__run_priv *q, const hk_tensor *v, int n) {
  int i, k;
  for (k = 0; k < q->n_rules; k++) {
    for (i = 0; i < n && !tr_name_match(q->rules[k]->match, v[i].name); i++) {}
    if (i == n) return k;
  }
  return -1;
}
TRAIN_API uint64_t tr_run_groups_hash(hk_registry *reg, const hk_tensor *v, int n) {
  const tr_run *run = reg ? (const tr_run *)hk_attached(reg) : NULL;
  const tr__run_priv *q = run ? run->tr__p : NULL;
  uint64_t h = TR__FNV_START;
  int i, bad;
  if (!q || !q->n_rules || !v || n <= 0) return 0;
  for (i = 0; i < n; i++) {
    tr__tgroup g;
    double x[2];
    int32_t f[2];
    tr__group_resolve(q, v[i].name, &g);
    x[0] = g.lr_mult + 0.0; /* (TR_ZERO_F's -0 is 0) */
    x[1] = g.has_wd ? g.wd + 0.0 : -1.0; /* -1: the optimizer's */
    f[0] = g.frozen;
    f[1] = 0;
    h = tr__fnv(h, (const unsigned char *)x, sizeof x);
    h = tr__fnv(h, (const unsigned char *)f, sizeof f);
  }
  bad = tr__group_unmatched(q, v, n) >= 0;
  h = tr__fnv(h, (const unsigned char *)&bad, sizeof bad);
  for (i = 0; i < q->n_rules; i++) /* in the rules' order: finetuning's schedule */
    if (q->rules[i]->schedule) h = q->rules[i]->schedule(q->rules[i], v, n, h);
  return h ? h : 1;
}
/* At the run's start, before anything fires: every tensor's settings from the rules in order. A rule that
   matches no tensor refuses the start (a misspelt name would silently change nothing). */
static tr_err tr__groups_build(tr_run *run, hk_registry *reg, const hk_ctx *ctx, const char *fn) {
  tr__run_priv *q = run->tr__p;
  int i, k, n = ctx->params ? ctx->n_tensors : 0;
  free(q->tg);
  q->tg = NULL;
  q->n_tg = 0;
  if (!q->n_rules || n <= 0) return TR_OK;
  if (!(q->tg = (tr__tgroup *)calloc((size_t)n, sizeof *q->tg))) return tr__run_refuse(reg, TR_ERR_NOMEM, "%s: out of memory", fn);
  q->n_tg = n;
  for (i = 0; i < n; i++) tr__group_resolve(q, ctx->params[i].name, &q->tg[i]);
  if ((k = tr__group_unmatched(q, ctx->params, n)) >= 0) {
    const tr__pg_rule *r = q->rules[k];
    free(q->tg);
    q->tg = NULL;
    q->n_tg = 0;
    return tr__run_refuse(reg, TR_ERR_INVALID, "%s%s%s: match=%s names none of the %d tensors (the first is '%s'): patterns "
                          "are whole names, '|' between alternatives, '*' any characters, '?' one", fn, fn[0] ? ": " : "",
                          r->who, r->match, n,
                          ctx->params[0].name ? ctx->params[0].name : "?");
  }
  return TR_OK;
}
TRAIN_API int tr_run_grouped(hk_registry *reg) {
  const tr_run *run = reg ? (const tr_run *)hk_attached(reg) : NULL;
  return run && run->tr__p->tg != NULL;
}
TRAIN_API tr_tensor_opt tr_run_tensor_opt(hk_registry *reg, int i, double lr, int64_t step) {
  const tr_run *run = reg ? (const tr_run *)hk_attached(reg) : NULL;
  tr_tensor_opt o;
  o.lr = lr;
  o.weight_decay = run ? run->desc.weight_decay : 0;
  o.frozen = 0;
  o.step = step;
  if (run && run->tr__p->tg && i >= 0 && i < run->tr__p->n_tg) {
    const tr__tgroup *g = &run->tr__p->tg[i];
    o.lr = lr * g->lr_mult * g->scale; /* (x 1 x 1 is lr itself) */
    if (g->has_wd) o.weight_decay = g->wd;
    o.frozen = g->frozen || g->off;
    o.step = g->taken + (step - g->since);
    if (o.step < 1) o.step = 1; /* (a rollback to before its unfreeze, spike_detection's: it starts afresh again) */
  }
  return o;
}
TRAIN_API tr_err tr_run_tensor_set(hk_registry *reg, int i, int frozen, double lr_scale, int64_t steps) {
  tr_run *run = reg ? (tr_run *)hk_attached(reg) : NULL;
  tr__tgroup *g;
  if (!run || !run->tr__p->tg) return reg ? tr__run_refuse(reg, TR_ERR_INVALID, "tr_run_tensor_set: no parameter groups: it works "
                                                           "while a run with a param_group or finetuning goes") : TR_ERR_INVALID;
  if (i < 0 || i >= run->tr__p->n_tg)
    return tr__run_refuse(reg, TR_ERR_INVALID, "tr_run_tensor_set: tensor %d: the run has tensors 0..%d", i, run->tr__p->n_tg - 1);
  if (!hk_is_finite(lr_scale) || lr_scale <= 0 || steps < 0)
    return tr__run_refuse(reg, TR_ERR_INVALID, "tr_run_tensor_set: lr_scale %g and steps %lld: give lr_scale > 0, finite, and "
                          "steps >= 0", lr_scale, (long long)steps);
  g = &run->tr__p->tg[i];
  if (frozen && !g->off) g->taken += steps - g->since, g->off = 1;
  else if (!frozen && g->off) g->since = steps, g->off = 0;
  g->scale = lr_scale;
  return TR_OK;
}

TRAIN_API int tr_stop_allowed(const hk_ctx *ctx) {
  const tr_run *run = ctx ? (const tr_run *)hk_attached(ctx->reg) : NULL;
  int64_t epochs;
  if (!run || run->running != HK_STAGE_FIT) return 1;
  /* the epoch counts once its last batch has run (the validation after it ends it), or at its end */
  epochs = ctx->epoch + ((run->epoch_done || ctx->event == HK_ON_TRAIN_EPOCH_END) ? 1 : 0);
  return epochs >= run->desc.min_epochs && ctx->global_step >= run->desc.min_steps;
}

/* ---- log records ------------------------------------------------------------------------------ */
static int tr__starts(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

/* val/ metrics in val records, test/ in test, the rest in train, except lr, grad_norm, train/loss (set by
   the record itself). */
static int tr__log_wanted(const char *name, const char *stage) {
  if (!strcmp(stage, "val")) return tr__starts(name, "val/");
  if (!strcmp(stage, "test")) return tr__starts(name, "test/");
  return !tr__starts(name, "val/") && !tr__starts(name, "test/") && strcmp(name, "lr") && strcmp(name, "grad_norm") &&
         strcmp(name, "train/loss");
}
static int tr__stage_index(const char *stage) { return !strcmp(stage, "train") ? 0 : !strcmp(stage, "val") ? 1 : 2; }

/* Build stage's record and fire on_log: only values set since that stage's last record (hk_metric_stamp)
   and lazy ones, as Lightning logs what was logged since. */
/* A metric the record could not take (not UTF-8, no memory): said once per name (rank 0), escaped. */
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
  q->sending = 1; /* the loggers read r: a record sent from their hooks would change it under them */
  (void)HK_FIRE_FLOW(ctx->reg ? ctx->reg : q->reg, HK_ON_LOG, ctx, flow);
  q->sending = 0;
  ctx->outputs = saved;
  r->n_histograms = 0;
}

TRAIN_API hk_signal tr_run_log(hk_registry *reg, hk_ctx *ctx, const char *stage) {
  tr_run *run = tr_run_get(reg);
  hk_flow flow = { 0 };
  if (!run) return reg ? (tr__run_refuse(reg, TR_ERR_NOMEM, "tr_run_log: out of memory"), HK_FAIL) : HK_CONTINUE;
  if (!ctx) return tr__run_refuse(reg, TR_ERR_INVALID, "tr_run_log: ctx is NULL: give the loop's context"), HK_FAIL;
  if (!stage || (strcmp(stage, "train") && strcmp(stage, "val") && strcmp(stage, "test")))
    return tr__run_refuse(reg, TR_ERR_INVALID, "tr_run_log: the stage '%s' is not \"train\", \"val\" or \"test\"",
                          stage ? stage : "(null)"), HK_FAIL;
  if (run->tr__p->sending)
    return tr__run_refuse(reg, TR_ERR_INVALID, "tr_run_log: called from a hook of on_log while a %s record is being "
                          "logged: change that record there (tr_log_current, tr_log_set) instead of sending another",
                          run->tr__p->rec.stage ? run->tr__p->rec.stage : "(?)"), HK_FAIL;
  if (!strcmp(stage, "val")) run->tr__p->val_sent = 1; /* the validation's record (tr__run_check_val) */
  if (!HK_ACTIVE(reg, HK_ON_LOG)) return HK_CONTINUE;
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
    if (name) len = tr__msg_at(line, sizeof line, len, " %s=%.6g", name, v); /* "..." ends a cut line */
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
  (void)tr__vmsg(run->tr__p->failure, sizeof run->tr__p->failure, 0, fmt, ap);
  va_end(ap);
  memcpy(run->tr__p->error, run->tr__p->failure, sizeof run->tr__p->error); /* a later refusal may say more there */
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
   HK_REQUEST_CHECKPOINT in every loop: each queued path, then the default path when asked for (or none
   queued); the queue is copied and cleared first, so on_checkpoint_saved may queue anew. *no_default: the
   default was asked for and there is none. */
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


/* The run's checkpoint, little-endian: the model's bytes (save_model), then
     state:   "TRRUN" 0 0 0 | u64 epoch, global_step, batch_idx, samples_seen | u32 hooks |
              per hook: u32 key length | key | u64 length | the callback's state
     trailer: u64 state length | u32 CRC-32C of the state | u32 version (1) | "TRRUNEND" */
#define TR__RUN_TRAILER 24
typedef struct tr__run_saving { tr_run *run; hk_bytes state; int model_failed; } tr__run_saving; /* model_failed: save_model's non-zero */

/* ---- a resume continues its run ------------------------------------------------------------------------
   Every checkpoint holds the run's block under TR_RUN_KEY: u64 2 | str run id | str Slurm job | str run
   directory | i64 global_step | u64 tr_run_at ("" for none). Version 1 (still read): u64 1 | str directory
   | u64 device | u64 inode | i64 global_step | u64 at. Read before setup (tr__run_resuming); the loggers
   open in that directory and supersede the later records. A run is known by its id (inodes are reused),
   kept in its directory's run_id file (written at the first checkpoint) and in every block, so a moved,
   respelt or renamed directory continues when its run_id matches. */
#define TR__RUN_ID_FILE "run_id"
static int tr__run_id_ok(const char *s) { /* 32 lowercase hex digits */
  int i;
  for (i = 0; i < 32; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
  return s[32] == 0;
}
/* The run id in dir's run_id file into id ("" none). 0; ENOENT nothing there; EINVAL not a run id; else errno. */
static int tr__run_id_read(const char *dir, char id[33]) {
  char path[TR__CB_MAX_STR + 16];
  hk_bytes b;
  tr__file_id mine = { 0, 0, 0 };
  int e;
  id[0] = 0;
  if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, TR__RUN_ID_FILE) >= sizeof path) return ENAMETOOLONG;
  memset(&b, 0, sizeof b);
  e = tr__read_mine(path, &b, &mine);
  if (!e && (b.len != 33 || b.data[32] != '\n')) e = EINVAL;
  if (!e) {
    memcpy(id, b.data, 32);
    id[32] = 0;
    if (!tr__run_id_ok(id)) { id[0] = 0; e = EINVAL; }
  }
  hk_bytes_free(&b);
  return e;
}
/* The run's id in its directory rd (written where nothing is; a file there already must hold it):
   0 when rd holds the run's id now. */
static int tr__run_id_keep(tr_run *run, tr__run_dir *rd) {
  tr__run_priv *q = run->tr__p;
  char path[TR__CB_MAX_STR + 16], text[34], why[300];
  tr__file_id mine = { 0, 0, 0 };
  int e;
  if (!q->id[0]) { /* a resume's run goes on under its checkpoint's id */
    if (q->cont_id[0]) memcpy(q->id, q->cont_id, sizeof q->id);
    else tr__random_id(q->id);
  }
  if (rd->id[0]) return strcmp(rd->id, q->id) ? -1 : 0; /* another run's directory (a named version used as it is) */
  if (q->loading) return -1; /* a resume not loaded yet writes nothing (a failed one leaves no file) */
  if ((size_t)snprintf(path, sizeof path, "%s/%s", rd->dir, TR__RUN_ID_FILE) >= sizeof path) return -1;
  snprintf(text, sizeof text, "%s\n", q->id);
  e = tr__write_mine(path, text, 33, &mine, NULL, why, sizeof why);
  if (e == EEXIST && tr__run_id_read(rd->dir, rd->id) == 0) return strcmp(rd->id, q->id) ? -1 : 0;
  if (e) {
    if (!q->id_said++)
      tr__run_say(run, NULL, "train.h: warning", "%s; a resume of this run's checkpoints will log into a new version", why);
    return -1;
  }
  memcpy(rd->id, q->id, sizeof rd->id);
  return 0;
}
static hk_err tr__run_block(tr_run *run, int64_t step, tr_run_at at, hk_state_sink sink, void *user) {
  tr__run_priv *q = run ? run->tr__p : NULL;
  tr__run_dir *rd = NULL;
  tr_slurm s;
  hk_bytes v;
  hk_err e;
  if (!q) return HK_OK;
  if (q->dir)
    for (rd = q->dirs; rd && strcmp(rd->dir, q->dir); rd = rd->next) {}
  if (rd && tr__run_id_keep(run, rd)) rd = NULL; /* not known to be the run's: nothing to continue */
  (void)tr_slurm_read(&s);
  memset(&v, 0, sizeof v);
  tr__put_u64(&v, 2);
  tr__put_str(&v, rd ? q->id : "");
  tr__put_str(&v, s.on ? s.job_id : "");
  tr__put_str(&v, rd ? rd->dir : "");
  tr__put_i64(&v, step);
  tr__put_u64(&v, (uint64_t)at);
  e = v.failed ? HK_ERR_NOMEM : sink(TR_RUN_KEY, v.data, v.len, user);
  hk_bytes_free(&v);
  return e;
}
TRAIN_API hk_err tr_run_block(hk_registry *reg, int64_t step, tr_run_at at, hk_state_sink sink, void *user) {
  tr_run *run = tr_run_get(reg);
  if (!sink) return HK_ERR_INVALID;
  return run ? tr__run_block(run, step, at, sink, user) : HK_ERR_NOMEM;
}
/* A run directory's last name must not be empty, "." or "..": the loggers would write into the base or above. */
static int tr__run_leaf_bad(const char *dir) {
  const char *leaf = strrchr(dir, '/');
  leaf = leaf ? leaf + 1 : dir;
  return !leaf[0] || !strcmp(leaf, ".") || !strcmp(leaf, "..");
}
/* The block of the checkpoint being resumed (data NULL: none; a malformed one counts as none: the resume
   then logs into a new version, and the load judges the file). */
static int tr__run_resuming(tr_run *run, const void *data, size_t len) {
  tr__run_priv *q = run->tr__p;
  hk_reader r;
  uint64_t version, dev = 0, ino = 0, at;
  int64_t step;
  char *dir = NULL, *id = NULL, *job = NULL;
  int bad;
  free(q->cont_dir);
  q->cont_dir = NULL;
  q->cont_id[0] = q->cont_job[0] = 0;
  q->cont_version = 0;
  if (!data) return 0;
  memset(&r, 0, sizeof r);
  r.data = (const unsigned char *)data;
  r.len = len;
  bad = tr__get_u64(&r, &version) || (version != 1 && version != 2);
  if (!bad && version == 1) bad = tr__get_str(&r, &dir) || tr__get_u64(&r, &dev) || tr__get_u64(&r, &ino) || !dir[0];
  if (!bad && version == 2)
    bad = tr__get_str(&r, &id) || (id[0] && !tr__run_id_ok(id)) || tr__get_str(&r, &job) || strlen(job) >= sizeof q->cont_job ||
          (job[0] && tr__env_num(job) < 0) || tr__get_str(&r, &dir) || (dir[0] && !id[0]);
  if (!bad) bad = tr__get_i64(&r, &step) || tr__get_u64(&r, &at) || step < 0 || at > TR_RUN_AT_EPOCH_END || r.pos != r.len ||
                  (dir[0] && tr__run_leaf_bad(dir));
  if (!bad) {
    q->cont_version = (int)version;
    if (id) memcpy(q->cont_id, id, strlen(id) + 1);
    if (job) memcpy(q->cont_job, job, strlen(job) + 1);
    if (dir[0]) { q->cont_dir = dir; dir = NULL; }
    q->cont_dev = dev;
    q->cont_ino = ino;
    q->cont_step = step;
    q->cont_at = (tr_run_at)at;
  }
  free(dir);
  free(id);
  free(job);
  return bad ? -1 : 0;
}
TRAIN_API tr_err tr_run_continue(hk_registry *reg, const void *data, size_t len) {
  tr_run *run = tr_run_get(reg);
  if (!run) return reg ? tr__run_refuse(reg, TR_ERR_NOMEM, "tr_run_continue: out of memory") : TR_ERR_INVALID;
  if (run->running != HK_STAGE_NONE)
    return tr__run_refuse(reg, TR_ERR_INVALID, "tr_run_continue: a %s run is going: give the checkpoint's block before "
                          "tr_run_enter", hk_stage_name(run->running));
  run->tr__p->cont_given = 1;
  return tr__run_resuming(run, data, len) ? TR_ERR_FORMAT : TR_OK;
}
/* The block must name this job; no block, or a version 1 one, is resumed as before run ids. */
TRAIN_API int tr_run_other_job(hk_registry *reg, const char *path, char *why, size_t cap) {
  tr_run *run = tr_run_get(reg);
  tr__run_priv *q = run ? run->tr__p : NULL;
  tr_slurm s;
  if (!q || q->cont_version < 2 || tr_slurm_read(&s) < 1 || !strcmp(q->cont_job, s.job_id)) return 0;
  tr__msg(why, cap, "%s was written by %s%s%s%s, not by this job (%s): it is not resumed (this job starts from the beginning; "
          "the file stays as it is until this job saves there)", path, q->cont_job[0] ? "Slurm job " : "a run outside Slurm",
          q->cont_job, q->cont_id[0] ? ", run " : "", q->cont_id, s.job_id);
  return 1;
}
/* Was a record of the continued run written after its checkpoint? With Lightning's step (steps before the
   record's batch), a checkpoint at step G came after every record below G - 1 and before every one of G or
   more; of G - 1, the training record came before it, the validation after it only for TR_RUN_AT_BATCH (the
   resumed run validates there again). A test counts as a validation. */
TR__SHARED int tr__run_superseded(const tr_run *run, int64_t step, const char *stage) {
  const tr__run_priv *q = run->tr__p;
  return step >= q->cont_step || (step == q->cont_step - 1 && q->cont_at == TR_RUN_AT_BATCH && strcmp(stage, "train") != 0);
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
  if (s->run->desc.save_model(s->run->desc.model_user, f) != 0) return s->model_failed = 1, EIO;
  if (ferror(f)) return errno ? errno : EIO;
  tr__run_trailer(t, &s->state);
  if (fwrite(s->state.data, 1, s->state.len, f) != s->state.len || fwrite(t, 1, sizeof t, f) != sizeof t) return errno ? errno : EIO;
  return 0;
}
static int tr__run_fill_file(tr__afile *a, void *user) { return tr__afile_stream(a, tr__run_fill, user); }

/* Collect the save in flight (wait: until on disk): on_checkpoint_saved, or the run fails. At every safe
   point, before any other save or load, and before the run ends. */
static void tr__run_saves_settle(tr_run *run, hk_ctx *ctx, int wait) {
  if (run && run->tr__p->asave) tr__asave_settle(run->tr__p->asave, ctx, wait);
  if (run && wait && run->desc.wait_saves) run->desc.wait_saves(run->desc.model_user, ctx); /* the loop's own writer */
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

/* An async save's step part: save_model writes into the staging buffer (an unbuffered memory stream: one
   copy), then the state block and trailer; the first save, or one that outgrew the buffer, writes into a
   growing stream whose buffer becomes the staging one. POSIX only (fmemopen, open_memstream). */
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
  if (rc != 0) { tr__msg(why, cap, "save_model returned an error for '%s': nothing was written", path); return TR_ERR_IO; }
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

/* A save or load is in progress (q->io): another one from inside it (save_model, load_model, a hook of
   its events) is refused, whatever asks: they would share the staging buffer and the state's bytes. */
static int tr__run_io_busy(const tr_run *run, const char *fn, const char *path, char *why, size_t cap) {
  const tr__run_priv *q = run ? run->tr__p : NULL;
  if (!q || !q->io) return 0;
  tr__msg(why, cap, "%s: '%s' asked while %s of '%s' is in progress (from %s): saves and loads do not nest; ask for a "
          "checkpoint with hk_request_checkpoint(ctx, path) instead (the loop's next tr_run_batch_end saves it)", fn, path,
          q->io, q->io_path ? q->io_path : "?", !strcmp(q->io, "tr_run_save") ? "save_model, or a hook of "
          "on_save_checkpoint or on_checkpoint_saved" : "load_model, or a hook of on_load_checkpoint");
  return 1;
}
static tr_err tr__run_save_body(void *user, hk_ctx *ctx, const char *path, char *why, size_t cap);
static tr_err tr__run_save_to(void *user, hk_ctx *ctx, const char *path, char *why, size_t cap) {
  tr_run *run = tr_run_get((hk_registry *)user);
  tr_err e;
  if (run && tr__run_io_busy(run, "tr_run_save", path, why, cap)) return TR_ERR_INVALID;
  if (run) { run->tr__p->io = "tr_run_save"; run->tr__p->io_path = path; }
  e = tr__run_save_body(user, ctx, path, why, cap);
  if (run) { run->tr__p->io = NULL; run->tr__p->io_path = NULL; }
  return e;
}
/* A checkpoint the run writes for the hooks (requested, on_exception_checkpoint's): through the loop's own
   save (tr_run_desc.save_checkpoint) when it gave one, else tr_run_save's. user: the registry. */
TR__SHARED tr_err tr__run_checkpoint_to(void *user, hk_ctx *ctx, const char *path, char *why, size_t cap) {
  tr_run *run = tr_run_get((hk_registry *)user);
  if (run && run->desc.save_checkpoint) return run->desc.save_checkpoint(run->desc.model_user, ctx, path, why, cap);
  return tr__run_save_to(user, ctx, path, why, cap);
}
/* The val/ metrics of ctx as TR__VAL_METRICS_KEY's block into state; -1 out of memory. */
static int tr__val_metrics_put(hk_ctx *ctx, hk_bytes *state) {
  hk_bytes b;
  unsigned char x[8];
  uint32_t n = 0;
  int i, count = hk_metric_count(ctx);
  memset(&b, 0, sizeof b);
  hk_bytes_put(&b, "\0\0\0\0", 4);
  for (i = 0; i < count; i++) {
    double v;
    uint64_t bits;
    const char *name = hk_metric_at(ctx, i, &v);
    size_t len = name ? strlen(name) : 0;
    if (!name || strncmp(name, "val/", 4) || len > 255) continue;
    memcpy(&bits, &v, sizeof bits);
    tr__le(x, len, 2); hk_bytes_put(&b, x, 2);
    hk_bytes_put(&b, name, len);
    tr__le(x, bits, 8); hk_bytes_put(&b, x, 8);
    n++;
  }
  tr__le(x, n, 4);
  if (!b.failed) memcpy(b.data, x, 4);
  i = b.failed || tr__state_sink(TR__VAL_METRICS_KEY, b.data, b.len, state) != HK_OK ? -1 : 0;
  hk_bytes_free(&b);
  return i;
}
/* Put them back into ctx (tr_run_load); -1 when the block is malformed. */
static int tr__val_metrics_get(hk_ctx *ctx, const unsigned char *p, size_t len) {
  size_t at = 4;
  uint32_t n, i;
  if (len < 4) return -1;
  n = (uint32_t)tr__get(p, 4);
  for (i = 0; i < n; i++) {
    char name[256];
    size_t k;
    uint64_t bits;
    double v;
    if (at + 2 > len || (k = (size_t)tr__get(p + at, 2)) == 0 || at + 2 + k + 8 > len) return -1;
    memcpy(name, p + at + 2, k);
    name[k] = 0;
    if (memchr(name, 0, k)) return -1;
    bits = tr__get(p + at + 2 + k, 8);
    memcpy(&v, &bits, sizeof v);
    if (hk_metric_set(ctx, name, v) != HK_OK) return -1;
    at += 2 + k + 8;
  }
  return at == len ? 0 : -1;
}
static tr_err tr__run_save_body(void *user, hk_ctx *ctx, const char *path, char *why, size_t cap) {
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
          (s.run->desc.async_save == TR_YES || (s.run->async_requests && s.run->tr__p->in_request));
  ctx->path = path;
  ctx->hook_failure = NULL;
  if (HK_FIRE(reg, HK_ON_SAVE_CHECKPOINT, ctx) == HK_FAIL) {
    tr__msg(why, cap, "%s", ctx->hook_failure ? ctx->hook_failure : "on_save_checkpoint failed");
    ctx->path = NULL;
    return TR_ERR_HOOK;
  }
  hk_bytes_put(&s.state, "TRRUN\0\0\0", 8);
  v[0] = (uint64_t)ctx->epoch; v[1] = (uint64_t)ctx->global_step; v[3] = (uint64_t)ctx->samples_seen;
  v[2] = (uint64_t)(s.run->tr__p->eval ? s.run->tr__p->eval_idx : ctx->batch_idx); /* in an evaluation: the training batch's */
  for (i = 0; i < 4; i++) { tr__le(x, v[i], 8); hk_bytes_put(&s.state, x, 8); }
  count_at = s.state.len;
  hk_bytes_put(&s.state, "\0\0\0\0", 4);
  if (hk_state_save(reg, tr__state_sink, &s.state) != HK_OK) {
    tr__msg(why, cap, "saving the callbacks' state for '%s' failed: %s", path, hk_last_error(reg));
    hk_bytes_free(&s.state);
    ctx->path = NULL;
    return TR_ERR_STATE;
  }
  { /* where in the loop, as one more block (tr_run_load takes it out) */
    unsigned char b[1];
    b[0] = (unsigned char)s.run->tr__p->at;
    (void)tr__state_sink(TR__AT_KEY, b, sizeof b, &s.state);
  }
  if (tr__run_block(s.run, ctx->global_step, s.run->tr__p->at, tr__state_sink, &s.state) != HK_OK) s.state.failed = 1;
  if (s.run->tr__p->at == TR_RUN_AT_VALIDATION && tr__val_metrics_put(ctx, &s.state)) s.state.failed = 1;
  if (tr__lr_state_any(&s.run->lr_state)) { /* the schedule's state, as one more block (tr_run_load takes it out) */
    unsigned char b[TR__LR_STATE_SIZE];
    tr__lr_state_put(b, &s.run->lr_state);
    (void)tr__state_sink(TR__LR_STATE_KEY, b, sizeof b, &s.state);
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
  e = async ? tr__run_stage(s.run, reg, &s.state, path, why, cap) : tr__write_checkpoint(path, tr__run_fill_file, &s, why, cap);
#else
  async = 0;
  e = tr__write_checkpoint(path, tr__run_fill_file, &s, why, cap);
#endif
  if (e && s.model_failed) { /* the model's own writer said no: not the disk's fault, and say what is on disk */
    FILE *old = fopen(path, "rb");
    tr__msg(why, cap, "save_model returned an error for '%s': nothing was written (%s)", path,
            old ? "the previous file there is untouched" : "no file is there");
    if (old) fclose(old);
  }
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
  if (!run) return reg ? tr__run_refuse(reg, TR_ERR_NOMEM, "tr_run_save: out of memory") : TR_ERR_INVALID;
  if (!ctx || !path || !path[0])
    return tr__run_refuse(reg, TR_ERR_INVALID, "tr_run_save: %s", !ctx ? "ctx is NULL: give the loop's context" : "give the file's path");
  if ((e = tr__run_save_to(reg, ctx, path, why, sizeof why)) != TR_OK) {
    if (!strncmp(why, "tr_run_save: ", 13)) tr__msg(run->tr__p->error, sizeof run->tr__p->error, "%s", why);
    else tr__msg(run->tr__p->error, sizeof run->tr__p->error, "tr_run_save: %s", why);
  }
  return tr__run_said(reg, run, e);
}

static tr_err tr__run_load_body(tr_run *run, hk_registry *reg, hk_ctx *ctx, const char *path);
TRAIN_API tr_err tr_run_load(hk_registry *reg, hk_ctx *ctx, const char *path) {
  tr_run *run = tr_run_get(reg);
  char why[sizeof run->tr__p->error];
  tr_err e;
  if (!run) return reg ? tr__run_refuse(reg, TR_ERR_NOMEM, "tr_run_load: out of memory") : TR_ERR_INVALID;
  if (!ctx || !path)
    return tr__run_refuse(reg, TR_ERR_INVALID, "tr_run_load: %s", !ctx ? "ctx is NULL: give the loop's context" : "give the file's path");
  if (tr__run_io_busy(run, "tr_run_load", path, why, sizeof why)) return tr__run_refuse(reg, TR_ERR_INVALID, "%s", why);
  run->tr__p->io = "tr_run_load";
  run->tr__p->io_path = path;
  e = tr__run_load_body(run, reg, ctx, path);
  run->tr__p->io = NULL;
  run->tr__p->io_path = NULL;
  return tr__run_said(reg, run, e);
}
/* A tr_run_save file read and checked, all but the model's bytes (keys NUL-terminated in place): the first
   half of tr_run_load, and tr_run_start's look before the run begins. f stays open at the end. */
typedef struct tr__run_file {
  FILE *f;
  unsigned char *state;
  uint64_t v[4];                 /* epoch, global_step, batch_idx, samples_seen */
  hk_state_blob *blobs;          /* the callbacks' (the run's own blocks taken out) */
  uint32_t n_hooks;
  tr_run_at at;
  tr_sched_state lr_state;
  const unsigned char *run;      /* the run's block (TR_RUN_KEY, inside state; NULL: none), run_len bytes */
  size_t run_len;
  const unsigned char *val_metrics; /* TR__VAL_METRICS_KEY's block (NULL: none), val_metrics_len bytes */
  size_t val_metrics_len;
  uint64_t model_bytes;          /* what save_model wrote: the bytes before the state block */
} tr__run_file;
static void tr__run_file_free(tr__run_file *rf) {
  if (rf->f) fclose(rf->f);
  free(rf->state);
  free(rf->blobs);
  memset(rf, 0, sizeof *rf);
}
static tr_err tr__run_file_read(tr__run_file *rf, const char *path, char *err, size_t cap) {
  FILE *f;
  unsigned char t[TR__RUN_TRAILER], *state;
  uint64_t size, slen, *v = rf->v;
  hk_state_blob *blobs = NULL;
  uint32_t n_hooks = 0, i;
  size_t p;
  tr_err e = TR_OK;
  memset(rf, 0, sizeof *rf);
  rf->at = TR_RUN_AT_BATCH; /* an older checkpoint: after a batch */
#define TR__RUN_BAD(code, ...) do { tr__msg(err, cap, __VA_ARGS__); e = code; goto done; } while (0)
  if (!(f = rf->f = fopen(path, "rb"))) TR__RUN_BAD(errno == ENOENT ? TR_ERR_NOT_FOUND : TR_ERR_IO, "tr_run_load: cannot open '%s': %s", path, strerror(errno));
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
  if (!(state = rf->state = (unsigned char *)malloc((size_t)slen))) TR__RUN_BAD(TR_ERR_NOMEM, "tr_run_load: out of memory");
  if (fseek(f, (long)(size - TR__RUN_TRAILER - slen), SEEK_SET) != 0 || fread(state, 1, (size_t)slen, f) != slen)
    TR__RUN_BAD(TR_ERR_IO, "tr_run_load: reading '%s' failed", path);
  rf->model_bytes = size - TR__RUN_TRAILER - slen;
  if (tr_crc32c(state, (size_t)slen) != (uint32_t)tr__get(t + 8, 4) || memcmp(state, "TRRUN\0\0\0", 8) != 0)
    TR__RUN_BAD(TR_ERR_FORMAT, "tr_run_load: '%s' is corrupted (the checksum of its state block does not match)", path);
  for (i = 0; i < 4; i++) v[i] = tr__get(state + 8 + 8 * i, 8);
  for (i = 0; i < 4; i++)
    if ((int64_t)v[i] < 0 || v[i] > ((uint64_t)1 << 53))
      TR__RUN_BAD(TR_ERR_FORMAT, "tr_run_load: '%s' holds a counter out of range (epoch, step, batch, samples: %lld %lld %lld %lld)",
                  path, (long long)v[0], (long long)v[1], (long long)v[2], (long long)v[3]);
  n_hooks = (uint32_t)tr__get(state + 40, 4);
  if (n_hooks > 4096) TR__RUN_BAD(TR_ERR_FORMAT, "tr_run_load: '%s' lists %u callback states (corrupted?)", path, (unsigned)n_hooks);
  if (n_hooks && !(rf->blobs = (hk_state_blob *)calloc(n_hooks, sizeof *rf->blobs))) TR__RUN_BAD(TR_ERR_NOMEM, "tr_run_load: out of memory");
  blobs = rf->blobs;
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
  for (i = 0; i < n_hooks; i++)
    if (!strcmp(blobs[i].key, TR__AT_KEY)) {
      if (blobs[i].len != 1 || ((const unsigned char *)blobs[i].data)[0] > TR_RUN_AT_EPOCH_END)
        TR__RUN_BAD(TR_ERR_FORMAT, "tr_run_load: '%s': where the checkpoint was written is unreadable (corrupted?)", path);
      rf->at = (tr_run_at)((const unsigned char *)blobs[i].data)[0];
      blobs[i] = blobs[--n_hooks];
      break;
    }
  for (i = 0; i < n_hooks; i++)
    if (!strcmp(blobs[i].key, TR_RUN_KEY)) { /* the run directory it was written in: rf->run (tr__run_peek) */
      rf->run = (const unsigned char *)blobs[i].data;
      rf->run_len = blobs[i].len;
      blobs[i] = blobs[--n_hooks];
      break;
    }
  for (i = 0; i < n_hooks; i++)
    if (!strcmp(blobs[i].key, TR__VAL_METRICS_KEY)) {
      rf->val_metrics = (const unsigned char *)blobs[i].data;
      rf->val_metrics_len = blobs[i].len;
      blobs[i] = blobs[--n_hooks];
      break;
    }
  for (i = 0; i < n_hooks; i++) /* none saved: the schedule's start (zero) */
    if (!strcmp(blobs[i].key, TR__LR_STATE_KEY)) {
      char why[200];
      if (tr__lr_state_get((const unsigned char *)blobs[i].data, blobs[i].len, &rf->lr_state, why, sizeof why))
        TR__RUN_BAD(TR_ERR_FORMAT, "tr_run_load: '%s': %s", path, why);
      blobs[i] = blobs[--n_hooks];
      break;
    }
#undef TR__RUN_BAD
done:
  rf->n_hooks = n_hooks;
  return e;
}
/* Before setup: the checkpoint's run block, so the loggers open in its directory; an unreadable file is
   left to tr_run_load (a new version). */
static void tr__run_peek(tr_run *run, const char *path) {
  tr__run_file rf;
  char why[8];
  tr__run_resuming(run, NULL, 0);
  if (tr__run_file_read(&rf, path, why, sizeof why) == TR_OK && rf.run) (void)tr__run_resuming(run, rf.run, rf.run_len);
  tr__run_file_free(&rf);
}
/* The epochs a file of tr_run_save has done: one written at an epoch's end has done that epoch too. */
static int64_t tr__run_file_epochs(const tr_run *run, const tr__run_file *rf) {
  return (int64_t)rf->v[0] + (rf->at == TR_RUN_AT_EPOCH_END && run->desc.epochs != TR_NO);
}
/* With several processes (tr_run_desc.agree) every rank must go on from the same state: the model's bytes
   as save_model wrote them and the counters, hashed (one more read of the file, page-cached by now). */
static int tr__run_hash_loaded(tr_run *run, tr__run_file *rf) {
  unsigned char buf[16384];
  uint64_t left = rf->model_bytes, h;
  unsigned char at = (unsigned char)rf->at;
  tr__sum s = TR__SUM_START;
  rewind(rf->f);
  while (left > 0) {
    size_t k = left < sizeof buf ? (size_t)left : sizeof buf;
    if (fread(buf, 1, k, rf->f) != k) return -1;
    tr__sum_add(&s, buf, k);
    left -= k;
  }
  tr__sum_add(&s, rf->v, sizeof rf->v);
  tr__sum_add(&s, &at, 1);
  h = tr__sum_end(&s);
  run->tr__p->loaded = h ? h : 1; /* 0 is "nothing loaded" */
  return 0;
}
static tr_err tr__run_load_body(tr_run *run, hk_registry *reg, hk_ctx *ctx, const char *path) {
  char *err;
  size_t cap;
  tr__run_file rf;
  uint32_t i;
  int missing = 0;
  tr_err e;
  tr__run_saves_settle(run, ctx, 1); /* the file may be the one being written */
  err = run->tr__p->error;
  cap = sizeof run->tr__p->error;
  err[0] = 0;
  if (!run->desc.load_model) {
    tr__msg(err, cap, "tr_run_load: the run has no load_model (tr_run_setup's save_model / load_model)");
    return TR_ERR_INVALID;
  }
#define TR__RUN_BAD(code, ...) do { tr__msg(err, cap, __VA_ARGS__); e = code; goto done; } while (0)
  if ((e = tr__run_file_read(&rf, path, err, cap)) != TR_OK) goto done;
  if (hk_state_check(reg, rf.blobs, (int)rf.n_hooks, &missing) != HK_OK)
    TR__RUN_BAD(TR_ERR_FORMAT, "tr_run_load: '%s': %s", path, hk_last_error(reg));
  for (i = 0; i < rf.n_hooks; i++)
    if (rf.blobs[i].result == HK_ERR_NOT_FOUND) tr__run_say(run, ctx, "tr_run_load", "'%s' holds state for '%s', which is not registered now (ignored)", path, rf.blobs[i].key);
  if (missing) tr__run_say(run, ctx, "tr_run_load", "'%s': %s (they keep their current state)", path, hk_last_error(reg));
  rewind(rf.f);
  if (run->desc.load_model(run->desc.model_user, rf.f) != 0) TR__RUN_BAD(TR_ERR_FORMAT, "tr_run_load: load_model failed on '%s' (the callbacks and counters are unchanged)", path);
  { /* a loader that reads less (or more) than save_model wrote has not loaded what was saved */
    long at = ftell(rf.f);
    if (at < 0 || (uint64_t)at != rf.model_bytes)
      TR__RUN_BAD(TR_ERR_FORMAT, "tr_run_load: load_model read %ld of the model section's %llu bytes in '%s': it must read "
                  "exactly what save_model wrote (the callbacks and counters are unchanged; the model may be partly loaded)",
                  at, (unsigned long long)rf.model_bytes, path);
  }
  if (run->desc.agree && tr__run_hash_loaded(run, &rf) != 0)
    TR__RUN_BAD(TR_ERR_IO, "tr_run_load: reading '%s' a second time, to compare it with the other ranks', failed", path);
  if (hk_state_load_all(reg, rf.blobs, (int)rf.n_hooks) != HK_OK)
    TR__RUN_BAD(TR_ERR_STATE, "tr_run_load: '%s': a callback refused its state: %s (the model is loaded, the callbacks are unchanged)", path, hk_last_error(reg));
  ctx->epoch = tr__run_file_epochs(run, &rf); /* written at an epoch's end: the next epoch is next */
  ctx->global_step = (int64_t)rf.v[1];
  ctx->batch_idx = rf.at == TR_RUN_AT_EPOCH_END ? 0 : (int64_t)rf.v[2];
  ctx->samples_seen = (int64_t)rf.v[3];
  run->lr_state = rf.lr_state;
  if (rf.val_metrics && tr__val_metrics_get(ctx, rf.val_metrics, rf.val_metrics_len))
    TR__RUN_BAD(TR_ERR_FORMAT, "tr_run_load: '%s': the validation's metrics it keeps are malformed (corrupted?)", path);
  run->resumed_at = rf.at;
  run->tr__p->at = rf.at;
  run->tr__p->resumed_here = 1;
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
  tr__run_file_free(&rf);
  return e;
}

/* ---- a resume with nothing left to train (the rule: tr__resume_finished, train/base.h) ----------------- */
/* 1 when the file would train nothing, or cannot be read (the run failed, saying why), before anything is
   made on disk; *past_stop: a recorded stop the settings now go past. Also hands the loggers its run block. */
static int tr__run_resume_refused(tr_run *run, hk_registry *reg, const char *path, int *past_stop) {
  tr__run_file rf;
  char why[sizeof run->tr__p->failure];
  int64_t epochs, step;
  uint32_t i;
  int refused = 0;
  tr_err e;
  *past_stop = 0;
  if ((e = tr__run_file_read(&rf, path, why, sizeof why)) != TR_OK) {
    tr__run_file_free(&rf);
    tr_run_fail(reg, e, "%s", why);
    return 1;
  }
  (void)tr__run_resuming(run, rf.run, rf.run_len); /* none in the file: a new version_N */
  epochs = tr__run_file_epochs(run, &rf);
  step = (int64_t)rf.v[1];
  refused = tr__resume_finished(why, sizeof why, "tr_run_start", path, epochs, step, run->desc.max_epochs, run->desc.max_steps,
                                "tr_run_desc.");
  if (!refused && run->tr__p->resume_stopped && epochs >= run->desc.min_epochs && step >= run->desc.min_steps) /* (a held stop: it trains on) */
    for (i = 0; i < rf.n_hooks && !refused; i++) {
      int r = run->tr__p->resume_stopped(reg, &rf.blobs[i], "tr_run_start", path, epochs, step, why, sizeof why);
      if (r == 2) *past_stop = 1;
      refused = r == 1;
    }
  tr__run_file_free(&rf);
  if (refused) tr_run_fail(reg, TR_ERR_INVALID, "%s", why);
  return refused;
}

/* ---- start, safe points, finish ------------------------------------------------------------------ */
static void tr__run_unmake(tr_run *run);
/* 1: a logger writes nothing (a resume not loaded yet, at its setup, or failed: every file left as it
   was). A loop that never says tr_run_resumed gets its files at on_fit_start. */
TR__SHARED int tr__run_loading(const tr_run *run, int at_setup) {
  return run && run->tr__p->loading && (at_setup || run->failed);
}
static void tr__run_fire(hk_registry *reg, hk_ctx *ctx, int event, hk_flow *flow) {
  tr_run *run = (tr_run *)hk_attached(reg);
  if (run && run->failed) return;
  (void)HK_FIRE_FLOW(reg, event, ctx, flow);
  tr__run_settle(reg, ctx, flow);
}

/* ---- the state machine: the run's watch on the loop's events ----------------------------------------
   tr_run_start registers "tr_run", first on its events; tr_run_finish removes it. It notes end events whose
   tr_run_* call must come next, and the fit's validations. A training event while a call is missing fails
   the run naming it, and drops the skipped call's queued checkpoints (their hooks may have freed the
   paths). */
#define TR__RUN_GUARD_ORDER (-(1 << 30))
/* The call the loop skipped (which: TR__PEND_BATCH or TR__PEND_EPOCH), seen at `at`: the run fails
   (once), the skipped call's requests are dropped. 1 when the run failed now. */
static int tr__run_missed(tr_run *run, hk_registry *reg, hk_ctx *ctx, unsigned which, const char *at) {
  tr__run_priv *q = run->tr__p;
  int batch = which == TR__PEND_BATCH;
  const char *call = batch ? "tr_run_batch_end" : "tr_run_epoch_end", *event = batch ? "on_train_batch_end" : "on_train_epoch_end";
  q->pending = 0;
  ctx->requests = 0;
  ctx->n_checkpoint_paths = 0;
  ctx->checkpoint_default = 0;
  if (run->failed) return 0; /* said once: the run has failed already */
  tr_run_fail(reg, TR_ERR_INVALID, "%s was not called after %s (at step %lld) before %s: call %s(reg, &ctx, &flow) after "
              "every %s (it sends the step's record and honours what hooks asked for there; those requests are dropped); "
              "the run stops%s%s%s", call, event, (long long)q->pending_step[batch ? 0 : 1], at, call, event,
              ctx->hook_failure ? " (a hook had failed: " : "", ctx->hook_failure ? ctx->hook_failure : "", ctx->hook_failure ? ")" : "");
  hk_set_error(reg, HK_ERR_INVALID, "%s", q->failure);
  return 1;
}
static hk_signal tr__run_watch(hk_ctx *ctx, void *user, unsigned check, unsigned note, const char *at) {
  tr_run *run = (tr_run *)user;
  tr__run_priv *q = run->tr__p;
  unsigned which = q->pending & check;
  hk_signal r = HK_CONTINUE;
  if (which && tr__run_missed(run, ctx->reg, ctx, which & TR__PEND_BATCH ? TR__PEND_BATCH : TR__PEND_EPOCH, at))
    r = hk_fail(ctx, "%s", q->failure);
  if (note) {
    q->pending |= note;
    q->pending_step[note == TR__PEND_BATCH ? 0 : 1] = ctx->global_step;
  }
  return r;
}
static hk_signal tr__run_on_epoch_start(hk_ctx *ctx, void *user) {
  ((tr_run *)user)->tr__p->at = TR_RUN_AT_EPOCH_START;
  return tr__run_watch(ctx, user, TR__PEND_BATCH | TR__PEND_EPOCH, 0, "on_train_epoch_start");
}
static hk_signal tr__run_on_batch_start(hk_ctx *ctx, void *user) {
  tr__run_priv *q = ((tr_run *)user)->tr__p;
  q->at = TR_RUN_AT_BATCH; /* a save from now on: after the last whole batch */
  q->resumed_here = 0;
  return tr__run_watch(ctx, user, TR__PEND_BATCH | TR__PEND_EPOCH, 0, "on_train_batch_start");
}
static hk_signal tr__run_on_after_backward(hk_ctx *ctx, void *user) { /* the gradients changed: the norm is computed anew */
  tr__run_priv *q = ((tr_run *)user)->tr__p;
  if (q->loop_views) q->loop_views(q->loop); /* (llm.c's gradients appear in the first backward) */
  hk_grads_changed(ctx);
  return HK_CONTINUE;
}
static hk_signal tr__run_on_batch_end(hk_ctx *ctx, void *user) {
  return tr__run_watch(ctx, user, TR__PEND_BATCH | TR__PEND_EPOCH, TR__PEND_BATCH, "the next on_train_batch_end");
}
static hk_signal tr__run_on_epoch_end(hk_ctx *ctx, void *user) { /* a batch's call may still come after it */
  ((tr_run *)user)->tr__p->at = TR_RUN_AT_EPOCH_END;
  return tr__run_watch(ctx, user, TR__PEND_EPOCH, TR__PEND_EPOCH, "the next on_train_epoch_end");
}
static hk_signal tr__run_on_sanity_start(hk_ctx *ctx, void *user) { (void)ctx; ((tr_run *)user)->tr__p->in_sanity = 1; return HK_CONTINUE; }
static hk_signal tr__run_on_sanity_end(hk_ctx *ctx, void *user) { (void)ctx; ((tr_run *)user)->tr__p->in_sanity = 0; return HK_CONTINUE; }
static hk_signal tr__run_on_val_epoch_end(hk_ctx *ctx, void *user) {
  tr__run_priv *q = ((tr_run *)user)->tr__p;
  if (!q->in_sanity && ctx->stage != HK_STAGE_SANITY_CHECK) {
    q->val_ran = 1;
    q->val_step = ctx->global_step;
    if (q->at == TR_RUN_AT_BATCH) q->at = TR_RUN_AT_VALIDATION; /* (an epoch's validation: still its end next) */
  }
  return HK_CONTINUE;
}
/* A validation of the fit ended since the last safe point and sent no "val" record: said once per run
   (only when something listens to on_log: without a logger nothing is lost). */
static void tr__run_check_val(tr_run *run, hk_registry *reg, hk_ctx *ctx, const char *at) {
  tr__run_priv *q = run->tr__p;
  if (q->val_ran && !q->val_sent && !q->val_warned && !run->failed && HK_ACTIVE(reg, HK_ON_LOG)) {
    q->val_warned = 1;
    tr__run_say_on(run, ctx, 1, "tr_run", "a validation ended (on_validation_epoch_end at step %lld) and no \"val\" record "
                   "was sent before %s: the loggers never see its val/ metrics; call tr_run_log(reg, &ctx, \"val\") after "
                   "on_validation_epoch_end (said once)", (long long)q->val_step, at);
  }
  q->val_ran = q->val_sent = 0;
}
/* A loop call (fn) needs a run tr_run_start began and none of its saves, loads, records or safe points in
   progress (a hook called it). 0, or the refusal (the run failed when going). */
static int tr__run_refused_now(tr_run *run, hk_registry *reg, const hk_ctx *ctx, const char *fn, const char *after) {
  tr__run_priv *q = run->tr__p;
  if (run->running == HK_STAGE_NONE) {
    (void)tr__run_refuse(reg, TR_ERR_INVALID, "%s: no run is going: call tr_run_start first (%s belongs between "
                         "tr_run_start and tr_run_finish%s)", fn, fn, after);
    return 1;
  }
  if (!q->own_loop) {
    (void)tr__run_refuse(reg, TR_ERR_INVALID, "%s: this %s run was entered with tr_run_enter (train.h's trainer's runs "
                         "are): its loop reaches its safe points and its end itself; %s is for a loop that began its run "
                         "with tr_run_start", fn, hk_stage_name(run->running), fn);
    return 1;
  }
  if (q->busy || q->io || q->sending) {
    char msg[sizeof q->error];
    tr__msg(msg, sizeof msg, "%s: called from a hook while %s%s%s%s runs: call it from the loop, once that has returned", fn,
            q->io ? q->io : q->sending ? "on_log of a record" : q->busy, q->io ? " of '" : "", q->io && q->io_path ? q->io_path : "",
            q->io ? "'" : "");
    tr_run_fail(reg, TR_ERR_INVALID, "%s", msg);
    (void)tr__run_refuse(reg, TR_ERR_INVALID, "%s", msg);
    return 1;
  }
  if (hk_dispatching(reg)) { /* inside a dispatch of the loop's events (ctx->event: the one running) */
    char msg[sizeof q->error];
    tr__msg(msg, sizeof msg, "%s: called from a hook of %s: the loop's place there is the event's, not the loop's; call it "
            "from the loop, once the event has returned%s", fn, hk_event_name(reg, ctx->event),
            !strcmp(fn, "tr_run_finish") ? " (a hook ends the run with HK_STOP, or HK_FAIL)" : "");
    tr_run_fail(reg, TR_ERR_INVALID, "%s", msg);
    (void)tr__run_refuse(reg, TR_ERR_INVALID, "%s", msg);
    return 1;
  }
  return 0;
}

/* What every run begins with, tr_run_start's and tr_run_enter's. */
static void tr__run_begin(tr_run *run, hk_registry *reg, hk_ctx *ctx, hk_stage stage) {
  tr__run_priv *q = run->tr__p;
  run->failed = 0;
  q->err = TR_OK;
  q->error[0] = 0;
  q->failure[0] = 0;
  q->sync_only = 0;
  memset(q->stamp, 0, sizeof q->stamp);
  q->stop_pending = 0;
  q->reg = reg;
  q->lr_known = q->lr_warned = q->lr_hook_said = 0;
  q->at = TR_RUN_AT_BATCH;
  q->resumed_here = 0;
  run->resumed_at = TR_RUN_AT_BATCH;
  q->last_step = ctx->global_step;
  q->pending = 0;
  q->in_sanity = q->val_ran = q->val_sent = q->val_warned = 0;
  q->busy = NULL;
  q->eval = NULL;
  q->loading = 0;
  run->running = stage;
  run->epoch_done = run->validates_next = 0;
  run->accumulation = run->desc.accumulate_grad_batches > 1 ? run->desc.accumulate_grad_batches : 1;
  ctx->reg = reg;
  ctx->stage = stage;
  if (ctx->world_size < 1) ctx->world_size = 1;
  q->rank = ctx->rank; /* tr_print's */
  ctx->requests = 0;
  ctx->n_checkpoint_paths = ctx->checkpoint_default = 0;
  ctx->flow.signals = 0; /* a context used before: its signals were the last run's */
}

/* A logger listens and the whole run is shorter than log_every_n_steps: no training record would ever be sent
   (Lightning warns likewise). Said once, at the start. */
static void tr__run_log_cadence(const tr_run *run, hk_registry *reg, const hk_ctx *ctx) {
  const tr_run_desc *d = &run->desc;
  int64_t n = d->log_every_n_steps ? d->log_every_n_steps : 50, acc = d->accumulate_grad_batches > 1 ? d->accumulate_grad_batches : 1;
  int64_t steps = d->max_steps > 0 ? d->max_steps : d->max_epochs > 0 && d->train_batches > 0 ? d->max_epochs * d->train_batches / acc : 0;
  if (n > 0 && steps > 0 && steps < n && hk_count(reg, HK_ON_LOG) > 0)
    tr__run_say_on(run, ctx, 1, "train.h: warning", "log_every_n_steps is %lld but the run takes at most %lld optimizer "
                   "steps: no training record (train/loss) would be logged; set log_every_n_steps lower, e.g. %lld",
                   (long long)n, (long long)steps, (long long)(steps >= 10 ? steps / 10 : 1));
}
/* A loop without a grad_norm_source gets the run's shared pass (as tr_fit's): nan_guard's norm and
   gradient_monitor's read the gradients once a step. Host views only. */
static void tr__run_grad_pass(tr__run_priv *q, hk_ctx *ctx, int on) {
  int k, host = ctx->grads && ctx->n_tensors > 0;
  if (!on) {
    if (ctx->grad_norm_source == tr__grad_pass_source && ctx->grad_norm_source_user == &q->gpass) ctx->grad_norm_source = NULL;
    return;
  }
  for (k = 0; host && k < ctx->n_tensors; k++) host = !ctx->grads[k].on_device;
  if (ctx->grad_norm_source || !host) return;
  if (q->gpass.n < ctx->n_tensors) {
    double *sq = (double *)realloc(q->gpass.sq, (size_t)ctx->n_tensors * sizeof *sq);
    if (!sq) return; /* (hk_grad_norm's own loop then: two passes, not a failure) */
    q->gpass.sq = sq;
    q->gpass.n = ctx->n_tensors;
  }
  q->gpass.ok = 0;
#if !defined(TRAIN_NO_MATH) && (defined(TRAIN_H) || defined(TRAIN_MATH_H)) /* train.h, or math.h included before */
  q->gpass.sumsq = tr_sumsq; /* hk_sumsq's bits with math.h's kernel (AVX+FMA: half the instructions) */
  q->gpass.threads = 1;
#endif
  ctx->grad_norm_source = tr__grad_pass_source;
  ctx->grad_norm_source_user = &q->gpass;
}
/* ---- resume "auto": the newest checkpoint of this run that loads, or a fresh start ---------------------
   Looked at: save_to, the checkpoint callbacks' dirpaths (tr__run_ckpt_dir), for the default checkpoints/
   of every version under save_dir/name, and ./checkpoints. Each *.ckpt (once, by device and inode) read as
   the resume would (`check`); a failure said in one line. Newest by step, then mtime, then name: every rank on a shared file system
   picks the same, and the ranks compare what they loaded. */
TR__SHARED void tr__run_ckpt_dir(tr_run *run, const char *dir) {
  tr__run_priv *q = run ? run->tr__p : NULL;
  char **grown, *d;
  int i;
  if (!q) return;
  if (!dir || !dir[0]) { q->ckpt_default = 1; return; }
  for (i = 0; i < q->n_ckpt_dirs; i++) if (!strcmp(q->ckpt_dirs[i], dir)) return;
  if (!(d = tr__strdup(dir)) || !(grown = (char **)realloc(q->ckpt_dirs, (size_t)(q->n_ckpt_dirs + 1) * sizeof *grown))) { free(d); return; }
  q->ckpt_dirs = grown;
  q->ckpt_dirs[q->n_ckpt_dirs++] = d;
}
typedef struct tr__auto_pick {
  char *path;
  int64_t step;
  double mtime;
  int seen, skipped, n_ids;
  tr__file_id *ids; /* the files read (device and inode): save_to in a directory looked at, or by another name, once */
} tr__auto_pick;
static void tr__auto_consider(tr_run *run, hk_ctx *ctx, const char *path, tr_ckpt_check_fn check, void *u, tr__auto_pick *best) {
  char why[600];
  int64_t step = 0;
  double mtime = 0;
  size_t n = strlen(path);
#ifdef TR__POSIX
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) return; /* (empty: a name claimed, never saved) */
  mtime = (double)st.st_mtime;
#else
  if (!tr__file_exists(path)) return;
#endif
  if (n < 5 || strcmp(path + n - 5, ".ckpt") || strstr(path, ".tmp.")) return;
#ifdef TR__POSIX
  {
    tr__file_id *grown;
    int i;
    for (i = 0; i < best->n_ids; i++)
      if (best->ids[i].dev == (uint64_t)st.st_dev && best->ids[i].ino == (uint64_t)st.st_ino) return;
    if ((grown = (tr__file_id *)realloc(best->ids, (size_t)(best->n_ids + 1) * sizeof *grown)) != NULL) { /* (else: read again) */
      best->ids = grown;
      best->ids[best->n_ids].set = 1;
      best->ids[best->n_ids].dev = (uint64_t)st.st_dev;
      best->ids[best->n_ids++].ino = (uint64_t)st.st_ino;
    }
  }
#else
  if (best->path && !strcmp(best->path, path)) return; /* (save_to inside a directory looked at) */
#endif
  best->seen++;
  why[0] = 0;
  if (check(u, path, &step, why, sizeof why)) {
    best->skipped++;
    tr__run_say(run, ctx, "resume auto", "skipped %s: %s", path, why[0] ? why : "it does not load");
    return;
  }
  if (best->path && (step < best->step || (step == best->step && (mtime < best->mtime || (mtime == best->mtime && strcmp(path, best->path) < 0)))))
    return;
  free(best->path);
  best->path = tr__strdup(path);
  best->step = step;
  best->mtime = mtime;
}
static void tr__auto_scan(tr_run *run, hk_ctx *ctx, const char *dir, tr_ckpt_check_fn check, void *u, tr__auto_pick *best) {
  char **names = NULL;
  int i, n = tr__dir_names(dir, "", &names);
  for (i = 0; i < n; i++) {
    char *p = tr__join(dir, names[i]);
    if (p) tr__auto_consider(run, ctx, p, check, u, best);
    free(p);
    free(names[i]);
  }
  free(names);
}
/* The chosen file (kept in the run until it ends), or NULL: nothing of this run loads (a fresh start). */
static const char *tr__auto_resume(tr_run *run, hk_ctx *ctx, const char *save_to, tr_ckpt_check_fn check, void *u) {
  tr__run_priv *q = run->tr__p;
  tr__auto_pick best;
  int i;
  memset(&best, 0, sizeof best);
  if (save_to && save_to[0]) tr__auto_consider(run, ctx, save_to, check, u, &best);
  for (i = 0; i < q->n_ckpt_dirs; i++) tr__auto_scan(run, ctx, q->ckpt_dirs[i], check, u, &best);
  if (q->ckpt_default) {
    const char *version = tr__run_str(run, TR__RUN_VERSION, NULL), *name = tr__run_str(run, TR__RUN_NAME, "lightning_logs");
    char *base = name[0] ? tr__join(tr__run_str(run, TR__RUN_SAVE_DIR, "runs"), name) : tr__strdup(tr__run_str(run, TR__RUN_SAVE_DIR, "runs"));
    char **vs = NULL;
    int k, nv = base ? (version && version[0] ? 1 : tr__dir_names(base, "", &vs)) : 0;
    for (k = 0; k < nv; k++) {
      char *vdir = tr__join(base, vs ? vs[k] : version), *cdir = vdir ? tr__join(vdir, "checkpoints") : NULL;
      if (cdir) tr__auto_scan(run, ctx, cdir, check, u, &best);
      free(cdir);
      free(vdir);
      if (vs) free(vs[k]);
    }
    free(vs);
    free(base);
    tr__auto_scan(run, ctx, "checkpoints", check, u, &best);
  }
  free(best.ids);
  free(q->auto_path);
  q->auto_path = best.path;
  if (best.path)
    tr__run_say(run, ctx, "resume auto", "resuming %s (global step %lld; the newest of %d checkpoint%s of this run that load)",
                best.path, (long long)best.step, best.seen - best.skipped, best.seen - best.skipped == 1 ? "" : "s");
  else tr__run_say(run, ctx, "resume auto", "no checkpoint of this run %s: a fresh start", best.seen ? "loads" : "was found");
  return best.path;
}
TRAIN_API const char *tr_run_find_resume(hk_registry *reg, hk_ctx *ctx, const char *save_to, tr_ckpt_check_fn check, void *user) {
  tr_run *run = tr_run_get(reg);
  return run && check ? tr__auto_resume(run, ctx, save_to, check, user) : NULL;
}

/* resume "auto" in a loop of your own: a file of tr_run_save whose state block reads whole. */
static int tr__run_ckpt_check(void *user, const char *path, int64_t *step, char *why, size_t cap) {
  tr__run_file rf;
  tr_err e = tr__run_file_read(&rf, path, why, cap);
  (void)user;
  *step = (int64_t)rf.v[1];
  tr__run_file_free(&rf);
  return e != TR_OK;
}
/* The ranks compare their resume hashes through agree's OR: equal to each rank's own only when all are
   equal; a second vote tells every rank what any saw. */
static void tr__run_agree_loaded(tr_run *run, hk_registry *reg) {
  uint64_t mine = run->tr__p->loaded, all = (uint64_t)run->desc.agree(run->desc.model_user, (int64_t)mine);
  int differ = all != mine;
  int64_t stops = run->desc.agree(run->desc.model_user, differ ? TR_STOP_FAILED : 0);
  if (differ)
    tr_run_fail(reg, TR_ERR_INVALID, "tr_run_start: the ranks resumed different states (this rank's hash of the model's "
                "bytes and counters it loaded: %016llx; every rank's OR'ed: %016llx; 0: a fresh start): every rank must "
                "resume from the same checkpoint, or none", (unsigned long long)mine, (unsigned long long)all);
  else if (stops & TR_STOP_FAILED)
    tr_run_fail(reg, TR_ERR_INVALID, "tr_run_start: another rank resumed a different state (this rank's hash of what it "
                "loaded: %016llx; 0: a fresh start): every rank must resume from the same checkpoint, or none",
                (unsigned long long)mine);
}
TRAIN_API tr_err tr_run_start(hk_registry *reg, hk_ctx *ctx, const char *resume_from) {
  tr_run *run = tr_run_get(reg);
  tr__run_priv *q;
  hk_flow flow = { 0 };
  hk_callback cb;
  hk_opts o;
  hk_err he;
  int past_stop = 0, listened = 0, ev;
  const char *requeued = NULL;
  char line[512], foreign[600];
  if (!run) return reg ? tr__run_refuse(reg, TR_ERR_NOMEM, "tr_run_start: out of memory") : TR_ERR_INVALID;
  if (!ctx) return tr__run_refuse(reg, TR_ERR_INVALID, "tr_run_start: ctx is NULL: give the loop's context");
  q = run->tr__p;
  if (run->running != HK_STAGE_NONE)
    return tr__run_refuse(reg, TR_ERR_INVALID, "tr_run_start: a %s run is going already (%s): %s",
                          hk_stage_name(run->running), tr__run_driver(run), q->own_loop ? "tr_run_finish ends it; call "
                          "tr_run_start after that" : "call tr_run_start after the trainer's run returns");
  { tr_err ge = tr__groups_build(run, reg, ctx, "tr_run_start"); if (ge) return ge; } /* (before anything fires) */
  tr__run_begin(run, reg, ctx, HK_STAGE_FIT);
  q->own_loop = 1;
  q->refused_start = 0;
  q->loaded = 0;
  if (resume_from && !strcmp(resume_from, "auto")) resume_from = tr__auto_resume(run, ctx, run->desc.save_to, tr__run_ckpt_check, run);
  if (!resume_from || !resume_from[0]) resume_from = requeued = tr__preempt_resume(&run->desc.preempt, run->desc.save_to);
  foreign[0] = 0;
  if (requeued) { /* only this job's own checkpoint (save_to may be another job's) */
    tr__run_peek(run, requeued);
    if (tr_run_other_job(reg, requeued, foreign, sizeof foreign)) { resume_from = requeued = NULL; tr__run_resuming(run, NULL, 0); }
  }
  if (resume_from && resume_from[0] && tr__run_resume_refused(run, reg, resume_from, &past_stop)) {
    q->refused_start = 1; /* before anything fires or is made on disk: tr_run_finish reports it, firing nothing */
    return tr__run_said(reg, run, q->err);
  }
  for (ev = 0; ev < HK_EVENT_COUNT && !listened; ev++) listened = hk_count(reg, ev) > 0; /* (before the run's watch) */
  tr__run_grad_pass(q, ctx, 1);
  memset(&cb, 0, sizeof cb); /* the run's watch on the loop's events (see "the state machine" above) */
  cb.name = "tr_run";
  cb.user = run;
  cb.on_train_epoch_start = tr__run_on_epoch_start;
  cb.on_train_batch_start = tr__run_on_batch_start;
  cb.on_train_batch_end = tr__run_on_batch_end;
  cb.on_after_backward = tr__run_on_after_backward;
  cb.on_train_epoch_end = tr__run_on_epoch_end;
  cb.on_sanity_check_start = tr__run_on_sanity_start;
  cb.on_sanity_check_end = tr__run_on_sanity_end;
  cb.on_validation_epoch_end = tr__run_on_val_epoch_end;
  memset(&o, 0, sizeof o);
  o.order = TR__RUN_GUARD_ORDER;
  if ((he = hk_add_callback(reg, &cb, &o, &q->guard)) != HK_OK) {
    q->guard = 0;
    tr_run_fail(reg, he == HK_ERR_NOMEM ? TR_ERR_NOMEM : TR_ERR_INVALID, "tr_run_start: the run cannot watch the loop's "
                "events: %s", hk_last_error(reg));
  }
  /* Nothing registered and nothing to save: Ctrl-C stays as the program had it, and nothing is said */
  if (!run->desc.no_signals && (listened || run->desc.save_to)) tr__run_signals_on(run, 0); /* a second: the end */
  if (tr__slurm_line(line, sizeof line, &run->desc.preempt, q->preempt, run->desc.save_to, requeued)) tr__run_say_on(run, ctx, 1, "train.h", "%s", line);
  if (foreign[0]) tr__run_say_on(run, ctx, 1, "train.h", "%s", foreign);
  if (q->signals && run->desc.save_model && !run->desc.save_to && !hk_find(reg, "on_exception_checkpoint"))
    tr__run_say_on(run, ctx, 1, "tr_run", "Ctrl-C or SIGTERM will stop the run after its current step without saving it: set "
                   "tr_run_desc.save_to (that step's state is saved there) or add on_exception_checkpoint to keep it");
  tr__run_log_cadence(run, reg, ctx);
  q->cont_given = 0;
  if (!resume_from || !resume_from[0]) tr__run_resuming(run, NULL, 0); /* (a resume's block: taken above) */
  q->busy = "tr_run_start";
  q->loading = resume_from && resume_from[0];
  tr__run_fire(reg, ctx, HK_SETUP, &flow);
  tr__run_fire(reg, ctx, HK_CONFIGURE_MODEL, &flow);
  if (!run->failed && tr__save_to_check(run->desc.save_to, "tr_run_start: tr_run_desc.", line, sizeof line))
    tr_run_fail(reg, TR_ERR_INVALID, "%s", line); /* after setup: a logger may have made it (save_to in save_dir) */
  if (!run->failed && resume_from && resume_from[0]) {
    tr_err e = tr_run_load(reg, ctx, resume_from);
    if (e) { char why[sizeof q->error]; memcpy(why, q->error, sizeof why); tr_run_fail(reg, e, "%s", why); }
    else {
      q->loading = 0; /* the loggers may write now: they open at on_fit_start */
      tr__run_say_resumed(run, ctx, resume_from);
      if (past_stop) tr__run_say(run, ctx, "tr_run", "resuming past the early stop that checkpoint recorded: early_stopping's "
                                 "patience given now is larger");
    }
    q->last_step = ctx->global_step;
  }
  tr__run_fire(reg, ctx, HK_ON_FIT_START, &flow);
  tr__run_fire(reg, ctx, HK_ON_TRAIN_START, &flow);
  if (HK_FLOW_HAS(&flow, HK_FLOW_STOP)) q->stop_pending = 1;
  if (run->desc.agree && (run->desc.agree(run->desc.model_user, run->failed ? TR_STOP_FAILED : 0) & TR_STOP_FAILED) && !run->failed)
    tr_run_fail(reg, TR_ERR_COMM, "another rank's run failed to start (tr_run_desc.agree)"); /* every rank's start ends alike */
  if (run->desc.agree && !run->failed) tr__run_agree_loaded(run, reg);
  q->busy = NULL;
  return run->failed ? q->err : TR_OK;
}

/* HK_REQUEST_*: what tr_run_requests does (for the loop's call and the run's own safe points). */
static unsigned tr__run_requests(tr_run *run, hk_registry *reg, hk_ctx *ctx, hk_flow *flow) {
  tr__run_priv *q = run->tr__p;
  unsigned r = ctx->requests;
  ctx->requests = 0;
  if (run->failed) return 0;
  if (r & HK_REQUEST_CHECKPOINT) {
    char why[512];
    int no_default = 0;
    tr_err e;
    q->in_request = 1;
    e = tr__run_checkpoints(ctx, run->desc.save_to, tr__run_checkpoint_to, reg, why, sizeof why, &no_default);
    q->in_request = 0;
    if (no_default) tr__run_say(run, ctx, "train.h: warning", "a hook requested a checkpoint but no default path is set "
                                "(tr_run_desc.save_to; tr_config.save_to for train.h's trainer)");
    if (e) tr_run_fail(reg, e, "%s", why);
  }
  if ((r & HK_REQUEST_LOG) && !run->failed) {
    tr__run_log_line(run, ctx);
    if (run->running == HK_STAGE_FIT && HK_ACTIVE(reg, HK_ON_LOG)) { tr__run_send(run, ctx, "train", flow); tr__run_settle(reg, ctx, flow); }
  }
  return (r & HK_REQUEST_VALIDATION) && !run->failed ? TR_RUN_VALIDATE : 0;
}
TRAIN_API unsigned tr_run_requests(hk_registry *reg, hk_ctx *ctx, hk_flow *flow) {
  tr_run *run = tr_run_get(reg);
  if (!run || !ctx) return reg ? (void)tr__run_refuse(reg, run ? TR_ERR_INVALID : TR_ERR_NOMEM, "tr_run_requests: %s",
                                                    run ? "ctx is NULL: give the loop's context" : "out of memory"), 0u : 0u;
  if (run->running == HK_STAGE_NONE)
    return (void)tr__run_refuse(reg, TR_ERR_INVALID, "tr_run_requests: no run is going: call tr_run_start or tr_run_enter "
                                "first"), 0u;
  if (run->tr__p->sending || run->tr__p->io)
    return (void)tr__run_refuse(reg, TR_ERR_INVALID, "tr_run_requests: called from a hook while %s runs: call it from the "
                                "loop, once that has returned", run->tr__p->sending ? "on_log of a record" : run->tr__p->io), 0u;
  if (run->tr__p->asave) tr__run_saves_settle(run, ctx, 0); /* a save written in the background: done yet? */
  return tr__run_requests(run, reg, ctx, flow);
}

TRAIN_API tr_err tr_run_enter(hk_registry *reg, hk_ctx *ctx, hk_stage stage, const char *resume_from) {
  tr_run *run = tr_run_get(reg);
  tr__run_priv *q;
  if (!run) return reg ? tr__run_refuse(reg, TR_ERR_NOMEM, "tr_run_enter: out of memory") : TR_ERR_INVALID;
  if (!ctx) return tr__run_refuse(reg, TR_ERR_INVALID, "tr_run_enter: ctx is NULL: give the loop's context");
  if (stage == HK_STAGE_NONE || stage == HK_STAGE_SANITY_CHECK)
    return tr__run_refuse(reg, TR_ERR_INVALID, "tr_run_enter: the stage is %s: give the run's stage (fit, validate, test "
                          "or predict)", hk_stage_name(stage));
  q = run->tr__p;
  if (run->running != HK_STAGE_NONE)
    return tr__run_refuse(reg, TR_ERR_INVALID, "tr_run_enter: a %s run is going already (%s): %s", hk_stage_name(run->running),
                          tr__run_driver(run), q->own_loop ? "tr_run_finish ends it first" : "tr_run_leave ends it first");
  { tr_err ge = tr__groups_build(run, reg, ctx, "tr_run_enter"); if (ge) return ge; } /* (before anything fires) */
  tr__run_begin(run, reg, ctx, stage);
  q->own_loop = 0;
  free(q->resume);
  q->resume = resume_from && resume_from[0] ? tr__strdup(resume_from) : NULL;
  run->resume_from = q->resume ? q->resume : "";
  if (!q->resume) tr__run_resuming(run, NULL, 0); /* a resume continues its run: the block tr_run_continue gave, */
  else if (!q->cont_given) tr__run_peek(run, q->resume); /* or the one in a file of tr_run_save */
  q->cont_given = 0;
  q->loading = q->resume != NULL; /* until tr_run_resumed: the loggers write nothing */
  if (stage == HK_STAGE_FIT) { /* the stop signals, as tr_run_start's; the driver acts on them between its events */
    char line[512];
    const char *save_to = run->desc.save_to, *requeued = q->resume && save_to && !strcmp(q->resume, save_to) &&
                                                         tr__preempt_resume(&run->desc.preempt, save_to) ? save_to : NULL;
    if (!run->desc.no_signals) tr__run_signals_on(run, 1);
    if (tr__slurm_line(line, sizeof line, &run->desc.preempt, q->preempt, save_to, requeued)) tr__run_say_on(run, ctx, 1, "train.h", "%s", line);
  }
  return TR_OK;
}
TRAIN_API int tr_run_stops(hk_registry *reg, int64_t *sigterm, int *preempted) {
  tr_run *run = reg ? (tr_run *)hk_attached(reg) : NULL;
  int pre = 0, n = run ? tr__run_stops(run->tr__p, &pre) : 0;
  if (sigterm) *sigterm = n ? tr__sigterm_bit() : 0;
  if (preempted) *preempted = pre;
  return n;
}
TRAIN_API void tr_run_stops_handled(hk_registry *reg) {
  tr_run *run = reg ? (tr_run *)hk_attached(reg) : NULL;
  if (run) run->tr__p->sig_base = hk_stop_requested();
}
TRAIN_API void tr_run_leave(hk_registry *reg, hk_ctx *ctx) {
  tr_run *run = reg ? (tr_run *)hk_attached(reg) : NULL;
  if (!run || run->running == HK_STAGE_NONE || run->tr__p->own_loop) return;
  tr__run_signals_off(run);
  tr__run_unmake(run);
  run->running = HK_STAGE_NONE;
  run->resume_from = "";
  run->epoch_done = run->validates_next = 0;
  run->tr__p->busy = NULL;
  if (ctx) {
    tr__run_saves_settle(run, ctx, 1); /* a tr_run_save written in the background is on disk first */
    ctx->requests = 0;
  }
}
TRAIN_API void tr_run_resumed(hk_registry *reg, const hk_ctx *ctx) {
  tr_run *run = reg ? (tr_run *)hk_attached(reg) : NULL;
  if (!reg) return;
  if (!run || !ctx || run->running == HK_STAGE_NONE || run->tr__p->own_loop || !run->resume_from[0]) {
    (void)tr__run_refuse(reg, TR_ERR_INVALID, "tr_run_resumed: %s: it says where a run entered with a checkpoint "
                         "(tr_run_enter's resume_from) goes on from, once the loop has restored it",
                         !ctx ? "ctx is NULL" : !run || run->running == HK_STAGE_NONE ? "no run is going"
                         : run->tr__p->own_loop ? "tr_run_start began this run (its resume says so itself)"
                         : "tr_run_enter named no checkpoint");
    return;
  }
  run->tr__p->loading = 0; /* the loggers may write now (they open at on_fit_start) */
  tr__run_say_resumed(run, ctx, run->resume_from);
}

/* A safe point: requests, signals, the stop decision. epoch_end: after on_train_epoch_end. */
static unsigned tr__run_safe_point(tr_run *run, hk_registry *reg, hk_ctx *ctx, hk_flow *flow, int epoch_end) {
  tr__run_priv *q = run->tr__p;
  unsigned out = 0;
  int64_t stops;
  int hook_stop;
  if (flow) flow->signals |= ctx->flow.signals; /* a site fired without the flow: its signals count all the same */
  ctx->flow.signals = 0;
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
  if (ctx->requests) out |= tr__run_requests(run, reg, ctx, flow); /* (none: nothing to clear, nothing to call) */
  hook_stop = flow && HK_FLOW_HAS(flow, HK_FLOW_STOP);
  if (q->signals | q->preempt | run->failed | hook_stop || run->desc.agree) { /* (agree: every rank calls it, always) */
    int preempted, n = tr__run_stops(q, &preempted);
    stops = tr__stops(n, preempted, run->failed, hook_stop, run->desc.agree, run->desc.model_user);
  } else stops = 0;
  if ((stops & TR_STOP_FAILED) && !run->failed) tr_run_fail(reg, TR_ERR_COMM, "another rank's run failed (tr_run_desc.agree)");
  if ((stops & TR_STOP_HOOK) && flow) hk_flow_raise(flow, HK_STOP); /* a hook's stop on any rank: every rank's */
  if ((stops & (TR_STOP_SIGNAL | TR_STOP_PREEMPT)) && !run->failed) { /* the step just ended is saved (the loop's save) */
    char why[512], msg[1024];
    int saves = run->desc.save_to && (run->desc.save_model || run->desc.save_checkpoint);
    tr_err e = saves ? tr__run_checkpoint_to(reg, ctx, run->desc.save_to, why, sizeof why) : TR_OK;
    tr__preempt_stopped(msg, sizeof msg, stops, ctx->global_step, saves ? run->desc.save_to : NULL, e ? why : NULL, &run->desc.preempt, ctx->rank);
    tr_run_fail(reg, TR_ERR_INTERRUPTED, "%s", msg);
  }
  if (flow && HK_FLOW_HAS(flow, HK_FLOW_STOP)) {
    int64_t epochs = ctx->epoch + (epoch_end ? 1 : 0);
    if (epochs >= run->desc.min_epochs && ctx->global_step >= run->desc.min_steps) out |= TR_RUN_STOP;
  }
  if (q->stop_pending || run->failed) out |= TR_RUN_STOP;
  if (flow) hk_flow_clear(flow, epoch_end ? HK_FLOW_EPOCH_SIGNALS : HK_FLOW_BATCH_SIGNALS); /* the batch (epoch) is over */
  return out;
}
/* tr_run_batch_end and tr_run_epoch_end: the loop's safe points, where the state machine allows one. */
static unsigned tr__run_safe_at(tr_run *run, hk_registry *reg, hk_ctx *ctx, hk_flow *flow, int epoch_end, const char *fn);
static unsigned tr__run_safe_call(hk_registry *reg, hk_ctx *ctx, hk_flow *flow, int epoch_end) {
  const char *fn = epoch_end ? "tr_run_epoch_end" : "tr_run_batch_end";
  tr_run *run = tr__run_of(reg);
  if (!run) {
    if (reg) (void)tr__run_refuse(reg, TR_ERR_NOMEM, "%s: out of memory", fn);
    return TR_RUN_STOP;
  }
  if (!ctx) return (void)tr__run_refuse(reg, TR_ERR_INVALID, "%s: ctx is NULL: give the loop's context", fn), TR_RUN_STOP;
  if (tr__run_refused_now(run, reg, ctx, fn, epoch_end ? ", after on_train_epoch_end" : ", after on_train_batch_end")) return TR_RUN_STOP;
  return tr__run_safe_at(run, reg, ctx, flow, epoch_end, fn);
}
/* The safe point of a call that was allowed (tr_run_next's loop comes here directly: it checked its own call). */
static unsigned tr__run_safe_at(tr_run *run, hk_registry *reg, hk_ctx *ctx, hk_flow *flow, int epoch_end, const char *fn) {
  tr__run_priv *q = run->tr__p;
  unsigned out;
  if (epoch_end && (q->pending & TR__PEND_BATCH)) (void)tr__run_missed(run, reg, ctx, TR__PEND_BATCH, fn); /* its record is lost */
  if (epoch_end) run->epoch_done = 0; /* the epoch is over: ctx->epoch moves on */
  else if (run->train_batches > 0 && ctx->batch_idx + 1 >= run->train_batches && run->desc.epochs != TR_NO) run->epoch_done = 1;
  q->pending &= epoch_end ? 0u : ~(unsigned)TR__PEND_BATCH;
  if (q->val_ran | q->val_sent) tr__run_check_val(run, reg, ctx, fn);
  q->busy = fn;
  out = tr__run_safe_point(run, reg, ctx, flow, epoch_end);
  q->busy = NULL;
  return out;
}
TRAIN_API unsigned tr_run_batch_end(hk_registry *reg, hk_ctx *ctx, hk_flow *flow) { return tr__run_safe_call(reg, ctx, flow, 0); }
TRAIN_API unsigned tr_run_epoch_end(hk_registry *reg, hk_ctx *ctx, hk_flow *flow) { return tr__run_safe_call(reg, ctx, flow, 1); }
TRAIN_API int64_t tr_run_epoch_start(hk_registry *reg, hk_ctx *ctx, hk_flow *flow, int64_t n_batches) {
  tr_run *run = tr_run_get(reg);
  tr__run_priv *q;
  int64_t first = 0;
  if (!run || !ctx) {
    if (reg) (void)tr__run_refuse(reg, run ? TR_ERR_INVALID : TR_ERR_NOMEM, "tr_run_epoch_start: %s", run ? "ctx is NULL: give the loop's context" : "out of memory");
    return n_batches;
  }
  if (tr__run_refused_now(run, reg, ctx, "tr_run_epoch_start", ", where on_train_epoch_start belongs")) return n_batches;
  q = run->tr__p;
  if (n_batches < 0) {
    tr_run_fail(reg, TR_ERR_INVALID, "tr_run_epoch_start: n_batches is %lld: give the epoch's training batches (0: unknown)", (long long)n_batches);
    return 0;
  }
  if (n_batches > 0) run->train_batches = n_batches;
  run->epoch_done = 0;
  if (q->resumed_here && (q->at == TR_RUN_AT_BATCH || q->at == TR_RUN_AT_VALIDATION))
    first = ctx->batch_idx + 1; /* in the middle of the epoch: its start fired before the checkpoint */
  ctx->batch_idx = first;
  if (first == 0) (void)HK_FIRE_FLOW(reg, HK_ON_TRAIN_EPOCH_START, ctx, flow);
  return first;
}
/* The flow signals an evaluation keeps for itself: its batches' skips and its early end. */
#define TR__EVAL_OWN (HK_SIGNAL_BIT(HK_SKIP_BATCH) | HK_SIGNAL_BIT(HK_STOP_EPOCH))
static int tr__run_eval_refused(tr_run *run, hk_registry *reg, const char *fn, const hk_ctx *ctx, const hk_flow *flow) {
  tr__run_priv *q = run->tr__p;
  if (!ctx || !flow) return (void)tr__run_refuse(reg, TR_ERR_INVALID, "%s: ctx and flow are required: give the loop's", fn), 1;
  if (run->running == HK_STAGE_NONE)
    return (void)tr__run_refuse(reg, TR_ERR_INVALID, "%s: no run is going: call tr_run_start (or tr_run_enter) first", fn), 1;
  if (q->sending || q->io || q->busy)
    return (void)tr__run_refuse(reg, TR_ERR_INVALID, "%s: called from a hook while %s runs: call it from the loop", fn,
                                q->io ? q->io : q->sending ? "on_log of a record" : q->busy), 1;
  if (hk_dispatching(reg))
    return (void)tr__run_refuse(reg, TR_ERR_INVALID, "%s: called from a hook of %s: call it from the loop", fn,
                                hk_event_name(reg, ctx->event)), 1;
  return 0;
}
TRAIN_API int64_t tr_run_eval_start(hk_registry *reg, hk_ctx *ctx, hk_flow *flow, const char *stage, int64_t n_batches) {
  tr_run *run = tr_run_get(reg);
  tr__run_priv *q;
  int test;
  if (!run) return reg ? (void)tr__run_refuse(reg, TR_ERR_NOMEM, "tr_run_eval_start: out of memory"), n_batches : n_batches;
  if (tr__run_eval_refused(run, reg, "tr_run_eval_start", ctx, flow)) return n_batches;
  q = run->tr__p;
  if (!stage || (strcmp(stage, "val") && strcmp(stage, "test")))
    return (void)tr__run_refuse(reg, TR_ERR_INVALID, "tr_run_eval_start: the stage '%s' is not \"val\" or \"test\"",
                                stage ? stage : "(null)"), n_batches;
  if (q->eval)
    return (void)tr__run_refuse(reg, TR_ERR_INVALID, "tr_run_eval_start: the %s evaluation begun before has not ended: "
                                "call tr_run_eval_end first", q->eval), n_batches;
  test = !strcmp(stage, "test");
  q->eval = test ? "test" : "val";
  q->eval_idx = ctx->batch_idx;
  q->eval_loss = ctx->loss;
  q->eval_batch = ctx->batch;
  flow->signals |= ctx->flow.signals; /* the training's signals so far, from every site */
  ctx->flow.signals = 0;
  q->eval_signals = flow->signals & TR__EVAL_OWN;
  hk_flow_clear(flow, TR__EVAL_OWN);
  if (n_batches > 0) run->eval_batches = n_batches;
  ctx->batch_idx = 0;
  (void)HK_FIRE_FLOW(reg, test ? HK_ON_TEST_START : HK_ON_VALIDATION_START, ctx, flow);
  (void)HK_FIRE_FLOW(reg, test ? HK_ON_TEST_EPOCH_START : HK_ON_VALIDATION_EPOCH_START, ctx, flow);
  return 0;
}
static int tr__run_nan(double x) { uint64_t u; memcpy(&u, &x, sizeof u); return (u & 0x7FFFFFFFFFFFFFFFull) > 0x7FF0000000000000ull; }
TRAIN_API void tr_run_eval_end(hk_registry *reg, hk_ctx *ctx, hk_flow *flow, double loss) {
  tr_run *run = tr_run_get(reg);
  tr__run_priv *q;
  int test;
  if (!run) { if (reg) (void)tr__run_refuse(reg, TR_ERR_NOMEM, "tr_run_eval_end: out of memory"); return; }
  if (tr__run_eval_refused(run, reg, "tr_run_eval_end", ctx, flow)) return;
  q = run->tr__p;
  if (!q->eval) { (void)tr__run_refuse(reg, TR_ERR_INVALID, "tr_run_eval_end: no evaluation is going: call tr_run_eval_start first"); return; }
  test = !strcmp(q->eval, "test");
  if (!tr__run_nan(loss)) {
    ctx->loss = loss;
    if (hk_metric_set(ctx, test ? "test/loss" : "val/loss", loss) != HK_OK) tr_run_fail(reg, TR_ERR_NOMEM, "tr_run_eval_end: out of memory");
  }
  (void)HK_FIRE_FLOW(reg, test ? HK_ON_TEST_EPOCH_END : HK_ON_VALIDATION_EPOCH_END, ctx, flow);
  if (ctx->stage != HK_STAGE_SANITY_CHECK && !q->in_sanity && tr_run_log(reg, ctx, q->eval) == HK_FAIL) hk_flow_raise(flow, HK_FAIL);
  (void)HK_FIRE_FLOW(reg, test ? HK_ON_TEST_END : HK_ON_VALIDATION_END, ctx, flow);
  ctx->batch_idx = q->eval_idx;
  ctx->loss = q->eval_loss;
  ctx->batch = q->eval_batch;
  flow->signals = ((flow->signals | ctx->flow.signals) & ~TR__EVAL_OWN) | q->eval_signals; /* the evaluation's own stay in it */
  ctx->flow.signals = 0;
  q->eval = NULL;
}
TRAIN_API int tr_run_resumed_at(hk_registry *reg, tr_run_at at) {
  tr_run *run = reg ? tr_run_get(reg) : NULL;
  return run && run->running != HK_STAGE_NONE && run->tr__p->resumed_here && run->tr__p->at == at;
}

/* A run that failed says why by itself, once, whatever the loop prints (stderr or tr_run_desc.log, above the bar). */
static void tr__run_said_end(const tr_run *run, const hk_ctx *ctx, tr_err e) {
  tr__run_say(run, ctx, "train.h", "%s%s", e == TR_ERR_INTERRUPTED ? "" : "the run failed: ", run->tr__p->failure);
}
TRAIN_API tr_err tr_run_finish(hk_registry *reg, hk_ctx *ctx, tr_err status) {
  tr_run *run = tr_run_get(reg);
  tr__run_priv *q;
  hk_flow flow = { 0 };
  tr_err e;
  if (!run) return reg ? tr__run_refuse(reg, TR_ERR_NOMEM, "tr_run_finish: out of memory") : TR_ERR_INVALID;
  if (!ctx) return tr__run_refuse(reg, TR_ERR_INVALID, "tr_run_finish: ctx is NULL: give the loop's context");
  q = run->tr__p;
  if (run->running == HK_STAGE_NONE)
    return tr__run_refuse(reg, TR_ERR_INVALID, "tr_run_finish: no run is going: call tr_run_start first (tr_run_finish "
                          "ends the run tr_run_start began, once)");
  if (tr__run_refused_now(run, reg, ctx, "tr_run_finish", "")) return TR_ERR_INVALID;
  if (q->refused_start) { /* tr_run_start refused to begin it: nothing fired, so nothing ends (no on_exception, no teardown) */
    q->refused_start = 0;
    memcpy(q->error, q->failure, sizeof q->error);
    tr__run_said_end(run, ctx, q->err);
    run->running = HK_STAGE_NONE;
    q->own_loop = 0;
    ctx->stage = HK_STAGE_NONE;
    ctx->requests = 0;
    return q->err;
  }
  q->busy = "tr_run_finish";
  if (status != TR_OK) tr_run_fail(reg, status, "the loop ended the run: %s", tr_err_name(status));
  if (q->pending) (void)tr__run_missed(run, reg, ctx, q->pending & TR__PEND_BATCH ? TR__PEND_BATCH : TR__PEND_EPOCH, "tr_run_finish");
  tr__run_check_val(run, reg, ctx, "tr_run_finish");
  ctx->stage = HK_STAGE_FIT;
  if (!run->failed) {
    tr__run_fire(reg, ctx, HK_ON_TRAIN_END, &flow);
    if (!run->failed && (ctx->requests & (HK_REQUEST_CHECKPOINT | HK_REQUEST_LOG))) {
      ctx->requests &= HK_REQUEST_CHECKPOINT | HK_REQUEST_LOG; /* a validation is not run any more */
      tr__run_settle(reg, ctx, &flow); /* no safe point: training is over, a Ctrl-C now stops nothing */
      (void)tr__run_requests(run, reg, ctx, &flow);
    }
    tr__run_fire(reg, ctx, HK_ON_FIT_END, &flow);
  }
  tr__run_saves_settle(run, ctx, 1); /* the run ends once its last save is on disk (or has failed it) */
  q->sync_only = 1;                  /* a save from on_exception or teardown: nothing collects it later */
  if (run->failed) {
    ctx->abort_reason = q->failure;
    ctx->hook_failure = NULL;
    (void)HK_FIRE(reg, HK_ON_EXCEPTION, ctx);
    if (ctx->hook_failure) tr__run_say(run, ctx, "tr_run", "%s (on_exception: reported only)", ctx->hook_failure);
  }
  ctx->hook_failure = NULL;
  (void)HK_FIRE(reg, HK_TEARDOWN, ctx);
  if (ctx->hook_failure) tr__run_say(run, ctx, "tr_run", "%s (teardown: reported only)", ctx->hook_failure);
  ctx->hook_failure = NULL;
  ctx->abort_reason = NULL;
  tr__run_signals_off(run);
  tr__run_unmake(run);
  if (q->guard && hk_callback_get(reg, q->guard)) (void)hk_off(reg, q->guard);
  tr__run_grad_pass(q, ctx, 0);
  q->guard = 0;
  q->pending = 0;
  e = run->failed ? q->err : TR_OK;
  if (run->failed) memcpy(q->error, q->failure, sizeof q->error); /* tr_run_error: why it failed */
  if (run->failed) tr__run_said_end(run, ctx, e);
  run->running = HK_STAGE_NONE;
  q->own_loop = 0;
  q->busy = NULL;
  ctx->stage = HK_STAGE_NONE;
  ctx->requests = 0;
  return e;
}

/* ---- the run's records: histograms riding with the next one, a record of the loop's own ---------- */
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

/* -- the version directory: save_dir/name/version_N, shared by one trainer's loggers -- */
static int64_t tr__next_version(const char *base) { return tr__dir_max_number(base, "version_") + 1; }

/* Why the checkpoint's directory cannot be continued, from tr__dir_hold's error (or 0: it is another
   directory now than the one the run wrote). */
static const char *tr__run_lost(int e) {
  return e == ENOENT ? "it is gone" : e == ENOTDIR ? "a symlink or a file is there now (not followed)"
       : e == EWOULDBLOCK ? "another process holds it (the run that wrote it, or another resume of it)"
       : e == 0 ? "another directory is there now than the one the run wrote" : strerror(e);
}

/* A version directory held (tr__dir_hold: *fd >= 0 once held) and its run_id read into id: 0 when it is want;
   EXDEV another run's; else the hold's or the read's errno (ENOENT with *fd >= 0: no run_id file). */
static int tr__run_dir_hold_own(const char *dir, const char *want, char id[33], int *fd, uint64_t *dev, uint64_t *ino) {
  int e = tr__dir_hold(dir, fd, dev, ino);
  if (!e && (e = tr__run_id_read(dir, id)) == 0 && strcmp(id, want)) e = EXDEV;
  return e;
}
/* The checkpoint's version directory renamed under base (version_3 to baseline: its last name gone, or
   claimed since by a fresh run) is known by its run id: the one directory there (no symlink: tr__dir_hold
   refuses those) whose run_id file holds id replaces *look. 0; ENOENT none; EEXIST two or more (a copy, or a
   version a resume fell back to: which one is the run's is not known, so neither is continued; why said in
   two); ENOMEM. */
static int tr__run_dir_find(const char *base, const char *id, char **look, char *two, size_t two_len) {
  char **names = NULL, *found = NULL, got[33];
  int n = tr__dir_names(base, "", &names), i, e = n < 0 ? ENOMEM : ENOENT, fd, first = -1;
  uint64_t dev, ino;
  for (i = 0; i < n; i++) {
    char *p = strcmp(names[i], ".") && strcmp(names[i], "..") ? tr__join(base, names[i]) : NULL;
    if (p && tr__run_id_read(p, got) == 0 && !strcmp(got, id) && tr__dir_hold(p, &fd, &dev, &ino) != ENOTDIR) {
      tr__dir_release(fd); /* (held again by the caller, as a leaf found by its name) */
      if (found) {
        snprintf(two, two_len, "both %s and %s beside it hold its run_id (a copy?): which one is its own is not "
                 "known (remove the other's run_id file to continue there)", names[first], names[i]);
        e = EEXIST;
        free(p);
        break;
      }
      found = p;
      first = i;
      e = 0;
    } else free(p);
  }
  for (i = 0; i < n; i++) free(names[i]);
  free(names);
  if (e) { free(found); return e; }
  free(*look);
  *look = found;
  return 0;
}

/* The directory a logger writes into (new string), made with its parents; NULL and why on failure. A new
   version_N is claimed with one mkdir (EEXIST: N+1), so parallel runs never share one; a given version is
   used as it is; each is held (tr__dir_hold). A resume continues its run's directory (*continued = 1)
   unless new_version_on_resume, another process holds it, or its run_id is not the block's; found by its
   last name under save_dir/name, or where that name is gone by its run_id there (tr__run_dir_find), so a
   moved, respelt or renamed one continues (a version 1 block: same spelling, device, inode). Otherwise a new
   version_N, said once: nothing of another run is rewritten. */
static char *tr__run_dir_get(tr_run *run, const char *save_dir, const char *name, const char *version,
                             char *why, size_t why_len, int *continued) {
  tr__run_priv *q = run ? run->tr__p : NULL;
  char *base = name[0] ? tr__join(save_dir, name) : tr__strdup(save_dir), *dir = NULL, *look = NULL, id[33] = "", two[800] = "";
  const char *slash, *lost = NULL;
  tr__run_dir *rd = NULL;
  int named = version && version[0], fd = -1, e, cont = 0, made = 0;
  uint64_t dev = 0, ino = 0;
  *continued = 0;
  if (base && named) { /* the entry of a named version is the directory itself */
    char *d = tr__join(base, version);
    free(base);
    base = d;
  }
  if (!base) { snprintf(why, why_len, "out of memory"); return NULL; }
  for (rd = q ? q->dirs : NULL; rd; rd = rd->next)
    if (!strcmp(rd->base, base)) break;
  if (rd) { /* this registry has it already */
    free(base);
    if (!(dir = tr__strdup(rd->dir))) snprintf(why, why_len, "out of memory");
    *continued = rd->continued;
    return dir;
  }
  if (tr__mkdirs(base)) {
    snprintf(why, why_len, "cannot create the directory %s: %s", base, strerror(errno));
    free(base);
    return NULL;
  }
  if (q && (!q->cont_dir || run->desc.new_version_on_resume == TR_YES)) q = NULL; /* nothing to continue */
  if (named) {
    if (!(dir = tr__strdup(base))) { snprintf(why, why_len, "out of memory"); free(base); return NULL; }
    if (tr__dir_hold(dir, &fd, &dev, &ino) == 0) { /* held by another process: used as it is, as always */
      (void)tr__run_id_read(dir, id);
      cont = q && (q->cont_id[0] ? !strcmp(id, q->cont_id) : q->cont_version < 2 && dev == q->cont_dev && ino == q->cont_ino);
    }
  } else if (q && q->cont_id[0]) { /* the checkpoint's version_N under base, known by its run id */
    const char *leaf = strrchr(q->cont_dir, '/');
    if (!(look = tr__join(base, leaf ? leaf + 1 : q->cont_dir))) { snprintf(why, why_len, "out of memory"); free(base); return NULL; }
    e = tr__run_dir_hold_own(look, q->cont_id, id, &fd, &dev, &ino);
    if ((e == ENOENT || e == EINVAL || e == EXDEV) && tr__run_dir_find(base, q->cont_id, &look, two, sizeof two) == 0) {
      /* its name gone, or another run's now (a fresh run claims a freed version_N): renamed, found by its run
         id, then held and checked as a leaf found by its name */
      tr__dir_release(fd);
      fd = -1;
      e = tr__run_dir_hold_own(look, q->cont_id, id, &fd, &dev, &ino);
    }
    if (!e) {
      cont = 1;
      dir = look;
      look = NULL;
    } else {
      lost = two[0] ? two : e == ENOENT && fd >= 0 ? "it has no run_id file: another run's directory is there" /* (the id is written first) */
           : e == EINVAL ? "its run_id file is not one this library wrote"
           : e == EXDEV ? "it is another run's (its run_id differs from the checkpoint's)" : tr__run_lost(e);
      tr__dir_release(fd);
      fd = -1;
    }
  } else if (q && q->cont_version < 2 && (slash = strrchr(q->cont_dir, '/')) != NULL && (size_t)(slash - q->cont_dir) == strlen(base) &&
             !strncmp(q->cont_dir, base, strlen(base))) { /* the checkpoint's directory is one of base's */
    e = tr__dir_hold(q->cont_dir, &fd, &dev, &ino);
    if (!e && dev == q->cont_dev && ino == q->cont_ino) {
      cont = 1;
      (void)tr__run_id_read(q->cont_dir, id); /* (continued by a version 2 run since: its id) */
      if (!(dir = tr__strdup(q->cont_dir))) { snprintf(why, why_len, "out of memory"); tr__dir_release(fd); free(base); return NULL; }
    } else {
      lost = tr__run_lost(e);
      tr__dir_release(fd);
      fd = -1;
    }
  }
  if (!dir) {
    int64_t v = tr__next_version(base);
    int tries;
    for (tries = 0; tries < 100000; tries++, v++) {
      char leaf[40];
      snprintf(leaf, sizeof leaf, "version_%lld", (long long)v);
      if (!(dir = tr__join(base, leaf))) break;
#ifdef TR__POSIX
      if (mkdir(dir, 0777) == 0) { /* ours */
        (void)tr__dir_hold(dir, &fd, &dev, &ino);
        made = 1;
        break;
      }
      if (errno != EEXIST) {
        snprintf(why, why_len, "cannot create the directory %s: %s", dir, strerror(errno));
        free(dir);
        free(base);
        free(look);
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
    free(look);
    return NULL;
  }
  if (lost) { /* (a new version_N can take the very name: made by our mkdir, so nothing was there) */
    const char *named = look && strcmp(look, q->cont_dir) ? look : q->cont_dir;
    const char *into = strcmp(dir, named) ? dir : "a new directory of that name";
    if (named == look)
      tr__run_say(run, NULL, "train.h: warning", "the resumed run does not continue in %s (where its checkpoint was written, "
                  "%s): %s; it logs into %s instead", look, q->cont_dir, lost, into);
    else
      tr__run_say(run, NULL, "train.h: warning", "the resumed run does not continue in %s, where its checkpoint was written: "
                  "%s; it logs into %s instead", q->cont_dir, lost, into);
  }
  free(look);
  if (run && (rd = (tr__run_dir *)calloc(1, sizeof *rd)) != NULL) {
    rd->base = base;
    rd->dir = tr__strdup(dir);
    rd->fd = fd;
    rd->dev = dev;
    rd->ino = ino;
    rd->continued = cont;
    rd->made = made;
    if (cont || named) memcpy(rd->id, id, sizeof rd->id); /* a continued run's id is its directory's */
    if (cont && !run->tr__p->id[0]) memcpy(run->tr__p->id, id, sizeof id);
    if (rd->dir) { rd->next = run->tr__p->dirs; run->tr__p->dirs = rd; base = NULL; fd = -1; }
    else { free(rd); rd = NULL; }
  }
  tr__dir_release(fd); /* out of memory: not kept, not held */
  free(base);
  *continued = cont && rd;
  return dir;
}

/* A resume that failed to load removes the version_N it made while empty: no empty version left. */
static void tr__run_unmake(tr_run *run) {
  tr__run_priv *q = run->tr__p;
  tr__run_dir **at = &q->dirs;
  int loading = q->loading;
  q->loading = 0;
  if (!loading || !run->failed) return;
  while (*at) {
    tr__run_dir *rd = *at;
#ifdef TR__POSIX
    if (rd->made && rmdir(rd->dir) == 0) { /* (not empty: something was written there; it stays the run's) */
      if (q->dir && !strcmp(q->dir, rd->dir)) { free(q->dir); q->dir = NULL; }
      *at = rd->next;
      tr__dir_release(rd->fd);
      free(rd->base); free(rd->dir); free(rd);
      continue;
    }
#endif
    at = &rd->next;
  }
}

/* The run's directory is the first one made for it (model_checkpoint's default goes under it). */
TR__SHARED void tr__run_note_dir(tr_run *run, const char *dir) {
  if (run && !run->tr__p->dir && dir) run->tr__p->dir = tr__strdup(dir); /* out of memory: ./checkpoints */
}
/* The directory the resumed checkpoint names (its block's), where the run continues it under another path (moved,
   renamed, spelled otherwise: the run's directory is that one, known by its run id); else NULL. A default path
   under it (model_checkpoint's checkpoints/) went with it. */
TR__SHARED const char *tr__run_moved_from(const tr_run *run) {
  const tr__run_priv *q = run ? run->tr__p : NULL;
  const tr__run_dir *rd;
  if (!q || !q->dir || !q->cont_dir || !strcmp(q->dir, q->cont_dir)) return NULL;
  for (rd = q->dirs; rd; rd = rd->next)
    if (rd->continued && !strcmp(rd->dir, q->dir)) return q->cont_dir;
  return NULL;
}

TRAIN_API const char *tr_run_dir_id(hk_registry *reg, const char **id) {
  const tr_run *run = reg ? (const tr_run *)hk_attached(reg) : NULL;
  if (id) *id = run ? run->tr__p->id : "";
  return run ? run->tr__p->dir : NULL;
}
TRAIN_API tr_err tr_run_dir_adopt(hk_registry *reg, const char *dir, const char *id) {
  tr_run *run = tr_run_get(reg);
  if (!run) return TR_ERR_NOMEM;
  if (id && id[0] && !run->tr__p->id[0]) {
    if (!tr__run_id_ok(id)) return tr__run_refuse(reg, TR_ERR_INVALID, "tr_run_dir_adopt: '%s' is not a run id (32 lowercase hex digits)", id);
    memcpy(run->tr__p->id, id, sizeof run->tr__p->id);
  }
  if (dir && dir[0] && !run->tr__p->dir && !(run->tr__p->dir = tr__strdup(dir))) return TR_ERR_NOMEM;
  return TR_OK;
}
TRAIN_API const char *tr_run_dir(hk_registry *reg) {
  tr_run *run = tr_run_get(reg);
  char why[600], *dir;
  int continued;
  if (!run) return NULL;
  if (run->tr__p->dir) return run->tr__p->dir; /* a logger opened it already, wherever its save_dir says */
  if (!(dir = tr__run_dir_get(run, tr__run_str(run, TR__RUN_SAVE_DIR, "runs"), tr__run_str(run, TR__RUN_NAME, "lightning_logs"),
                              tr__run_str(run, TR__RUN_VERSION, NULL), why, sizeof why, &continued))) {
    (void)tr__run_refuse(reg, why[0] ? TR_ERR_INVALID : TR_ERR_NOMEM, "tr_run_dir: %s", why[0] ? why : "out of memory");
    return NULL;
  }
  tr__run_note_dir(run, dir);
  free(dir);
  return run->tr__p->dir;
}

/* -- hparams: the trainer's configuration and the spec strings in effect, sorted by key -- */
/* Sorted by key into a new array (*out; free it): the trainer's configuration, tr_run_desc.hparams (numbers
   as numbers), then tr_run_hparam*'s, which win. -1 out of memory. */
/* A loop of your own: its tr_run_setup settings under the trainer's keys (HParams compares both kinds). */
static int tr__run_desc_hparams(const tr_run_desc *d, tr__hparam *h) {
  int n = 0;
  tr__hp(h, &n, "loop", d->epochs == TR_NO ? "steps" : "epochs", 0);
  if (d->optimizer) tr__hp(h, &n, "optimizer", d->optimizer, 0);
  if (d->optimizer && d->momentum != 0) tr__hp(h, &n, "momentum", NULL, d->momentum);
  if (d->optimizer && d->weight_decay != 0) tr__hp(h, &n, "weight_decay", NULL, d->weight_decay);
  if (d->max_steps > 0) tr__hp(h, &n, "max_steps", NULL, (double)d->max_steps);
  if (d->max_epochs > 0) tr__hp(h, &n, "max_epochs", NULL, (double)d->max_epochs);
  if (d->min_steps > 0) tr__hp(h, &n, "min_steps", NULL, (double)d->min_steps);
  if (d->min_epochs > 0) tr__hp(h, &n, "min_epochs", NULL, (double)d->min_epochs);
  if (d->train_batches > 0) tr__hp(h, &n, "train_batches", NULL, (double)d->train_batches);
  tr__hp(h, &n, "log_every_n_steps", NULL, d->log_every_n_steps > 0 ? (double)d->log_every_n_steps : d->log_every_n_steps ? -1 : 50);
  return n;
}
TR__SHARED int tr__run_hparams(const tr_run *run, tr__hparam **out) {
  int i, j, n = 0;
  tr__hparam *h;
  *out = NULL;
  if (!run) return 0;
  if (!(h = (tr__hparam *)calloc((size_t)(TR__MAX_HPARAMS + run->tr__p->n_hp + 1), sizeof *h))) return -1;
  *out = h;
  n = run->desc.settings ? tr__hparam_words(run->desc.settings, 0, h, 0) : tr__run_desc_hparams(&run->desc, h);
  n = tr__hparam_words(run->desc.hparams, 1, h, n);
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

TR__C_END /* part */
#endif /* implementation */
#endif /* part */
