/* train/base.h - errors, random numbers, your model and data, optimizers and learning-rate schedules. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_BASE_H /* part */
#define TRAIN_BASE_H /* part */
#include "../hooks.h" /* part */

#define TRAIN_VERSION_MAJOR 0
#define TRAIN_VERSION_MINOR 2
#define TRAIN_VERSION_PATCH 0
#define TRAIN_VERSION_STRING "0.2.0"

/* Sections left out (docs/setup.md, "Options"): the trainer needs the per-step math; MPI and CUDA are the
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
#  define TR__C_BEGIN extern "C" { /* a part's own, when included on its own */
#  define TR__C_END }
#else
#  define TR__C_BEGIN
#  define TR__C_END
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
  X(TR_ERR_DEVICE,      "device error",         "a CUDA call failed, or model.on_device without TRAIN_CUDA (train/trainer/cuda.h)")
typedef enum tr_err {
#define TR__X(sym, name, doc) sym,
  TR_ERRORS(TR__X)
#undef TR__X
  TR_ERR_COUNT
} tr_err;
TRAIN_API const char *tr_err_name(tr_err e); /* "TR_ERR_IO", ... */

/* ---- random numbers ------------------------------------------------------------------------------
   splitmix64. The trainer owns one (t->rng, in checkpoints) for your use; your shuffle gets one per epoch. */
typedef struct tr_rng { uint64_t state; } tr_rng;

TRAIN_API void     tr_rng_seed(tr_rng *r, uint64_t seed);
TRAIN_API uint64_t tr_rng_u64(tr_rng *r);
TRAIN_API uint32_t tr_rng_u32(tr_rng *r);
TRAIN_API uint64_t tr_rng_below(tr_rng *r, uint64_t n);  /* uniform in [0, n), n > 0; unbiased */
TRAIN_API float    tr_rng_float(tr_rng *r);              /* uniform in [0, 1) */
TRAIN_API float    tr_rng_normal(tr_rng *r);             /* standard normal (Box-Muller) */
/* A fresh random permutation of 0..n-1 (Fisher-Yates), independent of idx's contents: a resumable shuffle. */
TRAIN_API void     tr_rng_perm(tr_rng *r, int64_t *idx, int64_t n);

/* ---- the model (yours) ---------------------------------------------------------------------------
   llm.c style: one flat float buffer, tensors are named (offset, count) views, gradients alike. */
typedef struct tr_tensor {
  const char *name;    /* unique; checked against checkpoints; must stay valid while the trainer lives */
  size_t offset;       /* first element in params/grads */
  size_t count;        /* number of elements */
} tr_tensor;

/* A batch's predictions for prediction_writer: rows x cols floats, row-major, host memory; names NULL or
   cols column names (not empty; no comma, quote or line break). ctx->outputs points at one during
   on_predict_batch_end. */
typedef struct tr_predictions {
  const float *values;
  int64_t rows, cols;
  const char *const *names;
} tr_predictions;

typedef struct tr_model {
  float *params;              /* n_params floats, owned by you */
  float *grads;               /* n_params floats, same layout; the trainer zeroes it. May be NULL at
                                 tr_init for a model that allocates it late: hand it over with
                                 tr_set_buffers (e.g. in a configure_model hook) before training */
  size_t n_params;
  const tr_tensor *tensors;   /* named views; NULL = one tensor "params" covering everything */
  int n_tensors;
  void *user;                 /* passed as the first argument of the functions below */
  /* Store the batch's mean loss in *loss; training 0 in validation, test, sanity check (no dropout).
     Nonzero: the run fails with TR_ERR_MODEL. Required. */
  int (*forward)(void *user, void *batch, int training, double *loss);
  /* ADD d(loss)/d(params) into grads (+=); the trainer zeroes them per window and divides by its size.
     Required for tr_fit. */
  int (*backward)(void *user, void *batch);
  /* Optional, for tr_predict: point *outputs at the batch's outputs (ctx->outputs; for prediction_writer a
     tr_predictions), valid until the next call. */
  int (*predict)(void *user, void *batch, void **outputs);
  /* 1: params and grads are device memory; optimizer state and steps on the GPU (train/trainer/cuda.h). */
  int on_device;
  /* With on_device: a device float forward leaves the mean loss in (*loss ignored; it stays on the device
     until a hook reads it). NULL: *loss on the host. */
  float *device_loss;
  /* With on_device: the cudaStream_t for train.h's kernels and copies; NULL = the default stream (which
     CUDA graph capture cannot capture). */
  void *stream;
} tr_model;

