/* tests/test_own_run.c - train.h's run layer in a hand-written step loop (no epochs, no trainer), as
   examples/own_loop.c uses it; each test pins a fix made while writing that example.

   cmocka tests:
     - the loop's hyperparameters keep their values when sorted by key (hparams.yaml, metrics.jsonl)
     - a checkpoint of a registry without stateful callbacks loads back (it was refused as truncated)
     - a validation the loop runs after tr_run_batch_end, then tr_run_batch_end again: one training
       record per step, model_checkpoint's file written at that step (it holds that step's model),
       early_stopping's stop ends the loop before another step
     - gradient_monitor follows the run's log_every_n_steps by default (each record gets its norms)
     - the progress bar in a pipe prints the final training line of a step loop stopped early; after a
       resume its rate counts this run's steps only
     - once-only warnings: ctx.stage unset (early_stopping and model_checkpoint), and checks or saves at
       on_train_epoch_end in a loop that said it has no epochs (at tr_run_start, before any step)
     - Ctrl-C (raise(SIGINT) in the loop): TR_ERR_INTERRUPTED through on_exception, the csv flushed
     - a resume with nothing left to train (finished under tr_run_desc.max_steps; stopped by early_stopping
       with a patience that stops it again) refused by tr_run_start before anything fires or is made on
       disk, tr_run_finish reporting it and firing nothing; a larger limit or patience trains on
     - resume "auto" reads and counts each file once: save_to inside model_checkpoint's dirpath, not the newest or
       spelled otherwise
     - nan_guard's checks whose events the loop never fires: said once, as early as known
     - train/cluster.h: Slurm's environment, preemption settings, signal, requeue, resume, agreement
       (tests/own_run_cluster.h) */
#define TEST_NO_FSYNC /* what it checks needs no flush to the disk (tests/test.h) */
#include "test.h"

#include <time.h>

static char g_root[256];
static void path_of(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", g_root, name); }
#include "own_run_cluster.h" /* train/cluster.h: Slurm, preemption, agreement */


/* ---- a tiny step loop: loss = 1 + p0^2, SGD; validations every val_every steps read a script ---- */
typedef struct lp {
  TWO_FLOAT_LOOP;
  int64_t val_every;
  const double *val_script;     /* val/loss of the k-th validation */
  int n_val, second_call, raise_at, no_before_backward;
} lp;

static int lp_save(void *user, FILE *f) { lp *l = (lp *)user; return fwrite(l->p, sizeof l->p, 1, f) != 1; }
static int lp_load(void *user, FILE *f) { lp *l = (lp *)user; return fread(l->p, sizeof l->p, 1, f) != 1; }

static void lp_init(lp *l, tr_run_desc d) {
  memset(l, 0, sizeof *l);
  l->raise_at = -1;
  two_float_bind(l);
  assert_non_null(l->reg = hk_create(NULL));
  d.save_model = lp_save;
  d.load_model = lp_load;
  d.model_user = l;
  assert_int_equal(tr_run_setup(l->reg, &d), TR_OK);
}
static void lp_free(lp *l) {
  hk_ctx_free(&l->ctx);
  hk_destroy(l->reg);
}
static unsigned lp_validate(lp *l) {
  hk_registry *reg = l->reg;
  hk_ctx *c = &l->ctx;
  HK_FIRE_FLOW(reg, HK_ON_VALIDATION_START, c, &l->flow);
  HK_FIRE_FLOW(reg, HK_ON_VALIDATION_EPOCH_START, c, &l->flow);
  assert_true(l->n_val >= 0);
  hk_metric_set(c, "val/loss", l->val_script ? l->val_script[l->n_val] : 1.0);
  l->n_val++;
  HK_FIRE_FLOW(reg, HK_ON_VALIDATION_EPOCH_END, c, &l->flow);
  tr_run_log(reg, c, "val");
  HK_FIRE_FLOW(reg, HK_ON_VALIDATION_END, c, &l->flow);
  return l->second_call ? tr_run_batch_end(reg, c, &l->flow) : 0;
}
static unsigned lp_step(lp *l) {
  hk_registry *reg = l->reg;
  hk_ctx *c = &l->ctx;
  unsigned next;
  c->batch_idx = c->global_step;
  c->lr = 0.1;
  if (c->global_step == l->raise_at) raise(SIGINT);
  HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_START, c, &l->flow);
  c->loss = 1.0 + (double)l->p[0] * l->p[0];
  if (!l->no_before_backward) HK_FIRE_FLOW(reg, HK_ON_BEFORE_BACKWARD, c, &l->flow);
  l->g[0] = 2 * l->p[0];
  l->g[1] = 0.5f;
  hk_grads_changed(c);
  HK_FIRE_FLOW(reg, HK_ON_AFTER_BACKWARD, c, &l->flow);
  HK_FIRE_FLOW(reg, HK_ON_BEFORE_OPTIMIZER_STEP, c, &l->flow);
  if (!HK_FLOW_HAS(&l->flow, HK_FLOW_SKIP_STEP)) {
    l->p[0] -= 0.1f * l->g[0];
    l->p[1] -= 0.1f * l->g[1];
    c->global_step++;
    HK_FIRE_FLOW(reg, HK_ON_AFTER_OPTIMIZER_STEP, c, &l->flow);
  }
  c->samples_seen++;
  HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_END, c, &l->flow);
  next = tr_run_batch_end(reg, c, &l->flow);
  if (l->val_every > 0 && c->global_step % l->val_every == 0) next |= lp_validate(l);
  hk_flow_clear(&l->flow, HK_FLOW_BATCH_SIGNALS);
  return next;
}
static tr_err lp_run(lp *l, const char *resume, int64_t max_steps) {
  unsigned next = tr_run_start(l->reg, &l->ctx, resume) ? TR_RUN_STOP : 0;
  while (!(next & TR_RUN_STOP) && l->ctx.global_step < max_steps) next = lp_step(l);
  return tr_run_finish(l->reg, &l->ctx, TR_OK);
}

