/* tests/test_slurm.c - one 2-rank training, preempted under a real Slurm cluster (tests/slurm/run.sh), in two
   shapes: a loop of its own through the run layer with its own MPI_Allreduce of gradients in rank order
   (own), and tr_fit with TRAIN_MPI (fit). Built with mpicc -DTRAIN_MPI; run with mpirun -np 2:
     test_slurm own|fit steps=N ckpt=PATH out=PATH [mark=PREFIX signals=K] [resume=PATH]
   (resume: a %d in PATH is the rank's number: each rank resumes its own file)
   ckpt is save_to (the preemption's checkpoint; the requeued job resumes from it by itself); out gets the
   final parameters (rank 0, a finished run only). mark: once (R + 1) * steps / 4 steps are done (R:
   SLURM_RESTART_COUNT), rank 0 writes PREFIX.R and the other ranks PREFIX.pid.RANK (their process id: a
   signal to one rank); in the first K runs (R < K) every rank then waits there, napping, until a signal has
   reached any rank (at most 30 s), so that the test's signal lands mid-run however slow the machine. Exit: 0 finished, 130 interrupted (preempted), 1 otherwise. */
#define _POSIX_C_SOURCE 200809L
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#define TRAIN_MPI
#include "train.h"
#include "../examples/mlp.h"
#include <stdio.h>
#include <time.h>
#include <unistd.h>

enum { D = 8, N = 512, B = 16 };
static float w[D + 1], g[D + 1], m[D + 1], v[D + 1], X[N][D + 1], Y[N];
static const char *mark;
static long mark_at, signals;
static int rank, world;

/* ---- pacing: the marker, then a wait for the test's signal ---- */
static void pace(int64_t step) {
  char path[512];
  const char *r = getenv("SLURM_RESTART_COUNT");
  FILE *f;
  if (!mark || step != mark_at) return;
  if (rank) snprintf(path, sizeof path, "%s.pid.%d", mark, rank);
  else snprintf(path, sizeof path, "%s.%s", mark, r ? r : "0");
  if ((f = fopen(path, "w"))) fprintf(f, "%ld\n", (long)getpid()), fclose(f);
  if ((r ? atol(r) : 0) >= signals) return;
  for (int i = 0; i < 3000; i++) { /* every rank alike: one all-reduce a nap */
    int mine = hk_stop_requested() + tr_preempt_requested(), any = 0;
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any) return;
    nanosleep(&(struct timespec){ 0, 10000000 }, NULL);
  }
}
static hk_signal pace_hook(hk_ctx *ctx, void *u) { (void)u; pace(ctx->global_step); return HK_CONTINUE; }

static int write_out(const char *out, const float *p, size_t n) {
  FILE *f = fopen(out, "wb");
  int bad = !f || fwrite(p, sizeof *p, n, f) != n;
  if (f) bad |= fclose(f) != 0;
  return bad;
}

/* How the run ended, on stdout and appended to OUT.end: mpirun may be gone (Slurm ends it at a requeue or a
   scancel) before it passes the line on. */
static void say_end(const char *out, const char *mode, int64_t step, const char *how) {
  char path[512];
  FILE *f;
  printf("%s: ended at step %lld: %s\n", mode, (long long)step, how);
  fflush(stdout);
  snprintf(path, sizeof path, "%s.end", out);
  if ((f = fopen(path, "a"))) fprintf(f, "%s: ended at step %lld: %s\n", mode, (long long)step, how), fclose(f);
}

/* ---- the loop of its own: logistic regression, AdamW, rank r of W takes batches s*W + r ---- */
static void grad(int lo) {
  memset(g, 0, sizeof g);
  for (int i = lo; i < lo + B; i++) {
    float z = 0;
    for (int j = 0; j <= D; j++) z += w[j] * X[i][j];
    float e = (1 / (1 + expf(-z)) - Y[i]) / B;
    for (int j = 0; j <= D; j++) g[j] += e * X[i][j];
  }
}
static void adamw(float lr, int64_t t) {
  for (int j = 0; j <= D; j++) {
    w[j] -= lr * 0.01f * w[j];
    m[j] = 0.9f * m[j] + 0.1f * g[j];
    v[j] = 0.999f * v[j] + 0.001f * g[j] * g[j];
    w[j] -= lr * (m[j] / (1 - powf(0.9f, (float)t))) / (sqrtf(v[j] / (1 - powf(0.999f, (float)t))) + 1e-8f);
  }
}
static int save_model(void *u, FILE *f) { (void)u; return fwrite(w, sizeof w, 1, f) + fwrite(m, sizeof m, 1, f) + fwrite(v, sizeof v, 1, f) != 3; }
static int load_model(void *u, FILE *f) { (void)u; return fread(w, sizeof w, 1, f) + fread(m, sizeof m, 1, f) + fread(v, sizeof v, 1, f) != 3; }
/* The run's agreement (tr_run_desc.agree): every rank's TR_STOP_* bits OR'ed, one small all-reduce a step. */
static int64_t agree(void *u, int64_t stops) {
  int64_t all = stops;
  (void)u;
  MPI_Allreduce(&stops, &all, 1, MPI_INT64_T, MPI_BOR, MPI_COMM_WORLD);
  return all;
}

