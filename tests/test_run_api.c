/* tests/test_run_api.c - the run layer's public API for a loop that fires every event itself, used the way a
   user's loop would (train.h's trainer is one such client since it stopped using private doors):
   tr_run_enter / tr_run_leave, tr_run_requests, tr_run_desc.settings, accumulate_grad_batches,
   save_checkpoint, rolled_back, and the live fields tr_run.epoch_done, validates_next, accumulation.

   cmocka tests:
     - an entered loop with a sanity check of its own between on_fit_start and on_train_start, firing every
       event itself: the events in order, csv's train records through tr_run_log, the sanity check's val/loss
       never logged nor ranked
     - calls out of order: tr_run_enter during a tr_run_start run and the reverse, tr_run_batch_end /
       tr_run_epoch_end / tr_run_finish in an entered run, tr_run_requests with no run, tr_run_leave with no run
       (and in a tr_run_start run: harmless), a second tr_run_enter naming tr_run_leave; each message the
       same in tr_run_error and hk_last_error
     - a resume of the entered loop: tr_run_load of tr_run_enter's checkpoint, tr_run_resumed said once (and
       refused without a checkpoint named, without a run, in a tr_run_start run)
     - tr_run_requests: a checkpoint at a path and at save_to through save_checkpoint, a log line and a
       training record, a validation asked for (TR_RUN_VALIDATE), a failing save_checkpoint failing the run
       with its why; tr_run_requests from a hook of on_log refused
     - on_exception_checkpoint through save_checkpoint with ctx->abort_reason set (entered and tr_run_start);
       Ctrl-C's save to save_to through save_checkpoint
     - settings as hyperparameters (hparams.yaml, metrics.jsonl): numbers as numbers, strings as strings
       (quoted where YAML would read them otherwise), hparams and tr_run_hparam win; the settings copied
     - accumulation_scheduler writes tr_run.accumulation at epoch starts; a loop that fixed
       accumulate_grad_batches > 1 is refused at on_fit_start
     - epoch_done: early_stopping with min_epochs stops at the same epoch as train.h's tr_fit
     - validates_next: model_checkpoint's step save ranked on the validation that follows (or not)
     - rolled_back: spike_detection's rollback of desc.state calls it with model_user and ctx */
#define TEST_NO_FSYNC /* what it checks needs no flush to the disk (tests/test.h) */
#include "test.h"