/* ---- hparams ---------------------------------------------------------------------------------- */
/* The loop's "key=value" words were sorted by key with their values left in place: "lr=0.02 batch=32"
   wrote "batch: 0.02" and "lr: 32". */
static void test_hparams_keep_their_values(void **state) {
  char dir[300], path[700];
  char *yaml, *jl;
  lp l;
  (void)state;
  path_of(dir, sizeof dir, "hparams");
  lp_init(&l, (tr_run_desc){ .epochs = TR_NO, .save_dir = dir, .name = "", .version = "v",
                             .hparams = "lr=0.02 batch=32 zeta=x alpha=1e-3" });
  assert_int_equal(hk_spec_apply(l.reg, "csv; jsonl"), HK_OK);
  assert_int_equal(lp_run(&l, NULL, 2), TR_OK);
  snprintf(path, sizeof path, "%s/v/hparams.yaml", dir);
  assert_non_null(yaml = slurp(path));
  assert_non_null(strstr(yaml, "alpha: 1e-3\nbatch: 32\nlog_every_n_steps: 50\nloop: steps\nlr: 0.02\nzeta: x\nspecs:\n")); /* the loop's settings too */
  snprintf(path, sizeof path, "%s/v/metrics.jsonl", dir);
  assert_non_null(jl = slurp(path));
  assert_non_null(strstr(jl, "{\"hparams\":{\"alpha\":1e-3,\"batch\":32,\"log_every_n_steps\":50,\"loop\":\"steps\",\"lr\":0.02,\"zeta\":\"x\",\"specs\":"));
  free(yaml);
  free(jl);
  lp_free(&l);
}

/* ---- the schedule's state (tr_lr_scale's scale, a plateau's progress) rides in the run's checkpoint
   and comes back with tr_run_load; a checkpoint without it loads the schedule's start ------------------ */
static void test_lr_state_in_run_checkpoint(void **state) {
  char path[400], plain[400];
  lp a, b;
  tr_sched s;
  tr_run *ra, *rb;
  char why[200];
  (void)state;
  path_of(path, sizeof path, "lr.ckpt");
  path_of(plain, sizeof plain, "lr-plain.ckpt");
  assert_int_equal(tr_sched_parse(&s, "plateau(patience=0, factor=0.5)", why, sizeof why), TR_OK);
  lp_init(&a, (tr_run_desc){ .epochs = TR_NO });
  assert_int_equal(lp_run(&a, NULL, 3), TR_OK);
  assert_int_equal(tr_run_save(a.reg, &a.ctx, plain), TR_OK); /* nothing to save yet */
  ra = tr_run_get(a.reg);
  a.ctx.lr = 0.1;
  assert_int_equal(tr_lr_scale(&a.ctx, 0.5), TR_OK);
  assert_true(a.ctx.lr == 0.05);
  assert_int_equal(tr_plateau_step(&s, &ra->lr_state, 0.1, 1.0), 0);
  assert_int_equal(tr_plateau_step(&s, &ra->lr_state, 0.1, 1.0), 1); /* no better: halved */
  assert_true(tr_sched_lr(&s, &ra->lr_state, 0.1, 3) == 0.025);
  assert_int_equal(tr_run_save(a.reg, &a.ctx, path), TR_OK);
  lp_init(&b, (tr_run_desc){ .epochs = TR_NO });
  rb = tr_run_get(b.reg);
  assert_int_equal(tr_run_load(b.reg, &b.ctx, path), TR_OK);
  assert_memory_equal(&rb->lr_state, &ra->lr_state, sizeof ra->lr_state);
  assert_true(tr_sched_lr(&s, &rb->lr_state, 0.1, 3) == 0.025);
  assert_int_equal(tr_run_load(b.reg, &b.ctx, plain), TR_OK); /* an older state: the start again */
  assert_true(rb->lr_state.scale == 0 && rb->lr_state.checks == 0);
  lp_free(&a);
  lp_free(&b);
}

/* ---- a checkpoint of a registry without stateful callbacks (only a logger, or nothing) loads back:
   its state block is 44 bytes, which tr_run_load refused as "truncated" ---------------------------- */
