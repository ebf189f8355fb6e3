/* tests/watchdog_mpi.c - the watchdog under mpirun (tests/watchdog_mpi.sh): tr_fit with TRAIN_MPI on a
   one-parameter model, the watchdog from argv[1] on every rank, and on rank argv[2] a hook named "stuck"
   that sleeps argv[3] seconds at on_train_batch_start of step 3. The other ranks go on to the gradient
   all-reduce and wait there. Prints "rank R: done" at a normal end. */
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define ONE_BATCHES 16
#include "one.h"

static double g_secs;
static hk_signal stuck(hk_ctx *ctx, void *u) {
  (void)u;
  if (ctx->global_step == 3) {
    struct timespec ts;
    ts.tv_sec = (time_t)g_secs;
    ts.tv_nsec = (long)((g_secs - (double)ts.tv_sec) * 1e9);
    while (nanosleep(&ts, &ts) != 0) {}
  }
  return HK_CONTINUE;
}

int main(int argc, char **argv) {
  one m = { { 1.0f }, { 0 } };
  tr_trainer t;
  tr_data data;
  tr_config c;
  hk_opts o = { 0 };
  tr_err e;
  if (argc != 4) { fprintf(stderr, "usage: wd_mpi SPEC STUCK_RANK SECONDS\n"); return 2; }
  g_secs = atof(argv[3]);
  memset(&data, 0, sizeof data);
  data.count = one_count;
  data.get = one_get;
  if (tr_init(&t, &(tr_desc){ .model = { .params = m.p, .grads = m.g, .n_params = 1, .tensors = one_tensors, .n_tensors = 1,
                                         .user = &m, .forward = one_forward, .backward = one_backward },
                              .optim = { .kind = TR_OPTIM_SGD, .lr = 0.01 } }) != TR_OK) {
    fprintf(stderr, "tr_init: %s\n", tr_error(&t));
    return 1;
  }
  o.name = "stuck";
  if (hk_spec_apply(t.reg, argv[1]) != HK_OK) { fprintf(stderr, "spec: %s\n", hk_last_error(t.reg)); return 1; }
  if (t.ctx.rank == atoi(argv[2]) && hk_on(t.reg, HK_ON_TRAIN_BATCH_START, stuck, NULL, &o, NULL) != HK_OK) return 1;
  memset(&c, 0, sizeof c);
  c.train = &data;
  c.max_epochs = 1;
  c.no_sigint = 1;
  e = tr_fit(&t, &c);
  if (e) fprintf(stderr, "rank %d: tr_fit: %s\n", t.ctx.rank, tr_error(&t));
  else printf("rank %d: done\n", t.ctx.rank);
  tr_free(&t);
  return e != TR_OK;
}
