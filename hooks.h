/* hooks.h - v0.1.0 - 2026-11-21 - Lightning-style hooks for C training loops - MIT or public domain

   A training loop calls HK_FIRE(reg, HK_ON_TRAIN_BATCH_END, &ctx) at each interesting point; users
   register functions or whole callbacks against those events. A site with nothing registered costs
   a load, a compare and a branch; with HK_DISABLE defined it costs nothing at all.

   USAGE
     In exactly one C or C++ file:
         #define HOOKS_IMPLEMENTATION
         #include "hooks.h"
     Everywhere else just #include "hooks.h". The implementation needs stb_ds.h
     (Debian: libstb-dev, found as <stb/stb_ds.h>).

       static hk_signal log_loss(hk_ctx *ctx, void *user) {
           printf("step %lld loss %.4f\n", (long long)ctx->global_step, ctx->loss);
           return HK_CONTINUE;
       }
       hk_registry *reg = hk_create(NULL);
       hk_on(reg, HK_ON_TRAIN_BATCH_END, log_loss, NULL, &(hk_opts){ .name = "log" }, NULL);
       ...
       hk_ctx ctx = { .stage = HK_STAGE_FIT };
       for (...) { ...; ctx.loss = loss; HK_FIRE(reg, HK_ON_TRAIN_BATCH_END, &ctx); }
       hk_ctx_free(&ctx);
       hk_destroy(reg);

   COMPILE-TIME OPTIONS (define before including)
     HOOKS_IMPLEMENTATION     emit the implementation in this translation unit
     HK_DISABLE               compile every HK_FIRE site to nothing (arguments are still type-checked)
     HOOKS_STATIC             make every function static (private copy per translation unit)
     HOOKS_API                declaration prefix for public functions (default: extern)
     HOOKS_ASSERT(c)          assertion used by the implementation (default: assert)
     HOOKS_REALLOC(p,n)       allocator pair; define both or neither (default: realloc/free)
     HOOKS_FREE(p)
     HOOKS_STB_DS_INCLUDE     how to include stb_ds.h (default: <stb/stb_ds.h>)
     HOOKS_NO_STB_DS_IMPL     the program already defines STB_DS_IMPLEMENTATION elsewhere (or links -lstb)
     HK_MAX_EVENTS            built-in plus user-defined events (default 128)

   ENVIRONMENT
     HOOKS_TRACE=tree|lines   print every dispatched event and hook call (same as hk_trace)

   CHANGELOG
     0.1.0  first release: event table, registry, dispatch, signals, filters, error policies,
            metrics with lazy values, trace, callback state, factories and spec strings.
*/
#ifndef HOOKS_H
#define HOOKS_H

#define HOOKS_VERSION_MAJOR 0
#define HOOKS_VERSION_MINOR 1
#define HOOKS_VERSION_PATCH 0
#define HOOKS_VERSION_STRING "0.1.0"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

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

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
   The event table: the single source of truth. Everything about an event (enum, name, callback
   field, phase, pairing, which signals it honours, documentation) is generated from this list.

   X(ENUM_SUFFIX, name, phase, pairing, honoured signals, doc)
     pairing:  HK_OPENS  starts a span closed by a matching *_end event (the trace indents after it)
               HK_CLOSES ends a span (runs in reverse hook order when reverse_end_events is set)
               HK_MONITOR_LAST also: callbacks registered with .monitor run after the model tier
     signals:  the strongest signal a trainer acts on at this event (see hk_signal); a site that
               receives a stronger one than it honours treats it as HK_STOP (or HK_FAIL).
   --------------------------------------------------------------------------------------------- */