static char g_root[256];
static void path_of(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", g_root, name); }

static int exists(const char *path) { struct stat st; return stat(path, &st) == 0; }
/* the run layer's refusal: the same text in tr_run_error and hk_last_error, holding every needle given */
static void refused_with(hk_registry *reg, const char *a, const char *b) {
  assert_string_equal(tr_run_error(reg), hk_last_error(reg));
  if (a && !strstr(tr_run_error(reg), a)) fail_msg("'%s' not in '%s'", a, tr_run_error(reg));
  if (b && !strstr(tr_run_error(reg), b)) fail_msg("'%s' not in '%s'", b, tr_run_error(reg));
}
/* The text of the file NAME in the run directory DIR/v (it must be there); the caller frees it. */
static char *run_file(const char *dir, const char *name) {
  char path[700], *text;
  snprintf(path, sizeof path, "%s/v/%s", dir, name);
  if (!(text = slurp(path))) fail_msg("%s: not there", path);
  return text;
}

/* ---- a loop of our own: loss = 1 + p0^2, SGD, epochs of `batches` batches; entered (tr_run_enter, every
   event fired here) or started (tr_run_start / tr_run_batch_end / tr_run_finish) --------------------------- */
typedef struct ol {
  hk_registry *reg;
  hk_ctx ctx;
  hk_flow flow;
  float p[2], g[2];
  int64_t opt_steps;            /* the optimizer's own step count: a state region */
  hk_tensor pv, gv;
  tr_region regions[2];
  /* the loop's shape */
  int64_t epochs, batches;
  int val_epoch_end;            /* validate after the epoch's last batch, before on_train_epoch_end */
  int64_t val_every;            /* and after every val_every-th optimizer step */
  int sanity;                   /* a sanity check between on_fit_start and on_train_start */
  int set_epoch_done;           /* (entered) set tr_run.epoch_done at the epoch's last batch */
  int set_validates_next;       /* set tr_run.validates_next before on_train_batch_end when a validation follows */
  int64_t log_every;            /* (entered) tr_run_log "train" every n-th step; 0: never */
  const double *val_script;     /* val/loss of the k-th validation (else 1.0) */
  int n_val;
  const double *loss_script;    /* the loss of the k-th batch run (0: the model's) */
  int n_loss, batches_run;
  /* what the loop saw */
  int accumulation_at[16];      /* tr_run.accumulation after on_train_epoch_start */
  int steps_in_epoch[16];
  int window, micro;            /* the accumulation window in progress */
  unsigned requested;           /* TR_RUN_VALIDATE answers of tr_run_requests */
  int epochs_run;
  /* save_checkpoint */
  int saves, fail_save;
  char saved[8][400];
  char saved_abort[400];
  int saved_with_abort;
  /* rolled_back */
  int rolled;
  void *rolled_user;
  hk_ctx *rolled_ctx;
  int64_t rolled_step;
  float rolled_p0;
  FILE *own_log;                /* the run's log when the test gave none (kept off stderr) */
} ol;

static int ol_save(void *user, FILE *f) { ol *l = (ol *)user; return fwrite(l->p, sizeof l->p, 1, f) != 1; }
static int ol_load(void *user, FILE *f) { ol *l = (ol *)user; return fread(l->p, sizeof l->p, 1, f) != 1; }
/* a whole checkpoint of the loop's own format: "ol step=N p0=..." */
static tr_err ol_save_checkpoint(void *user, hk_ctx *ctx, const char *path, char *why, size_t cap) {
  ol *l = (ol *)user;
  FILE *f;
  if (l->saves < 8) snprintf(l->saved[l->saves], sizeof l->saved[0], "%s", path);
  l->saves++;
  if (ctx->abort_reason) {
    l->saved_with_abort++;
    snprintf(l->saved_abort, sizeof l->saved_abort, "%s", ctx->abort_reason);
  }
  if (l->fail_save) { snprintf(why, cap, "ol_save_checkpoint: the disk is on fire ('%s')", path); return TR_ERR_IO; }
  if (!(f = fopen(path, "w"))) { snprintf(why, cap, "cannot open '%s'", path); return TR_ERR_IO; }
  fprintf(f, "ol step=%lld p0=%.9g%s\n", (long long)ctx->global_step, (double)l->p[0], ctx->abort_reason ? " abort" : "");
  fclose(f);
  ctx->path = path;
  (void)HK_FIRE(ctx->reg, HK_ON_CHECKPOINT_SAVED, ctx);
  ctx->path = NULL;
  return TR_OK;
}
static void ol_rolled_back(void *user, hk_ctx *ctx) {
  ol *l = (ol *)user;
  l->rolled++;
  l->rolled_user = user;
  l->rolled_ctx = ctx;
  l->rolled_step = ctx->global_step;
  l->rolled_p0 = l->p[0];
  l->micro = 0; /* the window in progress is dropped */
  l->g[0] = l->g[1] = 0;
}

static void ol_init(ol *l, tr_run_desc d) {
  memset(l, 0, sizeof *l);
  l->p[0] = 1.0f;
  l->epochs = 1;
  l->batches = 4;
  l->set_epoch_done = 1;
  l->pv = (hk_tensor){ "p", l->p, 2, 0 };
  l->gv = (hk_tensor){ "p", l->g, 2, 0 };
  l->ctx.params = &l->pv;
  l->ctx.grads = &l->gv;
  l->ctx.n_tensors = 1;
  l->regions[0] = (tr_region){ l->p, sizeof l->p };
  l->regions[1] = (tr_region){ &l->opt_steps, sizeof l->opt_steps };
  assert_non_null(l->reg = hk_create(NULL));
  if (!d.save_model) d.save_model = ol_save;
  if (!d.load_model) d.load_model = ol_load;
  d.model_user = l;
  if (d.no_signals == 0) d.no_signals = 1;
  if (!d.log) assert_non_null(d.log = l->own_log = tmpfile());
  assert_int_equal(tr_run_setup(l->reg, &d), TR_OK);
}
static void ol_free(ol *l) {
  hk_ctx_free(&l->ctx);
  hk_destroy(l->reg);
  if (l->own_log) fclose(l->own_log);
}
static tr_run *ol_run(ol *l) { return tr_run_get(l->reg); }
static int ol_failed(ol *l) { return ol_run(l)->failed; }

/* Fire an event; a hook's HK_FAIL fails the run (the entered loop's job: nothing watches its events). */
static void ol_fire(ol *l, int ev) {
  if (ol_failed(l)) return;
  (void)HK_FIRE_FLOW(l->reg, ev, &l->ctx, &l->flow);
  if (HK_FLOW_HAS(&l->flow, HK_FLOW_FAIL) && !ol_failed(l))
    tr_run_fail(l->reg, TR_ERR_HOOK, "%s", l->ctx.hook_failure ? l->ctx.hook_failure : "a hook failed");
}
static double ol_val_value(ol *l) { return l->val_script ? l->val_script[l->n_val] : 1.0; }

/* A validation of the fit (entered: its events and its "val" record). */
static void ol_validate_entered(ol *l) {
  if (ol_failed(l)) return;
  ol_fire(l, HK_ON_VALIDATION_START);
  ol_fire(l, HK_ON_VALIDATION_EPOCH_START);
  hk_metric_set(&l->ctx, "val/loss", ol_val_value(l));
  l->n_val++;
  ol_fire(l, HK_ON_VALIDATION_EPOCH_END);
  if (!ol_failed(l) && tr_run_log(l->reg, &l->ctx, "val") == HK_FAIL) return;
  ol_fire(l, HK_ON_VALIDATION_END);
}
/* The sanity check: the validation's events under HK_STAGE_SANITY_CHECK; what it set is forgotten after. */
static void ol_sanity(ol *l) {
  uint64_t before = hk_metric_stamp(&l->ctx, NULL);
  l->ctx.stage = HK_STAGE_SANITY_CHECK;
  ol_fire(l, HK_ON_SANITY_CHECK_START);
  ol_fire(l, HK_ON_VALIDATION_START);
  ol_fire(l, HK_ON_VALIDATION_EPOCH_START);
  hk_metric_set(&l->ctx, "val/loss", 99.0);
  ol_fire(l, HK_ON_VALIDATION_EPOCH_END);
  ol_fire(l, HK_ON_VALIDATION_END);
  ol_fire(l, HK_ON_SANITY_CHECK_END);
  hk_metric_forget_between(&l->ctx, before, hk_metric_stamp(&l->ctx, NULL));
  l->ctx.stage = HK_STAGE_FIT;
}

/* One training batch: forward, backward, and the optimizer step at a window's end. Returns 1 when it stepped. */
static int ol_batch_work(ol *l, int64_t b) {
  hk_ctx *c = &l->ctx;
  int stepped = 0;
  if (l->micro == 0) l->window = ol_run(l)->accumulation > 0 ? ol_run(l)->accumulation : 1; /* a window begins */
  c->batch_idx = b;
  c->lr = 0.1;
  ol_fire(l, HK_ON_TRAIN_BATCH_START);
  if (!HK_FLOW_HAS(&l->flow, HK_FLOW_SKIP_BATCH)) {
    c->loss = l->loss_script && l->batches_run < l->n_loss && l->loss_script[l->batches_run] != 0
                ? l->loss_script[l->batches_run] : 1.0 + (double)l->p[0] * l->p[0];
    ol_fire(l, HK_ON_BEFORE_BACKWARD);
  }
  l->batches_run++;
  if (!HK_FLOW_HAS(&l->flow, HK_FLOW_SKIP_BATCH)) {
    l->g[0] += 2 * l->p[0];
    l->g[1] += 0.5f;
    hk_grads_changed(c);
    ol_fire(l, HK_ON_AFTER_BACKWARD);
    l->micro++;
  }
  if (l->micro > 0 && (l->micro >= l->window || b == l->batches - 1) && !HK_FLOW_HAS(&l->flow, HK_FLOW_SKIP_BATCH)) {
    ol_fire(l, HK_ON_BEFORE_OPTIMIZER_STEP);
    if (!HK_FLOW_HAS(&l->flow, HK_FLOW_SKIP_STEP)) {
      l->p[0] -= 0.1f * l->g[0] / (float)l->micro;
      l->p[1] -= 0.1f * l->g[1] / (float)l->micro;
      c->global_step++;
      l->opt_steps++;
      stepped = 1;
      ol_fire(l, HK_ON_AFTER_OPTIMIZER_STEP);
    }
    l->g[0] = l->g[1] = 0;
    l->micro = 0;
  }
  c->samples_seen++;
  return stepped;
}
static int ol_validates_after(const ol *l, int64_t b, int stepped) {
  return (l->val_every > 0 && stepped && l->ctx.global_step % l->val_every == 0) || (l->val_epoch_end && b == l->batches - 1);
}

/* The entered fit: tr_run_enter .. tr_run_leave, every event fired here. */
static tr_err ol_fit_entered(ol *l, const char *resume) {
  hk_registry *reg = l->reg;
  hk_ctx *c = &l->ctx;
  tr_run *run = ol_run(l);
  int stop = 0;
  int64_t e, b;
  tr_err rc = tr_run_enter(reg, c, HK_STAGE_FIT, resume);
  if (rc) return rc;
  assert_int_equal(c->stage, HK_STAGE_FIT);
  ol_fire(l, HK_SETUP);
  ol_fire(l, HK_CONFIGURE_MODEL);
  if (resume && resume[0] && !ol_failed(l)) { /* the loop restores its checkpoint, then says so */
    if (tr_run_load(reg, c, resume) != TR_OK) tr_run_fail(reg, TR_ERR_IO, "%s", tr_run_error(reg));
    else tr_run_resumed(reg, c);
  }
  ol_fire(l, HK_ON_FIT_START);
  if (l->sanity && !ol_failed(l)) ol_sanity(l);
  ol_fire(l, HK_ON_TRAIN_START);
  for (e = c->epoch; e < l->epochs && !stop && !ol_failed(l); e++) {
    /* a checkpoint written after a batch (or its validation) resumes at the next batch of its epoch, whose
       start has fired (one written at an epoch's end: tr_run_load moved ctx->epoch on) */
    int64_t first = resume && resume[0] && e == c->epoch && c->global_step > 0 &&
                    (run->resumed_at == TR_RUN_AT_BATCH || run->resumed_at == TR_RUN_AT_VALIDATION) ? c->batch_idx + 1 : 0;
    c->epoch = e;
    run->epoch_done = first >= l->batches;
    run->train_batches = l->batches;
    if (first == 0) ol_fire(l, HK_ON_TRAIN_EPOCH_START);
    if (e < 16) l->accumulation_at[e] = run->accumulation;
    for (b = first; b < l->batches && !stop && !ol_failed(l); b++) {
      int64_t before = c->global_step;
      int stepped = ol_batch_work(l, b), val;
      unsigned next;
      if (e < 16 && stepped) l->steps_in_epoch[e]++;
      if (b == l->batches - 1 && l->set_epoch_done) run->epoch_done = 1;
      val = ol_validates_after(l, b, stepped);
      if (l->set_validates_next) run->validates_next = val;
      ol_fire(l, HK_ON_TRAIN_BATCH_END);
      run->validates_next = 0;
      if (ol_failed(l)) break;
      if (l->log_every > 0 && c->global_step > before && c->global_step % l->log_every == 0)
        (void)tr_run_log(reg, c, "train");
      next = tr_run_requests(reg, c, &l->flow);
      l->requested |= next;
      if (val || (next & TR_RUN_VALIDATE)) {
        ol_validate_entered(l);
        if (!ol_failed(l)) l->requested |= tr_run_requests(reg, c, &l->flow);
      }
      hk_flow_clear(&l->flow, HK_FLOW_BATCH_SIGNALS);
      if (HK_FLOW_HAS(&l->flow, HK_FLOW_STOP)) stop = 1;
    }
    if (ol_failed(l)) break;
    ol_fire(l, HK_ON_TRAIN_EPOCH_END);
    run->epoch_done = 0;
    l->epochs_run++;
    if (!ol_failed(l)) l->requested |= tr_run_requests(reg, c, &l->flow);
    if (HK_FLOW_HAS(&l->flow, HK_FLOW_STOP)) stop = 1;
  }
  if (!ol_failed(l)) {
    ol_fire(l, HK_ON_TRAIN_END);
    if (!ol_failed(l)) (void)tr_run_requests(reg, c, &l->flow);
    ol_fire(l, HK_ON_FIT_END);
  }
  rc = TR_OK;
  if (ol_failed(l)) { /* the failure path: on_exception with abort_reason, then teardown */
    char why[512];
    snprintf(why, sizeof why, "%s", tr_run_error(reg));
    rc = TR_ERR_HOOK;
    c->abort_reason = why;
    (void)HK_FIRE(reg, HK_ON_EXCEPTION, c);
    (void)HK_FIRE(reg, HK_TEARDOWN, c);
    c->abort_reason = NULL;
  } else (void)HK_FIRE(reg, HK_TEARDOWN, c);
  tr_run_leave(reg, c);
  assert_int_equal(run->running, HK_STAGE_NONE);
  return rc;
}

/* The same loop started: tr_run_start, tr_run_epoch_start, tr_run_batch_end (again after a validation),
   tr_run_epoch_end, tr_run_finish. */
static void ol_validate_started(ol *l) {
  hk_ctx *c = &l->ctx;
  HK_FIRE_FLOW(l->reg, HK_ON_VALIDATION_START, c, &l->flow);
  HK_FIRE_FLOW(l->reg, HK_ON_VALIDATION_EPOCH_START, c, &l->flow);
  hk_metric_set(c, "val/loss", ol_val_value(l));
  l->n_val++;
  HK_FIRE_FLOW(l->reg, HK_ON_VALIDATION_EPOCH_END, c, &l->flow);
  tr_run_log(l->reg, c, "val");
  HK_FIRE_FLOW(l->reg, HK_ON_VALIDATION_END, c, &l->flow);
}
static tr_err ol_fit_started(ol *l, const char *resume) {
  hk_registry *reg = l->reg;
  hk_ctx *c = &l->ctx;
  unsigned next = tr_run_start(reg, c, resume) ? TR_RUN_STOP : 0;
  int64_t e, b;
  for (e = c->epoch; e < l->epochs && !(next & TR_RUN_STOP); e++) {
    c->epoch = e;
    for (b = tr_run_epoch_start(reg, c, &l->flow, l->batches); b < l->batches; b++) {
      int stepped = ol_batch_work(l, b), val = ol_validates_after(l, b, stepped);
      if (e < 16 && stepped) l->steps_in_epoch[e]++;
      if (l->set_validates_next) ol_run(l)->validates_next = val;
      HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_END, c, &l->flow);
      ol_run(l)->validates_next = 0;
      next = tr_run_batch_end(reg, c, &l->flow);
      if (val || (next & TR_RUN_VALIDATE)) {
        ol_validate_started(l);
        next |= tr_run_batch_end(reg, c, &l->flow);
      }
      hk_flow_clear(&l->flow, HK_FLOW_BATCH_SIGNALS);
      if (next & TR_RUN_STOP) break;
    }
    if (e < 16) l->accumulation_at[e] = ol_run(l)->accumulation;
    if (ol_failed(l)) break;
    HK_FIRE_FLOW(reg, HK_ON_TRAIN_EPOCH_END, c, &l->flow);
    l->epochs_run++;
    next |= tr_run_epoch_end(reg, c, &l->flow);
    hk_flow_clear(&l->flow, HK_FLOW_EPOCH_SIGNALS);
  }
  return tr_run_finish(reg, c, TR_OK);
}