/* ---- the data (yours) -----------------------------------------------------------------------------
   Random access (get) or an iterator (next), exactly one. */
typedef struct tr_data {
  void *user;                                          /* first argument of the functions below */
  int64_t (*count)(void *user);                        /* batches per epoch (required) */
  /* Point *batch at batch `index` of the current order (your memory, valid until the next get). */
  int (*get)(void *user, int64_t index, void **batch);
  /* An iterator: reset (optional) rewinds at each epoch not resumed mid-way; save_state/load_state (both
     or neither) keep its position in checkpoints for exact resume (a mid-batch checkpoint resumes after
     that batch). */
  int (*next)(void *user, void **batch);
  int (*reset)(void *user);
  int (*save_state)(void *user, hk_bytes *out);
  int (*load_state)(void *user, hk_reader *in);
  /* Optional: reorder for a new epoch; rng is seeded from the seed and the epoch, so a resume gets the same
     order when the order depends only on the numbers drawn (as tr_rng_perm's). */
  void (*shuffle)(void *user, tr_rng *rng);
  /* samples per batch, for ctx->samples_seen; 0: a batch counts as 1 (tr_fit warns when throughput_monitor
     is registered). */
  int64_t batch_size;
} tr_data;

/* ---- optimizers ------------------------------------------------------------------------------------
   The formulas are PyTorch's (torch.optim.SGD and torch.optim.AdamW), applied per element:
     SGD:   d = g + wd*p;  if momentum: buf = d on the first step, else buf = momentum*buf + (1-dampening)*d;
            d = nesterov ? d + momentum*buf : buf;   p -= lr*d
     AdamW: p -= lr*wd*p;  m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g*g;
            p -= lr * (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps)          (t = steps taken, from 1)
   The arithmetic is float32 in PyTorch's order (train/math.h). */
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
   lr(t) = optim.lr * factor(t) * scale (hooks' tr_lr_scale); t counts optimizer steps, or finished epochs
   with per_epoch; an optional linear warmup first ((t+1) / warmup). The kinds are PyTorch's and Hugging
   Face's: constant, step, cosine, linear, exponential, wsd, onecycle, plateau (checked once per epoch
   after its validation). The formulas: docs/trainer.md ("The schedules' formulas"). The state (plateau,
   scale) is in checkpoints; a step or exponential decay that cannot stay finite over the run is refused.
   A spec makes one: tr_sched_parse(&s, "onecycle(max_lr=0.01, pct_start=0.25)", ...). */
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

/* The parameters, once: X(kind, C type, name, spec default, choices, kinds, doc). kind as TR__FIELD's, NAME
   for a char[TR_SCHED_NAME_MAX], C_ONLY: no spec key; kinds: the schedules it belongs to (' *' all; '!':
   required). The spec default is what 0 means. */
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

/* lr after t scheduler steps, the stateless part (total resolved > warmup where used). */
TRAIN_API double tr_lr_at(const tr_sched *s, double base_lr, int64_t t);
/* The whole lr: tr_lr_at, the plateau's lr in place of base_lr after warmup, times the scale. */
TRAIN_API double tr_sched_lr(const tr_sched *s, const tr_sched_state *st, double base_lr, int64_t t);
/* One plateau check (ReduceLROnPlateau.step): 1 when it reduced the lr; a NaN never improves. */
TRAIN_API int tr_plateau_step(const tr_sched *s, tr_sched_state *st, double base_lr, double metric);
/* Fill in the defaults and check s; total_resolved: the scheduler steps of the run (0: not known yet).
   A subnormal gamma, or gamma^(decays over the run) outside a double's range, is refused. TR_ERR_INVALID
   with why naming the field and what would be right. */
TRAIN_API tr_err tr_sched_check(tr_sched *s, int64_t total_resolved, char *why, size_t cap);
/* Parse "cosine(warmup=100, min_factor=0.1)" into *s (zeroed first) and check it; why names the bad
   part and lists what is valid. Allocates (setup, not the step loop). */
