/* tests/test_mpi.c - train.h's MPI strategy (TRAIN_MPI), driven by tests/mpi.mk.

   One source, two builds: build/test_mpi (mpicc, -DTRAIN_MPI, run under mpirun) and build/test_mpi_plain
   (the plain trainer, no MPI: the single-process references). Usage:
     test_mpi[_plain] fit out=FILE [epochs=E] [steps=N] [batch=B] [accum=K] [sgd=1] [resume=CKPT]
                          [request_at=STEP ckpt=CKPT]   a hook on the LAST rank asks for a checkpoint
                          [ref=W]      (plain) reference: each step sums W shard gradients in rank order
                          [global=W]   (plain) one process on the same global batches (batch B*W)
                          [zero=1]     tr_desc.zero (ZeRO-1): checks that the rank keeps exactly its shard
                          [grads=1]    FILE gets the last step's gradients after the parameters
                          [clip=C] [hidden=H] [async=1]   clipping by norm C, hidden width H, tr_desc.async_save
                          [groups=1|2] parameter groups (GROUPS1, GROUPS2): lr multipliers, a weight decay, a tensor
                                       frozen (b2, or w2: across zero's shard boundary), checked unchanged
       trains the spirals MLP (AdamW or SGD-momentum, clipping by norm 1, validation every epoch), checks
       that the parameters are bit-identical on every rank, and writes rank 0's parameters to FILE
     test_mpi_plain diff A B TOL   max |a-b| of two parameter files; fails above TOL; prints it
     test_mpi stop | fail | failload | configfail | skip | sigterm | uneven | rank0   one scenario each
     test_mpi mismatch what=W [hidden=H0,H1,..]   ranks that differ: see mode_mismatch
     test_mpi onerank what=W   a refusal at a run's start on the last rank only: see mode_onerank
     test_mpi[_plain] zerobad   zero's refusals and failed saves (mode_zerobad; tests/zero.mk)
     test_mpi pw fmt=F interval=I [name=N] [dir=D] [logs=1 [resume=1]] [foreign=R]   prediction_writer (mode_pw)
   Every check that fails prints what and exits 1 (mpirun then ends the whole job with rc != 0). */
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "examples/mlp.h"
#include <signal.h>
#include <dirent.h>
#include <unistd.h>
#include <poll.h>

static int rank_ = 0, world_ = 1;
#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", rank_, __FILE__, __LINE__, #c); \
  fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } } while (0)

/* ---- arguments: key=value ---------------------------------------------------------------------------- */
static int argc_;
static char **argv_;
static const char *arg(const char *key, const char *dflt) {
  size_t n = strlen(key);
  int i;
  for (i = 2; i < argc_; i++) if (!strncmp(argv_[i], key, n) && argv_[i][n] == '=') return argv_[i] + n + 1;
  return dflt;
}
static int iarg(const char *key, int dflt) { const char *v = arg(key, NULL); return v ? atoi(v) : dflt; }

