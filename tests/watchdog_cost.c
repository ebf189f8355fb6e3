/* tests/watchdog_cost.c - what the watchdog costs the loop's thread a training step, in instructions (callgrind,
   exact), in a loop of your own (tr_run_begin) and in tr_fit: not registered, and registered (its thread looks
   every second; callgrind counts only the loop's thread, inside measured()). Each mode runs for 2 and 402 steps;
   the difference over 400 steps is one step's cost, every one-time cost (the thread's start and join) cancelled
   (over 10 steps, how the threads interleaved under callgrind moved it by up to 10 instructions).

     watchdog_cost                  the table (every mode, twice each under callgrind; about 30 s)
     watchdog_cost own|fit MODE N   one run (what the driver starts)
   MODE: nothing | watchdog */
#define _POSIX_C_SOURCE 200809L /* popen */
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float g_p[4], g_g[4];
static const char *spec_of(const char *mode) { return !strcmp(mode, "watchdog") ? "watchdog(seconds=600)" : ""; }
static int forward(void *u, void *batch, int training, double *loss) { (void)u; (void)batch; (void)training; *loss = 1; return 0; }
static int backward(void *u, void *batch) { (void)u; (void)batch; return 0; }
static int64_t count(void *u) { (void)u; return 1000; }
static int get(void *u, int64_t i, void **batch) { (void)u; (void)i; *batch = NULL; return 0; }

#if defined(__GNUC__) || defined(__clang__)
__attribute__((noinline))
#endif
int measured(const char *loop, const char *mode, int steps);
int measured(const char *loop, const char *mode, int steps) {
  int rc;
  if (!strcmp(loop, "own")) {
    hk_registry *reg = hk_create(NULL);
    hk_ctx *ctx = tr_run_begin(reg, &(tr_run_desc){ .epochs = TR_NO, .max_steps = steps, .lr = 1e-3, .log_every_n_steps = -1,
                                                    .no_signals = 1, .validation = TR_NO, .spec = spec_of(mode) }, NULL);
    while (tr_run_next(reg)) {
      ctx->loss = 1;
      if (tr_run_update(reg)) g_p[0] -= (float)ctx->lr;
    }
    rc = tr_run_end(reg) != TR_OK || ctx->global_step != steps;
    hk_destroy(reg);
  } else {
    static const tr_tensor views[] = { { "w", 0, 4 } };
    tr_trainer t;
    tr_data data;
    tr_config c;
    tr_desc d;
    memset(&d, 0, sizeof d);
    d.model.params = g_p;
    d.model.grads = g_g;
    d.model.n_params = 4;
    d.model.tensors = views;
    d.model.n_tensors = 1;
    d.model.forward = forward;
    d.model.backward = backward;
    d.optim.kind = TR_OPTIM_SGD;
    d.optim.lr = 1e-3;
    if (tr_init(&t, &d) != TR_OK || (spec_of(mode)[0] && hk_spec_apply(t.reg, spec_of(mode)) != HK_OK)) return 1;
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
    tr_free(&t);
  }
  return rc;
}

static int measure(const char *self, const char *loop, const char *mode, int steps, uint64_t *instr) {
  char cmd[1024], line[512];
  int got = 0;
  FILE *p;
  snprintf(cmd, sizeof cmd, "valgrind --tool=callgrind --callgrind-out-file=/dev/null --toggle-collect=measured '%s' %s %s %d 2>&1",
           self, loop, mode, steps);
  if (!(p = popen(cmd, "r"))) return 1;
  while (fgets(line, sizeof line, p)) {
    const char *at = strstr(line, "Collected :");
    if (at && sscanf(at + 11, "%" SCNu64, instr) == 1) got = 1;
  }
  if (pclose(p) != 0 || !got) { fprintf(stderr, "watchdog_cost: '%s' failed\n", cmd); return 1; }
  return 0;
}

int main(int argc, char **argv) {
  static const char *const modes[] = { "nothing", "watchdog" }, *const loops[] = { "own", "fit" };
  static const char *const said[] = { "a loop of your own", "tr_fit" };
  int i, l;
  if (argc == 4) return measured(argv[1], argv[2], atoi(argv[3]));
  for (l = 0; l < 2; l++) {
    double per[2];
    for (i = 0; i < 2; i++) {
      uint64_t a, b;
      if (measure(argv[0], loops[l], modes[i], 2, &a) || measure(argv[0], loops[l], modes[i], 402, &b)) return 1;
      per[i] = (double)(b - a) / 400;
    }
    printf("%s: instructions per step (callgrind: (I(402 steps) - I(2 steps)) / 400)\n", said[l]);
    for (i = 0; i < 2; i++) printf("  %-8s %10.0f  (%+.0f over nothing)\n", modes[i], per[i], per[i] - per[0]);
    printf("watchdog in %s: %.0f instructions a step in the loop's thread\n", said[l], per[1] - per[0]);
  }
  return 0;
}