#define HK_EVENTS(X) \
  X(SETUP,                      setup,                      HK_PHASE_SETUP,      HK_OPENS,  HK_STOP,       "a stage begins (ctx->stage: fit, validate, test, predict); allocate here") \
  X(CONFIGURE_MODEL,            configure_model,            HK_PHASE_SETUP,      0,         HK_STOP,       "build or modify the model before optimizers are made") \
  X(ON_FIT_START,               on_fit_start,               HK_PHASE_FIT,        HK_OPENS,  HK_STOP,       "fit() begins, after setup and checkpoint restore") \
  X(ON_SANITY_CHECK_START,      on_sanity_check_start,      HK_PHASE_SANITY,     HK_OPENS,  HK_STOP,       "a few validation batches run before training to catch bugs early") \
  X(ON_SANITY_CHECK_END,        on_sanity_check_end,        HK_PHASE_SANITY,     HK_CLOSES, HK_STOP,       "the sanity check finished") \
  X(ON_TRAIN_START,             on_train_start,             HK_PHASE_TRAIN,      HK_OPENS,  HK_STOP,       "the training loop begins") \
  X(ON_TRAIN_EPOCH_START,       on_train_epoch_start,       HK_PHASE_TRAIN,      HK_OPENS,  HK_STOP_EPOCH, "a training epoch begins (ctx->epoch)") \
  X(ON_TRAIN_BATCH_START,       on_train_batch_start,       HK_PHASE_TRAIN,      HK_OPENS,  HK_STOP_EPOCH, "a training batch begins (ctx->batch_idx, ctx->batch)") \
  X(ON_BEFORE_ZERO_GRAD,        on_before_zero_grad,        HK_PHASE_OPTIMIZER,  0,         HK_STOP_EPOCH, "gradients are about to be zeroed (first micro-batch of a window)") \
  X(ON_BEFORE_BACKWARD,         on_before_backward,         HK_PHASE_OPTIMIZER,  0,         HK_STOP_EPOCH, "the loss is known (ctx->loss); backward is next") \
  X(ON_AFTER_BACKWARD,          on_after_backward,          HK_PHASE_OPTIMIZER,  0,         HK_STOP_EPOCH, "gradients of this micro-batch are accumulated (ctx->grads)") \
  X(ON_BEFORE_OPTIMIZER_STEP,   on_before_optimizer_step,   HK_PHASE_OPTIMIZER,  0,         HK_STOP_EPOCH, "gradients are final, before clipping and the update") \
  X(ON_GRADIENT_CLIP,           on_gradient_clip,           HK_PHASE_OPTIMIZER,  0,         HK_STOP_EPOCH, "gradients were clipped (ctx->grad_norm is the norm before clipping)") \
  X(ON_AFTER_OPTIMIZER_STEP,    on_after_optimizer_step,    HK_PHASE_OPTIMIZER,  0,         HK_STOP_EPOCH, "parameters were updated (EMA, weight averaging)") \
  X(ON_TRAIN_BATCH_END,         on_train_batch_end,         HK_PHASE_TRAIN,      HK_CLOSES, HK_STOP_EPOCH, "a training batch ended (ctx->loss, ctx->global_step)") \
  X(ON_VALIDATION_START,        on_validation_start,        HK_PHASE_VALIDATION, HK_OPENS,  HK_STOP,       "a validation run begins") \
  X(ON_VALIDATION_EPOCH_START,  on_validation_epoch_start,  HK_PHASE_VALIDATION, HK_OPENS,  HK_STOP,       "the validation epoch begins") \
  X(ON_VALIDATION_BATCH_START,  on_validation_batch_start,  HK_PHASE_VALIDATION, HK_OPENS,  HK_STOP_EPOCH, "a validation batch begins") \
  X(ON_VALIDATION_BATCH_END,    on_validation_batch_end,    HK_PHASE_VALIDATION, HK_CLOSES, HK_STOP_EPOCH, "a validation batch ended (ctx->loss)") \
  X(ON_VALIDATION_EPOCH_END,    on_validation_epoch_end,    HK_PHASE_VALIDATION, HK_CLOSES, HK_STOP,       "the validation epoch ended; metrics such as val/loss are set") \
  X(ON_VALIDATION_END,          on_validation_end,          HK_PHASE_VALIDATION, HK_CLOSES, HK_STOP,       "the validation run ended") \
  X(ON_TRAIN_EPOCH_END,         on_train_epoch_end,         HK_PHASE_TRAIN,      HK_CLOSES | HK_MONITOR_LAST, HK_STOP, "a training epoch ended, after its validation") \
  X(ON_TRAIN_END,               on_train_end,               HK_PHASE_TRAIN,      HK_CLOSES, HK_STOP,       "the training loop ended") \
  X(ON_FIT_END,                 on_fit_end,                 HK_PHASE_FIT,        HK_CLOSES, HK_STOP,       "fit() is about to return successfully") \
  X(ON_TEST_START,              on_test_start,              HK_PHASE_TEST,       HK_OPENS,  HK_STOP,       "a test run begins") \
  X(ON_TEST_EPOCH_START,        on_test_epoch_start,        HK_PHASE_TEST,       HK_OPENS,  HK_STOP,       "the test epoch begins") \
  X(ON_TEST_BATCH_START,        on_test_batch_start,        HK_PHASE_TEST,       HK_OPENS,  HK_STOP_EPOCH, "a test batch begins") \
  X(ON_TEST_BATCH_END,          on_test_batch_end,          HK_PHASE_TEST,       HK_CLOSES, HK_STOP_EPOCH, "a test batch ended (ctx->loss)") \
  X(ON_TEST_EPOCH_END,          on_test_epoch_end,          HK_PHASE_TEST,       HK_CLOSES, HK_STOP,       "the test epoch ended; metrics such as test/loss are set") \
  X(ON_TEST_END,                on_test_end,                HK_PHASE_TEST,       HK_CLOSES, HK_STOP,       "the test run ended") \
  X(ON_PREDICT_START,           on_predict_start,           HK_PHASE_PREDICT,    HK_OPENS,  HK_STOP,       "a prediction run begins") \
  X(ON_PREDICT_EPOCH_START,     on_predict_epoch_start,     HK_PHASE_PREDICT,    HK_OPENS,  HK_STOP,       "the prediction epoch begins") \
  X(ON_PREDICT_BATCH_START,     on_predict_batch_start,     HK_PHASE_PREDICT,    HK_OPENS,  HK_STOP_EPOCH, "a prediction batch begins") \
  X(ON_PREDICT_BATCH_END,       on_predict_batch_end,       HK_PHASE_PREDICT,    HK_CLOSES, HK_STOP_EPOCH, "a prediction batch ended (ctx->outputs)") \
  X(ON_PREDICT_EPOCH_END,       on_predict_epoch_end,       HK_PHASE_PREDICT,    HK_CLOSES, HK_STOP,       "the prediction epoch ended") \
  X(ON_PREDICT_END,             on_predict_end,             HK_PHASE_PREDICT,    HK_CLOSES, HK_STOP,       "the prediction run ended") \
  X(ON_SAVE_CHECKPOINT,         on_save_checkpoint,         HK_PHASE_CHECKPOINT, 0,         HK_FAIL,       "a checkpoint is being written (ctx->path); hook state is saved with it") \
  X(ON_LOAD_CHECKPOINT,         on_load_checkpoint,         HK_PHASE_CHECKPOINT, 0,         HK_FAIL,       "a checkpoint was read (ctx->path); hook state is already restored") \
  X(ON_CHECKPOINT_SAVED,        on_checkpoint_saved,        HK_PHASE_CHECKPOINT, 0,         HK_FAIL,       "a checkpoint file is complete on disk (ctx->path)") \
  X(ON_EXCEPTION,               on_exception,               HK_PHASE_EXCEPTION,  0,         HK_CONTINUE,   "a run is aborting (ctx->error says why); every handler runs") \
  X(TEARDOWN,                   teardown,                   HK_PHASE_SETUP,      HK_CLOSES, HK_CONTINUE,   "a stage ends, on success and on failure (ctx->stage); free here")

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

