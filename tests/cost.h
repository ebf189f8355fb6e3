/* tests/cost.h - what the callgrind cost programs share (watchdog_cost, device_stats_cost, groups_cost,
   grad_pass_cost): the implementation, a model and data that cost nothing (a step is the loop's own work and
   what the hooks add), a tr_fit run and a plain loop of your own, and the driver. A program defines
   measured(loop, mode, steps), the one function callgrind counts in, and its table; the driver starts the
   program again as `PROGRAM LOOP MODE STEPS` under callgrind for 2 and 12 steps, and the difference over 10 steps
   is one step's cost, every one-time cost (set up, a thread's start and join) cancelled out. */
#ifndef TESTS_COST_H
#define TESTS_COST_H
#define _POSIX_C_SOURCE 200809L /* popen */
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Not inlined, so that callgrind's --toggle-collect finds it. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((noinline))
#endif
int measured(const char *loop, const char *mode, int steps);

static inline int cost_forward(void *u, void *batch, int training, double *loss) { (void)u; (void)batch; (void)training; *loss = 1; return 0; }
static inline int cost_backward(void *u, void *batch) { (void)u; (void)batch; return 0; }
static inline int64_t cost_count(void *u) { (void)u; return 1000; }
static inline int cost_get(void *u, int64_t i, void **batch) { (void)u; (void)i; *batch = NULL; return 0; }

/* tr_fit for steps steps of d (its forward and backward: the ones above where NULL) with spec registered ("" for
   none); 0 when it ran them all. */
static inline int cost_fit(tr_desc d, const char *spec, int steps) {
  tr_trainer t;
  tr_data data;
  tr_config c;
  int rc;
  if (!d.model.forward) d.model.forward = cost_forward;
  if (!d.model.backward) d.model.backward = cost_backward;
  if (tr_init(&t, &d) != TR_OK) { fprintf(stderr, "cost: tr_init: %s\n", tr_error(&t)); return 1; }
  if (spec[0] && hk_spec_apply(t.reg, spec) != HK_OK) { fprintf(stderr, "cost: '%s' refused\n", spec); tr_free(&t); return 1; }
  memset(&data, 0, sizeof data);
  data.count = cost_count;
  data.get = cost_get;
  data.batch_size = 1;
  memset(&c, 0, sizeof c);
  c.train = &data;
  c.max_steps = steps;
  c.log_every_n_steps = -1;
  c.no_sigint = 1;
  rc = tr_fit(&t, &c) != TR_OK || t.global_step != steps;
  if (rc) fprintf(stderr, "cost: tr_fit: %s\n", tr_error(&t));
  tr_free(&t);
  return rc;
}

/* A model of four numbers and SGD, spec registered ("" for none), for steps steps in a loop of your own (loop "own")
   or tr_fit; 0 when it ran them all. */
static inline int cost_tiny(const char *loop, const char *spec, int steps) {
  static float p[4], g[4];
  static const tr_tensor views[] = { { "w", 0, 4 } };
  hk_registry *reg;
  hk_ctx *ctx;
  int rc;
  if (strcmp(loop, "own"))
    return cost_fit((tr_desc){ .model = { .params = p, .grads = g, .n_params = 4, .tensors = views, .n_tensors = 1 },
                               .optim = { .kind = TR_OPTIM_SGD, .lr = 1e-3 } }, spec, steps);
  reg = hk_create(NULL);
  ctx = tr_run_begin(reg, &(tr_run_desc){ .epochs = TR_NO, .max_steps = steps, .lr = 1e-3, .log_every_n_steps = -1,
                                          .no_signals = 1, .validation = TR_NO, .spec = spec }, NULL);
  while (tr_run_next(reg)) {
    ctx->loss = 1;
    if (tr_run_update(reg)) p[0] -= (float)ctx->lr;
  }
  rc = tr_run_end(reg) != TR_OK || ctx->global_step != steps;
  hk_destroy(reg);
  return rc;
}

/* The instructions callgrind counts inside measured() in one run of self (this program) for steps steps. */
static inline int cost_run(const char *self, const char *loop, const char *mode, int steps, uint64_t *instr) {
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
  if (pclose(p) != 0 || !got) { fprintf(stderr, "%s: '%s' failed\n", self, cmd); return 1; }
  return 0;
}

/* A program's main: one run when the driver starts it (LOOP MODE STEPS); else, for each of the two loops ("own",
   "fit", in the table's order), one step's instructions in each of the n (<= 8) modes, (I(2 + over steps) -
   I(2 steps)) / over, handed to table with the loop's name as the table says it. 0 when every run worked. */
static inline int cost_main(int argc, char **argv, const char *const loops[2], const char *const *modes, int n, int over,
                            void (*table)(const char *said, const double *per)) {
  double per[8];
  int i, l;
  if (argc == 4) return measured(argv[1], argv[2], atoi(argv[3]));
  if (n > 8) { fprintf(stderr, "%s: %d modes; cost_main takes 8 at most\n", argv[0], n); return 1; }
  for (l = 0; l < 2; l++) {
    for (i = 0; i < n; i++) {
      uint64_t a, b;
      if (cost_run(argv[0], loops[l], modes[i], 2, &a) || cost_run(argv[0], loops[l], modes[i], 2 + over, &b)) return 1;
      per[i] = (double)(b - a) / over;
    }
    table(strcmp(loops[l], "own") ? "tr_fit" : "a loop of your own", per);
  }
  return 0;
}

/* A row a mode: its instructions a step and what that adds to the first mode's. */
static inline void cost_rows(const char *const *modes, int n, const double *per, int width) {
  int i;
  for (i = 0; i < n; i++) printf("  %-*s %12.0f  (%+.0f over %s)\n", width, modes[i], per[i], per[i] - per[0], modes[0]);
}
#endif
