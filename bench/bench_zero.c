/* bench_zero.c - ZeRO-1 (tr_desc.zero) against the unsharded run, side by side in one run.

   Run under mpirun (bench/mpi.mk: make bench-mpi-zero, with 2 and 3 ranks). A model of N parameters
   (argv[1], default 4M: 16 MiB per array) whose forward and backward cost one pass over the gradients
   (backward adds a fixed pattern), so that a step is the trainer's own work: zero_grad, the gradient
   point (the rank-order sum over the ranks, the averaging), AdamW's update and, with zero, the
   parameter exchange. Trained twice in the same processes with the same start: without zero, then with
   it (fresh trainers). Per rank it prints, each as "unsharded -> zero (ratio)":
     - the optimizer state this rank holds (tr_optim_state_bytes: AdamW's m and v, or its shard of
       them), per parameter, and the whole training state (parameters + gradients + that);
     - the median time of a training step (on_train_batch_end to the next), and of the optimizer phase
       alone (on_before_optimizer_step to on_after_optimizer_step: the agreement vote, the update and,
       with zero, the exchange);
     - where a step's time goes, a line below: zero_grad + forward + backward (on_train_batch_start to
       on_after_backward), the gradient point + norm (to on_before_optimizer_step: the vote, the
       rank-order sum, the averaging, the norm for clipping), the optimizer phase, the rest; and the
       machine's rates measured in the same run: a copy on one rank, MPI_Allgather of the shards and
       MPI_Allreduce of the gradients (GB/s of floats that arrive per rank), so that the ratio can be
       read against what the bytes allow (zero saves (W-1)/W of AdamW's 32 bytes per parameter with
       clipping folded in, and adds the exchange's (W-1)/W x 4 bytes and the clip scale of the rest
       of the gradient, 8 bytes x (W-1)/W);
     - what those bytes allow at those rates, the step's time and the ratio the bytes predict, beside the
       ratio measured: per parameter, memory passes of backward 8 bytes, zero_grad 4, the averaging with
       the norm 8, AdamW with the clip folded in 32 (with zero: 32/W, and 8 (W-1)/W for the clip scale of
       the gradient this rank does not own), at twice the copy's rate (a copy reads what it writes);
       the all-reduce's 4 bytes arriving and, with zero, the all-gather's 4 (W-1)/W, at their rates.
   The largest value over the ranks is printed. Medians over ROUNDS fits of STEPS steps of each kind,
   the kinds taken in turns (a load that drifts meets both alike): the machine is shared, medians ignore
   the steps another process disturbed. The parameters of every pair of fits are compared (zero must not
   change a bit). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#define TRAIN_MPI
#include "train.h"
#include <time.h>

#define STEPS 100 /* per fit */
#define ROUNDS 3  /* unsharded, zero, unsharded, zero, ...: a load that drifts meets both alike */
#define BATCH 16