TRAIN_API tr_err tr_sched_parse(tr_sched *s, const char *spec, char *why, size_t cap);


/* An explicit 0 for an int field whose zero means a default; tri-state flags: TR_YES / TR_NO, 0 default. */
#define TR_ZERO (-2147483647 - 1)
enum { TR_NO = -1, TR_DEFAULT = 0, TR_YES = 1 };

/* Which direction is better for a monitored metric. */
typedef enum tr_mode { TR_MODE_MIN = 0, TR_MODE_MAX } tr_mode;

/* private: one pass over the gradients per change (ctx->grad_norm_source = tr__grad_pass_source): the first
   hk_grad_norm sums every view's squares and keeps them, so gradient_monitor's per-tensor norms need no
   second pass. The same bits as hk_grad_norm's own loop. */
typedef struct tr__grad_pass {
  double *sq;                   /* n sums of squares, in view order */
  int n;
  int threads;                  /* for sumsq */
  double (*sumsq)(const float *x, size_t n, int threads); /* tr_sumsq (hk_sumsq's bits on threads); NULL: hk_sumsq */
  uint64_t version;             /* the ctx->hk__grads_version they were taken at */
  int ok;                       /* sq holds that version's sums */
} tr__grad_pass;
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
/* Without this, hundreds of undefined hk_* symbols at link time and no hint. */
#if !defined(HOOKS_IMPLEMENTATION) && !defined(TRAIN_HOOKS_ELSEWHERE)
#  error "train.h: TRAIN_IMPLEMENTATION needs hooks.h's implementation: #define HOOKS_IMPLEMENTATION too, before #include \"train.h\" in this file (or, when another file of the program defines it, #define TRAIN_HOOKS_ELSEWHERE here)"
#endif

#include <limits.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
/* A file name's bytes (one path component): NAME_MAX on Linux, macOS and the BSDs. Checked at set-up. */
#define TR__NAME_MAX 255
#if defined(__unix__) || defined(__APPLE__)
#  include <dirent.h>
#  include <fcntl.h>
#  include <sys/file.h> /* flock: a run directory held by one process */
#  include <sys/ioctl.h>
#  include <sys/stat.h>
#  include <sys/time.h>
#  include <sys/types.h>
#  include <sys/wait.h> /* system()'s status */
#  include <sys/resource.h> /* getrusage: device_stats's CPU time and peak memory */
#  include <unistd.h>
#  include <poll.h> /* the watchdog's naps (poll(2): a sleep that wakes on a pipe) */
#  define TR__POSIX 1
#  ifdef TRAIN_CUDA
#    include <dlfcn.h> /* device_stats loads NVML at run time (glibc before 2.34: link with -ldl) */
#  endif
#endif
#if defined(TR__POSIX) && !defined(TRAIN_NO_THREADS)
#  include <pthread.h> /* asynchronous saves: one background writer */
#  include <signal.h>
#  define TR__THREADS 1
/* The writer thread blocks every signal, so Ctrl-C/SIGTERM reach the loop and never interrupt its write
   or fsync. Strict -std=c99 hides pthread_sigmask outside glibc: there it keeps the caller's mask. */
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
extern FILE *fdopen(int fd, const char *mode);
extern int fileno(FILE *f);
extern FILE *fmemopen(void *buf, size_t size, const char *mode);
extern FILE *open_memstream(char **ptr, size_t *size);
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