/* ---- cross-rank checks --------------------------------------------------------------------------------- */
static uint64_t hash(const void *p, size_t n) {
  const unsigned char *b = (const unsigned char *)p;
  uint64_t h = 1469598103934665603ull;
  while (n--) { h ^= *b++; h *= 1099511628211ull; }
  return h;
}
static void same_everywhere(uint64_t v, const char *what) {
#ifdef TRAIN_MPI
  unsigned long long lo = v, hi = v, x = v;
  MPI_Allreduce(&x, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&x, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  CHECK(lo == hi, "%s differs between ranks", what);
#else
  (void)v; (void)what;
#endif
}
static int64_t sum_everywhere(int64_t v) {
#ifdef TRAIN_MPI
  long long x = v, s = 0;
  MPI_Allreduce(&x, &s, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  return s;
#else
  return v;
#endif
}

/* ---- the reference: one process computes what W ranks do -------------------------------------------------
   One reference "batch" is a whole accumulation window of every rank: rank r's gradient is the sum of
   its micro-batches (global batches k * W + r, added by the model in one buffer, as on rank r), the
   ranks' gradients are added in rank order and scaled by 1 / (W * accumulate_grad_batches), as the
   trainer's averaging does (Lightning's: a short last window too), or with mean=1
   (accumulate_mean_of_window) by 1 / (W * the window's micro-batches). The reference trainer itself
   runs with accumulate_grad_batches = 1. */
typedef struct shards {
  mlp *net, helper;   /* helper: the same parameters, its own gradients (one rank at a time) */
  spirals *ds;
  int W, B, accum, mean;
  float *sum;
  int64_t index;      /* the window being trained */
} shards;
static int64_t shards_per_rank(const shards *s) { return spirals_num_batches(s->ds, s->B) / s->W; }
static int64_t shards_count(void *u) { shards *s = (shards *)u; return (shards_per_rank(s) + s->accum - 1) / s->accum; }
static int shards_get(void *u, int64_t i, void **batch) { shards *s = (shards *)u; s->index = i; *batch = s; return 0; }
static void shards_shuffle(void *u, tr_rng *rng) { spirals_tr_shuffle(((shards *)u)->ds, rng); }
static int shard_window(shards *s, int r, double *loss) { /* rank r's window gradient, into helper.grads */
  int64_t k, first = s->index * s->accum, end = first + s->accum < shards_per_rank(s) ? first + s->accum : shards_per_rank(s);
  memcpy(s->helper.params, s->net->params, s->net->num_params * sizeof(float));
  mlp_zero_grad(&s->helper);
  for (k = first; k < end; k++) {
    const mlp_batch *b = spirals_batch(s->ds, (int)(k * s->W + r), s->B);
    *loss = mlp_forward(&s->helper, b->x, b->y, b->n);
    mlp_backward(&s->helper, 1.0f);
  }
  return (int)(end - first);
}
static int shards_forward(void *u, void *batch, int training, double *loss) {
  shards *s = (shards *)u;
  const mlp_batch *b = (const mlp_batch *)batch;
  (void)training;
  if (batch != (void *)s) { *loss = mlp_forward(s->net, b->x, b->y, b->n); return 0; } /* validation */
  shard_window(s, 0, loss);
  return 0;
}
static int shards_backward(void *u, void *batch) {
  shards *s = (shards *)u;
  size_t i, n = s->net->num_params;
  int r, micro = 1;
  double loss;
  (void)batch;
  for (r = 0; r < s->W; r++) {
    micro = shard_window(s, r, &loss);
    for (i = 0; i < n; i++) s->sum[i] = r == 0 ? s->helper.grads[i] : s->sum[i] + s->helper.grads[i];
  }
  for (i = 0; i < n; i++) s->net->grads[i] = s->sum[i] * (1.0f / (float)(s->W * (s->mean ? micro : s->accum))); /* the trainer's averaging */
  return 0;
}

/* ---- one training run ---------------------------------------------------------------------------------- */
typedef struct run {
  spirals train, val;
  mlp net;
  tr_tensor views[MLP_NUM_TENSORS];
  tr_data td, vd;
  tr_trainer t;
  shards sh;
} run;

static void run_init(run *r, int per_class, int val_per_class, int batch, int sgd) {
  memset(r, 0, sizeof *r);
  CHECK(spirals_make(&r->train, per_class, 3, 0.2f, 1) == 0 && spirals_make(&r->val, val_per_class, 3, 0.2f, 2) == 0, "data");
  CHECK(mlp_init(&r->net, 2, iarg("hidden", 16), 3, batch * 4, 42) == 0, "model"); /* (fit's hidden=H: a model of 6H+3 floats) */
  r->td = spirals_tr_data(&r->train, batch, 1);
  r->vd = spirals_tr_data(&r->val, batch, 0);
  CHECK(tr_init(&r->t, &(tr_desc){ .model = mlp_tr_model(&r->net, r->views), .seed = 7, .zero = iarg("zero", 0), .async_save = iarg("async", 0),
        .optim = sgd ? (tr_optim){ .kind = TR_OPTIM_SGD, .lr = 0.05, .momentum = 0.9 } : (tr_optim){ .lr = 1e-2 } }) == TR_OK,
        "tr_init: %s", tr_error(&r->t));
  CHECK(r->t.ctx.rank == rank_ && r->t.ctx.world_size == world_, "ctx rank %d/%d", r->t.ctx.rank, r->t.ctx.world_size);
}
static void run_free(run *r) {
  tr_free(&r->t);
  mlp_free(&r->net);
  if (r->sh.sum) { mlp_free(&r->sh.helper); free(r->sh.sum); }
  spirals_free(&r->train);
  spirals_free(&r->val);
}
static tr_config run_config(run *r, int epochs) {
  tr_config c;
  memset(&c, 0, sizeof c);
  c.train = &r->td;
  c.val = &r->vd;
  c.max_epochs = epochs;
  c.gradient_clip_val = 1.0;
  return c;
}

static int64_t request_at = -1;
static int saved_seen;
static hk_signal request_ckpt(hk_ctx *ctx, void *u) {
  (void)u;
  if (ctx->rank == ctx->world_size - 1 && ctx->global_step == request_at) hk_request(ctx, HK_REQUEST_CHECKPOINT);
  return HK_CONTINUE;
}
static hk_signal count_saved(hk_ctx *ctx, void *u) { (void)ctx; (void)u; saved_seen++; return HK_CONTINUE; }
/* lr_at=STEP lr_on=all|last: a hook halves the learning rate after that step, on every rank or the last only
   (rank 0's decisions are the reference: the run must end with the same bits either way) */
static int64_t lr_at = -1;
static int lr_last_only;
static hk_signal halve_lr(hk_ctx *ctx, void *u) {
  (void)u;
  if (ctx->global_step == lr_at && (!lr_last_only || ctx->rank == ctx->world_size - 1))
    CHECK(tr_lr_scale(ctx, 0.5) == TR_OK, "tr_lr_scale");
  return HK_CONTINUE;
}

/* For tests/multihost.sh: pace=MS sleeps MS ms after each training batch (a run long enough to act on
   while it trains), pids=DIR writes DIR/pid.RANK once training runs, exc=DIR writes DIR/exc.RANK
   ("STEP why") from on_exception. */
static const char *pids_dir, *exc_dir;
static int pace_ms;
static hk_signal pace(hk_ctx *ctx, void *u) {
  (void)u;
  if (pids_dir && ctx->global_step == 1) {
    char path[512];
    FILE *f;
    snprintf(path, sizeof path, "%s/pid.%d", pids_dir, ctx->rank);
    CHECK((f = fopen(path, "w")) && fprintf(f, "%ld\n", (long)getpid()) > 0 && fclose(f) == 0, "writing %s", path);
  }
  if (pace_ms > 0) (void)poll(NULL, 0, pace_ms);
  return HK_CONTINUE;
}
static hk_signal write_exc(hk_ctx *ctx, void *u) {
  char path[512];
  FILE *f;
  (void)u;
  snprintf(path, sizeof path, "%s/exc.%d", exc_dir, ctx->rank);
  CHECK((f = fopen(path, "w")) && fprintf(f, "%lld %s\n", (long long)ctx->global_step, ctx->abort_reason ? ctx->abort_reason : "?") > 0 &&
        fclose(f) == 0,
        "writing %s", path);
  return HK_CONTINUE;
}

/* groups=1: w1 and b1 at half the learning rate with their own weight decay, w2 at twice it, b2 frozen (the model's
   last 3 floats: zero's partial last block). groups=2: w2 frozen (floats 48-95 at hidden=16: 2 ranks' shards split it),
   the biases at 3 times the learning rate. */
#define GROUPS1 "param_group(match=w1|b1, lr_mult=0.5, weight_decay=0.05); param_group(match=w2, lr_mult=2); " \
                "param_group(match=b2, frozen=true)"
#define GROUPS2 "param_group(match=w2, frozen=true); param_group(match=b?, lr_mult=3)"

static int mode_fit(void) {
  float *frozen = NULL; /* groups=1: b2 as it was */
  size_t fz_at = 0, fz_n = 0;
  run r;
  const char *out = arg("out", NULL), *resume = arg("resume", NULL), *ckpt = arg("ckpt", NULL);
  int batch = iarg("batch", 16), ref = iarg("ref", 0), global = iarg("global", 0);
  tr_config c;
  tr_err e;
  CHECK(out, "fit needs out=FILE");
  run_init(&r, 100, 40, global ? batch * global : batch, iarg("sgd", 0));
  c = run_config(&r, iarg("epochs", 3));
  c.accumulate_grad_batches = iarg("accum", 1);
  c.accumulate_mean_of_window = iarg("mean", 0);
  c.max_steps = iarg("steps", 0);
  if (arg("clip", NULL)) c.gradient_clip_val = atof(arg("clip", "1"));
  c.resume_from = resume;
  c.save_to = ckpt;
  if (ref) { /* every step: W shards of B, in rank order */
    r.sh.net = &r.net; r.sh.ds = &r.train; r.sh.W = ref; r.sh.B = batch; r.sh.accum = c.accumulate_grad_batches;
    r.sh.mean = c.accumulate_mean_of_window;
    c.accumulate_grad_batches = 1;
    CHECK(mlp_init(&r.sh.helper, 2, 16, 3, batch, 42) == 0 && (r.sh.sum = (float *)malloc(r.net.num_params * sizeof(float))), "ref");
    r.t.model.user = &r.sh;
    r.t.model.forward = shards_forward;
    r.t.model.backward = shards_backward;
    r.td.user = &r.sh; r.td.count = shards_count; r.td.get = shards_get; r.td.shuffle = shards_shuffle;
  }
  if (global) c.limit_train_batches = spirals_num_batches(&r.train, batch) / global; /* the batches W ranks see */
  if (arg("lr_at", NULL)) {
    lr_at = iarg("lr_at", 0);
    lr_last_only = !strcmp(arg("lr_on", "all"), "last");
    CHECK(hk_on(r.t.reg, HK_ON_TRAIN_BATCH_END, halve_lr, NULL, NULL, NULL) == HK_OK, "hook");
  }
  if (arg("lrf_on", NULL)) { /* lr_finder on every rank, or on one rank only (lrf_on=0 / last) */
    const char *on = arg("lrf_on", "all");
    if (!strcmp(on, "all") || (!strcmp(on, "0") && rank_ == 0) || (!strcmp(on, "last") && rank_ == world_ - 1))
      CHECK(hk_spec_apply(r.t.reg, "lr_finder(num_training_steps=20, min_lr=1e-4, max_lr=1, verbose=false)") == HK_OK,
            "%s", hk_last_error(r.t.reg));
  }
  if (iarg("groups", 0)) {
    int two = iarg("groups", 0) == 2;
    CHECK(hk_spec_apply(r.t.reg, two ? GROUPS2 : GROUPS1) == HK_OK, "%s", hk_last_error(r.t.reg));
    fz_at = r.net.tensors[two ? MLP_W2 : MLP_B2].offset;
    fz_n = r.net.tensors[two ? MLP_W2 : MLP_B2].count;
    CHECK((frozen = (float *)malloc(fz_n * sizeof(float))) != NULL, "memory");
    memcpy(frozen, r.net.params + fz_at, fz_n * sizeof(float));
  }
  pace_ms = iarg("pace", 0);
  pids_dir = arg("pids", NULL);
  if (pace_ms || pids_dir) CHECK(hk_on(r.t.reg, HK_ON_TRAIN_BATCH_END, pace, NULL, NULL, NULL) == HK_OK, "hook");
  if ((exc_dir = arg("exc", NULL))) CHECK(hk_on(r.t.reg, HK_ON_EXCEPTION, write_exc, NULL, NULL, NULL) == HK_OK, "hook");
  if (arg("request_at", NULL)) {
    request_at = iarg("request_at", 0);
    CHECK(hk_on(r.t.reg, HK_ON_TRAIN_BATCH_END, request_ckpt, NULL, NULL, NULL) == HK_OK, "hook");
    CHECK(hk_on(r.t.reg, HK_ON_CHECKPOINT_SAVED, count_saved, NULL, NULL, NULL) == HK_OK, "hook");
  }
  e = tr_fit(&r.t, &c);
  if (e && exc_dir) { printf("fit: rank %d: %s after %lld steps: %s\n", rank_, tr_err_name(e), (long long)r.t.global_step, tr_error(&r.t)); return 3; }
  CHECK(e == TR_OK, "tr_fit: %s", tr_error(&r.t));
  if (request_at >= 0) CHECK(saved_seen == 1, "on_checkpoint_saved ran %d times on this rank", saved_seen);
  same_everywhere(hash(r.net.params, r.net.num_params * sizeof(float)), "the parameters");
  same_everywhere((uint64_t)r.t.global_step, "global_step");
  if (frozen) { /* the frozen tensor as it was, the others trained */
    CHECK(r.t.global_step > 0 && !memcmp(frozen, r.net.params + fz_at, fz_n * sizeof(float)), "the frozen tensor changed in %lld steps",
          (long long)r.t.global_step);
    free(frozen);
  }
  if (iarg("zero", 0)) { /* this rank keeps the state of its shard only: [r * P, (r + 1) * P) of whole blocks of 16 */
    size_t n = r.net.num_params, per = ((n + 15) / 16 + (size_t)world_ - 1) / (size_t)world_ * 16;
    size_t lo = (size_t)rank_ * per < n ? (size_t)rank_ * per : n, len = n - lo < per ? n - lo : per;
    CHECK(r.t.tr__opt_lo == lo && r.t.tr__opt_n == len, "zero: the state covers [%zu, +%zu), expected [%zu, +%zu)",
          r.t.tr__opt_lo, r.t.tr__opt_n, lo, len);
    CHECK(sum_everywhere((int64_t)r.t.tr__opt_n) == (int64_t)n, "zero: the shards do not tile the %zu parameters", n);
    CHECK(tr_optim_state_bytes(&r.t) == 4 * len * (iarg("sgd", 0) ? 1 : 2), "zero: %zu bytes of state", tr_optim_state_bytes(&r.t));
    if (rank_ == 0) printf("zero: %d rank(s), %zu parameters, rank 0 keeps the optimizer state of %zu: %zu bytes\n",
                           world_, n, len, tr_optim_state_bytes(&r.t));
  }
  if (rank_ == 0) {
    FILE *f = fopen(out, "wb");
    CHECK(f && fwrite(r.net.params, sizeof(float), r.net.num_params, f) == r.net.num_params, "writing %s", out);
    if (iarg("grads", 0)) /* the last step's gradients too, as hooks see them (clipped) */
      CHECK(fwrite(r.net.grads, sizeof(float), r.net.num_params, f) == r.net.num_params, "writing %s", out);
    CHECK(fclose(f) == 0, "writing %s", out);
    printf("fit: %d rank(s), %lld steps, params hash %016llx -> %s\n", world_, (long long)r.t.global_step,
           (unsigned long long)hash(r.net.params, r.net.num_params * sizeof(float)), out);
  }
  run_free(&r);
  return 0;
}

static int mode_diff(void) {
  FILE *a = argc_ > 3 ? fopen(argv_[2], "rb") : NULL, *b = argc_ > 3 ? fopen(argv_[3], "rb") : NULL;
  double tol = argc_ > 4 ? atof(argv_[4]) : 0, worst = 0, rel = 0;
  float x, y;
  long n = 0;
  CHECK(a && b, "diff A B TOL: cannot open the files");
  while (fread(&x, 4, 1, a) == 1 && fread(&y, 4, 1, b) == 1) {
    double d = fabs((double)x - y);
    if (d > worst) worst = d;
    if (d / (fabs((double)y) + 1e-30) > rel && fabs((double)y) > 1e-3) rel = d / fabs((double)y);
    n++;
  }
  fclose(a); fclose(b);
  printf("diff %s %s: %ld params, max |a-b| = %.3g, max relative (|b| > 1e-3) = %.3g, tolerance %.3g\n", argv_[2], argv_[3], n, worst, rel, tol);
  CHECK(n > 0 && worst <= tol, "max |a-b| %.3g above %.3g", worst, tol);
  return 0;
}

/* ---- scenarios: a hook acts on one rank only; every rank must end the same way ---------------------------- */
static int exceptions, train_ends, batches_this_epoch, zero_only_calls, skip_calls;
static hk_signal on_exc(hk_ctx *ctx, void *u) { (void)ctx; (void)u; exceptions++; return HK_CONTINUE; }
static hk_signal on_tend(hk_ctx *ctx, void *u) { (void)ctx; (void)u; train_ends++; return HK_CONTINUE; }
static hk_signal last_rank_at(hk_ctx *ctx, void *u) {
  const char *what = (const char *)u;
  if (ctx->rank != ctx->world_size - 1) return HK_CONTINUE;
  if (!strcmp(what, "stop") && ctx->global_step == 7) return HK_STOP;
  if (!strcmp(what, "fail") && ctx->global_step == 5) return hk_fail(ctx, "boom on rank %d", ctx->rank);
  if (!strcmp(what, "skip") && ++skip_calls >= 4 && skip_calls <= 6) return HK_SKIP_STEP; /* windows 4, 5, 6 */
  if (!strcmp(what, "sigterm") && ctx->global_step == 4) raise(SIGTERM);
  if (!strcmp(what, "configfail")) return hk_fail(ctx, "configure_model failed on rank %d", ctx->rank);
  return HK_CONTINUE;
}
/* Item 4 of issue 29: something on one rank only that needs every rank (a save in on_exception, a tr_save
   from a hook) ends every rank with the same error, in bounded time; a learning rate changed on some ranks
   is agreed (lrdiffer: changed differently on every rank, which cannot be agreed: an error on every rank). */
static hk_signal one_rank_at(hk_ctx *ctx, void *u) {
  const char *what = (const char *)u;
  int on = !strcmp(what, "oeczero") || !strcmp(what, "saveone") ? 0 : ctx->world_size - 1;
  if (ctx->global_step != 5) return HK_CONTINUE;
  if (!strcmp(what, "lrdiffer")) { CHECK(tr_lr_scale(ctx, 1.5 + 0.5 * ctx->rank) == TR_OK, "tr_lr_scale"); return HK_CONTINUE; }
  if (ctx->rank != on) return HK_CONTINUE;
  if (!strcmp(what, "saveone")) {
    tr_err e = tr_save((tr_trainer *)ctx->trainer, "saveone.ckpt");
    CHECK(e == TR_ERR_COMM, "tr_save on rank 0 alone returned %s: %s", tr_err_name(e), tr_error((tr_trainer *)ctx->trainer));
    return HK_CONTINUE;
  }
  return hk_fail(ctx, "boom on rank %d", ctx->rank);
}
static hk_signal zero_only(hk_ctx *ctx, void *u) {
  (void)u;
  CHECK(ctx->rank == 0, "a rank_zero_only hook ran on rank %d", ctx->rank);
  zero_only_calls++;
  return ctx->global_step == 3 ? HK_STOP : HK_CONTINUE; /* its stop still stops every rank */
}
static hk_signal count_batches(hk_ctx *ctx, void *u) { (void)ctx; (void)u; batches_this_epoch++; return HK_CONTINUE; }
static hk_signal check_epoch(hk_ctx *ctx, void *u) {
  (void)u;
  CHECK(batches_this_epoch == (int)(intptr_t)u, "epoch %lld: %d training batches on this rank, expected %d",
        (long long)ctx->epoch, batches_this_epoch, (int)(intptr_t)u);
  batches_this_epoch = 0;
  return HK_CONTINUE;
}

static int mode_scenario(const char *mode) {
  run r;
  tr_config c;
  tr_err e, want = TR_OK;
  int per_class = 100, event = HK_ON_TRAIN_BATCH_END;
  if (!strcmp(mode, "uneven")) per_class = 36; /* 108 points in batches of 16: 7 batches */
  run_init(&r, per_class, per_class, 16, 0);
  c = run_config(&r, 3);
  hk_on(r.t.reg, HK_ON_EXCEPTION, on_exc, NULL, NULL, NULL);
  hk_on(r.t.reg, HK_ON_TRAIN_END, on_tend, NULL, NULL, NULL);
  if (!strcmp(mode, "skip")) event = HK_ON_BEFORE_OPTIMIZER_STEP;
  if (!strcmp(mode, "configfail")) event = HK_CONFIGURE_MODEL;
  if (!strcmp(mode, "fail") || !strcmp(mode, "configfail") || !strcmp(mode, "failload")) want = TR_ERR_HOOK;
  if (!strncmp(mode, "oec", 3)) want = TR_ERR_HOOK;
  if (!strcmp(mode, "saveone")) want = TR_ERR_COMM;
  if (!strcmp(mode, "lrdiffer")) want = TR_ERR_INVALID;
  if (!strcmp(mode, "sigterm")) want = TR_ERR_INTERRUPTED;
  if (!strcmp(mode, "failload")) { /* the last rank alone is given a checkpoint that does not exist */
    want = TR_ERR_NOT_FOUND;
    c.resume_from = rank_ == world_ - 1 ? "/nonexistent/dir/x.ckpt" : NULL;
  } else if (!strcmp(mode, "mc") || !strcmp(mode, "mcasync")) { /* standard callbacks on every rank (ema swaps weights for
                                       validation, nan_guard and gradient_monitor read gradients); rank 0 alone writes,
                                       links, removes; mcasync: rank 0 writes in the background */
    if (rank_ == 0) CHECK(system("rm -rf mc") == 0, "rm");
#ifdef TRAIN_MPI
    MPI_Barrier(MPI_COMM_WORLD);
#endif
    c.max_epochs = 6;
    CHECK(hk_spec_apply(r.t.reg, !strcmp(mode, "mc") ? "model_checkpoint(dirpath=mc, monitor=val/loss, save_top_k=2, save_last=link)"
                        : "model_checkpoint(dirpath=mc, monitor=val/loss, save_top_k=2, save_last=link, async_save=true)") == HK_OK &&
          hk_spec_apply(r.t.reg, "early_stopping(monitor=val/loss, patience=100)") == HK_OK &&
          hk_spec_apply(r.t.reg, "ema(decay=0.9)") == HK_OK && hk_spec_apply(r.t.reg, "nan_guard()") == HK_OK &&
          hk_spec_apply(r.t.reg, "lr_monitor()") == HK_OK && hk_spec_apply(r.t.reg, "gradient_monitor()") == HK_OK &&
          hk_spec_apply(r.t.reg, "throughput_monitor(tokens_per_sample=4, flops_per_sample=10, peak_flops=1e9)") == HK_OK &&
          hk_spec_apply(r.t.reg, "profiler(table=false)") == HK_OK,
          "%s", hk_last_error(r.t.reg));
  } else if (!strcmp(mode, "plateau")) { /* a plateau on each rank's own train/loss: the ranks decide on their mean */
    char why[200];
    const char *spec = arg("sched", "plateau(monitor=train/loss, patience=0, factor=0.5)");
    CHECK(tr_sched_parse(&r.t.sched, spec, why, sizeof why) == TR_OK, "%s", why);
    c.max_epochs = 8;
  } else if (!strncmp(mode, "oec", 3) || !strcmp(mode, "saveone") || !strcmp(mode, "lrdiffer")) {
    int on = !strcmp(mode, "oecone") ? world_ - 1 : 0;
    if (rank_ == 0) CHECK(system("rm -rf oec saveone.ckpt") == 0, "rm");
#ifdef TRAIN_MPI
    MPI_Barrier(MPI_COMM_WORLD);
#endif
    if (!strncmp(mode, "oec", 3) && (rank_ == on || !strcmp(mode, "oecall"))) /* oecall: on every rank, as it should be */
      CHECK(hk_spec_apply(r.t.reg, "on_exception_checkpoint(dirpath=oec)") == HK_OK, "%s", hk_last_error(r.t.reg));
    CHECK(hk_on(r.t.reg, HK_ON_TRAIN_BATCH_END, one_rank_at, (void *)mode, NULL, NULL) == HK_OK, "hook");
  } else if (!strcmp(mode, "rank0")) {
    CHECK(hk_on(r.t.reg, HK_ON_TRAIN_BATCH_END, zero_only, NULL, &(hk_opts){ .name = "zero", .rank_zero_only = 1 }, NULL) == HK_OK, "hook");
  } else if (!strcmp(mode, "uneven")) { /* 7 batches: floor(7 / W) each; the 7 validation batches shared unevenly */
    hk_on(r.t.reg, HK_ON_TRAIN_BATCH_END, count_batches, NULL, NULL, NULL);
    hk_on(r.t.reg, HK_ON_TRAIN_EPOCH_END, check_epoch, (void *)(intptr_t)(7 / world_), NULL, NULL);
  } else {
    CHECK(hk_on(r.t.reg, event, last_rank_at, (void *)mode, NULL, NULL) == HK_OK, "hook");
  }
  e = tr_fit(&r.t, &c);
  printf("%s: rank %d of %d: %s after %lld steps%s%s\n", mode, rank_, world_, tr_err_name(e), (long long)r.t.global_step,
         e ? ": " : "", e ? tr_error(&r.t) : "");
  same_everywhere((uint64_t)r.t.global_step, "global_step");
  same_everywhere(hash(r.net.params, r.net.num_params * sizeof(float)), "the parameters");
  same_everywhere((uint64_t)e, "tr_fit's result");
  same_everywhere(hash(&r.t.lr, sizeof r.t.lr), "the learning rate");
  if (!strcmp(mode, "plateau"))
    CHECK(r.t.run->lr_state.checks == 8 && r.t.run->lr_state.plateau_lr > 0, "the plateau checked %lld times, lr %g",
          (long long)r.t.run->lr_state.checks, r.t.run->lr_state.plateau_lr);
  CHECK(e == want, "tr_fit returned %s, expected %s: %s", tr_err_name(e), tr_err_name(want), tr_error(&r.t));
  if (want && want != TR_ERR_INTERRUPTED && rank_ != world_ - 1) CHECK(strstr(tr_error(&r.t), "rank ") != NULL, "the error names the rank it came from: %s", tr_error(&r.t));
  if (want) CHECK(exceptions == 1 && train_ends == 0, "on_exception ran %d times, on_train_end %d", exceptions, train_ends);
  else CHECK(exceptions == 0 && train_ends == 1, "on_exception ran %d times, on_train_end %d", exceptions, train_ends);
  if (!strcmp(mode, "fail")) CHECK(strstr(tr_error(&r.t), "boom on rank") != NULL, "the error says why: %s", tr_error(&r.t));
  if (!strncmp(mode, "oec", 3) || !strcmp(mode, "saveone") || !strcmp(mode, "lrdiffer")) {
    CHECK(r.t.global_step == 5, "ended at step %lld, expected 5", (long long)r.t.global_step);
    if (!strcmp(mode, "saveone")) CHECK(strstr(tr_error(&r.t), "tr_save on rank 0 only"), "the error names the save: %s", tr_error(&r.t));
    if (!strcmp(mode, "lrdiffer")) CHECK(strstr(tr_error(&r.t), "changed the learning rate differently"), "%s", tr_error(&r.t));
    if (!strncmp(mode, "oec", 3)) CHECK(strstr(tr_error(&r.t), "boom on rank") != NULL, "the run's own error stands: %s", tr_error(&r.t));
    else same_everywhere(hash(tr_error(&r.t), strlen(tr_error(&r.t))), "the error message"); /* (oec: 'rank N: ' first elsewhere) */
    if (rank_ == 0 && !strcmp(mode, "oecall")) CHECK(access("oec/on_exception.ckpt", F_OK) == 0, "on_exception_checkpoint on every rank saved nothing");
    else if (rank_ == 0) CHECK(access("oec/on_exception.ckpt", F_OK) != 0 && access("saveone.ckpt", F_OK) != 0,
                               "a checkpoint was written although not every rank saved");
  }
  if (!strcmp(mode, "stop")) CHECK(r.t.global_step == 7, "stopped at step %lld, expected 7", (long long)r.t.global_step);
  if (!strcmp(mode, "fail")) CHECK(r.t.global_step == 5, "failed at step %lld, expected 5", (long long)r.t.global_step);
  if (!strcmp(mode, "sigterm")) CHECK(r.t.global_step == 4, "interrupted at step %lld, expected 4", (long long)r.t.global_step);
  if (!strcmp(mode, "skip")) CHECK(r.t.global_step == 3 * (19 / world_) - 3, "steps %lld: three windows skipped on one rank skip "
                                   "them everywhere", (long long)r.t.global_step);
  if ((!strcmp(mode, "mc") || !strcmp(mode, "mcasync")) && rank_ == 0) { /* two best checkpoints and the last.ckpt link, nothing else */
    DIR *dir = opendir("mc");
    struct dirent *de;
    int files = 0, last = 0;
    CHECK(dir, "mc/ was not created");
    while ((de = readdir(dir))) {
      if (de->d_name[0] == '.') continue;
      files++;
      last += !strcmp(de->d_name, "last.ckpt");
      CHECK(strstr(de->d_name, ".ckpt") && !strstr(de->d_name, ".tmp"), "unexpected file mc/%s", de->d_name);
    }
    closedir(dir);
    CHECK(files == 3 && last == 1, "mc/ holds %d files (last.ckpt: %d), expected 2 best + last.ckpt", files, last);
  }
  if (!strcmp(mode, "mc")) { /* the job's rates without a collective in a hook: this rank's times world_size, exact for
                                the trainer's equal shards; the profiler timed every step */
    const tr_throughput_monitor_state *tp = tr_throughput_monitor_get(r.t.reg, hk_spec_find(r.t.reg, "throughput_monitor", 0));
    const tr_profiler_state *pf = tr_profiler_get(r.t.reg, hk_spec_find(r.t.reg, "profiler", 0));
    int64_t job = sum_everywhere(r.t.samples_seen);
    double v;
    CHECK(tp && tp->samples == (double)job && tp->tokens == 4.0 * (double)job, "throughput: samples %g, tokens %g, the job's %lld",
          tp ? tp->samples : -1, tp ? tp->tokens : -1, (long long)job);
    CHECK(fabs(tp->samples_per_sec - world_ * tp->device_samples_per_sec) <= 1e-9 * tp->samples_per_sec &&
          tp->samples_per_sec > 0 && fabs(tp->mfu - tp->device_samples_per_sec * 10 / 1e9) <= 1e-9 * tp->mfu,
          "throughput: job %g/s, rank %g/s, mfu %g", tp->samples_per_sec, tp->device_samples_per_sec, tp->mfu);
    CHECK(r.t.global_step < 50 || (hk_metric_get(&r.t.ctx, "throughput/samples_per_sec", &v) == 1 && v > 0), /* a record at step 50 */
          "throughput/samples_per_sec is not a metric");
    CHECK(pf && pf->steps == r.t.global_step && pf->phase_calls[TR_PHASE_BACKWARD] == 2 * r.t.global_step,
          "profiler: %lld steps, %lld backward phases, global_step %lld", pf ? (long long)pf->steps : -1,
          pf ? (long long)pf->phase_calls[TR_PHASE_BACKWARD] : -1, (long long)r.t.global_step);
  }
  if (!strcmp(mode, "rank0")) {
    CHECK(r.t.global_step == 3, "a stop from a rank-zero-only hook: stopped at %lld, expected 3", (long long)r.t.global_step);
    CHECK(sum_everywhere(zero_only_calls) == 3 && zero_only_calls == (rank_ == 0 ? 3 : 0), "rank-zero-only calls %d", zero_only_calls);
  }
  if (!strcmp(mode, "uneven")) { /* the mean over all 7 validation batches, the same on every rank (tr_validate) */
    double v = NAN, direct = 0;
    int b;
    int has = hk_metric_get(&r.t.ctx, "val/loss", &v);
    for (b = 0; b < 7; b++) { const mlp_batch *mb = spirals_batch(&r.val, b, 16); direct += mlp_forward(&r.net, mb->x, mb->y, mb->n); }
    direct /= 7;
    if (7 / world_ == 0) /* no training batch on any rank, so no validation in the fit: the sanity check's is forgotten */
      CHECK(!has, "val/loss %g after a fit without validation", v);
    else {
      CHECK(has, "val/loss");
      same_everywhere(hash(&v, sizeof v), "val/loss");
      CHECK(fabs(v - direct) <= 1e-6 * fabs(direct), "val/loss %.9g, direct mean %.9g", v, direct);
    }
    CHECK(r.t.global_step == 3 * (7 / world_), "steps %lld", (long long)r.t.global_step);
    /* tr_validate / tr_test outside a fit: sharded the same way, the same global mean on every rank */
    CHECK(tr_validate(&r.t, &r.vd, 0, &v) == TR_OK && fabs(v - direct) <= 1e-6 * fabs(direct), "tr_validate: %.9g vs %.9g", v, direct);
    same_everywhere(hash(&v, sizeof v), "tr_validate's mean");
    CHECK(tr_test(&r.t, &r.vd, 3, &v) == TR_OK, "tr_test: %s", tr_error(&r.t)); /* 3 batches per rank */
    same_everywhere(hash(&v, sizeof v), "tr_test's mean");
    CHECK(tr_predict(&r.t, &r.vd, 0) == TR_OK, "tr_predict: %s", tr_error(&r.t));
  }
  run_free(&r);
  return 0;
}

/* ---- mismatches between ranks (issue 18): every rank fails with an error that names the mismatch and the
   values per rank, none hangs (each mpirun is under `timeout`). `what` picks one; rank 1 is the odd one:
     epochs     rank 1 max_epochs=1, the others 3                       tr_fit: TR_ERR_INVALID
     size       per-rank hidden sizes hidden=16,32[,..] (99 / 195 ...)  tr_init: TR_ERR_INVALID
     names      a tensor named differently on rank 1 (same sizes)       tr_init: TR_ERR_INVALID
     initfail   rank 1's tr_init refuses threads=-1                     tr_init: TR_ERR_INVALID everywhere
     fitfail    rank 1's tr_fit refuses max_epochs=-1                   tr_fit: TR_ERR_INVALID everywhere
     val        rank 1 has no validation data                           tr_fit: TR_ERR_INVALID
     resume     rank 1 alone resumes from a checkpoint                  tr_fit: TR_ERR_INVALID (counters)
     outofstep  rank 1's hook changes the accumulation from epoch 1     tr_fit: TR_ERR_COMM (out of step)
     calls      rank 0 calls tr_validate, the others tr_test            TR_ERR_INVALID
     exit       rank 1 returns before tr_fit (mpi_timeout=2)            rank 0's tr_fit: TR_ERR_COMM in ~2 s
     exitinit   rank 1 returns before tr_init (mpi_timeout=2)           rank 0's tr_init: TR_ERR_COMM in ~2 s
     groups     rank 1's param_group gives w1|b1 another lr_mult        tr_fit: TR_ERR_INVALID (the parameter groups)
     groupsnone rank 1 alone has a param_group that names no tensor     tr_fit: TR_ERR_INVALID (rank 1's refusal)
     groupsequal  the same groups, spelt differently on rank 1          tr_fit: TR_OK
     ft         rank 1's finetuning unfreezes at epoch 2, the others' at 1  tr_fit: TR_ERR_INVALID (the parameter groups)
     ftequal    the same finetuning, spelt differently on rank 1        tr_fit: TR_OK, the parameters equal everywhere */
static hk_signal change_accum(hk_ctx *ctx, void *u) {
  (void)u;
  if (ctx->rank == 1 && ctx->epoch == 1) tr_set_accumulation((tr_trainer *)ctx->trainer, 2);
  return HK_CONTINUE;
}
static void expect(const tr_trainer *t, tr_err got, tr_err want, const char *needle) {
  CHECK(got == want, "got %s, expected %s: %s", tr_err_name(got), tr_err_name(want), tr_error(t));
  CHECK(strstr(tr_error(t), needle) != NULL, "the error lacks \"%s\": %s", needle, tr_error(t));
}
static int mode_mismatch(void) {
  const char *what = arg("what", "");
  char hidden_list[64], *p, needle[300];
  int hidden = 16, k, odd = rank_ == 1;
  run r;
  tr_desc d;
  tr_config c;
  tr_err e = TR_OK;
  double t0 = 0;
  (void)t0; /* (the plain build measures nothing) */
  snprintf(hidden_list, sizeof hidden_list, "%s", arg("hidden", "16"));
  for (k = 0, p = strtok(hidden_list, ","); p; p = strtok(NULL, ","), k++) if (k == rank_) hidden = atoi(p);
  if (!strcmp(what, "exitinit") && odd) return 0; /* main calls MPI_Finalize: rank 0 must not wait forever */
  memset(&r, 0, sizeof r);
  CHECK(spirals_make(&r.train, 100, 3, 0.2f, 1) == 0 && spirals_make(&r.val, 40, 3, 0.2f, 2) == 0, "data");
  CHECK(mlp_init(&r.net, 2, hidden, 3, 64, 42) == 0, "model");
  r.td = spirals_tr_data(&r.train, 16, 1);
  r.vd = spirals_tr_data(&r.val, 16, 0);
  memset(&d, 0, sizeof d);
  d.model = mlp_tr_model(&r.net, r.views);
  d.seed = 7;
  if (!strcmp(what, "names") && odd) r.views[2].name = "w2_renamed";
  if (!strcmp(what, "initfail") && odd) d.threads = -1;
  if (!strcmp(what, "exit") || !strcmp(what, "exitinit")) d.mpi_timeout = 2;
#ifdef TRAIN_MPI
  d.zero = !strcmp(what, "fileszero");
  t0 = MPI_Wtime();
#endif
  e = tr_init(&r.t, &d);
  if (!strcmp(what, "exitinit")) { /* rank 0, alone */
#ifdef TRAIN_MPI
    double took = MPI_Wtime() - t0;
    expect(&r.t, e, TR_ERR_COMM, "tr_init: not every rank arrived within 2 s");
    CHECK(took < 30, "tr_init took %.1f s", took);
    printf("exitinit: rank 0: %s after %.1f s: %s\n", tr_err_name(e), took, tr_error(&r.t));
#endif
    goto done;
  }
  if (!strcmp(what, "size") || !strcmp(what, "names") || !strcmp(what, "initfail")) {
    printf("%s: rank %d of %d: %s: %s\n", what, rank_, world_, tr_err_name(e), tr_error(&r.t));
    same_everywhere((uint64_t)e, "tr_init's result");
    if (!strcmp(what, "size")) {
      size_t len = 0;
      int differ = 0, h0 = 16;
      for (k = 0; k < world_; k++) { /* every rank's count, in rank order */
        int h = 16, j;
        snprintf(hidden_list, sizeof hidden_list, "%s", arg("hidden", "16"));
        for (j = 0, p = strtok(hidden_list, ","); p; p = strtok(NULL, ","), j++) if (j == k) h = atoi(p);
        if (k == 0) h0 = h;
        differ |= h != h0;
        len += (size_t)snprintf(needle + len, sizeof needle - len, "%srank %d: %d", k ? ", " : "", k, 6 * h + 3);
      }
      if (differ) {
        expect(&r.t, e, TR_ERR_INVALID, "the parameter count (model.n_params) (");
        expect(&r.t, e, TR_ERR_INVALID, needle);
      } else CHECK(e == TR_OK, "the same model on every rank (hidden=%s for %d ranks): %s", arg("hidden", ""), world_, tr_error(&r.t));
    }
    if (!strcmp(what, "names")) {
      expect(&r.t, e, TR_ERR_INVALID, "tr_init: the ranks differ in the model or its training settings");
      expect(&r.t, e, TR_ERR_INVALID, "the tensors' names, offsets and counts (fingerprint)");
      CHECK(!strstr(tr_error(&r.t), "parameter count"), "only what differs is named: %s", tr_error(&r.t));
    }
    if (!strcmp(what, "initfail")) expect(&r.t, e, TR_ERR_INVALID, odd ? "tr_init: threads is -1" : "rank 1: tr_init: threads is -1");
    goto done;
  }
  CHECK(e == TR_OK, "tr_init: %s", tr_error(&r.t));
  hk_on(r.t.reg, HK_ON_EXCEPTION, on_exc, NULL, NULL, NULL);
  c = run_config(&r, 3);
  if (!strcmp(what, "epochs") && odd) c.max_epochs = 1;
  if (!strcmp(what, "fitfail") && odd) c.max_epochs = -1;
  if (!strcmp(what, "val") && odd) c.val = NULL;
  if (!strcmp(what, "outofstep")) hk_on(r.t.reg, HK_ON_TRAIN_EPOCH_START, change_accum, NULL, NULL, NULL);
  if (!strcmp(what, "resume")) { /* a checkpoint after one epoch, written by rank 0; rank 1 alone resumes from it */
    tr_config once = run_config(&r, 1);
    CHECK(tr_fit(&r.t, &once) == TR_OK && tr_save(&r.t, "mismatch.ckpt") == TR_OK, "%s", tr_error(&r.t));
    tr_free(&r.t);
    mlp_free(&r.net);
    CHECK(mlp_init(&r.net, 2, hidden, 3, 64, 42) == 0, "model");
    d.model = mlp_tr_model(&r.net, r.views);
    CHECK(tr_init(&r.t, &d) == TR_OK, "tr_init: %s", tr_error(&r.t));
    hk_on(r.t.reg, HK_ON_EXCEPTION, on_exc, NULL, NULL, NULL);
    c.resume_from = odd ? "mismatch.ckpt" : NULL;
  }
  if (!strcmp(what, "files") || !strcmp(what, "fileszero")) { /* two checkpoints with the same counters, one per rank */
    tr_config once = run_config(&r, 1);
    CHECK(tr_fit(&r.t, &once) == TR_OK && tr_save(&r.t, "files_a.ckpt") == TR_OK, "%s", tr_error(&r.t));
    r.net.params[0] += 0.5f; /* on every rank alike: the second file differs in one parameter */
    CHECK(tr_save(&r.t, "files_b.ckpt") == TR_OK, "%s", tr_error(&r.t));
    c.resume_from = odd ? "files_b.ckpt" : "files_a.ckpt";
  }
  if (!strncmp(what, "groups", 6)) { /* (groupsnone used to leave the other ranks waiting: rank 1's run refused to start) */
    const char *spec = "param_group(match=w1|b1, lr_mult=0.5)";
    if (!strcmp(what, "groups") && odd) spec = "param_group(match=w1|b1, lr_mult=0.25)";
    if (!strcmp(what, "groupsequal") && odd) spec = "param_group(match=b1|w1, lr_mult=0.5); param_group(match=w1, lr_mult=0.5)";
    if (!strcmp(what, "groupsnone")) spec = odd ? "param_group(match=nothere, frozen=true)" : NULL;
    if (spec) CHECK(hk_spec_apply(r.t.reg, spec) == HK_OK, "%s", hk_last_error(r.t.reg));
  }
  if (!strncmp(what, "ft", 2)) { /* finetuning's schedule decides the updates as much as a param_group */
    const char *spec = "finetuning(match=w1|b1, unfreeze_at_epoch=1, lr_factor=2)";
    if (!strcmp(what, "ft") && odd) spec = "finetuning(match=w1|b1, unfreeze_at_epoch=2, lr_factor=2)";
    if (!strcmp(what, "ftequal") && odd) spec = "finetuning(match=b1|w1, unfreeze_at_epoch=1, lr_factor=2.0)";
    CHECK(hk_spec_apply(r.t.reg, spec) == HK_OK, "%s", hk_last_error(r.t.reg));
  }
  if (!strcmp(what, "exit") && odd) goto done; /* returns without tr_fit: main calls MPI_Finalize */
  if (!strcmp(what, "calls")) e = rank_ == 0 ? tr_validate(&r.t, &r.vd, 0, NULL) : tr_test(&r.t, &r.vd, 0, NULL);
  else e = tr_fit(&r.t, &c);
  printf("%s: rank %d of %d: %s after %lld steps: %s\n", what, rank_, world_, tr_err_name(e), (long long)r.t.global_step, tr_error(&r.t));
  if (!strcmp(what, "exit")) { /* every rank but 1 */
#ifdef TRAIN_MPI
    double took = MPI_Wtime() - t0;
    expect(&r.t, e, TR_ERR_COMM, "tr_fit: not every rank arrived within 2 s");
    expect(&r.t, e, TR_ERR_COMM, "MPI_Abort");
    CHECK(took < 30, "tr_fit took %.1f s", took);
#endif
    goto done;
  }
  same_everywhere((uint64_t)e, "the result");
  if (strcmp(what, "resume")) same_everywhere((uint64_t)r.t.global_step, "global_step"); /* (resume: the rank's own) */
  if (!strcmp(what, "epochs")) {
    expect(&r.t, e, TR_ERR_INVALID, "tr_fit: the ranks differ in what decides the run's length and its updates (tr_config, "
           "parameter groups): max_epochs (rank 0: 3, rank 1: 1");
    CHECK(r.t.global_step == 0 && exceptions == 0, "refused before anything ran");
  }
  if (!strcmp(what, "groupsnone")) { /* its run layer refused the start: every rank is told why (tr_run_enter) */
    expect(&r.t, e, TR_ERR_INVALID, odd ? "tr_run_enter: param_group: match=nothere names none" : "rank 1: tr_run_enter: param_group: match=nothere names none");
    CHECK(r.t.global_step == 0 && exceptions == 0, "refused before anything ran");
  }
  if (!strcmp(what, "groups")) {
    expect(&r.t, e, TR_ERR_INVALID, "tr_fit: the ranks differ in what decides the run's length and its updates (tr_config, "
           "parameter groups): the parameter groups (");
    expect(&r.t, e, TR_ERR_INVALID, "fingerprint, 0: none) (rank 0: ");
    CHECK(!strstr(tr_error(&r.t), "max_epochs"), "only what differs is named: %s", tr_error(&r.t));
    CHECK(r.t.global_step == 0 && exceptions == 0, "refused before anything ran");
  }
  if (!strcmp(what, "ft")) {
    expect(&r.t, e, TR_ERR_INVALID, "tr_fit: the ranks differ in what decides the run's length and its updates (tr_config, "
           "parameter groups): the parameter groups (");
    expect(&r.t, e, TR_ERR_INVALID, "finetuning: the tensors it takes, unfreeze_at_epoch");
    CHECK(r.t.global_step == 0 && exceptions == 0, "refused before anything ran");
  }
  if (!strcmp(what, "ftequal")) {
    CHECK(e == TR_OK && r.t.global_step > 0, "the same finetuning: %s", tr_error(&r.t));
    same_everywhere(hash(r.net.params, r.net.num_params * sizeof(float)), "the parameters");
  }
  if (!strcmp(what, "groupsequal")) CHECK(e == TR_OK && r.t.global_step > 0, "the same groups: %s", tr_error(&r.t));
  if (!strcmp(what, "fitfail")) expect(&r.t, e, TR_ERR_INVALID, odd ? "tr_fit: max_*" : "rank 1: tr_fit: max_*");
  if (!strcmp(what, "val")) expect(&r.t, e, TR_ERR_INVALID, "val (rank 0: set, rank 1: not set");
  if (!strcmp(what, "resume")) {
    expect(&r.t, e, TR_ERR_INVALID, "tr_fit (after resuming): the ranks differ in the state they start from");
    expect(&r.t, e, TR_ERR_INVALID, "epoch (rank 0: 0, rank 1: 1");
    CHECK(exceptions == 1, "on_exception ran %d times", exceptions);
  }
  if (!strcmp(what, "files") || !strcmp(what, "fileszero")) { /* the same counters: only the state tells them apart */
    expect(&r.t, e, TR_ERR_INVALID, "tr_fit (after resuming): the ranks differ in the state they start from");
    expect(&r.t, e, TR_ERR_INVALID, "the checkpoint loaded (a hash of its parameters, optimizer state and counters");
    CHECK(!strstr(tr_error(&r.t), "epoch ("), "only the state differs: %s", tr_error(&r.t));
    CHECK(exceptions == 1, "on_exception ran %d times", exceptions);
  }
  if (!strcmp(what, "outofstep")) {
    expect(&r.t, e, TR_ERR_COMM, "the ranks are out of step");
    CHECK(exceptions == 1, "on_exception ran %d times", exceptions);
  }
  if (!strcmp(what, "calls")) expect(&r.t, e, TR_ERR_INVALID, "the ranks called different functions: rank 0 in tr_validate, rank 1 in tr_test");
done:
  tr_free(&r.t); /* (after a timeout it leaves the MPI state to MPI: see tr_desc.mpi_timeout) */
  mlp_free(&r.net);
  spirals_free(&r.train);
  spirals_free(&r.val);
  return 0;
}

/* ---- a refusal on one rank only (before the run's first agreement): every rank fails with that rank's reason,
   none waits for it (each mpirun under `timeout`: a hang fails the test). The last rank is the odd one, rank 0
   where the refusal is about a file (rank 0 alone writes); on=R: rank R:
     spec      its spec's param_group names no tensor: the run layer        tr_fit refused before anything fires
               refuses the start (tr_run_enter)
     dir       its spec's model_checkpoint has dirpath= a regular file      tr_fit refused at on_fit_start
     resume    its resume_from does not exist                               tr_fit refused before anything fires
     done      it alone resumes a finished run (nothing left to train)      tr_fit refused before anything fires
     hook      its on_fit_start hook fails                                  tr_fit
     valspec   as spec, in tr_validate (it used to leave the others waiting)
     predir    its prediction_writer has dirpath= a regular file            tr_predict refused at on_predict_start
     predhook  its setup hook fails                                         tr_predict
   Then every rank runs again with nothing odd: the trainer still works (the ranks still talk). */
static hk_signal fail_here(hk_ctx *ctx, void *u) { (void)u; return hk_fail(ctx, "refused on purpose on rank %d", ctx->rank); }
static int onerank_predict(void *user, void *batch, void **outputs) { (void)user; (void)batch; *outputs = NULL; return 0; }
static int mode_onerank(void) {
  const char *what = arg("what", "");
  int files = !strcmp(what, "dir") || !strcmp(what, "predir");
  int on = iarg("on", files ? 0 : world_ - 1), odd = rank_ == on;
  run r;
  tr_config c;
  tr_err e;
  char needle[200];
  const char *reason = "";
  double mean = 0;
  run_init(&r, 40, 20, 16, 0);
  r.t.model.predict = onerank_predict;
  hk_on(r.t.reg, HK_ON_EXCEPTION, on_exc, NULL, NULL, NULL);
  c = run_config(&r, 2);
  if (odd) {
    FILE *f = fopen("onerank.file", "w"); /* a regular file where a directory is wanted */
    CHECK(f && fclose(f) == 0, "onerank.file");
  }
  if (!strcmp(what, "done")) { /* every rank: one finished epoch, saved (rank 0 writes) */
    tr_config once = run_config(&r, 1);
    CHECK(tr_fit(&r.t, &once) == TR_OK && tr_save(&r.t, "onerank_done.ckpt") == TR_OK, "%s", tr_error(&r.t));
    c.max_epochs = 1;
    if (odd) c.resume_from = "onerank_done.ckpt", reason = "nothing";
  }
  if (odd) {
    const char *spec = !strcmp(what, "spec") || !strcmp(what, "valspec") ? "param_group(match=nothere, frozen=true)" :
                       !strcmp(what, "dir") ? "model_checkpoint(dirpath=onerank.file)" :
                       !strcmp(what, "predir") ? "prediction_writer(dirpath=onerank.file)" : NULL;
    if (spec) CHECK(hk_spec_apply(r.t.reg, spec) == HK_OK, "%s", hk_last_error(r.t.reg));
    if (!strcmp(what, "resume")) c.resume_from = "onerank_missing.ckpt", reason = "onerank_missing.ckpt";
    if (!strcmp(what, "hook")) hk_on(r.t.reg, HK_ON_FIT_START, fail_here, NULL, NULL, NULL), reason = "refused on purpose";
    if (!strcmp(what, "predhook")) hk_on(r.t.reg, HK_SETUP, fail_here, NULL, NULL, NULL), reason = "refused on purpose";
    if (files) reason = "onerank.file";
    if (!strcmp(what, "spec") || !strcmp(what, "valspec")) reason = "tr_run_enter: param_group: match=nothere names none";
  }
  if (!strcmp(what, "valspec")) e = tr_validate(&r.t, &r.vd, 0, &mean);
  else if (!strcmp(what, "predir") || !strcmp(what, "predhook")) e = tr_predict(&r.t, &r.vd, 0);
  else e = tr_fit(&r.t, &c);
  printf("onerank %s: rank %d of %d: %s after %lld steps: %s\n", what, rank_, world_, tr_err_name(e), (long long)r.t.global_step, tr_error(&r.t));
  same_everywhere((uint64_t)e, "the result");
  CHECK(e != TR_OK, "rank %d: %s succeeded", rank_, what);
  if (odd) CHECK(strstr(tr_error(&r.t), reason) != NULL, "its own reason (%s): %s", reason, tr_error(&r.t));
  else {
    snprintf(needle, sizeof needle, "rank %d: ", on);
    CHECK(strstr(tr_error(&r.t), needle) && strstr(tr_error(&r.t), reason), "the last rank's reason (%s%s): %s", needle, reason, tr_error(&r.t));
  }
  CHECK(exceptions == 0 || !strcmp(what, "dir") || !strcmp(what, "resume") || !strcmp(what, "hook") || !strcmp(what, "predir") || !strcmp(what, "predhook"),
        "refused before anything fired, yet on_exception ran");
  same_everywhere((uint64_t)r.t.global_step, "global_step");
  tr_free(&r.t); /* then a run with nothing odd: every rank trains */
  mlp_free(&r.net);
  spirals_free(&r.train);
  spirals_free(&r.val);
  run_init(&r, 40, 20, 16, 0);
  c = run_config(&r, 1);
  CHECK(tr_fit(&r.t, &c) == TR_OK, "the next run: %s", tr_error(&r.t));
  same_everywhere(hash(r.net.params, r.net.num_params * sizeof(float)), "the parameters");
  run_free(&r);
  return 0;
}

/* ---- prediction_writer under several processes: what docs/callbacks.md ("Several processes") says ------------
   test_mpi pw fmt=F interval=I [name=FILENAME] [dir=DIR] [logs=1 [resume=1]] [foreign=R]
   Every rank predicts its share of the validation data (8 batches, the last shorter: rank r takes r, r+W, ...,
   numbered 0, 1, ... in its files). Without {rank} in name rank 0 alone writes (its share); with it every rank
   writes its own files. logs=1: a csv logger, model_checkpoint and an epoch's fit first (resume=1, a new mpirun:
   the run resumed from pwck/last.ckpt for a second epoch): the default dirpath is the run directory's
   predictions/ on every rank, and a later process of the run takes back its files (every rank its own, by the
   record beside them) and writes them again. Checked: each writing rank's files hold exactly its own predictions
   (none clobbered by another rank's), the directory holds exactly the files expected (rank 0), every rank
   resolved the same directory. foreign=R: a file of someone else's at rank R's first path: every rank fails at
   on_predict_start, before any batch, naming it; the file is untouched and nothing else written. */
static tr_predictions pw_pred;
static int pw_predict(void *user, void *batch, void **outputs) {
  mlp *m = (mlp *)user;
  const mlp_batch *b = (const mlp_batch *)batch;
  if (!b || mlp_forward(m, b->x, NULL, b->n) != 0) return 1; /* (probabilities only) */
  pw_pred.values = m->probs;
  pw_pred.rows = b->n;
  pw_pred.cols = 3;
  pw_pred.names = NULL;
  *outputs = &pw_pred;
  return 0;
}
static char *pw_slurp(const char *path, long *len) {
  FILE *f = fopen(path, "rb");
  char *b = NULL;
  long n = -1;
  if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 && (b = (char *)malloc((size_t)n + 1)) &&
      fread(b, 1, (size_t)n, f) == (size_t)n)
    b[n] = 0;
  else { free(b); b = NULL; }
  if (f) fclose(f);
  *len = n;
  return b;
}
static int pw_batches(int r) { return (8 - r + world_ - 1) / world_; } /* rank r's share of the 8 batches */
static void pw_base(char *out, size_t cap, const char *dir, const char *name, int r) { /* dir/name, {rank} -> r */
  const char *at = strstr(name, "{rank}");
  if (at) snprintf(out, cap, "%s/%.*s%d%s", dir, (int)(at - name), name, r, at + 6);
  else snprintf(out, cap, "%s/%s", dir, name);
}
/* This rank's predictions of its batch k (the model as it is now). */
static const mlp_batch *pw_expected(run *r, int k) {
  const mlp_batch *b = spirals_batch(&r->val, k * world_ + rank_, 16);
  CHECK(b && mlp_forward(&r->net, b->x, NULL, b->n) == 0, "batch %d", k);
  return b;
}
/* csv or jsonl: every row of every batch of this rank's, in order, read back as the same floats */
static void pw_check_text(run *r, const char *path, int jsonl) {
  long len;
  char *text = pw_slurp(path, &len), *line;
  int k, i, rows = 0;
  CHECK(text, "%s is missing", path);
  line = text;
  if (!jsonl) { CHECK(!strncmp(line, "batch,row,col0,col1,col2\n", 25), "%s: header", path); line += 25; }
  for (k = 0; k < pw_batches(rank_); k++) {
    const mlp_batch *b = pw_expected(r, k);
    for (i = 0; i < b->n; i++, rows++) {
      long long bb = -1, rr = -1;
      float v[3];
      int got = jsonl ? sscanf(line, "{\"batch\":%lld,\"row\":%lld,\"col0\":%f,\"col1\":%f,\"col2\":%f}", &bb, &rr, &v[0], &v[1], &v[2])
                      : sscanf(line, "%lld,%lld,%f,%f,%f", &bb, &rr, &v[0], &v[1], &v[2]);
      CHECK(got == 5 && bb == k && rr == i && !memcmp(v, r->net.probs + 3 * i, sizeof v), "%s: row %d (batch %d, row %d) is not "
            "this rank's prediction: %.60s", path, rows, k, i, line);
      line = strchr(line, '\n');
      CHECK(line, "%s: ends early", path);
      line++;
    }
  }
  CHECK(!*line, "%s: more than this rank's %d rows", path, rows);
  free(text);
}
/* safetensors: the file's data (the end of the file) is this rank's batches first..last, in order */
static void pw_check_st(run *r, const char *path, int first, int last) {
  long len, at;
  char *data = pw_slurp(path, &len);
  uint64_t hlen = 0;
  int k, rows = 0;
  CHECK(data && len > 8, "%s is missing", path);
  memcpy(&hlen, data, 8); /* (little-endian hosts) */
  at = 8 + (long)hlen;
  for (k = first; k <= last; k++) {
    const mlp_batch *b = pw_expected(r, k);
    CHECK(at + 12L * b->n <= len && !memcmp(data + at, r->net.probs, 12 * (size_t)b->n), "%s: batch %d is not this rank's", path, k);
    at += 12L * b->n;
    rows += b->n;
  }
  CHECK(at == len, "%s: %ld bytes, %ld expected (%d rows)", path, len, at, rows);
  free(data);
}
static int mode_pw(void) {
  const char *fmt = arg("fmt", "csv"), *interval = arg("interval", "batch"), *name = arg("name", "predictions");
  const char *dir = arg("dir", NULL), *ext = !strcmp(fmt, "safetensors") ? "safetensors" : fmt;
  int logs = iarg("logs", 0), resume = iarg("resume", 0), foreign = iarg("foreign", -1), every = strstr(name, "{rank}") != NULL;
  int st = !strcmp(fmt, "safetensors"), per_batch = strcmp(interval, "epoch") != 0, whole = strcmp(interval, "batch") != 0;
  int w, k, files = 0, n_expected = 0;
  char spec[600], where[300], base[600], path[700], cmd[400];
  const tr_prediction_writer_state *ps;
  run r;
  tr_err e;
  run_init(&r, 100, 40, 16, 0);
  r.t.model.predict = pw_predict;
  snprintf(where, sizeof where, "%s", dir ? dir : logs ? "pwlogs/lightning_logs/version_0/predictions" : "predictions");
  if (logs) {
    tr_config c = run_config(&r, resume ? 2 : 1);
    c.resume_from = resume ? "pwck/last.ckpt" : NULL;
    CHECK(hk_spec_apply(r.t.reg, "csv(save_dir=pwlogs); model_checkpoint(dirpath=pwck, save_last=true)") == HK_OK, "%s", hk_last_error(r.t.reg));
    CHECK(tr_fit(&r.t, &c) == TR_OK, "tr_fit: %s", tr_error(&r.t));
  }
  snprintf(spec, sizeof spec, "prediction_writer(format=%s, write_interval=%s, filename=%s%s%s)", fmt, interval, name,
           dir ? ", dirpath=" : "", dir ? dir : "");
  CHECK(hk_spec_apply(r.t.reg, spec) == HK_OK, "%s: %s", spec, hk_last_error(r.t.reg));
  if (foreign >= 0 && rank_ == 0) { /* someone else's file where rank `foreign` writes first */
    FILE *f;
    pw_base(base, sizeof base, where, name, foreign);
    if (st && per_batch) snprintf(path, sizeof path, "%s-batch_0.safetensors", base);
    else snprintf(path, sizeof path, "%s.%s", base, ext);
    snprintf(cmd, sizeof cmd, "mkdir -p %s", where);
    CHECK(system(cmd) == 0 && (f = fopen(path, "w")) && fputs("yours", f) >= 0 && fclose(f) == 0, "writing %s", path);
  }
#ifdef TRAIN_MPI
  MPI_Barrier(MPI_COMM_WORLD);
#endif
  e = tr_predict(&r.t, &r.vd, 0);
  printf("pw %s: rank %d of %d: %s%s%s\n", spec, rank_, world_, tr_err_name(e), e ? ": " : "", e ? tr_error(&r.t) : "");
  ps = tr_prediction_writer_get(r.t.reg, hk_spec_find(r.t.reg, "prediction_writer", 0));
  CHECK(ps && !strcmp(ps->dirpath, where), "the predictions' directory on rank %d: %s, expected %s (rank 0's)", rank_,
        ps ? ps->dirpath : "?", where);
#ifdef TRAIN_MPI
  MPI_Barrier(MPI_COMM_WORLD); /* every rank's files written */
#endif
  if (foreign >= 0) {
    CHECK(e == TR_ERR_HOOK && strstr(tr_error(&r.t), "' is there and was not written by this prediction_writer"), "%s: %s",
          tr_err_name(e), tr_error(&r.t));
    if (rank_ != foreign) { snprintf(cmd, sizeof cmd, "rank %d: ", foreign); CHECK(strstr(tr_error(&r.t), cmd), "%s", tr_error(&r.t)); }
    CHECK(ps->rows == 0 && ps->files == 0, "rank %d wrote %lld rows in %lld files before the run failed", rank_, (long long)ps->rows,
          (long long)ps->files);
  } else {
    CHECK(e == TR_OK, "tr_predict: %s", tr_error(&r.t));
    if (rank_ == 0 || every) { /* this rank's own files: its own predictions */
      pw_base(base, sizeof base, where, name, rank_);
      snprintf(path, sizeof path, "%s.%s", base, ext);
      if (!st) pw_check_text(&r, path, !strcmp(fmt, "jsonl"));
      if (st && whole) pw_check_st(&r, path, 0, pw_batches(rank_) - 1);
      for (k = 0; st && per_batch && k < pw_batches(rank_); k++) {
        snprintf(path, sizeof path, "%s-batch_%d.safetensors", base, k);
        pw_check_st(&r, path, k, k);
      }
    } else CHECK(ps->rows == 0 && ps->files == 0, "rank %d wrote %lld rows in %lld files", rank_, (long long)ps->rows, (long long)ps->files);
  }
  if (rank_ == 0) { /* the directory: exactly the files of the ranks that write (a record beside each once the run has an id) */
    DIR *dd = opendir(where);
    struct dirent *de;
    CHECK(dd, "%s is missing", where);
    while ((de = readdir(dd))) {
      int ok = 0;
      if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
      files++;
      for (w = 0; w < world_ && !ok; w++) {
        if (w > 0 && !every) break;
        pw_base(base, sizeof base, ".", name, w);
        if (foreign >= 0) { /* only the file put there */
          if (w != foreign) continue;
          snprintf(path, sizeof path, st && per_batch ? "%s-batch_0.safetensors" : "%s.%s", base + 2, ext);
          ok = !strcmp(de->d_name, path);
          continue;
        }
        snprintf(path, sizeof path, "%s.%s", base + 2, ext);
        ok = (!st || whole) && !strcmp(de->d_name, path);
        snprintf(path, sizeof path, ".%s.prediction_writer", base + 2);
        ok |= logs && !strcmp(de->d_name, path);
        for (k = 0; st && per_batch && k < pw_batches(w) && !ok; k++) {
          snprintf(path, sizeof path, "%s-batch_%d.safetensors", base + 2, k);
          ok = !strcmp(de->d_name, path);
        }
      }
      CHECK(ok, "%s/%s: a file no rank should have written there", where, de->d_name);
    }
    closedir(dd);
    for (w = 0; w < world_ && foreign < 0; w++)
      if (w == 0 || every) n_expected += (!st || whole) + (st && per_batch ? pw_batches(w) : 0) + (logs ? 1 : 0);
    if (foreign >= 0) n_expected = 1;
    CHECK(files == n_expected, "%s holds %d files, %d expected", where, files, n_expected);
    if (foreign >= 0) {
      long len;
      char *got;
      pw_base(base, sizeof base, where, name, foreign);
      snprintf(path, sizeof path, st && per_batch ? "%s-batch_0.safetensors" : "%s.%s", base, ext);
      got = pw_slurp(path, &len);
      CHECK(got && !strcmp(got, "yours"), "%s was replaced", path);
      free(got);
    }
    if (foreign >= 0) printf("pw: %d ranks, %s, %s, filename=%s, someone else's file at rank %d's path: every rank failed at "
                             "on_predict_start, %s holds that file alone, untouched\n", world_, fmt, interval, name, foreign, where);
    else printf("pw: %d ranks, %s, %s, filename=%s%s%s: %s holds the %d files expected, each rank's its own predictions\n", world_,
                fmt, interval, name, logs ? ", with the run directory" : "", resume ? ", resumed in a new process" : "", where, files);
  }
  run_free(&r);
  return 0;
}

/* ---- longdir: a run directory longer than a checkpoint path may be (1,100 bytes: five 220-character levels) still
   reaches every rank: each rank's prediction_writer (filename with {rank}) writes under rank 0's run directory */
static int mode_longdir(void) {
  char save[1200], spec[1500], want[1300];
  const tr_prediction_writer_state *ps;
  size_t n = (size_t)snprintf(save, sizeof save, "longdir");
  tr_config c;
  run r;
  int k;
  for (k = 0; k < 5; k++) n += (size_t)snprintf(save + n, sizeof save - n, "/%0220d", k);
  snprintf(want, sizeof want, "%s/lightning_logs/version_0/predictions", save);
  run_init(&r, 100, 40, 16, 0);
  r.t.model.predict = pw_predict;
  c = run_config(&r, 1);
  snprintf(spec, sizeof spec, "csv(save_dir=%s); prediction_writer(format=csv, filename=p-{rank})", save);
  CHECK(hk_spec_apply(r.t.reg, spec) == HK_OK, "%s", hk_last_error(r.t.reg));
  CHECK(tr_fit(&r.t, &c) == TR_OK, "tr_fit: %s", tr_error(&r.t));
  CHECK(tr_predict(&r.t, &r.vd, 0) == TR_OK, "tr_predict: %s", tr_error(&r.t));
  ps = tr_prediction_writer_get(r.t.reg, hk_spec_find(r.t.reg, "prediction_writer", 0));
  CHECK(ps && !strcmp(ps->dirpath, want), "rank %d's predictions went to %s, not under rank 0's run directory", rank_,
        ps ? ps->dirpath : "?");
  snprintf(spec, sizeof spec, "%s/p-%d.csv", want, rank_);
  CHECK(access(spec, F_OK) == 0, "rank %d wrote no %s", rank_, spec);
  if (rank_ == 0) printf("longdir: %d ranks: a run directory of %zu bytes reached every rank; each wrote its predictions there\n",
                         world_, strlen(want) - strlen("/predictions"));
  run_free(&r);
  return 0;
}

/* ---- zero (tr_desc.zero): what is refused, and saves that fail, on every rank alike, without a hang ----------
   (the plain build: zero without TRAIN_MPI is refused, and nothing else runs) */
#ifdef TRAIN_MPI
static hk_signal fail_save_on_last(hk_ctx *ctx, void *u) {
  (void)u;
  return ctx->rank == ctx->world_size - 1 ? hk_fail(ctx, "no state today on rank %d", ctx->rank) : HK_CONTINUE;
}
#endif
static int mode_zerobad(void) {
  spirals train;
  mlp net;
  tr_tensor views[MLP_NUM_TENSORS];
  tr_trainer t;
  tr_data td;
  tr_desc d;
#ifdef TRAIN_MPI
  tr_err e;
  hk_handle h;
#endif
  /* 6003 parameters: shards beyond MPI's eager size, so a shard sent that nobody takes would hang the test */
  CHECK(spirals_make(&train, 100, 3, 0.2f, 1) == 0 && mlp_init(&net, 2, 1000, 3, 64, 42) == 0, "setup");
  td = spirals_tr_data(&train, 16, 1);
  memset(&d, 0, sizeof d);
  d.model = mlp_tr_model(&net, views);
  d.zero = 1;
#ifndef TRAIN_MPI
  (void)td;
  expect(&t, tr_init(&t, &d), TR_ERR_INVALID, "tr_init: zero = 1 shards the optimizer state over MPI ranks, and this build has no TRAIN_MPI");
  printf("zerobad: without TRAIN_MPI: %s\n", tr_error(&t));
#else
  d.zero = 2;
  expect(&t, tr_init(&t, &d), TR_ERR_INVALID, "tr_init: zero is 2; it must be 0 (off) or 1");
  d.zero = 1;
  d.optim.kind = TR_OPTIM_SGD;
  expect(&t, tr_init(&t, &d), TR_ERR_INVALID, "plain SGD (momentum 0) has none");
  d.optim.kind = TR_OPTIM_ADAMW;
  d.model.on_device = 1; /* (refused before anything looks for a GPU) */
  expect(&t, tr_init(&t, &d), TR_ERR_INVALID, "an on_device model's state lives on the GPU and is not sharded");
  d.model.on_device = 0;
  d.zero = rank_ == 1 ? 0 : 1;
  expect(&t, tr_init(&t, &d), TR_ERR_INVALID, "zero (tr_desc.zero: the optimizer state sharded) (rank 0: 1, rank 1: 0");
  d.zero = 1;
  CHECK(tr_init(&t, &d) == TR_OK, "tr_init: %s", tr_error(&t));
  CHECK(hk_spec_apply(t.reg, "lr_finder(num_training_steps=20)") == HK_OK, "%s", hk_last_error(t.reg));
  e = tr_fit(&t, &(tr_config){ .train = &td, .max_epochs = 1 });
  expect(&t, e, TR_ERR_HOOK, "does not work with tr_desc.zero");
  tr_free(&t);
  CHECK(tr_init(&t, &d) == TR_OK, "tr_init: %s", tr_error(&t));
  CHECK(tr_fit(&t, &(tr_config){ .train = &td, .max_epochs = 1 }) == TR_OK, "tr_fit: %s", tr_error(&t));
  /* rank 0 cannot write: every rank's tr_save fails, the shards sent all the same (no rank waits) */
  e = tr_save(&t, "/nonexistent/dir/zero.ckpt");
  expect(&t, e, TR_ERR_IO, rank_ == 0 ? "/nonexistent/dir/zero.ckpt" : "rank 0: ");
  /* the last rank's on_save_checkpoint fails: nobody sends, nobody waits, nothing is written */
  CHECK(hk_on(t.reg, HK_ON_SAVE_CHECKPOINT, fail_save_on_last, NULL, NULL, &h) == HK_OK, "hook");
  e = tr_save(&t, "zerobad.ckpt");
  expect(&t, e, TR_ERR_HOOK, "no state today on rank");
  { FILE *f = fopen("zerobad.ckpt", "rb"); CHECK(!f, "a failed save left zerobad.ckpt"); }
  hk_off(t.reg, h);
  CHECK(tr_save(&t, "zerobad.ckpt") == TR_OK, "tr_save: %s", tr_error(&t)); /* and the next save works */
  if (rank_ == 0) { CHECK(remove("zerobad.ckpt") == 0, "zerobad.ckpt"); printf("zerobad: %d ranks: refusals, lr_finder and failed saves: every rank the same\n", world_); }
  tr_free(&t);
#endif
  mlp_free(&net);
  spirals_free(&train);
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  int rc;
  argc_ = argc;
  argv_ = argv;
  if (!strcmp(mode, "diff")) return mode_diff();
#ifdef TRAIN_MPI
  MPI_Init(&argc, &argv); /* the program's own MPI_Init: tr_init must not call it again */
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_);
#endif
  if (!strcmp(mode, "fit")) rc = mode_fit();
  else if (!strcmp(mode, "mismatch")) rc = mode_mismatch();
  else if (!strcmp(mode, "zerobad")) rc = mode_zerobad();
  else if (!strcmp(mode, "onerank")) rc = mode_onerank();
  else if (!strcmp(mode, "pw")) rc = mode_pw();
  else if (!strcmp(mode, "longdir")) rc = mode_longdir();
  else if (mode[0]) rc = mode_scenario(mode);
  else { fprintf(stderr, "usage: see tests/test_mpi.c\n"); rc = 2; }
#ifdef TRAIN_MPI
  MPI_Finalize();
#endif
  return rc;
}