static void test_resume_without_callback_state(void **state) {
  char path[400];
  lp a, b;
  (void)state;
  path_of(path, sizeof path, "plain.ckpt");
  lp_init(&a, (tr_run_desc){ .epochs = TR_NO });
  assert_int_equal(lp_run(&a, NULL, 5), TR_OK);
  assert_int_equal(tr_run_save(a.reg, &a.ctx, path), TR_OK);
  lp_init(&b, (tr_run_desc){ .epochs = TR_NO });
  assert_int_equal(tr_run_load(b.reg, &b.ctx, path), TR_OK);
  assert_int_equal(b.ctx.global_step, 5);
  assert_int_equal(b.ctx.samples_seen, 5);
  assert_memory_equal(b.p, a.p, sizeof a.p);
  assert_int_equal(lp_run(&b, path, 7), TR_OK); /* and as a run's resume_from */
  assert_int_equal(b.ctx.global_step, 7);
  lp_free(&a);
  lp_free(&b);
}

/* ---- a validation after tr_run_batch_end, then tr_run_batch_end again ----------------------------- */
static void test_validation_then_batch_end_again(void **state) {
  static const double script[] = { 1.0, 2.0, 0.5, 0.4 }; /* better, worse (patience 1: stop), ... */
  char dir[300], spec[700], path[700];
  FILE *log;
  lp l, back;
  int records[2] = { 0, 0 }; /* train, val */
  (void)state;
  path_of(dir, sizeof dir, "again");
  lp_init(&l, (tr_run_desc){ .epochs = TR_NO, .log_every_n_steps = 1, .save_dir = dir });
  snprintf(spec, sizeof spec, "early_stopping(monitor=val/loss, patience=1); model_checkpoint(monitor=val/loss, "
           "dirpath=\"%s/ckpt\", filename=\"{step}\")", dir);
  assert_int_equal(hk_spec_apply(l.reg, spec), HK_OK);
  assert_int_equal(hk_on(l.reg, HK_ON_LOG, count_records, records, NULL, NULL), HK_OK);
  l.val_every = 2;
  l.val_script = script;
  l.second_call = 1;
  assert_int_equal(lp_run(&l, NULL, 100), TR_OK);
  assert_int_equal(l.ctx.global_step, 4);          /* the stop at step 4's validation: no step 5 */
  assert_int_equal(records[0], 4);            /* the second call sent no second record */
  assert_int_equal(records[1], 2);
  assert_int_equal(tr_early_stopping_get(l.reg, hk_spec_find(l.reg, "early_stopping", 0))->stopping_reason, TR_STOP_PATIENCE_EXHAUSTED);
  /* the file asked for at step 2's validation was written at step 2: its counters and model say so */
  snprintf(path, sizeof path, "%s/ckpt/step=2.ckpt", dir);
  assert_string_equal(tr_model_checkpoint_get(l.reg, hk_spec_find(l.reg, "model_checkpoint", 0))->best_model_path, path);
  assert_non_null(log = tmpfile());
  lp_init(&back, (tr_run_desc){ .epochs = TR_NO, .log = log }); /* a bare loop: the callbacks' state is left */
  assert_int_equal(tr_run_load(back.reg, &back.ctx, path), TR_OK);
  assert_int_equal(back.ctx.global_step, 2);
  assert_true(back.p[0] == 0.64f);                 /* 1 -> 0.8 -> 0.64 */
  assert_int_equal(count_in(log, "which is not registered now (ignored)"), 2);
  fclose(log);
  lp_free(&back);
  lp_free(&l);
}

/* ---- gradient_monitor's default cadence is the run's ---------------------------------------------- */
static int g_with_norm;
static hk_signal count_norms(hk_ctx *ctx, void *u) {
  const tr_log_record *r = tr_log_current(ctx);
  double v;
  (void)u;
  if (r && !strcmp(r->stage, "train") && tr_log_get(r, "grad_2.0_norm_total", &v)) g_with_norm++;
  return HK_CONTINUE;
}
static void test_gradient_monitor_follows_the_run(void **state) {
  lp l;
  (void)state;
  lp_init(&l, (tr_run_desc){ .epochs = TR_NO, .log_every_n_steps = 3 });
  assert_int_equal(hk_spec_apply(l.reg, "gradient_monitor(histogram_bins=4)"), HK_OK);
  assert_int_equal(hk_on(l.reg, HK_ON_LOG, count_norms, NULL, NULL, NULL), HK_OK);
  g_with_norm = 0;
  assert_int_equal(lp_run(&l, NULL, 9), TR_OK);
  assert_int_equal(tr_gradient_monitor_get(l.reg, hk_spec_find(l.reg, "gradient_monitor", 0))->checks, 3);
  assert_int_equal(g_with_norm, 3);                /* steps 3, 6, 9: every record */
  lp_free(&l);
}