static int own_loop(long steps, const char *ckpt, const char *out, const char *resume) {
  float all[64][D + 1];
  hk_registry *reg = hk_create(NULL);
  if (world > 64) return 1;
  if (tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO, .max_steps = steps, .log_every_n_steps = -1, .optimizer = "AdamW",
                                        .save_model = save_model, .load_model = load_model, .save_to = ckpt,
                                        .preempt = { .requeue = TR_YES }, .agree = agree }))
    return fprintf(stderr, "%s\n", hk_last_error(reg)), 1;
  hk_tensor pv = { "w", w, D + 1, 0 }, gv = { "w", g, D + 1, 0 };
  hk_ctx ctx = { .params = &pv, .grads = &gv, .n_tensors = 1, .rank = rank, .world_size = world };
  hk_flow flow = { 0 };
  unsigned next = tr_run_start(reg, &ctx, resume) ? TR_RUN_STOP : 0;
  while (!(next & TR_RUN_STOP) && ctx.global_step < steps) {
    int b = (int)((ctx.global_step * world + rank) % (N / B));
    ctx.batch_idx = ctx.global_step;
    tr_run_lr(reg, &ctx, 0.02);
    HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_START, &ctx, &flow);
    grad(b * B);
    MPI_Allgather(g, D + 1, MPI_FLOAT, all, D + 1, MPI_FLOAT, MPI_COMM_WORLD);
    for (int j = 0; j <= D; j++) { /* the mean in rank order: the same bits on every rank */
      float s = all[0][j];
      for (int r = 1; r < world; r++) s += all[r][j];
      g[j] = s / (float)world;
    }
    adamw((float)ctx.lr, ++ctx.global_step);
    pace(ctx.global_step);
    HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_END, &ctx, &flow);
    next = tr_run_batch_end(reg, &ctx, &flow);
  }
  tr_err e = tr_run_finish(reg, &ctx, TR_OK);
  if (rank == 0) say_end(out, "own", ctx.global_step, e ? tr_run_error(reg) : "ok");
  if (!e && rank == 0 && write_out(out, w, D + 1)) e = TR_ERR_IO;
  hk_ctx_free(&ctx);
  hk_destroy(reg);
  return e == TR_ERR_INTERRUPTED ? 130 : e ? 1 : 0;
}

/* ---- tr_fit: the MLP of examples/mlp.h on spirals ---- */
static int fit(long steps, const char *ckpt, const char *out, const char *resume) {
  spirals data;
  mlp net;
  tr_tensor views[MLP_NUM_TENSORS];
  tr_trainer t;
  tr_err e;
  if (spirals_make(&data, 64, 3, 0.2f, 1) || mlp_init(&net, 2, 16, 3, B, 42)) return 1;
  tr_data train = spirals_tr_data(&data, B, 1);
  if ((e = tr_init(&t, &(tr_desc){ .model = mlp_tr_model(&net, views), .optim = { .lr = 1e-2 }, .seed = 7 })))
    return fprintf(stderr, "tr_init: %s\n", tr_error(&t)), 1;
  if (mark) hk_on(t.reg, HK_ON_TRAIN_BATCH_END, pace_hook, NULL, &(hk_opts){ .name = "pace" }, NULL);
  e = tr_fit(&t, &(tr_config){ .train = &train, .max_steps = steps, .num_sanity_val_steps = -1, .log_every_n_steps = -1,
                               .save_to = ckpt, .resume_from = resume, .preempt = { .requeue = TR_YES } });
  if (rank == 0) say_end(out, "fit", t.global_step, e ? tr_error(&t) : "ok");
  if (!e && rank == 0 && write_out(out, net.params, net.num_params)) e = TR_ERR_IO;
  tr_free(&t);
  return e == TR_ERR_INTERRUPTED ? 130 : e ? 1 : 0;
}

int main(int argc, char **argv) {
  long steps = 400;
  const char *ckpt = NULL, *out = "out.bin", *resume = NULL;
  int rc;
  unsigned seed = 7;
  if (argc < 2 || (strcmp(argv[1], "own") && strcmp(argv[1], "fit")))
    return fprintf(stderr, "usage: test_slurm own|fit steps=N ckpt=PATH out=PATH [mark=PREFIX] [resume=PATH]\n"), 1;
  for (int i = 2; i < argc; i++) {
    if (!strncmp(argv[i], "steps=", 6)) steps = atol(argv[i] + 6);
    else if (!strncmp(argv[i], "ckpt=", 5)) ckpt = argv[i] + 5;
    else if (!strncmp(argv[i], "out=", 4)) out = argv[i] + 4;
    else if (!strncmp(argv[i], "mark=", 5)) mark = argv[i] + 5;
    else if (!strncmp(argv[i], "signals=", 8)) signals = atol(argv[i] + 8);
    else if (!strncmp(argv[i], "resume=", 7)) resume = argv[i] + 7;
    else return fprintf(stderr, "test_slurm: unknown argument '%s'\n", argv[i]), 1;
  }
  const char *r = getenv("SLURM_RESTART_COUNT");
  mark_at = (r ? atol(r) + 1 : 1) * steps / 4;
  for (int i = 0; i < N; i++) { /* two overlapping clouds */
    for (int j = 0; j < D; j++, seed = seed * 1664525u + 1013904223u)
      X[i][j] = (float)(seed >> 9) / 8388608.0f - 1 + (i % 2 ? 0.3f : -0.3f) * (j < 3);
    X[i][D] = 1, Y[i] = (float)(i % 2);
  }
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  char mine[512]; /* resume=PATH with a %d: each rank its own file (the rank's number in its place) */
  if (resume && strstr(resume, "%d")) snprintf(mine, sizeof mine, resume, rank), resume = mine;
  rc = !strcmp(argv[1], "own") ? own_loop(steps, ckpt, out, resume) : fit(steps, ckpt, out, resume);
  MPI_Finalize();
  return rc;
}
