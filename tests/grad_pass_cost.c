/* tests/grad_pass_cost.c - how many passes over the gradients one training step makes with nan_guard and
   gradient_monitor registered, in tr_fit and in a loop of your own, in instructions (callgrind, exact).

   A model of 2^20 parameters in 16 tensors (llm.c's count) whose forward and backward cost nothing, so
   that a step is the trainer's own passes (zero_grad, the SGD update) plus what the callbacks read. Each
   mode runs under valgrind --tool=callgrind collecting inside measured() only, for 2 and for 12 steps;
   the difference over 10 steps is the cost of one step, every one-time cost cancelled out. One pass over
   the gradients (hk_sumsq, 2^20 floats) is the "gradient_monitor" row minus the "nothing" row.

     grad_pass_cost                 the table (every mode, twice each under callgrind)
     grad_pass_cost fit|own MODE N  one run of tr_fit or a loop of your own (what the driver starts)
   MODE: nothing | nan_guard | gradient_monitor | both */
#include "cost.h"

#define N_TENSORS 16
#define PER_TENSOR 65536
#define N_PARAMS (N_TENSORS * PER_TENSOR)

static float g_params[N_PARAMS], g_grads[N_PARAMS];
static char g_names[N_TENSORS][16];
static const char *g_name_of[N_TENSORS];
static size_t g_sizes[N_TENSORS];
static tr_tensor g_views[N_TENSORS];
static int backward(void *u, void *batch) { (void)u; (void)batch; g_grads[0] += 1; return 0; }

static const char *spec_of(const char *mode) {
  return !strcmp(mode, "nan_guard") ? "nan_guard"
       : !strcmp(mode, "gradient_monitor") ? "gradient_monitor(log_frequency=1, vanishing_threshold=-1)"
       : !strcmp(mode, "both") ? "nan_guard; gradient_monitor(log_frequency=1, vanishing_threshold=-1)" : "";
}

/* The same step in tr_fit and in a loop of your own (tr_run_begin): the run gives its context the shared pass, as
   tr_fit. */
int measured(const char *loop, const char *mode, int steps) {
  float *params = g_params, *grads = g_grads;
  hk_registry *reg;
  hk_ctx *ctx;
  int k, rc;
  if (strcmp(loop, "own"))
    return cost_fit((tr_desc){ .model = { .params = g_params, .grads = g_grads, .n_params = N_PARAMS, .tensors = g_views,
                                          .n_tensors = N_TENSORS, .backward = backward },
                               .optim = { .kind = TR_OPTIM_SGD, .lr = 1e-9 } }, spec_of(mode), steps);
  reg = hk_create(NULL);
  ctx = tr_run_begin(reg, &(tr_run_desc){ .epochs = TR_NO, .max_steps = steps, .lr = 1e-9, .log_every_n_steps = -1, .no_signals = 1,
                                          TR_TENSORS(&params, &grads, g_name_of, g_sizes), .spec = spec_of(mode) }, NULL);
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

static const char *const modes[] = { "nothing", "nan_guard", "gradient_monitor", "both" }, *const loops[] = { "fit", "own" };

static void table(const char *said, const double *per) {
  printf("%s: instructions per step, %d parameters in %d tensors, SGD (callgrind: (I(12 steps) - I(2 steps)) / 10)\n",
         said, N_PARAMS, N_TENSORS);
  cost_rows(modes, 4, per, 18);
  printf("one pass over the gradients (gradient_monitor - nothing): %.0f; both registered make %.2f passes\n",
         per[2] - per[0], (per[3] - per[0]) / (per[2] - per[0]));
}

int main(int argc, char **argv) {
  int i;
  for (i = 0; i < N_TENSORS; i++) {
    snprintf(g_names[i], sizeof g_names[i], "t%d", i);
    g_name_of[i] = g_views[i].name = g_names[i];
    g_sizes[i] = g_views[i].count = PER_TENSOR;
    g_views[i].offset = (size_t)i * PER_TENSOR;
  }
  return cost_main(argc, argv, loops, modes, 4, 10, table);
}
