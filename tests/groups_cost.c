/* tests/groups_cost.c - what parameter groups cost a training step, in instructions (callgrind, exact), in tr_fit
   and in a loop of your own over the same parameters: a GPT-like layout of 14 tensors (matrices and the biases and
   norms between them; 82,816 parameters), AdamW, a model whose forward and backward do nothing (so the rows differ
   only by the optimizer's pass and the bookkeeping). Rows: no group (the one flat pass), the decay recipe
   (param_group(match=*b|ln*, weight_decay=0): 10 stretches of neighbouring tensors a step in tr_fit, 14 tensors
   in the loop of your own), and the recipe plus a frozen
   tensor. Each under valgrind --tool=callgrind collecting inside measured() only, for 2 and 12 steps; the
   difference over 10 steps is one step, every one-time cost cancelled out.

     groups_cost                    the table (about 30 s)
     groups_cost fit|own MODE N     one run (what the driver starts)
   MODE: none | recipe | frozen */
#include "cost.h"

#define D 64
static const char *const names[] = { "wte", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b",
                                     "fcw", "fcb", "fcprojw", "fcprojb", "lnfw" };
static const size_t sizes[] = { 512 * D, D, D, 3 * D * D, 3 * D, D * D, D, D, D, 4 * D * D, 4 * D, 4 * D * D, D, D };
#define NT ((int)(sizeof sizes / sizeof sizes[0]))
static float *g_p, *g_g, *g_m, *g_v;
static size_t g_n;

static const char *spec_of(const char *mode) {
  return !strcmp(mode, "recipe") ? "param_group(match=*b|ln*, weight_decay=0)"
       : !strcmp(mode, "frozen") ? "param_group(match=*b|ln*, weight_decay=0); param_group(match=wte, frozen=true)" : "";
}

int measured(const char *loop, const char *mode, int steps) {
  static tr_tensor views[NT];
  hk_registry *reg;
  hk_ctx *ctx;
  tr_optim o;
  size_t off = 0;
  int rc, i;
  if (strcmp(loop, "own")) {
    for (i = 0; i < NT; i++) views[i].name = names[i], views[i].offset = off, views[i].count = sizes[i], off += sizes[i];
    return cost_fit((tr_desc){ .model = { .params = g_p, .grads = g_g, .n_params = g_n, .tensors = views, .n_tensors = NT },
                               .optim = { .lr = 1e-3, .weight_decay = 0.1 } }, spec_of(mode), steps);
  }
  /* the loop's own AdamW: one pass, or one per tensor with the run's settings */
  reg = hk_create(NULL);
  ctx = tr_run_begin(reg, &(tr_run_desc){ .epochs = TR_NO, .max_steps = steps, .lr = 1e-3, .weight_decay = 0.1,
                                          .log_every_n_steps = -1, .no_signals = 1, .validation = TR_NO,
                                          TR_TENSORS(&g_p, &g_g, names, sizes), .spec = spec_of(mode) }, NULL);
  memset(&o, 0, sizeof o);
  while (tr_run_next(reg)) {
    ctx->loss = 1;
    if (!tr_run_update(reg)) continue;
    if (!tr_run_grouped(reg)) {
      tr_adamw_coef c;
      o.weight_decay = 0.1;
      c = tr_adamw_coefs(&o, ctx->lr, ctx->global_step);
      tr_adamw_update(g_p, g_g, g_m, g_v, g_n, &c, 1);
    } else {
      for (i = 0; i < NT; i++) {
        tr_tensor_opt s = tr_run_tensor_opt(reg, i, ctx->lr, ctx->global_step);
        tr_adamw_coef c;
        off = (size_t)(ctx->params[i].data - g_p);
        if (s.frozen) continue;
        o.weight_decay = s.weight_decay;
        c = tr_adamw_coefs(&o, s.lr, s.step);
        tr_adamw_update(g_p + off, g_g + off, g_m + off, g_v + off, sizes[i], &c, 1);
      }
    }
  }
  rc = tr_run_end(reg) != TR_OK || ctx->global_step != steps;
  hk_destroy(reg);
  return rc;
}

static void table(const char *said, const double *per) {
  printf("%s:\n", said);
  printf("  %-58s %11.0f\n", "no group (one pass)", per[0]);
  printf("  %-58s %11.0f  (%+.2f%%)\n", "param_group(match=*b|ln*, weight_decay=0)", per[1], 100 * (per[1] / per[0] - 1));
  printf("  %-58s %11.0f  (%+.2f%%; wte's %zu not updated)\n", "  + param_group(match=wte, frozen=true)", per[2],
         100 * (per[2] / per[0] - 1), sizes[0]);
}

int main(int argc, char **argv) {
  static const char *const modes[] = { "none", "recipe", "frozen" }, *const loops[] = { "fit", "own" };
  int i;
  for (i = 0; i < NT; i++) g_n += sizes[i];
  g_p = (float *)calloc(g_n, sizeof *g_p), g_g = (float *)calloc(g_n, sizeof *g_g);
  g_m = (float *)calloc(g_n, sizeof *g_m), g_v = (float *)calloc(g_n, sizeof *g_v);
  if (!g_p || !g_g || !g_m || !g_v) return 1;
  for (i = 0; i < (int)g_n; i++) g_g[i] = (float)(i % 7) * 0.01f; /* a gradient that is not 0 */
  if (argc != 4)
    printf("AdamW over %zu parameters in %d tensors, nothing else in the step: instructions per step\n"
           "(callgrind: (I(12 steps) - I(2 steps)) / 10)\n", g_n, NT);
  return cost_main(argc, argv, loops, modes, 3, 10, table);
}