/* ---- an event trace ----------------------------------------------------------------------------- */
static char g_trace[4096];
static hk_signal trace(hk_ctx *ctx, void *u) {
  size_t n = strlen(g_trace);
  (void)u;
  snprintf(g_trace + n, sizeof g_trace - n, "%s%s", n ? " " : "", hk_event_name(ctx->reg, ctx->event));
  return HK_CONTINUE;
}
static void trace_events(hk_registry *reg) {
  static const int evs[] = { HK_SETUP, HK_CONFIGURE_MODEL, HK_ON_FIT_START, HK_ON_SANITY_CHECK_START, HK_ON_SANITY_CHECK_END,
                             HK_ON_TRAIN_START, HK_ON_TRAIN_EPOCH_START, HK_ON_TRAIN_EPOCH_END, HK_ON_VALIDATION_END,
                             HK_ON_TRAIN_END, HK_ON_FIT_END, HK_ON_EXCEPTION, HK_TEARDOWN };
  size_t i;
  g_trace[0] = 0;
  for (i = 0; i < sizeof evs / sizeof evs[0]; i++) assert_int_equal(hk_on(reg, evs[i], trace, NULL, NULL, NULL), HK_OK);
}

/* =================================================================================================
   1. tr_run_enter / tr_run_leave
   ================================================================================================= */
static void test_entered_loop_with_sanity_check(void **state) {
  static const double script[] = { 3.0, 2.0 };
  char dir[300], spec[700], path[700], *csv;
  ol l;
  (void)state;
  path_of(dir, sizeof dir, "entered");
  ol_init(&l, (tr_run_desc){ .save_dir = dir, .name = "", .version = "v", .max_epochs = 2 });
  snprintf(spec, sizeof spec, "csv; early_stopping(monitor=val/loss, patience=5); "
           "model_checkpoint(monitor=val/loss, dirpath=\"%s/ckpt\", filename=\"{epoch}\")", dir);
  assert_int_equal(hk_spec_apply(l.reg, spec), HK_OK);
  trace_events(l.reg);
  l.epochs = 2;
  l.batches = 2;
  l.sanity = 1;
  l.val_epoch_end = 1;
  l.log_every = 1;
  l.val_script = script;
  assert_int_equal(ol_fit_entered(&l, NULL), TR_OK);
  assert_string_equal(tr_run_error(l.reg), "");
  assert_string_equal(g_trace, "setup configure_model on_fit_start on_sanity_check_start on_validation_end "
                      "on_sanity_check_end on_train_start on_train_epoch_start on_validation_end on_train_epoch_end "
                      "on_train_epoch_start on_validation_end on_train_epoch_end on_train_end on_fit_end teardown");
  assert_int_equal(l.ctx.global_step, 4);
  /* csv got the train records through tr_run_log (step is Lightning's: steps before the batch) and the two
     validations' records; the sanity check's val/loss (99) reached no logger */
  csv = run_file(dir, "metrics.csv");
  assert_string_equal(csv, "epoch,step,train/loss,val/loss\n0,0,2,\n0,1,1.6400000190734865,\n0,1,,3\n"
                           "1,2,1.4095999816894533,\n1,3,1.2621439638671887,\n1,3,,2\n");
  free(csv);
  /* model_checkpoint saved (through tr_run_save: no save_checkpoint) at both epochs; best: epoch 1's 2.0 */
  snprintf(path, sizeof path, "%s/ckpt/epoch=1.ckpt", dir);
  assert_string_equal(tr_model_checkpoint_get(l.reg, hk_spec_find(l.reg, "model_checkpoint", 0))->best_model_path, path);
  assert_true(exists(path));
  assert_true(tr_model_checkpoint_get(l.reg, hk_spec_find(l.reg, "model_checkpoint", 0))->best_model_score == 2.0);
  assert_true(tr_early_stopping_get(l.reg, hk_spec_find(l.reg, "early_stopping", 0))->best_score == 2.0);
  ol_free(&l);
}

static void test_entered_calls_out_of_order(void **state) {
  hk_registry *reg;
  hk_ctx ctx, other;
  hk_flow flow = { 0 };
  ol l;
  (void)state;
  memset(&ctx, 0, sizeof ctx);
  memset(&other, 0, sizeof other);
  /* no run: tr_run_requests refused, tr_run_leave harmless (with and without ctx) */
  assert_non_null(reg = hk_create(NULL));
  assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .no_signals = 1 }), TR_OK);
  tr_run_leave(reg, &ctx);
  tr_run_leave(reg, NULL);
  tr_run_leave(NULL, &ctx);
  assert_int_equal(tr_run_get(reg)->running, HK_STAGE_NONE);
  hk_request(&ctx, HK_REQUEST_VALIDATION);
  assert_int_equal(tr_run_requests(reg, &ctx, &flow), 0u);
  refused_with(reg, "tr_run_requests: no run is going", "tr_run_enter");
  assert_int_equal(tr_run_requests(NULL, &ctx, &flow), 0u);
  /* a stage no run has */
  assert_int_equal(tr_run_enter(reg, &ctx, HK_STAGE_NONE, NULL), TR_ERR_INVALID);
  refused_with(reg, "tr_run_enter: the stage is", NULL);
  assert_int_equal(tr_run_enter(reg, &ctx, HK_STAGE_SANITY_CHECK, NULL), TR_ERR_INVALID);
  assert_int_equal(tr_run_enter(reg, NULL, HK_STAGE_FIT, NULL), TR_ERR_INVALID);
  refused_with(reg, "ctx is NULL", NULL);
  assert_int_equal(tr_run_get(reg)->running, HK_STAGE_NONE);

  /* entered: what a started run's loop calls is refused, the run goes on */
  assert_int_equal(tr_run_enter(reg, &ctx, HK_STAGE_FIT, NULL), TR_OK);
  assert_int_equal(tr_run_get(reg)->running, HK_STAGE_FIT);
  assert_ptr_equal(ctx.reg, reg);
  assert_int_equal(ctx.stage, HK_STAGE_FIT);
  assert_int_equal(tr_run_enter(reg, &other, HK_STAGE_VALIDATE, NULL), TR_ERR_INVALID); /* a second one */
  refused_with(reg, "tr_run_enter: a fit run is going already", "tr_run_leave ends it first");
  assert_int_equal(tr_run_start(reg, &other, NULL), TR_ERR_INVALID);
  refused_with(reg, "tr_run_start: a fit run is going already", "tr_run_enter began it");
  assert_int_equal(tr_run_batch_end(reg, &ctx, &flow), (unsigned)TR_RUN_STOP);
  refused_with(reg, "tr_run_batch_end: this fit run was entered with tr_run_enter", "tr_run_start");
  assert_int_equal(tr_run_epoch_end(reg, &ctx, &flow), (unsigned)TR_RUN_STOP);
  refused_with(reg, "tr_run_epoch_end:", "tr_run_enter");
  assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_ERR_INVALID);
  refused_with(reg, "tr_run_finish:", "tr_run_enter");
  assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .max_steps = 3 }), TR_ERR_INVALID);
  refused_with(reg, "tr_run_setup", NULL);
  assert_int_equal(tr_run_hparam(reg, "k", "v"), TR_ERR_INVALID);
  assert_false(tr_run_get(reg)->failed);            /* refusals leave the run going */
  assert_int_equal(tr_run_get(reg)->running, HK_STAGE_FIT);
  hk_request(&ctx, HK_REQUEST_VALIDATION);
  assert_int_equal(tr_run_requests(reg, &ctx, &flow), (unsigned)TR_RUN_VALIDATE);
  assert_int_equal(ctx.requests, 0u);
  assert_int_equal(tr_run_requests(reg, &ctx, &flow), 0u); /* cleared */
  tr_run_leave(reg, &ctx);
  assert_int_equal(tr_run_get(reg)->running, HK_STAGE_NONE);
  tr_run_leave(reg, &ctx);                          /* again: nothing */
  assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_ERR_INVALID);
  refused_with(reg, "tr_run_finish: no run is going", NULL);
  /* entered again after the leave: fine; a validate run too */
  assert_int_equal(tr_run_enter(reg, &ctx, HK_STAGE_VALIDATE, ""), TR_OK);
  assert_string_equal(tr_run_get(reg)->resume_from, "");
  assert_int_equal(tr_stop_allowed(&ctx), 1);       /* outside a fit */
  tr_run_leave(reg, &ctx);
  hk_ctx_free(&ctx);
  hk_ctx_free(&other);
  hk_destroy(reg);

  /* started: tr_run_enter refused with the message naming tr_run_finish; tr_run_leave leaves it going */
  ol_init(&l, (tr_run_desc){ .epochs = TR_NO });
  memset(&other, 0, sizeof other);
  assert_int_equal(tr_run_start(l.reg, &l.ctx, NULL), TR_OK);
  assert_int_equal(tr_run_enter(l.reg, &other, HK_STAGE_FIT, NULL), TR_ERR_INVALID);
  refused_with(l.reg, "tr_run_enter: a fit run is going already (tr_run_start began it)", "tr_run_finish ends it first");
  tr_run_leave(l.reg, &l.ctx);
  assert_int_equal(ol_run(&l)->running, HK_STAGE_FIT);
  l.ctx.batch_idx = 0;
  (void)ol_batch_work(&l, 0);
  HK_FIRE_FLOW(l.reg, HK_ON_TRAIN_BATCH_END, &l.ctx, &l.flow);
  assert_int_equal(tr_run_batch_end(l.reg, &l.ctx, &l.flow), 0u);
  hk_request(&l.ctx, HK_REQUEST_VALIDATION);       /* tr_run_requests is the started loop's too */
  assert_int_equal(tr_run_requests(l.reg, &l.ctx, &l.flow), (unsigned)TR_RUN_VALIDATE);
  assert_int_equal(tr_run_finish(l.reg, &l.ctx, TR_OK), TR_OK);
  assert_int_equal(l.ctx.global_step, 1);
  hk_ctx_free(&other);
  ol_free(&l);
}