enum { HK_OPENS = 1, HK_CLOSES = 2, HK_MONITOR_LAST = 4 };

typedef enum hk_phase {
  HK_PHASE_SETUP, HK_PHASE_FIT, HK_PHASE_SANITY, HK_PHASE_TRAIN, HK_PHASE_OPTIMIZER,
  HK_PHASE_VALIDATION, HK_PHASE_TEST, HK_PHASE_PREDICT, HK_PHASE_CHECKPOINT, HK_PHASE_EXCEPTION,
  HK_PHASE_USER
} hk_phase;

typedef enum hk_event {
#define HK__X(NAME, name, phase, pairing, signals, doc) HK_##NAME,
  HK_EVENTS(HK__X)
#undef HK__X
  HK_EVENT_COUNT /* built-in events; user events get ids from HK_EVENT_COUNT up */
} hk_event;

/* Order within an event: tier, then opts.order (ascending), then registration order. */
typedef enum hk_tier { HK_TIER_CALLBACK, HK_TIER_MODEL, HK_TIER_STRATEGY, HK_TIER_COUNT } hk_tier;

typedef enum hk_stage {
  HK_STAGE_NONE, HK_STAGE_FIT, HK_STAGE_VALIDATE, HK_STAGE_TEST, HK_STAGE_PREDICT, HK_STAGE_SANITY_CHECK
} hk_stage;