/* ---- the progress bar in a pipe: a step loop's final line ----------------------------------------- */
static hk_signal stop_at_7(hk_ctx *ctx, void *u) { (void)u; return ctx->global_step == 7 ? HK_STOP : HK_CONTINUE; }
static void test_bar_final_line_in_a_pipe(void **state) {
  FILE *out = tmpfile();
  char *text;
  lp l;
  (void)state;
  assert_non_null(out);
  lp_init(&l, (tr_run_desc){ .epochs = TR_NO, .max_steps = 100 });
  assert_int_equal(tr_progress_bar(l.reg, &(tr_progress_bar_desc){ .out = out, .mode = TR_BAR_LINES }, NULL), TR_OK);
  assert_int_equal(hk_on(l.reg, HK_ON_TRAIN_BATCH_END, stop_at_7, NULL, NULL, NULL), HK_OK);
  assert_int_equal(lp_run(&l, NULL, 100), TR_OK);
  assert_int_equal(l.ctx.global_step, 7);
  text = file_text(out);
  assert_non_null(strstr(text, "Training:   7%|"));
  assert_non_null(strstr(text, "| 7/100 ["));
  assert_int_equal(count_of(text, "Training:"), 1);
  free(text);
  fclose(out);
  lp_free(&l);
}

/* After a resume the bar's rate counts the steps of this run only (tqdm's initial): 1000 steps before
   it, 10 now taking at least 3 ms each, must not read as thousands a second. */
static hk_signal slow_step(hk_ctx *ctx, void *u) {
  struct timespec ts = { 0, 3000000L };
  (void)ctx;
  (void)u;
  nanosleep(&ts, NULL);
  return HK_CONTINUE;
}
static void test_bar_rate_after_resume(void **state) {
  FILE *out = tmpfile();
  char path[400], *text, *at;
  double rate;
  lp l;
  (void)state;
  path_of(path, sizeof path, "rate.ckpt");
  lp_init(&l, (tr_run_desc){ .epochs = TR_NO });
  assert_int_equal(lp_run(&l, NULL, 1000), TR_OK);
  assert_int_equal(tr_run_save(l.reg, &l.ctx, path), TR_OK);
  lp_free(&l);
  lp_init(&l, (tr_run_desc){ .epochs = TR_NO, .max_steps = 1010 });
  assert_int_equal(tr_progress_bar(l.reg, &(tr_progress_bar_desc){ .out = out, .mode = TR_BAR_LINES }, NULL), TR_OK);
  assert_int_equal(hk_on(l.reg, HK_ON_TRAIN_BATCH_START, slow_step, NULL, NULL, NULL), HK_OK);
  if (lp_run(&l, path, 1010) != TR_OK) fail_msg("%s", tr_run_error(l.reg));
  text = file_text(out);
  assert_non_null(at = strstr(text, "| 1010/1010 [00:00<00:00, "));
  rate = atof(at + strlen("| 1010/1010 [00:00<00:00, "));
  assert_true(rate > 0 && rate < 400);             /* 10 timed steps of >= 3 ms: <= 333 it/s */
  free(text);
  fclose(out);
  lp_free(&l);
}

/* ---- misconfigured loops: one warning each, as early as it is known ------------------------------- */
static void test_warn_stage_unset(void **state) {
  FILE *log = tmpfile();
  char dir[300], spec[700];
  hk_registry *reg = hk_create(NULL);
  hk_ctx ctx;
  int i;
  (void)state;
  path_of(dir, sizeof dir, "stage");
  memset(&ctx, 0, sizeof ctx);
  assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .log = log }), TR_OK);
  snprintf(spec, sizeof spec, "early_stopping(monitor=loss); model_checkpoint(monitor=loss, dirpath=\"%s\")", dir);
  assert_int_equal(hk_spec_apply(reg, spec), HK_OK);
  for (i = 0; i < 3; i++) { /* a loop that fires the events itself and forgot ctx.stage */
    ctx.epoch = i;
    ctx.global_step = 10 * (i + 1);
    hk_metric_set(&ctx, "loss", 1.0 / (i + 1));
    assert_int_equal(HK_FIRE(reg, HK_ON_TRAIN_EPOCH_END, &ctx), HK_CONTINUE);
  }
  assert_int_equal(count_in(log, "early_stopping: ctx->stage is not set (HK_STAGE_NONE) at on_train_epoch_end"), 1);
  assert_int_equal(count_in(log, "model_checkpoint: ctx->stage is not set (HK_STAGE_NONE) at on_train_epoch_end"), 1);
  assert_int_equal(count_in(log, "\n"), 2);
  hk_ctx_free(&ctx);
  hk_destroy(reg);
  fclose(log);
}