/* tr_run_requests from a hook of on_log is refused (the run layer is sending a record) */
static unsigned g_from_log;
static int g_from_log_calls;
static hk_signal requests_from_log(hk_ctx *ctx, void *u) {
  hk_flow f = { 0 };
  (void)u;
  g_from_log_calls++;
  hk_request(ctx, HK_REQUEST_VALIDATION);
  g_from_log = tr_run_requests(ctx->reg, ctx, &f);
  return HK_CONTINUE;
}
static void test_requests_from_on_log_refused(void **state) {
  ol l;
  (void)state;
  ol_init(&l, (tr_run_desc){ 0 });
  assert_int_equal(hk_on(l.reg, HK_ON_LOG, requests_from_log, NULL, NULL, NULL), HK_OK);
  l.log_every = 1;
  l.batches = 1;
  g_from_log = 7;
  g_from_log_calls = 0;
  assert_int_equal(ol_fit_entered(&l, NULL), TR_OK);
  assert_int_equal(g_from_log_calls, 2);            /* the train record, then the validation's */
  assert_int_equal(g_from_log, 0u);
  refused_with(l.reg, "tr_run_requests: called from a hook while on_log of a record", NULL);
  assert_int_equal(l.requested & TR_RUN_VALIDATE, (unsigned)TR_RUN_VALIDATE); /* the loop's own call honours it */
  ol_free(&l);
}

/* A resume of the entered loop: tr_run_enter names the checkpoint, the loop restores it (tr_run_load) and
   tr_run_resumed says so, once; without a checkpoint named, without a run, or in a run tr_run_start began,
   tr_run_resumed is refused and says nothing (it said "... at (?)" and "resumed" a run that never was). */
static void test_entered_resume(void **state) {
  char dir[300], spec[700], path[700], *text;
  FILE *log = tmpfile();
  ol l;
  (void)state;
  assert_non_null(log);
  path_of(dir, sizeof dir, "resume");
  snprintf(path, sizeof path, "%s/last.ckpt", dir);
  ol_init(&l, (tr_run_desc){ .log = log });
  snprintf(spec, sizeof spec, "model_checkpoint(dirpath=\"%s\", every_n_train_steps=2, save_top_k=0, save_last=true); "
           "early_stopping(monitor=loss, check_on_train_epoch_end=true)", dir);
  assert_int_equal(hk_spec_apply(l.reg, spec), HK_OK);
  l.batches = 4;
  hk_metric_set(&l.ctx, "loss", 1.0);
  assert_int_equal(ol_fit_entered(&l, NULL), TR_OK);
  assert_true(exists(path));
  tr_run_resumed(l.reg, &l.ctx);                    /* no run */
  refused_with(l.reg, "tr_run_resumed: no run is going", NULL);
  assert_int_equal(tr_run_enter(l.reg, &l.ctx, HK_STAGE_FIT, NULL), TR_OK);
  tr_run_resumed(l.reg, &l.ctx);                    /* no checkpoint named */
  refused_with(l.reg, "tr_run_resumed: tr_run_enter named no checkpoint", NULL);
  tr_run_leave(l.reg, &l.ctx);
  assert_int_equal(tr_run_start(l.reg, &l.ctx, NULL), TR_OK);
  tr_run_resumed(l.reg, &l.ctx);
  refused_with(l.reg, "tr_run_resumed: tr_run_start began this run", NULL);
  assert_int_equal(tr_run_finish(l.reg, &l.ctx, TR_OK), TR_OK);
  text = file_text(log);
  assert_int_equal(count_of(text, "Restored all states"), 0);
  free(text);
  ol_free(&l);

  ol_init(&l, (tr_run_desc){ .log = log });         /* a new process: the same loop resumes */
  assert_int_equal(hk_spec_apply(l.reg, spec), HK_OK);
  l.batches = 4;
  l.epochs = 2;
  hk_metric_set(&l.ctx, "loss", 1.0);
  if (ol_fit_entered(&l, path) != TR_OK) fail_msg("%s", tr_run_error(l.reg));
  text = file_text(log);
  assert_int_equal(count_of(text, "Restored all states from the checkpoint at "), 1);
  assert_non_null(strstr(text, path));
  assert_non_null(strstr(text, ": epoch 0, global step 4, batch 3 of the epoch"));
  free(text);
  assert_true(exists(path));                        /* resume_from is never deleted */
  assert_true(l.p[0] > 0.16f && l.p[0] < 0.17f);    /* 0.8^8: the first run's 4 steps, then 4 more */
  assert_int_equal(l.ctx.global_step, 8);
  assert_int_equal(ol_run(&l)->resumed_at, TR_RUN_AT_BATCH); /* after epoch 0's last batch: its end, then epoch 1 */
  assert_int_equal(l.epochs_run, 2);
  fclose(log);
  ol_free(&l);
}

/* =================================================================================================
   2. tr_run_requests: checkpoints, a log, a validation
   ================================================================================================= */
static char g_req_path[400];
static hk_signal request_at_2(hk_ctx *ctx, void *u) {
  (void)u;
  if (ctx->global_step == 2) {
    assert_int_equal(hk_request_checkpoint(ctx, g_req_path), HK_OK);
    hk_request(ctx, HK_REQUEST_LOG);
  }
  if (ctx->global_step == 3) hk_request(ctx, HK_REQUEST_CHECKPOINT); /* the default path: save_to */
  if (ctx->global_step == 4) hk_request(ctx, HK_REQUEST_VALIDATION);
  return HK_CONTINUE;
}
static void test_requests_through_save_checkpoint(void **state) {
  char save_to[400], *text;
  FILE *log = tmpfile();
  ol l;
  int records[2] = { 0, 0 }; /* train, val */
  (void)state;
  assert_non_null(log);
  path_of(g_req_path, sizeof g_req_path, "req-at-2.ckpt");
  path_of(save_to, sizeof save_to, "req-save-to.ckpt");
  ol_init(&l, (tr_run_desc){ .log = log, .save_to = save_to, .save_checkpoint = ol_save_checkpoint });
  assert_int_equal(hk_on(l.reg, HK_ON_TRAIN_BATCH_END, request_at_2, NULL, NULL, NULL), HK_OK);
  assert_int_equal(hk_on(l.reg, HK_ON_LOG, count_records, records, NULL, NULL), HK_OK);
  l.batches = 5;
  assert_int_equal(ol_fit_entered(&l, NULL), TR_OK);
  assert_int_equal(l.saves, 2);                     /* the loop's own writer, with the path asked for */
  assert_string_equal(l.saved[0], g_req_path);
  assert_string_equal(l.saved[1], save_to);
  assert_int_equal(l.saved_with_abort, 0);
  text = slurp(g_req_path);
  assert_non_null(text);
  assert_string_equal(text, "ol step=2 p0=0.639999986\n");
  free(text);
  assert_true(exists(save_to));
  text = file_text(log);                            /* the log request: a line, and in a fit a training record */
  assert_int_equal(count_of(text, "epoch=0 step=2 batch=1 loss="), 1);
  free(text);
  assert_int_equal(records[0], 1);
  assert_int_equal(records[1], 1);               /* the validation asked for at step 4 */
  assert_int_equal(l.requested, (unsigned)TR_RUN_VALIDATE);
  assert_int_equal(l.n_val, 1);
  fclose(log);
  ol_free(&l);

  /* no save_to: a default request is said and dropped, no save */
  assert_non_null(log = tmpfile());
  ol_init(&l, (tr_run_desc){ .log = log, .save_checkpoint = ol_save_checkpoint });
  assert_int_equal(hk_on(l.reg, HK_ON_TRAIN_BATCH_END, request_at_2, NULL, NULL, NULL), HK_OK);
  l.batches = 3;
  assert_int_equal(ol_fit_entered(&l, NULL), TR_OK);
  assert_int_equal(l.saves, 1);
  text = file_text(log);
  assert_int_equal(count_of(text, "a hook requested a checkpoint but no default path is set"), 1);
  free(text);
  fclose(log);
  ol_free(&l);
}