/* Errors are values; 0 is success. hk_last_error() has the readable message. */
typedef enum hk_err {
  HK_OK = 0,
  HK_ERR_INVALID,        /* a NULL or out-of-range argument */
  HK_ERR_UNKNOWN_EVENT,  /* an event id or name that does not exist */
  HK_ERR_DUPLICATE,      /* a name that is already registered */
  HK_ERR_FULL,           /* a table reached its capacity */
  HK_ERR_NOT_FOUND,      /* a handle, name or key that is not registered */
  HK_ERR_NOMEM,          /* allocation failed */
  HK_ERR_SPEC,           /* a spec string is malformed or names something unknown */
  HK_ERR_HOOK,           /* a hook failed with the fatal policy */
  HK_ERR_STATE,          /* a callback could not save or load its state */
  HK_ERR_COUNT
} hk_err;

/* What happens when a hook returns HK_FAIL (or an invalid signal). */
typedef enum hk_on_error {
  HK_ON_ERROR_FATAL,     /* report; the dispatch returns HK_FAIL (default) */
  HK_ON_ERROR_WARN,      /* report and carry on as if the hook returned HK_CONTINUE */
  HK_ON_ERROR_DISABLE    /* like WARN, and disable the hook after opts.max_failures failures */
} hk_on_error;

/* Which counter a filter reads. */
typedef enum hk_counter {
  HK_COUNT_CALLS,        /* times this event reached this hook, 1 on the first (default) */
  HK_COUNT_STEP,         /* ctx->global_step */
  HK_COUNT_EPOCH,        /* ctx->epoch */
  HK_COUNT_BATCH         /* ctx->batch_idx */
} hk_counter;

/* Requests a hook can make of the trainer (HuggingFace's TrainerControl); honoured at the next safe point. */
enum { HK_REQUEST_VALIDATION = 1, HK_REQUEST_CHECKPOINT = 2, HK_REQUEST_LOG = 4 };

typedef struct hk_registry hk_registry;
typedef struct hk_ctx hk_ctx;
typedef int hk_handle; /* > 0 for a live registration */

typedef hk_signal (*hk_fn)(hk_ctx *ctx, void *user);

/* A named view of a parameter or gradient tensor (llm.c style: one flat buffer, many views). */
typedef struct hk_tensor {
  const char *name;
  float *data;
  size_t count;
  int on_device;         /* 1 when data is device memory (read it with the trainer's helpers) */
} hk_tensor;