static void test_warn_epoch_end_in_a_loop_without_epochs(void **state) {
  FILE *log = tmpfile();
  char dir[300], spec[700], *text;
  lp l;
  (void)state;
  path_of(dir, sizeof dir, "noepochs");
  lp_init(&l, (tr_run_desc){ .epochs = TR_NO, .log = log });
  snprintf(spec, sizeof spec, "early_stopping(monitor=val/loss, check_on_train_epoch_end=true); "
           "model_checkpoint(monitor=val/loss, save_on_train_epoch_end=true, dirpath=\"%s\")", dir);
  assert_int_equal(hk_spec_apply(l.reg, spec), HK_OK);
  l.val_every = 2;
  assert_int_equal(tr_run_start(l.reg, &l.ctx, NULL), TR_OK);
  /* said before the first step */
  assert_int_equal(count_in(log, "early_stopping: checks 'val/loss' at on_train_epoch_end, which this loop never fires"), 1);
  assert_int_equal(count_in(log, "model_checkpoint: saves every 1 epochs at on_train_epoch_end, which this loop never fires"), 1);
  while (l.ctx.global_step < 6) (void)lp_step(&l);
  assert_int_equal(tr_run_finish(l.reg, &l.ctx, TR_OK), TR_OK);
  /* and only then: once */
  assert_int_equal(count_in(log, "early_stopping:"), 1);
  assert_int_equal(count_in(log, "model_checkpoint:"), 1);
  lp_free(&l);
  /* the defaults in the same loop: they check and save at on_validation_end, no warning */
  empty_file(log);
  lp_init(&l, (tr_run_desc){ .epochs = TR_NO, .log = log });
  snprintf(spec, sizeof spec, "early_stopping(monitor=val/loss); model_checkpoint(monitor=val/loss, dirpath=\"%s\")", dir);
  assert_int_equal(hk_spec_apply(l.reg, spec), HK_OK);
  l.val_every = 2;
  assert_int_equal(lp_run(&l, NULL, 6), TR_OK);
  text = file_text(log);                            /* no warning of theirs (only that Ctrl-C would save nothing) */
  assert_int_equal(count_of(text, "early_stopping"), 0);
  assert_int_equal(count_of(text, "model_checkpoint"), 0);
  assert_int_equal(count_of(text, "\n"), count_of(text, "Ctrl-C or SIGTERM will stop the run"));
  assert_int_equal(tr_model_checkpoint_get(l.reg, hk_spec_find(l.reg, "model_checkpoint", 0))->last_global_step_saved, 2);
  free(text);
  lp_free(&l);
  fclose(log);
}

/* ---- Ctrl-C ------------------------------------------------------------------------------------- */
static char g_abort[300];
static hk_signal note_abort(hk_ctx *ctx, void *u) {
  (void)u;
  snprintf(g_abort, sizeof g_abort, "%s", ctx->abort_reason ? ctx->abort_reason : "(none)");
  return HK_CONTINUE;
}
static void test_ctrl_c(void **state) {
  char dir[300], spec[700], path[700], *csv;
  lp l;
  (void)state;
  path_of(dir, sizeof dir, "ctrlc");
  lp_init(&l, (tr_run_desc){ .epochs = TR_NO, .log_every_n_steps = 1, .save_dir = dir, .name = "", .version = "v" });
  snprintf(spec, sizeof spec, "csv; early_stopping(monitor=val/loss)");
  assert_int_equal(hk_spec_apply(l.reg, spec), HK_OK);
  assert_int_equal(hk_on(l.reg, HK_ON_EXCEPTION, note_abort, NULL, NULL, NULL), HK_OK);
  l.val_every = 2;
  l.raise_at = 3;
  g_abort[0] = 0;
  assert_int_equal(lp_run(&l, NULL, 100), TR_ERR_INTERRUPTED);
  assert_int_equal(l.ctx.global_step, 4);          /* the first signal: after the current step */
  assert_non_null(strstr(g_abort, "interrupted"));
  assert_non_null(strstr(tr_run_error(l.reg), "interrupted"));
  snprintf(path, sizeof path, "%s/v/metrics.csv", dir); /* flushed at the end, though written once a second */
  assert_non_null(csv = slurp(path));
  assert_string_equal(csv, "epoch,step,train/loss,val/loss\n0,0,2,\n0,1,1.6400000190734865,\n0,1,,1\n"
                           "0,2,1.4095999816894533,\n0,3,1.2621439638671887,\n0,3,,1\n"); /* step 4's: the last */
  free(csv);
  lp_free(&l);
  assert_int_equal(hk_stop_requested(), 1);        /* still known after the run (hooks.h keeps the count) */
  lp_init(&l, (tr_run_desc){ .epochs = TR_NO });  /* the next run starts afresh */
  assert_int_equal(lp_run(&l, NULL, 3), TR_OK);
  assert_int_equal(l.ctx.global_step, 3);
  lp_free(&l);
}

/* save_to in a directory that does not exist (issue 37, item 13: found only when Ctrl-C came, and that state lost):
   refused when the run starts, after setup (a logger's save_dir may hold it), before any step. */
