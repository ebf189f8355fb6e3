/* tests/compile_sections.c - train.h with sections left out (TRAIN_NO_TRAINER, TRAIN_NO_MATH,
   TRAIN_NO_CALLBACKS, TRAIN_NO_LOGGERS, TRAIN_NO_SWEEP, in any combination) and with batteries left out
   one by one (TRAIN_NO_<NAME>, TRAIN_ONLY_SPECIFIC_BATTERIES + TRAIN_ENABLE_<NAME>): it builds
   warning-free, what is left out is really gone (this file declares names of its own that would clash
   with the section's), a left-out battery's spec name fails with the define to change, and what is
   left works: a hand-written step loop on the run layer with whichever batteries are compiled in. */
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"

#include <stdio.h>
#include <string.h>

/* Each left-out section's names are free for the program's own use. */
#ifdef TRAIN_NO_TRAINER
typedef int tr_trainer;
static int tr_fit(void) { return 0; }
#endif
#ifdef TRAIN_NO_MATH
static int tr_adamw_update(void) { return 0; }
#endif
#if !TR__ON_EARLY_STOPPING
static int tr_early_stopping(void) { return 0; }
#endif
#if !TR__ON_JSONL
static int tr_jsonl_logger(void) { return 0; }
#endif

/* Every battery: its spec name, the define that leaves it out, and whether this build has it. */
static const struct { const char *name, *define; int on; } batteries[] = {
#define X(name, NAME, p, doc) { #name, "TRAIN_NO_" #NAME, TR__ON_##NAME },
  TR__BATTERIES(X)
#undef X
};
#ifdef TRAIN_NO_SWEEP
static int tr_sweep(void) { return 0; }
#else
static tr_err no_job(hk_registry *reg, tr_sweep_job *job, void *user) { (void)reg; (void)job; (void)user; return TR_OK; }
#endif

static float params[4] = { 1, 2, 3, 4 }, grads[4];

static int fail(const char *what) { fprintf(stderr, "compile_sections: %s\n", what); return 1; }

int main(void) {
  hk_registry *reg = hk_create(NULL);
  hk_tensor pv = { "w", params, 4, 0 }, gv = { "w", grads, 4, 0 };
  hk_ctx ctx;
  hk_flow flow;
  unsigned next = 0;
  int i;
  memset(&flow, 0, sizeof flow);
  memset(&ctx, 0, sizeof ctx);
  ctx.params = &pv;
  ctx.grads = &gv;
  ctx.n_tensors = 1;
#ifdef TRAIN_NO_TRAINER
  (void)tr_fit();
#endif
#ifdef TRAIN_NO_MATH
  (void)tr_adamw_update();
#endif
  tr_run_desc rd; /* no designated initializers: this file also builds as C++11 */
  memset(&rd, 0, sizeof rd);
  rd.epochs = TR_NO;
  rd.max_steps = 20;
  rd.log_every_n_steps = 5;
  rd.save_dir = "build/compile_sections";
  if (!reg || tr_run_setup(reg, &rd) != TR_OK) return fail("tr_run_setup");
  for (i = 0; i < (int)(sizeof batteries / sizeof batteries[0]); i++) { /* a left-out one says how to get it */
    hk_err e = hk_spec_check(reg, batteries[i].name);
    const char *why = e ? hk_last_error(reg) : "";
    if (batteries[i].on ? strstr(why, "not available") != NULL : e != HK_ERR_SPEC || !strstr(why, batteries[i].define) ||
        !strstr(why, "not available"))
      return fail(why[0] ? why : batteries[i].name);
  }
#if TR__ON_EARLY_STOPPING
  if (hk_spec_apply(reg, "early_stopping(monitor=train_loss, patience=1, check_on_train_epoch_end=false)") != HK_OK)
    return fail(hk_last_error(reg));
#else
  (void)tr_early_stopping();
#endif
#if TR__ON_JSONL
  if (hk_spec_apply(reg, "jsonl(flush_every=1)") != HK_OK) return fail(hk_last_error(reg));
#else
  (void)tr_jsonl_logger();
#endif
#ifdef TRAIN_NO_SWEEP
  (void)tr_sweep();
#else
  { /* the sweep runner refuses a bad override before any job */
    tr_sweep_desc sd;
    tr_sweep_result res;
    static int batch = 1;
    tr_sweep_field f;
    char arg[] = "batch=1,x", *argv[1];
    argv[0] = arg;
    memset(&sd, 0, sizeof sd);
    f.name = "batch";
    f.type = TR_SWEEP_INT;
    f.ptr = &batch;
    sd.fields = &f;
    sd.n_fields = 1;
    sd.job = no_job;
    if (tr_sweep(&sd, 1, argv, &res) != TR_ERR_INVALID || !strstr(res.error, "'x' for 'batch'")) return fail("tr_sweep");
  }
#endif
  if (tr_run_start(reg, &ctx, NULL) != TR_OK) return fail(tr_run_error(reg));
  for (i = 0; i < 20 && !(next & TR_RUN_STOP); i++) {
    int k;
    double loss = 0;
    for (k = 0; k < 4; k++) { loss += (double)params[k] * params[k]; grads[k] = 2 * params[k]; }
    ctx.loss = loss;
    hk_grads_changed(&ctx);
    HK_FIRE_FLOW(reg, HK_ON_AFTER_BACKWARD, &ctx, &flow);
#ifndef TRAIN_NO_MATH
    { /* the per-step math, when compiled in */
      tr_optim o;
      tr_sgd_coef c;
      memset(&o, 0, sizeof o);
      o.kind = TR_OPTIM_SGD;
      c = tr_sgd_coefs(&o, 0.1, 1);
      tr_sgd_update(params, grads, NULL, 4, &c, 1);
    }
#else
    for (k = 0; k < 4; k++) params[k] -= 0.1f * grads[k];
#endif
    ctx.global_step++;
    HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_END, &ctx, &flow);
    next = tr_run_batch_end(reg, &ctx, &flow);
    /* a "validation" that stops improving after step 6 */
    hk_metric_set(&ctx, "train_loss", i < 6 ? loss : 1e9);
    HK_FIRE_FLOW(reg, HK_ON_VALIDATION_END, &ctx, &flow);
    next |= tr_run_batch_end(reg, &ctx, &flow);
  }
  if (tr_run_finish(reg, &ctx, TR_OK) != TR_OK) return fail(tr_run_error(reg));
  tr_print(reg, "compile_sections: tr_print is the run layer's (with or without the bar)");
#if TR__ON_EARLY_STOPPING
  if (ctx.global_step != 7) return fail("early_stopping did not stop the loop at step 7");
#else
  if (ctx.global_step != 20) return fail("the loop did not run its 20 steps");
#endif
  hk_destroy(reg);
  hk_ctx_free(&ctx);
  printf("compile_sections: %lld steps\n", (long long)ctx.global_step);
  return 0;
}