static void test_failing_save_checkpoint_fails_the_run(void **state) {
  char dir[300];
  hk_handle h;
  ol l;
  (void)state;
  path_of(g_req_path, sizeof g_req_path, "req-fail.ckpt");
  path_of(dir, sizeof dir, "req-fail-oec");
  ol_init(&l, (tr_run_desc){ .save_checkpoint = ol_save_checkpoint });
  assert_int_equal(hk_on(l.reg, HK_ON_TRAIN_BATCH_END, request_at_2, NULL, NULL, NULL), HK_OK);
  assert_int_equal(tr_on_exception_checkpoint(l.reg, &(tr_on_exception_checkpoint_desc){ .dirpath = dir, .verbose = TR_NO }, &h), TR_OK);
  trace_events(l.reg);
  l.batches = 5;
  l.fail_save = 1;
  assert_int_equal(ol_fit_entered(&l, NULL), TR_ERR_HOOK);
  assert_true(ol_failed(&l));
  assert_non_null(strstr(tr_run_error(l.reg), "ol_save_checkpoint: the disk is on fire"));
  assert_non_null(strstr(tr_run_error(l.reg), g_req_path));
  assert_int_equal(l.ctx.global_step, 2);           /* nothing after the failed save's batch */
  assert_int_equal(l.saves, 2);                     /* the request, then on_exception_checkpoint's (failing too) */
  assert_int_equal(l.saved_with_abort, 1);
  assert_non_null(strstr(l.saved_abort, "the disk is on fire"));
  assert_int_equal(tr_on_exception_checkpoint_get(l.reg, h)->last_error, TR_ERR_IO);
  assert_non_null(strstr(g_trace, "on_train_epoch_start on_exception teardown"));
  assert_null(strstr(g_trace, "on_train_end"));
  ol_free(&l);
}

/* =================================================================================================
   3. on_exception_checkpoint through save_checkpoint, abort_reason set
   ================================================================================================= */
static hk_signal fail_at_3(hk_ctx *ctx, void *u) { (void)u; return ctx->global_step == 3 ? hk_fail(ctx, "boom at %lld", (long long)ctx->global_step) : HK_CONTINUE; }
static void test_on_exception_checkpoint_through_save_checkpoint(void **state) {
  char dir[300], path[400], *text;
  hk_handle h;
  int mode;
  (void)state;
  for (mode = 0; mode < 2; mode++) { /* entered, then started */
    ol l;
    tr_err e;
    path_of(dir, sizeof dir, mode ? "oec-started" : "oec-entered");
    snprintf(path, sizeof path, "%s/on_exception.ckpt", dir);
    ol_init(&l, (tr_run_desc){ .save_checkpoint = ol_save_checkpoint });
    assert_int_equal(tr_on_exception_checkpoint(l.reg, &(tr_on_exception_checkpoint_desc){ .dirpath = dir, .verbose = TR_NO }, &h), TR_OK);
    assert_int_equal(hk_on(l.reg, HK_ON_TRAIN_BATCH_END, fail_at_3, NULL, NULL, NULL), HK_OK);
    l.batches = 10;
    e = mode ? ol_fit_started(&l, NULL) : ol_fit_entered(&l, NULL);
    assert_int_equal(e, TR_ERR_HOOK);
    assert_non_null(strstr(tr_run_error(l.reg), "boom at 3"));
    assert_int_equal(l.saves, 1);
    assert_string_equal(l.saved[0], path);
    assert_int_equal(l.saved_with_abort, 1);        /* written during on_exception: abort_reason set */
    assert_non_null(strstr(l.saved_abort, "boom at 3"));
    assert_non_null(text = slurp(path));
    assert_string_equal(text, "ol step=3 p0=0.511999965 abort\n");
    free(text);
    assert_int_equal(tr_on_exception_checkpoint_get(l.reg, h)->saved, 1);
    assert_int_equal(tr_on_exception_checkpoint_get(l.reg, h)->saved_step, 3);
    assert_null(l.ctx.abort_reason);
    ol_free(&l);
  }
}

/* Ctrl-C in a started loop that writes its own checkpoints: the step's state goes to save_to through
   save_checkpoint, as every other checkpoint of the run to that path does (it was written by tr_run_save in
   the run's format, so save_to held one format or the other depending on what asked for it) */
static hk_signal raise_at_2(hk_ctx *ctx, void *u) { (void)u; if (ctx->global_step == 2) raise(SIGINT); return HK_CONTINUE; }
static void test_ctrl_c_saves_through_save_checkpoint(void **state) {
  char save_to[400], *text;
  ol l;
  (void)state;
  path_of(save_to, sizeof save_to, "ctrlc-own.ckpt");
  ol_init(&l, (tr_run_desc){ .save_to = save_to, .save_checkpoint = ol_save_checkpoint });
  {
    tr_run_desc d = ol_run(&l)->desc;
    d.no_signals = 0;                               /* tr_run_start installs the stop signals */
    assert_int_equal(tr_run_setup(l.reg, &d), TR_OK);
  }
  assert_int_equal(hk_on(l.reg, HK_ON_TRAIN_BATCH_START, raise_at_2, NULL, NULL, NULL), HK_OK);
  l.batches = 10;
  assert_int_equal(ol_fit_started(&l, NULL), TR_ERR_INTERRUPTED);
  assert_int_equal(l.ctx.global_step, 3);           /* after the current step */
  assert_non_null(strstr(tr_run_error(l.reg), "its state saved to"));
  assert_int_equal(l.saves, 1);
  assert_string_equal(l.saved[0], save_to);
  assert_int_equal(l.saved_with_abort, 0);          /* the step just ended: a consistent state */
  assert_non_null(text = slurp(save_to));
  assert_string_equal(text, "ol step=3 p0=0.511999965\n");
  free(text);
  ol_free(&l);
}

/* =================================================================================================
   4. settings as hyperparameters
   ================================================================================================= */
static void test_settings_as_hparams(void **state) {
  char dir[300], *yaml, *jl;
  ol l;
  (void)state;
  path_of(dir, sizeof dir, "settings");
  ol_init(&l, (tr_run_desc){ .save_dir = dir, .name = "", .version = "v", .optimizer = "SGD", .max_steps = 4,
                             .settings = "optimizer=sgd lr=0.02 width=64 data=mnist seed=7 tag=run-1",
                             .hparams = "seed=8" });
  assert_int_equal(tr_run_hparam(l.reg, "data", "cifar10"), TR_OK);
  assert_int_equal(tr_run_hparam_num(l.reg, "width", 128), TR_OK);
  assert_int_equal(hk_spec_apply(l.reg, "csv; jsonl"), HK_OK);
  l.batches = 2;
  assert_int_equal(ol_fit_entered(&l, NULL), TR_OK);
  yaml = run_file(dir, "hparams.yaml");
  /* the settings in place of the desc's (no loop, max_steps, log_every_n_steps keys); hparams and
     tr_run_hparam win over a key of them */
  assert_non_null(strstr(yaml, "data: cifar10\nlr: 0.02\noptimizer: sgd\nseed: 8\ntag: run-1\nwidth: 128\nspecs:\n"));
  assert_int_equal(yaml[0], 'd');
  assert_null(strstr(yaml, "max_steps"));
  assert_null(strstr(yaml, "loop:"));
  free(yaml);
  jl = run_file(dir, "metrics.jsonl");
  assert_non_null(strstr(jl, "{\"hparams\":{\"data\":\"cifar10\",\"lr\":0.02,\"optimizer\":\"sgd\",\"seed\":8,"
                             "\"tag\":\"run-1\",\"width\":128,\"specs\":"));
  free(jl);
  ol_free(&l);
}

/* Strings stay strings in hparams.yaml: a string that YAML would read as a number, a boolean or null
   ("1.10", "0123", "true", "no", "null") is quoted, and so is a key that is not plain ("batch size", "Yes"), as jsonl writes it as a JSON string; it was written
   plain, so a reader of hparams.yaml got 1.1, 83 (octal), True ... Numbers and booleans stay plain. */
static void test_hparams_strings_stay_strings(void **state) {
  char dir[300], *yaml, *jl;
  ol l;
  (void)state;
  path_of(dir, sizeof dir, "strings");
  ol_init(&l, (tr_run_desc){ .save_dir = dir, .name = "", .version = "v",
                             .settings = "flag=true mode=no lr=1e-3 steps=10 neg=-2 name=run-1 dotted=.5x" });
  assert_int_equal(tr_run_hparam(l.reg, "release", "1.10"), TR_OK);
  assert_int_equal(tr_run_hparam(l.reg, "code", "0123"), TR_OK);
  assert_int_equal(tr_run_hparam(l.reg, "empty", "null"), TR_OK);
  assert_int_equal(tr_run_hparam(l.reg, "Yes", "Off"), TR_OK);
  assert_int_equal(tr_run_hparam_bool(l.reg, "shuffle", 1), TR_OK);
  assert_int_equal(tr_run_hparam_num(l.reg, "width", 64), TR_OK);
  assert_int_equal(tr_run_hparam_num(l.reg, "batch size", 32), TR_OK);
  assert_int_equal(hk_spec_apply(l.reg, "csv; jsonl"), HK_OK);
  l.batches = 1;
  assert_int_equal(ol_fit_entered(&l, NULL), TR_OK);
  yaml = run_file(dir, "hparams.yaml");
  assert_string_equal(yaml, "\"Yes\": \"Off\"\n\"batch size\": 32\ncode: \"0123\"\ndotted: \".5x\"\nempty: \"null\"\nflag: \"true\"\nlr: 1e-3\n"
                            "mode: \"no\"\nname: run-1\nneg: -2\nrelease: \"1.10\"\nshuffle: true\nsteps: 10\nwidth: 64\n"
                            "specs:\n- \"csv; jsonl\"\n");
  free(yaml);
  jl = run_file(dir, "metrics.jsonl");
  assert_non_null(strstr(jl, "\"code\":\"0123\",\"dotted\":\".5x\",\"empty\":\"null\",\"flag\":\"true\",\"lr\":1e-3,"
                             "\"mode\":\"no\",\"name\":\"run-1\",\"neg\":-2,\"release\":\"1.10\",\"shuffle\":true,"));
  free(jl);
  ol_free(&l);
}

/* The run keeps its own copy of the settings, as of every string of the desc ("strings copied"): a loop
   that builds them in a buffer of its own and frees or reuses it after tr_run_setup still gets them
   recorded. They were kept as the caller's pointer: the loggers read freed memory at setup. */