static void test_save_to_dir_missing(void **state) {
  char dir[300], path[400];
  lp l;
  (void)state;
  path_of(dir, sizeof dir, "no_such_dir");
  snprintf(path, sizeof path, "%s/last.ckpt", dir);
  lp_init(&l, (tr_run_desc){ .epochs = TR_NO, .max_steps = 4, .save_to = path });
  assert_int_equal(tr_run_start(l.reg, &l.ctx, NULL), TR_ERR_INVALID);
  assert_non_null(strstr(tr_run_error(l.reg), "tr_run_start: tr_run_desc.save_to '"));
  assert_non_null(strstr(tr_run_error(l.reg), "no_such_dir' does not exist"));
  assert_int_equal(tr_run_finish(l.reg, &l.ctx, TR_OK), TR_ERR_INVALID);
  lp_free(&l);
  path_of(dir, sizeof dir, "");
  lp_init(&l, (tr_run_desc){ .epochs = TR_NO, .max_steps = 4, .save_to = dir }); /* a directory itself */
  assert_int_equal(tr_run_start(l.reg, &l.ctx, NULL), TR_ERR_INVALID);
  assert_non_null(strstr(tr_run_error(l.reg), "is a directory: give the checkpoint's file name"));
  assert_int_equal(tr_run_finish(l.reg, &l.ctx, TR_OK), TR_ERR_INVALID);
  lp_free(&l);
}

/* resume "auto" reads each file once: save_to inside a directory it scans (model_checkpoint's dirpath) was read
   and counted a second time when it was not the newest, or when spelled otherwise ("D/./save.ckpt"). The check
   reads the file's step from its text and counts its calls by file. */
static int g_auto_reads[2];
static int auto_check(void *u, const char *path, int64_t *step, char *why, size_t cap) {
  char *text = slurp(path);
  long v = -1;
  (void)u, (void)why, (void)cap;
  g_auto_reads[strstr(path, "save.ckpt") ? 1 : 0]++;
  if (text) sscanf(text, "%ld", &v);
  free(text);
  *step = v;
  return v < 0;
}
static void test_resume_auto_reads_each_once(void **state) {
  static const char *const saves[] = { "save.ckpt", "./save.ckpt" };
  char dir[300], spec[400], newer[400], save[400], save_to[400];
  const char *got;
  int k;
  (void)state;
  path_of(dir, sizeof dir, "auto_once");
  assert_int_equal(mkdir(dir, 0755), 0);
  snprintf(newer, sizeof newer, "%s/a_newer.ckpt", dir); /* scanned before save.ckpt */
  snprintf(save, sizeof save, "%s/save.ckpt", dir);
  snprintf(spec, sizeof spec, "model_checkpoint(dirpath=\"%s\")", dir);
  for (k = 0; k < 2; k++) {
    FILE *f, *log = tmpfile();
    char *text;
    lp l;
    assert_non_null(f = fopen(newer, "w"));
    fputs(k == 0 ? "9" : "3", f); /* k 0: save_to is not the newest; k 1: it is, spelled otherwise */
    fclose(f);
    assert_non_null(f = fopen(save, "w"));
    fputs(k == 0 ? "3" : "9", f);
    fclose(f);
    snprintf(save_to, sizeof save_to, "%s/%s", dir, saves[k]);
    lp_init(&l, (tr_run_desc){ .epochs = TR_NO, .max_steps = 4, .log = log });
    assert_int_equal(hk_spec_apply(l.reg, spec), HK_OK);
    memset(g_auto_reads, 0, sizeof g_auto_reads);
    got = tr_run_find_resume(l.reg, &l.ctx, save_to, auto_check, NULL);
    assert_non_null(got);
    assert_non_null(strstr(got, k == 0 ? "a_newer.ckpt" : "save.ckpt"));
    if (g_auto_reads[0] != 1 || g_auto_reads[1] != 1)
      fail_msg("save_to '%s': a_newer.ckpt read %d times, save.ckpt %d times (once each expected)", save_to, g_auto_reads[0], g_auto_reads[1]);
    text = file_text(log);
    if (!strstr(text, "(global step 9; the newest of 2 checkpoints of this run that load)")) fail_msg("said: %s", text);
    free(text);
    fclose(log);
    lp_free(&l);
  }
}

/* ---- a resume with nothing left to train ------------------------------------------------------------ */
static int g_fired[HK_EVENT_COUNT];
static hk_signal count_fired(hk_ctx *ctx, void *u) { (void)ctx; g_fired[(intptr_t)u]++; return HK_CONTINUE; }
static void count_events(hk_registry *reg) {
  static const int events[] = { HK_SETUP, HK_CONFIGURE_MODEL, HK_ON_LOAD_CHECKPOINT, HK_ON_FIT_START, HK_ON_TRAIN_START,
                                HK_ON_TRAIN_END, HK_ON_FIT_END, HK_ON_EXCEPTION, HK_TEARDOWN };
  size_t i;
  memset(g_fired, 0, sizeof g_fired);
  for (i = 0; i < sizeof events / sizeof events[0]; i++)
    assert_int_equal(hk_on(reg, events[i], count_fired, (void *)(intptr_t)events[i], NULL, NULL), HK_OK);
}
static int fired_any(void) {
  int i, n = 0;
  for (i = 0; i < HK_EVENT_COUNT; i++) n += g_fired[i];
  return n;
}
/* A loop of your own with spec registered, set up with d, whose tr_run_start from path is refused (the run that
   wrote it has nothing left to train). */