/* Everything a hook sees. The trainer (or your loop) owns it and fills the fields it knows. */
struct hk_ctx {
  hk_registry *reg;      /* set by dispatch: the registry running this hook */
  int event;             /* set by dispatch: the event being dispatched */
  hk_handle self;        /* set by dispatch: the running hook's handle (a hook may hk_off itself) */
  hk_stage stage;
  int64_t epoch, global_step, batch_idx, samples_seen;
  double loss, lr, grad_norm;
  int rank, world_size;
  const hk_tensor *params, *grads;
  int n_tensors;         /* entries in params and in grads */
  void *batch, *outputs; /* the current batch and the model's outputs, as the trainer defines them */
  const char *path;      /* checkpoint events: the file */
  const char *error;     /* on_exception: what went wrong */
  void *trainer, *user;
  unsigned requests;     /* HK_REQUEST_* bits; the trainer clears the ones it honours */
  char message[256];     /* hk_fail() writes the failing hook's message here */
  void *hk__metrics;     /* private: the metrics map */
  uint64_t hk__seq;      /* private: dispatch counter for lazy metric caching */
};

/* Filters decide per call whether a hook runs. Zero fields mean "no constraint". */
typedef struct hk_filter {
  hk_counter counter;    /* what every/once_at/from/until read */
  int64_t every;         /* run when counter % every == 0 */
  int64_t once_at;       /* run the first time counter == once_at, never again */
  int64_t from, until;   /* run when from <= counter (and counter < until, when until > 0) */
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
  hk_on_error on_error;
  int max_failures;      /* HK_ON_ERROR_DISABLE: disable after this many failures (default 1) */
  int disabled;          /* register disabled; hk_enable() turns it on */
} hk_opts;

/* Bytes a callback writes its state into, and reads it back from. */
typedef struct hk_bytes { unsigned char *data; size_t len, cap; int failed; } hk_bytes;
typedef struct hk_reader { const unsigned char *data; size_t len, pos; } hk_reader;