#ifdef __cplusplus
extern "C" {
#endif
/* k, or the start of the UTF-8 character whose byte s[k] is: where text can be cut without splitting one */
static size_t tr__utf8_start(const char *s, size_t k) {
  while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
  return k;
}
/* Text into dst at offset at, cut to fit with "..." where it is cut (at a UTF-8 character's start), so a
   cut shows (vsnprintf: a message into a caller's buffer is cut, not a compiler warning). Returns the
   length the whole text would have, as snprintf: >= cap when cut (then at stays >= cap: nothing more). */
static size_t tr__vmsg(char *dst, size_t cap, size_t at, const char *fmt, va_list ap) {
  int w;
  if (!dst || at >= cap) return at;
  w = vsnprintf(dst + at, cap - at, fmt, ap);
  if (w < 0) { dst[at] = 0; return at; }
  if (at + (size_t)w >= cap && cap >= 4) memcpy(dst + tr__utf8_start(dst, cap - 4), "...", 4);
  return at + (size_t)w;
}
/* A message into a buffer, cut to fit (as tr__vmsg) */
static void tr__msg(char *dst, size_t cap, const char *fmt, ...) TR__PRINTF(3, 4);
static void tr__msg(char *dst, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  (void)tr__vmsg(dst, cap, 0, fmt, ap);
  va_end(ap);
}
/* The same appended at offset at (a message in parts): the length so far, >= cap once cut */
static size_t tr__msg_at(char *dst, size_t cap, size_t at, const char *fmt, ...) TR__PRINTF(4, 5);
static size_t tr__msg_at(char *dst, size_t cap, size_t at, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  at = tr__vmsg(dst, cap, at, fmt, ap);
  va_end(ap);
  return at;
}
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
/* FNV-1a 64: the section checksums of checkpoint formats 1 and 2, and small facts the ranks compare */
static uint64_t tr__fnv(uint64_t h, const unsigned char *p, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) { h ^= p[i]; h *= 0x100000001b3ull; }
  return h;
}
#define TR__FNV_START 0xcbf29ce484222325ull
/* The checkpoints' checksum from format 3 on (docs/trainer.md states it): the bytes and 1 to 8 zero bytes as
   little-endian 64-bit words, word k mixed into lane k mod 4, then the lanes and the byte count mixed into one.
   A step is a bijection in h and in the word, so any change confined to one word always shows. Four lanes are
   four independent multiply chains: 6.3 GB/s where FNV-1a's byte chain read 0.8 (bench-math). Streaming: a writer
   adds pieces of any length. */