static void test_settings_copied_by_setup(void **state) {
  char dir[300], *yaml, *words;
  ol l;
  (void)state;
  path_of(dir, sizeof dir, "settings-copied");
  assert_non_null(words = (char *)malloc(64));
  snprintf(words, 64, "width=32 data=mnist");
  ol_init(&l, (tr_run_desc){ .save_dir = dir, .name = "", .version = "v", .settings = words });
  memset(words, 'x', 63);                          /* the loop's buffer reused, then freed */
  free(words);
  assert_string_equal(ol_run(&l)->desc.settings, "width=32 data=mnist");
  assert_int_equal(hk_spec_apply(l.reg, "csv"), HK_OK);
  l.batches = 1;
  assert_int_equal(ol_fit_entered(&l, NULL), TR_OK);
  yaml = run_file(dir, "hparams.yaml");
  assert_non_null(strstr(yaml, "data: mnist\nwidth: 32\nspecs:\n"));
  free(yaml);
  {                                                 /* setup again from the run's own desc (the trainer does so) */
    tr_run_desc d = ol_run(&l)->desc;
    d.max_steps = 9;
    assert_int_equal(tr_run_setup(l.reg, &d), TR_OK);
    assert_string_equal(ol_run(&l)->desc.settings, "width=32 data=mnist");
    d = ol_run(&l)->desc;                           /* (the run's copies of the last one: d's are gone) */
    d.settings = NULL;                              /* and back to the desc's own hyperparameters */
    assert_int_equal(tr_run_setup(l.reg, &d), TR_OK);
    assert_null(ol_run(&l)->desc.settings);
  }
  ol_free(&l);
}

/* =================================================================================================
   5. accumulation
   ================================================================================================= */
static void test_accumulation_scheduler_in_own_loop(void **state) {
  int mode;
  (void)state;
  for (mode = 0; mode < 2; mode++) { /* entered, then started (tr_run_epoch_start fires on_train_epoch_start) */
    ol l;
    hk_handle h;
    ol_init(&l, (tr_run_desc){ 0 });
    assert_int_equal(ol_run(&l)->accumulation, 0);  /* no run yet */
    assert_int_equal(tr_accumulation_scheduler(l.reg, &(tr_accumulation_scheduler_desc){ .scheduling = "{1: 2, 2: 3}" }, &h), TR_OK);
    l.epochs = 3;
    l.batches = 6;
    assert_int_equal(mode ? ol_fit_started(&l, NULL) : ol_fit_entered(&l, NULL), TR_OK);
    assert_int_equal(l.accumulation_at[0], 1);
    assert_int_equal(l.accumulation_at[1], 2);
    assert_int_equal(l.accumulation_at[2], 3);
    assert_int_equal(l.steps_in_epoch[0], 6);
    assert_int_equal(l.steps_in_epoch[1], 3);
    assert_int_equal(l.steps_in_epoch[2], 2);
    assert_int_equal(l.ctx.global_step, 11);
    assert_int_equal(tr_accumulation_scheduler_get(l.reg, h)->factor, 3);
    ol_free(&l);
  }
}
static void test_accumulation_fixed_by_the_loop(void **state) {
  int mode;
  (void)state;
  for (mode = 0; mode < 2; mode++) {
    ol l;
    /* without the scheduler: the run starts at the loop's factor */
    ol_init(&l, (tr_run_desc){ .accumulate_grad_batches = 3 });
    l.batches = 6;
    assert_int_equal(mode ? ol_fit_started(&l, NULL) : ol_fit_entered(&l, NULL), TR_OK);
    assert_int_equal(l.accumulation_at[0], 3);
    assert_int_equal(l.ctx.global_step, 2);
    ol_free(&l);
    /* with it: refused at on_fit_start, the message naming the setting */
    ol_init(&l, (tr_run_desc){ .accumulate_grad_batches = 2 });
    assert_int_equal(hk_spec_apply(l.reg, "accumulation_scheduler(scheduling=\"{0: 4}\")"), HK_OK);
    trace_events(l.reg);
    assert_int_equal(mode ? ol_fit_started(&l, NULL) : ol_fit_entered(&l, NULL), TR_ERR_HOOK);
    assert_non_null(strstr(tr_run_error(l.reg), "accumulation_scheduler"));
    assert_non_null(strstr(tr_run_error(l.reg), "the loop's accumulate_grad_batches is 2"));
    assert_non_null(strstr(tr_run_error(l.reg), "leave it at 0 or 1 when the scheduler sets the factor"));
    assert_int_equal(l.ctx.global_step, 0);         /* refused before training */
    assert_null(strstr(g_trace, "on_train_start"));
    ol_free(&l);
  }
}

/* =================================================================================================
   6. epoch_done: early_stopping with min_epochs, validation after the epoch's last batch
   ================================================================================================= */
static const double g_es_script[] = { 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0 }; /* worse every epoch */
#define ES_SPEC "early_stopping(monitor=val/loss, patience=1, check_on_train_epoch_end=false)"

/* train.h's trainer with the same settings: one parameter, val/loss = the script at the epoch */
typedef struct tmod { float p, g; tr_trainer *t; } tmod;
static int tm_forward(void *user, void *batch, int training, double *loss) {
  tmod *m = (tmod *)user;
  (void)batch;
  *loss = training ? 1.0 + (double)m->p * m->p : g_es_script[m->t->ctx.epoch];
  return 0;
}
static int tm_backward(void *user, void *batch) { tmod *m = (tmod *)user; (void)batch; m->g += 2 * m->p; return 0; }
static int64_t tm_count(void *user) { (void)user; return 3; }
static int tm_get(void *user, int64_t i, void **batch) { (void)user; *batch = (void *)(intptr_t)i; return 0; }
static int64_t fit_epochs(int64_t min_epochs, int64_t *stopped_epoch) {
  tr_trainer t;
  tmod m = { 1.0f, 0, &t };
  tr_desc d;
  tr_data data;
  tr_config c;
  FILE *log = tmpfile();
  memset(&d, 0, sizeof d);
  d.model.params = &m.p;
  d.model.grads = &m.g;
  d.model.n_params = 1;
  d.model.user = &m;
  d.model.forward = tm_forward;
  d.model.backward = tm_backward;
  d.optim.lr = 0.1;
  d.log = log;
  assert_int_equal(tr_init(&t, &d), TR_OK);
  assert_int_equal(hk_spec_apply(t.reg, ES_SPEC), HK_OK);
  data = test_data(tm_count, tm_get, NULL);
  c = test_config(&data, &data, 8);
  c.min_epochs = min_epochs;
  c.num_sanity_val_steps = -1;
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  *stopped_epoch = tr_early_stopping_get(t.reg, hk_spec_find(t.reg, "early_stopping", 0))->stopped_epoch;
  {
    int64_t e = t.global_step / 3;
    tr_free(&t);
    fclose(log);
    return e;
  }
}
static void test_epoch_done_early_stopping_min_epochs(void **state) {
  int64_t fit_stopped, fit_ran, min_epochs;
  (void)state;
  for (min_epochs = 0; min_epochs <= 4; min_epochs += 2) {
    int mode;
    fit_ran = fit_epochs(min_epochs, &fit_stopped);
    /* patience 1: the stop is wanted at epoch 1's check; min_epochs holds it until epoch min_epochs-1 has run */
    assert_int_equal(fit_ran, min_epochs > 2 ? min_epochs : 2);
    for (mode = 0; mode < 3; mode++) { /* entered with epoch_done, started (tr_run_batch_end sets it), entered without */
      ol l;
      const tr_early_stopping_state *es;
      ol_init(&l, (tr_run_desc){ .min_epochs = min_epochs, .max_epochs = 8 });
      assert_int_equal(hk_spec_apply(l.reg, ES_SPEC), HK_OK);
      l.epochs = 8;
      l.batches = 3;
      l.val_epoch_end = 1;
      l.val_script = g_es_script;
      l.set_epoch_done = mode != 2;
      assert_int_equal(mode == 1 ? ol_fit_started(&l, NULL) : ol_fit_entered(&l, NULL), TR_OK);
      es = tr_early_stopping_get(l.reg, hk_spec_find(l.reg, "early_stopping", 0));
      assert_int_equal(es->stopping_reason, TR_STOP_PATIENCE_EXHAUSTED);
      if (mode == 2 && min_epochs > 0) { /* the loop did not say the epoch was done: one epoch late */
        assert_int_equal(l.epochs_run, fit_ran + 1);
        assert_int_equal(es->stopped_epoch, fit_stopped + 1);
      } else {
        if (l.epochs_run != fit_ran || es->stopped_epoch != fit_stopped)
          fail_msg("min_epochs %lld, %s loop: %d epochs (stopped at %lld); tr_fit: %lld (stopped at %lld)", (long long)min_epochs,
                   mode ? "started" : "entered", l.epochs_run, (long long)es->stopped_epoch, (long long)fit_ran, (long long)fit_stopped);
        assert_int_equal(l.ctx.global_step, 3 * fit_ran);
      }
      assert_int_equal(ol_run(&l)->epoch_done, 0);  /* cleared at the end */
      ol_free(&l);
    }
  }
}

/* =================================================================================================
   7. validates_next: a step save ranked on the validation right after it
   ================================================================================================= */