/* A whole callback: optional functions for any built-in events, plus state and lifetime. */
typedef struct hk_callback {
  const char *name;      /* unique; also the state key in checkpoints */
  void *user;            /* passed to every function below */
#define HK__X(NAME, name, phase, pairing, signals, doc) hk_fn name;
  HK_EVENTS(HK__X)
#undef HK__X
  int (*save_state)(void *user, hk_bytes *out);   /* return 0 on success */
  int (*load_state)(void *user, hk_reader *in);   /* return 0 on success; reject bad data */
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

/* ---- the call site ---------------------------------------------------------------------------
   HK_FIRE(reg, event, ctx) is an expression of type hk_signal. The inline part is only the guard;
   the loop lives out of line in hk__dispatch. Prepare costly arguments under HK_ACTIVE(reg, event). */
#if defined(__GNUC__) || defined(__clang__)
#  define HK__UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#  define HK__UNLIKELY(x) (x)
#endif

#ifdef HK_DISABLE
#  define HK_ACTIVE(reg, event) (0 && (reg)->armed[(event)])
#  define HK_FIRE(reg, event, ctx) (0 ? hk__dispatch((reg), (event), (ctx)) : HK_CONTINUE)
#else
#  define HK_ACTIVE(reg, event) HK__UNLIKELY((reg)->armed[(event)])
#  define HK_FIRE(reg, event, ctx) \
     (HK__UNLIKELY((reg)->armed[(event)]) ? hk__dispatch((reg), (event), (ctx)) : HK_CONTINUE)
#endif

/* The guard reads armed[] directly; the rest of the registry is private. */
struct hk_registry {
  unsigned char armed[HK_MAX_EVENTS]; /* nonzero: the event has a hook to run (or trace is on) */
  struct hk__state *hk__s;
};

/* ---- registry --------------------------------------------------------------------------------- */
HOOKS_API hk_registry *hk_create(const hk_desc *desc);  /* NULL desc = defaults; NULL on OOM */
HOOKS_API void hk_destroy(hk_registry *reg);             /* calls every callback's destroy */
HOOKS_API const char *hk_last_error(const hk_registry *reg);

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

/* User-defined events: ids from HK_EVENT_COUNT up to HK_MAX_EVENTS-1. pairing: 0, HK_OPENS or HK_CLOSES. */
HOOKS_API hk_err hk_event_define(hk_registry *reg, const char *name, int pairing, int *out_id);
HOOKS_API int hk_event_find(const hk_registry *reg, const char *name);   /* -1 if unknown */
HOOKS_API const char *hk_event_name(const hk_registry *reg, int event); /* reg may be NULL for built-ins */
HOOKS_API const char *hk_event_doc(int event);            /* built-in events */
HOOKS_API int hk_event_flags(const hk_registry *reg, int event);
HOOKS_API hk_signal hk_event_honours(int event);          /* strongest signal the event honours */
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
HOOKS_API const hk_tensor *hk_tensor_find(const hk_tensor *t, int n, const char *name);

/* Metrics: a string -> double map in the context, the way hooks talk to each other. */
HOOKS_API hk_err hk_metric_set(hk_ctx *ctx, const char *name, double value);
HOOKS_API int hk_metric_get(hk_ctx *ctx, const char *name, double *value); /* 1 if present */
/* A lazy metric is computed by fn only when a hook asks for it, at most once per dispatched event. */
HOOKS_API hk_err hk_metric_lazy(hk_ctx *ctx, const char *name, double (*fn)(const hk_ctx *ctx, void *user), void *user);
HOOKS_API int hk_metric_count(const hk_ctx *ctx);
HOOKS_API const char *hk_metric_at(hk_ctx *ctx, int i, double *value);  /* i-th name (insertion order) */
HOOKS_API void hk_metric_clear(hk_ctx *ctx);              /* forget every value (lazy sources stay) */
HOOKS_API void hk_ctx_free(hk_ctx *ctx);                  /* frees the metrics map */

/* ---- trace -------------------------------------------------------------------------------------- */
typedef enum hk_trace_mode { HK_TRACE_OFF, HK_TRACE_TREE, HK_TRACE_LINES } hk_trace_mode;
HOOKS_API void hk_trace(hk_registry *reg, hk_trace_mode mode, FILE *out); /* out NULL = keep current */

/* ---- callback state (for checkpoints) ----------------------------------------------------------- */
HOOKS_API int hk_bytes_put(hk_bytes *b, const void *data, size_t n);  /* 0 ok, -1 on OOM */
HOOKS_API void hk_bytes_free(hk_bytes *b);
HOOKS_API int hk_read(hk_reader *r, void *dst, size_t n);             /* 0 ok, -1 if fewer than n left */
/* Calls sink(key, data, len, user) for every callback with save_state, in registration order. */
typedef hk_err (*hk_state_sink)(const char *key, const void *data, size_t len, void *user);
HOOKS_API hk_err hk_state_save(hk_registry *reg, hk_state_sink sink, void *user);
/* Hands a saved blob to the callback whose name is key. HK_ERR_NOT_FOUND if no such callback. */
HOOKS_API hk_err hk_state_load(hk_registry *reg, const char *key, const void *data, size_t len);

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

HOOKS_API hk_err hk_factory_add(hk_registry *reg, const char *name, const hk_param *params, int n_params,
                                hk_factory_fn make, void *user, const char *doc);
/* Parse, check everything, then call the factories in order. All or nothing: if one fails, the
   registrations made by the earlier ones are removed again. */
HOOKS_API hk_err hk_spec_apply(hk_registry *reg, const char *spec);
/* Parse and check only (no factory is called). */
HOOKS_API hk_err hk_spec_check(hk_registry *reg, const char *spec);
HOOKS_API int64_t hk_arg_int(const hk_args *a, const char *key);
HOOKS_API double hk_arg_double(const hk_args *a, const char *key);
HOOKS_API int hk_arg_bool(const hk_args *a, const char *key);
HOOKS_API const char *hk_arg_str(const hk_args *a, const char *key);   /* strings and choices */
HOOKS_API int hk_arg_given(const hk_args *a, const char *key);

/* private: the out-of-line dispatch loop behind HK_FIRE */
HOOKS_API hk_signal hk__dispatch(hk_registry *reg, int event, hk_ctx *ctx);

#ifdef __cplusplus
}
#endif
#endif /* HOOKS_H */