typedef struct tr__sum { uint64_t h[4], tail, n; } tr__sum;
#define TR__SUM_START { { 0x6a09e667f3bcc908ull, 0xbb67ae8584caa73bull, 0x3c6ef372fe94f82bull, 0xa54ff53a5f1d36f1ull }, 0, 0 }
static uint64_t tr__sum_word(uint64_t h, uint64_t w) {
  h = (h ^ w) * 0x9e3779b97f4a7c15ull;
  return h ^ h >> 32;
}
static uint64_t tr__get64(const unsigned char *p) {
  const uint32_t one = 1;
  uint64_t w;
  if (*(const unsigned char *)&one != 1) return tr__get(p, 8);
  memcpy(&w, p, 8); /* a little-endian host: as is */
  return w;
}
#define TR__SUM_LANE(s) ((s)->h[(s)->n >> 3 & 3]) /* the lane of the word byte n belongs to */
static void tr__sum_add(tr__sum *s, const void *data, size_t n) {
  const unsigned char *p = (const unsigned char *)data;
  for (; n > 0 && (s->n & 7); n--, s->n++) { /* a word begun by the last piece */
    s->tail |= (uint64_t)*p++ << 8 * (s->n & 7);
    if ((s->n & 7) == 7) TR__SUM_LANE(s) = tr__sum_word(TR__SUM_LANE(s), s->tail), s->tail = 0;
  }
  for (; n >= 8 && (s->n & 31); n -= 8, p += 8, s->n += 8) TR__SUM_LANE(s) = tr__sum_word(TR__SUM_LANE(s), tr__get64(p));
  if (n >= 32) {
    uint64_t a = s->h[0], b = s->h[1], c = s->h[2], d = s->h[3];
    for (; n >= 32; n -= 32, p += 32, s->n += 32) {
      a = tr__sum_word(a, tr__get64(p));
      b = tr__sum_word(b, tr__get64(p + 8));
      c = tr__sum_word(c, tr__get64(p + 16));
      d = tr__sum_word(d, tr__get64(p + 24));
    }
    s->h[0] = a, s->h[1] = b, s->h[2] = c, s->h[3] = d;
  }
  for (; n >= 8; n -= 8, p += 8, s->n += 8) TR__SUM_LANE(s) = tr__sum_word(TR__SUM_LANE(s), tr__get64(p));
  for (; n > 0; n--, s->n++) s->tail |= (uint64_t)*p++ << 8 * (s->n & 7);
}
static uint64_t tr__sum_end(const tr__sum *s) {
  tr__sum e = *s;
  TR__SUM_LANE(&e) = tr__sum_word(TR__SUM_LANE(&e), e.tail); /* the last word: the rest and zeros */
  return tr__sum_word(tr__sum_word(tr__sum_word(tr__sum_word(e.h[0], e.h[1]), e.h[2]), e.h[3]), e.n);
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

/* ---- a resume with nothing left to train ------------------------------------------------------------
   tr_fit and tr_run_start refuse a checkpoint whose run finished or stopped early (it would train nothing
   and its callbacks would mislead), before anything fires. The finished half, shared: 1 with why (fn
   first) when epochs / step reach max_epochs / max_steps (0: none; field: how the caller names them). */
TR__SHARED int tr__resume_finished(char *why, size_t cap, const char *fn, const char *path, int64_t epochs, int64_t step,
                                   int64_t max_epochs, int64_t max_steps, const char *field) {
  int by_steps = max_steps > 0 && step >= max_steps;
  if (!by_steps && !(max_epochs > 0 && epochs >= max_epochs)) return 0;
  snprintf(why, cap, "%s: the run that wrote '%s' finished: it trained %lld epoch%s (%lld steps), and this fit's limit is %s%s "
           "%lld: resuming it trains nothing; raise %s%s to train on from it", fn, path, (long long)epochs, epochs == 1 ? "" : "s",
           (long long)step, field, by_steps ? "max_steps" : "max_epochs", (long long)(by_steps ? max_steps : max_epochs), field,
           by_steps ? "max_steps" : "max_epochs");
  return 1;
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

/* ---- tensor views a callback reads ---------------------------------------------------------------
   Checked where first read, not at on_train_start (llm.c allocates its gradients in the first backward):
   an empty view is an error naming it and the event, not a crash. 0, or -1 with hk_fail. */
TR__SHARED int tr__view_empty(hk_ctx *ctx, const hk_tensor *v, int k, const char *field) {
  return hk_fail(ctx, "%s[%d] ('%s') has no data (NULL) at %s, where it is first read: point each view at its "
                 "buffer by then (llm.c's gradients: after the first backward)", field, k, v[k].name ? v[k].name : "?",
                 hk_event_name(ctx->reg, ctx->event)), -1;
}
/* every view's data set (nan_guard, spike_detection, ema: they read the data only) */
TR__SHARED int tr__views_data(hk_ctx *ctx, const hk_tensor *v, const char *field) {
  int k;
  for (k = 0; v && k < ctx->n_tensors; k++)
    if (!v[k].data) return tr__view_empty(ctx, v, k, field);
  return 0;
}
/* Views a battery keeps must also be named once, count > 0. */
TR__SHARED int tr__views_ready(hk_ctx *ctx, const hk_tensor *v, int n, const char *field) {
  const char *at = hk_event_name(ctx->reg, ctx->event);
  int k, j;
  for (k = 0; k < n; k++) {
    const char *name = v[k].name;
    if (!name || !name[0])
      return hk_fail(ctx, "%s[%d] has no name (%s) at %s, where it is first read: give every view a name of its own, "
                     "its data and its count by then", field, k, name ? "\"\"" : "NULL", at), -1;
    if (!v[k].data) return tr__view_empty(ctx, v, k, field);
    if (v[k].count == 0)
      return hk_fail(ctx, "%s[%d] ('%s') has count 0 at %s, where it is first read: give every view its element "
                     "count by then", field, k, name, at), -1;
    for (j = 0; j < k; j++)
      if (strcmp(v[j].name, name) == 0)
        return hk_fail(ctx, "%s[%d] and %s[%d] are both named '%s'; give each view a name of its own", field, j,
                       field, k, name), -1;
  }
  return 0;
}

/* ---- one pass over the gradients, shared (tr__grad_pass above) ------------------------------------ */
/* ctx->grad_norm_source: every view's sum of squares, kept, and the norm from them (hk_grad_norm caches it). */
TR__SHARED double tr__grad_pass_source(hk_ctx *ctx, void *user) {
  tr__grad_pass *p = (tr__grad_pass *)user;
  double sum = 0;
  int k;
  for (k = 0; k < ctx->n_tensors && ctx->grads; k++) {
    const hk_tensor *g = &ctx->grads[k];
    double sq = p->sumsq ? p->sumsq(g->data, g->count, p->threads) : hk_sumsq(g->data, g->count);
    if (k < p->n) p->sq[k] = sq;
    sum += sq;
  }
  p->ok = ctx->grads && ctx->n_tensors <= p->n;
  p->version = ctx->hk__grads_version;
  return sqrt(sum);
}
/* The views' sums of squares now, from the loop's shared pass; NULL without one. */
TR__SHARED const double *tr__grad_pass_sums(hk_ctx *ctx) {
  tr__grad_pass *p;
  double norm;
  if (ctx->grad_norm_source != tr__grad_pass_source) return NULL;
  p = (tr__grad_pass *)ctx->grad_norm_source_user;
  if (p->ok && p->version == ctx->hk__grads_version) return p->sq;
  norm = tr__grad_pass_source(ctx, p);
  if (!hk_grad_norm_known(ctx)) hk_grad_norm_set(ctx, norm);
  return p->ok ? p->sq : NULL;
}

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

#define TR__SCHED_BAD(...) do { if (why && cap) tr__msg(why, cap, __VA_ARGS__); return TR_ERR_INVALID; } while (0)
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
  if ((s->kind == TR_SCHED_STEP || s->kind == TR_SCHED_EXPONENTIAL) && s->gamma < DBL_MIN)
    TR__SCHED_BAD("%s: sched.gamma %g is subnormal: the lr would be 0 after its first decay; give a gamma >= %g (e.g. 0.99)",
                  k, s->gamma, DBL_MIN);
  if ((s->kind == TR_SCHED_STEP || s->kind == TR_SCHED_EXPONENTIAL) && total > 0) {
    /* gamma^(decays to step total - 1) must stay a normal double: inf or 0 would ruin the run */
    int64_t u = total - 1 - s->warmup, n = u <= 0 ? 0 : s->kind == TR_SCHED_STEP ? u / s->step_size : u;
    double f = pow(s->gamma, (double)n);
    if (!(f <= DBL_MAX) || f < DBL_MIN)
      TR__SCHED_BAD("%s: sched.gamma %g to the power %lld (its decays over the run's %lld scheduler steps) %s: the lr would be %s; "
                    "give a gamma closer to 1%s, or fewer steps", k, s->gamma, (long long)n, (long long)total,
                    f < DBL_MIN ? "underflows" : "overflows", f < DBL_MIN ? "0" : "inf",
                    s->kind == TR_SCHED_STEP ? " or a larger step_size" : "");
  }
  if (total > 0) {
    if ((s->kind == TR_SCHED_COSINE || s->kind == TR_SCHED_LINEAR) && total <= s->warmup)
      TR__SCHED_BAD("the %s schedule's total (the scheduler steps of the whole curve: sched.total, else the run's max_steps, "
                    "or max_epochs with per_epoch) must be greater than sched.warmup (%lld <= %lld)", k,
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

/* The spec: one factory per kind on a private registry, so the grammar and messages are hooks.h's. */
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
  if (e) { if (why && cap) tr__msg(why, cap, "tr_sched_parse: out of memory"); }
  else if (hk_spec_apply(reg, spec) != HK_OK) {
    if (why && cap) tr__msg(why, cap, "tr_sched_parse: %s", hk_last_error(reg));
    e = TR_ERR_INVALID;
  }
  hk_destroy(reg);
  return e;
}
/* The schedule's state (tr_sched_state) as TR__LR_STATE_SIZE bytes: the run's checkpoints and the trainer's
   LRST section hold it (only when it is not at its start: tr__lr_state_any). */
#define TR__LR_STATE_SIZE 56
TR__SHARED int tr__lr_state_any(const tr_sched_state *st) {
  return st->scale != 0 || st->plateau_lr != 0 || st->best != 0 || st->num_bad || st->cooldown || st->checks;
}
TR__SHARED void tr__lr_state_put(unsigned char *p, const tr_sched_state *st) {
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
TR__SHARED int tr__lr_state_get(const unsigned char *p, size_t n, tr_sched_state *st, char *why, size_t cap) {
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
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