static void start_refused(lp *l, tr_run_desc d, const char *spec, const char *path) {
  lp_init(l, d);
  assert_int_equal(hk_spec_apply(l->reg, spec), HK_OK);
  count_events(l->reg);
  assert_int_equal(tr_run_start(l->reg, &l->ctx, path), TR_ERR_INVALID);
  assert_non_null(strstr(tr_run_error(l->reg), "tr_run_start: the run that wrote '"));
}
static void test_resume_finished_refused(void **state) {
  char dir[300], path[400], spec[700], v1[500];
  struct stat st;
  lp l;
  (void)state;
  path_of(dir, sizeof dir, "finished");
  snprintf(path, sizeof path, "%s/last.ckpt", dir);
  snprintf(spec, sizeof spec, "csv; early_stopping(monitor=val/loss)");
  lp_init(&l, (tr_run_desc){ .epochs = TR_NO, .max_steps = 4, .save_dir = dir, .save_to = path });
  assert_int_equal(hk_spec_apply(l.reg, spec), HK_OK);
  l.val_every = 2;
  assert_int_equal(lp_run(&l, NULL, 4), TR_OK);
  assert_int_equal(tr_run_save(l.reg, &l.ctx, path), TR_OK);
  lp_free(&l);
  start_refused(&l, (tr_run_desc){ .epochs = TR_NO, .max_steps = 4, .save_dir = dir }, spec, path);
  assert_non_null(strstr(tr_run_error(l.reg), "finished: it trained 0 epochs (4 steps), and this fit's limit is "
                                              "tr_run_desc.max_steps 4: resuming it trains nothing; raise tr_run_desc.max_steps"));
  assert_string_equal(hk_last_error(l.reg), tr_run_error(l.reg));
  assert_int_equal(l.ctx.global_step, 0);            /* nothing loaded */
  assert_int_equal(tr_run_batch_end(l.reg, &l.ctx, &l.flow) & TR_RUN_STOP, TR_RUN_STOP);
  assert_int_equal(tr_run_finish(l.reg, &l.ctx, TR_OK), TR_ERR_INVALID); /* reports it */
  assert_non_null(strstr(tr_run_error(l.reg), "resuming it trains nothing"));
  assert_int_equal(fired_any(), 0);                  /* no setup, no on_exception, no teardown */
  snprintf(v1, sizeof v1, "%s/lightning_logs/version_1", dir);
  assert_int_not_equal(stat(v1, &st), 0);            /* no new version directory */
  assert_int_equal(tr_run_finish(l.reg, &l.ctx, TR_OK), TR_ERR_INVALID); /* once */
  /* a larger limit trains on, in the same registry */
  assert_int_equal(tr_run_setup(l.reg, &(tr_run_desc){ .epochs = TR_NO, .max_steps = 6, .save_dir = dir, .save_model = lp_save,
                                                       .load_model = lp_load, .model_user = &l }), TR_OK);
  l.val_every = 2;
  assert_int_equal(lp_run(&l, path, 6), TR_OK);
  assert_int_equal(l.ctx.global_step, 6);
  assert_int_equal(g_fired[HK_SETUP], 1);
  assert_int_equal(g_fired[HK_ON_LOAD_CHECKPOINT], 1);
  assert_int_equal(g_fired[HK_TEARDOWN], 1);
  lp_free(&l);
}
static void test_resume_early_stopped(void **state) {
  static const double script[] = { 1.0, 2.0, 3.0, 0.5, 0.4, 0.3 }; /* better, worse (patience 1: stop), ... */
  char dir[300], path[400], spec[700];
  FILE *log = tmpfile();
  lp l;
  (void)state;
  path_of(dir, sizeof dir, "stopped");
  snprintf(path, sizeof path, "%s/last.ckpt", dir);
  snprintf(spec, sizeof spec, "early_stopping(monitor=val/loss, patience=1); model_checkpoint(dirpath=\"%s\", save_last=true, "
           "monitor=val/loss)", dir);
  lp_init(&l, (tr_run_desc){ .epochs = TR_NO, .max_steps = 100, .save_dir = dir, .log = log });
  assert_int_equal(hk_spec_apply(l.reg, spec), HK_OK);
  l.val_every = 2;
  l.val_script = script;
  l.second_call = 1;
  assert_int_equal(lp_run(&l, NULL, 100), TR_OK);
  assert_int_equal(l.ctx.global_step, 4);            /* stopped at step 4's validation */
  lp_free(&l);
  /* the same patience: it would stop again at once */
  start_refused(&l, (tr_run_desc){ .epochs = TR_NO, .max_steps = 100, .save_dir = dir, .log = log }, spec, path);
  assert_non_null(strstr(tr_run_error(l.reg), "stopped early, at epoch 0 (step 4): early_stopping{monitor=val/loss,mode=min} "
                                              "(Monitored metric val/loss did not improve in the last 1 records."));
  assert_non_null(strstr(tr_run_error(l.reg), "Resuming it trains nothing; to train on from it, give early_stopping a patience above 1"));
  assert_int_equal(tr_run_finish(l.reg, &l.ctx, TR_OK), TR_ERR_INVALID);
  assert_int_equal(fired_any(), 0);
  lp_free(&l);
  /* min_steps above the recorded stop: that stop is held, it trains on */
  lp_init(&l, (tr_run_desc){ .epochs = TR_NO, .max_steps = 100, .min_steps = 6, .save_dir = dir, .log = log });
  assert_int_equal(hk_spec_apply(l.reg, spec), HK_OK);
  assert_int_equal(tr_run_start(l.reg, &l.ctx, path), TR_OK);
  assert_int_equal(tr_run_finish(l.reg, &l.ctx, TR_OK), TR_OK);
  lp_free(&l);
  /* a larger patience: on past the stop, said once */
  snprintf(spec, sizeof spec, "early_stopping(monitor=val/loss, patience=2); model_checkpoint(dirpath=\"%s\", save_last=true, "
           "monitor=val/loss)", dir);
  lp_init(&l, (tr_run_desc){ .epochs = TR_NO, .max_steps = 100, .save_dir = dir, .log = log });
  assert_int_equal(hk_spec_apply(l.reg, spec), HK_OK);
  l.val_every = 2;
  l.val_script = script + 2;                          /* 3.0 at step 6: the second check without improvement */
  l.second_call = 1;
  assert_int_equal(lp_run(&l, path, 100), TR_OK);
  assert_int_equal(l.ctx.global_step, 6);
  assert_int_equal(count_in(log, "tr_run: resuming past the early stop that checkpoint recorded: early_stopping's patience given now is larger"), 1);
  lp_free(&l);
  fclose(log);
}