static double now(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + 1e-9 * ts.tv_nsec; }
static int by_value(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
static double median(double *x, int n) { qsort(x, (size_t)n, sizeof *x, by_value); return n ? x[n / 2] : 0; }

/* The model: n parameters; backward adds a pattern that depends on the rank and the step. */
typedef struct model { float *params, *grads; size_t n; int rank, calls; } model;
static int forward(void *u, void *batch, int training, double *loss) { (void)u; (void)batch; (void)training; *loss = 1; return 0; }
static int backward(void *u, void *batch) {
  model *m = (model *)u;
  size_t i;
  float k = 1e-3f * (float)(1 + m->rank) * (float)(1 + m->calls++ % 7);
  (void)batch;
  for (i = 0; i < m->n; i++) m->grads[i] += k * (float)((int)(i & 1023) - 512); /* (int: in size_t the lower half wrapped to 1.8e19, and clipping then made the upper half denormal) */
  return 0;
}
static int64_t count(void *u) { (void)u; return 1 << 20; }
static int get(void *u, int64_t i, void **batch) { (void)i; *batch = u; return 0; }

typedef struct probe {
  double last_end, opt_start, batch_start, back_end;
  int steps, opts, first;   /* first: this fit's first step time goes here */
  double step[STEPS * ROUNDS], opt[STEPS * ROUNDS], back[STEPS * ROUNDS], point[STEPS * ROUNDS];
} probe;

static hk_signal step_end(hk_ctx *ctx, void *u) {
  probe *p = (probe *)u;
  double t = now();
  (void)ctx;
  if (p->last_end > 0 && p->steps < p->first + STEPS) p->step[p->steps++] = t - p->last_end;
  p->last_end = t;
  return HK_CONTINUE;
}
static hk_signal batch_start(hk_ctx *ctx, void *u) { (void)ctx; ((probe *)u)->batch_start = now(); return HK_CONTINUE; }
static hk_signal back_end(hk_ctx *ctx, void *u) { (void)ctx; ((probe *)u)->back_end = now(); return HK_CONTINUE; }
static hk_signal opt_start(hk_ctx *ctx, void *u) { (void)ctx; ((probe *)u)->opt_start = now(); return HK_CONTINUE; }
static hk_signal opt_end(hk_ctx *ctx, void *u) {
  probe *p = (probe *)u;
  (void)ctx;
  if (p->opts < p->first + STEPS) {
    p->back[p->opts] = p->back_end - p->batch_start;
    p->point[p->opts] = p->opt_start - p->back_end;
    p->opt[p->opts++] = now() - p->opt_start;
  }
  return HK_CONTINUE;
}

typedef struct result { double state; uint64_t hash; } result;

static result fit(model *m, int zero, probe *pr) {
  probe *p = pr;
  tr_trainer t;
  tr_data d;
  result r;
  const unsigned char *b = (const unsigned char *)m->params;
  size_t i;
  p->last_end = 0;
  p->first = p->steps;
  p->opts = p->steps;
  for (i = 0; i < m->n; i++) m->params[i] = 0.01f * (float)((i * 7919) % 1000) - 5; /* the same start for both fits */
  m->calls = 0;
  memset(&d, 0, sizeof d);
  d.user = m; d.count = count; d.get = get;
  if (tr_init(&t, &(tr_desc){ .model = { .params = m->params, .grads = m->grads, .n_params = m->n, .user = m,
                                         .forward = forward, .backward = backward },
                              .optim = { .lr = 1e-3, .weight_decay = 0.01 }, .zero = zero })) {
    fprintf(stderr, "%s\n", tr_error(&t));
    exit(1);
  }
  hk_on(t.reg, HK_ON_TRAIN_BATCH_END, step_end, p, NULL, NULL);
  hk_on(t.reg, HK_ON_TRAIN_BATCH_START, batch_start, p, &(hk_opts){ .tier = HK_TIER_CALLBACK, .order = -1000 }, NULL);
  hk_on(t.reg, HK_ON_AFTER_BACKWARD, back_end, p, &(hk_opts){ .tier = HK_TIER_CALLBACK, .order = -1000 }, NULL);
  hk_on(t.reg, HK_ON_BEFORE_OPTIMIZER_STEP, opt_start, p, &(hk_opts){ .tier = HK_TIER_STRATEGY, .order = 1000 }, NULL);
  hk_on(t.reg, HK_ON_AFTER_OPTIMIZER_STEP, opt_end, p, &(hk_opts){ .tier = HK_TIER_CALLBACK, .order = -1000 }, NULL);
  if (tr_fit(&t, &(tr_config){ .train = &d, .max_steps = STEPS + 1, .gradient_clip_val = 1.0 })) {
    fprintf(stderr, "%s\n", tr_error(&t));
    exit(1);
  }
  r.state = (double)tr_optim_state_bytes(&t);
  r.hash = 1469598103934665603ull;
  for (i = 0; i < m->n * sizeof(float); i++) { r.hash ^= b[i]; r.hash *= 1099511628211ull; }
  tr_free(&t);
  return r;
}

/* The machine's rates, in this run: a copy of a shard on one rank (the others wait), then every rank in
   MPI_Allgather of the shards (what zero's exchange does) and MPI_Allreduce of the gradients (what the
   gradient point does, for 2 ranks): GB/s of floats arriving per rank, medians of 20. */
static void rates(model *m, int world, double out[3]) {
  size_t per = (m->n / 16 + (size_t)world - 1) / (size_t)world * 16, k;
  float *a = (float *)malloc(per * sizeof(float)), *all = (float *)malloc(per * (size_t)(world + 1) * sizeof(float)); /* (+1: the copy's target at 1 rank) */
  double t[3][20], a0;
  int i;
  if (!a || !all) exit(1);
  for (k = 0; k < per; k++) a[k] = (float)k;
  for (k = 0; k < per * (size_t)world; k++) all[k] = 0;
  for (i = 0; i < 20; i++) {
    MPI_Barrier(MPI_COMM_WORLD);
    a0 = now();
    if (m->rank == 0) memcpy(all + per, a, per * sizeof(float));
    t[0][i] = now() - a0;
    MPI_Barrier(MPI_COMM_WORLD);
    a0 = now();
    MPI_Allgather(a, (int)per, MPI_FLOAT, all, (int)per, MPI_FLOAT, MPI_COMM_WORLD);
    t[1][i] = now() - a0;
    MPI_Barrier(MPI_COMM_WORLD);
    a0 = now();
    MPI_Allreduce(MPI_IN_PLACE, m->grads, (int)m->n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    t[2][i] = now() - a0;
  }
  out[0] = 4.0 * (double)per / median(t[0], 20) / 1e9;
  out[1] = 4.0 * (double)per * (world - 1) / median(t[1], 20) / 1e9;
  out[2] = 4.0 * (double)m->n / median(t[2], 20) / 1e9;
  free(a);
  free(all);
}

int main(int argc, char **argv) {
  static probe pu, pz;
  model m;
  result u, z;
  double n, most[12], mine[12], bw[3];
  int world, k;
  memset(&m, 0, sizeof m);
  m.n = argc > 1 ? (size_t)atol(argv[1]) : (size_t)4 << 20;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &m.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  m.params = (float *)malloc(m.n * sizeof(float));
  m.grads = (float *)calloc(m.n, sizeof(float));
  if (!m.params || !m.grads) return 1;
  n = (double)m.n;
  for (k = 0; k < ROUNDS; k++) {
    u = fit(&m, 0, &pu);
    z = fit(&m, 1, &pz);
    if (u.hash != z.hash) break;
  }
  mine[0] = u.state; mine[1] = median(pu.step, pu.steps); mine[2] = median(pu.opt, pu.opts);
  mine[3] = z.state; mine[4] = median(pz.step, pz.steps); mine[5] = median(pz.opt, pz.opts);
  mine[6] = median(pu.back, pu.opts); mine[7] = median(pz.back, pz.opts);
  mine[8] = median(pu.point, pu.opts); mine[9] = median(pz.point, pz.opts);
  rates(&m, world, bw);
  mine[10] = mine[11] = 0;
  MPI_Reduce(mine, most, 12, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (m.rank == 0)
    printf("%5d  %9.0f   %4.2f -> %4.2f B (%.3f)   %5.2f -> %5.2f B (%.3f)   %7.2f -> %7.2f ms (%.3f)   %7.2f -> %7.2f ms (%.3f)   %s\n",
           world, n, most[0] / n, most[3] / n, most[3] / most[0], (8 * n + most[0]) / n, (8 * n + most[3]) / n,
           (8 * n + most[3]) / (8 * n + most[0]), 1e3 * most[1], 1e3 * most[4], most[4] / most[1],
           1e3 * most[2], 1e3 * most[5], most[5] / most[2], u.hash == z.hash ? "same bits" : "DIFFERENT BITS");
  if (m.rank == 0)
    printf("       where a step goes, ms, unsharded -> zero: zero_grad+forward+backward %.2f -> %.2f, gradient point+norm "
           "%.2f -> %.2f, optimizer %.2f -> %.2f, the rest %.2f -> %.2f; rates: copy %.1f GB/s, all-gather %.1f GB/s, "
           "all-reduce %.1f GB/s\n", 1e3 * most[6], 1e3 * most[7], 1e3 * most[8], 1e3 * most[9], 1e3 * most[2], 1e3 * most[5],
           1e3 * (most[1] - most[6] - most[8] - most[2]), 1e3 * (most[4] - most[7] - most[9] - most[5]), bw[0], bw[1], bw[2]);
  if (m.rank == 0) { /* what the bytes allow at the rates just measured (see the note at the top) */
    double w = (double)world, mem = 2e9 * bw[0]; /* the copy's rate counts the bytes written: it moves twice that */
    double bu = 8 + 4 + 8 + 32, bz = 8 + 4 + 8 + 32 / w + 8 * (w - 1) / w;
    double tu = n * bu / mem + 4 * n / (1e9 * bw[2]), tz = n * bz / mem + 4 * n / (1e9 * bw[2]) + 4 * n * (w - 1) / w / (1e9 * bw[1]);
    printf("       what the bytes allow at these rates: memory %.0f -> %.0f B/param, all-reduce 4 B, all-gather 0 -> %.1f B: "
           "%.2f -> %.2f ms (%.3f); measured %.3f\n", bu, bz, 4 * (w - 1) / w, 1e3 * tu, 1e3 * tz, tz / tu, most[4] / most[1]);
  }
  free(m.params);
  free(m.grads);
  MPI_Finalize();
  return u.hash == z.hash ? 0 : 1;
}
