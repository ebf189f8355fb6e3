/* bench_mpi.c - the cost of train.h's MPI strategy (TRAIN_MPI), measured side by side in one run.

   Run under mpirun (bench/mpi.mk runs it with 1 and 2 ranks). Trains the spirals MLP with a wide
   hidden layer (argv[1], default 4096: 24,579 floats = 96 KiB of gradients) with batches of 16 per rank:
     1. time per training step: tr_fit alone, the median step (on_train_batch_end to the next)
     2. the gradient point through train.h against a bare MPI_Allreduce of the same bytes, step by
        step in the same run: a hook at on_after_backward (the last thing before the point) first
        aligns the ranks (MPI_Barrier and one untimed all-reduce), times a bare MPI_Allreduce of the
        gradient buffer (n floats; the same memory, so the same cache state as train.h's own) and a
        bare "all-reduce + multiply by 1/W with tr_scale" (what a hand-written data-parallel loop does, with
        train.h's own scaling kernel so that only the framework's extra work differs), then
        notes the clock; a hook at on_before_optimizer_step (the first thing after) reads it. Between
        the two: train.h's agreement vote, its gradient all-reduce and the averaging.
   Medians over all steps: the machine is shared, medians ignore the steps another process disturbed.
   train.h's share is the median over steps of (gradient point - bare all-reduce + average) of the same
   step, relative to the bare all-reduce + average: the extra work of the framework (its agreement
   vote and its dispatch) over what a hand-written data-parallel loop does with the same bytes.
   A collective inside hooks is safe here only because every rank runs these hooks at every step. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#define TRAIN_MPI
#include "train.h"
#include "examples/mlp.h"
#include <time.h>

#define STEPS 1000
#define BATCH 16

static double now(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + 1e-9 * ts.tv_nsec; }
static int by_value(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
static double median(double *x, int n) { qsort(x, (size_t)n, sizeof *x, by_value); return n ? x[n / 2] : 0; }

typedef struct probe {
  float *buf;        /* the model's gradient buffer: the bare collectives run on the same memory */
  size_t n;
  int world;
  double mark, last_end;
  int k, steps;
  double bare[STEPS], bare_avg[STEPS], through[STEPS], step[STEPS], extra[STEPS];
} probe;

static hk_signal before_point(hk_ctx *ctx, void *u) {
  probe *p = (probe *)u;
  double t0, t1, t2;
  float scale = 1.0f / (float)p->world;
  (void)ctx;
  if (p->k >= STEPS) return HK_CONTINUE;
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, p->buf, (int)p->n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); /* untimed: absorbs the skew */
  t0 = now();
  MPI_Allreduce(MPI_IN_PLACE, p->buf, (int)p->n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  t1 = now();
  MPI_Allreduce(MPI_IN_PLACE, p->buf, (int)p->n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  tr_scale(p->buf, p->n, scale, 1); /* the averaging train.h does (its own kernel: the same work) */
  t2 = now();
  p->bare[p->k] = t1 - t0;
  p->bare_avg[p->k] = t2 - t1;
  p->mark = now();
  return HK_CONTINUE;
}
static hk_signal after_point(hk_ctx *ctx, void *u) {
  probe *p = (probe *)u;
  (void)ctx;
  if (p->k < STEPS) p->through[p->k++] = now() - p->mark;
  return HK_CONTINUE;
}
static hk_signal step_end(hk_ctx *ctx, void *u) {
  probe *p = (probe *)u;
  double t = now();
  (void)ctx;
  if (p->last_end > 0 && p->steps < STEPS) p->step[p->steps++] = t - p->last_end;
  p->last_end = t;
  return HK_CONTINUE;
}

/* One fit of STEPS steps; with probes = 1 the point is timed, else the step. */
static void fit(probe *p, int hidden, int probes) {
  spirals train;
  mlp net;
  tr_tensor views[MLP_NUM_TENSORS];
  tr_trainer t;
  tr_data d;
  if (spirals_make(&train, 4000, 3, 0.2f, 1) || mlp_init(&net, 2, hidden, 3, BATCH, 42)) exit(1);
  d = spirals_tr_data(&train, BATCH, 1);
  if (tr_init(&t, &(tr_desc){ .model = mlp_tr_model(&net, views), .optim = { .lr = 1e-3 } })) exit(1);
  p->n = net.num_params;
  p->buf = net.grads;
  p->world = t.ctx.world_size;
  if (probes) {
    hk_on(t.reg, HK_ON_AFTER_BACKWARD, before_point, p, &(hk_opts){ .tier = HK_TIER_STRATEGY, .order = 1000 }, NULL);
    hk_on(t.reg, HK_ON_BEFORE_OPTIMIZER_STEP, after_point, p, &(hk_opts){ .tier = HK_TIER_CALLBACK, .order = -1000 }, NULL);
  } else hk_on(t.reg, HK_ON_TRAIN_BATCH_END, step_end, p, NULL, NULL);
  if (tr_fit(&t, &(tr_config){ .train = &d, .max_steps = STEPS + 1 })) { fprintf(stderr, "%s\n", tr_error(&t)); exit(1); }
  tr_free(&t);
  mlp_free(&net);
  spirals_free(&train);
}

int main(int argc, char **argv) {
  static probe p;
  int hidden = argc > 1 ? atoi(argv[1]) : 4096, rank, world;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  fit(&p, hidden, 0);
  fit(&p, hidden, 1);
  if (rank == 0) {
    double step, through, bare, bare_avg, extra;
    int k;
    for (k = 0; k < p.k; k++) p.extra[k] = p.through[k] - p.bare_avg[k]; /* paired: the same step's two timings */
    extra = median(p.extra, p.k);
    step = median(p.step, p.steps); through = median(p.through, p.k); bare = median(p.bare, p.k); bare_avg = median(p.bare_avg, p.k);
    if (world == 1)
      printf("%5d  %9.1f us   %11.2f us  (no communication: one process is the plain trainer)\n", world, 1e6 * step, 1e6 * through);
    else
      printf("%5d  %9.1f us   %11.2f us   %12.2f us   %15.2f us   %+8.2f us = %+5.1f%%\n",
             world, 1e6 * step, 1e6 * through, 1e6 * bare, 1e6 * bare_avg, 1e6 * extra, 100 * extra / bare_avg);
  }
  MPI_Finalize();
  return 0;
}
