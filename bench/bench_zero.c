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
       with zero, the exchange).
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
  for (i = 0; i < m->n; i++) m->grads[i] += k * (float)((i & 1023) - 512);
  return 0;
}
static int64_t count(void *u) { (void)u; return 1 << 20; }
static int get(void *u, int64_t i, void **batch) { (void)i; *batch = u; return 0; }

typedef struct probe {
  double last_end, opt_start;
  int steps, opts, first;   /* first: this fit's first step time goes here */
  double step[STEPS * ROUNDS], opt[STEPS * ROUNDS];
} probe;

static hk_signal step_end(hk_ctx *ctx, void *u) {
  probe *p = (probe *)u;
  double t = now();
  (void)ctx;
  if (p->last_end > 0 && p->steps < p->first + STEPS) p->step[p->steps++] = t - p->last_end;
  p->last_end = t;
  return HK_CONTINUE;
}
static hk_signal opt_start(hk_ctx *ctx, void *u) { (void)ctx; ((probe *)u)->opt_start = now(); return HK_CONTINUE; }
static hk_signal opt_end(hk_ctx *ctx, void *u) {
  probe *p = (probe *)u;
  (void)ctx;
  if (p->opts < p->first + STEPS) p->opt[p->opts++] = now() - p->opt_start;
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

int main(int argc, char **argv) {
  static probe pu, pz;
  model m;
  result u, z;
  double n, most[6], mine[6];
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
  MPI_Reduce(mine, most, 6, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (m.rank == 0)
    printf("%5d  %9.0f   %4.2f -> %4.2f B (%.3f)   %5.2f -> %5.2f B (%.3f)   %7.2f -> %7.2f ms (%.3f)   %7.2f -> %7.2f ms (%.3f)   %s\n",
           world, n, most[0] / n, most[3] / n, most[3] / most[0], (8 * n + most[0]) / n, (8 * n + most[3]) / n,
           (8 * n + most[3]) / (8 * n + most[0]), 1e3 * most[1], 1e3 * most[4], most[4] / most[1],
           1e3 * most[2], 1e3 * most[5], most[5] / most[2], u.hash == z.hash ? "same bits" : "DIFFERENT BITS");
  free(m.params);
  free(m.grads);
  MPI_Finalize();
  return u.hash == z.hash ? 0 : 1;
}
