/* tests/grad_pass_cost.c - how many passes over the gradients one training step makes with nan_guard and
   gradient_monitor registered, in tr_fit and in a loop of your own, in instructions (callgrind, exact).

   A model of 2^20 parameters in 16 tensors (llm.c's count) whose forward and backward cost nothing, so
   that a step is the trainer's own passes (zero_grad, the SGD update) plus what the callbacks read. Each
   mode runs under valgrind --tool=callgrind collecting inside measured() only, for 2 and for 12 steps;
   the difference over 10 steps is the cost of one step, every one-time cost cancelled out. One pass over
   the gradients (hk_sumsq, 2^20 floats) is the "gradient_monitor" row minus the "nothing" row.

     grad_pass_cost                 the table (every mode, twice each under callgrind)
     grad_pass_cost run MODE STEPS  one run of tr_fit (what the driver starts)
     grad_pass_cost own MODE STEPS  one run of a loop of your own (tr_run_begin)
   MODE: nothing | nan_guard | gradient_monitor | both */
#define _POSIX_C_SOURCE 200809L /* popen */
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_TENSORS 16
#define PER_TENSOR 65536
#define N_PARAMS (N_TENSORS * PER_TENSOR)

static float g_params[N_PARAMS], g_grads[N_PARAMS];
static int forward(void *u, void *batch, int training, double *loss) { (void)u; (void)batch; (void)training; *loss = 1; return 0; }
static int backward(void *u, void *batch) { (void)u; (void)batch; g_grads[0] += 1; return 0; }
static int64_t count(void *u) { (void)u; return 1000; }
static int get(void *u, int64_t i, void **batch) { (void)u; (void)i; *batch = NULL; return 0; }

#if defined(__GNUC__) || defined(__clang__)
__attribute__((noinline))
#endif
int measured(const char *mode, int steps);
int measured(const char *mode, int steps) {
  static char names[N_TENSORS][16];
  tr_tensor views[N_TENSORS];
  tr_data data;
  tr_config c;
  tr_desc d;
  tr_trainer t;
  int k, rc;
  for (k = 0; k < N_TENSORS; k++) {
    snprintf(names[k], sizeof names[k], "t%d", k);
    views[k].name = names[k];
    views[k].offset = (size_t)k * PER_TENSOR;
    views[k].count = PER_TENSOR;
  }
  memset(&d, 0, sizeof d);
  d.model.params = g_params;
  d.model.grads = g_grads;
  d.model.n_params = N_PARAMS;
  d.model.tensors = views;
  d.model.n_tensors = N_TENSORS;
  d.model.forward = forward;
  d.model.backward = backward;
  d.optim.kind = TR_OPTIM_SGD;
  d.optim.lr = 1e-9;
  if (tr_init(&t, &d) != TR_OK) return 1;
  if ((!strcmp(mode, "nan_guard") || !strcmp(mode, "both")) && hk_spec_apply(t.reg, "nan_guard") != HK_OK) return 1;
  if ((!strcmp(mode, "gradient_monitor") || !strcmp(mode, "both")) &&
      hk_spec_apply(t.reg, "gradient_monitor(log_frequency=1, vanishing_threshold=-1)") != HK_OK) return 1;
  memset(&data, 0, sizeof data);
  data.count = count;
  data.get = get;
  data.batch_size = 1;
  memset(&c, 0, sizeof c);
  c.train = &data;
  c.max_steps = steps;
  c.log_every_n_steps = -1;
  c.no_sigint = 1;
  rc = tr_fit(&t, &c) != TR_OK || t.global_step != steps;
  if (rc) fprintf(stderr, "grad_pass_cost: %s\n", tr_error(&t));
  tr_free(&t);
  return rc;
}