static void test_validates_next_ranks_on_the_validation(void **state) {
  static const double script[] = { 5.0, 1.0, 0.5 }; /* validations at steps 2, 4, 6 */
  int tell, mode;
  (void)state;
  for (mode = 0; mode < 2; mode++)
    for (tell = 0; tell < 2; tell++) {
      char dir[300], spec[700], path[700];
      const tr_model_checkpoint_state *mc;
      ol l;
      char name[40];
      snprintf(name, sizeof name, "vnext-%d-%d", mode, tell);
      path_of(dir, sizeof dir, name);
      ol_init(&l, (tr_run_desc){ .epochs = TR_NO, .max_steps = 4, .check_on_train_epoch_end = TR_NO });
      snprintf(spec, sizeof spec, "model_checkpoint(monitor=val/loss, every_n_train_steps=4, save_top_k=-1, "
               "dirpath=\"%s\", filename=\"{step}-{val/loss:.1f}\")", dir);
      assert_int_equal(hk_spec_apply(l.reg, spec), HK_OK);
      l.batches = 4;
      l.val_every = 2;
      l.val_script = script;
      l.set_validates_next = tell;
      assert_int_equal(mode ? ol_fit_started(&l, NULL) : ol_fit_entered(&l, NULL), TR_OK);
      assert_int_equal(l.n_val, 2);
      mc = tr_model_checkpoint_get(l.reg, hk_spec_find(l.reg, "model_checkpoint", 0));
      assert_int_equal(mc->last_global_step_saved, 4);
      assert_int_equal(mc->n_best_k, 1);
      snprintf(path, sizeof path, "%s/step=4-val_loss=%s.ckpt", dir, tell ? "1.0" : "5.0");
      if (strcmp(mc->best_model_path, path)) fail_msg("%s loop, validates_next %d: saved %s, not %s", mode ? "started" : "entered",
                                                      tell, mc->best_model_path, path);
      assert_true(mc->best_model_score == (tell ? 1.0 : 5.0));
      assert_true(exists(path));
      assert_int_equal(ol_run(&l)->validates_next, 0);
      ol_free(&l);
    }
}

/* =================================================================================================
   8. rolled_back: spike_detection restores desc.state and calls the loop back
   ================================================================================================= */
static void test_rolled_back_after_spike(void **state) {
  /* batches 0..7: good losses fill the window (3), a spike at batch 6 */
  static const double losses[] = { 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 100.0, 1.0, 1.0, 1.0 };
  int mode;
  (void)state;
  for (mode = 0; mode < 2; mode++) {
    FILE *log = tmpfile();
    const tr_spike_detection_state *sd;
    float at_snapshot = 0;
    ol l;
    int64_t i;
    ol_init(&l, (tr_run_desc){ .state = NULL, .n_state = 0, .rolled_back = ol_rolled_back, .log = log });
    {
      tr_run_desc d = ol_run(&l)->desc;
      d.state = l.regions;
      d.n_state = 2;
      assert_int_equal(tr_run_setup(l.reg, &d), TR_OK);
    }
    assert_int_equal(hk_spec_apply(l.reg, "spike_detection(window=3, every_n_steps=2, verbose=false)"), HK_OK);
    l.batches = 9;
    l.loss_script = losses;
    l.n_loss = 10;
    /* p0 after k steps of p -= 0.2 p: 0.8^k; the snapshot after step 6 is 0.8^6 (the spike is the 7th batch) */
    for (at_snapshot = 1.0f, i = 0; i < 6; i++) at_snapshot -= 0.1f * (2 * at_snapshot);
    assert_int_equal(mode ? ol_fit_started(&l, NULL) : ol_fit_entered(&l, NULL), TR_OK);
    sd = tr_spike_detection_get(l.reg, hk_spec_find(l.reg, "spike_detection", 0));
    assert_int_equal(sd->rollbacks, 1);
    assert_int_equal(l.rolled, 1);                  /* the loop's callback, with its model_user and ctx */
    assert_ptr_equal(l.rolled_user, &l);
    assert_ptr_equal(l.rolled_ctx, &l.ctx);
    assert_int_equal(l.rolled_step, 6);             /* ctx->global_step put back to the snapshot's */
    assert_true(l.rolled_p0 == at_snapshot);        /* the state region restored before the callback */
    assert_int_equal(l.opt_steps, l.ctx.global_step); /* the second region came back too */
    assert_int_equal(l.ctx.global_step, 8);         /* 6, the spike undone, then batches 7 and 8 */
    fclose(log);
    ol_free(&l);
  }
}
/* without desc.state the loop's spike_detection is refused at on_train_start */
static void test_spike_detection_without_state_refused(void **state) {
  ol l;
  (void)state;
  ol_init(&l, (tr_run_desc){ .rolled_back = ol_rolled_back });
  assert_int_equal(hk_spec_apply(l.reg, "spike_detection(window=3)"), HK_OK);
  assert_int_equal(ol_fit_entered(&l, NULL), TR_ERR_HOOK);
  assert_non_null(strstr(tr_run_error(l.reg), "spike_detection"));
  assert_int_equal(l.ctx.global_step, 0);
  assert_int_equal(l.rolled, 0);
  ol_free(&l);
}

/* =================================================================================================
   9. tr_run_eval_start / tr_run_eval_end: a validation and a test of a loop of our own, and the run's
   watch on on_after_backward (the gradient norm of this step without hk_grads_changed)
   ================================================================================================= */
typedef struct evw { int starts, ends, test_starts, test_ends, skipped; int64_t seen_idx[8]; int n_seen; double loss_at_end; } evw;
static hk_signal evw_vstart(hk_ctx *ctx, void *u) { (void)ctx; ((evw *)u)->starts++; return HK_CONTINUE; }
static hk_signal evw_vend(hk_ctx *ctx, void *u) { ((evw *)u)->ends++; ((evw *)u)->loss_at_end = ctx->loss; return HK_CONTINUE; }
static hk_signal evw_tstart(hk_ctx *ctx, void *u) { (void)ctx; ((evw *)u)->test_starts++; return HK_CONTINUE; }
static hk_signal evw_tend(hk_ctx *ctx, void *u) { (void)ctx; ((evw *)u)->test_ends++; return HK_CONTINUE; }
static hk_signal evw_vbatch(hk_ctx *ctx, void *u) { /* skips the first batch of each evaluation */
  evw *w = (evw *)u;
  if (w->n_seen < 8) w->seen_idx[w->n_seen++] = ctx->batch_idx;
  if (ctx->batch_idx == 0) { w->skipped++; return HK_SKIP_BATCH; }
  return HK_CONTINUE;
}
static void test_eval_pair(void **state) {
  char dir[300], csv[400];
  hk_registry *reg;
  float p[1] = { 0 }, g[1] = { 0 };
  hk_tensor pv = { "p", p, 1, 0 }, gv = { "p", g, 1, 0 };
  hk_ctx ctx;
  hk_flow flow = { 0 };
  evw w;
  FILE *log = tmpfile();
  char *text;
  int64_t b;
  double v;
  (void)state;
  memset(&ctx, 0, sizeof ctx);
  memset(&w, 0, sizeof w);
  ctx.params = &pv;
  ctx.grads = &gv;
  ctx.n_tensors = 1;
  path_of(dir, sizeof dir, "evalpair");
  assert_non_null(reg = hk_create(NULL));
  assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO, .max_steps = 4, .log_every_n_steps = 1, .save_dir = dir,
                                                     .name = "", .version = "v", .no_signals = 1, .log = log }), TR_OK);
  assert_int_equal(hk_add_callback(reg, &(hk_callback){ .name = "evw", .user = &w, .on_validation_start = evw_vstart,
                                                       .on_validation_end = evw_vend, .on_validation_batch_start = evw_vbatch,
                                                       .on_test_start = evw_tstart, .on_test_end = evw_tend,
                                                       .on_test_batch_start = evw_vbatch }, NULL, NULL), HK_OK);
  assert_int_equal(hk_spec_apply(reg, "csv"), HK_OK);
  /* outside a run: refused, no batch to run */
  assert_int_equal(tr_run_eval_start(reg, &ctx, &flow, "val", 3), 3);
  refused_with(reg, "tr_run_eval_start: no run is going", NULL);
  assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);
  while (ctx.global_step < 4) {
    ctx.batch_idx = ctx.global_step;
    HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_START, &ctx, &flow);
    ctx.loss = 2.0;
    g[0] = (float)(ctx.global_step + 1); /* a new gradient; no hk_grads_changed: the run's watch says it */
    HK_FIRE_FLOW(reg, HK_ON_AFTER_BACKWARD, &ctx, &flow);
    assert_true(hk_grad_norm(&ctx) == (double)(ctx.global_step + 1));
    ctx.global_step++;
    HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_END, &ctx, &flow);
    assert_int_equal(tr_run_batch_end(reg, &ctx, &flow) & TR_RUN_STOP, 0);
    if (ctx.global_step % 2 == 0) {
      double sum = 0;
      int64_t idx = ctx.batch_idx;
      for (b = tr_run_eval_start(reg, &ctx, &flow, "val", 3); b < 3; b++) {
        ctx.batch_idx = b;
        HK_FIRE_FLOW(reg, HK_ON_VALIDATION_BATCH_START, &ctx, &flow);
        if (!HK_FLOW_HAS(&flow, HK_FLOW_SKIP_BATCH)) sum += 1.0 / (double)ctx.global_step;
        HK_FIRE_FLOW(reg, HK_ON_VALIDATION_BATCH_END, &ctx, &flow);
        hk_flow_clear(&flow, HK_FLOW_BATCH_SIGNALS);
        if (b == 0) { /* nested, and ended before begun elsewhere: refused, the evaluation goes on */
          assert_int_equal(tr_run_eval_start(reg, &ctx, &flow, "val", 3), 3);
          refused_with(reg, "tr_run_eval_start: the val evaluation begun before has not ended", NULL);
        }
      }
      assert_int_equal(tr_run_get(reg)->eval_batches, 3);
      flow.signals |= HK_SIGNAL_BIT(HK_SKIP_BATCH); /* the evaluation's own: dropped at its end */
      tr_run_eval_end(reg, &ctx, &flow, sum / 2);
      assert_true(w.loss_at_end == sum / 2); /* hooks see the validation's loss */
      assert_int_equal(ctx.batch_idx, idx);  /* the training batch's view back */
      assert_true(ctx.loss == 2.0);
      assert_false(HK_FLOW_HAS(&flow, HK_FLOW_SKIP_BATCH));
      assert_true(hk_metric_get(&ctx, "val/loss", &v) && v == 1.0 / (double)ctx.global_step);
      assert_int_equal(tr_run_batch_end(reg, &ctx, &flow) & TR_RUN_STOP, 0);
    }
    hk_flow_clear(&flow, HK_FLOW_BATCH_SIGNALS);
  }
  tr_run_eval_end(reg, &ctx, &flow, 1.0);
  refused_with(reg, "tr_run_eval_end: no evaluation is going", NULL);
  assert_int_equal(tr_run_eval_start(reg, &ctx, &flow, "train", 3), 3);
  refused_with(reg, "the stage 'train' is not \"val\" or \"test\"", NULL);
  assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_OK);
  assert_int_equal(w.starts, 2);
  assert_int_equal(w.ends, 2);
  assert_int_equal(w.skipped, 2);
  assert_int_equal(w.seen_idx[0], 0);
  assert_int_equal(w.seen_idx[2], 2);
  /* a test run after the fit: entered, the test's events, its record */
  assert_int_equal(tr_run_enter(reg, &ctx, HK_STAGE_TEST, NULL), TR_OK);
  for (b = tr_run_eval_start(reg, &ctx, &flow, "test", 2); b < 2; b++) {
    ctx.batch_idx = b;
    HK_FIRE_FLOW(reg, HK_ON_TEST_BATCH_START, &ctx, &flow);
    HK_FIRE_FLOW(reg, HK_ON_TEST_BATCH_END, &ctx, &flow);
    hk_flow_clear(&flow, HK_FLOW_BATCH_SIGNALS);
  }
  tr_run_eval_end(reg, &ctx, &flow, 0.125);
  tr_run_leave(reg, &ctx);
  assert_int_equal(w.test_starts, 1);
  assert_int_equal(w.test_ends, 1);
  assert_true(hk_metric_get(&ctx, "test/loss", &v) && v == 0.125);
  hk_ctx_free(&ctx);
  hk_destroy(reg);
  snprintf(csv, sizeof csv, "%s/v/metrics.csv", dir);
  assert_non_null(text = slurp(csv));
  if (!strstr(text, "val/loss") || !strstr(text, "test/loss") || !strstr(text, "0.5") || !strstr(text, "0.25") || !strstr(text, "0.125"))
    fail_msg("metrics.csv lacks the evaluations' records:\n%s", text);
  assert_int_equal(count_of(text, "\n"), 1 + 4 + 2 + 1); /* the header, 4 train, 2 val and 1 test records */
  free(text);
  fclose(log);
}

