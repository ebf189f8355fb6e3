/* bench_metrics.c - what one logged value costs as a record grows, in instructions (callgrind).

   tr_fit trains a model of 8 parameters (its forward and backward a few instructions) with a hook that
   publishes N metrics at every on_train_batch_end (hk_metric_set), a log record every step, and every
   file logger writing it (csv, jsonl, tensorboard, plot), for N = 10, 100, 1,000 and 4,000. The cost of
   one value is (c(N) - c(0)) / N, where c(N) is the instructions of one step: (I(long) - I(short)) /
   steps, so that every one-time cost (the columns' first appearance, files made) cancels. A value costs
   the run layer's collection (hk_metric_get, tr_log_set) and each logger's write; none of that may grow
   with the record's size. Goal: a value at 4,000 metrics costs at most 1.25x a value at 10.

   Usage: bench_metrics                    (make bench-metrics: the table, about 40 s under valgrind)
          bench_metrics run N STEPS        (one run; what the driver starts under callgrind) */
#define _POSIX_C_SOURCE 200809L /* popen, pclose, mkdtemp */
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"

#include <inttypes.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) || defined(__clang__)
#  define BENCH_NOINLINE __attribute__((noinline))
#else
#  define BENCH_NOINLINE
#endif

#define NP 8
typedef struct toy { float p[NP], g[NP]; char (*names)[16]; int n; } toy;
static int toy_forward(void *user, void *batch, int training, double *loss) {
  toy *t = (toy *)user;
  (void)batch; (void)training;
  *loss = (double)(t->p[0] * t->p[0]);
  return 0;
}
static int toy_backward(void *user, void *batch) {
  toy *t = (toy *)user;
  int i;
  (void)batch;
  for (i = 0; i < NP; i++) t->g[i] += 2.0f * t->p[i];
  return 0;
}
static int64_t toy_count(void *user) { (void)user; return 1000000; }
static int toy_get(void *user, int64_t i, void **batch) { (void)user; *batch = (void *)(intptr_t)i; return 0; }

static hk_signal publish(hk_ctx *ctx, void *user) { /* N metrics a step, each a new value */
  toy *t = (toy *)user;
  int i;
  for (i = 0; i < t->n; i++) hk_metric_set(ctx, t->names[i], (double)ctx->global_step + i);
  return HK_CONTINUE;
}

BENCH_NOINLINE int bench_run(int n, int steps);
int bench_run(int n, int steps) {
  static toy t;
  tr_trainer tr;
  tr_data data = { NULL, toy_count, toy_get, NULL, NULL, NULL, NULL, NULL, 1 };
  char dir[] = "/tmp/bench_metrics.XXXXXX", spec[1024], cmd[128];
  int i, rc = 1;
  memset(&t, 0, sizeof t);
  t.n = n;
  if (n > 0 && !(t.names = (char (*)[16])calloc((size_t)n, sizeof *t.names))) return 1;
  for (i = 0; i < n; i++) snprintf(t.names[i], sizeof t.names[i], "m/%05d", i);
  for (i = 0; i < NP; i++) t.p[i] = 0.5f;
  if (!mkdtemp(dir)) { perror("bench_metrics: mkdtemp"); free(t.names); return 1; }
  data.user = &t;
  snprintf(spec, sizeof spec, "csv(save_dir=\"%s\", flush_every=4); jsonl(save_dir=\"%s\", flush_every=4); "
           "tensorboard(save_dir=\"%s\", flush_every=4); plot(save_dir=\"%s\")", dir, dir, dir, dir);
  if (tr_init(&tr, &(tr_desc){ .model = { .params = t.p, .grads = t.g, .n_params = NP, .user = &t,
                                          .forward = toy_forward, .backward = toy_backward },
                               .optim = { .kind = TR_OPTIM_SGD, .lr = 1e-3 } }) == TR_OK &&
      hk_spec_apply(tr.reg, spec) == HK_OK &&
      hk_on(tr.reg, HK_ON_TRAIN_BATCH_END, publish, &t, NULL, NULL) == HK_OK) {
    rc = tr_fit(&tr, &(tr_config){ .train = &data, .max_steps = steps, .log_every_n_steps = 1, .no_sigint = 1 }) != TR_OK;
    if (rc) fprintf(stderr, "bench_metrics: %s\n", tr_error(&tr));
  }
  tr_free(&tr);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) rc = 1;
  free(t.names);
  return rc;
}

/* Run `exe run n steps` under callgrind; read the instruction count. */
static int measure(const char *exe, int n, int steps, uint64_t *instr) {
  char cmd[1024], line[512];
  int got = 0, status;
  FILE *p;
  snprintf(cmd, sizeof cmd, "valgrind --tool=callgrind --callgrind-out-file=/dev/null --toggle-collect=bench_run '%s' run %d %d 2>&1",
           exe, n, steps);
  if (!(p = popen(cmd, "r"))) return 1;
  while (fgets(line, sizeof line, p)) {
    const char *c = strstr(line, "Collected :");
    if (c && sscanf(c + 11, "%" SCNu64, instr) == 1) got = 1;
  }
  status = pclose(p);
  if (status != 0 || !got) {
    fprintf(stderr, "bench_metrics: '%s' failed (status %d)%s\n", cmd, status, got ? "" : "; is valgrind installed? (make deps)");
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  static const int counts[] = { 0, 10, 100, 1000, 4000 };
  enum { N_COUNTS = (int)(sizeof counts / sizeof counts[0]), SHORT = 4, LONG = 12 };
  double per_step[N_COUNTS], per_value[N_COUNTS], ratio;
  int k;
  if (argc == 4 && !strcmp(argv[1], "run")) return bench_run(atoi(argv[2]), atoi(argv[3]));
  for (k = 0; k < N_COUNTS; k++) {
    uint64_t a, b;
    if (measure(argv[0], counts[k], SHORT, &a) || measure(argv[0], counts[k], LONG, &b)) return 1;
    per_step[k] = (double)(b - a) / (LONG - SHORT);
  }
  printf("one logged value: a hook publishes N metrics a step, a record every step, csv + jsonl + tensorboard + plot\n");
  printf("instructions (callgrind, exact): c(N) = (I(%d steps) - I(%d steps)) / %d; a value = (c(N) - c(0)) / N\n\n",
         LONG, SHORT, LONG - SHORT);
  printf("| metrics a record | instr/step | instr/value | vs 10 metrics |\n|---|---|---|---|\n");
  for (k = 1; k < N_COUNTS; k++) {
    per_value[k] = (per_step[k] - per_step[0]) / counts[k];
    printf("| %d | %.0f | %.0f | %.2f |\n", counts[k], per_step[k], per_value[k], per_value[k] / per_value[1]);
  }
  ratio = per_value[N_COUNTS - 1] / per_value[1];
  printf("\na value at %d metrics vs at 10: %.2fx (goal: at most 1.25x, the same cost at any count): %s\n",
         counts[N_COUNTS - 1], ratio, ratio <= 1.25 ? "met" : "NOT met");
  return 0;
}