/* ---- nan_guard's checks in a loop that never fires their events ----------------------------------- */
static void test_nan_guard_unfired(void **state) {
  FILE *log = tmpfile();
  lp l;
  (void)state;
  lp_init(&l, (tr_run_desc){ .epochs = TR_NO, .log = log });
  assert_int_equal(hk_spec_apply(l.reg, "nan_guard"), HK_OK);
  l.no_before_backward = 1;
  assert_int_equal(tr_run_start(l.reg, &l.ctx, NULL), TR_OK);
  (void)lp_step(&l);
  /* at the first optimizer step: known then */
  assert_int_equal(count_in(log, "nan_guard: never checked the training loss in this fit: it checks at on_before_backward, "
                                 "which the loop did not fire before this fit's first optimizer step"), 1);
  while (l.ctx.global_step < 4) (void)lp_step(&l);
  assert_int_equal(tr_run_finish(l.reg, &l.ctx, TR_OK), TR_OK);
  /* once */
  assert_int_equal(count_in(log, "nan_guard:"), 1);
  lp_free(&l);
  empty_file(log);
  /* without the gradient check: said at on_train_end */
  lp_init(&l, (tr_run_desc){ .epochs = TR_NO, .log = log });
  assert_int_equal(hk_spec_apply(l.reg, "nan_guard(check_grads=false)"), HK_OK);
  l.no_before_backward = 1;
  assert_int_equal(lp_run(&l, NULL, 3), TR_OK);
  assert_int_equal(count_in(log, "nan_guard: never checked the training loss in this fit: it checks at on_before_backward, "
                                 "which the loop did not fire in this fit"), 1);
  lp_free(&l);
  empty_file(log);
  /* a loop that fires both: nothing said */
  lp_init(&l, (tr_run_desc){ .epochs = TR_NO, .log = log });
  assert_int_equal(hk_spec_apply(l.reg, "nan_guard"), HK_OK);
  assert_int_equal(lp_run(&l, NULL, 3), TR_OK);
  assert_int_equal(count_in(log, "nan_guard"), 0);
  lp_free(&l);
  fclose(log);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_hparams_keep_their_values),
    cmocka_unit_test(test_resume_without_callback_state),
    cmocka_unit_test(test_lr_state_in_run_checkpoint),
    cmocka_unit_test(test_validation_then_batch_end_again),
    cmocka_unit_test(test_gradient_monitor_follows_the_run),
    cmocka_unit_test(test_bar_final_line_in_a_pipe),
    cmocka_unit_test(test_bar_rate_after_resume),
    cmocka_unit_test(test_warn_stage_unset),
    cmocka_unit_test(test_warn_epoch_end_in_a_loop_without_epochs),
    cmocka_unit_test(test_ctrl_c),
    cmocka_unit_test(test_resume_finished_refused),
    cmocka_unit_test(test_resume_early_stopped),
    cmocka_unit_test(test_nan_guard_unfired),
    cmocka_unit_test(test_save_to_dir_missing),
    cmocka_unit_test(test_resume_auto_reads_each_once),
    CLUSTER_TESTS,
  };
  return run_tests_in_dir(tests, "test_own_run", g_root); /* one test: TEST_ONLY=test_requeue_messages */
}