/* =================================================================================================
   10. tr_run_desc.spec applied by tr_run_setup (once, all or nothing), and the safe points clearing the
   batch's (epoch's) signals of the loop's flow
   ================================================================================================= */
static void test_spec_in_desc_and_flow_cleared(void **state) {
  hk_registry *reg;
  hk_ctx ctx;
  hk_flow flow = { 0 };
  tr_run_desc d;
  FILE *log = tmpfile();
  (void)state;
  memset(&ctx, 0, sizeof ctx);
  assert_non_null(reg = hk_create(NULL));
  memset(&d, 0, sizeof d);
  d.epochs = TR_YES;
  d.max_epochs = 2;
  d.no_signals = 1;
  d.log = log;
  d.spec = "early_stopping(monitor=val/loss, patience=9); nan_guard";
  assert_int_equal(tr_run_setup(reg, &d), TR_OK);
  assert_true(hk_spec_find(reg, "early_stopping", 0) != 0 && hk_spec_find(reg, "nan_guard", 0) != 0);
  assert_null(tr_run_get(reg)->desc.spec); /* not kept */
  d = tr_run_get(reg)->desc;               /* set again from the run's own: nothing applied twice */
  d.max_epochs = 3;
  assert_int_equal(tr_run_setup(reg, &d), TR_OK);
  assert_true(hk_spec_find(reg, "early_stopping", 1) == 0);
  d.spec = "early_stopping(monitr=val/loss)"; /* a bad spec: refused, naming it; the settings stay; nothing added */
  d.max_epochs = 4;
  assert_int_equal(tr_run_setup(reg, &d), TR_ERR_INVALID);
  refused_with(reg, "tr_run_setup: the spec: ", "monitr");
  assert_int_equal(tr_run_get(reg)->desc.max_epochs, 4);
  assert_true(hk_spec_find(reg, "early_stopping", 1) == 0);
  /* the safe points clear the loop's flow: the batch's signals at tr_run_batch_end, the epoch's at tr_run_epoch_end */
  assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);
  assert_int_equal(tr_run_epoch_start(reg, &ctx, &flow, 1), 0);
  HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_START, &ctx, &flow);
  ctx.loss = 1.0;
  HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_END, &ctx, &flow);
  flow.signals |= HK_SIGNAL_BIT(HK_SKIP_BATCH) | HK_SIGNAL_BIT(HK_SKIP_STEP) | HK_SIGNAL_BIT(HK_STOP_EPOCH); /* (as hooks raise them) */
  assert_int_equal(tr_run_batch_end(reg, &ctx, &flow) & TR_RUN_STOP, 0);
  assert_int_equal(flow.signals & HK_FLOW_BATCH_SIGNALS, 0);
  assert_true(flow.signals & HK_SIGNAL_BIT(HK_STOP_EPOCH)); /* the epoch's: kept to its end */
  assert_int_equal(hk_metric_set(&ctx, "val/loss", 1.0), HK_OK); /* early_stopping checks it at the epoch's end */
  HK_FIRE_FLOW(reg, HK_ON_TRAIN_EPOCH_END, &ctx, &flow);
  (void)tr_run_epoch_end(reg, &ctx, &flow);
  assert_int_equal(flow.signals & HK_FLOW_EPOCH_SIGNALS, 0);
  assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_OK);
  hk_ctx_free(&ctx);
  hk_destroy(reg);
  fclose(log);
}

/* A resume from a checkpoint that cannot be read is refused before anything fires or is made on disk. */
static int g_setups;
static hk_signal count_setup(hk_ctx *ctx, void *u) { (void)ctx; (void)u; g_setups++; return HK_CONTINUE; }
static void test_unreadable_resume_refused_first(void **state) {
  char dir[300], bad[400], missing[400];
  hk_registry *reg;
  hk_ctx ctx;
  FILE *f, *log = tmpfile();
  int k;
  (void)state;
  path_of(dir, sizeof dir, "badresume");
  snprintf(bad, sizeof bad, "%s.ckpt", dir);
  snprintf(missing, sizeof missing, "%s-missing.ckpt", dir);
  assert_non_null(f = fopen(bad, "w"));
  fputs("not a checkpoint\n", f);
  fclose(f);
  for (k = 0; k < 2; k++) {
    memset(&ctx, 0, sizeof ctx);
    g_setups = 0;
    assert_non_null(reg = hk_create(NULL));
    assert_int_equal(tr_run_setup(reg, &(tr_run_desc){ .save_dir = dir, .no_signals = 1, .log = log, .save_model = ol_save,
                                                       .load_model = ol_load, .spec = "csv" }), TR_OK);
    assert_int_equal(hk_on(reg, HK_SETUP, count_setup, NULL, NULL, NULL), HK_OK);
    assert_int_equal(tr_run_start(reg, &ctx, k ? bad : missing), k ? TR_ERR_FORMAT : TR_ERR_NOT_FOUND);
    refused_with(reg, k ? "was not written by tr_run_save" : "cannot open", k ? bad : missing);
    assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), k ? TR_ERR_FORMAT : TR_ERR_NOT_FOUND);
    assert_int_equal(g_setups, 0);
    assert_false(exists(dir)); /* no run directory for a run that never began */
    hk_ctx_free(&ctx);
    hk_destroy(reg);
  }
  remove(bad);
  fclose(log);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_entered_loop_with_sanity_check),
    cmocka_unit_test(test_entered_calls_out_of_order),
    cmocka_unit_test(test_requests_from_on_log_refused),
    cmocka_unit_test(test_entered_resume),
    cmocka_unit_test(test_requests_through_save_checkpoint),
    cmocka_unit_test(test_failing_save_checkpoint_fails_the_run),
    cmocka_unit_test(test_on_exception_checkpoint_through_save_checkpoint),
    cmocka_unit_test(test_ctrl_c_saves_through_save_checkpoint),
    cmocka_unit_test(test_settings_as_hparams),
    cmocka_unit_test(test_settings_copied_by_setup),
    cmocka_unit_test(test_hparams_strings_stay_strings),
    cmocka_unit_test(test_accumulation_scheduler_in_own_loop),
    cmocka_unit_test(test_accumulation_fixed_by_the_loop),
    cmocka_unit_test(test_epoch_done_early_stopping_min_epochs),
    cmocka_unit_test(test_validates_next_ranks_on_the_validation),
    cmocka_unit_test(test_rolled_back_after_spike),
    cmocka_unit_test(test_spike_detection_without_state_refused),
    cmocka_unit_test(test_eval_pair),
    cmocka_unit_test(test_spec_in_desc_and_flow_cleared),
    cmocka_unit_test(test_unreadable_resume_refused_first),
  };
  return run_tests_in_dir(tests, "test_run_api", g_root);
}