/* The same step in a loop of your own (tr_run_begin): the run gives its context the shared pass, as tr_fit. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((noinline))
#endif
int measured_own(const char *mode, int steps);
int measured_own(const char *mode, int steps) {
  static char names[N_TENSORS][16];
  static const char *name_of[N_TENSORS];
  static size_t sizes[N_TENSORS];
  float *params = g_params, *grads = g_grads;
  char spec[200] = "";
  hk_registry *reg = hk_create(NULL);
  hk_ctx *ctx;
  int k, rc;
  for (k = 0; k < N_TENSORS; k++) {
    snprintf(names[k], sizeof names[k], "t%d", k);
    name_of[k] = names[k];
    sizes[k] = PER_TENSOR;
  }
  if (!strcmp(mode, "nan_guard") || !strcmp(mode, "both")) strcat(spec, "nan_guard; ");
  if (!strcmp(mode, "gradient_monitor") || !strcmp(mode, "both")) strcat(spec, "gradient_monitor(log_frequency=1, vanishing_threshold=-1)");
  ctx = tr_run_begin(reg, &(tr_run_desc){ .epochs = TR_NO, .max_steps = steps, .lr = 1e-9, .log_every_n_steps = -1,
                                          .no_signals = 1, TR_TENSORS(&params, &grads, name_of, sizes), .spec = spec }, NULL);
  while (tr_run_next(reg)) {
    ctx->loss = 1;
    g_grads[0] += 1;
    HK_FIRE(reg, HK_ON_AFTER_BACKWARD, ctx);
    HK_FIRE(reg, HK_ON_BEFORE_OPTIMIZER_STEP, ctx);
    if (tr_run_update(reg))
      for (k = 0; k < N_PARAMS; k++) g_params[k] -= (float)ctx->lr * g_grads[k];
  }
  rc = tr_run_end(reg) != TR_OK || ctx->global_step != steps;
  hk_destroy(reg);
  return rc;
}

static int measure(const char *self, const char *fn, const char *mode, int steps, uint64_t *instr) {
  char cmd[1024], line[512];
  int got = 0;
  FILE *p;
  snprintf(cmd, sizeof cmd, "valgrind --tool=callgrind --callgrind-out-file=/dev/null --toggle-collect=%s "
           "'%s' %s %s %d 2>&1", fn, self, strcmp(fn, "measured") ? "own" : "run", mode, steps);
  if (!(p = popen(cmd, "r"))) return 1;
  while (fgets(line, sizeof line, p)) {
    const char *at = strstr(line, "Collected :");
    if (at && sscanf(at + 11, "%" SCNu64, instr) == 1) got = 1;
  }
  if (pclose(p) != 0 || !got) { fprintf(stderr, "grad_pass_cost: '%s' failed\n", cmd); return 1; }
  return 0;
}

int main(int argc, char **argv) {
  static const char *const modes[] = { "nothing", "nan_guard", "gradient_monitor", "both" };
  static const char *const fns[] = { "measured", "measured_own" }, *const loops[] = { "tr_fit", "a loop of your own" };
  double per[4];
  int i, l;
  if (argc == 4 && !strcmp(argv[1], "run")) return measured(argv[2], atoi(argv[3]));
  if (argc == 4 && !strcmp(argv[1], "own")) return measured_own(argv[2], atoi(argv[3]));
  for (l = 0; l < 2; l++) {
    for (i = 0; i < 4; i++) {
      uint64_t a, b;
      if (measure(argv[0], fns[l], modes[i], 2, &a) || measure(argv[0], fns[l], modes[i], 12, &b)) return 1;
      per[i] = (double)(b - a) / 10;
    }
    printf("%s: instructions per step, %d parameters in %d tensors, SGD (callgrind: (I(12 steps) - I(2 steps)) / 10)\n",
           loops[l], N_PARAMS, N_TENSORS);
    for (i = 0; i < 4; i++) printf("  %-18s %12.0f  (%+.0f over nothing)\n", modes[i], per[i], per[i] - per[0]);
    printf("one pass over the gradients (gradient_monitor - nothing): %.0f; both registered make %.2f passes\n",
           per[2] - per[0], (per[3] - per[0]) / (per[2] - per[0]));
  }
  return 0;
}
